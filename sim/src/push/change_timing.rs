//! Timing of the last state change asked of the fleet: from the request
//! (and from each node's own notice of it) to the accepted status update
//! that reports it, measured in the sim itself so a benchmark's polling
//! neither delays nor loads what it times.
//!
//! A request (`FleetHandle::set`, `set_all`: the control endpoint's `PUT
//! /nodes`) starts a new timing and forgets the one before. It waits for
//! one answer from every node it moved into a state that pushes; an answer
//! counts for it when the node noticed its change at or after the request.

use std::sync::Mutex;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// The last change requested, and the answers to it so far.
#[derive(Default)]
pub(super) struct ChangeTimer {
    last: Mutex<Option<Request>>,
}

struct Request {
    at: Instant,
    /// Nodes the request moved into a state that pushes; `None` while it
    /// is still setting them.
    expected: Option<u64>,
    /// Latencies of the answers counted for it.
    from_request: Vec<Duration>,
    from_notice: Vec<Duration>,
    last_answer: Option<Instant>,
}

impl ChangeTimer {
    /// A change is requested at `at` (before any node is set); the timing of the one before is dropped.
    pub fn requested(&self, at: Instant) {
        *self.lock() = Some(Request {
            at,
            expected: None,
            from_request: Vec::new(),
            from_notice: Vec::new(),
            last_answer: None,
        });
    }

    /// The request made at `at` has set its nodes: `nodes` of them now
    /// push in a new state and owe an answer. Ignored if another request came since.
    pub fn expect(&self, at: Instant, nodes: u64) {
        if let Some(request) = self.lock().as_mut().filter(|r| r.at == at) {
            request.expected = Some(nodes);
        }
    }

    /// A node that noticed its change at `noticed` had the status update
    /// reporting it accepted at `answered`.
    pub fn answered(&self, noticed: Instant, answered: Instant) {
        let mut last = self.lock();
        let Some(request) = last.as_mut().filter(|r| noticed >= r.at) else {
            // A change from before the last request.
            return;
        };
        request
            .from_request
            .push(answered.saturating_duration_since(request.at));
        request
            .from_notice
            .push(answered.saturating_duration_since(noticed));
        request.last_answer = Some(request.last_answer.map_or(answered, |t| t.max(answered)));
    }

    /// The timing of the last request so far; `None` before the first.
    pub fn timing(&self) -> Option<ChangeTiming> {
        let last = self.lock();
        let request = last.as_ref()?;
        Some(ChangeTiming {
            requested: request.expected,
            answered: request.from_request.len() as u64,
            last_answer_us: request
                .last_answer
                .map(|t| micros(t.saturating_duration_since(request.at))),
            from_request_us: Percentiles::of(&request.from_request),
            from_notice_us: Percentiles::of(&request.from_notice),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Request>> {
        self.last.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// How the last change asked of the fleet was answered, as `GET /stats`
/// shows it (`pushes.lastChange`). Times in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeTiming {
    /// Nodes the request moved into a state they push in, each owing an
    /// answer; `None` while the request is still setting them.
    pub requested: Option<u64>,
    /// Of those, the changes reported by an accepted status update so far.
    pub answered: u64,
    /// From the request to the last answer so far: once `answered` is
    /// `requested`, the time until every change was answered.
    pub last_answer_us: Option<u64>,
    /// Each answer's time from the request.
    pub from_request_us: Option<Percentiles>,
    /// Each answer's time from the node's own notice of its change (when
    /// its task woke to it, which a busy machine delays).
    pub from_notice_us: Option<Percentiles>,
}

impl ChangeTiming {
    /// Whether every change the request made was answered.
    pub fn all_answered(&self) -> bool {
        self.requested == Some(self.answered)
    }
}

/// The median, the 99th percentile and the maximum of a set of times, in
/// microseconds (nearest rank: each is one of the times measured).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    /// `None` for no times.
    fn of(times: &[Duration]) -> Option<Percentiles> {
        let mut sorted: Vec<u64> = times.iter().map(|d| micros(*d)).collect();
        sorted.sort_unstable();
        let rank = |q: f64| {
            let n = sorted.len();
            // The smallest value with at least q of the values at or below it.
            let index = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
            sorted[index]
        };
        let max = *sorted.last()?;
        Some(Percentiles {
            p50: rank(0.5),
            p99: rank(0.99),
            max,
        })
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn times_run_from_the_request_and_from_each_notice() {
        let timer = ChangeTimer::default();
        assert_eq!(timer.timing(), None);
        let asked = Instant::now();
        timer.requested(asked);
        let timing = timer.timing().unwrap();
        assert_eq!((timing.requested, timing.answered), (None, 0));
        assert!(!timing.all_answered());
        // The request sets three nodes; the first answers before it is done setting.
        tokio::time::advance(2 * MS).await;
        let first_notice = Instant::now();
        tokio::time::advance(3 * MS).await;
        timer.answered(first_notice, Instant::now());
        timer.expect(asked, 3);
        let timing = timer.timing().unwrap();
        assert_eq!((timing.requested, timing.answered), (Some(3), 1));
        assert_eq!(timing.last_answer_us, Some(5_000));
        assert!(!timing.all_answered());
        // A node that noticed late (its task was busy) answers quickly after.
        tokio::time::advance(100 * MS).await;
        let late_notice = Instant::now();
        tokio::time::advance(MS).await;
        timer.answered(late_notice, Instant::now());
        // The slowest from its notice answers before the late one did.
        let slow_answer = asked + 50 * MS;
        timer.answered(asked + 10 * MS, slow_answer);
        let timing = timer.timing().unwrap();
        assert!(timing.all_answered());
        // The last answer is the latest, not the last reported.
        assert_eq!(timing.last_answer_us, Some(106_000));
        assert_eq!(
            timing.from_request_us,
            Some(Percentiles {
                p50: 50_000,
                p99: 106_000,
                max: 106_000
            })
        );
        assert_eq!(
            timing.from_notice_us,
            Some(Percentiles {
                p50: 3_000,
                p99: 40_000,
                max: 40_000
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_new_request_starts_afresh_and_old_changes_do_not_count() {
        let timer = ChangeTimer::default();
        let first = Instant::now();
        timer.requested(first);
        timer.expect(first, 2);
        let old_notice = Instant::now();
        tokio::time::advance(10 * MS).await;
        let second = Instant::now();
        timer.requested(second);
        // The first request's expectation arriving late does not overwrite the second's.
        timer.expect(first, 2);
        assert_eq!(timer.timing().unwrap().requested, None);
        timer.expect(second, 1);
        // A change noticed before the second request is the first one's.
        tokio::time::advance(MS).await;
        timer.answered(old_notice, Instant::now());
        let timing = timer.timing().unwrap();
        assert_eq!((timing.requested, timing.answered), (Some(1), 0));
        assert_eq!(timing.from_request_us, None);
        timer.answered(second, Instant::now());
        let timing = timer.timing().unwrap();
        assert!(timing.all_answered());
        assert_eq!(timing.last_answer_us, Some(1_000));
        // A request that moves no node into a pushing state owes nothing.
        let third = Instant::now();
        timer.requested(third);
        timer.expect(third, 0);
        let timing = timer.timing().unwrap();
        assert!(timing.all_answered());
        assert_eq!(timing.last_answer_us, None);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let times: Vec<Duration> = (1..=200).map(|i| i * MS).collect();
        assert_eq!(
            Percentiles::of(&times),
            Some(Percentiles {
                p50: 100_000,
                p99: 198_000,
                max: 200_000
            })
        );
        assert_eq!(
            Percentiles::of(&[7 * MS]),
            Some(Percentiles {
                p50: 7_000,
                p99: 7_000,
                max: 7_000
            })
        );
        assert_eq!(Percentiles::of(&[]), None);
    }
}
