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
//! `false`, empty lists, maps and objects, and a zero time (an empty `Time`
//! message). Fields a schema does not list are skipped, as Go's decoder
//! skips unknown ones; a field sent twice takes its last value.

use bytes::Buf;
use prost::encoding::{decode_key, decode_varint, skip_field, DecodeContext, WireType};

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

/// Reads a protobuf-encoded object into its Kubernetes JSON (bytes), with
/// its `apiVersion` and `kind`. The JSON is written as the message is
/// walked, into one buffer: a kubelet's Lease renewal comes this way every
/// 10 s.
pub fn to_json(body: &[u8]) -> Result<Vec<u8>, ProtobufError> {
    let envelope = Envelope::read(body)?;
    let encoding = text(envelope.content_encoding, "contentEncoding")?;
    if !encoding.is_empty() {
        return Err(ProtobufError::Encoding(encoding.to_string()));
    }
    let type_meta = |tag| text(last_bytes(envelope.type_meta, tag, "typeMeta")?, "typeMeta");
    let (api_version, kind) = (type_meta(1)?, type_meta(2)?);
    let Some(schema) = schema_of(api_version, kind) else {
        return Err(ProtobufError::UnknownKind {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        });
    };
    let mut out = Vec::with_capacity(2 * envelope.raw.len() + 64);
    out.extend_from_slice(b"{\"apiVersion\":");
    write_str(&mut out, api_version);
    out.extend_from_slice(b",\"kind\":");
    write_str(&mut out, kind);
    write_fields(envelope.raw, schema, &mut out, false)?;
    out.push(b'}');
    Ok(out)
}

/// k8s.io/apimachinery `pkg/runtime/generated.proto` `Unknown`: the
/// object's `TypeMeta` (1), its message (2), its content encoding (3).
struct Envelope<'a> {
    type_meta: &'a [u8],
    raw: &'a [u8],
    content_encoding: &'a [u8],
}

impl<'a> Envelope<'a> {
    fn read(body: &'a [u8]) -> Result<Envelope<'a>, ProtobufError> {
        let buf = body.strip_prefix(MAGIC).ok_or(ProtobufError::NoMagic)?;
        check(buf)?;
        Ok(Envelope {
            type_meta: last_bytes(buf, 1, "the envelope")?,
            raw: last_bytes(buf, 2, "the envelope")?,
            content_encoding: last_bytes(buf, 3, "the envelope")?,
        })
    }
}

/// One occurrence of a field: a varint, or the bytes of a length-delimited field.
#[derive(Clone, Copy)]
enum Occurrence<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
}

/// Every occurrence of field `tag` in a message, in order; the message
/// must have passed [`check`]. Fields of other numbers, and of fixed
/// widths, are skipped.
fn occurrences(
    mut buf: &[u8],
    tag: u32,
) -> impl Iterator<Item = Result<(WireType, Occurrence<'_>), ProtobufError>> {
    std::iter::from_fn(move || loop {
        if !buf.has_remaining() {
            return None;
        }
        let (found, wire) = match decode_key(&mut buf) {
            Ok(key) => key,
            Err(e) => return Some(Err(e.into())),
        };
        let occurrence = match wire {
            WireType::Varint => decode_varint(&mut buf)
                .map(Occurrence::Varint)
                .map_err(ProtobufError::from),
            WireType::LengthDelimited => delimited(&mut buf).map(Occurrence::Bytes),
            _ => match skip_field(wire, found, &mut buf, DecodeContext::default()) {
                Ok(()) => continue,
                Err(e) => return Some(Err(e.into())),
            },
        };
        if found == tag || occurrence.is_err() {
            return Some(occurrence.map(|o| (wire, o)));
        }
    })
}

/// The last occurrence of field `tag`: a field sent twice takes its last
/// value, as protobuf's readers take it.
fn last(buf: &[u8], tag: u32) -> Result<Option<(WireType, Occurrence<'_>)>, ProtobufError> {
    let mut found = None;
    for o in occurrences(buf, tag) {
        found = Some(o?);
    }
    Ok(found)
}

/// The bytes of the last occurrence of length-delimited field `tag` of
/// `message` (named in the error when it has another wire type); empty
/// when it is absent.
fn last_bytes<'a>(buf: &'a [u8], tag: u32, message: &str) -> Result<&'a [u8], ProtobufError> {
    match last(buf, tag)? {
        Some((WireType::LengthDelimited, Occurrence::Bytes(b))) => Ok(b),
        Some(_) => Err(ProtobufError::Wire(format!(
            "field {tag} of {message} is not length-delimited"
        ))),
        None => Ok(&[]),
    }
}

/// Checks that a message is well formed throughout (every key, length and
/// value within its bytes), so that a field missed by the schema cannot
/// hide a cut body.
fn check(mut buf: &[u8]) -> Result<(), ProtobufError> {
    while buf.has_remaining() {
        let (tag, wire) = decode_key(&mut buf)?;
        skip_field(wire, tag, &mut buf, DecodeContext::default())?;
    }
    Ok(())
}

/// Bytes as UTF-8 text.
fn text<'a>(bytes: &'a [u8], field: &'static str) -> Result<&'a str, ProtobufError> {
    std::str::from_utf8(bytes).map_err(|_| ProtobufError::Utf8(field))
}

/// A JSON string, escaped.
fn write_str(out: &mut Vec<u8>, s: &str) {
    // Writing a str into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, s);
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
        // The body of a delete, in the resource's own group version
        // (client-go `gentype/type.go` `Delete`: `Body(&opts)`).
        ("v1" | "meta.k8s.io/v1", "DeleteOptions") => Some(&DELETE_OPTIONS),
        ("certificates.k8s.io/v1", "CertificateSigningRequest") => Some(&CSR),
        ("authentication.k8s.io/v1", "TokenReview") => Some(&TOKEN_REVIEW),
        ("authorization.k8s.io/v1", "SubjectAccessReview") => Some(&SUBJECT_ACCESS_REVIEW),
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
    /// `bytes`: base64 in JSON, as Go's `[]byte`.
    Bytes,
    Bool,
    Int32,
    Int64,
    Message(&'static Message),
    /// `meta.v1.Time`: RFC 3339 to the second.
    Time,
    /// `meta.v1.MicroTime`: RFC 3339 to the microsecond.
    MicroTime,
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

/// Writes the fields of `message` found in `bytes` as `,"name":value`
/// pairs (without the braces), each in schema order; what Go's JSON omits
/// is left out. `first` says whether no pair precedes them.
fn write_fields(
    bytes: &[u8],
    message: &Message,
    out: &mut Vec<u8>,
    mut first: bool,
) -> Result<bool, ProtobufError> {
    check(bytes)?;
    for field in message.fields {
        let mark = out.len();
        out.extend_from_slice(if first { b"\"" } else { b",\"" });
        out.extend_from_slice(field.name.as_bytes());
        out.extend_from_slice(b"\":");
        let body = out.len();
        let written = if field.repeated {
            write_repeated(bytes, field, out)?
        } else {
            match last(bytes, field.tag)? {
                Some((wire, o)) => write_value(field, wire, o, out)?,
                None => false,
            }
        };
        if written && out.len() > body {
            first = false;
        } else {
            out.truncate(mark);
        }
    }
    Ok(!first)
}

/// A repeated field as a JSON array, or a map field as an object; false
/// (nothing kept) when it has no occurrence.
fn write_repeated(bytes: &[u8], field: &Field, out: &mut Vec<u8>) -> Result<bool, ProtobufError> {
    let map = matches!(field.kind, Kind::StringMap | Kind::QuantityMap);
    out.push(if map { b'{' } else { b'[' });
    let mut count = 0;
    for o in occurrences(bytes, field.tag) {
        let (wire, o) = o?;
        if count > 0 {
            out.push(b',');
        }
        if map {
            let Occurrence::Bytes(entry) = o else {
                return Err(wrong_type(field, wire, WireType::LengthDelimited));
            };
            write_entry(entry, field, out)?;
        } else {
            let mark = out.len();
            // An element is never left out: `null` stands for an empty one.
            if !write_value(field, wire, o, out)? {
                out.truncate(mark);
                out.extend_from_slice(b"null");
            }
        }
        count += 1;
    }
    out.push(if map { b'}' } else { b']' });
    Ok(count > 0)
}

/// A map entry (`key` 1, `value` 2) as `"key":value`.
fn write_entry(entry: &[u8], field: &Field, out: &mut Vec<u8>) -> Result<(), ProtobufError> {
    check(entry)?;
    let key = match last(entry, 1)? {
        Some((WireType::LengthDelimited, Occurrence::Bytes(k))) => text(k, field.name)?,
        _ => "",
    };
    write_str(out, key);
    out.push(b':');
    let value = match last(entry, 2)? {
        Some((WireType::LengthDelimited, Occurrence::Bytes(v))) => v,
        _ => &[],
    };
    match field.kind {
        Kind::QuantityMap => write_quantity(value, field, out),
        _ => {
            write_str(out, text(value, field.name)?);
            Ok(())
        }
    }
}

/// `resource.Quantity` as its string (`0` when empty).
fn write_quantity(bytes: &[u8], field: &Field, out: &mut Vec<u8>) -> Result<(), ProtobufError> {
    check(bytes)?;
    match last(bytes, 1)? {
        Some((WireType::LengthDelimited, Occurrence::Bytes(s))) => {
            write_str(out, text(s, field.name)?)
        }
        _ => write_str(out, "0"),
    }
    Ok(())
}

/// One value; false when it is one Go's JSON omits.
fn write_value(
    field: &Field,
    wire: WireType,
    o: Occurrence<'_>,
    out: &mut Vec<u8>,
) -> Result<bool, ProtobufError> {
    // An occurrence is a varint or bytes as its wire type says.
    let varint = || match o {
        Occurrence::Varint(v) => Ok(v),
        Occurrence::Bytes(_) => Err(wrong_type(field, wire, WireType::Varint)),
    };
    let bytes = || match o {
        Occurrence::Bytes(b) => Ok(b),
        Occurrence::Varint(_) => Err(wrong_type(field, wire, WireType::LengthDelimited)),
    };
    let number = |out: &mut Vec<u8>, n: i64| {
        if n == 0 {
            return false;
        }
        let _ = serde_json::to_writer(&mut *out, &n);
        true
    };
    Ok(match field.kind {
        Kind::Bool => {
            let v = varint()? != 0;
            if v {
                out.extend_from_slice(b"true");
            }
            v
        }
        // int32 is sign-extended to 64 bits on the wire.
        Kind::Int32 => number(out, i64::from(varint()? as i64 as i32)),
        Kind::Int64 => number(out, varint()? as i64),
        Kind::String => {
            let s = text(bytes()?, field.name)?;
            if !s.is_empty() {
                write_str(out, s);
            }
            !s.is_empty()
        }
        Kind::Bytes => {
            use base64::Engine;
            let b = bytes()?;
            if !b.is_empty() {
                write_str(out, &base64::engine::general_purpose::STANDARD.encode(b));
            }
            !b.is_empty()
        }
        Kind::Message(m) => {
            out.push(b'{');
            let written = write_fields(bytes()?, m, out, true)?;
            out.push(b'}');
            written
        }
        Kind::Time | Kind::MicroTime => write_time(bytes()?, field, out)?,
        Kind::StringMap | Kind::QuantityMap => unreachable!("maps are repeated"),
    })
}

/// A `Time` or `MicroTime` as Kubernetes JSON writes it; nothing for the
/// zero time, which Go encodes as an empty message
/// (apimachinery `pkg/apis/meta/v1/time_proto.go`, `micro_time_proto.go`).
fn write_time(bytes: &[u8], field: &Field, out: &mut Vec<u8>) -> Result<bool, ProtobufError> {
    if bytes.is_empty() {
        return Ok(false);
    }
    check(bytes)?;
    let part = |tag| -> Result<i64, ProtobufError> {
        match last(bytes, tag)? {
            Some((WireType::Varint, Occurrence::Varint(v))) => Ok(v as i64),
            Some(_) => Err(ProtobufError::Wire(format!("{}: not a time", field.name))),
            None => Ok(0),
        }
    };
    let (seconds, nanos) = (part(1)?, part(2)? as i32);
    let at = jiff::Timestamp::from_second(seconds)
        .map_err(|e| ProtobufError::Wire(format!("{}: {e}", field.name)))?;
    let utc = at.strftime("%Y-%m-%dT%H:%M:%S");
    let text = match field.kind {
        // Go's `Time` unmarshal keeps the seconds only.
        Kind::MicroTime => format!("{utc}.{:06}Z", nanos.clamp(0, 999_999_999) / 1000),
        _ => format!("{utc}Z"),
    };
    write_str(out, &text);
    Ok(true)
}

fn wrong_type(field: &Field, got: WireType, expected: WireType) -> ProtobufError {
    ProtobufError::WireType {
        field: field.name,
        got,
        expected,
    }
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

// The schemas. Each lists its upstream message; field numbers and names
// are upstream's.

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

/// `certificates/v1` `CertificateSigningRequest` (k8s.io/api
/// `certificates/v1/generated.proto:44-243`; `spec.extra` is left out: the
/// server sets it from the credentials).
static CSR: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "spec", Kind::Message(&CSR_SPEC)),
        one(3, "status", Kind::Message(&CSR_STATUS)),
    ],
};
static CSR_SPEC: Message = Message {
    fields: &[
        one(1, "request", Kind::Bytes),
        one(7, "signerName", Kind::String),
        one(8, "expirationSeconds", Kind::Int32),
        many(5, "usages", Kind::String),
        one(2, "username", Kind::String),
        one(3, "uid", Kind::String),
        many(4, "groups", Kind::String),
    ],
};
static CSR_STATUS: Message = Message {
    fields: &[
        many(1, "conditions", Kind::Message(&CSR_CONDITION)),
        one(2, "certificate", Kind::Bytes),
    ],
};
static CSR_CONDITION: Message = Message {
    fields: &[
        one(1, "type", Kind::String),
        one(6, "status", Kind::String),
        one(2, "reason", Kind::String),
        one(3, "message", Kind::String),
        one(4, "lastUpdateTime", Kind::Time),
        one(5, "lastTransitionTime", Kind::Time),
    ],
};

/// `authentication/v1` `TokenReview` (k8s.io/api
/// `authentication/v1/generated.proto:159-239`; `user.extra` is left out:
/// nodekeeper's rules do not read it).
static TOKEN_REVIEW: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "spec", Kind::Message(&TOKEN_REVIEW_SPEC)),
        one(3, "status", Kind::Message(&TOKEN_REVIEW_STATUS)),
    ],
};
static TOKEN_REVIEW_SPEC: Message = Message {
    fields: &[
        one(1, "token", Kind::String),
        many(2, "audiences", Kind::String),
    ],
};
static TOKEN_REVIEW_STATUS: Message = Message {
    fields: &[
        one(1, "authenticated", Kind::Bool),
        one(2, "user", Kind::Message(&USER_INFO)),
        many(4, "audiences", Kind::String),
        one(3, "error", Kind::String),
    ],
};
static USER_INFO: Message = Message {
    fields: &[
        one(1, "username", Kind::String),
        one(2, "uid", Kind::String),
        many(3, "groups", Kind::String),
    ],
};

/// `authorization/v1` `SubjectAccessReview` (k8s.io/api
/// `authorization/v1/generated.proto:115-177`, `:270-340`; `spec.extra`
/// and the attributes' selectors are left out: nodekeeper's rules read
/// neither).
static SUBJECT_ACCESS_REVIEW: Message = Message {
    fields: &[
        one(1, "metadata", Kind::Message(&OBJECT_META)),
        one(2, "spec", Kind::Message(&SUBJECT_ACCESS_REVIEW_SPEC)),
        one(3, "status", Kind::Message(&SUBJECT_ACCESS_REVIEW_STATUS)),
    ],
};
static SUBJECT_ACCESS_REVIEW_SPEC: Message = Message {
    fields: &[
        one(1, "resourceAttributes", Kind::Message(&RESOURCE_ATTRIBUTES)),
        one(
            2,
            "nonResourceAttributes",
            Kind::Message(&NON_RESOURCE_ATTRIBUTES),
        ),
        one(3, "user", Kind::String),
        many(4, "groups", Kind::String),
        one(6, "uid", Kind::String),
    ],
};
static RESOURCE_ATTRIBUTES: Message = Message {
    fields: &[
        one(1, "namespace", Kind::String),
        one(2, "verb", Kind::String),
        one(3, "group", Kind::String),
        one(4, "version", Kind::String),
        one(5, "resource", Kind::String),
        one(6, "subresource", Kind::String),
        one(7, "name", Kind::String),
    ],
};
static NON_RESOURCE_ATTRIBUTES: Message = Message {
    fields: &[one(1, "path", Kind::String), one(2, "verb", Kind::String)],
};
static SUBJECT_ACCESS_REVIEW_STATUS: Message = Message {
    fields: &[
        one(1, "allowed", Kind::Bool),
        one(4, "denied", Kind::Bool),
        one(2, "reason", Kind::String),
        one(3, "evaluationError", Kind::String),
    ],
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

/// k8s.io/apimachinery `pkg/apis/meta/v1/generated.proto` `DeleteOptions`.
static DELETE_OPTIONS: Message = Message {
    fields: &[
        one(1, "gracePeriodSeconds", Kind::Int64),
        one(2, "preconditions", Kind::Message(&PRECONDITIONS)),
        one(3, "orphanDependents", Kind::Bool),
        one(4, "propagationPolicy", Kind::String),
        many(5, "dryRun", Kind::String),
    ],
};
static PRECONDITIONS: Message = Message {
    fields: &[
        one(1, "uid", Kind::String),
        one(2, "resourceVersion", Kind::String),
    ],
};

#[cfg(test)]
mod tests;
