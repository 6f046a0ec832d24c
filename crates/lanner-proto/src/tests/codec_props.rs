//! Property tests of the codec: arbitrary messages round-trip exactly through the
//! builder, the connection's stamping, the wire, the splitter and the decoder; and no
//! input, arbitrary or a mutated valid frame, makes the decoders or the state machine
//! panic.

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;

use crate::auth::Mechanism;
use crate::builder::MessageBuilder;
use crate::connection::{Connection, Event};
use crate::frame::{self, Frame, HEADER_LEN, REQUEST_FIXED_LEN, RESPONSE_FIXED_LEN};
use crate::fuzzing::{self, busy_pair, check_payload};
use crate::harness::{Pair, Peer};
use crate::limits::Limits;
use crate::out_frame::OutFrame;
use crate::payload::Payload;
use crate::splitter::FrameSplitter;
use crate::status::Status;

#[derive(Debug, Clone)]
struct Message {
    object: u64,
    slot: u16,
    method: u16,
    fingerprint: u32,
    inline: Vec<u8>,
    /// The reference table (none: no table).
    references: Vec<u64>,
    bulk: Vec<Vec<u8>>,
}

fn message() -> impl Strategy<Value = Message> {
    (
        any::<u64>(),
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        vec(any::<u8>(), 0..300),
        prop_oneof![Just(Vec::new()), vec(any::<u64>(), 0..6)],
        vec(vec(any::<u8>(), 0..600), 0..8),
    )
        .prop_map(
            |(object, slot, method, fingerprint, inline, references, bulk)| Message {
                object,
                slot,
                method,
                fingerprint,
                inline,
                references,
                bulk,
            },
        )
}

fn status() -> impl Strategy<Value = Status> {
    (0u8..=14).prop_map(|b| Status::from_wire(if b == 14 { 255 } else { b }))
}

/// Chunk sizes for feeding a stream; each at least 1.
fn chunks() -> impl Strategy<Value = Vec<usize>> {
    vec(1usize..64, 1..16)
}

fn fill(builder: &mut MessageBuilder, message: &Message) {
    builder.inline().put_slice(&message.inline);
    builder.end_with_references(&message.references);
    for segment in &message.bulk {
        builder.push_segment(Bytes::copy_from_slice(segment));
    }
}

/// Writes the frame as a transport would: vectored writes of the I/O slices, advancing by
/// `step`-byte partial writes.
fn write_vectored(mut out: OutFrame, step: usize) -> Vec<u8> {
    let mut wire = Vec::new();
    while out.remaining() > 0 {
        let mut slices = [std::io::IoSlice::new(&[]); 4];
        let (filled, bytes) = out.io_slices(&mut slices);
        assert!(filled > 0, "an unfinished frame has something to write");
        assert!(bytes <= out.remaining());
        let mut budget = step;
        let mut written = 0;
        for slice in &slices[..filled] {
            let n = slice.len().min(budget);
            wire.extend_from_slice(&slice[..n]);
            budget -= n;
            written += n;
            if budget == 0 {
                break;
            }
        }
        let before = out.remaining();
        out.advance(written);
        assert_eq!(out.remaining(), before - written);
    }
    assert_eq!(out.remaining(), 0);
    wire
}

/// Feeds `wire` to a splitter in chunks of the given sizes (cycled) and returns the frames.
fn split_in_chunks(wire: &[u8], sizes: &[usize], max: u32) -> Vec<Bytes> {
    let splitter = FrameSplitter::new(max);
    let mut buf = BytesMut::new();
    let mut frames = Vec::new();
    let mut at = 0;
    for &size in sizes.iter().cycle() {
        if at == wire.len() {
            break;
        }
        let end = (at + size).min(wire.len());
        buf.extend_from_slice(&wire[at..end]);
        at = end;
        while let Some(frame) = splitter.split(&mut buf).expect("valid stream") {
            frames.push(frame);
        }
    }
    assert!(buf.is_empty(), "{} bytes left over", buf.len());
    frames
}

fn assert_payload_eq(payload: &Payload, message: &Message) {
    assert_eq!(payload.inline_slice(), &message.inline[..]);
    assert_eq!(payload.references().collect::<Vec<_>>(), message.references);
    assert_eq!(payload.segment_count(), message.bulk.len());
    let segments: Vec<Bytes> = payload.segments().collect();
    assert_eq!(segments, message.bulk);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn requests_round_trip_exactly(
        messages in vec(message(), 1..5),
        sizes in chunks(),
        step in 1usize..200,
    ) {
        let mut pair = Pair::connected();
        let mut wire = Vec::new();
        let mut ids = Vec::new();
        for message in &messages {
            let mut builder = MessageBuilder::request(
                message.object, message.slot, message.method, message.fingerprint);
            fill(&mut builder, message);
            let expected_len = builder.encoded_len();
            let (call_id, out) = pair.client.conn.send_request(builder)
                .map_err(|(e, _)| e).unwrap();
            prop_assert_eq!(out.remaining() as u64, expected_len);
            // The vectored path and the contiguous path give the same bytes.
            let vectored = write_vectored(out.clone(), step);
            prop_assert_eq!(&vectored[..], &out.into_contiguous()[..]);
            let header = frame::read_header(&vectored).unwrap();
            prop_assert_eq!(header.len as usize, vectored.len());
            prop_assert_eq!(usize::from(header.segments), message.bulk.len());
            ids.push(call_id);
            wire.extend_from_slice(&vectored);
        }

        let frames = split_in_chunks(&wire, &sizes, Limits::default().max_frame_size);
        prop_assert_eq!(frames.len(), messages.len());
        for ((frame, message), &call_id) in frames.iter().zip(&messages).zip(&ids) {
            let Ok(Frame::Request(request)) = Frame::decode(frame.clone()) else {
                panic!("frame does not decode as a request");
            };
            prop_assert_eq!(request.call_id, call_id);
            prop_assert_eq!(request.object, message.object);
            prop_assert_eq!(frame::peek_request_object(frame), Some(message.object));
            prop_assert_eq!(request.slot, message.slot);
            prop_assert_eq!(request.method, message.method);
            prop_assert_eq!(request.fingerprint, message.fingerprint);
            assert_payload_eq(&request.payload, message);
            check_payload(&request.payload, REQUEST_FIXED_LEN, frame.len());

            // The receiving state machine sees the same request.
            match pair.server.conn.handle_frame(frame.clone()) {
                Ok(Event::Request(seen)) => prop_assert_eq!(seen, request),
                other => panic!("server did not accept the request: {other:?}"),
            }
        }
        prop_assert_eq!(pair.server.conn.peer_in_flight() as usize, messages.len());
    }

    #[test]
    fn responses_round_trip_exactly(
        message in message(),
        status in status(),
        sizes in chunks(),
    ) {
        let mut pair = Pair::connected();
        let call_id = pair.client_call(MessageBuilder::request(1, 2, 3, 4)).unwrap();
        let _ = pair.server.receive_all();
        let mut builder = MessageBuilder::response(status);
        fill(&mut builder, &message);
        prop_assert_eq!(builder.status(), Some(status));
        let out = pair.server.conn.send_response(call_id, builder).unwrap();
        let wire = out.into_contiguous();
        let frames = split_in_chunks(&wire, &sizes, Limits::default().max_frame_size);
        prop_assert_eq!(frames.len(), 1);
        let Ok(Frame::Response(response)) = Frame::decode(frames[0].clone()) else {
            panic!("frame does not decode as a response");
        };
        prop_assert_eq!(response.call_id, call_id);
        prop_assert_eq!(frame::peek_request_object(&frames[0]), None);
        prop_assert_eq!(response.status, status);
        prop_assert_eq!(response.credits, 1);
        assert_payload_eq(&response.payload, &message);
        check_payload(&response.payload, RESPONSE_FIXED_LEN, wire.len());
        match pair.client.conn.handle_frame(frames[0].clone()) {
            Ok(Event::Response(seen)) => prop_assert_eq!(seen, response),
            other => panic!("client did not accept the response: {other:?}"),
        }
        prop_assert_eq!(pair.client.conn.in_flight(), 0);
    }

    #[test]
    fn close_frames_round_trip(status in status(), reason in ".{0,1100}") {
        let Ok(Frame::Close(close)) = Frame::decode(frame::encode_close(status, &reason)) else {
            panic!("close frame does not decode");
        };
        prop_assert_eq!(close.status, status);
        prop_assert!(close.reason.len() <= 1024);
        prop_assert!(reason.starts_with(&close.reason));
        // Only as much was cut as the limit required.
        if reason.len() <= 1024 {
            prop_assert_eq!(&close.reason, &reason);
        } else {
            prop_assert!(close.reason.len() > 1024 - 4);
        }
    }

    #[test]
    fn handshake_frames_round_trip(
        version_min in any::<u16>(),
        version_max in any::<u16>(),
        max_frame_size in any::<u32>(),
        credits in any::<u32>(),
    ) {
        let limits = Limits { max_frame_size, credits };
        let hello = frame::Hello { version_min, version_max, limits, mechanism: Mechanism::None, auth: Bytes::new() };
        prop_assert_eq!(
            Frame::decode(frame::encode_hello(&hello)),
            Ok(Frame::Hello(hello))
        );
        let welcome = frame::Welcome { version: version_min, limits, mechanism: Mechanism::PreSharedKey, auth: Bytes::from_static(b"data") };
        prop_assert_eq!(
            Frame::decode(frame::encode_welcome(&welcome)),
            Ok(Frame::Welcome(welcome))
        );
        prop_assert_eq!(Frame::decode(frame::encode_credit(credits)), Ok(Frame::Credit(credits)));
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes(bytes in vec(any::<u8>(), 0..512)) {
        exercise(&bytes);
    }

    #[test]
    fn decoders_never_panic_on_arbitrary_bytes_with_a_plausible_header(
        len_delta in -8i64..64,
        kind in 0u8..8,
        segments in prop_oneof![0u16..12, Just(1024u16), Just(1025u16), any::<u16>()],
        body in vec(any::<u8>(), 0..256),
    ) {
        // A header whose length field is near the truth, so the decoders get past it.
        let len = (HEADER_LEN as i64 + body.len() as i64 + len_delta).max(0) as u32;
        let bytes = super::raw_frame_with_len(len, kind, segments, &body);
        exercise(&bytes);
    }

    #[test]
    fn decoders_never_panic_on_mutated_valid_frames(
        message in message(),
        response in any::<bool>(),
        mutations in vec((any::<usize>(), any::<u8>()), 1..8),
        truncate in proptest::option::of(any::<usize>()),
        extend in vec(any::<u8>(), 0..8),
    ) {
        let mut builder = if response {
            MessageBuilder::response(Status::Ok)
        } else {
            MessageBuilder::request(
                message.object, message.slot, message.method, message.fingerprint)
        };
        fill(&mut builder, &message);
        builder.set_call_id(1);
        let mut bytes = builder.finish().into_contiguous().to_vec();
        for (at, byte) in mutations {
            let at = at % bytes.len();
            bytes[at] = byte;
        }
        if let Some(cut) = truncate {
            bytes.truncate(cut % (bytes.len() + 1));
        }
        bytes.extend_from_slice(&extend);
        exercise(&bytes);
    }
}

/// Runs every decoder and state machine over `bytes` and checks what they say is
/// consistent. Panics (fails) only on a decoder panic or an inconsistency.
pub(super) fn exercise(bytes: &[u8]) {
    // The decoder, on the bytes as one frame.
    fuzzing::frame_decode(bytes);
    let decoded = Frame::decode(Bytes::copy_from_slice(bytes));

    // The splitter, on the bytes as a stream: it yields whole frames whose lengths add up
    // to what it consumed, and stops at an error or when more bytes are needed.
    for max in [4096u32, 1 << 20] {
        let splitter = FrameSplitter::new(max);
        let mut buf = BytesMut::from(bytes);
        let mut consumed = 0;
        loop {
            let before = buf.len();
            match splitter.split(&mut buf) {
                Ok(Some(frame)) => {
                    assert!(frame.len() >= HEADER_LEN && frame.len() <= max as usize);
                    assert_eq!(
                        frame::read_header(&frame).unwrap().len as usize,
                        frame.len()
                    );
                    consumed += frame.len();
                    assert_eq!(buf.len(), before - frame.len());
                    let _ = Frame::decode(frame);
                }
                Ok(None) => {
                    assert!(splitter.bytes_needed(&buf).unwrap() > buf.len());
                    break;
                }
                Err(_) => {
                    assert_eq!(buf.len(), before, "an error consumes nothing");
                    break;
                }
            }
        }
        assert_eq!(consumed + buf.len(), bytes.len());
    }

    // The state machine in each state, on the bytes as one frame and as a stream.
    for mut conn in connections() {
        let result = conn.handle_frame(Bytes::copy_from_slice(bytes));
        match (&decoded, &result) {
            (Err(error), Err(protocol)) => {
                assert_eq!(protocol, &crate::ProtocolError::Frame(error.clone()));
            }
            (Err(_), Ok(event)) => panic!("undecodable frame accepted as {event:?}"),
            _ => {}
        }
        if let Err(error) = &result {
            assert!(matches!(
                Frame::decode(error.close_frame()),
                Ok(Frame::Close(_))
            ));
        }
    }
    for conn in connections() {
        fuzzing::drive(&mut Peer::new(conn), [bytes]);
    }
}

/// Connections in each interesting state: fresh server and client, and both ends of an
/// open pair with a call outstanding each way and small limits.
fn connections() -> Vec<Connection> {
    let server = Connection::server(Limits::default());
    let (client, _) = Connection::client(Limits::default());
    let pair = busy_pair();
    vec![server, client, pair.server.conn, pair.client.conn]
}

#[test]
fn the_exercise_helper_accepts_valid_streams() {
    // A sanity check that `exercise` itself passes on valid input of every kind.
    let mut pair = Pair::connected();
    pair.client_call(MessageBuilder::request(1, 0, 0, 0))
        .unwrap();
    for frame in pair.client_sent.iter().chain(&pair.server_sent) {
        exercise(frame);
    }
    exercise(&frame::encode_close(Status::Ok, "bye"));
    exercise(&frame::encode_credit(3));
    let mut stream = Vec::new();
    for frame in &pair.client_sent {
        stream.extend_from_slice(frame);
    }
    exercise(&stream);
}
