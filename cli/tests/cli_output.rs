//! What the CLI prints: a reader that goes away (`| head -1`) ends every
//! command quietly.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

use common::*;

/// Runs `nodekeeper --db DB ARGS`, reads one line of its output and closes
/// the pipe, as `| head -1` does: its exit code and what it said on stderr.
fn first_line_only(db: &std::path::Path, args: &[&str]) -> (String, i32, String) {
    let mut child = Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader is dropped here: the pipe closes with most output unread.
    let out = child.wait_with_output().unwrap();
    (
        first,
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_ends_quietly_when_its_reader_goes_away() {
    // 1,000 nodes: each command below prints more than a pipe holds (64 KiB).
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let names: Vec<String> = (0..1000)
        .map(|i| format!("127.82.{}.{}", 4 + i / 250, i % 250 + 1))
        .collect();
    let c = Controller::start(
        &db,
        &[
            "--nodes",
            &names.join(","),
            "--node-status-mode",
            "push",
            "--kubelet-scheme",
            "http",
            "--node-startup-grace-period",
            "1s",
            "--node-monitor-period",
            "100ms",
            "--listen",
            "127.0.0.1:0",
        ]
        .map(String::from),
    );
    c.wait_for("/api/v1/nodes", "1,000 nodes registered", |l| {
        l["items"].as_array().is_some_and(|i| i.len() == 1000)
    })
    .await;
    let commands: [&[&str]; 5] = [
        &["history"],
        &["history", "-o", "json"],
        &["nodes", "-o", "json"],
        &["nodes", "-o", "wide"],
        &["db", "export"],
    ];
    let check = |args: &[&str], running: bool| {
        let (first, code, err) = first_line_only(&db, args);
        assert!(!first.is_empty(), "{args:?}: no output");
        assert_eq!(
            (code, err.as_str()),
            (0, ""),
            "{args:?} (running: {running})"
        );
    };
    // Through the running controller's API (`db export` its snapshot)...
    for args in commands {
        check(args, true);
    }
    assert!(c.stop().success());
    // ...and on the stopped store.
    for args in commands {
        check(args, false);
    }
}
