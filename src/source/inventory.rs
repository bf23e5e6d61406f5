//! The `inventory` provider: machines listed in a file the site keeps (YAML,
//! JSON, or an Ansible INI inventory), re-read when the file changes.
//!
//! `--cloud-config` is the inventory file itself. YAML and JSON take a list
//! of machines, or the same list under `machines:`:
//!
//! ```yaml
//! machines:
//!   - name: edge-1                 # required; becomes the node name (lowercased)
//!     address: 10.0.0.5            # an IP is the InternalIP, a host name the Hostname
//!     addresses:                   # or / and typed addresses, as Kubernetes has them
//!       - {type: ExternalIP, address: 203.0.113.5}
//!     labels: {rack: r1}
//!     zone: rack-a                 # topology.kubernetes.io/zone
//!     region: site-1               # topology.kubernetes.io/region
//!     cpu: 4                       # quantities as Kubernetes writes them (4, 500m)
//!     memory: 8Gi                  # missing parts come from --node-cpu / --node-memory
//!     state: running               # running (default), stopped (gets the shutdown taint), or other
//! ```
//!
//! Unknown keys are errors (a typo must not silently drop a label). An
//! empty file is an error too: to mean "no machines", write `machines: []`.
//! Ansible INI inventories are read by [`super::ansible`].
//!
//! Every listing stats the file; it is read and parsed again only when its
//! size, modification time or inode changed, or when the last read was so
//! close to the last modification that a same-size rewrite within the
//! file system's timestamp granularity could have been missed. A file that
//! became malformed is an error for every listing until it is fixed; the
//! last good content is never used in its place.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer};

use super::cloud::{
    BoxFuture, CloudError, CloudProvider, CloudResult, Instance, InstanceResources, InstanceState,
    Zone,
};
use crate::model::{Address, AddressKind, Micros};

/// How long after a modification the file's stamp is not trusted on its own:
/// coarse file systems keep 1-2 s timestamps, so an edit within that window
/// that keeps the size could otherwise go unseen.
const RACY_WINDOW: Duration = Duration::from_secs(2);

/// A provider reading machines from an inventory file.
pub struct InventoryProvider {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    cache: Mutex<Option<Loaded>>,
}

/// The last good reading and the stamp of the file it came from.
struct Loaded {
    stamp: Stamp,
    /// Whether the stamp alone proves the content unchanged (see [`RACY_WINDOW`]).
    settled: bool,
    machines: Arc<Vec<Instance>>,
}

/// What a stat tells about a file's content without reading it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Stamp {
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

impl Stamp {
    fn of(meta: &std::fs::Metadata) -> Stamp {
        #[cfg(unix)]
        let inode = std::os::unix::fs::MetadataExt::ino(meta);
        #[cfg(not(unix))]
        let inode = 0;
        Stamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode,
        }
    }
}

impl InventoryProvider {
    /// Opens the inventory at `path` and reads it once: a file that is
    /// missing or malformed at start-up is a configuration error.
    pub fn open(path: &Path) -> Result<InventoryProvider, String> {
        let provider = InventoryProvider::unread(path);
        provider.inner.load().map_err(|e| e.to_string())?;
        Ok(provider)
    }

    /// The inventory at `path`, not read yet: its first listing reads it,
    /// and fails as any later one would if it is missing or malformed.
    pub fn unread(path: &Path) -> InventoryProvider {
        InventoryProvider {
            inner: Arc::new(Inner {
                path: path.to_path_buf(),
                cache: Mutex::new(None),
            }),
        }
    }

    /// The inventory file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
}

impl Inner {
    fn cache(&self) -> std::sync::MutexGuard<'_, Option<Loaded>> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The machines in the file now: cached while its stamp holds, else read again.
    fn load(&self) -> Result<Arc<Vec<Instance>>, CloudError> {
        let origin = self.path.display().to_string();
        // `load` runs at start-up and on the blocking pool (`list`).
        #[allow(clippy::disallowed_methods)]
        let meta = std::fs::metadata(&self.path)
            .map_err(|e| CloudError::File(format!("cannot read the inventory {origin}: {e}")))?;
        let stamp = Stamp::of(&meta);
        if let Some(loaded) = self.cache().as_ref() {
            if loaded.settled && loaded.stamp == stamp {
                return Ok(loaded.machines.clone());
            }
        }
        // File times are wall-clock times, so the racy check compares with the wall clock.
        let read_at = SystemTime::UNIX_EPOCH + Micros::now().since(Micros(0));
        #[allow(clippy::disallowed_methods)]
        let parsed = std::fs::read_to_string(&self.path)
            .map_err(|e| CloudError::File(format!("cannot read the inventory {origin}: {e}")))
            .and_then(|text| parse_inventory(&origin, &text).map_err(CloudError::Parse));
        let mut cache = self.cache();
        match parsed {
            Ok(machines) => {
                let machines = Arc::new(machines);
                let settled = stamp
                    .modified
                    .and_then(|m| m.checked_add(RACY_WINDOW))
                    .is_some_and(|m| m <= read_at);
                *cache = Some(Loaded {
                    stamp,
                    settled,
                    machines: machines.clone(),
                });
                Ok(machines)
            }
            Err(e) => {
                // Never fall back to the last good content: it is not what the file says.
                *cache = None;
                Err(e)
            }
        }
    }
}

impl CloudProvider for InventoryProvider {
    fn name(&self) -> &str {
        "inventory"
    }
    fn list(&self) -> BoxFuture<'_, CloudResult<Arc<Vec<Instance>>>> {
        Box::pin(async move {
            // Reading and parsing a large file is blocking work.
            let inner = self.inner.clone();
            tokio::task::spawn_blocking(move || inner.load())
                .await
                .map_err(|e| CloudError::File(format!("reading the inventory failed: {e}")))?
        })
    }
}

/// The format of an inventory, told by the file name or, failing that, by
/// its first meaningful line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Yaml,
    Json,
    AnsibleIni,
}

/// Tells the format of the inventory `text` named `origin`.
pub fn detect_format(origin: &str, text: &str) -> Format {
    let lower = origin.to_ascii_lowercase();
    if lower.ends_with(".yaml") || lower.ends_with(".yml") {
        return Format::Yaml;
    }
    if lower.ends_with(".json") {
        return Format::Json;
    }
    if lower.ends_with(".ini") || lower.ends_with(".cfg") {
        return Format::AnsibleIni;
    }
    let first = first_meaningful_line(text);
    if super::ansible::is_section_header(first) {
        Format::AnsibleIni
    } else if first.starts_with('{') || first.starts_with('[') {
        Format::Json
    } else if first.starts_with("- ") || first == "-" || first.starts_with("machines:") {
        Format::Yaml
    } else {
        // Ansible's ungrouped hosts come before any section.
        Format::AnsibleIni
    }
}

fn first_meaningful_line(text: &str) -> &str {
    text.lines()
        .map(str::trim)
        .find(|l| {
            !l.is_empty()
                && !l.starts_with('#')
                && !l.starts_with(';')
                && !l.starts_with("---")
                && !l.starts_with('%')
        })
        .unwrap_or("")
}

/// Parses an inventory in any of the supported formats.
pub fn parse_inventory(origin: &str, text: &str) -> Result<Vec<Instance>, String> {
    if first_meaningful_line(text).is_empty() {
        return Err(format!(
            "{origin}: the inventory is empty; an empty inventory would remove every node, \
             so it is refused — write `machines: []` (or `[]`) to really list no machines"
        ));
    }
    match detect_format(origin, text) {
        Format::Yaml => parse_yaml(origin, text),
        Format::Json => parse_json(origin, text.as_bytes()),
        Format::AnsibleIni => super::ansible::parse_ini(origin, text),
    }
}

/// A list of machines, bare or under `machines:`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Wrapped {
    machines: Vec<MachineEntry>,
}

fn is_list(text: &str) -> bool {
    let first = first_meaningful_line(text);
    first.starts_with('-') || first.starts_with('[')
}

/// Parses a YAML inventory; errors carry the line and column.
pub fn parse_yaml(origin: &str, text: &str) -> Result<Vec<Instance>, String> {
    let entries = if is_list(text) {
        serde_yaml_ng::from_str::<Vec<MachineEntry>>(text)
    } else {
        serde_yaml_ng::from_str::<Wrapped>(text).map(|w| w.machines)
    }
    .map_err(|e| format!("{origin}: {e}"))?;
    Ok(entries
        .into_iter()
        .map(MachineEntry::into_instance)
        .collect())
}

/// Parses a JSON inventory (the file format, and the `http` provider's
/// answer); errors carry the line and column.
pub fn parse_json(origin: &str, body: &[u8]) -> Result<Vec<Instance>, String> {
    let text = std::str::from_utf8(body).map_err(|e| format!("{origin}: not UTF-8: {e}"))?;
    let entries = if is_list(text) {
        serde_json::from_str::<Vec<MachineEntry>>(text)
    } else {
        serde_json::from_str::<Wrapped>(text).map(|w| w.machines)
    }
    .map_err(|e| {
        format!("{origin}: {e}; expected a list of machines or {{\"machines\": [...]}}")
    })?;
    Ok(entries
        .into_iter()
        .map(MachineEntry::into_instance)
        .collect())
}

/// One machine of a YAML or JSON inventory. Values are checked while
/// parsing, so a bad one is reported with its line.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct MachineEntry {
    name: String,
    #[serde(default, deserialize_with = "host_address")]
    address: Option<String>,
    #[serde(default)]
    addresses: Vec<CheckedAddress>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
    #[serde(default)]
    zone: Option<String>,
    #[serde(default)]
    region: Option<String>,
    #[serde(default, deserialize_with = "cpu")]
    cpu: Option<u64>,
    #[serde(default, deserialize_with = "memory")]
    memory: Option<u64>,
    #[serde(default)]
    state: Option<String>,
}

impl MachineEntry {
    fn into_instance(self) -> Instance {
        let mut addresses = Vec::new();
        if let Some(a) = self.address.as_deref() {
            addresses.push(address_of(a));
        } else if self.addresses.is_empty() && self.name.trim().parse::<IpAddr>().is_ok() {
            // An IP name is its own InternalIP, as for static nodes.
            addresses.push(address_of(self.name.trim()));
        }
        addresses.extend(self.addresses.into_iter().map(|a| a.0));
        Instance {
            name: self.name,
            addresses,
            external_id: String::new(),
            provider_id: None,
            resources: InstanceResources {
                cpu_millis: self.cpu,
                memory_bytes: self.memory,
            },
            zone: zone(self.zone, self.region),
            labels: self.labels,
            state: state_of(self.state.as_deref()),
        }
    }
}

/// The zone and region of an inventory machine, if either is given.
pub(crate) fn zone(zone: Option<String>, region: Option<String>) -> Option<Zone> {
    (zone.is_some() || region.is_some()).then(|| Zone {
        region: region.unwrap_or_default(),
        zone: zone.unwrap_or_default(),
    })
}

/// `running` (also the default), `stopped`, or the word as given.
pub(crate) fn state_of(state: Option<&str>) -> InstanceState {
    match state.map(|s| s.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("running") => InstanceState::Running,
        Some("stopped") => InstanceState::Stopped,
        Some(other) => InstanceState::Other(other.to_string()),
    }
}

/// An untyped address: an IP is the InternalIP, anything else the Hostname.
pub(crate) fn address_of(address: &str) -> Address {
    let kind = if address.parse::<IpAddr>().is_ok() {
        AddressKind::InternalIP
    } else {
        AddressKind::Hostname
    };
    Address {
        kind,
        address: address.to_string(),
    }
}

/// Checks an untyped address: an IP address or a host name.
pub(crate) fn check_host_address(address: &str) -> Result<(), String> {
    if address.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    if let Some(reason) = crate::model::not_quite_ipv4(address) {
        return Err(format!("address {reason}"));
    }
    if crate::model::normalize_name(address).is_ok() {
        Ok(())
    } else {
        Err(format!(
            "address {address:?} is neither an IP address nor a host name"
        ))
    }
}

/// Checks a typed address: IP kinds must hold an IP, name kinds a host name.
pub(crate) fn check_address(a: &Address) -> Result<(), String> {
    match a.kind {
        AddressKind::InternalIP | AddressKind::ExternalIP => {
            a.address.parse::<IpAddr>().map(|_| ()).map_err(|_| {
                format!(
                    "{} address {:?} is not an IP address",
                    a.kind.as_str(),
                    a.address
                )
            })
        }
        _ => crate::model::normalize_name(&a.address)
            .map(|_| ())
            .map_err(|_| {
                format!(
                    "{} address {:?} is not a host name",
                    a.kind.as_str(),
                    a.address
                )
            }),
    }
}

#[derive(Debug)]
struct CheckedAddress(Address);

impl<'de> Deserialize<'de> for CheckedAddress {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let a = Address::deserialize(d)?;
        check_address(&a).map_err(serde::de::Error::custom)?;
        Ok(CheckedAddress(a))
    }
}

fn host_address<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    let a = String::deserialize(d)?;
    let a = a.trim().to_string();
    check_host_address(&a).map_err(serde::de::Error::custom)?;
    Ok(Some(a))
}

fn cpu<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let q = d.deserialize_any(QuantityText)?;
    crate::quantity::parse_cpu(&q)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("cpu: {e}")))
}

fn memory<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let q = d.deserialize_any(QuantityText)?;
    crate::quantity::parse_memory(&q)
        .map(Some)
        .map_err(|e| serde::de::Error::custom(format!("memory: {e}")))
}

/// A quantity written as a number (`4`, `0.5`) or a string (`500m`, `8Gi`).
struct QuantityText;

impl serde::de::Visitor<'_> for QuantityText {
    type Value = String;
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a quantity such as 4, 500m or 8Gi")
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<String, E> {
        Ok(v.to_string())
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<String, E> {
        Ok(v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaml_with_every_field() {
        let yaml = "\
# the site
machines:
  - name: Edge-1
    address: 10.0.0.5
    addresses:
      - {type: ExternalIP, address: 203.0.113.5}
    labels: {rack: r1}
    zone: rack-a
    region: site-1
    cpu: 4
    memory: 8Gi
  - name: edge-2
    address: edge-2.site.local
    cpu: 500m
    state: stopped
  - name: 10.0.0.7
";
        let m = parse_inventory("site.yaml", yaml).unwrap();
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].name, "Edge-1");
        assert_eq!(
            m[0].addresses,
            vec![
                Address {
                    kind: AddressKind::InternalIP,
                    address: "10.0.0.5".into()
                },
                Address {
                    kind: AddressKind::ExternalIP,
                    address: "203.0.113.5".into()
                }
            ]
        );
        assert_eq!(m[0].labels["rack"], "r1");
        assert_eq!(
            m[0].zone,
            Some(Zone {
                region: "site-1".into(),
                zone: "rack-a".into()
            })
        );
        assert_eq!(m[0].resources.cpu_millis, Some(4000));
        assert_eq!(m[0].resources.memory_bytes, Some(8 << 30));
        assert_eq!(m[0].state, InstanceState::Running);
        assert_eq!(m[1].addresses[0].kind, AddressKind::Hostname);
        assert_eq!(m[1].resources.cpu_millis, Some(500));
        assert_eq!(m[1].resources.memory_bytes, None);
        assert_eq!(m[1].state, InstanceState::Stopped);
        assert_eq!(
            m[2].addresses[0].address, "10.0.0.7",
            "an IP name is its address"
        );
        assert_eq!(m[2].zone, None);
    }

    #[test]
    fn bare_lists_and_json() {
        let m = parse_inventory("x.yml", "- name: a\n- name: b\n  state: pending\n").unwrap();
        assert_eq!(m[1].state, InstanceState::Other("pending".into()));
        let json = r#"{"machines": [{"name": "a", "cpu": "2", "memory": 1024}]}"#;
        let m = parse_inventory("inv", json).unwrap();
        assert_eq!(m[0].resources.cpu_millis, Some(2000));
        assert_eq!(m[0].resources.memory_bytes, Some(1024));
        assert_eq!(
            parse_inventory("inv", r#"[{"name": "a"}, {"name": "b"}]"#)
                .unwrap()
                .len(),
            2
        );
        assert!(parse_inventory("x.yaml", "machines: []\n")
            .unwrap()
            .is_empty());
        assert!(parse_inventory("x.json", "[]").unwrap().is_empty());
    }

    #[test]
    fn errors_name_the_file_and_line() {
        let yaml = "machines:\n  - name: a\n  - name: b\n    cpu: lots\n";
        let err = parse_inventory("site.yaml", yaml).unwrap_err();
        assert!(err.starts_with("site.yaml: "), "{err}");
        // serde_yaml_ng places a bad value at its entry: machines[1] starts on line 3.
        assert!(
            err.contains("machines[1]: cpu: ") && err.contains("line 3"),
            "{err}"
        );

        let yaml = "machines:\n  - name: a\n    adress: 10.0.0.1\n";
        let err = parse_inventory("site.yaml", yaml).unwrap_err();
        assert!(err.contains("adress") && err.contains("line 3"), "{err}");

        let yaml =
            "machines:\n  - name: a\n    addresses: [{type: InternalIP, address: db.local}]\n";
        let err = parse_inventory("site.yaml", yaml).unwrap_err();
        assert!(
            err.contains("not an IP address") && err.contains("line 3"),
            "{err}"
        );

        let yaml = "machines:\n  - name: a\n    address: not an address\n";
        let err = parse_inventory("site.yaml", yaml).unwrap_err();
        assert!(
            err.contains("neither an IP") && err.contains("line 2"),
            "{err}"
        );

        let json = "[\n  {\"name\": \"a\"},\n  {\"name\": \"b\", \"memory\": \"8GB\"}\n]";
        let err = parse_inventory("site.json", json).unwrap_err();
        assert!(err.contains("suffix") && err.contains("line 3"), "{err}");

        let err = parse_inventory("site.json", "[{\"name\": \"a\"},").unwrap_err();
        assert!(err.contains("line 1"), "{err}");

        let err = parse_inventory("site.yaml", "machines:\n  - name: [a\n").unwrap_err();
        assert!(err.contains("line"), "{err}");
    }

    #[test]
    fn an_empty_file_is_refused() {
        for text in ["", "\n\n", "# nothing yet\n", "---\n"] {
            let err = parse_inventory("site.yaml", text).unwrap_err();
            assert!(err.contains("empty"), "{text:?}: {err}");
        }
    }

    #[test]
    fn formats_are_told_by_name_then_content() {
        assert_eq!(detect_format("a.yaml", "[web]"), Format::Yaml);
        assert_eq!(detect_format("a.json", ""), Format::Json);
        assert_eq!(detect_format("hosts.ini", "- a"), Format::AnsibleIni);
        assert_eq!(
            detect_format("hosts", "# c\n[web]\na\n"),
            Format::AnsibleIni
        );
        assert_eq!(
            detect_format("hosts", "[web:children]\n"),
            Format::AnsibleIni
        );
        assert_eq!(detect_format("inv", "[{\"name\": \"a\"}]"), Format::Json);
        assert_eq!(
            detect_format("inv", "[\n  {\"name\": \"a\"}\n]"),
            Format::Json
        );
        assert_eq!(detect_format("inv", "{\"machines\": []}"), Format::Json);
        assert_eq!(detect_format("inv", "machines:\n- name: a"), Format::Yaml);
        assert_eq!(detect_format("inv", "---\n- name: a"), Format::Yaml);
        assert_eq!(
            detect_format("hosts", "a ansible_host=10.0.0.1"),
            Format::AnsibleIni
        );
    }

    #[test]
    fn aliases_and_nesting_cannot_blow_up() {
        // A billion laughs: anchors that would expand to 10^9 entries.
        let mut laughs =
            "a: &a [\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\",\"x\"]\n".to_string();
        for (name, prev) in ["b", "c", "d", "e", "f", "g", "h", "i"]
            .iter()
            .zip(["a", "b", "c", "d", "e", "f", "g", "h"])
        {
            laughs.push_str(&format!("{name}: &{name} [*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev},*{prev}]\n"));
        }
        laughs.push_str("machines:\n  - name: edge-1\n    labels: {x: *i}\n");
        assert!(parse_inventory("inv.yaml", &laughs).is_err());
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        let err = parse_inventory("inv.json", &deep).unwrap_err();
        assert!(err.starts_with("inv.json:"), "{err}");
        let deep_labels = "{\"machines\": [{\"name\": \"a\", \"labels\": ".to_string()
            + &"{\"a\": ".repeat(100_000);
        let err = parse_inventory("inv.json", &deep_labels).unwrap_err();
        assert!(err.starts_with("inv.json:"), "{err}");
        let deep_yaml = "machines:\n".to_string() + &"[".repeat(100_000);
        assert!(parse_inventory("inv.yaml", &deep_yaml).is_err());
    }

    #[test]
    fn a_typo_of_an_address_is_refused() {
        let err =
            parse_inventory("inv.yaml", "- name: edge-1\n  address: 10.0.0.300\n").unwrap_err();
        assert!(err.contains("10.0.0.300") && err.contains("IPv4"), "{err}");
        let err = parse_inventory("hosts", "edge-1 ansible_host=10.0.0.300\n").unwrap_err();
        assert!(err.starts_with("hosts:1:") && err.contains("IPv4"), "{err}");
    }

    mod properties {
        use super::*;
        use proptest::prelude::*;

        fn machine() -> impl Strategy<Value = String> {
            let field = prop_oneof![
                "name: [a-zA-Z0-9.:_ -]{0,12}",
                "address: [0-9a-z.:]{0,16}",
                "cpu: [0-9.eEmkMGKi+-]{0,8}",
                "memory: [0-9.eEmkMGTPKi+-]{0,8}",
                "zone: [a-z-]{0,8}",
                "state: (running|stopped|[a-z]{0,8})",
                "labels: \\{[a-z]{1,4}: [a-z]{0,4}\\}",
                "addresses: \\[\\{type: (InternalIP|Hostname|ExternalIP|x), address: [0-9a-z.]{0,12}\\}\\]",
                "[a-z]{1,6}: [ -~]{0,8}",
            ];
            prop::collection::vec(field, 0..6).prop_map(|fields| {
                let mut entry = String::new();
                for (i, f) in fields.iter().enumerate() {
                    entry.push_str(if i == 0 { "- " } else { "  " });
                    entry.push_str(f);
                    entry.push('\n');
                }
                entry
            })
        }

        proptest! {
            #[test]
            fn arbitrary_text_never_panics(text in "\\PC{0,200}") {
                for origin in ["inv", "inv.yaml", "inv.json", "inv.ini"] {
                    if let Err(e) = parse_inventory(origin, &text) {
                        prop_assert!(e.starts_with(origin), "{e}");
                    }
                }
            }

            #[test]
            fn yaml_like_machines_never_panic(machines in prop::collection::vec(machine(), 0..8), wrapped in any::<bool>()) {
                let mut text = machines.concat();
                if wrapped {
                    text = format!("machines:\n{}", text.lines().map(|l| format!("  {l}\n")).collect::<String>());
                }
                match parse_inventory("inv.yaml", &text) {
                    Ok(found) => {
                        for m in found {
                            for a in &m.addresses {
                                prop_assert!(
                                    a.address.parse::<IpAddr>().is_ok() || crate::model::normalize_name(&a.address).is_ok(),
                                    "{a:?}"
                                );
                            }
                        }
                    }
                    Err(e) => prop_assert!(e.starts_with("inv.yaml:"), "{e}"),
                }
            }

            #[test]
            fn json_machines_read_back(names in prop::collection::vec("[a-z][a-z0-9-]{0,10}", 0..10), cpu in 1u64..64_000) {
                let entries: Vec<serde_json::Value> = names
                    .iter()
                    .map(|n| serde_json::json!({"name": n, "cpu": format!("{cpu}m"), "memory": "1e9"}))
                    .collect();
                let text = serde_json::to_string(&serde_json::json!({"machines": entries})).unwrap();
                let found = parse_inventory("inv.json", &text).map_err(TestCaseError::fail)?;
                prop_assert_eq!(found.len(), names.len());
                for (m, n) in found.iter().zip(&names) {
                    prop_assert_eq!(&m.name, n);
                    prop_assert_eq!(m.resources.cpu_millis, Some(cpu));
                    prop_assert_eq!(m.resources.memory_bytes, Some(1_000_000_000));
                }
            }
        }
    }
}
