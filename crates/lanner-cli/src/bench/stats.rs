//! Percentiles of latency samples, and rounding for reports.

use std::time::Duration;

/// Latency percentiles in microseconds.
#[derive(Debug, Clone, Copy)]
pub struct Percentiles {
    /// Median.
    pub p50: f64,
    /// 99th percentile.
    pub p99: f64,
}

/// Computes percentiles (nearest rank) of `samples`; zeros for an empty set.
pub fn percentiles(samples: &mut [Duration]) -> Percentiles {
    if samples.is_empty() {
        return Percentiles { p50: 0.0, p99: 0.0 };
    }
    samples.sort_unstable();
    let at = |q: f64| {
        let rank = ((samples.len() as f64) * q).ceil() as usize;
        samples[rank.clamp(1, samples.len()) - 1].as_secs_f64() * 1e6
    };
    Percentiles {
        p50: at(0.50),
        p99: at(0.99),
    }
}

/// `value` rounded to one decimal.
pub fn round1(value: f64) -> f64 {
    (value * 10.0).round() / 10.0
}

/// `value` rounded to two decimals.
pub fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
}

/// `lanner / raw`, rounded to two decimals (a zero `raw` counts as tiny).
pub fn ratio(lanner: f64, raw: f64) -> f64 {
    round2(lanner / raw.max(f64::MIN_POSITIVE))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let mut samples: Vec<Duration> = (1..=100).map(Duration::from_micros).collect();
        samples.reverse();
        let p = percentiles(&mut samples);
        assert_eq!(p.p50, 50.0);
        assert_eq!(p.p99, 99.0);
    }

    #[test]
    fn short_and_empty_sample_sets() {
        assert_eq!(percentiles(&mut []).p50, 0.0);
        let mut one = [Duration::from_micros(7)];
        let p = percentiles(&mut one);
        assert_eq!((p.p50, p.p99), (7.0, 7.0));
        let mut two = [Duration::from_micros(9), Duration::from_micros(3)];
        let p = percentiles(&mut two);
        assert_eq!((p.p50, p.p99), (3.0, 9.0));
        // 1000 samples: the 500th and the 990th (nearest rank), not one past.
        let mut many: Vec<Duration> = (1..=1000).rev().map(Duration::from_micros).collect();
        let p = percentiles(&mut many);
        assert_eq!((p.p50, p.p99), (500.0, 990.0));
    }

    #[test]
    fn ratios_are_lanner_over_raw() {
        assert_eq!(ratio(3.0, 2.0), 1.5);
        assert_eq!(ratio(1.0, 4.0), 0.25);
    }
}
