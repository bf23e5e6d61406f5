//! `/openapi/v2` and `/openapi/v3` against the real binary and the real
//! kubectl (v1.32): `explain`, and `apply` and `edit` with validation on
//! (their default, `--validate=strict`). How kubectl reads the documents is
//! in `src/server/openapi.rs`.

mod common;

use common::{client, Controller, Kubectl, TestSite};
use serde_json::{json, Value};

async fn register(c: &Controller, name: &str) {
    let node = json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.9"}]},
    });
    let (code, created) = c.call("POST", "/api/v1/nodes").json(&node).send().await;
    assert_eq!(code, 201, "{created}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documents_are_kube_apiservers_cut_to_what_is_served() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&[]);
    // The index names each group version with a hashed URL
    // (client-go openapi/client.go `Paths`).
    let (code, index) = c.get("/openapi/v3").await;
    assert_eq!(code, 200);
    let paths = index["paths"].as_object().unwrap();
    let names: Vec<&str> = paths.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "api/v1",
            "apis/coordination.k8s.io/v1",
            "apis/events.k8s.io/v1",
            "apis/node.k8s.io/v1",
            "apis/storage.k8s.io/v1"
        ]
    );
    let url = paths["apis/storage.k8s.io/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap();
    assert!(
        url.starts_with("/openapi/v3/apis/storage.k8s.io/v1?hash="),
        "{url}"
    );
    let response = client()
        .get(format!("{}{url}", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers()["cache-control"], "public, immutable");
    let storage: Value = response.json().await.unwrap();
    // Only what is served: CSINodes and CSIDrivers, not StorageClasses.
    let served: Vec<&str> = storage["paths"]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        served,
        [
            "/apis/storage.k8s.io/v1/csidrivers",
            "/apis/storage.k8s.io/v1/csidrivers/{name}",
            "/apis/storage.k8s.io/v1/csinodes",
            "/apis/storage.k8s.io/v1/csinodes/{name}"
        ]
    );
    assert!(storage["components"]["schemas"]["io.k8s.api.storage.v1.CSINode"].is_object());
    assert!(storage["components"]["schemas"]["io.k8s.api.storage.v1.StorageClass"].is_null());

    // v2: JSON to a client that takes JSON; the protobuf kubectl asks for
    // (client-go discovery/discovery_client.go `OpenAPISchema`) is 406.
    let (code, v2) = c.get("/openapi/v2").await;
    assert_eq!(code, 200);
    assert!(v2["definitions"]["io.k8s.api.core.v1.Node"].is_object());
    let response = client()
        .get(format!("{}/openapi/v2", c.url))
        .header(
            "accept",
            "application/com.github.proto-openapi.spec.v2@v1.0+protobuf",
        )
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 406);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explains_applies_and_edits_with_validation_on() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&["--allow-node-registration"]);
    register(&c, "edge-41").await;
    let dir = tempfile::tempdir().unwrap();
    let k = Kubectl::new(&c.url, dir.path());

    // explain reads the v3 document.
    let out = k.ok(&["explain", "node.spec"]).await;
    assert!(out.contains("KIND:       Node"), "{out}");
    assert!(out.contains("unschedulable\t<boolean>"), "{out}");
    assert!(out.contains("taints\t<[]Taint>"), "{out}");

    // apply, validation on: kubectl sees that the server validates
    // (fieldValidation on the PATCH), and sends fieldValidation=Strict.
    let manifest = dir.path().join("node.yaml");
    let write = |labels: &str, extra: &str| {
        format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: edge-41\n  labels:\n{labels}{extra}"
        )
    };
    tokio::fs::write(&manifest, write("    tier: edge\n", ""))
        .await
        .unwrap();
    let file = manifest.to_str().unwrap();
    let (code, out, err) = k.run(&["apply", "-f", file]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("node/edge-41 configured"), "{out}");
    assert!(!err.contains("openapi"), "{err}");
    let (_, node) = c.get("/api/v1/nodes/edge-41").await;
    assert_eq!(node["metadata"]["labels"]["tier"], "edge");
    // A misspelt field is refused, as kube-apiserver refuses it.
    tokio::fs::write(
        &manifest,
        write("    tier: core\n", "spec:\n  unschedulabel: true\n"),
    )
    .await
    .unwrap();
    let (code, _, err) = k.run(&["apply", "-f", file]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains(r#"strict decoding error: unknown field "spec.unschedulabel""#),
        "{err}"
    );
    let (_, node) = c.get("/api/v1/nodes/edge-41").await;
    assert_eq!(node["metadata"]["labels"]["tier"], "edge");
    // A server-side dry run is refused, not carried out.
    tokio::fs::write(&manifest, write("    tier: core\n", ""))
        .await
        .unwrap();
    let (code, _, err) = k.run(&["apply", "--dry-run=server", "-f", file]).await;
    assert_ne!(code, 0);
    assert!(err.contains("nodekeeper has no dry runs"), "{err}");
    let (_, node) = c.get("/api/v1/nodes/edge-41").await;
    assert_eq!(node["metadata"]["labels"]["tier"], "edge");

    // edit: the editor adds a label to the YAML kubectl wrote.
    let editor = dir.path().join("editor.sh");
    tokio::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/^  labels:$/  labels:\\n    edited: \"yes\"/' \"$1\"\n",
    )
    .await
    .unwrap();
    let (code, out, err) = k
        .run_with(
            &["edit", "node", "edge-41"],
            &[("EDITOR", &format!("sh {}", editor.to_str().unwrap()))],
        )
        .await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("node/edge-41 edited"), "{out}");
    let (_, node) = c.get("/api/v1/nodes/edge-41").await;
    assert_eq!(node["metadata"]["labels"]["edited"], "yes");

    // CSINodes are checked the same way, against their own schema.
    let csinode = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
                         "metadata": {"name": "edge-41"}, "spec": {"drivers": []}});
    let (code, created) = c
        .call("POST", "/apis/storage.k8s.io/v1/csinodes")
        .json(&csinode)
        .send()
        .await;
    assert_eq!(code, 201, "{created}");
    let patch = json!({"spec": {"drivers": [{"name": "d", "nodeID": "n", "colour": "x"}]}});
    let send = |validation: &'static str| {
        client()
            .patch(format!(
                "{}/apis/storage.k8s.io/v1/csinodes/edge-41?fieldValidation={validation}",
                c.url
            ))
            .header("content-type", "application/merge-patch+json")
            .body(patch.to_string())
            .send()
    };
    let strict = send("Strict").await.unwrap();
    assert_eq!(strict.status().as_u16(), 400);
    let status: Value = strict.json().await.unwrap();
    assert_eq!(
        status["message"],
        r#"strict decoding error: unknown field "spec.drivers[0].colour""#
    );
    let warned = send("Warn").await.unwrap();
    assert_eq!(warned.status().as_u16(), 200);
    assert_eq!(
        warned.headers()["warning"],
        r#"299 - "unknown field 'spec.drivers[0].colour'""#
    );
}
