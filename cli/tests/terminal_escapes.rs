//! Text a node pushes reaches the operator's terminal and the text log
//! escaped: ESC (CSI, OSC), BEL, CR, LF and C1 controls in a condition
//! message or a kubelet version are shown, not obeyed, and forge no line;
//! JSON keeps them exact.
// Tests set up files with std::fs and drive real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use serde_json::{json, Value};

/// Clears the screen, sets the window title (OSC ended by BEL), returns the
/// cursor to overwrite the line, starts a forged log line, and recolours
/// with C1's CSI.
const HOSTILE: &str = "disk ok\x1b[2J\x1b]0;pwned\x07\r\n2026-12-03T00:00:00.000000Z ERROR nodekeeper: forged\u{9b}31m";
/// The same, as every text output shows it.
const SHOWN: &str = "disk ok\\x1b[2J\\x1b]0;pwned\\x07\\r\\n2026-12-03T00:00:00.000000Z ERROR nodekeeper: forged\\u{9b}31m";
const VERSION: &str = "v1.32.4\x1b]8;;http://evil\x1b\\";
const VERSION_SHOWN: &str = "v1.32.4\\x1b]8;;http://evil\\x1b\\";

async fn patch_status(c: &Controller, status: &str, message: &str) -> u16 {
    let body = json!({"status": {
        "conditions": [{"type": "Ready", "status": status, "reason": "KubeletNotReady",
                        "message": message}],
        "nodeInfo": {"kubeletVersion": VERSION}
    }});
    c.status_patch("edge-1", &body).send().await.0
}

/// No control character but the line feeds that end lines.
fn assert_inert(what: &str, text: &str) {
    let raw: Vec<char> = text
        .chars()
        .filter(|&c| c.is_control() && c != '\n')
        .collect();
    assert!(raw.is_empty(), "{what} holds {raw:?}: {text:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pushed_message_is_escaped_in_every_text_output_and_exact_in_json() {
    let site = TestSite::named(&["edge-1"], Ipv4Addr::new(127, 158, 0, 1)).start();
    let c = site.controller(&[]);
    let db = &site.db;
    c.wait_registered("edge-1").await;
    assert_eq!(patch_status(&c, "True", "ready").await, 200);
    assert_eq!(patch_status(&c, "False", HOSTILE).await, 200);
    c.wait_ready("edge-1", "False").await;

    // The history table: one row per event, the message escaped.
    let table = cli_ok(db, &["history", "edge-1"]);
    assert_inert("history", &table);
    assert!(table.contains(SHOWN), "{table}");
    let (_, events) = c.get("/v1/history?node=edge-1").await;
    let events = events.as_array().unwrap().len();
    assert_eq!(table.lines().count(), events + 1, "{table}");
    // JSON keeps the message as it was sent.
    let json: Value =
        serde_json::from_str(&cli_ok(db, &["history", "edge-1", "-o", "json"])).unwrap();
    let changed = json
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "ConditionChanged" && e["to"] == "False")
        .unwrap();
    assert_eq!(changed["message"], HOSTILE);

    let describe = cli_ok(db, &["describe", "edge-1"]);
    assert_inert("describe", &describe);
    assert!(describe.contains(SHOWN), "{describe}");

    let nodes = cli_ok(db, &["nodes", "-o", "wide"]);
    assert_inert("nodes", &nodes);
    assert!(nodes.contains(VERSION_SHOWN), "{nodes}");
    let list: Value = serde_json::from_str(&cli_ok(db, &["nodes", "-o", "json"])).unwrap();
    assert_eq!(
        list["items"][0]["status"]["nodeInfo"]["kubeletVersion"],
        VERSION
    );
    // YAML escapes as JSON does, and reads back exact.
    let yaml = cli_ok(db, &["nodes", "-o", "yaml"]);
    assert_inert("yaml", &yaml);
    let list: Value = serde_yaml_ng::from_str(&yaml).unwrap();
    assert_eq!(
        list["items"][0]["status"]["nodeInfo"]["kubeletVersion"],
        VERSION
    );

    // An error quoting what it was given.
    let (code, _, err) = cli(db, &["describe", "no\x1b]0;pwned\x07pe"]);
    assert_eq!(code, 1, "{err}");
    assert_inert("an error", &err);
    assert!(err.contains("not found"), "{err}");

    // The text log: the transition is one line, escaped, and nothing forged.
    let log = c.log_text();
    assert_inert("the log", &log);
    let transition: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("nodekeeper::transitions") && l.contains("to=\"False\""))
        .collect();
    assert_eq!(transition.len(), 1, "{log}");
    assert!(transition[0].contains(SHOWN), "{}", transition[0]);
    assert!(
        !log.lines().any(|l| l.starts_with("2026-12-03T00:00:00")),
        "{log}"
    );
    assert!(c.stop().success());
}
