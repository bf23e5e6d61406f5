//! What a kubelet pushes: the part of a node's status it reports, as read
//! from its status update, before the controller folds it into the node.

use super::{Address, ConditionStatus, Micros, NodeInfo, Reported, Resources};

/// One pushed condition, as the kubelet wrote it.
#[derive(Debug, Clone, PartialEq)]
pub struct PushedCondition {
    pub kind: String,
    pub status: ConditionStatus,
    /// The kubelet's own clock: shown, compared only with its previous value.
    pub last_heartbeat: Option<Micros>,
    pub reason: String,
    pub message: String,
}

/// The part of a node's status a kubelet reports.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PushedStatus {
    pub conditions: Vec<PushedCondition>,
    pub addresses: Option<Vec<Address>>,
    pub node_info: Option<NodeInfo>,
    pub capacity: Option<Resources>,
    /// Images, daemon endpoints, runtime handlers, features and volumes,
    /// all six as they are to be kept, when the write names any of them.
    pub reported: Option<Reported>,
}
