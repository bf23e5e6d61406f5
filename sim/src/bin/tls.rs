//! `nodekeeper-bench --push --tls client-certs`: the controller serves
//! https with `--tls-cert-file`, `--tls-private-key-file` and
//! `--client-ca-file`, and every simulated kubelet authenticates with a
//! client certificate of its own (`CN=system:node:NAME`, `O=system:nodes`,
//! as kubelets' certificates are; ECDSA P-256, what kubelet's CSRs ask
//! for), read from a file as a kubelet reads its kubelet-client-current.pem.
//! One CA signs the serving certificate, the kubelets' and the bench's own
//! (it reads /metrics as an operator).

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
};

/// How the controller is reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(super) enum TlsMode {
    /// https, each kubelet with its own client certificate (`--client-ca-file`).
    ClientCerts,
}

/// The run's CA, and what the bench itself presents.
pub(super) struct Pki {
    ca: Issuer<'static, KeyPair>,
    ca_pem: String,
    /// The serving certificate (for 127.0.0.1) and its key, PEM.
    serving: (String, String),
    /// The bench's own client certificate and key, PEM (an operator).
    operator: String,
}

/// The files a run hands to the controller and the sims, and what making them cost.
pub(super) struct Files {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
    node_certs: PathBuf,
    /// Node certificates made, and the time it took (keys, signing, files).
    pub(super) made: (usize, Duration),
}

impl Pki {
    pub(super) fn new() -> Result<Pki> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "nodekeeper-bench CA");
        let ca_pem = params.self_signed(&key)?.pem();
        let ca = Issuer::new(params, key);

        let serving_key = KeyPair::generate()?;
        let mut params = CertificateParams::new(vec!["127.0.0.1".to_string()])?;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let serving = (
            params.signed_by(&serving_key, &ca)?.pem(),
            serving_key.serialize_pem(),
        );
        let mut pki = Pki {
            ca,
            ca_pem,
            serving,
            operator: String::new(),
        };
        pki.operator = pki.client_pem("nodekeeper-bench", "site-operators")?;
        Ok(pki)
    }

    /// A client certificate `CN=cn, O=o` and its key, in one PEM.
    fn client_pem(&self, cn: &str, o: &str) -> Result<String> {
        let key = KeyPair::generate()?;
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.distinguished_name.push(DnType::OrganizationName, o);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let cert = params.signed_by(&key, &self.ca)?;
        Ok(format!("{}{}", cert.pem(), key.serialize_pem()))
    }

    /// The bench's HTTP client: trusts the CA, presents the operator's certificate.
    pub(super) fn client(&self, timeout: Duration) -> Result<reqwest::Client> {
        Ok(reqwest::Client::builder()
            .no_proxy()
            .timeout(timeout)
            .tls_certs_only(reqwest::Certificate::from_pem_bundle(
                self.ca_pem.as_bytes(),
            )?)
            .identity(reqwest::Identity::from_pem(self.operator.as_bytes())?)
            .build()?)
    }

    /// Writes the CA and serving files into `dir`, and one client
    /// certificate per node into `dir/node-certs/NAME.pem`.
    pub(super) fn write(&self, dir: &Path, nodes: impl Iterator<Item = String>) -> Result<Files> {
        let write = |path: &Path, text: &str| {
            fs::write(path, text).with_context(|| format!("cannot write {}", path.display()))
        };
        let ca = dir.join("ca.pem");
        let cert = dir.join("serving.pem");
        let key = dir.join("serving-key.pem");
        write(&ca, &self.ca_pem)?;
        write(&cert, &self.serving.0)?;
        write(&key, &self.serving.1)?;
        let node_certs = dir.join("node-certs");
        fs::create_dir(&node_certs)
            .with_context(|| format!("cannot create {}", node_certs.display()))?;
        let started = Instant::now();
        let mut count = 0;
        for name in nodes {
            let pem = self.client_pem(&format!("system:node:{name}"), "system:nodes")?;
            write(&node_certs.join(format!("{name}.pem")), &pem)?;
            count += 1;
        }
        Ok(Files {
            ca,
            cert,
            key,
            node_certs,
            made: (count, started.elapsed()),
        })
    }
}

impl Files {
    /// The controller's flags for them.
    pub(super) fn controller_args(&self) -> Vec<String> {
        vec![
            "--tls-cert-file".into(),
            self.cert.to_string_lossy().into_owned(),
            "--tls-private-key-file".into(),
            self.key.to_string_lossy().into_owned(),
            "--client-ca-file".into(),
            self.ca.to_string_lossy().into_owned(),
        ]
    }

    /// The sims' flags for them (with an https `--push`).
    pub(super) fn sim_args(&self) -> Vec<String> {
        vec![
            "--push-ca-file".into(),
            self.ca.to_string_lossy().into_owned(),
            "--push-cert-dir".into(),
            self.node_certs.to_string_lossy().into_owned(),
        ]
    }
}
