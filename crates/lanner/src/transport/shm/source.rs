//! Receiving frames from the incoming ring.

use std::io;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use lanner_proto::{ExternalSegments, FrameError, HANDSHAKE_MAX_FRAME_SIZE};
use lanner_shm::doorbell::Doorbell;
use lanner_shm::{Consumer, LoanReceiver, Record};

use super::waiter::{Ended, Waiter};
use super::{lent, ring_error};
use crate::transport::{FrameSource, Received, RecvError, SharedFrame};

/// While spinning, check that the peer is still alive after this many empty polls (a
/// system call, so not on every poll). Spinning receivers look at the arrival hint first
/// and poll the ring only at the end of each reader burst (`connection/reader.rs`), about
/// every 2 µs while idle: a busy-polling reader notices a dead peer within about a
/// millisecond, at one system call per millisecond of idle spinning.
const CHECK_PEER_EVERY: u32 = 1 << 9;

/// The receiving half of a shared-memory connection.
#[derive(Debug)]
pub(super) struct ShmSource {
    consumer: Consumer,
    waiter: Waiter,
    /// A fragmented frame being put back together.
    assembling: Option<BytesMut>,
    max_frame_size: u32,
    empty_polls: u32,
    /// Both doorbells, to hang up when the connection ends here.
    doorbells: [Arc<Doorbell>; 2],
    /// The peer's loan area: payloads it lends are read there in place.
    loans: LoanReceiver,
    /// The frame announced as [`Received::Shared`], until taken.
    shared: Option<SharedFrame>,
    /// Faults the region in once the peer is authenticated (a server's; see
    /// [`FrameSource::peer_authenticated`]), with the peer's name for its log.
    populate_when_authenticated: Option<(lanner_shm::Populator, String)>,
}

impl ShmSource {
    pub(super) fn new(
        consumer: Consumer,
        waiter: Waiter,
        doorbells: [Arc<Doorbell>; 2],
        loans: LoanReceiver,
        populate_when_authenticated: Option<(lanner_shm::Populator, String)>,
    ) -> ShmSource {
        ShmSource {
            consumer,
            waiter,
            assembling: None,
            max_frame_size: HANDSHAKE_MAX_FRAME_SIZE,
            empty_polls: 0,
            doorbells,
            loans,
            shared: None,
            populate_when_authenticated,
        }
    }

    fn too_large(&self, len: usize) -> RecvError {
        RecvError::Frame(FrameError::TooLarge {
            len: len as u64,
            max: self.max_frame_size,
        })
    }

    /// A whole frame whose bulk segments the peer lent (see the `lent` module). Out of
    /// line: the path of small frames stays as short as it was (a lent payload is at
    /// least a kilobyte, and usually much more).
    #[cold]
    #[inline(never)]
    fn take_lent(&mut self, record: Bytes) -> Result<Received, RecvError> {
        let (frame, external) = lent::decode(&record, &self.loans).map_err(ring_error)?;
        // The frame's size is its own bytes and the segments lent for it: lengths fixed
        // when the record was taken. Not the frame's length field, which the peer can
        // still rewrite when the frame is read in place: the decoder reads that field
        // again and refuses a frame whose field and size differ, so a frame this check
        // passes cannot be decoded as a larger one.
        let size = external.iter().fold(frame.len(), |size, (_, bytes)| {
            size.saturating_add(bytes.len())
        });
        if size > self.max_frame_size as usize {
            return Err(self.too_large(size));
        }
        self.shared = Some(SharedFrame {
            frame,
            segments: external,
        });
        Ok(Received::Shared)
    }

    /// A whole frame read in place, which the peer can still write: announced like a lent
    /// one (with no segment lent), so that the runtime decodes it as memory the peer
    /// writes ([`lanner_proto::in_place::decode`]).
    fn take_in_place(&mut self, frame: Bytes) -> Received {
        self.shared = Some(SharedFrame {
            frame,
            segments: ExternalSegments::new(),
        });
        Received::Shared
    }

    /// Takes one record: a whole frame (or a record lending payloads, which the caller
    /// tells apart), or a piece of one.
    fn take(&mut self, record: Record) -> Result<Option<Bytes>, RecvError> {
        let limit = self.max_frame_size as usize;
        let Some(message) = &mut self.assembling else {
            if !record.more {
                if record.bytes.len() > limit {
                    return Err(self.too_large(record.bytes.len()));
                }
                return Ok(Some(record.bytes));
            }
            // The first piece starts with the frame header, whose first word is the
            // frame's total length: make room for all of it once (if it is allowed). The
            // piece itself counts too: one larger than the limit (a ring's worth, while
            // the limit is a handshake's few kilobytes) must not be kept until more comes.
            let announced = record
                .bytes
                .first_chunk::<4>()
                .map_or(0, |len| u32::from_le_bytes(*len) as usize);
            if announced.max(record.bytes.len()) > limit {
                return Err(self.too_large(announced.max(record.bytes.len())));
            }
            let mut message = BytesMut::with_capacity(announced.max(record.bytes.len()));
            message.extend_from_slice(&record.bytes);
            self.assembling = Some(message);
            return Ok(None);
        };
        let len = message.len() + record.bytes.len();
        if len > limit {
            return Err(self.too_large(len));
        }
        message.extend_from_slice(&record.bytes);
        if record.more {
            return Ok(None);
        }
        Ok(self.assembling.take().map(BytesMut::freeze))
    }

    /// The peer has gone: what it published before going is still delivered.
    fn closed(&mut self) -> Result<Received, RecvError> {
        if let Some(received) = self.receive()? {
            return Ok(received);
        }
        match &self.assembling {
            None => Ok(Received::Closed),
            Some(message) => Err(RecvError::Io(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the peer closed the connection in the middle of a frame ({} bytes of it received)",
                    message.len()
                ),
            ))),
        }
    }

    /// Takes records until a frame is complete or the ring is empty, or half a ring's worth
    /// of fragments has been taken without completing one (then reports partial progress:
    /// the caller comes back, but a peer streaming tiny fragments cannot keep this thread
    /// here until the frame's size limit is reached; an honest peer's pieces are a
    /// quarter ring each, see `ShmSink`).
    #[inline]
    fn receive(&mut self) -> Result<Option<Received>, RecvError> {
        let mut progress = false;
        let mut taken = 0usize;
        while let Some(record) = self.consumer.try_recv().map_err(ring_error)? {
            progress = true;
            taken += lanner_shm::ring::record_size(record.bytes.len());
            // A frame put back together from pieces is a copy, even if its last piece was not.
            let in_place = record.in_place && self.assembling.is_none();
            if let Some(frame) = self.take(record)? {
                if lent::is_lent(&frame) {
                    return self.take_lent(frame).map(Some);
                }
                if in_place {
                    return Ok(Some(self.take_in_place(frame)));
                }
                return Ok(Some(Received::Frame(frame)));
            }
            if taken >= self.consumer.capacity() / 2 {
                break;
            }
        }
        Ok(progress.then_some(Received::Partial))
    }
}

impl Drop for ShmSource {
    fn drop(&mut self) {
        // The connection is over on this side: let the peer's halves know now, not when
        // the last received payload (which keeps a doorbell alive) is dropped.
        for doorbell in &self.doorbells {
            doorbell.hang_up();
        }
    }
}

impl FrameSource for ShmSource {
    fn try_recv(&mut self) -> Result<Received, RecvError> {
        if let Some(received) = self.receive()? {
            self.empty_polls = 0;
            return Ok(received);
        }
        self.empty_polls = self.empty_polls.wrapping_add(1);
        if self.empty_polls % CHECK_PEER_EVERY == 0 {
            match self.waiter.check() {
                Ok(()) => {}
                Err(Ended::PeerGone) => return self.closed(),
                Err(Ended::Failed(error)) => return Err(RecvError::Io(error)),
            }
        }
        Ok(Received::Empty)
    }

    fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Result<Received, RecvError>> {
        loop {
            if let Some(received) = self.receive()? {
                return Poll::Ready(Ok(received));
            }
            if !self.consumer.prepare_sleep() {
                continue;
            }
            match self.waiter.poll_rung(cx) {
                Poll::Ready(Ok(())) => continue,
                Poll::Ready(Err(Ended::PeerGone)) => return Poll::Ready(self.closed()),
                Poll::Ready(Err(Ended::Failed(error))) => {
                    return Poll::Ready(Err(RecvError::Io(error)));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }

    /// One store publishes a whole batch: a receiver may answer a shallow pipeline in
    /// smaller batches.
    fn batches_cheaply(&self) -> bool {
        true
    }

    /// Records known to be published (the rest of a batch, or, while records come back to
    /// back, the next one found in place; see `Consumer::has_known_records`): usually a
    /// whole frame (a piece of a large one at worst, which the next receive takes as
    /// partial progress).
    fn frame_ready(&self) -> bool {
        self.consumer.has_known_records()
    }

    fn arrival_hint(&self) -> Option<Box<dyn crate::transport::ArrivalHint>> {
        Some(Box::new(self.consumer.arrival_hint()))
    }

    fn set_max_frame_size(&mut self, max_frame_size: u32) {
        self.max_frame_size = max_frame_size;
    }

    fn peer_authenticated(&mut self) {
        if let Some((populator, peer)) = self.populate_when_authenticated.take() {
            super::setup::populate_in_background(populator, &peer);
        }
    }

    fn take_shared(&mut self) -> Option<SharedFrame> {
        self.shared.take()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use lanner_shm::Wake;
    use lanner_shm::loans::heap_loans;
    use lanner_shm::ring::heap_ring;
    use lanner_shm::ring::record_size;

    struct Nobody;

    impl Wake for Nobody {
        fn wake(&self) {}
    }

    fn doorbell() -> Arc<Doorbell> {
        let (ours, _theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        Arc::new(Doorbell::new(ours.into()))
    }

    /// The peer's ends of a test source's doorbell and loan area (kept while it is used).
    type PeerEnds = (std::os::unix::net::UnixStream, lanner_shm::loans::LoanArea);

    /// A source reading a heap ring of `capacity` bytes, the ring's producer, and the
    /// peer's ends.
    fn source(capacity: usize) -> (ShmSource, lanner_shm::ring::Producer, PeerEnds) {
        let (producer, consumer) = heap_ring(capacity, Arc::new(Nobody), Arc::new(Nobody), 64);
        let (waiter_end, peer) = std::os::unix::net::UnixStream::pair().unwrap();
        let (area, loans) = heap_loans(64 * 1024);
        let source = ShmSource::new(
            consumer,
            Waiter::new(waiter_end.into()).unwrap(),
            [doorbell(), doorbell()],
            loans,
            None,
        );
        (source, producer, (peer, area))
    }

    #[tokio::test]
    async fn a_shared_memory_source_says_its_batches_are_cheap() {
        let (source, _producer, _peer) = source(4096);
        assert!(source.batches_cheaply());
    }

    #[tokio::test]
    async fn a_first_piece_larger_than_the_limit_is_refused_whatever_it_announces() {
        let (mut source, mut producer, _peer) = source(64 * 1024);
        source.set_max_frame_size(4096);
        // A piece of 16 KiB whose frame header claims 64 bytes in all.
        let mut piece = vec![0u8; 16 * 1024];
        piece[..4].copy_from_slice(&64u32.to_le_bytes());
        let mut reservation = producer.try_reserve(piece.len()).unwrap().expect("room");
        reservation.write(0, &piece);
        reservation.commit(true);
        match source.try_recv() {
            Err(RecvError::Frame(FrameError::TooLarge { len, max })) => {
                assert_eq!((len, max), (16 * 1024, 4096));
            }
            _ => panic!("a piece over the limit was taken"),
        }
        assert!(source.assembling.is_none(), "nothing is kept of it");
    }

    #[tokio::test]
    async fn a_stream_of_tiny_fragments_is_taken_half_a_ring_at_a_time() {
        const CAPACITY: usize = 4096;
        let (mut source, mut producer, _peer) = source(CAPACITY);
        source.set_max_frame_size(1 << 20);
        // The first piece announces a frame far larger than all the pieces that follow.
        let mut first = [0u8; 8];
        first[..4].copy_from_slice(&(1u32 << 20).to_le_bytes());
        let mut pieces = 0;
        // All in one batch, as a sink sends them: the receiver then knows they wait.
        let mut send = |bytes: &[u8]| {
            let mut reservation = producer.try_reserve(bytes.len()).unwrap().expect("room");
            reservation.write(0, bytes);
            reservation.commit_unpublished(true);
        };
        send(&first);
        // Three quarters of the ring in one-byte pieces (a line of ring each).
        while (pieces + 2) * record_size(1) <= CAPACITY * 3 / 4 {
            send(&[7]);
            pieces += 1;
        }
        producer.publish_pending();
        assert!(matches!(source.try_recv(), Ok(Received::Partial)));
        assert!(
            source.frame_ready(),
            "the receive stopped after half a ring, with pieces still published"
        );
        assert!(matches!(source.try_recv(), Ok(Received::Partial)));
        assert!(
            !source.frame_ready(),
            "the rest was taken by the next receive"
        );
        assert_eq!(
            source.assembling.as_ref().map(BytesMut::len),
            Some(8 + pieces)
        );
    }
}
