//! Eviction in the mirror: an evicted (or deleted) node's pods, deleted
//! from the API server after re-checking that the decision still holds: not
//! for a node Ready again or recovered since, not while the whole site looks
//! down. DaemonSet pods and static pods' mirrors stay, as upstream. The
//! controller decides evictions (`crate::controller::eviction`); the
//! store's outbox brings the work here (`OutboxKey::EvictPods`).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, ListParams};
use kube::core::PartialObjectMeta;

use super::budget::Priority;
use super::jobs::{done, failed, store_error, Ctx, PAGE};
use super::queue::Outcome;
use super::ApiError;
use crate::controller::WriteRequest;
use crate::model::{ConditionStatus, EventKind, Micros, READY};
use crate::store::OutboxKey;

/// A pod eviction held (the whole site looks down) is looked at again after this.
const EVICTION_HELD_RETRY: Duration = Duration::from_secs(10);

/// Carries out an outbox entry's pod eviction and records what it came to;
/// `Err` with the outcome when the entry is not done with.
pub(super) async fn evict_and_record(
    ctx: &Ctx,
    name: &str,
    priority: Priority,
) -> Result<(), Outcome> {
    let result = match ctx.evict_pods(name, priority).await {
        Err(e) => return Err(failed(ctx, format!("deleting the pods of {name}"), e)),
        Ok(Evicted::Nothing) => return Err(done(ctx, false, false)),
        Ok(Evicted::Held(why)) => {
            tracing::warn!(node = %name, "pod eviction {why}");
            return Err(Outcome::Later(EVICTION_HELD_RETRY));
        }
        Ok(Evicted::Dropped(why)) => why,
        Ok(Evicted::Done { deleted, kept }) => {
            tracing::warn!(node = %name, deleted, kept, "pods deleted");
            format!("deleted {deleted} pods ({kept} DaemonSet or static pods kept)")
        }
    };
    let kind = EventKind::EvictionDone { result };
    let recorded = ctx.controller.write(|reply| WriteRequest::Record {
        name: name.to_string(),
        kind,
        reply,
    });
    if let Err(e) = recorded.await {
        let e = ApiError::local(e.to_string());
        return Err(failed(ctx, format!("recording the eviction of {name}"), e));
    }
    Ok(())
}

/// What a pod eviction came to.
enum Evicted {
    Done {
        deleted: usize,
        kept: usize,
    },
    /// The decision no longer holds; recorded and forgotten.
    Dropped(String),
    /// Not now: retried later.
    Held(String),
    /// The entry was already gone.
    Nothing,
}

impl Ctx {
    /// Deletes the pods of an evicted (or deleted) node, after re-checking
    /// that the decision still holds.
    async fn evict_pods(&self, name: &str, priority: Priority) -> Result<Evicted, ApiError> {
        let key = OutboxKey::EvictPods(name.to_string());
        let Some(entry) = self.store.outbox_entry(&key).map_err(store_error)? else {
            return Ok(Evicted::Nothing);
        };
        // The newest decision counts (a coalesced entry keeps the oldest
        // queueing time): when was the event this entry stands for?
        let decided = self
            .store
            .event(entry.seq)
            .map_err(store_error)?
            .map_or(entry.enqueued, |e| e.time);
        if let Some(reason) = self.still_due(name, decided) {
            return Ok(Evicted::Dropped(reason));
        }
        // A node gone from the registry has no kubelet to confirm a graceful
        // deletion: its pods are removed at once, as the pod GC does for
        // orphans. Otherwise pods get their grace period, and pods already
        // terminating are left to it.
        let gone = self.view.get(name).is_none();
        let delete = if gone {
            DeleteParams::default().grace_period(0)
        } else {
            DeleteParams::default()
        };
        if let Some(why) = self.site_down() {
            return Ok(Evicted::Held(why));
        }
        // The same requests as an `Api<Pod>`'s, but each pod read for its
        // metadata only, all that is looked at: the controller never decodes a
        // whole `Pod` (docs/decisions/binary-size.md).
        let pods: Api<PartialObjectMeta<Pod>> = Api::all(self.client.clone());
        let mut params = ListParams::default()
            .fields(&format!("spec.nodeName={name}"))
            .limit(PAGE);
        let (mut deleted, mut kept) = (0usize, 0usize);
        // Bounded: one page per PAGE pods; a node holds at most a few hundred.
        for _ in 0..1000 {
            let page = self.call(priority, "list", || pods.list(&params)).await?;
            for PartialObjectMeta { metadata, .. } in &page.items {
                if keeps_its_pod(metadata) {
                    kept += 1;
                    continue;
                }
                if metadata.deletion_timestamp.is_some() && !gone {
                    continue;
                }
                let (Some(ns), Some(pod_name)) =
                    (metadata.namespace.as_deref(), metadata.name.as_deref())
                else {
                    continue;
                };
                let api: Api<PartialObjectMeta<Pod>> = Api::namespaced(self.client.clone(), ns);
                match self
                    .call(priority, "delete", || api.delete(pod_name, &delete))
                    .await
                {
                    Ok(_) => deleted += 1,
                    Err(e) if e.is(404) => {}
                    Err(e) => return Err(e),
                }
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => break,
            }
        }
        Ok(Evicted::Done { deleted, kept })
    }

    /// Why a queued pod deletion must not happen any more, if so.
    fn still_due(&self, name: &str, decided: Micros) -> Option<String> {
        let (node, _) = self.view.get(name)?; // Deleted for good: its pods go.
        let ready = node.condition(READY);
        match ready.map(|c| c.status) {
            Some(ConditionStatus::True) => Some("not carried out: the node is Ready again".into()),
            _ if ready.is_some_and(|c| c.last_transition > decided) => Some(
                "not carried out: the node recovered since the decision; a new one will be made"
                    .into(),
            ),
            _ => None,
        }
    }

    /// Set while no node of the site is Ready: a partition or the
    /// controller's own network, not the nodes.
    fn site_down(&self) -> Option<String> {
        let nodes = self.view.list();
        let ready = nodes
            .iter()
            .filter(|(n, _)| n.ready() == ConditionStatus::True)
            .count();
        (nodes.len() > 1 && ready == 0).then(|| {
            format!(
                "held: none of the site's {} nodes is Ready, which looks like a partition",
                nodes.len()
            )
        })
    }
}

/// Pods a node's eviction leaves alone, as the upstream controller does:
/// DaemonSet pods (they would come straight back) and static pods' mirrors.
fn keeps_its_pod(metadata: &ObjectMeta) -> bool {
    let daemon = metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet");
    let mirror = metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key("kubernetes.io/config.mirror"));
    daemon || mirror
}
