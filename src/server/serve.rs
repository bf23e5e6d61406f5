//! Serving the router over TCP or TLS, in HTTP/1.1 and HTTP/2 (ALPN `h2`
//! over TLS, prior knowledge on plain connections): a connection cap that
//! closes the longest-idle connection to make room, header-read, idle and
//! handshake timeouts, HTTP/2 pings and stream limits, backed-off accept
//! errors and a bounded graceful shutdown.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::connections::{Connection, Connections, Sending, Slot, WatchedIo};
use super::handoff::{self, KubeletHandoff, Movable, Prefixed, Rebind};
use super::identity::Caller;
use super::reload::Reloadable;
use super::x509::{self, ClientCa, ClientCert};
use crate::backoff::Backoff;
use crate::metrics::Metrics;

/// How connections are accepted and served.
#[derive(Clone)]
pub struct ServeConfig {
    /// Connections open at once. At the cap, the connection idle the
    /// longest is closed to make room for a new one; when none is idle, new
    /// clients wait in the listen backlog.
    pub max_connections: usize,
    /// How long a client may take to send a request's headers, counted
    /// from their first byte (for a new connection, from the connect).
    pub header_read_timeout: Duration,
    /// How long a kept-alive HTTP/1.1 connection may sit idle between
    /// requests. (HTTP/2 connections stay while they answer pings.)
    pub idle_timeout: Duration,
    /// How long a client may take to finish the TLS handshake.
    pub tls_handshake_timeout: Duration,
    /// After shutdown, how long in-flight requests (watches included) may go on.
    pub shutdown_grace: Duration,
    /// How long a client may take nothing of a response it was given (its
    /// HTTP/2 window or its socket full) before its connection is closed.
    pub stall_timeout: Duration,
    pub http2: Http2Config,
    /// Where connection counts go, if anywhere.
    pub metrics: Option<Arc<Metrics>>,
    /// Where kubelets' connections are served, if not where they were
    /// accepted (`handoff`).
    pub kubelets: Option<KubeletHandoff>,
    /// The CA bundle client certificates are verified against
    /// (`--client-ca-file`), once per TLS connection.
    pub client_ca: Option<Reloadable<ClientCa>>,
}

/// HTTP/2 settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2Config {
    /// Requests (streams) one connection may have in flight.
    pub max_concurrent_streams: u32,
    /// A ping after this long without a frame from the client...
    pub keep_alive_interval: Duration,
    /// ...which must be answered within this long, or the connection closes.
    pub keep_alive_timeout: Duration,
    /// The largest header block a client may send, in bytes.
    pub max_header_list_size: u32,
}

impl Default for Http2Config {
    fn default() -> Self {
        Http2Config {
            // Go's (and so kube-apiserver's) default.
            max_concurrent_streams: 250,
            keep_alive_interval: Duration::from_secs(30),
            keep_alive_timeout: Duration::from_secs(20),
            max_header_list_size: 64 << 10,
        }
    }
}

impl std::fmt::Debug for ServeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServeConfig")
            .field("max_connections", &self.max_connections)
            .field("header_read_timeout", &self.header_read_timeout)
            .field("idle_timeout", &self.idle_timeout)
            .field("tls_handshake_timeout", &self.tls_handshake_timeout)
            .field("shutdown_grace", &self.shutdown_grace)
            .field("stall_timeout", &self.stall_timeout)
            .field("http2", &self.http2)
            .field("kubelets", &self.kubelets)
            .field("client_ca", &self.client_ca.is_some())
            .finish_non_exhaustive()
    }
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            max_connections: 4096,
            header_read_timeout: Duration::from_secs(10),
            // Longer than a kubelet's 10s between Lease renewals, so its one
            // connection stays open; shorter than most clients' pools keep one.
            idle_timeout: Duration::from_secs(90),
            tls_handshake_timeout: Duration::from_secs(10),
            shutdown_grace: Duration::from_secs(5),
            // Half kube-apiserver's one-minute request timeout: a reader that
            // takes nothing for this long holds its budget for nobody.
            stall_timeout: Duration::from_secs(30),
            http2: Http2Config::default(),
            metrics: None,
            kubelets: None,
            client_ca: None,
        }
    }
}

impl ServeConfig {
    pub fn max_connections(mut self, n: usize) -> Self {
        self.max_connections = n;
        self
    }

    pub fn kubelets(mut self, kubelets: KubeletHandoff) -> Self {
        self.kubelets = Some(kubelets);
        self
    }

    pub fn client_ca(mut self, client_ca: Reloadable<ClientCa>) -> Self {
        self.client_ca = Some(client_ca);
        self
    }

    pub fn metrics(mut self, metrics: Arc<Metrics>) -> Self {
        self.metrics = Some(metrics);
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
    let connections = Connections::new(config.max_connections, config.metrics.clone());
    let config = Arc::new(config);
    let tasks = TaskTracker::new();
    tasks.spawn(close_stalled(
        connections.clone(),
        config.stall_timeout,
        shutdown.clone(),
    ));
    let mut backoff = ACCEPT_BACKOFF.retries();
    loop {
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
        // Serve it once there is room; meanwhile nothing else is accepted,
        // so a server whose every connection is busy leaves new clients in
        // the backlog.
        tokio::select! {
            _ = shutdown.cancelled() => break,
            _ = connections.room() => {}
        }
        let conn = Accepted {
            peer,
            router: router.clone(),
            config: config.clone(),
            shutdown: shutdown.clone(),
            slot: connections.admit(),
            tasks: tasks.clone(),
        };
        tasks.spawn(serve_connection(tcp, acceptor.clone(), conn));
    }
    // Closing the listener refuses new clients while the old ones drain.
    drop(listener);
    tasks.close();
    // Each connection bounds its own drain; this only guards against a bug there.
    let backstop = config.shutdown_grace + Duration::from_secs(1);
    if tokio::time::timeout(backstop, tasks.wait()).await.is_err() {
        tracing::warn!(
            "{} connections still open after shutdown; leaving them",
            tasks.len()
        );
    }
    Ok(())
}

/// Closes the connections that took nothing of their responses for
/// `limit`, looking every second (at a tenth of it, if shorter).
async fn close_stalled(
    connections: Arc<Connections>,
    limit: Duration,
    shutdown: CancellationToken,
) {
    let mut ticks = tokio::time::interval((limit / 10).min(Duration::from_secs(1)));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        connections.close_stalled(limit);
    }
}

/// The HTTP/2 connection preface a client speaking it with prior knowledge
/// sends first.
const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// An accepted connection's parts, moved into the task that serves it.
struct Accepted {
    peer: SocketAddr,
    router: Router,
    config: Arc<ServeConfig>,
    shutdown: CancellationToken,
    slot: Slot,
    tasks: TaskTracker,
}

impl Accepted {
    /// What `work` gives, unless the server shuts down or the connection
    /// is evicted first.
    async fn until_closed<T>(&self, work: impl Future<Output = T>) -> Option<T> {
        tokio::select! {
            _ = self.shutdown.cancelled() => None,
            _ = self.slot.close.cancelled() => None,
            done = work => Some(done),
        }
    }

    /// Serves the connection on this runtime. Boxed: each connection's
    /// task then holds only the state of the protocol and transport it uses.
    async fn serve<I>(self, io: I, http2: bool, client: Option<ClientCert>)
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Box::pin(serve_http(io, http2, self, client)).await
    }

    /// Serves a kubelet's connection on the controller's runtime
    /// (`handoff`), as a task of `tasks` (for the shutdown's drain) that
    /// holds all of its state there.
    fn hand_over<I>(
        self,
        kubelets: &KubeletHandoff,
        mut io: I,
        http2: bool,
        client: Option<ClientCert>,
    ) where
        I: AsyncRead + AsyncWrite + Rebind + Unpin + Send + 'static,
    {
        let tasks = self.tasks.clone();
        let task = tasks.track_future(async move {
            if let Err(e) = io.rebind() {
                tracing::debug!(peer = %self.peer, "cannot move a kubelet's connection: {e}");
                return;
            }
            serve_http(io, http2, self, client).await
        });
        kubelets.runtime.spawn(task);
    }
}

/// One connection: the TLS handshake if any, the protocol (ALPN, or the
/// HTTP/2 preface on a plain connection), then requests until the client
/// leaves, a timeout closes it, it is evicted, or shutdown's grace runs out.
async fn serve_connection(tcp: TcpStream, acceptor: Option<TlsAcceptor>, conn: Accepted) {
    let Some(acceptor) = acceptor else {
        // hyper-util's auto builder sniffs the preface too, but without a
        // timeout: a silent client would hold its slot for ever.
        let sniffed = sniff_http2(&tcp, conn.config.header_read_timeout);
        let Some(Some(http2)) = conn.until_closed(sniffed).await else {
            return;
        };
        let tcp = Movable::new(tcp);
        if http2 {
            return conn.serve(tcp, true, None).await;
        }
        return Box::pin(serve_http1(tcp, conn, None)).await;
    };
    let limit = conn.config.tls_handshake_timeout;
    let handshake = tokio::time::timeout(limit, acceptor.accept(Movable::new(tcp)));
    let tls = match conn.until_closed(handshake).await {
        None => return,
        Some(Ok(Ok(tls))) => tls,
        Some(Ok(Err(e))) => {
            tracing::debug!(peer = %conn.peer, "TLS handshake failed: {e}");
            return;
        }
        Some(Err(_)) => {
            tracing::debug!(peer = %conn.peer, "TLS handshake not done within {limit:?}");
            return;
        }
    };
    let http2 = tls.get_ref().1.alpn_protocol() == Some(b"h2");
    // Verified once, here, against the bundle current now.
    let client = match (&conn.config.client_ca, tls.get_ref().1.peer_certificates()) {
        (Some(ca), Some(chain)) => Some(ca.current().identify(chain)),
        _ => None,
    };
    if !http2 {
        return Box::pin(serve_http1(tls, conn, client)).await;
    }
    // A node's certificate makes the whole connection the node's: it
    // moves to the controller's runtime as an HTTP/1 kubelet's does.
    match conn.config.kubelets.clone() {
        Some(kubelets) if names_a_node(client.as_ref()) => {
            conn.hand_over(&kubelets, tls, true, client)
        }
        _ => conn.serve(tls, true, client).await,
    }
}

/// Whether a connection's client certificate names a node
/// (`system:node:NAME` in `system:nodes`).
fn names_a_node(client: Option<&ClientCert>) -> bool {
    matches!(client, Some(ClientCert::Verified(p)) if matches!(p.caller(), Caller::Node(_)))
}

/// An HTTP/1 connection: served here, or, when its first request is a
/// kubelet's, on the controller's runtime.
async fn serve_http1<I>(mut io: I, conn: Accepted, client: Option<ClientCert>)
where
    I: AsyncRead + AsyncWrite + Rebind + Unpin + Send + 'static,
{
    let Some(kubelets) = conn.config.kubelets.clone() else {
        return conn.serve(io, false, client).await;
    };
    // Within the header timeout, as hyper would read it; the head is then
    // served again from memory.
    let limit = conn.config.header_read_timeout;
    let read = tokio::time::timeout(limit, handoff::read_first_head(&mut io));
    let head = match conn.until_closed(read).await {
        Some(Ok(Ok(Some(head)))) => head,
        None | Some(Ok(Ok(None))) | Some(Ok(Err(_))) => return,
        Some(Err(_)) => {
            tracing::debug!(peer = %conn.peer, "no request head within {limit:?}");
            return;
        }
    };
    let certified = match &client {
        Some(ClientCert::Verified(p)) => Some(p),
        _ => None,
    };
    let kubelet = handoff::classify(&head, certified, &*kubelets.is_kubelet);
    let io = Prefixed::new(head, io);
    if kubelet {
        conn.hand_over(&kubelets, io, false, client)
    } else {
        conn.serve(io, false, client).await
    }
}

/// Whether a plain connection opens with the HTTP/2 preface; `None` if it
/// closed or sent nothing decisive within `timeout`.
async fn sniff_http2(tcp: &TcpStream, timeout: Duration) -> Option<bool> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = [0u8; H2_PREFACE.len()];
    loop {
        let n = tokio::time::timeout_at(deadline, tcp.peek(&mut buf))
            .await
            .ok()?
            .ok()?;
        if n == 0 {
            return None;
        }
        if buf[..n] != H2_PREFACE[..n] {
            return Some(false);
        }
        if n == H2_PREFACE.len() {
            return Some(true);
        }
        // A partial preface: peeking again would return the same bytes at
        // once, so give the rest a moment to arrive.
        tokio::time::timeout_at(deadline, tokio::time::sleep(Duration::from_millis(10)))
            .await
            .ok()?;
    }
}

/// A served connection of either protocol.
trait ServedConnection: Future<Output = Result<(), hyper::Error>> {
    fn graceful_shutdown(self: Pin<&mut Self>);
}

impl<I, S> ServedConnection for hyper::server::conn::http1::Connection<I, S>
where
    S: hyper::service::HttpService<hyper::body::Incoming>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    S::ResBody: 'static,
    <S::ResBody as hyper::body::Body>::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http1::Connection::graceful_shutdown(self)
    }
}

impl<I, S, B> ServedConnection for hyper::server::conn::http2::Connection<I, S, TokioExecutor>
where
    S: hyper::service::HttpService<hyper::body::Incoming, ResBody = B>,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    I: hyper::rt::Read + hyper::rt::Write + Unpin,
    B: hyper::body::Body + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    TokioExecutor: hyper::rt::bounds::Http2ServerConnExec<S::Future, B>,
{
    fn graceful_shutdown(self: Pin<&mut Self>) {
        hyper::server::conn::http2::Connection::graceful_shutdown(self)
    }
}

/// A connection's byte stream, whatever it is under HTTP (TCP, TLS, with a
/// head already read or not), behind one type: hyper's and h2's server is
/// then compiled once, not once per kind of stream (about 95 kB each). One
/// allocation per connection; the calls are indirect, beside a system call
/// each.
trait Stream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<I: AsyncRead + AsyncWrite + Unpin + Send> Stream for I {}

async fn serve_http<I>(io: I, http2: bool, conn: Accepted, client: Option<ClientCert>)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve_stream(Box::new(io), http2, conn, client).await
}

async fn serve_stream(
    io: Box<dyn Stream>,
    http2: bool,
    conn: Accepted,
    client: Option<ClientCert>,
) {
    let Accepted {
        peer,
        router,
        config,
        shutdown,
        slot,
        ..
    } = conn;
    let connection: Arc<Connection> = Arc::clone(&slot);
    let io = TokioIo::new(WatchedIo::new(
        io,
        connection.clone(),
        config.header_read_timeout,
        config.idle_timeout,
    ));
    let service = counted_service(router, connection.clone(), client);
    if http2 {
        connection.set_http2();
        let h2 = &config.http2;
        let served = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .max_concurrent_streams(h2.max_concurrent_streams)
            .keep_alive_interval(h2.keep_alive_interval)
            .keep_alive_timeout(h2.keep_alive_timeout)
            .max_header_list_size(h2.max_header_list_size)
            .serve_connection(io, service);
        Box::pin(drive(served, peer, &config, &shutdown, &connection)).await
    } else {
        let served = hyper::server::conn::http1::Builder::new()
            .timer(TokioTimer::new())
            // `WatchedIo` keeps the header and idle deadlines (hyper's own
            // header timer would also run while idle, cutting kept-alive
            // connections after the header timeout).
            .header_read_timeout(None)
            .serve_connection(io, service);
        Box::pin(drive(served, peer, &config, &shutdown, &connection)).await
    }
}

/// The router as a hyper service that counts each request on its
/// connection until the response body is sent.
fn counted_service(
    router: Router,
    connection: Arc<Connection>,
    client: Option<ClientCert>,
) -> impl hyper::service::Service<
    hyper::Request<hyper::body::Incoming>,
    Response = axum::response::Response,
    Error = std::convert::Infallible,
    Future = impl Future<Output = Result<axum::response::Response, std::convert::Infallible>> + Send,
> + Clone {
    let router = TowerToHyperService::new(router);
    let id = connection.id();
    hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
        request.extensions_mut().insert(id);
        if let Some(client) = &client {
            request.extensions_mut().insert(client.clone());
        }
        let activity = connection.begin_request();
        let answer = hyper::service::Service::call(&router, request);
        async move {
            let response = answer.await?;
            Ok(response.map(|body| axum::body::Body::new(Sending::new(body, activity))))
        }
    })
}

/// Polls a connection to its end, closing it gracefully when it is evicted
/// or the server shuts down. (Its deadlines are kept by [`WatchedIo`].)
async fn drive<C: ServedConnection>(
    served: C,
    peer: SocketAddr,
    config: &ServeConfig,
    shutdown: &CancellationToken,
    connection: &Connection,
) {
    let mut served = std::pin::pin!(served);
    let result = tokio::select! {
        result = served.as_mut() => result,
        // Evicted while idle: the same as an idle timeout.
        _ = connection.close.cancelled() => close_gracefully(served.as_mut(), config.shutdown_grace, peer).await,
        // Idle connections close now; a request in flight may finish, a
        // watch is cut when the grace runs out.
        _ = shutdown.cancelled() => close_gracefully(served.as_mut(), config.shutdown_grace, peer).await,
    };
    if let Err(e) = result {
        tracing::debug!(%peer, "connection ended: {e}");
    }
}

async fn close_gracefully<C: ServedConnection>(
    mut served: Pin<&mut C>,
    grace: Duration,
    peer: SocketAddr,
) -> Result<(), hyper::Error> {
    served.as_mut().graceful_shutdown();
    match tokio::time::timeout(grace, served).await {
        Ok(result) => result,
        Err(_) => {
            tracing::debug!(%peer, "connection cut after {grace:?}");
            Ok(())
        }
    }
}

/// Accept errors that concern one client only (hyper's old `is_connection_error`):
/// an accept loop goes on at once after one.
pub fn is_connection_error(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    )
}

/// Delays between failing accepts: 5 ms doubling to 1 s, as Go's net/http does.
const ACCEPT_BACKOFF: Backoff =
    Backoff::exponential(Duration::from_millis(5), Duration::from_secs(1));

/// Builds the serving TLS configuration from `--tls-cert-file` (PEM chain,
/// leaf first) and `--tls-private-key-file` (PEM; PKCS#8, PKCS#1 or SEC1).
pub fn tls_config(cert_file: &str, key_file: &str) -> Result<Arc<rustls::ServerConfig>, String> {
    serving_tls(cert_file, key_file, false).map(|(config, _)| config)
}

/// The serving TLS configuration, with the certificate as a value to swap
/// when its files change (`reload`); with `client_certs`, a client
/// certificate is asked for, not required (`x509`).
pub fn serving_tls(
    cert_file: &str,
    key_file: &str,
    client_certs: bool,
) -> Result<
    (
        Arc<rustls::ServerConfig>,
        Reloadable<rustls::sign::CertifiedKey>,
    ),
    String,
> {
    // Read once at start-up, before the server runs.
    #[allow(clippy::disallowed_methods)]
    let read = |flag: &str, path: &str| {
        std::fs::read(path).map_err(|e| format!("cannot read {flag} {path}: {e}"))
    };
    let key = x509::certified_key(
        &read("--tls-cert-file", cert_file)?,
        cert_file,
        &read("--tls-private-key-file", key_file)?,
        key_file,
    )?;
    let serving = Reloadable::new(key);
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS configuration rejected: {e}"))?;
    let builder = if client_certs {
        builder.with_client_cert_verifier(x509::RequestClientCert::new())
    } else {
        builder.with_no_client_auth()
    };
    let mut config = builder.with_cert_resolver(Arc::new(x509::ServingCert(serving.clone())));
    // HTTP/2 first, as kube-apiserver offers it.
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok((Arc::new(config), serving))
}

/// Why the API may not be served on a non-loopback address as configured:
/// what is missing, and the flags that would supply it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InsecureListen {
    #[error(
        "--listen {addr} is not a loopback address and the API would be served without TLS \
         (give --tls-cert-file and --tls-private-key-file) and without authentication (give \
         --token-file); pass --insecure-listen to serve it like this anyway"
    )]
    NoTlsNoTokens { addr: SocketAddr },
    #[error(
        "--listen {addr} is not a loopback address and the API would be served without TLS, so \
         bearer tokens would cross the network in clear (give --tls-cert-file and \
         --tls-private-key-file); pass --insecure-listen to serve it like this anyway"
    )]
    NoTls { addr: SocketAddr },
    #[error(
        "--listen {addr} is not a loopback address and the API would be served without \
         authentication, so anyone who can connect could write (give --token-file); pass \
         --insecure-listen to serve it like this anyway"
    )]
    NoTokens { addr: SocketAddr },
}

/// Refuses to serve on a non-loopback address without both TLS and bearer
/// tokens, unless `--insecure-listen` says so.
pub fn check_listen(
    addr: SocketAddr,
    tls: bool,
    tokens: bool,
    insecure_listen: bool,
) -> Result<(), InsecureListen> {
    if is_loopback(addr) || (tls && tokens) || insecure_listen {
        return Ok(());
    }
    Err(match (tls, tokens) {
        (false, false) => InsecureListen::NoTlsNoTokens { addr },
        (false, true) => InsecureListen::NoTls { addr },
        _ => InsecureListen::NoTokens { addr },
    })
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
// Tests write and read their fixtures with std::fs: blocking a test's own
// runtime stalls nothing else.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;
    use axum::routing::get;
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// How long any wait in these tests may take before it fails.
    const DEADLINE: Duration = Duration::from_secs(10);

    /// `/forever` adds a permit to `entered` when a request reaches it.
    fn app(entered: Arc<tokio::sync::Semaphore>) -> Router {
        Router::new()
            .route("/healthz", get(|| async { "ok" }))
            .route("/big", get(|| async { vec![b'x'; 1 << 20] }))
            .route(
                "/forever",
                get(move || async move {
                    entered.add_permits(1);
                    std::future::pending::<()>().await;
                    "never"
                }),
            )
    }

    struct Running {
        addr: SocketAddr,
        shutdown: CancellationToken,
        done: tokio::task::JoinHandle<io::Result<()>>,
        forever_entered: Arc<tokio::sync::Semaphore>,
    }

    impl Running {
        /// Waits until a request has reached `/forever`.
        async fn forever_reached(&self) {
            tokio::time::timeout(DEADLINE, self.forever_entered.acquire())
                .await
                .expect("the request reaches its handler")
                .unwrap()
                .forget();
        }
    }

    async fn start(config: ServeConfig, tls: Option<Arc<rustls::ServerConfig>>) -> Running {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let forever_entered = Arc::new(tokio::sync::Semaphore::new(0));
        let router = app(forever_entered.clone());
        let done = tokio::spawn(serve_with(listener, router, tls, config, shutdown.clone()));
        Running {
            addr,
            shutdown,
            done,
            forever_entered,
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

    /// Two pipelined requests on one connection, the second closing it:
    /// everything the server answered.
    async fn two_requests<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, first: &str) -> String {
        let requests = format!(
            "{first} HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbodyGET /again HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
        );
        stream.write_all(requests.as_bytes()).await.unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(DEADLINE, stream.read_to_end(&mut answer))
            .await
            .expect("the server answers and closes")
            .ok();
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test]
    async fn a_kubelets_connection_is_served_on_the_kubelets_runtime_and_a_readers_here() {
        // Another runtime stands for the controller's.
        let controller = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("controller-thread")
            .enable_all()
            .build()
            .unwrap();
        let router = Router::new().fallback(|body: String| async move {
            format!(
                "[{} {body}]",
                std::thread::current().name().unwrap_or("unnamed")
            )
        });
        let config = ServeConfig::default().kubelets(KubeletHandoff {
            runtime: controller.handle().clone(),
            is_kubelet: Arc::new(handoff::is_heartbeat),
        });
        let (cert, key) = test_cert_files();
        for tls in [None, Some(tls_config(&cert.1, &key).unwrap())] {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let shutdown = CancellationToken::new();
            let done = tokio::spawn(serve_with(
                listener,
                router.clone(),
                tls.clone(),
                config.clone(),
                shutdown.clone(),
            ));
            let connector = tls.is_some().then(|| {
                let mut roots = rustls::RootCertStore::empty();
                let pem = std::fs::read(&cert.1).unwrap();
                for c in CertificateDer::pem_slice_iter(&pem) {
                    roots.add(c.unwrap()).unwrap();
                }
                let provider = Arc::new(rustls::crypto::ring::default_provider());
                let mut client = rustls::ClientConfig::builder_with_provider(provider)
                    .with_safe_default_protocol_versions()
                    .unwrap()
                    .with_root_certificates(roots)
                    .with_no_client_auth();
                client.alpn_protocols = vec![b"http/1.1".to_vec()];
                tokio_rustls::TlsConnector::from(Arc::new(client))
            });
            let ask = |first: &'static str| {
                let connector = connector.clone();
                async move {
                    let tcp = TcpStream::connect(addr).await.unwrap();
                    match connector {
                        None => two_requests(tcp, first).await,
                        Some(connector) => {
                            let name =
                                rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                            two_requests(connector.connect(name, tcp).await.unwrap(), first).await
                        }
                    }
                }
            };
            // A heartbeat first: both requests, the body of the first
            // included, are answered on the controller's thread.
            let kubelet = ask("PATCH /api/v1/nodes/a/status").await;
            assert_eq!(
                kubelet.matches("[controller-thread body]").count()
                    + kubelet.matches("[controller-thread ]").count(),
                2,
                "{kubelet}"
            );
            // A read first: the connection stays where it was accepted.
            let reader = ask("GET /api/v1/nodes").await;
            assert!(
                reader.contains(" body]") && !reader.contains("controller-thread"),
                "{reader}"
            );
            shutdown.cancel();
            done.await.unwrap().unwrap();
        }
        controller.shutdown_background();
    }

    /// A CA for client certificates: its certificate (PEM), key and params.
    struct TestCa(String, rcgen::KeyPair, rcgen::CertificateParams);

    fn test_ca() -> TestCa {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let pem = params.self_signed(&key).unwrap().pem();
        TestCa(pem, key, params)
    }

    /// A client certificate `CN=cn, O=o` from `ca`, as a rustls client
    /// config offering it (ALPN `alpn`), trusting the server's `server_pem`.
    fn client_with_cert(
        ca: &TestCa,
        cn: &str,
        o: &str,
        server_pem: &str,
        alpn: &[u8],
    ) -> tokio_rustls::TlsConnector {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, o);
        let issuer = rcgen::Issuer::from_params(&ca.2, &ca.1);
        let cert = params.signed_by(&key, &issuer).unwrap();
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(server_pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
            )
            .unwrap();
        config.alpn_protocols = vec![alpn.to_vec()];
        tokio_rustls::TlsConnector::from(Arc::new(config))
    }

    /// With `--client-ca-file`: a node's certificate authenticates it and
    /// moves its connection to the controller's runtime from the first
    /// request, over HTTP/1.1 and HTTP/2; another CA's certificate is a 401;
    /// a replaced CA bundle and a rotated serving certificate apply to the
    /// next connections.
    #[tokio::test]
    async fn a_node_certificate_authenticates_and_hands_its_connection_to_the_controller() {
        let controller = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("controller-thread")
            .enable_all()
            .build()
            .unwrap();
        let routes = Router::new().fallback(|who: super::super::Principal| async move {
            format!(
                "[{} {}]",
                std::thread::current().name().unwrap_or("unnamed"),
                who.user().name
            )
        });
        let authn = super::super::Authn {
            tokens: None,
            client_certs: true,
            bootstrap: None,
        };
        let router = super::super::harden(routes, authn);
        let ca = test_ca();
        let bundle = Reloadable::new(ClientCa::parse(ca.0.as_bytes(), "ca.pem").unwrap());
        let config = ServeConfig::default()
            .client_ca(bundle.clone())
            .kubelets(KubeletHandoff {
                runtime: controller.handle().clone(),
                is_kubelet: Arc::new(|r: &handoff::FirstRequest<'_>| {
                    r.client
                        .is_some_and(|p| matches!(p.caller(), Caller::Node(_)))
                }),
            });
        let ((_dir, cert), key) = test_cert_files();
        let (tls, serving) = serving_tls(&cert, &key, true).unwrap();
        let server_pem = std::fs::read_to_string(&cert).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shutdown = CancellationToken::new();
        let done = tokio::spawn(serve_with(
            listener,
            router,
            Some(tls),
            config,
            shutdown.clone(),
        ));
        let name = || rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let http1 = |connector: tokio_rustls::TlsConnector| async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let tls = connector.connect(name(), tcp).await.unwrap();
            two_requests(tls, "GET /api/v1/nodes").await
        };

        let node = client_with_cert(
            &ca,
            "system:node:a",
            "system:nodes",
            &server_pem,
            b"http/1.1",
        );
        // (The second request, `/again`, is no path a node may read: 403.)
        let answer = http1(node.clone()).await;
        assert!(
            answer.contains("[controller-thread system:node:a]") && answer.contains(" 403 "),
            "{answer}"
        );
        // Over HTTP/2 too, every stream.
        let h2 = client_with_cert(&ca, "system:node:a", "system:nodes", &server_pem, b"h2");
        let tcp = TcpStream::connect(addr).await.unwrap();
        let answers = h2_get(
            h2.connect(name(), tcp).await.unwrap(),
            &["/api/v1/nodes", "/api/v1/pods"],
        )
        .await;
        for (code, body) in &answers {
            assert_eq!(
                (*code, body.as_str()),
                (200, "[controller-thread system:node:a]")
            );
        }
        // An operator's certificate: authenticated, served where accepted.
        let operator = client_with_cert(&ca, "alice", "admins", &server_pem, b"http/1.1");
        let answer = http1(operator).await;
        assert!(
            answer.contains(" alice]") && !answer.contains("controller-thread"),
            "{answer}"
        );
        // Another CA's certificate authenticates nobody: 401, not a broken handshake.
        let stranger = client_with_cert(
            &test_ca(),
            "system:node:a",
            "system:nodes",
            &server_pem,
            b"http/1.1",
        );
        let answer = http1(stranger).await;
        assert!(answer.starts_with("HTTP/1.1 401 "), "{answer}");

        // The CA bundle replaced: a's old certificate no longer verifies.
        let new_ca = test_ca();
        bundle.set(ClientCa::parse(new_ca.0.as_bytes(), "ca.pem").unwrap());
        assert!(http1(node).await.starts_with("HTTP/1.1 401 "));
        let renewed = client_with_cert(
            &new_ca,
            "system:node:a",
            "system:nodes",
            &server_pem,
            b"http/1.1",
        );
        assert!(http1(renewed)
            .await
            .contains("[controller-thread system:node:a]"));

        // The serving certificate rotated: clients that trust only the new one connect.
        let ((_dir2, new_cert), new_key) = test_cert_files();
        let new_pem = std::fs::read_to_string(&new_cert).unwrap();
        let pair = x509::certified_key(
            new_pem.as_bytes(),
            &new_cert,
            &std::fs::read(&new_key).unwrap(),
            &new_key,
        )
        .unwrap();
        serving.set(pair);
        let trusting_new = client_with_cert(
            &new_ca,
            "system:node:a",
            "system:nodes",
            &new_pem,
            b"http/1.1",
        );
        assert!(http1(trusting_new)
            .await
            .contains("[controller-thread system:node:a]"));
        let trusting_old = client_with_cert(
            &new_ca,
            "system:node:a",
            "system:nodes",
            &server_pem,
            b"http/1.1",
        );
        let tcp = TcpStream::connect(addr).await.unwrap();
        assert!(trusting_old.connect(name(), tcp).await.is_err());

        shutdown.cancel();
        done.await.unwrap().unwrap();
        controller.shutdown_background();
    }

    #[tokio::test]
    async fn a_silent_client_is_disconnected_after_the_header_timeout() {
        let server = start(
            ServeConfig {
                header_read_timeout: Duration::from_millis(200),
                ..ServeConfig::default()
            },
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

        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_the_tls_handshake_is_disconnected() {
        let (cert, key) = test_cert_files();
        let tls = tls_config(&cert.1, &key).unwrap();
        let server = start(
            ServeConfig {
                tls_handshake_timeout: Duration::from_millis(200),
                ..ServeConfig::default()
            },
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
    async fn at_the_cap_an_idle_connection_makes_room_and_busy_ones_do_not() {
        let server = start(ServeConfig::default().max_connections(1), None).await;
        let mut idle = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut idle).await.starts_with("HTTP/1.1 200"));
        // The only slot is idle: the newcomer gets it, the idle one is closed.
        let mut second = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut second).await.starts_with("HTTP/1.1 200"));
        assert!(read_to_close(&mut idle).await.is_empty());

        // A busy connection keeps its slot; the next client waits for it.
        second
            .write_all(b"GET /forever HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        server.forever_reached().await;
        let mut third = TcpStream::connect(server.addr).await.unwrap();
        third
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 64];
        let early = tokio::time::timeout(Duration::from_millis(300), third.read(&mut buf)).await;
        assert!(
            early.is_err(),
            "the third connection was served while a busy one held the only slot: {early:?} {:?}",
            String::from_utf8_lossy(&buf)
        );
        drop(second);
        let n = tokio::time::timeout(DEADLINE, third.read(&mut buf))
            .await
            .expect("served once the slot is free")
            .unwrap();
        assert!(buf[..n].starts_with(b"HTTP/1.1 200"));
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn an_idle_keep_alive_connection_outlives_the_header_timeout() {
        let server = start(
            ServeConfig {
                header_read_timeout: Duration::from_millis(200),
                idle_timeout: Duration::from_millis(1500),
                ..ServeConfig::default()
            },
            None,
        )
        .await;
        let mut kept = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut kept).await.starts_with("HTTP/1.1 200"));
        // Idle for longer than the header timeout: still open, still served.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(healthz(&mut kept).await.starts_with("HTTP/1.1 200"));
        // A request whose headers start but never end is cut after the header timeout.
        let started = tokio::time::Instant::now();
        kept.write_all(b"GET /healthz HTTP/1.1\r\nHo")
            .await
            .unwrap();
        assert!(read_to_close(&mut kept).await.is_empty());
        assert!(started.elapsed() < Duration::from_millis(1200));
        // And an idle one is closed after the idle timeout.
        let mut idle = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut idle).await.starts_with("HTTP/1.1 200"));
        let started = tokio::time::Instant::now();
        read_to_close(&mut idle).await;
        assert!(started.elapsed() >= Duration::from_millis(1000));
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    /// Sends `request` raw and reads the whole answer (the server closes).
    async fn raw(addr: SocketAddr, request: &[u8]) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(request).await.unwrap();
        String::from_utf8_lossy(&read_to_close(&mut stream).await).into_owned()
    }

    #[tokio::test]
    async fn requests_hyper_cannot_parse_get_a_status() {
        let server = start(ServeConfig::default(), None).await;
        let long_uri = format!("GET /{} HTTP/1.1\r\nHost: x\r\n\r\n", "a".repeat(70_000));
        let many_headers = format!(
            "GET /healthz HTTP/1.1\r\nHost: x\r\n{}\r\n",
            (0..200)
                .map(|i| format!("x-h{i}: v\r\n"))
                .collect::<String>()
        );
        for (request, code, reason) in [
            (long_uri.as_bytes(), "414", "RequestURITooLong"),
            (
                many_headers.as_bytes(),
                "431",
                "RequestHeaderFieldsTooLarge",
            ),
            (
                &b"GET /\xff\x01 HTTP/1.1\r\nHost: x\r\n\r\n"[..],
                "400",
                "BadRequest",
            ),
        ] {
            let answer = raw(server.addr, request).await;
            assert!(answer.starts_with(&format!("HTTP/1.1 {code} ")), "{answer}");
            let body = answer.split("\r\n\r\n").nth(1).unwrap_or_default();
            let status: serde_json::Value =
                serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {answer}"));
            assert_eq!(status["kind"], "Status", "{answer}");
            assert_eq!(status["reason"], reason, "{answer}");
            assert_eq!(status["code"].to_string(), code, "{answer}");
        }
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    /// A GET over HTTP/2 on `io`; the status and the body.
    async fn h2_get<I>(io: I, paths: &[&str]) -> Vec<(u16, String)>
    where
        I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        use http_body_util::BodyExt;
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
                .await
                .unwrap();
        tokio::spawn(conn);
        // All at once, over the one connection.
        let requests = paths.iter().map(|path| {
            let request = hyper::Request::get(format!("http://x{path}"))
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            sender.send_request(request)
        });
        let mut answers = Vec::new();
        for response in futures_util::future::join_all(requests).await {
            let response = response.unwrap();
            assert_eq!(response.version(), hyper::Version::HTTP_2);
            let code = response.status().as_u16();
            let body = response.into_body().collect().await.unwrap().to_bytes();
            answers.push((code, String::from_utf8_lossy(&body).into_owned()));
        }
        answers
    }

    /// An HTTP/2 connection that announces a window of zero (it takes no
    /// data), and the head of a response to a GET of `path` on it.
    async fn h2_window_zero(
        addr: SocketAddr,
        path: &str,
    ) -> (
        tokio::task::JoinHandle<()>,
        hyper::Response<hyper::body::Incoming>,
    ) {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let (mut sender, conn) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
            .initial_stream_window_size(0)
            .handshake(TokioIo::new(tcp))
            .await
            .unwrap();
        let conn = tokio::spawn(async move {
            let _ = conn.await;
        });
        let request = hyper::Request::get(format!("http://x{path}"))
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let response = tokio::time::timeout(DEADLINE, sender.send_request(request))
            .await
            .expect("the head comes without a window")
            .unwrap();
        (conn, response)
    }

    #[tokio::test]
    async fn a_client_that_takes_nothing_of_its_response_is_disconnected() {
        let server = start(
            ServeConfig {
                stall_timeout: Duration::from_millis(300),
                shutdown_grace: Duration::from_millis(100),
                ..ServeConfig::default()
            },
            None,
        )
        .await;
        let (conn, response) = h2_window_zero(server.addr, "/big").await;
        assert_eq!(response.status(), 200);
        // Its window stays shut: the server closes the connection.
        tokio::time::timeout(DEADLINE, conn)
            .await
            .expect("the stalled connection is closed")
            .unwrap();
        // A client that reads is served as ever.
        let mut h1 = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut h1).await.starts_with("HTTP/1.1 200"));
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_response_that_waits_on_the_server_is_not_a_stall() {
        let server = start(
            ServeConfig {
                stall_timeout: Duration::from_millis(100),
                ..ServeConfig::default()
            },
            None,
        )
        .await;
        // `/forever` never answers: as a watch between events, it waits on
        // the server, whatever the client's window.
        let tcp = TcpStream::connect(server.addr).await.unwrap();
        let (mut sender, conn) =
            hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(tcp))
                .await
                .unwrap();
        let mut conn = tokio::spawn(conn);
        let request = hyper::Request::get("http://x/forever")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .unwrap();
        let _pending = tokio::spawn(sender.send_request(request));
        server.forever_reached().await;
        // Ten stall timeouts later the connection is still open.
        let open = tokio::time::timeout(Duration::from_secs(1), &mut conn).await;
        assert!(open.is_err(), "the connection was closed: {open:?}");
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn http2_with_prior_knowledge_on_a_plain_connection() {
        let server = start(ServeConfig::default(), None).await;
        let tcp = TcpStream::connect(server.addr).await.unwrap();
        let answers = h2_get(tcp, &["/healthz", "/healthz", "/healthz"]).await;
        assert_eq!(answers, vec![(200, "ok".to_string()); 3]);
        // HTTP/1.1 on the same port still works.
        let mut h1 = TcpStream::connect(server.addr).await.unwrap();
        assert!(healthz(&mut h1).await.starts_with("HTTP/1.1 200"));
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn over_tls_alpn_chooses_http2_or_http1() {
        let (cert, key) = test_cert_files();
        let tls = tls_config(&cert.1, &key).unwrap();
        let server = start(ServeConfig::default(), Some(tls)).await;
        let connect = |alpn: &[&[u8]]| {
            let mut roots = rustls::RootCertStore::empty();
            let pem = std::fs::read(&cert.1).unwrap();
            for c in CertificateDer::pem_slice_iter(&pem) {
                roots.add(c.unwrap()).unwrap();
            }
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let mut config = rustls::ClientConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth();
            config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
            let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
            let addr = server.addr;
            async move {
                let tcp = TcpStream::connect(addr).await.unwrap();
                let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
                connector.connect(name, tcp).await.unwrap()
            }
        };
        let h2 = connect(&[b"h2", b"http/1.1"]).await;
        assert_eq!(h2.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        assert_eq!(h2_get(h2, &["/healthz"]).await, [(200, "ok".to_string())]);

        let mut h1 = connect(&[b"http/1.1"]).await;
        assert_eq!(h1.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
        h1.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut answer = Vec::new();
        tokio::time::timeout(DEADLINE, h1.read_to_end(&mut answer))
            .await
            .unwrap()
            .ok();
        assert!(
            answer.starts_with(b"HTTP/1.1 200"),
            "{}",
            String::from_utf8_lossy(&answer)
        );
        server.shutdown.cancel();
        server.done.await.unwrap().unwrap();
        drop(cert.0);
    }

    #[tokio::test]
    async fn shutdown_closes_idle_connections_and_cuts_endless_requests_after_the_grace() {
        let server = start(
            ServeConfig {
                shutdown_grace: Duration::from_millis(300),
                ..ServeConfig::default()
            },
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
        server.forever_reached().await;
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
        let mut b = ACCEPT_BACKOFF.retries();
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
        assert_eq!(e, InsecureListen::NoTlsNoTokens { addr: open });
        let e = e.to_string();
        assert!(
            e.contains("--tls-cert-file")
                && e.contains("--token-file")
                && e.contains("--insecure-listen"),
            "{e}"
        );
        let e = check_listen(addr("[::]:80"), false, true, false).unwrap_err();
        assert!(matches!(e, InsecureListen::NoTls { .. }), "{e:?}");
        let e = e.to_string();
        assert!(
            e.contains("without TLS") && !e.contains("--token-file"),
            "{e}"
        );
        let e = check_listen(addr("10.0.0.1:80"), true, false, false).unwrap_err();
        assert!(matches!(e, InsecureListen::NoTokens { .. }), "{e:?}");
        let e = e.to_string();
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
