//! `nodekeeper db status|verify|export|import|compact`.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use super::{Failure, Outcome};
use crate::cli::DbCommand;
use crate::inspect::Source;
use crate::store::{Store, StoreOptions, StoreStatus};

pub async fn db(source: Source, db: &Path, command: &DbCommand) -> Outcome {
    if let DbCommand::Status = command {
        return Ok(status_text(&source.status().await?, source.is_remote()));
    }
    let store = match source {
        Source::Local(store) => store,
        Source::Remote { .. } => {
            return Err(Failure {
                message: format!(
                    "the store at {} is held by a running controller; stop it to run this `db` command (`db status` works while it runs)",
                    db.display()
                ),
                code: 1,
            })
        }
    };
    match command {
        DbCommand::Status => unreachable!("handled above"),
        DbCommand::Verify => verify(&store),
        DbCommand::Export { output } => export(&store, output.as_deref()),
        DbCommand::Import { input } => import(&store, input.as_deref()),
        DbCommand::Compact => compact(store, db),
    }
}

fn status_text(s: &StoreStatus, remote: bool) -> String {
    let time = |t: Option<crate::model::Micros>| t.map_or("-".to_string(), |t| t.rfc3339_seconds());
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<16}{v}\n"));
    line("Path:", s.path.display().to_string());
    line(
        "Schema:",
        format!("{} (this build: {})", s.schema_version, migrations::CURRENT),
    );
    line("Nodes:", s.nodes.to_string());
    line("Events:", format!("{} (last seq {})", s.events, s.last_seq));
    line("Outbox:", s.outbox.to_string());
    line("First event:", time(s.first_event));
    line("Last event:", time(s.last_event));
    line("Size on disk:", human_bytes(s.size_on_disk));
    line(
        "Controller:",
        s.last_instance.clone().unwrap_or_else(|| "-".into()),
    );
    line(
        "State:",
        if remote {
            "running (read through its API)".into()
        } else if let Some(t) = s.last_clean_stop {
            format!("stopped cleanly at {}", t.rfc3339_seconds())
        } else if s.last_instance.is_some() {
            "stopped without a clean stop (crash or kill); the next start records the gap".into()
        } else {
            "never run".into()
        },
    );
    out
}

fn human_bytes(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64),
        b if b >= 1 << 20 => format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64),
        b if b >= 1 << 10 => format!("{:.1} KiB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn verify(store: &Store) -> Outcome {
    let report = store.verify()?;
    let mut text = format!(
        "checked {} nodes and {} events\n",
        report.nodes, report.events
    );
    if report.problems.is_empty() {
        text.push_str("ok: every record reads back and the registry agrees with its history\n");
        return Ok(text);
    }
    for p in &report.problems {
        text.push_str(&format!("problem: {p}\n"));
    }
    Err(Failure {
        message: format!("{text}{} problems found", report.problems.len()),
        code: 1,
    })
}

// The `db` commands work alone on a stopped store (sled blocks as much as
// the file calls do); nothing else shares the runtime.
#[allow(clippy::disallowed_methods)]
fn export(store: &Store, output: Option<&Path>) -> Outcome {
    let summary = match output {
        None => {
            let mut out = BufWriter::new(super::stdout());
            let s = store.export(&mut out)?;
            out.flush()?;
            s
        }
        Some(path) => {
            let file =
                File::create(path).map_err(|e| format!("cannot create {}: {e}", path.display()))?;
            let mut out = BufWriter::new(file);
            let s = store.export(&mut out)?;
            out.into_inner().map_err(|e| e.to_string())?.sync_all()?;
            s
        }
    };
    eprintln!(
        "exported {} nodes and {} events",
        summary.nodes, summary.events
    );
    Ok(String::new())
}

// The `db` commands work alone on a stopped store (sled blocks as much as
// the file calls do); nothing else shares the runtime.
#[allow(clippy::disallowed_methods)]
fn import(store: &Store, input: Option<&Path>) -> Outcome {
    let summary = match input {
        None => store.import(&mut std::io::stdin().lock())?,
        Some(path) => {
            let file =
                File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            store.import(&mut BufReader::new(file))?
        }
    };
    Ok(format!(
        "imported {} nodes and {} events (last seq {})\n",
        summary.nodes, summary.events, summary.last_seq
    ))
}

/// Export into a fresh store beside the old one, check it, then swap the
/// directories. The old store is kept until the new one is in place.
// The `db` commands work alone on a stopped store (sled blocks as much as
// the file calls do); nothing else shares the runtime.
#[allow(clippy::disallowed_methods)]
fn compact(store: Store, db: &Path) -> Outcome {
    let before = store.size_on_disk();
    let fresh_path = sibling(db, "compacting");
    let old_path = sibling(db, "before-compact");
    for p in [&fresh_path, &old_path] {
        if p.exists() {
            return Err(format!(
                "{} exists from an earlier compaction; look at it and remove it first",
                p.display()
            )
            .into());
        }
    }
    let mut exported = Vec::new();
    let summary = store.export(&mut exported)?;
    let fresh = Store::open(&fresh_path, &StoreOptions::default())?;
    let imported = fresh.import(&mut exported.as_slice())?;
    if (imported.nodes, imported.events) != (summary.nodes, summary.events) {
        let _ = std::fs::remove_dir_all(&fresh_path);
        return Err("the compacted copy does not match the store; nothing was changed".into());
    }
    let after = fresh.size_on_disk();
    drop(fresh);
    drop(store);
    std::fs::rename(db, &old_path)?;
    if let Err(e) = std::fs::rename(&fresh_path, db) {
        std::fs::rename(&old_path, db)?;
        return Err(format!(
            "cannot move the compacted store into place ({e}); the original is unchanged"
        )
        .into());
    }
    std::fs::remove_dir_all(&old_path)?;
    Ok(format!(
        "compacted {} nodes and {} events: {} -> {}\n",
        summary.nodes,
        summary.events,
        human_bytes(before),
        human_bytes(after)
    ))
}

fn sibling(db: &Path, suffix: &str) -> PathBuf {
    let mut name = db.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".{suffix}"));
    db.with_file_name(name)
}
