//! Lists: label and field selectors, pages and `continue` tokens, and the
//! field values selectors read from an object.

use std::collections::BTreeMap;
use std::ops::Bound;

use hyper::StatusCode;
use nodekeeper::kube::selectors::{FieldSelector, LabelSelector};
use serde_json::{json, Value};

use super::answer::{Answer, ApiError};
use super::resource::{ObjectKey, Resource};
use super::routing::Query;
use super::state::State;

impl State {
    /// `GET` of a collection: selectors, then a page.
    pub(super) fn list(
        &self,
        resource: Resource,
        namespace: Option<&str>,
        query: &Query,
    ) -> Result<Answer, ApiError> {
        if query.watch() {
            return Err(ApiError::bad_request(format!(
                "the fake API server watches nodes only, not {}",
                resource.plural()
            )));
        }
        let (labels, fields) = selectors(resource, query)?;
        let limit = match query.get("limit") {
            None => None,
            Some(l) => match l.parse::<usize>() {
                Ok(0) => None,
                Ok(n) => Some(n),
                Err(_) => return Err(ApiError::bad_request(format!("invalid limit {l:?}"))),
            },
        };
        let first = ObjectKey {
            resource,
            namespace: namespace.unwrap_or("").to_owned(),
            name: String::new(),
        };
        let start = match query.get("continue") {
            None => Bound::Included(first),
            Some(token) => Bound::Excluded(decode_continue(resource, token)?),
        };

        let in_scope =
            |k: &ObjectKey| k.resource == resource && namespace.is_none_or(|ns| k.namespace == ns);
        let mut items = Vec::new();
        let mut last_key = None;
        let mut more = false;
        for (key, object) in self
            .objects
            .range((start, Bound::Unbounded))
            .take_while(|(k, _)| in_scope(k))
        {
            if !labels.matches(&labels_of(object)) || !fields.matches(|f| field_of(object, f)) {
                continue;
            }
            if limit.is_some_and(|l| items.len() == l) {
                more = true;
                break;
            }
            items.push(object.clone());
            last_key = Some(key);
        }
        let mut metadata = json!({"resourceVersion": self.resource_version.to_string()});
        if let (true, Some(last)) = (more, last_key) {
            // The next page starts after the last item of this one.
            metadata["continue"] = encode_continue(last).into();
        }
        Ok(Answer::new(
            StatusCode::OK,
            json!({
                "kind": format!("{}List", resource.kind()),
                "apiVersion": resource.api_version(),
                "metadata": metadata,
                "items": items,
            }),
        ))
    }
}

/// The `labelSelector` and `fieldSelector` of a list or watch, the fields
/// checked against those `resource` supports.
pub(super) fn selectors(
    resource: Resource,
    query: &Query,
) -> Result<(LabelSelector, FieldSelector), ApiError> {
    let labels = LabelSelector::parse(query.get("labelSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    fields
        .check_fields(resource.field_labels())
        .map_err(|e| ApiError::bad_request(e.to_string()))?;
    Ok((labels, fields))
}

pub(super) fn labels_of(object: &Value) -> BTreeMap<String, String> {
    object
        .get("metadata")
        .and_then(|m| m.get("labels"))
        .and_then(Value::as_object)
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default()
}

/// An object's value of a field label, as the API server's field sets give
/// it: strings as they are, booleans as `true`/`false` (absent is `false`).
pub(super) fn field_of<'a>(object: &'a Value, field: &str) -> Option<&'a str> {
    let pointer = format!("/{}", field.replace('.', "/"));
    match object.pointer(&pointer) {
        Some(Value::String(s)) => Some(s.as_str()),
        Some(Value::Bool(true)) => Some("true"),
        Some(Value::Bool(false)) => Some("false"),
        None if matches!(field, "spec.unschedulable" | "spec.hostNetwork") => Some("false"),
        _ => None,
    }
}

/// A `continue` token: opaque to clients, the key of the last item returned.
fn encode_continue(key: &ObjectKey) -> String {
    format!("{}/{}", key.namespace, key.name)
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(resource: Resource, token: &str) -> Result<ObjectKey, ApiError> {
    let invalid = || ApiError::bad_request("continue key is not valid");
    if !token.len().is_multiple_of(2) || !token.is_ascii() {
        return Err(invalid());
    }
    let bytes = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&token[i..i + 2], 16))
        .collect::<Result<Vec<u8>, _>>()
        .map_err(|_| invalid())?;
    let text = String::from_utf8(bytes).map_err(|_| invalid())?;
    let (namespace, name) = text.split_once('/').ok_or_else(invalid)?;
    Ok(ObjectKey {
        resource,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::test_support::*;

    #[tokio::test]
    async fn lists_pods_by_field_and_label_selector_in_pages() {
        let server = FakeApiServer::start().await;
        let c = client(&server);
        server.put_pod(pod_json("default", "a1", Some("n1"), "web"));
        server.put_pod(pod_json("kube-system", "a2", Some("n1"), "dns"));
        server.put_pod(pod_json("default", "b1", Some("n2"), "web"));
        server.put_pod(pod_json("default", "u", None, "web"));
        let names = |list: ::kube::core::ObjectList<Pod>| -> Vec<String> {
            list.items
                .iter()
                .map(|p| format!("{}/{}", p.namespace().unwrap_or_default(), p.name_any()))
                .collect()
        };
        let pods: Api<Pod> = Api::all(c.clone());

        let on_n1 = pods
            .list(&ListParams::default().fields("spec.nodeName=n1"))
            .await
            .expect("list");
        assert_eq!(
            on_n1.metadata.resource_version,
            Some(server.resource_version().to_string())
        );
        assert_eq!(names(on_n1), ["default/a1", "kube-system/a2"]);
        let elsewhere = pods
            .list(&ListParams::default().fields("spec.nodeName!=n1"))
            .await
            .expect("list");
        assert_eq!(names(elsewhere), ["default/b1", "default/u"]);
        let unscheduled = pods
            .list(&ListParams::default().fields("spec.nodeName="))
            .await
            .expect("list");
        assert_eq!(names(unscheduled), ["default/u"]);
        let web_on_n1 = pods
            .list(
                &ListParams::default()
                    .labels("app=web")
                    .fields("spec.nodeName==n1"),
            )
            .await
            .expect("list");
        assert_eq!(names(web_on_n1), ["default/a1"]);
        let in_ns: Api<Pod> = Api::namespaced(c.clone(), "kube-system");
        assert_eq!(
            names(in_ns.list(&ListParams::default()).await.expect("list")),
            ["kube-system/a2"]
        );

        let first = pods
            .list(&ListParams::default().limit(3))
            .await
            .expect("page 1");
        let token = first.metadata.continue_.clone().expect("a continue token");
        assert_eq!(names(first), ["default/a1", "default/b1", "default/u"]);
        let second = pods
            .list(&ListParams::default().limit(3).continue_token(&token))
            .await
            .expect("page 2");
        assert_eq!(second.metadata.continue_, None);
        assert_eq!(names(second), ["kube-system/a2"]);

        let err = api_error(pods.list(&ListParams::default().fields("spec.foo=x")).await);
        assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
        assert_eq!(err.message, "field label not supported: spec.foo");
        let err = api_error(pods.list(&ListParams::default().labels("a in (")).await);
        assert_eq!(err.code, 400);
    }

    #[test]
    fn continue_tokens_round_trip_and_refuse_garbage() {
        let key = ObjectKey::pod("default", "p-1");
        let token = encode_continue(&key);
        assert_eq!(
            decode_continue(Resource::Pods, &token).expect("decodes"),
            key
        );
        for bad in ["zz", "abc", "é1", "6162"] {
            assert!(decode_continue(Resource::Pods, bad).is_err(), "{bad}");
        }
    }
}
