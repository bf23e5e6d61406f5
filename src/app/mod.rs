//! `nodekeeper run`: validate everything, open the store, start the HTTP API
//! (and the simulated fleet, if asked), then hand over to the controller.
//!
//! The flags become a [`RunConfig`] in `crate::config`, completely, before anything
//! is opened; the tasks `run` starts are supervised by `supervise.rs`. `run`
//! itself stays one function: it is the start-up sequence, read top to
//! bottom, each step named by a comment, in an order that matters (limits,
//! store, listener, discovery file, tasks).

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::controller::{Controller, ControllerError, ControllerHandle};
use crate::discovery::Discovery;
use crate::metrics::Metrics;
use crate::model::{Micros, Resources};
use crate::server::{AppState, SharedState};
use crate::source::static_list;
use crate::store::Store;
use crate::view::View;

mod supervise;

use crate::config::{RunConfig, RunError, SPARE_FILES};
use supervise::{Supervised, Task, TaskResult};

/// Where a local client reaches a listener: a wildcard address becomes loopback.
fn reachable(local: std::net::SocketAddr) -> std::net::SocketAddr {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
    match local.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => (Ipv4Addr::LOCALHOST, local.port()).into(),
        IpAddr::V6(ip) if ip.is_unspecified() => (Ipv6Addr::LOCALHOST, local.port()).into(),
        _ => local,
    }
}

/// Runs the controller until `shutdown` (see the module's opening comment).
pub async fn run(mut config: RunConfig, shutdown: CancellationToken) -> Result<(), RunError> {
    let limit = config.open_files;
    let sim_nodes = config.simulate.as_ref().map_or(0, |s| s.nodes);
    // Each node costs a probe connection; a simulated one also its listener and server side.
    let needed = (config.specs.len() + sim_nodes * 3) as u64 + SPARE_FILES;
    if needed > limit {
        return Err(RunError::TooManyNodes {
            nodes: config.specs.len() + sim_nodes,
            needed,
            limit,
        });
    }
    if config.simulate.is_some() && config.simulator.is_none() {
        return Err(RunError::NoSimulator);
    }

    let client = match &config.mirror {
        None => None,
        Some(mirror) => {
            Some(
                crate::mirror::Mirror::connect(mirror)
                    .await
                    .map_err(|e| RunError::Flag {
                        flag: "--kubeconfig/--master",
                        reason: e.to_string(),
                    })?,
            )
        }
    };
    let store = Arc::new(Store::open(&config.db, &config.store)?);
    let listener = crate::server::listen(config.listen).map_err(|source| RunError::Listen {
        addr: config.listen,
        source,
    })?;
    let local = listener.local_addr().map_err(|source| RunError::Listen {
        addr: config.listen,
        source,
    })?;

    let fleet = match config.simulate.take() {
        None => None,
        Some(request) => {
            let simulator = config.simulator.take().ok_or(RunError::NoSimulator)?;
            let fleet = simulator
                .start(request, shutdown.child_token())
                .await
                .map_err(RunError::Sim)?;
            config.controller.probe.port = fleet.port();
            config.specs.extend(fleet.nodes().into_iter().map(|n| {
                static_list::static_spec(
                    n.name,
                    Some(&n.ip.to_string()),
                    Default::default(),
                    Resources::default(),
                )
            }));
            tracing::info!(
                nodes = fleet.nodes().len(),
                port = fleet.port(),
                control = %format!("http://{}", fleet.control_addr()),
                "simulated kubelets are up; break one with `nodekeeper sim set NODE down`"
            );
            Some(fleet)
        }
    };

    let view = Arc::new(View::default());
    let metrics = Arc::new(
        Metrics::for_site(config.site.as_deref())
            .with_labels_allowlist(std::mem::take(&mut config.labels_allowlist))
            .with_resources(config.resources),
    );
    let (handle, pushes) = ControllerHandle::channel();
    let mirror = match (config.mirror.take(), client) {
        (Some(mirror_config), Some(client)) => {
            // Every change from here on queues its mirror work.
            store.enable_outbox();
            metrics.mirror_configured.set(1);
            let identity = mirror_config
                .leader
                .as_ref()
                .map_or_else(|| "nodekeeper".to_string(), |l| l.identity.clone());
            let target = mirror_config.api_server.describe();
            let (mirror, state) = crate::mirror::Mirror::new(
                mirror_config,
                client,
                store.clone(),
                view.clone(),
                handle.clone(),
                metrics.clone(),
                identity,
            );
            tracing::info!(server = %state.server, via = %target, "mirroring to the API server");
            Some((mirror, state))
        }
        _ => None,
    };
    let follows_source = config.controller.cloud.is_some();
    // Before the controller writes: a first hook starts at the store's newest event.
    let transition_hook = match config.transition_hook.take() {
        None => None,
        Some(hook) => Some(
            crate::hook::transitions::TransitionHook::start(
                hook,
                store.clone(),
                view.subscribe(),
                metrics.clone(),
            )
            .await
            .map_err(ControllerError::from)?,
        ),
    };
    let mut controller = Controller::start(
        config.controller,
        store.clone(),
        view.clone(),
        metrics.clone(),
    )
    .await?;
    let health = crate::readiness::Health::new();
    controller.report_readiness(&health.ready);
    {
        let clock = controller.clock();
        health
            .ready
            .register_computed("controller-lag", move || clock.readiness());
    }
    register_checks(
        &health,
        &store,
        &view,
        follows_source,
        mirror.as_ref().map(|m| &m.1),
    );
    let discovery = Discovery {
        pid: std::process::id(),
        url: format!(
            "{}://{}",
            if config.tls.is_some() {
                "https"
            } else {
                "http"
            },
            reachable(local)
        ),
        instance: controller.instance().to_string(),
        sim_control: fleet
            .as_ref()
            .map(|f| format!("http://{}", f.control_addr())),
        ca_file: config.tls_cert_file.clone(),
    };
    discovery
        .write(&config.db)
        .await
        .map_err(|source| RunError::Discovery {
            path: Discovery::path(&config.db),
            source,
        })?;
    // systemd (Type=notify): ready once the controller has decided, the watchdog fed while it does.
    let notifier = Arc::new(crate::notify::Notifier::from_env());
    let notify_stop = CancellationToken::new();
    let notifying = notifier.is_enabled().then(|| {
        let view = view.clone();
        tokio::spawn(crate::notify::keep_informed(
            notifier.clone(),
            health.clone(),
            move || crate::notify::node_counts(&view),
            notify_stop.clone(),
        ))
    });
    tracing::info!(
        url = %discovery.url,
        db = %config.db.display(),
        max_connections = config.serve.max_connections,
        max_watches = config.limits.max_watches,
        max_requests_inflight = config.limits.max_reads,
        max_mutating_requests_inflight = config.limits.max_mutating,
        "serving the API"
    );

    let server_shutdown = CancellationToken::new();
    let state = AppState::new(SharedState {
        view,
        store: store.clone(),
        metrics: metrics.clone(),
        controller: handle,
        shutdown: server_shutdown.clone(),
        mirror: mirror.as_ref().map(|m| m.1.clone()),
        health: health.clone(),
        node_json: Arc::new(crate::server::node_json::NodeJson::with_list_rate(
            config.list_bytes_per_second,
        )),
    });
    let budgets = crate::server::Budgets::new(config.limits, Some(metrics.clone()));
    let mut authn = config.credentials.authn();
    if config.bootstrap_token_auth {
        authn.bootstrap = Some(store.clone());
    }
    let csr_state = state.clone();
    let router = crate::server::limited_router(state, authn, budgets);
    let mut serve_config = config.serve.clone().metrics(metrics.clone());
    if config.api_runtime.is_some() {
        // Readers are served on the API's runtime; kubelets on this one.
        serve_config = serve_config.kubelets(crate::server::handoff::KubeletHandoff {
            runtime: tokio::runtime::Handle::current(),
            is_kubelet: kubelet_rule(&config.credentials),
        });
    }

    // Every long-lived task is supervised: one that ends before shutdown
    // (an error, a panic) stops the controller, and the process exits
    // non-zero for its supervisor to restart it.
    let controller_stop = CancellationToken::new();
    let mirror_stop = CancellationToken::new();
    let stamp_stop = CancellationToken::new();
    let hook_stop = CancellationToken::new();
    let instance = controller.instance().to_string();
    let mut supervised = Supervised::default();
    supervised.spawn(
        Task::Controller,
        &health,
        controller.run(config.specs, pushes, controller_stop.clone()),
    );
    // Approving, signing and cleaning up CSRs, and removing expired
    // bootstrap tokens: supervised as the others, a panic ends the run.
    let csr_stop = CancellationToken::new();
    supervised.spawn(Task::CsrSigning, &health, {
        let run =
            crate::server::csr_signing::run(csr_state, config.signer.clone(), csr_stop.clone());
        async move {
            run.await;
            Ok::<(), String>(())
        }
    });
    if let Some((_, ca)) = &config.credentials.client_ca {
        serve_config = serve_config.client_ca(ca.clone());
    }
    // Changed credential files are read in while the server runs.
    let credential_files = config.credentials.follow(Some(metrics.clone()));
    let api_runtime = config.api_runtime.take();
    supervised.spawn_on(api_runtime.as_ref(), Task::Server, &health, {
        let stop = server_shutdown.clone();
        let tls = config.tls.clone();
        async move {
            let reload = async {
                if !credential_files.is_empty() {
                    let every = crate::server::reload::RELOAD_INTERVAL;
                    credential_files.run(every, stop.clone()).await;
                }
            };
            let served =
                crate::server::serve_with(listener, router, tls, serve_config, stop.clone());
            let (served, ()) = tokio::join!(served, reload);
            served.map_err(|e| e.to_string())
        }
    });
    // Retention prunes in the background, in small batches, until the controller stops.
    let retention_stop = CancellationToken::new();
    supervised.spawn(Task::Retention, &health, {
        let store = store.clone();
        let retention = config.retention.clone();
        let stop = retention_stop.clone();
        async move {
            crate::store::retention::run(store, retention, stop).await;
            Ok::<(), String>(())
        }
    });
    if let Some((mirror, _)) = mirror {
        let stop = mirror_stop.clone();
        supervised.spawn(Task::Mirror, &health, async move {
            mirror.run(stop).await;
            Ok::<(), String>(())
        });
    }
    if let Some(hook) = transition_hook {
        supervised.spawn(Task::TransitionHook, &health, hook.run(hook_stop.clone()));
    }
    let backups_stop = CancellationToken::new();
    if let Some(backups) = config.backups.take() {
        let state = crate::backups::BackupState::new(backups.interval);
        {
            let state = state.clone();
            health
                .ready
                .register_computed("backup", move || state.readiness());
        }
        let store = store.clone();
        let metrics = metrics.clone();
        let stop = backups_stop.clone();
        supervised.spawn(Task::Backups, &health, async move {
            crate::backups::run(store, backups, metrics, state, stop).await;
            Ok::<(), String>(())
        });
    }
    supervised.spawn(Task::LivenessStamp, &health, {
        let stop = stamp_stop.clone();
        let db = config.db.clone();
        async move {
            crate::liveness::keep_stamping(db, instance, stop).await;
            Ok::<(), String>(())
        }
    });

    let failed = tokio::select! {
        _ = shutdown.cancelled() => None,
        ended = supervised.next_end() => Some(ended),
    };
    health
        .ready
        .register("shutdown")
        .fail("the controller is shutting down");
    notify_stop.cancel();
    if let Some(notifying) = notifying {
        let _ = notifying.await;
    }
    notifier.stopping();
    // The controller stops first (it records the stop), then the mirror
    // (it gives up a leader Lease it holds), the API last so the final state
    // stays readable until the store is closed.
    let mut outcome: Result<(), RunError> = Ok(());
    let mut note = |task: Task, result: TaskResult, expected: bool| {
        let error = match (task, result) {
            (Task::Controller, TaskResult::Controller(Err(e))) => Some(RunError::Controller(e)),
            (_, TaskResult::Panicked(reason)) => Some(RunError::TaskFailed {
                task: task.name(),
                reason,
            }),
            (_, TaskResult::Failed(reason)) => Some(RunError::TaskFailed {
                task: task.name(),
                reason,
            }),
            (_, _) if !expected => Some(RunError::TaskFailed {
                task: task.name(),
                reason: "it stopped by itself".into(),
            }),
            _ => None,
        };
        if let Some(error) = error {
            if !expected {
                tracing::error!("{error}; stopping");
            }
            if outcome.is_ok() {
                outcome = Err(error);
            }
        }
    };
    if let Some((task, result)) = failed {
        note(task, result, false);
    }
    for (task, stop) in [
        (Task::Controller, &controller_stop),
        (Task::Retention, &retention_stop),
        (Task::Mirror, &mirror_stop),
        (Task::TransitionHook, &hook_stop),
        (Task::Backups, &backups_stop),
        (Task::CsrSigning, &csr_stop),
        (Task::Server, &server_shutdown),
        (Task::LivenessStamp, &stamp_stop),
    ] {
        stop.cancel();
        if let Some(result) = supervised.wait(task).await {
            note(task, result, true);
        }
    }
    if let Some(fleet) = fleet {
        shutdown.cancel();
        fleet.closed().await;
    }
    let _ = tokio::fs::remove_file(Discovery::path(&config.db)).await;
    outcome
}

/// The checks `/readyz` makes besides the controller's passes: the store
/// (as its writer last found it), the cloud source when one is followed,
/// and the mirror.
fn register_checks(
    health: &crate::readiness::Health,
    store: &Arc<Store>,
    view: &Arc<View>,
    follows_source: bool,
    mirror: Option<&Arc<crate::mirror::MirrorState>>,
) {
    {
        let view = view.clone();
        health
            .ready
            .register_computed("store", move || view.store_writable());
    }
    if follows_source {
        let view = view.clone();
        health.ready.register_computed("source", move || {
            let Some(status) = view.source_status() else {
                return Err("the source has not been listed yet".into());
            };
            if status.consecutive_failures > 0 {
                return Err(format!(
                    "{} listing(s) of {} failed in a row; the last: {}",
                    status.consecutive_failures,
                    if status.source.is_empty() {
                        "the source"
                    } else {
                        &status.source
                    },
                    status.last_error.as_deref().unwrap_or("unknown error")
                ));
            }
            if status.last_success.is_none() {
                return Err("the source has not been listed yet".into());
            }
            Ok(())
        });
    }
    if let Some(mirror) = mirror {
        let mirror = mirror.clone();
        let store = store.clone();
        let started = Micros::now();
        health.ready.register_computed("mirror", move || {
            // A budget too small to keep the Ready nodes' Leases renewed.
            mirror.readiness()?;
            let status = mirror.status(&store).map_err(|e| e.to_string())?;
            let since = status.last_success.unwrap_or(started);
            match status.last_error {
                Some(error) if error.time > since => Err(format!(
                    "the API server {} has not answered since {}: {}",
                    mirror.server,
                    error.time.rfc3339_seconds(),
                    error.message
                )),
                _ => Ok(()),
            }
        });
    }
}

/// How a connection is known to be a kubelet's: by a client certificate or
/// a token naming a node, or, when the API takes no credentials, by a
/// heartbeat as its first request.
fn kubelet_rule(
    credentials: &crate::server::reload::Credentials,
) -> Arc<dyn Fn(&crate::server::handoff::FirstRequest<'_>) -> bool + Send + Sync> {
    use crate::server::Caller;
    let authn = credentials.authn();
    if !authn.required() {
        return Arc::new(crate::server::handoff::is_heartbeat);
    }
    let tokens = authn.tokens;
    Arc::new(move |request| {
        let node = |p: &crate::server::Principal| matches!(p.caller(), Caller::Node(_));
        if let Some(client) = request.client {
            return node(client);
        }
        match (&tokens, request.bearer) {
            (Some(tokens), Some(token)) => tokens.current().principal(token).is_some_and(node),
            _ => false,
        }
    })
}
