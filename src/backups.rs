//! Scheduled backups (`run --backup-dir`, `--backup-interval`,
//! `--backup-keep`): every interval, the store's consistent snapshot at its
//! newest durable seq ([`Store::export_at`], the path `db backup` and
//! `/v1/backup` take), written to `DIR/nodekeeper-SITE-TIME-seqN.jsonl`
//! through a `.partial` file renamed once whole; the newest `--backup-keep`
//! are kept. `/readyz/backup` fails once the last good backup is older than
//! twice the interval.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::metrics::{BackupLabels, BackupResult, Metrics};
use crate::model::Micros;
use crate::store::{Store, StoreError};

/// `--backup-dir` and its companions, validated.
#[derive(Debug, Clone)]
pub struct BackupConfig {
    pub dir: PathBuf,
    pub interval: Duration,
    pub keep: usize,
    /// `--site`, in the file names.
    pub site: Option<String>,
}

/// When the last backup succeeded (or, before the first, when they began):
/// what `/readyz/backup` judges.
pub struct BackupState {
    last_good: AtomicI64,
    interval: Duration,
}

impl BackupState {
    pub fn new(interval: Duration) -> Arc<BackupState> {
        Arc::new(BackupState {
            last_good: AtomicI64::new(Micros::now().0),
            interval,
        })
    }

    /// `/readyz/backup`: fails once the last good backup (or the start) is
    /// more than twice the interval ago.
    pub fn readiness(&self) -> Result<(), String> {
        let last = Micros(self.last_good.load(Ordering::Relaxed));
        let age = Micros::now().since(last);
        if age > self.interval * 2 {
            return Err(format!(
                "no backup has succeeded for {}s (--backup-interval {}s): the log says why",
                age.as_secs(),
                self.interval.as_secs()
            ));
        }
        Ok(())
    }
}

const PREFIX: &str = "nodekeeper-";
const SUFFIX: &str = ".jsonl";
const PARTIAL: &str = ".partial";

/// Takes a backup every interval until `stop`, the first at once.
pub async fn run(
    store: Arc<Store>,
    config: BackupConfig,
    metrics: Arc<Metrics>,
    state: Arc<BackupState>,
    stop: CancellationToken,
) {
    // Backups cut short by a crash leave their .partial files: not backups.
    remove_partials(&config.dir).await;
    let mut ticks = tokio::time::interval(config.interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let started = tokio::time::Instant::now();
        let result = {
            let store = store.clone();
            let config = config.clone();
            tokio::task::spawn_blocking(move || take(&store, &config))
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r)
        };
        let took = started.elapsed().as_secs_f64();
        match result {
            Ok(done) => {
                state.last_good.store(Micros::now().0, Ordering::Relaxed);
                metrics
                    .backup_last_success
                    .set(crate::metrics::unix_seconds(Micros::now()));
                metrics.backup_last_seq.set(done.seq as i64);
                metrics.backup_last_bytes.set(done.bytes as i64);
                metrics.backup_last_duration.set(took);
                count(&metrics, BackupResult::Succeeded);
                tracing::info!(
                    file = %done.path.display(),
                    seq = done.seq,
                    bytes = done.bytes,
                    seconds = took,
                    "backup taken"
                );
                prune(&config.dir, config.keep).await;
            }
            Err(e) => {
                count(&metrics, BackupResult::Failed);
                tracing::warn!(dir = %config.dir.display(), "backup failed: {e}");
            }
        }
    }
}

fn count(metrics: &Metrics, result: BackupResult) {
    metrics
        .backups
        .get_or_create(&BackupLabels { result })
        .inc();
}

struct Taken {
    path: PathBuf,
    seq: u64,
    bytes: u64,
}

/// One backup, on a blocking thread: the snapshot into a `.partial` file,
/// synced, renamed, the directory synced.
// A blocking task: its file calls are its work.
#[allow(clippy::disallowed_methods)]
fn take(store: &Store, config: &BackupConfig) -> Result<Taken, String> {
    let seq = store.durable_seq();
    let stamp: String = Micros::now()
        .rfc3339_seconds()
        .chars()
        .filter(|c| !matches!(c, '-' | ':'))
        .collect();
    let site = config.site.as_deref().unwrap_or("store");
    let path = config
        .dir
        .join(format!("{PREFIX}{site}-{stamp}-seq{seq}{SUFFIX}"));
    let partial = config
        .dir
        .join(format!("{PREFIX}{site}-{stamp}-seq{seq}{SUFFIX}{PARTIAL}"));
    let (_, bytes) = export_file(&partial, |out| store.export_at(seq, out)).map_err(|e| {
        let _ = std::fs::remove_file(&partial);
        format!("writing {}: {e}", partial.display())
    })?;
    std::fs::rename(&partial, &path)
        .map_err(|e| format!("cannot rename {}: {e}", partial.display()))?;
    if let Ok(dir) = std::fs::File::open(&config.dir) {
        let _ = dir.sync_all();
    }
    Ok(Taken { path, seq, bytes })
}

/// Writes `export` into a new file at `path` and syncs it to disk; returns
/// what `export` returned and the file's size. A backup, `db backup` and
/// `db export --output` write their files so.
// Callers run it on a blocking thread, or in a command on a stopped store.
#[allow(clippy::disallowed_methods)]
pub(crate) fn export_file<T>(
    path: &Path,
    export: impl FnOnce(&mut dyn std::io::Write) -> Result<T, StoreError>,
) -> Result<(T, u64), String> {
    let file = std::fs::File::create(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let mut out = std::io::BufWriter::with_capacity(256 << 10, file);
    let done = export(&mut out).map_err(|e| e.to_string())?;
    let file = out.into_inner().map_err(|e| e.to_string())?;
    file.sync_all().map_err(|e| e.to_string())?;
    let bytes = file.metadata().map_err(|e| e.to_string())?.len();
    Ok((done, bytes))
}

/// The backups in `dir`, oldest first (their names sort by time).
async fn backups(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let Ok(mut entries) = tokio::fs::read_dir(dir).await else {
        return found;
    };
    // Bounded by what the directory holds.
    while let Ok(Some(entry)) = entries.next_entry().await {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(PREFIX) && (name.ends_with(SUFFIX) || name.ends_with(PARTIAL)) {
            found.push(entry.path());
        }
    }
    found.sort();
    found
}

async fn remove_partials(dir: &Path) {
    for path in backups(dir).await {
        if path.to_string_lossy().ends_with(PARTIAL) {
            let _ = tokio::fs::remove_file(&path).await;
        }
    }
}

/// Removes all but the newest `keep` backups.
async fn prune(dir: &Path, keep: usize) {
    let done: Vec<PathBuf> = backups(dir)
        .await
        .into_iter()
        .filter(|p| p.to_string_lossy().ends_with(SUFFIX))
        .collect();
    for old in &done[..done.len().saturating_sub(keep)] {
        if let Err(e) = tokio::fs::remove_file(old).await {
            tracing::warn!(file = %old.display(), "cannot remove an old backup: {e}");
        }
    }
}
