//! One simulated kubelet: its listener's accept loop, its connections, and its `/healthz` answers.

use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE, X_CONTENT_TYPE_OPTIONS};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::{KubeletState, NodeStatus};

/// Pending connections the kernel queues per listener (it caps this at somaxconn).
const BACKLOG: u32 = 1024;
/// Pause after a failed accept (EMFILE and friends) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Pause between failed rebinds after going back up.
const REBIND_BACKOFF: Duration = Duration::from_millis(500);

const OK_BODY: &str = "ok";
// What a kubelet prints when a check fails, shortened.
const SICK_BODY: &str = "[-]syncloop failed: simulated\nhealthz check failed\n";
const NOT_FOUND_BODY: &str = "404 page not found\n";
const NOT_ALLOWED_BODY: &str = "405 method not allowed\n";

/// The state one simulated kubelet shares between its accept loop, its
/// connections and the fleet handle.
#[derive(Debug)]
pub(super) struct Node {
    pub(super) name: String,
    pub(super) address: SocketAddr,
    /// The wanted state; the accept loop and connections watch it.
    pub(super) state: watch::Sender<KubeletState>,
    /// Whether the listener is open; the accept loop reports it.
    pub(super) listening: watch::Sender<bool>,
    pub(super) requests: AtomicU64,
    /// Connections being served right now.
    pub(super) connections: AtomicU64,
    pub(super) slow_delay: Duration,
    pub(super) shutdown: CancellationToken,
}

impl Node {
    pub(super) fn set(&self, state: KubeletState) {
        // Only wake watchers on a real change.
        self.state.send_if_modified(|s| {
            let changed = *s != state;
            *s = state;
            changed
        });
    }

    pub(super) fn status(&self) -> NodeStatus {
        NodeStatus {
            name: self.name.clone(),
            address: self.address,
            state: *self.state.borrow(),
            requests: self.requests.load(Ordering::Relaxed),
            connections: self.connections.load(Ordering::Relaxed),
            listening: *self.listening.borrow(),
        }
    }
}

/// Resolves when the state satisfies `f`; false if the sender is gone.
/// (A bool rather than `wait_for`'s guard, which is not `Send`.)
async fn until(
    state: &mut watch::Receiver<KubeletState>,
    f: impl FnMut(&KubeletState) -> bool,
) -> bool {
    state.wait_for(f).await.is_ok()
}

/// A listener that can be rebound right after a `Down`, despite the
/// TIME_WAIT sockets the closed connections leave behind.
pub(super) fn bind_listener(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(BACKLOG)
}

#[derive(PartialEq, Eq)]
enum Outcome {
    WentDown,
    Stop,
}

/// The node's one long-lived task: accept while not `Down`, close the listener
/// on `Down`, rebind when it comes back, stop on shutdown.
pub(super) async fn run(node: Arc<Node>, listener: TcpListener, tracker: TaskTracker) {
    let mut state = node.state.subscribe();
    let mut listener = Some(listener);
    // Ends on shutdown; each turn is one listener's lifetime.
    loop {
        let open = match listener.take() {
            Some(l) => l,
            None => match rebind(&node, &mut state).await {
                Some(l) => l,
                None => return,
            },
        };
        node.listening.send_replace(true);
        let outcome = accept_until_down(&node, &open, &mut state, &tracker).await;
        drop(open);
        node.listening.send_replace(false);
        if outcome == Outcome::Stop {
            return;
        }
        tracing::debug!(node = %node.name, "simulated kubelet down");
    }
}

async fn accept_until_down(
    node: &Arc<Node>,
    listener: &TcpListener,
    state: &mut watch::Receiver<KubeletState>,
    tracker: &TaskTracker,
) -> Outcome {
    let mut failing = false;
    // Ends on Down or shutdown.
    loop {
        tokio::select! {
            biased;
            _ = node.shutdown.cancelled() => return Outcome::Stop,
            r = until(state, |s| *s == KubeletState::Down) => {
                return if r { Outcome::WentDown } else { Outcome::Stop };
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    failing = false;
                    tracker.spawn(serve_connection(node.clone(), stream));
                }
                Err(e) => {
                    if !failing {
                        tracing::warn!(node = %node.name, error = %e, "simulated kubelet cannot accept; backing off");
                        failing = true;
                    }
                    tokio::select! {
                        _ = node.shutdown.cancelled() => return Outcome::Stop,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            },
        }
    }
}

/// Waits until the node is wanted up again and binds its address anew.
/// `None` on shutdown.
async fn rebind(node: &Node, state: &mut watch::Receiver<KubeletState>) -> Option<TcpListener> {
    let mut warned = false;
    // Ends on a successful bind or shutdown.
    loop {
        tokio::select! {
            biased;
            _ = node.shutdown.cancelled() => return None,
            r = until(state, |s| *s != KubeletState::Down) => {
                if !r {
                    return None;
                }
            }
        }
        match bind_listener(node.address) {
            Ok(l) => {
                tracing::debug!(node = %node.name, "simulated kubelet up again");
                return Some(l);
            }
            Err(e) => {
                if !warned {
                    tracing::warn!(node = %node.name, address = %node.address, error = %e,
                        "simulated kubelet cannot listen again; retrying");
                    warned = true;
                }
                tokio::select! {
                    _ = node.shutdown.cancelled() => return None,
                    _ = tokio::time::sleep(REBIND_BACKOFF) => {}
                }
            }
        }
    }
}

/// Serves one keep-alive connection until the client leaves, the node goes
/// `Down`, or the fleet stops; dropping the connection closes the socket.
async fn serve_connection(node: Arc<Node>, stream: TcpStream) {
    let _open = OpenConnection::new(&node.connections);
    // Small answers: send them at once.
    let _ = stream.set_nodelay(true);
    let mut state = node.state.subscribe();
    let svc_node = node.clone();
    let service = service_fn(move |req| respond(svc_node.clone(), req));
    let conn = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                tracing::debug!(node = %node.name, error = %e, "simulated kubelet connection ended");
            }
        }
        _ = until(&mut state, |s| *s == KubeletState::Down) => {}
        _ = node.shutdown.cancelled() => {}
    }
}

/// Counts a connection while it lives, however its task ends.
struct OpenConnection<'a>(&'a AtomicU64);

impl<'a> OpenConnection<'a> {
    fn new(gauge: &'a AtomicU64) -> Self {
        gauge.fetch_add(1, Ordering::Relaxed);
        OpenConnection(gauge)
    }
}

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The connection is to be closed without an answer (the node hung and then
/// changed state, went down, or the fleet stopped). hyper closes on it.
#[derive(Debug, thiserror::Error)]
#[error("simulated kubelet closed the connection")]
struct Closed;

async fn respond(node: Arc<Node>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Closed> {
    if req.uri().path() != "/healthz" {
        return Ok(text(StatusCode::NOT_FOUND, NOT_FOUND_BODY));
    }
    if req.method() != Method::GET && req.method() != Method::HEAD {
        let mut resp = text(StatusCode::METHOD_NOT_ALLOWED, NOT_ALLOWED_BODY);
        resp.headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return Ok(resp);
    }
    let state = *node.state.borrow();
    if state == KubeletState::Down {
        // Raced with going down: the connection is about to close anyway.
        return Err(Closed);
    }
    node.requests.fetch_add(1, Ordering::Relaxed);
    match state {
        KubeletState::Up => Ok(text(StatusCode::OK, OK_BODY)),
        KubeletState::Sick => Ok(text(StatusCode::INTERNAL_SERVER_ERROR, SICK_BODY)),
        KubeletState::Slow => {
            tokio::select! {
                _ = tokio::time::sleep(node.slow_delay) => Ok(text(StatusCode::OK, OK_BODY)),
                _ = node.shutdown.cancelled() => Err(Closed),
            }
        }
        KubeletState::Hang => {
            let mut watch = node.state.subscribe();
            tokio::select! {
                _ = until(&mut watch, |s| *s != KubeletState::Hang) => {}
                _ = node.shutdown.cancelled() => {}
            }
            Err(Closed)
        }
        KubeletState::Down => Err(Closed),
    }
}

fn text(status: StatusCode, body: &'static str) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *resp.status_mut() = status;
    let headers = resp.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    headers.insert(X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    resp
}
