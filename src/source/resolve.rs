//! Name resolution for static nodes: the ancestor's `PopulateAddresses`.

use std::net::IpAddr;
use std::time::Duration;

use crate::model::{Address, AddressKind};

/// The host to resolve for a node that has no IP address yet: its Hostname
/// address if the source gave one, else its name. `None` if it has an IP.
pub fn host_to_resolve<'a>(name: &'a str, addresses: &'a [Address]) -> Option<&'a str> {
    let has_ip = addresses
        .iter()
        .any(|a| matches!(a.kind, AddressKind::InternalIP | AddressKind::ExternalIP));
    if has_ip {
        return None;
    }
    Some(
        addresses
            .iter()
            .find(|a| a.kind == AddressKind::Hostname)
            .map_or(name, |a| a.address.as_str()),
    )
}

/// The seed's `ErrQueryIPAddress`: why a node's name gave no address. The
/// message goes into the node's history as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LookupError {
    /// The resolver did not answer in time.
    #[error("unable to query IP address: looking up {host:?} took longer than {timeout:?}")]
    TimedOut { host: String, timeout: Duration },
    /// The resolver answered with an error (no such name, no resolver).
    #[error("unable to query IP address of {host:?}: {reason}")]
    Failed { host: String, reason: String },
    /// The name exists but has no address.
    #[error("unable to query IP address: {host:?} has no addresses")]
    NoAddresses { host: String },
}

/// What a lookup found for a node: its address, or why there is none.
pub type Lookup = Result<IpAddr, LookupError>;

/// Resolves `host` to its first address (preferring IPv4), within `timeout`.
pub async fn resolve_first(host: &str, timeout: Duration) -> Lookup {
    let lookup = tokio::net::lookup_host((host, 0));
    let addrs: Vec<IpAddr> = match tokio::time::timeout(timeout, lookup).await {
        Err(_) => {
            return Err(LookupError::TimedOut {
                host: host.into(),
                timeout,
            })
        }
        Ok(Err(e)) => {
            return Err(LookupError::Failed {
                host: host.into(),
                reason: e.to_string(),
            })
        }
        Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
    };
    addrs
        .iter()
        .find(|ip| ip.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| LookupError::NoAddresses { host: host.into() })
}

/// The addresses after a successful lookup: the resolved InternalIP first,
/// then whatever was known.
pub fn with_resolved(addresses: &[Address], ip: IpAddr) -> Vec<Address> {
    let mut out = vec![Address {
        kind: AddressKind::InternalIP,
        address: ip.to_string(),
    }];
    out.extend(
        addresses
            .iter()
            .filter(|a| a.kind != AddressKind::InternalIP)
            .cloned(),
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn localhost_resolves_and_nonsense_does_not() {
        let ip = resolve_first("localhost", Duration::from_secs(5))
            .await
            .unwrap();
        assert!(ip.is_loopback());
        let err = resolve_first("no-such-host.invalid", Duration::from_secs(5))
            .await
            .unwrap_err();
        assert!(matches!(err, LookupError::Failed { .. }), "{err:?}");
        assert!(
            err.to_string()
                .starts_with("unable to query IP address of \"no-such-host.invalid\": "),
            "{err}"
        );
    }

    #[test]
    fn lookup_errors_read_as_before() {
        assert_eq!(
            LookupError::TimedOut {
                host: "edge-1".into(),
                timeout: Duration::from_secs(2)
            }
            .to_string(),
            "unable to query IP address: looking up \"edge-1\" took longer than 2s"
        );
        assert_eq!(
            LookupError::NoAddresses {
                host: "edge-1".into()
            }
            .to_string(),
            "unable to query IP address: \"edge-1\" has no addresses"
        );
    }

    #[test]
    fn only_nodes_without_an_ip_are_resolved() {
        let ip = [Address {
            kind: AddressKind::InternalIP,
            address: "10.0.0.1".into(),
        }];
        assert_eq!(host_to_resolve("a", &ip), None);
        assert_eq!(host_to_resolve("a", &[]), Some("a"));
        let host = [Address {
            kind: AddressKind::Hostname,
            address: "h.local".into(),
        }];
        assert_eq!(host_to_resolve("a", &host), Some("h.local"));
        assert_eq!(
            with_resolved(&host, "10.0.0.9".parse().unwrap())[1],
            host[0]
        );
    }
}
