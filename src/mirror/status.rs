//! What the mirror is doing, as `nodekeeper mirror status` and
//! `GET /v1/mirror` show it: counters and notes the mirror's tasks update,
//! and the backlog read from the store.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use serde::Serialize;

use super::capacity::Plan;
use crate::model::Micros;
use crate::store::Store;

/// What the mirror is doing, shared with the HTTP server.
#[derive(Default)]
pub struct MirrorState {
    pub server: String,
    pub identity: String,
    pub(super) leader: AtomicBool,
    pub(super) requests: AtomicU64,
    pub(super) retries: AtomicU64,
    pub(super) lease_renewals: AtomicU64,
    pub(super) throttled: AtomicU64,
    pub(super) missing_upstream: AtomicUsize,
    pub(super) differ_upstream: AtomicUsize,
    pub(super) watching: AtomicBool,
    pub(super) notes: Mutex<Notes>,
}

/// The parts of [`MirrorState`] that are more than a number.
#[derive(Default)]
pub(super) struct Notes {
    pub(super) last_error: Option<ErrorNote>,
    last_success: Option<Micros>,
    last_list: Option<Micros>,
    /// The last 429: when, and its Retry-After.
    last_throttle: Option<(Micros, Duration)>,
    plan: Option<Plan>,
}

/// The last failure, for `mirror status`.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct ErrorNote {
    pub time: Micros,
    pub message: String,
}

/// `nodekeeper mirror status` and `GET /v1/mirror`.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MirrorStatus {
    /// `false` when the store is read directly (no controller running).
    pub running: bool,
    #[serde(default)]
    pub server: Option<String>,
    #[serde(default)]
    pub identity: Option<String>,
    pub leader: bool,
    pub backlog: usize,
    pub oldest_entry: Option<Micros>,
    pub last_error: Option<ErrorNote>,
    pub last_success: Option<Micros>,
    pub requests: u64,
    pub retries: u64,
    pub lease_renewals: u64,
    /// Requests the API server answered 429 (throttling, not errors).
    #[serde(default)]
    pub throttled: u64,
    #[serde(default)]
    pub last_throttled: Option<Throttle>,
    /// What the mirror last saw of the API server's nodes.
    #[serde(default)]
    pub upstream: Option<UpstreamStatus>,
    /// The request budget and whether it covers the Leases.
    #[serde(default)]
    pub budget: Option<BudgetStatus>,
    /// The oldest entries (at most 20).
    pub entries: Vec<EntryStatus>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct EntryStatus {
    pub node: String,
    pub kind: String,
    pub seq: u64,
    pub enqueued: Micros,
}

/// The last 429 from the API server.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct Throttle {
    pub time: Micros,
    #[serde(rename = "retryAfterSeconds")]
    pub retry_after_seconds: f64,
}

/// Registry nodes the API server lacks, or has otherwise, as last seen.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct UpstreamStatus {
    /// Registry nodes missing upstream.
    pub missing: usize,
    /// Registry nodes upstream that differ from the registry.
    pub differ: usize,
    /// Whether the watch of the API server's nodes is open.
    pub watching: bool,
    /// When its nodes were last listed in full.
    #[serde(rename = "lastList")]
    pub last_list: Option<Micros>,
}

/// The request budget, and what the Leases need of it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BudgetStatus {
    pub qps: f64,
    pub burst: u32,
    /// Sized from the node count (no `--kube-api-qps`).
    pub sized: bool,
    /// Whether node Leases are mirrored.
    pub leases: bool,
    pub lease_renew_interval_seconds: Option<f64>,
    pub ready_nodes: usize,
    /// Requests per second the Lease renewals need.
    pub lease_qps: f64,
    /// The rate that leaves a fifth of the budget to other work.
    pub required_qps: f64,
    pub enough: bool,
    /// What is wrong and what to do, when not enough.
    pub shortfall: Option<String>,
}

impl From<&Plan> for BudgetStatus {
    fn from(p: &Plan) -> Self {
        BudgetStatus {
            qps: p.qps,
            burst: p.burst,
            sized: p.sized,
            leases: p.renew_interval.is_some(),
            lease_renew_interval_seconds: p.renew_interval.map(|d| d.as_secs_f64()),
            ready_nodes: p.ready,
            lease_qps: p.lease_qps,
            required_qps: p.required_qps,
            enough: p.enough(),
            shortfall: p.shortfall(),
        }
    }
}

impl MirrorState {
    pub fn new(server: String, identity: String) -> MirrorState {
        MirrorState {
            server,
            identity,
            ..MirrorState::default()
        }
    }

    pub(super) fn notes(&self) -> std::sync::MutexGuard<'_, Notes> {
        self.notes.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn is_leader(&self) -> bool {
        self.leader.load(Ordering::Relaxed)
    }

    /// The mirror's readiness: an error saying why when the request budget
    /// cannot keep every Ready node's Lease renewed in time.
    pub fn readiness(&self) -> Result<(), String> {
        match self.notes().plan.as_ref().and_then(Plan::shortfall) {
            None => Ok(()),
            Some(why) => Err(format!("mirror: {why}")),
        }
    }

    /// The budget's plan last checked, if any.
    pub fn plan(&self) -> Option<Plan> {
        self.notes().plan.clone()
    }

    pub(super) fn note(&self, result: Result<(), &str>) {
        let mut notes = self.notes();
        match result {
            Ok(()) => notes.last_success = Some(Micros::now()),
            Err(message) => {
                notes.last_error = Some(ErrorNote {
                    time: Micros::now(),
                    message: message.to_string(),
                })
            }
        }
    }

    pub(super) fn note_throttled(&self, wait: Duration) {
        self.throttled.fetch_add(1, Ordering::Relaxed);
        self.notes().last_throttle = Some((Micros::now(), wait));
    }

    pub(super) fn note_listed(&self) {
        self.notes().last_list = Some(Micros::now());
    }

    pub(super) fn set_watching(&self, watching: bool) {
        self.watching.store(watching, Ordering::Relaxed);
    }

    pub(super) fn set_drift(&self, missing: usize, differ: usize) {
        self.missing_upstream.store(missing, Ordering::Relaxed);
        self.differ_upstream.store(differ, Ordering::Relaxed);
    }

    pub(super) fn set_plan(&self, plan: Plan) {
        self.notes().plan = Some(plan);
    }

    /// The status, with the backlog read from the store.
    pub fn status(&self, store: &Store) -> Result<MirrorStatus, crate::store::StoreError> {
        let mut status = status_from_store(store)?;
        let notes = self.notes();
        status.running = true;
        status.server = Some(self.server.clone());
        status.identity = Some(self.identity.clone());
        status.leader = self.is_leader();
        status.last_error = notes.last_error.clone().or(status.last_error);
        status.last_success = notes.last_success;
        status.requests = self.requests.load(Ordering::Relaxed);
        status.retries = self.retries.load(Ordering::Relaxed);
        status.lease_renewals = self.lease_renewals.load(Ordering::Relaxed);
        status.throttled = self.throttled.load(Ordering::Relaxed);
        status.last_throttled = notes.last_throttle.map(|(time, wait)| Throttle {
            time,
            retry_after_seconds: wait.as_secs_f64(),
        });
        status.upstream = Some(UpstreamStatus {
            missing: self.missing_upstream.load(Ordering::Relaxed),
            differ: self.differ_upstream.load(Ordering::Relaxed),
            watching: self.watching.load(Ordering::Relaxed),
            last_list: notes.last_list,
        });
        status.budget = notes.plan.as_ref().map(BudgetStatus::from);
        Ok(status)
    }
}

/// What a store says about the mirror when no controller runs on it.
pub fn status_from_store(store: &Store) -> Result<MirrorStatus, crate::store::StoreError> {
    let mut entries: Vec<EntryStatus> = store
        .outbox()?
        .into_iter()
        .map(|(key, e)| EntryStatus {
            node: key.node().to_string(),
            kind: key.kind().to_string(),
            seq: e.seq,
            enqueued: e.enqueued,
        })
        .collect();
    let backlog = entries.len();
    entries.sort_by_key(|e| (e.enqueued, e.seq));
    entries.truncate(20);
    Ok(MirrorStatus {
        backlog,
        oldest_entry: entries.first().map(|e| e.enqueued),
        last_error: store
            .meta_get(META_LAST_ERROR)?
            .and_then(|b| serde_json::from_slice(&b).ok()),
        entries,
        ..MirrorStatus::default()
    })
}

pub(super) const META_LAST_ERROR: &[u8] = b"mirror_last_error";
