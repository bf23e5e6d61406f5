//! Shared helpers for the integration tests: the real binary, a simulated
//! fleet in the test process, and bounded waits on observable state.
#![allow(dead_code)]
// Tests drive real processes: they wait in real time and set up files with std::fs.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::marker::PhantomData;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use nodekeeper_sim::protobuf::PROTOBUF;
use nodekeeper_sim::{Fleet, FleetConfig, FleetHandle, PushConfig, PushStats};
use serde_json::Value;
use tokio_util::sync::CancellationToken;

pub const BIN: &str = env!("CARGO_BIN_EXE_nodekeeper");

/// The repository's top (README, dist/, fixtures/, docs/): these tests live in cli/.
pub const REPO: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/..");

/// How long any wait in a test may take before it fails.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// A simulated fleet living in the test process.
pub struct TestFleet {
    pub fleet: Fleet,
    pub handle: FleetHandle,
    shutdown: CancellationToken,
}

impl TestFleet {
    pub async fn start(nodes: usize, base_ip: Ipv4Addr) -> TestFleet {
        nodekeeper::install_crypto_provider();
        let shutdown = CancellationToken::new();
        let config = FleetConfig {
            nodes,
            base_ip,
            port: 0,
            ..FleetConfig::default()
        };
        let fleet = Fleet::start(config, shutdown.clone())
            .await
            .expect("fleet starts");
        let handle = fleet.handle();
        TestFleet {
            fleet,
            handle,
            shutdown,
        }
    }

    pub fn name(&self, i: usize) -> String {
        self.fleet.nodes()[i].name.clone()
    }

    /// Makes the fleet push to `controller` every 200ms (trusting its
    /// certificate if it serves TLS), changed by `tweak`.
    pub fn push_to(&self, controller: &Controller, tweak: impl FnOnce(&mut PushConfig)) {
        let mut config = fast_push(&controller.url);
        config.server_ca = controller.server_pem.clone();
        tweak(&mut config);
        self.fleet.start_pushing(config).expect("pushing starts");
    }

    /// The fleet's push counters (it must push).
    pub fn push_stats(&self) -> PushStats {
        self.handle.push_stats().expect("the fleet pushes")
    }

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.fleet.closed().await;
    }
}

/// One test's site: kubelets on the test's own loopback range, a temporary
/// directory with their nodes file and the store's path, and the
/// controller's flags (fast periods, [`GRACE`], changed with
/// [`TestSiteBuilder`]).
///
/// `F` is what answers for the kubelets: by default a simulated fleet in the
/// test process ([`TestSite::builder`]); `()` when nothing does
/// ([`TestSite::named`]), for a controller in push mode whose heartbeats the
/// test sends itself, or a `nodekeeper sim` process does.
pub struct TestSite<F = TestFleet> {
    pub fleet: F,
    pub dir: tempfile::TempDir,
    pub db: PathBuf,
    pub nodes_file: PathBuf,
    args: Vec<String>,
}

/// Sets a [`TestSite`] up: `TestSite::builder(3, base_ip).grace("4s").start()`.
pub struct TestSiteBuilder<F = TestFleet> {
    nodes: usize,
    /// The nodes' names when nothing answers for them (a fleet names its own).
    names: Vec<String>,
    base_ip: Ipv4Addr,
    flags: Vec<(String, String)>,
    push_mode: bool,
    listed: Option<usize>,
    labels: Option<fn(usize) -> Value>,
    no_nodes_file: bool,
    fleet: PhantomData<F>,
}

impl<F> TestSiteBuilder<F> {
    fn new(nodes: usize, names: Vec<String>, base_ip: Ipv4Addr) -> TestSiteBuilder<F> {
        TestSiteBuilder {
            nodes,
            names,
            base_ip,
            flags: Vec::new(),
            push_mode: false,
            listed: None,
            labels: None,
            no_nodes_file: false,
            fleet: PhantomData,
        }
    }

    /// `--node-monitor-grace-period` (default [`GRACE`]; 2s in push mode).
    pub fn grace(self, grace: &str) -> TestSiteBuilder<F> {
        self.flag("--node-monitor-grace-period", grace)
    }

    /// Any other flag with a value, set in place of the default if it has one.
    pub fn flag(mut self, flag: &str, value: &str) -> TestSiteBuilder<F> {
        self.flags.push((flag.to_string(), value.to_string()));
        self
    }

    /// Node `i` is listed in the nodes file with the labels `labels(i)`.
    pub fn labels(mut self, labels: fn(usize) -> Value) -> TestSiteBuilder<F> {
        self.labels = Some(labels);
        self
    }

    /// The controller is not given the nodes file: the test names another
    /// source of nodes (an inventory, a cloud) among its own flags.
    pub fn without_nodes_file(mut self) -> TestSiteBuilder<F> {
        self.no_nodes_file = true;
        self
    }

    /// Writes `nodes` as the nodes file in a new directory and sets the
    /// controller's flags (`args` of the nodes file, then the test's): the
    /// site, with `fleet` answering for the nodes.
    fn build(
        self,
        fleet: F,
        nodes: impl Iterator<Item = (String, IpAddr)>,
        args: impl FnOnce(&Path) -> Vec<String>,
    ) -> TestSite<F> {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("db");
        let listed = nodes.take(self.listed.unwrap_or(self.nodes));
        let nodes_file = write_nodes_file(dir.path(), listed, self.labels);
        let mut args = args(&nodes_file);
        for (flag, value) in &self.flags {
            set_flag(&mut args, flag, value);
        }
        if self.no_nodes_file {
            let at = args.iter().position(|a| a == "--nodes-file").unwrap();
            args.drain(at..at + 2);
        }
        TestSite {
            fleet,
            dir,
            db,
            nodes_file,
            args,
        }
    }
}

impl TestSiteBuilder {
    /// The controller waits for pushed heartbeats ([`push_mode_args`]) instead
    /// of probing; the fleet pushes once told to ([`TestFleet::push_to`]).
    pub fn push_mode(mut self) -> TestSiteBuilder {
        self.push_mode = true;
        self
    }

    /// The nodes file lists only the first `count` nodes: the others are
    /// unknown to the controller until they register themselves.
    pub fn listing_first(mut self, count: usize) -> TestSiteBuilder {
        self.listed = Some(count);
        self
    }

    pub async fn start(self) -> TestSite {
        let fleet = TestFleet::start(self.nodes, self.base_ip).await;
        let nodes: Vec<(String, IpAddr)> = fleet
            .fleet
            .nodes()
            .iter()
            .map(|n| (n.name.clone(), n.address.ip()))
            .collect();
        let port = fleet.fleet.port();
        let push_mode = self.push_mode;
        self.build(fleet, nodes.into_iter(), |file| {
            if push_mode {
                push_mode_args(file, &[])
            } else {
                fast_args(file, port)
            }
        })
    }
}

impl TestSiteBuilder<()> {
    /// The site, its nodes file written; nothing answers for the nodes.
    pub fn start(mut self) -> TestSite<()> {
        let names = std::mem::take(&mut self.names);
        let base = u32::from(self.base_ip);
        let nodes = names
            .into_iter()
            .enumerate()
            .map(move |(i, name)| (name, IpAddr::V4(Ipv4Addr::from(base + i as u32))));
        self.build((), nodes, |file| push_mode_args(file, &[]))
    }
}

impl<F> TestSite<F> {
    /// The controller's flags for this site; tests add their own.
    pub fn args(&self) -> Vec<String> {
        self.args.clone()
    }

    /// Starts a controller on the site's store with its flags and `extra`.
    pub fn controller(&self, extra: &[String]) -> Controller {
        let mut args = self.args();
        args.extend(extra.iter().cloned());
        Controller::start(&self.db, &args)
    }

    /// [`TestSite::controller`] with `extra` flags given as `&str`s.
    pub fn controller_with(&self, extra: &[&str]) -> Controller {
        let extra: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
        self.controller(&extra)
    }

    /// The site's directory (the nodes file, the store, anything a test adds).
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// A controller to start with credentials as well as the site's flags:
    /// `site.run().tls().tokens("operator-secret\n").flags(&[...]).start()`.
    pub fn run(&self) -> Run<'_, F> {
        Run {
            site: self,
            extra: Vec::new(),
        }
    }
}

/// Starts a controller on a [`TestSite`]; its files go in the site's directory.
pub struct Run<'a, F> {
    site: &'a TestSite<F>,
    extra: Vec<String>,
}

impl<F> Run<'_, F> {
    /// Serves TLS with a self-signed certificate for 127.0.0.1 (`tls.crt`,
    /// `tls.key`); the controller's helpers, and a fleet pushing to it, trust it.
    pub fn tls(self) -> Self {
        let (cert, key, _) = self_signed_cert(self.site.path(), &["127.0.0.1"]);
        self.flags(&["--tls-cert-file", &cert, "--tls-private-key-file", &key])
    }

    /// `--token-file` with `lines` (written as `tokens`); the controller's
    /// helpers present its first operator's token.
    pub fn tokens(self, lines: &str) -> Self {
        let path = self.site.path().join("tokens");
        std::fs::write(&path, lines).unwrap();
        self.flags(&["--token-file", path.to_str().unwrap()])
    }

    /// `--client-ca-file` with the CA certificate `pem` (written as `client-ca.pem`).
    pub fn client_ca(self, pem: &str) -> Self {
        let path = self.site.path().join("client-ca.pem");
        std::fs::write(&path, pem).unwrap();
        self.flags(&["--client-ca-file", path.to_str().unwrap()])
    }

    /// `--cluster-signing-cert-file` and `--cluster-signing-key-file` with
    /// `ca`'s certificate and key (written as `ca.crt`, `ca.key`).
    pub fn cluster_signing(self, ca: &Ca) -> Self {
        let (cert, key) = (
            self.site.path().join("ca.crt"),
            self.site.path().join("ca.key"),
        );
        std::fs::write(&cert, &ca.pem).unwrap();
        std::fs::write(&key, ca.key.serialize_pem()).unwrap();
        self.flags(&[
            "--cluster-signing-cert-file",
            cert.to_str().unwrap(),
            "--cluster-signing-key-file",
            key.to_str().unwrap(),
        ])
    }

    pub fn flags(mut self, flags: &[&str]) -> Self {
        self.extra.extend(flags.iter().map(|f| f.to_string()));
        self
    }

    pub fn start(self) -> Controller {
        self.site.controller(&self.extra)
    }
}

impl TestSite {
    /// A site of `nodes` simulated kubelets from `base_ip` on; each test
    /// keeps a range of its own, so tests running at once never share an
    /// address.
    pub fn builder(nodes: usize, base_ip: Ipv4Addr) -> TestSiteBuilder {
        TestSiteBuilder::new(nodes, Vec::new(), base_ip)
    }

    /// [`TestSite::builder`] with the defaults.
    pub async fn start(nodes: usize, base_ip: Ipv4Addr) -> TestSite {
        TestSite::builder(nodes, base_ip).start().await
    }

    /// Node `i`'s name.
    pub fn name(&self, i: usize) -> String {
        self.fleet.name(i)
    }

    /// Stops the fleet; the directory goes when the site is dropped.
    pub async fn stop(self) {
        self.fleet.stop().await;
    }

    /// Stops the fleet and hands over the directory, for a test that goes
    /// on with the stopped store alone.
    pub async fn stop_fleet(self) -> tempfile::TempDir {
        self.fleet.stop().await;
        self.dir
    }
}

impl TestSite<()> {
    /// A site in push mode ([`push_mode_args`]) whose nodes file lists
    /// `names`, at `base_ip` and the addresses after it (never probed, but
    /// on the test's own range all the same). Nothing answers for them: the
    /// test pushes their heartbeats, or leaves them silent.
    pub fn named<S: AsRef<str>>(names: &[S], base_ip: Ipv4Addr) -> TestSiteBuilder<()> {
        let names: Vec<String> = names.iter().map(|n| n.as_ref().to_string()).collect();
        TestSiteBuilder::new(names.len(), names, base_ip)
    }

    /// A site in push mode whose nodes file lists no node: kubelets must
    /// register themselves.
    pub fn unlisted() -> TestSiteBuilder<()> {
        TestSite::named::<&str>(&[], Ipv4Addr::LOCALHOST)
    }
}

/// Writes `nodes` (name, address) as `dir/nodes.json`, node `i` with the
/// labels `labels(i)` if given.
fn write_nodes_file(
    dir: &Path,
    nodes: impl Iterator<Item = (String, IpAddr)>,
    labels: Option<fn(usize) -> Value>,
) -> PathBuf {
    let entries: Vec<Value> = nodes
        .enumerate()
        .map(|(i, (name, address))| {
            let mut entry = serde_json::json!({"name": name, "address": address.to_string()});
            if let Some(labels) = labels {
                entry["labels"] = labels(i);
            }
            entry
        })
        .collect();
    let path = dir.join("nodes.json");
    std::fs::write(&path, serde_json::to_vec(&entries).unwrap()).unwrap();
    path
}

/// A watch stream (`?watch=true`), read event by event.
pub struct WatchStream {
    response: reqwest::Response,
    buffer: Vec<u8>,
}

impl WatchStream {
    /// Opens `url`; a watch outlives the usual whole-request timeout, so its
    /// client has none (each event is awaited up to [`DEADLINE`]).
    pub async fn open(url: &str) -> WatchStream {
        nodekeeper::install_crypto_provider();
        let response = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(url)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200);
        WatchStream {
            response,
            buffer: Vec::new(),
        }
    }

    /// Watches `c`'s nodes, `query` following `?watch=true` (e.g. `&resourceVersion=5`).
    pub async fn nodes(c: &Controller, query: &str) -> WatchStream {
        WatchStream::open(&format!("{}/api/v1/nodes?watch=true{query}", c.url)).await
    }

    /// The next event, or `None` when the stream ends.
    pub async fn next(&mut self) -> Option<Value> {
        loop {
            if let Some(i) = self.buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.buffer.drain(..=i).collect();
                return Some(serde_json::from_slice(&line).unwrap());
            }
            let chunk = tokio::time::timeout(DEADLINE, self.response.chunk())
                .await
                .expect("a watch event in time");
            match chunk.unwrap() {
                Some(bytes) => self.buffer.extend_from_slice(&bytes),
                None => return None,
            }
        }
    }

    /// Skips events until one about `node` matches `pred`. Wait for the
    /// change wanted (a Ready transition, say), not for a node's next
    /// change: the lifting of its start-up taints can come first.
    pub async fn until(&mut self, node: &str, pred: impl Fn(&Value) -> bool) -> Value {
        loop {
            let event = self.next().await.expect("the stream ended early");
            if event["object"]["metadata"]["name"] == node && pred(&event) {
                return event;
            }
        }
    }
}

/// A controller process, killed when dropped.
pub struct Controller {
    pub child: Child,
    pub db: PathBuf,
    pub url: String,
    pub log: PathBuf,
    /// With `--token-file`, the first operator's token in it: the helpers'
    /// reads present it, since every request but health checks needs one.
    pub token: Option<String>,
    /// With `--tls-cert-file`, the certificate served: the helpers trust it.
    pub server_pem: Option<String>,
}

/// The first token of a `--token-file` among `args` that is not bound to a
/// node (`TOKEN`, or `token,user,uid` with a user other than system:node:…).
fn operator_token(args: &[String]) -> Option<String> {
    let at = args.iter().position(|a| a == "--token-file")?;
    let text = std::fs::read_to_string(&args[at + 1]).ok()?;
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .find_map(|line| {
            let fields: Vec<&str> = line.split(',').collect();
            match fields.as_slice() {
                [token] => Some(token.to_string()),
                [token, user, _, ..] if !user.starts_with("system:node:") => {
                    Some(token.to_string())
                }
                _ => None,
            }
        })
}

/// The certificate of a `--tls-cert-file` among `args`.
fn serving_pem(args: &[String]) -> Option<String> {
    let at = args.iter().position(|a| a == "--tls-cert-file")?;
    Some(std::fs::read_to_string(&args[at + 1]).expect("the --tls-cert-file is readable"))
}

/// The grace period of [`fast_args`]. Probes every 200 ms and a 3 s grace
/// leave a stalled 2-core machine room for a dozen missed sweeps before a
/// healthy node goes Unknown; tests that measure the grace set their own.
pub const GRACE: &str = "3s";
/// [`GRACE`] in seconds, for windows counted on the controller's clock.
pub const GRACE_SECONDS: f64 = 3.0;

/// Fast periods so tests take seconds.
pub fn fast_args(nodes_file: &Path, port: u16) -> Vec<String> {
    [
        "--nodes-file",
        &nodes_file.to_string_lossy(),
        "--kubelet-scheme",
        "http",
        "--kubelet-port",
        &port.to_string(),
        "--kubelet-timeout",
        "500ms",
        "--node-sync-period",
        "200ms",
        "--node-monitor-grace-period",
        GRACE,
        "--node-monitor-period",
        "100ms",
        "--listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// Sets `flag` to `value` among `args`: in place when it is there (a flag
/// given twice is refused), appended when not.
pub fn set_flag(args: &mut Vec<String>, flag: &str, value: &str) {
    match args.iter().position(|a| a == flag) {
        Some(at) => args[at + 1] = value.to_string(),
        None => args.extend([flag.to_string(), value.to_string()]),
    }
}

/// Push settings for tests: renewals and status updates every 200ms.
pub fn fast_push(url: &str) -> PushConfig {
    PushConfig {
        lease_renew_interval: Duration::from_millis(200),
        status_update_interval: Duration::from_millis(200),
        request_timeout: Duration::from_secs(5),
        ..PushConfig::new(url)
    }
}

/// A controller in push mode with fast periods: monitor every 100ms, grace 2s.
pub fn push_mode_args(nodes_file: &Path, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--nodes-file",
        &nodes_file.to_string_lossy(),
        "--node-status-mode",
        "push",
        // Nothing is probed, but the flags are checked all the same.
        "--kubelet-scheme",
        "http",
        "--node-sync-period",
        "200ms",
        "--node-monitor-period",
        "100ms",
        "--node-monitor-grace-period",
        "2s",
        "--node-startup-grace-period",
        "2s",
        "--listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// Follows one of the `nodekeeper_last_*_timestamp_seconds` gauges until a
/// whole pass has started at or after `since`, by the controller's clock:
/// one pass finished at or after `since`, then another after that one.
/// However slow the machine, the controller has then looked at its nodes
/// after `since`: a test that waits for it neither gives up early nor
/// passes before anything was decided.
pub struct PassAfter {
    gauge: &'static str,
    since: f64,
    first: Option<f64>,
}

impl PassAfter {
    pub fn new(gauge: &'static str, since: f64) -> PassAfter {
        PassAfter {
            gauge,
            since,
            first: None,
        }
    }

    /// When such a pass finished, once one has.
    pub async fn done(&mut self, c: &Controller) -> Option<f64> {
        let last = c.metric(self.gauge).await.unwrap_or(0.0);
        match self.first {
            None if last >= self.since => self.first = Some(last),
            Some(first) if last > first => return Some(last),
            _ => {}
        }
        None
    }
}

/// Now by the wall clock, in Unix seconds, as the controller's
/// `nodekeeper_last_*_timestamp_seconds` gauges count it.
pub fn unix_now() -> f64 {
    nodekeeper::model::Micros::now().0 as f64 / 1e6
}

/// An event's `time` in Unix seconds, as the `nodekeeper_last_*_timestamp_seconds`
/// gauges count it: both are the controller's wall clock.
pub fn event_seconds(event: &Value) -> f64 {
    let time = event["time"].as_str().expect("an event has a time");
    let micros = nodekeeper::model::Micros::parse_rfc3339(time).expect("RFC 3339");
    micros.0 as f64 / 1e6
}

/// Polls `check` until it holds; fails the test after [`DEADLINE`] with `what`.
pub async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let started = Instant::now();
    while !check().await {
        assert!(started.elapsed() < DEADLINE, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A `nodekeeper sim` process, killed when dropped.
pub struct SimProcess {
    pub child: Child,
    /// Its control endpoint, e.g. `http://127.0.0.1:40000`.
    pub control: String,
    pub log: PathBuf,
}

impl SimProcess {
    /// Starts `nodekeeper sim ARGS` (with `--control 127.0.0.1:0 --port 0`)
    /// and waits for its banner.
    pub fn start(dir: &Path, args: &[&str]) -> SimProcess {
        let out = dir.join("sim.out");
        let log = dir.join("sim.log");
        let child = Command::new(BIN)
            .args([
                "--log",
                "info",
                "sim",
                "--control",
                "127.0.0.1:0",
                "--port",
                "0",
            ])
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary starts");
        let mut sim = SimProcess {
            child,
            control: String::new(),
            log,
        };
        let started = Instant::now();
        loop {
            if let Some(status) = sim.child.try_wait().unwrap() {
                panic!("sim exited early ({status}): {}", sim.log_text());
            }
            let banner = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(rest) = banner.split("control ").nth(1) {
                if let Some(url) = rest.split([';', ' ', '\n']).next() {
                    sim.control = url.to_string();
                    return sim;
                }
            }
            assert!(
                started.elapsed() < DEADLINE,
                "sim did not start: {}",
                sim.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `GET` on the control endpoint, as JSON.
    pub async fn get(&self, path: &str) -> Value {
        client()
            .get(format!("{}{path}", self.control))
            .send()
            .await
            .expect("the sim answers")
            .json()
            .await
            .expect("JSON")
    }
}

impl Drop for SimProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Controller {
    /// Starts `nodekeeper run` on `db` and waits until it serves.
    pub fn start(db: &Path, args: &[String]) -> Controller {
        let log = db.with_extension(format!(
            "log.{}",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        let child = Command::new(BIN)
            .arg("--db")
            .arg(db)
            .arg("--log")
            .arg("info")
            .arg("run")
            .args(args)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("the binary starts");
        let mut controller = Controller {
            child,
            db: db.to_path_buf(),
            url: String::new(),
            log,
            token: operator_token(args),
            server_pem: serving_pem(args),
        };
        let started = Instant::now();
        loop {
            if let Some(status) = controller.child.try_wait().unwrap() {
                panic!(
                    "controller exited early ({status}): {}",
                    controller.log_text()
                );
            }
            // The discovery file is written once the API serves.
            if let Ok(bytes) = std::fs::read(db.join("controller.json")) {
                if let Ok(v) = serde_json::from_slice::<Value>(&bytes) {
                    if v["pid"].as_u64() == Some(controller.child.id() as u64) {
                        controller.url = v["url"].as_str().unwrap().to_string();
                        return controller;
                    }
                }
            }
            assert!(
                started.elapsed() < DEADLINE,
                "controller did not start: {}",
                controller.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// A client for this controller: over TLS, one that trusts its certificate.
    pub fn client(&self) -> reqwest::Client {
        match &self.server_pem {
            Some(pem) => client_trusting(pem.as_bytes()),
            None => client(),
        }
    }

    /// A GET to the controller, with its reader token if it has one.
    pub fn request(&self, path: &str) -> reqwest::RequestBuilder {
        let request = self.client().get(format!("{}{path}", self.url));
        match &self.token {
            Some(token) => request.bearer_auth(token),
            None => request,
        }
    }

    /// A kubelet's status update: `body` as a strategic merge patch of
    /// `node`'s status (kubernetes `pkg/kubelet/kubelet_node_status.go:643`
    /// via `component-helpers/node/util/status.go:39`; docs/kubelet-api.md 2.1).
    pub fn status_patch(&self, node: &str, body: &Value) -> Call<'_> {
        self.call("PATCH", &format!("/api/v1/nodes/{node}/status"))
            .body("application/strategic-merge-patch+json", body.to_string())
    }

    /// `method path` to the controller, to be given a body and a user;
    /// as [`Controller::request`]'s, it starts with the controller's
    /// operator token, if it has one.
    pub fn call(&self, method: &str, path: &str) -> Call<'_> {
        Call {
            c: self,
            method: reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
            path: path.to_string(),
            token: self.token.clone(),
            headers: Vec::new(),
            body: None,
        }
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        let response = self.request(path).send().await.expect("controller answers");
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (
            status,
            serde_json::from_str(&text).unwrap_or(Value::String(text)),
        )
    }

    pub async fn text(&self, path: &str) -> String {
        self.request(path)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// The value of `name`'s first sample on `/metrics`.
    pub async fn metric(&self, name: &str) -> Option<f64> {
        let text = self.text("/metrics").await;
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse().ok())
    }

    /// Waits until a whole pass timed by `gauge` has started at or after
    /// `since` (see [`PassAfter`]); returns when that pass finished.
    pub async fn wait_pass_after(&self, gauge: &'static str, since: f64) -> f64 {
        let mut pass = PassAfter::new(gauge, since);
        let started = Instant::now();
        loop {
            if let Some(finished) = pass.done(self).await {
                return finished;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "no {gauge} pass after {since}: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// The Ready status of a node as the API shows it.
    pub async fn ready(&self, node: &str) -> Option<String> {
        let (_, v) = self.get(&format!("/api/v1/nodes/{node}")).await;
        ready_of(&v)
    }

    /// Waits until `node`'s Ready status is `want`.
    pub async fn wait_ready(&self, node: &str, want: &str) {
        let started = Instant::now();
        loop {
            if self.ready(node).await.as_deref() == Some(want) {
                return;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{node} never became Ready={want}: {}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `node` is Ready and the controller has taken off the
    /// taints it keeps while a node is not: Ready turns first and the
    /// taints follow in a later write, as upstream's node lifecycle
    /// controller does. A kubectl taint read before then writes back a
    /// list the controller has since changed, and is refused.
    pub async fn wait_settled(&self, node: &str) {
        self.wait_ready(node, "True").await;
        self.wait_for(
            &format!("/api/v1/nodes/{node}"),
            "the readiness taints gone",
            |n| {
                !n["spec"]["taints"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|t| {
                        matches!(
                            t["key"].as_str(),
                            Some("node.kubernetes.io/not-ready" | "node.kubernetes.io/unreachable")
                        )
                    })
            },
        )
        .await;
    }

    /// Polls `path` until `check` holds for its JSON, and returns it.
    pub async fn wait_for(&self, path: &str, what: &str, check: impl Fn(&Value) -> bool) -> Value {
        let started = Instant::now();
        loop {
            let (_, v) = self.get(path).await;
            if check(&v) {
                return v;
            }
            assert!(started.elapsed() < DEADLINE, "never: {what}; last: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until `node` is registered, and returns it: registration runs
    /// beside the API, which serves before it ends.
    pub async fn wait_registered(&self, node: &str) -> Value {
        self.wait_for(
            &format!("/api/v1/nodes/{node}"),
            &format!("{node} registered"),
            |n| n["kind"] == "Node",
        )
        .await
    }

    /// Waits until `node`'s history holds an event of `kind`, and returns
    /// the first one.
    pub async fn wait_event(&self, node: &str, kind: &str) -> Value {
        let history = self
            .wait_for(&format!("/v1/history?node={node}"), kind, |h| {
                h.as_array().unwrap().iter().any(|e| e["kind"] == kind)
            })
            .await;
        history
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["kind"] == kind)
            .cloned()
            .unwrap()
    }

    /// Stops with SIGTERM and waits.
    pub fn stop(mut self) -> std::process::ExitStatus {
        signal(self.child.id(), "-TERM");
        let status = wait_exit(&mut self.child);
        std::mem::forget(self);
        status
    }

    /// Kills with SIGKILL: nothing is flushed on the way out.
    pub fn kill9(mut self) {
        signal(self.child.id(), "-KILL");
        wait_exit(&mut self.child);
        std::mem::forget(self);
    }
}

impl Drop for Controller {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(sig)
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill {sig} {pid} failed");
}

fn wait_exit(child: &mut Child) -> std::process::ExitStatus {
    exited_in_time(child).expect("process did not exit")
}

/// Waits up to [`DEADLINE`] for `child` to exit and returns how it did; one
/// still running then is killed, and the answer is `None`.
pub fn exited_in_time(child: &mut Child) -> Option<std::process::ExitStatus> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn ready_of(node: &Value) -> Option<String> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
        .and_then(|c| c["status"].as_str())
        .map(str::to_string)
}

/// A node's taints as `key:effect`, in order.
pub fn taints(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            format!(
                "{}:{}",
                t["key"].as_str().unwrap(),
                t["effect"].as_str().unwrap()
            )
        })
        .collect()
}

pub fn client() -> reqwest::Client {
    nodekeeper::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// Runs a CLI command and returns (exit code, stdout, stderr).
pub fn cli(db: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .output()
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs a CLI command that must succeed, returning stdout.
pub fn cli_ok(db: &Path, args: &[&str]) -> String {
    let (code, out, err) = cli(db, args);
    assert_eq!(code, 0, "nodekeeper {args:?} failed: {err}");
    out
}

/// Parses JSON output.
pub fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

/// A client that trusts only the given PEM certificate(s).
pub fn client_trusting(pem: &[u8]) -> reqwest::Client {
    nodekeeper::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(10))
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(pem).unwrap())
        .build()
        .unwrap()
}

/// A self-signed serving certificate for `names` written into `dir`:
/// (certificate path, key path, certificate PEM).
pub fn self_signed_cert(dir: &Path, names: &[&str]) -> (String, String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let cert =
        rcgen::CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
            .unwrap()
            .self_signed(&key)
            .unwrap();
    let cert_path = dir.join("tls.crt");
    let key_path = dir.join("tls.key");
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (
        cert_path.to_string_lossy().into_owned(),
        key_path.to_string_lossy().into_owned(),
        cert.pem(),
    )
}

/// A request to a controller as some user: `c.call("PATCH", &path)`, then
/// who sends it and what, then [`Call::send`].
pub struct Call<'a> {
    c: &'a Controller,
    method: reqwest::Method,
    path: String,
    token: Option<String>,
    headers: Vec<(&'static str, String)>,
    body: Option<(String, Vec<u8>)>,
}

/// What the controller answered a [`Call`]: the body as JSON (a string
/// when it is not JSON).
pub struct Answer {
    pub code: u16,
    pub content_type: String,
    pub body: Value,
}

impl Call<'_> {
    /// As the holder of `token`; `None`: anonymous.
    pub fn token(mut self, token: Option<&str>) -> Self {
        self.token = token.map(str::to_string);
        self
    }

    pub fn header(mut self, name: &'static str, value: &str) -> Self {
        self.headers.push((name, value.to_string()));
        self
    }

    /// `body` as `content_type` (no Content-Type header when empty).
    pub fn body(mut self, content_type: &str, body: impl AsRef<[u8]>) -> Self {
        self.body = Some((content_type.to_string(), body.as_ref().to_vec()));
        self
    }

    /// `body` as `application/json`.
    pub fn json(self, body: &Value) -> Self {
        self.body("application/json", body.to_string())
    }

    /// `body` as a kubelet sends it: in Kubernetes protobuf when
    /// `content_type` is [`PROTOBUF`], else as JSON; none when it is null.
    pub fn kubelet_body(self, content_type: &str, body: &Value) -> Self {
        let bytes = match (content_type, body) {
            (_, Value::Null) => Vec::new(),
            (PROTOBUF, _) => nodekeeper_sim::protobuf::encode(body),
            _ => body.to_string().into_bytes(),
        };
        self.body(content_type, bytes)
    }

    /// Sends it: the status and the body.
    pub async fn send(self) -> (u16, Value) {
        let answer = self.answer().await;
        (answer.code, answer.body)
    }

    /// Sends it: the status, the answer's type and the answer.
    pub async fn answer(self) -> Answer {
        let mut request = self
            .c
            .client()
            .request(self.method, format!("{}{}", self.c.url, self.path));
        for (name, value) in self.headers {
            request = request.header(name, value);
        }
        if let Some((content_type, body)) = self.body {
            if !content_type.is_empty() {
                request = request.header("content-type", content_type);
            }
            request = request.body(body);
        }
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.expect("the controller answers");
        let code = response.status().as_u16();
        let content_type = response
            .headers()
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string())
            .unwrap_or_default();
        let text = response.text().await.unwrap();
        Answer {
            code,
            content_type,
            body: serde_json::from_str(&text).unwrap_or(Value::String(text)),
        }
    }
}

/// The real kubectl with nothing from the environment: an empty
/// kubeconfig, its own cache and home, no proxy.
pub struct Kubectl {
    server: String,
    dir: PathBuf,
}

impl Kubectl {
    /// kubectl for the API at `server`, keeping its files in `dir`.
    pub fn new(server: &str, dir: &Path) -> Kubectl {
        std::fs::write(dir.join("kubeconfig"), "").unwrap();
        Kubectl {
            server: server.to_string(),
            dir: dir.to_path_buf(),
        }
    }

    /// The command, to be given its arguments.
    pub fn command(&self) -> tokio::process::Command {
        let mut command = tokio::process::Command::new("kubectl");
        command
            .arg("--server")
            .arg(&self.server)
            .arg("--cache-dir")
            .arg(self.dir.join("cache"))
            .env("KUBECONFIG", self.dir.join("kubeconfig"))
            .env("HOME", &self.dir)
            .env_remove("HTTP_PROXY")
            .env_remove("HTTPS_PROXY")
            .env_remove("http_proxy")
            .env_remove("https_proxy")
            .env("NO_PROXY", "127.0.0.1");
        command
    }

    /// Runs kubectl `args` with `env` set: (exit code, stdout, stderr).
    pub async fn run_with(&self, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
        let out = self
            .command()
            .arg("--request-timeout=10s")
            .args(args)
            .envs(env.iter().copied())
            .output()
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "cannot run kubectl ({e}): these tests need the real kubectl on PATH; \
                     install Debian's `kubernetes-client` package (CI installs it)"
                )
            });
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub async fn run(&self, args: &[&str]) -> (i32, String, String) {
        self.run_with(args, &[]).await
    }

    /// kubectl succeeds: its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let (code, out, err) = self.run(args).await;
        assert_eq!(code, 0, "kubectl {args:?} failed: {err}\n{out}");
        out
    }

    /// kubectl fails, and says `want`.
    pub async fn refused(&self, args: &[&str], want: &str) -> String {
        let (code, out, err) = self.run(args).await;
        assert_ne!(code, 0, "kubectl {args:?} was accepted: {out}");
        assert!(
            err.contains(want),
            "kubectl {args:?}: {err:?} lacks {want:?}"
        );
        err
    }
}

/// A PEM certificate request for node `node`'s client certificate
/// (`CN=system:node:NODE, O=system:nodes`), as a kubelet's CSR carries it
/// (client-go `util/certificate/csr/csr.go` `RequestCertificate`).
pub fn node_csr_pem(node: &str) -> String {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    params.serialize_request(&key).unwrap().pem().unwrap()
}

/// A CA that signs client certificates (ECDSA P-256, as the simulated
/// kubelets' and the bench's).
pub struct Ca {
    params: rcgen::CertificateParams,
    pub key: rcgen::KeyPair,
    /// The CA certificate, for `--client-ca-file`.
    pub pem: String,
}

impl Ca {
    pub fn new() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "kubelets' CA");
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { params, key, pem }
    }

    /// A client certificate `CN=cn, O=o`: its PEM with its key's, and as DER.
    pub fn issue(&self, cn: &str, o: &str) -> (String, nodekeeper_sim::push::NodeCert) {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, cn);
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, o);
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params
            .signed_by(&key, &rcgen::Issuer::from_params(&self.params, &self.key))
            .unwrap();
        let pem = format!("{}{}", cert.pem(), key.serialize_pem());
        let der = (
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
        );
        (pem, der)
    }

    /// `CN=system:node:NAME, O=system:nodes`, as a kubelet's client certificate.
    pub fn node_cert(&self, node: &str) -> nodekeeper_sim::push::NodeCert {
        self.issue(&format!("system:node:{node}"), "system:nodes").1
    }
}
