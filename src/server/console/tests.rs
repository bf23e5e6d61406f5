// Tests read their fixtures with std::fs: blocking a test's own runtime stalls nothing else.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeMap;

use axum::http::{header, HeaderMap, HeaderValue, StatusCode};

use super::*;
use crate::model::{Condition, Node, Resources};

const MINUTE: i64 = 60_000_000;

fn node(name: &str, ready: Option<ConditionStatus>) -> Node {
    Node {
        name: name.into(),
        uid: format!("uid-{name}"),
        created: Micros(0),
        resource_version: 0,
        source: "static".into(),
        labels: BTreeMap::new(),
        annotations: BTreeMap::new(),
        external_id: name.into(),
        provider_id: String::new(),
        capacity: Resources::default(),
        unschedulable: false,
        taints: vec![],
        addresses: vec![],
        conditions: ready
            .map(|status| Condition {
                kind: READY.into(),
                status,
                last_heartbeat: Micros(0),
                last_transition: Micros(0),
                reason: String::new(),
                message: String::new(),
            })
            .into_iter()
            .collect(),
        node_info: Default::default(),
        reported: Default::default(),
    }
}

fn event(seq: u64, minute: i64, node: Option<&str>, kind: EventKind) -> Event {
    Event {
        seq,
        time: Micros(minute * MINUTE),
        node: node.map(str::to_string),
        kind,
    }
}

fn registered(seq: u64, minute: i64, name: &str, ready: Option<ConditionStatus>) -> Event {
    event(
        seq,
        minute,
        Some(name),
        EventKind::Registered {
            node: Box::new(node(name, ready)),
        },
    )
}

fn ready(seq: u64, minute: i64, name: &str, to: ConditionStatus) -> Event {
    event(
        seq,
        minute,
        Some(name),
        EventKind::ConditionChanged {
            condition: READY.into(),
            from: None,
            to,
            reason: "r".into(),
            message: "m".into(),
        },
    )
}

fn counts(ready: usize, not_ready: usize, unknown: usize) -> Counts {
    Counts {
        ready,
        not_ready,
        unknown,
    }
}

fn series(events: &[Event], from: i64, to: i64, buckets: usize) -> Readiness {
    let mut s = ReadinessSeries::new(Micros(from * MINUTE), Micros(to * MINUTE), buckets);
    for e in events {
        s.apply(e);
    }
    s.finish(Some(Micros(from * MINUTE)))
}

#[test]
fn buckets_hold_the_counts_at_their_end_and_the_fewest_ready_inside() {
    use ConditionStatus::*;
    let events = [
        registered(1, 0, "a", None),
        registered(2, 0, "b", Some(Unknown)),
        ready(3, 1, "a", True),
        ready(4, 1, "b", True),
        // A two-minute outage of b inside the second ten minutes.
        ready(5, 12, "b", False),
        ready(6, 14, "b", True),
        // a goes Unknown for good in the third.
        ready(7, 25, "a", Unknown),
    ];
    let r = series(&events, 0, 30, 3);
    assert_eq!(r.last_seq, 7);
    assert_eq!(r.buckets.len(), 3);
    assert_eq!(r.buckets[0].end, counts(2, 0, 0));
    // At minute 0 nothing was Ready yet.
    assert_eq!(r.buckets[0].min_ready, 0);
    assert_eq!(r.buckets[1].end, counts(2, 0, 0));
    assert_eq!(r.buckets[1].min_ready, 1, "the outage shows");
    assert_eq!(r.buckets[2].end, counts(1, 0, 1));
    assert_eq!(r.buckets[2].min_ready, 1);
}

#[test]
fn deleted_nodes_leave_the_counts_and_other_conditions_do_not_count() {
    use ConditionStatus::*;
    let mut pressure = ready(3, 1, "a", False);
    if let EventKind::ConditionChanged { condition, .. } = &mut pressure.kind {
        *condition = "MemoryPressure".into();
    }
    let events = [
        registered(1, 0, "a", Some(True)),
        registered(2, 0, "b", Some(True)),
        pressure,
        event(
            4,
            5,
            Some("b"),
            EventKind::Deleted {
                reason: "gone".into(),
            },
        ),
        // A condition change for a node no longer registered changes nothing.
        ready(5, 6, "b", False),
    ];
    let r = series(&events, 0, 10, 2);
    assert_eq!(r.buckets[0].end, counts(2, 0, 0));
    assert_eq!(r.buckets[1].end, counts(1, 0, 0));
    assert_eq!(r.buckets[1].min_ready, 1);
}

#[test]
fn history_before_the_range_sets_the_start_and_a_clock_step_back_reopens_nothing() {
    use ConditionStatus::*;
    let events = [
        registered(1, 0, "a", Some(True)),
        registered(2, 0, "b", Some(True)),
        ready(3, 5, "b", False),
        // The range starts at minute 10.
        ready(4, 15, "a", False),
        // The wall clock stepped back to minute 11: counted in the current bucket.
        ready(5, 11, "a", True),
    ];
    let r = series(&events, 10, 20, 2);
    assert_eq!(r.buckets[0].end, counts(1, 1, 0));
    assert_eq!(r.buckets[0].min_ready, 1);
    assert_eq!(r.buckets[1].end, counts(1, 1, 0));
    assert_eq!(r.buckets[1].min_ready, 0, "a was down at minute 15");
}

#[test]
fn controller_downtime_becomes_gaps() {
    let started = |seq, minute, downtime: Option<f64>| {
        event(
            seq,
            minute,
            None,
            EventKind::ControllerStarted {
                instance: "i".into(),
                downtime_seconds: downtime,
                previous_stop_clean: false,
            },
        )
    };
    let stopped = |seq, minute| {
        event(
            seq,
            minute,
            None,
            EventKind::ControllerStopped {
                instance: "i".into(),
            },
        )
    };
    let events = [
        started(1, 0, None),
        stopped(2, 2),
        started(3, 5, Some(180.0)),
        // An unclean stop: only the next start knows the downtime.
        started(4, 9, Some(60.0)),
        stopped(5, 12),
    ];
    let r = series(&events, 0, 20, 4);
    let gap = |from: i64, to: Option<i64>| Gap {
        from: Micros(from * MINUTE),
        to: to.map(|t| Micros(t * MINUTE)),
    };
    assert_eq!(
        r.gaps,
        vec![gap(2, Some(5)), gap(8, Some(9)), gap(12, None)]
    );
}

#[test]
fn no_history_means_no_buckets() {
    let s = ReadinessSeries::new(Micros(10), Micros(10), 100);
    let r = s.finish(None);
    assert!(r.buckets.is_empty());
    assert_eq!(r.from, None);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["buckets"], serde_json::json!([]));
}

#[test]
fn buckets_serialize_flat() {
    let b = Bucket {
        end: counts(3, 1, 2),
        min_ready: 2,
    };
    assert_eq!(
        serde_json::to_value(b).unwrap(),
        serde_json::json!({"ready": 3, "notReady": 1, "unknown": 2, "minReady": 2})
    );
}

/// The files under `console/`, by name.
fn console_files() -> Vec<String> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("console");
    let mut names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn every_console_file_is_compiled_in_and_every_reference_resolves() {
    let mut compiled: Vec<String> = ASSETS.iter().map(|a| a.name.to_string()).collect();
    compiled.sort();
    assert_eq!(
        compiled,
        console_files(),
        "ASSETS must list exactly the files under console/"
    );
    let import = regex::Regex::new(r#"(?:from|import)\s*['"]\./([\w.-]+)['"]"#).unwrap();
    let reference = regex::Regex::new(r#"/ui/assets/([\w.-]+)"#).unwrap();
    for asset in ASSETS {
        let text = std::str::from_utf8(asset.body).expect("assets are UTF-8 text");
        for found in import
            .captures_iter(text)
            .chain(reference.captures_iter(text))
        {
            let target = &found[1];
            assert!(
                ASSETS.iter().any(|a| a.name == target),
                "{} refers to {target}, which is not compiled in",
                asset.name
            );
        }
        // Nothing is loaded from elsewhere (the SVG namespace is a name, not a load).
        let rest = text.replace("http://www.w3.org/2000/svg", "");
        assert!(
            !rest.contains("http://") && !rest.contains("https://") && !rest.contains("//cdn"),
            "{} reaches outside the server",
            asset.name
        );
    }
}

#[test]
fn assets_carry_types_tags_and_revalidate() {
    let response = serve_asset("app.js", &HeaderMap::new());
    assert_eq!(response.status(), StatusCode::OK);
    let h = response.headers();
    assert_eq!(h[header::CONTENT_TYPE], "text/javascript; charset=utf-8");
    assert_eq!(h[header::CACHE_CONTROL], "no-cache");
    assert!(h.get(header::CONTENT_SECURITY_POLICY).is_none());
    let tag = h[header::ETAG].clone();
    assert_ne!(
        tag,
        serve_asset("api.js", &HeaderMap::new()).headers()[header::ETAG]
    );

    let mut again = HeaderMap::new();
    again.insert(header::IF_NONE_MATCH, tag.clone());
    let response = serve_asset("app.js", &again);
    assert_eq!(response.status(), StatusCode::NOT_MODIFIED);
    assert_eq!(response.headers()[header::ETAG], tag);

    let mut stale = HeaderMap::new();
    stale.insert(header::IF_NONE_MATCH, HeaderValue::from_static("\"0\""));
    assert_eq!(serve_asset("app.js", &stale).status(), StatusCode::OK);

    let index = serve_asset(INDEX, &HeaderMap::new());
    assert!(index.headers()[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap()
        .contains("default-src 'self'"));
    assert_eq!(
        serve_asset("../Cargo.toml", &HeaderMap::new()).status(),
        StatusCode::NOT_FOUND
    );
}
