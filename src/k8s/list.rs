//! `…List` objects: a whole list as one value, or the end of one whose
//! items are written one at a time as they are read (a streamed list: its
//! kind's head, the items, then [`list_tail`]).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde_json::{json, Value};

/// A list of `kind` objects (`Secret` makes a `SecretList`) at
/// `resource_version`:
/// `{"apiVersion":…,"items":[…],"kind":"…List","metadata":{"resourceVersion":"N"}}`.
pub fn list(api_version: &str, kind: &str, resource_version: u64, items: Vec<Value>) -> Value {
    list_page(api_version, kind, at_version(resource_version), items)
}

/// The metadata of a list (or a one-row Table) at `version`.
pub fn at_version(version: impl ToString) -> ListMeta {
    ListMeta {
        resource_version: Some(version.to_string()),
        ..ListMeta::default()
    }
}

/// [`list`] with its whole `metadata`: a page of a paged list, with its
/// `continue` token and `remainingItemCount`.
pub fn list_page(api_version: &str, kind: &str, metadata: ListMeta, items: Vec<Value>) -> Value {
    json!({
        "apiVersion": api_version,
        "kind": format!("{kind}List"),
        "metadata": metadata,
        "items": items,
    })
}

/// The end of a streamed list after its last item: `],"metadata":{…}}`.
pub fn list_tail(metadata: &ListMeta) -> Vec<u8> {
    let metadata = serde_json::to_vec(metadata).unwrap_or_else(|_| b"{}".to_vec());
    let mut tail = Vec::with_capacity(metadata.len() + 16);
    tail.extend_from_slice(br#"],"metadata":"#);
    tail.extend_from_slice(&metadata);
    tail.push(b'}');
    tail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_name_their_kind_and_version() {
        let v = list("storage.k8s.io/v1", "CSINode", 7, vec![json!({"a": 1})]);
        assert_eq!(
            v.to_string(),
            r#"{"apiVersion":"storage.k8s.io/v1","items":[{"a":1}],"kind":"CSINodeList","metadata":{"resourceVersion":"7"}}"#
        );
    }

    #[test]
    fn a_streamed_list_ends_with_its_metadata() {
        let metadata = ListMeta {
            resource_version: Some("9".into()),
            continue_: Some("next".into()),
            ..ListMeta::default()
        };
        let mut text = br#"{"items":[1"#.to_vec();
        text.extend(list_tail(&metadata));
        let v: Value = serde_json::from_slice(&text).expect("valid json");
        assert_eq!(
            v,
            json!({"items": [1], "metadata": {"resourceVersion": "9", "continue": "next"}})
        );
    }
}
