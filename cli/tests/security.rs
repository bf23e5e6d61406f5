//! The API's defences: TLS serving, bearer tokens for writes, the listen policy and body caps.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::Router;
use common::*;
use nodekeeper::server::{check_may_write_node, harden, serve_with, Caller, ServeConfig, Tokens};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_tls_the_api_and_the_cli_work_and_plain_clients_do_not() {
    // TLS and tokens together may listen beyond loopback without --insecure-listen.
    let site = TestSite::builder(1, Ipv4Addr::new(127, 90, 0, 1))
        .flag("--listen", "0.0.0.0:0")
        .start()
        .await;
    let (dir, db) = (site.path(), &site.db);
    let c = site.run().tls().tokens("operator-secret\n").start();
    let cert = dir.join("tls.crt");
    assert!(c.url.starts_with("https://127.0.0.1:"), "{}", c.url);
    let discovery: Value = json(&std::fs::read_to_string(db.join("controller.json")).unwrap());
    assert_eq!(
        discovery["caFile"].as_str(),
        Some(std::path::absolute(&cert).unwrap().to_str().unwrap())
    );

    let trusting = c.client();
    let health = trusting
        .get(format!("{}/healthz", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200);
    assert_eq!(health.text().await.unwrap(), "ok");
    // Not trusted by a client that does not know the certificate, nor spoken in plain HTTP.
    let elsewhere = dir.join("other");
    std::fs::create_dir(&elsewhere).unwrap();
    let other = self_signed_cert(&elsewhere, &["127.0.0.1"]).2;
    assert!(client_trusting(other.as_bytes())
        .get(format!("{}/healthz", c.url))
        .send()
        .await
        .is_err());
    let plain = c.url.replace("https://", "http://");
    assert!(client()
        .get(format!("{plain}/healthz"))
        .send()
        .await
        .map(|r| r.status() != 200)
        .unwrap_or(true));

    // The CLI finds the controller through its discovery file and trusts its certificate.
    let node = site.name(0);
    let started = Instant::now();
    loop {
        let (code, out, err) = cli(db, &["--token", "operator-secret", "nodes"]);
        if code == 0 && out.contains(&node) {
            break;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "`nodes` never listed {node} over https: {code} {out} {err}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(c.stop().code(), Some(0));
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_reads_need_a_token() {
    let site = TestSite::start(1, Ipv4Addr::new(127, 90, 1, 1)).await;
    let c = site
        .run()
        .tokens(
            "# operator\noperator-secret\nnode-secret,system:node:edge-1,uid-1,\"system:nodes\"\n",
        )
        .start();
    let http = client();
    let nodes = format!("{}/api/v1/nodes", c.url);

    for request in [http.post(&nodes), http.delete(format!("{nodes}/edge-1"))] {
        let refused = request.body("{}").send().await.unwrap();
        assert_eq!(refused.status(), 401);
        assert_eq!(
            refused.json::<Value>().await.unwrap(),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Unauthorized", "reason": "Unauthorized", "code": 401})
        );
    }
    let wrong = http
        .post(&nodes)
        .bearer_auth("operator-secreT")
        .send()
        .await
        .unwrap();
    assert_eq!(wrong.status(), 401);
    // A valid token passes authentication; no write routes exist yet.
    for token in ["operator-secret", "node-secret"] {
        let passed = http.post(&nodes).bearer_auth(token).send().await.unwrap();
        assert_ne!(passed.status(), 401, "{token}");
    }

    // Reads need a token too (as kube-apiserver without anonymous auth),
    // and a bad one is refused.
    let anonymous_read = http.get(&nodes).send().await.unwrap();
    assert_eq!(anonymous_read.status(), 401);
    let bad_read = http.get(&nodes).bearer_auth("nope").send().await.unwrap();
    assert_eq!(bad_read.status(), 401);
    let good_read = http
        .get(&nodes)
        .bearer_auth("operator-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(good_read.status(), 200);
    // The CLI reads with one.
    assert!(cli(&site.db, &["--token", "operator-secret", "nodes"]).0 == 0);
    c.stop();
    site.stop().await;
}

#[test]
fn bad_serving_flags_are_usage_errors_and_nothing_starts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let base = ["run", "--kubelet-scheme", "http"];
    let run = |extra: &[&str]| {
        let args: Vec<&str> = base.iter().chain(extra).copied().collect();
        cli(&db, &args)
    };

    let (code, _, err) = run(&["--listen", "0.0.0.0:0"]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("not a loopback address")
            && err.contains("--tls-cert-file")
            && err.contains("--token-file")
            && err.contains("--insecure-listen"),
        "{err}"
    );
    let tokens = dir.path().join("tokens");
    std::fs::write(&tokens, "secret\n").unwrap();
    let tokens = tokens.to_str().unwrap();
    let (code, _, err) = run(&["--listen", "0.0.0.0:0", "--token-file", tokens]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("without TLS") && !err.contains("give --token-file"),
        "{err}"
    );

    let bad_tokens = dir.path().join("bad-tokens");
    std::fs::write(&bad_tokens, "# ok\nsecret\nother,Bad_Node\n").unwrap();
    let (code, _, err) = run(&["--token-file", bad_tokens.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("bad-tokens, line 3"), "{err}");

    let (cert, key, _) = self_signed_cert(dir.path(), &["127.0.0.1"]);
    let (code, _, err) = run(&["--tls-cert-file", &cert]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--tls-private-key-file"), "{err}");
    let (code, _, err) = run(&["--tls-cert-file", &key, "--tls-private-key-file", &key]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--tls-cert-file") && err.contains("tls.key"),
        "{err}"
    );
    assert!(!db.exists(), "a refused start must not create the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_listen_serves_beyond_loopback_anyway() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let c = Controller::start(
        &db,
        &strings(&[
            "--kubelet-scheme",
            "http",
            "--listen",
            "0.0.0.0:0",
            "--insecure-listen",
        ]),
    );
    // The discovery file names an address a local client can reach.
    assert!(c.url.starts_with("http://127.0.0.1:"), "{}", c.url);
    assert_eq!(c.text("/healthz").await, "ok");
    assert!(c.log_text().contains("--insecure-listen"));
    assert_eq!(c.stop().code(), Some(0));
}

/// A write route as handlers will write them: the caller from the auth
/// layer, then the node check (the guard's table has refused another
/// node's write before it).
async fn update_node(caller: Caller, Path(name): Path<String>, body: Bytes) -> Response {
    if let Err(refused) = check_may_write_node(&caller, &name) {
        return refused;
    }
    format!("{caller:?} wrote {name} ({} bytes)", body.len()).into_response()
}

async fn whoami(caller: Caller) -> String {
    format!("{caller:?}")
}

/// Serves `harden(routes)` on loopback; the base URL and the stop switch.
async fn serve_test_routes(tokens: Option<Arc<Tokens>>) -> (String, CancellationToken) {
    let routes = Router::new()
        .route("/api/v1/nodes/{name}", put(update_node))
        .route("/api/v1/nodes", get(whoami));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let shutdown = CancellationToken::new();
    tokio::spawn(serve_with(
        listener,
        harden(routes, tokens),
        None,
        ServeConfig::default(),
        shutdown.clone(),
    ));
    (url, shutdown)
}

#[tokio::test]
async fn the_auth_layer_names_the_caller_and_nodes_change_only_themselves() {
    let tokens = Tokens::parse("operator-secret\nedge-1-secret,edge-1\n", "tokens.csv").unwrap();
    let (url, shutdown) = serve_test_routes(Some(Arc::new(tokens))).await;
    let http = client();
    let put = |node: &str, token: Option<&str>| {
        let request = http.put(format!("{url}/api/v1/nodes/{node}")).body("{}");
        match token {
            Some(t) => request.bearer_auth(t),
            None => request,
        }
    };
    let answer = |request: reqwest::RequestBuilder| async move {
        let response = request.send().await.unwrap();
        (response.status().as_u16(), response.text().await.unwrap())
    };

    let (code, body) = answer(put("edge-1", None)).await;
    assert_eq!(code, 401);
    assert_eq!(json(&body)["reason"], "Unauthorized");
    let basic = put("edge-1", None).header("authorization", "Basic b3A6c2VjcmV0");
    assert_eq!(answer(basic).await.0, 401);
    // Auth comes before routing: a write to nowhere is refused as well.
    assert_eq!(answer(http.post(format!("{url}/nowhere"))).await.0, 401);

    assert_eq!(
        answer(put("edge-2", Some("operator-secret"))).await,
        (200, "Operator wrote edge-2 (2 bytes)".into())
    );
    assert_eq!(
        answer(put("edge-1", Some("edge-1-secret"))).await,
        (200, "Node(\"edge-1\") wrote edge-1 (2 bytes)".into())
    );
    let (code, body) = answer(put("edge-2", Some("edge-1-secret"))).await;
    assert_eq!(code, 403);
    assert_eq!(
        json(&body),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "nodes \"edge-2\" is forbidden: node \"edge-1\" is not allowed to modify node \"edge-2\"",
               "reason": "Forbidden", "details": {"name": "edge-2", "kind": "nodes"}, "code": 403})
    );

    // Reads need a token too; with one, the token's caller.
    let whoami = format!("{url}/api/v1/nodes");
    assert_eq!(answer(http.get(&whoami)).await.0, 401);
    assert_eq!(
        answer(http.get(&whoami).bearer_auth("edge-1-secret")).await,
        (200, "Node(\"edge-1\")".into())
    );
    assert_eq!(answer(http.get(&whoami).bearer_auth("nope")).await.0, 401);

    // A body over the cap is refused with a Status, not axum's plain text.
    let big = vec![b'x'; nodekeeper::server::BODY_LIMIT + 1];
    let (code, body) = answer(put("edge-1", Some("operator-secret")).body(big)).await;
    assert_eq!(code, 413);
    let status = json(&body);
    assert_eq!(status["kind"], "Status");
    assert_eq!(status["reason"], "RequestEntityTooLarge");
    assert_eq!(status["code"], 413);
    shutdown.cancel();
}

#[tokio::test]
async fn without_tokens_every_caller_is_anonymous_and_may_write() {
    let (url, shutdown) = serve_test_routes(None).await;
    let response = client()
        .put(format!("{url}/api/v1/nodes/edge-9"))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.text().await.unwrap(),
        "Anonymous wrote edge-9 (2 bytes)"
    );
    shutdown.cancel();
}
