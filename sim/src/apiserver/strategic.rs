//! Strategic merge patch as kube-apiserver applies it to Nodes, Pods and
//! Leases, written from apimachinery's `pkg/util/strategicpatch/patch.go`
//! (`mergeMap`, `mergeSlice`, `normalizeElementOrder`, `mergeSortedSlice`)
//! and the design notes in kubernetes/community
//! `contributors/devel/sig-api-machinery/strategic-merge-patch.md`.
//!
//! - Objects merge key by key; `null` deletes a key.
//! - A list merges only where the type declares `patchStrategy:"merge"`
//!   ([`list_strategy`]): lists of objects by their `patchMergeKey`, lists of
//!   values as a set. Every other list is replaced whole.
//! - Directives: `$patch: replace` and `$patch: delete` in an object,
//!   `$patch: delete` (by merge key) and `$patch: replace` in a merged list,
//!   `$retainKeys`, `$deleteFromPrimitiveList/<field>` and
//!   `$setElementOrder/<field>`.
//! - A merged list comes out in the patch's order, with the items only the
//!   server had kept where they were relative to the others
//!   (`normalizeElementOrder`); `$setElementOrder` overrides the patch's order.
//!
//! What it leaves out: `$setElementOrder` for a list the type replaces is
//! ignored; numbers are compared as JSON values (Go compares `1` and `1.0`
//! as equal); and where a patch with `$setElementOrder` both deletes and
//! adds items, items only the server has are placed by the server's list
//! before the patch, while upstream reads that list after the merge has
//! written into it in place (Go slices share their array), which can put
//! them before the added items instead.

use serde_json::{Map, Value};

use super::resource::Resource;

/// How a strategic merge patch treats one list field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ListStrategy {
    /// No `patchStrategy`: the patch's list replaces the object's.
    Replace,
    /// `patchStrategy:"merge"` with `patchMergeKey`: items merge by that key.
    MergeByKey(&'static str),
    /// `patchStrategy:"merge"` on a list of values: the union.
    MergeValues,
}

/// The strategy of the list at `path` (field names from the object's root,
/// list items not counted: `spec.containers.env`), as the types declare it.
///
/// Tags from k8s.io/api `core/v1/types.go` (commit 10b39a39, 2026-07-24) and
/// k8s.io/apimachinery `pkg/apis/meta/v1/types.go`:
///
/// - ObjectMeta: `ownerReferences` `patchMergeKey:"uid"`; `finalizers`
///   `patchStrategy:"merge"` (values).
/// - NodeSpec: `podCIDRs` `patchStrategy:"merge"` (values); `taints` has no
///   patch strategy, so it is replaced whole.
/// - NodeStatus: `conditions` and `addresses` `patchMergeKey:"type"`;
///   `images`, `volumesInUse`, `volumesAttached` are replaced.
/// - PodSpec: `volumes`, `initContainers`, `containers`,
///   `ephemeralContainers`, `imagePullSecrets`, `schedulingGates`,
///   `resourceClaims` by `name`; `hostAliases` by `ip`;
///   `topologySpreadConstraints` by `topologyKey`.
/// - Container (and EphemeralContainerCommon): `ports` by `containerPort`,
///   `env` by `name`, `volumeMounts` by `mountPath`, `volumeDevices` by
///   `devicePath`.
/// - PodStatus: `conditions` by `type`; `podIPs` and `hostIPs` by `ip`;
///   `resourceClaimStatuses` by `name`; `containerStatuses` is replaced.
pub(super) fn list_strategy(resource: Resource, path: &str) -> ListStrategy {
    use ListStrategy::*;
    match (resource, path) {
        (_, "metadata.ownerReferences") => MergeByKey("uid"),
        (_, "metadata.finalizers") => MergeValues,
        (Resource::Nodes, "spec.podCIDRs") => MergeValues,
        (Resource::Nodes, "status.conditions" | "status.addresses") => MergeByKey("type"),
        (Resource::Pods, "status.conditions") => MergeByKey("type"),
        (Resource::Pods, "status.podIPs" | "status.hostIPs" | "spec.hostAliases") => {
            MergeByKey("ip")
        }
        (
            Resource::Pods,
            "spec.volumes"
            | "spec.initContainers"
            | "spec.containers"
            | "spec.ephemeralContainers"
            | "spec.imagePullSecrets"
            | "spec.schedulingGates"
            | "spec.resourceClaims"
            | "status.resourceClaimStatuses",
        ) => MergeByKey("name"),
        (Resource::Pods, "spec.topologySpreadConstraints") => MergeByKey("topologyKey"),
        (Resource::Pods, _) => {
            let container_list = [
                "spec.containers.",
                "spec.initContainers.",
                "spec.ephemeralContainers.",
            ]
            .iter()
            .find_map(|prefix| path.strip_prefix(prefix));
            match container_list {
                Some("ports") => MergeByKey("containerPort"),
                Some("env") => MergeByKey("name"),
                Some("volumeMounts") => MergeByKey("mountPath"),
                Some("volumeDevices") => MergeByKey("devicePath"),
                _ => Replace,
            }
        }
        _ => Replace,
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ORDER: &str = "$setElementOrder/";
const DELETE_FROM: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to an object of `resource`.
pub(super) fn apply(resource: Resource, target: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Object(patch) = patch else {
        return Err("a strategic merge patch must be a JSON object".into());
    };
    let original = match std::mem::take(target) {
        Value::Object(map) => map,
        _ => Map::new(),
    };
    let schema = Schema { resource };
    *target = Value::Object(schema.merge_map(original, patch.clone(), "")?);
    Ok(())
}

#[derive(Clone, Copy)]
struct Schema {
    resource: Resource,
}

fn child(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_owned()
    } else {
        format!("{path}.{key}")
    }
}

impl Schema {
    fn merge_map(
        self,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
        path: &str,
    ) -> Result<Map<String, Value>, String> {
        if let Some(directive) = patch.remove(DIRECTIVE) {
            return match directive.as_str() {
                Some("replace") => Ok(cleaned_map(patch)),
                Some("delete") => Ok(Map::new()),
                _ => Err(format!(
                    "unknown patch type: {directive} in map at {path:?}"
                )),
            };
        }
        if let Some(retain) = patch.remove(RETAIN_KEYS) {
            let Value::Array(retain) = retain else {
                return Err("invalid patch format of retainKeys".into());
            };
            let kept = |k: &str| retain.iter().any(|r| r.as_str() == Some(k));
            let outside = patch.iter().any(|(k, v)| {
                !v.is_null() && !k.starts_with(DELETE_FROM) && !k.starts_with(SET_ORDER) && !kept(k)
            });
            if outside {
                return Err("invalid patch format of retainKeys".into());
            }
            original.retain(|k, _| kept(k));
        }
        // `$setElementOrder/<field>` first, with the list it orders.
        let orders: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ORDER))
            .cloned()
            .collect();
        for key in orders {
            let order = patch.remove(&key).unwrap_or_default();
            let field = &key[SET_ORDER.len()..];
            let Value::Array(order) = order else {
                return Err("invalid patch format of setElementOrder list".into());
            };
            let strategy = list_strategy(self.resource, &child(path, field));
            if strategy == ListStrategy::Replace {
                // The list is replaced whole, in the patch's order.
                continue;
            }
            let ours = original.remove(field).map(as_list).transpose()?;
            let theirs = patch.remove(field).map(as_list).transpose()?;
            // The order on the server places the items the patch does not name.
            let server_order = ours.clone().unwrap_or_default();
            if let Some(theirs) = &theirs {
                check_order(theirs, &order, strategy)?;
            }
            let merged = match (ours, theirs) {
                (None, None) => continue,
                (Some(ours), None) => ours,
                (None, Some(theirs)) => cleaned_list(theirs),
                (Some(ours), Some(theirs)) => {
                    self.merge_list(ours, theirs, strategy, &child(path, field))?
                }
            };
            let (in_order, server_only): (Vec<Value>, Vec<Value>) = merged
                .into_iter()
                .partition(|item| position(&order, item, strategy).is_some());
            let ordered = normalize_order(in_order, server_only, &order, &server_order, strategy)?;
            original.insert(field.to_owned(), Value::Array(ordered));
        }
        for (key, value) in patch {
            if let Some(field) = key.strip_prefix(DELETE_FROM) {
                if let (Some(Value::Array(items)), Value::Array(gone)) =
                    (original.get_mut(field), &value)
                {
                    items.retain(|item| !gone.contains(item));
                }
                continue;
            }
            if key.starts_with('$') {
                // No other directive; no object field starts with `$`.
                continue;
            }
            if value.is_null() {
                original.remove(&key);
                continue;
            }
            let field_path = child(path, &key);
            let merged = match (original.remove(&key), value) {
                (Some(Value::Object(ours)), Value::Object(theirs)) => {
                    Value::Object(self.merge_map(ours, theirs, &field_path)?)
                }
                (Some(Value::Array(ours)), Value::Array(theirs)) => {
                    match list_strategy(self.resource, &field_path) {
                        ListStrategy::Replace => Value::Array(cleaned_list(theirs)),
                        strategy => {
                            Value::Array(self.merge_list(ours, theirs, strategy, &field_path)?)
                        }
                    }
                }
                // Absent, or of another type: the patch's value, without directives.
                (_, theirs) => match cleaned(theirs) {
                    Some(v) => v,
                    None => continue,
                },
            };
            original.insert(key, merged);
        }
        Ok(original)
    }

    /// `mergeSlice`: merges `patch` into `original` for a merged list.
    fn merge_list(
        self,
        original: Vec<Value>,
        patch: Vec<Value>,
        strategy: ListStrategy,
        path: &str,
    ) -> Result<Vec<Value>, String> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        let kinds: Vec<&Value> = original.iter().chain(&patch).collect();
        if kinds.iter().any(|v| v.is_array()) {
            return Err(format!("lists of lists cannot be merged ({path})"));
        }
        let objects = kinds[0].is_object();
        if kinds.iter().any(|v| v.is_object() != objects) {
            return Err(format!("list element types are not identical at {path}"));
        }
        if !objects {
            // Values: the union, the patch's new ones after.
            let mut merged: Vec<Value> = Vec::new();
            for item in original.iter().chain(&patch) {
                if !merged.contains(item) {
                    merged.push(item.clone());
                }
            }
            let (in_patch, server_only) = merged.into_iter().partition(|v| patch.contains(v));
            return normalize_order(in_patch, server_only, &patch, &original, strategy);
        }
        let ListStrategy::MergeByKey(key) = strategy else {
            return Err(format!("cannot merge lists without merge key for {path}"));
        };
        // Directive items first: deletions by key, or a replacement of the list.
        let mut original = original;
        let mut plain = Vec::new();
        let mut replace = false;
        for item in patch {
            match item.get(DIRECTIVE) {
                None => plain.push(item),
                Some(Value::String(d)) if d == "delete" => {
                    let id = item
                        .get(key)
                        .ok_or_else(|| no_merge_key(&item, key))?
                        .clone();
                    original.retain(|o| o.get(key) != Some(&id));
                }
                Some(Value::String(d)) if d == "replace" => replace = true,
                Some(Value::String(d)) if d == "merge" => {
                    return Err("merging lists cannot yet be specified in the patch".into())
                }
                Some(d) => return Err(format!("unknown patch type: {d} in map: {item}")),
            }
        }
        let (original, patch) = if replace {
            (cleaned_list(plain), Vec::new())
        } else {
            (original, plain)
        };
        let server_order = original.clone();
        let mut merged = original;
        for item in &patch {
            let id = item.get(key).ok_or_else(|| no_merge_key(item, key))?;
            let Value::Object(theirs) = item.clone() else {
                unreachable!("checked to be objects");
            };
            match merged.iter_mut().find(|o| o.get(key) == Some(id)) {
                Some(slot) => {
                    let ours = match std::mem::take(slot) {
                        Value::Object(map) => map,
                        _ => Map::new(),
                    };
                    *slot = Value::Object(self.merge_map(ours, theirs, path)?);
                }
                None => merged.extend(cleaned(Value::Object(theirs))),
            }
        }
        let (in_patch, server_only) = merged
            .into_iter()
            .partition(|v| position(&patch, v, strategy).is_some());
        normalize_order(in_patch, server_only, &patch, &server_order, strategy)
    }
}

fn as_list(value: Value) -> Result<Vec<Value>, String> {
    match value {
        Value::Array(items) => Ok(items),
        other => Err(format!("expected a list, found {other}")),
    }
}

fn no_merge_key(item: &Value, key: &str) -> String {
    format!("map: {item} does not contain declared merge key: {key}")
}

/// Where `item` is in `list`: by merge key for objects, by value otherwise.
fn position(list: &[Value], item: &Value, strategy: ListStrategy) -> Option<usize> {
    match strategy {
        ListStrategy::MergeByKey(key) => {
            let id = item.get(key)?;
            list.iter().position(|v| v.get(key) == Some(id))
        }
        _ => list.iter().position(|v| v == item),
    }
}

/// `validatePatchWithSetOrderList`: the patch's items (deletions aside)
/// appear in the `$setElementOrder` list, in its order.
fn check_order(patch: &[Value], order: &[Value], strategy: ListStrategy) -> Result<(), String> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let mut at = 0;
    for item in patch.iter().filter(|i| i.get(DIRECTIVE).is_none()) {
        if let ListStrategy::MergeByKey(key) = strategy {
            if item.get(key).is_none() {
                return Err(no_merge_key(item, key));
            }
        }
        match order[at..]
            .iter()
            .position(|o| position(std::slice::from_ref(item), o, strategy).is_some())
        {
            Some(i) => at += i + 1,
            None => {
                return Err(format!(
                    "The order in patch list:\n{}\n doesn't match $setElementOrder list:\n{}\n",
                    Value::Array(patch.to_vec()),
                    Value::Array(order.to_vec())
                ))
            }
        }
    }
    Ok(())
}

/// `normalizeElementOrder`: the patch's items in `patch_order`, the items
/// only the server had in `server_order`, interleaved so that a server item
/// that came before a patch item on the server still does.
fn normalize_order(
    mut in_patch: Vec<Value>,
    mut server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    strategy: ListStrategy,
) -> Result<Vec<Value>, String> {
    if let ListStrategy::MergeByKey(key) = strategy {
        if let Some(item) = in_patch
            .iter()
            .chain(patch_order)
            .find(|i| i.get(key).is_none())
        {
            return Err(no_merge_key(item, key));
        }
    }
    let by = |order: &[Value], v: &Value| position(order, v, strategy).unwrap_or(usize::MAX);
    in_patch.sort_by_key(|v| by(patch_order, v));
    server_only.sort_by_key(|v| by(server_order, v));
    let mut merged = Vec::with_capacity(in_patch.len() + server_only.len());
    let mut left = server_only.into_iter().peekable();
    let mut right = in_patch.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => {
                match (
                    position(server_order, l, strategy),
                    position(server_order, r, strategy),
                ) {
                    (Some(li), Some(ri)) => li < ri,
                    _ => false,
                }
            }
        };
        merged.extend(if take_left { left.next() } else { right.next() });
    }
    Ok(merged)
}

/// A patch value as it lands where nothing was: nulls dropped, objects
/// carrying `$patch` dropped, other directives removed (`removeDirectives`
/// and `discardNullValuesFromPatch`). `None` if the value is itself a directive.
fn cleaned(value: Value) -> Option<Value> {
    match value {
        Value::Object(map) if map.contains_key(DIRECTIVE) => None,
        Value::Object(map) => Some(Value::Object(cleaned_map(map))),
        Value::Array(items) => Some(Value::Array(cleaned_list(items))),
        other => Some(other),
    }
}

fn cleaned_map(map: Map<String, Value>) -> Map<String, Value> {
    map.into_iter()
        .filter(|(k, v)| !v.is_null() && !k.starts_with('$'))
        .filter_map(|(k, v)| Some((k, cleaned(v)?)))
        .collect()
}

fn cleaned_list(items: Vec<Value>) -> Vec<Value> {
    items.into_iter().filter_map(cleaned).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(patch: Value, target: Value) -> Result<Value, String> {
        let mut doc = target;
        apply(Resource::Pods, &mut doc, &patch)?;
        Ok(doc)
    }

    fn node(patch: Value, target: Value) -> Result<Value, String> {
        let mut doc = target;
        apply(Resource::Nodes, &mut doc, &patch)?;
        Ok(doc)
    }

    /// Cases from apimachinery `pkg/util/strategicpatch/patch_test.go`
    /// (commit eed236ce), their `mergingList` (merge key `name`) played by
    /// a Pod's `spec.containers` and `mergingIntList` by `metadata.finalizers`;
    /// each applies the case's `ThreeWay` patch to its `Current` and expects `Result`.
    #[test]
    fn upstream_ordering_cases() {
        let c = |names: &[&str]| -> Value {
            json!({"spec": {"containers": names.iter().map(|n| {
                let (name, extra) = n.split_once(':').unwrap_or((n, ""));
                let mut item = json!({"name": name});
                if let Some((k, v)) = extra.split_once('=') {
                    item[k] = json!(v);
                }
                item
            }).collect::<Vec<_>>()}})
        };
        let order = |names: &[&str]| -> Value {
            Value::Array(names.iter().map(|n| json!({"name": n})).collect())
        };
        // "add an item in a list and preserve order"
        let patch = json!({"spec": {
            "$setElementOrder/containers": order(&["3", "1", "2"]),
            "containers": [{"name": "3", "value": "3"}]
        }});
        assert_eq!(
            pod(patch, c(&["1:other=a", "2:value=2"])).unwrap()["spec"]["containers"],
            json!([{"name": "3", "value": "3"}, {"name": "1", "other": "a"}, {"name": "2", "value": "2"}])
        );
        // "set elements order in a list with server-only items"
        let patch = json!({"spec": {"$setElementOrder/containers": order(&["4", "2", "3", "1"])}});
        let current = c(&["1:other=a", "3:value=3", "4:value=4", "2:value=2", "9"]);
        assert_eq!(
            pod(patch, current).unwrap(),
            c(&["4:value=4", "2:value=2", "3:value=3", "1:other=a", "9"])
        );
        // "set elements order in a list with server-only items 2"
        let patch = json!({"spec": {"$setElementOrder/containers": order(&["2", "1", "4", "3"])}});
        let current = c(&["1:other=a", "2:value=2", "9", "3:value=3", "4:value=4"]);
        assert_eq!(
            pod(patch, current).unwrap(),
            c(&["2:value=2", "1:other=a", "9", "4:value=4", "3:value=3"])
        );
        // "set elements order in a list with server-only items 3"
        let patch = json!({"spec": {"$setElementOrder/containers": order(&["2", "1", "4", "3"])}});
        let current = c(&[
            "1:other=a",
            "2:value=2",
            "7",
            "9",
            "8",
            "3:value=3",
            "4:value=4",
        ]);
        assert_eq!(
            pod(patch, current).unwrap(),
            c(&[
                "2:value=2",
                "1:other=a",
                "7",
                "9",
                "8",
                "4:value=4",
                "3:value=3"
            ])
        );
        // "behavior of set element order for a merging list with duplicate"
        let patch =
            json!({"spec": {"$setElementOrder/containers": order(&["2", "1", "4", "3", "2"])}});
        let current = c(&["1", "2:value=dup1", "3", "2:value=dup2", "4"]);
        assert_eq!(
            pod(patch, current).unwrap(),
            c(&["2:value=dup1", "2:value=dup2", "1", "4", "3"])
        );
        // "should check if order in $setElementOrder and patch list match"
        let patch = json!({"spec": {
            "$setElementOrder/containers": order(&["1", "2", "3"]),
            "containers": [{"name": "3", "value": "3"}, {"name": "1", "value": "1"}]
        }});
        let err = pod(patch, c(&["1", "3", "2"])).unwrap_err();
        assert!(err.contains("doesn't match"), "{err}");

        // "add an item in a int list and preserve order", on finalizers
        let patch = json!({"metadata": {
            "$setElementOrder/finalizers": ["3", "1", "2"],
            "finalizers": ["3"]
        }});
        let current = json!({"metadata": {"finalizers": ["1", "2"]}});
        assert_eq!(
            pod(patch, current).unwrap()["metadata"]["finalizers"],
            json!(["3", "1", "2"])
        );
        // "delete an item in a int list and preserve order"
        let patch = json!({"metadata": {
            "$setElementOrder/finalizers": ["2", "3"],
            "$deleteFromPrimitiveList/finalizers": ["1"]
        }});
        let current = json!({"metadata": {"finalizers": ["1", "2", "3"]}});
        assert_eq!(
            pod(patch, current).unwrap()["metadata"]["finalizers"],
            json!(["2", "3"])
        );
        // "$deleteFromPrimitiveList of nonexistent item in primitive list should not add the item to the list"
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["3"]}});
        let current = json!({"metadata": {"finalizers": ["1", "2"]}});
        assert_eq!(pod(patch, current.clone()).unwrap(), current);
        // "$deleteFromPrimitiveList on nonexistent primitive list should not add the primitive list"
        let patch = json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["3"]}});
        assert_eq!(
            pod(patch, json!({"metadata": {}})).unwrap(),
            json!({"metadata": {}})
        );
    }

    /// Without `$setElementOrder`, a merged list comes out in the patch's
    /// order, the server's other items kept where they were relative to them
    /// (`mergeSlice` ends in `normalizeElementOrder`); items new to the list
    /// go before the server's others (`mergeSortedSlice` takes the patch's
    /// item when the server's order does not place both), the "prepending"
    /// kustomize reproduces (kubernetes-sigs/kustomize#3048).
    #[test]
    fn a_merged_list_takes_the_patchs_order() {
        let current = json!({"status": {"conditions": [{"type": "Ready"}, {"type": "A"}]}});
        let patch = json!({"status": {"conditions": [{"type": "New"}]}});
        assert_eq!(
            node(patch, current).unwrap()["status"]["conditions"],
            json!([{"type": "New"}, {"type": "Ready"}, {"type": "A"}])
        );
        let current = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "MemoryPressure", "status": "False"},
            {"type": "DiskPressure", "status": "False"}
        ]}});
        let patch = json!({"status": {"conditions": [
            {"type": "DiskPressure", "status": "True"},
            {"type": "Ready", "status": "False"}
        ]}});
        assert_eq!(
            node(patch, current).unwrap()["status"]["conditions"],
            json!([
                {"type": "MemoryPressure", "status": "False"},
                {"type": "DiskPressure", "status": "True"},
                {"type": "Ready", "status": "False"}
            ])
        );
    }

    #[test]
    fn node_lists_merge_as_the_node_type_declares() {
        let current = json!({
            "metadata": {"finalizers": ["a"], "labels": {"x": "1", "y": "2"}},
            "spec": {"podCIDRs": ["10.0.0.0/24"], "taints": [
                {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoExecute"}
            ]},
            "status": {
                "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
                "images": [{"names": ["x"]}]
            }
        });
        let patch = json!({
            "metadata": {"finalizers": ["b"], "labels": {"x": null, "z": "3"}},
            // NodeSpec.Taints has no patchStrategy: the patch's list replaces it.
            "spec": {"podCIDRs": ["fd00::/64"], "taints": [{"key": "c", "effect": "NoSchedule"}]},
            "status": {
                "addresses": [{"type": "Hostname", "address": "n1"}],
                "images": [{"names": ["y"]}]
            }
        });
        assert_eq!(
            node(patch, current).unwrap(),
            json!({
                "metadata": {"finalizers": ["b", "a"], "labels": {"y": "2", "z": "3"}},
                "spec": {"podCIDRs": ["fd00::/64", "10.0.0.0/24"],
                         "taints": [{"key": "c", "effect": "NoSchedule"}]},
                "status": {
                    "addresses": [
                        {"type": "Hostname", "address": "n1"},
                        {"type": "InternalIP", "address": "10.0.0.1"}
                    ],
                    "images": [{"names": ["y"]}]
                }
            })
        );
        // Lists keyed by name elsewhere are not merged on a Node.
        let patch = json!({"status": {"volumesAttached": [{"name": "b"}]}});
        let current = json!({"status": {"volumesAttached": [{"name": "a"}]}});
        assert_eq!(node(patch.clone(), current).unwrap(), patch);
    }

    #[test]
    fn directives() {
        let current = json!({"status": {"conditions": [
            {"type": "A", "status": "True"}, {"type": "B", "status": "True"}, {"type": "A", "status": "x"}
        ]}, "spec": {"x": 1, "y": {"z": 2}}});
        // `$patch: delete` removes every item with the key; `$patch: replace`
        // replaces an object; `$patch: delete` on an object empties it.
        let patch = json!({
            "status": {"conditions": [{"type": "A", "$patch": "delete"}]},
            "spec": {"$patch": "replace", "w": 3}
        });
        assert_eq!(
            node(patch, current.clone()).unwrap(),
            json!({"status": {"conditions": [{"type": "B", "status": "True"}]}, "spec": {"w": 3}})
        );
        let patch = json!({"spec": {"y": {"$patch": "delete"}}});
        assert_eq!(
            node(patch, current.clone()).unwrap()["spec"],
            json!({"x": 1, "y": {}})
        );
        // `$patch: replace` in a merged list replaces it with the other items.
        let patch = json!({"status": {"conditions": [{"$patch": "replace"}, {"type": "C"}]}});
        assert_eq!(
            node(patch, current.clone()).unwrap()["status"]["conditions"],
            json!([{"type": "C"}])
        );
        // An item without its merge key, an unknown directive, `$patch: merge` in a list.
        for patch in [
            json!({"status": {"conditions": [{"status": "True"}]}}),
            json!({"status": {"conditions": [{"type": "A", "$patch": "delete-all"}]}}),
            json!({"status": {"conditions": [{"$patch": "merge"}]}}),
            json!({"spec": {"$patch": "keep"}}),
            json!([{"op": "add"}]),
        ] {
            assert!(node(patch.clone(), current.clone()).is_err(), "{patch}");
        }
        // Where nothing was, a patch's value lands without nulls or directives.
        let patch = json!({"spec": {"new": {"a": null, "b": {"$patch": "delete"}, "c": [{"x": 1, "y": null}]}}});
        assert_eq!(
            node(patch, json!({})).unwrap(),
            json!({"spec": {"new": {"c": [{"x": 1}]}}})
        );
    }

    /// A Pod's volume sources are a union: `$retainKeys` (sent by kubectl
    /// apply for `patchStrategy:"merge,retainKeys"`) clears the ones it does
    /// not name ("retainKeys map should clear defaulted field" upstream).
    #[test]
    fn retain_keys_clears_what_it_does_not_name() {
        let current = json!({"spec": {"volumes": [{"name": "v", "emptyDir": {}}]}});
        let patch = json!({"spec": {"volumes": [
            {"name": "v", "$retainKeys": ["name", "hostPath"], "hostPath": {"path": "/x"}}
        ]}});
        assert_eq!(
            pod(patch, current.clone()).unwrap(),
            json!({"spec": {"volumes": [{"name": "v", "hostPath": {"path": "/x"}}]}})
        );
        // A field the patch sets but does not retain is an error.
        let patch = json!({"spec": {"volumes": [
            {"name": "v", "$retainKeys": ["name"], "hostPath": {"path": "/x"}}
        ]}});
        assert!(pod(patch, current).is_err());
    }

    #[test]
    fn container_lists_merge_by_their_own_keys() {
        let current = json!({"spec": {"containers": [{
            "name": "app",
            "image": "a:1",
            "ports": [{"containerPort": 80, "name": "http"}],
            "env": [{"name": "A", "value": "1"}],
            "args": ["x"]
        }]}});
        let patch = json!({"spec": {"containers": [{
            "name": "app",
            "ports": [{"containerPort": 443}],
            "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
            "args": ["y"]
        }]}});
        assert_eq!(
            pod(patch, current).unwrap(),
            json!({"spec": {"containers": [{
                "name": "app",
                "image": "a:1",
                // A new item goes before the server's others (see above).
                "ports": [{"containerPort": 443}, {"containerPort": 80, "name": "http"}],
                "env": [{"name": "A", "value": "2"}, {"name": "B", "value": "3"}],
                "args": ["y"]
            }]}})
        );
        for (path, strategy) in [
            (
                "spec.initContainers.volumeMounts",
                ListStrategy::MergeByKey("mountPath"),
            ),
            (
                "spec.ephemeralContainers.volumeDevices",
                ListStrategy::MergeByKey("devicePath"),
            ),
            (
                "spec.topologySpreadConstraints",
                ListStrategy::MergeByKey("topologyKey"),
            ),
            ("status.podIPs", ListStrategy::MergeByKey("ip")),
            ("status.containerStatuses", ListStrategy::Replace),
            ("spec.tolerations", ListStrategy::Replace),
            ("metadata.ownerReferences", ListStrategy::MergeByKey("uid")),
        ] {
            assert_eq!(list_strategy(Resource::Pods, path), strategy, "{path}");
        }
        assert_eq!(
            list_strategy(Resource::Leases, "spec.containers"),
            ListStrategy::Replace
        );
    }
}
