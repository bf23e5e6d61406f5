//! What an operator owns on a node, as one write asks for it: read from a
//! Kubernetes object by [`crate::k8s`], folded into the node by the
//! controller (`controller::operator::fold`).

use std::collections::BTreeMap;

use super::Taint;

/// The fields an operator owns, as a write wants them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct OperatorFields {
    /// The node's own labels (the well-known defaults left out when they
    /// are only defaults).
    pub labels: BTreeMap<String, String>,
    /// Annotations, the source annotation aside.
    pub annotations: BTreeMap<String, String>,
    pub unschedulable: bool,
    /// The taints the controller does not manage, in order.
    pub taints: Vec<Taint>,
}
