//! A source of nodes that turns bad (a typo in the nodes file, an inventory
//! that does not parse) is met the same way while the controller runs and
//! at its next start: the registry is kept, and `/readyz`, the gauge
//! `nodekeeper_source_failing` and a `SourceFailed` event say what is wrong
//! until it is fixed. Only a first start, with no store to keep, refuses it.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::path::Path;

use common::*;
use serde_json::Value;

/// Replaces the file in one step, as an editor saving it would.
fn write(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

/// The names the registry lists, sorted.
async fn names(c: &Controller) -> Vec<String> {
    let (_, list) = c.get("/api/v1/nodes").await;
    let mut names: Vec<String> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["metadata"]["name"].as_str().unwrap().to_string())
        .collect();
    names.sort();
    names
}

/// The `SourceFailed` events in the history.
async fn source_failures(c: &Controller) -> Vec<Value> {
    let (_, history) = c.get("/v1/history").await;
    history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "SourceFailed")
        .cloned()
        .collect()
}

/// Waits until `/readyz?verbose` has a line starting with `prefix` and holding every one of `words`.
async fn wait_readyz(c: &Controller, prefix: &str, words: &[&str]) -> String {
    let v = c
        .wait_for("/readyz?verbose", prefix, |v| {
            v.as_str().is_some_and(|t| {
                t.lines()
                    .any(|l| l.starts_with(prefix) && words.iter().all(|w| l.contains(w)))
            })
        })
        .await;
    v.as_str().unwrap().to_string()
}

/// `nodekeeper run` on a path with no store yet: its exit code and stderr.
fn first_start(db: &Path, args: &[String]) -> (Option<i32>, String) {
    let mut child = std::process::Command::new(BIN)
        .arg("--db")
        .arg(db)
        .arg("run")
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let status = exited_in_time(&mut child).expect("a first start with a bad source exits");
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    (status.code(), stderr)
}

const FILE_FAILING: &str = "nodekeeper_source_failing{source=\"NodesFile\"}";
const CLOUD_FAILING: &str = "nodekeeper_source_failing{source=\"Cloud\"}";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_typo_in_the_nodes_file_is_reported_while_running_and_at_the_next_start() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = dir.path().join("nodes.txt");
    let good = "edge-a 127.160.1.1\nedge-b 127.160.1.2\n";
    write(&nodes, good);
    let args = push_mode_args(&nodes, &[]);
    let db = dir.path().join("db");
    let c = Controller::start(&db, &args);
    c.wait_for("/api/v1/nodes", "two nodes", |l| {
        l["items"].as_array().is_some_and(|i| i.len() == 2)
    })
    .await;
    wait_readyz(&c, "[+]nodes-file ok", &[]).await;
    assert_eq!(c.metric(FILE_FAILING).await, Some(0.0));

    // The typo, added while it runs.
    write(&nodes, &format!("{good}127.81.5.500\n"));
    let readyz = wait_readyz(
        &c,
        "[-]nodes-file failed: ",
        &["nodes.txt:3", "127.81.5.500", "left as it is"],
    )
    .await;
    assert!(readyz.ends_with("readyz check failed\n"), "{readyz}");
    assert_eq!(c.metric(FILE_FAILING).await, Some(1.0));
    let failures = source_failures(&c).await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["source"], "static");
    assert!(
        failures[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("nodes.txt:3") && m.contains("127.81.5.500")),
        "{failures:?}"
    );
    assert_eq!(names(&c).await, ["edge-a", "edge-b"]);
    let status = c.stop();
    assert!(status.success(), "{status}");

    // The next start, the typo still there: it starts, keeps its registry and says why.
    let c = Controller::start(&db, &args);
    wait_readyz(
        &c,
        "[-]nodes-file failed: ",
        &["nodes.txt:3", "127.81.5.500"],
    )
    .await;
    assert_eq!(names(&c).await, ["edge-a", "edge-b"]);
    assert_eq!(c.metric(FILE_FAILING).await, Some(1.0));
    assert_eq!(source_failures(&c).await.len(), 2);

    // Fixed (and a node added): followed again, and ready.
    write(&nodes, &format!("{good}edge-c 127.160.1.3\n"));
    wait_readyz(&c, "[+]nodes-file ok", &[]).await;
    c.wait_for("/api/v1/nodes", "the added node", |l| {
        l["items"].as_array().is_some_and(|i| i.len() == 3)
    })
    .await;
    assert_eq!(c.metric(FILE_FAILING).await, Some(0.0));
    let status = c.stop();
    assert!(status.success(), "{status}");

    // A first start has no registry to keep: it refuses the file, naming the line.
    write(&nodes, &format!("{good}127.81.5.500\n"));
    let fresh = dir.path().join("fresh");
    let (code, stderr) = first_start(&fresh, &args);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("nodes.txt:3") && stderr.contains("127.81.5.500"),
        "{stderr}"
    );
    assert!(!fresh.exists(), "nothing was made");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_inventory_is_reported_while_running_and_at_the_next_start() {
    let site = TestSite::named::<&str>(&[], Ipv4Addr::new(127, 160, 2, 1))
        .without_nodes_file()
        .start();
    let inventory = site.path().join("inventory.yaml");
    let good = "machines:\n  - name: inv-a\n    address: 127.160.2.1\n  - name: inv-b\n    address: 127.160.2.2\n";
    write(&inventory, good);
    let mut args = site.args();
    args.extend(
        [
            "--cloud-provider",
            "inventory",
            "--cloud-config",
            inventory.to_str().unwrap(),
        ]
        .map(String::from),
    );
    let c = Controller::start(&site.db, &args);
    c.wait_for("/api/v1/nodes", "two machines", |l| {
        l["items"].as_array().is_some_and(|i| i.len() == 2)
    })
    .await;
    wait_readyz(&c, "[+]source ok", &[]).await;
    assert_eq!(c.metric(CLOUD_FAILING).await, Some(0.0));

    // A bad edit while it runs.
    write(&inventory, "machines: [inv-a\n");
    wait_readyz(&c, "[-]source failed: ", &["inventory.yaml"]).await;
    assert_eq!(c.metric(CLOUD_FAILING).await, Some(1.0));
    let failures = source_failures(&c).await;
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert_eq!(failures[0]["source"], "cloud/inventory");
    assert_eq!(names(&c).await, ["inv-a", "inv-b"]);
    let status = c.stop();
    assert!(status.success(), "{status}");

    // The next start, still bad: it starts, keeps its registry and says why.
    let c = Controller::start(&site.db, &args);
    wait_readyz(&c, "[-]source failed: ", &["inventory.yaml"]).await;
    assert_eq!(names(&c).await, ["inv-a", "inv-b"]);
    assert_eq!(c.metric(CLOUD_FAILING).await, Some(1.0));
    assert_eq!(source_failures(&c).await.len(), 2);
    write(&inventory, good);
    wait_readyz(&c, "[+]source ok", &[]).await;
    assert_eq!(c.metric(CLOUD_FAILING).await, Some(0.0));
    let status = c.stop();
    assert!(status.success(), "{status}");

    // A first start refuses it.
    write(&inventory, "machines: [inv-a\n");
    let fresh = site.path().join("fresh");
    let (code, stderr) = first_start(&fresh, &args);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("inventory.yaml"), "{stderr}");
    assert!(!fresh.exists(), "nothing was made");
}
