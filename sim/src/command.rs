//! `nodekeeper sim`: a fleet of simulated kubelets (probed, and pushing with `--push`), or `sim set` to change one.

use std::path::Path;

use tokio_util::sync::CancellationToken;

use crate::push::{ClientCerts, KubeletCalls};
use crate::{BearerToken, Fleet, FleetConfig, KubeletState, PushConfig, PushSetupError};
use nodekeeper::cli::{SimArgs, SimCommand};
use nodekeeper::commands::{Failure, Outcome};
use nodekeeper::discovery::Discovery;

const DEFAULT_CONTROL: &str = "http://127.0.0.1:10251";

pub async fn sim(args: &SimArgs, db: &Path) -> Outcome {
    match &args.command {
        Some(SimCommand::Set {
            node,
            state,
            control,
        }) => set(db, node, state, control.as_deref()).await,
        Some(SimCommand::Apiserver { listen }) => apiserver(*listen).await,
        None => run_fleet(args).await,
    }
}

/// Serves the in-memory API server until Ctrl-C or SIGTERM.
async fn apiserver(listen: std::net::SocketAddr) -> Outcome {
    let api = crate::apiserver::FakeApiServer::start_on(listen)
        .await
        .map_err(|e| Failure {
            message: format!("cannot listen on {listen} (--listen): {e}"),
            code: 1,
        })?;
    let url = api.url();
    // The banner is the interface scripts wait for.
    println!("in-memory API server at {url}; mirror to it with `nodekeeper run --master {url}`");
    let stop = CancellationToken::new();
    nodekeeper::commands::run::stop_on_signal(stop.clone()).await;
    let nodes = api.nodes().len();
    Ok(format!("stopped; it held {nodes} nodes\n"))
}

/// The push settings from the flags, checked; `None` without `--push`.
fn push_config(args: &SimArgs) -> Result<Option<PushConfig>, Failure> {
    let Some(url) = &args.push else {
        return Ok(None);
    };
    let usage = |e: PushSetupError| Failure {
        message: e.to_string(),
        code: 2,
    };
    let token = match &args.push_token_file {
        Some(path) => Some(BearerToken::from_file(path).map_err(usage)?),
        None => None,
    };
    let https = url.starts_with("https://");
    let server_ca = match &args.push_ca_file {
        Some(_) if !https => Err(PushSetupError::NeedsHttps {
            flag: "--push-ca-file",
        }),
        Some(path) => {
            // Read once while `sim` checks its flags, before the fleet starts.
            #[allow(clippy::disallowed_methods)]
            std::fs::read_to_string(path)
                .map(Some)
                .map_err(|source| PushSetupError::CaFile {
                    path: path.clone(),
                    source,
                })
        }
        None => Ok(None),
    }
    .map_err(usage)?;
    let client_certs = match &args.push_cert_dir {
        Some(_) if !https => Err(PushSetupError::NeedsHttps {
            flag: "--push-cert-dir",
        }),
        Some(dir) => ClientCerts::from_dir(dir).map(Some),
        None => Ok(None),
    }
    .map_err(usage)?;
    let config = PushConfig {
        lease_renew_interval: args.lease_renew_interval,
        status_update_interval: args.status_update_interval,
        clock_skew: args.clock_skew,
        register: args.register,
        token,
        server_ca,
        client_certs,
        kubelet_calls: args.kubelet_calls,
        bootstrap_token: match &args.bootstrap_token {
            Some(token) => Some(BearerToken::new(token.as_str()).ok_or(Failure {
                message: "--bootstrap-token is empty; give the token ID.SECRET".into(),
                code: 2,
            })?),
            None => None,
        },
        ..PushConfig::new(url.clone())
    };
    config.validate().map_err(usage)?;
    Ok(Some(config))
}

async fn run_fleet(args: &SimArgs) -> Outcome {
    let push = push_config(args)?;
    let limit = nodekeeper::config::raise_open_file_limit();
    // A listener and a served connection per kubelet, its own connection to
    // the controller when pushing (and one per watch with
    // `--kubelet-calls all`), plus spare.
    let per_node = match &push {
        None => 2,
        Some(p) if p.kubelet_calls == KubeletCalls::All => 3 + crate::push::REFLECTOR_CONNECTIONS,
        Some(_) => 3,
    };
    let needed = args.nodes as u64 * per_node + 64;
    if needed > limit {
        return Err(Failure {
            message: format!(
                "{} simulated kubelets need about {needed} open files but this process may open only {limit}; \
                 split the fleet over several `nodekeeper sim` processes with different --base-ip",
                args.nodes
            ),
            code: 1,
        });
    }
    let shutdown = CancellationToken::new();
    let config = FleetConfig {
        nodes: args.nodes,
        base_ip: args.base_ip,
        port: args.port,
        name_prefix: args.prefix.clone(),
        control: args.control,
        ..FleetConfig::default()
    };
    let fleet = Fleet::start(config, shutdown.clone()).await?;
    if let Some(path) = &args.write_nodes_file {
        let entries: Vec<serde_json::Value> = fleet
            .nodes()
            .iter()
            .map(|n| serde_json::json!({"name": n.name, "address": n.address.ip().to_string()}))
            .collect();
        tokio::fs::write(path, serde_json::to_vec_pretty(&entries)?)
            .await
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let first = fleet
        .nodes()
        .first()
        .map(|n| n.address.to_string())
        .unwrap_or_default();
    let last = fleet
        .nodes()
        .last()
        .map(|n| n.address.to_string())
        .unwrap_or_default();
    let pushing = match push {
        Some(config) => {
            let note = format!("; pushing to {}", config.url);
            if let Err(e) = fleet.start_pushing(config) {
                shutdown.cancel();
                fleet.closed().await;
                return Err(e.into());
            }
            note
        }
        None => String::new(),
    };
    println!(
        "{} simulated kubelets on {first} .. {last} (port {}); control http://{}{pushing}; Ctrl-C stops",
        fleet.nodes().len(),
        fleet.port(),
        fleet.control_addr()
    );
    let _ = tokio::signal::ctrl_c().await;
    shutdown.cancel();
    fleet.closed().await;
    Ok(String::new())
}

async fn set(db: &Path, node: &str, state: &str, control: Option<&str>) -> Outcome {
    let parsed: KubeletState = state.parse().map_err(|e: crate::ParseStateError| Failure {
        message: e.to_string(),
        code: 2,
    })?;
    let control = match control {
        Some(c) => c.to_string(),
        None => Discovery::read(db)
            .and_then(|d| d.sim_control)
            .unwrap_or_else(|| DEFAULT_CONTROL.to_string()),
    };
    let base = if control.starts_with("http") {
        control
    } else {
        format!("http://{control}")
    };
    let url = if node == "all" {
        format!("{base}/nodes")
    } else {
        format!("{base}/nodes/{node}")
    };
    let client = reqwest::Client::builder()
        .no_proxy()
        .timeout(std::time::Duration::from_secs(10))
        .build()?;
    let response = client
        .put(&url)
        .json(&serde_json::json!({ "state": parsed }))
        .send()
        .await
        .map_err(|e| format!("cannot reach the simulated fleet at {base}: {e}"))?;
    let status = response.status();
    let body = response.text().await.unwrap_or_default();
    if !status.is_success() {
        return Err(format!("{status}: {}", body.trim()).into());
    }
    Ok(format!("{node}: {parsed}\n"))
}
