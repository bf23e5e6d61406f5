//! Online backups: `db backup` (and `db export`) of a running controller's
//! store, taken while its nodes flap and it writes on, some of them killed
//! (SIGKILL) at random points. A killed backup leaves no file; every one
//! that finished imports to a store `db verify` accepts, holding exactly the
//! controller's events up to the backup's seq.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::Value;

/// The backup's header and its events, by line.
fn read_backup(path: &Path) -> (Value, Vec<Value>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines = text.lines();
    let header: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let events = lines
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter_map(|v| v.get("event").cloned())
        .collect();
    (header, events)
}

/// Every event of the controller's history up to `seq`, oldest first.
async fn history_through(c: &Controller, seq: u64) -> Vec<Value> {
    let mut out = Vec::new();
    let mut after = 0;
    loop {
        let (code, page) = c.get(&format!("/v1/history?after={after}&limit=500")).await;
        assert_eq!(code, 200, "{page}");
        let page = page.as_array().unwrap().clone();
        if page.is_empty() {
            return out;
        }
        for e in page {
            let s = e["seq"].as_u64().unwrap();
            after = s;
            if s > seq {
                return out;
            }
            out.push(e);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backups_under_churn_restore_verified_and_killed_ones_leave_no_file() {
    let site = TestSite::builder(12, Ipv4Addr::new(127, 93, 1, 1))
        .flag("--node-sync-period", "1s")
        .grace("3s")
        .start()
        .await;
    let c = site.controller(&[]);
    for i in 0..12 {
        c.wait_ready(&site.name(i), "True").await;
    }

    // Churn: nodes go sick and come back all along.
    let stop = Arc::new(AtomicBool::new(false));
    let churn = {
        let stop = stop.clone();
        let handle = site.fleet.handle.clone();
        let names: Vec<String> = (0..12).map(|i| site.name(i)).collect();
        tokio::spawn(async move {
            let mut round = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let name = &names[round % names.len()];
                let state = if round.is_multiple_of(2) {
                    KubeletState::Sick
                } else {
                    KubeletState::Up
                };
                handle.set(name, state).unwrap();
                round += 1;
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        })
    };

    let dir = site.path().to_path_buf();
    let db = site.db.clone();
    let mut finished: Vec<PathBuf> = Vec::new();
    for round in 0..4 {
        let out = dir.join(format!("backup-{round}.jsonl"));
        let said = cli_ok(&db, &["db", "backup", "--output", out.to_str().unwrap()]);
        assert!(said.contains("backed up the store as of seq "), "{said}");
        finished.push(out);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    // Backups killed (SIGKILL) at random points, until two were cut before
    // they finished; one that finished first counts as a finished backup.
    let mut killed = 0;
    for attempt in 0..30 {
        if killed >= 2 {
            break;
        }
        let out = dir.join(format!("killed-{attempt}.jsonl"));
        let mut child = Command::new(BIN)
            .arg("--db")
            .arg(&db)
            .args(["db", "backup", "--output"])
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        tokio::time::sleep(Duration::from_millis(fastrand::u64(0..=attempt * 5))).await;
        let _ = child.kill();
        let status = child.wait().unwrap();
        if status.success() {
            finished.push(out);
        } else {
            killed += 1;
            assert!(
                !out.exists(),
                "a backup killed part-way leaves no {}",
                out.display()
            );
        }
    }
    assert!(killed >= 2, "two backups were killed part-way");
    // `db export` of the running store is the same snapshot, not a refusal.
    let exported = dir.join("export.jsonl");
    let (code, _, err) = cli(
        &db,
        &["db", "export", "--output", exported.to_str().unwrap()],
    );
    assert_eq!(code, 0, "{err}");
    finished.push(exported);
    stop.store(true, Ordering::Relaxed);
    churn.await.unwrap();

    let mut seqs = Vec::new();
    for (i, backup) in finished.iter().enumerate() {
        let (header, events) = read_backup(backup);
        let seq = header["lastSeq"].as_u64().unwrap();
        seqs.push(seq);
        let restored = dir.join(format!("restored-{i}"));
        let said = cli_ok(
            &restored,
            &["db", "import", "--input", backup.to_str().unwrap()],
        );
        assert!(said.contains(&format!("last seq {seq}")), "{said}");
        let verified = cli_ok(&restored, &["db", "verify"]);
        assert!(verified.contains("ok:"), "{verified}");
        // Exactly the controller's events up to the backup's seq.
        let want = history_through(&c, seq).await;
        let first = events.first().map_or(0, |e| e["seq"].as_u64().unwrap());
        let want: Vec<&Value> = want
            .iter()
            .filter(|e| e["seq"].as_u64().unwrap() >= first)
            .collect();
        assert_eq!(
            events.len(),
            want.len(),
            "{}: events up to seq {seq}",
            backup.display()
        );
        for (got, want) in events.iter().zip(want) {
            assert_eq!(got, want);
        }
        assert_eq!(events.last().map(|e| e["seq"].as_u64().unwrap()), Some(seq));
    }
    // The churn went on between backups: they are of different seqs.
    seqs.sort_unstable();
    seqs.dedup();
    assert!(seqs.len() >= 3, "{seqs:?}");
    drop(c);
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scheduled_backups_keep_the_newest_and_readyz_says_when_they_stop() {
    let site = TestSite::named(&["edge-1", "edge-2"], Ipv4Addr::new(127, 93, 2, 1)).start();
    let dir = site.path().join("backups");
    let c = site.controller(&[
        "--site".into(),
        "lyon-3".into(),
        "--backup-dir".into(),
        dir.display().to_string(),
        "--backup-interval".into(),
        "1s".into(),
        "--backup-keep".into(),
        "2".into(),
    ]);
    let seen = &c;
    eventually("three backups were taken", || async move {
        seen.metric("nodekeeper_backups_total{result=\"Succeeded\"}")
            .await
            .is_some_and(|n| n >= 3.0)
    })
    .await;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with(".partial"))
        .collect();
    files.sort();
    assert!(files.len() <= 2, "--backup-keep 2: {files:?}");
    let newest = files.last().unwrap();
    let name = newest.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("nodekeeper-lyon-3-") && name.ends_with(".jsonl"),
        "{name}"
    );
    let restored = site.path().join("restored");
    cli_ok(
        &restored,
        &["db", "import", "--input", newest.to_str().unwrap()],
    );
    assert!(cli_ok(&restored, &["db", "verify"]).contains("ok:"));
    assert!(c.metric("nodekeeper_backup_last_seq").await.unwrap() > 0.0);
    assert!(
        c.metric("nodekeeper_backup_last_success_timestamp_seconds")
            .await
            .unwrap()
            > 0.0
    );
    let (code, _) = c.get("/readyz/backup").await;
    assert_eq!(code, 200);

    // The directory gone (a file in its place): backups fail, and after
    // twice the interval /readyz says so.
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::write(&dir, "not a directory").unwrap();
    eventually("/readyz/backup fails", || async move {
        let response = client()
            .get(format!("{}/readyz/backup", seen.url))
            .send()
            .await
            .unwrap();
        let failing = response.status() == 500;
        failing
            && response
                .text()
                .await
                .unwrap()
                .contains("no backup has succeeded for")
    })
    .await;
    assert!(
        c.metric("nodekeeper_backups_total{result=\"Failed\"}")
            .await
            .unwrap()
            >= 1.0
    );
    drop(c);
}
