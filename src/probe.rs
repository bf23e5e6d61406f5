//! The kubelet client: `GET /healthz` over one kept-alive connection per
//! kubelet, with TLS and credentials as configured, a timeout on everything
//! and a cap on what is read.
//!
//! A sweep talks to every kubelet once a period, so each target keeps its own
//! idle stream and nothing else: no connection task, no buffers between
//! probes, no pool lookup, URL parsing or proxy logic. The exchange is one
//! prebuilt request and a response read into a small buffer and parsed with
//! `httparse`. At 10k kubelets that is the difference between hundreds of
//! MiB of idle client state and a few.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// What is read of a health answer's body at most; a longer body is cut and
/// its connection dropped.
pub const BODY_CAP: usize = 4096;
/// What the status line and headers may take.
const HEAD_CAP: usize = 16 * 1024;
/// How much of an unhealthy answer's body goes into the condition message.
const EXCERPT_CHARS: usize = 120;

/// Kubelet scheme.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Scheme {
    Http,
    Https,
}

/// How to reach kubelets.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    pub scheme: Scheme,
    pub port: u16,
    pub timeout: Duration,
    pub path: String,
    pub ca_file: Option<String>,
    pub client_cert_file: Option<String>,
    pub client_key_file: Option<String>,
    pub token_file: Option<String>,
    pub insecure_skip_tls_verify: bool,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            scheme: Scheme::Https,
            port: 10250,
            timeout: Duration::from_secs(5),
            path: "/healthz".into(),
            ca_file: None,
            client_cert_file: None,
            client_key_file: None,
            token_file: None,
            insecure_skip_tls_verify: false,
        }
    }
}

/// Problems with the kubelet client configuration, found before anything runs.
#[derive(Debug, Error)]
pub enum ProbeConfigError {
    #[error("cannot read {flag} {path}: {source}")]
    Read {
        flag: &'static str,
        path: String,
        source: std::io::Error,
    },
    #[error("{flag} {path} holds no usable {what}: {reason}")]
    Pem {
        flag: &'static str,
        path: String,
        what: &'static str,
        reason: String,
    },
    #[error("--kubelet-client-cert and --kubelet-client-key go together; give both or neither")]
    HalfClientCert,
    #[error("--kubelet-scheme https needs a way to trust kubelets: give --kubelet-ca, or --kubelet-insecure-skip-tls-verify if you accept unverified kubelets")]
    NoTrust,
    #[error("TLS configuration rejected: {0}")]
    Tls(String),
    #[error("--kubelet-token-file {0} is empty or not a single line")]
    BadToken(String),
}

/// The result of one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// 2xx with body `ok`.
    Healthy,
    /// An answer that is not healthy: the status and the start of the body.
    Unhealthy { status: u16, excerpt: String },
    /// No answer: refused, reset, timed out, TLS failure, not HTTP.
    NoAnswer { error: String },
}

/// A kept connection: plain or TLS.
enum Stream {
    Plain(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// A kubelet to probe, owning its kept-alive connection between sweeps.
pub struct ProbeTarget {
    pub addr: SocketAddr,
    /// The Host header's value, formatted once.
    host: Box<str>,
    connection: Mutex<Option<Stream>>,
}

impl ProbeTarget {
    pub fn new(addr: SocketAddr) -> ProbeTarget {
        ProbeTarget {
            addr,
            host: addr.to_string().into_boxed_str(),
            connection: Mutex::new(None),
        }
    }

    /// Whether a connection is being kept for the next probe.
    pub async fn has_connection(&self) -> bool {
        self.connection.lock().await.is_some()
    }
}

/// Probes kubelets.
#[derive(Clone)]
pub struct Prober {
    inner: Arc<ProberInner>,
}

struct ProberInner {
    timeout: Duration,
    tls: Option<TlsConnector>,
    /// The request up to the Host header, and what follows it.
    request_head: String,
    request_tail: String,
}

/// One parsed answer and whether its connection can carry the next probe.
struct Answer {
    status: u16,
    body: Vec<u8>,
    reusable: bool,
}

impl Prober {
    /// Builds a prober, reading certificates and tokens now so a bad flag fails at start.
    pub fn new(config: &ProbeConfig) -> Result<Prober, ProbeConfigError> {
        let tls = match config.scheme {
            Scheme::Http => None,
            Scheme::Https => Some(TlsConnector::from(Arc::new(tls_config(config)?))),
        };
        let mut request_tail = concat!(
            "User-Agent: nodekeeper/",
            env!("CARGO_PKG_VERSION"),
            "\r\nAccept: */*\r\n"
        )
        .to_string();
        if let Some(path) = &config.token_file {
            let token = std::fs::read_to_string(path).map_err(|source| ProbeConfigError::Read {
                flag: "--kubelet-token-file",
                path: path.clone(),
                source,
            })?;
            let token = token.trim();
            if token.is_empty() || token.contains(['\r', '\n']) {
                return Err(ProbeConfigError::BadToken(path.clone()));
            }
            request_tail.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        request_tail.push_str("\r\n");
        Ok(Prober {
            inner: Arc::new(ProberInner {
                timeout: config.timeout,
                tls,
                request_head: format!("GET {} HTTP/1.1\r\nHost: ", config.path),
                request_tail,
            }),
        })
    }

    /// Probes one kubelet. Never takes longer than the configured timeout.
    pub async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        let mut slot = target.connection.lock().await;
        match tokio::time::timeout(self.inner.timeout, self.exchange(target, &mut slot)).await {
            Ok(Ok(answer)) => classify(answer.status, &answer.body),
            Ok(Err(error)) => {
                *slot = None;
                ProbeOutcome::NoAnswer { error }
            }
            Err(_) => {
                *slot = None;
                ProbeOutcome::NoAnswer {
                    error: format!("no answer within {:?}", self.inner.timeout),
                }
            }
        }
    }

    async fn exchange(
        &self,
        target: &ProbeTarget,
        slot: &mut Option<Stream>,
    ) -> Result<Answer, String> {
        // A kept connection may have been closed by the kubelet since the last
        // sweep; that is not the kubelet's failure, so retry once on a new one.
        if let Some(mut stream) = slot.take() {
            if let Ok(answer) = exchange_on(&mut stream, self.request(target)).await {
                if answer.reusable {
                    *slot = Some(stream);
                }
                return Ok(answer);
            }
        }
        let mut stream = self.connect(target.addr).await?;
        let answer = exchange_on(&mut stream, self.request(target)).await?;
        if answer.reusable {
            *slot = Some(stream);
        }
        Ok(answer)
    }

    /// The request bytes, in a buffer with room for the answer.
    fn request(&self, target: &ProbeTarget) -> Vec<u8> {
        let inner = &self.inner;
        let mut request = Vec::with_capacity(512);
        request.extend_from_slice(inner.request_head.as_bytes());
        request.extend_from_slice(target.host.as_bytes());
        request.extend_from_slice(b"\r\n");
        request.extend_from_slice(inner.request_tail.as_bytes());
        request
    }

    async fn connect(&self, addr: SocketAddr) -> Result<Stream, String> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        match &self.inner.tls {
            None => Ok(Stream::Plain(tcp)),
            Some(tls) => {
                let name = ServerName::IpAddress(addr.ip().into());
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS with {addr}: {e}"))?;
                Ok(Stream::Tls(Box::new(stream)))
            }
        }
    }
}

/// Sends `request` and reads one response into the same buffer: one
/// allocation per probe.
async fn exchange_on(stream: &mut Stream, mut buf: Vec<u8>) -> Result<Answer, String> {
    stream
        .write_all(&buf)
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    stream
        .flush()
        .await
        .map_err(|e| format!("sending the request: {e}"))?;
    buf.clear();
    let (status, head_len, framing, mut reusable) = loop {
        if read_more(stream, &mut buf, HEAD_CAP).await? == 0 {
            return Err(if buf.is_empty() {
                "connection closed before an answer".into()
            } else {
                "connection closed in the middle of the answer".into()
            });
        }
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut response = httparse::Response::new(&mut headers);
        match response.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                let status = response.code.unwrap_or(0);
                if (100..200).contains(&status) {
                    // An interim answer: drop it and read the real one.
                    buf.drain(..len);
                    continue;
                }
                let (framing, keep) = framing_of(&response);
                break (status, len, framing, keep);
            }
            Ok(httparse::Status::Partial) if buf.len() >= HEAD_CAP => {
                return Err(format!("answer headers longer than {HEAD_CAP} bytes"))
            }
            Ok(httparse::Status::Partial) => continue,
            Err(e) => return Err(format!("not an HTTP answer: {e}")),
        }
    };
    buf.drain(..head_len);
    let mut raw = buf;
    let body = match framing {
        Framing::Length(len) => {
            let want = len.min(BODY_CAP);
            while raw.len() < want {
                if read_more(stream, &mut raw, want).await? == 0 {
                    return Err("connection closed in the middle of the body".into());
                }
            }
            if len > BODY_CAP || raw.len() > len {
                reusable = false;
            }
            raw.truncate(want);
            raw
        }
        Framing::Chunked => {
            let (body, complete) = read_chunked(stream, raw).await?;
            reusable &= complete;
            body
        }
        Framing::UntilClose => {
            while raw.len() < BODY_CAP && read_more(stream, &mut raw, BODY_CAP).await? > 0 {}
            raw.truncate(BODY_CAP);
            reusable = false;
            raw
        }
    };
    Ok(Answer {
        status,
        body,
        reusable,
    })
}

/// How a response body is delimited.
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

fn framing_of(response: &httparse::Response<'_, '_>) -> (Framing, bool) {
    let mut framing = Framing::UntilClose;
    let mut keep = response.version == Some(1);
    for h in response.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            framing = value.parse().map_or(Framing::UntilClose, Framing::Length);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding")
            && value.to_ascii_lowercase().ends_with("chunked")
        {
            framing = Framing::Chunked;
        } else if h.name.eq_ignore_ascii_case("connection") {
            let value = value.to_ascii_lowercase();
            if value.contains("close") {
                keep = false;
            } else if value.contains("keep-alive") {
                keep = true;
            }
        }
    }
    (framing, keep)
}

/// Reads a chunked body up to [`BODY_CAP`]; `complete` is false if it was cut.
async fn read_chunked(stream: &mut Stream, mut raw: Vec<u8>) -> Result<(Vec<u8>, bool), String> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        // The size line.
        let line_end = loop {
            if let Some(i) = raw[pos..].windows(2).position(|w| w == b"\r\n") {
                break pos + i;
            }
            if raw.len() - pos > 1024 || read_more(stream, &mut raw, usize::MAX).await? == 0 {
                return Err("malformed chunked body".into());
            }
        };
        let size_text = std::str::from_utf8(&raw[pos..line_end]).unwrap_or("");
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size =
            usize::from_str_radix(size_text, 16).map_err(|_| "malformed chunk size".to_string())?;
        pos = line_end + 2;
        if size == 0 {
            // Trailers end with an empty line; a plain answer has none.
            while !raw[pos..].starts_with(b"\r\n")
                && !raw[pos..].windows(4).any(|w| w == b"\r\n\r\n")
            {
                if raw.len() - pos > 1024 || read_more(stream, &mut raw, usize::MAX).await? == 0 {
                    return Ok((body, false));
                }
            }
            return Ok((body, true));
        }
        if body.len() + size > BODY_CAP {
            let room = BODY_CAP - body.len();
            while raw.len() < pos + room {
                if read_more(stream, &mut raw, usize::MAX).await? == 0 {
                    break;
                }
            }
            body.extend_from_slice(&raw[pos..raw.len().min(pos + room)]);
            return Ok((body, false));
        }
        while raw.len() < pos + size + 2 {
            if read_more(stream, &mut raw, usize::MAX).await? == 0 {
                return Err("connection closed in the middle of the body".into());
            }
        }
        body.extend_from_slice(&raw[pos..pos + size]);
        pos += size + 2;
    }
}

/// Reads what is available into `buf`, never past `limit` bytes in all;
/// returns how many bytes were read (0 at the end of the stream).
async fn read_more(stream: &mut Stream, buf: &mut Vec<u8>, limit: usize) -> Result<usize, String> {
    let room = limit.saturating_sub(buf.len()).clamp(1, 4096);
    buf.reserve(room);
    // Read into spare capacity without zeroing it first, at most `room` bytes.
    let mut limited = (&mut *stream).take(room as u64);
    limited
        .read_buf(buf)
        .await
        .map_err(|e| format!("reading the answer: {e}"))
}

/// The verdict on one answer.
pub fn classify(status: u16, body: &[u8]) -> ProbeOutcome {
    if (200..300).contains(&status) && body.trim_ascii() == b"ok" {
        return ProbeOutcome::Healthy;
    }
    let text = String::from_utf8_lossy(body);
    let mut excerpt: String = text
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .chars()
        .take(EXCERPT_CHARS)
        .collect();
    if text.chars().count() > EXCERPT_CHARS {
        excerpt.push('…');
    }
    ProbeOutcome::Unhealthy { status, excerpt }
}

fn read_file(flag: &'static str, path: &str) -> Result<Vec<u8>, ProbeConfigError> {
    std::fs::read(path).map_err(|source| ProbeConfigError::Read {
        flag,
        path: path.into(),
        source,
    })
}

fn tls_config(config: &ProbeConfig) -> Result<rustls::ClientConfig, ProbeConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ProbeConfigError::Tls(e.to_string()))?;
    let builder = if config.insecure_skip_tls_verify {
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(insecure::AcceptAnyServer(provider)))
    } else {
        let Some(ca) = &config.ca_file else {
            return Err(ProbeConfigError::NoTrust);
        };
        let flag = "--kubelet-ca";
        let pem = read_file(flag, ca)?;
        let mut roots = rustls::RootCertStore::empty();
        let certs: Vec<_> = CertificateDer::pem_slice_iter(&pem)
            .collect::<Result<_, _>>()
            .map_err(|e| ProbeConfigError::Pem {
                flag,
                path: ca.clone(),
                what: "certificates",
                reason: e.to_string(),
            })?;
        let (added, _) = roots.add_parsable_certificates(certs);
        if added == 0 {
            return Err(ProbeConfigError::Pem {
                flag,
                path: ca.clone(),
                what: "certificates",
                reason: "no certificate parsed".into(),
            });
        }
        builder.with_root_certificates(roots)
    };
    match (&config.client_cert_file, &config.client_key_file) {
        (None, None) => Ok(builder.with_no_client_auth()),
        (Some(cert), Some(key)) => {
            let flag = "--kubelet-client-cert";
            let chain: Vec<_> = CertificateDer::pem_slice_iter(&read_file(flag, cert)?)
                .collect::<Result<_, _>>()
                .map_err(|e| ProbeConfigError::Pem {
                    flag,
                    path: cert.clone(),
                    what: "certificates",
                    reason: e.to_string(),
                })?;
            let flag = "--kubelet-client-key";
            let key = PrivateKeyDer::from_pem_slice(&read_file(flag, key)?).map_err(|e| {
                ProbeConfigError::Pem {
                    flag,
                    path: key.clone(),
                    what: "private key",
                    reason: e.to_string(),
                }
            })?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| ProbeConfigError::Tls(e.to_string()))
        }
        _ => Err(ProbeConfigError::HalfClientCert),
    }
}

/// `--kubelet-insecure-skip-tls-verify`: signatures are still checked, the
/// server's identity is not.
mod insecure {
    use std::sync::Arc;

    use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
    use rustls::crypto::CryptoProvider;
    use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
    use rustls::{DigitallySignedStruct, SignatureScheme};

    #[derive(Debug)]
    pub struct AcceptAnyServer(pub Arc<CryptoProvider>);

    impl ServerCertVerifier for AcceptAnyServer {
        fn verify_server_cert(
            &self,
            _: &CertificateDer<'_>,
            _: &[CertificateDer<'_>],
            _: &ServerName<'_>,
            _: &[u8],
            _: UnixTime,
        ) -> Result<ServerCertVerified, rustls::Error> {
            Ok(ServerCertVerified::assertion())
        }
        fn verify_tls12_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls12_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
        fn verify_tls13_signature(
            &self,
            message: &[u8],
            cert: &CertificateDer<'_>,
            dss: &DigitallySignedStruct,
        ) -> Result<HandshakeSignatureValid, rustls::Error> {
            rustls::crypto::verify_tls13_signature(
                message,
                cert,
                dss,
                &self.0.signature_verification_algorithms,
            )
        }
        fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
            self.0.signature_verification_algorithms.supported_schemes()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;

    #[test]
    fn only_2xx_ok_is_healthy() {
        assert_eq!(classify(200, b"ok"), ProbeOutcome::Healthy);
        assert_eq!(classify(200, b"ok\n"), ProbeOutcome::Healthy);
        assert_eq!(
            classify(200, b"degraded"),
            ProbeOutcome::Unhealthy {
                status: 200,
                excerpt: "degraded".into()
            }
        );
        let long = "x".repeat(500);
        match classify(500, long.as_bytes()) {
            ProbeOutcome::Unhealthy {
                status: 500,
                excerpt,
            } => assert_eq!(excerpt.chars().count(), EXCERPT_CHARS + 1),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(302, b"ok"),
            ProbeOutcome::Unhealthy { status: 302, .. }
        ));
    }

    fn http_prober(timeout: Duration) -> Prober {
        Prober::new(&ProbeConfig {
            scheme: Scheme::Http,
            timeout,
            ..ProbeConfig::default()
        })
        .unwrap()
    }

    /// A server answering each request on a connection with `answers` in turn, then closing.
    async fn serve(answers: Vec<&'static str>) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((mut socket, _)) = listener.accept().await else {
                    return;
                };
                let answers = answers.clone();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    for answer in answers {
                        let Ok(n) = socket.read(&mut buf).await else {
                            return;
                        };
                        if n == 0 {
                            return;
                        }
                        let _ = socket.write_all(answer.as_bytes()).await;
                    }
                });
            }
        });
        addr
    }

    const OK: &str = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok";

    #[tokio::test]
    async fn keeps_the_connection_between_probes() {
        let addr = serve(vec![OK, OK]).await;
        let prober = http_prober(Duration::from_secs(5));
        let target = ProbeTarget::new(addr);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        assert!(target.has_connection().await);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
    }

    #[tokio::test]
    async fn a_connection_closed_by_the_kubelet_is_replaced_silently() {
        // Each connection answers once and closes: the second probe must reconnect.
        let addr = serve(vec![OK]).await;
        let prober = http_prober(Duration::from_secs(5));
        let target = ProbeTarget::new(addr);
        for _ in 0..3 {
            assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        }
    }

    #[tokio::test]
    async fn refused_and_silent_kubelets_are_no_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        drop(listener);
        let prober = http_prober(Duration::from_secs(5));
        assert!(matches!(
            prober.probe(&ProbeTarget::new(addr)).await,
            ProbeOutcome::NoAnswer { .. }
        ));

        // Accepts and never answers: the timeout decides.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        let prober = http_prober(Duration::from_millis(200));
        match prober.probe(&ProbeTarget::new(addr)).await {
            ProbeOutcome::NoAnswer { error } => {
                assert!(error.contains("no answer within"), "{error}")
            }
            other => panic!("{other:?}"),
        }
        drop(silent);
    }

    #[tokio::test]
    async fn sick_answers_and_huge_bodies_are_capped() {
        let addr = serve(vec!["HTTP/1.1 500 Internal Server Error\r\ncontent-length: 22\r\n\r\n[-]syncloop failed: x\n"]).await;
        let prober = http_prober(Duration::from_secs(5));
        assert_eq!(
            prober.probe(&ProbeTarget::new(addr)).await,
            ProbeOutcome::Unhealthy {
                status: 500,
                excerpt: "[-]syncloop failed: x".into()
            }
        );
        let huge: &'static str = Box::leak(
            format!(
                "HTTP/1.1 200 OK\r\ncontent-length: 100000\r\n\r\n{}",
                "y".repeat(100_000)
            )
            .into_boxed_str(),
        );
        let addr = serve(vec![huge]).await;
        let target = ProbeTarget::new(addr);
        assert!(matches!(
            prober.probe(&target).await,
            ProbeOutcome::Unhealthy { status: 200, .. }
        ));
        assert!(
            !target.has_connection().await,
            "a half-read connection is not kept"
        );
    }

    #[tokio::test]
    async fn chunked_bodies_and_connection_close_are_understood() {
        let chunked =
            "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n1\r\no\r\n1\r\nk\r\n0\r\n\r\n";
        let addr = serve(vec![chunked, chunked]).await;
        let prober = http_prober(Duration::from_secs(5));
        let target = ProbeTarget::new(addr);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        assert!(
            target.has_connection().await,
            "a complete chunked answer keeps the connection"
        );
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);

        let closing = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        let addr = serve(vec![closing]).await;
        let target = ProbeTarget::new(addr);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        assert!(
            !target.has_connection().await,
            "Connection: close is honoured"
        );

        let old = "HTTP/1.0 200 OK\r\n\r\nok";
        let addr = serve(vec![old]).await;
        let target = ProbeTarget::new(addr);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        assert!(!target.has_connection().await);

        let garbage = "SSH-2.0-OpenSSH_9.2\r\n";
        let addr = serve(vec![garbage]).await;
        assert!(matches!(
            prober.probe(&ProbeTarget::new(addr)).await,
            ProbeOutcome::NoAnswer { .. }
        ));
    }

    #[test]
    fn https_without_trust_is_refused_at_start() {
        let err = Prober::new(&ProbeConfig::default()).err().unwrap();
        assert!(matches!(err, ProbeConfigError::NoTrust), "{err}");
        let err = Prober::new(&ProbeConfig {
            insecure_skip_tls_verify: true,
            client_cert_file: Some("c".into()),
            ..ProbeConfig::default()
        })
        .err()
        .unwrap();
        assert!(matches!(err, ProbeConfigError::HalfClientCert));
        let err = Prober::new(&ProbeConfig {
            ca_file: Some("/nonexistent/ca.pem".into()),
            ..ProbeConfig::default()
        })
        .err()
        .unwrap();
        assert!(err.to_string().contains("/nonexistent/ca.pem"));
    }
}

/// Kubelets behind TLS: verification against a CA, the insecure switch,
/// client certificates and bearer tokens, end to end on loopback.
#[cfg(test)]
mod tls_tests {
    use super::*;
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
    use tokio::net::TcpListener;

    struct Pki {
        dir: tempfile::TempDir,
        ca_key: KeyPair,
        ca_params: CertificateParams,
    }

    impl Pki {
        fn new() -> Pki {
            let ca_key = KeyPair::generate().unwrap();
            let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
            ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
            let ca_cert = ca_params.self_signed(&ca_key).unwrap();
            let dir = tempfile::tempdir().unwrap();
            std::fs::write(dir.path().join("ca.pem"), ca_cert.pem()).unwrap();
            Pki {
                dir,
                ca_key,
                ca_params,
            }
        }

        /// A certificate for `names` signed by the CA: (chain, key).
        fn issue(
            &self,
            names: &[&str],
        ) -> (
            Vec<CertificateDer<'static>>,
            PrivateKeyDer<'static>,
            String,
            String,
        ) {
            let key = KeyPair::generate().unwrap();
            let params =
                CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .unwrap();
            let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
            let cert = params.signed_by(&key, &issuer).unwrap();
            let der_key = PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap();
            (
                vec![cert.der().clone()],
                der_key,
                cert.pem(),
                key.serialize_pem(),
            )
        }

        fn path(&self, name: &str) -> String {
            self.dir.path().join(name).to_string_lossy().into_owned()
        }
    }

    /// A TLS kubelet answering `ok`; reports the Authorization header it saw.
    async fn tls_kubelet(
        pki: &Pki,
        require_client_cert: bool,
    ) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<String>) {
        let (chain, key, _, _) = pki.issue(&["127.0.0.1"]);
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap();
        let config = if require_client_cert {
            let mut roots = rustls::RootCertStore::empty();
            let ca = std::fs::read(pki.path("ca.pem")).unwrap();
            roots
                .add(CertificateDer::pem_slice_iter(&ca).next().unwrap().unwrap())
                .unwrap();
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                Arc::new(rustls::crypto::ring::default_provider()),
            )
            .build()
            .unwrap();
            builder
                .with_client_cert_verifier(verifier)
                .with_single_cert(chain, key)
                .unwrap()
        } else {
            builder
                .with_no_client_auth()
                .with_single_cert(chain, key)
                .unwrap()
        };
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (seen, report) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                let seen = seen.clone();
                tokio::spawn(async move {
                    let Ok(mut tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let mut buf = vec![0u8; 4096];
                    let Ok(n) = tls.read(&mut buf).await else {
                        return;
                    };
                    let request = String::from_utf8_lossy(&buf[..n]).into_owned();
                    let auth = request
                        .lines()
                        .find_map(|l| l.strip_prefix("Authorization: "))
                        .unwrap_or("")
                        .to_string();
                    let _ = seen.send(auth);
                    let _ = tls
                        .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                        .await;
                    let _ = tls.flush().await;
                });
            }
        });
        (addr, report)
    }

    fn https(pki: &Pki) -> ProbeConfig {
        ProbeConfig {
            ca_file: Some(pki.path("ca.pem")),
            ..ProbeConfig::default()
        }
    }

    #[tokio::test]
    async fn a_kubelet_with_a_certificate_from_the_ca_is_trusted() {
        let pki = Pki::new();
        let (addr, _) = tls_kubelet(&pki, false).await;
        let prober = Prober::new(&https(&pki)).unwrap();
        assert_eq!(
            prober.probe(&ProbeTarget::new(addr)).await,
            ProbeOutcome::Healthy
        );
    }

    #[tokio::test]
    async fn a_kubelet_from_another_ca_is_no_answer_unless_verification_is_off() {
        let theirs = Pki::new();
        let (addr, _) = tls_kubelet(&theirs, false).await;
        let ours = Pki::new();
        match Prober::new(&https(&ours))
            .unwrap()
            .probe(&ProbeTarget::new(addr))
            .await
        {
            ProbeOutcome::NoAnswer { error } => assert!(error.contains("TLS"), "{error}"),
            other => panic!("an unknown issuer was trusted: {other:?}"),
        }
        let insecure = ProbeConfig {
            insecure_skip_tls_verify: true,
            ..ProbeConfig::default()
        };
        assert_eq!(
            Prober::new(&insecure)
                .unwrap()
                .probe(&ProbeTarget::new(addr))
                .await,
            ProbeOutcome::Healthy
        );
    }

    #[tokio::test]
    async fn client_certificates_and_tokens_are_presented() {
        let pki = Pki::new();
        let (addr, mut seen) = tls_kubelet(&pki, true).await;
        // Without a client certificate the kubelet refuses the handshake.
        let bare = Prober::new(&https(&pki)).unwrap();
        assert!(matches!(
            bare.probe(&ProbeTarget::new(addr)).await,
            ProbeOutcome::NoAnswer { .. }
        ));

        let (_, _, cert_pem, key_pem) = pki.issue(&["nodekeeper"]);
        std::fs::write(pki.path("client.pem"), cert_pem).unwrap();
        std::fs::write(pki.path("client-key.pem"), key_pem).unwrap();
        std::fs::write(pki.path("token"), "s3cret\n").unwrap();
        let config = ProbeConfig {
            client_cert_file: Some(pki.path("client.pem")),
            client_key_file: Some(pki.path("client-key.pem")),
            token_file: Some(pki.path("token")),
            ..https(&pki)
        };
        let prober = Prober::new(&config).unwrap();
        assert_eq!(
            prober.probe(&ProbeTarget::new(addr)).await,
            ProbeOutcome::Healthy
        );
        let mut auth = String::new();
        while let Ok(a) = seen.try_recv() {
            auth = a;
        }
        assert_eq!(auth, "Bearer s3cret");
    }
}
