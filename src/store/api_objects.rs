//! API objects kept on their own, not with a node: bootstrap-token Secrets
//! and CertificateSigningRequests. Each is its JSON and a version (its
//! `resourceVersion`), written with compare-and-swap so that a create never
//! replaces and an update never overwrites a write it did not see. Like
//! every write here, not durable until [`Store::flush`]; the API flushes
//! before it answers.

use serde::{Deserialize, Serialize};

use super::records::{decode, encode, joined_key, split_key, DecodeError};
use super::{Store, StoreError};

/// One object: `resource` as the API names it (`secrets`,
/// `certificatesigningrequests.certificates.k8s.io`), `namespace` empty for
/// cluster-scoped ones. Its fields are an export's `apiObject` line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiObject {
    pub resource: String,
    pub namespace: String,
    pub name: String,
    /// Its resourceVersion: from one counter for every object of this tree,
    /// so a list's version is the greatest of its items' and a watch from
    /// it misses nothing.
    pub version: u64,
    pub json: String,
}

/// Why a compare-and-swap write did not happen.
#[derive(Debug, thiserror::Error)]
pub enum ApiWriteError {
    #[error("already exists")]
    Exists,
    #[error("not found")]
    NotFound,
    /// The object is not at the version the writer read.
    #[error("the object has been modified")]
    Conflict,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Envelope of a stored object. Append-only: postcard stores the index.
#[derive(Debug, Serialize, Deserialize)]
enum StoredApiObject {
    V1 { version: u64, json: String },
}

/// How many deleted objects of a resource are remembered for watches (a
/// CSR with its certificate takes ~3 kB): the cleaner's hourly removals of
/// a busy site fit, and a watch from before the oldest is told to relist.
const DELETIONS_KEPT: usize = 1024;

/// The objects deleted lately, by resource, each at the version of its
/// deletion: what a watch resuming from an older version has not seen, as
/// kube-apiserver's watch cache keeps deletions. Deletions at or before
/// `since` (made before the store was opened), or before a resource's own
/// floor (dropped), may be forgotten.
#[derive(Debug, Default)]
pub(super) struct Deletions {
    since: u64,
    kept: std::collections::BTreeMap<String, Kept>,
}

/// One resource's remembered deletions, and the newest one dropped.
#[derive(Debug, Default)]
struct Kept {
    floor: u64,
    objects: std::collections::VecDeque<ApiObject>,
}

/// A watch asked for deletions from a version older than those remembered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("deletions after version {requested} are no longer all known (known after {floor})")]
pub struct DeletionsForgotten {
    pub requested: u64,
    pub floor: u64,
}

fn key(resource: &str, namespace: &str, name: &str) -> Vec<u8> {
    joined_key([resource, namespace, name])
}

fn decode_object(key: &[u8], bytes: &[u8]) -> Result<ApiObject, DecodeError> {
    let what = || format!("the API object {:?}", String::from_utf8_lossy(key));
    let Some([resource, namespace, name]) = split_key(key) else {
        return Err(DecodeError {
            what: what(),
            reason: "its key is not resource, namespace and name".into(),
        });
    };
    let StoredApiObject::V1 { version, json } = decode::<StoredApiObject>(bytes, what)?;
    Ok(ApiObject {
        resource,
        namespace,
        name,
        version,
        json,
    })
}

fn encode_object(o: &ApiObject) -> Vec<u8> {
    encode(&StoredApiObject::V1 {
        version: o.version,
        json: o.json.clone(),
    })
}

impl Store {
    /// One object, if kept.
    pub fn api_object(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Option<ApiObject>, StoreError> {
        let key = key(resource, namespace, name);
        match self.api_objects.get(&key)? {
            Some(bytes) => Ok(Some(decode_object(&key, &bytes)?)),
            None => Ok(None),
        }
    }

    /// Every object of a resource (in one namespace, or all with `None`),
    /// by namespace and name.
    pub fn api_objects(
        &self,
        resource: &str,
        namespace: Option<&str>,
    ) -> Result<Vec<ApiObject>, StoreError> {
        let mut prefix = resource.as_bytes().to_vec();
        prefix.push(0);
        if let Some(ns) = namespace {
            prefix.extend_from_slice(ns.as_bytes());
            prefix.push(0);
        }
        self.api_objects
            .scan_prefix(prefix)
            .map(|entry| {
                let (key, bytes) = entry?;
                Ok(decode_object(&key, &bytes)?)
            })
            .collect()
    }

    /// How many objects of a resource are kept.
    pub fn api_object_count(&self, resource: &str) -> usize {
        let mut prefix = resource.as_bytes().to_vec();
        prefix.push(0);
        self.api_objects.scan_prefix(prefix).keys().count()
    }

    /// The newest version any object of this tree was given (0 for none):
    /// a list's resourceVersion.
    pub fn api_version(&self) -> u64 {
        self.api_versions.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Writes `object` with a new version: a create when `expected` is
    /// `None` (refused if it exists), else a replace of the object at that
    /// version. Answers the object as written. Not durable until a flush.
    pub fn put_api_object(
        &self,
        mut object: ApiObject,
        expected: Option<u64>,
    ) -> Result<ApiObject, ApiWriteError> {
        let key = key(&object.resource, &object.namespace, &object.name);
        let current = self.api_objects.get(&key).map_err(StoreError::from)?;
        match (&current, expected) {
            (Some(_), None) => return Err(ApiWriteError::Exists),
            (None, Some(_)) => return Err(ApiWriteError::NotFound),
            (Some(bytes), Some(version)) => {
                if decode_object(&key, bytes)
                    .map_err(StoreError::from)?
                    .version
                    != version
                {
                    return Err(ApiWriteError::Conflict);
                }
            }
            (None, None) => {}
        }
        object.version = self.next_api_version()?;
        let swapped = self
            .api_objects
            .compare_and_swap(&key, current, Some(encode_object(&object)))
            .map_err(StoreError::from)?;
        match swapped {
            Ok(()) => {
                self.api_changed.send_replace(object.version);
                Ok(object)
            }
            // Another write came between the read and this one.
            Err(_) if expected.is_none() => Err(ApiWriteError::Exists),
            Err(_) => Err(ApiWriteError::Conflict),
        }
    }

    /// Removes an object (at `expected`, when given); answers it as it was.
    /// Not durable until a flush.
    pub fn delete_api_object(
        &self,
        resource: &str,
        namespace: &str,
        name: &str,
        expected: Option<u64>,
    ) -> Result<ApiObject, ApiWriteError> {
        let key = key(resource, namespace, name);
        let Some(current) = self.api_objects.get(&key).map_err(StoreError::from)? else {
            return Err(ApiWriteError::NotFound);
        };
        let object = decode_object(&key, &current).map_err(StoreError::from)?;
        if expected.is_some_and(|v| v != object.version) {
            return Err(ApiWriteError::Conflict);
        }
        let version = self.next_api_version()?;
        let swapped = self
            .api_objects
            .compare_and_swap(&key, Some(current), None as Option<&[u8]>)
            .map_err(StoreError::from)?;
        match swapped {
            Ok(()) => {
                self.remember_deletion(ApiObject {
                    version,
                    ..object.clone()
                });
                self.api_changed.send_replace(version);
                Ok(object)
            }
            Err(_) => Err(ApiWriteError::Conflict),
        }
    }

    /// The objects of `resource` deleted after version `after`, oldest
    /// first, each with the version of its deletion; or, when deletions
    /// after `after` may have been forgotten, how far back they are known.
    pub fn api_deletions(
        &self,
        resource: &str,
        after: u64,
    ) -> Result<Vec<ApiObject>, DeletionsForgotten> {
        let deletions = self.api_deleted.lock().unwrap_or_else(|p| p.into_inner());
        let kept = deletions.kept.get(resource);
        let floor = deletions.since.max(kept.map_or(0, |k| k.floor));
        if after < floor {
            return Err(DeletionsForgotten {
                requested: after,
                floor,
            });
        }
        Ok(kept
            .into_iter()
            .flat_map(|k| k.objects.iter())
            .filter(|o| o.version > after)
            .cloned()
            .collect())
    }

    fn remember_deletion(&self, object: ApiObject) {
        let mut deletions = self.api_deleted.lock().unwrap_or_else(|p| p.into_inner());
        let kept = deletions.kept.entry(object.resource.clone()).or_default();
        kept.objects.push_back(object);
        while kept.objects.len() > DELETIONS_KEPT {
            if let Some(dropped) = kept.objects.pop_front() {
                kept.floor = kept.floor.max(dropped.version);
            }
        }
    }

    /// Forgets every deletion, known from `version` on (at open, at an
    /// import, at a reset).
    pub(super) fn forget_api_deletions(&self, version: u64) {
        let mut deletions = self.api_deleted.lock().unwrap_or_else(|p| p.into_inner());
        deletions.kept.clear();
        deletions.since = version;
    }

    /// Every object of every resource (for an export).
    pub(super) fn all_api_objects(&self) -> Result<Vec<ApiObject>, StoreError> {
        let mut out = Vec::new();
        for entry in self.api_objects.iter() {
            let (key, bytes) = entry?;
            if key.as_ref() != VERSION_KEY {
                out.push(decode_object(&key, &bytes)?);
            }
        }
        Ok(out)
    }

    /// Puts back an exported object as it was, version included (an import).
    pub(super) fn restore_api_object(&self, object: &ApiObject) -> Result<(), StoreError> {
        use std::sync::atomic::Ordering;
        let key = key(&object.resource, &object.namespace, &object.name);
        self.api_objects.insert(key, encode_object(object))?;
        if object.version > self.api_versions.load(Ordering::Acquire) {
            self.api_objects
                .insert(VERSION_KEY, &object.version.to_be_bytes())?;
            self.api_versions.store(object.version, Ordering::Release);
            self.forget_api_deletions(object.version);
            self.api_changed.send_replace(object.version);
        }
        Ok(())
    }

    /// Told the newest version after each write of this tree (for watches).
    pub fn api_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.api_changed.subscribe()
    }

    /// A new version, greater than every one given before, across restarts
    /// (the last one is kept in the tree itself, under an empty key).
    fn next_api_version(&self) -> Result<u64, StoreError> {
        use std::sync::atomic::Ordering;
        let _one_at_a_time = self
            .api_version_lock
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let next = self.api_versions.load(Ordering::Acquire) + 1;
        self.api_objects.insert(VERSION_KEY, &next.to_be_bytes())?;
        self.api_versions.store(next, Ordering::Release);
        Ok(next)
    }

    /// Reads the last version given back (at open).
    pub(super) fn read_api_version(tree: &sled::Tree) -> Result<u64, StoreError> {
        Ok(tree
            .get(VERSION_KEY)?
            .and_then(|v| <[u8; 8]>::try_from(v.as_ref()).ok())
            .map_or(0, u64::from_be_bytes))
    }
}

/// The key of the last version given: empty, so no object's key (which
/// holds two zero bytes) is ever it and no prefix scan finds it.
const VERSION_KEY: &[u8] = b"";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreOptions;

    fn object(name: &str, json: &str) -> ApiObject {
        ApiObject {
            resource: "secrets".into(),
            namespace: "kube-system".into(),
            name: name.into(),
            version: 0,
            json: json.into(),
        }
    }

    #[test]
    fn creates_replaces_and_deletes_by_version_across_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions::default();
        let first = {
            let store = Store::open(dir.path(), &options).unwrap();
            let a = store.put_api_object(object("a", "{}"), None).unwrap();
            assert!(matches!(
                store.put_api_object(object("a", "{}"), None),
                Err(ApiWriteError::Exists)
            ));
            let b = store
                .put_api_object(object("a", "[1]"), Some(a.version))
                .unwrap();
            assert!(b.version > a.version);
            assert!(matches!(
                store.put_api_object(object("a", "[2]"), Some(a.version)),
                Err(ApiWriteError::Conflict)
            ));
            assert!(matches!(
                store.put_api_object(object("z", "[2]"), Some(1)),
                Err(ApiWriteError::NotFound)
            ));
            store.put_api_object(object("c", "{}"), None).unwrap();
            store.flush_blocking().unwrap();
            b
        };
        let store = Store::open(dir.path(), &options).unwrap();
        let kept = store
            .api_object("secrets", "kube-system", "a")
            .unwrap()
            .unwrap();
        assert_eq!(kept, first);
        let names: Vec<_> = store
            .api_objects("secrets", Some("kube-system"))
            .unwrap()
            .into_iter()
            .map(|o| o.name)
            .collect();
        assert_eq!(names, ["a", "c"]);
        assert_eq!(store.api_object_count("secrets"), 2);
        assert!(store
            .api_objects("secrets", Some("default"))
            .unwrap()
            .is_empty());
        // Versions keep growing after a restart.
        let mut changes = store.api_changes();
        let gone = store
            .delete_api_object("secrets", "kube-system", "a", None)
            .unwrap();
        assert_eq!(gone, first);
        assert!(*changes.borrow_and_update() > first.version);
        let d = store.put_api_object(object("d", "{}"), None).unwrap();
        assert!(d.version > first.version + 1);
        assert_eq!(store.api_version(), d.version);
        assert!(matches!(
            store.delete_api_object("secrets", "kube-system", "a", None),
            Err(ApiWriteError::NotFound)
        ));
    }

    #[test]
    fn deletions_are_remembered_for_watches_until_too_many_or_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let options = StoreOptions::default();
        let store = Store::open(dir.path(), &options).unwrap();
        let a = store.put_api_object(object("a", "{}"), None).unwrap();
        let b = store.put_api_object(object("b", "{}"), None).unwrap();
        let gone = store
            .delete_api_object("secrets", "kube-system", "a", None)
            .unwrap();
        let deleted = store.api_deletions("secrets", b.version).unwrap();
        assert_eq!(deleted.len(), 1);
        assert_eq!(deleted[0].name, "a");
        assert_eq!(deleted[0].json, gone.json);
        // At the version of the deletion, after every earlier one.
        assert_eq!(deleted[0].version, store.api_version());
        assert!(deleted[0].version > a.version);
        assert!(store
            .api_deletions("secrets", deleted[0].version)
            .unwrap()
            .is_empty());
        assert!(store
            .api_deletions("certificatesigningrequests.certificates.k8s.io", 0)
            .unwrap()
            .is_empty());
        let csrs = "certificatesigningrequests.certificates.k8s.io";
        let csr = ApiObject {
            resource: csrs.into(),
            namespace: String::new(),
            ..object("c1", "{}")
        };
        store.put_api_object(csr, None).unwrap();
        store.delete_api_object(csrs, "", "c1", None).unwrap();
        // Past the most kept, a watch from before the oldest must relist.
        for i in 0..DELETIONS_KEPT {
            let name = format!("x{i}");
            store.put_api_object(object(&name, "{}"), None).unwrap();
            store
                .delete_api_object("secrets", "kube-system", &name, None)
                .unwrap();
        }
        let e = store.api_deletions("secrets", b.version).unwrap_err();
        assert_eq!(e.floor, deleted[0].version);
        // Each resource keeps its own: these pushed out no CSR's.
        let kept: Vec<_> = store
            .api_deletions(csrs, b.version)
            .unwrap()
            .into_iter()
            .map(|o| o.name)
            .collect();
        assert_eq!(kept, ["c1"]);
        store.flush_blocking().unwrap();
        let last = store.api_version();
        drop(store);
        // Deletions before a restart are not known after it.
        let store = crate::store::open_when_released(dir.path(), &options).unwrap();
        assert_eq!(
            store.api_deletions("secrets", last - 1).unwrap_err().floor,
            last
        );
        assert!(store.api_deletions("secrets", last).unwrap().is_empty());
    }

    #[test]
    fn an_export_and_import_keep_the_objects_and_their_versions() {
        let options = StoreOptions::default();
        let from_dir = tempfile::tempdir().unwrap();
        let from = Store::open(from_dir.path(), &options).unwrap();
        from.put_api_object(object("a", "{\"x\":1}"), None).unwrap();
        let b = from.put_api_object(object("b", "{}"), None).unwrap();
        let mut exported = Vec::new();
        let summary = from.export(&mut exported).unwrap();
        assert_eq!(summary.api_objects, 2);
        let to_dir = tempfile::tempdir().unwrap();
        let to = Store::open(&to_dir.path().join("db"), &options).unwrap();
        let loaded = to.import(&mut exported.as_slice()).unwrap();
        assert_eq!(loaded.counts.api_objects, 2);
        assert_eq!(
            to.api_object("secrets", "kube-system", "b")
                .unwrap()
                .unwrap(),
            b
        );
        // New versions carry on past the imported ones.
        let c = to.put_api_object(object("c", "{}"), None).unwrap();
        assert!(c.version > b.version);
    }
}
