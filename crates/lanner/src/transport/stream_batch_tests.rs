//! A batch of frames goes out in as few vectored writes as the socket allows, in order,
//! whatever the socket takes per write.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use lanner_proto::OutFrame;

use super::{COALESCE_MAX, MAX_BATCH_IOVECS, StreamSink, StreamWriteHalf};
use crate::transport::FrameSink;
use crate::transport::page_padding::{ALIASING_WINDOW, PADDED_BULK_MIN};

/// A socket that takes at most `take` bytes per write and records each write (and how
/// many segments it was handed).
struct Recorder {
    take: usize,
    writes: Vec<Vec<u8>>,
    segments: Vec<usize>,
}

impl StreamWriteHalf for Recorder {
    fn try_write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let all: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
        let taken = all.len().min(self.take);
        self.writes.push(all[..taken].to_vec());
        self.segments.push(slices.len());
        Ok(taken)
    }
}

impl tokio::io::AsyncWrite for Recorder {
    fn poll_write(
        self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
        _buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        unreachable!("the recorder never reports a full socket")
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

fn frames(texts: &[&str]) -> Vec<OutFrame> {
    texts
        .iter()
        .map(|text| OutFrame::contiguous(Bytes::copy_from_slice(text.as_bytes())))
        .collect()
}

fn send(take: usize, frames: &mut [OutFrame]) -> Vec<Vec<u8>> {
    send_recording(take, frames).writes
}

fn send_recording(take: usize, frames: &mut [OutFrame]) -> Recorder {
    let mut sink = StreamSink::new(Recorder {
        take,
        writes: Vec::new(),
        segments: Vec::new(),
    });
    let result = sink.poll_send_batch(&mut Context::from_waker(Waker::noop()), frames);
    assert!(matches!(result, Poll::Ready(Ok(()))));
    assert!(frames.iter().all(|frame| frame.remaining() == 0));
    sink.writer
}

#[test]
fn small_frames_go_out_in_one_write() {
    let writes = send(usize::MAX, &mut frames(&["one", "two", "three"]));
    assert_eq!(writes, [b"onetwothree".to_vec()]);
}

#[test]
fn short_writes_continue_where_they_stopped_in_order() {
    let writes = send(4, &mut frames(&["one", "two", "three"]));
    let joined: Vec<u8> = writes.concat();
    assert_eq!(joined, b"onetwothree");
    assert_eq!(writes.len(), 3, "{writes:?}");
}

#[test]
fn more_segments_than_one_write_holds_take_several_writes() {
    let texts = vec!["ab"; MAX_BATCH_IOVECS + 3];
    let writes = send(usize::MAX, &mut frames(&texts));
    assert_eq!(writes.len(), 2);
    assert_eq!(writes[0].len(), 2 * MAX_BATCH_IOVECS);
    assert_eq!(
        writes.concat(),
        "ab".repeat(MAX_BATCH_IOVECS + 3).into_bytes()
    );
}

#[test]
fn small_frames_are_gathered_into_one_segment_large_ones_are_not() {
    let small = send_recording(usize::MAX, &mut frames(&["one", "two", "three"]));
    assert_eq!(small.segments, [1], "gathered");
    let half = "x".repeat(COALESCE_MAX / 2 + 1);
    let large = send_recording(usize::MAX, &mut frames(&[&half, &half]));
    assert_eq!(large.segments, [2], "written from the frames, not copied");
    assert_eq!(large.writes.concat().len(), 2 * half.len());
}

#[test]
fn a_gathered_write_taken_in_part_continues_in_order() {
    let recorded = send_recording(5, &mut frames(&["one", "two", "three"]));
    assert_eq!(recorded.writes.concat(), b"onetwothree");
    assert_eq!(recorded.writes[0], b"onetw");
}

/// Requests stamped on one connection, each carrying one bulk payload.
fn requests_with_payloads(payloads: &[&'static [u8]]) -> Vec<OutFrame> {
    let mut pair = lanner_proto::harness::Pair::connected();
    payloads
        .iter()
        .map(|payload| {
            let mut message = lanner_proto::MessageBuilder::request(7, 0, 1, 0xfeed);
            message.push_segment(Bytes::from_static(payload));
            pair.client.conn.send_request(message).unwrap().1
        })
        .collect()
}

#[test]
fn a_lone_frame_is_written_from_its_segments() {
    let mut frames = requests_with_payloads(&[b"payload"]);
    let length = frames[0].remaining();
    let recorded = send_recording(usize::MAX, &mut frames);
    assert_eq!(
        recorded.segments,
        [2],
        "header and payload, not copied together"
    );
    assert_eq!(recorded.writes.concat().len(), length);
    assert!(recorded.writes[0].ends_with(b"payload"));
}

#[test]
fn small_bulk_payloads_in_a_batch_are_written_from_their_buffers() {
    let mut frames = requests_with_payloads(&[b"one", b"two"]);
    let recorded = send_recording(usize::MAX, &mut frames);
    assert_eq!(
        recorded.segments,
        [4],
        "two headers and two payloads, not gathered"
    );
}

/// `len` bytes counting up, starting `offset` bytes past a 4 KiB boundary.
fn payload_in_page_at(len: usize, offset: usize) -> Bytes {
    let buffer: Vec<u8> = (0..len + 8192).map(|i| i as u8).collect();
    let start = (offset + 4096 - buffer.as_ptr() as usize % 4096) % 4096;
    Bytes::from(buffer).slice(start..start + len)
}

/// A request carrying `payload`, sent alone by a TCP-style sink (padding page fragments)
/// that takes at most `take` bytes per write: the frames the bytes written split into.
fn padded_send(payload: Bytes, take: usize) -> Vec<Bytes> {
    padded_send_with_head(payload, take).0
}

/// [`padded_send`], and the request head's length (before any padding).
fn padded_send_with_head(payload: Bytes, take: usize) -> (Vec<Bytes>, usize) {
    let mut pair = lanner_proto::harness::Pair::connected();
    let mut message = lanner_proto::MessageBuilder::request(7, 0, 1, 0xfeed);
    message.push_segment(payload);
    let mut frame = pair.client.conn.send_request(message).unwrap().1;
    let head_len = frame.parts().0.len();
    let mut sink = StreamSink::new(Recorder {
        take,
        writes: Vec::new(),
        segments: Vec::new(),
    })
    .padding_page_fragments();
    let mut cx = Context::from_waker(Waker::noop());
    assert!(matches!(
        sink.poll_send(&mut cx, &mut frame),
        Poll::Ready(Ok(()))
    ));
    let mut received = bytes::BytesMut::from(&sink.writer.writes.concat()[..]);
    let splitter = lanner_proto::FrameSplitter::new(u32::MAX);
    let frames = std::iter::from_fn(|| splitter.split(&mut received).unwrap()).collect();
    assert!(received.is_empty(), "bytes left after the last whole frame");
    (frames, head_len)
}

#[test]
fn a_large_payload_that_would_alias_goes_behind_pongs_and_arrives_whole() {
    let payload = payload_in_page_at(PADDED_BULK_MIN, 16);
    for take in [usize::MAX, 1000] {
        let frames = padded_send(payload.clone(), take);
        // A 44-byte head 28 bytes ahead of the payload's 16: seven PONGs make it 140.
        assert_eq!(frames.len(), 8, "take {take}");
        for pong in &frames[..7] {
            assert_eq!(pong.len(), lanner_proto::frame::PING_LEN);
            assert_eq!(pong[4], lanner_proto::frame::FrameKind::Pong as u8);
        }
        assert_eq!(frames[7][4], lanner_proto::frame::FrameKind::Request as u8);
        assert!(frames[7].ends_with(&payload), "take {take}");
    }
}

#[test]
fn payloads_that_would_not_alias_or_are_small_go_unpadded() {
    // Behind the head's end, level with it, or far enough ahead of it.
    for offset in [44, 60, 200] {
        let frames = padded_send(payload_in_page_at(PADDED_BULK_MIN, offset), usize::MAX);
        assert_eq!(frames.len(), 1, "offset {offset}");
    }
    let frames = padded_send(payload_in_page_at(PADDED_BULK_MIN / 2, 16), usize::MAX);
    assert_eq!(frames.len(), 1, "small payloads are left alone");
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

    /// Wherever the payload lies in its page and however the socket takes the bytes, what
    /// goes out is some PONGs (at most the window's worth) and then the request whole, and
    /// the payload's destination behind them is out of the aliasing window.
    #[test]
    fn padding_is_whole_pongs_then_the_frame_wherever_the_payload_lies(
        offset in 0usize..4096,
        extra in 0usize..4096,
        take in 1usize..300_000,
    ) {
        let payload = payload_in_page_at(PADDED_BULK_MIN + extra, offset);
        let (frames, head_len) = padded_send_with_head(payload.clone(), take);
        let (pongs, request) = frames.split_at(frames.len() - 1);
        proptest::prop_assert!(pongs.len() * lanner_proto::frame::PING_LEN <= ALIASING_WINDOW);
        for pong in pongs {
            proptest::prop_assert_eq!(pong[4], lanner_proto::frame::FrameKind::Pong as u8);
        }
        proptest::prop_assert!(request[0].ends_with(&payload));
        let ahead = (head_len + pongs.len() * lanner_proto::frame::PING_LEN + 4096 - offset) % 4096;
        proptest::prop_assert!(!(1..ALIASING_WINDOW).contains(&ahead), "{} bytes ahead", ahead);
    }
}
