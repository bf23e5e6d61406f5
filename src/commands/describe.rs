//! `nodekeeper describe NODE`: one node and its history.

use super::Outcome;
use crate::inspect::Source;
use crate::model::Micros;
use crate::server::HistoryParams;

pub async fn describe(source: &Source, name: &str) -> Outcome {
    let name = name.to_ascii_lowercase();
    let (node, heartbeat) = source.node(&name).await?;
    let history = source
        .history(&HistoryParams {
            node: Some(name),
            ..HistoryParams::default()
        })
        .await?;
    Ok(crate::output::describe(
        &node,
        &history,
        heartbeat,
        Micros::now(),
    ))
}
