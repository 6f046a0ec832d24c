//! The fuzz drivers of what a hostile peer feeds this crate: the ring's consumer
//! ([`ring_read`](crate::fuzzing::ring_read)) and the loan area's returns
//! ([`loan_returns`](crate::fuzzing::loan_returns)). Each is shared by its fuzz target in
//! `fuzz/` and by the tests that replay what the fuzzer found: a crash input pasted into a
//! test runs exactly the code the fuzzer ran. A driver asserts the properties the fuzzer
//! checks; it panics on a violation, which is how a fuzzer reports one.

mod loan_returns;

use std::hint::black_box;

use bytes::Bytes;

use crate::memory::RingMemory;
use crate::ring::{Consumer, RECORD_ALIGN, Wake, hostile_consumer};
use crate::sync::{Arc, Ordering};

pub use loan_returns::loan_returns;

/// Calls of `try_recv` per pass over a ring: far more than the records the largest ring
/// can hold (256, a line each), so a consumer that keeps returning records without
/// advancing shows up as a violation, not as a hang.
const MAX_RECVS: usize = 10_000;

/// In-place records the driver keeps alive at once.
const MAX_HELD: usize = 6;

/// Laps of the second pass: the peer republishes the same bytes this many times.
const LAPS: usize = 4;

/// Records' alignment, as positions count it (see [`RECORD_ALIGN`]).
const ALIGN: u64 = RECORD_ALIGN as u64;

/// The consumer reads whatever a hostile producer left in its ring: it never panics, every
/// record it returns fits in the ring, and once every record is dropped its releases bring
/// `head` to the published `tail`, or less than the quarter ring it may keep unreleased
/// behind it.
///
/// Input layout:
///
/// - byte 0: bits 0–2 select the capacity (`128 << n`, 128 to 16384 bytes), bits 3–4
///   the in-place threshold of the second pass (1, 8, 64 or 512 bytes);
/// - bytes 1–8: the producer's `tail` (u64 little-endian), reduced to a multiple of
///   [`RECORD_ALIGN`] in `0..=capacity + RECORD_ALIGN` unless its top bit is set (bits
///   63–62 = `10`: reduced modulo twice the capacity, any alignment; `11`: taken as is);
/// - the rest: the ring's data area (truncated or zero-padded to the capacity).
///
/// Missing bytes read as zero. Two passes run over the same ring:
///
/// 1. a consumer over the hostile ring as given: one pass until `Ok(None)` or an error;
/// 2. the same bytes, with the driver playing the producer: it publishes `tail` more bytes
///    per lap (four laps), so the consumer wraps around, its laps starting and ending at
///    other places among the records, while the driver holds some in-place records
///    across laps (whose space a hostile producer is then overwriting) and releases them
///    out of order.
pub fn ring_read(data: &[u8]) {
    let selector = data.first().copied().unwrap_or(0);
    let capacity = 128usize << (selector % 8);
    let in_place_min = 1usize << (3 * ((selector >> 3) % 4));
    let tail_bytes = data.get(1..).unwrap_or(&[]);
    let tail_bytes = &tail_bytes[..tail_bytes.len().min(8)];
    let mut raw = [0u8; 8];
    raw[..tail_bytes.len()].copy_from_slice(tail_bytes);
    let raw = u64::from_le_bytes(raw);
    let contents = data.get(9..).unwrap_or(&[]);
    let tail = reduce_tail(raw, capacity);

    let mut holder = Holder::new(raw ^ u64::from(selector));

    // Pass 1: the public constructor, a single lap.
    let mut consumer = hostile_consumer(capacity, contents, tail);
    drain(&mut consumer, capacity, &mut holder);
    drop(consumer);
    holder.release_all();

    // Pass 2: the same bytes, republished lap after lap.
    let memory = Arc::new(RingMemory::heap(capacity));
    memory.write(0, &contents[..contents.len().min(capacity)]);
    let mut consumer = Consumer::new(memory.clone(), Arc::new(Nobody), in_place_min);
    let mut published = 0u64;
    let mut head = 0u64;
    let mut intact = true;
    for _ in 0..LAPS {
        published = published.saturating_add(tail);
        memory.tail().store(published, Ordering::Release);
        intact = drain(&mut consumer, capacity, &mut holder);
        head = check_head(&memory, head, published);
        if !intact {
            break;
        }
        // Let go of some records between laps, oldest or newest first.
        holder.release_some();
        head = check_head(&memory, head, published);
    }
    drop(consumer);
    holder.release_all();
    head = check_head(&memory, head, published);
    if intact {
        // The last call returned `Ok(None)`: everything up to `published` was consumed,
        // and every record is released now.
        assert!(
            published - head < crate::ring::lazy_release(capacity as u64),
            "head {head} lags the tail {published} after every record was released"
        );
    }
}

/// Most raw values become an aligned tail within a ring (or just past it); the rest are
/// left misaligned or far out of range.
fn reduce_tail(raw: u64, capacity: usize) -> u64 {
    let capacity = capacity as u64;
    match raw >> 62 {
        0 | 1 => (raw % (capacity / ALIGN + 2)) * ALIGN,
        2 => raw % (2 * capacity),
        _ => raw,
    }
}

/// Receives until `Ok(None)` (returns true) or an error (returns false), touching every
/// byte returned and handing in-place records to `holder`.
fn drain(consumer: &mut Consumer, capacity: usize, holder: &mut Holder) -> bool {
    for _ in 0..MAX_RECVS {
        match consumer.try_recv() {
            Ok(Some(record)) => {
                let bytes = record.bytes;
                assert!(
                    bytes.len() + crate::ring::RECORD_HEADER <= capacity,
                    "a record of {} bytes from a ring of {capacity}",
                    bytes.len()
                );
                let sum = bytes
                    .iter()
                    .fold(0u64, |sum, &b| sum.wrapping_add(u64::from(b)));
                black_box(sum);
                holder.offer(bytes);
            }
            Ok(None) => return true,
            Err(error) => {
                black_box(error);
                return false;
            }
        }
    }
    panic!("{MAX_RECVS} records from a ring of {capacity} bytes without running dry");
}

/// Reads `head` and checks it against what the consumer can have released: it never goes
/// backwards, stays aligned, and never passes the published tail.
fn check_head(memory: &RingMemory, previous: u64, published: u64) -> u64 {
    let head = memory.head().load(Ordering::Acquire);
    assert!(head >= previous, "head went back from {previous} to {head}");
    assert!(head <= published, "head {head} passed the tail {published}");
    assert_eq!(head % ALIGN, 0, "misaligned head {head}");
    head
}

/// Keeps some received records alive and drops them in an order drawn from the input.
struct Holder {
    held: Vec<Bytes>,
    state: u64,
}

impl Holder {
    fn new(seed: u64) -> Holder {
        Holder {
            held: Vec::with_capacity(MAX_HELD),
            state: seed,
        }
    }

    fn next(&mut self) -> u64 {
        // SplitMix64: deterministic, so a crash replays exactly.
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Keeps `bytes` or drops it at once; when full, first drops a random held one.
    fn offer(&mut self, bytes: Bytes) {
        if self.next() % 4 == 0 {
            return; // dropped here, in arrival order
        }
        if self.held.len() == MAX_HELD {
            let index = (self.next() % MAX_HELD as u64) as usize;
            drop(self.held.swap_remove(index));
        }
        self.held.push(bytes);
    }

    /// Drops about half the held records, from either end.
    fn release_some(&mut self) {
        for _ in 0..self.held.len() / 2 {
            if self.next() % 2 == 0 {
                drop(self.held.pop());
            } else {
                drop(self.held.remove(0));
            }
        }
    }

    /// Drops every held record, newest first.
    fn release_all(&mut self) {
        while let Some(bytes) = self.held.pop() {
            drop(bytes);
        }
    }
}

/// The driver's doorbells: nobody sleeps.
struct Nobody;

impl Wake for Nobody {
    fn wake(&self) {}
}
