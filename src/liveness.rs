//! The liveness stamp: a small file in the store directory, rewritten every
//! few seconds while the controller runs. It is not fsynced (cheap), so it
//! survives a killed process but maybe not a power cut. After a crash, the
//! recorded downtime counts from it rather than from the last write, which
//! may be much older on a quiet site.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::model::Micros;

/// The stamp's file name in the store directory.
pub const FILE: &str = "alive.json";
/// How often the stamp is rewritten: the recorded downtime after a crash is
/// at most this much too long.
pub const PERIOD: Duration = Duration::from_secs(2);

/// What the stamp holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamp {
    pub instance: String,
    pub time: Micros,
}

fn path(dir: &Path) -> PathBuf {
    dir.join(FILE)
}

/// The stamp a previous controller left in `dir`, if it is readable.
pub fn read(dir: &Path) -> Option<Stamp> {
    serde_json::from_slice(&std::fs::read(path(dir)).ok()?).ok()
}

/// Writes the stamp: a new file renamed over the old one, so a kill midway
/// leaves the old stamp, never a torn one.
pub fn write(dir: &Path, stamp: &Stamp) -> std::io::Result<()> {
    let tmp = dir.join(format!(".{FILE}.tmp"));
    let body = serde_json::to_vec(stamp).unwrap_or_default();
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, path(dir))
}

/// Rewrites the stamp every [`PERIOD`] until `shutdown`. A failed write is
/// logged (once until writes succeed again) and tried again: the stamp only
/// makes the downtime figure more precise.
pub async fn keep_stamping(dir: PathBuf, instance: String, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let stamp = Stamp {
            instance: instance.clone(),
            time: Micros::now(),
        };
        let target = dir.clone();
        let written = tokio::task::spawn_blocking(move || write(&target, &stamp))
            .await
            .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        match written {
            Ok(()) if failing => {
                tracing::info!("the liveness stamp is written again");
                failing = false;
            }
            Ok(()) => {}
            Err(e) if !failing => {
                tracing::warn!(
                    "cannot write the liveness stamp {}: {e}; after a crash the recorded downtime will count from the last stored change",
                    path(&dir).display()
                );
                failing = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_reads_back_and_junk_reads_as_none() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read(dir.path()), None);
        let stamp = Stamp {
            instance: "i-1".into(),
            time: Micros(1_800_000_000_123_456),
        };
        write(dir.path(), &stamp).unwrap();
        assert_eq!(read(dir.path()), Some(stamp));
        std::fs::write(dir.path().join(FILE), b"{\"instance\":").unwrap();
        assert_eq!(read(dir.path()), None);
    }
}
