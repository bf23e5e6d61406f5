//! `--cloud-provider`, `--cloud-config`, `--match` and `--sync-node-list`:
//! parsed and validated completely before anything starts.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::path::Path;

use clap::Parser;
use nodekeeper::cli::{Cli, Command};
use nodekeeper::config::RunConfig;

/// `nodekeeper run ARGS` validated as `run` would, or the message it would print.
fn validate(db: &Path, args: &[&str]) -> Result<RunConfig, String> {
    nodekeeper::install_crypto_provider();
    let mut argv = vec!["nodekeeper", "run", "--kubelet-scheme", "http"];
    argv.extend_from_slice(args);
    let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
    let Command::Run(run) = cli.command else {
        unreachable!()
    };
    RunConfig::from_args(&run, db).map_err(|e| e.to_string())
}

#[test]
fn a_provider_is_built_and_kept_in_the_run_config() {
    let dir = tempfile::tempdir().unwrap();
    let inventory = dir.path().join("site.yaml");
    std::fs::write(
        &inventory,
        "machines:\n  - {name: web-1}\n  - {name: db-1}\n",
    )
    .unwrap();
    let inv = inventory.to_str().unwrap();
    let db = dir.path().join("db");

    let config = validate(
        &db,
        &[
            "--cloud-provider",
            "inventory",
            "--cloud-config",
            inv,
            "--match",
            "web-.*",
        ],
    )
    .unwrap();
    let cloud = config.controller.cloud.expect("a cloud source");
    assert_eq!(cloud.provider.name(), "inventory");
    assert!(cloud.filter.is_match("web-1"));
    assert!(!cloud.filter.is_match("xweb-1"), "anchored");
    assert!(cloud.sync_node_list, "on by default");

    let config = validate(
        &db,
        &[
            "--cloud-provider",
            "inventory",
            "--cloud-config",
            inv,
            "--sync-node-list=false",
        ],
    )
    .unwrap();
    let cloud = config.controller.cloud.unwrap();
    assert!(!cloud.sync_node_list);
    assert!(
        cloud.filter.is_match("anything"),
        "no --match: every machine"
    );

    assert!(validate(&db, &["--nodes", "a"])
        .unwrap()
        .controller
        .cloud
        .is_none());
    assert!(!db.exists(), "validation opens nothing");
}

#[test]
fn bad_cloud_flags_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let inventory = dir.path().join("site.yaml");
    std::fs::write(&inventory, "machines: []\n").unwrap();
    let inv = inventory.to_str().unwrap();

    let err = validate(&db, &["--cloud-provider", "gce", "--cloud-config", inv])
        .err()
        .unwrap();
    assert!(
        err.contains("\"gce\"") && err.contains("inventory, http, ec2"),
        "{err}"
    );

    let err = validate(&db, &["--cloud-provider", "ec2"]).err().unwrap();
    assert!(err.contains("needs --cloud-config"), "{err}");

    let err = validate(
        &db,
        &[
            "--cloud-provider",
            "inventory",
            "--cloud-config",
            inv,
            "--match",
            "web-(",
        ],
    )
    .err()
    .unwrap();
    assert!(
        err.contains("--match") && err.contains("regular expression"),
        "{err}"
    );

    let err = validate(&db, &["--match", "web-.*"]).err().unwrap();
    assert!(err.contains("--cloud-provider"), "--match alone: {err}");
    let err = validate(&db, &["--cloud-config", inv]).err().unwrap();
    assert!(
        err.contains("--cloud-provider"),
        "--cloud-config alone: {err}"
    );
    let err = validate(
        &db,
        &[
            "--cloud-provider",
            "inventory",
            "--cloud-config",
            inv,
            "--sync-node-list=maybe",
        ],
    )
    .err()
    .unwrap();
    assert!(err.contains("--sync-node-list"), "{err}");

    let http = dir.path().join("http.yaml");
    std::fs::write(
        &http,
        "url: https://cmdb.example/machines\ncaFile: missing.pem\n",
    )
    .unwrap();
    let err = validate(
        &db,
        &[
            "--cloud-provider",
            "http",
            "--cloud-config",
            http.to_str().unwrap(),
        ],
    )
    .err()
    .unwrap();
    assert!(
        err.contains("caFile") && err.contains("missing.pem"),
        "{err}"
    );
}

#[test]
fn the_binary_refuses_a_bad_provider_before_starting() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let inventory = dir.path().join("hosts");
    std::fs::write(&inventory, "[web]\nweb-1 cpu=lots\n").unwrap();
    let (code, _, err) = common::cli(
        &db,
        &[
            "run",
            "--kubelet-scheme",
            "http",
            "--cloud-provider",
            "inventory",
            "--cloud-config",
            inventory.to_str().unwrap(),
        ],
    );
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("--cloud-config") && err.contains("hosts:2:"),
        "{err}"
    );
    assert!(!db.exists(), "a refused start must not create the store");
}
