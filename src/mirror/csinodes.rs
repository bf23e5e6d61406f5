//! A node's CSINode, mirrored with its Node: the same outbox entry
//! (`OutboxKey::Node`, queued by the CSINode's history entries too), the
//! same budget, retries and backoff. After the Node is brought to the
//! registry's record, its CSINode is brought to the one the node's kubelet
//! keeps here (created, replaced, or deleted), with its owner reference
//! pointing at the API server's Node (its uid there), as the kubelet would
//! have written it (kubernetes `pkg/volume/csi/nodeinfomanager/nodeinfomanager.go:459-483`).
//!
//! What was last written (or found equal) is remembered per node, so a
//! Node synced for a status change costs no CSINode request; after a
//! restart the first sync of each node reads its CSINode once. A CSINode
//! changed upstream by someone else is put back at the node's next CSINode
//! change or the mirror's next start (CSINodes are not watched).

use std::sync::MutexGuard;

use k8s_openapi::api::storage::v1::CSINode;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{json, Value};

use super::budget::Priority;
use super::jobs::{Ctx, CONFLICT_RETRIES};
use super::ApiError;
use crate::model::ObjectKey;
use crate::store::MIRRORED_OBJECTS;

/// What is known of a node's CSINode upstream: the desired object last
/// written or found there (as JSON text), or `None` when it is known absent.
pub(crate) type CsiNodeKnown = std::collections::HashMap<String, Option<String>>;

/// The CSINode the API server should have for `name`: the kubelet's, its
/// owner reference to the Node given the API server's uid (`node_uid`;
/// dropped when unknown), without what the server sets.
pub(crate) fn desired(json: &str, name: &str, node_uid: Option<&str>) -> Value {
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
fn same(current: &Value, desired: &Value) -> bool {
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

impl Ctx {
    fn csinodes_known(&self) -> MutexGuard<'_, CsiNodeKnown> {
        self.csinodes.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings node `name`'s CSINode upstream to the one kept here (or
    /// deletes it); `node_uid` is the API server's Node's uid.
    pub(crate) async fn sync_csinode(
        &self,
        name: &str,
        node_uid: Option<&str>,
        priority: Priority,
    ) -> Result<(), ApiError> {
        let key = ObjectKey {
            node: name.to_string(),
            resource: MIRRORED_OBJECTS.to_string(),
            name: name.to_string(),
        };
        let desired = self
            .view
            .node_object(&key)
            .map(|o| desired(&o.json, name, node_uid));
        let text = desired.as_ref().map(Value::to_string);
        if self.csinodes_known().get(name) == Some(&text) {
            return Ok(());
        }
        let api: Api<CSINode> = Api::all(self.client.clone());
        for _ in 0..CONFLICT_RETRIES {
            let current = self.call(priority, "get", || api.get_opt(name)).await?;
            let current = current.map(|c| serde_json::to_value(c).expect("k8s types serialize"));
            let outcome = match (current, &desired) {
                (None, None) => Ok(()),
                (Some(_), None) => {
                    let dp = DeleteParams::default();
                    match self
                        .call(priority, "delete", || api.delete(name, &dp))
                        .await
                    {
                        Err(e) if !e.is(404) => Err(e),
                        _ => Ok(()),
                    }
                }
                (None, Some(want)) => {
                    let create: CSINode =
                        serde_json::from_value(want.clone()).expect("a CSINode built here");
                    let pp = PostParams::default();
                    self.call(priority, "create", || api.create(&pp, &create))
                        .await
                        .map(|_| ())
                }
                (Some(have), Some(want)) if same(&have, want) => Ok(()),
                (Some(have), Some(want)) => {
                    let mut replace = want.clone();
                    replace["metadata"]["resourceVersion"] =
                        have["metadata"]["resourceVersion"].clone();
                    let replace: CSINode =
                        serde_json::from_value(replace).expect("a CSINode built here");
                    let pp = PostParams::default();
                    self.call(priority, "update", || api.replace(name, &pp, &replace))
                        .await
                        .map(|_| ())
                }
            };
            match outcome {
                Ok(()) => {
                    self.csinodes_known().insert(name.to_string(), text);
                    return Ok(());
                }
                // Changed or created meanwhile, or gone: read it again.
                Err(e) if e.is(409) || e.is(404) => continue,
                Err(e) => return Err(e),
            }
        }
        Err(ApiError {
            code: Some(409),
            message: format!(
                "the CSINode of {name} kept changing under us ({CONFLICT_RETRIES} conflicts in a row)"
            ),
            retry_after: None,
        })
    }

    /// Deletes node `name`'s CSINode upstream with its Node.
    pub(crate) async fn delete_csinode(
        &self,
        name: &str,
        priority: Priority,
    ) -> Result<(), ApiError> {
        let api: Api<CSINode> = Api::all(self.client.clone());
        let dp = DeleteParams::default();
        match self
            .call(priority, "delete", || api.delete(name, &dp))
            .await
        {
            Err(e) if !e.is(404) => return Err(e),
            _ => {}
        }
        self.csinodes_known().remove(name);
        Ok(())
    }
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
