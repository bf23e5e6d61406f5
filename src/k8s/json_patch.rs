//! JSON Patch (RFC 6902), `application/json-patch+json`: what `kubectl patch
//! --type json` sends. Operations apply in order to a copy; the first that
//! fails refuses the whole patch and leaves the document as it was. The
//! operations themselves are the `json-patch` crate's; this module bounds
//! the patch, says which operation failed, and tells what a patch touches.

use json_patch::jsonptr::Pointer;
use json_patch::{PatchErrorKind, PatchOperation};
use serde::Deserialize;
use serde_json::Value;

use crate::validation::json_len;

/// The most operations one patch may carry (kube-apiserver allows 10,000).
pub const MAX_OPERATIONS: usize = 10_000;

/// The most bytes (as JSON) the `copy` operations of one patch may add in
/// all. Each copy can double a value, so without a bound 23 of them in a
/// 2.5 KB patch build gigabytes. kube-apiserver bounds them the same way,
/// to what a request body may carry (`JSONPatchMaxCopyBytes` =
/// `MaxRequestBodyBytes`); this is the API's body limit,
/// [`crate::server::BODY_LIMIT`].
pub const MAX_COPIED_BYTES: usize = 1 << 20;

/// Why a JSON patch was refused. Every variant names the operation (by its
/// index) where that applies, so the writer can fix that one.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum JsonPatchError {
    /// The body is not an array: send `[{"op": ..., "path": ...}, ...]`.
    #[error("a JSON patch is an array of operations")]
    NotAnArray,
    /// More operations than [`MAX_OPERATIONS`]: split the patch.
    #[error("the JSON patch has {count} operations, more than the {MAX_OPERATIONS} allowed")]
    TooManyOperations { count: usize },
    /// An operation that is not one: an unknown `op`, a missing field, a
    /// malformed pointer.
    #[error("JSON patch operation {index}: {reason}")]
    MalformedOperation { index: usize, reason: String },
    /// A `test` operation found another value: the patch was written
    /// against another version of the document.
    #[error("JSON patch operation {index}: test failed: {path} is not {expected}")]
    TestFailed {
        index: usize,
        path: String,
        expected: Value,
    },
    /// A path, or a `move`'s or `copy`'s `from`, names nothing in the document.
    #[error("JSON patch operation {index}: {detail}")]
    NoSuchPath { index: usize, detail: String },
    /// Any other operation that cannot apply (a move into its own child, ...).
    #[error("JSON patch operation {index}: {detail}")]
    CannotApply { index: usize, detail: String },
    /// The copies up to operation `index` add more than [`MAX_COPIED_BYTES`].
    #[error(
        "JSON patch operation {index}: copy from {from} to {path}: the patch's copies would add \
         {copied} bytes, more than the {MAX_COPIED_BYTES} one patch may copy; send the values \
         with add operations instead"
    )]
    CopiesTooLarge {
        index: usize,
        from: String,
        path: String,
        copied: usize,
    },
}

/// Applies `patch` (an array of operations) to `doc`, or says which
/// operation failed and why.
pub fn apply(doc: &mut Value, patch: &Value) -> Result<(), JsonPatchError> {
    let Value::Array(ops) = patch else {
        return Err(JsonPatchError::NotAnArray);
    };
    if ops.len() > MAX_OPERATIONS {
        return Err(JsonPatchError::TooManyOperations { count: ops.len() });
    }
    let ops = ops
        .iter()
        .enumerate()
        .map(|(index, op)| {
            PatchOperation::deserialize(op).map_err(|e| JsonPatchError::MalformedOperation {
                index,
                reason: e.to_string(),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    // On a copy: the crate's own rollback panics if an undo fails.
    let mut work = doc.clone();
    let mut copied = 0;
    for (index, op) in ops.iter().enumerate() {
        // A copy is measured before it is made, so none that passes the
        // bound is ever built; the crate finds `from` the same way.
        if let PatchOperation::Copy(c) = op {
            if let Some(value) = work.pointer(c.from.as_str()) {
                copied += json_len(value);
                if copied > MAX_COPIED_BYTES {
                    return Err(JsonPatchError::CopiesTooLarge {
                        index,
                        from: shown(&c.from),
                        path: shown(&c.path),
                        copied,
                    });
                }
            }
        }
        json_patch::patch_unsafe(&mut work, std::slice::from_ref(op))
            .map_err(|e| failure(index, op, &e.kind))?;
    }
    *doc = work;
    Ok(())
}

/// Why operation `index`, `op`, could not be applied, naming its paths.
fn failure(index: usize, op: &PatchOperation, kind: &PatchErrorKind) -> JsonPatchError {
    let path = shown(op.path());
    let no_such_from = |verb: &str, from: &Pointer| JsonPatchError::NoSuchPath {
        index,
        detail: format!(
            "{verb} from {} to {path}: {} does not exist",
            shown(from),
            shown(from)
        ),
    };
    match (op, kind) {
        (PatchOperation::Test(t), PatchErrorKind::TestFailed) => JsonPatchError::TestFailed {
            index,
            path,
            expected: t.value.clone(),
        },
        (PatchOperation::Move(m), PatchErrorKind::InvalidFromPointer) => {
            no_such_from("move", &m.from)
        }
        (PatchOperation::Copy(c), PatchErrorKind::InvalidFromPointer) => {
            no_such_from("copy", &c.from)
        }
        (_, PatchErrorKind::InvalidPointer) => JsonPatchError::NoSuchPath {
            index,
            detail: format!(
                "{} {path}: no such member or index (or its parent is not an object or array)",
                op_name(op)
            ),
        },
        (_, kind) => JsonPatchError::CannotApply {
            index,
            detail: format!("{} {path}: {kind}", op_name(op)),
        },
    }
}

fn op_name(op: &PatchOperation) -> &'static str {
    match op {
        PatchOperation::Add(_) => "add",
        PatchOperation::Remove(_) => "remove",
        PatchOperation::Replace(_) => "replace",
        PatchOperation::Move(_) => "move",
        PatchOperation::Copy(_) => "copy",
        PatchOperation::Test(_) => "test",
    }
}

fn shown(path: &Pointer) -> String {
    if path.is_root() {
        "the document".into()
    } else {
        path.to_string()
    }
}

/// Whether a JSON patch writes under the top-level `field` (`/status/...`
/// touches `status`; so does the whole document), so a caller can refuse
/// writes to fields that are not the writer's. Read from the raw operations:
/// a path is judged even when the rest of its operation is malformed.
pub fn touches(patch: &Value, field: &str) -> bool {
    let hits = |p: Option<&Value>| {
        p.and_then(Value::as_str)
            .and_then(|p| Pointer::parse(p).ok())
            .is_some_and(|p| p.is_root() || p.first().is_some_and(|t| t.decoded() == field))
    };
    patch
        .as_array()
        .into_iter()
        .flatten()
        .filter(|op| op.get("op").and_then(Value::as_str) != Some("test"))
        .any(|op| {
            hits(op.get("path"))
                || (op.get("op").and_then(Value::as_str) == Some("move") && hits(op.get("from")))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn patched(doc: Value, patch: Value) -> Result<Value, JsonPatchError> {
        let mut doc = doc;
        apply(&mut doc, &patch).map(|()| doc)
    }

    /// The examples of RFC 6902, appendix A.
    #[test]
    fn rfc_6902_examples() {
        assert_eq!(
            patched(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/baz", "value": "qux"}])
            ),
            Ok(json!({"baz": "qux", "foo": "bar"}))
        );
        assert_eq!(
            patched(
                json!({"foo": ["bar", "baz"]}),
                json!([{"op": "add", "path": "/foo/1", "value": "qux"}])
            ),
            Ok(json!({"foo": ["bar", "qux", "baz"]}))
        );
        assert_eq!(
            patched(
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "remove", "path": "/baz"}])
            ),
            Ok(json!({"foo": "bar"}))
        );
        assert_eq!(
            patched(
                json!({"foo": ["bar", "qux", "baz"]}),
                json!([{"op": "remove", "path": "/foo/1"}])
            ),
            Ok(json!({"foo": ["bar", "baz"]}))
        );
        assert_eq!(
            patched(
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "replace", "path": "/baz", "value": "boo"}])
            ),
            Ok(json!({"baz": "boo", "foo": "bar"}))
        );
        assert_eq!(
            patched(
                json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
                json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}])
            ),
            Ok(json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}))
        );
        assert_eq!(
            patched(
                json!({"foo": ["all", "grass", "cows", "eat"]}),
                json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}])
            ),
            Ok(json!({"foo": ["all", "cows", "eat", "grass"]}))
        );
        assert!(patched(
            json!({"baz": "qux", "foo": ["a", 2, "c"]}),
            json!([{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}])
        )
        .is_ok());
        assert!(patched(
            json!({"baz": "qux"}),
            json!([{"op": "test", "path": "/baz", "value": "bar"}])
        )
        .is_err());
        assert_eq!(
            patched(
                json!({"foo": "bar"}),
                json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}])
            ),
            Ok(json!({"foo": "bar", "child": {"grandchild": {}}}))
        );
        assert!(patched(
            json!({"foo": "bar"}),
            json!([{"op": "add", "path": "/baz/bat", "value": "qux"}])
        )
        .is_err());
        assert_eq!(
            patched(
                json!({"/": 9, "~1": 10}),
                json!([{"op": "test", "path": "/~01", "value": 10}])
            ),
            Ok(json!({"/": 9, "~1": 10}))
        );
        assert_eq!(
            patched(
                json!({"foo": ["bar"]}),
                json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}])
            ),
            Ok(json!({"foo": ["bar", ["abc", "def"]]}))
        );
    }

    #[test]
    fn a_failed_operation_leaves_the_document_alone() {
        let mut doc = json!({"a": 1});
        let e = apply(
            &mut doc,
            &json!([{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/nope"}]),
        )
        .unwrap_err();
        assert!(
            matches!(e, JsonPatchError::NoSuchPath { index: 1, .. }),
            "{e:?}"
        );
        assert!(e.to_string().starts_with("JSON patch operation 1:"), "{e}");
        assert_eq!(doc, json!({"a": 1}));
        for bad in [
            json!({"op": "add"}),
            json!([{"op": "frobnicate", "path": "/a"}]),
            json!([{"op": "add", "path": "a", "value": 1}]),
            json!([{"op": "remove", "path": "/a/01"}]),
            json!([{"op": "replace", "path": "/x~2", "value": 1}]),
            json!([{"op": "move", "from": "/a", "path": "/a/b"}]),
            json!([{"op": "add", "path": "/l/5", "value": 1}]),
        ] {
            let mut doc = json!({"a": {"b": 1}, "l": [1]});
            assert!(apply(&mut doc, &bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn failures_name_the_operation_and_its_paths() {
        let mut doc = json!({"a": {"b": 1}, "l": [1]});
        let fails = |patch: Value| apply(&mut doc.clone(), &patch).unwrap_err().to_string();
        assert_eq!(
            fails(
                json!([{"op": "test", "path": "/a", "value": {"b": 1}}, {"op": "test", "path": "/a/b", "value": 2}])
            ),
            "JSON patch operation 1: test failed: /a/b is not 2"
        );
        assert_eq!(
            fails(json!([{"op": "remove", "path": "/a/c"}])),
            "JSON patch operation 0: remove /a/c: no such member or index (or its parent is not an object or array)"
        );
        assert_eq!(
            fails(json!([{"op": "copy", "from": "/x", "path": "/y"}])),
            "JSON patch operation 0: copy from /x to /y: /x does not exist"
        );
        assert_eq!(
            fails(json!([{"op": "move", "from": "/a", "path": "/a/b"}])),
            "JSON patch operation 0: move /a/b: cannot move the value inside itself"
        );
        for (patch, start) in [
            (
                json!([{"op": "frobnicate", "path": "/a"}]),
                "JSON patch operation 0: unknown variant `frobnicate`",
            ),
            (
                json!([{"op": "add", "path": "/a"}]),
                "JSON patch operation 0: missing field `value`",
            ),
            (
                json!([{"op": "add", "path": "a", "value": 1}]),
                "JSON patch operation 0: ",
            ),
        ] {
            let e = fails(patch);
            assert!(e.starts_with(start), "{e}");
        }
        assert!(apply(
            &mut doc,
            &json!([{"op": "add", "path": "/l/-", "value": 2}])
        )
        .is_ok());
        assert_eq!(doc["l"], json!([1, 2]));
    }

    #[test]
    fn failures_are_told_apart_by_variant() {
        let doc = json!({"a": {"b": 1}});
        let fails = |patch: Value| apply(&mut doc.clone(), &patch).unwrap_err();
        assert_eq!(fails(json!({"op": "add"})), JsonPatchError::NotAnArray);
        let many = vec![json!({"op": "test", "path": "/a", "value": 1}); MAX_OPERATIONS + 1];
        assert_eq!(
            fails(Value::Array(many)),
            JsonPatchError::TooManyOperations {
                count: MAX_OPERATIONS + 1
            }
        );
        assert!(matches!(
            fails(json!([{"op": "frobnicate", "path": "/a"}])),
            JsonPatchError::MalformedOperation { index: 0, .. }
        ));
        assert_eq!(
            fails(json!([{"op": "test", "path": "/a/b", "value": 2}])),
            JsonPatchError::TestFailed {
                index: 0,
                path: "/a/b".into(),
                expected: json!(2)
            }
        );
        assert!(matches!(
            fails(json!([{"op": "copy", "from": "/x", "path": "/y"}])),
            JsonPatchError::NoSuchPath { index: 0, .. }
        ));
        assert!(matches!(
            fails(json!([{"op": "move", "from": "/a", "path": "/a/b"}])),
            JsonPatchError::CannotApply { index: 0, .. }
        ));
    }

    /// The patch of the report that one 2.5 KB request took gigabytes: each
    /// copy doubles `/metadata/x`. kube-apiserver bounds the bytes a patch's
    /// copies add (k8s.io/apiserver pkg/server/config.go:464,
    /// `JSONPatchMaxCopyBytes: 3 MiB`, armed at config.go:889-899 as
    /// json-patch's `AccumulatedCopySizeLimit`, checked per copy in
    /// evanphx/json-patch patch.go:738-741) and refuses it with a 422
    /// (pkg/endpoints/handlers/patch.go:423-425).
    fn doubling_copies(copies: usize) -> Value {
        let mut ops =
            vec![json!({"op": "add", "path": "/metadata/x", "value": {"s": "y".repeat(1000)}})];
        ops.extend((0..copies).map(
            |i| json!({"op": "copy", "from": "/metadata/x", "path": format!("/metadata/x/c{i}")}),
        ));
        Value::Array(ops)
    }

    #[test]
    fn copies_are_bounded_in_the_bytes_they_add() {
        let doc = json!({"metadata": {"name": "edge-1"}});
        // 12 doublings would build 4 MB; the copy that passes 1 MiB is refused.
        let mut work = doc.clone();
        let e = apply(&mut work, &doubling_copies(12)).unwrap_err();
        let JsonPatchError::CopiesTooLarge { index, copied, .. } = &e else {
            panic!("not refused for its copies: {e:?}");
        };
        assert!(
            *copied > MAX_COPIED_BYTES && *copied < 2 * MAX_COPIED_BYTES,
            "{e}"
        );
        assert_eq!(*index, 11, "the copy that passes the bound: {e}");
        assert_eq!(work, doc, "a refused patch changes nothing");
        assert!(
            e.to_string().starts_with(
                "JSON patch operation 11: copy from /metadata/x to /metadata/x/c10: the patch's \
                 copies would add"
            ),
            "{e}"
        );
        // The report's 23 doublings are refused at the same copy.
        let e = apply(&mut doc.clone(), &doubling_copies(23)).unwrap_err();
        assert!(
            matches!(e, JsonPatchError::CopiesTooLarge { index: 11, .. }),
            "{e:?}"
        );
        // Copies within the bound apply as before.
        let mut work = doc.clone();
        apply(&mut work, &doubling_copies(5)).unwrap();
        assert_eq!(
            work["metadata"]["x"]["c4"]["c3"]["c2"]["c1"]["c0"]["s"],
            "y".repeat(1000)
        );
    }

    #[test]
    fn what_a_patch_touches() {
        let p = json!([{"op": "test", "path": "/status", "value": 1},
                       {"op": "add", "path": "/spec/unschedulable", "value": true}]);
        assert!(touches(&p, "spec"));
        assert!(!touches(&p, "status"));
        assert!(touches(
            &json!([{"op": "move", "from": "/status/x", "path": "/spec/y"}]),
            "status"
        ));
        assert!(touches(
            &json!([{"op": "replace", "path": "", "value": {}}]),
            "status"
        ));
    }
}

#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn json_value() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z~/0-9-]{0,6}".prop_map(Value::from),
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map("[a-z~/0-9-]{0,4}", inner, 0..4)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    fn op() -> impl Strategy<Value = Value> {
        (
            prop_oneof![
                Just("add"),
                Just("remove"),
                Just("replace"),
                Just("move"),
                Just("copy"),
                Just("test"),
                Just("nope")
            ],
            "(/[a-z0-9~-]{0,3}){0,3}",
            "(/[a-z0-9~-]{0,3}){0,3}",
            json_value(),
        )
            .prop_map(|(op, path, from, value)| {
                serde_json::json!({"op": op, "path": path, "from": from, "value": value})
            })
    }

    proptest! {
        /// Any patch on any document: an answer, never a panic; a refused
        /// patch leaves the document as it was.
        #[test]
        fn never_panics_and_refusals_change_nothing(
            doc in json_value(),
            ops in proptest::collection::vec(op(), 0..6),
        ) {
            let mut work = doc.clone();
            if apply(&mut work, &Value::Array(ops)).is_err() {
                prop_assert_eq!(work, doc);
            }
        }

        /// Adding then removing the same new member gives the document back.
        #[test]
        fn add_then_remove_is_identity(
            map in proptest::collection::btree_map("[a-z]{1,4}", json_value(), 0..4),
            key in "[A-Z]{1,4}",
            value in json_value(),
        ) {
            let doc = Value::Object(map.into_iter().collect());
            let mut work = doc.clone();
            let path = format!("/{key}");
            apply(&mut work, &serde_json::json!([
                {"op": "add", "path": path, "value": value},
                {"op": "remove", "path": path}
            ])).unwrap();
            prop_assert_eq!(work, doc);
        }

        /// Member names with `~` and `/` are reached through their escapes (`~0`, `~1`).
        #[test]
        fn escaped_member_names_are_reached(key in "[a-z~/]{0,5}", value in json_value()) {
            let escaped = key.replace('~', "~0").replace('/', "~1");
            let mut doc = serde_json::json!({});
            apply(&mut doc, &serde_json::json!([
                {"op": "add", "path": format!("/{escaped}"), "value": value},
                {"op": "test", "path": format!("/{escaped}"), "value": value},
            ])).unwrap();
            prop_assert_eq!(&doc[&key], &value);
        }
    }
}
