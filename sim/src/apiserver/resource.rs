//! The resources the fake API server keeps, and the key of one object.

use std::fmt;

/// The resources the server keeps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Resource {
    /// `v1` Nodes, cluster-scoped, with a status subresource.
    Nodes,
    /// `coordination.k8s.io/v1` Leases, namespaced, no status subresource.
    Leases,
    /// `v1` Pods, namespaced, with a status subresource.
    Pods,
    /// `storage.k8s.io/v1` CSINodes, cluster-scoped, no status subresource
    /// (kubernetes `pkg/registry/storage/csinode/storage/storage.go`).
    CsiNodes,
}

impl Resource {
    /// The object kind, e.g. `Node`.
    pub const fn kind(self) -> &'static str {
        match self {
            Resource::Nodes => "Node",
            Resource::Leases => "Lease",
            Resource::Pods => "Pod",
            Resource::CsiNodes => "CSINode",
        }
    }

    /// The `apiVersion` of its objects.
    pub const fn api_version(self) -> &'static str {
        match self {
            Resource::Nodes | Resource::Pods => "v1",
            Resource::Leases => "coordination.k8s.io/v1",
            Resource::CsiNodes => "storage.k8s.io/v1",
        }
    }

    /// The resource name in paths, e.g. `nodes`.
    pub const fn plural(self) -> &'static str {
        match self {
            Resource::Nodes => "nodes",
            Resource::Leases => "leases",
            Resource::Pods => "pods",
            Resource::CsiNodes => "csinodes",
        }
    }

    pub(super) const fn group(self) -> &'static str {
        match self {
            Resource::Nodes | Resource::Pods => "",
            Resource::Leases => "coordination.k8s.io",
            Resource::CsiNodes => "storage.k8s.io",
        }
    }

    pub(super) const fn namespaced(self) -> bool {
        !matches!(self, Resource::Nodes | Resource::CsiNodes)
    }

    pub(super) const fn has_status(self) -> bool {
        !matches!(self, Resource::Leases | Resource::CsiNodes)
    }

    /// Pod storage answers a delete with the pod; the others with a `Status`.
    pub(super) const fn returns_deleted_object(self) -> bool {
        matches!(self, Resource::Pods)
    }

    /// The fields a `fieldSelector` may name: the field label conversion
    /// functions kube-apiserver registers (kubernetes/kubernetes
    /// `pkg/apis/core/v1/conversion.go`, `addConversionFuncs`; Leases take
    /// the default, `metadata.name` and `metadata.namespace`). A Pod's
    /// `spec.host` is the old name of `spec.nodeName`.
    pub(super) const fn field_labels(self) -> &'static [&'static str] {
        match self {
            Resource::Nodes => &["metadata.name", "spec.unschedulable"],
            Resource::Leases => &["metadata.name", "metadata.namespace"],
            Resource::CsiNodes => &["metadata.name"],
            Resource::Pods => &[
                "metadata.name",
                "metadata.namespace",
                "spec.nodeName",
                "spec.restartPolicy",
                "spec.schedulerName",
                "spec.serviceAccountName",
                "spec.hostNetwork",
                "status.phase",
                "status.podIP",
                "status.podIPs",
                "status.nominatedNodeName",
                "spec.host",
            ],
        }
    }

    /// The resource as error messages name it: `nodes`, `leases.coordination.k8s.io`.
    pub(super) fn qualified(self) -> String {
        match self.group() {
            "" => self.plural().to_owned(),
            group => format!("{}.{group}", self.plural()),
        }
    }
}

/// One object: its resource, namespace (empty for nodes) and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub resource: Resource,
    pub namespace: String,
    pub name: String,
}

impl ObjectKey {
    /// The node `name`.
    pub fn node(name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            resource: Resource::Nodes,
            namespace: String::new(),
            name: name.into(),
        }
    }

    /// The lease `namespace/name`.
    pub fn lease(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            resource: Resource::Leases,
            namespace: namespace.into(),
            name: name.into(),
        }
    }

    /// The CSINode `name`.
    pub fn csinode(name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            resource: Resource::CsiNodes,
            namespace: String::new(),
            name: name.into(),
        }
    }

    /// The pod `namespace/name`.
    pub fn pod(namespace: impl Into<String>, name: impl Into<String>) -> ObjectKey {
        ObjectKey {
            resource: Resource::Pods,
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}/{}", self.resource.plural(), self.name)
        } else {
            write!(
                f,
                "{}/{}/{}",
                self.resource.plural(),
                self.namespace,
                self.name
            )
        }
    }
}
