//! What a stream source says about the frames it already holds (complete ones count, a
//! partial one does not, and the count stops at the limit asked for) and about the cost of
//! a batch.

use std::io::Write;

use lanner_proto::frame::encode_ping;

use super::StreamSource;
use crate::transport::{FrameSource, Received};

/// A source on one end of a Unix socket pair, with `bytes` written into the other end.
fn source_holding(bytes: &[u8]) -> StreamSource<tokio::net::unix::OwnedReadHalf> {
    let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    theirs.write_all(bytes).unwrap();
    ours.set_nonblocking(true).unwrap();
    let ours = tokio::net::UnixStream::from_std(ours).unwrap();
    StreamSource::new(ours.into_split().0)
}

#[tokio::test]
async fn complete_frames_buffered_are_counted_up_to_the_limit() {
    let mut bytes = Vec::new();
    for nonce in 0..4 {
        bytes.extend_from_slice(&encode_ping(nonce));
    }
    let partial = encode_ping(9);
    bytes.extend_from_slice(&partial[..partial.len() - 1]);
    let mut source = source_holding(&bytes);
    assert_eq!(source.frames_ready(10), 0, "nothing read yet");
    // One receive reads everything that arrived and hands out the first frame.
    assert!(matches!(source.try_recv(), Ok(Received::Frame(_))));
    assert_eq!(
        source.frames_ready(10),
        3,
        "the partial frame does not count"
    );
    assert_eq!(source.frames_ready(2), 2, "counting stops at the limit");
    assert!(source.frame_ready());
    for _ in 0..3 {
        assert!(matches!(source.try_recv(), Ok(Received::Frame(_))));
    }
    assert_eq!(source.frames_ready(10), 0);
    assert!(!source.frame_ready(), "only part of the last frame is here");
}

#[tokio::test]
async fn a_socket_source_says_each_batch_costs_a_system_call() {
    let source = source_holding(&[]);
    assert!(
        !source.batches_cheaply(),
        "shallow pipelines keep their bursts over sockets"
    );
}
