//! Bulk segments delivered apart from their frame, by reference (`ExternalSegments`):
//! a frame decodes the same whichever of its segments travel apart, and a mismatch between
//! the segments delivered and the frame's table is a clear error.

use bytes::{Bytes, BytesMut};
use proptest::collection::vec;
use proptest::prelude::*;

use super::request;
use crate::error::FrameError;
use crate::frame::Frame;
use crate::payload::ExternalSegments;

/// The wire bytes of a request with `bulk` segments, without the segments whose bit is set
/// in `apart`, and those segments apart.
fn split_frame(bulk: &[Vec<u8>], apart: u32) -> (Bytes, ExternalSegments) {
    split_frame_where(bulk, |index| apart & (1 << index) != 0)
}

/// [`split_frame`] with the segments `apart` says delivered apart.
fn split_frame_where(bulk: &[Vec<u8>], apart: impl Fn(usize) -> bool) -> (Bytes, ExternalSegments) {
    let segments: Vec<&[u8]> = bulk.iter().map(Vec::as_slice).collect();
    let mut builder = request(3, 1, 2, 0xfeed, b"inline", &segments);
    builder.set_call_id(9);
    let out = builder.finish();
    let (head, parts) = out.parts();
    let mut in_frame = BytesMut::from(head);
    let mut external = ExternalSegments::new();
    for (index, segment) in parts.iter().enumerate() {
        if apart(index) {
            external.push((index as u16, segment.clone()));
        } else {
            in_frame.extend_from_slice(segment);
        }
    }
    (in_frame.freeze(), external)
}

proptest! {
    #[test]
    fn a_request_decodes_the_same_whichever_segments_travel_apart(
        bulk in vec(vec(any::<u8>(), 0..100), 0..6),
        apart in any::<u32>(),
    ) {
        let apart = apart & ((1u32 << bulk.len()) - 1);
        let (frame, external) = split_frame(&bulk, apart);
        let Ok(Frame::Request(request)) = Frame::decode_with(frame, external) else {
            panic!("the split frame does not decode");
        };
        prop_assert_eq!(request.call_id, 9);
        prop_assert_eq!(request.payload.inline_slice(), b"inline");
        prop_assert_eq!(request.payload.segment_count(), bulk.len());
        prop_assert_eq!(request.payload.external_count() as u32, apart.count_ones());
        for (index, expected) in bulk.iter().enumerate() {
            prop_assert_eq!(&request.payload.segment(index).unwrap()[..], &expected[..]);
        }
        let all: Vec<Bytes> = request.payload.segments().collect();
        prop_assert_eq!(all.len(), bulk.len());
        for (segment, expected) in all.iter().zip(&bulk) {
            prop_assert_eq!(&segment[..], &expected[..]);
        }
    }
}

#[test]
fn the_most_segments_decode_with_any_of_them_apart() {
    let bulk: Vec<Vec<u8>> = (0..crate::limits::MAX_BULK_SEGMENTS)
        .map(|index| index.to_le_bytes().repeat(usize::from(index % 3)))
        .collect();
    for apart in [|_| true, |index| index % 3 == 1, |index| index >= 1000] {
        let (frame, external) = split_frame_where(&bulk, apart);
        let apart_count = external.len();
        let Ok(Frame::Request(request)) = Frame::decode_with(frame, external) else {
            panic!("the split frame does not decode");
        };
        assert_eq!(request.payload.external_count(), apart_count);
        for (index, expected) in bulk.iter().enumerate() {
            assert_eq!(&request.payload.segment(index).unwrap()[..], &expected[..]);
        }
        assert!(
            request
                .payload
                .segments()
                .eq(bulk.iter().map(|b| Bytes::from(b.clone())))
        );
    }
}

fn bulk() -> Vec<Vec<u8>> {
    vec![b"first".to_vec(), b"second".to_vec(), b"third".to_vec()]
}

#[test]
fn a_segment_apart_with_another_length_than_the_table_says_is_refused() {
    let (frame, mut external) = split_frame(&bulk(), 0b010);
    external[0].1 = Bytes::from_static(b"SECOND!");
    assert!(matches!(
        Frame::decode_with(frame, external),
        Err(FrameError::LengthMismatch { .. } | FrameError::BadExternal(_))
    ));
}

#[test]
fn segments_apart_must_be_named_once_in_ascending_order() {
    let (frame, mut external) = split_frame(&bulk(), 0b101);
    external.swap(0, 1);
    assert_eq!(
        Frame::decode_with(frame, external),
        Err(FrameError::BadExternal(
            "segment indexes not strictly ascending"
        ))
    );
}

#[test]
fn a_segment_apart_beyond_the_segment_count_is_refused() {
    let (frame, mut external) = split_frame(&bulk(), 0b100);
    external[0].0 = 3;
    assert_eq!(
        Frame::decode_with(frame, external),
        Err(FrameError::BadExternal(
            "a segment index beyond the frame's segment count"
        ))
    );
}

#[test]
fn a_frame_without_its_segments_and_without_them_apart_is_a_length_mismatch() {
    let (frame, _) = split_frame(&bulk(), 0b001);
    assert!(matches!(
        Frame::decode_with(frame, ExternalSegments::new()),
        Err(FrameError::LengthMismatch { .. })
    ));
}

#[test]
fn only_requests_and_responses_take_segments_apart() {
    let ping = crate::frame::encode_ping(5);
    let mut frame = BytesMut::from(&ping[..]);
    // The length field counts the segment apart.
    let len = u32::try_from(frame.len() + 4).unwrap();
    frame[..4].copy_from_slice(&len.to_le_bytes());
    let external = vec![(0, Bytes::from_static(b"junk"))];
    assert_eq!(
        Frame::decode_with(frame.freeze(), external),
        Err(FrameError::BadExternal(
            "only requests and responses carry bulk segments"
        ))
    );
}
