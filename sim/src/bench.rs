//! What the benchmarks (`nodekeeper-bench`, its `--history` mode and
//! `nodekeeper-mirror-bench`) share: the nodekeeper binary they start, the
//! host's facts and the opening lines of a report, Markdown tables, a
//! process's CPU time and memory from /proc, and the child processes they
//! start and stop.
// Benchmarks measure real time and read /proc and their reports synchronously.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};

/// `--bin`: the nodekeeper binary a benchmark starts.
#[derive(Debug, clap::Args)]
pub struct BinArg {
    /// The nodekeeper binary (default: the one next to this executable).
    #[arg(long)]
    pub bin: Option<PathBuf>,
}

impl BinArg {
    /// The binary given, or the one next to this executable; it must exist.
    pub fn resolve(&self) -> Result<PathBuf> {
        nodekeeper_bin(self.bin.as_deref())
    }
}

/// `given`, or the `nodekeeper` next to this executable; it must be a file.
pub fn nodekeeper_bin(given: Option<&Path>) -> Result<PathBuf> {
    let bin = match given {
        Some(bin) => bin.to_path_buf(),
        None => std::env::current_exe()
            .context("cannot find this executable's path")?
            .with_file_name("nodekeeper"),
    };
    if !bin.is_file() {
        bail!(
            "no nodekeeper binary at {} (build it with `cargo build --release --bins`, or give --bin)",
            bin.display()
        );
    }
    Ok(bin)
}

/// Host facts for the report and for reading /proc.
pub struct Machine {
    pub cores: String,
    pub kernel: String,
    pub ticks_per_second: f64,
    pub ticks_note: &'static str,
    pub version: String,
}

impl Machine {
    pub fn probe(bin: &Path) -> Machine {
        let ticks = command_output("getconf", &["CLK_TCK"]).and_then(|t| t.parse::<f64>().ok());
        Machine {
            cores: command_output("nproc", &[]).unwrap_or_else(|| "?".into()),
            kernel: command_output("uname", &["-r"]).unwrap_or_else(|| "?".into()),
            ticks_per_second: ticks.unwrap_or(100.0),
            ticks_note: if ticks.is_some() {
                "getconf CLK_TCK"
            } else {
                "ASSUMED: getconf CLK_TCK failed"
            },
            version: command_output(&bin.to_string_lossy(), &["--version"])
                .unwrap_or_else(|| "?".into()),
        }
    }
}

impl Machine {
    /// The report's machine facts: `N cores (nproc), kernel K (uname -r), T clock ticks/s (how)`.
    pub fn facts(&self) -> String {
        format!(
            "{} cores (nproc), kernel {} (uname -r), {} clock ticks/s ({})",
            self.cores, self.kernel, self.ticks_per_second, self.ticks_note
        )
    }
}

/// A report's opening lines: its title, the command line, and the binary measured.
pub fn write_preamble(out: &mut String, title: &str, bin: &Path, machine: &Machine) {
    let _ = writeln!(out, "## {title}\n");
    let _ = writeln!(out, "command:  {}", command_line());
    let _ = writeln!(out, "binary:   {} ({})", bin.display(), machine.version);
}

/// Where the benchmarks' stores go, and its file system: `/tmp (tmpfs)`.
pub fn scratch_filesystem() -> String {
    let tmp = std::env::temp_dir();
    format!(
        "{} ({})",
        tmp.display(),
        command_output("stat", &["-f", "-c", "%T", &tmp.to_string_lossy()])
            .unwrap_or_else(|| "?".into())
    )
}

/// The 1, 5 and 15 minute load averages from /proc/loadavg.
pub fn load_average() -> String {
    fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "?".into())
}

/// How a Markdown table's columns are aligned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Align {
    /// Every column right-aligned (all figures).
    Right,
    /// The first column left-aligned (a label), the others right.
    FirstLeft,
}

/// A Markdown table's header and alignment rows.
pub fn table_header(out: &mut String, header: &[&str], align: Align) {
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let marks: String = (0..header.len())
        .map(|i| {
            if i == 0 && align == Align::FirstLeft {
                "---|"
            } else {
                "---:|"
            }
        })
        .collect();
    let _ = writeln!(out, "|{marks}");
}

/// A Markdown table's row.
pub fn table_row(out: &mut String, cells: &[String]) {
    let _ = writeln!(out, "| {} |", cells.join(" | "));
}

/// A process's CPU time and resident memory over a measurement: CPU seconds
/// since [`ProcessMeter::start`], and the highest RSS any [`ProcessMeter::sample`] saw.
pub struct ProcessMeter {
    pub pid: u32,
    ticks_per_second: f64,
    start_ticks: u64,
    rss_peak_kib: u64,
}

impl ProcessMeter {
    /// Starts counting `pid`'s CPU time now; its RSS now is the first sample.
    pub fn start(pid: u32, machine: &Machine) -> Result<ProcessMeter> {
        Ok(ProcessMeter {
            pid,
            ticks_per_second: machine.ticks_per_second,
            start_ticks: cpu_ticks(pid)?,
            rss_peak_kib: memory_kib(pid)?.0,
        })
    }

    /// Reads the RSS (KiB) and keeps the peak.
    pub fn sample(&mut self) -> Result<u64> {
        let (rss, _) = memory_kib(self.pid)?;
        self.rss_peak_kib = self.rss_peak_kib.max(rss);
        Ok(rss)
    }

    /// CPU seconds (user + system) used since the start.
    pub fn cpu_seconds(&self) -> Result<f64> {
        Ok((cpu_ticks(self.pid)? - self.start_ticks) as f64 / self.ticks_per_second)
    }

    /// The highest RSS sampled, in KiB.
    pub fn rss_peak_kib(&self) -> u64 {
        self.rss_peak_kib
    }
}

/// A benchmark run's scratch directory and the processes it started there:
/// a controller and `nodekeeper sim` processes. Dropping it kills whatever
/// still runs and removes the directory, on success and on error alike.
pub struct Processes {
    pub dir: PathBuf,
    pub controller: Option<Proc>,
    pub sims: Vec<Proc>,
}

impl Processes {
    /// No process yet, in `dir` emptied (or made) for the run.
    pub fn in_fresh_dir(dir: PathBuf) -> Result<Processes> {
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Processes {
            dir,
            controller: None,
            sims: Vec::new(),
        })
    }

    /// Starts the controller, `bin ARGS`, its output in the directory.
    pub fn start_controller(&mut self, bin: &Path, args: &[String]) -> Result<()> {
        self.start_server("controller", bin, args)
    }

    /// Starts another server in the controller's place (measured as it is),
    /// `bin ARGS` named `name`, its output in the directory.
    pub fn start_server(&mut self, name: &str, bin: &Path, args: &[String]) -> Result<()> {
        self.controller = Some(Proc::spawn(&self.dir, name, bin, args)?);
        Ok(())
    }

    /// Starts a sim process, `bin ARGS` named `name`, its output in the directory.
    pub fn start_sim(&mut self, name: &str, bin: &Path, args: &[String]) -> Result<&mut Proc> {
        let sim = Proc::spawn(&self.dir, name, bin, args)?;
        self.sims.push(sim);
        Ok(self.sims.last_mut().expect("just pushed"))
    }

    /// The controller's process id.
    pub fn controller_pid(&self) -> Result<u32> {
        self.controller
            .as_ref()
            .map(|c| c.child.id())
            .ok_or_else(|| anyhow!("no controller"))
    }

    /// Fails, saying which and how, when a process has exited.
    pub fn check_alive(&mut self) -> Result<()> {
        if let Some(c) = &mut self.controller {
            c.check_alive()?;
        }
        self.sims.iter_mut().try_for_each(Proc::check_alive)
    }

    /// The last lines the controller logged, for an error message.
    pub fn controller_log_tail(&self) -> String {
        self.controller
            .as_ref()
            .map(|c| c.log_tail(15))
            .unwrap_or_default()
    }

    /// Waits up to `timeout` for the controller to write its discovery file
    /// (in `db` under the directory), polling every `poll` and failing as
    /// soon as a process exits; returns the controller's API URL. Only `pid`
    /// and `url` are read, which every release writes, so a controller of an
    /// earlier release can be measured too.
    pub async fn wait_for_discovery(
        &mut self,
        timeout: Duration,
        poll: Duration,
    ) -> Result<String> {
        let pid = self.controller_pid()?;
        let file = nodekeeper::discovery::Discovery::path(&self.dir.join("db"));
        let deadline = Instant::now() + timeout;
        loop {
            self.check_alive()?;
            if let Ok(bytes) = fs::read(&file) {
                let doc: serde_json::Value = serde_json::from_slice(&bytes)
                    .with_context(|| format!("{} is not JSON", file.display()))?;
                let url = doc["url"]
                    .as_str()
                    .ok_or_else(|| anyhow!("{} has no \"url\"", file.display()))?;
                let found = doc["pid"].as_u64();
                if found != Some(u64::from(pid)) {
                    bail!("{} names pid {found:?}, not ours ({pid})", file.display());
                }
                return Ok(url.trim_end_matches('/').to_string());
            }
            if Instant::now() > deadline {
                bail!(
                    "the controller did not write {} within {timeout:?}{}",
                    file.display(),
                    self.controller_log_tail()
                );
            }
            tokio::time::sleep(poll).await;
        }
    }

    /// Stops the controller with SIGTERM (SIGKILL if it does not exit within
    /// `timeout`) and says how it went, with the last `lines` lines of its
    /// stderr if it wrote any; `None` when there is no controller.
    pub async fn stop_controller(&mut self, timeout: Duration, lines: usize) -> Option<String> {
        let c = self.controller.as_mut()?;
        let mut report = c.terminate(timeout).await;
        let tail = c.log_tail(lines);
        if !tail.is_empty() {
            let _ = write!(report, " (controller stderr not empty{tail})");
        }
        Some(report)
    }

    /// Kills the sim processes that still run.
    pub fn kill_sims(&mut self) {
        self.sims.iter_mut().for_each(Proc::kill);
    }
}

impl Drop for Processes {
    fn drop(&mut self) {
        if let Some(c) = &mut self.controller {
            c.kill();
        }
        self.kill_sims();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

/// A command's trimmed standard output, if it ran and succeeded.
pub fn command_output(program: &str, args: &[&str]) -> Option<String> {
    let out = Command::new(program).args(args).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// utime + stime of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/stat");
    let stat = fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    // The command name may hold spaces and parentheses; fields resume after the last ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .ok_or_else(|| anyhow!("{path}: unexpected format"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    let field = |i: usize| -> Result<u64> {
        fields
            .get(i)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| anyhow!("{path}: no number in field {}", i + 3))
    };
    Ok(field(11)? + field(12)?)
}

/// VmRSS and VmHWM of a process, in KiB.
pub fn memory_kib(pid: u32) -> Result<(u64, u64)> {
    let path = format!("/proc/{pid}/status");
    let status = fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let field = |name: &str| -> Result<u64> {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| anyhow!("{path}: no {name}"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// Context switches of every thread of a process so far, voluntary (it
/// waited: for a socket, a lock, work) and involuntary (preempted), from
/// /proc/PID/task/*/status. Threads that have exited are no longer counted.
pub fn context_switches(pid: u32) -> Result<(u64, u64)> {
    let dir = format!("/proc/{pid}/task");
    let mut total = (0, 0);
    for task in fs::read_dir(&dir).with_context(|| format!("cannot list {dir}"))? {
        let Ok(task) = task else { continue };
        // A thread that ended meanwhile has no status any more.
        let Ok(status) = fs::read_to_string(task.path().join("status")) else {
            continue;
        };
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        };
        total.0 += field("voluntary_ctxt_switches:");
        total.1 += field("nonvoluntary_ctxt_switches:");
    }
    Ok(total)
}

/// Bytes a process caused to be written to storage (`write_bytes` of
/// /proc/PID/io): what reached the disk, not what went to sockets.
pub fn written_bytes(pid: u32) -> Result<u64> {
    let path = format!("/proc/{pid}/io");
    let io = fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    io.lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| anyhow!("{path}: no write_bytes"))
}

/// A process's resident memory by kind, in KiB, from /proc/PID/smaps_rollup:
/// anonymous (heap, stacks, caches) and file-backed (mostly the binary's own
/// code, shared with every other process running it).
pub fn memory_kinds_kib(pid: u32) -> Result<(u64, u64)> {
    let path = format!("/proc/{pid}/smaps_rollup");
    let text = fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    let field = |name: &str| -> Result<u64> {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .ok_or_else(|| anyhow!("{path}: no {name}"))
    };
    let anon = field("Anonymous:")?;
    Ok((anon, field("Rss:")?.saturating_sub(anon)))
}

/// The least-squares slope of `ys` over `xs` (units of y per unit of x);
/// `None` with fewer than two distinct x.
pub fn slope(xs: &[f64], ys: &[f64]) -> Option<f64> {
    let n = xs.len().min(ys.len());
    if n < 2 {
        return None;
    }
    let mx = xs[..n].iter().sum::<f64>() / n as f64;
    let my = ys[..n].iter().sum::<f64>() / n as f64;
    let sxx: f64 = xs[..n].iter().map(|x| (x - mx) * (x - mx)).sum();
    if sxx == 0.0 {
        return None;
    }
    let sxy: f64 = xs[..n]
        .iter()
        .zip(&ys[..n])
        .map(|(x, y)| (x - mx) * (y - my))
        .sum();
    Some(sxy / sxx)
}

/// The bytes of every file under `dir`. Files vanishing mid-walk are skipped.
pub fn dir_size(dir: &Path) -> Result<u64> {
    let mut total = 0;
    let entries = fs::read_dir(dir).with_context(|| format!("cannot list {}", dir.display()))?;
    for entry in entries.flatten() {
        let Ok(meta) = entry.metadata() else { continue };
        if meta.is_dir() {
            total += dir_size(&entry.path()).unwrap_or(0);
        } else {
            total += meta.len();
        }
    }
    Ok(total)
}

/// This process's command line, quoted for a POSIX shell where needed.
pub fn command_line() -> String {
    std::env::args()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=,:@".contains(c))
            {
                a
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// A duration flag, as nodekeeper spells them (`500ms`, `10s`, `1h30m`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    nodekeeper::model::duration::parse(s)
}

/// A child process with its output files.
pub struct Proc {
    pub name: String,
    pub child: Child,
    pub stdout: PathBuf,
    pub stderr: PathBuf,
}

/// A benchmark stopped by a signal it cannot catch (SIGKILL, or SIGTERM sent
/// to it alone) runs no destructor, and would leave its controller and
/// simulated fleet running, holding their addresses and the machine's
/// CPU. The kernel sends each child SIGTERM when the thread that started
/// it ends instead (`PR_SET_PDEATHSIG`): the benchmarks start their
/// processes on their main thread or a runtime worker, never on a blocking
/// pool's thread (which ends when idle), so that is when the benchmark ends.
fn end_with_this_thread(command: &mut Command) {
    use std::os::unix::process::CommandExt as _;
    let parent = rustix::process::getpid();
    // SAFETY: the closure runs in the forked child before exec and makes
    // only two system calls (prctl, getppid), both async-signal-safe; it
    // allocates nothing and takes no lock.
    unsafe {
        command.pre_exec(move || {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::TERM))?;
            // The parent may have ended between fork and prctl.
            if rustix::process::getppid() != Some(parent) {
                return Err(rustix::io::Errno::SRCH.into());
            }
            Ok(())
        })
    };
}

impl Proc {
    pub fn spawn(dir: &Path, name: &str, bin: &Path, args: &[String]) -> Result<Proc> {
        let stdout = dir.join(format!("{name}.out"));
        let stderr = dir.join(format!("{name}.log"));
        let open = |path: &Path| {
            fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))
        };
        let mut command = Command::new(bin);
        command
            .args(args)
            .stdin(Stdio::null())
            .stdout(open(&stdout)?)
            .stderr(open(&stderr)?);
        end_with_this_thread(&mut command);
        let child = command
            .spawn()
            .with_context(|| format!("cannot start {} ({name})", bin.display()))?;
        Ok(Proc {
            name: name.into(),
            child,
            stdout,
            stderr,
        })
    }

    pub fn check_alive(&mut self) -> Result<()> {
        match self
            .child
            .try_wait()
            .with_context(|| format!("cannot check on {}", self.name))?
        {
            None => Ok(()),
            Some(status) => bail!("{} exited early ({status}){}", self.name, self.log_tail(15)),
        }
    }

    /// The last `n` lines of the process's stderr, for messages.
    pub fn log_tail(&self, n: usize) -> String {
        let text = fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        if lines.is_empty() {
            return String::new();
        }
        let tail = lines[lines.len().saturating_sub(n)..].join("\n   ");
        format!(
            "; last lines of its stderr ({} in all):\n   {tail}",
            lines.len()
        )
    }

    /// SIGTERM, then SIGKILL if it has not exited within `timeout`; says how it went.
    pub async fn terminate(&mut self, timeout: Duration) -> String {
        if let Ok(Some(status)) = self.child.try_wait() {
            return format!("{} had already exited ({status})", self.name);
        }
        let started = Instant::now();
        let sent = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        if !sent.is_ok_and(|s| s.success()) {
            self.kill();
            return format!("{}: SIGTERM could not be sent; killed", self.name);
        }
        while started.elapsed() < timeout {
            if let Ok(Some(status)) = self.child.try_wait() {
                return format!(
                    "{} stopped on SIGTERM in {:.2}s ({status})",
                    self.name,
                    started.elapsed().as_secs_f64()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.kill();
        format!(
            "{} did NOT stop within {timeout:?} of SIGTERM; killed",
            self.name
        )
    }

    pub fn kill(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt as _;
    use std::sync::mpsc;

    /// A benchmark killed outright must not leave its fleet behind: each
    /// process it started ends when the thread that started it does.
    #[test]
    fn a_process_ends_with_the_thread_that_started_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        let proc = std::thread::spawn(move || {
            Proc::spawn(&path, "sleeper", Path::new("sleep"), &["600".to_string()]).unwrap()
        })
        .join()
        .unwrap();
        let pid = proc.child.id();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut proc = proc;
            let _ = tx.send(proc.child.wait());
        });
        let Ok(status) = rx.recv_timeout(Duration::from_secs(60)) else {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!("the child outlived the thread that started it by a minute");
        };
        assert_eq!(status.unwrap().signal(), Some(15), "ended by SIGTERM");
    }
}
