//! What a message did to the counts of object references, so that it can be undone when
//! the message does not reach its peer: the exports an encoding made
//! ([`tracking_exports`], [`UnsentExports`]) and the references a received value decoded
//! ([`decoding_arguments`], [`decoding_result`]). Both scopes are thread-locals
//! (encoding and decoding do not wait) restored by guards, even when a user's
//! `Serialize` or `Deserialize` panics.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use super::{decoding, marshalling_connection};
use crate::connection::Connection;
use crate::error::{Error, ErrorKind};
use crate::occasional::occasionally;
use crate::reference::ObjectRef;

thread_local! {
    /// Handles of this side's objects exported (and counted) by the message being encoded
    /// (see [`tracking_exports`]): if the message fails to encode, nobody will release
    /// them.
    static EXPORTED: std::cell::RefCell<Vec<u64>> = const { std::cell::RefCell::new(Vec::new()) };

    /// Whether a message is being encoded on this thread, and whether `EXPORTED` holds
    /// anything (checked first, as for `HANDED_BACK`).
    static TRACKING: std::cell::Cell<Tracking> = const { std::cell::Cell::new(Tracking::Idle) };
}

/// The state of export tracking on a thread (see `TRACKING`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tracking {
    /// No message is being encoded.
    Idle,
    /// A message is being encoded and has exported nothing yet.
    Clean,
    /// A message is being encoded and `EXPORTED` holds what it exported.
    Exported,
}

/// Whether a message is being encoded on this thread: the only place a reference may be
/// serialized (elsewhere, what it exported would be in no message's accounts).
pub(super) fn tracking() -> bool {
    TRACKING.get() != Tracking::Idle
}

/// Runs `f`, which encodes a message, and returns the handles it exported. Those an
/// enclosing encoding exported before stay its own. If `f` panics (a user's `Serialize`
/// may), what it exported is unexported, on the connection it was encoding for.
pub(crate) fn tracking_exports<R>(f: impl FnOnce() -> R) -> (R, Vec<u64>) {
    let enclosing = TRACKING.replace(Tracking::Clean);
    let handles = match enclosing {
        Tracking::Exported => take_exported(),
        _ => Vec::new(),
    };
    let mut scope = ExportScope {
        enclosing: Some((enclosing, handles)),
    };
    let result = f();
    let mine = scope.end();
    (result, mine)
}

fn take_exported() -> Vec<u64> {
    EXPORTED.with(|exported| std::mem::take(&mut *exported.borrow_mut()))
}

/// One message's export tracking (see [`tracking_exports`]): gives the enclosing
/// encoding its state and handles back when it ends, even by a panic.
struct ExportScope {
    /// The enclosing state and its handles (empty unless it had exported some); `None`
    /// once ended.
    enclosing: Option<(Tracking, Vec<u64>)>,
}

impl ExportScope {
    /// The handles this message exported; the enclosing encoding's are put back.
    #[inline]
    fn end(&mut self) -> Vec<u64> {
        let Some((state, handles)) = self.enclosing.take() else {
            return Vec::new();
        };
        let mine = match TRACKING.replace(state) {
            Tracking::Exported => take_exported(),
            _ => Vec::new(),
        };
        if state == Tracking::Exported {
            EXPORTED.with(|exported| *exported.borrow_mut() = handles);
        }
        mine
    }
}

impl Drop for ExportScope {
    #[inline]
    fn drop(&mut self) {
        if self.enclosing.is_some() {
            self.unwound();
        }
    }
}

impl ExportScope {
    /// Unwinding out of the encoding: the message will not be sent.
    #[cold]
    #[inline(never)]
    fn unwound(&mut self) {
        let mine = self.end();
        if let Some(connection) = marshalling_connection() {
            unexport(&connection, &mine);
        }
    }
}

/// A message that exported `handles` (see [`tracking_exports`]) will not be sent: the
/// counts it added go, and objects nobody else holds are dropped. (Mostly through
/// [`UnsentExports`].)
fn unexport(connection: &Connection, handles: &[u64]) {
    if !handles.is_empty() {
        connection.unexport(handles);
    }
}

/// Remembers that the message being encoded exported `handle` (see [`tracking_exports`]).
pub(super) fn note_exported(handle: u64) {
    EXPORTED.with(|exported| exported.borrow_mut().push(handle));
    TRACKING.set(Tracking::Exported);
}

thread_local! {
    /// While a received value is decoded all or nothing (see [`decoding_arguments`]): the
    /// peer's objects it named so far.
    static DECODED: std::cell::RefCell<Option<Vec<ObjectRef>>> =
        const { std::cell::RefCell::new(None) };
}

/// Runs `f`, which decodes the arguments of a request received on `connection`, all or
/// nothing as far as object references go: if it fails, the references it had decoded
/// are given up without releasing them, and the call, answered as unread (see
/// `Reply::arguments_unread`), releases every handle the request's reference table lists
/// (see [`lanner_proto::frame::FLAG_REFERENCES`]) once. Releasing only those
/// decoded before the failure would leave the ones after it counted, and nobody could
/// tell which. (A reference a user's `Deserialize` kept somewhere before failing then
/// holds no count: calls through it fail once the caller has let the object go.) A
/// panic in `f` (a user's `Deserialize`) is such a failure too: an `Internal` error.
pub(crate) fn decoding_arguments<T>(
    connection: &Arc<Connection>,
    payload: &lanner_proto::Payload,
    f: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    all_or_nothing(payload, || {
        std::panic::catch_unwind(AssertUnwindSafe(|| decoding(connection, f))).unwrap_or_else(
            |panic| {
                let message = crate::error::panic_message(panic.as_ref());
                // A peer can send what panics on every call.
                occasionally!(error, peer = %connection.peer(), %message, "decoding a call's arguments panicked");
                Err(Error::new(
                    ErrorKind::Internal,
                    format!("decoding them panicked: {message}"),
                ))
            },
        )
    })
}

/// Runs `f`, which decodes a value the peer sent on `connection` in `payload` (a call's
/// result, or its application error), all or nothing as far as object references go: if
/// it fails, the references it had decoded are given up without releasing them, and
/// every handle the payload's reference table lists is released instead, once each (see
/// [`lanner_proto::frame::FLAG_REFERENCES`]). Without the table, the references after
/// the failure would stay counted on the peer as long as the connection lasts. A panic
/// in `f` (a user's `Deserialize`) releases the table too, and goes on unwinding: the
/// result belongs to the caller, whose code it is.
pub(crate) fn decoding_result<T>(
    connection: &Arc<Connection>,
    payload: &lanner_proto::Payload,
    f: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    if payload.references_len() == 0 {
        // Nothing listed, nothing to release (see `all_or_nothing`).
        return decoding(connection, f);
    }
    // Failed: with an error (`Ok`), or by a panic (`Err`).
    let decoded = all_or_nothing(payload, || {
        match std::panic::catch_unwind(AssertUnwindSafe(|| decoding(connection, f))) {
            Ok(decoded) => decoded.map_err(Ok),
            Err(panic) => Err(Err(panic)),
        }
    });
    decoded.or_else(|failure| {
        connection.release_listed(payload.references());
        failure
            .map(Err)
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
    })
}

/// Runs `f`, which decodes `payload`, collecting the references to the peer's objects it
/// decodes; if it fails, gives them up without releasing them (see
/// [`decoding_arguments`]). A payload without a reference table carries no reference
/// the peer counted (it lists every one it exports): `f` just runs, and the two
/// thread-local swaps are saved for nearly every message.
fn all_or_nothing<T, E>(
    payload: &lanner_proto::Payload,
    f: impl FnOnce() -> Result<T, E>,
) -> Result<T, E> {
    if payload.references_len() == 0 {
        return f();
    }
    // Kept here as well as in what `f` builds, so that a value dropped as `f` fails does
    // not release its reference before this side knows to give it up.
    let mut scope = DecodeScope {
        enclosing: Some(DECODED.replace(Some(Vec::new()))),
    };
    let result = f();
    let decoded = scope.end();
    if result.is_err() {
        for reference in &decoded {
            reference.disown();
        }
    }
    result
}

/// One value's list of decoded references (see [`all_or_nothing`]): puts the
/// enclosing list back when it ends, even by a panic (the references then drop as usual).
struct DecodeScope {
    /// `None` once ended.
    enclosing: Option<Option<Vec<ObjectRef>>>,
}

impl DecodeScope {
    fn end(&mut self) -> Vec<ObjectRef> {
        let enclosing = self.enclosing.take().unwrap_or_default();
        DECODED.replace(enclosing).unwrap_or_default()
    }
}

impl Drop for DecodeScope {
    fn drop(&mut self) {
        if self.enclosing.is_some() {
            drop(self.end());
        }
    }
}

/// Notes a reference to the peer's object decoded from a value decoded all or nothing
/// (see [`all_or_nothing`]).
pub(super) fn note_decoded(reference: &ObjectRef) {
    DECODED.with(|decoded| {
        if let Some(decoded) = decoded.borrow_mut().as_mut() {
            decoded.push(reference.clone());
        }
    });
}

/// This side's objects a message exported (and counted) while it was encoded. Unless the
/// message is sent ([`UnsentExports::sent`]), dropping this unexports them: the peer never
/// got their handles, so it could never release them. Whoever drops an unsent message
/// (a failed encoding, a call given up while it waited for a credit, a refused send)
/// drops this with it.
#[derive(Default)]
pub(crate) struct UnsentExports {
    /// `None` for nearly every message (it exported nothing): nothing held, nothing to do.
    exports: Option<Box<(Arc<Connection>, Vec<u64>)>>,
}

impl UnsentExports {
    /// `handles`, exported by a message on `connection`.
    pub(crate) fn new(connection: &Arc<Connection>, handles: Vec<u64>) -> UnsentExports {
        UnsentExports {
            exports: (!handles.is_empty()).then(|| Box::new((connection.clone(), handles))),
        }
    }

    /// The handles a method's result exported (see [`tracking_exports`]), on the
    /// connection of the call being served.
    #[inline]
    pub(crate) fn of_this_call(handles: Vec<u64>) -> UnsentExports {
        if handles.is_empty() {
            return UnsentExports::default();
        }
        match crate::context::CallContext::current_connection() {
            Some(connection) => UnsentExports::new(&connection, handles),
            // Closed and dropped: its table, and what it counted, went with it.
            None => UnsentExports::default(),
        }
    }

    /// The handles the message exported (for its reference table).
    pub(crate) fn handles(&self) -> &[u64] {
        self.exports.as_ref().map_or(&[], |exports| &exports.1[..])
    }

    /// Whether the message exported nothing.
    #[inline]
    pub(crate) fn is_empty(&self) -> bool {
        self.exports.is_none()
    }

    /// The message went out: the peer holds the handles now, and releases them itself.
    #[inline]
    pub(crate) fn sent(mut self) {
        self.exports = None;
    }
}

impl fmt::Debug for UnsentExports {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("UnsentExports")
            .field(&self.handles())
            .finish()
    }
}

impl Drop for UnsentExports {
    #[inline]
    fn drop(&mut self) {
        // Nearly every message exported nothing: a test of one word, the rest out of line.
        if let Some(exports) = self.exports.take() {
            unexport_unsent(*exports);
        }
    }
}

#[inline(never)]
fn unexport_unsent((connection, handles): (Arc<Connection>, Vec<u64>)) {
    unexport(&connection, &handles);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn quietly<R>(f: impl FnOnce() -> R) -> std::thread::Result<R> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(f))
    }

    #[test]
    fn an_encoding_that_panics_leaves_the_enclosing_ones_exports_as_they_were() {
        let (panicked, outer) = tracking_exports(|| {
            note_exported(1);
            assert!(tracking());
            let inner = quietly(|| {
                tracking_exports(|| {
                    note_exported(2);
                    panic!("a user's Serialize panicked");
                })
            });
            note_exported(3);
            assert!(tracking(), "the enclosing encoding still tracks");
            inner.is_err()
        });
        assert!(panicked);
        assert_eq!(outer, vec![1, 3]);
        // Nor is this thread left encoding a message.
        assert!(!tracking());
        // Nothing is left behind for the next message.
        assert_eq!(TRACKING.get(), Tracking::Idle);
        assert!(tracking_exports(|| ()).1.is_empty());
    }

    #[test]
    fn a_decoding_that_panics_leaves_no_list_of_decoded_references_behind() {
        let panicked = quietly(|| {
            let _scope = DecodeScope {
                enclosing: Some(DECODED.replace(Some(Vec::new()))),
            };
            panic!("a user's Deserialize panicked");
        });
        assert!(panicked.is_err());
        // No list is left collecting the references this thread decodes from now on.
        assert!(DECODED.with(|decoded| decoded.borrow().is_none()));
    }
}
