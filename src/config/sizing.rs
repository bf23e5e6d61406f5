//! The HTTP API sized to the open files the process may hold: the
//! connection cap, then the watch, read and write budgets inside it, with
//! room kept for health checks.

use thiserror::Error;

use crate::server::ApiLimits;

/// Open files kept for everything but probes and API connections: the
/// store, the listener, logs, the mirror's client, name lookups.
pub const SPARE_FILES: u64 = 256;
/// API connections wanted beyond one per pushing node: kubectl, the CLI,
/// health checks and metrics scrapes.
pub const READER_CONNECTIONS: usize = 256;

/// The API's connection cap and request budgets, as sized by [`size_api`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiSizing {
    pub max_connections: usize,
    pub limits: ApiLimits,
    /// Connections no budget can take: health checks always find one.
    pub health_check_room: usize,
}

/// What [`size_api`] sizes from.
#[derive(Debug, Clone, Copy)]
pub struct SizingInput {
    pub open_files: u64,
    /// Nodes known at start (static, simulated).
    pub nodes: usize,
    /// Nodes that may be probed, each with a kept-alive connection.
    pub probed_nodes: usize,
    /// Nodes of a simulated fleet in this process (a listener, and both ends of a probe).
    pub simulated_nodes: usize,
    /// `--max-connections`, 0 for automatic.
    pub max_connections: usize,
    /// The budgets asked for; `max_mutating` 0 for automatic.
    pub limits: ApiLimits,
}

/// Why [`size_api`] cannot fit the budgets asked for in the connections
/// there are; each names the flags to change.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SizingError {
    /// More connections than the open-file limit leaves room for.
    #[error(
        "--max-connections {asked}: this process may open {open_files} files and keeps {kept} \
         for probes, the store and the rest, so at most {fits} connections fit; lower \
         --max-connections or raise the hard limit (ulimit -Hn)"
    )]
    TooManyConnections {
        asked: usize,
        open_files: u64,
        kept: u64,
        fits: usize,
    },
    /// The open-file limit leaves too few connections for the budgets once
    /// the probed (and simulated) nodes have their files: with
    /// `--max-connections` left automatic, the nodes are what do not fit.
    #[error("{}", open_file_limit(*nodes, *probed_nodes, *simulated_nodes, *open_files, *kept, *needed))]
    OpenFileLimit {
        nodes: usize,
        probed_nodes: usize,
        simulated_nodes: usize,
        open_files: u64,
        kept: u64,
        /// The open files that would fit everything.
        needed: u64,
    },
    /// A budget of zero, which would refuse every request of its kind.
    #[error("{flag} must be at least 1")]
    ZeroBudget { flag: &'static str },
    /// Watches, reads and health checks take every connection.
    #[error(
        "--max-connections {max_connections} leaves no room for writes once --max-watches \
         {max_watches} and --max-requests-inflight {max_reads} (and {health_check_room} \
         connections for health checks) are set aside; raise --max-connections or lower the others"
    )]
    NoRoomForWrites {
        max_connections: usize,
        max_watches: usize,
        max_reads: usize,
        health_check_room: usize,
    },
    /// The writes asked for do not fit beside watches, reads and health checks.
    #[error(
        "--max-mutating-requests-inflight {asked} with --max-watches {max_watches} and \
         --max-requests-inflight {max_reads} needs more than the {max_connections} connections \
         (--max-connections), {health_check_room} of which are kept for health checks; lower \
         one of them or raise --max-connections"
    )]
    WritesDoNotFit {
        asked: usize,
        max_watches: usize,
        max_reads: usize,
        max_connections: usize,
        health_check_room: usize,
    },
}

/// Sizes the API: the connection cap from the open-file limit (less the
/// files kept for probes, a simulated fleet and the store), then the
/// budgets inside it, so that watches, reads and writes together always
/// leave connections for health checks. Writes get what is left unless
/// `--max-mutating-requests-inflight` says otherwise.
///
/// A watch budget that grows with the site (`watches_per_node`, without
/// `--max-watches`) is sized here at its base; it may grow to every
/// connection reads and health checks do not keep, which it shares with
/// writes: a kubelet holds its watches and its writes on connections of
/// its own, so the connection cap bounds them together.
pub fn size_api(input: SizingInput) -> Result<ApiSizing, SizingError> {
    let kept = SPARE_FILES + input.probed_nodes as u64 + 3 * input.simulated_nodes as u64;
    let fits = input.open_files.saturating_sub(kept) as usize;
    let max_connections = match input.max_connections {
        0 => fits,
        asked if asked > fits => {
            return Err(SizingError::TooManyConnections {
                asked,
                open_files: input.open_files,
                kept,
                fits,
            })
        }
        asked => asked,
    };
    let limits = input.limits;
    for (flag, value) in [
        ("--max-watches", limits.max_watches),
        ("--max-requests-inflight", limits.max_reads),
    ] {
        if value == 0 {
            return Err(SizingError::ZeroBudget { flag });
        }
    }
    // Sized from the open-file limit: if the budgets do not fit, the nodes
    // took the files, whatever the budgets' flags say.
    let fewest = fewest_connections(limits);
    if input.max_connections == 0 && max_connections < fewest {
        return Err(SizingError::OpenFileLimit {
            nodes: input.nodes,
            probed_nodes: input.probed_nodes,
            simulated_nodes: input.simulated_nodes,
            open_files: input.open_files,
            kept,
            needed: kept + fewest as u64,
        });
    }
    let health_check_room = health_check_room(max_connections);
    let taken = limits.max_watches + limits.max_reads + health_check_room;
    let left = max_connections.saturating_sub(taken);
    let max_mutating = match limits.max_mutating {
        0 if left == 0 => {
            return Err(SizingError::NoRoomForWrites {
                max_connections,
                max_watches: limits.max_watches,
                max_reads: limits.max_reads,
                health_check_room,
            })
        }
        0 => left,
        asked if asked > left => {
            return Err(SizingError::WritesDoNotFit {
                asked,
                max_watches: limits.max_watches,
                max_reads: limits.max_reads,
                max_connections,
                health_check_room,
            })
        }
        asked => asked,
    };
    let max_watches = match limits.watches_per_node {
        0 => limits.max_watches,
        _ => max_connections
            .saturating_sub(limits.max_reads + health_check_room)
            .max(limits.max_watches),
    };
    Ok(ApiSizing {
        max_connections,
        limits: ApiLimits {
            max_mutating,
            max_watches,
            ..limits
        },
        health_check_room,
    })
}

/// Connections kept for health checks out of `max_connections`.
fn health_check_room(max_connections: usize) -> usize {
    (max_connections / 64).clamp(4, 64)
}

/// The fewest connections that hold the watch and read budgets, the health
/// checks' room and the writes asked for (at least one).
fn fewest_connections(limits: ApiLimits) -> usize {
    let budgets = limits.max_watches + limits.max_reads + limits.max_mutating.max(1);
    // The health checks' room grows with the connections, by at most 64.
    (budgets + 4..=budgets + 64)
        .find(|&m| m >= budgets + health_check_room(m))
        .unwrap_or(budgets + 64)
}

/// What [`SizingError::OpenFileLimit`] says: what holds the files, and what to do.
fn open_file_limit(
    nodes: usize,
    probed_nodes: usize,
    simulated_nodes: usize,
    open_files: u64,
    kept: u64,
    needed: u64,
) -> String {
    let mut holders = Vec::new();
    if probed_nodes > 0 {
        holders.push(format!(
            "{probed_nodes} probed nodes keep a connection each"
        ));
    }
    if simulated_nodes > 0 {
        holders.push(format!(
            "{simulated_nodes} simulated kubelets in this process take 3 files each"
        ));
    }
    holders.push(format!(
        "{SPARE_FILES} files go to the store, the listener and the rest"
    ));
    let mut remedies = vec![format!(
        "raise the hard open-file limit to {needed} or more (LimitNOFILE= in the systemd unit, `ulimit -Hn`)"
    )];
    if probed_nodes > 0 {
        remedies.push(
            "let the kubelets push their status instead (--node-status-mode push keeps no probe connections)"
                .into(),
        );
    }
    if simulated_nodes > 0 {
        remedies.push("run a large simulated fleet as separate `nodekeeper sim` processes".into());
    }
    remedies.push("split the nodes between controllers".into());
    format!(
        "too many nodes for the open-file limit: this process may open {open_files} files, and \
         {nodes} nodes need about {needed}: {} ({kept} files), and the API needs its connections \
         for watches, reads, writes and health checks beside them; {}",
        holders.join(", "),
        remedies.join(", or ")
    )
}

/// Raises the open-file soft limit to the hard limit; returns the limit in force.
pub fn raise_open_file_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!("cannot raise the open-file limit: {e}");
            rlimit::getrlimit(rlimit::Resource::NOFILE)
                .map(|(soft, _)| soft)
                .unwrap_or(1024)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(open_files: u64, nodes: usize, probed_nodes: usize) -> SizingInput {
        SizingInput {
            open_files,
            nodes,
            probed_nodes,
            simulated_nodes: 0,
            max_connections: 0,
            limits: ApiLimits {
                max_mutating: 0,
                ..ApiLimits::default()
            },
        }
    }

    #[test]
    fn a_watch_budget_that_grows_may_take_what_reads_and_health_checks_leave() {
        let mut growing = input(20_000, 10_000, 0);
        growing.limits.watches_per_node = ApiLimits::WATCHES_PER_NODE;
        let sized = size_api(growing).unwrap();
        let fixed = size_api(input(20_000, 10_000, 0)).unwrap();
        // Writes are sized as beside the base budget; watches may grow to
        // every connection reads and health checks do not keep.
        assert_eq!(sized.limits.max_mutating, fixed.limits.max_mutating);
        assert_eq!(
            sized.limits.max_watches,
            sized.max_connections - sized.limits.max_reads - sized.health_check_room
        );
        assert_eq!(sized.limits.max_watches, 19_280);
        assert_eq!(sized.limits.watches_per_node, 5);
        // A cap given (--max-watches) stays the cap.
        assert_eq!(fixed.limits.max_watches, 100);
        assert_eq!(fixed.limits.watches_per_node, 0);
    }

    #[test]
    fn ten_thousand_pushing_kubelets_fit_with_room_for_readers() {
        let sized = size_api(input(20_000, 10_000, 0)).unwrap();
        assert_eq!(sized.max_connections, 19_744);
        assert!(sized.max_connections >= 10_000 + READER_CONNECTIONS);
        assert_eq!(sized.health_check_room, 64);
        assert_eq!(sized.limits.max_watches, 100);
        assert_eq!(sized.limits.max_reads, 400);
        // Every node may have its heartbeat in flight at once.
        assert_eq!(sized.limits.max_mutating, 19_180);
        assert!(sized.limits.max_mutating >= 10_000);
        // The budgets never take the last connections.
        let l = sized.limits;
        assert_eq!(
            l.max_watches + l.max_reads + l.max_mutating + sized.health_check_room,
            sized.max_connections
        );
    }

    #[test]
    fn probes_and_simulated_kubelets_keep_their_files() {
        assert_eq!(
            size_api(input(20_000, 10_000, 10_000))
                .unwrap()
                .max_connections,
            9_744
        );
        let mut simulated = input(20_000, 100, 100);
        simulated.simulated_nodes = 100;
        // 256 spare, 100 probe connections, 300 for the simulated kubelets.
        assert_eq!(size_api(simulated).unwrap().max_connections, 19_344);
    }

    #[test]
    fn nodes_that_take_the_open_files_are_named_not_a_flag_left_unset() {
        // 100,000 probed nodes against 20,000 files: nothing is left at all.
        let e = size_api(input(20_000, 100_000, 100_000)).unwrap_err();
        assert_eq!(
            e,
            SizingError::OpenFileLimit {
                nodes: 100_000,
                probed_nodes: 100_000,
                simulated_nodes: 0,
                open_files: 20_000,
                kept: 100_256,
                needed: 100_764,
            }
        );
        let text = e.to_string();
        assert!(!text.contains("--max-connections"), "{text}");
        assert!(
            text.starts_with("too many nodes for the open-file limit: this process may open 20000 files, and 100000 nodes need about 100764: 100000 probed nodes keep a connection each"),
            "{text}"
        );
        assert!(
            text.contains("LimitNOFILE=") && text.contains("--node-status-mode push"),
            "{text}"
        );
        // Some room, but less than the budgets: the same answer.
        let e = size_api(input(20_000, 19_500, 19_500)).unwrap_err();
        assert!(
            matches!(e, SizingError::OpenFileLimit { needed: 20_264, .. }),
            "{e:?}"
        );
        // The fewest connections that fit is enough.
        let sized = size_api(input(20_264, 19_500, 19_500)).unwrap();
        assert_eq!(sized.limits.max_mutating, 1);
        let mut simulated = input(4_096, 2_000, 2_000);
        simulated.simulated_nodes = 2_000;
        let text = size_api(simulated).unwrap_err().to_string();
        assert!(
            text.contains("2000 simulated kubelets") && text.contains("nodekeeper sim"),
            "{text}"
        );
    }

    #[test]
    fn explicit_caps_are_checked_against_each_other_and_the_files() {
        let mut small = input(20_000, 1, 0);
        small.max_connections = 40;
        small.limits.max_watches = 5;
        small.limits.max_reads = 10;
        let sized = size_api(small).unwrap();
        assert_eq!(sized.max_connections, 40);
        assert_eq!(sized.health_check_room, 4);
        assert_eq!(sized.limits.max_mutating, 21);

        let mut too_many = input(1_024, 0, 0);
        too_many.max_connections = 5_000;
        let e = size_api(too_many).unwrap_err();
        assert!(
            matches!(e, SizingError::TooManyConnections { fits: 768, .. }),
            "{e:?}"
        );
        let e = e.to_string();
        assert!(
            e.contains("--max-connections 5000") && e.contains("at most 768"),
            "{e}"
        );

        let mut no_room = small;
        no_room.limits.max_reads = 31;
        let e = size_api(no_room).unwrap_err();
        assert!(matches!(e, SizingError::NoRoomForWrites { .. }), "{e:?}");
        assert!(e.to_string().contains("leaves no room for writes"), "{e}");

        let mut writes = small;
        writes.limits.max_mutating = 22;
        let e = size_api(writes).unwrap_err();
        assert!(
            matches!(e, SizingError::WritesDoNotFit { asked: 22, .. }),
            "{e:?}"
        );
        assert!(
            e.to_string()
                .contains("--max-mutating-requests-inflight 22"),
            "{e}"
        );

        let mut no_watches = small;
        no_watches.limits.max_watches = 0;
        let e = size_api(no_watches).unwrap_err();
        assert_eq!(
            e,
            SizingError::ZeroBudget {
                flag: "--max-watches"
            }
        );
        assert_eq!(e.to_string(), "--max-watches must be at least 1");
    }
}
