//! Named health checks behind `/livez` and `/readyz`: each component reports
//! its own, and the server only reads them.
//!
//! Three kinds of check:
//! - a [`Check`] a component sets failed with a reason and clears again
//!   ("the store cannot be written: disk full");
//! - a [`Recurring`] check that passes while some work (a probe sweep, a
//!   monitor pass) finished recently enough;
//! - a computed check, asked each time (the mirror's last answer).
//!
//! Timing uses tokio's clock, so paused-time tests drive it.

use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::time::Instant;

/// A check's verdict: `Err` carries the reason, for `?verbose`.
pub type Verdict = Result<(), String>;

type Computed = Arc<dyn Fn() -> Verdict + Send + Sync>;

/// A registered check; cloned out of the registry (its state is shared),
/// so it is judged without the lock.
#[derive(Clone)]
enum Kind {
    Set(Check),
    Recurring(Recurring),
    Computed(Computed),
}

struct RecurringState {
    what: &'static str,
    max_age: Duration,
    /// When the work last finished; `None` until the first time.
    last: Mutex<Option<Instant>>,
}

/// One endpoint's checks (`/livez` or `/readyz`), in registration order.
#[derive(Default)]
pub struct Checks {
    checks: RwLock<Vec<(String, Kind)>>,
}

/// A check its component sets and clears; it starts passing.
#[derive(Clone)]
pub struct Check {
    failure: Arc<Mutex<Option<String>>>,
}

/// A check that passes while [`Recurring::done`] was called within its
/// maximum age; it fails until the first call.
#[derive(Clone)]
pub struct Recurring {
    state: Arc<RecurringState>,
}

/// One check's name and verdict, as `/readyz?verbose` lists them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckResult {
    pub name: String,
    pub verdict: Verdict,
}

impl Checks {
    /// Registers a check set by its component (see [`Check`]). Registering
    /// a name again replaces the old check.
    pub fn register(&self, name: &str) -> Check {
        let check = Check {
            failure: Arc::new(Mutex::new(None)),
        };
        self.insert(name, Kind::Set(check.clone()));
        check
    }

    /// The handle of a check registered with [`Checks::register`], for a
    /// component other than the one that registered it (the store's write
    /// path reports on `store`, which `run` registers).
    pub fn check(&self, name: &str) -> Option<Check> {
        let checks = self.checks.read().unwrap_or_else(|p| p.into_inner());
        checks.iter().find_map(|(n, kind)| match kind {
            Kind::Set(check) if n == name => Some(check.clone()),
            _ => None,
        })
    }

    /// Registers a check that passes while `what` finished within `max_age`.
    pub fn register_recurring(
        &self,
        name: &str,
        what: &'static str,
        max_age: Duration,
    ) -> Recurring {
        let recurring = Recurring {
            state: Arc::new(RecurringState {
                what,
                max_age,
                last: Mutex::new(None),
            }),
        };
        self.insert(name, Kind::Recurring(recurring.clone()));
        recurring
    }

    /// Registers a check computed on every request; keep it cheap.
    pub fn register_computed(
        &self,
        name: &str,
        check: impl Fn() -> Verdict + Send + Sync + 'static,
    ) {
        self.insert(name, Kind::Computed(Arc::new(check)));
    }

    fn insert(&self, name: &str, kind: Kind) {
        let mut checks = self.checks.write().unwrap_or_else(|p| p.into_inner());
        match checks.iter_mut().find(|(n, _)| n == name) {
            Some(slot) => slot.1 = kind,
            None => checks.push((name.to_string(), kind)),
        }
    }

    /// Every check's verdict now, in registration order.
    pub fn results(&self) -> Vec<CheckResult> {
        self.judge(|_| true)
    }

    /// The verdicts of the checks named in `names` only (those registered),
    /// in registration order; the others are not judged, so a watcher of a
    /// few checks never pays for the costly ones.
    pub fn results_of(&self, names: &[&str]) -> Vec<CheckResult> {
        self.judge(|name| names.contains(&name))
    }

    fn judge(&self, wanted: impl Fn(&str) -> bool) -> Vec<CheckResult> {
        let now = Instant::now();
        // Computed checks run outside the lock: they may take a little while.
        let kinds: Vec<(String, Kind)> = self
            .checks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(name, _)| wanted(name))
            .cloned()
            .collect();
        kinds
            .into_iter()
            .map(|(name, kind)| CheckResult {
                name,
                verdict: kind.verdict(now),
            })
            .collect()
    }

    /// The names of the registered checks.
    pub fn names(&self) -> Vec<String> {
        self.checks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(n, _)| n.clone())
            .collect()
    }
}

impl Kind {
    fn verdict(&self, now: Instant) -> Verdict {
        match self {
            Kind::Set(check) => check.failure().map_or(Ok(()), Err),
            Kind::Recurring(recurring) => recurring.state.verdict(now),
            Kind::Computed(check) => check(),
        }
    }
}

impl RecurringState {
    fn verdict(&self, now: Instant) -> Verdict {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        match last {
            None => Err(format!("no {} has finished yet", self.what)),
            Some(at) => {
                let age = now.saturating_duration_since(at);
                if age <= self.max_age {
                    Ok(())
                } else {
                    Err(format!(
                        "the last {} finished {} ago (more than {})",
                        self.what,
                        crate::duration::format(age),
                        crate::duration::format(self.max_age)
                    ))
                }
            }
        }
    }
}

impl Check {
    /// Fails the check with `reason` (what is wrong, and what to do).
    pub fn fail(&self, reason: impl Into<String>) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = Some(reason.into());
    }

    /// Passes the check again.
    pub fn clear(&self) {
        *self.failure.lock().unwrap_or_else(|p| p.into_inner()) = None;
    }

    /// The reason it fails, if it does.
    pub fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

impl Recurring {
    /// Records that the work finished now.
    pub fn done(&self) {
        *self.state.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(Instant::now());
    }
}

/// The process's checks: `/livez` (is it running?) and `/readyz` (can it
/// decide and write right now?). `/healthz` answers as `/livez` does.
#[derive(Default)]
pub struct Health {
    pub live: Checks,
    pub ready: Checks,
}

impl Health {
    /// Both endpoints with their `ping` check, which always passes.
    pub fn new() -> Arc<Health> {
        let health = Health::default();
        health.live.register_computed("ping", || Ok(()));
        health.ready.register_computed("ping", || Ok(()));
        Arc::new(health)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verdicts(checks: &Checks) -> Vec<(String, Verdict)> {
        checks
            .results()
            .into_iter()
            .map(|r| (r.name, r.verdict))
            .collect()
    }

    #[test]
    fn set_checks_fail_with_a_reason_and_clear() {
        let checks = Checks::default();
        let store = checks.register("store");
        assert_eq!(verdicts(&checks), [("store".into(), Ok(()))]);
        store.fail("no space left on device");
        assert_eq!(
            verdicts(&checks),
            [("store".into(), Err("no space left on device".into()))]
        );
        assert_eq!(store.failure().as_deref(), Some("no space left on device"));
        // Another component finds the same check by its name.
        checks.check("store").unwrap().clear();
        assert_eq!(verdicts(&checks), [("store".into(), Ok(()))]);
        assert!(checks.check("nope").is_none());
        store.fail("again");
        store.clear();
        assert_eq!(verdicts(&checks), [("store".into(), Ok(()))]);
    }

    #[test]
    fn registering_a_name_again_replaces_it_in_place() {
        let checks = Checks::default();
        checks.register_computed("a", || Ok(()));
        checks.register_computed("b", || Ok(()));
        checks.register_computed("a", || Err("now failing".into()));
        assert_eq!(checks.names(), ["a", "b"]);
        assert_eq!(verdicts(&checks)[0].1, Err("now failing".into()));
        let only_b = checks.results_of(&["b", "missing"]);
        assert_eq!(
            only_b,
            [CheckResult {
                name: "b".into(),
                verdict: Ok(())
            }]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn recurring_checks_follow_the_age_of_the_last_pass() {
        let checks = Checks::default();
        let sweeps =
            checks.register_recurring("probe-sweep", "probe sweep", Duration::from_secs(30));
        assert_eq!(
            verdicts(&checks)[0].1,
            Err("no probe sweep has finished yet".into())
        );
        sweeps.done();
        tokio::time::advance(Duration::from_secs(30)).await;
        assert_eq!(verdicts(&checks)[0].1, Ok(()));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(
            verdicts(&checks)[0].1,
            Err("the last probe sweep finished 31s ago (more than 30s)".into())
        );
        sweeps.done();
        assert_eq!(verdicts(&checks)[0].1, Ok(()));
    }

    #[test]
    fn both_endpoints_start_with_ping() {
        let health = Health::new();
        assert_eq!(health.live.names(), ["ping"]);
        assert_eq!(verdicts(&health.ready), [("ping".into(), Ok(()))]);
    }
}
