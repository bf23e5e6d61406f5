//! `authentication.k8s.io/v1` TokenReviews and `authorization.k8s.io/v1`
//! SubjectAccessReviews: how a kubelet with webhook authentication and
//! authorization (kubeadm's default) asks its API server who calls its own
//! port and what that caller may do there (kubernetes
//! `cmd/kubelet/app/auth.go` `BuildAuthn`/`BuildAuthz`; the clients are
//! k8s.io/apiserver `plugin/pkg/authenticator/token/webhook/webhook.go:99-195`
//! and `plugin/pkg/authorizer/webhook/webhook.go:186-300`).
//!
//! Answered by nodekeeper's own authenticator and authorizer, the ones its
//! guard uses: a token is what it stands for on nodekeeper's API
//! (`--token-file`, bootstrap tokens: [`Authn::token`]), and a user may do
//! on a kubelet what it may do here ([`authz::decide_for`]: operators
//! anything, nodes and bootstrappers their table). Both are created, never
//! kept, as kube-apiserver's (`pkg/registry/authentication/tokenreview/storage.go`,
//! `pkg/registry/authorization/subjectaccessreview/rest.go`): the answer is
//! the request with its `status`, `201 Created`.

use axum::body::Bytes;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewStatus, UserInfo};
use k8s_openapi::api::authorization::v1::{SubjectAccessReview, SubjectAccessReviewStatus};

use super::authz::{self, Asked, Attributes};
use super::identity::{principal, Principal};
use super::push::{json_body, ContentType};
use super::{bad_request, refusal, Answer, Authn};

/// `POST /apis/authentication.k8s.io/v1/tokenreviews`.
pub(crate) async fn create_token_review(
    Extension(authn): Extension<Authn>,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let mut review = json_body::<TokenReview>(ct.as_str(), &body)?;
    if review.spec.token.as_deref().unwrap_or("").is_empty() {
        return Err(bad_request(
            "token is required for TokenReview in authentication",
        ));
    }
    review.status = Some(token_status(&authn, &review));
    Ok((StatusCode::CREATED, Json(review)).into_response())
}

/// Who the review's token stands for. nodekeeper's tokens are not bound
/// to audiences and it has none of its own (kube-apiserver's
/// `--api-audiences`): as kube-apiserver answers for such tokens
/// (k8s.io/apiserver `pkg/authentication/authenticator/audagnostic.go`,
/// the audiences asked and the server's do not meet), a review that names
/// audiences is not authenticated. A kubelet names none.
fn token_status(authn: &Authn, review: &TokenReview) -> TokenReviewStatus {
    let token = review.spec.token.as_deref().unwrap_or("");
    let audiences = review.spec.audiences.as_deref().unwrap_or_default();
    let mut status = TokenReviewStatus {
        user: Some(UserInfo::default()),
        ..TokenReviewStatus::default()
    };
    if !audiences.is_empty() {
        status.error = Some(format!(
            "nodekeeper's tokens are not bound to audiences, and the review asks for {audiences:?}; \
             ask without audiences"
        ));
        return status;
    }
    if let Some(found) = authn.token(token) {
        let user = found.user();
        status.authenticated = Some(true);
        status.user = Some(UserInfo {
            username: Some(user.name.clone()),
            groups: Some(user.groups.clone()),
            ..UserInfo::default()
        });
    }
    status
}

/// `POST /apis/authorization.k8s.io/v1/subjectaccessreviews`.
pub(crate) async fn create_subject_access_review(
    Extension(authn): Extension<Authn>,
    ct: ContentType,
    body: Bytes,
) -> Answer {
    let mut review = json_body::<SubjectAccessReview>(ct.as_str(), &body)?;
    check(&review)?;
    let spec = &review.spec;
    let subject = principal(
        spec.user.clone().unwrap_or_default(),
        spec.groups.clone().unwrap_or_default(),
    );
    let decided = match (&spec.resource_attributes, &spec.non_resource_attributes) {
        (Some(r), _) => {
            let attrs = Attributes {
                verb: r.verb.as_deref().unwrap_or(""),
                group: r.group.as_deref().unwrap_or(""),
                resource: r.resource.as_deref().unwrap_or(""),
                subresource: r.subresource.as_deref().unwrap_or(""),
                namespace: r.namespace.as_deref().unwrap_or(""),
                name: r.name.as_deref().unwrap_or(""),
            };
            decide(&authn, &subject, &Asked::Resource(attrs))
        }
        (None, Some(n)) => {
            let asked = Asked::Path {
                verb: n.verb.as_deref().unwrap_or(""),
                path: n.path.as_deref().unwrap_or(""),
            };
            decide(&authn, &subject, &asked)
        }
        // `check` refused a review asking neither.
        (None, None) => Err("no attributes".into()),
    };
    review.status = Some(match decided {
        Ok(()) => SubjectAccessReviewStatus {
            allowed: true,
            ..SubjectAccessReviewStatus::default()
        },
        // kube's node and RBAC authorizers have no opinion on what they do
        // not grant: not allowed, and not `denied` either.
        Err(reason) => SubjectAccessReviewStatus {
            allowed: false,
            reason: Some(reason),
            ..SubjectAccessReviewStatus::default()
        },
    });
    Ok((StatusCode::CREATED, Json(review)).into_response())
}

/// The guard's decision for `subject`: a caller without credentials is
/// served where the guard serves one ([`Authn::serves_anonymous`]), and
/// every other caller as the authorizer says.
fn decide(authn: &Authn, subject: &Principal, asked: &Asked<'_>) -> Result<(), String> {
    if subject.is_anonymous() {
        let path = match asked {
            Asked::Path { path, .. } => Some(*path),
            Asked::Resource(_) => None,
        };
        if !authn.serves_anonymous(path) {
            return Err("nodekeeper takes no requests without credentials here".into());
        }
    }
    authz::decide_for(subject, asked).map_err(|refusal| refusal.reason())
}

/// kube-apiserver's validation of a review
/// (`pkg/apis/authorization/validation/validation.go`
/// `ValidateSubjectAccessReviewSpec`): one kind of attributes, and a
/// user or a group.
fn check(review: &SubjectAccessReview) -> Result<(), Response> {
    let spec = &review.spec;
    let mut causes = Vec::new();
    match (&spec.resource_attributes, &spec.non_resource_attributes) {
        (Some(_), Some(_)) => causes.push(
            "spec.nonResourceAttributes: Invalid value: cannot be specified in combination with \
             resourceAttributes",
        ),
        (None, None) => causes.push(
            "spec.resourceAttributes: Invalid value: null: exactly one of nonResourceAttributes \
             or resourceAttributes must be specified",
        ),
        _ => {}
    }
    let no_user = spec.user.as_deref().unwrap_or("").is_empty();
    if no_user && spec.groups.as_deref().unwrap_or_default().is_empty() {
        causes.push(
            "spec.user: Invalid value: \"\": at least one of user or group must be specified",
        );
    }
    if causes.is_empty() {
        return Ok(());
    }
    Err(refusal(
        StatusCode::UNPROCESSABLE_ENTITY,
        format!(
            "SubjectAccessReview.authorization.k8s.io \"\" is invalid: [{}]",
            causes.join(", ")
        ),
    ))
}
