//! Reaching the API server: `--kubeconfig`, `--master`, or the pod's own
//! service account, through the `kube` crate (TLS, client certificates,
//! tokens and exec plugins as kubectl handles them).

use std::path::PathBuf;
use std::time::Duration;

use kube::client::{ClientBuilder, DynBody};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};
use tower::{Layer, Service};

/// Where the API server is, as the flags said.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApiServer {
    /// `--kubeconfig` (its current context), optionally with `--master`
    /// overriding the server address as kube-controller-manager does.
    Kubeconfig {
        path: PathBuf,
        master: Option<String>,
    },
    /// `--master` alone: a URL, no credentials.
    Master(String),
    /// Neither flag, inside a pod: the service account.
    InCluster,
}

impl ApiServer {
    /// What the flags ask for, or `None` when nodekeeper runs alone. Inside a
    /// pod (`KUBERNETES_SERVICE_HOST` set and a service-account token
    /// mounted) the pod's API server is used unless `--standalone` was given.
    pub fn from_flags(
        kubeconfig: Option<PathBuf>,
        master: Option<String>,
        standalone: bool,
    ) -> Option<ApiServer> {
        match (kubeconfig, master) {
            (Some(path), master) => Some(ApiServer::Kubeconfig { path, master }),
            (None, Some(url)) => Some(ApiServer::Master(url)),
            (None, None) if !standalone && in_a_pod() => Some(ApiServer::InCluster),
            (None, None) => None,
        }
    }

    pub fn describe(&self) -> String {
        match self {
            ApiServer::Kubeconfig { path, master: None } => {
                format!("the current context of {}", path.display())
            }
            ApiServer::Kubeconfig {
                path,
                master: Some(m),
            } => format!("{m} with the credentials of {}", path.display()),
            ApiServer::Master(m) => m.clone(),
            ApiServer::InCluster => "the in-cluster API server (service account)".into(),
        }
    }

    /// Builds the clients. Every request has `timeout` to connect, send and
    /// answer; retries are the mirror's (within its budget), not the client's.
    /// The watch has its own client, whose answers may take as long as a
    /// watch lasts.
    pub async fn connect(&self, timeout: Duration) -> Result<Connection, ClientError> {
        let mut config = match self {
            ApiServer::Kubeconfig { path, master } => {
                let kubeconfig = Kubeconfig::read_from(path).map_err(|e| ClientError {
                    what: format!("cannot read the kubeconfig {}", path.display()),
                    reason: e.to_string(),
                })?;
                let mut config =
                    Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                        .await
                        .map_err(|e| ClientError {
                            what: format!("the kubeconfig {} is not usable", path.display()),
                            reason: e.to_string(),
                        })?;
                if let Some(master) = master {
                    config.cluster_url = parse_url(master)?;
                }
                config
            }
            ApiServer::Master(url) => Config::new(parse_url(url)?),
            ApiServer::InCluster => Config::incluster().map_err(|e| ClientError {
                what: "the in-cluster service account is not usable".into(),
                reason: e.to_string(),
            })?,
        };
        config.connect_timeout = Some(timeout);
        config.read_timeout = Some(timeout);
        config.write_timeout = Some(timeout);
        config.reset_reader_on_write = true;
        config.default_retry = false;
        let url = config.cluster_url.to_string();
        let mut watching = config.clone();
        watching.read_timeout = Some(WATCH_READ_TIMEOUT);
        let build = |config: Config| {
            ClientBuilder::try_from(config)
                .map(|b| b.with_layer(&RetryAfterLayer).build())
                .map_err(|e| ClientError {
                    what: format!("cannot set up a client for {url}"),
                    reason: e.to_string(),
                })
        };
        Ok(Connection {
            client: build(config)?,
            watch_client: build(watching)?,
            url: url.clone(),
        })
    }
}

/// How long a watch may go without a byte: longer than the watch itself
/// asks the API server to last, which ends it cleanly.
pub const WATCH_READ_TIMEOUT: Duration = Duration::from_secs(330);

/// The clients the mirror talks to the API server through.
#[derive(Clone)]
pub struct Connection {
    /// Requests: every one with the request timeout.
    pub client: Client,
    /// The watch of the API server's nodes.
    pub watch_client: Client,
    /// The API server's address, as the configuration resolved it.
    pub url: String,
}

/// Makes a `429 Too Many Requests` carry its `Retry-After` where kube's error
/// keeps it: API Priority and Fairness answers 429 with a plain-text body
/// and the wait in a header, which kube would drop; this turns the answer
/// into a `Status` whose `details.retryAfterSeconds` is that wait.
#[derive(Clone, Copy)]
struct RetryAfterLayer;

impl<S> Layer<S> for RetryAfterLayer {
    type Service = RetryAfterService<S>;

    fn layer(&self, inner: S) -> RetryAfterService<S> {
        RetryAfterService(inner)
    }
}

#[derive(Clone)]
struct RetryAfterService<S>(S);

type KubeResponse = http::Response<Box<DynBody>>;

impl<S, Req> Service<Req> for RetryAfterService<S>
where
    S: Service<Req, Response = KubeResponse>,
    S::Future: Send + 'static,
{
    type Response = KubeResponse;
    type Error = S::Error;
    type Future = futures_util::future::MapOk<S::Future, fn(KubeResponse) -> KubeResponse>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, request: Req) -> Self::Future {
        use futures_util::TryFutureExt;
        self.0
            .call(request)
            .map_ok(retry_after_as_status as fn(KubeResponse) -> KubeResponse)
    }
}

/// A 429 with a `Retry-After` header becomes a `Status` naming the wait.
fn retry_after_as_status(response: KubeResponse) -> KubeResponse {
    if response.status() != http::StatusCode::TOO_MANY_REQUESTS {
        return response;
    }
    let Some(seconds) = response
        .headers()
        .get(http::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u32>().ok())
        .and_then(|v| i32::try_from(v).ok())
    else {
        return response;
    };
    let status = serde_json::to_vec(&crate::k8s::too_many_requests(seconds)).unwrap_or_default();
    let (parts, _) = response.into_parts();
    let body = http_body_util::BodyExt::map_err(
        http_body_util::Full::new(bytes::Bytes::from(status)),
        |never: std::convert::Infallible| -> tower::BoxError { match never {} },
    );
    http::Response::from_parts(parts, Box::new(body) as Box<DynBody>)
}

/// The API server cannot be reached as configured.
#[derive(Debug, thiserror::Error)]
#[error("{what}: {reason}")]
pub struct ClientError {
    pub what: String,
    pub reason: String,
}

fn parse_url(url: &str) -> Result<http::Uri, ClientError> {
    let uri: http::Uri = url.parse().map_err(|e| ClientError {
        what: format!("--master {url:?} is not a URL"),
        reason: format!("{e}; give it as https://HOST:PORT"),
    })?;
    if uri.scheme().is_none() || uri.host().is_none() {
        return Err(ClientError {
            what: format!("--master {url:?} is not a URL"),
            reason: "it needs a scheme and a host, as in https://HOST:PORT".into(),
        });
    }
    Ok(uri)
}

fn in_a_pod() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        && std::path::Path::new("/var/run/secrets/kubernetes.io/serviceaccount/token").exists()
}

#[cfg(test)]
// Tests write and read their fixtures with std::fs: blocking a test's own
// runtime stalls nothing else.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn flags_choose_the_api_server() {
        let kc = Some(PathBuf::from("/k"));
        assert_eq!(
            ApiServer::from_flags(kc.clone(), Some("https://m:6443".into()), false),
            Some(ApiServer::Kubeconfig {
                path: "/k".into(),
                master: Some("https://m:6443".into())
            })
        );
        assert_eq!(
            ApiServer::from_flags(None, Some("http://127.0.0.1:1".into()), false),
            Some(ApiServer::Master("http://127.0.0.1:1".into()))
        );
        assert_eq!(ApiServer::from_flags(None, None, true), None);
    }

    #[tokio::test]
    async fn bad_addresses_and_files_say_what_is_wrong() {
        crate::install_crypto_provider();
        let t = Duration::from_secs(1);
        let err = ApiServer::Master("not a url".into())
            .connect(t)
            .await
            .err()
            .expect("refused");
        assert!(err.to_string().contains("is not a URL"), "{err}");
        let err = ApiServer::Master("localhost:6443".into())
            .connect(t)
            .await
            .err()
            .expect("refused");
        assert!(err.to_string().contains("https://HOST:PORT"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let err = ApiServer::Kubeconfig {
            path: path.clone(),
            master: None,
        }
        .connect(t)
        .await
        .err()
        .expect("refused");
        assert!(
            err.to_string().contains("cannot read the kubeconfig"),
            "{err}"
        );
        std::fs::write(&path, "apiVersion: v1\nkind: Config\nclusters: []\n").unwrap();
        let err = ApiServer::Kubeconfig { path, master: None }
            .connect(t)
            .await
            .err()
            .expect("refused");
        assert!(err.to_string().contains("is not usable"), "{err}");
    }

    #[tokio::test]
    async fn a_kubeconfig_with_a_token_gives_a_client() {
        crate::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: site\n\
             clusters: [{name: site, cluster: {server: 'https://127.0.0.1:6443'}}]\n\
             users: [{name: admin, user: {token: abc}}]\n\
             contexts: [{name: site, context: {cluster: site, user: admin}}]\n",
        )
        .unwrap();
        let connection = ApiServer::Kubeconfig {
            path: path.clone(),
            master: Some("http://127.0.0.1:7000".into()),
        }
        .connect(Duration::from_secs(1))
        .await
        .unwrap();
        assert_eq!(connection.url, "http://127.0.0.1:7000/");
    }
}
