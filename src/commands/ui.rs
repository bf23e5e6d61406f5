//! `nodekeeper ui`: the web console and the read-only API over a stopped
//! store, for looking at a site's registry and history after the fact (or
//! on a copy of its store) without running a controller.

use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::{Failure, Outcome};
use crate::cli::UiArgs;
use crate::controller::ControllerHandle;
use crate::discovery::Discovery;
use crate::metrics::Metrics;
use crate::server::{AppState, SharedState, Tokens};
use crate::store::{Store, StoreError, StoreOptions};
use crate::view::View;

fn usage(message: String) -> Failure {
    Failure { message, code: 2 }
}

/// `nodekeeper ui`: the console over a store, read-only unless asked.
/// Over 80 lines: every flag is checked before the store is opened or a
/// port bound, then the server is started, in that order.
pub async fn ui(args: &UiArgs, db: &Path) -> Outcome {
    // Everything is checked before the store is opened or a port bound.
    let tls = match (&args.tls_cert_file, &args.tls_private_key_file) {
        (None, None) => None,
        (Some(cert), Some(key)) => Some(crate::server::tls_config(cert, key).map_err(usage)?),
        (Some(_), None) => {
            return Err(usage(
                "--tls-cert-file needs --tls-private-key-file, the certificate's private key"
                    .into(),
            ))
        }
        (None, Some(_)) => {
            return Err(usage(
                "--tls-private-key-file needs --tls-cert-file, the certificate it belongs to"
                    .into(),
            ))
        }
    };
    let tokens = match &args.token_file {
        None => None,
        Some(path) => Some(Arc::new(Tokens::load(path).map_err(usage)?)),
    };
    crate::server::check_listen(
        args.listen,
        tls.is_some(),
        tokens.is_some(),
        args.insecure_listen,
    )
    .map_err(|e| usage(e.to_string()))?;
    if !crate::store::is_there(db)? {
        return Err(format!(
            "no store at {}: give the store of a site with --db PATH",
            db.display()
        )
        .into());
    }
    let options = StoreOptions {
        cache_capacity: args.cache_capacity,
        ..StoreOptions::default()
    };
    let store = match Store::open_for_reading(db, &options) {
        Ok(store) => Arc::new(store),
        Err(StoreError::Locked { path }) => {
            let running = Discovery::read(&path)
                .map(|d| {
                    format!(
                        ": its controller (pid {}) serves the console at {}/ui/",
                        d.pid, d.url
                    )
                })
                .unwrap_or_default();
            return Err(format!(
                "the store {} is in use by a running controller{running}; `nodekeeper ui` is for stopped stores",
                path.display()
            )
            .into());
        }
        Err(e) => return Err(e.into()),
    };

    let view = Arc::new(View::default());
    view.publish(store.nodes()?, &[]);
    view.advance(store.durable_seq());
    // No controller reads this channel: the router refuses writes before any reaches it.
    let (controller, _) = ControllerHandle::channel();
    let shutdown = CancellationToken::new();
    let state = AppState::new(SharedState {
        view,
        store: store.clone(),
        metrics: Arc::new(Metrics::new()),
        controller,
        shutdown: shutdown.clone(),
        mirror: None,
        health: crate::readiness::Health::new(),
        node_json: Default::default(),
    });
    let router = crate::server::console::read_only_router(state, tokens);
    let listener = crate::server::listen(args.listen)
        .map_err(|e| format!("cannot listen on {} (--listen): {e}", args.listen))?;
    let local = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {} (--listen): {e}", args.listen))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    // The banner is the interface scripts wait for.
    println!(
        "console of the stopped store {} at {scheme}://{local}/ui/ (read-only); Ctrl-C stops",
        db.display()
    );
    tokio::spawn(super::run::stop_on_signal(shutdown.clone()));
    crate::server::serve(listener, router, tls, shutdown)
        .await
        .map_err(|e| format!("serving the console failed: {e}"))?;
    Ok(String::new())
}
