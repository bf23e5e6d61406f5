//! The one token bucket: `burst` at once, refilled at `rate` per second, on
//! tokio's clock. The mirror's request budget and the per-zone eviction
//! limiters are each one of these.

use std::time::Duration;

use tokio::time::Instant;

/// A token bucket on tokio's clock, so paused-time tests drive it. It starts
/// full. Callers pass the time in: a pass that decides many things at one
/// instant (an eviction pass) sees one `now`.
///
/// At rate 0 nothing refills, and [`TokenBucket::try_acquire`] says that no
/// token will come (`Err(None)`) instead of giving a wait to sleep on: a
/// waiter waits for a new rate rather than spinning. Setting the rate to 0
/// empties the bucket, so a stopped bucket starts again from empty, never
/// with a burst.
#[derive(Debug, Clone)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    /// When `tokens` was last brought up to date.
    at: Instant,
    /// No token is handed out before this (a 429's Retry-After).
    held_until: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens (at least one), refilled at `rate`
    /// per second.
    pub fn new(rate: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            rate: sane(rate),
            burst,
            tokens: burst,
            at: now,
            held_until: None,
        }
    }

    /// Tokens per second.
    pub fn rate(&self) -> f64 {
        self.rate
    }

    /// Tokens at most in the bucket.
    pub fn burst(&self) -> u32 {
        self.burst as u32
    }

    /// Changes the rate and the burst from `now` on. Tokens beyond the new
    /// burst are dropped; a rate of 0 empties the bucket.
    pub fn set_rate(&mut self, rate: f64, burst: u32, now: Instant) {
        self.refill(now);
        self.rate = sane(rate);
        self.burst = f64::from(burst.max(1));
        self.tokens = if self.rate == 0.0 {
            0.0
        } else {
            self.tokens.min(self.burst)
        };
    }

    /// Takes a token if there is one. If not, says how long until there
    /// will be one, or `None` if there never will be at this rate (0).
    pub fn try_acquire(&mut self, now: Instant) -> Result<(), Option<Duration>> {
        self.refill(now);
        if let Some(until) = self.held_until {
            return Err(Some(until - now));
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return Ok(());
        }
        if self.rate == 0.0 {
            return Err(None);
        }
        // A wait too long for a Duration (a vanishing rate) is never.
        Err(Duration::try_from_secs_f64((1.0 - self.tokens) / self.rate).ok())
    }

    /// Hands out no token before `until` (the API server's `Retry-After`),
    /// and starts again from an empty bucket then, so the end of the hold is
    /// not a burst. A shorter hold does not cut a longer one short.
    pub fn hold_until(&mut self, until: Instant, now: Instant) {
        self.refill(now);
        self.held_until = Some(self.held_until.map_or(until, |u| u.max(until)));
        self.tokens = 0.0;
    }

    /// Until when tokens are held back, if they are.
    pub fn held_until(&self, now: Instant) -> Option<Instant> {
        self.held_until.filter(|until| *until > now)
    }

    fn refill(&mut self, now: Instant) {
        let from = match self.held_until {
            // Nothing accrues during a hold.
            Some(until) if until > now => {
                self.at = self.at.max(now);
                return;
            }
            Some(until) => {
                self.held_until = None;
                until.max(self.at)
            }
            None => self.at,
        };
        let elapsed = now.saturating_duration_since(from).as_secs_f64();
        if elapsed > 0.0 {
            self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        }
        self.at = self.at.max(now);
    }
}

/// A rate as the bucket counts it: not a number or negative is 0, infinite
/// is the largest finite rate (the bucket is full again at once).
fn sane(rate: f64) -> f64 {
    if rate.is_nan() {
        0.0
    } else {
        rate.clamp(0.0, f64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn advance(by: Duration) -> Instant {
        tokio::time::advance(by).await;
        Instant::now()
    }

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn the_burst_is_free_then_tokens_come_at_the_rate() {
        let now = Instant::now();
        let mut b = TokenBucket::new(10.0, 5, now);
        for _ in 0..5 {
            assert_eq!(b.try_acquire(now), Ok(()));
        }
        assert_eq!(b.try_acquire(now), Err(Some(100 * MS)));
        let now = advance(99 * MS).await;
        assert!(b.try_acquire(now).is_err());
        let now = advance(MS).await;
        assert_eq!(b.try_acquire(now), Ok(()));
        // 100 more at 10/s take ten seconds, each at the wait it was told.
        let start = Instant::now();
        let mut taken = 0;
        while taken < 100 {
            match b.try_acquire(Instant::now()) {
                Ok(()) => taken += 1,
                Err(Some(wait)) => tokio::time::sleep(wait).await,
                Err(None) => panic!("a positive rate always refills"),
            }
        }
        let took = Instant::now() - start;
        assert!(took >= 9990 * MS && took <= 10_010 * MS, "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn refilling_stops_at_the_burst() {
        let start = Instant::now();
        let mut b = TokenBucket::new(1.0, 3, start);
        assert_eq!(b.try_acquire(start), Ok(()));
        let now = advance(Duration::from_secs(3600)).await;
        for _ in 0..3 {
            assert_eq!(b.try_acquire(now), Ok(()));
        }
        assert_eq!(b.try_acquire(now), Err(Some(Duration::from_secs(1))));
    }

    #[tokio::test(start_paused = true)]
    async fn a_fractional_rate_and_a_burst_of_one() {
        // The secondary eviction rate: one per 100 s, never two at once.
        let start = Instant::now();
        let mut b = TokenBucket::new(0.01, 1, start);
        assert_eq!(b.try_acquire(start), Ok(()));
        assert_eq!(b.try_acquire(start), Err(Some(Duration::from_secs(100))));
        let now = advance(Duration::from_secs(99)).await;
        assert!(b.try_acquire(now).is_err());
        let now = advance(Duration::from_secs(1)).await;
        assert_eq!(b.try_acquire(now), Ok(()));
        let now = advance(Duration::from_secs(1000)).await;
        assert_eq!(b.try_acquire(now), Ok(()));
        assert!(b.try_acquire(now).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn at_rate_zero_no_token_ever_comes_and_none_is_promised() {
        let start = Instant::now();
        let mut b = TokenBucket::new(0.0, 2, start);
        // Full at the start; nothing after.
        assert_eq!(b.try_acquire(start), Ok(()));
        assert_eq!(b.try_acquire(start), Ok(()));
        assert_eq!(b.try_acquire(start), Err(None), "no wait to sleep on");
        let now = advance(Duration::from_secs(86_400)).await;
        assert_eq!(b.try_acquire(now), Err(None));
        assert_eq!(b.rate(), 0.0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_rate_set_to_zero_empties_the_bucket_and_restarts_without_a_burst() {
        let start = Instant::now();
        let mut b = TokenBucket::new(0.1, 1, start);
        b.set_rate(0.0, 1, start);
        assert_eq!(
            b.try_acquire(start),
            Err(None),
            "the full bucket was emptied"
        );
        let now = advance(Duration::from_secs(3600)).await;
        b.set_rate(0.1, 1, now);
        assert_eq!(b.try_acquire(now), Err(Some(Duration::from_secs(10))));
        let now = advance(Duration::from_secs(10)).await;
        assert_eq!(b.try_acquire(now), Ok(()));
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_rate_counts_from_when_it_is_set() {
        let start = Instant::now();
        let mut b = TokenBucket::new(1.0, 10, start);
        for _ in 0..10 {
            b.try_acquire(start).unwrap();
        }
        // Half a second at 1/s, then the rate goes up: the half token stays.
        let now = advance(500 * MS).await;
        b.set_rate(100.0, 10, now);
        assert_eq!(b.try_acquire(now), Err(Some(5 * MS)));
        assert_eq!((b.rate(), b.burst()), (100.0, 10));
        // A smaller burst drops the tokens beyond it.
        let now = advance(Duration::from_secs(1)).await;
        b.set_rate(100.0, 2, now);
        assert_eq!(b.try_acquire(now), Ok(()));
        assert_eq!(b.try_acquire(now), Ok(()));
        assert!(b.try_acquire(now).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_hold_hands_out_nothing_then_starts_from_empty() {
        let start = Instant::now();
        let mut b = TokenBucket::new(10.0, 10, start);
        let until = start + Duration::from_secs(3);
        b.hold_until(until, start);
        assert_eq!(b.held_until(start), Some(until));
        assert_eq!(b.try_acquire(start), Err(Some(Duration::from_secs(3))));
        // A shorter hold does not shorten it.
        b.hold_until(start + Duration::from_secs(1), start);
        let now = advance(Duration::from_secs(2)).await;
        assert_eq!(b.try_acquire(now), Err(Some(Duration::from_secs(1))));
        // At its end the bucket is empty and refills at the rate from then.
        let now = advance(Duration::from_secs(1)).await;
        assert_eq!(b.held_until(now), None);
        assert_eq!(b.try_acquire(now), Err(Some(100 * MS)));
        let now = advance(Duration::from_secs(1)).await;
        for _ in 0..10 {
            assert_eq!(b.try_acquire(now), Ok(()));
        }
        assert!(b.try_acquire(now).is_err(), "one second's worth, no more");
    }

    #[tokio::test(start_paused = true)]
    async fn a_time_before_the_last_one_adds_nothing() {
        let early = Instant::now();
        let late = advance(Duration::from_secs(1)).await;
        let mut b = TokenBucket::new(1.0, 1, late);
        b.try_acquire(late).unwrap();
        assert!(b.try_acquire(early).is_err());
        let now = advance(Duration::from_secs(1)).await;
        assert_eq!(b.try_acquire(now), Ok(()));
    }

    #[test]
    fn rates_that_are_not_rates_are_zero_and_infinite_refills_at_once() {
        let now = Instant::now();
        for rate in [f64::NAN, -1.0, f64::NEG_INFINITY] {
            assert_eq!(TokenBucket::new(rate, 1, now).rate(), 0.0, "{rate}");
        }
        let mut b = TokenBucket::new(f64::INFINITY, 1, now);
        b.try_acquire(now).unwrap();
        assert!(matches!(b.try_acquire(now), Err(Some(wait)) if wait < MS));
        assert_eq!(
            TokenBucket::new(1.0, 0, now).burst(),
            1,
            "a burst of at least one"
        );
    }
}
