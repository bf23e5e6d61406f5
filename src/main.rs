//! The nodekeeper binary: parse the command line, set up logging, dispatch.

use clap::Parser;
use nodekeeper::cli::{Cli, Command};
use nodekeeper::commands::{self, Failure};
use nodekeeper::inspect::Source;

fn main() {
    nodekeeper::install_crypto_provider();
    let cli = Cli::parse();
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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            std::process::exit(1);
        }
    };
    match runtime.block_on(dispatch(&cli)) {
        Ok(text) => print!("{text}"),
        Err(Failure { message, code }) => {
            eprintln!("error: {message}");
            std::process::exit(code);
        }
    }
}

async fn dispatch(cli: &Cli) -> commands::Outcome {
    let source = || Source::open(&cli.db, cli.server.as_deref());
    match &cli.command {
        Command::Run(args) => commands::run::run(args, &cli.db).await,
        Command::Nodes { output } => commands::nodes::nodes(&source()?, *output).await,
        Command::Describe { node } => commands::describe::describe(&source()?, node).await,
        Command::History(args) => commands::history::history(&source()?, args).await,
        Command::At { time, output } => commands::at::at(&source()?, time, *output).await,
        Command::Mirror { command } => commands::mirror::mirror(&source()?, command).await,
        Command::Db { command } => commands::db::db(&cli.db, cli.server.as_deref(), command).await,
        Command::Sim(args) => commands::sim::sim(args, &cli.db).await,
    }
}
