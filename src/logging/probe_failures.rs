//! Failed probes, logged when a node starts failing, then at most once a
//! period per node while it keeps failing (with how many lines were held
//! back), and when it answers again: an operator sees the trouble begin
//! long before the grace period turns it into a transition, and a site of
//! 10,000 dead kubelets does not log 10,000 lines a sweep.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::time::Instant;

/// How often a node that keeps failing is logged again, by default.
pub const DEFAULT_PERIOD: Duration = Duration::from_secs(60);

/// What was logged for one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeLine {
    /// The first failed probe after a healthy answer (or the start): a warning.
    Failing,
    /// The node still fails; `suppressed` failures were not logged since the last line.
    StillFailing {
        failures: u64,
        suppressed: u64,
        since: Duration,
    },
    /// A healthy answer after `failures` failed probes.
    Recovered { failures: u64, after: Duration },
}

/// One failing node.
#[derive(Debug)]
struct Failing {
    since: Instant,
    logged: Instant,
    failures: u64,
    suppressed: u64,
}

/// Per-node rate limiting of failed-probe lines. Holds only nodes failing
/// now, so its size follows the trouble, not the fleet.
#[derive(Debug)]
pub struct ProbeFailures {
    period: Duration,
    failing: HashMap<String, Failing>,
}

impl Default for ProbeFailures {
    fn default() -> Self {
        ProbeFailures::new(DEFAULT_PERIOD)
    }
}

impl ProbeFailures {
    /// Logs a failing node again at most once every `period`.
    pub fn new(period: Duration) -> ProbeFailures {
        ProbeFailures {
            period,
            failing: HashMap::new(),
        }
    }

    /// A probe of `node` failed at `now`; logs it if it is due and says what was logged.
    pub fn failed(
        &mut self,
        node: &str,
        address: Option<SocketAddr>,
        reason: &str,
        now: Instant,
    ) -> Option<ProbeLine> {
        let Some(f) = self.failing.get_mut(node) else {
            let failing = Failing {
                since: now,
                logged: now,
                failures: 1,
                suppressed: 0,
            };
            self.failing.insert(node.to_string(), failing);
            let address = address_text(address);
            tracing::warn!(node, address, reason, "probe failed");
            return Some(ProbeLine::Failing);
        };
        f.failures += 1;
        if now.saturating_duration_since(f.logged) < self.period {
            f.suppressed += 1;
            return None;
        }
        let (failures, suppressed) = (f.failures, f.suppressed);
        let since = now.saturating_duration_since(f.since);
        (f.logged, f.suppressed) = (now, 0);
        let (address, for_seconds) = (address_text(address), since.as_secs());
        tracing::warn!(
            node,
            address,
            reason,
            failures,
            suppressed,
            for_seconds,
            "probe still failing"
        );
        Some(ProbeLine::StillFailing {
            failures,
            suppressed,
            since,
        })
    }

    /// A probe of `node` was answered healthily at `now`; logs the recovery
    /// of a failing node.
    pub fn answered(
        &mut self,
        node: &str,
        address: Option<SocketAddr>,
        now: Instant,
    ) -> Option<ProbeLine> {
        let f = self.failing.remove(node)?;
        let address = address_text(address);
        let after = now.saturating_duration_since(f.since);
        let after_seconds = after.as_secs();
        tracing::info!(
            node,
            address,
            failures = f.failures,
            after_seconds,
            "probe answered again"
        );
        Some(ProbeLine::Recovered {
            failures: f.failures,
            after,
        })
    }

    /// Forgets nodes `keep` does not name (deleted, or no longer probed).
    pub fn retain(&mut self, keep: impl Fn(&str) -> bool) {
        self.failing.retain(|name, _| keep(name));
    }

    /// How many nodes are failing now.
    pub fn failing(&self) -> usize {
        self.failing.len()
    }
}

/// The probed address, as logged; empty when the node has none.
fn address_text(address: Option<SocketAddr>) -> String {
    address.map(|a| a.to_string()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWEEP: Duration = Duration::from_secs(10);
    const ADDR: Option<SocketAddr> = Some(SocketAddr::new(
        std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 92, 0, 1)),
        10250,
    ));

    #[tokio::test(start_paused = true)]
    async fn the_first_failure_is_logged_then_once_a_period_with_the_count_held_back() {
        let mut log = ProbeFailures::new(Duration::from_secs(60));
        let fail =
            |log: &mut ProbeFailures| log.failed("n1", ADDR, "connection refused", Instant::now());
        assert_eq!(fail(&mut log), Some(ProbeLine::Failing));
        // Five more sweeps within the minute: held back.
        for _ in 0..5 {
            tokio::time::advance(SWEEP).await;
            assert_eq!(fail(&mut log), None);
        }
        // The sixth, a minute after the first line: logged, with the five.
        tokio::time::advance(SWEEP).await;
        assert_eq!(
            fail(&mut log),
            Some(ProbeLine::StillFailing {
                failures: 7,
                suppressed: 5,
                since: Duration::from_secs(60),
            })
        );
        tokio::time::advance(SWEEP).await;
        assert_eq!(fail(&mut log), None);
        tokio::time::advance(SWEEP).await;
        assert_eq!(
            log.answered("n1", ADDR, Instant::now()),
            Some(ProbeLine::Recovered {
                failures: 8,
                after: Duration::from_secs(80),
            })
        );
        // Healthy again: the next failure is a first failure, logged at once.
        assert_eq!(log.answered("n1", ADDR, Instant::now()), None);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(fail(&mut log), Some(ProbeLine::Failing));
    }

    #[tokio::test(start_paused = true)]
    async fn nodes_are_limited_each_on_their_own() {
        let mut log = ProbeFailures::new(Duration::from_secs(60));
        let now = Instant::now();
        assert_eq!(log.failed("a", ADDR, "r", now), Some(ProbeLine::Failing));
        assert_eq!(log.failed("a", ADDR, "r", now), None);
        // Another node's first failure is not held back by the first's.
        assert_eq!(log.failed("b", ADDR, "r", now), Some(ProbeLine::Failing));
        assert_eq!(log.failing(), 2);
        log.retain(|name| name == "b");
        assert_eq!(log.failing(), 1);
        // "a" was forgotten: its next failure is a first one.
        assert_eq!(log.failed("a", ADDR, "r", now), Some(ProbeLine::Failing));
    }

    #[tokio::test(start_paused = true)]
    async fn a_healthy_node_logs_nothing() {
        let mut log = ProbeFailures::default();
        for _ in 0..10 {
            assert_eq!(log.answered("n", ADDR, Instant::now()), None);
            tokio::time::advance(SWEEP).await;
        }
        assert_eq!(log.failing(), 0);
    }
}
