//! The sending side of a connection: a queue of frames flushed in order.

use std::collections::VecDeque;
use std::io;
use std::task::{Context, Poll, ready};

use lanner_proto::OutFrame;

use crate::transport::FrameSink;

/// Frames waiting to be written, in order. A caller queues its frame and flushes; if it is
/// cancelled mid-write, the frame stays at the front and the next flush finishes it, so
/// the byte stream never holds half a frame followed by another.
pub(super) struct Writer {
    sink: Box<dyn FrameSink>,
    queue: VecDeque<OutFrame>,
}

impl Writer {
    pub(super) fn new(sink: Box<dyn FrameSink>) -> Writer {
        Writer {
            sink,
            queue: VecDeque::new(),
        }
    }

    pub(super) fn queue(&mut self, frame: OutFrame) {
        self.queue.push_back(frame);
    }

    pub(super) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some(front) = self.queue.front_mut() {
            ready!(self.sink.poll_send(cx, front))?;
            self.queue.pop_front();
        }
        Poll::Ready(Ok(()))
    }
}

impl Writer {
    /// The sink back (used after the handshake, when the queue is empty).
    pub(super) fn into_sink(self) -> Box<dyn FrameSink> {
        debug_assert!(self.queue.is_empty());
        self.sink
    }
}
