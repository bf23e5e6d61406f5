//! `nodekeeper db status|verify|export|import|compact`.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use super::progress::Progress;
use super::{Failure, Outcome};
use crate::cli::DbCommand;
use crate::inspect::Source;
use crate::logging::terminal::escape;
use crate::store::{compact, Store, StoreOptions, StoreStatus};

/// Runs a `db` command on the store at `db` (or through `server`).
pub async fn db(db: &Path, server: Option<&str>, command: &DbCommand) -> Outcome {
    match command {
        DbCommand::Status => {
            let source = Source::open(db, server)?;
            return Ok(status_text(&source.status().await?, source.is_remote()));
        }
        // Import makes the store it loads into; compact may have to finish
        // an interrupted compaction before there is a store to open.
        DbCommand::Import { input } if server.is_none() => {
            let store = Store::open(db, &StoreOptions::default())?;
            let mut progress = Progress::on_terminal("import");
            let text = import(&store, input.as_deref(), &mut progress)?;
            // So that the first command after it does not re-read the whole store.
            store.close_settled()?;
            progress.finish();
            return Ok(text);
        }
        DbCommand::Compact if server.is_none() => return compact(db),
        _ => {}
    }
    let store = match Source::open(db, server)? {
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
        DbCommand::Verify => verify(&store),
        DbCommand::Export { output } => export(&store, output.as_deref()),
        DbCommand::Import { input } => import(
            &store,
            input.as_deref(),
            &mut Progress::on_terminal("import"),
        ),
        DbCommand::Status | DbCommand::Compact => unreachable!("handled above"),
    }
}

/// `db status` as text. Over 80 lines: one line or block per field, in the
/// order shown.
fn status_text(s: &StoreStatus, remote: bool) -> String {
    let time = |t: Option<crate::model::Micros>| t.map_or("-".to_string(), |t| t.rfc3339_seconds());
    let mut out = String::new();
    // Read from a running controller, it is text from the network: escaped.
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<16}{}\n", escape(&v)));
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
    line(
        "Horizon:",
        match &s.horizon {
            None => "none: the whole history is kept (nothing was pruned)".to_string(),
            Some(h) => format!(
                "seq {} at {}: the history before it was pruned; the registry as of it is kept ({} nodes)",
                h.seq,
                h.time.rfc3339_seconds(),
                h.nodes
            ),
        },
    );
    line(
        "Checkpoints:",
        match s.checkpoints.last() {
            None => "none yet".to_string(),
            Some(newest) => format!(
                "{}, newest at seq {} ({})",
                s.checkpoints.len(),
                newest.seq,
                newest.time.rfc3339_seconds()
            ),
        },
    );
    line(
        "Retention:",
        match &s.retention {
            Some(r) => format!(
                "{} or {}, whichever is less (the history takes {} now)",
                r.max_age_seconds
                    .map_or("no age limit".to_string(), |secs| format!(
                        "{} old",
                        age(secs)
                    )),
                r.max_bytes.map_or("no size limit".to_string(), human_bytes),
                human_bytes(r.history_bytes)
            ),
            None => "applied by a running controller (--history-retention, --history-max-bytes)"
                .to_string(),
        },
    );
    line("Size on disk:", human_bytes(s.size_on_disk));
    if !s.trees.is_empty() {
        line(
            "Size by tree:",
            "(records, keys and values as stored)".to_string(),
        );
        for t in &s.trees {
            out.push_str(&format!(
                "  {:<18}{:>12}  {:>10}\n",
                escape(&t.name),
                t.records,
                human_bytes(t.bytes)
            ));
        }
    }
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<16}{}\n", escape(&v)));
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

/// A retention as it is written on the command line (`90d`, `36h`, `90m`).
fn age(secs: u64) -> String {
    if secs > 0 && secs.is_multiple_of(86_400) {
        format!("{}d", secs / 86_400)
    } else {
        crate::duration::format(std::time::Duration::from_secs(secs))
    }
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
        // A problem quotes what the store holds, which came from the network.
        text.push_str(&format!("problem: {}\n", escape(&p.to_string())));
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
        "exported {} nodes, {} events, {} leases, {} outbox entries and {} checkpoint nodes",
        summary.nodes, summary.events, summary.leases, summary.outbox, summary.checkpoint_nodes
    );
    Ok(String::new())
}

// The `db` commands work alone on a stopped store (sled blocks as much as
// the file calls do); nothing else shares the runtime.
#[allow(clippy::disallowed_methods)]
fn import(store: &Store, input: Option<&Path>, progress: &mut Progress) -> Outcome {
    let mut report = |step| progress.update(step);
    let summary = match input {
        None => store.import_reporting(&mut std::io::stdin().lock(), &mut report)?,
        Some(path) => {
            let file =
                File::open(path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
            store.import_reporting(&mut BufReader::with_capacity(256 << 10, file), &mut report)?
        }
    };
    let c = &summary.counts;
    Ok(format!(
        "imported {} nodes, {} events, {} leases and {} outbox entries (last seq {}{}; {} checkpoints)\n",
        c.nodes,
        c.events,
        c.leases,
        c.outbox,
        summary.last_seq,
        if summary.horizon > 0 {
            format!(", history kept after seq {}", summary.horizon)
        } else {
            String::new()
        },
        summary.checkpoints
    ))
}

fn compact(db: &Path) -> Outcome {
    let mut progress = Progress::on_terminal("compact");
    let report = compact::compact(db, &StoreOptions::default(), &mut |step| {
        progress.update(step)
    })?;
    progress.finish();
    let mut text = String::new();
    for note in &report.recovered {
        text.push_str(&format!("{note}\n"));
    }
    text.push_str(&format!(
        "compacted {} nodes and {} events: {} -> {}\n",
        report.nodes,
        report.events,
        human_bytes(report.before),
        human_bytes(report.after)
    ));
    Ok(text)
}
