//! The liveness stamp: a small file rewritten every few seconds while the
//! controller runs. After a crash, the recorded downtime counts from it
//! rather than from the last write, which may be much older on a quiet site.
//! It lives in memory (`/dev/shm`, keyed by the store's path), not on the
//! store's disk: a controller with nothing changing writes nothing to disk.
//! It survives a killed process, not a reboot; after a reboot the downtime
//! counts from the last stored change. Where there is no `/dev/shm`, it is
//! kept in the store's directory.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio_util::sync::CancellationToken;

use crate::model::Micros;

/// The stamp's file name in the store directory, where there is no `/dev/shm`.
pub const FILE: &str = "alive.json";
/// Memory-backed files that outlive the process (not a reboot).
const SHARED_MEMORY: &str = "/dev/shm";
/// How often the stamp is rewritten: the recorded downtime after a crash is
/// at most this much too long.
pub const PERIOD: Duration = Duration::from_secs(2);

/// What the stamp holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Stamp {
    pub instance: String,
    pub time: Micros,
}

/// Where the stamp of the store at `dir` is kept: in `/dev/shm`, under a
/// name made from the store's absolute path, or else in the store directory.
// Blocking metadata calls: made while the controller starts, on the blocking
// pool, or in tests; `keep_stamping` finds the path once, off the runtime.
#[allow(clippy::disallowed_methods)]
pub fn path(dir: &Path) -> PathBuf {
    let shm = Path::new(SHARED_MEMORY);
    if !shm.is_dir() {
        return dir.join(FILE);
    }
    let absolute = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    shm.join(format!(
        "nodekeeper-alive-{:016x}.json",
        fnv1a(absolute.as_os_str().as_encoded_bytes())
    ))
}

/// FNV-1a: a hash that stays the same across builds (std's may not), so
/// the next build finds the stamp the previous one left (and the API's
/// cache tags stay while the bytes do).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The stamp a previous controller left in `dir`, if it is readable.
pub fn read(dir: &Path) -> Option<Stamp> {
    // Read once while the controller starts, before its tasks run.
    #[allow(clippy::disallowed_methods)]
    let bytes = std::fs::read(path(dir)).ok()?;
    serde_json::from_slice(&bytes).ok()
}

/// Writes the stamp: a new file renamed over the old one, so a kill midway
/// leaves the old stamp, never a torn one.
pub fn write(dir: &Path, stamp: &Stamp) -> std::io::Result<()> {
    write_at(path(dir), stamp)
}

// `keep_stamping` calls this on the blocking pool.
#[allow(clippy::disallowed_methods)]
fn write_at(target: PathBuf, stamp: &Stamp) -> std::io::Result<()> {
    let mut tmp = target.clone().into_os_string();
    tmp.push(".tmp");
    let body = serde_json::to_vec(stamp).unwrap_or_default();
    std::fs::write(&tmp, body)?;
    std::fs::rename(&tmp, target)
}

/// Rewrites the stamp every [`PERIOD`] until `shutdown`. A failed write is
/// logged (once until writes succeed again) and tried again: the stamp only
/// makes the downtime figure more precise.
pub async fn keep_stamping(dir: PathBuf, instance: String, shutdown: CancellationToken) {
    let mut ticks = tokio::time::interval(PERIOD);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut failing = false;
    let stamp_path = {
        let store_dir = dir.clone();
        tokio::task::spawn_blocking(move || path(&store_dir))
            .await
            .unwrap_or_else(|_| dir.join(FILE))
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => {
                // A clean stop is recorded in the store; nothing is left behind in memory.
                let _ = tokio::fs::remove_file(&stamp_path).await;
                return;
            }
            _ = ticks.tick() => {}
        }
        let stamp = Stamp {
            instance: instance.clone(),
            time: Micros::now(),
        };
        let target = stamp_path.clone();
        let written = tokio::task::spawn_blocking(move || write_at(target, &stamp))
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
                    stamp_path.display()
                );
                failing = true;
            }
            Err(_) => {}
        }
    }
}

#[cfg(test)]
// Tests write and read their fixtures with std::fs: blocking a test's own
// runtime stalls nothing else.
#[allow(clippy::disallowed_methods)]
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
        std::fs::write(path(dir.path()), b"{\"instance\":").unwrap();
        assert_eq!(read(dir.path()), None);
        let _ = std::fs::remove_file(path(dir.path()));
    }

    #[test]
    fn each_store_has_a_stamp_of_its_own_outside_its_directory() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        assert_ne!(path(a.path()), path(b.path()));
        assert_eq!(path(a.path()), path(a.path()));
        if Path::new(SHARED_MEMORY).is_dir() {
            assert!(!path(a.path()).starts_with(a.path()));
        }
    }
}
