//! An object's shape on the way in and out: the body checked as the
//! resource's type, its identity against the URL, its resourceVersion, what
//! a write to the main resource or the status keeps, and new uids, names
//! and timestamps.

use serde_json::{Map, Value};

use super::answer::ApiError;
use super::resource::{ObjectKey, Resource};
use super::routing::Part;

/// The body as an object of `resource`'s type: `kind` and `apiVersion`
/// checked if given and set if not; `metadata` an object if given.
pub(super) fn object_body(resource: Resource, body: Value) -> Result<Map<String, Value>, ApiError> {
    let Value::Object(mut object) = body else {
        return Err(ApiError::bad_request(
            "the request body is not a JSON object",
        ));
    };
    if let Some(v) = object.get("apiVersion") {
        if v.as_str() != Some(resource.api_version()) {
            return Err(ApiError::bad_request(format!(
                "the API version in the data ({v}) does not match the expected API version ({})",
                resource.api_version()
            )));
        }
    }
    if let Some(k) = object.get("kind") {
        if k.as_str() != Some(resource.kind()) {
            return Err(ApiError::bad_request(format!(
                "the kind in the data ({k}) does not match the expected kind ({})",
                resource.kind()
            )));
        }
    }
    if !matches!(object.get("metadata"), None | Some(Value::Object(_))) {
        return Err(ApiError::bad_request("metadata must be an object"));
    }
    set_type(resource, &mut object);
    Ok(object)
}

pub(super) fn set_type(resource: Resource, object: &mut Map<String, Value>) {
    object.insert("apiVersion".into(), resource.api_version().into());
    object.insert("kind".into(), resource.kind().into());
}

/// The object's metadata, made an object if it is missing or not one.
pub(super) fn meta_mut(object: &mut Map<String, Value>) -> &mut Map<String, Value> {
    let slot = object
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !slot.is_object() {
        *slot = Value::Object(Map::new());
    }
    match slot {
        Value::Object(m) => m,
        _ => unreachable!("metadata was just made an object"),
    }
}

pub(super) fn meta_str<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    object.get("metadata")?.get(field)?.as_str()
}

/// Refuses a body naming another object than the URL; fills in the name and
/// namespace when the body leaves them out.
pub(super) fn check_identity(
    key: &ObjectKey,
    object: &mut Map<String, Value>,
) -> Result<(), ApiError> {
    let meta = meta_mut(object);
    match meta.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() && name != key.name => {
            return Err(ApiError::bad_request(format!(
                "the name of the object ({name}) does not match the name on the URL ({})",
                key.name
            )))
        }
        _ => {}
    }
    if key.resource.namespaced() {
        if meta
            .get("namespace")
            .and_then(Value::as_str)
            .is_some_and(|ns| !ns.is_empty() && ns != key.namespace)
        {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on \
                 the request",
            ));
        }
        meta.insert("namespace".into(), key.namespace.clone().into());
    }
    meta.insert("name".into(), key.name.clone().into());
    Ok(())
}

/// A `resourceVersion` in the written object must be the stored one; none
/// means an unconditional write.
pub(super) fn check_resource_version(
    key: &ObjectKey,
    current: &Value,
    new: &Value,
) -> Result<(), ApiError> {
    match meta_str(new, "resourceVersion") {
        Some(rv) if !rv.is_empty() && Some(rv) != meta_str(current, "resourceVersion") => {
            Err(ApiError::conflict(key))
        }
        _ => Ok(()),
    }
}

/// The object a write of `incoming` to `part` leaves: the main resource keeps
/// the stored status, the status subresource takes only the status; neither
/// changes system metadata.
pub(super) fn merged(resource: Resource, current: &Value, incoming: Value, part: Part) -> Value {
    const SYSTEM: [&str; 7] = [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "resourceVersion",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ];
    let copy = |from: &Value, to: &mut Map<String, Value>, field: &str| match from.get(field) {
        Some(v) => {
            to.insert(field.to_owned(), v.clone());
        }
        None => {
            to.remove(field);
        }
    };
    match part {
        Part::Main => {
            let Value::Object(mut new) = incoming else {
                return current.clone();
            };
            let empty = Value::Object(Map::new());
            let current_meta = current.get("metadata").unwrap_or(&empty);
            let meta = meta_mut(&mut new);
            for field in SYSTEM {
                copy(current_meta, meta, field);
            }
            if resource.has_status() {
                copy(current, &mut new, "status");
            }
            set_type(resource, &mut new);
            Value::Object(new)
        }
        Part::Status => {
            let mut new = current.clone();
            if let Value::Object(new_map) = &mut new {
                copy(&incoming, new_map, "status");
            }
            new
        }
    }
}

pub(super) fn parse_json(body: &[u8]) -> Result<Value, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("the request body is not valid JSON: {e}")))
}

pub(super) fn new_uid() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Five characters for `generateName`, from the API server's alphabet.
pub(super) fn name_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    uuid::Uuid::new_v4()
        .as_bytes()
        .iter()
        .take(5)
        .map(|b| char::from(ALPHABET[usize::from(*b) % ALPHABET.len()]))
        .collect()
}

/// Now plus `seconds`, as the API server writes timestamps (RFC 3339, UTC,
/// whole seconds).
pub(super) fn timestamp(seconds: i64) -> String {
    let now = nodekeeper::model::Micros::now().timestamp();
    let at = now
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .unwrap_or(jiff::Timestamp::MAX);
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
