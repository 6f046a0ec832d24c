//! Log lines a peer can cause at will (a method that panics on what it sent, a one-way
//! call it aims at nothing, a call the access policy denies, grants it sends without end):
//! let through at most once a second per call site ([`occasionally!`]), each saying how
//! many occurred since the last one, so that a peer cannot flood the log. The
//! occurrences held back are logged at debug level.

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The interval of the log lines of things a peer can cause on every call.
pub(crate) const PER_CALL: Duration = Duration::from_secs(1);

/// A log line let through at most once per interval (see the module docs).
pub(crate) struct Occasionally {
    every: Duration,
    state: Mutex<State>,
}

struct State {
    /// Occurrences since the last one let through.
    held_back: u64,
    /// When the last one was let through.
    last: Option<Instant>,
}

impl Occasionally {
    /// At most one line per `every`.
    pub(crate) const fn every(every: Duration) -> Occasionally {
        Occasionally {
            every,
            state: Mutex::new(State {
                held_back: 0,
                last: None,
            }),
        }
    }

    /// Counts one occurrence: `Some(count)` if it is to be logged, `count` being the
    /// occurrences since the last one logged, this one included; `None` if held back.
    pub(crate) fn tick(&self) -> Option<u64> {
        self.tick_at(Instant::now())
    }

    fn tick_at(&self, now: Instant) -> Option<u64> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.held_back += 1;
        if state
            .last
            .is_some_and(|last| now.saturating_duration_since(last) < self.every)
        {
            return None;
        }
        state.last = Some(now);
        Some(std::mem::take(&mut state.held_back))
    }
}

/// Logs an event a peer can cause at will at `level` (a `tracing` macro's name), at most
/// once per [`PER_CALL`] for this call site, with `occurrences`: how many there were since
/// the last one logged, this one included. The others go to the debug level.
/// `occasionally!(error, peer = %peer, %message, "method panicked")`.
macro_rules! occasionally {
    ($level:ident, $($event:tt)*) => {{
        static LOGGED: $crate::occasional::Occasionally =
            $crate::occasional::Occasionally::every($crate::occasional::PER_CALL);
        match LOGGED.tick() {
            Some(occurrences) => ::tracing::$level!(occurrences, $($event)*),
            None => ::tracing::debug!($($event)*),
        }
    }};
}

pub(crate) use occasionally;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_per_interval_counts_those_held_back() {
        let log = Occasionally::every(Duration::from_secs(60));
        let start = Instant::now();
        assert_eq!(log.tick_at(start), Some(1));
        for second in 1..100 {
            assert_eq!(log.tick_at(start + Duration::from_secs(second) / 2), None);
        }
        // A minute later, the next one says how many there were since the last.
        assert_eq!(log.tick_at(start + Duration::from_secs(60)), Some(100));
        assert_eq!(log.tick_at(start + Duration::from_secs(61)), None);
        assert_eq!(log.tick_at(start + Duration::from_secs(121)), Some(2));
    }
}
