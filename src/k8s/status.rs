//! The `Status` objects kube-apiserver answers failures with.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    ListMeta, Status, StatusCause, StatusDetails,
};

use super::non_empty;

/// A failure `Status` as kube-apiserver returns it with an error code.
pub fn status_error(
    code: u16,
    reason: &str,
    message: &str,
    details_name: Option<&str>,
    kind: Option<&str>,
) -> Status {
    let details = (details_name.is_some() || kind.is_some()).then(|| StatusDetails {
        name: details_name.map(str::to_string),
        kind: kind.map(str::to_string),
        ..StatusDetails::default()
    });
    Status {
        code: Some(i32::from(code)),
        details,
        message: non_empty(message),
        metadata: ListMeta::default(),
        reason: non_empty(reason),
        status: Some("Failure".to_string()),
    }
}

/// The 422 kube-apiserver returns for an object that fails validation: the
/// message lists every refused field, and `details.causes` names each.
pub fn invalid(e: &crate::model::validation::Invalid) -> Status {
    invalid_in_group("", e)
}

/// [`invalid`] for a kind of an API group (`ListOptions` of `meta.k8s.io`):
/// the message names it `Kind.group` and `details.group` carries the group,
/// as apimachinery's `errors.NewInvalid` writes them.
pub fn invalid_in_group(group: &str, e: &crate::model::validation::Invalid) -> Status {
    let mut message = e.to_string();
    if !group.is_empty() {
        // `Kind "name" is invalid: …` names the qualified kind.
        message.insert_str(e.kind.len(), &format!(".{group}"));
    }
    let causes = e
        .causes
        .iter()
        .map(|c| StatusCause {
            // The whole object's errors have no field, as upstream omits it.
            field: non_empty(&c.field),
            message: Some(c.message.clone()),
            reason: Some(c.reason.to_string()),
        })
        .collect();
    Status {
        code: Some(422),
        details: Some(StatusDetails {
            name: non_empty(&e.name),
            group: non_empty(group),
            kind: Some(e.kind.to_string()),
            causes: Some(causes),
            ..StatusDetails::default()
        }),
        message: Some(message),
        metadata: ListMeta::default(),
        reason: Some("Invalid".to_string()),
        status: Some("Failure".to_string()),
    }
}

/// The 404 kube-apiserver returns for a missing object, e.g. `not_found("nodes", "x")`.
pub fn not_found(resource: &str, name: &str) -> Status {
    status_error(
        404,
        "NotFound",
        &format!("{resource} {name:?} not found"),
        Some(name),
        Some(resource),
    )
}

/// What kube-apiserver answers a delete that removed the object at once.
pub fn deleted(resource: &str, name: &str, uid: &str) -> Status {
    Status {
        status: Some("Success".into()),
        details: Some(StatusDetails {
            name: Some(name.to_string()),
            kind: Some(resource.to_string()),
            uid: Some(uid.to_string()),
            ..StatusDetails::default()
        }),
        ..Status::default()
    }
}

/// The 429 kube-apiserver's max-in-flight filter answers, with the seconds
/// after which to retry.
pub fn too_many_requests(retry_after_seconds: i32) -> Status {
    let mut status = status_error(
        429,
        "TooManyRequests",
        "Too many requests, please try again later.",
        None,
        None,
    );
    status.details = Some(StatusDetails {
        retry_after_seconds: Some(retry_after_seconds),
        ..StatusDetails::default()
    });
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn to_json<T: serde::Serialize>(v: &T) -> Value {
        serde_json::to_value(v).expect("serializable")
    }

    #[test]
    fn not_found_is_exactly_what_kube_apiserver_returns() {
        let expected: Value = serde_json::from_str(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"nodes \"x\" not found","reason":"NotFound","details":{"name":"x","kind":"nodes"},"code":404}"#,
        )
        .expect("valid json");
        assert_eq!(to_json(&not_found("nodes", "x")), expected);
    }

    #[test]
    fn invalid_is_what_kube_apiserver_returns() {
        let e = crate::model::validation::Invalid {
            kind: "Node",
            name: "x".into(),
            causes: vec![crate::model::validation::FieldError::forbidden(
                "spec.taints",
                "managed",
            )],
        };
        assert_eq!(
            to_json(&invalid(&e)),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "Node \"x\" is invalid: spec.taints: Forbidden: managed",
                   "reason": "Invalid", "code": 422,
                   "details": {"name": "x", "kind": "Node", "causes": [
                       {"reason": "FieldValueForbidden", "message": "Forbidden: managed", "field": "spec.taints"}]}})
        );
    }

    #[test]
    fn status_error_without_details() {
        let v = to_json(&status_error(400, "BadRequest", "bad watch", None, None));
        assert_eq!(
            v,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "bad watch", "reason": "BadRequest", "code": 400})
        );
    }
}
