//! Sending frames into the outgoing ring.

use std::io;
use std::task::{Context, Poll};

use lanner_proto::OutFrame;
use lanner_shm::ring::ALIGNMENT;
use lanner_shm::{LoanArea, Producer, Reservation};

use super::lent;
use super::ring_error;
use super::waiter::Waiter;
use crate::transport::FrameSink;

/// Frames whose bulk segments hold at least this many bytes are placed so that the first
/// of them lies in the ring where its source lies in memory modulo a cache line
/// ([`Producer::try_reserve_aligned`]): otherwise it starts 4 bytes off an 8-byte boundary
/// (a REQUEST's head is 40 bytes, its segment table 4 per segment), and `memcpy` (`rep
/// movsb` at these sizes) copied 64 KiB at 30-37 GB/s on the development machine where
/// source and destination agreed modulo 64 made it 44-46 GB/s. Smaller frames are not
/// worth the up to 63 bytes of ring the prefix takes. A frame that finds room for itself
/// but not for its prefix goes unaligned (the general path) rather than waiting.
const ALIGNED_BULK_MIN: usize = 16 * 1024;

/// The sending half of a shared-memory connection.
#[derive(Debug)]
pub(super) struct ShmSink {
    producer: Producer,
    waiter: Waiter,
    /// A frame is being sent in pieces; the rest of it must follow as pieces too.
    fragmenting: bool,
    /// This side's loan area: bulk segments frozen from its loans are lent, not copied.
    loans: Option<LoanArea>,
}

impl ShmSink {
    pub(super) fn new(producer: Producer, waiter: Waiter, loans: Option<LoanArea>) -> ShmSink {
        ShmSink {
            producer,
            waiter,
            fragmenting: false,
            loans,
        }
    }

    /// Frames up to this size go as one record; larger ones in pieces of a quarter ring,
    /// so that one large frame never needs the whole ring to itself.
    fn largest_whole(&self) -> usize {
        self.producer.capacity() / 2
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

/// Completes a record (a piece of a frame if `more`): published at once if `publish`,
/// else left for [`Producer::publish_pending`].
fn complete(reservation: Reservation<'_>, publish: bool, more: bool) {
    if publish {
        reservation.commit(more);
    } else {
        reservation.commit_unpublished(more);
    }
}

impl ShmSink {
    /// Sends `frame` as one record that lends its large bulk segments instead of copying
    /// them into the ring (see the `lent` module). False, with nothing sent and nothing
    /// lent, if none can be lent (no room in the loan area, the peer holds too many
    /// lendings) or the ring has no room now: the ordinary path then copies, or waits.
    #[inline(never)]
    fn try_send_lent(&mut self, frame: &mut OutFrame, publish: bool) -> io::Result<bool> {
        let Some(area) = &self.loans else {
            return Ok(false);
        };
        if self.fragmenting {
            return Ok(false);
        }
        let (head, bulk) = frame.parts();
        let Some(mut plan) = lent::Plan::new(area, bulk) else {
            return Ok(false);
        };
        let len = plan.record_len(head.len());
        let reservation = match len > self.largest_whole() {
            true => Ok(None),
            false => self.producer.try_reserve(len),
        };
        let mut reservation = match reservation {
            Ok(Some(reservation)) => reservation,
            unwritten => {
                // Nothing went out: the lendings are taken back, whether the ring has no
                // room now or is broken.
                plan.undo(area);
                return unwritten.map(|_| false).map_err(ring_error);
            }
        };
        plan.write(&mut reservation, head, bulk);
        complete(reservation, publish, false);
        frame.mark_written();
        Ok(true)
    }

    /// The common case on its own, without the general loop's bookkeeping: a frame sent
    /// whole as one record, with room for it in the ring now (published at once if
    /// `publish`). False, with nothing written, otherwise.
    fn try_send_whole(&mut self, frame: &mut OutFrame, publish: bool) -> io::Result<bool> {
        let len = frame.remaining();
        if len == 0 {
            // Written already (a frame a batch left behind): no empty record.
            return Ok(true);
        }
        // A frame lending payloads carries a bulk segment of a kilobyte or more: frames
        // without (null calls, small payloads) go straight on.
        if len >= lent::LEND_MIN && self.loans.is_some() && self.try_send_lent(frame, publish)? {
            return Ok(true);
        }
        if self.fragmenting || len > self.largest_whole() {
            return Ok(false);
        }
        // Small frames (null calls among them) go straight on; large ones are aligned
        // when their bulk is large enough for the copy to feel it (the prefix fits: a
        // whole frame takes at most half a ring, a record three quarters).
        let reserved = match frame.parts() {
            (head, [first, ..]) if len >= ALIGNED_BULK_MIN + head.len() => {
                let residue = first.as_ptr() as usize % ALIGNMENT;
                self.producer.try_reserve_aligned(len, head.len(), residue)
            }
            _ => self.producer.try_reserve(len),
        };
        let Some(mut reservation) = reserved.map_err(ring_error)? else {
            return Ok(false);
        };
        // Copied through the slice, not `Reservation::write`: the closure then keeps only a
        // pointer and a length, where it kept the reservation on the stack, written as
        // two 8-byte stores and read back as one 16-byte load. Such a load cannot be
        // forwarded from the store buffer and waits until every older store reaches the
        // cache, the previous frames' copies into the ring among them (perf showed 87% of
        // this function's samples there; see docs/decisions.md, "Twelfth session").
        let message = reservation.as_mut_slice();
        let mut at = 0;
        frame.for_each_unwritten(|segment| {
            message[at..at + segment.len()].copy_from_slice(segment);
            at += segment.len();
        });
        frame.mark_written();
        complete(reservation, publish, false);
        Ok(true)
    }

    /// Copies `frame` into the ring as one record (or pieces), publishing each record at
    /// once if `publish`, else leaving it for [`Producer::publish_pending`]. Publishes
    /// whatever waits before it sleeps for room. Bulk segments frozen from this side's
    /// loans are lent instead, when they can be.
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
                    complete(reservation, publish, more);
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
    fn loan_area(&self) -> Option<LoanArea> {
        self.loans.clone()
    }

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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use bytes::Bytes;
    use lanner_shm::ring::{Wake, heap_ring};

    use super::*;

    struct Nobody;

    impl Wake for Nobody {
        fn wake(&self) {}
    }

    /// A sink on a 4 KiB heap ring whose consumer copies every record out.
    fn sink_and_consumer() -> (
        ShmSink,
        lanner_shm::Consumer,
        std::os::unix::net::UnixStream,
    ) {
        sink_on_ring(4096, 1 << 20)
    }

    /// A sink on a heap ring of `capacity` bytes whose consumer reads records of at least
    /// `in_place_min` bytes in place; the socket is the peer's end of the doorbell.
    fn sink_on_ring(
        capacity: usize,
        in_place_min: usize,
    ) -> (
        ShmSink,
        lanner_shm::Consumer,
        std::os::unix::net::UnixStream,
    ) {
        let (producer, consumer) =
            heap_ring(capacity, Arc::new(Nobody), Arc::new(Nobody), in_place_min);
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socket pair");
        let waiter = Waiter::new(ours.into()).expect("waiter");
        (ShmSink::new(producer, waiter, None), consumer, theirs)
    }

    fn records(consumer: &mut lanner_shm::Consumer) -> Vec<Bytes> {
        std::iter::from_fn(|| consumer.try_recv().expect("ring intact"))
            .map(|record| record.bytes)
            .collect()
    }

    #[tokio::test]
    async fn whole_frames_become_one_record_each_and_written_ones_none() {
        let (mut sink, mut consumer, _peer) = sink_and_consumer();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut written = OutFrame::contiguous(Bytes::from_static(b"already out"));
        written.mark_written();
        let mut batch = [
            OutFrame::contiguous(Bytes::from_static(b"first")),
            written,
            OutFrame::contiguous(Bytes::from_static(b"second")),
        ];
        assert!(matches!(
            sink.poll_send_batch(&mut cx, &mut batch),
            Poll::Ready(Ok(()))
        ));
        assert!(batch.iter().all(|frame| frame.remaining() == 0));
        assert_eq!(records(&mut consumer), ["first".as_bytes(), b"second"]);

        let mut lone = OutFrame::contiguous(Bytes::from_static(b"lone"));
        assert!(matches!(
            sink.poll_send(&mut cx, &mut lone),
            Poll::Ready(Ok(()))
        ));
        assert!(matches!(
            sink.poll_send(&mut cx, &mut lone),
            Poll::Ready(Ok(()))
        ));
        assert_eq!(records(&mut consumer), ["lone".as_bytes()], "sent once");
    }

    /// A frame carrying a large payload is placed so that the payload lies in the ring
    /// where it lies in its own buffer modulo a cache line, wherever that is, and arrives
    /// whole without the prefix that placed it.
    #[tokio::test]
    async fn a_large_payload_lands_where_its_source_lies_modulo_a_line() {
        let (mut sink, mut consumer, _peer) = sink_on_ring(1 << 17, 1);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut pair = lanner_proto::harness::Pair::connected();
        let buffer = Bytes::from(
            (0..ALIGNED_BULK_MIN + 2 * ALIGNMENT)
                .map(|i| i as u8)
                .collect::<Vec<_>>(),
        );
        for offset in [0, 1, 4, 13, 40, 63] {
            let payload = buffer.slice(offset..offset + ALIGNED_BULK_MIN);
            let mut message = lanner_proto::MessageBuilder::request(7, 0, 1, 0xfeed);
            message.push_segment(payload.clone());
            let (_, mut frame) = pair.client.conn.send_request(message).expect("stamped");
            let head = frame.parts().0.len();
            assert!(matches!(
                sink.poll_send(&mut cx, &mut frame),
                Poll::Ready(Ok(()))
            ));
            let record = consumer
                .try_recv()
                .expect("ring intact")
                .expect("the frame");
            assert!(
                record.in_place,
                "read in place, so its address is the ring's"
            );
            assert_eq!(
                (record.bytes.as_ptr() as usize + head) % ALIGNMENT,
                payload.as_ptr() as usize % ALIGNMENT,
                "offset {offset}"
            );
            assert_eq!(record.bytes.len(), head + payload.len(), "offset {offset}");
            assert!(record.bytes[head..] == payload[..], "offset {offset}");
        }
    }

    #[tokio::test]
    async fn a_frame_larger_than_half_the_ring_goes_in_pieces() {
        let (mut sink, mut consumer, _peer) = sink_and_consumer();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let payload: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        let mut frame = OutFrame::contiguous(Bytes::from(payload.clone()));
        let mut received = Vec::new();
        let mut pieces = 0;
        // Each round either sends a piece or finds the ring full until the records taken
        // here free it: a handful of rounds, bounded so that a stuck sink fails the test.
        for _ in 0..64 {
            if frame.remaining() == 0 {
                break;
            }
            match sink.poll_send(&mut cx, &mut frame) {
                Poll::Ready(Err(error)) => panic!("send failed: {error}"),
                Poll::Ready(Ok(())) | Poll::Pending => {}
            }
            for record in records(&mut consumer) {
                received.extend_from_slice(&record);
                pieces += 1;
            }
        }
        assert_eq!(frame.remaining(), 0, "the frame went out");
        for record in records(&mut consumer) {
            received.extend_from_slice(&record);
            pieces += 1;
        }
        assert!(pieces > 1, "{pieces} record(s)");
        assert_eq!(received, payload);
    }
}
