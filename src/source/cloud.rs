//! The cloud / inventory provider interface, shaped like the ancestor's
//! `Instances`, and [`cloud_node_specs`] (its `GetCloudNodesWithSpec`).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;

use regex::Regex;

use super::SourceError;
use crate::model::{Address, NodeSpec, Resources};

/// A boxed future, so providers can be used as trait objects.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A provider's own failure, in its words.
pub type CloudResult<T> = Result<T, String>;

/// Where an instance runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Zone {
    pub region: String,
    pub zone: String,
}

/// A site's source of machines.
pub trait CloudProvider: Send + Sync {
    /// The provider's name, as given to `--cloud-provider`.
    fn name(&self) -> &str;
    /// The instance interface, if this provider has one (`ErrCloudInstance` otherwise).
    fn instances(&self) -> Option<&dyn Instances>;
}

/// Listing machines and what is known of each.
pub trait Instances: Send + Sync {
    /// Names of the instances whose whole name matches `filter`.
    fn list<'a>(&'a self, filter: &'a Regex) -> BoxFuture<'a, CloudResult<Vec<String>>>;
    fn node_addresses<'a>(&'a self, name: &'a str) -> BoxFuture<'a, CloudResult<Vec<Address>>>;
    fn external_id<'a>(&'a self, name: &'a str) -> BoxFuture<'a, CloudResult<String>>;
    /// The provider's resources for the instance; `None` falls back to the static capacity.
    fn resources<'a>(&'a self, name: &'a str) -> BoxFuture<'a, CloudResult<Option<Resources>>>;
    fn zone<'a>(&'a self, name: &'a str) -> BoxFuture<'a, CloudResult<Option<Zone>>>;
}

/// Anchors a user's `--match` to the whole name, as the flag promises.
pub fn anchored(pattern: &str) -> Result<Regex, String> {
    Regex::new(&format!("^(?:{pattern})$"))
        .map_err(|e| format!("--match {pattern:?} is not a valid regular expression: {e}"))
}

/// Builds the specs of every matching instance: provider resources (static
/// capacity as fallback), external id, addresses and zone labels.
pub async fn cloud_node_specs(
    provider: &dyn CloudProvider,
    filter: &Regex,
    fallback: Resources,
) -> Result<Vec<NodeSpec>, SourceError> {
    let name = provider.name().to_string();
    let instances = provider
        .instances()
        .ok_or_else(|| SourceError::CloudInstance(name.clone()))?;
    let failed = |reason: String| SourceError::Cloud {
        provider: name.clone(),
        reason,
    };
    let mut specs = Vec::new();
    for instance in instances.list(filter).await.map_err(failed)? {
        let node_name = super::static_list::normalize_name(&instance)
            .map_err(|reason| failed(format!("instance {instance:?}: {reason}")))?;
        let mut labels = BTreeMap::new();
        if let Some(zone) = instances.zone(&instance).await.map_err(failed)? {
            labels.insert("topology.kubernetes.io/region".to_string(), zone.region);
            labels.insert("topology.kubernetes.io/zone".to_string(), zone.zone);
        }
        specs.push(NodeSpec {
            external_id: instances.external_id(&instance).await.map_err(failed)?,
            provider_id: format!("{name}://{instance}"),
            capacity: instances
                .resources(&instance)
                .await
                .map_err(failed)?
                .unwrap_or(fallback),
            addresses: instances.node_addresses(&instance).await.map_err(failed)?,
            source: format!("cloud/{name}"),
            labels,
            name: node_name,
        });
    }
    Ok(specs)
}

/// An in-memory provider for tests.
#[derive(Debug, Default, Clone)]
pub struct FakeCloud {
    pub name: String,
    /// `false` makes it a provider without instances.
    pub has_instances: bool,
    pub machines: HashMap<String, FakeMachine>,
    /// When set, every call fails with this message.
    pub failure: Option<String>,
}

/// One machine of a [`FakeCloud`].
#[derive(Debug, Default, Clone)]
pub struct FakeMachine {
    pub addresses: Vec<Address>,
    pub external_id: String,
    pub resources: Option<Resources>,
    pub zone: Option<Zone>,
}

impl FakeCloud {
    fn get(&self, name: &str) -> CloudResult<&FakeMachine> {
        if let Some(failure) = &self.failure {
            return Err(failure.clone());
        }
        self.machines
            .get(name)
            .ok_or_else(|| format!("instance {name:?} not found"))
    }
}

impl CloudProvider for FakeCloud {
    fn name(&self) -> &str {
        &self.name
    }
    fn instances(&self) -> Option<&dyn Instances> {
        self.has_instances.then_some(self as &dyn Instances)
    }
}

impl Instances for FakeCloud {
    fn list<'a>(&'a self, filter: &'a Regex) -> BoxFuture<'a, CloudResult<Vec<String>>> {
        Box::pin(async move {
            if let Some(failure) = &self.failure {
                return Err(failure.clone());
            }
            let mut names: Vec<String> = self
                .machines
                .keys()
                .filter(|n| filter.is_match(n))
                .cloned()
                .collect();
            names.sort();
            Ok(names)
        })
    }
    fn node_addresses<'a>(&'a self, name: &'a str) -> BoxFuture<'a, CloudResult<Vec<Address>>> {
        Box::pin(async move { Ok(self.get(name)?.addresses.clone()) })
    }
    fn external_id<'a>(&'a self, name: &'a str) -> BoxFuture<'a, CloudResult<String>> {
        Box::pin(async move { Ok(self.get(name)?.external_id.clone()) })
    }
    fn resources<'a>(&'a self, name: &'a str) -> BoxFuture<'a, CloudResult<Option<Resources>>> {
        Box::pin(async move { Ok(self.get(name)?.resources) })
    }
    fn zone<'a>(&'a self, name: &'a str) -> BoxFuture<'a, CloudResult<Option<Zone>>> {
        Box::pin(async move { Ok(self.get(name)?.zone.clone()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AddressKind;

    fn cloud() -> FakeCloud {
        let mut machines = HashMap::new();
        for (name, res) in [
            ("web-1", None),
            (
                "web-2",
                Some(Resources {
                    cpu_millis: 4000,
                    memory_bytes: 8 << 30,
                }),
            ),
            ("db-1", None),
        ] {
            machines.insert(
                name.to_string(),
                FakeMachine {
                    addresses: vec![Address {
                        kind: AddressKind::InternalIP,
                        address: "10.0.0.1".into(),
                    }],
                    external_id: format!("i-{name}"),
                    resources: res,
                    zone: Some(Zone {
                        region: "r1".into(),
                        zone: "r1a".into(),
                    }),
                },
            );
        }
        FakeCloud {
            name: "fake".into(),
            has_instances: true,
            machines,
            failure: None,
        }
    }

    #[tokio::test]
    async fn specs_follow_the_anchored_match() {
        let specs = cloud_node_specs(&cloud(), &anchored("web-.*").unwrap(), Resources::default())
            .await
            .unwrap();
        assert_eq!(
            specs.iter().map(|s| s.name.as_str()).collect::<Vec<_>>(),
            ["web-1", "web-2"]
        );
        assert_eq!(
            specs[0].capacity,
            Resources::default(),
            "static capacity is the fallback"
        );
        assert_eq!(specs[1].capacity.cpu_millis, 4000);
        assert_eq!(specs[0].external_id, "i-web-1");
        assert_eq!(specs[0].provider_id, "fake://web-1");
        assert_eq!(specs[0].labels["topology.kubernetes.io/zone"], "r1a");
        assert_eq!(specs[0].source, "cloud/fake");
        // Anchored: "web" alone matches nothing, "eb-1" matches nothing.
        assert!(
            cloud_node_specs(&cloud(), &anchored("eb-1").unwrap(), Resources::default())
                .await
                .unwrap()
                .is_empty()
        );
    }

    #[tokio::test]
    async fn a_provider_without_instances_is_err_cloud_instance() {
        let mut c = cloud();
        c.has_instances = false;
        let err = cloud_node_specs(&c, &anchored(".*").unwrap(), Resources::default())
            .await
            .unwrap_err();
        assert!(matches!(err, SourceError::CloudInstance(_)));
        assert!(err.to_string().contains("doesn't support instances"));
    }

    #[tokio::test]
    async fn a_failing_provider_is_an_error_not_an_empty_list() {
        let mut c = cloud();
        c.failure = Some("credentials expired".into());
        let err = cloud_node_specs(&c, &anchored(".*").unwrap(), Resources::default())
            .await
            .unwrap_err();
        assert!(err.to_string().contains("credentials expired"), "{err}");
        assert!(anchored("(").is_err());
    }
}
