//! The `http` provider against an in-process inventory endpoint.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use nodekeeper::model::{AddressKind, Resources};
use nodekeeper::source::cloud::{anchored, cloud_node_specs, CloudError, CloudNode, CloudProvider};
use nodekeeper::source::provider;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

const TOKEN: &str = "s3cret";

/// What the endpoint serves and what it saw.
#[derive(Default)]
struct Endpoint {
    body: String,
    etag: Option<String>,
    status: Option<StatusCode>,
    /// The `If-None-Match` of every request, in order.
    if_none_match: Vec<Option<String>>,
    not_modified: usize,
}

type Shared = Arc<Mutex<Endpoint>>;

async fn machines(State(state): State<Shared>, headers: HeaderMap) -> Response {
    let mut s = state.lock().unwrap();
    let auth = headers.get("authorization").and_then(|v| v.to_str().ok());
    if auth != Some(&format!("Bearer {TOKEN}")) {
        return (StatusCode::UNAUTHORIZED, "no").into_response();
    }
    let inm = headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    s.if_none_match.push(inm.clone());
    if let Some(status) = s.status {
        return (status, "the inventory database is down").into_response();
    }
    if inm.is_some() && inm == s.etag {
        s.not_modified += 1;
        return StatusCode::NOT_MODIFIED.into_response();
    }
    let mut response = s.body.clone().into_response();
    if let Some(etag) = &s.etag {
        response.headers_mut().insert("etag", etag.parse().unwrap());
    }
    response
}

struct Server {
    state: Shared,
    url: String,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Server {
    async fn start(body: &str, etag: Option<&str>) -> Server {
        Server::start_with(body, etag, None).await
    }

    /// With `tls`, the endpoint speaks HTTPS with that server configuration.
    async fn start_with(
        body: &str,
        etag: Option<&str>,
        tls: Option<Arc<rustls::ServerConfig>>,
    ) -> Server {
        nodekeeper::install_crypto_provider();
        let state: Shared = Arc::new(Mutex::new(Endpoint {
            body: body.into(),
            etag: etag.map(str::to_string),
            ..Endpoint::default()
        }));
        let app = Router::new()
            .route("/machines", get(machines))
            .with_state(state.clone());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = CancellationToken::new();
        let (url, task) = match tls {
            None => (
                format!("http://{addr}/machines"),
                tokio::spawn({
                    let stop = stop.clone();
                    async move {
                        axum::serve(listener, app)
                            .with_graceful_shutdown(stop.cancelled_owned())
                            .await
                            .unwrap();
                    }
                }),
            ),
            Some(config) => (
                format!("https://{addr}/machines"),
                tokio::spawn({
                    let stop = stop.clone();
                    let listener = TlsListener {
                        tcp: listener,
                        acceptor: tokio_rustls::TlsAcceptor::from(config),
                    };
                    async move {
                        axum::serve(listener, app)
                            .with_graceful_shutdown(stop.cancelled_owned())
                            .await
                            .unwrap();
                    }
                }),
            ),
        };
        Server {
            state,
            url,
            stop,
            task,
        }
    }

    fn set(&self, f: impl FnOnce(&mut Endpoint)) {
        f(&mut self.state.lock().unwrap());
    }

    fn seen(&self) -> Vec<Option<String>> {
        self.state.lock().unwrap().if_none_match.clone()
    }

    /// Stops serving and waits until every connection is closed.
    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

/// TLS on top of a TCP listener, for `axum::serve`.
struct TlsListener {
    tcp: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            // A client that refuses our certificate ends its handshake here.
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.tcp.local_addr()
    }
}

/// A CA (written to `dir/ca.pem`) and a server configuration for 127.0.0.1 signed by it.
fn pki(dir: &Path) -> Arc<rustls::ServerConfig> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join("ca.pem"), ca_cert.pem()).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_string()])
        .unwrap()
        .signed_by(&key, &Issuer::from_params(&ca_params, &ca_key))
        .unwrap();
    let key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], key)
    .unwrap();
    Arc::new(config)
}

/// Writes the provider's config (and token) into `dir`.
fn config(dir: &Path, url: &str, token: Option<&str>, extra: &str) -> PathBuf {
    let mut text = format!("url: {url}\ntimeout: 5s\n{extra}");
    if let Some(token) = token {
        std::fs::write(dir.join("token"), format!("{token}\n")).unwrap();
        text.push_str("tokenFile: token\n");
    }
    let path = dir.join("http.yaml");
    std::fs::write(&path, text).unwrap();
    path
}

async fn list(p: &dyn CloudProvider) -> Result<Vec<CloudNode>, String> {
    cloud_node_specs(p, &anchored(".*").unwrap(), Resources::default())
        .await
        .map_err(|e| e.to_string())
}

/// The provider's own answer, its error typed.
async fn listed(p: &dyn CloudProvider) -> Result<usize, CloudError> {
    p.list().await.map(|machines| machines.len())
}

fn names(nodes: &[CloudNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.spec.name.as_str()).collect()
}

const TWO: &str = r#"{"machines": [
  {"name": "edge-1", "address": "10.0.0.1", "zone": "rack-a", "region": "site-1", "cpu": 4, "memory": "8Gi",
   "labels": {"tier": "edge"}},
  {"name": "edge-2", "addresses": [{"type": "InternalIP", "address": "10.0.0.2"}, {"type": "ExternalIP", "address": "203.0.113.2"}],
   "state": "stopped"}
]}"#;

#[tokio::test]
async fn the_schema_with_a_token_and_etags() {
    let server = Server::start(TWO, Some("\"v1\"")).await;
    let dir = tempfile::tempdir().unwrap();
    let p = provider(
        "http",
        Some(&config(dir.path(), &server.url, Some(TOKEN), "")),
    )
    .unwrap();

    let nodes = list(&*p).await.unwrap();
    assert_eq!(names(&nodes), ["edge-1", "edge-2"]);
    let edge1 = &nodes[0].spec;
    assert_eq!(edge1.source, "cloud/http");
    assert_eq!(edge1.provider_id, "http://edge-1");
    assert_eq!(edge1.capacity.cpu_millis, 4000);
    assert_eq!(edge1.capacity.memory_bytes, 8 << 30);
    assert_eq!(edge1.labels["tier"], "edge");
    assert_eq!(edge1.labels["topology.kubernetes.io/zone"], "rack-a");
    assert_eq!(edge1.labels["topology.kubernetes.io/region"], "site-1");
    assert_eq!(nodes[1].spec.addresses[1].kind, AddressKind::ExternalIP);
    assert_eq!(
        nodes[1].state,
        nodekeeper::source::cloud::InstanceState::Stopped
    );

    // Unchanged: the second poll carries the ETag and gets a 304, which
    // stands for the same machines.
    let again = list(&*p).await.unwrap();
    assert_eq!(again, nodes);
    assert_eq!(server.seen(), [None, Some("\"v1\"".to_string())]);
    assert_eq!(server.state.lock().unwrap().not_modified, 1);

    // Changed: a new ETag, a new listing.
    server.set(|s| {
        s.body = r#"[{"name": "edge-1", "address": "10.0.0.1"}]"#.into();
        s.etag = Some("\"v2\"".into());
    });
    assert_eq!(names(&list(&*p).await.unwrap()), ["edge-1"]);
    assert_eq!(server.seen()[2].as_deref(), Some("\"v1\""));
    assert_eq!(names(&list(&*p).await.unwrap()), ["edge-1"]);
    assert_eq!(server.seen()[3].as_deref(), Some("\"v2\""));
    assert_eq!(server.state.lock().unwrap().not_modified, 2);
    server.stop().await;
}

#[tokio::test]
async fn a_refused_or_missing_token_is_a_clear_error() {
    let server = Server::start(TWO, None).await;
    let dir = tempfile::tempdir().unwrap();
    let p = provider(
        "http",
        Some(&config(dir.path(), &server.url, Some("wrong"), "")),
    )
    .unwrap();
    let err = list(&*p).await.unwrap_err();
    assert!(
        err.contains(&server.url) && err.contains("401") && err.contains("was refused"),
        "{err}"
    );
    assert!(
        matches!(listed(&*p).await, Err(CloudError::Auth { status: 401, .. })),
        "a refused token is told from the endpoint's other errors"
    );
    let p = provider("http", Some(&config(dir.path(), &server.url, None, ""))).unwrap();
    let err = list(&*p).await.unwrap_err();
    assert!(
        err.contains("401") && err.contains("set tokenFile"),
        "{err}"
    );
    server.stop().await;
}

#[tokio::test]
async fn malformed_answers_and_server_errors_are_errors() {
    let server = Server::start(TWO, None).await;
    let dir = tempfile::tempdir().unwrap();
    let p = provider(
        "http",
        Some(&config(dir.path(), &server.url, Some(TOKEN), "")),
    )
    .unwrap();
    assert_eq!(list(&*p).await.unwrap().len(), 2);

    server.set(|s| s.body = "{\"machines\": [\n  {\"name\": \"edge-1\",\n".into());
    let err = list(&*p).await.unwrap_err();
    assert!(err.contains(&server.url) && err.contains("line"), "{err}");
    assert!(matches!(listed(&*p).await, Err(CloudError::Parse(_))));

    server.set(|s| s.body = r#"{"machines": [{"name": "edge-1", "cpu": "fast"}]}"#.into());
    let err = list(&*p).await.unwrap_err();
    assert!(err.contains("CPU quantity"), "{err}");

    server.set(|s| s.body = r#"[{"name": "Edge_1"}]"#.into());
    let err = list(&*p).await.unwrap_err();
    assert!(
        err.contains("Edge_1") && err.contains("nothing was changed"),
        "{err}"
    );

    server.set(|s| s.status = Some(StatusCode::SERVICE_UNAVAILABLE));
    let err = list(&*p).await.unwrap_err();
    assert!(
        err.contains("503") && err.contains("inventory database is down"),
        "{err}"
    );
    assert!(matches!(
        listed(&*p).await,
        Err(CloudError::Status { status: 503, .. })
    ));
    server.stop().await;
}

#[tokio::test]
async fn an_oversized_answer_is_refused() {
    let big = format!(
        "[{}]",
        (0..200)
            .map(|i| format!(r#"{{"name": "node-{i}"}}"#))
            .collect::<Vec<_>>()
            .join(",")
    );
    let server = Server::start(&big, None).await;
    let dir = tempfile::tempdir().unwrap();
    let path = config(dir.path(), &server.url, Some(TOKEN), "maxBodyBytes: 1000\n");
    let p = provider("http", Some(&path)).unwrap();
    let err = list(&*p).await.unwrap_err();
    assert!(err.contains("larger than 1000 bytes"), "{err}");
    assert!(matches!(listed(&*p).await, Err(CloudError::Parse(_))));
    server.set(|s| s.body = r#"[{"name": "a"}]"#.into());
    assert_eq!(names(&list(&*p).await.unwrap()), ["a"]);
    server.stop().await;
}

#[tokio::test]
async fn a_server_gone_mid_run_is_an_error_not_an_empty_list() {
    let server = Server::start(TWO, Some("\"v1\"")).await;
    let url = server.url.clone();
    let dir = tempfile::tempdir().unwrap();
    let p = provider("http", Some(&config(dir.path(), &url, Some(TOKEN), ""))).unwrap();
    assert_eq!(list(&*p).await.unwrap().len(), 2);
    server.stop().await;
    let err = list(&*p).await.unwrap_err();
    assert!(err.contains(&url) && err.contains("failed"), "{err}");
    assert!(matches!(listed(&*p).await, Err(CloudError::Network(_))));
}

#[tokio::test]
async fn https_is_trusted_through_the_configured_ca_only() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start_with(TWO, None, Some(pki(dir.path()))).await;
    let path = config(dir.path(), &server.url, Some(TOKEN), "caFile: ca.pem\n");
    let p = provider("http", Some(&path)).unwrap();
    assert_eq!(names(&list(&*p).await.unwrap()), ["edge-1", "edge-2"]);

    // Without the CA, the system's roots do not know this server.
    let path = config(dir.path(), &server.url, Some(TOKEN), "");
    let p = provider("http", Some(&path)).unwrap();
    let err = list(&*p).await.unwrap_err();
    assert!(
        err.contains(&server.url) && err.to_lowercase().contains("certificate"),
        "{err}"
    );
    server.stop().await;
}
