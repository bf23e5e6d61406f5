//! The fake API server and nodekeeper read patches and selectors the same
//! way: each case goes through nodekeeper's `k8s::patch` and
//! `k8s::selectors` and through the fake's own `strategic` and `selectors`,
//! written separately from apimachinery. A bug in either shows as a
//! disagreement here; where they differ on purpose, the difference is listed
//! and checked too, so a change to either side is seen.

use nodekeeper::k8s::patch::{self as product_patch, PatchKind};
use nodekeeper::k8s::selectors as product;
use serde_json::{json, Value};

use super::patch::{self, PatchType};
use super::resource::Resource;
use super::selectors::{FieldSelector, LabelSelector};

fn node() -> Value {
    json!({
        "metadata": {"name": "n1", "labels": {"site": "a", "rack": "r1"},
                     "annotations": {"nodekeeper.io/source": "ssh"}},
        "spec": {"unschedulable": true, "providerID": "p://n1",
                 "taints": [{"key": "a", "effect": "NoSchedule"}]},
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": "2025-01-01T00:00:00Z"},
                {"type": "MemoryPressure", "status": "False"},
                {"type": "DiskPressure", "status": "False"}
            ],
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"},
                          {"type": "Hostname", "address": "n1"}],
            "capacity": {"cpu": "4", "memory": "8Gi"},
            "nodeInfo": {"kubeletVersion": "v1.33.0"}
        }
    })
}

/// Patches both sides read alike: what the mirror sends (status merged by
/// condition type, addresses replaced by a merge patch, metadata and spec
/// by a merge patch) and what kubelets send, in the node's order.
fn agreed_patches() -> Vec<(PatchKind, Value)> {
    use PatchKind::{Merge, Strategic};
    vec![
        // The mirror's status patch: changed conditions, capacity, node info.
        (
            Strategic,
            json!({"status": {
                "conditions": [{"type": "Ready", "status": "False", "reason": "NodeStatusUnknown"}],
                "capacity": {"cpu": "8"},
                "nodeInfo": {"kubeletVersion": "v1.34.0", "osImage": "x"}
            }}),
        ),
        // Several conditions, in the node's order.
        (
            Strategic,
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "Unknown"}, {"type": "DiskPressure", "status": "Unknown"}
            ]}}),
        ),
        // A kubelet's heartbeat with its ordering directive, in the node's order.
        (
            Strategic,
            json!({"status": {
                "$setElementOrder/conditions": [{"type": "Ready"}, {"type": "MemoryPressure"}, {"type": "DiskPressure"}],
                "conditions": [{"type": "Ready", "lastHeartbeatTime": "2025-01-01T00:00:10Z"}]
            }}),
        ),
        // Addresses merged by type.
        (
            Strategic,
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.2"}]}}),
        ),
        // Deletion by key, a replaced object, nulls.
        (
            Strategic,
            json!({"status": {"conditions": [{"type": "MemoryPressure", "$patch": "delete"}]}}),
        ),
        (
            Strategic,
            json!({"status": {"capacity": {"$patch": "replace", "pods": "110"}}}),
        ),
        (
            Strategic,
            json!({"metadata": {"labels": {"rack": null, "zone": "z"}}, "spec": {"unschedulable": null}}),
        ),
        // Lists without a merge key are replaced, taints among them.
        (Strategic, json!({"status": {"images": [{"names": ["a"]}]}})),
        (
            Strategic,
            json!({"spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]}}),
        ),
        // An item without its merge key is refused by both.
        (
            Strategic,
            json!({"status": {"conditions": [{"status": "True"}]}}),
        ),
        // The mirror's metadata and spec patch, and its address replacement.
        (
            Merge,
            json!({"metadata": {"resourceVersion": "7", "labels": {"site": "b", "rack": null},
                                    "annotations": {"nodekeeper.io/last-applied": "{}"}},
                       "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "unschedulable": false}}),
        ),
        (
            Merge,
            json!({"status": {"addresses": [{"type": "InternalIP", "address": "10.0.0.3"}]}}),
        ),
        // RFC 7386 appendix A cases on a node.
        (Merge, json!({"metadata": {"labels": null}})),
        (Merge, json!({"status": {"conditions": [1]}})),
        (Merge, json!({"spec": {"a": {"bb": {"ccc": null}}}})),
    ]
}

fn fake(kind: PatchKind, target: &Value, patch: &Value) -> Result<Value, String> {
    let kind = match kind {
        PatchKind::Merge => PatchType::Merge,
        PatchKind::Strategic => PatchType::Strategic,
    };
    let mut doc = target.clone();
    patch::apply(kind, Resource::Nodes, &mut doc, patch).map(|()| doc)
}

fn ours(kind: PatchKind, target: &Value, patch: &Value) -> Result<Value, String> {
    let mut doc = target.clone();
    product_patch::apply(kind, &mut doc, patch)
        .map(|()| doc)
        .map_err(|e| e.to_string())
}

#[test]
fn patches_agree() {
    for (kind, patch) in agreed_patches() {
        let a = fake(kind, &node(), &patch);
        let b = ours(kind, &node(), &patch);
        match (&a, &b) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{kind:?} {patch}"),
            (Err(_), Err(_)) => {}
            _ => panic!("{kind:?} {patch}: the fake gives {a:?}, nodekeeper {b:?}"),
        }
    }
}

/// Where nodekeeper, playing the API server for kubelets, differs from
/// kube-apiserver on purpose. Each case gives what each side makes of it.
#[test]
fn patches_differ_where_nodekeeper_says_so() {
    // A new condition: kube-apiserver puts items new to a merged list before
    // the ones it had (see `strategic`); nodekeeper keeps the node's
    // conditions in their order and appends (its kubelet path keeps
    // conditions in the node's order, `src/k8s/patch.rs`).
    let patch = json!({"status": {"conditions": [{"type": "PIDPressure", "status": "False"}]}});
    let types = |doc: Value| -> Vec<String> {
        doc["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["type"].as_str().unwrap().to_owned())
            .collect()
    };
    let fake_types = types(fake(PatchKind::Strategic, &node(), &patch).unwrap());
    let our_types = types(ours(PatchKind::Strategic, &node(), &patch).unwrap());
    assert_eq!(
        fake_types,
        ["PIDPressure", "Ready", "MemoryPressure", "DiskPressure"]
    );
    assert_eq!(
        our_types,
        ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"]
    );
    // `$setElementOrder` naming another order: kube-apiserver reorders,
    // nodekeeper keeps the node's order.
    let patch = json!({"status": {
        "$setElementOrder/conditions": [{"type": "DiskPressure"}, {"type": "Ready"}, {"type": "MemoryPressure"}]
    }});
    let fake_types = types(fake(PatchKind::Strategic, &node(), &patch).unwrap());
    let our_types = types(ours(PatchKind::Strategic, &node(), &patch).unwrap());
    assert_eq!(fake_types, ["DiskPressure", "Ready", "MemoryPressure"]);
    assert_eq!(our_types, ["Ready", "MemoryPressure", "DiskPressure"]);
}

const LABEL_SELECTORS: &[&str] = &[
    "",
    "site=a",
    "site==a",
    "site!=a",
    "site",
    "!site",
    "site in (a,b)",
    "site notin (a)",
    "site in ()",
    "x notin (abc,,def),site",
    "rack>0",
    "n<5",
    "n>4",
    "site=a,rack=r1",
    "site=a,!rack",
    "example.com/zone in (z1, z2)",
    "site=",
    "a in (x,y,notin, z,in)",
    // Refused by both.
    "site=a||b",
    "site==a==b",
    "!site=a",
    "n<a",
    "x,,y",
    ",x",
    "a in (xyz),",
    "a in (xyz abc)",
    "a notin(",
    "(",
    "-x=a",
    "x=-a",
    "Example.com/x=a",
    "a/b/c",
];

const LABEL_SETS: &[&[(&str, &str)]] = &[
    &[],
    &[("site", "a")],
    &[("site", "b"), ("rack", "r1")],
    &[("site", "a"), ("rack", "r1"), ("n", "5")],
    &[("site", ""), ("n", "x")],
    &[("example.com/zone", "z2"), ("x", "abc")],
    &[("a", "in"), ("site", "a")],
];

#[test]
fn label_selectors_agree() {
    for selector in LABEL_SELECTORS {
        let a = LabelSelector::parse(selector);
        let b = product::LabelSelector::parse(selector);
        let (a, b) = match (a, b) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(_), Err(_)) => continue,
            (a, b) => panic!("{selector:?}: the fake gives {a:?}, nodekeeper {b:?}"),
        };
        for set in LABEL_SETS {
            let value = Value::Object(set.iter().map(|(k, v)| ((*k).into(), json!(v))).collect());
            let map = set
                .iter()
                .map(|(k, v)| ((*k).into(), (*v).into()))
                .collect();
            assert_eq!(
                a.matches(Some(&value)),
                b.matches(&map),
                "{selector:?} on {set:?}"
            );
        }
    }
}

const FIELD_SELECTORS: &[&str] = &[
    "",
    "spec.nodeName=n1",
    "spec.nodeName==n1",
    "spec.nodeName!=n1",
    "spec.nodeName=",
    "spec.nodeName!=",
    "metadata.name=p,spec.nodeName=n1",
    "status.phase!=Running,status.phase!=Pending",
    r"metadata.name=a\,b",
    r"metadata.name=a\=b\\",
    "spec.nodeName=n1,",
    // Refused by both.
    "spec.nodeName",
    "a=b,c",
    "x=a==b",
    r"x=\a",
    r"x=\",
    "x=a,b",
];

const FIELD_SETS: &[&[(&str, &str)]] = &[
    &[],
    &[
        ("spec.nodeName", "n1"),
        ("metadata.name", "p"),
        ("status.phase", "Running"),
    ],
    &[
        ("spec.nodeName", "n2"),
        ("metadata.name", "a,b"),
        ("status.phase", "Failed"),
    ],
    &[("metadata.name", r"a=b\"), ("status.phase", "Pending")],
];

#[test]
fn field_selectors_agree() {
    for selector in FIELD_SELECTORS {
        let a = FieldSelector::parse(selector);
        let b = product::FieldSelector::parse(selector);
        let (a, b) = match (a, b) {
            (Ok(a), Ok(b)) => (a, b),
            (Err(_), Err(_)) => continue,
            (a, b) => panic!("{selector:?}: the fake gives {a:?}, nodekeeper {b:?}"),
        };
        for set in FIELD_SETS {
            let get = |f: &str| set.iter().find(|(k, _)| *k == f).map(|(_, v)| *v);
            assert_eq!(
                a.matches(|f| get(f).unwrap_or("").to_owned()),
                b.matches(get),
                "{selector:?} on {set:?}"
            );
        }
    }
}
