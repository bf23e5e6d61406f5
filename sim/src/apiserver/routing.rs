//! Routing: which resource, namespace and part of an object a URL path
//! names, and the query parameters.

use std::collections::HashMap;

use hyper::Method;

use super::resource::Resource;

/// What a path names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Route {
    pub(super) resource: Resource,
    /// `None` for cluster-scoped resources and all-namespace lists.
    pub(super) namespace: Option<String>,
    pub(super) target: Target,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    Collection,
    Object(String),
    Status(String),
}

/// Which part of an object a write changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Part {
    /// The main resource: everything but `.status`.
    Main,
    /// The `/status` subresource: `.status` only.
    Status,
}

/// Maps a URL path to a resource, or `None` for paths the server does not serve.
pub(super) fn route(path: &str) -> Option<Route> {
    let segments: Vec<&str> = path.strip_prefix('/')?.split('/').collect();
    let (group, rest) = match segments.as_slice() {
        ["api", "v1", rest @ ..] => ("", rest),
        ["apis", "coordination.k8s.io", "v1", rest @ ..] => ("coordination.k8s.io", rest),
        ["apis", "storage.k8s.io", "v1", rest @ ..] => ("storage.k8s.io", rest),
        _ => return None,
    };
    let (namespace, plural, tail) = match rest {
        ["namespaces", ns, plural, tail @ ..] if !ns.is_empty() => {
            (Some((*ns).to_owned()), *plural, tail)
        }
        [plural, tail @ ..] => (None, *plural, tail),
        [] => return None,
    };
    let resource = match (group, plural) {
        ("", "nodes") => Resource::Nodes,
        ("", "pods") => Resource::Pods,
        ("coordination.k8s.io", "leases") => Resource::Leases,
        ("storage.k8s.io", "csinodes") => Resource::CsiNodes,
        _ => return None,
    };
    // Nodes have no namespace; namespaced objects need theirs (only their
    // collection is served across all namespaces, for lists).
    match (resource.namespaced(), namespace.is_some()) {
        (false, true) => return None,
        (true, false) if !tail.is_empty() => return None,
        _ => {}
    }
    let target = match tail {
        [] => Target::Collection,
        [name] if !name.is_empty() => Target::Object((*name).to_owned()),
        [name, "status"] if !name.is_empty() && resource.has_status() => {
            Target::Status((*name).to_owned())
        }
        _ => return None,
    };
    Some(Route {
        resource,
        namespace,
        target,
    })
}

/// The query parameters, last one wins.
pub(super) struct Query(HashMap<String, String>);

impl Query {
    pub(super) fn parse(query: &str) -> Query {
        Query(
            form_urlencoded::parse(query.as_bytes())
                .into_owned()
                .collect(),
        )
    }

    pub(super) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    pub(super) fn dry_run(&self) -> bool {
        self.get("dryRun") == Some("All")
    }

    pub(super) fn watch(&self) -> bool {
        self.flag("watch")
    }

    /// A boolean option as kube-apiserver reads a ListOptions
    /// (`runtime.Convert_Slice_string_To_bool`, apimachinery
    /// `pkg/runtime/conversion.go`): absent, `0` or `false` in any case is
    /// false; any other value, the empty one included, is true.
    pub(super) fn flag(&self, name: &str) -> bool {
        self.0
            .get(name)
            .is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
    }
}

/// One API request, after routing.
pub(super) struct Call<'a> {
    pub(super) method: &'a Method,
    pub(super) route: Route,
    pub(super) query: Query,
    pub(super) content_type: &'a str,
    pub(super) body: &'a [u8],
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes() {
        let r = |p: &str| route(p).map(|r| (r.resource, r.namespace, r.target));
        assert_eq!(
            r("/api/v1/nodes/n1/status"),
            Some((Resource::Nodes, None, Target::Status("n1".into())))
        );
        assert_eq!(
            r("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1"),
            Some((
                Resource::Leases,
                Some("kube-node-lease".into()),
                Target::Object("n1".into())
            ))
        );
        assert_eq!(
            r("/api/v1/pods"),
            Some((Resource::Pods, None, Target::Collection))
        );
        for missing in [
            "/api/v1/pods/p",
            "/api/v1/namespaces/x/nodes",
            "/apis/coordination.k8s.io/v1/namespaces/x/leases/n1/status",
            "/api/v1/nodes/",
            "/api/v1",
            "/apis/apps/v1/deployments",
            "",
        ] {
            assert_eq!(r(missing), None, "{missing}");
        }
    }
}
