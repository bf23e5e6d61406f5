//! The controller says when it cannot decide: `/livez` and `/readyz` as
//! Kubernetes components serve them, a task that dies takes the process
//! down with a non-zero exit, and the downtime after a `kill -9` counts from
//! the liveness stamp.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;
use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::{Duration, Instant};

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::Value;

/// `GET path`: the status and the text.
async fn text(c: &Controller, path: &str) -> (u16, String) {
    let response = client()
        .get(format!("{}{path}", c.url))
        .send()
        .await
        .unwrap();
    (response.status().as_u16(), response.text().await.unwrap())
}

/// Polls `path` until its status is `code` and its text holds `needle`.
async fn wait_text(c: &Controller, path: &str, code: u16, needle: &str) -> String {
    let started = Instant::now();
    loop {
        let (got, body) = text(c, path).await;
        if got == code && body.contains(needle) {
            return body;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "{path} never answered {code} with {needle:?}; last: {got} {body}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn gauge(metrics: &str, name: &str) -> f64 {
    metrics
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} in {metrics}"))
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_names_what_keeps_the_controller_from_deciding() {
    // The inventory is the only source; one probe at a time, so hung
    // kubelets make a sweep slow.
    let site = TestSite::builder(2, Ipv4Addr::new(127, 82, 1, 1))
        .without_nodes_file()
        .flag("--kubelet-timeout", "2s")
        .start()
        .await;
    let fleet = &site.fleet;
    let inventory = site.path().join("inventory.yaml");
    let machines: String = fleet
        .fleet
        .nodes()
        .iter()
        .map(|n| format!("  - name: {}\n    address: {}\n", n.name, n.address.ip()))
        .collect();
    std::fs::write(&inventory, format!("machines:\n{machines}")).unwrap();
    let c = site.controller_with(&[
        "--cloud-provider",
        "inventory",
        "--cloud-config",
        inventory.to_str().unwrap(),
        "--node-status-mode",
        "probe",
        "--probe-concurrency",
        "1",
    ]);
    let ready = wait_text(&c, "/readyz?verbose", 200, "readyz check passed").await;
    assert_eq!(
        ready,
        "[+]ping ok\n[+]probe-sweep ok\n[+]monitor-pass ok\n[+]registration ok\n[+]controller-lag ok\n[+]store ok\n[+]source ok\nreadyz check passed\n"
    );
    assert_eq!(text(&c, "/readyz").await, (200, "ok".into()));
    assert_eq!(
        text(&c, "/livez?verbose").await,
        (
            200,
            "[+]ping ok\n[+]controller ok\n[+]csr-signing ok\n[+]server ok\n[+]retention ok\n[+]liveness-stamp ok\nlivez check passed\n"
                .into()
        )
    );
    assert_eq!(text(&c, "/readyz/probe-sweep").await, (200, "ok".into()));
    let (code, body) = text(&c, "/readyz/nope").await;
    assert_eq!(code, 404, "{body}");

    // The finished passes, as metrics: recent, and moving.
    let metrics = c.text("/metrics").await;
    let sweep = gauge(&metrics, "nodekeeper_last_sweep_timestamp_seconds");
    let monitor = gauge(&metrics, "nodekeeper_last_monitor_pass_timestamp_seconds");
    let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
    assert!(
        (now - sweep).abs() < 10.0 && (now - monitor).abs() < 10.0,
        "{metrics}"
    );
    eventually("the last sweep time moves on", || async {
        gauge(
            &c.text("/metrics").await,
            "nodekeeper_last_sweep_timestamp_seconds",
        ) > sweep
    })
    .await;

    // Both kubelets hang: one sweep takes two kubelet timeouts, longer than
    // three sync periods and one timeout. Not ready, and it says why; live
    // all the same.
    fleet
        .handle
        .set(&fleet.name(0), KubeletState::Hang)
        .unwrap();
    fleet
        .handle
        .set(&fleet.name(1), KubeletState::Hang)
        .unwrap();
    let body = wait_text(
        &c,
        "/readyz?verbose",
        500,
        "[-]probe-sweep failed: the last probe sweep finished",
    )
    .await;
    assert!(body.ends_with("readyz check failed\n"), "{body}");
    assert!(body.contains("[+]monitor-pass ok\n"), "{body}");
    assert_eq!(text(&c, "/livez").await, (200, "ok".into()));
    let (code, single) = text(&c, "/readyz/probe-sweep").await;
    assert_eq!(code, 500);
    assert!(
        single.starts_with("internal server error: the last probe sweep finished"),
        "{single}"
    );
    fleet.handle.set(&fleet.name(0), KubeletState::Up).unwrap();
    fleet.handle.set(&fleet.name(1), KubeletState::Up).unwrap();
    wait_text(&c, "/readyz", 200, "ok").await;

    // The source cannot be listed: not ready, with the source's own error;
    // a check can be left out.
    std::fs::write(&inventory, "machines:\n  - name: [oops\n").unwrap();
    let body = wait_text(&c, "/readyz?verbose", 500, "[-]source failed: ").await;
    assert!(body.contains("cloud/inventory"), "{body}");
    assert_eq!(text(&c, "/livez").await, (200, "ok".into()));
    let (code, body) = text(&c, "/readyz?exclude=source&verbose").await;
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("[+]source excluded: ok\n"), "{body}");
    std::fs::write(&inventory, format!("machines:\n{machines}")).unwrap();
    wait_text(&c, "/readyz", 200, "ok").await;
    assert!(c.stop().success());
    site.stop().await;
}

/// Starts `run` with `env` set and waits for it to exit: its code and log.
fn run_until_exit(db: &std::path::Path, args: &[String], env: (&str, &str)) -> (i32, String) {
    let log = db.with_extension("log");
    let mut child = Command::new(BIN)
        .arg("--db")
        .arg(db)
        .args(["--log", "info", "run"])
        .args(args)
        .env(env.0, env.1)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let Some(status) = exited_in_time(&mut child) else {
        panic!(
            "the controller kept running after its task died: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    (
        status.code().unwrap_or(-1),
        std::fs::read_to_string(&log).unwrap_or_default(),
    )
}

#[cfg(debug_assertions)]
#[test]
fn a_task_that_dies_stops_the_controller_with_a_non_zero_exit() {
    let site = TestSite::named(&["edge-1"], Ipv4Addr::new(127, 82, 2, 1)).start();
    for (task, said) in [
        ("server", "the HTTP server task failed: it panicked"),
        ("controller", "the controller task failed: it panicked"),
        (
            "liveness-stamp",
            "the liveness stamp task failed: it panicked",
        ),
        (
            "csr-signing",
            "the certificate signing task failed: it panicked",
        ),
    ] {
        let db = site.path().join(task);
        let (code, log) = run_until_exit(&db, &site.args(), ("NODEKEEPER_TEST_PANIC_TASK", task));
        assert_eq!(code, 1, "{task}: {log}");
        assert!(log.contains(said), "{task}: {log}");
        // The others stopped in order; the store is whole.
        assert!(!db.join("controller.json").exists(), "{task}");
        let (code, out, err) = cli(&db, &["db", "verify"]);
        assert_eq!(code, 0, "{task}: {out}{err}");
        if task != "controller" {
            assert!(log.contains("controller stopped cleanly"), "{task}: {log}");
            let history = json(&cli_ok(&db, &["history", "-o", "json"]));
            let last = history.as_array().unwrap().last().unwrap().clone();
            assert_eq!(last["kind"], "ControllerStopped", "{task}: {history}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_kill_the_downtime_counts_from_the_liveness_stamp() {
    let site = TestSite::named(&["edge-1"], Ipv4Addr::new(127, 82, 3, 1)).start();
    let c = site.controller(&[]);
    // edge-1 never pushes: Unknown after the startup grace, then nothing
    // more is written. Wait until the stamp is well past the last write.
    c.wait_ready("edge-1", "Unknown").await;
    // The transition's taint is the last write; it may follow the transition.
    eventually("edge-1 tainted unreachable", || async {
        let (_, node) = c.get("/api/v1/nodes/edge-1").await;
        node["spec"]["taints"].as_array().is_some_and(|taints| {
            taints
                .iter()
                .any(|t| t["key"] == "node.kubernetes.io/unreachable")
        })
    })
    .await;
    let last_write = |history: &Value| {
        let last = history.as_array().unwrap().last().unwrap()["time"].clone();
        jiff::Timestamp::from_str(last.as_str().unwrap()).unwrap()
    };
    let (_, history) = c.get("/v1/history").await;
    let quiet_since = last_write(&history);
    let past_the_last_write = |t: jiff::Timestamp| t.duration_since(quiet_since).as_secs_f64();
    eventually("6s past the last write", || async {
        past_the_last_write(jiff::Timestamp::now()) >= 6.0
    })
    .await;
    // And the stamp with it, if the controller keeps one.
    eventually("the liveness stamp 5s past the last write", || async {
        match std::fs::read(site.db.join("alive.json")) {
            Err(_) => true,
            Ok(bytes) => serde_json::from_slice::<Value>(&bytes)
                .ok()
                .and_then(|v| {
                    v["time"]
                        .as_str()
                        .map(|t| jiff::Timestamp::from_str(t).unwrap())
                })
                .is_some_and(|t| past_the_last_write(t) >= 5.0),
        }
    })
    .await;
    let (_, history) = c.get("/v1/history").await;
    assert_eq!(
        last_write(&history),
        quiet_since,
        "something was written meanwhile"
    );
    let killed = Instant::now();
    c.kill9();
    std::thread::sleep(Duration::from_millis(500));
    let restarted = Instant::now();
    let gap = restarted.duration_since(killed).as_secs_f64();
    let c = site.controller(&[]);
    let history = c
        .wait_for("/v1/history", "the second start recorded", |h| {
            h.as_array()
                .unwrap()
                .iter()
                .filter(|e| e["kind"] == "ControllerStarted")
                .count()
                == 2
        })
        .await;
    let started_event = history
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .find(|e| e["kind"] == "ControllerStarted")
        .unwrap()
        .clone();
    let downtime = started_event["downtimeSeconds"].as_f64().unwrap();
    assert_eq!(started_event["previousStopClean"], false);
    // At most one stamp period more than the real gap (and the start-up);
    // counted from the last write it would be 6s more.
    let period = nodekeeper::liveness::PERIOD.as_secs_f64();
    assert!(
        downtime >= gap && downtime < gap + period + 1.5,
        "recorded downtime {downtime:.1}s for a gap of {gap:.1}s"
    );
    assert!(c.stop().success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_mirrors_api_server() {
    use nodekeeper_sim::apiserver::{FakeApiServer, Fault};
    let api = FakeApiServer::start().await;
    let site = TestSite::named(&["edge-1"], Ipv4Addr::new(127, 82, 9, 1)).start();
    let url = api.url();
    let c = site.controller_with(&[
        "--master",
        &url,
        "--kube-api-timeout",
        "1s",
        "--leader-elect=false",
    ]);
    wait_text(
        &c,
        "/readyz?exclude=monitor-pass&verbose",
        200,
        "[+]mirror ok\n",
    )
    .await;
    api.set_fault(Fault::Down);
    let body = wait_text(
        &c,
        "/readyz?exclude=monitor-pass&verbose",
        500,
        "[-]mirror failed: the API server",
    )
    .await;
    assert!(body.contains("has not answered since"), "{body}");
    assert_eq!(text(&c, "/livez").await, (200, "ok".into()));
    api.set_fault(Fault::None);
    wait_text(
        &c,
        "/readyz?exclude=monitor-pass&verbose",
        200,
        "[+]mirror ok\n",
    )
    .await;
    assert!(c.stop().success());
}
