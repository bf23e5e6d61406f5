//! The `ec2` provider: machines from EC2 `DescribeInstances` (or any
//! EC2-compatible API), SigV4-signed, followed through every page.
//!
//! `--cloud-config` is a YAML file (relative paths are relative to it):
//!
//! ```yaml
//! region: us-east-1            # default: $AWS_REGION, then $AWS_DEFAULT_REGION
//! endpoint: http://127.0.0.1:5000   # default: https://ec2.<region>.amazonaws.com
//! filters:                     # passed to DescribeInstances as they are
//!   - {name: "tag:cluster", values: [edge]}
//!   - {name: instance-type, values: [t3.small, t3.medium]}
//! nameTag: Name                # the tag that names the node (default Name)
//! credentialsFile: aws.env     # default: $AWS_ACCESS_KEY_ID, $AWS_SECRET_ACCESS_KEY, $AWS_SESSION_TOKEN
//! maxResults: 1000             # per page, 5-1000 (default 1000)
//! maxPages: 100                # more pages than this is an error, not a cut (default 100)
//! timeout: 30s                 # per request (default 30s)
//! ```
//!
//! The credentials file holds `KEY=VALUE` lines with those three keys
//! (`#` comments; the lowercase `aws_access_key_id = …` spelling of
//! `~/.aws/credentials` with a single profile works too). Credentials are
//! read again for every listing, so rotated session tokens are picked up.
//!
//! Each instance becomes a node named by its `nameTag` tag; without that
//! tag, by its private DNS name (as Kubernetes' AWS provider names nodes),
//! and without one either, by its instance id. Addresses: the private IP
//! (InternalIP), the public IP (ExternalIP), the private DNS name
//! (InternalDNS and Hostname) and the public DNS name (ExternalDNS). The
//! instance type is the `node.kubernetes.io/instance-type` label, the
//! availability zone the zone, the provider id `aws:///<zone>/<instance id>`.
//! `running` is Running; `stopped` and `stopping` are Stopped; `pending`
//! and the like are listed in their own words; `terminated` and
//! `shutting-down` instances are not listed (their nodes go).
//!
//! The EC2 Query API client (signing, paging, errors) is what would move
//! out of this file if a second AWS API were needed.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use serde::Deserialize;

use super::cloud::{
    BoxFuture, CloudError, CloudProvider, CloudResult, Instance, InstanceResources, InstanceState,
    Zone, INSTANCE_TYPE_LABEL,
};
use super::http::{error_chain, read_capped};
use crate::model::{Address, AddressKind, Micros};

/// The EC2 API version this client speaks.
pub const EC2_API_VERSION: &str = "2016-11-15";
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_MAX_RESULTS: u32 = 1000;
const DEFAULT_MAX_PAGES: u32 = 100;
/// The largest answer read from the API (one page of 1000 instances is a few MiB).
const MAX_ANSWER_BYTES: u64 = 64 << 20;

/// One `DescribeInstances` filter.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Filter {
    pub name: String,
    pub values: Vec<String>,
}

/// The `ec2` provider's `--cloud-config`.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Ec2Config {
    #[serde(default)]
    pub region: Option<String>,
    #[serde(default)]
    pub endpoint: Option<String>,
    #[serde(default)]
    pub filters: Vec<Filter>,
    #[serde(default)]
    pub name_tag: Option<String>,
    #[serde(default)]
    pub credentials_file: Option<PathBuf>,
    #[serde(default)]
    pub max_results: Option<u32>,
    #[serde(default)]
    pub max_pages: Option<u32>,
    #[serde(default)]
    pub timeout: Option<String>,
}

/// Where AWS credentials come from.
#[derive(Debug, Clone)]
pub enum CredentialSource {
    /// `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`.
    Environment,
    /// A file with those keys.
    File(PathBuf),
    /// Given (tests, and setup calls against moto).
    Fixed(Credentials),
}

impl CredentialSource {
    /// The credentials as they are now.
    pub fn load(&self) -> Result<Credentials, String> {
        match self {
            CredentialSource::Fixed(c) => Ok(c.clone()),
            CredentialSource::Environment => {
                let var = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
                credentials(
                    var("AWS_ACCESS_KEY_ID"),
                    var("AWS_SECRET_ACCESS_KEY"),
                    var("AWS_SESSION_TOKEN"),
                )
                .map_err(|missing| {
                    format!("no AWS credentials: {missing} is not set in the environment; set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and AWS_SESSION_TOKEN for temporary credentials), or credentialsFile in --cloud-config")
                })
            }
            CredentialSource::File(path) => {
                // At start-up, and for each call on the blocking pool (`call`).
                #[allow(clippy::disallowed_methods)]
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("cannot read credentialsFile {}: {e}", path.display()))?;
                let mut keys: BTreeMap<String, String> = BTreeMap::new();
                for (i, line) in text.lines().enumerate() {
                    let line = line.trim();
                    if line.is_empty() || line.starts_with('#') || line.starts_with('[') {
                        continue;
                    }
                    let line = line.strip_prefix("export ").unwrap_or(line);
                    let (k, v) = line.split_once('=').ok_or_else(|| {
                        format!("{}:{}: not a KEY=VALUE line", path.display(), i + 1)
                    })?;
                    let key = k.trim().to_ascii_uppercase();
                    let value = v.trim().trim_matches('"').trim_matches('\'').to_string();
                    if keys.insert(key.clone(), value).is_some() {
                        return Err(format!(
                            "{}:{}: {key} is given twice (one profile per file)",
                            path.display(),
                            i + 1
                        ));
                    }
                }
                let mut take = |k: &str| keys.remove(k).filter(|v| !v.is_empty());
                credentials(
                    take("AWS_ACCESS_KEY_ID"),
                    take("AWS_SECRET_ACCESS_KEY"),
                    take("AWS_SESSION_TOKEN"),
                )
                .map_err(|missing| {
                    format!("credentialsFile {}: {missing} is missing", path.display())
                })
            }
        }
    }
}

fn credentials(
    key: Option<String>,
    secret: Option<String>,
    token: Option<String>,
) -> Result<Credentials, &'static str> {
    let key = key.ok_or("AWS_ACCESS_KEY_ID")?;
    let secret = secret.ok_or("AWS_SECRET_ACCESS_KEY")?;
    Ok(Credentials::new(key, secret, token, None, "nodekeeper"))
}

/// A failed call to an AWS Query API.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AwsError {
    /// The request did not get an answer (connection, timeout, body).
    #[error("{0}")]
    Transport(String),
    /// The credentials to sign with could not be read.
    #[error("{0}")]
    Credentials(String),
    /// AWS answered with an error document.
    #[error("{code}: {message} (HTTP {status})")]
    Api {
        status: u16,
        code: String,
        message: String,
    },
    /// Anything else: an answer that is not what the API sends.
    #[error("{0}")]
    Malformed(String),
}

/// Error codes with which AWS refuses the caller's credentials rather than
/// the request (most come with HTTP 401 or 403, not all).
const AUTH_CODES: [&str; 7] = [
    "AuthFailure",
    "UnauthorizedOperation",
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "IncompleteSignature",
    "ExpiredToken",
    "MissingAuthenticationToken",
];

impl AwsError {
    /// The provider's failure for this one, with `message` as its text.
    fn into_cloud(self, message: String) -> CloudError {
        match self {
            AwsError::Transport(_) => CloudError::Network(message),
            AwsError::Credentials(_) => CloudError::File(message),
            AwsError::Api { status, code, .. }
                if status == 401 || status == 403 || AUTH_CODES.contains(&code.as_str()) =>
            {
                CloudError::Auth { status, message }
            }
            AwsError::Api { status, .. } => CloudError::Status { status, message },
            AwsError::Malformed(_) => CloudError::Parse(message),
        }
    }
}

/// A client of AWS Query APIs (EC2, and IAM for test setup): form-encoded
/// `POST`s signed with SigV4 by `aws-sigv4`.
#[derive(Debug, Clone)]
pub struct AwsQueryClient {
    client: reqwest::Client,
    endpoint: reqwest::Url,
    region: String,
    credentials: CredentialSource,
}

impl AwsQueryClient {
    /// A client for `endpoint` in `region`.
    pub fn new(
        endpoint: &str,
        region: &str,
        credentials: CredentialSource,
        timeout: Duration,
    ) -> Result<AwsQueryClient, String> {
        let endpoint = reqwest::Url::parse(endpoint)
            .map_err(|e| format!("endpoint {endpoint:?} is not a URL: {e}"))?;
        if !matches!(endpoint.scheme(), "http" | "https") || endpoint.host_str().is_none() {
            return Err(format!(
                "endpoint {endpoint} must be an http:// or https:// URL with a host"
            ));
        }
        // reqwest with `rustls-no-provider` needs the process-wide provider.
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .connect_timeout(timeout)
            .user_agent(concat!("nodekeeper/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| {
                format!(
                    "cannot build the HTTP client: {}",
                    error_chain(&e.without_url())
                )
            })?;
        Ok(AwsQueryClient {
            client,
            endpoint,
            region: region.to_string(),
            credentials,
        })
    }

    /// The endpoint called.
    pub fn endpoint(&self) -> &reqwest::Url {
        &self.endpoint
    }

    /// Calls `action` of `service` (its signing name: `ec2`, `iam`) at
    /// `version` with `params`; the answer's XML on success.
    pub async fn call(
        &self,
        service: &str,
        action: &str,
        version: &str,
        params: &[(String, String)],
    ) -> Result<String, AwsError> {
        let body = form_urlencoded::Serializer::new(String::new())
            .append_pair("Action", action)
            .append_pair("Version", version)
            .extend_pairs(params)
            .finish();
        // A credentials file is read again for each call, off the runtime.
        let source = self.credentials.clone();
        let credentials = tokio::task::spawn_blocking(move || source.load())
            .await
            .map_err(|e| AwsError::Credentials(format!("reading the credentials failed: {e}")))?
            .map_err(AwsError::Credentials)?;
        let identity = credentials.into();
        let content_type = "application/x-www-form-urlencoded; charset=utf-8";
        let params = v4::SigningParams::builder()
            .identity(&identity)
            .region(&self.region)
            .name(service)
            .time(SystemTime::UNIX_EPOCH + Micros::now().since(Micros(0)))
            .settings(SigningSettings::default())
            .build()
            .map_err(|e| AwsError::Transport(format!("cannot sign the request: {e}")))?
            .into();
        let signable = SignableRequest::new(
            "POST",
            self.endpoint.as_str(),
            std::iter::once(("content-type", content_type)),
            SignableBody::Bytes(body.as_bytes()),
        )
        .and_then(|request| sign(request, &params))
        .map_err(|e| AwsError::Transport(format!("cannot sign the request: {e}")))?;
        let (instructions, _signature) = signable.into_parts();
        let mut request = self
            .client
            .post(self.endpoint.clone())
            .header(reqwest::header::CONTENT_TYPE, content_type);
        for (name, value) in instructions.headers() {
            request = request.header(name, value);
        }
        // Messages leave the endpoint out: callers name it once, with the action.
        let mut response = request.body(body).send().await.map_err(|e| {
            AwsError::Transport(format!(
                "the request failed: {}",
                error_chain(&e.without_url())
            ))
        })?;
        let status = response.status();
        let bytes = read_capped(&mut response, MAX_ANSWER_BYTES)
            .await
            .map_err(|e| AwsError::Transport(format!("{e} (HTTP {status})")))?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        if status.is_success() {
            return Ok(text);
        }
        Err(match quick_xml::de::from_str::<ErrorResponse>(&text) {
            Ok(doc) if !doc.errors.error.is_empty() => {
                let e = &doc.errors.error[0];
                AwsError::Api {
                    status: status.as_u16(),
                    code: e.code.clone(),
                    message: e.message.clone(),
                }
            }
            _ => AwsError::Malformed(format!(
                "answered {status}: {}",
                text.trim().chars().take(200).collect::<String>()
            )),
        })
    }
}

/// The `ec2` provider.
pub struct Ec2Provider {
    api: AwsQueryClient,
    region: String,
    filters: Vec<Filter>,
    name_tag: String,
    max_results: u32,
    max_pages: u32,
}

impl Ec2Provider {
    /// Builds the provider from its config file; paths in it are relative to
    /// `base`. Checks that credentials can be found now.
    pub fn new(config: Ec2Config, base: &Path) -> Result<Ec2Provider, String> {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let region = config
            .region
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .ok_or("no region: set region in --cloud-config (or $AWS_REGION)")?;
        let endpoint = config
            .endpoint
            .unwrap_or_else(|| format!("https://ec2.{region}.amazonaws.com"));
        for f in &config.filters {
            if f.name.trim().is_empty() || f.values.is_empty() {
                return Err(format!(
                    "filter {:?} needs a name and at least one value",
                    f.name
                ));
            }
        }
        let max_results = config.max_results.unwrap_or(DEFAULT_MAX_RESULTS);
        if !(5..=1000).contains(&max_results) {
            return Err(format!(
                "maxResults {max_results} is outside 5-1000 (EC2's limits)"
            ));
        }
        let max_pages = config.max_pages.unwrap_or(DEFAULT_MAX_PAGES);
        if max_pages == 0 {
            return Err("maxPages must be at least 1".into());
        }
        let timeout = match &config.timeout {
            None => DEFAULT_TIMEOUT,
            Some(t) => crate::duration::parse(t)
                .ok()
                .filter(|d| !d.is_zero())
                .ok_or_else(|| format!("timeout {t:?} is not a duration above zero such as 30s"))?,
        };
        let credentials = match config.credentials_file {
            Some(p) => CredentialSource::File(base.join(p)),
            None => CredentialSource::Environment,
        };
        credentials.load()?;
        let name_tag = config.name_tag.unwrap_or_else(|| "Name".into());
        if name_tag.is_empty() {
            return Err("nameTag must not be empty".into());
        }
        Ok(Ec2Provider {
            api: AwsQueryClient::new(&endpoint, &region, credentials, timeout)?,
            region,
            filters: config.filters,
            name_tag,
            max_results,
            max_pages,
        })
    }

    /// The query parameters of one `DescribeInstances` page.
    fn page_params(&self, next_token: Option<&str>) -> Vec<(String, String)> {
        let mut params = vec![("MaxResults".to_string(), self.max_results.to_string())];
        for (i, f) in self.filters.iter().enumerate() {
            params.push((format!("Filter.{}.Name", i + 1), f.name.clone()));
            for (j, v) in f.values.iter().enumerate() {
                params.push((format!("Filter.{}.Value.{}", i + 1, j + 1), v.clone()));
            }
        }
        if let Some(token) = next_token {
            params.push(("NextToken".into(), token.into()));
        }
        params
    }

    /// Every instance the filters select, through every page, or an error.
    async fn describe_all(&self) -> Result<Vec<Instance>, CloudError> {
        let at = |page: u32, e: String| {
            format!(
                "DescribeInstances at {} (page {page}): {e}",
                self.api.endpoint()
            )
        };
        let mut instances = Vec::new();
        let mut seen = HashSet::new();
        let mut token: Option<String> = None;
        for page in 1..=self.max_pages {
            let xml = self
                .api
                .call(
                    "ec2",
                    "DescribeInstances",
                    EC2_API_VERSION,
                    &self.page_params(token.as_deref()),
                )
                .await
                .map_err(|e| {
                    let message = at(page, e.to_string());
                    e.into_cloud(message)
                })?;
            let answer: DescribeInstancesResponse = quick_xml::de::from_str(&xml)
                .map_err(|e| CloudError::Parse(at(page, format!("malformed answer: {e}"))))?;
            for reservation in answer.reservation_set.item {
                for raw in reservation.instances_set.item {
                    if !seen.insert(raw.instance_id.clone()) {
                        continue;
                    }
                    if let Some(instance) = self.instance(raw) {
                        instances.push(instance);
                    }
                }
            }
            match answer.next_token.filter(|t| !t.is_empty()) {
                None => return Ok(instances),
                Some(next) if token.as_deref() == Some(next.as_str()) => {
                    return Err(CloudError::Parse(at(
                        page,
                        "the same NextToken came back twice".into(),
                    )));
                }
                Some(next) => token = Some(next),
            }
        }
        Err(CloudError::Parse(format!(
            "DescribeInstances at {}: more than {} pages of {} instances; narrow `filters` or raise `maxPages` in --cloud-config (a partial listing is never used)",
            self.api.endpoint(),
            self.max_pages,
            self.max_results
        )))
    }

    /// One EC2 instance as an [`Instance`]; `None` for one that is gone.
    fn instance(&self, raw: Ec2Instance) -> Option<Instance> {
        let state = match raw.instance_state.name.as_str() {
            "terminated" | "shutting-down" => return None,
            "running" => InstanceState::Running,
            "stopped" | "stopping" => InstanceState::Stopped,
            other => InstanceState::Other(other.to_string()),
        };
        let some = |s: Option<String>| s.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
        let private_dns = some(raw.private_dns_name);
        let tag = raw
            .tag_set
            .item
            .into_iter()
            .find(|t| t.key == self.name_tag)
            .and_then(|t| some(t.value));
        let name = tag
            .or_else(|| private_dns.clone())
            .unwrap_or_else(|| raw.instance_id.clone());
        let mut addresses = Vec::new();
        let mut add = |kind, a: &Option<String>| {
            if let Some(a) = a {
                addresses.push(Address {
                    kind,
                    address: a.clone(),
                });
            }
        };
        add(AddressKind::InternalIP, &some(raw.private_ip_address));
        add(AddressKind::ExternalIP, &some(raw.ip_address));
        add(AddressKind::InternalDNS, &private_dns);
        add(AddressKind::Hostname, &private_dns);
        add(AddressKind::ExternalDNS, &some(raw.dns_name));
        let zone = some(raw.placement.and_then(|p| p.availability_zone));
        let mut labels = BTreeMap::new();
        if let Some(t) = some(raw.instance_type) {
            labels.insert(INSTANCE_TYPE_LABEL.to_string(), t);
        }
        Some(Instance {
            name,
            addresses,
            provider_id: Some(format!(
                "aws:///{}/{}",
                zone.as_deref().unwrap_or(""),
                raw.instance_id
            )),
            external_id: raw.instance_id,
            resources: InstanceResources::default(),
            zone: Some(Zone {
                region: self.region.clone(),
                zone: zone.unwrap_or_default(),
            }),
            labels,
            state,
        })
    }
}

impl CloudProvider for Ec2Provider {
    fn name(&self) -> &str {
        "ec2"
    }
    fn list(&self) -> BoxFuture<'_, CloudResult<Arc<Vec<Instance>>>> {
        Box::pin(async { self.describe_all().await.map(Arc::new) })
    }
}

// The parts of the EC2 answers that are read; everything else is ignored.

/// `<xxxSet><item>…</item>…</xxxSet>`, EC2's list shape.
#[derive(Debug, Deserialize)]
struct Items<T> {
    #[serde(default = "Vec::new")]
    item: Vec<T>,
}

impl<T> Default for Items<T> {
    fn default() -> Self {
        Items { item: Vec::new() }
    }
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct DescribeInstancesResponse {
    #[serde(default)]
    reservation_set: Items<Reservation>,
    #[serde(default)]
    next_token: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Reservation {
    #[serde(default)]
    instances_set: Items<Ec2Instance>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Ec2Instance {
    instance_id: String,
    instance_state: Ec2State,
    #[serde(default)]
    private_dns_name: Option<String>,
    #[serde(default)]
    dns_name: Option<String>,
    #[serde(default)]
    instance_type: Option<String>,
    #[serde(default)]
    placement: Option<Placement>,
    #[serde(default)]
    private_ip_address: Option<String>,
    #[serde(default)]
    ip_address: Option<String>,
    #[serde(default)]
    tag_set: Items<Tag>,
}

#[derive(Debug, Deserialize)]
struct Ec2State {
    name: String,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Placement {
    #[serde(default)]
    availability_zone: Option<String>,
}

#[derive(Debug, Deserialize)]
struct Tag {
    key: String,
    #[serde(default)]
    value: Option<String>,
}

/// `<Response><Errors><Error><Code/><Message/></Error></Errors></Response>`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ErrorResponse {
    #[serde(default)]
    errors: ErrorList,
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ErrorList {
    #[serde(default)]
    error: Vec<ErrorItem>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "PascalCase")]
struct ErrorItem {
    code: String,
    #[serde(default)]
    message: String,
}

#[cfg(test)]
// Tests write and read their fixtures with std::fs: blocking a test's own
// runtime stalls nothing else.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    /// A credentials file; the directory lives as long as the guard.
    fn write_credentials() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("aws.env");
        std::fs::write(
            &path,
            "AWS_ACCESS_KEY_ID=AKIDTEST\nAWS_SECRET_ACCESS_KEY=secret\n",
        )
        .unwrap();
        (dir, path)
    }

    fn provider() -> Ec2Provider {
        let (_dir, credentials) = write_credentials();
        Ec2Provider::new(
            Ec2Config {
                region: Some("us-east-1".into()),
                endpoint: Some("http://127.0.0.1:1".into()),
                filters: vec![Filter {
                    name: "tag:cluster".into(),
                    values: vec!["edge".into(), "core".into()],
                }],
                credentials_file: Some(credentials),
                ..Ec2Config::default()
            },
            Path::new("."),
        )
        .unwrap()
    }

    const PAGE: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<DescribeInstancesResponse xmlns="http://ec2.amazonaws.com/doc/2016-11-15/">
  <requestId>r</requestId>
  <reservationSet>
    <item>
      <reservationId>r-1</reservationId>
      <groupSet/>
      <instancesSet>
        <item>
          <instanceId>i-1</instanceId>
          <instanceState><code>16</code><name>running</name></instanceState>
          <privateDnsName>ip-10-0-0-1.ec2.internal</privateDnsName>
          <dnsName>ec2-54-0-0-1.compute-1.amazonaws.com</dnsName>
          <instanceType>t3.small</instanceType>
          <placement><availabilityZone>us-east-1a</availabilityZone></placement>
          <privateIpAddress>10.0.0.1</privateIpAddress>
          <ipAddress>54.0.0.1</ipAddress>
          <networkInterfaceSet><item><privateDnsName>other</privateDnsName></item></networkInterfaceSet>
          <tagSet><item><key>cluster</key><value>edge</value></item><item><key>Name</key><value>Web-1</value></item></tagSet>
        </item>
        <item>
          <instanceId>i-2</instanceId>
          <instanceState><code>80</code><name>stopped</name></instanceState>
          <privateDnsName>ip-10-0-0-2.ec2.internal</privateDnsName>
          <dnsName/>
          <placement><availabilityZone>us-east-1b</availabilityZone></placement>
          <privateIpAddress>10.0.0.2</privateIpAddress>
          <tagSet/>
        </item>
        <item>
          <instanceId>i-3</instanceId>
          <instanceState><code>48</code><name>terminated</name></instanceState>
        </item>
        <item>
          <instanceId>i-4</instanceId>
          <instanceState><code>0</code><name>pending</name></instanceState>
          <privateDnsName/>
        </item>
      </instancesSet>
    </item>
  </reservationSet>
  <nextToken>token-2</nextToken>
</DescribeInstancesResponse>"#;

    #[test]
    fn an_answer_becomes_instances() {
        let p = provider();
        let answer: DescribeInstancesResponse = quick_xml::de::from_str(PAGE).unwrap();
        assert_eq!(answer.next_token.as_deref(), Some("token-2"));
        let instances: Vec<Instance> = answer
            .reservation_set
            .item
            .into_iter()
            .flat_map(|r| r.instances_set.item)
            .filter_map(|i| p.instance(i))
            .collect();
        assert_eq!(instances.len(), 3, "the terminated one is gone");
        let web = &instances[0];
        assert_eq!(web.name, "Web-1");
        assert_eq!(web.external_id, "i-1");
        assert_eq!(web.provider_id.as_deref(), Some("aws:///us-east-1a/i-1"));
        assert_eq!(web.labels[INSTANCE_TYPE_LABEL], "t3.small");
        assert_eq!(
            web.zone,
            Some(Zone {
                region: "us-east-1".into(),
                zone: "us-east-1a".into()
            })
        );
        let kinds: Vec<(AddressKind, &str)> = web
            .addresses
            .iter()
            .map(|a| (a.kind, a.address.as_str()))
            .collect();
        assert_eq!(
            kinds,
            [
                (AddressKind::InternalIP, "10.0.0.1"),
                (AddressKind::ExternalIP, "54.0.0.1"),
                (AddressKind::InternalDNS, "ip-10-0-0-1.ec2.internal"),
                (AddressKind::Hostname, "ip-10-0-0-1.ec2.internal"),
                (
                    AddressKind::ExternalDNS,
                    "ec2-54-0-0-1.compute-1.amazonaws.com"
                ),
            ]
        );
        assert_eq!(web.state, InstanceState::Running);
        let stopped = &instances[1];
        assert_eq!(
            stopped.name, "ip-10-0-0-2.ec2.internal",
            "no Name tag: private DNS"
        );
        assert_eq!(stopped.state, InstanceState::Stopped);
        assert_eq!(stopped.addresses.len(), 3, "empty dnsName is no address");
        let pending = &instances[2];
        assert_eq!(pending.name, "i-4", "no tag, no DNS: the instance id");
        assert_eq!(pending.state, InstanceState::Other("pending".into()));
    }

    #[test]
    fn error_documents_are_read() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<Response><Errors><Error><Code>AuthFailure</Code><Message>AWS was not able to validate the provided access credentials</Message></Error></Errors><RequestID>x</RequestID></Response>"#;
        let doc: ErrorResponse = quick_xml::de::from_str(xml).unwrap();
        assert_eq!(doc.errors.error[0].code, "AuthFailure");
        let e = AwsError::Api {
            status: 401,
            code: "AuthFailure".into(),
            message: "m".into(),
        };
        assert_eq!(e.to_string(), "AuthFailure: m (HTTP 401)");
    }

    #[test]
    fn refused_credentials_are_told_from_other_api_errors() {
        let api = |status, code: &str| AwsError::Api {
            status,
            code: code.into(),
            message: "m".into(),
        };
        let cloud = |e: AwsError| e.into_cloud("said".into());
        assert_eq!(
            cloud(api(401, "AuthFailure")),
            CloudError::Auth {
                status: 401,
                message: "said".into()
            }
        );
        assert!(matches!(
            cloud(api(403, "UnauthorizedOperation")),
            CloudError::Auth { status: 403, .. }
        ));
        assert!(matches!(
            cloud(api(400, "SignatureDoesNotMatch")),
            CloudError::Auth { status: 400, .. }
        ));
        let throttled = cloud(api(503, "RequestLimitExceeded"));
        assert!(matches!(throttled, CloudError::Status { status: 503, .. }));
        assert!(throttled.is_transient());
        assert!(!cloud(api(400, "InvalidParameterValue")).is_transient());
        assert!(!cloud(api(401, "AuthFailure")).is_transient());
        assert!(cloud(AwsError::Transport("refused".into())).is_transient());
        assert_eq!(
            cloud(AwsError::Credentials("gone".into())),
            CloudError::File("said".into())
        );
    }

    #[test]
    fn filters_and_tokens_become_query_parameters() {
        let p = provider();
        let params = p.page_params(Some("t"));
        let get = |k: &str| params.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("MaxResults"), Some("1000"));
        assert_eq!(get("Filter.1.Name"), Some("tag:cluster"));
        assert_eq!(get("Filter.1.Value.2"), Some("core"));
        assert_eq!(get("NextToken"), Some("t"));
    }

    #[test]
    fn credentials_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c");
        std::fs::write(
            &path,
            "# shared-credentials style\n[default]\naws_access_key_id = AKID\naws_secret_access_key = \"s\"\naws_session_token=tok\n",
        )
        .unwrap();
        let c = CredentialSource::File(path.clone()).load().unwrap();
        assert_eq!(c.access_key_id(), "AKID");
        assert_eq!(c.secret_access_key(), "s");
        assert_eq!(c.session_token(), Some("tok"));
        std::fs::write(&path, "AWS_ACCESS_KEY_ID=AKID\n").unwrap();
        let err = CredentialSource::File(path.clone()).load().unwrap_err();
        assert!(err.contains("AWS_SECRET_ACCESS_KEY is missing"), "{err}");
        std::fs::write(
            &path,
            "[a]\nAWS_ACCESS_KEY_ID=1\n[b]\nAWS_ACCESS_KEY_ID=2\n",
        )
        .unwrap();
        let err = CredentialSource::File(path).load().unwrap_err();
        assert!(err.contains(":4:") && err.contains("twice"), "{err}");
    }

    #[test]
    fn config_errors() {
        let bad = |c: Ec2Config| Ec2Provider::new(c, Path::new(".")).err().unwrap();
        let (_dir, credentials) = write_credentials();
        let base = Ec2Config {
            region: Some("r".into()),
            credentials_file: Some(credentials),
            ..Ec2Config::default()
        };
        assert!(bad(Ec2Config {
            max_results: Some(2000),
            ..base.clone()
        })
        .contains("5-1000"));
        assert!(bad(Ec2Config {
            endpoint: Some("ftp://x".into()),
            ..base.clone()
        })
        .contains("http"));
        assert!(bad(Ec2Config {
            filters: vec![Filter {
                name: "tag:a".into(),
                values: vec![]
            }],
            ..base.clone()
        })
        .contains("at least one value"));
        assert!(bad(Ec2Config {
            credentials_file: Some("/nonexistent/aws.env".into()),
            ..base
        })
        .contains("cannot read credentialsFile"));
    }

    #[test]
    fn deep_and_wide_answers_are_read_without_recursion_limits_tripping() {
        // Unknown elements nested 100k deep inside an instance are skipped.
        let deep = format!(
            "<DescribeInstancesResponse><reservationSet><item><instancesSet><item>\
             <instanceId>i-1</instanceId><instanceState><name>running</name></instanceState>\
             {}{}</item></instancesSet></item></reservationSet></DescribeInstancesResponse>",
            "<x>".repeat(100_000),
            "</x>".repeat(100_000)
        );
        let answer: Result<DescribeInstancesResponse, _> = quick_xml::de::from_str(&deep);
        if let Ok(answer) = answer {
            assert_eq!(answer.reservation_set.item.len(), 1);
        }
        let many: String = (0..20_000)
            .map(|i| format!("<item><instanceId>i-{i}</instanceId><instanceState><name>running</name></instanceState></item>"))
            .collect();
        let wide = format!(
            "<DescribeInstancesResponse><reservationSet><item><instancesSet>{many}</instancesSet></item></reservationSet></DescribeInstancesResponse>"
        );
        let answer: DescribeInstancesResponse = quick_xml::de::from_str(&wide).unwrap();
        assert_eq!(
            answer.reservation_set.item[0].instances_set.item.len(),
            20_000
        );
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        const NAMES: [&str; 16] = [
            "DescribeInstancesResponse",
            "reservationSet",
            "instancesSet",
            "item",
            "instanceId",
            "instanceState",
            "name",
            "privateDnsName",
            "dnsName",
            "placement",
            "availabilityZone",
            "privateIpAddress",
            "tagSet",
            "key",
            "value",
            "nextToken",
        ];

        /// XML made of the answer's element names (and others), in any order and nesting.
        fn xml() -> impl Strategy<Value = String> {
            let leaf = prop_oneof![
                "[ -;=?-~]{0,12}",
                Just("&amp;".to_string()),
                Just("&bogus;".to_string()),
                Just("<![CDATA[x]]>".to_string()),
            ];
            leaf.prop_recursive(6, 48, 5, |inner| {
                (
                    prop_oneof![
                        prop::sample::select(NAMES.to_vec()).prop_map(String::from),
                        "[a-z]{1,4}"
                    ],
                    prop::collection::vec(inner, 0..5),
                    any::<bool>(),
                )
                    .prop_map(|(name, children, closed)| {
                        let body = children.concat();
                        if closed {
                            format!("<{name}>{body}</{name}>")
                        } else {
                            format!("<{name}>{body}")
                        }
                    })
            })
        }

        proptest! {
            #[test]
            fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
                let _ = quick_xml::de::from_str::<DescribeInstancesResponse>(&text);
                let _ = quick_xml::de::from_str::<ErrorResponse>(&text);
            }

            #[test]
            fn answer_like_xml_never_panics(body in xml()) {
                let p = provider();
                let text = format!("<DescribeInstancesResponse>{body}</DescribeInstancesResponse>");
                if let Ok(answer) = quick_xml::de::from_str::<DescribeInstancesResponse>(&text) {
                    for raw in answer.reservation_set.item.into_iter().flat_map(|r| r.instances_set.item) {
                        if let Some(instance) = p.instance(raw) {
                            prop_assert!(!instance.name.is_empty() || instance.external_id.is_empty());
                        }
                    }
                }
                let _ = quick_xml::de::from_str::<ErrorResponse>(&format!("<Response>{body}</Response>"));
            }
        }
    }
}
