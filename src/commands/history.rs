//! `nodekeeper history`: the events, filtered.

use super::Outcome;
use crate::cli::{HistoryArgs, ListFormat};
use crate::inspect::Source;
use crate::server::HistoryParams;

pub async fn history(source: &Source, args: &HistoryArgs) -> Outcome {
    let params = HistoryParams {
        node: args.node.as_ref().map(|n| n.to_ascii_lowercase()),
        since: args.since.clone(),
        until: args.until.clone(),
        condition: args.condition.clone(),
        ..HistoryParams::default()
    };
    let events = source.history(&params).await?;
    match args.output {
        ListFormat::Table => Ok(crate::output::history_table(&events)),
        ListFormat::Json => Ok(serde_json::to_string_pretty(&events)? + "\n"),
    }
}
