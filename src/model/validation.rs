//! Kubernetes' own bounds on what clients write to nodes: label, annotation
//! and taint syntax and sizes, what a kubelet may push as conditions, and
//! the size of the whole node.
//! Pure checks; each failure names the field, as kube-apiserver's
//! `field.Error` does, so a refusal reads like the API server's.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use crate::model::{Node, Taint};

/// The node conditions Kubernetes defines.
pub const KNOWN_CONDITIONS: [&str; 5] = [
    crate::model::READY,
    "MemoryPressure",
    "DiskPressure",
    "PIDPressure",
    "NetworkUnavailable",
];
/// Condition types beyond [`KNOWN_CONDITIONS`] a node may carry
/// (node-problem-detector adds a handful: KernelDeadlock, ReadonlyFilesystem,
/// FrequentKubeletRestart, …).
pub const MAX_EXTRA_CONDITIONS: usize = 8;
/// `metav1.Condition`'s limits on reason and message.
pub const MAX_REASON: usize = 1024;
pub const MAX_MESSAGE: usize = 32 * 1024;
/// kube-apiserver's limit on all of an object's annotations together.
pub const MAX_ANNOTATIONS_BYTES: usize = 256 * 1024;
/// Label values and the name part of qualified names.
pub const MAX_NAME: usize = 63;
/// DNS-1123 subdomains (prefixes of qualified names).
pub const MAX_PREFIX: usize = 253;
/// Addresses a node may report, and the length of one.
pub const MAX_ADDRESSES: usize = 32;
pub const MAX_ADDRESS: usize = 253;
/// Each `status.nodeInfo` field.
pub const MAX_NODE_INFO_FIELD: usize = 1024;
/// Taints on one node.
pub const MAX_TAINTS: usize = 64;
/// The effects a taint may have.
pub const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// The most a node may take, as its record's JSON (what `/v1/nodes/NAME`
/// and `db export` show). etcd keeps a Kubernetes object to 1.5 MiB; this
/// is less, so that any node can be sent back whole in one request (the
/// API's body limit is 1 MiB, and the node as the Kubernetes API shows it
/// takes at most a few hundred bytes more than its record).
pub const MAX_NODE_BYTES: usize = 960 * 1024;

/// One refused field, as kube-apiserver reports it in `details.causes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    /// The path of the field, e.g. `metadata.labels` or `status.conditions[3].reason`.
    pub field: String,
    /// `FieldValueInvalid`, `FieldValueTooLong`, … (a `StatusCause` reason).
    pub reason: &'static str,
    /// What is wrong, without the field (`Invalid value: "x": …`).
    pub message: String,
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // An error about the whole object has no field (upstream's empty path).
        if self.field.is_empty() {
            return f.write_str(&self.message);
        }
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// Shows at most this much of a refused value.
const SHOWN: usize = 64;

fn shown(value: &str) -> String {
    if value.len() <= SHOWN {
        return format!("{value:?}");
    }
    let mut end = SHOWN;
    while !value.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}... ({} bytes)", &value[..end], value.len())
}

impl FieldError {
    fn new(field: impl Into<String>, reason: &'static str, message: String) -> FieldError {
        let field = field.into();
        FieldError {
            field,
            reason,
            message,
        }
    }

    pub fn invalid(field: impl Into<String>, value: &str, detail: &str) -> FieldError {
        let message = format!("Invalid value: {}: {detail}", shown(value));
        FieldError::new(field, "FieldValueInvalid", message)
    }

    pub fn required(field: impl Into<String>, detail: &str) -> FieldError {
        let message = format!("Required value: {detail}");
        FieldError::new(field, "FieldValueRequired", message)
    }

    pub fn too_long(field: impl Into<String>, len: usize, max: usize) -> FieldError {
        let message = format!("Too long: {len} bytes, may not be more than {max} bytes");
        FieldError::new(field, "FieldValueTooLong", message)
    }

    pub fn too_many(
        field: impl Into<String>,
        count: usize,
        max: usize,
        detail: &str,
    ) -> FieldError {
        let message = format!("Too many: {count}: must have at most {max} items{detail}");
        FieldError::new(field, "FieldValueTooMany", message)
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> FieldError {
        let message = format!("Forbidden: {detail}");
        FieldError::new(field, "FieldValueForbidden", message)
    }

    pub fn duplicate(field: impl Into<String>, value: &str) -> FieldError {
        let message = format!("Duplicate value: {}", shown(value));
        FieldError::new(field, "FieldValueDuplicate", message)
    }

    pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> FieldError {
        let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
        let (value, list) = (shown(value), list.join(", "));
        let message = format!("Unsupported value: {value}: supported values: {list}");
        FieldError::new(field, "FieldValueNotSupported", message)
    }
}

/// A refused object: what kube-apiserver answers with a 422 `Invalid` Status.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {name:?} is invalid: {}", causes_text(.causes))]
pub struct Invalid {
    /// `Node`, `Lease`.
    pub kind: &'static str,
    pub name: String,
    pub causes: Vec<FieldError>,
}

fn causes_text(causes: &[FieldError]) -> String {
    match causes {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

impl Invalid {
    /// A node refused for one cause.
    pub fn node(name: &str, cause: FieldError) -> Invalid {
        Invalid {
            kind: "Node",
            name: name.to_string(),
            causes: vec![cause],
        }
    }

    /// `Ok` when nothing was found, else the refusal.
    pub fn check(kind: &'static str, name: &str, causes: Vec<FieldError>) -> Result<(), Invalid> {
        if causes.is_empty() {
            Ok(())
        } else {
            Err(Invalid {
                kind,
                name: name.to_string(),
                causes,
            })
        }
    }
}

fn is_alnum(b: u8) -> bool {
    b.is_ascii_alphanumeric()
}

/// `([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]`: the name part of a qualified
/// name, and a non-empty label value.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && is_alnum(b[0])
        && is_alnum(b[b.len() - 1])
        && b.iter()
            .all(|&c| is_alnum(c) || c == b'-' || c == b'_' || c == b'.')
}

/// A DNS-1123 subdomain: lowercase alphanumerics, `-` and `.`, each part
/// starting and ending alphanumeric.
fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= MAX_PREFIX
        && s.split('.').all(|part| {
            let b = part.as_bytes();
            !b.is_empty()
                && b.iter()
                    .all(|&c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-')
                && b[0] != b'-'
                && b[b.len() - 1] != b'-'
        })
}

const NAME_SYNTAX: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', \
     and must start and end with an alphanumeric character (e.g. 'MyName', or 'my.name', or \
     '123-abc'), with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')";

/// Kubernetes' `IsQualifiedName`: label keys, annotation keys, taint keys.
pub fn qualified_name(field: &str, key: &str) -> Vec<FieldError> {
    let (prefix, name) = match key.split_once('/') {
        None => (None, key),
        Some((prefix, name)) => (Some(prefix), name),
    };
    let mut errors = Vec::new();
    if name.is_empty() {
        errors.push(FieldError::invalid(
            field,
            key,
            "name part must be non-empty",
        ));
    } else if name.len() > MAX_NAME {
        errors.push(FieldError::invalid(
            field,
            key,
            "name part must be no more than 63 characters",
        ));
    } else if !is_name_part(name) {
        errors.push(FieldError::invalid(field, key, NAME_SYNTAX));
    }
    if let Some(prefix) = prefix {
        if !is_dns_subdomain(prefix) {
            errors.push(FieldError::invalid(
                field,
                key,
                "prefix part must be a DNS-1123 subdomain: lowercase alphanumeric characters, '-' \
                 or '.', starting and ending with an alphanumeric character, at most 253 characters",
            ));
        }
    }
    errors
}

/// Kubernetes' `IsValidLabelValue`: empty, or at most 63 characters of the
/// name-part syntax.
pub fn label_value(field: &str, value: &str) -> Vec<FieldError> {
    if value.is_empty() {
        return Vec::new();
    }
    if value.len() > MAX_NAME {
        return vec![FieldError::invalid(
            field,
            value,
            "must be no more than 63 characters",
        )];
    }
    if !is_name_part(value) {
        return vec![FieldError::invalid(
            field,
            value,
            "a valid label must be an empty string or consist of alphanumeric characters, '-', \
             '_' or '.', and must start and end with an alphanumeric character",
        )];
    }
    Vec::new()
}

/// `metadata.labels`, as kube-apiserver validates them.
pub fn labels(labels: &BTreeMap<String, String>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    for (k, v) in labels {
        errors.extend(qualified_name("metadata.labels", k));
        errors.extend(label_value(&format!("metadata.labels[{k}]"), v));
    }
    errors
}

/// `metadata.annotations`: qualified keys, 256 KiB in all.
pub fn annotations(annotations: &BTreeMap<String, String>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut total = 0;
    for (k, v) in annotations {
        errors.extend(qualified_name(
            "metadata.annotations",
            &k.to_ascii_lowercase(),
        ));
        total += k.len() + v.len();
    }
    if total > MAX_ANNOTATIONS_BYTES {
        errors.push(FieldError::too_long(
            "metadata.annotations",
            total,
            MAX_ANNOTATIONS_BYTES,
        ));
    }
    errors
}

/// `spec.taints`: keys, values and effects, each key and effect once.
pub fn taints(taints: &[Taint]) -> Vec<FieldError> {
    let mut errors = Vec::new();
    if taints.len() > MAX_TAINTS {
        errors.push(FieldError::too_many(
            "spec.taints",
            taints.len(),
            MAX_TAINTS,
            "",
        ));
        return errors;
    }
    let mut seen = BTreeSet::new();
    for (i, t) in taints.iter().enumerate() {
        let at = format!("spec.taints[{i}]");
        errors.extend(qualified_name(&format!("{at}.key"), &t.key));
        errors.extend(label_value(&format!("{at}.value"), &t.value));
        if !TAINT_EFFECTS.contains(&t.effect.as_str()) {
            errors.push(FieldError::not_supported(
                format!("{at}.effect"),
                &t.effect,
                &TAINT_EFFECTS,
            ));
        }
        if !seen.insert((t.key.as_str(), t.effect.as_str())) {
            errors.push(FieldError::duplicate(
                at,
                &format!("{}:{}", t.key, t.effect),
            ));
        }
    }
    errors
}

/// The bytes `node` takes as its record's JSON, the measure of
/// [`MAX_NODE_BYTES`].
pub fn node_bytes(node: &Node) -> usize {
    json_len(node)
}

/// The bytes `value` takes as compact JSON, counted without writing them:
/// the measure of what a node holds and of what a patch builds.
pub fn json_len<T: serde::Serialize + ?Sized>(value: &T) -> usize {
    let mut counter = ByteCounter(0);
    // A counter takes every write, and what is measured here (the domain's
    // types, `serde_json::Value`s) always serializes.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// An `io::Write` that keeps only the number of bytes written.
struct ByteCounter(usize);

impl std::io::Write for ByteCounter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0 += bytes.len();
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// The size of the whole node a write leaves (`next`), against
/// [`MAX_NODE_BYTES`], as kube-apiserver's store refuses an object too large
/// for etcd. A node that was already past the bound (`before`, stored by a
/// build without it) may still be written as long as it does not grow, so
/// that it can be brought back under it.
pub fn node_size(next: &Node, before: Option<&Node>) -> Result<(), FieldError> {
    let bytes = node_bytes(next);
    if bytes <= MAX_NODE_BYTES || before.is_some_and(|b| bytes <= node_bytes(b)) {
        return Ok(());
    }
    let part = |map: &BTreeMap<String, String>| -> usize {
        map.iter().map(|(k, v)| k.len() + v.len()).sum()
    };
    let message = format!(
        "Too long: the node would take {bytes} bytes (its labels {} and annotations {} of them), \
         more than the {MAX_NODE_BYTES} a node may hold; remove labels or annotations",
        part(&next.labels),
        part(&next.annotations),
    );
    // Upstream's empty path: the error is about the whole object (as
    // ValidateConfigMap's TooLong for data past 1 MiB).
    Err(FieldError::new(String::new(), "FieldValueTooLong", message))
}

/// The bounds of a whole node read from outside the API (`db import`): its
/// labels, annotations and taints as kube-apiserver validates them, and its size.
pub fn node(node: &Node) -> Vec<FieldError> {
    let mut errors = labels(&node.labels);
    errors.extend(annotations(&node.annotations));
    errors.extend(taints(&node.taints));
    errors.extend(reported(&node.reported));
    errors.extend(node_size(node, None).err());
    errors
}

/// A condition's reason: empty, or CamelCase (`metav1.Condition`'s syntax)
/// of at most [`MAX_REASON`] bytes.
fn reason(field: &str, reason: &str) -> Vec<FieldError> {
    if reason.is_empty() {
        return Vec::new();
    }
    if reason.len() > MAX_REASON {
        return vec![FieldError::too_long(field, reason.len(), MAX_REASON)];
    }
    let b = reason.as_bytes();
    let ok = b[0].is_ascii_alphabetic()
        && b.iter()
            .all(|&c| c.is_ascii_alphanumeric() || c == b'_' || c == b',' || c == b':')
        && (b.len() == 1 || is_alnum(b[b.len() - 1]) || b[b.len() - 1] == b'_');
    if ok {
        Vec::new()
    } else {
        vec![FieldError::invalid(
            field,
            reason,
            "a condition reason must start with a letter and consist of letters, digits, '_', \
             ',' or ':', ending with a letter, digit or '_' (CamelCase, e.g. 'KubeletReady')",
        )]
    }
}

/// One pushed condition: its type, reason and message.
pub fn condition(index: usize, kind: &str, reason_text: &str, message: &str) -> Vec<FieldError> {
    // Every heartbeat checks each condition: the fields' paths are written
    // only for one that has an error (the checks allocate nothing when fine).
    if !kind.is_empty()
        && qualified_name("", kind).is_empty()
        && reason("", reason_text).is_empty()
        && message.len() <= MAX_MESSAGE
    {
        return Vec::new();
    }
    let at = format!("status.conditions[{index}]");
    let mut errors = Vec::new();
    if kind.is_empty() {
        errors.push(FieldError::required(
            format!("{at}.type"),
            "a condition needs a type",
        ));
    } else {
        errors.extend(qualified_name(&format!("{at}.type"), kind));
    }
    errors.extend(reason(&format!("{at}.reason"), reason_text));
    if message.len() > MAX_MESSAGE {
        errors.push(FieldError::too_long(
            format!("{at}.message"),
            message.len(),
            MAX_MESSAGE,
        ));
    }
    errors
}

/// Whether a condition type is one Kubernetes defines.
pub fn is_known_condition(kind: &str) -> bool {
    KNOWN_CONDITIONS.contains(&kind)
}

/// The per-node bound on condition types: a push may not bring a node past
/// [`MAX_EXTRA_CONDITIONS`] types beyond the known ones. Types the node
/// already has may always be updated.
pub fn extra_conditions<'a>(
    existing: impl IntoIterator<Item = &'a str>,
    pushed: impl IntoIterator<Item = &'a str>,
) -> Result<(), FieldError> {
    let have: BTreeSet<&str> = existing
        .into_iter()
        .filter(|k| !is_known_condition(k))
        .collect();
    let new: BTreeSet<&str> = pushed
        .into_iter()
        .filter(|k| !is_known_condition(k) && !have.contains(k))
        .collect();
    if new.is_empty() || have.len() + new.len() <= MAX_EXTRA_CONDITIONS {
        return Ok(());
    }
    Err(FieldError::too_many(
        "status.conditions",
        have.len() + new.len(),
        MAX_EXTRA_CONDITIONS,
        &format!(
            " of types beyond {}; the node has {} such type(s) and this update adds {} ({})",
            KNOWN_CONDITIONS.join(", "),
            have.len(),
            new.len(),
            new.iter()
                .take(3)
                .map(|k| format!("{k:?}"))
                .collect::<Vec<_>>()
                .join(", ")
                + if new.len() > 3 { ", …" } else { "" }
        ),
    ))
}

/// Pushed addresses: a bounded list of bounded, non-empty strings.
pub fn addresses<'a>(addresses: impl ExactSizeIterator<Item = &'a str>) -> Vec<FieldError> {
    let count = addresses.len();
    if count > MAX_ADDRESSES {
        return vec![FieldError::too_many(
            "status.addresses",
            count,
            MAX_ADDRESSES,
            "",
        )];
    }
    let mut errors = Vec::new();
    for (i, a) in addresses.enumerate() {
        let field = format!("status.addresses[{i}].address");
        if a.is_empty() {
            errors.push(FieldError::required(field, "an address may not be empty"));
        } else if a.len() > MAX_ADDRESS {
            errors.push(FieldError::too_long(field, a.len(), MAX_ADDRESS));
        }
    }
    errors
}

/// One `status.nodeInfo` field.
pub fn node_info_field(name: &str, value: &str) -> Vec<FieldError> {
    if value.len() > MAX_NODE_INFO_FIELD {
        return vec![FieldError::too_long(
            format!("status.nodeInfo.{name}"),
            value.len(),
            MAX_NODE_INFO_FIELD,
        )];
    }
    Vec::new()
}

/// Images a node may report. A kubelet sends its largest images, at most
/// `--node-status-max-images` (50 by default: `nodeStatusMaxImages`,
/// kubernetes `pkg/kubelet/apis/config/v1beta1/defaults.go`), so a site
/// that raised it still fits; one set past this bound is refused as a
/// whole status (a 422 naming the field), not kept unbounded.
pub const MAX_IMAGES: usize = 256;
/// Names of one image: the kubelet sends at most 5
/// (`MaxNamesPerImageInNodeStatus`, kubernetes `pkg/kubelet/nodestatus/setters.go`).
pub const MAX_IMAGE_NAMES: usize = 5;
/// Volumes in use, and volumes attached: more than the 110 pods a kubelet
/// runs by default, each with a few.
pub const MAX_VOLUMES: usize = 1024;
/// Runtime handlers (containerd's configured runtimes).
pub const MAX_RUNTIME_HANDLERS: usize = 64;
/// Each string of those lists: an image reference, a volume's unique
/// name, a device path, a handler's name.
pub const MAX_REPORTED_STRING: usize = 1024;

/// What a kubelet reports beyond conditions, addresses, capacity and
/// machine: each list and each of its strings bounded, the port a port.
/// The node's size bound ([`node_size`]) holds over all of it together.
pub fn reported(r: &crate::model::Reported) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let mut list = |field: &str, count: usize, max: usize| {
        let over = count > max;
        if over {
            errors.push(FieldError::too_many(
                format!("status.{field}"),
                count,
                max,
                "",
            ));
        }
        !over
    };
    let images_ok = list("images", r.images.len(), MAX_IMAGES);
    let in_use_ok = list("volumesInUse", r.volumes_in_use.len(), MAX_VOLUMES);
    let attached_ok = list("volumesAttached", r.volumes_attached.len(), MAX_VOLUMES);
    let handlers_ok = list(
        "runtimeHandlers",
        r.runtime_handlers.len(),
        MAX_RUNTIME_HANDLERS,
    );
    let mut string = |field: &dyn Fn() -> String, value: &str| {
        if value.len() > MAX_REPORTED_STRING {
            errors.push(FieldError::too_long(
                field(),
                value.len(),
                MAX_REPORTED_STRING,
            ));
        }
    };
    if images_ok {
        for (i, image) in r.images.iter().enumerate() {
            for (j, name) in image.names.iter().enumerate() {
                string(&|| format!("status.images[{i}].names[{j}]"), name);
            }
        }
    }
    if in_use_ok {
        for (i, v) in r.volumes_in_use.iter().enumerate() {
            string(&|| format!("status.volumesInUse[{i}]"), v);
        }
    }
    if attached_ok {
        for (i, v) in r.volumes_attached.iter().enumerate() {
            string(&|| format!("status.volumesAttached[{i}].name"), &v.name);
            string(
                &|| format!("status.volumesAttached[{i}].devicePath"),
                &v.device_path,
            );
        }
    }
    if handlers_ok {
        for (i, h) in r.runtime_handlers.iter().enumerate() {
            string(&|| format!("status.runtimeHandlers[{i}].name"), &h.name);
        }
    }
    for (i, image) in r.images.iter().enumerate().take(MAX_IMAGES) {
        if image.names.len() > MAX_IMAGE_NAMES {
            errors.push(FieldError::too_many(
                format!("status.images[{i}].names"),
                image.names.len(),
                MAX_IMAGE_NAMES,
                "",
            ));
        }
    }
    if !(0..=65535).contains(&r.kubelet_port) {
        errors.push(FieldError::invalid(
            "status.daemonEndpoints.kubeletEndpoint.Port",
            &r.kubelet_port.to_string(),
            "must be a port number, between 0 and 65535",
        ));
    }
    errors
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kubelets_report_is_bounded_field_by_field() {
        use crate::model::{Image, Reported};
        assert!(reported(&Reported::sample()).is_empty());
        let image = |names: usize| Image {
            names: (0..names).map(|i| format!("r/i:{i}")).collect(),
            size_bytes: Some(1),
        };
        // What a kubelet sends at its default (50 images of at most 5 names) fits.
        let default = Reported {
            images: (0..50).map(|_| image(5)).collect(),
            ..Reported::default()
        };
        assert!(reported(&default).is_empty());
        let over = Reported {
            images: (0..MAX_IMAGES + 1).map(|_| image(1)).collect(),
            volumes_in_use: vec!["v".repeat(MAX_REPORTED_STRING + 1)],
            kubelet_port: 70000,
            ..Reported::default()
        };
        let errors = reported(&over);
        let fields: Vec<&str> = errors.iter().map(|e| e.field.as_str()).collect();
        assert_eq!(
            fields,
            [
                "status.images",
                "status.volumesInUse[0]",
                "status.daemonEndpoints.kubeletEndpoint.Port"
            ],
            "{errors:?}"
        );
        assert_eq!(errors[0].reason, "FieldValueTooMany");
        assert_eq!(errors[1].reason, "FieldValueTooLong");
        let names = Reported {
            images: vec![image(MAX_IMAGE_NAMES + 1)],
            ..Reported::default()
        };
        assert_eq!(reported(&names)[0].field, "status.images[0].names");
    }

    #[test]
    fn qualified_names_follow_kubernetes() {
        for ok in [
            "a",
            "zone",
            "topology.kubernetes.io/zone",
            "node-role.kubernetes.io/edge",
            "A_b.C-1",
            &"x".repeat(63),
        ] {
            assert_eq!(qualified_name("f", ok), vec![], "{ok:?}");
        }
        for bad in [
            "",
            "-a",
            "a-",
            "a b",
            "/a",
            "Example.com/a",
            "a/b/c",
            "ex_ample.com/a",
            &"x".repeat(64),
            &format!("{}/a", "p".repeat(254)),
        ] {
            assert!(!qualified_name("f", bad).is_empty(), "{bad:?} accepted");
        }
    }

    #[test]
    fn label_values_follow_kubernetes() {
        assert!(label_value("v", "").is_empty());
        assert!(label_value("v", "rack-a.1_b").is_empty());
        assert!(!label_value("v", "-a").is_empty());
        assert!(!label_value("v", "a b").is_empty());
        assert!(!label_value("v", &"x".repeat(64)).is_empty());
        let e = &label_value("metadata.labels[k]", "a b")[0];
        assert_eq!(e.reason, "FieldValueInvalid");
        assert!(
            e.to_string()
                .starts_with("metadata.labels[k]: Invalid value: \"a b\""),
            "{e}"
        );
    }

    #[test]
    fn annotations_are_bounded_in_total() {
        let mut a = BTreeMap::from([("owner".to_string(), "x".repeat(1000))]);
        assert!(annotations(&a).is_empty());
        a.insert("big".into(), "y".repeat(MAX_ANNOTATIONS_BYTES));
        let e = annotations(&a);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].reason, "FieldValueTooLong");
        assert_eq!(e[0].field, "metadata.annotations");
        // Keys are checked case-insensitively, as kube-apiserver does.
        assert!(annotations(&BTreeMap::from([(
            "Example.com/Key".to_string(),
            String::new()
        )]))
        .is_empty());
        assert!(!annotations(&BTreeMap::from([("a b".to_string(), String::new())])).is_empty());
    }

    #[test]
    fn taints_need_a_known_effect_and_are_unique() {
        let t = |key: &str, effect: &str| Taint {
            key: key.into(),
            value: String::new(),
            effect: effect.into(),
            added: None,
        };
        assert!(taints(&[t("dedicated", "NoSchedule"), t("dedicated", "NoExecute")]).is_empty());
        let e = taints(&[
            t("a", "NoSchedule"),
            t("a", "NoSchedule"),
            t("b", "Sometimes"),
        ]);
        let reasons: Vec<_> = e.iter().map(|e| e.reason).collect();
        assert_eq!(reasons, ["FieldValueDuplicate", "FieldValueNotSupported"]);
        assert_eq!(e[1].field, "spec.taints[2].effect");
    }

    #[test]
    fn conditions_have_bounded_camel_case_reasons_and_messages() {
        assert!(condition(0, "Ready", "KubeletReady", "ok").is_empty());
        assert!(condition(0, "example.com/Custom", "", "").is_empty());
        assert!(condition(0, "Ready", "Kubelet_Ready:1", "").is_empty());
        let e = condition(3, "Ready", "not camel case", "");
        assert_eq!(e[0].field, "status.conditions[3].reason");
        let e = condition(0, "Ready", &"R".repeat(MAX_REASON + 1), "");
        assert_eq!(e[0].reason, "FieldValueTooLong");
        let e = condition(1, "Ready", "", &"m".repeat(MAX_MESSAGE + 1));
        assert_eq!(e[0].field, "status.conditions[1].message");
        assert_eq!(condition(2, "", "", "")[0].reason, "FieldValueRequired");
        assert!(!condition(2, "has space", "", "").is_empty());
    }

    #[test]
    fn a_node_carries_at_most_eight_extra_condition_types() {
        let known = KNOWN_CONDITIONS;
        let extra: Vec<String> = (0..9).map(|i| format!("Extra{i}")).collect();
        let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
        // The known ones never count.
        assert!(extra_conditions(known, known).is_ok());
        assert!(extra_conditions([], extra[..8].iter().copied()).is_ok());
        let e = extra_conditions([], extra.iter().copied()).unwrap_err();
        assert_eq!(e.field, "status.conditions");
        assert_eq!(e.reason, "FieldValueTooMany");
        assert!(e.message.contains("Too many: 9"), "{e}");
        // A node at the bound may update what it has, not add more.
        assert!(extra_conditions(extra[..8].iter().copied(), extra[..8].iter().copied()).is_ok());
        assert!(extra_conditions(extra[..8].iter().copied(), [extra[8]]).is_err());
        // A node past the bound (a store from before it) may still update its own.
        assert!(extra_conditions(extra.iter().copied(), [extra[0]]).is_ok());
    }

    #[test]
    fn invalid_reads_like_kube_apiserver() {
        let one = Invalid::check(
            "Node",
            "edge-1",
            vec![FieldError::forbidden("spec.x", "no")],
        );
        assert_eq!(
            one.unwrap_err().to_string(),
            "Node \"edge-1\" is invalid: spec.x: Forbidden: no"
        );
        let two = Invalid::check(
            "Node",
            "edge-1",
            vec![
                FieldError::forbidden("a", "x"),
                FieldError::required("b", "y"),
            ],
        );
        assert_eq!(
            two.unwrap_err().to_string(),
            "Node \"edge-1\" is invalid: [a: Forbidden: x, b: Required value: y]"
        );
        assert!(Invalid::check("Node", "n", vec![]).is_ok());
        // Long values are cut in messages.
        let e = FieldError::invalid("f", &"v".repeat(1000), "bad");
        assert!(e.message.len() < 200, "{e}");
    }

    /// A node with `count` labels of about 40 bytes each.
    fn labelled(count: usize) -> Node {
        let mut node = crate::store::records::tests::sample_node();
        node.labels = (0..count)
            .map(|i| (format!("example.com/key-{i:08}"), format!("value-{i:08}")))
            .collect();
        node
    }

    /// kube-apiserver keeps an object within etcd's limit, whichever write
    /// made it; a whole-object error has no field, as ValidateConfigMap's
    /// `field.TooLong(field.NewPath(""), ...)` for data past 1 MiB
    /// (kubernetes pkg/apis/core/validation/validation.go).
    #[test]
    fn a_node_is_bounded_as_a_whole() {
        let small = labelled(10);
        assert!(node_size(&small, None).is_ok());
        let big = labelled(30_000);
        assert!(node_bytes(&big) > MAX_NODE_BYTES);
        let e = node_size(&big, Some(&small)).unwrap_err();
        assert_eq!(e.reason, "FieldValueTooLong");
        assert_eq!(e.field, "");
        assert!(
            e.to_string().starts_with(&format!(
                "Too long: the node would take {} bytes (its labels ",
                node_bytes(&big)
            )) && e
                .message
                .contains("more than the 983040 a node may hold; remove labels"),
            "{e}"
        );
        assert!(node(&big).iter().any(|e| e.reason == "FieldValueTooLong"));
        // A node stored past the bound before there was one may shrink, or
        // change without growing, but not grow.
        let mut smaller = big.clone();
        smaller.labels.pop_first();
        assert!(node_size(&smaller, Some(&big)).is_ok());
        assert!(node_size(&big, Some(&big)).is_ok());
        assert!(node_size(&big, Some(&smaller)).is_err());
        // What `db import` checks: the syntax of every part, too.
        let mut bad = small.clone();
        bad.labels.insert("a b".into(), "c".into());
        bad.annotations
            .insert("k".into(), "v".repeat(MAX_ANNOTATIONS_BYTES));
        let fields: Vec<String> = node(&bad).into_iter().map(|e| e.field).collect();
        assert_eq!(fields, ["metadata.labels", "metadata.annotations"]);
    }

    #[test]
    fn addresses_and_node_info_are_bounded() {
        assert!(addresses(["10.0.0.1", "edge-1"].into_iter()).is_empty());
        let many = vec!["a"; MAX_ADDRESSES + 1];
        assert_eq!(addresses(many.into_iter())[0].reason, "FieldValueTooMany");
        assert_eq!(addresses([""].into_iter())[0].reason, "FieldValueRequired");
        assert!(node_info_field("osImage", "Debian").is_empty());
        assert_eq!(
            node_info_field("osImage", &"x".repeat(2000))[0].field,
            "status.nodeInfo.osImage"
        );
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any text a client sends: an answer, never a panic, and whatever
        /// is accepted is within the limits.
        #[test]
        fn validators_never_panic_and_bound_what_they_accept(text in ".{0,80}", long in 0usize..2000) {
            let big = text.repeat(long / text.len().max(1));
            for t in [&text, &big] {
                if qualified_name("f", t).is_empty() {
                    prop_assert!(t.len() <= MAX_PREFIX + 1 + MAX_NAME);
                }
                if label_value("f", t).is_empty() {
                    prop_assert!(t.len() <= MAX_NAME);
                }
                if condition(0, t, t, t).is_empty() {
                    prop_assert!(t.len() <= MAX_REASON && t.is_ascii());
                }
                let _ = node_info_field("osImage", t);
            }
        }
    }
}
