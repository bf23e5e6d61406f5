//! Where nodes come from: a static list (flag or file) or a cloud / inventory
//! provider, turned into [`NodeSpec`]s for registration.

pub mod ansible;
pub mod cloud;
pub mod inventory;
pub mod resolve;
pub mod static_list;

use thiserror::Error;

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
    /// The seed's `ErrCloudInstance`.
    #[error("cloud provider {0:?} doesn't support instances; choose a provider that lists machines, or use --nodes / --nodes-file")]
    CloudInstance(String),
    #[error("cloud provider {provider:?} failed to list instances: {reason}")]
    Cloud { provider: String, reason: String },
}
