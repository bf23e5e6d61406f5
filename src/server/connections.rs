//! The API's open connections: what each one is doing (serving requests,
//! idle between them, or sending a request's headers), so the server can
//! time out the idle and the slow, and close the longest-idle one when a new
//! client needs its slot.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;

/// How long a new connection that has not yet begun its first request is
/// spared when the cap needs room. Its request may be in the socket and not
/// yet read (on a busy machine the accept loop runs ahead of the
/// connections' tasks); closed then, the client sees its request cut
/// without an answer. A connection that sends nothing is still closed by
/// the header timeout, and after this grace may make room like an idle one.
const FIRST_REQUEST_GRACE: Duration = Duration::from_secs(2);

/// The accept queue asked of the kernel, which cuts it to
/// `net.core.somaxconn` (4096 on Linux 5.4 and later). kube-apiserver
/// listens with the same: Go's net package asks for somaxconn
/// (golang/go src/net/sock_linux.go, `maxListenerBacklog`), at most
/// 65535 because older kernels keep the backlog in 16 bits. tokio's
/// `TcpListener::bind` asks for 1024: when thousands of kubelets reconnect
/// at once, as after a restart, the queue fills behind the TLS handshakes
/// and the kernel drops the rest's handshakes, which clients send again
/// only after 1 s, then 3 s.
const ACCEPT_BACKLOG: u32 = 65_535;

/// Listens on `addr` as `TcpListener::bind` does (SO_REUSEADDR, so a
/// restart does not wait for the old connections' TIME_WAIT), with the
/// kernel's largest accept queue.
pub(crate) fn listen(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(ACCEPT_BACKLOG)
}

/// Every open connection of one server, and the cap on their number.
pub(crate) struct Connections {
    cap: usize,
    table: Mutex<HashMap<u64, Arc<Connection>>>,
    next_id: AtomicU64,
    open: AtomicUsize,
    /// A connection closed or fell idle: the accept loop may find room.
    changed: Notify,
    epoch: Instant,
    metrics: Option<Arc<Metrics>>,
}

/// The connection a request came on (a request extension): who a caller
/// without a token is, for the request budgets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ConnectionId(pub u64);

/// One connection's state, shared by its task, its IO and its requests.
pub(crate) struct Connection {
    id: u64,
    epoch: Instant,
    /// Requests being served (HTTP/2 streams, or the one HTTP/1 request),
    /// each until its response body is sent.
    active: AtomicUsize,
    /// When it last fell idle (or was accepted), in ms since `epoch`.
    idle_since: AtomicU64,
    /// When it was accepted, in ms since `epoch`.
    accepted: u64,
    /// It has begun at least one request.
    served: AtomicBool,
    /// When the first byte of a request's headers arrived while idle (ms
    /// since `epoch`, plus one; 0 when no request is being read).
    head_started: AtomicU64,
    http2: AtomicBool,
    evicted: AtomicBool,
    /// Response bodies that wait for the client to take what they gave
    /// (see [`Sending`]).
    waiting: AtomicUsize,
    /// When a response body was last asked for more, in ms since `epoch`.
    progress: AtomicU64,
    /// Closed for taking nothing of its responses for too long.
    stalled: AtomicBool,
    /// Cancelled to close the connection gracefully (evicted or stalled).
    pub close: CancellationToken,
    table: Arc<Connections>,
}

/// What a connection must do next, and by when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Deadline {
    /// Serving a request: the request's own limits apply.
    None,
    /// Idle between requests: closed gracefully at this instant.
    Idle(Instant),
    /// Reading a request's headers: cut at this instant.
    Headers(Instant),
}

impl Connections {
    pub fn new(cap: usize, metrics: Option<Arc<Metrics>>) -> Arc<Connections> {
        Arc::new(Connections {
            cap: cap.max(1),
            table: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            open: AtomicUsize::new(0),
            changed: Notify::new(),
            epoch: Instant::now(),
            metrics,
        })
    }

    fn table(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Connection>>> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn len(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }

    /// Waits until a new connection can be admitted: below the cap, or an
    /// idle connection can be closed to make room.
    pub async fn room(&self) {
        loop {
            let changed = self.changed.notified();
            if self.len() < self.cap {
                return;
            }
            let now = self.now_ms();
            let mut spared_until: Option<u64> = None;
            for c in self.table().values() {
                if c.evictable(now) {
                    return;
                }
                if let Some(until) = c.spared_until() {
                    spared_until = Some(spared_until.map_or(until, |u| u.min(until)));
                }
            }
            match spared_until {
                // A new connection's grace ends: look again then.
                Some(until) => {
                    let at = self.epoch + Duration::from_millis(until);
                    tokio::select! {
                        _ = changed => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                None => changed.await,
            }
        }
    }

    /// Admits a new connection; at the cap, the longest-idle connection is
    /// closed to make room for it. The connection counts until its [`Slot`]
    /// drops.
    pub fn admit(self: &Arc<Self>) -> Slot {
        let now = self.now_ms();
        let connection = Arc::new(Connection {
            id: self.next_id.fetch_add(1, Ordering::Relaxed),
            epoch: self.epoch,
            active: AtomicUsize::new(0),
            idle_since: AtomicU64::new(now),
            accepted: now,
            served: AtomicBool::new(false),
            // The first request's headers are due from the moment it connects.
            head_started: AtomicU64::new(now + 1),
            http2: AtomicBool::new(false),
            evicted: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            progress: AtomicU64::new(now),
            stalled: AtomicBool::new(false),
            close: CancellationToken::new(),
            table: self.clone(),
        });
        let mut table = self.table();
        if table.len() >= self.cap {
            let longest_idle = table
                .values()
                .filter(|c| c.evictable(now))
                .min_by_key(|c| c.last_sign_of_life())
                .cloned();
            if let Some(idle) = longest_idle {
                idle.evicted.store(true, Ordering::Relaxed);
                idle.close.cancel();
                if let Some(m) = &self.metrics {
                    m.http_connections_evicted.inc();
                }
            }
        }
        table.insert(connection.id, connection.clone());
        self.count(table.len());
        Slot { connection }
    }

    fn remove(&self, id: u64) {
        let mut table = self.table();
        table.remove(&id);
        self.count(table.len());
        drop(table);
        self.changed.notify_waiters();
    }

    /// Notes how many connections are open.
    fn count(&self, open: usize) {
        self.open.store(open, Ordering::Relaxed);
        if let Some(m) = &self.metrics {
            m.http_connections.set(open as i64);
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// Closes (gracefully, so cut after the shutdown grace) every connection
    /// whose responses have waited on the client for longer than `limit`
    /// without it taking anything: a reader that does not read loses what
    /// it holds (its requests' places in the budgets, the lists they pin).
    /// Returns how many it closed.
    pub fn close_stalled(&self, limit: Duration) -> usize {
        let now = self.now_ms();
        let limit = limit.as_millis() as u64;
        let mut closed = 0;
        for c in self.table().values() {
            let stalled = c.waiting.load(Ordering::Relaxed) > 0
                && now.saturating_sub(c.progress.load(Ordering::Relaxed)) > limit;
            if stalled && !c.stalled.swap(true, Ordering::Relaxed) {
                c.close.cancel();
                closed += 1;
            }
        }
        if closed > 0 {
            if let Some(m) = &self.metrics {
                m.http_connections_stalled.inc_by(closed as u64);
            }
            tracing::info!(
                connections = closed,
                "closing connections whose clients took nothing of their responses for {}s",
                limit / 1000
            );
        }
        closed
    }
}

impl Connection {
    /// Idle, not yet told to close, and not a new connection whose first
    /// request may not have been read yet: may be closed to make room.
    fn evictable(&self, now: u64) -> bool {
        self.active.load(Ordering::Relaxed) == 0
            && !self.evicted.load(Ordering::Relaxed)
            && self.spared_until().is_none_or(|until| now >= until)
    }

    /// Until when (ms since `epoch`) a connection that has not begun a
    /// request yet is spared; `None` once it has begun one.
    fn spared_until(&self) -> Option<u64> {
        (!self.served.load(Ordering::Relaxed))
            .then(|| self.accepted + FIRST_REQUEST_GRACE.as_millis() as u64)
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    /// When it last fell idle or began sending a request: the connection
    /// quiet the longest is the one closed to make room.
    fn last_sign_of_life(&self) -> u64 {
        let head = self.head_started.load(Ordering::Relaxed).saturating_sub(1);
        self.idle_since.load(Ordering::Relaxed).max(head)
    }

    fn at(&self, ms: u64) -> Instant {
        self.epoch + Duration::from_millis(ms)
    }

    /// Marks the connection as speaking HTTP/2: no header deadline (HTTP/2
    /// has its own pings), and its writes are passed through untouched.
    pub fn set_http2(&self) {
        self.http2.store(true, Ordering::Relaxed);
        self.head_started.store(0, Ordering::Relaxed);
    }

    pub fn is_http2(&self) -> bool {
        self.http2.load(Ordering::Relaxed)
    }

    pub fn id(&self) -> ConnectionId {
        ConnectionId(self.id)
    }

    /// A request arrived: counted until the returned guard drops with its
    /// response body.
    pub fn begin_request(self: &Arc<Self>) -> RequestActivity {
        self.active.fetch_add(1, Ordering::Relaxed);
        self.served.store(true, Ordering::Relaxed);
        self.head_started.store(0, Ordering::Relaxed);
        RequestActivity {
            connection: self.clone(),
        }
    }

    /// Bytes arrived: if the connection was idle, a request's headers have begun.
    fn bytes_arrived(&self) {
        if self.is_http2()
            || self.active.load(Ordering::Relaxed) != 0
            || self.head_started.load(Ordering::Relaxed) != 0
        {
            return;
        }
        self.head_started
            .store(self.now_ms() + 1, Ordering::Relaxed);
    }

    /// The deadline in force now.
    pub fn deadline(&self, header_read_timeout: Duration, idle_timeout: Duration) -> Deadline {
        if self.active.load(Ordering::Relaxed) != 0 {
            return Deadline::None;
        }
        match self.head_started.load(Ordering::Relaxed) {
            0 => Deadline::Idle(self.at(self.idle_since.load(Ordering::Relaxed)) + idle_timeout),
            started => Deadline::Headers(self.at(started - 1) + header_read_timeout),
        }
    }
}

/// A connection's place in the table: held by its task, freed on drop.
pub(crate) struct Slot {
    connection: Arc<Connection>,
}

impl std::ops::Deref for Slot {
    type Target = Arc<Connection>;

    fn deref(&self) -> &Arc<Connection> {
        &self.connection
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.connection.table.remove(self.connection.id);
    }
}

/// Keeps a request counted on its connection; dropped with its response body.
pub(crate) struct RequestActivity {
    connection: Arc<Connection>,
}

/// A response body on its way to the client: keeps its request counted on
/// the connection until it is sent or dropped, and tells the connection
/// whether it waits on the client (it gave a chunk the connection has not
/// asked past yet: the client's window or socket is full) or on the server
/// (a watch between events), so a client that takes nothing can be told
/// from one that waits for news.
pub(crate) struct Sending {
    body: axum::body::Body,
    activity: RequestActivity,
    waiting: bool,
}

impl Sending {
    pub fn new(body: axum::body::Body, activity: RequestActivity) -> Sending {
        // Handed out with its head: the client's to take from now.
        activity.connection.waiting.fetch_add(1, Ordering::Relaxed);
        Sending {
            body,
            activity,
            waiting: true,
        }
    }

    fn set_waiting(&mut self, waiting: bool) {
        if self.waiting != waiting {
            self.waiting = waiting;
            let c = &self.activity.connection.waiting;
            if waiting {
                c.fetch_add(1, Ordering::Relaxed);
            } else {
                c.fetch_sub(1, Ordering::Relaxed);
            }
        }
    }
}

impl hyper::body::Body for Sending {
    type Data = axum::body::Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        let c = &self.activity.connection;
        c.progress.store(c.now_ms(), Ordering::Relaxed);
        self.set_waiting(false);
        let frame = Pin::new(&mut self.body).poll_frame(cx);
        if let Poll::Ready(Some(Ok(_))) = &frame {
            self.set_waiting(true);
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        self.set_waiting(false);
    }
}

impl Drop for RequestActivity {
    fn drop(&mut self) {
        let c = &self.connection;
        c.idle_since.store(c.now_ms(), Ordering::Relaxed);
        if c.active.fetch_sub(1, Ordering::Relaxed) == 1 && c.table.len() >= c.table.cap {
            c.table.changed.notify_waiters();
        }
    }
}

/// An HTTP/1.1 connection's byte stream, watched. Its deadlines are kept
/// where hyper reads, so they cost no wake-up of their own: a request's
/// headers must arrive within the header timeout of their first byte (or of
/// the connect), else the read fails; an idle connection reads as closed
/// once the idle timeout passes. hyper's own bodiless error answers (400,
/// 414, 431 for a request it cannot parse) are rewritten into Kubernetes
/// `Status` objects. HTTP/2 streams pass through untouched.
pub(crate) struct WatchedIo<I> {
    io: I,
    connection: Arc<Connection>,
    header_read_timeout: Duration,
    idle_timeout: Duration,
    /// Wakes hyper's read at the deadline in force, if any.
    timer: Option<(Pin<Box<tokio::time::Sleep>>, Instant)>,
    /// A rewritten answer still to be written, and how much of it is out.
    pending: Option<(Vec<u8>, usize)>,
}

impl<I> WatchedIo<I> {
    pub fn new(
        io: I,
        connection: Arc<Connection>,
        header_read_timeout: Duration,
        idle_timeout: Duration,
    ) -> WatchedIo<I> {
        WatchedIo {
            io,
            connection,
            header_read_timeout,
            idle_timeout,
            timer: None,
            pending: None,
        }
    }

    /// Arms the timer for `at`; whether it has gone off.
    fn timer_fired(&mut self, at: Instant, cx: &mut Context<'_>) -> bool {
        match &mut self.timer {
            Some((_, armed)) if *armed == at => {}
            Some((sleep, armed)) => {
                sleep.as_mut().reset(at);
                *armed = at;
            }
            None => self.timer = Some((Box::pin(tokio::time::sleep_until(at)), at)),
        }
        let (sleep, _) = self.timer.as_mut().expect("armed above");
        sleep.as_mut().poll(cx).is_ready()
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for WatchedIo<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.io).poll_read(cx, buf);
        if self.connection.is_http2() {
            return result;
        }
        match result {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.connection.bytes_arrived();
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                let deadline = self
                    .connection
                    .deadline(self.header_read_timeout, self.idle_timeout);
                match deadline {
                    // Serving: hyper may not read again once the response is
                    // out, so look again within an idle timeout.
                    Deadline::None => {
                        let now = Instant::now();
                        let at = match &self.timer {
                            Some((_, armed)) if *armed > now => *armed,
                            _ => now + self.idle_timeout,
                        };
                        if self.timer_fired(at, cx) {
                            cx.waker().wake_by_ref();
                        }
                        Poll::Pending
                    }
                    Deadline::Headers(at) if self.timer_fired(at, cx) => {
                        Poll::Ready(Err(io::Error::new(
                            io::ErrorKind::TimedOut,
                            format!(
                                "request headers not received within {:?}",
                                self.header_read_timeout
                            ),
                        )))
                    }
                    // Read as the client closing: hyper then closes an idle
                    // connection the ordinary way.
                    Deadline::Idle(at) if self.timer_fired(at, cx) => Poll::Ready(Ok(())),
                    Deadline::Headers(_) | Deadline::Idle(_) => Poll::Pending,
                }
            }
            ready => ready,
        }
    }
}

impl<I: AsyncWrite + Unpin> WatchedIo<I> {
    /// Writes out a rewritten answer; ready once it is all out.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while let Some((bytes, written)) = &mut self.pending {
            if *written == bytes.len() {
                self.pending = None;
                break;
            }
            let n = std::task::ready!(Pin::new(&mut self.io).poll_write(cx, &bytes[*written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            *written += n;
        }
        Poll::Ready(Ok(()))
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for WatchedIo<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.poll_pending(cx))?;
        if !self.connection.is_http2() {
            if let Some(answer) = parse_error_as_status(buf) {
                // Taken in full: hyper closes the connection after it.
                self.pending = Some((answer, 0));
                std::task::ready!(self.poll_pending(cx))?;
                return Poll::Ready(Ok(buf.len()));
            }
        }
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_shutdown(cx)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // hyper writes a head alone, in one slice, when no body follows.
        let mut slices = bufs.iter().filter(|b| !b.is_empty());
        if let (Some(only), None) = (slices.next(), slices.next()) {
            return self.poll_write(cx, only);
        }
        std::task::ready!(self.poll_pending(cx))?;
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }
}

/// If `head` is hyper's own answer to a request it could not parse (a
/// whole response head, status 400, 414 or 431, with an empty body), the
/// same answer with a `Status` body.
fn parse_error_as_status(head: &[u8]) -> Option<Vec<u8>> {
    if !head.starts_with(b"HTTP/1.") || head.len() > 1024 {
        return None;
    }
    let mut headers = [httparse::EMPTY_HEADER; 16];
    let mut response = httparse::Response::new(&mut headers);
    let httparse::Status::Complete(len) = response.parse(head).ok()? else {
        return None;
    };
    let code = response.code?;
    let empty = response
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("content-length") && h.value == b"0");
    if len != head.len() || !empty {
        return None;
    }
    let (reason, message) = match code {
        400 => (
            "BadRequest",
            "the request could not be parsed as HTTP/1.1 (its request line or headers are malformed)",
        ),
        414 => (
            "RequestURITooLong",
            "the request URI is too long; put long selectors in fewer, shorter parameters",
        ),
        431 => (
            "RequestHeaderFieldsTooLarge",
            "the request headers are too large or too many",
        ),
        _ => return None,
    };
    let status = crate::k8s::status_error(code, reason, message, None, None);
    let body = serde_json::to_vec(&status).ok()?;
    let phrase = axum::http::StatusCode::from_u16(code)
        .ok()
        .and_then(|c| c.canonical_reason())
        .unwrap_or("");
    let mut answer = format!(
        "HTTP/1.1 {code} {phrase}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    answer.extend_from_slice(&body);
    Some(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel completes a client's handshake into the accept queue
    /// before the server accepts it: with tokio's 1024, the 1,026th
    /// connection of a burst waits a second for its SYN to be sent again.
    #[tokio::test]
    async fn a_burst_of_connections_queues_beyond_tokios_default_backlog() {
        const BURST: usize = 2_000;
        let listener = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listener.local_addr().unwrap();
        let mut clients = Vec::with_capacity(BURST);
        for i in 0..BURST {
            // Queued by the kernel, unaccepted: it answers at once; a
            // dropped SYN is only sent again after a second.
            let connect = tokio::time::timeout(
                Duration::from_millis(900),
                tokio::net::TcpStream::connect(addr),
            );
            match connect.await {
                Ok(Ok(stream)) => clients.push(stream),
                other => panic!(
                    "connection {i} of {BURST} not queued ({other:?}): the accept \
                     queue is short; this needs net.core.somaxconn >= {BURST} \
                     (Linux 5.4 and later default to 4096)"
                ),
            }
        }
        drop(listener);
    }

    #[test]
    fn only_hypers_bodiless_parse_error_answers_are_rewritten() {
        let hyper_431 =
            b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\ndate: Mon, 30 Nov 2026 11:28:40 GMT\r\n\r\n";
        let answer = String::from_utf8(parse_error_as_status(hyper_431).unwrap()).unwrap();
        assert!(
            answer.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
            "{answer}"
        );
        let body = answer.split("\r\n\r\n").nth(1).unwrap();
        let status: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["code"], 431);
        assert_eq!(status["reason"], "RequestHeaderFieldsTooLarge");
        assert!(answer.contains(&format!("content-length: {}\r\n", body.len())));

        for (code, reason) in [(400, "BadRequest"), (414, "RequestURITooLong")] {
            let head = format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\n\r\n");
            let answer =
                String::from_utf8(parse_error_as_status(head.as_bytes()).unwrap()).unwrap();
            assert!(answer.contains(reason), "{answer}");
        }
        // Anything else goes through untouched.
        for other in [
            &b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n"[..],
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 12\r\n\r\n",
            b"HTTP/1.1 431 X\r\ncontent-length: 0\r\n\r\n{\"more\": 1}",
            b"HTTP/1.1 414 X\r\ncontent-length: 0\r\n",
            b"{\"kind\":\"Status\"}",
            b"",
        ] {
            assert_eq!(
                parse_error_as_status(other),
                None,
                "{:?}",
                String::from_utf8_lossy(other)
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn deadlines_follow_what_the_connection_does() {
        let header = Duration::from_secs(10);
        let idle = Duration::from_secs(90);
        let table = Connections::new(2, None);
        let start = Instant::now();
        let c = table.admit();
        // A new connection owes its first request's headers at once.
        assert_eq!(c.deadline(header, idle), Deadline::Headers(start + header));
        let request = c.begin_request();
        assert_eq!(c.deadline(header, idle), Deadline::None);
        tokio::time::advance(Duration::from_secs(3)).await;
        drop(request);
        assert_eq!(
            c.deadline(header, idle),
            Deadline::Idle(start + Duration::from_secs(3) + idle)
        );
        tokio::time::advance(Duration::from_secs(5)).await;
        c.bytes_arrived();
        assert_eq!(
            c.deadline(header, idle),
            Deadline::Headers(start + Duration::from_secs(8) + header)
        );
        // More bytes of the same headers do not move the deadline.
        tokio::time::advance(Duration::from_secs(1)).await;
        c.bytes_arrived();
        assert_eq!(
            c.deadline(header, idle),
            Deadline::Headers(start + Duration::from_secs(8) + header)
        );
        let _second = c.begin_request();
        // HTTP/2 connections have no header deadline.
        let h2 = table.admit();
        h2.set_http2();
        h2.bytes_arrived();
        assert!(matches!(h2.deadline(header, idle), Deadline::Idle(_)));
    }

    #[tokio::test(start_paused = true)]
    async fn at_the_cap_the_longest_idle_connection_makes_room() {
        let table = Connections::new(3, None);
        let busy = table.admit();
        let _serving = busy.begin_request();
        let old_idle = table.admit();
        tokio::time::advance(FIRST_REQUEST_GRACE).await;
        let new_idle = table.admit();
        assert_eq!(table.len(), 3);
        // Room: an idle connection can go.
        tokio::time::timeout(Duration::from_millis(1), table.room())
            .await
            .unwrap();
        let fourth = table.admit();
        assert!(old_idle.close.is_cancelled());
        assert!(!new_idle.close.is_cancelled() && !busy.close.is_cancelled());
        // The evicted one counts until it has closed.
        assert_eq!(table.len(), 4);
        drop(old_idle);
        assert_eq!(table.len(), 3);
        let _fourth_serving = fourth.begin_request();
        let _new_serving = new_idle.begin_request();
        // Every connection busy: no room until one falls idle.
        assert!(tokio::time::timeout(Duration::from_secs(1), table.room())
            .await
            .is_err());
        let waiting = tokio::spawn({
            let table = table.clone();
            async move { table.room().await }
        });
        tokio::task::yield_now().await;
        drop(_new_serving);
        tokio::time::timeout(Duration::from_secs(1), waiting)
            .await
            .expect("room once a connection falls idle")
            .unwrap();
    }

    /// A burst of clients beyond the cap: the new connections, whose
    /// requests may be unread in their sockets, are not cut to make room;
    /// the next waits, and a connection that never sends anything makes
    /// room once its grace is over.
    #[tokio::test(start_paused = true)]
    async fn at_the_cap_new_connections_are_spared_their_first_request() {
        let table = Connections::new(2, None);
        let first = table.admit();
        tokio::time::advance(Duration::from_millis(500)).await;
        let second = table.admit();
        assert!(
            tokio::time::timeout(Duration::from_millis(1000), table.room())
                .await
                .is_err(),
            "no room while both may hold an unread request"
        );
        // The first's grace ends 2 s after it was accepted.
        tokio::time::timeout(Duration::from_millis(600), table.room())
            .await
            .expect("room once the first's grace is over");
        let _third = table.admit();
        assert!(first.close.is_cancelled());
        assert!(!second.close.is_cancelled());
    }
}
