//! The JSON of `GET /api/v1/nodes`: each node serialized once and kept until
//! it or its heartbeat changes, so a list of 10,000 nodes costs a copy of
//! bytes rather than 10,000 conversions (the console, kubectl and the CLI all
//! list the whole site).

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use axum::body::Bytes;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;

use crate::model::{Micros, Node};
use crate::view::View;

/// One node's JSON and what it was made from.
struct Entry {
    node: Node,
    heartbeat: Option<Micros>,
    json: Bytes,
}

/// Serialized nodes, by name. An entry is reused only while the node (every
/// field, not only its resourceVersion) and its newest heartbeat are equal to
/// what it was made from, so a change can never be served stale.
#[derive(Default)]
pub struct NodeJsonCache {
    entries: Mutex<HashMap<String, Entry>>,
}

/// How a list was answered, for tests and the benchmark's reasoning.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reuse {
    /// Nodes whose JSON was reused.
    pub reused: usize,
    /// Nodes serialized for this list.
    pub serialized: usize,
}

impl NodeJsonCache {
    /// The `NodeList` for `nodes` (already filtered, paged and in order), as
    /// the bytes `Json(List { items, metadata })` would be, and how many
    /// nodes were serialized for it.
    pub fn list(&self, nodes: Vec<(Node, Option<Micros>)>, metadata: &ListMeta) -> (Bytes, Reuse) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        let mut reuse = Reuse::default();
        let mut items = Vec::with_capacity(nodes.len());
        for (node, heartbeat) in nodes {
            match entries.get(&node.name) {
                Some(e) if e.heartbeat == heartbeat && e.node == node => {
                    reuse.reused += 1;
                    items.push(e.json.clone());
                }
                _ => {
                    reuse.serialized += 1;
                    let json = serialize(&node, heartbeat);
                    items.push(json.clone());
                    let entry = Entry {
                        node,
                        heartbeat,
                        json,
                    };
                    entries.insert(entry.node.name.clone(), entry);
                }
            }
        }
        drop(entries);
        (envelope(&items, metadata), reuse)
    }

    /// Drops the JSON of nodes deleted from `view`. Entries are made only
    /// for listed nodes, so after a list of every node there are more of
    /// them than nodes exactly when some node was deleted; what is kept
    /// never outnumbers the registry for long.
    pub fn forget_deleted(&self, view: &View) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        view.with_nodes(|nodes| {
            if entries.len() <= nodes.len() {
                return;
            }
            let present: HashSet<&str> = nodes.map(|n| n.name.as_str()).collect();
            entries.retain(|name, _| present.contains(name.as_str()));
        });
    }

    /// How many nodes' JSON is kept.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn serialize(node: &Node, heartbeat: Option<Micros>) -> Bytes {
    // A Node of k8s-openapi types always serializes.
    Bytes::from(serde_json::to_vec(&crate::kube::node(node, heartbeat)).unwrap_or_default())
}

/// `{"apiVersion":"v1","kind":"NodeList","items":[…],"metadata":{…}}`, the
/// key order `k8s_openapi::List` serializes in.
fn envelope(items: &[Bytes], metadata: &ListMeta) -> Bytes {
    let metadata = serde_json::to_vec(metadata).unwrap_or_else(|_| b"{}".to_vec());
    let size = items.iter().map(|i| i.len() + 1).sum::<usize>() + metadata.len() + 64;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(br#"{"apiVersion":"v1","kind":"NodeList","items":["#);
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(item);
    }
    out.extend_from_slice(br#"],"metadata":"#);
    out.extend_from_slice(&metadata);
    out.push(b'}');
    Bytes::from(out)
}

/// The list as a JSON response.
pub fn response(body: Bytes) -> Response {
    (
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests;
