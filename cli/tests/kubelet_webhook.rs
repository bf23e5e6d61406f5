//! TokenReviews and SubjectAccessReviews as a kubelet with webhook
//! authentication and authorization (kubeadm's default) posts them to its
//! API server for each request to its own port, against the real binary.
//!
//! The kubelet builds its webhook clients on its main client
//! (`cmd/kubelet/app/server.go` `BuildAuth(nodeName, kubeDeps.KubeClient, …)`),
//! so the bodies are protobuf (docs/kubelet-api.md section 1), shaped as
//! k8s.io/apiserver writes them: a TokenReview with the caller's token and
//! the audiences of the request, none for the kubelet
//! (`plugin/pkg/authenticator/token/webhook/webhook.go:112-117`); a
//! SubjectAccessReview with the user, its groups and the kubelet's
//! attributes (`plugin/pkg/authorizer/webhook/webhook.go:187-204`):
//! `nodes`, subresource `proxy`, `stats`, `metrics`, `log`…, named as the
//! kubelet's node (kubernetes `pkg/kubelet/server/auth.go`
//! `GetRequestAttributes`). Who may post them follows kube's bootstrap
//! policy (`plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go`
//! `NodeRules`: nodes may create tokenreviews and subjectaccessreviews).

mod common;

use common::{client, Controller, TestSite};
use nodekeeper_sim::protobuf::{encode, PROTOBUF};
use serde_json::{json, Value};

const TOKEN_REVIEWS: &str = "/apis/authentication.k8s.io/v1/tokenreviews";
const REVIEWS: &str = "/apis/authorization.k8s.io/v1/subjectaccessreviews";
const OPERATOR: &str = "alice-secret";
const EDGE_1: &str = "edge-1-secret";

/// A review posted as `token`'s holder (none: without credentials), in
/// protobuf as a kubelet sends it, or as JSON.
async fn post(
    c: &Controller,
    path: &str,
    token: Option<&str>,
    body: &Value,
    protobuf: bool,
) -> (u16, Value) {
    let (content_type, bytes) = match protobuf {
        true => (PROTOBUF, encode(body)),
        false => ("application/json", body.to_string().into_bytes()),
    };
    let mut request = client()
        .post(format!("{}{path}", c.url))
        .header(
            "accept",
            "application/vnd.kubernetes.protobuf,application/json",
        )
        .header("content-type", content_type)
        .body(bytes);
    if let Some(token) = token {
        request = request.bearer_auth(token);
    }
    let response = request.send().await.unwrap();
    let code = response.status().as_u16();
    let text = response.text().await.unwrap();
    (
        code,
        serde_json::from_str(&text).unwrap_or(Value::String(text)),
    )
}

fn token_review(token: &str) -> Value {
    json!({
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
        "metadata": {},
        "spec": {"token": token},
    })
}

/// The review a kubelet named `node` asks for `user` in `groups` making
/// `verb` on its `subresource`.
fn access_review(user: &str, groups: &[&str], verb: &str, subresource: &str, node: &str) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "metadata": {},
        "spec": {
            "user": user, "groups": groups,
            "resourceAttributes": {
                "verb": verb, "version": "v1", "resource": "nodes",
                "subresource": subresource, "name": node,
            },
        },
    })
}

fn path_review(user: &str, groups: &[&str], verb: &str, path: &str) -> Value {
    json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "metadata": {},
        "spec": {"user": user, "groups": groups, "nonResourceAttributes": {"path": path, "verb": verb}},
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_asks_who_calls_it_and_what_they_may_do() {
    let site = TestSite::named(&["edge-1", "edge-2"], "127.0.72.1".parse().unwrap()).start();
    let tokens = site.path().join("tokens.csv");
    tokio::fs::write(
        &tokens,
        format!(
            "{OPERATOR},alice,uid-0,admins\n\
             {EDGE_1},system:node:edge-1,uid-1,system:nodes\n\
             edge-2-secret,system:node:edge-2,uid-2,system:nodes\n"
        ),
    )
    .await
    .unwrap();
    let c = site.controller_with(&[
        "--token-file",
        tokens.to_str().unwrap(),
        "--enable-bootstrap-token-auth",
    ]);
    let bootstrap = "abcdef.0123456789abcdef";
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "bootstrap-token-abcdef"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {"token-id": "abcdef", "token-secret": "0123456789abcdef",
                       "usage-bootstrap-authentication": "true"},
    });
    let (code, s) = post(
        &c,
        "/api/v1/namespaces/kube-system/secrets",
        Some(OPERATOR),
        &secret,
        false,
    )
    .await;
    assert_eq!(code, 201, "{s}");

    // Who calls: the tokens nodekeeper itself takes, with their groups.
    let (code, review) = post(
        &c,
        TOKEN_REVIEWS,
        Some(EDGE_1),
        &token_review(OPERATOR),
        true,
    )
    .await;
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["kind"], "TokenReview");
    assert_eq!(review["status"]["authenticated"], true, "{review}");
    assert_eq!(review["status"]["user"]["username"], "alice");
    assert_eq!(
        review["status"]["user"]["groups"],
        json!(["admins", "system:authenticated"])
    );
    let (_, review) = post(
        &c,
        TOKEN_REVIEWS,
        Some(EDGE_1),
        &token_review("edge-2-secret"),
        true,
    )
    .await;
    assert_eq!(review["status"]["user"]["username"], "system:node:edge-2");
    let (_, review) = post(
        &c,
        TOKEN_REVIEWS,
        Some(EDGE_1),
        &token_review(bootstrap),
        true,
    )
    .await;
    assert_eq!(
        review["status"]["user"]["username"], "system:bootstrap:abcdef",
        "{review}"
    );
    assert!(
        review["status"]["user"]["groups"]
            .as_array()
            .unwrap()
            .contains(&json!("system:bootstrappers")),
        "{review}"
    );
    // An unknown token: not authenticated, no error (the kubelet answers 401).
    let (code, review) = post(&c, TOKEN_REVIEWS, Some(EDGE_1), &token_review("nope"), true).await;
    assert_eq!(code, 201, "{review}");
    assert_eq!(review["status"], json!({"user": {}}), "{review}");
    // Audiences: nodekeeper's tokens are bound to none.
    let mut with_audiences = token_review(OPERATOR);
    with_audiences["spec"]["audiences"] = json!(["https://kubernetes.default.svc"]);
    let (_, review) = post(&c, TOKEN_REVIEWS, Some(EDGE_1), &with_audiences, true).await;
    assert_eq!(review["status"]["authenticated"], Value::Null, "{review}");
    assert!(review["status"]["error"]
        .as_str()
        .unwrap()
        .contains("audiences"));
    // No token: kube-apiserver's 400.
    let (code, s) = post(&c, TOKEN_REVIEWS, Some(OPERATOR), &token_review(""), false).await;
    assert_eq!(code, 400, "{s}");
    assert_eq!(
        s["message"],
        "token is required for TokenReview in authentication"
    );

    // What they may do on edge-1's port: as on nodekeeper's own API.
    let allowed = |v: &Value| v["status"]["allowed"].as_bool().unwrap();
    let nodes = &["system:nodes"];
    let cases = [
        (
            access_review("alice", &["admins"], "get", "proxy", "edge-1"),
            true,
        ),
        (
            access_review("alice", &[], "create", "proxy", "edge-1"),
            true,
        ),
        (
            access_review("system:node:edge-1", nodes, "get", "", "edge-1"),
            true,
        ),
        // Another kubelet's port is no node's business (kube's node
        // authorizer grants no nodes/proxy).
        (
            access_review("system:node:edge-2", nodes, "get", "proxy", "edge-1"),
            false,
        ),
        (
            access_review("system:node:edge-2", nodes, "get", "metrics", "edge-1"),
            false,
        ),
        (
            access_review(
                "system:bootstrap:abcdef",
                &["system:bootstrappers"],
                "get",
                "stats",
                "edge-1",
            ),
            false,
        ),
        // nodekeeper takes credentials: none is no one.
        (
            access_review(
                "system:anonymous",
                &["system:unauthenticated"],
                "get",
                "proxy",
                "edge-1",
            ),
            false,
        ),
        (
            path_review(
                "system:anonymous",
                &["system:unauthenticated"],
                "get",
                "/healthz",
            ),
            true,
        ),
        (
            path_review("system:node:edge-2", nodes, "get", "/healthz"),
            true,
        ),
        (
            path_review("system:node:edge-2", nodes, "get", "/metrics"),
            false,
        ),
        (path_review("alice", &[], "get", "/metrics"), true),
    ];
    for (review, want) in &cases {
        let (code, answer) = post(&c, REVIEWS, Some(EDGE_1), review, true).await;
        assert_eq!(code, 201, "{answer}");
        assert_eq!(answer["kind"], "SubjectAccessReview");
        assert_eq!(allowed(&answer), *want, "{review}: {answer}");
        // kube's authorizers have no opinion on what they do not grant.
        assert_eq!(answer["status"]["denied"], Value::Null, "{answer}");
        let reason = &answer["status"]["reason"];
        assert_eq!(reason.is_string(), !want, "{answer}");
    }
    // The reason is the one nodekeeper's own API gives.
    let (_, answer) = post(
        &c,
        REVIEWS,
        Some(EDGE_1),
        &access_review("system:node:edge-2", nodes, "update", "", "edge-1"),
        true,
    )
    .await;
    assert_eq!(
        answer["status"]["reason"],
        "node \"edge-2\" is not allowed to modify node \"edge-1\""
    );
    let refused: Value = client()
        .put(format!("{}/api/v1/nodes/edge-1", c.url))
        .bearer_auth("edge-2-secret")
        .json(&json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "edge-1"}}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(refused["code"], 403, "{refused}");
    let reason = answer["status"]["reason"].as_str().unwrap();
    assert!(
        refused["message"].as_str().unwrap().ends_with(reason),
        "{refused}"
    );

    // kube-apiserver's validation: 422.
    let mut neither = access_review("alice", &[], "get", "proxy", "edge-1");
    neither["spec"]["resourceAttributes"] = Value::Null;
    let mut nobody = access_review("", &[], "get", "proxy", "edge-1");
    nobody["spec"]["groups"] = Value::Null;
    for bad in [neither, nobody] {
        let (code, s) = post(&c, REVIEWS, Some(EDGE_1), &bad, false).await;
        assert_eq!((code, s["reason"].as_str()), (422, Some("Invalid")), "{s}");
    }

    // Who may ask: nodes and operators; not bootstrappers, not strangers.
    let review = token_review(OPERATOR);
    let (code, _) = post(&c, TOKEN_REVIEWS, Some(bootstrap), &review, false).await;
    assert_eq!(code, 403);
    let (code, _) = post(&c, TOKEN_REVIEWS, None, &review, false).await;
    assert_eq!(code, 401);
    let (code, _) = post(&c, TOKEN_REVIEWS, Some(OPERATOR), &review, false).await;
    assert_eq!(code, 201);

    // Discovery lists both groups, so `kubectl api-resources` shows them
    // (kubectl sends credentials over TLS only: asked of an open API).
    let open_site = TestSite::named(&["edge-9"], "127.0.72.9".parse().unwrap()).start();
    let open = open_site.controller_with(&[]);
    let listed = kubectl(&open, open_site.path(), &["api-resources", "--no-headers"]).await;
    for (name, group) in [
        ("tokenreviews", "authentication.k8s.io/v1"),
        ("subjectaccessreviews", "authorization.k8s.io/v1"),
    ] {
        assert!(
            listed
                .lines()
                .any(|l| l.starts_with(name) && l.contains(group)),
            "{listed}"
        );
    }
}

/// kubectl (v1.32 here) with nothing from the environment.
async fn kubectl(c: &Controller, dir: &std::path::Path, args: &[&str]) -> String {
    tokio::fs::write(dir.join("kubeconfig"), "").await.unwrap();
    let out = tokio::process::Command::new("kubectl")
        .arg("--server")
        .arg(&c.url)
        .arg("--request-timeout=10s")
        .arg("--cache-dir")
        .arg(dir.join("cache"))
        .args(args)
        .env("KUBECONFIG", dir.join("kubeconfig"))
        .env("HOME", dir)
        .env_remove("HTTP_PROXY")
        .env_remove("HTTPS_PROXY")
        .env_remove("http_proxy")
        .env_remove("https_proxy")
        .output()
        .await
        .unwrap_or_else(|e| {
            panic!(
                "cannot run kubectl ({e}): these tests need the real kubectl on PATH; \
                 install Debian's `kubernetes-client` package (CI installs it)"
            )
        });
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "kubectl {args:?}: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}
