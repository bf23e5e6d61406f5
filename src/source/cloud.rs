//! The cloud / inventory provider interface (the ancestor's `Instances`,
//! reshaped for bulk listing) and [`cloud_node_specs`] (its `GetCloudNodesWithSpec`).
//!
//! A provider answers one question per sync: every machine matching the
//! filter, with everything known about each, in one call. Asking per
//! instance and per attribute (the ancestor's shape) costs 10k × 5 calls for
//! a 10k-machine site; EC2 answers 1000 instances per request.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use regex::Regex;

use super::SourceError;
use crate::model::{normalize_name, Address, NodeSpec, Resources};

/// A boxed future, so providers can be used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A provider's own failure, in its words (it names the file, URL or API).
pub type CloudResult<T> = Result<T, CloudError>;

/// Why a provider could not list its machines. Each message names what
/// failed and where, as before; the variants let callers tell a provider
/// that cannot be reached from one that answers with an error or with
/// something that is not a listing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CloudError {
    /// No answer: refused, timed out, TLS, or the answer was cut short.
    #[error("{0}")]
    Network(String),
    /// The provider refused the credentials it was given (HTTP 401 or
    /// 403, an AWS authentication error), or was given none it accepts.
    #[error("{message}")]
    Auth { status: u16, message: String },
    /// The provider answered with another HTTP error status (its API's error).
    #[error("{message}")]
    Status { status: u16, message: String },
    /// An answer or an inventory file that is not a listing, or one beyond
    /// the configured size or page caps.
    #[error("{0}")]
    Parse(String),
    /// A local file the provider reads (the inventory, a token) could not be read.
    #[error("{0}")]
    File(String),
}

impl CloudError {
    /// Whether the same request may well succeed later on its own: the
    /// provider was unreachable or failed on its side (5xx, 429).
    /// Refused credentials, answers that are not a listing and unreadable
    /// files stay as they are until someone fixes them.
    pub fn is_transient(&self) -> bool {
        match self {
            CloudError::Network(_) => true,
            CloudError::Status { status, .. } => *status >= 500 || *status == 429,
            CloudError::Auth { .. } | CloudError::Parse(_) | CloudError::File(_) => false,
        }
    }
}

/// Label for the zone a node runs in.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Label for the region a node runs in.
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Label for the machine type, as cloud providers set it.
pub const INSTANCE_TYPE_LABEL: &str = "node.kubernetes.io/instance-type";

/// Where an instance runs. Either part may be empty when unknown.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Zone {
    pub region: String,
    pub zone: String,
}

/// What a machine is doing, as far as node lifecycle cares. Machines that
/// are gone for good (EC2 `terminated`, `shutting-down`) are not listed at all.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum InstanceState {
    #[default]
    Running,
    /// Exists but is shut down: its node stays registered and gets the
    /// `node.cloudprovider.kubernetes.io/shutdown:NoSchedule` taint.
    Stopped,
    /// Anything else the provider reports (`pending`, …), in its words.
    Other(String),
}

impl InstanceState {
    /// The state as a provider would write it (`running`, `stopped`, …).
    pub fn as_str(&self) -> &str {
        match self {
            InstanceState::Running => "running",
            InstanceState::Stopped => "stopped",
            InstanceState::Other(s) => s,
        }
    }
}

/// Capacity a provider knows; each part missing falls back to the static
/// capacity (`--node-cpu`, `--node-memory`) on its own, so an inventory that
/// only records CPUs still gets a memory figure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InstanceResources {
    pub cpu_millis: Option<u64>,
    pub memory_bytes: Option<u64>,
}

impl InstanceResources {
    /// Fills the unknown parts from `fallback`.
    pub fn or(self, fallback: Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.unwrap_or(fallback.cpu_millis),
            memory_bytes: self.memory_bytes.unwrap_or(fallback.memory_bytes),
        }
    }
}

/// One machine, with everything the provider knows of it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Instance {
    /// The name as the provider has it; normalized into the node name by
    /// [`cloud_node_specs`].
    pub name: String,
    pub addresses: Vec<Address>,
    /// The provider's id for the machine (EC2 instance id; the name for an inventory).
    pub external_id: String,
    /// `spec.providerID`; `None` gives `<provider>://<node name>`.
    pub provider_id: Option<String>,
    pub resources: InstanceResources,
    pub zone: Option<Zone>,
    /// Labels the provider assigns (instance type, inventory labels and groups).
    pub labels: BTreeMap<String, String>,
    pub state: InstanceState,
}

/// A site's source of machines, listed in bulk.
pub trait CloudProvider: Send + Sync {
    /// The provider's name, as given to `--cloud-provider`.
    fn name(&self) -> &str;
    /// Every machine, in one answer. A failure of any kind — unreachable,
    /// refused, malformed, cut short — is an `Err`, never a shorter or empty
    /// list: the caller reads `Ok` as the whole truth and deletes nodes that
    /// are not in it. With no machines, the answer is `Ok(vec![])`.
    fn list(&self) -> BoxFuture<'_, CloudResult<Arc<Vec<Instance>>>>;
}

/// Anchors a user's `--match` to the whole name, as the flag promises.
pub fn anchored(pattern: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| format!("--match {pattern:?} is not a valid regular expression: {e}"))
}

/// Whether `filter` selects a machine. It is matched against the node name
/// the machine would get (trimmed, lowercased), so `--match 'web-.*'`
/// selects the EC2 instance tagged `Web-1`, which becomes node `web-1`.
pub fn selects(filter: &Regex, provider_name: &str) -> bool {
    let name = provider_name.trim();
    if name.bytes().any(|b| b.is_ascii_uppercase()) {
        filter.is_match(&name.to_ascii_lowercase())
    } else {
        filter.is_match(name)
    }
}

/// A node as a provider sees it: the spec to register and the machine's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudNode {
    pub spec: NodeSpec,
    pub state: InstanceState,
}

/// Lists the provider's machines matching `filter` and builds their specs:
/// provider resources (static capacity for what it does not know), external
/// and provider ids, addresses, labels, and zone and region labels. Sorted by name.
///
/// The listing is all or nothing. A machine whose name is not a valid node
/// name, or two machines that would become the same node, fail the whole
/// listing with an error naming them, rather than dropping them: a listing
/// with a machine missing would make the caller delete that machine's node,
/// and the registry must not change because one record is malformed. Exclude
/// such machines with `--match` or fix their names.
pub async fn cloud_node_specs(
    provider: &dyn CloudProvider,
    filter: &Regex,
    fallback: Resources,
) -> Result<Vec<CloudNode>, SourceError> {
    let provider_name = provider.name().to_string();
    let listed = provider.list().await.map_err(|error| SourceError::Cloud {
        provider: provider_name.clone(),
        error,
    })?;
    let mut nodes = Vec::with_capacity(listed.len());
    // node name -> the machine that claimed it, for the duplicate message.
    let mut claimed: HashMap<String, String> = HashMap::with_capacity(listed.len());
    for instance in listed.iter().filter(|m| selects(filter, &m.name)).cloned() {
        let machine = describe(&instance);
        let name = match normalize_name(&instance.name) {
            Ok(name) => name,
            Err(reason) => {
                return Err(SourceError::BadMachineName {
                    provider: provider_name,
                    machine,
                    reason,
                })
            }
        };
        if let Some(first) = claimed.insert(name.clone(), machine.clone()) {
            return Err(SourceError::SameNodeName {
                provider: provider_name,
                first,
                second: machine,
                name,
            });
        }
        let mut labels = instance.labels;
        if let Some(zone) = instance.zone {
            if !zone.region.is_empty() {
                labels.insert(REGION_LABEL.to_string(), zone.region);
            }
            if !zone.zone.is_empty() {
                labels.insert(ZONE_LABEL.to_string(), zone.zone);
            }
        }
        let spec = NodeSpec {
            provider_id: instance
                .provider_id
                .unwrap_or_else(|| format!("{provider_name}://{name}")),
            external_id: if instance.external_id.is_empty() {
                name.clone()
            } else {
                instance.external_id
            },
            source: format!("cloud/{provider_name}"),
            capacity: instance.resources.or(fallback),
            addresses: instance.addresses,
            labels,
            name,
        };
        nodes.push(CloudNode {
            spec,
            state: instance.state,
        });
    }
    nodes.sort_by(|a, b| a.spec.name.cmp(&b.spec.name));
    Ok(nodes)
}

/// "machine \"Web_1\" (i-0abc)" or "machine \"Web_1\"" when the id is the name.
fn describe(instance: &Instance) -> String {
    if instance.external_id.is_empty() || instance.external_id == instance.name {
        format!("machine {:?}", instance.name)
    } else {
        format!("machine {:?} ({})", instance.name, instance.external_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AddressKind;
    use std::sync::Mutex;

    /// An in-memory provider for tests. Clones share their machines, so a test
    /// can hand one to the controller and change the "cloud" under it.
    #[derive(Debug, Clone)]
    struct FakeCloud {
        name: String,
        state: Arc<Mutex<FakeState>>,
    }

    #[derive(Debug, Default)]
    struct FakeState {
        machines: Vec<Instance>,
        failure: Option<String>,
        lists: u64,
    }

    impl FakeCloud {
        /// A provider named `name` with these machines.
        fn new(name: &str, machines: Vec<Instance>) -> FakeCloud {
            FakeCloud {
                name: name.into(),
                state: Arc::new(Mutex::new(FakeState {
                    machines,
                    ..FakeState::default()
                })),
            }
        }

        fn state(&self) -> std::sync::MutexGuard<'_, FakeState> {
            // A test that panicked while holding the lock has failed already.
            self.state.lock().unwrap_or_else(|e| e.into_inner())
        }

        /// Replaces the machines (they come and go).
        fn set_machines(&self, machines: Vec<Instance>) {
            self.state().machines = machines;
        }

        /// Makes every listing fail with `failure` (`None`: answer again).
        fn fail_with(&self, failure: Option<&str>) {
            self.state().failure = failure.map(str::to_string);
        }

        /// How many listings were asked for.
        fn lists(&self) -> u64 {
            self.state().lists
        }
    }

    impl CloudProvider for FakeCloud {
        fn name(&self) -> &str {
            &self.name
        }
        fn list(&self) -> BoxFuture<'_, CloudResult<Arc<Vec<Instance>>>> {
            Box::pin(async move {
                let mut state = self.state();
                state.lists += 1;
                match &state.failure {
                    Some(failure) => Err(CloudError::Network(failure.clone())),
                    None => Ok(Arc::new(state.machines.clone())),
                }
            })
        }
    }

    fn machine(name: &str, cpu: Option<u64>) -> Instance {
        Instance {
            name: name.into(),
            addresses: vec![Address {
                kind: AddressKind::InternalIP,
                address: "10.0.0.1".into(),
            }],
            external_id: format!("i-{name}"),
            resources: InstanceResources {
                cpu_millis: cpu,
                memory_bytes: None,
            },
            zone: Some(Zone {
                region: "r1".into(),
                zone: "r1a".into(),
            }),
            ..Instance::default()
        }
    }

    fn cloud() -> FakeCloud {
        FakeCloud::new(
            "fake",
            vec![
                machine("web-2", Some(4000)),
                machine("web-1", None),
                machine("db-1", None),
            ],
        )
    }

    async fn names(c: &FakeCloud, pattern: &str) -> Vec<String> {
        cloud_node_specs(c, &anchored(pattern).unwrap(), Resources::default())
            .await
            .unwrap()
            .into_iter()
            .map(|n| n.spec.name)
            .collect()
    }

    #[tokio::test]
    async fn specs_follow_the_anchored_match() {
        let nodes = cloud_node_specs(&cloud(), &anchored("web-.*").unwrap(), Resources::default())
            .await
            .unwrap();
        let specs: Vec<&NodeSpec> = nodes.iter().map(|n| &n.spec).collect();
        assert_eq!(
            specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["web-1", "web-2"],
            "sorted by name"
        );
        assert_eq!(
            specs[0].capacity,
            Resources::default(),
            "static capacity is the fallback"
        );
        assert_eq!(
            specs[1].capacity,
            Resources {
                cpu_millis: 4000,
                memory_bytes: Resources::default().memory_bytes
            },
            "each unknown part falls back on its own"
        );
        assert_eq!(specs[0].external_id, "i-web-1");
        assert_eq!(specs[0].provider_id, "fake://web-1");
        assert_eq!(specs[0].labels[ZONE_LABEL], "r1a");
        assert_eq!(specs[0].labels[REGION_LABEL], "r1");
        assert_eq!(specs[0].source, "cloud/fake");
        assert_eq!(nodes[0].state, InstanceState::Running);
        // Anchored: "eb-1" matches nothing, "web" alone matches nothing.
        assert!(names(&cloud(), "eb-1").await.is_empty());
        assert!(names(&cloud(), "web").await.is_empty());
    }

    #[tokio::test]
    async fn names_are_normalized_and_matched_as_node_names() {
        let c = FakeCloud::new("fake", vec![machine(" Web-3 ", None)]);
        assert_eq!(names(&c, "web-3").await, ["web-3"]);
    }

    #[tokio::test]
    async fn one_bad_name_fails_the_whole_listing() {
        let c = cloud();
        c.set_machines(vec![machine("web-1", None), machine("web_2", None)]);
        let err = cloud_node_specs(&c, &anchored(".*").unwrap(), Resources::default())
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "cloud provider \"fake\" failed to list instances: machine \"web_2\" (i-web_2): \"web_2\" is neither an IP address nor a DNS-1123 subdomain (lowercase letters, digits, '-' and '.', each part 1-63 characters, starting and ending alphanumeric); nothing was changed — fix the name or exclude the machine with --match"
        );
        // Excluded by --match, it no longer matters.
        assert_eq!(names(&c, "web-.*").await, ["web-1"]);
    }

    #[tokio::test]
    async fn two_machines_that_become_one_node_fail_the_listing() {
        let c = FakeCloud::new("fake", vec![machine("web-1", None), machine("WEB-1", None)]);
        let err = cloud_node_specs(&c, &anchored(".*").unwrap(), Resources::default())
            .await
            .unwrap_err()
            .to_string();
        assert_eq!(
            err,
            "cloud provider \"fake\" failed to list instances: machine \"web-1\" (i-web-1) and machine \"WEB-1\" (i-WEB-1) would both be node \"web-1\"; nothing was changed — give them distinct names or exclude one with --match"
        );
    }

    #[tokio::test]
    async fn provider_ids_states_and_labels_pass_through() {
        let mut m = machine("web-1", None);
        m.provider_id = Some("aws:///r1a/i-1".into());
        m.state = InstanceState::Stopped;
        m.labels
            .insert(INSTANCE_TYPE_LABEL.into(), "t3.small".into());
        m.labels.insert(ZONE_LABEL.into(), "overridden".into());
        let c = FakeCloud::new("ec2", vec![m]);
        let nodes = cloud_node_specs(&c, &anchored(".*").unwrap(), Resources::default())
            .await
            .unwrap();
        assert_eq!(nodes[0].spec.provider_id, "aws:///r1a/i-1");
        assert_eq!(nodes[0].state, InstanceState::Stopped);
        assert_eq!(nodes[0].spec.labels[INSTANCE_TYPE_LABEL], "t3.small");
        assert_eq!(
            nodes[0].spec.labels[ZONE_LABEL], "r1a",
            "the zone field wins over a label"
        );
    }

    #[tokio::test]
    async fn a_failing_provider_is_an_error_not_an_empty_list() {
        let c = cloud();
        let shared = c.clone();
        shared.fail_with(Some("credentials expired"));
        let err = cloud_node_specs(&c, &anchored(".*").unwrap(), Resources::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("credentials expired"), "{err}");
        assert!(
            matches!(
                &err,
                SourceError::Cloud {
                    error: CloudError::Network(_),
                    ..
                }
            ),
            "{err:?}"
        );
        assert!(
            err.is_transient(),
            "an unreachable provider may answer next time"
        );
        shared.fail_with(None);
        assert_eq!(names(&c, ".*").await.len(), 3);
        assert_eq!(c.lists(), 2);
        assert!(anchored("(").is_err());
    }

    #[tokio::test]
    async fn nothing_matching_is_an_empty_ok() {
        assert!(names(&cloud(), "nothing-.*").await.is_empty());
    }
}
