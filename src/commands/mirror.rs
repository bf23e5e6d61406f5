//! `nodekeeper mirror status`.

use super::Outcome;
use crate::cli::{ListFormat, MirrorCommand};
use crate::inspect::Source;
use crate::mirror::MirrorStatus;
use crate::model::Micros;

pub async fn mirror(source: &Source, command: &MirrorCommand) -> Outcome {
    match command {
        MirrorCommand::Status { output } => {
            let status = source.mirror_status().await?;
            Ok(match output {
                ListFormat::Json => serde_json::to_string_pretty(&status)? + "\n",
                ListFormat::Table => status_text(&status, Micros::now()),
            })
        }
    }
}

fn status_text(s: &MirrorStatus, now: Micros) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<16}{v}\n"));
    let age = |t: Micros| {
        format!(
            "{} ({} ago)",
            t.rfc3339_seconds(),
            crate::duration::format(std::time::Duration::from_secs(now.since(t).as_secs()))
        )
    };
    if s.running {
        line(
            "API server:",
            s.server.clone().unwrap_or_else(|| "-".into()),
        );
        line(
            "Leader:",
            format!(
                "{} ({})",
                if s.leader { "yes" } else { "no, standing by" },
                s.identity.as_deref().unwrap_or("-")
            ),
        );
    } else {
        line(
            "State:",
            "no controller running; read from the store".into(),
        );
    }
    line("Backlog:", format!("{} entries", s.backlog));
    line("Oldest entry:", s.oldest_entry.map_or("-".into(), age));
    line(
        "Last error:",
        s.last_error
            .as_ref()
            .map_or("-".into(), |e| format!("{}: {}", age(e.time), e.message)),
    );
    if s.running {
        line("Last success:", s.last_success.map_or("-".into(), age));
        line(
            "Requests:",
            format!(
                "{} ({} retries, {} Lease renewals)",
                s.requests, s.retries, s.lease_renewals
            ),
        );
    }
    if !s.entries.is_empty() {
        out.push_str("\nOLDEST ENTRIES\n");
        out.push_str(&format!(
            "{:<10}{:<40}{:<10}{}\n",
            "KIND", "NODE", "SEQ", "QUEUED"
        ));
        for e in &s.entries {
            out.push_str(&format!(
                "{:<10}{:<40}{:<10}{}\n",
                e.kind,
                e.node,
                e.seq,
                e.enqueued.rfc3339_seconds()
            ));
        }
    }
    out
}
