//! The `inventory` provider against a real file being edited between listings.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::Path;

use nodekeeper::model::{AddressKind, Resources};
use nodekeeper::source::cloud::{
    anchored, cloud_node_specs, CloudNode, CloudProvider, InstanceState,
};
use nodekeeper::source::provider;

async fn list(p: &dyn CloudProvider, pattern: &str) -> Result<Vec<CloudNode>, String> {
    cloud_node_specs(p, &anchored(pattern).unwrap(), Resources::default())
        .await
        .map_err(|e| e.to_string())
}

fn names(nodes: &[CloudNode]) -> Vec<&str> {
    nodes.iter().map(|n| n.spec.name.as_str()).collect()
}

fn internal_ip<'a>(nodes: &'a [CloudNode], name: &str) -> &'a str {
    let node = nodes.iter().find(|n| n.spec.name == name).unwrap();
    node.spec
        .addresses
        .iter()
        .find(|a| a.kind == AddressKind::InternalIP)
        .map(|a| a.address.as_str())
        .unwrap()
}

/// Writes in place, as an editor that truncates and rewrites does.
fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

/// Writes through a temporary file and a rename, as careful tools do.
fn replace(path: &Path, text: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, text).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

#[tokio::test]
async fn a_yaml_inventory_is_followed_as_it_is_edited() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.yaml");
    write(
        &path,
        "machines:\n  - {name: edge-1, address: 10.0.0.1, zone: rack-a}\n  - {name: edge-2, address: 10.0.0.2}\n",
    );
    let p = provider("inventory", Some(&path)).unwrap();
    let nodes = list(&*p, ".*").await.unwrap();
    assert_eq!(names(&nodes), ["edge-1", "edge-2"]);
    assert_eq!(nodes[0].spec.source, "cloud/inventory");
    assert_eq!(nodes[0].spec.provider_id, "inventory://edge-1");
    assert_eq!(nodes[0].spec.external_id, "edge-1");
    assert_eq!(
        nodes[0].spec.labels["topology.kubernetes.io/zone"],
        "rack-a"
    );

    // A machine is added.
    write(
        &path,
        "machines:\n  - {name: edge-1, address: 10.0.0.1, zone: rack-a}\n  - {name: edge-2, address: 10.0.0.2}\n  - {name: edge-3, address: 10.0.0.3, state: stopped}\n",
    );
    let nodes = list(&*p, ".*").await.unwrap();
    assert_eq!(names(&nodes), ["edge-1", "edge-2", "edge-3"]);
    assert_eq!(nodes[2].state, InstanceState::Stopped);

    // One is removed.
    write(
        &path,
        "machines:\n  - {name: edge-1, address: 10.0.0.1, zone: rack-a}\n  - {name: edge-3, address: 10.0.0.3, state: stopped}\n",
    );
    assert_eq!(names(&list(&*p, ".*").await.unwrap()), ["edge-1", "edge-3"]);

    // An address changes, and the file keeps its size: still seen.
    write(
        &path,
        "machines:\n  - {name: edge-1, address: 10.0.0.9, zone: rack-a}\n  - {name: edge-3, address: 10.0.0.3, state: stopped}\n",
    );
    let nodes = list(&*p, ".*").await.unwrap();
    assert_eq!(internal_ip(&nodes, "edge-1"), "10.0.0.9");

    // It becomes malformed: an error every time, never the last good content.
    write(
        &path,
        "machines:\n  - {name: edge-1, address: 10.0.0.9}\n  - name: [edge-3\n",
    );
    for _ in 0..2 {
        let err = list(&*p, ".*").await.unwrap_err();
        assert!(err.contains("site.yaml") && err.contains("line"), "{err}");
    }
    // A bad value is reported with its line too.
    write(
        &path,
        "machines:\n  - {name: edge-1, address: 10.0.0.9}\n  - {name: edge-3, cpu: lots}\n",
    );
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(err.contains("line 3") && err.contains("CPU"), "{err}");

    // Fixed, through an atomic rename.
    replace(
        &path,
        "machines:\n  - {name: edge-1, address: 10.0.0.9}\n  - {name: edge-4, address: 10.0.0.4}\n",
    );
    let nodes = list(&*p, ".*").await.unwrap();
    assert_eq!(names(&nodes), ["edge-1", "edge-4"]);
    assert_eq!(names(&list(&*p, "edge-4").await.unwrap()), ["edge-4"]);

    // Emptied by accident: refused, not "every machine is gone".
    write(&path, "");
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(err.contains("empty"), "{err}");
    write(&path, "machines: []\n");
    assert!(list(&*p, ".*").await.unwrap().is_empty());

    // Gone: an error.
    std::fs::remove_file(&path).unwrap();
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(err.contains("cannot read the inventory"), "{err}");
}

#[tokio::test]
async fn an_unchanged_file_is_not_read_again() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.json");
    write(&path, r#"[{"name": "a"}, {"name": "b"}]"#);
    // Settled: modified well before it is read.
    let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    let p = provider("inventory", Some(&path)).unwrap();
    assert_eq!(names(&list(&*p, ".*").await.unwrap()), ["a", "b"]);
    // Rewrite with the same size and the same modification time: the stamp
    // says unchanged, so the cached listing stands (this is what the stat buys).
    write(&path, r#"[{"name": "c"}, {"name": "d"}]"#);
    std::fs::File::options()
        .write(true)
        .open(&path)
        .unwrap()
        .set_modified(old)
        .unwrap();
    assert_eq!(names(&list(&*p, ".*").await.unwrap()), ["a", "b"]);
    // Any real edit moves the modification time.
    write(&path, r#"[{"name": "c"}, {"name": "d"}]"#);
    assert_eq!(names(&list(&*p, ".*").await.unwrap()), ["c", "d"]);
}

#[tokio::test]
async fn an_ansible_inventory_is_followed_as_it_is_edited() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hosts");
    write(
        &path,
        "[web]\nweb-[1:2] cpu=2\n\n[web:vars]\nzone=rack-a\n\n[all:vars]\nregion=site-1\n",
    );
    let p = provider("inventory", Some(&path)).unwrap();
    let nodes = list(&*p, ".*").await.unwrap();
    assert_eq!(names(&nodes), ["web-1", "web-2"]);
    assert_eq!(nodes[0].spec.capacity.cpu_millis, 2000);
    assert_eq!(
        nodes[0].spec.capacity.memory_bytes,
        Resources::default().memory_bytes
    );
    assert_eq!(nodes[0].spec.labels["nodekeeper.io/group-web"], "true");
    assert_eq!(
        nodes[0].spec.labels["topology.kubernetes.io/region"],
        "site-1"
    );

    write(
        &path,
        "[web]\nweb-[1:2] cpu=2\n\n[db]\ndb-1 ansible_host=10.0.0.7\n\n[web:vars]\nzone=rack-a\n\n[all:vars]\nregion=site-1\n",
    );
    let nodes = list(&*p, ".*").await.unwrap();
    assert_eq!(names(&nodes), ["db-1", "web-1", "web-2"]);
    assert_eq!(internal_ip(&nodes, "db-1"), "10.0.0.7");
    assert!(!nodes[0].spec.labels.contains_key("nodekeeper.io/group-web"));

    write(&path, "[web]\nweb-1 cpu=2\nweb-2 cpu=two\n");
    let err = list(&*p, ".*").await.unwrap_err();
    assert!(err.contains("hosts:3:"), "{err}");
}

#[test]
fn a_malformed_inventory_fails_at_start_up() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("site.yaml");
    write(&path, "machines:\n  - name: a\n    zone: [\n");
    let err = provider("inventory", Some(&path))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("--cloud-config") && err.contains("site.yaml"),
        "{err}"
    );
}

/// The figure: time to turn a 10k-machine inventory into node specs.
/// `cargo test --release --test inventory_source -- --ignored --nocapture`
#[tokio::test]
#[ignore = "a figure, not a check: prints the time to list 10k machines; run it in a release build"]
async fn figure_sync_10k_inventory() {
    let dir = tempfile::tempdir().unwrap();
    for (file, text) in [
        ("site.yaml", yaml_10k()),
        ("site.json", json_10k()),
        ("hosts", ini_10k()),
    ] {
        let path = dir.path().join(file);
        write(&path, &text);
        let started = std::time::Instant::now();
        let p = provider("inventory", Some(&path)).unwrap();
        let open = started.elapsed();
        // Touch so the first listing reads and parses again (a changed file).
        write(&path, &text);
        let filter = anchored(".*").unwrap();
        let t = std::time::Instant::now();
        let nodes = cloud_node_specs(&*p, &filter, Resources::default())
            .await
            .unwrap();
        let changed = t.elapsed();
        assert_eq!(nodes.len(), 10_000);
        // Settled and unchanged: one stat, then the specs.
        let old = std::time::SystemTime::now() - std::time::Duration::from_secs(60);
        std::fs::File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(old)
            .unwrap();
        cloud_node_specs(&*p, &filter, Resources::default())
            .await
            .unwrap();
        let t = std::time::Instant::now();
        let nodes = cloud_node_specs(&*p, &filter, Resources::default())
            .await
            .unwrap();
        let unchanged = t.elapsed();
        assert_eq!(nodes.len(), 10_000);
        println!(
            "10k machines, {file} ({} KiB): open {open:?}, sync after a change {changed:?}, sync unchanged {unchanged:?}",
            text.len() / 1024
        );
    }
}

fn yaml_10k() -> String {
    let mut s = String::from("machines:\n");
    for i in 0..10_000 {
        s.push_str(&format!(
            "  - name: node-{i:05}\n    address: 10.{}.{}.{}\n    zone: rack-{}\n    region: site-1\n    cpu: 8\n    memory: 32Gi\n    labels: {{tier: edge}}\n",
            i / 65536,
            (i / 256) % 256,
            i % 256,
            i % 20
        ));
    }
    s
}

fn json_10k() -> String {
    let machines: Vec<serde_json::Value> = (0..10_000)
        .map(|i| {
            serde_json::json!({
                "name": format!("node-{i:05}"),
                "address": format!("10.{}.{}.{}", i / 65536, (i / 256) % 256, i % 256),
                "zone": format!("rack-{}", i % 20),
                "region": "site-1",
                "cpu": 8,
                "memory": "32Gi",
                "labels": {"tier": "edge"},
            })
        })
        .collect();
    serde_json::to_string_pretty(&serde_json::json!({ "machines": machines })).unwrap()
}

fn ini_10k() -> String {
    let mut s = String::new();
    for rack in 0..20 {
        s.push_str(&format!("[rack{rack}]\n"));
        for i in (rack..10_000).step_by(20) {
            s.push_str(&format!(
                "node-{i:05} ansible_host=10.{}.{}.{} cpu=8 memory=32Gi\n",
                i / 65536,
                (i / 256) % 256,
                i % 256
            ));
        }
        s.push_str(&format!("[rack{rack}:vars]\nzone=rack-{rack}\n"));
    }
    s.push_str("[all:vars]\nregion=site-1\n");
    s
}
