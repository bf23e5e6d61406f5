//! What an operator installs and watches: the binary says what it is, and
//! `/metrics` carries the build and the process figures.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;

#[test]
fn the_binary_says_which_build_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let line = cli_ok(&db, &["--version"]);
    assert!(
        line.starts_with(&format!(
            "nodekeeper {} (commit ",
            env!("CARGO_PKG_VERSION")
        )),
        "{line}"
    );
    assert!(line.contains(", built 20"), "{line}");

    let info = json(&cli_ok(&db, &["version", "-o", "json"]));
    assert_eq!(info["version"], env!("CARGO_PKG_VERSION"));
    for field in ["gitCommit", "buildDate", "rustcVersion", "platform"] {
        assert!(
            info[field].as_str().is_some_and(|s| !s.is_empty()),
            "{field} in {info}"
        );
    }
    assert!(line.contains(info["gitCommit"].as_str().unwrap()), "{line}");
    let table = cli_ok(&db, &["version"]);
    assert!(
        table.contains("Git commit:") && table.contains("Build date:"),
        "{table}"
    );
    assert!(!db.exists(), "version opens no store");
}

#[tokio::test]
async fn metrics_carry_the_build_and_the_process() {
    let site = TestSite::named(&["edge-1"], Ipv4Addr::new(127, 88, 0, 1)).start();
    let controller = site.controller(&[]);
    let text = client()
        .get(format!("{}/metrics", controller.url))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let commit = json(&cli_ok(&site.db, &["version", "-o", "json"]))["gitCommit"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        text.contains(&format!("git_commit=\"{commit}\""))
            && text.contains("nodekeeper_build_info{"),
        "{text}"
    );
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {text}"))
            .parse()
            .unwrap()
    };
    assert!(value("process_resident_memory_bytes") > 1e6);
    assert!(value("process_open_fds") >= 3.0);
    assert!(value("process_max_fds") >= value("process_open_fds"));
    let started = value("process_start_time_seconds");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        (now - started).abs() < 600.0,
        "started {started}, now {now}"
    );
    assert!(value("process_cpu_seconds_total") >= 0.0);
}

#[tokio::test]
async fn a_config_file_sets_run_flags_and_the_command_line_wins() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let etc = dir.path().join("etc");
    std::fs::create_dir(&etc).unwrap();
    std::fs::write(etc.join("nodes.txt"), "127.88.0.1\n127.88.0.2\n").unwrap();
    let config = etc.join("nodekeeper.yaml");
    std::fs::write(
        &config,
        "# relative paths are the file's\nnodes-file: nodes.txt\nnode-status-mode: push\nkubelet-scheme: http\nlisten: 127.0.0.1:1\nnode-monitor-grace-period: 7s\n",
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();

    // The file alone would listen on port 1: the flag wins.
    let controller = Controller::start(
        &db,
        &[
            "--config".to_string(),
            config_arg.to_string(),
            "--listen".into(),
            "127.0.0.1:0".into(),
        ],
    );
    // The API serves before the first registration is stored: wait for it.
    controller
        .wait_for(
            "/api/v1/nodes",
            "both nodes from the config's nodes file",
            |list| {
                list["items"]
                    .as_array()
                    .is_some_and(|items| items.len() == 2)
            },
        )
        .await;
    drop(controller);

    let printed = cli_ok(
        &db,
        &[
            "config",
            "print",
            "--config",
            config_arg,
            "--node-sync-period",
            "3s",
        ],
    );
    assert!(
        printed.contains("\nnode-monitor-grace-period: 7s "),
        "{printed}"
    );
    assert!(printed.contains("# config file"), "{printed}");
    assert!(printed.contains("\nnode-sync-period: 3s "), "{printed}");
    assert!(printed.contains("# command line"), "{printed}");
    assert!(
        printed.contains(&format!(
            "\nnodes-file: {}",
            etc.join("nodes.txt").display()
        )),
        "{printed}"
    );

    std::fs::write(&config, "nodes: a\n\nnode-sync-perod: 3s\n").unwrap();
    let (code, _, err) = cli(&db, &["run", "--config", config_arg]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("nodekeeper.yaml:3") && err.contains("node-sync-period"),
        "{err}"
    );
    let (code, _, err) = cli(&db, &["run", "--server", "http://127.0.0.1:1"]);
    assert_eq!(code, 2, "{err}");
    let (_, help, _) = cli(&db, &["run", "--help"]);
    assert!(
        !help.contains("--server") && !help.contains("--token "),
        "{help}"
    );
    for heading in [
        "Nodes and sources:",
        "Probing:",
        "Eviction:",
        "Mirror to an API server:",
        "HTTP API:",
        "Store:",
    ] {
        assert!(help.contains(heading), "{heading} in {help}");
    }
}

#[tokio::test]
async fn a_site_is_named_in_its_build_info_log_console_and_version() {
    let site = TestSite::named(&["edge-1"], Ipv4Addr::new(127, 88, 0, 9)).start();
    // From the config file, as every run flag.
    let config = site.path().join("site.yaml");
    std::fs::write(&config, "site: lyon-3\n").unwrap();
    let controller = site.controller(&["--config".into(), config.display().to_string()]);
    let text = controller.text("/metrics").await;
    let info = text
        .lines()
        .find(|l| l.starts_with("nodekeeper_build_info{"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(info.contains(",site=\"lyon-3\"}"), "{info}");
    let (_, about) = controller.get("/v1/console").await;
    assert_eq!(about["site"], "lyon-3", "{about}");

    // `version` finds the running controller through the discovery file.
    let versions = json(&cli_ok(&site.db, &["version", "-o", "json"]));
    assert_eq!(versions["controller"]["site"], "lyon-3", "{versions}");
    assert_eq!(versions["controller"]["version"], env!("CARGO_PKG_VERSION"));
    let table = cli_ok(&site.db, &["version"]);
    assert!(table.contains("\nSite:        lyon-3\n"), "{table}");
    let table = cli_ok(
        &site.path().join("elsewhere"),
        &["--server", &controller.url, "version"],
    );
    assert!(table.contains("\nSite:        lyon-3\n"), "{table}");

    let log = controller.log_text();
    let lines: Vec<&str> = log.lines().filter(|l| !l.is_empty()).collect();
    assert!(!lines.is_empty(), "the controller logged");
    assert!(
        lines.iter().all(|l| l.ends_with(" site=lyon-3")),
        "every line names the site: {log}"
    );
    drop(controller);

    // Without a controller, `version` is the binary's alone.
    let versions = json(&cli_ok(&site.db, &["version", "-o", "json"]));
    assert!(versions.get("controller").is_none(), "{versions}");

    // A site name is a Kubernetes label value.
    let (code, _, err) = cli(
        &site.db,
        &["run", "--site", "lyon 3", "--nodes", "127.88.0.9"],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("--site: Invalid value: \"lyon 3\""), "{err}");
}
