//! The kubelet client: `GET /healthz` over one kept-alive connection per
//! kubelet, with TLS and credentials as configured, a timeout on everything
//! and a cap on what is read.
//!
//! A sweep talks to every kubelet once a period, so each target keeps its own
//! idle stream and nothing else: no connection task, no buffers between
//! probes, no pool lookup, URL parsing or proxy logic. The exchange is one
//! prebuilt request and a response read into a small buffer and parsed with
//! `httparse`. A hyper connection per probe costs about twice the CPU per
//! probe, and hyper connections kept between sweeps keep buffers for every
//! kubelet (docs/decisions/probe-reader.md).
//!
//! What one answer may cost is bounded: its head by [`HEAD_CAP`], what is
//! kept of its body by [`BODY_CAP`], everything read off the wire (head,
//! framing, body, trailers) by [`READ_CAP`], and the whole exchange by the
//! timeout. A probe that panics fails alone.
//!
//! The hand-written reader (framing, chunking, caps) and the errors it
//! reports are one piece, kept with the property tests that check it against
//! every way an answer can be cut or stretched.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use futures_util::FutureExt;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use thiserror::Error;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// What is kept of a health answer's body at most; a longer body is cut and
/// its connection dropped.
pub const BODY_CAP: usize = 4096;
/// What the status line and headers may take.
pub const HEAD_CAP: usize = 16 * 1024;
/// What one exchange may read off the wire in all: head, chunk framing,
/// body and trailers. A health answer is a few bytes; this bounds hostile ones.
pub const READ_CAP: usize = 64 * 1024;
/// What a chunk-size line, or the trailers, may take.
const LINE_CAP: usize = 1024;

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
    NoAnswer { error: ProbeError },
}

/// Why a probe got no answer. The messages are what the Ready condition
/// and the log show; the variants let callers tell the failures apart.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProbeError {
    /// Nothing came back within the kubelet timeout.
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The kubelet's address refused the connection: nothing listens there.
    #[error("connect {addr}: {reason}")]
    Refused { addr: SocketAddr, reason: String },
    /// The connection could not be made for another reason (unreachable, reset).
    #[error("connect {addr}: {reason}")]
    Connect { addr: SocketAddr, reason: String },
    /// The TLS handshake failed: an untrusted or wrong certificate, or not TLS.
    #[error("TLS with {addr}: {reason}")]
    Tls { addr: SocketAddr, reason: String },
    /// Connected, but what came back was not a usable HTTP answer (or the
    /// connection broke while it came).
    #[error(transparent)]
    Answer(#[from] AnswerError),
    /// The node has no address to probe.
    #[error("no address known for the node")]
    NoAddress,
    /// The probe panicked; only this probe failed.
    #[error("the probe panicked: {0}")]
    Panicked(String),
}

/// Why a connected kubelet's answer could not be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AnswerError {
    /// The request could not be written: the connection broke.
    #[error("sending the request: {reason}")]
    Send { kind: io::ErrorKind, reason: String },
    /// Reading the answer failed: the connection broke under it.
    #[error("reading the answer: {reason}")]
    Read { kind: io::ErrorKind, reason: String },
    /// The kubelet closed the connection without answering.
    #[error("connection closed before an answer")]
    ClosedBeforeAnswer,
    /// The kubelet closed the connection partway through the answer.
    #[error("connection closed in the middle of the {0}")]
    ClosedInside(AnswerPart),
    /// The status line and headers did not end within [`HEAD_CAP`].
    #[error("answer headers longer than {HEAD_CAP} bytes")]
    HeadTooLarge,
    /// The answer went on past [`READ_CAP`].
    #[error("reading the answer: the answer is longer than {READ_CAP} bytes")]
    TooLarge,
    /// What came back is not HTTP, or its framing headers contradict.
    #[error("not an HTTP answer: {0}")]
    NotHttp(String),
    /// A chunk-size line went on past [`LINE_CAP`].
    #[error("malformed chunked body: a chunk-size line longer than {LINE_CAP} bytes")]
    ChunkLineTooLong,
    /// A chunked body whose framing is broken.
    #[error("malformed chunked body: {0}")]
    BadChunk(&'static str),
}

/// Where in an answer the connection closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerPart {
    Head,
    Body,
}

impl std::fmt::Display for AnswerPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            AnswerPart::Head => "answer",
            AnswerPart::Body => "body",
        })
    }
}

impl AnswerError {
    /// Whether the connection failed rather than the kubelet answering
    /// badly. On a kept connection that is no fault of the kubelet's (it
    /// may have closed the connection since the last sweep), so a new
    /// connection gets the question; a bad answer is the kubelet's answer
    /// whatever the connection, and is not asked for twice.
    pub fn lost_connection(&self) -> bool {
        matches!(
            self,
            AnswerError::Send { .. } | AnswerError::Read { .. } | AnswerError::ClosedBeforeAnswer
        )
    }
}

/// The error [`Metered`] stops a read with, told apart from the stream's own.
#[derive(Debug, thiserror::Error)]
#[error("the answer is longer than {READ_CAP} bytes")]
struct OverReadCap;

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
    ) -> Poll<io::Result<()>> {
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
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// Whether a kept stream is still quietly open. The kubelet may have closed
/// it, or written to it, since the last sweep; one non-blocking read tells,
/// so stale bytes are never taken for the next answer.
fn is_idle(stream: &mut Stream) -> bool {
    let mut byte = [0u8; 1];
    let mut buf = ReadBuf::new(&mut byte);
    let mut cx = Context::from_waker(Waker::noop());
    Pin::new(stream).poll_read(&mut cx, &mut buf).is_pending()
}

/// A stream that lets at most [`READ_CAP`] bytes be read through it: what
/// one exchange may take off the wire.
struct Metered<S> {
    inner: S,
    left: usize,
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.left == 0 {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::InvalidData, OverReadCap)));
        }
        if buf.remaining() <= this.left {
            let before = buf.filled().len();
            std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
            this.left -= buf.filled().len() - before;
            return Poll::Ready(Ok(()));
        }
        let mut limited = ReadBuf::new(buf.initialize_unfilled_to(this.left));
        std::task::ready!(Pin::new(&mut this.inner).poll_read(cx, &mut limited))?;
        let n = limited.filled().len();
        buf.advance(n);
        this.left -= n;
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A kubelet to probe, owning its kept-alive connection between sweeps.
pub struct ProbeTarget {
    pub addr: SocketAddr,
    /// The Host header's value, formatted once.
    host: Box<str>,
    /// Taken for a probe and put back after: a sweep probes each target
    /// once, so no two probes wait for it (a rescue probe that meets an
    /// empty slot connects anew). A plain lock, never held across an await.
    connection: std::sync::Mutex<Option<Stream>>,
}

impl ProbeTarget {
    pub fn new(addr: SocketAddr) -> ProbeTarget {
        ProbeTarget {
            addr,
            host: addr.to_string().into_boxed_str(),
            connection: std::sync::Mutex::new(None),
        }
    }

    /// Whether a connection is being kept for the next probe.
    pub fn has_connection(&self) -> bool {
        self.slot().is_some()
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Stream>> {
        // A panic while the lock was held left at worst a stream or none.
        self.connection
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

/// One parsed answer: its status, the start of its body, whether the body
/// was read to its end, and whether its connection can carry the next probe.
#[derive(Debug)]
struct Answer {
    status: u16,
    body: Vec<u8>,
    complete: bool,
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
            // A prober is built at start-up, before any sweep runs.
            #[allow(clippy::disallowed_methods)]
            let token = std::fs::read_to_string(path).map_err(|source| ProbeConfigError::Read {
                flag: "--kubelet-token-file",
                path: path.clone(),
                source,
            })?;
            let token = token.trim();
            if token.is_empty() || token.contains(|c: char| c.is_ascii_control()) {
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

    /// Probes one kubelet. Never takes longer than the configured timeout,
    /// and a panic on the way is this probe's failure only.
    pub async fn probe(&self, target: &ProbeTarget) -> ProbeOutcome {
        let kept = target.slot().take();
        match self.bounded(self.exchange(target, kept)).await {
            Ok((answer, stream)) => {
                *target.slot() = stream.filter(|_| answer.reusable);
                classify(answer.status, &answer.body, answer.complete)
            }
            Err(error) => ProbeOutcome::NoAnswer { error },
        }
    }

    /// Runs `exchange` within the timeout, catching a panic inside it.
    async fn bounded<T>(
        &self,
        exchange: impl Future<Output = Result<T, ProbeError>>,
    ) -> Result<T, ProbeError> {
        let timeout = self.inner.timeout;
        match tokio::time::timeout(timeout, AssertUnwindSafe(exchange).catch_unwind()).await {
            Ok(Ok(result)) => result,
            Ok(Err(panic)) => Err(ProbeError::Panicked(panic_message(panic.as_ref()).into())),
            Err(_) => Err(ProbeError::Timeout(timeout)),
        }
    }

    /// One exchange, on the kept stream if it is still good, else on a new
    /// one: the answer and the stream it came on.
    async fn exchange(
        &self,
        target: &ProbeTarget,
        kept: Option<Stream>,
    ) -> Result<(Answer, Option<Stream>), ProbeError> {
        // The kubelet may have closed a kept connection since the last
        // sweep; that is not its failure, so a kept stream that fails is
        // replaced once.
        if let Some(mut stream) = kept.and_then(|mut s| is_idle(&mut s).then_some(s)) {
            match exchange_on(&mut stream, self.request(target)).await {
                Ok(answer) => return Ok((answer, Some(stream))),
                Err(e) if !e.lost_connection() => return Err(e.into()),
                Err(_) => {}
            }
        }
        let mut stream = self.connect(target.addr).await?;
        let answer = exchange_on(&mut stream, self.request(target)).await?;
        Ok((answer, Some(stream)))
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

    async fn connect(&self, addr: SocketAddr) -> Result<Stream, ProbeError> {
        let tcp = TcpStream::connect(addr).await.map_err(|e| {
            let reason = e.to_string();
            match e.kind() {
                std::io::ErrorKind::ConnectionRefused => ProbeError::Refused { addr, reason },
                _ => ProbeError::Connect { addr, reason },
            }
        })?;
        let _ = tcp.set_nodelay(true);
        match &self.inner.tls {
            None => Ok(Stream::Plain(tcp)),
            Some(tls) => {
                let name = ServerName::IpAddress(addr.ip().into());
                let stream = tls.connect(name, tcp).await.map_err(|e| ProbeError::Tls {
                    addr,
                    reason: e.to_string(),
                })?;
                Ok(Stream::Tls(Box::new(stream)))
            }
        }
    }
}

/// Sends `request` on `stream` and reads one answer into the same buffer
/// (one allocation per probe), reading at most [`READ_CAP`] bytes.
async fn exchange_on<S>(stream: &mut S, mut buf: Vec<u8>) -> Result<Answer, AnswerError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let stream = &mut Metered {
        inner: stream,
        left: READ_CAP,
    };
    let sending = |e: io::Error| AnswerError::Send {
        kind: e.kind(),
        reason: e.to_string(),
    };
    stream.write_all(&buf).await.map_err(sending)?;
    stream.flush().await.map_err(sending)?;
    buf.clear();
    let (status, head_len, framing, keep_alive) = read_head(stream, &mut buf).await?;
    buf.drain(..head_len);
    let mut raw = buf;
    // A status that has no body (RFC 9112 section 6.3) has none, whatever its headers say.
    let framing = if status == 204 || status == 304 {
        Framing::Length(0)
    } else {
        framing
    };
    let (body, complete, exact) = match framing {
        Framing::Length(len) => {
            let want = len.min(BODY_CAP);
            while raw.len() < want {
                if read_more(stream, &mut raw, want).await? == 0 {
                    return Err(AnswerError::ClosedInside(AnswerPart::Body));
                }
            }
            let exact = raw.len() == len;
            raw.truncate(want);
            (raw, len <= BODY_CAP, exact)
        }
        Framing::Chunked => read_chunked(stream, raw).await?,
        Framing::UntilClose => {
            // Whole if the kubelet closes before the cap; one byte more tells.
            let mut ended = false;
            while raw.len() <= BODY_CAP && !ended {
                ended = read_more(stream, &mut raw, BODY_CAP + 1).await? == 0;
            }
            let complete = ended && raw.len() <= BODY_CAP;
            raw.truncate(BODY_CAP);
            (raw, complete, false)
        }
    };
    Ok(Answer {
        status,
        body,
        complete,
        // Kept only when the answer ended exactly where the stream does.
        reusable: keep_alive && complete && exact,
    })
}

/// Reads an answer's head into `buf`, skipping interim (1xx) answers, at
/// most [`HEAD_CAP`] bytes: its status, length, framing and keep-alive.
async fn read_head<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
) -> Result<(u16, usize, Framing, bool), AnswerError> {
    loop {
        if !buf.is_empty() {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut headers);
            match response.parse(buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let status = response.code.unwrap_or(0);
                    if (100..200).contains(&status) {
                        // An interim answer: drop it and read the real one.
                        buf.drain(..len);
                        continue;
                    }
                    let (framing, keep_alive) = framing_of(&response)?;
                    return Ok((status, len, framing, keep_alive));
                }
                Ok(httparse::Status::Partial) if buf.len() >= HEAD_CAP => {
                    return Err(AnswerError::HeadTooLarge)
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(AnswerError::NotHttp(e.to_string())),
            }
        }
        if read_more(stream, buf, HEAD_CAP).await? == 0 {
            return Err(if buf.is_empty() {
                AnswerError::ClosedBeforeAnswer
            } else {
                AnswerError::ClosedInside(AnswerPart::Head)
            });
        }
    }
}

/// How a response body is delimited.
#[derive(Debug, PartialEq, Eq)]
enum Framing {
    Length(usize),
    Chunked,
    UntilClose,
}

/// The framing of an answer and whether HTTP keeps its connection open.
fn framing_of(response: &httparse::Response<'_, '_>) -> Result<(Framing, bool), AnswerError> {
    let mut chunked = false;
    let mut length: Option<usize> = None;
    let mut keep = response.version == Some(1);
    for h in response.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let parsed = (!value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()))
                .then(|| value.parse::<usize>().ok())
                .flatten()
                .ok_or_else(|| AnswerError::NotHttp(format!("Content-Length {value:?}")))?;
            if length.is_some_and(|l| l != parsed) {
                return Err(AnswerError::NotHttp("two different Content-Lengths".into()));
            }
            length = Some(parsed);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.to_ascii_lowercase().ends_with("chunked");
        } else if h.name.eq_ignore_ascii_case("connection") {
            let value = value.to_ascii_lowercase();
            if value.contains("close") {
                keep = false;
            } else if value.contains("keep-alive") {
                keep = true;
            }
        }
    }
    // Transfer-Encoding wins over Content-Length (RFC 9112 section 6.3).
    let framing = match (chunked, length) {
        (true, _) => Framing::Chunked,
        (false, Some(len)) => Framing::Length(len),
        (false, None) => Framing::UntilClose,
    };
    Ok((framing, keep))
}

/// Reads a chunked body, keeping up to [`BODY_CAP`] of it: (body, read to
/// its end, and nothing after the end).
async fn read_chunked<S: AsyncRead + Unpin>(
    stream: &mut S,
    mut raw: Vec<u8>,
) -> Result<(Vec<u8>, bool, bool), AnswerError> {
    let mut body = Vec::new();
    let mut pos = 0;
    loop {
        let line_end = loop {
            if let Some(i) = find(&raw[pos..], b"\r\n") {
                break pos + i;
            }
            if raw.len() - pos > LINE_CAP {
                return Err(AnswerError::ChunkLineTooLong);
            }
            if read_more(stream, &mut raw, usize::MAX).await? == 0 {
                return Err(AnswerError::ClosedInside(AnswerPart::Body));
            }
        };
        let size = chunk_size(&raw[pos..line_end])?;
        pos = line_end + 2;
        if size == 0 {
            // Trailers, if any, end with an empty line.
            let end = loop {
                if raw[pos..].starts_with(b"\r\n") {
                    break pos + 2;
                }
                if let Some(i) = find(&raw[pos..], b"\r\n\r\n") {
                    break pos + i + 4;
                }
                if raw.len() - pos > LINE_CAP || read_more(stream, &mut raw, usize::MAX).await? == 0
                {
                    return Ok((body, true, false));
                }
            };
            let exact = end == raw.len();
            return Ok((body, true, exact));
        }
        let room = BODY_CAP - body.len();
        let Some(size) = usize::try_from(size).ok().filter(|s| *s <= room) else {
            // Over the cap: keep what fits of it; the connection goes.
            while raw.len() - pos < room {
                if read_more(stream, &mut raw, pos + room).await? == 0 {
                    return Err(AnswerError::ClosedInside(AnswerPart::Body));
                }
            }
            body.extend_from_slice(&raw[pos..pos + room]);
            return Ok((body, false, false));
        };
        while raw.len() - pos < size + 2 {
            if read_more(stream, &mut raw, usize::MAX).await? == 0 {
                return Err(AnswerError::ClosedInside(AnswerPart::Body));
            }
        }
        if &raw[pos + size..pos + size + 2] != b"\r\n" {
            return Err(AnswerError::BadChunk(
                "a chunk does not end where its size says",
            ));
        }
        body.extend_from_slice(&raw[pos..pos + size]);
        pos += size + 2;
    }
}

/// The size of a chunk from its size line (hex digits, then optional
/// whitespace and `;extensions`).
fn chunk_size(line: &[u8]) -> Result<u64, AnswerError> {
    let digits = line
        .iter()
        .position(|b| !b.is_ascii_hexdigit())
        .unwrap_or(line.len());
    let rest = &line[digits..];
    let rest_ok = rest.is_empty() || matches!(rest.trim_ascii_start().first(), Some(b';') | None);
    if digits == 0 || !rest_ok {
        return Err(AnswerError::BadChunk("a chunk size is not hex digits"));
    }
    line[..digits].iter().try_fold(0u64, |size, b| {
        let digit = (*b as char).to_digit(16).unwrap_or(0);
        size.checked_mul(16)
            .and_then(|s| s.checked_add(u64::from(digit)))
            .ok_or(AnswerError::BadChunk("a chunk size beyond 2^64"))
    })
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads what is available into `buf`, never past `limit` bytes in all;
/// returns how many bytes were read (0 at the end of the stream).
async fn read_more<S: AsyncRead + Unpin>(
    stream: &mut S,
    buf: &mut Vec<u8>,
    limit: usize,
) -> Result<usize, AnswerError> {
    let room = limit.saturating_sub(buf.len()).clamp(1, 4096);
    buf.reserve(room);
    // Read into spare capacity without zeroing it first, at most `room` bytes.
    let mut limited = (&mut *stream).take(room as u64);
    limited.read_buf(buf).await.map_err(|e| {
        if e.get_ref().is_some_and(|inner| inner.is::<OverReadCap>()) {
            AnswerError::TooLarge
        } else {
            AnswerError::Read {
                kind: e.kind(),
                reason: e.to_string(),
            }
        }
    })
}

/// What a panic said, for the failure it is recorded as.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("(no message)")
}

/// The verdict on one answer.
/// `complete` is false for a body cut at [`BODY_CAP`]: never healthy.
pub fn classify(status: u16, body: &[u8], complete: bool) -> ProbeOutcome {
    if complete && (200..300).contains(&status) && body.trim_ascii() == b"ok" {
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
    if !complete || text.chars().count() > EXCERPT_CHARS {
        excerpt.push('…');
    }
    ProbeOutcome::Unhealthy { status, excerpt }
}

// Certificates and keys are read when a prober is built, at start-up.
#[allow(clippy::disallowed_methods)]
fn read_file(flag: &'static str, path: &str) -> Result<Vec<u8>, ProbeConfigError> {
    std::fs::read(path).map_err(|source| ProbeConfigError::Read {
        flag,
        path: path.into(),
        source,
    })
}

/// The certificates of a PEM file a flag names.
fn certificates(
    flag: &'static str,
    path: &str,
) -> Result<Vec<CertificateDer<'static>>, ProbeConfigError> {
    CertificateDer::pem_slice_iter(&read_file(flag, path)?)
        .collect::<Result<_, _>>()
        .map_err(|e| ProbeConfigError::Pem {
            flag,
            path: path.into(),
            what: "certificates",
            reason: e.to_string(),
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
        let mut roots = rustls::RootCertStore::empty();
        let (added, _) = roots.add_parsable_certificates(certificates(flag, ca)?);
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
            let chain = certificates("--kubelet-client-cert", cert)?;
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
        assert_eq!(classify(200, b"ok", true), ProbeOutcome::Healthy);
        assert_eq!(classify(200, b"ok\n", true), ProbeOutcome::Healthy);
        // A body cut at the cap is never healthy, whatever it starts with.
        assert_eq!(
            classify(200, b"ok", false),
            ProbeOutcome::Unhealthy {
                status: 200,
                excerpt: "ok…".into()
            }
        );
        assert_eq!(
            classify(200, b"degraded", true),
            ProbeOutcome::Unhealthy {
                status: 200,
                excerpt: "degraded".into()
            }
        );
        let long = "x".repeat(500);
        match classify(500, long.as_bytes(), true) {
            ProbeOutcome::Unhealthy {
                status: 500,
                excerpt,
            } => assert_eq!(excerpt.chars().count(), EXCERPT_CHARS + 1),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            classify(302, b"ok", true),
            ProbeOutcome::Unhealthy { status: 302, .. }
        ));
    }

    #[test]
    fn answer_errors_read_as_they_always_did() {
        let said = |e: AnswerError| ProbeError::from(e).to_string();
        let broken = |kind| (kind, "Connection reset by peer (os error 104)".to_string());
        let (kind, reason) = broken(io::ErrorKind::ConnectionReset);
        assert_eq!(
            said(AnswerError::Send { kind, reason }),
            "sending the request: Connection reset by peer (os error 104)"
        );
        let (kind, reason) = broken(io::ErrorKind::ConnectionReset);
        assert_eq!(
            said(AnswerError::Read { kind, reason }),
            "reading the answer: Connection reset by peer (os error 104)"
        );
        for (error, text) in [
            (
                AnswerError::ClosedBeforeAnswer,
                "connection closed before an answer",
            ),
            (
                AnswerError::ClosedInside(AnswerPart::Head),
                "connection closed in the middle of the answer",
            ),
            (
                AnswerError::ClosedInside(AnswerPart::Body),
                "connection closed in the middle of the body",
            ),
            (
                AnswerError::HeadTooLarge,
                "answer headers longer than 16384 bytes",
            ),
            (
                AnswerError::TooLarge,
                "reading the answer: the answer is longer than 65536 bytes",
            ),
            (
                AnswerError::NotHttp("two different Content-Lengths".into()),
                "not an HTTP answer: two different Content-Lengths",
            ),
            (
                AnswerError::ChunkLineTooLong,
                "malformed chunked body: a chunk-size line longer than 1024 bytes",
            ),
            (
                AnswerError::BadChunk("a chunk size is not hex digits"),
                "malformed chunked body: a chunk size is not hex digits",
            ),
        ] {
            assert_eq!(said(error), text);
        }
    }

    #[test]
    fn only_a_lost_connection_is_worth_a_new_one() {
        let reset = AnswerError::Read {
            kind: io::ErrorKind::ConnectionReset,
            reason: "reset".into(),
        };
        assert!(reset.lost_connection());
        assert!(AnswerError::ClosedBeforeAnswer.lost_connection());
        for answered in [
            AnswerError::NotHttp("x".into()),
            AnswerError::TooLarge,
            AnswerError::HeadTooLarge,
            AnswerError::ClosedInside(AnswerPart::Body),
            AnswerError::BadChunk("x"),
        ] {
            assert!(!answered.lost_connection(), "{answered}");
        }
    }

    #[tokio::test]
    async fn a_bad_answer_on_a_kept_connection_is_not_asked_for_twice() {
        // Each connection answers `ok`, then garbage to the next question.
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    for answer in [OK, "SSH-2.0-OpenSSH_9.2\r\n\r\n"] {
                        if !matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                            return;
                        }
                        let _ = socket.write_all(answer.as_bytes()).await;
                    }
                    std::future::pending::<()>().await;
                });
            }
        });
        let prober = http_prober(Duration::from_secs(5));
        let target = ProbeTarget::new(addr);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        match prober.probe(&target).await {
            ProbeOutcome::NoAnswer {
                error: ProbeError::Answer(AnswerError::NotHttp(_)),
            } => {}
            other => panic!("{other:?}"),
        }
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "the kubelet's answer stands: no second connection asks again"
        );
        assert!(!target.has_connection(), "its connection is dropped");
        // The next probe asks on a new connection.
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
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
        assert!(target.has_connection());
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
        match prober.probe(&ProbeTarget::new(addr)).await {
            ProbeOutcome::NoAnswer {
                error: error @ ProbeError::Refused { .. },
            } => assert!(
                error.to_string().starts_with(&format!("connect {addr}: ")),
                "{error}"
            ),
            other => panic!("{other:?}"),
        }

        // Accepts and never answers: the timeout decides.
        let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        let prober = http_prober(Duration::from_millis(200));
        match prober.probe(&ProbeTarget::new(addr)).await {
            ProbeOutcome::NoAnswer { error } => {
                assert_eq!(error, ProbeError::Timeout(Duration::from_millis(200)));
                assert_eq!(error.to_string(), "no answer within 200ms");
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
            !target.has_connection(),
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
            target.has_connection(),
            "a complete chunked answer keeps the connection"
        );
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);

        let closing = "HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
        let addr = serve(vec![closing]).await;
        let target = ProbeTarget::new(addr);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        assert!(!target.has_connection(), "Connection: close is honoured");

        let old = "HTTP/1.0 200 OK\r\n\r\nok";
        let addr = serve(vec![old]).await;
        let target = ProbeTarget::new(addr);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        assert!(!target.has_connection());

        let garbage = "SSH-2.0-OpenSSH_9.2\r\n";
        let addr = serve(vec![garbage]).await;
        assert!(matches!(
            prober.probe(&ProbeTarget::new(addr)).await,
            ProbeOutcome::NoAnswer { .. }
        ));
    }

    #[tokio::test]
    async fn bytes_sent_between_probes_are_not_taken_for_the_next_answer() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stale_tx, stale_rx) = tokio::sync::oneshot::channel::<()>();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = accepted.clone();
        tokio::spawn(async move {
            let mut stale = Some(stale_rx);
            while let Ok((mut socket, _)) = listener.accept().await {
                count.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let stale = stale.take();
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    while matches!(socket.read(&mut buf).await, Ok(n) if n > 0) {
                        let _ = socket.write_all(OK.as_bytes()).await;
                        if let Some(stale) = stale {
                            // The first connection then says something unasked.
                            let _ = stale.await;
                            let _ = socket
                                .write_all(
                                    b"HTTP/1.1 408 Request Timeout\r\ncontent-length: 0\r\n\r\n",
                                )
                                .await;
                            break;
                        }
                    }
                    // Keep the first connection open: only its bytes are stale.
                    std::future::pending::<()>().await;
                });
            }
        });
        let prober = http_prober(Duration::from_secs(5));
        let target = ProbeTarget::new(addr);
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        stale_tx.send(()).unwrap();
        // Wait until the unasked answer has arrived on the kept stream.
        let kept = target.slot().take();
        match &kept {
            Some(Stream::Plain(tcp)) => tcp.readable().await.unwrap(),
            _ => panic!("the connection was not kept"),
        }
        *target.slot() = kept;
        assert_eq!(prober.probe(&target).await, ProbeOutcome::Healthy);
        assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
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
// Tests write and read their fixtures with std::fs: blocking a test's own
// runtime stalls nothing else.
#[allow(clippy::disallowed_methods)]
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
            ProbeOutcome::NoAnswer {
                error: error @ ProbeError::Tls { .. },
            } => assert!(error.to_string().starts_with("TLS with "), "{error}"),
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

/// The reader against whatever a kubelet may send, split however it
/// arrives, on paused time: it never panics, never reads past its caps,
/// always ends within the timeout, and reads well-formed answers right.
#[cfg(test)]
mod reader_properties {
    use super::*;
    use proptest::prelude::*;
    use std::collections::VecDeque;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const TIMEOUT: Duration = Duration::from_secs(5);

    /// The kubelet end of an in-memory stream: once a request came, `parts`
    /// arrive one read at a time, each after its delay; then `tail` repeats
    /// forever, if given, else the stream ends or (`hang`) stays silent.
    struct MockKubelet {
        parts: VecDeque<(Duration, Vec<u8>)>,
        tail: Option<Vec<u8>>,
        hang: bool,
        delay: Option<Pin<Box<tokio::time::Sleep>>>,
        read: Arc<AtomicUsize>,
        asked: bool,
        waiting: Option<Waker>,
    }

    impl AsyncRead for MockKubelet {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if !this.asked {
                this.waiting = Some(cx.waker().clone());
                return Poll::Pending;
            }
            if let Some((delay, _)) = this.parts.front_mut() {
                if !delay.is_zero() {
                    let wait = *delay;
                    let sleep = this
                        .delay
                        .get_or_insert_with(|| Box::pin(tokio::time::sleep(wait)));
                    std::task::ready!(sleep.as_mut().poll(cx));
                    this.delay = None;
                    *delay = Duration::ZERO;
                }
            }
            let n = match (this.parts.front_mut(), &this.tail) {
                (Some((_, part)), _) => {
                    let n = part.len().min(buf.remaining());
                    buf.put_slice(&part[..n]);
                    part.drain(..n);
                    if part.is_empty() {
                        this.parts.pop_front();
                    }
                    n
                }
                (None, Some(tail)) => {
                    let n = tail.len().min(buf.remaining());
                    buf.put_slice(&tail[..n]);
                    n
                }
                (None, None) if this.hang => return Poll::Pending,
                (None, None) => 0,
            };
            this.read.fetch_add(n, Ordering::Relaxed);
            Poll::Ready(Ok(()))
        }
    }

    impl AsyncWrite for MockKubelet {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            this.asked = true;
            if let Some(waker) = this.waiting.take() {
                waker.wake();
            }
            Poll::Ready(Ok(buf.len()))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    /// What one exchange did: its result (the answer and whether the stream
    /// was kept), the bytes it read and the (paused) time it took.
    struct Run {
        result: Result<(Answer, bool), ProbeError>,
        read: usize,
        took: Duration,
    }

    fn run(parts: Vec<(Duration, Vec<u8>)>, tail: Option<Vec<u8>>, hang: bool) -> Run {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        runtime.block_on(async {
            let prober = Prober::new(&ProbeConfig {
                scheme: Scheme::Http,
                timeout: TIMEOUT,
                ..ProbeConfig::default()
            })
            .unwrap();
            let read = Arc::new(AtomicUsize::new(0));
            let kubelet = MockKubelet {
                parts: parts.into_iter().filter(|(_, p)| !p.is_empty()).collect(),
                tail: tail.filter(|t| !t.is_empty()),
                hang,
                delay: None,
                read: read.clone(),
                asked: false,
                waiting: None,
            };
            let mut kubelet = kubelet;
            let request = prober.request(&ProbeTarget::new(([127, 0, 0, 1], 10250).into()));
            let started = tokio::time::Instant::now();
            let exchange = async { Ok(exchange_on(&mut kubelet, request).await?) };
            let result = prober.bounded(exchange).await.map(|answer| {
                let kept = answer.reusable;
                (answer, kept)
            });
            Run {
                result,
                read: read.load(Ordering::Relaxed),
                took: started.elapsed(),
            }
        })
    }

    /// What must hold whatever came in.
    fn check_bounds(run: &Run) -> Result<(), TestCaseError> {
        prop_assert!(run.read <= READ_CAP, "read {} bytes", run.read);
        prop_assert!(run.took <= TIMEOUT, "took {:?}", run.took);
        match &run.result {
            Ok((answer, kept)) => {
                prop_assert!(answer.body.len() <= BODY_CAP);
                prop_assert!(!kept || answer.complete, "a cut answer's stream was kept");
            }
            Err(e) => prop_assert!(!matches!(e, ProbeError::Panicked(_)), "{e}"),
        }
        Ok(())
    }

    /// `bytes` cut at `cuts`, each part after a delay from `delays`.
    fn split(
        bytes: &[u8],
        cuts: &[prop::sample::Index],
        delays: &[Duration],
    ) -> Vec<(Duration, Vec<u8>)> {
        let mut at: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
        at.extend([0, bytes.len()]);
        at.sort_unstable();
        at.dedup();
        at.windows(2)
            .enumerate()
            .map(|(i, w)| {
                let delay = delays.get(i).copied().unwrap_or_default();
                (delay, bytes[w[0]..w[1]].to_vec())
            })
            .collect()
    }

    fn delay() -> impl Strategy<Value = Duration> {
        prop_oneof![
            4 => Just(Duration::ZERO),
            1 => (0u64..7000).prop_map(Duration::from_millis),
        ]
    }

    fn cuts() -> impl Strategy<Value = Vec<prop::sample::Index>> {
        prop::collection::vec(any::<prop::sample::Index>(), 0..12)
    }

    fn status_line() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            (
                prop::sample::select(vec![
                    "HTTP/1.1",
                    "HTTP/1.0",
                    "HTTP/2",
                    "HTTP/1.1x",
                    "http/1.1",
                    ""
                ]),
                0u16..1000,
                "[ -~]{0,12}",
            )
                .prop_map(|(v, code, reason)| format!("{v} {code} {reason}\r\n").into_bytes()),
            "[ -~]{0,40}\r?\n".prop_map(String::into_bytes),
        ]
    }

    fn header() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            Just(b"transfer-encoding: chunked\r\n".to_vec()),
            Just(b"Transfer-Encoding: gzip, chunked\r\n".to_vec()),
            any::<u64>().prop_map(|n| format!("content-length: {n}\r\n").into_bytes()),
            (0u64..8000).prop_map(|n| format!("Content-Length: {n}\r\n").into_bytes()),
            Just(b"connection: close\r\n".to_vec()),
            Just(b"connection: keep-alive\r\n".to_vec()),
            "[a-zA-Z-]{1,12}: [ -~]{0,30}\r\n".prop_map(String::into_bytes),
            prop::collection::vec(any::<u8>(), 0..40),
        ]
    }

    fn chunk() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            // Honest chunks.
            prop::collection::vec(any::<u8>(), 1..300).prop_map(|d| {
                let mut c = format!("{:x}\r\n", d.len()).into_bytes();
                c.extend(d);
                c.extend(b"\r\n");
                c
            }),
            // Sizes that lie, up to 2^64 - 1.
            (any::<u64>(), prop::collection::vec(any::<u8>(), 0..64)).prop_map(|(size, d)| {
                let mut c = format!("{size:x}\r\n").into_bytes();
                c.extend(d);
                c
            }),
            Just(b"ffffffffffffffff\r\nabc".to_vec()),
            Just(b"10000000000000000\r\n".to_vec()),
            "0{1,60}[1-9a-f]?( |\t){0,4}(;[ -~]{0,40})?\r\n".prop_map(String::into_bytes),
            Just(b"0\r\n\r\n".to_vec()),
            Just(b"0\r\nx-trailer: 1\r\n\r\n".to_vec()),
            prop::collection::vec(any::<u8>(), 0..32),
        ]
    }

    /// Something like an HTTP answer, well-formed or not in any part.
    fn http_like() -> impl Strategy<Value = Vec<u8>> {
        (
            status_line(),
            prop::collection::vec(header(), 0..6),
            any::<bool>(),
            prop::collection::vec(chunk(), 0..8),
        )
            .prop_map(|(status, headers, blank, chunks)| {
                let mut bytes = status;
                headers.into_iter().for_each(|h| bytes.extend(h));
                if blank {
                    bytes.extend(b"\r\n");
                }
                chunks.into_iter().for_each(|c| bytes.extend(c));
                bytes
            })
    }

    /// A well-formed answer: (bytes, status, body, whether hyper keeps the connection).
    fn well_formed() -> impl Strategy<Value = (Vec<u8>, u16, Vec<u8>, bool)> {
        (
            (200u16..600).prop_filter("no body allowed", |s| *s != 204 && *s != 304),
            prop_oneof![
                3 => prop::collection::vec(any::<u8>(), 0..64),
                1 => prop::collection::vec(any::<u8>(), 0..6000),
            ],
            any::<bool>(),
            prop::collection::vec(1usize..700, 0..20),
            prop_oneof![Just("HTTP/1.1"), Just("HTTP/1.0")],
            any::<bool>(),
        )
            .prop_map(|(status, body, chunked, sizes, version, close)| {
                let mut bytes = format!("{version} {status} Whatever\r\n").into_bytes();
                if close {
                    bytes.extend(b"Connection: close\r\n");
                } else if version == "HTTP/1.0" {
                    bytes.extend(b"Connection: keep-alive\r\n");
                }
                if chunked && version == "HTTP/1.1" {
                    bytes.extend(b"Transfer-Encoding: chunked\r\n\r\n");
                    let mut rest = &body[..];
                    let mut sizes = sizes.into_iter();
                    while !rest.is_empty() {
                        let n = sizes.next().unwrap_or(rest.len()).min(rest.len());
                        bytes.extend(format!("{n:X};ext=1\r\n").as_bytes());
                        bytes.extend(&rest[..n]);
                        bytes.extend(b"\r\n");
                        rest = &rest[n..];
                    }
                    bytes.extend(b"0\r\n\r\n");
                } else {
                    bytes.extend(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
                    bytes.extend(&body);
                }
                (bytes, status, body, !close)
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(384))]

        #[test]
        fn arbitrary_bytes_stay_within_bounds(
            bytes in prop::collection::vec(any::<u8>(), 0..3000),
            cuts in cuts(),
            delays in prop::collection::vec(delay(), 0..12),
            hang in any::<bool>(),
        ) {
            check_bounds(&run(split(&bytes, &cuts, &delays), None, hang))?;
        }

        #[test]
        fn http_like_answers_stay_within_bounds(
            bytes in http_like(),
            cuts in cuts(),
            delays in prop::collection::vec(delay(), 0..12),
            hang in any::<bool>(),
        ) {
            check_bounds(&run(split(&bytes, &cuts, &delays), None, hang))?;
        }

        #[test]
        fn endless_answers_stop_at_the_caps(
            head in http_like(),
            tail in prop::collection::vec(any::<u8>(), 1..24),
        ) {
            check_bounds(&run(vec![(Duration::ZERO, head)], Some(tail), false))?;
        }

        #[test]
        fn well_formed_answers_are_read_whole_or_cut_at_the_cap(
            (bytes, status, body, keep_alive) in well_formed(),
            cuts in cuts(),
            delays in prop::collection::vec(delay(), 0..12),
            hang in any::<bool>(),
        ) {
            let waited: Duration = delays.iter().sum();
            let outcome = run(split(&bytes, &cuts, &delays), None, hang);
            check_bounds(&outcome)?;
            match &outcome.result {
                Ok((answer, kept)) => {
                    prop_assert_eq!(answer.status, status);
                    let cut = body.len().min(BODY_CAP);
                    prop_assert_eq!(&answer.body[..], &body[..cut]);
                    prop_assert_eq!(answer.complete, body.len() <= BODY_CAP);
                    // Kept only when HTTP allows it and the body was read whole.
                    prop_assert_eq!(*kept, keep_alive && answer.complete);
                }
                Err(e) => {
                    prop_assert!(waited >= TIMEOUT, "{e} (after {waited:?} of delays)");
                    prop_assert_eq!(e, &ProbeError::Timeout(TIMEOUT));
                }
            }
        }
    }

    #[test]
    fn a_chunk_size_near_2_pow_64_is_a_cut_answer_not_a_panic() {
        let evil = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n2\r\nok\r\nffffffffffffffff\r\nabc";
        for hang in [false, true] {
            let outcome = run(vec![(Duration::ZERO, evil.to_vec())], None, hang);
            match &outcome.result {
                Ok((answer, kept)) => {
                    assert!(!answer.complete && !kept, "{answer:?}");
                    assert_ne!(
                        classify(answer.status, &answer.body, answer.complete),
                        ProbeOutcome::Healthy
                    );
                }
                Err(e) => assert!(!matches!(e, ProbeError::Panicked(_)), "{e}"),
            }
        }
    }

    #[test]
    fn framing_that_never_ends_stops_at_a_cap() {
        let head = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        // Endless zeros of a chunk size, spaces after it, an extension.
        for (start, tail) in [(&b""[..], &b"0"[..]), (b"1", b" "), (b"1", b";x")] {
            let mut answer = head.clone();
            answer.extend(start);
            let outcome = run(vec![(Duration::ZERO, answer)], Some(tail.to_vec()), false);
            assert!(outcome.read <= READ_CAP);
            match outcome.result {
                Err(e) => assert!(
                    matches!(
                        e,
                        ProbeError::Answer(AnswerError::TooLarge | AnswerError::ChunkLineTooLong)
                    ),
                    "{tail:?}: {e}"
                ),
                Ok((answer, _)) => panic!("{tail:?} taken for an answer: {answer:?}"),
            }
        }
        // Endless headers stop at the head cap.
        let outcome = run(
            vec![(Duration::ZERO, b"HTTP/1.1 200 OK\r\n".to_vec())],
            Some(format!("x-padding: {}\r\n", "0".repeat(1000)).into_bytes()),
            false,
        );
        assert!(outcome.read <= READ_CAP);
        let e = outcome.result.err().unwrap();
        assert_eq!(e, ProbeError::Answer(AnswerError::HeadTooLarge));
        // One-byte chunks: the body cap comes first, and the stream is not kept.
        let outcome = run(
            vec![(Duration::ZERO, head.clone())],
            Some(b"1\r\nx\r\n".to_vec()),
            false,
        );
        let (answer, kept) = outcome.result.unwrap();
        assert_eq!(answer.body, vec![b'x'; BODY_CAP]);
        assert!(!answer.complete && !kept);
        // Chunks of one byte under long extensions, each line within its
        // cap: the read cap ends it long before the body cap.
        let mut chunk = b"1;".to_vec();
        chunk.extend(vec![b'x'; 1000]);
        chunk.extend(b"\r\nx\r\n");
        let outcome = run(vec![(Duration::ZERO, head)], Some(chunk), false);
        assert!(outcome.read <= READ_CAP);
        let e = outcome.result.err().unwrap();
        assert_eq!(e, ProbeError::Answer(AnswerError::TooLarge));
    }
}
