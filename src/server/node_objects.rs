//! Objects kept with their node (mirror pods, CSINodes): stored beside it,
//! in its history, deleted with it. How one is served, kept and written.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::push::push_error;
use super::{refusal, Answer, AppState};
use crate::controller::{ObjectWrite, WriteRequest};
use crate::model::{NodeObject, ObjectKey};

/// One kind of object kept with its node.
pub(crate) struct NodeKept {
    /// The resource, as errors and the history name it.
    pub resource: &'static str,
    pub kind: &'static str,
    /// The largest object kept, as JSON.
    pub max_bytes: usize,
    /// What the history says of an object.
    pub summary: fn(&NodeObject) -> String,
}

impl NodeKept {
    /// Where the object `name` of this kind is kept, with `node`.
    pub fn key(&self, node: &str, name: &str) -> ObjectKey {
        ObjectKey {
            node: node.to_string(),
            resource: self.resource.to_string(),
            name: name.to_string(),
        }
    }

    /// The object to keep as `key`: at most `max_bytes` of JSON (a 413 past it).
    pub fn object(&self, key: ObjectKey, json: String) -> Result<NodeObject, Response> {
        if json.len() > self.max_bytes {
            let name = key.name.rsplit('/').next().unwrap_or_default();
            return Err(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{} {name:?} takes {} bytes as JSON; nodekeeper keeps at most {}",
                    self.kind,
                    json.len(),
                    self.max_bytes
                ),
            ));
        }
        Ok(NodeObject {
            node: key.node,
            resource: key.resource,
            name: key.name,
            generation: 0,
            json,
        })
    }

    /// Writes through the controller; answered with the object as written
    /// (as it was, for a delete) and `code`.
    pub async fn write(
        &self,
        s: &AppState,
        object: NodeObject,
        how: ObjectWrite,
        code: StatusCode,
    ) -> Answer {
        let summary = (self.summary)(&object);
        let written = s.controller.write(|reply| WriteRequest::WriteObject {
            object,
            write: how,
            kind: self.resource,
            summary,
            reply,
        });
        let object = written.await.map_err(push_error)?;
        Ok((code, Json(served(&object))).into_response())
    }
}

/// The object as served: the stored JSON with its resourceVersion (the seq
/// of the history entry that wrote it).
pub(crate) fn served(object: &NodeObject) -> Value {
    super::with_version(&object.json, object.generation)
}
