//! Kubelets that authenticate by their client certificates, as a real
//! kubelet's kubeconfig does (`client-certificate-data`), against the real
//! binary with TLS and `--client-ca-file`: the Subject CN is the user and its
//! O values the groups (kubernetes/kubernetes
//! staging/src/k8s.io/apiserver/pkg/authentication/request/x509/x509.go:228-238,
//! `CommonNameUserConversion`), and a node may write only its own objects
//! (plugin/pkg/admission/noderestriction/admission.go `admitNode`,
//! `admitLease`, `admitCSINode`: their messages are the 403s' here).
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;

use common::{Ca, TestSite, DEADLINE};
use nodekeeper_sim::push::ClientCerts;
use serde_json::{json, Value};

/// An HTTPS client trusting `server_pem`, with the client certificate
/// `identity` (certificate and key PEM), if any.
fn https(server_pem: &str, identity: Option<&str>) -> reqwest::Client {
    nodekeeper::install_crypto_provider();
    let mut builder = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(10))
        .tls_certs_only(reqwest::Certificate::from_pem_bundle(server_pem.as_bytes()).unwrap());
    if let Some(pem) = identity {
        builder = builder.identity(reqwest::Identity::from_pem(pem.as_bytes()).unwrap());
    }
    builder.build().unwrap()
}

/// `method path` with `body` (JSON): the status and the answer.
async fn send(
    client: &reqwest::Client,
    url: &str,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let method = reqwest::Method::from_bytes(method.as_bytes()).unwrap();
    let mut request = client.request(method.clone(), format!("{url}{path}"));
    if let Some(body) = body {
        let content_type = if method == reqwest::Method::PATCH {
            "application/merge-patch+json"
        } else {
            "application/json"
        };
        request = request
            .header("content-type", content_type)
            .body(body.to_string());
    }
    let response = request.send().await.expect("the controller answers");
    let code = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelets_authenticate_by_their_certificates_and_write_only_their_own_objects() {
    let site = TestSite::builder(2, Ipv4Addr::new(127, 171, 0, 1))
        .push_mode()
        .listing_first(0)
        .start()
        .await;
    let ca = Arc::new(Ca::new());
    let c = site
        .run()
        .tls()
        .client_ca(&ca.pem)
        .flags(&["--allow-node-registration"])
        .start();
    let server_pem = c.server_pem.clone().unwrap();
    let (a, b) = (site.fleet.name(0), site.fleet.name(1));

    // Each kubelet its own certificate, CN=system:node:NAME, O=system:nodes.
    let issuer = ca.clone();
    site.fleet.push_to(&c, |p| {
        p.register = true;
        p.client_certs = Some(ClientCerts(Arc::new(move |name: &str| {
            Ok(issuer
                .issue(&format!("system:node:{name}"), "system:nodes")
                .1)
        })));
    });
    let (admin_pem, _) = ca.issue("admin", "site-operators");
    let admin = https(&server_pem, Some(&admin_pem));
    // Both register, renew their Leases and reach Ready.
    let started = std::time::Instant::now();
    loop {
        let mut ready = 0;
        for name in [&a, &b] {
            let (code, node) = send(
                &admin,
                &c.url,
                "GET",
                &format!("/api/v1/nodes/{name}"),
                None,
            )
            .await;
            let is_ready = node["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|cond| cond["type"] == "Ready" && cond["status"] == "True");
            if code == 200 && is_ready {
                ready += 1;
            }
        }
        let stats = site.fleet.push_stats();
        if ready == 2 && stats.registrations >= 2 && stats.leases >= 4 && stats.csinodes >= 2 {
            // Nothing refused (a kubelet's Lease waits for its node).
            assert_eq!(
                (stats.refused, stats.last_error.as_deref()),
                (0, None),
                "{stats:?}"
            );
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the kubelets never all became Ready: {stats:?}\n{}",
            c.log_text()
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let (code, history) = send(
        &admin,
        &c.url,
        "GET",
        &format!("/v1/history?node={a}"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{history}");
    assert_eq!(history[0]["kind"], "Registered", "{history}");

    // a's certificate may not write b's Node, Lease or CSINode: NodeRestriction's words.
    let (a_pem, _) = ca.issue(&format!("system:node:{a}"), "system:nodes");
    let node_a = https(&server_pem, Some(&a_pem));
    let status_patch = json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}});
    let (code, s) = send(
        &node_a,
        &c.url,
        "PATCH",
        &format!("/api/v1/nodes/{b}/status"),
        Some(status_patch),
    )
    .await;
    assert_eq!(code, 403, "{s}");
    assert_eq!(
        s["message"],
        format!("nodes \"{b}\" is forbidden: node \"{a}\" is not allowed to modify node \"{b}\"")
    );
    let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": b, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": b, "leaseDurationSeconds": 40}});
    let (code, s) = send(
        &node_a,
        &c.url,
        "PUT",
        &format!("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{b}"),
        Some(lease),
    )
    .await;
    assert_eq!(code, 403, "{s}");
    assert_eq!(
        s["message"],
        format!("leases.coordination.k8s.io \"{b}\" is forbidden: can only access node lease with the same name as the requesting node")
    );
    let csinode = json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
        "metadata": {"name": b}, "spec": {"drivers": []}});
    let (code, s) = send(
        &node_a,
        &c.url,
        "POST",
        "/apis/storage.k8s.io/v1/csinodes",
        Some(csinode),
    )
    .await;
    assert_eq!(code, 403, "{s}");
    assert_eq!(
        s["message"],
        format!("csinodes.storage.k8s.io \"{b}\" is forbidden: can only access CSINode with the same name as the requesting node")
    );
    // What no rule grants a node: the authorizer's words, and why.
    let (code, s) = send(
        &node_a,
        &c.url,
        "DELETE",
        &format!("/api/v1/nodes/{a}"),
        None,
    )
    .await;
    assert_eq!(code, 403, "{s}");
    assert!(
        s["message"].as_str().unwrap().contains(&format!(
            "User \"system:node:{a}\" cannot delete resource \"nodes\" in API group \"\" at the cluster scope: a node may"
        )),
        "{s}"
    );
    // Its own objects it reads and writes.
    let (code, s) = send(
        &node_a,
        &c.url,
        "GET",
        &format!("/apis/storage.k8s.io/v1/csinodes/{a}"),
        None,
    )
    .await;
    assert_eq!(code, 200, "{s}");

    // A certificate from another CA authenticates nobody, and neither does
    // no certificate: 401, as anonymous requests are not allowed.
    let (stranger_pem, _) = Ca::new().issue(&format!("system:node:{a}"), "system:nodes");
    let stranger = https(&server_pem, Some(&stranger_pem));
    let (code, s) = send(&stranger, &c.url, "GET", "/api/v1/nodes", None).await;
    assert_eq!((code, &s["reason"]), (401, &json!("Unauthorized")), "{s}");
    let anonymous = https(&server_pem, None);
    let (code, _) = send(&anonymous, &c.url, "GET", "/api/v1/nodes", None).await;
    assert_eq!(code, 401);
    let (code, _) = send(&anonymous, &c.url, "GET", "/healthz", None).await;
    assert_eq!(code, 200, "health checks need no credentials");

    assert!(c.stop().success());
    site.stop().await;
}

#[test]
fn a_client_ca_without_tls_is_refused_saying_what_to_add() {
    let site = TestSite::named(&["edge-1"], Ipv4Addr::new(127, 171, 1, 1)).start();
    let ca = site.path().join("ca.pem");
    std::fs::write(&ca, Ca::new().pem).unwrap();
    let mut args = site.args();
    args.extend([
        "--client-ca-file".to_string(),
        ca.to_string_lossy().into_owned(),
    ]);
    let out = std::process::Command::new(common::BIN)
        .arg("--db")
        .arg(&site.db)
        .arg("run")
        .args(&args)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--client-ca-file")
            && err.contains("--tls-cert-file and --tls-private-key-file"),
        "{err}"
    );
}
