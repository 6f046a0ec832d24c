//! Stream framing: frames arriving in arbitrary pieces, several frames per read, and
//! oversized frames rejected from their header alone.

use bytes::{BufMut, BytesMut};

use super::{all_ok, limits, raw_frame_with_len, request, response};
use crate::connection::{Connection, Event, HANDSHAKE_MAX_FRAME_SIZE};
use crate::error::{FrameError, ProtocolError};
use crate::frame::{FrameKind, HEADER_LEN};
use crate::harness::{Pair, Peer};
use crate::limits::Limits;
use crate::splitter::FrameSplitter;
use crate::status::Status;

#[test]
fn an_oversized_frame_is_rejected_from_its_header_alone() {
    let mut pair = Pair::connected_with(Limits::default(), limits(8192, 4));
    // Only the 8-byte header of a 9000-byte request arrives.
    let header = raw_frame_with_len(9000, FrameKind::Request as u8, 0, &[]);
    assert_eq!(header.len(), HEADER_LEN);
    pair.server.inject(&header);
    assert_eq!(
        pair.server.receive_all(),
        vec![Err(ProtocolError::Frame(FrameError::TooLarge {
            len: 9000,
            max: 8192,
        }))]
    );
    // A frame of exactly the limit is merely incomplete.
    let splitter = FrameSplitter::new(8192);
    let mut buf = BytesMut::from(&raw_frame_with_len(8192, FrameKind::Request as u8, 0, &[])[..]);
    assert_eq!(splitter.split(&mut buf), Ok(None));
    assert_eq!(splitter.bytes_needed(&buf), Ok(8192));
    assert_eq!(buf.len(), HEADER_LEN, "nothing was consumed");
}

#[test]
fn the_splitter_reports_too_large_without_consuming_or_reserving() {
    let splitter = FrameSplitter::new(4096);
    assert_eq!(splitter.max_frame_size(), 4096);
    let mut buf = BytesMut::new();
    buf.put_u32_le(u32::MAX);
    buf.put_u8(FrameKind::Response as u8);
    buf.put_u8(0);
    buf.put_u16_le(0);
    let capacity = buf.capacity();
    let expected = FrameError::TooLarge {
        len: u64::from(u32::MAX),
        max: 4096,
    };
    assert_eq!(splitter.split(&mut buf), Err(expected.clone()));
    assert_eq!(splitter.bytes_needed(&buf), Err(expected));
    assert_eq!(buf.len(), HEADER_LEN);
    assert_eq!(buf.capacity(), capacity);
}

#[test]
fn before_the_handshake_only_small_frames_are_accepted() {
    let mut server = Peer::new(Connection::server(limits(1 << 20, 4)));
    let header = raw_frame_with_len(HANDSHAKE_MAX_FRAME_SIZE + 1, FrameKind::Hello as u8, 0, &[]);
    server.inject(&header);
    assert_eq!(
        server.receive_all(),
        vec![Err(ProtocolError::Frame(FrameError::TooLarge {
            len: u64::from(HANDSHAKE_MAX_FRAME_SIZE) + 1,
            max: HANDSHAKE_MAX_FRAME_SIZE,
        }))]
    );
}

/// Feeds `wire` to `peer` one byte per read, asserting that nothing happens before the
/// last byte; returns the events of the last byte.
fn feed_byte_by_byte(peer: &mut Peer, wire: &[u8]) -> Vec<Event> {
    let (last, head) = wire.split_last().expect("a frame is not empty");
    for (i, byte) in head.iter().enumerate() {
        peer.inject(&[*byte]);
        let events = all_ok(peer.receive_all());
        assert!(
            events.is_empty(),
            "event after {} of {} bytes",
            i + 1,
            wire.len()
        );
    }
    peer.inject(&[*last]);
    all_ok(peer.receive_all())
}

#[test]
fn a_frame_fed_one_byte_at_a_time_still_decodes() {
    // The handshake, byte by byte, in both directions.
    let mut pair = Pair::new(Limits::default(), Limits::default());
    // The harness put the HELLO in the server's inbox whole; let the harness's server
    // consume it, then put a fresh server in its place and feed it the HELLO byte by byte.
    assert_eq!(pair.server.receive_all().len(), 1);
    pair.server = Peer::new(Connection::server(Limits::default()));
    let hello = pair.client_sent[0].clone();
    let events = feed_byte_by_byte(&mut pair.server, &hello);
    let [Event::Accepted { welcome }] = &events[..] else {
        panic!("expected Accepted, got {events:?}");
    };
    assert_eq!(
        feed_byte_by_byte(&mut pair.client, welcome),
        vec![Event::Established { auth: None }]
    );

    // Then a request with bulk segments, one byte per read.
    let bulk: [&[u8]; 3] = [b"one", b"", b"three three"];
    let (call_id, out) = pair
        .client
        .conn
        .send_request(request(5, 1, 2, 3, b"inline", &bulk))
        .map_err(|(e, _)| e)
        .unwrap();
    let received = feed_byte_by_byte(&mut pair.server, &out.into_contiguous());
    let [Event::Request(request)] = &received[..] else {
        panic!("expected one request, got {received:?}");
    };
    assert_eq!(request.call_id, call_id);
    assert_eq!((request.object, request.slot, request.method), (5, 1, 2));
    assert_eq!(request.fingerprint, 3);
    assert_eq!(request.payload.inline_slice(), b"inline");
    let segments: Vec<_> = request.payload.segments().collect();
    assert_eq!(segments, bulk.to_vec());
    assert_eq!(pair.server.pending_bytes(), 0);
}

#[test]
fn several_frames_in_one_read_are_all_processed_in_order() {
    let mut pair = Pair::connected();
    let mut wire = Vec::new();
    let mut ids = Vec::new();
    for n in 0..5u8 {
        let (id, out) = pair
            .client
            .conn
            .send_request(request(1, 0, 0, 0, &[n], &[&[n; 100]]))
            .map_err(|(e, _)| e)
            .unwrap();
        ids.push(id);
        wire.extend_from_slice(&out.into_contiguous());
    }
    // Everything plus the first half of a credit frame in one read.
    let credit = pair.client.conn.grant_credits(2);
    wire.extend_from_slice(&credit[..6]);
    pair.server.inject(&wire);
    let events = all_ok(pair.server.receive_all());
    let got: Vec<(u64, u8)> = events
        .iter()
        .map(|event| match event {
            Event::Request(r) => (r.call_id, r.payload.inline_slice()[0]),
            other => panic!("expected a request, got {other:?}"),
        })
        .collect();
    assert_eq!(got, ids.iter().copied().zip(0..5u8).collect::<Vec<_>>());
    assert_eq!(pair.server.pending_bytes(), 6);
    pair.server.inject(&credit[6..]);
    assert_eq!(all_ok(pair.server.receive_all()), vec![Event::Credit(2)]);
    // Answer them all in one write the other way.
    for &id in &ids {
        pair.server_respond(id, response(Status::Ok, b"", &[]))
            .unwrap();
    }
    assert_eq!(all_ok(pair.client.receive_all()).len(), 5);
}

#[test]
fn bytes_needed_tracks_the_header_then_the_frame() {
    let splitter = FrameSplitter::new(1 << 20);
    let wire = super::raw_request(1, b"0123456789", &[b"abc"]);
    let mut buf = BytesMut::new();
    assert_eq!(splitter.bytes_needed(&buf), Ok(HEADER_LEN));
    for (i, byte) in wire.iter().enumerate() {
        buf.put_u8(*byte);
        let need = splitter.bytes_needed(&buf).unwrap();
        if i + 1 < HEADER_LEN {
            assert_eq!(need, HEADER_LEN);
        } else {
            assert_eq!(need, wire.len());
        }
    }
    let frame = splitter.split(&mut buf).unwrap().unwrap();
    assert_eq!(frame, wire);
    assert!(buf.is_empty());
}

#[test]
fn the_harness_raises_the_frame_limit_after_the_handshake() {
    // A 64 KiB request is over the handshake limit but within the negotiated one: sent right
    // behind the HELLO, in the same read, it must be split with the raised limit.
    let mut pair = Pair::new(Limits::default(), Limits::default());
    let big = vec![9u8; 64 * 1024];
    pair.server.inject(&super::raw_request(1, b"", &[&big]));
    let events = all_ok(pair.server.receive_all());
    assert_eq!(events.len(), 2);
    assert!(matches!(events[0], Event::Accepted { .. }));
    let Event::Request(request) = &events[1] else {
        panic!("expected a request, got {:?}", events[1]);
    };
    assert_eq!(request.payload.segment(0).unwrap().len(), big.len());
}
