//! One incoming call as a stub sees it, and the reply it produces.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use bytes::Bytes;
use lanner_proto::{MessageBuilder, Request, Status};

use crate::access::MethodAccess;
use crate::connection::Connection;
use crate::error::{Error, ErrorKind};
use crate::id::MethodInfo;
use crate::marshal::answered;
use crate::object::DispatchFuture;
use crate::occasional::occasionally;
use crate::server::CallLimit;

/// A call received by a server: which method, its arguments, and where it came from. A
/// stub reads what it needs from it synchronously, before returning the method's future.
pub struct IncomingCall<'a> {
    pub(crate) request: Request,
    pub(crate) connection: &'a Arc<Connection>,
    /// What the peer may call on this interface of the object.
    pub(crate) access: &'a MethodAccess,
    /// The server's limit of suspended calls, if it is reached: every call is refused.
    pub(crate) overloaded: Option<&'a CallLimit>,
    /// Set when the stub starts decoding the arguments. A stub that never does (it
    /// panicked first, or it ignores them) took none of the object references the
    /// request lists, so the server releases them when it answers.
    pub(crate) arguments_read: &'a AtomicBool,
}

impl IncomingCall<'_> {
    /// The method ordinal the caller named.
    pub fn method(&self) -> u16 {
        self.request.method
    }

    /// The method fingerprint the caller named.
    pub fn fingerprint(&self) -> u32 {
        self.request.fingerprint
    }

    /// Who called, as an address or path (for logs).
    pub fn peer(&self) -> &str {
        self.connection.peer()
    }

    /// The encoded inline arguments.
    pub fn inline(&self) -> &[u8] {
        self.request.payload.inline_slice()
    }

    /// Bulk argument `index`, a slice of the received frame (no copy).
    pub fn segment(&self, index: usize) -> Result<Bytes, Error> {
        self.request
            .payload
            .segment(index)
            .ok_or_else(|| self.missing_segment(index))
    }

    /// [`IncomingCall::segment`] for generated stubs: the error is the answer, as the
    /// future the stub returns (made out of line).
    #[doc(hidden)]
    pub fn __segment(&self, index: usize) -> Result<Bytes, DispatchFuture> {
        match self.request.payload.segment(index) {
            Some(segment) => Ok(segment),
            None => Err(answered(Reply::error(&self.missing_segment(index)))),
        }
    }

    /// Why bulk argument `index` is not there.
    #[cold]
    #[inline(never)]
    fn missing_segment(&self, index: usize) -> Error {
        let payload = &self.request.payload;
        let count = payload.segment_count();
        let message = if index < count {
            // Only a sender that rewrote the frame after it arrived (in shared memory)
            // gets here: the table was checked when the frame was decoded.
            format!("bulk argument {index} no longer lies within its request")
        } else {
            format!(
                "the request carries {count} bulk arguments, the method expects at least {}",
                index + 1
            )
        };
        Error::new(ErrorKind::InvalidArgument, message)
    }

    /// Finds the method to run among `methods` (an interface's table, indexed by ordinal):
    /// the ordinal the caller named if its fingerprint matches, else the method with that
    /// fingerprint at another ordinal (an interface that grew), else an `Unimplemented`
    /// reply saying how the signatures differ. A method the caller may not call (see
    /// [`crate::AccessPolicy`]) gets a `PermissionDenied` reply; the check is on the
    /// method found, whatever ordinal the caller named.
    ///
    /// Every `Err` reply says that the arguments were not decoded (this side then
    /// releases the references among them, which the request's reference table lists):
    /// answer with it before decoding any.
    pub fn route(&self, interface: &str, methods: &[MethodInfo]) -> Result<u16, Reply> {
        let Some(method) = self.find(methods) else {
            return Err(self.incompatible(interface, methods));
        };
        match self.refusal(interface, method) {
            None => Ok(method.ordinal),
            Some(refusal) => Err(refusal.arguments_unread()),
        }
    }

    /// [`IncomingCall::route`] for generated stubs, without the refusal: a method found but
    /// refused (by the access policy, or because the server is overloaded) is refused by
    /// [`crate::__private::arguments`] once the stub has decoded its arguments. Dropping
    /// what was decoded releases the object references among the arguments, which the
    /// caller counted for this connection; left undecoded, they would stay counted until
    /// the connection ends. The error is the answer, as the future the stub returns.
    #[doc(hidden)]
    pub fn __find(&self, interface: &str, methods: &[MethodInfo]) -> Result<u16, DispatchFuture> {
        match self.find(methods) {
            Some(method) => Ok(method.ordinal),
            None => Err(answered(self.incompatible(interface, methods))),
        }
    }

    /// The method the caller named: by ordinal if the fingerprint matches there, else by
    /// fingerprint.
    fn find<'m>(&self, methods: &'m [MethodInfo]) -> Option<&'m MethodInfo> {
        let fingerprint = self.request.fingerprint;
        match methods.get(usize::from(self.request.method)) {
            Some(method) if method.fingerprint == fingerprint => Some(method),
            _ => methods.iter().find(|m| m.fingerprint == fingerprint),
        }
    }

    /// Why `method` (found) may not run, if it may not: the server is overloaded, or the
    /// caller may not call it. The reply is made only then (out of line).
    #[inline]
    pub(crate) fn refusal(&self, interface: &str, method: &MethodInfo) -> Option<Reply> {
        if self.overloaded.is_none() && self.access.allows(method.ordinal) {
            return None;
        }
        Some(self.refuse(interface, method))
    }
}

impl IncomingCall<'_> {
    /// The access policy's refusal of a call to a stub that may not route (a hand-written
    /// one, which may dispatch on [`IncomingCall::method`] without asking
    /// [`IncomingCall::route`]): judged on the ordinal the caller named and on the method
    /// its fingerprint names, both of which must be allowed (a stub that dispatches on the
    /// ordinal would otherwise run a denied method named with an allowed one's
    /// fingerprint). `None` if the call may go on.
    pub(crate) fn denial_unrouted(&self, interface: &str, methods: &[MethodInfo]) -> Option<Reply> {
        if matches!(self.access, MethodAccess::All) {
            return None;
        }
        let named = self.request.method;
        let found = self.find(methods);
        if self.access.allows(named) && found.is_none_or(|m| self.access.allows(m.ordinal)) {
            return None;
        }
        let method = found
            .filter(|m| !self.access.allows(m.ordinal))
            .or_else(|| methods.get(usize::from(named)));
        Some(match method {
            Some(method) => self.denied(interface, method),
            None => Reply::error(&Error::new(
                ErrorKind::PermissionDenied,
                format!(
                    "{} may not call method {named} of {interface}",
                    self.connection.identity().principal
                ),
            )),
        })
    }

    #[cold]
    #[inline(never)]
    fn refuse(&self, interface: &str, method: &MethodInfo) -> Reply {
        match self.overloaded {
            Some(limit) => limit.refusal(),
            None => self.denied(interface, method),
        }
    }

    /// No method of `methods` has the caller's fingerprint: told as unread.
    #[cold]
    #[inline(never)]
    fn incompatible(&self, interface: &str, methods: &[MethodInfo]) -> Reply {
        let fingerprint = self.request.fingerprint;
        let detail = match methods.get(usize::from(self.request.method)) {
            Some(method) => format!(
                "incompatible method: the caller's method {} of {interface} has a different signature (fingerprint {fingerprint:08x}); this server has `{}`",
                self.request.method, method.signature
            ),
            None => format!(
                "incompatible method: {interface} has no method {} with fingerprint {fingerprint:08x} (it has {} methods)",
                self.request.method,
                methods.len()
            ),
        };
        Reply::error(&Error::new(ErrorKind::Unimplemented, detail)).arguments_unread()
    }

    #[cold]
    fn denied(&self, interface: &str, method: &MethodInfo) -> Reply {
        let principal = &self.connection.identity().principal;
        // A peer can call what it may not on every call.
        occasionally!(info, peer = %self.peer(), %principal, interface, method = method.name, "call denied");
        Reply::error(&Error::new(
            ErrorKind::PermissionDenied,
            format!("{principal} may not call {interface}::{}", method.name),
        ))
    }
}

/// An encoded reply, produced by a stub.
#[derive(Debug)]
pub struct Reply {
    pub(crate) message: ReplyMessage,
    /// References to the caller's own objects handed back in the result: kept until the
    /// reply is on its way, so that this side's release of them cannot overtake it (the
    /// caller would find the handles gone). A thin pointer, `None` when there are none
    /// (nearly always): a reply travels as the error of `Result`s and is moved often.
    #[allow(clippy::box_collection)]
    pub(crate) handed_back: Option<Box<Vec<crate::reference::ObjectRef>>>,
    /// This side's objects the result exported: unexported unless the reply reaches the
    /// caller as it is (see [`crate::objref::UnsentExports`]).
    pub(crate) exported: crate::objref::UnsentExports,
}

/// A reply's message: built, or a successful value that is nothing or one bulk segment,
/// kept as that, to be stamped and written without a builder where it can be (see
/// `lanner_proto::plain`).
#[derive(Debug)]
pub(crate) enum ReplyMessage {
    Built(MessageBuilder),
    Plain(Option<Bytes>),
}

impl ReplyMessage {
    /// The reply's status.
    pub(crate) fn status(&self) -> Status {
        match self {
            // Every response a builder makes has one.
            ReplyMessage::Built(message) => message.status().unwrap_or(Status::Internal),
            ReplyMessage::Plain(_) => Status::Ok,
        }
    }

    /// Whether the reply says the call's arguments went unread.
    pub(crate) fn is_arguments_unread(&self) -> bool {
        match self {
            ReplyMessage::Built(message) => message.is_arguments_unread(),
            ReplyMessage::Plain(_) => false,
        }
    }

    /// The reply built.
    pub(crate) fn into_builder(self) -> MessageBuilder {
        match self {
            ReplyMessage::Built(message) => message,
            ReplyMessage::Plain(bulk) => {
                let mut message = MessageBuilder::response(Status::Ok);
                if let Some(bulk) = bulk {
                    message.push_segment(bulk);
                }
                message
            }
        }
    }

    /// The reply built, to change it.
    pub(crate) fn builder_mut(&mut self) -> &mut MessageBuilder {
        if let ReplyMessage::Plain(bulk) = self {
            *self = ReplyMessage::Built(ReplyMessage::Plain(bulk.take()).into_builder());
        }
        match self {
            ReplyMessage::Built(message) => message,
            ReplyMessage::Plain(_) => unreachable!("made a builder above"),
        }
    }
}

impl Reply {
    pub(crate) fn new(message: MessageBuilder) -> Reply {
        Reply::with(ReplyMessage::Built(message))
    }

    /// The successful reply whose value is `bulk` (nothing if `None`), kept plain.
    pub(crate) fn plain(bulk: Option<Bytes>) -> Reply {
        Reply::with(ReplyMessage::Plain(bulk))
    }

    fn with(message: ReplyMessage) -> Reply {
        Reply {
            message,
            handed_back: None,
            exported: crate::objref::UnsentExports::default(),
        }
    }

    /// Says that nothing was taken from the arguments (no such object or method, refused
    /// before decoding, or they failed to decode): the references among them were not
    /// taken, so this side releases what the request's reference table lists as it
    /// answers (the caller is told too: see
    /// [`lanner_proto::frame::FLAG_ARGUMENTS_UNREAD`]).
    pub(crate) fn arguments_unread(mut self) -> Reply {
        self.message.builder_mut().set_arguments_unread();
        self
    }

    /// A reply reporting `error` to the caller (its kind becomes the wire status).
    pub fn error(error: &Error) -> Reply {
        Reply::new(MessageBuilder::error_response(
            error.kind().to_status(),
            error.message(),
        ))
    }

    /// The reply for an ordinal a stub does not have (cannot happen after
    /// [`IncomingCall::route`]; kept so generated code never panics). It tells the caller
    /// that its arguments were not decoded: answer with it before decoding any.
    pub fn unknown_method(ordinal: u16) -> Reply {
        Reply::status(
            Status::Unimplemented,
            &format!("no method with ordinal {ordinal}"),
        )
        .arguments_unread()
    }

    pub(crate) fn status(status: Status, message: &str) -> Reply {
        Reply::new(MessageBuilder::error_response(status, message))
    }
}
