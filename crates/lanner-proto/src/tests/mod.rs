//! Protocol tests on the deterministic two-peer harness.
//!
//! Each submodule covers one area: the handshake, flow-control credits, calls and their
//! payloads, malformed frames, stream splitting, property tests of the codec, and the
//! regression inputs found by fuzzing (`/fuzz` at the workspace root).

mod auth;
mod calls;
mod codec_props;
mod credits;
mod external;
mod fuzz_regressions;
mod handshake;
mod malformed;
mod plain;
mod stream;

use bytes::{BufMut, Bytes, BytesMut};

use crate::builder::MessageBuilder;
use crate::connection::{Connection, Event};
use crate::error::{FrameError, ProtocolError};
use crate::frame::{Frame, HEADER_LEN};
use crate::limits::Limits;
use crate::status::Status;

/// Limits with the given frame size and credits.
pub(super) fn limits(max_frame_size: u32, credits: u32) -> Limits {
    Limits {
        max_frame_size,
        credits,
    }
}

/// A request builder with `inline` data and `bulk` segments.
pub(super) fn request(
    object: u64,
    slot: u16,
    method: u16,
    fingerprint: u32,
    inline: &[u8],
    bulk: &[&[u8]],
) -> MessageBuilder {
    with_payload(
        MessageBuilder::request(object, slot, method, fingerprint),
        inline,
        bulk,
    )
}

/// A response builder with `inline` data and `bulk` segments.
pub(super) fn response(status: Status, inline: &[u8], bulk: &[&[u8]]) -> MessageBuilder {
    with_payload(MessageBuilder::response(status), inline, bulk)
}

fn with_payload(mut builder: MessageBuilder, inline: &[u8], bulk: &[&[u8]]) -> MessageBuilder {
    builder.inline().put_slice(inline);
    for segment in bulk {
        builder.push_segment(Bytes::copy_from_slice(segment));
    }
    builder
}

/// Encodes a request as wire bytes with a call id of our choosing, bypassing the
/// connection's credit accounting (to play a misbehaving peer).
pub(super) fn raw_request(call_id: u64, inline: &[u8], bulk: &[&[u8]]) -> Bytes {
    let mut builder = request(7, 0, 1, 0xdead_beef, inline, bulk);
    builder.set_call_id(call_id);
    builder.finish().into_contiguous()
}

/// Encodes a response as wire bytes for `call_id`, bypassing the connection.
pub(super) fn raw_response(call_id: u64, status: Status, inline: &[u8]) -> Bytes {
    let mut builder = response(status, inline, &[]);
    builder.set_call_id(call_id);
    builder.set_credits(1);
    builder.finish().into_contiguous()
}

/// A frame with the given header fields followed by `body`; the length field is the true
/// length.
pub(super) fn raw_frame(kind: u8, segments: u16, body: &[u8]) -> Bytes {
    raw_frame_with_len((HEADER_LEN + body.len()) as u32, kind, segments, body)
}

/// A frame whose length field says `len`, whatever the body's size.
pub(super) fn raw_frame_with_len(len: u32, kind: u8, segments: u16, body: &[u8]) -> Bytes {
    let mut buf = BytesMut::with_capacity(HEADER_LEN + body.len());
    buf.put_u32_le(len);
    buf.put_u8(kind);
    buf.put_u8(0);
    buf.put_u16_le(segments);
    buf.put_slice(body);
    buf.freeze()
}

/// Unwraps a list of events that must all be `Ok`.
pub(super) fn all_ok(events: Vec<Result<Event, ProtocolError>>) -> Vec<Event> {
    events
        .into_iter()
        .map(|event| event.unwrap_or_else(|error| panic!("unexpected protocol error: {error}")))
        .collect()
}

/// Asserts that `error`'s close frame decodes to a CLOSE with `status` and a reason that
/// is the error's message (cut to the protocol's limit).
pub(super) fn assert_close_frame(error: &ProtocolError, status: Status) {
    match Frame::decode(error.close_frame()) {
        Ok(Frame::Close(close)) => {
            assert_eq!(close.status, status, "close status for {error}");
            let message = error.to_string();
            assert!(!close.reason.is_empty());
            assert!(
                message.starts_with(&close.reason),
                "reason {:?} is not a prefix of {message:?}",
                close.reason
            );
        }
        other => panic!("close frame of {error} decodes to {other:?}"),
    }
}

/// Asserts that `frame` fails to decode with exactly `expected`, both on its own and
/// through a connection in each state that could receive it.
pub(super) fn assert_rejected(frame: Bytes, expected: FrameError) {
    assert_eq!(Frame::decode(frame.clone()), Err(expected.clone()));
    let mut server = Connection::server(Limits::default());
    let error = server.handle_frame(frame.clone()).unwrap_err();
    assert_eq!(error, ProtocolError::Frame(expected.clone()));
    assert_close_frame(&error, Status::Protocol);
    let (mut client, _hello) = Connection::client(Limits::default());
    assert_eq!(
        client.handle_frame(frame),
        Err(ProtocolError::Frame(expected))
    );
}

/// True if `inner` lies entirely within `outer`'s memory.
pub(super) fn is_within(inner: &[u8], outer: &[u8]) -> bool {
    let outer_start = outer.as_ptr() as usize;
    let outer_end = outer_start + outer.len();
    let inner_start = inner.as_ptr() as usize;
    inner_start >= outer_start && inner_start + inner.len() <= outer_end
}

/// Offset of `inner` from the start of `outer` (which must contain it).
pub(super) fn offset_in(inner: &[u8], outer: &[u8]) -> usize {
    assert!(is_within(inner, outer), "slice is not within the frame");
    inner.as_ptr() as usize - outer.as_ptr() as usize
}
