//! Following the static node list (`--nodes`, `--nodes-file`, a simulated
//! fleet) the way a cloud is followed: at start, and whenever the nodes file
//! changes on disk (read again every sync period, like the inventory file),
//! static nodes no longer listed are deleted with a `Deleted` event saying
//! why (their history stays), new ones are registered and changed addresses
//! taken. A file that is empty or cannot be read or parsed changes nothing;
//! one that cannot be read or parsed is reported (`/readyz`'s `nodes-file`
//! check, `nodekeeper_source_failing`, a `SourceFailed` event), at start as
//! while running, until it is fixed. Nodes that registered themselves are
//! never deleted this way.

use std::collections::hash_map::RandomState;
use std::collections::{BTreeMap, BTreeSet};
use std::hash::{BuildHasher, Hasher};
use std::io::Read;
use std::path::PathBuf;

use tokio::task::JoinHandle;

use super::Controller;
use crate::model::{AddressKind, EventKind, Micros, NodeSpec, Resources};
use crate::source::static_list::{parse_nodes_text, STATIC_SOURCE};
use crate::store::Batch;

/// `--nodes-file`, followed while the controller runs.
#[derive(Debug, Clone)]
pub struct NodesFile {
    pub path: PathBuf,
    /// `--node-cpu` / `--node-memory`: what a listed node offers.
    pub capacity: Resources,
}

/// What one look at the nodes file found.
pub(super) enum FileRead {
    /// The same bytes as last time.
    Unchanged,
    Changed {
        digest: Digest,
        parsed: Result<Vec<NodeSpec>, String>,
    },
}

/// What tells the nodes file's bytes from the last look's without keeping
/// them: their length and a keyed 128-bit hash. The file is looked at every
/// sync period; keeping its bytes cost their size for the whole run, and
/// reading it whole each time as much again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Digest {
    len: u64,
    hash: [u64; 2],
}

/// The keys of a followed file's [`Digest`]s, drawn once per run.
#[derive(Debug, Clone, Default)]
struct DigestKeys([RandomState; 2]);

/// Bytes hashed at a time while looking at the file.
const DIGEST_CHUNK: usize = 64 * 1024;

impl DigestKeys {
    fn digest_of(&self, bytes: &[u8]) -> Digest {
        let mut digester = Digester::new(self);
        digester.write(bytes);
        digester.finish()
    }

    /// The file's digest, read a chunk at a time (nothing the file's size).
    fn digest_of_file(&self, path: &std::path::Path) -> std::io::Result<Digest> {
        // Runs on the blocking pool (`start_reading`).
        #[allow(clippy::disallowed_methods)]
        let mut file = std::fs::File::open(path)?;
        let mut digester = Digester::new(self);
        let mut chunk = vec![0; DIGEST_CHUNK];
        loop {
            match file.read(&mut chunk) {
                Ok(0) => return Ok(digester.finish()),
                Ok(n) => digester.write(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }
}

/// A [`Digest`] being made; the same bytes give the same digest however
/// they are split.
struct Digester {
    len: u64,
    hashers: [std::hash::DefaultHasher; 2],
}

impl Digester {
    fn new(keys: &DigestKeys) -> Digester {
        Digester {
            len: 0,
            hashers: [keys.0[0].build_hasher(), keys.0[1].build_hasher()],
        }
    }

    fn write(&mut self, bytes: &[u8]) {
        self.len += bytes.len() as u64;
        for hasher in &mut self.hashers {
            hasher.write(bytes);
        }
    }

    fn finish(&self) -> Digest {
        Digest {
            len: self.len,
            hash: [self.hashers[0].finish(), self.hashers[1].finish()],
        }
    }
}

/// A look at the nodes file in flight (file reads block: off the controller task).
pub(super) type Reading = JoinHandle<FileRead>;

/// The static list as the controller follows it.
#[derive(Debug, Default)]
pub(super) struct StaticList {
    /// From `--nodes` and a simulated fleet: fixed for the run.
    fixed: Vec<NodeSpec>,
    file: Option<WatchedFile>,
}

#[derive(Debug)]
struct WatchedFile {
    config: NodesFile,
    /// The bytes last read (good or not), so a change is noticed once.
    seen: Option<Digest>,
    keys: DigestKeys,
    /// What the file last listed when it was good and not empty.
    specs: Vec<NodeSpec>,
}

impl StaticList {
    pub(super) fn new(file: Option<NodesFile>) -> StaticList {
        StaticList {
            fixed: Vec::new(),
            file: file.map(|config| WatchedFile {
                config,
                seen: None,
                keys: DigestKeys::default(),
                specs: Vec::new(),
            }),
        }
    }

    /// Every listed spec, each name once (`--nodes` first).
    fn specs(&self) -> Vec<NodeSpec> {
        let mut seen = BTreeSet::new();
        self.fixed
            .iter()
            .chain(self.file.iter().flat_map(|f| f.specs.iter()))
            .filter(|s| seen.insert(s.name.clone()))
            .cloned()
            .collect()
    }

    /// The names listed now.
    pub(super) fn names(&self) -> BTreeSet<String> {
        self.specs().into_iter().map(|s| s.name).collect()
    }

    /// Starts a look at the nodes file, if there is one.
    pub(super) fn start_reading(&self) -> Option<Reading> {
        let file = self.file.as_ref()?;
        let path = file.config.path.clone();
        let capacity = file.config.capacity;
        let seen = file.seen;
        let keys = file.keys.clone();
        Some(tokio::task::spawn_blocking(move || {
            read_nodes_file(&path, capacity, seen, &keys)
        }))
    }
}

/// Looks at the nodes file a chunk at a time; reads it whole and parses it
/// only when its bytes changed.
fn read_nodes_file(
    path: &std::path::Path,
    capacity: Resources,
    seen: Option<Digest>,
    keys: &DigestKeys,
) -> FileRead {
    let origin = path.display().to_string();
    let cannot_read = |e: std::io::Error| FileRead::Changed {
        digest: keys.digest_of(&[]),
        parsed: Err(format!("cannot read the nodes file {origin}: {e}")),
    };
    match keys.digest_of_file(path) {
        Ok(digest) if Some(digest) == seen => return FileRead::Unchanged,
        Ok(_) => {}
        Err(e) => return cannot_read(e),
    }
    // Runs on the blocking pool (`start_reading`).
    #[allow(clippy::disallowed_methods)]
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) => return cannot_read(e),
    };
    // The digest of what is parsed: the file may have changed again since.
    let digest = keys.digest_of(&bytes);
    let parsed = std::str::from_utf8(&bytes)
        .map_err(|e| format!("{origin}: not UTF-8 text: {e}"))
        .and_then(|text| parse_nodes_text(&origin, text, capacity).map_err(|e| e.to_string()));
    FileRead::Changed { digest, parsed }
}

impl Controller {
    /// At start: learns which of `specs` came from the nodes file, then
    /// deletes the static nodes neither lists (unless the list is empty).
    pub(super) async fn follow_static_list_at_start(&mut self, specs: &[NodeSpec]) {
        let mut file_names = BTreeSet::new();
        if let Some(reading) = self.static_list.start_reading() {
            match reading.await {
                Ok(FileRead::Changed { digest, parsed }) => {
                    let file = self
                        .static_list
                        .file
                        .as_mut()
                        .expect("reading implies a file");
                    file.seen = Some(digest);
                    match parsed {
                        Ok(listed) => {
                            file_names = listed.iter().map(|s| s.name.clone()).collect();
                            file.specs = listed;
                            self.nodes_file_followed();
                        }
                        Err(e) => self.nodes_file_failed(e).await,
                    }
                }
                Ok(FileRead::Unchanged) => {}
                Err(e) => tracing::error!("reading the nodes file failed: {e}"),
            }
        }
        self.static_list.fixed = specs
            .iter()
            .filter(|s| !file_names.contains(&s.name))
            .cloned()
            .collect();
        let file_is_empty = self
            .static_list
            .file
            .as_ref()
            .is_some_and(|f| f.specs.is_empty());
        if file_is_empty || self.static_list.names().is_empty() {
            // No list, or an empty file: nothing to follow, as with an empty inventory.
            tracing::info!("the static node list is empty; static nodes are left as they are");
            self.save_source_listing().await;
            return;
        }
        self.delete_unlisted_static("no longer listed in --nodes / --nodes-file")
            .await;
        self.save_source_listing().await;
    }

    /// A look at the nodes file came back: follows it if it changed and is good.
    pub(super) async fn apply_nodes_file(&mut self, read: FileRead) {
        let FileRead::Changed { digest, parsed } = read else {
            return;
        };
        let Some(file) = self.static_list.file.as_mut() else {
            return;
        };
        file.seen = Some(digest);
        let origin = file.config.path.display().to_string();
        let listed = match parsed {
            Ok(listed) if listed.is_empty() => {
                self.nodes_file_followed();
                return tracing::warn!(
                    "the nodes file {origin} lists no nodes; the registry is left as it is \
                     (remove the lines of the nodes you mean to delete, not all of them)"
                );
            }
            Ok(listed) => listed,
            Err(e) => return self.nodes_file_failed(e).await,
        };
        self.nodes_file_followed();
        let Some(file) = self.static_list.file.as_mut() else {
            return;
        };
        tracing::info!(
            nodes = listed.len(),
            "the nodes file {origin} changed; following it"
        );
        file.specs = listed;
        let reason = format!("no longer listed in the nodes file {origin}");
        self.delete_unlisted_static(&reason).await;
        let specs = self.static_list.specs();
        self.take_static_addresses(&specs).await;
        let new: Vec<NodeSpec> = specs
            .into_iter()
            .filter(|s| !self.tracked.contains_key(&s.name))
            .collect();
        // Nodes the file no longer lists are not waited for.
        let names = self.static_list.names();
        self.unregistered
            .retain(|s| s.source != STATIC_SOURCE || names.contains(&s.name));
        self.register_nodes(new).await;
        self.save_source_listing().await;
    }

    /// The nodes file cannot be read or parsed: the registry is left as it
    /// is, and `/readyz`, the gauge and the history say why until it is fixed.
    async fn nodes_file_failed(&mut self, error: String) {
        let reason = format!("{error}; the registry is left as it is until the file is fixed");
        tracing::error!("{reason}");
        self.metrics
            .set_source_failing(crate::metrics::NodeSource::NodesFile, true);
        if let Some(check) = &self.readiness.nodes_file {
            check.fail(reason);
        }
        let event = EventKind::SourceFailed {
            source: STATIC_SOURCE.to_string(),
            message: error,
        };
        self.record_events(vec![(None, event)]).await;
    }

    /// The nodes file is followed again.
    fn nodes_file_followed(&self) {
        self.metrics
            .set_source_failing(crate::metrics::NodeSource::NodesFile, false);
        if let Some(check) = &self.readiness.nodes_file {
            check.clear();
        }
    }

    /// Deletes every static node the list does not name.
    async fn delete_unlisted_static(&mut self, reason: &str) {
        let names = self.static_list.names();
        let gone: Vec<String> = self
            .tracked
            .values()
            .filter(|t| t.node.source == STATIC_SOURCE && !names.contains(&t.node.name))
            .map(|t| t.node.name.clone())
            .collect();
        if gone.is_empty() {
            return;
        }
        let mut batch = Batch::new(Micros::now());
        for name in &gone {
            tracing::info!(node = %name, "{reason}; deleting it (its history stays)");
            batch.delete(name, reason);
        }
        match self.commit(batch).await {
            Ok(_) => self.forget(&gone),
            Err(e) => {
                tracing::error!("deleting nodes the static list dropped failed to store: {e}")
            }
        }
    }

    /// Takes the IP addresses the file gives for nodes already registered.
    async fn take_static_addresses(&mut self, specs: &[NodeSpec]) {
        let by_name: BTreeMap<&str, &NodeSpec> =
            specs.iter().map(|s| (s.name.as_str(), s)).collect();
        let mut batch = Batch::new(Micros::now());
        for (name, t) in &self.tracked {
            let Some(spec) = by_name.get(name.as_str()) else {
                continue;
            };
            let gives_ip = spec
                .addresses
                .iter()
                .any(|a| a.kind == AddressKind::InternalIP);
            if t.node.source != STATIC_SOURCE || !gives_ip || spec.addresses == t.node.addresses {
                continue;
            }
            let mut node = t.node.clone();
            let from = std::mem::replace(&mut node.addresses, spec.addresses.clone());
            let to = node.addresses.clone();
            batch.record(node, [EventKind::AddressesChanged { from, to }]);
        }
        if batch.is_empty() {
            return;
        }
        if let Err(e) = self.commit(batch).await {
            tracing::error!("addresses from the nodes file failed to store: {e}");
        }
    }

    /// Keeps what the sources list for deletes on a stopped store.
    async fn save_source_listing(&self) {
        let saved = self.source_listing().save(&self.store);
        if let Err(e) = match saved {
            Ok(()) => self.store.flush().await.map(|_| ()),
            Err(e) => Err(e),
        } {
            tracing::warn!("the source listing could not be kept in the store: {e}");
        }
    }
}

#[cfg(test)]
// Synchronous tests writing the files they read, outside any runtime.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    #[test]
    fn a_digest_tells_changed_bytes_apart_however_they_are_read() {
        let keys = DigestKeys::default();
        // Longer than a chunk, so the file is hashed in pieces.
        let text: Vec<u8> = (0..3 * DIGEST_CHUNK + 17)
            .map(|i| (i % 251) as u8)
            .collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes");
        std::fs::write(&path, &text).unwrap();
        let whole = keys.digest_of(&text);
        assert_eq!(keys.digest_of_file(&path).unwrap(), whole);
        let mut split = Digester::new(&keys);
        split.write(&text[..10]);
        split.write(&text[10..]);
        assert_eq!(split.finish(), whole);

        let mut changed = text.clone();
        changed[DIGEST_CHUNK + 1] ^= 1;
        assert_ne!(keys.digest_of(&changed), whole);
        assert_ne!(keys.digest_of(&text[..text.len() - 1]), whole);
        // Another run draws other keys; within one run a digest is stable.
        assert_eq!(keys.clone().digest_of(&text), whole);
    }

    #[test]
    fn the_file_is_parsed_only_when_its_bytes_changed() {
        let keys = DigestKeys::default();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("nodes");
        std::fs::write(&path, "127.0.0.1\n").unwrap();
        let capacity = Resources::default();
        let FileRead::Changed { digest, parsed } = read_nodes_file(&path, capacity, None, &keys)
        else {
            panic!("a first look is a change");
        };
        assert_eq!(parsed.unwrap().len(), 1);
        assert!(matches!(
            read_nodes_file(&path, capacity, Some(digest), &keys),
            FileRead::Unchanged
        ));
        std::fs::write(&path, "127.0.0.1\n127.0.0.2\n").unwrap();
        let FileRead::Changed { parsed, .. } =
            read_nodes_file(&path, capacity, Some(digest), &keys)
        else {
            panic!("new bytes are a change");
        };
        assert_eq!(parsed.unwrap().len(), 2);
        std::fs::remove_file(&path).unwrap();
        let FileRead::Changed { parsed, .. } =
            read_nodes_file(&path, capacity, Some(digest), &keys)
        else {
            panic!("a file gone is a change");
        };
        assert!(parsed.unwrap_err().contains("cannot read the nodes file"));
    }
}
