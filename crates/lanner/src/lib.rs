//! # Lanner: distributed objects at the speed of the medium
//!
//! A **service** is a Rust trait marked `#[lanner::interface]`. A remote **object**
//! implements one or more such traits and is served by a [`Server`]; a client holds a
//! typed **proxy** and calls it as if it were local. The model is DCOM's and CORBA's
//! (interfaces, object references, interface queries), the speed is the raw socket's.
//!
//! ## The pieces
//!
//! - **Interface**: a trait with `async fn` methods returning `Result<T, E>`. The macro
//!   derives a stable 128-bit [`InterfaceId`] from the trait's path and every method's
//!   signature, and generates `<Trait>Proxy` (client) and `<Trait>Stub<T>` (server); see
//!   [`interface`](macro@interface) for the rules and options. Any serde type can be an
//!   argument or result; a parameter or result declared as [`Bytes`] is a bulk payload,
//!   kept out of the encoded arguments (see [Bulk payloads](#bulk-payloads)). `E` must be
//!   serde and implement `From<lanner::Error>`: transport failures reach the caller
//!   through it.
//! - **Object**: [`Object::new(stub)`](Object::new)`.with(other_stub)` bundles the stubs
//!   of one implementation. [`Server::publish`] gives it a well-known name.
//! - **Reference**: an [`ObjectRef`] names an object on a connection and carries the list
//!   of interfaces it implements, so [`ObjectRef::query`] (or [`Proxy::query`]) is answered
//!   locally; the first call on the new interface is one request like any other.
//! - **Connection**: one per endpoint per [`Client`], shared by every proxy behind it, with
//!   many calls outstanding at once. The wire carries only (object handle, interface slot,
//!   method ordinal + fingerprint) per call; dispatch is O(1).
//! - **Transport**: TCP (`tcp://`), Unix sockets (`unix://`), shared memory between
//!   processes on one host (`shm://`), in-process channels (`mem://`); see [`transport`].
//!
//! ## Authentication
//!
//! A connection is authenticated once, in its handshake. The default on both sides
//! ([`ServerAuth::peer_credentials`], [`ClientAuth::peer_credentials`]) is the kernel's
//! word for who the local peer is (uid, gid, pid), on `unix://`, `shm://` and `mem://`.
//! Over TCP nobody vouches for a peer, so a server with the default refuses to listen on
//! `tcp://` and the default client refuses `tcp://` URLs: give both sides a pre-shared
//! key ([`ServerAuth::psk`], [`ClientAuth::psk`]), TLS ([`ServerAuth::tls`],
//! [`ClientAuth::tls`]), or, explicitly, none ([`ServerAuth::none`], [`ClientAuth::none`])
//! with [`Server::with_auth`] and [`Client::with_auth`]. Who may call what is an
//! [`AccessPolicy`]. The threat model of each mechanism is in the "Security" section of
//! the repository's `README.md`.
//!
//! ## Bulk payloads
//!
//! A [`Bytes`] argument or result is not encoded with the other values; what happens to
//! its bytes depends on the transport:
//!
//! - TCP and Unix sockets: it is written from the caller's buffer (one vectored write),
//!   and the callee gets a slice of the connection's receive buffer. Lanner copies
//!   nothing (the kernel copies into and out of the socket, as for any socket I/O).
//! - Shared memory: it is copied once into the ring (payloads of 256 KiB or more into the
//!   sender's loan area instead), unless it was built in a [`Loan`] of 1 KiB or more,
//!   which is sent by reference and not copied at all. A received message of 16 KiB or
//!   more is read in place, in the shared memory; smaller ones are copied out.
//! - TLS: copied on both sides (encrypted into the record buffer, decrypted into the
//!   receive buffer).
//! - `mem://`: copied once (each message travels as one buffer).
//!
//! ## Waiting and threads
//!
//! Lanner trades a little CPU for latency. Waking a sleeping thread on another core
//! costs microseconds, and tens of them on virtual machines: often more than the call
//! itself. So:
//!
//! - After each message a connection polls its socket for a short spin budget
//!   ([`ConnectionOptions::spin`], 50 µs by default) before it sleeps; an idle connection
//!   costs nothing once the budget is spent. Zero means pure blocking.
//! - A call that is alone on its connection receives its own reply, spinning on the socket
//!   on the caller's thread for up to the spin budget (no hand-off to another task). Other
//!   tasks on that thread wait meanwhile; with many concurrent calls the connection's
//!   reader task receives instead.
//! - A method runs first on the task that received the request. If it completes without
//!   waiting, its reply is written right there; if it awaits, it continues on its own task.
//!   A method that computes for long without awaiting therefore delays the calls behind it
//!   on the same connection, and on tokio's multi-thread runtime it can delay another
//!   connection's reader too (one woken on the same worker waits in that worker's LIFO
//!   slot, which other workers do not steal): move such work to
//!   `tokio::task::spawn_blocking`.
//!
//! ## Example
//!
//! ```
//! use std::sync::Arc;
//!
//! #[lanner::interface]
//! pub trait Calculator {
//!     async fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error>;
//! }
//!
//! struct Adder;
//!
//! impl Calculator for Adder {
//!     async fn add(&self, a: u64, b: u64) -> Result<u64, lanner::Error> {
//!         Ok(a + b)
//!     }
//! }
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), lanner::Error> {
//! let server = lanner::Server::new();
//! server.publish("calc", lanner::Object::new(CalculatorStub::new(Arc::new(Adder))));
//! let _listening = server.listen("mem://doc-example").await?;
//!
//! let calc: CalculatorProxy = lanner::connect("mem://doc-example/calc").await?;
//! assert_eq!(calc.add(2, 3).await?, 5);
//! # Ok(())
//! # }
//! ```

extern crate self as lanner;

mod access;
mod apartment;
mod apartment_cell;
mod auth;
mod call;
mod client;
mod connection;
mod context;
mod depth;
mod direct;
mod error;
#[cfg(any(test, feature = "fuzzing"))]
#[doc(hidden)]
pub mod fuzzing;
mod handoff;
mod handshake_slots;
mod id;
mod id_hasher;
pub mod loan;
mod marshal;
mod object;
mod objref;
mod occasional;
mod options;
mod phase_marks;
mod prefetch;
mod proxy;
mod reference;
mod root;
mod server;
pub mod transport;
mod url;

pub use access::{AccessPolicy, Target};
pub use apartment_cell::ApartmentCell;
pub use auth::{ClientAuth, Mechanism, PreSharedKey, Principal, ServerAuth};
pub use bytes::Bytes;
pub use call::{IncomingCall, Reply};
pub use client::{Client, connect};
pub use context::CallContext;
pub use error::{Error, ErrorKind};
pub use id::{ClassId, InterfaceId, MethodInfo};
pub use lanner_macros::interface;
pub use loan::Loan;
pub use object::{DispatchFuture, Object, Stub};
pub use objref::ObjRef;
pub use options::ConnectionOptions;
pub use proxy::{Proxy, ProxyCore};
pub use reference::{ObjectRef, Traffic};
pub use rustls;
pub use server::{Listening, Server, ShutdownReport};
pub use url::{Endpoint, ObjectUrl};

/// What `#[lanner::interface]` expands to refers only to this module, so the generated
/// code stays stable while the internals move. Not a public API.
#[doc(hidden)]
pub mod __private {
    pub use crate::call::{IncomingCall, Reply};
    pub use crate::direct::{Direct, Implementation, Serve};
    pub use crate::error::Error;
    pub use crate::id::{InterfaceId, MethodInfo, method_fingerprint};
    pub use crate::marshal::{
        Bulk, Destination, Inline, Unit, ValueCodec, answered, arguments, assert_argument,
        assert_remote_error, destination, invoke, invoke_one_way, no_arguments, reply, request,
        request_without_inline,
    };
    pub use crate::object::{DispatchFuture, Stub};
    pub use crate::proxy::{Proxy, ProxyCore};
    pub use bytes::Bytes;
    pub use lanner_macros::implement_bases;
    pub use serde;
    pub use std::boxed::Box;
    pub use std::future::Future;
    pub use std::sync::Arc;
}
