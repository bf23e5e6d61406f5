//! What `/metrics` costs with kube-state-metrics' node series: a site of
//! `--nodes` published nodes (five conditions each, zone and tier labels,
//! one node in ten tainted), scraped through the API's router in this
//! process (the handler and its whole body; no network), as Prometheus
//! scrapes it (OpenMetrics asked for). Prints per scrape: time (median and
//! worst), bytes, and the process's CPU time, in four cases: the first
//! scrape (every node rendered), scrapes with nothing changed, with 1% of
//! the nodes changed between scrapes, and with every node changed.
//!
//! `cargo run --release -p nodekeeper-sim --bin nodekeeper-metrics-bench -- --nodes 10000`

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use anyhow::{bail, Context, Result};
use axum::body::Body;
use axum::Router;
use clap::Parser;
use http_body_util::BodyExt;
use nodekeeper::controller::ControllerHandle;
use nodekeeper::metrics::{LabelsAllowlist, Metrics};
use nodekeeper::model::{
    Address, AddressKind, Condition, ConditionStatus, Micros, Node, NodeInfo, Resources, Taint,
};
use nodekeeper::process::ProcessFigures;
use nodekeeper::server::{AppState, SharedState};
use nodekeeper::store::{Store, StoreOptions};
use nodekeeper::view::View;
use tower::ServiceExt;

#[derive(Parser)]
struct Args {
    /// Nodes in the site.
    #[arg(long, default_value_t = 10_000)]
    nodes: usize,
    /// Scrapes measured in each case.
    #[arg(long, default_value_t = 20)]
    scrapes: usize,
    /// `--metric-labels-allowlist` of the controller scraped.
    #[arg(long, default_value = "nodes=[topology.kubernetes.io/zone]")]
    metric_labels_allowlist: String,
}

fn node(i: usize, rv: u64) -> Node {
    let condition = |kind: &str, status| Condition {
        kind: kind.into(),
        status,
        last_heartbeat: Micros(1_764_000_000_000_000),
        last_transition: Micros(1_764_000_000_000_000),
        reason: "KubeletReady".into(),
        message: "kubelet is posting ready status".into(),
    };
    let ready = if i.is_multiple_of(50) {
        ConditionStatus::Unknown
    } else {
        ConditionStatus::True
    };
    Node {
        name: format!("site-node-{i:05}"),
        uid: format!("uid-{i}"),
        created: Micros(1_764_000_000_000_000),
        resource_version: rv,
        source: "static".into(),
        labels: BTreeMap::from([
            (
                "topology.kubernetes.io/zone".into(),
                format!("rack-{}", i % 20),
            ),
            ("tier".into(), "gold".into()),
        ]),
        annotations: BTreeMap::new(),
        external_id: String::new(),
        provider_id: String::new(),
        capacity: Resources {
            cpu_millis: 4000,
            memory_bytes: 16 << 30,
        },
        unschedulable: false,
        taints: if i.is_multiple_of(10) {
            vec![Taint {
                key: "node.kubernetes.io/unreachable".into(),
                value: String::new(),
                effect: "NoExecute".into(),
                added: None,
            }]
        } else {
            Vec::new()
        },
        addresses: vec![Address {
            kind: AddressKind::InternalIP,
            address: format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255),
        }],
        conditions: vec![
            condition("MemoryPressure", ConditionStatus::False),
            condition("DiskPressure", ConditionStatus::False),
            condition("PIDPressure", ConditionStatus::False),
            condition("NetworkUnavailable", ConditionStatus::False),
            condition("Ready", ready),
        ],
        node_info: NodeInfo {
            kernel_version: "6.1.0-28-amd64".into(),
            os_image: "Debian GNU/Linux 12 (bookworm)".into(),
            container_runtime_version: "containerd://1.7.24".into(),
            kubelet_version: "v1.33.1".into(),
            system_uuid: format!("4c4c4544-{i:04}"),
            ..NodeInfo::default()
        },
        reported: Default::default(),
    }
}

struct Scrape {
    took: Duration,
    bytes: usize,
}

async fn scrape(router: &Router) -> Result<Scrape> {
    let request = http::Request::builder()
        .uri("/metrics")
        .header(
            "accept",
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
        )
        .body(Body::empty())?;
    let started = Instant::now();
    let response = router.clone().oneshot(request).await?;
    if !response.status().is_success() {
        bail!("/metrics answered {}", response.status());
    }
    let body = response.into_body().collect().await?.to_bytes();
    Ok(Scrape {
        took: started.elapsed(),
        bytes: body.len(),
    })
}

fn cpu() -> f64 {
    ProcessFigures::of_self().map_or(0.0, |p| p.cpu_seconds)
}

/// Scrapes `n` times, calling `between` before each; prints the figures.
async fn case(
    label: &str,
    router: &Router,
    n: usize,
    mut between: impl FnMut(usize),
) -> Result<()> {
    let mut times = Vec::with_capacity(n);
    let mut bytes = 0;
    let mut cpu_spent = 0.0;
    for i in 0..n {
        between(i);
        let before = cpu();
        let s = scrape(router).await?;
        cpu_spent += cpu() - before;
        times.push(s.took);
        bytes = s.bytes;
    }
    times.sort();
    println!(
        "{label:<28} {:>9.1} ms {:>9.1} ms {:>11} B {:>9.1} ms",
        times[times.len() / 2].as_secs_f64() * 1e3,
        times[times.len() - 1].as_secs_f64() * 1e3,
        bytes,
        cpu_spent / n as f64 * 1e3,
    );
    Ok(())
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<()> {
    let args = Args::parse();
    if args.nodes == 0 || args.scrapes == 0 {
        bail!("--nodes and --scrapes must be more than zero");
    }
    let dir = tempfile::tempdir()?;
    let store = Store::open(&dir.path().join("db"), &StoreOptions::default())
        .context("opening a scratch store")?;
    let view = Arc::new(View::default());
    let mut rv = 1;
    view.publish((0..args.nodes).map(|i| node(i, rv)), &[]);
    let allowlist = LabelsAllowlist::parse(&args.metric_labels_allowlist)
        .map_err(|e| anyhow::anyhow!("--metric-labels-allowlist: {e}"))?;
    let (controller, _pushes) = ControllerHandle::channel();
    let router = nodekeeper::server::router(AppState::new(SharedState {
        view: view.clone(),
        store: Arc::new(store),
        metrics: Arc::new(Metrics::new().with_labels_allowlist(allowlist)),
        controller,
        shutdown: Default::default(),
        mirror: None,
        health: nodekeeper::readiness::Health::new(),
        node_json: Default::default(),
    }));
    println!(
        "{} nodes, {} scrapes a case (OpenMetrics); per scrape:",
        args.nodes, args.scrapes
    );
    println!(
        "{:<28} {:>12} {:>12} {:>13} {:>12}",
        "case", "median", "worst", "bytes", "CPU"
    );
    case("first (all rendered)", &router, 1, |_| {}).await?;
    case("nothing changed", &router, args.scrapes, |_| {}).await?;
    let step = 100;
    case("1% of nodes changed", &router, args.scrapes, |s| {
        rv += 1;
        let changed: Vec<Node> = (0..args.nodes)
            .filter(|i| (i + s) % step == 0)
            .map(|i| node(i, rv))
            .collect();
        view.publish(changed, &[]);
    })
    .await?;
    case("every node changed", &router, args.scrapes, |_| {
        rv += 1;
        view.publish((0..args.nodes).map(|i| node(i, rv)), &[]);
    })
    .await?;
    Ok(())
}
