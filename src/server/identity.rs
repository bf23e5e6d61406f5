//! Who is calling: the user a request authenticated as, a name and groups as
//! kube-apiserver's `user.Info`, and what that user is here ([`Caller`]).
//!
//! Every authenticator (a `--token-file` line, a client certificate) ends in
//! [`principal`], the one place a name and groups become a request's caller;
//! the guard notes the result on the request, and handlers take it with the
//! [`Caller`], [`Identity`] or [`Principal`] extractors.

use std::sync::{Arc, LazyLock};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::response::Response;

use crate::model::normalize_name;

/// The name kube-apiserver gives callers without credentials.
pub const ANONYMOUS: &str = "system:anonymous";
/// The group of every caller without credentials.
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
/// The group kube-apiserver adds to every authenticated user.
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";
/// The group of nodes (kube's `user.NodesGroup`).
pub const NODES_GROUP: &str = "system:nodes";
/// A node's user is this and its name (kube's `nodeidentifier`).
pub const NODE_USER_PREFIX: &str = "system:node:";
/// The group of bootstrap-token users (kube's `system:bootstrappers`).
pub const BOOTSTRAPPERS_GROUP: &str = "system:bootstrappers";

/// An authenticated user, as kube-apiserver's `user.Info`: a name and the
/// groups it is in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct User {
    pub name: String,
    pub groups: Vec<String>,
}

impl User {
    pub fn in_group(&self, group: &str) -> bool {
        self.groups.iter().any(|g| g == group)
    }
}

/// What a caller is to nodekeeper, made from its [`User`] by [`principal`]:
/// the authorizer's table (`authz`) and the handlers decide by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No credentials: the API takes none (everything is allowed), or the
    /// request is a health check.
    Anonymous,
    /// Any other authenticated user (a plain token, a client certificate
    /// without a node's name): may do anything.
    Operator,
    /// `system:node:NAME` in `system:nodes` (a node token, a kubelet's
    /// client certificate): what the node authorizer allows NAME.
    Node(String),
    /// A user that is neither: in `system:bootstrappers`, or named as a node
    /// (`system:node:…`, `system:bootstrap:…`) without its group. May do only
    /// what the authorizer's table grants its groups.
    Limited,
}

/// Who made a request, by name, for the history (a request extractor): the
/// user (`system:node:NAME` for a node), or `system:anonymous`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity(pub String);

/// A request's authenticated caller: the [`User`], the [`Caller`] it makes,
/// and its client for the request budgets' fairness. One shared value per
/// token line or client certificate: noting it on a request is a reference
/// count.
#[derive(Debug, Clone)]
pub struct Principal(Arc<Inner>);

#[derive(Debug)]
struct Inner {
    user: User,
    caller: Caller,
    /// `None` for anonymous callers, who are told apart by connection.
    client: Option<u64>,
}

impl PartialEq for Principal {
    fn eq(&self, other: &Principal) -> bool {
        self.0.user == other.0.user
    }
}

impl Eq for Principal {}

/// Turns an authenticated user's name and groups into the request's caller:
/// the one function every authenticator ends in. `system:authenticated` is
/// added to the groups, as kube-apiserver's authenticator does.
pub fn principal(name: String, mut groups: Vec<String>) -> Principal {
    if name == ANONYMOUS {
        return anonymous();
    }
    if !groups.iter().any(|g| g == AUTHENTICATED_GROUP) {
        groups.push(AUTHENTICATED_GROUP.into());
    }
    let user = User { name, groups };
    let caller = caller_of(&user);
    let client = Some(client_number(&user.name));
    Principal(Arc::new(Inner {
        user,
        caller,
        client,
    }))
}

/// The caller without credentials (one shared value).
pub fn anonymous() -> Principal {
    static ANON: LazyLock<Principal> = LazyLock::new(|| {
        Principal(Arc::new(Inner {
            user: User {
                name: ANONYMOUS.into(),
                groups: vec![UNAUTHENTICATED_GROUP.into()],
            },
            caller: Caller::Anonymous,
            client: None,
        }))
    });
    ANON.clone()
}

/// What a user is here. A node is `system:node:NAME` in `system:nodes`, as
/// kube's node identifier has it (k8s.io/kubernetes
/// pkg/auth/nodeidentifier/default.go `NodeIdentity`).
fn caller_of(user: &User) -> Caller {
    if let Some(name) = user.name.strip_prefix(NODE_USER_PREFIX) {
        return match normalize_name(name) {
            Ok(name) if user.in_group(NODES_GROUP) => Caller::Node(name),
            _ => Caller::Limited,
        };
    }
    if user.in_group(NODES_GROUP)
        || user.in_group(BOOTSTRAPPERS_GROUP)
        || user.name.starts_with("system:bootstrap:")
    {
        return Caller::Limited;
    }
    Caller::Operator
}

/// A user's client number: the same for every credential of one user, so
/// a user's several tokens and certificates share one fair share.
fn client_number(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    // `DefaultHasher::new` has fixed keys: the same number every time.
    let mut hasher = std::hash::DefaultHasher::new();
    name.hash(&mut hasher);
    hasher.finish()
}

impl Principal {
    pub fn user(&self) -> &User {
        &self.0.user
    }

    pub fn caller(&self) -> &Caller {
        &self.0.caller
    }

    /// The client the request budgets count this caller as; `None` for an
    /// anonymous one.
    pub fn client(&self) -> Option<u64> {
        self.0.client
    }

    /// Whether this is the caller without credentials.
    pub fn is_anonymous(&self) -> bool {
        self.0.caller == Caller::Anonymous
    }
}

/// The caller a request was authenticated as, if the guard ran.
pub(super) fn of(parts: &Parts) -> Result<&Principal, Response> {
    parts.extensions.get::<Principal>().ok_or_else(|| {
        super::internal("the caller is unknown: the auth layer is not installed on this route")
    })
}

/// Handlers take `principal: Principal` for the user's name and groups.
/// A router without the auth layer is a bug: refuse rather than guess.
impl<S: Send + Sync> FromRequestParts<S> for Principal {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Principal, Response> {
        of(parts).cloned()
    }
}

/// Handlers take `caller: Caller`.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, Response> {
        of(parts).map(|p| p.caller().clone())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Identity {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Identity, Response> {
        of(parts).map(|p| Identity(p.user().name.clone()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn groups(names: &[&str]) -> Vec<String> {
        names.iter().map(|g| g.to_string()).collect()
    }

    #[test]
    fn a_node_is_its_user_in_the_nodes_group() {
        let node = principal("system:node:Edge-1".into(), groups(&[NODES_GROUP]));
        assert_eq!(node.caller(), &Caller::Node("edge-1".into()));
        assert_eq!(
            node.user().groups,
            groups(&[NODES_GROUP, AUTHENTICATED_GROUP])
        );
        // Named as a node without the group, or in the group without the
        // name: neither a node nor an operator.
        let named = principal("system:node:edge-1".into(), vec![]);
        assert_eq!(named.caller(), &Caller::Limited);
        let grouped = principal("alice".into(), groups(&[NODES_GROUP]));
        assert_eq!(grouped.caller(), &Caller::Limited);
        let bad = principal("system:node:".into(), groups(&[NODES_GROUP]));
        assert_eq!(bad.caller(), &Caller::Limited);
    }

    #[test]
    fn bootstrappers_are_limited_and_others_are_operators() {
        let boot = principal(
            "system:bootstrap:abcdef".into(),
            groups(&[BOOTSTRAPPERS_GROUP, "system:bootstrappers:site-a"]),
        );
        assert_eq!(boot.caller(), &Caller::Limited);
        let alice = principal("alice".into(), groups(&["admins"]));
        assert_eq!(alice.caller(), &Caller::Operator);
        assert_eq!(
            alice.user().groups,
            groups(&["admins", AUTHENTICATED_GROUP])
        );
        assert!(alice.client().is_some());
        // One user, one client, whatever credential it came with.
        assert_eq!(alice.client(), principal("alice".into(), vec![]).client());
        assert_ne!(alice.client(), boot.client());
    }

    #[test]
    fn the_anonymous_caller() {
        let anon = principal(ANONYMOUS.into(), vec![]);
        assert!(anon.is_anonymous());
        assert_eq!(anon.caller(), &Caller::Anonymous);
        assert_eq!(anon.client(), None);
        assert_eq!(anon.user().groups, groups(&[UNAUTHENTICATED_GROUP]));
    }
}
