//! One file per subcommand; each returns what to print, so `main` stays thin.

pub mod at;
pub mod completions;
pub mod db;
pub mod describe;
pub mod edit;
pub mod history;
pub mod mirror;
pub mod nodes;
pub mod progress;
pub mod run;
pub mod token;
pub mod ui;
pub mod version;

use std::path::Path;

use futures_util::future::LocalBoxFuture;

use crate::cli::{Cli, Command, ConfigCommand, SimArgs};
use crate::inspect::Source;
use crate::model::{Micros, Node};

/// A command's failure: the message for the user and the exit code.
#[derive(Debug)]
pub struct Failure {
    pub message: String,
    pub code: i32,
}

impl<E: std::fmt::Display> From<E> for Failure {
    fn from(e: E) -> Self {
        Failure {
            message: e.to_string(),
            code: 1,
        }
    }
}

pub type Outcome = Result<String, Failure>;

/// What the binary brings that the library cannot name: the simulator's
/// crate is built on this one.
pub struct Simulator {
    /// `run --simulate`'s kubelets, started in this process.
    pub in_process: std::sync::Arc<dyn crate::simulate::Simulator>,
    /// `nodekeeper sim`.
    pub command: for<'a> fn(&'a SimArgs, &'a Path) -> LocalBoxFuture<'a, Outcome>,
}

/// Runs one command on `runtime`, to what it prints. Not `async`, so that
/// the library's futures are compiled here, once: a binary that awaited
/// them would compile its own copies of every one it reaches, beside the
/// library's (docs/decisions/binary-size.md).
pub fn execute(
    runtime: &tokio::runtime::Runtime,
    cli: &Cli,
    settings: &[crate::config::Setting],
    api: Option<tokio::runtime::Handle>,
    simulator: Simulator,
) -> Outcome {
    runtime.block_on(dispatch(cli, settings, api, simulator))
}

async fn dispatch(
    cli: &Cli,
    settings: &[crate::config::Setting],
    api: Option<tokio::runtime::Handle>,
    simulator: Simulator,
) -> Outcome {
    let source = || Source::open_with_token(&cli.db, cli.server.as_deref(), cli.token.as_deref());
    match &cli.command {
        Command::Run(args) => run::run(args, &cli.db, Some(simulator.in_process), api).await,
        Command::Nodes { output } => nodes::nodes(&source()?, *output).await,
        Command::Describe { node } => describe::describe(&source()?, node).await,
        Command::History(args) => history::history(&source()?, args).await,
        Command::At { time, output } => at::at(&source()?, time, *output).await,
        Command::Mirror { command } => mirror::mirror(&source()?, command).await,
        Command::Db { command } => {
            db::db(
                &cli.db,
                cli.server.as_deref(),
                cli.token.as_deref(),
                command,
            )
            .await
        }
        Command::Sim(args) => (simulator.command)(args, &cli.db).await,
        Command::Ui(args) => ui::ui(args, &cli.db).await,
        Command::Version { output } => {
            version::version(
                *output,
                &cli.db,
                cli.server.as_deref(),
                cli.token.as_deref(),
            )
            .await
        }
        Command::Config {
            command: ConfigCommand::Print(_),
        } => match crate::config::check_files(settings) {
            Ok(()) => Ok(crate::config::print(settings)),
            // A config naming files that are not there is a mistake to fix before `run`.
            Err(e) => Err(Failure {
                message: e.to_string(),
                code: 2,
            }),
        },
        Command::Cordon { node } => edit::cordon(&source()?, node, true).await,
        Command::Uncordon { node } => edit::cordon(&source()?, node, false).await,
        Command::Label(args) => edit::label(&source()?, args, false).await,
        Command::Annotate(args) => edit::label(&source()?, args, true).await,
        Command::Taint(args) => edit::taint(&source()?, args).await,
        Command::Delete { node } => edit::delete(&source()?, node).await,
        Command::Token { command } => token::token(&source()?, command).await,
        Command::Completions { shell } => completions::completions(*shell),
    }
}

static STDOUT_CLOSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Standard output for what commands print. A reader that went away
/// (`nodekeeper history | head -1`) is remembered, so `main` exits quietly
/// instead of reporting (or panicking on) the broken pipe.
pub fn stdout() -> Stdout {
    Stdout(std::io::stdout().lock())
}

/// Whether a write to standard output found the reader gone.
pub fn stdout_closed() -> bool {
    STDOUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed)
}

/// Standard output for async writers, noting (as [`Stdout`]) a reader
/// that went away.
pub struct AsyncStdout(pub tokio::io::Stdout);

impl tokio::io::AsyncWrite for AsyncStdout {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.0)
            .poll_write(cx, buf)
            .map(Stdout::note)
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0)
            .poll_flush(cx)
            .map(Stdout::note)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

/// See [`stdout`].
pub struct Stdout(std::io::StdoutLock<'static>);

impl Stdout {
    fn note<T>(result: std::io::Result<T>) -> std::io::Result<T> {
        if let Err(e) = &result {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                STDOUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        }
        result
    }
}

impl std::io::Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        Self::note(self.0.write(buf))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Self::note(self.0.flush())
    }
}

/// Nodes as a Kubernetes NodeList, in JSON or YAML.
pub(crate) fn node_list_text(
    nodes: &[(Node, Option<Micros>)],
    version: u64,
    yaml: bool,
) -> Result<String, Failure> {
    let list = crate::k8s::node_list(
        nodes.iter().map(|(n, beat)| crate::k8s::node(n, *beat)),
        version,
    );
    if yaml {
        Ok(serde_yaml_ng::to_string(&list)?)
    } else {
        Ok(serde_json::to_string_pretty(&list)? + "\n")
    }
}

/// The newest resource version among `nodes`.
pub(crate) fn newest_version(nodes: &[(Node, Option<Micros>)]) -> u64 {
    nodes
        .iter()
        .map(|(n, _)| n.resource_version)
        .max()
        .unwrap_or(0)
}
