//! Serving the router over TCP or TLS: a connection cap, header-read and handshake timeouts, backed-off accept errors and a bounded graceful shutdown.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

/// How connections are accepted and served.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Connections served at once; further clients wait in the listen backlog.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, counted from
    /// the moment the server waits for them (also between keep-alive requests).
    pub header_read_timeout: Duration,
    /// How long a client may take to finish the TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// After shutdown, how long in-flight requests (watches included) may go on.
    pub shutdown_grace: Duration,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(10),
            tls_handshake_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
        }
    }
}

impl ServeConfig {
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }

    pub fn header_read_timeout(mut self, d: Duration) -> Self {
        self.header_read_timeout = d;
        self
    }

    pub fn tls_handshake_timeout(mut self, d: Duration) -> Self {
        self.tls_handshake_timeout = d;
        self
    }

    pub fn shutdown_grace(mut self, d: Duration) -> Self {
        self.shutdown_grace = d;
        self
    }
}

/// Serves `router` on `listener` (over TLS when `tls` is given) with the
/// default [`ServeConfig`] until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    shutdown: CancellationToken,
) -> io::Result<()> {
    serve_with(listener, router, tls, ServeConfig::default(), shutdown).await
}

/// Serves `router` on `listener` until `shutdown` is cancelled; then stops
/// accepting, lets in-flight requests finish for at most
/// `config.shutdown_grace` and returns.
pub async fn serve_with(
    listener: TcpListener,
    router: Router,
    tls: Option<Arc<rustls::ServerConfig>>,
    config: ServeConfig,
    shutdown: CancellationToken,
) -> io::Result<()> {
    let acceptor = tls.map(TlsAcceptor::from);
    let config = Arc::new(config);
    let permits = Arc::new(Semaphore::new(config.max_connections.max(1)));
    let connections = TaskTracker::new();
    let mut backoff = AcceptBackoff::default();
    loop {
        // Take a slot before accepting, so a full server leaves clients in the backlog.
        let permit = tokio::select! {
            _ = shutdown.cancelled() => break,
            permit = permits.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            _ = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => {
                backoff.reset();
                accepted
            }
            // The client gave up before we got to it; nothing wrong here.
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // EMFILE and friends: accepting again at once would fail again at once.
                let delay = backoff.next_delay();
                tracing::warn!("accepting a connection failed: {e}; retrying in {delay:?}");
                tokio::select! {
                    _ = shutdown.cancelled() => break,
                    _ = tokio::time::sleep(delay) => continue,
                }
            }
        };
        let _ = tcp.set_nodelay(true);
        connections.spawn(serve_connection(
            tcp,
            peer,
            acceptor.clone(),
            router.clone(),
            config.clone(),
            shutdown.clone(),
            permit,
        ));
    }
    // Closing the listener refuses new clients while the old ones drain.
    drop(listener);
    connections.close();
    // Each connection bounds its own drain; this only guards against a bug there.
    let backstop = config.shutdown_grace + Duration::from_secs(1);
    if tokio::time::timeout(backstop, connections.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            "{} connections still open after shutdown; leaving them",
            connections.len()
        );
    }
    Ok(())
}

/// One connection: the TLS handshake if any, then HTTP/1.1 until the client
/// leaves, a timeout closes it, or shutdown's grace runs out.
async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    acceptor: Option<TlsAcceptor>,
    router: Router,
    config: Arc<ServeConfig>,
    shutdown: CancellationToken,
    _permit: OwnedSemaphorePermit,
) {
    let Some(acceptor) = acceptor else {
        return serve_http(tcp, peer, router, &config, &shutdown).await;
    };
    let handshake = tokio::time::timeout(config.tls_handshake_timeout, acceptor.accept(tcp));
    let tls = tokio::select! {
        _ = shutdown.cancelled() => return,
        handshake = handshake => match handshake {
            Ok(Ok(tls)) => tls,
            Ok(Err(e)) => {
                tracing::debug!(%peer, "TLS handshake failed: {e}");
                return;
            }
            Err(_) => {
                tracing::debug!(%peer, "TLS handshake not done within {:?}", config.tls_handshake_timeout);
                return;
            }
        },
    };
    serve_http(tls, peer, router, &config, &shutdown).await
}

async fn serve_http<I>(
    io: I,
    peer: SocketAddr,
    router: Router,
    config: &ServeConfig,
    shutdown: &CancellationToken,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(config.header_read_timeout)
        .serve_connection(TokioIo::new(io), TowerToHyperService::new(router));
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        _ = shutdown.cancelled() => {
            // Idle connections close now; a request in flight may finish, a watch
            // is cut when the grace runs out.
            connection.as_mut().graceful_shutdown();
            match tokio::time::timeout(config.shutdown_grace, connection.as_mut()).await {
                Ok(result) => result,
                Err(_) => {
                    tracing::debug!(%peer, "connection cut at shutdown after {:?}", config.shutdown_grace);
                    return;
                }
            }
        }
    };
    if let Err(e) = result {
        tracing::debug!(%peer, "connection ended: {e}");
    }
}

/// Accept errors that concern one client only (hyper's old `is_connection_error`).
fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Delays between failing accepts: 5 ms doubling to 1 s, as Go's net/http does.
#[derive(Debug, Default)]
struct AcceptBackoff {
    current: Option<Duration>,
}

impl AcceptBackoff {
    const FIRST: Duration = Duration::from_millis(5);
    const MAX: Duration = Duration::from_secs(1);

    fn next_delay(&mut self) -> Duration {
        let delay = match self.current {
            None => Self::FIRST,
            Some(d) => (d * 2).min(Self::MAX),
        };
        self.current = Some(delay);
        delay
    }

    fn reset(&mut self) {
        self.current = None;
    }
}

/// Builds the serving TLS configuration from `--tls-cert-file` (PEM chain,
/// leaf first) and `--tls-private-key-file` (PEM; PKCS#8, PKCS#1 or SEC1).
pub fn tls_config(cert_file: &str, key_file: &str) -> Result<Arc<rustls::ServerConfig>, String> {
    let read = |flag: &str, path: &str| {
        std::fs::read(path).map_err(|e| format!("cannot read {flag} {path}: {e}"))
    };
    let chain = CertificateDer::pem_slice_iter(&read("--tls-cert-file", cert_file)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--tls-cert-file {cert_file} is not a valid PEM certificate: {e}"))?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert-file {cert_file} holds no certificate (expected PEM \"BEGIN CERTIFICATE\" blocks)"
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(&read("--tls-private-key-file", key_file)?).map_err(
        |e| {
            format!(
                "--tls-private-key-file {key_file} holds no usable private key (expected PEM PKCS#8, PKCS#1 or SEC1): {e}"
            )
        },
    )?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration rejected: {e}"))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| {
            format!(
                "--tls-cert-file {cert_file} and --tls-private-key-file {key_file} do not make a usable pair: {e}"
            )
        })?;
    // HTTP/1.1 only: no HTTP/2 stack is built in.
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Refuses to serve on a non-loopback address without both TLS and bearer
/// tokens, unless `--insecure-listen` says so.
pub fn check_listen(
    addr: SocketAddr,
    tls: bool,
    tokens: bool,
    insecure_listen: bool,
) -> Result<(), String> {
    if is_loopback(addr) || (tls && tokens) || insecure_listen {
        return Ok(());
    }
    let missing = match (tls, tokens) {
        (false, false) => {
            "without TLS (give --tls-cert-file and --tls-private-key-file) and without authentication (give --token-file)"
        }
        (false, true) => {
            "without TLS, so bearer tokens would cross the network in clear (give --tls-cert-file and --tls-private-key-file)"
        }
        _ => "without authentication, so anyone who can connect could write (give --token-file)",
    };
    Err(format!(
        "--listen {addr} is not a loopback address and the API would be served {missing}; \
         pass --insecure-listen to serve it like this anyway"
    ))
}

/// 127.0.0.0/8 or ::1 (also as an IPv4-mapped address).
fn is_loopback(addr: SocketAddr) -> bool {
    match addr {
        SocketAddr::V4(a) => a.ip().is_loopback(),
        SocketAddr::V6(a) => {
            a.ip().is_loopback() || a.ip().to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// How long any wait in these tests may take before it fails.
    const DEADLINE: Duration = Duration::from_secs(10);

    fn app() -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/forever",
                get(|| async {
                    std::future::pending::<()>().await;
                    "never"
                }),
            )
    }

    struct Running {
        addr: SocketAddr,
        shutdown: CancellationToken,
        done: tokio::task::JoinHandle<io::Result<()>>,
    }

    async fn start(config: ServeConfig, tls: Option<Arc<rustls::ServerConfig>>) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let done = tokio::spawn(serve_with(listener, app(), tls, config, shutdown.clone()));
        Running {
            addr,
            shutdown,
            done,
        }
    }

    /// Reads until the server closes the connection; the bytes read.
    async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
        let mut seen = Vec::new();
        tokio::time::timeout(DEADLINE, stream.read_to_end(&mut seen))
            .await
            .expect("the server closes the connection")
            .ok();
        seen
    }

    async fn healthz(stream: &mut TcpStream) -> String {
        stream
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0u8; 1024];
        let n = tokio::time::timeout(DEADLINE, stream.read(&mut buf))
            .await
            .expect("an answer")
            .unwrap();
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[tokio::test]
    async fn a_silent_client_is_disconnected_after_the_header_timeout() {
        let server = start(
            ServeConfig::default().header_read_timeout(Duration::from_millis(200)),
            None,
        )
        .await;
        let started = tokio::time::Instant::now();
        let mut silent = TcpStream::connect(server.addr).await.unwrap();
        assert!(read_to_close(&mut silent).await.is_empty());
        assert!(started.elapsed() >= Duration::from_millis(150));

        // A client that sends a partial request is cut too.
        let mut slow = TcpStream::connect(server.addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHo")
            .await
            .unwrap();
        read_to_close(&mut slow).await;

        // An idle keep-alive connection is closed after answering.
        let mut idle = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut idle).await.starts_with("HTTP/1.1 200"));
        read_to_close(&mut idle).await;
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_the_tls_handshake_is_disconnected() {
        let (cert, key) = test_cert_files();
        let tls = tls_config(&cert.1, &key).unwrap();
        let server = start(
            ServeConfig::default().tls_handshake_timeout(Duration::from_millis(200)),
            Some(tls),
        )
        .await;
        let mut silent = TcpStream::connect(server.addr).await.unwrap();
        assert!(read_to_close(&mut silent).await.is_empty());
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
        drop(cert.0);
    }

    #[tokio::test]
    async fn connections_beyond_the_cap_wait_for_a_free_slot() {
        let server = start(ServeConfig::default().max_connections(1), None).await;
        let mut first = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut first).await.starts_with("HTTP/1.1 200"));
        // The kernel completes the handshake, but nobody serves the second one yet.
        let mut second = TcpStream::connect(server.addr).await.unwrap();
        second
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        assert!(
            tokio::time::timeout(Duration::from_millis(300), second.read(&mut buf))
                .await
                .is_err(),
            "the second connection was served while the first held the only slot"
        );
        drop(first);
        let n = tokio::time::timeout(DEADLINE, second.read(&mut buf))
            .await
            .expect("served once the slot is free")
            .unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn shutdown_closes_idle_connections_and_cuts_endless_requests_after_the_grace() {
        let server = start(
            ServeConfig::default().shutdown_grace(Duration::from_millis(300)),
            None,
        )
        .await;
        let mut idle = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut idle).await.starts_with("HTTP/1.1 200"));
        let mut endless = TcpStream::connect(server.addr).await.unwrap();
        endless
            .write_all(b"GET /forever HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        // Let the request reach its handler before shutting down.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let started = tokio::time::Instant::now();
        server.shutdown.cancel();
        read_to_close(&mut idle).await;
        read_to_close(&mut endless).await;
        tokio::time::timeout(DEADLINE, server.done)
            .await
            .expect("serve returns")
            .unwrap()
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(3));
        // The listener is gone.
        assert!(TcpStream::connect(server.addr).await.is_err());
    }

    #[test]
    fn accept_backoff_doubles_to_a_second_and_resets() {
        let mut b = AcceptBackoff::default();
        let delays: Vec<_> = (0..10).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(delays, [5, 10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
        b.reset();
        assert_eq!(b.next_delay(), Duration::from_millis(5));
    }

    #[test]
    fn listen_policy() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        for loopback in [
            "127.0.0.1:8080",
            "127.9.9.9:1",
            "[::1]:8080",
            "[::ffff:127.0.0.1]:1",
        ] {
            assert_eq!(check_listen(addr(loopback), false, false, false), Ok(()));
        }
        let open = addr("0.0.0.0:8080");
        assert_eq!(check_listen(open, true, true, false), Ok(()));
        assert_eq!(check_listen(open, false, false, true), Ok(()));
        let e = check_listen(open, false, false, false).unwrap_err();
        assert!(
            e.contains("--tls-cert-file")
                && e.contains("--token-file")
                && e.contains("--insecure-listen"),
            "{e}"
        );
        let e = check_listen(addr("[::]:80"), false, true, false).unwrap_err();
        assert!(
            e.contains("without TLS") && !e.contains("--token-file"),
            "{e}"
        );
        let e = check_listen(addr("10.0.0.1:80"), true, false, false).unwrap_err();
        assert!(
            e.contains("--token-file") && !e.contains("--tls-cert-file"),
            "{e}"
        );
    }

    /// A self-signed certificate for 127.0.0.1: (dir and cert path, key path).
    fn test_cert_files() -> ((tempfile::TempDir, String), String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cert_path = dir.path().join("tls.crt").to_string_lossy().into_owned();
        let key_path = dir.path().join("tls.key").to_string_lossy().into_owned();
        std::fs::write(&cert_path, cert.pem()).unwrap();
        std::fs::write(&key_path, key.serialize_pem()).unwrap();
        ((dir, cert_path), key_path)
    }

    #[test]
    fn tls_config_errors_name_the_flag_and_file() {
        let ((dir, cert), key) = test_cert_files();
        assert!(tls_config(&cert, &key).is_ok());

        let e = tls_config("/nonexistent/tls.crt", &key).unwrap_err();
        assert!(
            e.starts_with("cannot read --tls-cert-file /nonexistent/tls.crt"),
            "{e}"
        );
        let e = tls_config(&cert, "/nonexistent/tls.key").unwrap_err();
        assert!(e.starts_with("cannot read --tls-private-key-file"), "{e}");

        let junk = dir.path().join("junk").to_string_lossy().into_owned();
        std::fs::write(&junk, "not pem at all\n").unwrap();
        let e = tls_config(&junk, &key).unwrap_err();
        assert!(
            e.contains("--tls-cert-file") && e.contains("holds no certificate"),
            "{e}"
        );
        let e = tls_config(&cert, &junk).unwrap_err();
        assert!(
            e.contains("--tls-private-key-file") && e.contains("no usable private key"),
            "{e}"
        );
        // The key file given as the certificate and the other way round.
        let e = tls_config(&key, &cert).unwrap_err();
        assert!(e.contains("--tls-cert-file"), "{e}");

        // A key that is not the certificate's.
        let other = dir.path().join("other.key").to_string_lossy().into_owned();
        std::fs::write(&other, rcgen::KeyPair::generate().unwrap().serialize_pem()).unwrap();
        let e = tls_config(&cert, &other).unwrap_err();
        assert!(e.contains("do not make a usable pair"), "{e}");
    }
}
