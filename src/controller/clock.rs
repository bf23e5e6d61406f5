//! The controller's own clock: time during which it was able to listen.
//!
//! A node becomes Unknown only after its grace period has passed while the
//! controller could probe it or take its heartbeats. When the controller
//! does not run for a while (starved of CPU, stopped, its machine
//! suspended), that time is not the node's silence: the clock leaves it
//! out, so every grace period is extended by the controller's own lateness.
//! A task ticks the clock every [`TICK`]; a gap between two readings longer
//! than [`LATE_AFTER`] counts, less the tick itself, as time away.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// How often the clock is read when nothing else reads it.
pub const TICK: Duration = Duration::from_millis(100);
/// A gap between readings up to this long is the runtime's ordinary
/// jitter, not time away: far below any grace period.
pub const LATE_AFTER: Duration = Duration::from_millis(500);
/// How long a lateness is reported after it ended (the lag gauge, `/readyz`).
pub const REPORTED_FOR: Duration = Duration::from_secs(30);
/// Lateness from which `/readyz` reports the controller not ready.
pub const NOT_READY_AFTER: Duration = Duration::from_secs(1);

/// The controller's clock, shared by its tasks.
#[derive(Clone)]
pub struct Clock(Arc<Mutex<State>>);

struct State {
    /// The last reading, on the real (monotonic) clock.
    last: Instant,
    /// Time away so far: what the controller's clock leaves out.
    away: Duration,
    /// Recent lateness: when each ended, and how long it was.
    recent: VecDeque<(Instant, Duration)>,
}

impl Clock {
    /// A clock that starts now, with no time away.
    pub fn new() -> Clock {
        Clock(Arc::new(Mutex::new(State {
            last: Instant::now(),
            away: Duration::ZERO,
            recent: VecDeque::new(),
        })))
    }

    /// Now, on the controller's clock: the real time less every moment the
    /// controller was away. Monotonic; two readings differ by the time the
    /// controller was there between them.
    pub fn now(&self) -> Instant {
        let real = Instant::now();
        let mut state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let gap = real.saturating_duration_since(state.last);
        if gap > LATE_AFTER {
            let late = gap - TICK;
            state.away += late;
            state.recent.push_back((real, late));
            tracing::warn!(
                late = ?late,
                "the controller did not run for {:.1}s (starved of CPU, stopped or suspended); \
                 every grace period is extended by as much",
                late.as_secs_f64()
            );
        }
        while state
            .recent
            .front()
            .is_some_and(|(at, _)| real.saturating_duration_since(*at) > REPORTED_FOR)
        {
            state.recent.pop_front();
        }
        state.last = real;
        // Never before the clock's start: time away is measured since then.
        real.checked_sub(state.away).unwrap_or(real)
    }

    /// The longest lateness that ended within [`REPORTED_FOR`].
    pub fn recent_lag(&self) -> Duration {
        let state = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let real = Instant::now();
        state
            .recent
            .iter()
            .filter(|(at, _)| real.saturating_duration_since(*at) <= REPORTED_FOR)
            .map(|(_, late)| *late)
            .max()
            .unwrap_or_default()
    }

    /// Time away in all, since the clock started.
    pub fn away(&self) -> Duration {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).away
    }

    /// `/readyz`'s word: not ready while a lateness of [`NOT_READY_AFTER`]
    /// or more is recent.
    pub fn readiness(&self) -> Result<(), String> {
        let lag = self.recent_lag();
        if lag >= NOT_READY_AFTER {
            return Err(format!(
                "the controller did not run for {:.1}s within the last {}s (starved of CPU, \
                 stopped or suspended); grace periods were extended by as much",
                lag.as_secs_f64(),
                REPORTED_FOR.as_secs()
            ));
        }
        Ok(())
    }

    /// Reads the clock every [`TICK`] until `stop`, reporting the lag to
    /// `report` after each reading.
    pub async fn tick(self, report: impl Fn(&Clock), stop: CancellationToken) {
        let mut ticks = tokio::time::interval(TICK);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = stop.cancelled() => return,
                _ = ticks.tick() => {}
            }
            self.now();
            report(&self);
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_controller_that_runs_on_time_loses_nothing() {
        let clock = Clock::new();
        let start = clock.now();
        for _ in 0..100 {
            tokio::time::advance(TICK).await;
            clock.now();
        }
        assert_eq!(clock.now() - start, TICK * 100);
        assert_eq!(clock.away(), Duration::ZERO);
        assert_eq!(clock.recent_lag(), Duration::ZERO);
        assert!(clock.readiness().is_ok());
        // Jitter below LATE_AFTER is not time away.
        tokio::time::advance(LATE_AFTER).await;
        clock.now();
        assert_eq!(clock.away(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn time_away_is_left_out_and_reported_for_a_while() {
        let clock = Clock::new();
        let start = clock.now();
        // Stopped for 20 s: the first reading after it finds the gap.
        tokio::time::advance(Duration::from_secs(20)).await;
        let after = clock.now();
        assert_eq!(after - start, TICK, "only the tick it was due counts");
        assert_eq!(clock.away(), Duration::from_secs(20) - TICK);
        assert_eq!(clock.recent_lag(), Duration::from_secs(20) - TICK);
        let not_ready = clock.readiness().unwrap_err();
        assert!(not_ready.contains("did not run for 19.9s"), "{not_ready}");
        // On time again: the clock runs with the real one, the lag is
        // reported until REPORTED_FOR has passed.
        for _ in 0..(REPORTED_FOR.as_millis() / TICK.as_millis()) {
            tokio::time::advance(TICK).await;
            clock.now();
        }
        assert_eq!(clock.now() - after, REPORTED_FOR);
        assert!(clock.readiness().is_err());
        tokio::time::advance(TICK).await;
        clock.now();
        assert_eq!(clock.recent_lag(), Duration::ZERO);
        assert!(clock.readiness().is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn the_ticker_reads_the_clock_so_a_later_reading_finds_no_gap() {
        let clock = Clock::new();
        let stop = CancellationToken::new();
        let reports = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = reports.clone();
        let ticking = tokio::spawn(clock.clone().tick(
            move |_| {
                counted.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            },
            stop.clone(),
        ));
        let start = clock.now();
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(clock.now() - start, Duration::from_secs(10));
        assert_eq!(clock.away(), Duration::ZERO);
        assert!(reports.load(std::sync::atomic::Ordering::Relaxed) >= 99);
        stop.cancel();
        ticking.await.unwrap();
    }
}
