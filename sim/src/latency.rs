//! Latency distributions for the benchmarks: a histogram of fixed,
//! log-linear buckets that many tasks record into without a lock, and
//! whose counts two samples can subtract to give the quantiles of a window.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Sub-buckets per power of two: each bucket is at most 1/8 (12.5%) wide.
const SUB: usize = 8;
/// The first power of two kept apart: everything under 2^6 µs (64 µs)
/// shares the first bucket.
const FIRST_POWER: u32 = 6;
/// Powers of two covered: 64 µs to 2^(6+24) µs (about 18 minutes).
const POWERS: usize = 24;
/// Buckets in all: the one under 64 µs, then `SUB` per power.
pub const BUCKETS: usize = 1 + POWERS * SUB;

/// Counts of latencies by bucket, recorded concurrently.
pub struct Histogram {
    counts: Box<[AtomicU64]>,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

impl Histogram {
    pub fn record(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.counts[bucket(micros)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far, bucket by bucket.
    pub fn counts(&self) -> Vec<u64> {
        self.counts
            .iter()
            .map(|c| c.load(Ordering::Relaxed))
            .collect()
    }
}

/// The bucket of a latency in microseconds.
fn bucket(micros: u64) -> usize {
    if micros < 1 << FIRST_POWER {
        return 0;
    }
    let power = 63 - micros.leading_zeros();
    let index = (power - FIRST_POWER) as usize;
    if index >= POWERS {
        return BUCKETS - 1;
    }
    // The SUB steps within [2^power, 2^(power+1)).
    let sub = ((micros >> (power - 3)) & (SUB as u64 - 1)) as usize;
    1 + index * SUB + sub
}

/// The upper bound of bucket `i`, in microseconds.
fn upper_bound(i: usize) -> u64 {
    if i == 0 {
        return 1 << FIRST_POWER;
    }
    let index = (i - 1) / SUB;
    let sub = ((i - 1) % SUB) as u64;
    let power = FIRST_POWER + index as u32;
    (1u64 << power) + ((sub + 1) << (power - 3))
}

/// What one window recorded: the difference of two [`Histogram::counts`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Window {
    counts: Vec<u64>,
}

impl Window {
    /// The counts recorded between `before` and `after` (taken from the same histogram).
    pub fn between(before: &[u64], after: &[u64]) -> Window {
        let counts = after
            .iter()
            .enumerate()
            .map(|(i, a)| a.saturating_sub(before.get(i).copied().unwrap_or(0)))
            .collect();
        Window { counts }
    }

    /// Every latency in `samples`, as a window.
    pub fn of(samples: impl IntoIterator<Item = Duration>) -> Window {
        let mut counts = vec![0; BUCKETS];
        for s in samples {
            counts[bucket(u64::try_from(s.as_micros()).unwrap_or(u64::MAX))] += 1;
        }
        Window { counts }
    }

    /// The counts by bucket.
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }

    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The `q` quantile (0 < q ≤ 1): the upper bound of the bucket it falls
    /// in, so at most 12.5% above the true value; `None` for an empty window.
    pub fn quantile(&self, q: f64) -> Option<Duration> {
        let total = self.count();
        if total == 0 {
            return None;
        }
        let rank = ((q * total as f64).ceil() as u64).clamp(1, total);
        let mut seen = 0;
        for (i, c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return Some(Duration::from_micros(upper_bound(i)));
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_ordered_and_at_most_an_eighth_wide() {
        let mut last = 0;
        for micros in (0..2_000_000u64).step_by(7) {
            let b = bucket(micros);
            assert!(b >= last, "{micros} µs went back a bucket");
            last = b;
            assert!(micros < upper_bound(b), "{micros} µs above its bucket");
            if micros >= 64 {
                assert!(
                    upper_bound(b) as f64 <= micros as f64 * 1.126,
                    "{micros} µs"
                );
            }
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_of_a_window() {
        let h = Histogram::default();
        let before = h.counts();
        for ms in 1..=100 {
            h.record(Duration::from_millis(ms));
        }
        let w = Window::between(&before, &h.counts());
        assert_eq!(w.count(), 100);
        let p50 = w.quantile(0.5).unwrap().as_secs_f64() * 1000.0;
        let p99 = w.quantile(0.99).unwrap().as_secs_f64() * 1000.0;
        assert!((50.0..=50.0 * 1.125).contains(&p50), "{p50}");
        assert!((99.0..=99.0 * 1.125).contains(&p99), "{p99}");
        assert_eq!(Window::default().quantile(0.5), None);
        assert_eq!(
            Window::of([Duration::from_millis(3)]).quantile(1.0),
            w.quantile(0.03)
        );
    }
}
