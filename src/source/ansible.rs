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
use std::rc::Rc;

use super::cloud::{Instance, InstanceResources};
use super::inventory::{address_of, check_host_address, state_of, zone};

/// The prefix of the label each group becomes.
pub const GROUP_LABEL_PREFIX: &str = "nodekeeper.io/group-";

/// The most hosts one host pattern may expand to, its ranges multiplied.
const MAX_RANGE: usize = 100_000;
/// The most host names all patterns of an inventory may expand to (a name
/// listed twice counts twice): the work a file may cause is bounded, not
/// only its size.
const MAX_EXPANDED: usize = 1_000_000;
/// The longest host name, as a node name may be.
const MAX_NAME: usize = 253;
/// The deepest groups may nest through `:children`.
const MAX_GROUP_DEPTH: usize = 64;
/// The variables nodekeeper reads; all others are ignored.
const READ_VARS: [&str; 7] = [
    "ansible_host",
    "zone",
    "region",
    "cpu",
    "memory",
    "state",
    "labels",
];

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

/// A host: the variables of each line that named it (later lines win), and
/// its groups. A line's variables are shared by every host its pattern
/// names, so a range costs no copies of them.
#[derive(Debug, Default)]
struct Host {
    vars: Vec<Rc<Vars>>,
    groups: BTreeSet<String>,
}

enum Section {
    Hosts(String),
    Vars(String),
    Children(String),
}

/// Parses an Ansible INI inventory named `origin`. Errors are `origin:LINE: …`.
/// Over 80 lines: one pass over the lines, with one arm per section kind, each
/// updating the hosts, groups and variables gathered so far and naming the line
/// it refuses.
pub fn parse_ini(origin: &str, text: &str) -> Result<Vec<Instance>, String> {
    let at = |line: usize, reason: String| format!("{origin}:{line}: {reason}");
    let mut hosts: Vec<(String, Host)> = Vec::new();
    let mut index: HashMap<String, usize> = HashMap::new();
    let mut group_vars: HashMap<String, Vars> = HashMap::new();
    // child -> parents, and where each group was first seen.
    let mut parents: HashMap<String, BTreeSet<String>> = HashMap::new();
    let mut declared: HashMap<String, usize> = HashMap::new();
    let mut section = Section::Hosts("ungrouped".into());
    let mut expanded = 0usize;

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
                for token in assignments.iter().filter(|t| {
                    // Unknown variables are ignored, but must still be key=value.
                    t.split_once('=')
                        .is_none_or(|(k, _)| READ_VARS.contains(&k))
                }) {
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
                let names = expand(strip_port(pattern)).map_err(|r| at(line_no, r))?;
                expanded += names.len();
                if expanded > MAX_EXPANDED {
                    return Err(at(
                        line_no,
                        format!("the inventory expands to more than {MAX_EXPANDED} host names; split it or narrow its ranges"),
                    ));
                }
                let vars = Rc::new(vars);
                for name in names {
                    let slot = *index.entry(name.clone()).or_insert_with(|| {
                        hosts.push((name, Host::default()));
                        hosts.len() - 1
                    });
                    let host = &mut hosts[slot].1;
                    host.groups.insert(group.clone());
                    if !vars.is_empty() {
                        host.vars.push(vars.clone());
                    }
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

/// Builds one host: its groups with their ancestors, and its variables by
/// precedence. Over 80 lines: the groups and the precedence, then one check per
/// variable it reads, each naming the line the variable comes from.
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
    // Most specific first: the host's own lines (the last first), then its
    // groups by depth (children before parents) and name, then `all`.
    let mut ordered: Vec<&String> = groups.iter().filter(|g| *g != "all").collect();
    ordered.sort_by_key(|g| (depth.get(*g).copied().unwrap_or(0), (*g).clone()));
    let all = "all".to_string();
    let get = |key: &str| -> Option<&Var> {
        host.vars
            .iter()
            .rev()
            .find_map(|vars| vars.get(key))
            .or_else(|| {
                ordered
                    .iter()
                    .rev()
                    .copied()
                    .chain(std::iter::once(&all))
                    .find_map(|g| group_vars.get(g)?.get(key))
            })
    };
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
        if path.len() >= MAX_GROUP_DEPTH {
            return Err((
                g.to_string(),
                format!("groups nest more than {MAX_GROUP_DEPTH} levels deep through :children"),
            ));
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

/// Expands a host pattern's Ansible ranges (`web-[01:10]`, `rack-[a:c]`,
/// `n[0:10:2]`, several in one name), at most [`MAX_RANGE`] names of at
/// most [`MAX_NAME`] characters.
fn expand(pattern: &str) -> Result<Vec<String>, String> {
    let mut names = vec![String::new()];
    let mut rest = pattern;
    while let Some(open) = rest.find('[') {
        let close = rest[open..]
            .find(']')
            .map(|c| open + c)
            .ok_or_else(|| format!("{pattern:?} has an unclosed range"))?;
        let (prefix, range) = (&rest[..open], &rest[open + 1..close]);
        let middles = range_values(pattern, range, prefix.len())?;
        if names.len().saturating_mul(middles.len()) > MAX_RANGE {
            return Err(format!(
                "{pattern:?} expands to more than {MAX_RANGE} hosts"
            ));
        }
        names = names
            .iter()
            .flat_map(|name| middles.iter().map(move |m| format!("{name}{prefix}{m}")))
            .collect();
        rest = &rest[close + 1..];
        check_length(pattern, &names, rest.len())?;
    }
    for name in &mut names {
        name.push_str(rest);
    }
    check_length(pattern, &names, 0)?;
    Ok(names)
}

/// Refuses names that would be longer than a host name may be, `more` to come.
fn check_length(pattern: &str, names: &[String], more: usize) -> Result<(), String> {
    if names.iter().any(|n| n.len() + more > MAX_NAME) {
        return Err(format!(
            "{pattern:?} expands to names longer than {MAX_NAME} characters"
        ));
    }
    Ok(())
}

/// The values of one range (`01:10`, `0:10:2`, `a:f`), after `before` characters.
fn range_values(pattern: &str, range: &str, before: usize) -> Result<Vec<String>, String> {
    let bad = || format!("{pattern:?}: [{range}] is not a range like [01:10], [0:10:2] or [a:f]");
    let parts: Vec<&str> = range.split(':').collect();
    let (start, end, step) = match parts.as_slice() {
        [s, e] => (*s, *e, 1),
        [s, e, st] => (
            *s,
            *e,
            st.parse::<usize>()
                .ok()
                .filter(|s| *s > 0)
                .ok_or_else(bad)?,
        ),
        _ => return Err(bad()),
    };
    if let (Ok(a), Ok(b)) = (start.parse::<u64>(), end.parse::<u64>()) {
        if a > b || (b - a) / step as u64 >= MAX_RANGE as u64 {
            return Err(bad());
        }
        // [01:10] keeps the width of its start.
        let width = if start.starts_with('0') {
            start.len()
        } else {
            0
        };
        if before + width > MAX_NAME {
            return Err(format!(
                "{pattern:?} expands to names longer than {MAX_NAME} characters"
            ));
        }
        Ok((a..=b)
            .step_by(step)
            .map(|n| format!("{n:0width$}"))
            .collect())
    } else if let ([a], [b]) = (start.as_bytes(), end.as_bytes()) {
        if !(a.is_ascii_lowercase() && b.is_ascii_lowercase() && a <= b) {
            return Err(bad());
        }
        Ok((*a..=*b)
            .step_by(step)
            .map(|c| (c as char).to_string())
            .collect())
    } else {
        Err(bad())
    }
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

    #[test]
    fn ranges_are_bounded_in_count_length_and_work() {
        let err = expand("h[0:99999][0:99999]").unwrap_err();
        assert!(err.contains("more than 100000 hosts"), "{err}");
        let err = expand(&"h[0:1]".repeat(40)).unwrap_err();
        assert!(err.contains("more than 100000 hosts"), "{err}");
        // Many ranges in one name: expanded one after another, not recursively.
        let err = expand(&"[0:0]".repeat(100_000)).unwrap_err();
        assert!(err.contains("longer than 253"), "{err}");
        let err = expand(&format!("h[{}1:2]", "0".repeat(1_000_000))).unwrap_err();
        assert!(err.contains("longer than 253"), "{err}");
        assert_eq!(
            expand("a[1:2]b[c:d]e").unwrap(),
            ["a1bce", "a1bde", "a2bce", "a2bde"]
        );
        // Every line's ranges count towards the file's bound.
        let text = "[web]\n".to_string() + &"h[0:99999]\n".repeat(11);
        let err = parse_ini("hosts", &text).unwrap_err();
        assert!(
            err.starts_with("hosts:12:") && err.contains("more than 1000000"),
            "{err}"
        );
    }

    #[test]
    fn a_line_of_many_variables_is_not_copied_to_every_host() {
        // 100,000 hosts sharing 2,000 variables: one shared copy, not 2e8.
        let vars: String = (0..2000).map(|i| format!(" v{i}=x")).collect();
        let text = format!("[web]\nh[0:99999]{vars} cpu=2\nh7 cpu=3\n");
        let m = parse_ini("hosts", &text).unwrap();
        assert_eq!(m.len(), 100_000);
        assert_eq!(by_name(&m, "h6").resources.cpu_millis, Some(2000));
        assert_eq!(
            by_name(&m, "h7").resources.cpu_millis,
            Some(3000),
            "later lines win"
        );
    }

    #[test]
    fn group_nesting_is_bounded() {
        let chain = |n: usize| -> String {
            let mut text = "[g0]\nh1\n".to_string();
            for i in 1..n {
                text.push_str(&format!("[g{i}:children]\ng{}\n", i - 1));
            }
            text
        };
        let m = parse_ini("hosts", &chain(60)).unwrap();
        assert_eq!(m[0].labels.len(), 60);
        let err = parse_ini("hosts", &chain(500)).unwrap_err();
        assert!(err.contains("more than 64 levels"), "{err}");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn line() -> impl Strategy<Value = String> {
            prop_oneof![
                "\\[[a-z:_.-]{0,12}\\]",
                "[a-z0-9.-]{1,8}(\\[[0-9a-z]{0,3}:[0-9a-z]{0,3}(:[0-9]{0,2})?\\])?[a-z0-9]{0,3}( [a-z_]{1,12}=[ -~]{0,12}){0,3}",
                "(ansible_host|cpu|memory|zone|state|labels) ?= ?[ -~]{0,16}",
                "[ -~]{0,30}",
            ]
        }

        proptest! {
            #[test]
            fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
                if let Err(e) = parse_ini("hosts", &text) {
                    prop_assert!(e.starts_with("hosts:"), "{e}");
                }
            }

            #[test]
            fn ini_like_text_never_panics_and_errors_carry_the_line(lines in prop::collection::vec(line(), 0..20)) {
                let text = lines.join("\n");
                match parse_ini("hosts", &text) {
                    Ok(machines) => {
                        for m in machines {
                            prop_assert!(m.name.len() <= MAX_NAME);
                        }
                    }
                    Err(e) => prop_assert!(e.starts_with("hosts:"), "{e}"),
                }
            }
        }
    }
}
