//! kube-state-metrics' node series, with its names, labels and values, so
//! that kube-prometheus's node alerts and the Grafana boards built on
//! kube-state-metrics work against nodekeeper unchanged. Each family is
//! what kube-state-metrics v2 makes of a Node (kubernetes/kube-state-metrics
//! at c92fe0c5, internal/store/node.go; the line numbers below are that
//! file's), from the Node nodekeeper serves (`k8s::node`):
//!
//! - `kube_node_created` (86-108): `metadata.creationTimestamp`, Unix seconds.
//! - `kube_node_info` (133-183): `nodeInfo` fields, `provider_id`, `pod_cidr`,
//!   `kubeproxy_version="deprecated"` and the last `InternalIP` address.
//! - `kube_node_labels` (210-233): only with `--metric-labels-allowlist`
//!   naming `nodes`; each allowed label as `label_<snake_case>`
//!   (internal/store/utils.go:85-162, conflicts suffixed `_conflictN`).
//! - `kube_node_spec_taint` (289-315): one series per taint, `key`, `value`, `effect`.
//! - `kube_node_spec_unschedulable` (317-334): 1 while cordoned.
//! - `kube_node_status_allocatable` / `_capacity` (336-501): `resource`, `unit`
//!   (`cpu` in `core`, `memory` in `byte`, `pods` an `integer`).
//! - `kube_node_status_condition` (503-536): three series per condition,
//!   `status` `true`, `false`, `unknown` (lower case, utils.go:65-79), 1 on the current one.
//!
//! Every series leads with `node` (wrapNodeFunc, 538-550).
//!
//! A node's lines are made once per change of the node (its
//! `resourceVersion`) and kept; a scrape with no node changed since the
//! last reuses the whole text, and one with some changed re-renders only
//! those and joins the kept pieces.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::sync::Mutex;

use bytes::{Bytes, BytesMut};

use crate::model::{AddressKind, ConditionStatus, Node};

/// The families in the order they are served, with their help texts
/// (kube-state-metrics' own).
const FAMILIES: [(&str, &str); 8] = [
    ("kube_node_created", "Unix creation timestamp"),
    ("kube_node_info", "Information about a cluster node."),
    (
        "kube_node_labels",
        "Kubernetes labels converted to Prometheus labels.",
    ),
    ("kube_node_spec_taint", "The taint of a cluster node."),
    (
        "kube_node_spec_unschedulable",
        "Whether a node can schedule new pods.",
    ),
    (
        "kube_node_status_allocatable",
        "The allocatable for different resources of a node that are available for scheduling.",
    ),
    (
        "kube_node_status_capacity",
        "The capacity for different resources of a node.",
    ),
    (
        "kube_node_status_condition",
        "The condition of a cluster node.",
    ),
];
const LABELS: usize = 2;

/// `--metric-labels-allowlist`, as kube-state-metrics parses it
/// (pkg/options/types.go, `LabelsAllowList.Set`): `RESOURCE=[key,...],...`.
/// Only `nodes` (or `*`, every resource) concerns nodekeeper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelsAllowlist {
    /// The patterns for nodes; `None`: no `kube_node_labels` at all.
    nodes: Option<Vec<String>>,
}

impl LabelsAllowlist {
    /// Parses the flag's value; an error says what is wrong and what is expected.
    pub fn parse(text: &str) -> Result<LabelsAllowlist, String> {
        const FORMAT: &str =
            "expected RESOURCE=[LABEL,...] separated by commas, e.g. nodes=[topology.kubernetes.io/zone,kubernetes.io/arch] or nodes=[*]";
        let mut nodes: Option<Vec<String>> = None;
        let mut rest = text.trim();
        while !rest.is_empty() {
            let (resource, after) = rest
                .split_once("=[")
                .ok_or_else(|| format!("{text:?}: {FORMAT}"))?;
            let (keys, after) = after
                .split_once(']')
                .ok_or_else(|| format!("{text:?}: a [ without its ]; {FORMAT}"))?;
            let resource = resource.trim();
            if resource.is_empty() || resource.contains([',', '[', ']', '=']) {
                return Err(format!("{text:?}: {FORMAT}"));
            }
            let keys: Vec<String> = keys
                .split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .map(str::to_string)
                .collect();
            if let Some(bad) = keys.iter().find(|k| k.matches('*').count() > 1) {
                return Err(format!(
                    "{text:?}: {bad:?} has more than one *; a pattern takes one (prefix-*, *-suffix or *)"
                ));
            }
            if resource == "nodes" || resource == "*" {
                nodes.get_or_insert_with(Vec::new).extend(keys);
            }
            rest = after.trim_start();
            if let Some(next) = rest.strip_prefix(',') {
                rest = next.trim_start();
            } else if !rest.is_empty() {
                return Err(format!("{text:?}: {FORMAT}"));
            }
        }
        Ok(LabelsAllowlist { nodes })
    }

    /// The labels of `labels` the list allows, as kube-state-metrics picks
    /// them (internal/store/utils.go `createPrometheusLabelKeysValues`): a
    /// `*` first allows all; one `*` inside a pattern matches any text.
    fn allowed<'a>(&self, labels: &'a BTreeMap<String, String>) -> Vec<(&'a str, &'a str)> {
        let Some(patterns) = &self.nodes else {
            return Vec::new();
        };
        let mut allowed: BTreeMap<&str, &str> = BTreeMap::new();
        for (i, pattern) in patterns.iter().enumerate() {
            if pattern == "*" {
                if i == 0 {
                    return labels
                        .iter()
                        .map(|(k, v)| (k.as_str(), v.as_str()))
                        .collect();
                }
                continue;
            }
            for (k, v) in labels {
                let hit = match pattern.split_once('*') {
                    None => k == pattern,
                    Some((prefix, suffix)) => {
                        k.len() >= prefix.len() + suffix.len()
                            && k.starts_with(prefix)
                            && k.ends_with(suffix)
                    }
                };
                if hit {
                    allowed.insert(k, v);
                }
            }
        }
        allowed.into_iter().collect()
    }
}

/// `--resources`, as kube-state-metrics takes it (kubernetes/kube-state-metrics
/// at c92fe0c5): a comma-separated list, each name trimmed and empty ones
/// dropped (pkg/options/types.go:91-100, `ResourceSet.Set`), and no name
/// at all meaning every resource (pkg/app/server.go:215-216). A name that
/// is not one of its resources is refused, as its builder refuses it
/// (internal/store/builder.go:121). nodekeeper has nodes only: what the list
/// decides here is whether `nodes` is in it, i.e. whether the `kube_node_*`
/// series are served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResourceSet {
    nodes: bool,
}

/// kube-state-metrics' resources (pkg/options/resource.go:28-62, `DefaultResources`).
const KUBE_STATE_METRICS_RESOURCES: [&str; 33] = [
    "certificatesigningrequests",
    "configmaps",
    "cronjobs",
    "customresourcedefinitions",
    "daemonsets",
    "deployments",
    "endpointslices",
    "horizontalpodautoscalers",
    "ingresses",
    "jobs",
    "leases",
    "limitranges",
    "mutatingadmissionpolicies",
    "mutatingadmissionpolicybindings",
    "mutatingwebhookconfigurations",
    "namespaces",
    "networkpolicies",
    "nodes",
    "persistentvolumes",
    "persistentvolumeclaims",
    "poddisruptionbudgets",
    "pods",
    "replicasets",
    "replicationcontrollers",
    "resourcequotas",
    "secrets",
    "services",
    "statefulsets",
    "storageclasses",
    "validatingadmissionpolicies",
    "validatingadmissionpolicybindings",
    "validatingwebhookconfigurations",
    "volumeattachments",
];

impl Default for ResourceSet {
    /// Every resource, as kube-state-metrics without the flag.
    fn default() -> ResourceSet {
        ResourceSet { nodes: true }
    }
}

impl ResourceSet {
    /// Parses the flag's value; an unknown name is an error naming it and
    /// the names there are.
    pub fn parse(text: &str) -> Result<ResourceSet, String> {
        let names: Vec<&str> = text
            .split(',')
            .map(str::trim)
            .filter(|name| !name.is_empty())
            .collect();
        if let Some(unknown) = names
            .iter()
            .find(|name| !KUBE_STATE_METRICS_RESOURCES.contains(name))
        {
            return Err(format!(
                "resource {unknown:?} does not exist; kube-state-metrics' resources are {} \
                 (nodekeeper makes the series of nodes only: a list without nodes, e.g. pods, serves none)",
                KUBE_STATE_METRICS_RESOURCES.join(",")
            ));
        }
        Ok(ResourceSet {
            nodes: names.is_empty() || names.contains(&"nodes"),
        })
    }

    /// Whether the `kube_node_*` series are served.
    pub fn nodes(&self) -> bool {
        self.nodes
    }
}

/// One node's lines, per family, and the version they were made from.
struct Rendered {
    resource_version: u64,
    families: [String; FAMILIES.len()],
}

#[derive(Default)]
struct Cache {
    nodes: HashMap<String, Rendered>,
    /// The nodes (name, resourceVersion) the text was joined from, in order.
    joined_from: Vec<(String, u64)>,
    text: Bytes,
}

/// The node series, kept between scrapes.
#[derive(Default)]
pub struct NodeSeries {
    allowlist: LabelsAllowlist,
    cache: Mutex<Cache>,
}

impl NodeSeries {
    pub fn new(allowlist: LabelsAllowlist) -> NodeSeries {
        NodeSeries {
            allowlist,
            cache: Mutex::default(),
        }
    }

    /// The families' text for `nodes` (in name order): kept as it is when
    /// no node changed, else joined again from each node's kept lines,
    /// made anew for the nodes that changed. The same text serves both
    /// exposition formats (gauges only).
    pub fn render<'a>(&self, nodes: impl ExactSizeIterator<Item = &'a Node>) -> Bytes {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        let nodes: Vec<&Node> = nodes.collect();
        let unchanged = cache.joined_from.len() == nodes.len()
            && cache
                .joined_from
                .iter()
                .zip(&nodes)
                .all(|((name, rv), n)| *rv == n.resource_version && *name == n.name);
        if unchanged && !cache.text.is_empty() {
            return cache.text.clone();
        }
        let Cache {
            nodes: kept,
            joined_from,
            text,
        } = &mut *cache;
        for n in &nodes {
            let fresh = kept
                .get(&n.name)
                .is_some_and(|r| r.resource_version == n.resource_version);
            if !fresh {
                kept.insert(
                    n.name.clone(),
                    Rendered {
                        resource_version: n.resource_version,
                        families: render_node(n, &self.allowlist),
                    },
                );
            }
        }
        if kept.len() > nodes.len() {
            let present: std::collections::HashSet<&str> =
                nodes.iter().map(|n| n.name.as_str()).collect();
            kept.retain(|name, _| present.contains(name.as_str()));
        }
        let mut out = BytesMut::with_capacity(text.len().max(4096));
        for (f, (name, help)) in FAMILIES.iter().enumerate() {
            if f == LABELS && self.allowlist.nodes.is_none() {
                continue;
            }
            out.extend_from_slice(
                format!("# HELP {name} {help}\n# TYPE {name} gauge\n").as_bytes(),
            );
            for n in &nodes {
                if let Some(r) = kept.get(&n.name) {
                    out.extend_from_slice(r.families[f].as_bytes());
                }
            }
        }
        *joined_from = nodes
            .iter()
            .map(|n| (n.name.clone(), n.resource_version))
            .collect();
        *text = out.freeze();
        text.clone()
    }
}

/// A label value as the text formats write it: `\`, `"` and line feeds escaped.
fn escaped(value: &str) -> std::borrow::Cow<'_, str> {
    if !value.contains(['\\', '"', '\n']) {
        return value.into();
    }
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .into()
}

/// Writes `name{node="N",k="v",...} value`.
fn line(out: &mut String, name: &str, node: &str, labels: &[(&str, &str)], value: f64) {
    let _ = write!(out, "{name}{{node=\"{}\"", escaped(node));
    for (k, v) in labels {
        let _ = write!(out, ",{k}=\"{}\"", escaped(v));
    }
    let _ = writeln!(out, "}} {value}");
}

/// One node's lines, per family.
fn render_node(n: &Node, allowlist: &LabelsAllowlist) -> [String; FAMILIES.len()] {
    let mut f: [String; FAMILIES.len()] = Default::default();
    let node = n.name.as_str();
    if n.created.0 > 0 {
        // Go's Time.Unix(): whole seconds, rounded down.
        line(
            &mut f[0],
            "kube_node_created",
            node,
            &[],
            n.created.0.div_euclid(1_000_000) as f64,
        );
    }
    let info = &n.node_info;
    let internal_ip = n
        .addresses
        .iter()
        .rev()
        .find(|a| a.kind == AddressKind::InternalIP)
        .map_or("", |a| a.address.as_str());
    line(
        &mut f[1],
        "kube_node_info",
        node,
        &[
            ("kernel_version", &info.kernel_version),
            ("os_image", &info.os_image),
            ("container_runtime_version", &info.container_runtime_version),
            ("kubelet_version", &info.kubelet_version),
            ("kubeproxy_version", "deprecated"),
            ("provider_id", &n.provider_id),
            // nodekeeper allocates no pod CIDRs.
            ("pod_cidr", ""),
            ("system_uuid", &info.system_uuid),
            ("internal_ip", internal_ip),
        ],
        1.0,
    );
    if allowlist.nodes.is_some() {
        let labels = crate::k8s::node_labels(n);
        let names = prometheus_label_names(allowlist.allowed(&labels));
        let pairs: Vec<(&str, &str)> = names.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        line(&mut f[LABELS], "kube_node_labels", node, &pairs, 1.0);
    }
    for t in &n.taints {
        line(
            &mut f[3],
            "kube_node_spec_taint",
            node,
            &[("key", &t.key), ("value", &t.value), ("effect", &t.effect)],
            1.0,
        );
    }
    line(
        &mut f[4],
        "kube_node_spec_unschedulable",
        node,
        &[],
        if n.unschedulable { 1.0 } else { 0.0 },
    );
    // Allocatable equals capacity: nothing is reserved (k8s::node).
    let pods: f64 = crate::k8s::MAX_PODS.parse().unwrap_or(0.0);
    for (i, name) in [
        (5, "kube_node_status_allocatable"),
        (6, "kube_node_status_capacity"),
    ] {
        for (resource, unit, value) in [
            ("cpu", "core", n.capacity.cpu_millis as f64 / 1000.0),
            ("memory", "byte", n.capacity.memory_bytes as f64),
            ("pods", "integer", pods),
        ] {
            line(
                &mut f[i],
                name,
                node,
                &[("resource", resource), ("unit", unit)],
                value,
            );
        }
    }
    for c in &n.conditions {
        for (status, is) in [
            ("true", ConditionStatus::True),
            ("false", ConditionStatus::False),
            ("unknown", ConditionStatus::Unknown),
        ] {
            line(
                &mut f[7],
                "kube_node_status_condition",
                node,
                &[("condition", &c.kind), ("status", status)],
                if c.status == is { 1.0 } else { 0.0 },
            );
        }
    }
    f
}

/// Label keys as kube-state-metrics names them (utils.go:85-162): sorted,
/// `label_` + snake_case of the key with every character outside
/// `[a-zA-Z0-9_]` an `_`; names that collide become `NAME_conflict1`,
/// `NAME_conflict2`, … in key order.
fn prometheus_label_names<'a>(pairs: Vec<(&'a str, &'a str)>) -> Vec<(String, &'a str)> {
    let mut out: Vec<(String, &str)> = Vec::with_capacity(pairs.len());
    let mut used: HashMap<String, usize> = HashMap::new();
    let mut conflicts: HashMap<String, usize> = HashMap::new();
    let next_free = |base: &str, count: &mut usize, used: &HashMap<String, usize>| loop {
        *count += 1;
        let candidate = format!("{base}_conflict{count}");
        if !used.contains_key(&candidate) {
            return candidate;
        }
    };
    for (key, value) in pairs {
        let base = format!("label_{}", snake_case(&sanitize(key)));
        let mut name = base.clone();
        if let Some(count) = conflicts.get(&base).copied() {
            let mut count = count;
            name = next_free(&base, &mut count, &used);
            conflicts.insert(base.clone(), count);
        } else if let Some(&at) = used.get(&name) {
            let mut count = 0;
            let renamed = next_free(&base, &mut count, &used);
            used.remove(&name);
            out[at].0 = renamed.clone();
            used.insert(renamed, at);
            name = next_free(&base, &mut count, &used);
            conflicts.insert(base.clone(), count);
        }
        used.insert(name.clone(), out.len());
        out.push((name, value));
    }
    out
}

/// `SanitizeLabelName`: every character outside `[a-zA-Z0-9_]` becomes `_`.
fn sanitize(key: &str) -> String {
    key.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// `toSnakeCase`: `_` between a lower-case letter or digit and the capital
/// after it (`([a-z0-9])([A-Z])`), then all lower case.
fn snake_case(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 4);
    let mut previous: Option<char> = None;
    for c in s.chars() {
        if c.is_ascii_uppercase()
            && previous.is_some_and(|p| p.is_ascii_lowercase() || p.is_ascii_digit())
        {
            out.push('_');
            // regexp's ReplaceAll does not overlap matches: "aBC" is "a_bc".
            previous = None;
        } else {
            previous = Some(c);
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Address, Condition, Micros, Resources, Taint};

    fn node(name: &str, rv: u64) -> Node {
        let mut n = Node {
            name: name.into(),
            uid: "u".into(),
            created: Micros(1_700_000_000_900_000),
            resource_version: rv,
            source: "static".into(),
            labels: BTreeMap::from([
                ("topology.kubernetes.io/zone".into(), "rack-a".into()),
                ("tier".into(), "gold".into()),
            ]),
            annotations: BTreeMap::new(),
            external_id: String::new(),
            provider_id: "aws:///eu-west-1a/i-1".into(),
            capacity: Resources {
                cpu_millis: 1500,
                memory_bytes: 3 << 30,
            },
            unschedulable: true,
            taints: vec![Taint {
                key: "node.kubernetes.io/unreachable".into(),
                value: String::new(),
                effect: "NoExecute".into(),
                added: None,
            }],
            addresses: vec![Address {
                kind: AddressKind::InternalIP,
                address: "127.0.0.5".into(),
            }],
            conditions: vec![Condition {
                kind: "Ready".into(),
                status: ConditionStatus::Unknown,
                last_heartbeat: Micros(0),
                last_transition: Micros(0),
                reason: "NodeStatusUnknown".into(),
                message: String::new(),
            }],
            node_info: Default::default(),
            reported: Default::default(),
        };
        n.node_info.kernel_version = "6.1 \"x\"".into();
        n
    }

    #[test]
    fn a_node_reads_as_kube_state_metrics_writes_it() {
        let series =
            NodeSeries::new(LabelsAllowlist::parse("nodes=[topology.kubernetes.io/*]").unwrap());
        let n = node("edge-1", 3);
        let text = series.render([&n].into_iter());
        let text = std::str::from_utf8(&text).unwrap();
        for want in [
            "# TYPE kube_node_status_condition gauge\n",
            "kube_node_created{node=\"edge-1\"} 1700000000\n",
            "kube_node_info{node=\"edge-1\",kernel_version=\"6.1 \\\"x\\\"\",os_image=\"\",container_runtime_version=\"\",kubelet_version=\"\",kubeproxy_version=\"deprecated\",provider_id=\"aws:///eu-west-1a/i-1\",pod_cidr=\"\",system_uuid=\"\",internal_ip=\"127.0.0.5\"} 1\n",
            "kube_node_labels{node=\"edge-1\",label_topology_kubernetes_io_zone=\"rack-a\"} 1\n",
            "kube_node_spec_taint{node=\"edge-1\",key=\"node.kubernetes.io/unreachable\",value=\"\",effect=\"NoExecute\"} 1\n",
            "kube_node_spec_unschedulable{node=\"edge-1\"} 1\n",
            "kube_node_status_capacity{node=\"edge-1\",resource=\"cpu\",unit=\"core\"} 1.5\n",
            "kube_node_status_allocatable{node=\"edge-1\",resource=\"memory\",unit=\"byte\"} 3221225472\n",
            "kube_node_status_capacity{node=\"edge-1\",resource=\"pods\",unit=\"integer\"} 110\n",
            "kube_node_status_condition{node=\"edge-1\",condition=\"Ready\",status=\"true\"} 0\n",
            "kube_node_status_condition{node=\"edge-1\",condition=\"Ready\",status=\"false\"} 0\n",
            "kube_node_status_condition{node=\"edge-1\",condition=\"Ready\",status=\"unknown\"} 1\n",
        ] {
            assert!(text.contains(want), "{want} in {text}");
        }
        assert!(!text.contains("label_tier"), "not allowed: {text}");
        // Without the flag, no kube_node_labels at all (as kube-state-metrics).
        let text = NodeSeries::default().render([&n].into_iter());
        assert!(!std::str::from_utf8(&text)
            .unwrap()
            .contains("kube_node_labels"));
    }

    #[test]
    fn unchanged_nodes_are_not_rendered_again() {
        let series = NodeSeries::default();
        let (a, mut b) = (node("a", 1), node("b", 2));
        let first = series.render([&a, &b].into_iter());
        let again = series.render([&a, &b].into_iter());
        assert_eq!(first.as_ptr(), again.as_ptr(), "the same text, not a copy");
        b.unschedulable = false;
        b.resource_version = 9;
        let changed = series.render([&a, &b].into_iter());
        let text = std::str::from_utf8(&changed).unwrap();
        assert!(
            text.contains("kube_node_spec_unschedulable{node=\"b\"} 0"),
            "{text}"
        );
        assert!(
            text.contains("kube_node_spec_unschedulable{node=\"a\"} 1"),
            "{text}"
        );
        let gone = series.render([&b].into_iter());
        assert!(!std::str::from_utf8(&gone).unwrap().contains("node=\"a\""));
    }

    #[test]
    fn the_allowlist_parses_and_names_labels_as_kube_state_metrics_does() {
        assert_eq!(LabelsAllowlist::parse("pods=[app]").unwrap().nodes, None);
        assert_eq!(
            LabelsAllowlist::parse("nodes=[a, b],*=[c]").unwrap().nodes,
            Some(vec!["a".into(), "b".into(), "c".into()])
        );
        assert_eq!(
            LabelsAllowlist::parse("nodes=[]").unwrap().nodes,
            Some(vec![])
        );
        for bad in ["nodes", "nodes=[a", "nodes=[a]x", "=[a]", "nodes=[a*b*]"] {
            assert!(LabelsAllowlist::parse(bad).is_err(), "{bad}");
        }
        let all = LabelsAllowlist::parse("nodes=[*]").unwrap();
        let labels = BTreeMap::from([
            ("a.b".to_string(), "1".to_string()),
            ("a_b".to_string(), "2".to_string()),
            ("a-b".to_string(), "3".to_string()),
            ("fooBar".to_string(), "4".to_string()),
        ]);
        let names = prometheus_label_names(all.allowed(&labels));
        assert_eq!(
            names,
            vec![
                ("label_a_b_conflict1".to_string(), "3"),
                ("label_a_b_conflict2".to_string(), "1"),
                ("label_a_b_conflict3".to_string(), "2"),
                ("label_foo_bar".to_string(), "4"),
            ]
        );
        // A * after another pattern is ignored, as kube-state-metrics ignores it.
        let late = LabelsAllowlist::parse("nodes=[fooBar,*]").unwrap();
        assert_eq!(late.allowed(&labels), vec![("fooBar", "4")]);
    }

    #[test]
    fn resources_parse_as_kube_state_metrics_takes_them() {
        assert!(ResourceSet::default().nodes());
        for with_nodes in ["nodes", " pods , nodes ", "nodes,", "", " , "] {
            assert!(
                ResourceSet::parse(with_nodes).unwrap().nodes(),
                "{with_nodes:?}"
            );
        }
        for without in ["pods", "pods,leases", "leases, "] {
            assert!(!ResourceSet::parse(without).unwrap().nodes(), "{without:?}");
        }
        for unknown in ["node", "nodes,Pods", "csinodes"] {
            let e = ResourceSet::parse(unknown).unwrap_err();
            assert!(
                e.contains("does not exist") && e.contains("volumeattachments"),
                "{e}"
            );
        }
    }
}
