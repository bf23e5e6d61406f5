//! The one retry backoff: exponential, capped, with jitter where many
//! retries could arrive together. Every retry loop waits with it — the
//! mirror's requests, lists and watches, accepting connections, the
//! transition hook's store reads and writes, registration — on tokio's
//! clock, so paused-time tests control the waits.

use std::time::Duration;

/// Exponential backoff: the wait after the `n`th failure in a row (counted
/// from 0) is `first·2ⁿ`, capped at `max`. With jitter it is a random time
/// between half and all of that, so retries for many nodes after an outage
/// spread out instead of arriving together. With `first == max` it is a
/// constant interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first: Duration,
    max: Duration,
    jitter: bool,
}

/// The largest doubling: `first·2²⁰` is past any cap in use.
const MAX_DOUBLINGS: u32 = 20;

impl Backoff {
    /// `first`, doubling after each failure up to `max`, without jitter.
    pub const fn exponential(first: Duration, max: Duration) -> Backoff {
        Backoff {
            first,
            max,
            jitter: false,
        }
    }

    /// The same wait after every failure.
    pub const fn constant(every: Duration) -> Backoff {
        Backoff::exponential(every, every)
    }

    /// Each wait a random time between half and all of it.
    pub const fn with_jitter(self) -> Backoff {
        Backoff {
            jitter: true,
            ..self
        }
    }

    /// The wait after the first failure (before jitter).
    pub const fn first(&self) -> Duration {
        self.first
    }

    /// The longest wait.
    pub const fn max(&self) -> Duration {
        self.max
    }

    /// The wait after `failures + 1` failures in a row: `delay(0)` after
    /// the first.
    pub fn delay(&self, failures: u32) -> Duration {
        let full = self
            .first
            .saturating_mul(1u32 << failures.min(MAX_DOUBLINGS))
            .min(self.max);
        if !self.jitter {
            return full;
        }
        let half = full / 2;
        half + half.mul_f64(fastrand::f64())
    }

    /// A retry loop's count of failures in a row, starting at none.
    pub fn retries(self) -> Retries {
        Retries {
            backoff: self,
            failures: 0,
        }
    }
}

/// One retry loop's place in its [`Backoff`]: the failures in a row so far.
/// A success calls [`Retries::reset`], so the next failure waits the first
/// delay again.
#[derive(Debug, Clone)]
pub struct Retries {
    backoff: Backoff,
    failures: u32,
}

impl Retries {
    /// Counts one more failure and gives the wait before trying again.
    pub fn next_delay(&mut self) -> Duration {
        let delay = self.backoff.delay(self.failures);
        self.failures = self.failures.saturating_add(1);
        delay
    }

    /// Failures in a row so far.
    pub fn failures(&self) -> u32 {
        self.failures
    }

    /// Forgets the failures: the loop succeeded.
    pub fn reset(&mut self) {
        self.failures = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tokio::time::Instant;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn without_jitter_each_wait_doubles_up_to_the_cap() {
        let b = Backoff::exponential(5 * MS, Duration::from_secs(1));
        let delays: Vec<_> = (0..10).map(|n| b.delay(n).as_millis()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        assert_eq!(b.delay(u32::MAX), Duration::from_secs(1));
        assert_eq!((b.first(), b.max()), (5 * MS, Duration::from_secs(1)));
    }

    #[test]
    fn a_constant_backoff_waits_the_same_every_time() {
        let b = Backoff::constant(Duration::from_secs(10));
        for n in [0, 1, 5, 40, u32::MAX] {
            assert_eq!(b.delay(n), Duration::from_secs(10));
        }
    }

    #[test]
    fn jitter_stays_between_half_and_all_of_the_wait_and_varies() {
        let b = Backoff::exponential(500 * MS, Duration::from_secs(60)).with_jitter();
        for n in 0..40 {
            let full = (b.first() * 2u32.pow(n.min(MAX_DOUBLINGS))).min(b.max());
            for _ in 0..50 {
                let d = b.delay(n);
                assert!(d >= full / 2 && d <= full, "failure {n}: {d:?}");
            }
        }
        let spread: std::collections::BTreeSet<_> = (0..100).map(|_| b.delay(3)).collect();
        assert!(spread.len() > 1, "jitter that never varies is none");
        assert!(b.delay(u32::MAX) <= b.max());
    }

    #[test]
    fn retries_count_failures_and_start_over_after_a_success() {
        let mut r = Backoff::exponential(Duration::from_secs(1), Duration::from_secs(30)).retries();
        let waits: Vec<_> = (0..7).map(|_| r.next_delay().as_secs()).collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 30, 30]);
        assert_eq!(r.failures(), 7);
        r.reset();
        assert_eq!(r.failures(), 0);
        assert_eq!(r.next_delay(), Duration::from_secs(1));
        let mut r = Backoff::constant(MS).retries();
        r.failures = u32::MAX;
        assert_eq!(r.next_delay(), MS, "the count saturates, no overflow");
        assert_eq!(r.failures(), u32::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn a_retry_loop_waits_the_sum_of_its_delays_on_tokios_clock() {
        let start = Instant::now();
        let mut retries = Backoff::exponential(5 * MS, Duration::from_secs(1)).retries();
        let mut attempts = 0;
        // Fails five times, then succeeds.
        loop {
            attempts += 1;
            if attempts > 5 {
                retries.reset();
                break;
            }
            tokio::time::sleep(retries.next_delay()).await;
        }
        assert_eq!(Instant::now() - start, (5 + 10 + 20 + 40 + 80) * MS);
        assert_eq!(retries.next_delay(), 5 * MS);
    }
}
