//! `--callgrind`: the controller run under valgrind's callgrind, which
//! counts the instructions it runs in the measure window.
//!
//! An instruction count, unlike CPU time, does not move with the machine's
//! load: two runs of one build agree to within a fraction of a percent on a
//! busy 2-core machine, so two builds (two opt-levels, two versions of a
//! heartbeat's path) compare at once. It is not time: a build that runs
//! fewer, slower instructions can still take longer, so a CPU figure in
//! turns stays the benchmark's answer. Under callgrind the controller runs
//! about fifty times slower; give it a small fleet (`--sizes 300`).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{anyhow, bail, Context, Result};

/// The file callgrind writes the window's counts to: `OUT.1`, its first
/// dump (collection is off until the window opens).
fn dump_file(out: &Path) -> PathBuf {
    let mut name = out.as_os_str().to_owned();
    name.push(".1");
    PathBuf::from(name)
}

/// `bin args` run under callgrind, collection off: the program and
/// arguments to start in its place.
pub fn wrap(bin: &Path, args: &[String], out: &Path) -> (PathBuf, Vec<String>) {
    let mut wrapped = vec![
        "--tool=callgrind".to_string(),
        "--instr-atstart=no".into(),
        format!("--callgrind-out-file={}", out.display()),
        bin.to_string_lossy().into_owned(),
    ];
    wrapped.extend_from_slice(args);
    (PathBuf::from("valgrind"), wrapped)
}

/// Checks that valgrind and callgrind_control can be run, before a fleet
/// is started.
pub fn check_installed() -> Result<()> {
    for tool in ["valgrind", "callgrind_control"] {
        Command::new(tool)
            .arg("--version")
            .output()
            .with_context(|| {
                format!("--callgrind needs {tool}: install valgrind (apt-get install valgrind)")
            })?;
    }
    Ok(())
}

fn control(pid: u32, args: &[&str]) -> Result<()> {
    let output = Command::new("callgrind_control")
        .args(args)
        .arg(pid.to_string())
        .output()
        .context("cannot run callgrind_control")?;
    if !output.status.success() {
        bail!(
            "callgrind_control {} {pid}: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(())
}

/// Opens the window: callgrind starts counting.
pub fn start(pid: u32) -> Result<()> {
    control(pid, &["--instr=on"])
}

/// Closes the window: dumps the counts, stops counting, and answers the
/// instructions run in between.
pub fn stop(pid: u32, out: &Path) -> Result<u64> {
    control(pid, &["--dump"])?;
    control(pid, &["--instr=off"])?;
    let file = dump_file(out);
    let text =
        fs::read_to_string(&file).with_context(|| format!("cannot read {}", file.display()))?;
    instructions(&text).ok_or_else(|| anyhow!("{} has no `totals:` line", file.display()))
}

/// The first event of a dump's `totals:` line: instructions (`Ir`).
fn instructions(dump: &str) -> Option<u64> {
    dump.lines()
        .find_map(|line| line.strip_prefix("totals:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_instructions_from_a_dump() {
        let dump = "version: 1\ncreator: callgrind-3.19.0\nevents: Ir\nsummary: 437067635\n\nfn=(1) main\n3 5\ntotals: 437067635\n";
        assert_eq!(instructions(dump), Some(437_067_635));
        assert_eq!(instructions("events: Ir\n"), None);
        assert_eq!(
            dump_file(Path::new("/tmp/x/callgrind.out")),
            Path::new("/tmp/x/callgrind.out.1")
        );
    }
}
