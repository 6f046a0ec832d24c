//! The fuzz driver of the loan area's bookkeeping against a hostile receiver (the
//! `loan_returns` fuzz target, and the property test that runs it in CI).
//!
//! The owner of a loan area keeps its ledger in its own memory, but the receiver decides
//! what comes back through the returns ring: genuine returns, returns of blocks it was
//! never lent, returns of a lending twice, returns before the block was sent. Whatever it
//! sends, a block still held on the owner's side (a loan being filled, or bytes frozen from
//! one) must never be handed out again while it is held, and once everything is dropped
//! and given back the whole area must be free.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::loans::{Loan, LoanArea, LoanReceiver, MAX_LENT, heap_loans};

/// The area's size: 64 blocks of the smallest granule (256 bytes), so that loans collide
/// with the blocks returns free.
const AREA: usize = 16 * 1024;

/// Operations per input at most (two input bytes each).
const MAX_OPS: usize = 512;

/// Blocks held on the owner's side at once, at most.
const MAX_HELD: usize = 8;

/// Returns the driver lets pile up before it reads them: the returns ring holds several
/// times more, so no genuine return is lost to a full ring (a receiver that outruns its
/// owner loses its own returns, which the final check could not tell from a leak).
const COLLECT_EVERY: usize = 512;

/// Runs the operations `data` encodes (two bytes each: an operation, an argument) on one
/// loan area and its receiver; panics on a violated property (see the module docs).
///
/// The receiver plays both parts at once: it takes and gives back what it was sent, as an
/// honest one does, and also sends returns for any offset the input names.
pub fn loan_returns(data: &[u8]) {
    let (area, receiver) = heap_loans(AREA);
    let mut driver = Driver {
        area,
        receiver,
        held: Vec::new(),
        sent: VecDeque::new(),
        taken: VecDeque::new(),
        returns_unread: 0,
        next_fill: 1,
    };
    for step in data.chunks_exact(2).take(MAX_OPS) {
        driver.step(step[0], step[1]);
        driver.check_held();
    }
    driver.finish();
}

/// A block held on the owner's side, and the byte it was filled with.
enum Held {
    Loan(Loan, u8),
    Frozen(Bytes, u8),
}

impl Held {
    fn bytes(&self) -> (&[u8], u8) {
        match self {
            Held::Loan(loan, fill) => (loan.as_ref(), *fill),
            Held::Frozen(bytes, fill) => (bytes, *fill),
        }
    }
}

struct Driver {
    area: LoanArea,
    receiver: LoanReceiver,
    held: Vec<Held>,
    /// Lendings sent and not taken yet: offset and length.
    sent: VecDeque<(u64, u64)>,
    /// What the receiver took and holds.
    taken: VecDeque<Bytes>,
    /// Returns published since the driver last read them (an upper bound).
    returns_unread: usize,
    next_fill: u8,
}

impl Driver {
    fn step(&mut self, op: u8, arg: u8) {
        match op % 10 {
            0 => self.loan(arg, false),
            1 => self.loan(arg, true),
            2 => self.freeze(arg),
            3 => self.lend(arg),
            4 => self.take(),
            5 => self.give_back(arg),
            6 => self.hostile_return(arg),
            7 => self.drop_held(arg),
            8 => self.unlend(),
            _ => self.area.collect_returns(),
        }
        if self.returns_unread >= COLLECT_EVERY {
            self.collect();
        }
    }

    /// A loan of 1 to 4,096 bytes (`arg` picks it), filled at once with a byte of its own.
    fn loan(&mut self, arg: u8, lent: bool) {
        if self.held.len() == MAX_HELD {
            return;
        }
        let len = 1 + usize::from(arg) * 16;
        let fill = self.fill();
        if lent {
            if let Some((mut loan, offset)) = self.area.loan_lent(len) {
                loan.as_mut_slice().fill(fill);
                self.sent.push_back((offset, len as u64));
                self.held.push(Held::Loan(loan, fill));
            }
        } else if let Some(mut loan) = self.area.loan(len) {
            loan.as_mut_slice().fill(fill);
            self.held.push(Held::Loan(loan, fill));
        }
    }

    fn fill(&mut self) -> u8 {
        let fill = self.next_fill;
        self.next_fill = self.next_fill.wrapping_add(1).max(1);
        fill
    }

    fn freeze(&mut self, arg: u8) {
        let Some(index) = self.pick(arg) else { return };
        if let Held::Loan(..) = self.held[index] {
            let Held::Loan(loan, fill) = self.held.swap_remove(index) else {
                unreachable!("just matched a loan");
            };
            self.held.push(Held::Frozen(loan.freeze(), fill));
        }
    }

    /// Lends part of a frozen block (from `arg`'s offset on, at least one byte).
    fn lend(&mut self, arg: u8) {
        let Some(index) = self.pick(arg) else { return };
        let Held::Frozen(bytes, _) = &self.held[index] else {
            return;
        };
        let start = usize::from(arg) % bytes.len();
        let part = bytes.slice(start..);
        if let Some(offset) = self.area.lend(&part) {
            self.sent.push_back((offset, part.len() as u64));
        }
    }

    /// The receiver takes the oldest lending sent: it reads the owner's bytes.
    fn take(&mut self) {
        let Some((offset, len)) = self.sent.pop_front() else {
            return;
        };
        match self.receiver.take(offset, len) {
            Ok(bytes) => self.taken.push_back(bytes),
            Err(error) => panic!("an honest lending of {len} bytes at {offset} refused: {error}"),
        }
    }

    /// The receiver drops something it took: its return goes to the owner.
    fn give_back(&mut self, arg: u8) {
        if self.taken.is_empty() {
            return;
        }
        let index = usize::from(arg) % self.taken.len();
        drop(self.taken.remove(index));
        self.returns_unread += 1;
    }

    /// A return of whatever offset the input names (lent or not, given back or not).
    fn hostile_return(&mut self, arg: u8) {
        let offset = u64::from(arg) * 64;
        if let Ok(bytes) = self.receiver.take(offset, 1) {
            drop(bytes);
            self.returns_unread += 1;
        }
    }

    fn drop_held(&mut self, arg: u8) {
        if let Some(index) = self.pick(arg) {
            drop(self.held.swap_remove(index));
        }
    }

    /// The owner takes back the newest lending it did not send after all.
    fn unlend(&mut self) {
        if let Some((offset, _)) = self.sent.pop_back() {
            self.area.unlend(offset);
        }
    }

    fn pick(&self, arg: u8) -> Option<usize> {
        (!self.held.is_empty()).then(|| usize::from(arg) % self.held.len())
    }

    fn collect(&mut self) {
        // One collection reads at most `MAX_LENT` returns.
        for _ in 0..self.returns_unread.div_ceil(MAX_LENT).max(1) {
            self.area.collect_returns();
        }
        self.returns_unread = 0;
    }

    /// Every block held here still holds its own bytes: no loan was given a block while
    /// another held it.
    fn check_held(&self) {
        for held in &self.held {
            let (bytes, fill) = held.bytes();
            assert!(
                bytes.iter().all(|&b| b == fill),
                "a block held here was handed out again and overwritten"
            );
        }
    }

    /// Everything dropped, every lending given back or taken back: the whole area is free.
    fn finish(mut self) {
        while let Some((offset, _)) = self.sent.pop_back() {
            self.area.unlend(offset);
        }
        self.returns_unread += self.taken.len();
        self.taken.clear();
        self.held.clear();
        self.collect();
        assert_eq!(
            self.area.lent(),
            0,
            "lendings still counted after all came back"
        );
        assert!(
            self.area.loan(AREA).is_some(),
            "the area is not whole again after everything was dropped and given back"
        );
    }
}
