//! The three patch formats kube-apiserver takes for built-in types
//! (apiserver `pkg/endpoints/handlers/patch.go`): JSON patch (RFC 6902) and
//! JSON merge patch (RFC 7386) by the `json-patch` crate, as kube-apiserver
//! applies both with evanphx/json-patch, and strategic merge patch by
//! [`super::strategic`].

use serde_json::Value;

use super::resource::Resource;
use super::strategic;

/// A `PATCH` body's format, by its media type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum PatchType {
    Json,
    Merge,
    Strategic,
}

impl PatchType {
    /// The format of a `Content-Type` (parameters aside), if it is one applied here.
    pub(super) fn from_media_type(content_type: &str) -> Option<PatchType> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/json-patch+json" => Some(PatchType::Json),
            "application/merge-patch+json" => Some(PatchType::Merge),
            "application/strategic-merge-patch+json" => Some(PatchType::Strategic),
            _ => None,
        }
    }
}

/// Applies `patch` to `target`, an object of `resource`; on an error
/// `target` is unchanged.
pub(super) fn apply(
    kind: PatchType,
    resource: Resource,
    target: &mut Value,
    patch: &Value,
) -> Result<(), String> {
    match kind {
        PatchType::Json => {
            let ops: json_patch::Patch = serde_json::from_value(patch.clone())
                .map_err(|e| format!("invalid JSON patch: {e}"))?;
            // All operations or none: the crate undoes what it applied on an error.
            json_patch::patch(target, &ops).map_err(|e| e.to_string())
        }
        PatchType::Merge => {
            json_patch::merge(target, patch);
            Ok(())
        }
        PatchType::Strategic => {
            let mut patched = target.clone();
            strategic::apply(resource, &mut patched, patch)?;
            *target = patched;
            Ok(())
        }
    }
}
