//! # lanner-proto: the Lanner protocol core
//!
//! Everything Lanner puts on the wire, with no I/O and no async runtime: frame encoding and
//! decoding ([`Frame`], [`MessageBuilder`], [`FrameSplitter`]), the connection state
//! machine ([`Connection`]: handshake, call accounting, flow-control credits) and the
//! limits that keep a misbehaving peer in check ([`Limits`]).
//!
//! The runtime feeds received frames in and gets events out; it asks the state machine to
//! stamp outgoing messages. Nothing here panics on any input: every decoder returns a
//! precise [`FrameError`] or [`ProtocolError`], and the decoders are fuzzed.
//!
//! Bulk payloads are never copied here: an outgoing message keeps its bulk segments as the
//! caller's buffers ([`OutFrame`]), and a received payload's segments are slices of the
//! received frame ([`Payload`]).
//!
//! See [`frame`] for the wire layout.

// The bounds checks on what a peer sends rely on it: lengths a peer declares (up to 2^16 segments of up to 2^32 bytes each) are added up in `usize` without
// checked arithmetic, which cannot overflow only with 64 bits. On a narrower target a
// hostile peer could make that arithmetic overflow (a panic, or a wrong bound).
#[cfg(not(target_pointer_width = "64"))]
compile_error!("lanner-proto supports 64-bit targets only (see the comment above this line)");

pub mod auth;
pub mod builder;
pub mod connection;
pub mod error;
pub mod frame;
mod head_pool;
pub mod in_place;
pub mod limits;
pub mod out_frame;
pub mod payload;
pub mod plain;
pub mod splitter;
pub mod status;

#[cfg(any(test, feature = "harness"))]
pub mod fuzzing;
#[cfg(any(test, feature = "harness"))]
pub mod harness;

pub use auth::{
    AuthError, ClientAuthenticator, Mechanism, Principal, ServerAuthenticator,
    TransportAuthentication,
};
pub use builder::{InlineWriter, MessageBuilder};
pub use connection::{Connection, Event, HANDSHAKE_MAX_FRAME_SIZE, Role};
pub use error::{FrameError, ProtocolError, SendError};
pub use frame::{Close, Frame, FrameKind, Grant, Hello, Release, Request, Response, Welcome};
pub use limits::{Limits, PROTOCOL_VERSION};
pub use out_frame::OutFrame;
pub use payload::{ExternalSegments, Payload};
pub use plain::{PlainHead, PlainRequest, stamp_plain_response};
pub use splitter::FrameSplitter;
pub use status::Status;

#[cfg(test)]
mod tests;
