//! The public error type: one [`Error`] with a [`kind`](Error::kind) that tells the caller
//! how to react, and a message that tells a human what happened.

use std::fmt;

use lanner_proto::{ProtocolError, SendError, Status};
use serde::{Deserialize, Serialize};

/// What kind of failure an [`Error`] is; decides how a caller should react.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The peer cannot be reached or the connection broke. The call may be retried on a new
    /// connection; if it was already sent it may or may not have run.
    Unavailable,
    /// The deadline passed before an answer arrived.
    DeadlineExceeded,
    /// The peer is not (or could not be) authenticated.
    Unauthenticated,
    /// The caller may not perform this call.
    PermissionDenied,
    /// A peer broke the wire protocol, or the peers speak different protocol versions.
    Protocol,
    /// No such object (or well-known name) on that connection.
    NotFound,
    /// The object does not implement the interface or method (or its signature differs).
    Unimplemented,
    /// Arguments or results could not be encoded or decoded as the declared types.
    InvalidArgument,
    /// A limit was hit (credits, frame size, connections); back off and retry later.
    Overloaded,
    /// The callee failed (for example it panicked); not the caller's fault.
    Internal,
    /// The call was cancelled.
    Cancelled,
    /// An error this version does not know how to classify.
    Unknown,
}

impl ErrorKind {
    /// A short lower-case name.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::DeadlineExceeded => "deadline exceeded",
            ErrorKind::Unauthenticated => "unauthenticated",
            ErrorKind::PermissionDenied => "permission denied",
            ErrorKind::Protocol => "protocol error",
            ErrorKind::NotFound => "not found",
            ErrorKind::Unimplemented => "unimplemented",
            ErrorKind::InvalidArgument => "invalid argument",
            ErrorKind::Overloaded => "overloaded",
            ErrorKind::Internal => "internal error",
            ErrorKind::Cancelled => "cancelled",
            ErrorKind::Unknown => "unknown error",
        }
    }

    pub(crate) fn from_status(status: Status) -> ErrorKind {
        match status {
            Status::NotFound => ErrorKind::NotFound,
            Status::Unimplemented => ErrorKind::Unimplemented,
            Status::InvalidArgument => ErrorKind::InvalidArgument,
            Status::Internal => ErrorKind::Internal,
            Status::Unavailable => ErrorKind::Unavailable,
            Status::Overloaded => ErrorKind::Overloaded,
            Status::Protocol => ErrorKind::Protocol,
            Status::DeadlineExceeded => ErrorKind::DeadlineExceeded,
            Status::Unauthenticated => ErrorKind::Unauthenticated,
            Status::PermissionDenied => ErrorKind::PermissionDenied,
            Status::Cancelled => ErrorKind::Cancelled,
            Status::Ok | Status::AppError | Status::Unknown => ErrorKind::Unknown,
        }
    }

    pub(crate) fn to_status(self) -> Status {
        match self {
            ErrorKind::Unavailable => Status::Unavailable,
            ErrorKind::DeadlineExceeded => Status::DeadlineExceeded,
            ErrorKind::Unauthenticated => Status::Unauthenticated,
            ErrorKind::PermissionDenied => Status::PermissionDenied,
            ErrorKind::Protocol => Status::Protocol,
            ErrorKind::NotFound => Status::NotFound,
            ErrorKind::Unimplemented => Status::Unimplemented,
            ErrorKind::InvalidArgument => Status::InvalidArgument,
            ErrorKind::Overloaded => Status::Overloaded,
            ErrorKind::Internal => Status::Internal,
            ErrorKind::Cancelled => Status::Cancelled,
            ErrorKind::Unknown => Status::Unknown,
        }
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A Lanner failure: transport, protocol, or a remote error status.
///
/// Application errors are not `Error`s: they travel back as the method's own error type.
/// That type must implement `From<lanner::Error>` so a proxy can report transport failures
/// through it; match on your variant holding the `Error` and use [`Error::kind`].
///
/// Every failed call also says whether its request may have run on the server
/// ([`Error::may_have_executed`]), so that a caller can decide whether retrying is safe.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    #[serde(default)]
    may_have_executed: bool,
}

impl Error {
    /// An error of `kind` with a human-readable message (that did not execute anything).
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Error {
        Error {
            kind,
            message: message.into(),
            may_have_executed: false,
        }
    }

    /// Whether the call's request may have run on the server: true when the failure came
    /// after the request was sent and before a definite answer (deadline exceeded,
    /// cancelled, connection lost mid-call) or from a method that ran and failed (it
    /// panicked); false when Lanner knows it did not run (never sent, or refused before
    /// running: unknown object or method, undecodable arguments). Retrying is safe when
    /// this is false; when true, only if the method is idempotent. An `Error` the method
    /// itself returned as its error value keeps the flag it was made with ([`Error::new`]
    /// makes it false), although the method ran.
    pub fn may_have_executed(&self) -> bool {
        self.may_have_executed
    }

    /// The same error, marked as having possibly executed (see
    /// [`Error::may_have_executed`]).
    pub(crate) fn after_sending(mut self) -> Error {
        self.may_have_executed = true;
        self
    }

    /// What kind of failure this is.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human-readable description.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// True for [`ErrorKind::Unavailable`].
    pub fn is_unavailable(&self) -> bool {
        self.kind == ErrorKind::Unavailable
    }

    /// True for [`ErrorKind::DeadlineExceeded`].
    pub fn is_deadline_exceeded(&self) -> bool {
        self.kind == ErrorKind::DeadlineExceeded
    }

    /// True for [`ErrorKind::NotFound`].
    pub fn is_not_found(&self) -> bool {
        self.kind == ErrorKind::NotFound
    }

    /// True for [`ErrorKind::Protocol`].
    pub fn is_protocol(&self) -> bool {
        self.kind == ErrorKind::Protocol
    }

    /// True for [`ErrorKind::Unimplemented`].
    pub fn is_unimplemented(&self) -> bool {
        self.kind == ErrorKind::Unimplemented
    }

    /// True for [`ErrorKind::Overloaded`].
    pub fn is_overloaded(&self) -> bool {
        self.kind == ErrorKind::Overloaded
    }

    /// True for [`ErrorKind::Unauthenticated`].
    pub fn is_unauthenticated(&self) -> bool {
        self.kind == ErrorKind::Unauthenticated
    }

    pub(crate) fn unavailable(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Unavailable, message)
    }

    pub(crate) fn protocol(message: impl Into<String>) -> Error {
        Error::new(ErrorKind::Protocol, message)
    }

    pub(crate) fn from_status(status: Status, message: impl Into<String>) -> Error {
        Error::new(ErrorKind::from_status(status), message)
    }

    /// The error a server's status reply reports: a method that panicked (`Internal`) or
    /// an unknown status may have run; every other status refuses the call before it runs.
    pub(crate) fn from_reply_status(status: Status, message: impl Into<String>) -> Error {
        let error = Error::from_status(status, message);
        match status {
            Status::Internal | Status::Unknown | Status::Cancelled | Status::DeadlineExceeded => {
                error.after_sending()
            }
            _ => error,
        }
    }

    pub(crate) fn from_protocol(error: &ProtocolError) -> Error {
        match error {
            ProtocolError::PeerClosed { status, reason } => {
                Error::from_status(*status, format!("the peer closed the connection: {reason}"))
            }
            ProtocolError::CreditViolation { .. } => {
                Error::new(ErrorKind::Overloaded, error.to_string())
            }
            ProtocolError::Unauthenticated(message) => {
                Error::new(ErrorKind::Unauthenticated, message.clone())
            }
            other => Error::protocol(other.to_string()),
        }
    }

    pub(crate) fn from_send(error: SendError) -> Error {
        match error {
            SendError::TooLarge { .. } | SendError::TooManySegments { .. } => {
                Error::new(ErrorKind::InvalidArgument, error.to_string())
            }
            SendError::NoCredits => Error::new(ErrorKind::Overloaded, error.to_string()),
            SendError::NotOpen | SendError::NoRequestPending => {
                Error::unavailable(error.to_string())
            }
            SendError::GoingAway => Error::unavailable(format!(
                "{error}: connect again (to this or another server); the request was not sent"
            )),
        }
    }

    /// A transport failure. `PermissionDenied` (a TLS peer refused a certificate, or the
    /// system refused access to the endpoint) is `Unauthenticated`.
    pub(crate) fn io(context: &str, error: &std::io::Error) -> Error {
        if error.kind() == std::io::ErrorKind::PermissionDenied {
            return Error::new(ErrorKind::Unauthenticated, format!("{context}: {error}"));
        }
        Error::unavailable(format!("{context}: {error}"))
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)
    }
}

impl std::error::Error for Error {}

/// What a caught panic said, for an error message.
pub(crate) fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    if let Some(text) = panic.downcast_ref::<&str>() {
        (*text).to_owned()
    } else if let Some(text) = panic.downcast_ref::<String>() {
        text.clone()
    } else {
        "(non-string panic payload)".to_owned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_and_kind_round_trip() {
        for kind in [
            ErrorKind::Unavailable,
            ErrorKind::DeadlineExceeded,
            ErrorKind::Unauthenticated,
            ErrorKind::PermissionDenied,
            ErrorKind::Protocol,
            ErrorKind::NotFound,
            ErrorKind::Unimplemented,
            ErrorKind::InvalidArgument,
            ErrorKind::Overloaded,
            ErrorKind::Internal,
            ErrorKind::Cancelled,
        ] {
            assert_eq!(ErrorKind::from_status(kind.to_status()), kind);
        }
    }

    #[test]
    fn display_names_kind_and_message() {
        let error = Error::new(ErrorKind::NotFound, "no object named calc");
        assert_eq!(error.to_string(), "not found: no object named calc");
        assert!(error.is_not_found());
    }
}
