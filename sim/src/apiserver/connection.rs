//! Listening and connections: the accept loop (closed and reopened by
//! `Fault::Down`), one task per keep-alive connection, and the path of one
//! request from its body through the fault to its answer and the log.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use hyper::body::Incoming;
use hyper::header::CONTENT_TYPE;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::time::Instant;

use super::answer::{Answer, ApiError};
use super::faults::{fault_answer, Fault};
use super::handle::{Request, Shared};
use super::resource::Resource;
use super::routing::{route, Call, Query, Target};
use super::BODY_LIMIT;
use crate::kubelet::bind_listener;

/// Pause after a failed accept (EMFILE and friends) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// Pause between failed rebinds after [`Fault::Down`] ends.
const REBIND_BACKOFF: Duration = Duration::from_millis(100);

/// Resolves when the fault satisfies `f`; false if the sender is gone.
/// (A bool rather than `wait_for`'s guard, which is not `Send`.)
async fn until(fault: &mut watch::Receiver<Fault>, f: impl FnMut(&Fault) -> bool) -> bool {
    fault.wait_for(f).await.is_ok()
}

/// The accept loop: accept while not `Down`, close the listener on `Down`,
/// listen again on the same address when it ends, stop when the handle goes.
pub(super) async fn run(shared: Arc<Shared>, listener: TcpListener) {
    let mut fault = shared.fault.subscribe();
    let mut listener = Some(listener);
    // Ends on stop; each turn is one listener's lifetime.
    loop {
        let open = match listener.take() {
            Some(l) => l,
            None => match rebind(&shared, &mut fault).await {
                Some(l) => l,
                None => return,
            },
        };
        shared.listening.send_replace(true);
        let stopped = accept_until_down(&shared, &open, &mut fault).await;
        drop(open);
        shared.listening.send_replace(false);
        if stopped {
            return;
        }
        tracing::debug!(addr = %shared.addr, "fake API server down");
    }
}

/// Accepts connections until the fault is `Down` (false) or the server
/// stops (true).
async fn accept_until_down(
    shared: &Arc<Shared>,
    listener: &TcpListener,
    fault: &mut watch::Receiver<Fault>,
) -> bool {
    // Ends on Down or stop.
    loop {
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return true,
            up = until(fault, |f| *f == Fault::Down) => return !up,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    tokio::spawn(serve_connection(shared.clone(), stream));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "fake API server cannot accept; backing off");
                    tokio::select! {
                        _ = shared.stop.cancelled() => return true,
                        _ = tokio::time::sleep(ACCEPT_BACKOFF) => {}
                    }
                }
            },
        }
    }
}

/// Waits until the fault is no longer `Down` and binds the same address
/// again; `None` when the server stops first.
async fn rebind(shared: &Shared, fault: &mut watch::Receiver<Fault>) -> Option<TcpListener> {
    // Ends on a successful bind or stop.
    loop {
        tokio::select! {
            biased;
            _ = shared.stop.cancelled() => return None,
            up = until(fault, |f| *f != Fault::Down) => {
                if !up {
                    return None;
                }
            }
        }
        match bind_listener(shared.addr) {
            Ok(l) => {
                tracing::debug!(addr = %shared.addr, "fake API server up again");
                return Some(l);
            }
            Err(e) => {
                tracing::warn!(addr = %shared.addr, error = %e,
                    "fake API server cannot listen again; retrying");
                tokio::select! {
                    _ = shared.stop.cancelled() => return None,
                    _ = tokio::time::sleep(REBIND_BACKOFF) => {}
                }
            }
        }
    }
}

/// Counts a connection while it lives, however its task ends.
struct OpenConnection<'a>(&'a watch::Sender<usize>);

impl<'a> OpenConnection<'a> {
    pub(super) fn new(gauge: &'a watch::Sender<usize>) -> Self {
        gauge.send_modify(|n| *n += 1);
        OpenConnection(gauge)
    }
}

impl Drop for OpenConnection<'_> {
    fn drop(&mut self) {
        self.0.send_modify(|n| *n -= 1);
    }
}

/// Serves one keep-alive connection until the client leaves, the server goes
/// `Down`, or it stops; dropping the connection closes the socket.
async fn serve_connection(shared: Arc<Shared>, stream: TcpStream) {
    let _open = OpenConnection::new(&shared.connections);
    let _ = stream.set_nodelay(true);
    let mut fault = shared.fault.subscribe();
    let svc = shared.clone();
    let service = service_fn(move |req| respond(svc.clone(), req));
    let conn = http1::Builder::new()
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), service);
    tokio::select! {
        r = conn => {
            if let Err(e) = r {
                tracing::debug!(error = %e, "fake API server connection ended");
            }
        }
        _ = until(&mut fault, |f| *f == Fault::Down) => {}
        _ = shared.stop.cancelled() => {}
    }
}

/// The connection is to be closed without an answer (`Down`, or the server
/// stopped). hyper closes on it.
#[derive(Debug, thiserror::Error)]
#[error("fake API server closed the connection")]
struct Closed;

pub(super) type Body = UnsyncBoxBody<Bytes, std::convert::Infallible>;

/// Answers one request: body, fault, then the API call; logs what it answered.
async fn respond(
    shared: Arc<Shared>,
    req: hyper::Request<Incoming>,
) -> Result<Response<Body>, Closed> {
    let at = Instant::now();
    let (parts, body) = req.into_parts();
    let path = parts.uri.path().to_owned();
    let query = parts.uri.query().unwrap_or("").to_owned();
    let route = route(&path);

    let answer = read_body(body).await?;
    if let Some(early) = meet_fault(&shared, route.as_ref().map(|r| r.resource)).await? {
        return Ok(shared.log_and_answer(&parts.method, path, query, at, early));
    }

    let watching = route
        .as_ref()
        .is_some_and(|r| r.resource == Resource::Nodes && r.target == Target::Collection)
        && parts.method == Method::GET
        && Query::parse(&query).watch();
    if watching && answer.is_ok() {
        let (code, response) = match shared.watch_nodes(&Query::parse(&query)) {
            Ok(response) => (StatusCode::OK, response),
            Err(e) => {
                let answer = e.into_answer();
                (answer.code, answer.into_response())
            }
        };
        shared.log(&parts.method, path, query, at, code);
        return Ok(response);
    }
    let answer = match (answer, route) {
        (Err(e), _) => e.into_answer(),
        (Ok(_), None) => ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            "the server could not find the requested resource".into(),
        )
        .into_answer(),
        (Ok(body), Some(route)) => {
            let call = Call {
                method: &parts.method,
                route,
                query: Query::parse(&query),
                content_type: parts
                    .headers
                    .get(CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or(""),
                body: &body,
            };
            let mut state = shared.lock();
            state.dispatch(call).unwrap_or_else(ApiError::into_answer)
        }
    };
    Ok(shared.log_and_answer(&parts.method, path, query, at, answer))
}

/// The request body, or 413 when it is over [`BODY_LIMIT`]; `Closed` when
/// the client went away mid-body.
async fn read_body(body: Incoming) -> Result<Result<Bytes, ApiError>, Closed> {
    match Limited::new(body, BODY_LIMIT).collect().await {
        Ok(collected) => Ok(Ok(collected.to_bytes())),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => Ok(Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            format!("Request entity too large: limit is {BODY_LIMIT}"),
        ))),
        Err(_) => Err(Closed),
    }
}

/// The fault a request for `resource` meets: an answer instead of the API
/// call (`Status`, `Throttled`), a delay before it (`Slow`), or `Closed`.
async fn meet_fault(shared: &Shared, resource: Option<Resource>) -> Result<Option<Answer>, Closed> {
    match shared.fault_for(resource) {
        Fault::None => Ok(None),
        Fault::Down => Err(Closed),
        Fault::Status(code) => Ok(Some(fault_answer(code))),
        Fault::Throttled(seconds) => Ok(Some(Answer::throttled(seconds))),
        Fault::Slow(delay) => {
            let mut fault = shared.fault.subscribe();
            tokio::select! {
                _ = tokio::time::sleep(delay) => Ok(None),
                _ = until(&mut fault, |f| *f == Fault::Down) => Err(Closed),
                _ = shared.stop.cancelled() => Err(Closed),
            }
        }
    }
}

impl Shared {
    fn log_and_answer(
        &self,
        method: &Method,
        path: String,
        query: String,
        at: Instant,
        answer: Answer,
    ) -> Response<Body> {
        self.log(method, path, query, at, answer.code);
        answer.into_response()
    }

    fn log(&self, method: &Method, path: String, query: String, at: Instant, code: StatusCode) {
        self.lock().log.push(Request {
            method: method.as_str().to_owned(),
            path,
            query,
            status: code.as_u16(),
            at,
        });
    }
}
