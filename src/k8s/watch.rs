//! The watch stream's envelopes (`GET …?watch=true`): one JSON object per
//! line, `{"type": …, "object": …}`, with the bookmarks and the `Status`
//! objects kube-apiserver sends or answers with. The streaming itself is the
//! server's.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Status, StatusCause, StatusDetails};
use serde_json::{json, Value};

use super::status::invalid_in_group;
use super::status_error;
use crate::model::validation::{FieldError, Invalid};

/// The `type` of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchEventType {
    Added,
    Modified,
    Deleted,
    Bookmark,
    Error,
}

impl WatchEventType {
    /// The name on the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            WatchEventType::Added => "ADDED",
            WatchEventType::Modified => "MODIFIED",
            WatchEventType::Deleted => "DELETED",
            WatchEventType::Bookmark => "BOOKMARK",
            WatchEventType::Error => "ERROR",
        }
    }
}

/// One line of the stream: the event as JSON, newline-terminated.
pub fn watch_line(kind: WatchEventType, object: Value) -> Vec<u8> {
    let mut text =
        serde_json::to_vec(&json!({"type": kind.as_str(), "object": object})).unwrap_or_default();
    text.push(b'\n');
    text
}

/// An `ERROR` line: the stream ends with the `Status` saying why.
pub fn error_line(status: &Status) -> Vec<u8> {
    let object = serde_json::to_value(status).unwrap_or(Value::Null);
    watch_line(WatchEventType::Error, object)
}

/// A bookmark's object for a watch of `kind` (a Node, …): only its
/// `metadata.resourceVersion`, the version the stream has reached.
pub fn bookmark(api_version: &str, kind: &str, resource_version: u64) -> Value {
    json!({"kind": kind, "apiVersion": api_version, "metadata": {"resourceVersion": resource_version.to_string()}})
}

/// kube-apiserver's answer to a version it no longer has (`410 Expired`).
pub fn too_old_version(requested: u64, horizon: u64) -> Status {
    status_error(
        410,
        "Expired",
        &format!("too old resource version: {requested} ({horizon})"),
        None,
        None,
    )
}

/// kube-apiserver's answer to a version it does not have yet
/// (`storage.NewTooLargeResourceVersionError`): a `504 Timeout` that tells
/// the client when to retry, and (beyond kube-apiserver's words) a person
/// what to do: versions here are one store's seqs, so one this far ahead
/// was handed out by another store, and only a new list helps.
pub fn too_large_version(requested: u64, current: u64, retry_after_seconds: i32) -> Status {
    let mut status = status_error(
        504,
        "Timeout",
        &format!(
            "Timeout: Too large resource version: {requested}, current: {current}: this store has \
             written no version past {current}, so {requested} comes from another store; list the \
             nodes again and watch from the resourceVersion the list answers"
        ),
        None,
        None,
    );
    status.details = Some(StatusDetails {
        causes: Some(vec![StatusCause {
            reason: Some("ResourceVersionTooLarge".into()),
            message: Some("Too large resource version".into()),
            field: None,
        }]),
        retry_after_seconds: Some(retry_after_seconds),
        ..StatusDetails::default()
    });
    status
}

/// The options kube-apiserver refuses on a watch, as the 422 it answers
/// (k8s.io/apimachinery `pkg/apis/meta/internalversion/validation/validation.go`
/// `validateWatchOptions`): a streaming list (`sendInitialEvents`, KEP-3157)
/// is refused as a v1.33 kube-apiserver with its `WatchList` gate at its
/// default (off) refuses it, so that clients fall back to a list and a
/// watch (client-go `tools/cache/reflector.go` `ListAndWatchWithContext`:
/// any error from `watchList` sets `fallbackToList`); and
/// `resourceVersionMatch` needs `sendInitialEvents`.
// A refusal is built once per refused request: its size does not matter.
#[allow(clippy::result_large_err)]
pub fn check_watch_options(
    send_initial_events: bool,
    resource_version_match: Option<&str>,
) -> Result<(), Status> {
    let matching = resource_version_match.filter(|m| !m.is_empty());
    let mut causes = Vec::new();
    if send_initial_events {
        if matching != Some("NotOlderThan") {
            causes.push(FieldError::forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            ));
        }
        causes.push(FieldError::forbidden(
            "sendInitialEvents",
            "sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
        ));
    } else if matching.is_some() {
        causes.push(FieldError::forbidden(
            "resourceVersionMatch",
            "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
        ));
    }
    Invalid::check("ListOptions", "", causes).map_err(|e| invalid_in_group("meta.k8s.io", &e))
}

/// The `Status` of an `ERROR` event for a failure of the server's own.
pub fn internal_error(message: &str) -> Status {
    status_error(500, "InternalError", message, None, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(line: Vec<u8>) -> String {
        String::from_utf8(line).expect("utf-8")
    }

    #[test]
    fn lines_are_one_event_each() {
        let line = watch_line(WatchEventType::Bookmark, bookmark("v1", "Node", 42));
        assert_eq!(
            text(line),
            "{\"object\":{\"apiVersion\":\"v1\",\"kind\":\"Node\",\"metadata\":{\"resourceVersion\":\"42\"}},\"type\":\"BOOKMARK\"}\n"
        );
    }

    #[test]
    fn errors_carry_the_status() {
        let line = text(error_line(&internal_error("disk on fire")));
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["type"], "ERROR");
        assert_eq!(v["object"]["code"], 500);
        assert_eq!(v["object"]["reason"], "InternalError");
        assert_eq!(v["object"]["message"], "disk on fire");
    }

    #[test]
    fn streaming_lists_are_refused_as_kube_apiserver_refuses_them() {
        assert_eq!(check_watch_options(false, None), Ok(()));
        assert_eq!(check_watch_options(false, Some("")), Ok(()));
        let refused = |initial, matching| {
            serde_json::to_value(check_watch_options(initial, matching).unwrap_err()).unwrap()
        };
        assert_eq!(
            refused(true, Some("NotOlderThan")),
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "ListOptions.meta.k8s.io \"\" is invalid: sendInitialEvents: Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled",
                   "reason": "Invalid", "code": 422,
                   "details": {"group": "meta.k8s.io", "kind": "ListOptions", "causes": [
                       {"reason": "FieldValueForbidden", "field": "sendInitialEvents",
                        "message": "Forbidden: sendInitialEvents is forbidden for watch unless the WatchList feature gate is enabled"}]}})
        );
        let both = refused(true, None);
        assert!(
            both["message"].as_str().unwrap().starts_with(
                "ListOptions.meta.k8s.io \"\" is invalid: [resourceVersionMatch: Forbidden: sendInitialEvents requires"
            ),
            "{both}"
        );
        assert_eq!(both["details"]["causes"].as_array().unwrap().len(), 2);
        assert_eq!(
            refused(false, Some("Exact"))["details"]["causes"][0]["field"],
            "resourceVersionMatch"
        );
    }

    #[test]
    fn versions_out_of_reach_are_what_kube_apiserver_answers() {
        let old = serde_json::to_value(too_old_version(3, 10)).unwrap();
        assert_eq!(
            old,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "too old resource version: 3 (10)", "reason": "Expired", "code": 410})
        );
        // k8s.io/apiserver pkg/storage/errors.go:233-242: the words, the
        // cause clients recognise it by, the retry hint; then what to do.
        let large = serde_json::to_value(too_large_version(12, 10, 1)).unwrap();
        assert_eq!(large["code"], 504);
        assert!(
            large["message"]
                .as_str()
                .unwrap()
                .starts_with("Timeout: Too large resource version: 12, current: 10: "),
            "{large}"
        );
        assert_eq!(large["details"]["retryAfterSeconds"], 1);
        assert_eq!(
            large["details"]["causes"][0]["reason"],
            "ResourceVersionTooLarge"
        );
    }
}
