//! What a kubelet reports of its node beyond its conditions, addresses,
//! capacity and machine: the images it holds, the port its API listens on,
//! its runtime handlers and features, and the volumes in use and attached.
//! Kept with the node as it was reported, shown back as Kubernetes shows
//! it, and never decided on: no history entry is made of it (see
//! `controller::push::fold`).
//!
//! Its serde form (export lines, the node's size bound) names the fields
//! as Kubernetes does, the kubelet's port aside; the node's Kubernetes JSON
//! (`k8s::NodeJson`) writes `daemonEndpoints` around it.

use serde::{Deserialize, Serialize};

/// The fields of `status` a kubelet reports that nodekeeper keeps as given.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reported {
    /// `status.images`: the kubelet sends its largest images, at most
    /// `nodeStatusMaxImages` (50 by default) of at most 5 names each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub images: Vec<Image>,
    /// `status.daemonEndpoints.kubeletEndpoint.Port`; 0 when not reported.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub kubelet_port: i32,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub runtime_handlers: Vec<RuntimeHandler>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Features>,
    /// `status.volumesInUse`: unique volume names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes_in_use: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes_attached: Vec<AttachedVolume>,
}

fn is_zero(port: &i32) -> bool {
    *port == 0
}

impl Reported {
    /// Nothing reported: what every node had before kubelets reported these.
    pub fn is_empty(&self) -> bool {
        *self == Reported::default()
    }

    #[cfg(test)]
    /// What a kubelet reports beyond conditions, as a v1.33 kubelet sends
    /// it (`pkg/kubelet/nodestatus/setters.go`: `Images`, `DaemonEndpoints`,
    /// `RuntimeHandlers`, `NodeFeatures`, `VolumesInUse`).
    pub(crate) fn sample() -> Reported {
        Reported {
            images: vec![
                Image {
                    names: vec![
                        "registry.k8s.io/pause@sha256:ee6521f290b2168b6e0935a181d4cff9be1ac3f505666ef0e3c98fae8199917a".into(),
                        "registry.k8s.io/pause:3.10".into(),
                    ],
                    size_bytes: Some(320_368),
                },
                Image {
                    names: vec!["docker.io/library/nginx:1.27".into()],
                    size_bytes: Some(72_955_450),
                },
            ],
            kubelet_port: 10250,
            runtime_handlers: vec![
                RuntimeHandler {
                    name: String::new(),
                    features: Some(RuntimeHandlerFeatures {
                        recursive_read_only_mounts: Some(true),
                        user_namespaces: Some(false),
                    }),
                },
                RuntimeHandler {
                    name: "runc".into(),
                    features: Some(RuntimeHandlerFeatures {
                        recursive_read_only_mounts: Some(true),
                        user_namespaces: Some(false),
                    }),
                },
            ],
            features: Some(Features {
                supplemental_groups_policy: Some(true),
            }),
            volumes_in_use: vec!["kubernetes.io/csi/ebs.csi.aws.com^vol-0a1".into()],
            volumes_attached: vec![AttachedVolume {
                name: "kubernetes.io/csi/ebs.csi.aws.com^vol-0a1".into(),
                device_path: String::new(),
            }],
        }
    }
}

/// One entry of `status.images`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Image {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<i64>,
}

/// One entry of `status.runtimeHandlers`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeHandler {
    // Kubernetes' JSON order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<RuntimeHandlerFeatures>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
}

/// `status.runtimeHandlers[].features`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeHandlerFeatures {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive_read_only_mounts: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_namespaces: Option<bool>,
}

/// `status.features`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Features {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub supplemental_groups_policy: Option<bool>,
}

/// One entry of `status.volumesAttached`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct AttachedVolume {
    // Kubernetes' JSON order.
    pub device_path: String,
    pub name: String,
}
