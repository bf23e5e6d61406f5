//! `nodekeeper at TIME`: the registry rebuilt from its events as it was then.

use super::{node_list_text, Failure, Outcome};
use crate::cli::ListFormat;
use crate::inspect::Source;
use crate::model::Micros;
use crate::server::HistoryParams;

pub async fn at(source: &Source, time: &str, format: ListFormat) -> Outcome {
    let when = Micros::parse_instant(time, Micros::now()).map_err(|e| Failure {
        message: e,
        code: 2,
    })?;
    let params = HistoryParams {
        until: Some(when.rfc3339()),
        ..HistoryParams::default()
    };
    let events = source.history(&params).await?;
    let registry = crate::history::replay(&events);
    match format {
        ListFormat::Table => {
            let nodes: Vec<_> = registry.into_values().collect();
            let mut text = format!(
                "# the registry at {} (after event {})\n",
                when,
                events.last().map_or(0, |e| e.seq)
            );
            text.push_str(&crate::output::nodes_table(&nodes, false, when));
            Ok(text)
        }
        ListFormat::Json => {
            let nodes: Vec<_> = registry.into_values().map(|n| (n, None)).collect();
            node_list_text(&nodes, events.last().map_or(0, |e| e.seq), false)
        }
    }
}
