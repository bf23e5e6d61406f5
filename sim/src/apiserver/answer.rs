//! Answers and errors: a status code with a JSON (or plain-text) body, and
//! failures worded and coded as Kubernetes `Status` objects.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, CONTENT_TYPE, RETRY_AFTER};
use hyper::{Response, StatusCode};
use serde_json::{json, Value};

use super::connection::Body;
use super::resource::ObjectKey;

/// A status code and a JSON body (or a plain-text one).
#[derive(Debug)]
pub(super) struct Answer {
    pub(super) code: StatusCode,
    pub(super) body: Value,
    /// Sent instead of `body`, as `text/plain`.
    pub(super) text: Option<&'static str>,
    pub(super) retry_after: Option<u32>,
}

impl Answer {
    pub(super) fn new(code: StatusCode, body: Value) -> Answer {
        Answer {
            code,
            body,
            text: None,
            retry_after: None,
        }
    }

    /// 429 as API Priority and Fairness sends it: plain text, and the wait
    /// in a header only.
    pub(super) fn throttled(seconds: u32) -> Answer {
        Answer {
            code: StatusCode::TOO_MANY_REQUESTS,
            body: Value::Null,
            text: Some("Too many requests, please try again later.\n"),
            retry_after: Some(seconds),
        }
    }

    pub(super) fn into_response(self) -> Response<Body> {
        let (bytes, content_type) = match self.text {
            Some(text) => (text.as_bytes().to_vec(), "text/plain; charset=utf-8"),
            // Serialising a Value cannot fail.
            None => (
                serde_json::to_vec(&self.body).unwrap_or_default(),
                "application/json",
            ),
        };
        let mut resp = Response::new(Full::new(Bytes::from(bytes)).boxed_unsync());
        *resp.status_mut() = self.code;
        resp.headers_mut()
            .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
        if let Some(seconds) = self.retry_after {
            resp.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(seconds));
        }
        resp
    }
}

/// A failure, answered as a Kubernetes `Status`.
#[derive(Debug)]
pub(super) struct ApiError {
    pub(super) code: StatusCode,
    pub(super) reason: &'static str,
    pub(super) message: String,
    pub(super) details: Option<Value>,
}

impl ApiError {
    pub(super) fn new(code: StatusCode, reason: &'static str, message: String) -> ApiError {
        ApiError {
            code,
            reason,
            message,
            details: None,
        }
    }

    fn about(mut self, key: &ObjectKey) -> ApiError {
        self.details = Some(details(key, None));
        self
    }

    pub(super) fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, "BadRequest", message.into())
    }

    pub(super) fn not_found(key: &ObjectKey) -> ApiError {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!("{} \"{}\" not found", key.resource.qualified(), key.name),
        )
        .about(key)
    }

    pub(super) fn already_exists(key: &ObjectKey) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "AlreadyExists",
            format!(
                "{} \"{}\" already exists",
                key.resource.qualified(),
                key.name
            ),
        )
        .about(key)
    }

    /// The optimistic-concurrency conflict, worded as the API server words it.
    pub(super) fn conflict(key: &ObjectKey) -> ApiError {
        ApiError::conflict_because(
            key,
            "the object has been modified; please apply your changes to the latest version \
             and try again",
        )
    }

    pub(super) fn conflict_because(key: &ObjectKey, why: &str) -> ApiError {
        ApiError::new(
            StatusCode::CONFLICT,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{}\": {why}",
                key.resource.qualified(),
                key.name
            ),
        )
        .about(key)
    }

    pub(super) fn invalid(key: &ObjectKey, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNPROCESSABLE_ENTITY, "Invalid", message.into()).about(key)
    }

    /// A watch from a version the server has not reached, worded and
    /// coded as the API server's.
    pub(super) fn too_large(asked: u64, current: u64) -> ApiError {
        let mut e = ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            format!("Too large resource version: {asked}, current: {current}"),
        );
        e.details = Some(json!({
            "causes": [{"reason": "ResourceVersionTooLarge", "message": "Too large resource version"}],
            "retryAfterSeconds": 1,
        }));
        e
    }

    pub(super) fn method_not_allowed() -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".into(),
        )
    }

    pub(super) fn into_answer(self) -> Answer {
        let mut body = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code.as_u16(),
        });
        if let Some(details) = self.details {
            body["details"] = details;
        }
        Answer::new(self.code, body)
    }
}

/// A Status's `details`: the object's name, group and resource (the API
/// server puts the resource, e.g. `nodes`, in `kind`).
pub(super) fn details(key: &ObjectKey, uid: Option<&str>) -> Value {
    let mut d = json!({"name": key.name, "kind": key.resource.plural()});
    if !key.resource.group().is_empty() {
        d["group"] = key.resource.group().into();
    }
    if let Some(uid) = uid {
        d["uid"] = uid.into();
    }
    d
}
