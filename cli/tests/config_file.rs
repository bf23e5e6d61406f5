//! `--config` files as a mistake (or anyone who can write one) hands them
//! over, against the real binary: any value `config print` can print, a file
//! too large or nested too deep refused at once and clearly.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::path::Path;
use std::process::{Command, Stdio};

use common::*;

/// Runs `nodekeeper ARGS` with its address space capped at 2 GiB, so that a
/// build that reads without bounds fails here instead of taking the
/// machine's memory: (exit code, stdout, stderr).
fn capped(dir: &Path, args: &[&str]) -> (Option<i32>, String, String) {
    let (out, err) = (dir.join("stdout"), dir.join("stderr"));
    let mut child = Command::new("sh")
        .arg("-c")
        .arg("ulimit -v 2097152 && exec \"$0\" \"$@\"")
        .arg(BIN)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .unwrap();
    let status = exited_in_time(&mut child).expect("nodekeeper answers in time");
    (
        status.code(),
        std::fs::read_to_string(&out).unwrap(),
        std::fs::read_to_string(&err).unwrap(),
    )
}

#[test]
fn config_print_prints_a_value_of_any_length() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    let long = "a".repeat(70_000);
    std::fs::write(&config, format!("leader-elect-resource-name: {long}\n")).unwrap();
    let (code, out, err) = capped(
        dir.path(),
        &["config", "print", "--config", config.to_str().unwrap()],
    );
    assert_eq!(code, Some(0), "{err}");
    let line = out
        .lines()
        .find(|l| l.starts_with("leader-elect-resource-name: "))
        .expect("the setting is printed");
    assert_eq!(
        line,
        format!("leader-elect-resource-name: {long}  # config file")
    );
    // The other lines keep their column.
    assert!(
        out.contains("\n# listen: 127.0.0.1:8080        "),
        "{}",
        &out[..out.len().min(2000)]
    );
}

#[test]
fn a_config_file_past_a_mebibyte_is_refused_unread() {
    let dir = tempfile::tempdir().unwrap();
    // An endless file: refused once a mebibyte is read.
    let (code, _, err) = capped(dir.path(), &["config", "print", "--config", "/dev/zero"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("--config /dev/zero: the file is larger than 1048576 bytes"),
        "{err}"
    );
    let big = dir.path().join("big.yaml");
    std::fs::write(&big, format!("nodes: {}\n", "a,".repeat(600_000))).unwrap();
    let (code, _, err) = capped(dir.path(), &["run", "--config", big.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("larger than 1048576 bytes"), "{err}");
    assert!(
        err.contains("--nodes-file"),
        "says where a long list goes: {err}"
    );
}

#[test]
fn deep_nesting_is_refused_before_it_is_parsed() {
    let dir = tempfile::tempdir().unwrap();
    let deep = dir.path().join("deep.yaml");
    let depth = 100_000;
    std::fs::write(
        &deep,
        format!(
            "# a site\nnodes: {}{}\n",
            "[".repeat(depth),
            "]".repeat(depth)
        ),
    )
    .unwrap();
    let (code, _, err) = capped(
        dir.path(),
        &["config", "print", "--config", deep.to_str().unwrap()],
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("deep.yaml:2: lists or mappings nested more than 16 deep"),
        "{err}"
    );
    // Brackets in quotes, comments and values are not nesting.
    let fine = dir.path().join("fine.yaml");
    std::fs::write(
        &fine,
        format!(
            "# {open}\nleader-elect-resource-name: '{open}'\nmatch: \"x{open}\"\ncloud-provider: inventory\nnodes: [a, 'it''s', b]\n",
            open = "[".repeat(40)
        ),
    )
    .unwrap();
    let (code, _, err) = capped(
        dir.path(),
        &["config", "print", "--config", fine.to_str().unwrap()],
    );
    // Refused, but by the value's own check, not for nesting.
    assert!(!err.contains("nested"), "{code:?} {err}");
}

#[test]
fn config_print_checks_the_files_the_config_names() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.yaml");
    std::fs::write(
        &config,
        "nodes-file: nodes.txt\nkubelet-ca: ca.pem\ntoken-file: tokens\nnode-sync-period: 5s\n",
    )
    .unwrap();
    // The token "file" is a directory; the others are missing.
    std::fs::create_dir(dir.path().join("tokens")).unwrap();
    let print = |extra: &[&str]| {
        let mut args = vec!["config", "print", "--config", config.to_str().unwrap()];
        args.extend(extra);
        capped(dir.path(), &args)
    };
    let missing = dir.path().join("elsewhere.crt");
    let (code, out, err) = print(&["--tls-cert-file", missing.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{out}{err}");
    assert!(out.is_empty(), "{out}");
    for (flag, file, origin, why) in [
        ("--nodes-file", "nodes.txt", "config file", "No such file"),
        ("--kubelet-ca", "ca.pem", "config file", "No such file"),
        ("--token-file", "tokens", "config file", "a directory"),
        (
            "--tls-cert-file",
            "elsewhere.crt",
            "command line",
            "No such file",
        ),
    ] {
        let path = dir.path().join(file);
        let line = format!("{flag} {} ({origin}): cannot read it: ", path.display());
        assert!(
            err.lines().any(|l| l.contains(&line) && l.contains(why)),
            "{line} … {why} in:\n{err}"
        );
    }

    std::fs::write(dir.path().join("nodes.txt"), "edge-1 127.160.3.1\n").unwrap();
    std::fs::write(dir.path().join("ca.pem"), "not checked here\n").unwrap();
    std::fs::remove_dir(dir.path().join("tokens")).unwrap();
    std::fs::write(dir.path().join("tokens"), "t0k3n\n").unwrap();
    let (code, out, err) = print(&[]);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("\nnode-sync-period: 5s "), "{out}");
}
