//! `nodekeeper run`: the controller, until Ctrl-C or SIGTERM.

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Failure, Outcome};
use crate::app;
use crate::cli::RunArgs;
use crate::config::{RunConfig, RunError};
use crate::discovery::Discovery;
use crate::simulate::Simulator;
use crate::store::StoreError;

/// Runs the controller; `simulator` starts the kubelets of `--simulate`, and
/// the API is served on `api` (the runtime this runs on, without one).
pub async fn run(
    args: &RunArgs,
    db: &Path,
    simulator: Option<Arc<dyn Simulator>>,
    api: Option<tokio::runtime::Handle>,
) -> Outcome {
    let mut config = RunConfig::from_args(args, db).map_err(|e| Failure {
        message: e.to_string(),
        code: 2,
    })?;
    config.simulator = simulator;
    config.api_runtime = api;
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    match app::run(config, shutdown).await {
        Ok(()) => Ok(String::new()),
        Err(RunError::Store(StoreError::Locked { path })) => {
            let who = Discovery::read(&path)
                .map(|d| format!(" (pid {}, serving {})", d.pid, d.url))
                .unwrap_or_default();
            Err(Failure {
                message: format!(
                    "another nodekeeper controller is running on the store {}{who}; one store has one controller: stop it, or give this one another --db",
                    path.display()
                ),
                code: 1,
            })
        }
        Err(e) => Err(e.into()),
    }
}

pub async fn stop_on_signal(shutdown: CancellationToken) {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return shutdown.cancel();
                }
            };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
    tracing::info!("stopping");
    shutdown.cancel();
}
