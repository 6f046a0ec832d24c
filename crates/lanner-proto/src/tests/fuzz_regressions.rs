//! Inputs found by fuzzing (`fuzz/` at the workspace root), kept as regression tests.
//!
//! [`crate::fuzzing`] holds the fuzz targets' code, so a crash artifact pasted here as a
//! byte array replays exactly what the fuzzer ran. Each regression also asserts the
//! specific outcome its input must have.
//!
//! To date the fuzzers found no crash in the library itself. The crashes they found were
//! in the fuzz targets' own code and are fixed there; their inputs are kept below because
//! they exercise paths worth keeping covered:
//!
//! - `stream_split`: the chunk-size generator multiplied its seed byte without wrapping,
//!   overflowing for any seed byte of 2 or more (fixed with `wrapping_mul`);
//! - `stream_split`: a REQUEST and a CLOSE in one read. The harness processes a whole read
//!   before the runtime reacts, so answering the request finds the connection closed and
//!   `send_response` refuses with `SendError::NotOpen`; the target expected success.
//!
//! One was in the library: `frame_decode` found that copying the structure of a frame
//! read in place (`in_place::copy_structure`) reserved room for the inline length the
//! frame claimed (4 GiB) before checking that the frame held that much.

use bytes::Bytes;

use super::all_ok;
use crate::builder::MessageBuilder;
use crate::connection::Event;
use crate::error::{FrameError, SendError};
use crate::frame::{Close, Frame};
use crate::fuzzing::{frame_decode, stream_split};
use crate::harness::Pair;
use crate::status::Status;

/// `stream_split` crash: a REQUEST (call 1, inline `[1]`) and a CLOSE ("bye") in one read
/// (re-encoded for protocol version 2, whose REQUEST carries a timeout).
/// Seed byte 0x05.
const REQUEST_THEN_CLOSE: [u8; 57] = [
    0x05, // chunk seed
    0x29, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, // REQUEST header, 41 bytes
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // call id 1
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // object 2
    0x00, 0x00, 0x01, 0x00, // slot 0, method 1
    0xef, 0xbe, 0xad, 0xde, // fingerprint
    0x00, 0x00, 0x00, 0x00, // no timeout
    0x01, 0x00, 0x00, 0x00, 0x01, // inline: 1 byte
    0x0f, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, // CLOSE header, 15 bytes
    0x06, 0x00, 0x00, 0x00, b'b', b'y', b'e', // Unavailable, "bye"
];

#[test]
fn request_then_close_in_one_read() {
    stream_split(&REQUEST_THEN_CLOSE);
    frame_decode(&REQUEST_THEN_CLOSE[1..42]);

    let mut pair = Pair::connected();
    pair.server.inject(&REQUEST_THEN_CLOSE[1..]);
    let events = all_ok(pair.server.receive_all());
    let [Event::Request(request), Event::Closed(close)] = &events[..] else {
        panic!("expected a request then a close, got {events:?}");
    };
    assert_eq!(request.call_id, 1);
    assert_eq!((request.object, request.slot, request.method), (2, 0, 1));
    assert_eq!(request.fingerprint, 0xdead_beef);
    assert_eq!(request.payload.inline_slice(), [1]);
    assert_eq!(
        close,
        &Close {
            status: Status::Unavailable,
            reason: "bye".to_owned(),
        }
    );
    assert!(!pair.server.conn.is_open());
    // Answering the request now is refused, not a panic, and sends nothing.
    assert_eq!(
        pair.server_respond(1, MessageBuilder::response(Status::Ok)),
        Err(SendError::NotOpen)
    );
    assert_eq!(pair.server_sent.len(), 1, "only the WELCOME was sent");
}

#[test]
fn chunk_seeds_of_every_value_replay() {
    // The first `stream_split` crash overflowed on any seed byte of 2 or more, before any
    // protocol code ran. Every seed value drives every chunking strategy over a valid
    // stream of two requests.
    let stream = [
        &super::raw_request(1, &[1], &[b"segment"])[..],
        &super::raw_request(2, &[], &[])[..],
    ]
    .concat();
    for seed in 0..=255u8 {
        let mut input = vec![seed];
        input.extend_from_slice(&stream);
        stream_split(&input);
    }
    // And the stream itself is accepted whole by an open server.
    let mut pair = Pair::connected();
    pair.server.inject(&stream);
    assert_eq!(all_ok(pair.server.receive_all()).len(), 2);
}

#[test]
fn replaying_malformed_input_reports_the_error() {
    // A header announcing a CLOSE of 11 bytes (one short of its fixed part).
    let input = [
        0x3b, 0x0b, 0x00, 0x00, 0x00, 0x06, 0x52, 0x00, 0x00, 0x00, 0x00, 0x03,
    ];
    stream_split(&input);
    frame_decode(&input[1..]);
    assert_eq!(
        Frame::decode(Bytes::copy_from_slice(&input[1..])),
        Err(FrameError::Truncated {
            kind: "CLOSE",
            need: 12,
            have: 11,
        })
    );
}

/// `frame_decode` out-of-memory: a RESPONSE of 81 bytes whose inline length claims
/// 4 GiB - 254, with two segments. Copying its structure for the in-place path reserved
/// that much before comparing it with the frame's size. (libFuzzer's malloc limit caught
/// it; here such a reservation would succeed lazily, so this test replays the input and
/// checks its outcome, while the fuzz target keeps guarding the reservation.)
const RESPONSE_CLAIMING_4_GIB_INLINE: [u8; 81] = [
    0x51, 0x00, 0x00, 0x00, 0x04, 0x00, 0x02, 0x00, // RESPONSE header, 81 bytes, 2 segments
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // call id 1
    0x01, 0x00, 0x00, 0x00, // status, reserved
    0x01, 0x00, 0x00, 0x00, // credits
    0x02, 0xff, 0xff, 0xff, // inline length: 0xffffff02
    b'e', b'r', b'r', b'(', 0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, b'x', b'x', b'x', b'x', b'x',
    b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x',
    b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x', b'x',
    b'x', b'x', b'x', b'y', b'z',
];

#[test]
fn a_frame_claiming_gigabytes_of_inline_data_reserves_nothing_for_them() {
    frame_decode(&RESPONSE_CLAIMING_4_GIB_INLINE);
    let shared = Bytes::copy_from_slice(&RESPONSE_CLAIMING_4_GIB_INLINE);
    let (copy, apart) = crate::in_place::copy_structure(&shared, Vec::new());
    assert_eq!(copy, shared, "copied whole, as it does not add up");
    assert!(apart.is_empty());
    assert!(matches!(
        crate::in_place::decode(shared, Vec::new()),
        Err(FrameError::InlineOverflow { .. })
    ));
}
