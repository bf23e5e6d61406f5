//! The command line as a user meets it: bad input, inspection of a stopped
//! store, export and import, `at`.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;

#[test]
fn bad_flags_and_files_are_named_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let file = dir.path().join("nodes.txt");
    std::fs::write(&file, "# rack 1\nedge-1\nedge_2\n").unwrap();
    let (code, _, err) = cli(&db, &["run", "--nodes-file", file.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("nodes.txt:3"), "{err}");
    assert!(!db.exists(), "a refused start must not create the store");

    let (code, _, err) = cli(&db, &["run", "--nodes", "a", "--node-sync-period", "10"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("--node-sync-period") && err.contains("unit"),
        "{err}"
    );
    let (code, _, err) = cli(&db, &["run", "--nodes", "a", "--node-memory", "3GB"]);
    assert_eq!(code, 2);
    assert!(err.contains("--node-memory"), "{err}");
    let (code, _, err) = cli(&db, &["run", "--nodes", "a"]);
    assert_eq!(code, 2, "https without a CA is refused: {err}");
    assert!(err.contains("--kubelet-ca"), "{err}");
    let (code, _, err) = cli(&db, &["run", "--nodes", "a,A", "--kubelet-scheme", "http"]);
    assert_eq!(code, 2);
    assert!(err.contains("listed twice"), "{err}");

    let (code, _, err) = cli(&db, &["nodes"]);
    assert_eq!(code, 1);
    assert!(err.contains("no store at"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_store_is_inspected_exported_and_imported() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 64, 0, 1)).await;
    let (fleet, db) = (&site.fleet, site.db.clone());
    let c = site.controller(&[]);
    let (a, b) = (fleet.name(0), fleet.name(1));
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;
    fleet.handle.set(&b, KubeletState::Sick).unwrap();
    c.wait_ready(&b, "False").await;
    assert!(c.stop().success());
    let dir = site.stop_fleet().await;

    // `at` rebuilds the registry as it was: before b fell ill it was Ready.
    let history = json(&cli_ok(&db, &["history", &b, "-o", "json"]));
    let events = history.as_array().unwrap();
    let fell = events.iter().find(|e| e["to"] == "False").unwrap();
    let before_fall = events
        .iter()
        .rev()
        .find(|e| e["seq"].as_u64() < fell["seq"].as_u64())
        .unwrap();
    let then = json(&cli_ok(
        &db,
        &["at", before_fall["time"].as_str().unwrap(), "-o", "json"],
    ));
    let b_then = then["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["metadata"]["name"] == b.as_str())
        .unwrap();
    assert_eq!(ready_of(b_then).as_deref(), Some("True"));
    let now = json(&cli_ok(&db, &["at", "0s", "-o", "json"]));
    let b_now = now["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["metadata"]["name"] == b.as_str())
        .unwrap();
    assert_eq!(ready_of(b_now).as_deref(), Some("False"));
    let (code, _, err) = cli(&db, &["at", "last tuesday"]);
    assert_eq!(code, 2);
    assert!(err.contains("RFC 3339"), "{err}");

    // Filters.
    let only_ready = json(&cli_ok(
        &db,
        &["history", "--condition", "Ready", "-o", "json"],
    ));
    assert!(only_ready
        .as_array()
        .unwrap()
        .iter()
        .all(|e| e["kind"] == "ConditionChanged"));
    let none = json(&cli_ok(
        &db,
        &["history", "--until", "2000-01-01T00:00:00Z", "-o", "json"],
    ));
    assert_eq!(none.as_array().unwrap().len(), 0);
    assert!(cli_ok(&db, &["history"]).starts_with("SEQ"));
    let (code, _, err) = cli(&db, &["describe", "nope"]);
    assert_eq!(code, 1);
    assert!(err.contains("\"nope\" not found"), "{err}");

    // Export → import reproduces the registry and the history exactly.
    let export = dir.path().join("export.jsonl");
    cli_ok(&db, &["db", "export", "--output", export.to_str().unwrap()]);
    let copy = dir.path().join("copy");
    let imported = cli_ok(
        &copy,
        &["db", "import", "--input", export.to_str().unwrap()],
    );
    assert!(imported.contains("imported 2 nodes"), "{imported}");
    for args in [&["nodes", "-o", "json"][..], &["history", "-o", "json"][..]] {
        assert_eq!(
            json(&cli_ok(&db, args)),
            json(&cli_ok(&copy, args)),
            "{args:?} differs after import"
        );
    }
    let (code, _, err) = cli(
        &copy,
        &["db", "import", "--input", export.to_str().unwrap()],
    );
    assert_eq!(code, 1);
    assert!(err.contains("not empty"), "{err}");

    // Compaction keeps everything.
    let before = json(&cli_ok(&db, &["history", "-o", "json"]));
    assert!(cli_ok(&db, &["db", "compact"]).contains("compacted 2 nodes"));
    assert_eq!(json(&cli_ok(&db, &["history", "-o", "json"])), before);
    assert!(cli_ok(&db, &["db", "verify"]).contains("ok:"));

    // YAML and wide tables.
    assert!(cli_ok(&db, &["nodes", "-o", "yaml"]).contains("kind: NodeList"));
    assert!(cli_ok(&db, &["nodes", "-o", "wide"]).contains("INTERNAL-IP"));
}
