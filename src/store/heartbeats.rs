//! Heartbeat times between restarts: a checkpoint file beside the store,
//! rewritten whole (written aside, then renamed over the old one) at most
//! once a period. Heartbeat times are not history: keeping them out of sled
//! means 10,000 nodes that renew every 10 s rewrite one small file a
//! minute instead of 10,000 records, and losing the newest checkpoint in a
//! crash loses times only, never a transition.

use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The checkpoint's name in the store's directory.
pub const FILE: &str = "heartbeats";
const TEMPORARY: &str = ".heartbeats.tmp";

/// The newest heartbeat times of every node and Lease, as kubelets wrote
/// them (their clocks), in microseconds since the epoch.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeartbeatCheckpoint {
    /// When it was taken (the controller's clock).
    pub taken: i64,
    pub nodes: Vec<NodeBeats>,
}

/// One node's heartbeat times.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeBeats {
    pub name: String,
    /// Each condition's `lastHeartbeatTime`, in the order of the node's record.
    pub conditions: Vec<i64>,
    /// Its Lease's `renewTime` and generation, if it has a Lease.
    pub lease: Option<LeaseBeat>,
}

/// What a Lease renewal changes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseBeat {
    pub renew_time: Option<i64>,
    pub generation: u64,
}

/// The file's versioned envelope: append variants only.
#[derive(Serialize, Deserialize)]
enum Stored {
    V1(HeartbeatCheckpoint),
}

/// A checkpoint that cannot be written or read.
#[derive(Debug, Error)]
pub enum CheckpointError {
    #[error("cannot write the heartbeat checkpoint {}: {source}", .path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the heartbeat checkpoint {}: {source}", .path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the heartbeat checkpoint {} is damaged ({reason}); it is ignored: heartbeat times start again from the nodes' next heartbeats", .path.display())]
    Damaged { path: PathBuf, reason: String },
}

impl HeartbeatCheckpoint {
    /// The bytes written to disk.
    pub fn encode(&self) -> Vec<u8> {
        // A Vec cannot fail to take postcard's output.
        postcard::to_stdvec(&Stored::V1(self.clone())).unwrap_or_default()
    }

    /// Reads bytes written by [`HeartbeatCheckpoint::encode`], of any version.
    pub fn decode(bytes: &[u8]) -> Result<HeartbeatCheckpoint, String> {
        let (stored, rest) =
            postcard::take_from_bytes::<Stored>(bytes).map_err(|e| e.to_string())?;
        if !rest.is_empty() {
            return Err(format!("{} bytes after the end", rest.len()));
        }
        match stored {
            Stored::V1(checkpoint) => Ok(checkpoint),
        }
    }

    /// Writes the checkpoint into the store directory `dir`, replacing the
    /// previous one only once the new one is on disk.
    pub fn write(&self, dir: &Path) -> Result<(), CheckpointError> {
        let path = dir.join(FILE);
        let temporary = dir.join(TEMPORARY);
        let written = (|| {
            let mut file = std::fs::File::create(&temporary)?;
            file.write_all(&self.encode())?;
            file.sync_all()?;
            std::fs::rename(&temporary, &path)
        })();
        written.map_err(|source| {
            let _ = std::fs::remove_file(&temporary);
            CheckpointError::Write {
                path: path.clone(),
                source,
            }
        })
    }

    /// The checkpoint in the store directory `dir`; `None` if there is none.
    pub fn read(dir: &Path) -> Result<Option<HeartbeatCheckpoint>, CheckpointError> {
        let path = dir.join(FILE);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(CheckpointError::Read { path, source }),
        };
        HeartbeatCheckpoint::decode(&bytes)
            .map(Some)
            .map_err(|reason| CheckpointError::Damaged { path, reason })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> HeartbeatCheckpoint {
        HeartbeatCheckpoint {
            taken: 1_764_576_000_000_000,
            nodes: vec![
                NodeBeats {
                    name: "edge-1".into(),
                    conditions: vec![1_764_575_990_000_000, 1],
                    lease: Some(LeaseBeat {
                        renew_time: Some(1_764_575_995_500_000),
                        generation: 7,
                    }),
                },
                NodeBeats {
                    name: "edge-2".into(),
                    conditions: vec![],
                    lease: None,
                },
            ],
        }
    }

    /// The bytes of version 1: a checkpoint written by any build reads back.
    #[test]
    fn version_1_bytes_are_golden() {
        let bytes = sample().encode();
        assert_eq!(
            bytes,
            [
                0, // V1
                128, 128, 198, 218, 235, 183, 162, 6, // taken, zigzag varint
                2, // two nodes
                6, 101, 100, 103, 101, 45, 49, // "edge-1"
                2, 128, 166, 129, 209, 235, 183, 162, 6, 2, // its two condition times
                1, 1, 192, 215, 160, 214, 235, 183, 162, 6,
                7, // its Lease: renewTime, generation
                6, 101, 100, 103, 101, 45, 50, 0, 0, // "edge-2", no conditions, no Lease
            ]
        );
        assert_eq!(HeartbeatCheckpoint::decode(&bytes), Ok(sample()));
    }

    #[test]
    fn damage_is_reported_not_read() {
        let mut bytes = sample().encode();
        bytes.push(0);
        assert!(HeartbeatCheckpoint::decode(&bytes)
            .unwrap_err()
            .contains("after the end"));
        assert!(HeartbeatCheckpoint::decode(&[9, 9]).is_err());
        assert!(HeartbeatCheckpoint::decode(&[]).is_err());
    }

    #[test]
    fn a_checkpoint_replaces_the_previous_one_whole() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(HeartbeatCheckpoint::read(dir.path()).unwrap(), None);
        sample().write(dir.path()).unwrap();
        assert_eq!(
            HeartbeatCheckpoint::read(dir.path()).unwrap(),
            Some(sample())
        );
        let newer = HeartbeatCheckpoint {
            taken: 2,
            nodes: Vec::new(),
        };
        newer.write(dir.path()).unwrap();
        assert_eq!(HeartbeatCheckpoint::read(dir.path()).unwrap(), Some(newer));
        assert!(!dir.path().join(TEMPORARY).exists());
        std::fs::write(dir.path().join(FILE), b"\x07garbage").unwrap();
        assert!(matches!(
            HeartbeatCheckpoint::read(dir.path()),
            Err(CheckpointError::Damaged { .. })
        ));
    }
}
