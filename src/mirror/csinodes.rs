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
use kube::api::{Api, PostParams};
use serde_json::Value;

use super::budget::Priority;
use super::jobs::{Ctx, CONFLICT_RETRIES};
use super::ApiError;
use crate::k8s::csinode::{desired, same};
use crate::model::ObjectKey;
use crate::store::MIRRORED_OBJECTS;

/// What is known of a node's CSINode upstream: the desired object last
/// written or found there (as JSON text), or `None` when it is known absent.
pub(crate) type CsiNodeKnown = std::collections::HashMap<String, Option<String>>;

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
                (Some(_), None) => self.delete(priority, &api, name).await,
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
        Err(ApiError::conflict(format!(
            "the CSINode of {name} kept changing under us ({CONFLICT_RETRIES} conflicts in a row)"
        )))
    }

    /// Deletes node `name`'s CSINode upstream with its Node.
    pub(crate) async fn delete_csinode(
        &self,
        name: &str,
        priority: Priority,
    ) -> Result<(), ApiError> {
        let api: Api<CSINode> = Api::all(self.client.clone());
        self.delete(priority, &api, name).await?;
        self.csinodes_known().remove(name);
        Ok(())
    }
}
