//! Input the real binary must refuse, or accept, as Kubernetes would: flags
//! that cannot work, node names that are typos of addresses, and quantities
//! written in the whole Kubernetes grammar.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};

use common::*;
use serde_json::json;

/// Runs `run ARGS` expecting a flag error; returns its stderr. A controller
/// that starts instead is killed (it listens on a free loopback port only).
fn refused(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let err_path = dir.path().join("stderr");
    let mut child = Command::new(BIN)
        .arg("--db")
        .arg(&db)
        .arg("run")
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let Some(status) = exited_in_time(&mut child) else {
        panic!(
            "{args:?} was not refused: the controller started\n{}",
            std::fs::read_to_string(&err_path).unwrap_or_default()
        );
    };
    let err = std::fs::read_to_string(&err_path).unwrap();
    assert_eq!(status.code(), Some(2), "{args:?} was not refused: {err}");
    assert!(!db.exists(), "a refused start must not create the store");
    err
}

#[test]
fn a_kubelet_port_of_zero_is_refused() {
    let err = refused(&[
        "--nodes",
        "127.81.1.1",
        "--kubelet-scheme",
        "http",
        "--kubelet-port",
        "0",
    ]);
    assert!(err.contains("--kubelet-port"), "{err}");
    assert!(err.contains("1 to 65535"), "{err}");
    // Push mode probes nothing, but the flag is checked all the same.
    let err = refused(&[
        "--nodes",
        "127.81.1.1",
        "--kubelet-scheme",
        "http",
        "--node-status-mode",
        "push",
        "--kubelet-port",
        "0",
    ]);
    assert!(err.contains("--kubelet-port"), "{err}");
}

#[test]
fn api_server_flags_are_checked_without_an_api_server() {
    let base = ["--nodes", "127.81.1.1", "--kubelet-scheme", "http"];
    for (flag, value) in [
        ("--kube-api-qps", "0"),
        ("--kube-api-qps", "-3"),
        ("--kube-api-qps", "NaN"),
        ("--kube-api-burst", "0"),
        ("--kube-api-timeout", "0"),
    ] {
        let mut args = base.to_vec();
        let pair = format!("{flag}={value}");
        args.push(&pair);
        let err = refused(&args);
        assert!(err.contains(flag), "{flag} {value}: {err}");
    }
}

#[test]
fn a_dotted_quad_that_is_not_an_ipv4_address_is_refused_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("nodes.txt");
    std::fs::write(&file, "# rack 1\n127.81.1.30\n127.81.1.300\n").unwrap();
    let err = refused(&[
        "--nodes-file",
        file.to_str().unwrap(),
        "--kubelet-scheme",
        "http",
    ]);
    assert!(err.contains("nodes.txt:3"), "{err}");
    assert!(
        err.contains("\"127.81.1.300\"") && err.contains("IPv4"),
        "{err}"
    );

    // As an address after a name, and in a YAML file, with its entry.
    std::fs::write(&file, "edge-1 127.81.1.1\nedge-2 127.81.1.256\n").unwrap();
    let err = refused(&[
        "--nodes-file",
        file.to_str().unwrap(),
        "--kubelet-scheme",
        "http",
    ]);
    assert!(
        err.contains("nodes.txt:2") && err.contains("127.81.1.256"),
        "{err}"
    );
    let yaml = dir.path().join("nodes.yaml");
    std::fs::write(&yaml, "- name: edge-1\n  address: 127.081.1.1\n").unwrap();
    let err = refused(&[
        "--nodes-file",
        yaml.to_str().unwrap(),
        "--kubelet-scheme",
        "http",
    ]);
    assert!(
        err.contains("entry 1") && err.contains("127.081.1.1"),
        "{err}"
    );

    let err = refused(&[
        "--nodes",
        "127.81.1.1,127.81.1.999",
        "--kubelet-scheme",
        "http",
    ]);
    assert!(
        err.contains("--nodes entry 2") && err.contains("127.81.1.999"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_memory_capacity_in_exponent_form_is_accepted() {
    let site = TestSite::named(&["edge-1"], Ipv4Addr::new(127, 81, 2, 1)).start();
    let c = site.controller(&[]);
    c.wait_registered("edge-1").await;
    let beat = format!("{:.6}", jiff::Timestamp::now());
    for (memory, cpu, bytes, millis) in [
        ("1e9", "2", "1000000000", "2"),
        ("2E9", "1.5", "1953125Ki", "1500m"),
        ("0.5Ti", "2500m", "512Gi", "2500m"),
    ] {
        let body = json!({"status": {
            "capacity": {"cpu": cpu, "memory": memory, "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": beat,
                            "reason": "KubeletReady", "message": "kubelet is posting ready status"}]
        }});
        let (code, node) = c.status_patch("edge-1", &body).send().await;
        assert_eq!(code, 200, "memory {memory}: {node}");
        assert_eq!(node["status"]["capacity"]["memory"], bytes, "{node}");
        assert_eq!(node["status"]["capacity"]["cpu"], millis, "{node}");
    }
    assert!(c.stop().success());
}

/// A nodes file of 100,000 probed nodes where the hard open-file limit is
/// 20,000 (set for the child, so the test does not depend on the machine's):
/// refused for what is wrong, too many nodes for the limit, and what to do,
/// not for a flag the user never set.
#[test]
fn more_nodes_than_open_files_are_refused_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let nodes = dir.path().join("nodes.txt");
    let text: String = (0..100_000u32)
        .map(|i| {
            format!(
                "127.{}.{}.{}\n",
                160 + i / 62_500,
                (i / 250) % 250,
                i % 250 + 1
            )
        })
        .collect();
    std::fs::write(&nodes, text).unwrap();
    let db = dir.path().join("db");
    let out = Command::new("sh")
        .arg("-c")
        .arg("ulimit -H -n 20000 && ulimit -S -n 20000 && exec \"$0\" \"$@\"")
        .arg(BIN)
        .arg("--db")
        .arg(&db)
        .args(["run", "--nodes-file", nodes.to_str().unwrap()])
        .args(["--kubelet-scheme", "http", "--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(!db.exists());
    assert!(!err.contains("--max-connections"), "{err}");
    assert!(
        err.contains("too many nodes for the open-file limit: this process may open 20000 files, and 100000 nodes need about 100764"),
        "{err}"
    );
    assert!(
        err.contains("LimitNOFILE=") && err.contains("--node-status-mode push"),
        "{err}"
    );
}
