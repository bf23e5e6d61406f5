//! History that lasts: retention with a checkpoint at the horizon, reads
//! while it is pruned, unknown nodes and conditions, watches from versions
//! before the horizon or after the newest — all through the real binary.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use nodekeeper::model::{
    Address, AddressKind, Condition, ConditionStatus, Event, EventKind, Micros, Node, Taint,
};
use serde_json::Value;

fn node(name: &str, at: Micros) -> Node {
    Node {
        name: name.into(),
        uid: format!("uid-{name}"),
        created: at,
        resource_version: 0,
        source: "static".into(),
        labels: Default::default(),
        annotations: Default::default(),
        external_id: name.into(),
        provider_id: String::new(),
        capacity: Default::default(),
        unschedulable: false,
        taints: vec![],
        addresses: vec![Address {
            kind: AddressKind::InternalIP,
            address: "127.0.0.1".into(),
        }],
        conditions: vec![Condition {
            kind: "Ready".into(),
            status: ConditionStatus::Unknown,
            last_heartbeat: at,
            last_transition: at,
            reason: "NodeStatusNeverUpdated".into(),
            message: "never probed".into(),
        }],
        node_info: Default::default(),
        reported: Default::default(),
    }
}

/// A history: `nodes` nodes registered, then groups of Ready flips (with a
/// taint now and then), each group `count` events from `start`, `step` apart.
fn synthetic(nodes: usize, groups: &[(Micros, Duration, usize)]) -> Vec<Event> {
    let mut events = Vec::new();
    let mut seq = 0;
    let mut push = |events: &mut Vec<Event>, time: Micros, node: &str, kind: EventKind| {
        seq += 1;
        events.push(Event {
            seq,
            time,
            node: Some(node.to_string()),
            kind,
        });
    };
    let first = groups[0].0;
    for i in 0..nodes {
        let name = format!("edge-{i:03}");
        let n = node(&name, first);
        push(
            &mut events,
            first,
            &name,
            EventKind::Registered { node: Box::new(n) },
        );
    }
    let mut ready = vec![false; nodes];
    let mut k = 0usize;
    for &(start, step, count) in groups {
        for j in 0..count {
            let time = Micros(start.0 + (step.as_micros() as i64) * j as i64);
            let i = k * 7 % nodes;
            let name = format!("edge-{i:03}");
            k += 1;
            if k.is_multiple_of(13) {
                push(
                    &mut events,
                    time,
                    &name,
                    EventKind::TaintsChanged {
                        from: vec![],
                        to: vec![Taint {
                            key: "example.com/drain".into(),
                            value: String::new(),
                            effect: "NoSchedule".into(),
                            added: Some(time),
                        }],
                    },
                );
                continue;
            }
            ready[i] = !ready[i];
            push(
                &mut events,
                time,
                &name,
                EventKind::ConditionChanged {
                    condition: "Ready".into(),
                    from: None,
                    to: if ready[i] {
                        ConditionStatus::True
                    } else {
                        ConditionStatus::False
                    },
                    reason: "KubeletReady".into(),
                    message: "flapping".into(),
                },
            );
        }
    }
    events
}

/// Imports `events` (and the registry they describe) with `db import`, as
/// an export in format 1 (what the previous release wrote).
fn import(db: &Path, events: &[Event]) {
    let registry = nodekeeper::history::replay(events);
    let mut text = serde_json::to_string(&serde_json::json!({
        "format": "nodekeeper-export",
        "version": 1,
        "exportedAt": Micros::now(),
        "lastSeq": events.last().map_or(0, |e| e.seq),
        "nodes": registry.len(),
        "events": events.len(),
    }))
    .unwrap();
    text.push('\n');
    for n in registry.values() {
        text.push_str(&serde_json::to_string(&serde_json::json!({ "node": n })).unwrap());
        text.push('\n');
    }
    for e in events {
        text.push_str(&serde_json::to_string(&serde_json::json!({ "event": e })).unwrap());
        text.push('\n');
    }
    let file = db.with_extension("import.jsonl");
    std::fs::write(&file, text).unwrap();
    cli_ok(db, &["db", "import", "--input", file.to_str().unwrap()]);
}

fn push_controller_args(extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--node-status-mode",
        "push",
        "--node-monitor-period",
        "100ms",
        // The imported nodes never push: they stay as imported for a while.
        "--node-startup-grace-period",
        "10m",
        "--listen",
        "127.0.0.1:0",
    ]
    .map(String::from)
    .to_vec();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

fn minutes_ago(m: i64) -> Micros {
    Micros(Micros::now().0 - m * 60_000_000)
}

/// The nodes of a NodeList, by name, without what changes by itself (the
/// list's own resourceVersion).
fn list_names(list: &Value) -> Vec<(String, String)> {
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["metadata"]["name"].as_str().unwrap().to_string(),
                n["metadata"]["resourceVersion"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_past_its_retention_is_pruned_and_at_stays_exact() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // Three hours ago an hour of flapping, then a quiet hour and a half,
    // then half an hour ago some more: with a retention of an hour, the old
    // hour goes and nothing else.
    let events = synthetic(
        20,
        &[
            (minutes_ago(180), Duration::from_millis(1_500), 2_400),
            (minutes_ago(30), Duration::from_millis(1_000), 600),
        ],
    );
    import(&db, &events);
    let old_last = events.iter().filter(|e| e.time < minutes_ago(60)).count() as u64;
    let c = Controller::start(
        &db,
        &push_controller_args(&[
            "--history-retention",
            "1h",
            "--history-checkpoint-interval",
            "500",
        ]),
    );
    let status = c
        .wait_for("/v1/store", "the old hour pruned", |s| {
            s["horizon"]["seq"].as_u64() == Some(old_last)
                && s["trees"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t["name"] == "events" && t["records"].as_u64() < Some(700))
        })
        .await;
    assert_eq!(status["retention"]["maxAgeSeconds"], 3600, "{status}");
    assert_eq!(status["horizon"]["nodes"], 20);

    // The history starts after the horizon.
    let (_, first) = c.get("/v1/history?limit=1").await;
    assert_eq!(first[0]["seq"].as_u64(), Some(old_last + 1), "{first}");

    // The registry at any time inside the kept history is exact: as the
    // whole history, pruned part included, says.
    let expect_at = |seq: u64| {
        let registry = nodekeeper::history::replay(events.iter().filter(|e| e.seq <= seq));
        let mut names: Vec<(String, String)> = registry
            .values()
            .map(|n| (n.name.clone(), n.resource_version.to_string()))
            .collect();
        names.sort();
        names
    };
    let horizon_time = status["horizon"]["time"].as_str().unwrap().to_string();
    for (time, seq) in [
        (horizon_time.clone(), old_last),
        (
            events[old_last as usize + 300].time.rfc3339(),
            old_last + 301,
        ),
    ] {
        let (code, list) = c
            .get(&format!("/v1/at?time={}", time.replace('+', "%2B")))
            .await;
        assert_eq!(code, 200, "{list}");
        assert_eq!(list_names(&list), expect_at(seq), "at {time}");
        let records = json(&cli_ok(&db, &["at", &time, "-o", "json"]));
        assert_eq!(list_names(&records), expect_at(seq), "CLI at {time}");
        // The status of every node too, not only its version.
        let full = nodekeeper::history::replay(events.iter().filter(|e| e.seq <= seq));
        for item in records["items"].as_array().unwrap() {
            let name = item["metadata"]["name"].as_str().unwrap();
            assert_eq!(
                ready_of(item).as_deref(),
                Some(full[name].ready().as_str()),
                "{name} at {time}"
            );
        }
    }

    // Before the horizon, `at` says so and names it.
    let before = events[10].time.rfc3339();
    let (code, s) = c
        .get(&format!("/v1/at?time={}", before.replace('+', "%2B")))
        .await;
    assert_eq!((code, s["reason"].as_str()), (410, Some("Expired")), "{s}");
    let (code, _, err) = cli(&db, &["at", &before]);
    assert_eq!(code, 1);
    assert!(err.contains("before the kept history"), "{err}");
    assert!(err.contains(&format!("seq {old_last}")), "{err}");

    // A watch from a version before the horizon is 410 Expired, as the API
    // server answers; from the horizon on it is served.
    let (code, s) = c
        .get(&format!(
            "/api/v1/nodes?watch=true&resourceVersion={}",
            old_last - 1
        ))
        .await;
    assert_eq!((code, s["reason"].as_str()), (410, Some("Expired")), "{s}");
    assert!(s["message"]
        .as_str()
        .unwrap()
        .contains("too old resource version"));
    let (code, _) = c
        .get(&format!(
            "/api/v1/nodes?watch=true&resourceVersion={old_last}&timeoutSeconds=1"
        ))
        .await;
    assert_eq!(code, 200);

    // `db status` shows the horizon, the retention and the size by tree.
    let text = cli_ok(&db, &["db", "status"]);
    assert!(
        text.contains(&format!("Horizon:        seq {old_last}")),
        "{text}"
    );
    assert!(
        text.contains("Retention:      90d") || text.contains("Retention:      1h"),
        "{text}"
    );
    assert!(text.contains("checkpoint_nodes"), "{text}");
    assert!(c.stop().success());
    let text = cli_ok(&db, &["db", "status"]);
    assert!(
        text.contains(&format!("Horizon:        seq {old_last}")),
        "{text}"
    );
    let verify = cli_ok(&db, &["db", "verify"]);
    assert!(verify.contains("ok:"), "{verify}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_pruned_while_it_is_read_and_watched_stays_whole() {
    nodekeeper::install_crypto_provider();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    // 12,000 events that pass the one-minute retention 20 seconds from now:
    // time enough to import them, start, and open the readers first.
    let start = Micros(Micros::now().0 - 40_000_000);
    let events = synthetic(10, &[(start, Duration::from_micros(500), 12_000)]);
    import(&db, &events);
    let c = Controller::start(
        &db,
        &push_controller_args(&[
            "--history-retention",
            "1m",
            "--history-checkpoint-interval",
            "1000",
        ]),
    );
    let (_, s) = c.get("/v1/store").await;
    assert!(s["horizon"].is_null(), "pruned too early: {s}");

    // A watch from the very beginning, read a little, then left unread
    // while retention moves the horizon far past it.
    let mut watch = WatchStream::open(&format!(
        "{}/api/v1/nodes?watch=true&resourceVersion=1",
        c.url
    ))
    .await;
    let first = watch.next().await.unwrap();
    assert_eq!(first["object"]["metadata"]["resourceVersion"], "2");
    // And a history read, started before pruning, read later.
    let history = reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{}/v1/history", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(history.status(), 200);

    let status = c
        .wait_for("/v1/store", "the horizon past most of the history", |s| {
            s["horizon"]["seq"].as_u64() > Some(9_000)
        })
        .await;
    let horizon = status["horizon"]["seq"].as_u64().unwrap();
    // New readers from before the horizon are refused...
    let (code, s) = c.get("/api/v1/nodes?watch=true&resourceVersion=5").await;
    assert_eq!((code, s["reason"].as_str()), (410, Some("Expired")), "{s}");
    let (code, _) = c.get("/v1/history?after=5&limit=1").await;
    assert_eq!(code, 410);
    // ...but the ones that started read everything, in order, without holes.
    let changes: Vec<u64> = events
        .iter()
        .filter(|e| e.seq > 2 && e.kind.changes_node())
        .map(|e| e.seq)
        .collect();
    for want in &changes {
        let event = watch.next().await.expect("the watch goes on");
        assert_eq!(
            event["object"]["metadata"]["resourceVersion"].as_str(),
            Some(want.to_string().as_str()),
            "{event}"
        );
    }
    let history: Vec<Event> = history.json().await.unwrap();
    let seqs: Vec<u64> = history.iter().map(|e| e.seq).collect();
    assert_eq!(
        seqs[..events.len()],
        (1..=events.len() as u64).collect::<Vec<_>>()
    );
    drop(watch);
    // Once the readers are gone, what they held is deleted.
    c.wait_for("/v1/store", "the pruned events deleted", |s| {
        let events_now = s["events"].as_u64().unwrap_or(0);
        let records = s["trees"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["name"] == "events").cloned())
            .and_then(|t| t["records"].as_u64())
            .unwrap_or(u64::MAX);
        records == events_now
    })
    .await;
    assert!(horizon > 9_000);
    assert!(c.stop().success());
    assert!(cli_ok(&db, &["db", "verify"]).contains("ok:"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_nodes_and_conditions_are_named_deleted_nodes_keep_their_history() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let mut events = synthetic(3, &[(minutes_ago(10), Duration::from_secs(1), 20)]);
    let seq = events.len() as u64 + 1;
    events.push(Event {
        seq,
        time: Micros::now(),
        node: Some("edge-001".into()),
        kind: EventKind::Deleted {
            reason: "gone from the inventory".into(),
        },
    });
    import(&db, &events);
    for source in ["store", "controller"] {
        let c =
            (source == "controller").then(|| Controller::start(&db, &push_controller_args(&[])));
        let (code, _, err) = cli(&db, &["history", "no-such-node"]);
        assert_eq!(code, 1, "{source}: {err}");
        assert!(
            err.contains("\"no-such-node\" is unknown"),
            "{source}: {err}"
        );
        assert!(!err.contains("No events"), "{source}: {err}");
        let (code, _, err) = cli(&db, &["history", "--condition", "Redy"]);
        assert_eq!(code, 1, "{source}: {err}");
        assert!(err.contains("\"Redy\" is unknown"), "{source}: {err}");
        assert!(err.contains("Ready"), "{source}: {err}");
        // A deleted node is not unknown: its history is kept.
        let deleted = json(&cli_ok(&db, &["history", "edge-001", "-o", "json"]));
        assert_eq!(
            deleted.as_array().unwrap().last().unwrap()["kind"],
            "Deleted"
        );
        // A known type without changes in range is simply no events.
        let none = cli_ok(&db, &["history", "--condition", "MemoryPressure"]);
        assert_eq!(none, "No events found\n");
        if let Some(c) = c {
            let (code, s) = c.get("/v1/history?node=no-such-node").await;
            assert_eq!((code, s["reason"].as_str()), (404, Some("NotFound")), "{s}");
            assert!(c.stop().success());
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_from_beyond_the_newest_version_is_answered_as_the_api_server_does() {
    let site = TestSite::start(1, std::net::Ipv4Addr::new(127, 84, 1, 1)).await;
    let fleet = &site.fleet;
    let c = site.controller(&[]);
    let name = site.name(0);
    c.wait_ready(&name, "True").await;
    let (_, list) = c.get("/api/v1/nodes").await;
    let current: u64 = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();

    // Far ahead: after a short wait, 504 "Too large resource version" with
    // a retry hint, kube-apiserver's answer, which makes client-go relist.
    let far = current + 1_000_000;
    let response = client()
        .get(format!(
            "{}/api/v1/nodes?watch=true&resourceVersion={far}",
            c.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 504);
    assert_eq!(response.headers()["retry-after"], "1");
    let s: Value = response.json().await.unwrap();
    assert_eq!(s["reason"], "Timeout", "{s}");
    // Something may be written during the wait: `current` is at least the
    // version listed before it.
    let message = s["message"].as_str().unwrap();
    let prefix = format!("Timeout: Too large resource version: {far}, current: ");
    let (answered, advice) = message
        .strip_prefix(&prefix)
        .and_then(|rest| rest.split_once(": "))
        .unwrap_or_else(|| panic!("{message}"));
    let answered: u64 = answered.parse().unwrap();
    assert!((current..far).contains(&answered), "{message}");
    // And what to do, beyond kube-apiserver's words.
    assert_eq!(
        advice,
        format!(
            "this store has written no version past {answered}, so {far} comes from another \
             store; list the nodes again and watch from the resourceVersion the list answers"
        ),
        "{message}"
    );
    assert_eq!(s["details"]["retryAfterSeconds"], 1, "{s}");
    assert_eq!(
        s["details"]["causes"][0]["reason"], "ResourceVersionTooLarge",
        "{s}"
    );

    // Just ahead, and the version arrives within the wait: served.
    let next = current + 1;
    let watch = tokio::spawn({
        let url = format!("{}/api/v1/nodes?watch=true&resourceVersion={next}", c.url);
        async move {
            let mut w = WatchStream::open(&url).await;
            w.next().await.unwrap()
        }
    });
    fleet
        .handle
        .set(&name, nodekeeper_sim::KubeletState::Sick)
        .unwrap();
    let event = watch.await.unwrap();
    let rv: u64 = event["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(rv > next, "{event}");
    assert!(c.stop().success());
    site.stop().await;
}
