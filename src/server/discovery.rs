//! API discovery (`/version`, `/api`, `/api/v1`, `/apis`, …): what kubectl reads before any request.
//!
//! kubectl first asks `/api` and `/apis` for the aggregated discovery
//! document (`apidiscovery.k8s.io/v2`); plain `application/json` answers
//! make it fall back to these legacy documents, which are all we serve.

use axum::http::{header, HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};
use k8s_openapi::apimachinery::pkg::version::Info;

/// What can be read of a resource nodekeeper serves empty.
const READ: &str = "get list watch";

/// The Kubernetes release whose API (and node JSON) we serve.
const KUBE_MAJOR: &str = "1";
const KUBE_MINOR: &str = "33";

/// A resource as discovery lists it: its name (`resource` or
/// `resource/subresource`), kind, whether it is namespaced, its verbs and
/// its short names (words separated by spaces). Its singular name is its
/// kind in lower case, as kube-apiserver lists each of these (`node`,
/// `certificatesigningrequest`); a subresource has none.
struct Resource(&'static str, &'static str, bool, &'static str, &'static str);

const CSR: &str = "CertificateSigningRequest";

/// What the core group serves here.
const CORE_V1: &[Resource] = &[
    Resource(
        "nodes",
        "Node",
        false,
        "get list watch create update patch",
        "no",
    ),
    Resource("nodes/status", "Node", false, "get patch update", ""),
    // The nodes' history, as events in `default` like the node controller's.
    // Kubelets' Events are posted into it; a repeat's patch is a 404,
    // which makes recorders post it again.
    Resource("events", "Event", true, "create get list patch", "ev"),
    // The mirror pods of kubelets' static pods, and nothing else.
    Resource("pods", "Pod", true, "create delete get list watch", "po"),
    Resource("pods/status", "Pod", true, "get patch", ""),
    // None kept: listed and watched empty, as kubelets do.
    Resource("services", "Service", true, READ, "svc"),
    // Bootstrap tokens only: kube-system, type bootstrap.kubernetes.io/token.
    Resource("secrets", "Secret", true, "create delete get list", ""),
];

/// The named groups, each served at `v1` only, in the order `/apis` lists
/// them, with what each serves.
const GROUPS: &[(&str, &[Resource])] = &[
    // Node leases (heartbeats).
    (
        "coordination.k8s.io",
        &[Resource(
            "leases",
            "Lease",
            true,
            "get list create update patch",
            "",
        )],
    ),
    (
        "storage.k8s.io",
        &[
            Resource(
                "csinodes",
                "CSINode",
                false,
                "create delete get list patch update",
                "",
            ),
            // None kept: listed and watched empty, as kubelets do.
            Resource("csidrivers", "CSIDriver", false, READ, ""),
        ],
    ),
    // RuntimeClasses, none kept.
    (
        "node.k8s.io",
        &[Resource("runtimeclasses", "RuntimeClass", false, READ, "")],
    ),
    // Events may be posted (kept in the node's history).
    (
        "events.k8s.io",
        &[Resource("events", "Event", true, "create patch", "ev")],
    ),
    // CSRs and their subresources, as kube-apiserver lists them (`kubectl
    // certificate approve` looks for `certificatesigningrequests/approval`).
    (
        "certificates.k8s.io",
        &[
            Resource(
                "certificatesigningrequests",
                CSR,
                false,
                "create delete get list watch",
                "csr",
            ),
            Resource(
                "certificatesigningrequests/approval",
                CSR,
                false,
                "get update",
                "",
            ),
            Resource(
                "certificatesigningrequests/status",
                CSR,
                false,
                "get update",
                "",
            ),
        ],
    ),
    // Reviews, created only, as kube-apiserver lists them.
    (
        "authentication.k8s.io",
        &[Resource("tokenreviews", "TokenReview", false, "create", "")],
    ),
    (
        "authorization.k8s.io",
        &[Resource(
            "subjectaccessreviews",
            "SubjectAccessReview",
            false,
            "create",
            "",
        )],
    ),
];

/// The discovery documents' routes: `/version`, `/api`, `/api/v1`,
/// `/apis`, and for each named group `/apis/GROUP` and `/apis/GROUP/v1`.
pub(crate) fn routes<S: Clone + Send + Sync + 'static>() -> Router<S> {
    let mut routes = Router::new()
        .route("/version", get(|| async { Json(version_info()) }))
        .route("/api", get(api))
        .route(
            "/api/v1",
            get(|| async { Json(resource_list("v1", CORE_V1)) }),
        )
        .route("/apis", get(|| async { Json(group_list()) }));
    for &(name, resources) in GROUPS {
        routes = routes
            .route(
                &format!("/apis/{name}"),
                get(move || async move { Json(group(name)) }),
            )
            .route(
                &format!("/apis/{name}/v1"),
                get(move || async move { Json(resource_list(&format!("{name}/v1"), resources)) }),
            );
    }
    routes
}

fn version_info() -> Info {
    Info {
        major: KUBE_MAJOR.to_string(),
        minor: KUBE_MINOR.to_string(),
        emulation_major: Some(KUBE_MAJOR.to_string()),
        emulation_minor: Some(KUBE_MINOR.to_string()),
        // semver: the API level, then which nodekeeper serves it.
        git_version: format!(
            "v{KUBE_MAJOR}.{KUBE_MINOR}.0-nodekeeper.{}",
            env!("CARGO_PKG_VERSION")
        ),
        git_commit: crate::version::git_commit().to_string(),
        git_tree_state: "clean".to_string(),
        build_date: crate::version::build_date().to_string(),
        compiler: "rustc".to_string(),
        platform: format!(
            "{}/{}",
            std::env::consts::OS,
            crate::k8s::go_arch(std::env::consts::ARCH)
        ),
        ..Info::default()
    }
}

/// `/api`: the legacy core group's versions.
async fn api(headers: HeaderMap, uri: Uri) -> Response {
    Json(APIVersions {
        versions: vec!["v1".to_string()],
        server_address_by_client_cidrs: vec![ServerAddressByClientCIDR {
            client_cidr: "0.0.0.0/0".to_string(),
            // Where the client reached us is where it should come back
            // (HTTP/2 clients name it in the request's authority, not in Host).
            server_address: headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .map(str::to_string)
                .or_else(|| uri.authority().map(|a| a.to_string()))
                .unwrap_or_default(),
        }],
    })
    .into_response()
}

fn resource_list(group_version: &str, resources: &[Resource]) -> APIResourceList {
    let words = |list: &str| list.split_whitespace().map(str::to_string).collect();
    let resources = resources.iter().map(|r| APIResource {
        name: r.0.to_string(),
        singular_name: match r.0.contains('/') {
            true => String::new(),
            false => r.1.to_lowercase(),
        },
        kind: r.1.to_string(),
        namespaced: r.2,
        verbs: words(r.3),
        short_names: (!r.4.is_empty()).then(|| words(r.4)),
        ..APIResource::default()
    });
    APIResourceList {
        group_version: group_version.to_string(),
        resources: resources.collect(),
    }
}

/// `/apis`: the named groups.
fn group_list() -> APIGroupList {
    APIGroupList {
        groups: GROUPS.iter().map(|(name, _)| group(name)).collect(),
    }
}

/// A named group served at `v1` only.
fn group(name: &str) -> APIGroup {
    let v1 = GroupVersionForDiscovery {
        group_version: format!("{name}/v1"),
        version: "v1".to_string(),
    };
    APIGroup {
        name: name.to_string(),
        versions: vec![v1.clone()],
        preferred_version: Some(v1),
        server_address_by_client_cidrs: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn to_json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).unwrap()
    }

    #[test]
    fn version_names_the_api_level_and_this_build() {
        let v = to_json(&version_info());
        assert_eq!(v["major"], "1");
        assert_eq!(v["minor"], "33");
        assert_eq!(
            v["gitVersion"],
            format!("v1.33.0-nodekeeper.{}", env!("CARGO_PKG_VERSION"))
        );
        assert!(v["platform"].as_str().unwrap().contains('/'));
        assert_eq!(v["gitCommit"], crate::version::git_commit());
        assert_eq!(v["buildDate"], crate::version::build_date());
    }

    #[test]
    fn core_resources() {
        let v = to_json(&resource_list("v1", CORE_V1));
        assert_eq!(v["kind"], "APIResourceList");
        assert_eq!(v["groupVersion"], "v1");
        let nodes = &v["resources"][0];
        assert_eq!(
            nodes,
            &json!({"name": "nodes", "singularName": "node", "namespaced": false, "kind": "Node",
                    "verbs": ["get", "list", "watch", "create", "update", "patch"], "shortNames": ["no"]})
        );
        assert_eq!(v["resources"][1]["name"], "nodes/status");
        assert!(v["resources"][1].get("shortNames").is_none());
    }

    #[test]
    fn coordination_group_prefers_v1() {
        let v = to_json(&APIGroupList {
            groups: vec![group("coordination.k8s.io")],
        });
        assert_eq!(v["kind"], "APIGroupList");
        assert_eq!(
            v["groups"][0],
            json!({"kind": "APIGroup", "apiVersion": "v1", "name": "coordination.k8s.io",
                   "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
                   "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"}})
        );
    }
}
