//! What kube-controller-manager does with CSRs, for kubelets' client
//! certificates: approve (its `csrapproving` controller with the usual
//! bindings), sign (`csrsigning`, with `--cluster-signing-cert-file`),
//! and clean up (`csrcleaner`). One task, woken by every write of the
//! CSRs and once a minute; every certificate issued is recorded in its
//! node's history ([`EventKind::CertificateIssued`]).
//!
//! Approval (kubernetes `pkg/controller/certificates/approver/sarapprove.go`):
//! a request for signer `kubernetes.io/kube-apiserver-client-kubelet` that
//! passes `ValidateKubeletClientCSR` is approved when
//! - its requester is the node it names (`isSelfNodeClientCert`: the
//!   requester's user is the request's CN, and it is in `system:nodes`): a
//!   renewal; or
//! - its requester is a bootstrapper (`isNodeClientCert`, by a user in
//!   `system:bootstrappers`) and the node it names is one the site's source
//!   lists (the static list, the provider's nodes): a new machine joining.
//!
//! Anything else stays Pending for an operator (`kubectl certificate approve`).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::ByteString;
use tokio_util::sync::CancellationToken;

use super::bootstrap_tokens;
use super::csrs::{self, APPROVED_BY, RESOURCE};
use super::identity::{BOOTSTRAPPERS_GROUP, NODES_GROUP};
use super::AppState;
use crate::certificates::{self, Signer, KUBELET_CLIENT_SIGNER};
use crate::controller::WriteRequest;
use crate::model::{normalize_name, EventKind, Micros, SELF_REGISTERED};
use crate::store::{ApiObject, ApiWriteError, StoreError};

/// How often the task looks without being woken (clean-up, expiry).
const SWEEP_EVERY: Duration = Duration::from_secs(60);
/// The cleaner's deadlines (`pkg/controller/certificates/cleaner/cleaner.go`):
/// approved and issued, denied or failed: an hour; pending: a day.
const HANDLED_KEPT: i64 = 3600 * 1_000_000;
const PENDING_KEPT: i64 = 24 * 3600 * 1_000_000;
/// The approver's messages (sarapprove.go `recognizers`).
pub const SELF_NODE_MESSAGE: &str =
    "Auto approving self kubelet client certificate after SubjectAccessReview.";
pub const NODE_MESSAGE: &str =
    "Auto approving kubelet client certificate after SubjectAccessReview.";

/// Runs until `stop`: approves, signs (with `signer`, if the CA is
/// configured) and cleans up CSRs, and removes expired bootstrap tokens.
pub async fn run(s: AppState, signer: Option<Arc<Signer>>, stop: CancellationToken) {
    let mut changes = s.store.api_changes();
    loop {
        changes.borrow_and_update();
        if let Err(e) = round(&s, signer.as_deref(), Micros::now()).await {
            tracing::error!("handling certificate signing requests failed: {e}; trying again");
        }
        tokio::select! {
            changed = changes.changed() => if changed.is_err() { return },
            _ = tokio::time::sleep(SWEEP_EVERY) => {}
            _ = stop.cancelled() => return,
        }
    }
}

/// One look at every CSR and token. Each write wakes the task again, so a
/// CSR approved here is signed on the next round.
pub async fn round(s: &AppState, signer: Option<&Signer>, now: Micros) -> Result<(), StoreError> {
    let mut wrote = bootstrap_tokens::remove_expired(&s.store, now)? > 0;
    for object in s.store.api_objects(RESOURCE, None)? {
        let Some(csr) = csrs::read(&object) else {
            continue;
        };
        let step = next_step(s, signer, &csr, now);
        let result = match step {
            Step::Nothing => continue,
            Step::Remove(why) => {
                tracing::info!(csr = %object.name, "removing the certificate signing request: {why}");
                s.store
                    .delete_api_object(RESOURCE, "", &object.name, Some(object.version))
                    .map(|_| ())
            }
            Step::Update(csr, issued) => {
                let written = put(s, &object, &csr);
                if let (Ok(()), Some((node, kind))) = (&written, issued) {
                    // Durable first, so the history never names a
                    // certificate its requester could not get.
                    s.store.flush().await?;
                    let name = node.clone();
                    let recorded =
                        s.controller
                            .write(|reply| WriteRequest::Record { name, kind, reply });
                    if let Err(e) = recorded.await {
                        tracing::error!(node, "recording the issued certificate failed: {e}");
                    }
                }
                written
            }
        };
        match result {
            Ok(()) => wrote = true,
            Err(ApiWriteError::Store(e)) => return Err(e),
            // Changed meanwhile: its write woke this task again.
            Err(_) => {}
        }
    }
    if wrote {
        s.store.flush().await?;
    }
    Ok(())
}

fn put(
    s: &AppState,
    object: &ApiObject,
    csr: &CertificateSigningRequest,
) -> Result<(), ApiWriteError> {
    let json = serde_json::to_string(csr).map_err(|e| {
        ApiWriteError::Store(StoreError::Import {
            line: 0,
            reason: e.to_string(),
        })
    })?;
    let next = ApiObject {
        json,
        ..object.clone()
    };
    s.store
        .put_api_object(next, Some(object.version))
        .map(|_| ())
}

/// What a CSR needs now.
enum Step {
    Nothing,
    Remove(&'static str),
    /// Written back; with a node and its history entry when a certificate
    /// was issued.
    Update(Box<CertificateSigningRequest>, Option<(String, EventKind)>),
}

fn condition<'a>(
    list: &'a [CertificateSigningRequestCondition],
    kind: &str,
) -> Option<&'a CertificateSigningRequestCondition> {
    list.iter().find(|c| c.type_ == kind && c.status == "True")
}

fn micros(t: &Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>) -> Option<Micros> {
    t.as_ref().map(|t| Micros(t.0.as_microsecond()))
}

fn next_step(
    s: &AppState,
    signer: Option<&Signer>,
    csr: &CertificateSigningRequest,
    now: Micros,
) -> Step {
    let conditions = csrs::conditions(csr);
    let approved = condition(&conditions, "Approved");
    let handled_at = |c: &CertificateSigningRequestCondition| {
        micros(&c.last_update_time).is_some_and(|t| now.0 - t.0 > HANDLED_KEPT)
    };
    let issued = csr
        .status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty());
    // The cleaner.
    if issued && approved.is_some_and(handled_at) {
        return Step::Remove("issued more than an hour ago");
    }
    for kind in ["Denied", "Failed"] {
        if condition(&conditions, kind).is_some_and(handled_at) {
            return Step::Remove("denied or failed more than an hour ago");
        }
    }
    let created = micros(&csr.metadata.creation_timestamp);
    if !issued && created.is_some_and(|t| now.0 - t.0 > PENDING_KEPT) {
        return Step::Remove("not issued after a day");
    }
    if issued
        || condition(&conditions, "Denied").is_some()
        || condition(&conditions, "Failed").is_some()
    {
        return Step::Nothing;
    }
    if csr.spec.signer_name != KUBELET_CLIENT_SIGNER {
        return Step::Nothing;
    }
    let usages = csr.spec.usages.clone().unwrap_or_default();
    let request = certificates::parse_request(&csr.spec.request.0);
    let checked = request
        .as_ref()
        .map_err(Clone::clone)
        .and_then(|r| certificates::check_kubelet_client(r, &usages).map(|()| r));
    let Some(approved) = approved else {
        // The approver: only requests it recognizes.
        let Ok(request) = checked else {
            return Step::Nothing;
        };
        let Some(message) = approval(s, csr, request) else {
            return Step::Nothing;
        };
        let mut csr = csr.clone();
        add_condition(&mut csr, "Approved", "AutoApproved", message.into(), now);
        tracing::info!(
            csr = csr.metadata.name.as_deref().unwrap_or(""),
            user = csr.spec.username.as_deref().unwrap_or(""),
            "{message}"
        );
        return Step::Update(Box::new(csr), None);
    };
    // The signer: without the CA, approved requests stay unsigned, as upstream.
    let Some(signer) = signer else {
        return Step::Nothing;
    };
    let mut csr = csr.clone();
    let request = match checked {
        Ok(r) => r,
        Err(e) => {
            // csrsigning's answer to a request its signer refuses.
            let message = format!("invalid {KUBELET_CLIENT_SIGNER} certificate request: {e}");
            add_condition(&mut csr, "Failed", "SignerValidationFailure", message, now);
            return Step::Update(Box::new(csr), None);
        }
    };
    let now_time = time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(now.0) * 1000)
        .unwrap_or_else(|_| time::OffsetDateTime::now_utc());
    let issued = match signer.sign(request, &usages, csr.spec.expiration_seconds, now_time) {
        Ok(issued) => issued,
        Err(e) => {
            tracing::error!(csr = csr.metadata.name.as_deref().unwrap_or(""), "{e}");
            return Step::Nothing;
        }
    };
    csr.status.get_or_insert_with(Default::default).certificate =
        Some(ByteString(issued.pem.into_bytes()));
    let node = certificates::node_of(request)
        .map(|n| normalize_name(n).unwrap_or_else(|_| n.to_string()))
        .unwrap_or_default();
    let by = csr
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(APPROVED_BY))
        .cloned();
    let reason = approved.reason.clone().unwrap_or_default();
    let approval = match by {
        Some(user) => format!("approved by {user} ({reason})"),
        None if reason == "AutoApproved" => format!(
            "approved automatically: {}",
            approved.message.clone().unwrap_or_default()
        ),
        None => format!("approved ({reason})"),
    };
    let kind = EventKind::CertificateIssued {
        csr: csr.metadata.name.clone().unwrap_or_default(),
        serial: issued.serial,
        not_after: Micros((issued.not_after.unix_timestamp_nanos() / 1000) as i64),
        requested_by: csr.spec.username.clone().unwrap_or_default(),
        approval,
    };
    tracing::info!(
        node,
        csr = csr.metadata.name.as_deref().unwrap_or(""),
        "client certificate issued"
    );
    Step::Update(Box::new(csr), Some((node, kind)))
}

/// The approver's decision: the message to approve with, or `None` to
/// leave the request for an operator.
fn approval(
    s: &AppState,
    csr: &CertificateSigningRequest,
    request: &certificates::Request,
) -> Option<&'static str> {
    let groups = csr.spec.groups.clone().unwrap_or_default();
    let in_group = |g: &str| groups.iter().any(|x| x == g);
    let username = csr.spec.username.as_deref().unwrap_or("");
    // isSelfNodeClientCert: a node renewing its own certificate.
    if username == request.common_name && in_group(NODES_GROUP) {
        return Some(SELF_NODE_MESSAGE);
    }
    // isNodeClientCert, for bootstrappers, narrowed to the names the
    // site's source lists (a registered node not made by its kubelet).
    if in_group(BOOTSTRAPPERS_GROUP) {
        let name = normalize_name(certificates::node_of(request)?).ok()?;
        let listed = s
            .view
            .with_node(&name, |node, _| node.source != SELF_REGISTERED)
            .unwrap_or(false);
        if listed {
            return Some(NODE_MESSAGE);
        }
        // Every round sees it again: kubectl get csr shows it Pending.
        tracing::debug!(
            node = %name,
            user = username,
            "a bootstrapper asks for a certificate for a node no source lists: it waits for an operator (kubectl certificate approve)"
        );
    }
    None
}

/// Adds a condition of `type_`, true since `now`.
fn add_condition(
    csr: &mut CertificateSigningRequest,
    type_: &str,
    reason: &str,
    message: String,
    now: Micros,
) {
    let at = Some(crate::k8s::time(now));
    let status = csr.status.get_or_insert_with(Default::default);
    status
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: type_.into(),
            status: "True".into(),
            reason: Some(reason.into()),
            message: Some(message),
            last_update_time: at.clone(),
            last_transition_time: at,
        });
}
