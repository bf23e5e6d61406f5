//! Request budgets, kept the way kube-apiserver's max-in-flight filter keeps
//! them: watches, other reads and writes each have their own, so a flood of
//! one kind cannot starve the others, and health checks count against none.
//! Within a budget, one client (a token's user; a connection for callers
//! without a token) may hold a quarter at most, so that no client can take
//! it all, as kube-apiserver's priority and fairness keeps clients apart. A
//! request beyond its budget is answered at once with a 429 `Status` and
//! `Retry-After`. Request bodies must arrive within a deadline (408).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, Method, StatusCode, Version};
use axum::response::{IntoResponse, Response};
use http_body_util::combinators::Collect;
use http_body_util::{BodyExt, Limited};
use tokio::sync::Semaphore;

use super::BODY_LIMIT;
use crate::metrics::{Metrics, RejectReason, RejectedLabels, RequestKind};

/// How many requests of each kind may be served at once, and how long a
/// request body may take to arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiLimits {
    /// Watches (`?watch=true`) streaming at once: `--max-watches`, a hard
    /// cap; or, with [`Self::watches_per_node`], the most the budget grows to.
    pub max_watches: usize,
    /// Without `--max-watches`, the watch budget is
    /// [`Self::DEFAULT_MAX_WATCHES`] plus this many a registered node (up
    /// to `max_watches`), counted when a watch is admitted; 0: the budget
    /// is `max_watches`.
    pub watches_per_node: usize,
    /// Other reads in flight (`--max-requests-inflight`).
    pub max_reads: usize,
    /// Writes in flight, heartbeats among them (`--max-mutating-requests-inflight`).
    pub max_mutating: usize,
    /// How long a request body may take to arrive, from the end of the
    /// headers (`--request-body-timeout`).
    pub body_timeout: Duration,
}

impl ApiLimits {
    /// The watch budget of a site with no nodes, and the base it grows from.
    pub const DEFAULT_MAX_WATCHES: usize = 100;
    /// The watches a kubelet holds: its node, services, pods, CSIDrivers
    /// and RuntimeClasses (docs/kubelet-api.md, section 2.4).
    pub const WATCHES_PER_NODE: usize = 5;
    /// kube-apiserver's `--max-requests-inflight` default.
    pub const DEFAULT_MAX_READS: usize = 400;
    /// kube-apiserver's `--max-mutating-requests-inflight` default; `run`
    /// sizes it from the connection cap instead.
    pub const DEFAULT_MAX_MUTATING: usize = 200;
    pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);
}

impl Default for ApiLimits {
    fn default() -> Self {
        ApiLimits {
            max_watches: Self::DEFAULT_MAX_WATCHES,
            watches_per_node: 0,
            max_reads: Self::DEFAULT_MAX_READS,
            max_mutating: Self::DEFAULT_MAX_MUTATING,
            body_timeout: Self::DEFAULT_BODY_TIMEOUT,
        }
    }
}

/// The part of a budget one client may hold: a quarter.
const CLIENT_SHARE: usize = 4;

/// Who a request is from, for the budgets: a token's user, or the
/// connection of a caller without a token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    User(u64),
    Connection(u64),
}

/// Requests in flight by kind and client.
type InFlightByClient = Arc<Mutex<HashMap<(RequestKind, Client), usize>>>;

/// The budgets of one server, shared by all its connections.
pub struct Budgets {
    limits: ApiLimits,
    watches: Arc<Semaphore>,
    reads: Arc<Semaphore>,
    mutating: Arc<Semaphore>,
    clients: InFlightByClient,
    metrics: Option<Arc<Metrics>>,
}

impl Budgets {
    pub fn new(limits: ApiLimits, metrics: Option<Arc<Metrics>>) -> Arc<Budgets> {
        Arc::new(Budgets {
            limits,
            watches: Arc::new(Semaphore::new(limits.max_watches)),
            reads: Arc::new(Semaphore::new(limits.max_reads)),
            mutating: Arc::new(Semaphore::new(limits.max_mutating)),
            clients: Arc::default(),
            metrics,
        })
    }

    /// The watch budget now: the hard cap, or the base and an allowance
    /// for each node registered now, within the cap.
    pub fn watch_budget(&self) -> usize {
        let limits = &self.limits;
        if limits.watches_per_node == 0 {
            return limits.max_watches;
        }
        let nodes = self
            .metrics
            .as_ref()
            .map_or(0, |m| usize::try_from(m.registered.get()).unwrap_or(0));
        ApiLimits::DEFAULT_MAX_WATCHES
            .saturating_add(limits.watches_per_node.saturating_mul(nodes))
            .min(limits.max_watches)
    }

    /// How many requests of `kind` one client may have in flight.
    fn client_share(&self, kind: &RequestKind) -> usize {
        let budget = match kind {
            RequestKind::Watch => self.watch_budget(),
            RequestKind::Read => self.limits.max_reads,
            RequestKind::Mutating => self.limits.max_mutating,
        };
        (budget / CLIENT_SHARE).max(1)
    }

    /// Counts a request of `client` against its share; `None` when the
    /// client holds its share already.
    fn take_share(&self, kind: &RequestKind, client: Client) -> Option<ClientSeat> {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        let held = clients.entry((kind.clone(), client)).or_insert(0);
        if *held >= self.client_share(kind) {
            return None;
        }
        *held += 1;
        Some(ClientSeat {
            clients: self.clients.clone(),
            key: (kind.clone(), client),
        })
    }

    fn semaphore(&self, kind: &RequestKind) -> &Arc<Semaphore> {
        match kind {
            RequestKind::Watch => &self.watches,
            RequestKind::Read => &self.reads,
            RequestKind::Mutating => &self.mutating,
        }
    }

    fn rejected(&self, kind: RequestKind, reason: RejectReason) {
        if let Some(m) = &self.metrics {
            m.http_rejected
                .get_or_create(&RejectedLabels { kind, reason })
                .inc();
        }
    }
}

/// `/healthz`, `/livez`, `/readyz` and their single checks: always served,
/// without a token and outside every budget.
pub fn is_health_check(path: &str) -> bool {
    ["/healthz", "/livez", "/readyz"].iter().any(|root| {
        path.strip_prefix(root)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    })
}

/// The budget a request counts against; `None` for health checks.
pub fn classify(method: &Method, path: &str, query: Option<&str>) -> Option<RequestKind> {
    if is_health_check(path) {
        return None;
    }
    if !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS) {
        return Some(RequestKind::Mutating);
    }
    let watch = query.is_some_and(|q| {
        form_urlencoded::parse(q.as_bytes())
            .any(|(k, v)| k == "watch" && matches!(&*v, "1" | "t" | "T" | "true" | "TRUE" | "True"))
    });
    Some(if watch {
        RequestKind::Watch
    } else {
        RequestKind::Read
    })
}

/// What an admitted request holds until its answer has been sent: its
/// slot in a budget and in its client's share, and its count in the
/// in-flight gauge.
pub(super) struct Admitted {
    _permit: tokio::sync::OwnedSemaphorePermit,
    _seat: Option<ClientSeat>,
    in_flight: InFlight,
}

/// A request's place in its client's share of a budget.
struct ClientSeat {
    clients: InFlightByClient,
    key: (RequestKind, Client),
}

impl Drop for ClientSeat {
    fn drop(&mut self) {
        let mut clients = self.clients.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(held) = clients.get_mut(&self.key) {
            *held -= 1;
            if *held == 0 {
                clients.remove(&self.key);
            }
        }
    }
}

/// Who `request` is from: the user of its token, else its connection (set
/// by the server); `None` for neither (a router driven without a server).
fn client_of(request: &Request) -> Option<Client> {
    if let Some(user) = super::auth::user_of(request) {
        return Some(Client::User(user));
    }
    request
        .extensions()
        .get::<super::connections::ConnectionId>()
        .map(|c| Client::Connection(c.0))
}

/// Admits a request against its budget: `Ok(None)` for health checks,
/// which count against none; a refusal is the 429 to answer. An admitted
/// request's body is then read with [`read_body`] before the handler sees it.
#[allow(clippy::result_large_err)]
pub(super) fn admit(budgets: &Budgets, request: &Request) -> Result<Option<Admitted>, Response> {
    let Some(kind) = classify(
        request.method(),
        request.uri().path(),
        request.uri().query(),
    ) else {
        return Ok(None);
    };
    // The watch semaphore holds the cap; the budget below it is checked
    // first (two watches admitted at once may both pass it: a budget that
    // grows with the site needs no closer count).
    let within_budget = kind != RequestKind::Watch || {
        let streaming = budgets.limits.max_watches - budgets.watches.available_permits();
        streaming < budgets.watch_budget()
    };
    let permit = match budgets.semaphore(&kind).clone().try_acquire_owned() {
        Ok(permit) if within_budget => permit,
        _ => {
            budgets.rejected(kind, RejectReason::TooManyRequests);
            return Err(too_many_requests());
        }
    };
    let seat = match client_of(request) {
        None => None,
        Some(client) => match budgets.take_share(&kind, client) {
            Some(seat) => Some(seat),
            None => {
                budgets.rejected(kind, RejectReason::ClientShare);
                return Err(too_many_requests());
            }
        },
    };
    Ok(Some(Admitted {
        _permit: permit,
        _seat: seat,
        in_flight: InFlight::start(budgets.metrics.clone(), kind),
    }))
}

/// A request body being read whole, within the size cap and the deadline.
pub(super) type BodyRead = tokio::time::Timeout<Collect<Limited<Body>>>;

/// Reads an admitted request's body, within `budgets`' deadline and
/// [`BODY_LIMIT`]; its outcome goes to [`body_read`].
pub(super) fn read_body(budgets: &Budgets, body: Body) -> BodyRead {
    tokio::time::timeout(
        budgets.limits.body_timeout,
        Limited::new(body, BODY_LIMIT).collect(),
    )
}

/// The body a [`read_body`] read, for the handler; or the refusal to
/// answer: 408, 413 or 400.
#[allow(clippy::result_large_err)]
pub(super) fn body_read(
    budgets: &Budgets,
    admitted: &Admitted,
    read: <BodyRead as std::future::Future>::Output,
    version: Version,
) -> Result<Body, Response> {
    match read {
        Ok(Ok(collected)) => Ok(Body::from(collected.to_bytes())),
        Ok(Err(e)) if e.is::<http_body_util::LengthLimitError>() => Err(super::refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("Request entity too large: limit is {BODY_LIMIT}"),
        )),
        Ok(Err(e)) => Err(super::bad_request(format!(
            "the request body could not be read: {e}"
        ))),
        Err(_) => {
            budgets.rejected(admitted.in_flight.kind.clone(), RejectReason::BodyTimeout);
            Err(body_timed_out(budgets.limits.body_timeout, version))
        }
    }
}

/// The 429 kube-apiserver's max-in-flight filter answers.
fn too_many_requests() -> Response {
    let status = crate::k8s::too_many_requests(1);
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(status)).into_response();
    response
        .headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    response
}

fn body_timed_out(timeout: Duration, version: Version) -> Response {
    let mut response = super::refusal(
        StatusCode::REQUEST_TIMEOUT,
        format!(
            "the request body did not arrive within {}: send the whole body at once (at most {BODY_LIMIT} bytes)",
            crate::duration::format(timeout)
        ),
    );
    // The rest of the body is never read: the connection cannot be reused.
    if version <= Version::HTTP_11 {
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    response
}

/// Counts a request in `nodekeeper_http_inflight_requests` while it lives.
struct InFlight {
    metrics: Option<Arc<Metrics>>,
    kind: RequestKind,
}

impl InFlight {
    fn start(metrics: Option<Arc<Metrics>>, kind: RequestKind) -> InFlight {
        if let Some(m) = &metrics {
            m.inflight_gauge(&kind).inc();
        }
        InFlight { metrics, kind }
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Some(m) = &self.metrics {
            m.inflight_gauge(&self.kind).dec();
        }
    }
}

/// Keeps `guard` alive until the response body has been sent (or dropped),
/// so a streaming answer keeps holding what it was given.
pub(crate) fn hold_until_sent<G: Send + 'static>(response: Response, guard: G) -> Response {
    response.map(|body| {
        Body::new(Guarded {
            body,
            _guard: guard,
        })
    })
}

/// A body that carries a guard: dropped with the body.
struct Guarded<G> {
    body: Body,
    _guard: G,
}

impl<G> hyper::body::Body for Guarded<G> {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

// Guards hold no pinned state.
impl<G> Unpin for Guarded<G> {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_checks_are_exempt_and_nothing_else() {
        for path in ["/healthz", "/livez", "/readyz", "/readyz/ping", "/livez/x"] {
            assert!(is_health_check(path), "{path}");
            assert_eq!(classify(&Method::GET, path, None), None);
        }
        for path in ["/healthzz", "/readyzx", "/", "/metrics", "/api/healthz"] {
            assert!(!is_health_check(path), "{path}");
        }
    }

    #[test]
    fn requests_are_classified_as_kube_apiserver_does() {
        let nodes = "/api/v1/nodes";
        let kind = |m: Method, q: Option<&str>| classify(&m, nodes, q);
        assert_eq!(kind(Method::GET, None), Some(RequestKind::Read));
        assert_eq!(
            kind(Method::GET, Some("watch=false")),
            Some(RequestKind::Read)
        );
        assert_eq!(
            kind(Method::GET, Some("limit=5&watch=true")),
            Some(RequestKind::Watch)
        );
        assert_eq!(kind(Method::GET, Some("watch=1")), Some(RequestKind::Watch));
        assert_eq!(
            kind(Method::GET, Some("watch=True")),
            Some(RequestKind::Watch)
        );
        assert_eq!(kind(Method::HEAD, Some("x=1")), Some(RequestKind::Read));
        for m in [Method::PUT, Method::PATCH, Method::POST, Method::DELETE] {
            assert_eq!(kind(m, Some("watch=true")), Some(RequestKind::Mutating));
        }
    }

    /// A watch admitted, or `None` when refused.
    fn watch(budgets: &Budgets) -> Option<Admitted> {
        let request = Request::get("/api/v1/nodes?watch=true")
            .body(Body::empty())
            .unwrap();
        admit(budgets, &request).ok().flatten()
    }

    /// Admits watches until one is refused: how many were.
    fn admitted_watches(budgets: &Budgets, held: &mut Vec<Admitted>) -> usize {
        let before = held.len();
        while let Some(admitted) = watch(budgets) {
            held.push(admitted);
            assert!(held.len() < 100_000, "no watch was ever refused");
        }
        held.len() - before
    }

    #[test]
    fn the_watch_budget_grows_with_the_registered_nodes_up_to_its_cap() {
        let metrics = Arc::new(Metrics::new());
        let limits = ApiLimits {
            max_watches: 1_000,
            watches_per_node: ApiLimits::WATCHES_PER_NODE,
            ..ApiLimits::default()
        };
        let budgets = Budgets::new(limits, Some(metrics.clone()));
        let mut held = Vec::new();
        // No nodes: the base.
        assert_eq!(admitted_watches(&budgets, &mut held), 100);
        // Forty nodes register: five watches each, counted at the next admission.
        metrics.registered.set(40);
        assert_eq!(budgets.watch_budget(), 300);
        assert_eq!(admitted_watches(&budgets, &mut held), 200);
        // Past the cap, never.
        metrics.registered.set(1_000);
        assert_eq!(budgets.watch_budget(), 1_000);
        assert_eq!(admitted_watches(&budgets, &mut held), 700);
        // Nodes gone: watches streaming stay; new ones wait for room.
        metrics.registered.set(0);
        held.truncate(150);
        assert!(watch(&budgets).is_none());
        held.truncate(99);
        assert_eq!(admitted_watches(&budgets, &mut held), 1);

        // A cap given (--max-watches 3): the budget, whatever the nodes.
        let fixed = Budgets::new(
            ApiLimits {
                max_watches: 3,
                ..ApiLimits::default()
            },
            Some(metrics.clone()),
        );
        metrics.registered.set(1_000);
        assert_eq!(admitted_watches(&fixed, &mut Vec::new()), 3);
    }

    #[tokio::test]
    async fn the_429_is_a_status_with_retry_after() {
        let response = too_many_requests();
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()[header::RETRY_AFTER], "1");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let status: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            status,
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "Too many requests, please try again later.", "reason": "TooManyRequests",
                "details": {"retryAfterSeconds": 1}, "code": 429})
        );
    }

    #[tokio::test]
    async fn a_guarded_body_keeps_its_guard_and_length_until_dropped() {
        let permits = Arc::new(Semaphore::new(1));
        let permit = permits.clone().try_acquire_owned().unwrap();
        let response = hold_until_sent("hello".into_response(), permit);
        assert_eq!(
            hyper::body::Body::size_hint(response.body()).exact(),
            Some(5)
        );
        assert_eq!(permits.available_permits(), 0);
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(&body[..], b"hello");
        assert_eq!(permits.available_permits(), 1);
    }
}
