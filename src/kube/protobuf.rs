//! Kubernetes' protobuf encoding (`application/vnd.kubernetes.protobuf`),
//! read into the Kubernetes JSON the rest of nodekeeper reads.
//!
//! A kubelet sends every body it creates or replaces (its Node, Lease,
//! CSINode, Events) in this encoding by default, and client-go has no
//! fallback to JSON for it (see `docs/decisions/protobuf-bodies.md`). The
//! body is the 4-byte magic `k8s\0` and a `runtime.Unknown` carrying the
//! object's `apiVersion`, `kind` and its message
//! (k8s.io/apimachinery `pkg/runtime/serializer/protobuf/protobuf.go`,
//! `pkg/runtime/generated.proto`). The messages are read by the schemas
//! below, written from upstream's `generated.proto` files field by field
//! (k8s.io/api and k8s.io/apimachinery), with prost's wire primitives; only
//! the kinds a kubelet writes are known. JSON names are the proto field
//! names, as in every message here (`DaemonEndpoint.Port` included).
//!
//! What Go's JSON would omit is left out: empty strings, zero numbers,
//! `false`, empty lists and maps, and a zero time (an empty `Time`
//! message). Fields a schema does not list are skipped, as Go's decoder
//! skips unknown ones.

use bytes::Buf;
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};
use serde_json::{Map, Value};

/// The magic every protobuf-encoded object starts with.
pub const MAGIC: &[u8] = b"k8s\0";
/// The media type of the encoding.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";

/// Why a protobuf body cannot be read; each is a 400 with this message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtobufError {
    #[error("the body is not a Kubernetes protobuf object: it does not start with the magic \"k8s\\x00\"")]
    NoMagic,
    #[error("the protobuf body is malformed: {0}")]
    Wire(String),
    #[error("field {field:?} has wire type {got:?}, not {expected:?}")]
    WireType {
        field: &'static str,
        got: WireType,
        expected: WireType,
    },
    #[error("field {0:?} is not valid UTF-8")]
    Utf8(&'static str),
    #[error("the object is sent with content encoding {0:?}; only unencoded objects are read")]
    Encoding(String),
    #[error("no kind {kind:?} is registered for version {api_version:?} in protobuf; send it as application/json")]
    UnknownKind { api_version: String, kind: String },
}

impl From<prost::DecodeError> for ProtobufError {
    fn from(e: prost::DecodeError) -> Self {
        ProtobufError::Wire(e.to_string())
    }
}

/// Whether a `Content-Type` names this encoding (parameters aside).
pub fn is_protobuf(content_type: &str) -> bool {
    content_type.split(';').next().unwrap_or("").trim() == MEDIA_TYPE
}

/// Reads a protobuf-encoded object into its Kubernetes JSON, with its
/// `apiVersion` and `kind`.
pub fn to_json(body: &[u8]) -> Result<Value, ProtobufError> {
    let envelope = Envelope::read(body)?;
    if !envelope.content_encoding.is_empty() {
        return Err(ProtobufError::Encoding(envelope.content_encoding));
    }
    let text = |key: &str| {
        envelope
            .type_meta
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    let (api_version, kind) = (text("apiVersion"), text("kind"));
    let Some(schema) = schema_of(&api_version, &kind) else {
        return Err(ProtobufError::UnknownKind { api_version, kind });
    };
    let mut raw = envelope.raw;
    let mut object = read_message(&mut raw, schema)?;
    let mut out = Map::with_capacity(object.len() + 2);
    out.insert("apiVersion".into(), Value::String(api_version));
    out.insert("kind".into(), Value::String(kind));
    out.append(&mut object);
    Ok(Value::Object(out))
}

/// k8s.io/apimachinery `pkg/runtime/generated.proto` `Unknown`: the
/// object's `TypeMeta` (1), its message (2), its content encoding (3).
struct Envelope<'a> {
    type_meta: Map<String, Value>,
    raw: &'a [u8],
    content_encoding: String,
}

impl<'a> Envelope<'a> {
    fn read(body: &'a [u8]) -> Result<Envelope<'a>, ProtobufError> {
        let mut buf = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
        let mut envelope = Envelope {
            type_meta: Map::new(),
            raw: &[],
            content_encoding: String::new(),
        };
        while buf.has_remaining() {
            let (tag, wire) = decode_key(&mut buf)?;
            match (tag, wire) {
                (1, WireType::LengthDelimited) => {
                    envelope.type_meta = read_message(&mut delimited(&mut buf)?, &TYPE_META)?;
                }
                (2, WireType::LengthDelimited) => envelope.raw = delimited(&mut buf)?,
                (3, WireType::LengthDelimited) => {
                    envelope.content_encoding = String::from_utf8(delimited(&mut buf)?.to_vec())
                        .map_err(|_| ProtobufError::Utf8("contentEncoding"))?;
                }
                _ => skip_field(wire, tag, &mut buf, DecodeContext::default())?,
            }
        }
        Ok(envelope)
    }
}

/// The schema of an object kind a kubelet sends.
fn schema_of(api_version: &str, kind: &str) -> Option<&'static Message> {
    match (api_version, kind) {
        ("v1", "Node") => Some(&NODE),
        ("v1", "Event") => Some(&CORE_EVENT),
        ("v1", "Pod") => Some(&POD),
        ("coordination.k8s.io/v1", "Lease") => Some(&LEASE),
        ("storage.k8s.io/v1", "CSINode") => Some(&CSI_NODE),
        ("events.k8s.io/v1", "Event") => Some(&EVENTS_EVENT),
        _ => None,
    }
}

/// A message: its fields by number.
pub struct Message {
    fields: &'static [Field],
}

struct Field {
    tag: u32,
    name: &'static str,
    kind: Kind,
    repeated: bool,
}

#[derive(Clone, Copy)]
enum Kind {
    String,
    Bool,
    Int32,
    Int64,
    Message(&'static Message),
    /// `meta.v1.Time`: RFC 3339 to the second.
    Time,
    /// `meta.v1.MicroTime`: RFC 3339 to the microsecond.
    MicroTime,
    /// `resource.Quantity`: its string.
    Quantity,
    /// `map<string, string>`.
    StringMap,
    /// `map<string, resource.Quantity>`.
    QuantityMap,
}

const fn one(tag: u32, name: &'static str, kind: Kind) -> Field {
    Field {
        tag,
        name,
        kind,
        repeated: false,
    }
}

const fn many(tag: u32, name: &'static str, kind: Kind) -> Field {
    Field {
        tag,
        name,
        kind,
        repeated: true,
    }
}

fn read_message(buf: &mut &[u8], message: &Message) -> Result<Map<String, Value>, ProtobufError> {
    let mut out = Map::new();
    while buf.has_remaining() {
        let (tag, wire) = decode_key(buf)?;
        let Some(field) = message.fields.iter().find(|f| f.tag == tag) else {
            skip_field(wire, tag, buf, DecodeContext::default())?;
            continue;
        };
        let value = read_value(buf, field, wire)?;
        if field.repeated || matches!(field.kind, Kind::StringMap | Kind::QuantityMap) {
            merge_repeated(&mut out, field, value);
        } else if let Some(value) = value.filter(|v| !is_empty(v)) {
            out.insert(field.name.into(), value);
        }
    }
    Ok(out)
}

/// Adds one occurrence of a repeated field (or map entry) to `out`.
fn merge_repeated(out: &mut Map<String, Value>, field: &Field, value: Option<Value>) {
    let Some(value) = value else { return };
    match field.kind {
        Kind::StringMap | Kind::QuantityMap => {
            let Value::Array(mut entry) = value else {
                return;
            };
            let (Some(value), Some(Value::String(key))) = (entry.pop(), entry.pop()) else {
                return;
            };
            let map = out
                .entry(field.name)
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(map) = map {
                map.insert(key, value);
            }
        }
        _ => {
            let list = out
                .entry(field.name)
                .or_insert_with(|| Value::Array(vec![]));
            if let Value::Array(list) = list {
                list.push(value);
            }
        }
    }
}

/// What Go's `omitempty` leaves out.
fn is_empty(v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::String(s) => s.is_empty(),
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_i64() == Some(0),
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
    }
}

fn expect(field: &Field, got: WireType, expected: WireType) -> Result<(), ProtobufError> {
    if got == expected {
        return Ok(());
    }
    Err(ProtobufError::WireType {
        field: field.name,
        got,
        expected,
    })
}

/// The bytes of a length-delimited field.
fn delimited<'a>(buf: &mut &'a [u8]) -> Result<&'a [u8], ProtobufError> {
    let len = decode_varint(buf)?;
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l <= buf.len())
        .ok_or_else(|| ProtobufError::Wire("a length runs past the end of the body".into()))?;
    let (field, rest) = buf.split_at(len);
    *buf = rest;
    Ok(field)
}

fn read_value(
    buf: &mut &[u8],
    field: &Field,
    wire: WireType,
) -> Result<Option<Value>, ProtobufError> {
    let varint = |buf: &mut &[u8]| -> Result<u64, ProtobufError> {
        expect(field, wire, WireType::Varint)?;
        Ok(decode_varint(buf)?)
    };
    let text = |bytes: &[u8]| -> Result<String, ProtobufError> {
        String::from_utf8(bytes.to_vec()).map_err(|_| ProtobufError::Utf8(field.name))
    };
    Ok(Some(match field.kind {
        Kind::Bool => Value::Bool(varint(buf)? != 0),
        // int32 is sign-extended to 64 bits on the wire.
        Kind::Int32 => Value::from(varint(buf)? as i64 as i32),
        Kind::Int64 => Value::from(varint(buf)? as i64),
        _ => {
            expect(field, wire, WireType::LengthDelimited)?;
            let mut bytes = delimited(buf)?;
            match field.kind {
                Kind::String => Value::String(text(bytes)?),
                Kind::Message(m) => Value::Object(read_message(&mut bytes, m)?),
                Kind::Time | Kind::MicroTime => return time(bytes, field),
                Kind::Quantity => read_message(&mut bytes, &QUANTITY)?
                    .remove("string")
                    .unwrap_or_else(|| Value::String("0".into())),
                Kind::StringMap | Kind::QuantityMap => {
                    let entry = read_message(
                        &mut bytes,
                        if matches!(field.kind, Kind::StringMap) {
                            &STRING_ENTRY
                        } else {
                            &QUANTITY_ENTRY
                        },
                    )?;
                    let key = entry.get("key").cloned().unwrap_or(Value::from(""));
                    let value = entry.get("value").cloned().unwrap_or(Value::from(""));
                    Value::Array(vec![key, value])
                }
                Kind::Bool | Kind::Int32 | Kind::Int64 => unreachable!("read as varints"),
            }
        }
    }))
}

/// A `Time` or `MicroTime` as Kubernetes JSON writes it; `None` for the
/// zero time, which Go encodes as an empty message
/// (apimachinery `pkg/apis/meta/v1/time_proto.go`, `micro_time_proto.go`).
fn time(mut bytes: &[u8], field: &Field) -> Result<Option<Value>, ProtobufError> {
    if bytes.is_empty() {
        return Ok(None);
    }
    let parts = read_message(&mut bytes, &TIMESTAMP)?;
    let seconds = parts.get("seconds").and_then(Value::as_i64).unwrap_or(0);
    let nanos = parts.get("nanos").and_then(Value::as_i64).unwrap_or(0);
    let at = jiff::Timestamp::from_second(seconds)
        .map_err(|e| ProtobufError::Wire(format!("{}: {e}", field.name)))?;
    let utc = at.strftime("%Y-%m-%dT%H:%M:%S");
    Ok(Some(Value::String(match field.kind {
        // Go's `Time` unmarshal keeps the seconds only.
        Kind::MicroTime => format!("{utc}.{:06}Z", nanos.clamp(0, 999_999_999) / 1000),
        _ => format!("{utc}Z"),
    })))
}

// The schemas. Each lists its upstream message; field numbers and names
// are upstream's.

/// k8s.io/apimachinery `pkg/runtime/generated.proto` `TypeMeta`.
static TYPE_META: Message = Message {
    fields: &[
        one(1, "apiVersion", Kind::String),
        one(2, "kind", Kind::String),
    ],
};
/// `meta/v1` `Time` and `MicroTime` (the same two fields).
static TIMESTAMP: Message = Message {
    fields: &[one(1, "seconds", Kind::Int64), one(2, "nanos", Kind::Int32)],
};
/// `api/resource` `Quantity`.
static QUANTITY: Message = Message {
    fields: &[one(1, "string", Kind::String)],
};
static STRING_ENTRY: Message = Message {
    fields: &[one(1, "key", Kind::String), one(2, "value", Kind::String)],
};
static QUANTITY_ENTRY: Message = Message {
    fields: &[one(1, "key", Kind::String), one(2, "value", Kind::Quantity)],
};

/// `meta/v1` `ObjectMeta` (managedFields left out: servers set them).
static OBJECT_META: Message = Message {
    fields: &[
        one(1, "name", Kind::String),
        one(2, "generateName", Kind::String),
        one(3, "namespace", Kind::String),
        one(5, "uid", Kind::String),
        one(6, "resourceVersion", Kind::String),
        one(7, "generation", Kind::Int64),
        one(8, "creationTimestamp", Kind::Time),
        one(9, "deletionTimestamp", Kind::Time),
        one(10, "deletionGracePeriodSeconds", Kind::Int64),
        many(11, "labels", Kind::StringMap),
        many(12, "annotations", Kind::StringMap),
        many(13, "ownerReferences", Kind::Message(&OWNER_REFERENCE)),
        many(14, "finalizers", Kind::String),
    ],
};
/// `meta/v1` `OwnerReference`.
static OWNER_REFERENCE: Message = Message {
    fields: &[
        one(1, "kind", Kind::String),
        one(3, "name", Kind::String),
        one(4, "uid", Kind::String),
        one(5, "apiVersion", Kind::String),
        one(6, "controller", Kind::Bool),
        one(7, "blockOwnerDeletion", Kind::Bool),
    ],
};

/// `core/v1` `Node`.
static NODE: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "spec", Kind::Message(&NODE_SPEC)),
        one(3, "status", Kind::Message(&NODE_STATUS)),
    ],
};
/// `core/v1` `NodeSpec` (the deprecated `configSource` left out).
static NODE_SPEC: Message = Message {
    fields: &[
        one(1, "podCIDR", Kind::String),
        one(2, "externalID", Kind::String),
        one(3, "providerID", Kind::String),
        one(4, "unschedulable", Kind::Bool),
        many(5, "taints", Kind::Message(&TAINT)),
        many(7, "podCIDRs", Kind::String),
    ],
};
/// `core/v1` `Taint`.
static TAINT: Message = Message {
    fields: &[
        one(1, "key", Kind::String),
        one(2, "value", Kind::String),
        one(3, "effect", Kind::String),
        one(4, "timeAdded", Kind::Time),
    ],
};
/// `core/v1` `NodeStatus` (the deprecated `config` left out).
static NODE_STATUS: Message = Message {
    fields: &[
        many(1, "capacity", Kind::QuantityMap),
        many(2, "allocatable", Kind::QuantityMap),
        one(3, "phase", Kind::String),
        many(4, "conditions", Kind::Message(&NODE_CONDITION)),
        many(5, "addresses", Kind::Message(&NODE_ADDRESS)),
        one(6, "daemonEndpoints", Kind::Message(&NODE_DAEMON_ENDPOINTS)),
        one(7, "nodeInfo", Kind::Message(&NODE_SYSTEM_INFO)),
        many(8, "images", Kind::Message(&CONTAINER_IMAGE)),
        many(9, "volumesInUse", Kind::String),
        many(10, "volumesAttached", Kind::Message(&ATTACHED_VOLUME)),
        many(12, "runtimeHandlers", Kind::Message(&NODE_RUNTIME_HANDLER)),
        one(13, "features", Kind::Message(&NODE_FEATURES)),
    ],
};
static NODE_CONDITION: Message = Message {
    fields: &[
        one(1, "type", Kind::String),
        one(2, "status", Kind::String),
        one(3, "lastHeartbeatTime", Kind::Time),
        one(4, "lastTransitionTime", Kind::Time),
        one(5, "reason", Kind::String),
        one(6, "message", Kind::String),
    ],
};
static NODE_ADDRESS: Message = Message {
    fields: &[
        one(1, "type", Kind::String),
        one(2, "address", Kind::String),
    ],
};
static NODE_DAEMON_ENDPOINTS: Message = Message {
    fields: &[one(1, "kubeletEndpoint", Kind::Message(&DAEMON_ENDPOINT))],
};
static DAEMON_ENDPOINT: Message = Message {
    fields: &[one(1, "Port", Kind::Int32)],
};
static NODE_SYSTEM_INFO: Message = Message {
    fields: &[
        one(1, "machineID", Kind::String),
        one(2, "systemUUID", Kind::String),
        one(3, "bootID", Kind::String),
        one(4, "kernelVersion", Kind::String),
        one(5, "osImage", Kind::String),
        one(6, "containerRuntimeVersion", Kind::String),
        one(7, "kubeletVersion", Kind::String),
        one(8, "kubeProxyVersion", Kind::String),
        one(9, "operatingSystem", Kind::String),
        one(10, "architecture", Kind::String),
        one(11, "swap", Kind::Message(&NODE_SWAP_STATUS)),
    ],
};
static NODE_SWAP_STATUS: Message = Message {
    fields: &[one(1, "capacity", Kind::Int64)],
};
static CONTAINER_IMAGE: Message = Message {
    fields: &[
        many(1, "names", Kind::String),
        one(2, "sizeBytes", Kind::Int64),
    ],
};
static ATTACHED_VOLUME: Message = Message {
    fields: &[
        one(1, "name", Kind::String),
        one(2, "devicePath", Kind::String),
    ],
};
static NODE_RUNTIME_HANDLER: Message = Message {
    fields: &[
        one(1, "name", Kind::String),
        one(2, "features", Kind::Message(&NODE_RUNTIME_HANDLER_FEATURES)),
    ],
};
static NODE_RUNTIME_HANDLER_FEATURES: Message = Message {
    fields: &[
        one(1, "recursiveReadOnlyMounts", Kind::Bool),
        one(2, "userNamespaces", Kind::Bool),
    ],
};
static NODE_FEATURES: Message = Message {
    fields: &[one(1, "supplementalGroupsPolicy", Kind::Bool)],
};

/// `coordination/v1` `Lease`.
static LEASE: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "spec", Kind::Message(&LEASE_SPEC)),
    ],
};
static LEASE_SPEC: Message = Message {
    fields: &[
        one(1, "holderIdentity", Kind::String),
        one(2, "leaseDurationSeconds", Kind::Int32),
        one(3, "acquireTime", Kind::MicroTime),
        one(4, "renewTime", Kind::MicroTime),
        one(5, "leaseTransitions", Kind::Int32),
        one(6, "strategy", Kind::String),
        one(7, "preferredHolder", Kind::String),
    ],
};

/// `storage/v1` `CSINode`.
static CSI_NODE: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "spec", Kind::Message(&CSI_NODE_SPEC)),
    ],
};
static CSI_NODE_SPEC: Message = Message {
    fields: &[many(1, "drivers", Kind::Message(&CSI_NODE_DRIVER))],
};
static CSI_NODE_DRIVER: Message = Message {
    fields: &[
        one(1, "name", Kind::String),
        one(2, "nodeID", Kind::String),
        many(3, "topologyKeys", Kind::String),
        one(4, "allocatable", Kind::Message(&VOLUME_NODE_RESOURCES)),
    ],
};
static VOLUME_NODE_RESOURCES: Message = Message {
    fields: &[one(1, "count", Kind::Int32)],
};

/// `core/v1` `Event`.
static CORE_EVENT: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "involvedObject", Kind::Message(&OBJECT_REFERENCE)),
        one(3, "reason", Kind::String),
        one(4, "message", Kind::String),
        one(5, "source", Kind::Message(&EVENT_SOURCE)),
        one(6, "firstTimestamp", Kind::Time),
        one(7, "lastTimestamp", Kind::Time),
        one(8, "count", Kind::Int32),
        one(9, "type", Kind::String),
        one(10, "eventTime", Kind::MicroTime),
        one(11, "series", Kind::Message(&EVENT_SERIES)),
        one(12, "action", Kind::String),
        one(13, "related", Kind::Message(&OBJECT_REFERENCE)),
        one(14, "reportingComponent", Kind::String),
        one(15, "reportingInstance", Kind::String),
    ],
};
static OBJECT_REFERENCE: Message = Message {
    fields: &[
        one(1, "kind", Kind::String),
        one(2, "namespace", Kind::String),
        one(3, "name", Kind::String),
        one(4, "uid", Kind::String),
        one(5, "apiVersion", Kind::String),
        one(6, "resourceVersion", Kind::String),
        one(7, "fieldPath", Kind::String),
    ],
};
static EVENT_SOURCE: Message = Message {
    fields: &[
        one(1, "component", Kind::String),
        one(2, "host", Kind::String),
    ],
};
/// `core/v1` and `events/v1` `EventSeries` (the same fields).
static EVENT_SERIES: Message = Message {
    fields: &[
        one(1, "count", Kind::Int32),
        one(2, "lastObservedTime", Kind::MicroTime),
    ],
};
/// `events/v1` `Event`.
static EVENTS_EVENT: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "eventTime", Kind::MicroTime),
        one(3, "series", Kind::Message(&EVENT_SERIES)),
        one(4, "reportingController", Kind::String),
        one(5, "reportingInstance", Kind::String),
        one(6, "action", Kind::String),
        one(7, "reason", Kind::String),
        one(8, "regarding", Kind::Message(&OBJECT_REFERENCE)),
        one(9, "related", Kind::Message(&OBJECT_REFERENCE)),
        one(10, "note", Kind::String),
        one(11, "type", Kind::String),
        one(12, "deprecatedSource", Kind::Message(&EVENT_SOURCE)),
        one(13, "deprecatedFirstTimestamp", Kind::Time),
        one(14, "deprecatedLastTimestamp", Kind::Time),
        one(15, "deprecatedCount", Kind::Int32),
    ],
};

/// `core/v1` `Pod`, as far as a mirror pod is shown: its metadata, where
/// it runs and what it runs. The rest of a static pod's spec stays on its
/// node, in its manifest.
static POD: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "spec", Kind::Message(&POD_SPEC)),
    ],
};
static POD_SPEC: Message = Message {
    fields: &[
        many(2, "containers", Kind::Message(&CONTAINER)),
        one(3, "restartPolicy", Kind::String),
        one(4, "terminationGracePeriodSeconds", Kind::Int64),
        one(10, "nodeName", Kind::String),
        one(11, "hostNetwork", Kind::Bool),
        one(19, "schedulerName", Kind::String),
        many(20, "initContainers", Kind::Message(&CONTAINER)),
        one(24, "priorityClassName", Kind::String),
        one(25, "priority", Kind::Int32),
    ],
};
static CONTAINER: Message = Message {
    fields: &[
        one(1, "name", Kind::String),
        one(2, "image", Kind::String),
        many(3, "command", Kind::String),
        many(4, "args", Kind::String),
        many(6, "ports", Kind::Message(&CONTAINER_PORT)),
    ],
};
static CONTAINER_PORT: Message = Message {
    fields: &[
        one(1, "name", Kind::String),
        one(2, "hostPort", Kind::Int32),
        one(3, "containerPort", Kind::Int32),
        one(4, "protocol", Kind::String),
        one(5, "hostIP", Kind::String),
    ],
};

#[cfg(test)]
mod tests;
