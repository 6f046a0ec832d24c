//! The raw memory of a loan area (see [`crate::loans`]): the only place loans touch raw
//! pointers.
//!
//! An area is a range of the shared mapping that one side (its *owner*, the sender of the
//! loans in it) allocates blocks from. The owner writes a block only while it holds it
//! exclusively (a [`crate::loans::Loan`] not yet frozen); the peer only reads blocks it was
//! lent. A hostile peer may write anywhere in the mapping at any time: like payload bytes
//! in a ring, the bytes of a block it can reach may then be garbled, nothing more.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;

/// A loan area's bytes and whatever keeps them alive.
pub(crate) struct AreaMemory {
    base: *mut u8,
    len: usize,
    _keep: Box<dyn Any + Send + Sync>,
}

// SAFETY: the memory is plain bytes kept alive by `_keep`; which side may write which
// block is decided by the loan protocol (an allocator this process owns), and concurrent
// writes by a hostile peer can only garble bytes, as for ring payloads.
unsafe impl Send for AreaMemory {}
// SAFETY: see `Send`; shared references only hand out views whose exclusivity the loan
// protocol guarantees.
unsafe impl Sync for AreaMemory {}

impl AreaMemory {
    /// An area of `len` bytes at `base`, in memory owned by `keep` (a shared mapping).
    ///
    /// # Safety
    /// `base` must be valid for reads and writes of `len` bytes for as long as `keep`
    /// lives, and used by nothing else in this process.
    pub(crate) unsafe fn in_mapping(
        base: *mut u8,
        len: usize,
        keep: Box<dyn Any + Send + Sync>,
    ) -> AreaMemory {
        AreaMemory {
            base,
            len,
            _keep: keep,
        }
    }

    /// A zeroed area on the heap, seen twice (as the owner and the receiver each map the
    /// shared one): for tests and fuzzing.
    pub(crate) fn heap_pair(len: usize) -> (AreaMemory, AreaMemory) {
        // Atomics: memory written through pointers shared by two views must be interior
        // mutable.
        let words: Arc<[AtomicU64]> = (0..len.div_ceil(8)).map(|_| AtomicU64::new(0)).collect();
        let base = words.as_ptr().cast::<u8>().cast_mut();
        let view = |keep: Arc<[AtomicU64]>| AreaMemory {
            base,
            len,
            _keep: Box::new(keep),
        };
        (view(words.clone()), view(words))
    }

    /// Bytes in the area.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Where `bytes` starts in this area, if it lies wholly inside it. Compares addresses
    /// only: nothing is read.
    pub(crate) fn offset_of(&self, bytes: &[u8]) -> Option<usize> {
        let start = (bytes.as_ptr() as usize).checked_sub(self.base as usize)?;
        (start <= self.len && bytes.len() <= self.len - start).then_some(start)
    }

    /// Whether `offset..offset + len` lies inside the area.
    pub(crate) fn contains(&self, offset: u64, len: u64) -> bool {
        offset <= self.len as u64 && len <= self.len as u64 - offset
    }

    fn ptr(&self, offset: usize, len: usize) -> *mut u8 {
        // Callers validate every peer-provided range first; this guards our own logic.
        assert!(
            self.contains(offset as u64, len as u64),
            "loan area access out of bounds"
        );
        self.base.wrapping_add(offset)
    }
}

/// The bytes of a block, to read.
///
/// # Safety
/// `offset..offset + len` must be a block this process may read for as long as the
/// returned slice lives (one it owns, or one the peer lent it and has not had back).
pub(crate) unsafe fn block(memory: &AreaMemory, offset: usize, len: usize) -> &[u8] {
    let ptr = memory.ptr(offset, len);
    // SAFETY: the range lies in the area (checked by `ptr`), lives as long as `memory`,
    // and this process does not write it meanwhile, per the caller's contract.
    unsafe { std::slice::from_raw_parts(ptr, len) }
}

/// The bytes of a block, to fill.
///
/// # Safety
/// `offset..offset + len` must be a block this process owns exclusively (allocated to one
/// loan, not lent to the peer yet), and no other view of it may exist while the returned
/// slice lives.
// The area is shared memory (like an `UnsafeCell`): exclusivity comes from the allocator.
#[allow(clippy::mut_from_ref)]
pub(crate) unsafe fn block_mut(memory: &AreaMemory, offset: usize, len: usize) -> &mut [u8] {
    let ptr = memory.ptr(offset, len);
    // SAFETY: the range lies in the area (checked by `ptr`), lives as long as `memory`,
    // and is exclusively ours per the caller's contract.
    unsafe { std::slice::from_raw_parts_mut(ptr, len) }
}
