//! `nodekeeper-floor`: the least server of pushed heartbeats on the
//! controller's stack (`nodekeeper_sim::floor`), which `nodekeeper-bench
//! --push --floor` runs in place of the controller. Like the controller's
//! binary it allocates with jemalloc under the same options and serves on
//! the runtime the controller serves its API on (`cli/src/runtime.rs`).
//!
//! `nodekeeper-floor --listen 127.0.0.1:PORT --nodes-file FILE` prints
//! `nodekeeper-floor serving http://ADDR for N nodes` once it listens, and
//! stops on SIGTERM or Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use tokio_util::sync::CancellationToken;

use nodekeeper_sim::floor;

// The controller's allocator and its options, from the same file.
#[path = "../../../cli/src/allocator.rs"]
mod allocator;
// The controller's runtimes, from the same file (the floor has no
// controller: it serves on the API's runtime alone).
#[allow(dead_code)]
#[path = "../../../cli/src/runtime.rs"]
mod runtime;

#[derive(Debug, Parser)]
#[command(
    name = "nodekeeper-floor",
    about = "The least server of what pushing simulated kubelets send, for the push benchmark's floor"
)]
struct Args {
    /// Where to listen (loopback only).
    #[arg(long)]
    listen: SocketAddr,
    /// The nodes, as a sim's --write-nodes-file writes them (several merged).
    #[arg(long)]
    nodes_file: PathBuf,
}

fn main() {
    let args = Args::parse();
    if !args.listen.ip().is_loopback() {
        eprintln!(
            "nodekeeper-floor: --listen {}: the floor serves on loopback only (127.0.0.0/8 or ::1)",
            args.listen
        );
        std::process::exit(2);
    }
    let nodes = match floor::read_nodes(&args.nodes_file) {
        Ok(nodes) => nodes,
        Err(e) => {
            eprintln!("nodekeeper-floor: {e}");
            std::process::exit(2);
        }
    };
    let runtime = match runtime::api_runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("nodekeeper-floor: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    if let Err(e) = runtime.block_on(run(args.listen, &nodes)) {
        eprintln!("nodekeeper-floor: {e}");
        std::process::exit(1);
    }
}

async fn run(listen: SocketAddr, nodes: &[floor::FloorNode]) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot listen on {listen}: {e}")))?;
    let local = listener.local_addr()?;
    let router = floor::router(nodes);
    let shutdown = CancellationToken::new();
    let stop = shutdown.clone();
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = terminate.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        stop.cancel();
    });
    println!(
        "nodekeeper-floor serving http://{local} for {} nodes",
        nodes.len()
    );
    floor::serve(listener, router, shutdown).await;
    Ok(())
}
