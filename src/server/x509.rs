//! Client certificates (`--client-ca-file`) and the serving certificate,
//! both re-read when their files change (`reload`).
//!
//! As kube-apiserver, the TLS server asks for a client certificate without
//! requiring one. The handshake takes any certificate whose key the client
//! proves it holds; the chain is then verified against the current CA
//! bundle once per connection ([`ClientCa::identify`]), and a verified
//! certificate's Subject CN is the user and its O values the groups
//! (k8s.io/apiserver pkg/authentication/request/x509/x509.go
//! `CommonNameUserConversion`). A certificate that does not verify
//! authenticates nobody: its requests are refused with 401 unless they carry
//! a valid token, as kube-apiserver's union authenticator answers them.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};

use super::identity::{principal, Principal};
use super::reload::Reloadable;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The CA bundle of `--client-ca-file`, ready to verify client chains.
pub struct ClientCa {
    verifier: Arc<dyn ClientCertVerifier>,
    /// How many CA certificates the bundle holds.
    pub count: usize,
}

impl std::fmt::Debug for ClientCa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCa")
            .field("count", &self.count)
            .finish()
    }
}

impl ClientCa {
    /// Reads a PEM bundle of CA certificates; `origin` names it in errors.
    pub fn parse(pem: &[u8], origin: &str) -> Result<ClientCa, String> {
        let certs = CertificateDer::pem_slice_iter(pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("--client-ca-file {origin} is not a valid PEM bundle: {e}"))?;
        if certs.is_empty() {
            return Err(format!(
                "--client-ca-file {origin} holds no certificate (expected PEM \"BEGIN CERTIFICATE\" blocks of the CA that signs kubelets' client certificates)"
            ));
        }
        let mut roots = rustls::RootCertStore::empty();
        for (i, cert) in certs.iter().enumerate() {
            roots.add(cert.clone()).map_err(|e| {
                format!(
                    "--client-ca-file {origin}: certificate {} cannot be a CA: {e}",
                    i + 1
                )
            })?;
        }
        let verifier = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("--client-ca-file {origin}: {e}"))?;
        Ok(ClientCa {
            verifier,
            count: certs.len(),
        })
    }

    /// Who a connection's client certificate chain (leaf first) names,
    /// verified against this bundle now.
    pub fn identify(&self, chain: &[CertificateDer<'_>]) -> ClientCert {
        let Some((leaf, intermediates)) = chain.split_first() else {
            return ClientCert::None;
        };
        if let Err(e) = self
            .verifier
            .verify_client_cert(leaf, intermediates, UnixTime::now())
        {
            return ClientCert::Invalid(Arc::from(format!(
                "the client certificate does not verify against --client-ca-file: {e}"
            )));
        }
        match subject(leaf) {
            Ok(Some((name, groups))) => ClientCert::Verified(principal(name, groups)),
            // No CN: kube's conversion says "not this authenticator".
            Ok(None) => ClientCert::None,
            Err(e) => ClientCert::Invalid(Arc::from(e)),
        }
    }
}

/// A connection's client certificate, as a request extension.
#[derive(Debug, Clone)]
pub enum ClientCert {
    /// None presented, or one without a Subject CN.
    None,
    /// Verified: who it names.
    Verified(Principal),
    /// Presented but not verified, and why.
    Invalid(Arc<str>),
}

/// The Subject CN (the last, as Go's `pkix.Name` keeps it) and the O values
/// of a certificate; `None` without a CN.
pub fn subject(der: &CertificateDer<'_>) -> Result<Option<(String, Vec<String>)>, String> {
    let (_, cert) = x509_parser::parse_x509_certificate(der)
        .map_err(|e| format!("the client certificate cannot be read: {e}"))?;
    let text = |attr: &x509_parser::x509::AttributeTypeAndValue<'_>| {
        attr.as_str()
            .map(str::to_string)
            .map_err(|e| format!("the client certificate's subject cannot be read: {e}"))
    };
    let mut name = None;
    for cn in cert.subject().iter_common_name() {
        name = Some(text(cn)?);
    }
    let groups = cert
        .subject()
        .iter_organization()
        .map(text)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(name.filter(|n| !n.is_empty()).map(|n| (n, groups)))
}

/// The handshake's verifier: asks for a certificate, requires none, and
/// takes any whose signature proves the client holds its key; the chain is
/// verified after the handshake against the bundle current then
/// ([`ClientCa::identify`]), so a bad certificate is a 401 with a reason,
/// not a broken handshake. No CA names are hinted: a client with one
/// certificate sends it.
#[derive(Debug)]
pub struct RequestClientCert {
    provider: Arc<CryptoProvider>,
}

impl RequestClientCert {
    pub fn new() -> Arc<RequestClientCert> {
        Arc::new(RequestClientCert {
            provider: provider(),
        })
    }
}

impl ClientCertVerifier for RequestClientCert {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        false
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The serving certificate and key of `--tls-cert-file` and
/// `--tls-private-key-file`, as a pair that matches.
pub fn certified_key(
    cert_pem: &[u8],
    cert_file: &str,
    key_pem: &[u8],
    key_file: &str,
) -> Result<CertifiedKey, String> {
    let chain = CertificateDer::pem_slice_iter(cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--tls-cert-file {cert_file} is not a valid PEM certificate: {e}"))?;
    if chain.is_empty() {
        return Err(format!(
            "--tls-cert-file {cert_file} holds no certificate (expected PEM \"BEGIN CERTIFICATE\" blocks)"
        ));
    }
    let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|e| {
        format!(
            "--tls-private-key-file {key_file} holds no usable private key (expected PEM PKCS#8, PKCS#1 or SEC1): {e}"
        )
    })?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| {
        format!(
            "--tls-cert-file {cert_file} and --tls-private-key-file {key_file} do not make a usable pair: {e}"
        )
    })
}

/// The serving certificate, current as last read.
#[derive(Debug)]
pub struct ServingCert(pub Reloadable<CertifiedKey>);

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.current())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Ca = (rcgen::Certificate, rcgen::KeyPair, rcgen::CertificateParams);

    fn ca() -> Ca {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "test-ca");
        (params.self_signed(&key).unwrap(), key, params)
    }

    fn client(ca: &Ca, cn: Option<&str>, orgs: &[&str]) -> CertificateDer<'static> {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        if let Some(cn) = cn {
            params
                .distinguished_name
                .push(rcgen::DnType::CommonName, cn);
        }
        for o in orgs {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
        let issuer = rcgen::Issuer::from_params(&ca.2, &ca.1);
        params.signed_by(&key, &issuer).unwrap().der().clone()
    }

    /// CN is the user and every O a group: x509.go:228-238
    /// (`CommonNameUserConversion`, at kubernetes/kubernetes 04bbfcef);
    /// without a CN the certificate authenticates nobody (x509.go:229-231).
    #[test]
    fn a_verified_certificate_names_its_cn_and_its_organizations() {
        let authority = ca();
        let bundle = ClientCa::parse(authority.0.pem().as_bytes(), "ca.pem").unwrap();
        // (rcgen keeps one value per attribute type: one O here.)
        let leaf = client(&authority, Some("system:node:edge-1"), &["system:nodes"]);
        let ClientCert::Verified(who) = bundle.identify(&[leaf]) else {
            panic!("not verified")
        };
        assert_eq!(who.user().name, "system:node:edge-1");
        assert_eq!(who.user().groups, ["system:nodes", "system:authenticated"]);
        assert_eq!(
            who.caller(),
            &super::super::identity::Caller::Node("edge-1".into())
        );
        let nameless = client(&authority, None, &["system:nodes"]);
        assert!(matches!(bundle.identify(&[nameless]), ClientCert::None));
        // Another CA's certificate names nobody, and says why.
        let other = ca();
        let stranger = client(&other, Some("system:node:edge-1"), &["system:nodes"]);
        let ClientCert::Invalid(why) = bundle.identify(&[stranger]) else {
            panic!("verified against the wrong CA")
        };
        assert!(
            why.contains("does not verify against --client-ca-file"),
            "{why}"
        );
    }

    #[test]
    fn bundles_that_cannot_be_used_say_why() {
        let e = ClientCa::parse(b"", "ca.pem").unwrap_err();
        assert!(e.contains("holds no certificate"), "{e}");
        let e = ClientCa::parse(
            b"-----BEGIN CERTIFICATE-----\nnot base64!\n-----END CERTIFICATE-----\n",
            "ca.pem",
        )
        .unwrap_err();
        assert!(e.starts_with("--client-ca-file ca.pem"), "{e}");
    }
}
