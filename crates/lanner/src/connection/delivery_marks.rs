//! Lets a waiting call tell, without the connection's lock, that nothing was delivered
//! to it since it last looked.
//!
//! Futures joined in one task (`join!`, `try_join_all` of a few) are all polled whenever
//! the task wakes, and it wakes once per answer: with eight calls in flight, every answer
//! costs seven polls of calls whose answer is not there yet. Each used to take the state
//! lock and look its call up in the pending-call table to find nothing. Now the receiver
//! bumps a mark for each answer it stores (one of [`MARKS`] counters, picked by call id),
//! and a call whose mark has not moved since its last look, polled by the same waker it
//! registered then, returns `Pending` at once. Calls whose ids share a mark only cost each
//! other a needless look under the lock.
//!
//! Why this is enough: a call reads its mark *before* it looks under the lock; an answer
//! stored after that look bumps the mark before it wakes the call's waker, so the poll
//! that the wake causes sees the mark moved.

use std::sync::atomic::{AtomicU32, Ordering};
use std::task::Waker;

/// Counters per connection (a power of two).
const MARKS: usize = 64;

/// One counter per group of call ids, bumped when an answer for a call of the group is
/// stored or the connection fails.
pub(super) struct DeliveryMarks([AtomicU32; MARKS]);

impl DeliveryMarks {
    pub(super) fn new() -> DeliveryMarks {
        DeliveryMarks(std::array::from_fn(|_| AtomicU32::new(0)))
    }

    fn of(&self, call_id: u64) -> &AtomicU32 {
        &self.0[(call_id as usize) & (MARKS - 1)]
    }

    /// The mark of `call_id`'s group now: read before looking for its answer.
    pub(super) fn read(&self, call_id: u64) -> u32 {
        self.of(call_id).load(Ordering::Acquire)
    }

    /// An answer to `call_id` was stored: call before waking its waiter.
    pub(super) fn bump(&self, call_id: u64) {
        self.of(call_id).fetch_add(1, Ordering::Release);
    }

    /// Every outstanding call got its answer (the connection failed).
    pub(super) fn bump_all(&self) {
        for mark in &self.0 {
            mark.fetch_add(1, Ordering::Release);
        }
    }
}

/// What a waiting call saw when it last looked for its answer under the lock.
#[derive(Clone, Copy)]
pub(super) struct LastLook {
    mark: u32,
    /// The registered waker, by identity (what [`Waker::will_wake`] compares).
    waker_data: usize,
    waker_vtable: usize,
}

impl LastLook {
    /// A look that read `mark` before it registered `waker`.
    pub(super) fn new(mark: u32, waker: &Waker) -> LastLook {
        LastLook {
            mark,
            waker_data: waker.data() as usize,
            waker_vtable: std::ptr::from_ref(waker.vtable()) as usize,
        }
    }

    /// Whether looking again would find nothing new: the mark has not moved and the same
    /// waker polls (so the one registered is still the one to wake).
    pub(super) fn unchanged(&self, mark: u32, waker: &Waker) -> bool {
        self.mark == mark
            && self.waker_data == waker.data() as usize
            && self.waker_vtable == std::ptr::from_ref(waker.vtable()) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct Flag;

    impl Wake for Flag {
        fn wake(self: Arc<Self>) {}
    }

    #[test]
    fn a_look_is_stale_once_its_mark_moves_or_another_waker_polls() {
        let marks = DeliveryMarks::new();
        let waker = Waker::from(Arc::new(Flag));
        let other = Waker::from(Arc::new(Flag));
        let look = LastLook::new(marks.read(7), &waker);
        assert!(look.unchanged(marks.read(7), &waker));
        assert!(!look.unchanged(marks.read(7), &other));
        // Another group's answer leaves this group's mark alone.
        marks.bump(8);
        assert!(look.unchanged(marks.read(7), &waker));
        // A call sharing the group moves the mark: a needless look, never a missed one.
        marks.bump(7 + MARKS as u64);
        assert!(!look.unchanged(marks.read(7), &waker));
        let look = LastLook::new(marks.read(7), &waker);
        marks.bump_all();
        assert!(!look.unchanged(marks.read(7), &waker));
    }
}
