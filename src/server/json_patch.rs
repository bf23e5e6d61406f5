//! JSON Patch (RFC 6902), `application/json-patch+json`: what `kubectl patch
//! --type json` sends. Operations apply in order to a copy; the first that
//! fails refuses the whole patch and leaves the document as it was.

use serde_json::{Map, Value};

/// The most operations one patch may carry (kube-apiserver allows 10,000).
pub const MAX_OPERATIONS: usize = 10_000;

/// Applies `patch` (an array of operations) to `doc`, or says which
/// operation failed and why.
pub fn apply(doc: &mut Value, patch: &Value) -> Result<(), String> {
    let Value::Array(ops) = patch else {
        return Err("a JSON patch is an array of operations".into());
    };
    if ops.len() > MAX_OPERATIONS {
        return Err(format!(
            "the JSON patch has {} operations, more than the {MAX_OPERATIONS} allowed",
            ops.len()
        ));
    }
    let mut work = doc.clone();
    for (i, op) in ops.iter().enumerate() {
        operation(&mut work, op).map_err(|e| format!("JSON patch operation {i}: {e}"))?;
    }
    *doc = work;
    Ok(())
}

fn operation(doc: &mut Value, op: &Value) -> Result<(), String> {
    let field = |name: &str| -> Result<&str, String> {
        op.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("missing string field {name:?}"))
    };
    let path = pointer(field("path")?)?;
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| "missing field \"value\"".to_string())
    };
    match field("op")? {
        "add" => add(doc, &path, value()?),
        "remove" => remove(doc, &path).map(|_| ()),
        "replace" => {
            let v = value()?;
            let slot = get_mut(doc, &path)?;
            *slot = v;
            Ok(())
        }
        "move" => {
            let from = pointer(field("from")?)?;
            if path.len() > from.len() && path[..from.len()] == from[..] {
                return Err("cannot move a value into itself".into());
            }
            let v = remove(doc, &from)?;
            add(doc, &path, v)
        }
        "copy" => {
            let from = pointer(field("from")?)?;
            let v = get_mut(doc, &from)?.clone();
            add(doc, &path, v)
        }
        "test" => {
            let want = value()?;
            let have = get_mut(doc, &path)?;
            if *have == want {
                Ok(())
            } else {
                Err(format!(
                    "test failed: {} is {have}, not {want}",
                    display(&path)
                ))
            }
        }
        other => Err(format!(
            "unknown op {other:?} (add, remove, replace, move, copy or test)"
        )),
    }
}

/// Parses a JSON pointer (RFC 6901) into its unescaped tokens.
fn pointer(text: &str) -> Result<Vec<String>, String> {
    if text.is_empty() {
        return Ok(Vec::new());
    }
    let Some(rest) = text.strip_prefix('/') else {
        return Err(format!("path {text:?} does not start with '/'"));
    };
    rest.split('/')
        .map(|token| {
            let mut out = String::with_capacity(token.len());
            let mut chars = token.chars();
            while let Some(c) = chars.next() {
                if c != '~' {
                    out.push(c);
                    continue;
                }
                match chars.next() {
                    Some('0') => out.push('~'),
                    Some('1') => out.push('/'),
                    _ => return Err(format!("path {text:?} has a '~' not followed by 0 or 1")),
                }
            }
            Ok(out)
        })
        .collect()
}

fn display(path: &[String]) -> String {
    if path.is_empty() {
        return "the document".into();
    }
    path.iter()
        .map(|t| format!("/{}", t.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// An array index token: digits only, no leading zero.
fn index(token: &str, len: usize, allow_end: bool) -> Result<usize, String> {
    if token == "-" && allow_end {
        return Ok(len);
    }
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    let i: usize = if valid {
        token
            .parse()
            .map_err(|_| format!("array index {token:?} is too large"))?
    } else {
        return Err(format!("{token:?} is not an array index"));
    };
    let max = if allow_end {
        len
    } else {
        len.saturating_sub(1)
    };
    if i > max || (!allow_end && len == 0) {
        return Err(format!("array index {i} is out of bounds (length {len})"));
    }
    Ok(i)
}

fn get_mut<'a>(doc: &'a mut Value, path: &[String]) -> Result<&'a mut Value, String> {
    let mut at = doc;
    for (depth, token) in path.iter().enumerate() {
        let missing = || format!("{} does not exist", display(&path[..=depth]));
        at = match at {
            Value::Object(map) => map.get_mut(token).ok_or_else(missing)?,
            Value::Array(items) => {
                let i = index(token, items.len(), false).map_err(|_| missing())?;
                &mut items[i]
            }
            _ => return Err(missing()),
        };
    }
    Ok(at)
}

fn add(doc: &mut Value, path: &[String], value: Value) -> Result<(), String> {
    let Some((last, parent)) = path.split_last() else {
        *doc = value;
        return Ok(());
    };
    match get_mut(doc, parent)? {
        Value::Object(map) => {
            map.insert(last.clone(), value);
            Ok(())
        }
        Value::Array(items) => {
            let i = index(last, items.len(), true)?;
            items.insert(i, value);
            Ok(())
        }
        _ => Err(format!(
            "{} is neither an object nor an array",
            display(parent)
        )),
    }
}

fn remove(doc: &mut Value, path: &[String]) -> Result<Value, String> {
    let Some((last, parent)) = path.split_last() else {
        return Ok(std::mem::replace(doc, Value::Object(Map::new())));
    };
    match get_mut(doc, parent)? {
        Value::Object(map) => map
            .remove(last)
            .ok_or_else(|| format!("{} does not exist", display(path))),
        Value::Array(items) => {
            let i = index(last, items.len(), false)?;
            Ok(items.remove(i))
        }
        _ => Err(format!("{} does not exist", display(path))),
    }
}

/// The top-level fields a JSON patch touches (`/status/...` → `status`), so
/// a caller can refuse writes to fields that are not the writer's.
pub fn touches(patch: &Value, field: &str) -> bool {
    let hits = |p: Option<&Value>| {
        p.and_then(Value::as_str)
            .and_then(|p| pointer(p).ok())
            .is_some_and(|tokens| {
                tokens.first().map(String::as_str) == Some(field) || tokens.is_empty()
            })
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

    fn patched(doc: Value, patch: Value) -> Result<Value, String> {
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
        assert!(e.starts_with("JSON patch operation 1:"), "{e}");
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

        /// Pointers with escapes round trip through their display.
        #[test]
        fn pointers_round_trip(tokens in proptest::collection::vec("[a-z~/]{0,5}", 1..4)) {
            let text = display(&tokens);
            prop_assert_eq!(pointer(&text).unwrap(), tokens);
        }
    }
}
