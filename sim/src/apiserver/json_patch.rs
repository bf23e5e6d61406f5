//! JSON patch (RFC 6902) as the fake API server applies it, all operations
//! or none.

use serde_json::Value;

/// Applies a JSON patch to `target`, all operations or none.
pub(super) fn json_patch(target: &mut Value, patch: &Value) -> Result<(), String> {
    let ops = patch
        .as_array()
        .ok_or("a JSON patch must be a list of operations")?;
    let mut doc = target.clone();
    for op in ops {
        json_patch_op(&mut doc, op)?;
    }
    *target = doc;
    Ok(())
}

fn json_patch_op(doc: &mut Value, op: &Value) -> Result<(), String> {
    let field = |name: &str| {
        op.get(name)
            .and_then(Value::as_str)
            .ok_or_else(|| format!("a JSON patch operation lacks {name:?}: {op}"))
    };
    let value = || {
        op.get("value")
            .cloned()
            .ok_or_else(|| format!("a JSON patch operation lacks \"value\": {op}"))
    };
    let path = field("path")?;
    match field("op")? {
        "add" => pointer_add(doc, path, value()?),
        "remove" => pointer_remove(doc, path).map(drop),
        "replace" => {
            let slot = doc.pointer_mut(path).ok_or_else(|| {
                format!("replace operation does not apply: doc is missing path: {path}")
            })?;
            *slot = value()?;
            Ok(())
        }
        "move" => {
            let from = field("from")?;
            if path.starts_with(from) && path[from.len()..].starts_with('/') {
                return Err(format!("cannot move {from} into its own child {path}"));
            }
            let moved = pointer_remove(doc, from)?;
            pointer_add(doc, path, moved)
        }
        "copy" => {
            let from = field("from")?;
            let copied = doc.pointer(from).cloned().ok_or_else(|| {
                format!("copy operation does not apply: doc is missing from path: {from}")
            })?;
            pointer_add(doc, path, copied)
        }
        "test" => {
            if doc.pointer(path) == Some(&value()?) {
                Ok(())
            } else {
                Err(format!("testing value {path} failed"))
            }
        }
        other => Err(format!("unexpected JSON patch operation {other:?}")),
    }
}

/// Splits a JSON pointer into its parent and its unescaped last token.
fn pointer_parent(path: &str) -> Result<(&str, String), String> {
    let (parent, last) = path
        .rsplit_once('/')
        .ok_or_else(|| format!("invalid JSON pointer {path:?}"))?;
    Ok((parent, last.replace("~1", "/").replace("~0", "~")))
}

fn array_index(token: &str, len: usize, path: &str) -> Result<usize, String> {
    match token.parse::<usize>() {
        Ok(i) if i <= len && (token == "0" || !token.starts_with('0')) => Ok(i),
        _ => Err(format!("invalid array index in {path:?}")),
    }
}

fn pointer_add(doc: &mut Value, path: &str, value: Value) -> Result<(), String> {
    if path.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = pointer_parent(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => {
            map.insert(last, value);
            Ok(())
        }
        Some(Value::Array(items)) => {
            let i = if last == "-" {
                items.len()
            } else {
                array_index(&last, items.len(), path)?
            };
            items.insert(i, value);
            Ok(())
        }
        _ => Err(format!(
            "add operation does not apply: doc is missing path: {path}"
        )),
    }
}

fn pointer_remove(doc: &mut Value, path: &str) -> Result<Value, String> {
    let missing = || format!("remove operation does not apply: doc is missing path: {path}");
    let (parent, last) = pointer_parent(path)?;
    match doc.pointer_mut(parent) {
        Some(Value::Object(map)) => map.remove(&last).ok_or_else(missing),
        Some(Value::Array(items)) => {
            let i = array_index(&last, items.len(), path)?;
            if i < items.len() {
                Ok(items.remove(i))
            } else {
                Err(missing())
            }
        }
        _ => Err(missing()),
    }
}
