//! `/openapi/v2` and `/openapi/v3`: kube-apiserver's own schemas, cut to
//! what nodekeeper serves by `scripts/openapi-subset` and embedded here, so
//! that `kubectl explain`, `apply` and `edit` work with validation on.
//!
//! How kubectl (v1.32) reads them:
//!
//! - `explain` and `apply`'s patch computation read v3: the index at
//!   `/openapi/v3` (`{"paths": {"api/v1": {"serverRelativeURL": …}}}`,
//!   client-go `openapi/client.go` `Paths`), then each group version's
//!   document at its `serverRelativeURL`, `?hash=` included
//!   (`openapi/groupversion.go` `Schema`), asked for as JSON.
//! - Validation (`--validate=strict`, the default) asks the v3 document
//!   whether the kind's `PATCH` takes the `fieldValidation` query parameter
//!   (cli-runtime `pkg/resource/query_param_verifier_v3.go`
//!   `supportsQueryParamV3`). It does here, so kubectl sends
//!   `fieldValidation=Strict` and leaves the check to the server
//!   ([`check_fields`]); it would otherwise validate on its side with the v2
//!   document.
//! - v2 is asked for as protobuf only
//!   (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`,
//!   client-go `discovery/discovery_client.go` `OpenAPISchema`), which is
//!   not served: such a request is `406 Not Acceptable`. kubectl then goes
//!   without it where v3 answers (apply's patch, kubectl
//!   `pkg/cmd/apply/patcher.go:135-170`). v2 is served as JSON to clients
//!   that ask for JSON.

use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::status_error;

/// The v2 document (`swagger.json`, cut).
const V2: &str = include_str!("openapi/v2.json");

/// The v3 documents: group version path, and the document.
const V3: &[(&str, &str)] = &[
    ("api/v1", include_str!("openapi/v3/api__v1_openapi.json")),
    (
        "apis/authentication.k8s.io/v1",
        include_str!("openapi/v3/apis__authentication.k8s.io__v1_openapi.json"),
    ),
    (
        "apis/authorization.k8s.io/v1",
        include_str!("openapi/v3/apis__authorization.k8s.io__v1_openapi.json"),
    ),
    (
        "apis/certificates.k8s.io/v1",
        include_str!("openapi/v3/apis__certificates.k8s.io__v1_openapi.json"),
    ),
    (
        "apis/coordination.k8s.io/v1",
        include_str!("openapi/v3/apis__coordination.k8s.io__v1_openapi.json"),
    ),
    (
        "apis/events.k8s.io/v1",
        include_str!("openapi/v3/apis__events.k8s.io__v1_openapi.json"),
    ),
    (
        "apis/node.k8s.io/v1",
        include_str!("openapi/v3/apis__node.k8s.io__v1_openapi.json"),
    ),
    (
        "apis/storage.k8s.io/v1",
        include_str!("openapi/v3/apis__storage.k8s.io__v1_openapi.json"),
    ),
];

/// A document's hash, for its `?hash=` (a cache buster, as kube-apiserver's
/// is): 64-bit FNV-1a, in hex.
fn hash(document: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in document.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016X}")
}

/// Whether `Accept` admits JSON (no header, `*/*`, `application/*`, JSON).
fn admits_json(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    accept.split(',').any(|range| {
        let media = range.split(';').next().unwrap_or("").trim();
        matches!(media, "" | "*/*" | "application/*" | "application/json")
    })
}

fn not_acceptable(headers: &HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    status_error(
        StatusCode::NOT_ACCEPTABLE,
        "NotAcceptable",
        format!("the server serves its OpenAPI documents as application/json only, not {accept:?}"),
    )
}

fn document(text: &'static str, cache: &'static str) -> Response {
    (
        [
            (header::CONTENT_TYPE, "application/json"),
            (header::CACHE_CONTROL, cache),
        ],
        text,
    )
        .into_response()
}

/// `GET /openapi/v2`.
pub(crate) async fn v2(headers: HeaderMap) -> Response {
    if !admits_json(&headers) {
        return not_acceptable(&headers);
    }
    document(V2, "no-cache, private")
}

/// `GET /openapi/v3`: the index of the group versions' documents.
pub(crate) async fn v3_index() -> Response {
    let paths: serde_json::Map<String, Value> = V3
        .iter()
        .map(|(path, text)| {
            let url = format!("/openapi/v3/{path}?hash={}", hash(text));
            ((*path).to_string(), json!({"serverRelativeURL": url}))
        })
        .collect();
    Json(json!({ "paths": paths })).into_response()
}

#[derive(serde::Deserialize)]
pub(crate) struct HashQuery {
    hash: Option<String>,
}

/// `GET /openapi/v3/{group version}`: its document; with the current
/// `?hash=` it never changes, and says so.
pub(crate) async fn v3(
    Path(path): Path<String>,
    Query(query): Query<HashQuery>,
    headers: HeaderMap,
) -> Response {
    let Some((_, text)) = V3.iter().find(|(p, _)| *p == path) else {
        return status_error(
            StatusCode::NOT_FOUND,
            "NotFound",
            format!(
                "no OpenAPI document for {path:?}: nodekeeper serves {}",
                served()
            ),
        );
    };
    if !admits_json(&headers) {
        return not_acceptable(&headers);
    }
    match query.hash {
        Some(h) if h == hash(text) => document(text, "public, immutable"),
        _ => document(text, "no-cache, private"),
    }
}

fn served() -> String {
    V3.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", ")
}

/// The parsed v3 document of a group version (`v1`, `G/V`), parsed once
/// (the core one is 380 kB of JSON).
fn v3_document(group_version: &str) -> Option<&'static Value> {
    static PARSED: std::sync::OnceLock<Vec<(&'static str, Value)>> = std::sync::OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        V3.iter()
            .map(|(path, text)| (*path, serde_json::from_str(text).unwrap_or(Value::Null)))
            .collect()
    });
    let path = match group_version {
        "v1" => "api/v1".to_string(),
        gv => format!("apis/{gv}"),
    };
    parsed.iter().find(|(p, _)| *p == path).map(|(_, doc)| doc)
}

/// What `?fieldValidation=` asks for (kube-apiserver's values).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum FieldValidation {
    Ignore,
    Warn,
    Strict,
}

impl FieldValidation {
    /// The query parameter's value, or kube-apiserver's 400 for another.
    // A refusal is a ready response, built once per refused request.
    #[allow(clippy::result_large_err)]
    pub fn parse(value: Option<&str>) -> Result<FieldValidation, Response> {
        match value.unwrap_or("") {
            "" | "Ignore" => Ok(FieldValidation::Ignore),
            "Warn" => Ok(FieldValidation::Warn),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(status_error(
                StatusCode::BAD_REQUEST,
                "BadRequest",
                format!(
                    "fieldValidation: Unsupported value: {other:?}: supported values: \
                     \"Ignore\", \"Strict\", \"Warn\""
                ),
            )),
        }
    }
}

/// The query parameter of a write that says how to treat unknown fields.
#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct WriteQuery {
    #[serde(rename = "fieldValidation")]
    field_validation: Option<String>,
    #[serde(rename = "dryRun")]
    dry_run: Option<String>,
}

/// Refuses a dry run (`?dryRun=`), which nodekeeper does not do, and
/// checks a write's body (an object, or a merge or strategic merge patch of
/// one) against its schema as `?fieldValidation=` asks
/// (kube-apiserver: `Strict` refuses unknown fields with a 400
/// `strict decoding error`, `Warn` answers with a `Warning` header for
/// each, `Ignore` drops them): the warnings to add to the answer, or the
/// refusal.
// A refusal is a ready response, built once per refused request.
#[allow(clippy::result_large_err)]
pub(crate) fn check_fields(
    query: &WriteQuery,
    group_version: &str,
    kind: &str,
    body: &Value,
) -> Result<Vec<String>, Response> {
    // Not advertised, and not to be ignored: the write would be real.
    if let Some(dry_run) = &query.dry_run {
        return Err(status_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!(
                "dryRun={dry_run:?}: nodekeeper has no dry runs; \
                 leave out --dry-run=server (--dry-run=client works)"
            ),
        ));
    }
    let validation = FieldValidation::parse(query.field_validation.as_deref())?;
    if validation == FieldValidation::Ignore {
        return Ok(Vec::new());
    }
    let unknown: Vec<String> = unknown_fields(group_version, kind, body)
        .into_iter()
        .map(|f| format!("unknown field {f:?}"))
        .collect();
    match (validation, unknown.is_empty()) {
        (_, true) => Ok(Vec::new()),
        (FieldValidation::Strict, false) => Err(status_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            format!("strict decoding error: {}", unknown.join(", ")),
        )),
        _ => Ok(unknown),
    }
}

/// `response` with a `Warning` header (RFC 7234, code 299) per warning, as
/// kube-apiserver sends them and kubectl prints them.
pub(crate) fn with_warnings(mut response: Response, warnings: &[String]) -> Response {
    for w in warnings {
        let text = format!("299 - {:?}", w.replace('"', "'"));
        if let Ok(value) = header::HeaderValue::from_str(&text) {
            response.headers_mut().append(header::WARNING, value);
        }
    }
    response
}

/// The fields of `object` (a body or a merge patch of kind `kind` in
/// `group_version`) that its schema does not know, as kube-apiserver names
/// them (`spec.foo`). Strategic merge directives (`$patch`,
/// `$setElementOrder/…`, `$retainKeys`, `$deleteFromPrimitiveList/…`) are
/// not fields.
pub(crate) fn unknown_fields(group_version: &str, kind: &str, object: &Value) -> Vec<String> {
    let Some(doc) = v3_document(group_version) else {
        return Vec::new();
    };
    let schemas = &doc["components"]["schemas"];
    let (group, version) = match group_version.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", group_version),
    };
    let Some(schema) = schemas.as_object().and_then(|all| {
        all.values().find(|s| {
            s["x-kubernetes-group-version-kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| k["group"] == group && k["version"] == version && k["kind"] == kind)
        })
    }) else {
        return Vec::new();
    };
    let mut found = Vec::new();
    walk(schemas, schema, object, "", &mut found, 0);
    found
}

/// The schema a `$ref` (or an `allOf` of one) names, else `schema`.
fn resolve<'a>(schemas: &'a Value, schema: &'a Value) -> &'a Value {
    let reference = schema["$ref"]
        .as_str()
        .or_else(|| schema["allOf"][0]["$ref"].as_str());
    match reference.and_then(|r| r.strip_prefix("#/components/schemas/")) {
        Some(name) => &schemas[name],
        None => schema,
    }
}

fn walk(
    schemas: &Value,
    schema: &Value,
    value: &Value,
    at: &str,
    found: &mut Vec<String>,
    depth: usize,
) {
    // Deeper than any Kubernetes object nests: stop, as the patch's own bound does.
    if depth > crate::k8s::patch::MAX_DEPTH {
        return;
    }
    let schema = resolve(schemas, schema);
    match value {
        Value::Object(fields) => {
            let properties = schema["properties"].as_object();
            let additional = &schema["additionalProperties"];
            for (key, v) in fields {
                if key.starts_with('$') {
                    continue;
                }
                let path = match at {
                    "" => key.clone(),
                    at => format!("{at}.{key}"),
                };
                match (properties.and_then(|p| p.get(key)), additional) {
                    (Some(s), _) => walk(schemas, s, v, &path, found, depth + 1),
                    (None, Value::Object(_)) => {
                        walk(schemas, additional, v, &path, found, depth + 1)
                    }
                    // Free-form (no properties, no additionalProperties): anything goes.
                    (None, _) if properties.is_none() => {}
                    (None, _) => found.push(path),
                }
            }
        }
        Value::Array(items) => {
            let item = &schema["items"];
            if item.is_object() {
                for (i, v) in items.iter().enumerate() {
                    walk(schemas, item, v, &format!("{at}[{i}]"), found, depth + 1);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_document_parses_and_the_index_names_each() {
        for (path, text) in V3 {
            let doc: Value = serde_json::from_str(text).unwrap();
            assert!(
                doc["paths"].as_object().is_some_and(|p| !p.is_empty()),
                "{path}"
            );
        }
        let v2: Value = serde_json::from_str(V2).unwrap();
        assert_eq!(v2["swagger"], "2.0");
        assert_ne!(hash(V3[0].1), hash(V3[1].1));
    }

    #[test]
    fn unknown_fields_are_named_as_kube_apiserver_names_them() {
        let node = json!({
            "metadata": {"labels": {"any": "thing"}, "colour": "blue"},
            "spec": {"unschedulable": true, "taints": [{"key": "k", "effect": "NoSchedule", "sevrity": 1}]},
            "status": {"$setElementOrder/conditions": [], "conditions": [{"type": "Ready"}]},
        });
        assert_eq!(
            unknown_fields("v1", "Node", &node),
            ["metadata.colour", "spec.taints[0].sevrity"]
        );
        let csinode = json!({"spec": {"drivers": [{"name": "d", "nodeID": "n"}]}});
        assert!(unknown_fields("storage.k8s.io/v1", "CSINode", &csinode).is_empty());
    }

    #[test]
    fn patches_are_declared_to_take_field_validation_and_not_dry_run() {
        let doc = v3_document("v1").unwrap();
        let patch = &doc["paths"]["/api/v1/nodes/{name}"]["patch"];
        let names: Vec<&str> = patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|p| p["name"].as_str())
            .collect();
        assert!(names.contains(&"fieldValidation"), "{names:?}");
        assert!(!names.contains(&"dryRun"), "{names:?}");
    }
}
