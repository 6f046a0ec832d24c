//! Unit and property tests of the ring on heap memory.

mod fuzz_regressions;
mod loans;
mod ring;
mod ring_hostile;
mod ring_model;
mod ring_publish;

use std::io::{self, Read};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::ring::Wake;
use crate::ring::{Consumer, Producer, heap_ring};

/// A record header's flags, as the ring lays them out (see `ring.rs`), for tests that
/// play a hostile peer.
pub(crate) const FLAG_PADDING: u32 = 1;
pub(crate) const FLAG_MORE: u32 = 2;
pub(crate) const FLAG_PREFIXED: u32 = 4;
pub(crate) const FLAG_WRITTEN: u32 = 8;

/// A header word: `len` in the low half, `flags` (as given: add [`FLAG_WRITTEN`] for a
/// well-formed one) in the high half.
pub(crate) fn word(len: u32, flags: u32) -> u64 {
    u64::from(len) | u64::from(flags) << 32
}

/// `payload` laid out as a record: its header word (flags as given), the payload, zeros to
/// the end of its last line (the next record starts on a line of its own).
pub(crate) fn record_bytes(payload: &[u8], flags: u32) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap();
    let mut bytes = word(len, flags).to_le_bytes().to_vec();
    bytes.extend_from_slice(payload);
    bytes.resize(crate::ring::record_size(payload.len()), 0);
    bytes
}

/// `len` bytes of a pattern that `seed` varies.
pub(crate) fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

/// A doorbell that counts its rings.
#[derive(Default)]
pub(crate) struct CountingBell(AtomicUsize);

impl CountingBell {
    pub(crate) fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }
}

impl Wake for CountingBell {
    fn wake(&self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// A heap ring with counting doorbells: (producer, consumer, consumer's bell, producer's bell).
pub(crate) fn ring(
    capacity: usize,
    in_place_min: usize,
) -> (Producer, Consumer, Arc<CountingBell>, Arc<CountingBell>) {
    let consumer_bell = Arc::new(CountingBell::default());
    let producer_bell = Arc::new(CountingBell::default());
    let (producer, consumer) = heap_ring(
        capacity,
        consumer_bell.clone(),
        producer_bell.clone(),
        in_place_min,
    );
    (producer, consumer, consumer_bell, producer_bell)
}

/// Sends `payload` as one record; panics if it does not fit now.
pub(crate) fn send(producer: &mut Producer, payload: &[u8], more: bool) {
    let mut reservation = producer
        .try_reserve(payload.len())
        .expect("ring intact")
        .expect("room in the ring");
    reservation.write(0, payload);
    reservation.commit(more);
}

/// Sends `payload` into a ring whose consumer has read everything: if the record needs
/// to wrap, the padding published first must be skipped by the consumer before the record
/// fits, so let the consumer do that.
pub(crate) fn send_to_idle(
    producer: &mut Producer,
    consumer: &mut Consumer,
    payload: &[u8],
    more: bool,
) {
    if producer
        .try_reserve(payload.len())
        .expect("ring intact")
        .is_none()
    {
        assert_eq!(
            consumer.try_recv().expect("ring intact"),
            None,
            "only padding was waiting"
        );
    }
    send(producer, payload, more);
}

/// Waits (up to 5 s: another test may hold the closer thread up for a while) until
/// `peer`'s other end is closed, reading away whatever arrives; true once a read sees end
/// of file.
pub(crate) fn closed_soon(peer: &UnixStream) -> bool {
    closed_soon_within(peer, 5000)
}

/// [`closed_soon`], waiting up to `millis` milliseconds.
pub(crate) fn closed_soon_within(peer: &UnixStream, millis: u64) -> bool {
    peer.set_read_timeout(Some(Duration::from_millis(5)))
        .unwrap();
    let deadline = Instant::now() + Duration::from_millis(millis);
    loop {
        match (&*peer).read(&mut [0u8; 64]) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => return true,
            Err(e) => panic!("reading the peer: {e}"),
        }
        if Instant::now() >= deadline {
            return false;
        }
    }
}
