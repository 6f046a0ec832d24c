//! Malformed frames: each is rejected with the specific [`FrameError`] that names what is
//! wrong, by the decoder and by a connection in any state.

use bytes::{BufMut, Bytes, BytesMut};

use super::{assert_rejected, raw_frame, raw_frame_with_len, raw_request, raw_response};
use crate::auth::Mechanism;
use crate::connection::Event;
use crate::error::FrameError;
use crate::error::ProtocolError;
use crate::frame::{
    self, CANCEL_LEN, CLOSE_FIXED_LEN, CREDIT_LEN, Frame, FrameKind, Grant, HEADER_LEN, HELLO_LEN,
    PING_LEN, REQUEST_FIXED_LEN, RESPONSE_FIXED_LEN, WELCOME_LEN,
};
use crate::harness::Pair;
use crate::limits::{MAGIC, MAX_BULK_SEGMENTS, MAX_REASON_LEN};
use crate::splitter::FrameSplitter;
use crate::status::Status;

const REQUEST: u8 = FrameKind::Request as u8;
const RESPONSE: u8 = FrameKind::Response as u8;

/// The fixed REQUEST fields after the header, with the given inline length.
fn request_fields(inline_len: u32) -> BytesMut {
    let mut body = BytesMut::new();
    body.put_u64_le(1); // call id
    body.put_u64_le(2); // object
    body.put_u16_le(3); // slot
    body.put_u16_le(4); // method
    body.put_u32_le(5); // fingerprint
    body.put_u32_le(0); // no timeout
    body.put_u32_le(inline_len);
    assert_eq!(HEADER_LEN + body.len(), REQUEST_FIXED_LEN);
    body
}

/// The fixed RESPONSE fields after the header, with the given inline length.
fn response_fields(inline_len: u32) -> BytesMut {
    let mut body = BytesMut::new();
    body.put_u64_le(1); // call id
    body.put_u8(0); // status
    body.put_bytes(0, 3);
    body.put_u32_le(1); // credits
    body.put_u32_le(inline_len);
    assert_eq!(HEADER_LEN + body.len(), RESPONSE_FIXED_LEN);
    body
}

/// The fixed fields of a REQUEST or RESPONSE (`kind`), with the given inline length.
fn fields(kind: u8, inline_len: u32) -> BytesMut {
    match kind {
        REQUEST => request_fields(inline_len),
        _ => response_fields(inline_len),
    }
}

/// A REQUEST or RESPONSE frame carrying `inline`, a segment table of `lengths` and then
/// `bulk`, which need not add up to the table.
fn payload_frame(kind: u8, inline: &[u8], lengths: &[u32], bulk: &[u8]) -> Bytes {
    let mut body = fields(kind, inline.len() as u32);
    body.put_slice(inline);
    for &len in lengths {
        body.put_u32_le(len);
    }
    body.put_slice(bulk);
    raw_frame(kind, lengths.len() as u16, &body)
}

#[test]
fn truncated_header() {
    for len in 0..HEADER_LEN {
        let bytes = Bytes::from(vec![0x10; len]);
        assert_rejected(
            bytes,
            FrameError::Truncated {
                kind: "header",
                need: HEADER_LEN,
                have: len,
            },
        );
    }
}

#[test]
fn length_field_smaller_than_the_header() {
    for len in 0..HEADER_LEN as u32 {
        let bytes = raw_frame_with_len(len, REQUEST, 0, &[0; 40]);
        assert_rejected(
            bytes.clone(),
            FrameError::LengthTooSmall {
                len,
                min: HEADER_LEN,
            },
        );
        // The splitter rejects it from the header too, rather than waiting or looping.
        let mut buf = BytesMut::from(&bytes[..]);
        assert_eq!(
            FrameSplitter::new(1 << 20).split(&mut buf),
            Err(FrameError::LengthTooSmall {
                len,
                min: HEADER_LEN,
            })
        );
    }
}

#[test]
fn length_field_disagreeing_with_the_frame() {
    // Declares more than delivered.
    let credit = frame::encode_credit(3);
    assert_rejected(
        credit.slice(..CREDIT_LEN - 1),
        FrameError::LengthMismatch {
            declared: CREDIT_LEN as u64,
            actual: CREDIT_LEN as u64 - 1,
        },
    );
    // Declares less than delivered (a trailing byte).
    let mut longer = credit.to_vec();
    longer.push(0);
    assert_rejected(
        Bytes::from(longer),
        FrameError::LengthMismatch {
            declared: CREDIT_LEN as u64,
            actual: CREDIT_LEN as u64 + 1,
        },
    );
    // The largest possible length field.
    assert_rejected(
        raw_frame_with_len(u32::MAX, REQUEST, 0, &[0; 30]),
        FrameError::LengthMismatch {
            declared: u64::from(u32::MAX),
            actual: 38,
        },
    );
}

#[test]
fn unknown_kind() {
    for kind in [0u8, 14, 15, 0x80, 255] {
        assert_rejected(raw_frame(kind, 0, &[0; 4]), FrameError::UnknownKind(kind));
    }
    // Every byte outside 1..=13 is unknown, every byte inside is known.
    for byte in 0..=255u8 {
        assert_eq!(
            FrameKind::from_wire(byte).is_ok(),
            (1..=13).contains(&byte),
            "kind byte {byte}"
        );
    }
}

#[test]
fn segments_on_frames_that_carry_none() {
    let credit = frame::encode_credit(1);
    let mut bytes = credit.to_vec();
    bytes[6..8].copy_from_slice(&1u16.to_le_bytes());
    assert_rejected(
        Bytes::from(bytes),
        FrameError::UnexpectedSegments {
            kind: FrameKind::Credit,
            count: 1,
        },
    );
    let handshake = frame::encode_hello(&frame::Hello {
        version_min: 1,
        version_max: 1,
        limits: Default::default(),
        mechanism: Mechanism::None,
        auth: Bytes::new(),
    });
    let close = frame::encode_close(Status::Ok, "bye");
    let welcome = frame::encode_welcome(&frame::Welcome {
        version: 1,
        limits: Default::default(),
        mechanism: Mechanism::None,
        auth: Bytes::new(),
    });
    for (kind, frame) in [
        (FrameKind::Hello, handshake),
        (FrameKind::Welcome, welcome),
        (FrameKind::Close, close),
    ] {
        let mut bytes = frame.to_vec();
        bytes[6..8].copy_from_slice(&u16::MAX.to_le_bytes());
        assert_rejected(
            Bytes::from(bytes),
            FrameError::UnexpectedSegments {
                kind,
                count: u16::MAX,
            },
        );
    }
}

#[test]
fn too_many_segments() {
    for count in [MAX_BULK_SEGMENTS + 1, u16::MAX] {
        for kind in [REQUEST, RESPONSE] {
            assert_rejected(
                raw_frame(kind, count, &fields(kind, 0)),
                FrameError::TooManySegments {
                    count,
                    max: MAX_BULK_SEGMENTS,
                },
            );
        }
    }
}

#[test]
fn inline_data_running_past_the_end() {
    let mut body = request_fields(100);
    body.put_slice(&[7; 10]);
    assert_rejected(
        raw_frame(REQUEST, 0, &body),
        FrameError::InlineOverflow {
            inline_len: 100,
            segments: 0,
            available: 10,
        },
    );
    let mut body = response_fields(u32::MAX);
    body.put_slice(&[7; 3]);
    assert_rejected(
        raw_frame(RESPONSE, 0, &body),
        FrameError::InlineOverflow {
            inline_len: u32::MAX,
            segments: 0,
            available: 3,
        },
    );
}

#[test]
fn segment_table_running_past_the_end() {
    // Inline fits, but the table of three lengths (12 bytes) does not.
    let mut body = request_fields(2);
    body.put_slice(&[1, 2]);
    body.put_u32_le(0);
    body.put_u32_le(0);
    assert_rejected(
        raw_frame(REQUEST, 3, &body),
        FrameError::InlineOverflow {
            inline_len: 2,
            segments: 3,
            available: 10,
        },
    );
}

#[test]
fn bulk_lengths_that_do_not_add_up() {
    let cases = [
        // Two segments of 5 declared, 9 bytes present.
        (payload_frame(RESPONSE, b"", &[5, 5], &[0; 9]), 10, 9),
        // Fewer declared than present: trailing garbage after the last segment.
        (payload_frame(REQUEST, b"i", &[4], b"abcdEXTRA"), 4, 9),
        // Lengths that would overflow 32 bits when added.
        (
            payload_frame(REQUEST, b"", &[u32::MAX; 4], b""),
            4 * u64::from(u32::MAX),
            0,
        ),
        // No segments declared but bytes after the inline data.
        (payload_frame(REQUEST, b"", &[], b"junk"), 0, 4),
    ];
    for (frame, declared, available) in cases {
        assert_rejected(
            frame,
            FrameError::BulkMismatch {
                declared,
                available,
            },
        );
    }
}

#[test]
fn truncated_fixed_fields_of_each_kind() {
    let cases = [
        (FrameKind::Hello, "HELLO", HELLO_LEN),
        (FrameKind::Welcome, "WELCOME", WELCOME_LEN),
        (FrameKind::Request, "REQUEST", REQUEST_FIXED_LEN),
        (FrameKind::Response, "RESPONSE", RESPONSE_FIXED_LEN),
        (FrameKind::Credit, "CREDIT", CREDIT_LEN),
        (FrameKind::Close, "CLOSE", CLOSE_FIXED_LEN),
        (FrameKind::Cancel, "CANCEL", CANCEL_LEN),
        (FrameKind::Ping, "PING", PING_LEN),
        (FrameKind::Pong, "PONG", PING_LEN),
    ];
    for (kind, name, need) in cases {
        for have in HEADER_LEN..need {
            // A consistent length field, but too short for the kind.
            let mut body = vec![0u8; have - HEADER_LEN];
            if matches!(kind, FrameKind::Hello | FrameKind::Welcome) {
                let n = body.len().min(4);
                body[..n].copy_from_slice(&MAGIC[..n]);
            }
            assert_rejected(
                raw_frame(kind as u8, 0, &body),
                FrameError::Truncated {
                    kind: name,
                    need,
                    have,
                },
            );
        }
    }
}

#[test]
fn close_reason_not_utf8() {
    let mut body = vec![Status::Protocol.to_wire(), 0, 0, 0];
    body.extend_from_slice(b"ok so far \xff\xfe");
    assert_rejected(
        raw_frame(FrameKind::Close as u8, 0, &body),
        FrameError::BadReason("not UTF-8"),
    );
    // A multi-byte character cut in half is not UTF-8 either.
    let mut body = vec![0, 0, 0, 0];
    body.extend_from_slice(&"é".as_bytes()[..1]);
    assert_rejected(
        raw_frame(FrameKind::Close as u8, 0, &body),
        FrameError::BadReason("not UTF-8"),
    );
}

#[test]
fn close_reason_too_long() {
    let mut body = vec![0, 0, 0, 0];
    body.extend(std::iter::repeat_n(b'a', MAX_REASON_LEN + 1));
    assert_rejected(
        raw_frame(FrameKind::Close as u8, 0, &body),
        FrameError::BadReason("longer than 1024 bytes"),
    );
    // Exactly the limit is fine.
    body.pop();
    let decoded = Frame::decode(raw_frame(FrameKind::Close as u8, 0, &body)).unwrap();
    let Frame::Close(close) = decoded else {
        panic!("expected a close frame");
    };
    assert_eq!(close.reason.len(), MAX_REASON_LEN);
    assert_eq!(close.status, Status::Ok);
}

#[test]
fn a_malformed_frame_once_open_breaks_the_connection() {
    let mut pair = Pair::connected();
    let mut bytes = raw_request(1, b"abc", &[b"defg"]).to_vec();
    // Corrupt the segment length: 4 -> 5.
    let at = REQUEST_FIXED_LEN + 3;
    bytes[at] = 5;
    pair.server.inject(&bytes);
    // A valid frame after the corrupt one is never processed.
    pair.server.inject(&raw_request(2, b"", &[]));
    let events = pair.server.receive_all();
    assert_eq!(
        events,
        vec![Err(crate::ProtocolError::Frame(FrameError::BulkMismatch {
            declared: 5,
            available: 4,
        }))]
    );
    assert_eq!(pair.server.conn.peer_in_flight(), 0);
    // The client side equally rejects a corrupt response.
    let mut bytes = raw_response(1, Status::Ok, b"xy").to_vec();
    bytes[RESPONSE_FIXED_LEN - 4] = 3;
    pair.client_call(super::request(1, 0, 0, 0, b"", &[]))
        .unwrap();
    pair.client.inject(&bytes);
    assert_eq!(
        pair.client.receive_all(),
        vec![Err(crate::ProtocolError::Frame(
            FrameError::InlineOverflow {
                inline_len: 3,
                segments: 0,
                available: 2,
            }
        ))]
    );
    assert_eq!(pair.client.conn.in_flight(), 1);
}

#[test]
fn valid_frames_of_each_kind_decode() {
    // The positive counterpart of the cases above, so that the builders of malformed
    // frames are known to differ from valid ones only in the field under test.
    let frame = payload_frame(REQUEST, b"hi", &[3], b"abc");
    let Frame::Request(request) = Frame::decode(frame).unwrap() else {
        panic!("expected a request");
    };
    assert_eq!(
        (
            request.call_id,
            request.object,
            request.slot,
            request.method
        ),
        (1, 2, 3, 4)
    );
    assert_eq!(request.fingerprint, 5);
    assert_eq!(request.payload.inline_slice(), b"hi");
    assert_eq!(request.payload.segment(0).as_deref(), Some(&b"abc"[..]));

    let Frame::Response(response) = Frame::decode(payload_frame(RESPONSE, b"", &[], b"")).unwrap()
    else {
        panic!("expected a response");
    };
    assert_eq!((response.call_id, response.credits), (1, 1));
    assert_eq!(response.status, Status::Ok);
    assert_eq!(
        Frame::decode(raw_frame(FrameKind::Credit as u8, 0, &9u32.to_le_bytes())),
        Ok(Frame::Credit(9))
    );
    assert_eq!(
        Frame::decode(raw_frame(FrameKind::Cancel as u8, 0, &7u64.to_le_bytes())),
        Ok(Frame::Cancel(7))
    );
    assert_eq!(
        Frame::decode(crate::frame::encode_cancel(u64::MAX)),
        Ok(Frame::Cancel(u64::MAX))
    );
    assert_eq!(
        Frame::decode(crate::frame::encode_ping(3)),
        Ok(Frame::Ping(3))
    );
    assert_eq!(
        Frame::decode(crate::frame::encode_pong(4)),
        Ok(Frame::Pong(4))
    );
    assert_eq!(
        Frame::decode(crate::frame::encode_go_away()),
        Ok(Frame::GoAway)
    );
}

#[test]
fn release_frames_carry_whole_handles() {
    let frame = frame::encode_release(&[1, u64::MAX, 1], false);
    assert_eq!(
        Frame::decode(frame.clone()),
        Ok(Frame::Release(crate::Release {
            handles: vec![1, u64::MAX, 1],
            handed_back: false
        }))
    );
    assert_eq!(
        Frame::decode(frame::encode_release(&[7], true)),
        Ok(Frame::Release(crate::Release {
            handles: vec![7],
            handed_back: true
        }))
    );
    assert_eq!(
        Frame::decode(frame::encode_release(&[], false)),
        Ok(Frame::Release(crate::Release::default()))
    );
    // A body that is not a whole number of handles.
    let mut cut = frame.to_vec();
    cut.truncate(cut.len() - 3);
    let len = cut.len() as u32;
    cut[..4].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(
        Frame::decode(cut.into()),
        Err(FrameError::Truncated {
            kind: "RELEASE",
            ..
        })
    ));
}

#[test]
fn grant_frames_carry_a_handle_and_a_whole_token() {
    let grant = Grant {
        handle: u64::MAX - 1,
        token: [0xA5; 16],
    };
    let frame = frame::encode_grant(&grant);
    assert_eq!(frame.len(), frame::GRANT_LEN);
    assert_eq!(Frame::decode(frame.clone()), Ok(Frame::Grant(grant)));
    // A token cut short.
    let mut cut = frame.to_vec();
    cut.truncate(cut.len() - 1);
    let len = cut.len() as u32;
    cut[..4].copy_from_slice(&len.to_le_bytes());
    assert!(matches!(
        Frame::decode(cut.into()),
        Err(FrameError::Truncated { kind: "GRANT", .. })
    ));
}

#[test]
fn only_a_server_accepts_grants() {
    let grant = Grant {
        handle: 7,
        token: [1; 16],
    };
    let mut pair = Pair::connected();
    pair.server.inject(&frame::encode_grant(&grant));
    assert_eq!(pair.server.receive_all(), vec![Ok(Event::Granted(grant))]);
    pair.client.inject(&frame::encode_grant(&grant));
    assert!(matches!(
        pair.client.receive_all().as_slice(),
        [Err(ProtocolError::UnexpectedFrame {
            kind: FrameKind::Grant,
            ..
        })]
    ));
}
