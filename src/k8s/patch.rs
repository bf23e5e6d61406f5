//! The patch formats kubelets and kubectl send: JSON merge patch (RFC 7386)
//! and strategic merge patch, with lists merged by their Kubernetes merge key.

use std::collections::{HashMap, VecDeque};

use serde_json::{Map, Value};

/// How deeply a patch may nest: what serde_json reads at most, so nothing
/// that parses is refused, and the recursion below stays bounded for
/// values built any other way.
pub const MAX_DEPTH: usize = 128;

/// Why a merge or strategic merge patch was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// Nested deeper than [`MAX_DEPTH`].
    #[error("the patch nests {nesting} levels deep; at most {MAX_DEPTH} are allowed")]
    TooDeep { nesting: usize },
    /// An item of a list merged by key has no such key.
    #[error("an item of {field} lacks its merge key {key:?}")]
    MissingMergeKey { field: String, key: String },
}

impl PatchError {
    fn missing_key(field: &str, key: &str) -> PatchError {
        PatchError::MissingMergeKey {
            field: field.into(),
            key: key.into(),
        }
    }
}

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
/// declare them (`patchMergeKey` in k8s.io/api `core/v1/types.go`): node
/// conditions and addresses by `type`. `spec.taints` declares no patch
/// strategy, so a strategic merge patch replaces it whole.
fn merge_key(field: &str) -> Option<&'static str> {
    match field {
        "conditions" | "addresses" => Some("type"),
        _ => None,
    }
}

/// Applies `patch` to `target`.
pub fn apply(kind: PatchKind, target: &mut Value, patch: &Value) -> Result<(), PatchError> {
    apply_with_keys(kind, target, patch, merge_key)
}

/// Applies `patch` to `target`, merging a strategic patch's lists by the keys
/// `keys` gives (for callers whose types declare other merge keys).
pub fn apply_with_keys(
    kind: PatchKind,
    target: &mut Value,
    patch: &Value,
    keys: MergeKeys,
) -> Result<(), PatchError> {
    let nesting = depth(patch);
    if nesting > MAX_DEPTH {
        return Err(PatchError::TooDeep { nesting });
    }
    match kind {
        PatchKind::Merge => {
            merge_patch(target, patch);
            Ok(())
        }
        PatchKind::Strategic => strategic(target, patch.clone(), keys),
    }
}

/// [`apply`] of a patch the caller gives up: a strategic merge moves its
/// values into `target` rather than copying them (a kubelet's heartbeat).
pub fn apply_owned(kind: PatchKind, target: &mut Value, patch: Value) -> Result<(), PatchError> {
    let nesting = depth(&patch);
    if nesting > MAX_DEPTH {
        return Err(PatchError::TooDeep { nesting });
    }
    match kind {
        PatchKind::Merge => {
            merge_patch(target, &patch);
            Ok(())
        }
        PatchKind::Strategic => strategic(target, patch, merge_key),
    }
}

/// RFC 7386: objects merge, `null` deletes, everything else replaces
/// (the `json-patch` crate's implementation).
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

fn strategic(target: &mut Value, patch: Value, keys: MergeKeys) -> Result<(), PatchError> {
    let mut patch = match patch {
        Value::Object(patch) => patch,
        other => {
            *target = other;
            return Ok(());
        }
    };
    if patch.get("$patch").and_then(Value::as_str) == Some("replace") {
        patch.remove("$patch");
        *target = Value::Object(patch);
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
                (target_map.get_mut(list_field), &value)
            {
                items.retain(|i| !gone.contains(i));
            }
            continue;
        }
        if value.is_null() {
            target_map.remove(&key);
            continue;
        }
        match (keys(&key), value) {
            (Some(merge_key), Value::Array(items)) => {
                let slot = target_map
                    .entry(key.clone())
                    .or_insert_with(|| Value::Array(Vec::new()));
                merge_list(slot, items, merge_key, &key, keys, SEARCHED_PAIRS)?;
            }
            (None, value @ Value::Object(_)) => {
                strategic(target_map.entry(key).or_insert(Value::Null), value, keys)?;
            }
            (_, value) => {
                target_map.insert(key, value);
            }
        }
    }
    Ok(())
}

/// Merges list items by `key`: a patch item replaces-by-merge the target item
/// with the same key, is appended if new, and `$patch: delete` removes it.
/// Items are found as [`Positions`] finds them.
fn merge_list(
    target: &mut Value,
    items: Vec<Value>,
    key: &str,
    field: &str,
    keys: MergeKeys,
    searched_pairs: usize,
) -> Result<(), PatchError> {
    if !target.is_array() {
        *target = Value::Array(Vec::new());
    }
    let Value::Array(existing) = target else {
        return Ok(());
    };
    // Slots for every item; a deleted one is emptied and dropped at the end.
    let mut slots: Vec<Option<Value>> = std::mem::take(existing).into_iter().map(Some).collect();
    let mut positions = Positions::of(&slots, items.len(), key, searched_pairs);
    for item in items {
        let Some(id) = item.get(key) else {
            *existing = slots.into_iter().flatten().collect();
            return Err(PatchError::missing_key(field, key));
        };
        let found = positions.first(&slots, key, id);
        if item.get("$patch").and_then(Value::as_str) == Some("delete") {
            if let Some(i) = found {
                slots[i] = None;
                positions.forget_first(id);
            }
            continue;
        }
        let result = match found {
            Some(i) => match slots[i].as_mut() {
                Some(slot) => strategic(slot, item, keys),
                None => Ok(()),
            },
            None => {
                let mut fresh = Value::Null;
                let result = strategic(&mut fresh, item, keys);
                // A merged item keeps its key: later items find it by that.
                if let Some(new_id) = fresh.get(key) {
                    positions.add(new_id, slots.len());
                }
                slots.push(Some(fresh));
                result
            }
        };
        if let Err(e) = result {
            *existing = slots.into_iter().flatten().collect();
            return Err(e);
        }
    }
    *existing = slots.into_iter().flatten().collect();
    Ok(())
}

/// Where the items with each key are, among a list's slots. Short lists (a
/// kubelet's handful of conditions) are searched; long ones are indexed by
/// key, so their merge costs linear work. Either finds the first live item
/// with the key, as a search from the start would.
enum Positions {
    Search,
    /// Each key's slots in order, the first live one in front.
    Index(HashMap<String, VecDeque<usize>>),
}

/// Below this many pairs of (item, patch item), counting the items a patch
/// may append, a search costs less than building an index.
const SEARCHED_PAIRS: usize = 1024;

impl Positions {
    fn of(slots: &[Option<Value>], patch_items: usize, key: &str, searched: usize) -> Positions {
        // Items new to the list are appended, and searched too.
        let most = slots.len().saturating_add(patch_items);
        if most.saturating_mul(patch_items) <= searched {
            return Positions::Search;
        }
        let mut by_key: HashMap<String, VecDeque<usize>> = HashMap::new();
        for (i, item) in slots.iter().enumerate() {
            if let Some(id) = item.as_ref().and_then(|v| v.get(key)) {
                by_key.entry(id.to_string()).or_default().push_back(i);
            }
        }
        Positions::Index(by_key)
    }

    /// The first live slot whose item has `id` as its `key`.
    fn first(&self, slots: &[Option<Value>], key: &str, id: &Value) -> Option<usize> {
        match self {
            Positions::Search => slots
                .iter()
                .position(|s| s.as_ref().and_then(|v| v.get(key)) == Some(id)),
            Positions::Index(by_key) => {
                by_key.get(&id.to_string()).and_then(|p| p.front().copied())
            }
        }
    }

    /// The first slot with `id` is emptied.
    fn forget_first(&mut self, id: &Value) {
        if let Positions::Index(by_key) = self {
            if let Some(p) = by_key.get_mut(&id.to_string()) {
                p.pop_front();
            }
        }
    }

    /// Slot `i` holds a new item with `id`.
    fn add(&mut self, id: &Value, i: usize) {
        if let Positions::Index(by_key) = self {
            by_key.entry(id.to_string()).or_default().push_back(i);
        }
    }
}

/// How deeply objects and lists nest in `value`, counted without recursion.
fn depth(value: &Value) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 1)];
    while let Some((v, d)) = stack.pop() {
        deepest = deepest.max(d);
        match v {
            Value::Array(items) => stack.extend(items.iter().map(|i| (i, d + 1))),
            Value::Object(map) => stack.extend(map.values().map(|i| (i, d + 1))),
            _ => {}
        }
    }
    deepest
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
        // RFC 7386, appendix A.
        for (target, patch, result) in [
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ] {
            let mut doc = target.clone();
            merge_patch(&mut doc, &patch);
            assert_eq!(doc, result, "{target} + {patch}");
        }
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
    fn strategic_merge_replaces_taints_whole() {
        // NodeSpec.Taints has no patchStrategy (k8s.io/api core/v1/types.go).
        let mut node = json!({"spec": {"taints": [{"key": "a", "effect": "NoSchedule"}]}});
        let patch = json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}});
        apply(PatchKind::Strategic, &mut node, &patch).unwrap();
        assert_eq!(node, patch);
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
        assert_eq!(
            err,
            PatchError::MissingMergeKey {
                field: "conditions".into(),
                key: "type".into()
            }
        );
        assert_eq!(
            err.to_string(),
            "an item of conditions lacks its merge key \"type\""
        );
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

/// Arbitrary documents and patches: no panic, RFC 7386 idempotence, the
/// indexed list merge agreeing with a plain search, and linear work on long lists.
#[cfg(test)]
mod properties {
    use super::*;
    use crate::validation::json_len;
    use proptest::prelude::*;
    use serde_json::json;

    fn key() -> impl Strategy<Value = String> {
        prop_oneof![
            prop::sample::select(vec![
                "type",
                "key",
                "status",
                "conditions",
                "addresses",
                "taints",
                "$patch",
                "$setElementOrder/conditions",
                "$deleteFromPrimitiveList/x",
                "$retainKeys",
                "x",
            ])
            .prop_map(String::from),
            "[a-z]{1,3}",
        ]
    }

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            (-3i64..4).prop_map(Value::from),
            prop::sample::select(vec!["Ready", "A", "B", "delete", "replace", "x"])
                .prop_map(|s| Value::String(s.into())),
        ];
        leaf.prop_recursive(5, 64, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(key(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    /// The merge before lists were indexed: a search from the start for each item.
    fn merge_list_by_search(
        target: &mut Value,
        items: &[Value],
        key: &str,
        field: &str,
    ) -> Result<(), PatchError> {
        if !target.is_array() {
            *target = Value::Array(Vec::new());
        }
        let Value::Array(existing) = target else {
            return Ok(());
        };
        for item in items {
            let Some(id) = item.get(key).cloned() else {
                return Err(PatchError::missing_key(field, key));
            };
            let position = existing.iter().position(|e| e.get(key) == Some(&id));
            if item.get("$patch").and_then(Value::as_str) == Some("delete") {
                if let Some(i) = position {
                    existing.remove(i);
                }
                continue;
            }
            match position {
                Some(i) => strategic(&mut existing[i], item.clone(), merge_key)?,
                None => {
                    let mut fresh = Value::Null;
                    strategic(&mut fresh, item.clone(), merge_key)?;
                    existing.push(fresh);
                }
            }
        }
        Ok(())
    }

    fn condition_list() -> impl Strategy<Value = Vec<Value>> {
        prop::collection::vec(
            (
                prop::sample::select(vec!["Ready", "A", "B", "C"]),
                prop::option::of(prop::sample::select(vec!["True", "False"])),
                any::<bool>(),
            )
                .prop_map(|(t, status, delete)| {
                    let mut item = json!({"type": t});
                    if let Some(s) = status {
                        item["status"] = json!(s);
                    }
                    if delete {
                        item["$patch"] = json!("delete");
                    }
                    item
                }),
            0..10,
        )
    }

    proptest! {
        #[test]
        fn arbitrary_patches_never_panic(target in json_value(), patch in json_value()) {
            for kind in [PatchKind::Merge, PatchKind::Strategic] {
                let mut doc = target.clone();
                if let Err(e) = apply(kind, &mut doc, &patch) {
                    prop_assert!(matches!(e, PatchError::MissingMergeKey { .. }), "{e}");
                }
            }
        }

        #[test]
        fn a_merge_patch_applied_twice_changes_nothing_more(target in json_value(), patch in json_value()) {
            let mut once = target.clone();
            merge_patch(&mut once, &patch);
            let mut twice = once.clone();
            merge_patch(&mut twice, &patch);
            prop_assert_eq!(&once, &twice);
            if let (Value::Object(p), Value::Object(result)) = (&patch, &once) {
                for (k, v) in p {
                    prop_assert!(!v.is_null() || !result.contains_key(k), "{k} was to be removed");
                }
            }
        }

        /// A merge or strategic merge patch builds no more than it carries:
        /// the result is at most the target and the patch together, so a
        /// request body bounds what they add (JSON patch copies, which can
        /// double a value, are bounded in `json_patch`).
        #[test]
        fn a_merge_adds_no_more_than_the_patch_carries(target in json_value(), patch in json_value()) {
            let bound = json_len(&target) + json_len(&patch);
            for kind in [PatchKind::Merge, PatchKind::Strategic] {
                let mut doc = target.clone();
                if apply(kind, &mut doc, &patch).is_ok() {
                    prop_assert!(json_len(&doc) <= bound, "{kind:?}: {doc} from {target} and {patch}");
                }
            }
        }

        #[test]
        fn indexed_list_merge_agrees_with_a_search(existing in condition_list(), items in condition_list()) {
            // Stored lists may hold duplicates and directives too: merge them as they are.
            let mut searched = Value::Array(existing.clone());
            let b = merge_list_by_search(&mut searched, &items, "type", "conditions");
            // Indexed (no pair searched), and searched as short lists are.
            for pairs in [0, SEARCHED_PAIRS] {
                let mut merged = Value::Array(existing.clone());
                let a = merge_list(&mut merged, items.clone(), "type", "conditions", merge_key, pairs);
                prop_assert_eq!(a.is_ok(), b.is_ok());
                if a.is_ok() {
                    prop_assert_eq!(&merged, &searched);
                }
            }
        }
    }

    #[test]
    fn long_lists_merge_in_linear_work() {
        // 60k conditions, each new: a search per item would compare 1.8e9 pairs.
        let items: Vec<Value> = (0..60_000)
            .map(|i| json!({"type": format!("T{i}")}))
            .collect();
        let mut node = json!({"status": {"conditions": []}});
        apply(
            PatchKind::Strategic,
            &mut node,
            &json!({"status": {"conditions": items}}),
        )
        .unwrap();
        assert_eq!(
            node["status"]["conditions"].as_array().unwrap().len(),
            60_000
        );
        let deletes: Vec<Value> = (0..60_000)
            .map(|i| json!({"type": format!("T{i}"), "$patch": "delete"}))
            .collect();
        apply(
            PatchKind::Strategic,
            &mut node,
            &json!({"status": {"conditions": deletes}}),
        )
        .unwrap();
        assert_eq!(node["status"]["conditions"], json!([]));
    }

    #[test]
    fn nesting_is_bounded() {
        let mut deep = json!("x");
        for _ in 0..1000 {
            deep = json!({"a": deep});
        }
        let mut doc = json!({});
        for kind in [PatchKind::Merge, PatchKind::Strategic] {
            let err = apply(kind, &mut doc, &deep).unwrap_err();
            assert_eq!(err, PatchError::TooDeep { nesting: 1001 });
            assert_eq!(
                err.to_string(),
                "the patch nests 1001 levels deep; at most 128 are allowed"
            );
        }
        // What serde_json reads is within the bound.
        let text = "[".repeat(200) + &"]".repeat(200);
        assert!(serde_json::from_str::<Value>(&text).is_err());
    }
}
