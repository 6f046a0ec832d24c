//! A batch of frames goes out in as few vectored writes as the socket allows, in order,
//! whatever the socket takes per write.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use lanner_proto::OutFrame;

use super::{MAX_BATCH_IOVECS, StreamSink, StreamWriteHalf};
use crate::transport::FrameSink;

/// A socket that takes at most `take` bytes per write and records each write.
struct Recorder {
    take: usize,
    writes: Vec<Vec<u8>>,
}

impl StreamWriteHalf for Recorder {
    fn try_write_vectored(&mut self, slices: &[IoSlice<'_>]) -> io::Result<usize> {
        let all: Vec<u8> = slices.iter().flat_map(|s| s.iter().copied()).collect();
        let taken = all.len().min(self.take);
        self.writes.push(all[..taken].to_vec());
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

fn frames(texts: &[&'static str]) -> Vec<OutFrame> {
    texts
        .iter()
        .map(|text| OutFrame::contiguous(Bytes::from_static(text.as_bytes())))
        .collect()
}

fn send(take: usize, frames: &mut [OutFrame]) -> Vec<Vec<u8>> {
    let mut sink = StreamSink::new(Recorder {
        take,
        writes: Vec::new(),
    });
    let result = sink.poll_send_batch(&mut Context::from_waker(Waker::noop()), frames);
    assert!(matches!(result, Poll::Ready(Ok(()))));
    assert!(frames.iter().all(|frame| frame.remaining() == 0));
    sink.writer.writes
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
