//! Which caller may spin for its reply at once (the private-socket path), without first
//! letting the calls its thread was about to make start.
//!
//! A caller is told apart by its waker. The connection remembers the waker of the last
//! caller that found itself alone after yielding once; that caller spins at once on its
//! next lone calls. A waker cannot tell one sequential caller from futures joined in one
//! task, which share it: remembered, each joined call that found the connection idle
//! would spin at once and run its caller's next calls to the end without its siblings
//! ever being polled (joined callers ran one after another). So the remembered caller is
//! checked again every [`RECHECK_EVERY`] calls: it yields once, its siblings (if any)
//! send their calls, and the joined calls are concurrent from then on. A truly
//! sequential caller pays one yield per [`RECHECK_EVERY`] calls.
//!
//! A spin that ends without its reply (the spin budget passed first) held the thread for
//! nothing, and when the peer is served on this very thread (a server on the same
//! current-thread runtime, as in a `#[tokio::test]`) every spin does: the reply can only
//! come once the caller yields. So a caller whose spin went unanswered is forgotten, and
//! is remembered again only after it has been found alone, after its yield, a number of
//! times that doubles with each unanswered spin in a row (up to [`RECHECK_EVERY`]); a spin
//! that started at once and got its reply starts the count over. A caller on a thread
//! its peer does not need loses a couple of yields after a slow reply; one whose peer
//! runs on its thread spins in vain ever more rarely (about ten times in its first
//! thousand calls, then about once per [`RECHECK_EVERY`]) instead of on every call.

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

/// Calls the remembered caller spins for at once before it is checked again. The check
/// costs a sequential caller one yield (on a `block_on` root, a reactor poll: a few µs).
/// Every slow call pushes the 99th percentile down the tail by a place: at one call in
/// 256 the unix null-call p99 rose by 0.5–1 µs (A/B), at one in 1024 it did not move.
/// Joined callers lose at most this many calls' worth of overlap.
pub(super) const RECHECK_EVERY: u32 = 1024;

/// The remembered lone caller (see the module docs). Plain loads and stores: a caller
/// misjudged by a race only spins or yields once when it should not have.
#[derive(Default)]
pub(super) struct LoneCaller {
    /// The data pointer of the remembered caller's waker (0: none).
    waker: AtomicUsize,
    /// Calls it spun for at once since it was last checked.
    streak: AtomicU32,
    /// Times a caller must still be found alone after its yield before it is remembered
    /// (set by a spin that went unanswered).
    held_off: AtomicU32,
    /// What the next unanswered spin sets `held_off` to (0: one).
    next_hold_off: AtomicU32,
}

impl LoneCaller {
    /// Whether `caller`, alone on the connection, may spin for its reply at once: it is
    /// the remembered caller and not due for a check. Never a waker without a data
    /// pointer (such as `Waker::noop()`), which reads as "nobody remembered".
    pub(super) fn spins_at_once(&self, caller: usize) -> bool {
        if caller == 0 || self.waker.load(Ordering::Relaxed) != caller {
            return false;
        }
        let streak = self.streak.load(Ordering::Relaxed);
        if streak + 1 >= RECHECK_EVERY {
            self.streak.store(0, Ordering::Relaxed);
            return false;
        }
        self.streak.store(streak + 1, Ordering::Relaxed);
        true
    }

    /// `caller` yielded and is still alone: it makes its calls one after another. Not
    /// remembered yet if an unanswered spin holds it off (see the module docs).
    pub(super) fn remember(&self, caller: usize) {
        let held_off = self.held_off.load(Ordering::Relaxed);
        if held_off > 0 {
            self.held_off.store(held_off - 1, Ordering::Relaxed);
            return;
        }
        self.waker.store(caller, Ordering::Relaxed);
    }

    /// `caller` spun for its reply and the spin ended without it: it is forgotten, and
    /// held off for twice as many calls as the last time in a row (see the module docs).
    pub(super) fn spun_unanswered(&self, caller: usize) {
        self.forget(caller);
        let hold_off = self.next_hold_off.load(Ordering::Relaxed).max(1);
        self.held_off.store(hold_off, Ordering::Relaxed);
        self.next_hold_off
            .store((hold_off * 2).min(RECHECK_EVERY), Ordering::Relaxed);
    }

    /// A spin that started at once got its reply: the peer does not need this thread,
    /// and the next unanswered spin holds the caller off for one call only.
    pub(super) fn spun_answered_at_once(&self) {
        if self.next_hold_off.load(Ordering::Relaxed) != 0 {
            self.next_hold_off.store(0, Ordering::Relaxed);
        }
    }

    /// `caller` has calls in flight together: it is not a sequential caller.
    pub(super) fn forget(&self, caller: usize) {
        if self.waker.load(Ordering::Relaxed) == caller {
            self.waker.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_remembered_caller_spins_at_once() {
        let lone = LoneCaller::default();
        assert!(!lone.spins_at_once(7), "nobody is remembered at first");
        lone.remember(7);
        assert!(lone.spins_at_once(7));
        assert!(!lone.spins_at_once(8));
        lone.forget(8);
        assert!(
            lone.spins_at_once(7),
            "forgetting another caller changes nothing"
        );
        lone.forget(7);
        assert!(!lone.spins_at_once(7));
    }

    #[test]
    fn a_waker_without_data_never_spins_at_once() {
        let lone = LoneCaller::default();
        assert!(!lone.spins_at_once(0));
        lone.remember(0);
        assert!(!lone.spins_at_once(0));
    }

    /// The calls a caller that yields first each time it is not remembered, and whose
    /// spins at once all go unanswered (its peer runs on its thread), spins in vain.
    fn unanswered_spins_in(calls: u32, lone: &LoneCaller) -> u32 {
        let mut unanswered = 0;
        for _ in 0..calls {
            if lone.spins_at_once(7) {
                lone.spun_unanswered(7);
                unanswered += 1;
            } else {
                // Yielded, found alone, and the reply came meanwhile.
                lone.remember(7);
            }
        }
        unanswered
    }

    #[test]
    fn unanswered_spins_hold_the_caller_off_for_ever_longer() {
        let lone = LoneCaller::default();
        lone.remember(7);
        let first = unanswered_spins_in(1000, &lone);
        assert!(
            (8..=12).contains(&first),
            "{first} unanswered spins in the first thousand calls"
        );
        let later = unanswered_spins_in(RECHECK_EVERY * 4, &lone);
        assert!(
            (3..=5).contains(&later),
            "{later} unanswered spins in {} later calls",
            RECHECK_EVERY * 4
        );
    }

    #[test]
    fn a_spin_answered_at_once_starts_the_hold_off_over() {
        let lone = LoneCaller::default();
        lone.remember(7);
        // By now an unanswered spin holds the caller off for hundreds of calls.
        assert!(unanswered_spins_in(1000, &lone) > 0);
        // The peer is fast again: once remembered, the caller's spins are answered.
        while !lone.spins_at_once(7) {
            lone.remember(7);
        }
        lone.spun_answered_at_once();
        // A single slow reply now costs one call held off, not dozens.
        lone.spun_unanswered(7);
        lone.remember(7);
        assert!(!lone.spins_at_once(7), "held off for one call");
        lone.remember(7);
        assert!(lone.spins_at_once(7), "then remembered again");
    }

    #[test]
    fn the_remembered_caller_is_checked_again_periodically() {
        let lone = LoneCaller::default();
        lone.remember(7);
        let at_once = (0..RECHECK_EVERY * 3)
            .filter(|_| lone.spins_at_once(7))
            .count();
        assert_eq!(at_once, (RECHECK_EVERY as usize - 1) * 3);
    }
}
