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
    made_from: Made,
    json: Bytes,
}

/// What a node's JSON was made from, without a copy of the node (which took
/// as much memory again as the JSON). Every change to a published node takes
/// a new resourceVersion except the folding in of heartbeat times (see
/// `View::publish_heartbeats`), so the version, the condition heartbeat times
/// and the newest heartbeat decide; a digest of every field besides guards
/// against a change made some other way.
struct Made {
    resource_version: u64,
    heartbeat: Option<Micros>,
    condition_beats: Box<[Micros]>,
    digest: u64,
}

impl Made {
    fn of(node: &Node, heartbeat: Option<Micros>) -> Made {
        Made {
            resource_version: node.resource_version,
            heartbeat,
            condition_beats: node.conditions.iter().map(|c| c.last_heartbeat).collect(),
            digest: digest(node),
        }
    }

    fn matches(&self, node: &Node, heartbeat: Option<Micros>) -> bool {
        self.resource_version == node.resource_version
            && self.heartbeat == heartbeat
            && self
                .condition_beats
                .iter()
                .copied()
                .eq(node.conditions.iter().map(|c| c.last_heartbeat))
            && self.digest == digest(node)
    }
}

/// A 64-bit digest of every field of `node` (its compact encoding, hashed).
fn digest(node: &Node) -> u64 {
    struct Hashing(std::collections::hash_map::DefaultHasher);
    impl std::io::Write for Hashing {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0.write(bytes);
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    use std::hash::Hasher;
    let mut hashing = Hashing(Default::default());
    // Writing into a hasher cannot fail; nor can encoding a Node.
    let _ = postcard::to_io(node, &mut hashing);
    hashing.0.finish()
}

/// Serialized nodes, by name. An entry is reused only while the node's
/// version, heartbeat times and newest heartbeat are those it was made from,
/// so a change can never be served stale.
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
            match entries.get_mut(&node.name) {
                Some(e) if e.made_from.matches(&node, heartbeat) => {
                    reuse.reused += 1;
                    items.push(e.json.clone());
                }
                found => {
                    reuse.serialized += 1;
                    let json = serialize(&node, heartbeat);
                    items.push(json.clone());
                    let entry = Entry {
                        made_from: Made::of(&node, heartbeat),
                        json,
                    };
                    match found {
                        Some(e) => *e = entry,
                        None => {
                            entries.insert(node.name, entry);
                        }
                    }
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
    let mut json = serde_json::to_vec(&crate::kube::node(node, heartbeat)).unwrap_or_default();
    // Kept for as long as the node is unchanged: not the growth's spare room
    // (up to as much again).
    json.shrink_to_fit();
    Bytes::from(json)
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
