//! Allocations a request makes in the API's plumbing (the guard layer and
//! the connection's wrappers), counted in-process on the serving thread:
//! a heartbeat passes through them 2,000 times a second at 10,000 nodes.

use axum::body::{Body, Bytes};
use axum::http::{header, HeaderValue, Request, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::put;
use axum::Router;
use nodekeeper::server::{harden_with, serve_with, ApiLimits, Budgets, ServeConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

mod common;

use common::allocations;

#[global_allocator]
static ALLOCATOR: common::Counting = common::Counting;

const LEASE: &[u8] = br#"{"apiVersion":"coordination.k8s.io/v1","kind":"Lease","metadata":{"name":"n1","namespace":"kube-node-lease"},"spec":{"holderIdentity":"n1","leaseDurationSeconds":40,"renewTime":"2026-12-02T06:15:44.000000Z"}}"#;

/// A handler that answers as the floor does: the body read whole, a canned reply.
async fn canned(body: Bytes) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        )],
        body,
    )
        .into_response()
}

fn routes() -> Router {
    Router::new().route("/leases/{name}", put(canned))
}

fn guarded() -> Router {
    let budgets = Budgets::new(ApiLimits::default(), None);
    harden_with(routes(), None, budgets)
}

fn request() -> Request<Body> {
    Request::put("/leases/n1")
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::CONTENT_LENGTH, LEASE.len())
        .body(Body::from(Bytes::from_static(LEASE)))
        .unwrap()
}

/// Allocations a request makes through `router`, called in-process.
fn per_request_in_process(router: Router) -> u64 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        // The first requests set up what later ones reuse.
        for _ in 0..10 {
            let response = router.clone().oneshot(request()).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
        }
        let rounds = 100;
        let mut counted = 0;
        for _ in 0..rounds {
            let req = request();
            let before = allocations();
            let response = router.clone().oneshot(req).await.unwrap();
            assert_eq!(response.status(), StatusCode::OK);
            drop(response);
            counted += allocations() - before;
        }
        counted.div_ceil(rounds)
    })
}

/// The guard's own allocations a request: what a request makes through
/// `harden_with(routes)` beyond what it makes through `routes` alone. It was
/// 21 with the guard as a `middleware::from_fn` layer.
const GUARD_ALLOCATIONS: u64 = 8;

#[test]
fn the_guard_allocates_little_in_process() {
    let bare = per_request_in_process(routes());
    let guarded = per_request_in_process(guarded());
    assert!(
        guarded <= bare + GUARD_ALLOCATIONS,
        "a guarded request allocates {guarded} times, a bare one {bare}: the guard's own \
         allocations went up from {GUARD_ALLOCATIONS}"
    );
}

/// Allocations a request makes over a kept-alive loopback connection
/// served by [`serve_with`] (its connection wrappers included), client and
/// server on this one thread, on average over many requests.
async fn per_request_served(router: Router) -> f64 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let stop = CancellationToken::new();
    let server = tokio::spawn(serve_with(
        listener,
        router,
        None,
        ServeConfig::default(),
        stop.clone(),
    ));
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    let mut wire = format!(
        "PUT /leases/n1 HTTP/1.1\r\nhost: a\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n",
        LEASE.len()
    )
    .into_bytes();
    wire.extend_from_slice(LEASE);
    let mut buf = vec![0u8; 4096];
    let mut exchange = async |tcp: &mut tokio::net::TcpStream| {
        tcp.write_all(&wire).await.unwrap();
        let mut got = 0;
        // Ends when the echoed body has arrived; each read waits for bytes.
        loop {
            let n = tcp.read(&mut buf[got..]).await.unwrap();
            assert!(n > 0, "the server closed the connection");
            got += n;
            if buf[..got].ends_with(LEASE) {
                break;
            }
        }
    };
    // The connection's first requests set up what later ones reuse.
    for _ in 0..50 {
        exchange(&mut tcp).await;
    }
    let rounds = 500;
    let before = allocations();
    for _ in 0..rounds {
        exchange(&mut tcp).await;
    }
    let per_request = (allocations() - before) as f64 / rounds as f64;
    drop(tcp);
    stop.cancel();
    server.await.unwrap().unwrap();
    per_request
}

#[test]
fn the_guard_allocates_little_when_served() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let bare = runtime.block_on(per_request_served(routes()));
    let guarded = runtime.block_on(per_request_served(guarded()));
    // The loopback's reads and the runtime's timers add the odd allocation
    // on a busy machine: half of one a request is allowed for them.
    assert!(
        guarded - bare <= GUARD_ALLOCATIONS as f64 + 0.5,
        "a served guarded request allocates {guarded:.2} times, a bare one {bare:.2}: the \
         guard's own allocations went up from {GUARD_ALLOCATIONS}"
    );
}
