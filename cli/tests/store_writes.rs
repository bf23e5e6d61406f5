//! How the controller writes: pushed changes answered only once durable
//! (sharing flushes), a disk short of space that refuses changes but keeps
//! heartbeats, reads and pending decisions, and heartbeat times checkpointed
//! beside the store. In process, on a fake disk whose free space the test
//! sets; the real binary on a real full disk is `tests/full_disk.rs`.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{eventually, TestSite, DEADLINE};
use futures_util::stream::{FuturesUnordered, StreamExt};
use nodekeeper::controller::push::PushedCondition;
use nodekeeper::controller::{
    Controller, ControllerConfig, ControllerHandle, FreeSpace, PushError, PushedStatus, StatusMode,
};
use nodekeeper::metrics::Metrics;
use nodekeeper::model::{ConditionStatus, EventKind, Image, Lease, Micros, Node, Reported};
use nodekeeper::source::static_list::static_spec;
use nodekeeper::store::{HistoryQuery, Store, StoreOptions};
use nodekeeper::view::View;
use tokio_util::sync::CancellationToken;

/// A controller in this process, in push mode, on a store in a temporary
/// directory whose disk has the free space the test sets.
struct InProcess {
    dir: tempfile::TempDir,
    store: Arc<Store>,
    view: Arc<View>,
    metrics: Arc<Metrics>,
    handle: ControllerHandle,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<Result<(), nodekeeper::controller::ControllerError>>,
    free: Arc<AtomicU64>,
}

fn name(i: usize) -> String {
    format!("node-{i:04}")
}

fn config(free: &Arc<AtomicU64>, grace: Duration) -> ControllerConfig {
    let space = free.clone();
    ControllerConfig {
        status_mode: StatusMode::Push,
        node_monitor_period: Duration::from_millis(100),
        node_monitor_grace_period: grace,
        // Nodes are pushed first by the test, whenever it gets to them.
        node_startup_grace_period: Duration::from_secs(600),
        node_sync_period: Duration::from_millis(200),
        free_space: FreeSpace::fake(move || space.load(Ordering::SeqCst)),
        heartbeat_checkpoint_period: Duration::from_millis(200),
        ..ControllerConfig::default()
    }
}

/// A kubelet's status update with only its Ready condition, its heartbeat at `beat`.
async fn push_status(
    handle: &ControllerHandle,
    i: usize,
    status: ConditionStatus,
    beat: i64,
) -> Result<Node, PushError> {
    let ready = PushedCondition {
        kind: "Ready".into(),
        status,
        last_heartbeat: Some(Micros(beat)),
        reason: "KubeletReady".into(),
        message: "kubelet is posting ready status".into(),
    };
    let pushed = PushedStatus {
        conditions: vec![ready],
        ..PushedStatus::default()
    };
    handle
        .status(name(i), pushed, None)
        .await
        .map(std::sync::Arc::unwrap_or_clone)
}

/// A Ready heartbeat of node `i`.
async fn push_ready(handle: &ControllerHandle, i: usize, beat: i64) -> Result<Node, PushError> {
    push_status(handle, i, ConditionStatus::True, beat).await
}

impl InProcess {
    async fn start(nodes: usize, grace: Duration) -> InProcess {
        let dir = tempfile::tempdir().unwrap();
        InProcess::open(dir, nodes, grace, Arc::new(AtomicU64::new(u64::MAX))).await
    }

    async fn open(
        dir: tempfile::TempDir,
        nodes: usize,
        grace: Duration,
        free: Arc<AtomicU64>,
    ) -> InProcess {
        let store =
            Arc::new(Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap());
        let view = Arc::new(View::default());
        let metrics = Arc::new(Metrics::new());
        let controller = Controller::start(
            config(&free, grace),
            store.clone(),
            view.clone(),
            metrics.clone(),
        )
        .await
        .unwrap();
        // Addresses in this test's loopback range; push mode probes nothing.
        let specs = (0..nodes)
            .map(|i| {
                let address = format!("127.86.{}.{}", i / 250, i % 250 + 1);
                static_spec(
                    name(i),
                    Some(&address),
                    Default::default(),
                    Default::default(),
                )
            })
            .collect();
        let (handle, pushes) = ControllerHandle::channel();
        let shutdown = CancellationToken::new();
        let task = tokio::spawn(controller.run(specs, pushes, shutdown.clone()));
        let c = InProcess {
            dir,
            store,
            view,
            metrics,
            handle,
            shutdown,
            task,
            free,
        };
        let view = c.view.clone();
        eventually("every node is registered", || {
            let view = view.clone();
            async move { view.list().len() == nodes }
        })
        .await;
        c
    }

    /// A kubelet's status update with only its Ready condition, its heartbeat at `beat`.
    async fn push(&self, i: usize, status: ConditionStatus, beat: i64) -> Result<Node, PushError> {
        push_status(&self.handle, i, status, beat).await
    }

    fn ready(&self, i: usize) -> ConditionStatus {
        self.view.get(&name(i)).expect("registered").0.ready()
    }

    /// The Ready changes of node `i` in the durable history, as statuses.
    fn ready_history(&self, i: usize) -> Vec<ConditionStatus> {
        let query = HistoryQuery {
            node: Some(name(i)),
            condition: Some("Ready".into()),
            ..HistoryQuery::default()
        };
        self.store
            .history(&query)
            .unwrap()
            .into_iter()
            .filter_map(|e| match e.kind {
                EventKind::ConditionChanged { to, .. } => Some(to),
                _ => None,
            })
            .collect()
    }

    async fn stop(self) -> tempfile::TempDir {
        self.shutdown.cancel();
        self.task.await.unwrap().unwrap();
        self.dir
    }
}

/// Every change is answered only once it is durable and readable; changes
/// arriving together share flushes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushed_changes_are_durable_when_answered() {
    const NODES: usize = 2000;
    let c = InProcess::start(NODES, Duration::from_secs(600)).await;
    let flushes_before = c.metrics.store_flushes.get();
    let mut answers: FuturesUnordered<_> = (0..NODES)
        .map(|i| {
            let c = &c;
            async move { (i, c.push(i, ConditionStatus::True, 1_000_000).await) }
        })
        .collect();
    let mut versions = BTreeSet::new();
    while let Some((i, answer)) = answers.next().await {
        let node = answer.unwrap_or_else(|e| panic!("{}: {e}", name(i)));
        assert_eq!(node.ready(), ConditionStatus::True);
        // On disk, and what readers see, by the time the kubelet hears of it.
        assert!(c.store.durable_seq() >= node.resource_version);
        assert!(c.view.published() >= node.resource_version);
        assert_eq!(c.ready(i), ConditionStatus::True);
        versions.insert(node.resource_version);
    }
    drop(answers);
    assert_eq!(versions.len(), NODES);
    for i in [0, NODES / 2, NODES - 1] {
        assert_eq!(c.ready_history(i), [ConditionStatus::True]);
    }
    let flushes = c.metrics.store_flushes.get() - flushes_before;
    eprintln!("{NODES} changes made durable in {flushes} flushes");
    assert!((1..=NODES as u64).contains(&flushes));
    // The same status again is a heartbeat: answered, nothing written (the
    // node keeps its version, its history gains nothing). First the taints
    // pass catches up with the Ready nodes (it takes their not-ready taint
    // off, a write of its own), or its write could land between the two reads.
    let view = c.view.clone();
    eventually("no taints", || {
        let view = view.clone();
        async move { view.list().iter().all(|(n, _)| n.taints.is_empty()) }
    })
    .await;
    for i in 0..10 {
        let before = c.store.node(&name(i)).unwrap().unwrap().resource_version;
        c.push(i, ConditionStatus::True, 2_000_000).await.unwrap();
        let after = c.store.node(&name(i)).unwrap().unwrap().resource_version;
        assert_eq!(after, before, "{}", name(i));
        assert_eq!(c.ready_history(i), [ConditionStatus::True]);
    }
    c.stop().await;
}

/// What a kubelet reports beyond its conditions, as a v1.33 kubelet's
/// status setters write it (kubernetes `pkg/kubelet/nodestatus/setters.go`:
/// `Images`, `DaemonEndpoints`, `VolumesInUse`).
fn kubelet_report(images: usize) -> Reported {
    Reported {
        images: (0..images)
            .map(|i| Image {
                names: vec![format!("registry.example/app-{i}:1.0")],
                size_bytes: Some(1_000_000 + i as i64),
            })
            .collect(),
        kubelet_port: 10250,
        volumes_in_use: vec!["kubernetes.io/csi/ebs.csi.aws.com^vol-0a1".into()],
        ..Reported::default()
    }
}

/// A kubelet whose status changed nothing since it last read the node
/// sends nothing (`nodeStatusHasChanged`, kubernetes
/// `pkg/kubelet/kubelet_node_status.go:813-832`), unless 5 minutes passed;
/// a client that sends the same status again anyway gets no write: no
/// flush, no seq, no new resourceVersion. A new image list is a write of
/// the node, but no history entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_report_again_writes_nothing_and_new_images_are_no_history() {
    let c = InProcess::start(1, Duration::from_secs(600)).await;
    let report = |images: usize, beat: i64| PushedStatus {
        conditions: vec![PushedCondition {
            kind: "Ready".into(),
            status: ConditionStatus::True,
            last_heartbeat: Some(Micros(beat)),
            reason: "KubeletReady".into(),
            message: "kubelet is posting ready status".into(),
        }],
        reported: Some(kubelet_report(images)),
        ..PushedStatus::default()
    };
    let first = c
        .handle
        .status(name(0), report(3, 1_000_000), None)
        .await
        .unwrap();
    assert_eq!(first.reported, kubelet_report(3));
    // The taints pass takes the not-ready taint off (a write of its own) first.
    let view = c.view.clone();
    eventually("no taints", || {
        let view = view.clone();
        async move { view.list().iter().all(|(n, _)| n.taints.is_empty()) }
    })
    .await;
    let stored = c.store.node(&name(0)).unwrap().unwrap();
    assert_eq!(stored.reported, kubelet_report(3));
    let history = |c: &InProcess| {
        let query = HistoryQuery {
            node: Some(name(0)),
            ..HistoryQuery::default()
        };
        c.store.history(&query).unwrap().len()
    };
    let (flushes, seq, events) = (
        c.metrics.store_flushes.get(),
        c.store.last_seq(),
        history(&c),
    );

    for _ in 0..20 {
        let answer = c
            .handle
            .status(name(0), report(3, 1_000_000), None)
            .await
            .unwrap();
        assert_eq!(answer.resource_version, stored.resource_version);
    }
    assert_eq!(
        c.metrics.store_flushes.get(),
        flushes,
        "identical reports flushed"
    );
    assert_eq!(c.store.last_seq(), seq);
    assert_eq!(c.store.node(&name(0)).unwrap().unwrap(), stored);

    // One image fewer: the node is written, its history gains nothing.
    let answer = c
        .handle
        .status(name(0), report(2, 1_000_000), None)
        .await
        .unwrap();
    assert_eq!(answer.reported.images.len(), 2);
    assert!(c.metrics.store_flushes.get() > flushes);
    assert_eq!(
        c.store.node(&name(0)).unwrap().unwrap().reported,
        kubelet_report(2)
    );
    assert_eq!((c.store.last_seq(), history(&c)), (seq, events));
    let dir = c.stop().await;

    // Kept across a restart.
    let store = Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap();
    assert_eq!(
        store.node(&name(0)).unwrap().unwrap().reported,
        kubelet_report(2)
    );
}

/// A disk short of space: changes are refused (nothing of them is kept),
/// heartbeats still count, reads go on, and it all resumes by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_changes_and_resumes() {
    let c = InProcess::start(3, Duration::from_secs(600)).await;
    for i in 0..3 {
        c.push(i, ConditionStatus::True, 1_000_000).await.unwrap();
    }
    c.free.store(1 << 20, Ordering::SeqCst);
    let e = c
        .push(0, ConditionStatus::False, 2_000_000)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, PushError::Unavailable(m) if m.contains("1.0 MiB free")),
        "{e}"
    );
    assert!(c
        .view
        .store_writable()
        .unwrap_err()
        .contains("free some space"));
    assert_eq!(c.metrics.store_writable.get(), 0);
    // Nothing of the refused change stays: the same node's next heartbeat
    // (Ready as before) is a heartbeat, answered, and not a change.
    let beat = c.push(0, ConditionStatus::True, 3_000_000).await.unwrap();
    assert_eq!(beat.ready(), ConditionStatus::True);
    assert_eq!(c.ready(0), ConditionStatus::True);
    assert_eq!(c.ready_history(0), [ConditionStatus::True]);
    // Refused again while the disk stays full.
    assert!(c.push(1, ConditionStatus::False, 2_000_000).await.is_err());
    c.free.store(u64::MAX, Ordering::SeqCst);
    // Writes are taken again without a restart.
    let changed = c.push(0, ConditionStatus::False, 4_000_000).await.unwrap();
    assert_eq!(changed.ready(), ConditionStatus::False);
    assert_eq!(c.ready(0), ConditionStatus::False);
    assert_eq!(
        c.ready_history(0),
        [ConditionStatus::True, ConditionStatus::False]
    );
    c.push(1, ConditionStatus::False, 4_000_000).await.unwrap();
    assert_eq!(
        c.ready_history(1),
        [ConditionStatus::True, ConditionStatus::False]
    );
    assert_eq!(c.view.store_writable(), Ok(()));
    c.stop().await;
}

/// The monitor's decision about a silent node waits while the disk is full
/// and is made once there is room.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn monitor_decisions_wait_for_room() {
    // Node 0 pushes every 100 ms from a task of its own for the whole test,
    // so only a stall of the process three times longer than any seen on a
    // loaded machine could make it look silent.
    let grace = Duration::from_secs(3);
    let c = InProcess::start(2, grace).await;
    let beats = Arc::new(AtomicU64::new(1_000_000));
    let next_beat = {
        let beats = beats.clone();
        move || beats.fetch_add(1_000, Ordering::SeqCst) as i64
    };
    for i in 0..2 {
        c.push(i, ConditionStatus::True, next_beat()).await.unwrap();
    }
    c.free.store(0, Ordering::SeqCst);
    let pushing = CancellationToken::new();
    let pusher = tokio::spawn({
        let handle = c.handle.clone();
        let pushing = pushing.clone();
        async move {
            while !pushing.is_cancelled() {
                // Heartbeats are answered with the disk full.
                push_ready(&handle, 0, next_beat()).await.unwrap();
                tokio::select! {
                    _ = pushing.cancelled() => {}
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                }
            }
        }
    });
    // Node 1 falls silent. Wait until a monitor pass has found it silent for
    // longer than the grace period (the heartbeat ages are set by the same
    // pass, from the same instant, as its decisions), then until two more
    // passes have finished: its Unknown was due and could not be written.
    let metrics = c.metrics.clone();
    let gauge = |text: &str, prefix: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0.0)
    };
    let max_age = "nodekeeper_heartbeat_age_seconds{quantile=\"1\"} ";
    let last_pass = "nodekeeper_last_monitor_pass_timestamp_seconds ";
    let started = std::time::Instant::now();
    let mut due_at = None;
    let mut passes_since = 0;
    let mut last_seen = 0.0;
    while passes_since < 2 {
        assert!(
            started.elapsed() < DEADLINE,
            "the monitor never saw node 1 silent"
        );
        let text = metrics.encode();
        let pass = gauge(&text, last_pass);
        match due_at {
            None if gauge(&text, max_age) > grace.as_secs_f64() + 0.5 => {
                due_at = Some(pass);
                last_seen = pass;
            }
            Some(_) if pass > last_seen => {
                passes_since += 1;
                last_seen = pass;
            }
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(c.ready(1), ConditionStatus::True, "decided without a disk");
    assert_eq!(c.ready_history(1), [ConditionStatus::True]);
    c.free.store(u64::MAX, Ordering::SeqCst);
    let view = c.view.clone();
    eventually("node 1 is Unknown once there is room", || {
        let view = view.clone();
        async move { view.get(&name(1)).unwrap().0.ready() == ConditionStatus::Unknown }
    })
    .await;
    assert_eq!(
        c.ready_history(1),
        [ConditionStatus::True, ConditionStatus::Unknown]
    );
    // Node 0, pushing all along, was never found silent.
    assert_eq!(c.ready(0), ConditionStatus::True);
    assert_eq!(c.ready_history(0), [ConditionStatus::True]);
    pushing.cancel();
    pusher.await.unwrap();
    c.stop().await;
}

/// Heartbeat times are checkpointed beside the store, not written into it,
/// and come back after a crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn heartbeat_times_survive_a_crash_in_the_checkpoint() {
    let c = InProcess::start(2, Duration::from_secs(600)).await;
    for i in 0..2 {
        c.push(i, ConditionStatus::True, 1_000_000).await.unwrap();
    }
    // Ready nodes carry no taint; the eviction pass has caught up once so.
    let view = c.view.clone();
    eventually("no taints", || {
        let view = view.clone();
        async move { view.list().iter().all(|(n, _)| n.taints.is_empty()) }
    })
    .await;
    let renew = |t: i64| Lease {
        name: name(0),
        uid: String::new(),
        created: Micros(0),
        generation: 0,
        holder_identity: Some(name(0)),
        lease_duration_seconds: Some(40),
        acquire_time: None,
        renew_time: Some(Micros(t)),
        lease_transitions: None,
        owner_references: Vec::new(),
    };
    c.handle.create_lease(renew(1_000_000)).await.unwrap();
    let flushes = c.metrics.store_flushes.get();
    // Heartbeats only: nothing is written into the store.
    let beat = 1_764_576_000_000_000;
    c.push(0, ConditionStatus::True, beat).await.unwrap();
    let lease = c.handle.update_lease(renew(beat), None).await.unwrap();
    assert_eq!(lease.generation, 2);
    assert_eq!(c.metrics.store_flushes.get(), flushes);
    let checkpoint = c.dir.path().join("db").join("heartbeats");
    let stored = c.store.clone();
    eventually("a checkpoint holds the newest heartbeat", || {
        let checkpoint = checkpoint.clone();
        async move {
            std::fs::read(&checkpoint)
                .ok()
                .and_then(|b| nodekeeper::store::heartbeats::HeartbeatCheckpoint::decode(&b).ok())
                .is_some_and(|cp| cp.nodes.iter().any(|n| n.conditions.contains(&beat)))
        }
    })
    .await;
    assert_eq!(c.metrics.store_flushes.get(), flushes);
    let recorded = stored.node(&name(0)).unwrap().unwrap();
    assert!(recorded.conditions[0].last_heartbeat.0 < beat);
    // A crash: the controller task is gone without its clean stop.
    c.task.abort();
    let _ = c.task.await;
    drop(stored);
    let (dir, free) = (c.dir, c.free);
    drop((c.store, c.view, c.metrics, c.handle));
    let mut reopened = None;
    for _ in 0..100 {
        // The aborted task's last handles on the store go with its runtime tasks.
        match Store::open(&dir.path().join("db"), &StoreOptions::default()) {
            Ok(store) => {
                reopened = Some(store);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
    drop(reopened.expect("the store reopens"));
    let c = InProcess::open(dir, 2, Duration::from_secs(600), free).await;
    let (node, _) = c.view.get(&name(0)).unwrap();
    assert_eq!(node.conditions[0].last_heartbeat.0, beat);
    let lease = c.view.lease(&name(0)).unwrap();
    assert_eq!(
        (lease.renew_time, lease.generation),
        (Some(Micros(beat)), 2)
    );
    c.stop().await;
}

/// Changes the controller answered are on disk: a kill right after the
/// answers loses none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_changes_survive_a_kill() {
    const NODES: usize = 200;
    let names: Vec<String> = (0..NODES).map(name).collect();
    let site = TestSite::named(&names, Ipv4Addr::new(127, 86, 9, 1)).start();
    let c = site.controller(&[]);
    let client = common::client();
    // The API serves before the static nodes are registered.
    eventually("every node is registered", || {
        let client = client.clone();
        let url = format!("{}/api/v1/nodes", c.url);
        async move {
            let Ok(r) = client.get(url).send().await else {
                return false;
            };
            let list: serde_json::Value = r.json().await.unwrap_or_default();
            list["items"]
                .as_array()
                .is_some_and(|items| items.len() == NODES)
        }
    })
    .await;
    let sends = (0..NODES).map(|i| {
        let client = client.clone();
        let url = format!("{}/api/v1/nodes/{}/status", c.url, name(i));
        async move {
            let body = serde_json::json!({"status": {"conditions": [{"type": "Ready", "status": "False",
                "lastHeartbeatTime": "2026-11-30T09:00:00Z", "reason": "KubeletNotReady", "message": "sick"}]}});
            let r = client
                .patch(url)
                .header("content-type", "application/strategic-merge-patch+json")
                .body(body.to_string())
                .send()
                .await
                .unwrap();
            r.status().as_u16()
        }
    });
    let codes = futures_util::future::join_all(sends).await;
    assert!(codes.iter().all(|c| *c == 200), "{codes:?}");
    c.kill9();
    let store = Store::open(&site.db, &StoreOptions::default()).unwrap();
    for i in 0..NODES {
        let node = store.node(&name(i)).unwrap().unwrap();
        assert_eq!(node.ready(), ConditionStatus::False, "{}", name(i));
    }
    let query = HistoryQuery {
        condition: Some("Ready".into()),
        ..HistoryQuery::default()
    };
    let changes = store
        .history(&query)
        .unwrap()
        .into_iter()
        .filter(|e| {
            matches!(
                e.kind,
                EventKind::ConditionChanged {
                    to: ConditionStatus::False,
                    ..
                }
            )
        })
        .count();
    assert_eq!(changes, NODES);
}
