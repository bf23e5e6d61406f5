//! `nodekeeper-bench --push --reconnect-storm`: after the window, every
//! simulated kubelet drops its connection at once and reconnects (each
//! sim's control endpoint `POST /reconnect`), as kubelets do when a load
//! balancer or the controller's restart cuts them all. Timed by each sim
//! from the request reaching it to every node's first heartbeat answered on
//! its new connection (TCP, and with `--tls` a full TLS handshake with the
//! node's client certificate, then the request); the controller's CPU is
//! read before and after.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nodekeeper_sim::bench::{cpu_ticks, Machine};
use nodekeeper_sim::push::{ChangeTiming, Percentiles};

use super::{sim_pushes, sim_stats, Run};

/// How long every node may take to be answered on a new connection.
const STORM_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the sims' progress is read (they time the storm themselves).
const STORM_POLL: Duration = Duration::from_millis(100);

/// One reconnect storm.
#[derive(Debug, Clone)]
pub(super) struct Storm {
    nodes: u64,
    /// From the bench's first request to the last node answered on its new
    /// connection: the sims' own timings, each shifted by when its request was sent.
    all_answered: Duration,
    /// Each node's answer from its sim's request, in the slowest sim.
    from_request: Percentiles,
    /// Controller CPU-s from before the requests to the read that saw every
    /// node answered (which also carries the steady heartbeats meanwhile).
    controller_cpu: f64,
    /// Wall time of that CPU reading.
    cpu_wall: Duration,
    /// Connections the sims opened, and pushes that failed, meanwhile.
    connections: u64,
    failed: u64,
    last_error: Option<String>,
}

impl Storm {
    pub(super) fn describe(&self) -> String {
        format!(
            "reconnect storm: {} nodes answered on new connections after {:.3}s ({:.0} handshakes/s; \
             each from its sim's request p50/p99/max {} ms), controller {:.2} CPU-s over {:.2}s, \
             {} connections opened, {} pushes failed{}",
            self.nodes,
            self.all_answered.as_secs_f64(),
            self.rate(),
            millis(&self.from_request),
            self.controller_cpu,
            self.cpu_wall.as_secs_f64(),
            self.connections,
            self.failed,
            self.last_error
                .as_deref()
                .map_or(String::new(), |e| format!(" (last: {e})"))
        )
    }

    fn rate(&self) -> f64 {
        self.nodes as f64 / self.all_answered.as_secs_f64().max(1e-9)
    }
}

fn millis(p: &Percentiles) -> String {
    format!(
        "{:.0} / {:.0} / {:.0}",
        p.p50 as f64 / 1e3,
        p.p99 as f64 / 1e3,
        p.max as f64 / 1e3
    )
}

/// Asks every sim to reconnect all its nodes, and waits until each has
/// been answered on its new connection.
pub(super) async fn reconnect_storm(
    run: &mut Run,
    client: &reqwest::Client,
    machine: &Machine,
) -> Result<Storm> {
    let controller = run.procs.controller_pid()?;
    let before = sim_pushes(client, &run.sim_controls).await?;
    let cpu_before = cpu_ticks(controller)?;
    let started = Instant::now();
    let mut offsets = Vec::with_capacity(run.sim_controls.len());
    let mut nodes = 0;
    for control in &run.sim_controls {
        offsets.push(started.elapsed());
        let url = format!("{control}/reconnect");
        let answer: serde_json::Value = client
            .post(&url)
            .send()
            .await
            .and_then(reqwest::Response::error_for_status)
            .with_context(|| format!("POST {url}"))?
            .json()
            .await
            .with_context(|| format!("POST {url}: not JSON"))?;
        nodes += answer["nodes"]
            .as_u64()
            .ok_or_else(|| anyhow!("POST {url}: no \"nodes\" in {answer}"))?;
    }
    let deadline = started + STORM_TIMEOUT;
    let timings = loop {
        tokio::time::sleep(STORM_POLL).await;
        run.procs.check_alive()?;
        let timings = reconnect_timings(client, &run.sim_controls).await?;
        if timings.iter().all(ChangeTiming::all_answered) {
            break timings;
        }
        if Instant::now() > deadline {
            let answered: u64 = timings.iter().map(|t| t.answered).sum();
            let last = sim_pushes(client, &run.sim_controls).await?.last_error;
            bail!(
                "reconnect storm: {answered} of {nodes} nodes answered on a new connection within \
                 {STORM_TIMEOUT:?} (last push error: {})",
                last.as_deref().unwrap_or("none")
            );
        }
    };
    let cpu_after = cpu_ticks(controller)?;
    let cpu_wall = started.elapsed();
    let after = sim_pushes(client, &run.sim_controls).await?;
    let mut all_answered = Duration::ZERO;
    let mut from_request: Option<Percentiles> = None;
    for (timing, offset) in timings.iter().zip(&offsets) {
        let last = Duration::from_micros(timing.last_answer_us.unwrap_or(0));
        all_answered = all_answered.max(*offset + last);
        if let Some(p) = timing.from_request_us {
            if from_request.is_none_or(|slowest| p.max > slowest.max) {
                from_request = Some(p);
            }
        }
    }
    Ok(Storm {
        nodes,
        all_answered,
        from_request: from_request.ok_or_else(|| anyhow!("reconnect storm: no node answered"))?,
        controller_cpu: (cpu_after - cpu_before) as f64 / machine.ticks_per_second,
        cpu_wall,
        connections: after.connections - before.connections,
        failed: after.failed - before.failed,
        last_error: after.last_error.filter(|_| after.failed > before.failed),
    })
}

/// Each sim's timing of its last reconnect.
async fn reconnect_timings(
    client: &reqwest::Client,
    controls: &[String],
) -> Result<Vec<ChangeTiming>> {
    let mut timings = Vec::with_capacity(controls.len());
    for control in controls {
        let stats = sim_stats(client, control).await?;
        let timing = serde_json::from_value(stats["pushes"]["lastReconnect"].clone())
            .with_context(|| {
                format!("GET {control}/stats: pushes.lastReconnect is not a timing")
            })?;
        timings.push(timing);
    }
    Ok(timings)
}

/// The storms of each size as a table.
pub(super) fn section(tls: &str, storms: &[(usize, Storm)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "\n### reconnect storm ({tls}): every kubelet drops its connection at once and reconnects\n"
    );
    let _ = writeln!(
        out,
        "| nodes | all answered after (s) | handshakes/s | each from the request p50 / p99 / max (ms) | ctrl CPU-s | over (s) | ctrl CPU-ms /1k reconnects | connections opened | pushes failed |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for (nodes, s) in storms {
        let _ = writeln!(
            out,
            "| {nodes} | {:.3} | {:.0} | {} | {:.2} | {:.2} | {:.0} | {} | {} |",
            s.all_answered.as_secs_f64(),
            s.rate(),
            millis(&s.from_request),
            s.controller_cpu,
            s.cpu_wall.as_secs_f64(),
            s.controller_cpu * 1e6 / s.nodes.max(1) as f64,
            s.connections,
            s.failed
        );
    }
    let _ = writeln!(
        out,
        "\n- all answered after: from the bench's first `POST /reconnect` to the last node's first \
         heartbeat answered on its new connection, timed by each sim from the request reaching it; \
         handshakes/s is nodes over that time.\n\
         - each from the request: per node, in the sim with the slowest answer.\n\
         - ctrl CPU-s: the controller's CPU from before the requests to the read (every {} ms) that \
         saw every node answered, over the wall time given; it includes the steady heartbeats of \
         the other nodes meanwhile. Per 1k reconnects it is that CPU over the nodes.",
        STORM_POLL.as_millis()
    );
    out
}
