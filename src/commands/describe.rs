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
    let mut text = crate::output::describe(&node, &history, heartbeat, Micros::now());
    if node.source.starts_with("cloud/") {
        if let Some(status) = source.source_status().await? {
            text.push_str(&source_line(&status));
        }
    }
    Ok(text)
}

/// How the node's source is doing, for operators wondering why it is (still) here.
fn source_line(s: &crate::controller::SourceStatus) -> String {
    let last = s
        .last_success
        .map_or("never".to_string(), |t| t.rfc3339_seconds());
    match &s.last_error {
        Some(error) if s.consecutive_failures > 0 => format!(
            "Source:  {} — {} failed listing(s) in a row, last: {error}; last good listing {last} (the registry is kept as it was)\n",
            s.source, s.consecutive_failures
        ),
        _ => format!("Source:  {} — last listed {last}, {} machines\n", s.source, s.machines),
    }
}
