//! What `dist/` ships, checked against the binary it ships: the man pages
//! are the CLI's own, the systemd unit verifies and is hardened, and the
//! container recipe and Kubernetes manifest name flags, paths and ports the
//! binary has.

use std::path::{Path, PathBuf};
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_nodekeeper");

fn dist(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("dist")
        .join(path)
}

/// `NODEKEEPER_UPDATE_DIST=1 cargo test --test dist` rewrites the generated
/// files instead of failing on them.
fn updating() -> bool {
    std::env::var_os("NODEKEEPER_UPDATE_DIST").is_some_and(|v| v == "1")
}

/// The man pages rendered from the CLI definition: `nodekeeper.1` and one
/// page per subcommand (`nodekeeper-run.1`, `nodekeeper-db-status.1` …).
fn rendered_man_pages(dir: &Path) {
    clap_mangen::generate_to(nodekeeper::commands::completions::documented_command(), dir).unwrap();
}

fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .filter(|(name, _)| name.ends_with(".1"))
        .collect();
    files.sort();
    files
}

#[test]
fn the_committed_man_pages_are_the_cli_s() {
    let fresh = tempfile::tempdir().unwrap();
    rendered_man_pages(fresh.path());
    let committed = dist("man");
    if updating() {
        std::fs::create_dir_all(&committed).unwrap();
        for (name, _) in files_in(&committed) {
            std::fs::remove_file(committed.join(name)).unwrap();
        }
        rendered_man_pages(&committed);
    }
    let want = files_in(fresh.path());
    let have = if committed.is_dir() {
        files_in(&committed)
    } else {
        Vec::new()
    };
    let names = |files: &[(String, Vec<u8>)]| files.iter().map(|f| f.0.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(&have),
        names(&want),
        "dist/man does not have a page for every subcommand; regenerate it with `NODEKEEPER_UPDATE_DIST=1 cargo test --test dist`"
    );
    for ((name, have), (_, want)) in have.iter().zip(&want) {
        assert!(
            have == want,
            "dist/man/{name} is out of date with the CLI; regenerate it with `NODEKEEPER_UPDATE_DIST=1 cargo test --test dist`"
        );
    }
    let (_, top) = want
        .iter()
        .find(|(name, _)| name == "nodekeeper.1")
        .unwrap();
    let top = String::from_utf8_lossy(top);
    // The top page leads to the subcommands' pages.
    assert!(top.contains("nodekeeper\\-run(1)"), "{top}");
}

#[test]
fn completions_come_from_the_binary() {
    for shell in ["bash", "zsh", "fish"] {
        let out = Command::new(BIN)
            .args(["completions", shell])
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {out:?}");
        let script = String::from_utf8(out.stdout).unwrap();
        assert!(script.contains("node-sync-period"), "{shell}");
    }
    let out = Command::new(BIN)
        .args(["completions", "tcsh"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("bash") && err.contains("zsh") && err.contains("fish"),
        "{err}"
    );
}

// --- systemd -------------------------------------------------------------

const UNIT: &str = "systemd/nodekeeper.service";
/// `systemd-analyze security`'s overall exposure the unit must stay within
/// (0 is the most locked down, 10 the least; up to 2.0 is "OK").
const MAX_EXPOSURE: f64 = 2.0;

fn systemd_analyze() -> Option<&'static str> {
    let found = Command::new("systemd-analyze")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !found {
        eprintln!(
            "SKIPPED: systemd-analyze is not installed (Debian: apt-get install systemd; scripts/test installs it when it can)"
        );
    }
    found.then_some("systemd-analyze")
}

/// The unit as installed next to the built binary: the same file with
/// ExecStart pointing at this build, so `verify` checks a command that exists.
fn unit_for_this_build(dir: &Path) -> PathBuf {
    let unit = std::fs::read_to_string(dist(UNIT)).unwrap();
    assert_eq!(
        unit.matches("ExecStart=/usr/local/bin/nodekeeper ").count(),
        1,
        "ExecStart runs /usr/local/bin/nodekeeper, as the README installs it"
    );
    let path = dir.join("nodekeeper.service");
    std::fs::write(
        &path,
        unit.replace(
            "ExecStart=/usr/local/bin/nodekeeper ",
            &format!("ExecStart={BIN} "),
        ),
    )
    .unwrap();
    path
}

/// What the unit's ExecStart runs, as arguments.
fn exec_start() -> Vec<String> {
    let unit = std::fs::read_to_string(dist(UNIT)).unwrap();
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .unwrap();
    line.split_whitespace().map(str::to_string).collect()
}

#[test]
fn the_systemd_unit_verifies() {
    let Some(analyze) = systemd_analyze() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_this_build(dir.path());
    // Documentation=man:nodekeeper(1) is checked against the shipped page,
    // where man(1) is there to look it up.
    let man = dir.path().join("man");
    std::fs::create_dir_all(man.join("man1")).unwrap();
    std::fs::copy(dist("man/nodekeeper.1"), man.join("man1/nodekeeper.1")).unwrap();
    let has_man = Command::new("man").arg("--version").output().is_ok();
    if !has_man {
        eprintln!("man is not installed: Documentation=man:nodekeeper(1) is not looked up (Debian: apt-get install man-db)");
    }
    let out = Command::new(analyze)
        .arg("verify")
        .arg(format!("--man={}", if has_man { "yes" } else { "no" }))
        .arg(&unit)
        .env("MANPATH", &man)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "systemd-analyze verify failed: {stderr}"
    );
    // Unknown keys and bad values are only warned about: none may be.
    assert!(
        !stderr.contains("nodekeeper.service"),
        "systemd-analyze verify warns about the unit: {stderr}"
    );
}

#[test]
fn the_systemd_unit_is_hardened() {
    let Some(analyze) = systemd_analyze() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let unit = unit_for_this_build(dir.path());
    let out = Command::new(analyze)
        .args(["security", "--offline=true", "--no-pager"])
        .arg(&unit)
        .current_dir(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let exposure: f64 = text
        .lines()
        .find_map(|l| {
            l.split("Overall exposure level for nodekeeper.service: ")
                .nth(1)
        })
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no exposure level in: {text}{}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
    assert!(
        exposure <= MAX_EXPOSURE,
        "exposure {exposure} is above {MAX_EXPOSURE}:\n{text}"
    );
}

#[test]
fn the_systemd_unit_runs_what_the_binary_takes() {
    let unit = std::fs::read_to_string(dist(UNIT)).unwrap();
    for line in [
        "Type=notify",
        "Restart=on-failure",
        "DynamicUser=yes",
        "StateDirectory=nodekeeper",
        "ConfigurationDirectory=nodekeeper",
        "ProtectSystem=strict",
    ] {
        assert!(unit.lines().any(|l| l == line), "the unit lacks {line}");
    }
    // WatchdogSec must leave room for the pings, sent every half of it.
    assert!(unit.lines().any(|l| l.starts_with("WatchdogSec=")));
    let nofile: u64 = unit
        .lines()
        .find_map(|l| l.strip_prefix("LimitNOFILE="))
        .unwrap()
        .parse()
        .unwrap();
    // 10,000 kubelets probed and pushing hold two connections each.
    assert!(nofile >= 2 * 10_000 + 512, "LimitNOFILE={nofile}");
    let args = exec_start();
    assert_eq!(args[0], "/usr/local/bin/nodekeeper");
    let db = args.iter().position(|a| a == "--db").unwrap();
    assert!(
        args[db + 1].starts_with("/var/lib/nodekeeper/"),
        "--db under the StateDirectory"
    );
    let config = args.iter().position(|a| a == "--config").unwrap();
    assert_eq!(args[config + 1], "/etc/nodekeeper/config.yaml");
    // The binary takes these arguments: `config print` parses the same
    // command line as `run` (with a config file of our own).
    let dir = tempfile::tempdir().unwrap();
    let config_file = dir.path().join("config.yaml");
    std::fs::write(&config_file, "node-sync-period: 10s\n").unwrap();
    let mut print: Vec<String> = args[1..].to_vec();
    let run = print.iter().position(|a| a == "run").unwrap();
    print.splice(run..=run, ["config".to_string(), "print".to_string()]);
    print[config + 1] = config_file.to_string_lossy().into_owned();
    let out = Command::new(BIN).args(&print).output().unwrap();
    assert!(
        out.status.success(),
        "{print:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}
