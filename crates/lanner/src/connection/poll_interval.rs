//! Waiting between looks at a condition nobody signals: a closing connection's writer
//! emptying, an idle connection's peer answering its GOAWAY. The first looks come soon
//! (a peer that reads lets most closes finish within one), later ones further apart, so
//! that many connections closing at once on slow or stopped readers wake their runtime
//! a few dozen times each over a linger of seconds, not hundreds.

use std::time::Duration;

/// The wait before the second look.
const FIRST: Duration = Duration::from_millis(10);

/// The longest wait between two looks.
const LONGEST: Duration = Duration::from_millis(250);

/// Waits that double from [`FIRST`] up to [`LONGEST`].
pub(super) struct PollInterval {
    next: Duration,
}

impl PollInterval {
    /// A fresh interval: its first wait is the shortest.
    pub(super) fn new() -> Self {
        PollInterval { next: FIRST }
    }

    /// The wait [`PollInterval::tick`] makes next, and lengthens the one after it.
    fn advance(&mut self) -> Duration {
        let wait = self.next;
        self.next = (self.next * 2).min(LONGEST);
        wait
    }

    /// Sleeps until the next look is due.
    pub(super) async fn tick(&mut self) {
        tokio::time::sleep(self.advance()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_up_to_the_longest() {
        let mut interval = PollInterval::new();
        let waits: Vec<u64> = (0..8)
            .map(|_| interval.advance().as_millis() as u64)
            .collect();
        assert_eq!(waits, [10, 20, 40, 80, 160, 250, 250, 250]);
    }

    #[test]
    fn a_five_second_linger_looks_a_few_dozen_times() {
        let mut interval = PollInterval::new();
        let mut waited = Duration::ZERO;
        let mut looks = 0;
        while waited < Duration::from_secs(5) {
            waited += interval.advance();
            looks += 1;
        }
        assert!(looks <= 25, "{looks} looks in 5 s");
    }
}
