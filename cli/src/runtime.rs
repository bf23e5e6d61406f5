//! The async runtime of the controller (`nodekeeper run`). One file for the
//! `nodekeeper` binary and for `nodekeeper-floor` (which includes it by
//! path), so the push benchmark's floor runs on the controller's runtime by
//! construction.

/// A multi-thread runtime with one worker thread, unless
/// `TOKIO_WORKER_THREADS` asks for more (tokio's default is one per core).
/// Store writes run on a thread of their own and blocking reads on the
/// blocking pool either way.
///
/// Why one: probes and pushed heartbeats come spread out (10,000 probes or
/// 2,000 heartbeats a second at 10,000 nodes), each a few tens of
/// microseconds of work. With a worker per core, nearly every one woke a
/// second worker that found nothing to do and parked again: 1.2–1.5
/// context switches per heartbeat against 0.6–0.7 with one. One worker
/// took 0.16–0.18 CPU-s per 10k probes against 0.22–0.27, and the push
/// benchmark's floor 0.44–0.49 CPU-s per 10k heartbeats against 0.54–0.58;
/// the controller's own push CPU did not move beyond the noise (README,
/// "The floor under a pushed heartbeat"). A 10,000-node site needs about a
/// fifth of one core.
pub fn controller_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(1);
    }
    builder.enable_all().build()
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_controller_runs_one_worker_unless_told_otherwise() {
        // The operator's word wins; this checks the default only.
        if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
            return;
        }
        let runtime = super::controller_runtime().expect("a runtime");
        assert_eq!(runtime.metrics().num_workers(), 1);
        // Tasks and blocking work still run.
        let answer = runtime.block_on(async {
            let spawned = tokio::spawn(async { 20 });
            let blocking = tokio::task::spawn_blocking(|| 22);
            spawned.await.unwrap() + blocking.await.unwrap()
        });
        assert_eq!(answer, 42);
    }
}
