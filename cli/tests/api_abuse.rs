//! The API under abuse, with the real binary: idle watches, slow bodies and
//! idle connections cannot lock out health checks, heartbeats or readers;
//! with `--token-file` nothing but the health checks answers without a
//! token; every error is a `Status`; HTTP/2 is spoken; 10,000 kept-alive
//! connections fit.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// A site in push mode of one node, `edge-1`, on this file's loopback range
/// (push mode never probes it).
fn one_node() -> TestSite<()> {
    TestSite::named(&["edge-1"], Ipv4Addr::new(127, 82, 10, 1)).start()
}

fn host_port(url: &str) -> String {
    url.trim_start_matches("http://").to_string()
}

/// An HTTP/1.1 answer read off a raw connection.
#[derive(Debug)]
struct Answer {
    code: u16,
    head: String,
    body: String,
}

impl Answer {
    fn status(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not a JSON body ({e}): {} {}", self.head, self.body))
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }
}

/// Reads one answer's head, and its body when it has a length (a streaming
/// watch has none: its body is left on the connection).
async fn read_answer(stream: &mut TcpStream) -> Answer {
    let mut seen = Vec::new();
    let mut byte = [0u8; 1];
    while !seen.ends_with(b"\r\n\r\n") {
        let n = tokio::time::timeout(DEADLINE, stream.read(&mut byte))
            .await
            .expect("an answer in time")
            .unwrap();
        assert!(
            n == 1,
            "closed before the answer ended: {:?}",
            String::from_utf8_lossy(&seen)
        );
        seen.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&seen).into_owned();
    let code = head[9..12].parse().unwrap();
    let mut answer = Answer {
        code,
        head,
        body: String::new(),
    };
    if let Some(length) = answer.header("content-length") {
        let mut body = vec![0u8; length.parse().unwrap()];
        tokio::time::timeout(DEADLINE, stream.read_exact(&mut body))
            .await
            .expect("the body in time")
            .unwrap();
        answer.body = String::from_utf8_lossy(&body).into_owned();
    }
    answer
}

/// [`read_answer`], or why there was none (the server closed the connection).
async fn try_read_answer(stream: &mut TcpStream) -> Result<Answer, String> {
    let mut first = [0u8; 1];
    match tokio::time::timeout(DEADLINE, stream.peek(&mut first)).await {
        Err(_) => return Err("no answer in time".into()),
        Ok(Err(e)) => return Err(e.to_string()),
        Ok(Ok(0)) => return Err("closed by the server".into()),
        Ok(Ok(_)) => {}
    }
    Ok(read_answer(stream).await)
}

/// Sends a request on a new connection and reads the answer; the
/// connection stays open.
async fn request(addr: &str, text: &str) -> (TcpStream, Answer) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(text.as_bytes()).await.unwrap();
    let answer = read_answer(&mut stream).await;
    (stream, answer)
}

fn get(path: &str) -> String {
    format!("GET {path} HTTP/1.1\r\nHost: nodekeeper\r\n\r\n")
}

/// A heartbeat: edge-1 reports Ready.
async fn heartbeat(c: &Controller, token: Option<&str>) -> u16 {
    let mut request = client()
        .patch(format!("{}/api/v1/nodes/edge-1/status", c.url))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}]}}"#);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let code = response.status().as_u16();
    if code != 200 {
        eprintln!(
            "heartbeat: {code}: {}",
            response.text().await.unwrap_or_default()
        );
    }
    code
}

/// What must keep answering, quickly, whatever else holds the API.
async fn still_answering(c: &Controller, what: &str) {
    let started = Instant::now();
    assert_eq!(c.text("/healthz").await, "ok", "{what}: /healthz");
    assert_eq!(c.text("/livez").await, "ok", "{what}: /livez");
    assert_eq!(heartbeat(c, None).await, 200, "{what}: a heartbeat");
    let (code, list) = c.get("/api/v1/nodes").await;
    assert_eq!(
        (code, list["kind"].as_str()),
        (200, Some("NodeList")),
        "{what}"
    );
    let (code, out, err) = cli(&c.db, &["nodes"]);
    assert!(
        code == 0 && out.contains("edge-1"),
        "{what}: the CLI: {err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{what}: answered, but only after {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_watches_and_idle_connections_cannot_lock_out_the_api() {
    nodekeeper::config::raise_open_file_limit();
    let site = one_node();
    let c = site.controller_with(&[
        "--max-connections",
        "40",
        "--max-watches",
        "5",
        "--max-requests-inflight",
        "10",
    ]);
    c.wait_registered("edge-1").await;
    let addr = host_port(&c.url);

    // Sixty watches, each on its own connection, left open: five stream, the
    // others are told to come back later, as kube-apiserver tells them.
    let mut streaming = Vec::new();
    let mut refused = Vec::new();
    for _ in 0..60 {
        let (stream, answer) = request(&addr, &get("/api/v1/nodes?watch=true")).await;
        match answer.code {
            200 => streaming.push(stream),
            429 => {
                assert_eq!(answer.header("retry-after").as_deref(), Some("1"));
                assert_eq!(
                    answer.status(),
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                           "message": "Too many requests, please try again later.",
                           "reason": "TooManyRequests", "details": {"retryAfterSeconds": 1}, "code": 429})
                );
                refused.push(stream);
            }
            other => panic!("a watch got {other}: {answer:?}"),
        }
    }
    assert_eq!((streaming.len(), refused.len()), (5, 55));
    still_answering(&c, "with the watch budget full").await;

    // A hundred more connections that never send a byte, beyond the cap of 40.
    let mut silent = Vec::new();
    for _ in 0..100 {
        silent.push(TcpStream::connect(&addr).await.unwrap());
    }
    still_answering(&c, "with idle connections beyond the cap").await;
    let metrics = c.text("/metrics").await;
    assert!(
        !metrics.contains("nodekeeper_http_connections_evicted_total 0\n"),
        "idle connections were not closed to make room: {metrics}"
    );
    assert!(
        metrics.contains(
            "nodekeeper_http_rejected_requests_total{kind=\"Watch\",reason=\"TooManyRequests\"} 55"
        ),
        "{metrics}"
    );
    // The streaming watches were never cut to make room.
    for stream in &mut streaming {
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_millis(10), stream.read(&mut byte)).await;
        assert!(!matches!(closed, Ok(Ok(0))), "a streaming watch was closed");
    }
    drop((streaming, refused, silent));
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_the_default_caps_4200_idle_watches_leave_the_api_answering() {
    // The failure as seen: ~4,100 idle watches filled the 4,096-connection cap.
    nodekeeper::config::raise_open_file_limit();
    let site = one_node();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    let addr = host_port(&c.url);
    let opened = futures_util::future::join_all((0..4200).map(|_| {
        let addr = addr.clone();
        async move { request(&addr, &get("/api/v1/nodes?watch=true")).await }
    }))
    .await;
    let streaming = opened.iter().filter(|(_, a)| a.code == 200).count();
    let refused = opened.iter().filter(|(_, a)| a.code == 429).count();
    // The base budget and one node's allowance (its kubelet's five watches).
    let budget = nodekeeper::server::ApiLimits::DEFAULT_MAX_WATCHES
        + nodekeeper::server::ApiLimits::WATCHES_PER_NODE;
    assert_eq!((streaming, refused), (budget, 4200 - budget));
    still_answering(&c, "with 4,200 watch connections open").await;
    drop(opened);
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_dribble_in_are_cut_at_the_body_timeout() {
    nodekeeper::config::raise_open_file_limit();
    let site = one_node();
    let c = site.controller_with(&["--request-body-timeout", "1s"]);
    c.wait_registered("edge-1").await;
    let addr = host_port(&c.url);
    // 1,000 status PUTs announce 100 bytes and send one.
    let head = "PUT /api/v1/nodes/edge-1/status HTTP/1.1\r\nHost: nodekeeper\r\n\
                content-type: application/json\r\ncontent-length: 100\r\n\r\n{";
    let mut slow = Vec::new();
    for _ in 0..1000 {
        let mut stream = TcpStream::connect(&addr).await.unwrap();
        stream.write_all(head.as_bytes()).await.unwrap();
        slow.push(stream);
    }
    let started = Instant::now();
    // Meanwhile a whole heartbeat is answered.
    assert_eq!(heartbeat(&c, None).await, 200);
    // Each slow one, still dribbling a byte now and then, is answered 408
    // and closed.
    let answers = futures_util::future::join_all(slow.into_iter().map(|mut stream| async move {
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        loop {
            tokio::select! {
                read = stream.read(&mut buf) => match read {
                    Ok(0) | Err(_) => return seen,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                },
                _ = tokio::time::sleep(Duration::from_millis(300)) => {
                    let _ = stream.write_all(b" ").await;
                }
            }
        }
    }))
    .await;
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the slow bodies were held for {:?}",
        started.elapsed()
    );
    for answer in answers {
        let text = String::from_utf8_lossy(&answer);
        assert!(text.starts_with("HTTP/1.1 408 "), "{text}");
        let body = text.split("\r\n\r\n").nth(1).unwrap();
        let status = json(body);
        assert_eq!(status["kind"], "Status");
        assert_eq!(status["reason"], "Timeout");
        assert!(
            status["message"].as_str().unwrap().contains("within 1s"),
            "{status}"
        );
    }
    assert!(c.text("/metrics").await.contains(
        "nodekeeper_http_rejected_requests_total{kind=\"Mutating\",reason=\"BodyTimeout\"} 1000"
    ));
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_file_only_health_checks_answer_without_a_token() {
    let site = one_node();
    let c = site
        .run()
        .tokens("reader-secret\nedge-1-secret,edge-1\n")
        .start();
    let http = client();
    let unauthorized = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                              "message": "Unauthorized", "reason": "Unauthorized", "code": 401});
    for path in [
        "/api/v1/nodes",
        "/api/v1/nodes?watch=true",
        "/api/v1/nodes/edge-1",
        "/api",
        "/apis",
        "/version",
        "/v1/history",
        "/v1/nodes",
        "/v1/store",
        "/metrics",
        "/nowhere",
    ] {
        let response = http.get(format!("{}{path}", c.url)).send().await.unwrap();
        assert_eq!(response.status(), 401, "{path}");
        assert_eq!(
            response.json::<Value>().await.unwrap(),
            unauthorized,
            "{path}"
        );
    }
    assert_eq!(heartbeat(&c, None).await, 401);
    for path in [
        "/healthz",
        "/livez?verbose",
        "/readyz/ping",
        "/readyz/store",
    ] {
        let response = http.get(format!("{}{path}", c.url)).send().await.unwrap();
        assert_eq!(response.status(), 200, "{path}");
    }
    // A token shown on a health check must still be a good one.
    let bad = http
        .get(format!("{}/healthz", c.url))
        .bearer_auth("nope")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 401);

    // An operator reads everything; a node what a kubelet reads, not
    // nodekeeper's own paths or its metrics (kube's NodeRules() grant no
    // /metrics either: docs/guide/authentication.md).
    for (token, path, code) in [
        ("reader-secret", "/api/v1/nodes", 200),
        ("reader-secret", "/metrics", 200),
        ("reader-secret", "/v1/history", 200),
        ("edge-1-secret", "/api/v1/nodes", 200),
        ("edge-1-secret", "/metrics", 403),
        ("edge-1-secret", "/v1/history", 403),
    ] {
        let response = http
            .get(format!("{}{path}", c.url))
            .bearer_auth(token)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), code, "{path} with {token}");
    }
    c.wait_registered("edge-1").await;
    assert_eq!(heartbeat(&c, Some("edge-1-secret")).await, 200);

    // The CLI says what it needs, and reads with it.
    let (code, _, err) = cli(&c.db, &["nodes"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("401") && err.contains("NODEKEEPER_TOKEN"),
        "{err}"
    );
    let out = std::process::Command::new(BIN)
        .env("NODEKEEPER_TOKEN", "reader-secret")
        .args(["--db", c.db.to_str().unwrap(), "nodes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("edge-1"));
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_error_is_a_status() {
    let site = one_node();
    let c = site.controller(&[]);
    let addr = host_port(&c.url);
    let status_of = |answer: &Answer, code: u16, reason: &str| {
        assert_eq!(answer.code, code, "{answer:?}");
        assert_eq!(
            answer.header("content-type").as_deref(),
            Some("application/json"),
            "{answer:?}"
        );
        let status = answer.status();
        assert_eq!(status["kind"], "Status", "{answer:?}");
        assert_eq!(status["code"], code, "{answer:?}");
        assert_eq!(status["reason"], reason, "{answer:?}");
        status
    };

    // Methods a path does not serve.
    for (method, path) in [
        ("POST", "/api/v1/nodes/edge-1"),
        ("PUT", "/api/v1/nodes"),
        ("DELETE", "/version"),
        ("POST", "/api/v1/nodes/edge-1/status"),
    ] {
        let (_, answer) = request(
            &addr,
            &format!("{method} {path} HTTP/1.1\r\nHost: x\r\ncontent-length: 2\r\n\r\n{{}}"),
        )
        .await;
        let status = status_of(&answer, 405, "MethodNotAllowed");
        assert!(answer.header("allow").is_some(), "{answer:?}");
        assert!(
            status["message"]
                .as_str()
                .unwrap()
                .contains("does not allow this method"),
            "{status}"
        );
    }
    // A path that is not UTF-8.
    let (_, answer) = request(&addr, &get("/api/v1/nodes/%FF%FE")).await;
    let status = status_of(&answer, 400, "BadRequest");
    assert!(
        status["message"].as_str().unwrap().contains("UTF-8"),
        "{status}"
    );
    // A query the handler cannot read.
    let (_, answer) = request(&addr, &get("/v1/history?limit=lots")).await;
    status_of(&answer, 400, "BadRequest");
    // A URI too long, and too many headers: hyper's own answers.
    let (_, answer) = request(
        &addr,
        &get(&format!("/api/v1/nodes?x={}", "a".repeat(70_000))),
    )
    .await;
    status_of(&answer, 414, "RequestURITooLong");
    let many: String = (0..150).map(|i| format!("x-header-{i}: v\r\n")).collect();
    let (_, answer) = request(
        &addr,
        &format!("GET /api/v1/nodes HTTP/1.1\r\nHost: x\r\n{many}\r\n"),
    )
    .await;
    status_of(&answer, 431, "RequestHeaderFieldsTooLarge");
    assert!(c.stop().success());
}

/// GETs over HTTP/2 on `io`, all at once; each answer's status and body.
async fn h2_gets<I>(io: I, paths: &[&str], token: Option<&str>) -> Vec<(u16, String)>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    use http_body_util::BodyExt;
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(io),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let requests = paths.iter().map(|path| {
        let mut request = hyper::Request::get(format!("http://nodekeeper{path}"));
        if let Some(token) = token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        sender.send_request(
            request
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap(),
        )
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_in_clear_with_prior_knowledge_and_over_tls_by_alpn() {
    let site = one_node();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    let tcp = TcpStream::connect(host_port(&c.url)).await.unwrap();
    let answers = h2_gets(
        tcp,
        &["/healthz", "/api/v1/nodes", "/api/v1/nodes/edge-1"],
        None,
    )
    .await;
    assert_eq!(answers[0], (200, "ok".into()));
    assert_eq!(json(&answers[1].1)["kind"], "NodeList");
    assert_eq!(json(&answers[2].1)["metadata"]["name"], "edge-1");
    assert!(c.stop().success());

    // Over TLS, ALPN offers h2 first; a client that asks only for
    // HTTP/1.1 gets it.
    let (cert, key, pem) = self_signed_cert(site.path(), &["127.0.0.1"]);
    let tokens = site.path().join("tokens");
    std::fs::write(&tokens, "reader-secret\n").unwrap();
    let mut args = site.args();
    args.extend(
        [
            "--tls-cert-file",
            &cert,
            "--tls-private-key-file",
            &key,
            "--token-file",
            tokens.to_str().unwrap(),
        ]
        .map(String::from),
    );
    let c = Controller::start(&site.path().join("db-tls"), &args);
    let connect = |alpn: &[&[u8]]| {
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(pem.as_bytes()) {
            roots.add(cert.unwrap()).unwrap();
        }
        let mut config = rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
        let addr = c.url.trim_start_matches("https://").to_string();
        async move {
            let tcp = TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            connector.connect(name, tcp).await.unwrap()
        }
    };
    let tls = connect(&[b"h2", b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let answers = h2_gets(tls, &["/readyz", "/api/v1/nodes"], Some("reader-secret")).await;
    assert_eq!(answers[1].0, 200, "{answers:?}");
    assert_eq!(json(&answers[1].1)["kind"], "NodeList");
    let tls = connect(&[b"http/1.1"]).await;
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    // kubectl reads through it (offering h2, as it does to kube-apiserver).
    let kubeconfig = site.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: nk, cluster: {{server: {}, certificate-authority: {cert}}}}}]\n\
             users: [{{name: reader, user: {{token: reader-secret}}}}]\n\
             contexts: [{{name: nk, context: {{cluster: nk, user: reader}}}}]\ncurrent-context: nk\n",
            c.url
        ),
    )
    .unwrap();
    let out = std::process::Command::new("kubectl")
        .args([
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
            "get",
            "nodes",
            "-v=6",
        ])
        .output()
        .expect("kubectl runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("edge-1"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_kept_alive_connections_all_fit() {
    // Each of 10,000 kubelets holds one kept-alive connection; readers still
    // get in. Both ends of 10,000 connections must fit: the controller in
    // its own process, the clients in this one.
    let limit = nodekeeper::config::raise_open_file_limit();
    assert!(
        limit >= 10_300,
        "this test needs 10,300 open files, the limit is {limit}"
    );
    let site = one_node();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    let addr = host_port(&c.url);
    let mut kept = Vec::with_capacity(10_000);
    for _ in 0..20 {
        let opened = futures_util::future::join_all((0..500).map(|_| {
            let addr = addr.clone();
            async move { request(&addr, &get("/healthz")).await }
        }))
        .await;
        for (stream, answer) in opened {
            assert_eq!(answer.code, 200, "connection {}: {answer:?}", kept.len());
            kept.push(stream);
        }
    }
    // Every one is still open and answers again: none was closed to let the
    // others in.
    for chunk in kept.chunks_mut(500) {
        let again = futures_util::future::join_all(chunk.iter_mut().map(|stream| async move {
            match stream.write_all(get("/healthz").as_bytes()).await {
                Ok(()) => try_read_answer(stream).await,
                Err(e) => Err(e.to_string()),
            }
        }))
        .await;
        for (i, answer) in again.into_iter().enumerate() {
            assert_eq!(
                answer.map(|a| a.code),
                Ok(200),
                "connection {i} of a chunk, asked again"
            );
        }
    }
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains("nodekeeper_http_connections_evicted_total 0\n"),
        "a kept-alive connection was closed to make room: {metrics}"
    );
    let open: u64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("nodekeeper_http_connections "))
        .unwrap()
        .parse()
        .unwrap();
    assert!(open >= 10_000, "{open} connections open");
    still_answering(&c, "with 10,000 kept-alive connections").await;
    drop(kept);
    assert!(c.stop().success());
}

/// Issue 26's lock-out: two HTTP/2 connections of one token's user, each
/// with 250 lists and a window of zero (`SETTINGS_INITIAL_WINDOW_SIZE=0`),
/// held as long as the attacker answers pings. That client may hold a
/// quarter of the read budget, no more; every other client reads on. On
/// b93b77f the two connections held all 400 reads and 295 of 304 other
/// reads were refused with 429.
#[tokio::test]
async fn a_client_holding_lists_on_windows_of_zero_leaves_other_clients_reading() {
    let site = one_node();
    let c = site
        .run()
        .tokens("reader-secret,reader,2\nattacker-secret,attacker,1\n")
        .flags(&["--max-requests-inflight", "400"])
        .start();
    let addr = host_port(&c.url);

    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..2 {
        let tcp = TcpStream::connect(&addr).await.unwrap();
        let (sender, connection) =
            hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                .initial_stream_window_size(0)
                .max_concurrent_reset_streams(0)
                .handshake(hyper_util::rt::TokioIo::new(tcp))
                .await
                .unwrap();
        held.push(tokio::spawn(connection));
        let requests = (0..250).map(|_| {
            let mut sender = sender.clone();
            let request = hyper::Request::get("http://nodekeeper/api/v1/nodes")
                .header("authorization", "Bearer attacker-secret")
                .body(http_body_util::Empty::<bytes::Bytes>::new())
                .unwrap();
            async move { sender.send_request(request).await }
        });
        for response in futures_util::future::join_all(requests).await {
            let response = response.expect("every stream is answered a head");
            match response.status().as_u16() {
                // Its body waits on the window that never opens.
                200 => held.push(tokio::spawn(async move {
                    let _body = response;
                    std::future::pending::<()>().await;
                    Ok(())
                })),
                429 => refused += 1,
                other => panic!("the attacker got {other}"),
            }
        }
    }
    // A quarter of the 400 reads at most: the rest were refused.
    assert_eq!(refused, 500 - 100, "the attacker's streams refused");
    // Every other client reads on.
    nodekeeper::install_crypto_provider();
    let client = reqwest::Client::builder().no_proxy().build().unwrap();
    for _ in 0..50 {
        let answer = client
            .get(format!("{}/api/v1/nodes", c.url))
            .bearer_auth("reader-secret")
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
    }
    let metrics = c.text("/metrics").await;
    assert!(
        metrics.contains(
            "nodekeeper_http_rejected_requests_total{kind=\"Read\",reason=\"ClientShare\"} 400"
        ),
        "{metrics}"
    );
    for task in held {
        task.abort();
    }
    assert!(c.stop().success());
}
