//! Fault injection: failing, slow, throttled or refused requests, injected
//! conflicts, and losing everything stored (a wipe, or a restart from an
//! empty backup).

use std::time::Duration;

use hyper::StatusCode;
use serde_json::json;

use super::answer::{Answer, ApiError};
use super::handle::FakeApiServer;
use super::resource::{ObjectKey, Resource};

/// How the server answers, set with [`FakeApiServer::set_fault`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Fault {
    /// Requests are served normally.
    #[default]
    None,
    /// Every request is answered with this status code and a `Status` body
    /// (reason `ServiceUnavailable` for 503, `TooManyRequests` for 429 with
    /// `Retry-After: 1` as API priority and fairness sends, ...), without
    /// touching any object.
    Status(u16),
    /// Requests are served after this delay (a `tokio::time::sleep`, so
    /// paused-time tests advance through it).
    Slow(Duration),
    /// Every request is answered `429 Too Many Requests` the way API
    /// Priority and Fairness answers it: a plain-text body and a
    /// `Retry-After` header of this many seconds.
    Throttled(u32),
    /// Connections are refused: the listener and every open connection are
    /// closed, and requests in flight are dropped unanswered. Setting another
    /// fault listens again on the same port. Limited to a resource with
    /// [`FakeApiServer::set_fault_for`], the connection carrying a request for
    /// it is closed unanswered instead (other resources stay reachable).
    Down,
}

impl FakeApiServer {
    /// Sets the fault every request meets (unless [`FakeApiServer::set_fault_for`]
    /// set one for its resource). Takes effect at once for new requests;
    /// `Down` closes the listener and connections from their own tasks, so
    /// await [`FakeApiServer::settled`] before relying on refused connections.
    pub fn set_fault(&self, fault: Fault) {
        self.shared().fault.send_if_modified(|f| {
            let changed = *f != fault;
            *f = fault;
            changed
        });
    }

    /// The global fault last set.
    pub fn fault(&self) -> Fault {
        *self.shared().fault.borrow()
    }

    /// Sets the fault requests for one resource meet, overriding the global
    /// one except a global `Down`; `Fault::None` removes it.
    pub fn set_fault_for(&self, resource: Resource, fault: Fault) {
        let mut state = self.shared().lock();
        if fault == Fault::None {
            state.faults.remove(&resource);
        } else {
            state.faults.insert(resource, fault);
        }
    }

    /// Waits until the listener follows the global fault: with `Down`, the
    /// listener and every connection are closed; otherwise it listens again.
    pub async fn settled(&self) {
        let shared = self.shared();
        let mut fault = shared.fault.subscribe();
        let mut listening = shared.listening.subscribe();
        let mut connections = shared.connections.subscribe();
        // Ends when they agree; each turn waits for one of them to change.
        loop {
            let down = *fault.borrow_and_update() == Fault::Down;
            let open = *listening.borrow_and_update();
            let conns = *connections.borrow_and_update();
            if (down && !open && conns == 0) || (!down && open) {
                return;
            }
            // The senders live as long as `shared`: these cannot fail.
            tokio::select! {
                _ = fault.changed() => {}
                _ = listening.changed() => {}
                _ = connections.changed() => {}
            }
        }
    }

    /// Makes the next `n` writes (PUT or PATCH, main resource or status) to
    /// `key` answer 409 Conflict without changing it, as if another client
    /// had written first. Replaces what is left of an earlier count.
    pub fn conflict_next(&self, key: ObjectKey, n: u32) {
        let mut state = self.shared().lock();
        if n == 0 {
            state.conflicts.remove(&key);
        } else {
            state.conflicts.insert(key, n);
        }
    }

    /// Deletes every object in place, as `kubectl delete --all` of every
    /// resource would: watches see each node deleted, resourceVersions go on.
    pub fn wipe(&self) {
        let mut state = self.shared().lock();
        let keys: Vec<ObjectKey> = state.objects.keys().cloned().collect();
        for key in keys {
            state.remove(&key);
        }
    }

    /// Restarts on the same port with nothing stored and resourceVersions
    /// starting over, as an API server restored from an empty backup (or a
    /// new cluster at the same address): every connection and watch is
    /// closed, the listener is closed and opened again. Faults, conflicts
    /// and the request log are kept.
    pub async fn restart_empty(&self) {
        let fault = self.fault();
        self.set_fault(Fault::Down);
        self.settled().await;
        {
            let mut state = self.shared().lock();
            state.objects.clear();
            state.resource_version = 0;
            state.history.clear();
            state.oldest_watchable = 0;
        }
        self.set_fault(if fault == Fault::Down {
            Fault::None
        } else {
            fault
        });
        self.settled().await;
    }
}

/// The answer of a [`Fault::Status`].
pub(super) fn fault_answer(code: u16) -> Answer {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (reason, message) = match status.as_u16() {
        400 => (
            "BadRequest",
            "the server rejected our request for an unknown reason",
        ),
        401 => ("Unauthorized", "Unauthorized"),
        403 => ("Forbidden", "forbidden"),
        404 => (
            "NotFound",
            "the server could not find the requested resource",
        ),
        409 => ("Conflict", "the server reported a conflict"),
        410 => ("Expired", "the resource version is too old"),
        429 => (
            "TooManyRequests",
            "Too many requests, please try again later.",
        ),
        500 => ("InternalError", "Internal error occurred: injected fault"),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request",
        ),
        504 => (
            "Timeout",
            "the server was unable to return a response in the time allotted",
        ),
        _ => ("", "injected fault"),
    };
    let mut error = ApiError::new(status, reason, message.to_owned());
    if status == StatusCode::TOO_MANY_REQUESTS {
        error.details = Some(json!({"retryAfterSeconds": 1}));
    }
    let mut answer = error.into_answer();
    if status == StatusCode::TOO_MANY_REQUESTS {
        answer.retry_after = Some(1);
    }
    answer
}

#[cfg(test)]
mod tests {
    use tokio::net::TcpStream;
    use tokio::time::Instant;

    use super::*;
    use crate::apiserver::test_support::*;

    #[tokio::test]
    async fn status_faults_answer_every_request_until_cleared() {
        let server = FakeApiServer::start().await;
        let c = client(&server);
        let nodes: Api<Node> = Api::all(c.clone());
        let leases: Api<Lease> = Api::namespaced(c, "kube-node-lease");
        server.put_node(node_json("n1"));

        server.set_fault(Fault::Status(503));
        let err = api_error(nodes.get("n1").await);
        assert_eq!((err.code, err.reason.as_str()), (503, "ServiceUnavailable"));
        let err = api_error(
            nodes
                .patch_status(
                    "n1",
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {}})),
                )
                .await,
        );
        assert_eq!(err.code, 503);
        server.set_fault(Fault::None);
        nodes.get("n1").await.expect("served again");

        // Limited to leases, nodes stay served.
        server.set_fault_for(Resource::Leases, Fault::Status(429));
        let err = api_error(leases.get("n1").await);
        assert_eq!((err.code, err.reason.as_str()), (429, "TooManyRequests"));
        nodes.get("n1").await.expect("nodes unaffected");
        server.set_fault_for(Resource::Leases, Fault::None);
        let err = api_error(leases.get("n1").await);
        assert_eq!(err.code, 404);

        let statuses: Vec<u16> = server.requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses, [503, 503, 200, 429, 200, 404]);
        // The injected 503 changed nothing.
        assert_eq!(server.resource_version(), 1);
    }

    #[tokio::test]
    async fn down_refuses_connections_then_listens_on_the_same_port() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.put_node(node_json("n1"));
        let addr = server.addr();
        // A keep-alive connection the fault must close.
        nodes.get("n1").await.expect("get");

        server.set_fault(Fault::Down);
        timeout(LIMIT, server.settled()).await.expect("goes down");
        let refused = TcpStream::connect(addr).await.expect_err("refused");
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        let err = nodes.get("n1").await.expect_err("no answer while down");
        assert!(!matches!(err, ::kube::Error::Api(_)), "{err:?}");

        server.set_fault(Fault::None);
        timeout(LIMIT, server.settled()).await.expect("comes back");
        assert_eq!(server.addr(), addr);
        nodes
            .get("n1")
            .await
            .expect("the same client is served again");

        // Only answered requests are logged.
        let statuses: Vec<u16> = server.requests().iter().map(|r| r.status).collect();
        assert_eq!(statuses, [200, 200]);
    }

    #[tokio::test(start_paused = true)]
    async fn slow_answers_after_the_delay_in_tokio_time() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.put_node(node_json("n1"));
        server.set_fault(Fault::Slow(Duration::from_secs(60)));
        let start = Instant::now();
        nodes.get("n1").await.expect("answered late");
        assert!(start.elapsed() >= Duration::from_secs(60));
        let log = server.requests();
        assert_eq!(log.len(), 1);
        assert!(log[0].at >= start);
    }

    #[tokio::test]
    async fn conflict_next_fails_only_the_next_writes() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.put_node(node_json("n1"));
        server.conflict_next(ObjectKey::node("n1"), 2);
        let patch = Patch::Merge(json!({"metadata": {"labels": {"a": "b"}}}));
        let pp = PatchParams::default();
        for _ in 0..2 {
            let err = api_error(nodes.patch("n1", &pp, &patch).await);
            assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
            nodes.get("n1").await.expect("reads are not affected");
        }
        nodes
            .patch("n1", &pp, &patch)
            .await
            .expect("the third write lands");
        assert_eq!(
            server.node("n1").expect("stored")["metadata"]["labels"]["a"],
            "b"
        );
    }

    #[tokio::test]
    async fn a_restart_empty_forgets_everything_and_versions_start_over() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        for i in 0..3 {
            server.put_node(node_json(&format!("n{i}")));
        }
        server.put_lease(json!({"metadata": {"name": "n0", "namespace": "kube-node-lease"}}));
        let addr = server.addr();
        let params = ::kube::api::WatchParams::default().timeout(30);
        let open = {
            let nodes = nodes.clone();
            tokio::spawn(async move {
                use futures_util::StreamExt;
                let stream = nodes.watch(&params, "4").await.expect("the watch starts");
                let mut stream = std::pin::pin!(stream);
                // The restart breaks the watch: it ends without an event.
                while let Some(e) = stream.next().await {
                    if e.is_err() {
                        break;
                    }
                }
            })
        };
        timeout(LIMIT, async {
            while server.watches() == 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the watch is open");
        server.restart_empty().await;
        timeout(LIMIT, open)
            .await
            .expect("the watch broke")
            .unwrap();
        assert_eq!(server.addr(), addr);
        assert!(server.nodes().is_empty() && server.leases().is_empty());
        assert_eq!(server.resource_version(), 0);
        let created = nodes
            .create(&PostParams::default(), &node("n9"))
            .await
            .expect("serving again");
        assert_eq!(rv(&created.metadata), 1);
    }

    #[tokio::test]
    async fn a_wipe_deletes_everything_in_place_and_watches_see_it() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.put_node(node_json("n1"));
        server.put_node(node_json("n2"));
        server.put_pod(pod_json("default", "p", Some("n1"), "web"));
        let from = server.resource_version().to_string();
        server.wipe();
        assert!(server.nodes().is_empty() && server.pods().is_empty());
        let params = ::kube::api::WatchParams::default().timeout(5);
        assert_eq!(
            watch_events(&nodes, &params, &from, 2).await,
            [ev("DELETED", "n1"), ev("DELETED", "n2")]
        );
        assert_eq!(server.resource_version(), 5, "versions go on");
    }

    #[tokio::test]
    async fn throttling_answers_as_priority_and_fairness_does() {
        let server = FakeApiServer::start().await;
        server.set_fault(Fault::Throttled(7));
        let response = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("{}/api/v1/nodes", server.url()))
            .send()
            .await
            .expect("an answer");
        assert_eq!(response.status(), 429);
        assert_eq!(response.headers()["retry-after"], "7");
        assert!(response.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"));
        assert_eq!(
            response.text().await.unwrap(),
            "Too many requests, please try again later.\n"
        );
        // Through the mirror's client, the wait is kept in the Status.
        let connection = nodekeeper::mirror::ApiServer::Master(server.url())
            .connect(LIMIT)
            .await
            .expect("a client");
        let nodes: Api<Node> = Api::all(connection.client);
        let status = api_error(nodes.list(&ListParams::default()).await);
        assert_eq!(status.code, 429);
        assert_eq!(status.details.expect("details").retry_after_seconds, 7);
        assert_eq!(server.requests().len(), 2);
    }
}
