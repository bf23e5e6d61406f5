//! The client-side request budget (`--kube-api-qps`, `--kube-api-burst`) and
//! the retry backoff, both on tokio's clock so tests run on paused time.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// A token bucket: `burst` requests at once, refilled at `qps` per second.
/// Every request the mirror makes takes a token first, so a drained backlog
/// never bursts beyond the budget, whatever the number of workers.
pub struct Budget {
    qps: f64,
    burst: f64,
    state: Mutex<Bucket>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl Budget {
    pub fn new(qps: f64, burst: u32) -> Budget {
        let burst = f64::from(burst.max(1));
        Budget {
            qps,
            burst,
            state: Mutex::new(Bucket {
                tokens: burst,
                at: Instant::now(),
            }),
        }
    }

    /// Takes a token now, or says how long until one is free.
    fn try_take(&self, now: Instant) -> Result<(), Duration> {
        let mut b = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let elapsed = now.saturating_duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + elapsed * self.qps).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - b.tokens) / self.qps))
        }
    }

    /// Waits for a token.
    pub async fn acquire(&self) {
        // Each round either takes a token or sleeps until one is due; waiters
        // racing for the same token retry, bounded by the number of waiters.
        loop {
            match self.try_take(Instant::now()) {
                Ok(()) => return,
                Err(wait) => tokio::time::sleep(wait.max(Duration::from_millis(1))).await,
            }
        }
    }
}

/// Exponential backoff with jitter: attempt `n` waits a random time between
/// half and all of `base·2ⁿ`, capped at `max`, so retries of many nodes after
/// an outage spread out instead of arriving together.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_millis(500),
            max: Duration::from_secs(60),
        }
    }
}

impl Backoff {
    pub fn delay(&self, attempt: u32) -> Duration {
        let full = self
            .base
            .saturating_mul(1u32 << attempt.min(20))
            .min(self.max);
        let half = full / 2;
        half + half.mul_f64(fastrand::f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_budget_allows_the_burst_then_the_rate() {
        let budget = Budget::new(20.0, 30);
        let start = Instant::now();
        for _ in 0..30 {
            budget.acquire().await;
        }
        assert_eq!(Instant::now(), start, "the burst is free");
        for _ in 0..100 {
            budget.acquire().await;
        }
        let took = Instant::now() - start;
        // 100 more at 20/s: five seconds, give or take a token's rounding.
        assert!(
            took >= Duration::from_millis(4950) && took <= Duration::from_millis(5100),
            "{took:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_takers_share_one_budget() {
        let budget = std::sync::Arc::new(Budget::new(10.0, 1));
        let start = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..4 {
            let budget = budget.clone();
            tasks.spawn(async move {
                for _ in 0..5 {
                    budget.acquire().await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        let took = Instant::now() - start;
        // 20 requests, one free, 19 at 10/s.
        assert!(took >= Duration::from_millis(1850), "{took:?}");
        assert!(took <= Duration::from_millis(2100), "{took:?}");
    }

    #[test]
    fn backoff_grows_with_jitter_and_stops_at_the_cap() {
        let b = Backoff::default();
        for attempt in 0..30 {
            let full = (b.base * 2u32.pow(attempt.min(20))).min(b.max);
            let d = b.delay(attempt);
            assert!(d >= full / 2 && d <= full, "attempt {attempt}: {d:?}");
        }
        assert!(b.delay(40) <= b.max);
    }
}
