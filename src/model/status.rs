//! How the parts readers cannot see are doing, as the published view tells
//! them: whether the store takes writes, and how the cloud or inventory
//! source has been doing.

use serde::{Deserialize, Serialize};

use super::Micros;

/// Whether the store takes writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreHealth {
    Writable,
    /// Writes are refused for now; they are taken again once the cause is gone.
    Refusing(String),
    /// The store failed to write; it takes no write until nodekeeper restarts.
    Failed(String),
}

impl StoreHealth {
    /// `Ok` when writes are taken; else why not, for `/readyz`.
    pub fn writable(&self) -> Result<(), String> {
        match self {
            StoreHealth::Writable => Ok(()),
            StoreHealth::Refusing(reason) | StoreHealth::Failed(reason) => Err(reason.clone()),
        }
    }
}

/// How the source has been doing, for `describe`, `/v1/sources` and metrics.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SourceStatus {
    pub source: String,
    pub last_success: Option<Micros>,
    pub machines: usize,
    pub consecutive_failures: u32,
    pub last_error: Option<String>,
    pub last_error_time: Option<Micros>,
}
