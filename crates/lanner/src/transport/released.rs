//! What stands in for a transport's halves once its connection has ended.
//!
//! A connection lives as long as anything holds it: a proxy made on it pins it, so a
//! client that keeps a proxy of a server that went away keeps its connection. What the
//! connection no longer needs, the transport's halves (a socket, a shared-memory ring's
//! doorbells), is let go of when it ends and replaced by [`Released`], which sends nothing
//! and receives the end.

use std::io;
use std::task::{Context, Poll};

use lanner_proto::OutFrame;

use super::{FrameSink, FrameSource, Received, RecvError};

/// The halves of a transport let go of (see the module docs).
#[derive(Debug, Default)]
pub(crate) struct Released;

impl FrameSink for Released {
    fn poll_send(&mut self, _: &mut Context<'_>, _: &mut OutFrame) -> Poll<io::Result<()>> {
        Poll::Ready(Err(io::Error::new(
            io::ErrorKind::NotConnected,
            "the connection has ended",
        )))
    }
}

impl FrameSource for Released {
    fn try_recv(&mut self) -> Result<Received, RecvError> {
        Ok(Received::Closed)
    }

    fn poll_recv(&mut self, _: &mut Context<'_>) -> Poll<Result<Received, RecvError>> {
        Poll::Ready(Ok(Received::Closed))
    }

    fn set_max_frame_size(&mut self, _: u32) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_nothing_and_receives_the_end() {
        let mut released = Released;
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut frame = OutFrame::contiguous(bytes::Bytes::from_static(b"frame"));
        assert!(matches!(
            released.poll_send(&mut cx, &mut frame),
            Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::NotConnected
        ));
        assert!(matches!(released.try_recv(), Ok(Received::Closed)));
        assert!(matches!(
            released.poll_recv(&mut cx),
            Poll::Ready(Ok(Received::Closed))
        ));
    }
}
