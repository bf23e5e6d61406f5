//! `nodekeeper-bench --push --burst`: every node of the first sim process
//! set to one state at once, timed by the sim itself from the request to
//! the last answer, then until the controller's /metrics shows it.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nodekeeper_sim::push::Percentiles;

use super::{scrape, sim_pushes, Run};

/// How long a burst of status changes may take before the run fails.
const BURST_TIMEOUT: Duration = Duration::from_secs(60);
/// How often a burst's progress is read: the sim's counters while it
/// waits for the answers (the sim times them itself), then the
/// controller's /metrics until the change is readable.
const BURST_POLL: Duration = Duration::from_millis(50);

/// One burst of status changes: every node of the first sim process set to
/// one state at once.
#[derive(Debug, Clone)]
pub(super) struct Burst {
    state: &'static str,
    nodes: u64,
    /// From the request reaching the sim's control endpoint to the last
    /// change answered, as the sim timed it.
    all_answered: Duration,
    /// Each change's answer, timed by the sim from the request.
    from_request: Percentiles,
    /// Each change's answer, timed by the sim from the node's own notice of
    /// its change (the old "slowest answer" is its maximum).
    from_notice: Percentiles,
    /// From the bench sending the request to the read of /metrics that
    /// showed the new Ready count (readers see only durable state).
    visible: Duration,
    /// Whether that was the first read, made once every change was
    /// answered: the count may have been right earlier.
    visible_at_first_read: bool,
    /// Condition transitions the controller counted during the burst.
    transitions: f64,
    /// Store flushes the controller made for them, if it reports flushes.
    flushes: Option<f64>,
}

impl Burst {
    pub(super) fn describe(&self) -> String {
        format!(
            "burst to {}: {} nodes changed, all answered after {:.3}s (sim-timed from the request; \
             each answer from the request p50/p99/max {} ms, from the node's notice {} ms), \
             readable after {}s, {} transitions, {} flushes",
            self.state,
            self.nodes,
            self.all_answered.as_secs_f64(),
            millis(&self.from_request),
            millis(&self.from_notice),
            self.readable(),
            self.transitions,
            self.flushes.map_or("?".into(), |f| f.to_string())
        )
    }

    /// "1.234", or "≤1.234" when the first read already showed the change.
    fn readable(&self) -> String {
        let bound = if self.visible_at_first_read {
            "≤"
        } else {
            ""
        };
        format!("{bound}{:.3}", self.visible.as_secs_f64())
    }
}

/// `p50 / p99 / max` in milliseconds.
fn millis(p: &Percentiles) -> String {
    let ms = |us: u64| us as f64 / 1000.0;
    format!("{:.1} / {:.1} / {:.1}", ms(p.p50), ms(p.p99), ms(p.max))
}

/// Sets every node of the first sim to `state` and waits until each change
/// is answered and readable. The sim times the answers itself, so while
/// they come only its counters are read; the controller's /metrics is read
/// before, then from the last answer on until it shows the new Ready count.
pub(super) async fn status_burst(
    run: &Run,
    client: &reqwest::Client,
    url: &str,
    state: &'static str,
) -> Result<Burst> {
    let control = run
        .sim_controls
        .first()
        .ok_or_else(|| anyhow!("no sim to change"))?;
    let first = std::slice::from_ref(control);
    let nodes = sim_pushes(client, first).await?.nodes;
    let metrics_before = scrape(client, url).await?;
    let want_ready = if state == "up" {
        metrics_before.ready + nodes as f64
    } else {
        metrics_before.ready - nodes as f64
    };
    let started = Instant::now();
    client
        .put(format!("{control}/nodes"))
        .json(&serde_json::json!({ "state": state }))
        .send()
        .await
        .and_then(reqwest::Response::error_for_status)
        .with_context(|| format!("PUT {control}/nodes"))?;
    // Ends once the sim saw every change answered, or at the timeout.
    let timing = loop {
        let now = sim_pushes(client, first).await?;
        match now.last_change {
            Some(t) if t.all_answered() => break t,
            _ if started.elapsed() > BURST_TIMEOUT => bail!(
                "setting {nodes} nodes {state}: after {BURST_TIMEOUT:?}, {} (last error: {})",
                now.last_change
                    .map_or("the sim reports no change".into(), |t| format!(
                        "{} of {} changes answered",
                        t.answered,
                        t.requested.map_or("?".into(), |r| r.to_string())
                    )),
                now.last_error.as_deref().unwrap_or("none")
            ),
            _ => tokio::time::sleep(BURST_POLL).await,
        }
    };
    if timing.requested != Some(nodes) {
        bail!(
            "setting {nodes} nodes {state}: the sim changed {:?} of them (some were {state} already?)",
            timing.requested
        );
    }
    let mut reads = 0;
    // Ends when /metrics shows the new Ready count, or at the timeout.
    let (visible, after) = loop {
        let now = scrape(client, url).await?;
        reads += 1;
        if now.ready == want_ready {
            break (started.elapsed(), now);
        }
        if started.elapsed() > BURST_TIMEOUT {
            bail!(
                "setting {nodes} nodes {state}: every change answered, but after {BURST_TIMEOUT:?} \
                 /metrics shows {} Ready, not {want_ready}",
                now.ready
            );
        }
        tokio::time::sleep(BURST_POLL).await;
    };
    let sim_timed = |p: Option<Percentiles>| p.ok_or_else(|| anyhow!("the sim timed no answer"));
    Ok(Burst {
        state,
        nodes,
        all_answered: Duration::from_micros(timing.last_answer_us.unwrap_or(0)),
        from_request: sim_timed(timing.from_request_us)?,
        from_notice: sim_timed(timing.from_notice_us)?,
        visible,
        visible_at_first_read: reads == 1,
        transitions: after.transitions - metrics_before.transitions,
        flushes: after
            .flushes
            .zip(metrics_before.flushes)
            .map(|(a, b)| a - b),
    })
}

/// The report's table of `nodes`' bursts, and what each column measures.
pub(super) fn section(nodes: usize, bursts: &[Burst]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### {} nodes: status bursts (every node of the first sim changes at once)\n",
        nodes
    );
    let _ = writeln!(
        out,
        "| to | nodes | all answered after (s) | each answer from the request p50 / p99 / max (ms) | from the node's notice p50 / p99 / max (ms) | readable after (s) | transitions | store flushes |"
    );
    let _ = writeln!(out, "|---|---:|---:|---:|---:|---:|---:|---:|");
    for b in bursts {
        let _ = writeln!(
            out,
            "| {} | {} | {:.3} | {} | {} | {} | {} | {} |",
            b.state,
            b.nodes,
            b.all_answered.as_secs_f64(),
            millis(&b.from_request),
            millis(&b.from_notice),
            b.readable(),
            b.transitions,
            b.flushes.map_or("?".into(), |f| f.to_string())
        );
    }
    let _ = writeln!(
        out,
        "\n- all answered after: from the request reaching the sim's control endpoint to the last \
         change answered (an accepted status update reporting it; the controller answers each only \
         once it is on disk), timed by the sim itself.\n\
         - each answer from the request: every change's answer, timed the same way; from the node's \
         notice: from when the node's task woke to its change (a busy machine delays that), whose \
         maximum is what this table called the slowest answer before.\n\
         - readable after: from the bench sending the request to the read of /metrics that showed \
         the new Ready count. /metrics is read only once the sim reports every change answered, \
         then every {} ms; ≤ marks a count already right at that first read (readable then or earlier).",
        BURST_POLL.as_millis()
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_says_what_the_sim_timed_and_when_the_change_was_readable() {
        let burst = |visible_at_first_read| Burst {
            state: "sick",
            nodes: 5000,
            all_answered: Duration::from_micros(1_400_123),
            from_request: Percentiles {
                p50: 805_000,
                p99: 1_389_500,
                max: 1_400_123,
            },
            from_notice: Percentiles {
                p50: 726_300,
                p99: 1_172_900,
                max: 1_186_000,
            },
            visible: Duration::from_millis(1449),
            visible_at_first_read,
            transitions: 5000.0,
            flushes: Some(10.0),
        };
        let table = section(10_000, &[burst(true), burst(false)]);
        assert!(
            table.contains("| sick | 5000 | 1.400 | 805.0 / 1389.5 / 1400.1 | 726.3 / 1172.9 / 1186.0 | ≤1.449 | 5000 | 10 |"),
            "{table}"
        );
        assert!(table.contains("| 1.449 | 5000 | 10 |"), "{table}");
        assert!(table.contains("every 50 ms"), "{table}");
    }
}
