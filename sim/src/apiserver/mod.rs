//! An in-process fake Kubernetes API server for Nodes, Leases and Pods, with
//! fault injection and a request log, for testing clients that write to a
//! real API server through the `kube` crate (nodekeeper's mirror).
//!
//! [`FakeApiServer::start`] listens on `127.0.0.1:0` over plain HTTP/1.1 and
//! serves the real REST paths:
//!
//! - `/api/v1/nodes`, `/api/v1/nodes/{name}`, `/api/v1/nodes/{name}/status`
//! - `/apis/coordination.k8s.io/v1/leases` (list only),
//!   `/apis/coordination.k8s.io/v1/namespaces/{ns}/leases`, `.../leases/{name}`
//! - `/api/v1/pods` (list only), `/api/v1/namespaces/{ns}/pods`,
//!   `.../pods/{name}`, `.../pods/{name}/status`
//!
//! # What it keeps of the real API server
//!
//! - One global, increasing `resourceVersion`, set on every write of every
//!   object; lists carry the current one in `metadata.resourceVersion`. A write
//!   that changes nothing (a no-op update or patch) keeps the object's
//!   `resourceVersion`, as etcd3 storage does.
//! - `metadata.uid` and `creationTimestamp` set on create and kept by updates,
//!   as are the name, namespace and deletion fields. `generateName` works.
//!   Creating with `metadata.resourceVersion` set fails (500), as it does there.
//! - Errors are `Status` objects with the real codes, reasons and messages:
//!   409 `AlreadyExists` on create of an existing name, 404 `NotFound`, 409
//!   `Conflict` on a stale `resourceVersion` (in a PUT body, in the object a
//!   patch produces, or in delete preconditions), 400 `BadRequest` for
//!   malformed JSON, name or namespace mismatches and unsupported selectors,
//!   413 for bodies over [`BODY_LIMIT`], 415 for patch types it does not apply,
//!   422 `Invalid` for patches that cannot be applied, 405 for methods a path
//!   does not take.
//! - PUT without a `resourceVersion` is an unconditional update (nodes, pods
//!   and leases allow it); neither PUT nor PATCH creates a missing object.
//! - The `/status` subresource of nodes and pods: writes there change only
//!   `.status`; writes to the main resource leave `.status` as it was.
//!   Leases have no status subresource.
//! - Patches: JSON merge patch (RFC 7386), JSON patch (RFC 6902) and
//!   strategic merge patch with the patch strategies of the Node and Pod
//!   types: `conditions` and `addresses` by `type`, containers, volumes and
//!   env by `name`, `finalizers` and `podCIDRs` as sets, and so on; every
//!   other list, `spec.taints` included, is replaced whole. Its directives
//!   (`$patch`, `$retainKeys`, `$setElementOrder`, `$deleteFromPrimitiveList`)
//!   work, and merged lists take the order the API server gives them.
//!   `application/apply-patch+yaml` (server-side apply) is refused.
//! - Lists: `labelSelector` (the full grammar), `fieldSelector` with the
//!   field labels each resource supports (`metadata.name`, `spec.nodeName`,
//!   `status.phase`, ...; others are 400 `field label not supported`),
//!   `limit` and `continue`.
//! - Deletes: nodes and leases answer a success `Status`, pods the deleted
//!   pod. A pod bound to a node (and not finished) is deleted gracefully: it
//!   gets `deletionTimestamp` and `deletionGracePeriodSeconds` and stays until
//!   it is deleted with a zero grace period (what its kubelet would do) —
//!   so with no kubelet it stays, as on a real cluster with a dead node.
//!   Objects with finalizers stay until an update empties them. Delete
//!   preconditions (`uid`, `resourceVersion`) are checked.
//! - `dryRun=All` answers as a write would but stores nothing.
//! - Watch of nodes (`GET /api/v1/nodes?watch=true`): `ADDED`, `MODIFIED`
//!   and `DELETED` events after the given `resourceVersion`, from a bounded
//!   history ([`FakeApiServer::set_watch_history`]); a version older than
//!   the history is answered with an `ERROR` event 410 `Expired` ("too old
//!   resource version"), one newer than the server's with 504 "Too large
//!   resource version", both as the API server does. No version (or `0`)
//!   starts with an `ADDED` event per node. `BOOKMARK` events with
//!   `allowWatchBookmarks=true`, every [`FakeApiServer::set_bookmark_interval`];
//!   `timeoutSeconds` ends the watch cleanly; selectors filter the events.
//!   A watcher that falls too far behind is ended with a 410 `ERROR` event.
//!
//! # What it does not keep
//!
//! No watch of leases and pods, protobuf, server-side apply, authentication or authorization
//! (any credentials are accepted), admission, defaulting (beyond a created
//! pod's status starting `Pending`), validation of the objects' contents,
//! `managedFields`, `generation`, namespaces as objects (any namespace
//! exists), `resourceVersion` semantics on reads, or consistent snapshots
//! across `continue` pages (each page reads the current state). Errors
//! answer with a status code and `Status` only; there are no warnings.
//!
//! # Faults and inspection
//!
//! [`FakeApiServer::set_fault`] makes every request fail with a status code,
//! answer late, or be refused at the TCP level ([`Fault::Down`] closes the
//! listener and every open connection, then listens again on the same port
//! when the fault changes); [`FakeApiServer::set_fault_for`] limits a fault
//! to one resource; [`Fault::Throttled`] answers 429 as API Priority and
//! Fairness does (plain text and a `Retry-After` header).
//! [`FakeApiServer::conflict_next`] makes the next writes to one object fail
//! with 409 Conflict. [`FakeApiServer::restart_empty`] restarts the server on
//! the same port with nothing stored and resourceVersions starting over (a
//! restore from an empty backup); [`FakeApiServer::wipe`] deletes every
//! object in place; [`FakeApiServer::compact`] forgets the watch history and
//! ends every watch with 410 Gone; [`FakeApiServer::stall_watches`] holds
//! watch events back, as a half-open connection would. Objects are read and seeded directly
//! ([`FakeApiServer::node`], [`FakeApiServer::put_pod`], ...), and every
//! answered request is logged ([`FakeApiServer::requests`]).
//!
//! # Layout
//!
//! One state behind one lock (`state`), changed by one request path:
//! `connection` accepts and reads a request, `routing` names what it asks
//! for, `api`, `list` and `delete` answer it (with `object` for the
//! objects' shape, `patch` and `strategic` for patches, `selectors` for
//! lists and watches), and `answer` words it. Node watches are `watch`; the
//! handle tests hold is `handle`, and what it can break is `faults`. None of
//! it uses nodekeeper's own Kubernetes code, so the mirror's tests check
//! nodekeeper against an independent reading of kube-apiserver.

#[cfg(test)]
mod agreement;
mod answer;
mod api;
mod connection;
mod delete;
mod faults;
mod handle;
mod list;
mod object;
mod patch;
mod resource;
mod routing;
mod selectors;
mod state;
mod strategic;
#[cfg(test)]
mod test_support;
mod watch;

pub use faults::Fault;
pub use handle::{FakeApiServer, Request};
pub use resource::{ObjectKey, Resource};

/// The largest request body accepted; larger ones are answered 413.
pub const BODY_LIMIT: usize = 4 << 20;
