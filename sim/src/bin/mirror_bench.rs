//! The mirror benchmark: what mirroring nodes to a Kubernetes API server
//! costs, measured against the real `nodekeeper` binary and the in-process
//! fake API server ([`FakeApiServer`]).
//!
//! Two measurements:
//!
//! 1. **Outbox drain after a backlog.** A controller with N static nodes in
//!    `--node-status-mode push` mirrors to a fake API server that is down from
//!    the start, so every node's registration (and its Ready condition going
//!    `Unknown`, as no kubelet ever posts) waits in the durable outbox. Once
//!    `GET /v1/mirror` shows a backlog of N, the fake comes up and the time
//!    until the backlog is empty is measured, with the API requests it took,
//!    the pace they came at against `--kube-api-qps`, and the controller's CPU
//!    and memory. The fake must then hold N nodes, each Ready=Unknown. Each
//!    `--backlog-nodes` size runs with the `--drain-qps`/`--drain-burst` at
//!    the same position: by default 10,000 nodes at a generous budget, and
//!    500 nodes at the controller's default budget (20/s, burst 30) to show
//!    the drain keeps to it.
//! 2. **Steady-state API writes per node per hour.** M simulated kubelets
//!    (in this process) push Lease renewals and node status to a controller
//!    every 10 s; the controller mirrors to a fresh fake with leader election
//!    on. Once every node is Ready=True on the fake and a warm-up has passed,
//!    every request the fake answers in the window is classified (node Lease
//!    renewals, node writes, node reads, leader-election Lease traffic, other)
//!    and reported per node per hour. The goal: only changes and Lease
//!    renewals, i.e. about 3600/interval renewals and no node writes. Nodes
//!    the controller has Ready but the fake never gets Ready (with nothing
//!    left in the outbox) are waited for 30 s, then measured around and
//!    reported as an error.
//!
//! 3. **A site at scale** (`--phases site`): 10,000 simulated kubelets,
//!    probed, in `nodekeeper sim` processes of at most 5,000, mirrored with
//!    the default budget (sized from the Ready nodes) and Lease cadence
//!    (a third of the 40 s duration). Measured: the time until every node is
//!    upstream with its Lease; a steady window (requests per node per hour by
//!    kind, and the oldest Lease age of the Ready nodes, sampled every
//!    second from the API server's Leases); then the API server goes away
//!    for `--outage` (10 minutes, in real time: nothing is compressed) while
//!    `--outage-down` kubelets stop answering, and comes back `intact` or
//!    `empty` (restored from an empty backup, resourceVersions starting
//!    over). From its return: the time until every Ready node's Lease is
//!    renewed, the time until every Node and its status (Ready condition and
//!    managed taints, as the controller has them) is upstream, and the
//!    oldest Lease age from the first round of renewals to the end of the
//!    drain.
//!
//! The simulated kubelets listen from `--base-ip` (127.150.0.1) on: runs
//! side by side each need a range of their own.
//!
//! Every drain and phase runs even if one before it failed; the tables show
//! what completed, and the exit status is 1 if anything failed or was wrong.
//!
//! Long (about 2,300 lines): three benchmarks, each one function that runs
//! its phase start to end with its checks (`drain`, `steady_state`, `site`,
//! 170 to 270 lines, read as the procedure docs/benchmarks.md describes), and their
//! report sections. What it shares with `nodekeeper-bench` is in
//! `nodekeeper_sim::bench`; the phases would become modules of their own, as
//! the history benchmark's are, when one more is added.
//!
//! Run it with `cargo run --release --bin nodekeeper-mirror-bench` (add
//! `-- --help` for the sizes, budgets and windows). It needs the
//! `nodekeeper` binary next to it (`cargo build --release --bins`) or `--bin`.
//!
//! Some functions here run past ~80 lines: each is one phase of the run,
//! read top to bottom as it happens (start, wait, measure, report), its
//! steps sharing the processes and the figures they take; split, each part
//! would need all of them passed in.

// A benchmark measures real (never paused) time and writes its reports synchronously.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use clap::{ArgAction, Parser, ValueEnum};
use nodekeeper::mirror::MirrorStatus;
use nodekeeper_sim::apiserver::{FakeApiServer, Fault, Request};
use nodekeeper_sim::{Fleet, FleetConfig, PushConfig};
use serde_json::Value;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use nodekeeper_sim::bench::{
    memory_kib, parse_duration, scratch_filesystem, table_header, table_row, write_preamble, Align,
    BinArg, Machine, ProcessMeter, Processes,
};

const CONTROLLER_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for the controller to queue the whole backlog.
const BACKLOG_TIMEOUT: Duration = Duration::from_secs(180);
/// After the backlog reaches N: time for the startup grace period and the
/// monitor passes behind it, so every node's change to Unknown is queued too.
const BACKLOG_SETTLE: Duration = Duration::from_secs(3);
/// A drain that neither shrinks the backlog nor makes a request for this
/// long is stuck; the run stops with what `/v1/mirror` says.
const STALL_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for every simulated node to be Ready=True on the fake.
const READY_TIMEOUT: Duration = Duration::from_secs(240);
/// Once the controller has every node Ready and the mirror's backlog is
/// empty, how long the fake gets to agree before the run goes on without it.
const MISMATCH_GRACE: Duration = Duration::from_secs(30);
const FAULT_SETTLE_TIMEOUT: Duration = Duration::from_secs(10);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const FLEET_STOP_TIMEOUT: Duration = Duration::from_secs(10);
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a drain's `/v1/mirror` is read: the drain time is measured to within this.
const POLL: Duration = Duration::from_millis(200);
/// How often memory is sampled in the steady-state window.
const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// The simulated fleet's first loopback address, unless --base-ip gives one.
const FLEET_BASE_IP: Ipv4Addr = Ipv4Addr::new(127, 150, 0, 1);
/// The site's simulated kubelets: one `nodekeeper sim` process per this many
/// (about two open files per node; the hard limit is 20k)...
const MAX_NODES_PER_SIM: usize = 5000;
/// ...each from its own part of the range from --base-ip, this many addresses apart.
const SIM_ADDRESS_STRIDE: u32 = 8192;
const SIM_START_TIMEOUT: Duration = Duration::from_secs(60);
/// Longest wait for every node of the site to be upstream with its Lease.
const SITE_READY_TIMEOUT: Duration = Duration::from_secs(900);
/// Longest wait, after the API server returns, for the site to be upstream again.
const SITE_DRAIN_TIMEOUT: Duration = Duration::from_secs(900);
/// Lease ages are watched this long after the drain ends.
const AFTER_DRAIN: Duration = Duration::from_secs(30);
/// How often the API server's Nodes and Leases are sampled in the site phase.
const SITE_SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// Reading the controller's 10k-node list takes a while.
const LIST_TIMEOUT: Duration = Duration::from_secs(60);
/// Taint keys the controller manages (the others are left alone upstream).
const MANAGED_TAINTS: [&str; 3] = [
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.cloudprovider.kubernetes.io/shutdown",
];
/// Open files the bench process needs beyond one listener per simulated node
/// (push connections, the fake's connections, the control endpoint, files).
const SPARE_FILES: u64 = 1024;

#[derive(Debug, Parser)]
#[command(
    name = "nodekeeper-mirror-bench",
    about = "Mirror benchmark: outbox drain after a backlog, and steady-state API writes per node"
)]
struct Args {
    /// Which measurements to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "drain,steady")]
    phases: Vec<Phase>,

    /// Drain: backlog sizes (nodes), comma-separated; each runs with the
    /// --drain-qps and --drain-burst at the same position.
    #[arg(long, value_delimiter = ',', default_value = "10000,500")]
    backlog_nodes: Vec<usize>,
    /// Drain: the controller's --kube-api-qps for each backlog size.
    #[arg(long, value_delimiter = ',', default_value = "2000,20")]
    drain_qps: Vec<f64>,
    /// Drain: the controller's --kube-api-burst for each backlog size.
    #[arg(long, value_delimiter = ',', default_value = "2000,30")]
    drain_burst: Vec<u32>,
    /// Drain: the controller's --leader-elect.
    #[arg(long, action = ArgAction::Set, default_value = "false", value_name = "BOOL")]
    drain_leader_elect: bool,
    /// Drain: longest wait for the backlog to empty (default: 2 min plus ten
    /// requests per node at the budget).
    #[arg(long, value_parser = parse_duration)]
    drain_timeout: Option<Duration>,

    /// Steady state: simulated kubelets pushing to the controller.
    #[arg(long, default_value_t = 1000)]
    steady_nodes: usize,
    /// Steady state: the kubelets' Lease renewal and status update interval,
    /// and the controller's --node-lease-renew-interval.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    steady_interval: Duration,
    /// Steady state: time between every node Ready on the fake and the window.
    #[arg(long, default_value = "15s", value_parser = parse_duration)]
    steady_warmup: Duration,
    /// Steady state: the measurement window.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    steady_window: Duration,
    /// Steady state: the controller's --kube-api-qps.
    #[arg(long, default_value_t = 400.0)]
    steady_qps: f64,
    /// Steady state: the controller's --kube-api-burst.
    #[arg(long, default_value_t = 400)]
    steady_burst: u32,

    /// Site: simulated kubelets, probed (in sim processes of at most 5,000).
    #[arg(long, default_value_t = 10_000)]
    site_nodes: usize,
    /// Site: time between every node upstream and the steady window.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    site_warmup: Duration,
    /// Site: the steady-state window.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    site_window: Duration,
    /// Site: how long the API server is away.
    #[arg(long, default_value = "10m", value_parser = parse_duration)]
    outage: Duration,
    /// Site: kubelets that stop answering while the API server is away
    /// (their conditions and taints change).
    #[arg(long, default_value_t = 500)]
    outage_down: usize,
    /// Site: what the API server comes back with.
    #[arg(long, value_enum, default_value = "intact")]
    after_outage: AfterOutage,
    /// Site: the controller's --kube-api-qps (default: not given, so the
    /// budget is sized from the Ready nodes).
    #[arg(long)]
    site_qps: Option<f64>,
    /// Site: the controller's --kube-api-burst (default: not given).
    #[arg(long)]
    site_burst: Option<u32>,

    /// The simulated kubelets' first loopback address (in 127.0.0.0/8); the
    /// site's sim processes start 8,192 addresses apart from it. Runs side
    /// by side need addresses of their own.
    #[arg(long, default_value_t = FLEET_BASE_IP)]
    base_ip: Ipv4Addr,

    #[command(flatten)]
    bin: BinArg,
}

/// Refuses a fleet of `span` addresses from `base` that would leave
/// 127.0.0.0/8: nothing the benchmark starts may listen outside loopback.
fn check_fleet_addresses(base: Ipv4Addr, span: u64) -> Result<()> {
    let last = u64::from(u32::from(base)) + span.saturating_sub(1);
    let loopback = u64::from(u32::from(Ipv4Addr::new(127, 0, 0, 0)))
        ..=u64::from(u32::from(Ipv4Addr::new(127, 255, 255, 254)));
    if !loopback.contains(&u64::from(u32::from(base))) || !loopback.contains(&last) {
        bail!(
            "--base-ip {base}: the simulated kubelets need {span} addresses from it, all inside 127.0.0.0/8; pick one in 127/8 low enough, e.g. 127.150.0.1"
        );
    }
    Ok(())
}

/// What the API server has when it returns after the outage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AfterOutage {
    /// Everything it had.
    Intact,
    /// Nothing: restored from an empty backup, resourceVersions starting over.
    Empty,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Phase {
    /// Outbox drain after a backlog.
    Drain,
    /// Steady-state API requests per node per hour.
    Steady,
    /// A site at scale: steady state, an outage, and the drain after it.
    Site,
}

#[tokio::main(flavor = "multi_thread")]
async fn main() {
    if let Err(e) = real_main().await {
        eprintln!("nodekeeper-mirror-bench: error: {e:#}");
        std::process::exit(1);
    }
}

async fn real_main() -> Result<()> {
    nodekeeper::install_crypto_provider();
    let args = Args::parse();
    let cases = drain_cases(&args)?;
    if args.phases.contains(&Phase::Site) {
        if args.site_nodes == 0 || args.site_nodes > 4 * MAX_NODES_PER_SIM {
            bail!(
                "--site-nodes must be between 1 and {}",
                4 * MAX_NODES_PER_SIM
            );
        }
        if args.outage_down > args.site_nodes {
            bail!("--outage-down cannot be more than --site-nodes");
        }
        if args.site_window.is_zero() {
            bail!("--site-window must be more than zero");
        }
    }
    if args.phases.contains(&Phase::Steady) {
        if args.steady_nodes == 0 {
            bail!("--steady-nodes must be more than zero");
        }
        if args.steady_interval.is_zero() || args.steady_window.is_zero() {
            bail!("--steady-interval and --steady-window must be more than zero");
        }
        if !(args.steady_qps.is_finite() && args.steady_qps > 0.0) || args.steady_burst == 0 {
            bail!("--steady-qps and --steady-burst must be more than zero");
        }
    }
    if args.phases.contains(&Phase::Site) {
        let parts = args.site_nodes.div_ceil(MAX_NODES_PER_SIM);
        // The parts before the last take the remainder.
        let last_part = args.site_nodes / parts;
        check_fleet_addresses(
            args.base_ip,
            (parts - 1) as u64 * u64::from(SIM_ADDRESS_STRIDE) + last_part as u64,
        )?;
    }
    if args.phases.contains(&Phase::Steady) {
        check_fleet_addresses(args.base_ip, args.steady_nodes as u64)?;
    }
    let bin = args.bin.resolve()?;
    let machine = Machine::probe(&bin);
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(HTTP_TIMEOUT)
        .build()
        .context("cannot build the HTTP client")?;
    let env = Env {
        args: &args,
        bin: &bin,
        client: &client,
        machine: &machine,
    };

    // Every drain and phase runs even if one before it failed; the report
    // shows what completed, then the errors.
    let mut drains = Vec::new();
    let mut steady = None;
    let mut failures = Vec::new();
    let mut interrupted = false;
    if args.phases.contains(&Phase::Drain) {
        for case in &cases {
            eprintln!(
                "== drain: {} nodes at qps {}, burst {}",
                case.nodes, case.qps, case.burst
            );
            // On Ctrl-C the run is dropped, which stops its controller and removes its files.
            let outcome = tokio::select! {
                outcome = drain(&env, case) => outcome,
                _ = tokio::signal::ctrl_c() => {
                    interrupted = true;
                    Err(anyhow!("interrupted"))
                }
            };
            match outcome {
                Ok(row) => {
                    if let Err(why) = &row.verified {
                        failures.push(anyhow!(
                            "the {}-node drain left the API server wrong: {why}",
                            case.nodes
                        ));
                    }
                    drains.push(row);
                }
                Err(e) => {
                    failures.push(e.context(format!("the {}-node drain failed", case.nodes)));
                    if interrupted {
                        break;
                    }
                }
            }
        }
    }
    if !interrupted && args.phases.contains(&Phase::Steady) {
        eprintln!("== steady state: {} pushing nodes", args.steady_nodes);
        let outcome = tokio::select! {
            outcome = steady_state(&env) => outcome,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        };
        match outcome {
            Ok(row) => {
                if let Some(what) = &row.not_ready_upstream {
                    failures.push(anyhow!(
                        "steady state: the API server disagrees with the controller: {what}"
                    ));
                }
                steady = Some(row);
            }
            Err(e) => failures.push(e.context("the steady-state run failed")),
        }
    }
    let mut site_row = None;
    if !interrupted && args.phases.contains(&Phase::Site) {
        eprintln!(
            "== site: {} probed kubelets, an outage of {}",
            args.site_nodes,
            nodekeeper::duration::format(args.outage)
        );
        let outcome = tokio::select! {
            outcome = site(&env) => outcome,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        };
        match outcome {
            Ok(row) => {
                failures.extend(row.wrong.iter().map(|w| anyhow!("site: {w}")));
                site_row = Some(row);
            }
            Err(e) => failures.push(e.context("the site run failed")),
        }
    }
    let errors: Vec<String> = failures.iter().map(|e| format!("{e:#}")).collect();
    print!(
        "{}",
        report(
            &env,
            &cases,
            &drains,
            steady.as_ref(),
            site_row.as_ref(),
            &errors
        )
    );
    match errors.len() {
        0 => Ok(()),
        1 => bail!("{}", errors[0]),
        n => bail!("{n} measurements failed or were wrong; see ERRORS in the report"),
    }
}

/// What every phase needs.
struct Env<'a> {
    args: &'a Args,
    bin: &'a Path,
    client: &'a reqwest::Client,
    machine: &'a Machine,
}

// ---------------------------------------------------------------------------
// 1. Outbox drain after a backlog

/// One backlog size and the budget it drains with.
#[derive(Debug, Clone, Copy)]
struct DrainCase {
    nodes: usize,
    qps: f64,
    burst: u32,
}

fn drain_cases(args: &Args) -> Result<Vec<DrainCase>> {
    let (n, q, b) = (
        args.backlog_nodes.len(),
        args.drain_qps.len(),
        args.drain_burst.len(),
    );
    if n != q || n != b {
        bail!(
            "--backlog-nodes ({n} values), --drain-qps ({q}) and --drain-burst ({b}) pair up by position: give as many of each"
        );
    }
    let cases: Vec<DrainCase> = (0..n)
        .map(|i| DrainCase {
            nodes: args.backlog_nodes[i],
            qps: args.drain_qps[i],
            burst: args.drain_burst[i],
        })
        .collect();
    for c in &cases {
        if c.nodes == 0 || !(c.qps.is_finite() && c.qps > 0.0) || c.burst == 0 {
            bail!("--backlog-nodes, --drain-qps and --drain-burst must all be more than zero");
        }
    }
    Ok(cases)
}

/// Everything measured for one drain.
struct DrainRow {
    case: DrainCase,
    /// From the controller's start to a backlog of N.
    queued_after: Duration,
    /// From the fake coming up to its first request (leader election aside).
    first_request_after: Option<Duration>,
    /// From the fake coming up to `/v1/mirror` showing an empty backlog.
    drain: Duration,
    /// From the first request answered to the last (leader election aside).
    active: Duration,
    /// The requests the fake answered during the drain, leader election aside.
    requests: usize,
    /// Leader-election requests answered during the drain.
    leader_requests: usize,
    /// Those not answered 2xx.
    failed_requests: usize,
    /// Requests by `METHOD route status`.
    mix: BTreeMap<String, usize>,
    /// The mirror's own request and retry counters over the drain.
    mirror_requests: u64,
    mirror_retries: u64,
    ctrl_cpu: f64,
    rss_start_kib: u64,
    rss_peak_kib: u64,
    hwm_kib: u64,
    /// Whether the fake ended with the N nodes, each Ready=Unknown.
    verified: Result<(), String>,
    stop: String,
}

async fn drain(env: &Env<'_>, case: &DrainCase) -> Result<DrainRow> {
    let api = FakeApiServer::start().await;
    api.set_fault(Fault::Down);
    tokio::time::timeout(FAULT_SETTLE_TIMEOUT, api.settled())
        .await
        .context("the fake API server did not go down")?;

    let mut run = scratch("drain", case.nodes)?;
    let nodes_file = run.dir.join("nodes.json");
    write_nodes_file(&nodes_file, &backlog_nodes(case.nodes)?)?;
    let mut flags = strings(&[
        "--node-status-mode",
        "push",
        "--node-startup-grace-period",
        "1s",
        "--node-monitor-period",
        "1s",
        "--eviction-mode",
        "none",
        "--master",
        &api.url(),
        "--kube-api-qps",
        &case.qps.to_string(),
        "--kube-api-burst",
        &case.burst.to_string(),
    ]);
    flags.push(format!("--leader-elect={}", env.args.drain_leader_elect));
    let started = Instant::now();
    run.start_controller(env.bin, &controller_args(&run.dir, &nodes_file, &flags))?;
    let url = run
        .wait_for_discovery(CONTROLLER_START_TIMEOUT, POLL)
        .await?;
    eprintln!("   controller serving {url}; the API server is down");

    // Every node's work queued while the API server is away.
    let deadline = Instant::now() + BACKLOG_TIMEOUT;
    loop {
        run.check_alive()?;
        let last = match mirror_status(env.client, &url).await {
            Ok(s) if s.backlog == case.nodes => break,
            Ok(s) => format!("backlog {}", s.backlog),
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() > deadline {
            bail!(
                "the backlog did not reach {} within {BACKLOG_TIMEOUT:?} (last: {last}){}",
                case.nodes,
                run.controller_log_tail()
            );
        }
        tokio::time::sleep(POLL).await;
    }
    let queued_after = started.elapsed();
    tokio::time::sleep(BACKLOG_SETTLE).await;
    let before = mirror_status(env.client, &url).await?;
    if before.backlog != case.nodes {
        bail!(
            "the backlog moved from {} to {} while the API server was down",
            case.nodes,
            before.backlog
        );
    }
    eprintln!(
        "   backlog {} after {:.1}s; bringing the API server up",
        before.backlog,
        queued_after.as_secs_f64()
    );

    let pid = run.controller_pid()?;
    let mut meter = ProcessMeter::start(pid, env.machine)?;
    let rss_start_kib = meter.rss_peak_kib();
    api.clear_requests();
    let up = Instant::now();
    api.set_fault(Fault::None);
    tokio::time::timeout(FAULT_SETTLE_TIMEOUT, api.settled())
        .await
        .context("the fake API server did not come back up")?;

    let deadline = up + drain_timeout(env.args, case);
    let mut progress = (before.backlog, 0usize, Instant::now());
    let mut reported = Instant::now();
    let after = loop {
        run.check_alive()?;
        meter.sample()?;
        let status = mirror_status(env.client, &url).await?;
        if status.backlog == 0 {
            break status;
        }
        let answered = api.requests().len();
        if (status.backlog, answered) != (progress.0, progress.1) {
            progress = (status.backlog, answered, Instant::now());
        } else if progress.2.elapsed() > STALL_TIMEOUT {
            let hint = if status.leader {
                ""
            } else {
                "; the mirror is not leading, so it writes nothing"
            };
            let cpu = meter.cpu_seconds()?;
            bail!(
                "the drain is stuck: backlog {} and no request answered for {STALL_TIMEOUT:?} ({}{hint}); the controller used {cpu:.1} CPU-s in the {:.0}s since the API server came up{}",
                status.backlog,
                describe_status(&status),
                up.elapsed().as_secs_f64(),
                run.controller_log_tail()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "the backlog did not drain within {:?} of the API server coming up ({}){}",
                deadline - up,
                describe_status(&status),
                run.controller_log_tail()
            );
        }
        if reported.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "   {:.0}s: backlog {}, {answered} requests answered",
                up.elapsed().as_secs_f64(),
                status.backlog
            );
            reported = Instant::now();
        }
        tokio::time::sleep(POLL).await;
    };
    let drain = up.elapsed();
    let ctrl_cpu = meter.cpu_seconds()?;
    meter.sample()?;
    let (_, hwm_kib) = memory_kib(pid)?;
    let log = api.requests();
    eprintln!(
        "   drained in {:.1}s with {} requests",
        drain.as_secs_f64(),
        log.len()
    );

    let verified = verify_unknown(&api, case.nodes);
    let stop = stop(&mut run).await;
    eprintln!("   {stop}");
    // Leader election has its own pace and takes nothing from the budget:
    // counted apart from the mirror's work.
    let (leader, log): (Vec<Request>, Vec<Request>) = log
        .into_iter()
        .partition(|r| Kind::of(r) == Kind::LeaderLease);
    let first = log.iter().map(|r| r.at).min();
    let last = log.iter().map(|r| r.at).max();
    Ok(DrainRow {
        case: *case,
        queued_after,
        first_request_after: first.map(|f| f.saturating_duration_since(up)),
        drain,
        active: match (first, last) {
            (Some(f), Some(l)) => l.saturating_duration_since(f),
            _ => Duration::ZERO,
        },
        requests: log.len(),
        leader_requests: leader.len(),
        failed_requests: log
            .iter()
            .filter(|r| !(200..300).contains(&r.status))
            .count(),
        mix: mix(&log),
        mirror_requests: after.requests.saturating_sub(before.requests),
        mirror_retries: after.retries.saturating_sub(before.retries),
        ctrl_cpu,
        rss_start_kib,
        rss_peak_kib: meter.rss_peak_kib(),
        hwm_kib,
        verified,
        stop,
    })
}

/// `edge-00001` ... with addresses in 10.0.0.0/8 (nothing is probed in push mode).
fn backlog_nodes(n: usize) -> Result<Vec<(String, Ipv4Addr)>> {
    if n >= 1 << 24 {
        bail!(
            "--backlog-nodes: at most {} nodes fit 10.0.0.0/8",
            (1 << 24) - 1
        );
    }
    let width = n.to_string().len().max(5);
    Ok((1..=n)
        .map(|i| {
            let ip = Ipv4Addr::from(0x0a00_0000u32 + i as u32);
            (format!("edge-{i:0width$}"), ip)
        })
        .collect())
}

fn drain_timeout(args: &Args, case: &DrainCase) -> Duration {
    args.drain_timeout.unwrap_or_else(|| {
        Duration::from_secs(120) + Duration::from_secs_f64(10.0 * case.nodes as f64 / case.qps)
    })
}

/// Checks that the fake holds exactly the backlog's nodes, each Ready=Unknown.
fn verify_unknown(api: &FakeApiServer, nodes: usize) -> Result<(), String> {
    let all = api.nodes();
    if all.len() != nodes {
        return Err(format!(
            "the API server holds {} nodes, not {nodes}",
            all.len()
        ));
    }
    let mut wrong = Vec::new();
    for node in &all {
        let ready = ready_status(node);
        if ready.as_deref() != Some("Unknown") {
            wrong.push(format!(
                "{} (Ready {})",
                node["metadata"]["name"].as_str().unwrap_or("?"),
                ready.as_deref().unwrap_or("missing")
            ));
        }
    }
    if wrong.is_empty() {
        Ok(())
    } else {
        let shown = wrong.iter().take(5).cloned().collect::<Vec<_>>().join(", ");
        Err(format!(
            "{} of {nodes} nodes are not Ready=Unknown, e.g. {shown}",
            wrong.len()
        ))
    }
}

fn ready_condition(node: &Value) -> Option<&Value> {
    node["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Ready")
}

fn ready_status(node: &Value) -> Option<String> {
    ready_condition(node)?["status"]
        .as_str()
        .map(str::to_string)
}

async fn mirror_status(client: &reqwest::Client, url: &str) -> Result<MirrorStatus> {
    let response = client
        .get(format!("{url}/v1/mirror"))
        .send()
        .await
        .with_context(|| format!("GET {url}/v1/mirror"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("GET {url}/v1/mirror: {status}");
    }
    response
        .json()
        .await
        .with_context(|| format!("GET {url}/v1/mirror: not a mirror status"))
}

fn describe_status(s: &MirrorStatus) -> String {
    format!(
        "/v1/mirror: backlog {}, leader {}, {} requests, {} retries, last error: {}",
        s.backlog,
        s.leader,
        s.requests,
        s.retries,
        s.last_error.as_ref().map_or("none", |e| e.message.as_str())
    )
}

// ---------------------------------------------------------------------------
// 2. Steady-state API requests per node per hour

/// What a request to the API server is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// Anything under `kube-node-lease`: renewals, and their reads and creates.
    NodeLease,
    /// POST, PUT, PATCH or DELETE of `/api/v1/nodes...`.
    NodeWrite,
    /// GET of `/api/v1/nodes...` (lists included).
    NodeRead,
    /// The leader-election Lease (`kube-system`).
    LeaderLease,
    Other,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::NodeLease,
        Kind::NodeWrite,
        Kind::NodeRead,
        Kind::LeaderLease,
        Kind::Other,
    ];

    fn of(r: &Request) -> Kind {
        const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/";
        if let Some(rest) = r.path.strip_prefix(LEASES) {
            if rest.starts_with("kube-node-lease/") {
                return Kind::NodeLease;
            }
            if rest.starts_with("kube-system/leases") {
                return Kind::LeaderLease;
            }
        }
        if r.path == "/api/v1/nodes" || r.path.starts_with("/api/v1/nodes/") {
            return if r.method == "GET" {
                Kind::NodeRead
            } else {
                Kind::NodeWrite
            };
        }
        Kind::Other
    }

    fn label(self) -> &'static str {
        match self {
            Kind::NodeLease => "node Lease renewals (kube-node-lease)",
            Kind::NodeWrite => "node writes (POST/PUT/PATCH/DELETE /api/v1/nodes...)",
            Kind::NodeRead => "node reads (GET /api/v1/nodes...)",
            Kind::LeaderLease => "leader-election Lease (kube-system)",
            Kind::Other => "other",
        }
    }
}

/// A request's path with object names taken out: `PATCH nodes/{name}/status 200`.
fn route(r: &Request) -> String {
    let path = if r.path == "/api/v1/nodes" {
        "nodes".to_string()
    } else if let Some(rest) = r.path.strip_prefix("/api/v1/nodes/") {
        match rest.split_once('/') {
            Some((_, sub)) => format!("nodes/{{name}}/{sub}"),
            None => "nodes/{name}".to_string(),
        }
    } else if let Some(rest) = r
        .path
        .strip_prefix("/apis/coordination.k8s.io/v1/namespaces/")
    {
        match rest.split_once("/leases") {
            Some((ns, "")) => format!("leases {ns}"),
            Some((ns, _)) => format!("leases {ns}/{{name}}"),
            None => r.path.clone(),
        }
    } else {
        r.path.clone()
    };
    format!("{} {path} {}", r.method, r.status)
}

fn mix(log: &[Request]) -> BTreeMap<String, usize> {
    let mut mix = BTreeMap::new();
    for r in log {
        *mix.entry(route(r)).or_insert(0) += 1;
    }
    mix
}

/// Everything measured in the steady state.
struct SteadyRow {
    nodes: usize,
    /// Nodes Ready=True on the fake when the warm-up began.
    ready_upstream: usize,
    /// From the controller's start to every node Ready=True on the fake (or
    /// to giving up on the ones it lacks).
    ready_after: Duration,
    window: Duration,
    counts: BTreeMap<Kind, usize>,
    failed_requests: usize,
    mix: BTreeMap<String, usize>,
    ctrl_cpu: f64,
    bench_cpu: f64,
    rss_end_kib: u64,
    rss_peak_kib: u64,
    hwm_kib: u64,
    pushes_sent: u64,
    pushes_failed: u64,
    push_error: Option<String>,
    /// `/v1/mirror` at the end of the window.
    mirror_end: MirrorStatus,
    /// Set when the API server ends the window with nodes not Ready=True
    /// (the controller has them all Ready: it was waited for).
    not_ready_upstream: Option<String>,
    mirror_retries: u64,
    stop: String,
}

async fn steady_state(env: &Env<'_>) -> Result<SteadyRow> {
    let args = env.args;
    let nodes = args.steady_nodes;
    let limit = nodekeeper::config::raise_open_file_limit();
    if nodes as u64 + SPARE_FILES > limit {
        bail!(
            "{nodes} simulated nodes need about {} open files in this process; the limit is {limit}",
            nodes as u64 + SPARE_FILES
        );
    }
    let api = FakeApiServer::start().await;
    let stop_fleet = CancellationToken::new();
    let fleet = Fleet::start(
        FleetConfig {
            nodes,
            base_ip: args.base_ip,
            port: 0,
            ..FleetConfig::default()
        },
        stop_fleet.clone(),
    )
    .await
    .context("cannot start the simulated fleet")?;
    // The fleet stops with the token; cancel it on every way out of here.
    let _stop_fleet = stop_fleet.clone().drop_guard();
    let mut run = scratch("steady", nodes)?;
    let nodes_file = run.dir.join("nodes.json");
    let list: Vec<(String, Ipv4Addr)> = fleet
        .nodes()
        .iter()
        .map(|n| match n.address.ip() {
            std::net::IpAddr::V4(ip) => Ok((n.name.clone(), ip)),
            other => Err(anyhow!("simulated node {} has address {other}", n.name)),
        })
        .collect::<Result<_>>()?;
    write_nodes_file(&nodes_file, &list)?;
    let interval = nodekeeper::duration::format(args.steady_interval);
    let flags = strings(&[
        "--node-status-mode",
        "push",
        "--master",
        &api.url(),
        "--kube-api-qps",
        &args.steady_qps.to_string(),
        "--kube-api-burst",
        &args.steady_burst.to_string(),
        "--node-lease-renew-interval",
        &interval,
        "--eviction-mode",
        "none",
    ]);
    let started = Instant::now();
    run.start_controller(env.bin, &controller_args(&run.dir, &nodes_file, &flags))?;
    let url = run
        .wait_for_discovery(CONTROLLER_START_TIMEOUT, POLL)
        .await?;
    let mut push = PushConfig::new(url.clone());
    push.lease_renew_interval = args.steady_interval;
    push.status_update_interval = args.steady_interval;
    fleet
        .start_pushing(push)
        .context("cannot make the simulated kubelets push")?;
    eprintln!("   controller serving {url}; {nodes} kubelets pushing every {interval}");

    let deadline = Instant::now() + READY_TIMEOUT;
    let mut reported = Instant::now();
    // Since when the controller has had every node Ready with nothing left
    // to mirror while the API server still lacks some.
    let mut settled_since: Option<Instant> = None;
    loop {
        run.check_alive()?;
        let ready = ready_upstream(&api);
        if ready == nodes {
            break;
        }
        let settled = controller_ready(env.client, &url).await.ok() == Some(nodes)
            && mirror_status(env.client, &url)
                .await
                .is_ok_and(|s| s.backlog == 0);
        settled_since = match (settled, settled_since) {
            (false, _) => None,
            (true, None) => Some(Instant::now()),
            (true, since) => since,
        };
        if settled_since.is_some_and(|t| t.elapsed() >= MISMATCH_GRACE) {
            // Lost, not late: measure anyway, and report it.
            eprintln!(
                "   WARNING: the controller has all {nodes} nodes Ready and an empty backlog, the API server only {ready} Ready=True for {MISMATCH_GRACE:?}; measuring anyway: {}",
                laggards(env.client, &url, &api, fleet.nodes()).await
            );
            break;
        }
        if Instant::now() > deadline {
            let status = mirror_status(env.client, &url).await.ok();
            let laggards = laggards(env.client, &url, &api, fleet.nodes()).await;
            bail!(
                "only {ready} of {nodes} nodes Ready=True on the API server after {READY_TIMEOUT:?} ({}); not Ready there: {laggards}{}",
                status.as_ref().map_or("no /v1/mirror".into(), describe_status),
                run.controller_log_tail()
            );
        }
        if reported.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "   {:.0}s: {ready} of {nodes} Ready=True on the API server",
                started.elapsed().as_secs_f64()
            );
            reported = Instant::now();
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let ready_after = started.elapsed();
    let ready_at_start = ready_upstream(&api);
    eprintln!(
        "   {ready_at_start} of {nodes} Ready=True on the API server after {:.1}s; warming up {}",
        ready_after.as_secs_f64(),
        nodekeeper::duration::format(args.steady_warmup)
    );
    tokio::time::sleep(args.steady_warmup).await;
    run.check_alive()?;

    let pid = run.controller_pid()?;
    let self_pid = std::process::id();
    let before = mirror_status(env.client, &url).await?;
    let pushes_before = fleet.handle().push_stats().unwrap_or_default();
    let mut meter = ProcessMeter::start(pid, env.machine)?;
    let bench_meter = ProcessMeter::start(self_pid, env.machine)?;
    api.clear_requests();
    let window_start = Instant::now();
    eprintln!(
        "   measuring {}",
        nodekeeper::duration::format(args.steady_window)
    );
    let window_end = window_start + args.steady_window;
    while Instant::now() < window_end {
        run.check_alive()?;
        meter.sample()?;
        tokio::time::sleep_until(window_end.min(Instant::now() + SAMPLE_EVERY)).await;
    }
    let log = api.requests();
    let window = window_start.elapsed();
    let ctrl_cpu = meter.cpu_seconds()?;
    let bench_cpu = bench_meter.cpu_seconds()?;
    let rss_end_kib = meter.sample()?;
    let (_, hwm_kib) = memory_kib(pid)?;
    let pushes_after = fleet.handle().push_stats().unwrap_or_default();
    let after = mirror_status(env.client, &url).await?;
    let ready_upstream_end = ready_upstream(&api);
    let not_ready_upstream = (ready_upstream_end < nodes).then(|| {
        format!("only {ready_upstream_end} of {nodes} nodes are Ready=True on the API server at the end of the window")
    });
    let not_ready_upstream = match not_ready_upstream {
        Some(what) => Some(format!(
            "{what}: {}",
            laggards(env.client, &url, &api, fleet.nodes()).await
        )),
        None => None,
    };

    let stop = stop(&mut run).await;
    eprintln!("   {stop}");
    stop_fleet.cancel();
    if tokio::time::timeout(FLEET_STOP_TIMEOUT, fleet.closed())
        .await
        .is_err()
    {
        eprintln!("   the simulated fleet did not stop within {FLEET_STOP_TIMEOUT:?}");
    }

    let mut counts: BTreeMap<Kind, usize> = Kind::ALL.iter().map(|k| (*k, 0)).collect();
    for r in &log {
        *counts.entry(Kind::of(r)).or_insert(0) += 1;
    }
    Ok(SteadyRow {
        nodes,
        ready_upstream: ready_at_start,
        ready_after,
        window,
        counts,
        failed_requests: log
            .iter()
            .filter(|r| !(200..300).contains(&r.status))
            .count(),
        mix: mix(&log),
        ctrl_cpu,
        bench_cpu,
        rss_end_kib,
        rss_peak_kib: meter.rss_peak_kib(),
        hwm_kib,
        pushes_sent: pushes_after.sent - pushes_before.sent,
        pushes_failed: pushes_after.failed - pushes_before.failed,
        push_error: pushes_after.last_error,
        mirror_retries: after.retries.saturating_sub(before.retries),
        mirror_end: after,
        not_ready_upstream,
        stop,
    })
}

/// Nodes Ready=True on the fake.
fn ready_upstream(api: &FakeApiServer) -> usize {
    api.nodes()
        .iter()
        .filter(|n| ready_status(n).as_deref() == Some("True"))
        .count()
}

/// Nodes Ready=True on the controller, from its /metrics.
async fn controller_ready(client: &reqwest::Client, url: &str) -> Result<usize> {
    const KEY: &str = "nodekeeper_nodes{condition=\"Ready\",status=\"True\"}";
    let text = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("GET {url}/metrics"))?
        .text()
        .await
        .with_context(|| format!("GET {url}/metrics: no body"))?;
    text.lines()
        .find_map(|l| l.strip_prefix(KEY))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as usize)
        .ok_or_else(|| anyhow!("/metrics has no {KEY}"))
}

/// Up to five nodes not Ready=True on the fake, each with its Ready
/// condition there and on the controller, for an error message.
async fn laggards(
    client: &reqwest::Client,
    url: &str,
    api: &FakeApiServer,
    nodes: &[nodekeeper_sim::SimNode],
) -> String {
    let describe = |node: Option<&Value>| match node {
        None => "no such node".to_string(),
        Some(node) => match ready_condition(node) {
            None => "no Ready condition".to_string(),
            Some(c) => format!(
                "{} ({})",
                c["status"].as_str().unwrap_or("?"),
                c["reason"].as_str().unwrap_or("?")
            ),
        },
    };
    let log = api.requests();
    let mut out = Vec::new();
    for sim in nodes {
        let upstream = api.node(&sim.name);
        if upstream.as_ref().and_then(ready_status).as_deref() == Some("True") {
            continue;
        }
        let ours = async {
            let response = client
                .get(format!("{url}/api/v1/nodes/{}", sim.name))
                .send()
                .await
                .ok()?;
            response.json::<Value>().await.ok()
        }
        .await;
        let path = format!("/api/v1/nodes/{}", sim.name);
        let writes = log
            .iter()
            .filter(|r| r.is_write() && (r.path == path || r.path.starts_with(&format!("{path}/"))))
            .map(route)
            .collect::<Vec<_>>();
        out.push(format!(
            "{}: API server {}, controller {}; node writes answered (since the last log clear): {}",
            sim.name,
            describe(upstream.as_ref()),
            describe(ours.as_ref()),
            if writes.is_empty() {
                "none".into()
            } else {
                writes.join(", ")
            }
        ));
        if out.len() == 5 {
            break;
        }
    }
    out.join("; ")
}

// ---------------------------------------------------------------------------
// 3. A site at scale: steady state, an outage, the drain

/// What the API server holds of the site, at one moment.
struct Upstream {
    /// Per node: Ready status and the managed taint keys, sorted.
    nodes: BTreeMap<String, (Option<String>, Vec<String>)>,
    /// Per node Lease: its renewTime.
    renewed: BTreeMap<String, jiff::Timestamp>,
    /// Per node: its creationTimestamp.
    created: BTreeMap<String, jiff::Timestamp>,
    at: jiff::Timestamp,
}

impl Upstream {
    fn read(api: &FakeApiServer) -> Upstream {
        let all = api.nodes();
        let nodes = all
            .iter()
            .filter_map(|n| {
                let name = n["metadata"]["name"].as_str()?.to_string();
                Some((name, (ready_status(n), managed_taints(n))))
            })
            .collect();
        let created = all
            .iter()
            .filter_map(|n| {
                let name = n["metadata"]["name"].as_str()?.to_string();
                let at = n["metadata"]["creationTimestamp"].as_str()?.parse().ok()?;
                Some((name, at))
            })
            .collect();
        let renewed = api
            .leases()
            .iter()
            .filter(|l| l["metadata"]["namespace"] == "kube-node-lease")
            .filter_map(|l| {
                let name = l["metadata"]["name"].as_str()?.to_string();
                let at = l["spec"]["renewTime"].as_str()?.parse().ok()?;
                Some((name, at))
            })
            .collect();
        Upstream {
            nodes,
            renewed,
            created,
            at: jiff::Timestamp::now(),
        }
    }

    /// Ready nodes upstream (Ready=True there).
    fn ready(&self) -> impl Iterator<Item = &String> {
        self.nodes
            .iter()
            .filter(|(_, (ready, _))| ready.as_deref() == Some("True"))
            .map(|(n, _)| n)
    }

    /// The age of a node's Lease, in seconds: since its renewTime, or since
    /// the Node's creation if that is later (a Node created a moment ago has
    /// had no time to renew). `None`: no Lease.
    fn lease_age(&self, name: &str) -> Option<f64> {
        let renewed = *self.renewed.get(name)?;
        let from = match self.created.get(name) {
            Some(created) if *created > renewed => *created,
            _ => renewed,
        };
        Some(self.at.duration_since(from).as_secs_f64())
    }

    /// The age of each Ready node's Lease, in seconds (`None`: no Lease).
    fn lease_ages(&self) -> Vec<Option<f64>> {
        self.ready().map(|n| self.lease_age(n)).collect()
    }

    /// The oldest Lease age of the Ready nodes, and how many have none.
    fn oldest_lease(&self) -> (f64, usize) {
        let ages = self.lease_ages();
        let missing = ages.iter().filter(|a| a.is_none()).count();
        let oldest = ages.into_iter().flatten().fold(0.0, f64::max);
        (oldest, missing)
    }
}

/// The oldest Lease age of the nodes Ready in the registry (`truth`) whose
/// Node is upstream and whose Lease was renewed since `since` (the API
/// server's return: older ones lapsed during the outage, which `behind`
/// counts until they are renewed).
fn oldest_lease_of_ready(
    truth: &BTreeMap<String, (Option<String>, Vec<String>)>,
    up: &Upstream,
    since: jiff::Timestamp,
) -> f64 {
    truth
        .iter()
        .filter(|(n, (ready, _))| ready.as_deref() == Some("True") && up.nodes.contains_key(*n))
        .filter(|(n, _)| up.renewed.get(*n).is_some_and(|t| *t >= since))
        .filter_map(|(n, _)| up.lease_age(n))
        .fold(0.0, f64::max)
}

fn managed_taints(node: &Value) -> Vec<String> {
    let mut keys: Vec<String> = node["spec"]["taints"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["key"].as_str())
        .filter(|k| MANAGED_TAINTS.contains(k))
        .map(str::to_string)
        .collect();
    keys.sort();
    keys
}

/// The controller's nodes: Ready status and managed taints, by name.
async fn controller_nodes(
    client: &reqwest::Client,
    url: &str,
) -> Result<BTreeMap<String, (Option<String>, Vec<String>)>> {
    let list: Value = client
        .get(format!("{url}/api/v1/nodes"))
        .timeout(LIST_TIMEOUT)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("GET {url}/api/v1/nodes"))?
        .json()
        .await
        .with_context(|| format!("GET {url}/api/v1/nodes: not a NodeList"))?;
    Ok(list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|n| {
            let name = n["metadata"]["name"].as_str()?.to_string();
            Some((name, (ready_status(n), managed_taints(n))))
        })
        .collect())
}

/// Nodes whose Node upstream differs from the controller's (missing, or
/// another Ready status or managed taints), and Ready nodes not upstream
/// with a Lease renewed since `since`.
fn behind(
    truth: &BTreeMap<String, (Option<String>, Vec<String>)>,
    upstream: &Upstream,
    since: jiff::Timestamp,
) -> (usize, usize) {
    let nodes = truth
        .iter()
        .filter(|(n, want)| upstream.nodes.get(*n) != Some(want))
        .count();
    let leases = truth
        .iter()
        .filter(|(_, (ready, _))| ready.as_deref() == Some("True"))
        .filter(|(n, _)| {
            !upstream.nodes.contains_key(*n) || upstream.renewed.get(*n).is_none_or(|t| *t < since)
        })
        .count();
    (nodes, leases)
}

/// Everything measured at the site.
struct SiteRow {
    nodes: usize,
    /// From the controller's start to every node upstream, Ready, with a Lease.
    initial: Duration,
    initial_requests: usize,
    initial_mix: BTreeMap<String, usize>,
    budget_after_start: Option<nodekeeper::mirror::BudgetStatus>,
    window: Duration,
    counts: BTreeMap<Kind, usize>,
    steady_mix: BTreeMap<String, usize>,
    /// The oldest Lease age of the Ready nodes over the window (each second's oldest).
    steady_oldest: Vec<f64>,
    steady_ctrl_cpu: f64,
    steady_bench_cpu: f64,
    steady_rss_kib: u64,
    /// Nodes whose kubelets stopped answering during the outage.
    down: usize,
    /// The controller's nodes when the API server returned.
    not_ready_at_return: usize,
    backlog_at_return: usize,
    /// From the API server's return to every Ready node's Lease renewed.
    leases_renewed: Option<Duration>,
    /// From its return to every Node and its status upstream.
    nodes_upstream: Option<Duration>,
    /// The oldest Lease age of the nodes Ready in the registry and upstream,
    /// once renewed after the return, each second from the return to the
    /// end of the drain (and AFTER_DRAIN beyond).
    drain_oldest: Vec<f64>,
    drain_requests: usize,
    drain_mix: BTreeMap<String, usize>,
    drain_throttled: usize,
    drain_ctrl_cpu: f64,
    drain_rss_peak_kib: u64,
    mirror_end: Option<MirrorStatus>,
    /// What went wrong, if anything.
    wrong: Vec<String>,
    stop: String,
}

async fn site(env: &Env<'_>) -> Result<SiteRow> {
    let args = env.args;
    let n = args.site_nodes;
    let mut run = scratch("site", n)?;
    let (port, nodes_file, controls) = start_sims(&mut run, env.bin, env.args.base_ip, n).await?;
    eprintln!("   {} sim process(es) up on port {port}", run.sims.len());
    let api = FakeApiServer::start().await;
    let mut flags = strings(&[
        "--kubelet-port",
        &port.to_string(),
        "--master",
        &api.url(),
        "--eviction-mode",
        "none",
    ]);
    if let Some(qps) = args.site_qps {
        flags.extend(strings(&["--kube-api-qps", &qps.to_string()]));
    }
    if let Some(burst) = args.site_burst {
        flags.extend(strings(&["--kube-api-burst", &burst.to_string()]));
    }
    let started = Instant::now();
    run.start_controller(env.bin, &controller_args(&run.dir, &nodes_file, &flags))?;
    let url = run
        .wait_for_discovery(CONTROLLER_START_TIMEOUT, POLL)
        .await?;
    let pid = run.controller_pid()?;
    eprintln!("   controller serving {url}; waiting for every node upstream with its Lease");

    // 1. Every node upstream, Ready, with a Lease.
    let deadline = Instant::now() + SITE_READY_TIMEOUT;
    let mut reported = Instant::now();
    loop {
        run.check_alive()?;
        let up = Upstream::read(&api);
        let ready = up.ready().filter(|n| up.renewed.contains_key(*n)).count();
        if ready == n {
            break;
        }
        if Instant::now() > deadline {
            let status = mirror_status(env.client, &url).await.ok();
            bail!(
                "only {ready} of {n} nodes Ready upstream with a Lease after {SITE_READY_TIMEOUT:?} ({}){}",
                status.as_ref().map_or("no /v1/mirror".into(), describe_status),
                run.controller_log_tail()
            );
        }
        if reported.elapsed() >= Duration::from_secs(10) {
            let status = mirror_status(env.client, &url).await.ok();
            eprintln!(
                "   {:.0}s: {ready} of {n} Ready upstream with a Lease ({} requests; {})",
                started.elapsed().as_secs_f64(),
                api.requests().len(),
                status
                    .as_ref()
                    .map_or("no /v1/mirror".into(), describe_status)
            );
            reported = Instant::now();
        }
        tokio::time::sleep(SITE_SAMPLE_EVERY).await;
    }
    let initial = started.elapsed();
    let initial_log = api.requests();
    let initial_requests = initial_log.len();
    let initial_mix = mix(&initial_log);
    drop(initial_log);
    let budget_after_start = mirror_status(env.client, &url).await?.budget;
    eprintln!(
        "   every node upstream after {:.1}s ({initial_requests} requests); warming up {}",
        initial.as_secs_f64(),
        nodekeeper::duration::format(args.site_warmup)
    );
    tokio::time::sleep(args.site_warmup).await;

    // 2. The steady window.
    run.check_alive()?;
    api.clear_requests();
    let mut meter = ProcessMeter::start(pid, env.machine)?;
    let bench_meter = ProcessMeter::start(std::process::id(), env.machine)?;
    let window_start = Instant::now();
    let window_end = window_start + args.site_window;
    let mut steady_oldest = Vec::new();
    eprintln!(
        "   measuring {}",
        nodekeeper::duration::format(args.site_window)
    );
    while Instant::now() < window_end {
        run.check_alive()?;
        meter.sample()?;
        steady_oldest.push(Upstream::read(&api).oldest_lease().0);
        tokio::time::sleep_until(window_end.min(Instant::now() + SITE_SAMPLE_EVERY)).await;
    }
    let window = window_start.elapsed();
    let steady_ctrl_cpu = meter.cpu_seconds()?;
    let steady_bench_cpu = bench_meter.cpu_seconds()?;
    let steady_rss_kib = meter.rss_peak_kib();
    let log = api.requests();
    let mut counts: BTreeMap<Kind, usize> = Kind::ALL.iter().map(|k| (*k, 0)).collect();
    for r in &log {
        *counts.entry(Kind::of(r)).or_insert(0) += 1;
    }
    let steady_mix = mix(&log);
    eprintln!(
        "   steady: {} requests in {:.0}s, oldest Lease {:.1}s",
        log.len(),
        window.as_secs_f64(),
        steady_oldest.iter().copied().fold(0.0, f64::max)
    );

    // 3. The outage: the API server away, some kubelets down meanwhile.
    api.set_fault(Fault::Down);
    tokio::time::timeout(FAULT_SETTLE_TIMEOUT, api.settled())
        .await
        .context("the fake API server did not go down")?;
    let outage_start = Instant::now();
    let step = (n / args.outage_down.max(1)).max(1);
    let down: Vec<&(String, String)> = controls
        .iter()
        .step_by(step)
        .take(args.outage_down)
        .collect();
    eprintln!(
        "   the API server is down for {}; {} kubelets stop answering",
        nodekeeper::duration::format(args.outage),
        down.len()
    );
    for (name, control) in &down {
        set_kubelet(env.client, control, name, "down").await?;
    }
    let outage_end = outage_start + args.outage;
    while Instant::now() < outage_end {
        run.check_alive()?;
        tokio::time::sleep_until(outage_end.min(Instant::now() + Duration::from_secs(30))).await;
        eprintln!(
            "   outage: {:.0}s of {:.0}s",
            outage_start.elapsed().as_secs_f64(),
            args.outage.as_secs_f64()
        );
    }
    let truth = controller_nodes(env.client, &url).await?;
    let not_ready_at_return = truth
        .values()
        .filter(|(ready, _)| ready.as_deref() != Some("True"))
        .count();
    let backlog_at_return = mirror_status(env.client, &url).await?.backlog;

    // 4. The return, and the drain.
    api.clear_requests();
    let mut drain_meter = ProcessMeter::start(pid, env.machine)?;
    let returned_at = jiff::Timestamp::now();
    let returned = Instant::now();
    match args.after_outage {
        AfterOutage::Intact => {
            api.set_fault(Fault::None);
            tokio::time::timeout(FAULT_SETTLE_TIMEOUT, api.settled())
                .await
                .context("the fake API server did not come back up")?;
        }
        AfterOutage::Empty => {
            tokio::time::timeout(FAULT_SETTLE_TIMEOUT, api.restart_empty())
                .await
                .context("the fake API server did not come back up")?;
        }
    }
    eprintln!(
        "   the API server is back ({:?}): {} of the controller's nodes not Ready, backlog {backlog_at_return}",
        args.after_outage, not_ready_at_return
    );
    let mut leases_renewed = None;
    let mut nodes_upstream = None;
    let mut drain_oldest = Vec::new();
    let mut wrong = Vec::new();
    let deadline = returned + SITE_DRAIN_TIMEOUT;
    let mut reported = Instant::now();
    loop {
        run.check_alive()?;
        drain_meter.sample()?;
        let up = Upstream::read(&api);
        let (nodes_behind, leases_behind) = behind(&truth, &up, returned_at);
        if leases_renewed.is_none() && leases_behind == 0 {
            leases_renewed = Some(returned.elapsed());
            eprintln!(
                "   every Ready node's Lease renewed {:.1}s after the return",
                returned.elapsed().as_secs_f64()
            );
        }
        drain_oldest.push(oldest_lease_of_ready(&truth, &up, returned_at));
        if nodes_upstream.is_none() && nodes_behind == 0 {
            nodes_upstream = Some(returned.elapsed());
            eprintln!(
                "   every Node and its status upstream {:.1}s after the return",
                returned.elapsed().as_secs_f64()
            );
        }
        if let (Some(l), Some(d)) = (leases_renewed, nodes_upstream) {
            if returned.elapsed() >= l.max(d) + AFTER_DRAIN {
                break;
            }
        }
        if Instant::now() > deadline {
            wrong.push(format!(
                "{SITE_DRAIN_TIMEOUT:?} after the API server's return, {nodes_behind} Nodes differ from the controller's and {leases_behind} Ready nodes' Leases were not renewed"
            ));
            break;
        }
        if reported.elapsed() >= Duration::from_secs(5) {
            eprintln!(
                "   {:.0}s: {nodes_behind} Nodes and {leases_behind} Leases behind",
                returned.elapsed().as_secs_f64()
            );
            reported = Instant::now();
        }
        tokio::time::sleep(SITE_SAMPLE_EVERY).await;
    }
    let drain_ctrl_cpu = drain_meter.cpu_seconds()?;
    let drain_rss_peak_kib = drain_meter.rss_peak_kib();
    let log = api.requests();
    let mirror_end = mirror_status(env.client, &url).await.ok();
    // The registry must not have moved while the drain was measured.
    let truth_end = controller_nodes(env.client, &url).await?;
    if truth_end != truth {
        let moved = truth
            .iter()
            .filter(|(k, v)| truth_end.get(*k) != Some(v))
            .count();
        wrong.push(format!(
            "{moved} of the controller's nodes changed during the drain; the times above compare with the registry as it was when the API server returned"
        ));
    }
    let half = Duration::from_secs(20).as_secs_f64();
    let steady_max = steady_oldest.iter().copied().fold(0.0, f64::max);
    if steady_max >= half {
        wrong.push(format!(
            "a Lease {steady_max:.1}s old in the steady state (half the duration is {half:.0}s)"
        ));
    }
    let drain_max = drain_oldest.iter().copied().fold(0.0, f64::max);
    if drain_max >= 2.0 * half {
        wrong.push(format!(
            "a Ready node's Lease {drain_max:.1}s old during the drain: lapsed (the duration is 40s)"
        ));
    }
    let stop = stop(&mut run).await;
    eprintln!("   {stop}");
    Ok(SiteRow {
        nodes: n,
        initial,
        initial_requests,
        initial_mix,
        budget_after_start,
        window,
        counts,
        steady_mix,
        steady_oldest,
        steady_ctrl_cpu,
        steady_bench_cpu,
        steady_rss_kib,
        down: down.len(),
        not_ready_at_return,
        backlog_at_return,
        leases_renewed,
        nodes_upstream,
        drain_oldest,
        drain_requests: log.len(),
        drain_mix: mix(&log),
        drain_throttled: log.iter().filter(|r| r.status == 429).count(),
        drain_ctrl_cpu,
        drain_rss_peak_kib,
        mirror_end,
        wrong,
        stop,
    })
}

/// Sets one simulated kubelet's state through its sim's control endpoint.
async fn set_kubelet(
    client: &reqwest::Client,
    control: &str,
    name: &str,
    state: &str,
) -> Result<()> {
    client
        .put(format!("{control}/nodes/{name}"))
        .json(&serde_json::json!({ "state": state }))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("PUT {control}/nodes/{name}"))?;
    Ok(())
}

/// Starts the site's `nodekeeper sim` processes (the first picks the port,
/// the others take the same one on their own addresses), waits for their
/// nodes files and merges them. Returns the port, the merged nodes file,
/// and each node with its sim's control URL.
async fn start_sims(
    run: &mut Processes,
    bin: &Path,
    base_ip: Ipv4Addr,
    nodes: usize,
) -> Result<(u16, PathBuf, Vec<(String, String)>)> {
    let parts = nodes.div_ceil(MAX_NODES_PER_SIM);
    let mut port = 0;
    let mut entries = Vec::with_capacity(nodes);
    let mut controls = Vec::with_capacity(nodes);
    for index in 0..parts {
        let count = nodes / parts + usize::from(index < nodes % parts);
        let file = run.dir.join(format!("nodes-{index}.json"));
        let base = Ipv4Addr::from(u32::from(base_ip) + index as u32 * SIM_ADDRESS_STRIDE);
        let args = strings(&[
            "--log",
            "warn",
            "sim",
            "--nodes",
            &count.to_string(),
            "--base-ip",
            &base.to_string(),
            "--port",
            &port.to_string(),
            "--control",
            "127.0.0.1:0",
            "--prefix",
            &format!("sim-p{index}-"),
            "--write-nodes-file",
            &file.to_string_lossy(),
        ]);
        let sim = run.start_sim(&format!("sim-{index}"), bin, &args)?;
        let deadline = Instant::now() + SIM_START_TIMEOUT;
        // The banner is printed once the nodes file is written:
        // `... (port 40123); control http://127.0.0.1:40000; ...`.
        let (sim_port, control) = loop {
            sim.check_alive()?;
            let banner = fs::read_to_string(&sim.stdout).unwrap_or_default();
            let parsed = (|| {
                let rest = &banner[banner.find("(port ")? + "(port ".len()..];
                let port: u16 = rest[..rest.find(')')?].trim().parse().ok()?;
                let rest = &rest[rest.find("control ")? + "control ".len()..];
                Some((port, rest.split([';', ' ', '\n']).next()?.to_string()))
            })();
            if let Some(found) = parsed {
                break found;
            }
            if Instant::now() > deadline {
                bail!(
                    "{} did not start within {SIM_START_TIMEOUT:?}{}",
                    sim.name,
                    sim.log_tail(15)
                );
            }
            tokio::time::sleep(POLL).await;
        };
        if port != 0 && sim_port != port {
            bail!("{} listens on port {sim_port}, not {port}", sim.name);
        }
        port = sim_port;
        let bytes = fs::read(&file).with_context(|| format!("cannot read {}", file.display()))?;
        let list: Vec<Value> = serde_json::from_slice(&bytes)
            .with_context(|| format!("{} is not a JSON array of nodes", file.display()))?;
        if list.len() != count {
            bail!("{} wrote {} nodes, not {count}", sim.name, list.len());
        }
        for entry in &list {
            if let Some(name) = entry["name"].as_str() {
                controls.push((name.to_string(), control.clone()));
            }
        }
        entries.extend(list);
    }
    let merged = run.dir.join("nodes.json");
    fs::write(&merged, serde_json::to_vec(&entries)?)
        .with_context(|| format!("cannot write {}", merged.display()))?;
    Ok((port, merged, controls))
}

/// The p50, p99 and maximum of some samples.
fn spread(samples: &[f64]) -> String {
    if samples.is_empty() {
        return "n/a".into();
    }
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let at = |q: f64| sorted[((sorted.len() - 1) as f64 * q).round() as usize];
    format!("{:.1} / {:.1} / {:.1}", at(0.5), at(0.99), at(1.0))
}

fn site_section(out: &mut String, row: &SiteRow, args: &Args) {
    let budget = row.budget_after_start.as_ref().map_or("?".into(), |b| {
        format!(
            "{} req/s, burst {} ({}), Leases every {} for {} Ready nodes need {:.0} req/s",
            b.qps,
            b.burst,
            if b.sized {
                "sized from the Ready nodes"
            } else {
                "given"
            },
            b.lease_renew_interval_seconds
                .map_or("-".into(), |s| format!("{s:.1}s")),
            b.ready_nodes,
            b.lease_qps
        )
    });
    let _ = writeln!(
        out,
        "settings: {} probed kubelets (`nodekeeper sim`, at most {MAX_NODES_PER_SIM} per process, from {}), controller defaults (--node-sync-period 10s, --node-lease-duration 40s, leader election on) with --eviction-mode none{}; budget: {budget}; the API server comes back {:?} after {} (real time) with {} kubelets down meanwhile; the API server's Nodes and Leases sampled every {SITE_SAMPLE_EVERY:?}\n",
        row.nodes,
        args.base_ip,
        match (args.site_qps, args.site_burst) {
            (None, None) => String::new(),
            (q, b) => format!(
                ", --kube-api-qps {} --kube-api-burst {}",
                q.map_or("-".into(), |q| q.to_string()),
                b.map_or("-".into(), |b| b.to_string())
            ),
        },
        args.after_outage,
        nodekeeper::duration::format(args.outage),
        row.down,
    );
    let _ = writeln!(
        out,
        "- start: every node upstream, Ready, with its Lease {:.1}s after the controller started ({} requests)",
        row.initial.as_secs_f64(),
        row.initial_requests
    );
    let _ = writeln!(
        out,
        "- requests by route: {}",
        describe_mix(&row.initial_mix)
    );
    let secs = row.window.as_secs_f64();
    let per_node_hour = |count: usize| count as f64 / row.nodes as f64 * 3600.0 / secs;
    let _ = writeln!(out, "\n**Steady state** ({secs:.0}s window)\n");
    table_header(
        out,
        &["request kind", "requests in window", "per node per hour"],
        Align::FirstLeft,
    );
    let mut total = 0;
    for kind in Kind::ALL {
        let count = row.counts.get(&kind).copied().unwrap_or(0);
        total += count;
        let _ = writeln!(
            out,
            "| {} | {count} | {:.1} |",
            kind.label(),
            per_node_hour(count)
        );
    }
    let _ = writeln!(
        out,
        "| **total** | {total} | {:.1} |\n",
        per_node_hour(total)
    );
    let _ = writeln!(
        out,
        "- oldest Lease age of the Ready nodes, each second's oldest, p50 / p99 / max: {} s (half the duration: 20 s)",
        spread(&row.steady_oldest)
    );
    let _ = writeln!(
        out,
        "- controller: {:.1}% of one core, RSS peak {:.0} MiB; this process (fake API server, sampling): {:.1}% of one core",
        row.steady_ctrl_cpu / secs * 100.0,
        row.steady_rss_kib as f64 / 1024.0,
        row.steady_bench_cpu / secs * 100.0
    );
    let _ = writeln!(
        out,
        "- requests by route: {}",
        describe_mix(&row.steady_mix)
    );
    let _ = writeln!(out, "\n**The drain after the outage**\n");
    let _ = writeln!(
        out,
        "- at the return: {} of the controller's nodes not Ready, backlog {} entries",
        row.not_ready_at_return, row.backlog_at_return
    );
    let secs_or =
        |d: Option<Duration>| d.map_or("never".into(), |d| format!("{:.1}s", d.as_secs_f64()));
    let _ = writeln!(
        out,
        "- every Ready node upstream with its Lease renewed: {} after the return",
        secs_or(row.leases_renewed)
    );
    let _ = writeln!(
        out,
        "- every Node and its status (Ready condition, managed taints) upstream: {} after the return",
        secs_or(row.nodes_upstream)
    );
    let _ = writeln!(
        out,
        "- oldest Lease age during the drain, of the Ready nodes upstream once renewed after the return (age from the renewal, or the Node's creation if later), each second's oldest from the return to {}s after the drain, p50 / p99 / max: {} s",
        AFTER_DRAIN.as_secs(),
        spread(&row.drain_oldest)
    );
    let drain_secs = row
        .leases_renewed
        .max(row.nodes_upstream)
        .map_or(0.0, |d| d.as_secs_f64() + AFTER_DRAIN.as_secs_f64());
    let _ = writeln!(
        out,
        "- {} requests in the drain ({} answered 429); controller {:.2} CPU-s ({:.0}% of a core over {drain_secs:.0}s), RSS peak {:.0} MiB",
        row.drain_requests,
        row.drain_throttled,
        row.drain_ctrl_cpu,
        if drain_secs > 0.0 { row.drain_ctrl_cpu / drain_secs * 100.0 } else { 0.0 },
        row.drain_rss_peak_kib as f64 / 1024.0
    );
    let _ = writeln!(out, "- requests by route: {}", describe_mix(&row.drain_mix));
    if let Some(s) = &row.mirror_end {
        let _ = writeln!(out, "- at the end: {}", describe_status(s));
    }
    for w in &row.wrong {
        let _ = writeln!(out, "- **WRONG: {w}**");
    }
    let _ = writeln!(out, "- {}", row.stop);
}

// ---------------------------------------------------------------------------
// The controller

/// One phase's processes in a fresh scratch directory.
fn scratch(phase: &str, nodes: usize) -> Result<Processes> {
    Processes::in_fresh_dir(std::env::temp_dir().join(format!(
        "nodekeeper-mirror-bench-{}-{phase}-{nodes}",
        std::process::id()
    )))
}

/// `nodekeeper run` on a fresh store in `dir`, on a free loopback port,
/// with the nodes file and `extra` flags.
fn controller_args(dir: &Path, nodes_file: &Path, extra: &[String]) -> Vec<String> {
    let mut args = strings(&[
        "--log",
        "warn",
        "run",
        "--db",
        &dir.join("db").to_string_lossy(),
        "--listen",
        "127.0.0.1:0",
        "--nodes-file",
        &nodes_file.to_string_lossy(),
        "--kubelet-scheme",
        "http",
    ]);
    args.extend_from_slice(extra);
    args
}

/// Stops the phase's controller with SIGTERM (SIGKILL if it does not exit
/// in time); says how it went.
async fn stop(run: &mut Processes) -> String {
    run.stop_controller(STOP_TIMEOUT, 1)
        .await
        .unwrap_or_else(|| "no controller".into())
}

/// Writes a JSON nodes file: `[{"name": ..., "address": ...}, ...]`.
fn write_nodes_file(path: &Path, nodes: &[(String, Ipv4Addr)]) -> Result<()> {
    let entries: Vec<Value> = nodes
        .iter()
        .map(|(name, ip)| serde_json::json!({"name": name, "address": ip.to_string()}))
        .collect();
    let body = serde_json::to_vec(&entries).context("cannot encode the nodes file")?;
    fs::write(path, body).with_context(|| format!("cannot write {}", path.display()))
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

// ---------------------------------------------------------------------------
// Host facts and /proc

// ---------------------------------------------------------------------------
// The report

fn report(
    env: &Env<'_>,
    cases: &[DrainCase],
    drains: &[DrainRow],
    steady: Option<&SteadyRow>,
    site: Option<&SiteRow>,
    errors: &[String],
) -> String {
    let (args, machine) = (env.args, env.machine);
    let mut out = String::new();
    write_preamble(&mut out, "nodekeeper mirror benchmark", env.bin, machine);
    let _ = writeln!(
        out,
        "machine:  {}; {} in this process, on the same cores",
        machine.facts(),
        if args.phases.contains(&Phase::Steady) {
            "the fake API server and the simulated kubelets run"
        } else {
            "the fake API server runs"
        },
    );
    let _ = writeln!(out, "store:    under {}", scratch_filesystem());

    if args.phases.contains(&Phase::Drain) {
        let _ = writeln!(out, "\n### 1. Outbox drain after a backlog\n");
        let _ = writeln!(
            out,
            "settings: nodes file of N static nodes, --node-status-mode push, --node-startup-grace-period 1s, --node-monitor-period 1s, --eviction-mode none, --leader-elect={}; the API server down until the backlog is N, then up; drain = up until /v1/mirror shows backlog 0 (polled every {POLL:?})\n",
            args.drain_leader_elect
        );
        let header = [
            "backlog (nodes)",
            "budget qps/burst",
            "queued after (s)",
            "1st request after up (s)",
            "drain (s)",
            "nodes/s",
            "API requests",
            "requests/node",
            "achieved req/s",
            "req/s beyond the burst (% of qps)",
            "budget floor (s)",
            "ctrl CPU-s",
            "ctrl CPU % of 1 core",
            "RSS MiB start/peak (VmHWM)",
            "API server holds N nodes, Ready=Unknown",
        ];
        table_header(&mut out, &header, Align::FirstLeft);
        for row in drains {
            table_row(&mut out, &drain_cells(row));
        }
        if drains.len() < cases.len() {
            let _ = writeln!(
                out,
                "\n({} of {} backlog sizes completed)",
                drains.len(),
                cases.len()
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "- API requests: those the fake API server answered from coming up to the empty backlog, leader election aside; budget floor: the shortest time the budget allows for them, (requests − burst) / qps; achieved req/s: requests / (last request − first request); beyond the burst: (requests − burst) / (last request − first request), the pace the budget sets"
        );
        for row in drains {
            let n = row.case.nodes;
            let _ = writeln!(
                out,
                "- {n} nodes: requests by route: {}",
                describe_mix(&row.mix)
            );
            let _ = writeln!(
                out,
                "- {n} nodes: {} answers not 2xx (see the routes); {} leader-election requests besides (not in the counts above); the mirror counted {} requests and {} retries over the drain",
                row.failed_requests, row.leader_requests, row.mirror_requests, row.mirror_retries
            );
            let _ = writeln!(out, "- {n} nodes: {}", row.stop);
        }
    }

    if args.phases.contains(&Phase::Steady) {
        let _ = writeln!(
            out,
            "\n### 2. Steady-state API requests per node per hour\n"
        );
        let interval = nodekeeper::duration::format(args.steady_interval);
        let _ = writeln!(
            out,
            "settings: {} simulated kubelets ({}..) push a Lease renewal and a status update every {interval}; controller --node-status-mode push, --node-lease-renew-interval {interval}, --kube-api-qps {} --kube-api-burst {}, leader election on (defaults); warm-up {} after every node is Ready=True on the API server, window {}\n",
            args.steady_nodes,
            args.base_ip,
            args.steady_qps,
            args.steady_burst,
            nodekeeper::duration::format(args.steady_warmup),
            nodekeeper::duration::format(args.steady_window),
        );
        match steady {
            None => {
                let _ = writeln!(out, "(did not complete)");
            }
            Some(row) => steady_section(&mut out, row, args.steady_interval),
        }
    }
    if args.phases.contains(&Phase::Site) {
        let _ = writeln!(
            out,
            "\n### 3. A site of {} nodes: steady state, a {} outage, the drain\n",
            args.site_nodes,
            nodekeeper::duration::format(args.outage)
        );
        match site {
            None => {
                let _ = writeln!(out, "(did not complete)");
            }
            Some(row) => site_section(&mut out, row, args),
        }
    }
    if !errors.is_empty() {
        let _ = writeln!(out, "\n### ERRORS\n");
        for e in errors {
            let _ = writeln!(out, "- {e}");
        }
    }
    out
}

fn drain_cells(row: &DrainRow) -> Vec<String> {
    let c = row.case;
    let drain = row.drain.as_secs_f64();
    let active = row.active.as_secs_f64();
    let achieved = if active > 0.0 {
        format!("{:.0}", row.requests as f64 / active)
    } else {
        "n/a".into()
    };
    // The bucket is full when the API server comes up (nothing was sent
    // while it was down), so what is paced is what the burst did not cover.
    let beyond = row.requests.saturating_sub(c.burst as usize);
    let paced = if beyond == 0 {
        "n/a (all in the burst)".into()
    } else if active > 0.0 {
        let rate = beyond as f64 / active;
        format!("{rate:.1} ({:.0}%)", rate / c.qps * 100.0)
    } else {
        "n/a".into()
    };
    let floor = (row.requests as f64 - f64::from(c.burst)).max(0.0) / c.qps;
    let mib = |kib: u64| kib as f64 / 1024.0;
    vec![
        c.nodes.to_string(),
        format!("{}/{}", c.qps, c.burst),
        format!("{:.1}", row.queued_after.as_secs_f64()),
        row.first_request_after
            .map_or("none".into(), |d| format!("{:.2}", d.as_secs_f64())),
        format!("{drain:.1}"),
        format!("{:.0}", c.nodes as f64 / drain),
        row.requests.to_string(),
        format!("{:.2}", row.requests as f64 / c.nodes as f64),
        achieved,
        paced,
        format!("{floor:.1}"),
        format!("{:.2}", row.ctrl_cpu),
        format!("{:.0}", row.ctrl_cpu / drain * 100.0),
        format!(
            "{:.0}/{:.0} ({:.0})",
            mib(row.rss_start_kib),
            mib(row.rss_peak_kib),
            mib(row.hwm_kib)
        ),
        match &row.verified {
            Ok(()) => "yes".into(),
            Err(why) => format!("NO: {why}"),
        },
    ]
}

fn steady_section(out: &mut String, row: &SteadyRow, interval: Duration) {
    let secs = row.window.as_secs_f64();
    let per_node_hour = |count: usize| count as f64 / row.nodes as f64 * 3600.0 / secs;
    table_header(
        out,
        &["request kind", "requests in window", "per node per hour"],
        Align::FirstLeft,
    );
    let mut total = 0;
    for kind in Kind::ALL {
        let count = row.counts.get(&kind).copied().unwrap_or(0);
        total += count;
        let _ = writeln!(
            out,
            "| {} | {count} | {:.1} |",
            kind.label(),
            per_node_hour(count)
        );
    }
    let _ = writeln!(out, "| **total** | {total} | {:.1} |", per_node_hour(total));
    let _ = writeln!(out);
    let expected = 3600.0 / interval.as_secs_f64();
    let _ = writeln!(
        out,
        "- goal: only changes and Lease renewals: {expected:.0} renewals per node per hour at a {} interval, ~0 node writes while nothing changes",
        nodekeeper::duration::format(interval)
    );
    let _ = writeln!(
        out,
        "- window {secs:.1}s, {} nodes, {} of them Ready=True on the API server {:.1}s after the controller started",
        row.nodes,
        row.ready_upstream,
        row.ready_after.as_secs_f64()
    );
    let _ = writeln!(
        out,
        "- controller: {:.1}% of one core ({:.2} CPU-s), RSS {:.1} MiB at the end, {:.1} MiB peak sampled, VmHWM {:.1} MiB; this process (fake API server and kubelets): {:.1}% of one core",
        row.ctrl_cpu / secs * 100.0,
        row.ctrl_cpu,
        row.rss_end_kib as f64 / 1024.0,
        row.rss_peak_kib as f64 / 1024.0,
        row.hwm_kib as f64 / 1024.0,
        row.bench_cpu / secs * 100.0
    );
    let _ = writeln!(out, "- requests by route: {}", describe_mix(&row.mix));
    let _ = writeln!(
        out,
        "- {} answers not 2xx; the mirror retried {} times in the window and ended it with backlog {} ({})",
        row.failed_requests,
        row.mirror_retries,
        row.mirror_end.backlog,
        describe_status(&row.mirror_end)
    );
    let mut pushes = format!(
        "- the kubelets pushed {} times to the controller in the window ({:.0} per node per hour), {} failed",
        row.pushes_sent,
        row.pushes_sent as f64 / row.nodes as f64 * 3600.0 / secs,
        row.pushes_failed
    );
    if row.pushes_failed > 0 {
        let _ = write!(
            pushes,
            " (last: {})",
            row.push_error.as_deref().unwrap_or("?")
        );
    }
    let _ = writeln!(out, "{pushes}");
    if let Some(what) = &row.not_ready_upstream {
        let _ = writeln!(
            out,
            "- **WRONG: {what}** (the controller had every node Ready with an empty backlog)"
        );
    }
    let _ = writeln!(out, "- {}", row.stop);
}

/// `GET nodes/{name} 404 ×10000, ...`, most frequent first.
fn describe_mix(mix: &BTreeMap<String, usize>) -> String {
    if mix.is_empty() {
        return "none".into();
    }
    let mut routes: Vec<(&String, &usize)> = mix.iter().collect();
    routes.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    routes
        .iter()
        .map(|(route, n)| format!("{route} ×{n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str, status: u16) -> Request {
        Request {
            method: method.into(),
            path: path.into(),
            query: String::new(),
            status,
            at: Instant::now(),
        }
    }

    #[test]
    fn classifies_requests() {
        let lease = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1";
        assert_eq!(Kind::of(&request("PUT", lease, 200)), Kind::NodeLease);
        let leader = "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases/nodekeeper";
        assert_eq!(Kind::of(&request("GET", leader, 200)), Kind::LeaderLease);
        let status = "/api/v1/nodes/edge-1/status";
        assert_eq!(Kind::of(&request("PATCH", status, 200)), Kind::NodeWrite);
        assert_eq!(
            Kind::of(&request("POST", "/api/v1/nodes", 201)),
            Kind::NodeWrite
        );
        assert_eq!(
            Kind::of(&request("GET", "/api/v1/nodes", 200)),
            Kind::NodeRead
        );
        assert_eq!(Kind::of(&request("GET", "/api/v1/pods", 200)), Kind::Other);
        assert_eq!(
            Kind::of(&request("GET", "/api/v1/nodesx", 200)),
            Kind::Other
        );
    }

    #[test]
    fn routes_hide_names() {
        assert_eq!(
            route(&request("PATCH", "/api/v1/nodes/edge-1/status", 200)),
            "PATCH nodes/{name}/status 200"
        );
        assert_eq!(
            route(&request("GET", "/api/v1/nodes/edge-1", 404)),
            "GET nodes/{name} 404"
        );
        assert_eq!(
            route(&request("POST", "/api/v1/nodes", 201)),
            "POST nodes 201"
        );
        assert_eq!(
            route(&request(
                "PUT",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/edge-1",
                200
            )),
            "PUT leases kube-node-lease/{name} 200"
        );
        assert_eq!(
            route(&request(
                "POST",
                "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases",
                201
            )),
            "POST leases kube-system 201"
        );
    }

    #[test]
    fn backlog_nodes_are_named_and_addressed() {
        let nodes = backlog_nodes(10_000).unwrap();
        assert_eq!(nodes[0], ("edge-00001".into(), Ipv4Addr::new(10, 0, 0, 1)));
        assert_eq!(
            nodes[9_999],
            ("edge-10000".into(), Ipv4Addr::new(10, 0, 39, 16))
        );
        assert!(backlog_nodes(1 << 24).is_err());
    }
}
