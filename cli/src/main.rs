//! The nodekeeper binary: parse the command line, set up logging, dispatch.

use std::io::Write;

use nodekeeper::cli::Command;
use nodekeeper::commands::{self, Failure};

mod allocator;
mod runtime;

fn main() {
    // cli/build.rs stamps this crate only: the library is not rebuilt per commit.
    nodekeeper::version::stamp(nodekeeper::version::Stamp {
        git_commit: env!("NODEKEEPER_GIT_COMMIT"),
        build_date: env!("NODEKEEPER_BUILD_DATE"),
        rustc_version: env!("NODEKEEPER_RUSTC_VERSION"),
        target: env!("NODEKEEPER_TARGET"),
    });
    nodekeeper::process::mark_started();
    nodekeeper::install_crypto_provider();
    let (cli, settings) = match nodekeeper::config::parse_args(std::env::args_os().collect()) {
        Ok(parsed) => parsed,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    // kube's client logs every failed request at error level; the mirror
    // reports failures itself, summed up. `--log kube_client=debug` shows them.
    let log = if cli.log.contains("kube_client") {
        cli.log.clone()
    } else {
        format!("{},kube_client=off", cli.log)
    };
    let filter = tracing_subscriber::EnvFilter::try_new(&log).unwrap_or_else(|e| {
        eprintln!("error: --log {:?}: {e}", cli.log);
        std::process::exit(2);
    });
    let site = match &cli.command {
        Command::Run(args) => args.site.as_deref(),
        _ => None,
    };
    nodekeeper::logging::init(filter, cli.log_format, site);
    let runtimes = match &cli.command {
        Command::Run(_) => runtime::controller_runtime()
            .and_then(|controller| Ok((controller, Some(runtime::api_runtime()?)))),
        _ => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map(|rt| (rt, None)),
    };
    let (runtime, api) = match runtimes {
        Ok(runtimes) => runtimes,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    let simulator = commands::Simulator {
        in_process: std::sync::Arc::new(nodekeeper_sim::simulator::InProcess),
        command: |args, db| Box::pin(nodekeeper_sim::command::sim(args, db)),
    };
    let outcome = commands::execute(
        &runtime,
        &cli,
        &settings,
        api.as_ref().map(|rt| rt.handle().clone()),
        simulator,
    );
    let printed = match &outcome {
        Ok(text) => {
            let mut out = commands::stdout();
            out.write_all(text.as_bytes()).and_then(|()| out.flush())
        }
        Err(_) => Ok(()),
    };
    // The reader went away (`| head`): what it wanted, it has. Exit quietly.
    if commands::stdout_closed() {
        std::process::exit(0);
    }
    if let Err(e) = printed {
        eprintln!("error: cannot write the output: {e}");
        std::process::exit(1);
    }
    if let Err(Failure { message, code }) = outcome {
        // It may quote a controller's or an API server's answer.
        eprintln!(
            "error: {}",
            nodekeeper::logging::terminal::escape_lines(&message)
        );
        std::process::exit(code);
    }
}
