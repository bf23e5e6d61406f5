//! Nodes a source names that are not registered yet, and when each is tried
//! again. Registration never gives up on such a node: the first
//! `--register-retry-count` tries are one sync period apart, as the
//! ancestor's `RegisterNodes` made them, and its `ErrRegistration` is logged
//! and recorded after them; the tries after that back off, up to
//! [`MAX_RETRY_WAIT`] apart, until the node is registered or no source names
//! it any more. `/readyz` and `nodekeeper_unregistered_nodes` say which and why.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::model::{Micros, NodeSpec};

/// The longest wait between two tries at registering a node. A disk that
/// has room again is not waited for: the controller tries at once (see
/// [`Unregistered::try_all_now`]).
pub const MAX_RETRY_WAIT: Duration = Duration::from_secs(60);

/// Names listed in `/readyz` at most; the rest are counted.
const NAMES_SHOWN: usize = 10;

/// Nodes waiting to be registered, by name.
#[derive(Debug)]
pub(super) struct Unregistered {
    waiting: BTreeMap<String, Waiting>,
    /// The wait between the first tries (`--node-sync-period`).
    period: Duration,
    /// `--register-retry-count`: tries before `ErrRegistration`.
    tries_before_error: u32,
}

#[derive(Debug)]
struct Waiting {
    spec: NodeSpec,
    tries: u32,
    /// When the first try failed (wall clock, for the message).
    since: Micros,
    next: Instant,
    last_error: String,
}

impl Unregistered {
    pub fn new(period: Duration, register_retry_count: u32) -> Unregistered {
        Unregistered {
            waiting: BTreeMap::new(),
            period,
            tries_before_error: register_retry_count.max(1),
        }
    }

    /// The wait after a node's `tries`th failed try.
    fn wait_after(&self, tries: u32) -> Duration {
        if tries < self.tries_before_error {
            return self.period;
        }
        Backoff::exponential(self.period, self.period.max(MAX_RETRY_WAIT))
            .delay(tries - self.tries_before_error)
    }

    /// Records a failed try of `specs` at `now`. Answers the names that
    /// have just failed `--register-retry-count` tries, for `ErrRegistration`.
    pub fn failed(
        &mut self,
        specs: &[NodeSpec],
        error: &str,
        now: Instant,
        wall: Micros,
    ) -> Vec<String> {
        let mut exhausted = Vec::new();
        for spec in specs {
            let tries = self.waiting.get(&spec.name).map_or(0, |w| w.tries) + 1;
            let since = self.waiting.get(&spec.name).map_or(wall, |w| w.since);
            if tries == self.tries_before_error {
                exhausted.push(spec.name.clone());
            }
            let next = now + self.wait_after(tries);
            self.waiting.insert(
                spec.name.clone(),
                Waiting {
                    spec: spec.clone(),
                    tries,
                    since,
                    next,
                    last_error: error.to_string(),
                },
            );
        }
        exhausted
    }

    /// Nodes registered (or gone): nothing waits for them any more.
    pub fn registered<'a>(&mut self, names: impl IntoIterator<Item = &'a str>) {
        for name in names {
            self.waiting.remove(name);
        }
    }

    /// Whether `spec`'s node waits for a later try; its spec is kept as the
    /// source gives it now, for that try.
    pub fn holds_back(&mut self, spec: &NodeSpec, now: Instant) -> bool {
        match self.waiting.get_mut(&spec.name) {
            Some(w) => {
                w.spec = spec.clone();
                w.next > now
            }
            None => false,
        }
    }

    /// The specs due for a try at `now`.
    pub fn due(&self, now: Instant) -> Vec<NodeSpec> {
        self.waiting
            .values()
            .filter(|w| w.next <= now)
            .map(|w| w.spec.clone())
            .collect()
    }

    /// When the next try is due, if any node waits.
    pub fn next_try(&self) -> Option<Instant> {
        self.waiting.values().map(|w| w.next).min()
    }

    /// Makes every node due now: what held them back (a full disk) is gone.
    pub fn try_all_now(&mut self, now: Instant) {
        for w in self.waiting.values_mut() {
            w.next = w.next.min(now);
        }
    }

    /// Forgets the nodes no source names any more.
    pub fn retain(&mut self, listed: impl Fn(&NodeSpec) -> bool) {
        self.waiting.retain(|_, w| listed(&w.spec));
    }

    pub fn len(&self) -> usize {
        self.waiting.len()
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// What `/readyz` says: which nodes are not registered, and why.
    pub fn failure(&self) -> Option<String> {
        let count = self.waiting.len();
        if count == 0 {
            return None;
        }
        let names: Vec<&str> = self
            .waiting
            .keys()
            .take(NAMES_SHOWN)
            .map(String::as_str)
            .collect();
        let more = match count - names.len() {
            0 => String::new(),
            more => format!(" and {more} more"),
        };
        let listed = names.join(", ");
        // The node tried longest says for how long; the newest failure says why.
        let oldest = self.waiting.values().max_by_key(|w| w.tries)?;
        let newest = self.waiting.values().max_by_key(|w| w.next)?;
        let (subject, verb) = if count == 1 {
            ("node", "is")
        } else {
            ("nodes", "are")
        };
        Some(format!(
            "{count} {subject} the sources name {verb} not registered: {listed}{more}; tried {} since {}, \
             the last try failed: {}; tried again until registered",
            match oldest.tries {
                1 => "once".to_string(),
                n => format!("{n} times"),
            },
            oldest.since.rfc3339_seconds(),
            newest.last_error
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::static_list::static_spec;

    fn spec(name: &str) -> NodeSpec {
        static_spec(name.into(), None, Default::default(), Default::default())
    }

    const PERIOD: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn the_first_tries_are_one_period_apart_then_they_back_off_without_end() {
        let mut u = Unregistered::new(PERIOD, 3);
        let start = Instant::now();
        let a = [spec("a")];
        let mut waits = Vec::new();
        let mut exhausted_at = Vec::new();
        for attempt in 1..=12 {
            let now = Instant::now();
            if !u.failed(&a, "disk full", now, Micros(0)).is_empty() {
                exhausted_at.push(attempt);
            }
            let next = u.next_try().unwrap();
            waits.push((next - now).as_secs());
            tokio::time::advance(next - now).await;
            assert_eq!(u.due(Instant::now()).len(), 1);
        }
        // ErrRegistration once, at --register-retry-count; the tries go on.
        assert_eq!(exhausted_at, [3]);
        assert_eq!(waits, [10, 10, 10, 20, 40, 60, 60, 60, 60, 60, 60, 60]);
        assert_eq!(u.len(), 1);
        assert!(Instant::now() - start > Duration::from_secs(500));
    }

    #[tokio::test(start_paused = true)]
    async fn nodes_wait_their_turn_until_the_disk_has_room_again() {
        let mut u = Unregistered::new(PERIOD, 10);
        let now = Instant::now();
        u.failed(&[spec("a"), spec("b")], "disk full", now, Micros(0));
        assert!(u.holds_back(&spec("a"), now), "not due yet");
        assert!(!u.holds_back(&spec("c"), now), "not waiting");
        assert!(u.due(now).is_empty());
        u.try_all_now(now);
        assert_eq!(u.due(now).len(), 2);
        assert_eq!(u.next_try(), Some(now));
        u.registered(["a"]);
        u.retain(|s| s.name != "b");
        assert!(u.is_empty());
        assert_eq!(u.failure(), None);
    }

    #[test]
    fn readyz_names_the_nodes_and_the_reason() {
        let mut u = Unregistered::new(PERIOD, 10);
        let now = Instant::now();
        let specs: Vec<NodeSpec> = (0..12).map(|i| spec(&format!("n{i:02}"))).collect();
        u.failed(&specs, "the disk has 6 MiB free", now, Micros(0));
        let text = u.failure().unwrap();
        assert!(
            text.starts_with("12 nodes the sources name are not registered: n00, n01,"),
            "{text}"
        );
        assert!(text.contains("n09 and 2 more"), "{text}");
        assert!(text.contains("the disk has 6 MiB free"), "{text}");
        assert!(
            text.contains("tried once since 1970-01-01T00:00:00Z"),
            "{text}"
        );
    }
}
