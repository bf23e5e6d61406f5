//! TLS bootstrap against the real binary: a new machine joins with a
//! bootstrap token and a CSR, as a v1.33 kubelet does
//! (`pkg/kubelet/certificate/bootstrap/bootstrap.go` `LoadClientCert`,
//! client-go `util/certificate/csr/csr.go`), played by the simulator's
//! [`nodekeeper_sim::bootstrap::load_client_cert`]. The controller serves
//! TLS, takes bootstrap tokens (`--enable-bootstrap-token-auth`) and signs
//! with a cluster CA (`--cluster-signing-cert-file`/`-key-file`).
//!
//! With the same CA as `--client-ca-file`, the issued certificate is the
//! kubelet's credential from then on: with it the machine reports Ready and
//! renews its certificate as itself.
// Set-up writes small files before the controller starts.
#![allow(clippy::disallowed_methods)]

mod common;

use std::time::Duration;

use common::{cli, cli_ok, TestSite};
use nodekeeper_sim::bootstrap::load_client_cert;
use serde_json::{json, Value};
use x509_parser::prelude::{FromDer, X509Certificate};

const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";
const OPERATOR: &str = "operator-secret";

/// A CA (certificate and key PEM) written into `dir` as ca.crt and ca.key.
fn cluster_ca(dir: &std::path::Path) -> (String, String) {
    let key = rcgen::KeyPair::generate().unwrap();
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "site-a kubelet CA");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let cert = params.self_signed(&key).unwrap();
    let (cert_path, key_path) = (dir.join("ca.crt"), dir.join("ca.key"));
    std::fs::write(&cert_path, cert.pem()).unwrap();
    std::fs::write(&key_path, key.serialize_pem()).unwrap();
    (
        cert_path.to_string_lossy().into_owned(),
        key_path.to_string_lossy().into_owned(),
    )
}

fn names(cert: &X509Certificate<'_>) -> (Vec<String>, Vec<String>, Vec<String>) {
    let text = |it: &mut dyn Iterator<Item = &x509_parser::x509::AttributeTypeAndValue<'_>>| {
        it.map(|a| a.as_str().unwrap().to_string())
            .collect::<Vec<_>>()
    };
    (
        text(&mut cert.subject().iter_common_name()),
        text(&mut cert.subject().iter_organization()),
        text(&mut cert.issuer().iter_common_name()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listed_machine_joins_by_bootstrap_token_and_a_stranger_waits_for_an_operator() {
    let site = TestSite::named(&["edge-1", "edge-2"], "127.0.71.1".parse().unwrap()).start();
    let (ca_cert, ca_key) = cluster_ca(site.path());
    let c = site
        .run()
        .tls()
        .tokens(&format!("{OPERATOR}\n"))
        .flags(&[
            "--enable-bootstrap-token-auth",
            "--cluster-signing-cert-file",
            &ca_cert,
            "--cluster-signing-key-file",
            &ca_key,
            "--client-ca-file",
            &ca_cert,
        ])
        .start();
    let client = c.client();
    let db = &site.db;

    // The operator makes a token, as `kubeadm token create` would.
    let token = cli_ok(
        db,
        &[
            "--token",
            OPERATOR,
            "token",
            "create",
            "--description",
            "edge joins",
        ],
    )
    .trim()
    .to_string();
    assert!(
        nodekeeper::server::bootstrap_tokens::parse_token(&token).is_some(),
        "{token}"
    );
    let listed = cli_ok(db, &["--token", OPERATOR, "token", "list"]);
    assert!(
        listed.contains(&token) && listed.contains("edge joins"),
        "{listed}"
    );

    // An unknown token, and an expired one, are 401 (bootstrap.go:99-106, :131).
    let expired = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "bootstrap-token-oldold"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": "oldold", "token-secret": "0123456789abcdef",
                       "usage-bootstrap-authentication": "true",
                       "expiration": "2026-01-01T00:00:00Z"},
    });
    let (code, s) = c
        .call("POST", SECRETS)
        .token(Some(OPERATOR))
        .json(&expired)
        .send()
        .await;
    assert_eq!(code, 201, "{s}");
    for bad in ["oldold.0123456789abcdef", "zzzzzz.0123456789abcdef"] {
        let (code, _) = c.call("GET", CSRS).token(Some(bad)).send().await;
        assert_eq!(code, 401, "{bad}");
    }
    // A bootstrapper may not manage tokens; only kube-system's are kept.
    let (code, _) = c.call("GET", SECRETS).token(Some(&token)).send().await;
    assert_eq!(code, 403);
    let (code, s) = c
        .call("GET", "/api/v1/namespaces/default/secrets")
        .token(Some(OPERATOR))
        .send()
        .await;
    assert_eq!(code, 403, "{s}");
    assert!(
        s["message"].as_str().unwrap().contains("kube-system"),
        "{s}"
    );

    // edge-1 is listed by the static source: its CSR is approved and signed.
    let joined = load_client_cert(
        &client,
        &c.url,
        Some(&token),
        "edge-1",
        Duration::from_secs(30),
        |_| {},
    )
    .await
    .unwrap_or_else(|e| panic!("{e}: {}", c.log_text()));
    let der = pem_der(&joined.cert_pem);
    let (_, issued) = X509Certificate::from_der(&der).unwrap();
    let (cn, o, issuer) = names(&issued);
    assert_eq!(cn, ["system:node:edge-1"]);
    assert_eq!(o, ["system:nodes"]);
    assert_eq!(issuer, ["site-a kubelet CA"]);
    let validity = issued.validity();
    let seconds = validity.not_after.timestamp() - validity.not_before.timestamp();
    // --cluster-signing-duration's 8760h, from 5 minutes back.
    assert_eq!(seconds, 8760 * 3600 + 300);
    let eku = issued.extended_key_usage().unwrap().unwrap().value;
    assert!(eku.client_auth && !eku.server_auth);

    // The CSR says who asked and how it was approved (sarapprove.go).
    let (code, csr) = c
        .call("GET", &format!("{CSRS}/{}", joined.csr_name))
        .token(Some(OPERATOR))
        .send()
        .await;
    assert_eq!(code, 200, "{csr}");
    let id = &token[..6];
    assert_eq!(csr["spec"]["username"], format!("system:bootstrap:{id}"));
    assert_eq!(csr["status"]["conditions"][0]["type"], "Approved");
    assert_eq!(csr["status"]["conditions"][0]["reason"], "AutoApproved");
    assert_eq!(
        csr["status"]["conditions"][0]["message"],
        "Auto approving kubelet client certificate after SubjectAccessReview."
    );
    // And edge-1's history has the certificate. Its entry follows the
    // certificate's durable write (`src/server/csr_signing.rs`: durable first,
    // so the history never names a certificate that could not be got).
    common::eventually("edge-1's CertificateIssued entry", || async {
        let (_, h) = c
            .call("GET", "/v1/history?node=edge-1")
            .token(Some(OPERATOR))
            .send()
            .await;
        h.as_array()
            .is_some_and(|a| a.iter().any(|e| e["kind"] == "CertificateIssued"))
    })
    .await;
    let serial: String = issued
        .raw_serial()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let described = cli_ok(db, &["--token", OPERATOR, "describe", "edge-1"]);
    assert!(
        described.contains("CertificateIssued") && described.contains(&serial),
        "{described}"
    );
    let history = cli_ok(
        db,
        &["--token", OPERATOR, "history", "edge-1", "-o", "json"],
    );
    let events: Value = serde_json::from_str(&history).unwrap();
    let issued_event = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "CertificateIssued")
        .unwrap_or_else(|| panic!("{history}"));
    assert_eq!(issued_event["csr"], joined.csr_name.as_str());
    assert_eq!(issued_event["serial"], serial.as_str());
    assert_eq!(
        issued_event["requestedBy"],
        format!("system:bootstrap:{id}")
    );

    // A name no source lists stays Pending until an operator approves it,
    // as `kubectl certificate approve` does (the same PUT of /approval).
    let (named_tx, named_rx) = tokio::sync::oneshot::channel::<String>();
    let stranger = tokio::spawn({
        let (client, url, token) = (client.clone(), c.url.clone(), token.clone());
        async move {
            load_client_cert(
                &client,
                &url,
                Some(&token),
                "stranger",
                Duration::from_secs(60),
                |n| {
                    let _ = named_tx.send(n.to_string());
                },
            )
            .await
        }
    });
    let name = named_rx.await.unwrap();
    let path = format!("{CSRS}/{name}");
    // No source lists it: no condition, Pending.
    let (_, pending) = c.call("GET", &path).token(Some(OPERATOR)).send().await;
    assert!(pending["status"]["conditions"].is_null(), "{pending}");
    // A bootstrapper may not approve it.
    let mut approval = pending.clone();
    approval["status"]["conditions"] = json!([{
        "type": "Approved", "status": "True", "reason": "KubectlApprove",
        "message": "This CSR was approved by kubectl certificate approve.",
    }]);
    let (code, _) = c
        .call("PUT", &format!("{path}/approval"))
        .token(Some(&token))
        .json(&approval)
        .send()
        .await;
    assert_eq!(code, 403);
    let (code, approved) = c
        .call("PUT", &format!("{path}/approval"))
        .token(Some(OPERATOR))
        .json(&approval)
        .send()
        .await;
    assert_eq!(code, 200, "{approved}");
    let joined = stranger.await.unwrap().unwrap();
    let der = pem_der(&joined.cert_pem);
    let (_, issued) = X509Certificate::from_der(&der).unwrap();
    assert_eq!(names(&issued).0, ["system:node:stranger"]);
    let history = cli_ok(db, &["--token", OPERATOR, "history", "stranger"]);
    assert!(
        history.contains("CertificateIssued") && history.contains("KubectlApprove"),
        "{history}"
    );

    // Deleting the token ends it: 401 from then on.
    cli_ok(db, &["--token", OPERATOR, "token", "delete", &token]);
    let (code, _) = c.call("GET", CSRS).token(Some(&token)).send().await;
    assert_eq!(code, 401);
    // The CSR list as kubectl asks for it: a Table with the condition.
    let (_, table) = c
        .call("GET", CSRS)
        .token(Some(OPERATOR))
        .header(
            "accept",
            "application/json;as=Table;v=v1;g=meta.k8s.io,application/json",
        )
        .send()
        .await;
    let conditions: Vec<&str> = table["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cells"][5].as_str().unwrap())
        .collect();
    assert_eq!(
        conditions,
        ["Approved,Issued", "Approved,Issued"],
        "{table}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signing_flags_are_checked_at_start() {
    let site = TestSite::named(&["edge-1"], "127.0.71.9".parse().unwrap()).start();
    let dir = site.path();
    let (ca_cert, _) = cluster_ca(dir);
    let other = dir.join("other");
    std::fs::create_dir(&other).unwrap();
    let (_, other_key) = cluster_ca(&other);
    let run = |extra: &[&str]| {
        let mut args = vec!["run"];
        let base = site.args();
        args.extend(base.iter().map(String::as_str));
        args.extend(extra);
        cli(&site.db, &args)
    };
    let (code, _, err) = run(&["--cluster-signing-cert-file", &ca_cert]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--cluster-signing-key-file"), "{err}");
    let (code, _, err) = run(&[
        "--cluster-signing-cert-file",
        &ca_cert,
        "--cluster-signing-key-file",
        &other_key,
    ]);
    assert_ne!(code, 0, "{err}");
    assert!(err.contains("the key is not the certificate's"), "{err}");
    let (code, _, err) = run(&["--enable-bootstrap-token-auth"]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("needs --token-file"), "{err}");
}

/// A CSR named `name` for node `node`'s client certificate, as a kubelet
/// sends it (client-go `util/certificate/csr/csr.go` `RequestCertificate`).
fn kubelet_csr(name: &str, node: &str) -> Value {
    let pem = common::node_csr_pem(node);
    json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            // base64 in JSON, as Go's []byte.
            "request": k8s_openapi::ByteString(pem.into_bytes()),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            "usages": ["digital signature", "client auth"],
        },
    })
}

/// A watch's events, line by line, read as the operator.
struct CsrWatch(reqwest::Response, Vec<u8>);

impl CsrWatch {
    async fn open(c: &common::Controller, query: &str) -> (u16, CsrWatch) {
        let response = reqwest::Client::builder()
            .no_proxy()
            .build()
            .unwrap()
            .get(format!("{}{CSRS}?watch=true&{query}", c.url))
            .bearer_auth(OPERATOR)
            .send()
            .await
            .unwrap();
        (response.status().as_u16(), CsrWatch(response, Vec::new()))
    }

    async fn next(&mut self) -> Value {
        loop {
            if let Some(i) = self.1.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = self.1.drain(..=i).collect();
                return serde_json::from_slice(&line).unwrap();
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.0.chunk())
                .await
                .expect("a watch event in time")
                .unwrap()
                .expect("the watch ended before the event");
            self.1.extend_from_slice(&chunk);
        }
    }
}

/// Deleted CSRs reach watches as kube-apiserver's watch sends them
/// (`staging/src/k8s.io/apiserver/pkg/storage/cacher`: a `DELETED` event
/// with the object as it was, at the version of the deletion), also when
/// the deletion came between the client's list and its watch; a version
/// whose deletions are no longer known is `410 Expired`, and client-go's
/// reflector relists (`tools/cache/reflector.go` `isExpiredError`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn csr_watches_see_deletions_made_before_and_while_they_run() {
    let site = TestSite::named(&["edge-1"], "127.0.71.17".parse().unwrap()).start();
    let tokens = site.path().join("tokens");
    std::fs::write(&tokens, format!("{OPERATOR}\n")).unwrap();
    let args = ["--token-file", tokens.to_str().unwrap()];
    let c = site.controller_with(&args);
    for (name, node) in [
        ("csr-a", "edge-a"),
        ("csr-b", "edge-b"),
        ("csr-c", "edge-c"),
    ] {
        let body = kubelet_csr(name, node);
        let (code, s) = c
            .call("POST", CSRS)
            .token(Some(OPERATOR))
            .json(&body)
            .send()
            .await;
        assert_eq!(code, 201, "{s}");
    }
    let (code, list) = c.call("GET", CSRS).token(Some(OPERATOR)).send().await;
    assert_eq!(code, 200, "{list}");
    let listed: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // Deleted after the list, before the watch: DELETED all the same.
    let (code, s) = c
        .call("DELETE", &format!("{CSRS}/csr-a"))
        .token(Some(OPERATOR))
        .send()
        .await;
    assert_eq!(code, 200, "{s}");
    let (code, mut watch) = CsrWatch::open(&c, &format!("resourceVersion={listed}")).await;
    assert_eq!(code, 200);
    let event = watch.next().await;
    assert_eq!(event["type"], "DELETED", "{event}");
    assert_eq!(event["object"]["metadata"]["name"], "csr-a");
    let deleted_at: u64 = event["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(deleted_at > listed, "{event}");
    // A watch by name (the kubelet's `WaitForCertificate`) sees only its own.
    // Its options are read as kube-apiserver reads a ListOptions
    // (`runtime.Convert_Slice_string_To_bool`): `allowWatchBookmarks=maybe`
    // allows them, it is not refused.
    let (code, mut by_name) = CsrWatch::open(
        &c,
        &format!(
            "resourceVersion={listed}&fieldSelector=metadata.name%3Dcsr-b&allowWatchBookmarks=maybe"
        ),
    )
    .await;
    assert_eq!(code, 200);

    // Deleted while watched: at the deletion's version, after every earlier one.
    let (code, s) = c
        .call("DELETE", &format!("{CSRS}/csr-b"))
        .token(Some(OPERATOR))
        .send()
        .await;
    assert_eq!(code, 200, "{s}");
    for w in [&mut watch, &mut by_name] {
        let event = w.next().await;
        assert_eq!(event["type"], "DELETED", "{event}");
        assert_eq!(event["object"]["metadata"]["name"], "csr-b");
        let at: u64 = event["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(at > deleted_at, "{event}");
    }
    // And from the version of the first deletion on, only the second one.
    let (_, mut later) = CsrWatch::open(&c, &format!("resourceVersion={deleted_at}")).await;
    let event = later.next().await;
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("DELETED"), Some("csr-b")),
        "{event}"
    );
    drop((watch, by_name, later));

    // After a restart the deletions before it are not known: 410, relist.
    drop(c);
    let c = site.controller_with(&args);
    let (code, _) = CsrWatch::open(&c, &format!("resourceVersion={listed}")).await;
    assert_eq!(code, 410);
    let (_, list) = c.call("GET", CSRS).token(Some(OPERATOR)).send().await;
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["csr-c"]);
    let rv = list["metadata"]["resourceVersion"].as_str().unwrap();
    let (code, mut watch) = CsrWatch::open(&c, &format!("resourceVersion={rv}")).await;
    assert_eq!(code, 200);
    let (code, _) = c
        .call("DELETE", &format!("{CSRS}/csr-c"))
        .token(Some(OPERATOR))
        .send()
        .await;
    assert_eq!(code, 200);
    let event = watch.next().await;
    assert_eq!(
        (
            event["type"].as_str(),
            event["object"]["metadata"]["name"].as_str()
        ),
        (Some("DELETED"), Some("csr-c")),
        "{event}"
    );
}

fn pem_der(pem: &str) -> Vec<u8> {
    let (_, block) = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap();
    block.contents
}
