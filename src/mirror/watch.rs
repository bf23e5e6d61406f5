//! Following the API server's Nodes, as kube-runtime's `watcher` and
//! `reflector` do: list them (page by page), then watch from the list's
//! resourceVersion, with bookmarks. A watch the API server ends cleanly is
//! resumed from the last version seen; a watch cut short (the API server went
//! away, and may come back empty), a watch that breaks, or that the API
//! server answers with 410 Gone (or any error), is replaced by a new list.
//! The list is also repeated every [`RESYNC_PERIOD`] as a backstop.
//!
//! Every node seen goes into the mirror's [`Upstream`](super::upstream::Upstream)
//! copy; a registry node seen missing (deleted out of band, an API server
//! restored empty) or differing from the registry is reported to the
//! mirror's loop, which queues it. Lists and the watch take their tokens
//! from the budget at the lowest priority.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::Node as KubeNode;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use serde_json::Value;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::budget::Priority;
use super::jobs::{Ctx, PAGE};
use super::upstream::Seen;
use super::{mirror_patch, ApiError};
use crate::backoff::{Backoff, Retries};

/// How often the nodes are listed again even while the watch works.
pub(crate) const RESYNC_PERIOD: Duration = Duration::from_secs(30 * 60);
/// How long the API server is asked to keep a watch open (kube-runtime's
/// choice); it ends it cleanly then, and the watch resumes.
const WATCH_TIMEOUT_SECONDS: u32 = 290;
/// A watch that ends before this, although it was asked to last
/// [`WATCH_TIMEOUT_SECONDS`], was cut, not ended: the API server went away
/// (kube's stream takes a cut connection for a clean end), and one that
/// restarted may have lost its data and started its versions over, so the
/// version last seen means nothing to it. The nodes are listed again.
const WATCH_CUT_BEFORE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECONDS as u64 - 30);
/// A watch silent this long (no event, no bookmark, no clean end although
/// the API server was asked to end it sooner) is taken as broken.
const WATCH_IDLE: Duration = Duration::from_secs(WATCH_TIMEOUT_SECONDS as u64 + 30);
/// Failed lists are retried with this backoff: capped low, so an API
/// server that answers again is seen within seconds, at the cost of one
/// list request every couple of seconds while it is away.
const LIST_RETRY: Backoff =
    Backoff::exponential(Duration::from_millis(200), Duration::from_secs(2)).with_jitter();
/// A watch that fails as soon as it starts (the API server refuses to
/// watch) falls back to lists this far apart at most.
const WATCH_REFUSED_RETRY: Backoff =
    Backoff::exponential(Duration::from_secs(1), Duration::from_secs(30)).with_jitter();
/// A watch that lasted this long ended for a reason of its own, not because
/// watching does not work.
const WATCH_HEALTHY: Duration = Duration::from_secs(5);
/// Pages of a list, at most (PAGE nodes each).
const MAX_PAGES: usize = 100_000;

/// What the watcher tells the mirror's loop.
#[derive(Debug)]
pub(crate) enum Report {
    /// A complete list: these registry nodes are missing upstream (`true`)
    /// or differ from the registry (`false`).
    Listed(Vec<(String, bool)>),
    /// A watch event: this node is missing upstream (`true`) or differs.
    Changed(String, bool),
    /// A list failed; `unreachable` when the API server did not answer or
    /// answered 5xx.
    Failed { message: String, unreachable: bool },
}

/// How one watch ended.
enum WatchEnd {
    /// Ended cleanly (or a resync is due): resume from this version.
    Resume(String),
    /// Broken or refused: list again.
    Relist(String),
    /// The API server started its versions over: list again at once.
    Restarted,
    Stopped,
}

/// Lists and watches until `stop`, reporting to `reports`.
pub(crate) async fn watch_nodes(
    ctx: Arc<Ctx>,
    reports: mpsc::Sender<Report>,
    stop: CancellationToken,
) {
    let mut resume: Option<String> = None;
    let mut list_retries = LIST_RETRY.retries();
    let mut watch_retries = WATCH_REFUSED_RETRY.retries();
    let mut relist_at = Instant::now();
    let mut restarts = ctx.versions.restarts();
    // Ends on stop; each round is one list or one watch, each bounded by
    // the request timeout or the watch's idle limit.
    loop {
        let from = match resume.take() {
            Some(rv) if Instant::now() < relist_at => rv,
            _ => {
                // A restart noticed from here on makes this list stale too.
                restarts.borrow_and_update();
                match list_once(&ctx, &reports, &stop, &mut list_retries).await {
                    Listing::Listed { version } => {
                        relist_at = Instant::now() + RESYNC_PERIOD;
                        version
                    }
                    Listing::Again => continue,
                    Listing::Stopped => return,
                }
            }
        };
        let started = Instant::now();
        ctx.state.set_watching(true);
        let end = watch_from(&ctx, from, &reports, &stop, relist_at, &mut restarts).await;
        ctx.state.set_watching(false);
        match end {
            WatchEnd::Stopped => return,
            WatchEnd::Restarted => {
                watch_retries.reset();
                tracing::info!(
                    "the API server started its resourceVersions over; listing its nodes again"
                );
            }
            WatchEnd::Resume(rv) => {
                watch_retries.reset();
                resume = Some(rv);
            }
            WatchEnd::Relist(why) => {
                if started.elapsed() >= WATCH_HEALTHY {
                    watch_retries.reset();
                    tracing::info!(
                        "the watch of the API server's nodes ended ({why}); listing them again"
                    );
                } else {
                    // Refused at once: do not list in a tight loop.
                    let wait = watch_retries.next_delay();
                    if watch_retries.failures() == 3 {
                        tracing::warn!("the API server's nodes cannot be watched ({why}); listing them every {} instead (does the account have the watch verb on nodes?)", crate::duration::format(WATCH_REFUSED_RETRY.max()));
                    } else {
                        tracing::debug!(
                            "the watch failed at once ({why}); listing again in {wait:?}"
                        );
                    }
                    tokio::select! {
                        _ = stop.cancelled() => return,
                        _ = tokio::time::sleep(wait) => {}
                    }
                }
            }
        }
    }
}

/// What one try to list the nodes came to.
enum Listing {
    /// Listed and reported: watch from this version.
    Listed { version: String },
    /// Failed or throttled, and waited: try again.
    Again,
    /// Stopped, or nobody listens to the reports any more.
    Stopped,
}

/// Lists the nodes and reports what differs; on failure reports it and
/// waits before the next try (the list's retries, for the backoff).
async fn list_once(
    ctx: &Ctx,
    reports: &mpsc::Sender<Report>,
    stop: &CancellationToken,
    retries: &mut Retries,
) -> Listing {
    let listed = tokio::select! {
        _ = stop.cancelled() => return Listing::Stopped,
        listed = relist(ctx) => listed,
    };
    let wait = match listed {
        Ok((version, stale)) => {
            retries.reset();
            ctx.state.note_listed();
            if reports.send(Report::Listed(stale)).await.is_err() {
                return Listing::Stopped;
            }
            return Listing::Listed { version };
        }
        // Throttled: the budget waits the Retry-After out; not a failure.
        Err(e) if e.is(429) => e.retry_after.unwrap_or(Duration::from_secs(1)),
        Err(e) => {
            let unreachable = e.code.is_none_or(|c| c >= 500);
            let report = Report::Failed {
                message: format!("listing the API server's nodes: {e}"),
                unreachable,
            };
            if reports.send(report).await.is_err() {
                return Listing::Stopped;
            }
            retries.next_delay()
        }
    };
    tokio::select! {
        _ = stop.cancelled() => Listing::Stopped,
        _ = tokio::time::sleep(wait) => Listing::Again,
    }
}

/// Lists every node, page by page, into the upstream copy; returns the
/// list's resourceVersion and the registry nodes missing or differing.
async fn relist(ctx: &Ctx) -> Result<(String, Vec<(String, bool)>), ApiError> {
    let nodes: Api<KubeNode> = Api::all(ctx.client.clone());
    let began = ctx.upstream().generation();
    let mut params = ListParams::default().limit(PAGE);
    let mut names = HashSet::new();
    let mut stale = Vec::new();
    let mut version = None;
    // Compared page by page: a 10k-node site is never held in memory whole.
    for _ in 0..MAX_PAGES {
        let page = ctx
            .call(Priority::List, "list", || nodes.list(&params))
            .await?;
        // Watch from the first page's version: on a real API server the
        // pages are one snapshot at it; where they are not, the watch
        // replays what changed since, which is harmless.
        if version.is_none() {
            version = page.metadata.resource_version.clone();
        }
        for node in page.items {
            let Some(name) = node.metadata.name.clone() else {
                continue;
            };
            let current = serde_json::to_value(&node).expect("k8s types serialize");
            ctx.upstream().listed(began, &name, current.clone());
            if compare(ctx, &name, &current) == Some(true) {
                stale.push((name.clone(), false));
            }
            names.insert(name);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let registry: Vec<String> = ctx.view.list().into_iter().map(|(n, _)| n.name).collect();
    let missing = ctx.upstream().list_done(began, &names, &registry);
    for name in missing {
        ctx.lease_unknown(&name);
        stale.push((name, true));
    }
    ctx.publish_drift();
    Ok((version.unwrap_or_default(), stale))
}

/// Whether a node as seen upstream needs a write: `Some(true)` when the
/// registry's differs, or when nodekeeper created it and the registry no
/// longer has it (it is deleted); `None` for someone else's node. Records
/// the difference for `mirror status`.
fn compare(ctx: &Ctx, name: &str, current: &Value) -> Option<bool> {
    match ctx.desired(name) {
        Some(desired) => {
            let differs = mirror_patch::differs(current, &desired);
            ctx.upstream().set_differs(name, differs);
            Some(differs)
        }
        None => {
            let ours = !current["metadata"]["annotations"][crate::k8s::SOURCE_ANNOTATION].is_null();
            ours.then_some(true)
        }
    }
}

/// Watches from `from` until the watch ends, `stop`, or `relist_at`. Over 80
/// lines: one loop whose `select!` arms and event kinds share the watch's
/// version, and each way out is a `WatchEnd` saying why.
async fn watch_from(
    ctx: &Ctx,
    from: String,
    reports: &mpsc::Sender<Report>,
    stop: &CancellationToken,
    relist_at: Instant,
    restarts: &mut watch::Receiver<u64>,
) -> WatchEnd {
    let api: Api<KubeNode> = Api::all(ctx.watch_client.clone());
    // Bookmarks are asked for by default.
    let params = WatchParams::default().timeout(WATCH_TIMEOUT_SECONDS);
    // The watch takes its token last of all and may wait long for it: a
    // restart noticed meanwhile (by the answers to other writes) means
    // `from` is a version of a server that is gone.
    let asked = Instant::now();
    let stream = tokio::select! {
        _ = stop.cancelled() => return WatchEnd::Stopped,
        _ = restarts.changed() => return WatchEnd::Restarted,
        started = ctx.call(Priority::List, "watch", || api.watch(&params, &from)) => started,
    };
    tracing::debug!(
        from = %from,
        waited_ms = asked.elapsed().as_millis() as u64,
        "watching the API server's nodes"
    );
    let stream = match stream {
        Ok(stream) => stream,
        Err(e) => return WatchEnd::Relist(e.to_string()),
    };
    let mut stream = std::pin::pin!(stream);
    let mut version = from;
    let started = Instant::now();
    // Ends with the stream; each event is awaited at most WATCH_IDLE.
    loop {
        let event = tokio::select! {
            _ = stop.cancelled() => return WatchEnd::Stopped,
            _ = restarts.changed() => return WatchEnd::Restarted,
            _ = tokio::time::sleep_until(relist_at) => return WatchEnd::Resume(version),
            event = tokio::time::timeout(WATCH_IDLE, stream.next()) => event,
        };
        let event = match event {
            Err(_) => {
                return WatchEnd::Relist(format!(
                    "nothing for {}",
                    crate::duration::format(WATCH_IDLE)
                ))
            }
            Ok(None) if started.elapsed() < WATCH_CUT_BEFORE => {
                return WatchEnd::Relist(format!(
                    "it ended after {} of the {WATCH_TIMEOUT_SECONDS}s asked for: the API server may have restarted",
                    crate::duration::format(started.elapsed())
                ))
            }
            Ok(None) => return WatchEnd::Resume(version),
            Ok(Some(Err(e))) => return WatchEnd::Relist(ApiError::from(e).to_string()),
            Ok(Some(Ok(event))) => event,
        };
        let (node, deleted) = match event {
            WatchEvent::Added(node) | WatchEvent::Modified(node) => (node, false),
            WatchEvent::Deleted(node) => (node, true),
            WatchEvent::Bookmark(mark) => {
                version = mark.metadata.resource_version;
                continue;
            }
            WatchEvent::Error(status) => {
                // 410 Gone: the version is too old to watch from.
                return WatchEnd::Relist(format!("{} ({})", status.message, status.code));
            }
        };
        let (Some(name), Some(rv)) = (
            node.metadata.name.clone(),
            node.metadata.resource_version.clone(),
        ) else {
            continue;
        };
        version = rv.clone();
        if let Some(report) = seen(ctx, &name, &rv, node, deleted) {
            if reports.send(report).await.is_err() {
                return WatchEnd::Stopped;
            }
        }
    }
}

/// One watch event into the upstream copy; what to report, if anything.
fn seen(ctx: &Ctx, name: &str, rv: &str, node: KubeNode, deleted: bool) -> Option<Report> {
    let ours = ctx.view.get(name).is_some();
    let current = serde_json::to_value(&node).expect("k8s types serialize");
    let copy = (!deleted).then(|| current.clone());
    if ctx.upstream().watched(name, rv, copy, ours) == Seen::Echo {
        return None;
    }
    let report = if deleted {
        ours.then(|| {
            ctx.lease_unknown(name);
            Report::Changed(name.to_string(), true)
        })
    } else {
        compare(ctx, name, &current)
            .filter(|differs| *differs)
            .map(|_| Report::Changed(name.to_string(), false))
    };
    ctx.publish_drift();
    report
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::jobs::{testing, LeaseKnown};
    use crate::mirror::NODE_LEASE_NAMESPACE;
    use nodekeeper_sim::apiserver::FakeApiServer;
    use serde_json::json;

    /// One token every this long: each request waits for the one before.
    const TOKEN_EVERY: Duration = Duration::from_secs(100);

    fn lease_json(name: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": NODE_LEASE_NAMESPACE},
               "spec": {"holderIdentity": name}})
    }

    fn node_json(name: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    }

    async fn next_report(reports: &mut mpsc::Receiver<Report>, within: Duration) -> Option<Report> {
        tokio::time::timeout(within, reports.recv())
            .await
            .ok()
            .flatten()
    }

    /// The failure seen under load: the watch waits for its token (the
    /// lowest priority) while the API server restarts empty and takes new
    /// writes; the watch then goes out from the first list's version, which
    /// the new server accepts, and never shows what it lacks.
    #[tokio::test(start_paused = true)]
    async fn a_restart_while_the_watch_waits_for_its_token_is_listed_again() {
        let server = FakeApiServer::start().await;
        for name in ["n1", "n2", "n3"] {
            server.put_node(node_json(name));
        }
        let dir = tempfile::tempdir().unwrap();
        let ctx =
            Arc::new(testing::ctx(&server, dir.path(), 1.0 / TOKEN_EVERY.as_secs_f64(), 1).await);
        let (reports_tx, mut reports) = mpsc::channel(16);
        let stop = CancellationToken::new();
        let watcher = tokio::spawn(watch_nodes(ctx.clone(), reports_tx, stop.clone()));
        let listed = next_report(&mut reports, TOKEN_EVERY).await;
        assert!(matches!(listed, Some(Report::Listed(_))), "{listed:?}");
        let listed_at = server.resource_version();

        // The Leases are renewed ahead of the watch: versions climb past the list's.
        for i in 0..10 {
            server.put_lease(lease_json(&format!("other-{i}")));
        }
        ctx.leases
            .lock()
            .unwrap()
            .insert("n1".into(), LeaseKnown::Absent);
        ctx.renew_lease("n1").await.expect("created");
        assert!(server.watches() == 0, "the watch still waits for its token");

        // Restored empty; other clients write past the list's version again.
        server.restart_empty().await;
        while server.resource_version() < listed_at {
            server.put_lease(lease_json("someone-else"));
        }
        ctx.renew_lease("n1").await.expect("created again");
        let relisted = next_report(&mut reports, 10 * TOKEN_EVERY).await;
        assert!(
            matches!(relisted, Some(Report::Listed(_))),
            "the nodes are listed again, not watched from a version of the old server: {relisted:?}"
        );
        let lists = server
            .requests()
            .iter()
            .filter(|r| {
                r.method == "GET" && r.path == "/api/v1/nodes" && !r.query.contains("watch")
            })
            .count();
        assert_eq!(lists, 2);
        stop.cancel();
        watcher.await.unwrap();
    }
}
