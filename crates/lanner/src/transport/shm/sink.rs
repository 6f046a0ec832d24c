//! Sending frames into the outgoing ring.

use std::io;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use lanner_proto::OutFrame;
use lanner_shm::ring::ALIGNMENT;
use lanner_shm::{LoanArea, Producer, Reservation};

use super::lent;
use super::ring_error;
use super::waiter::{Ended, Waiter};
use crate::phase_marks::{self, Mark};
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

/// The longest a sink polls for room in a full ring before it sleeps until the consumer
/// rings (whatever the connection's spin budget: the poll holds its thread, and the writer's
/// lock when a caller sends). A consumer at work frees room a quarter ring at a time
/// (`lanner_shm::ring`'s lazy release), a megabyte in a few microseconds; one that frees
/// nothing for this long is busy elsewhere or asleep, and the doorbell is the better wait.
const ROOM_SPIN_LIMIT: Duration = Duration::from_micros(20);

/// Looks at the consumer's position this many times between readings of the clock while
/// polling for room.
const ROOM_POLLS_PER_CLOCK_READ: u32 = 64;

/// The sending half of a shared-memory connection.
#[derive(Debug)]
pub(super) struct ShmSink {
    producer: Producer,
    waiter: Waiter,
    /// A frame is being sent in pieces; the rest of it must follow as pieces too.
    fragmenting: bool,
    /// This side's loan area: bulk segments frozen from its loans are lent, not copied.
    loans: Option<LoanArea>,
    /// How long to poll for room in a full ring before sleeping (see [`ROOM_SPIN_LIMIT`]).
    room_spin: Duration,
    /// A poll for room found none: the next waits go straight to the doorbell until a
    /// record finds room again, so that a peer ringing without freeing room cannot have
    /// this side spin after every ring.
    room_spin_spent: bool,
}

impl ShmSink {
    pub(super) fn new(producer: Producer, waiter: Waiter, loans: Option<LoanArea>) -> ShmSink {
        ShmSink {
            producer,
            waiter,
            fragmenting: false,
            loans,
            room_spin: Duration::ZERO,
            room_spin_spent: false,
        }
    }

    /// Polls the consumer's position for room for a record of `len` bytes, for up to
    /// `room_spin` (once per stretch of waiting, see `room_spin_spent`). True if room
    /// appeared.
    fn spin_for_room(&mut self, len: usize) -> io::Result<bool> {
        if self.room_spin.is_zero() || self.room_spin_spent {
            return Ok(false);
        }
        let started = Instant::now();
        loop {
            for _ in 0..ROOM_POLLS_PER_CLOCK_READ {
                // A reservation only reserves once committed: dropped here, it is a look.
                if self
                    .producer
                    .try_reserve(len)
                    .map_err(ring_error)?
                    .is_some()
                {
                    return Ok(true);
                }
                std::hint::spin_loop();
            }
            if started.elapsed() >= self.room_spin {
                self.room_spin_spent = true;
                return Ok(false);
            }
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
        phase_marks::mark(Mark::Published);
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

    /// Room for a whole frame of `len` bytes whose head (fixed part, inline data, segment
    /// table) is `head_len` bytes and whose first bulk segment is `first`, placed for its
    /// copy: large ones are aligned when their bulk is large enough for the copy to feel
    /// it ([`ALIGNED_BULK_MIN`]; the prefix fits: a whole frame takes at most half a
    /// ring, a record three quarters); others go straight on (every record starts on a
    /// cache line: see [`lanner_shm::ring::RECORD_ALIGN`]). `None` if the ring has no room
    /// now.
    // Always inlined: a reservation returned through memory is read back with a load that
    // waits for the stores before it, the previous frames' copies among them (see
    // `try_send_whole`). Not inlined, this made the shm null call 1.10 µs against 1.02-1.04
    // (slow host state, twenty-third session).
    #[inline(always)]
    fn try_reserve_placed(
        &mut self,
        len: usize,
        head_len: usize,
        first: Option<&[u8]>,
    ) -> io::Result<Option<Reservation<'_>>> {
        let reserved = match first {
            Some(first) if len >= ALIGNED_BULK_MIN + head_len => {
                let residue = first.as_ptr() as usize % ALIGNMENT;
                self.producer.try_reserve_aligned(len, head_len, residue)
            }
            _ => self.producer.try_reserve(len),
        };
        reserved.map_err(ring_error)
    }

    /// A plain frame (header and bulk) as one record, placed as [`ShmSink::try_send_whole`]
    /// places a frame ([`ShmSink::try_reserve_placed`]), published at once if `publish`.
    /// Not a frame whose bulk would be lent (the general path lends it), nor one that does
    /// not fit the ring now.
    fn try_write_parts(&mut self, head: &[u8], bulk: &[u8], publish: bool) -> io::Result<bool> {
        let len = head.len() + bulk.len();
        if self.fragmenting || len > self.largest_whole() || self.would_lend(bulk) {
            return Ok(false);
        }
        let first = (!bulk.is_empty()).then_some(bulk);
        let Some(mut reservation) = self.try_reserve_placed(len, head.len(), first)? else {
            return Ok(false);
        };
        // Through the slice, as `try_send_whole` copies (see there).
        let message = reservation.as_mut_slice();
        message[..head.len()].copy_from_slice(head);
        message[head.len()..len].copy_from_slice(bulk);
        complete(reservation, publish, false);
        self.room_spin_spent = false;
        Ok(true)
    }

    /// Whether a frame with this bulk segment would lend it (see [`lent::lendable`]).
    fn would_lend(&self, bulk: &[u8]) -> bool {
        self.loans
            .as_ref()
            .is_some_and(|area| lent::lendable(area, bulk))
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
        let (head, bulk) = frame.parts();
        let first = bulk.first().map(|first| &first[..]);
        let Some(mut reservation) = self.try_reserve_placed(len, head.len(), first)? else {
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
        loop {
            // First, and again once room appeared: the whole frame may now go as one
            // record, lent or aligned.
            if self.try_send_whole(frame, publish)? {
                self.room_spin_spent = false;
                return Poll::Ready(Ok(()));
            }
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
                    self.room_spin_spent = false;
                }
                None => {
                    // The consumer can free room only behind what it can see.
                    self.producer.publish_pending();
                    if self.spin_for_room(piece)? {
                        continue;
                    }
                    if !self.producer.prepare_wait(piece).map_err(ring_error)? {
                        continue;
                    }
                    match self.waiter.poll_rung(cx) {
                        Poll::Ready(Ok(())) => continue,
                        Poll::Ready(Err(Ended::PeerGone)) => {
                            return Poll::Ready(Err(io::Error::new(
                                io::ErrorKind::BrokenPipe,
                                "the shared-memory peer is gone",
                            )));
                        }
                        Poll::Ready(Err(Ended::Failed(error))) => return Poll::Ready(Err(error)),
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

    fn set_room_spin(&mut self, spin: Duration) {
        self.room_spin = spin.min(ROOM_SPIN_LIMIT);
    }

    fn poll_send(&mut self, cx: &mut Context<'_>, frame: &mut OutFrame) -> Poll<io::Result<()>> {
        self.poll_send_one(cx, frame, true)
    }

    /// One record, published at once (see [`ShmSink::try_write_parts`]).
    fn try_send_parts(&mut self, head: &[u8], bulk: &[u8]) -> io::Result<bool> {
        self.try_write_parts(head, bulk, true)
    }

    /// One record, committed but left for the next publication (see
    /// [`ShmSink::try_write_parts`]).
    fn try_defer_parts(&mut self, head: &[u8], bulk: &[u8]) -> io::Result<bool> {
        self.try_write_parts(head, bulk, false)
    }

    fn publish_deferred(&mut self) {
        self.producer.publish_pending();
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
    use lanner_shm::ring::{RECORD_HEADER, Wake, heap_ring};

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

    /// Sends `frame` on its own and takes the record it became.
    fn send_and_take(
        sink: &mut ShmSink,
        consumer: &mut lanner_shm::Consumer,
        frame: &mut OutFrame,
    ) -> lanner_shm::Record {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        assert!(matches!(
            sink.poll_send(&mut cx, frame),
            Poll::Ready(Ok(()))
        ));
        consumer
            .try_recv()
            .expect("ring intact")
            .expect("the frame")
    }

    #[tokio::test]
    async fn deferred_parts_wait_unseen_until_published_with_what_follows() {
        let (mut sink, mut consumer, _peer) = sink_and_consumer();
        assert!(sink.try_defer_parts(b"head", b"bulk").unwrap());
        assert!(sink.try_defer_parts(b"null", b"").unwrap());
        assert!(
            records(&mut consumer).is_empty(),
            "committed, not published"
        );
        sink.publish_deferred();
        assert_eq!(records(&mut consumer), ["headbulk".as_bytes(), b"null"]);

        // A record published later shows those deferred before it.
        assert!(sink.try_defer_parts(b"first", b"").unwrap());
        assert!(sink.try_send_parts(b"second", b"").unwrap());
        assert_eq!(records(&mut consumer), ["first".as_bytes(), b"second"]);
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
            let record = send_and_take(&mut sink, &mut consumer, &mut frame);
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

    /// Every frame's record starts on a cache line, in a batch or alone, so a small frame
    /// takes one line of its own; a frame larger than a line takes as few as its size
    /// allows. Each arrives whole, right after its record's header.
    #[tokio::test]
    async fn every_record_starts_on_a_line_whether_batched_or_alone() {
        let (mut sink, mut consumer, _peer) = sink_on_ring(1 << 16, 1);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let frame = |len: usize| OutFrame::contiguous(Bytes::from(vec![len as u8; len]));
        let mut batch = [frame(8), frame(24), frame(56), frame(57), frame(16)];
        assert!(matches!(
            sink.poll_send_batch(&mut cx, &mut batch),
            Poll::Ready(Ok(()))
        ));
        let batched = records(&mut consumer);
        assert_eq!(
            batched.iter().map(Bytes::len).collect::<Vec<_>>(),
            [8, 24, 56, 57, 16]
        );
        let gaps: Vec<usize> = batched
            .windows(2)
            .map(|pair| pair[1].as_ptr() as usize - pair[0].as_ptr() as usize)
            .collect();
        assert_eq!(
            gaps,
            [64, 64, 64, 128],
            "one line per record of up to 56 bytes, two for 57 (8-byte header)"
        );
        for len in [1, 28, 40, 56, 100, 1, 44] {
            let record = send_and_take(&mut sink, &mut consumer, &mut frame(len));
            assert!(
                record.in_place,
                "read in place, so its address is the ring's"
            );
            assert_eq!(record.bytes, vec![len as u8; len], "len {len}");
            assert_eq!(
                record.bytes.as_ptr() as usize % ALIGNMENT,
                RECORD_HEADER,
                "len {len}: the record starts on a line"
            );
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

    /// Fills the sink's ring with 1000-byte frames until one finds no room; returns it.
    fn fill(sink: &mut ShmSink, cx: &mut Context<'_>) -> OutFrame {
        let payload = Bytes::from(vec![7u8; 1000]);
        for _ in 0..16 {
            let mut frame = OutFrame::contiguous(payload.clone());
            match sink.poll_send(cx, &mut frame) {
                Poll::Ready(result) => result.expect("sent"),
                Poll::Pending => return frame,
            }
        }
        panic!("a 4 KiB ring took sixteen 1000-byte frames");
    }

    /// A sink that finds the ring full polls for room a while before it sleeps: room the
    /// consumer frees meanwhile takes the frame at once, with no wait for a doorbell.
    #[tokio::test]
    async fn a_full_ring_takes_the_frame_when_room_appears_within_the_room_spin() {
        let (mut sink, mut consumer, _peer) = sink_and_consumer();
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut frame = fill(&mut sink, &mut cx);
        // Room appears well after the poll started, well within its spin.
        sink.room_spin = Duration::from_secs(30);
        let freeing = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let taken = records(&mut consumer).len();
            (consumer, taken)
        });
        assert!(
            matches!(sink.poll_send(&mut cx, &mut frame), Poll::Ready(Ok(()))),
            "the frame went out once the consumer freed room"
        );
        let (mut consumer, taken) = freeing.join().expect("consumer thread");
        assert!(taken >= 3, "{taken} records freed");
        assert_eq!(
            records(&mut consumer).len(),
            1,
            "the frame that waited arrived"
        );
    }

    /// A spin that found no room is not repeated on the next wait (a peer ringing without
    /// freeing room would otherwise have this side spin after every ring), until a record
    /// finds room again. The connection's spin budget is bounded here.
    #[tokio::test]
    async fn a_spin_that_found_no_room_waits_for_the_doorbell_until_room_appears() {
        let (mut sink, mut consumer, _peer) = sink_and_consumer();
        sink.set_room_spin(Duration::from_secs(1));
        assert_eq!(sink.room_spin, ROOM_SPIN_LIMIT);
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut frame = fill(&mut sink, &mut cx);
        sink.room_spin = Duration::from_millis(200);
        assert!(matches!(sink.poll_send(&mut cx, &mut frame), Poll::Pending));
        assert!(sink.room_spin_spent, "the spin found no room");
        let again = Instant::now();
        assert!(matches!(sink.poll_send(&mut cx, &mut frame), Poll::Pending));
        assert!(
            again.elapsed() < sink.room_spin,
            "no second spin: {:?}",
            again.elapsed()
        );
        records(&mut consumer);
        assert!(matches!(
            sink.poll_send(&mut cx, &mut frame),
            Poll::Ready(Ok(()))
        ));
        assert!(!sink.room_spin_spent, "room found: the next wait may spin");
    }
}
