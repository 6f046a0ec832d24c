//! Precise errors of the protocol core.

use crate::frame::FrameKind;
use crate::status::Status;

/// A frame that cannot be decoded. Every variant names what was wrong so that the peer's
/// bug can be found from the log line alone.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// Fewer bytes than the frame's kind requires.
    #[error("truncated {kind} frame: needs at least {need} bytes, got {have}")]
    Truncated {
        /// The kind of the frame (or `header` if not even the header was complete).
        kind: &'static str,
        /// Minimum length for that kind.
        need: usize,
        /// Bytes present.
        have: usize,
    },
    /// The length field disagrees with the bytes actually delivered.
    #[error("frame length field says {declared} bytes but the frame has {actual}")]
    LengthMismatch {
        /// Length from the header.
        declared: u64,
        /// Bytes present.
        actual: u64,
    },
    /// The length field is smaller than the fixed header.
    #[error("frame length {len} is smaller than the {min}-byte header")]
    LengthTooSmall {
        /// Length from the header.
        len: u32,
        /// Header size.
        min: usize,
    },
    /// The frame exceeds the negotiated maximum.
    #[error("frame of {len} bytes exceeds the maximum frame size of {max} bytes")]
    TooLarge {
        /// Length from the header.
        len: u64,
        /// The limit in force.
        max: u32,
    },
    /// A kind byte this protocol version does not define.
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    /// A frame kind that carries no bulk segments declared some.
    #[error("{kind} frame declares {count} bulk segments but carries none by definition")]
    UnexpectedSegments {
        /// The frame kind.
        kind: FrameKind,
        /// The declared count.
        count: u16,
    },
    /// More bulk segments than [`crate::limits::MAX_BULK_SEGMENTS`].
    #[error("{count} bulk segments exceed the limit of {max}")]
    TooManySegments {
        /// The declared count.
        count: u16,
        /// The limit.
        max: u16,
    },
    /// The inline part or segment table runs past the end of the frame.
    #[error(
        "inline length {inline_len} and {segments} segment lengths do not fit in the {available} bytes after the header"
    )]
    InlineOverflow {
        /// Declared inline length.
        inline_len: u32,
        /// Declared segment count.
        segments: u16,
        /// Bytes after the fixed header.
        available: usize,
    },
    /// A reference table (see [`crate::frame::FLAG_REFERENCES`]) that does not fit in the
    /// inline part it ends.
    #[error("a reference table of {count} handles does not fit in {inline_len} inline bytes")]
    BadReferenceTable {
        /// Declared inline length.
        inline_len: u32,
        /// Handles the table declares (when the inline part could hold its count).
        count: u32,
    },
    /// The bulk segment lengths do not add up to the rest of the frame.
    #[error(
        "bulk segment lengths add up to {declared} bytes but {available} bytes follow the segment table"
    )]
    BulkMismatch {
        /// Sum of the declared lengths.
        declared: u64,
        /// Bytes present.
        available: usize,
    },
    /// A handshake frame without the protocol magic: the peer does not speak Lanner.
    #[error("bad magic {0:02x?}: the peer does not speak the Lanner protocol")]
    BadMagic([u8; 4]),
    /// A handshake names an authentication mechanism this build does not know.
    #[error("unknown authentication mechanism {0}")]
    UnknownMechanism(u8),
    /// A handshake frame carries more authentication data than the protocol allows.
    #[error("{len} bytes of authentication data exceed the limit of {max}")]
    AuthDataTooLong {
        /// Bytes present.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// A close frame's reason is too long or not UTF-8.
    #[error("close frame reason is invalid: {0}")]
    BadReason(&'static str),
    /// Bulk segments the transport delivered apart from their frame (see
    /// [`crate::payload::ExternalSegments`]) do not match the frame's segment table.
    #[error("segments passed by reference do not match the frame: {0}")]
    BadExternal(&'static str),
}

/// A violation of the protocol by the peer, or a local misuse, detected by the connection
/// state machine. After one of these the connection is unusable: send
/// [`ProtocolError::close_frame`] and drop it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A malformed frame.
    #[error("malformed frame: {0}")]
    Frame(#[from] FrameError),
    /// A well-formed frame that is not allowed in the current state.
    #[error("unexpected {kind} frame while {state}")]
    UnexpectedFrame {
        /// The frame kind received.
        kind: FrameKind,
        /// A description of the state.
        state: &'static str,
    },
    /// The peers share no protocol version.
    #[error(
        "protocol version mismatch: this side speaks version {ours}, the peer speaks {theirs_min}..={theirs_max}"
    )]
    VersionMismatch {
        /// Our version.
        ours: u16,
        /// The peer's lowest version.
        theirs_min: u16,
        /// The peer's highest version.
        theirs_max: u16,
    },
    /// The peer announced limits outside the protocol's ranges.
    #[error("the peer announced invalid limits: {0}")]
    InvalidLimits(&'static str),
    /// The peer sent a request without credit.
    #[error(
        "flow control violated: the peer has {in_flight} requests outstanding, its window is {window}"
    )]
    CreditViolation {
        /// Requests outstanding when the extra one arrived.
        in_flight: u32,
        /// Credits granted to the peer.
        window: u32,
    },
    /// The peer answered a call that was never made.
    #[error("response to call {call_id} arrived with no call outstanding")]
    UnsolicitedResponse {
        /// The call id in the response.
        call_id: u64,
    },
    /// The peer sent a request with the call id of one of its calls still being served.
    #[error("request for call {call_id} arrived while a call with that id was still being served")]
    DuplicateCall {
        /// The call id used twice.
        call_id: u64,
    },
    /// Authentication failed, or the peer sent a request before it completed.
    #[error("{0}")]
    Unauthenticated(String),
    /// The peer closed the connection.
    #[error("the peer closed the connection ({}): {reason}", status.name())]
    PeerClosed {
        /// The status the peer gave.
        status: Status,
        /// The reason the peer gave.
        reason: String,
    },
}

impl ProtocolError {
    /// The status to tell the peer when closing because of this error.
    pub fn status(&self) -> Status {
        match self {
            ProtocolError::CreditViolation { .. } => Status::Overloaded,
            ProtocolError::Unauthenticated(_) => Status::Unauthenticated,
            ProtocolError::PeerClosed { status, .. } => *status,
            _ => Status::Protocol,
        }
    }

    /// The close frame to send the peer before dropping the connection.
    pub fn close_frame(&self) -> bytes::Bytes {
        crate::frame::encode_close(self.status(), &self.to_string())
    }
}

/// Why a message could not be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// No credits: the peer has as many of our requests as it allows. Wait for a reply or a
    /// credit frame, then try again.
    #[error("no send credits: the peer's window is full")]
    NoCredits,
    /// The message is larger than the peer accepts.
    #[error("message of {len} bytes exceeds the peer's maximum frame size of {max} bytes")]
    TooLarge {
        /// The encoded size.
        len: u64,
        /// The peer's limit.
        max: u32,
    },
    /// More bulk segments than a frame may carry.
    #[error("{count} bulk segments exceed the limit of {max}")]
    TooManySegments {
        /// Segments in the message.
        count: usize,
        /// The limit.
        max: u16,
    },
    /// The connection is not open (handshake not finished, or closed).
    #[error("the connection is not open")]
    NotOpen,
    /// A response to a request the peer never sent.
    #[error("no request from the peer is awaiting a response")]
    NoRequestPending,
    /// The peer sent GOAWAY: it finishes the calls it has but takes no new ones.
    #[error("the peer is shutting down and takes no new calls")]
    GoingAway,
}
