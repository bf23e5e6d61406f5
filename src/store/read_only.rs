//! Reading a stopped store that this user may read but not write (a store
//! owned by the controller's user, on a read-only mount, a backup): sled
//! 0.34 opens every store for writing and has no read-only mode, so the
//! store's files are copied, under its lock, into a temporary directory and
//! the copy is opened. The copy goes when the store is dropped; a write to
//! it is refused by its users ([`Store::is_copy`]), never made and lost.
// Synchronous file work of the one-shot inspection commands, on a stopped
// store: blocking file calls are right here.
#![allow(clippy::disallowed_methods)]

use std::path::{Path, PathBuf};

use fs2::FileExt;

use super::{Store, StoreError, StoreOptions};

/// What a copied store keeps: the store it was copied from, and the copy's
/// directory, removed when the store is dropped.
#[derive(Debug)]
pub(super) struct Copy {
    pub original: PathBuf,
    pub _dir: tempfile::TempDir,
}

/// Whether an error opening the store at its path says the user may not
/// write there (the files or the directory), so that a copy can be read.
pub(super) fn is_not_writable(e: &StoreError) -> bool {
    match e {
        StoreError::Open {
            source: sled::Error::Io(io),
            ..
        } => matches!(
            io.kind(),
            std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
        ),
        _ => false,
    }
}

/// Opens a copy of the stopped store at `path`: its files are copied while
/// a lock on it keeps a controller from starting on it (one running on it
/// holds it: [`StoreError::Locked`]).
pub(super) fn open_copy(path: &Path, options: &StoreOptions) -> Result<Store, StoreError> {
    // Permission denied while reading the store's own files: this user may
    // not read it either (a store directory of mode 0700, say).
    let cannot = |what: String, source: std::io::Error| {
        if source.kind() == std::io::ErrorKind::PermissionDenied {
            StoreError::Unreadable {
                path: path.to_path_buf(),
                source,
            }
        } else {
            StoreError::Copy {
                path: path.to_path_buf(),
                what,
                source,
            }
        }
    };
    let lock_file = path.join("db");
    let lock = std::fs::File::open(&lock_file)
        .map_err(|e| cannot(format!("cannot open {}", lock_file.display()), e))?;
    // sled locks the same file, exclusively, while a store is open.
    if FileExt::try_lock_shared(&lock).is_err() {
        return Err(StoreError::Locked {
            path: path.to_path_buf(),
        });
    }
    let dir = tempfile::Builder::new()
        .prefix("nodekeeper-read-")
        .tempdir()
        .map_err(|source| StoreError::Copy {
            path: path.to_path_buf(),
            what: format!(
                "cannot make a directory for the copy in {}",
                std::env::temp_dir().display()
            ),
            source,
        })?;
    let copy = dir.path().join("store");
    copy_tree(path, &copy).map_err(|(what, e)| cannot(what, e))?;
    drop(lock);
    let mut store = Store::open(&copy, options)?;
    store.copy = Some(Copy {
        original: path.to_path_buf(),
        _dir: dir,
    });
    Ok(store)
}

/// Copies the directory `from` into a new directory `to`: its files and
/// subdirectories (sled's blobs); anything else is left out.
fn copy_tree(from: &Path, to: &Path) -> Result<(), (String, std::io::Error)> {
    std::fs::create_dir(to).map_err(|e| (format!("cannot make {}", to.display()), e))?;
    let entries =
        std::fs::read_dir(from).map_err(|e| (format!("cannot list {}", from.display()), e))?;
    for entry in entries {
        let entry = entry.map_err(|e| (format!("cannot list {}", from.display()), e))?;
        let (source, target) = (entry.path(), to.join(entry.file_name()));
        let kind = entry
            .file_type()
            .map_err(|e| (format!("cannot look at {}", source.display()), e))?;
        if kind.is_dir() {
            copy_tree(&source, &target)?;
        } else if kind.is_file() {
            std::fs::copy(&source, &target).map_err(|e| {
                (
                    format!("cannot copy {} to {}", source.display(), target.display()),
                    e,
                )
            })?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_copy_reads_as_the_store_and_goes_with_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = Store::open(&path, &StoreOptions::default()).unwrap();
        // A running controller holds the store: no copy is taken behind its back.
        assert!(matches!(
            open_copy(&path, &StoreOptions::default()),
            Err(StoreError::Locked { .. })
        ));
        let created = store.status().unwrap();
        drop(store);
        let copy = open_copy(&path, &StoreOptions::default()).unwrap();
        assert!(copy.is_copy());
        assert_eq!(copy.origin(), path);
        assert_eq!(copy.status().unwrap().path, created.path);
        let copied = copy.path().to_path_buf();
        assert!(copied.exists() && copied != path);
        drop(copy);
        assert!(!copied.exists(), "the copy is removed with the store");
    }
}
