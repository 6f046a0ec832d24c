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
}

impl LoneCaller {
    /// Whether `caller`, alone on the connection, may spin for its reply at once: it is
    /// the remembered caller and not due for a check.
    pub(super) fn spins_at_once(&self, caller: usize) -> bool {
        if self.waker.load(Ordering::Relaxed) != caller {
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

    /// `caller` yielded and is still alone: it makes its calls one after another.
    pub(super) fn remember(&self, caller: usize) {
        self.waker.store(caller, Ordering::Relaxed);
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
    fn the_remembered_caller_is_checked_again_periodically() {
        let lone = LoneCaller::default();
        lone.remember(7);
        let at_once = (0..RECHECK_EVERY * 3)
            .filter(|_| lone.spins_at_once(7))
            .count();
        assert_eq!(at_once, (RECHECK_EVERY as usize - 1) * 3);
    }
}
