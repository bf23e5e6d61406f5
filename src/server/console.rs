//! The web console: pages and their assets (compiled into the binary, so an
//! offline site needs nothing else), the site's Ready counts over its whole
//! history for the timeline strip, and the read-only router `nodekeeper ui`
//! serves over a stopped store.
//!
//! The pages are plain ES modules under `console/` at the top of the
//! repository; everything they show comes from the API itself
//! (`/api/v1/nodes` and its watch, `/v1/history`, `/v1/at`, `/v1/mirror`,
//! `/v1/sources`) plus [`readiness`], computed here from the history.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use axum::{Extension, Json, Router};
use serde::{Deserialize, Serialize};

use super::v1::blocking;
use super::{bad_request, internal, refusal, Answer, AppState, Tokens};
use crate::model::{ConditionStatus, Event, EventKind, Micros, READY};
use crate::store::{Store, StoreError};

/// One file of the console, compiled in.
struct Asset {
    name: &'static str,
    content_type: &'static str,
    body: &'static [u8],
}

macro_rules! asset {
    ($name:literal, $type:literal) => {
        Asset {
            name: $name,
            content_type: $type,
            body: include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/console/", $name)),
        }
    };
}

/// Every file under `console/`; a test checks that none is missing.
static ASSETS: &[Asset] = &[
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("style.css", "text/css; charset=utf-8"),
    asset!("icon.svg", "image/svg+xml"),
    asset!("app.js", "text/javascript; charset=utf-8"),
    asset!("api.js", "text/javascript; charset=utf-8"),
    asset!("dom.js", "text/javascript; charset=utf-8"),
    asset!("overview.js", "text/javascript; charset=utf-8"),
    asset!("problems.js", "text/javascript; charset=utf-8"),
    asset!("changes.js", "text/javascript; charset=utf-8"),
    asset!("link.js", "text/javascript; charset=utf-8"),
    asset!("selector.js", "text/javascript; charset=utf-8"),
    asset!("strip.js", "text/javascript; charset=utf-8"),
    asset!("health.js", "text/javascript; charset=utf-8"),
    asset!("node.js", "text/javascript; charset=utf-8"),
    asset!("timeline.js", "text/javascript; charset=utf-8"),
];

/// The page shell every console URL answers with; the modules route on the path.
const INDEX: &str = "index.html";

/// Pages may load only what this server serves, and nothing may frame them.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The console's pages and assets. They hold no data (the data comes from
/// the API, behind its auth), so they are served without a token: a page
/// that cannot load cannot ask for one.
pub(crate) fn pages<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui", get(|| async { Redirect::temporary("/ui/") }))
        .route("/ui/", get(page))
        .route("/ui/nodes/{name}", get(page))
        .route("/ui/at/{time}", get(page))
        .route("/ui/assets/{file}", get(asset_file))
}

async fn page(headers: HeaderMap) -> Response {
    serve_asset(INDEX, &headers)
}

async fn asset_file(Path(file): Path<String>, headers: HeaderMap) -> Response {
    serve_asset(&file, &headers)
}

/// An asset's entity tag: a hash of its bytes, so it changes exactly when they do.
fn etag(index: usize) -> &'static str {
    static TAGS: OnceLock<Vec<String>> = OnceLock::new();
    &TAGS.get_or_init(|| {
        ASSETS
            .iter()
            // FNV-1a: stable across builds and platforms, unlike std's hasher.
            .map(|a| format!("\"{:016x}\"", crate::liveness::fnv1a(a.body)))
            .collect()
    })[index]
}

fn serve_asset(name: &str, headers: &HeaderMap) -> Response {
    let Some((index, asset)) = ASSETS.iter().enumerate().find(|(_, a)| a.name == name) else {
        return refusal(
            StatusCode::NOT_FOUND,
            format!("the console has no file {name:?}"),
        );
    };
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag(index)));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        (
            [(
                header::CONTENT_TYPE,
                HeaderValue::from_static(asset.content_type),
            )],
            asset.body,
        )
            .into_response()
    };
    // Compiled in: a new binary may bring new files, so always revalidate.
    // (The pages are served outside the guard, which adds `nosniff` to the API's answers.)
    let mut headers = vec![
        (header::ETAG, etag(index)),
        (header::CACHE_CONTROL, "no-cache"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::REFERRER_POLICY, "no-referrer"),
    ];
    if asset.name == INDEX {
        headers.push((header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY));
        headers.push((header::X_FRAME_OPTIONS, "DENY"));
    }
    for (name, value) in headers {
        response
            .headers_mut()
            .insert(name, HeaderValue::from_static(value));
    }
    response
}

/// What serves the console: a running controller, or `nodekeeper ui` over a
/// stopped store (set as a request extension by [`read_only_router`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum ConsoleMode {
    Controller,
    StoppedStore,
}

/// `GET /v1/console`: what the page is looking at.
#[derive(Debug, Serialize)]
struct About {
    mode: ConsoleMode,
    #[serde(rename = "readOnly")]
    read_only: bool,
    version: &'static str,
    #[serde(rename = "gitCommit")]
    git_commit: &'static str,
    /// `--site`, when given: the console's title names it.
    #[serde(skip_serializing_if = "Option::is_none")]
    site: Option<String>,
}

pub(crate) async fn about(
    State(s): State<AppState>,
    mode: Option<Extension<ConsoleMode>>,
) -> Response {
    let mode = mode.map_or(ConsoleMode::Controller, |Extension(m)| m);
    Json(About {
        site: s.metrics.site().map(str::to_string),
        mode,
        read_only: mode == ConsoleMode::StoppedStore,
        version: env!("CARGO_PKG_VERSION"),
        git_commit: crate::version::git_commit(),
    })
    .into_response()
}

/// The API and the console over a stopped store, for `nodekeeper ui`: reads
/// only (anything else is refused with 405), and `/v1/mirror` says what
/// the store kept of the mirror, since no mirror runs.
pub fn read_only_router(state: AppState, tokens: Option<Arc<Tokens>>) -> Router {
    let api = super::secured_router(state.clone(), tokens.clone());
    let overrides = Router::new()
        .route("/v1/mirror", get(stored_mirror))
        .with_state(state);
    super::harden(overrides, tokens)
        .fallback_service(api)
        .layer(middleware::from_fn(refuse_writes))
        .layer(Extension(ConsoleMode::StoppedStore))
}

async fn stored_mirror(State(s): State<AppState>) -> Answer {
    let store = s.store.clone();
    let status = blocking(move || crate::mirror::status_from_store(&store))
        .await?
        .map_err(internal)?;
    Ok(Json(status).into_response())
}

async fn refuse_writes(request: Request, next: Next) -> Response {
    if [Method::GET, Method::HEAD, Method::OPTIONS].contains(request.method()) {
        return next.run(request).await;
    }
    refusal(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{} {}: `nodekeeper ui` serves a stopped store read-only; start the controller (`nodekeeper run`) on it to change anything",
            request.method(),
            request.uri().path()
        ),
    )
}

/// Buckets the strip may ask for: enough for any screen, bounded work.
pub const MAX_BUCKETS: usize = 4000;
const DEFAULT_BUCKETS: usize = 600;

/// Query of `GET /v1/readiness`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct ReadinessParams {
    buckets: Option<usize>,
    since: Option<String>,
    until: Option<String>,
}

/// How many nodes were Ready, NotReady and Unknown at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub ready: usize,
    #[serde(rename = "notReady")]
    pub not_ready: usize,
    pub unknown: usize,
}

impl Counts {
    fn add(&mut self, status: ConditionStatus, by: isize) {
        let slot = match status {
            ConditionStatus::True => &mut self.ready,
            ConditionStatus::False => &mut self.not_ready,
            ConditionStatus::Unknown => &mut self.unknown,
        };
        *slot = slot.saturating_add_signed(by);
    }
}

/// One slice of the strip: the counts at its end, and the fewest Ready
/// nodes at any moment inside it (so a short outage still shows).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bucket {
    #[serde(flatten)]
    pub end: Counts,
    #[serde(rename = "minReady")]
    pub min_ready: usize,
}

/// A time no controller was running (its downtime, as the next one recorded
/// it); `to` is `None` when none has started since.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Gap {
    pub from: Micros,
    pub to: Option<Micros>,
}

/// `GET /v1/readiness`: the site's Ready counts from `from` to `to`, in
/// equal buckets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Readiness {
    pub from: Option<Micros>,
    pub to: Micros,
    /// The newest event counted.
    #[serde(rename = "lastSeq")]
    pub last_seq: u64,
    pub buckets: Vec<Bucket>,
    pub gaps: Vec<Gap>,
}

pub(crate) async fn readiness(
    State(s): State<AppState>,
    params: Result<Query<ReadinessParams>, QueryRejection>,
) -> Answer {
    let Query(params) = params.map_err(|e| bad_request(e.body_text()))?;
    let buckets = params.buckets.unwrap_or(DEFAULT_BUCKETS);
    if !(1..=MAX_BUCKETS).contains(&buckets) {
        return Err(bad_request(format!(
            "buckets={buckets}: give between 1 and {MAX_BUCKETS} (about one per pixel of the strip)"
        )));
    }
    let now = Micros::now();
    let instant = |name: &str, value: &Option<String>| {
        super::v1::instant(name, value, now).map_err(bad_request)
    };
    let (since, until) = (
        instant("since", &params.since)?,
        instant("until", &params.until)?,
    );
    if let (Some(since), Some(until)) = (since, until) {
        if since >= until {
            return Err(bad_request(format!(
                "since ({since}) must be before until ({until})"
            )));
        }
    }
    let store = s.store.clone();
    let to = until.unwrap_or(now);
    let readiness = blocking(move || site_readiness(&store, since, to, buckets))
        .await?
        .map_err(internal)?;
    Ok(Json(readiness).into_response())
}

/// Reads the history once and counts it into buckets.
fn site_readiness(
    store: &Store,
    since: Option<Micros>,
    to: Micros,
    buckets: usize,
) -> Result<Readiness, StoreError> {
    let from = match since {
        Some(t) => Some(t),
        None => history::first_event(store)?.map(|e| e.time),
    };
    let mut series = ReadinessSeries::new(from.unwrap_or(to), to, buckets);
    history::each_event_until(store, to, |event| series.apply(event))?;
    Ok(series.finish(from))
}

/// Builds a [`Readiness`] from events in seq order.
pub struct ReadinessSeries {
    from: Micros,
    to: Micros,
    width: f64,
    ready: HashMap<String, ConditionStatus>,
    counts: Counts,
    current: usize,
    min_ready: usize,
    buckets: Vec<Bucket>,
    wanted: usize,
    last_seq: u64,
    gaps: Vec<Gap>,
}

impl ReadinessSeries {
    pub fn new(from: Micros, to: Micros, buckets: usize) -> ReadinessSeries {
        let wanted = buckets.max(1);
        ReadinessSeries {
            from,
            to,
            width: ((to.0 - from.0).max(1) as f64) / wanted as f64,
            ready: HashMap::new(),
            counts: Counts::default(),
            current: 0,
            min_ready: 0,
            buckets: Vec::with_capacity(wanted),
            wanted,
            last_seq: 0,
            gaps: Vec::new(),
        }
    }

    /// Counts one event; events must come in seq order and at most at `to`.
    pub fn apply(&mut self, event: &Event) {
        self.last_seq = event.seq;
        let before_range = event.time < self.from;
        if !before_range {
            // Wall clocks can step back: never reopen a closed bucket.
            let index = (((event.time.0 - self.from.0) as f64 / self.width) as usize)
                .clamp(self.current, self.wanted - 1);
            while self.current < index {
                self.close_bucket();
            }
        }
        let name = event.node.as_deref().unwrap_or_default();
        match &event.kind {
            EventKind::Registered { node } => self.set(name, Some(node.ready())),
            EventKind::Deleted { .. } => self.set(name, None),
            // A change for a node not registered (any more) counts for nothing.
            EventKind::ConditionChanged { condition, to, .. }
                if condition == READY && self.ready.contains_key(name) =>
            {
                self.set(name, Some(*to));
            }
            EventKind::ControllerStarted {
                downtime_seconds, ..
            } => {
                let open = self.gaps.last().is_some_and(|g| g.to.is_none());
                if open {
                    if let Some(gap) = self.gaps.last_mut() {
                        gap.to = Some(event.time);
                    }
                } else if let Some(down) = downtime_seconds.filter(|d| *d > 0.0) {
                    self.gaps.push(Gap {
                        from: Micros(event.time.0 - (down * 1e6) as i64),
                        to: Some(event.time),
                    });
                }
            }
            EventKind::ControllerStopped { .. } => self.gaps.push(Gap {
                from: event.time,
                to: None,
            }),
            _ => {}
        }
        if before_range {
            self.min_ready = self.counts.ready;
        } else {
            self.min_ready = self.min_ready.min(self.counts.ready);
        }
    }

    fn set(&mut self, name: &str, status: Option<ConditionStatus>) {
        let old = match status {
            Some(s) => self.ready.insert(name.to_string(), s),
            None => self.ready.remove(name),
        };
        if let Some(old) = old {
            self.counts.add(old, -1);
        }
        if let Some(new) = status {
            self.counts.add(new, 1);
        }
    }

    fn close_bucket(&mut self) {
        self.buckets.push(Bucket {
            end: self.counts,
            min_ready: self.min_ready,
        });
        self.current += 1;
        self.min_ready = self.counts.ready;
    }

    /// The buckets up to `to`; `from` is `None` when there was no history.
    pub fn finish(mut self, from: Option<Micros>) -> Readiness {
        if from.is_some() {
            while self.buckets.len() < self.wanted {
                self.close_bucket();
            }
        }
        // A gap the events closed at `to`'s side stays open: nothing ran since.
        Readiness {
            from,
            to: self.to,
            last_seq: self.last_seq,
            buckets: self.buckets,
            gaps: self.gaps,
        }
    }
}

/// The console's reads of the history, in one place, through the store's
/// public history query.
mod history {
    use crate::model::{Event, Micros};
    use crate::store::{HistoryQuery, Store, StoreError};

    /// Events read per round, so memory stays bounded on a long history.
    const PAGE: usize = 10_000;

    pub(super) fn first_event(store: &Store) -> Result<Option<Event>, StoreError> {
        let query = HistoryQuery {
            limit: Some(1),
            ..HistoryQuery::default()
        };
        Ok(store.history(&query)?.into_iter().next())
    }

    /// Calls `f` with every durable event up to `until`, in seq order.
    pub(super) fn each_event_until(
        store: &Store,
        until: Micros,
        mut f: impl FnMut(&Event),
    ) -> Result<(), StoreError> {
        let durable = store.durable_seq();
        let mut after = 0;
        // Each round moves `after` forward or stops: bounded by the log's length.
        loop {
            let query = HistoryQuery {
                after_seq: Some(after),
                limit: Some(PAGE),
                ..HistoryQuery::default()
            };
            let events = store.history(&query)?;
            let Some(last) = events.last() else {
                return Ok(());
            };
            after = last.seq;
            for event in events.iter().filter(|e| e.time <= until) {
                f(event);
            }
            if events.len() < PAGE || after >= durable {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests;
