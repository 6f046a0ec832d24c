//! Inputs found by fuzzing (`fuzz/` at the workspace root), kept as regression tests.
//!
//! [`replay_stream_split`] and [`replay_frame_decode`] do what the fuzz targets of the
//! same names do, with the same checks, so a crash artifact can be pasted here as a byte
//! array and replayed under `cargo test`. Each regression also asserts the specific
//! outcome its input must have.
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

use bytes::{Bytes, BytesMut};

use super::all_ok;
use crate::builder::MessageBuilder;
use crate::connection::{Connection, Event};
use crate::error::{FrameError, ProtocolError, SendError};
use crate::frame::{self, Close, Frame, Hello, REQUEST_FIXED_LEN, RESPONSE_FIXED_LEN, Welcome};
use crate::harness::{Pair, Peer, wire_bytes};
use crate::limits::{Limits, PROTOCOL_VERSION};
use crate::payload::Payload;
use crate::splitter::FrameSplitter;
use crate::status::Status;

const SMALL: Limits = Limits {
    max_frame_size: 4096,
    credits: 2,
};

/// Deterministic chunk sizes from a one-byte seed (as in the fuzz target).
struct Chunks {
    state: u32,
    max: usize,
}

impl Chunks {
    fn new(seed: u8) -> Chunks {
        let max = [1, 3, 16, 64, 512, 4096, 70_000, usize::MAX][usize::from(seed & 7)];
        Chunks {
            state: u32::from(seed).wrapping_mul(0x9e37_79b9) | 1,
            max,
        }
    }

    fn next_size(&mut self) -> usize {
        self.state ^= self.state << 13;
        self.state ^= self.state >> 17;
        self.state ^= self.state << 5;
        1 + (self.state as usize) % self.max.min(1 << 20)
    }
}

fn check_error(error: &ProtocolError) {
    match Frame::decode(error.close_frame()) {
        Ok(Frame::Close(close)) => assert_eq!(close.status, error.status()),
        other => panic!("close frame for {error:?} decodes to {other:?}"),
    }
}

fn react(conn: &mut Connection, event: Event) {
    let Event::Request(request) = event else {
        return;
    };
    let inline = request.payload.inline_slice();
    if inline.first().is_some_and(|b| b & 1 == 1) {
        assert_eq!(Frame::decode(conn.grant_credits(1)), Ok(Frame::Credit(1)));
    }
    let mut reply = MessageBuilder::response(Status::Ok);
    reply.inline().put_slice(inline);
    reply.inline().put_slice(inline);
    for segment in request.payload.segments() {
        reply.push_segment(segment);
    }
    let max = conn.peer_limits().max_frame_size;
    let fits = reply.check(max).is_ok();
    if !conn.is_open() {
        let result = conn.send_response(request.call_id, reply);
        assert_eq!(result.map(|_| ()), Err(SendError::NotOpen));
        return;
    }
    let bytes = wire_bytes(conn.send_response(request.call_id, reply).unwrap());
    assert!(bytes.len() <= max as usize);
    let Ok(Frame::Response(response)) = Frame::decode(bytes) else {
        panic!("the answer does not decode as a response");
    };
    assert_eq!(response.call_id, request.call_id);
    if fits {
        assert_eq!(response.status, Status::Ok);
        assert!(response.payload.segments().eq(request.payload.segments()));
    } else {
        assert_eq!(response.status, Status::Internal);
    }
}

fn drive(mut conn: Connection, stream: &[u8], chunks: &mut Chunks) {
    let mut buf = BytesMut::new();
    let mut at = 0;
    while at < stream.len() {
        let end = at.saturating_add(chunks.next_size()).min(stream.len());
        buf.extend_from_slice(&stream[at..end]);
        at = end;
        loop {
            let splitter = FrameSplitter::new(conn.max_incoming_frame_size());
            match splitter.split(&mut buf) {
                Ok(Some(frame)) => match conn.handle_frame(frame) {
                    Ok(event) => react(&mut conn, event),
                    Err(error) => return check_error(&error),
                },
                Ok(None) => break,
                Err(error) => return check_error(&error.into()),
            }
        }
    }
}

fn drive_peer(peer: &mut Peer, stream: &[u8], chunks: &mut Chunks) {
    let mut at = 0;
    while at < stream.len() {
        let end = at.saturating_add(chunks.next_size()).min(stream.len());
        peer.inject(&stream[at..end]);
        at = end;
        for event in peer.receive_all() {
            match event {
                Ok(event) => react(&mut peer.conn, event),
                Err(error) => return check_error(&error),
            }
        }
    }
}

/// A pair open with [`SMALL`] limits and one call outstanding each way.
fn busy_pair() -> Pair {
    let mut pair = Pair::connected_with(SMALL, SMALL);
    pair.client_call(MessageBuilder::request(1, 0, 0, 0))
        .unwrap();
    let _ = pair.server.receive_all();
    let (_, out) = pair
        .server
        .conn
        .send_request(MessageBuilder::request(2, 0, 0, 0))
        .map_err(|(error, _)| error)
        .unwrap();
    pair.client.inject(&wire_bytes(out));
    let _ = pair.client.receive_all();
    pair
}

/// Does what the `stream_split` fuzz target does with `input`.
fn replay_stream_split(input: &[u8]) {
    let Some((&seed, data)) = input.split_first() else {
        return;
    };
    let mut chunks = Chunks::new(seed);
    drive(Connection::server(SMALL), data, &mut chunks);
    drive(Connection::client(SMALL).0, data, &mut chunks);
    let hello = frame::encode_hello(&Hello {
        version_min: PROTOCOL_VERSION,
        version_max: PROTOCOL_VERSION,
        limits: SMALL,
    });
    drive(
        Connection::server(SMALL),
        &[&hello[..], data].concat(),
        &mut chunks,
    );
    let welcome = frame::encode_welcome(&Welcome {
        version: PROTOCOL_VERSION,
        limits: SMALL,
    });
    drive(
        Connection::client(SMALL).0,
        &[&welcome[..], data].concat(),
        &mut chunks,
    );
    let mut pair = busy_pair();
    drive_peer(&mut pair.server, data, &mut chunks);
    drive_peer(&mut pair.client, data, &mut chunks);
}

fn check_payload(payload: &Payload, fixed_len: usize, frame_len: usize) {
    let bulk: usize = payload.segments().map(|s| s.len()).sum();
    assert_eq!(
        fixed_len + payload.inline_slice().len() + 4 * payload.segment_count() + bulk,
        frame_len
    );
}

/// Does what the `frame_decode` fuzz target does with `input`.
fn replay_frame_decode(input: &[u8]) {
    let header = frame::read_header(input);
    let Ok(decoded) = Frame::decode(Bytes::copy_from_slice(input)) else {
        return;
    };
    let header = header.unwrap();
    assert_eq!(header.len as usize, input.len());
    assert_eq!(header.kind, decoded.kind());
    match &decoded {
        Frame::Request(r) => check_payload(&r.payload, REQUEST_FIXED_LEN, input.len()),
        Frame::Response(r) => check_payload(&r.payload, RESPONSE_FIXED_LEN, input.len()),
        Frame::Close(close) => assert!(close.reason.len() <= 1024),
        _ => assert_eq!(header.segments, 0),
    }
}

/// `stream_split` crash: a REQUEST (call 1, inline `[1]`) and a CLOSE ("bye") in one read.
/// Seed byte 0x05.
const REQUEST_THEN_CLOSE: [u8; 53] = [
    0x05, // chunk seed
    0x25, 0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, // REQUEST header, 37 bytes
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // call id 1
    0x02, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // object 2
    0x00, 0x00, 0x01, 0x00, // slot 0, method 1
    0xef, 0xbe, 0xad, 0xde, // fingerprint
    0x01, 0x00, 0x00, 0x00, 0x01, // inline: 1 byte
    0x0f, 0x00, 0x00, 0x00, 0x06, 0x00, 0x00, 0x00, // CLOSE header, 15 bytes
    0x06, 0x00, 0x00, 0x00, b'b', b'y', b'e', // Unavailable, "bye"
];

#[test]
fn request_then_close_in_one_read() {
    replay_stream_split(&REQUEST_THEN_CLOSE);
    replay_frame_decode(&REQUEST_THEN_CLOSE[1..38]);

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
        replay_stream_split(&input);
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
    replay_stream_split(&input);
    replay_frame_decode(&input[1..]);
    assert_eq!(
        Frame::decode(Bytes::copy_from_slice(&input[1..])),
        Err(FrameError::Truncated {
            kind: "CLOSE",
            need: 12,
            have: 11,
        })
    );
}
