//! The calls a kubelet makes beyond its heartbeats, with
//! `--kubelet-calls all` (`KubeletCalls::All`), as docs/kubelet-api.md
//! lists them for a v1.33 kubelet (kubernetes v1.33.13):
//!
//! - its reflectors (section 2.4), one task and one connection each, started
//!   with the node as `NewMainKubelet` starts them: its own node
//!   (`pkg/kubelet/kubelet.go:472-479`), services with a cluster IP
//!   (`kubelet.go:538-546`), the pods bound to it
//!   (`pkg/kubelet/config/apiserver.go:38`, `:66`), CSIDrivers
//!   (`pkg/kubelet/volume_host.go:70-73`) and RuntimeClasses
//!   (`pkg/kubelet/runtimeclass/runtimeclass_manager.go:38-39`, started at
//!   `kubelet.go:1814`). Each lists (`limit=500&resourceVersion=0`, pages
//!   followed), then watches from the list's version with bookmarks and a
//!   `timeoutSeconds` of 300–600 (client-go `tools/cache/reflector.go`); an
//!   ended watch is watched again from the newest version seen, a 410 (as
//!   an answer or as an `ERROR` event) lists again, any other failure lists
//!   again after a back-off of 0.8 s doubling to 30 s;
//! - its start events (section 2.5), posted in protobuf to
//!   `/api/v1/namespaces/default/events` once the node is registered:
//!   `Starting` (`kubelet.go` `BirthCry`), `NodeHasSufficientMemory`,
//!   `NodeHasNoDiskPressure`, `NodeHasSufficientPID`
//!   (`pkg/kubelet/nodestatus/setters.go` `MemoryPressureCondition`,
//!   `DiskPressureCondition`, `PIDPressureCondition`),
//!   `NodeAllocatableEnforced` (`pkg/kubelet/cm/node_container_manager_linux.go`),
//!   then `NodeReady` or `NodeNotReady` at each change of readiness
//!   (`setters.go` `ReadyCondition`). A real kubelet's first events come
//!   before it registers and are refused (403) and dropped; these wait for
//!   the registration, so none is refused;
//! - the mirror pod of one static pod (section 2.6,
//!   `pkg/kubelet/pod/mirror_client.go:69-107`), once its CSINode is
//!   initialised (so its node is there, `kubelet.go:3331-3348`); a 409 means
//!   it is there from an earlier run, which a kubelet sees in its pods list.
//!   Then its status, once: get the pod, patch its status with the pod's
//!   uid as precondition (`pkg/kubelet/status/status_manager.go:885`, `:915`,
//!   `pkg/util/pod/pod.go:34-71`).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use tokio::sync::watch;
use tokio::time::Instant;

use super::node_status::time;
use super::{
    error_chain, pushes, read_capped, Answer, Failure, KubeletState, Link, Node, Pusher, Sent,
    MAX_ANSWER, NODES_PATH, PROTOBUF,
};
use crate::protobuf;

/// The kinds of call counted in `PushStats::calls`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum CallKind {
    NodesList,
    NodesWatch,
    ServicesList,
    ServicesWatch,
    PodsList,
    PodsWatch,
    CsiDriversList,
    CsiDriversWatch,
    RuntimeClassesList,
    RuntimeClassesWatch,
    Event,
    MirrorPod,
    MirrorPodStatus,
}

impl CallKind {
    pub const ALL: [CallKind; 13] = [
        CallKind::NodesList,
        CallKind::NodesWatch,
        CallKind::ServicesList,
        CallKind::ServicesWatch,
        CallKind::PodsList,
        CallKind::PodsWatch,
        CallKind::CsiDriversList,
        CallKind::CsiDriversWatch,
        CallKind::RuntimeClassesList,
        CallKind::RuntimeClassesWatch,
        CallKind::Event,
        CallKind::MirrorPod,
        CallKind::MirrorPodStatus,
    ];

    /// Its key in `PushStats::calls`.
    pub fn name(self) -> &'static str {
        match self {
            CallKind::NodesList => "nodes list",
            CallKind::NodesWatch => "nodes watch",
            CallKind::ServicesList => "services list",
            CallKind::ServicesWatch => "services watch",
            CallKind::PodsList => "pods list",
            CallKind::PodsWatch => "pods watch",
            CallKind::CsiDriversList => "csidrivers list",
            CallKind::CsiDriversWatch => "csidrivers watch",
            CallKind::RuntimeClassesList => "runtimeclasses list",
            CallKind::RuntimeClassesWatch => "runtimeclasses watch",
            CallKind::Event => "event",
            CallKind::MirrorPod => "mirror pod",
            CallKind::MirrorPodStatus => "mirror pod status",
        }
    }
}

/// One of a kubelet's reflectors.
struct Reflector {
    path: &'static str,
    /// The field selector, given the node's name ("" for none).
    selector: fn(&str) -> String,
    list: CallKind,
    watch: CallKind,
}

/// In the order a kubelet starts them.
const REFLECTORS: [Reflector; 5] = [
    Reflector {
        path: NODES_PATH,
        selector: |name| format!("fieldSelector=metadata.name%3D{}", escape(name)),
        list: CallKind::NodesList,
        watch: CallKind::NodesWatch,
    },
    Reflector {
        path: "/api/v1/services",
        selector: |_| "fieldSelector=spec.clusterIP%21%3DNone".to_owned(),
        list: CallKind::ServicesList,
        watch: CallKind::ServicesWatch,
    },
    Reflector {
        path: "/api/v1/pods",
        selector: |name| format!("fieldSelector=spec.nodeName%3D{}", escape(name)),
        list: CallKind::PodsList,
        watch: CallKind::PodsWatch,
    },
    Reflector {
        path: "/apis/storage.k8s.io/v1/csidrivers",
        selector: |_| String::new(),
        list: CallKind::CsiDriversList,
        watch: CallKind::CsiDriversWatch,
    },
    Reflector {
        path: "/apis/node.k8s.io/v1/runtimeclasses",
        selector: |_| String::new(),
        list: CallKind::RuntimeClassesList,
        watch: CallKind::RuntimeClassesWatch,
    },
];

/// How many connections `--kubelet-calls all` adds to each node's one.
pub const REFLECTOR_CONNECTIONS: u64 = REFLECTORS.len() as u64;

/// client-go's reflector back-off: 0.8 s doubling to 30 s (`reflector.go`).
const BACKOFF_FIRST: Duration = Duration::from_millis(800);
const BACKOFF_MAX: Duration = Duration::from_secs(30);
/// A watch event longer than this breaks the stream (a node's own objects
/// are far smaller).
const MAX_WATCH_LINE: usize = 1 << 20;
/// A list answered in more pages than this is an error.
const MAX_PAGES: usize = 100;

fn escape(value: &str) -> String {
    form_urlencoded::byte_serialize(value.as_bytes()).collect()
}

/// Starts the node's reflectors, each its own task and connection; they
/// stop on the fleet's shutdown.
pub(super) fn start_reflectors(pusher: &Arc<Pusher>, node: &Arc<Node>) {
    for reflector in &REFLECTORS {
        pusher
            .tracker
            .spawn(reflect(pusher.clone(), node.clone(), reflector));
    }
}

/// How a list-and-watch ended.
enum Turn {
    /// The fleet stops.
    Stop,
    /// List again at once (410, or the kubelet went down and came back).
    Relist,
    /// List again after the back-off.
    Failed,
}

/// One reflector of one node: list, then watch, again and again; while the
/// kubelet is down or hung it makes no call.
async fn reflect(pusher: Arc<Pusher>, node: Arc<Node>, reflector: &'static Reflector) {
    let p = &*pusher;
    let mut link = Link::new(p, &node);
    let mut state = node.state.subscribe();
    let mut backoff = BACKOFF_FIRST;
    // Ends on shutdown; each turn is one list and its watches.
    loop {
        // Bounded by the node's changes of state and the shutdown.
        while !pushes(*state.borrow_and_update()) {
            link.disconnect();
            tokio::select! {
                biased;
                _ = p.shutdown.cancelled() => return,
                changed = state.changed() => if changed.is_err() { return },
            }
        }
        match list_and_watch(&mut link, reflector, &mut state).await {
            Turn::Stop => return,
            Turn::Relist => backoff = BACKOFF_FIRST,
            Turn::Failed => {
                // Up to twice the back-off, as wait.Jitter(backoff, 1.0) does.
                let wait = backoff.mul_f64(1.0 + fastrand::f64());
                tokio::select! {
                    biased;
                    _ = p.shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => {}
                }
                backoff = (backoff * 2).min(BACKOFF_MAX);
            }
        }
    }
}

/// Lists (following pages), then watches from the list's version until a
/// watch fails or must relist.
async fn list_and_watch(
    link: &mut Link<'_>,
    reflector: &Reflector,
    state: &mut watch::Receiver<KubeletState>,
) -> Turn {
    let p = link.pusher;
    let selector = (reflector.selector)(&link.node.name);
    let sep = if selector.is_empty() { "" } else { "&" };
    let mut query = format!("{selector}{sep}limit=500&resourceVersion=0");
    let mut version = None;
    let mut complete = false;
    for _ in 0..MAX_PAGES {
        let list = match link
            .send(
                Method::GET,
                format!("{}?{query}", reflector.path),
                "",
                Bytes::new(),
            )
            .await
        {
            Sent::Answered(a) => a,
            Sent::Failed(message) => {
                p.failed(message);
                return Turn::Failed;
            }
            Sent::Stopped => return Turn::Stop,
        };
        if list.status == StatusCode::GONE {
            // An expired continue token: list again from the start.
            return Turn::Relist;
        }
        if !list.status.is_success() {
            p.refused(&list);
            return Turn::Failed;
        }
        let read = serde_json::from_slice::<Value>(&list.body).ok();
        let metadata = read.as_ref().map(|l| &l["metadata"]);
        let Some(rv) = metadata.and_then(|m| m["resourceVersion"].as_str()) else {
            broken(p, &list, "no metadata.resourceVersion in the list");
            return Turn::Failed;
        };
        version = Some(rv.to_owned());
        match metadata.and_then(|m| m["continue"].as_str()) {
            Some(token) if !token.is_empty() => {
                query = format!("{selector}{sep}limit=500&continue={}", escape(token));
            }
            _ => {
                complete = true;
                break;
            }
        }
    }
    let (true, Some(mut version)) = (complete, version) else {
        p.call_error(format!(
            "GET {}: more than {MAX_PAGES} pages",
            reflector.path
        ));
        return Turn::Failed;
    };
    p.answered(reflector.list);
    // Each watch runs until the server ends it; the next starts from the
    // newest version seen (reflector.go `watch`).
    loop {
        match watch_once(link, reflector, &selector, &mut version, state).await {
            Watched::Ended => continue,
            Watched::Turn(turn) => return turn,
        }
    }
}

enum Watched {
    /// The server ended the stream at its timeout: watch again.
    Ended,
    Turn(Turn),
}

/// One watch from `version`, read to its end, `version` kept up with what
/// it streams.
async fn watch_once(
    link: &mut Link<'_>,
    reflector: &Reflector,
    selector: &str,
    version: &mut String,
    state: &mut watch::Receiver<KubeletState>,
) -> Watched {
    let p = link.pusher;
    let sep = if selector.is_empty() { "" } else { "&" };
    // minWatchTimeout (5 min) times 1 + rand (reflector.go).
    let timeout_seconds = 300 + fastrand::u64(0..300);
    let path = format!(
        "{}?{selector}{sep}allowWatchBookmarks=true&resourceVersion={version}&timeoutSeconds={timeout_seconds}&watch=true",
        reflector.path
    );
    p.counters.sent.fetch_add(1, Ordering::Relaxed);
    let began = async {
        let reused = link.sender.as_ref().is_some_and(|s| !s.is_closed());
        match link.request(Method::GET, &path, "", Bytes::new()).await {
            // The server had closed the idle connection: once more on a new one.
            Err(Failure::NotTaken(_)) if reused => {
                link.sender = None;
                link.request(Method::GET, &path, "", Bytes::new()).await
            }
            other => other,
        }
    };
    let began = tokio::select! {
        biased;
        _ = p.shutdown.cancelled() => return Watched::Turn(Turn::Stop),
        r = tokio::time::timeout(p.config.request_timeout, began) => r,
    };
    let response = match began {
        Ok(Ok(response)) => response,
        Ok(Err(Failure::NotTaken(e) | Failure::Other(e))) => {
            link.disconnect();
            p.failed(format!("GET {path}: {e}"));
            return Watched::Turn(Turn::Failed);
        }
        Err(_) => {
            link.disconnect();
            p.failed(format!(
                "GET {path}: no answer within {}",
                nodekeeper::duration::format(p.config.request_timeout)
            ));
            return Watched::Turn(Turn::Failed);
        }
    };
    let status = response.status();
    if status == StatusCode::GONE {
        // Too old a version: list again (reflector.go `isExpiredError`).
        link.disconnect();
        return Watched::Turn(Turn::Relist);
    }
    if !status.is_success() {
        let body = read_capped(response.into_body(), MAX_ANSWER)
            .await
            .map(|(b, _)| b)
            .unwrap_or_default();
        link.disconnect();
        p.refused(&Answer {
            method: Method::GET,
            path,
            status,
            body,
        });
        return Watched::Turn(Turn::Failed);
    }
    p.answered(reflector.watch);
    let mut body = response.into_body();
    let mut buffer = BytesMut::new();
    // The server ends the stream at `timeoutSeconds`; past that and the
    // request timeout, it is stuck.
    let deadline = Instant::now() + Duration::from_secs(timeout_seconds) + p.config.request_timeout;
    let stream_error = |what: String| {
        p.call_error(format!("GET {path}: {what}"));
        p.failed(format!("GET {path}: {what}"));
        Watched::Turn(Turn::Failed)
    };
    // Ends with the stream, at the deadline, on shutdown, or when the
    // kubelet stops pushing.
    loop {
        let frame = tokio::select! {
            biased;
            _ = p.shutdown.cancelled() => return Watched::Turn(Turn::Stop),
            changed = state.changed() => {
                if changed.is_err() {
                    return Watched::Turn(Turn::Stop);
                }
                if pushes(*state.borrow_and_update()) {
                    continue;
                }
                link.disconnect();
                return Watched::Turn(Turn::Relist);
            }
            frame = tokio::time::timeout_at(deadline, body.frame()) => frame,
        };
        let data = match frame {
            Err(_) => {
                link.disconnect();
                return stream_error(format!(
                    "the watch ran past its timeoutSeconds={timeout_seconds}"
                ));
            }
            Ok(None) if buffer.is_empty() => return Watched::Ended,
            Ok(None) => {
                link.disconnect();
                return stream_error("the watch ended inside an event".to_owned());
            }
            Ok(Some(Err(e))) => {
                link.disconnect();
                return stream_error(format!("reading the watch: {}", error_chain(&e)));
            }
            Ok(Some(Ok(frame))) => match frame.into_data() {
                Ok(data) => data,
                Err(_) => continue,
            },
        };
        buffer.extend_from_slice(&data);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line = buffer.split_to(end + 1);
            let line = &line[..end];
            if line.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match event_version(line) {
                Ok(Some(rv)) => *version = rv,
                Ok(None) => {}
                Err(Expired) => {
                    link.disconnect();
                    return Watched::Turn(Turn::Relist);
                }
                Err(Broken(what)) => {
                    link.disconnect();
                    return stream_error(what);
                }
            }
        }
        if buffer.len() > MAX_WATCH_LINE {
            link.disconnect();
            return stream_error(format!("a watch event over {MAX_WATCH_LINE} bytes"));
        }
    }
}

/// Why a watch event ends the watch.
enum EventError {
    /// An `ERROR` event with a 410: list again.
    Expired,
    Broken(String),
}
use EventError::{Broken, Expired};

/// The resourceVersion an event carries, if any.
fn event_version(line: &[u8]) -> Result<Option<String>, EventError> {
    let event: Value = serde_json::from_slice(line)
        .map_err(|e| Broken(format!("a watch event that is not JSON: {e}")))?;
    match event["type"].as_str() {
        Some("ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK") => Ok(event["object"]["metadata"]
            ["resourceVersion"]
            .as_str()
            .map(str::to_owned)),
        Some("ERROR") if event["object"]["code"] == 410 => Err(Expired),
        Some("ERROR") => Err(Broken(format!(
            "an ERROR event: {}",
            event["object"]["message"].as_str().unwrap_or("no message")
        ))),
        _ => Err(Broken(format!(
            "a watch event of no known type: {}",
            String::from_utf8_lossy(&line[..line.len().min(200)])
        ))),
    }
}

/// A 2xx answer that is not what it should be.
fn broken(p: &Pusher, answer: &Answer, what: &str) {
    let text = format!("{} {}: {what}", answer.method, answer.path);
    p.call_error(text.clone());
    p.failed(text);
}

/// The events a kubelet posts for its node at start, in order: reason and message.
fn start_events() -> [(&'static str, &'static str); 5] {
    [
        ("Starting", "Starting kubelet."),
        ("NodeHasSufficientMemory", ""),
        ("NodeHasNoDiskPressure", ""),
        ("NodeHasSufficientPID", ""),
        (
            "NodeAllocatableEnforced",
            "Updated Node Allocatable limit across pods",
        ),
    ]
}

/// The static pod each simulated kubelet runs, whose mirror pod it posts.
const STATIC_POD: &str = "node-agent";
const MIRROR_PODS_NAMESPACE: &str = "kube-system";

/// What a node has posted of its start calls.
#[derive(Default)]
pub(super) struct StartCalls {
    /// How many of `start_events` were posted (or refused, and dropped).
    posted: usize,
    /// The readiness the last `NodeReady`/`NodeNotReady` event told.
    told_ready: Option<bool>,
    /// Events sent, so that two in the same nanosecond get two names.
    sent: u64,
    mirror_pod: bool,
    /// The mirror pod's status was patched.
    mirror_status: bool,
}

impl StartCalls {
    /// Posts the start events not yet posted, then `NodeReady` or
    /// `NodeNotReady` when readiness changed. An event refused is dropped,
    /// as the recorder drops it (`event.go:355-360`); one not answered is
    /// posted again next time.
    pub async fn events(&mut self, link: &mut Link<'_>, state: KubeletState) {
        let name = link.node.name.clone();
        while let Some((reason, message)) = start_events().get(self.posted).copied() {
            let message = if message.is_empty() {
                // recordNodeStatusEvent (kubelet_node_status.go).
                format!("Node {name} status is now: {reason}")
            } else {
                message.to_owned()
            };
            if !self.post(link, reason, &message).await {
                return;
            }
            self.posted += 1;
        }
        let ready = state != KubeletState::Sick;
        if self.told_ready != Some(ready) {
            let reason = if ready { "NodeReady" } else { "NodeNotReady" };
            let message = format!("Node {name} status is now: {reason}");
            if self.post(link, reason, &message).await {
                self.told_ready = Some(ready);
            }
        }
    }

    /// One event; false if it had no answer (to send again).
    async fn post(&mut self, link: &mut Link<'_>, reason: &str, message: &str) -> bool {
        let p = link.pusher;
        let name = &link.node.name;
        let now = p.node_now();
        self.sent += 1;
        let nanos = u64::try_from(now.as_nanosecond()).unwrap_or(0) + self.sent;
        let at = time(now);
        let event = json!({
            "apiVersion": "v1", "kind": "Event",
            // client-go tools/record/event.go makeEvent: NAME.<hex nanoseconds>.
            "metadata": {"name": format!("{name}.{nanos:x}"), "namespace": "default"},
            // kubelet.go:554-559: a Node's reference has its name as uid.
            "involvedObject": {"kind": "Node", "name": name, "uid": name},
            "reason": reason, "message": message,
            "source": {"component": "kubelet", "host": name},
            "firstTimestamp": at, "lastTimestamp": at,
            "count": 1, "type": "Normal",
            "reportingComponent": "kubelet", "reportingInstance": name,
        });
        let Some(answer) = link
            .answer(
                Method::POST,
                "/api/v1/namespaces/default/events".to_owned(),
                PROTOBUF,
                Bytes::from(protobuf::encode(&event)),
            )
            .await
        else {
            return false;
        };
        if answer.status.is_success() {
            p.answered(CallKind::Event);
        } else {
            p.refused(&answer);
        }
        true
    }

    /// Posts the mirror pod of the node's static pod, then its status, once each.
    pub async fn mirror_pod(&mut self, link: &mut Link<'_>) {
        if !self.mirror_pod {
            self.create_mirror_pod(link).await;
        }
        if self.mirror_pod && !self.mirror_status {
            self.mirror_status = patch_mirror_pod_status(link).await;
        }
    }

    async fn create_mirror_pod(&mut self, link: &mut Link<'_>) {
        let p = link.pusher;
        // The kubelet takes the uid from its node lister (mirror_client.go:145).
        let Some(uid) = link.node_uid().await else {
            return;
        };
        let node = link.node.name.clone();
        let hash = config_hash(&node);
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": format!("{STATIC_POD}-{node}"),
                "namespace": MIRROR_PODS_NAMESPACE,
                "labels": {"component": STATIC_POD},
                "annotations": {
                    "kubernetes.io/config.hash": hash,
                    "kubernetes.io/config.mirror": hash,
                    "kubernetes.io/config.source": "file",
                },
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                     "uid": uid, "controller": true}],
            },
            "spec": {
                "nodeName": node,
                "hostNetwork": true,
                "restartPolicy": "Always",
                "containers": [{"name": STATIC_POD, "image": "registry.k8s.io/pause:3.10"}],
            },
        });
        let Some(answer) = link
            .answer(
                Method::POST,
                format!("/api/v1/namespaces/{MIRROR_PODS_NAMESPACE}/pods"),
                PROTOBUF,
                Bytes::from(protobuf::encode(&pod)),
            )
            .await
        else {
            return;
        };
        match answer.status {
            s if s.is_success() => {
                p.answered(CallKind::MirrorPod);
                self.mirror_pod = true;
            }
            // Posted by an earlier run of this kubelet.
            StatusCode::CONFLICT => self.mirror_pod = true,
            // Posted again at the next sync, as the kubelet does.
            _ => p.refused(&answer),
        }
    }
}

/// The status manager's sync of the mirror pod's status
/// (`status_manager.go:885`, `:915`): get the pod, then a strategic merge
/// patch of its status carrying the pod's uid as precondition
/// (`pkg/util/pod/pod.go:34-71`). True once accepted.
async fn patch_mirror_pod_status(link: &mut Link<'_>) -> bool {
    let p = link.pusher;
    let node = link.node.name.clone();
    let path = format!("/api/v1/namespaces/{MIRROR_PODS_NAMESPACE}/pods/{STATIC_POD}-{node}");
    let Some(got) = link.get(path.clone()).await else {
        return false;
    };
    let uid = serde_json::from_slice::<Value>(&got.body)
        .ok()
        .and_then(|pod| pod["metadata"]["uid"].as_str().map(str::to_owned));
    let (true, Some(uid)) = (got.status.is_success(), uid) else {
        p.refused(&got);
        return false;
    };
    let ip = link.node.address.ip().to_string();
    let now = time(p.node_now());
    let patch = json!({
        "metadata": {"uid": uid},
        "status": {
            "$setElementOrder/conditions": [{"type": "Initialized"}, {"type": "Ready"}],
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": now},
                {"type": "Ready", "status": "True", "lastTransitionTime": now},
            ],
            "phase": "Running",
            "hostIP": ip, "hostIPs": [{"ip": ip}],
            "podIP": ip, "podIPs": [{"ip": ip}],
            "startTime": now,
            "containerStatuses": [{
                "name": STATIC_POD, "ready": true, "restartCount": 0, "started": true,
                "image": "registry.k8s.io/pause:3.10", "imageID": "",
                "containerID": format!("sim://{STATIC_POD}-{node}"),
                "state": {"running": {"startedAt": now}},
            }],
        },
    });
    let Some(answer) = link
        .answer(
            Method::PATCH,
            format!("{path}/status"),
            super::STRATEGIC_MERGE,
            Bytes::from(patch.to_string()),
        )
        .await
    else {
        return false;
    };
    if answer.status.is_success() {
        p.answered(CallKind::MirrorPodStatus);
        return true;
    }
    p.refused(&answer);
    false
}

/// The static pod's `kubernetes.io/config.hash`: a hash of the pod, which
/// here is the same for a node from run to run (FNV-1a of its name).
fn config_hash(node: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in STATIC_POD.bytes().chain(node.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{hash:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_events_give_their_version_or_say_why_the_watch_ends() {
        let line =
            br#"{"type":"BOOKMARK","object":{"kind":"Pod","metadata":{"resourceVersion":"42"}}}"#;
        assert_eq!(event_version(line).ok().flatten().as_deref(), Some("42"));
        let gone = br#"{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}"#;
        assert!(matches!(event_version(gone), Err(Expired)));
        let other = br#"{"type":"ERROR","object":{"kind":"Status","code":500,"message":"boom"}}"#;
        assert!(matches!(event_version(other), Err(Broken(m)) if m.contains("boom")));
        assert!(matches!(event_version(b"{not json"), Err(Broken(_))));
        assert!(matches!(
            event_version(br#"{"type":"HUH"}"#),
            Err(Broken(_))
        ));
    }

    #[test]
    fn reflectors_ask_what_a_kubelet_asks() {
        let queries: Vec<String> = REFLECTORS
            .iter()
            .map(|r| format!("{}?{}", r.path, (r.selector)("edge-1")))
            .collect();
        assert_eq!(
            queries,
            [
                "/api/v1/nodes?fieldSelector=metadata.name%3Dedge-1",
                "/api/v1/services?fieldSelector=spec.clusterIP%21%3DNone",
                "/api/v1/pods?fieldSelector=spec.nodeName%3Dedge-1",
                "/apis/storage.k8s.io/v1/csidrivers?",
                "/apis/node.k8s.io/v1/runtimeclasses?",
            ]
        );
        let names: Vec<&str> = CallKind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), 13);
        assert!(CallKind::ALL
            .iter()
            .enumerate()
            .all(|(i, k)| *k as usize == i));
    }

    /// A fake API server: every call but a watch answered 200 with an
    /// object of resourceVersion 1; watches as `watch` scripts them.
    #[derive(Clone, Default)]
    struct Script {
        /// The pods reflector's queries, in order.
        pods: Arc<std::sync::Mutex<Vec<String>>>,
        pods_watches: Arc<std::sync::atomic::AtomicUsize>,
        services_watches: Arc<std::sync::atomic::AtomicUsize>,
    }

    async fn answer(
        axum::extract::State(s): axum::extract::State<Script>,
        req: axum::extract::Request,
    ) -> axum::response::Response {
        use axum::body::Body;
        use axum::response::IntoResponse;
        let path = req.uri().path().to_owned();
        let query = req.uri().query().unwrap_or("").to_owned();
        if path == "/api/v1/pods" {
            s.pods.lock().unwrap().push(query.clone());
        }
        if !query.contains("watch=true") {
            let object = json!({"metadata": {"uid": "u1", "resourceVersion": "1"}});
            return axum::Json(object).into_response();
        }
        let line = |v: Value| Body::from(format!("{v}\n"));
        let n = match path.as_str() {
            "/api/v1/pods" => s.pods_watches.fetch_add(1, Ordering::SeqCst),
            "/api/v1/services" => s.services_watches.fetch_add(1, Ordering::SeqCst),
            _ => usize::MAX,
        };
        match (path.as_str(), n) {
            ("/api/v1/pods", 0) => (
                StatusCode::GONE,
                axum::Json(json!({"kind": "Status", "code": 410, "reason": "Expired"})),
            )
                .into_response(),
            // One event, then the end of the stream (its timeout).
            ("/api/v1/pods", 1) => line(json!({"type": "ADDED", "object": {
                "kind": "Pod", "metadata": {"name": "p", "resourceVersion": "5"}}}))
            .into_response(),
            ("/api/v1/pods", 2) => line(json!({"type": "ERROR", "object": {
                "kind": "Status", "code": 410, "reason": "Expired"}}))
            .into_response(),
            ("/api/v1/services", 0) => line(json!({"type": "ERROR", "object": {
                "kind": "Status", "code": 500, "message": "boom"}}))
            .into_response(),
            // Held open until the fleet stops.
            _ => {
                Body::from_stream(futures_util::stream::pending::<Result<Bytes, std::io::Error>>())
                    .into_response()
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reflectors_watch_again_list_again_on_410_count_errors_and_stop() {
        let script = Script::default();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = axum::Router::new()
            .fallback(answer)
            .with_state(script.clone());
        let server = tokio::spawn(async move { axum::serve(listener, app).await });
        let shutdown = tokio_util::sync::CancellationToken::new();
        let config = crate::FleetConfig {
            nodes: 1,
            base_ip: std::net::Ipv4Addr::new(127, 78, 0, 1),
            port: 0,
            ..crate::FleetConfig::default()
        };
        let fleet = crate::Fleet::start(config, shutdown.clone()).await.unwrap();
        let name = fleet.nodes()[0].name.clone();
        fleet
            .start_pushing(super::super::PushConfig {
                lease_renew_interval: Duration::from_millis(100),
                status_update_interval: Duration::from_millis(100),
                kubelet_calls: nodekeeper::cli::KubeletCalls::All,
                ..super::super::PushConfig::new(format!("http://{addr}"))
            })
            .unwrap();
        let handle = fleet.handle();
        let stats = || handle.push_stats().unwrap();
        let calls = |kind: &str| stats().calls.get(kind).copied().unwrap_or(0);
        let began = Instant::now();
        // The services watch's error costs a back-off of 0.8 to 1.6 s, then a list.
        while calls("pods watch") < 3
            || calls("services list") < 2
            || calls("mirror pod status") < 1
        {
            assert!(began.elapsed() < Duration::from_secs(10), "{:?}", stats());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let seen: Vec<String> = script
            .pods
            .lock()
            .unwrap()
            .iter()
            .map(|q| {
                assert!(
                    q.starts_with(&format!("fieldSelector=spec.nodeName%3D{name}&")),
                    "{q}"
                );
                match q
                    .split('&')
                    .find_map(|p| p.strip_prefix("resourceVersion="))
                {
                    Some(rv) if q.contains("watch=true") => {
                        assert!(q.contains("allowWatchBookmarks=true&"), "{q}");
                        format!("watch {rv}")
                    }
                    Some(rv) => format!("list {rv}"),
                    None => q.clone(),
                }
            })
            .collect();
        // 410: list again; the end of a stream: watch again from its
        // newest version; an ERROR 410 event: list again.
        assert_eq!(
            seen,
            ["list 0", "watch 1", "list 0", "watch 1", "watch 5", "list 0", "watch 1"]
        );
        let s = stats();
        assert_eq!((calls("pods list"), calls("pods watch")), (3, 3), "{s:?}");
        assert_eq!(s.call_errors, 1, "{s:?}");
        let last = s.last_call_error.unwrap_or_default();
        assert!(
            last.contains("/api/v1/services?") && last.contains("an ERROR event: boom"),
            "{last}"
        );
        // The held watches end with the fleet.
        shutdown.cancel();
        tokio::time::timeout(Duration::from_secs(10), fleet.closed())
            .await
            .expect("the reflectors stop on shutdown");
        server.abort();
    }

    #[test]
    fn a_static_pod_s_hash_is_the_same_from_run_to_run() {
        assert_eq!(config_hash("edge-1"), config_hash("edge-1"));
        assert_ne!(config_hash("edge-1"), config_hash("edge-2"));
        assert_eq!(config_hash("edge-1").len(), 16);
    }
}
