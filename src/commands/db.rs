//! `nodekeeper db status|verify|export|import|compact`.

use std::fs::File;
use std::io::{BufReader, BufWriter, Write};
use std::path::Path;

use super::progress::Progress;
use super::{Failure, Outcome};
use crate::cli::DbCommand;
use crate::inspect::Source;
use crate::logging::terminal::escape;
use crate::store::{compact, Store, StoreError, StoreOptions, StoreStatus};

/// Runs a `db` command on the store at `db` (or through `server`).
pub async fn db(
    db: &Path,
    server: Option<&str>,
    token: Option<&str>,
    command: &DbCommand,
) -> Outcome {
    match command {
        DbCommand::Backup { output } => {
            let source = Source::open_with_token(db, server, token)?;
            return backup(source, output).await;
        }
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
    let store = match Source::open_with_token(db, server, token)? {
        Source::Local(store) => store,
        // A running controller's store: its consistent snapshot, as `db backup` takes.
        source @ Source::Remote { .. } if matches!(command, DbCommand::Export { .. }) => {
            let DbCommand::Export {
                output,
                format_version,
            } = command
            else {
                unreachable!("matched above")
            };
            if *format_version != crate::store::EXPORT_FORMAT_VERSION {
                return Err(Failure {
                    message: format!(
                        "a running controller's snapshot is written in format {}; to write format {format_version}, take a backup (`db backup --output FILE`), import it into a scratch store (`nodekeeper --db SCRATCH db import --input FILE`) and run `nodekeeper --db SCRATCH db export --format-version {format_version}`",
                        crate::store::EXPORT_FORMAT_VERSION
                    ),
                    code: 2,
                });
            }
            return remote_export(source, output.as_deref()).await;
        }
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
        DbCommand::Export {
            output,
            format_version,
        } => export(&store, output.as_deref(), *format_version),
        DbCommand::Import { input } => import(
            &store,
            input.as_deref(),
            &mut Progress::on_terminal("import"),
        ),
        DbCommand::Status | DbCommand::Compact | DbCommand::Backup { .. } => {
            unreachable!("handled above")
        }
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

/// Runs `export` into `output` (standard output without one), made
/// durable before it returns.
// The `db` commands work alone on a stopped store (sled blocks as much as
// the file calls do); nothing else shares the runtime.
fn export_to<T>(
    output: Option<&Path>,
    export: impl FnOnce(&mut dyn Write) -> Result<T, StoreError>,
) -> Result<T, Failure> {
    let Some(path) = output else {
        let mut out = BufWriter::new(super::stdout());
        let summary = export(&mut out)?;
        out.flush()?;
        return Ok(summary);
    };
    Ok(crate::backups::export_file(path, export)?.0)
}

/// `db export`, in format `version`, saying what an older format left out.
fn export(store: &Store, output: Option<&Path>, version: u32) -> Outcome {
    let (s, left_out) = export_to(output, |out| store.export_format(out, version))?;
    match version {
        1 => eprintln!(
            "exported {} nodes and {} events in format 1; format 1 has no place for {} leases and {} outbox entries, left out (the kubelets renew their Leases, and the mirror finds its differences again)",
            s.nodes, s.events, left_out.leases, left_out.outbox
        ),
        2 => eprintln!(
            "exported {} nodes and {} events in format 2; format 2 has no place for {} API objects (bootstrap tokens, CSRs: make tokens again with `nodekeeper token create`), {} CertificateIssued events, and Leases' owners (the kubelets set them again), left out",
            s.nodes, s.events, left_out.api_objects, left_out.events
        ),
        _ => eprintln!(
            "exported {} nodes, {} events, {} leases, {} outbox entries and {} checkpoint nodes",
            s.nodes, s.events, s.leases, s.outbox, s.checkpoint_nodes
        ),
    }
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

/// `db backup`: the running controller's snapshot through its API, or a
/// stopped store's export, into FILE.partial, synced, then renamed to FILE:
/// a backup cut short (killed, the controller gone) never leaves a FILE.
async fn backup(source: Source, output: &Path) -> Outcome {
    let partial = partial_path(output);
    let (seq, bytes) = match source {
        Source::Local(store) => {
            // A stopped store: the whole of it, as `db export` writes it.
            let path = partial.clone();
            tokio::task::spawn_blocking(move || -> Result<(u64, u64), Failure> {
                let seq = store.last_seq();
                let (_, bytes) = crate::backups::export_file(&path, |out| store.export(out))?;
                Ok((seq, bytes))
            })
            .await
            .map_err(|e| e.to_string())??
        }
        remote @ Source::Remote { .. } => {
            let mut file = tokio::fs::File::create(&partial)
                .await
                .map_err(|e| format!("cannot create {}: {e}", partial.display()))?;
            let done = remote.backup(&mut file).await;
            match done {
                Ok(done) => {
                    file.sync_all().await?;
                    done
                }
                Err(e) => {
                    drop(file);
                    let _ = tokio::fs::remove_file(&partial).await;
                    return Err(e.into());
                }
            }
        }
    };
    tokio::fs::rename(&partial, output).await.map_err(|e| {
        format!(
            "cannot rename {} to {}: {e}",
            partial.display(),
            output.display()
        )
    })?;
    sync_parent(output).await;
    Ok(format!(
        "backed up the store as of seq {seq} to {} ({bytes} bytes); restore it with `nodekeeper --db NEW db import --input {}`\n",
        output.display(),
        output.display()
    ))
}

/// `db export` of a running controller's store: its snapshot, to FILE or stdout.
async fn remote_export(source: Source, output: Option<&Path>) -> Outcome {
    match output {
        Some(path) => {
            let text = backup(source, path).await?;
            eprint!("{text}");
            Ok(String::new())
        }
        None => {
            let mut out = super::AsyncStdout(tokio::io::stdout());
            let (seq, bytes) = match source.backup(&mut out).await {
                // The reader went away (`| head`): what it wanted, it has.
                Err(_) if super::stdout_closed() => return Ok(String::new()),
                done => done?,
            };
            tokio::io::AsyncWriteExt::flush(&mut out).await?;
            eprintln!("exported the running controller's store as of seq {seq} ({bytes} bytes)");
            Ok(String::new())
        }
    }
}

/// Where a backup is written until it is whole.
pub fn partial_path(output: &Path) -> std::path::PathBuf {
    let mut name = output.file_name().unwrap_or_default().to_os_string();
    name.push(".partial");
    output.with_file_name(name)
}

/// Makes a rename in `path`'s directory durable (best effort).
async fn sync_parent(path: &Path) {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    if let Ok(d) = tokio::fs::File::open(&dir).await {
        let _ = d.sync_all().await;
    }
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
