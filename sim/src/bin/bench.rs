//! The scale benchmark: a controller against simulated fleets of each size, measuring its cost per probe, or with `--push` per pushed heartbeat (every simulated kubelet on a connection of its own); `--soak` follows store size and memory minute by minute, `--burst` times thousands of status changes at once, `--floor` measures the least server of the same requests in the controller's place. Run it with `cargo run --release --bin nodekeeper-bench -- --sizes 1000,10000 [--push [--soak 1h] [--burst | --floor]]`.
//!
//! Long (about 1,350 lines): the run of one fleet size (`bench_size`), its
//! processes, the samples it takes and the report, whose columns docs/benchmarks.md
//! quotes. What it shares with the other benchmarks is in
//! `nodekeeper_sim::bench`; its `--history` mode and its `--burst` are
//! modules of their own.
//!
//! Some functions here run past ~80 lines: each is one phase of the run,
//! read top to bottom as it happens (start, wait, measure, report), its
//! steps sharing the processes and the figures they take; split, each part
//! would need all of them passed in.

// A benchmark measures real (never paused) time and writes its reports synchronously.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod burst;
mod callgrind;
mod history;
mod readers;
mod storm;
mod tls;

use std::fmt::Write as _;
use std::fs;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Parser;

use nodekeeper_sim::bench::{
    context_switches, cpu_ticks, dir_size, load_average, memory_kib, memory_kinds_kib,
    parse_duration, scratch_filesystem, slope, table_header, table_row, write_preamble,
    written_bytes, Align, BinArg, Machine, Proc, Processes,
};
use nodekeeper_sim::push::ChangeTiming;
use readers::{reader_window, ReaderWindow};

/// One `nodekeeper sim` process holds about two open files per node, three
/// when its nodes push (each its own connection); the hard limit is 20k.
const MAX_NODES_PER_SIM: usize = 5000;
const SIM_START_TIMEOUT: Duration = Duration::from_secs(60);
const CONTROLLER_START_TIMEOUT: Duration = Duration::from_secs(60);
const READY_TIMEOUT: Duration = Duration::from_secs(120);
const STOP_TIMEOUT: Duration = Duration::from_secs(20);
const HTTP_TIMEOUT: Duration = Duration::from_secs(10);
const POLL: Duration = Duration::from_millis(250);
/// The store is settled once no event was stored for this long: more than
/// the controller's monitor period (5 s), whose passes lift start-up taints.
const SETTLED_FOR: Duration = Duration::from_secs(6);
/// A soak judges flatness over this much of its end.
const SOAK_TAIL: Duration = Duration::from_secs(30 * 60);

#[derive(Debug, Parser)]
#[command(
    name = "nodekeeper-bench",
    about = "Scale benchmark: the controller against simulated fleets"
)]
struct Args {
    /// Fleet sizes to measure, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000")]
    sizes: Vec<usize>,
    /// Measure pushed heartbeats: the sims push Lease renewals and status
    /// updates, the controller runs with --node-status-mode push.
    #[arg(long)]
    push: bool,
    /// The controller's --node-sync-period (probe mode).
    #[arg(long, default_value = "1s", value_parser = parse_duration, conflicts_with = "push")]
    period: Duration,
    /// The sims' --lease-renew-interval and --status-update-interval (push mode).
    #[arg(long, default_value = "10s", value_parser = parse_duration, requires = "push")]
    interval: Duration,
    /// Time between all nodes Ready and the start of the measurement.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    warmup: Duration,
    /// Length of the measurement window.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    measure: Duration,
    /// After the window, keep the fleet pushing this long and print the
    /// store's size, memory and disk writes at every --sample-every; the
    /// trend of the last 30 minutes says whether they are flat.
    #[arg(long, value_parser = parse_duration, requires = "push")]
    soak: Option<Duration>,
    /// Time between soak samples.
    #[arg(long, default_value = "1m", value_parser = parse_duration, requires = "soak")]
    sample_every: Duration,
    /// After the window, turn every node of the first sim process (up to
    /// 5,000) sick at once, then up again, and time until every change is
    /// answered (each answer comes only once the change is on disk).
    #[arg(long, requires = "push")]
    burst: bool,
    /// Serve the controller over https: `client-certs` gives it
    /// --client-ca-file and every simulated kubelet a client certificate of
    /// its own (CN=system:node:NAME, O=system:nodes), read from a file.
    #[arg(long, value_enum, requires = "push", conflicts_with = "floor")]
    tls: Option<tls::TlsMode>,
    /// After the window (and any bursts), every simulated kubelet drops its
    /// connection at once and reconnects; time until each has had a
    /// heartbeat answered on its new connection, and the controller's CPU.
    #[arg(long, requires = "push")]
    reconnect_storm: bool,
    /// Run the floor (nodekeeper-floor) in place of the controller: the
    /// least server of the sims' requests on the controller's HTTP stack,
    /// which says what this machine costs per heartbeat before any work of
    /// the controller's. It has no Ready count, store or bursts.
    #[arg(long, requires = "push", conflicts_with_all = ["burst", "soak", "controller_bin"])]
    floor: bool,
    /// The nodekeeper-floor binary (default: the one next to this executable).
    #[arg(long, requires = "floor")]
    floor_bin: Option<PathBuf>,
    /// Run the controller under valgrind's callgrind and report the
    /// instructions it runs per heartbeat (or probe) in the window: a count
    /// that does not move with the machine's load, to compare two builds
    /// at once. The controller runs about fifty times slower: give it a
    /// small fleet (`--sizes 300`); its CPU figures are valgrind's.
    #[arg(long, conflicts_with_all = ["floor", "readers", "soak", "burst", "reconnect_storm"])]
    callgrind: bool,
    #[command(flatten)]
    bin: BinArg,
    /// A different nodekeeper binary for the controller only (the sims stay
    /// --bin's), to compare controllers against the same fleet.
    #[arg(long)]
    controller_bin: Option<PathBuf>,
    /// A flag for the controller besides the benchmark's own, once per
    /// word: `--controller-arg=--list-bytes-per-second --controller-arg=0`.
    #[arg(
        long = "controller-arg",
        value_name = "ARG",
        allow_hyphen_values = true
    )]
    controller_args: Vec<String>,
    /// The controller's --node-monitor-grace-period.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    grace: Duration,
    /// Reader loads to measure in turn after the warm-up, each for one
    /// window on the same fleet: LISTERS or LISTERS+WATCHES (e.g.
    /// `0,1,4+50`). Listers list every node back to back; watches are held
    /// as an informer holds them; small reads of one node are timed
    /// throughout.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["soak", "burst", "floor"])]
    readers: Vec<readers::Readers>,
    /// The 127.X.0.0/16 ranges of the sim processes, one per process
    /// (default 10, 20, 30 …): runs side by side need ranges of their own.
    #[arg(long, value_delimiter = ',')]
    ranges: Vec<u8>,
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    // `--history` is the history benchmark (src/bin/history/), with its own flags.
    if std::env::args().nth(1).as_deref() == Some("--history") {
        if let Err(e) = history::run(std::env::args().skip(1)).await {
            eprintln!("nodekeeper-bench --history: error: {e:#}");
            std::process::exit(1);
        }
        return;
    }
    if let Err(e) = real_main().await {
        eprintln!("nodekeeper-bench: error: {e:#}");
        std::process::exit(1);
    }
}

async fn real_main() -> Result<()> {
    nodekeeper::install_crypto_provider();
    let args = Args::parse();
    if args.sizes.is_empty() || args.sizes.contains(&0) {
        bail!("--sizes: give one or more fleet sizes above zero, e.g. 1000,10000");
    }
    if args.period.is_zero() || args.interval.is_zero() || args.measure.is_zero() {
        bail!("--period, --interval and --measure must be more than zero");
    }
    if args.sample_every.is_zero() {
        bail!("--sample-every must be more than zero");
    }
    let mode = Mode::of(&args);
    if args.callgrind {
        callgrind::check_installed()?;
    }
    let bin = args.bin.resolve()?;
    let controller_bin = args.controller_bin.clone().unwrap_or_else(|| bin.clone());
    if !controller_bin.is_file() {
        bail!(
            "--controller-bin {}: no such file",
            controller_bin.display()
        );
    }
    let floor = if args.floor {
        let floor = match &args.floor_bin {
            Some(given) => given.clone(),
            None => std::env::current_exe()
                .context("cannot find this executable's path")?
                .with_file_name("nodekeeper-floor"),
        };
        if !floor.is_file() {
            bail!(
                "no nodekeeper-floor binary at {} (build it with `cargo build --release --bin nodekeeper-floor`, or give --floor-bin)",
                floor.display()
            );
        }
        Some(floor)
    } else {
        None
    };
    let bins = Bins {
        sim: bin.clone(),
        controller: controller_bin,
        floor,
    };
    let machine = Machine::probe(&bins.controller);
    let pki = match args.tls {
        Some(tls::TlsMode::ClientCerts) => Some(tls::Pki::new()?),
        None => None,
    };
    let client = match &pki {
        Some(pki) => pki.client(HTTP_TIMEOUT)?,
        None => reqwest::Client::builder()
            .no_proxy()
            .timeout(HTTP_TIMEOUT)
            .build()?,
    };

    let mut rows = Vec::new();
    let mut failure = None;
    for &nodes in &args.sizes {
        eprintln!("== {nodes} nodes");
        // On Ctrl-C the run is dropped, which stops its processes and removes its files.
        let outcome = tokio::select! {
            outcome = bench_size(&args, mode, &bins, &client, &machine, pki.as_ref(), nodes) => outcome,
            _ = tokio::signal::ctrl_c() => Err(anyhow!("interrupted")),
        };
        match outcome {
            Ok(row) => rows.push(row),
            Err(e) => {
                failure = Some(e.context(format!("the {nodes}-node run failed")));
                break;
            }
        }
    }
    print!("{}", report(&args, mode, &bins, &machine, &rows));
    match failure {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------------------
// What is measured

/// How the controller learns node health in a run.
#[derive(Debug, Clone, Copy)]
enum Mode {
    /// It probes every kubelet once per sync period.
    Probe { period: Duration },
    /// Kubelets push a Lease renewal and a status update every interval.
    Push { interval: Duration },
}

impl Mode {
    fn of(args: &Args) -> Mode {
        if args.push {
            Mode::Push {
                interval: args.interval,
            }
        } else {
            Mode::Probe {
                period: args.period,
            }
        }
    }

    /// Where the controller listens. Pushing sims must know it before the
    /// controller starts (it reads their nodes file), so a free port is chosen now.
    fn controller_listen(self) -> Result<SocketAddr> {
        let port = match self {
            Mode::Probe { .. } => 0,
            Mode::Push { .. } => {
                let probe = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
                    .context("cannot find a free port for the controller")?;
                probe.local_addr()?.port()
            }
        };
        Ok(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, port)))
    }

    /// Flags for each sim process beyond its fleet layout.
    fn sim_args(self, controller: SocketAddr, https: bool) -> Vec<String> {
        match self {
            Mode::Probe { .. } => Vec::new(),
            Mode::Push { interval } => {
                let interval = nodekeeper::duration::format(interval);
                let scheme = if https { "https" } else { "http" };
                vec![
                    "--push".into(),
                    format!("{scheme}://{controller}"),
                    "--lease-renew-interval".into(),
                    interval.clone(),
                    "--status-update-interval".into(),
                    interval,
                ]
            }
        }
    }

    /// Flags for the controller beyond its store, address and nodes file.
    fn controller_args(self, kubelet_port: u16) -> Vec<String> {
        match self {
            Mode::Probe { period } => vec![
                "--kubelet-port".into(),
                kubelet_port.to_string(),
                "--node-sync-period".into(),
                nodekeeper::duration::format(period),
            ],
            Mode::Push { .. } => vec!["--node-status-mode".into(), "push".into()],
        }
    }
}

// ---------------------------------------------------------------------------
// One size

/// The binaries a run starts.
struct Bins {
    sim: PathBuf,
    controller: PathBuf,
    /// With --floor: the server run in the controller's place.
    floor: Option<PathBuf>,
}

/// Everything measured for one fleet size.
struct Row {
    nodes: usize,
    sims: usize,
    /// Until every node was Ready; with --floor, until every node's Lease
    /// and status were answered once.
    ready_after: Duration,
    start: Sample,
    end: Sample,
    /// Samples every --sample-every after the window, with --soak.
    soak: Vec<Sample>,
    /// The status bursts, with --burst.
    bursts: Vec<burst::Burst>,
    /// One window per reader load, with --readers.
    reader_windows: Vec<ReaderWindow>,
    /// With --reconnect-storm.
    storm: Option<storm::Storm>,
    /// With --tls client-certs: node certificates made, and how long that took.
    certs_made: Option<(usize, Duration)>,
    /// With --callgrind: the instructions the controller ran in the window.
    instructions: Option<u64>,
    stop: String,
}

async fn bench_size(
    args: &Args,
    mode: Mode,
    bins: &Bins,
    client: &reqwest::Client,
    machine: &Machine,
    pki: Option<&tls::Pki>,
    nodes: usize,
) -> Result<Row> {
    let mut run = Run::new(nodes, mode, &args.ranges)?;
    run.floor = bins.floor.is_some();
    let tls_files = match pki {
        Some(pki) => {
            let names = split(nodes, MAX_NODES_PER_SIM)
                .into_iter()
                .enumerate()
                .flat_map(|(index, count)| {
                    let config = nodekeeper_sim::FleetConfig {
                        nodes: count,
                        name_prefix: sim_prefix(index),
                        ..Default::default()
                    };
                    config.node_names().collect::<Vec<_>>()
                });
            let files = pki.write(&run.procs.dir, names)?;
            eprintln!(
                "   {} client certificates made in {:.2}s",
                files.made.0,
                files.made.1.as_secs_f64()
            );
            Some(files)
        }
        None => None,
    };
    let started = Instant::now();
    let callgrind_out = args.callgrind.then(|| run.procs.dir.join("callgrind.out"));
    let listen = mode.controller_listen()?;
    let mut sim_extra = mode.sim_args(listen, tls_files.is_some());
    if let Some(files) = &tls_files {
        sim_extra.extend(files.sim_args());
    }
    let (port, merged) = start_fleet(&mut run, &bins.sim, nodes, &sim_extra).await?;
    eprintln!(
        "   {} sim process(es) up on port {port} after {:.1}s",
        run.procs.sims.len(),
        started.elapsed().as_secs_f64()
    );

    let controller_started = Instant::now();
    let url = match &bins.floor {
        None => {
            let mut extra = mode.controller_args(port);
            if let Some(files) = &tls_files {
                extra.extend(files.controller_args());
            }
            extra.extend(args.controller_args.iter().cloned());
            let flags = controller_args(&run.procs.dir, &merged, listen, args.grace, &extra);
            if let Some(out) = &callgrind_out {
                let (valgrind, flags) = callgrind::wrap(&bins.controller, &flags, out);
                run.procs.start_controller(&valgrind, &flags)?;
            } else {
                run.procs.start_controller(&bins.controller, &flags)?;
            }
            let url = run
                .procs
                .wait_for_discovery(CONTROLLER_START_TIMEOUT, POLL)
                .await?;
            eprintln!("   controller serving {url}");
            wait_all_ready(&mut run, client, &url, nodes).await?;
            eprintln!(
                "   all {nodes} Ready after {:.1}s",
                controller_started.elapsed().as_secs_f64()
            );
            url
        }
        Some(floor) => {
            let flags = [
                "--listen".to_string(),
                listen.to_string(),
                "--nodes-file".into(),
                merged.to_string_lossy().into_owned(),
            ];
            run.procs.start_server("floor", floor, &flags)?;
            let url = wait_for_floor(&mut run).await?;
            eprintln!("   floor serving {url}");
            wait_all_answered(&mut run, client, nodes).await?;
            eprintln!(
                "   every node's Lease and status answered after {:.1}s",
                controller_started.elapsed().as_secs_f64()
            );
            url
        }
    };
    let ready_after = controller_started.elapsed();
    if let Mode::Probe { .. } = mode {
        // The taints of the Unknown start are lifted at the monitor passes
        // after Ready; a window that caught them would count start-up writes.
        wait_settled(&mut run, client, &url).await?;
        eprintln!(
            "   no event stored for {SETTLED_FOR:?} after {:.1}s",
            controller_started.elapsed().as_secs_f64()
        );
    }
    eprintln!("   warming up {:?}", args.warmup);

    tokio::time::sleep(args.warmup).await;
    run.procs.check_alive()?;
    let mut reader_windows = Vec::new();
    if !args.readers.is_empty() {
        let node = first_node(&merged)?;
        for (i, &load) in args.readers.iter().enumerate() {
            if i > 0 {
                // What the last load left behind (queued work, nodes it
                // made Unknown) settles before the next is measured.
                tokio::time::sleep(args.warmup).await;
            }
            let window = reader_window(&run, client, &url, machine, args, load, &node).await?;
            eprintln!("   {}", window.describe(mode));
            reader_windows.push(window);
        }
    }
    if callgrind_out.is_some() {
        callgrind::start(run.procs.controller_pid()?)?;
    }
    let start = Sample::take(&run, client, &url, machine).await?;
    if args.readers.is_empty() {
        eprintln!("   measuring {:?}", args.measure);
        tokio::time::sleep(args.measure).await;
    }
    run.procs.check_alive()?;
    let end = Sample::take(&run, client, &url, machine).await?;
    let instructions = match &callgrind_out {
        Some(out) => Some(callgrind::stop(run.procs.controller_pid()?, out)?),
        None => None,
    };

    let mut soak = Vec::new();
    if let Some(length) = args.soak {
        eprintln!(
            "   soaking {} (a sample every {})",
            nodekeeper::duration::format(length),
            nodekeeper::duration::format(args.sample_every)
        );
        let soak_started = Instant::now();
        let mut previous = Sample::take(&run, client, &url, machine).await?;
        soak.push(previous.clone());
        while soak_started.elapsed() < length {
            tokio::time::sleep(args.sample_every).await;
            run.procs.check_alive()?;
            let sample = Sample::take(&run, client, &url, machine).await?;
            eprintln!("   {}", soak_line(&soak[0], &previous, &sample));
            previous = sample.clone();
            soak.push(sample);
        }
    }

    let mut bursts = Vec::new();
    if args.burst {
        for state in ["sick", "up"] {
            run.procs.check_alive()?;
            let burst = burst::status_burst(&run, client, &url, state).await?;
            eprintln!("   {}", burst.describe());
            bursts.push(burst);
            // Let the fleet settle back into its rhythm before the next burst.
            tokio::time::sleep(args.warmup).await;
        }
    }

    let storm = if args.reconnect_storm {
        run.procs.check_alive()?;
        let storm = storm::reconnect_storm(&mut run, client, machine).await?;
        eprintln!("   {}", storm.describe());
        Some(storm)
    } else {
        None
    };

    let stop = run.stop().await;
    eprintln!("   {stop}");
    Ok(Row {
        nodes,
        sims: run.procs.sims.len(),
        ready_after,
        start,
        end,
        soak,
        bursts,
        reader_windows,
        storm,
        certs_made: tls_files.map(|f| f.made),
        instructions,
        stop,
    })
}

/// Starts the sim processes (the first picks the port, the others reuse it),
/// waits for their nodes files, and merges them. Returns the port and the merged file.
async fn start_fleet(
    run: &mut Run,
    bin: &Path,
    nodes: usize,
    extra: &[String],
) -> Result<(u16, PathBuf)> {
    let mut port = 0;
    let mut entries = Vec::with_capacity(nodes);
    for (index, count) in split(nodes, MAX_NODES_PER_SIM).into_iter().enumerate() {
        let file = run.procs.dir.join(format!("nodes-{index}.json"));
        let args = sim_args(run.range(index)?, index, count, port, &file, extra);
        let sim = run.procs.start_sim(&format!("sim-{index}"), bin, &args)?;
        let (banner, mut list) = wait_for_sim(sim, &file, count).await?;
        if port != 0 && banner.port != port {
            bail!("{} listens on port {}, not {port}", sim.name, banner.port);
        }
        port = banner.port;
        run.sim_controls.push(banner.control);
        entries.append(&mut list);
    }
    let merged = run.procs.dir.join("nodes.json");
    fs::write(&merged, serde_json::to_vec(&entries)?)
        .with_context(|| format!("cannot write {}", merged.display()))?;
    Ok((port, merged))
}

/// The name of the first node in a nodes file.
fn first_node(file: &Path) -> Result<String> {
    read_node_list(file)?
        .first()
        .and_then(|n| n["name"].as_str().map(str::to_owned))
        .ok_or_else(|| anyhow!("{} names no node", file.display()))
}

/// `total` split into the fewest near-equal parts of at most `max`.
fn split(total: usize, max: usize) -> Vec<usize> {
    let parts = total.div_ceil(max);
    (0..parts)
        .map(|i| total / parts + usize::from(i < total % parts))
        .collect()
}

/// Sim process `index`'s node name prefix.
fn sim_prefix(index: usize) -> String {
    format!("sim-p{index}-")
}

/// Sim process `index`'s flags: `nodes` nodes from 127.`octet`.0.1 on.
fn sim_args(
    octet: u8,
    index: usize,
    nodes: usize,
    port: u16,
    nodes_file: &Path,
    extra: &[String],
) -> Vec<String> {
    let mut args = vec![
        "--log".to_string(),
        "warn".into(),
        "sim".into(),
        "--nodes".into(),
        nodes.to_string(),
        "--base-ip".into(),
        format!("127.{octet}.0.1"),
        "--port".into(),
        port.to_string(),
        "--control".into(),
        "127.0.0.1:0".into(),
        "--prefix".into(),
        sim_prefix(index),
        "--write-nodes-file".into(),
        nodes_file.to_string_lossy().into_owned(),
    ];
    args.extend_from_slice(extra);
    args
}

/// Waits for the sim's banner (printed after its nodes file is written);
/// returns what it says and the sim's nodes.
async fn wait_for_sim(
    sim: &mut Proc,
    file: &Path,
    nodes: usize,
) -> Result<(SimBanner, Vec<serde_json::Value>)> {
    let deadline = Instant::now() + SIM_START_TIMEOUT;
    loop {
        sim.check_alive()?;
        let banner = fs::read_to_string(&sim.stdout).unwrap_or_default();
        if let Some(banner) = SimBanner::parse(&banner) {
            let list = read_node_list(file)?;
            if list.len() != nodes {
                bail!(
                    "{} wrote {} nodes to {}, expected {nodes}",
                    sim.name,
                    list.len(),
                    file.display()
                );
            }
            return Ok((banner, list));
        }
        if Instant::now() > deadline {
            bail!(
                "{} did not write {} within {:?}{}",
                sim.name,
                file.display(),
                SIM_START_TIMEOUT,
                sim.log_tail(15)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// What a sim's banner tells: `... (port 40123); control http://127.0.0.1:40000; ...`.
struct SimBanner {
    port: u16,
    control: String,
}

impl SimBanner {
    fn parse(banner: &str) -> Option<SimBanner> {
        let rest = &banner[banner.find("(port ")? + "(port ".len()..];
        let port = rest[..rest.find(')')?].trim().parse().ok()?;
        let rest = &rest[rest.find("control ")? + "control ".len()..];
        let control = rest.split([';', ' ', '\n']).next()?.to_string();
        Some(SimBanner { port, control })
    }
}

fn read_node_list(file: &Path) -> Result<Vec<serde_json::Value>> {
    let bytes = fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    serde_json::from_slice(&bytes)
        .with_context(|| format!("{} is not a JSON array of nodes", file.display()))
}

/// The controller's flags, its store in `dir`.
fn controller_args(
    dir: &Path,
    nodes_file: &Path,
    listen: SocketAddr,
    grace: Duration,
    extra: &[String],
) -> Vec<String> {
    let mut args = vec![
        "run".to_string(),
        "--db".into(),
        dir.join("db").to_string_lossy().into_owned(),
        "--listen".into(),
        listen.to_string(),
        "--nodes-file".into(),
        nodes_file.to_string_lossy().into_owned(),
        "--kubelet-scheme".into(),
        "http".into(),
        "--node-monitor-grace-period".into(),
        nodekeeper::duration::format(grace),
        "--log".into(),
        "warn".into(),
    ];
    args.extend_from_slice(extra);
    args
}

async fn wait_all_ready(
    run: &mut Run,
    client: &reqwest::Client,
    url: &str,
    nodes: usize,
) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    loop {
        run.procs.check_alive()?;
        let last = match scrape(client, url).await {
            Ok(m) if m.ready == nodes as f64 => return Ok(()),
            Ok(m) => format!(
                "{} registered, {} Ready",
                m.registered.map_or("?".into(), |r| r.to_string()),
                m.ready
            ),
            Err(e) => format!("{e:#}"),
        };
        if Instant::now() > deadline {
            bail!(
                "not all {nodes} nodes Ready within {READY_TIMEOUT:?} (last: {last}){}",
                run.procs.controller_log_tail()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits for the floor's banner (`nodekeeper-floor serving http://ADDR for
/// N nodes`); returns its URL.
async fn wait_for_floor(run: &mut Run) -> Result<String> {
    let deadline = Instant::now() + CONTROLLER_START_TIMEOUT;
    loop {
        run.procs.check_alive()?;
        let floor = run
            .procs
            .controller
            .as_ref()
            .ok_or_else(|| anyhow!("no floor"))?;
        let banner = fs::read_to_string(&floor.stdout).unwrap_or_default();
        if let Some(url) = banner
            .split_whitespace()
            .find(|word| word.starts_with("http://"))
        {
            return Ok(url.to_string());
        }
        if Instant::now() > deadline {
            bail!(
                "the floor did not say where it serves within {CONTROLLER_START_TIMEOUT:?}{}",
                floor.log_tail(15)
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// With the floor: waits until the sims had as many Leases and status
/// updates answered as there are nodes (each node pushes both once in its
/// first interval).
async fn wait_all_answered(run: &mut Run, client: &reqwest::Client, nodes: usize) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let nodes = nodes as u64;
    loop {
        run.procs.check_alive()?;
        // Pushes made before the floor listened failed; they are retried.
        let pushes = sim_pushes(client, &run.sim_controls).await?;
        if pushes.leases >= nodes && pushes.statuses >= nodes {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "the floor answered {} Leases and {} status updates of {nodes} nodes within {READY_TIMEOUT:?} (last error: {})",
                pushes.leases,
                pushes.statuses,
                pushes.last_error.as_deref().unwrap_or("none")
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Waits until no event was stored for [`SETTLED_FOR`].
async fn wait_settled(run: &mut Run, client: &reqwest::Client, url: &str) -> Result<()> {
    let deadline = Instant::now() + READY_TIMEOUT;
    let mut last: Option<(f64, Instant)> = None;
    loop {
        run.procs.check_alive()?;
        let seq = scrape(client, url)
            .await?
            .store_seq
            .ok_or_else(|| anyhow!("/metrics has no nodekeeper_store_last_seq"))?;
        match last {
            Some((previous, since)) if previous == seq => {
                if since.elapsed() >= SETTLED_FOR {
                    return Ok(());
                }
            }
            _ => last = Some((seq, Instant::now())),
        }
        if Instant::now() > deadline {
            bail!(
                "the store kept changing for {READY_TIMEOUT:?} after every node was Ready{}",
                run.procs.controller_log_tail()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

// ---------------------------------------------------------------------------
// Measurements

/// What the controller's /metrics says that the benchmark needs.
#[derive(Debug, Clone, Copy, Default)]
struct Scrape {
    /// The newest durable event: the store still settles while it moves.
    store_seq: Option<f64>,
    ready: f64,
    registered: Option<f64>,
    probes: f64,
    sweep_sum: f64,
    sweep_count: f64,
    /// Heartbeats accepted through Lease renewals.
    lease_beats: f64,
    /// Heartbeats accepted through status updates.
    status_beats: f64,
    /// `nodekeeper_heartbeat_age_seconds` at the 0.5, 0.99 and 1 quantiles.
    heartbeat_age: [Option<f64>; 3],
    /// Condition transitions, summed over conditions and statuses.
    transitions: f64,
    /// Store flushes, when the controller reports them.
    flushes: Option<f64>,
}

async fn scrape(client: &reqwest::Client, url: &str) -> Result<Scrape> {
    let response = client
        .get(format!("{url}/metrics"))
        .send()
        .await
        .with_context(|| format!("GET {url}/metrics"))?;
    let status = response.status();
    if !status.is_success() {
        bail!("GET {url}/metrics: {status}");
    }
    let text = response.text().await?;
    parse_metrics(&text)
}

fn parse_metrics(text: &str) -> Result<Scrape> {
    let samples: Vec<(&str, f64)> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let (key, value) = l.trim().rsplit_once(' ')?;
            Some((key.trim(), value.parse().ok()?))
        })
        .collect();
    let get = |key: &str| samples.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
    let need = |key: &str| {
        get(key).ok_or_else(|| anyhow!("/metrics has no {key} (or it is not a number)"))
    };
    Ok(Scrape {
        ready: need("nodekeeper_nodes{condition=\"Ready\",status=\"True\"}")?,
        registered: get("nodekeeper_registered_nodes"),
        probes: samples
            .iter()
            .filter(|(k, _)| k.starts_with("nodekeeper_probes_total{"))
            .map(|(_, v)| v)
            .sum(),
        sweep_sum: need("nodekeeper_sweep_duration_seconds_sum")?,
        sweep_count: need("nodekeeper_sweep_duration_seconds_count")?,
        // Counters appear with the first heartbeat.
        lease_beats: get("nodekeeper_heartbeats_total{via=\"Lease\"}").unwrap_or(0.0),
        status_beats: get("nodekeeper_heartbeats_total{via=\"Status\"}").unwrap_or(0.0),
        heartbeat_age: ["0.5", "0.99", "1"].map(|q| {
            get(&format!(
                "nodekeeper_heartbeat_age_seconds{{quantile=\"{q}\"}}"
            ))
        }),
        transitions: samples
            .iter()
            .filter(|(k, _)| k.starts_with("nodekeeper_condition_transitions_total{"))
            .map(|(_, v)| v)
            .sum(),
        flushes: get("nodekeeper_store_flushes_total"),
        store_seq: get("nodekeeper_store_last_seq"),
    })
}

/// What the pushing sims counted, summed over them.
#[derive(Debug, Clone, Default)]
struct SimPushes {
    nodes: u64,
    sent: u64,
    failed: u64,
    refused: u64,
    /// Lease creations and renewals accepted.
    leases: u64,
    /// Status updates accepted.
    statuses: u64,
    connections: u64,
    /// How the last change of state asked of a sim was answered (of the
    /// last sim asked, when summing several).
    last_change: Option<ChangeTiming>,
    last_error: Option<String>,
    /// Answered requests' latency, counts by bucket of `nodekeeper_sim::latency`.
    latency: Vec<u64>,
}

/// One sim's `/stats` (its control endpoint's counters), as JSON.
async fn sim_stats(client: &reqwest::Client, control: &str) -> Result<serde_json::Value> {
    let url = format!("{control}/stats");
    client
        .get(&url)
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("GET {url}"))?
        .json()
        .await
        .with_context(|| format!("GET {url}: not JSON"))
}

/// Asks every sim's control endpoint for its push counters.
async fn sim_pushes(client: &reqwest::Client, controls: &[String]) -> Result<SimPushes> {
    let mut total = SimPushes::default();
    for control in controls {
        let stats = sim_stats(client, control).await?;
        let pushes = &stats["pushes"];
        let count = |key: &str| pushes[key].as_u64().unwrap_or(0);
        total.nodes += stats["nodes"].as_u64().unwrap_or(0);
        total.sent += count("sent");
        total.failed += count("failed");
        total.refused += count("refused");
        total.leases += count("leases");
        total.statuses += count("statuses");
        total.connections += count("connections");
        if let Ok(Some(change)) = serde_json::from_value(pushes["lastChange"].clone()) {
            total.last_change = Some(change);
        }
        if let Some(e) = pushes["lastError"].as_str() {
            total.last_error = Some(e.to_string());
        }
        let latency: Vec<u64> =
            serde_json::from_value(pushes["latency"].clone()).unwrap_or_default();
        if total.latency.len() < latency.len() {
            total.latency.resize(latency.len(), 0);
        }
        for (sum, n) in total.latency.iter_mut().zip(latency) {
            *sum += n;
        }
    }
    Ok(total)
}

/// Process and store figures at one instant.
#[derive(Clone)]
struct Sample {
    at: Instant,
    controller_cpu: f64,
    sim_cpu: f64,
    rss_kib: u64,
    hwm_kib: u64,
    /// Of the RSS: anonymous memory, and file-backed pages (the binary's code).
    anon_kib: u64,
    file_kib: u64,
    /// The store's files; `None` with the floor, which has none.
    store_bytes: Option<u64>,
    /// Bytes the controller had written to storage.
    written: u64,
    /// Context switches of the controller's threads: voluntary, involuntary.
    switches: (u64, u64),
    /// The controller's /metrics; `None` with the floor, which has none.
    metrics: Option<Scrape>,
    /// Heartbeats accepted so far: the controller's count, or with the
    /// floor the sims' (Leases and status updates answered).
    heartbeats: f64,
    /// Push counters of the sims; empty unless they push.
    pushes: SimPushes,
}

impl Sample {
    async fn take(
        run: &Run,
        client: &reqwest::Client,
        url: &str,
        machine: &Machine,
    ) -> Result<Sample> {
        let metrics = if run.floor {
            None
        } else {
            Some(scrape(client, url).await?)
        };
        let pushes = if run.pushing {
            sim_pushes(client, &run.sim_controls).await?
        } else {
            SimPushes::default()
        };
        let heartbeats = match &metrics {
            Some(m) => m.lease_beats + m.status_beats,
            None => (pushes.leases + pushes.statuses) as f64,
        };
        let controller = run.procs.controller_pid()?;
        let mut sim_ticks = 0;
        for sim in &run.procs.sims {
            sim_ticks += cpu_ticks(sim.child.id())?;
        }
        let (rss_kib, hwm_kib) = memory_kib(controller)?;
        let (anon_kib, file_kib) = memory_kinds_kib(controller)?;
        Ok(Sample {
            at: Instant::now(),
            controller_cpu: cpu_ticks(controller)? as f64 / machine.ticks_per_second,
            sim_cpu: sim_ticks as f64 / machine.ticks_per_second,
            rss_kib,
            hwm_kib,
            anon_kib,
            file_kib,
            store_bytes: if run.floor {
                None
            } else {
                Some(dir_size(&run.procs.dir.join("db"))?)
            },
            written: written_bytes(controller)?,
            switches: context_switches(controller)?,
            metrics,
            heartbeats,
            pushes,
        })
    }
}

// ---------------------------------------------------------------------------
// Child processes

/// One size's processes and scratch directory; dropping it kills whatever
/// still runs and removes the directory, on success and on error alike.
struct Run {
    procs: Processes,
    /// Each sim's control endpoint, in the order of `procs.sims`.
    sim_controls: Vec<String>,
    /// Whether the sims push (and count their pushes).
    pushing: bool,
    /// Whether the floor serves in the controller's place.
    floor: bool,
    /// --ranges.
    ranges: Vec<u8>,
}

impl Run {
    fn new(nodes: usize, mode: Mode, ranges: &[u8]) -> Result<Run> {
        let dir =
            std::env::temp_dir().join(format!("nodekeeper-bench-{}-{nodes}", std::process::id()));
        Ok(Run {
            procs: Processes::in_fresh_dir(dir)?,
            sim_controls: Vec::new(),
            pushing: matches!(mode, Mode::Push { .. }),
            floor: false,
            ranges: ranges.to_vec(),
        })
    }

    /// The second octet of sim process `index`'s addresses.
    fn range(&self, index: usize) -> Result<u8> {
        match self.ranges.get(index) {
            Some(octet) if self.ranges.len() > index => Ok(*octet),
            _ if !self.ranges.is_empty() => {
                bail!(
                    "--ranges gives {} ranges; this fleet needs more",
                    self.ranges.len()
                )
            }
            _ => u8::try_from(10 + 10 * index)
                .ok()
                .filter(|o| *o < 255)
                .ok_or_else(|| anyhow!("too many sim processes for distinct 127.X.0.0/16 ranges")),
        }
    }

    /// Stops the controller gracefully, then the sims.
    async fn stop(&mut self) -> String {
        let report = self.procs.stop_controller(STOP_TIMEOUT, 15).await;
        self.procs.kill_sims();
        report.unwrap_or_default()
    }
}

// ---------------------------------------------------------------------------
// The report

fn report(args: &Args, mode: Mode, bins: &Bins, machine: &Machine, rows: &[Row]) -> String {
    let mut out = String::new();
    let title = match mode {
        Mode::Probe { .. } => "nodekeeper scale benchmark",
        Mode::Push { .. } if bins.floor.is_some() => {
            "nodekeeper scale benchmark: pushed heartbeats, the floor in the controller's place"
        }
        Mode::Push { .. } => "nodekeeper scale benchmark: pushed heartbeats",
    };
    write_preamble(&mut out, title, &bins.controller, machine);
    if bins.sim != bins.controller {
        let _ = writeln!(out, "sims:     {}", bins.sim.display());
    }
    if let Some(floor) = &bins.floor {
        let _ = writeln!(
            out,
            "server:   {} in place of the controller: the least server of the sims' requests on its \
             HTTP stack (Leases echoed, status patches answered with a node rendered at start); \
             \"ctrl\" below is this floor, which has no Ready count, heartbeat ages or store",
            floor.display()
        );
    }
    let _ = writeln!(
        out,
        "machine:  {}, load {}",
        machine.facts(),
        load_average()
    );
    let how = match mode {
        Mode::Probe { period } => format!(
            "sync period {}, grace {}, http kubelets",
            nodekeeper::duration::format(period),
            nodekeeper::duration::format(args.grace)
        ),
        Mode::Push { interval } => format!(
            "--node-status-mode push, nodes file, grace {}, every node renews its Lease and patches its status every {} over a kept-alive connection of its own{}",
            nodekeeper::duration::format(args.grace),
            nodekeeper::duration::format(interval),
            match args.tls {
                Some(tls::TlsMode::ClientCerts) => ", https with --client-ca-file: each node authenticates with its own client certificate (ECDSA P-256), a full TLS handshake per connection",
                None => ", plain http",
            }
        ),
    };
    let _ = writeln!(
        out,
        "settings: {how}, warmup {}, window {}, ≤{MAX_NODES_PER_SIM} nodes per sim process, store under {}",
        nodekeeper::duration::format(args.warmup),
        nodekeeper::duration::format(args.measure),
        scratch_filesystem(),
    );
    let _ = writeln!(out);
    let header: &[&str] = match mode {
        Mode::Probe { .. } => &[
            "nodes",
            "sims",
            "all Ready after (s)",
            "sweeps",
            "sweep mean (ms)",
            "probes/s",
            "ctrl CPU-s /10k probes",
            "ctrl CPU % of 1 core",
            "RSS MiB (peak)",
            "anon / file MiB",
            "store growth (B)",
            "disk written B/min",
            "sim CPU-s /10k probes",
        ],
        Mode::Push { .. } => &[
            "nodes",
            "sims",
            "all Ready after (s)",
            "heartbeats/s",
            "refused",
            "no answer",
            "connections opened",
            "ctrl CPU-s /10k heartbeats",
            "ctrl CPU % of 1 core",
            "RSS MiB (peak)",
            "anon / file MiB",
            "store growth (B)",
            "disk written B/min",
            "heartbeat age p50/p99/max (s)",
            "sim CPU-s /10k heartbeats",
            "ctrl context switches /heartbeat (voluntary + involuntary)",
        ],
    };
    if !args.controller_args.is_empty() {
        let _ = writeln!(out, "controller flags: {}", args.controller_args.join(" "));
    }
    // With --readers each load has a window and a table of its own.
    if args.readers.is_empty() {
        table_header(&mut out, header, Align::Right);
        for row in rows {
            let cells = match mode {
                Mode::Probe { .. } => probe_cells(row),
                Mode::Push { .. } => push_cells(row),
            };
            table_row(&mut out, &cells);
        }
    }
    if rows.is_empty() {
        let _ = writeln!(out, "\n(no size completed)");
    }
    for row in rows.iter().filter(|r| !r.soak.is_empty()) {
        out.push_str(&soak_section(row));
    }
    for row in rows.iter().filter(|r| !r.reader_windows.is_empty()) {
        out.push_str(&readers::section(row.nodes, mode, &row.reader_windows));
    }
    for row in rows.iter().filter(|r| !r.bursts.is_empty()) {
        out.push_str(&burst::section(row.nodes, &row.bursts));
    }
    let storms: Vec<(usize, storm::Storm)> = rows
        .iter()
        .filter_map(|r| Some((r.nodes, r.storm.clone()?)))
        .collect();
    if !storms.is_empty() {
        let how = match args.tls {
            Some(tls::TlsMode::ClientCerts) => "https, client certificates",
            None => "plain http",
        };
        out.push_str(&storm::section(how, &storms));
    }
    let notes: Vec<String> = rows.iter().flat_map(|r| row_notes(r, mode)).collect();
    if !notes.is_empty() {
        let _ = writeln!(out);
        for note in notes {
            let _ = writeln!(out, "- {note}");
        }
    }
    out
}

const MIB: f64 = 1024.0 * 1024.0;

/// One soak sample as a line: since the soak began, and over the last interval.
fn soak_line(first: &Sample, previous: &Sample, sample: &Sample) -> String {
    let minutes = sample.at.duration_since(first.at).as_secs_f64() / 60.0;
    let secs = sample.at.duration_since(previous.at).as_secs_f64();
    let beats = sample.heartbeats - previous.heartbeats;
    let cpu = sample.controller_cpu - previous.controller_cpu;
    format!(
        "{minutes:6.1} min | {:6.0} heartbeats/s | refused {:4} | no answer {:4} | {} CPU-s/10k | RSS {:6.1} MiB (anon {:6.1}) | store {:7.2} MiB | written {:7.3} MiB/min | Ready {}",
        beats / secs,
        sample.pushes.refused - previous.pushes.refused,
        (sample.pushes.failed - previous.pushes.failed)
            .saturating_sub(sample.pushes.refused - previous.pushes.refused),
        per_10k(cpu, beats),
        sample.rss_kib as f64 / 1024.0,
        sample.anon_kib as f64 / 1024.0,
        sample.store_bytes.unwrap_or(0) as f64 / MIB,
        (sample.written - previous.written) as f64 / MIB / secs * 60.0,
        sample.metrics.map_or("n/a".into(), |m| m.ready.to_string())
    )
}

/// The soak's samples and its verdict: the trend of store size and RSS over
/// its last 30 minutes (or its second half, when shorter).
fn soak_section(row: &Row) -> String {
    let mut out = String::new();
    let first = &row.soak[0];
    let _ = writeln!(out, "\n### {} nodes: soak, nothing changing\n", row.nodes);
    let _ = writeln!(out, "```");
    for pair in row.soak.windows(2) {
        let _ = writeln!(out, "{}", soak_line(first, &pair[0], &pair[1]));
    }
    let _ = writeln!(out, "```");
    let last = row.soak.last().expect("a soak has samples");
    let total = last.at.duration_since(first.at);
    let tail_from = if total > SOAK_TAIL * 2 {
        total - SOAK_TAIL
    } else {
        total / 2
    };
    let tail: Vec<&Sample> = row
        .soak
        .iter()
        .filter(|s| s.at.duration_since(first.at) >= tail_from)
        .collect();
    let minutes: Vec<f64> = tail
        .iter()
        .map(|s| s.at.duration_since(first.at).as_secs_f64() / 60.0)
        .collect();
    let span = minutes.last().unwrap_or(&0.0) - minutes.first().unwrap_or(&0.0);
    let trend = |what: &str, ys: Vec<f64>| -> String {
        let (lo, hi) = ys
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), y| (lo.min(*y), hi.max(*y)));
        match slope(&minutes, &ys) {
            Some(s) => format!(
                "{what}: {:+.3} MiB/min over the last {span:.0} min ({:+.1} MiB in all; samples between {lo:.1} and {hi:.1} MiB)",
                s,
                s * span
            ),
            None => format!("{what}: too few samples for a trend"),
        }
    };
    let written: f64 =
        (tail.last().map_or(0, |s| s.written) - tail.first().map_or(0, |s| s.written)) as f64 / MIB;
    let _ = writeln!(
        out,
        "\n- {}\n- {}\n- {}\n- disk written over the last {span:.0} min: {:.2} MiB ({:.3} MiB/min)",
        trend(
            "store files",
            tail.iter()
                .map(|s| s.store_bytes.unwrap_or(0) as f64 / MIB)
                .collect()
        ),
        trend(
            "controller RSS",
            tail.iter().map(|s| s.rss_kib as f64 / 1024.0).collect()
        ),
        trend(
            "controller anonymous memory",
            tail.iter().map(|s| s.anon_kib as f64 / 1024.0).collect()
        ),
        written,
        if span > 0.0 { written / span } else { 0.0 }
    );
    out
}

/// The differences between a row's two samples.
struct Window {
    secs: f64,
    ctrl_cpu: f64,
    sim_cpu: f64,
    /// `None` with the floor, which has no store.
    store_growth: Option<i64>,
    written: u64,
}

impl Window {
    fn of(row: &Row) -> Window {
        let (s, e) = (&row.start, &row.end);
        Window {
            secs: e.at.duration_since(s.at).as_secs_f64(),
            ctrl_cpu: e.controller_cpu - s.controller_cpu,
            sim_cpu: e.sim_cpu - s.sim_cpu,
            store_growth: e
                .store_bytes
                .zip(s.store_bytes)
                .map(|(e, s)| e as i64 - s as i64),
            written: e.written - s.written,
        }
    }

    /// The cells every mode shows after its rates: controller CPU, memory, store.
    fn cost_cells(&self, row: &Row, work: f64) -> Vec<String> {
        vec![
            per_10k(self.ctrl_cpu, work),
            format!("{:.1}", self.ctrl_cpu / self.secs * 100.0),
            format!(
                "{:.1} ({:.1})",
                row.end.rss_kib as f64 / 1024.0,
                row.end.hwm_kib as f64 / 1024.0
            ),
            format!(
                "{:.1} / {:.1}",
                row.end.anon_kib as f64 / 1024.0,
                row.end.file_kib as f64 / 1024.0
            ),
            self.store_growth.map_or("n/a".into(), |g| g.to_string()),
            format!("{:.0}", self.written as f64 / self.secs * 60.0),
        ]
    }
}

/// CPU-seconds per 10 000 units of work.
fn per_10k(cpu: f64, work: f64) -> String {
    if work > 0.0 {
        format!("{:.3}", cpu / work * 10_000.0)
    } else {
        "n/a".into()
    }
}

fn probe_cells(row: &Row) -> Vec<String> {
    // A probe run always has a controller to read.
    let (s, e) = (
        row.start.metrics.unwrap_or_default(),
        row.end.metrics.unwrap_or_default(),
    );
    let w = Window::of(row);
    let probes = e.probes - s.probes;
    let sweeps = e.sweep_count - s.sweep_count;
    let sweep_mean = if sweeps > 0.0 {
        format!("{:.1}", (e.sweep_sum - s.sweep_sum) / sweeps * 1000.0)
    } else {
        "n/a".into()
    };
    let mut cells = vec![
        row.nodes.to_string(),
        row.sims.to_string(),
        format!("{:.1}", row.ready_after.as_secs_f64()),
        format!("{sweeps:.0}"),
        sweep_mean,
        format!("{:.0}", probes / w.secs),
    ];
    cells.extend(w.cost_cells(row, probes));
    cells.push(per_10k(w.sim_cpu, probes));
    cells
}

fn push_cells(row: &Row) -> Vec<String> {
    let (sp, ep) = (&row.start.pushes, &row.end.pushes);
    let w = Window::of(row);
    let beats = row.end.heartbeats - row.start.heartbeats;
    let refused = ep.refused - sp.refused;
    let ages = row.end.metrics.map_or("n/a".into(), |m| {
        m.heartbeat_age
            .map(|q| q.map_or("?".into(), |v| format!("{v:.1}")))
            .join("/")
    });
    let switches = |i: fn(&(u64, u64)) -> u64| i(&row.end.switches) - i(&row.start.switches);
    let (voluntary, involuntary) = (switches(|s| s.0), switches(|s| s.1));
    let per_beat = |n: u64| {
        if beats > 0.0 {
            format!("{:.2}", n as f64 / beats)
        } else {
            "n/a".into()
        }
    };
    let ready_after = if row.end.metrics.is_some() {
        format!("{:.1}", row.ready_after.as_secs_f64())
    } else {
        "n/a".into()
    };
    let mut cells = vec![
        row.nodes.to_string(),
        row.sims.to_string(),
        ready_after,
        format!("{:.0}", beats / w.secs),
        refused.to_string(),
        (ep.failed - sp.failed).saturating_sub(refused).to_string(),
        (ep.connections - sp.connections).to_string(),
    ];
    let mut costs = w.cost_cells(row, beats);
    costs.insert(costs.len(), ages);
    cells.extend(costs);
    cells.push(per_10k(w.sim_cpu, beats));
    cells.push(format!(
        "{} ({} + {})",
        per_beat(voluntary + involuntary),
        per_beat(voluntary),
        per_beat(involuntary)
    ));
    cells
}

/// Anything about a row a reader should not miss.
fn row_notes(row: &Row, mode: Mode) -> Vec<String> {
    let mut notes = Vec::new();
    match row.end.metrics {
        Some(m) if m.ready != row.nodes as f64 => notes.push(format!(
            "{} nodes: only {} Ready at the end of the window",
            row.nodes, m.ready
        )),
        Some(_) => {}
        None => notes.push(format!(
            "{} nodes: the floor served; heartbeats are the Leases and status updates the sims had \
             answered, \"all Ready after\" is until every node's first ones were ({:.1} s)",
            row.nodes,
            row.ready_after.as_secs_f64()
        )),
    }
    if let Some(instructions) = row.instructions {
        let (count, what) = match mode {
            Mode::Push { .. } => (row.end.heartbeats - row.start.heartbeats, "heartbeat"),
            // A probe run always has a controller to read.
            Mode::Probe { .. } => (
                row.end.metrics.unwrap_or_default().probes
                    - row.start.metrics.unwrap_or_default().probes,
                "probe",
            ),
        };
        let per = if count > 0.0 {
            format!("{:.0}", instructions as f64 / count)
        } else {
            "n/a".into()
        };
        notes.push(format!(
            "{} nodes: callgrind counted {instructions} controller instructions in the window, {per} per {what} ({count:.0} {what}s); the CPU figures above are under valgrind",
            row.nodes
        ));
    }
    if let Mode::Push { .. } = mode {
        let (s, e) = (&row.start.pushes, &row.end.pushes);
        let failed = e.failed - s.failed;
        let mut note = format!(
            "{} nodes: the sims sent {} pushes in the window, {failed} failed ({} refused); {} connections opened since the start",
            row.nodes,
            e.sent - s.sent,
            e.refused - s.refused,
            e.connections
        );
        if failed > 0 {
            let _ = write!(note, " (last: {})", e.last_error.as_deref().unwrap_or("?"));
        }
        notes.push(note);
    }
    if let Some((count, took)) = row.certs_made {
        notes.push(format!(
            "{} nodes: {count} client certificates (ECDSA P-256 keys, signed, one file each) made in {:.2} s before the start",
            row.nodes,
            took.as_secs_f64()
        ));
    }
    if let Some(storm) = &row.storm {
        notes.push(format!("{} nodes: {}", row.nodes, storm.describe()));
    }
    notes.push(format!("{} nodes: {}", row.nodes, row.stop));
    notes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_fleets_evenly() {
        assert_eq!(split(1000, 5000), vec![1000]);
        assert_eq!(split(10_000, 5000), vec![5000, 5000]);
        assert_eq!(split(10_001, 5000), vec![3334, 3334, 3333]);
    }

    #[test]
    fn reads_the_sim_banner() {
        let banner = "5000 simulated kubelets on 127.10.0.1:41234 .. 127.10.19.137:41234 (port 41234); control http://127.0.0.1:40000; Ctrl-C stops\n";
        let parsed = SimBanner::parse(banner).unwrap();
        assert_eq!(parsed.port, 41234);
        assert_eq!(parsed.control, "http://127.0.0.1:40000");
        let pushing = "2 simulated kubelets on 127.10.0.1:1 .. 127.10.0.2:1 (port 1); control http://127.0.0.1:2; pushing to http://127.0.0.1:3; Ctrl-C stops\n";
        assert_eq!(
            SimBanner::parse(pushing).unwrap().control,
            "http://127.0.0.1:2"
        );
        assert!(SimBanner::parse("starting").is_none());
    }

    #[test]
    fn reads_metrics() {
        let text = "# TYPE nodekeeper_nodes gauge\n\
            nodekeeper_nodes{condition=\"Ready\",status=\"True\"} 3\n\
            nodekeeper_probes_total{result=\"Healthy\"} 10\n\
            nodekeeper_probes_total{result=\"NoAnswer\"} 2\n\
            nodekeeper_sweep_duration_seconds_sum 0.5\n\
            nodekeeper_sweep_duration_seconds_count 4\n\
            nodekeeper_heartbeats_total{via=\"Lease\"} 7\n\
            nodekeeper_heartbeat_age_seconds{quantile=\"0.99\"} 9.5\n\
            # EOF\n";
        let m = parse_metrics(text).unwrap();
        assert_eq!((m.ready, m.probes, m.sweep_count), (3.0, 12.0, 4.0));
        assert_eq!((m.lease_beats, m.status_beats), (7.0, 0.0));
        assert_eq!(m.heartbeat_age, [None, Some(9.5), None]);
        assert!(parse_metrics("# EOF\n").is_err());
    }
}
