//! What one kubelet heartbeat costs the HTTP API in-process: the
//! allocations of a status `PATCH` and of a Lease `PUT` through the router
//! (guard, handler, the round trip to the controller, the reply), counted
//! per request by a counting allocator, and checked against a ceiling so a
//! change that brings them back up fails here. The controller is a stand-in
//! task that answers each push with a stored node or Lease; its own work is
//! not counted (it is the controller's, measured elsewhere).
//!
//! `cargo test --release --test heartbeat_cost -- --ignored --nocapture`
//! prints the CPU per request as well (never asserted: timings are noise
//! on a shared machine). With `HEARTBEAT_TRACE=1` (and `--nocapture`) the
//! counting test prints where each allocation of one request of each kind
//! is made, a line of the innermost frames each.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt;
use tower::ServiceExt;

use nodekeeper::controller::{ControllerHandle, StatusAnswer, WriteRequest};
use nodekeeper::model::{
    Address, AddressKind, Condition, ConditionStatus, Lease, Micros, Node, NodeInfo, Resources,
};
use nodekeeper::server::{AppState, SharedState};
use nodekeeper::store::{Store, StoreOptions};
use nodekeeper::view::View;

mod common;

use common::{allocations, uncounted};

#[global_allocator]
static ALLOCATOR: common::Counting = common::Counting;

const NAME: &str = "sim-p0-00042";

/// A node as a simulated kubelet leaves it: the four conditions a kubelet
/// keeps, its address, capacity and `nodeInfo`.
fn node(name: &str) -> Node {
    let at = Micros(1_764_000_000_000_000);
    let condition = |kind: &str, status, reason: &str, message: &str| Condition {
        kind: kind.into(),
        status,
        last_heartbeat: at,
        last_transition: at,
        reason: reason.into(),
        message: message.into(),
    };
    Node {
        name: name.into(),
        uid: "0b6c9c3e-2f55-4a43-9a4b-1c7e1f7c1a10".into(),
        created: at,
        resource_version: 12_345,
        source: "static".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        external_id: name.into(),
        provider_id: String::new(),
        capacity: Resources {
            cpu_millis: 1000,
            memory_bytes: 3 << 30,
        },
        unschedulable: false,
        taints: Vec::new(),
        addresses: vec![Address {
            kind: AddressKind::InternalIP,
            address: "127.70.0.42".into(),
        }],
        conditions: vec![
            condition(
                "Ready",
                ConditionStatus::True,
                "KubeletReady",
                "kubelet is posting ready status",
            ),
            condition(
                "MemoryPressure",
                ConditionStatus::False,
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
            ),
            condition(
                "DiskPressure",
                ConditionStatus::False,
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
            ),
            condition(
                "PIDPressure",
                ConditionStatus::False,
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
            ),
        ],
        node_info: NodeInfo {
            machine_id: name.into(),
            system_uuid: name.into(),
            boot_id: "5d0e5b8c-54a4-4f7e-9a53-0c1e3e0f6f21".into(),
            kernel_version: "6.1.0-sim".into(),
            os_image: "nodekeeper simulated kubelet".into(),
            container_runtime_version: "sim://1.0.0".into(),
            kubelet_version: "v1.33.0".into(),
            kube_proxy_version: String::new(),
            operating_system: "linux".into(),
            architecture: "amd64".into(),
        },
        reported: Default::default(),
    }
}

fn lease(name: &str) -> Lease {
    Lease {
        name: name.into(),
        uid: "7a1f3c52-08d4-4c8e-b1b4-5b0c9e7d2a11".into(),
        created: Micros(1_764_000_000_000_000),
        generation: 12_346,
        holder_identity: Some(name.into()),
        lease_duration_seconds: Some(40),
        acquire_time: None,
        renew_time: Some(Micros(1_764_000_010_123_456)),
        lease_transitions: None,
        owner_references: Vec::new(),
    }
}

/// The router over a view of 1,000 nodes and their Leases, and a stand-in
/// controller task answering every status push with the stored node and
/// every renewal with the Lease renewed.
fn server(dir: &tempfile::TempDir) -> Router {
    let store = Store::open(&dir.path().join("db"), &StoreOptions::default()).unwrap();
    let (controller, mut pushes) = ControllerHandle::channel();
    let view = Arc::new(View::default());
    let names: Vec<String> = (0..1000).map(|i| format!("sim-p0-{i:05}")).collect();
    view.publish(names.iter().map(|n| node(n)), &[]);
    view.publish_leases(names.iter().map(|n| lease(n)), &[]);
    let answer = Arc::new(node(NAME));
    tokio::spawn(async move {
        while let Some(push) = pushes.recv().await {
            uncounted(|| match push {
                WriteRequest::Status { reply, .. } => {
                    let _ = reply.send(Ok(StatusAnswer::Now(answer.clone())));
                }
                WriteRequest::UpdateLease { lease, reply, .. } => {
                    let renewed = Lease {
                        generation: 12_347,
                        uid: "7a1f3c52-08d4-4c8e-b1b4-5b0c9e7d2a11".into(),
                        created: Micros(1_764_000_000_000_000),
                        ..lease
                    };
                    let _ = reply.send(Ok(renewed));
                }
                _ => panic!("only heartbeats are sent here"),
            });
        }
    });
    nodekeeper::server::router(AppState::new(SharedState {
        view,
        store: Arc::new(store),
        metrics: Arc::new(nodekeeper::metrics::Metrics::new()),
        controller,
        shutdown: Default::default(),
        mirror: None,
        health: nodekeeper::readiness::Health::new(),
        node_json: Default::default(),
    }))
}

/// A kubelet's status patch in the steady state: each condition's new
/// heartbeat, by type, as the simulated kubelets send it.
fn status_patch() -> Request<Body> {
    let at = "2026-12-02T11:30:10Z";
    let types = ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"];
    let body = serde_json::json!({"status": {
        "$setElementOrder/conditions": types.map(|t| serde_json::json!({"type": t})),
        "conditions": types.map(|t| serde_json::json!({"lastHeartbeatTime": at, "type": t})),
    }});
    Request::builder()
        .method("PATCH")
        .uri(format!("/api/v1/nodes/{NAME}/status"))
        .header("content-type", "application/strategic-merge-patch+json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// A kubelet's Lease renewal as the simulated kubelets send it.
fn lease_put() -> Request<Body> {
    let body = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": NAME,
            "leaseDurationSeconds": 40,
            "renewTime": "2026-12-02T11:30:10.123456Z",
        },
    });
    Request::builder()
        .method("PUT")
        .uri(format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NAME}"
        ))
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap()
}

/// The same renewal as a kubelet sends it by default: in Kubernetes
/// protobuf (`pkg/kubelet/apis/config/v1beta1/defaults.go:218`), written by
/// the simulated kubelets' encoder.
fn lease_put_protobuf() -> Request<Body> {
    let body = serde_json::json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": NAME, "namespace": "kube-node-lease"},
        "spec": {
            "holderIdentity": NAME,
            "leaseDurationSeconds": 40,
            "renewTime": "2026-12-02T11:30:10.123456Z",
        },
    });
    Request::builder()
        .method("PUT")
        .uri(format!(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{NAME}"
        ))
        .header("content-type", nodekeeper_sim::protobuf::PROTOBUF)
        .body(Body::from(nodekeeper_sim::protobuf::encode(&body)))
        .unwrap()
}

/// One request through the router: its status, and the allocations made
/// from the call until the response is back (the body is read after).
async fn send(router: &Router, request: Request<Body>) -> (StatusCode, u64) {
    let router = router.clone();
    let before = allocations();
    let response = router.oneshot(request).await.unwrap();
    let made = allocations() - before;
    let status = response.status();
    let body = response.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(status, StatusCode::OK, "{}", String::from_utf8_lossy(&body));
    (status, made)
}

/// The allocations of `make()`'s request, the least of many (the first
/// requests also fill the runtime's and the channel's lazily made parts).
async fn allocations_of(router: &Router, make: fn() -> Request<Body>) -> u64 {
    let mut least = u64::MAX;
    for _ in 0..200 {
        let request = uncounted(make);
        let (_, made) = send(router, request).await;
        least = least.min(made);
    }
    least
}

/// The allocations of one request at most, as measured when they were
/// last set; a change that allocates more per heartbeat fails here. A
/// status patch takes the one path every patch takes: the patch read as
/// JSON, merged onto the parts of the node it names, read back as a Node
/// (docs/benchmarks.md, "Pushed heartbeats", gives its CPU).
const STATUS_PATCH_ALLOCATIONS: u64 = 143;
const LEASE_PUT_ALLOCATIONS: u64 = 37;
// A protobuf body is read into JSON first (docs/decisions/protobuf-bodies.md).
const PROTOBUF_LEASE_PUT_ALLOCATIONS: u64 = 42;

#[tokio::test(flavor = "current_thread")]
async fn a_heartbeat_allocates_no_more_than_it_did() {
    let dir = tempfile::tempdir().unwrap();
    let router = server(&dir);
    let status = allocations_of(&router, status_patch).await;
    let lease = allocations_of(&router, lease_put).await;
    let protobuf = allocations_of(&router, lease_put_protobuf).await;
    if std::env::var_os("HEARTBEAT_TRACE").is_some() {
        for make in [
            status_patch as fn() -> Request<Body>,
            lease_put,
            lease_put_protobuf,
        ] {
            let request = uncounted(make);
            eprintln!("{} {}:", request.method(), request.uri());
            common::set_tracing(true);
            let response = router.clone().oneshot(request).await;
            common::set_tracing(false);
            drop(response);
        }
    }
    println!(
        "allocations per request: status PATCH {status}, Lease PUT {lease}, \
         Lease PUT in protobuf {protobuf}"
    );
    assert!(
        status <= STATUS_PATCH_ALLOCATIONS,
        "a kubelet's status PATCH allocates {status} times, more than {STATUS_PATCH_ALLOCATIONS}"
    );
    assert!(
        lease <= LEASE_PUT_ALLOCATIONS,
        "a kubelet's Lease PUT allocates {lease} times, more than {LEASE_PUT_ALLOCATIONS}"
    );
    assert!(
        protobuf <= PROTOBUF_LEASE_PUT_ALLOCATIONS,
        "a kubelet's protobuf Lease PUT allocates {protobuf} times, more than \
         {PROTOBUF_LEASE_PUT_ALLOCATIONS}"
    );
}

/// This thread's CPU time so far, in nanoseconds (Linux's schedstat).
fn thread_cpu_ns() -> u64 {
    // Read outside any timed loop's requests; a blocking read of procfs.
    #[allow(clippy::disallowed_methods)]
    let text = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap();
    text.split_whitespace().next().unwrap().parse().unwrap()
}

/// CPU per request through the router, printed (run in release).
#[tokio::test(flavor = "current_thread")]
#[ignore = "prints CPU per request; run with --release -- --ignored --nocapture"]
async fn cpu_per_heartbeat() {
    let dir = tempfile::tempdir().unwrap();
    let router = server(&dir);
    const REQUESTS: u32 = 100_000;
    for (what, make) in [
        ("status PATCH", status_patch as fn() -> Request<Body>),
        ("Lease PUT", lease_put),
        ("Lease PUT in protobuf", lease_put_protobuf),
    ] {
        let requests: Vec<Request<Body>> = (0..REQUESTS).map(|_| make()).collect();
        let start = thread_cpu_ns();
        for request in requests {
            send(&router, request).await;
        }
        let per = (thread_cpu_ns() - start) as f64 / f64::from(REQUESTS);
        println!("{what}: {:.2} µs of CPU per request", per / 1000.0);
    }
}
