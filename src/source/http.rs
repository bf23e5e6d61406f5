//! The `http` provider: machines from a JSON inventory endpoint, polled
//! every sync period with `If-None-Match`.
//!
//! `--cloud-config` is a small YAML file (relative paths are relative to it):
//!
//! ```yaml
//! url: https://cmdb.example.net/api/machines   # required, http or https
//! tokenFile: cmdb.token     # optional: sent as `Authorization: Bearer …`, re-read every poll
//! caFile: cmdb-ca.pem       # optional: trust only this CA bundle (default: the system's roots)
//! timeout: 10s              # optional: the whole request, default 10s
//! maxBodyBytes: 67108864    # optional: a larger answer is an error, default 64 MiB
//! ```
//!
//! The endpoint answers `GET` with the JSON of the inventory file: a list of
//! machines, or `{"machines": [...]}` (see [`super::inventory`]). When it sends
//! an `ETag`, the next poll carries `If-None-Match` and a `304 Not Modified`
//! stands for the listing that ETag named. Anything else that is not a
//! well-formed `200` — a refused token, a 5xx, a timeout, a malformed or
//! oversized body — is an error naming the URL, and changes nothing.
//! Proxy environment variables are not used.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, ETAG, IF_NONE_MATCH};
use reqwest::StatusCode;
use serde::Deserialize;

use super::cloud::{BoxFuture, CloudError, CloudProvider, CloudResult, Instance};

const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_MAX_BODY: u64 = 64 << 20;

/// The `http` provider's `--cloud-config`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HttpConfig {
    pub url: String,
    #[serde(default)]
    pub token_file: Option<PathBuf>,
    #[serde(default)]
    pub ca_file: Option<PathBuf>,
    #[serde(default)]
    pub timeout: Option<String>,
    #[serde(default)]
    pub max_body_bytes: Option<u64>,
}

/// A provider polling a JSON inventory endpoint.
pub struct HttpProvider {
    url: reqwest::Url,
    client: reqwest::Client,
    token_file: Option<PathBuf>,
    max_body: u64,
    /// The last good listing and the ETag it came with.
    cached: Mutex<Option<(String, Arc<Vec<Instance>>)>>,
}

impl HttpProvider {
    /// Builds the provider from its config file; paths in it are relative to
    /// `base` (the config file's folder). Checks the token and CA files now.
    pub fn new(config: HttpConfig, base: &Path) -> Result<HttpProvider, String> {
        let url = reqwest::Url::parse(&config.url)
            .map_err(|e| format!("url {:?} is not a URL: {e}", config.url))?;
        if !matches!(url.scheme(), "http" | "https") || url.host_str().is_none() {
            return Err(format!(
                "url {:?} must be an http:// or https:// URL",
                config.url
            ));
        }
        let timeout = match &config.timeout {
            None => DEFAULT_TIMEOUT,
            Some(t) => crate::duration::parse(t)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("timeout {t:?} is not a duration above zero such as 10s"))?,
        };
        let max_body = config.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY);
        if max_body == 0 {
            return Err("maxBodyBytes must be more than zero".into());
        }
        let token_file = config.token_file.map(|p| base.join(p));
        if let Some(path) = &token_file {
            read_token(path)?;
        }
        // reqwest with `rustls-no-provider` needs the process-wide provider.
        crate::install_crypto_provider();
        let mut builder = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("nodekeeper/", env!("CARGO_PKG_VERSION")));
        if let Some(ca) = config.ca_file.map(|p| base.join(p)) {
            // Read once at start-up, while the source is built.
            #[allow(clippy::disallowed_methods)]
            let pem = std::fs::read(&ca)
                .map_err(|e| format!("cannot read caFile {}: {e}", ca.display()))?;
            let certs = reqwest::Certificate::from_pem_bundle(&pem)
                .ok()
                .filter(|c| !c.is_empty())
                .ok_or_else(|| format!("caFile {} holds no PEM certificate", ca.display()))?;
            builder = builder.tls_certs_only(certs);
        }
        let client = builder.build().map_err(|e| {
            format!(
                "cannot build the HTTP client: {}",
                error_chain(&e.without_url())
            )
        })?;
        Ok(HttpProvider {
            url,
            client,
            token_file,
            max_body,
            cached: Mutex::new(None),
        })
    }

    /// The endpoint polled.
    pub fn url(&self) -> &reqwest::Url {
        &self.url
    }

    fn cached(&self) -> std::sync::MutexGuard<'_, Option<(String, Arc<Vec<Instance>>)>> {
        self.cached.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Every machine the endpoint lists now.
    async fn fetch(&self) -> Result<Arc<Vec<Instance>>, CloudError> {
        let url = &self.url;
        let mut request = self
            .client
            .get(url.clone())
            .header(ACCEPT, "application/json");
        if let Some(path) = &self.token_file {
            let token = token_from(path, tokio::fs::read_to_string(path).await)
                .map_err(CloudError::File)?;
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let etag = self.cached().as_ref().map(|(etag, _)| etag.clone());
        if let Some(etag) = &etag {
            request = request.header(IF_NONE_MATCH, etag);
        }
        let mut response = request.send().await.map_err(|e| {
            CloudError::Network(format!(
                "GET {url} failed: {}",
                error_chain(&e.without_url())
            ))
        })?;
        let status = response.status();
        if status == StatusCode::NOT_MODIFIED {
            return match (etag, self.cached().as_ref()) {
                (Some(sent), Some((kept, machines))) if &sent == kept => Ok(machines.clone()),
                _ => Err(CloudError::Status {
                    status: status.as_u16(),
                    message: format!(
                        "GET {url} answered 304 Not Modified, but no listing with that ETag is kept"
                    ),
                }),
            };
        }
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            let hint = match &self.token_file {
                Some(p) => format!("the bearer token from {} was refused", p.display()),
                None => "the endpoint wants a bearer token: set tokenFile in --cloud-config".into(),
            };
            return Err(CloudError::Auth {
                status: status.as_u16(),
                message: format!("GET {url} answered {status}: {hint}"),
            });
        }
        let body = read_capped(&mut response, self.max_body)
            .await
            .map_err(|e| match e {
                CappedError::TooLarge(e) => CloudError::Parse(format!("GET {url} ({status}): {e}")),
                CappedError::Read(e) => CloudError::Network(format!("GET {url} ({status}): {e}")),
            })?;
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let snippet: String = text.trim().chars().take(200).collect();
            return Err(CloudError::Status {
                status: status.as_u16(),
                message: format!("GET {url} answered {status}: {snippet}"),
            });
        }
        let machines =
            Arc::new(super::inventory::parse_json(url.as_str(), &body).map_err(CloudError::Parse)?);
        let etag = response
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        *self.cached() = etag.map(|etag| (etag, machines.clone()));
        Ok(machines)
    }
}

impl CloudProvider for HttpProvider {
    fn name(&self) -> &str {
        "http"
    }
    fn list(&self) -> BoxFuture<'_, CloudResult<Arc<Vec<Instance>>>> {
        Box::pin(self.fetch())
    }
}

/// Checks the token file at start-up, while the source is built; each poll
/// reads it again (with tokio::fs), so a rotated token is picked up.
fn read_token(path: &Path) -> Result<String, String> {
    #[allow(clippy::disallowed_methods)]
    let text = std::fs::read_to_string(path);
    token_from(path, text)
}

/// The token in the text read from `path`.
fn token_from(path: &Path, text: std::io::Result<String>) -> Result<String, String> {
    let token = text.map_err(|e| format!("cannot read tokenFile {}: {e}", path.display()))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(format!("tokenFile {} is empty", path.display()));
    }
    Ok(token.to_string())
}

/// Why a body was not read whole.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CappedError {
    /// Larger than the cap: refused unread.
    #[error("{0}")]
    TooLarge(String),
    /// The connection failed while the body came.
    #[error("{0}")]
    Read(String),
}

/// Reads a response body, refusing one larger than `max` bytes.
pub(crate) async fn read_capped(
    response: &mut reqwest::Response,
    max: u64,
) -> Result<Vec<u8>, CappedError> {
    let too_large =
        || CappedError::TooLarge(format!("the answer is larger than {max} bytes; refused"));
    if response.content_length().is_some_and(|n| n > max) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| {
        CappedError::Read(format!(
            "reading the answer failed: {}",
            error_chain(&e.without_url())
        ))
    })? {
        if (body.len() + chunk.len()) as u64 > max {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// An error and its causes, `: `-separated (reqwest's own message hides them).
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}
