//! `nodekeeper at TIME`: the registry as it was then, rebuilt from the
//! nearest checkpoint and the events after it.

use super::{node_list_text, Failure, Outcome};
use crate::cli::ListFormat;
use crate::inspect::Source;
use crate::model::Micros;

pub async fn at(source: &Source, time: &str, format: ListFormat) -> Outcome {
    let when = Micros::parse_instant(time, Micros::now()).map_err(|e| Failure {
        message: e,
        code: 2,
    })?;
    let registry = source.registry_at(when).await?;
    match format {
        ListFormat::Table => {
            let nodes: Vec<_> = registry.nodes.into_values().collect();
            let mut text = format!(
                "# the registry at {} (after event {})\n",
                when, registry.seq
            );
            text.push_str(&crate::output::nodes_table(&nodes, false, when));
            Ok(text)
        }
        ListFormat::Json => {
            let nodes: Vec<_> = registry.nodes.into_values().map(|n| (n, None)).collect();
            node_list_text(&nodes, registry.seq, false)
        }
    }
}
