//! One file per subcommand; each returns what to print, so `main` stays thin.

pub mod at;
pub mod db;
pub mod describe;
pub mod edit;
pub mod history;
pub mod mirror;
pub mod nodes;
pub mod run;
pub mod sim;
pub mod ui;
pub mod version;

use crate::model::{Micros, Node};

/// A command's failure: the message for the user and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: i32,
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            message: e.to_string(),
            code: 1,
        }
    }
}

pub type Outcome = Result<String, Failure>;

/// Nodes as a Kubernetes NodeList, in JSON or YAML.
pub(crate) fn node_list_text(
    nodes: &[(Node, Option<Micros>)],
    version: u64,
    yaml: bool,
) -> Result<String, Failure> {
    let list = crate::kube::node_list(
        nodes.iter().map(|(n, beat)| crate::kube::node(n, *beat)),
        version,
    );
    if yaml {
        Ok(serde_yaml_ng::to_string(&list)?)
    } else {
        Ok(serde_json::to_string_pretty(&list)? + "\n")
    }
}

/// The newest resource version among `nodes`.
pub(crate) fn newest_version(nodes: &[(Node, Option<Micros>)]) -> u64 {
    nodes
        .iter()
        .map(|(n, _)| n.resource_version)
        .max()
        .unwrap_or(0)
}
