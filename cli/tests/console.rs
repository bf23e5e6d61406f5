//! The web console: its pages and endpoints over HTTP, `nodekeeper ui` on a
//! stopped store, and the pages themselves in a real browser (Debian's
//! chromium driven by playwright-core, see tests/browser/) against the real
//! binary and simulated fleets.
//!
//! `scripts/test` installs chromium and the pinned playwright-core; without
//! them the browser tests fail saying so.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::{json, Value};

/// One browser test at a time: each runs chromium next to a fleet and a controller.
static BROWSER: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// How long one browser script may run before the test fails.
const SCRIPT_DEADLINE: Duration = Duration::from_secs(600);

fn browser_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/browser")
}

fn chromium() -> String {
    std::env::var("NODEKEEPER_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into())
}

/// Fails with what to do when the browser or playwright-core is missing.
fn check_prerequisites() {
    let missing = |what: &str| {
        panic!("{what} is missing: run the tests with `scripts/test`, which installs chromium (Debian's chromium, chromium-driver) and `npm ci`s the pinned playwright-core in tests/browser")
    };
    if !Path::new(&chromium()).exists() {
        missing(&format!("chromium ({})", chromium()));
    }
    if !browser_dir()
        .join("node_modules/playwright-core/package.json")
        .exists()
    {
        missing("playwright-core (tests/browser/node_modules)");
    }
    if Command::new("node").arg("--version").output().is_err() {
        missing("node");
    }
}

/// Where the scripts save screenshots: `docs/` when
/// `NODEKEEPER_SCREENSHOTS=docs` (to refresh the console guide's), else under target/.
fn screenshot_dir() -> PathBuf {
    let root = Path::new(REPO);
    let dir = match std::env::var("NODEKEEPER_SCREENSHOTS").as_deref() {
        Ok("docs") => root.join("docs"),
        _ => root.join("target/console-screenshots"),
    };
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A browser script running as a child process. Lines it prints starting
/// with `@@ ` are requests to the test (answered on its stdin); the rest is
/// its report.
struct Script {
    child: Child,
    lines: std::sync::mpsc::Receiver<String>,
    stdin: std::process::ChildStdin,
    output: Vec<String>,
}

impl Script {
    fn start(scenario: &str, env: &[(&str, String)]) -> Script {
        let mut command = Command::new("node");
        command
            .arg("console.test.mjs")
            .arg(scenario)
            .current_dir(browser_dir())
            .env("NK_BIN", BIN)
            .env("NK_SHOTS", screenshot_dir())
            .env("NODEKEEPER_CHROMIUM", chromium())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        let mut child = command.spawn().expect("node starts");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take().unwrap();
        let (sender, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        Script {
            child,
            lines,
            stdin,
            output: Vec::new(),
        }
    }

    /// The next request from the script, or `None` once it has exited.
    fn next_request(&mut self, started: Instant) -> Option<String> {
        loop {
            let left = SCRIPT_DEADLINE.saturating_sub(started.elapsed());
            assert!(
                !left.is_zero(),
                "the browser script ran past {SCRIPT_DEADLINE:?}:\n{}",
                self.output.join("\n")
            );
            match self.lines.recv_timeout(left.min(Duration::from_secs(1))) {
                Ok(line) => {
                    println!("{line}");
                    if let Some(request) = line.strip_prefix("@@ ") {
                        return Some(request.trim().to_string());
                    }
                    self.output.push(line);
                }
                Err(std::sync::mpsc::RecvTimeoutError::Timeout) => continue,
                Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => return None,
            }
        }
    }

    fn answer(&mut self, text: &str) {
        writeln!(self.stdin, "{text}").expect("the script reads its stdin");
        self.stdin.flush().unwrap();
    }

    /// Runs a script that asks for nothing, to its end.
    fn run_to_end(mut self, started: Instant) {
        if let Some(request) = self.next_request(started) {
            panic!("unexpected request {request}");
        }
        self.finish(started);
    }

    /// Waits for the script to exit and fails the test unless it passed.
    fn finish(mut self, started: Instant) {
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // Whatever it printed last.
                while let Ok(line) = self.lines.try_recv() {
                    println!("{line}");
                    self.output.push(line);
                }
                assert!(
                    status.success(),
                    "the browser script failed ({status}):\n{}",
                    self.output.join("\n")
                );
                return;
            }
            assert!(
                started.elapsed() < SCRIPT_DEADLINE,
                "the browser script did not exit"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Script {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A nodes file for `fleet` with zones and a `tier` label, so the overview
/// has groups and selectors something to select.
fn zone_labels(i: usize) -> Value {
    let zones = ["rack-a", "rack-b", "rack-c"];
    let mut labels = json!({"topology.kubernetes.io/zone": zones[i % 3]});
    if i.is_multiple_of(4) {
        labels["tier"] = json!("gold");
    } else if i % 4 == 1 {
        labels["tier"] = json!("silver");
    }
    labels["slot"] = json!(i.to_string());
    labels
}

fn port_of(url: &str) -> u16 {
    url.rsplit(':').next().unwrap().parse().unwrap()
}

/// `args` with `--listen` set to `addr`.
fn listening_on(args: &[String], addr: &str) -> Vec<String> {
    let mut args = args.to_vec();
    let i = args.iter().position(|a| a == "--listen").unwrap();
    args[i + 1] = addr.to_string();
    args
}

fn http() -> reqwest::Client {
    nodekeeper::install_crypto_provider();
    reqwest::Client::builder()
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_is_served_and_the_readiness_strip_counts_the_history() {
    let site = TestSite::builder(3, Ipv4Addr::new(127, 88, 10, 1))
        .labels(zone_labels)
        .start()
        .await;
    let fleet = &site.fleet;
    let c = site.controller(&[]);
    let (a, b) = (fleet.name(0), fleet.name(1));
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;
    c.wait_ready(&fleet.name(2), "True").await;
    let client = http();

    let root = client.get(format!("{}/", c.url)).send().await.unwrap();
    assert_eq!(root.status(), 307);
    assert_eq!(root.headers()["location"], "/ui/");
    for path in ["/ui/", "/ui/nodes/anything", "/ui/at/2026-11-30T09:00:00Z"] {
        let page = client.get(format!("{}{path}", c.url)).send().await.unwrap();
        assert_eq!(page.status(), 200, "{path}");
        assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
        assert!(page.headers()["content-security-policy"]
            .to_str()
            .unwrap()
            .contains("default-src 'self'"));
        let text = page.text().await.unwrap();
        assert!(text.contains("/ui/assets/app.js"), "{path}: {text}");
    }
    let script = client
        .get(format!("{}/ui/assets/overview.js", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(script.status(), 200);
    assert!(script.headers()["content-type"]
        .to_str()
        .unwrap()
        .starts_with("text/javascript"));
    let missing = client
        .get(format!("{}/ui/assets/nothing.js", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
    let (_, about) = c.get("/v1/console").await;
    assert_eq!(about["mode"], "controller");
    assert_eq!(about["readOnly"], false);

    // b goes down and comes back: the strip's buckets show it.
    fleet.handle.set(&b, KubeletState::Sick).unwrap();
    c.wait_ready(&b, "False").await;
    fleet.handle.set(&b, KubeletState::Up).unwrap();
    c.wait_ready(&b, "True").await;
    // The history first: anything written after it is in the strip too.
    let (_, history) = c.get("/v1/history").await;
    let history = history.as_array().unwrap().clone();
    let (status, strip) = c.get("/v1/readiness?buckets=200").await;
    assert_eq!(status, 200, "{strip}");
    let buckets = strip["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 200);
    let last = &buckets[199];
    assert_eq!(
        (&last["ready"], &last["notReady"], &last["unknown"]),
        (&json!(3), &json!(0), &json!(0)),
        "{strip}"
    );
    assert!(
        buckets
            .iter()
            .any(|b| b["notReady"] == 1 || b["minReady"] == 2),
        "the outage of {b} shows somewhere: {strip}"
    );
    assert!(
        strip["lastSeq"].as_u64().unwrap() >= history.last().unwrap()["seq"].as_u64().unwrap(),
        "every durable event is counted: {strip}"
    );
    assert_eq!(strip["from"], history[0]["time"]);

    // The instant `/v1/at` shows, resolved from an age by the server's clock.
    let asked = unix_now();
    let at = c.request("/v1/at?time=1m").send().await.unwrap();
    let answered = unix_now();
    assert_eq!(at.status(), 200);
    let resolved = at.headers()["nodekeeper-at"].to_str().unwrap().to_string();
    let seconds = resolved
        .parse::<jiff::Timestamp>()
        .unwrap_or_else(|e| panic!("Nodekeeper-At: {resolved:?} is RFC 3339: {e}"))
        .as_microsecond() as f64
        / 1e6;
    assert!(
        (asked - 60.0..=answered - 60.0).contains(&seconds),
        "1m before {asked}..{answered}: {resolved}"
    );
    let exact = c
        .request("/v1/at?time=2026-11-30T09:00:00.5%2B01:00")
        .send()
        .await
        .unwrap();
    assert_eq!(
        exact.headers()["nodekeeper-at"],
        "2026-11-30T08:00:00.5Z",
        "an RFC 3339 time is the instant it names, in UTC"
    );

    for (query, what) in [
        ("buckets=0", "buckets=0"),
        ("buckets=100000", "between 1 and 4000"),
        ("since=yesterday", "since"),
        ("since=1m&until=2m", "must be before"),
    ] {
        let (status, body) = c.get(&format!("/v1/readiness?{query}")).await;
        assert_eq!(status, 400, "{query}: {body}");
        assert!(
            body["message"].as_str().unwrap().contains(what),
            "{query}: {body}"
        );
    }
    drop(c);
    site.stop().await;
}

/// `nodekeeper ui` on a store a controller left behind.
struct UiServer {
    child: Child,
    url: String,
}

impl UiServer {
    fn start(db: &Path, extra: &[&str]) -> UiServer {
        let out = db.with_extension("ui.out");
        let err = db.with_extension("ui.err");
        let child = Command::new(BIN)
            .arg("--db")
            .arg(db)
            .args(["ui", "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(std::fs::File::create(&out).unwrap())
            .stderr(std::fs::File::create(&err).unwrap())
            .spawn()
            .unwrap();
        let mut server = UiServer {
            child,
            url: String::new(),
        };
        let started = Instant::now();
        loop {
            if let Some(status) = server.child.try_wait().unwrap() {
                panic!(
                    "ui exited early ({status}): {}",
                    std::fs::read_to_string(&err).unwrap_or_default()
                );
            }
            let banner = std::fs::read_to_string(&out).unwrap_or_default();
            if let Some(url) = banner
                .split_whitespace()
                .find(|w| w.starts_with("http://") && w.ends_with("/ui/"))
            {
                server.url = url.trim_end_matches("/ui/").to_string();
                return server;
            }
            assert!(started.elapsed() < DEADLINE, "ui did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for UiServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ui_serves_a_stopped_store_read_only_and_the_browser_shows_it() {
    let site = TestSite::builder(4, Ipv4Addr::new(127, 88, 11, 1))
        .labels(zone_labels)
        .start()
        .await;
    let (fleet, db) = (&site.fleet, site.db.clone());
    let c = site.controller(&[]);
    let down = fleet.name(2);
    for i in 0..4 {
        c.wait_ready(&fleet.name(i), "True").await;
    }
    fleet.handle.set(&down, KubeletState::Sick).unwrap();
    c.wait_ready(&down, "False").await;

    // While the controller runs, `ui` refuses and says where its console is.
    let (code, _, err) = cli(&db, &["ui", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("in use by a running controller") && err.contains(&format!("{}/ui/", c.url)),
        "{err}"
    );
    assert!(c.stop().success());
    let dir = site.stop_fleet().await;
    let (code, _, err) = cli(
        &dir.path().join("nowhere"),
        &["ui", "--listen", "127.0.0.1:0"],
    );
    assert_eq!(code, 1);
    assert!(err.contains("no store at"), "{err}");
    let (code, _, err) = cli(&db, &["ui", "--listen", "0.0.0.0:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("not a loopback address"), "{err}");

    // Read before `ui` holds the store (it takes the lock, as a controller does).
    let stopped = cli_ok(&db, &["nodes", "-o", "json"]);
    let ui = UiServer::start(&db, &[]);
    let client = http();
    let get = |path: &str| {
        let client = client.clone();
        let url = format!("{}{path}", ui.url);
        async move {
            let r = client.get(url).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap_or(Value::Null))
        }
    };
    let (status, list) = get("/api/v1/nodes").await;
    assert_eq!(status, 200);
    assert_eq!(list["items"], json(&stopped)["items"]);
    let (_, about) = get("/v1/console").await;
    assert_eq!(about["mode"], "stoppedStore");
    assert_eq!(about["readOnly"], true);
    let (status, mirror) = get("/v1/mirror").await;
    assert_eq!(status, 200, "the store's view of the mirror: {mirror}");
    assert_eq!(mirror["running"], false);
    let (status, strip) = get("/v1/readiness?buckets=10").await;
    assert_eq!(status, 200);
    assert_eq!(strip["buckets"][9]["notReady"], 1, "{strip}");
    let patch = client
        .patch(format!("{}/api/v1/nodes/{down}/status", ui.url))
        .header("content-type", "application/merge-patch+json")
        .body(r#"{"status":{"conditions":[{"type":"Ready","status":"True"}]}}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(patch.status(), 405);
    let body: Value = patch.json().await.unwrap();
    assert!(
        body["message"].as_str().unwrap().contains("read-only"),
        "{body}"
    );

    check_prerequisites();
    let _one = BROWSER.lock().await;
    let started = Instant::now();
    let script = Script::start(
        "stopped",
        &[
            ("NK_URL", ui.url.clone()),
            ("NK_DB", db.display().to_string()),
        ],
    );
    script.run_to_end(started);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_the_overview_follows_the_fleet_and_the_past_matches_the_cli() {
    check_prerequisites();
    let _one = BROWSER.lock().await;
    // Probe every second: enough for a live test, and a quieter history.
    let site = TestSite::builder(24, Ipv4Addr::new(127, 88, 12, 1))
        .labels(zone_labels)
        .flag("--node-sync-period", "1s")
        .flag("--site", "lyon-3")
        .grace("3s")
        .start()
        .await;
    let (fleet, db) = (&site.fleet, &site.db);
    let args = site.args();
    let c = Controller::start(db, &args);
    for i in 0..24 {
        c.wait_ready(&fleet.name(i), "True").await;
    }
    // Some history to look at: one node sick and back, one down for good.
    let flapped = fleet.name(5);
    fleet.handle.set(&flapped, KubeletState::Sick).unwrap();
    c.wait_ready(&flapped, "False").await;
    fleet.handle.set(&flapped, KubeletState::Up).unwrap();
    c.wait_ready(&flapped, "True").await;
    fleet
        .handle
        .set(&fleet.name(7), KubeletState::Down)
        .unwrap();
    c.wait_ready(&fleet.name(7), "Unknown").await;

    let port = port_of(&c.url);
    let started = Instant::now();
    let mut script = Script::start(
        "fleet",
        &[
            ("NK_URL", c.url.clone()),
            ("NK_DB", db.display().to_string()),
            ("NK_SIM", format!("http://{}", fleet.fleet.control_addr())),
            ("NK_FLAPPED", flapped.clone()),
            ("NK_SITE", "lyon-3".into()),
        ],
    );
    let mut running = Some(c);
    while let Some(request) = script.next_request(started) {
        match request.as_str() {
            "stop-controller" => {
                let stopped = running.take().expect("a controller runs");
                let log = stopped.log.clone();
                let status = stopped.stop();
                let log = std::fs::read_to_string(log).unwrap_or_default();
                assert!(
                    status.success(),
                    "the controller stopped with {status}: {log}"
                );
                script.answer("stopped");
            }
            "start-controller" => {
                let addr = format!("127.0.0.1:{port}");
                running = Some(Controller::start(db, &listening_on(&args, &addr)));
                script.answer("started");
            }
            other => panic!("unexpected request {other}"),
        }
    }
    script.finish(started);
    drop(running);
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_a_token_is_asked_for_and_kept_for_the_tab() {
    check_prerequisites();
    let _one = BROWSER.lock().await;
    let site = TestSite::builder(2, Ipv4Addr::new(127, 88, 13, 1))
        .labels(zone_labels)
        .start()
        .await;
    let fleet = &site.fleet;
    let c = site.run().tokens("operator-secret\n").start();
    c.wait_ready(&fleet.name(0), "True").await;
    let started = Instant::now();
    let script = Script::start(
        "token",
        &[
            ("NK_URL", c.url.clone()),
            ("NK_TOKEN", "operator-secret".into()),
        ],
    );
    script.run_to_end(started);
    drop(c);
    site.stop().await;
}

/// 10,000 nodes registered in a controller in push mode (nothing is
/// probed, and the statuses the test pushes are the only changes), and the
/// browser on the overview while some of them change.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_ten_thousand_nodes_stay_responsive() {
    check_prerequisites();
    let _one = BROWSER.lock().await;
    const NODES: usize = 10_000;
    const ZONES: usize = 8;
    let names: Vec<String> = (0..NODES).map(|i| format!("edge-{i:05}")).collect();
    let site = TestSite::named(&names, Ipv4Addr::new(127, 88, 32, 1))
        .labels(|i| json!({"topology.kubernetes.io/zone": format!("zone-{}", (i * 7) % ZONES)}))
        // The nodes file is re-read at the default period, not the tests' fast one.
        .flag("--node-sync-period", "10s")
        .flag("--node-monitor-period", "1s")
        .grace("1h")
        .flag("--node-startup-grace-period", "1h")
        .start();
    let c = site.controller(&[]);
    // Registration of 10,000 nodes takes a moment after the API is up.
    let registering = Instant::now();
    loop {
        // What the API lists: one item and the count of the rest.
        let (_, list) = c.get("/api/v1/nodes?limit=1").await;
        let rest = list["metadata"]["remainingItemCount"].as_u64().unwrap_or(0);
        if rest + 1 == NODES as u64 {
            break;
        }
        assert!(
            registering.elapsed() < Duration::from_secs(300),
            "the 10,000 nodes never registered: {}",
            list["metadata"]
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let started = Instant::now();
    let script = Script::start(
        "scale",
        &[
            ("NK_URL", c.url.clone()),
            ("NK_DB", site.db.display().to_string()),
            ("NK_NODES", NODES.to_string()),
        ],
    );
    script.run_to_end(started);
    drop(c);
}

/// 2,000 nodes registered in a controller in push mode, the browser's
/// script pushing their statuses: most Ready, a few broken. The problems
/// list, the hover cards, links with filters, the diff of time travel
/// against now and an age resolved to its time, at a size where tiles are
/// specks; then an outage of 120 more, past the 100 rows the list draws.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_browser_two_thousand_nodes_show_their_problems() {
    check_prerequisites();
    let _one = BROWSER.lock().await;
    const NODES: usize = 2_000;
    let names: Vec<String> = (0..NODES).map(|i| format!("site-{i:04}")).collect();
    let site = TestSite::named(&names, Ipv4Addr::new(127, 170, 0, 1))
        .labels(|i| {
            let mut labels = json!({"topology.kubernetes.io/zone": format!("zone-{}", i % 5)});
            if i.is_multiple_of(4) {
                labels["tier"] = json!("gold");
            }
            labels
        })
        // Nodes fall silent only when the test says so.
        .flag("--node-sync-period", "10s")
        .flag("--node-monitor-period", "1s")
        .grace("1h")
        .flag("--node-startup-grace-period", "1h")
        .start();
    let c = site.controller(&[]);
    let registering = Instant::now();
    loop {
        let (_, list) = c.get("/api/v1/nodes?limit=1").await;
        let rest = list["metadata"]["remainingItemCount"].as_u64().unwrap_or(0);
        if rest + 1 == NODES as u64 {
            break;
        }
        assert!(
            registering.elapsed() < Duration::from_secs(120),
            "the 2,000 nodes never registered: {}",
            list["metadata"]
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let started = Instant::now();
    let script = Script::start(
        "problems",
        &[("NK_URL", c.url.clone()), ("NK_NODES", NODES.to_string())],
    );
    script.run_to_end(started);
    drop(c);
}
