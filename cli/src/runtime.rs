//! The async runtime of the controller (`nodekeeper run`). One file for the
//! `nodekeeper` binary and for `nodekeeper-floor` (which includes it by
//! path), so the push benchmark's floor runs on the controller's runtime by
//! construction.

/// A multi-thread runtime with one worker thread, unless
/// `TOKIO_WORKER_THREADS` asks for more (`0` is not allowed; tokio's
/// default is one per core). Store work runs on threads of its own and
/// blocking reads on the blocking pool either way.
///
/// Why one: pushed heartbeats arrive spread out (2,000 a second at 10,000
/// kubelets), each a few tens of microseconds of work. With a worker per
/// core, each request woke a second worker that found nothing to do and
/// parked again: 1.2–1.5 context switches and 0.6 futex calls per
/// heartbeat. With one, 0.6–0.7, and the push benchmark's floor took
/// 0.44–0.49 CPU-s per 10k heartbeats against 0.54–0.58 (README, "The
/// floor under a pushed heartbeat"). A 10,000-node site needs a fifth of
/// one core for it, and one worker keeps up with 10,000 probes a second.
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
