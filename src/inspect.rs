//! Inspection commands (`nodes`, `describe`, `history`, `at`, `db status`)
//! and operator writes (`cordon`, `label`, `taint`, `delete`): a stopped
//! store directly, or a running controller through its HTTP API, without
//! the user having to say which. Writes take the same path either way: the
//! API's checks ([`crate::server::node_writes::prepare`]) and the
//! controller's fold ([`crate::controller::operator`]).
//!
//! Each command is one method of [`Source`], its stopped-store and
//! running-controller answers side by side so that the two answer alike.

use std::path::Path;
use std::time::Duration;

use thiserror::Error;

use crate::discovery::Discovery;
use crate::model::{Event, Micros, Node};
use crate::server::{HistoryParams, NodeEntry};
use crate::store::RegistryAt;
use crate::store::{HistoryQuery, Store, StoreError, StoreOptions, StoreStatus};

/// What the CLI will read from a controller at most.
const RESPONSE_CAP: usize = 512 << 20;
const HTTP_TIMEOUT: Duration = Duration::from_secs(30);
/// The largest backup the CLI takes from a controller.
pub const BACKUP_CAP: u64 = 1 << 40;

#[derive(Debug, Error)]
pub enum InspectError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "no store at {0}: start the controller with `nodekeeper run --db {0}`, or pass --db PATH"
    )]
    NoStore(String),
    #[error("the controller at {url} did not answer: {reason}")]
    Remote { url: String, reason: String },
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Gone(String),
    /// A write refused for the node's state (a 409: a stale version, or a
    /// source that still lists the node).
    #[error("{0}")]
    Conflict(String),
    /// The controller wants a token (`--token`) or an operator's one.
    #[error("{0}")]
    Forbidden(String),
    #[error(
        "the store at {0} is read-only to this user (it was read from a copy): make the change as \
         the store's owner (the controller's user, or root), or through the running controller"
    )]
    ReadOnly(String),
}

impl From<crate::controller::PushError> for InspectError {
    fn from(e: crate::controller::PushError) -> Self {
        use crate::controller::PushError as P;
        match e {
            P::NotFound { name, .. } => InspectError::NotFound(format!(
                "node {name:?} not found; `nodekeeper nodes` lists the registry"
            )),
            P::Store(e) => InspectError::Store(e),
            e @ (P::Conflict { .. }
            | P::PreconditionFailed(_)
            | P::StillListed(_)
            | P::AlreadyExists { .. }) => InspectError::Conflict(e.to_string()),
            P::Forbidden(m) => InspectError::Forbidden(m),
            e => InspectError::Invalid(e.to_string()),
        }
    }
}

impl From<crate::server::node_writes::WriteError> for InspectError {
    fn from(e: crate::server::node_writes::WriteError) -> Self {
        use crate::server::node_writes::WriteError as W;
        match e {
            W::Conflict(m) => InspectError::Conflict(m),
            e => InspectError::Invalid(e.to_string()),
        }
    }
}

/// What a GET found.
enum Answer<T> {
    Found(T),
    NotFound(String),
}

/// Events read per page, locally or over HTTP.
const PAGE: usize = 1000;

/// A running controller's account of itself, as `/v1/console` gives it.
#[derive(Debug, Clone, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ControllerAbout {
    pub version: String,
    pub git_commit: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<String>,
}

/// A place to read the registry from.
// One per command: the size of the local store's handle does not matter.
#[allow(clippy::large_enum_variant)]
pub enum Source {
    Local(Store),
    Remote {
        base: String,
        client: reqwest::Client,
        /// `--token`, sent as a bearer token.
        token: Option<String>,
    },
}

impl Source {
    /// Opens the store at `db`; if a running controller holds it, talks to
    /// that controller instead. `server` forces the HTTP way.
    pub fn open(db: &Path, server: Option<&str>) -> Result<Source, InspectError> {
        Source::open_with_token(db, server, None)
    }

    /// [`Source::open`], presenting `token` to a controller that needs one
    /// (`run --token-file`).
    pub fn open_with_token(
        db: &Path,
        server: Option<&str>,
        token: Option<&str>,
    ) -> Result<Source, InspectError> {
        if let Some(url) = server {
            return Source::remote(url, None, token);
        }
        crate::store::compact::check_path(db).map_err(StoreError::from)?;
        if !crate::store::is_there(db)? {
            return Err(InspectError::NoStore(db.display().to_string()));
        }
        match Store::open_for_reading(
            db,
            &StoreOptions {
                cache_capacity: 16 << 20,
                ..StoreOptions::default()
            },
        ) {
            Ok(store) => {
                if store.is_copy() {
                    // What the user reads is as it was now; a large store takes a while to copy.
                    eprintln!(
                        "note: this user may read the store at {} but not write it: reading a copy of it ({:.1} MiB in {})",
                        db.display(),
                        store.size_on_disk() as f64 / (1u64 << 20) as f64,
                        std::env::temp_dir().display()
                    );
                }
                Ok(Source::Local(store))
            }
            Err(StoreError::Locked { path }) => match Discovery::read(&path) {
                Some(found) => Source::remote(&found.url, found.ca_file.as_deref(), token),
                None => Err(StoreError::Locked { path }.into()),
            },
            Err(e) => Err(e.into()),
        }
    }

    /// A client for `url`; with `ca_file` (the controller's serving
    /// certificate, from its discovery file) it trusts that and nothing else.
    fn remote(
        url: &str,
        ca_file: Option<&Path>,
        token: Option<&str>,
    ) -> Result<Source, InspectError> {
        let failed = |reason: String| InspectError::Remote {
            url: url.to_string(),
            reason,
        };
        let mut builder = reqwest::Client::builder()
            .user_agent(concat!("nodekeeper/", env!("CARGO_PKG_VERSION")))
            .no_proxy()
            .timeout(HTTP_TIMEOUT)
            .connect_timeout(Duration::from_secs(5));
        if let Some(token) = token.map(str::trim).filter(|t| !t.is_empty()) {
            let mut value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| {
                    failed(
                        "the token cannot travel in an HTTP header (it holds control characters)"
                            .into(),
                    )
                })?;
            value.set_sensitive(true);
            let headers =
                reqwest::header::HeaderMap::from_iter([(reqwest::header::AUTHORIZATION, value)]);
            builder = builder.default_headers(headers);
        }
        if let Some(path) = ca_file {
            // Read once while a one-shot command opens its source.
            #[allow(clippy::disallowed_methods)]
            let certs = std::fs::read(path)
                .map_err(|e| e.to_string())
                .and_then(|pem| {
                    reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| e.to_string())
                })
                .map_err(|e| {
                    failed(format!(
                        "cannot use its certificate {} (caFile in {}): {e}",
                        path.display(),
                        Discovery::FILE
                    ))
                })?;
            builder = builder.tls_certs_only(certs);
        }
        let client = builder.build().map_err(|e| failed(e.to_string()))?;
        Ok(Source::Remote {
            base: url.trim_end_matches('/').to_string(),
            client,
            token: None,
        })
    }

    /// Sends `token` with every request to a running controller.
    pub fn with_token(mut self, token: Option<String>) -> Source {
        if let Source::Remote { token: slot, .. } = &mut self {
            *slot = token;
        }
        self
    }

    /// Whether this reads through a running controller.
    pub fn is_remote(&self) -> bool {
        matches!(self, Source::Remote { .. })
    }

    async fn get<T: serde::de::DeserializeOwned>(
        &self,
        path_and_query: &str,
    ) -> Result<Option<T>, InspectError> {
        match self.get_answer(path_and_query).await? {
            Answer::NotFound(_) => Ok(None),
            Answer::Found(value) => Ok(Some(value)),
        }
    }

    /// A GET whose 404 carries a message worth showing (an unknown node).
    async fn get_answer<T: serde::de::DeserializeOwned>(
        &self,
        path_and_query: &str,
    ) -> Result<Answer<T>, InspectError> {
        let (status, body) = self
            .request(reqwest::Method::GET, path_and_query, None)
            .await?;
        match status {
            reqwest::StatusCode::UNAUTHORIZED => Err(self.remote_error(
                "401 Unauthorized: it runs with --token-file; give one of its tokens in NODEKEEPER_TOKEN (or --token)".into(),
            )),
            reqwest::StatusCode::NOT_FOUND => Ok(Answer::NotFound(message(&body))),
            reqwest::StatusCode::BAD_REQUEST => Err(InspectError::Invalid(message(&body))),
            reqwest::StatusCode::GONE => Err(InspectError::Gone(message(&body))),
            status if !status.is_success() => {
                Err(self.remote_error(format!("{status}: {}", message(&body))))
            }
            _ => serde_json::from_slice(&body).map(Answer::Found).map_err(|e| {
                let url = self.url();
                self.remote_error(format!("unreadable answer from {url}{path_and_query}: {e}"))
            }),
        }
    }

    /// Every node with its newest heartbeat.
    pub async fn nodes(&self) -> Result<Vec<(Node, Option<Micros>)>, InspectError> {
        match self {
            Source::Local(store) => Ok(store.nodes()?.into_iter().map(|n| (n, None)).collect()),
            Source::Remote { .. } => {
                let entries: Vec<NodeEntry> = self.get("/v1/nodes").await?.unwrap_or_default();
                Ok(entries.into_iter().map(|e| (e.node, e.heartbeat)).collect())
            }
        }
    }

    /// One node, or a not-found error naming it.
    pub async fn node(&self, name: &str) -> Result<(Node, Option<Micros>), InspectError> {
        let found = match self {
            Source::Local(store) => store.node(name)?.map(|n| (n, None)),
            Source::Remote { .. } => {
                let path = format!("/v1/nodes/{}", urlencode(name));
                self.get::<NodeEntry>(&path)
                    .await?
                    .map(|e| (e.node, e.heartbeat))
            }
        };
        found.ok_or_else(|| {
            InspectError::NotFound(format!(
                "node {name:?} not found; `nodekeeper nodes` lists the registry"
            ))
        })
    }

    /// History matching `params`, all of it in memory: for answers known
    /// to be small (one node's). [`Source::history_pages`] streams.
    pub async fn history(&self, params: &HistoryParams) -> Result<Vec<Event>, InspectError> {
        let mut all = Vec::new();
        self.history_pages(params, |page| {
            all.extend(page);
            Ok(())
        })
        .await?;
        Ok(all)
    }

    /// History matching `params`, handed to `each` a page at a time, oldest
    /// first: memory stays flat however much matches. A node or condition
    /// type the store has never heard of is an error, not an empty answer.
    pub async fn history_pages(
        &self,
        params: &HistoryParams,
        mut each: impl FnMut(Vec<Event>) -> Result<(), InspectError>,
    ) -> Result<(), InspectError> {
        // Validate here too, so a typo is reported the same way either side.
        let mut query: HistoryQuery = params
            .to_query(Micros::now())
            .map_err(InspectError::Invalid)?;
        let limit = query.limit.unwrap_or(usize::MAX);
        let mut served = 0usize;
        match self {
            Source::Local(store) => {
                store.check_query(&query)?;
                loop {
                    let page = store.history_page(&query, (limit - served).min(PAGE))?;
                    served += page.events.len();
                    if !page.events.is_empty() {
                        each(page.events)?;
                    }
                    match page.next_after {
                        Some(after) if served < limit => query.after_seq = Some(after),
                        _ => return Ok(()),
                    }
                }
            }
            Source::Remote { .. } => {
                let mut after = params.after;
                loop {
                    let want = (limit - served).min(PAGE);
                    let mut parts = Vec::new();
                    for (key, value) in [
                        ("node", params.node.clone()),
                        ("since", params.since.clone()),
                        ("until", params.until.clone()),
                        ("condition", params.condition.clone()),
                        ("after", after.map(|v| v.to_string())),
                        ("limit", Some(want.to_string())),
                    ] {
                        if let Some(v) = value {
                            parts.push(format!("{key}={}", urlencode(&v)));
                        }
                    }
                    let path = format!("/v1/history?{}", parts.join("&"));
                    let page: Vec<Event> = match self.get_answer(&path).await {
                        Ok(Answer::Found(page)) => page,
                        Ok(Answer::NotFound(message)) => return Err(InspectError::NotFound(message)),
                        Err(InspectError::Gone(message)) if after.is_some() => {
                            return Err(InspectError::Gone(format!(
                                "{message}: the history was pruned while it was being read; run the command again"
                            )))
                        }
                        Err(e) => return Err(e),
                    };
                    let count = page.len();
                    served += count;
                    after = page.last().map(|e| e.seq).or(after);
                    if count > 0 {
                        each(page)?;
                    }
                    if count < want || served >= limit {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// The registry as it was at `when`.
    pub async fn registry_at(&self, when: Micros) -> Result<RegistryAt, InspectError> {
        match self {
            Source::Local(store) => Ok(store.registry_at_time(when)?),
            Source::Remote { .. } => {
                let path = format!("/v1/at?time={}&records=true", urlencode(&when.rfc3339()));
                self.get(&path).await?.ok_or_else(|| {
                    InspectError::NotFound("the controller does not serve /v1/at".into())
                })
            }
        }
    }

    /// How the running controller's cloud source is doing; `None` when the
    /// store is read directly or no source is configured.
    pub async fn source_status(
        &self,
    ) -> Result<Option<crate::controller::SourceStatus>, InspectError> {
        match self {
            Source::Local(_) => Ok(None),
            Source::Remote { .. } => self.get("/v1/sources").await,
        }
    }

    /// The mirror's state: the running controller's, or what the store holds.
    pub async fn mirror_status(&self) -> Result<crate::mirror::MirrorStatus, InspectError> {
        match self {
            Source::Local(store) => Ok(crate::mirror::status_from_store(store)?),
            Source::Remote { .. } => self.get("/v1/mirror").await?.ok_or_else(|| {
                InspectError::NotFound(
                    "the running controller has no API server configured (--kubeconfig or --master): nothing is mirrored".into(),
                )
            }),
        }
    }

    /// What the running controller says of itself (`/v1/console`): its
    /// version, commit and `--site`; `None` for a stopped store.
    pub async fn controller_about(&self) -> Result<Option<ControllerAbout>, InspectError> {
        match self {
            Source::Local(_) => Ok(None),
            Source::Remote { .. } => self.get("/v1/console").await,
        }
    }

    /// Streams the running controller's consistent snapshot (`/v1/backup`)
    /// into `out`, and checks it arrived whole (its last line is the export's
    /// `end`). Each chunk must come within [`HTTP_TIMEOUT`]; the whole may
    /// take as long as it takes, up to [`BACKUP_CAP`] bytes. Returns the seq
    /// it is as of and its size.
    pub async fn backup(
        &self,
        out: &mut (dyn tokio::io::AsyncWrite + Unpin + Send),
    ) -> Result<(u64, u64), InspectError> {
        use tokio::io::AsyncWriteExt;
        let Source::Remote {
            base,
            client,
            token,
        } = self
        else {
            return Err(InspectError::Invalid(
                "a backup through the API needs a running controller".into(),
            ));
        };
        let remote = |reason: String| InspectError::Remote {
            url: base.clone(),
            reason,
        };
        // The client's whole-request timeout is for short answers; a backup
        // is bounded by its chunks' pace and its size instead.
        let mut request = client
            .get(format!("{base}/v1/backup"))
            .timeout(Duration::from_secs(7 * 24 * 3600));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let mut response = tokio::time::timeout(HTTP_TIMEOUT, request.send())
            .await
            .map_err(|_| remote(format!("no answer in {HTTP_TIMEOUT:?}")))?
            .map_err(|e| remote(e.to_string()))?;
        let status = response.status();
        if status == reqwest::StatusCode::UNAUTHORIZED {
            return Err(remote(
                "401 Unauthorized: it runs with --token-file; give one of its tokens in NODEKEEPER_TOKEN (or --token)".into(),
            ));
        }
        if status == reqwest::StatusCode::NOT_FOUND {
            return Err(remote(
                "it has no /v1/backup: it is older than this nodekeeper; stop it and run `nodekeeper db export`, or upgrade it".into(),
            ));
        }
        if !status.is_success() {
            return Err(remote(format!("{status}")));
        }
        let seq = response
            .headers()
            .get("x-nodekeeper-seq")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| remote("the answer says no X-Nodekeeper-Seq".into()))?;
        let mut bytes = 0u64;
        let mut tail: Vec<u8> = Vec::new();
        loop {
            let chunk = tokio::time::timeout(HTTP_TIMEOUT, response.chunk())
                .await
                .map_err(|_| remote(format!("the backup stalled for {HTTP_TIMEOUT:?}")))?
                .map_err(|e| remote(format!("the backup was cut off: {e}")))?;
            let Some(chunk) = chunk else { break };
            bytes += chunk.len() as u64;
            if bytes > BACKUP_CAP {
                return Err(remote(format!(
                    "the backup is larger than {BACKUP_CAP} bytes"
                )));
            }
            out.write_all(&chunk)
                .await
                .map_err(|e| InspectError::Invalid(format!("cannot write the backup: {e}")))?;
            tail.extend_from_slice(&chunk);
            if tail.len() > 8192 {
                tail.drain(..tail.len() - 8192);
            }
        }
        let last = tail
            .strip_suffix(b"\n")
            .unwrap_or(&tail)
            .rsplit(|b| *b == b'\n')
            .next()
            .unwrap_or_default();
        if !last.starts_with(b"{\"end\":") {
            return Err(remote(
                "the backup ended before its end line: it is incomplete".into(),
            ));
        }
        Ok((seq, bytes))
    }

    /// Store facts.
    pub async fn status(&self) -> Result<StoreStatus, InspectError> {
        match self {
            Source::Local(store) => Ok(store.status()?),
            Source::Remote { base, .. } => {
                self.get("/v1/store")
                    .await?
                    .ok_or_else(|| InspectError::Remote {
                        url: base.clone(),
                        reason: "no /v1/store".into(),
                    })
            }
        }
    }
}

impl Source {
    /// Applies an operator's write to a node: through the running
    /// controller's API, or on the stopped store with the same checks, fold
    /// and history. Answers the node as stored afterwards.
    pub async fn write_node(
        &self,
        name: &str,
        write: &crate::server::node_writes::NodeWrite,
    ) -> Result<Node, InspectError> {
        use crate::server::node_writes::{prepare, NodeWrite};
        match self {
            Source::Local(store) if store.is_copy() => {
                Err(InspectError::ReadOnly(store.origin().display().to_string()))
            }
            Source::Local(store) => {
                let by = local_user();
                let (node, _) = crate::controller::operator::edit_stopped_store(
                    store,
                    name,
                    |node| {
                        let p = prepare(node, None, write).map_err(|e| match e {
                            crate::server::node_writes::WriteError::Invalid(i) => i.into(),
                            e => crate::controller::PushError::Invalid(e.to_string()),
                        })?;
                        Ok((p.fields, p.expected_version))
                    },
                    &by,
                )?;
                Ok(node)
            }
            Source::Remote { .. } => {
                let path = format!("/api/v1/nodes/{}", urlencode(name));
                let (method, content_type, body) = match write {
                    NodeWrite::Patch { format, body } => (
                        reqwest::Method::PATCH,
                        format.content_type(),
                        body.to_string(),
                    ),
                    NodeWrite::Replace(object) => (
                        reqwest::Method::PUT,
                        "application/json",
                        serde_json::to_string(object).expect("a Node serializes"),
                    ),
                };
                let answer = self.send(method, &path, content_type, body).await?;
                // Through a `Value`, as the server reads a Node: one deserializer
                // for the type in the binary (docs/decisions/binary-size.md).
                let node: k8s_openapi::api::core::v1::Node = serde_json::from_slice(&answer)
                    .and_then(serde_json::from_value)
                    .map_err(|e| self.remote_error(format!("unreadable answer: {e}")))?;
                // The record as the controller keeps it, for what the CLI prints.
                Ok(self
                    .node(node.metadata.name.as_deref().unwrap_or(name))
                    .await?
                    .0)
            }
        }
    }

    /// Deletes a node no source lists; refused (naming the source) otherwise.
    pub async fn delete_node(&self, name: &str) -> Result<(), InspectError> {
        match self {
            Source::Local(store) if store.is_copy() => {
                Err(InspectError::ReadOnly(store.origin().display().to_string()))
            }
            Source::Local(store) => {
                crate::controller::operator::delete_in_stopped_store(
                    store,
                    name,
                    &Default::default(),
                    &local_user(),
                )?;
                Ok(())
            }
            Source::Remote { .. } => {
                let path = format!("/api/v1/nodes/{}", urlencode(name));
                self.send(
                    reqwest::Method::DELETE,
                    &path,
                    "application/json",
                    String::new(),
                )
                .await
                .map(|_| ())
            }
        }
    }

    /// A request to the running controller's API (`body` sent as JSON);
    /// its answer's body, or the refusal its `Status` gives.
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: String,
    ) -> Result<Vec<u8>, InspectError> {
        self.send(method, path, "application/json", body).await
    }

    /// The controller's address, or the store's path.
    fn url(&self) -> String {
        match self {
            Source::Remote { base, .. } => base.clone(),
            Source::Local(store) => store.path().display().to_string(),
        }
    }

    fn remote_error(&self, reason: String) -> InspectError {
        let url = self.url();
        InspectError::Remote { url, reason }
    }

    /// One request to the running controller, with `body` of its content
    /// type if given: the answer's status and body, read up to [`RESPONSE_CAP`].
    async fn request(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, String)>,
    ) -> Result<(reqwest::StatusCode, Vec<u8>), InspectError> {
        let Source::Remote {
            base,
            client,
            token,
        } = self
        else {
            unreachable!("only a remote source is asked over HTTP")
        };
        let mut request = client.request(method, format!("{base}{path}"));
        if let Some((content_type, body)) = body {
            request = request
                .header(reqwest::header::CONTENT_TYPE, content_type)
                .body(body);
        }
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        let failed = |e: reqwest::Error| self.remote_error(e.to_string());
        let mut response = request.send().await.map_err(failed)?;
        let status = response.status();
        let mut body = Vec::new();
        while let Some(chunk) = response.chunk().await.map_err(failed)? {
            if body.len() + chunk.len() > RESPONSE_CAP {
                return Err(self.remote_error(format!("answer larger than {RESPONSE_CAP} bytes")));
            }
            body.extend_from_slice(&chunk);
        }
        Ok((status, body))
    }

    /// A write to the running controller; its answer's body, or the
    /// refusal its `Status` gives.
    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        content_type: &str,
        body: String,
    ) -> Result<Vec<u8>, InspectError> {
        let (status, body) = self
            .request(method, path, Some((content_type, body)))
            .await?;
        if status.is_success() {
            return Ok(body);
        }
        let message = message(&body);
        Err(match status.as_u16() {
            404 => InspectError::NotFound(message),
            409 => InspectError::Conflict(message),
            400 | 422 => InspectError::Invalid(message),
            401 => InspectError::Forbidden(format!(
                "{message}: the controller runs with --token-file; give an operator's token with --token (or NODEKEEPER_TOKEN)"
            )),
            403 => InspectError::Forbidden(message),
            _ => self.remote_error(format!("{status}: {message}")),
        })
    }
}

/// The `message` of a refusal's `Status`, or the start of its body.
fn message(body: &[u8]) -> String {
    serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["message"].as_str().map(str::to_string))
        .unwrap_or_else(|| String::from_utf8_lossy(body).chars().take(300).collect())
}

/// Who a write to a stopped store is recorded as: the local user.
fn local_user() -> String {
    let uid = || {
        // /proc is served from memory: the read does not wait on a disk.
        #[allow(clippy::disallowed_methods)]
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let line = status.lines().find(|l| l.starts_with("Uid:"))?;
        Some(format!("uid {}", line.split_whitespace().nth(1)?))
    };
    let user = std::env::var("USER")
        .or_else(|_| std::env::var("LOGNAME"))
        .ok()
        .filter(|u| !u.is_empty())
        .or_else(uid)
        .unwrap_or_else(|| "an unknown user".into());
    format!("{user} (nodekeeper CLI on the stopped store)")
}

/// Percent-encodes a query or path value.
fn urlencode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-._~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn urlencode_keeps_unreserved_and_escapes_the_rest() {
        assert_eq!(
            super::urlencode("2026-11-30T09:00:00+01:00"),
            "2026-11-30T09%3A00%3A00%2B01%3A00"
        );
    }
}
