//! The API calls that read and write one object: dispatch by method and
//! target, create, replace, patch, and the commit every write ends in.

use hyper::{Method, StatusCode};
use serde_json::{json, Map, Value};

use super::answer::{Answer, ApiError};
use super::delete::deletable;
use super::object::{
    check_identity, check_resource_version, merged, meta_mut, name_suffix, new_uid, object_body,
    parse_json, timestamp,
};
use super::patch::{self, PatchType};
use super::resource::{ObjectKey, Resource};
use super::routing::{Call, Part, Route, Target};
use super::state::State;

impl State {
    pub(super) fn dispatch(&mut self, call: Call<'_>) -> Result<Answer, ApiError> {
        let Route {
            resource,
            namespace,
            target,
        } = call.route;
        let key = |name: String| ObjectKey {
            resource,
            namespace: namespace.clone().unwrap_or_default(),
            name,
        };
        let dry_run = call.query.dry_run();
        match (call.method, target) {
            (&Method::GET, Target::Collection) => {
                self.list(resource, namespace.as_deref(), &call.query)
            }
            (&Method::POST, Target::Collection) => {
                if resource.namespaced() && namespace.is_none() {
                    return Err(ApiError::method_not_allowed());
                }
                let body = parse_json(call.body)?;
                self.create(resource, namespace.as_deref(), body, dry_run)
            }
            (&Method::GET, Target::Object(name) | Target::Status(name)) => {
                let key = key(name);
                let object = self
                    .objects
                    .get(&key)
                    .ok_or_else(|| ApiError::not_found(&key))?;
                Ok(Answer::new(StatusCode::OK, object.clone()))
            }
            (&Method::PUT, Target::Object(name)) => {
                let body = parse_json(call.body)?;
                self.replace(&key(name), body, Part::Main, dry_run)
            }
            (&Method::PUT, Target::Status(name)) => {
                let body = parse_json(call.body)?;
                self.replace(&key(name), body, Part::Status, dry_run)
            }
            (&Method::PATCH, Target::Object(name)) => self.patch(
                &key(name),
                call.content_type,
                call.body,
                Part::Main,
                dry_run,
            ),
            (&Method::PATCH, Target::Status(name)) => self.patch(
                &key(name),
                call.content_type,
                call.body,
                Part::Status,
                dry_run,
            ),
            (&Method::DELETE, Target::Object(name)) => {
                self.delete(&key(name), call.body, &call.query)
            }
            _ => Err(ApiError::method_not_allowed()),
        }
    }

    /// `POST` to a collection.
    pub(super) fn create(
        &mut self,
        resource: Resource,
        namespace: Option<&str>,
        body: Value,
        dry_run: bool,
    ) -> Result<Answer, ApiError> {
        let mut object = object_body(resource, body)?;
        let meta = meta_mut(&mut object);
        let name = created_name(resource, meta)?;
        meta.insert("name".into(), name.clone().into());
        let namespace = created_namespace(namespace, meta)?;
        if meta
            .get("resourceVersion")
            .and_then(Value::as_str)
            .is_some_and(|rv| !rv.is_empty())
        {
            return Err(ApiError::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                "Internal error occurred: resourceVersion should not be set on objects to be \
                 created"
                    .into(),
            ));
        }
        let key = ObjectKey {
            resource,
            namespace,
            name,
        };
        if self.objects.contains_key(&key) {
            return Err(ApiError::already_exists(&key));
        }
        meta.insert("uid".into(), new_uid().into());
        meta.insert("creationTimestamp".into(), timestamp(0).into());
        for field in ["deletionTimestamp", "deletionGracePeriodSeconds"] {
            meta.remove(field);
        }
        if resource == Resource::Pods {
            // Pod creation resets the status; the kubelet reports the rest.
            object.insert("status".into(), json!({"phase": "Pending"}));
        }
        let mut object = Value::Object(object);
        if !dry_run {
            let rv = self.next_resource_version();
            object["metadata"]["resourceVersion"] = rv.into();
            self.node_changed(&key, "ADDED", &object);
            self.objects.insert(key, object.clone());
        }
        Ok(Answer::new(StatusCode::CREATED, object))
    }

    /// The stored object a write to `key` starts from, after any injected conflict.
    fn current_for_write(&mut self, key: &ObjectKey) -> Result<Value, ApiError> {
        let current = self
            .objects
            .get(key)
            .cloned()
            .ok_or_else(|| ApiError::not_found(key))?;
        if let Some(left) = self.conflicts.get_mut(key) {
            *left -= 1;
            if *left == 0 {
                self.conflicts.remove(key);
            }
            return Err(ApiError::conflict(key));
        }
        Ok(current)
    }

    /// `PUT` of an object or its status.
    pub(super) fn replace(
        &mut self,
        key: &ObjectKey,
        body: Value,
        part: Part,
        dry_run: bool,
    ) -> Result<Answer, ApiError> {
        let mut object = object_body(key.resource, body)?;
        check_identity(key, &mut object)?;
        let current = self.current_for_write(key)?;
        let object = Value::Object(object);
        check_resource_version(key, &current, &object)?;
        let new = merged(key.resource, &current, object, part);
        Ok(Answer::new(
            StatusCode::OK,
            self.commit(key, &current, new, dry_run),
        ))
    }

    /// `PATCH` of an object or its status.
    pub(super) fn patch(
        &mut self,
        key: &ObjectKey,
        content_type: &str,
        body: &[u8],
        part: Part,
        dry_run: bool,
    ) -> Result<Answer, ApiError> {
        let media_type = content_type.split(';').next().unwrap_or("").trim();
        let Some(kind) = PatchType::from_media_type(media_type) else {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "UnsupportedMediaType",
                format!(
                    "the body of the request was in an unknown format - accepted media types \
                     include: application/json-patch+json, application/merge-patch+json, \
                     application/strategic-merge-patch+json (got {media_type:?})"
                ),
            ));
        };
        let patch_doc = parse_json(body)?;
        let current = self.current_for_write(key)?;
        let mut patched = current.clone();
        patch::apply(kind, key.resource, &mut patched, &patch_doc)
            .map_err(|e| ApiError::invalid(key, e))?;
        let Value::Object(mut object) = patched else {
            return Err(ApiError::invalid(
                key,
                "the patch made the object not an object",
            ));
        };
        if !matches!(object.get("metadata"), None | Some(Value::Object(_))) {
            return Err(ApiError::invalid(
                key,
                "the patch made metadata not an object",
            ));
        }
        check_identity(key, &mut object)?;
        let object = Value::Object(object);
        check_resource_version(key, &current, &object)?;
        let new = merged(key.resource, &current, object, part);
        Ok(Answer::new(
            StatusCode::OK,
            self.commit(key, &current, new, dry_run),
        ))
    }

    /// Stores `new` over `current` with a new resourceVersion, unless nothing
    /// changed; removes it instead when it was being deleted and nothing holds
    /// it any more. Returns the object as the answer shows it.
    pub(super) fn commit(
        &mut self,
        key: &ObjectKey,
        current: &Value,
        mut new: Value,
        dry_run: bool,
    ) -> Value {
        if new == *current {
            return new;
        }
        if dry_run {
            return new;
        }
        new["metadata"]["resourceVersion"] = self.next_resource_version().into();
        if deletable(key.resource, &new) {
            self.objects.remove(key);
            self.node_changed(key, "DELETED", &new);
        } else {
            self.objects.insert(key.clone(), new.clone());
            self.node_changed(key, "MODIFIED", &new);
        }
        new
    }
}

/// The name a created object gets: its own, or its `generateName` with a
/// random suffix.
fn created_name(resource: Resource, meta: &Map<String, Value>) -> Result<String, ApiError> {
    match meta.get("name").and_then(Value::as_str) {
        Some(name) if !name.is_empty() => Ok(name.to_owned()),
        _ => match meta.get("generateName").and_then(Value::as_str) {
            Some(prefix) if !prefix.is_empty() => Ok(format!("{prefix}{}", name_suffix())),
            _ => Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Invalid",
                format!(
                    "{} \"\" is invalid: metadata.name: Required value: name or \
                     generateName is required",
                    resource.kind()
                ),
            )),
        },
    }
}

/// The namespace a created object lands in: the URL's, which the body may
/// repeat but not contradict; none for cluster-scoped objects.
fn created_namespace(
    namespace: Option<&str>,
    meta: &mut Map<String, Value>,
) -> Result<String, ApiError> {
    let Some(ns) = namespace else {
        meta.remove("namespace");
        return Ok(String::new());
    };
    if meta
        .get("namespace")
        .and_then(Value::as_str)
        .is_some_and(|given| !given.is_empty() && given != ns)
    {
        return Err(ApiError::bad_request(
            "the namespace of the provided object does not match the namespace sent on the \
             request",
        ));
    }
    meta.insert("namespace".into(), ns.into());
    Ok(ns.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::test_support::*;

    #[tokio::test]
    async fn create_get_and_already_exists() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        let created = nodes
            .create(&PostParams::default(), &node("n1"))
            .await
            .expect("create");
        assert!(created.metadata.uid.is_some());
        assert!(created.metadata.creation_timestamp.is_some());
        assert_eq!(rv(&created.metadata), server.resource_version());
        // Nodes keep the status they are created with, as kubelets register them.
        assert_eq!(
            server.node("n1").expect("stored")["status"]["conditions"][0]["type"],
            "Ready"
        );

        let got = nodes.get("n1").await.expect("get");
        assert_eq!(got.metadata.uid, created.metadata.uid);
        assert_eq!(
            got.metadata.resource_version,
            created.metadata.resource_version
        );

        let err = api_error(nodes.create(&PostParams::default(), &node("n1")).await);
        assert_eq!((err.code, err.reason.as_str()), (409, "AlreadyExists"));
        assert_eq!(err.message, r#"nodes "n1" already exists"#);

        let err = api_error(nodes.get("missing").await);
        assert_eq!((err.code, err.reason.as_str()), (404, "NotFound"));
        assert_eq!(err.message, r#"nodes "missing" not found"#);
        assert_eq!(err.details.expect("details").name, "missing");
        assert!(nodes.get_opt("missing").await.expect("get_opt").is_none());
    }

    #[tokio::test]
    async fn replace_with_a_stale_resource_version_conflicts() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        let pp = PostParams::default();
        let created = nodes.create(&pp, &node("n1")).await.expect("create");

        let mut labelled = created.clone();
        labelled.labels_mut().insert("x".into(), "1".into());
        let replaced = nodes.replace("n1", &pp, &labelled).await.expect("replace");
        assert!(rv(&replaced.metadata) > rv(&created.metadata));
        assert_eq!(replaced.labels().get("x").map(String::as_str), Some("1"));

        // `created` still carries the old resourceVersion.
        let err = api_error(nodes.replace("n1", &pp, &created).await);
        assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));
        assert_eq!(
            err.message,
            r#"Operation cannot be fulfilled on nodes "n1": the object has been modified; please apply your changes to the latest version and try again"#
        );

        // Without a resourceVersion the update is unconditional.
        let mut blind = created.clone();
        blind.metadata.resource_version = None;
        let replaced = nodes
            .replace("n1", &pp, &blind)
            .await
            .expect("unconditional replace");
        assert!(!replaced.labels().contains_key("x"));
        // The uid and creation time are the server's, whatever the body says.
        assert_eq!(replaced.metadata.uid, created.metadata.uid);

        let err = api_error(nodes.replace("missing", &pp, &node("missing")).await);
        assert_eq!(err.code, 404);
    }

    #[tokio::test]
    async fn patch_status_merges_conditions_by_type_and_leaves_spec_alone() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.put_node(node_json("n1"));

        let patch = json!({
            "spec": {"podCIDR": "10.9.9.0/24"},
            "metadata": {"labels": {"ignored": "yes"}},
            "status": {"conditions": [
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown"}
            ]}
        });
        nodes
            .patch_status("n1", &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .expect("patch_status");
        let stored = server.node("n1").expect("stored");
        assert_eq!(
            stored["status"]["conditions"],
            json!([
                {"type": "Ready", "status": "Unknown", "reason": "NodeStatusUnknown",
                 "lastHeartbeatTime": "2025-01-01T00:00:00Z"},
                {"type": "MemoryPressure", "status": "False"}
            ])
        );
        assert_eq!(
            stored["status"]["addresses"],
            json!([{"type": "InternalIP", "address": "10.0.0.1"}])
        );
        assert_eq!(stored["spec"]["podCIDR"], "10.0.0.0/24");
        assert_eq!(stored["metadata"]["labels"], json!({"site": "a"}));

        // spec.taints has no merge key: a strategic patch replaces it whole.
        let taints = json!({"spec": {"taints": [{"key": "b", "effect": "NoExecute"}]}});
        nodes
            .patch("n1", &PatchParams::default(), &Patch::Strategic(&taints))
            .await
            .expect("patch taints");
        assert_eq!(
            server.node("n1").expect("stored")["spec"]["taints"],
            json!([{"key": "b", "effect": "NoExecute"}])
        );
    }

    #[tokio::test]
    async fn main_resource_writes_ignore_status_and_status_writes_ignore_the_rest() {
        let server = FakeApiServer::start().await;
        let nodes: Api<Node> = Api::all(client(&server));
        server.put_node(node_json("n1"));
        let before = server.node("n1").expect("stored");

        let patch = json!({"metadata": {"labels": {"a": "b"}}, "status": {"conditions": []}});
        nodes
            .patch("n1", &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .expect("patch");
        let stored = server.node("n1").expect("stored");
        assert_eq!(stored["metadata"]["labels"]["a"], "b");
        assert_eq!(stored["status"], before["status"]);

        let mut n = nodes.get("n1").await.expect("get");
        n.labels_mut().insert("c".into(), "d".into());
        n.spec.get_or_insert_default().unschedulable = Some(true);
        if let Some(conditions) = n.status.as_mut().and_then(|s| s.conditions.as_mut()) {
            conditions[0].status = "False".into();
        }
        nodes
            .replace_status("n1", &PostParams::default(), &n)
            .await
            .expect("replace_status");
        let stored = server.node("n1").expect("stored");
        assert_eq!(stored["status"]["conditions"][0]["status"], "False");
        assert!(stored["metadata"]["labels"].get("c").is_none());
        assert!(stored["spec"].get("unschedulable").is_none());
    }

    #[tokio::test]
    async fn lease_create_and_replace() {
        let server = FakeApiServer::start().await;
        let leases: Api<Lease> = Api::namespaced(client(&server), "kube-node-lease");
        let lease: Lease = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {
                "holderIdentity": "n1",
                "leaseDurationSeconds": 40,
                "renewTime": "2025-01-01T00:00:00.000000Z"
            }
        }))
        .expect("a valid Lease");
        let pp = PostParams::default();
        let created = leases.create(&pp, &lease).await.expect("create");
        assert_eq!(
            created.metadata.namespace.as_deref(),
            Some("kube-node-lease")
        );
        let stored = server.lease("kube-node-lease", "n1").expect("stored");
        assert_eq!(stored["spec"]["holderIdentity"], "n1");
        assert_eq!(stored["apiVersion"], "coordination.k8s.io/v1");

        let mut renewed = created.clone();
        renewed.spec.get_or_insert_default().lease_duration_seconds = Some(41);
        leases.replace("n1", &pp, &renewed).await.expect("replace");
        assert_eq!(
            server.lease("kube-node-lease", "n1").expect("stored")["spec"]["leaseDurationSeconds"],
            41
        );

        let err = api_error(leases.replace("n1", &pp, &created).await);
        assert_eq!(err.code, 409);
        assert!(
            err.message
                .starts_with(r#"Operation cannot be fulfilled on leases.coordination.k8s.io "n1""#),
            "{}",
            err.message
        );
        // Leases have no status subresource.
        let err = api_error(
            raw(
                &client(&server),
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n1/status",
                "application/json",
                Vec::new(),
            )
            .await,
        );
        assert_eq!(err.code, 404);
    }

    #[tokio::test]
    async fn patches_and_malformed_requests() {
        let server = FakeApiServer::start().await;
        let c = client(&server);
        server.put_node(node_json("n1"));
        let path = "/api/v1/nodes/n1";

        let ops = json!([
            {"op": "replace", "path": "/metadata/labels/site", "value": "b"},
            {"op": "add", "path": "/spec/unschedulable", "value": true},
            {"op": "remove", "path": "/spec/taints/0"}
        ]);
        raw(
            &c,
            "PATCH",
            path,
            "application/json-patch+json",
            ops.to_string().into_bytes(),
        )
        .await
        .expect("JSON patch");
        let stored = server.node("n1").expect("stored");
        assert_eq!(stored["metadata"]["labels"]["site"], "b");
        assert_eq!(stored["spec"]["unschedulable"], true);
        assert_eq!(stored["spec"]["taints"], json!([]));

        // A failed test operation changes nothing.
        let rv = server.resource_version();
        let ops = json!([
            {"op": "replace", "path": "/metadata/labels/site", "value": "c"},
            {"op": "test", "path": "/metadata/labels/site", "value": "z"}
        ]);
        let err = api_error(
            raw(
                &c,
                "PATCH",
                path,
                "application/json-patch+json",
                ops.to_string().into_bytes(),
            )
            .await,
        );
        assert_eq!((err.code, err.reason.as_str()), (422, "Invalid"));
        assert_eq!(
            server.node("n1").expect("stored")["metadata"]["labels"]["site"],
            "b"
        );

        // A patch that changes nothing keeps the resourceVersion.
        let same = json!({"metadata": {"labels": {"site": "b"}}}).to_string();
        raw(
            &c,
            "PATCH",
            path,
            "application/merge-patch+json",
            same.into_bytes(),
        )
        .await
        .expect("no-op patch");
        assert_eq!(server.resource_version(), rv);

        // A resourceVersion in the patch is a precondition.
        let stale = json!({"metadata": {"resourceVersion": "1", "labels": {"x": "y"}}}).to_string();
        let err = api_error(
            raw(
                &c,
                "PATCH",
                path,
                "application/merge-patch+json",
                stale.into_bytes(),
            )
            .await,
        );
        assert_eq!((err.code, err.reason.as_str()), (409, "Conflict"));

        let err = api_error(
            raw(
                &c,
                "PATCH",
                path,
                "application/apply-patch+yaml",
                b"{}".to_vec(),
            )
            .await,
        );
        assert_eq!(err.code, 415);
        let err = api_error(
            raw(
                &c,
                "PUT",
                path,
                "application/json",
                b"{\"metadata\": ".to_vec(),
            )
            .await,
        );
        assert_eq!((err.code, err.reason.as_str()), (400, "BadRequest"));
        let err = api_error(
            raw(
                &c,
                "POST",
                "/api/v1/nodes",
                "application/json",
                vec![b' '; BODY_LIMIT + 1],
            )
            .await,
        );
        assert_eq!(err.code, 413);
        let err = api_error(raw(&c, "GET", "/api/v1/services", "", Vec::new()).await);
        assert_eq!(err.code, 404);
        let err = api_error(raw(&c, "DELETE", "/api/v1/nodes", "", Vec::new()).await);
        assert_eq!(err.code, 405);
        let pod = pod_json("other", "p", None, "web").to_string();
        let err = api_error(
            raw(
                &c,
                "POST",
                "/api/v1/namespaces/default/pods",
                "application/json",
                pod.into_bytes(),
            )
            .await,
        );
        assert_eq!(err.code, 400);
    }
}
