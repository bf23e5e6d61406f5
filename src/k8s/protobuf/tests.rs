use prost::encoding::{encode_key, encode_varint, WireType};
use serde_json::json;

use super::*;

/// [`to_json`], read back as a `Value`.
fn to_value(body: &[u8]) -> Result<serde_json::Value, ProtobufError> {
    to_json(body).map(|json| serde_json::from_slice(&json).expect("valid JSON"))
}

/// Protobuf fields, written by hand from the `.proto` definitions.
fn text(tag: u32, s: &str) -> Vec<u8> {
    bytes_field(tag, s.as_bytes())
}

fn bytes_field(tag: u32, b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(tag, WireType::LengthDelimited, &mut out);
    encode_varint(b.len() as u64, &mut out);
    out.extend_from_slice(b);
    out
}

fn varint(tag: u32, v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    encode_key(tag, WireType::Varint, &mut out);
    encode_varint(v, &mut out);
    out
}

fn message(tag: u32, parts: &[Vec<u8>]) -> Vec<u8> {
    bytes_field(tag, &parts.concat())
}

fn envelope(api_version: &str, kind: &str, object: &[u8]) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend(message(1, &[text(1, api_version), text(2, kind)]));
    out.extend(bytes_field(2, object));
    // As Go writes them: the empty strings too.
    out.extend(text(3, ""));
    out.extend(text(4, ""));
    out
}

fn time(tag: u32, seconds: u64, nanos: u64) -> Vec<u8> {
    message(tag, &[varint(1, seconds), varint(2, nanos)])
}

/// A kubelet's Lease as `component-helpers/apimachinery/lease/controller.go`
/// `newLease` builds it: name, namespace, an owner reference to its Node,
/// holder, duration and renew time.
#[test]
fn a_kubelet_lease_reads_as_its_json() {
    let meta = message(
        1,
        &[
            text(1, "edge-1"),
            text(2, ""),
            text(3, "kube-node-lease"),
            text(6, ""),
            // The zero creationTimestamp: an empty message.
            bytes_field(8, &[]),
            message(
                13,
                &[
                    text(1, "Node"),
                    text(3, "edge-1"),
                    text(4, "1b4e28ba-2fa1-11d2-883f-0016d3cca427"),
                    text(5, "v1"),
                ],
            ),
        ],
    );
    let spec = message(
        2,
        &[
            text(1, "edge-1"),
            varint(2, 40),
            time(4, 1_796_000_000, 123_456_789),
        ],
    );
    let body = envelope("coordination.k8s.io/v1", "Lease", &[meta, spec].concat());
    assert_eq!(
        to_value(&body).unwrap(),
        json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": "edge-1",
                "namespace": "kube-node-lease",
                "ownerReferences": [{
                    "kind": "Node",
                    "name": "edge-1",
                    "uid": "1b4e28ba-2fa1-11d2-883f-0016d3cca427",
                    "apiVersion": "v1",
                }],
            },
            "spec": {
                "holderIdentity": "edge-1",
                "leaseDurationSeconds": 40,
                "renewTime": "2026-11-30T00:53:20.123456Z",
            },
        })
    );
}

#[test]
fn a_node_reads_with_its_maps_lists_and_times() {
    let meta = message(
        1,
        &[
            text(1, "edge-1"),
            message(11, &[text(1, "kubernetes.io/os"), text(2, "linux")]),
            message(11, &[text(1, "kubernetes.io/hostname"), text(2, "edge-1")]),
            message(
                12,
                &[
                    text(1, "volumes.kubernetes.io/controller-managed-attach-detach"),
                    text(2, "true"),
                ],
            ),
        ],
    );
    let spec = message(2, &[varint(4, 0), text(3, "")]);
    let quantity =
        |key: &str, value: &str| message(1, &[text(1, key), message(2, &[text(1, value)])]);
    let status = message(
        3,
        &[
            quantity("cpu", "4"),
            quantity("memory", "8Gi"),
            message(
                4,
                &[
                    text(1, "Ready"),
                    text(2, "True"),
                    time(3, 1_796_000_000, 5),
                    time(4, 1_796_000_000, 0),
                    text(5, "KubeletReady"),
                    text(6, "kubelet is posting ready status"),
                ],
            ),
            message(5, &[text(1, "InternalIP"), text(2, "127.0.0.5")]),
            message(6, &[message(1, &[varint(1, 10250)])]),
            message(
                7,
                &[text(7, "v1.33.13"), text(9, "linux"), text(10, "amd64")],
            ),
            message(
                8,
                &[text(1, "registry.k8s.io/pause:3.10"), varint(2, 320_000)],
            ),
        ],
    );
    let body = envelope("v1", "Node", &[meta, spec, status].concat());
    let node = to_value(&body).unwrap();
    assert_eq!(
        node,
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "edge-1",
                "labels": {"kubernetes.io/os": "linux", "kubernetes.io/hostname": "edge-1"},
                "annotations": {"volumes.kubernetes.io/controller-managed-attach-detach": "true"},
            },
            "status": {
                "capacity": {"cpu": "4", "memory": "8Gi"},
                "conditions": [{
                    "type": "Ready",
                    "status": "True",
                    "lastHeartbeatTime": "2026-11-30T00:53:20Z",
                    "lastTransitionTime": "2026-11-30T00:53:20Z",
                    "reason": "KubeletReady",
                    "message": "kubelet is posting ready status",
                }],
                "addresses": [{"type": "InternalIP", "address": "127.0.0.5"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {"kubeletVersion": "v1.33.13", "operatingSystem": "linux", "architecture": "amd64"},
                "images": [{"names": ["registry.k8s.io/pause:3.10"], "sizeBytes": 320000}],
            },
        })
    );
    // And k8s-openapi reads it, as the handlers do.
    let _: k8s_openapi::api::core::v1::Node = serde_json::from_value(node).unwrap();
}

#[test]
fn negative_int32_values_are_sign_extended() {
    let spec = message(2, &[varint(2, (-1i64) as u64)]);
    let body = envelope("coordination.k8s.io/v1", "Lease", &spec);
    assert_eq!(to_value(&body).unwrap()["spec"]["leaseDurationSeconds"], -1);
}

#[test]
fn unknown_fields_are_skipped_and_bad_bodies_refused() {
    // Field 99 (a varint) and 98 (bytes) are in no schema.
    let meta = message(1, &[text(1, "n"), varint(99, 7), text(98, "x")]);
    let body = envelope("storage.k8s.io/v1", "CSINode", &meta);
    assert_eq!(
        to_value(&body).unwrap(),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "CSINode", "metadata": {"name": "n"}})
    );
    assert_eq!(
        to_value(b"{\"kind\":\"Lease\"}"),
        Err(ProtobufError::NoMagic)
    );
    let secret = envelope("v1", "Secret", &[]);
    assert_eq!(
        to_value(&secret).unwrap_err().to_string(),
        "no kind \"Secret\" is registered for version \"v1\" in protobuf; send it as application/json"
    );
    // A length past the end.
    let mut cut = MAGIC.to_vec();
    cut.extend(message(1, &[text(1, "v1"), text(2, "Node")]));
    cut.extend(bytes_field(2, &message(1, &[text(1, "n")])));
    cut.truncate(cut.len() - 2);
    assert!(
        matches!(to_value(&cut), Err(ProtobufError::Wire(_))),
        "{:?}",
        to_value(&cut)
    );
    // A string where a message is expected.
    let wrong = envelope("v1", "Node", &varint(1, 5));
    assert!(matches!(
        to_value(&wrong),
        Err(ProtobufError::WireType {
            field: "metadata",
            ..
        })
    ));
    let mut gzip = MAGIC.to_vec();
    gzip.extend(message(1, &[text(1, "v1"), text(2, "Node")]));
    gzip.extend(text(3, "gzip"));
    assert_eq!(to_value(&gzip), Err(ProtobufError::Encoding("gzip".into())));
    let not_utf8 = envelope("v1", "Node", &message(1, &[bytes_field(1, &[0xff, 0xfe])]));
    assert_eq!(to_value(&not_utf8), Err(ProtobufError::Utf8("name")));
}

#[test]
fn the_media_type_is_read_without_its_parameters() {
    assert!(is_protobuf("application/vnd.kubernetes.protobuf"));
    assert!(is_protobuf(
        "application/vnd.kubernetes.protobuf; charset=binary"
    ));
    assert!(!is_protobuf("application/json"));
}

#[test]
fn strings_are_escaped_and_a_field_sent_twice_takes_its_last_value() {
    let meta = message(
        1,
        &[
            text(1, "first"),
            text(1, "edge-\"1\"\n"),
            message(12, &[text(1, "a"), text(2, "1")]),
            message(12, &[text(1, "b"), text(2, "\\")]),
        ],
    );
    let body = envelope("v1", "Node", &meta);
    assert_eq!(
        to_value(&body).unwrap()["metadata"],
        json!({"name": "edge-\"1\"\n", "annotations": {"a": "1", "b": "\\"}})
    );
}

/// The reviews a kubelet's webhook clients send (k8s.io/apiserver
/// `plugin/pkg/authenticator/token/webhook/webhook.go:112-117`,
/// `plugin/pkg/authorizer/webhook/webhook.go:187-204`), by the numbers of
/// k8s.io/api `authentication/v1` and `authorization/v1` `generated.proto`.
#[test]
fn a_kubelets_reviews_read_as_their_json() {
    let token_review = [
        message(1, &[]),
        message(2, &[text(1, "abc.def"), text(2, "aud-1"), text(2, "aud-2")]),
        message(3, &[message(2, &[])]),
    ]
    .concat();
    let body = envelope("authentication.k8s.io/v1", "TokenReview", &token_review);
    assert_eq!(
        to_value(&body).unwrap(),
        json!({
            // Empty messages are left out, as Go's JSON omits them.
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview",
            "spec": {"token": "abc.def", "audiences": ["aud-1", "aud-2"]},
        })
    );
    let attributes = message(
        1,
        &[
            text(1, ""),
            text(2, "get"),
            text(3, ""),
            text(4, "v1"),
            text(5, "nodes"),
            text(6, "proxy"),
            text(7, "edge-1"),
        ],
    );
    let review = [
        message(1, &[]),
        message(
            2,
            &[
                attributes,
                text(3, "alice"),
                text(4, "admins"),
                text(4, "system:authenticated"),
                text(6, "uid-0"),
            ],
        ),
        message(3, &[varint(1, 0), text(2, "")]),
    ]
    .concat();
    let body = envelope("authorization.k8s.io/v1", "SubjectAccessReview", &review);
    assert_eq!(
        to_value(&body).unwrap(),
        json!({
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {
                "resourceAttributes": {"verb": "get", "version": "v1", "resource": "nodes",
                                       "subresource": "proxy", "name": "edge-1"},
                "user": "alice", "groups": ["admins", "system:authenticated"], "uid": "uid-0",
            },
        })
    );
}
