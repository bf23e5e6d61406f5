//! `nodekeeper run` under systemd's `Type=notify`, with the real binary and a
//! Unix datagram socket standing in for systemd: `READY=1` only once the
//! first probe sweep has decided, `WATCHDOG=1` while passes finish,
//! `STOPPING=1` on SIGTERM.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixDatagram;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{client, BIN, DEADLINE};

/// A kubelet that holds every `/healthz` until the test lets it answer.
struct HeldKubelet {
    port: u16,
    /// A request arrived.
    asked: mpsc::Receiver<()>,
    /// Lets every held and later request be answered `200 ok`.
    release: mpsc::Sender<()>,
}

impl HeldKubelet {
    fn start(ip: &str) -> HeldKubelet {
        let listener = TcpListener::bind((ip, 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        let (asked_tx, asked) = mpsc::channel();
        let (release, released) = mpsc::channel::<()>();
        std::thread::spawn(move || {
            let mut released = Some(released);
            for stream in listener.incoming() {
                let Ok(stream) = stream else { return };
                let asked = asked_tx.clone();
                // The first connection waits for the release; later ones answer at once.
                let gate = released.take();
                std::thread::spawn(move || serve(stream, asked, gate));
            }
        });
        HeldKubelet {
            port,
            asked,
            release,
        }
    }
}

fn serve(mut stream: TcpStream, asked: mpsc::Sender<()>, mut gate: Option<mpsc::Receiver<()>>) {
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let Ok(n) = stream.read(&mut buf) else { return };
        if n == 0 {
            return;
        }
        request.extend_from_slice(&buf[..n]);
        while let Some(end) = request.windows(4).position(|w| w == b"\r\n\r\n") {
            request.drain(..end + 4);
            let _ = asked.send(());
            if let Some(gate) = gate.take() {
                if gate.recv_timeout(DEADLINE).is_err() {
                    return;
                }
            }
            let answer =
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\nok";
            if stream.write_all(answer.as_bytes()).is_err() {
                return;
            }
        }
    }
}

/// The controller process, killed if the test ends before it exits.
struct Running(std::process::Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the stand-in for systemd has received so far.
struct Systemd {
    socket: UnixDatagram,
    heard: Vec<String>,
}

impl Systemd {
    fn bind(path: &std::path::Path) -> Systemd {
        let socket = UnixDatagram::bind(path).unwrap();
        socket.set_nonblocking(true).unwrap();
        Systemd {
            socket,
            heard: Vec::new(),
        }
    }

    /// Reads what has arrived; returns the new messages.
    fn take(&mut self) -> Vec<String> {
        let mut new = Vec::new();
        let mut buf = [0u8; 1024];
        while let Ok(n) = self.socket.recv(&mut buf) {
            new.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        self.heard.extend(new.iter().cloned());
        new
    }

    /// Waits until a message satisfying `want` arrives; returns it.
    async fn wait_for(&mut self, what: &str, want: impl Fn(&str) -> bool) -> String {
        let started = Instant::now();
        loop {
            if let Some(found) = self.take().into_iter().find(|m| want(m)) {
                return found;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "systemd never heard {what}; it heard {:?}",
                self.heard
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_after_the_first_sweep_watchdog_while_passes_finish_stopping_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let mut systemd = Systemd::bind(&dir.path().join("notify"));
    let kubelet = HeldKubelet::start("127.91.0.1");
    let db = dir.path().join("db");
    let log = dir.path().join("controller.log");
    let mut running = Running(
        Command::new(BIN)
            .arg("--db")
            .arg(&db)
            .args(["--log", "info", "run", "--nodes", "127.91.0.1"])
            .args(["--kubelet-scheme", "http", "--kubelet-port"])
            .arg(kubelet.port.to_string())
            .args(["--kubelet-timeout", "25s", "--node-sync-period", "500ms"])
            .args([
                "--node-monitor-period",
                "200ms",
                "--node-monitor-grace-period",
                "30s",
            ])
            .args(["--listen", "127.91.0.2:0"])
            .env("NOTIFY_SOCKET", dir.path().join("notify"))
            .env("WATCHDOG_USEC", "1000000")
            .env_remove("WATCHDOG_PID")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let child = &mut running.0;
    let log_text = || std::fs::read_to_string(&log).unwrap_or_default();

    // The first sweep is under way and held at the kubelet; the API serves.
    kubelet
        .asked
        .recv_timeout(DEADLINE)
        .unwrap_or_else(|_| panic!("the kubelet was never probed: {}", log_text()));
    let url = loop {
        assert!(
            child.try_wait().unwrap().is_none(),
            "exited: {}",
            log_text()
        );
        if let Ok(bytes) = std::fs::read(db.join("controller.json")) {
            let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            break v["url"].as_str().unwrap().to_string();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    // Monitor passes finish meanwhile, but nothing has decided the node.
    let readyz = client()
        .get(format!("{url}/readyz?verbose"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        readyz.contains("probe-sweep failed"),
        "the first sweep is held: {readyz}"
    );
    systemd
        .wait_for("the starting status", |m| m.starts_with("STATUS=starting"))
        .await;
    let early = systemd.take();
    assert!(
        systemd
            .heard
            .iter()
            .all(|m| !m.contains("READY=1") && m != "WATCHDOG=1"),
        "before the first sweep finished: {:?} {early:?}",
        systemd.heard
    );

    // The kubelet answers: the sweep decides, then systemd hears READY.
    kubelet.release.send(()).unwrap();
    let ready = systemd
        .wait_for("READY=1", |m| m.starts_with("READY=1"))
        .await;
    assert_eq!(ready, "READY=1\nSTATUS=1 node, 1 Ready");
    let node: serde_json::Value = client()
        .get(format!("{url}/api/v1/nodes/127.91.0.1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(common::ready_of(&node).as_deref(), Some("True"), "{node}");

    // Passes keep finishing: the watchdog is fed, every half WatchdogSec.
    for _ in 0..3 {
        systemd.wait_for("WATCHDOG=1", |m| m == "WATCHDOG=1").await;
    }

    // SIGTERM: systemd hears STOPPING, and the process exits cleanly.
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    systemd.wait_for("STOPPING=1", |m| m == "STOPPING=1").await;
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(started.elapsed() < DEADLINE, "did not exit: {}", log_text());
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(status.success(), "{status}: {}", log_text());
    let after = systemd.take();
    assert!(
        after
            .iter()
            .all(|m| m != "WATCHDOG=1" && !m.starts_with("READY")),
        "nothing but the end after STOPPING: {after:?}"
    );
}

/// In push mode nothing is probed: the first monitor pass decides, and
/// READY follows it (a controller waiting for a sweep would never be ready).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_push_mode_ready_follows_the_first_monitor_pass() {
    let dir = tempfile::tempdir().unwrap();
    let mut systemd = Systemd::bind(&dir.path().join("notify"));
    let log = dir.path().join("controller.log");
    let _running = Running(
        Command::new(BIN)
            .arg("--db")
            .arg(dir.path().join("db"))
            .args(["--log", "info", "run", "--nodes", "127.91.0.5"])
            .args(["--node-status-mode", "push", "--kubelet-scheme", "http"])
            .args(["--node-monitor-period", "200ms", "--listen", "127.91.0.6:0"])
            .env("NOTIFY_SOCKET", dir.path().join("notify"))
            .env_remove("WATCHDOG_USEC")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap(),
    );
    let ready = systemd
        .wait_for("READY=1", |m| m.starts_with("READY=1"))
        .await;
    // The node has not pushed yet: registered, not Ready.
    assert_eq!(ready, "READY=1\nSTATUS=1 node, 0 Ready");
    // No WatchdogSec, no pings.
    assert!(systemd.heard.iter().all(|m| m != "WATCHDOG=1"));
}
