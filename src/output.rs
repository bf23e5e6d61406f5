//! What the CLI prints: kubectl-like node tables, `describe` text and history tables.
//! Every cell is escaped on its way in ([`escape`]).
//!
//! Every function returns a `String` and takes `now` where ages are shown, so
//! the output is deterministic and testable. Column layout reproduces Go's
//! `text/tabwriter` with kubectl's settings, so our tables line up exactly
//! like `kubectl get` and `kubectl describe`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::k8s;
use crate::k8s::table::{node_status, roles};
use crate::logging::terminal::escape;
use crate::model::{self, Event, Micros};

/// kubectl's `get` tab writer: minimum cell width 6, 3 spaces of padding.
const GET_MIN_WIDTH: usize = 6;
const GET_PADDING: usize = 3;
/// kubectl's `describe` tab writer: no minimum width, 2 spaces of padding.
const DESCRIBE_PADDING: usize = 2;

const NONE: &str = "<none>";

pub use crate::duration::age;

/// `kubectl get nodes` (and `-o wide`, whose last columns are ours:
/// INTERNAL-IP, EXTERNAL-IP, SOURCE). Rows keep the order given.
pub fn nodes_table(nodes: &[model::Node], wide: bool, now: Micros) -> String {
    if nodes.is_empty() {
        return "No resources found\n".to_string();
    }
    let mut header = vec!["NAME", "STATUS", "ROLES", "AGE", "VERSION"];
    if wide {
        header.extend(["INTERNAL-IP", "EXTERNAL-IP", "SOURCE"]);
    }
    let mut rows = vec![header.into_iter().map(str::to_string).collect::<Vec<_>>()];
    for node in nodes {
        let mut row = vec![
            node.name.clone(),
            node_status(node),
            roles(node).unwrap_or_else(|| NONE.to_string()),
            age(now.since(node.created)),
            // Known once the kubelet has pushed its status.
            match node.node_info.kubelet_version.as_str() {
                "" => NONE.to_string(),
                version => version.to_string(),
            },
        ];
        if wide {
            let first = |kind| {
                node.addresses
                    .iter()
                    .find(|a| a.kind == kind)
                    .map_or_else(|| NONE.to_string(), |a| a.address.clone())
            };
            row.push(first(model::AddressKind::InternalIP));
            row.push(first(model::AddressKind::ExternalIP));
            row.push(node.source.clone());
        }
        rows.push(row);
    }
    table(&rows)
}

/// `kubectl describe node`, rendered from the same Kubernetes object the API
/// serves (so labels, quantities and heartbeats never disagree with JSON),
/// followed by the node's history as its `Events:` (the events given, in
/// `seq` order, newest last). `heartbeat` is as for [`k8s::node`].
/// Over 80 lines: kubectl's sections, one after another in its order, each a
/// few lines; a function per section would only pass the same node around.
pub fn describe(
    node: &model::Node,
    history: &[Event],
    heartbeat: Option<Micros>,
    now: Micros,
) -> String {
    let k = k8s::node(node, heartbeat);
    let meta = &k.metadata;
    let spec = k.spec.unwrap_or_default();
    let status = k.status.unwrap_or_default();

    // Tab-separated like kubectl's describer; `tabwrite` aligns it afterwards.
    let mut w = String::new();
    line(&mut w, &["Name:", &node.name]);
    line(
        &mut w,
        &["Roles:", &roles(node).unwrap_or_else(|| NONE.to_string())],
    );
    multiline(
        &mut w,
        "Labels:",
        meta.labels
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}={v}")),
    );
    multiline(
        &mut w,
        "Annotations:",
        meta.annotations
            .iter()
            .flatten()
            .map(|(k, v)| format!("{k}: {v}")),
    );
    line(
        &mut w,
        &[
            "CreationTimestamp:",
            &rfc1123z(meta.creation_timestamp.as_ref()),
        ],
    );
    // kubectl sorts taints by effect, then key.
    let mut taints = spec.taints.clone().unwrap_or_default();
    taints.sort_by(|a, b| (&a.effect, &a.key).cmp(&(&b.effect, &b.key)));
    multiline(
        &mut w,
        "Taints:",
        taints.iter().map(|t| match t.value.as_deref() {
            Some(v) if !v.is_empty() => format!("{}={v}:{}", t.key, t.effect),
            _ => format!("{}:{}", t.key, t.effect),
        }),
    );
    line(
        &mut w,
        &[
            "Unschedulable:",
            &spec.unschedulable.unwrap_or(false).to_string(),
        ],
    );

    let conditions = status.conditions.unwrap_or_default();
    if !conditions.is_empty() {
        w.push_str("Conditions:\n");
        line(
            &mut w,
            &[
                "  Type",
                "Status",
                "LastHeartbeatTime",
                "LastTransitionTime",
                "Reason",
                "Message",
            ],
        );
        line(
            &mut w,
            &[
                "  ----",
                "------",
                "-----------------",
                "------------------",
                "------",
                "-------",
            ],
        );
        for c in &conditions {
            // kubectl puts a space after every cell of these rows; kept for identical widths.
            line(
                &mut w,
                &[
                    &format!("  {} ", c.type_),
                    &format!("{} ", c.status),
                    &format!("{} ", rfc1123z(c.last_heartbeat_time.as_ref())),
                    &format!("{} ", rfc1123z(c.last_transition_time.as_ref())),
                    &format!("{} ", c.reason.as_deref().unwrap_or("")),
                    c.message.as_deref().unwrap_or(""),
                ],
            );
        }
    }

    w.push_str("Addresses:\n");
    for a in status.addresses.unwrap_or_default() {
        line(&mut w, &[&format!("  {}:", a.type_), &a.address]);
    }
    for (title, list) in [
        ("Capacity:", status.capacity),
        ("Allocatable:", status.allocatable),
    ] {
        let list = list.unwrap_or_default();
        if !list.is_empty() {
            w.push_str(title);
            w.push('\n');
            // BTreeMap order is kubectl's order: resource names sorted.
            for (name, q) in &list {
                line(&mut w, &[&format!("  {name}:"), &q.0]);
            }
        }
    }
    if let Some(p) = spec.provider_id.as_deref() {
        line(&mut w, &["ProviderID:", p]);
    }

    if history.is_empty() {
        line(&mut w, &["Events:", NONE]);
    } else {
        w.push_str("Events:\n");
        line(&mut w, &["  Seq", "Age", "Kind", "Detail"]);
        line(&mut w, &["  ---", "---", "----", "------"]);
        let mut events: Vec<&Event> = history.iter().collect();
        events.sort_by_key(|e| e.seq); // newest last
        for e in events {
            line(
                &mut w,
                &[
                    &format!("  {}", e.seq),
                    &age(now.since(e.time)),
                    e.kind.name(),
                    &e.kind.detail(),
                ],
            );
        }
    }
    tabwrite(&w, 0, DESCRIBE_PADDING)
}

/// The history as a table (`SEQ TIME NODE KIND DETAIL`), rows in the order given.
pub fn history_table(events: &[Event]) -> String {
    if events.is_empty() {
        return "No events found\n".to_string();
    }
    let mut rows = vec![HISTORY_HEADER.map(str::to_string).to_vec()];
    rows.extend(events.iter().map(|e| history_row(e).to_vec()));
    table(&rows)
}

/// The history table's columns.
pub const HISTORY_HEADER: [&str; 5] = ["SEQ", "TIME", "NODE", "KIND", "DETAIL"];

/// One event as a history table row, its cells escaped ([`escape`]):
/// `nodekeeper history` prints these a page at a time.
pub fn history_row(e: &Event) -> [String; 5] {
    [
        e.seq.to_string(),
        e.time.rfc3339_seconds(),
        escape(e.node.as_deref().unwrap_or("-")).into_owned(),
        e.kind.name().to_string(),
        escape(&e.kind.detail()).into_owned(),
    ]
}

/// Go's `time.RFC1123Z` in UTC (`Mon, 30 Nov 2026 09:23:09 +0000`), as kubectl describe shows times.
fn rfc1123z(t: Option<&Time>) -> String {
    t.map_or_else(
        || NONE.to_string(),
        |t| {
            t.0.to_zoned(jiff::tz::TimeZone::UTC)
                .strftime("%a, %d %b %Y %H:%M:%S %z")
                .to_string()
        },
    )
}

/// A label-style multi-line field: the first value beside the title, the rest
/// below it in the same column, or `<none>`.
fn multiline(w: &mut String, title: &str, values: impl Iterator<Item = String>) {
    let mut first = true;
    for v in values {
        line(w, &[if first { title } else { "" }, &v]);
        first = false;
    }
    if first {
        line(w, &[title, NONE]);
    }
}

/// Appends one tab-separated line. Cells hold text from the network (a
/// pushed message, an annotation, a kubelet's version): their control
/// characters are escaped ([`escape`]), so none ends a cell or a line or
/// reaches the terminal.
fn line(w: &mut String, cells: &[&str]) {
    for (i, cell) in cells.iter().enumerate() {
        if i > 0 {
            w.push('\t');
        }
        w.push_str(&escape(cell));
    }
    w.push('\n');
}

/// A `kubectl get`-style table from rows of cells (header first).
fn table(rows: &[Vec<String>]) -> String {
    let mut w = String::new();
    for row in rows {
        let cells: Vec<&str> = row.iter().map(String::as_str).collect();
        line(&mut w, &cells);
    }
    tabwrite(&w, GET_MIN_WIDTH, GET_PADDING)
}

/// Aligns tab-separated text as Go's `text/tabwriter` does with a space pad
/// character and no flags: a cell is text terminated by a tab (the text after
/// a line's last tab is not part of any column), a column block is a run of
/// consecutive lines that have a cell in that column, and every cell in a
/// block is padded to the block's widest cell plus `padding` (at least
/// `min_width`). Widths count characters, as Go counts runes. (The
/// `tabwriter` crate counts display columns instead, so a cell holding a
/// wide character or a combining mark would be padded unlike kubectl's.)
fn tabwrite(text: &str, min_width: usize, padding: usize) -> String {
    let lines: Vec<Vec<&str>> = text.split('\n').map(|l| l.split('\t').collect()).collect();
    let mut out = String::with_capacity(text.len() * 2);
    let mut widths = Vec::new();
    let layout = Layout {
        lines: &lines,
        min_width,
        padding,
    };
    layout.format(0, lines.len(), &mut widths, &mut out);
    out
}

struct Layout<'a> {
    lines: &'a [Vec<&'a str>],
    min_width: usize,
    padding: usize,
}

impl Layout<'_> {
    /// Go's `Writer.format`: finds the column blocks of column `widths.len()`
    /// within `start..end`, recursing into each for the columns to its right.
    fn format(&self, start: usize, end: usize, widths: &mut Vec<usize>, out: &mut String) {
        let column = widths.len();
        let has_cell = |i: usize| column + 1 < self.lines[i].len();
        let mut done = start;
        let mut i = start;
        while i < end {
            if !has_cell(i) {
                i += 1;
                continue;
            }
            self.write_lines(done, i, widths, out);
            let block = i;
            let mut width = self.min_width;
            while i < end && has_cell(i) {
                width = width.max(self.lines[i][column].chars().count() + self.padding);
                i += 1;
            }
            widths.push(width);
            self.format(block, i, widths, out);
            widths.pop();
            done = i;
        }
        self.write_lines(done, end, widths, out);
    }

    fn write_lines(&self, start: usize, end: usize, widths: &[usize], out: &mut String) {
        for i in start..end {
            let cells = &self.lines[i];
            for (j, cell) in cells.iter().enumerate() {
                out.push_str(cell);
                if j + 1 < cells.len() {
                    if let Some(&width) = widths.get(j) {
                        let pad = width.saturating_sub(cell.chars().count());
                        out.extend(std::iter::repeat_n(' ', pad));
                    }
                }
            }
            // The text after the last newline is written without one, as Go does.
            if i + 1 < self.lines.len() {
                out.push('\n');
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::detail::tests::changed;
    use crate::model::{
        Address, AddressKind, Condition, ConditionStatus, EventKind, Resources, Taint,
    };
    use std::collections::BTreeMap;

    fn at(s: &str) -> Micros {
        Micros::parse_rfc3339(s).expect("test time")
    }

    const NOW: &str = "2026-11-30T12:00:00Z";

    fn node(name: &str, created: &str, ready: Option<ConditionStatus>) -> model::Node {
        model::Node {
            name: name.into(),
            uid: format!("uid-{name}"),
            created: at(created),
            resource_version: 1,
            source: "static".into(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
            external_id: String::new(),
            provider_id: String::new(),
            capacity: Resources::default(),
            unschedulable: false,
            taints: vec![],
            addresses: vec![],
            conditions: ready
                .map(|status| Condition {
                    kind: "Ready".into(),
                    status,
                    last_heartbeat: at("2026-11-30T11:58:00Z"),
                    last_transition: at("2026-11-30T09:23:09Z"),
                    reason: "KubeletReady".into(),
                    message: "kubelet is posting ready status".into(),
                })
                .into_iter()
                .collect(),
            node_info: Default::default(),
            reported: Default::default(),
        }
    }

    fn event(seq: u64, time: &str, node: Option<&str>, kind: EventKind) -> Event {
        Event {
            seq,
            time: at(time),
            node: node.map(str::to_string),
            kind,
        }
    }

    #[test]
    fn nodes_table_like_kubectl_get_nodes() {
        let now = at(NOW);
        let mut a = node(
            "edge-1",
            "2026-11-25T12:00:00Z",
            Some(ConditionStatus::True),
        );
        a.labels
            .insert("node-role.kubernetes.io/edge".into(), String::new());
        a.labels.insert(
            "node-role.kubernetes.io/control-plane".into(),
            String::new(),
        );
        let mut b = node(
            "edge-long-name-2",
            "2026-11-30T11:57:55Z",
            Some(ConditionStatus::False),
        );
        b.unschedulable = true;
        let c = node("c", "2026-11-30T11:59:59Z", Some(ConditionStatus::Unknown));
        let d = node("d", "2026-11-30T12:00:00Z", None);
        let got = nodes_table(&[a, b, c, d], false, now);
        // Each column is as wide as its widest cell plus 3 spaces; the last is not padded.
        let want = "\
NAME               STATUS                        ROLES                AGE    VERSION
edge-1             Ready                         control-plane,edge   5d     <none>
edge-long-name-2   NotReady,SchedulingDisabled   <none>               2m5s   <none>
c                  NotReady                      <none>               1s     <none>
d                  Unknown                       <none>               0s     <none>
";
        assert_eq!(got, want);
    }

    #[test]
    fn nodes_table_wide() {
        let mut n = node("n1", "2026-11-30T11:00:00Z", Some(ConditionStatus::True));
        n.source = "cloud/aws".into();
        n.labels
            .insert("kubernetes.io/role".into(), "worker".into());
        n.addresses = vec![
            Address {
                kind: AddressKind::Hostname,
                address: "n1".into(),
            },
            Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.1".into(),
            },
            Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.2".into(),
            },
        ];
        let got = nodes_table(&[n], true, at(NOW));
        assert_eq!(
            got,
            "NAME   STATUS   ROLES    AGE   VERSION   INTERNAL-IP   EXTERNAL-IP   SOURCE\n\
             n1     Ready    worker   60m   <none>    10.0.0.1      <none>        cloud/aws\n"
        );
    }

    #[test]
    fn empty_tables() {
        assert_eq!(nodes_table(&[], false, at(NOW)), "No resources found\n");
        assert_eq!(nodes_table(&[], true, at(NOW)), "No resources found\n");
        assert_eq!(history_table(&[]), "No events found\n");
    }

    #[test]
    fn minimum_width_is_six_like_kubectl() {
        let rows = vec![
            vec!["A".to_string(), "B".to_string()],
            vec!["x".to_string(), "y".to_string()],
        ];
        assert_eq!(table(&rows), "A     B\nx     y\n");
    }

    #[test]
    fn tabwriter_column_blocks_end_at_lines_without_the_column() {
        // "c" has no cell in column 1, so "a\tb" and "dddd\te" align separately.
        let text = "a\tb\tz\nccc\ndddd\te\n\tf\n";
        assert_eq!(tabwrite(text, 0, 2), "a  b  z\nccc\ndddd  e\n      f\n");
    }

    #[test]
    fn widths_count_characters_as_kubectl_does() {
        // Go's text/tabwriter counts runes: a wide character is one, as is a combining mark.
        assert_eq!(tabwrite("名前\tx\nab\ty\n", 0, 2), "名前  x\nab  y\n");
        assert_eq!(
            tabwrite("e\u{301}\tx\nab\ty\n", 0, 2),
            "e\u{301}  x\nab  y\n"
        );
    }

    #[test]
    fn cells_with_tabs_or_newlines_do_not_break_columns() {
        let mut e = event(
            1,
            "2026-11-30T10:00:00Z",
            Some("n1"),
            EventKind::Deleted {
                reason: "gone\tfrom\nsource\x0c".into(),
            },
        );
        e.node = Some("n\t1".into());
        assert_eq!(
            history_table(&[e]),
            "SEQ   TIME                   NODE   KIND      DETAIL\n\
             1     2026-11-30T10:00:00Z   n\\t1   Deleted   gone\\tfrom\\nsource\\x0c\n"
        );
    }

    /// ESC with CSI (clear the screen) and OSC (set the title, ended by
    /// BEL), a carriage return, a line feed starting a forged row, and
    /// C1's CSI, as a node may push them in a condition message.
    const HOSTILE: &str =
        "ok\x1b[2J\x1b]0;pwned\x07\r\n99  2026-11-30T10:00:00Z  n1  Deleted  forged\u{9b}31m";
    const SHOWN: &str =
        "ok\\x1b[2J\\x1b]0;pwned\\x07\\r\\n99  2026-11-30T10:00:00Z  n1  Deleted  forged\\u{9b}31m";

    fn inert(text: &str) -> bool {
        !text.chars().any(|c| c.is_control() && c != '\n')
    }

    #[test]
    fn pushed_control_characters_are_shown_escaped_in_every_table() {
        let now = at(NOW);
        let mut n = node("n1", "2026-11-30T09:00:00Z", Some(ConditionStatus::False));
        n.conditions[0].message = HOSTILE.into();
        n.annotations.insert("note".into(), HOSTILE.into());
        n.node_info.kubelet_version = "v1.32.4\x1b]8;;http://x\x1b\\".into();
        let e = event(
            5,
            "2026-11-30T10:00:00Z",
            Some("n1"),
            changed(
                Some(ConditionStatus::True),
                ConditionStatus::False,
                "KubeletNotReady",
                HOSTILE,
            ),
        );

        let history = history_table(std::slice::from_ref(&e));
        assert!(inert(&history), "{history:?}");
        assert_eq!(history.lines().count(), 2, "{history}");
        assert!(history.contains(SHOWN), "{history}");

        let describe = describe(&n, &[e], None, now);
        assert!(inert(&describe), "{describe:?}");
        // The annotation, the condition's message and the event.
        assert!(describe.contains(&format!("note: {SHOWN}\n")), "{describe}");
        assert_eq!(describe.matches(SHOWN).count(), 3, "{describe}");

        let nodes = nodes_table(&[n], true, now);
        assert!(inert(&nodes), "{nodes:?}");
        assert!(nodes.contains("v1.32.4\\x1b]8;;http://x\\x1b\\"), "{nodes}");
    }

    fn registered() -> EventKind {
        let mut n = node("n1", "2026-11-30T09:23:09Z", None);
        n.addresses = vec![
            Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.5".into(),
            },
            Address {
                kind: AddressKind::Hostname,
                address: "n1".into(),
            },
        ];
        EventKind::Registered { node: Box::new(n) }
    }

    #[test]
    fn history_table_rows() {
        let events = [
            event(
                7,
                "2026-11-30T09:00:00.250Z",
                None,
                EventKind::ControllerStarted {
                    instance: "a1b2".into(),
                    downtime_seconds: None,
                    previous_stop_clean: false,
                },
            ),
            event(8, "2026-11-30T09:23:09Z", Some("n1"), registered()),
            event(
                12,
                "2026-11-30T10:00:40Z",
                Some("n1"),
                changed(
                    Some(ConditionStatus::True),
                    ConditionStatus::Unknown,
                    "NodeStatusUnknown",
                    "Kubelet stopped posting node status.",
                ),
            ),
        ];
        let want = "\
SEQ   TIME                   NODE   KIND                DETAIL
7     2026-11-30T09:00:00Z   -      ControllerStarted   instance a1b2, new store
8     2026-11-30T09:23:09Z   n1     Registered          from static, addresses InternalIP=10.0.0.5,Hostname=n1
12    2026-11-30T10:00:40Z   n1     ConditionChanged    Ready: True -> Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)
";
        assert_eq!(history_table(&events), want);
    }

    #[test]
    fn describe_like_kubectl_describe_node() {
        let mut n = node(
            "edge-1",
            "2026-11-30T09:23:09Z",
            Some(ConditionStatus::Unknown),
        );
        n.labels
            .insert("node-role.kubernetes.io/edge".into(), String::new());
        n.labels
            .insert("topology.kubernetes.io/zone".into(), "site-a".into());
        n.provider_id = "inventory://rack1/edge-1".into();
        n.capacity = Resources {
            cpu_millis: 1500,
            memory_bytes: 3 << 30,
        };
        n.taints = vec![
            Taint {
                key: "node.kubernetes.io/unreachable".into(),
                value: String::new(),
                effect: "NoSchedule".into(),
                added: None,
            },
            Taint {
                key: "dedicated".into(),
                value: "edge".into(),
                effect: "NoExecute".into(),
                added: None,
            },
        ];
        n.addresses = vec![
            Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.5".into(),
            },
            Address {
                kind: AddressKind::Hostname,
                address: "edge-1".into(),
            },
        ];
        if let Some(c) = n.condition_mut("Ready") {
            c.reason = "NodeStatusUnknown".into();
            c.message = "Kubelet stopped posting node status.".into();
            c.last_transition = at("2026-11-30T11:00:40Z");
        }
        let history = [
            event(
                12,
                "2026-11-30T11:00:40Z",
                Some("edge-1"),
                changed(
                    Some(ConditionStatus::True),
                    ConditionStatus::Unknown,
                    "NodeStatusUnknown",
                    "Kubelet stopped posting node status.",
                ),
            ),
            event(
                8,
                "2026-11-30T09:23:09Z",
                Some("edge-1"),
                changed(None, ConditionStatus::True, "KubeletReady", ""),
            ),
        ];
        // The in-memory heartbeat is newer than the stored one and wins.
        let got = describe(&n, &history, Some(at("2026-11-30T11:59:30.9Z")), at(NOW));
        let want = "\
Name:               edge-1
Roles:              edge
Labels:             kubernetes.io/hostname=edge-1
                    kubernetes.io/os=linux
                    node-role.kubernetes.io/edge=
                    topology.kubernetes.io/zone=site-a
Annotations:        nodekeeper.io/source: static
CreationTimestamp:  Mon, 30 Nov 2026 09:23:09 +0000
Taints:             dedicated=edge:NoExecute
                    node.kubernetes.io/unreachable:NoSchedule
Unschedulable:      false
Conditions:
  Type    Status    LastHeartbeatTime                 LastTransitionTime                Reason              Message
  ----    ------    -----------------                 ------------------                ------              -------
  Ready   Unknown   Mon, 30 Nov 2026 11:59:30 +0000   Mon, 30 Nov 2026 11:00:40 +0000   NodeStatusUnknown   Kubelet stopped posting node status.
Addresses:
  InternalIP:  10.0.0.5
  Hostname:    edge-1
Capacity:
  cpu:     1500m
  memory:  3Gi
  pods:    110
Allocatable:
  cpu:       1500m
  memory:    3Gi
  pods:      110
ProviderID:  inventory://rack1/edge-1
Events:
  Seq  Age   Kind              Detail
  ---  ---   ----              ------
  8    156m  ConditionChanged  Ready: <none> -> True (KubeletReady)
  12   59m   ConditionChanged  Ready: True -> Unknown (NodeStatusUnknown: Kubelet stopped posting node status.)
";
        assert_eq!(got, want);
    }

    #[test]
    fn describe_minimal_node() {
        let n = node("bare", "2026-11-30T11:00:00Z", None);
        let got = describe(&n, &[], None, at(NOW));
        let want = "\
Name:               bare
Roles:              <none>
Labels:             kubernetes.io/hostname=bare
                    kubernetes.io/os=linux
Annotations:        nodekeeper.io/source: static
CreationTimestamp:  Mon, 30 Nov 2026 11:00:00 +0000
Taints:             <none>
Unschedulable:      false
Addresses:
Capacity:
  cpu:     1
  memory:  3Gi
  pods:    110
Allocatable:
  cpu:     1
  memory:  3Gi
  pods:    110
Events:    <none>
";
        assert_eq!(got, want);
    }
}
