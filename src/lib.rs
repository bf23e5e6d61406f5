//! nodekeeper: a standalone node controller for edge and bare-metal sites.
//!
//! Data flows one way: sources → controller → store → (server, mirror).
#![forbid(unsafe_code)]

pub mod app;
pub mod backoff;
pub mod backups;
pub mod certificates;
pub mod cli;
pub mod config;
pub mod controller;
pub mod discovery;
pub mod history;
pub mod hook;
pub mod inspect;
pub mod k8s;
mod layers;
pub mod liveness;
pub mod logging;
pub mod metrics;
pub mod mirror;
pub mod model;
pub mod notify;
pub mod output;
pub mod probe;
pub mod process;
pub mod readiness;
mod serialize;
pub mod server;
pub mod simulate;
pub mod source;
pub mod store;
pub mod token_bucket;
pub mod version;
pub mod view;

// The domain's pure rules live under `model`; these paths stay for the callers
// that still name them from the crate's top.
pub use model::{duration, quantity, validation};

/// Installs rustls' ring provider for the process (reqwest and kubelet TLS
/// need one). Safe to call more than once.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
pub mod commands;
