//! The raw memory of one ring: its control words and its data area.
//!
//! This is the only module of the ring that touches raw pointers. The control block is
//! four cache lines (so producer and consumer never write the same line), the last
//! unused:
//!
//! ```text
//! +0    head: u64       bytes ever released by the consumer
//! +64   sleeping: u32   the consumer sleeps on its doorbell (set by it, cleared by the producer)
//! +128  waiting: u32    the producer waits for space (set by it, cleared by the consumer)
//! ```
//!
//! The data area holds the records. The first word of each of its cache lines may hold a
//! record's header, which both sides access only atomically ([`RingMemory::header`]):
//! it is how the producer publishes (see `ring.rs`). Otherwise both sides only ever
//! access the data area through copies ([`RingMemory::read`], [`RingMemory::read_append`]
//! into a vector's spare capacity, [`RingMemory::write`]) or through a slice of a record
//! this side owns at the moment (a reservation being filled, a received record held in
//! place).

use std::any::Any;

use crate::sync::{Arc, AtomicU32, AtomicU64};

/// Size of a control block in bytes.
#[cfg(not(loom))]
pub(crate) const CONTROL_SIZE: usize = 256;

#[cfg(not(loom))]
struct Control {
    base: *mut u8,
}

#[cfg(not(loom))]
impl Control {
    fn word64(&self, offset: usize) -> &AtomicU64 {
        // SAFETY: `base` is 64-byte aligned with CONTROL_SIZE bytes that live as long as
        // the RingMemory (guaranteed by its constructors); offset 0 is aligned for u64;
        // both processes access this word only atomically.
        unsafe { AtomicU64::from_ptr(self.base.add(offset).cast()) }
    }

    fn word32(&self, offset: usize) -> &AtomicU32 {
        // SAFETY: as in `word64`; offsets 64 and 128 are aligned for u32.
        unsafe { AtomicU32::from_ptr(self.base.add(offset).cast()) }
    }
}

#[cfg(loom)]
struct Control {
    head: AtomicU64,
    sleeping: AtomicU32,
    waiting: AtomicU32,
}

/// One ring's control block and data area, and whatever keeps their memory alive.
pub(crate) struct RingMemory {
    control: Control,
    data: *mut u8,
    capacity: usize,
    /// Under loom, the header words live here, one per line of the data area: loom checks
    /// only its own atomics.
    #[cfg(loom)]
    headers: Box<[AtomicU64]>,
    /// Keeps the data area's addresses mapped, not its contents: what a [`HeaderWatch`]
    /// holds instead of the ring. `None` where the ring itself is the only
    /// owner of its memory (on the heap). Declared before `_keep` so that it is dropped
    /// first: the last user of a region (`_keep`) then finds the mapping shared only
    /// where hints remain, and does not replace pages that are about to be unmapped.
    anchor: Option<Arc<dyn Any + Send + Sync>>,
    _keep: Box<dyn Any + Send + Sync>,
}

/// A reader of the ring's header words alone (an arrival hint), which may outlive the
/// ring.
///
/// Holding the whole ring would keep its memory (a shared region of megabytes) for as long
/// as the watch lives. A ring in a shared region gives the watch the region's mapping
/// instead: once every user of the region's contents has let go, the region's pages are
/// given back and the addresses stay mapped to zeros (see `region::InUse`), so the watch
/// reads zero headers ("nothing published") from then on, a value it must accept anyway
/// (the peer may write any).
#[derive(Clone)]
pub(crate) struct HeaderWatch {
    /// The first line's header word; the others follow at [`HeaderWatch::STRIDE`].
    first: *const AtomicU64,
    /// The number of lines less one (a power of two less one).
    line_mask: u64,
    _anchor: Arc<dyn Any + Send + Sync>,
}

// SAFETY: the pointer is to atomic words kept mapped by `_anchor`, read only atomically.
unsafe impl Send for HeaderWatch {}
// SAFETY: as for `Send`: shared references only load the words atomically.
unsafe impl Sync for HeaderWatch {}

impl HeaderWatch {
    /// Bytes from one line's header word to the next's.
    #[cfg(not(loom))]
    const STRIDE: usize = LINE;
    #[cfg(loom)]
    const STRIDE: usize = std::mem::size_of::<AtomicU64>();

    /// The header word of the line holding ring position `position`, or zero once the
    /// ring's region is released.
    pub(crate) fn header(&self, position: u64) -> &AtomicU64 {
        let line = ((position / LINE as u64) & self.line_mask) as usize;
        // SAFETY: `line` is within the ring's lines (masked), so the word lies in the data
        // area (or the loom header array), which `_anchor` keeps mapped (the ring's
        // memory, or the region's mapping, whose pages may have been replaced by zeros:
        // still mapped, still aligned); it is only ever accessed atomically.
        unsafe { &*self.first.byte_add(line * Self::STRIDE) }
    }
}

// SAFETY: the memory is plain bytes kept alive by `_keep`; the control words are atomics,
// and the data area is accessed only under the ring protocol (each byte range is owned by
// one side at a time; a hostile peer breaking that can only garble payload bytes).
unsafe impl Send for RingMemory {}
// SAFETY: see `Send`; shared references only perform atomic operations and copies.
unsafe impl Sync for RingMemory {}

impl RingMemory {
    /// A ring in memory owned by `keep` (a shared mapping).
    ///
    /// # Safety
    /// `control` must be 64-byte aligned and valid for CONTROL_SIZE bytes, `data` 64-byte
    /// aligned and valid for `capacity` bytes, both for as long as `keep` lives, and not
    /// used by anything else in this process. `anchor` must keep `data`'s addresses mapped
    /// and readable for as long as it lives (a [`HeaderWatch`] loads header words there),
    /// and whatever it lets happen to their contents once `keep` is gone must leave them
    /// readable by atomic loads.
    #[cfg(not(loom))]
    pub(crate) unsafe fn in_mapping(
        control: *mut u8,
        data: *mut u8,
        capacity: usize,
        keep: Box<dyn Any + Send + Sync>,
        anchor: Arc<dyn Any + Send + Sync>,
    ) -> RingMemory {
        debug_assert!(capacity.is_power_of_two(), "ring capacity {capacity}");
        debug_assert!(data.addr() % LINE == 0, "ring data area misaligned");
        RingMemory {
            control: Control { base: control },
            data,
            capacity,
            _keep: keep,
            anchor: Some(anchor),
        }
    }

    /// A ring on the heap, zeroed: for tests, fuzzing and model checking.
    pub(crate) fn heap(capacity: usize) -> RingMemory {
        // A record takes at least a line, and at most three quarters of the ring less the
        // line kept free after it (see `ring.rs`).
        assert!(capacity.is_power_of_two() && capacity >= 256);
        // Cache-line aligned, as a shared region's data area is (offsets and addresses
        // then agree modulo a line, which `Producer::try_reserve_aligned` relies on).
        let mut data = vec![Line([0; 64]); capacity / 64].into_boxed_slice();
        let data_ptr = data.as_mut_ptr().cast::<u8>();
        #[cfg(not(loom))]
        {
            let mut control = vec![Line([0; 64]); CONTROL_SIZE / 64].into_boxed_slice();
            let control_ptr = control.as_mut_ptr().cast::<u8>();
            RingMemory {
                control: Control { base: control_ptr },
                data: data_ptr,
                capacity,
                _keep: Box::new((control, data)),
                anchor: None,
            }
        }
        #[cfg(loom)]
        RingMemory {
            control: Control {
                head: AtomicU64::new(0),
                sleeping: AtomicU32::new(0),
                waiting: AtomicU32::new(0),
            },
            data: data_ptr,
            capacity,
            headers: (0..capacity / LINE).map(|_| AtomicU64::new(0)).collect(),
            _keep: Box::new(data),
            anchor: None,
        }
    }

    /// Bytes in the data area.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// Where the byte at ring position `position` lives in the data area. The capacity is
    /// a power of two (checked where regions are made), so this is a mask, not a
    /// division: positions are mapped several times per message.
    pub(crate) fn offset_of(&self, position: u64) -> u64 {
        position & (self.capacity as u64 - 1)
    }

    /// The header word at data offset `offset`, which must start a cache line: where a
    /// record may start. Both sides access these words only atomically.
    #[inline]
    pub(crate) fn header(&self, offset: usize) -> &AtomicU64 {
        assert!(
            offset < self.capacity && offset % LINE == 0,
            "ring header out of bounds"
        );
        #[cfg(not(loom))]
        // SAFETY: the word lies in the data area (just checked), alive as long as `self`,
        // and is 8-byte aligned (a line's start; the data area starts on a line). Both
        // processes access a line's first word atomically whenever it may be a header;
        // payload copies touch it only while this side owns the line (see the module
        // docs), ordered by the ring protocol's release/acquire pairs.
        return unsafe { AtomicU64::from_ptr(self.data.add(offset).cast()) };
        #[cfg(loom)]
        return &self.headers[offset / LINE];
    }

    /// A watch of the ring's header words that does not keep the ring's contents (see
    /// [`HeaderWatch`]).
    pub(crate) fn header_watch(self: &Arc<Self>) -> HeaderWatch {
        HeaderWatch {
            first: std::ptr::from_ref(self.header(0)),
            line_mask: (self.capacity / LINE - 1) as u64,
            _anchor: match &self.anchor {
                Some(anchor) => anchor.clone(),
                None => self.clone(),
            },
        }
    }

    /// Bytes ever released by the consumer.
    pub(crate) fn head(&self) -> &AtomicU64 {
        #[cfg(not(loom))]
        return self.control.word64(0);
        #[cfg(loom)]
        return &self.control.head;
    }

    /// Set while the consumer sleeps waiting for records.
    pub(crate) fn sleeping(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        return self.control.word32(64);
        #[cfg(loom)]
        return &self.control.sleeping;
    }

    /// Set while the producer waits for space.
    pub(crate) fn waiting(&self) -> &AtomicU32 {
        #[cfg(not(loom))]
        return self.control.word32(128);
        #[cfg(loom)]
        return &self.control.waiting;
    }

    fn check_range(&self, offset: usize, len: usize) {
        // Callers validate every peer-provided offset first; this guards our own logic.
        assert!(
            offset <= self.capacity && len <= self.capacity - offset,
            "ring access out of bounds"
        );
    }

    /// Copies `dst.len()` bytes out of the data area at `offset`.
    pub(crate) fn read(&self, offset: usize, dst: &mut [u8]) {
        self.check_range(offset, dst.len());
        // SAFETY: the range lies in the data area (just checked), alive as long as `self`.
        unsafe { copy_from_shared(self.data.wrapping_add(offset), dst) }
    }

    /// Appends `len` bytes of the data area at `offset` to `dst`, which must have room for
    /// them: copied straight into its spare capacity, not first zeroed.
    pub(crate) fn read_append(&self, offset: usize, len: usize, dst: &mut bytes::BytesMut) {
        self.check_range(offset, len);
        let spare = dst.spare_capacity_mut();
        assert!(spare.len() >= len, "no room to copy a record out");
        // SAFETY: the source range lies in the data area (just checked), alive as long as
        // `self`; the destination is `len` bytes of `dst`'s own spare capacity (just
        // checked), distinct from the shared mapping. The copy initialises those bytes,
        // so the length may then cover them.
        unsafe {
            std::ptr::copy_nonoverlapping(
                self.data.wrapping_add(offset),
                spare.as_mut_ptr().cast::<u8>(),
                len,
            );
            dst.set_len(dst.len() + len);
        }
    }

    /// Copies `src` into the data area at `offset`.
    pub(crate) fn write(&self, offset: usize, src: &[u8]) {
        self.check_range(offset, src.len());
        // SAFETY: the range lies in the data area (just checked), alive as long as `self`;
        // callers write only ranges this side owns under the ring protocol.
        unsafe { copy_to_shared(self.data.wrapping_add(offset), src) }
    }

    /// Hints to the CPU that this side will soon write the cache line holding data byte
    /// `offset` (taken modulo the capacity): `prefetchw` on x86-64, nothing elsewhere.
    /// A record's stores into a line the consumer read a lap ago miss; queued behind
    /// them, a later load that cannot be forwarded from the store buffer (or a locked
    /// instruction) waits for them all. Owning the line before the record is written
    /// keeps those stores off the critical path (see docs/decisions.md, "Twelfth
    /// session").
    #[inline]
    pub(crate) fn prefetch_for_write(&self, offset: usize) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        {
            let line = self.data.wrapping_add(offset & (self.capacity - 1));
            // SAFETY: `line` lies in the data area (masked by the power-of-two capacity),
            // which is mapped as long as `self`. A prefetch never faults, reads nor writes
            // anything a program can observe; it only moves the line into this core's
            // cache. The instruction touches neither the stack nor the flags.
            unsafe {
                std::arch::asm!(
                    "prefetchw [{line}]",
                    line = in(reg) line,
                    options(nostack, preserves_flags, readonly)
                );
            }
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = offset;
    }

    /// The data bytes at `offset..offset + len`, for a record this side owns until the
    /// returned pointer is dropped (see [`InPlace`]).
    pub(crate) fn range_ptr(&self, offset: usize, len: usize) -> *mut u8 {
        self.check_range(offset, len);
        self.data.wrapping_add(offset)
    }
}

/// A cache line's size: records start on lines, and each line's first word may hold a
/// header.
const LINE: usize = 64;

/// One cache line of zeroes, to allocate an aligned heap control block and data area.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Line([u8; LINE]);

/// Copies `dst.len()` bytes from shared memory at `src`. The peer may write those bytes
/// concurrently; the copy then holds some mix of old and new bytes, which callers validate.
///
/// # Safety
/// `src` must be valid for reads of `dst.len()` bytes.
pub(crate) unsafe fn copy_from_shared(src: *const u8, dst: &mut [u8]) {
    // SAFETY: per the contract; `dst` is a distinct, private buffer.
    unsafe { std::ptr::copy_nonoverlapping(src, dst.as_mut_ptr(), dst.len()) }
}

/// Copies `src` into shared memory at `dst`.
///
/// # Safety
/// `dst` must be valid for writes of `src.len()` bytes that this side owns (a reservation
/// under the ring protocol, or a header the peer does not have yet).
pub(crate) unsafe fn copy_to_shared(dst: *mut u8, src: &[u8]) {
    // SAFETY: per the contract; `src` is a distinct, private buffer.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst, src.len()) }
}

/// A received record left in the ring: its bytes stay valid, and its ring space stays
/// reserved, until this is dropped.
pub(crate) struct InPlace<R: Send + Sync + 'static> {
    ptr: *const u8,
    len: usize,
    /// Releases the space on drop; also keeps the memory alive.
    _release: R,
}

// SAFETY: the pointed-to bytes are kept alive by `release` (which owns an Arc of the ring
// memory) and are never written by this process while the record is held.
unsafe impl<R: Send + Sync + 'static> Send for InPlace<R> {}

impl<R: Send + Sync + 'static> InPlace<R> {
    /// Wraps `len` bytes at `ptr` (from [`RingMemory::range_ptr`] of the memory that
    /// `release` keeps alive).
    pub(crate) fn new(ptr: *const u8, len: usize, release: R) -> Self {
        InPlace {
            ptr,
            len,
            _release: release,
        }
    }
}

impl<R: Send + Sync + 'static> AsRef<[u8]> for InPlace<R> {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `ptr` is valid for `len` bytes for as long as `release` lives (it holds
        // the ring memory and the record's space), and this process never writes them.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

/// A mutable view of a reserved range: for building a message in place.
///
/// # Safety
/// The caller must own `offset..offset + len` under the ring protocol (a reservation) and
/// hand out no other view of it while the returned slice lives.
// The ring's memory is shared (like an `UnsafeCell`): exclusivity comes from the protocol.
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn reserved_slice(memory: &RingMemory, offset: usize, len: usize) -> &mut [u8] {
    let ptr = memory.range_ptr(offset, len);
    // SAFETY: the range lies in the data area (checked by `range_ptr`), lives as long as
    // `memory`, and is exclusively ours per the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(ptr, len) }
}
