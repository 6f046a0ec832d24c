//! The sending side of a connection: a queue of frames, flushed without waiting by whoever
//! sends, and by a flusher task only when the transport is full.
//!
//! Senders never wait for the transport: flow-control credits already bound how many
//! requests (and so responses) can be queued, so a frame is queued, one non-blocking flush
//! is tried, and if the transport cannot take everything a flusher task finishes the job
//! in order. A frame is never interleaved with another, and a caller that is cancelled
//! after queueing cannot leave half a frame behind.

use std::collections::VecDeque;
use std::io;
use std::task::{Context, Poll, Waker, ready};

use lanner_proto::OutFrame;

use crate::transport::FrameSink;

pub(super) struct Writer {
    sink: Box<dyn FrameSink>,
    /// Frames not fully written, each marked if it returns a credit to the peer.
    queue: VecDeque<(OutFrame, bool)>,
    /// Queued frames that return a credit (answers, one-way credits): the peer does not
    /// have those credits back until they are written.
    queued_credits: u32,
    /// A flusher task is waiting for room on the transport; senders only queue.
    flushing: bool,
    /// The flusher's waker while it waits for room.
    flusher: Option<Waker>,
    /// The connection failed: nothing more is written.
    aborted: bool,
    /// Frames handed to the writer so far (see [`crate::Traffic`]).
    frames_sent: u64,
}

/// What a sender should do after queueing.
pub(super) enum Flushed {
    /// Everything is written.
    Done,
    /// The transport is full; a flusher task must finish (start one).
    StartFlusher,
    /// A flusher task is already on it.
    FlusherRunning,
}

impl Writer {
    pub(super) fn new(sink: Box<dyn FrameSink>) -> Writer {
        Writer {
            sink,
            queue: VecDeque::new(),
            queued_credits: 0,
            flushing: false,
            flusher: None,
            aborted: false,
            frames_sent: 0,
        }
    }

    /// Writes what the transport takes of `frame` now, queueing the rest. Frames are
    /// queued only while a flusher runs, so with no flusher the frame is written straight
    /// from the caller.
    /// `returns_credit` marks an answer or a one-way call's credit (see
    /// [`Writer::queued_credits`]).
    pub(super) fn send(
        &mut self,
        mut frame: OutFrame,
        returns_credit: bool,
        cx: &mut Context<'_>,
    ) -> io::Result<Flushed> {
        if self.aborted {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the connection is closed",
            ));
        }
        self.frames_sent += 1;
        if self.flushing {
            self.enqueue(frame, returns_credit);
            return Ok(Flushed::FlusherRunning);
        }
        debug_assert!(self.queue.is_empty());
        match self.sink.poll_send(cx, &mut frame) {
            Poll::Ready(result) => result.map(|()| Flushed::Done),
            Poll::Pending => {
                self.enqueue(frame, returns_credit);
                self.flushing = true;
                Ok(Flushed::StartFlusher)
            }
        }
    }

    fn enqueue(&mut self, frame: OutFrame, returns_credit: bool) {
        self.queued_credits += u32::from(returns_credit);
        self.queue.push_back((frame, returns_credit));
    }

    /// Frames sent (or queued to be) so far.
    pub(super) fn frames_sent(&self) -> u64 {
        self.frames_sent
    }

    /// Credits returned to the peer but not written yet: the peer cannot have used them,
    /// so its requests plus these may not exceed its window.
    pub(super) fn queued_credits(&self) -> u32 {
        self.queued_credits
    }

    /// The flusher's step: writes until done (clearing the flusher flag) or Pending.
    /// `progress` is called if any bytes were written.
    pub(super) fn poll_flusher(
        &mut self,
        cx: &mut Context<'_>,
        progress: impl FnOnce(),
    ) -> Poll<io::Result<()>> {
        if self.aborted {
            self.flushing = false;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "the connection closed with frames unwritten",
            )));
        }
        let before = self.queued_bytes();
        let result = self.poll_flush(cx);
        if self.queued_bytes() != before {
            progress();
        }
        if result.is_pending() {
            self.flusher = Some(cx.waker().clone());
        }
        let result = ready!(result);
        self.flushing = false;
        if result.is_err() {
            // The transport is broken and the connection is failing: what is still queued
            // will never be written, and later senders must find an empty queue.
            self.queue.clear();
            self.queued_credits = 0;
        }
        Poll::Ready(result)
    }

    /// The connection failed: drops what is queued, refuses what comes, and wakes a
    /// waiting flusher so that it ends.
    pub(super) fn abort(&mut self) {
        self.aborted = true;
        self.queue.clear();
        self.queued_credits = 0;
        if let Some(flusher) = self.flusher.take() {
            flusher.wake();
        }
    }

    fn queued_bytes(&self) -> usize {
        self.queue.iter().map(|(frame, _)| frame.remaining()).sum()
    }

    pub(super) fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((front, _)) = self.queue.front_mut() {
            ready!(self.sink.poll_send(cx, front))?;
            if let Some((_, true)) = self.queue.pop_front() {
                self.queued_credits -= 1;
            }
        }
        Poll::Ready(Ok(()))
    }
}
