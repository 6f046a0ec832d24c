//! Calls: requests and responses, their payloads, ordering, and error paths.

use bytes::Bytes;

use super::{all_ok, is_within, limits, offset_in, raw_response, request, response};
use crate::builder::MessageBuilder;
use crate::connection::Event;
use crate::error::{ProtocolError, SendError};
use crate::frame::{self, Close, Frame, REQUEST_FIXED_LEN, RESPONSE_FIXED_LEN, Response};
use crate::harness::Pair;
use crate::limits::{Limits, MAX_BULK_SEGMENTS};
use crate::payload::Payload;
use crate::status::Status;

/// Deterministic pseudo-random bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

/// Asserts the payload's parts equal `inline` and `bulk`, byte for byte.
fn assert_payload(payload: &Payload, inline: &[u8], bulk: &[&[u8]]) {
    assert_eq!(payload.inline_slice(), inline);
    assert_eq!(&payload.inline()[..], inline);
    assert_eq!(payload.segment_count(), bulk.len());
    let segments: Vec<Bytes> = payload.segments().collect();
    assert_eq!(segments.len(), bulk.len());
    for (i, (got, want)) in segments.iter().zip(bulk).enumerate() {
        assert_eq!(&got[..], *want, "segment {i}");
        assert_eq!(payload.segment(i).as_deref(), Some(*want), "segment({i})");
    }
    assert_eq!(payload.segment(bulk.len()), None);
}

/// Asserts that the payload's inline data and bulk segments are slices of `frame` at the
/// offsets the wire layout puts them, i.e. they were not copied.
fn assert_slices_of_frame(payload: &Payload, frame: &Bytes, fixed_len: usize) {
    let inline = payload.inline();
    assert!(is_within(&inline, frame));
    assert_eq!(offset_in(&inline, frame), fixed_len);
    let table_end = fixed_len + inline.len() + 4 * payload.segment_count();
    let mut expected = table_end;
    for (i, segment) in payload.segments().enumerate() {
        if !segment.is_empty() {
            assert!(
                is_within(&segment, frame),
                "segment {i} is not within the frame"
            );
            assert_eq!(offset_in(&segment, frame), expected, "segment {i}");
        }
        expected += segment.len();
    }
    assert_eq!(
        expected,
        frame.len(),
        "segments end at the end of the frame"
    );
}

#[test]
fn replies_out_of_order_reach_the_right_calls() {
    let mut pair = Pair::connected();
    let ids: Vec<u64> = (1..=3u8)
        .map(|n| {
            pair.client_call(request(40 + u64::from(n), 1, 7, 0xfeed, &[n; 3], &[]))
                .unwrap()
        })
        .collect();
    assert_eq!(ids, vec![1, 2, 3], "call ids are allocated in order from 1");

    let events = all_ok(pair.server.receive_all());
    assert_eq!(events.len(), 3);
    for (event, (&id, n)) in events.iter().zip(ids.iter().zip(1..=3u8)) {
        let Event::Request(request) = event else {
            panic!("expected a request, got {event:?}");
        };
        assert_eq!(request.call_id, id);
        assert_eq!(request.object, 40 + u64::from(n));
        assert_eq!(request.slot, 1);
        assert_eq!(request.method, 7);
        assert_eq!(request.fingerprint, 0xfeed);
        assert_payload(&request.payload, &[n; 3], &[]);
    }

    for &index in &[2usize, 0, 1] {
        let id = ids[index];
        let body = format!("reply to {id}");
        pair.server_respond(id, response(Status::Ok, body.as_bytes(), &[]))
            .unwrap();
    }
    let events = all_ok(pair.client.receive_all());
    let order: Vec<u64> = events
        .iter()
        .map(|event| match event {
            Event::Response(response) => {
                assert_eq!(response.status, Status::Ok);
                assert_eq!(response.credits, 1);
                assert_payload(
                    &response.payload,
                    format!("reply to {}", response.call_id).as_bytes(),
                    &[],
                );
                response.call_id
            }
            other => panic!("expected a response, got {other:?}"),
        })
        .collect();
    assert_eq!(order, vec![3, 1, 2]);
    assert_eq!(pair.client.conn.in_flight(), 0);
    assert_eq!(pair.client.conn.send_credits(), Limits::default().credits);
}

#[test]
fn request_payload_with_bulk_segments_round_trips_without_copies() {
    let mut pair = Pair::connected();
    let big = noise(70_000, 1);
    let small = noise(1000, 2);
    let bulk: [&[u8]; 5] = [b"", &small, &big, b"xyz", b""];
    let inline = b"inline arguments";
    let builder = request(u64::MAX, u16::MAX, 513, 0x0102_0304, inline, &bulk);
    assert_eq!(
        builder.encoded_len(),
        (REQUEST_FIXED_LEN + inline.len() + 4 * 5 + 71_003) as u64
    );
    let (call_id, out) = pair
        .client
        .conn
        .send_request(builder)
        .map_err(|(e, _)| e)
        .unwrap();
    let wire = out.into_contiguous();
    assert_eq!(wire.len(), REQUEST_FIXED_LEN + inline.len() + 20 + 71_003);

    // Receive frame by frame so that the frame the payload points into is known.
    pair.server.inject(&wire);
    let (frame, event) = pair.server.receive_next().unwrap().unwrap();
    assert!(pair.server.receive_next().is_none(), "exactly one event");
    assert_eq!(frame, wire);
    let Event::Request(request) = event else {
        panic!("expected a request, got {event:?}");
    };
    assert_eq!(request.call_id, call_id);
    assert_eq!(request.object, u64::MAX);
    assert_eq!(request.slot, u16::MAX);
    assert_eq!(request.method, 513);
    assert_eq!(request.fingerprint, 0x0102_0304);
    assert_payload(&request.payload, inline, &bulk);
    assert_slices_of_frame(&request.payload, &frame, REQUEST_FIXED_LEN);
}

#[test]
fn response_payload_with_bulk_segments_round_trips_without_copies() {
    let mut pair = Pair::connected();
    let call_id = pair.client_call(request(1, 0, 0, 0, b"", &[])).unwrap();
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
    let first = noise(4096, 3);
    let second = noise(123_457, 4);
    let bulk: [&[u8]; 3] = [&first, &second, b"!"];
    let out = pair
        .server
        .conn
        .send_response(call_id, response(Status::AppError, b"app error", &bulk))
        .unwrap();
    // The bulk segments are sent from their own buffers: the head holds only header,
    // inline data and the segment table.
    let mut slices = [std::io::IoSlice::new(&[]); 8];
    let (filled, bytes) = out.io_slices(&mut slices);
    assert_eq!(filled, 4);
    assert_eq!(bytes, out.remaining());
    assert_eq!(slices[0].len(), RESPONSE_FIXED_LEN + 9 + 12);
    assert_eq!(&*slices[1], &first[..]);
    assert_eq!(&*slices[2], &second[..]);

    pair.client.inject(&out.into_contiguous());
    let (frame, event) = pair.client.receive_next().unwrap().unwrap();
    assert!(pair.client.receive_next().is_none(), "exactly one event");
    let Event::Response(response) = event else {
        panic!("expected a response, got {event:?}");
    };
    assert_eq!(response.call_id, call_id);
    assert_eq!(response.status, Status::AppError);
    assert_eq!(response.credits, 1);
    assert_payload(&response.payload, b"app error", &bulk);
    assert_slices_of_frame(&response.payload, &frame, RESPONSE_FIXED_LEN);
}

#[test]
fn payload_slices_share_the_harness_receive_buffer() {
    // Through `receive_all` (which does not return the frame), the parts must still be
    // adjacent slices of one allocation: inline, then the 4-byte lengths, then each segment.
    let mut pair = Pair::connected();
    let bulk: [&[u8]; 3] = [b"first", b"second!", b"third segment"];
    pair.client_call(request(3, 0, 0, 0, b"abc", &bulk))
        .unwrap();
    let events = all_ok(pair.server.receive_all());
    let [Event::Request(request)] = &events[..] else {
        panic!("expected one request, got {events:?}");
    };
    let inline = request.payload.inline();
    let segments: Vec<Bytes> = request.payload.segments().collect();
    let mut next = inline.as_ptr() as usize + inline.len() + 4 * segments.len();
    for segment in &segments {
        assert_eq!(segment.as_ptr() as usize, next);
        next += segment.len();
    }
    assert_payload(&request.payload, b"abc", &bulk);
}

#[test]
fn every_status_round_trips_in_a_response() {
    let statuses = [
        Status::Ok,
        Status::AppError,
        Status::NotFound,
        Status::Unimplemented,
        Status::InvalidArgument,
        Status::Internal,
        Status::Unavailable,
        Status::Overloaded,
        Status::Protocol,
        Status::DeadlineExceeded,
        Status::Unauthenticated,
        Status::PermissionDenied,
        Status::Cancelled,
        Status::Unknown,
    ];
    let mut pair = Pair::connected();
    for status in statuses {
        let call_id = pair.client_call(request(1, 0, 0, 0, b"", &[])).unwrap();
        assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
        let builder = crate::MessageBuilder::error_response(status, status.name());
        assert_eq!(builder.status(), Some(status));
        pair.server_respond(call_id, builder).unwrap();
        let events = all_ok(pair.client.receive_all());
        let [Event::Response(response)] = &events[..] else {
            panic!("expected one response, got {events:?}");
        };
        assert_eq!(response.call_id, call_id);
        assert_eq!(response.status, status);
        assert_eq!(response.payload.inline_slice(), status.name().as_bytes());
    }
}

#[test]
fn an_unknown_status_byte_decodes_as_unknown() {
    let mut pair = Pair::connected();
    let call_id = pair.client_call(request(1, 0, 0, 0, b"", &[])).unwrap();
    let mut bytes = raw_response(call_id, Status::Ok, b"from the future").to_vec();
    bytes[16] = 200;
    pair.client.inject(&bytes);
    let events = all_ok(pair.client.receive_all());
    let [Event::Response(response)] = &events[..] else {
        panic!("expected one response, got {events:?}");
    };
    assert_eq!(response.status, Status::Unknown);
    assert_eq!(response.payload.inline_slice(), b"from the future");
}

#[test]
fn an_unsolicited_response_is_a_protocol_error() {
    let mut pair = Pair::connected();
    pair.client.inject(&raw_response(42, Status::Ok, b""));
    let events = pair.client.receive_all();
    assert_eq!(
        events,
        vec![Err(ProtocolError::UnsolicitedResponse { call_id: 42 })]
    );
    let error = events[0].clone().unwrap_err();
    assert_eq!(error.status(), Status::Protocol);
    assert_eq!(pair.client.conn.send_credits(), Limits::default().credits);
}

#[test]
fn a_second_response_to_the_only_call_is_unsolicited() {
    let mut pair = Pair::connected();
    let call_id = pair.client_call(request(1, 0, 0, 0, b"", &[])).unwrap();
    pair.client
        .inject(&raw_response(call_id, Status::Ok, b"first"));
    pair.client
        .inject(&raw_response(call_id, Status::Ok, b"again"));
    let events = pair.client.receive_all();
    assert_eq!(events.len(), 2);
    assert!(matches!(&events[0], Ok(Event::Response(r)) if r.call_id == call_id));
    assert_eq!(
        events[1],
        Err(ProtocolError::UnsolicitedResponse { call_id })
    );
}

#[test]
fn a_response_too_large_for_the_peer_becomes_an_internal_error() {
    let mut pair = Pair::connected_with(limits(4096, 4), Limits::default());
    let call_id = pair.client_call(request(1, 0, 0, 0, b"", &[])).unwrap();
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
    let big = vec![0xab; 5000];
    pair.server_respond(call_id, response(Status::Ok, b"result", &[&big]))
        .unwrap();
    assert_eq!(pair.server.conn.peer_in_flight(), 0);
    let sent = pair.server_sent.back().unwrap();
    assert!(sent.len() <= 4096, "the substitute fits the peer's limit");

    let events = all_ok(pair.client.receive_all());
    let [Event::Response(response)] = &events[..] else {
        panic!("expected one response, got {events:?}");
    };
    assert_eq!(response.call_id, call_id);
    assert_eq!(response.status, Status::Internal);
    assert_eq!(response.credits, 1, "the credit still returns");
    assert_eq!(response.payload.segment_count(), 0);
    let message = std::str::from_utf8(response.payload.inline_slice()).unwrap();
    assert!(message.contains("could not be sent"), "{message}");
    assert!(message.contains("5038 bytes"), "{message}");
    assert!(message.contains("4096"), "{message}");
    assert_eq!(pair.client.conn.send_credits(), Limits::default().credits);
}

#[test]
fn a_response_with_too_many_segments_becomes_an_internal_error() {
    let mut pair = Pair::connected();
    let call_id = pair.client_call(request(1, 0, 0, 0, b"", &[])).unwrap();
    assert_eq!(all_ok(pair.server.receive_all()).len(), 1);
    let mut builder = crate::MessageBuilder::response(Status::Ok);
    for _ in 0..=MAX_BULK_SEGMENTS {
        builder.push_segment(Bytes::from_static(b"s"));
    }
    pair.server_respond(call_id, builder).unwrap();
    let events = all_ok(pair.client.receive_all());
    let [Event::Response(response)] = &events[..] else {
        panic!("expected one response, got {events:?}");
    };
    assert_eq!(response.status, Status::Internal);
    let message = std::str::from_utf8(response.payload.inline_slice()).unwrap();
    assert!(message.contains("1025 bulk segments"), "{message}");
}

#[test]
fn a_request_too_large_for_the_peer_is_refused_without_spending_credit() {
    let mut pair = Pair::connected_with(Limits::default(), limits(4096, 2));
    let exactly = 4096 - REQUEST_FIXED_LEN - 4;
    let fits = vec![1u8; exactly];
    let too_big = vec![1u8; exactly + 1];
    let (error, builder) = pair
        .client
        .conn
        .send_request(request(1, 0, 0, 0, b"", &[&too_big]))
        .unwrap_err();
    assert_eq!(
        error,
        SendError::TooLarge {
            len: 4097,
            max: 4096,
        }
    );
    assert_eq!(builder.encoded_len(), 4097);
    assert_eq!(pair.client.conn.send_credits(), 2);
    assert_eq!(pair.client.conn.in_flight(), 0);

    // One byte less fits exactly and arrives.
    pair.client_call(request(1, 0, 0, 0, b"", &[&fits]))
        .unwrap();
    assert_eq!(pair.client_sent.back().unwrap().len(), 4096);
    let events = all_ok(pair.server.receive_all());
    let [Event::Request(request)] = &events[..] else {
        panic!("expected one request, got {events:?}");
    };
    assert_eq!(request.payload.segment(0).unwrap().len(), exactly);
}

#[test]
fn a_request_with_too_many_segments_is_refused() {
    let mut pair = Pair::connected();
    let mut builder = crate::MessageBuilder::request(1, 0, 0, 0);
    for _ in 0..=MAX_BULK_SEGMENTS {
        builder.push_segment(Bytes::new());
    }
    assert_eq!(
        pair.client_call(builder),
        Err(SendError::TooManySegments {
            count: 1025,
            max: MAX_BULK_SEGMENTS,
        })
    );
    assert_eq!(pair.client.conn.in_flight(), 0);

    // Exactly the limit is fine.
    let mut builder = crate::MessageBuilder::request(1, 0, 0, 0);
    for i in 0..MAX_BULK_SEGMENTS {
        builder.push_segment(Bytes::from(vec![i as u8; usize::from(i % 3)]));
    }
    pair.client_call(builder).unwrap();
    let events = all_ok(pair.server.receive_all());
    let [Event::Request(request)] = &events[..] else {
        panic!("expected one request, got {events:?}");
    };
    assert_eq!(request.payload.segment_count(), 1024);
    for (i, segment) in request.payload.segments().enumerate() {
        assert_eq!(segment.len(), i % 3);
        assert!(segment.iter().all(|&b| b == i as u8));
    }
}

#[test]
fn closing_tells_the_peer_and_stops_sending() {
    let mut pair = Pair::connected();
    let bytes = pair.client.conn.close(Status::Unavailable, "shutting down");
    assert!(!pair.client.conn.is_open());
    assert_eq!(
        pair.client_call(request(1, 0, 0, 0, b"", &[])),
        Err(SendError::NotOpen)
    );
    pair.server.inject(&bytes);
    assert_eq!(
        all_ok(pair.server.receive_all()),
        vec![Event::Closed(Close {
            status: Status::Unavailable,
            reason: "shutting down".to_owned(),
        })]
    );
    assert!(!pair.server.conn.is_open());
    // A request arriving after the close is unexpected.
    pair.server.inject(&super::raw_request(9, b"", &[]));
    assert_eq!(
        pair.server.receive_all(),
        vec![Err(ProtocolError::UnexpectedFrame {
            kind: frame::FrameKind::Request,
            state: "closed",
        })]
    );
}

#[test]
fn a_long_close_reason_is_cut_at_a_character_boundary() {
    // 'é' is two bytes; 1023 ASCII bytes then 'é' would end at 1025, so it is dropped.
    let reason = format!("{}é{}", "a".repeat(1023), "tail");
    let bytes = frame::encode_close(Status::Protocol, &reason);
    let Ok(Frame::Close(close)) = Frame::decode(bytes) else {
        panic!("close frame does not decode");
    };
    assert_eq!(close.reason, "a".repeat(1023));
    let reason = "ü".repeat(600);
    let Ok(Frame::Close(close)) = Frame::decode(frame::encode_close(Status::Ok, &reason)) else {
        panic!("close frame does not decode");
    };
    assert_eq!(close.reason, "ü".repeat(512));
}

#[test]
fn call_ids_are_unique_among_outstanding_calls() {
    let mut pair = Pair::connected();
    let mut ids: Vec<u64> = (0..100)
        .map(|_| pair.client_call(request(1, 0, 0, 0, b"", &[])).unwrap())
        .collect();
    assert!(!ids.contains(&0), "call id 0 is never used");
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 100);
}

#[test]
fn a_timeout_travels_with_its_request_in_whole_microseconds() {
    let mut pair = Pair::connected();
    let cases = [
        (None, 0),
        (Some(std::time::Duration::from_millis(250)), 250_000),
        (Some(std::time::Duration::from_nanos(1)), 1),
        (Some(std::time::Duration::from_nanos(1_001)), 2),
        (Some(std::time::Duration::from_secs(10 * 3600)), u32::MAX),
    ];
    for (timeout, _) in cases {
        let mut message = request(1, 0, 0, 1, b"", &[]);
        if let Some(timeout) = timeout {
            message.set_timeout(timeout);
        }
        pair.client_call(message).unwrap();
    }
    let events = all_ok(pair.server.receive_all());
    let timeouts: Vec<u32> = events
        .iter()
        .map(|event| match event {
            Event::Request(request) => request.timeout_us,
            other => panic!("expected a request, got {other:?}"),
        })
        .collect();
    let expected: Vec<u32> = cases.iter().map(|(_, micros)| *micros).collect();
    assert_eq!(timeouts, expected);
}

#[test]
fn a_cancelled_call_still_holds_its_credit_until_answered() {
    let mut pair = Pair::connected();
    let id = pair.client_call(request(1, 0, 0, 1, b"", &[])).unwrap();
    let credits = pair.client.conn.send_credits();
    let cancel = pair.client.conn.cancel(id).expect("open");
    pair.server.inject(&cancel);
    let events = all_ok(pair.server.receive_all());
    assert!(
        matches!(&events[..], [Event::Request(_), Event::Cancel(cancelled)] if *cancelled == id),
        "{events:?}"
    );
    assert_eq!(pair.client.conn.in_flight(), 1);
    assert_eq!(pair.client.conn.send_credits(), credits);
    pair.server_respond(id, response(Status::Cancelled, b"", &[]))
        .unwrap();
    let events = all_ok(pair.client.receive_all());
    assert!(
        matches!(&events[..], [Event::Response(r)] if r.call_id == id && r.status == Status::Cancelled)
    );
    assert_eq!(pair.client.conn.in_flight(), 0);
    assert_eq!(pair.client.conn.send_credits(), credits + 1);
}

/// Two calls answered by `first` and an unflagged response of `status`, and the
/// responses as the client received them.
fn two_answers(first: MessageBuilder, status: Status) -> Vec<Response> {
    let mut pair = Pair::connected();
    pair.client_call(request(1, 0, 2, 9, b"x", &[])).unwrap();
    pair.client_call(request(1, 0, 3, 9, b"y", &[])).unwrap();
    let requests: Vec<u64> = all_ok(pair.server.receive_all())
        .into_iter()
        .map(|event| match event {
            Event::Request(request) => request.call_id,
            other => panic!("expected a request, got {other:?}"),
        })
        .collect();
    pair.server_respond(requests[0], first).unwrap();
    pair.server_respond(requests[1], response(status, b"", &[]))
        .unwrap();
    all_ok(pair.client.receive_all())
        .into_iter()
        .map(|event| match event {
            Event::Response(response) => response,
            other => panic!("expected a response, got {other:?}"),
        })
        .collect()
}

#[test]
fn a_response_says_whether_the_arguments_were_left_unread() {
    let mut unread = response(Status::NotFound, b"no such object", &[]);
    unread.set_arguments_unread();
    let flags: Vec<(bool, bool)> = two_answers(unread, Status::NotFound)
        .iter()
        .map(|response| (response.arguments_unread, response.hands_back))
        .collect();
    assert_eq!(flags, vec![(true, false), (false, false)]);
    // The flag belongs to responses: a request ignores it, and its one-way bit is not it.
    let mut message = request(1, 0, 2, 9, b"x", &[]);
    message.set_arguments_unread();
    assert!(!message.is_one_way());
}

#[test]
fn a_response_says_whether_it_hands_back_the_callers_objects() {
    let mut handing_back = response(Status::Ok, b"callback", &[]);
    handing_back.set_hands_back();
    let flags: Vec<(bool, bool)> = two_answers(handing_back, Status::Ok)
        .iter()
        .map(|response| (response.hands_back, response.arguments_unread))
        .collect();
    assert_eq!(flags, vec![(true, false), (false, false)]);
    // The flag belongs to responses: a request ignores it.
    let mut message = request(1, 0, 2, 9, b"x", &[]);
    message.set_hands_back();
    assert!(!message.is_one_way());
}

#[test]
fn a_reference_table_travels_apart_from_the_value() {
    let mut pair = Pair::connected();
    let mut message = request(1, 0, 2, 9, b"value", &[b"bulk"]);
    message.end_with_references(&[7, 7, u64::MAX]);
    pair.client_call(message).unwrap();
    let events = all_ok(pair.server.receive_all());
    let [Event::Request(listing)] = &events[..] else {
        panic!("expected one request, got {events:?}");
    };
    assert_eq!(listing.payload.inline_slice(), b"value");
    assert_eq!(listing.payload.segment(0).as_deref(), Some(&b"bulk"[..]));
    assert_eq!(
        listing.payload.references().collect::<Vec<_>>(),
        vec![7, 7, u64::MAX]
    );
    // No handles: no table, and no flag.
    let mut message = request(1, 0, 2, 9, b"x", &[]);
    message.end_with_references(&[]);
    pair.client_call(message).unwrap();
    let events = all_ok(pair.server.receive_all());
    let [Event::Request(plain)] = &events[..] else {
        panic!("expected one request, got {events:?}");
    };
    assert_eq!(plain.payload.references().len(), 0);
    assert_eq!(plain.payload.inline_slice(), b"x");
}

/// The bytes of `message` as a client would send it.
fn message_bytes(message: crate::MessageBuilder) -> Vec<u8> {
    let mut pair = Pair::connected();
    let (_, out) = pair
        .client
        .conn
        .send_request(message)
        .map_err(|(e, _)| e)
        .unwrap();
    out.into_contiguous().to_vec()
}

#[test]
fn a_reference_table_larger_than_its_inline_part_is_refused() {
    // A request whose inline part is only a table count claiming two handles.
    let mut wire = message_bytes(request(1, 0, 2, 9, &2u32.to_le_bytes(), &[]));
    wire[5] |= crate::frame::FLAG_REFERENCES;
    let error = crate::frame::Frame::decode(bytes::Bytes::from(wire)).unwrap_err();
    assert!(
        matches!(
            error,
            crate::error::FrameError::BadReferenceTable { count: 2, .. }
        ),
        "{error:?}"
    );
    // Too short to hold even the count.
    let mut wire = message_bytes(request(1, 0, 2, 9, b"abc", &[]));
    wire[5] |= crate::frame::FLAG_REFERENCES;
    assert!(matches!(
        crate::frame::Frame::decode(bytes::Bytes::from(wire)),
        Err(crate::error::FrameError::BadReferenceTable { count: 0, .. })
    ));
}

#[test]
fn a_cancel_before_the_connection_opens_is_not_sent() {
    let pair = Pair::new(Limits::default(), Limits::default());
    assert_eq!(pair.client.conn.cancel(1), None);
}

#[test]
fn a_one_way_call_returns_its_credit_in_a_credit_frame() {
    let mut pair = Pair::connected();
    let credits = pair.client.conn.send_credits();
    let mut message = request(1, 0, 2, 9, b"x", &[]);
    message.set_one_way();
    pair.client_call(message).unwrap();
    pair.client_call(request(1, 0, 3, 9, b"y", &[])).unwrap();
    // The one-way call is not waiting for an answer, but it holds a credit.
    assert_eq!(pair.client.conn.in_flight(), 1);
    assert_eq!(pair.client.conn.send_credits(), credits - 2);
    let events = all_ok(pair.server.receive_all());
    let flags: Vec<bool> = events
        .iter()
        .map(|event| match event {
            Event::Request(request) => request.one_way,
            other => panic!("expected a request, got {other:?}"),
        })
        .collect();
    assert_eq!(flags, vec![true, false]);
    assert_eq!(pair.server.conn.peer_in_flight(), 2);
    let credit = pair.server.conn.finish_one_way().unwrap();
    assert_eq!(pair.server.conn.peer_in_flight(), 1);
    pair.client.inject(&credit);
    assert_eq!(all_ok(pair.client.receive_all()), vec![Event::Credit(1)]);
    assert_eq!(pair.client.conn.send_credits(), credits - 1);
    assert_eq!(pair.client.conn.in_flight(), 1);
    // Finishing more one-way calls than arrived is refused, not an underflow.
    pair.server_respond(2, response(Status::Ok, b"", &[]))
        .unwrap();
    assert_eq!(
        pair.server.conn.finish_one_way(),
        Err(SendError::NoRequestPending)
    );
}

#[test]
fn one_way_credits_finished_apart_return_together_in_one_frame() {
    let mut pair = Pair::connected();
    let credits = pair.client.conn.send_credits();
    for object in 0..3 {
        let mut message = request(object, 0, 3, 9, b"x", &[]);
        message.set_one_way();
        pair.client_call(message).unwrap();
    }
    assert_eq!(all_ok(pair.server.receive_all()).len(), 3);
    for left in [2, 1, 0] {
        pair.server.conn.finish_one_way_unsent().unwrap();
        assert_eq!(pair.server.conn.peer_in_flight(), left);
    }
    assert_eq!(
        pair.server.conn.finish_one_way_unsent(),
        Err(SendError::NoRequestPending)
    );
    pair.client.inject(&frame::encode_credit(3));
    assert_eq!(all_ok(pair.client.receive_all()), vec![Event::Credit(3)]);
    assert_eq!(pair.client.conn.send_credits(), credits);
}

#[test]
fn a_ping_is_answered_with_a_pong_carrying_its_nonce() {
    let mut pair = Pair::connected();
    pair.server.inject(&frame::encode_ping(0xfeed_f00d));
    let events = all_ok(pair.server.receive_all());
    let [Event::Ping { pong }] = &events[..] else {
        panic!("expected a ping, got {events:?}");
    };
    pair.client.inject(pong);
    assert_eq!(
        all_ok(pair.client.receive_all()),
        vec![Event::Pong(0xfeed_f00d)]
    );
    // Before the handshake completes, a ping is out of place.
    let mut fresh = crate::connection::Connection::server(Limits::default());
    assert!(matches!(
        fresh.handle_frame(frame::encode_ping(1)),
        Err(ProtocolError::UnexpectedFrame { .. })
    ));
}

#[test]
fn after_goaway_calls_in_flight_are_answered_and_new_ones_refused() {
    let mut pair = Pair::connected();
    let id = pair.client_call(request(1, 0, 0, 1, b"", &[])).unwrap();
    pair.server.receive_all();
    let go_away = pair.server.conn.go_away().expect("open");
    pair.client.inject(&go_away);
    assert_eq!(all_ok(pair.client.receive_all()), vec![Event::GoingAway]);
    assert!(pair.client.conn.peer_going_away());
    assert_eq!(
        pair.client_call(request(1, 0, 0, 1, b"", &[])),
        Err(SendError::GoingAway)
    );
    // The call already made is still answered.
    pair.server_respond(id, response(Status::Ok, b"done", &[]))
        .unwrap();
    let events = all_ok(pair.client.receive_all());
    assert!(matches!(&events[..], [Event::Response(r)] if r.call_id == id));
    assert_eq!(pair.client.conn.in_flight(), 0);
}

#[test]
fn credits_a_peer_grants_without_end_are_used_up_to_a_bound() {
    use crate::limits::MAX_SEND_CREDITS;
    let generous = Limits {
        credits: u32::MAX,
        ..Limits::default()
    };
    // Granted at the handshake, both ways.
    let mut pair = Pair::connected_with(generous, generous);
    assert_eq!(pair.client.conn.send_credits(), MAX_SEND_CREDITS);
    assert_eq!(pair.server.conn.send_credits(), MAX_SEND_CREDITS);
    // And in CREDIT frames.
    pair.client.inject(&frame::encode_credit(u32::MAX));
    assert_eq!(
        all_ok(pair.client.receive_all()),
        vec![Event::Credit(u32::MAX)]
    );
    assert_eq!(pair.client.conn.send_credits(), MAX_SEND_CREDITS);
    // A call spends one and its response returns it, never more.
    pair.client_call(request(1, 0, 0, 0, b"", &[])).unwrap();
    assert_eq!(pair.client.conn.send_credits(), MAX_SEND_CREDITS - 1);
    let events = all_ok(pair.server.receive_all());
    let [Event::Request(call)] = &events[..] else {
        panic!("expected the request, got {events:?}");
    };
    let response = pair
        .server
        .conn
        .send_response(call.call_id, crate::MessageBuilder::response(Status::Ok))
        .unwrap();
    pair.client.inject(&response.into_contiguous());
    pair.client.receive_all();
    assert_eq!(pair.client.conn.send_credits(), MAX_SEND_CREDITS);
}

/// A peer that keeps granting credits without reading cannot make this side keep more
/// than [`crate::limits::MAX_SEND_CREDITS`] requests outstanding: credits at hand, calls in
/// flight and one-way calls whose credit has not come back count together.
#[test]
fn grants_beyond_the_bound_do_not_raise_the_requests_outstanding() {
    use crate::limits::MAX_SEND_CREDITS;
    let generous = Limits {
        credits: u32::MAX,
        ..Limits::default()
    };
    let mut pair = Pair::connected_with(Limits::default(), generous);
    let mut sent = 0u32;
    while pair.client_call(request(1, 0, 0, 0, b"", &[])).is_ok() {
        sent += 1;
    }
    assert_eq!(sent, MAX_SEND_CREDITS);
    pair.client.inject(&frame::encode_credit(u32::MAX));
    pair.client.receive_all();
    assert_eq!(pair.client.conn.send_credits(), 0, "granted past the bound");

    // One-way calls count until their credits come back, and only those come back.
    let mut pair = Pair::connected_with(Limits::default(), generous);
    let one_way = || {
        let mut message = request(1, 0, 0, 0, b"", &[]);
        message.set_one_way();
        message
    };
    while pair.client_call(one_way()).is_ok() {}
    pair.client.inject(&frame::encode_credit(u32::MAX));
    pair.client.receive_all();
    assert_eq!(pair.client.conn.send_credits(), MAX_SEND_CREDITS);
    pair.client.inject(&frame::encode_credit(u32::MAX));
    pair.client.receive_all();
    assert_eq!(pair.client.conn.send_credits(), MAX_SEND_CREDITS);
}
