//! `certificates.k8s.io/v1` CertificateSigningRequests, as kube-apiserver
//! serves them: create (with `generateName`), get, list, watch (the
//! kubelet waits for its certificate with an informer on
//! `fieldSelector=metadata.name=NAME`: client-go
//! `util/certificate/csr/csr.go:180-197` `WaitForCertificate`), delete, and
//! the `/approval` and `/status` subresources. Kept in the store's
//! `api_objects` tree, at most [`MAX_CSRS`]; approval, signing and clean-up
//! are [`super::csr_signing`]'s. Who may do what is the authorizer's
//! ([`super::authz`]: nodes and bootstrappers create, get, list and watch;
//! the rest is for operators).

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use serde_json::Value;

pub(crate) use super::api_objects::served;
use super::api_objects::{durable_write, Kept};
use super::identity::Principal;
use super::openapi::check_body_fields;
use super::params::ListParams;
use super::push::{json_body, ContentType};
use super::watch::{line, stream_response, Pause, DEFAULT_TIMEOUT};
use super::{bad_request, forbidden, not_found, refusal, Answer, AppState, Identity};
use crate::k8s::watch::{error_line, too_old_version, WatchEventType};
use crate::model::validation::{FieldError, Invalid};
use crate::model::Micros;
use crate::store::{ApiObject, ApiWriteError};

/// The store's and the errors' name for these objects.
pub const RESOURCE: &str = "certificatesigningrequests.certificates.k8s.io";
pub const API_VERSION: &str = "certificates.k8s.io/v1";
pub const KIND: &str = "CertificateSigningRequest";
/// The most CSRs kept: kubelets ask once a year each (and once more when
/// bootstrapping); the cleaner removes handled ones after an hour.
pub const MAX_CSRS: usize = 10_000;
/// The largest CSR kept, as JSON (a request is ~1 kB, a certificate ~1 kB).
const MAX_BYTES: usize = 64 * 1024;
const KEPT: Kept = Kept {
    resource: RESOURCE,
    namespace: "",
    kind: KIND,
    max_bytes: MAX_BYTES,
};
/// The fields CSRs can be selected by, as kube-apiserver's
/// (`pkg/registry/certificates/certificates/strategy.go` `SelectableFields`).
const FIELDS: &[&str] = &["metadata.name", "spec.signerName"];
/// Who approved a request by `/approval`, for the history.
pub const APPROVED_BY: &str = "certificates.nodekeeper.io/approved-by";

/// A stored CSR, read.
pub(crate) fn read(object: &ApiObject) -> Option<CertificateSigningRequest> {
    serde_json::from_str(&object.json).ok()
}

/// `POST /apis/certificates.k8s.io/v1/certificatesigningrequests`: the
/// requester's user and groups become `spec.username` and `spec.groups`
/// (kube's `strategy.go` `PrepareForCreate`), the status is cleared, the
/// request is checked, and it is stored durably before the 201.
pub(crate) async fn create_csr(
    State(s): State<AppState>,
    principal: Principal,
    ct: ContentType,
    Query(query): Query<super::openapi::WriteQuery>,
    body: Bytes,
) -> Answer {
    let csr = json_body::<CertificateSigningRequest>(ct.as_str(), &body)?;
    let warnings = check_body_fields(&query, API_VERSION, KIND, &body)?;
    let csr = prepared(csr, &principal)?;
    let name = csr.metadata.name.clone().unwrap_or_default();
    if s.store.api_object_count(RESOURCE) >= MAX_CSRS {
        return Err(forbidden(format!(
            "certificatesigningrequests {name:?} is forbidden: nodekeeper keeps at most {MAX_CSRS} \
             certificate signing requests; handled ones are removed an hour after, pending ones \
             after a day (`kubectl delete csr` removes them now)"
        )));
    }
    let object = KEPT.create(&s, &name, &csr).await?;
    tracing::info!(csr = %name, user = %principal.user().name, "certificate signing request created");
    let created = (StatusCode::CREATED, Json(served(&object))).into_response();
    Ok(super::push::with_warnings(created, &warnings))
}

/// `PATCH …/{name}` (merge, strategic merge or JSON patch): only the
/// labels and annotations change, as kube's update strategy keeps the spec
/// and the status (`pkg/registry/certificates/certificates/strategy.go`
/// `csrStrategy.PrepareForUpdate`); who approved stays as it was recorded.
/// `kubectl apply`, `label` and `annotate` patch CSRs so.
pub(crate) async fn patch_csr(
    State(s): State<AppState>,
    Path(name): Path<String>,
    ct: ContentType,
    Query(query): Query<super::openapi::WriteQuery>,
    body: Bytes,
) -> Answer {
    let warnings = check_body_fields(&query, API_VERSION, KIND, &body)?;
    let current = s
        .store
        .api_object(RESOURCE, "", &name)
        .map_err(super::internal)?
        .ok_or_else(|| not_found(RESOURCE, &name))?;
    let sent =
        super::push::patched::<CertificateSigningRequest>(ct.as_str(), &body, served(&current))?;
    let answer = update(&s, &name, sent, |csr, sent| {
        let approved_by = csr
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(APPROVED_BY).cloned());
        csr.metadata.labels = sent.metadata.labels;
        csr.metadata.annotations = sent.metadata.annotations;
        let annotations = csr
            .metadata
            .annotations
            .get_or_insert_with(Default::default);
        match approved_by {
            Some(by) => annotations.insert(APPROVED_BY.into(), by),
            None => annotations.remove(APPROVED_BY),
        };
        if annotations.is_empty() {
            csr.metadata.annotations = None;
        }
        Ok(())
    })
    .await?;
    Ok(super::push::with_warnings(answer, &warnings))
}

/// kube-apiserver's create: the name (or one made from `generateName`),
/// the requester, a clear status, and the checks of
/// `pkg/apis/certificates/validation/validation.go`
/// `ValidateCertificateSigningRequestCreate`: a request that parses with a
/// valid signature, a signer name, usages, `expirationSeconds` ≥ 600.
fn prepared(
    mut csr: CertificateSigningRequest,
    principal: &Principal,
) -> Result<CertificateSigningRequest, Response> {
    let meta = &mut csr.metadata;
    if meta.name.as_deref().unwrap_or("").is_empty() {
        match meta.generate_name.as_deref().filter(|g| !g.is_empty()) {
            Some(prefix) => meta.name = Some(format!("{prefix}{}", random_suffix())),
            None => {
                return Err(invalid(
                    "",
                    vec![FieldError::required(
                        "metadata.name",
                        "name or generateName is required",
                    )],
                ))
            }
        }
    }
    let name = meta.name.clone().unwrap_or_default();
    // kube's `ValidateCertificateRequestName` takes any name a path segment
    // can carry (the kubelet's are base64url: `node-csr-…`).
    if name.len() > 253 || name == "." || name == ".." || name.contains(['/', '%']) {
        return Err(invalid(
            &name,
            vec![FieldError::invalid(
                "metadata.name",
                &name,
                "may not be '.' or '..', contain '/' or '%', or exceed 253 characters",
            )],
        ));
    }
    meta.namespace = None;
    meta.resource_version = None;
    meta.managed_fields = None;
    meta.uid = Some(uuid::Uuid::new_v4().to_string());
    meta.creation_timestamp = Some(crate::k8s::time(Micros::now()));
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.remove(APPROVED_BY);
    }
    let user = principal.user();
    csr.spec.username = Some(user.name.clone());
    csr.spec.groups = Some(user.groups.clone());
    csr.spec.uid = None;
    csr.spec.extra = None;
    csr.status = None;
    let mut causes = Vec::new();
    if let Err(e) = crate::certificates::parse_request(&csr.spec.request.0) {
        causes.push(cause(
            "spec.request",
            "FieldValueInvalid",
            format!("Invalid value: {e}"),
        ));
    }
    if csr.spec.signer_name.is_empty() {
        // field.Required(path, ""): no detail, so no colon.
        causes.push(cause(
            "spec.signerName",
            "FieldValueRequired",
            "Required value".into(),
        ));
    } else if !is_signer_name(&csr.spec.signer_name) {
        causes.push(FieldError::invalid(
            "spec.signerName",
            &csr.spec.signer_name,
            "must be a fully qualified domain and path of the form 'example.com/signer-name'",
        ));
    }
    let usages = csr.spec.usages.clone().unwrap_or_default();
    if usages.is_empty() {
        causes.push(FieldError::required(
            "spec.usages",
            "usages must be provided",
        ));
    }
    let mut seen = std::collections::BTreeSet::new();
    for (i, u) in usages.iter().enumerate() {
        if !seen.insert(u) {
            causes.push(FieldError::duplicate(format!("spec.usages[{i}]"), u));
        }
    }
    if csr
        .spec
        .expiration_seconds
        .is_some_and(|s| s < crate::certificates::MIN_EXPIRATION_SECONDS)
    {
        causes.push(cause(
            "spec.expirationSeconds",
            "FieldValueInvalid",
            "Invalid value: may not specify a duration less than 600 seconds (10 minutes)".into(),
        ));
    }
    if !causes.is_empty() {
        return Err(invalid(&name, causes));
    }
    Ok(csr)
}

/// `example.com/name`: a domain with a dot, a slash, a path.
fn is_signer_name(name: &str) -> bool {
    let Some((domain, path)) = name.split_once('/') else {
        return false;
    };
    domain.contains('.')
        && !path.is_empty()
        && domain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
}

/// Five characters as apiserver's `names.SimpleNameGenerator` picks them
/// (`k8s.io/apiserver/pkg/storage/names/generate.go`: no vowels, no
/// look-alikes).
fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..5)
        .map(|_| char::from(ALPHABET[fastrand::usize(..ALPHABET.len())]))
        .collect()
}

/// A 422 naming each refused field, as kube-apiserver's for a kind of
/// the `certificates.k8s.io` group.
fn invalid(name: &str, causes: Vec<FieldError>) -> Response {
    let refused = Invalid {
        kind: KIND,
        name: name.to_string(),
        causes,
    };
    let status = crate::k8s::invalid_in_group("certificates.k8s.io", &refused);
    (StatusCode::UNPROCESSABLE_ENTITY, Json(status)).into_response()
}

/// A refused field whose message is not one of [`FieldError`]'s forms.
fn cause(field: &str, reason: &'static str, message: String) -> FieldError {
    FieldError {
        field: field.to_string(),
        reason,
        message,
    }
}

/// `GET …/certificatesigningrequests/{name}` (and its subresources).
pub(crate) async fn get_csr(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    KEPT.get(&s, &name)
}

/// Whether a CSR is picked by a list's field selector.
fn selected(query: &super::params::ListQuery, object: &ApiObject) -> bool {
    let signer = read(object).map(|c| c.spec.signer_name).unwrap_or_default();
    query.fields.matches(|f| match f {
        "metadata.name" => Some(object.name.as_str()),
        "spec.signerName" => Some(signer.as_str()),
        _ => None,
    })
}

/// `GET …/certificatesigningrequests`: a list, or with `watch=true` a watch.
pub(crate) async fn list_csrs(
    State(s): State<AppState>,
    headers: axum::http::HeaderMap,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    let (params, watch) = ListParams::list(params)?;
    if watch {
        return watch_csrs(s, params);
    }
    let query = params.query(FIELDS).map_err(bad_request)?;
    let version = s.store.api_version();
    let objects = s
        .store
        .api_objects(RESOURCE, None)
        .map_err(super::internal)?;
    let metadata = super::at_version(version);
    if super::params::wants_table(&headers) {
        let rows: Vec<_> = objects
            .iter()
            .filter(|o| selected(&query, o))
            .filter_map(|o| Some((read(o)?, served(o))))
            .collect();
        let table = crate::k8s::table::csr_table(&rows, metadata, query.include, Micros::now());
        return Ok(Json(table).into_response());
    }
    let items: Vec<Value> = objects
        .iter()
        .filter(|o| selected(&query, o))
        .map(served)
        .collect();
    Ok(Json(crate::k8s::list(API_VERSION, KIND, version, items)).into_response())
}

/// A watch: every change of a selected CSR after the version asked for
/// (all of them as `ADDED` without one), found by comparing the kept CSRs
/// with what the stream has sent each time the tree changes. Deletions
/// come from the store's remembered ones ([`Store::api_deletions`]), at
/// the version of the deletion, as kube-apiserver's watch sends them: a
/// CSR the client listed and that was deleted (by `DELETE`, or by the
/// cleaner) before its watch began is `DELETED` too. A version older than
/// the deletions remembered is `410 Expired`, so the client relists.
/// The request is read, and the stream waits between its reads, as the
/// node watch's ([`super::watch`]); a watch runs at most
/// [`DEFAULT_TIMEOUT`].
///
/// [`Store::api_deletions`]: crate::store::Store::api_deletions
fn watch_csrs(s: AppState, params: ListParams) -> Answer {
    let request = super::watch::watch_request(&params, FIELDS)?;
    let query = request.query;
    let from = super::watch::version_asked(params.resource_version.as_deref())?;
    // Without a version, deletions count from now: everything kept is sent.
    let mut deletions_seen = from.unwrap_or_else(|| s.store.api_version());
    if let Err(e) = s.store.api_deletions(RESOURCE, deletions_seen) {
        return Err(super::watch::too_old(e.requested, e.floor));
    }
    let timeout = request
        .timeout
        .map_or(DEFAULT_TIMEOUT, |t| t.min(DEFAULT_TIMEOUT));
    let bookmarks = request.bookmarks.then_some((API_VERSION, KIND));
    let (sender, receiver) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut pause = Pause::new(s.store.api_changes(), timeout, bookmarks);
        let mut sent: BTreeMap<String, (u64, Value)> = BTreeMap::new();
        let mut first = true;
        loop {
            // Every change up to here is in what is read below.
            let seen = pause.seen();
            // Deletions first, then what is kept: a CSR deleted between the
            // two reads is still caught by the comparison below.
            let deleted = match s.store.api_deletions(RESOURCE, deletions_seen) {
                Ok(deleted) => deleted,
                Err(e) => {
                    let gone = too_old_version(e.requested, e.floor);
                    let _ = sender.send(Bytes::from(error_line(&gone))).await;
                    return;
                }
            };
            for tombstone in deleted {
                deletions_seen = deletions_seen.max(tombstone.version);
                // Sent before, or perhaps in the list the client watches from.
                let known = sent.remove(&tombstone.name).is_some() || (first && from.is_some());
                if !known || !selected(&query, &tombstone) {
                    continue;
                }
                let deleted = line(WatchEventType::Deleted, served(&tombstone));
                if sender.send(deleted).await.is_err() {
                    return;
                }
            }
            let Ok(objects) = s.store.api_objects(RESOURCE, None) else {
                return;
            };
            let mut now_kept = BTreeMap::new();
            for object in objects.iter().filter(|o| selected(&query, o)) {
                now_kept.insert(object.name.clone(), object.version);
                let known = sent.get(&object.name).map(|(v, _)| *v);
                let event = match known {
                    Some(v) if v == object.version => None,
                    Some(_) => Some(WatchEventType::Modified),
                    // At the start, what the client's list had is not sent again.
                    None if first && from.is_some_and(|f| object.version <= f) => {
                        sent.insert(object.name.clone(), (object.version, served(object)));
                        None
                    }
                    None => Some(WatchEventType::Added),
                };
                if let Some(kind) = event {
                    let value = served(object);
                    sent.insert(object.name.clone(), (object.version, value.clone()));
                    if sender.send(line(kind, value)).await.is_err() {
                        return;
                    }
                }
            }
            // Gone, and not yet among the deletions read: as last sent.
            let gone: Vec<String> = sent
                .keys()
                .filter(|n| !now_kept.contains_key(*n))
                .cloned()
                .collect();
            for name in gone {
                if let Some((_, value)) = sent.remove(&name) {
                    if sender
                        .send(line(WatchEventType::Deleted, value))
                        .await
                        .is_err()
                    {
                        return;
                    }
                }
            }
            first = false;
            if pause.wait(&s, &sender, seen).await.is_none() {
                return;
            }
        }
    });
    Ok(stream_response(receiver))
}

/// `DELETE …/certificatesigningrequests/{name}`.
pub(crate) async fn delete_csr(State(s): State<AppState>, Path(name): Path<String>) -> Answer {
    KEPT.delete(&s, &name).await
}

/// `PUT …/{name}/approval`: only the conditions are taken from the body,
/// as kube's approval strategy does (`strategy.go`
/// `csrApprovalStrategy.PrepareForUpdate`); Approved and Denied exclude
/// each other and, once set, stay.
pub(crate) async fn put_approval(
    State(s): State<AppState>,
    Path(name): Path<String>,
    Identity(by): Identity,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let sent = json_body::<CertificateSigningRequest>(ct.as_str(), &body)?;
    update(&s, &name, sent, |current, sent| {
        let old = conditions(current);
        let new: Vec<_> = sent.status.and_then(|s| s.conditions).unwrap_or_default();
        let has = |list: &[CertificateSigningRequestCondition], t: &str| {
            list.iter().any(|c| c.type_ == t && c.status == "True")
        };
        let mut causes = Vec::new();
        for (i, c) in new.iter().enumerate() {
            if !["Approved", "Denied", "Failed"].contains(&c.type_.as_str()) {
                causes.push(FieldError::not_supported(
                    format!("status.conditions[{i}].type"),
                    &c.type_,
                    &["Approved", "Denied", "Failed"],
                ));
            }
            if !["True", "False", "Unknown"].contains(&c.status.as_str()) {
                causes.push(FieldError::not_supported(
                    format!("status.conditions[{i}].status"),
                    &c.status,
                    &["True", "False", "Unknown"],
                ));
            }
        }
        if has(&new, "Approved") && has(&new, "Denied") {
            causes.push(cause(
                "status.conditions",
                "FieldValueInvalid",
                "Invalid value: Approved and Denied conditions are mutually exclusive".into(),
            ));
        }
        for t in ["Approved", "Denied"] {
            if has(&old, t) && !has(&new, t) {
                causes.push(FieldError::forbidden(
                    "status.conditions",
                    &format!("updates may not remove a condition of type {t:?}"),
                ));
            }
        }
        if !causes.is_empty() {
            return Err(invalid(&name, causes));
        }
        let newly_approved = has(&new, "Approved") && !has(&old, "Approved");
        let mut new = new;
        for c in &mut new {
            if c.last_update_time.is_none() {
                c.last_update_time = Some(crate::k8s::time(Micros::now()));
            }
        }
        current
            .status
            .get_or_insert_with(Default::default)
            .conditions = Some(new);
        if newly_approved {
            current
                .metadata
                .annotations
                .get_or_insert_with(Default::default)
                .insert(APPROVED_BY.into(), by.clone());
        }
        Ok(())
    })
    .await
}

/// `PUT …/{name}/status`: the status as sent (a signer's certificate and
/// conditions), the spec kept (`strategy.go` `csrStatusStrategy`).
pub(crate) async fn put_status(
    State(s): State<AppState>,
    Path(name): Path<String>,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let sent = json_body::<CertificateSigningRequest>(ct.as_str(), &body)?;
    update(&s, &name, sent, |current, sent| {
        current.status = sent.status;
        Ok(())
    })
    .await
}

/// The conditions a CSR has.
pub(crate) fn conditions(
    csr: &CertificateSigningRequest,
) -> Vec<CertificateSigningRequestCondition> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default()
}

/// A subresource's write: `change` applied to the current CSR, at the
/// version the client sent (if it sent one), flushed before the answer.
async fn update(
    s: &AppState,
    name: &str,
    sent: CertificateSigningRequest,
    change: impl FnOnce(
        &mut CertificateSigningRequest,
        CertificateSigningRequest,
    ) -> Result<(), Response>,
) -> Answer {
    super::push::check_name(sent.metadata.name.as_deref(), name)?;
    let expected = crate::k8s::expected_version(&sent.metadata).map_err(|e| {
        // The message names its field already.
        let message = e
            .trim_start_matches("metadata.resourceVersion: ")
            .to_string();
        let field = cause("metadata.resourceVersion", "FieldValueInvalid", message);
        invalid(name, vec![field])
    })?;
    let current = s
        .store
        .api_object(RESOURCE, "", name)
        .map_err(super::internal)?
        .ok_or_else(|| not_found(RESOURCE, name))?;
    if expected.is_some_and(|v| v != current.version) {
        return Err(conflict(name));
    }
    let mut csr = read(&current)
        .ok_or_else(|| super::internal(format!("the stored CSR {name:?} cannot be read")))?;
    change(&mut csr, sent)?;
    let json = serde_json::to_string(&csr).map_err(super::internal)?;
    if json.len() > MAX_BYTES {
        return Err(refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("CertificateSigningRequest {name:?} would take {} bytes; at most {MAX_BYTES} are kept", json.len()),
        ));
    }
    let object = ApiObject {
        json,
        ..current.clone()
    };
    let written = durable_write(&s.store, || {
        s.store.put_api_object(object, Some(current.version))
    });
    match written.await {
        Ok(object) => Ok(Json(served(&object)).into_response()),
        Err(ApiWriteError::Conflict) => Err(conflict(name)),
        Err(ApiWriteError::NotFound) => Err(not_found(RESOURCE, name)),
        Err(e) => Err(super::internal(e)),
    }
}

fn conflict(name: &str) -> Response {
    super::push::conflict(RESOURCE, name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::testing::request;
    use crate::server::identity::{principal, BOOTSTRAPPERS_GROUP};
    use k8s_openapi::api::certificates::v1::{
        CertificateSigningRequestSpec, CertificateSigningRequestStatus,
    };
    use k8s_openapi::ByteString;

    fn csr(name: &str, generate: &str, pem: &str) -> CertificateSigningRequest {
        CertificateSigningRequest {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: (!name.is_empty()).then(|| name.to_string()),
                generate_name: (!generate.is_empty()).then(|| generate.to_string()),
                ..Default::default()
            },
            spec: CertificateSigningRequestSpec {
                request: ByteString(pem.as_bytes().to_vec()),
                signer_name: crate::certificates::KUBELET_CLIENT_SIGNER.into(),
                usages: Some(vec!["digital signature".into(), "client auth".into()]),
                username: Some("forged".into()),
                ..Default::default()
            },
            status: Some(CertificateSigningRequestStatus {
                certificate: Some(ByteString(b"forged".to_vec())),
                ..Default::default()
            }),
        }
    }

    #[test]
    fn a_create_takes_the_requester_from_the_credentials_and_checks_the_request() {
        let pem = request("system:node:edge-1", &["system:nodes"], &[]);
        let boot = principal(
            "system:bootstrap:abcdef".into(),
            vec![BOOTSTRAPPERS_GROUP.into()],
        );
        let made = prepared(csr("", "csr-", &pem), &boot).unwrap();
        let name = made.metadata.name.unwrap();
        assert!(name.starts_with("csr-") && name.len() == 9, "{name}");
        assert_eq!(
            made.spec.username.as_deref(),
            Some("system:bootstrap:abcdef")
        );
        assert_eq!(
            made.spec.groups.unwrap(),
            ["system:bootstrappers", "system:authenticated"]
        );
        assert!(made.status.is_none());
        assert!(made.metadata.uid.is_some());
        let status = |c: CertificateSigningRequest| prepared(c, &boot).unwrap_err().status();
        assert_eq!(status(csr("", "", &pem)), StatusCode::UNPROCESSABLE_ENTITY);
        assert_eq!(
            status(csr("a", "", "not pem")),
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let mut no_usages = csr("a", "", &pem);
        no_usages.spec.usages = None;
        assert_eq!(status(no_usages), StatusCode::UNPROCESSABLE_ENTITY);
        let mut short = csr("a", "", &pem);
        short.spec.expiration_seconds = Some(599);
        assert_eq!(status(short), StatusCode::UNPROCESSABLE_ENTITY);
        let mut bad_signer = csr("a", "", &pem);
        bad_signer.spec.signer_name = "kubelet".into();
        assert_eq!(status(bad_signer), StatusCode::UNPROCESSABLE_ENTITY);
    }
}
