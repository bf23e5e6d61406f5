//! Eviction in the controller: nodes that stay not Ready past
//! `--pod-eviction-timeout` are evicted through a per-zone rate limiter, and
//! not at all while every zone looks fully disrupted — then the fault is the
//! network or the controller, not the nodes. Taints follow the Ready
//! condition. The decisions ([`Evictor`], pure state) come first, then the
//! monitor pass that carries them out: the taints and the `EvictionStarted`
//! event written as one batch, and the `--eviction-hook` run with the node's
//! name and reason (its result is `EvictionDone`).
//!
//! The zone states and rates are the upstream node lifecycle controller's.
//! The other parts of eviction: its mode (`--eviction-mode`) in
//! `crate::model`, and the deletion of an evicted node's pods from the API
//! server in `crate::mirror` (its `eviction` module).

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::Controller;
use crate::model::{ConditionStatus, EventKind, EvictionMode, Micros, Node, Taint};
use crate::store::Batch;
use crate::token_bucket::TokenBucket;

pub use crate::model::{TAINT_NOT_READY, TAINT_UNREACHABLE};
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";

/// Eviction settings, named as kube-controller-manager names them.
#[derive(Debug, Clone)]
pub struct EvictionConfig {
    pub pod_eviction_timeout: Duration,
    pub mode: EvictionMode,
    /// Run with the node's name and the reason when a node is evicted.
    pub hook: Option<String>,
    pub hook_timeout: Duration,
    pub node_eviction_rate: f64,
    pub secondary_node_eviction_rate: f64,
    pub unhealthy_zone_threshold: f64,
    pub large_cluster_size_threshold: usize,
}

impl Default for EvictionConfig {
    fn default() -> Self {
        EvictionConfig {
            pod_eviction_timeout: Duration::from_secs(300),
            mode: EvictionMode::Taint,
            hook: None,
            hook_timeout: Duration::from_secs(60),
            node_eviction_rate: 0.1,
            secondary_node_eviction_rate: 0.01,
            unhealthy_zone_threshold: 0.55,
            large_cluster_size_threshold: 50,
        }
    }
}

/// The health of a zone, as upstream classifies it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ZoneState {
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// Classifies a zone from its Ready and total node counts.
pub fn zone_state(ready: usize, total: usize, unhealthy_threshold: f64) -> ZoneState {
    let not_ready = total - ready.min(total);
    if total > 0 && ready == 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / total as f64 >= unhealthy_threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// The eviction rate (nodes per second) for a zone.
pub fn zone_rate(
    state: ZoneState,
    zone_size: usize,
    all_fully_disrupted: bool,
    config: &EvictionConfig,
) -> f64 {
    match state {
        // Every zone down at once: the network or the controller, not the nodes.
        ZoneState::FullDisruption if all_fully_disrupted => 0.0,
        ZoneState::FullDisruption | ZoneState::Normal => config.node_eviction_rate,
        ZoneState::PartialDisruption if zone_size > config.large_cluster_size_threshold => {
            config.secondary_node_eviction_rate
        }
        ZoneState::PartialDisruption => 0.0,
    }
}

/// A zone's eviction limiter: the crate's token bucket with a burst of
/// one, so at most `rate` evictions per second and never two at once
/// (upstream's `RateLimitedTimedQueue` is the same shape). A zone whose rate
/// drops to 0 starts again from an empty bucket.
pub fn eviction_limiter(rate: f64, now: Instant) -> TokenBucket {
    TokenBucket::new(rate, EVICTION_BURST, now)
}

/// Evictions a zone may start at once.
const EVICTION_BURST: u32 = 1;

/// The taints a node should carry for its Ready status: NoSchedule at once,
/// NoExecute once it is evicted (taint mode).
pub fn wanted_taints(node: &Node, evicted: bool, mode: EvictionMode, now: Micros) -> Vec<Taint> {
    let key = match node.ready() {
        ConditionStatus::True => None,
        ConditionStatus::False => Some(TAINT_NOT_READY),
        ConditionStatus::Unknown => Some(TAINT_UNREACHABLE),
    };
    let mut taints: Vec<Taint> = node
        .taints
        .iter()
        .filter(|t| t.key != TAINT_NOT_READY && t.key != TAINT_UNREACHABLE)
        .cloned()
        .collect();
    let Some(key) = key else {
        return taints;
    };
    let effects = if evicted && mode == EvictionMode::Taint {
        &["NoSchedule", "NoExecute"][..]
    } else {
        &["NoSchedule"]
    };
    for effect in effects {
        // Keep the time a taint was first added.
        let added = node
            .taints
            .iter()
            .find(|t| t.key == key && t.effect == *effect)
            .and_then(|t| t.added);
        taints.push(Taint {
            key: key.into(),
            value: String::new(),
            effect: effect.to_string(),
            added: added.or(Some(now)),
        });
    }
    taints
}

/// Per-node and per-zone eviction state, in memory: after a restart every
/// node's not-Ready time starts again from the controller's start.
#[derive(Debug, Default)]
pub struct Evictor {
    not_ready_since: HashMap<String, Instant>,
    queued: HashSet<String>,
    evicted: HashSet<String>,
    zones: BTreeMap<String, Zone>,
}

#[derive(Debug)]
struct Zone {
    limiter: TokenBucket,
    queue: VecDeque<String>,
    state: ZoneState,
}

/// What one pass decided.
#[derive(Debug, Default, PartialEq)]
pub struct Pass {
    /// Nodes to evict now, with the reason.
    pub evict: Vec<(String, String)>,
    /// Zone states after the pass.
    pub zones: BTreeMap<String, ZoneState>,
}

impl Evictor {
    /// Whether a node has been evicted (and not Ready since).
    pub fn is_evicted(&self, name: &str) -> bool {
        self.evicted.contains(name)
    }

    /// Forgets an eviction that could not be recorded, so the next pass decides again.
    pub fn forget(&mut self, name: &str) {
        self.evicted.remove(name);
    }

    /// Marks a node evicted (it was before a restart, say).
    pub fn mark_evicted(&mut self, name: &str) {
        self.evicted.insert(name.to_string());
    }

    /// One pass over every node: tracks how long each is not Ready, sets
    /// each zone's rate, and hands out evictions the limiters allow. Each
    /// decision re-checks the node right before it is handed out, so a node
    /// that came back is never evicted on stale state.
    ///
    /// Over 80 lines: the zones' states, rates and limiters are decided in
    /// one walk over the nodes, in order, as the ancestor's pass did.
    pub fn pass<'a>(
        &mut self,
        nodes: impl Iterator<Item = &'a Node>,
        config: &EvictionConfig,
        started: Instant,
        now: Instant,
    ) -> Pass {
        let mut by_zone: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        let mut ready_now: HashMap<String, (bool, String)> = HashMap::new();
        for node in nodes {
            let zone = node.labels.get(ZONE_LABEL).cloned().unwrap_or_default();
            let ready = node.ready() == ConditionStatus::True;
            let counts = by_zone.entry(zone.clone()).or_default();
            counts.1 += 1;
            if ready {
                counts.0 += 1;
                self.not_ready_since.remove(&node.name);
                self.evicted.remove(&node.name);
            } else {
                // The controller's own downtime never counts: a node found not
                // Ready at start-up is not Ready since the start.
                self.not_ready_since
                    .entry(node.name.clone())
                    .or_insert(now.max(started));
            }
            ready_now.insert(node.name.clone(), (ready, zone));
        }
        self.not_ready_since
            .retain(|n, _| ready_now.contains_key(n));
        self.evicted.retain(|n| ready_now.contains_key(n));

        let all_fully_disrupted = !by_zone.is_empty()
            && by_zone.values().all(|(ready, total)| {
                zone_state(*ready, *total, config.unhealthy_zone_threshold)
                    == ZoneState::FullDisruption
            });
        let mut pass = Pass::default();
        // Not Ready for the eviction timeout.
        let overdue = |since: &HashMap<String, Instant>, name: &str| {
            since.get(name).is_some_and(|since| {
                now.saturating_duration_since(*since) >= config.pod_eviction_timeout
            })
        };
        for (name, (ready, zone)) in &ready_now {
            let due = !ready
                && !self.evicted.contains(name)
                && !self.queued.contains(name)
                && overdue(&self.not_ready_since, name);
            if due {
                let z = self.zones.entry(zone.clone()).or_insert_with(|| Zone {
                    limiter: eviction_limiter(config.node_eviction_rate, now),
                    queue: VecDeque::new(),
                    state: ZoneState::Normal,
                });
                z.queue.push_back(name.clone());
                self.queued.insert(name.clone());
            }
        }
        for (zone, (ready, total)) in &by_zone {
            let state = zone_state(*ready, *total, config.unhealthy_zone_threshold);
            pass.zones.insert(zone.clone(), state);
            let Some(z) = self.zones.get_mut(zone) else {
                continue;
            };
            if z.state != state {
                tracing::info!(zone = %zone, from = ?z.state, to = ?state, "zone state changed");
            }
            z.state = state;
            let rate = zone_rate(state, *total, all_fully_disrupted, config);
            z.limiter.set_rate(rate, EVICTION_BURST, now);
            // The queue is in the order nodes became due; it is bounded by the zone's size.
            while let Some(name) = z.queue.front().cloned() {
                let still_due = ready_now.get(&name).is_some_and(|(ready, _)| !ready)
                    && overdue(&self.not_ready_since, &name);
                if !still_due {
                    z.queue.pop_front();
                    self.queued.remove(&name);
                    continue;
                }
                if z.limiter.try_acquire(now).is_err() {
                    break;
                }
                z.queue.pop_front();
                self.queued.remove(&name);
                self.evicted.insert(name.clone());
                let since = self
                    .not_ready_since
                    .get(&name)
                    .map_or(Duration::ZERO, |s| now.saturating_duration_since(*s));
                pass.evict.push((
                    name,
                    format!(
                        "not Ready for {}",
                        crate::duration::format(Duration::from_secs(since.as_secs()))
                    ),
                ));
            }
        }
        pass
    }
}

impl Controller {
    /// Runs every monitor period: taints follow Ready, due nodes are evicted
    /// at their zone's rate.
    /// Over 80 lines: the zones' states, the taints and the evictions are
    /// decided from one look at every node and written as one batch.
    pub(super) async fn eviction_pass(&mut self) {
        let config = self.config.eviction.clone();
        if config.mode == EvictionMode::None {
            return;
        }
        let now = self.clock.now();
        let wall = Micros::now();
        self.resume_interrupted(now, &config).await;
        let pass = self.evictor.pass(
            self.tracked.values().map(|t| &*t.node),
            &config,
            self.started,
            now,
        );
        let mut batch = Batch::new(wall);
        // Taints alone follow Ready again at the next pass if refused, so
        // they are written a chunk at a time (see [`super::WRITE_CHUNK`]).
        let mut taint_batches: Vec<Batch> = Vec::new();
        let mut hooks = Vec::new();
        for (name, t) in &self.tracked {
            let evict = pass.evict.iter().find(|(n, _)| n == name);
            let taints = wanted_taints(&t.node, self.evictor.is_evicted(name), config.mode, wall);
            let mut events = Vec::new();
            if taints != t.node.taints {
                events.push(EventKind::TaintsChanged {
                    from: t.node.taints.clone(),
                    to: taints.clone(),
                });
            }
            if let Some((_, reason)) = evict {
                tracing::warn!(node = %name, reason, mode = config.mode.as_str(), "evicting");
                events.push(EventKind::EvictionStarted {
                    reason: reason.clone(),
                    mode: config.mode,
                });
                self.metrics.evictions.inc();
                if let Some(hook) = &config.hook {
                    hooks.push((name.clone(), reason.clone(), hook.clone()));
                }
            }
            if events.is_empty() {
                continue;
            }
            let mut node = t.node.clone();
            node.taints = taints;
            if evict.is_some() {
                batch.record(node, events);
                continue;
            }
            super::record_chunked(&mut taint_batches, wall, node, events);
        }
        // The taints first, then the decisions: a decision is durable before
        // anything acts on it.
        let mut writes: Vec<_> = taint_batches
            .into_iter()
            .map(|taints| ("taint changes", taints))
            .collect();
        writes.push(("eviction decisions", batch));
        for (what, batch) in writes.into_iter().filter(|(_, b)| !b.is_empty()) {
            if let Err(e) = self.commit(batch).await {
                // Not recorded, so not done: the next pass decides again.
                for (name, _) in &pass.evict {
                    self.evictor.forget(name);
                }
                return super::log_unstored(what, &e);
            }
        }
        for (name, reason, hook) in hooks {
            self.hooks
                .spawn(run_hook(hook, name, reason, config.hook_timeout));
        }
    }

    /// Re-runs hooks a crash or stop interrupted, once a grace period after
    /// the start has told the node's real state; a node that came back is
    /// left alone (and that is recorded).
    async fn resume_interrupted(&mut self, now: Instant, config: &EvictionConfig) {
        if self.interrupted.is_empty()
            || now.saturating_duration_since(self.started) < self.config.node_monitor_grace_period
        {
            return;
        }
        let Some(hook) = config.hook.clone() else {
            return;
        };
        let mut batch = Batch::new(Micros::now());
        for (name, reason) in std::mem::take(&mut self.interrupted) {
            let still_down = self
                .tracked
                .get(&name)
                .is_some_and(|t| t.node.ready() != crate::model::ConditionStatus::True);
            if !still_down {
                batch.node_event(
                    &name,
                    EventKind::EvictionDone {
                        result: "not resumed: the node is Ready again".into(),
                    },
                );
                continue;
            }
            tracing::warn!(node = %name, "resuming an eviction hook a stop interrupted");
            let reason = format!("{reason} (resumed after a controller restart)");
            self.hooks
                .spawn(run_hook(hook.clone(), name, reason, config.hook_timeout));
        }
        if !batch.is_empty() {
            if let Err(e) = self.commit(batch).await {
                super::log_unstored("eviction results", &e);
            }
        }
    }

    /// Records what a hook did (later, if the store refuses it now: it must
    /// not look interrupted after a restart).
    pub(super) async fn after_hook(&mut self, name: &str, result: String) {
        self.record_events(vec![(
            Some(name.to_string()),
            EventKind::EvictionDone { result },
        )])
        .await;
    }
}

/// Runs `sh -c HOOK` with the node name and reason as `$1` and `$2` (and in
/// `NODEKEEPER_NODE` / `NODEKEEPER_REASON`), within `timeout`; answers the
/// node and how it went.
async fn run_hook(
    hook: String,
    node: String,
    reason: String,
    timeout: Duration,
) -> (String, String) {
    let run = crate::hook::HookRun::with_args(
        "nodekeeper-eviction-hook",
        vec![
            ("NODEKEEPER_NODE", node.clone()),
            ("NODEKEEPER_REASON", reason),
        ],
    );
    let outcome = crate::hook::run(&hook, run, timeout).await;
    (node, outcome.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Condition, READY};

    fn node(name: &str, zone: &str, status: ConditionStatus) -> Node {
        let mut n = crate::store::records::tests::sample_node();
        n.name = name.into();
        n.taints.clear();
        n.labels = [(ZONE_LABEL.to_string(), zone.to_string())].into();
        n.conditions = vec![Condition {
            kind: READY.into(),
            status,
            last_heartbeat: Micros(0),
            last_transition: Micros(0),
            reason: String::new(),
            message: String::new(),
        }];
        n
    }

    fn fleet(zone: &str, ready: usize, down: usize) -> Vec<Node> {
        (0..ready)
            .map(|i| node(&format!("{zone}-up-{i}"), zone, ConditionStatus::True))
            .chain(
                (0..down)
                    .map(|i| node(&format!("{zone}-down-{i}"), zone, ConditionStatus::Unknown)),
            )
            .collect()
    }

    const TIMEOUT: Duration = Duration::from_secs(300);

    #[test]
    fn zone_states_follow_upstream() {
        assert_eq!(zone_state(0, 3, 0.55), ZoneState::FullDisruption);
        assert_eq!(zone_state(1, 4, 0.55), ZoneState::PartialDisruption);
        assert_eq!(
            zone_state(2, 4, 0.55),
            ZoneState::Normal,
            "2 down is never partial"
        );
        assert_eq!(zone_state(5, 10, 0.55), ZoneState::Normal);
        assert_eq!(zone_state(0, 0, 0.55), ZoneState::Normal);
        let c = EvictionConfig::default();
        assert_eq!(zone_rate(ZoneState::PartialDisruption, 51, false, &c), 0.01);
        assert_eq!(zone_rate(ZoneState::PartialDisruption, 50, false, &c), 0.0);
        assert_eq!(zone_rate(ZoneState::FullDisruption, 10, true, &c), 0.0);
        assert_eq!(zone_rate(ZoneState::FullDisruption, 10, false, &c), 0.1);
    }

    #[tokio::test(start_paused = true)]
    async fn the_limiter_allows_rate_per_second_without_bursts() {
        let start = Instant::now();
        let mut l = eviction_limiter(0.1, start);
        assert!(l.try_acquire(start).is_ok());
        assert!(l.try_acquire(start).is_err());
        tokio::time::advance(Duration::from_secs(9)).await;
        assert!(l.try_acquire(Instant::now()).is_err());
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(l.try_acquire(Instant::now()).is_ok());
        // Idle for an hour: still only one at once.
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert!(l.try_acquire(Instant::now()).is_ok());
        assert!(l.try_acquire(Instant::now()).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_is_evicted_after_the_timeout_at_the_zone_rate() {
        let started = Instant::now();
        let config = EvictionConfig::default();
        let nodes = fleet("a", 10, 2);
        let mut e = Evictor::default();
        assert!(e
            .pass(nodes.iter(), &config, started, Instant::now())
            .evict
            .is_empty());
        tokio::time::advance(TIMEOUT - Duration::from_secs(1)).await;
        assert!(e
            .pass(nodes.iter(), &config, started, Instant::now())
            .evict
            .is_empty());
        tokio::time::advance(Duration::from_secs(1)).await;
        let pass = e.pass(nodes.iter(), &config, started, Instant::now());
        assert_eq!(pass.evict.len(), 1, "0.1/s: one now");
        assert_eq!(pass.evict[0].1, "not Ready for 5m");
        assert!(e
            .pass(nodes.iter(), &config, started, Instant::now())
            .evict
            .is_empty());
        tokio::time::advance(Duration::from_secs(10)).await;
        assert_eq!(
            e.pass(nodes.iter(), &config, started, Instant::now())
                .evict
                .len(),
            1,
            "the next ten seconds later"
        );
        tokio::time::advance(Duration::from_secs(60)).await;
        assert!(
            e.pass(nodes.iter(), &config, started, Instant::now())
                .evict
                .is_empty(),
            "each node once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn nothing_is_evicted_while_every_zone_is_fully_disrupted() {
        let started = Instant::now();
        let config = EvictionConfig::default();
        let nodes: Vec<Node> = fleet("a", 0, 5)
            .into_iter()
            .chain(fleet("b", 0, 5))
            .collect();
        let mut e = Evictor::default();
        e.pass(nodes.iter(), &config, started, Instant::now());
        tokio::time::advance(TIMEOUT * 3).await;
        let pass = e.pass(nodes.iter(), &config, started, Instant::now());
        assert!(pass.evict.is_empty());
        assert_eq!(pass.zones["a"], ZoneState::FullDisruption);
        // One zone recovers: the other one's nodes are now failures, at the normal rate.
        let mut nodes = nodes;
        for n in nodes.iter_mut().filter(|n| n.labels[ZONE_LABEL] == "b") {
            n.conditions[0].status = ConditionStatus::True;
        }
        tokio::time::advance(Duration::from_secs(1)).await;
        let pass = e.pass(nodes.iter(), &config, started, Instant::now());
        assert_eq!(pass.evict.len(), 0, "the paused bucket starts empty");
        tokio::time::advance(Duration::from_secs(10)).await;
        let pass = e.pass(nodes.iter(), &config, started, Instant::now());
        assert_eq!(pass.evict.len(), 1);
        assert!(pass.evict[0].0.starts_with("a-"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_small_partially_disrupted_zone_is_not_evicted() {
        let started = Instant::now();
        let config = EvictionConfig::default();
        // 6 of 10 down in zone a (partial, small zone: rate 0), zone b healthy.
        let nodes: Vec<Node> = fleet("a", 4, 6)
            .into_iter()
            .chain(fleet("b", 10, 0))
            .collect();
        let mut e = Evictor::default();
        e.pass(nodes.iter(), &config, started, Instant::now());
        tokio::time::advance(TIMEOUT * 2).await;
        let pass = e.pass(nodes.iter(), &config, started, Instant::now());
        assert_eq!(pass.zones["a"], ZoneState::PartialDisruption);
        assert!(pass.evict.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_large_partially_disrupted_zone_is_evicted_at_the_secondary_rate() {
        let started = Instant::now();
        let config = EvictionConfig::default();
        // 40 of 60 down in zone a: partial, and larger than 50 nodes, so
        // 0.01/s (one per 100 s) instead of 0.1/s; zone b healthy.
        let nodes: Vec<Node> = fleet("a", 20, 40)
            .into_iter()
            .chain(fleet("b", 10, 0))
            .collect();
        let mut e = Evictor::default();
        e.pass(nodes.iter(), &config, started, Instant::now());
        tokio::time::advance(TIMEOUT).await;
        let pass = e.pass(nodes.iter(), &config, started, Instant::now());
        assert_eq!(pass.zones["a"], ZoneState::PartialDisruption);
        assert_eq!(pass.evict.len(), 1, "the bucket's one token");
        let mut evicted = 1;
        for _ in 0..99 {
            tokio::time::advance(Duration::from_secs(1)).await;
            evicted += e
                .pass(nodes.iter(), &config, started, Instant::now())
                .evict
                .len();
        }
        assert_eq!(
            evicted, 1,
            "nothing more within 99 s, where 0.1/s would have made ten"
        );
        tokio::time::advance(Duration::from_secs(1)).await;
        let pass = e.pass(nodes.iter(), &config, started, Instant::now());
        assert_eq!(pass.evict.len(), 1, "the next after 100 s");
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_that_came_back_is_never_evicted_and_downtime_does_not_count() {
        let config = EvictionConfig::default();
        let mut nodes = fleet("a", 10, 1);
        let mut e = Evictor::default();
        // The controller starts now; the node was already Unknown before.
        let started = Instant::now();
        e.pass(nodes.iter(), &config, started, started);
        tokio::time::advance(TIMEOUT - Duration::from_secs(1)).await;
        assert!(e
            .pass(nodes.iter(), &config, started, Instant::now())
            .evict
            .is_empty());
        // It comes back just before its turn, then goes again: the clock restarts.
        nodes[10].conditions[0].status = ConditionStatus::True;
        e.pass(nodes.iter(), &config, started, Instant::now());
        nodes[10].conditions[0].status = ConditionStatus::False;
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(e
            .pass(nodes.iter(), &config, started, Instant::now())
            .evict
            .is_empty());
    }

    #[test]
    fn taints_follow_ready_and_eviction() {
        let now = Micros(7);
        let mut n = node("x", "a", ConditionStatus::Unknown);
        let t = wanted_taints(&n, false, EvictionMode::Taint, now);
        assert_eq!(
            t.iter()
                .map(|t| (t.key.as_str(), t.effect.as_str()))
                .collect::<Vec<_>>(),
            [(TAINT_UNREACHABLE, "NoSchedule")]
        );
        n.taints = t;
        let t = wanted_taints(&n, true, EvictionMode::Taint, Micros(9));
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].added, Some(now), "the first taint keeps its time");
        assert_eq!(
            wanted_taints(&n, true, EvictionMode::None, now).len(),
            1,
            "no NoExecute without taint mode"
        );
        n.conditions[0].status = ConditionStatus::True;
        n.taints.push(Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: "NoSchedule".into(),
            added: None,
        });
        let t = wanted_taints(&n, false, EvictionMode::Taint, now);
        assert_eq!(
            t.iter().map(|t| t.key.as_str()).collect::<Vec<_>>(),
            ["dedicated"],
            "others' taints are kept"
        );
    }
}
