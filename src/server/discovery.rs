//! API discovery (`/version`, `/api`, `/api/v1`, `/apis`, …): what kubectl reads before any request.
//!
//! kubectl first asks `/api` and `/apis` for the aggregated discovery
//! document (`apidiscovery.k8s.io/v2`); plain `application/json` answers
//! make it fall back to these legacy documents, which are all we serve.

use axum::http::{header, HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    APIGroup, APIGroupList, APIResource, APIResourceList, APIVersions, GroupVersionForDiscovery,
    ServerAddressByClientCIDR,
};
use k8s_openapi::apimachinery::pkg::version::Info;

const COORDINATION: &str = "coordination.k8s.io";
const COORDINATION_V1: &str = "coordination.k8s.io/v1";
const STORAGE: &str = "storage.k8s.io";
const STORAGE_V1: &str = "storage.k8s.io/v1";
const NODE: &str = "node.k8s.io";
const EVENTS: &str = "events.k8s.io";
const CERTIFICATES: &str = "certificates.k8s.io";
const AUTHENTICATION: &str = "authentication.k8s.io";
const AUTHORIZATION: &str = "authorization.k8s.io";
/// What can be read of a resource nodekeeper serves empty.
const READ: &[&str] = &["get", "list", "watch"];

/// The Kubernetes release whose API (and node JSON) we serve.
const KUBE_MAJOR: &str = "1";
const KUBE_MINOR: &str = "33";

/// `/version`: a `version.Info` naming the Kubernetes API level and this build.
pub(crate) async fn version() -> Response {
    Json(version_info()).into_response()
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
pub(crate) async fn api(headers: HeaderMap, uri: Uri) -> Response {
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

fn resource(
    name: &str,
    singular: &str,
    kind: &str,
    namespaced: bool,
    verbs: &[&str],
    short_names: &[&str],
) -> APIResource {
    APIResource {
        name: name.to_string(),
        singular_name: singular.to_string(),
        kind: kind.to_string(),
        namespaced,
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        short_names: (!short_names.is_empty())
            .then(|| short_names.iter().map(|s| s.to_string()).collect()),
        ..APIResource::default()
    }
}

/// `/api/v1`: what the core group serves here.
pub(crate) async fn api_v1() -> Response {
    Json(core_v1_resources()).into_response()
}

fn core_v1_resources() -> APIResourceList {
    APIResourceList {
        group_version: "v1".to_string(),
        resources: vec![
            resource(
                "nodes",
                "node",
                "Node",
                false,
                &["get", "list", "watch", "create", "update", "patch"],
                &["no"],
            ),
            resource(
                "nodes/status",
                "",
                "Node",
                false,
                &["get", "patch", "update"],
                &[],
            ),
            // The nodes' history, as events in `default` like the node controller's.
            // Kubelets' Events are posted into it; a repeat's patch is a 404,
            // which makes recorders post it again.
            resource(
                "events",
                "event",
                "Event",
                true,
                &["create", "get", "list", "patch"],
                &["ev"],
            ),
            // The mirror pods of kubelets' static pods, and nothing else.
            resource(
                "pods",
                "pod",
                "Pod",
                true,
                &["create", "delete", "get", "list", "watch"],
                &["po"],
            ),
            resource("pods/status", "", "Pod", true, &["get", "patch"], &[]),
            // None kept: listed and watched empty, as kubelets do.
            resource("services", "service", "Service", true, READ, &["svc"]),
            // Bootstrap tokens only: kube-system, type bootstrap.kubernetes.io/token.
            resource(
                "secrets",
                "secret",
                "Secret",
                true,
                &["create", "delete", "get", "list"],
                &[],
            ),
        ],
    }
}

/// `/apis`: the named groups.
pub(crate) async fn apis() -> Response {
    Json(APIGroupList {
        groups: vec![
            group(COORDINATION),
            group(STORAGE),
            group(NODE),
            group(EVENTS),
            group(CERTIFICATES),
            group(AUTHENTICATION),
            group(AUTHORIZATION),
        ],
    })
    .into_response()
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

fn coordination_group() -> APIGroup {
    group(COORDINATION)
}

/// `/apis/coordination.k8s.io`.
pub(crate) async fn coordination() -> Response {
    Json(coordination_group()).into_response()
}

/// `/apis/storage.k8s.io`.
pub(crate) async fn storage() -> Response {
    Json(group(STORAGE)).into_response()
}

/// `/apis/storage.k8s.io/v1`: the nodes' CSINodes.
pub(crate) async fn storage_v1() -> Response {
    Json(APIResourceList {
        group_version: STORAGE_V1.to_string(),
        resources: vec![
            resource(
                "csinodes",
                "csinode",
                "CSINode",
                false,
                &["create", "delete", "get", "list", "patch", "update"],
                &[],
            ),
            // None kept: listed and watched empty, as kubelets do.
            resource("csidrivers", "csidriver", "CSIDriver", false, READ, &[]),
        ],
    })
    .into_response()
}

/// `/apis/events.k8s.io`.
pub(crate) async fn events() -> Response {
    Json(group(EVENTS)).into_response()
}

/// `/apis/events.k8s.io/v1`: Events may be posted (kept in the node's history).
pub(crate) async fn events_v1() -> Response {
    Json(APIResourceList {
        group_version: format!("{EVENTS}/v1"),
        resources: vec![resource(
            "events",
            "event",
            "Event",
            true,
            &["create", "patch"],
            &["ev"],
        )],
    })
    .into_response()
}

/// `/apis/node.k8s.io`.
pub(crate) async fn node() -> Response {
    Json(group(NODE)).into_response()
}

/// `/apis/node.k8s.io/v1`: RuntimeClasses, none kept.
pub(crate) async fn node_v1() -> Response {
    Json(APIResourceList {
        group_version: format!("{NODE}/v1"),
        resources: vec![resource(
            "runtimeclasses",
            "runtimeclass",
            "RuntimeClass",
            false,
            READ,
            &[],
        )],
    })
    .into_response()
}

/// `/apis/certificates.k8s.io`.
pub(crate) async fn certificates() -> Response {
    Json(group(CERTIFICATES)).into_response()
}

/// `/apis/certificates.k8s.io/v1`: CSRs and their subresources, as
/// kube-apiserver lists them (`kubectl certificate approve` looks for
/// `certificatesigningrequests/approval`).
pub(crate) async fn certificates_v1() -> Response {
    Json(APIResourceList {
        group_version: format!("{CERTIFICATES}/v1"),
        resources: vec![
            resource(
                "certificatesigningrequests",
                "certificatesigningrequest",
                "CertificateSigningRequest",
                false,
                &["create", "delete", "get", "list", "watch"],
                &["csr"],
            ),
            resource(
                "certificatesigningrequests/approval",
                "",
                "CertificateSigningRequest",
                false,
                &["get", "update"],
                &[],
            ),
            resource(
                "certificatesigningrequests/status",
                "",
                "CertificateSigningRequest",
                false,
                &["get", "update"],
                &[],
            ),
        ],
    })
    .into_response()
}

/// `/apis/authentication.k8s.io`.
pub(crate) async fn authentication() -> Response {
    Json(group(AUTHENTICATION)).into_response()
}

/// `/apis/authentication.k8s.io/v1`: TokenReviews, created only, as
/// kube-apiserver lists them.
pub(crate) async fn authentication_v1() -> Response {
    Json(APIResourceList {
        group_version: format!("{AUTHENTICATION}/v1"),
        resources: vec![resource(
            "tokenreviews",
            "tokenreview",
            "TokenReview",
            false,
            &["create"],
            &[],
        )],
    })
    .into_response()
}

/// `/apis/authorization.k8s.io`.
pub(crate) async fn authorization() -> Response {
    Json(group(AUTHORIZATION)).into_response()
}

/// `/apis/authorization.k8s.io/v1`: SubjectAccessReviews, created only.
pub(crate) async fn authorization_v1() -> Response {
    Json(APIResourceList {
        group_version: format!("{AUTHORIZATION}/v1"),
        resources: vec![resource(
            "subjectaccessreviews",
            "subjectaccessreview",
            "SubjectAccessReview",
            false,
            &["create"],
            &[],
        )],
    })
    .into_response()
}

/// `/apis/coordination.k8s.io/v1`: node leases (heartbeats).
pub(crate) async fn coordination_v1() -> Response {
    Json(APIResourceList {
        group_version: COORDINATION_V1.to_string(),
        resources: vec![resource(
            "leases",
            "lease",
            "Lease",
            true,
            &["get", "list", "create", "update", "patch"],
            &[],
        )],
    })
    .into_response()
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
        let v = to_json(&core_v1_resources());
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
            groups: vec![coordination_group()],
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
