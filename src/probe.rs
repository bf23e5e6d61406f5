//! The kubelet client: `GET /healthz` over one kept-alive connection per
//! kubelet, with TLS and credentials as configured, a timeout on everything
//! and a cap on what is read.
//!
//! Built on hyper's connection API rather than a pooled client: a probe sweep
//! talks to every kubelet once per period, so each target owns its connection
//! and no pool lookup, URL parsing or proxy logic sits on the hot path.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper::client::conn::http1::SendRequest;
use hyper::header::{HeaderValue, AUTHORIZATION, HOST, USER_AGENT};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use thiserror::Error;
use tokio::net::TcpStream;
use tokio::sync::Mutex;
use tokio_rustls::TlsConnector;

/// What is read of a health answer at most; the rest is dropped with the connection.
pub const BODY_CAP: usize = 4096;
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
    #[error("--kubelet-token-file {0} is empty")]
    EmptyToken(String),
}

/// The result of one probe.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// 2xx with body `ok`.
    Healthy,
    /// An answer that is not healthy: the status and the start of the body.
    Unhealthy { status: u16, excerpt: String },
    /// No answer: refused, reset, timed out, TLS failure.
    NoAnswer { error: String },
}

/// A kubelet to probe, owning its kept-alive connection between sweeps.
pub struct ProbeTarget {
    pub addr: SocketAddr,
    host_header: HeaderValue,
    connection: Mutex<Option<SendRequest<Empty<Bytes>>>>,
}

impl ProbeTarget {
    pub fn new(addr: SocketAddr) -> ProbeTarget {
        let host_header =
            HeaderValue::from_str(&addr.to_string()).unwrap_or(HeaderValue::from_static("kubelet"));
        ProbeTarget {
            addr,
            host_header,
            connection: Mutex::new(None),
        }
    }

    /// Whether a connection is being kept for the next probe.
    pub async fn has_connection(&self) -> bool {
        self.connection
            .lock()
            .await
            .as_ref()
            .is_some_and(|c| !c.is_closed())
    }
}

/// Probes kubelets.
#[derive(Clone)]
pub struct Prober {
    inner: Arc<ProberInner>,
}

struct ProberInner {
    timeout: Duration,
    path: String,
    tls: Option<TlsConnector>,
    authorization: Option<HeaderValue>,
}

impl Prober {
    /// Builds a prober, reading certificates and tokens now so a bad flag fails at start.
    pub fn new(config: &ProbeConfig) -> Result<Prober, ProbeConfigError> {
        let tls = match config.scheme {
            Scheme::Http => None,
            Scheme::Https => Some(TlsConnector::from(Arc::new(tls_config(config)?))),
        };
        let authorization = match &config.token_file {
            None => None,
            Some(path) => {
                let token =
                    std::fs::read_to_string(path).map_err(|source| ProbeConfigError::Read {
                        flag: "--kubelet-token-file",
                        path: path.clone(),
                        source,
                    })?;
                let token = token.trim();
                if token.is_empty() {
                    return Err(ProbeConfigError::EmptyToken(path.clone()));
                }
                let mut value =
                    HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
                        ProbeConfigError::Pem {
                            flag: "--kubelet-token-file",
                            path: path.clone(),
                            what: "token",
                            reason: "it contains characters not allowed in a header".into(),
                        }
                    })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        Ok(Prober {
            inner: Arc::new(ProberInner {
                timeout: config.timeout,
                path: config.path.clone(),
                tls,
                authorization,
            }),
        })
    }

    /// Probes one kubelet. Never takes longer than the configured timeout.
    pub async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        let mut slot = target.connection.lock().await;
        match tokio::time::timeout(self.inner.timeout, self.exchange(target, &mut slot)).await {
            Ok(Ok((status, body))) => classify(status, &body),
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
        slot: &mut Option<SendRequest<Empty<Bytes>>>,
    ) -> Result<(StatusCode, Bytes), String> {
        // A kept connection may have been closed by the kubelet since the last
        // sweep; that is not the kubelet's failure, so retry once on a new one.
        if let Some(mut sender) = slot.take().filter(|s| !s.is_closed()) {
            if sender.ready().await.is_ok() {
                if let Ok(answer) = self.request(target, &mut sender).await {
                    return self.keep(slot, sender, answer);
                }
            }
        }
        let mut sender = self.connect(target.addr).await?;
        let answer = self.request(target, &mut sender).await?;
        self.keep(slot, sender, answer)
    }

    fn keep(
        &self,
        slot: &mut Option<SendRequest<Empty<Bytes>>>,
        sender: SendRequest<Empty<Bytes>>,
        answer: (StatusCode, Bytes, bool),
    ) -> Result<(StatusCode, Bytes), String> {
        let (status, body, complete) = answer;
        // A body we stopped reading leaves the connection unusable.
        if complete {
            *slot = Some(sender);
        }
        Ok((status, body))
    }

    async fn request(
        &self,
        target: &ProbeTarget,
        sender: &mut SendRequest<Empty<Bytes>>,
    ) -> Result<(StatusCode, Bytes, bool), String> {
        let mut request = Request::get(self.inner.path.as_str())
            .header(HOST, target.host_header.clone())
            .header(
                USER_AGENT,
                HeaderValue::from_static(concat!("nodekeeper/", env!("CARGO_PKG_VERSION"))),
            )
            .body(Empty::new())
            .map_err(|e| e.to_string())?;
        if let Some(auth) = &self.inner.authorization {
            request.headers_mut().insert(AUTHORIZATION, auth.clone());
        }
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| describe_error(&e))?;
        let status = response.status();
        let mut body = response.into_body();
        let mut read = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| describe_error(&e))?;
            if let Some(data) = frame.data_ref() {
                let room = BODY_CAP - read.len();
                read.extend_from_slice(&data[..data.len().min(room)]);
                if read.len() >= BODY_CAP {
                    return Ok((status, Bytes::from(read), false));
                }
            }
        }
        Ok((status, Bytes::from(read), true))
    }

    async fn connect(&self, addr: SocketAddr) -> Result<SendRequest<Empty<Bytes>>, String> {
        let tcp = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("connect {addr}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        match &self.inner.tls {
            None => handshake(TokioIo::new(tcp)).await,
            Some(tls) => {
                let name = ServerName::IpAddress(addr.ip().into());
                let stream = tls
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS with {addr}: {e}"))?;
                handshake(TokioIo::new(stream)).await
            }
        }
    }
}

async fn handshake<T>(io: T) -> Result<SendRequest<Empty<Bytes>>, String>
where
    T: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let (sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| describe_error(&e))?;
    // The connection task ends when the sender is dropped or the peer closes.
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(sender)
}

fn describe_error(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The verdict on one answer.
pub fn classify(status: StatusCode, body: &[u8]) -> ProbeOutcome {
    if status.is_success() && body.trim_ascii() == b"ok" {
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
    ProbeOutcome::Unhealthy {
        status: status.as_u16(),
        excerpt,
    }
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
        assert_eq!(classify(StatusCode::OK, b"ok"), ProbeOutcome::Healthy);
        assert_eq!(classify(StatusCode::OK, b"ok\n"), ProbeOutcome::Healthy);
        assert_eq!(
            classify(StatusCode::OK, b"degraded"),
            ProbeOutcome::Unhealthy {
                status: 200,
                excerpt: "degraded".into()
            }
        );
        let long = "x".repeat(500);
        match classify(StatusCode::INTERNAL_SERVER_ERROR, long.as_bytes()) {
            ProbeOutcome::Unhealthy {
                status: 500,
                excerpt,
            } => assert_eq!(excerpt.chars().count(), EXCERPT_CHARS + 1),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(StatusCode::FOUND, b"ok"),
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
