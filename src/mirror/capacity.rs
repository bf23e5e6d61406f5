//! Whether the request budget covers the work: every Ready node's Lease
//! renewed at its cadence, with room left for status changes and the
//! backlog. Without `--kube-api-qps` the budget is sized from the node count,
//! within bounds that keep one client a good citizen of the API server.
//! Pure arithmetic, checked at start and whenever the Ready count changes.

use std::time::Duration;

/// Lease renewals may take at most this share of the budget; the rest is
/// for condition and taint changes, creations and the backlog.
pub const LEASE_SHARE: f64 = 0.8;
/// The budget sized from the node count is never below kube-controller-manager's
/// default rate...
pub const MIN_AUTO_QPS: f64 = 20.0;
/// ...nor above this: what the kubelets of 10,000 nodes would send for their
/// own Leases (one renewal each every 10 s). Beyond it, give `--kube-api-qps`
/// and an API Priority and Fairness level that allows it.
pub const MAX_AUTO_QPS: f64 = 1000.0;
/// The burst when `--kube-api-burst` is not given: at least this, else a
/// second's worth of the rate.
pub const MIN_BURST: u32 = 30;
/// Requests in flight at once: a tenth of the rate (so a 10 ms answer keeps
/// the budget busy), within these bounds.
const MIN_WORKERS: usize = 8;
const MAX_WORKERS: usize = 128;

/// The budget asked for on the command line; `None` where it is sized here.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BudgetFlags {
    pub qps: Option<f64>,
    pub burst: Option<u32>,
}

/// The budget for a number of Ready nodes, and whether it covers their Leases.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    /// Ready nodes whose Leases are renewed.
    pub ready: usize,
    /// How often each is renewed; `None` when Leases are not mirrored.
    pub renew_interval: Option<Duration>,
    /// Requests per second the renewals need.
    pub lease_qps: f64,
    /// The rate that leaves [`LEASE_SHARE`] of it to renewals.
    pub required_qps: f64,
    pub qps: f64,
    pub burst: u32,
    /// Whether the rate was sized here (no `--kube-api-qps`).
    pub sized: bool,
}

impl Plan {
    pub fn new(ready: usize, renew_interval: Option<Duration>, flags: BudgetFlags) -> Plan {
        let lease_qps = renew_interval.map_or(0.0, |i| ready as f64 / i.as_secs_f64());
        let required_qps = lease_qps / LEASE_SHARE;
        let qps = flags
            .qps
            .unwrap_or_else(|| required_qps.ceil().clamp(MIN_AUTO_QPS, MAX_AUTO_QPS));
        let burst = flags
            .burst
            .unwrap_or_else(|| MIN_BURST.max(qps.ceil() as u32));
        Plan {
            ready,
            renew_interval,
            lease_qps,
            required_qps,
            qps,
            burst,
            sized: flags.qps.is_none(),
        }
    }

    /// Whether the rate renews every Ready node's Lease in time with room to spare.
    pub fn enough(&self) -> bool {
        // A hair of slack for the rounding of a rate given as a whole number.
        self.qps + 1e-9 >= self.required_qps
    }

    /// Requests in flight at once at this rate.
    pub fn workers(&self) -> usize {
        ((self.qps / 10.0).ceil() as usize).clamp(MIN_WORKERS, MAX_WORKERS)
    }

    /// What is wrong and what to do, when the budget is short.
    pub fn shortfall(&self) -> Option<String> {
        if self.enough() {
            return None;
        }
        let interval = self
            .renew_interval
            .map_or_else(|| "-".into(), crate::duration::format);
        let limit = if self.sized {
            format!(
                "the budget sized from the node count stops at {MAX_AUTO_QPS:.0}/s; give --kube-api-qps (and an API Priority and Fairness level that allows it)"
            )
        } else {
            format!("it is {}", fmt_qps(self.qps))
        };
        Some(format!(
            "renewing the Leases of {} Ready nodes every {interval} needs {} requests/s; with a fifth of the budget kept for status changes, --kube-api-qps must be at least {} ({limit}). Leases will be renewed late and may lapse upstream: raise --kube-api-qps, lengthen --node-lease-duration, or turn Lease mirroring off (--mirror-leases=false) when nothing in the cluster reads node Leases",
            self.ready,
            fmt_qps(self.lease_qps),
            self.required_qps.ceil()
        ))
    }
}

fn fmt_qps(qps: f64) -> String {
    if qps >= 10.0 || qps.fract() == 0.0 {
        format!("{qps:.0}")
    } else {
        format!("{qps:.1}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const THIRD_OF_40S: Duration = Duration::from_millis(13_333);

    #[test]
    fn without_a_flag_the_budget_follows_the_ready_nodes_within_bounds() {
        let auto = BudgetFlags::default();
        let small = Plan::new(10, Some(THIRD_OF_40S), auto);
        assert_eq!((small.qps, small.burst), (20.0, 30));
        assert!(small.enough());
        let site = Plan::new(600, Some(THIRD_OF_40S), auto);
        // 600 / 13.3 s = 45/s, which must be at most 80%: 57/s.
        assert!((site.lease_qps - 45.0).abs() < 0.01, "{site:?}");
        assert_eq!(site.qps, 57.0);
        assert_eq!(site.burst, 57);
        assert!(site.enough() && site.shortfall().is_none());
        let large = Plan::new(10_000, Some(THIRD_OF_40S), auto);
        assert_eq!(large.qps, 938.0);
        assert!(large.enough());
        assert_eq!(large.workers(), 94);
        let huge = Plan::new(20_000, Some(THIRD_OF_40S), auto);
        assert_eq!(huge.qps, MAX_AUTO_QPS);
        assert!(!huge.enough());
        assert!(huge.shortfall().unwrap().contains("stops at 1000/s"));
    }

    #[test]
    fn a_given_budget_too_small_for_the_leases_says_what_it_needs() {
        let given = BudgetFlags {
            qps: Some(20.0),
            burst: Some(30),
        };
        let plan = Plan::new(600, Some(THIRD_OF_40S), given);
        assert_eq!((plan.qps, plan.burst, plan.sized), (20.0, 30, false));
        assert!(!plan.enough());
        let why = plan.shortfall().unwrap();
        assert!(
            why.contains("600 Ready nodes every 13.333s needs 45 requests/s"),
            "{why}"
        );
        assert!(why.contains("at least 57 (it is 20)"), "{why}");
        assert!(why.contains("--mirror-leases=false"), "{why}");
        // Fewer Ready nodes: enough again.
        assert!(Plan::new(200, Some(THIRD_OF_40S), given).enough());
        assert_eq!(plan.workers(), 8);
    }

    #[test]
    fn without_leases_any_budget_is_enough() {
        let plan = Plan::new(
            10_000,
            None,
            BudgetFlags {
                qps: Some(5.0),
                burst: None,
            },
        );
        assert!(plan.enough());
        assert_eq!(plan.lease_qps, 0.0);
        assert_eq!(plan.burst, 30);
        assert_eq!(Plan::new(10_000, None, BudgetFlags::default()).qps, 20.0);
    }
}
