//! Kubelet client certificates: reading a certificate signing request, the
//! checks kube-apiserver and kube-controller-manager make of one for the
//! signer `kubernetes.io/kube-apiserver-client-kubelet`, and signing it with
//! the cluster's CA (`--cluster-signing-cert-file`, `--cluster-signing-key-file`).
//!
//! Parsing and the request's signature check are x509-parser's (with ring);
//! issuing is rcgen's.

use std::path::Path;
use std::time::Duration;

use rcgen::{
    CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair,
    KeyUsagePurpose, SerialNumber, SubjectPublicKeyInfo,
};
use x509_parser::prelude::{FromDer, GeneralName, ParsedExtension, X509Certificate};

/// The signer of kubelets' client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";
/// `--cluster-signing-duration`'s default, as kube-controller-manager's: a year.
pub const DEFAULT_SIGNING_DURATION: Duration = Duration::from_secs(8760 * 3600);
/// The shortest `spec.expirationSeconds` kube-apiserver accepts (10 minutes).
pub const MIN_EXPIRATION_SECONDS: i32 = 600;
/// How far before now an issued certificate starts, for clocks a little behind
/// (upstream `pkg/controller/certificates/authority/authority.go` backdates 5 min).
const BACKDATE: Duration = Duration::from_secs(5 * 60);

/// What a certificate signing request asks for, as read from its PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub common_name: String,
    /// Every `O` of the subject, in order.
    pub organizations: Vec<String>,
    pub dns_names: usize,
    pub emails: usize,
    pub ips: usize,
    pub uris: usize,
    /// The public key, as DER SubjectPublicKeyInfo.
    pub public_key: Vec<u8>,
}

/// Reads `spec.request`: one PEM block `CERTIFICATE REQUEST` whose signature
/// is the key's own (kubernetes `pkg/apis/certificates/helpers.go` `ParseCSR`;
/// the signature as Go's `x509.ParseCertificateRequest` callers check it).
pub fn parse_request(pem_bytes: &[u8]) -> Result<Request, String> {
    let text = std::str::from_utf8(pem_bytes)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    let block = pem_block(text, "CERTIFICATE REQUEST")
        .ok_or_else(|| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    let (rest, csr) =
        x509_parser::certification_request::X509CertificationRequest::from_der(&block)
            .map_err(|e| format!("the certificate request cannot be read: {e}"))?;
    if !rest.is_empty() {
        return Err("the certificate request has bytes after its end".into());
    }
    csr.verify_signature()
        .map_err(|e| format!("the certificate request's signature is not its key's: {e}"))?;
    let info = &csr.certification_request_info;
    let text_of = |attr: &x509_parser::x509::AttributeTypeAndValue| {
        attr.as_str().map(str::to_string).map_err(|_| {
            "the certificate request's subject holds a value that is not text".to_string()
        })
    };
    let common_name = match info.subject.iter_common_name().next() {
        Some(cn) => text_of(cn)?,
        None => String::new(),
    };
    let organizations = info
        .subject
        .iter_organization()
        .map(text_of)
        .collect::<Result<Vec<_>, _>>()?;
    let mut request = Request {
        common_name,
        organizations,
        dns_names: 0,
        emails: 0,
        ips: 0,
        uris: 0,
        public_key: info.subject_pki.raw.to_vec(),
    };
    for ext in csr.requested_extensions().into_iter().flatten() {
        if let ParsedExtension::SubjectAlternativeName(san) = ext {
            for name in &san.general_names {
                match name {
                    GeneralName::DNSName(_) => request.dns_names += 1,
                    GeneralName::RFC822Name(_) => request.emails += 1,
                    GeneralName::IPAddress(_) => request.ips += 1,
                    GeneralName::URI(_) => request.uris += 1,
                    _ => {}
                }
            }
        }
    }
    Ok(request)
}

/// The checks of a kubelet client certificate request, in upstream's order
/// and words (kubernetes `pkg/apis/certificates/helpers.go`
/// `ValidateKubeletClientCSR`): O exactly `system:nodes`, no SANs, CN
/// `system:node:…`, usages `digital signature` + `client auth`, with or
/// without `key encipherment`.
pub fn check_kubelet_client(request: &Request, usages: &[String]) -> Result<(), String> {
    if request.organizations != ["system:nodes"] {
        return Err("subject organization is not system:nodes".into());
    }
    for (count, what) in [
        (request.dns_names, "DNS"),
        (request.emails, "Email"),
        (request.ips, "IP"),
        (request.uris, "URI"),
    ] {
        if count > 0 {
            return Err(format!("{what} subjectAltNames are not allowed"));
        }
    }
    if !request.common_name.starts_with("system:node:") {
        return Err("subject common name does not begin with system:node:".into());
    }
    let mut set: Vec<&str> = usages.iter().map(String::as_str).collect();
    set.sort_unstable();
    set.dedup();
    let with_rsa = ["client auth", "digital signature", "key encipherment"];
    let without = ["client auth", "digital signature"];
    if set != with_rsa && set != without {
        return Err("usages did not match [client auth digital signature key encipherment]".into());
    }
    Ok(())
}

/// The node a kubelet client request is for: its CN after `system:node:`.
pub fn node_of(request: &Request) -> Option<&str> {
    request
        .common_name
        .strip_prefix("system:node:")
        .filter(|n| !n.is_empty())
}

/// A certificate issued.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Issued {
    /// PEM, the certificate alone (as upstream's signer writes `status.certificate`).
    pub pem: String,
    /// The serial number, in hex.
    pub serial: String,
    pub not_before: time::OffsetDateTime,
    pub not_after: time::OffsetDateTime,
}

/// The cluster's CA, loaded from `--cluster-signing-cert-file` and
/// `--cluster-signing-key-file`.
pub struct Signer {
    issuer: Issuer<'static, KeyPair>,
    /// The CA's own end of validity: nothing is issued past it.
    ca_not_after: time::OffsetDateTime,
    duration: Duration,
}

impl std::fmt::Debug for Signer {
    // Never print the key.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Signer")
            .field("ca_not_after", &self.ca_not_after)
            .field("duration", &self.duration)
            .finish()
    }
}

impl Signer {
    /// Reads the CA's certificate and key, each named in errors by its flag.
    pub fn load(cert: &Path, key: &Path, duration: Duration) -> Result<Signer, String> {
        let read = |path: &Path, flag: &str| {
            // Read once at start-up, before the server runs.
            #[allow(clippy::disallowed_methods)]
            let text = std::fs::read_to_string(path);
            text.map_err(|e| format!("{flag} {}: cannot read it: {e}", path.display()))
        };
        let cert_text = read(cert, "--cluster-signing-cert-file")?;
        let key_text = read(key, "--cluster-signing-key-file")?;
        Signer::from_pem(&cert_text, &key_text, duration).map_err(|e| {
            format!(
                "--cluster-signing-cert-file {} / --cluster-signing-key-file {}: {e}",
                cert.display(),
                key.display()
            )
        })
    }

    /// The CA from its PEM texts.
    pub fn from_pem(cert_pem: &str, key_pem: &str, duration: Duration) -> Result<Signer, String> {
        if duration.is_zero() {
            return Err("--cluster-signing-duration must be more than 0".into());
        }
        let der = pem_block(cert_pem, "CERTIFICATE")
            .ok_or("the certificate file holds no PEM block CERTIFICATE")?;
        let (_, ca) = X509Certificate::from_der(&der)
            .map_err(|e| format!("the CA certificate cannot be read: {e}"))?;
        if !ca.is_ca() {
            return Err(
                "the certificate is not a CA's (basicConstraints CA:TRUE is missing)".into(),
            );
        }
        let key = key_pair(key_pem)?;
        if rcgen::PublicKeyData::subject_public_key_info(&key) != ca.public_key().raw {
            return Err("the key is not the certificate's: their public keys differ".into());
        }
        let ca_not_after = ca.validity().not_after.to_datetime();
        let issuer = Issuer::from_ca_cert_der(&der.clone().into(), key)
            .map_err(|e| format!("the CA certificate cannot sign: {e}"))?;
        Ok(Signer {
            issuer,
            ca_not_after,
            duration,
        })
    }

    /// Issues a client certificate for `request` (CN and O as asked, the
    /// usages given), valid from a little before `now` for the signing
    /// duration, or `expiration_seconds` when shorter, never past the CA.
    pub fn sign(
        &self,
        request: &Request,
        usages: &[String],
        expiration_seconds: Option<i32>,
        now: time::OffsetDateTime,
    ) -> Result<Issued, String> {
        let mut params = CertificateParams::default();
        let mut subject = DistinguishedName::new();
        subject.push(DnType::CommonName, request.common_name.as_str());
        for o in &request.organizations {
            subject.push(DnType::OrganizationName, o.as_str());
        }
        params.distinguished_name = subject;
        params.key_usages = usages
            .iter()
            .filter_map(|u| match u.as_str() {
                "digital signature" => Some(KeyUsagePurpose::DigitalSignature),
                "key encipherment" => Some(KeyUsagePurpose::KeyEncipherment),
                _ => None,
            })
            .collect();
        params.extended_key_usages = usages
            .iter()
            .filter_map(|u| (u == "client auth").then_some(ExtendedKeyUsagePurpose::ClientAuth))
            .collect();
        let mut duration = self.duration;
        if let Some(seconds) = expiration_seconds {
            duration = duration.min(Duration::from_secs(u64::try_from(seconds).unwrap_or(0)));
        }
        params.not_before = now - BACKDATE;
        params.not_after = (now + duration).min(self.ca_not_after);
        // A random positive 128-bit serial, as upstream's (authority.go: 128 random bits).
        let mut serial = *uuid::Uuid::new_v4().as_bytes();
        serial[0] &= 0x7f;
        if serial[0] == 0 {
            serial[0] = 1;
        }
        params.serial_number = Some(SerialNumber::from_slice(&serial));
        let public_key = SubjectPublicKeyInfo::from_der(&request.public_key)
            .map_err(|e| format!("the request's public key cannot be used: {e}"))?;
        let cert = params
            .signed_by(&public_key, &self.issuer)
            .map_err(|e| format!("signing failed: {e}"))?;
        Ok(Issued {
            pem: cert.pem(),
            serial: serial.iter().map(|b| format!("{b:02x}")).collect(),
            not_before: params.not_before,
            not_after: params.not_after,
        })
    }
}

/// The first PEM block of type `label` in `text`, decoded.
fn pem_block(text: &str, label: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let body: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// The CA's key: PKCS#8 (`PRIVATE KEY`), or PKCS#1 RSA (`RSA PRIVATE KEY`,
/// what kubeadm writes) or SEC1 P-256 (`EC PRIVATE KEY`), rewrapped as PKCS#8.
fn key_pair(text: &str) -> Result<KeyPair, String> {
    let der = if let Some(der) = pem_block(text, "PRIVATE KEY") {
        der
    } else if let Some(der) = pem_block(text, "RSA PRIVATE KEY") {
        // AlgorithmIdentifier { rsaEncryption, NULL }
        pkcs8(
            &[
                0x30, 0x0d, 0x06, 0x09, 0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01, 0x05,
                0x00,
            ],
            &der,
        )
    } else if let Some(der) = pem_block(text, "EC PRIVATE KEY") {
        // AlgorithmIdentifier { id-ecPublicKey, prime256v1 }
        pkcs8(
            &[
                0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
                0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07,
            ],
            &der,
        )
    } else {
        return Err(
            "the key file holds no PEM block PRIVATE KEY, RSA PRIVATE KEY or EC PRIVATE KEY".into(),
        );
    };
    let pem = format!(
        "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
        {
            use base64::Engine;
            base64::engine::general_purpose::STANDARD.encode(&der)
        }
    );
    KeyPair::from_pem(&pem).map_err(|e| {
        format!(
            "the key cannot be used to sign ({e}); RSA and ECDSA P-256/P-384 and Ed25519 keys can"
        )
    })
}

/// PKCS#8 `PrivateKeyInfo { version 0, algorithm, OCTET STRING key }`.
fn pkcs8(algorithm: &[u8], key: &[u8]) -> Vec<u8> {
    let mut body = vec![0x02, 0x01, 0x00];
    body.extend_from_slice(algorithm);
    body.push(0x04);
    der_length(&mut body, key.len());
    body.extend_from_slice(key);
    let mut out = vec![0x30];
    der_length(&mut out, body.len());
    out.extend_from_slice(&body);
    out
}

fn der_length(out: &mut Vec<u8>, len: usize) {
    if len < 0x80 {
        out.push(len as u8);
    } else {
        let bytes: Vec<u8> = len
            .to_be_bytes()
            .into_iter()
            .skip_while(|b| *b == 0)
            .collect();
        out.push(0x80 | bytes.len() as u8);
        out.extend_from_slice(&bytes);
    }
}

/// Helpers the tests of several modules share: a CA and a kubelet's request.
#[cfg(test)]
pub(crate) mod testing {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

    /// A CA certificate and its key, as PEM.
    pub fn ca() -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params
            .distinguished_name
            .push(DnType::CommonName, "test-ca");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A request with this CN and these O values (and DNS SANs), as PEM.
    pub fn request(cn: &str, orgs: &[&str], dns: &[&str]) -> String {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(dns.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap();
        params.distinguished_name = rcgen::DistinguishedName::new();
        params.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            params.distinguished_name.push(DnType::OrganizationName, *o);
        }
        params.serialize_request(&key).unwrap().pem().unwrap()
    }
}

#[cfg(test)]
mod tests {
    use super::testing::{ca, request};
    use super::*;

    fn usages(u: &[&str]) -> Vec<String> {
        u.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_kubelets_request_is_read_and_checked_as_upstream_checks_it() {
        let pem = request("system:node:edge-1", &["system:nodes"], &[]);
        let r = parse_request(pem.as_bytes()).unwrap();
        assert_eq!(r.common_name, "system:node:edge-1");
        assert_eq!(node_of(&r), Some("edge-1"));
        assert_eq!(r.organizations, ["system:nodes"]);
        let client = usages(&["digital signature", "client auth"]);
        check_kubelet_client(&r, &client).unwrap();
        check_kubelet_client(
            &r,
            &usages(&["key encipherment", "digital signature", "client auth"]),
        )
        .unwrap();
        // helpers.go ValidateKubeletClientCSR: each refusal in its words.
        let e = check_kubelet_client(&r, &usages(&["client auth"])).unwrap_err();
        assert!(e.starts_with("usages did not match"), "{e}");
        let e =
            check_kubelet_client(&r, &usages(&["digital signature", "server auth"])).unwrap_err();
        assert!(e.starts_with("usages did not match"), "{e}");
        for (pem, want) in [
            (
                request("system:node:a", &["system:nodes", "x"], &[]),
                "subject organization is not system:nodes",
            ),
            (
                request("system:node:a", &[], &[]),
                "subject organization is not system:nodes",
            ),
            (
                request("system:node:a", &["system:nodes"], &["a.example"]),
                "DNS subjectAltNames are not allowed",
            ),
            (
                request("node:a", &["system:nodes"], &[]),
                "subject common name does not begin with system:node:",
            ),
        ] {
            let r = parse_request(pem.as_bytes()).unwrap();
            assert_eq!(check_kubelet_client(&r, &client).unwrap_err(), want);
        }
        let e = parse_request(b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n")
            .unwrap_err();
        assert_eq!(e, "PEM block type must be CERTIFICATE REQUEST");
        let e = parse_request(
            b"-----BEGIN CERTIFICATE REQUEST-----\nMAA=\n-----END CERTIFICATE REQUEST-----\n",
        )
        .unwrap_err();
        assert!(e.contains("cannot be read"), "{e}");
    }

    #[test]
    fn a_request_whose_signature_is_not_its_keys_is_refused() {
        let pem = request("system:node:edge-1", &["system:nodes"], &[]);
        use base64::Engine;
        let mut der = pem_block(&pem, "CERTIFICATE REQUEST").unwrap();
        let last = der.len() - 1;
        der[last] ^= 1;
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{}\n-----END CERTIFICATE REQUEST-----\n",
            base64::engine::general_purpose::STANDARD.encode(&der)
        );
        let e = parse_request(tampered.as_bytes()).unwrap_err();
        assert!(e.contains("signature"), "{e}");
    }

    #[test]
    fn the_ca_signs_client_certificates_for_the_duration_asked() {
        let (cert, key) = ca();
        let signer = Signer::from_pem(&cert, &key, DEFAULT_SIGNING_DURATION).unwrap();
        let pem = request("system:node:edge-1", &["system:nodes"], &[]);
        let r = parse_request(pem.as_bytes()).unwrap();
        let now = time::OffsetDateTime::now_utc();
        let u = usages(&["digital signature", "client auth"]);
        let issued = signer.sign(&r, &u, None, now).unwrap();
        let der = pem_block(&issued.pem, "CERTIFICATE").unwrap();
        let (_, x) = X509Certificate::from_der(&der).unwrap();
        let cn: Vec<_> = x
            .subject()
            .iter_common_name()
            .map(|a| a.as_str().unwrap())
            .collect();
        let o: Vec<_> = x
            .subject()
            .iter_organization()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(cn, ["system:node:edge-1"]);
        assert_eq!(o, ["system:nodes"]);
        let issuer: Vec<_> = x
            .issuer()
            .iter_common_name()
            .map(|a| a.as_str().unwrap())
            .collect();
        assert_eq!(issuer, ["test-ca"]);
        assert_eq!(x.public_key().raw, r.public_key.as_slice());
        let eku = x.extended_key_usage().unwrap().unwrap().value;
        assert!(eku.client_auth && !eku.server_auth);
        let year = x.validity().not_after.timestamp() - x.validity().not_before.timestamp();
        assert_eq!(year, (8760 * 3600 + 300) as i64);
        assert_eq!(
            x.raw_serial()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>(),
            issued.serial
        );
        // spec.expirationSeconds shortens it; two serials differ.
        let short = signer.sign(&r, &u, Some(3600), now).unwrap();
        assert_eq!(
            (short.not_after - short.not_before).whole_seconds(),
            3600 + 300
        );
        assert_ne!(short.serial, issued.serial);
    }

    #[test]
    fn bad_ca_files_are_refused_saying_why() {
        let (cert, key) = ca();
        let (_, other_key) = ca();
        let d = DEFAULT_SIGNING_DURATION;
        let e = Signer::from_pem(&cert, &other_key, d).unwrap_err();
        assert!(e.contains("not the certificate's"), "{e}");
        let e = Signer::from_pem("nothing", &key, d).unwrap_err();
        assert!(e.contains("no PEM block CERTIFICATE"), "{e}");
        let e = Signer::from_pem(&cert, "nothing", d).unwrap_err();
        assert!(e.contains("no PEM block PRIVATE KEY"), "{e}");
        // A leaf is no CA.
        let leaf_key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["a".to_string()])
            .unwrap()
            .self_signed(&leaf_key)
            .unwrap();
        let e = Signer::from_pem(&leaf.pem(), &leaf_key.serialize_pem(), d).unwrap_err();
        assert!(e.contains("not a CA"), "{e}");
        let e = Signer::load(Path::new("/nonexistent/ca.crt"), Path::new("/x"), d).unwrap_err();
        assert!(
            e.starts_with("--cluster-signing-cert-file /nonexistent/ca.crt"),
            "{e}"
        );
    }

    #[test]
    fn an_sec1_p256_key_is_rewrapped() {
        // A P-256 key in PKCS#8 holds its SEC1 form at a fixed place: take it out.
        let key = KeyPair::generate().unwrap();
        let pkcs8 = key.serialize_der();
        // PKCS#8 = SEQ { INT 0, AlgId(21 bytes), OCTET STRING { sec1 } }
        let sec1 = &pkcs8[pkcs8.len() - (pkcs8[28] as usize)..];
        use base64::Engine;
        let pem = format!(
            "-----BEGIN EC PRIVATE KEY-----\n{}\n-----END EC PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(sec1)
        );
        let again = key_pair(&pem).unwrap();
        assert_eq!(again.public_key_raw(), key.public_key_raw());
    }
}
