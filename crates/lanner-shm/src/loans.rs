//! Loans: payloads built in place in shared memory and passed to the peer by reference.
//!
//! Each side owns a *loan area* in the region. A sender takes a block of its area
//! ([`LoanArea::loan`]), fills it (the payload is built where the receiver will read it),
//! and freezes it into `Bytes`. When such bytes go out as a bulk segment, the transport
//! does not copy them into the ring: it *lends* them ([`LoanArea::lend`]) and sends their
//! offset, and the receiver turns the offset back into `Bytes` over the same memory
//! ([`LoanReceiver::take`]). When the receiver drops those bytes, it gives the block back
//! through a small ring of its own (the *returns* ring, one per area, written by the
//! receiver and read by the owner). A block is free again once the owner dropped its own
//! bytes and every lending of it came back: the VIA seed's registered memory, or J-RPC's
//! sender-managed areas, with the bookkeeping on the side that allocates.
//!
//! Trust: the owner keeps all of its bookkeeping in its own memory; the shared memory holds
//! only payload bytes and returned offsets. A return that names no lent block is ignored,
//! a receiver may hold at most [`MAX_LENT`] lendings at once, and a receiver checks every
//! offset against the area's bounds. A hostile peer can garble the payloads it can reach
//! or keep its lendings (the owner then copies instead of lending), nothing more.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use crate::area::{self, AreaMemory};
use crate::bitmap::Bitmap;
use crate::blocks::Blocks;
use crate::ring::{Consumer, Producer, RingError, Wake, record_size};

/// The most lendings of one area the receiver may hold at once (blocks lent and not given
/// back yet; a block lent twice counts twice). Bounds the returns ring's use.
pub const MAX_LENT: usize = 1024;

/// Bytes of each returns ring: [`MAX_LENT`] returns (one record each, a cache line: see
/// [`crate::ring::RECORD_ALIGN`]) take a quarter of it, and the owner may leave a quarter
/// unreleased. (A return that finds the ring full is lost: its block stays lent.)
pub const RETURNS_CAPACITY: usize = (4 * MAX_LENT * record_size(8)).next_power_of_two();

/// The smallest block a loan takes; larger loans take whole multiples.
const MIN_GRANULE: usize = 256;

/// Granules per area at most: the bitmap stays small (256 words) whatever the area's size.
const MAX_GRANULES: usize = 16 * 1024;

/// The owner's end of a loan area: allocates loans and lends them. Cheap to clone.
#[derive(Clone)]
pub struct LoanArea {
    lender: Arc<Lender>,
}

struct Lender {
    memory: AreaMemory,
    granule: usize,
    ledger: Mutex<Ledger>,
    returns: Mutex<Consumer>,
}

/// What the owner knows of its blocks (its own memory: the peer cannot touch it).
struct Ledger {
    used: Bitmap,
    /// Blocks allocated, by first granule.
    blocks: Blocks,
    /// Lendings not given back yet, over all blocks.
    lent: usize,
    /// Lendings made so far (those taken back with `unlend` not counted).
    lendings: u64,
    /// The peer corrupted the returns ring: nothing is lent any more (payloads are copied).
    broken: bool,
}

impl std::fmt::Debug for LoanArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoanArea")
            .field("capacity", &self.capacity())
            .finish_non_exhaustive()
    }
}

impl LoanArea {
    pub(crate) fn new(memory: AreaMemory, returns: Consumer) -> LoanArea {
        let granule = MIN_GRANULE.max(memory.len().div_ceil(MAX_GRANULES));
        let granules = memory.len() / granule;
        LoanArea {
            lender: Arc::new(Lender {
                memory,
                granule,
                ledger: Mutex::new(Ledger {
                    used: Bitmap::new(granules),
                    blocks: Blocks::new(granules),
                    lent: 0,
                    lendings: 0,
                    broken: false,
                }),
                returns: Mutex::new(returns),
            }),
        }
    }

    /// Bytes in the area: the largest loan it can make.
    pub fn capacity(&self) -> usize {
        self.lender.capacity()
    }

    /// A block of `len` bytes (at least one) to fill, if the area has room. Blocks come
    /// back once dropped here and given back by the peer; a full area makes no loan
    /// rather than wait (the caller uses ordinary memory, which the transport copies).
    pub fn loan(&self, len: usize) -> Option<Loan> {
        let lender = &self.lender;
        let first = lender.allocate(len, false)?;
        Some(Loan {
            lender: lender.clone(),
            first,
            offset: first * lender.granule,
            len,
        })
    }

    /// A block of `len` bytes lent at once (one lock): for a payload that was not built
    /// in a loan but is large enough that the receiver is better off holding a block than
    /// ring space. Returns the loan, to fill before the offset is sent, and the offset;
    /// `None` if the area has no room or the peer holds [`MAX_LENT`] lendings. The block
    /// stays this side's until the loan is dropped (a return the peer sends early cannot
    /// free it while it is being filled), and free again once it is dropped and given back
    /// (or the lending taken back with [`LoanArea::unlend`]).
    pub fn loan_lent(&self, len: usize) -> Option<(Loan, u64)> {
        let lender = &self.lender;
        let first = lender.allocate(len, true)?;
        let offset = first * lender.granule;
        let loan = Loan {
            lender: lender.clone(),
            first,
            offset,
            len,
        };
        Some((loan, offset as u64))
    }

    /// Whether `bytes` lie in this area (frozen from one of its loans). Compares addresses
    /// only.
    pub fn contains(&self, bytes: &[u8]) -> bool {
        self.lender.memory.offset_of(bytes).is_some()
    }

    /// Lends `bytes` (frozen from a loan of this area, and alive) to the peer: returns
    /// their offset in the area, to send in their place. `None` if they are not from this
    /// area, or the peer holds [`MAX_LENT`] lendings already (then send a copy). A lending
    /// that is not sent after all is taken back with [`LoanArea::unlend`].
    pub fn lend(&self, bytes: &[u8]) -> Option<u64> {
        let lender = &self.lender;
        let offset = lender.memory.offset_of(bytes)?;
        let mut ledger = lender.ledger();
        if ledger.lent >= MAX_LENT {
            lender.collect_returns(&mut ledger);
        }
        if ledger.broken || ledger.lent >= MAX_LENT {
            return None;
        }
        let first = lender.block_at(&ledger, offset as u64)?;
        let block = ledger.blocks.get_mut(first)?;
        if !block.held_here {
            return None;
        }
        block.lent += 1;
        ledger.lent += 1;
        ledger.lendings += 1;
        Some(offset as u64)
    }

    /// Takes back a lending made with [`LoanArea::lend`] or [`LoanArea::loan_lent`] that
    /// was not sent.
    pub fn unlend(&self, offset: u64) {
        let mut ledger = self.lender.ledger();
        ledger.lendings -= 1;
        self.lender.given_back(&mut ledger, offset);
    }

    /// Payloads lent so far: segments sent by reference instead of copied.
    pub fn lendings(&self) -> u64 {
        self.lender.ledger().lendings
    }

    /// Lendings the peer has not given back yet (as far as this side has read them).
    pub fn lent(&self) -> usize {
        self.lender.ledger().lent
    }

    /// Reads what the peer gave back, freeing the blocks nobody holds any more.
    pub fn collect_returns(&self) {
        let mut ledger = self.lender.ledger();
        self.lender.collect_returns(&mut ledger);
    }
}

impl Lender {
    fn ledger(&self) -> MutexGuard<'_, Ledger> {
        self.ledger.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes the area's whole granules hold: the largest block.
    fn capacity(&self) -> usize {
        self.memory.len() / self.granule * self.granule
    }

    /// Allocates a block of `len` bytes (at least one), held here (a loan) and, if
    /// `lend`, lent once already (see [`LoanArea::loan_lent`]). Its first granule, or
    /// `None` if there is no room (or, to lend, the peer holds too many lendings).
    fn allocate(&self, len: usize, lend: bool) -> Option<usize> {
        if len == 0 || len > self.capacity() {
            return None;
        }
        let granules = len.div_ceil(self.granule);
        let mut ledger = self.ledger();
        // Returns are read once half the area is taken (reading them means taking the
        // returns ring's position from the peer's cache), or when there is no room: the
        // blocks they free are low in the area, and first fit reuses them while they are
        // likely still cached. (Read only when the area was full, loans swept the whole
        // area, cold; read on every loan, they cost a cache-line transfer each.)
        if ledger.used.free() < self.capacity() / self.granule / 2
            || (lend && ledger.lent >= MAX_LENT)
        {
            self.collect_returns(&mut ledger);
        }
        if lend && (ledger.broken || ledger.lent >= MAX_LENT) {
            return None;
        }
        let first = match ledger.used.find_free_run(granules) {
            Some(first) => first,
            None => {
                self.collect_returns(&mut ledger);
                ledger.used.find_free_run(granules)?
            }
        };
        ledger.used.set(first, granules, true);
        let lent = u16::from(lend);
        ledger.blocks.insert(first, granules, true, lent);
        ledger.lent += usize::from(lent);
        ledger.lendings += u64::from(lent);
        Some(first)
    }

    /// The first granule of the allocated block that holds `offset`, if any.
    fn block_at(&self, ledger: &Ledger, offset: u64) -> Option<usize> {
        let granule = usize::try_from(offset).ok()? / self.granule;
        ledger.blocks.containing(granule)
    }

    /// Takes the returns the receiver sent: at most [`MAX_LENT`] (as many as it can
    /// owe), so that a hostile receiver that keeps publishing returns, which are ignored
    /// when they name no lent block, cannot keep this loop (and the ledger's lock) going.
    fn collect_returns(&self, ledger: &mut Ledger) {
        if ledger.broken {
            return;
        }
        let mut returns = self.returns.lock().unwrap_or_else(|e| e.into_inner());
        for _ in 0..MAX_LENT {
            match returns.try_recv() {
                Ok(Some(record)) => match record.bytes.first_chunk::<8>() {
                    Some(offset) if record.bytes.len() == 8 && !record.more => {
                        self.given_back(ledger, u64::from_le_bytes(*offset));
                    }
                    _ => {
                        ledger.broken = true;
                        return;
                    }
                },
                Ok(None) => return,
                Err(RingError(_)) => {
                    ledger.broken = true;
                    return;
                }
            }
        }
    }

    /// One lending of the block holding `offset` is over. An offset that names no lent
    /// block is ignored: only a hostile peer sends one, and it harms only itself.
    fn given_back(&self, ledger: &mut Ledger, offset: u64) {
        let Some(first) = self.block_at(ledger, offset) else {
            return;
        };
        let Some(block) = ledger.blocks.get_mut(first) else {
            return;
        };
        if block.lent == 0 {
            return;
        }
        block.lent -= 1;
        ledger.lent -= 1;
        if block.lent == 0 && !block.held_here {
            self.free(ledger, first);
        }
    }

    /// This side dropped its loan (or the last bytes frozen from it).
    fn dropped_here(&self, first: usize) {
        let mut ledger = self.ledger();
        let Some(block) = ledger.blocks.get_mut(first) else {
            return;
        };
        block.held_here = false;
        if block.lent == 0 {
            self.free(&mut ledger, first);
        }
    }

    fn free(&self, ledger: &mut Ledger, first: usize) {
        if let Some(block) = ledger.blocks.remove(first) {
            ledger.used.set(first, usize::from(block.granules), false);
        }
    }
}

/// A block of a loan area, this side's alone until dropped: fill it through
/// [`Loan::as_mut_slice`], then freeze it ([`Loan::freeze`]) to send it.
pub struct Loan {
    lender: Arc<Lender>,
    first: usize,
    offset: usize,
    len: usize,
}

impl std::fmt::Debug for Loan {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loan")
            .field("offset", &self.offset)
            .field("len", &self.len)
            .finish()
    }
}

impl Loan {
    /// The loan's bytes, to fill. (Zeroed when the area was made; a block used before
    /// holds what its last loan left there.) A loan from [`LoanArea::loan_lent`] must be
    /// filled before its offset is sent: the peer reads it from then on.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the block was allocated to this loan alone and the loan holds it (no
        // return frees a block held here); in this process it is not lent through frozen
        // bytes (freezing consumes the loan), and `&mut self` excludes other views. A
        // `loan_lent` block is lent, but the peer reads it only once the offset is sent.
        unsafe { area::block_mut(&self.lender.memory, self.offset, self.len) }
    }

    /// Bytes over the loan, to send by reference (or keep: they hold the block until the
    /// last clone is dropped and the peer gave back every lending).
    pub fn freeze(self) -> Bytes {
        Bytes::from_owner(self)
    }

    /// The loan's length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the loan is empty (never: loans are at least one byte).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl AsRef<[u8]> for Loan {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the block is this loan's while it lives; this side writes it only
        // through `as_mut_slice`, which the borrow of `self` excludes now.
        unsafe { area::block(&self.lender.memory, self.offset, self.len) }
    }
}

impl Drop for Loan {
    fn drop(&mut self) {
        self.lender.dropped_here(self.first);
    }
}

/// The receiver's end of the peer's loan area: turns lent offsets into bytes and gives
/// them back when they are dropped. Cheap to clone.
#[derive(Clone)]
pub struct LoanReceiver {
    borrower: Arc<Borrower>,
}

struct Borrower {
    memory: AreaMemory,
    returns: Mutex<Producer>,
    /// Lendings held here now.
    held: AtomicUsize,
}

impl std::fmt::Debug for LoanReceiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoanReceiver")
            .field("held", &self.held())
            .finish_non_exhaustive()
    }
}

impl LoanReceiver {
    pub(crate) fn new(memory: AreaMemory, returns: Producer) -> LoanReceiver {
        LoanReceiver {
            borrower: Arc::new(Borrower {
                memory,
                returns: Mutex::new(returns),
                held: AtomicUsize::new(0),
            }),
        }
    }

    /// The `len` bytes the peer lent at `offset` of its area, read in place; given back
    /// when the last clone is dropped. An error if they are not inside the area, or the
    /// peer lent more than [`MAX_LENT`] at once: it broke the protocol.
    pub fn take(&self, offset: u64, len: u64) -> Result<Bytes, RingError> {
        let borrower = &self.borrower;
        if !borrower.memory.contains(offset, len) {
            return Err(RingError(
                "a lent payload lies outside the peer's loan area",
            ));
        }
        if borrower.held.fetch_add(1, Ordering::AcqRel) >= MAX_LENT {
            borrower.held.fetch_sub(1, Ordering::AcqRel);
            return Err(RingError(
                "the peer lent more payloads at once than allowed",
            ));
        }
        // Both fit in usize: they lie inside the area, whose length is a usize.
        Ok(Bytes::from_owner(Borrowed {
            borrower: borrower.clone(),
            offset: offset as usize,
            len: len as usize,
        }))
    }

    /// Lendings held here now.
    pub fn held(&self) -> usize {
        self.borrower.held.load(Ordering::Acquire)
    }
}

/// Bytes the peer lent: read in place, given back on drop.
struct Borrowed {
    borrower: Arc<Borrower>,
    offset: usize,
    len: usize,
}

impl AsRef<[u8]> for Borrowed {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: the range was checked against the area when taken, the area lives as long
        // as `borrower`, and the owner does not reuse the block before it is given back
        // (a hostile owner writing it meanwhile only garbles these bytes).
        unsafe { area::block(&self.borrower.memory, self.offset, self.len) }
    }
}

impl Drop for Borrowed {
    fn drop(&mut self) {
        let borrower = &self.borrower;
        // Counted out before the return is published: an owner that reads the return
        // may lend again at once, and a `take` that still counted this lending would
        // refuse that one as one too many (and end the connection).
        borrower.held.fetch_sub(1, Ordering::AcqRel);
        let mut returns = borrower.returns.lock().unwrap_or_else(|e| e.into_inner());
        // With at most MAX_LENT lendings held, an owner that reads its returns always
        // leaves room; one that does not loses the block, which harms only itself.
        if let Ok(Some(mut reservation)) = returns.try_reserve(8) {
            reservation.write(0, &(self.offset as u64).to_le_bytes());
            reservation.commit(false);
        }
    }
}

/// Nobody sleeps on a returns ring: the owner reads it when it needs room.
pub(crate) struct NoWake;

impl Wake for NoWake {
    fn wake(&self) {}
}

/// An area and a receiver over one heap area with its returns ring: the two ends of one
/// direction's loans, for tests.
pub fn heap_loans(len: usize) -> (LoanArea, LoanReceiver) {
    let (owned, seen) = AreaMemory::heap_pair(len);
    let (returns_producer, returns_consumer) = crate::ring::heap_ring(
        RETURNS_CAPACITY,
        Arc::new(NoWake),
        Arc::new(NoWake),
        usize::MAX,
    );
    (
        LoanArea::new(owned, returns_consumer),
        LoanReceiver::new(seen, returns_producer),
    )
}
