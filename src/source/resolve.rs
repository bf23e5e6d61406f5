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

/// Resolves `host` to its first address (preferring IPv4), within `timeout`.
/// The error is the `ErrQueryIPAddress` message for the node's history.
pub async fn resolve_first(host: &str, timeout: Duration) -> Result<IpAddr, String> {
    let lookup = tokio::net::lookup_host((host, 0));
    let addrs: Vec<IpAddr> = match tokio::time::timeout(timeout, lookup).await {
        Err(_) => {
            return Err(format!(
                "unable to query IP address: looking up {host:?} took longer than {timeout:?}"
            ))
        }
        Ok(Err(e)) => return Err(format!("unable to query IP address of {host:?}: {e}")),
        Ok(Ok(addrs)) => addrs.map(|a| a.ip()).collect(),
    };
    addrs
        .iter()
        .find(|ip| ip.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("unable to query IP address: {host:?} has no addresses"))
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
        assert!(err.contains("unable to query IP address"), "{err}");
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
