//! Deletes: preconditions, finalizers, and a bound pod's graceful deletion
//! (it stays, marked, until its kubelet deletes it with a zero grace period).

use hyper::StatusCode;
use serde_json::{json, Map, Value};

use super::answer::{details, Answer, ApiError};
use super::object::{meta_str, parse_json, timestamp};
use super::resource::{ObjectKey, Resource};
use super::routing::Query;
use super::state::State;

/// A pod's grace period when neither the delete nor the pod names one.
const DEFAULT_POD_GRACE_SECONDS: i64 = 30;

impl State {
    /// `DELETE` of an object, with optional `DeleteOptions` in the body.
    pub(super) fn delete(
        &mut self,
        key: &ObjectKey,
        body: &[u8],
        query: &Query,
    ) -> Result<Answer, ApiError> {
        let current = self
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(key))?;
        let options = if body.iter().all(u8::is_ascii_whitespace) {
            Value::Object(Map::new())
        } else {
            parse_json(body)?
        };
        if !options.is_object() {
            return Err(ApiError::bad_request("DeleteOptions must be an object"));
        }
        check_preconditions(key, &current, &options)?;
        let dry_run = query.dry_run()
            || options
                .get("dryRun")
                .and_then(Value::as_array)
                .is_some_and(|d| d.iter().any(|v| v == "All"));
        let requested = options
            .get("gracePeriodSeconds")
            .and_then(Value::as_i64)
            .or_else(|| query.get("gracePeriodSeconds")?.parse().ok());
        let grace = match key.resource {
            Resource::Pods => pod_grace(&current, requested),
            _ => 0,
        };
        if grace == 0 && !has_finalizers(&current) {
            if !dry_run {
                self.remove(key);
            }
            let body = if key.resource.returns_deleted_object() {
                current
            } else {
                json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": details(key, meta_str(&current, "uid")),
                })
            };
            return Ok(Answer::new(StatusCode::OK, body));
        }
        // Graceful: mark it; its kubelet (or finalizers' owners) finish the job.
        let mut new = current.clone();
        let meta = new
            .get_mut("metadata")
            .and_then(Value::as_object_mut)
            .ok_or_else(|| ApiError::invalid(key, "stored object has no metadata"))?;
        let marked_grace = meta
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64);
        let shorten = match marked_grace {
            None => !meta.contains_key("deletionTimestamp"),
            Some(old) => grace < old,
        };
        if shorten {
            meta.insert("deletionTimestamp".into(), timestamp(grace).into());
            meta.insert("deletionGracePeriodSeconds".into(), grace.into());
        }
        let new = self.commit(key, &current, new, dry_run);
        Ok(Answer::new(StatusCode::OK, new))
    }
}

/// `DeleteOptions.preconditions`: `uid` and `resourceVersion` must match.
fn check_preconditions(key: &ObjectKey, current: &Value, options: &Value) -> Result<(), ApiError> {
    let Some(pre) = options.get("preconditions") else {
        return Ok(());
    };
    for (field, label) in [("uid", "UID"), ("resourceVersion", "ResourceVersion")] {
        if let Some(want) = pre.get(field).and_then(Value::as_str) {
            let have = meta_str(current, field).unwrap_or("");
            if want != have {
                return Err(ApiError::conflict_because(
                    key,
                    &format!(
                        "Precondition failed: {label} in precondition: {want}, {label} in \
                         object meta: {have}"
                    ),
                ));
            }
        }
    }
    Ok(())
}

fn has_finalizers(object: &Value) -> bool {
    object
        .get("metadata")
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// Whether an object being deleted may go now: no finalizers left, and for a
/// pod, its grace period is over (set to zero by its kubelet).
pub(super) fn deletable(resource: Resource, object: &Value) -> bool {
    let Some(meta) = object.get("metadata") else {
        return false;
    };
    if meta.get("deletionTimestamp").is_none() || has_finalizers(object) {
        return false;
    }
    resource != Resource::Pods
        || meta
            .get("deletionGracePeriodSeconds")
            .and_then(Value::as_i64)
            == Some(0)
}

/// A pod's grace period, as pod storage works it out: zero for pods never
/// bound to a node or already finished, else the request's, else the pod's
/// `terminationGracePeriodSeconds`, else 30 seconds.
fn pod_grace(pod: &Value, requested: Option<i64>) -> i64 {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !bound || finished {
        return 0;
    }
    requested
        .or_else(|| {
            pod.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(DEFAULT_POD_GRACE_SECONDS)
        .max(0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::test_support::*;

    #[tokio::test]
    async fn deletes_answer_as_the_api_server_does() {
        let server = FakeApiServer::start().await;
        let c = client(&server);
        let nodes: Api<Node> = Api::all(c.clone());
        let pods: Api<Pod> = Api::namespaced(c, "default");
        server.put_node(node_json("n1"));

        let status = nodes
            .delete("n1", &DeleteParams::default())
            .await
            .expect("delete")
            .right()
            .expect("a Status for a node");
        assert_eq!(status.details.expect("details").name, "n1");
        assert!(server.node("n1").is_none());
        assert_eq!(
            api_error(nodes.delete("n1", &DeleteParams::default()).await).code,
            404
        );

        // A pod bound to a node is deleted gracefully: it stays, terminating.
        server.put_pod(pod_json("default", "p1", Some("n1"), "web"));
        let pod = pods
            .delete("p1", &DeleteParams::default())
            .await
            .expect("delete")
            .left()
            .expect("the pod");
        assert!(pod.metadata.deletion_timestamp.is_some());
        assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(30));
        assert!(server.pod("default", "p1").is_some());
        // Its kubelet's final delete removes it.
        let zero = DeleteParams {
            grace_period_seconds: Some(0),
            ..DeleteParams::default()
        };
        pods.delete("p1", &zero).await.expect("final delete");
        assert!(server.pod("default", "p1").is_none());

        // An unscheduled pod goes at once; preconditions are checked.
        let stored = server.put_pod(pod_json("default", "u", None, "web"));
        let wrong_uid = DeleteParams {
            preconditions: Some(::kube::api::Preconditions {
                uid: Some("not-it".into()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let err = api_error(pods.delete("u", &wrong_uid).await);
        assert_eq!(err.code, 409);
        assert!(
            err.message.contains("Precondition failed"),
            "{}",
            err.message
        );
        let pod = pods
            .delete("u", &DeleteParams::default())
            .await
            .expect("delete")
            .left()
            .expect("the pod");
        assert_eq!(pod.metadata.uid.as_deref(), meta_str(&stored, "uid"));
        assert!(server.pods().is_empty());
    }
}
