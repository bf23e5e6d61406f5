//! Operating the real binary: JSON logs with each transition once, failed
//! probes logged as they start, and `--transition-hook` run once per
//! transition across a kill -9, with a timeout.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::Path;

use common::*;
use nodekeeper_sim::KubeletState;
use serde_json::Value;

/// Every line of a JSON log, parsed; a line that is not JSON fails the test.
fn json_lines(log: &str) -> Vec<Value> {
    log.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn keys(line: &Value) -> BTreeSet<&str> {
    line.as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect()
}

/// The ConditionChanged events of the history, by seq.
async fn transition_seqs(c: &Controller) -> Vec<u64> {
    let (_, history) = c.get("/v1/history").await;
    history
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "ConditionChanged")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect()
}

/// The seqs the hook script recorded, in the order it ran.
fn hooked_seqs(file: &Path) -> Vec<u64> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_carry_each_transition_once_and_failures_before_the_grace_ends() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 92, 0, 1)).await;
    let (fleet, db) = (&site.fleet, &site.db);
    let mut args = site.args();
    // A grace long enough that the first failed probe is logged well before it ends.
    set_flag(&mut args, "--node-monitor-grace-period", "3s");
    args.extend(["--log-format", "json"].map(String::from));
    let c = Controller::start(db, &args);
    let (a, b) = (fleet.name(0), fleet.name(1));
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;

    // A probe slow on a loaded machine may have failed before: only what
    // follows the kubelet going down counts.
    let before = json_lines(&c.log_text()).len();
    fleet.handle.set(&a, KubeletState::Down).unwrap();
    c.wait_ready(&a, "Unknown").await;
    let seen = &c;
    let a_ref = &a;
    eventually("the transition to Unknown is logged", || async move {
        json_lines(&seen.log_text())
            .iter()
            .any(|l| l["node"] == a_ref.as_str() && l["to"] == "Unknown")
    })
    .await;
    let lines = json_lines(&c.log_text());
    for line in &lines {
        for key in ["time", "level", "target", "message"] {
            assert!(line.get(key).is_some(), "{key} missing: {line}");
        }
    }
    let is_a = |l: &&Value| l["node"] == a.as_str();
    let unknown: Vec<(usize, &Value)> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| is_a(l) && l["condition"] == "Ready" && l["to"] == "Unknown")
        .collect();
    assert_eq!(unknown.len(), 1, "logged once: {unknown:?}");
    let (at, transition) = unknown[0];
    let want: BTreeSet<&str> = [
        "time",
        "level",
        "target",
        "message",
        "node",
        "condition",
        "from",
        "to",
        "reason",
        "seq",
    ]
    .into();
    assert_eq!(keys(transition), want, "{transition}");
    assert_eq!(transition["from"], "True");
    assert_eq!(transition["reason"], "NodeStatusUnknown");
    assert_eq!(transition["level"], "info");
    // The seq is the history's.
    let (_, history) = c
        .get(&format!("/v1/history?node={a}&condition=Ready"))
        .await;
    let stored = history
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["to"] == "Unknown")
        .unwrap()
        .clone();
    assert_eq!(transition["seq"], stored["seq"]);
    // The first healthy answer's transition is logged too.
    assert!(
        lines
            .iter()
            .any(|l| is_a(&l) && l["to"] == "True" && l["from"] == "Unknown"),
        "{lines:?}"
    );

    // The first failed probe was logged as a warning, before the grace
    // period ended, with the address and the reason; once.
    let failed: Vec<(usize, &Value)> = lines
        .iter()
        .enumerate()
        .skip(before)
        .filter(|(_, l)| is_a(l) && l["message"] == "probe failed")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    let (failed_at, failure) = failed[0];
    assert!(failed_at < at, "logged before the transition");
    assert_eq!(failure["level"], "warn");
    let address = failure["address"].as_str().unwrap();
    assert!(address.starts_with("127.92.0.1:"), "{address}");
    assert!(!failure["reason"].as_str().unwrap().is_empty(), "{failure}");
    let time = |l: &Value| {
        l["time"]
            .as_str()
            .unwrap()
            .parse::<jiff::Timestamp>()
            .unwrap()
    };
    let ahead = time(transition).duration_since(time(failure));
    assert!(
        ahead >= jiff::SignedDuration::from_secs(2),
        "the failure was logged {ahead:?} before the grace ended"
    );
    // Many failed probes (a sweep every 200ms for 3s), one line: the rest are held back.
    assert!(!lines
        .iter()
        .any(|l| is_a(&l) && l["message"] == "probe still failing"));

    fleet.handle.set(&a, KubeletState::Up).unwrap();
    c.wait_ready(&a, "True").await;
    let a_ref = &a;
    eventually("the recovery is logged", || async move {
        json_lines(&seen.log_text())
            .iter()
            .any(|l| l["node"] == a_ref.as_str() && l["message"] == "probe answered again")
    })
    .await;
    let lines = json_lines(&c.log_text());
    let back = lines
        .iter()
        .find(|l| l["node"] == a.as_str() && l["message"] == "probe answered again")
        .unwrap();
    assert!(back["failures"].as_u64().unwrap() >= 2, "{back}");
    assert!(c.stop().success());
    site.stop().await;
}

/// A hook that records `SEQ NODE CONDITION FROM TO REASON` (and the JSON it
/// was given) and, while `block` exists, waits before doing so.
fn hook_script(dir: &Path) -> String {
    let script = dir.join("hook.sh");
    let d = dir.display();
    std::fs::write(
        &script,
        format!(
            r#"echo $$ > {d}/hook.pid
while [ -e {d}/block ]; do sleep 0.05; done
json=$(cat)
echo "$NODEKEEPER_SEQ $NODEKEEPER_NODE $NODEKEEPER_CONDITION $NODEKEEPER_FROM $NODEKEEPER_TO $NODEKEEPER_REASON | $6 $1 $2 $3 $4 $5" >> {d}/hooked
echo "$json" >> {d}/hooked.json
"#
        ),
    )
    .unwrap();
    format!("sh {}", script.display())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_transition_hook_gets_each_transition_once_across_a_kill() {
    let site = TestSite::start(3, Ipv4Addr::new(127, 92, 1, 1)).await;
    let (fleet, dir, db) = (&site.fleet, &site.dir, &site.db);
    let hooked = dir.path().join("hooked");
    let mut args = site.args();
    args.extend(["--transition-hook".to_string(), hook_script(dir.path())]);
    let c = Controller::start(db, &args);
    let (a, b, d) = (fleet.name(0), fleet.name(1), fleet.name(2));
    for n in [&a, &b, &d] {
        c.wait_ready(n, "True").await;
    }
    let hooked_ref = &hooked;
    eventually("the three registrations are hooked", || async move {
        hooked_seqs(hooked_ref).len() == 3
    })
    .await;
    // What the hook is given: arguments, environment and stdin agree.
    let first = std::fs::read_to_string(&hooked).unwrap();
    let line = first.lines().next().unwrap();
    let (env, argv) = line.split_once(" | ").unwrap();
    assert_eq!(env, argv, "{line}");
    let fields: Vec<&str> = env.split(' ').collect();
    assert_eq!(fields[2], "Ready");
    assert_eq!((fields[3], fields[4]), ("Unknown", "True"), "{line}");
    let json: Value = serde_json::from_str(
        std::fs::read_to_string(dir.path().join("hooked.json"))
            .unwrap()
            .lines()
            .next()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(json["seq"].to_string(), fields[0]);
    assert_eq!(json["kind"], "ConditionChanged");
    assert_eq!(json["node"], fields[1]);

    // The hook blocks; transitions pile up behind it; the controller and
    // the running hook are killed (as a host losing power would).
    std::fs::write(dir.path().join("block"), "").unwrap();
    let pid_file = dir.path().join("hook.pid");
    std::fs::remove_file(&pid_file).unwrap();
    fleet.handle.set(&a, KubeletState::Down).unwrap();
    fleet.handle.set(&b, KubeletState::Sick).unwrap();
    c.wait_ready(&a, "Unknown").await;
    c.wait_ready(&b, "False").await;
    let pid_ref = &pid_file;
    eventually("a hook is running", || async move { pid_ref.exists() }).await;
    let before = hooked_seqs(&hooked).len();
    let behind = transition_seqs(&c).await.len();
    assert!(behind >= 5, "three registrations, a and b down: {behind}");
    c.kill9();
    let pid = std::fs::read_to_string(&pid_file).unwrap();
    let killed = std::process::Command::new("kill")
        .args(["-KILL", pid.trim()])
        .status()
        .unwrap();
    assert!(killed.success());
    std::fs::remove_file(dir.path().join("block")).unwrap();
    assert_eq!(
        hooked_seqs(&hooked).len(),
        before,
        "the blocked hook wrote nothing"
    );

    // Back up while the controller is away; the restart replays the two it
    // missed, then hands over the recoveries.
    fleet.handle.set(&a, KubeletState::Up).unwrap();
    fleet.handle.set(&b, KubeletState::Up).unwrap();
    let c = Controller::start(db, &args);
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;
    let seen = &c;
    eventually("every transition is hooked", || async move {
        hooked_seqs(hooked_ref).len() >= transition_seqs(seen).await.len()
    })
    .await;
    let want = transition_seqs(&c).await;
    assert!(want.len() >= 7, "and a and b back up: {want:?}");
    let got = hooked_seqs(&hooked);
    assert_eq!(&got, &want, "each transition once, in order");
    // A run's output is written before the controller records the run done.
    let last_seq = format!(
        "nodekeeper_transition_hook_last_seq {}",
        want.last().unwrap()
    );
    let replayed = want.len() - before;
    let succeeded =
        format!("nodekeeper_transition_hook_runs_total{{result=\"Succeeded\"}} {replayed}");
    let (last_seq, succeeded) = (&last_seq, &succeeded);
    eventually(&format!("{last_seq} and {succeeded}"), || async move {
        let metrics = seen.text("/metrics").await;
        metrics.contains(last_seq) && metrics.contains(succeeded)
    })
    .await;
    assert!(c.stop().success());

    // After a clean restart the hook goes on after the last one it was
    // given: a new transition is handed over, nothing before it again.
    let c = Controller::start(db, &args);
    for n in [&a, &b, &d] {
        c.wait_ready(n, "True").await;
    }
    fleet.handle.set(&d, KubeletState::Sick).unwrap();
    c.wait_ready(&d, "False").await;
    let seen = &c;
    eventually("the new transition is hooked", || async move {
        hooked_seqs(hooked_ref).len() >= transition_seqs(seen).await.len()
    })
    .await;
    let all = transition_seqs(&c).await;
    assert!(all.len() > want.len(), "{all:?}");
    assert_eq!(hooked_seqs(&hooked), all, "each transition once, in order");
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_past_its_timeout_is_killed_and_the_next_runs() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 92, 2, 1)).await;
    let (fleet, dir, db) = (&site.fleet, &site.dir, &site.db);
    let (a, b) = (fleet.name(0), fleet.name(1));
    let hooked = dir.path().join("hooked");
    // The first node's hook hangs; the other's records itself.
    let hook = format!(
        r#"if [ "$1" = {a} ]; then sleep 300; fi; echo "$NODEKEEPER_SEQ $1" >> {}"#,
        hooked.display()
    );
    let mut args = site.args();
    args.extend(
        [
            "--transition-hook",
            &hook,
            "--transition-hook-timeout",
            "1s",
        ]
        .map(String::from),
    );
    let c = Controller::start(db, &args);
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;
    let hooked_ref = &hooked;
    let b_ref = &b;
    eventually("the second node's hook runs", || async move {
        std::fs::read_to_string(hooked_ref)
            .unwrap_or_default()
            .contains(b_ref.as_str())
    })
    .await;
    let seen = &c;
    eventually("the timeout is counted", || async move {
        seen.text("/metrics")
            .await
            .contains("nodekeeper_transition_hook_runs_total{result=\"TimedOut\"} 1")
    })
    .await;
    let log = c.log_text();
    assert!(log.contains("hook killed after 1s"), "{log}");
    assert!(!std::fs::read_to_string(&hooked)
        .unwrap()
        .contains(a.as_str()));
    assert!(c.stop().success());
    site.stop().await;
}

#[test]
fn a_bad_hook_flag_is_refused_before_anything_starts() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    for (args, flag) in [
        (vec!["--transition-hook", " "], "--transition-hook"),
        (
            vec![
                "--transition-hook",
                "true",
                "--transition-hook-timeout",
                "0s",
            ],
            "--transition-hook-timeout",
        ),
        (
            vec!["--transition-hook", "true", "--transition-hook-mode", "all"],
            "possible values: each, batch",
        ),
    ] {
        let mut all = vec![
            "run",
            "--nodes",
            "127.92.3.1",
            "--kubelet-scheme",
            "http",
            "--listen",
            "127.0.0.1:0",
        ];
        all.extend(args);
        let (code, _, err) = cli(&db, &all);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains(flag), "{err}");
    }
    assert!(!db.exists(), "nothing was opened");
}
