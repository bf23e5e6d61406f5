//! The wire layer: the one place Kubernetes JSON is built and read.
//!
//! Everything a user sees as Kubernetes JSON (the HTTP API, `-o json|yaml`,
//! the mirror) is built here from the domain, so `kubectl` and client
//! libraries read it unchanged, and every object clients send (statuses,
//! Nodes, Leases) is read here into the domain. Its submodules also hold
//! Kubernetes' other wire rules (patches, selectors, list pages), which the
//! API, the mirror and the simulated API server share. It depends only on
//! the domain, [`crate::model`] (with its pure rules: validation, quantities,
//! durations), and on nothing above it.

pub(crate) mod csinode;
pub(crate) mod json_patch;
pub(crate) mod mirror_patch;
pub(crate) mod paging;
pub mod patch;
pub mod protobuf;
pub mod selectors;
pub(crate) mod table;
pub(crate) mod watch;

mod event;
mod json;
mod kubelet;
mod lease;
mod list;
mod node;
mod operator;
mod pod;
mod status;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use crate::model::Micros;

pub use event::{node_event, EVENT_LIST_HEAD};
pub use kubelet::{check_condition_types, node_registration, pushed_status, pushed_status_of};
pub use lease::{heartbeat_lease, kube_lease, lease, lease_list, LeaseJson, KUBELET_LEASE_SECONDS};
pub use list::{at_version, list, list_page, list_tail};
pub use node::{
    cpu_quantity, go_arch, memory_quantity, node, node_labels, node_list, NodeJson, Parts,
    TaintJson, NODE_LIST_HEAD,
};
pub use operator::{conditions_forbidden, operator_fields, ObjectError};
pub use pod::{pod_at_version, pod_identity, read_pod, typed_pod};
pub use status::{deleted, invalid, invalid_in_group, not_found, status_error, too_many_requests};

/// Annotation that records where a node came from (`static`, `cloud/<provider>`).
pub const SOURCE_ANNOTATION: &str = "nodekeeper.io/source";
/// Well-known label set to the node name unless the node sets it itself.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";
/// Well-known label set to `linux` unless the node sets it itself.
pub const OS_LABEL: &str = "kubernetes.io/os";
/// Pod capacity reported for every node: the kubelet's default `--max-pods`.
pub const MAX_PODS: &str = "110";
/// Where node events live: cluster-scoped objects' events go to `default`.
pub const EVENT_NAMESPACE: &str = "default";
/// `source.component` and `reportingComponent` of our events.
pub const EVENT_COMPONENT: &str = "nodekeeper";

/// Kubernetes `Time`, truncated to the second as the API server stores it.
pub fn time(t: Micros) -> Time {
    // Floor, as Go formats times: before the epoch too.
    let second = t.0.div_euclid(1_000_000);
    Time(jiff::Timestamp::from_second(second).unwrap_or(t.timestamp()))
}

/// Kubernetes omits empty strings (`omitempty`); so do we.
fn non_empty(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_string())
}

/// The `metadata.resourceVersion` a writer based its change on, if any.
pub fn expected_version(meta: &ObjectMeta) -> Result<Option<u64>, String> {
    match meta.resource_version.as_deref() {
        None | Some("") => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| format!("metadata.resourceVersion: Invalid value: {v:?}")),
    }
}

/// A Kubernetes time read into the domain's microseconds.
fn micros(t: &jiff::Timestamp) -> Micros {
    Micros(t.as_microsecond())
}
