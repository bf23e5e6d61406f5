//! `/openapi/v2` and `/openapi/v3` against the real binary and the real
//! kubectl (v1.32): `explain`, and `create`, `apply` and `edit` with
//! validation on (their default, `--validate=strict`). How kubectl reads
//! the documents is in `src/server/openapi.rs`.

mod common;

use std::io::Read;

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
            "apis/authentication.k8s.io/v1",
            "apis/authorization.k8s.io/v1",
            "apis/certificates.k8s.io/v1",
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

    // CSRs as they are routed: no collection delete, no PUT of the object,
    // PATCH of the object only; the reviews are created and nothing else.
    let paths_of = |doc: &Value| -> Vec<(String, Vec<String>)> {
        doc["paths"]
            .as_object()
            .unwrap()
            .iter()
            .map(|(p, ops)| {
                let methods = ops.as_object().unwrap().keys();
                let methods = methods.filter(|m| *m != "parameters").cloned().collect();
                (p.clone(), methods)
            })
            .collect()
    };
    let (_, certificates) = c.get("/openapi/v3/apis/certificates.k8s.io/v1").await;
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let methods = |m: &[&str]| m.iter().map(|m| m.to_string()).collect::<Vec<_>>();
    assert_eq!(
        paths_of(&certificates),
        [
            (csrs.to_string(), methods(&["get", "post"])),
            (
                format!("{csrs}/{{name}}"),
                methods(&["delete", "get", "patch"])
            ),
            (
                format!("{csrs}/{{name}}/approval"),
                methods(&["get", "put"])
            ),
            (format!("{csrs}/{{name}}/status"), methods(&["get", "put"])),
        ]
    );
    let schemas = &certificates["components"]["schemas"];
    assert!(schemas["io.k8s.api.certificates.v1.CertificateSigningRequestSpec"].is_object());
    assert!(schemas["io.k8s.api.certificates.v1alpha1.ClusterTrustBundle"].is_null());
    for (group, path) in [
        (
            "authentication",
            "/apis/authentication.k8s.io/v1/tokenreviews",
        ),
        (
            "authorization",
            "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        ),
    ] {
        let (_, doc) = c.get(&format!("/openapi/v3/apis/{group}.k8s.io/v1")).await;
        assert_eq!(paths_of(&doc), [(path.to_string(), methods(&["post"]))]);
    }

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
    assert!(v2["definitions"]["io.k8s.api.certificates.v1.CertificateSigningRequest"].is_object());
    assert!(v2["paths"]["/apis/authorization.k8s.io/v1/subjectaccessreviews"]["post"].is_object());
}

/// `path` asked for with `Accept-Encoding: accept_encoding`: its headers
/// and body as sent.
async fn fetch(
    c: &Controller,
    path: &str,
    accept_encoding: &str,
) -> (reqwest::header::HeaderMap, Vec<u8>) {
    let response = client()
        .get(format!("{}{path}", c.url))
        .header("accept-encoding", accept_encoding)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 200, "{path}");
    let headers = response.headers().clone();
    (headers, response.bytes().await.unwrap().to_vec())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documents_are_sent_gzipped_to_clients_that_take_gzip_and_inflated_to_others() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&[]);
    let (_, index) = c.get("/openapi/v3").await;
    let url = index["paths"]["apis/certificates.k8s.io/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    for (path, cache) in [
        ("/openapi/v2", "no-cache, private"),
        ("/openapi/v3/api/v1", "no-cache, private"),
        (url.as_str(), "public, immutable"),
    ] {
        // As kubectl (Go's HTTP client) asks.
        let (gzipped, gz) = fetch(&c, path, "gzip").await;
        assert_eq!(gzipped["content-encoding"], "gzip", "{path}");
        assert_eq!(gzipped["vary"], "Accept-Encoding", "{path}");
        assert_eq!(gzipped["cache-control"], cache, "{path}");
        assert_eq!(gzipped["content-type"], "application/json", "{path}");
        assert_eq!(gzipped["content-length"], gz.len().to_string().as_str());
        // As a client without gzip asks.
        let (plain, text) = fetch(&c, path, "identity").await;
        assert!(plain.get("content-encoding").is_none(), "{path}");
        assert_eq!(plain["vary"], "Accept-Encoding", "{path}");
        assert_eq!(plain["cache-control"], cache, "{path}");
        assert_eq!(plain["content-length"], text.len().to_string().as_str());
        // The same document, a fraction of the bytes on the wire.
        let mut inflated = Vec::new();
        flate2::read::GzDecoder::new(&gz[..])
            .read_to_end(&mut inflated)
            .unwrap();
        assert!(
            inflated == text,
            "{path}: the gzipped and the plain document differ"
        );
        assert!(
            gz.len() * 3 < text.len(),
            "{path}: {} of {}",
            gz.len(),
            text.len()
        );
        serde_json::from_slice::<Value>(&text).unwrap();
    }
    // `gzip;q=0` refuses gzip (RFC 9110 12.5.3).
    let (refused, _) = fetch(&c, "/openapi/v2", "gzip;q=0, identity").await;
    assert!(refused.get("content-encoding").is_none());
}

/// A CSR named `name` for node `node`'s client certificate, as YAML
/// (`spec` lines after the request's `extra`).
fn csr_yaml(name: &str, node: &str, labels: &str, extra: &str) -> String {
    let pem = common::node_csr_pem(node);
    let request = serde_json::to_value(k8s_openapi::ByteString(pem.into_bytes())).unwrap();
    format!(
        "apiVersion: certificates.k8s.io/v1\nkind: CertificateSigningRequest\nmetadata:\n  \
         name: {name}\n  labels:\n{labels}spec:\n  request: {}\n  signerName: \
         kubernetes.io/kube-apiserver-client-kubelet\n  usages: [digital signature, client auth]\n{extra}",
        request.as_str().unwrap()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_explains_creates_and_applies_csrs_with_validation_on() {
    let site = TestSite::unlisted().start();
    let c = site.controller_with(&[]);
    let dir = tempfile::tempdir().unwrap();
    let k = Kubectl::new(&c.url, dir.path());

    // explain reads the v3 documents of the three groups.
    let out = k.ok(&["explain", "certificatesigningrequest.spec"]).await;
    assert!(
        out.contains("KIND:       CertificateSigningRequest"),
        "{out}"
    );
    assert!(out.contains("signerName\t<string> -required-"), "{out}");
    assert!(out.contains("expirationSeconds\t<integer>"), "{out}");
    let out = k.ok(&["explain", "tokenreview.spec"]).await;
    assert!(out.contains("token\t<string>"), "{out}");
    let out = k
        .ok(&["explain", "subjectaccessreview.spec.resourceAttributes"])
        .await;
    assert!(out.contains("verb\t<string>"), "{out}");

    // create, validation on: the v3 document says the CSR PATCH takes
    // fieldValidation, so kubectl leaves the check to the server and sends
    // fieldValidation=Strict (cli-runtime query_param_verifier_v3.go
    // `supportsQueryParamV3`), instead of asking for the v2 document in
    // protobuf, which is not served.
    let manifest = dir.path().join("csr.yaml");
    let file = manifest.to_str().unwrap();
    tokio::fs::write(
        &manifest,
        csr_yaml("edge-7-a", "edge-7", "    tier: edge\n", ""),
    )
    .await
    .unwrap();
    let (code, out, err) = k.run(&["create", "-f", file]).await;
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("certificatesigningrequest.certificates.k8s.io/edge-7-a created"),
        "{out}"
    );
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let (_, csr) = c.get(&format!("{csrs}/edge-7-a")).await;
    assert_eq!(csr["metadata"]["labels"]["tier"], "edge");
    // A misspelt field is refused, as kube-apiserver refuses it.
    tokio::fs::write(
        &manifest,
        csr_yaml(
            "edge-7-b",
            "edge-7",
            "    tier: edge\n",
            "  expirySeconds: 3600\n",
        ),
    )
    .await
    .unwrap();
    let (code, _, err) = k.run(&["create", "-f", file]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains(r#"strict decoding error: unknown field "spec.expirySeconds""#),
        "{err}"
    );
    assert_eq!(c.get(&format!("{csrs}/edge-7-b")).await.0, 404);

    // apply: created, then its labels changed by a patch; the spec stays
    // as it was asked for (kube's update strategy keeps it).
    let first = csr_yaml("edge-7-c", "edge-7", "    tier: edge\n", "");
    tokio::fs::write(&manifest, &first).await.unwrap();
    let (code, out, err) = k.run(&["apply", "-f", file]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("edge-7-c created"), "{out}");
    assert!(!err.contains("openapi"), "{err}");
    let (_, created) = c.get(&format!("{csrs}/edge-7-c")).await;
    let applied = first.replace("    tier: edge\n", "    tier: core\n");
    tokio::fs::write(&manifest, &applied).await.unwrap();
    let (code, out, err) = k.run(&["apply", "-f", file]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("edge-7-c configured"), "{out}");
    let (_, csr) = c.get(&format!("{csrs}/edge-7-c")).await;
    assert_eq!(csr["metadata"]["labels"]["tier"], "core");
    assert_eq!(csr["spec"], created["spec"]);
    // A misspelt field in a patch is refused too; nothing changes.
    tokio::fs::write(
        &manifest,
        applied.replace("    tier: core\n", "    tier: edge\n    colour: blue\n")
            + "status:\n  conditons: []\n",
    )
    .await
    .unwrap();
    let (code, _, err) = k.run(&["apply", "-f", file]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains(r#"strict decoding error: unknown field "status.conditons""#),
        "{err}"
    );
    let (_, csr) = c.get(&format!("{csrs}/edge-7-c")).await;
    assert_eq!(csr["metadata"]["labels"]["tier"], "core");
    // label patches the object as well; who approved is not for a patch to say.
    k.ok(&["label", "csr", "edge-7-c", "site=a"]).await;
    let patch = json!({"metadata": {"annotations": {
        "certificates.nodekeeper.io/approved-by": "mallory"}}});
    let (code, patched) = c
        .call("PATCH", &format!("{csrs}/edge-7-c"))
        .body("application/merge-patch+json", patch.to_string())
        .send()
        .await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["metadata"]["labels"]["site"], "a");
    assert!(
        patched["metadata"]["annotations"]["certificates.nodekeeper.io/approved-by"].is_null(),
        "{patched}"
    );
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
