//! Static nodes from `--nodes a,b,c` and `--nodes-file` (plain lines with
//! `#` comments, or YAML / JSON entries with name, address and labels).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;

use serde::Deserialize;

use super::SourceError;
use crate::model::{normalize_name, not_quite_ipv4, Address, AddressKind, NodeSpec, Resources};

/// The `source` of nodes from the command line or a nodes file.
pub const STATIC_SOURCE: &str = "static";

/// Builds the spec of a static node: the ancestor's `GetStaticNodesWithSpec`
/// (external id = name, static capacity) plus what the file says.
pub fn static_spec(
    name: String,
    address: Option<&str>,
    labels: BTreeMap<String, String>,
    capacity: Resources,
) -> NodeSpec {
    // An IP name is its own InternalIP; a host name is resolved at registration.
    let ip = address.unwrap_or(&name).parse::<IpAddr>().ok();
    let mut addresses: Vec<Address> = ip
        .map(|ip| Address {
            kind: AddressKind::InternalIP,
            address: ip.to_string(),
        })
        .into_iter()
        .collect();
    if let Some(host) = address.filter(|a| a.parse::<IpAddr>().is_err()) {
        addresses.push(Address {
            kind: AddressKind::Hostname,
            address: host.to_string(),
        });
    }
    NodeSpec {
        external_id: name.clone(),
        name,
        source: STATIC_SOURCE.into(),
        labels,
        provider_id: String::new(),
        capacity,
        addresses,
    }
}

/// Parses `--nodes a,b,c`.
pub fn parse_node_list(list: &str, capacity: Resources) -> Result<Vec<NodeSpec>, SourceError> {
    let mut specs = Vec::new();
    let mut seen = HashMap::new();
    for (i, raw) in list
        .split(',')
        .enumerate()
        .filter(|(_, s)| !s.trim().is_empty())
    {
        let origin = format!("--nodes entry {}", i + 1);
        let name = normalize_name(raw).map_err(|reason| SourceError::Invalid {
            origin: origin.clone(),
            reason: reason.to_string(),
        })?;
        check_unique(&mut seen, &name, origin)?;
        specs.push(static_spec(name, None, BTreeMap::new(), capacity));
    }
    Ok(specs)
}

/// Reads a nodes file; the format is told by the extension (`.json`, `.yaml`,
/// `.yml`) or, failing that, by its first meaningful character.
pub fn read_nodes_file(path: &str, capacity: Resources) -> Result<Vec<NodeSpec>, SourceError> {
    // Read once at start-up; the controller re-reads the file on the blocking pool.
    #[allow(clippy::disallowed_methods)]
    let text = std::fs::read_to_string(path).map_err(|source| SourceError::Read {
        path: path.into(),
        source,
    })?;
    parse_nodes_text(path, &text, capacity)
}

/// One entry of a YAML or JSON nodes file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEntry {
    name: String,
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// Parses the text of a nodes file named `origin` (for messages).
pub fn parse_nodes_text(
    origin: &str,
    text: &str,
    capacity: Resources,
) -> Result<Vec<NodeSpec>, SourceError> {
    let lower = origin.to_ascii_lowercase();
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .unwrap_or("");
    let structured = lower.ends_with(".json")
        || lower.ends_with(".yaml")
        || lower.ends_with(".yml")
        || first.starts_with('[')
        || first.starts_with('{')
        || first.starts_with("- ")
        || first.starts_with("nodes:");
    if structured {
        parse_structured(origin, text, capacity)
    } else {
        parse_lines(origin, text, capacity)
    }
}

fn parse_lines(
    origin: &str,
    text: &str,
    capacity: Resources,
) -> Result<Vec<NodeSpec>, SourceError> {
    let mut specs = Vec::new();
    let mut seen = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let content = line.split('#').next().unwrap_or("").trim();
        if content.is_empty() {
            continue;
        }
        let at = format!("{origin}:{}", i + 1);
        let mut fields = content.split_whitespace();
        let raw = fields.next().unwrap_or_default();
        let address = fields.next();
        if let Some(extra) = fields.next() {
            return Err(SourceError::Invalid {
                origin: at,
                reason: format!("unexpected {extra:?}: a line is a node name, optionally followed by its address"),
            });
        }
        let name = normalize_name(raw).map_err(|reason| SourceError::Invalid {
            origin: at.clone(),
            reason: reason.to_string(),
        })?;
        if let Some(a) = address {
            check_address(a).map_err(|reason| SourceError::Invalid {
                origin: at.clone(),
                reason,
            })?;
        }
        check_unique(&mut seen, &name, at)?;
        specs.push(static_spec(name, address, BTreeMap::new(), capacity));
    }
    Ok(specs)
}

fn parse_structured(
    origin: &str,
    text: &str,
    capacity: Resources,
) -> Result<Vec<NodeSpec>, SourceError> {
    // YAML is a superset of JSON, so one parser reads both.
    let invalid = |e: serde_yaml_ng::Error| {
        SourceError::Invalid {
        origin: origin.into(),
        reason: format!(
            "{e}; expected a list of entries like `- name: edge-1` with optional `address` and `labels` \
             (or the same under `nodes:`)"
        ),
    }
    };
    let mut doc: serde_yaml_ng::Value = serde_yaml_ng::from_str(text).map_err(invalid)?;
    if let Some(nodes) = doc.get_mut("nodes") {
        doc = std::mem::take(nodes);
    }
    let entries: Vec<FileEntry> = serde_yaml_ng::from_value(doc).map_err(invalid)?;
    let mut specs = Vec::new();
    let mut seen = HashMap::new();
    for (i, entry) in entries.into_iter().enumerate() {
        let at = format!("{origin}: entry {} ({:?})", i + 1, entry.name);
        let name = normalize_name(&entry.name).map_err(|reason| SourceError::Invalid {
            origin: at.clone(),
            reason: reason.to_string(),
        })?;
        if let Some(a) = &entry.address {
            check_address(a).map_err(|reason| SourceError::Invalid {
                origin: at.clone(),
                reason,
            })?;
        }
        check_unique(&mut seen, &name, at)?;
        specs.push(static_spec(
            name,
            entry.address.as_deref(),
            entry.labels,
            capacity,
        ));
    }
    Ok(specs)
}

fn check_address(address: &str) -> Result<(), String> {
    if address.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    if let Some(reason) = not_quite_ipv4(address) {
        return Err(format!("address {reason}"));
    }
    normalize_name(address)
        .map(|_| ())
        .map_err(|_| format!("address {address:?} is neither an IP address nor a host name"))
}

fn check_unique(
    seen: &mut HashMap<String, String>,
    name: &str,
    origin: String,
) -> Result<(), SourceError> {
    if let Some(first) = seen.get(name) {
        return Err(SourceError::Duplicate {
            name: name.into(),
            first: first.clone(),
            second: origin,
        });
    }
    seen.insert(name.into(), origin);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(specs: &[NodeSpec]) -> Vec<&str> {
        specs.iter().map(|s| s.name.as_str()).collect()
    }

    #[test]
    fn node_list_flag_gives_static_specs() {
        let specs = parse_node_list("A, 10.0.0.2,,b", Resources::default()).unwrap();
        assert_eq!(names(&specs), ["a", "10.0.0.2", "b"]);
        assert_eq!(specs[0].external_id, "a");
        assert_eq!(
            specs[0].capacity,
            Resources {
                cpu_millis: 1000,
                memory_bytes: 3 << 30
            }
        );
        assert!(
            specs[0].addresses.is_empty(),
            "a host name is resolved later"
        );
        assert_eq!(
            specs[1].addresses,
            vec![Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.2".into()
            }]
        );
        let err = parse_node_list("a,b_c", Resources::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("--nodes entry 2"), "{err}");
        let err = parse_node_list("a,A", Resources::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("listed twice"), "{err}");
    }

    #[test]
    fn plain_file_reports_the_bad_line_number() {
        let text = "# site A\nedge-1 10.0.0.1\n\nedge-2   # rack 2\nEdge_3\n";
        let err = parse_nodes_text("nodes.txt", text, Resources::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("nodes.txt:5: "), "{err}");
        let specs = parse_nodes_text(
            "nodes.txt",
            &text.replace("Edge_3", "edge-3"),
            Resources::default(),
        )
        .unwrap();
        assert_eq!(names(&specs), ["edge-1", "edge-2", "edge-3"]);
        assert_eq!(specs[0].addresses[0].address, "10.0.0.1");
        let err = parse_nodes_text("n", "a 10.0.0.1 extra\n", Resources::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("n:1") && err.contains("extra"), "{err}");
    }

    #[test]
    fn yaml_and_json_files_carry_addresses_and_labels() {
        let yaml = "nodes:\n  - name: edge-1\n    address: 127.0.0.5\n    labels: {topology.kubernetes.io/zone: a}\n  - name: edge-2\n    address: kubelet.local\n";
        let specs = parse_nodes_text("site.yaml", yaml, Resources::default()).unwrap();
        assert_eq!(names(&specs), ["edge-1", "edge-2"]);
        assert_eq!(specs[0].labels["topology.kubernetes.io/zone"], "a");
        assert_eq!(specs[0].addresses[0].kind, AddressKind::InternalIP);
        assert_eq!(
            specs[1].addresses,
            vec![Address {
                kind: AddressKind::Hostname,
                address: "kubelet.local".into()
            }]
        );
        let json = r#"[{"name": "a", "address": "10.1.1.1"}, {"name": "b"}]"#;
        assert_eq!(
            names(&parse_nodes_text("x", json, Resources::default()).unwrap()),
            ["a", "b"]
        );
        let err = parse_nodes_text(
            "x.json",
            r#"[{"name": "a", "adress": "1.2.3.4"}]"#,
            Resources::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("adress"), "{err}");
        let err = parse_nodes_text(
            "x.yaml",
            "- name: ok\n- name: Bad_Name\n",
            Resources::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("entry 2"), "{err}");
    }

    #[test]
    fn dotted_quads_that_are_not_ipv4_addresses_are_refused() {
        let err = parse_nodes_text("nodes.txt", "a\n\n10.0.0.300\n", Resources::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("nodes.txt:3: "), "{err}");
        let err = parse_nodes_text("nodes.txt", "edge-1 10.0.0.300\n", Resources::default())
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("nodes.txt:1: ") && err.contains("IPv4"),
            "{err}"
        );
        let err = parse_node_list("a,10.0.0.300", Resources::default())
            .unwrap_err()
            .to_string();
        assert!(err.contains("--nodes entry 2"), "{err}");
    }

    #[test]
    fn aliases_and_nesting_cannot_blow_up() {
        // A billion laughs: anchors that would expand to 10^9 strings.
        let mut laughs = "a: &a [x,x,x,x,x,x,x,x,x,x]\n".to_string();
        for (name, prev) in ["b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f", "g", "h"])
        {
            let refs = vec![format!("*{prev}"); 10].join(",");
            laughs.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        laughs.push_str("nodes: *i\n");
        let err = parse_nodes_text("nodes.yaml", &laughs, Resources::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("nodes.yaml: "), "{err}");
        assert!(err.contains("repetition limit"), "{err}");
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        let err = parse_nodes_text("nodes.json", &deep, Resources::default())
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("nodes.json: "), "{err}");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn arbitrary_files_never_panic(text in "\\PC{0,200}") {
                for origin in ["nodes.txt", "nodes.yaml", "nodes.json"] {
                    if let Err(e) = parse_nodes_text(origin, &text, Resources::default()) {
                        prop_assert!(e.to_string().starts_with(origin), "{e}");
                    }
                }
            }

            #[test]
            fn line_files_carry_the_line_of_a_bad_entry(
                lines in prop::collection::vec(
                    "[ a-zA-Z0-9.:#_-]{0,24}".prop_filter("a YAML list item", |l| !l.trim_start().starts_with('-')),
                    0..12,
                )
            ) {
                let text = lines.join("\n");
                match parse_nodes_text("nodes.txt", &text, Resources::default()) {
                    Ok(specs) => {
                        for spec in specs {
                            prop_assert_eq!(normalize_name(&spec.name), Ok(spec.name.clone()));
                        }
                    }
                    Err(SourceError::Invalid { origin, .. }) => {
                        let line: usize = origin.trim_start_matches("nodes.txt:").parse().map_err(|_| TestCaseError::fail(origin.clone()))?;
                        prop_assert!(line >= 1 && line <= lines.len(), "{origin}");
                    }
                    Err(SourceError::Duplicate { .. }) => {}
                    Err(e) => prop_assert!(false, "{e}"),
                }
            }
        }
    }
}
