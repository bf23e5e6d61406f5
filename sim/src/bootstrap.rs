//! A kubelet's TLS bootstrap, as a v1.33 kubelet does it
//! (kubernetes `pkg/kubelet/certificate/bootstrap/bootstrap.go`
//! `LoadClientCert` → `requestNodeCertificate`, and client-go
//! `util/certificate/csr/csr.go`): make an ECDSA P-256 key, send a CSR for
//! `CN=system:node:NAME, O=system:nodes` with usages digital signature and
//! client auth, authenticated by the bootstrap token, then wait for the
//! certificate as `WaitForCertificate` does (`csr.go:180-197`): a list and
//! then a watch, both with `fieldSelector=metadata.name=NAME`, until the
//! CSR is issued, denied or failed.

use std::time::Duration;

use serde_json::{json, Value};

/// The key and certificate a bootstrap ends with, as PEM.
#[derive(Debug, Clone)]
pub struct Bootstrapped {
    pub csr_name: String,
    pub key_pem: String,
    pub cert_pem: String,
}

/// Why a bootstrap did not end with a certificate.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    #[error("the server refused the CSR: {status}: {body}")]
    Refused { status: u16, body: String },
    #[error("the CSR {0:?} was denied")]
    Denied(String),
    #[error("the CSR {0:?} failed: {1}")]
    Failed(String, String),
    #[error("no certificate for the CSR {0:?} within the timeout")]
    Timeout(String),
    #[error("{0}")]
    Other(String),
}

/// The largest answer read (a list of CSRs, a watch's line).
const ANSWER_CAP: usize = 4 << 20;
const CSRS: &str = "/apis/certificates.k8s.io/v1/certificatesigningrequests";

/// Makes a key, asks `server` for a client certificate for node `node`
/// with the bootstrap `token` (none: with what `client` carries, a
/// renewal by the node's current certificate), and waits up to `timeout`
/// for it.
/// `on_created` hears the CSR's name once it is sent (to approve it).
pub async fn load_client_cert(
    client: &reqwest::Client,
    server: &str,
    token: Option<&str>,
    node: &str,
    timeout: Duration,
    on_created: impl FnOnce(&str),
) -> Result<Bootstrapped, BootstrapError> {
    let other = |e: &dyn std::fmt::Display| BootstrapError::Other(e.to_string());
    // keyutil.MakeEllipticPrivateKeyPEM: P-256.
    let key =
        rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).map_err(|e| other(&e))?;
    let mut params = rcgen::CertificateParams::default();
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, format!("system:node:{node}"));
    let request = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| other(&e))?;
    use base64::Engine;
    let body = json!({
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        // client-go's RequestCertificate names it this way when given no name.
        "metadata": {"generateName": "csr-"},
        "spec": {
            "request": base64::engine::general_purpose::STANDARD.encode(request.as_bytes()),
            "signerName": "kubernetes.io/kube-apiserver-client-kubelet",
            // An ECDSA key: no key encipherment (bootstrap.go requestNodeCertificate).
            "usages": ["digital signature", "client auth"],
        },
    });
    let response = with_token(client.post(format!("{server}{CSRS}")), token)
        .json(&body)
        .send()
        .await
        .map_err(|e| other(&e))?;
    let status = response.status().as_u16();
    let answer = read_capped(response).await?;
    if status != 201 {
        return Err(BootstrapError::Refused {
            status,
            body: String::from_utf8_lossy(&answer).into_owned(),
        });
    }
    let created: Value = serde_json::from_slice(&answer).map_err(|e| other(&e))?;
    let name = created["metadata"]["name"]
        .as_str()
        .ok_or_else(|| BootstrapError::Other("the created CSR has no name".into()))?
        .to_string();
    on_created(&name);
    let wait = wait_for_certificate(client, server, token, &name);
    let cert_pem = tokio::time::timeout(timeout, wait)
        .await
        .map_err(|_| BootstrapError::Timeout(name.clone()))??;
    Ok(Bootstrapped {
        csr_name: name,
        key_pem: key.serialize_pem(),
        cert_pem,
    })
}

/// The certificate of a CSR, once issued; an error once denied or failed.
fn outcome(csr: &Value) -> Option<Result<String, BootstrapError>> {
    let name = csr["metadata"]["name"].as_str().unwrap_or("").to_string();
    for c in csr["status"]["conditions"].as_array().into_iter().flatten() {
        match c["type"].as_str() {
            Some("Denied") => return Some(Err(BootstrapError::Denied(name))),
            Some("Failed") => {
                let why = c["message"].as_str().unwrap_or("").to_string();
                return Some(Err(BootstrapError::Failed(name, why)));
            }
            _ => {}
        }
    }
    let cert = csr["status"]["certificate"].as_str()?;
    use base64::Engine;
    let pem = base64::engine::general_purpose::STANDARD
        .decode(cert)
        .ok()?;
    Some(Ok(String::from_utf8_lossy(&pem).into_owned()))
}

/// `WaitForCertificate`: list, then watch from the list's version, both
/// selected by name; a watch that ends is started again.
async fn wait_for_certificate(
    client: &reqwest::Client,
    server: &str,
    token: Option<&str>,
    name: &str,
) -> Result<String, BootstrapError> {
    let other = |e: &dyn std::fmt::Display| BootstrapError::Other(e.to_string());
    let selector = format!("fieldSelector=metadata.name%3D{name}");
    // Each round is one list and one watch of at most a minute; the
    // caller's timeout bounds the rounds.
    loop {
        let list = with_token(client.get(format!("{server}{CSRS}?{selector}")), token)
            .send()
            .await
            .map_err(|e| other(&e))?;
        let list: Value =
            serde_json::from_slice(&read_capped(list).await?).map_err(|e| other(&e))?;
        for item in list["items"].as_array().into_iter().flatten() {
            if let Some(done) = outcome(item) {
                return done;
            }
        }
        let version = list["metadata"]["resourceVersion"].as_str().unwrap_or("0");
        let url = format!(
            "{server}{CSRS}?{selector}&watch=true&resourceVersion={version}&timeoutSeconds=60&allowWatchBookmarks=true"
        );
        let mut watch = with_token(client.get(url), token)
            .timeout(Duration::from_secs(90))
            .send()
            .await
            .map_err(|e| other(&e))?;
        if !watch.status().is_success() {
            // Refused for now (a 429 when the watch budget is full): list
            // and watch again after the wait it asks for, as a reflector
            // backs off (client-go `tools/cache/reflector.go`).
            let wait = watch
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                .unwrap_or(1)
                .clamp(1, 30);
            tokio::time::sleep(Duration::from_secs(wait)).await;
            continue;
        }
        let mut pending = Vec::new();
        while let Some(chunk) = watch.chunk().await.map_err(|e| other(&e))? {
            pending.extend_from_slice(&chunk);
            if pending.len() > ANSWER_CAP {
                return Err(BootstrapError::Other("a watch line over 4 MiB".into()));
            }
            while let Some(end) = pending.iter().position(|b| *b == b'\n') {
                let line: Vec<u8> = pending.drain(..=end).collect();
                let Ok(event) = serde_json::from_slice::<Value>(&line) else {
                    continue;
                };
                if let Some(done) = outcome(&event["object"]) {
                    return done;
                }
            }
        }
    }
}

fn with_token(request: reqwest::RequestBuilder, token: Option<&str>) -> reqwest::RequestBuilder {
    match token {
        Some(token) => request.bearer_auth(token),
        None => request,
    }
}

async fn read_capped(mut response: reqwest::Response) -> Result<Vec<u8>, BootstrapError> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| BootstrapError::Other(e.to_string()))?
    {
        if body.len() + chunk.len() > ANSWER_CAP {
            return Err(BootstrapError::Other("an answer over 4 MiB".into()));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}
