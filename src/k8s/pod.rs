//! Pods as kube-apiserver prints them for kubectl: the cells of
//! `printPod` (kubernetes `pkg/printers/internalversion/printers.go`),
//! read from a pod's Kubernetes JSON. nodekeeper keeps the mirror pods of
//! kubelets' static pods only (see `docs/decisions/mirror-pods.md`).

use serde_json::{json, Value};

use super::table::age_at;
use crate::model::Micros;

/// What a watch streams of a deleted pod it knew nothing of: its identity,
/// `namespace/name` on `node`.
pub fn pod_identity(node: &str, name: &str) -> Value {
    let (namespace, name) = name.split_once('/').unwrap_or(("", name));
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"nodeName": node},
    })
}

/// A pod as JSON with its `apiVersion` and `kind`, which k8s-openapi's
/// `Pod` leaves to the list or the watch event it is read from.
pub fn typed_pod(pod: &k8s_openapi::api::core::v1::Pod) -> serde_json::Result<Value> {
    let mut value = serde_json::to_value(pod)?;
    value["apiVersion"] = json!("v1");
    value["kind"] = json!("Pod");
    Ok(value)
}

/// A `Pod` read from its JSON, the one way nodekeeper reads one: serde
/// compiles a type's deserializer once for each way it is read (from bytes,
/// a string, a `Value`...), and a `Pod`'s is some 300 kB of the binary
/// (docs/decisions/binary-size.md). A body is parsed into a `Value` first.
pub fn read_pod(value: Value) -> serde_json::Result<k8s_openapi::api::core::v1::Pod> {
    serde_json::from_value(value)
}

/// A pod's JSON as of resourceVersion `seq`.
pub fn pod_at_version(mut pod: Value, seq: u64) -> Value {
    pod["metadata"]["resourceVersion"] = Value::from(seq.to_string());
    pod
}

/// The pod's `creationTimestamp` (or any RFC 3339 time) as micros.
fn micros(t: &Value) -> Option<Micros> {
    let t: jiff::Timestamp = t.as_str()?.parse().ok()?;
    Some(Micros(t.as_microsecond()))
}

fn text(v: &Value) -> &str {
    v.as_str().unwrap_or("")
}

/// Whether an init container is a sidecar (`restartPolicy: Always`).
fn restartable(init: Option<&Value>) -> bool {
    init.is_some_and(|c| c["restartPolicy"] == "Always")
}

/// The newest `lastState.terminated.finishedAt` of `status` after `newest`.
fn last_finished(status: &Value, newest: &mut Option<Micros>) {
    if let Some(t) = micros(&status["lastState"]["terminated"]["finishedAt"]) {
        if newest.is_none_or(|n| n < t) {
            *newest = Some(t);
        }
    }
}

/// The reason a terminated container gives, as the printer words it.
fn terminated_reason(terminated: &Value, prefix: &str) -> String {
    match text(&terminated["reason"]) {
        "" => match terminated["signal"].as_i64().unwrap_or(0) {
            0 => format!(
                "{prefix}ExitCode:{}",
                terminated["exitCode"].as_i64().unwrap_or(0)
            ),
            signal => format!("{prefix}Signal:{signal}"),
        },
        reason => format!("{prefix}{reason}"),
    }
}

fn condition_true(status: &Value, kind: &str) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// The init containers' part of the row: `(reason, initializing)`, and
/// the restarts and last restart they add.
fn init_progress(
    pod: &Value,
    reason: &mut String,
    ready: &mut usize,
    restarts: &mut (i64, Option<Micros>),
    sidecar_restarts: &mut (i64, Option<Micros>),
) -> bool {
    let spec_inits: Vec<&Value> = pod["spec"]["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let by_name = |name: &str| spec_inits.iter().copied().find(|c| c["name"] == name);
    let statuses = pod["status"]["initContainerStatuses"].as_array();
    for (i, c) in statuses.into_iter().flatten().enumerate() {
        restarts.0 += c["restartCount"].as_i64().unwrap_or(0);
        last_finished(c, &mut restarts.1);
        let sidecar = restartable(by_name(text(&c["name"])));
        if sidecar {
            sidecar_restarts.0 += c["restartCount"].as_i64().unwrap_or(0);
            last_finished(c, &mut sidecar_restarts.1);
        }
        let terminated = &c["state"]["terminated"];
        let waiting = text(&c["state"]["waiting"]["reason"]);
        if terminated.is_object() && terminated["exitCode"].as_i64().unwrap_or(0) == 0 {
            continue;
        }
        if sidecar && c["started"] == true {
            if c["ready"] == true {
                *ready += 1;
            }
            continue;
        }
        *reason = if terminated.is_object() {
            terminated_reason(terminated, "Init:")
        } else if !waiting.is_empty() && waiting != "PodInitializing" {
            format!("Init:{waiting}")
        } else {
            format!("Init:{i}/{}", spec_inits.len())
        };
        return true;
    }
    false
}

/// The printer's cells, wide ones included (kube-apiserver renders them
/// all; kubectl hides priority-1 columns without `-o wide`): name, ready,
/// status, restarts, age, IP, node, nominated node, readiness gates.
pub fn pod_cells(pod: &Value, now: Micros) -> Vec<Value> {
    let spec = &pod["spec"];
    let status = &pod["status"];
    let sidecars = spec["initContainers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| restartable(Some(c)))
        .count();
    let total = spec["containers"].as_array().map_or(0, Vec::len) + sidecars;
    let mut reason = match text(&status["reason"]) {
        "" => text(&status["phase"]).to_string(),
        r => r.to_string(),
    };
    let gated = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "PodScheduled" && c["reason"] == "SchedulingGated");
    if gated {
        reason = "SchedulingGated".to_string();
    }
    let mut ready = 0;
    let mut restarts = (0i64, None);
    let mut sidecar_restarts = (0i64, None);
    let initializing = init_progress(
        pod,
        &mut reason,
        &mut ready,
        &mut restarts,
        &mut sidecar_restarts,
    );
    if !initializing || condition_true(status, "Initialized") {
        restarts = sidecar_restarts;
        let mut running = false;
        let containers = status["containerStatuses"].as_array();
        for c in containers.into_iter().flatten().rev() {
            restarts.0 += c["restartCount"].as_i64().unwrap_or(0);
            last_finished(c, &mut restarts.1);
            let state = &c["state"];
            let waiting = text(&state["waiting"]["reason"]);
            if !waiting.is_empty() {
                reason = waiting.to_string();
            } else if state["terminated"].is_object() {
                reason = terminated_reason(&state["terminated"], "");
            } else if c["ready"] == true && state["running"].is_object() {
                running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && running {
            reason = if condition_true(status, "Ready") {
                "Running".to_string()
            } else {
                "NotReady".to_string()
            };
        }
    }
    let terminal = matches!(text(&status["phase"]), "Succeeded" | "Failed");
    if pod["metadata"]["deletionTimestamp"].is_string() {
        if status["reason"] == "NodeLost" {
            reason = "Unknown".to_string();
        } else if !terminal {
            reason = "Terminating".to_string();
        }
    }
    let restarts = match restarts {
        (0, _) | (_, None) => restarts.0.to_string(),
        (n, Some(at)) => format!("{n} ({} ago)", age_at(Some(at), now)),
    };
    let or_none = |s: &str| {
        if s.is_empty() {
            "<none>".to_string()
        } else {
            s.to_string()
        }
    };
    let gates = spec["readinessGates"].as_array().filter(|g| !g.is_empty());
    let gates = match gates {
        None => "<none>".to_string(),
        Some(gates) => {
            let met = gates
                .iter()
                .filter(|g| condition_true(status, text(&g["conditionType"])))
                .count();
            format!("{met}/{}", gates.len())
        }
    };
    // The age counts from the creation time as served (to the second).
    let created = micros(&pod["metadata"]["creationTimestamp"]);
    vec![
        Value::from(text(&pod["metadata"]["name"])),
        Value::from(format!("{ready}/{total}")),
        Value::from(reason),
        Value::from(restarts),
        Value::from(age_at(created, now)),
        Value::from(or_none(text(&status["podIPs"][0]["ip"]))),
        Value::from(or_none(text(&spec["nodeName"]))),
        Value::from(or_none(text(&status["nominatedNodeName"]))),
        Value::from(gates),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at(s: &str) -> Micros {
        micros(&json!(s)).unwrap()
    }

    #[test]
    fn a_running_static_pod_prints_as_kube_apiserver_prints_it() {
        let pod = json!({
            "metadata": {"name": "etcd-edge-1", "creationTimestamp": "2026-11-30T09:00:00Z"},
            "spec": {"nodeName": "edge-1", "containers": [{"name": "etcd"}, {"name": "sidecar"}]},
            "status": {
                "phase": "Running",
                "podIPs": [{"ip": "127.0.0.9"}],
                "containerStatuses": [
                    {"name": "etcd", "ready": true, "restartCount": 2,
                     "state": {"running": {}},
                     "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2026-11-30T09:50:00Z"}}},
                    {"name": "sidecar", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
                ],
            },
        });
        let cells = pod_cells(&pod, at("2026-11-30T10:00:00Z"));
        assert_eq!(
            cells,
            [
                "etcd-edge-1",
                "1/2",
                "CrashLoopBackOff",
                "2 (10m ago)",
                "60m",
                "127.0.0.9",
                "edge-1",
                "<none>",
                "<none>"
            ]
        );
    }

    #[test]
    fn a_new_pod_is_pending_and_an_init_container_shows_its_progress() {
        let mut pod = json!({
            "metadata": {"name": "p", "creationTimestamp": "2026-11-30T09:59:30Z"},
            "spec": {"nodeName": "n", "containers": [{"name": "c"}],
                     "initContainers": [{"name": "i"}]},
            "status": {"phase": "Pending"},
        });
        let now = at("2026-11-30T10:00:00Z");
        assert_eq!(
            pod_cells(&pod, now)[..5],
            ["p", "0/1", "Pending", "0", "30s"]
        );
        pod["status"]["initContainerStatuses"] = json!([{"name": "i", "state": {"running": {}}}]);
        assert_eq!(pod_cells(&pod, now)[2], "Init:0/1");
        pod["status"]["initContainerStatuses"] =
            json!([{"name": "i", "state": {"terminated": {"exitCode": 3}}}]);
        assert_eq!(pod_cells(&pod, now)[2], "Init:ExitCode:3");
        pod["metadata"]["deletionTimestamp"] = json!("2026-11-30T10:00:00Z");
        assert_eq!(pod_cells(&pod, now)[2], "Terminating");
    }
}
