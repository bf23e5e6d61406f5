//! Credential files re-read when they change on disk, as kube-apiserver
//! reloads them: `--token-file`, `--client-ca-file`, and the serving
//! `--tls-cert-file`/`--tls-private-key-file` (projected tokens rotate, and
//! so do certificates).
//!
//! Every [`RELOAD_INTERVAL`] the files are read (each within
//! [`MAX_CREDENTIAL_FILE`]) and compared with what was read last; a change
//! is parsed and, if valid, swapped in for the next request or handshake. A
//! file that becomes unreadable or invalid leaves the last good copy in
//! use, logs what is wrong once per change, and sets
//! `nodekeeper_credential_file_stale{file}` to 1 until a good copy is read.

use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use rustls::sign::CertifiedKey;

use super::auth::{Authn, Tokens};
use super::x509::{certified_key, ClientCa};
use crate::metrics::Metrics;

/// How often the files are looked at.
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(5);

/// The most of a credential file read; a larger one is refused.
pub const MAX_CREDENTIAL_FILE: u64 = 4 << 20;

/// A value swapped whole when its file changes; readers take the current
/// one (a read lock and a reference count).
#[derive(Debug)]
pub struct Reloadable<T>(Arc<RwLock<Arc<T>>>);

impl<T> Clone for Reloadable<T> {
    fn clone(&self) -> Self {
        Reloadable(self.0.clone())
    }
}

impl<T> Reloadable<T> {
    pub fn new(value: T) -> Reloadable<T> {
        Reloadable(Arc::new(RwLock::new(Arc::new(value))))
    }

    pub fn from_arc(value: Arc<T>) -> Reloadable<T> {
        Reloadable(Arc::new(RwLock::new(value)))
    }

    pub fn current(&self) -> Arc<T> {
        // A writer only swaps a pointer: a poisoned lock still holds a whole value.
        match self.0.read() {
            Ok(guard) => guard.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    pub fn set(&self, value: T) {
        let value = Arc::new(value);
        match self.0.write() {
            Ok(mut guard) => *guard = value,
            Err(poisoned) => *poisoned.into_inner() = value,
        }
    }
}

/// Parses a credential's files (their bytes, in order) and swaps the result
/// in; says what it loaded, or what is wrong.
type Load = Box<dyn Fn(&[Vec<u8>]) -> Result<String, String> + Send + Sync>;

/// One credential: its flag, its files, what was last read of them.
struct Watched {
    /// The flag, without dashes: the metric's `file` label.
    flag: &'static str,
    paths: Vec<PathBuf>,
    /// What was read last time (good or not).
    seen: u64,
    load: Load,
}

/// The credential files being followed.
pub struct CredentialFiles {
    files: Mutex<Vec<Watched>>,
    metrics: Option<Arc<Metrics>>,
    /// How many timed checks [`CredentialFiles::run`] has finished.
    checks: tokio::sync::watch::Sender<u64>,
}

impl CredentialFiles {
    pub fn new(metrics: Option<Arc<Metrics>>) -> Arc<CredentialFiles> {
        Arc::new(CredentialFiles {
            files: Mutex::new(Vec::new()),
            metrics,
            checks: tokio::sync::watch::Sender::new(0),
        })
    }

    /// Follows `paths` (read whole once already, at start-up, and loaded):
    /// from now on a change is given to `load`.
    pub fn watch(
        &self,
        flag: &'static str,
        paths: Vec<PathBuf>,
        load: impl Fn(&[Vec<u8>]) -> Result<String, String> + Send + Sync + 'static,
    ) {
        let seen = fingerprint(&read_all(&paths));
        if let Some(metrics) = &self.metrics {
            metrics.credential_file_stale(flag).set(0);
        }
        self.lock().push(Watched {
            flag,
            paths,
            seen,
            load: Box::new(load),
        });
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Watched>> {
        self.files.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reads every file now and loads what changed (blocking file reads:
    /// call it from a blocking task). Returns the flags of the credentials
    /// whose file is unreadable or invalid, the last good copy kept.
    pub fn check(&self) -> Vec<&'static str> {
        let mut stale = Vec::new();
        for watched in self.lock().iter_mut() {
            let read = read_all(&watched.paths);
            let now = fingerprint(&read);
            if now == watched.seen {
                continue;
            }
            watched.seen = now;
            let outcome = read
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .and_then(|bytes| (watched.load)(&bytes));
            let flag = watched.flag;
            match outcome {
                Ok(what) => {
                    tracing::info!(
                        file = flag,
                        "--{flag} changed on disk and was reloaded: {what}"
                    );
                    self.set_stale(flag, false);
                }
                Err(e) => {
                    tracing::error!(
                        file = flag,
                        "--{flag} changed on disk but cannot be used, so the last good copy stays in use: {e}"
                    );
                    self.set_stale(flag, true);
                    stale.push(flag);
                }
            }
        }
        stale
    }

    fn set_stale(&self, flag: &str, stale: bool) {
        if let Some(metrics) = &self.metrics {
            metrics.credential_file_stale(flag).set(i64::from(stale));
        }
    }

    /// Checks every `every` until `shutdown`.
    pub async fn run(self: Arc<Self>, every: Duration, shutdown: CancellationToken) {
        let mut ticks = tokio::time::interval(every);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticks.tick().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticks.tick() => {}
            }
            let files = self.clone();
            if let Err(e) = tokio::task::spawn_blocking(move || files.check()).await {
                tracing::error!("checking the credential files failed: {e}");
            }
            self.checks.send_modify(|n| *n += 1);
        }
    }

    /// The count of timed checks done, to wait for the next.
    pub fn checks(&self) -> tokio::sync::watch::Receiver<u64> {
        self.checks.subscribe()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}

/// Each file's bytes, or why it cannot be read; at most
/// [`MAX_CREDENTIAL_FILE`] bytes each.
fn read_all(paths: &[PathBuf]) -> Vec<Result<Vec<u8>, String>> {
    paths.iter().map(|path| read_capped(path)).collect()
}

// Called from `check`, which runs in a blocking task (or a test).
#[allow(clippy::disallowed_methods)]
fn read_capped(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let file =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_CREDENTIAL_FILE + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_CREDENTIAL_FILE {
        return Err(format!(
            "{} is larger than {MAX_CREDENTIAL_FILE} bytes; a credential file is much smaller",
            path.display()
        ));
    }
    Ok(bytes)
}

/// What was read, as a number: a change in any byte or error changes it.
fn fingerprint(read: &[Result<Vec<u8>, String>]) -> u64 {
    let mut hasher = std::hash::DefaultHasher::new();
    read.hash(&mut hasher);
    hasher.finish()
}

/// The API's credentials as `run` loaded them at start-up, each with the
/// files it came from, to be followed from then on ([`Credentials::follow`]).
#[derive(Default)]
pub struct Credentials {
    /// `--token-file`.
    pub tokens: Option<(PathBuf, Reloadable<Tokens>)>,
    /// `--client-ca-file`.
    pub client_ca: Option<(PathBuf, Reloadable<ClientCa>)>,
    /// `--tls-cert-file` and `--tls-private-key-file`.
    pub serving: Option<(PathBuf, PathBuf, Reloadable<CertifiedKey>)>,
}

impl Credentials {
    /// How requests are authenticated with these.
    pub fn authn(&self) -> Authn {
        Authn {
            tokens: self.tokens.as_ref().map(|(_, t)| t.clone()),
            client_certs: self.client_ca.is_some(),
            bootstrap: None,
        }
    }

    /// The files to follow, each change loaded into the value it came from.
    pub fn follow(&self, metrics: Option<Arc<Metrics>>) -> Arc<CredentialFiles> {
        let files = CredentialFiles::new(metrics);
        if let Some((path, tokens)) = &self.tokens {
            let (origin, tokens) = (path.display().to_string(), tokens.clone());
            files.watch("token-file", vec![path.clone()], move |bytes| {
                let text = std::str::from_utf8(&bytes[0])
                    .map_err(|e| format!("--token-file {origin} is not UTF-8: {e}"))?;
                let loaded = Tokens::parse(text, &origin)?;
                let what = format!("{} tokens", loaded.len());
                tokens.set(loaded);
                Ok(what)
            });
        }
        if let Some((path, ca)) = &self.client_ca {
            let (origin, ca) = (path.display().to_string(), ca.clone());
            files.watch("client-ca-file", vec![path.clone()], move |bytes| {
                let loaded = ClientCa::parse(&bytes[0], &origin)?;
                let what = format!("{} CA certificates", loaded.count);
                ca.set(loaded);
                Ok(what)
            });
        }
        if let Some((cert, key, serving)) = &self.serving {
            let (cert_file, key_file) = (cert.display().to_string(), key.display().to_string());
            let serving = serving.clone();
            files.watch(
                "tls-cert-file",
                vec![cert.clone(), key.clone()],
                move |bytes| {
                    let loaded = certified_key(&bytes[0], &cert_file, &bytes[1], &key_file)?;
                    let what = format!("a chain of {} certificates", loaded.cert.len());
                    serving.set(loaded);
                    Ok(what)
                },
            );
        }
        files
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    // The test writes its files between checks, outside any runtime.
    #[allow(clippy::disallowed_methods)]
    fn a_change_is_loaded_and_a_bad_one_keeps_the_last_good() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("value");
        std::fs::write(&path, "1").unwrap();
        let metrics = Arc::new(Metrics::new());
        let files = CredentialFiles::new(Some(metrics.clone()));
        let value = Reloadable::new(1u32);
        let target = value.clone();
        files.watch("token-file", vec![path.clone()], move |bytes| {
            let text = std::str::from_utf8(&bytes[0]).map_err(|e| e.to_string())?;
            let n: u32 = text
                .trim()
                .parse()
                .map_err(|e| format!("not a number: {e}"))?;
            target.set(n);
            Ok(format!("{n}"))
        });
        let stale = || metrics.credential_file_stale("token-file").get();
        assert!(files.check().is_empty());
        assert_eq!(*value.current(), 1);
        std::fs::write(&path, "2").unwrap();
        assert!(files.check().is_empty());
        assert_eq!(*value.current(), 2);
        // Invalid: the last good value stays, and the metric says so.
        std::fs::write(&path, "two").unwrap();
        assert_eq!(files.check(), ["token-file"]);
        assert_eq!(*value.current(), 2);
        assert_eq!(stale(), 1);
        // Unchanged since: not read as new again.
        assert!(files.check().is_empty());
        // Gone: the same.
        std::fs::remove_file(&path).unwrap();
        assert_eq!(files.check(), ["token-file"]);
        assert_eq!(*value.current(), 2);
        std::fs::write(&path, "3").unwrap();
        assert!(files.check().is_empty());
        assert_eq!(*value.current(), 3);
        assert_eq!(stale(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn files_are_checked_every_interval() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("value");
        tokio::fs::write(&path, "1").await.unwrap();
        let files = CredentialFiles::new(None);
        let value = Reloadable::new(1u32);
        let target = value.clone();
        files.watch("client-ca-file", vec![path.clone()], move |bytes| {
            target.set(bytes[0].len() as u32);
            Ok(String::new())
        });
        let shutdown = CancellationToken::new();
        let mut checks = files.checks();
        let started = tokio::time::Instant::now();
        let task = tokio::spawn(files.clone().run(RELOAD_INTERVAL, shutdown.clone()));
        tokio::fs::write(&path, "four").await.unwrap();
        // The first timed check, one interval on, loads it.
        checks.changed().await.unwrap();
        assert_eq!(*value.current(), 4);
        assert_eq!(started.elapsed(), RELOAD_INTERVAL);
        shutdown.cancel();
        task.await.unwrap();
    }

    /// A rotated token file: the old token is refused (401) and the new one
    /// taken, from the next check on, through the guard as requests meet it.
    #[tokio::test]
    // The test rewrites its token file between explicit checks.
    #[allow(clippy::disallowed_methods)]
    async fn a_rotated_token_file_refuses_the_old_token_and_takes_the_new() {
        use axum::routing::get;
        use tower::ServiceExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.csv");
        std::fs::write(&path, "old-secret,edge-1\n").unwrap();
        let tokens = Tokens::load(&path).unwrap();
        let credentials = Credentials {
            tokens: Some((path.clone(), Reloadable::new(tokens))),
            ..Credentials::default()
        };
        let files = credentials.follow(None);
        let router = crate::server::harden(
            axum::Router::new().route("/api/v1/nodes", get(|| async { "ok" })),
            credentials.authn(),
        );
        let ask = |token: &'static str| {
            let router = router.clone();
            async move {
                let request = axum::http::Request::get("/api/v1/nodes")
                    .header("authorization", format!("Bearer {token}"))
                    .body(axum::body::Body::empty())
                    .unwrap();
                router.oneshot(request).await.unwrap().status().as_u16()
            }
        };
        assert_eq!(ask("old-secret").await, 200);
        assert_eq!(ask("new-secret").await, 401);
        std::fs::write(&path, "new-secret,edge-1\n").unwrap();
        assert!(files.check().is_empty());
        assert_eq!(ask("old-secret").await, 401);
        assert_eq!(ask("new-secret").await, 200);
        // A broken file keeps the last good tokens.
        std::fs::write(&path, "# nothing\n").unwrap();
        assert_eq!(files.check(), ["token-file"]);
        assert_eq!(ask("new-secret").await, 200);
    }
}
