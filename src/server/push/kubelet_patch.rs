//! A status patch as kubelets send it, thousands a second, read straight
//! into typed fields: conditions given whole (each with its type, status,
//! reason, message and heartbeat), `nodeInfo` given whole, and the
//! ordering directive. Merged onto any node, such a patch keeps exactly
//! these values, so the pushed status is the patch's own and the node need
//! not be rendered and merged. Any other shape (another field, a `null`, a
//! key twice, a value that is not a string) is not read here: it takes the
//! general merge, which also answers what is refused.

use k8s_openapi::api::core::v1::{Node as KubeNode, NodeCondition, NodeStatus, NodeSystemInfo};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde::de::IgnoredAny;
use serde::{Deserialize, Deserializer};

use crate::kube::patch::PatchKind;
use crate::model::PushedStatus;

/// What a kubelet's patch pushes and the condition types it names.
pub(super) struct KubeletStatus {
    pub status: PushedStatus,
    pub types: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Patch {
    status: Status,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Status {
    #[serde(default, deserialize_with = "present")]
    conditions: Option<Vec<Condition>>,
    #[serde(
        rename = "$setElementOrder/conditions",
        default,
        deserialize_with = "present"
    )]
    order: Option<IgnoredAny>,
    #[serde(rename = "nodeInfo", default, deserialize_with = "present")]
    node_info: Option<Info>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Condition {
    #[serde(rename = "type")]
    kind: String,
    status: String,
    reason: String,
    message: String,
    last_heartbeat_time: Time,
    #[serde(default, deserialize_with = "present")]
    last_transition_time: Option<Time>,
}

/// `status.nodeInfo` with every field a node records, and no other.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Info {
    #[serde(rename = "machineID")]
    machine_id: String,
    #[serde(rename = "systemUUID")]
    system_uuid: String,
    #[serde(rename = "bootID")]
    boot_id: String,
    kernel_version: String,
    os_image: String,
    container_runtime_version: String,
    kubelet_version: String,
    kube_proxy_version: String,
    operating_system: String,
    architecture: String,
}

/// A field that, when given, must hold a value: `null` is refused (and so
/// left to the general merge, where it deletes), not read as absent.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

/// The status a kubelet's patch `body` pushes, with the condition types it
/// names; `None` when the patch is of any other shape, or is refused by the
/// checks (the general path then says why).
pub(super) fn read(kind: PatchKind, body: &[u8]) -> Option<KubeletStatus> {
    let Patch { status } = serde_json::from_slice(body).ok()?;
    // Only a strategic merge patch has directives; in a JSON merge patch
    // the key would be a field of that name.
    if status.order.is_some() && kind != PatchKind::Strategic {
        return None;
    }
    let conditions = status.conditions.unwrap_or_default();
    let mut types: Vec<String> = Vec::with_capacity(conditions.len());
    for c in &conditions {
        if types.contains(&c.kind) {
            return None;
        }
        types.push(c.kind.clone());
    }
    let node = KubeNode {
        status: Some(NodeStatus {
            conditions: Some(conditions.into_iter().map(Condition::into_kube).collect()),
            node_info: status.node_info.map(Info::into_kube),
            ..NodeStatus::default()
        }),
        ..KubeNode::default()
    };
    let status = crate::kube::pushed_status(&node).ok()?;
    Some(KubeletStatus { status, types })
}

impl Condition {
    fn into_kube(self) -> NodeCondition {
        NodeCondition {
            type_: self.kind,
            status: self.status,
            reason: Some(self.reason),
            message: Some(self.message),
            last_heartbeat_time: Some(self.last_heartbeat_time),
            last_transition_time: self.last_transition_time,
        }
    }
}

impl Info {
    fn into_kube(self) -> NodeSystemInfo {
        NodeSystemInfo {
            machine_id: self.machine_id,
            system_uuid: self.system_uuid,
            boot_id: self.boot_id,
            kernel_version: self.kernel_version,
            os_image: self.os_image,
            container_runtime_version: self.container_runtime_version,
            kubelet_version: self.kubelet_version,
            kube_proxy_version: self.kube_proxy_version,
            operating_system: self.operating_system,
            architecture: self.architecture,
            ..NodeSystemInfo::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::*;

    fn info() -> Value {
        json!({
            "machineID": "m", "systemUUID": "u", "bootID": "b", "kernelVersion": "6.1",
            "osImage": "Debian", "containerRuntimeVersion": "containerd://2.0",
            "kubeletVersion": "v1.33.0", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64",
        })
    }

    fn ready() -> Value {
        json!({
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": "2026-11-30T09:00:00Z",
        })
    }

    fn kubelets_patch() -> Value {
        json!({"status": {
            "$setElementOrder/conditions": [{"type": "Ready"}],
            "conditions": [ready()],
            "nodeInfo": info(),
        }})
    }

    fn read_value(kind: PatchKind, patch: &Value) -> Option<KubeletStatus> {
        read(kind, &serde_json::to_vec(patch).unwrap())
    }

    #[test]
    fn a_kubelets_patch_pushes_what_the_node_object_would() {
        let patch = kubelets_patch();
        let read = read_value(PatchKind::Strategic, &patch).expect("a kubelet's patch is read");
        let node: KubeNode = serde_json::from_value(patch).unwrap();
        assert_eq!(read.status, crate::kube::pushed_status(&node).unwrap());
        assert_eq!(read.types, ["Ready"]);
        assert_eq!(read.status.node_info.unwrap().boot_id, "b");
    }

    #[test]
    fn conditions_alone_or_node_info_alone_are_read() {
        let conditions = json!({"status": {"conditions": [ready()]}});
        let read = read_value(PatchKind::Merge, &conditions).unwrap();
        assert!(read.status.node_info.is_none());
        let info = json!({"status": {"nodeInfo": info()}});
        let read = read_value(PatchKind::Strategic, &info).unwrap();
        assert!(read.status.conditions.is_empty() && read.types.is_empty());
    }

    #[test]
    fn any_other_shape_is_left_to_the_merge() {
        let mut with_transition = ready();
        with_transition["lastTransitionTime"] = json!("2026-11-30T08:00:00Z");
        assert!(read_value(
            PatchKind::Strategic,
            &json!({"status": {"conditions": [with_transition]}})
        )
        .is_some());
        let mut cases = vec![
            json!({"status": {"conditions": null}}),
            json!({"status": {"nodeInfo": null}}),
            json!({"status": null}),
            json!({"status": {"conditions": [ready(), ready()]}}),
            json!({"status": {"conditions": [ready()], "addresses": []}}),
            json!({"status": {"conditions": [ready()]}, "metadata": {}}),
            json!({"status": {"$setElementOrder/conditions": [], "conditions": [ready()]}}),
            json!([1]),
        ];
        for (field, value) in [
            ("reason", Value::Null),
            ("status", json!("Maybe")),
            ("lastHeartbeatTime", json!("yesterday")),
            ("lastTransitionTime", Value::Null),
            ("extra", json!("x")),
        ] {
            let mut c = ready();
            c[field] = value;
            cases.push(json!({"status": {"conditions": [c]}}));
        }
        let mut c = ready();
        c.as_object_mut().unwrap().remove("message");
        cases.push(json!({"status": {"conditions": [c]}}));
        let mut partial = info();
        partial.as_object_mut().unwrap().remove("bootID");
        cases.push(json!({"status": {"nodeInfo": partial}}));
        let mut wider = info();
        wider["swap"] = json!({});
        cases.push(json!({"status": {"nodeInfo": wider}}));
        for (i, patch) in cases.iter().enumerate() {
            // The directive case is a JSON merge patch; the rest are both.
            let kinds: &[PatchKind] = if i == 6 {
                &[PatchKind::Merge]
            } else {
                &[PatchKind::Merge, PatchKind::Strategic]
            };
            for kind in kinds {
                assert!(read_value(*kind, patch).is_none(), "{kind:?} {patch}");
            }
        }
        // A key given twice is left to the merge too.
        let twice = br#"{"status":{"conditions":[],"conditions":[]}}"#;
        assert!(read(PatchKind::Merge, twice).is_none());
    }
}
