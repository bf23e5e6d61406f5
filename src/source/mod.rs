//! Where nodes come from: a static list (flag or file) or a cloud / inventory
//! provider, turned into [`NodeSpec`](crate::model::NodeSpec)s for registration.

pub mod ansible;
pub mod cloud;
pub mod ec2;
pub mod http;
pub mod inventory;
pub mod resolve;
pub mod static_list;

use std::path::Path;

use thiserror::Error;

use cloud::{CloudError, CloudProvider};

/// Failures of a node source. Messages name the input and what to do.
#[derive(Debug, Error)]
pub enum SourceError {
    #[error("{origin}: {reason}")]
    Invalid { origin: String, reason: String },
    #[error("cannot read the nodes file {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("node {name:?} is listed twice ({first} and {second}); list each node once")]
    Duplicate {
        name: String,
        first: String,
        second: String,
    },
    #[error("cloud provider {provider:?} failed to list instances: {error}")]
    Cloud { provider: String, error: CloudError },
    /// A listed machine whose name cannot be a node name: the whole
    /// listing is refused, so that no node is deleted for it.
    #[error("cloud provider {provider:?} failed to list instances: {machine}: {reason}; nothing was changed — fix the name or exclude the machine with --match")]
    BadMachineName {
        provider: String,
        machine: String,
        reason: crate::model::InvalidName,
    },
    /// Two listed machines that would become the same node.
    #[error("cloud provider {provider:?} failed to list instances: {first} and {second} would both be node {name:?}; nothing was changed — give them distinct names or exclude one with --match")]
    SameNodeName {
        provider: String,
        first: String,
        second: String,
        name: String,
    },
    #[error("--cloud-provider {name:?} is not a known provider; known providers: {}", PROVIDERS.join(", "))]
    UnknownProvider { name: String },
    #[error("--cloud-provider {provider} needs --cloud-config PATH: {what}")]
    MissingCloudConfig {
        provider: &'static str,
        what: &'static str,
    },
    #[error("--cloud-config {path} (cloud provider {provider}): {reason}")]
    CloudConfig {
        provider: &'static str,
        path: String,
        reason: String,
    },
}

impl SourceError {
    /// Whether a listing that failed so may succeed on a later sync by
    /// itself, with nothing fixed: only a provider that was unreachable or
    /// failed on its side.
    pub fn is_transient(&self) -> bool {
        matches!(self, SourceError::Cloud { error, .. } if error.is_transient())
    }
}

/// The providers [`provider`] can build.
pub const PROVIDERS: [&str; 3] = ["inventory", "http", "ec2"];

/// Builds the provider `--cloud-provider NAME --cloud-config PATH` names,
/// checking its configuration completely (files read, URLs and credentials
/// checked) but contacting nothing.
pub fn provider(
    name: &str,
    config_path: Option<&Path>,
) -> Result<Box<dyn CloudProvider>, SourceError> {
    let (provider, what) = match name {
        "inventory" => (
            "inventory",
            "the inventory file (YAML, JSON or Ansible INI)",
        ),
        "http" => (
            "http",
            "a YAML file with the endpoint's url (and tokenFile, caFile, timeout)",
        ),
        "ec2" => (
            "ec2",
            "a YAML file with region (and endpoint, filters, nameTag, credentialsFile)",
        ),
        _ => return Err(SourceError::UnknownProvider { name: name.into() }),
    };
    let path = config_path.ok_or(SourceError::MissingCloudConfig { provider, what })?;
    let config_error = |reason: String| SourceError::CloudConfig {
        provider,
        path: path.display().to_string(),
        reason,
    };
    // Paths inside a config file are relative to the file.
    let base = path.parent().unwrap_or(Path::new("."));
    Ok(match provider {
        "inventory" => Box::new(inventory::InventoryProvider::open(path).map_err(config_error)?),
        "http" => {
            let config = read_yaml_config(path).map_err(config_error)?;
            Box::new(http::HttpProvider::new(config, base).map_err(config_error)?)
        }
        _ => {
            let config = read_yaml_config(path).map_err(config_error)?;
            Box::new(ec2::Ec2Provider::new(config, base).map_err(config_error)?)
        }
    })
}

/// Reads a provider's YAML config; unknown keys are errors, with their line.
fn read_yaml_config<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, String> {
    // Read once at start-up, while the source is built.
    #[allow(clippy::disallowed_methods)]
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read it: {e}"))?;
    serde_yaml_ng::from_str(&text).map_err(|e| e.to_string())
}

#[cfg(test)]
// Tests write and read their fixtures with std::fs: blocking a test's own
// runtime stalls nothing else.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn err(name: &str, path: Option<&Path>) -> String {
        match provider(name, path) {
            Ok(_) => panic!("{name} built"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn the_factory_names_what_is_wrong() {
        let e = err("gce", None);
        assert!(
            e.contains("\"gce\"") && e.contains("inventory, http, ec2"),
            "{e}"
        );
        let e = err("inventory", None);
        assert!(
            e.contains("needs --cloud-config") && e.contains("inventory file"),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.yaml");
        let e = err("inventory", Some(&missing));
        assert!(e.contains("nope.yaml") && e.contains("cannot read"), "{e}");
        let config = dir.path().join("http.yaml");
        std::fs::write(&config, "url: http://127.0.0.1:1/\ntimout: 5s\n").unwrap();
        let e = err("http", Some(&config));
        assert!(e.contains("timout") && e.contains("line 2"), "{e}");
        std::fs::write(&config, "url: not a url\n").unwrap();
        assert!(err("http", Some(&config)).contains("not a URL"));
        std::fs::write(&config, "url: http://h/\ntokenFile: token\n").unwrap();
        let e = err("http", Some(&config));
        assert!(
            e.contains("tokenFile") && e.contains(&dir.path().join("token").display().to_string()),
            "relative to the config: {e}"
        );
        std::fs::write(&config, "region: us-east-1\ncredentialsFile: aws.env\n").unwrap();
        let e = err("ec2", Some(&config));
        assert!(e.contains("credentialsFile"), "{e}");
    }

    #[test]
    fn the_factory_builds_each_provider() {
        crate::install_crypto_provider();
        let dir = tempfile::tempdir().unwrap();
        let inv = dir.path().join("site.yaml");
        std::fs::write(&inv, "machines: [{name: a}]\n").unwrap();
        assert_eq!(
            provider("inventory", Some(&inv)).unwrap().name(),
            "inventory"
        );
        let http = dir.path().join("http.yaml");
        std::fs::write(&http, "url: http://127.0.0.1:1/machines\ntimeout: 2s\n").unwrap();
        assert_eq!(provider("http", Some(&http)).unwrap().name(), "http");
        std::fs::write(
            dir.path().join("aws.env"),
            "AWS_ACCESS_KEY_ID=a\nAWS_SECRET_ACCESS_KEY=b\n",
        )
        .unwrap();
        let ec2 = dir.path().join("ec2.yaml");
        std::fs::write(&ec2, "region: us-east-1\ncredentialsFile: aws.env\nfilters: [{name: 'tag:cluster', values: [edge]}]\n").unwrap();
        let p = provider("ec2", Some(&ec2)).unwrap();
        assert_eq!(p.name(), "ec2");
    }
}
