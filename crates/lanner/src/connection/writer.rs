//! The sending side of a connection: a queue of frames, written in batches without
//! waiting by whoever sends, and by a flusher task only when the transport is full.
//!
//! Senders never wait for the transport: flow-control credits already bound how many
//! requests (and so responses) can be queued, so a frame is queued, one non-blocking flush
//! is tried, and if the transport cannot take everything a flusher task finishes the job
//! in order. A frame is never interleaved with another, and a caller that is cancelled
//! after queueing cannot leave half a frame behind.
//!
//! Batching (the DCE "message vectors"): frames may wait in the queue for a flush that is
//! known to follow, and every flush hands the whole queue to the transport at once (for a
//! socket, one vectored write). Two things make frames wait:
//!
//! - the writer is *corked* while the receiver processes frames that arrived together:
//!   the answers produced meanwhile go out together when it uncorks, after the last one;
//! - a sender may *defer* its frame ([`When::Deferred`]) when it has arranged for a flush
//!   to follow (a caller with other calls in flight leaves it to the connection's reader,
//!   which flushes before each receive attempt).
//!
//! The credits of the peer's one-way calls are *held* rather than each sent in a frame of
//! its own (see [`Writer::return_credit`]): they go out together, ahead of the next frame
//! sent (after what a cork held back, when it ends), once a batch of them is held, or when
//! the receiver runs out of work.
//!
//! A frame sent with nothing queued and no cork is written at once, straight from the
//! caller: a lone call pays nothing for batching.
//!
//! A transport that can write a frame without showing it to the peer yet (shared memory:
//! a record committed, the ring's position stored later) takes a plain frame that would
//! wait, deferred or behind a cork, straight from its header and bulk, unshown
//! ([`Writer::try_defer_parts`]): the flush that would have written it shows it instead,
//! so it needs no buffer and no place in the queue.

use std::collections::VecDeque;
use std::io;
use std::task::{Context, Poll, Waker, ready};

use bytes::Bytes;
use lanner_proto::OutFrame;

use crate::transport::FrameSink;

pub(super) struct Writer {
    sink: Box<dyn FrameSink>,
    /// Frames not fully written, oldest first.
    queue: VecDeque<OutFrame>,
    /// For each queued frame, how many credits it returns to the peer.
    returns_credit: VecDeque<u32>,
    /// Credits of the peer's one-way calls returned but not in the queue yet: they go out
    /// together, in one CREDIT frame (see [`Writer::return_credit`]).
    held_credits: u32,
    /// How many held credits go out on their own, without another reason to write.
    credit_batch: u32,
    /// Credits returned to the peer and not written yet: those of queued frames (answers,
    /// CREDIT frames) and the held ones. The peer does not have them back until written.
    queued_credits: u32,
    /// A flusher task is waiting for room on the transport; senders only queue.
    flushing: bool,
    /// The flusher's waker while it waits for room.
    flusher: Option<Waker>,
    /// The PONG answering a PING that came while a flusher waited for room, and whether
    /// it answers the GOAWAY's probe: written after everything the flusher writes (see
    /// [`Writer::answer_ping`]).
    owed_pong: Option<(Bytes, bool)>,
    /// A receiver is processing frames that arrived together: frames wait for its
    /// [`Writer::uncork`].
    corked: bool,
    /// The connection failed: nothing more is written.
    aborted: bool,
    /// Frames written into the transport but not shown to the peer yet
    /// ([`Writer::try_defer_parts`]): the next flush publishes them.
    unpublished: bool,
    /// Frames handed to the writer so far (see [`crate::Traffic`]).
    frames_sent: u64,
}

/// When a frame must be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum When {
    /// Now (with whatever is queued before it).
    Now,
    /// At the next flush, which the sender has arranged to follow soon.
    Deferred,
}

/// What a sender should do after queueing.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Flushed {
    /// Everything is written.
    Done,
    /// The frame waits in the queue for a flush that follows (a cork, or a deferral), or
    /// the returned credit is held (it goes with the next frame, or when the receiver
    /// runs out of work).
    Queued,
    /// The transport is full; a flusher task must finish (start one).
    StartFlusher,
    /// A flusher task is already on it.
    FlusherRunning,
}

impl Writer {
    /// A writer to `sink` that holds back up to `credit_batch` (at least one) returned
    /// one-way credits (see [`Writer::return_credit`]).
    pub(super) fn new(sink: Box<dyn FrameSink>, credit_batch: u32) -> Writer {
        Writer {
            sink,
            queue: VecDeque::new(),
            returns_credit: VecDeque::new(),
            held_credits: 0,
            credit_batch: credit_batch.max(1),
            queued_credits: 0,
            flushing: false,
            flusher: None,
            owed_pong: None,
            corked: false,
            aborted: false,
            unpublished: false,
            frames_sent: 0,
        }
    }

    /// Sends `frame`: written now with everything queued before it (what the transport
    /// cannot take stays queued for a flusher), or queued if the writer is corked or the
    /// sender defers it. With nothing queued and no cork, a frame sent [`When::Now`] is
    /// written straight from the caller. Credits held back go ahead of it, in one CREDIT
    /// frame, unless the writer is corked: the uncork then sends them after what the cork
    /// held back (see [`Writer::return_credit`]).
    /// `returns_credit` marks an answer or a one-way call's credit (see
    /// [`Writer::queued_credits`]).
    pub(super) fn send(
        &mut self,
        frame: OutFrame,
        returns_credit: bool,
        when: When,
        cx: &mut Context<'_>,
    ) -> io::Result<Flushed> {
        if self.aborted {
            return Err(closed());
        }
        self.frames_sent += 1;
        if self.held_credits > 0 && !self.corked {
            // Something goes to the peer anyway: the held credits go first, in the same
            // batch (while corked, the uncork decides).
            self.push_held_credits();
        }
        if self.flushing {
            self.enqueue(frame, returns_credit);
            return Ok(Flushed::FlusherRunning);
        }
        if self.corked || when == When::Deferred {
            self.enqueue(frame, returns_credit);
            return Ok(Flushed::Queued);
        }
        if self.queue.is_empty() {
            let mut frame = frame;
            // Whatever it returns, the transport has shown the peer everything before.
            self.unpublished = false;
            return match self.sink.poll_send(cx, &mut frame) {
                Poll::Ready(result) => {
                    frame.recycle();
                    result.map(|()| Flushed::Done)
                }
                Poll::Pending => {
                    self.enqueue(frame, returns_credit);
                    self.flushing = true;
                    Ok(Flushed::StartFlusher)
                }
            };
        }
        self.enqueue(frame, returns_credit);
        self.flush(cx)
    }

    /// Writes a frame given as its header and bulk segment straight into the transport
    /// ([`FrameSink::try_send_parts`]) when [`Writer::send`] would write it at once anyway
    /// (nothing queued, no flusher, no credits held to go first) and the transport takes
    /// it so now. While corked, it is written but shown to the peer only at the uncork,
    /// with what the cork held back after it (as [`Writer::try_defer_parts`] does).
    /// False, with nothing written, otherwise: the caller then sends it as a frame.
    pub(super) fn try_send_parts(&mut self, head: &[u8], bulk: &[u8]) -> io::Result<bool> {
        if self.corked {
            return self.try_defer_parts(head, bulk);
        }
        if !self.takes_parts()? {
            return Ok(false);
        }
        let sent = self.sink.try_send_parts(head, bulk)?;
        self.frames_sent += u64::from(sent);
        self.unpublished &= !sent;
        Ok(sent)
    }

    /// [`Writer::try_send_parts`] for a frame deferred to the next flush, which the sender
    /// has arranged (see [`When::Deferred`]) or a cork brings: written into the transport
    /// now but shown to the peer only with the batch ([`FrameSink::try_defer_parts`]), so
    /// that it needs no place in the queue nor a buffer of its own. False, with nothing
    /// written, when [`Writer::try_send_parts`] would refuse it: the caller then queues it
    /// as a frame.
    pub(super) fn try_defer_parts(&mut self, head: &[u8], bulk: &[u8]) -> io::Result<bool> {
        if !self.takes_parts()? {
            return Ok(false);
        }
        let written = self.sink.try_defer_parts(head, bulk)?;
        self.frames_sent += u64::from(written);
        self.unpublished |= written;
        Ok(written)
    }

    /// Whether a frame given as parts may be written into the transport now: only with
    /// nothing queued before it (frames stay in order), no flusher (the transport is full)
    /// and no credits held back (they go first). An error once aborted.
    fn takes_parts(&self) -> io::Result<bool> {
        if self.aborted {
            return Err(closed());
        }
        Ok(self.held_credits == 0 && !self.flushing && self.queue.is_empty())
    }

    fn enqueue(&mut self, frame: OutFrame, returns_credit: bool) {
        self.queued_credits += u32::from(returns_credit);
        self.push(frame, u32::from(returns_credit));
    }

    /// Queues `frame`, which returns `credits` counted in `queued_credits` already.
    fn push(&mut self, frame: OutFrame, credits: u32) {
        self.queue.push_back(frame);
        self.returns_credit.push_back(credits);
    }

    /// Gives back the credit of one of the peer's one-way calls. Credits are held and go
    /// out together in one CREDIT frame: ahead of the next frame sent to the peer (an
    /// answer, a request; while corked, after what the cork held back, when it ends), at
    /// once when the writer's credit batch is held (queued behind a cork until it ends),
    /// and otherwise when the receiver finds nothing more to do
    /// ([`Writer::return_held_credits`]). Frames already queued that a flush writes
    /// (deferred requests, a flusher's queue) do not take them along. A stream of one-way calls then costs one frame
    /// on the way back per batch (or per burst of work), not one per call: on the peer's
    /// side each frame is a receive and a dispatch, which cost as much as the call. The
    /// peer keeps calling meanwhile as long as the batch is well below the credits it was
    /// granted. [`Flushed::Queued`] if the credit is held.
    pub(super) fn return_credit(&mut self, cx: &mut Context<'_>) -> io::Result<Flushed> {
        if self.aborted {
            return Err(closed());
        }
        self.held_credits += 1;
        self.queued_credits += 1;
        if self.held_credits < self.credit_batch {
            return Ok(Flushed::Queued);
        }
        // A batch's worth: queued now (written at once, or when a cork ends).
        self.push_held_credits();
        self.flush(cx)
    }

    /// Sends the credits held back, if any (the receiver ran out of work: the peer may be
    /// waiting for them). Done if there were none.
    pub(super) fn return_held_credits(&mut self, cx: &mut Context<'_>) -> io::Result<Flushed> {
        if self.held_credits == 0 {
            return Ok(Flushed::Done);
        }
        self.push_held_credits();
        self.flush(cx)
    }

    /// Answers a PING with `pong`, written as any frame unless a flusher waits for the
    /// peer to read: then it is owed, and written once the flusher has written what it
    /// holds (see [`Writer::poll_flusher`]). At most one PONG is owed, the latest, or the
    /// one answering the GOAWAY's probe (`probe`) once that came: a peer that pings
    /// without reading does not grow the queue, and a PING is still answered after
    /// everything written before it, which is what the GOAWAY's probe asks (the peer
    /// takes the answer to mean that every request sent before it has arrived).
    pub(super) fn answer_ping(
        &mut self,
        pong: Bytes,
        probe: bool,
        cx: &mut Context<'_>,
    ) -> io::Result<Flushed> {
        if self.aborted {
            return Err(closed());
        }
        if self.flushing {
            if !self
                .owed_pong
                .as_ref()
                .is_some_and(|(_, owed_probe)| *owed_probe)
            {
                self.owed_pong = Some((pong, probe));
            }
            return Ok(Flushed::FlusherRunning);
        }
        self.send(OutFrame::contiguous(pong), false, When::Now, cx)
    }

    /// Whether credits are held back (see [`Writer::return_credit`]).
    pub(super) fn holds_credits(&self) -> bool {
        self.held_credits > 0
    }

    /// Queues the held credits in one CREDIT frame.
    fn push_held_credits(&mut self) {
        let credits = std::mem::take(&mut self.held_credits);
        if credits > 0 {
            self.frames_sent += 1;
            let frame = lanner_proto::frame::encode_credit(credits);
            self.push(OutFrame::contiguous(frame), credits);
        }
    }

    /// Writes everything queued now, in one batch (unless a flusher task is on it or the
    /// writer is corked).
    pub(super) fn flush(&mut self, cx: &mut Context<'_>) -> io::Result<Flushed> {
        if self.flushing {
            return Ok(Flushed::FlusherRunning);
        }
        if self.corked {
            return Ok(Flushed::Queued);
        }
        if self.queue.is_empty() {
            if std::mem::take(&mut self.unpublished) {
                self.sink.publish_deferred();
            }
            return Ok(Flushed::Done);
        }
        match self.poll_flush(cx) {
            Poll::Ready(Ok(())) => Ok(Flushed::Done),
            Poll::Ready(Err(error)) => {
                self.clear();
                Err(error)
            }
            Poll::Pending => {
                self.flushing = true;
                Ok(Flushed::StartFlusher)
            }
        }
    }

    /// Frames sent now wait for [`Writer::uncork`].
    pub(super) fn cork(&mut self) {
        self.corked = true;
    }

    /// Ends a cork and writes what it held back (see [`Writer::flush`]).
    pub(super) fn uncork(&mut self, cx: &mut Context<'_>) -> io::Result<Flushed> {
        self.corked = false;
        if !self.queue.is_empty() || self.unpublished {
            // With what the cork held back (queued, or written and not shown yet).
            self.push_held_credits();
        }
        self.flush(cx)
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
        let before = self.write_position();
        let mut result = self.poll_flush(cx);
        if let Poll::Ready(Ok(())) = result
            && let Some((pong, _)) = self.owed_pong.take()
        {
            // Everything written before the PING is out: its answer follows.
            self.frames_sent += 1;
            self.push(OutFrame::contiguous(pong), 0);
            result = self.poll_flush(cx);
        }
        if self.write_position() != before {
            progress();
        }
        if result.is_pending() {
            self.flusher = Some(cx.waker().clone());
        }
        let result = ready!(result);
        self.flushing = false;
        // Under this lock: whoever finds the transport full next registers afresh.
        self.sink.stop_watching();
        if result.is_err() {
            // The transport is broken and the connection is failing: what is still queued
            // will never be written, and later senders must find an empty queue.
            self.clear();
        }
        Poll::Ready(result)
    }

    /// The connection failed: drops what is queued, refuses what comes, and wakes a
    /// waiting flusher so that it ends.
    pub(super) fn abort(&mut self) {
        self.aborted = true;
        self.clear();
        if let Some(flusher) = self.flusher.take() {
            flusher.wake();
        }
    }

    /// The transport's sending half, replaced by [`crate::transport::Released`], for the
    /// caller to drop (outside the writer's lock) once the connection has ended and been
    /// [aborted](Writer::abort).
    pub(super) fn release(&mut self) -> Box<dyn FrameSink> {
        std::mem::replace(&mut self.sink, Box::new(crate::transport::Released))
    }

    /// See [`FrameSink::unsent`].
    pub(super) fn unsent(&self) -> Option<usize> {
        self.sink.unsent()
    }

    /// Whether [`Writer::abort`] has stopped it.
    pub(super) fn is_aborted(&self) -> bool {
        self.aborted
    }

    /// Whether nothing waits to be written: no frame queued (corked ones included), none
    /// written but not shown to the peer yet, and no flusher waiting for room.
    pub(super) fn is_idle(&self) -> bool {
        self.queue.is_empty() && !self.unpublished && !self.flushing
    }

    fn clear(&mut self) {
        self.unpublished = false;
        self.owed_pong = None;
        self.queue.clear();
        self.returns_credit.clear();
        self.held_credits = 0;
        self.queued_credits = 0;
    }

    /// Where writing stands: frames are written in order, so this changes exactly when
    /// bytes went out (without summing the whole queue).
    fn write_position(&self) -> (usize, Option<usize>) {
        (
            self.queue.len(),
            self.queue.front().map(OutFrame::remaining),
        )
    }

    /// Hands the queue to the transport, oldest first, as few batches as it takes.
    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.queue.is_empty() {
            // One batch for the whole queue: a queue that wrapped around its buffer would
            // otherwise take two writes.
            let batch = self.queue.make_contiguous();
            // Whatever it returns, the transport has shown the peer everything before.
            self.unpublished = false;
            let result = self.sink.poll_send_batch(cx, batch);
            self.pop_written(result.is_ready());
            ready!(result)?;
        }
        Poll::Ready(Ok(()))
    }

    /// Drops written frames from the front of the queue. While the transport is not done
    /// (`finished` false) the last frame stays even if all its bytes went: the transport
    /// may still have to flush it (TLS), which the next call with it finishes.
    fn pop_written(&mut self, finished: bool) {
        if finished && self.queue.back().is_some_and(|last| last.remaining() == 0) {
            // The whole batch went out (frames are written in order): no frame to look at.
            for written in self.queue.drain(..) {
                written.recycle();
            }
            self.returns_credit.clear();
            self.queued_credits = self.held_credits;
            return;
        }
        while let Some(front) = self.queue.front() {
            if front.remaining() > 0 || (!finished && self.queue.len() == 1) {
                break;
            }
            if let Some(written) = self.queue.pop_front() {
                written.recycle();
            }
            self.queued_credits -= self.returns_credit.pop_front().unwrap_or(0);
        }
    }
}

/// The error of a write on a closed connection.
fn closed() -> io::Error {
    io::Error::new(io::ErrorKind::BrokenPipe, "the connection is closed")
}

#[cfg(test)]
#[path = "writer_tests.rs"]
mod tests;
