//! The guard over every route, as a tower layer: the bearer-token check,
//! the authorizer's table,
//! the request budgets, the body read within its deadline and cap, error
//! answers as `Status` objects, and `X-Content-Type-Options: nosniff` on
//! every answer. A service with a future of its own
//! rather than `middleware::from_fn`, which boxes the request's future, a
//! clone of the routes behind it and their future again on every request:
//! 2,000 a second at 10,000 pushing kubelets.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::Request;
use axum::http::request::Parts;
use axum::http::Version;
use axum::response::Response;
use pin_project_lite::pin_project;
use tower::{Layer, Service};

use super::auth::{self, Authn};
use super::authz;
use super::identity::Principal;
use super::limits::{self, Admitted, BodyRead, Budgets};

/// What requests are checked against.
#[derive(Clone)]
pub(super) struct GuardLayer {
    guard: Arc<Guard>,
}

struct Guard {
    authn: Authn,
    budgets: Arc<Budgets>,
}

impl GuardLayer {
    pub fn new(authn: Authn, budgets: Arc<Budgets>) -> GuardLayer {
        GuardLayer {
            guard: Arc::new(Guard { authn, budgets }),
        }
    }
}

impl<S> Layer<S> for GuardLayer {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            guard: self.guard.clone(),
            inner,
        }
    }
}

/// A route behind the guard.
#[derive(Clone)]
pub(super) struct Guarded<S> {
    guard: Arc<Guard>,
    inner: S,
}

impl<S> Service<Request> for Guarded<S>
where
    S: Service<Request, Response = Response, Error = Infallible> + Clone + Send + 'static,
    S::Future: Send + 'static,
{
    type Response = Response;
    type Error = Infallible;
    type Future = GuardFuture<S, S::Future>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        // What this wraps is axum's `Route`: always ready (its `poll_ready`
        // reserves nothing), and its `call` readies the service behind it
        // itself (a oneshot), so the clone is called without asking first.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        let health = limits::is_health_check(request.uri().path());
        let request = match auth::identify(&self.guard.authn, request) {
            Ok(request) => request,
            Err(refused) => return GuardFuture::answered(refused),
        };
        if let Err(refused) = authorized(&request) {
            return GuardFuture::answered(refused);
        }
        let admitted = match limits::admit(&self.guard.budgets, &request) {
            Ok(admitted) => admitted,
            Err(refused) => return GuardFuture::answered(refused),
        };
        let mut inner = self.inner.clone();
        let state = match admitted {
            // Health checks carry no body worth reading first.
            None => State::Serving {
                answer: inner.call(request),
                health,
                admitted: None,
            },
            Some(admitted) => {
                let (parts, body) = request.into_parts();
                State::ReadingBody {
                    read: limits::read_body(&self.guard.budgets, body),
                    rest: Some(Waiting {
                        guard: self.guard.clone(),
                        inner,
                        parts,
                        admitted,
                        health,
                    }),
                }
            }
        };
        GuardFuture { state }
    }
}

/// The authorizer's table, for the caller `identify` noted.
fn authorized(request: &Request) -> Result<(), Response> {
    match request.extensions().get::<Principal>() {
        Some(principal) => authz::authorize(
            principal,
            request.method(),
            request.uri().path(),
            request.uri().query(),
        ),
        None => Ok(()),
    }
}

/// What an admitted request needs once its body is in.
struct Waiting<S> {
    guard: Arc<Guard>,
    inner: S,
    parts: Parts,
    admitted: Admitted,
    health: bool,
}

pin_project! {
    /// The future of a guarded request.
    pub(super) struct GuardFuture<S, F> {
        #[pin]
        state: State<S, F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<S, F> {
        /// Refused before the handler: the answer, until taken.
        Answered { answer: Option<Response> },
        /// An admitted request's body, arriving.
        ReadingBody {
            #[pin]
            read: BodyRead,
            rest: Option<Waiting<S>>,
        },
        /// The handler at work.
        Serving {
            #[pin]
            answer: F,
            health: bool,
            admitted: Option<Admitted>,
        },
        /// A plain-text error answer being rewritten as a `Status` (rare:
        /// boxed).
        Rewriting {
            answer: Pin<Box<dyn Future<Output = Response> + Send>>,
            admitted: Option<Admitted>,
        },
    }
}

impl<S, F> GuardFuture<S, F> {
    fn answered(answer: Response) -> Self {
        GuardFuture {
            state: State::Answered {
                answer: Some(answer),
            },
        }
    }
}

impl<S, F> Future for GuardFuture<S, F>
where
    S: Service<Request, Response = Response, Error = Infallible, Future = F>,
    F: Future<Output = Result<Response, Infallible>>,
{
    type Output = Result<Response, Infallible>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        loop {
            let mut state = self.as_mut().project().state;
            let next = match state.as_mut().project() {
                StateProj::Answered { answer } => {
                    let answer = answer.take().expect("polled after completion");
                    return Poll::Ready(Ok(nosniff(answer)));
                }
                StateProj::ReadingBody { read, rest } => {
                    let read = std::task::ready!(read.poll(cx));
                    let Waiting {
                        guard,
                        mut inner,
                        parts,
                        admitted,
                        health,
                    } = rest.take().expect("polled after completion");
                    let version: Version = parts.version;
                    match limits::body_read(&guard.budgets, &admitted, read, version) {
                        Ok(body) => State::Serving {
                            answer: inner.call(Request::from_parts(parts, body)),
                            health,
                            admitted: Some(admitted),
                        },
                        // Dropping `admitted` frees the slot at once.
                        Err(refused) => State::Answered {
                            answer: Some(refused),
                        },
                    }
                }
                StateProj::Serving {
                    answer,
                    health,
                    admitted,
                } => {
                    let Ok(response) = std::task::ready!(answer.poll(cx));
                    if super::is_plain_error(*health, &response) {
                        State::Rewriting {
                            answer: Box::pin(super::errors_as_status(*health, response)),
                            admitted: admitted.take(),
                        }
                    } else {
                        return Poll::Ready(Ok(held(response, admitted.take())));
                    }
                }
                StateProj::Rewriting { answer, admitted } => {
                    let response = std::task::ready!(answer.as_mut().poll(cx));
                    return Poll::Ready(Ok(held(response, admitted.take())));
                }
            };
            state.set(next);
        }
    }
}

/// A response that holds its request's slot until it has been sent: a
/// watch holds it for as long as it streams.
fn held(response: Response, admitted: Option<Admitted>) -> Response {
    let response = nosniff(response);
    match admitted {
        Some(admitted) => limits::hold_until_sent(response, admitted),
        None => response,
    }
}

/// Tells browsers to take every answer as the type it says it is, never as
/// a page or a script sniffed from its bytes (a Status message, a node's
/// annotation), as kube-apiserver does (k8s.io/apiserver
/// pkg/server/filters/content_type.go, responsewriters/errors.go).
fn nosniff(mut response: Response) -> Response {
    response.headers_mut().insert(
        axum::http::header::X_CONTENT_TYPE_OPTIONS,
        axum::http::HeaderValue::from_static("nosniff"),
    );
    response
}
