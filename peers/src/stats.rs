//! Percentiles of latency samples (nearest rank, as `lanner bench` computes them).

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

/// `value` rounded to two decimals.
pub fn round2(value: f64) -> f64 {
    (value * 100.0).round() / 100.0
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
    fn empty_is_zero() {
        let p = percentiles(&mut []);
        assert_eq!((p.p50, p.p99), (0.0, 0.0));
    }
}
