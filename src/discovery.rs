//! The discovery file, `controller.json` in the store directory: where a
//! running controller serves, so that commands find it while it holds the
//! store's lock.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Where a running controller can be reached; written into the store
/// directory so inspection commands find it while it holds the lock.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Discovery {
    pub pid: u32,
    pub url: String,
    pub instance: String,
    #[serde(rename = "simControl", skip_serializing_if = "Option::is_none")]
    pub sim_control: Option<String>,
    /// The serving certificate when `url` is https: what the CLI trusts.
    #[serde(rename = "caFile", default, skip_serializing_if = "Option::is_none")]
    pub ca_file: Option<PathBuf>,
}

impl Discovery {
    pub const FILE: &'static str = "controller.json";

    pub fn path(db: &Path) -> PathBuf {
        db.join(Self::FILE)
    }

    /// Reads the discovery file of a store, if there is one.
    pub fn read(db: &Path) -> Option<Discovery> {
        // A small file read by one-shot commands before they do anything else.
        #[allow(clippy::disallowed_methods)]
        let bytes = std::fs::read(Self::path(db)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Writes the file atomically (a temporary file renamed over it).
    pub async fn write(&self, db: &Path) -> std::io::Result<()> {
        let path = Self::path(db);
        let tmp = db.join(".controller.json.tmp");
        let body = serde_json::to_vec_pretty(self).unwrap_or_default();
        tokio::fs::write(&tmp, body).await?;
        tokio::fs::rename(&tmp, &path).await
    }
}
