//! Query parameters of Kubernetes lists and gets (`ListOptions`, `TableOptions`) and how to read them.

use axum::extract::rejection::QueryRejection;
use axum::extract::Query;
use axum::http::{header, HeaderMap};
use axum::response::Response;
use serde::Deserialize;

use super::bad_request;
use super::paging::{ContinueToken, InvalidContinueToken};
use super::selectors::{FieldSelector, FieldSelectorError, LabelSelector, LabelSelectorError};
use super::table::{self, IncludeObject, UnknownIncludeObject};

/// Why a list's or a get's query is refused (a 400, with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParamsError {
    /// The query string does not fit [`ListParams`] (`limit=many`), in axum's words.
    #[error("{0}")]
    Malformed(String),
    #[error(transparent)]
    Labels(#[from] LabelSelectorError),
    #[error(transparent)]
    Fields(#[from] FieldSelectorError),
    #[error(transparent)]
    Continue(#[from] InvalidContinueToken),
    #[error(transparent)]
    Include(#[from] UnknownIncludeObject),
}

/// The query of a list, a watch or a get, as sent. Unknown parameters are
/// ignored, as the API server does; the watch handler receives this too.
#[derive(Debug, Default, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListParams {
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<i64>,
    #[serde(rename = "continue")]
    pub continue_token: Option<String>,
    pub watch: Option<String>,
    pub include_object: Option<String>,
    // Lists are always served from the current registry; these matter to watches.
    pub resource_version: Option<String>,
    pub resource_version_match: Option<String>,
    pub timeout_seconds: Option<i64>,
    pub allow_watch_bookmarks: Option<String>,
    pub send_initial_events: Option<String>,
}

/// The parts of a delete's `DeleteOptions` that matter here.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeleteOptions {
    #[serde(default)]
    pub preconditions: Option<DeletePreconditions>,
}

#[derive(Debug, Default, Deserialize)]
pub(crate) struct DeletePreconditions {
    #[serde(default)]
    pub uid: Option<String>,
    #[serde(default, rename = "resourceVersion")]
    pub resource_version: Option<String>,
}

/// A list request, validated: what to select, where to start, what rows carry.
#[derive(Debug, Clone)]
pub(crate) struct ListQuery {
    pub labels: LabelSelector,
    pub fields: FieldSelector,
    pub continue_from: Option<ContinueToken>,
    pub include: IncludeObject,
}

impl ListQuery {
    /// The API server counts the remaining items only without selectors.
    pub fn unfiltered(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }
}

impl ListParams {
    /// The query, or why it is malformed (e.g. `limit=many`), for a 400.
    pub fn from_query(
        params: Result<Query<ListParams>, QueryRejection>,
    ) -> Result<Self, ParamsError> {
        params
            .map(|Query(p)| p)
            .map_err(|e| ParamsError::Malformed(e.body_text()))
    }

    /// `?watch=`, as kube-apiserver reads it ([`query_bool`]).
    pub fn is_watch(&self) -> bool {
        query_bool(self.watch.as_deref())
    }

    /// Parses selectors, token and `includeObject`; `fields` are the field
    /// labels the resource can be selected by (others are refused, with the
    /// API server's `field label not supported: X`).
    pub fn query(&self, fields: &[&str]) -> Result<ListQuery, ParamsError> {
        let query = self.decode()?;
        query.fields.check_fields(fields)?;
        Ok(query)
    }

    /// [`ListParams::query`] but for the field labels, which are checked
    /// after (kube-apiserver decodes the query, a malformed selector a 400,
    /// then validates the options, then converts the field labels).
    pub fn decode(&self) -> Result<ListQuery, ParamsError> {
        let labels = LabelSelector::parse(self.label_selector.as_deref().unwrap_or(""))?;
        let field_selector = FieldSelector::parse(self.field_selector.as_deref().unwrap_or(""))?;
        let continue_from = self
            .continue_token
            .as_deref()
            .filter(|t| !t.is_empty())
            .map(ContinueToken::decode)
            .transpose()?;
        Ok(ListQuery {
            labels,
            fields: field_selector,
            continue_from,
            include: self.include_object()?,
        })
    }

    pub fn include_object(&self) -> Result<IncludeObject, ParamsError> {
        Ok(IncludeObject::parse(self.include_object.as_deref())?)
    }

    /// A list's query and whether it asks for a watch; a malformed one is a 400.
    pub fn list(
        params: Result<Query<ListParams>, QueryRejection>,
    ) -> Result<(Self, bool), Response> {
        let params = Self::from_query(params).map_err(bad_request)?;
        let watch = params.is_watch();
        Ok((params, watch))
    }

    /// A get's `includeObject`; a malformed query is a 400.
    pub fn get(
        params: Result<Query<ListParams>, QueryRejection>,
    ) -> Result<IncludeObject, Response> {
        Self::from_query(params)
            .and_then(|p| p.include_object())
            .map_err(bad_request)
    }
}

/// A boolean query parameter (`watch`, `allowWatchBookmarks`) as
/// kube-apiserver reads a `ListOptions`: absent, `0` or `false` (in any
/// case) is false, any other value true, the empty one included; none is
/// refused. (`Convert_url_Values_To_v1_ListOptions` in apimachinery's
/// `pkg/apis/meta/v1/zz_generated.conversion.go` reads both with
/// `runtime.Convert_Slice_string_To_bool`, `pkg/runtime/conversion.go`.)
pub(crate) fn query_bool(value: Option<&str>) -> bool {
    value.is_some_and(|v| v != "0" && !v.eq_ignore_ascii_case("false"))
}

/// Whether the client asked for a Table (kubectl `get`).
pub(crate) fn wants_table(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(table::wants_table)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-apiserver's `Convert_Slice_string_To_bool`
    /// (apimachinery `pkg/runtime/conversion.go`): only absent, `0` and
    /// `false` in any case are false; nothing is refused.
    #[test]
    fn watch_is_read_as_kube_apiserver_reads_it() {
        let p = |w: &str| ListParams {
            watch: Some(w.to_string()),
            ..ListParams::default()
        };
        for yes in ["true", "1", "True", "yes", "maybe", ""] {
            assert!(p(yes).is_watch(), "{yes:?}");
        }
        for no in ["false", "0", "FALSE", "False", "fAlSe"] {
            assert!(!p(no).is_watch(), "{no:?}");
        }
        assert!(!ListParams::default().is_watch());
    }

    #[test]
    fn query_validates_every_part() {
        let p = ListParams {
            label_selector: Some("zone in (a,b)".into()),
            field_selector: Some("metadata.name=x".into()),
            ..ListParams::default()
        };
        let q = p.query(&["metadata.name"]).unwrap();
        assert!(!q.unfiltered());
        assert_eq!(q.include, IncludeObject::Metadata);

        let bad_field = ListParams {
            field_selector: Some("status.phase=Running".into()),
            ..ListParams::default()
        };
        let e = bad_field.query(&["metadata.name"]).unwrap_err();
        assert_eq!(e.to_string(), "field label not supported: status.phase");
        assert_eq!(
            e,
            ParamsError::Fields(FieldSelectorError::Unsupported("status.phase".into()))
        );
        let bad_token = ListParams {
            continue_token: Some("nope".into()),
            ..ListParams::default()
        };
        let e = bad_token.query(&[]).unwrap_err();
        assert!(matches!(e, ParamsError::Continue(_)), "{e:?}");
        assert!(e.to_string().starts_with("invalid continue token"));
        let bad_labels = ListParams {
            label_selector: Some("zone in (a".into()),
            ..ListParams::default()
        };
        match bad_labels.query(&[]).unwrap_err() {
            ParamsError::Labels(e) => assert_eq!(e.position, "zone in (a".len()),
            other => panic!("{other:?}"),
        }
        let bad_include = ListParams {
            include_object: Some("All".into()),
            ..ListParams::default()
        };
        assert_eq!(
            bad_include.query(&[]).unwrap_err().to_string(),
            "unrecognized includeObject value: \"All\""
        );
        assert!(ListParams::default().query(&[]).unwrap().unfiltered());
    }
}
