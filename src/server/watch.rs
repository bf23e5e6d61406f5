//! `GET /api/v1/nodes?watch=true`: a stream of `ADDED` / `MODIFIED` /
//! `DELETED` events built from the durable event log, so a watch resumes from
//! any resourceVersion still in the log — across controller restarts too.

use std::collections::HashSet;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;
use tokio::sync::mpsc;

use super::{Answer, AppState};
use crate::history::Replay;
use crate::k8s::watch::{
    bookmark, error_line, internal_error, too_large_version, too_old_version, watch_line,
    WatchEventType,
};
use crate::model::{Event, EventKind, Node};
use crate::store::{HistoryQuery, ReadPin, StoreError};

/// How long a watch runs unless the client asks for less (the API server's
/// default minimum request timeout).
pub(crate) const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
/// How often a bookmark is sent to clients that allow them.
pub(crate) const BOOKMARK_EVERY: Duration = Duration::from_secs(60);
/// Events read from the log per round, so one slow reader cannot hold much.
pub(crate) const PAGE: usize = 1000;
/// How long a watch from a version not yet durable waits for it, as
/// kube-apiserver waits for its cache (`blockTimeout`).
const TOO_LARGE_WAIT: Duration = Duration::from_secs(3);
/// kube-apiserver's `resourceVersionTooHighRetrySeconds`.
const TOO_LARGE_RETRY_SECONDS: i32 = 1;

/// Keeps only some nodes (label and field selectors).
pub(crate) type NodeFilter = std::sync::Arc<dyn Fn(&Node) -> bool + Send + Sync>;
/// Renders a node for the stream (a Node, or a Table for kubectl).
pub(crate) type NodeRender = std::sync::Arc<dyn Fn(&Node) -> Value + Send + Sync>;

/// Which nodes' events a watch can show at all, known from the request
/// before any node is read. A node outside it is neither looked up nor
/// replayed: a kubelet's watch of its own node (`metadata.name=NAME`) holds
/// one node, and a watch of a resource nodekeeper keeps none of holds none,
/// however many nodes the site has. kube-apiserver's watch cache narrows
/// the same way, by its index on `metadata.name` (`storage/cacher`'s
/// `IndexerFuncs`).
#[derive(Clone, Default, PartialEq, Eq, Debug)]
pub(crate) enum Scope {
    #[default]
    All,
    /// Only the node of this name.
    One(String),
    /// No node: only the versions go by (for bookmarks).
    Nothing,
}

impl Scope {
    fn holds(&self, node: &str) -> bool {
        match self {
            Scope::All => true,
            Scope::One(name) => name == node,
            Scope::Nothing => false,
        }
    }
}

/// What a watch request asks for.
#[derive(Clone, Default)]
pub(crate) struct WatchParams {
    pub resource_version: Option<String>,
    pub timeout: Option<Duration>,
    pub bookmarks: bool,
    pub filter: Option<NodeFilter>,
    /// Narrows what is read before `filter` looks at a node.
    pub scope: Scope,
    pub render: Option<NodeRender>,
    /// What is watched, for its bookmarks: `apiVersion` and `kind`
    /// (`None`: nodes).
    pub kind: Option<(&'static str, &'static str)>,
}

/// Starts a watch; the response streams until the timeout, the client
/// leaves, or the server stops.
///
/// A version before the horizon is `410 Expired`, as kube-apiserver answers
/// one older than its cache. One after the newest durable event is waited
/// for up to [`TOO_LARGE_WAIT`] (a flush in progress); then the answer is
/// kube-apiserver's `504 Timeout` "Too large resource version" with
/// `retryAfterSeconds`, which makes client-go relist: nodekeeper's versions
/// are its store's seqs, so one ahead of the log comes from another store.
pub(crate) async fn watch_nodes(s: AppState, params: WatchParams) -> Answer {
    let start = begin(&s, params.resource_version.as_deref()).await?;
    let (sender, receiver) = mpsc::channel::<Bytes>(64);
    tokio::spawn(stream_events(s, params, start, sender));
    Ok(stream_response(receiver))
}

/// Where a watch starts, checked: `from` the version asked for (`None`:
/// from now, with every object first), `start` the first version after
/// which events are streamed, and the history pinned from it.
pub(crate) struct WatchStart {
    pub from: Option<u64>,
    pub start: u64,
    pub pin: ReadPin,
}

/// Reads a watch's `resourceVersion` and pins the history from it, with
/// the answers kube-apiserver gives one it cannot serve (see [`watch_nodes`]).
pub(crate) async fn begin(
    s: &AppState,
    resource_version: Option<&str>,
) -> Result<WatchStart, Response> {
    let from = version_asked(resource_version)?;
    if let Some(v) = from {
        let mut durable_rx = s.view.subscribe();
        let reached = tokio::time::timeout(TOO_LARGE_WAIT, async {
            while s.store.durable_seq() < v {
                if durable_rx.changed().await.is_err() {
                    return false;
                }
            }
            true
        })
        .await;
        if reached != Ok(true) {
            return Err(too_large(v, s.store.durable_seq()));
        }
    }
    let durable = s.store.durable_seq();
    let start = from.unwrap_or(durable);
    // Versions before the horizon cannot be replayed; from it on they can,
    // and what they need is pinned until the watch has moved past it.
    match s.store.pin_history(start) {
        Ok(pin) => Ok(WatchStart { from, start, pin }),
        Err(StoreError::Expired { requested, horizon }) => Err(too_old(requested, horizon)),
        Err(e) => Err(super::internal(e)),
    }
}

/// The version a watch starts after (`None`: from now, for an empty or `0` one).
pub(crate) fn version_asked(resource_version: Option<&str>) -> Result<Option<u64>, Response> {
    match resource_version {
        None | Some("") | Some("0") => Ok(None),
        Some(v) => v.parse().map(Some).map_err(|_| {
            super::bad_request(format!(
                "resourceVersion {v:?} is not one this server hands out"
            ))
        }),
    }
}

/// The response of a watch: the lines `receiver` gets, as they come.
pub(crate) fn stream_response(receiver: mpsc::Receiver<Bytes>) -> Response {
    let body = Body::from_stream(futures_util::stream::unfold(
        receiver,
        |mut rx| async move {
            rx.recv()
                .await
                .map(|chunk| (Ok::<_, Infallible>(chunk), rx))
        },
    ));
    super::json_response(body)
}

/// What a watch request asks for besides where to start, read and checked
/// in the order kube-apiserver checks it: the refused options, the
/// selectors, `allowWatchBookmarks`.
pub(crate) struct WatchRequest {
    pub query: super::params::ListQuery,
    pub bookmarks: bool,
    /// `?timeoutSeconds=` (`None`: [`DEFAULT_TIMEOUT`]).
    pub timeout: Option<Duration>,
}

/// Reads a watch request of a resource selectable by `fields`.
pub(crate) fn watch_request(
    params: &super::params::ListParams,
    fields: &[&str],
) -> Result<WatchRequest, Response> {
    // In kube-apiserver's order (apiserver `pkg/endpoints/handlers/get.go`,
    // `ListResource`): the query decoded, a malformed selector a 400; the
    // options validated (`ValidateListOptions`), one refused on a watch a
    // 422; then the field labels converted, one the resource lacks a 400.
    let query = params.decode().map_err(super::bad_request)?;
    crate::k8s::watch::check_watch_options(
        params.send_initial_events.is_some(),
        params.resource_version_match.as_deref(),
    )
    .map_err(|status| (StatusCode::UNPROCESSABLE_ENTITY, Json(status)).into_response())?;
    query
        .fields
        .check_fields(fields)
        .map_err(super::bad_request)?;
    Ok(WatchRequest {
        query,
        bookmarks: super::params::query_bool(params.allow_watch_bookmarks.as_deref()),
        timeout: params
            .timeout_seconds
            .filter(|t| *t > 0)
            .map(|t| Duration::from_secs(t as u64)),
    })
}

/// kube-apiserver's answer to a version older than it keeps (`410 Expired`).
pub(crate) fn too_old(requested: u64, horizon: u64) -> Response {
    (StatusCode::GONE, Json(too_old_version(requested, horizon))).into_response()
}

/// kube-apiserver's answer to a version it does not have yet
/// (`storage.NewTooLargeResourceVersionError`).
fn too_large(requested: u64, current: u64) -> Response {
    let status = too_large_version(requested, current, TOO_LARGE_RETRY_SECONDS);
    (
        StatusCode::GATEWAY_TIMEOUT,
        [(header::RETRY_AFTER, TOO_LARGE_RETRY_SECONDS.to_string())],
        Json(status),
    )
        .into_response()
}

/// A round of a watch's reading of the log.
pub(crate) struct Read {
    /// The events of the watch's [`Scope`], oldest first.
    pub events: Vec<Event>,
    /// How far the log was read: no event of the scope up to here is left.
    pub read_to: u64,
    /// A page's worth was read and more may follow at once.
    pub more: bool,
}

/// Reads up to a page of the durable events of `scope` after `after`, down
/// to the pin's `floor`; fails when pruning took history the watch had not
/// read yet. A watch of one node reads that node's events by the store's
/// index, and one of no node reads none: the cost of a round is the
/// watch's own events, not the site's.
pub(crate) async fn read_after(
    s: &AppState,
    after: u64,
    floor: u64,
    scope: &Scope,
) -> Result<Read, StoreError> {
    let store = s.store.clone();
    let scope = scope.clone();
    tokio::task::spawn_blocking(move || {
        // Every event up to here is durable before the page is read, so a
        // page with nothing left after it has read at least this far.
        let durable = store.durable_seq();
        let node = match scope {
            Scope::Nothing => {
                store.check_kept(after)?;
                return Ok(Read {
                    events: Vec::new(),
                    read_to: durable.max(after),
                    more: false,
                });
            }
            Scope::One(name) => Some(name),
            Scope::All => None,
        };
        let query = HistoryQuery {
            after_seq: Some(after),
            node,
            ..HistoryQuery::default()
        };
        let page = store.history_page_pinned(&query, PAGE, floor)?;
        store.check_kept(after)?;
        let newest = page.events.last().map_or(after, |e| e.seq);
        let (read_to, more) = match page.next_after {
            Some(next) => (next.max(newest), true),
            None => (durable.max(newest), false),
        };
        Ok(Read {
            events: page.events,
            read_to,
            more,
        })
    })
    .await
    .unwrap_or_else(|e| Err(StoreError::Io(sled::Error::ReportableBug(e.to_string()))))
}

/// The nodes an event page touches that the watch has not followed yet, as
/// each was just before the page's first event about it.
async fn resolve(
    s: &AppState,
    wanted: Vec<(String, u64)>,
    floor: u64,
) -> Result<Vec<(String, Option<Node>)>, StoreError> {
    let store = s.store.clone();
    tokio::task::spawn_blocking(move || {
        wanted
            .into_iter()
            .map(|(name, seq)| {
                let node = store.node_at_pinned(&name, seq, floor)?;
                Ok((name, node))
            })
            .collect()
    })
    .await
    .unwrap_or_else(|e| Err(StoreError::Io(sled::Error::ReportableBug(e.to_string()))))
}

/// The error line that ends a watch whose history is gone (or unreadable).
pub(crate) fn gone_line(e: StoreError) -> Bytes {
    match e {
        StoreError::Expired { requested, horizon } => {
            Bytes::from(error_line(&too_old_version(requested, horizon)))
        }
        other => Bytes::from(error_line(&internal_error(&other.to_string()))),
    }
}

pub(crate) fn line(kind: WatchEventType, object: Value) -> Bytes {
    Bytes::from(watch_line(kind, object))
}

/// A watch following the log of its scope once its start is streamed: it
/// hands out the log's events a page at a time, and between pages waits for
/// new durable events and sends the bookmarks, until the timeout, the client
/// leaving or the server stopping. History pruned before it was read ends
/// the stream with `410 Expired`.
pub(crate) struct Follow<'a> {
    s: &'a AppState,
    out: &'a mpsc::Sender<Bytes>,
    /// Every event of the scope up to here is streamed.
    last: u64,
    pin: ReadPin,
    scope: Scope,
    /// Waits for new durable events.
    pause: Pause,
    /// The last page's `read_to`, and whether the next one waits for news.
    read_to: u64,
    wait: bool,
}

/// What a watch waits on between its reads: news of what it follows, the
/// ticks of its bookmarks, its deadline, the client leaving and the server
/// stopping. The node and pod watches ([`Follow`]) and the CSR watch wait so.
pub(crate) struct Pause {
    /// Told of every change of what the watch follows.
    news: tokio::sync::watch::Receiver<u64>,
    deadline: std::pin::Pin<Box<tokio::time::Sleep>>,
    ticks: tokio::time::Interval,
    /// `apiVersion` and `kind` of the bookmarks (`None`: the client does
    /// not allow them).
    bookmarks: Option<(&'static str, &'static str)>,
}

impl Pause {
    pub(crate) fn new(
        news: tokio::sync::watch::Receiver<u64>,
        timeout: Duration,
        bookmarks: Option<(&'static str, &'static str)>,
    ) -> Pause {
        let mut ticks = tokio::time::interval(BOOKMARK_EVERY);
        ticks.reset();
        Pause {
            news,
            deadline: Box::pin(tokio::time::sleep(timeout)),
            ticks,
            bookmarks,
        }
    }

    /// The news as of now, marked seen: a read after this misses nothing
    /// up to it.
    pub(crate) fn seen(&mut self) -> u64 {
        *self.news.borrow_and_update()
    }

    /// Waits for news, or for a bookmark's tick (the bookmark, at
    /// `version`, is sent, and the watch reads again); `None`: the watch
    /// ends (its timeout, the client gone, the server stopping).
    pub(crate) async fn wait(
        &mut self,
        s: &AppState,
        out: &mpsc::Sender<Bytes>,
        version: u64,
    ) -> Option<()> {
        tokio::select! {
            changed = self.news.changed() => changed.ok(),
            _ = &mut self.deadline => None,
            _ = s.shutdown.cancelled() => None,
            _ = out.closed() => None,
            _ = self.ticks.tick(), if self.bookmarks.is_some() => {
                let (api_version, kind) = self.bookmarks.unwrap_or_default();
                let mark = bookmark(api_version, kind, version);
                out.send(line(WatchEventType::Bookmark, mark)).await.ok()
            }
        }
    }
}

impl<'a> Follow<'a> {
    pub(crate) fn new(
        s: &'a AppState,
        out: &'a mpsc::Sender<Bytes>,
        at: (u64, ReadPin),
        scope: Scope,
        timeout: Duration,
        bookmarks: Option<(&'static str, &'static str)>,
    ) -> Self {
        Follow {
            s,
            out,
            last: at.0,
            pin: at.1,
            scope,
            pause: Pause::new(s.view.subscribe(), timeout, bookmarks),
            read_to: at.0,
            wait: false,
        }
    }

    /// The pin's floor: history down to here is kept for this watch.
    pub(crate) fn floor(&self) -> u64 {
        self.pin.floor()
    }

    /// The next page of the scope's events (`None`: the stream ends). Each
    /// page is answered with [`Follow::streamed`].
    pub(crate) async fn page(&mut self) -> Option<Vec<Event>> {
        if std::mem::take(&mut self.wait) {
            self.pause.wait(self.s, self.out, self.last).await?;
        }
        match read_after(self.s, self.last, self.pin.floor(), &self.scope).await {
            Ok(read) => {
                self.read_to = read.read_to;
                self.wait = !read.more;
                Some(read.events)
            }
            Err(e) => {
                let _ = self.out.send(gone_line(e)).await;
                None
            }
        }
    }

    /// The first `streamed` of the page's `events` are streamed; the rest
    /// are read again once there is news.
    pub(crate) fn streamed(&mut self, events: &[Event], streamed: usize) {
        if streamed == events.len() {
            self.last = self.last.max(self.read_to);
        } else {
            self.wait = true;
            if streamed > 0 {
                self.last = events[streamed - 1].seq;
            }
        }
        self.pin.advance(self.last);
    }
}

/// Streams a node watch: the registry first when it starts from now, then
/// the events of the log from the asked version.
async fn stream_events(s: AppState, params: WatchParams, at: WatchStart, out: mpsc::Sender<Bytes>) {
    let WatchStart { from, start, pin } = at;
    let render = |node: &Node| match &params.render {
        Some(render) => render(node),
        None => {
            serde_json::to_value(crate::k8s::NodeJson::shown(node, None)).unwrap_or(Value::Null)
        }
    };
    let keep = |node: &Node| params.filter.as_ref().is_none_or(|f| f(node));
    // The nodes as of the last event streamed. Without a version the watch
    // starts with the whole registry; from a version, only the nodes later
    // events touch are looked up (from the nearest checkpoint), so a watch
    // from a recent version starts at once.
    let mut replay;
    let mut followed: HashSet<String> = HashSet::new();
    let everything = from.is_none();
    if everything {
        let store = s.store.clone();
        let registry = tokio::task::spawn_blocking(move || store.registry_at(start)).await;
        let nodes = match registry {
            Ok(Ok(at)) => at.nodes,
            Ok(Err(e)) => {
                let _ = out.send(gone_line(e)).await;
                return;
            }
            Err(_) => return,
        };
        let nodes: std::collections::BTreeMap<_, _> = nodes
            .into_iter()
            .filter(|(name, _)| params.scope.holds(name))
            .collect();
        for node in nodes.values().filter(|n| keep(n)) {
            if out
                .send(line(WatchEventType::Added, render(node)))
                .await
                .is_err()
            {
                return;
            }
        }
        replay = Replay::from_nodes(nodes);
    } else {
        replay = Replay::default();
    }
    let bookmarks = params
        .bookmarks
        .then(|| params.kind.unwrap_or(("v1", "Node")));
    let timeout = params.timeout.unwrap_or(DEFAULT_TIMEOUT);
    let mut follow = Follow::new(
        &s,
        &out,
        (start, pin),
        params.scope.clone(),
        timeout,
        bookmarks,
    );
    while let Some(events) = follow.page().await {
        if !everything {
            let mut wanted: Vec<(String, u64)> = Vec::new();
            for e in &events {
                if let Some(name) = e.node.as_ref().filter(|n| params.scope.holds(n)) {
                    if followed.insert(name.clone()) {
                        wanted.push((name.clone(), e.seq - 1));
                    }
                }
            }
            if !wanted.is_empty() {
                match resolve(&s, wanted, follow.floor()).await {
                    Ok(nodes) => replay.extend(nodes.into_iter().filter_map(|(_, n)| n)),
                    Err(e) => {
                        let _ = out.send(gone_line(e)).await;
                        return;
                    }
                }
            }
        }
        for event in &events {
            let name = event.node.clone().unwrap_or_default();
            if !params.scope.holds(&name) {
                continue;
            }
            let before = replay.nodes().get(&name).cloned();
            replay.apply(event);
            let after = replay.nodes().get(&name);
            let (kind, node) = match (&event.kind, before, after) {
                (EventKind::Registered { .. }, _, Some(node)) => {
                    (WatchEventType::Added, node.clone())
                }
                (EventKind::Deleted { .. }, Some(mut node), None) => {
                    node.resource_version = event.seq;
                    (WatchEventType::Deleted, node)
                }
                (
                    EventKind::ConditionChanged { .. }
                    | EventKind::AddressesChanged { .. }
                    | EventKind::TaintsChanged { .. }
                    | EventKind::OperatorChanged { .. },
                    Some(_),
                    Some(node),
                ) => (WatchEventType::Modified, node.clone()),
                _ => continue,
            };
            if keep(&node) && out.send(line(kind, render(&node))).await.is_err() {
                return;
            }
        }
        follow.streamed(&events, events.len());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Micros;
    use crate::server::node_json::tests::state;
    use crate::store::records::tests::sample_node;
    use crate::store::Batch;

    /// Registers `name`, then marks it unschedulable: two events.
    fn two_events(s: &AppState, name: &str) {
        let mut node = sample_node();
        node.name = name.into();
        let mut batch = Batch::new(Micros(100));
        batch.record(
            node.clone(),
            [EventKind::Registered {
                node: Box::new(node.clone()),
            }],
        );
        s.store.write(batch).unwrap();
        node.unschedulable = true;
        let mut batch = Batch::new(Micros(200));
        batch.record(
            node,
            [EventKind::OperatorChanged {
                by: "test".into(),
                changes: Vec::new(),
            }],
        );
        s.store.write(batch).unwrap();
    }

    /// A watch reads the events its scope can show and no others, and
    /// still learns how far the log went (for its bookmarks and its pin).
    #[tokio::test]
    async fn a_scoped_read_takes_only_its_nodes_events_and_reads_to_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let s = state(&dir);
        for name in ["a", "b", "c"] {
            two_events(&s, name);
        }
        let durable = s.store.flush_blocking().unwrap();
        assert_eq!(durable, 6);
        let seqs = |read: &Read| read.events.iter().map(|e| e.seq).collect::<Vec<_>>();

        let all = read_after(&s, 0, 0, &Scope::All).await.unwrap();
        assert_eq!(
            (seqs(&all), all.read_to, all.more),
            (vec![1, 2, 3, 4, 5, 6], 6, false)
        );
        let b = read_after(&s, 0, 0, &Scope::One("b".into())).await.unwrap();
        assert_eq!((seqs(&b), b.read_to, b.more), (vec![3, 4], 6, false));
        let from_4 = read_after(&s, 4, 0, &Scope::One("b".into())).await.unwrap();
        assert_eq!((seqs(&from_4), from_4.read_to), (vec![], 6));
        let stranger = read_after(&s, 0, 0, &Scope::One("x".into())).await.unwrap();
        assert_eq!((seqs(&stranger), stranger.read_to), (vec![], 6));
        let nothing = read_after(&s, 2, 0, &Scope::Nothing).await.unwrap();
        assert_eq!(
            (seqs(&nothing), nothing.read_to, nothing.more),
            (vec![], 6, false)
        );
    }
}
