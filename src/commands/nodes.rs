//! `nodekeeper nodes`: the registry, as kubectl would list it.

use super::{newest_version, node_list_text, Outcome};
use crate::cli::NodesFormat;
use crate::inspect::Source;
use crate::model::Micros;

pub async fn nodes(source: &Source, format: NodesFormat) -> Outcome {
    let nodes = source.nodes().await?;
    match format {
        NodesFormat::Table | NodesFormat::Wide => {
            let plain: Vec<_> = nodes.into_iter().map(|(n, _)| n).collect();
            Ok(crate::output::nodes_table(
                &plain,
                format == NodesFormat::Wide,
                Micros::now(),
            ))
        }
        NodesFormat::Json => node_list_text(&nodes, newest_version(&nodes), false),
        NodesFormat::Yaml => node_list_text(&nodes, newest_version(&nodes), true),
    }
}
