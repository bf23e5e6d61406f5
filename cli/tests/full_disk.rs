//! A full disk degrades the controller; it does not stop it. The real
//! binary with its store on a small tmpfs that the test fills up: changes
//! are refused with a 503 Status, heartbeats, reads and watches go on, a
//! probe sweep's decision waits, and everything resumes once space returns;
//! nodes that could not be registered meanwhile are registered then.
//! Mounting needs root: in CI (which runs as root) the tests fail when they
//! cannot mount; elsewhere they are ignored unless asked for (`--ignored`).
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::io::Write as _;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use common::*;
use serde_json::{json, Value};

/// A tmpfs mounted for the test, unmounted when dropped.
struct Tmpfs {
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl Tmpfs {
    /// Mounts a tmpfs of `size` (e.g. `40m`). A test that cannot mount
    /// fails, saying what it needs: it never passes without its full disk.
    fn mount(size: &str) -> Tmpfs {
        Tmpfs::try_mount(size).unwrap_or_else(|why| {
            panic!(
                "this test puts the store on a tmpfs of its own and fills it, and cannot mount one \
                 here ({why}): run the tests as root (scripts/test does in CI), with mount(8) and \
                 umount(8) installed (Debian: util-linux and mount)"
            )
        })
    }

    fn try_mount(size: &str) -> Result<Tmpfs, String> {
        let uid = Command::new("id")
            .arg("-u")
            .output()
            .map_err(|e| e.to_string())?;
        if String::from_utf8_lossy(&uid.stdout).trim() != "0" {
            return Err("not root".into());
        }
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .output()
            .map_err(|e| e.to_string())?;
        if !out.status.success() {
            return Err(format!(
                "mount failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs {
            path: dir.path().to_path_buf(),
            _dir: dir,
        })
    }

    /// Writes zeros into `name` until the file system is full.
    fn fill(&self, name: &str) -> PathBuf {
        let path = self.path.join(name);
        let mut file = std::fs::File::create(&path).unwrap();
        let chunk = vec![0u8; 1 << 20];
        // Ends at ENOSPC; the tmpfs is a few MiB.
        loop {
            if let Err(e) = file.write_all(&chunk).and_then(|()| file.sync_all()) {
                assert_eq!(
                    e.raw_os_error(),
                    Some(28),
                    "filling stopped for another reason: {e}"
                );
                break;
            }
        }
        // What is left of the last chunk, byte by byte in small writes.
        let small = vec![0u8; 4096];
        while file.write_all(&small).is_ok() {}
        path
    }

    /// Fills the file system, then gives `free` bytes back: room for sled
    /// to open a store, less than the controller keeps free for its writes.
    fn fill_leaving(&self, name: &str, free: u64) -> PathBuf {
        let path = self.fill(name);
        let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
        let len = file.metadata().unwrap().len();
        file.set_len(len.saturating_sub(free)).unwrap();
        file.sync_all().unwrap();
        path
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.path).status();
    }
}

async fn metric(c: &Controller, name: &str) -> Option<f64> {
    let text = c.text("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
}

async fn patch_ready(c: &Controller, node: &str, status: &str, beat: &str) -> (u16, Value) {
    let body = json!({"status": {"conditions": [{"type": "Ready", "status": status,
        "lastHeartbeatTime": beat, "reason": "KubeletReady", "message": "pushed by the test"}]}});
    c.status_patch(node, &body).send().await
}

fn nodes_file(dir: &Path) -> PathBuf {
    let path = dir.join("nodes.txt");
    std::fs::write(&path, "edge-push 127.85.2.1\n").unwrap();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ci),
    ignore = "mounts a tmpfs, which needs root: CI runs it; run it as root with --ignored"
)]
async fn a_full_disk_refuses_changes_and_keeps_serving() {
    let disk = Tmpfs::mount("40m");
    let scratch = tempfile::tempdir().unwrap();
    let db = disk.path.join("db");
    let nodes = nodes_file(scratch.path());
    let args: Vec<String> = [
        "--simulate",
        "2",
        "--simulate-base-ip",
        "127.85.0.1",
        "--nodes-file",
        &nodes.to_string_lossy(),
        "--node-sync-period",
        "200ms",
        "--node-monitor-period",
        "100ms",
        "--node-monitor-grace-period",
        "30s",
        "--kubelet-timeout",
        "500ms",
        "--listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let c = Controller::start(&db, &args);
    // The log lives on the tmpfs: shown, if the test fails, before it is unmounted.
    let _log = ShowLogOnPanic(c.log.clone());
    let (probed, sick) = ("sim-00000", "sim-00001");
    c.wait_ready(probed, "True").await;
    c.wait_ready(sick, "True").await;
    let (code, body) = patch_ready(&c, "edge-push", "True", "2026-11-30T09:00:00Z").await;
    assert_eq!(code, 200, "{body}");
    c.wait_ready("edge-push", "True").await;

    // A watch opened before the disk fills keeps going through it.
    let (_, list) = c.get("/api/v1/nodes").await;
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    // Its own client: a watch outlives the usual whole-request timeout.
    let watcher = reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    let watch = watcher
        .get(format!(
            "{}/api/v1/nodes?watch=true&resourceVersion={version}",
            c.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(watch.status().as_u16(), 200);
    let (seen_tx, mut seen) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let watching = tokio::spawn(async move {
        let mut watch = watch;
        let mut buffer = Vec::new();
        while let Ok(Some(chunk)) = watch.chunk().await {
            buffer.extend_from_slice(&chunk);
            while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = buffer.drain(..=end).collect();
                if let Ok(event) = serde_json::from_slice::<Value>(&line) {
                    let _ = seen_tx.send(event);
                }
            }
        }
    });

    let filler = disk.fill("filler");
    c.wait_for("/metrics", "the store refuses writes", |m| {
        m.as_str()
            .is_some_and(|t| t.contains("nodekeeper_store_writable 0"))
    })
    .await;

    // A change is refused with a Status that says why, and is not made.
    let (code, status) = patch_ready(&c, "edge-push", "False", "2026-11-30T09:00:10Z").await;
    assert_eq!(code, 503, "{status}");
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "ServiceUnavailable");
    let message = status["message"].as_str().unwrap();
    assert!(
        message.contains("free") && message.contains("not made"),
        "{message}"
    );
    assert_eq!(c.ready("edge-push").await.as_deref(), Some("True"));
    // However many: each is refused, none makes the controller give up.
    let long = "x".repeat(1000);
    for i in 0..20 {
        let status = if i % 2 == 0 { "False" } else { "Unknown" };
        let body = json!({"status": {"conditions": [{"type": "Ready", "status": status,
            "lastHeartbeatTime": format!("2026-11-30T09:00:{:02}Z", 11 + i),
            "reason": "KubeletNotReady", "message": long}]}});
        let (code, answer) = c.status_patch("edge-push", &body).send().await;
        assert_eq!(code, 503, "{answer}");
    }
    // A heartbeat needs no write: it is taken.
    let (code, body) = patch_ready(&c, "edge-push", "True", "2026-11-30T09:00:20Z").await;
    assert_eq!(code, 200, "{body}");

    // A probe sweep's decision waits: sweeps go on, the node reads as before.
    let control = Discovery::of(&db).sim_control;
    client()
        .put(format!("{control}/nodes/{sick}"))
        .json(&json!({"state": "sick"}))
        .send()
        .await
        .unwrap()
        .error_for_status()
        .unwrap();
    let sweeps = metric(&c, "nodekeeper_sweep_duration_seconds_count")
        .await
        .unwrap();
    c.wait_for("/metrics", "five more sweeps", |m| {
        m.as_str()
            .and_then(|t| {
                t.lines()
                    .find_map(|l| l.strip_prefix("nodekeeper_sweep_duration_seconds_count "))
            })
            .and_then(|v| v.trim().parse::<f64>().ok())
            .is_some_and(|n| n >= sweeps + 5.0)
    })
    .await;
    assert_eq!(c.ready(sick).await.as_deref(), Some("True"));

    // Reads go on: the API, health, metrics, the CLI.
    let (code, list) = c.get("/api/v1/nodes").await;
    assert_eq!(code, 200);
    assert_eq!(list["items"].as_array().unwrap().len(), 3);
    assert_eq!(c.text("/healthz").await, "ok");
    assert_eq!(c.text("/livez").await, "ok");
    // It cannot record a decision: not ready, and /readyz says why.
    let (code, verbose) = c.get("/readyz?verbose").await;
    assert_eq!(code, 500, "{verbose}");
    let verbose = verbose.as_str().unwrap().to_string();
    assert!(
        verbose
            .lines()
            .any(|l| l.starts_with("[-]store failed") && l.contains("free")),
        "{verbose}"
    );
    let out = Command::new(BIN)
        .args(["--db", &db.to_string_lossy(), "nodes"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("edge-push"));

    // Space returns: writes are taken again, by themselves.
    std::fs::remove_file(&filler).unwrap();
    c.wait_for("/metrics", "the store takes writes again", |m| {
        m.as_str()
            .is_some_and(|t| t.contains("nodekeeper_store_writable 1"))
    })
    .await;
    c.wait_ready(sick, "False").await;
    let (code, verbose) = c.get("/readyz?verbose").await;
    assert!(
        verbose.as_str().unwrap().contains("[+]store ok"),
        "{code} {verbose}"
    );
    let (code, body) = patch_ready(&c, "edge-push", "False", "2026-11-30T09:00:30Z").await;
    assert_eq!(code, 200, "{body}");
    c.wait_ready("edge-push", "False").await;

    // The watch saw both changes, after going quiet through the full disk.
    let mut modified = std::collections::BTreeSet::new();
    let started = std::time::Instant::now();
    while modified.len() < 2 {
        assert!(
            started.elapsed() < DEADLINE,
            "the watch saw only {modified:?}"
        );
        if let Ok(Some(event)) = tokio::time::timeout(Duration::from_secs(1), seen.recv()).await {
            let name = event["object"]["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let ready = ready_of(&event["object"]);
            if event["type"] == "MODIFIED" && ready.as_deref() == Some("False") {
                modified.insert(name);
            }
        }
    }
    assert_eq!(
        modified,
        [sick.to_string(), "edge-push".to_string()]
            .into_iter()
            .collect()
    );
    watching.abort();

    // The refused change never happened: one True -> False in the history.
    let (_, history) = c.get("/v1/history?node=edge-push&condition=Ready").await;
    let changes: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["to"].as_str())
        .collect();
    assert_eq!(changes, ["True", "False"], "{history}");
    let status = c.stop();
    assert!(status.success(), "{status}");
}

/// Prints the controller's log if the test panics.
struct ShowLogOnPanic(PathBuf);

impl Drop for ShowLogOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "controller log:\n{}",
                std::fs::read_to_string(&self.0).unwrap_or_default()
            );
        }
    }
}

/// What the test needs of the controller's discovery file.
struct Discovery {
    sim_control: String,
}

impl Discovery {
    fn of(db: &Path) -> Discovery {
        let v: Value =
            serde_json::from_slice(&std::fs::read(db.join("controller.json")).unwrap()).unwrap();
        Discovery {
            sim_control: v["simControl"].as_str().unwrap().to_string(),
        }
    }
}

/// The nodes file of a push-mode site listing `names` from 127.160.0.1 on.
fn write_named(path: &Path, names: &[&str]) {
    let entries: Vec<Value> = names
        .iter()
        .enumerate()
        .map(|(i, name)| json!({"name": name, "address": format!("127.160.0.{}", i + 1)}))
        .collect();
    std::fs::write(path, serde_json::to_vec(&entries).unwrap()).unwrap();
}

/// The names `/api/v1/nodes` lists.
async fn listed(c: &Controller) -> Vec<String> {
    let (_, list) = c.get("/api/v1/nodes").await;
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter_map(|n| n["metadata"]["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// A disk full at start, and while a node is added to the nodes file:
/// registration keeps trying past `--register-retry-count` (whose
/// `ErrRegistration` is logged and recorded, as the ancestor's), `/readyz`
/// names the nodes not registered and why, a gauge counts them, and they are
/// all registered once there is room again, with no restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(ci),
    ignore = "mounts a tmpfs, which needs root: CI runs it; run it as root with --ignored"
)]
async fn nodes_not_registered_on_a_full_disk_are_registered_once_there_is_room() {
    let disk = Tmpfs::mount("40m");
    let site = TestSite::named(
        &["edge-a", "edge-b", "edge-c"],
        Ipv4Addr::new(127, 160, 0, 1),
    )
    .flag("--register-retry-count", "2")
    .start();
    write_named(&site.nodes_file, &["edge-a", "edge-b", "edge-c"]);
    // Room for sled to open the store, not for the controller to write.
    let filler = disk.fill_leaving("filler", 6 << 20);
    let db = disk.path.join("db");
    let c = Controller::start(&db, &site.args());
    let _log = ShowLogOnPanic(c.log.clone());

    let not_registered = |v: &Value| {
        v.as_str().is_some_and(|t| {
            t.lines().any(|l| {
                l.starts_with("[-]registration failed")
                    && ["edge-a", "edge-b", "edge-c"].iter().all(|n| l.contains(n))
                    && l.contains("free")
            })
        })
    };
    let verbose = c
        .wait_for(
            "/readyz?verbose",
            "readyz names the nodes not registered",
            not_registered,
        )
        .await;
    assert!(
        verbose.as_str().unwrap().contains("readyz check failed"),
        "{verbose}"
    );
    assert_eq!(c.metric("nodekeeper_unregistered_nodes").await, Some(3.0));
    assert!(listed(&c).await.is_empty());

    // A node added to the nodes file while the disk is full waits with them.
    write_named(&site.nodes_file, &["edge-a", "edge-b", "edge-c", "edge-d"]);
    c.wait_for("/metrics", "four nodes not registered", |m| {
        m.as_str()
            .is_some_and(|t| t.lines().any(|l| l == "nodekeeper_unregistered_nodes 4"))
    })
    .await;
    // Past --register-retry-count: the ancestor's ErrRegistration is logged, and it goes on.
    eventually("ErrRegistration is logged", || async {
        c.log_text().contains("unable to register all nodes")
    })
    .await;

    std::fs::remove_file(&filler).unwrap();
    c.wait_for("/api/v1/nodes", "every listed node registered", |list| {
        list["items"]
            .as_array()
            .is_some_and(|items| items.len() == 4)
    })
    .await;
    let mut names = listed(&c).await;
    names.sort();
    assert_eq!(names, ["edge-a", "edge-b", "edge-c", "edge-d"]);
    c.wait_for("/readyz?verbose", "registration passes", |v| {
        v.as_str().is_some_and(|t| t.contains("[+]registration ok"))
    })
    .await;
    assert_eq!(c.metric("nodekeeper_unregistered_nodes").await, Some(0.0));
    // The history says what happened: the failure after two tries, then the registration.
    let history = c.wait_event("edge-a", "RegistrationFailed").await;
    assert!(
        history["message"]
            .as_str()
            .is_some_and(|m| m.contains("after 2 tries")),
        "{history}"
    );
    c.wait_event("edge-a", "Registered").await;
    let status = c.stop();
    assert!(status.success(), "{status}");
}
