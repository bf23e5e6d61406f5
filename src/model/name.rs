//! Node names: what a node may be called (an IP address or a DNS-1123
//! subdomain, lowercased), the rule every way a node arrives shares.

use std::net::IpAddr;

/// Why a node name is refused. Every message quotes the name and says what
/// a valid one looks like.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InvalidName {
    /// Nothing but whitespace.
    #[error("empty node name: give a host name or an IP address")]
    Empty,
    /// Digits and dots that do not make an IPv4 address (`10.0.0.300`).
    #[error(
        "{name:?} looks like an IPv4 address but is not one: write four numbers from 0 to 255, \
         without leading zeros, such as 10.0.0.30"
    )]
    NotQuiteIpv4 { name: String },
    /// Over the 253 characters of a DNS-1123 subdomain.
    #[error("{name:?} is longer than 253 characters")]
    TooLong { name: String },
    /// Neither an IP address nor a DNS-1123 subdomain.
    #[error(
        "{name:?} is neither an IP address nor a DNS-1123 subdomain \
         (lowercase letters, digits, '-' and '.', each part 1-63 characters, starting and ending alphanumeric)"
    )]
    NotDns1123 { name: String },
}

/// Validates a node name: lowercased, an IP address or a DNS-1123 subdomain.
/// The errors quote the name as given.
pub fn normalize_name(raw: &str) -> Result<String, InvalidName> {
    let name = raw.trim().to_ascii_lowercase();
    if name.is_empty() {
        return Err(InvalidName::Empty);
    }
    if name.parse::<IpAddr>().is_ok() {
        return Ok(name);
    }
    if let Some(reason) = not_quite_ipv4(&name) {
        return Err(reason);
    }
    if name.len() > 253 {
        return Err(InvalidName::TooLong { name: raw.into() });
    }
    for label in name.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && label
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !label.starts_with('-')
            && !label.ends_with('-');
        if !ok {
            return Err(InvalidName::NotDns1123 { name: raw.into() });
        }
    }
    Ok(name)
}

/// A name of digits and dots is an IPv4 address with a typo (`10.0.0.300`,
/// `10.0.0.01`, `10.0.0`), never a host name: resolvers read such names as
/// addresses, so registering one would probe some other machine.
pub fn not_quite_ipv4(name: &str) -> Option<InvalidName> {
    let numeric = name.contains('.') && name.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    numeric.then(|| InvalidName::NotQuiteIpv4 { name: name.into() })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercased_and_validated() {
        assert_eq!(normalize_name(" Edge-1.Site "), Ok("edge-1.site".into()));
        assert_eq!(normalize_name("10.0.0.7"), Ok("10.0.0.7".into()));
        assert_eq!(normalize_name("fd00::1"), Ok("fd00::1".into()));
        assert_eq!(normalize_name("  "), Err(InvalidName::Empty));
        assert_eq!(
            normalize_name(&"a".repeat(254)),
            Err(InvalidName::TooLong {
                name: "a".repeat(254)
            })
        );
        for bad in ["-a", "a-", "a..b", "a_b", "über", &"x".repeat(64)] {
            assert_eq!(
                normalize_name(bad),
                Err(InvalidName::NotDns1123 { name: bad.into() }),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn dotted_quads_that_are_not_ipv4_addresses_are_refused() {
        for typo in [
            "10.0.0.300",
            "10.0.0.01",
            "10.0.0",
            "1.2.3.4.5",
            "256.1.1.1",
            "10..0.1",
        ] {
            let err = normalize_name(typo).unwrap_err();
            assert_eq!(err, InvalidName::NotQuiteIpv4 { name: typo.into() });
            assert!(err.to_string().contains("IPv4 address"), "{typo}: {err}");
        }
        assert_eq!(normalize_name("10.0.0.30"), Ok("10.0.0.30".into()));
        assert_eq!(normalize_name("rack10.0"), Ok("rack10.0".into()));
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn names_normalize_once(raw in "\\PC{0,40}") {
                if let Ok(name) = normalize_name(&raw) {
                    prop_assert_eq!(normalize_name(&name), Ok(name.clone()));
                    prop_assert!(name.len() <= 253 || name.parse::<IpAddr>().is_ok());
                }
            }
        }
    }
}
