//! The retention run: events written into a store at a steady rate (the
//! controller's way: a batch, then a flush) while retention holds the
//! history to `--history-max-bytes`; the store's size on disk is sampled as
//! it goes, with what the process wrote to disk, and compacted at the end.
//!
//! Some functions here run past ~80 lines: each is one phase of the run,
//! read top to bottom as it happens (start, wait, measure, report), its
//! steps sharing the processes and the figures they take; split, each part
//! would need all of them passed in.

use std::fmt::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Result;
use nodekeeper::model::{ConditionStatus, EventKind, Micros};
use nodekeeper::store::retention::{self, RetentionConfig};
use nodekeeper::store::{records, Batch, Store, StoreOptions};
use tokio_util::sync::CancellationToken;

const NODES: usize = 1_000;
const SAMPLES: u32 = 12;

/// Bytes this process has caused to be written to storage (`/proc/self/io`).
fn written_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / 1048576.0)
}

pub async fn run(dir: &Path, length: Duration, rate: u64, max_bytes: u64) -> Result<String> {
    let _ = std::fs::remove_dir_all(dir);
    let store = Arc::new(Store::open(dir, &StoreOptions::default())?);
    let mut registered = Batch::new(Micros::now());
    for i in 0..NODES {
        let mut n: nodekeeper::model::Node = serde_json::from_value(serde_json::json!({
            "name": format!("churn-{i:04}"), "uid": format!("u{i}"), "creationTimestamp": Micros::now(),
            "resourceVersion": 0, "source": "static", "labels": {}, "externalID": format!("churn-{i:04}"),
            "providerID": "", "capacity": {"cpuMillis": 1000, "memoryBytes": 1024},
            "unschedulable": false, "taints": [], "addresses": [], "conditions": []
        }))?;
        n.resource_version = 0;
        registered.record(n.clone(), [EventKind::Registered { node: Box::new(n) }]);
    }
    store.write(registered)?;
    store.flush().await?;
    let shutdown = CancellationToken::new();
    let config = RetentionConfig {
        max_age: None,
        max_bytes: Some(max_bytes),
    };
    let task = tokio::spawn(retention::run(store.clone(), config, shutdown.clone()));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### Retention holding a store to {} while {rate} events/s go in ({NODES} nodes)\n",
        mib(max_bytes)
    );
    let _ = writeln!(
        out,
        "| elapsed | events written | written (records) | horizon | history (retention's count) | size on disk | disk writes by the process | batch write + flush: median / p99 / max |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    let per_tick = (rate / 10).max(1);
    let started = Instant::now();
    let io_start = written_bytes();
    let mut events = 0u64;
    let mut logical = 0u64;
    let mut up = vec![false; NODES];
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let sample_every = length / SAMPLES;
    let mut next_sample = sample_every;
    let mut latencies: Vec<Duration> = Vec::new();
    while started.elapsed() < length {
        tick.tick().await;
        let mut batch = Batch::new(Micros::now());
        for _ in 0..per_tick {
            let i = (events as usize * 7919) % NODES;
            up[i] = !up[i];
            let kind = EventKind::ConditionChanged {
                condition: "Ready".into(),
                from: None,
                to: if up[i] {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                },
                reason: "KubeletReady".into(),
                message: "kubelet /healthz returned 500: [-]syncloop failed: PLEG is not healthy"
                    .into(),
            };
            let name = format!("churn-{i:04}");
            logical += 8 + 16 + (name.len() + 9) as u64;
            logical += records::encode_event(&nodekeeper::model::Event {
                seq: 0,
                time: Micros::now(),
                node: Some(name.clone()),
                kind: kind.clone(),
            })
            .len() as u64;
            batch.node_event(&name, kind);
            events += 1;
        }
        let writing = Instant::now();
        store.write(batch)?;
        store.flush().await?;
        latencies.push(writing.elapsed());
        if started.elapsed() >= next_sample {
            latencies.sort();
            let at = |q: f64| {
                latencies
                    .get(
                        ((latencies.len() as f64 * q) as usize)
                            .min(latencies.len().saturating_sub(1)),
                    )
                    .map_or(0.0, |d| d.as_secs_f64() * 1000.0)
            };
            let spread = format!("{:.1} / {:.1} / {:.1} ms", at(0.5), at(0.99), at(1.0));
            latencies.clear();
            next_sample += sample_every;
            let history = store
                .status()
                .ok()
                .and_then(|s| s.retention.map(|r| r.history_bytes))
                .unwrap_or(0);
            let _ = writeln!(
                out,
                "| {:.0} s | {events} | {} | {} | {} | {} | {} | {spread} |",
                started.elapsed().as_secs_f64(),
                mib(logical),
                store.horizon(),
                mib(history),
                mib(store.size_on_disk()),
                mib(written_bytes() - io_start),
            );
            eprintln!(
                "   {:.0} s: {} on disk",
                started.elapsed().as_secs_f64(),
                mib(store.size_on_disk())
            );
        }
    }
    shutdown.cancel();
    let _ = task.await;
    let before = store.size_on_disk();
    let written = written_bytes() - io_start;
    drop(store);
    // sled lets go of its lock a moment after the close.
    let compacted = loop {
        match nodekeeper::store::compact::compact(dir, &StoreOptions::default(), &mut |_| {}) {
            Err(nodekeeper::store::StoreError::Locked { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await
            }
            other => break other?,
        }
    };
    let _ = writeln!(
        out,
        "\nWritten: {events} events, {} as records (keys and values); the process wrote {} to disk: {:.1}× the records \
         (sled's log-structured writes, the indexes, checkpoints, and retention's deletes). \
         `db compact` then: {} -> {} on disk.",
        mib(logical),
        mib(written),
        written as f64 / logical.max(1) as f64,
        mib(before),
        mib(compacted.after)
    );
    let _ = std::fs::remove_dir_all(dir);
    Ok(out)
}
