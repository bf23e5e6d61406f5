//! Tests of the simulated fleet, on loopback with a distinct 127.77.N.0/24 per test so they run in parallel.

use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

use super::*;

/// Upper bound for things that happen at once; only reached when a test fails.
const LIMIT: Duration = Duration::from_secs(10);
const REQUEST: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: sim\r\n\r\n";

fn config(third_octet: u8, nodes: usize) -> FleetConfig {
    FleetConfig {
        nodes,
        base_ip: Ipv4Addr::new(127, 77, third_octet, 1),
        port: 0,
        ..FleetConfig::default()
    }
}

async fn start(third_octet: u8, nodes: usize) -> (Fleet, CancellationToken) {
    let token = CancellationToken::new();
    let fleet = Fleet::start(config(third_octet, nodes), token.clone())
        .await
        .expect("fleet starts");
    (fleet, token)
}

/// The one place tests build HTTP clients. With reqwest's `rustls-no-provider`
/// feature (as in nodekeeper) a rustls crypto provider must be installed
/// before `build()`, or it panics; plain-http use needs nothing else.
fn client_with(timeout: Option<Duration>) -> reqwest::Client {
    nodekeeper::install_crypto_provider();
    let mut b = reqwest::Client::builder().no_proxy();
    if let Some(t) = timeout {
        b = b.timeout(t);
    }
    b.build().expect("client builds")
}

fn client() -> reqwest::Client {
    client_with(None)
}

/// Reads one HTTP/1.1 response with a Content-Length: status and body.
async fn read_response(s: &mut TcpStream) -> io::Result<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    // Each turn reads at least one byte or returns.
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let status: u16 = head[9..12].parse().expect("status code");
            let len: usize = head
                .lines()
                .find_map(|l| {
                    let l = l.to_ascii_lowercase();
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().expect("content-length"))
                })
                .unwrap_or(0);
            let body_start = end + 4;
            while buf.len() < body_start + len {
                let n = s.read(&mut chunk).await?;
                if n == 0 {
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                buf.extend_from_slice(&chunk[..n]);
            }
            let body = String::from_utf8_lossy(&buf[body_start..body_start + len]).into_owned();
            return Ok((status, body));
        }
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// One request on an open connection.
async fn ask(s: &mut TcpStream) -> (u16, String) {
    s.write_all(REQUEST).await.expect("request written");
    timeout(LIMIT, read_response(s))
        .await
        .expect("answer in time")
        .expect("answer read")
}

/// One request on a fresh connection.
async fn probe(addr: SocketAddr) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.expect("connects");
    ask(&mut s).await
}

/// Asserts the peer closes the connection (EOF or reset), without waiting forever.
async fn assert_closed(s: &mut TcpStream) {
    let mut byte = [0u8; 1];
    match timeout(LIMIT, s.read(&mut byte))
        .await
        .expect("connection closed in time")
    {
        Ok(0) | Err(_) => {}
        Ok(_) => panic!("got data instead of a close"),
    }
}

/// Polls the request counter until it reaches `n`; bounded.
async fn wait_requests(h: &FleetHandle, name: &str, n: u64) {
    for _ in 0..1000 {
        if h.requests(name).unwrap_or(0) >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} never saw {n} requests");
}

/// Polls the open-connection gauge until it equals `n`; bounded.
async fn wait_connections(h: &FleetHandle, name: &str, n: u64) {
    for _ in 0..1000 {
        if h.connections(name) == Some(n) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} never had {n} connections open");
}

async fn settle(h: &FleetHandle, name: &str) {
    timeout(LIMIT, h.settled(name))
        .await
        .expect("settles in time")
        .expect("settles");
}

async fn stop(fleet: Fleet, token: CancellationToken) {
    token.cancel();
    timeout(LIMIT, fleet.closed()).await.expect("fleet stops");
}

#[tokio::test]
async fn up_answers_ok_and_other_paths_404() {
    let (fleet, token) = start(1, 1).await;
    let node = fleet.nodes()[0].clone();
    let url = format!("http://{}/healthz", node.address);
    let resp = client().get(&url).send().await.expect("answers");
    assert_eq!(resp.status(), 200);
    let ctype = resp.headers()["content-type"].to_str().expect("ascii");
    assert!(ctype.starts_with("text/plain"), "{ctype}");
    assert_eq!(resp.text().await.expect("body"), "ok");

    let resp = client()
        .get(format!("http://{}/metrics", node.address))
        .send()
        .await
        .expect("answers");
    assert_eq!(resp.status(), 404);

    // Keep-alive: several answers on one connection; only /healthz counts.
    let mut s = TcpStream::connect(node.address).await.expect("connects");
    for _ in 0..3 {
        assert_eq!(ask(&mut s).await, (200, "ok".to_owned()));
    }
    assert_eq!(fleet.handle().requests(&node.name), Some(4));
    assert_eq!(fleet.handle().requests("nope"), None);
    stop(fleet, token).await;
}

#[tokio::test]
async fn sick_answers_500() {
    let (fleet, token) = start(2, 1).await;
    let h = fleet.handle();
    let node = &fleet.nodes()[0];
    h.set(&node.name, KubeletState::Sick).expect("known");
    assert_eq!(h.state(&node.name), Some(KubeletState::Sick));
    let (status, body) = probe(node.address).await;
    assert_eq!(status, 500);
    assert!(body.contains("[-]syncloop failed"), "{body}");
    h.set(&node.name, KubeletState::Up).expect("known");
    assert_eq!(probe(node.address).await, (200, "ok".to_owned()));
    stop(fleet, token).await;
}

#[tokio::test]
async fn down_closes_connections_refuses_then_up_serves_same_address() {
    let (fleet, token) = start(3, 2).await;
    let h = fleet.handle();
    let node = fleet.nodes()[1].clone();
    let other = fleet.nodes()[0].clone();

    let mut open = TcpStream::connect(node.address).await.expect("connects");
    assert_eq!(ask(&mut open).await.0, 200);

    h.set(&node.name, KubeletState::Down).expect("known");
    assert_closed(&mut open).await;
    wait_connections(&h, &node.name, 0).await;
    settle(&h, &node.name).await;
    assert!(!h.status(&node.name).expect("known").listening);
    let refused = TcpStream::connect(node.address).await.expect_err("refused");
    assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
    // The other node is untouched.
    assert_eq!(probe(other.address).await.0, 200);

    h.set(&node.name, KubeletState::Up).expect("known");
    settle(&h, &node.name).await;
    assert_eq!(probe(node.address).await, (200, "ok".to_owned()));
    assert_eq!(fleet.nodes()[1].address, node.address);
    stop(fleet, token).await;
}

#[tokio::test]
async fn hang_does_not_answer_and_closes_when_it_ends() {
    let (fleet, token) = start(4, 1).await;
    let h = fleet.handle();
    let node = fleet.nodes()[0].clone();
    h.set(&node.name, KubeletState::Hang).expect("known");

    let quick = client_with(Some(Duration::from_millis(300)));
    let err = quick
        .get(format!("http://{}/healthz", node.address))
        .send()
        .await
        .expect_err("no answer");
    assert!(err.is_timeout(), "{err}");

    // A hung request is counted, and its connection closes when Hang ends.
    let mut s = TcpStream::connect(node.address).await.expect("connects");
    s.write_all(REQUEST).await.expect("request written");
    wait_requests(&h, &node.name, 2).await;
    h.set(&node.name, KubeletState::Up).expect("known");
    assert_closed(&mut s).await;
    assert_eq!(probe(node.address).await, (200, "ok".to_owned()));
    stop(fleet, token).await;
}

#[tokio::test]
async fn hung_connection_is_freed_when_the_client_gives_up() {
    let (fleet, token) = start(10, 1).await;
    let h = fleet.handle();
    let node = fleet.nodes()[0].clone();
    h.set(&node.name, KubeletState::Hang).expect("known");
    let mut s = TcpStream::connect(node.address).await.expect("connects");
    s.write_all(REQUEST).await.expect("request written");
    wait_requests(&h, &node.name, 1).await;
    wait_connections(&h, &node.name, 1).await;
    // A prober that times out closes its socket; the server must not keep it.
    drop(s);
    wait_connections(&h, &node.name, 0).await;
    assert_eq!(h.state(&node.name), Some(KubeletState::Hang));
    stop(fleet, token).await;
}

#[tokio::test(start_paused = true)]
async fn slow_answers_after_the_delay() {
    let token = CancellationToken::new();
    let fleet = Fleet::start(config(5, 1), token.clone())
        .await
        .expect("fleet starts");
    let h = fleet.handle();
    let node = fleet.nodes()[0].clone();
    h.set(&node.name, KubeletState::Slow).expect("known");

    let started = tokio::time::Instant::now();
    let mut s = TcpStream::connect(node.address).await.expect("connects");
    s.write_all(REQUEST).await.expect("request written");
    // No timeout here: paused time would fire it as eagerly as the delay.
    let answer = read_response(&mut s).await.expect("answer read");
    assert_eq!(answer, (200, "ok".to_owned()));
    assert!(started.elapsed() >= Duration::from_secs(2));
    token.cancel();
    fleet.closed().await;
}

#[tokio::test]
async fn control_endpoint_reads_and_sets_states() {
    let (fleet, token) = start(6, 3).await;
    let h = fleet.handle();
    let base = format!("http://{}", fleet.control_addr());
    let c = client();

    let health = c.get(format!("{base}/healthz")).send().await.expect("ok");
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.expect("body"), "ok");

    let all: Vec<NodeStatus> = c
        .get(format!("{base}/nodes"))
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    assert_eq!(all.len(), 3);
    assert_eq!(all[0].name, "sim-00000");
    assert_eq!(all[2].address, fleet.nodes()[2].address);
    assert!(all.iter().all(|n| n.state == KubeletState::Up));

    // Exact JSON field names and spellings.
    let raw: serde_json::Value = c
        .get(format!("{base}/nodes/sim-00001"))
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    assert_eq!(raw["name"], "sim-00001");
    assert_eq!(raw["state"], "up");
    assert_eq!(raw["requests"], 0);
    assert_eq!(
        raw["address"],
        fleet.nodes()[1].address.to_string().as_str()
    );

    let set = c
        .put(format!("{base}/nodes/sim-00001"))
        .body(r#"{"state":"sick"}"#)
        .send()
        .await
        .expect("answers");
    assert_eq!(set.status(), 200);
    let after: NodeStatus = set.json().await.expect("json");
    assert_eq!(after.state, KubeletState::Sick);
    assert_eq!(h.state("sim-00001"), Some(KubeletState::Sick));
    assert_eq!(probe(fleet.nodes()[1].address).await.0, 500);

    let bad = c
        .put(format!("{base}/nodes/sim-00001"))
        .body(r#"{"state":"dead"}"#)
        .send()
        .await
        .expect("answers");
    assert_eq!(bad.status(), 400);
    let msg: serde_json::Value = bad.json().await.expect("json");
    let text = msg["error"].as_str().expect("error text");
    assert!(text.contains("dead") && text.contains("hang"), "{text}");

    let not_json = c
        .put(format!("{base}/nodes"))
        .body("down")
        .send()
        .await
        .expect("answers");
    assert_eq!(not_json.status(), 400);

    let too_big = c
        .put(format!("{base}/nodes"))
        .body(vec![b' '; 65 * 1024])
        .send()
        .await
        .expect("answers");
    assert_eq!(too_big.status(), 413);

    for req in [
        c.get(format!("{base}/nodes/nope")),
        c.put(format!("{base}/nodes/nope"))
            .body(r#"{"state":"down"}"#),
    ] {
        let resp = req.send().await.expect("answers");
        assert_eq!(resp.status(), 404);
        let msg: serde_json::Value = resp.json().await.expect("json");
        assert!(msg["error"].as_str().expect("text").contains("nope"));
    }

    let all: Vec<NodeStatus> = c
        .put(format!("{base}/nodes"))
        .body(r#"{"state":"down"}"#)
        .send()
        .await
        .expect("answers")
        .json()
        .await
        .expect("json");
    assert!(all.iter().all(|n| n.state == KubeletState::Down));
    for node in fleet.nodes() {
        assert_eq!(h.state(&node.name), Some(KubeletState::Down));
        settle(&h, &node.name).await;
        assert!(TcpStream::connect(node.address).await.is_err());
    }
    // The control endpoint stays up through a partition.
    assert_eq!(
        c.get(format!("{base}/healthz"))
            .send()
            .await
            .expect("ok")
            .status(),
        200
    );
    h.set_all(KubeletState::Up);
    for node in fleet.nodes() {
        settle(&h, &node.name).await;
        assert_eq!(probe(node.address).await.0, 200);
    }
    stop(fleet, token).await;
}

#[tokio::test]
async fn port_zero_shares_one_port() {
    let (fleet, token) = start(7, 4).await;
    let port = fleet.port();
    assert_ne!(port, 0);
    for (i, node) in fleet.nodes().iter().enumerate() {
        assert_eq!(node.address.port(), port);
        assert_eq!(
            node.address.ip(),
            Ipv4Addr::new(127, 77, 7, 1 + i as u8),
            "consecutive addresses"
        );
        assert_eq!(probe(node.address).await, (200, "ok".to_owned()));
    }
    stop(fleet, token).await;
}

#[tokio::test]
async fn taken_port_is_a_bind_error_with_advice() {
    let squatter = std::net::TcpListener::bind("127.77.8.1:0").expect("binds");
    let port = squatter.local_addr().expect("addr").port();
    let cfg = FleetConfig {
        port,
        ..config(8, 2)
    };
    let err = Fleet::start(cfg, CancellationToken::new())
        .await
        .expect_err("port taken");
    assert!(matches!(err, SimError::Bind { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("127.77.8.1") && msg.contains("--port 0"),
        "{msg}"
    );
}

#[tokio::test]
async fn shutdown_closes_everything() {
    let (fleet, token) = start(9, 2).await;
    let h = fleet.handle();
    let node = fleet.nodes()[0].clone();
    let control = fleet.control_addr();
    h.set(&node.name, KubeletState::Hang).expect("known");
    let mut hung = TcpStream::connect(node.address).await.expect("connects");
    hung.write_all(REQUEST).await.expect("request written");
    wait_requests(&h, &node.name, 1).await;
    let mut idle = TcpStream::connect(fleet.nodes()[1].address)
        .await
        .expect("connects");
    assert_eq!(ask(&mut idle).await.0, 200);

    stop(fleet, token).await;
    assert_closed(&mut hung).await;
    assert_closed(&mut idle).await;
    assert!(TcpStream::connect(node.address).await.is_err());
    assert!(TcpStream::connect(control).await.is_err());
    assert!(matches!(
        h.settled(&node.name).await,
        Err(SimError::Stopped) | Ok(())
    ));
}

#[tokio::test]
async fn base_ip_outside_loopback_is_refused() {
    let cfg = FleetConfig {
        base_ip: Ipv4Addr::new(10, 0, 0, 1),
        ..FleetConfig::default()
    };
    let err = Fleet::start(cfg, CancellationToken::new())
        .await
        .expect_err("refused");
    assert!(matches!(err, SimError::BaseIp(_)), "{err:?}");
    assert!(err.to_string().contains("--base-ip"), "{err}");
}

#[test]
fn addresses_skip_0_and_255_and_stay_in_loopback() {
    let ips = node_ips(Ipv4Addr::new(127, 77, 0, 253), 4).expect("fits");
    assert_eq!(
        ips,
        [
            Ipv4Addr::new(127, 77, 0, 253),
            Ipv4Addr::new(127, 77, 0, 254),
            Ipv4Addr::new(127, 77, 1, 1),
            Ipv4Addr::new(127, 77, 1, 2),
        ]
    );
    assert_eq!(
        node_ips(Ipv4Addr::new(127, 0, 0, 0), 1).expect("fits"),
        [Ipv4Addr::new(127, 0, 0, 1)]
    );
    assert_eq!(
        node_ips(Ipv4Addr::new(127, 255, 255, 253), 2).expect("fits"),
        [
            Ipv4Addr::new(127, 255, 255, 253),
            Ipv4Addr::new(127, 255, 255, 254)
        ]
    );
    let err = node_ips(Ipv4Addr::new(127, 255, 255, 253), 3).expect_err("leaves 127/8");
    assert!(matches!(err, SimError::TooManyNodes { nodes: 3, .. }));
    assert!(matches!(
        node_ips(Ipv4Addr::new(127, 1, 0, 1), usize::MAX),
        Err(SimError::TooManyNodes { .. })
    ));
    assert!(matches!(
        node_ips(Ipv4Addr::new(127, 1, 0, 1), 0),
        Err(SimError::NoNodes)
    ));
    assert!(matches!(
        node_ips(Ipv4Addr::new(128, 0, 0, 1), 1),
        Err(SimError::BaseIp(_))
    ));
}

#[test]
fn names_are_zero_padded_to_at_least_five_digits() {
    assert_eq!(name_width(1), 5);
    assert_eq!(name_width(5000), 5);
    assert_eq!(name_width(99_999), 5);
    assert_eq!(name_width(100_000), 6);
    assert_eq!(name_width(1_234_567), 7);
    assert_eq!(node_name("sim-", 0, 5), "sim-00000");
    assert_eq!(node_name("sim-", 42, 5), "sim-00042");
    assert_eq!(node_name("edge-", 7, 6), "edge-000007");
    assert_eq!(FleetConfig::default().name_prefix, "sim-");
}

#[test]
fn states_parse_print_and_serialize_alike() {
    for state in KubeletState::ALL {
        let name = state.to_string();
        assert_eq!(name.parse::<KubeletState>(), Ok(state));
        assert_eq!(
            serde_json::to_string(&state).expect("serializes"),
            format!("\"{name}\"")
        );
        assert_eq!(
            serde_json::from_str::<KubeletState>(&format!("\"{name}\"")).expect("parses"),
            state
        );
        assert!(VALID_STATES.contains(state.as_str()));
    }
    assert_eq!(" Down ".parse::<KubeletState>(), Ok(KubeletState::Down));
    let err = "dead".parse::<KubeletState>().expect_err("unknown");
    assert_eq!(err.input(), "dead");
    let msg = err.to_string();
    assert!(msg.contains("up, down, sick, hang, slow"), "{msg}");
}

#[test]
fn defaults_match_the_flags() {
    let d = FleetConfig::default();
    assert_eq!(d.base_ip, Ipv4Addr::new(127, 1, 0, 1));
    assert_eq!(d.port, 10250);
    assert_eq!(d.control, "127.0.0.1:0".parse().expect("addr"));
    assert_eq!(d.slow_delay, Duration::from_secs(2));
}

/// One request the fake API server saw.
#[derive(Clone, Debug)]
struct Seen {
    method: String,
    path: String,
    content_type: String,
    authorization: String,
    body: serde_json::Value,
}

/// A fake API server: Leases are created (201) then renewed (200); a node
/// status is 404 until its node is registered (201).
#[derive(Clone, Default)]
struct FakeApi {
    seen: Arc<std::sync::Mutex<Vec<Seen>>>,
    registered: Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    changed: Arc<tokio::sync::Notify>,
}

impl FakeApi {
    async fn serve(self, shutdown: CancellationToken) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("binds");
        let addr = listener.local_addr().expect("addr");
        let app = axum::Router::new()
            .fallback(
                |axum::extract::State(api): axum::extract::State<FakeApi>,
                 req: axum::extract::Request| async move { api.answer(req).await },
            )
            .with_state(self);
        tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown.cancelled_owned())
                .await;
        });
        addr
    }

    async fn answer(&self, req: axum::extract::Request) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        // Read before the body is awaited: a borrow of the request must not live across it.
        let (method, path, content_type, authorization) = {
            let header = |name| {
                req.headers()
                    .get(name)
                    .and_then(|v: &axum::http::HeaderValue| v.to_str().ok())
                    .unwrap_or("")
                    .to_string()
            };
            (
                req.method().to_string(),
                req.uri().path().to_string(),
                header("content-type"),
                header("authorization"),
            )
        };
        let bytes = axum::body::to_bytes(req.into_body(), 1 << 20)
            .await
            .expect("body");
        // Protobuf bodies read by the controller's own reader: two
        // implementations of upstream's field numbers, checked against each other.
        let body: serde_json::Value = if bytes.is_empty() {
            serde_json::Value::Null
        } else if content_type == crate::protobuf::PROTOBUF {
            let json = nodekeeper::k8s::protobuf::to_json(&bytes).expect("a protobuf body");
            serde_json::from_slice(&json).expect("JSON from protobuf")
        } else {
            serde_json::from_slice(&bytes).expect("JSON body")
        };
        // Leases created so far, by name: a get finds only those.
        let lease_created = |name: &str| {
            self.seen.lock().expect("lock").iter().any(|s| {
                s.method == "POST"
                    && s.path.ends_with("/leases")
                    && s.body["metadata"]["name"] == name
            })
        };
        let status = {
            let mut registered = self.registered.lock().expect("lock");
            match (method.as_str(), path.as_str()) {
                ("GET", p) if p.contains("/leases/") => {
                    if lease_created(p.rsplit('/').next().unwrap_or("")) {
                        StatusCode::OK
                    } else {
                        StatusCode::NOT_FOUND
                    }
                }
                ("GET", p) if p.starts_with("/api/v1/nodes/") => {
                    if registered.contains(p.trim_start_matches("/api/v1/nodes/")) {
                        StatusCode::OK
                    } else {
                        StatusCode::NOT_FOUND
                    }
                }
                ("POST", "/api/v1/nodes") => {
                    registered.insert(body["metadata"]["name"].as_str().expect("name").into());
                    StatusCode::CREATED
                }
                ("PATCH", p) => {
                    let name = p.trim_start_matches("/api/v1/nodes/");
                    let name = name.trim_end_matches("/status");
                    if registered.contains(name) {
                        StatusCode::OK
                    } else {
                        StatusCode::NOT_FOUND
                    }
                }
                ("POST", _) => StatusCode::CREATED,
                _ => StatusCode::OK,
            }
        };
        self.seen.lock().expect("lock").push(Seen {
            method,
            path,
            content_type,
            authorization,
            body,
        });
        self.changed.notify_waiters();
        status
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().expect("lock").clone()
    }

    /// Waits until `f` holds of the requests seen; bounded.
    async fn wait_until(&self, f: impl Fn(&[Seen]) -> bool) {
        timeout(LIMIT, async {
            // Ends when `f` holds; each turn waits for another request.
            loop {
                let changed = self.changed.notified();
                if f(&self.seen()) {
                    return;
                }
                changed.await;
            }
        })
        .await
        .expect("the fake API saw the pushes in time");
    }
}

fn count(seen: &[Seen], method: &str, path: &str) -> usize {
    seen.iter()
        .filter(|s| s.method == method && s.path == path)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pushes_are_what_a_kubelet_sends() {
    let token = CancellationToken::new();
    let api = FakeApi::default();
    let addr = api.clone().serve(token.clone()).await;
    let (fleet, fleet_token) = start(11, 2).await;
    assert_eq!(fleet.handle().push_stats(), None);
    let config = PushConfig {
        lease_renew_interval: Duration::from_millis(50),
        status_update_interval: Duration::from_millis(50),
        register: true,
        token: BearerToken::new("t0k3n"),
        clock_skew: jiff::SignedDuration::from_hours(3),
        ..PushConfig::new(format!("http://{addr}/"))
    };
    fleet.start_pushing(config.clone()).expect("pushing starts");
    assert!(matches!(
        fleet.start_pushing(config),
        Err(SimError::Push(PushSetupError::AlreadyPushing))
    ));
    let names: Vec<String> = fleet.nodes().iter().map(|n| n.name.clone()).collect();
    let lease =
        |n: &str| format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{n}");
    let status = |n: &str| format!("/api/v1/nodes/{n}/status");
    api.wait_until(|seen| {
        names
            .iter()
            .all(|n| count(seen, "PUT", &lease(n)) >= 2 && count(seen, "PATCH", &status(n)) >= 3)
    })
    .await;
    // Heartbeats are in whole seconds: a patch that carries one comes a second on.
    api.wait_until(|seen| {
        names.iter().all(|n| {
            let mine = seen.iter().filter(|s| {
                s.path == status(n)
                    || (s.path == "/api/v1/nodes" && s.body["metadata"]["name"] == n.as_str())
            });
            mine.skip_while(|s| s.method != "POST")
                .any(|s| s.method == "PATCH" && !s.body["status"]["conditions"].is_null())
        })
    })
    .await;
    let seen = api.seen();
    assert!(seen.iter().all(|s| s.authorization == "Bearer t0k3n"));
    for name in &names {
        let mine: Vec<&Seen> = seen
            .iter()
            .filter(|s| {
                s.body.to_string().contains(name.as_str()) || s.path.contains(name.as_str())
            })
            .collect();
        // The Lease is looked for, created once the node exists (kubernetes
        // `component-helpers/apimachinery/lease/controller.go:158-181`,
        // `pkg/kubelet/util/nodelease.go:32-55`), then renewed.
        let leases: Vec<&&Seen> = mine.iter().filter(|s| s.path.contains("/leases")).collect();
        assert_eq!(leases[0].method, "GET");
        let created = leases
            .iter()
            .position(|s| s.method == "POST")
            .expect("the Lease created");
        assert!(leases[..created].iter().all(|s| s.method == "GET"));
        let leases = &leases[created..];
        assert!(leases[1..].iter().all(|s| s.method == "PUT"));
        let lease_posted = mine
            .iter()
            .position(|s| s.method == "POST" && s.path.contains("/leases"))
            .expect("the Lease created");
        let registered_at = mine
            .iter()
            .position(|s| s.method == "POST" && s.path == "/api/v1/nodes")
            .expect("a registration");
        assert!(registered_at < lease_posted, "the Lease waits for its node");
        // Creates and updates in protobuf, patches in JSON, as a kubelet sends them.
        assert!(leases
            .iter()
            .all(|s| s.content_type == crate::protobuf::PROTOBUF));
        let renew = leases[1].body["spec"]["renewTime"]
            .as_str()
            .expect("renewTime");
        assert_eq!(renew.len(), "2026-11-30T09:00:00.000000Z".len(), "{renew}");
        assert_eq!(leases[1].body["spec"]["holderIdentity"], name.as_str());
        assert_eq!(leases[1].body["spec"]["leaseDurationSeconds"], 40);
        // The first status update is refused, the node registers, then updates go through.
        let first_patch = mine
            .iter()
            .position(|s| s.method == "PATCH")
            .expect("a PATCH");
        let register = mine
            .iter()
            .position(|s| s.method == "POST" && s.path == "/api/v1/nodes")
            .expect("a registration");
        assert!(first_patch < register);
        assert_eq!(mine[register].content_type, crate::protobuf::PROTOBUF);
        assert_eq!(
            mine[first_patch].content_type,
            "application/strategic-merge-patch+json"
        );
        assert_eq!(count(&seen, "POST", "/api/v1/nodes"), names.len());
        // Registered with the four conditions a kubelet keeps, whole.
        let registration = mine[register];
        let conditions = registration.body["status"]["conditions"]
            .as_array()
            .expect("conditions");
        let types: Vec<&str> = conditions
            .iter()
            .map(|c| c["type"].as_str().expect("type"))
            .collect();
        assert_eq!(
            types,
            ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]
        );
        let ready = &conditions[3];
        assert_eq!(
            (&ready["status"], &ready["reason"]),
            (
                &serde_json::json!("True"),
                &serde_json::json!("KubeletReady")
            )
        );
        // Then only what changed: each condition's heartbeat, by type.
        let patches: Vec<&&Seen> = mine[register..]
            .iter()
            .filter(|s| s.method == "PATCH")
            .collect();
        assert!(patches.iter().any(|p| p.body != serde_json::json!({})));
        // The first, before it knew the node, carried everything.
        let first = &mine[first_patch].body["status"];
        assert_eq!(first["conditions"].as_array().expect("conditions").len(), 4);
        assert!(first["nodeInfo"]["kubeletVersion"].is_string(), "{first}");
        for patch in &patches {
            assert_eq!(patch.content_type, "application/strategic-merge-patch+json");
            if patch.body == serde_json::json!({}) {
                // Within the same second nothing changed.
                continue;
            }
            let status = &patch.body["status"];
            assert_eq!(
                status["$setElementOrder/conditions"],
                serde_json::json!(types
                    .iter()
                    .map(|t| serde_json::json!({"type": t}))
                    .collect::<Vec<_>>()),
                "{status}"
            );
            for c in status["conditions"].as_array().expect("conditions") {
                let keys: Vec<&String> = c.as_object().expect("object").keys().collect();
                assert_eq!(keys, ["lastHeartbeatTime", "type"], "{c}");
            }
        }
        // The node's clock is three hours ahead.
        let beat: jiff::Timestamp = ready["lastHeartbeatTime"]
            .as_str()
            .expect("time")
            .parse()
            .expect("RFC 3339");
        let ahead = beat
            .duration_since(nodekeeper::model::Micros::now().timestamp())
            .as_secs_f64()
            / 3600.0;
        assert!((2.9..3.1).contains(&ahead), "{ahead}h ahead");
    }
    let stats = fleet.handle().push_stats().expect("pushing");
    assert_eq!(stats.registrations, 2);
    // A 404 that ends in a registration is no failure.
    assert_eq!((stats.failed, stats.last_error), (0, None));
    let control: serde_json::Value = client()
        .get(format!("http://{}/stats", fleet.control_addr()))
        .send()
        .await
        .expect("control answers")
        .json()
        .await
        .expect("JSON");
    assert_eq!(control["nodes"], 2);
    assert_eq!(control["states"]["up"], 2);
    assert!(control["pushes"]["sent"].as_u64().expect("sent") >= stats.sent);

    // Every pusher stops with the fleet.
    fleet_token.cancel();
    timeout(LIMIT, fleet.closed())
        .await
        .expect("fleet stops in time");
    token.cancel();
}
