//! Bootstrap tokens (`--enable-bootstrap-token-auth`): the Secrets
//! `kube-system/bootstrap-token-<id>` of type `bootstrap.kubernetes.io/token`
//! that `kubeadm token create` and `nodekeeper token create` make, served
//! to operators (create, get, list, delete), kept in the store, and the
//! authenticator that takes `<id>.<secret>` for user `system:bootstrap:<id>`.
//!
//! Upstream: k8s.io/cluster-bootstrap `token/api/types.go` (names and
//! patterns), `util/secrets/secrets.go` (expiry, groups), `util/tokens/tokens.go`
//! (`ParseToken`), and kubernetes `plugin/pkg/auth/authenticator/token/bootstrap/bootstrap.go`
//! `AuthenticateToken` (`:92-155`). These Secrets are the only ones
//! nodekeeper keeps: any other namespace or type is refused.

use std::collections::BTreeMap;

use axum::body::Bytes;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::ByteString;
use serde_json::Value;

use super::api_objects::{served, Kept};
use super::identity::{principal, Principal, BOOTSTRAPPERS_GROUP};
use super::params::ListParams;
use super::push::{json_body, ContentType};
use super::{bad_request, forbidden, refusal, Answer, AppState};
use crate::model::Micros;
use crate::store::{ApiObject, ApiWriteError, Store};

/// The store's and the errors' name for these objects.
pub const RESOURCE: &str = "secrets";
/// The only namespace kept (cluster-bootstrap's authenticator reads there only).
pub const NAMESPACE: &str = "kube-system";
/// `SecretTypeBootstrapToken` (types.go:33).
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// `BootstrapTokenSecretPrefix` (types.go:28).
pub const SECRET_PREFIX: &str = "bootstrap-token-";
/// `BootstrapUserPrefix` (types.go:87).
pub const USER_PREFIX: &str = "system:bootstrap:";
/// The most tokens kept: far more than a site joins machines with at once.
pub const MAX_TOKENS: usize = 1000;
/// These Secrets, as kept: at most 16 kB of JSON each.
const KEPT: Kept = Kept {
    resource: RESOURCE,
    namespace: NAMESPACE,
    kind: "Secret",
    max_bytes: 16 * 1024,
};
/// The fields Secrets can be selected by, as kube-apiserver's.
const FIELDS: &[&str] = &["metadata.name", "metadata.namespace", "type"];

/// The data keys (types.go:38-74).
pub const KEY_ID: &str = "token-id";
pub const KEY_SECRET: &str = "token-secret";
pub const KEY_EXPIRATION: &str = "expiration";
pub const KEY_DESCRIPTION: &str = "description";
pub const KEY_EXTRA_GROUPS: &str = "auth-extra-groups";
pub const KEY_USAGE_AUTHENTICATION: &str = "usage-bootstrap-authentication";
pub const KEY_USAGE_SIGNING: &str = "usage-bootstrap-signing";

/// `BootstrapTokenIDPattern` (types.go:102): six of `[a-z0-9]`.
pub fn is_token_id(id: &str) -> bool {
    id.len() == 6 && id.bytes().all(is_token_char)
}

/// The secret half: sixteen of `[a-z0-9]` (types.go:99, :108).
fn is_token_secret(secret: &str) -> bool {
    secret.len() == 16 && secret.bytes().all(is_token_char)
}

fn is_token_char(b: u8) -> bool {
    b.is_ascii_digit() || b.is_ascii_lowercase()
}

/// `ParseToken` (tokens.go:32): `<id>.<secret>`, exactly.
pub fn parse_token(token: &str) -> Option<(&str, &str)> {
    let (id, secret) = token.split_once('.')?;
    (is_token_id(id) && is_token_secret(secret)).then_some((id, secret))
}

/// `BootstrapGroupPattern` (types.go:96):
/// `\Asystem:bootstrappers:[a-z0-9:-]{0,255}[a-z0-9]\z`.
pub fn is_bootstrap_group(group: &str) -> bool {
    let Some(rest) = group.strip_prefix("system:bootstrappers:") else {
        return false;
    };
    let Some(last) = rest.bytes().last() else {
        return false;
    };
    rest.len() <= 256
        && is_token_char(last)
        && rest
            .bytes()
            .all(|b| is_token_char(b) || b == b':' || b == b'-')
}

/// A fresh token, as `GenerateBootstrapToken` (helpers.go:45) makes one.
pub fn generate_token() -> String {
    const CHARS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyz";
    // uuid's v4 bytes come from the OS's random source; 36 divides 252
    // evenly, so bytes below it are taken uniformly.
    let mut out = String::with_capacity(23);
    let mut bytes = Vec::new();
    while out.len() < 23 {
        if bytes.is_empty() {
            bytes = uuid::Uuid::new_v4().as_bytes().to_vec();
        }
        let b = bytes.pop().unwrap_or(255);
        if b < 252 {
            out.push(char::from(CHARS[usize::from(b % 36)]));
            if out.len() == 6 {
                out.push('.');
            }
        }
    }
    out
}

/// The value of a data key, as text (`GetData`, secrets.go:37).
fn data<'a>(secret: &'a Secret, key: &str) -> &'a str {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .and_then(|v| std::str::from_utf8(&v.0).ok())
        .unwrap_or("")
}

/// Whether a token's `expiration` has passed; one that cannot be read
/// counts as passed (`GetExpiration`, secrets.go:59-78).
pub fn has_expired(secret: &Secret, now: Micros) -> bool {
    match data(secret, KEY_EXPIRATION) {
        "" => false,
        text => Micros::parse_rfc3339(text).map_or(true, |at| at <= now),
    }
}

/// The user's groups: `system:bootstrappers` and the extra ones, each
/// checked, sorted and without repeats (`GetGroups`, secrets.go:92-112).
fn groups(secret: &Secret) -> Result<Vec<String>, String> {
    let mut groups = std::collections::BTreeSet::from([BOOTSTRAPPERS_GROUP.to_string()]);
    let extra = data(secret, KEY_EXTRA_GROUPS);
    if !extra.is_empty() {
        for group in extra.split(',') {
            if !is_bootstrap_group(group) {
                return Err(format!(
                    "bootstrap group {group:?} is invalid (must match \
                     \\Asystem:bootstrappers:[a-z0-9:-]{{0,255}}[a-z0-9]\\z)"
                ));
            }
            groups.insert(group.to_string());
        }
    }
    Ok(groups.into_iter().collect())
}

/// The bootstrap-token authenticator (`AuthenticateToken`, bootstrap.go:92-155):
/// a token of the right form whose Secret is of the right type, holds the
/// same id and secret (compared in constant time), has not expired, is
/// marked for authentication and names only valid extra groups, is user
/// `system:bootstrap:<id>`. Anything else is not authenticated (a 401).
pub fn authenticate(store: &Store, token: &str, now: Micros) -> Option<Principal> {
    let (id, secret_half) = parse_token(token)?;
    let name = format!("{SECRET_PREFIX}{id}");
    let object = store.api_object(RESOURCE, NAMESPACE, &name).ok()??;
    let secret: Secret = serde_json::from_str(&object.json).ok()?;
    let reject = |why: &str| {
        tracing::debug!("bootstrap secret {NAMESPACE}/{name} matching bearer token {why}");
        None
    };
    if secret.type_.as_deref() != Some(SECRET_TYPE) || secret.data.is_none() {
        return reject("has an invalid type");
    }
    let kept = data(&secret, KEY_SECRET).as_bytes();
    if !super::auth::constant_time_eq(kept, secret_half.as_bytes()) {
        return reject("has an invalid token-secret");
    }
    if data(&secret, KEY_ID) != id {
        return reject("has an invalid token-id");
    }
    if has_expired(&secret, now) {
        return reject("has expired");
    }
    if data(&secret, KEY_USAGE_AUTHENTICATION) != "true" {
        return reject("is not marked usage-bootstrap-authentication=true");
    }
    match groups(&secret) {
        Ok(groups) => Some(principal(format!("{USER_PREFIX}{id}"), groups)),
        Err(e) => reject(&format!("has an invalid auth-extra-groups: {e}")),
    }
}

/// Only these Secrets are kept. (Only operators reach here: the
/// authorizer, [`super::authz`], gives Secrets to no node or bootstrapper.)
fn check_namespace(namespace: &str) -> Result<(), Response> {
    if namespace != NAMESPACE {
        return Err(forbidden(format!(
            "secrets is forbidden: nodekeeper keeps only bootstrap tokens, Secrets of type \
             {SECRET_TYPE} in namespace {NAMESPACE:?}; not namespace {namespace:?}"
        )));
    }
    Ok(())
}

/// `GET /api/v1/namespaces/{namespace}/secrets`.
pub(crate) async fn list_secrets(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
    params: Result<Query<ListParams>, QueryRejection>,
) -> Answer {
    check_namespace(&namespace)?;
    let (params, watch) = ListParams::list(params)?;
    if watch {
        return Err(super::watch_not_served("secrets"));
    }
    let query = params.query(FIELDS).map_err(bad_request)?;
    let version = s.store.api_version();
    let objects = s
        .store
        .api_objects(RESOURCE, Some(NAMESPACE))
        .map_err(super::internal)?;
    let items: Vec<Value> = objects
        .iter()
        .filter(|o| {
            query.fields.matches(|f| match f {
                "metadata.name" => Some(o.name.as_str()),
                "metadata.namespace" => Some(NAMESPACE),
                "type" => Some(SECRET_TYPE),
                _ => None,
            })
        })
        .map(served)
        .collect();
    Ok(Json(crate::k8s::list("v1", "Secret", version, items)).into_response())
}

/// `GET /api/v1/namespaces/{namespace}/secrets/{name}`.
pub(crate) async fn get_secret(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Answer {
    check_namespace(&namespace)?;
    KEPT.get(&s, &name)
}

/// `POST /api/v1/namespaces/{namespace}/secrets`: a bootstrap token,
/// checked as the authenticator will read it, stored durably before the 201.
pub(crate) async fn create_secret(
    State(s): State<AppState>,
    Path(namespace): Path<String>,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    check_namespace(&namespace)?;
    let secret = json_body::<Secret>(ct.as_str(), &body)?;
    let secret = checked(secret).map_err(|e| refusal(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    let name = secret.metadata.name.clone().unwrap_or_default();
    if s.store.api_object_count(RESOURCE) >= MAX_TOKENS {
        return Err(forbidden(format!(
            "secrets {name:?} is forbidden: nodekeeper keeps at most {MAX_TOKENS} bootstrap \
             tokens; delete expired ones (`nodekeeper token list`, `nodekeeper token delete`)"
        )));
    }
    let object = KEPT.create(&s, &name, &secret).await?;
    tracing::info!(token_id = %&name[SECRET_PREFIX.len()..], "bootstrap token created");
    Ok((StatusCode::CREATED, Json(served(&object))).into_response())
}

/// `DELETE /api/v1/namespaces/{namespace}/secrets/{name}`.
pub(crate) async fn delete_secret(
    State(s): State<AppState>,
    Path((namespace, name)): Path<(String, String)>,
) -> Answer {
    check_namespace(&namespace)?;
    KEPT.delete(&s, &name).await
}

/// A bootstrap token's Secret, as `nodekeeper token create` makes it
/// (kubeadm's fields: usages signing and authentication).
pub fn token_secret(
    token: &str,
    expiration: Option<Micros>,
    description: &str,
    groups: &[String],
) -> Result<Secret, String> {
    let (id, secret) = parse_token(token).ok_or_else(|| {
        format!("{token:?} is not a bootstrap token: it must be [a-z0-9]{{6}}.[a-z0-9]{{16}}")
    })?;
    let mut data = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        data.insert(k.to_string(), ByteString(v.into_bytes()));
    };
    put(KEY_ID, id.into());
    put(KEY_SECRET, secret.into());
    put(KEY_USAGE_AUTHENTICATION, "true".into());
    put(KEY_USAGE_SIGNING, "true".into());
    if let Some(at) = expiration {
        put(KEY_EXPIRATION, at.rfc3339_seconds());
    }
    if !description.is_empty() {
        put(KEY_DESCRIPTION, description.into());
    }
    if !groups.is_empty() {
        put(KEY_EXTRA_GROUPS, groups.join(","));
    }
    Ok(Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: Some(format!("{SECRET_PREFIX}{id}")),
            namespace: Some(NAMESPACE.into()),
            ..Default::default()
        },
        type_: Some(SECRET_TYPE.into()),
        data: Some(data),
        ..Default::default()
    })
}

/// Keeps a token in a stopped store, checked as the API checks it, flushed.
pub fn create_in_store(store: &Store, secret: Secret) -> Result<ApiObject, String> {
    let secret = checked(secret)?;
    let name = secret.metadata.name.clone().unwrap_or_default();
    if store.api_object_count(RESOURCE) >= MAX_TOKENS {
        return Err(format!(
            "at most {MAX_TOKENS} bootstrap tokens are kept; delete some"
        ));
    }
    let object = ApiObject {
        resource: RESOURCE.into(),
        namespace: NAMESPACE.into(),
        name: name.clone(),
        version: 0,
        json: serde_json::to_string(&secret).map_err(|e| e.to_string())?,
    };
    let written = store.put_api_object(object, None).map_err(|e| match e {
        ApiWriteError::Exists => format!("secrets {name:?} already exists"),
        e => e.to_string(),
    })?;
    store.flush_blocking().map_err(|e| e.to_string())?;
    Ok(written)
}

/// The Secret to keep: a bootstrap token whose every field the
/// authenticator will accept, `stringData` folded into `data` as
/// kube-apiserver folds it, the server's metadata set.
pub fn checked(mut secret: Secret) -> Result<Secret, String> {
    let name = secret.metadata.name.clone().unwrap_or_default();
    let invalid = |field: &str, why: String| {
        format!("Secret {name:?} is invalid: {field}: Invalid value: {why}")
    };
    if secret.type_.as_deref() != Some(SECRET_TYPE) {
        return Err(invalid(
            "type",
            format!(
                "{:?}: nodekeeper keeps only bootstrap tokens, type {SECRET_TYPE}",
                secret.type_.as_deref().unwrap_or("")
            ),
        ));
    }
    let Some(id) = name
        .strip_prefix(SECRET_PREFIX)
        .filter(|id| is_token_id(id))
    else {
        return Err(invalid(
            "metadata.name",
            format!("{name:?}: must be {SECRET_PREFIX}<id>, the id six of [a-z0-9]"),
        ));
    };
    let mut merged: BTreeMap<String, ByteString> = secret.data.take().unwrap_or_default();
    for (k, v) in secret.string_data.take().unwrap_or_default() {
        merged.insert(k, ByteString(v.into_bytes()));
    }
    secret.data = Some(merged);
    if data(&secret, KEY_ID) != id {
        return Err(invalid(
            &format!("data[{KEY_ID}]"),
            format!("must be the id of the name, {id:?}"),
        ));
    }
    if !is_token_secret(data(&secret, KEY_SECRET)) {
        return Err(invalid(
            &format!("data[{KEY_SECRET}]"),
            "must be sixteen of [a-z0-9]".into(),
        ));
    }
    let expiration = data(&secret, KEY_EXPIRATION);
    if !expiration.is_empty() && Micros::parse_rfc3339(expiration).is_err() {
        return Err(invalid(
            &format!("data[{KEY_EXPIRATION}]"),
            format!("{expiration:?} is not an RFC 3339 time (2026-12-31T23:00:00Z)"),
        ));
    }
    if let Err(e) = groups(&secret) {
        return Err(invalid(&format!("data[{KEY_EXTRA_GROUPS}]"), e));
    }
    for (key, value) in secret.data.iter().flatten() {
        if key.starts_with("usage-bootstrap-") && value.0 != b"true" && value.0 != b"false" {
            return Err(invalid(
                &format!("data[{key}]"),
                "must be true or false".into(),
            ));
        }
    }
    let meta = &mut secret.metadata;
    meta.namespace = Some(NAMESPACE.into());
    meta.resource_version = None;
    meta.managed_fields = None;
    meta.generate_name = None;
    meta.uid = Some(uuid::Uuid::new_v4().to_string());
    meta.creation_timestamp = Some(crate::k8s::time(Micros::now()));
    Ok(secret)
}

/// Removes the tokens whose expiration has passed, as kube-controller-manager's
/// tokencleaner does; answers how many. Not durable until a flush.
pub(crate) fn remove_expired(
    store: &Store,
    now: Micros,
) -> Result<usize, crate::store::StoreError> {
    let mut removed = 0;
    for object in store.api_objects(RESOURCE, Some(NAMESPACE))? {
        let Ok(secret) = serde_json::from_str::<Secret>(&object.json) else {
            continue;
        };
        if has_expired(&secret, now) {
            match store.delete_api_object(RESOURCE, NAMESPACE, &object.name, Some(object.version)) {
                Ok(_) => removed += 1,
                Err(ApiWriteError::Store(e)) => return Err(e),
                // Changed or gone meanwhile: the next round sees it.
                Err(_) => {}
            }
        }
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::Caller;
    use crate::store::StoreOptions;

    fn secret(id: &str, secret: &str, extra: &[(&str, &str)]) -> Secret {
        let mut data = BTreeMap::from([
            (KEY_ID.to_string(), ByteString(id.as_bytes().to_vec())),
            (
                KEY_SECRET.to_string(),
                ByteString(secret.as_bytes().to_vec()),
            ),
            (
                KEY_USAGE_AUTHENTICATION.to_string(),
                ByteString(b"true".to_vec()),
            ),
        ]);
        for (k, v) in extra {
            data.insert(k.to_string(), ByteString(v.as_bytes().to_vec()));
        }
        Secret {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some(format!("{SECRET_PREFIX}{id}")),
                ..Default::default()
            },
            type_: Some(SECRET_TYPE.into()),
            data: Some(data),
            ..Default::default()
        }
    }

    fn keep(store: &Store, secret: &Secret) {
        let object = ApiObject {
            resource: RESOURCE.into(),
            namespace: NAMESPACE.into(),
            name: secret.metadata.name.clone().unwrap(),
            version: 0,
            json: serde_json::to_string(secret).unwrap(),
        };
        store.put_api_object(object, None).unwrap();
    }

    #[test]
    fn tokens_are_read_as_cluster_bootstrap_reads_them() {
        // tokens.go:32 with types.go:99's pattern.
        assert_eq!(
            parse_token("abcdef.0123456789abcdef"),
            Some(("abcdef", "0123456789abcdef"))
        );
        for bad in [
            "abcdef.0123456789abcde",
            "abcdef.0123456789abcdef0",
            "ABCDEF.0123456789abcdef",
            "abcde.0123456789abcdef",
            "abcdef:0123456789abcdef",
            "abcdef.0123456789abcdeF",
            "abcdef.0123456789abcd.f",
            "",
        ] {
            assert_eq!(parse_token(bad), None, "{bad:?}");
        }
        // types.go:96.
        assert!(is_bootstrap_group("system:bootstrappers:site-a"));
        assert!(is_bootstrap_group("system:bootstrappers:a:b-c9"));
        assert!(!is_bootstrap_group("system:bootstrappers:"));
        assert!(!is_bootstrap_group("system:bootstrappers:a-"));
        assert!(!is_bootstrap_group("system:masters"));
        assert!(!is_bootstrap_group("system:bootstrappers:Upper"));
        assert!(!is_bootstrap_group(&format!(
            "system:bootstrappers:{}",
            "a".repeat(257)
        )));
        assert!(is_bootstrap_group(&format!(
            "system:bootstrappers:{}",
            "a".repeat(256)
        )));
        for _ in 0..20 {
            let t = generate_token();
            assert!(parse_token(&t).is_some(), "{t}");
        }
        assert_ne!(generate_token(), generate_token());
    }

    #[test]
    fn the_authenticator_checks_what_bootstrap_go_checks() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(dir.path(), &StoreOptions::default()).unwrap();
        let now = Micros::parse_rfc3339("2026-12-03T12:00:00Z").unwrap();
        let s = "0123456789abcdef";
        keep(
            &store,
            &secret(
                "aaaaaa",
                s,
                &[(
                    KEY_EXTRA_GROUPS,
                    "system:bootstrappers:site-a,system:bootstrappers:site-a",
                )],
            ),
        );
        let p = authenticate(&store, &format!("aaaaaa.{s}"), now).unwrap();
        assert_eq!(p.user().name, "system:bootstrap:aaaaaa");
        // GetGroups: sorted, no repeats; principal adds system:authenticated.
        assert_eq!(
            p.user().groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:site-a",
                "system:authenticated"
            ]
        );
        assert_eq!(p.caller(), &Caller::Limited);
        // The wrong secret, an unknown id, a malformed token.
        assert!(authenticate(&store, "aaaaaa.0123456789abcdee", now).is_none());
        assert!(authenticate(&store, &format!("bbbbbb.{s}"), now).is_none());
        assert!(authenticate(&store, &format!("aaaaaa.{s}x"), now).is_none());
        // Expired (bootstrap.go:131), not yet, unreadable (secrets.go:64-68).
        keep(
            &store,
            &secret("cccccc", s, &[(KEY_EXPIRATION, "2026-12-03T11:59:59Z")]),
        );
        assert!(authenticate(&store, &format!("cccccc.{s}"), now).is_none());
        keep(
            &store,
            &secret("dddddd", s, &[(KEY_EXPIRATION, "2026-12-03T12:00:01Z")]),
        );
        assert!(authenticate(&store, &format!("dddddd.{s}"), now).is_some());
        keep(
            &store,
            &secret("eeeeee", s, &[(KEY_EXPIRATION, "tomorrow")]),
        );
        assert!(authenticate(&store, &format!("eeeeee.{s}"), now).is_none());
        // Not for authentication (bootstrap.go:136).
        keep(
            &store,
            &secret("ffffff", s, &[(KEY_USAGE_AUTHENTICATION, "false")]),
        );
        assert!(authenticate(&store, &format!("ffffff.{s}"), now).is_none());
        // A bad extra group (bootstrap.go:141).
        keep(
            &store,
            &secret("gggggg", s, &[(KEY_EXTRA_GROUPS, "system:masters")]),
        );
        assert!(authenticate(&store, &format!("gggggg.{s}"), now).is_none());
        // token-id disagreeing with the name (bootstrap.go:125).
        let mut other = secret("hhhhhh", s, &[]);
        other
            .data
            .as_mut()
            .unwrap()
            .insert(KEY_ID.into(), ByteString(b"iiiiii".to_vec()));
        keep(&store, &other);
        assert!(authenticate(&store, &format!("hhhhhh.{s}"), now).is_none());
        // Another type (bootstrap.go:114).
        let mut opaque = secret("jjjjjj", s, &[]);
        opaque.type_ = Some("Opaque".into());
        keep(&store, &opaque);
        assert!(authenticate(&store, &format!("jjjjjj.{s}"), now).is_none());
        // tokencleaner: only the expired and the unreadable expiry go.
        assert_eq!(remove_expired(&store, now).unwrap(), 2);
        assert!(store
            .api_object(RESOURCE, NAMESPACE, "bootstrap-token-cccccc")
            .unwrap()
            .is_none());
        assert!(store
            .api_object(RESOURCE, NAMESPACE, "bootstrap-token-dddddd")
            .unwrap()
            .is_some());
    }

    #[test]
    fn only_well_formed_tokens_are_created() {
        let ok = secret("abcdef", "0123456789abcdef", &[]);
        let kept = checked(ok.clone()).unwrap();
        assert_eq!(kept.metadata.namespace.as_deref(), Some(NAMESPACE));
        assert!(kept.metadata.uid.is_some());
        // stringData is folded into data.
        let mut with_strings = ok.clone();
        with_strings.data.as_mut().unwrap().remove(KEY_SECRET);
        with_strings.string_data = Some(BTreeMap::from([(
            KEY_SECRET.to_string(),
            "0123456789abcdef".to_string(),
        )]));
        let kept = checked(with_strings).unwrap();
        assert_eq!(data(&kept, KEY_SECRET), "0123456789abcdef");
        assert!(kept.string_data.is_none());
        let refused = |mutate: &dyn Fn(&mut Secret)| {
            let mut s = ok.clone();
            mutate(&mut s);
            let e = checked(s).unwrap_err();
            assert!(
                e.starts_with("Secret \"") && e.contains("\" is invalid: "),
                "{e}"
            );
            StatusCode::UNPROCESSABLE_ENTITY
        };
        let put = |k: &'static str, v: &'static str| {
            move |s: &mut Secret| {
                s.data
                    .as_mut()
                    .unwrap()
                    .insert(k.into(), ByteString(v.as_bytes().to_vec()));
            }
        };
        let unprocessable = StatusCode::UNPROCESSABLE_ENTITY;
        assert_eq!(refused(&|s| s.type_ = Some("Opaque".into())), unprocessable);
        assert_eq!(
            refused(&|s| s.metadata.name = Some("token-abcdef".into())),
            unprocessable
        );
        assert_eq!(refused(&put(KEY_ID, "abcdeg")), unprocessable);
        assert_eq!(refused(&put(KEY_SECRET, "short")), unprocessable);
        assert_eq!(refused(&put(KEY_EXPIRATION, "soon")), unprocessable);
        assert_eq!(
            refused(&put(KEY_EXTRA_GROUPS, "system:masters")),
            unprocessable
        );
        assert_eq!(refused(&put(KEY_USAGE_SIGNING, "yes")), unprocessable);
        // Only kube-system.
        assert!(check_namespace(NAMESPACE).is_ok());
        assert_eq!(
            check_namespace("default").unwrap_err().status(),
            StatusCode::FORBIDDEN
        );
    }
}
