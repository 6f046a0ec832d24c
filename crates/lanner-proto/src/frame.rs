//! The frame format: every message is one frame with an 8-byte header.
//!
//! All integers are little-endian. A frame starts with
//!
//! ```text
//! 0..4  len   u32  total frame length in bytes, header included
//! 4     kind  u8   HELLO=1 WELCOME=2 REQUEST=3 RESPONSE=4 CREDIT=5 CLOSE=6 CANCEL=7
//!                  PING=8 PONG=9 GOAWAY=10 AUTH=11 RELEASE=12 GRANT=13
//! 5     flags u8   REQUEST: bit 0 ONE_WAY (no RESPONSE; the callee returns the credit with
//!                  a CREDIT frame). RESPONSE: bit 0 ARGUMENTS_UNREAD (the callee took
//!                  nothing from the request's arguments), bit 2 HANDS_BACK (the value
//!                  hands back some of the caller's own objects, see [`FLAG_HANDS_BACK`]).
//!                  Both: bit 1 REFERENCES (the inline data ends with a reference table,
//!                  see [`FLAG_REFERENCES`]). RELEASE: bit 0 HANDED_BACK (the references
//!                  were handed back to the receiver, see [`FLAG_HANDED_BACK`]).
//!                  Other bits, and flags of other kinds, are ignored.
//! 6..8  segs  u16  number of bulk segments (REQUEST and RESPONSE only, else 0)
//! ```
//!
//! followed by the kind's fixed fields. REQUEST and RESPONSE then carry a *payload*:
//! `inline_len` bytes of inline data (the small arguments, encoded once, then the
//! reference table if the REFERENCES flag is set: `handle u64 … count u32`), a table of `segs`
//! u32 lengths, and the bulk segments themselves, back to back. On send, the bulk segments
//! are separate buffers written with one vectored write; on receipt they are slices of the
//! received frame. Neither side copies them. A transport may deliver some bulk segments
//! apart from the frame, by reference (the shared-memory transport's loans, see
//! [`ExternalSegments`]); the length field and the segment table still count them.
//!
//! ```text
//! HELLO     magic[4] version_min u16 version_max u16 max_frame u32 credits u32
//!           mechanism u8 reserved[3]                                | auth data
//! WELCOME   magic[4] version u16 reserved u16 max_frame u32 credits u32
//!           mechanism u8 reserved[3]                                | auth data
//! AUTH      auth data (the client's last authentication step, before any request)
//! RELEASE   handle u64 … (the sender dropped one reference to each of the receiver's
//!           objects listed, a handle once per reference)
//! GRANT     handle u64 token[16]   (client to server only: keep the object `handle`
//!           alive for whoever redeems `token`; a third-party hand-off)
//! REQUEST   call_id u64 object u64 slot u16 method u16 fingerprint u32 timeout_us u32
//!           inline_len u32                                                    | payload
//! RESPONSE  call_id u64 status u8 reserved[3] credits u32 inline_len u32            | payload
//! CREDIT    credits u32
//! CLOSE     status u8 reserved[3] reason (UTF-8, at most 1024 bytes)
//! CANCEL    call_id u64
//! PING      nonce u64     (the receiver answers PONG with the same nonce)
//! PONG      nonce u64     (one that answers no PING is ignored: a sender may put PONGs
//!                          before a frame as padding, see `lanner`'s TCP transport)
//! GOAWAY    (no body: the sender answers the calls it has, then closes; send no new ones)
//! ```
//!
//! A REQUEST's `timeout_us` is the time the caller still waits for the answer, in
//! microseconds, when it sends the request (0: no deadline; the largest value means at
//! least that long). It is relative because the peers' clocks are not comparable. A CANCEL
//! says the caller no longer waits for that call; the callee still answers it (the answer
//! returns the call's credit) but may stop working on it.

use std::fmt;

use bytes::{BufMut, Bytes, BytesMut};

use crate::auth::{MAX_AUTH_DATA, Mechanism};
use crate::error::FrameError;
use crate::limits::{Limits, MAGIC, MAX_BULK_SEGMENTS, MAX_REASON_LEN};
use crate::payload::ExternalSegments;
use crate::payload::Payload;
use crate::status::Status;

/// Size of the common frame header.
pub const HEADER_LEN: usize = 8;
/// Size of a HELLO frame before its auth data.
pub const HELLO_LEN: usize = HEADER_LEN + 20;
/// Size of a WELCOME frame before its auth data.
pub const WELCOME_LEN: usize = HEADER_LEN + 20;
/// Size of a REQUEST frame before its payload.
pub const REQUEST_FIXED_LEN: usize = HEADER_LEN + 32;
/// Size of a RESPONSE frame before its payload.
pub const RESPONSE_FIXED_LEN: usize = HEADER_LEN + 20;
/// Where a REQUEST's `inline_len` is, from the start of the frame.
pub(crate) const REQUEST_INLINE_LEN_AT: usize = 36;
/// Where a REQUEST's `object` is, from the start of the frame.
const REQUEST_OBJECT_AT: usize = HEADER_LEN + 8;
/// Where a RESPONSE's `inline_len` is, from the start of the frame.
pub(crate) const RESPONSE_INLINE_LEN_AT: usize = 24;
/// Total size of a CREDIT frame.
pub const CREDIT_LEN: usize = HEADER_LEN + 4;
/// Size of a CLOSE frame before its reason.
pub const CLOSE_FIXED_LEN: usize = HEADER_LEN + 4;
/// The REQUEST flag of a one-way call: the callee sends no RESPONSE, only the credit back.
pub const FLAG_ONE_WAY: u8 = 1;
/// The RESPONSE flag of a call whose arguments the callee took nothing from (it had no
/// such object or method, or they failed to decode). The caller need do nothing about the
/// object references among them: the callee releases what the request's reference table
/// listed (see [`FLAG_REFERENCES`]), as for a one-way call. The flag says so, for
/// diagnosis.
pub const FLAG_ARGUMENTS_UNREAD: u8 = 1;
/// The REQUEST and RESPONSE flag of a message whose inline part ends with a reference
/// table: the handles of the sender's objects the message exported (each counted once by
/// the sender, listed once per count), as little-endian u64s, then how many there are as
/// a little-endian u32. The value comes before it ([`Payload::inline`] leaves the table
/// out; [`Payload::references`] reads it). A receiver that cannot take the references
/// the value carries (a call to no such object, arguments or a result that fail to
/// decode partway) releases each listed handle once, so that nothing the sender counted
/// stays counted; it cannot tell which handles the undecoded rest of the value held.
pub const FLAG_REFERENCES: u8 = 2;
/// The RESPONSE flag of a result that hands back references to some of the caller's own
/// objects (a callback the callee returns). The callee releases its own references to
/// them once the response is out, and that RELEASE may reach the caller before the
/// caller's code has decoded the result (it sits in the call's slot, or is being decoded
/// on another thread); an object released to nothing by then could not be found by the
/// decoding. So a caller applies the RELEASE frames flagged [`FLAG_HANDED_BACK`] that it
/// reads after such a response only once the response has been decoded or dropped.
pub const FLAG_HANDS_BACK: u8 = 4;
/// The RELEASE flag of references that were handed back to the receiver (its own objects,
/// returned in a response marked [`FLAG_HANDS_BACK`]): the receiver applies such a release
/// only once it has decoded (or dropped) every response that hands back its objects and
/// arrived before it. A release without the flag is of a reference never handed back: it
/// holds a count of its own, apart from the count of any reference a response hands back
/// (which the sender releases flagged, and only after that response), so applying it at
/// once cannot leave such a response's object without a count.
pub const FLAG_HANDED_BACK: u8 = 1;
/// Total size of a CANCEL frame.
pub const CANCEL_LEN: usize = HEADER_LEN + 8;
/// Total size of a PING or PONG frame.
pub const PING_LEN: usize = HEADER_LEN + 8;
/// Total size of a GRANT frame.
pub const GRANT_LEN: usize = HEADER_LEN + 24;

/// The kind byte of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum FrameKind {
    /// Client's handshake opening.
    Hello = 1,
    /// Server's handshake answer.
    Welcome = 2,
    /// A call.
    Request = 3,
    /// The answer to a call.
    Response = 4,
    /// An explicit credit grant.
    Credit = 5,
    /// The sender is closing the connection, with a status and a reason.
    Close = 6,
    /// The caller no longer waits for one of its calls.
    Cancel = 7,
    /// Are you there? (keepalive)
    Ping = 8,
    /// The answer to a PING.
    Pong = 9,
    /// The sender is shutting down: no new calls, please.
    GoAway = 10,
    /// The client's last authentication step.
    Auth = 11,
    /// References to the receiver's objects the sender dropped.
    Release = 12,
    /// One of the receiver's objects, to be kept for whoever redeems a token.
    Grant = 13,
}

impl FrameKind {
    /// Decodes a kind byte.
    pub fn from_wire(byte: u8) -> Result<FrameKind, FrameError> {
        Ok(match byte {
            1 => FrameKind::Hello,
            2 => FrameKind::Welcome,
            3 => FrameKind::Request,
            4 => FrameKind::Response,
            5 => FrameKind::Credit,
            6 => FrameKind::Close,
            7 => FrameKind::Cancel,
            8 => FrameKind::Ping,
            9 => FrameKind::Pong,
            10 => FrameKind::GoAway,
            11 => FrameKind::Auth,
            12 => FrameKind::Release,
            13 => FrameKind::Grant,
            other => return Err(FrameError::UnknownKind(other)),
        })
    }

    fn name(self) -> &'static str {
        match self {
            FrameKind::Hello => "HELLO",
            FrameKind::Welcome => "WELCOME",
            FrameKind::Request => "REQUEST",
            FrameKind::Response => "RESPONSE",
            FrameKind::Credit => "CREDIT",
            FrameKind::Close => "CLOSE",
            FrameKind::Cancel => "CANCEL",
            FrameKind::Ping => "PING",
            FrameKind::Pong => "PONG",
            FrameKind::GoAway => "GOAWAY",
            FrameKind::Auth => "AUTH",
            FrameKind::Release => "RELEASE",
            FrameKind::Grant => "GRANT",
        }
    }
}

impl fmt::Display for FrameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A client's handshake opening.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    /// Lowest protocol version the client speaks.
    pub version_min: u16,
    /// Highest protocol version the client speaks.
    pub version_max: u16,
    /// What the client accepts from the server.
    pub limits: Limits,
    /// How the client authenticates.
    pub mechanism: Mechanism,
    /// The mechanism's data (at most [`MAX_AUTH_DATA`] bytes).
    pub auth: Bytes,
}

/// A server's handshake answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Welcome {
    /// The version both sides will speak.
    pub version: u16,
    /// What the server accepts from the client.
    pub limits: Limits,
    /// The mechanism the client asked for, accepted.
    pub mechanism: Mechanism,
    /// The mechanism's data (at most [`MAX_AUTH_DATA`] bytes).
    pub auth: Bytes,
}

/// A call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// Chosen by the caller, unique among its outstanding calls on this connection.
    pub call_id: u64,
    /// The callee's handle for the object on this connection.
    pub object: u64,
    /// Which of the object's interfaces (index into the reference's interface list).
    pub slot: u16,
    /// The method's ordinal within that interface.
    pub method: u16,
    /// The method's signature fingerprint, checked by the callee.
    pub fingerprint: u32,
    /// How long the caller still waits for the answer, in microseconds, when it sent the
    /// request; 0 if it has no deadline.
    pub timeout_us: u32,
    /// No answer is expected (see [`FLAG_ONE_WAY`]).
    pub one_way: bool,
    /// The encoded arguments.
    pub payload: Payload,
}

/// The answer to a call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The call this answers.
    pub call_id: u64,
    /// Outcome.
    pub status: Status,
    /// Request credits returned to the caller (piggybacked flow control).
    pub credits: u32,
    /// The callee took nothing from the request's arguments (see
    /// [`FLAG_ARGUMENTS_UNREAD`]).
    pub arguments_unread: bool,
    /// The result hands back some of the caller's own objects (see [`FLAG_HANDS_BACK`]).
    pub hands_back: bool,
    /// The encoded result, application error, or error message.
    pub payload: Payload,
}

/// The sender is closing the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// Why, as a code.
    pub status: Status,
    /// Why, for humans.
    pub reason: String,
}

/// A decoded frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// See [`Hello`].
    Hello(Hello),
    /// See [`Welcome`].
    Welcome(Welcome),
    /// See [`Request`].
    Request(Request),
    /// See [`Response`].
    Response(Response),
    /// An explicit grant of this many request credits.
    Credit(u32),
    /// See [`Close`].
    Close(Close),
    /// The caller no longer waits for the call with this id.
    Cancel(u64),
    /// A keepalive probe with its nonce.
    Ping(u64),
    /// The answer to the PING with this nonce.
    Pong(u64),
    /// The sender is shutting down: it answers the calls it has and takes no new ones.
    GoAway,
    /// The client's last authentication step, with its data.
    Auth(Bytes),
    /// Handles of the receiver's objects whose references the sender dropped.
    Release(Release),
    /// Keep one of the receiver's objects for a third party holding a token.
    Grant(Grant),
}

/// A RELEASE frame's body.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Release {
    /// The receiver's objects whose references the sender dropped, one entry per
    /// reference.
    pub handles: Vec<u64>,
    /// The references were handed back to the receiver (see [`FLAG_HANDED_BACK`]).
    pub handed_back: bool,
}

/// A GRANT frame's body: the sender hands its reference to object `handle` on to a third
/// party, who will present `token` to the receiver on its own connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Grant {
    /// The object, by its handle on this connection.
    pub handle: u64,
    /// The unguessable token the third party will redeem.
    pub token: [u8; 16],
}

impl Frame {
    /// The frame's kind.
    pub fn kind(&self) -> FrameKind {
        match self {
            Frame::Hello(_) => FrameKind::Hello,
            Frame::Welcome(_) => FrameKind::Welcome,
            Frame::Request(_) => FrameKind::Request,
            Frame::Response(_) => FrameKind::Response,
            Frame::Credit(_) => FrameKind::Credit,
            Frame::Close(_) => FrameKind::Close,
            Frame::Cancel(_) => FrameKind::Cancel,
            Frame::Ping(_) => FrameKind::Ping,
            Frame::Pong(_) => FrameKind::Pong,
            Frame::GoAway => FrameKind::GoAway,
            Frame::Auth(_) => FrameKind::Auth,
            Frame::Release(_) => FrameKind::Release,
            Frame::Grant(_) => FrameKind::Grant,
        }
    }

    /// [`Frame::decode`] of a frame some of whose bulk segments the transport delivered
    /// apart from it, by reference (see [`ExternalSegments`]): the length field counts
    /// them, `frame` holds everything else. Only a REQUEST or RESPONSE may have any.
    /// Without any (`external` empty), this is [`Frame::decode`].
    pub fn decode_with(frame: Bytes, external: ExternalSegments) -> Result<Frame, FrameError> {
        if external.is_empty() {
            return Frame::decode(frame);
        }
        // Boxed: a payload carries it as one word.
        decode_with_external(frame, Box::new(external))
    }

    /// Decodes one complete frame. `frame` must hold exactly one frame (as split by
    /// [`crate::FrameSplitter`] or delivered whole by a message transport); payload parts
    /// of the result are slices of it, not copies. Never panics.
    #[inline(always)]
    pub fn decode(frame: Bytes) -> Result<Frame, FrameError> {
        let header = checked_header(&frame)?;
        Frame::decode_body(frame, header)
    }

    /// [`Frame::decode`] of a frame whose header [`checked_header`] has read and checked.
    #[inline(always)]
    pub(crate) fn decode_body(frame: Bytes, header: Header) -> Result<Frame, FrameError> {
        match header.kind {
            FrameKind::Hello => decode_hello(&frame).map(Frame::Hello),
            FrameKind::Welcome => decode_welcome(&frame).map(Frame::Welcome),
            FrameKind::Auth => auth_data(&frame, HEADER_LEN).map(Frame::Auth),
            FrameKind::Release => decode_release(&frame).map(|handles| {
                Frame::Release(Release {
                    handles,
                    handed_back: header.flags & FLAG_HANDED_BACK != 0,
                })
            }),
            FrameKind::Grant => {
                need(&frame, FrameKind::Grant, GRANT_LEN)?;
                let mut token = [0; 16];
                token.copy_from_slice(&frame[HEADER_LEN + 8..GRANT_LEN]);
                Ok(Frame::Grant(Grant {
                    handle: le_u64(&frame, HEADER_LEN),
                    token,
                }))
            }
            FrameKind::Request => decode_request(frame, header, None).map(Frame::Request),
            FrameKind::Response => decode_response(frame, header, None).map(Frame::Response),
            FrameKind::Credit => {
                need(&frame, FrameKind::Credit, CREDIT_LEN)?;
                Ok(Frame::Credit(le_u32(&frame, HEADER_LEN)))
            }
            FrameKind::Close => decode_close(&frame).map(Frame::Close),
            FrameKind::Cancel => {
                need(&frame, FrameKind::Cancel, CANCEL_LEN)?;
                Ok(Frame::Cancel(le_u64(&frame, HEADER_LEN)))
            }
            FrameKind::Ping => {
                need(&frame, FrameKind::Ping, PING_LEN)?;
                Ok(Frame::Ping(le_u64(&frame, HEADER_LEN)))
            }
            FrameKind::Pong => {
                need(&frame, FrameKind::Pong, PING_LEN)?;
                Ok(Frame::Pong(le_u64(&frame, HEADER_LEN)))
            }
            FrameKind::GoAway => Ok(Frame::GoAway),
        }
    }
}

/// The common header, decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Total frame length.
    pub len: u32,
    /// Kind.
    pub kind: FrameKind,
    /// Flag bits (see the module docs).
    pub flags: u8,
    /// Bulk segment count.
    pub segments: u16,
}

/// The object handle a REQUEST frame names, read from its fixed part without validating
/// anything else: `None` unless `bytes` starts with a REQUEST's kind byte and holds the
/// field. For a receiver that looks ahead (to have the object's entry on its way into
/// the cache while the frame is decoded); the frame is still decoded and checked like
/// any other, so a lie here costs the liar a useless look.
pub fn peek_request_object(bytes: &[u8]) -> Option<u64> {
    if *bytes.get(4)? != FrameKind::Request as u8 {
        return None;
    }
    let object = bytes.get(REQUEST_OBJECT_AT..REQUEST_OBJECT_AT + 8)?;
    Some(u64::from_le_bytes(object.try_into().ok()?))
}

/// Reads the header of `frame`, which must hold exactly one frame, and checks it against
/// the frame: its length field says the frame's length, and only a REQUEST or RESPONSE
/// has bulk segments. The kind-specific rest is for [`Frame::decode_body`],
/// [`decode_request`] or [`decode_response`].
#[inline(always)]
pub(crate) fn checked_header(frame: &[u8]) -> Result<Header, FrameError> {
    let header = read_header(frame)?;
    if header.len as usize != frame.len() {
        return Err(FrameError::LengthMismatch {
            declared: u64::from(header.len),
            actual: frame.len() as u64,
        });
    }
    if header.segments != 0 && !matches!(header.kind, FrameKind::Request | FrameKind::Response) {
        return Err(FrameError::UnexpectedSegments {
            kind: header.kind,
            count: header.segments,
        });
    }
    Ok(header)
}

/// Reads the common header at the start of `bytes` (which may hold more than one frame).
pub fn read_header(bytes: &[u8]) -> Result<Header, FrameError> {
    if bytes.len() < HEADER_LEN {
        return Err(FrameError::Truncated {
            kind: "header",
            need: HEADER_LEN,
            have: bytes.len(),
        });
    }
    let len = le_u32(bytes, 0);
    if (len as usize) < HEADER_LEN {
        return Err(FrameError::LengthTooSmall {
            len,
            min: HEADER_LEN,
        });
    }
    let kind = FrameKind::from_wire(bytes[4])?;
    let segments = le_u16(bytes, 6);
    Ok(Header {
        len,
        kind,
        flags: bytes[5],
        segments,
    })
}

/// [`Frame::decode_with`] with segments apart: only a REQUEST or RESPONSE may have any,
/// and the length field counts them. Apart from [`Frame::decode`] rather than through it:
/// every received frame goes through `decode`, and a segments-apart parameter threaded
/// through it cost each shm null call about 40 instructions in measurement.
fn decode_with_external(
    frame: Bytes,
    external: Box<ExternalSegments>,
) -> Result<Frame, FrameError> {
    let header = read_header(&frame)?;
    let external_len: u64 = external.iter().map(|(_, bytes)| bytes.len() as u64).sum();
    if u64::from(header.len) != frame.len() as u64 + external_len {
        return Err(FrameError::LengthMismatch {
            declared: u64::from(header.len),
            actual: frame.len() as u64 + external_len,
        });
    }
    match header.kind {
        FrameKind::Request => decode_request(frame, header, Some(external)).map(Frame::Request),
        FrameKind::Response => decode_response(frame, header, Some(external)).map(Frame::Response),
        _ => Err(FrameError::BadExternal(
            "only requests and responses carry bulk segments",
        )),
    }
}

fn need(frame: &[u8], kind: FrameKind, len: usize) -> Result<(), FrameError> {
    if frame.len() < len {
        return Err(FrameError::Truncated {
            kind: kind.name(),
            need: len,
            have: frame.len(),
        });
    }
    Ok(())
}

fn check_magic(frame: &[u8]) -> Result<(), FrameError> {
    let magic = [frame[8], frame[9], frame[10], frame[11]];
    if magic != MAGIC {
        return Err(FrameError::BadMagic(magic));
    }
    Ok(())
}

fn decode_hello(frame: &Bytes) -> Result<Hello, FrameError> {
    need(frame, FrameKind::Hello, HELLO_LEN)?;
    check_magic(frame)?;
    Ok(Hello {
        version_min: le_u16(frame, 12),
        version_max: le_u16(frame, 14),
        limits: Limits {
            max_frame_size: le_u32(frame, 16),
            credits: le_u32(frame, 20),
        },
        mechanism: mechanism(frame[24])?,
        auth: auth_data(frame, HELLO_LEN)?,
    })
}

fn decode_welcome(frame: &Bytes) -> Result<Welcome, FrameError> {
    need(frame, FrameKind::Welcome, WELCOME_LEN)?;
    check_magic(frame)?;
    Ok(Welcome {
        version: le_u16(frame, 12),
        limits: Limits {
            max_frame_size: le_u32(frame, 16),
            credits: le_u32(frame, 20),
        },
        mechanism: mechanism(frame[24])?,
        auth: auth_data(frame, WELCOME_LEN)?,
    })
}

fn decode_release(frame: &[u8]) -> Result<Vec<u64>, FrameError> {
    let body = &frame[HEADER_LEN..];
    if body.len() % 8 != 0 {
        return Err(FrameError::Truncated {
            kind: FrameKind::Release.name(),
            need: HEADER_LEN + body.len().next_multiple_of(8),
            have: frame.len(),
        });
    }
    Ok(body
        .chunks_exact(8)
        .map(|handle| le_u64(handle, 0))
        .collect())
}

fn mechanism(byte: u8) -> Result<Mechanism, FrameError> {
    Mechanism::from_wire(byte).ok_or(FrameError::UnknownMechanism(byte))
}

/// The auth data from `start` to the end of the frame.
fn auth_data(frame: &Bytes, start: usize) -> Result<Bytes, FrameError> {
    let len = frame.len() - start;
    if len > MAX_AUTH_DATA {
        return Err(FrameError::AuthDataTooLong {
            len,
            max: MAX_AUTH_DATA,
        });
    }
    Ok(frame.slice(start..))
}

/// Decodes a REQUEST whose `header` has been read from `frame` (and checked against it,
/// see [`checked_header`]); `external`: its segments delivered apart, if any.
pub(crate) fn decode_request(
    frame: Bytes,
    header: Header,
    external: Option<Box<ExternalSegments>>,
) -> Result<Request, FrameError> {
    need(&frame, FrameKind::Request, REQUEST_FIXED_LEN)?;
    let call_id = le_u64(&frame, 8);
    let object = le_u64(&frame, 16);
    let slot = le_u16(&frame, 24);
    let method = le_u16(&frame, 26);
    let fingerprint = le_u32(&frame, 28);
    let timeout_us = le_u32(&frame, 32);
    let inline_len = le_u32(&frame, REQUEST_INLINE_LEN_AT);
    let payload = Payload::parse(
        frame,
        REQUEST_FIXED_LEN,
        inline_len,
        header.segments,
        external,
        header.flags & FLAG_REFERENCES != 0,
    )?;
    Ok(Request {
        call_id,
        object,
        slot,
        method,
        fingerprint,
        timeout_us,
        one_way: header.flags & FLAG_ONE_WAY != 0,
        payload,
    })
}

/// Decodes a RESPONSE, as [`decode_request`] decodes a REQUEST.
pub(crate) fn decode_response(
    frame: Bytes,
    header: Header,
    external: Option<Box<ExternalSegments>>,
) -> Result<Response, FrameError> {
    need(&frame, FrameKind::Response, RESPONSE_FIXED_LEN)?;
    let call_id = le_u64(&frame, 8);
    let status = Status::from_wire(frame[16]);
    let credits = le_u32(&frame, 20);
    let inline_len = le_u32(&frame, RESPONSE_INLINE_LEN_AT);
    let payload = Payload::parse(
        frame,
        RESPONSE_FIXED_LEN,
        inline_len,
        header.segments,
        external,
        header.flags & FLAG_REFERENCES != 0,
    )?;
    Ok(Response {
        call_id,
        status,
        credits,
        arguments_unread: header.flags & FLAG_ARGUMENTS_UNREAD != 0,
        hands_back: header.flags & FLAG_HANDS_BACK != 0,
        payload,
    })
}

fn decode_close(frame: &[u8]) -> Result<Close, FrameError> {
    need(frame, FrameKind::Close, CLOSE_FIXED_LEN)?;
    let status = Status::from_wire(frame[8]);
    let reason = &frame[CLOSE_FIXED_LEN..];
    if reason.len() > MAX_REASON_LEN {
        return Err(FrameError::BadReason("longer than 1024 bytes"));
    }
    let reason = std::str::from_utf8(reason).map_err(|_| FrameError::BadReason("not UTF-8"))?;
    Ok(Close {
        status,
        reason: reason.to_owned(),
    })
}

fn put_header(buf: &mut BytesMut, len: usize, kind: FrameKind) {
    buf.put_u32_le(len as u32);
    buf.put_u8(kind as u8);
    buf.put_u8(0);
    buf.put_u16_le(0);
}

/// Encodes a HELLO frame. Auth data beyond [`MAX_AUTH_DATA`] bytes is the caller's bug:
/// the peer will reject the frame.
pub fn encode_hello(hello: &Hello) -> Bytes {
    let len = HELLO_LEN + hello.auth.len();
    let mut buf = BytesMut::with_capacity(len);
    put_header(&mut buf, len, FrameKind::Hello);
    buf.put_slice(&MAGIC);
    buf.put_u16_le(hello.version_min);
    buf.put_u16_le(hello.version_max);
    buf.put_u32_le(hello.limits.max_frame_size);
    buf.put_u32_le(hello.limits.credits);
    buf.put_u8(hello.mechanism.to_wire());
    buf.put_slice(&[0; 3]);
    buf.put_slice(&hello.auth);
    buf.freeze()
}

/// Encodes a WELCOME frame (see [`encode_hello`] on the auth data's size).
pub fn encode_welcome(welcome: &Welcome) -> Bytes {
    let len = WELCOME_LEN + welcome.auth.len();
    let mut buf = BytesMut::with_capacity(len);
    put_header(&mut buf, len, FrameKind::Welcome);
    buf.put_slice(&MAGIC);
    buf.put_u16_le(welcome.version);
    buf.put_u16_le(0);
    buf.put_u32_le(welcome.limits.max_frame_size);
    buf.put_u32_le(welcome.limits.credits);
    buf.put_u8(welcome.mechanism.to_wire());
    buf.put_slice(&[0; 3]);
    buf.put_slice(&welcome.auth);
    buf.freeze()
}

/// The most handles one RELEASE frame carries (32 KiB of them: within any peer's limit).
pub const MAX_RELEASES_PER_FRAME: usize = 4096;

/// Encodes a RELEASE frame for `handles` (at most [`MAX_RELEASES_PER_FRAME`]), flagged
/// [`FLAG_HANDED_BACK`] if they were handed back to the receiver.
pub fn encode_release(handles: &[u64], handed_back: bool) -> Bytes {
    debug_assert!(handles.len() <= MAX_RELEASES_PER_FRAME);
    let len = HEADER_LEN + 8 * handles.len();
    let mut buf = BytesMut::with_capacity(len);
    put_header(&mut buf, len, FrameKind::Release);
    if handed_back {
        buf[5] = FLAG_HANDED_BACK;
    }
    for handle in handles {
        buf.put_u64_le(*handle);
    }
    buf.freeze()
}

/// Encodes a GRANT frame.
pub fn encode_grant(grant: &Grant) -> Bytes {
    let mut buf = BytesMut::with_capacity(GRANT_LEN);
    put_header(&mut buf, GRANT_LEN, FrameKind::Grant);
    buf.put_u64_le(grant.handle);
    buf.put_slice(&grant.token);
    buf.freeze()
}

/// Encodes an AUTH frame carrying `data`.
pub fn encode_auth(data: &[u8]) -> Bytes {
    let len = HEADER_LEN + data.len();
    let mut buf = BytesMut::with_capacity(len);
    put_header(&mut buf, len, FrameKind::Auth);
    buf.put_slice(data);
    buf.freeze()
}

/// Encodes a CREDIT frame.
pub fn encode_credit(credits: u32) -> Bytes {
    let mut buf = BytesMut::with_capacity(CREDIT_LEN);
    put_header(&mut buf, CREDIT_LEN, FrameKind::Credit);
    buf.put_u32_le(credits);
    buf.freeze()
}

/// Encodes a CANCEL frame for the call `call_id`.
pub fn encode_cancel(call_id: u64) -> Bytes {
    encode_word(FrameKind::Cancel, call_id)
}

/// Encodes a PING frame.
pub fn encode_ping(nonce: u64) -> Bytes {
    encode_word(FrameKind::Ping, nonce)
}

/// Encodes a PONG frame answering the PING with `nonce`.
pub fn encode_pong(nonce: u64) -> Bytes {
    encode_word(FrameKind::Pong, nonce)
}

/// Encodes a GOAWAY frame.
pub fn encode_go_away() -> Bytes {
    let mut buf = BytesMut::with_capacity(HEADER_LEN);
    put_header(&mut buf, HEADER_LEN, FrameKind::GoAway);
    buf.freeze()
}

/// A frame whose body is one u64.
fn encode_word(kind: FrameKind, word: u64) -> Bytes {
    let mut buf = BytesMut::with_capacity(HEADER_LEN + 8);
    put_header(&mut buf, HEADER_LEN + 8, kind);
    buf.put_u64_le(word);
    buf.freeze()
}

/// Encodes a CLOSE frame. A reason longer than the protocol allows is cut at a character
/// boundary.
pub fn encode_close(status: Status, reason: &str) -> Bytes {
    let mut end = reason.len().min(MAX_REASON_LEN);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    let reason = &reason.as_bytes()[..end];
    let len = CLOSE_FIXED_LEN + reason.len();
    let mut buf = BytesMut::with_capacity(len);
    put_header(&mut buf, len, FrameKind::Close);
    buf.put_u8(status.to_wire());
    buf.put_slice(&[0; 3]);
    buf.put_slice(reason);
    buf.freeze()
}

/// Checks a segment count against the protocol limit.
pub(crate) fn check_segment_count(count: u16) -> Result<(), FrameError> {
    if count > MAX_BULK_SEGMENTS {
        return Err(FrameError::TooManySegments {
            count,
            max: MAX_BULK_SEGMENTS,
        });
    }
    Ok(())
}

// The readers below are only called on ranges whose bounds were checked first.
#[inline(always)]
pub(crate) fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline(always)]
pub(crate) fn le_u32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline(always)]
pub(crate) fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(bytes)
}
