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
use crate::ring::{
    ArrivalHint, Consumer, RECORD_ALIGN, RECORD_HEADER, Wake, hostile_consumer, lazy_release,
};
use crate::sync::{Arc, Ordering};

pub use loan_returns::loan_returns;

/// In-place records the driver keeps alive at once.
const MAX_HELD: usize = 6;

/// Laps of the second pass: the peer rewrites the same contents this many times.
const LAPS: usize = 4;

/// Records' alignment, as positions count it (see [`RECORD_ALIGN`]).
const ALIGN: u64 = RECORD_ALIGN as u64;

/// Calls of `try_recv` per drain of a ring of `capacity` bytes: enough for two laps of
/// one-line records. Not a property: the ring has no tail, so contents with a valid header
/// wherever the consumer looks next (a padding record leading back to offset 0, records
/// on every line) are an endless stream, as an honest producer that keeps publishing is.
/// The drain stops there, and the pass with it.
fn max_recvs(capacity: usize) -> usize {
    2 * capacity / RECORD_ALIGN
}

/// The consumer reads whatever a hostile producer writes into its ring. It never panics;
/// every record it returns lies within the ring; in-place records held at once never
/// share a byte of the ring (a lap published over a held record is refused); the arrival
/// hint
/// says "maybe" after every record taken and "no" exactly where the consumer found the
/// ring empty; `head` never goes backwards and stays aligned; and once every record is
/// dropped, `head` is less than the quarter ring it may keep unreleased
/// (`lazy_release`) behind the consumer's position.
///
/// Input layout:
///
/// - byte 0: bits 0–2 select the capacity (`256 << n`, 256 to 32768 bytes), bits 3–4
///   the in-place threshold of the second pass (1, 8, 64 or 512 bytes);
/// - the rest: the ring's data area, headers and all (truncated to the capacity; missing
///   bytes read as zero). A header is the `u64` word at the start of a line: `len`, then
///   `flags` (little-endian `u32`s), and a zero word means "nothing published here".
///
/// Two passes run over the same bytes:
///
/// 1. `hostile_consumer` over the data area as given: one drain, until `Ok(None)`, an
///    error, or the endless-stream limit (`max_recvs`);
/// 2. the driver plays a hostile producer for `LAPS` laps: each lap it zeroes the data
///    area and writes the same bytes again, starting where the consumer last found the
///    ring empty (the line whose word, once nonzero, turns the arrival hint on), and
///    wrapping at the end, so the records fall at other places in the ring lap after lap,
///    over the space of records it still holds; then it drains. It holds some in-place
///    records across laps and releases them out of order. The pass ends at the first
///    drain that does not end in `Ok(None)`.
///
/// Which records the driver holds, and in which order it releases them, is drawn from a
/// hash of the whole input.
pub fn ring_read(data: &[u8]) {
    let selector = data.first().copied().unwrap_or(0);
    let capacity = 256usize << (selector % 8);
    let in_place_min = 1usize << (3 * ((selector >> 3) % 4));
    let contents = data.get(1..).unwrap_or(&[]);
    let contents = &contents[..contents.len().min(capacity)];
    let mut holder = Holder::new(seed(data));

    // Pass 1: the hostile consumer, one drain.
    let mut consumer = hostile_consumer(capacity, contents);
    let hint = consumer.arrival_hint();
    drain(&mut consumer, &hint, None, &mut holder);
    drop(consumer);
    holder.release_all();

    // Pass 2: the same bytes, rewritten lap after lap where the consumer stopped.
    let memory = Arc::new(RingMemory::heap(capacity));
    let mut consumer = Consumer::new(memory.clone(), Arc::new(Nobody), in_place_min);
    let hint = consumer.arrival_hint();
    let ring = memory.range_ptr(0, capacity).cast_const();
    let zeros = vec![0u8; capacity];
    let mut at = 0usize;
    let mut head = 0u64;
    let mut empty = true;
    for _ in 0..LAPS {
        memory.write(0, &zeros);
        let first = contents.len().min(capacity - at);
        memory.write(at, &contents[..first]);
        memory.write(0, &contents[first..]);
        empty = drain(&mut consumer, &hint, Some(ring), &mut holder) == Drained::Empty;
        head = check_head(&memory, head);
        if !empty {
            break;
        }
        at = empty_line(&memory, &consumer, &hint);
        assert!(consumer.prepare_sleep(), "slept on a ring found empty");
        holder.release_some();
        head = check_head(&memory, head);
    }
    holder.release_all();
    head = check_head(&memory, head);
    if empty {
        // The last drain ended at `at`, every record is released: at most the quarter ring
        // consumed since the last release is still unreleased (the consumer is less than a
        // ring ahead of `head`, so the distance modulo the ring is the distance).
        let behind = (at as u64).wrapping_sub(head) % capacity as u64;
        assert!(
            behind < lazy_release(capacity as u64),
            "head {head} lags the consumer (at offset {at}) by {behind} after every record was released"
        );
    }
    drop(consumer);
}

/// A seed for the holder's choices, drawn from the whole input (FNV-1a).
fn seed(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// How a drain ended.
#[derive(Debug, PartialEq, Eq)]
enum Drained {
    /// `Ok(None)`: the ring is empty where the consumer looks.
    Empty,
    /// The ring is corrupted.
    Broken,
    /// Records kept coming (see [`max_recvs`]).
    Endless,
}

/// Receives until `Ok(None)`, an error or [`max_recvs`] calls, touching every byte
/// returned, checking each record (against the data area at `ring`, when known) and
/// handing it to `holder`.
fn drain(
    consumer: &mut Consumer,
    hint: &ArrivalHint,
    ring: Option<*const u8>,
    holder: &mut Holder,
) -> Drained {
    let capacity = consumer.capacity();
    for _ in 0..max_recvs(capacity) {
        match consumer.try_recv() {
            Ok(Some(record)) => {
                assert!(hint.maybe_arrived(), "the hint missed a record just taken");
                let bytes = record.bytes;
                assert!(
                    bytes.len() + RECORD_HEADER <= capacity,
                    "a record of {} bytes from a ring of {capacity}",
                    bytes.len()
                );
                if record.in_place {
                    check_in_place(&bytes, ring, capacity, holder);
                }
                let sum = bytes
                    .iter()
                    .fold(0u64, |sum, &b| sum.wrapping_add(u64::from(b)));
                black_box(sum);
                holder.offer(bytes, record.in_place);
            }
            Ok(None) => {
                assert!(
                    !hint.maybe_arrived(),
                    "the hint saw a record in an empty ring"
                );
                return Drained::Empty;
            }
            Err(error) => {
                black_box(error);
                return Drained::Broken;
            }
        }
    }
    Drained::Endless
}

/// An in-place record lies after a header within the data area at `ring` (when known),
/// and shares no byte with the in-place records still held: the consumer never takes a
/// record more than a ring past the space it released.
fn check_in_place(bytes: &Bytes, ring: Option<*const u8>, capacity: usize, holder: &Holder) {
    let (start, end) = (bytes.as_ptr().addr(), bytes.as_ptr().addr() + bytes.len());
    if let Some(ring) = ring {
        let ring = ring.addr();
        assert!(
            start >= ring + RECORD_HEADER && end <= ring + capacity,
            "an in-place record at {}..{} outside the ring's data area of {capacity} bytes",
            start.wrapping_sub(ring),
            end.wrapping_sub(ring)
        );
    }
    for (held, in_place) in &holder.held {
        let (held_start, held_end) = (held.as_ptr().addr(), held.as_ptr().addr() + held.len());
        assert!(
            !in_place || end <= held_start || held_end <= start,
            "an in-place record overlaps one still held"
        );
    }
}

/// After a drain that found the ring empty: the hint says nothing arrived, the word where
/// the consumer looks next is zero, and a nonzero word there turns the hint on. Returns
/// that word's offset.
fn empty_line(memory: &RingMemory, consumer: &Consumer, hint: &ArrivalHint) -> usize {
    assert!(
        !hint.maybe_arrived(),
        "the hint saw a record in an empty ring"
    );
    let offset = memory.offset_of(consumer.position()) as usize;
    let word = memory.header(offset);
    assert_eq!(
        word.load(Ordering::Relaxed),
        0,
        "the consumer found the ring empty at a record"
    );
    word.store(u64::MAX, Ordering::Relaxed);
    assert!(
        hint.maybe_arrived(),
        "the hint does not watch where the consumer looks"
    );
    word.store(0, Ordering::Relaxed);
    offset
}

/// Reads `head` and checks it against what the consumer can have released: it never goes
/// backwards and stays aligned.
fn check_head(memory: &RingMemory, previous: u64) -> u64 {
    let head = memory.head().load(Ordering::Acquire);
    assert!(head >= previous, "head went back from {previous} to {head}");
    assert_eq!(head % ALIGN, 0, "misaligned head {head}");
    head
}

/// Keeps some received records alive and drops them in an order drawn from the input.
struct Holder {
    /// The records kept, each with whether it is in place.
    held: Vec<(Bytes, bool)>,
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
    fn offer(&mut self, bytes: Bytes, in_place: bool) {
        if self.next() % 4 == 0 {
            return; // dropped here, in arrival order
        }
        if self.held.len() == MAX_HELD {
            let index = (self.next() % MAX_HELD as u64) as usize;
            drop(self.held.swap_remove(index));
        }
        self.held.push((bytes, in_place));
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
        while let Some(held) = self.held.pop() {
            drop(held);
        }
    }
}

/// The driver's doorbells: nobody sleeps.
struct Nobody;

impl Wake for Nobody {
    fn wake(&self) {}
}
