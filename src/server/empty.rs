//! Resources a kubelet lists and watches that nodekeeper keeps nothing of:
//! Services, CSIDrivers and RuntimeClasses. Each is answered as
//! kube-apiserver answers a resource with no objects: an empty list with
//! the current resourceVersion, field selectors checked against the
//! resource's own, and a watch that streams bookmarks (with
//! `allowWatchBookmarks`) until its timeout, from any version the history
//! still holds. A kubelet's reflectors then sync and stay quiet instead of
//! failing every 30–60 s (client-go `tools/cache/reflector.go`).
//!
//! Who lists them (kubernetes, v1.33): services `pkg/kubelet/kubelet.go:538-546`
//! (`spec.clusterIP!=None`); CSIDrivers `pkg/kubelet/volume_host.go:70-73`;
//! RuntimeClasses `pkg/kubelet/runtimeclass/runtimeclass_manager.go:38-39`.
//! Pods are kept (the mirror pods, `super::pods`).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};

use super::params::ListParams;
use super::{bad_request, not_found, Answer, AppState};

/// A resource served empty.
pub(crate) struct Empty {
    pub api_version: &'static str,
    pub kind: &'static str,
    /// As errors name it (`services`, `csidrivers.storage.k8s.io`).
    pub resource: &'static str,
    /// The fields it can be selected by, as in kube-apiserver.
    pub fields: &'static [&'static str],
}

/// Services: kube-apiserver's selectable fields
/// (`pkg/registry/core/service/strategy.go` `SelectableFields`).
pub(crate) const SERVICES: Empty = Empty {
    api_version: "v1",
    kind: "Service",
    resource: "services",
    fields: &[
        "metadata.name",
        "metadata.namespace",
        "spec.clusterIP",
        "spec.type",
    ],
};

pub(crate) const CSI_DRIVERS: Empty = Empty {
    api_version: "storage.k8s.io/v1",
    kind: "CSIDriver",
    resource: "csidrivers.storage.k8s.io",
    fields: &["metadata.name"],
};

pub(crate) const RUNTIME_CLASSES: Empty = Empty {
    api_version: "node.k8s.io/v1",
    kind: "RuntimeClass",
    resource: "runtimeclasses.node.k8s.io",
    fields: &["metadata.name"],
};

impl Empty {
    /// The resource's routes: each of `lists` serves a list or a watch,
    /// `one` a get (never found).
    pub fn routes(&'static self, lists: &[&str], one: &str) -> Router<AppState> {
        let list = get(
            move |State(s): State<AppState>, query: Result<Query<ListParams>, QueryRejection>| {
                self.list(s, query)
            },
        );
        let get_one = get(move |Path(path): Path<Vec<String>>| async move {
            not_found(self.resource, path.last().map_or("", String::as_str))
        });
        let routes = Router::new().route(one, get_one);
        lists
            .iter()
            .fold(routes, |routes, path| routes.route(path, list.clone()))
    }

    /// A list or a watch of the resource.
    async fn list(
        &'static self,
        s: AppState,
        params: Result<Query<ListParams>, QueryRejection>,
    ) -> Answer {
        let (params, watch) = ListParams::list(params)?;
        if watch {
            return self.watch(s, &params).await;
        }
        params.query(self.fields).map_err(bad_request)?;
        let version = s.store.durable_seq();
        let list = crate::k8s::list(self.api_version, self.kind, version, Vec::new());
        Ok(Json(list).into_response())
    }

    async fn watch(&'static self, s: AppState, params: &ListParams) -> Answer {
        let request = super::watch::watch_request(params, self.fields)?;
        // The history's versions, with no object of this resource in it.
        let watch = super::watch::WatchParams {
            resource_version: params.resource_version.clone(),
            timeout: request.timeout,
            bookmarks: request.bookmarks,
            filter: Some(std::sync::Arc::new(|_: &crate::model::Node| false)),
            scope: super::watch::Scope::Nothing,
            render: None,
            kind: Some((self.api_version, self.kind)),
        };
        super::watch::watch_nodes(s, watch).await
    }
}
