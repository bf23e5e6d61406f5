//! `db compact`: the store rewritten into a fresh directory by streaming its
//! export into an import, then swapped in, so that a kill at any moment
//! leaves either the old store at its path or one every command refuses,
//! saying what happened and what to run.
//!
//! - The copy is built at `PATH.compacting`; while it loads it is marked
//!   incomplete (see [`super::StoreError::ImportIncomplete`]), and until the
//!   swap `PATH` is the old store, untouched.
//! - The swap exchanges the two directories in one step (`renameat2` with
//!   `RENAME_EXCHANGE`); the old store, now at `PATH.compacting`, is removed
//!   after. A kill in between leaves the compacted store at `PATH` and the
//!   old one beside it, which the next compaction removes.
//! - Where the filesystem cannot exchange, the old store is renamed to
//!   `PATH.before-compact` first. A kill between the two renames leaves no
//!   store at `PATH`: every command refuses ([`check_path`]) and `db compact`
//!   finishes the swap (the copy is complete) or undoes it.
// Synchronous work on a stopped store (`db compact`, never on the
// controller's runtime): blocking file calls and a real-time wait are right here.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::path::{Path, PathBuf};

use thiserror::Error;

use super::{open_when_released, Store, StoreError, StoreOptions};

/// A compaction's leftovers, or a store path that a compaction left empty.
#[derive(Debug, Error)]
pub enum CompactError {
    #[error(
        "a compaction of {path} was interrupted between its two renames: the store is at {original} \
         (and a compacted copy may be at {copy}); nothing was lost. Run `nodekeeper db compact --db {path}` \
         to finish it, or move {original} back to {path}"
    )]
    Interrupted {
        path: PathBuf,
        original: PathBuf,
        copy: PathBuf,
    },
    #[error(
        "{0} is the store as it was before an earlier compaction, which finished; look at it and remove it \
         (`rm -r {0}`), then compact again"
    )]
    Leftover(PathBuf),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("the compacted copy does not match the store (exported {exported:?}, imported {imported:?}); nothing was changed")]
    Mismatch {
        exported: super::exchange::Counts,
        imported: super::exchange::Counts,
    },
}

/// The path of a compaction's sibling directory (`PATH.SUFFIX`).
pub fn sibling(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix}"));
    path.with_file_name(name)
}

/// Refuses a store path that an interrupted compaction left empty (the
/// store is beside it), instead of letting a command start a fresh store there.
pub fn check_path(path: &Path) -> Result<(), CompactError> {
    let original = sibling(path, "before-compact");
    if !path.exists() && original.exists() {
        return Err(CompactError::Interrupted {
            path: path.to_path_buf(),
            original,
            copy: sibling(path, "compacting"),
        });
    }
    Ok(())
}

/// What a compaction did.
#[derive(Debug, Clone)]
pub struct CompactReport {
    pub nodes: usize,
    pub events: usize,
    pub before: u64,
    pub after: u64,
    /// What it found left by an interrupted compaction, and did about it.
    pub recovered: Vec<String>,
}

fn io(what: String) -> impl FnOnce(std::io::Error) -> StoreError {
    move |source| StoreError::Compaction(CompactError::Io { what, source })
}

/// Whether a store directory holds a complete store: it opens and no
/// import is marked unfinished in it.
fn is_complete(path: &Path) -> bool {
    path.exists()
        && Store::open(
            path,
            &StoreOptions {
                cache_capacity: 16 << 20,
                ..StoreOptions::default()
            },
        )
        .is_ok()
}

/// Finishes or undoes a compaction interrupted between its two renames.
fn recover(path: &Path, recovered: &mut Vec<String>) -> Result<(), StoreError> {
    let original = sibling(path, "before-compact");
    let copy = sibling(path, "compacting");
    if path.exists() || !original.exists() {
        return Ok(());
    }
    if is_complete(&copy) {
        std::fs::rename(&copy, path).map_err(io(format!(
            "cannot move {} to {}",
            copy.display(),
            path.display()
        )))?;
        std::fs::remove_dir_all(&original)
            .map_err(io(format!("cannot remove {}", original.display())))?;
        recovered.push(format!(
            "finished an interrupted compaction: its complete copy is now {} and the old store was removed",
            path.display()
        ));
    } else {
        std::fs::rename(&original, path).map_err(io(format!(
            "cannot move {} back to {}",
            original.display(),
            path.display()
        )))?;
        recovered.push(format!(
            "undid an interrupted compaction: {} is the store as it was",
            path.display()
        ));
    }
    Ok(())
}

/// Compacts the (stopped) store at `path`, telling `progress` how far the
/// copy got as it goes. See the module docs.
pub fn compact(
    path: &Path,
    options: &StoreOptions,
    progress: &mut dyn FnMut(super::ImportProgress),
) -> Result<CompactReport, StoreError> {
    let mut recovered = Vec::new();
    recover(path, &mut recovered)?;
    let copy = sibling(path, "compacting");
    let original = sibling(path, "before-compact");
    if original.exists() {
        return Err(CompactError::Leftover(original).into());
    }
    // The store at `path` is whole (it opens below); a copy beside it is
    // what an interrupted compaction left, complete or not: not needed.
    let store = if recovered.is_empty() {
        Store::open(path, options)?
    } else {
        open_when_released(path, options)?
    };
    if copy.exists() {
        std::fs::remove_dir_all(&copy).map_err(io(format!("cannot remove {}", copy.display())))?;
        recovered.push(format!(
            "removed {}, left by an interrupted compaction",
            copy.display()
        ));
    }
    let before = store.size_on_disk();
    let fresh = Store::open(&copy, options)?;
    let (exported, imported) = stream(&store, &fresh, progress)?;
    if exported != imported.counts {
        drop(fresh);
        let _ = std::fs::remove_dir_all(&copy);
        return Err(CompactError::Mismatch {
            exported,
            imported: imported.counts,
        }
        .into());
    }
    let after = fresh.size_on_disk();
    // So that the restart after it does not re-read the whole copy.
    fresh.close_settled()?;
    drop(store);
    swap(path, &copy, &original)?;
    Ok(CompactReport {
        nodes: exported.nodes,
        events: exported.events,
        before,
        after,
        recovered,
    })
}

/// Puts the complete copy at `path` and removes the old store.
fn swap(path: &Path, copy: &Path, original: &Path) -> Result<(), StoreError> {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, path, CWD, copy, RenameFlags::EXCHANGE) {
        Ok(()) => {
            // `copy` is the old store now.
            std::fs::remove_dir_all(copy).map_err(io(format!(
                "cannot remove the old store at {}",
                copy.display()
            )))?;
            Ok(())
        }
        Err(e)
            if e == rustix::io::Errno::INVAL
                || e == rustix::io::Errno::NOSYS
                || e == rustix::io::Errno::OPNOTSUPP =>
        {
            // No atomic exchange here: two renames, guarded by `check_path`.
            std::fs::rename(path, original)
                .map_err(io(format!("cannot move {} aside", path.display())))?;
            if let Err(e) = std::fs::rename(copy, path) {
                std::fs::rename(original, path)
                    .map_err(io(format!("cannot move {} back", original.display())))?;
                return Err(io(
                    "cannot move the compacted store into place; the original is unchanged".into(),
                )(e));
            }
            std::fs::remove_dir_all(original)
                .map_err(io(format!("cannot remove {}", original.display())))?;
            Ok(())
        }
        Err(e) => Err(io(format!(
            "cannot swap {} with its compacted copy",
            path.display()
        ))(std::io::Error::from(e))),
    }
}

/// Streams the export of `from` into the import of `to` through a pipe:
/// memory stays flat whatever the history's length.
fn stream(
    from: &Store,
    to: &Store,
    progress: &mut dyn FnMut(super::ImportProgress),
) -> Result<(super::ExportSummary, super::ImportSummary), StoreError> {
    let (reader, writer) = std::io::pipe().map_err(StoreError::Export)?;
    std::thread::scope(|scope| {
        let exporter = scope.spawn(move || {
            // The import's end of the pipe sees its end when `out` drops.
            let mut out = std::io::BufWriter::with_capacity(256 << 10, writer);
            let summary = from.export(&mut out)?;
            std::io::Write::flush(&mut out).map_err(StoreError::Export)?;
            Ok::<_, StoreError>(summary)
        });
        let mut input = std::io::BufReader::with_capacity(256 << 10, reader);
        let imported = to.import_reporting(&mut input, progress);
        // Whatever happened, the exporter stops once the pipe is gone.
        drop(input);
        let exported = exporter.join().unwrap_or_else(|_| {
            Err(StoreError::Export(std::io::Error::other(
                "the export panicked",
            )))
        });
        match (exported, imported) {
            (Ok(e), Ok(i)) => Ok((e, i)),
            (_, Err(e)) | (Err(e), _) => Err(e),
        }
    })
}
