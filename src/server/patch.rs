//! The patch formats kubelets and kubectl send: JSON merge patch (RFC 7386)
//! and strategic merge patch, with lists merged by their Kubernetes merge key.

use serde_json::{Map, Value};

/// Which patch a request carries, by its content type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchKind {
    Merge,
    Strategic,
}

impl PatchKind {
    /// The patch kind of a `Content-Type`, if it is one we apply.
    pub fn from_content_type(content_type: &str) -> Option<PatchKind> {
        match content_type.split(';').next().unwrap_or("").trim() {
            "application/merge-patch+json" => Some(PatchKind::Merge),
            "application/strategic-merge-patch+json" => Some(PatchKind::Strategic),
            _ => None,
        }
    }
}

/// The merge key of a list field, by field name: `None` for lists a strategic
/// merge patch replaces whole.
pub type MergeKeys = fn(&str) -> Option<&'static str>;

/// The merge key of a list, by field name, as the Node and Lease types
/// declare them (`patchMergeKey`).
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "conditions" | "addresses" => Some("type"),
        "taints" => Some("key"),
        _ => None,
    }
}

/// Applies `patch` to `target`.
pub fn apply(kind: PatchKind, target: &mut Value, patch: &Value) -> Result<(), String> {
    apply_with_keys(kind, target, patch, merge_key)
}

/// Applies `patch` to `target`, merging a strategic patch's lists by the keys
/// `keys` gives (for callers whose types declare other merge keys).
pub fn apply_with_keys(
    kind: PatchKind,
    target: &mut Value,
    patch: &Value,
    keys: MergeKeys,
) -> Result<(), String> {
    match kind {
        PatchKind::Merge => {
            merge_patch(target, patch);
            Ok(())
        }
        PatchKind::Strategic => strategic(target, patch, keys),
    }
}

/// RFC 7386: objects merge, `null` deletes, everything else replaces.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        return;
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(key);
        } else {
            merge_patch(target.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn strategic(target: &mut Value, patch: &Value, keys: MergeKeys) -> Result<(), String> {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return Ok(());
    };
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        let mut replaced = patch.clone();
        replaced.remove("$patch");
        *target = Value::Object(replaced);
        return Ok(());
    }
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target_map) = target else {
        return Ok(());
    };
    for (key, value) in patch {
        if key.starts_with("$setElementOrder/") || key == "$retainKeys" || key == "$patch" {
            // Ordering and retention directives change no value we keep.
            continue;
        }
        if let Some(list_field) = key.strip_prefix("$deleteFromPrimitiveList/") {
            if let (Some(Value::Array(items)), Value::Array(gone)) =
                (target_map.get_mut(list_field), value)
            {
                items.retain(|i| !gone.contains(i));
            }
            continue;
        }
        if value.is_null() {
            target_map.remove(key);
            continue;
        }
        match (keys(key), value) {
            (Some(merge_key), Value::Array(items)) => {
                let slot = target_map
                    .entry(key.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                merge_list(slot, items, merge_key, key, keys)?;
            }
            (None, Value::Object(_)) => {
                strategic(
                    target_map.entry(key.clone()).or_insert(Value::Null),
                    value,
                    keys,
                )?;
            }
            _ => {
                target_map.insert(key.clone(), value.clone());
            }
        }
    }
    Ok(())
}

/// Merges list items by `key`: a patch item replaces-by-merge the target item
/// with the same key, is appended if new, and `$patch: delete` removes it.
fn merge_list(
    target: &mut Value,
    items: &[Value],
    key: &str,
    field: &str,
    keys: MergeKeys,
) -> Result<(), String> {
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Value::Array(existing) = target else {
        return Ok(());
    };
    for item in items {
        let Some(id) = item.get(key).cloned() else {
            return Err(format!("an item of {field} lacks its merge key {key:?}"));
        };
        let position = existing.iter().position(|e| e.get(key) == Some(&id));
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = position {
                existing.remove(i);
            }
            continue;
        }
        match position {
            Some(i) => strategic(&mut existing[i], item, keys)?,
            None => {
                let mut fresh = Value::Null;
                strategic(&mut fresh, item, keys)?;
                existing.push(fresh);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn merge_patch_follows_rfc_7386() {
        let mut doc = json!({"a": "b", "c": {"d": "e", "f": "g"}, "l": [1, 2]});
        merge_patch(&mut doc, &json!({"a": "z", "c": {"f": null}, "l": [3]}));
        assert_eq!(doc, json!({"a": "z", "c": {"d": "e"}, "l": [3]}));
    }

    #[test]
    fn strategic_merge_merges_conditions_by_type() {
        let mut node = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "lastHeartbeatTime": "t1"},
            {"type": "MemoryPressure", "status": "False"}
        ], "nodeInfo": {"kubeletVersion": "v1.32.0"}}});
        // What a kubelet sends: only what changed, plus ordering directives.
        let patch = json!({"status": {
            "$setElementOrder/conditions": [{"type": "MemoryPressure"}, {"type": "Ready"}],
            "conditions": [
                {"type": "Ready", "lastHeartbeatTime": "t2"},
                {"type": "DiskPressure", "status": "False"}
            ]
        }});
        apply(PatchKind::Strategic, &mut node, &patch).unwrap();
        assert_eq!(
            node["status"]["conditions"],
            json!([
                {"type": "Ready", "status": "True", "lastHeartbeatTime": "t2"},
                {"type": "MemoryPressure", "status": "False"},
                {"type": "DiskPressure", "status": "False"}
            ])
        );
        assert_eq!(node["status"]["nodeInfo"]["kubeletVersion"], "v1.32.0");
        // A JSON merge patch replaces the list whole.
        apply(
            PatchKind::Merge,
            &mut node,
            &json!({"status": {"conditions": [{"type": "Ready", "status": "False"}]}}),
        )
        .unwrap();
        assert_eq!(
            node["status"]["conditions"],
            json!([{"type": "Ready", "status": "False"}])
        );
    }

    #[test]
    fn strategic_directives_delete_and_replace() {
        let mut node = json!({"status": {"conditions": [{"type": "A"}, {"type": "B"}]}, "spec": {"x": 1, "y": 2}});
        let patch = json!({"status": {"conditions": [{"type": "A", "$patch": "delete"}]}, "spec": {"$patch": "replace", "z": 3}});
        apply(PatchKind::Strategic, &mut node, &patch).unwrap();
        assert_eq!(
            node,
            json!({"status": {"conditions": [{"type": "B"}]}, "spec": {"z": 3}})
        );
        let err = apply(
            PatchKind::Strategic,
            &mut node,
            &json!({"status": {"conditions": [{"status": "True"}]}}),
        )
        .unwrap_err();
        assert!(err.contains("merge key"), "{err}");
    }

    #[test]
    fn content_types() {
        assert_eq!(
            PatchKind::from_content_type("application/merge-patch+json"),
            Some(PatchKind::Merge)
        );
        assert_eq!(
            PatchKind::from_content_type("application/strategic-merge-patch+json; charset=utf-8"),
            Some(PatchKind::Strategic)
        );
        assert_eq!(
            PatchKind::from_content_type("application/json-patch+json"),
            None
        );
    }
}
