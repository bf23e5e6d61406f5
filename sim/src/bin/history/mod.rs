//! `nodekeeper-bench --history`: the cost of history that lasts months. For
//! each node count it builds a store of a month of history (1M events by
//! default) with `db import`, then measures, as separate processes, the time
//! and peak RSS of every read the operator makes on a stopped store and of
//! export, compact and restart; then, against the running controller, the
//! reads over HTTP and watches from a recent version (server CPU and RSS).
//! A last run writes events into a store with a size limit and shows its
//! size on disk as retention prunes it. Works with a binary of any release
//! since format-1 exports (`--bin`), so figures can be compared.
//!
//! Some functions here run past ~80 lines: each is one phase of the run,
//! read top to bottom as it happens (start, wait, measure, report), its
//! steps sharing the processes and the figures they take; split, each part
//! would need all of them passed in.

mod churn;
mod workload;

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;

use nodekeeper_sim::bench::{
    command_line, command_output, cpu_ticks, memory_kib, parse_duration, Machine, Proc,
};

const START_TIMEOUT: Duration = Duration::from_secs(300);
const HTTP_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Parser)]
#[command(
    name = "nodekeeper-bench --history",
    about = "History benchmark: reads, export/import/compact and restart on a long history, and retention's hold on disk"
)]
struct Args {
    /// Node counts to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    sizes: Vec<usize>,
    /// Events in each history (a month of it).
    #[arg(long, default_value_t = 1_000_000)]
    events: usize,
    /// The nodekeeper binary (default: the one next to this executable).
    #[arg(long)]
    bin: Option<PathBuf>,
    /// Where the stores go (default: a new directory under the temp dir, removed after).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The controller's --listen address (a loopback one).
    #[arg(long, default_value = "127.84.0.1:0")]
    listen: String,
    /// Length of the retention run (0 skips it).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    churn: Duration,
    /// Events per second written in the retention run.
    #[arg(long, default_value_t = 2_000)]
    churn_rate: u64,
    /// --history-max-bytes of the retention run.
    #[arg(long, default_value = "64Mi")]
    churn_max_bytes: String,
    /// Only the retention run.
    #[arg(long)]
    churn_only: bool,
    /// Only write the history of the first of --sizes, as a format-1
    /// export, to this file (for `db import` by hand), and stop.
    #[arg(long)]
    write_export: Option<PathBuf>,
}

/// One measurement: what, how long, the CPU it took (user + system, for a
/// process of its own), the peak RSS, and a note.
struct Row {
    what: String,
    seconds: f64,
    cpu_seconds: Option<f64>,
    peak_kib: Option<u64>,
    note: String,
}

/// Runs the benchmark with the arguments after `--history`.
pub async fn run(args: impl Iterator<Item = String>) -> Result<()> {
    nodekeeper::install_crypto_provider();
    let args = Args::try_parse_from(args).map_err(|e| anyhow!("{e}"))?;
    if args.sizes.is_empty() || args.sizes.contains(&0) || args.events == 0 {
        bail!("--sizes and --events: give node counts and an event count above zero");
    }
    let bin = nodekeeper_sim::bench::nodekeeper_bin(args.bin.as_deref())?;
    if let Some(path) = &args.write_export {
        let facts = workload::write_export(path, args.sizes[0], args.events)?;
        println!(
            "wrote {} events about {} nodes to {}: busiest node {}, middle {}",
            args.events,
            args.sizes[0],
            path.display(),
            facts.busiest_node,
            facts.middle.rfc3339()
        );
        return Ok(());
    }
    let machine = Machine::probe(&bin);
    let (dir, made) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => (
            std::env::temp_dir().join(format!("nodekeeper-history-bench-{}", std::process::id())),
            true,
        ),
    };
    fs::create_dir_all(&dir)?;
    let outcome = bench(&args, &bin, &machine, &dir).await;
    if made {
        let _ = fs::remove_dir_all(&dir);
    }
    print!("{}", outcome?);
    Ok(())
}

async fn bench(args: &Args, bin: &Path, machine: &Machine, dir: &Path) -> Result<String> {
    let mut out = String::new();
    let _ = writeln!(out, "## nodekeeper history benchmark\n");
    let _ = writeln!(out, "command:  {}", command_line());
    let _ = writeln!(out, "binary:   {} ({})", bin.display(), machine.version);
    let _ = writeln!(
        out,
        "machine:  {} cores (nproc), kernel {} (uname -r), load {} (uptime)",
        machine.cores,
        machine.kernel,
        command_output("uptime", &[]).unwrap_or_else(|| "?".into())
    );
    let _ = writeln!(
        out,
        "stores:   {} ({})",
        dir.display(),
        command_output("stat", &["-f", "-c", "%T", &dir.to_string_lossy()]).unwrap_or_default()
    );
    if !args.churn_only {
        for &nodes in &args.sizes {
            eprintln!("== {nodes} nodes, {} events", args.events);
            let rows = bench_size(args, bin, machine, dir, nodes).await?;
            let _ = writeln!(out, "\n### {nodes} nodes, {} events\n", args.events);
            let _ = writeln!(out, "| what | time | CPU | peak RSS | note |");
            let _ = writeln!(out, "|---|---:|---:|---:|---|");
            for r in &rows {
                let _ = writeln!(out, "{}", table_line(r));
            }
        }
    }
    if !args.churn.is_zero() {
        eprintln!("== retention run: {:?}", args.churn);
        let max_bytes = nodekeeper::quantity::parse_memory(&args.churn_max_bytes)
            .map_err(|e| anyhow!("--churn-max-bytes: {e}"))?;
        out.push_str(
            &churn::run(&dir.join("churn"), args.churn, args.churn_rate, max_bytes).await?,
        );
    }
    Ok(out)
}

/// A row as a line of the table.
fn table_line(r: &Row) -> String {
    format!(
        "| {} | {} | {} | {} | {} |",
        r.what,
        seconds(r.seconds),
        r.cpu_seconds
            .map_or("-".to_string(), |s| format!("{s:.2} s")),
        r.peak_kib
            .map_or("-".to_string(), |k| format!("{} MiB", k / 1024)),
        r.note
    )
}

/// Pushes a row, and shows it at once on stderr, so a run cut short still
/// leaves what it measured.
fn push_row(rows: &mut Vec<Row>, row: Row) {
    eprintln!("   {}", table_line(&row));
    rows.push(row);
}

/// Sets the last row's note, and shows the row again with it.
fn note_last(rows: &mut [Row], note: String) {
    if let Some(last) = rows.last_mut() {
        last.note = note;
        eprintln!("   {}", table_line(last));
    }
}

fn seconds(s: f64) -> String {
    if s < 1.0 {
        format!("{:.0} ms", s * 1000.0)
    } else {
        format!("{s:.2} s")
    }
}

/// What `/usr/bin/time` measured of one process.
struct Timed {
    wall: f64,
    cpu: f64,
    peak_kib: u64,
    stderr: String,
}

/// Runs `bin ARGS` under `/usr/bin/time`, its output to `stdout` (a file or
/// nothing).
fn timed(bin: &Path, args: &[&str], stdout: Option<&Path>) -> Result<Timed> {
    let started = Instant::now();
    let out = Command::new("/usr/bin/time")
        .arg("-f")
        .arg("@@time %e %M %U %S")
        .arg(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(match stdout {
            Some(path) => Stdio::from(fs::File::create(path)?),
            None => Stdio::null(),
        })
        .output()
        .context("cannot run /usr/bin/time")?;
    let wall = started.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let figures: Vec<f64> = stderr
        .lines()
        .find_map(|l| l.strip_prefix("@@time "))
        .map(|l| {
            l.split_whitespace()
                .filter_map(|f| f.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let [_, peak, user, system] = figures[..] else {
        bail!("no figures from /usr/bin/time: {stderr}");
    };
    if !out.status.success() {
        bail!("nodekeeper {} failed: {stderr}", args.join(" "));
    }
    Ok(Timed {
        wall,
        cpu: user + system,
        peak_kib: peak as u64,
        stderr,
    })
}

fn cli_row(
    rows: &mut Vec<Row>,
    what: &str,
    bin: &Path,
    args: &[&str],
    stdout: Option<&Path>,
) -> Result<String> {
    eprintln!("   {what}");
    let measured = timed(bin, args, stdout)?;
    let size = stdout
        .and_then(|p| fs::metadata(p).ok())
        .map_or(String::new(), |m| {
            format!("{:.1} MiB out", m.len() as f64 / 1048576.0)
        });
    push_row(
        rows,
        Row {
            what: what.to_string(),
            seconds: measured.wall,
            cpu_seconds: Some(measured.cpu),
            peak_kib: Some(measured.peak_kib),
            note: size,
        },
    );
    Ok(measured.stderr)
}

fn dir_size(path: &Path) -> u64 {
    fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => dir_size(&e.path()),
                    _ => e.metadata().map_or(0, |m| m.len()),
                })
                .sum()
        })
        .unwrap_or(0)
}

fn mib(bytes: u64) -> String {
    format!("{:.0} MiB", bytes as f64 / 1048576.0)
}

async fn bench_size(
    args: &Args,
    bin: &Path,
    machine: &Machine,
    dir: &Path,
    nodes: usize,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    let base = dir.join(format!("n{nodes}"));
    let _ = fs::remove_dir_all(&base);
    fs::create_dir_all(&base)?;
    let export_file = base.join("history.jsonl");
    eprintln!("   writing {} events for {nodes} nodes", args.events);
    let facts = workload::write_export(&export_file, nodes, args.events)?;
    let db = base.join("db");
    let db_arg = db.to_string_lossy().into_owned();
    let input = export_file.to_string_lossy().into_owned();
    cli_row(
        &mut rows,
        "`db import` (format 1)",
        bin,
        &["--db", &db_arg, "db", "import", "--input", &input],
        None,
    )?;
    note_last(
        &mut rows,
        format!(
            "{} export, {} on disk after",
            mib(fs::metadata(&export_file)?.len()),
            mib(dir_size(&db))
        ),
    );
    let node = facts.busiest_node.clone();
    let sink = base.join("out");
    cli_row(
        &mut rows,
        &format!("`history {node}`"),
        bin,
        &["--db", &db_arg, "history", &node],
        Some(&sink),
    )?;
    cli_row(
        &mut rows,
        "`history --since 1h`",
        bin,
        &["--db", &db_arg, "history", "--since", "1h"],
        Some(&sink),
    )?;
    cli_row(
        &mut rows,
        "`history --condition Ready -o json`",
        bin,
        &[
            "--db",
            &db_arg,
            "history",
            "--condition",
            "Ready",
            "-o",
            "json",
        ],
        Some(&sink),
    )?;
    cli_row(
        &mut rows,
        "`history -o json` (everything)",
        bin,
        &["--db", &db_arg, "history", "-o", "json"],
        Some(&sink),
    )?;
    let middle = facts.middle.rfc3339();
    cli_row(
        &mut rows,
        "`at` (middle of the history)",
        bin,
        &["--db", &db_arg, "at", &middle, "-o", "json"],
        Some(&sink),
    )?;
    let exported = base.join("export.jsonl");
    let exported_arg = exported.to_string_lossy().into_owned();
    cli_row(
        &mut rows,
        "`db export`",
        bin,
        &["--db", &db_arg, "db", "export", "--output", &exported_arg],
        None,
    )?;
    note_last(&mut rows, mib(fs::metadata(&exported)?.len()));
    let _ = fs::remove_file(&exported);
    let before = dir_size(&db);
    cli_row(
        &mut rows,
        "`db compact`",
        bin,
        &["--db", &db_arg, "db", "compact"],
        None,
    )?;
    note_last(
        &mut rows,
        format!("{} -> {} on disk", mib(before), mib(dir_size(&db))),
    );
    let _ = fs::remove_file(&sink);

    // The running controller: restart to serving, then reads over HTTP.
    eprintln!("   restart");
    let started = Instant::now();
    let mut controller = Proc::spawn(
        &base,
        "controller",
        bin,
        &[
            "--db".into(),
            db_arg.clone(),
            "run".into(),
            "--listen".into(),
            args.listen.clone(),
            "--node-status-mode".into(),
            "push".into(),
            "--node-startup-grace-period".into(),
            "1h".into(),
        ],
    )?;
    let url = loop {
        controller.check_alive()?;
        if let Ok(bytes) = fs::read(db.join("controller.json")) {
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
                if v["pid"].as_u64() == Some(controller.child.id() as u64) {
                    break v["url"].as_str().unwrap_or_default().to_string();
                }
            }
        }
        if started.elapsed() > START_TIMEOUT {
            bail!("the controller did not serve within {START_TIMEOUT:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let pid = controller.child.id();
    let (rss, _) = memory_kib(pid)?;
    let cpu = cpu_ticks(pid)? as f64 / machine.ticks_per_second;
    push_row(
        &mut rows,
        Row {
            what: "restart to serving".into(),
            seconds: started.elapsed().as_secs_f64(),
            cpu_seconds: Some(cpu),
            peak_kib: Some(rss),
            note: "RSS when it serves".into(),
        },
    );
    let result = http_rows(&mut rows, machine, pid, &url, &facts).await;
    eprintln!("   {}", controller.terminate(Duration::from_secs(60)).await);
    result?;
    let _ = fs::remove_dir_all(&base);
    Ok(rows)
}

/// Resets the process's peak RSS to its current RSS (Linux `clear_refs`).
fn reset_peak(pid: u32) {
    let _ = fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

async fn http_rows(
    rows: &mut Vec<Row>,
    machine: &Machine,
    pid: u32,
    url: &str,
    facts: &workload::Facts,
) -> Result<()> {
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(HTTP_TIMEOUT)
        .build()?;
    let last: u64 = client
        .get(format!("{url}/api/v1/nodes?limit=1"))
        .send()
        .await?
        .json::<serde_json::Value>()
        .await?["metadata"]["resourceVersion"]
        .as_str()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow!("no resourceVersion from {url}"))?;
    let get = |path: String| {
        let client = client.clone();
        let url = format!("{url}{path}");
        async move {
            let started = Instant::now();
            let response = client.get(&url).send().await?;
            let status = response.status();
            let body = response.bytes().await?;
            if !status.is_success() {
                bail!("{url}: {status}: {}", String::from_utf8_lossy(&body));
            }
            Ok::<_, anyhow::Error>((started.elapsed().as_secs_f64(), body.len()))
        }
    };
    let middle = facts.middle.rfc3339();
    let reads = [
        (
            "`GET /api/v1/events?limit=10`",
            "/api/v1/events?limit=10".to_string(),
        ),
        (
            "`GET /v1/history?after=` newest − 10",
            format!("/v1/history?after={}", last.saturating_sub(10)),
        ),
        (
            "`GET /v1/history?node=` one node",
            format!("/v1/history?node={}", facts.busiest_node),
        ),
        (
            "`GET /v1/at` (middle of the history)",
            format!("/v1/at?time={}", middle.replace('+', "%2B")),
        ),
    ];
    for (what, path) in reads {
        eprintln!("   {what}");
        let (rss, _) = memory_kib(pid)?;
        reset_peak(pid);
        let ticks = cpu_ticks(pid)?;
        let (secs, bytes) = get(path).await?;
        let cpu = (cpu_ticks(pid)? - ticks) as f64 / machine.ticks_per_second;
        let (_, peak) = memory_kib(pid)?;
        push_row(
            rows,
            Row {
                what: what.into(),
                seconds: secs,
                cpu_seconds: Some(cpu),
                peak_kib: Some(peak),
                note: format!("server RSS {} MiB before; {bytes} bytes", rss / 1024),
            },
        );
    }
    // Watches from a recent version: the first event, one and ten at once.
    for count in [1usize, 10] {
        eprintln!("   {count} watch(es) from newest − 10");
        let (rss, _) = memory_kib(pid)?;
        reset_peak(pid);
        let ticks = cpu_ticks(pid)?;
        let started = Instant::now();
        let mut watches = Vec::new();
        for _ in 0..count {
            let client = client.clone();
            let url = format!(
                "{url}/api/v1/nodes?watch=true&resourceVersion={}&timeoutSeconds=30",
                last.saturating_sub(10)
            );
            watches.push(tokio::spawn(async move {
                let mut response = client.get(&url).send().await?;
                let first = response.chunk().await?;
                Ok::<_, anyhow::Error>(first.is_some())
            }));
        }
        for w in watches {
            if !w.await?? {
                bail!(
                    "a watch from {} ended without an event",
                    last.saturating_sub(10)
                );
            }
        }
        let secs = started.elapsed().as_secs_f64();
        let cpu = (cpu_ticks(pid)? - ticks) as f64 / machine.ticks_per_second;
        let (_, peak) = memory_kib(pid)?;
        push_row(
            rows,
            Row {
                what: format!("{count} watch(es) from newest − 10: first event"),
                seconds: secs,
                cpu_seconds: Some(cpu),
                peak_kib: Some(peak),
                note: format!("server {cpu:.2} CPU-s, RSS {} MiB before", rss / 1024),
            },
        );
    }
    Ok(())
}
