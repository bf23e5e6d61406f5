//! Objects kept in the store's API tree (CSRs, bootstrap-token Secrets):
//! read, created and deleted durably, answered as kube-apiserver answers.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::Value;

use super::{internal, not_found, refusal, Answer, AppState};
use crate::store::{ApiObject, ApiWriteError, Store};

/// One resource of the API tree.
pub(crate) struct Kept {
    /// The store's and the errors' name for these objects.
    pub resource: &'static str,
    /// Where they are kept (empty for cluster-scoped ones).
    pub namespace: &'static str,
    pub kind: &'static str,
    /// The largest object kept, as JSON.
    pub max_bytes: usize,
}

impl Kept {
    /// `GET` of one object.
    pub fn get(&self, s: &AppState, name: &str) -> Answer {
        let object = s.store.api_object(self.resource, self.namespace, name);
        match object.map_err(internal)? {
            Some(object) => Ok(Json(served(&object)).into_response()),
            None => Err(not_found(self.resource, name)),
        }
    }

    /// Keeps a new object, flushed before it is answered.
    pub async fn create(
        &self,
        s: &AppState,
        name: &str,
        object: &impl serde::Serialize,
    ) -> Result<ApiObject, Response> {
        let json = serde_json::to_string(object).map_err(internal)?;
        if json.len() > self.max_bytes {
            let (kind, max) = (self.kind, self.max_bytes);
            return Err(refusal(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "{kind} {name:?} takes {} bytes; at most {max} are kept",
                    json.len()
                ),
            ));
        }
        let object = ApiObject {
            resource: self.resource.into(),
            namespace: self.namespace.into(),
            name: name.to_string(),
            version: 0,
            json,
        };
        match durable_write(&s.store, || s.store.put_api_object(object, None)).await {
            Ok(object) => Ok(object),
            Err(ApiWriteError::Exists) => Err(super::status_error(
                StatusCode::CONFLICT,
                "AlreadyExists",
                format!("{} {name:?} already exists", self.resource),
            )),
            Err(e) => Err(internal(e)),
        }
    }

    /// `DELETE`: answered with the object as it was.
    pub async fn delete(&self, s: &AppState, name: &str) -> Answer {
        let deleted = durable_write(&s.store, || {
            s.store
                .delete_api_object(self.resource, self.namespace, name, None)
        });
        match deleted.await {
            Ok(object) => Ok(Json(served(&object)).into_response()),
            Err(ApiWriteError::NotFound) => Err(not_found(self.resource, name)),
            Err(e) => Err(internal(e)),
        }
    }
}

/// The object as served: the stored JSON with its resourceVersion.
pub(crate) fn served(object: &ApiObject) -> Value {
    super::with_version(&object.json, object.version)
}

/// A write of the API objects' tree, flushed before it is answered.
pub(crate) async fn durable_write(
    store: &Store,
    write: impl FnOnce() -> Result<ApiObject, ApiWriteError>,
) -> Result<ApiObject, ApiWriteError> {
    let written = write()?;
    store.flush().await?;
    Ok(written)
}
