//! Wire status codes: how a reply or a connection close tells the peer what went wrong.
//!
//! The code tells the caller how to react (retry, give up, re-authenticate, slow down);
//! the runtime maps it onto the public error kind.

/// The outcome of a call or the reason for closing a connection, as carried on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Status {
    /// The call succeeded; the payload is the encoded result.
    Ok = 0,
    /// The callee returned its own typed error; the payload is the encoded error.
    AppError = 1,
    /// No such object on this connection (never existed, or not handed to this peer).
    NotFound = 2,
    /// The object does not implement the method the caller named, or its signature differs.
    Unimplemented = 3,
    /// The request's arguments could not be decoded as the method's parameter types.
    InvalidArgument = 4,
    /// The callee failed in a way that is not the caller's fault (for example it panicked).
    Internal = 5,
    /// The peer cannot serve now (shutting down, connection closing); the call did not run.
    Unavailable = 6,
    /// The peer is over a limit (credits, frame size, connections); slow down.
    Overloaded = 7,
    /// The peer broke the protocol (malformed frame, wrong magic, bad version).
    Protocol = 8,
    /// The call's deadline passed.
    DeadlineExceeded = 9,
    /// The peer is not authenticated.
    Unauthenticated = 10,
    /// The authenticated peer may not perform this call.
    PermissionDenied = 11,
    /// The call was cancelled.
    Cancelled = 12,
    /// A code this build does not know (sent by a newer peer).
    Unknown = 255,
}

impl Status {
    /// Decodes a wire byte; unknown values map to [`Status::Unknown`] rather than failing,
    /// so a newer peer's status still reaches the caller as an error.
    pub fn from_wire(byte: u8) -> Status {
        match byte {
            0 => Status::Ok,
            1 => Status::AppError,
            2 => Status::NotFound,
            3 => Status::Unimplemented,
            4 => Status::InvalidArgument,
            5 => Status::Internal,
            6 => Status::Unavailable,
            7 => Status::Overloaded,
            8 => Status::Protocol,
            9 => Status::DeadlineExceeded,
            10 => Status::Unauthenticated,
            11 => Status::PermissionDenied,
            12 => Status::Cancelled,
            _ => Status::Unknown,
        }
    }

    /// The byte sent on the wire.
    pub fn to_wire(self) -> u8 {
        self as u8
    }

    /// A short lower-case name, used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::AppError => "application error",
            Status::NotFound => "not found",
            Status::Unimplemented => "unimplemented",
            Status::InvalidArgument => "invalid argument",
            Status::Internal => "internal",
            Status::Unavailable => "unavailable",
            Status::Overloaded => "overloaded",
            Status::Protocol => "protocol",
            Status::DeadlineExceeded => "deadline exceeded",
            Status::Unauthenticated => "unauthenticated",
            Status::PermissionDenied => "permission denied",
            Status::Cancelled => "cancelled",
            Status::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_byte_round_trips_or_maps_to_unknown() {
        for byte in 0..=255u8 {
            let status = Status::from_wire(byte);
            if status != Status::Unknown {
                assert_eq!(status.to_wire(), byte);
            }
        }
        assert_eq!(Status::from_wire(200), Status::Unknown);
    }
}
