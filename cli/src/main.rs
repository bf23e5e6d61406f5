//! The nodekeeper binary: parse the command line, set up logging, dispatch.

use std::io::Write;

use nodekeeper::cli::{Cli, Command, ConfigCommand};
use nodekeeper::commands::{self, Failure};
use nodekeeper::inspect::Source;

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
    let outcome = runtime.block_on(dispatch(
        &cli,
        &settings,
        api.as_ref().map(|rt| rt.handle().clone()),
    ));
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

async fn dispatch(
    cli: &Cli,
    settings: &[nodekeeper::config::Setting],
    api: Option<tokio::runtime::Handle>,
) -> commands::Outcome {
    let source = || Source::open_with_token(&cli.db, cli.server.as_deref(), cli.token.as_deref());
    match &cli.command {
        Command::Run(args) => {
            let simulator = std::sync::Arc::new(nodekeeper_sim::simulator::InProcess);
            commands::run::run(args, &cli.db, Some(simulator), api).await
        }
        Command::Nodes { output } => commands::nodes::nodes(&source()?, *output).await,
        Command::Describe { node } => commands::describe::describe(&source()?, node).await,
        Command::History(args) => commands::history::history(&source()?, args).await,
        Command::At { time, output } => commands::at::at(&source()?, time, *output).await,
        Command::Mirror { command } => commands::mirror::mirror(&source()?, command).await,
        Command::Db { command } => {
            commands::db::db(
                &cli.db,
                cli.server.as_deref(),
                cli.token.as_deref(),
                command,
            )
            .await
        }
        Command::Sim(args) => nodekeeper_sim::command::sim(args, &cli.db).await,
        Command::Ui(args) => commands::ui::ui(args, &cli.db).await,
        Command::Version { output } => {
            commands::version::version(
                *output,
                &cli.db,
                cli.server.as_deref(),
                cli.token.as_deref(),
            )
            .await
        }
        Command::Config {
            command: ConfigCommand::Print(_),
        } => match nodekeeper::config::check_files(settings) {
            Ok(()) => Ok(nodekeeper::config::print(settings)),
            // A config naming files that are not there is a mistake to fix before `run`.
            Err(e) => Err(commands::Failure {
                message: e.to_string(),
                code: 2,
            }),
        },
        Command::Cordon { node } => commands::edit::cordon(&source()?, node, true).await,
        Command::Uncordon { node } => commands::edit::cordon(&source()?, node, false).await,
        Command::Label(args) => commands::edit::label(&source()?, args, false).await,
        Command::Annotate(args) => commands::edit::label(&source()?, args, true).await,
        Command::Taint(args) => commands::edit::taint(&source()?, args).await,
        Command::Delete { node } => commands::edit::delete(&source()?, node).await,
        Command::Token { command } => commands::token::token(&source()?, command).await,
        Command::Completions { shell } => commands::completions::completions(*shell),
    }
}
