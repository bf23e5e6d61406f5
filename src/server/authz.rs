//! Authorization: what each caller may do, as one table ([`RULES`]) checked
//! in one place, the guard, for every request ([`authorize`]); and the
//! checks on the object a request writes that only its body names
//! ([`admit`]), which the handlers call.
//!
//! Operators and anonymous callers (on an API that takes no credentials)
//! may do anything. A node (`system:node:NAME` in `system:nodes`, by token
//! or client certificate) may do what kube-apiserver's node authorizer and
//! NodeRestriction admission let a kubelet do, and nothing else. So may the
//! `system:bootstrappers` group what kube's `system:node-bootstrapper` role
//! grants. Sources (k8s.io/kubernetes): the rules are `NodeRules()` and the
//! `system:node-bootstrapper` ClusterRole in
//! plugin/pkg/auth/authorizer/rbac/bootstrappolicy/policy.go; the name
//! checks are `admitNode`, `admitLease`, `admitCSINode` and `admitPodCreate`
//! in plugin/pkg/admission/noderestriction/admission.go, whose messages the
//! refusals use; the refusal's first words are kube-apiserver's
//! `forbiddenMessage` (k8s.io/apiserver
//! pkg/endpoints/handlers/responsewriters/errors.go).

use axum::http::{Method, StatusCode};
use axum::response::{IntoResponse, Response};

use super::identity::{Caller, Principal, BOOTSTRAPPERS_GROUP};
use crate::model::NODE_LEASE_NAMESPACE;

/// What a request asks, as kube's `authorizer.Attributes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attributes<'a> {
    pub verb: &'a str,
    /// The API group, `""` for the core group.
    pub group: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    pub namespace: &'a str,
    /// The object's name, `""` for a collection.
    pub name: &'a str,
}

/// Who a rule is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    /// A node, for its own objects where [`Only`] says so.
    Nodes,
    /// Users in `system:bootstrappers`.
    Bootstrappers,
}

/// Which objects of a resource a rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Only {
    /// Any object.
    Any,
    /// The object named as the node (its Node, CSINode), when the request
    /// names one; a create names it in its body ([`admit`]).
    OwnName,
    /// The node's Lease: in `kube-node-lease`, named as the node.
    OwnLease,
    /// Pods bound to the node (`spec.nodeName`), which only the body or
    /// the stored pod says ([`admit`]).
    BoundPods,
}

/// One line of the table: who, the verbs, the API group, the resources
/// (`resource` or `resource/subresource`), and which of their objects.
/// Verbs and resources are words separated by spaces.
#[derive(Debug)]
struct Rule(Who, &'static str, &'static str, &'static str, Only);

const READ: &str = "get list watch";
const WRITE: &str = "create update patch";
const MANAGE: &str = "create update patch delete";
/// What a requester does with its certificate signing requests.
const CSR_VERBS: &str = "create get list watch";
const CERTIFICATES: &str = "certificates.k8s.io";
const CSRS: &str = "certificatesigningrequests";

use Only::{Any, BoundPods, OwnLease, OwnName};
use Who::{Bootstrappers, Nodes};

/// Everything a node or a bootstrapper may do; anything else is refused.
/// (policy.go `NodeRules()`, with NodeRestriction's name checks as `only`.)
const RULES: &[Rule] = &[
    // "Needed to check API access": a kubelet's webhook authn/authz.
    Rule(
        Nodes,
        "create",
        "authentication.k8s.io",
        "tokenreviews",
        Any,
    ),
    Rule(
        Nodes,
        "create",
        "authorization.k8s.io",
        "subjectaccessreviews localsubjectaccessreviews",
        Any,
    ),
    Rule(Nodes, READ, "", "services", Any),
    // Register and report status; NodeRestriction: its own Node only.
    Rule(Nodes, READ, "", "nodes nodes/status", Any),
    Rule(Nodes, WRITE, "", "nodes nodes/status", OwnName),
    // Events (kube grants core events; events.k8s.io too here, which some
    // recorders post; either is kept in the poster's own history).
    Rule(Nodes, WRITE, "", "events", Any),
    Rule(Nodes, WRITE, "events.k8s.io", "events", Any),
    Rule(Nodes, READ, "", "pods", Any),
    // Mirror pods bound to itself, and their status.
    Rule(Nodes, "create delete", "", "pods", BoundPods),
    Rule(Nodes, "update patch", "", "pods/status", BoundPods),
    Rule(Nodes, "get", "", "endpoints", Any),
    // selfnodeclient: CSRs for its own client certificate.
    Rule(Nodes, CSR_VERBS, CERTIFICATES, CSRS, Any),
    Rule(Nodes, "get", "coordination.k8s.io", "leases", Any),
    Rule(Nodes, MANAGE, "coordination.k8s.io", "leases", OwnLease),
    Rule(Nodes, "get", "storage.k8s.io", "volumeattachments", Any),
    Rule(Nodes, "get", "storage.k8s.io", "csinodes", Any),
    Rule(Nodes, READ, "storage.k8s.io", "csidrivers", Any),
    Rule(Nodes, MANAGE, "storage.k8s.io", "csinodes", OwnName),
    Rule(Nodes, READ, "node.k8s.io", "runtimeclasses", Any),
    // system:node-bootstrapper.
    Rule(Bootstrappers, CSR_VERBS, CERTIFICATES, CSRS, Any),
];

/// The paths every authenticated user may read, as kube's
/// `system:discovery` and `system:public-info-viewer` roles grant them
/// (policy.go): discovery and the health checks.
fn is_discovery(path: &str) -> bool {
    let path = path.trim_end_matches('/');
    matches!(path, "/api" | "/apis" | "/version" | "/healthz" | "/livez" | "/readyz")
        || path.starts_with("/healthz/")
        || path.starts_with("/livez/")
        || path.starts_with("/readyz/")
        || path.starts_with("/openapi/")
        || path == "/openapi"
        || path == "/api/v1"
        // `/apis/GROUP` and `/apis/GROUP/VERSION`.
        || path
            .strip_prefix("/apis/")
            .is_some_and(|rest| rest.split('/').count() <= 2)
}

/// Reads what a request asks from its method, path and query, as
/// kube-apiserver's `RequestInfoFactory` does (k8s.io/apiserver
/// pkg/endpoints/request/requestinfo.go). `None` for a path that names no
/// resource (discovery, health, nodekeeper's own `/v1/…` and `/metrics`).
pub fn attributes<'a>(
    method: &Method,
    path: &'a str,
    query: Option<&str>,
) -> Option<Attributes<'a>> {
    let rest = if let Some(rest) = path.strip_prefix("/api/v1/") {
        ("", rest)
    } else {
        let rest = path.strip_prefix("/apis/")?;
        let (group, rest) = rest.split_once('/')?;
        let (_version, rest) = rest.split_once('/')?;
        (group, rest)
    };
    let (group, rest) = rest;
    let mut parts = rest.split('/').filter(|p| !p.is_empty());
    let mut first = parts.next()?;
    let mut namespace = "";
    // `namespaces/NS/RESOURCE/…`, or `namespaces/NS` itself.
    if first == "namespaces" {
        if let Some(ns) = parts.next() {
            let Some(resource) = parts.next() else {
                return Some(Attributes {
                    verb: verb(method, true, query),
                    group,
                    resource: "namespaces",
                    subresource: "",
                    namespace: "",
                    name: ns,
                });
            };
            namespace = ns;
            first = resource;
        }
    }
    let name = parts.next().unwrap_or("");
    let subresource = parts.next().unwrap_or("");
    Some(Attributes {
        verb: verb(method, !name.is_empty(), query),
        group,
        resource: first,
        subresource,
        namespace,
        name,
    })
}

/// kube's verb for a request: `get`/`list`/`watch` for reads, `create`,
/// `update`, `patch`, `delete`/`deletecollection`.
fn verb(method: &Method, named: bool, query: Option<&str>) -> &'static str {
    let watch = query.is_some_and(|q| {
        q.split('&')
            .any(|p| matches!(p, "watch=true" | "watch=1" | "watch=True"))
    });
    match *method {
        Method::GET | Method::HEAD if watch => "watch",
        Method::GET | Method::HEAD if named => "get",
        Method::GET | Method::HEAD => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "unknown",
    }
}

/// What a request asks the authorizer: a resource, or a path that names
/// none (discovery, health, nodekeeper's own `/v1/…`, `/metrics`), as
/// kube's `authorizer.Attributes` is a resource request or not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Asked<'a> {
    Resource(Attributes<'a>),
    Path { verb: &'a str, path: &'a str },
}

/// Why the authorizer refuses a request: the 403 the guard answers, and
/// the reason a SubjectAccessReview gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// A path only operators may use.
    Path,
    /// A caller that is neither a node nor an operator, in no group a rule names.
    NoGroup,
    /// No rule grants the verb on the resource to this kind of caller.
    NoRule(&'static str),
    /// A rule grants the verb on the resource but not on this object: the
    /// NodeRestriction refusal, with its message.
    NotOwn(String),
}

impl Refusal {
    /// The authorizer's reason, as a SubjectAccessReview's status gives it.
    pub fn reason(&self) -> String {
        match self {
            Refusal::Path => PATH_REASON.into(),
            Refusal::NoGroup => NO_GROUP_REASON.into(),
            Refusal::NoRule(reason) => (*reason).into(),
            Refusal::NotOwn(message) => message.clone(),
        }
    }

    /// kube-apiserver's 403 for `asked` by `user`.
    fn response(&self, asked: &Asked<'_>, user: &str) -> Response {
        match (self, asked) {
            // NodeRestriction's 403: `RESOURCE "NAME" is forbidden: MESSAGE`.
            (Refusal::NotOwn(message), Asked::Resource(attrs)) => {
                forbidden_object(&qualified(attrs), attrs.name, message)
            }
            (_, Asked::Resource(attrs)) => forbidden(attrs, user, &self.reason()),
            (_, Asked::Path { verb, path }) => forbidden_path(user, verb, path),
        }
    }
}

const PATH_REASON: &str =
    "only operators may; nodes and bootstrappers may read discovery and health checks";
const NO_GROUP_REASON: &str =
    "the user is neither a node nor an operator, and no rule grants its groups this";

/// Whether `principal` may make this request; else kube-apiserver's 403
/// saying why. Called by the guard for every request it lets in.
pub(super) fn authorize(
    principal: &Principal,
    method: &Method,
    path: &str,
    query: Option<&str>,
) -> Result<(), Response> {
    if matches!(principal.caller(), Caller::Anonymous | Caller::Operator) {
        return Ok(());
    }
    let verb;
    let asked = match attributes(method, path, query) {
        Some(attrs) => Asked::Resource(attrs),
        None => {
            verb = method.as_str().to_ascii_lowercase();
            Asked::Path { verb: &verb, path }
        }
    };
    decide_for(principal, &asked)
        .map_err(|refusal| refusal.response(&asked, &principal.user().name))
}

/// The authorizer: whether `principal` may do what is `asked`, by the
/// table. The guard asks it of every request ([`authorize`]), and a
/// SubjectAccessReview of the user it names.
pub fn decide_for(principal: &Principal, asked: &Asked<'_>) -> Result<(), Refusal> {
    let who = match principal.caller() {
        Caller::Anonymous | Caller::Operator => return Ok(()),
        Caller::Node(own) => Some((Who::Nodes, own.as_str())),
        Caller::Limited if principal.user().in_group(BOOTSTRAPPERS_GROUP) => {
            Some((Who::Bootstrappers, ""))
        }
        Caller::Limited => None,
    };
    let attrs = match asked {
        Asked::Path { path, .. } if is_discovery(path) => return Ok(()),
        Asked::Path { .. } => return Err(Refusal::Path),
        Asked::Resource(attrs) => attrs,
    };
    let Some((who, own)) = who else {
        return Err(Refusal::NoGroup);
    };
    match decide(who, own, attrs) {
        Decision::Allow => Ok(()),
        Decision::NoRule => Err(Refusal::NoRule(no_rule_reason(who))),
        Decision::NotOwn(message) => Err(Refusal::NotOwn(message)),
    }
}

/// What the table says of a request.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    Allow,
    /// No rule grants it: the authorizer's refusal.
    NoRule,
    /// A rule grants the verb on the resource but not on this object: the
    /// NodeRestriction refusal, with its message.
    NotOwn(String),
}

fn decide(who: Who, own: &str, attrs: &Attributes<'_>) -> Decision {
    let mut refusal = None;
    for Rule(_, verbs, group, resources, only) in RULES.iter().filter(|r| r.0 == who) {
        if *group != attrs.group
            || !verbs.split(' ').any(|v| v == attrs.verb)
            || !resources
                .split(' ')
                .any(|r| matches_resource(r, attrs.resource, attrs.subresource))
        {
            continue;
        }
        match own_object(*only, own, attrs) {
            Ok(()) => return Decision::Allow,
            Err(message) => refusal = Some(message),
        }
    }
    match refusal {
        Some(message) => Decision::NotOwn(message),
        None => Decision::NoRule,
    }
}

fn matches_resource(rule: &str, resource: &str, subresource: &str) -> bool {
    match rule.split_once('/') {
        Some((r, s)) => r == resource && s == subresource,
        None => rule == resource && subresource.is_empty(),
    }
}

/// Whether a request's object is one `only` covers, as far as the path
/// says; else NodeRestriction's message.
fn own_object(only: Only, own: &str, attrs: &Attributes<'_>) -> Result<(), String> {
    match only {
        Only::Any | Only::BoundPods => Ok(()),
        Only::OwnName => check_name(Kind::of(attrs.resource), own, attrs.name),
        Only::OwnLease => {
            if attrs.namespace != NODE_LEASE_NAMESPACE {
                return Err(format!(
                    "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
                ));
            }
            check_name(Kind::Lease, own, attrs.name)
        }
    }
}

/// The objects whose name NodeRestriction ties to the node's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Node,
    Lease,
    CSINode,
}

impl Kind {
    fn of(resource: &str) -> Kind {
        match resource {
            "leases" => Kind::Lease,
            "csinodes" => Kind::CSINode,
            _ => Kind::Node,
        }
    }

    /// kube's qualified resource, as its Status messages name it.
    fn resource(self) -> &'static str {
        match self {
            Kind::Node => "nodes",
            Kind::Lease => "leases.coordination.k8s.io",
            Kind::CSINode => "csinodes.storage.k8s.io",
        }
    }
}

/// NodeRestriction's check of an object's name (an empty name, a
/// collection, is for the body to say: [`admit`]).
fn check_name(kind: Kind, own: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || name == own {
        return Ok(());
    }
    Err(not_own(kind, own, name))
}

/// NodeRestriction's message for another node's object.
fn not_own(kind: Kind, own: &str, name: &str) -> String {
    match kind {
        Kind::Node => format!("node {own:?} is not allowed to modify node {name:?}"),
        Kind::Lease => {
            "can only access node lease with the same name as the requesting node".into()
        }
        Kind::CSINode => "can only access CSINode with the same name as the requesting node".into(),
    }
}

/// NodeRestriction on an object a handler has read from the body (a
/// create names its object there): a node may write only its own Node,
/// Lease and CSINode (named, not nameless). Others pass.
pub fn admit(caller: &Caller, kind: Kind, name: &str) -> Result<(), Response> {
    match caller {
        Caller::Anonymous | Caller::Operator => Ok(()),
        Caller::Node(own) if own == name => Ok(()),
        Caller::Node(own) => Err(forbidden_object(
            kind.resource(),
            name,
            &not_own(kind, own, name),
        )),
        Caller::Limited => Err(forbidden_object(
            kind.resource(),
            name,
            "the caller is neither a node nor an operator",
        )),
    }
}

/// NodeRestriction on a pod a node creates or deletes: bound to itself
/// (`admitPod`, `admitPodCreate`). For the pods API.
pub fn admit_pod(caller: &Caller, pod: &str, node_name: &str, verb: &str) -> Result<(), Response> {
    match caller {
        Caller::Node(own) if own != node_name => Err(forbidden_object(
            "pods",
            pod,
            &format!("node {own:?} can only {verb} pods with spec.nodeName set to itself"),
        )),
        Caller::Limited => Err(forbidden_object(
            "pods",
            pod,
            "the caller is neither a node nor an operator",
        )),
        _ => Ok(()),
    }
}

fn no_rule_reason(who: Who) -> &'static str {
    match who {
        Who::Nodes => {
            "a node may read what a kubelet reads and write only its own Node, \
                       Lease, CSINode, mirror pods, events and certificate signing requests"
        }
        Who::Bootstrappers => {
            "system:bootstrappers may only create, get, list and watch \
                               certificatesigningrequests"
        }
    }
}

/// kube's qualified resource: `resource.group`, or `resource` in the core group.
fn qualified(attrs: &Attributes<'_>) -> String {
    if attrs.group.is_empty() {
        attrs.resource.to_string()
    } else {
        format!("{}.{}", attrs.resource, attrs.group)
    }
}

/// The authorizer's 403: `RESOURCE "NAME" is forbidden: User "U" cannot
/// VERB resource "R" in API group "G" …: REASON`.
fn forbidden(attrs: &Attributes<'_>, user: &str, reason: &str) -> Response {
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.to_string()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let scope = if attrs.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace {:?}", attrs.namespace)
    };
    let message = format!(
        "User {user:?} cannot {} resource {resource:?} in API group {:?} {scope}: {reason}",
        attrs.verb, attrs.group
    );
    forbidden_object(&qualified(attrs), attrs.name, &message)
}

/// A refused non-resource path (`/metrics`, nodekeeper's `/v1/…`).
fn forbidden_path(user: &str, verb: &str, path: &str) -> Response {
    super::forbidden(format!(
        "forbidden: User {user:?} cannot {verb} path {path:?}: {PATH_REASON}"
    ))
}

/// The 403 `resource "name" is forbidden: message`, as apimachinery's
/// `NewForbidden` words it.
pub(super) fn forbidden_object(resource: &str, name: &str, message: &str) -> Response {
    let text = if name.is_empty() {
        format!("{resource} is forbidden: {message}")
    } else {
        format!("{resource} {name:?} is forbidden: {message}")
    };
    let kind = resource.split('.').next().unwrap_or(resource);
    let named = (!name.is_empty()).then_some(name);
    let body = crate::k8s::status_error(403, "Forbidden", &text, named, Some(kind));
    (StatusCode::FORBIDDEN, axum::Json(body)).into_response()
}

/// A node may change only its own Node (NodeRestriction's `admitNode`);
/// operators and anonymous callers any.
pub fn check_may_write_node(caller: &Caller, node: &str) -> Result<(), Response> {
    admit(caller, Kind::Node, node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::identity::principal;

    fn node(name: &str) -> Principal {
        principal(format!("system:node:{name}"), vec!["system:nodes".into()])
    }

    async fn answer(principal: &Principal, method: &str, target: &str) -> (u16, String) {
        let method = Method::from_bytes(method.as_bytes()).unwrap();
        let (path, query) = match target.split_once('?') {
            Some((p, q)) => (p, Some(q)),
            None => (target, None),
        };
        match authorize(principal, &method, path, query) {
            Ok(()) => (200, String::new()),
            Err(r) => {
                let code = r.status().as_u16();
                let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
                let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
                (code, v["message"].as_str().unwrap().to_string())
            }
        }
    }

    #[test]
    fn requests_are_read_as_kube_apiserver_reads_them() {
        let get = Method::GET;
        let a = attributes(&get, "/api/v1/nodes/a/status", None).unwrap();
        assert_eq!(
            (
                a.verb,
                a.group,
                a.resource,
                a.subresource,
                a.namespace,
                a.name
            ),
            ("get", "", "nodes", "status", "", "a")
        );
        let a = attributes(&get, "/api/v1/pods", Some("watch=true&x=1")).unwrap();
        assert_eq!((a.verb, a.resource, a.name), ("watch", "pods", ""));
        let a = attributes(
            &Method::PUT,
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/a",
            None,
        )
        .unwrap();
        assert_eq!(
            (a.verb, a.group, a.resource, a.namespace, a.name),
            (
                "update",
                "coordination.k8s.io",
                "leases",
                "kube-node-lease",
                "a"
            )
        );
        let a = attributes(&Method::POST, "/apis/storage.k8s.io/v1/csinodes", None).unwrap();
        assert_eq!((a.verb, a.resource, a.name), ("create", "csinodes", ""));
        let a = attributes(&get, "/api/v1/namespaces/default", None).unwrap();
        assert_eq!(
            (a.verb, a.resource, a.name),
            ("get", "namespaces", "default")
        );
        assert_eq!(attributes(&get, "/v1/history", None), None);
        assert_eq!(attributes(&get, "/metrics", None), None);
        assert!(is_discovery("/apis/storage.k8s.io/v1"));
        assert!(is_discovery("/api/v1"));
        assert!(!is_discovery("/apis/storage.k8s.io/v1/csinodes"));
    }

    #[tokio::test]
    async fn a_node_writes_only_its_own_objects() {
        let a = node("a");
        let allowed = [
            ("GET", "/api/v1/nodes"),
            ("GET", "/api/v1/nodes?watch=true"),
            ("GET", "/api/v1/nodes/b"),
            ("POST", "/api/v1/nodes"),
            ("PATCH", "/api/v1/nodes/a/status"),
            ("PUT", "/api/v1/nodes/a"),
            (
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases",
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/a",
            ),
            (
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/b",
            ),
            ("POST", "/apis/storage.k8s.io/v1/csinodes"),
            ("PUT", "/apis/storage.k8s.io/v1/csinodes/a"),
            ("GET", "/apis/storage.k8s.io/v1/csinodes/a"),
            ("POST", "/api/v1/namespaces/default/events"),
            ("POST", "/apis/events.k8s.io/v1/namespaces/default/events"),
            ("GET", "/api/v1/pods?fieldSelector=spec.nodeName%3Da"),
            ("POST", "/api/v1/namespaces/kube-system/pods"),
            ("GET", "/api/v1/services"),
            ("GET", "/apis/storage.k8s.io/v1/csidrivers?watch=1"),
            ("GET", "/apis/node.k8s.io/v1/runtimeclasses"),
            (
                "POST",
                "/apis/certificates.k8s.io/v1/certificatesigningrequests",
            ),
            ("POST", "/apis/authentication.k8s.io/v1/tokenreviews"),
            ("GET", "/apis"),
            ("GET", "/api/v1"),
            ("GET", "/version"),
            ("GET", "/readyz"),
        ];
        for (method, path) in allowed {
            assert_eq!(
                answer(&a, method, path).await,
                (200, String::new()),
                "{method} {path}"
            );
        }
        // NodeRestriction's words (admission.go admitNode, admitLease, admitCSINode).
        let refused = [
            (
                "PATCH",
                "/api/v1/nodes/b/status",
                r#"nodes "b" is forbidden: node "a" is not allowed to modify node "b""#,
            ),
            (
                "PUT",
                "/api/v1/nodes/b",
                r#"nodes "b" is forbidden: node "a" is not allowed to modify node "b""#,
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/b",
                r#"leases.coordination.k8s.io "b" is forbidden: can only access node lease with the same name as the requesting node"#,
            ),
            (
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/default/leases/a",
                r#"leases.coordination.k8s.io "a" is forbidden: can only access leases in the "kube-node-lease" system namespace"#,
            ),
            (
                "DELETE",
                "/apis/storage.k8s.io/v1/csinodes/b",
                r#"csinodes.storage.k8s.io "b" is forbidden: can only access CSINode with the same name as the requesting node"#,
            ),
        ];
        for (method, path, message) in refused {
            assert_eq!(
                answer(&a, method, path).await,
                (403, message.to_string()),
                "{method} {path}"
            );
        }
        // What no rule grants: the authorizer's words, and why.
        let (code, message) = answer(&a, "DELETE", "/api/v1/nodes/a").await;
        assert_eq!(code, 403);
        assert!(
            message.starts_with(r#"nodes "a" is forbidden: User "system:node:a" cannot delete resource "nodes" in API group "" at the cluster scope: a node may"#),
            "{message}"
        );
        let (code, message) = answer(&a, "GET", "/api/v1/namespaces/default/events").await;
        assert_eq!(code, 403);
        assert!(
            message.contains(
                r#"cannot list resource "events" in API group "" in the namespace "default""#
            ),
            "{message}"
        );
        let (code, message) = answer(&a, "GET", "/v1/history").await;
        assert_eq!(code, 403);
        assert!(
            message.contains(r#"cannot get path "/v1/history""#),
            "{message}"
        );
        assert_eq!(answer(&a, "GET", "/metrics").await.0, 403);
    }

    /// What a SubjectAccessReview asks: the kubelet's attributes
    /// (kubernetes `pkg/kubelet/server/auth.go` `GetRequestAttributes`).
    #[test]
    fn reviews_are_decided_by_the_same_table() {
        let kubelet_port = |verb, subresource| {
            Asked::Resource(Attributes {
                verb,
                group: "",
                resource: "nodes",
                subresource,
                namespace: "",
                name: "edge-1",
            })
        };
        let path = |path| Asked::Path { verb: "get", path };
        let a = node("edge-2");
        assert_eq!(decide_for(&a, &kubelet_port("get", "")), Ok(()));
        for subresource in ["proxy", "stats", "metrics", "log"] {
            assert_eq!(
                decide_for(&a, &kubelet_port("get", subresource)),
                Err(Refusal::NoRule(no_rule_reason(Who::Nodes)))
            );
        }
        assert!(matches!(
            decide_for(&a, &kubelet_port("update", "")),
            Err(Refusal::NotOwn(m)) if m == "node \"edge-2\" is not allowed to modify node \"edge-1\""
        ));
        assert_eq!(decide_for(&a, &path("/healthz")), Ok(()));
        assert_eq!(decide_for(&a, &path("/metrics")), Err(Refusal::Path));
        let stranger = principal("system:node:edge-1".into(), vec![]);
        assert_eq!(
            decide_for(&stranger, &kubelet_port("get", "")),
            Err(Refusal::NoGroup)
        );
        let alice = principal("alice".into(), vec![]);
        assert_eq!(decide_for(&alice, &kubelet_port("create", "proxy")), Ok(()));
        assert_eq!(decide_for(&alice, &path("/metrics")), Ok(()));
    }

    #[tokio::test]
    async fn bootstrappers_may_only_ask_for_certificates() {
        let boot = principal(
            "system:bootstrap:abcdef".into(),
            vec!["system:bootstrappers".into()],
        );
        let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
        for (method, path) in [
            ("POST", csrs.to_string()),
            ("GET", format!("{csrs}/x")),
            ("GET", format!("{csrs}?watch=true")),
            ("GET", "/apis".into()),
        ] {
            assert_eq!(answer(&boot, method, &path).await.0, 200, "{method} {path}");
        }
        for (method, path) in [
            ("PUT", format!("{csrs}/x/approval")),
            ("DELETE", format!("{csrs}/x")),
            ("GET", "/api/v1/nodes".into()),
            ("POST", "/api/v1/nodes".into()),
        ] {
            let (code, message) = answer(&boot, method, &path).await;
            assert_eq!(code, 403, "{method} {path}");
            assert!(
                message.contains("system:bootstrappers may only create, get, list and watch"),
                "{message}"
            );
        }
        // Named as a node without the group: nothing beyond discovery.
        let named = principal("system:node:a".into(), vec![]);
        assert_eq!(answer(&named, "GET", "/api/v1/nodes").await.0, 403);
        assert_eq!(answer(&named, "GET", "/version").await.0, 200);
        // Operators may do anything.
        let alice = principal("alice".into(), vec![]);
        assert_eq!(answer(&alice, "DELETE", "/api/v1/nodes/a").await.0, 200);
        assert_eq!(answer(&alice, "GET", "/v1/history").await.0, 200);
    }

    #[tokio::test]
    async fn a_create_is_checked_by_the_name_in_its_body() {
        let a = Caller::Node("a".into());
        assert!(admit(&a, Kind::Node, "a").is_ok());
        assert!(admit(&a, Kind::Lease, "").is_err());
        assert!(admit(&Caller::Operator, Kind::Node, "b").is_ok());
        let refused = admit(&a, Kind::CSINode, "b").unwrap_err();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        let body = axum::body::to_bytes(refused.into_body(), 1 << 16)
            .await
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v["message"],
            r#"csinodes.storage.k8s.io "b" is forbidden: can only access CSINode with the same name as the requesting node"#
        );
        assert_eq!(v["details"]["kind"], "csinodes");
        assert!(admit_pod(&a, "p", "a", "create").is_ok());
        assert_eq!(
            admit_pod(&a, "p", "b", "create").unwrap_err().status(),
            StatusCode::FORBIDDEN
        );
    }
}
