//! Lists: label and field selectors, pages and `continue` tokens, and the
//! field values selectors read from an object.

use std::ops::Bound;

use hyper::StatusCode;
use serde_json::{json, Value};

use super::answer::{Answer, ApiError};
use super::resource::{ObjectKey, Resource};
use super::routing::Query;
use super::selectors::{FieldSelector, LabelSelector};
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
            if !selected(resource, object, &labels, &fields) {
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
        .map_err(ApiError::bad_request)?;
    let fields = FieldSelector::parse(query.get("fieldSelector").unwrap_or(""))
        .map_err(ApiError::bad_request)?;
    if let Some(field) = fields
        .fields()
        .find(|f| !resource.field_labels().contains(f))
    {
        return Err(ApiError::bad_request(format!(
            "field label not supported: {field}"
        )));
    }
    Ok((labels, fields))
}

/// Whether `object` of `resource` is selected by both selectors.
pub(super) fn selected(
    resource: Resource,
    object: &Value,
    labels: &LabelSelector,
    fields: &FieldSelector,
) -> bool {
    labels.matches(object.pointer("/metadata/labels"))
        && fields.matches(|field| field_value(resource, object, field))
}

/// An object's value of a field label, as the registry's selectable field
/// sets give it (`""` for a field the object lacks or the set leaves out):
/// kubernetes/kubernetes `pkg/registry/core/pod/strategy.go`
/// (`ToSelectableFields`), `pkg/registry/core/node/strategy.go`
/// (`NodeToSelectableFields`), and `generic.ObjectMetaFieldsSet` for Leases.
fn field_value(resource: Resource, object: &Value, field: &str) -> String {
    let text = |pointer: &str| {
        object
            .pointer(pointer)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    let flag = |pointer: &str| (object.pointer(pointer) == Some(&Value::Bool(true))).to_string();
    match (resource, field) {
        (_, "metadata.name") => text("/metadata/name"),
        (Resource::Pods | Resource::Leases, "metadata.namespace") => text("/metadata/namespace"),
        (Resource::Nodes, "spec.unschedulable") => flag("/spec/unschedulable"),
        (Resource::Pods, "spec.nodeName" | "spec.host") => text("/spec/nodeName"),
        (Resource::Pods, "spec.hostNetwork") => flag("/spec/hostNetwork"),
        (Resource::Pods, "status.podIP") => {
            // v1's podIP wins over podIPs[0] when both are given (pod conversion).
            let ip = text("/status/podIP");
            if ip.is_empty() {
                text("/status/podIPs/0/ip")
            } else {
                ip
            }
        }
        (
            Resource::Pods,
            "spec.restartPolicy"
            | "spec.schedulerName"
            | "spec.serviceAccountName"
            | "status.phase"
            | "status.nominatedNodeName",
        ) => text(&format!("/{}", field.replace('.', "/"))),
        // Accepted by the conversion, absent from the set (`status.podIPs`).
        _ => String::new(),
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
        let nodes: Api<Node> = Api::all(c.clone());
        let err = api_error(
            nodes
                .list(&ListParams::default().fields("metadata.namespace=x"))
                .await,
        );
        assert_eq!(err.message, "field label not supported: metadata.namespace");
        let old_name = pods
            .list(&ListParams::default().fields("spec.host=n2"))
            .await
            .expect("list");
        assert_eq!(names(old_name), ["default/b1"]);
        let err = api_error(pods.list(&ListParams::default().labels("a in (")).await);
        assert_eq!(err.code, 400);
    }

    /// The values selectors read, as the registry's field sets give them.
    #[test]
    fn field_values_as_the_registry_gives_them() {
        let pod = json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"nodeName": "n1", "restartPolicy": "Always", "serviceAccountName": "sa"},
            "status": {"phase": "Running", "podIPs": [{"ip": "10.0.0.9"}, {"ip": "fd00::9"}]}
        });
        let value = |field| field_value(Resource::Pods, &pod, field);
        assert_eq!(value("metadata.namespace"), "ns");
        assert_eq!(value("spec.host"), "n1");
        assert_eq!(value("spec.hostNetwork"), "false");
        assert_eq!(value("spec.schedulerName"), "");
        assert_eq!(value("status.podIP"), "10.0.0.9");
        // Accepted by the conversion, but not in the set: always "".
        assert_eq!(value("status.podIPs"), "");
        let node = json!({"metadata": {"name": "n1"}, "spec": {"unschedulable": true}});
        assert_eq!(
            field_value(Resource::Nodes, &node, "spec.unschedulable"),
            "true"
        );
        assert_eq!(
            field_value(Resource::Nodes, &json!({}), "spec.unschedulable"),
            "false"
        );
        assert_eq!(
            field_value(Resource::Nodes, &node, "metadata.namespace"),
            ""
        );
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
