//! The floor under any server of pushed heartbeats: the least an HTTP
//! server on the controller's stack (hyper's HTTP/1.1 connections serving
//! an axum router, one task per connection, on a multi-thread tokio
//! runtime) must do to answer what pushing simulated kubelets send, so a
//! benchmark (`nodekeeper-bench --push --floor`) can tell this machine's
//! share of a heartbeat's cost (kernel, runtime, HTTP) from the controller's.
//!
//! It answers exactly what the sims send, with as little work as keeps
//! them sending the same:
//! - `POST .../leases`: 201 with the Lease sent, and `PUT .../leases/{name}`:
//!   200 with it, echoed (the sims read only the status); a sim first looks
//!   for its Lease (404 here) and reads its node for the owner;
//! - `GET /api/v1/nodes/{name}`: 200 with the node as below;
//! - `PATCH /api/v1/nodes/{name}/status`: 200 with the node, rendered once
//!   at start in the controller's shape and size ([`stored_node`]); the sims
//!   read its conditions and send their next patch against them, which in
//!   the steady state is the same patch as against the controller;
//! - `GET /apis/storage.k8s.io/v1/csinodes/{name}`: 200 with a CSINode of
//!   no drivers, as for a kubelet that restarts, so a sim's CSINode
//!   initialisation at start ends there;
//! - anything else: 404 with a `Status`.
//!
//! There is no store, no registry, no metrics and no Ready count.

use std::collections::HashMap;
use std::io;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{patch, post, put};
use axum::{Json, Router};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use jiff::Timestamp;
use serde::Deserialize;
use serde_json::json;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::push::SIM_KUBELET_VERSION;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases";
/// Leases and status patches are a few hundred bytes; the controller's cap is larger, no matter.
const MAX_BODY: usize = 64 * 1024;
/// How long connections may finish their request once the floor stops.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(2);
/// After an accept error that is not the client's (EMFILE), wait this long before the next.
const ACCEPT_PAUSE: Duration = Duration::from_millis(100);
/// The controller's resource versions at 10,000 nodes have five digits.
const FIRST_RESOURCE_VERSION: u64 = 10_000;

/// A node as a sim's `--write-nodes-file` lists it.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct FloorNode {
    pub name: String,
    pub address: String,
}

/// Why the floor cannot start.
#[derive(Debug, thiserror::Error)]
pub enum FloorError {
    #[error("cannot read the nodes file {path}: {source}")]
    Read { path: String, source: io::Error },
    #[error(
        "the nodes file {path} is not a JSON array of {{\"name\", \"address\"}} objects ({source}); \
         give the file a sim wrote with --write-nodes-file"
    )]
    Parse {
        path: String,
        source: serde_json::Error,
    },
    #[error("the nodes file {path} lists no node")]
    Empty { path: String },
}

/// The nodes of a sim's nodes file (or several merged).
pub fn read_nodes(path: &Path) -> Result<Vec<FloorNode>, FloorError> {
    let shown = path.display().to_string();
    // Read once at start, before the floor serves.
    #[allow(clippy::disallowed_methods)]
    let bytes = std::fs::read(path).map_err(|source| FloorError::Read {
        path: shown.clone(),
        source,
    })?;
    let nodes: Vec<FloorNode> =
        serde_json::from_slice(&bytes).map_err(|source| FloorError::Parse {
            path: shown.clone(),
            source,
        })?;
    if nodes.is_empty() {
        return Err(FloorError::Empty { path: shown });
    }
    Ok(nodes)
}

/// The node a status patch is answered with, as the controller answers it
/// (`metadata`, `spec`, and a `status` of addresses, capacity, the four
/// conditions a kubelet keeps with Ready first, `nodeInfo`, and the port,
/// features, images and runtime handlers the sims report), its times
/// `at`: the same keys in the same order, and the same size give or take
/// the digits of its resource version. Its conditions are those a Ready
/// sim node keeps, so a sim's next patch against it names each condition's
/// new heartbeat only.
pub fn stored_node(node: &FloorNode, at: Timestamp, resource_version: u64) -> String {
    let time = format!("{at:.0}");
    let condition = |kind: &str, status: &str, reason: &str, message: &str| {
        json!({
            "lastHeartbeatTime": time,
            "lastTransitionTime": time,
            "message": message,
            "reason": reason,
            "status": status,
            "type": kind,
        })
    };
    let name = &node.name;
    let resources = json!({"cpu": "1", "memory": "3Gi", "pods": "110"});
    let mut stored = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "annotations": {"nodekeeper.io/source": "static"},
            "creationTimestamp": time,
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux"},
            "name": name,
            "resourceVersion": resource_version.to_string(),
            "uid": uuid::Uuid::new_v4().to_string(),
        },
        "spec": {"externalID": name},
        "status": {
            "addresses": [{"address": node.address, "type": "InternalIP"}],
            "allocatable": resources,
            "capacity": resources,
            "conditions": [
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status"),
                condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                    "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                    "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID",
                    "kubelet has sufficient PID available"),
            ],
            "nodeInfo": {
                "architecture": std::env::consts::ARCH,
                "bootID": uuid::Uuid::new_v4().to_string(),
                "containerRuntimeVersion": "sim://1.0.0",
                "kernelVersion": "6.1.0-sim",
                "kubeProxyVersion": "",
                "kubeletVersion": SIM_KUBELET_VERSION,
                "machineID": name,
                "operatingSystem": "linux",
                "osImage": "nodekeeper simulated kubelet",
                "systemUUID": name,
            },
        },
    });
    // What the sims report beyond conditions, kept and shown as the
    // controller keeps and shows it.
    if let Some(status) = stored["status"].as_object_mut() {
        status.extend(crate::push::kubelet_report());
    }
    stored.to_string()
}

/// Each node's answer to a status patch, rendered once.
type StoredNodes = Arc<HashMap<String, Bytes>>;

/// The floor's routes over `nodes`, their answers rendered now.
pub fn router(nodes: &[FloorNode]) -> Router {
    let at = nodekeeper::model::Micros::now().timestamp();
    let stored: HashMap<String, Bytes> = nodes
        .iter()
        .zip(FIRST_RESOURCE_VERSION..)
        .map(|(node, version)| {
            (
                node.name.clone(),
                Bytes::from(stored_node(node, at, version)),
            )
        })
        .collect();
    Router::new()
        .route(LEASES, post(create_lease))
        .route(
            &format!("{LEASES}/{{name}}"),
            put(renew_lease).get(|UrlPath(name): UrlPath<String>| async move {
                not_found("leases.coordination.k8s.io", &name)
            }),
        )
        .route("/api/v1/nodes/{name}/status", patch(patch_status))
        .route("/api/v1/nodes/{name}", axum::routing::get(get_node))
        .route(
            "/apis/storage.k8s.io/v1/csinodes/{name}",
            axum::routing::get(get_csinode),
        )
        .fallback(|| async { not_found("resource", "") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(Arc::new(stored))
}

fn json_answer(status: StatusCode, body: Bytes) -> Response {
    (
        status,
        [(CONTENT_TYPE, HeaderValue::from_static("application/json"))],
        body,
    )
        .into_response()
}

fn not_found(resource: &str, name: &str) -> Response {
    (
        StatusCode::NOT_FOUND,
        Json(nodekeeper::k8s::not_found(resource, name)),
    )
        .into_response()
}

async fn create_lease(body: Bytes) -> Response {
    json_answer(StatusCode::CREATED, body)
}

async fn renew_lease(body: Bytes) -> Response {
    json_answer(StatusCode::OK, body)
}

async fn get_csinode(UrlPath(name): UrlPath<String>) -> Response {
    Json(json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": {"name": name, "resourceVersion": "1"},
        "spec": {"drivers": []},
    }))
    .into_response()
}

async fn get_node(State(stored): State<StoredNodes>, UrlPath(name): UrlPath<String>) -> Response {
    match stored.get(&name) {
        Some(node) => json_answer(StatusCode::OK, node.clone()),
        None => not_found("nodes", &name),
    }
}

async fn patch_status(
    State(stored): State<StoredNodes>,
    UrlPath(name): UrlPath<String>,
    // Read whole, as a server must before it answers on a kept-alive connection.
    _patch: Bytes,
) -> Response {
    match stored.get(&name) {
        Some(node) => json_answer(StatusCode::OK, node.clone()),
        None => not_found("nodes", &name),
    }
}

/// Serves `router` on `listener`, each connection on a task of its own, as
/// the controller does (without its connection cap, deadlines and
/// counters), until `shutdown`; then lets requests in flight finish for a
/// moment. A connection that sends no request for 30 s is closed (hyper's
/// header timeout).
pub async fn serve(listener: TcpListener, router: Router, shutdown: CancellationToken) {
    let connections = TaskTracker::new();
    // Ends on shutdown.
    loop {
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) if nodekeeper::server::is_connection_error(&e) => continue,
            Err(e) => {
                eprintln!("nodekeeper-floor: accepting a connection failed: {e}");
                tokio::time::sleep(ACCEPT_PAUSE).await;
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let stop = shutdown.clone();
        connections.spawn(async move {
            let served = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .serve_connection(TokioIo::new(tcp), service);
            let mut served = std::pin::pin!(served);
            tokio::select! {
                _ = served.as_mut() => {}
                _ = stop.cancelled() => {
                    served.as_mut().graceful_shutdown();
                    let _ = tokio::time::timeout(SHUTDOWN_GRACE, served).await;
                }
            }
        });
    }
    drop(listener);
    connections.close();
    let _ = tokio::time::timeout(SHUTDOWN_GRACE * 2, connections.wait()).await;
}

/// What the controller answered a status patch with (captured from a
/// running controller, then the port, features, images and runtime
/// handlers the sims report added where and as it writes them): the
/// floor's stored node must look the same.
#[cfg(test)]
pub(crate) const CONTROLLER_REPLY: &str = r#"{"apiVersion":"v1","kind":"Node","metadata":{"annotations":{"nodekeeper.io/source":"static"},"creationTimestamp":"2026-12-02T06:15:39Z","labels":{"kubernetes.io/hostname":"sim-p0-00000","kubernetes.io/os":"linux"},"name":"sim-p0-00000","resourceVersion":"10","uid":"04449d6c-8835-48a7-98c6-be0206ce85d6"},"spec":{"externalID":"sim-p0-00000"},"status":{"addresses":[{"address":"127.72.0.1","type":"InternalIP"}],"allocatable":{"cpu":"1","memory":"3Gi","pods":"110"},"capacity":{"cpu":"1","memory":"3Gi","pods":"110"},"conditions":[{"lastHeartbeatTime":"2026-12-02T06:15:44Z","lastTransitionTime":"2026-12-02T06:15:42Z","message":"kubelet is posting ready status","reason":"KubeletReady","status":"True","type":"Ready"},{"lastHeartbeatTime":"2026-12-02T06:15:44Z","lastTransitionTime":"2026-12-02T06:15:42Z","message":"kubelet has sufficient memory available","reason":"KubeletHasSufficientMemory","status":"False","type":"MemoryPressure"},{"lastHeartbeatTime":"2026-12-02T06:15:44Z","lastTransitionTime":"2026-12-02T06:15:42Z","message":"kubelet has no disk pressure","reason":"KubeletHasNoDiskPressure","status":"False","type":"DiskPressure"},{"lastHeartbeatTime":"2026-12-02T06:15:44Z","lastTransitionTime":"2026-12-02T06:15:42Z","message":"kubelet has sufficient PID available","reason":"KubeletHasSufficientPID","status":"False","type":"PIDPressure"}],"daemonEndpoints":{"kubeletEndpoint":{"Port":10250}},"features":{"supplementalGroupsPolicy":true},"images":[{"names":["docker.io/library/nginx:1.27"],"sizeBytes":72955450},{"names":["registry.k8s.io/kube-proxy:v1.33.0"],"sizeBytes":31252360},{"names":["registry.k8s.io/pause:3.10"],"sizeBytes":320368}],"nodeInfo":{"architecture":"x86_64","bootID":"7d3c7a56-2f0e-4d7f-a0a3-5f8a7e7b1c11","containerRuntimeVersion":"sim://1.0.0","kernelVersion":"6.1.0-sim","kubeProxyVersion":"","kubeletVersion":"v1.33.0-nodekeeper-sim.0.1.0","machineID":"sim-p0-00000","operatingSystem":"linux","osImage":"nodekeeper simulated kubelet","systemUUID":"sim-p0-00000"},"runtimeHandlers":[{"features":{"recursiveReadOnlyMounts":true,"userNamespaces":false}},{"features":{"recursiveReadOnlyMounts":true,"userNamespaces":false},"name":"runc"}]}}"#;

#[cfg(test)]
mod tests {
    use std::net::Ipv4Addr;

    use serde_json::Value;
    use tokio::time::timeout;

    use super::*;
    use crate::{Fleet, FleetConfig, KubeletState, PushConfig};

    /// The keys and kinds of values of a JSON document, with every string
    /// and number replaced by its kind, the array items in order.
    fn shape(v: &Value) -> Value {
        match v {
            Value::Object(map) => {
                Value::Array(map.iter().map(|(k, v)| json!([k, shape(v)])).collect())
            }
            Value::Array(items) => Value::Array(items.iter().map(shape).collect()),
            Value::String(_) => json!("string"),
            other => json!(format!("{other:?}").split('(').next().unwrap_or("")),
        }
    }

    fn node() -> FloorNode {
        FloorNode {
            name: "sim-p0-00000".into(),
            address: "127.72.0.1".into(),
        }
    }

    #[test]
    fn the_stored_node_has_the_controllers_shape_and_size() {
        let at: Timestamp = "2026-12-02T06:15:39Z".parse().unwrap();
        let stored = stored_node(&node(), at, 10);
        let ours: Value = serde_json::from_str(&stored).unwrap();
        let theirs: Value = serde_json::from_str(CONTROLLER_REPLY).unwrap();
        // Key order too: the shape is compared as written.
        assert_eq!(shape(&ours), shape(&theirs));
        let types: Vec<&str> = ours["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap())
            .collect();
        assert_eq!(
            types,
            ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"]
        );
        // Only the architecture may differ in length (the capture is of x86_64).
        let arch = std::env::consts::ARCH.len() as i64 - "x86_64".len() as i64;
        assert_eq!(
            stored.len() as i64,
            CONTROLLER_REPLY.len() as i64 + arch,
            "{stored}"
        );
    }

    #[test]
    fn a_bad_nodes_file_says_what_to_give() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("nodes.json");
        #[allow(clippy::disallowed_methods)]
        std::fs::write(&file, r#"{"name": "x"}"#).unwrap();
        let e = read_nodes(&file).unwrap_err();
        assert!(e.to_string().contains("--write-nodes-file"), "{e}");
        #[allow(clippy::disallowed_methods)]
        std::fs::write(&file, "[]").unwrap();
        assert!(matches!(read_nodes(&file), Err(FloorError::Empty { .. })));
        assert!(matches!(
            read_nodes(&dir.path().join("missing")),
            Err(FloorError::Read { .. })
        ));
    }

    /// Upper bound for things that happen at once; only reached when a test fails.
    const LIMIT: Duration = Duration::from_secs(10);

    /// Waits until the fleet's push counters satisfy `f`; bounded.
    async fn wait_pushes(fleet: &Fleet, f: impl Fn(&crate::PushStats) -> bool) -> crate::PushStats {
        timeout(LIMIT, async {
            // Ends when `f` holds; each turn waits a moment of real time (the sims push on their own).
            loop {
                let stats = fleet.handle().push_stats().expect("pushing");
                if f(&stats) {
                    return stats;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            panic!(
                "the fleet's pushes in time: {:?}",
                fleet.handle().push_stats()
            )
        })
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sims_push_to_the_floor_and_time_a_change_of_state() {
        let fleet_token = CancellationToken::new();
        let fleet = Fleet::start(
            FleetConfig {
                nodes: 3,
                base_ip: Ipv4Addr::new(127, 77, 40, 1),
                port: 0,
                ..FleetConfig::default()
            },
            fleet_token.clone(),
        )
        .await
        .expect("fleet starts");
        let nodes: Vec<FloorNode> = fleet
            .nodes()
            .iter()
            .map(|n| FloorNode {
                name: n.name.clone(),
                address: n.address.ip().to_string(),
            })
            .collect();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let floor_token = CancellationToken::new();
        let floor = tokio::spawn(serve(listener, router(&nodes), floor_token.clone()));
        fleet
            .start_pushing(PushConfig {
                lease_renew_interval: Duration::from_millis(50),
                status_update_interval: Duration::from_millis(50),
                ..PushConfig::new(format!("http://{addr}"))
            })
            .expect("pushing starts");
        // Every node creates its Lease, renews it, and has its status patches taken.
        let stats = wait_pushes(&fleet, |s| s.leases >= 6 && s.statuses >= 6).await;
        assert_eq!((stats.failed, &stats.last_error), (0, &None));
        assert_eq!(stats.connections, 3, "one kept-alive connection per node");
        assert_eq!(stats.last_change, None);

        // Turned sick at once: every change answered, timed from the request.
        fleet.handle().set_all(KubeletState::Sick);
        let stats = wait_pushes(&fleet, |s| {
            s.last_change.as_ref().is_some_and(|c| c.all_answered())
        })
        .await;
        let change = stats.last_change.expect("timed");
        assert_eq!((change.requested, change.answered), (Some(3), 3));
        let (request, notice) = (
            change.from_request_us.expect("answers"),
            change.from_notice_us.expect("answers"),
        );
        assert_eq!(change.last_answer_us, Some(request.max));
        assert!(request.p50 <= request.p99 && request.p99 <= request.max);
        assert!(notice.max <= request.max, "{notice:?} {request:?}");
        // Setting them sick again changes nothing, and owes nothing.
        fleet.handle().set_all(KubeletState::Sick);
        let change = fleet.handle().push_stats().unwrap().last_change.unwrap();
        assert_eq!((change.requested, change.answered), (Some(0), 0));
        assert!(change.all_answered());

        // A reconnect storm: every node drops its connection, opens a new
        // one and has a heartbeat answered on it, timed from the request.
        nodekeeper::install_crypto_provider();
        let client = reqwest::Client::builder().no_proxy().build().unwrap();
        let before = fleet.handle().push_stats().unwrap().connections;
        assert_eq!(stats.last_reconnect, None);
        let answer: Value = client
            .post(format!("http://{}/reconnect", fleet.control_addr()))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(answer, serde_json::json!({"nodes": 3}));
        let stats = wait_pushes(&fleet, |s| {
            s.last_reconnect.as_ref().is_some_and(|c| c.all_answered())
        })
        .await;
        let reconnect = stats.last_reconnect.expect("timed");
        assert_eq!((reconnect.requested, reconnect.answered), (Some(3), 3));
        assert_eq!(stats.connections, before + 3, "a new connection each");
        assert_eq!((stats.failed, &stats.last_error), (0, &None));

        // A status patch for a node it does not know is refused with a Status.
        let answer = client
            .patch(format!("http://{addr}/api/v1/nodes/nobody/status"))
            .body("{}")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 404);
        let status: Value = answer.json().await.unwrap();
        assert_eq!(status["reason"], "NotFound");

        fleet_token.cancel();
        timeout(LIMIT, fleet.closed()).await.expect("fleet stops");
        floor_token.cancel();
        timeout(LIMIT, floor).await.expect("floor stops").unwrap();
    }
}
