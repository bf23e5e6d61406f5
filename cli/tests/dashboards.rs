//! The operator's kit stays true to the binary: the alert rules pass
//! promtool's checks and unit tests, every metric the rules and the Grafana
//! dashboard query is one a running controller serves, a fresh controller
//! serves every family (counters at 0), and the metrics table of
//! docs/guide/operations.md documents each.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use common::*;
use nodekeeper_sim::apiserver::FakeApiServer;
use serde_json::Value;

fn repo(path: &str) -> std::path::PathBuf {
    Path::new(REPO).join(path)
}

fn promtool(args: &[&str]) -> String {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(REPO)
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "promtool cannot run ({e}): install it (Debian: apt-get install prometheus), \
                 or run scripts/test, which does"
            )
        });
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "promtool {args:?} failed:\n{text}");
    text
}

#[test]
fn the_alert_rules_pass_promtool_and_their_unit_tests() {
    let checked = promtool(&["check", "rules", "dist/prometheus/alerts.yaml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "dist/prometheus/alerts.test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");
    // Each alert has a case where it fires and one where it does not.
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("dist/prometheus/alerts.yaml")).unwrap(),
    )
    .unwrap();
    let tests: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("dist/prometheus/alerts.test.yaml")).unwrap(),
    )
    .unwrap();
    let mut fired = BTreeSet::new();
    let mut quiet = BTreeSet::new();
    for test in tests["tests"].as_sequence().unwrap() {
        for case in test["alert_rule_test"].as_sequence().unwrap() {
            let name = case["alertname"].as_str().unwrap().to_string();
            if case["exp_alerts"].as_sequence().unwrap().is_empty() {
                quiet.insert(name);
            } else {
                fired.insert(name);
            }
        }
    }
    for (name, _) in alert_expressions(&rules) {
        assert!(fired.contains(&name), "no case fires {name}");
        assert!(quiet.contains(&name), "no case keeps {name} quiet");
    }
}

#[test]
fn every_alert_fires_for_exactly_its_site_among_three_in_one_job() {
    // kube-prometheus's node alerts, with nothing changed but their job.
    let made = Command::new(repo("scripts/kube-node-alerts"))
        .args(["--job", "nodekeeper"])
        .output()
        .expect("scripts/kube-node-alerts runs");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    assert_eq!(
        String::from_utf8(made.stdout).unwrap(),
        std::fs::read_to_string(repo("dist/prometheus/kube-node-alerts.yaml")).unwrap(),
        "dist/prometheus/kube-node-alerts.yaml is scripts/kube-node-alerts --job nodekeeper's"
    );
    let read = |path: &str| -> serde_yaml_ng::Value {
        serde_yaml_ng::from_str(&std::fs::read_to_string(repo(path)).unwrap()).unwrap()
    };
    let upstream = alert_expressions(&read(
        "dist/prometheus/upstream/kube-prometheus-node-alerts.yaml",
    ));
    let ours = alert_expressions(&read("dist/prometheus/kube-node-alerts.yaml"));
    assert_eq!(upstream.len(), 3);
    for ((name, theirs), (our_name, expr)) in upstream.iter().zip(&ours) {
        assert_eq!(name, our_name);
        assert_eq!(
            &theirs.replace("job=\"kube-state-metrics\"", "job=\"nodekeeper\""),
            expr
        );
    }

    let checked = promtool(&["check", "rules", "dist/prometheus/kube-node-alerts.yaml"]);
    assert!(checked.contains("SUCCESS"), "{checked}");
    let tested = promtool(&["test", "rules", "dist/prometheus/fleet.test.yaml"]);
    assert!(tested.contains("SUCCESS"), "{tested}");

    // Every alert is evaluated among the three sites; those that fire name
    // one site each (`site`, or `cluster` for kube-prometheus's, which
    // group by it), and keep `instance` where they keep the controller.
    let tests = read("dist/prometheus/fleet.test.yaml");
    let mut evaluated = BTreeSet::new();
    let mut sites_alerted = BTreeSet::new();
    for test in tests["tests"].as_sequence().unwrap() {
        for case in test["alert_rule_test"].as_sequence().unwrap() {
            let name = case["alertname"].as_str().unwrap().to_string();
            let mut sites = BTreeSet::new();
            for alert in case["exp_alerts"].as_sequence().unwrap() {
                let labels = &alert["exp_labels"];
                let site = labels["site"]
                    .as_str()
                    .or(labels["cluster"].as_str())
                    .unwrap_or_else(|| panic!("{name} names no site: {labels:?}"));
                if let Some(cluster) = labels["cluster"].as_str() {
                    assert_eq!(cluster, site, "{name}: {labels:?}");
                }
                if name.starts_with("Nodekeeper") {
                    assert!(labels["instance"].as_str().is_some(), "{name}: {labels:?}");
                }
                sites.insert(site.to_string());
            }
            assert!(sites.len() <= 1, "{name} fires for {sites:?}");
            sites_alerted.extend(sites);
            evaluated.insert(name);
        }
    }
    for (name, _) in alert_expressions(&read("dist/prometheus/alerts.yaml"))
        .into_iter()
        .chain(ours)
    {
        assert!(
            evaluated.contains(&name),
            "{name} is not evaluated among the sites"
        );
    }
    assert_eq!(
        sites_alerted,
        BTreeSet::from(["site-a".to_string(), "site-b".to_string()]),
        "the leaderless site and the one with Unknown nodes alert; the healthy one does not"
    );
}

/// Every alert's name and expression.
fn alert_expressions(rules: &serde_yaml_ng::Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for group in rules["groups"].as_sequence().unwrap() {
        for rule in group["rules"].as_sequence().unwrap() {
            out.push((
                rule["alert"].as_str().unwrap().to_string(),
                rule["expr"].as_str().unwrap().to_string(),
            ));
        }
    }
    out
}

/// Every PromQL expression of the dashboard's panels.
fn dashboard_expressions(dashboard: &Value) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dashboard];
    while let Some(v) = stack.pop() {
        match v {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push(expr.clone());
                }
                stack.extend(map.values());
            }
            Value::Array(items) => stack.extend(items),
            _ => {}
        }
    }
    out
}

/// The metric names an expression queries: ours (`nodekeeper_*`) and the
/// standard `process_*` ones. Label names, functions and keywords carry
/// neither prefix; names inside quotes (label values) are skipped.
fn metric_names(expr: &str) -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut word = String::new();
    let mut quoted = false;
    for c in expr.chars().chain([' ']) {
        if c == '"' {
            quoted = !quoted;
            word.clear();
            continue;
        }
        if !quoted && (c.is_ascii_alphanumeric() || c == '_' || c == ':') {
            word.push(c);
            continue;
        }
        if word.starts_with("nodekeeper_")
            || word.starts_with("process_")
            || word.starts_with("kube_node_")
        {
            names.insert(std::mem::take(&mut word));
        }
        word.clear();
    }
    names
}

/// The sample names of an exposition (`nodekeeper_probes_total`,
/// `nodekeeper_probe_duration_seconds_bucket`, …).
fn sample_names(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .map(|l| l.split(['{', ' ']).next().unwrap().to_string())
        .collect()
}

/// Each family of an exposition under the name it is queried by: counters
/// with `_total`, info metrics with `_info`, the others as they are (the
/// text format names them so already; OpenMetrics does not).
fn families(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .map(|l| {
            let (name, kind) = l.split_once(' ').unwrap();
            match kind {
                "counter" if !name.ends_with("_total") => format!("{name}_total"),
                "info" => format!("{name}_info"),
                _ => name.to_string(),
            }
        })
        .collect()
}

/// The metrics the operations guide's metrics table documents.
fn documented() -> BTreeSet<String> {
    let guide = std::fs::read_to_string(repo("docs/guide/operations.md")).unwrap();
    guide
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|name| {
            name.starts_with("nodekeeper_")
                || name.starts_with("process_")
                || name.starts_with("kube_node_")
        })
        .map(String::from)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fresh_controller_serves_every_family_and_the_guide_documents_each() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // One node nobody answers for: nothing has happened yet when /metrics is read.
    let nodes = dir.path().join("nodes.txt");
    std::fs::write(&nodes, "fresh-1 127.92.5.1\n").unwrap();
    let c = Controller::start(&db, &fast_args(&nodes, 1));
    let text = c.text("/metrics").await;
    assert!(c.stop().success());

    let served = families(&text);
    let documented = documented();
    let undocumented: Vec<&String> = served.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "served but not in the metrics table of docs/guide/operations.md: {undocumented:?}"
    );
    let unserved: Vec<&String> = documented.difference(&served).collect();
    assert!(
        unserved.is_empty(),
        "in the metrics table of docs/guide/operations.md but not served by a fresh controller: {unserved:?}"
    );

    // Counters are there at 0 before their first event, with every label
    // value known up front.
    let samples = sample_names(&text);
    for family in served.iter().filter(|f| f.ends_with("_total")) {
        assert!(samples.contains(family), "{family} has no sample:\n{text}");
    }
    for line in [
        "nodekeeper_evictions_total 0",
        "nodekeeper_condition_transitions_total{condition=\"Ready\",status=\"False\"} 0",
        "nodekeeper_probes_total{result=\"Unhealthy\"} 0",
        "nodekeeper_heartbeats_total{via=\"Lease\"} 0",
        "nodekeeper_http_rejected_requests_total{kind=\"Watch\",reason=\"BodyTimeout\"} 0",
        "nodekeeper_transition_hook_runs_total{result=\"TimedOut\"} 0",
        "nodekeeper_source_list_failures_total 0",
        "nodekeeper_mirror_retries_total 0",
        "nodekeeper_http_inflight_requests{kind=\"Mutating\"} 0",
        "nodekeeper_mirror_configured 0",
        "nodekeeper_mirror_requests_total{verb=\"patch_status\",code=\"2xx\"} 0",
    ] {
        assert!(
            text.contains(&format!("\n{line}\n")),
            "{line} missing:\n{text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_the_dashboard_and_the_alerts_query_is_served() {
    // Two zones, so the per-zone series exist.
    let site = TestSite::builder(4, Ipv4Addr::new(127, 92, 4, 1))
        .labels(|i| serde_json::json!({"topology.kubernetes.io/zone": if i % 2 == 0 { "a" } else { "b" }}))
        .start()
        .await;
    let api = FakeApiServer::start().await;
    let c = site.controller_with(&[
        "--master",
        &api.url(),
        "--kube-api-timeout",
        "2s",
        "--transition-hook",
        "true",
    ]);
    for i in 0..4 {
        c.wait_ready(&site.name(i), "True").await;
    }
    let seen = &c;
    eventually(
        "the mirror has written and the zones are counted",
        || async move {
            let text = seen.text("/metrics").await;
            text.contains("nodekeeper_mirror_requests_total{")
                && text.contains("nodekeeper_zone_nodes{zone=\"b\",status=\"True\"} 2")
        },
    )
    .await;
    let text = c.text("/metrics").await;
    assert!(c.stop().success());
    site.stop().await;
    // A family with no series yet (no node is tainted) is served by its header.
    let mut served = sample_names(&text);
    served.extend(families(&text));

    let dashboard: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("dist/grafana/nodekeeper.json")).unwrap(),
    )
    .expect("the dashboard is JSON");
    let fleet: Value = serde_json::from_str(
        &std::fs::read_to_string(repo("dist/grafana/nodekeeper-fleet.json")).unwrap(),
    )
    .expect("the fleet dashboard is JSON");
    let kube_rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("dist/prometheus/kube-node-alerts.yaml")).unwrap(),
    )
    .unwrap();
    let rules: serde_yaml_ng::Value = serde_yaml_ng::from_str(
        &std::fs::read_to_string(repo("dist/prometheus/alerts.yaml")).unwrap(),
    )
    .unwrap();
    let mut queried = Vec::new();
    for expr in dashboard_expressions(&dashboard) {
        queried.push(("the dashboard".to_string(), expr));
    }
    for expr in dashboard_expressions(&fleet) {
        queried.push(("the fleet dashboard".to_string(), expr));
    }
    for (alert, expr) in alert_expressions(&rules)
        .into_iter()
        .chain(alert_expressions(&kube_rules))
    {
        queried.push((format!("alert {alert}"), expr));
    }
    assert!(queried.len() > 40, "{queried:?}");
    let mut checked = BTreeSet::new();
    for (what, expr) in &queried {
        let names = metric_names(expr);
        // Only the alerts on the scrape itself query Prometheus's own `up`.
        assert!(
            !names.is_empty() || expr.contains("up{job=\"nodekeeper\"}"),
            "{what} queries no nodekeeper metric: {expr}"
        );
        for name in names {
            assert!(
                served.contains(&name),
                "{what} queries {name}, which nodekeeper does not serve: {expr}"
            );
            checked.insert(name);
        }
    }
    // The dashboard covers what the issue asks of it.
    for name in [
        "nodekeeper_zone_nodes",
        "nodekeeper_condition_transitions_total",
        "nodekeeper_probe_duration_seconds_bucket",
        "nodekeeper_sweep_duration_seconds_bucket",
        "nodekeeper_mirror_backlog",
        "nodekeeper_mirror_oldest_entry_age_seconds",
        "nodekeeper_store_size_bytes",
        "nodekeeper_store_flushes_total",
        "nodekeeper_http_connections",
        "nodekeeper_http_rejected_requests_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
    ] {
        assert!(checked.contains(name), "nothing queries {name}");
    }
}

#[test]
fn metric_names_are_found_in_promql() {
    let names = metric_names(
        r#"histogram_quantile(0.99, sum by (le) (rate(nodekeeper_probe_duration_seconds_bucket{instance=~"nodekeeper_x"}[5m]))) / on(job) process_open_fds"#,
    );
    assert_eq!(
        names.into_iter().collect::<Vec<_>>(),
        [
            "nodekeeper_probe_duration_seconds_bucket",
            "process_open_fds"
        ]
    );
}
