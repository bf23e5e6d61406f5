//! Kubelets' connections are served on the controller's runtime.
//!
//! The API runs on threads of its own, below the controller's priority, so
//! that readers never delay a probe or a decision (docs/decisions/runtimes.md).
//! A kubelet's heartbeat, though, is the controller's input: served on an API
//! thread, each one would cross to the controller's thread and back, two
//! thread wake-ups per heartbeat, and wait behind the readers there. So a
//! connection whose first request comes from a kubelet moves, socket and
//! all, to the controller's runtime, where the heartbeat is read, folded and
//! answered on one thread, as a site without readers always did.
//!
//! Which connections are a kubelet's is decided once, from the first
//! request's head: a bearer token bound to a node, a client certificate
//! naming a node, or, on a server without credentials, a heartbeat (a
//! Node's status or a Lease written). An HTTP/2 connection moves only when
//! its client certificate names a node (its headers are compressed, and
//! without one its streams may come from anyone). Everything else stays on
//! the API's threads. Either way the same router serves it: only the thread
//! differs.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;

use super::identity::Principal;

/// The first request of a connection, as far as the handoff looks at it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FirstRequest<'a> {
    pub method: &'a str,
    /// The path, without the query.
    pub path: &'a str,
    /// The bearer token of its `Authorization` header, if any.
    pub bearer: Option<&'a str>,
    /// Who the connection's verified client certificate names, if any.
    pub client: Option<&'a Principal>,
}

/// Where kubelets' connections go, and how they are known.
#[derive(Clone)]
pub struct KubeletHandoff {
    /// The controller's runtime.
    pub runtime: tokio::runtime::Handle,
    /// Whether a connection opening with this request is a kubelet's.
    pub is_kubelet: Arc<dyn Fn(&FirstRequest<'_>) -> bool + Send + Sync>,
}

impl std::fmt::Debug for KubeletHandoff {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("KubeletHandoff")
    }
}

/// Whether a request writes a heartbeat: a Node's status, or a Lease in
/// `kube-node-lease` (what a kubelet sends every few seconds).
pub fn is_heartbeat(request: &FirstRequest<'_>) -> bool {
    let write = matches!(request.method, "PUT" | "PATCH" | "POST");
    let path = request.path;
    let node_status = path
        .strip_prefix("/api/v1/nodes/")
        .and_then(|rest| rest.strip_suffix("/status"))
        .is_some_and(|name| !name.is_empty() && !name.contains('/'));
    let lease = path.starts_with("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases");
    write && (node_status || lease)
}

/// The most of a first request's head read to classify the connection.
/// A head that does not end within it is classified by what it holds.
pub const HEAD_LIMIT: usize = 16 << 10;

/// Reads from `io` until the first request's head is complete (or
/// [`HEAD_LIMIT`] bytes are in, or the client stops sending), and returns
/// what was read, to be served again by [`Prefixed`]. `None` if the client
/// closed before sending anything.
pub async fn read_first_head<I: AsyncRead + Unpin>(io: &mut I) -> io::Result<Option<Vec<u8>>> {
    let mut head = Vec::with_capacity(2048);
    let mut chunk = [0u8; 4096];
    loop {
        let n = io.read(&mut chunk).await?;
        if n == 0 {
            return Ok((!head.is_empty()).then_some(head));
        }
        // Only the newly read bytes and the three before can hold a new end.
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if head[from..].windows(4).any(|w| w == b"\r\n\r\n") || head.len() >= HEAD_LIMIT {
            return Ok(Some(head));
        }
    }
}

/// Whether the connection whose first bytes are `head` is a kubelet's. A
/// head that does not parse is not. `client` is who the connection's
/// verified client certificate names, if any.
pub fn classify(
    head: &[u8],
    client: Option<&Principal>,
    is_kubelet: &(dyn Fn(&FirstRequest<'_>) -> bool + Send + Sync),
) -> bool {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    // A partial head still names its method and path, and the headers read so far.
    if request.parse(head).is_err() {
        return false;
    }
    let (Some(method), Some(target)) = (request.method, request.path) else {
        return false;
    };
    let path = target.split('?').next().unwrap_or(target);
    let bearer = request
        .headers
        .iter()
        .take_while(|h| !h.name.is_empty())
        .find(|h| h.name.eq_ignore_ascii_case("authorization"))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    is_kubelet(&FirstRequest {
        method,
        path,
        bearer,
        client,
    })
}

/// A transport that can move to the reactor of the runtime it is called on.
pub trait Rebind {
    /// Re-registers the socket with the current runtime's reactor. Call it
    /// from a task of the runtime that will serve the connection.
    fn rebind(&mut self) -> io::Result<()>;
}

/// A TCP stream that can move between runtimes.
#[derive(Debug)]
pub struct Movable(Option<TcpStream>);

impl Movable {
    pub fn new(tcp: TcpStream) -> Movable {
        Movable(Some(tcp))
    }

    fn tcp(&mut self) -> io::Result<&mut TcpStream> {
        self.0
            .as_mut()
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotConnected, "the socket failed to move"))
    }
}

impl Rebind for Movable {
    fn rebind(&mut self) -> io::Result<()> {
        let tcp = self.0.take().expect("a socket to move");
        self.0 = Some(TcpStream::from_std(tcp.into_std()?)?);
        Ok(())
    }
}

impl<I: Rebind> Rebind for tokio_rustls::server::TlsStream<I> {
    fn rebind(&mut self) -> io::Result<()> {
        self.get_mut().0.rebind()
    }
}

impl<I: Rebind> Rebind for Prefixed<I> {
    fn rebind(&mut self) -> io::Result<()> {
        self.inner.rebind()
    }
}

impl AsyncRead for Movable {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(self.tcp()?).poll_read(cx, buf)
    }
}

impl AsyncWrite for Movable {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.tcp()?).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(self.tcp()?).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.tcp()?).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(self.tcp()?).poll_shutdown(cx)
    }
}

/// A transport whose first bytes were already read: it serves them again
/// before reading on.
#[derive(Debug)]
pub struct Prefixed<I> {
    prefix: Vec<u8>,
    at: usize,
    inner: I,
}

impl<I> Prefixed<I> {
    pub fn new(prefix: Vec<u8>, inner: I) -> Prefixed<I> {
        Prefixed {
            prefix,
            at: 0,
            inner,
        }
    }
}

impl<I: AsyncRead + Unpin> AsyncRead for Prefixed<I> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.at < this.prefix.len() {
            let n = buf.remaining().min(this.prefix.len() - this.at);
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.inner).poll_read(cx, buf)
    }
}

impl<I: AsyncWrite + Unpin> AsyncWrite for Prefixed<I> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubelet_token(request: &FirstRequest<'_>) -> bool {
        request.bearer == Some("node-secret")
    }

    #[test]
    fn heartbeats_are_status_and_lease_writes() {
        let request = |method, path| FirstRequest {
            method,
            path,
            bearer: None,
            client: None,
        };
        assert!(is_heartbeat(&request(
            "PATCH",
            "/api/v1/nodes/edge-1/status"
        )));
        assert!(is_heartbeat(&request("PUT", "/api/v1/nodes/edge-1/status")));
        assert!(is_heartbeat(&request(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1"
        )));
        assert!(is_heartbeat(&request(
            "POST",
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
        )));
        assert!(!is_heartbeat(&request(
            "GET",
            "/api/v1/nodes/edge-1/status"
        )));
        assert!(!is_heartbeat(&request("GET", "/api/v1/nodes")));
        assert!(!is_heartbeat(&request("PATCH", "/api/v1/nodes/edge-1")));
        assert!(!is_heartbeat(&request("PATCH", "/api/v1/nodes//status")));
        assert!(!is_heartbeat(&request(
            "PUT",
            "/apis/coordination.k8s.io/v1/namespaces/default/leases/x"
        )));
    }

    #[test]
    fn a_connection_is_classified_by_its_first_heads_token_or_path() {
        let head = b"PATCH /api/v1/nodes/a/status?fieldManager=x HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer node-secret\r\n\r\n";
        assert!(classify(head, None, &kubelet_token));
        // Read so far: the token is not there yet.
        assert!(!classify(
            b"PATCH /api/v1/nodes/a/status HTTP/1.1\r\nHost:",
            None,
            &kubelet_token
        ));
        assert!(!classify(
            b"GET /api/v1/nodes HTTP/1.1\r\nauthorization: bearer other\r\n\r\n",
            None,
            &kubelet_token
        ));
        assert!(classify(
            b"GET /api/v1/nodes HTTP/1.1\r\nauthorization: bearer  node-secret \r\n\r\n",
            None,
            &kubelet_token
        ));
        // The path rule sees the path without its query.
        assert!(classify(
            b"PATCH /api/v1/nodes/a/status?x=y HTTP/1.1\r\n\r\n",
            None,
            &is_heartbeat
        ));
        assert!(!classify(b"\x16\x03\x01 not http", None, &is_heartbeat));
        assert!(!classify(b"", None, &is_heartbeat));
    }

    #[tokio::test]
    async fn the_head_is_read_whole_and_served_again() {
        let (mut client, server) = tokio::io::duplex(64);
        let request = b"PUT /apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/a HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}";
        let writer = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // In pieces, the end of the head split across two.
            for piece in request.chunks(7) {
                client.write_all(piece).await.unwrap();
            }
            client
        });
        let mut server = server;
        let head = read_first_head(&mut server).await.unwrap().unwrap();
        assert!(head.windows(4).any(|w| w == b"\r\n\r\n"));
        let client = writer.await.unwrap();
        drop(client);
        let mut replayed = Vec::new();
        Prefixed::new(head, server)
            .read_to_end(&mut replayed)
            .await
            .unwrap();
        assert_eq!(replayed, request);
    }

    #[tokio::test]
    async fn a_head_that_never_ends_is_read_up_to_the_limit() {
        let (mut client, mut server) = tokio::io::duplex(1 << 20);
        use tokio::io::AsyncWriteExt;
        client.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
        client.write_all(&vec![b'x'; 2 * HEAD_LIMIT]).await.unwrap();
        let head = read_first_head(&mut server).await.unwrap().unwrap();
        assert!(head.len() >= HEAD_LIMIT && head.len() < HEAD_LIMIT + 4096);
        drop(client);
        // A client that leaves before a byte is no connection to serve.
        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        assert_eq!(read_first_head(&mut server).await.unwrap(), None);
    }
}
