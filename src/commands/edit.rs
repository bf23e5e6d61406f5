//! `nodekeeper cordon|uncordon|label|annotate|taint|delete NODE`: what
//! kubectl does to a node, on a running controller or a stopped store alike.
//! Each builds the patch kubectl would send and hands it to
//! [`Source::write_node`], so both ways take the API's checks.

use serde_json::{json, Map, Value};

use super::{Failure, Outcome};
use crate::cli::{LabelArgs, TaintArgs};
use crate::controller::operator::is_managed_taint;
use crate::inspect::{InspectError, Source};
use crate::k8s::TaintJson;
use crate::model::{Node, Taint};
use crate::server::node_writes::{NodeWrite, PatchFormat};

/// A write is applied again this often when the node changed under it.
const RETRIES: usize = 5;

fn usage(message: String) -> Failure {
    Failure { message, code: 2 }
}

/// `cordon` (`on`) or `uncordon`.
pub async fn cordon(source: &Source, name: &str, on: bool) -> Outcome {
    let name = name.to_ascii_lowercase();
    let (node, _) = source.node(&name).await?;
    let done = if on { "cordoned" } else { "uncordoned" };
    if node.unschedulable == on {
        return Ok(format!("node/{name} already {done}\n"));
    }
    let write = NodeWrite::Patch {
        format: PatchFormat::Strategic,
        body: json!({"spec": {"unschedulable": on}}),
    };
    source.write_node(&name, &write).await?;
    Ok(format!("node/{name} {done}\n"))
}

/// One `KEY=VALUE` (set) or `KEY-` (remove).
fn parse_label(change: &str) -> Result<(String, Option<String>), Failure> {
    if let Some(key) = change.strip_suffix('-') {
        if !key.is_empty() && !key.contains('=') {
            return Ok((key.to_string(), None));
        }
    }
    match change.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_string(), Some(value.to_string()))),
        _ => Err(usage(format!(
            "{change:?} is neither KEY=VALUE (to set) nor KEY- (to remove)"
        ))),
    }
}

/// `label` (or `annotate`, with `annotations`): a merge patch of the keys given.
pub async fn label(source: &Source, args: &LabelArgs, annotations: bool) -> Outcome {
    let name = args.node.to_ascii_lowercase();
    let changes = args
        .changes
        .iter()
        .map(|c| parse_label(c))
        .collect::<Result<Vec<_>, _>>()?;
    let (node, _) = source.node(&name).await?;
    let (field, current, what) = if annotations {
        ("annotations", &node.annotations, "annotated")
    } else {
        ("labels", &node.labels, "labeled")
    };
    let mut patch = Map::new();
    for (key, value) in &changes {
        if let (Some(old), Some(new)) = (current.get(key), value) {
            if old != new && !args.overwrite {
                return Err(usage(format!(
                    "{key:?} already has a value ({old:?}), and --overwrite is false"
                )));
            }
        }
        patch.insert(
            key.clone(),
            value.clone().map_or(Value::Null, Value::String),
        );
    }
    let write = NodeWrite::Patch {
        format: PatchFormat::Merge,
        body: json!({"metadata": {field: patch}}),
    };
    source.write_node(&name, &write).await?;
    let removed_only = changes.iter().all(|(_, v)| v.is_none());
    let what = match (removed_only, annotations) {
        (true, false) => "unlabeled",
        (true, true) => "unannotated",
        _ => what,
    };
    Ok(format!("node/{name} {what}\n"))
}

/// A taint change: add `KEY[=VALUE]:EFFECT`, or remove `KEY-` / `KEY:EFFECT-`.
#[derive(Debug, PartialEq)]
enum TaintChange {
    Add(Taint),
    Remove { key: String, effect: Option<String> },
}

fn parse_taint(change: &str) -> Result<TaintChange, Failure> {
    let bad = || {
        usage(format!(
            "{change:?} is not a taint: KEY[=VALUE]:EFFECT to add (EFFECT is NoSchedule, \
             PreferNoSchedule or NoExecute), KEY- or KEY:EFFECT- to remove"
        ))
    };
    if let Some(rest) = change.strip_suffix('-') {
        let (key, effect) = match rest.split_once(':') {
            Some((key, effect)) => (key, Some(effect.to_string())),
            None => (rest, None),
        };
        if key.is_empty() || key.contains('=') {
            return Err(bad());
        }
        return Ok(TaintChange::Remove {
            key: key.to_string(),
            effect,
        });
    }
    let (head, effect) = change.rsplit_once(':').ok_or_else(bad)?;
    let (key, value) = match head.split_once('=') {
        Some((k, v)) => (k, v),
        None => (head, ""),
    };
    if key.is_empty() || effect.is_empty() {
        return Err(bad());
    }
    Ok(TaintChange::Add(Taint {
        key: key.to_string(),
        value: value.to_string(),
        effect: effect.to_string(),
        added: None,
    }))
}

/// The operator's taints after `changes`, or why not (kubectl's rules).
fn taints_after(
    node: &Node,
    changes: &[TaintChange],
    overwrite: bool,
) -> Result<Vec<Taint>, Failure> {
    let mut taints: Vec<Taint> = node
        .taints
        .iter()
        .filter(|t| !is_managed_taint(&t.key))
        .cloned()
        .collect();
    for change in changes {
        match change {
            TaintChange::Add(t) => {
                let same = |x: &Taint| x.key == t.key && x.effect == t.effect;
                match taints.iter_mut().find(|x| same(x)) {
                    Some(_) if !overwrite => {
                        return Err(usage(format!(
                        "node {} already has {} taint(s) with effect {}, and --overwrite is false",
                        node.name, t.key, t.effect
                    )))
                    }
                    Some(x) => x.value = t.value.clone(),
                    None => taints.push(t.clone()),
                }
            }
            TaintChange::Remove { key, effect } => {
                let before = taints.len();
                taints
                    .retain(|x| !(x.key == *key && effect.as_ref().is_none_or(|e| x.effect == *e)));
                if taints.len() == before {
                    return Err(usage(format!(
                        "taint {key:?} not found on node {}",
                        node.name
                    )));
                }
            }
        }
    }
    Ok(taints)
}

/// `taint`: the whole list (the controller's taints as read) with the
/// node's resourceVersion, read and sent again if the node changed meanwhile.
pub async fn taint(source: &Source, args: &TaintArgs) -> Outcome {
    let name = args.node.to_ascii_lowercase();
    let changes = args
        .changes
        .iter()
        .map(|c| parse_taint(c))
        .collect::<Result<Vec<_>, _>>()?;
    for _ in 0..RETRIES {
        let (node, _) = source.node(&name).await?;
        let mut taints: Vec<Value> = taints_after(&node, &changes, args.overwrite)?
            .iter()
            .map(|t| json!(TaintJson(t)))
            .collect();
        taints.extend(
            node.taints
                .iter()
                .filter(|t| is_managed_taint(&t.key))
                .map(|t| json!(TaintJson(t))),
        );
        let write = NodeWrite::Patch {
            format: PatchFormat::Merge,
            body: json!({
                "metadata": {"resourceVersion": node.resource_version.to_string()},
                "spec": {"taints": taints},
            }),
        };
        match source.write_node(&name, &write).await {
            Ok(_) => {
                let removed_only = changes
                    .iter()
                    .all(|c| matches!(c, TaintChange::Remove { .. }));
                let what = if removed_only { "untainted" } else { "tainted" };
                return Ok(format!("node/{name} {what}\n"));
            }
            // The controller changed the node (its own taints, say): read it again.
            Err(InspectError::Conflict(_)) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(Failure {
        message: format!("node {name} kept changing; try again"),
        code: 1,
    })
}

/// `delete`: a node no source lists is deleted, its history kept.
pub async fn delete(source: &Source, name: &str) -> Outcome {
    let name = name.to_ascii_lowercase();
    source.delete_node(&name).await?;
    Ok(format!(
        "node {name:?} deleted (its history is kept: nodekeeper history {name})\n"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_arguments() {
        assert_eq!(parse_label("a=b").unwrap(), ("a".into(), Some("b".into())));
        assert_eq!(
            parse_label("a=").unwrap(),
            ("a".into(), Some(String::new()))
        );
        assert_eq!(parse_label("ex.io/a-").unwrap(), ("ex.io/a".into(), None));
        assert_eq!(
            parse_label("a=b-").unwrap(),
            ("a".into(), Some("b-".into()))
        );
        assert!(parse_label("a").is_err());
        assert!(parse_label("=b").is_err());
        assert!(parse_label("-").is_err());
    }

    #[test]
    fn taint_arguments() {
        let add = |k: &str, v: &str, e: &str| {
            TaintChange::Add(Taint {
                key: k.into(),
                value: v.into(),
                effect: e.into(),
                added: None,
            })
        };
        assert_eq!(
            parse_taint("dedicated=gpu:NoSchedule").unwrap(),
            add("dedicated", "gpu", "NoSchedule")
        );
        assert_eq!(
            parse_taint("k:NoExecute").unwrap(),
            add("k", "", "NoExecute")
        );
        assert_eq!(
            parse_taint("k-").unwrap(),
            TaintChange::Remove {
                key: "k".into(),
                effect: None
            }
        );
        assert_eq!(
            parse_taint("k:NoSchedule-").unwrap(),
            TaintChange::Remove {
                key: "k".into(),
                effect: Some("NoSchedule".into())
            }
        );
        for bad in ["k", "k=v", ":NoSchedule", "k:", "=v-", "-"] {
            assert!(parse_taint(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn taints_follow_kubectl_rules_and_keep_the_managed_ones_out() {
        let mut node = crate::store::records::tests::sample_node();
        node.taints = vec![Taint {
            key: "node.kubernetes.io/unreachable".into(),
            value: String::new(),
            effect: "NoSchedule".into(),
            added: None,
        }];
        let add = parse_taint("dedicated=gpu:NoSchedule").unwrap();
        let after = taints_after(&node, std::slice::from_ref(&add), false).unwrap();
        assert_eq!(after.len(), 1);
        assert_eq!(after[0].key, "dedicated");
        node.taints.insert(0, after[0].clone());
        assert!(taints_after(&node, std::slice::from_ref(&add), false).is_err());
        let other = parse_taint("dedicated=cpu:NoSchedule").unwrap();
        assert_eq!(taints_after(&node, &[other], true).unwrap()[0].value, "cpu");
        assert!(
            taints_after(&node, &[parse_taint("dedicated-").unwrap()], false)
                .unwrap()
                .is_empty()
        );
        assert!(taints_after(&node, &[parse_taint("missing-").unwrap()], false).is_err());
    }
}
