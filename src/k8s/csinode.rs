//! A node's CSINode as the mirror writes it to the API server: the one the
//! node's kubelet keeps here, its owner reference pointing at the API
//! server's Node, without the fields the server sets.

use serde_json::{json, Value};

/// The CSINode the API server should have for `name`: the kubelet's, its
/// owner reference to the Node given the API server's uid (`node_uid`;
/// dropped when unknown), without what the server sets.
pub fn desired(json: &str, name: &str, node_uid: Option<&str>) -> Value {
    let kept: Value = serde_json::from_str(json).unwrap_or(Value::Null);
    let meta = &kept["metadata"];
    let owners: Vec<Value> = match node_uid {
        None => Vec::new(),
        Some(uid) => meta["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|o| o["kind"] == "Node" && o["name"] == name)
            .map(|o| {
                let mut o = o.clone();
                o["uid"] = json!(uid);
                o
            })
            .collect(),
    };
    let mut metadata = json!({ "name": name });
    for field in ["labels", "annotations"] {
        if meta[field].as_object().is_some_and(|m| !m.is_empty()) {
            metadata[field] = meta[field].clone();
        }
    }
    if !owners.is_empty() {
        metadata["ownerReferences"] = Value::Array(owners);
    }
    json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "CSINode",
        "metadata": metadata,
        "spec": {"drivers": kept["spec"]["drivers"].as_array().cloned().unwrap_or_default()},
    })
}

/// Whether the API server's CSINode already is `desired`.
pub fn same(current: &Value, desired: &Value) -> bool {
    let empty = |v: &Value| v.is_null() || v.as_object().is_some_and(|m| m.is_empty());
    let field = |v: &Value, f: &str| -> Value {
        let x = &v["metadata"][f];
        if empty(x) || x.as_array().is_some_and(|a| a.is_empty()) {
            Value::Null
        } else {
            x.clone()
        }
    };
    let drivers = |v: &Value| v["spec"]["drivers"].as_array().cloned().unwrap_or_default();
    ["labels", "annotations", "ownerReferences"]
        .iter()
        .all(|f| field(current, f) == field(desired, f))
        && drivers(current) == drivers(desired)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_the_api_servers_node_and_server_fields_are_left_out() {
        let kept = json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {
                "name": "edge-1", "uid": "here", "creationTimestamp": "2026-11-30T09:00:00Z",
                "annotations": {"storage.alpha.kubernetes.io/migrated-plugins": "x"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "edge-1", "uid": "nodekeeper-uid"}],
            },
            "spec": {"drivers": [{"name": "d", "nodeID": "n"}]},
        });
        let want = desired(&kept.to_string(), "edge-1", Some("upstream-uid"));
        assert_eq!(
            want["metadata"]["ownerReferences"][0]["uid"],
            "upstream-uid"
        );
        assert!(want["metadata"]["uid"].is_null());
        assert_eq!(want["spec"]["drivers"][0]["nodeID"], "n");
        let mut there = want.clone();
        there["metadata"]["uid"] = json!("theirs");
        there["metadata"]["resourceVersion"] = json!("7");
        there["metadata"]["labels"] = json!({});
        assert!(same(&there, &want));
        there["spec"]["drivers"] = json!([]);
        assert!(!same(&there, &want));
        let orphan = desired(&kept.to_string(), "edge-1", None);
        assert!(orphan["metadata"]["ownerReferences"].is_null());
    }
}
