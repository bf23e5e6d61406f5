//! Watching nodes: events from the durable log, resumable from any
//! resourceVersion, across a controller restart.
// Tests set up files with std::fs and time real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_streams_changes_and_resumes_after_a_restart() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 91, 0, 1)).await;
    let (fleet, db, args) = (&site.fleet, &site.db, site.args());
    let (a, b) = (site.name(0), site.name(1));
    let c = Controller::start(db, &args);
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;

    // Without a version: the current list as ADDED, then changes.
    let mut all = WatchStream::nodes(&c, "").await;
    let first = all.next().await.unwrap();
    assert_eq!(first["type"], "ADDED");
    assert_eq!(first["object"]["kind"], "Node");
    let second = all.next().await.unwrap();
    assert_eq!(second["type"], "ADDED");

    let (_, list) = c.get("/api/v1/nodes").await;
    let version = list["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .to_string();
    let mut from_list = WatchStream::nodes(&c, &format!("&resourceVersion={version}")).await;
    fleet.handle.set(&b, KubeletState::Sick).unwrap();
    // Other changes of b may come first (the taints lifted once it was
    // Ready): the one wanted is the transition.
    let sick = from_list
        .until(&b, |e| {
            e["type"] == "MODIFIED" && ready_of(&e["object"]).as_deref() == Some("False")
        })
        .await;
    assert_eq!(ready_of(&sick["object"]).as_deref(), Some("False"));
    let sick_version: u64 = sick["object"]["metadata"]["resourceVersion"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(sick_version > version.parse::<u64>().unwrap());
    all.until(&b, |e| {
        e["type"] == "MODIFIED" && ready_of(&e["object"]).as_deref() == Some("False")
    })
    .await;

    // The controller stops: the watches end instead of holding the server.
    assert!(c.stop().success());
    // (Events already sent may still be read; then the stream ends.)
    while all.next().await.is_some() {}

    // Restart: a watch from the version before the sick transition replays
    // it, then follows new changes.
    let c = Controller::start(db, &args);
    let mut resumed = WatchStream::nodes(&c, &format!("&resourceVersion={version}")).await;
    // (As above, the lifting of b's start-up taints may come before it.)
    let replayed = resumed
        .until(&b, |e| {
            e["type"] == "MODIFIED" && ready_of(&e["object"]).as_deref() == Some("False")
        })
        .await;
    assert_eq!(
        replayed["object"]["metadata"]["resourceVersion"]
            .as_str()
            .unwrap(),
        sick_version.to_string()
    );
    fleet.handle.set(&b, KubeletState::Up).unwrap();
    let healed = resumed
        .until(&b, |e| ready_of(&e["object"]).as_deref() == Some("True"))
        .await;
    assert_eq!(healed["type"], "MODIFIED");

    // A version the server never handed out is refused.
    let response = client()
        .get(format!(
            "{}/api/v1/nodes?watch=true&resourceVersion=abc",
            c.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_older_than_the_log_is_gone() {
    // A store whose log starts at seq 10 (imported from an export that did).
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let export = dir.path().join("export.jsonl");
    std::fs::write(
        &export,
        concat!(
            r#"{"format":"nodekeeper-export","version":1,"exportedAt":"2026-11-30T09:00:00Z","lastSeq":10,"nodes":0,"events":1}"#,
            "\n",
            r#"{"event":{"seq":10,"time":"2026-11-30T09:00:00Z","node":null,"kind":"ControllerStopped","instance":"old"}}"#,
            "\n"
        ),
    )
    .unwrap();
    cli_ok(&db, &["db", "import", "--input", export.to_str().unwrap()]);
    let args: Vec<String> = ["--node-status-mode", "push", "--listen", "127.0.0.1:0"]
        .map(String::from)
        .to_vec();
    let c = Controller::start(&db, &args);
    let response = client()
        .get(format!(
            "{}/api/v1/nodes?watch=true&resourceVersion=3",
            c.url
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 410);
    let status: serde_json::Value = response.json().await.unwrap();
    assert_eq!(status["reason"], "Expired", "{status}");
    assert!(
        status["message"]
            .as_str()
            .unwrap()
            .contains("too old resource version"),
        "{status}"
    );
    // From the oldest kept version on, it is served.
    WatchStream::nodes(&c, "&resourceVersion=9&timeoutSeconds=1").await;
    assert!(c.stop().success());
}
