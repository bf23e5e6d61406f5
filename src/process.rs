//! This process's CPU time, memory and open files, read from /proc, and the
//! standard `process_*` metrics built from them on each scrape.

use std::fmt;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;

/// When `main` began, for the start time where `/proc/stat` is hidden
/// (systemd's `ProcSubset=pid`).
static STARTED: std::sync::OnceLock<f64> = std::sync::OnceLock::new();

/// Notes the process start; `main` calls this first thing.
pub fn mark_started() {
    STARTED.get_or_init(|| crate::model::Micros::now().0 as f64 / 1e6);
}

/// Lowers the scheduling priority of the calling thread (alone, not the
/// whole process) by `niceness` steps, as `nice` does for a process: the
/// threads that serve readers yield the CPU to the controller's own.
pub fn lower_thread_priority(niceness: i32) -> std::io::Result<()> {
    let thread = rustix::thread::gettid();
    let current = rustix::process::getpriority_process(Some(thread))?;
    // Linux applies PRIO_PROCESS to the one thread whose id it is given.
    rustix::process::setpriority_process(Some(thread), (current + niceness).min(19))?;
    Ok(())
}

/// Clock ticks per second in `/proc/*/stat` (USER_HZ: 100 on every Linux
/// architecture this builds for).
const TICKS_PER_SECOND: f64 = 100.0;

/// One reading of a process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ProcessFigures {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
    /// Seconds since the Unix epoch.
    pub start_time: f64,
}

impl ProcessFigures {
    /// Reads this process from /proc; `None` where /proc is not there.
    // /proc is served from memory: these reads do not wait on a disk, so a
    // scrape may make them on the runtime.
    #[allow(clippy::disallowed_methods)]
    pub fn of_self() -> Option<ProcessFigures> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let status = std::fs::read_to_string("/proc/self/status").ok()?;
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
        let boot = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let open_fds = open_fds();
        let mut figures = parse(&stat, &status, &limits, &boot, open_fds)?;
        if figures.start_time == 0.0 {
            figures.start_time = STARTED.get().copied().unwrap_or(0.0);
        }
        Some(figures)
    }
}

/// Files this process has open. Linux 6.2 and later give the count as the
/// size of `/proc/self/fd`, one `stat` however many files are open; older
/// kernels give 0 there, and the directory is listed instead (10,000
/// entries at 10,000 connections, on every scrape).
#[allow(clippy::disallowed_methods)]
fn open_fds() -> u64 {
    match std::fs::metadata("/proc/self/fd") {
        Ok(m) if m.len() > 0 => m.len(),
        _ => std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count() as u64),
    }
}

/// The figures from the text of `/proc/PID/stat`, `status`, `limits` and
/// `/proc/stat`.
fn parse(
    stat: &str,
    status: &str,
    limits: &str,
    boot: &str,
    open_fds: u64,
) -> Option<ProcessFigures> {
    // The command name may hold spaces and parentheses; fields resume after the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // fields[0] is field 3 (state): utime, stime and starttime are fields 14, 15 and 22.
    let field = |n: usize| fields.get(n - 3)?.parse::<u64>().ok();
    let cpu_ticks = field(14)? + field(15)?;
    let started_ticks = field(22)?;
    let kib = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse::<u64>()
            .ok()
    };
    let boot_time = boot
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<u64>().ok());
    // "Max open files            20000                20000                files"
    let max_fds = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|soft| soft.parse::<u64>().ok())
        .unwrap_or(0);
    Some(ProcessFigures {
        cpu_seconds: cpu_ticks as f64 / TICKS_PER_SECOND,
        resident_bytes: kib("VmRSS:").unwrap_or(0) * 1024,
        virtual_bytes: kib("VmSize:").unwrap_or(0) * 1024,
        open_fds,
        max_fds,
        // 0 when the boot time is hidden: the caller falls back to `mark_started`.
        start_time: boot_time.map_or(0.0, |boot| {
            boot as f64 + started_ticks as f64 / TICKS_PER_SECOND
        }),
    })
}

/// The `process_*` metrics Prometheus client libraries export, read at each scrape.
#[derive(Debug, Default)]
pub struct ProcessCollector;

impl Collector for ProcessCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), fmt::Error> {
        let Some(p) = ProcessFigures::of_self() else {
            return Ok(());
        };
        let counter = ConstCounter::new(p.cpu_seconds);
        counter.encode(encoder.encode_descriptor(
            "process_cpu_seconds",
            "Total user and system CPU time spent in seconds",
            None,
            counter.metric_type(),
        )?)?;
        let gauges: [(&str, &str, f64); 5] = [
            (
                "process_resident_memory_bytes",
                "Resident memory size in bytes",
                p.resident_bytes as f64,
            ),
            (
                "process_virtual_memory_bytes",
                "Virtual memory size in bytes",
                p.virtual_bytes as f64,
            ),
            (
                "process_open_fds",
                "Number of open file descriptors",
                p.open_fds as f64,
            ),
            (
                "process_max_fds",
                "Maximum number of open file descriptors",
                p.max_fds as f64,
            ),
            (
                "process_start_time_seconds",
                "Start time of the process since the Unix epoch in seconds",
                p.start_time,
            ),
        ];
        for (name, help, value) in gauges {
            let gauge = ConstGauge::new(value);
            gauge.encode(encoder.encode_descriptor(name, help, None, gauge.metric_type())?)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_come_from_the_proc_files() {
        let stat = "4242 (node (keeper)) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 50 0 0 20 0 9 0 123400 104857600 3000 18446744073709551615";
        let status = "Name:\tnodekeeper\nVmSize:\t  102400 kB\nVmRSS:\t   12000 kB\n";
        let limits = "Limit                     Soft Limit           Hard Limit           Units\nMax open files            20000                20000                files\n";
        let boot = "cpu  1 2 3\nbtime 1764000000\n";
        let p = parse(stat, status, limits, boot, 17).unwrap();
        assert_eq!(p.cpu_seconds, 3.0);
        assert_eq!(p.resident_bytes, 12000 * 1024);
        assert_eq!(p.virtual_bytes, 102400 * 1024);
        assert_eq!(p.open_fds, 17);
        assert_eq!(p.max_fds, 20000);
        assert_eq!(p.start_time, 1764000000.0 + 1234.0);
        assert!(parse("garbage", status, limits, boot, 0).is_none());
        assert_eq!(parse(stat, status, limits, "", 0).unwrap().start_time, 0.0);
    }

    #[test]
    fn this_process_can_be_read() {
        let p = ProcessFigures::of_self().expect("/proc is mounted here");
        assert!(
            p.resident_bytes > 0 && p.open_fds > 0 && p.start_time > 0.0,
            "{p:?}"
        );
    }

    #[test]
    // A test's own files, opened and closed at once.
    #[allow(clippy::disallowed_methods)]
    fn open_files_are_counted() {
        let held: Vec<std::fs::File> = (0..200)
            .map(|_| std::fs::File::open("/proc/self/stat").expect("readable"))
            .collect();
        // Other tests open and close files meanwhile, so no exact count.
        assert!(open_fds() >= held.len() as u64, "{}", open_fds());
    }
}
