//! The JSON of nodes as `/api/v1/nodes` serves them. Each node is encoded
//! once per change (by its [`View`] stamp) and kept; a list is assembled
//! from those pieces. The list of every node is a snapshot shared by all
//! the requests that come while nothing changed, and every list goes out
//! as a stream of chunks the connection pulls as the client reads, so a
//! list of 10,000 nodes costs neither a conversion per node nor a copy of
//! the whole body per request (the console, kubectl and informers all list
//! the whole site).

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::ops::Range;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use axum::body::{Body, Bytes};
use axum::response::Response;
use bytes::BytesMut;
use hyper::body::{Frame, SizeHint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;

use super::pace::Pacer;
use crate::view::{Shown, View};

/// Nodes encoded between two yields to the runtime: a list that finds
/// thousands changed (every probed node's heartbeat moves each sweep) shares
/// its worker with the small requests queued behind it.
const ENCODES_PER_TURN: usize = 64;
/// The most a list body hands the connection at once.
const CHUNK: usize = 64 << 10;

/// One node's JSON, and its name (the key lists are paged by).
#[derive(Clone)]
pub struct Item {
    pub name: Arc<str>,
    pub json: Bytes,
}

/// Encoded nodes in name order, as of one [`View::stamp`].
pub struct Encoded {
    pub stamp: u64,
    pub items: Vec<Item>,
}

/// One node's kept JSON, and the stamp of the node it was made from.
struct Entry {
    stamp: u64,
    item: Item,
}

/// The nodes' JSON: kept per node while the node is unchanged, and the
/// newest list of every node.
#[derive(Default)]
pub struct NodeJson {
    entries: Mutex<HashMap<String, Entry>>,
    /// The newest list of every node; held across its rebuild, so requests
    /// that come meanwhile wait for it and share it.
    all: tokio::sync::Mutex<Option<Arc<Encoded>>>,
    /// The byte rate lists share as they go out.
    pacer: Arc<Pacer>,
}

impl NodeJson {
    /// Node JSON whose lists go out at `bytes_per_second` in all (0: as
    /// fast as the connections take them).
    pub fn with_list_rate(bytes_per_second: u64) -> NodeJson {
        NodeJson {
            pacer: Arc::new(Pacer::new(bytes_per_second)),
            ..NodeJson::default()
        }
    }

    /// Every published node, as of now: the snapshot of the last call while
    /// the view has not changed since, else a new one built from the nodes'
    /// kept JSON (only the nodes changed since are encoded).
    pub async fn all(&self, view: &View) -> Arc<Encoded> {
        let mut all = self.all.lock().await;
        if let Some(current) = all.as_ref().filter(|a| a.stamp == view.stamp()) {
            return current.clone();
        }
        let (stamp, shown) = view.shown();
        let items = self.encode(&shown).await;
        self.forget_all_but(&shown);
        let encoded = Arc::new(Encoded { stamp, items });
        *all = Some(encoded.clone());
        encoded
    }

    /// The JSON of `shown` (in their order): kept, or encoded now and kept.
    pub async fn encode(&self, shown: &[Shown]) -> Vec<Item> {
        let mut items: Vec<Option<Item>> = Vec::with_capacity(shown.len());
        let mut missing = Vec::new();
        {
            let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            for (i, s) in shown.iter().enumerate() {
                match entries.get(s.node.name.as_str()) {
                    Some(e) if e.stamp == s.stamp => items.push(Some(e.item.clone())),
                    _ => {
                        items.push(None);
                        missing.push(i);
                    }
                }
            }
        }
        let mut made = Vec::with_capacity(missing.len());
        for (n, &i) in missing.iter().enumerate() {
            if n > 0 && n % ENCODES_PER_TURN == 0 {
                tokio::task::yield_now().await;
            }
            let item = encode(&shown[i]);
            items[i] = Some(item.clone());
            made.push((shown[i].stamp, item));
        }
        if !made.is_empty() {
            let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
            for (stamp, item) in made {
                // A request that read the view earlier must not put back an older node.
                match entries.get_mut(&*item.name) {
                    Some(e) if e.stamp >= stamp => {}
                    Some(e) => *e = Entry { stamp, item },
                    None => {
                        entries.insert(item.name.to_string(), Entry { stamp, item });
                    }
                }
            }
        }
        items.into_iter().flatten().collect()
    }

    /// One node's JSON.
    pub async fn one(&self, shown: Shown) -> Bytes {
        self.encode(std::slice::from_ref(&shown))
            .await
            .pop()
            .map(|i| i.json)
            .unwrap_or_default()
    }

    /// Drops the JSON of nodes no longer in `shown` (every published node):
    /// what is kept never outnumbers the registry for long.
    fn forget_all_but(&self, shown: &[Shown]) {
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if entries.len() <= shown.len() {
            return;
        }
        let present: HashSet<&str> = shown.iter().map(|s| s.node.name.as_str()).collect();
        entries.retain(|name, _| present.contains(name.as_str()));
    }

    /// How many nodes' JSON is kept.
    pub fn len(&self) -> usize {
        self.entries.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The items `range` of `encoded` as a `NodeList` response (its head
    /// and tail as [`crate::k8s::NODE_LIST_HEAD`] and
    /// [`crate::k8s::list_tail`] write them), streamed at the lists'
    /// shared rate.
    pub fn list_response(
        &self,
        encoded: Arc<Encoded>,
        range: Range<usize>,
        metadata: &ListMeta,
    ) -> Response {
        let body = ListBody::new(encoded, range, metadata).paced(self.pacer.clone());
        super::json_response(Body::new(body))
    }
}

fn encode(shown: &Shown) -> Item {
    // Kept for as long as the node is unchanged: written with no spare room.
    let json = crate::k8s::NodeJson::shown(&shown.node, shown.beat).to_vec();
    Item {
        name: Arc::from(shown.node.name.as_str()),
        json: Bytes::from(json),
    }
}

/// One node's JSON as a response.
pub fn response(json: Bytes) -> Response {
    super::json_response(json)
}

/// A list's body: its head, the items in chunks of up to [`CHUNK`] as the
/// connection asks for them, then its tail. It holds the snapshot, not a
/// copy: a connection's memory is one chunk however long the list.
pub struct ListBody {
    encoded: Arc<Encoded>,
    /// The rate it shares with other lists, and a chunk waiting for its slot.
    pacer: Option<Arc<Pacer>>,
    held: Option<(Bytes, Pin<Box<tokio::time::Sleep>>)>,
    head: Option<Bytes>,
    /// The first item, the next one, and the end of the range served.
    start: usize,
    next: usize,
    end: usize,
    tail: Option<Bytes>,
    remaining: u64,
}

impl ListBody {
    pub fn new(encoded: Arc<Encoded>, range: Range<usize>, metadata: &ListMeta) -> ListBody {
        let head = Bytes::from_static(crate::k8s::NODE_LIST_HEAD);
        let tail = crate::k8s::list_tail(metadata);
        let items = &encoded.items[range.clone()];
        let remaining = (head.len() + tail.len()) as u64
            + items.iter().map(|i| i.json.len() as u64).sum::<u64>()
            + items.len().saturating_sub(1) as u64;
        ListBody {
            pacer: None,
            held: None,
            start: range.start,
            next: range.start,
            end: range.end,
            encoded,
            head: Some(head),
            tail: Some(Bytes::from(tail)),
            remaining,
        }
    }

    /// The body at `pacer`'s rate.
    pub fn paced(mut self, pacer: Arc<Pacer>) -> ListBody {
        self.pacer = Some(pacer);
        self
    }

    /// The next chunk: whole items up to [`CHUNK`] bytes (an item larger
    /// than that alone); `None` at the end.
    fn next_chunk(&mut self) -> Option<Bytes> {
        if self.remaining == 0 {
            return None;
        }
        let mut chunk = BytesMut::with_capacity(CHUNK.min(self.remaining as usize));
        if let Some(head) = self.head.take() {
            chunk.extend_from_slice(&head);
        }
        while self.next < self.end {
            let item = &self.encoded.items[self.next].json;
            let comma = self.next > self.start;
            if !chunk.is_empty() && chunk.len() + usize::from(comma) + item.len() > CHUNK {
                break;
            }
            if comma {
                chunk.extend_from_slice(b",");
            }
            chunk.extend_from_slice(item);
            self.next += 1;
        }
        if self.next == self.end {
            if let Some(tail) = self.tail.take() {
                chunk.extend_from_slice(&tail);
            }
        }
        Some(chunk.freeze())
    }

    /// The next chunk once its slot has come.
    fn poll_chunk(&mut self, cx: &mut Context<'_>) -> Poll<Option<Bytes>> {
        let chunk = match self.held.take() {
            Some((chunk, mut slot)) => {
                if slot.as_mut().poll(cx).is_pending() {
                    self.held = Some((chunk, slot));
                    return Poll::Pending;
                }
                chunk
            }
            None => {
                let Some(chunk) = self.next_chunk() else {
                    return Poll::Ready(None);
                };
                let at = self.pacer.as_ref().and_then(|p| p.slot(chunk.len()));
                if let Some(at) = at {
                    let mut slot = Box::pin(tokio::time::sleep_until(at));
                    if slot.as_mut().poll(cx).is_pending() {
                        self.held = Some((chunk, slot));
                        return Poll::Pending;
                    }
                }
                chunk
            }
        };
        self.remaining -= chunk.len() as u64;
        Poll::Ready(Some(chunk))
    }
}

impl hyper::body::Body for ListBody {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.get_mut()
            .poll_chunk(cx)
            .map(|c| c.map(|c| Ok(Frame::data(c))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

#[cfg(test)]
pub(crate) mod tests;
