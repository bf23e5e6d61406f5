//! `GET /api/v1/pods?watch=true`: the mirror pods' `ADDED` / `MODIFIED` /
//! `DELETED` events, built from the durable history as the node watch is
//! ([`super::watch`]): each write of a pod is an `ObjectChanged` entry, and
//! the pod's resourceVersion is that entry's seq, so a watch resumes from
//! any version the history still holds. A kubelet's pods reflector
//! (`pkg/kubelet/config/apiserver.go:38`, `:66`) watches its node's pods
//! this way, and so sees its mirror pods without relisting.
//!
//! The history names what changed, not its content: an entry is streamed
//! with the pod as the view shows it when that write is the newest (a pod
//! written again since is streamed at its later entry); a deleted pod with
//! the content it last had here, or only its name, namespace and node if it
//! was deleted before the watch began. Pods deleted with their node are
//! streamed as `DELETED` at the node's deletion.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::body::Bytes;
use axum::http::HeaderMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde_json::Value;
use tokio::sync::mpsc;

use super::node_objects::served;
use super::params::{wants_table, ListParams};
use super::pods::{field, KEPT, POD_FIELDS, RESOURCE};
use super::watch::{begin, line, stream_response, Follow, Scope, WatchStart, DEFAULT_TIMEOUT};
use super::{Answer, AppState};
use crate::k8s::selectors::{FieldSelector, LabelSelector};
use crate::k8s::table::{self, IncludeObject};
use crate::k8s::watch::WatchEventType;
use crate::k8s::{pod_at_version, pod_identity};
use crate::model::{Event, EventKind, Micros};

/// What a pod watch selects and how it renders.
struct Selection {
    namespace: Option<String>,
    /// The node a field selector pins (`spec.nodeName=NAME`).
    node: Option<String>,
    fields: FieldSelector,
    labels: LabelSelector,
    /// kubectl's `get -w`: each event's object is a one-row Table.
    table: Option<IncludeObject>,
}

impl Selection {
    fn keeps(&self, pod: &Value) -> bool {
        self.namespace
            .as_deref()
            .is_none_or(|ns| pod["metadata"]["namespace"] == ns)
            && self.fields.matches(|f| field(pod, f))
            && self.labels.matches(&super::labels_of(pod))
    }

    fn render(&self, pod: Value) -> Value {
        match self.table {
            None => pod,
            Some(include) => {
                let metadata = ListMeta {
                    resource_version: pod["metadata"]["resourceVersion"]
                        .as_str()
                        .map(str::to_string),
                    ..ListMeta::default()
                };
                serde_json::to_value(table::pod_table(&[pod], metadata, include, Micros::now()))
                    .unwrap_or(Value::Null)
            }
        }
    }
}

/// Starts a pod watch (`?watch=true` on a pods list).
pub(crate) async fn watch(
    s: AppState,
    namespace: Option<String>,
    params: ListParams,
    headers: &HeaderMap,
) -> Answer {
    let super::watch::WatchRequest {
        query,
        bookmarks,
        timeout,
    } = super::watch::watch_request(&params, POD_FIELDS)?;
    let timeout = timeout.unwrap_or(DEFAULT_TIMEOUT);
    let selection = Selection {
        namespace,
        node: query.fields.required("spec.nodeName").map(str::to_string),
        fields: query.fields,
        labels: query.labels,
        table: wants_table(headers).then_some(query.include),
    };
    let at = begin(&s, params.resource_version.as_deref()).await?;
    let (sender, receiver) = mpsc::channel::<Bytes>(64);
    tokio::spawn(stream(s, selection, at, timeout, bookmarks, sender));
    Ok(stream_response(receiver))
}

/// A pod known by its node and `namespace/name`.
type Known = BTreeMap<(String, String), Value>;

/// The events one history entry makes for this watch.
fn events_of(
    s: &AppState,
    sel: &Selection,
    known: &mut Known,
    event: &Event,
) -> Vec<(WatchEventType, Value)> {
    let Some(node) = event.node.as_deref() else {
        return Vec::new();
    };
    if sel.node.as_deref().is_some_and(|n| n != node) {
        return Vec::new();
    }
    match &event.kind {
        EventKind::ObjectChanged {
            resource,
            name,
            action,
            ..
        } if resource == RESOURCE => {
            let k = (node.to_string(), name.clone());
            if action == "deleted" {
                return match known.remove(&k) {
                    Some(pod) if sel.keeps(&pod) => {
                        vec![(WatchEventType::Deleted, pod_at_version(pod, event.seq))]
                    }
                    Some(_) => Vec::new(),
                    // Unknown here: its identity, if the selection can tell.
                    None => {
                        let pod = pod_identity(node, name);
                        let plain = sel.labels.is_empty() && sel.keeps(&pod);
                        match plain {
                            true => vec![(WatchEventType::Deleted, pod_at_version(pod, event.seq))],
                            false => Vec::new(),
                        }
                    }
                };
            }
            let key = KEPT.key(node, name);
            // Written again since: streamed at that later entry.
            let Some(object) = s
                .view
                .node_object(&key)
                .filter(|o| o.generation == event.seq)
            else {
                return Vec::new();
            };
            let pod = served(&object);
            let now = sel.keeps(&pod);
            // An update of a pod not known here: it was there before, and
            // is taken as selected then as it is now.
            let before = match known.insert(k, pod.clone()) {
                Some(p) => sel.keeps(&p),
                None => action != "created" && now,
            };
            match (before, now) {
                (_, true) if action == "created" => vec![(WatchEventType::Added, pod)],
                (true, true) => vec![(WatchEventType::Modified, pod)],
                (false, true) => vec![(WatchEventType::Added, pod)],
                // No longer selected: gone, as kube-apiserver's watch says.
                (true, false) => vec![(WatchEventType::Deleted, pod)],
                (false, false) => Vec::new(),
            }
        }
        EventKind::Deleted { .. } => {
            let gone: Vec<(String, String)> = known
                .range((node.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == node)
                .map(|(k, _)| k.clone())
                .collect();
            gone.into_iter()
                .filter_map(|k| known.remove(&k))
                .filter(|pod| sel.keeps(pod))
                .map(|pod| (WatchEventType::Deleted, pod_at_version(pod, event.seq)))
                .collect()
        }
        _ => Vec::new(),
    }
}

/// Streams a pod watch: the pods first when it starts from now, then the
/// history's entries about pods, bookmarks, and the end of the stream.
async fn stream(
    s: AppState,
    sel: Selection,
    at: WatchStart,
    timeout: Duration,
    bookmarks: bool,
    out: mpsc::Sender<Bytes>,
) {
    let WatchStart { from, start, pin } = at;
    let pods = match sel.node.as_deref() {
        Some(node) => s.view.node_objects_on(RESOURCE, node),
        None => s.view.node_objects(RESOURCE),
    };
    let mut known = Known::new();
    for object in pods {
        // Known as of `start` (from now: ADDED first). A pod written since
        // comes as its entries; what it was at `start` is not known here.
        if object.generation > start {
            continue;
        }
        let pod = served(&object);
        if from.is_none() && sel.keeps(&pod) {
            let added = line(WatchEventType::Added, sel.render(pod.clone()));
            if out.send(added).await.is_err() {
                return;
            }
        }
        known.insert((object.node.clone(), object.name.clone()), pod);
    }
    // A kubelet's watch of its own pods (`spec.nodeName=NAME`) reads its
    // node's entries only.
    let scope = sel.node.clone().map_or(Scope::All, Scope::One);
    let bookmarks = bookmarks.then_some(("v1", "Pod"));
    let mut follow = Follow::new(&s, &out, (start, pin), scope, timeout, bookmarks);
    while let Some(events) = follow.page().await {
        // The view shows the pods of entries up to this seq; later ones
        // wait for it, so none is missed.
        let published = s.view.published();
        let shown = events.partition_point(|e| e.seq <= published);
        for event in &events[..shown] {
            for (kind, pod) in events_of(&s, &sel, &mut known, event) {
                if out.send(line(kind, sel.render(pod))).await.is_err() {
                    return;
                }
            }
        }
        follow.streamed(&events, shown);
    }
}
