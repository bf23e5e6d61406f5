//! `nodekeeper mirror status`.

use super::Outcome;
use crate::cli::{ListFormat, MirrorCommand};
use crate::inspect::Source;
use crate::logging::terminal::escape;
use crate::mirror::{BudgetStatus, MirrorStatus, UpstreamStatus};
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

/// What the API server lacks or has otherwise. Never a clean slate while
/// nodes are missing there, nor while the mirror cannot tell.
fn upstream_text(u: &UpstreamStatus, leader: bool, age: &dyn Fn(Micros) -> String) -> String {
    if !leader {
        return "- (not leading: the API server's nodes are not followed)".into();
    }
    let Some(listed) = u.last_list else {
        return "not listed yet: how many nodes it lacks is unknown".into();
    };
    format!(
        "{} registry nodes missing, {} differing; {}, last listed {}",
        u.missing,
        u.differ,
        if u.watching {
            "watching"
        } else {
            "NOT watching"
        },
        age(listed)
    )
}

fn budget_text(b: &BudgetStatus) -> String {
    let rate = format!(
        "{} requests/s, burst {} ({})",
        b.qps,
        b.burst,
        if b.sized {
            "sized from the Ready nodes"
        } else {
            "--kube-api-qps"
        }
    );
    let leases = match b.lease_renew_interval_seconds {
        None => "node Leases not mirrored".to_string(),
        Some(every) => format!(
            "{} Ready nodes' Leases every {} need {:.1}/s",
            b.ready_nodes,
            crate::duration::format(std::time::Duration::from_secs_f64(every)),
            b.lease_qps
        ),
    };
    match &b.shortfall {
        None => format!("{rate}; {leases}: enough"),
        Some(why) => format!("{rate}; NOT ENOUGH: {why}"),
    }
}

/// `mirror status` as text. Over 80 lines: one line or block per field, in
/// the order shown. Values are escaped ([`escape`]): the last error is the
/// API server's words.
fn status_text(s: &MirrorStatus, now: Micros) -> String {
    let mut out = String::new();
    let mut line = |k: &str, v: String| out.push_str(&format!("{k:<16}{}\n", escape(&v)));
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
    let drift = s
        .upstream
        .as_ref()
        .filter(|u| s.leader && u.missing + u.differ > 0)
        .map_or(String::new(), |u| {
            format!(
                " ({} nodes missing and {} differing on the API server)",
                u.missing, u.differ
            )
        });
    line("Backlog:", format!("{} entries{drift}", s.backlog));
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
        line(
            "Throttled:",
            match &s.last_throttled {
                None => format!("{} answers 429", s.throttled),
                Some(t) => format!(
                    "{} answers 429, the last {} (waited its Retry-After of {})",
                    s.throttled,
                    age(t.time),
                    crate::duration::format(std::time::Duration::from_secs_f64(
                        t.retry_after_seconds
                    ))
                ),
            },
        );
    }
    if let Some(u) = &s.upstream {
        line("Upstream:", upstream_text(u, s.leader, &age));
    }
    if let Some(b) = &s.budget {
        line("Budget:", budget_text(b));
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
                escape(&e.kind),
                escape(&e.node),
                e.seq,
                e.enqueued.rfc3339_seconds()
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mirror::{BudgetFlags, Plan};
    use std::time::Duration;

    fn status(missing: usize, leader: bool) -> MirrorStatus {
        let plan = Plan::new(
            600,
            Some(Duration::from_secs(40) / 3),
            BudgetFlags {
                qps: Some(20.0),
                burst: Some(30),
            },
        );
        MirrorStatus {
            running: true,
            server: Some("http://127.0.0.1:6443/".into()),
            identity: Some("me".into()),
            leader,
            backlog: 0,
            oldest_entry: None,
            last_error: None,
            last_success: Some(Micros(1_000_000)),
            requests: 10,
            retries: 0,
            lease_renewals: 5,
            throttled: 2,
            last_throttled: Some(crate::mirror::Throttle {
                time: Micros(1_000_000),
                retry_after_seconds: 5.0,
            }),
            upstream: Some(UpstreamStatus {
                missing,
                differ: 0,
                watching: false,
                last_list: Some(Micros(1_000_000)),
            }),
            budget: Some(BudgetStatus::from(&plan)),
            entries: vec![],
        }
    }

    #[test]
    fn an_empty_backlog_is_not_a_clean_slate_while_nodes_are_missing_upstream() {
        let text = status_text(&status(8, true), Micros(3_000_000));
        assert!(
            text.contains(
                "Backlog:        0 entries (8 nodes missing and 0 differing on the API server)"
            ),
            "{text}"
        );
        assert!(
            text.contains(
                "Upstream:       8 registry nodes missing, 0 differing; NOT watching, last listed"
            ),
            "{text}"
        );
        assert!(
            text.contains("Throttled:      2 answers 429, the last 1970-01-01T00:00:01Z (2s ago) (waited its Retry-After of 5s)"),
            "{text}"
        );
        assert!(
            text.contains("Budget:         20 requests/s, burst 30 (--kube-api-qps); NOT ENOUGH: renewing the Leases of 600 Ready nodes"),
            "{text}"
        );
        let standby = status_text(&status(8, false), Micros(3_000_000));
        assert!(standby.contains("Backlog:        0 entries\n"), "{standby}");
        assert!(standby.contains("not leading"), "{standby}");
    }

    #[test]
    fn the_api_servers_words_are_shown_escaped() {
        let mut s = status(0, true);
        // ESC with CSI and OSC (ended by BEL), CR, LF forging a line, C1's CSI.
        s.last_error = Some(crate::mirror::ErrorNote {
            time: Micros(1_000_000),
            message: "denied\x1b[2J\x1b]0;pwned\x07\r\nLast success:   now\u{9b}31m".into(),
        });
        let text = status_text(&s, Micros(3_000_000));
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        let lines = |start: &str| text.lines().filter(|l| l.starts_with(start)).count();
        assert_eq!(lines("Last success:"), 1, "{text}");
        assert!(
            text.contains(
                "(2s ago): denied\\x1b[2J\\x1b]0;pwned\\x07\\r\\nLast success:   now\\u{9b}31m\n"
            ),
            "{text}"
        );
    }
}
