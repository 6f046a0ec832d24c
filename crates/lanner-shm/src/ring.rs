//! A single-producer/single-consumer ring of variable-size records.
//!
//! Positions (the producer's tail, `head`) count bytes ever written and released, so they
//! only grow; a position's place in the data area is `position % capacity`. A record is an
//! 8-byte header (`len: u32`, `flags: u32`, little-endian: one `u64` word, accessed only
//! atomically) followed by `len` payload bytes, padded to a whole number of cache lines
//! ([`RECORD_ALIGN`]), so that every record starts on a line of its own. Records never
//! wrap: when one does not fit before the end of the data area, the producer publishes a
//! padding record that fills the rest, and the record starts at offset 0. Padding is
//! therefore never at offset 0 (a record always fits in a whole ring), and a fragment
//! (`FLAG_MORE`) carries at least one byte: the consumer refuses either, as it refuses a
//! record that ends more than a ring ahead of the `head` it last stored, so that no
//! sequence of records can keep it taking records that lead nowhere.
//!
//! **The header is the arrival flag.** There is no shared `tail`: the consumer polls the
//! header word where the next record will start, and a nonzero word (every header sets
//! `FLAG_WRITTEN`) is a record. A shared `tail` cost each message three cache-line
//! transfers: the producer's store of `tail` took its line from the polling consumer, the
//! consumer's next poll fetched it back, and the consumer then fetched the record's line.
//! Polling the record's own line saves the last (see `docs/decisions.md`, "Thirty-first
//! session"). Two rules make a header's word mean "published" and nothing else:
//!
//! - **Zero ahead.** Before the producer writes a record's header, the header word where
//!   the next record will start (the line after the record, offset 0 after a padding
//!   record) holds zero, stored by the producer. A consumer that acquired a record's
//!   header therefore finds, where it looks next, that zero or a header written after
//!   it: never a header of an earlier lap or payload bytes. That line must be free, so
//!   the producer keeps one line ([`SLACK`]) past its records unused: a record needs its
//!   size and a line of room. The data area starts zeroed, so the first record's place
//!   reads zero too. The producer zeroes the header words of the free lines ahead of it
//!   a kilobyte at a time (`ZERO_AHEAD`), not one line per record: a zero stored just
//!   before a header went to a line the polling consumer often held as well (the
//!   processor fetches lines in pairs and streams ahead of sequential reads), and the
//!   header's store, which cannot become visible before an earlier store, waited for
//!   that line to be taken back from the consumer's cache. That was one more transfer
//!   between cores each way: the raw null round trip took 0.58 µs instead of 0.46 on
//!   the measuring host (see `docs/decisions.md`, "Thirty-fourth session"). A
//!   reservation spanning several lines may write payload over zeroed words; if it is
//!   given up, those lines are zeroed again before the next header.
//! - **Withheld until published.** Records committed unpublished (a batch) must stay
//!   invisible: the producer keeps the header of the first of them back and stores it
//!   at publication (release), while it writes the others' headers at once. The consumer
//!   cannot pass the first, so one store publishes the batch. That header also says how
//!   many records follow it in the batch (its flags' upper half), so the consumer knows
//!   that more are waiting without reading their lines
//!   ([`Consumer::has_known_records`]): a peek at the next record's line cost the null
//!   call 0.2 µs, fetching a line the producer was about to write.
//!
//! A record may start its payload with a prefix (`FLAG_PREFIXED`): its first byte says how
//! many bytes (at least one, at most the payload) come before the message, which then
//! starts there. The producer uses it to place a byte of the message (a large payload's
//! first byte) where its source lies modulo [`ALIGNMENT`]
//! ([`Producer::try_reserve_aligned`]): a copy runs faster when its source and
//! destination agree modulo a cache line.
//!
//! The producer publishes by storing a header (release); the consumer releases space by
//! storing `head`. A side about to sleep sets its flag with a swap, then re-checks the
//! ring; the other side, after publishing or releasing, always clears the flag with a swap
//! and rings the doorbell only if it was set. Both are read-modify-writes of the same
//! word, so one comes first in its modification order: if the waker's swap comes first,
//! the sleeper's swap reads from it (acquire/release) and its re-check sees the new
//! header or `head`; otherwise the waker sees the flag and rings. No wake-up is lost (the
//! loom tests check it), and a doorbell costs a system call only when the peer really
//! sleeps.
//!
//! The consumer stores `head` lazily: space of records it consumed and released at once is
//! given back when at least a quarter of the ring has accumulated (`LAZY_RELEASE`), not
//! per record, so a stream of small messages costs no store to the producer's line and no
//! read-modify-write of the `waiting` flag per message. A record takes at most the other
//! three quarters ([`Producer::max_record_len`]), which is what keeps this from stranding
//! a waiting producer: a producer that finds no room for a record sees more than a
//! quarter of the ring in use, so either that much is still unconsumed (and consuming it
//! crosses the threshold, storing `head` and ringing), or it is held in place (and
//! releasing it stores `head` at once).
//!
//! Received records are either copied out (small ones, released at once) or handed out in
//! place as a [`Bytes`] that keeps the record's space reserved until dropped; `head` then
//! advances over the oldest records as soon as all of them are released. A held in-place
//! record therefore holds back the ring behind it: receivers that keep payloads for long
//! should copy them.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use crate::memory::{HeaderWatch, InPlace, RingMemory, reserved_slice};
use crate::sync::{Arc, AtomicU64, AtomicUsize, Mutex, Ordering};

/// Something that wakes a sleeping party. The rings call it only when the party said it
/// is asleep, so a call is rare on a busy connection.
pub trait Wake: Send + Sync {
    /// Wakes the party. Must not block.
    fn wake(&self);
}

/// Size of a record header.
pub const RECORD_HEADER: usize = 8;

/// What every record's size is a multiple of: a cache line. A small message then takes
/// one line of its own, which the producer writes whole before the consumer reads it.
/// Records packed at 8 bytes made most of Lanner's 40–56-byte frames straddle two lines,
/// the first of them shared with the record before: the consumer, which had read that
/// line for the previous record, lost it to the producer's write and fetched it again,
/// and the producer had to take it back from the consumer first. That was one more
/// cache-line transfer each way per message, 0.1–0.2 µs of a null call's round trip
/// between cores (see `docs/decisions.md`, "Thirtieth session").
pub const RECORD_ALIGN: usize = ALIGNMENT;
const FLAG_PADDING: u32 = 1;
const FLAG_MORE: u32 = 2;
const FLAG_PREFIXED: u32 = 4;
/// Set in every header, so that a header word is never zero: zero is "nothing published
/// here yet".
const FLAG_WRITTEN: u32 = 8;
const KNOWN_FLAGS: u32 = FLAG_PADDING | FLAG_MORE | FLAG_PREFIXED | FLAG_WRITTEN;
/// Where the flags' upper half starts: the number of records published with this one
/// after it (see the module docs), at most `u16::MAX`.
const FOLLOWING_SHIFT: u32 = 16;

/// Room the producer keeps free past its last record: the line whose zero header word
/// says "nothing here yet" (see the module docs).
pub const SLACK: usize = RECORD_ALIGN;

/// What [`Producer::try_reserve_aligned`] aligns to: a cache line.
pub const ALIGNMENT: usize = 64;

/// The peer broke the ring protocol.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("shared-memory ring corrupted by the peer: {0}")]
pub struct RingError(pub &'static str);

/// Space a record of `len` payload bytes takes in the ring: whole cache lines (see
/// [`RECORD_ALIGN`]).
pub const fn record_size(len: usize) -> usize {
    (RECORD_HEADER + len).next_multiple_of(RECORD_ALIGN)
}

/// A header's word: `len` in the low half, `flags` (with [`FLAG_WRITTEN`]) in the high
/// half. Stored as a little-endian `u64` in shared memory, that is `len` then `flags`,
/// each little-endian.
fn header_word(len: u32, flags: u32) -> u64 {
    u64::from(len) | u64::from(flags | FLAG_WRITTEN) << 32
}

/// A header word's `len`, `flags` and the count of records published after it with it.
fn split_header(word: u64) -> (u32, u32, u32) {
    let high = (word >> 32) as u32;
    let flags = high & ((1 << FOLLOWING_SHIFT) - 1);
    (word as u32, flags, high >> FOLLOWING_SHIFT)
}

/// The writing end of a ring.
pub struct Producer {
    memory: Arc<RingMemory>,
    /// Where the next record goes: the end of the last one committed (published or not).
    tail: u64,
    /// The last `head` read and validated.
    head: u64,
    /// The position up to which records are published; below `tail` while records
    /// committed with [`Reservation::commit_unpublished`] wait for
    /// [`Producer::publish_pending`].
    published: u64,
    /// The header of the record at `published` while it waits to be published: stored
    /// only at publication (see the module docs).
    withheld: u64,
    /// Records (padding included) committed since the last publication.
    unpublished: u32,
    /// The header word of every line from the tail up to here (exclusive) is zero: the
    /// producer zeroed them and has written nothing there since (see
    /// [`Producer::zero_ahead`]).
    zeroed_to: u64,
    wake_consumer: Arc<dyn Wake>,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("tail", &self.tail)
            .field("head", &self.head)
            .finish_non_exhaustive()
    }
}

impl Producer {
    pub(crate) fn new(memory: Arc<RingMemory>, wake_consumer: Arc<dyn Wake>) -> Producer {
        Producer {
            memory,
            tail: 0,
            head: 0,
            published: 0,
            withheld: 0,
            unpublished: 0,
            zeroed_to: 0,
            wake_consumer,
        }
    }

    /// Bytes in the ring's data area.
    pub fn capacity(&self) -> usize {
        self.memory.capacity()
    }

    /// The largest record payload the ring takes: the whole lines of three quarters of
    /// it, less the line kept free after the record ([`SLACK`]) and the header (the
    /// consumer may keep up to a quarter unreleased; see the module docs).
    pub fn max_record_len(&self) -> usize {
        let lines = self.capacity() - lazy_release(self.capacity() as u64) as usize;
        (lines / RECORD_ALIGN * RECORD_ALIGN - SLACK - RECORD_HEADER).min(u32::MAX as usize)
    }

    fn capacity_u64(&self) -> u64 {
        self.capacity() as u64
    }

    /// Re-reads `head`. A value past what we published (the consumer cannot have released
    /// records it never saw: believing it would let us overwrite records committed but
    /// not yet published), more than a ring behind our tail, or misaligned is a protocol
    /// violation.
    fn refresh_head(&mut self) -> Result<(), RingError> {
        let head = self.memory.head().load(Ordering::Acquire);
        if head > self.published
            || self.tail - head > self.capacity_u64()
            || head % RECORD_ALIGN as u64 != 0
        {
            return Err(RingError("the consumer's position is out of range"));
        }
        // A stale or lying head that goes backwards only shrinks our free space.
        self.head = self.head.max(head);
        Ok(())
    }

    /// Room for records: the space not in use, less the line kept free past them.
    fn free(&self) -> u64 {
        self.capacity_u64() - SLACK as u64 - (self.tail - self.head)
    }

    /// Reserves room for a record of `len` payload bytes (at most
    /// [`Producer::max_record_len`]). `Ok(None)` if the ring has no room now: call
    /// [`Producer::prepare_wait`] and wait for the peer's doorbell.
    #[inline]
    pub fn try_reserve(&mut self, len: usize) -> Result<Option<Reservation<'_>>, RingError> {
        assert!(
            len <= self.max_record_len(),
            "record larger than Producer::max_record_len"
        );
        let need = record_size(len) as u64;
        let offset = self.memory.offset_of(self.tail);
        let to_end = self.capacity_u64() - offset;
        // The common case, inlined into the caller (a sender writes a record per frame):
        // the record fits before the end with room known free. Padding and a fresh look
        // at the consumer's position are out of line.
        if need <= to_end && need <= self.free() {
            return Ok(Some(self.reservation(len, need)));
        }
        self.try_reserve_slowly(len, need, to_end)
    }

    /// [`Producer::try_reserve`] when the record needs padding before it or a fresh look
    /// at the consumer's position.
    #[cold]
    #[inline(never)]
    fn try_reserve_slowly(
        &mut self,
        len: usize,
        need: u64,
        to_end: u64,
    ) -> Result<Option<Reservation<'_>>, RingError> {
        if need > to_end {
            // Fill the rest with padding first; the record starts at offset 0.
            if to_end > self.free() {
                self.refresh_head()?;
                if to_end > self.free() {
                    return Ok(None);
                }
            }
            let pad = u32::try_from(to_end - RECORD_HEADER as u64).unwrap_or(u32::MAX);
            self.put_header(header_word(pad, FLAG_PADDING), to_end);
            self.publish_pending();
        }
        if need > self.free() {
            self.refresh_head()?;
            if need > self.free() {
                return Ok(None);
            }
        }
        Ok(Some(self.reservation(len, need)))
    }

    /// Room for a record of `len` payload bytes taking `need` bytes at the tail. Its
    /// payload may overwrite the header words of the lines after the first, which are
    /// then no longer known to be zero if it is abandoned.
    #[inline]
    fn reservation(&mut self, len: usize, need: u64) -> Reservation<'_> {
        if need > RECORD_ALIGN as u64 {
            self.zeroed_to = self.zeroed_to.min(self.tail + RECORD_ALIGN as u64);
        }
        Reservation {
            producer: self,
            len,
            prefix: 0,
        }
    }

    /// Like [`Producer::try_reserve`], but the message's byte `align_at` lands at an
    /// offset of the data area equal to `residue` modulo [`ALIGNMENT`] (the data area
    /// starts on a multiple of it in a shared region, so that is the address's residue
    /// too): the record starts with a prefix of up to `ALIGNMENT - 1` bytes, which the
    /// consumer skips. `len + ALIGNMENT` must be at most [`Producer::max_record_len`].
    pub fn try_reserve_aligned(
        &mut self,
        len: usize,
        align_at: usize,
        residue: usize,
    ) -> Result<Option<Reservation<'_>>, RingError> {
        assert!(align_at <= len, "the byte to align lies in the message");
        let Some(mut reservation) = self.try_reserve(len + ALIGNMENT - 1)? else {
            return Ok(None);
        };
        let start = reservation.payload_offset();
        let at = (start + align_at) % ALIGNMENT;
        let prefix = (residue % ALIGNMENT + ALIGNMENT - at) % ALIGNMENT;
        if prefix > 0 {
            // At most 63: the first byte holds it.
            reservation.producer.memory.write(start, &[prefix as u8]);
        }
        reservation.len = len;
        reservation.prefix = prefix;
        Ok(Some(reservation))
    }

    /// Announces that this side will sleep until the consumer frees room for a record of
    /// `len` bytes. Returns false if room appeared meanwhile (do not sleep: retry).
    pub fn prepare_wait(&mut self, len: usize) -> Result<bool, RingError> {
        self.memory.waiting().swap(1, Ordering::AcqRel);
        self.refresh_head()?;
        let offset = self.memory.offset_of(self.tail);
        let to_end = self.capacity_u64() - offset;
        let need = record_size(len) as u64;
        let fits = if need > to_end {
            to_end <= self.free()
        } else {
            need <= self.free()
        };
        if fits {
            // A swap, not a store (see `Consumer::prepare_sleep`).
            self.memory.waiting().swap(0, Ordering::AcqRel);
        }
        Ok(!fits)
    }

    /// Publishes the records committed with [`Reservation::commit_unpublished`] since the
    /// last publication, all at once (one store and one wake-up check for all of them).
    pub fn publish_pending(&mut self) {
        if self.published == self.tail {
            return;
        }
        let first = self.memory.offset_of(self.published) as usize;
        let following = (self.unpublished - 1).min(u32::from(u16::MAX));
        let word = self.withheld | u64::from(following) << (32 + FOLLOWING_SHIFT);
        self.memory.header(first).store(word, Ordering::Release);
        self.published = self.tail;
        self.unpublished = 0;
        // Always a read-modify-write: see the module docs for why this cannot miss a
        // consumer going to sleep.
        if self.memory.sleeping().swap(0, Ordering::AcqRel) != 0 {
            self.wake_consumer.wake();
        }
    }

    /// Stores zero in the header word of the line at `from` (where the next record will
    /// start) and of the lines after it, [`ZERO_AHEAD`] bytes' worth, as far as the ring
    /// has room: lines the consumer released, which it does not read until a record is
    /// published there.
    #[inline(never)]
    fn zero_ahead(&mut self, from: u64) {
        // At least the line at `from`: a reservation leaves `SLACK` free past its record.
        let limit = (from + ZERO_AHEAD).min(self.head + self.capacity_u64());
        let mut at = from;
        while at < limit {
            let offset = self.memory.offset_of(at) as usize;
            self.memory.header(offset).store(0, Ordering::Relaxed);
            at += RECORD_ALIGN as u64;
        }
        // The free-space check leaves `SLACK` past every record, so the limit is past `from`.
        debug_assert!(
            at > from,
            "no room to zero the line past a record: the free-space check and the limit disagree"
        );
        self.zeroed_to = at;
    }

    /// Places the header `word` of a record of `size` bytes at the tail, and moves the tail
    /// past it: first makes sure the header word where the next record will start is
    /// zero, then stores the header or, for the first record not yet published, keeps it
    /// for [`Producer::publish_pending`] (see the module docs).
    fn put_header(&mut self, word: u64, size: u64) {
        let start = self.tail;
        let end = start + size;
        // Ordered before the header's store (release) below or at publication.
        if end >= self.zeroed_to {
            self.zero_ahead(end);
        }
        // Zeroed just now or by an earlier `zero_ahead`: the rule the whole scheme rests on.
        // Checked in this crate's own tests only: elsewhere a hostile consumer could write
        // the word.
        #[cfg(test)]
        debug_assert_eq!(
            self.memory
                .header(self.memory.offset_of(end) as usize)
                .load(Ordering::Relaxed),
            0,
            "the header word past a record is not zero"
        );
        if start == self.published {
            self.withheld = word;
        } else {
            let at = self.memory.offset_of(start) as usize;
            self.memory.header(at).store(word, Ordering::Release);
        }
        self.tail = end;
        self.unpublished = self.unpublished.saturating_add(1);
    }
}

/// Room for one record, being filled. Nothing is visible to the consumer until
/// [`Reservation::commit`]; dropping the reservation abandons it.
pub struct Reservation<'a> {
    producer: &'a mut Producer,
    /// The message's length.
    len: usize,
    /// Bytes of the payload before the message (see [`Producer::try_reserve_aligned`]).
    prefix: usize,
}

impl<'a> Reservation<'a> {
    fn payload_offset(&self) -> usize {
        self.producer.memory.offset_of(self.producer.tail) as usize + RECORD_HEADER
    }

    /// Where the message starts in the data area.
    pub(crate) fn message_offset(&self) -> usize {
        self.payload_offset() + self.prefix
    }

    /// The record's message bytes, to build the message in place. Their initial contents
    /// are unspecified.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        let offset = self.message_offset();
        // SAFETY: the reservation owns this range until it is committed or dropped, and
        // the `&mut self` borrow makes this the only view of it.
        unsafe { reserved_slice(&self.producer.memory, offset, self.len) }
    }

    /// Copies `bytes` into the message at `offset`.
    pub fn write(&mut self, offset: usize, bytes: &[u8]) {
        assert!(offset <= self.len && bytes.len() <= self.len - offset);
        let at = self.message_offset() + offset;
        self.producer.memory.write(at, bytes);
    }

    /// Publishes the record (and any committed unpublished before it). `more` marks it as
    /// a fragment: the next record continues the same message. A fragment carries at
    /// least one byte (the consumer refuses an empty one, which could make it loop).
    pub fn commit(self, more: bool) {
        let producer = self.finish(more);
        producer.publish_pending();
    }

    /// Completes the record without publishing it: the consumer sees it (with every
    /// record committed before it) at the next [`Producer::publish_pending`], or at the
    /// next [`Reservation::commit`]. For writing a batch of records with one publication.
    /// Publish before waiting for room: unpublished records cannot be consumed.
    pub fn commit_unpublished(self, more: bool) {
        self.finish(more);
    }

    /// Places the record's header (see [`Producer::put_header`]) and returns the producer.
    /// Also asks for the line [`PREFETCH_AHEAD`] bytes past the new tail in writable
    /// state: the records that follow go there.
    fn finish(self, more: bool) -> &'a mut Producer {
        assert!(
            !more || self.len > 0,
            "an empty record cannot be a fragment"
        );
        let mut flags = if more { FLAG_MORE } else { 0 };
        if self.prefix > 0 {
            flags |= FLAG_PREFIXED;
        }
        let payload = self.prefix + self.len;
        let len = u32::try_from(payload).expect("len ≤ max_record_len");
        let producer = self.producer;
        producer.put_header(header_word(len, flags), record_size(payload) as u64);
        producer
            .memory
            .prefetch_for_write((producer.tail + PREFETCH_AHEAD) as usize);
        producer
    }
}

/// A received record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// The payload: copied out, or in place in the ring.
    pub bytes: Bytes,
    /// A fragment: the next record continues the same message.
    pub more: bool,
    /// `bytes` is a view of the ring, which the producer's process can still write (not a
    /// copy): a value read from it twice may differ.
    pub in_place: bool,
}

/// How far past a record's end the producer asks for the next line to write (see
/// `RingMemory::prefetch_for_write`): far enough that the line arrives before the records
/// reach it, near enough that a small record's successors land in it (128 and 1,024 bytes
/// measured the same). Unless the ring is nearly full, the line past the tail holds
/// nothing the consumer still reads, so taking it early costs the consumer nothing; when
/// it does, the consumer's next read of it misses, and nothing else changes (a prefetch
/// writes nothing).
const PREFETCH_AHEAD: u64 = 256;

/// How far past the next record's place the producer zeroes header words at once (see
/// [`Producer::zero_ahead`]): sixteen lines, so that a ping-pong's records find their
/// successors' words zeroed fifteen times in sixteen (1, 4 and 16 KiB measured alike).
/// Under loom, two lines: enough for a record to find its successor's word zeroed
/// earlier, and few steps for the model.
#[cfg(not(loom))]
const ZERO_AHEAD: u64 = 1024;
#[cfg(loom)]
const ZERO_AHEAD: u64 = 2 * RECORD_ALIGN as u64;

/// The fraction of the ring (1/`LAZY_RELEASE`) that consumed records may occupy before the
/// consumer gives their space back: see the module docs.
const LAZY_RELEASE: u64 = 4;

/// Bytes of consumed records the consumer may keep unreleased in a ring of `capacity`.
pub(crate) fn lazy_release(capacity: u64) -> u64 {
    capacity / LAZY_RELEASE
}

/// What the consumer and the holders of in-place records share: the order in which held
/// records release their space.
struct Releases {
    memory: Arc<RingMemory>,
    wake_producer: Arc<dyn Wake>,
    /// The `head` last stored. Written only by whoever advances `head`: the consumer while
    /// nothing is held, else the holder releasing the oldest record (under `held`).
    stored_head: AtomicU64,
    /// Held records, oldest first: (end position, released).
    held: Mutex<HeldRecords>,
    /// Number of entries in `held`, readable without the lock.
    held_count: AtomicUsize,
}

struct HeldRecords {
    spans: VecDeque<(u64, bool)>,
    /// Sequence number of `spans[0]`.
    first_seq: u64,
}

impl Releases {
    /// Moves `head` to `position` and wakes a producer waiting for space.
    fn advance_head(&self, position: u64) {
        self.stored_head.store(position, Ordering::Relaxed);
        self.memory.head().store(position, Ordering::Release);
        if self.memory.waiting().swap(0, Ordering::AcqRel) != 0 {
            self.wake_producer.wake();
        }
    }

    fn lock(&self) -> crate::sync::MutexGuard<'_, HeldRecords> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The space up to `end` was consumed and is not held: release it once a quarter of
    /// the ring is waiting to be (see the module docs), or as soon as every held record
    /// before it is released.
    fn release_consumed(&self, end: u64) {
        if self.held_count.load(Ordering::Acquire) == 0 {
            // Nothing is held and only the consumer (us) adds held records.
            let stored = self.stored_head.load(Ordering::Relaxed);
            if end - stored >= lazy_release(self.memory.capacity() as u64) {
                self.advance_head(end);
            }
            return;
        }
        let mut held = self.lock();
        if held.spans.is_empty() {
            drop(held);
            self.advance_head(end);
        } else if let Some(last) = held.spans.back_mut().filter(|(_, released)| *released) {
            // Joined to the released span before it (consumed, or a held record already
            // given back, whose sequence number nobody names again): the queue grows with
            // the records held, not with every record consumed behind one.
            last.0 = end;
        } else {
            held.spans.push_back((end, true));
            self.held_count.store(held.spans.len(), Ordering::Release);
        }
    }

    /// Registers a record handed out in place; returns its sequence number.
    fn hold(&self, end: u64) -> u64 {
        let mut held = self.lock();
        held.spans.push_back((end, false));
        self.held_count.store(held.spans.len(), Ordering::Release);
        held.first_seq + held.spans.len() as u64 - 1
    }

    /// A holder dropped its record.
    fn release_held(&self, seq: u64) {
        let mut held = self.lock();
        let index = (seq - held.first_seq) as usize;
        held.spans[index].1 = true;
        let mut new_head = None;
        while let Some(&(end, true)) = held.spans.front() {
            held.spans.pop_front();
            held.first_seq += 1;
            new_head = Some(end);
        }
        if let Some(head) = new_head {
            self.advance_head(head);
        }
        self.held_count.store(held.spans.len(), Ordering::Release);
    }
}

/// Gives a held record's space back when its [`Bytes`] is dropped.
struct HeldRecord {
    releases: Arc<Releases>,
    seq: u64,
}

impl Drop for HeldRecord {
    fn drop(&mut self) {
        self.releases.release_held(self.seq);
    }
}

/// The reading end of a ring.
pub struct Consumer {
    releases: Arc<Releases>,
    /// Position of the next record: our own, never read back from shared memory.
    read: u64,
    /// Records known to be published after `read`'s predecessor: what the last batch's
    /// first header said, less those taken since (a hint, see the module docs).
    known: u32,
    /// Records taken since the ring was last found empty.
    run: u32,
    /// Whether the last run (records taken between two empty looks) was more than one:
    /// records then arrive back to back, and a look at the next one is likely to find it
    /// (see [`Consumer::has_known_records`]).
    back_to_back: bool,
    in_place_min: usize,
    /// Where records smaller than `in_place_min` are copied: each is split off it, so a
    /// small message costs no allocation (see [`Consumer::copy_out`]).
    copies: BytesMut,
    /// The position at which this consumer last found the ring empty, or [`NOT_EMPTY`]
    /// once it took a record there (see [`ArrivalHint`]).
    empty_at: Arc<AtomicU64>,
    /// What this consumer last stored in `empty_at` (it alone stores there): compared per
    /// record without loading the word the pollers read.
    empty_at_stored: u64,
}

/// What [`Consumer::empty_at`] holds while the consumer has not found the ring empty since
/// it last took a record: no position reaches it.
const NOT_EMPTY: u64 = u64::MAX;

/// Tells, without the consumer and without a read-modify-write, whether the producer has
/// published since its consumer last found the ring empty: one load of the header word
/// where the consumer found nothing. A poller checks it before taking whatever lock guards
/// the consumer. A hint: a true may find nothing new (records taken since); a false is
/// exact as of the load for an honest producer (the consumer has taken nothing since it
/// found that word zero, so the producer has not lapped it), and a hostile one can only
/// make its own connection's pollers look less often (they still receive now and then,
/// and the receive checks the header).
#[derive(Clone)]
pub struct ArrivalHint {
    /// The ring's header words, without its memory: an ended connection's hint does not
    /// keep its region (see [`HeaderWatch`]).
    headers: HeaderWatch,
    empty_at: Arc<AtomicU64>,
}

impl ArrivalHint {
    /// Whether the producer may have published something not taken yet.
    #[inline]
    pub fn maybe_arrived(&self) -> bool {
        let empty_at = self.empty_at.load(Ordering::Relaxed);
        empty_at == NOT_EMPTY || self.headers.header(empty_at).load(Ordering::Relaxed) != 0
    }
}

/// Size of the allocation small records are copied into, at least.
const COPY_ARENA: usize = 64 * 1024;

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("read", &self.read)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    pub(crate) fn new(
        memory: Arc<RingMemory>,
        wake_producer: Arc<dyn Wake>,
        in_place_min: usize,
    ) -> Consumer {
        Consumer {
            releases: Arc::new(Releases {
                memory,
                wake_producer,
                stored_head: AtomicU64::new(0),
                held: Mutex::new(HeldRecords {
                    spans: VecDeque::new(),
                    first_seq: 0,
                }),
                held_count: AtomicUsize::new(0),
            }),
            read: 0,
            known: 0,
            run: 0,
            back_to_back: false,
            in_place_min: in_place_min.max(1),
            copies: BytesMut::new(),
            empty_at: Arc::new(AtomicU64::new(0)),
            empty_at_stored: 0,
        }
    }

    /// A hint of arrivals readable without this consumer (see [`ArrivalHint`]).
    pub fn arrival_hint(&self) -> ArrivalHint {
        ArrivalHint {
            headers: self.releases.memory.header_watch(),
            empty_at: self.empty_at.clone(),
        }
    }

    /// Copies the record at `start` of `len` bytes out of the ring. Records are copied one
    /// after the other into one allocation and split off it (sharing it, like frames cut
    /// from a socket's receive buffer); once it is full, it is reused from its start if
    /// every record copied into it has been dropped, else a fresh one is taken. A
    /// `Vec` per record cost an allocation, and another when the frame was first sliced.
    fn copy_out(&mut self, start: usize, len: usize) -> Bytes {
        if self.copies.capacity() < len {
            let size = COPY_ARENA.max(len);
            if !self.copies.try_reclaim(size) {
                self.copies = BytesMut::with_capacity(size);
            }
        }
        self.releases
            .memory
            .read_append(start, len, &mut self.copies);
        self.copies.split().freeze()
    }

    fn memory(&self) -> &RingMemory {
        &self.releases.memory
    }

    /// Bytes in the ring's data area.
    pub fn capacity(&self) -> usize {
        self.memory().capacity()
    }

    fn capacity_u64(&self) -> u64 {
        self.capacity() as u64
    }

    fn set_empty_at(&mut self, position: u64) {
        self.empty_at_stored = position;
        self.empty_at.store(position, Ordering::Relaxed);
    }

    /// Position of the next record: where the fuzz driver expects the consumer to look.
    #[cfg(not(loom))]
    pub(crate) fn position(&self) -> u64 {
        self.read
    }

    /// The header word where the next record will start (zero: nothing published yet).
    fn next_header(&self) -> u64 {
        let offset = self.memory().offset_of(self.read) as usize;
        self.memory().header(offset).load(Ordering::Acquire)
    }

    /// Whether records are known to be published and not yet taken: the rest of a batch
    /// whose first record was taken (no shared memory is read), or, while records arrive
    /// back to back, a record whose header is in place (one load). The next
    /// [`Consumer::try_recv`] then returns one, or finds the ring corrupted (or, if the
    /// producer lied about its batch, nothing).
    ///
    /// The load is skipped while records come one at a time (each run between empty looks
    /// is one record, as in a ping-pong): the next record's line is then the one the
    /// producer is about to write, and loading it stalled the null call 0.1 µs a side.
    /// Records published one by one in a pipeline are found by the load; without it a
    /// receiver answered each at once instead of together (20% fewer calls per second at
    /// 8 outstanding).
    pub fn has_known_records(&self) -> bool {
        self.known > 0 || ((self.back_to_back || self.run > 1) && self.next_header() != 0)
    }

    /// Takes the next record, if one has been published.
    pub fn try_recv(&mut self) -> Result<Option<Record>, RingError> {
        loop {
            let word = self.next_header();
            if word == 0 {
                // Stored only when it moved: an idle poller does not write it each time.
                if self.empty_at_stored != self.read {
                    // The first empty look after records: a run ends.
                    self.back_to_back = self.run > 1;
                    self.run = 0;
                    self.set_empty_at(self.read);
                }
                return Ok(None);
            }
            if self.empty_at_stored == self.read {
                // Once this record is taken, the word where the ring was found empty may
                // be zeroed again (the producer's next lap): the hint must not trust it.
                self.set_empty_at(NOT_EMPTY);
            }
            let (len, flags, following) = split_header(word);
            self.known = match following {
                0 => self.known.saturating_sub(1),
                following => following,
            };
            if flags & !KNOWN_FLAGS != 0 {
                return Err(RingError("a record has unknown flags"));
            }
            if flags & FLAG_WRITTEN == 0 {
                return Err(RingError("a record header lacks its written flag"));
            }
            let offset = self.memory().offset_of(self.read) as usize;
            let to_end = self.capacity_u64() - offset as u64;
            let padding = flags & FLAG_PADDING != 0;
            let size = if padding {
                // A producer pads only when a record does not fit before the end, and
                // every record fits in a whole ring: padding at offset 0 would only make
                // this loop go round the ring again.
                if offset == 0 {
                    return Err(RingError("a padding record fills the whole ring"));
                }
                to_end
            } else {
                let size = record_size(len as usize) as u64;
                if size > to_end {
                    return Err(RingError("a record runs past the ring's end"));
                }
                size
            };
            // The producer never writes past a ring (less the line it keeps free) beyond
            // the head it read, which is at most the head we stored last (`stored_head`,
            // stored before `head`, which the producer read before it stored this header:
            // the acquire load of the header makes that store visible here). Checked
            // against our own copy, not the shared `head` the peer can rewrite. Without
            // it a peer could publish lap after lap while a record is held in place, and
            // every record consumed meanwhile would queue behind it (see
            // `Releases::release_consumed`) without bound.
            let released = self.releases.stored_head.load(Ordering::Relaxed);
            if self.read + size + SLACK as u64 - released > self.capacity_u64() {
                return Err(RingError(
                    "a record lies more than a ring ahead of the consumer",
                ));
            }
            if padding {
                self.read += to_end;
                self.releases.release_consumed(self.read);
                continue;
            }
            let (start, len) = self.skip_prefix(offset + RECORD_HEADER, len as usize, flags)?;
            let more = flags & FLAG_MORE != 0;
            if more && len == 0 {
                // It adds nothing to its message: a stream of them would keep a receiver
                // taking records without ever reaching a frame or a size limit.
                return Err(RingError("a fragment record is empty"));
            }
            self.read += size;
            self.run = self.run.saturating_add(1);
            let in_place = len >= self.in_place_min && !more;
            let bytes = if in_place {
                let seq = self.releases.hold(self.read);
                let ptr = self.memory().range_ptr(start, len);
                let release = HeldRecord {
                    releases: self.releases.clone(),
                    seq,
                };
                Bytes::from_owner(InPlace::new(ptr, len, release))
            } else {
                let copy = self.copy_out(start, len);
                self.releases.release_consumed(self.read);
                copy
            };
            return Ok(Some(Record {
                bytes,
                more,
                in_place,
            }));
        }
    }

    /// The message of the record whose payload is `len` bytes at `start`: all of it, or
    /// what follows its prefix (see the module docs), read once and checked.
    fn skip_prefix(
        &self,
        start: usize,
        len: usize,
        flags: u32,
    ) -> Result<(usize, usize), RingError> {
        if flags & FLAG_PREFIXED == 0 {
            return Ok((start, len));
        }
        if len == 0 {
            return Err(RingError("a prefixed record is empty"));
        }
        let mut prefix = [0u8; 1];
        self.memory().read(start, &mut prefix);
        let prefix = usize::from(prefix[0]);
        if prefix == 0 || prefix > len {
            return Err(RingError("a record's prefix does not fit in it"));
        }
        Ok((start + prefix, len - prefix))
    }

    /// Announces that this side will sleep until the producer publishes. Returns false if
    /// a record arrived meanwhile (do not sleep: receive it).
    pub fn prepare_sleep(&mut self) -> bool {
        self.memory().sleeping().swap(1, Ordering::AcqRel);
        if self.next_header() != 0 {
            // A swap, not a store: a plain store here could come after the producer's
            // swap in the flag's modification order without synchronizing with it, and
            // the next sleep would then miss its publication (loom found this).
            self.memory().sleeping().swap(0, Ordering::AcqRel);
            return false;
        }
        true
    }
}

#[cfg(all(test, not(loom)))]
impl Consumer {
    /// The ring's memory, for tests that play a hostile peer.
    pub(crate) fn shared(&self) -> &RingMemory {
        &self.releases.memory
    }

    /// Entries in the queue of held and released-behind-them records.
    pub(crate) fn held_entries(&self) -> usize {
        self.releases.held_count.load(Ordering::Acquire)
    }
}

/// A producer and consumer sharing one ring on the heap, for tests, benchmarks of the ring
/// itself, fuzzing and model checking.
pub fn heap_ring(
    capacity: usize,
    wake_consumer: Arc<dyn Wake>,
    wake_producer: Arc<dyn Wake>,
    in_place_min: usize,
) -> (Producer, Consumer) {
    let memory = Arc::new(RingMemory::heap(capacity));
    (
        Producer::new(memory.clone(), wake_consumer),
        Consumer::new(memory, wake_producer, in_place_min),
    )
}

/// A consumer over a heap ring whose data area holds `contents` (truncated or zero-padded
/// to `capacity`): what a hostile peer could present, headers and all. For fuzzing the
/// reader.
#[cfg(not(loom))]
pub(crate) fn hostile_consumer(capacity: usize, contents: &[u8]) -> Consumer {
    let memory = RingMemory::heap(capacity);
    let len = contents.len().min(capacity);
    memory.write(0, &contents[..len]);
    struct Nobody;
    impl Wake for Nobody {
        fn wake(&self) {}
    }
    Consumer::new(Arc::new(memory), Arc::new(Nobody), 1)
}
