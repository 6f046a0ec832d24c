//! Sending frames into the outgoing ring.

use std::io;
use std::task::{Context, Poll};

use lanner_proto::OutFrame;
use lanner_shm::{Producer, Reservation};

use super::ring_error;
use super::waiter::Waiter;
use crate::transport::FrameSink;

/// The sending half of a shared-memory connection.
#[derive(Debug)]
pub(super) struct ShmSink {
    producer: Producer,
    waiter: Waiter,
    /// A frame is being sent in pieces; the rest of it must follow as pieces too.
    fragmenting: bool,
}

impl ShmSink {
    pub(super) fn new(producer: Producer, waiter: Waiter) -> ShmSink {
        ShmSink {
            producer,
            waiter,
            fragmenting: false,
        }
    }

    /// Frames up to this size go as one record; larger ones in pieces of a quarter ring,
    /// so that one large frame never needs the whole ring to itself.
    fn largest_whole(&self) -> usize {
        self.producer.capacity() / 2
    }
}

impl ShmSink {
    /// The common case on its own, without the general loop's bookkeeping: a frame sent
    /// whole as one record, with room for it in the ring now (published at once if
    /// `publish`). False, with nothing written, otherwise.
    fn try_send_whole(&mut self, frame: &mut OutFrame, publish: bool) -> io::Result<bool> {
        let len = frame.remaining();
        if self.fragmenting || len > self.largest_whole() {
            return Ok(false);
        }
        let Some(mut reservation) = self.producer.try_reserve(len).map_err(ring_error)? else {
            return Ok(false);
        };
        let mut at = 0;
        frame.for_each_unwritten(|segment| {
            reservation.write(at, segment);
            at += segment.len();
        });
        frame.mark_written();
        if publish {
            reservation.commit(false);
        } else {
            reservation.commit_unpublished(false);
        }
        Ok(true)
    }
}

/// Copies the first `len` unwritten bytes of `frame` into `reservation` and marks them
/// written: the whole frame (the common case), or the next piece of one sent in pieces.
fn copy_into(frame: &mut OutFrame, reservation: &mut Reservation<'_>, len: usize) {
    let mut copied = 0;
    let mut left_over = false;
    frame.for_each_unwritten(|segment| {
        let take = segment.len().min(len - copied);
        if take > 0 {
            reservation.write(copied, &segment[..take]);
            copied += take;
        }
        left_over |= take < segment.len();
    });
    if left_over {
        frame.advance(len);
    } else {
        frame.mark_written();
    }
}

impl ShmSink {
    /// Copies `frame` into the ring as one record (or pieces), publishing each record at
    /// once if `publish`, else leaving it for [`Producer::publish_pending`]. Publishes
    /// whatever waits before it sleeps for room.
    fn poll_send_one(
        &mut self,
        cx: &mut Context<'_>,
        frame: &mut OutFrame,
        publish: bool,
    ) -> Poll<io::Result<()>> {
        if self.try_send_whole(frame, publish)? {
            return Poll::Ready(Ok(()));
        }
        loop {
            let remaining = frame.remaining();
            if remaining == 0 {
                return Poll::Ready(Ok(()));
            }
            let piece = if !self.fragmenting && remaining <= self.largest_whole() {
                remaining
            } else {
                remaining.min(self.largest_whole() / 2)
            };
            let more = piece < remaining;
            match self.producer.try_reserve(piece).map_err(ring_error)? {
                Some(mut reservation) => {
                    copy_into(frame, &mut reservation, piece);
                    if publish {
                        reservation.commit(more);
                    } else {
                        reservation.commit_unpublished(more);
                    }
                    self.fragmenting = more;
                }
                None => {
                    // The consumer can free room only behind what it can see.
                    self.producer.publish_pending();
                    if !self.producer.prepare_wait(piece).map_err(ring_error)? {
                        continue;
                    }
                    match self.waiter.poll_rung(cx) {
                        Poll::Ready(Ok(())) => continue,
                        Poll::Ready(Err(_gone)) => {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::BrokenPipe,
                                "the shared-memory peer is gone",
                            )));
                        }
                        Poll::Pending => return Poll::Pending,
                    }
                }
            }
        }
    }
}

impl FrameSink for ShmSink {
    fn poll_send(&mut self, cx: &mut Context<'_>, frame: &mut OutFrame) -> Poll<io::Result<()>> {
        self.poll_send_one(cx, frame, true)
    }

    /// One record per frame, as always, but published together: one store of the ring's
    /// position and one wake-up check for the whole batch.
    fn poll_send_batch(
        &mut self,
        cx: &mut Context<'_>,
        frames: &mut [OutFrame],
    ) -> Poll<io::Result<()>> {
        let mut result = Poll::Ready(Ok(()));
        for frame in frames.iter_mut() {
            result = self.poll_send_one(cx, frame, false);
            if !matches!(result, Poll::Ready(Ok(()))) {
                break;
            }
        }
        self.producer.publish_pending();
        result
    }
}
