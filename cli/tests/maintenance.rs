//! Maintenance loses nothing: export, import and compact carry every tree;
//! an export of the previous release still imports; a kill at any moment
//! of an import or a compaction leaves the old store, or one every command
//! refuses, saying what happened and what to run — all with the real binary.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use nodekeeper::model::{ConditionStatus, Event, EventKind, Micros, Node};

fn fixture(name: &str) -> PathBuf {
    Path::new(REPO).join("fixtures").join(name)
}

fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap().to_os_string();
    name.push(format!(".{suffix}"));
    path.with_file_name(name)
}

/// Every line of an export but its header (which has the export's time).
fn records(export: &Path) -> Vec<String> {
    std::fs::read_to_string(export)
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

fn export(db: &Path, name: &str) -> PathBuf {
    let file = db.with_file_name(name);
    cli_ok(db, &["db", "export", "--output", file.to_str().unwrap()]);
    file
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn export_import_and_compact_carry_every_tree() {
    let site = TestSite::builder(3, Ipv4Addr::new(127, 84, 2, 1))
        .push_mode()
        .start()
        .await;
    let (fleet, db) = (&site.fleet, site.db.clone());
    // An API server that never answers: the mirror's work waits in the outbox.
    let c = site.controller_with(&["--master", "http://127.84.2.250:9"]);
    fleet.push_to(&c, |_| {});
    for i in 0..3 {
        c.wait_ready(&fleet.name(i), "True").await;
    }
    c.wait_for(
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
        "every node's Lease",
        |l| l["items"].as_array().is_some_and(|i| i.len() == 3),
    )
    .await;
    c.wait_for("/v1/mirror", "mirror work waiting", |m| {
        m["backlog"].as_u64() >= Some(3)
    })
    .await;
    assert!(c.stop().success());
    let dir = site.stop_fleet().await;
    let mirror = json(&cli_ok(&db, &["mirror", "status", "-o", "json"]));
    let status = cli_ok(&db, &["db", "status"]);
    let instance = status
        .lines()
        .find_map(|l| l.strip_prefix("Controller:"))
        .unwrap()
        .trim()
        .to_string();
    assert!(status.contains("stopped cleanly"), "{status}");

    let before = export(&db, "before.jsonl");
    let lines = records(&before);
    for kind in [
        "{\"meta\":",
        "{\"node\":",
        "{\"lease\":",
        "{\"outbox\":",
        "{\"event\":",
        "{\"end\":",
    ] {
        assert!(
            lines.iter().any(|l| l.starts_with(kind)),
            "no {kind} line in {lines:#?}"
        );
    }
    assert!(lines[0].contains(&instance), "{}", lines[0]);

    // Compaction keeps every record: the outbox, the Leases, the controller
    // identity and its clean stop included.
    let out = cli_ok(&db, &["db", "compact"]);
    assert!(out.contains("compacted 3 nodes"), "{out}");
    assert!(!sibling(&db, "compacting").exists() && !sibling(&db, "before-compact").exists());
    assert_eq!(records(&export(&db, "after.jsonl")), lines);
    let status = cli_ok(&db, &["db", "status"]);
    assert!(
        status.contains(&instance) && status.contains("stopped cleanly"),
        "{status}"
    );
    let backlog = json(&cli_ok(&db, &["mirror", "status", "-o", "json"]));
    assert_eq!(backlog["backlog"], mirror["backlog"], "{backlog}");

    // So does an import into a new store.
    let copy = dir.path().join("copy");
    cli_ok(
        &copy,
        &["db", "import", "--input", before.to_str().unwrap()],
    );
    assert_eq!(records(&export(&copy, "copy.jsonl")), lines);
    assert!(cli_ok(&copy, &["db", "verify"]).contains("ok:"));
}

#[test]
fn an_export_of_the_previous_release_still_imports() {
    // Written by `db export` of the release before schema 4 (format 1).
    let file = fixture("export-format1.jsonl");
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let out = cli_ok(&db, &["db", "import", "--input", file.to_str().unwrap()]);
    let text = std::fs::read_to_string(&file).unwrap();
    let events = text
        .lines()
        .filter(|l| l.starts_with("{\"event\":"))
        .count();
    let nodes = text.lines().filter(|l| l.starts_with("{\"node\":")).count();
    assert!(
        out.contains(&format!("imported {nodes} nodes, {events} events")),
        "{out}"
    );
    assert!(cli_ok(&db, &["db", "verify"]).contains("ok:"));
    let history = json(&cli_ok(&db, &["history", "-o", "json"]));
    assert_eq!(history.as_array().unwrap().len(), events);
    let listed = json(&cli_ok(&db, &["nodes", "-o", "json"]));
    assert_eq!(listed["items"].as_array().unwrap().len(), nodes);
}

/// A history of `count` events on 20 nodes, written as an export (format 1).
fn big_export(path: &Path, count: usize) {
    let t0 = Micros(Micros::now().0 - 3_600_000_000);
    let mut events = Vec::with_capacity(count);
    for i in 0..20u64 {
        let name = format!("edge-{i:02}");
        let node: Node = serde_json::from_value(serde_json::json!({
            "name": name, "uid": name, "creationTimestamp": t0, "resourceVersion": 0,
            "source": "static", "labels": {}, "externalID": name, "providerID": "",
            "capacity": {"cpuMillis": 1000, "memoryBytes": 1024}, "unschedulable": false,
            "taints": [], "addresses": [], "conditions": []
        }))
        .unwrap();
        events.push(Event {
            seq: i + 1,
            time: t0,
            node: Some(name),
            kind: EventKind::Registered {
                node: Box::new(node),
            },
        });
    }
    for seq in 21..=count as u64 {
        events.push(Event {
            seq,
            time: Micros(t0.0 + seq as i64 * 1_000),
            node: Some(format!("edge-{:02}", seq % 20)),
            kind: EventKind::ConditionChanged {
                condition: "Ready".into(),
                from: None,
                to: if seq % 40 < 20 {
                    ConditionStatus::True
                } else {
                    ConditionStatus::False
                },
                reason: "KubeletReady".into(),
                message: "a message long enough to make the records realistic in size".into(),
            },
        });
    }
    let registry = nodekeeper::history::replay(&events);
    let mut out = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    use std::io::Write;
    writeln!(
        out,
        "{}",
        serde_json::json!({"format": "nodekeeper-export", "version": 1, "exportedAt": Micros::now(),
            "lastSeq": count, "nodes": registry.len(), "events": count})
    )
    .unwrap();
    for n in registry.values() {
        writeln!(out, "{}", serde_json::json!({ "node": n })).unwrap();
    }
    for e in &events {
        writeln!(out, "{}", serde_json::json!({ "event": e })).unwrap();
    }
}

fn spawn(db: &Path, args: &[&str]) -> Child {
    Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn size(path: &Path) -> u64 {
    std::fs::metadata(path.join("db")).map_or(0, |m| m.len())
}

/// Kills `child` with SIGKILL once `ready` holds; fails if it finished first.
fn kill_when(mut child: Child, what: &str, ready: impl Fn() -> bool) {
    let started = Instant::now();
    while !ready() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "it finished before {what}: make the history longer"
        );
        assert!(started.elapsed() < DEADLINE, "never: {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

/// Every command refuses `db` with a message containing `why` and `what_to_run`.
fn refused_by_every_command(db: &Path, why: &str, what_to_run: &str) {
    for args in [
        &["db", "status"][..],
        &["nodes"][..],
        &["history"][..],
        &["db", "export"][..],
        &[
            "run",
            "--node-status-mode",
            "push",
            "--listen",
            "127.84.2.1:0",
        ][..],
    ] {
        let (code, _, err) = cli(db, args);
        assert_ne!(code, 0, "{args:?} accepted the store");
        assert!(err.contains(why), "{args:?}: {err}");
        assert!(err.contains(what_to_run), "{args:?}: {err}");
    }
}

#[test]
fn an_import_killed_half_way_leaves_a_store_every_command_refuses() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("export.jsonl");
    big_export(&input, 30_000);
    for threshold in [2 << 20, 6 << 20] {
        let db = dir.path().join(format!("db-{threshold}"));
        let child = spawn(&db, &["db", "import", "--input", input.to_str().unwrap()]);
        // Records are going in (the store marks itself incomplete first).
        kill_when(child, "the import loaded some records", || {
            size(&db) > threshold
        });
        refused_by_every_command(&db, "import that did not finish", "rm -r");
        // Doing as told works.
        std::fs::remove_dir_all(&db).unwrap();
        let out = cli_ok(&db, &["db", "import", "--input", input.to_str().unwrap()]);
        assert!(out.contains("30000 events"), "{out}");
    }
}

#[test]
fn a_compaction_killed_at_any_moment_leaves_the_store_whole() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("export.jsonl");
    big_export(&input, 30_000);
    let db = dir.path().join("db");
    cli_ok(&db, &["db", "import", "--input", input.to_str().unwrap()]);
    let whole = records(&export(&db, "whole.jsonl"));
    let copy = sibling(&db, "compacting");
    for threshold in [0, 3 << 20] {
        // Killed while it builds the copy (from scratch each time).
        if copy.exists() {
            std::fs::remove_dir_all(&copy).unwrap();
        }
        let child = spawn(&db, &["db", "compact"]);
        kill_when(child, "the compacted copy is being written", || {
            size(&copy) > threshold
        });
        // The store is untouched: every command reads it.
        assert!(cli_ok(&db, &["db", "verify"]).contains("ok:"));
        assert_eq!(records(&export(&db, "again.jsonl")), whole);
        assert!(copy.exists());
    }
    // Killed after the swap, before the old store was removed: the
    // compacted store is in place, the old one beside it.
    let before_swap = dir.path().join("old-store");
    copy_dir(&db, &before_swap);
    std::fs::remove_dir_all(&copy).unwrap();
    std::fs::rename(&before_swap, &copy).unwrap();
    assert!(cli_ok(&db, &["db", "verify"]).contains("ok:"));
    // The next compaction removes what the interrupted ones left.
    let out = cli_ok(&db, &["db", "compact"]);
    assert!(out.contains("left by an interrupted compaction"), "{out}");
    assert!(!copy.exists());
    assert_eq!(records(&export(&db, "compacted.jsonl")), whole);
}

#[test]
fn a_compaction_interrupted_between_renames_is_refused_then_finished_or_undone() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("export.jsonl");
    big_export(&input, 2_000);
    let db = dir.path().join("db");
    cli_ok(&db, &["db", "import", "--input", input.to_str().unwrap()]);
    let whole = records(&export(&db, "whole.jsonl"));
    let original = sibling(&db, "before-compact");
    let copy = sibling(&db, "compacting");

    // What a kill between the two renames leaves (the previous release's
    // compaction did exactly this): no store at the path, the store beside it.
    std::fs::rename(&db, &original).unwrap();
    refused_by_every_command(&db, "interrupted between its two renames", "db compact");
    assert!(!db.exists(), "a command made a new, empty store");
    let out = cli_ok(&db, &["db", "compact"]);
    assert!(out.contains("undid an interrupted compaction"), "{out}");
    assert_eq!(records(&export(&db, "undone.jsonl")), whole);

    // The same with the complete copy beside it: the swap is finished.
    copy_dir(&db, &copy);
    std::fs::rename(&db, &original).unwrap();
    refused_by_every_command(&db, "interrupted between its two renames", "db compact");
    let out = cli_ok(&db, &["db", "compact"]);
    assert!(out.contains("finished an interrupted compaction"), "{out}");
    assert!(!original.exists() && !copy.exists());
    assert_eq!(records(&export(&db, "finished.jsonl")), whole);
}

/// The recovery snapshots sled keeps in a store directory (`snap.LSN`).
fn snapshots(db: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(db)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("snap."))
        .collect();
    names.sort();
    names
}

#[test]
fn an_imported_or_compacted_store_opens_without_rereading_its_log() {
    // sled writes down where its log stands only while it opens a store;
    // without a current snapshot the next open re-reads everything written
    // since (seconds for a long history, paid by the first command or the
    // controller's restart). A command that only reads leaves it as it is.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("export.jsonl");
    big_export(&input, 5_000);
    let db = dir.path().join("db");
    cli_ok(&db, &["db", "import", "--input", input.to_str().unwrap()]);
    let settled = snapshots(&db);
    assert!(!settled.is_empty(), "no snapshot after the import");
    cli_ok(&db, &["db", "status"]);
    assert_eq!(
        snapshots(&db),
        settled,
        "the first open after the import recovered the log"
    );

    cli_ok(&db, &["db", "compact"]);
    let settled = snapshots(&db);
    cli_ok(&db, &["history", "edge-03"]);
    assert_eq!(
        snapshots(&db),
        settled,
        "the first open after the compaction recovered the log"
    );
    assert!(cli_ok(&db, &["db", "verify"]).contains("ok:"));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// `nodekeeper --db DB ARGS` with a terminal as its standard input, output
/// and error (util-linux's script(1) gives it one): all it wrote there.
fn on_terminal(db: &Path, args: &[&str]) -> String {
    let quote = |s: &str| format!("'{}'", s.replace('\'', r"'\''"));
    let mut command = format!("{} --db {}", quote(BIN), quote(db.to_str().unwrap()));
    for a in args {
        command.push(' ');
        command.push_str(&quote(a));
    }
    let out = Command::new("script")
        .args(["--quiet", "--return", "--command", &command, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .expect("script(1) runs it on a terminal: install it (Debian: bsdutils)");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "nodekeeper {args:?} failed: {text}");
    text
}

#[test]
fn import_and_compact_show_their_progress_on_a_terminal_and_nowhere_else() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("export.jsonl");
    // 20 nodes and 30,000 events: the header announces 30,020 records.
    big_export(&input, 30_000);
    let input = input.to_str().unwrap();
    let summary = "imported 20 nodes, 30000 events, 0 leases and 0 outbox entries";

    let db = dir.path().join("on-terminal");
    let shown = on_terminal(&db, &["db", "import", "--input", input]);
    // The first count is drawn at once; the line is redrawn in place.
    assert!(
        shown.contains("\r\x1b[Kimport: 1024 records loaded (about 3%)"),
        "{shown:?}"
    );
    assert!(
        shown.contains("\r\x1b[Kimport: 30020 records loaded; writing them to disk"),
        "{shown:?}"
    );
    assert!(
        shown.contains("\r\x1b[Kimport: 30020 records in "),
        "{shown:?}"
    );
    assert!(shown.contains(summary), "the summary follows: {shown:?}");

    let shown = on_terminal(&db, &["db", "compact"]);
    assert!(
        shown.contains("\r\x1b[Kcompact: 1024 records loaded (about "),
        "{shown:?}"
    );
    assert!(shown.contains("; writing them to disk"), "{shown:?}");
    assert!(shown.contains("\r\x1b[Kcompact: "), "{shown:?}");
    assert!(
        shown.contains("compacted 20 nodes and 30000 events: "),
        "{shown:?}"
    );

    // Piped, as a script runs them: the summary alone, nothing on standard error.
    let db = dir.path().join("piped");
    let (code, out, err) = cli(&db, &["db", "import", "--input", input]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(out.starts_with(summary), "{out}");
    let (code, out, err) = cli(&db, &["db", "compact"]);
    assert_eq!((code, err.as_str()), (0, ""), "{out}");
    assert!(
        out.starts_with("compacted 20 nodes and 30000 events: "),
        "{out}"
    );
}

#[test]
fn an_overlong_line_is_refused_before_it_is_read_whole() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut child = Command::new(BIN)
        .arg("--db")
        .arg(&db)
        .args(["db", "import"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // A header, then one 64 MiB line. Writing stops when the import stops
    // reading: it closes the pipe as it exits (EPIPE here).
    let writer = std::thread::spawn(move || {
        let mut written = 0usize;
        let header = format!(
            "{}\n{{\"node\":\"",
            serde_json::json!({"format": "nodekeeper-export", "version": 2,
                "exportedAt": Micros::now(), "lastSeq": 0})
        );
        if stdin.write_all(header.as_bytes()).is_err() {
            return written;
        }
        written += header.len();
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..64 {
            if stdin.write_all(&chunk).is_err() {
                return written;
            }
            written += chunk.len();
        }
        written
    });
    let out = child.wait_with_output().unwrap();
    let written = writer.join().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "import failed at line 2: the line is longer than {} MiB",
            nodekeeper::store::MAX_LINE_BYTES >> 20
        )),
        "{err}"
    );
    // What it read of the line, and what the pipe (64 KiB to 1 MiB) held.
    assert!(
        written < nodekeeper::store::MAX_LINE_BYTES + (2 << 20),
        "the import took {written} bytes before refusing the line: it read past the limit"
    );
}

/// What this release's fixtures hold (written by its binary: `run
/// --simulate 5 --site fixture`, sim-00001 down and up again, sim-00002
/// cordoned, then a clean stop): every later release must open the store
/// and import the export.
fn check_fixture_store(db: &Path) {
    assert!(cli_ok(db, &["db", "verify"]).contains("ok:"));
    let status = cli_ok(db, &["db", "status"]);
    assert!(
        status.contains("Events:         27 (last seq 27)"),
        "{status}"
    );
    let listed = json(&cli_ok(db, &["nodes", "-o", "json"]));
    let items = listed["items"].as_array().unwrap();
    assert_eq!(items.len(), 5);
    let cordoned: Vec<&str> = items
        .iter()
        .filter(|n| n["spec"]["unschedulable"] == true)
        .map(|n| n["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(cordoned, ["sim-00002"]);
    let history = json(&cli_ok(db, &["history", "sim-00001", "-o", "json"]));
    let to: Vec<&str> = history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ConditionChanged")
        .map(|e| e["to"].as_str().unwrap_or_default())
        .collect();
    assert!(to.ends_with(&["Unknown", "True"]), "{history}");
}

#[test]
fn this_releases_store_and_export_open_in_this_build() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store");
    copy_dir(&fixture("store-schema5"), &db);
    check_fixture_store(&db);
    let imported = dir.path().join("imported");
    let file = fixture("export-format2.jsonl");
    let out = cli_ok(
        &imported,
        &["db", "import", "--input", file.to_str().unwrap()],
    );
    assert!(out.contains("imported 5 nodes, 27 events"), "{out}");
    check_fixture_store(&imported);
}

#[test]
fn an_export_in_format_1_is_read_as_format_1_and_a_newer_format_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("store");
    copy_dir(&fixture("store-schema5"), &db);
    let file = dir.path().join("format1.jsonl");
    let (code, _, err) = cli(
        &db,
        &[
            "db",
            "export",
            "--format-version",
            "1",
            "--output",
            file.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("in format 1"), "{err}");
    let text = std::fs::read_to_string(&file).unwrap();
    let header: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    assert_eq!(header["version"], 1);
    assert_eq!(
        (header["nodes"].as_u64(), header["events"].as_u64()),
        (Some(5), Some(27))
    );
    // Only what format 1 has: nodes and events.
    assert!(
        text.lines()
            .skip(1)
            .all(|l| l.starts_with("{\"node\":") || l.starts_with("{\"event\":")),
        "{text}"
    );
    let imported = dir.path().join("imported");
    cli_ok(
        &imported,
        &["db", "import", "--input", file.to_str().unwrap()],
    );
    check_fixture_store(&imported);

    let (code, _, err) = cli(&db, &["db", "export", "--format-version", "4"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--format-version"), "{err}");
}
