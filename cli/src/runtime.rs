//! The async runtimes of the controller (`nodekeeper run`): one for the
//! controller's own work and one for the API. One file for the `nodekeeper`
//! binary and for `nodekeeper-floor` (which includes it by path), so the
//! push benchmark's floor serves on the API's runtime by construction.
//!
//! The controller's work (probe sweeps, heartbeat folding, the monitor
//! pass, the mirror) never queues behind a reader: readers are served on
//! threads of their own, which also run at a lower priority, so that a
//! machine busy with readers still gives the controller's thread the CPU
//! it needs first (docs/decisions/runtimes.md).

/// How much lower the API's threads run than the controller's (nice steps).
pub const API_NICENESS: i32 = 5;

/// The controller's runtime: a multi-thread runtime with one worker, unless
/// `TOKIO_WORKER_THREADS` asks for more (tokio's default is one per core).
/// Store writes run on a thread of their own and blocking reads on the
/// blocking pool either way. Probes and heartbeats come spread out, each a
/// few tens of microseconds of work: with a worker per core, nearly every
/// one woke a second worker that found nothing to do and parked again
/// (docs/decisions/runtimes.md).
pub fn controller_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if std::env::var_os("TOKIO_WORKER_THREADS").is_none() {
        builder.worker_threads(1);
    }
    builder.thread_name("nodekeeper").enable_all().build()
}

/// The API's runtime: a worker for each core but the controller's (one at
/// least), at [`API_NICENESS`] below the controller's priority, blocking
/// reads included. A worker more than the cores left would wake for work
/// another worker already took (docs/decisions/runtimes.md).
pub fn api_runtime() -> std::io::Result<tokio::runtime::Runtime> {
    let cores = std::thread::available_parallelism().map_or(1, usize::from);
    let workers = cores.saturating_sub(1).max(1);
    let niceness = std::env::var("NODEKEEPER_API_NICENESS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(API_NICENESS);
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("nodekeeper-api")
        .on_thread_start(move || {
            if niceness > 0 {
                // Without it the API competes on equal terms, as before; say so once.
                if let Err(e) = nodekeeper::process::lower_thread_priority(niceness) {
                    static WARNED: std::sync::Once = std::sync::Once::new();
                    WARNED.call_once(|| {
                        tracing::warn!("cannot lower the API threads' priority: {e}")
                    });
                }
            }
        })
        .enable_all()
        .build()
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

    #[test]
    fn the_api_runs_below_the_controllers_priority() {
        let own = rustix::process::getpriority_process(None).expect("a priority");
        let runtime = super::api_runtime().expect("a runtime");
        let (worker, blocking) = runtime.block_on(async {
            let worker = tokio::spawn(async {
                rustix::process::getpriority_process(Some(rustix::thread::gettid()))
            });
            let blocking = tokio::task::spawn_blocking(|| {
                rustix::process::getpriority_process(Some(rustix::thread::gettid()))
            });
            (worker.await.unwrap(), blocking.await.unwrap())
        });
        let expected = (own + super::API_NICENESS).min(19);
        assert_eq!(worker.unwrap(), expected);
        assert_eq!(blocking.unwrap(), expected);
        // The thread that built it keeps its own.
        assert_eq!(rustix::process::getpriority_process(None).unwrap(), own);
    }
}
