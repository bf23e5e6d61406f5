//! Kubernetes' protobuf encoding, written as a kubelet writes its bodies:
//! a kubelet's default `contentType` is `application/vnd.kubernetes.protobuf`
//! (kubernetes `pkg/kubelet/apis/config/v1beta1/defaults.go:218`), used for
//! every create and update it sends (`cmd/kubelet/app/server.go:1214-1224`);
//! its patches stay JSON. A body is the magic `k8s\0` and a
//! `runtime.Unknown` holding the object's `TypeMeta` and its message
//! (apimachinery `pkg/runtime/serializer/protobuf/protobuf.go`).
//!
//! The sim's bodies are built as JSON; this writes one as protobuf by the
//! field numbers of upstream's `generated.proto` (k8s.io/api,
//! k8s.io/apimachinery), for the kinds the simulated kubelet sends. Go's
//! generated marshallers write every non-pointer string, even empty; so
//! does this for the fields it is given.

use prost::encoding::{encode_key, encode_varint, WireType};
use serde_json::Value;

/// The media type.
pub const PROTOBUF: &str = "application/vnd.kubernetes.protobuf";

/// `object` (with its `apiVersion` and `kind`) in Kubernetes protobuf.
/// Panics on a kind it has no field numbers for: the sim sends only these.
pub fn encode(object: &Value) -> Vec<u8> {
    let api_version = object["apiVersion"].as_str().unwrap_or("");
    let kind = object["kind"].as_str().unwrap_or("");
    let fields = match (api_version, kind) {
        ("v1", "Node") => NODE,
        ("coordination.k8s.io/v1", "Lease") => LEASE,
        ("storage.k8s.io/v1", "CSINode") => CSI_NODE,
        ("v1", "Event") => EVENT,
        ("v1", "Pod") => POD,
        ("v1", "DeleteOptions") => DELETE_OPTIONS,
        ("authentication.k8s.io/v1", "TokenReview") => TOKEN_REVIEW,
        ("authorization.k8s.io/v1", "SubjectAccessReview") => SUBJECT_ACCESS_REVIEW,
        other => panic!("the simulated kubelet sends no {other:?} in protobuf"),
    };
    let mut type_meta = Vec::new();
    string(&mut type_meta, 1, api_version);
    string(&mut type_meta, 2, kind);
    let mut out = b"k8s\0".to_vec();
    delimited(&mut out, 1, &type_meta);
    delimited(&mut out, 2, &message(object, fields));
    string(&mut out, 3, "");
    string(&mut out, 4, "");
    out
}

#[derive(Clone, Copy)]
enum Kind {
    String,
    Int,
    Bool,
    Message(&'static [Field]),
    Time,
    MicroTime,
    StringMap,
    QuantityMap,
}

type Field = (u32, &'static str, Kind);

fn message(object: &Value, fields: &[Field]) -> Vec<u8> {
    let mut out = Vec::new();
    for &(tag, name, kind) in fields {
        match &object[name] {
            Value::Null => {}
            Value::Array(items) => items.iter().for_each(|v| field(&mut out, tag, kind, v)),
            value => field(&mut out, tag, kind, value),
        }
    }
    out
}

fn field(out: &mut Vec<u8>, tag: u32, kind: Kind, value: &Value) {
    match kind {
        Kind::String => string(out, tag, value.as_str().unwrap_or("")),
        Kind::Int => {
            encode_key(tag, WireType::Varint, out);
            encode_varint(value.as_i64().unwrap_or(0) as u64, out);
        }
        Kind::Bool => {
            encode_key(tag, WireType::Varint, out);
            encode_varint(u64::from(value.as_bool().unwrap_or(false)), out);
        }
        Kind::Message(fields) => delimited(out, tag, &message(value, fields)),
        Kind::Time | Kind::MicroTime => {
            let t: jiff::Timestamp = value.as_str().unwrap_or("").parse().expect("a time");
            let mut time = Vec::new();
            encode_key(1, WireType::Varint, &mut time);
            encode_varint(t.as_second() as u64, &mut time);
            // `Time` is written with its nanoseconds too; readers keep the seconds.
            encode_key(2, WireType::Varint, &mut time);
            encode_varint(u64::from(t.subsec_nanosecond() as u32), &mut time);
            delimited(out, tag, &time);
        }
        Kind::StringMap | Kind::QuantityMap => {
            for (key, v) in value.as_object().into_iter().flatten() {
                let mut entry = Vec::new();
                string(&mut entry, 1, key);
                let v = v.as_str().unwrap_or("");
                if matches!(kind, Kind::QuantityMap) {
                    let mut quantity = Vec::new();
                    string(&mut quantity, 1, v);
                    delimited(&mut entry, 2, &quantity);
                } else {
                    string(&mut entry, 2, v);
                }
                delimited(out, tag, &entry);
            }
        }
    }
}

fn string(out: &mut Vec<u8>, tag: u32, s: &str) {
    delimited(out, tag, s.as_bytes());
}

fn delimited(out: &mut Vec<u8>, tag: u32, bytes: &[u8]) {
    encode_key(tag, WireType::LengthDelimited, out);
    encode_varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

// Field numbers from upstream's generated.proto files.

/// meta/v1 ObjectMeta.
const OBJECT_META: &[Field] = &[
    (1, "name", Kind::String),
    (2, "generateName", Kind::String),
    (3, "namespace", Kind::String),
    (5, "uid", Kind::String),
    (6, "resourceVersion", Kind::String),
    (11, "labels", Kind::StringMap),
    (12, "annotations", Kind::StringMap),
    (13, "ownerReferences", Kind::Message(OWNER_REFERENCE)),
];
const OWNER_REFERENCE: &[Field] = &[
    (1, "kind", Kind::String),
    (3, "name", Kind::String),
    (4, "uid", Kind::String),
    (5, "apiVersion", Kind::String),
    (6, "controller", Kind::Bool),
    (7, "blockOwnerDeletion", Kind::Bool),
];
/// core/v1 Node.
const NODE: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "spec", Kind::Message(NODE_SPEC)),
    (3, "status", Kind::Message(NODE_STATUS)),
];
const NODE_SPEC: &[Field] = &[
    (1, "podCIDR", Kind::String),
    (3, "providerID", Kind::String),
    (4, "unschedulable", Kind::Bool),
];
const NODE_STATUS: &[Field] = &[
    (1, "capacity", Kind::QuantityMap),
    (2, "allocatable", Kind::QuantityMap),
    (4, "conditions", Kind::Message(NODE_CONDITION)),
    (5, "addresses", Kind::Message(NODE_ADDRESS)),
    (6, "daemonEndpoints", Kind::Message(NODE_DAEMON_ENDPOINTS)),
    (7, "nodeInfo", Kind::Message(NODE_SYSTEM_INFO)),
];
const NODE_CONDITION: &[Field] = &[
    (1, "type", Kind::String),
    (2, "status", Kind::String),
    (3, "lastHeartbeatTime", Kind::Time),
    (4, "lastTransitionTime", Kind::Time),
    (5, "reason", Kind::String),
    (6, "message", Kind::String),
];
const NODE_ADDRESS: &[Field] = &[(1, "type", Kind::String), (2, "address", Kind::String)];
const NODE_DAEMON_ENDPOINTS: &[Field] = &[(1, "kubeletEndpoint", Kind::Message(DAEMON_ENDPOINT))];
const DAEMON_ENDPOINT: &[Field] = &[(1, "Port", Kind::Int)];
const NODE_SYSTEM_INFO: &[Field] = &[
    (1, "machineID", Kind::String),
    (2, "systemUUID", Kind::String),
    (3, "bootID", Kind::String),
    (4, "kernelVersion", Kind::String),
    (5, "osImage", Kind::String),
    (6, "containerRuntimeVersion", Kind::String),
    (7, "kubeletVersion", Kind::String),
    (8, "kubeProxyVersion", Kind::String),
    (9, "operatingSystem", Kind::String),
    (10, "architecture", Kind::String),
];
/// coordination/v1 Lease.
const LEASE: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "spec", Kind::Message(LEASE_SPEC)),
];
const LEASE_SPEC: &[Field] = &[
    (1, "holderIdentity", Kind::String),
    (2, "leaseDurationSeconds", Kind::Int),
    (3, "acquireTime", Kind::MicroTime),
    (4, "renewTime", Kind::MicroTime),
    (5, "leaseTransitions", Kind::Int),
];
/// storage/v1 CSINode.
const CSI_NODE: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "spec", Kind::Message(CSI_NODE_SPEC)),
];
const CSI_NODE_SPEC: &[Field] = &[(1, "drivers", Kind::Message(CSI_NODE_DRIVER))];
const CSI_NODE_DRIVER: &[Field] = &[
    (1, "name", Kind::String),
    (2, "nodeID", Kind::String),
    (3, "topologyKeys", Kind::String),
];
/// core/v1 Event.
const EVENT: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "involvedObject", Kind::Message(OBJECT_REFERENCE)),
    (3, "reason", Kind::String),
    (4, "message", Kind::String),
    (5, "source", Kind::Message(EVENT_SOURCE)),
    (6, "firstTimestamp", Kind::Time),
    (7, "lastTimestamp", Kind::Time),
    (8, "count", Kind::Int),
    (9, "type", Kind::String),
    (14, "reportingComponent", Kind::String),
    (15, "reportingInstance", Kind::String),
];
const OBJECT_REFERENCE: &[Field] = &[
    (1, "kind", Kind::String),
    (2, "namespace", Kind::String),
    (3, "name", Kind::String),
    (4, "uid", Kind::String),
    (5, "apiVersion", Kind::String),
];
const EVENT_SOURCE: &[Field] = &[(1, "component", Kind::String), (2, "host", Kind::String)];

/// A mirror pod as a kubelet creates it (`pkg/kubelet/pod/mirror_client.go:99`):
/// k8s.io/api `core/v1/generated.proto` `Pod`, `PodSpec`, `Container`.
const POD: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "spec", Kind::Message(POD_SPEC)),
];
const POD_SPEC: &[Field] = &[
    (2, "containers", Kind::Message(CONTAINER)),
    (3, "restartPolicy", Kind::String),
    (10, "nodeName", Kind::String),
    (11, "hostNetwork", Kind::Bool),
];
const CONTAINER: &[Field] = &[(1, "name", Kind::String), (2, "image", Kind::String)];
/// The body of a delete (client-go `gentype/type.go` `Delete`), from
/// k8s.io/apimachinery `pkg/apis/meta/v1/generated.proto`.
const DELETE_OPTIONS: &[Field] = &[
    (1, "gracePeriodSeconds", Kind::Int),
    (2, "preconditions", Kind::Message(PRECONDITIONS)),
];
const PRECONDITIONS: &[Field] = &[
    (1, "uid", Kind::String),
    (2, "resourceVersion", Kind::String),
];
/// What a kubelet's webhook authenticator sends (k8s.io/apiserver
/// `plugin/pkg/authenticator/token/webhook/webhook.go:112-117`), from
/// k8s.io/api `authentication/v1/generated.proto` `TokenReview`, `TokenReviewSpec`.
const TOKEN_REVIEW: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "spec", Kind::Message(TOKEN_REVIEW_SPEC)),
];
const TOKEN_REVIEW_SPEC: &[Field] = &[(1, "token", Kind::String), (2, "audiences", Kind::String)];
/// What a kubelet's webhook authorizer sends (k8s.io/apiserver
/// `plugin/pkg/authorizer/webhook/webhook.go:187-204`), from k8s.io/api
/// `authorization/v1/generated.proto` `SubjectAccessReview` and its spec.
const SUBJECT_ACCESS_REVIEW: &[Field] = &[
    (1, "metadata", Kind::Message(OBJECT_META)),
    (2, "spec", Kind::Message(SUBJECT_ACCESS_REVIEW_SPEC)),
];
const SUBJECT_ACCESS_REVIEW_SPEC: &[Field] = &[
    (1, "resourceAttributes", Kind::Message(RESOURCE_ATTRIBUTES)),
    (
        2,
        "nonResourceAttributes",
        Kind::Message(NON_RESOURCE_ATTRIBUTES),
    ),
    (3, "user", Kind::String),
    (4, "groups", Kind::String),
    (6, "uid", Kind::String),
];
const RESOURCE_ATTRIBUTES: &[Field] = &[
    (1, "namespace", Kind::String),
    (2, "verb", Kind::String),
    (3, "group", Kind::String),
    (4, "version", Kind::String),
    (5, "resource", Kind::String),
    (6, "subresource", Kind::String),
    (7, "name", Kind::String),
];
const NON_RESOURCE_ATTRIBUTES: &[Field] = &[(1, "path", Kind::String), (2, "verb", Kind::String)];

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_lease_is_the_envelope_and_its_message() {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "n"},
            "spec": {"leaseDurationSeconds": 40},
        });
        let mut expected = b"k8s\0".to_vec();
        // typeMeta: apiVersion, kind.
        expected.extend([0x0a, 31, 0x0a, 22]);
        expected.extend(b"coordination.k8s.io/v1");
        expected.extend([0x12, 5]);
        expected.extend(b"Lease");
        // raw: metadata {name: "n"}, spec {leaseDurationSeconds: 40}.
        expected.extend([0x12, 9, 0x0a, 3, 0x0a, 1, b'n', 0x12, 2, 0x10, 40]);
        // contentEncoding, contentType: empty.
        expected.extend([0x1a, 0, 0x22, 0]);
        assert_eq!(encode(&lease), expected);
    }
}
