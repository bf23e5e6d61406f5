//! What the API server's Node must change to match the registry, as patches
//! that touch only nodekeeper's fields: its labels and source annotation,
//! the taints it manages, the conditions it decides, addresses, capacity and
//! node info. Everything else on the object (other controllers' labels and
//! taints, conditions it does not set) is left as it is.
//!
//! Operator fields set through nodekeeper (cordon, labels, annotations,
//! operators' taints) go up with kubectl apply's three-way merge: the Node
//! upstream carries [`APPLIED_ANNOTATION`], what nodekeeper last set, so
//! what was removed here is removed there, and what others set there is
//! left alone.
//!
//! Pure functions over JSON, so the decisions are tested without a server;
//! the mirror (`crate::mirror`) sends what they build.

use std::collections::BTreeSet;

use serde_json::{json, Map, Value};

use crate::model::MANAGED_TAINTS;

/// What nodekeeper last set of the fields operators own, on the API
/// server's Node (absent while that is nothing).
pub const APPLIED_ANNOTATION: &str = "nodekeeper.io/last-applied";

/// The content of [`APPLIED_ANNOTATION`].
#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
struct Applied {
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    labels: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    annotations: BTreeSet<String>,
    /// Operators' taints, as `key:effect`.
    #[serde(default, skip_serializing_if = "BTreeSet::is_empty")]
    taints: BTreeSet<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    unschedulable: bool,
}

impl Applied {
    /// What the registry's node sets (the well-known labels and the source
    /// annotation are on every node and never removed).
    fn of(desired: &Value) -> Applied {
        let keys = |v: &Value, skip: &[&str]| -> BTreeSet<String> {
            v.as_object()
                .into_iter()
                .flatten()
                .map(|(k, _)| k.clone())
                .filter(|k| !skip.contains(&k.as_str()))
                .collect()
        };
        Applied {
            labels: keys(
                &desired["metadata"]["labels"],
                &[super::HOSTNAME_LABEL, super::OS_LABEL],
            ),
            annotations: keys(
                &desired["metadata"]["annotations"],
                &[super::SOURCE_ANNOTATION, APPLIED_ANNOTATION],
            ),
            taints: desired["spec"]["taints"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|t| !MANAGED_TAINTS.iter().any(|k| t["key"] == *k))
                .map(taint_id)
                .collect(),
            unschedulable: desired["spec"]["unschedulable"] == true,
        }
    }

    /// What the API server's node says was set last (nothing, if unreadable).
    fn on(current: &Value) -> Applied {
        current["metadata"]["annotations"][APPLIED_ANNOTATION]
            .as_str()
            .and_then(|text| serde_json::from_str(text).ok())
            .unwrap_or_default()
    }

    fn text(&self) -> Option<String> {
        (*self != Applied::default()).then(|| serde_json::to_string(self).expect("serializable"))
    }
}

fn taint_id(t: &Value) -> String {
    format!(
        "{}:{}",
        t["key"].as_str().unwrap_or(""),
        t["effect"].as_str().unwrap_or("")
    )
}

/// The object to create when the API server has no such node: metadata and
/// spec only (the API server ignores status on create; it is patched next).
pub fn for_create(desired: &Value) -> Value {
    let meta = &desired["metadata"];
    let mut metadata = Map::new();
    for field in ["name", "labels", "annotations"] {
        if !meta[field].is_null() {
            metadata.insert(field.into(), meta[field].clone());
        }
    }
    if let Some(text) = Applied::of(desired).text() {
        metadata.entry("annotations").or_insert_with(|| json!({}))[APPLIED_ANNOTATION] =
            Value::String(text);
    }
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": metadata,
        "spec": desired.get("spec").cloned().unwrap_or_else(|| json!({})),
    })
}

/// A JSON merge patch of labels, annotations, taints, the cordon and
/// providerID, if any differ. It carries the object's resourceVersion, so a
/// concurrent writer makes it fail with 409 rather than be overwritten.
pub fn spec_patch(current: &Value, desired: &Value) -> Option<Value> {
    let before = Applied::on(current);
    let now = Applied::of(desired);
    let mut metadata = Map::new();
    for (field, was) in [
        ("labels", &before.labels),
        ("annotations", &before.annotations),
    ] {
        let mut changed = changed_entries(&current["metadata"][field], &desired["metadata"][field]);
        // Set by nodekeeper before, removed from the registry since: removed there too.
        for gone in was
            .iter()
            .filter(|k| desired["metadata"][field][k.as_str()].is_null())
        {
            if !current["metadata"][field][gone.as_str()].is_null() {
                changed.insert(gone.clone(), Value::Null);
            }
        }
        if field == "annotations" {
            let text = now.text().map_or(Value::Null, Value::String);
            if current["metadata"]["annotations"][APPLIED_ANNOTATION] != text {
                changed.insert(APPLIED_ANNOTATION.into(), text);
            }
        }
        if !changed.is_empty() {
            metadata.insert(field.into(), Value::Object(changed));
        }
    }
    let mut spec = Map::new();
    let taints = merged_taints(
        &current["spec"]["taints"],
        &desired["spec"]["taints"],
        &before.taints,
    );
    if !same_taints(&taints, &current["spec"]["taints"]) {
        spec.insert("taints".into(), Value::Array(taints));
    }
    // The cordon goes up when it changed here; one made there is left alone.
    let cordoned = current["spec"]["unschedulable"] == true;
    if now.unschedulable != before.unschedulable && now.unschedulable != cordoned {
        spec.insert("unschedulable".into(), Value::Bool(now.unschedulable));
    }
    let provider = &desired["spec"]["providerID"];
    if provider.is_string() && current["spec"]["providerID"].is_null() {
        // providerID is immutable once set; only an empty one is filled in.
        spec.insert("providerID".into(), provider.clone());
    }
    if metadata.is_empty() && spec.is_empty() {
        return None;
    }
    metadata.insert(
        "resourceVersion".into(),
        current["metadata"]["resourceVersion"].clone(),
    );
    let mut patch = json!({ "metadata": metadata });
    if !spec.is_empty() {
        patch["spec"] = Value::Object(spec);
    }
    Some(patch)
}

/// A strategic merge patch for the status subresource: the conditions that
/// differ (heartbeat times aside: the Lease carries liveness), capacity,
/// allocatable, node info, and what the kubelet reported (images, its
/// port, …) if they differ. Conditions merge by type, so
/// conditions others set are kept.
pub fn status_patch(current: &Value, desired: &Value) -> Option<Value> {
    let cur = &current["status"];
    let want = &desired["status"];
    let mut status = Map::new();
    let conditions: Vec<Value> = want["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            let theirs = cur["conditions"]
                .as_array()
                .and_then(|all| all.iter().find(|o| o["type"] == c["type"]));
            theirs.is_none_or(|o| {
                ["status", "reason", "message", "lastTransitionTime"]
                    .iter()
                    .any(|f| o[*f] != c[*f])
            })
        })
        .cloned()
        .collect();
    if !conditions.is_empty() {
        status.insert("conditions".into(), Value::Array(conditions));
    }
    for field in ["capacity", "allocatable"] {
        let changed = changed_entries(&cur[field], &want[field]);
        if !changed.is_empty() {
            status.insert(field.into(), Value::Object(changed));
        }
    }
    // A node with no addresses yet (just created) takes them in this patch;
    // changing existing ones is `addresses_patch`'s.
    let has_addresses = cur["addresses"].as_array().is_some_and(|a| !a.is_empty());
    if !has_addresses && want["addresses"].as_array().is_some_and(|a| !a.is_empty()) {
        status.insert("addresses".into(), want["addresses"].clone());
    }
    // What the kubelet reports and nodekeeper keeps as given: sent whole
    // when it differs (each is replaced whole by a strategic merge: the
    // lists have no merge key), a null where nothing is reported any more.
    // `volumesAttached` stays the API server's: its attach/detach
    // controller writes it there.
    for field in MIRRORED_REPORTS {
        if cur[field] != want[field] {
            status.insert(field.into(), want[field].clone());
        }
    }
    // kube-apiserver shows a Node's `daemonEndpoints` always, with port 0
    // while none is known; nodekeeper leaves it out then.
    let port = |v: &Value| v["daemonEndpoints"]["kubeletEndpoint"]["Port"].as_i64();
    let wanted_port = port(want).unwrap_or(0);
    if port(cur).unwrap_or(0) != wanted_port {
        status.insert(
            "daemonEndpoints".into(),
            json!({"kubeletEndpoint": {"Port": wanted_port}}),
        );
    }
    let info = &want["nodeInfo"];
    if info
        .as_object()
        .is_some_and(|o| o.values().any(|v| v != ""))
        && cur["nodeInfo"] != *info
    {
        status.insert("nodeInfo".into(), info.clone());
    }
    (!status.is_empty()).then(|| json!({ "status": status }))
}

/// The status fields a kubelet reports that the mirror sends up as kept.
const MIRRORED_REPORTS: [&str; 4] = ["features", "images", "runtimeHandlers", "volumesInUse"];

/// A JSON merge patch replacing the address list, if it differs (a merge by
/// type could not remove a stale address of a type still present).
pub fn addresses_patch(current: &Value, desired: &Value) -> Option<Value> {
    let cur = current["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let want = desired["status"]["addresses"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    (!cur.is_empty() && cur != want).then(|| json!({ "status": { "addresses": want } }))
}

/// Whether the API server's Node needs any write to match the registry.
pub fn differs(current: &Value, desired: &Value) -> bool {
    spec_patch(current, desired).is_some()
        || status_patch(current, desired).is_some()
        || addresses_patch(current, desired).is_some()
}

/// The taints the node should carry: everyone else's, with the operators'
/// taints set through nodekeeper added (and those removed here since
/// `applied`, removed), then nodekeeper's managed ones.
fn merged_taints(current: &Value, desired: &Value, applied: &BTreeSet<String>) -> Vec<Value> {
    let managed = |t: &Value| MANAGED_TAINTS.iter().any(|k| t["key"] == *k);
    let ours: Vec<&Value> = desired
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| !managed(t))
        .collect();
    let mut taints: Vec<Value> = current
        .as_array()
        .into_iter()
        .flatten()
        .filter(|t| !managed(t))
        .filter(|t| {
            let id = taint_id(t);
            !applied.contains(&id) || ours.iter().any(|o| taint_id(o) == id)
        })
        .map(|t| {
            // One of ours: with our value.
            ours.iter()
                .find(|o| taint_id(o) == taint_id(t))
                .map_or_else(|| t.clone(), |o| (*o).clone())
        })
        .collect();
    for o in &ours {
        if !taints.iter().any(|t| taint_id(t) == taint_id(o)) {
            taints.push((*o).clone());
        }
    }
    taints.extend(
        desired
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| managed(t))
            .cloned(),
    );
    taints
}

/// Same taints, ignoring order and `timeAdded` precision.
fn same_taints(a: &[Value], b: &Value) -> bool {
    let key = |t: &Value| {
        (
            t["key"].as_str().unwrap_or("").to_string(),
            t["value"].as_str().unwrap_or("").to_string(),
            t["effect"].as_str().unwrap_or("").to_string(),
        )
    };
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.as_array().into_iter().flatten().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

/// Entries of the `desired` map whose value differs in `current`.
fn changed_entries(current: &Value, desired: &Value) -> Map<String, Value> {
    desired
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| current.get(k.as_str()) != Some(v))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{TAINT_NOT_READY, TAINT_UNREACHABLE};

    fn desired() -> Value {
        json!({
            "metadata": {"name": "edge-1", "uid": "ours", "resourceVersion": "12",
                         "labels": {"kubernetes.io/hostname": "edge-1", "zone": "a"},
                         "annotations": {"nodekeeper.io/source": "static"}},
            "spec": {"taints": [{"key": TAINT_UNREACHABLE, "effect": "NoSchedule", "timeAdded": "2026-12-01T00:00:00Z"}]},
            "status": {
                "conditions": [{"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                                "message": "m", "lastTransitionTime": "2026-12-01T00:00:00Z",
                                "lastHeartbeatTime": "2026-12-01T00:00:00Z"}],
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "capacity": {"cpu": "1", "memory": "3Gi"},
                "allocatable": {"cpu": "1", "memory": "3Gi"},
                "nodeInfo": {"kubeletVersion": "", "osImage": ""}
            }
        })
    }

    #[test]
    fn a_new_node_is_created_without_our_bookkeeping() {
        let created = for_create(&desired());
        assert_eq!(created["metadata"]["name"], "edge-1");
        assert!(created["metadata"]["uid"].is_null());
        assert!(created["metadata"]["resourceVersion"].is_null());
        assert!(created.get("status").is_none());
        assert_eq!(created["spec"]["taints"][0]["key"], TAINT_UNREACHABLE);
    }

    #[test]
    fn an_up_to_date_node_needs_no_write() {
        let mut current = desired();
        current["metadata"]["uid"] = json!("theirs");
        current["metadata"]["labels"]["team"] = json!("x");
        // A newer heartbeat upstream is not a difference.
        current["status"]["conditions"][0]["lastHeartbeatTime"] = json!("2026-12-01T01:00:00Z");
        current["metadata"]["annotations"][APPLIED_ANNOTATION] = json!(r#"{"labels":["zone"]}"#);
        assert_eq!(spec_patch(&current, &desired()), None);
        assert_eq!(status_patch(&current, &desired()), None);
        assert_eq!(addresses_patch(&current, &desired()), None);
        assert!(!differs(&current, &desired()));
        current["spec"]["taints"] = json!([]);
        assert!(differs(&current, &desired()));
    }

    #[test]
    fn others_taints_and_labels_are_kept_and_ours_replaced() {
        let current = json!({
            "metadata": {"resourceVersion": "77", "labels": {"kubernetes.io/hostname": "edge-1", "team": "x"}},
            "spec": {"taints": [
                {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
                {"key": TAINT_NOT_READY, "effect": "NoExecute"}
            ]}
        });
        let patch = spec_patch(&current, &desired()).unwrap();
        assert_eq!(patch["metadata"]["resourceVersion"], "77");
        assert_eq!(patch["metadata"]["labels"], json!({"zone": "a"}));
        assert_eq!(
            patch["metadata"]["annotations"],
            json!({"nodekeeper.io/source": "static", APPLIED_ANNOTATION: r#"{"labels":["zone"]}"#})
        );
        let keys: Vec<&str> = patch["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["key"].as_str().unwrap())
            .collect();
        assert_eq!(keys, ["dedicated", TAINT_UNREACHABLE]);
    }

    #[test]
    fn operator_fields_go_up_and_what_the_cluster_set_stays() {
        let mut want = desired();
        want["metadata"]["labels"]["maintenance"] = json!("true");
        want["metadata"]["annotations"]["ticket"] = json!("OPS-1");
        want["spec"]["unschedulable"] = json!(true);
        want["spec"]["taints"].as_array_mut().unwrap().insert(
            0,
            json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}),
        );
        // The cluster's own label, taint and cordon state, set there.
        let current = json!({
            "metadata": {"resourceVersion": "5",
                         "labels": {"kubernetes.io/hostname": "edge-1", "zone": "a", "team": "x"},
                         "annotations": {"nodekeeper.io/source": "static"}},
            "spec": {"taints": [{"key": "theirs", "effect": "NoSchedule"}]}
        });
        let patch = spec_patch(&current, &want).unwrap();
        assert_eq!(patch["spec"]["unschedulable"], true);
        assert_eq!(patch["metadata"]["labels"], json!({"maintenance": "true"}));
        assert_eq!(patch["metadata"]["annotations"]["ticket"], "OPS-1");
        let keys: Vec<String> = patch["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .map(taint_id)
            .collect();
        assert_eq!(
            keys,
            [
                "theirs:NoSchedule",
                "dedicated:NoSchedule",
                &format!("{TAINT_UNREACHABLE}:NoSchedule")
            ]
        );
        // Applied: the API server now has it all, and the record of it.
        let mut there = current.clone();
        crate::k8s::patch::merge_patch(&mut there, &patch);
        assert_eq!(spec_patch(&there, &want), None);

        // Uncordoned, unlabeled, untainted, unannotated here: removed there,
        // and the cluster's own label and taint stay.
        let patch = spec_patch(&there, &desired()).unwrap();
        assert_eq!(patch["spec"]["unschedulable"], false);
        assert_eq!(patch["metadata"]["labels"], json!({"maintenance": null}));
        assert_eq!(patch["metadata"]["annotations"]["ticket"], Value::Null);
        assert!(patch["metadata"]["annotations"]
            .as_object()
            .unwrap()
            .contains_key("ticket"));
        let keys: Vec<String> = patch["spec"]["taints"]
            .as_array()
            .unwrap()
            .iter()
            .map(taint_id)
            .collect();
        assert_eq!(
            keys,
            [
                "theirs:NoSchedule",
                &format!("{TAINT_UNREACHABLE}:NoSchedule")
            ]
        );
        crate::k8s::patch::merge_patch(&mut there, &patch);
        assert_eq!(there["metadata"]["labels"]["team"], "x");
        assert_eq!(spec_patch(&there, &desired()), None);

        // A cordon made on the cluster while nodekeeper's record is unchanged stays.
        there["spec"]["unschedulable"] = json!(true);
        assert_eq!(spec_patch(&there, &desired()), None);
    }

    #[test]
    fn a_changed_condition_is_sent_alone_and_foreign_conditions_stay() {
        let mut current = desired();
        current["status"]["conditions"] = json!([
            {"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "ok",
             "lastTransitionTime": "2026-11-30T00:00:00Z"},
            {"type": "NetworkUnavailable", "status": "False"}
        ]);
        current["status"]["capacity"] = json!({"cpu": "1", "memory": "3Gi", "pods": "110"});
        let patch = status_patch(&current, &desired()).unwrap();
        assert_eq!(
            patch,
            json!({"status": {"conditions": [desired()["status"]["conditions"][0]]}})
        );
    }

    #[test]
    fn a_new_node_gets_its_whole_status_in_one_patch() {
        let created = json!({"metadata": {"name": "edge-1"}, "status": {}});
        let patch = status_patch(&created, &desired()).unwrap();
        assert_eq!(
            patch["status"]["addresses"],
            desired()["status"]["addresses"]
        );
        assert_eq!(
            patch["status"]["conditions"],
            desired()["status"]["conditions"]
        );
        assert_eq!(addresses_patch(&created, &desired()), None);
    }

    #[test]
    fn what_the_kubelet_reported_goes_up_and_an_unknown_port_is_no_change() {
        // kube-apiserver shows port 0 on a Node nobody reported a port for.
        let mut there = desired();
        there["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": 0}});
        assert_eq!(status_patch(&there, &desired()), None);

        let mut want = desired();
        want["status"]["daemonEndpoints"] = json!({"kubeletEndpoint": {"Port": 10250}});
        want["status"]["images"] =
            json!([{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320368}]);
        want["status"]["volumesAttached"] = json!([{"name": "v", "devicePath": "/dev/x"}]);
        let patch = status_patch(&there, &want).unwrap();
        assert_eq!(
            patch,
            json!({"status": {
                "images": want["status"]["images"],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            }}),
            "volumesAttached is the API server's attach/detach controller's"
        );
        crate::k8s::patch::merge_patch(&mut there, &patch);
        assert_eq!(status_patch(&there, &want), None);

        // Images gone here: removed there.
        let patch = status_patch(&there, &desired()).unwrap();
        assert_eq!(patch["status"]["images"], Value::Null);
        assert!(patch["status"].as_object().unwrap().contains_key("images"));
        assert_eq!(
            patch["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"],
            0
        );
    }

    #[test]
    fn addresses_are_replaced_as_a_whole() {
        let mut current = desired();
        current["status"]["addresses"] = json!([
            {"type": "InternalIP", "address": "10.0.0.9"},
            {"type": "InternalIP", "address": "10.0.0.1"}
        ]);
        assert_eq!(
            addresses_patch(&current, &desired()),
            Some(json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.1"}]}}))
        );
    }
}
