//! A probed fleet with nothing changing costs the disk nothing: once every
//! node is Ready and its taints are gone, sweeps, monitor passes and the
//! liveness stamp leave the store's files as they are, and the controller
//! writes no bytes at all. The real binary against a simulated fleet.
//! Registration and the first sweep of a fleet larger than one write chunk
//! land whole on the way.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use common::{eventually, Controller, TestSite};
use serde_json::Value;

/// More than two of the controller's write chunks (256 records), so that
/// registration, the first sweep and the taint passes each span several
/// store transactions, and all of them must land for the fleet to settle.
const NODES: usize = 600;

/// Every file under `dir`, with its size and modification time.
fn files(dir: &Path) -> BTreeMap<PathBuf, (u64, SystemTime)> {
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let meta = entry.metadata().unwrap();
        if meta.is_dir() {
            found.extend(files(&entry.path()));
        } else {
            found.insert(entry.path(), (meta.len(), meta.modified().unwrap()));
        }
    }
    found
}

/// Bytes the process caused to be written to storage (`/proc/PID/io`).
fn write_bytes(pid: u32) -> u64 {
    let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .expect("write_bytes in /proc/PID/io")
}

/// A gauge from `/metrics`.
async fn gauge(c: &Controller, name: &str) -> f64 {
    let text = c.text("/metrics").await;
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no {name} in /metrics"))
}

fn settled(list: &Value) -> bool {
    let items = list["items"].as_array().unwrap();
    items.len() == NODES
        && items.iter().all(|n| {
            common::ready_of(n).as_deref() == Some("True")
                && n["spec"]["taints"].as_array().is_none_or(|t| t.is_empty())
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_probed_fleet_with_nothing_changing_writes_nothing() {
    let site = TestSite::builder(NODES, Ipv4Addr::new(127, 55, 0, 1))
        .flag("--node-status-mode", "probe")
        .start()
        .await;
    let db = &site.db;
    let c = site.controller(&[]);
    c.wait_for("/api/v1/nodes", "every node Ready, without taints", settled)
        .await;
    // The last transition's pass is over once a later sweep and monitor pass finished.
    let now = || {
        SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let settled_at = now();
    eventually(
        "a sweep and a monitor pass after the fleet settled",
        || async {
            gauge(&c, "nodekeeper_last_sweep_timestamp_seconds").await > settled_at
                && gauge(&c, "nodekeeper_last_monitor_pass_timestamp_seconds").await > settled_at
        },
    )
    .await;

    let before = files(db);
    let written = write_bytes(c.child.id());
    let quiet_from = now();
    // Many sweeps (200ms) and monitor passes (100ms), and liveness stamp
    // periods (2s): each would have written by now if it wrote at all.
    let quiet = 3.0 * nodekeeper::liveness::PERIOD.as_secs_f64();
    eventually(
        "several sweeps, monitor passes and stamp periods",
        || async {
            gauge(&c, "nodekeeper_last_sweep_timestamp_seconds").await > quiet_from + quiet
                && gauge(&c, "nodekeeper_last_monitor_pass_timestamp_seconds").await
                    > quiet_from + quiet
        },
    )
    .await;
    let (_, list) = c.get("/api/v1/nodes").await;
    assert!(settled(&list), "the fleet changed meanwhile: {list}");

    assert_eq!(files(db), before, "the store's files changed");
    assert_eq!(
        write_bytes(c.child.id()),
        written,
        "the controller wrote to disk with nothing changing"
    );
    assert!(c.stop().success());
    site.stop().await;
}
