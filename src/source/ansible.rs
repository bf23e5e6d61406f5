//! Ansible INI inventories for the `inventory` provider: hosts in `[group]`
//! sections, `[group:vars]`, `[group:children]`, and numeric or letter ranges.
//!
//! ```ini
//! edge-0 ansible_host=10.0.0.4          # before any section: ungrouped
//!
//! [web]
//! web-[01:03] cpu=4 memory=8Gi          # web-01, web-02, web-03
//! db-1 ansible_host=10.0.0.9 zone=rack-b labels="disk=ssd,tier=gold"
//!
//! [web:vars]
//! zone=rack-a
//!
//! [site1:children]
//! web
//!
//! [all:vars]
//! region=site-1
//! ```
//!
//! Variables nodekeeper reads (all others, `ansible_user` and so on, are
//! ignored): `ansible_host` (the address: an IP is the InternalIP, a name
//! the Hostname; without it an IP host name is its own address), `zone`,
//! `region`, `cpu`, `memory`, `state` (`running`, `stopped`, …) and `labels`
//! (`"key=value,key=value"`). Host variables win over group variables,
//! a child group's over its parent's, and `[all:vars]` come last, as in Ansible.
//!
//! Every group a host belongs to, directly or through `:children`, becomes
//! the label `nodekeeper.io/group-<group>=true` (not `all` and `ungrouped`),
//! so `nodekeeper.io/group-web=true` selects the web machines.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::cloud::{Instance, InstanceResources};
use super::inventory::{address_of, check_host_address, state_of, zone};

/// The prefix of the label each group becomes.
pub const GROUP_LABEL_PREFIX: &str = "nodekeeper.io/group-";

/// The most hosts one range may expand to.
const MAX_RANGE: u64 = 100_000;

/// Whether `line` is a section header (`[web]`, `[web:vars]`, `[web:children]`).
pub fn is_section_header(line: &str) -> bool {
    line.strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .is_some_and(|name| {
            !name.is_empty()
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
        })
}

/// A variable's value and the line that set it, for messages.
#[derive(Debug, Clone)]
struct Var {
    value: String,
    line: usize,
}

type Vars = BTreeMap<String, Var>;

#[derive(Debug, Default)]
struct Host {
    vars: Vars,
    groups: BTreeSet<String>,
}

enum Section {
    Hosts(String),
    Vars(String),
    Children(String),
}

/// Parses an Ansible INI inventory named `origin`. Errors are `origin:LINE: …`.
pub fn parse_ini(origin: &str, text: &str) -> Result<Vec<Instance>, String> {
    let at = |line: usize, reason: String| format!("{origin}:{line}: {reason}");
    let mut hosts: Vec<(String, Host)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut group_vars: HashMap<String, Vars> = HashMap::new();
    // child -> parents, and where each group was first seen.
    let mut parents: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut declared: HashMap<String, usize> = HashMap::new();
    let mut section = Section::Hosts("ungrouped".into());

    for (i, raw) in text.lines().enumerate() {
        let line_no = i + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
            continue;
        }
        if line.starts_with('[') {
            if !is_section_header(line) {
                return Err(at(
                    line_no,
                    format!("{line:?} is not a section header like [group], [group:vars] or [group:children]"),
                ));
            }
            let name = &line[1..line.len() - 1];
            let (group, kind) = match name.split_once(':') {
                None => (name, None),
                Some((g, k)) => (g, Some(k)),
            };
            check_group(group).map_err(|r| at(line_no, r))?;
            declared.entry(group.to_string()).or_insert(line_no);
            section = match kind {
                None => Section::Hosts(group.into()),
                Some("vars") => Section::Vars(group.into()),
                Some("children") => Section::Children(group.into()),
                Some(other) => {
                    return Err(at(
                        line_no,
                        format!("unknown section kind {other:?} in {line}: use [{group}], [{group}:vars] or [{group}:children]"),
                    ))
                }
            };
            continue;
        }
        let tokens = tokenize(line).map_err(|r| at(line_no, r))?;
        match &section {
            Section::Hosts(group) => {
                let (pattern, assignments) = tokens.split_first().expect("a non-empty line");
                if pattern.contains('=') {
                    return Err(at(
                        line_no,
                        format!("{pattern:?} is a variable where a host name was expected; variables of a group go under [{group}:vars]"),
                    ));
                }
                let mut vars = Vars::new();
                for token in assignments {
                    let (k, v) = token.split_once('=').ok_or_else(|| {
                        at(
                            line_no,
                            format!("{token:?} after the host name is not a key=value variable"),
                        )
                    })?;
                    vars.insert(
                        k.to_string(),
                        Var {
                            value: v.to_string(),
                            line: line_no,
                        },
                    );
                }
                for name in expand(strip_port(pattern)).map_err(|r| at(line_no, r))? {
                    let slot = *index.entry(name.clone()).or_insert_with(|| {
                        hosts.push((name.clone(), Host::default()));
                        hosts.len() - 1
                    });
                    let host = &mut hosts[slot].1;
                    host.groups.insert(group.clone());
                    host.vars
                        .extend(vars.iter().map(|(k, v)| (k.clone(), v.clone())));
                }
            }
            Section::Vars(group) => {
                let joined = tokens.join(" ");
                let (k, v) = split_assignment(&joined).ok_or_else(|| {
                    at(
                        line_no,
                        format!("{line:?} in [{group}:vars] is not a key=value variable"),
                    )
                })?;
                group_vars.entry(group.clone()).or_default().insert(
                    k,
                    Var {
                        value: v,
                        line: line_no,
                    },
                );
            }
            Section::Children(group) => {
                let [child] = tokens.as_slice() else {
                    return Err(at(
                        line_no,
                        format!("{line:?} in [{group}:children] is not one group name"),
                    ));
                };
                check_group(child).map_err(|r| at(line_no, r))?;
                if child == group {
                    return Err(at(
                        line_no,
                        format!("group {group:?} cannot be its own child"),
                    ));
                }
                declared.entry(child.clone()).or_insert(line_no);
                parents
                    .entry(child.clone())
                    .or_default()
                    .insert(group.clone());
            }
        }
    }

    let depth = group_depths(&declared, &parents)
        .map_err(|(group, reason)| at(declared.get(&group).copied().unwrap_or(0), reason))?;
    hosts
        .into_iter()
        .map(|(name, host)| instance(name, host, &parents, &depth, &group_vars))
        .collect::<Result<Vec<_>, (usize, String)>>()
        .map_err(|(line, reason)| at(line, reason))
}

/// Builds one host: its groups with their ancestors, and its variables by precedence.
fn instance(
    name: String,
    host: Host,
    parents: &HashMap<String, BTreeSet<String>>,
    depth: &HashMap<String, usize>,
    group_vars: &HashMap<String, Vars>,
) -> Result<Instance, (usize, String)> {
    let mut groups = BTreeSet::new();
    let mut stack: Vec<&String> = host.groups.iter().collect();
    while let Some(g) = stack.pop() {
        if groups.insert(g.clone()) {
            stack.extend(parents.get(g).into_iter().flatten());
        }
    }
    // Least specific first: all, then groups by depth (parents before
    // children) and name, then the host's own variables.
    let mut ordered: Vec<&String> = groups.iter().filter(|g| *g != "all").collect();
    ordered.sort_by_key(|g| (depth.get(*g).copied().unwrap_or(0), (*g).clone()));
    let mut vars: BTreeMap<&str, &Var> = BTreeMap::new();
    for g in std::iter::once(&"all".to_string()).chain(ordered.iter().copied()) {
        if let Some(gv) = group_vars.get(g) {
            vars.extend(gv.iter().map(|(k, v)| (k.as_str(), v)));
        }
    }
    vars.extend(host.vars.iter().map(|(k, v)| (k.as_str(), v)));

    let get = |key: &str| vars.get(key).copied();
    let bad = |var: &Var, key: &str, reason: String| {
        (
            var.line,
            format!("host {name:?}: {key}={:?}: {reason}", var.value),
        )
    };
    let mut addresses = Vec::new();
    if let Some(v) = get("ansible_host") {
        check_host_address(&v.value).map_err(|r| bad(v, "ansible_host", r))?;
        addresses.push(address_of(&v.value));
    } else if name.parse::<std::net::IpAddr>().is_ok() {
        addresses.push(address_of(&name));
    }
    let cpu = get("cpu")
        .map(|v| crate::quantity::parse_cpu(&v.value).map_err(|r| bad(v, "cpu", r.to_string())))
        .transpose()?;
    let memory = get("memory")
        .map(|v| {
            crate::quantity::parse_memory(&v.value).map_err(|r| bad(v, "memory", r.to_string()))
        })
        .transpose()?;
    let mut labels = BTreeMap::new();
    if let Some(v) = get("labels") {
        for pair in v.value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (k, val) = pair
                .split_once('=')
                .ok_or_else(|| bad(v, "labels", format!("{pair:?} is not key=value")))?;
            labels.insert(k.trim().to_string(), val.trim().to_string());
        }
    }
    for g in groups.iter().filter(|g| *g != "all" && *g != "ungrouped") {
        labels.insert(format!("{GROUP_LABEL_PREFIX}{g}"), "true".into());
    }
    let text = |key: &str| get(key).map(|v| v.value.clone());
    Ok(Instance {
        name,
        addresses,
        external_id: String::new(),
        provider_id: None,
        resources: InstanceResources {
            cpu_millis: cpu,
            memory_bytes: memory,
        },
        zone: zone(text("zone"), text("region")),
        labels,
        state: state_of(get("state").map(|v| v.value.as_str())),
    })
}

/// Each group's depth below `all` (longest chain of parents); a cycle is an error.
fn group_depths(
    declared: &HashMap<String, usize>,
    parents: &HashMap<String, BTreeSet<String>>,
) -> Result<HashMap<String, usize>, (String, String)> {
    fn visit(
        g: &str,
        parents: &HashMap<String, BTreeSet<String>>,
        depth: &mut HashMap<String, usize>,
        path: &mut Vec<String>,
    ) -> Result<usize, (String, String)> {
        if let Some(d) = depth.get(g) {
            return Ok(*d);
        }
        if path.iter().any(|p| p == g) {
            return Err((
                g.to_string(),
                format!(
                    "groups form a cycle through :children ({} -> {g})",
                    path.join(" -> ")
                ),
            ));
        }
        path.push(g.to_string());
        let mut d = 0;
        for p in parents.get(g).into_iter().flatten() {
            d = d.max(visit(p, parents, depth, path)? + 1);
        }
        path.pop();
        depth.insert(g.to_string(), d);
        Ok(d)
    }
    let mut depth = HashMap::new();
    let mut names: Vec<&String> = declared.keys().collect();
    names.sort();
    for g in names {
        visit(g, parents, &mut depth, &mut Vec::new())?;
    }
    Ok(depth)
}

/// A group name must fit in a label name (`nodekeeper.io/group-<group>`).
fn check_group(group: &str) -> Result<(), String> {
    let name = format!("group-{group}");
    let ok = !group.is_empty()
        && name.len() <= 63
        && group
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'))
        && group
            .as_bytes()
            .last()
            .is_some_and(u8::is_ascii_alphanumeric);
    if ok {
        Ok(())
    } else {
        Err(format!(
            "group name {group:?} cannot become the label {GROUP_LABEL_PREFIX}{group}: use letters, digits, '_', '-' and '.', ending with a letter or digit, at most 57 characters"
        ))
    }
}

/// `key=value` or `key = value` of a `:vars` line (the value may be quoted).
fn split_assignment(joined: &str) -> Option<(String, String)> {
    let (k, v) = joined.split_once('=')?;
    let k = k.trim();
    if k.is_empty() || k.contains(char::is_whitespace) {
        return None;
    }
    Some((k.to_string(), v.trim().to_string()))
}

/// Splits a line into whitespace-separated tokens, honouring single and
/// double quotes (which are removed) and dropping a ` #` or ` ;` comment.
fn tokenize(line: &str) -> Result<Vec<String>, String> {
    let mut tokens = Vec::new();
    let mut current = String::new();
    let mut in_token = false;
    let mut quote: Option<char> = None;
    let mut previous_blank = true;
    for c in line.chars() {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => current.push(c),
            None if c == '"' || c == '\'' => {
                quote = Some(c);
                in_token = true;
            }
            None if (c == '#' || c == ';') && previous_blank => break,
            None if c.is_whitespace() => {
                if in_token {
                    tokens.push(std::mem::take(&mut current));
                    in_token = false;
                }
            }
            None => {
                current.push(c);
                in_token = true;
            }
        }
        previous_blank = quote.is_none() && c.is_whitespace();
    }
    if let Some(q) = quote {
        return Err(format!("unclosed {q} quote"));
    }
    if in_token {
        tokens.push(current);
    }
    Ok(tokens)
}

/// `host:22` → `host` (a port is Ansible's, not a node's); IPv6 stays whole.
fn strip_port(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((h, port))
            if !h.contains(':') && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) =>
        {
            h
        }
        _ => host,
    }
}

/// Expands one Ansible range (`web-[01:10]`, `rack-[a:c]`, `n[0:10:2]`).
fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let Some(open) = pattern.find('[') else {
        return Ok(vec![pattern.to_string()]);
    };
    let close = pattern[open..]
        .find(']')
        .map(|c| open + c)
        .ok_or_else(|| format!("{pattern:?} has an unclosed range"))?;
    let (prefix, range, suffix) = (
        &pattern[..open],
        &pattern[open + 1..close],
        &pattern[close + 1..],
    );
    let bad = || format!("{pattern:?}: [{range}] is not a range like [01:10], [0:10:2] or [a:f]");
    let parts: Vec<&str> = range.split(':').collect();
    let (start, end, step) = match parts.as_slice() {
        [s, e] => (*s, *e, 1),
        [s, e, st] => (
            *s,
            *e,
            st.parse::<u64>().ok().filter(|s| *s > 0).ok_or_else(bad)?,
        ),
        _ => return Err(bad()),
    };
    let rests = expand(suffix)?;
    let mut names = Vec::new();
    let mut push = |middle: String| {
        for rest in &rests {
            names.push(format!("{prefix}{middle}{rest}"));
        }
    };
    if let (Ok(a), Ok(b)) = (start.parse::<u64>(), end.parse::<u64>()) {
        if a > b || (b - a) / step >= MAX_RANGE {
            return Err(bad());
        }
        // [01:10] keeps the width of its start.
        let width = if start.starts_with('0') {
            start.len()
        } else {
            0
        };
        for n in (a..=b).step_by(step as usize) {
            push(format!("{n:0width$}"));
        }
    } else if let ([a], [b]) = (start.as_bytes(), end.as_bytes()) {
        if !(a.is_ascii_lowercase() && b.is_ascii_lowercase() && a <= b) {
            return Err(bad());
        }
        for c in (*a..=*b).step_by(step as usize) {
            push((c as char).to_string());
        }
    } else {
        return Err(bad());
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AddressKind;
    use crate::source::cloud::{InstanceState, Zone};

    const SITE: &str = "\
# bare-metal site
edge-0 ansible_host=10.0.0.4

[web]
web-[01:03] cpu=4 memory=8Gi
db-1 ansible_host=10.0.0.9 zone=rack-b labels=\"disk=ssd, tier=gold\" # the database

[web:vars]
zone=rack-a
ansible_user=admin

[db]
db-1 state=stopped

[site1:children]
web

[all:vars]
region = site-1
zone = nowhere
";

    fn by_name<'a>(m: &'a [Instance], name: &str) -> &'a Instance {
        m.iter().find(|i| i.name == name).unwrap()
    }

    #[test]
    fn groups_vars_children_and_ranges() {
        let m = parse_ini("hosts", SITE).unwrap();
        let names: Vec<&str> = m.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(names, ["edge-0", "web-01", "web-02", "web-03", "db-1"]);

        let edge = by_name(&m, "edge-0");
        assert_eq!(edge.addresses[0].address, "10.0.0.4");
        assert!(
            !edge
                .labels
                .keys()
                .any(|k| k.starts_with(GROUP_LABEL_PREFIX)),
            "ungrouped is no label"
        );
        assert_eq!(
            edge.zone,
            Some(Zone {
                region: "site-1".into(),
                zone: "nowhere".into()
            }),
            "[all:vars] apply to every host"
        );

        let web = by_name(&m, "web-02");
        assert!(web.addresses.is_empty(), "a host name is resolved later");
        assert_eq!(web.resources.cpu_millis, Some(4000));
        assert_eq!(web.resources.memory_bytes, Some(8 << 30));
        assert_eq!(
            web.zone.as_ref().unwrap().zone,
            "rack-a",
            "group vars beat all:vars"
        );
        assert_eq!(web.labels["nodekeeper.io/group-web"], "true");
        assert_eq!(
            web.labels["nodekeeper.io/group-site1"], "true",
            "through :children"
        );

        let db = by_name(&m, "db-1");
        assert_eq!(db.zone.as_ref().unwrap().zone, "rack-b", "host vars win");
        assert_eq!(db.addresses[0].kind, AddressKind::InternalIP);
        assert_eq!(db.labels["disk"], "ssd");
        assert_eq!(db.labels["tier"], "gold");
        assert_eq!(db.labels["nodekeeper.io/group-db"], "true");
        assert_eq!(db.labels["nodekeeper.io/group-web"], "true");
        assert_eq!(
            db.state,
            InstanceState::Stopped,
            "host lines in two groups merge"
        );
    }

    #[test]
    fn child_group_vars_beat_parent_vars() {
        let text = "[leaf]\nh1\n[mid:children]\nleaf\n[top:children]\nmid\n\
                    [top:vars]\nzone=top\n[leaf:vars]\nzone=leaf\n[mid:vars]\nzone=mid\nregion=mid\n";
        let m = parse_ini("hosts", text).unwrap();
        assert_eq!(
            m[0].zone,
            Some(Zone {
                region: "mid".into(),
                zone: "leaf".into()
            })
        );
        assert_eq!(m[0].labels.len(), 3);
    }

    #[test]
    fn ranges() {
        assert_eq!(expand("n[8:10]").unwrap(), ["n8", "n9", "n10"]);
        assert_eq!(expand("n[08:10]").unwrap(), ["n08", "n09", "n10"]);
        assert_eq!(expand("n[0:6:3]").unwrap(), ["n0", "n3", "n6"]);
        assert_eq!(expand("r[a:c]").unwrap(), ["ra", "rb", "rc"]);
        assert_eq!(
            expand("r[a:b]-[1:2]").unwrap(),
            ["ra-1", "ra-2", "rb-1", "rb-2"]
        );
        for bad in ["n[2:1]", "n[1:x]", "n[1:2", "n[1]", "n[0:9:0]"] {
            assert!(expand(bad).is_err(), "{bad}");
        }
        assert_eq!(strip_port("h:2222"), "h");
        assert_eq!(strip_port("fd00::1"), "fd00::1");
    }

    #[test]
    fn errors_carry_the_line() {
        let cases = [
            ("[web]\nweb-1 cpu=4\nweb-2 cpu=many\n", "hosts:3:", "cpu"),
            ("[web]\nweb-1 fast\n", "hosts:2:", "key=value"),
            ("[web\nweb-1\n", "hosts:1:", "section header"),
            ("[web:things]\n", "hosts:1:", "unknown section kind"),
            ("[web:vars]\njust-a-word\n", "hosts:2:", "key=value"),
            ("[web]\nweb-1 labels=\"a=b\n", "hosts:2:", "unclosed"),
            ("[web]\nweb-[3:1]\n", "hosts:2:", "range"),
            ("[a:children]\nb\n[b:children]\na\n", "hosts:", "cycle"),
            (
                "[web]\nweb-1\n[web:vars]\nmemory=8GB\n",
                "hosts:4:",
                "memory",
            ),
            (
                "[web]\nweb-1 ansible_host=\"not an address\"\n",
                "hosts:2:",
                "ansible_host",
            ),
            ("[bad/group]\n", "hosts:1:", "section header"),
        ];
        for (text, prefix, needle) in cases {
            let err = parse_ini("hosts", text).unwrap_err();
            assert!(
                err.starts_with(prefix) && err.contains(needle),
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn tokens_and_comments() {
        assert_eq!(
            tokenize("a b=\"x y\" c='#1' # note").unwrap(),
            ["a", "b=x y", "c=#1"]
        );
        assert_eq!(tokenize("a#b").unwrap(), ["a#b"]);
    }
}
