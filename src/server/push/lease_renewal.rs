//! A Lease renewal as kubelets send it (`PUT .../leases/{name}`, every
//! 10 s), read straight into the domain's [`Lease`]: the Lease as it was
//! answered last with a new `renewTime`, its strings borrowed from the body.
//! Any other shape (another field, a `null`, a key twice, a value of
//! another type, escapes aside) or a renewal the checks refuse is not read
//! here: it takes the general path (k8s-openapi's `Lease`, then
//! [`crate::kube::lease`]), which also says what is refused.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};
use serde::Deserialize;

use super::text::{present, Text};
use crate::model::{Lease, Micros, NODE_LEASE_NAMESPACE};

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    bound(deserialize = "'de: 'a")
)]
struct Body<'a> {
    #[serde(default, deserialize_with = "present")]
    api_version: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    kind: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    metadata: Option<Metadata<'a>>,
    #[serde(default, deserialize_with = "present")]
    spec: Option<Spec<'a>>,
}

/// The metadata a Lease is answered with, which a kubelet sends back.
#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    bound(deserialize = "'de: 'a")
)]
#[allow(dead_code)] // uid and creationTimestamp are read to be checked as the general path does.
struct Metadata<'a> {
    #[serde(default, deserialize_with = "present")]
    name: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    namespace: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    uid: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    resource_version: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    creation_timestamp: Option<Time>,
}

#[derive(Deserialize)]
#[serde(
    deny_unknown_fields,
    rename_all = "camelCase",
    bound(deserialize = "'de: 'a")
)]
struct Spec<'a> {
    #[serde(default, deserialize_with = "present")]
    holder_identity: Option<Text<'a>>,
    #[serde(default, deserialize_with = "present")]
    lease_duration_seconds: Option<i32>,
    #[serde(default, deserialize_with = "present")]
    acquire_time: Option<MicroTime>,
    #[serde(default, deserialize_with = "present")]
    renew_time: Option<MicroTime>,
    #[serde(default, deserialize_with = "present")]
    lease_transitions: Option<i32>,
}

/// The Lease a renewal `body` of the Lease `path_name` writes, and the
/// version it expects, as the general path reads them; `None` when the body
/// is of another shape or the general path would refuse it.
pub(in crate::server) fn read(body: &[u8], path_name: &str) -> Option<(Lease, Option<u64>)> {
    let Body {
        api_version,
        kind,
        metadata,
        spec,
    } = serde_json::from_slice(body).ok()?;
    let is =
        |given: &Option<Text>, wanted: &str| given.as_ref().is_none_or(|t| t.as_str() == wanted);
    if !is(&api_version, "coordination.k8s.io/v1") || !is(&kind, "Lease") {
        return None;
    }
    let expected = match metadata {
        Some(meta) => {
            if !is(&meta.name, path_name) || !is(&meta.namespace, NODE_LEASE_NAMESPACE) {
                return None;
            }
            match meta.resource_version.as_ref().map(Text::as_str) {
                None | Some("") => None,
                Some(version) => Some(version.parse().ok()?),
            }
        }
        None => None,
    };
    let spec = spec.unwrap_or(Spec {
        holder_identity: None,
        lease_duration_seconds: None,
        acquire_time: None,
        renew_time: None,
        lease_transitions: None,
    });
    if spec.lease_duration_seconds.is_some_and(|d| d <= 0) {
        return None;
    }
    let micros = |t: MicroTime| Micros(t.0.as_microsecond());
    let lease = Lease {
        name: path_name.to_string(),
        uid: String::new(),
        created: Micros(0),
        generation: 0,
        holder_identity: spec.holder_identity.map(Text::into_owned),
        lease_duration_seconds: spec.lease_duration_seconds,
        acquire_time: spec.acquire_time.map(micros),
        renew_time: spec.renew_time.map(micros),
        lease_transitions: spec.lease_transitions,
    };
    Some((lease, expected))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::coordination::v1::Lease as KubeLease;
    use proptest::prelude::*;
    use serde_json::{json, Value};

    use super::*;

    /// The general path: k8s-openapi's Lease, read into the domain.
    fn general(body: &[u8], path_name: &str) -> Result<(Lease, Option<u64>), String> {
        let kube: KubeLease = serde_json::from_slice(body).map_err(|e| e.to_string())?;
        let lease = crate::kube::lease(&kube, path_name)?;
        let expected = crate::kube::expected_version(&kube.metadata)?;
        Ok((lease, expected))
    }

    /// Both paths on the same body: the fast one reads it, and gives what
    /// the general one gives.
    fn same_as_the_general_path(body: &Value) -> (Lease, Option<u64>) {
        let bytes = serde_json::to_vec(body).unwrap();
        let read = read(&bytes, "edge-1").unwrap_or_else(|| panic!("read: {body}"));
        assert_eq!(Ok(read.clone()), general(&bytes, "edge-1"), "{body}");
        read
    }

    /// A renewal as a simulated kubelet sends it.
    fn renewal() -> Value {
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "edge-1", "namespace": "kube-node-lease"},
            "spec": {
                "holderIdentity": "edge-1",
                "leaseDurationSeconds": 40,
                "renewTime": "2026-12-02T11:30:10.123456Z",
            },
        })
    }

    #[test]
    fn a_kubelets_renewal_is_read_as_the_general_path_reads_it() {
        let (lease, expected) = same_as_the_general_path(&renewal());
        assert_eq!(lease.holder_identity.as_deref(), Some("edge-1"));
        assert_eq!(
            lease.renew_time,
            Some(Micros::parse_rfc3339("2026-12-02T11:30:10.123456Z").unwrap())
        );
        assert_eq!(expected, None);
        // A real kubelet sends back the Lease it was answered with.
        let answered = json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "creationTimestamp": "2026-12-02T11:00:00Z", "name": "edge-1",
                "namespace": "kube-node-lease", "resourceVersion": "12346",
                "uid": "7a1f3c52-08d4-4c8e-b1b4-5b0c9e7d2a11",
            },
            "spec": {
                "acquireTime": "2026-12-02T11:00:00.000001Z", "holderIdentity": "edge \"1\"",
                "leaseDurationSeconds": 40, "leaseTransitions": 1,
                "renewTime": "2026-12-02T11:30:10.123456Z",
            },
        });
        let (lease, expected) = same_as_the_general_path(&answered);
        assert_eq!(expected, Some(12346));
        assert_eq!(lease.holder_identity.as_deref(), Some("edge \"1\""));
        same_as_the_general_path(&json!({}));
        same_as_the_general_path(&json!({"metadata": {"resourceVersion": ""}}));
    }

    #[test]
    fn any_other_shape_or_a_refused_renewal_takes_the_general_path() {
        let mut cases = Vec::new();
        for (path, value) in [
            ("/apiVersion", json!("coordination.k8s.io/v1beta1")),
            ("/kind", json!("Node")),
            ("/metadata/name", json!("edge-2")),
            ("/metadata/namespace", json!("default")),
            ("/metadata/resourceVersion", json!("twelve")),
            ("/metadata/labels", json!({"a": "b"})),
            ("/metadata/uid", json!(5)),
            ("/metadata/creationTimestamp", json!("yesterday")),
            ("/spec/leaseDurationSeconds", json!(0)),
            ("/spec/leaseDurationSeconds", json!(-3)),
            ("/spec/leaseDurationSeconds", json!(4.5)),
            ("/spec/renewTime", json!("soon")),
            ("/spec/holderIdentity", Value::Null),
            ("/spec/strategy", json!("OldestEmulationVersion")),
            ("/spec", Value::Null),
            ("/status", json!({})),
        ] {
            let mut body = renewal();
            let (parent, key) = path.rsplit_once('/').unwrap();
            body.pointer_mut(parent).unwrap()[key] = value;
            cases.push(serde_json::to_vec(&body).unwrap());
        }
        cases.push(b"[1]".to_vec());
        cases.push(b"{} x".to_vec());
        cases.push(br#"{"kind": "Lease", "kind": "Lease"}"#.to_vec());
        for body in cases {
            assert!(
                read(&body, "edge-1").is_none(),
                "{}",
                String::from_utf8_lossy(&body)
            );
        }
    }

    /// A renewal body: each field given, left out, null, or of another type.
    fn arbitrary_body() -> impl Strategy<Value = Value> {
        let field = |values: Vec<Value>| proptest::option::of(proptest::sample::select(values));
        (
            field(vec![
                json!("coordination.k8s.io/v1"),
                json!("v1"),
                Value::Null,
            ]),
            field(vec![json!("edge-1"), json!("edge-2"), json!(""), json!(1)]),
            field(vec![
                json!("kube-node-lease"),
                json!("default"),
                Value::Null,
            ]),
            field(vec![
                json!("7"),
                json!(""),
                json!("x"),
                json!(7),
                Value::Null,
            ]),
            field(vec![
                json!("edge-1"),
                json!("a\"b"),
                Value::Null,
                json!(true),
            ]),
            field(vec![
                json!(40),
                json!(0),
                json!(-1),
                json!(1e3),
                Value::Null,
            ]),
            field(vec![
                json!("2026-12-02T11:30:10.123456Z"),
                json!("2026-12-02T11:30:10Z"),
                json!("soon"),
                Value::Null,
            ]),
            field(vec![json!(0), json!(2), json!("2"), Value::Null]),
        )
            .prop_map(
                |(api_version, name, namespace, version, holder, duration, renew, transitions)| {
                    let mut body = json!({"metadata": {}, "spec": {}});
                    let mut set = |path: &str, value: Option<Value>| {
                        if let Some(v) = value {
                            let (parent, key) = path.rsplit_once('/').unwrap();
                            body.pointer_mut(parent).unwrap()[key] = v;
                        }
                    };
                    set("/apiVersion", api_version);
                    set("/metadata/name", name);
                    set("/metadata/namespace", namespace);
                    set("/metadata/resourceVersion", version);
                    set("/spec/holderIdentity", holder);
                    set("/spec/leaseDurationSeconds", duration);
                    set("/spec/renewTime", renew);
                    set("/spec/leaseTransitions", transitions);
                    body
                },
            )
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]
        /// Whatever the fast path reads, the general path gives too.
        #[test]
        fn what_the_fast_path_reads_the_general_path_gives_too(body in arbitrary_body()) {
            let bytes = serde_json::to_vec(&body).unwrap();
            if let Some(read) = read(&bytes, "edge-1") {
                prop_assert_eq!(Ok(read), general(&bytes, "edge-1"), "{}", body);
            }
        }
    }
}
