//! Watches of nodes: where a watch starts (a version, the kept history, or
//! every node), the open stream with its bookmarks, stalls and expiry, and
//! the handle's controls over them.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::Response;
use serde_json::{json, Value};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

use super::answer::ApiError;
use super::connection::Body;
use super::handle::{FakeApiServer, Shared};
use super::list::{selected, selectors};
use super::resource::{ObjectKey, Resource};
use super::routing::Query;
use super::selectors::{FieldSelector, LabelSelector};
use super::state::State;

/// What the open watches are sent.
#[derive(Debug)]
pub(super) enum WatchItem {
    Event {
        rv: u64,
        kind: &'static str,
        object: Value,
    },
    /// Too old to watch from (compacted, or the watcher fell behind): the
    /// watch ends with 410 Gone.
    Expire,
}

impl Shared {
    /// `GET /api/v1/nodes?watch=true`: the events after the given version,
    /// then the new ones as they happen, as newline-separated JSON.
    pub(super) fn watch_nodes(self: &Arc<Self>, query: &Query) -> Result<Response<Body>, ApiError> {
        let (labels, fields) = selectors(Resource::Nodes, query)?;
        let timeout = match query.get("timeoutSeconds") {
            None => Duration::from_secs(1800),
            Some(t) => Duration::from_secs(
                t.parse()
                    .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {t:?}")))?,
            ),
        };
        let bookmarks = query.flag("allowWatchBookmarks");
        let state = self.lock();
        let WatchStart {
            pending,
            from,
            done,
        } = state.watch_start(query.get("resourceVersion"))?;
        // Subscribed under the lock the history was read under: no gap, no repeat.
        let events = state.events.subscribe();
        let every = state.bookmark_interval;
        drop(state);
        let watch = Watch {
            shared: self.clone(),
            pending,
            events,
            labels,
            fields,
            bookmarks,
            every,
            next_bookmark: Instant::now() + every,
            deadline: Instant::now() + timeout,
            last_rv: from,
            stall: self.watch_stall.subscribe(),
            expiry: self.watch_expiry.subscribe(),
            expiry_seen: *self.watch_expiry.borrow(),
            done,
        };
        let frames = futures_util::stream::unfold(watch, |mut watch| async move {
            let line = watch.next_line().await?;
            Some((Ok(hyper::body::Frame::data(line)), watch))
        });
        let mut response = Response::new(StreamBody::new(frames).boxed_unsync());
        response
            .headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(response)
    }
}

/// Where a watch starts: what it sends first, the version it starts after,
/// and whether that first item ends it.
struct WatchStart {
    pending: VecDeque<Arc<WatchItem>>,
    from: u64,
    done: bool,
}

impl State {
    /// Where a watch from `version` starts: every node as it is (no version,
    /// or `0`), the kept events after it, or 410 when it is older than the
    /// history; a version the server has not reached is refused.
    fn watch_start(&self, version: Option<&str>) -> Result<WatchStart, ApiError> {
        let mut pending = VecDeque::new();
        let Some(v) = version.filter(|v| *v != "0") else {
            for (key, node) in self.objects.range(ObjectKey::node("")..) {
                if key.resource != Resource::Nodes {
                    break;
                }
                pending.push_back(Arc::new(WatchItem::Event {
                    rv: self.resource_version,
                    kind: "ADDED",
                    object: node.clone(),
                }));
            }
            return Ok(WatchStart {
                pending,
                from: self.resource_version,
                done: false,
            });
        };
        let from: u64 = v
            .parse()
            .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {v:?}")))?;
        if from > self.resource_version {
            return Err(ApiError::too_large(from, self.resource_version));
        }
        let done = from < self.oldest_watchable;
        if done {
            pending.push_back(Arc::new(WatchItem::Expire));
        } else {
            pending.extend(
                self.history
                    .iter()
                    .filter(|e| matches!(***e, WatchItem::Event { rv, .. } if rv > from))
                    .cloned(),
            );
        }
        Ok(WatchStart {
            pending,
            from,
            done,
        })
    }
}

/// One open watch: what it still has to send, and where it is.
struct Watch {
    pub(super) shared: Arc<Shared>,
    pending: VecDeque<Arc<WatchItem>>,
    pub(super) events: broadcast::Receiver<Arc<WatchItem>>,
    pub(super) labels: LabelSelector,
    pub(super) fields: FieldSelector,
    bookmarks: bool,
    every: Duration,
    next_bookmark: Instant,
    deadline: Instant,
    /// The newest version sent (or filtered out).
    last_rv: u64,
    stall: watch::Receiver<bool>,
    expiry: watch::Receiver<u64>,
    /// The compactions counted when the watch started.
    expiry_seen: u64,
    /// After an error event, nothing more.
    done: bool,
}

impl Watch {
    /// The next line to send; `None` ends the watch.
    async fn next_line(&mut self) -> Option<Bytes> {
        // Each round sends a line, ends, or waits for something to change.
        loop {
            if *self.expiry.borrow() != self.expiry_seen && !self.done {
                self.pending.clear();
                return self.line(&WatchItem::Expire);
            }
            if *self.stall.borrow_and_update() {
                tokio::select! {
                    _ = self.shared.stop.cancelled() => return None,
                    _ = tokio::time::sleep_until(self.deadline) => return None,
                    _ = self.stall.changed() => continue,
                    _ = self.expiry.changed() => continue,
                }
            }
            if let Some(item) = self.pending.pop_front() {
                if let Some(line) = self.line(&item) {
                    return Some(line);
                }
                continue;
            }
            if self.done {
                return None;
            }
            tokio::select! {
                _ = self.shared.stop.cancelled() => return None,
                _ = tokio::time::sleep_until(self.deadline) => return None,
                _ = self.stall.changed() => {}
                _ = self.expiry.changed() => {}
                _ = tokio::time::sleep_until(self.next_bookmark), if self.bookmarks => {
                    self.next_bookmark += self.every;
                    if let Some(line) = self.bookmark() {
                        return Some(line);
                    }
                }
                item = self.events.recv() => match item {
                    Ok(item) => self.pending.push_back(item),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Too far behind: ended, as the API server ends a slow watcher.
                        self.pending.push_back(Arc::new(WatchItem::Expire));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                },
            }
        }
    }

    /// An item as a line, or `None` when it is filtered out or already sent.
    fn line(&mut self, item: &WatchItem) -> Option<Bytes> {
        let event = match item {
            WatchItem::Event { rv, kind, object } => {
                if *rv <= self.last_rv && *kind != "ADDED" {
                    return None;
                }
                self.last_rv = self.last_rv.max(*rv);
                if !selected(Resource::Nodes, object, &self.labels, &self.fields) {
                    return None;
                }
                json!({"type": kind, "object": object})
            }
            WatchItem::Expire => {
                self.done = true;
                json!({"type": "ERROR", "object": {
                    "kind": "Status", "apiVersion": "v1", "metadata": {},
                    "status": "Failure",
                    "message": format!("too old resource version: {}", self.last_rv),
                    "reason": "Expired", "code": 410,
                }})
            }
        };
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Some(Bytes::from(line))
    }

    /// A bookmark at the server's version, once every event up to it was
    /// taken from the channel (else it would claim events still to come).
    fn bookmark(&mut self) -> Option<Bytes> {
        let state = self.shared.lock();
        if !self.events.is_empty() || !self.pending.is_empty() {
            return None;
        }
        self.last_rv = self.last_rv.max(state.resource_version);
        drop(state);
        let event = json!({"type": "BOOKMARK", "object": {
            "kind": "Node", "apiVersion": "v1",
            "metadata": {"resourceVersion": self.last_rv.to_string()},
        }});
        let mut line = serde_json::to_vec(&event).unwrap_or_default();
        line.push(b'\n');
        Some(Bytes::from(line))
    }
}

impl FakeApiServer {
    /// Forgets the watch history, as etcd compaction does: a watch from any
    /// version until now is answered 410 Gone, and every open watch ends at
    /// once with a 410 `ERROR` event, dropping what it had not sent yet
    /// (even while stalled).
    pub fn compact(&self) {
        let mut state = self.shared().lock();
        state.history.clear();
        state.oldest_watchable = state.resource_version;
        drop(state);
        self.shared().watch_expiry.send_modify(|n| *n += 1);
    }

    /// While `true`, open watches send nothing (events, bookmarks), as over
    /// a half-open connection; new watches start but stay silent too.
    pub fn stall_watches(&self, stalled: bool) {
        self.shared().watch_stall.send_replace(stalled);
    }

    /// How many node events are kept for watches to start from.
    pub fn set_watch_history(&self, events: usize) {
        let mut state = self.shared().lock();
        state.history_limit = events;
        while state.history.len() > events {
            if let Some(old) = state.history.pop_front() {
                if let WatchItem::Event { rv, .. } = *old {
                    state.oldest_watchable = rv;
                }
            }
        }
    }

    /// How often watches that asked for them get a `BOOKMARK` event.
    pub fn set_bookmark_interval(&self, every: Duration) {
        self.shared().lock().bookmark_interval = every;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::test_support::*;

    #[tokio::test]
    async fn watches_replay_from_a_version_then_follow() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.put_node(node_json("n1"));
        let from = server.resource_version().to_string();
        server.put_node(node_json("n2"));
        let pp = PatchParams::default();
        let label = Patch::Merge(json!({"metadata": {"labels": {"b": "c"}}}));
        nodes.patch("n1", &pp, &label).await.expect("patch");
        let params = ::kube::api::WatchParams::default().timeout(5);
        let watch = {
            let nodes = nodes.clone();
            let params = params.clone();
            tokio::spawn(async move { watch_events(&nodes, &params, &from, 5).await })
        };
        // Live: a deletion through the API and one by the handle.
        timeout(LIMIT, async {
            while server.watches() == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the watch is open");
        nodes
            .delete("n2", &DeleteParams::default())
            .await
            .expect("delete");
        server.remove(&ObjectKey::node("n1"));
        let seen = watch.await.unwrap();
        assert_eq!(
            seen,
            [
                ev("ADDED", "n2"),
                ev("MODIFIED", "n1"),
                ev("DELETED", "n2"),
                ev("DELETED", "n1"),
            ]
        );
        // Without a version: the nodes there are, as ADDED.
        server.put_node(node_json("n3"));
        let first = watch_events(&nodes, &params.clone().timeout(1), "0", 1).await;
        assert_eq!(first, [ev("ADDED", "n3")]);
        // Selectors filter; the watch ends cleanly at its timeout.
        let only_n3 = params.clone().fields("metadata.name=n3").timeout(1);
        let from = server.resource_version().to_string();
        server.put_node(node_json("n4"));
        assert!(watch_events(&nodes, &only_n3, &from, 1).await.is_empty());
    }

    #[tokio::test]
    async fn bookmarks_carry_the_version_a_watch_may_resume_from() {
        let server = FakeApiServer::start().await;
        server.set_bookmark_interval(Duration::from_millis(50));
        let nodes: Api<Node> = Api::all(client(&server));
        server.put_node(node_json("n1"));
        server.put_node(node_json("n2"));
        let params = ::kube::api::WatchParams::default().timeout(5);
        let seen = watch_events(&nodes, &params, "1", 2).await;
        assert_eq!(seen[0], ev("ADDED", "n2"));
        assert_eq!(seen[1], ("BOOKMARK".into(), "2".into(), 0));
    }

    #[tokio::test]
    async fn old_versions_are_gone_and_future_ones_too_large() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.set_watch_history(2);
        for i in 0..4 {
            server.put_node(node_json(&format!("n{i}")));
        }
        let params = ::kube::api::WatchParams::default().timeout(5);
        // Events 3 and 4 are kept: from 2 works, from 1 is too old.
        assert_eq!(
            watch_events(&nodes, &params, "2", 2).await,
            [ev("ADDED", "n2"), ev("ADDED", "n3")]
        );
        assert_eq!(
            watch_events(&nodes, &params, "1", 2).await,
            [("ERROR".into(), "Expired".into(), 410)]
        );
        let err = nodes.watch(&params, "99").await.err().expect("refused");
        let ::kube::Error::Api(status) = err else {
            panic!("{err:?}")
        };
        assert_eq!(status.code, 504);
        assert!(status
            .message
            .contains("Too large resource version: 99, current: 4"));
        // Compaction ends an open watch with 410 and forgets everything.
        let open = {
            let nodes = nodes.clone();
            let params = params.clone();
            tokio::spawn(async move { watch_events(&nodes, &params, "4", 3).await })
        };
        timeout(LIMIT, async {
            while server.watches() == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the watch is open");
        server.compact();
        assert_eq!(
            open.await.unwrap(),
            [("ERROR".into(), "Expired".into(), 410)]
        );
        assert_eq!(
            watch_events(&nodes, &params, "3", 1).await,
            [("ERROR".into(), "Expired".into(), 410)]
        );
        // Watches of other resources are refused.
        let pods: Api<Pod> = Api::all(client(&server));
        let err = pods.watch(&params, "0").await.err().expect("refused");
        assert!(err.to_string().contains("watches nodes only"), "{err}");
    }

    #[tokio::test]
    async fn a_stalled_watch_sends_nothing_until_it_is_released() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.stall_watches(true);
        let params = ::kube::api::WatchParams::default().timeout(5);
        let open = {
            let nodes = nodes.clone();
            let params = params.clone();
            tokio::spawn(async move { watch_events(&nodes, &params, "0", 1).await })
        };
        timeout(LIMIT, async {
            while server.watches() == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the watch is open");
        server.put_node(node_json("n1"));
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!open.is_finished(), "held back");
        server.stall_watches(false);
        assert_eq!(open.await.unwrap(), [ev("ADDED", "n1")]);
    }
}
