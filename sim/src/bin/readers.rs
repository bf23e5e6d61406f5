//! `nodekeeper-bench --readers 0,1,4+50`: what readers of the API cost the
//! controller's decisions. For each reader load in turn, on the same fleet
//! and controller: clients listing every node back to back (`GET
//! /api/v1/nodes`, reading and dropping each answer), open watches (as an
//! informer holds them: from the version a list gave, with bookmarks),
//! and a probe of small reads (`GET /api/v1/nodes/NAME` 20 times a second)
//! whose latency is the one a `kubectl get node` sees.
//!
//! The readers run on threads and runtimes of their own, so that the
//! bench's own sampling, and the small reads' timing, do not wait behind
//! the listers' bytes.

use std::fmt::Write as _;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, Context, Result};
use nodekeeper_sim::bench::{table_header, table_row, Align, Machine};
use nodekeeper_sim::latency::{Histogram, Window};
use tokio_util::sync::CancellationToken;

use super::{Args, Mode, Run, Sample};

/// How often the small read is made.
const SMALL_GET_EVERY: Duration = Duration::from_millis(50);
/// How long any one reader request may take before it counts as an error.
const READ_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a watch asks to stay open.
const WATCH_SECONDS: u64 = 600;
/// Pause after a failed request, so a refusing server is not spun against.
const RETRY_AFTER: Duration = Duration::from_millis(100);

/// One reader load: clients listing back to back, and open watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Readers {
    pub listers: usize,
    pub watches: usize,
}

impl FromStr for Readers {
    type Err = String;

    /// `4` (four listers) or `4+50` (and 50 watches).
    fn from_str(s: &str) -> Result<Readers, String> {
        let (listers, watches) = s.split_once('+').unwrap_or((s, "0"));
        let number = |n: &str| {
            n.trim().parse::<usize>().map_err(|_| {
                format!("{s:?}: a reader load is LISTERS or LISTERS+WATCHES, e.g. 4+50")
            })
        };
        Ok(Readers {
            listers: number(listers)?,
            watches: number(watches)?,
        })
    }
}

impl std::fmt::Display for Readers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.listers, self.watches) {
            (0, 0) => write!(f, "none"),
            (l, 0) => write!(f, "{l} lister{}", if l == 1 { "" } else { "s" }),
            (l, w) => write!(f, "{l} listers + {w} watches"),
        }
    }
}

/// What the readers counted, shared with their tasks.
#[derive(Default)]
struct Counts {
    lists: AtomicU64,
    list_bytes: AtomicU64,
    list_errors: AtomicU64,
    watch_bytes: AtomicU64,
    watch_errors: AtomicU64,
    gets: Histogram,
    get_errors: AtomicU64,
}

/// A reader load running against a controller until [`Load::stop`].
pub(super) struct Load {
    stop: CancellationToken,
    counts: Arc<Counts>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// What a load did between two [`Load::figures`].
#[derive(Debug, Clone, Default)]
pub(super) struct Figures {
    pub lists: u64,
    pub list_bytes: u64,
    pub list_errors: u64,
    pub watch_bytes: u64,
    pub watch_errors: u64,
    pub gets: Vec<u64>,
    pub get_errors: u64,
}

impl Figures {
    /// The window between `self` (its start) and `end`.
    pub fn until(&self, end: &Figures) -> Figures {
        Figures {
            lists: end.lists - self.lists,
            list_bytes: end.list_bytes - self.list_bytes,
            list_errors: end.list_errors - self.list_errors,
            watch_bytes: end.watch_bytes - self.watch_bytes,
            watch_errors: end.watch_errors - self.watch_errors,
            gets: Window::between(&self.gets, &end.gets).counts().to_vec(),
            get_errors: end.get_errors - self.get_errors,
        }
    }

    /// The small reads' latency quantile `q`, in milliseconds.
    pub fn get_ms(&self, q: f64) -> Option<f64> {
        Window::between(&[], &self.gets)
            .quantile(q)
            .map(|d| d.as_secs_f64() * 1000.0)
    }
}

impl Load {
    /// Starts `readers` against the controller at `url` (http only), and
    /// the small reads of node `probe_node`.
    pub fn start(url: &str, readers: Readers, probe_node: &str) -> Result<Load> {
        let stop = CancellationToken::new();
        let counts = Arc::new(Counts::default());
        let mut threads = Vec::new();
        // The small reads: alone on a thread, timed without waiting on the listers.
        {
            let (url, stop, counts) = (url.to_string(), stop.clone(), counts.clone());
            let path = format!("/api/v1/nodes/{probe_node}");
            threads.push(spawn_runtime("small-get", 1, move || {
                small_gets(url, path, counts, stop)
            })?);
        }
        if readers.listers + readers.watches > 0 {
            let (url, stop, counts) = (url.to_string(), stop.clone(), counts.clone());
            threads.push(spawn_runtime("readers", 2, move || async move {
                let mut tasks = tokio::task::JoinSet::new();
                for _ in 0..readers.listers {
                    tasks.spawn(lister(url.clone(), counts.clone(), stop.clone()));
                }
                for _ in 0..readers.watches {
                    tasks.spawn(watcher(url.clone(), counts.clone(), stop.clone()));
                }
                while tasks.join_next().await.is_some() {}
            })?);
        }
        Ok(Load {
            stop,
            counts,
            threads,
        })
    }

    pub fn figures(&self) -> Figures {
        let c = &self.counts;
        Figures {
            lists: c.lists.load(Ordering::Relaxed),
            list_bytes: c.list_bytes.load(Ordering::Relaxed),
            list_errors: c.list_errors.load(Ordering::Relaxed),
            watch_bytes: c.watch_bytes.load(Ordering::Relaxed),
            watch_errors: c.watch_errors.load(Ordering::Relaxed),
            gets: c.gets.counts(),
            get_errors: c.get_errors.load(Ordering::Relaxed),
        }
    }

    /// Stops every reader and waits for their threads.
    pub fn stop(mut self) {
        self.stop.cancel();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A thread running `task` to its end on a runtime of `workers` threads.
fn spawn_runtime<F, Fut>(name: &str, workers: usize, task: F) -> Result<std::thread::JoinHandle<()>>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let runtime = if workers <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .enable_all()
            .build()?
    };
    std::thread::Builder::new()
        .name(name.to_string())
        .spawn(move || runtime.block_on(task()))
        .with_context(|| format!("cannot start the {name} thread"))
}

fn client() -> reqwest::Client {
    // A client of its own for each reader: a connection of its own, as
    // separate programs would have.
    reqwest::Client::builder()
        .no_proxy()
        .timeout(READ_TIMEOUT)
        .build()
        .expect("a plain http client builds")
}

/// Reads a response to its end, dropping the bytes; how many there were.
async fn drain(mut response: reqwest::Response, stop: &CancellationToken) -> Result<u64> {
    let mut bytes = 0;
    loop {
        let chunk = tokio::select! {
            _ = stop.cancelled() => return Ok(bytes),
            chunk = response.chunk() => chunk?,
        };
        match chunk {
            Some(c) => bytes += c.len() as u64,
            None => return Ok(bytes),
        }
    }
}

async fn pause(stop: &CancellationToken) {
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = tokio::time::sleep(RETRY_AFTER) => {}
    }
}

/// Lists every node, back to back, until stopped.
async fn lister(url: String, counts: Arc<Counts>, stop: CancellationToken) {
    let client = client();
    let list = format!("{url}/api/v1/nodes");
    while !stop.is_cancelled() {
        let read = async {
            let response = client.get(&list).send().await?.error_for_status()?;
            drain(response, &stop).await
        };
        match read.await {
            Ok(bytes) if !stop.is_cancelled() => {
                counts.lists.fetch_add(1, Ordering::Relaxed);
                counts.list_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Ok(_) => {}
            Err(_) => {
                counts.list_errors.fetch_add(1, Ordering::Relaxed);
                pause(&stop).await;
            }
        }
    }
}

/// Holds a watch of every node, as an informer does: from the version a
/// list gave, with bookmarks; opened again when it ends.
async fn watcher(url: String, counts: Arc<Counts>, stop: CancellationToken) {
    let client = client();
    while !stop.is_cancelled() {
        let watched = async {
            let version = resource_version(&client, &url).await?;
            let response = client
                .get(format!(
                    "{url}/api/v1/nodes?watch=true&allowWatchBookmarks=true&timeoutSeconds={WATCH_SECONDS}&resourceVersion={version}"
                ))
                .timeout(Duration::from_secs(WATCH_SECONDS + 30))
                .send()
                .await?
                .error_for_status()?;
            drain(response, &stop).await
        };
        match watched.await {
            Ok(bytes) => {
                counts.watch_bytes.fetch_add(bytes, Ordering::Relaxed);
            }
            Err(_) => {
                counts.watch_errors.fetch_add(1, Ordering::Relaxed);
                pause(&stop).await;
            }
        }
    }
}

/// The registry's resourceVersion now, from a list of one node.
async fn resource_version(client: &reqwest::Client, url: &str) -> Result<String> {
    let list: serde_json::Value = client
        .get(format!("{url}/api/v1/nodes?limit=1"))
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    list["metadata"]["resourceVersion"]
        .as_str()
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("a NodeList without metadata.resourceVersion"))
}

/// One small read every [`SMALL_GET_EVERY`], each timed.
async fn small_gets(url: String, path: String, counts: Arc<Counts>, stop: CancellationToken) {
    let client = client();
    let get = format!("{url}{path}");
    let mut ticks = tokio::time::interval(SMALL_GET_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = ticks.tick() => {}
        }
        let started = Instant::now();
        let read = async {
            client
                .get(&get)
                .send()
                .await?
                .error_for_status()?
                .bytes()
                .await
        };
        match read.await {
            Ok(_) => counts.gets.record(started.elapsed()),
            Err(_) => {
                counts.get_errors.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// How long a load runs before its window opens: connections made, the
/// first lists under way.
const RAMP: Duration = Duration::from_secs(3);

/// One reader load's window.
pub(super) struct ReaderWindow {
    readers: Readers,
    start: Sample,
    end: Sample,
    load: Figures,
}

/// Runs `readers` for one window of `--measure`, sampling the controller
/// and the sims at its ends.
pub(super) async fn reader_window(
    run: &Run,
    client: &reqwest::Client,
    url: &str,
    machine: &Machine,
    args: &Args,
    readers: Readers,
    node: &str,
) -> Result<ReaderWindow> {
    eprintln!("   readers: {readers}, window {:?}", args.measure);
    let load = Load::start(url, readers, node)?;
    tokio::time::sleep(RAMP).await;
    let before = load.figures();
    let start = Sample::take(run, client, url, machine).await?;
    tokio::time::sleep(args.measure).await;
    let end = Sample::take(run, client, url, machine).await?;
    let after = load.figures();
    load.stop();
    Ok(ReaderWindow {
        readers,
        start,
        end,
        load: before.until(&after),
    })
}

impl ReaderWindow {
    fn secs(&self) -> f64 {
        self.end.at.duration_since(self.start.at).as_secs_f64()
    }

    /// The cells of its row in [`section`].
    fn cells(&self, mode: Mode) -> Vec<String> {
        let secs = self.secs();
        let (s, e) = (
            self.start.metrics.unwrap_or_default(),
            self.end.metrics.unwrap_or_default(),
        );
        let mut cells = vec![self.readers.to_string()];
        match mode {
            Mode::Probe { .. } => cells.push(format!("{:.0}", (e.probes - s.probes) / secs)),
            Mode::Push { .. } => {
                let (sp, ep) = (&self.start.pushes, &self.end.pushes);
                let beats = Window::between(&sp.latency, &ep.latency);
                let ms = |q| {
                    beats
                        .quantile(q)
                        .map_or("n/a".into(), |d| format!("{:.1}", d.as_secs_f64() * 1000.0))
                };
                cells.push(format!(
                    "{:.0}",
                    (self.end.heartbeats - self.start.heartbeats) / secs
                ));
                cells.push(format!("{} / {}", ms(0.5), ms(0.99)));
                cells.push((ep.failed - sp.failed).to_string());
            }
        }
        cells.extend(cells_of(&self.load, secs));
        cells.push(format!(
            "{:.2}",
            (self.end.controller_cpu - self.start.controller_cpu) / secs
        ));
        cells.push(format!("{:.0}", e.transitions - s.transitions));
        cells.push(format!("{:.0}", e.ready));
        cells
    }

    pub fn describe(&self, mode: Mode) -> String {
        let cells = self.cells(mode);
        let header = header(mode);
        header
            .iter()
            .zip(&cells)
            .map(|(h, c)| format!("{h}: {c}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

fn header(mode: Mode) -> Vec<&'static str> {
    let mut header = vec!["readers"];
    match mode {
        Mode::Probe { .. } => header.push("probes/s"),
        Mode::Push { .. } => header.extend([
            "heartbeats/s",
            "heartbeat p50 / p99 (ms)",
            "heartbeats failed",
        ]),
    }
    header.extend([
        "small GET p50 / p99 (ms)",
        "lists/s",
        "list MB/s",
        "watch kB/s",
        "reader errors",
        "ctrl CPU (cores)",
        "transitions",
        "Ready at end",
    ]);
    header
}

/// The reader windows of one fleet size, as a table.
pub(super) fn section(nodes: usize, mode: Mode, windows: &[ReaderWindow]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### {nodes} nodes under readers (every transition is a false one: no node changed)\n"
    );
    table_header(&mut out, &header(mode), Align::Right);
    for w in windows {
        table_row(&mut out, &w.cells(mode));
    }
    out
}

/// A reader window's own cells: small reads, lists and watches.
fn cells_of(f: &Figures, secs: f64) -> Vec<String> {
    let ms = |q| f.get_ms(q).map_or("n/a".into(), |v| format!("{v:.1}"));
    let mut errors = String::new();
    for (what, n) in [
        ("list", f.list_errors),
        ("watch", f.watch_errors),
        ("get", f.get_errors),
    ] {
        if n > 0 {
            let _ = write!(
                errors,
                "{}{n} {what}",
                if errors.is_empty() { "" } else { ", " }
            );
        }
    }
    vec![
        format!("{} / {}", ms(0.5), ms(0.99)),
        format!("{:.1}", f.lists as f64 / secs),
        format!("{:.0}", f.list_bytes as f64 / secs / 1e6),
        format!("{:.1}", f.watch_bytes as f64 / secs / 1e3),
        if errors.is_empty() {
            "0".into()
        } else {
            errors
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reader_loads_read_as_listers_plus_watches() {
        assert_eq!(
            "4+50".parse::<Readers>().unwrap(),
            Readers {
                listers: 4,
                watches: 50
            }
        );
        assert_eq!(
            "0".parse::<Readers>().unwrap(),
            Readers {
                listers: 0,
                watches: 0
            }
        );
        assert!("four".parse::<Readers>().is_err());
        assert_eq!("1".parse::<Readers>().unwrap().to_string(), "1 lister");
        assert_eq!(
            "4+50".parse::<Readers>().unwrap().to_string(),
            "4 listers + 50 watches"
        );
    }
}
