//! The taints the controller owns: it adds and removes these keys, and every
//! other taint on a node is an operator's. The controller, the API's writes
//! and the mirror all draw the line here.

/// Set while a node's Ready condition is False.
pub const TAINT_NOT_READY: &str = "node.kubernetes.io/not-ready";
/// Set while a node's Ready condition is Unknown.
pub const TAINT_UNREACHABLE: &str = "node.kubernetes.io/unreachable";
/// Set while the cloud provider reports the node's instance stopped.
pub const TAINT_SHUTDOWN: &str = "node.cloudprovider.kubernetes.io/shutdown";

/// The taints the controller adds and removes; every other taint is an operator's.
pub const MANAGED_TAINTS: [&str; 3] = [TAINT_NOT_READY, TAINT_UNREACHABLE, TAINT_SHUTDOWN];

/// Whether the controller manages taints with this key.
pub fn is_managed_taint(key: &str) -> bool {
    MANAGED_TAINTS.contains(&key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn operators_own_every_other_taint() {
        assert!(MANAGED_TAINTS.iter().all(|k| is_managed_taint(k)));
        assert!(!is_managed_taint("dedicated"));
        assert!(!is_managed_taint("node.kubernetes.io/unschedulable"));
    }
}
