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

//!
//! The documents are kept gzipped (211 kB instead of 1.1 MB of JSON):
//! a client that takes gzip (`Accept-Encoding: gzip`, as kubectl and every
//! Go client send it) gets them as they are kept, with `Content-Encoding:
//! gzip`; another gets them inflated, at most [`MAX_INFLATED`] bytes.

use std::io::Read;

use axum::body::Body;
use axum::extract::{Path, Query};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};

use super::refusal;

/// The v2 document (`swagger.json`, cut), gzipped.
const V2: &[u8] = include_bytes!("openapi/v2.json.gz");

/// A named group's `v1` document, as `scripts/openapi-subset` names its file.
macro_rules! v3_group {
    ($group:literal) => {
        (
            concat!("apis/", $group, "/v1"),
            include_bytes!(concat!("openapi/v3/apis__", $group, "__v1_openapi.json.gz")),
        )
    };
}

/// The v3 documents, gzipped: group version path, and the document.
const V3: &[(&str, &[u8])] = &[
    (
        "api/v1",
        include_bytes!("openapi/v3/api__v1_openapi.json.gz"),
    ),
    v3_group!("authentication.k8s.io"),
    v3_group!("authorization.k8s.io"),
    v3_group!("certificates.k8s.io"),
    v3_group!("coordination.k8s.io"),
    v3_group!("events.k8s.io"),
    v3_group!("node.k8s.io"),
    v3_group!("storage.k8s.io"),
];

/// The most a document is inflated to: the largest is 418 kB of JSON.
const MAX_INFLATED: u64 = 4 * 1024 * 1024;

/// A kept document, inflated (at most [`MAX_INFLATED`] bytes).
fn inflate(gz: &[u8]) -> std::io::Result<Vec<u8>> {
    // gzip's trailer ends with the inflated size (mod 2^32): room for it at once.
    let size = gz
        .last_chunk::<4>()
        .map_or(0, |n| u64::from(u32::from_le_bytes(*n)))
        .min(MAX_INFLATED);
    let mut text = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    flate2::read::GzDecoder::new(gz)
        .take(MAX_INFLATED + 1)
        .read_to_end(&mut text)?;
    if text.len() as u64 > MAX_INFLATED {
        return Err(std::io::Error::other(format!(
            "an embedded OpenAPI document inflates to more than {MAX_INFLATED} bytes"
        )));
    }
    Ok(text)
}

/// A document's hash, for its `?hash=` (a cache buster, as kube-apiserver's
/// is): 64-bit FNV-1a of the kept (gzipped) bytes, in hex.
fn hash(document: &[u8]) -> String {
    format!("{:016X}", crate::liveness::fnv1a(document))
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

/// Whether `Accept-Encoding` takes gzip (RFC 9110 12.5.3): `gzip` (or
/// `x-gzip`), or `*` without a `gzip` of its own, with a quality above 0.
fn accepts_gzip(headers: &HeaderMap) -> bool {
    let mut gzip = None;
    let mut any = None;
    for value in headers.get_all(header::ACCEPT_ENCODING) {
        let Ok(value) = value.to_str() else { continue };
        for coding in value.split(',') {
            let mut parts = coding.split(';');
            let name = parts.next().unwrap_or("").trim().to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.trim().strip_prefix("q=").or(p.trim().strip_prefix("Q=")))
                .find_map(|q| q.trim().parse::<f32>().ok())
                .unwrap_or(1.0);
            match name.as_str() {
                "gzip" | "x-gzip" => gzip = Some(q > 0.0),
                "*" => any = Some(q > 0.0),
                _ => {}
            }
        }
    }
    gzip.or(any).unwrap_or(false)
}

fn not_acceptable(headers: &HeaderMap) -> Response {
    let accept = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    refusal(
        StatusCode::NOT_ACCEPTABLE,
        format!("the server serves its OpenAPI documents as application/json only, not {accept:?}"),
    )
}

/// The kept document `gz` as JSON: gzipped as it is kept to a client that
/// takes gzip, inflated for another.
fn document(gz: &'static [u8], cache: &'static str, headers: &HeaderMap) -> Response {
    let mut response = if accepts_gzip(headers) {
        let mut response = Body::from(gz).into_response();
        response
            .headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        response
    } else {
        match inflate(gz) {
            Ok(text) => Body::from(text).into_response(),
            Err(e) => return super::internal(e),
        }
    };
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static(cache));
    h.insert(header::VARY, HeaderValue::from_static("Accept-Encoding"));
    response
}

/// `GET /openapi/v2`.
pub(crate) async fn v2(headers: HeaderMap) -> Response {
    if !admits_json(&headers) {
        return not_acceptable(&headers);
    }
    document(V2, "no-cache, private", &headers)
}

/// `GET /openapi/v3`: the index of the group versions' documents.
pub(crate) async fn v3_index() -> Response {
    let paths: serde_json::Map<String, Value> = V3
        .iter()
        .map(|(path, gz)| {
            let url = format!("/openapi/v3/{path}?hash={}", hash(gz));
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
    let Some((_, gz)) = V3.iter().find(|(p, _)| *p == path) else {
        return refusal(
            StatusCode::NOT_FOUND,
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
        Some(h) if h == hash(gz) => document(gz, "public, immutable", &headers),
        _ => document(gz, "no-cache, private", &headers),
    }
}

fn served() -> String {
    V3.iter().map(|(p, _)| *p).collect::<Vec<_>>().join(", ")
}

/// The parsed v3 document of a group version (`v1`, `G/V`), inflated and
/// parsed once (the core one is 380 kB of JSON).
fn v3_document(group_version: &str) -> Option<&'static Value> {
    static PARSED: std::sync::OnceLock<Vec<(&'static str, Value)>> = std::sync::OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        V3.iter()
            .map(|(path, gz)| {
                let doc = inflate(gz)
                    .ok()
                    .and_then(|t| serde_json::from_slice(&t).ok());
                (*path, doc.unwrap_or(Value::Null))
            })
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
            other => Err(refusal(
                StatusCode::BAD_REQUEST,
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
        return Err(refusal(
            StatusCode::BAD_REQUEST,
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
        (FieldValidation::Strict, false) => Err(refusal(
            StatusCode::BAD_REQUEST,
            format!("strict decoding error: {}", unknown.join(", ")),
        )),
        // Warned of with the field names in single quotes.
        _ => Ok(unknown.iter().map(|w| w.replace('"', "'")).collect()),
    }
}

/// [`check_fields`] of a write's body as sent: a JSON patch names no fields
/// by key, and a body that is not JSON is refused by its parser; neither
/// has its fields checked here.
#[allow(clippy::result_large_err)]
pub(crate) fn check_body_fields(
    query: &WriteQuery,
    group_version: &str,
    kind: &str,
    body: &[u8],
) -> Result<Vec<String>, Response> {
    match serde_json::from_slice::<Value>(body) {
        Ok(value) if value.is_object() => check_fields(query, group_version, kind, &value),
        _ => check_fields(query, group_version, kind, &Value::Null),
    }
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

    /// The JSON `scripts/openapi-subset` wrote beside each kept document.
    const JSON: &[(&str, &str)] = &[
        ("v2", include_str!("openapi/v2.json")),
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

    #[test]
    fn every_kept_document_inflates_to_its_json_and_parses() {
        let kept = std::iter::once(("v2", V2)).chain(V3.iter().copied());
        let names: Vec<&str> = kept.clone().map(|(path, _)| path).collect();
        let json: Vec<&str> = JSON.iter().map(|(path, _)| *path).collect();
        assert_eq!(names, json);
        for ((path, gz), (_, text)) in kept.zip(JSON) {
            let inflated = inflate(gz).unwrap();
            assert!(
                inflated == text.as_bytes(),
                "{path}: the .gz is not its .json"
            );
            let doc: Value = serde_json::from_slice(&inflated).unwrap();
            assert!(
                doc["paths"].as_object().is_some_and(|p| !p.is_empty()),
                "{path}"
            );
            assert!(gz.len() * 3 < inflated.len(), "{path}");
        }
        let v2: Value = serde_json::from_slice(&inflate(V2).unwrap()).unwrap();
        assert_eq!(v2["swagger"], "2.0");
        assert_ne!(hash(V3[0].1), hash(V3[1].1));
    }

    #[test]
    fn a_document_larger_than_the_bound_is_not_inflated() {
        use std::io::Write;
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let zeros = vec![0u8; 1024 * 1024];
        for _ in 0..=MAX_INFLATED / zeros.len() as u64 {
            encoder.write_all(&zeros).unwrap();
        }
        let gz = encoder.finish().unwrap();
        let error = inflate(&gz).unwrap_err();
        assert!(error.to_string().contains("more than"), "{error}");
    }

    fn encodings(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(header::ACCEPT_ENCODING, value.parse().unwrap());
        headers
    }

    #[test]
    fn gzip_is_sent_to_a_client_that_takes_it() {
        for taken in [
            "gzip",
            "gzip, deflate, br",
            "deflate, GZIP;q=0.5",
            "*",
            "x-gzip",
        ] {
            assert!(accepts_gzip(&encodings(taken)), "{taken}");
        }
        for refused in ["identity", "br", "gzip;q=0", "gzip;q=0.0, *", "*;q=0", ""] {
            assert!(!accepts_gzip(&encodings(refused)), "{refused}");
        }
        assert!(!accepts_gzip(&HeaderMap::new()));
    }

    async fn body(response: Response) -> Vec<u8> {
        use http_body_util::BodyExt;
        response
            .into_body()
            .collect()
            .await
            .unwrap()
            .to_bytes()
            .to_vec()
    }

    #[tokio::test]
    async fn documents_are_served_gzipped_or_inflated_as_the_client_takes() {
        let gzipped = v2(encodings("gzip")).await;
        assert_eq!(gzipped.status(), StatusCode::OK);
        let h = gzipped.headers();
        assert_eq!(h[header::CONTENT_ENCODING], "gzip");
        assert_eq!(h[header::CONTENT_TYPE], "application/json");
        assert_eq!(h[header::CACHE_CONTROL], "no-cache, private");
        assert_eq!(h[header::VARY], "Accept-Encoding");
        assert_eq!(body(gzipped).await, V2);

        let plain = v2(HeaderMap::new()).await;
        let h = plain.headers();
        assert!(h.get(header::CONTENT_ENCODING).is_none());
        assert_eq!(h[header::CONTENT_TYPE], "application/json");
        assert_eq!(h[header::VARY], "Accept-Encoding");
        assert!(body(plain).await == JSON[0].1.as_bytes());
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
