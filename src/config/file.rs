//! `--config FILE`: every `run` flag in a YAML file under its own name, with
//! the command line (and the environment) overriding the file.
//!
//! The file is read into command-line arguments before clap parses them, so
//! a value in the file goes through exactly the parser, the validation and
//! the error messages of its flag. Unknown keys are refused with their line.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::parser::ValueSource;
use clap::{ArgAction, ArgMatches, CommandFactory, FromArgMatches, ValueHint};

use thiserror::Error;

use crate::cli::Cli;

/// The subcommands that take `--config` and the `run` flags.
const CONFIGURED: [&[&str]; 2] = [&["run"], &["config", "print"]];

/// The largest config file read. Every flag of `run` with a long value fits
/// in a few KiB; a site's node list belongs in `--nodes-file`.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// How deeply a config file's lists and mappings may nest. A config is a
/// mapping of flags to values or lists of values (two levels); the YAML
/// parser takes time quadratic in the nesting of flow collections (100,000
/// `[` took 30 s to refuse), so deeper ones are refused before it sees them.
pub const MAX_CONFIG_NESTING: usize = 16;

/// `config print` pads its origin comments into a column up to this width;
/// longer lines are not padded.
const ORIGIN_COLUMN_MAX: usize = 80;

/// What went wrong with a config file; each names the file and, where it
/// can, the line.
#[derive(Debug, Error)]
pub enum ConfigError {
    #[error("cannot read --config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("--config {path}: {reason}")]
    Syntax { path: PathBuf, reason: String },
    #[error("--config {}:{line}: {reason}", path.display())]
    Key {
        path: PathBuf,
        line: usize,
        reason: String,
    },
    #[error("--config {}: the file is larger than {} bytes, more than any configuration needs; is it the right file? (a long node list belongs in --nodes-file)", path.display(), MAX_CONFIG_BYTES)]
    TooLarge { path: PathBuf },
    #[error("--config {}:{line}: lists or mappings nested more than {} deep; a config maps flag names to values or to lists of values, such as `nodes: [a, b]`", path.display(), MAX_CONFIG_NESTING)]
    TooDeep { path: PathBuf, line: usize },
    /// Files the settings name that cannot be read, one line each.
    #[error("{}", .0.join("\n"))]
    Unreadable(Vec<String>),
}

/// Where a setting's value came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Default,
    File,
    Environment,
    CommandLine,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Default => "default",
            Origin::File => "config file",
            Origin::Environment => "environment",
            Origin::CommandLine => "command line",
        }
    }
}

/// One setting of the effective configuration, for `config print`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Setting {
    /// The flag's name, which is also its key in the file.
    pub key: String,
    /// The values as given (several for a repeated flag); empty when unset.
    pub values: Vec<String>,
    pub origin: Origin,
}

/// The command line's definition: the derived one, with `--server` (for
/// inspecting a running controller) kept out of the commands that run one.
pub fn command() -> clap::Command {
    let mut command = Cli::command().version(crate::version::long_version());
    for name in ["run", "config"] {
        for (id, why) in [
            ("server", "--server is for inspecting a running controller; `run` serves its own API on --listen"),
            ("token", "--token is for the inspection and edit commands; `run` takes its tokens from --token-file"),
        ] {
            command = command.mut_subcommand(name, |sub| {
                // An argument of the subcommand's own stops clap from adding the global one.
                sub.arg(
                    clap::Arg::new(id)
                        .long(id)
                        .hide(true)
                        .num_args(1)
                        .value_parser(move |_: &str| -> Result<String, String> { Err(why.into()) }),
                )
            });
        }
    }
    command
}

/// Parses the command line, folding in the `--config` file of `run` (and
/// `config print`). Exits the way clap does on `--help` and usage errors.
pub fn parse_args(args: Vec<OsString>) -> Result<(Cli, Vec<Setting>), ConfigError> {
    let command = command();
    // A first, lenient look: which subcommand, which file, which flags were
    // given. What is wrong may be mended by the file, so the strict parse
    // comes after merging it.
    let matches = command
        .clone()
        .ignore_errors(true)
        .try_get_matches_from(&args)
        .unwrap_or_else(|e| e.exit());
    let Some((path, sub)) = configured(&matches) else {
        let matches = command
            .clone()
            .try_get_matches_from(&args)
            .unwrap_or_else(|e| e.exit());
        let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
        return Ok((cli, Vec::new()));
    };
    let from_file = match &path {
        Some(path) => file_args(path, &command)?,
        None => Vec::new(),
    };
    let mut merged = args;
    let mut file_ids = Vec::new();
    for (id, tokens) in from_file {
        // The command line and the environment win over the file.
        if matches!(
            sub.value_source(&id),
            Some(ValueSource::CommandLine | ValueSource::EnvVariable)
        ) {
            continue;
        }
        merged.extend(tokens);
        file_ids.push(id);
    }
    let matches = match command.clone().try_get_matches_from(&merged) {
        Ok(matches) => matches,
        Err(e) => return Err(blame_file(e, path.as_deref(), &file_ids, &command)),
    };
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let settings = match configured(&matches) {
        Some((_, sub)) => settings(&command, sub, &file_ids),
        None => Vec::new(),
    };
    Ok((cli, settings))
}

/// The matches of a subcommand that takes `--config`, with the file if given.
fn configured(matches: &ArgMatches) -> Option<(Option<PathBuf>, &ArgMatches)> {
    CONFIGURED.iter().find_map(|chain| {
        let sub = chain.iter().try_fold(matches, |current, name| {
            current
                .subcommand()
                .filter(|(n, _)| n == name)
                .map(|(_, sub)| sub)
        })?;
        Some((sub.get_one::<PathBuf>("config").cloned(), sub))
    })
}

/// The flags `run` takes, with the global ones a config may set.
fn run_args(command: &clap::Command) -> Vec<clap::Arg> {
    let run = command
        .find_subcommand("run")
        .expect("the CLI has a run subcommand");
    let mut args: Vec<clap::Arg> = run.get_arguments().cloned().collect();
    // Global flags a daemon's config sets too; `--server` is for inspection.
    args.extend(
        command
            .get_arguments()
            .filter(|a| matches!(a.get_id().as_str(), "db" | "log" | "log_format"))
            .cloned(),
    );
    args.retain(|a| {
        a.get_long().is_some()
            && !matches!(a.get_id().as_str(), "config" | "help" | "server" | "token")
    });
    args
}

/// Reads `path` into command-line tokens, by argument id.
fn file_args(
    path: &Path,
    command: &clap::Command,
) -> Result<Vec<(String, Vec<OsString>)>, ConfigError> {
    let text = read_bounded(path)?;
    if let Some(line) = nested_too_deep(&text) {
        return Err(ConfigError::TooDeep {
            path: path.to_path_buf(),
            line,
        });
    }
    let value: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&text).map_err(|e| ConfigError::Syntax {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    let mapping = match value {
        serde_yaml_ng::Value::Mapping(m) => m,
        serde_yaml_ng::Value::Null => return Ok(Vec::new()),
        _ => {
            return Err(ConfigError::Syntax {
                path: path.to_path_buf(),
                reason: "the file must be a YAML mapping of flag names to values, such as `node-sync-period: 10s`".into(),
            })
        }
    };
    let base = path.parent().unwrap_or(Path::new("."));
    let args = run_args(command);
    let mut out = Vec::new();
    for (key, value) in mapping {
        let key_error = |key: &str, reason: String| ConfigError::Key {
            path: path.to_path_buf(),
            line: line_of(&text, key),
            reason,
        };
        let Some(key) = key.as_str().map(str::to_string) else {
            return Err(ConfigError::Syntax {
                path: path.to_path_buf(),
                reason: format!("a key is not a string: {key:?}"),
            });
        };
        let Some(arg) = args.iter().find(|a| {
            a.get_long() == Some(key.as_str())
                || a.get_all_aliases()
                    .is_some_and(|aliases| aliases.contains(&key.as_str()))
        }) else {
            return Err(key_error(
                &key,
                format!(
                    "unknown key {key:?}: keys are the flags of `nodekeeper run` without their dashes (see `nodekeeper run --help`){}",
                    suggestion(&key, &args)
                ),
            ));
        };
        let long = arg.get_long().expect("kept only long flags");
        let tokens = tokens(arg, long, &value, base).map_err(|reason| key_error(&key, reason))?;
        out.push((arg.get_id().to_string(), tokens));
    }
    Ok(out)
}

/// The text of the config file at `path`, refused past [`MAX_CONFIG_BYTES`]
/// without reading further (`--config /dev/zero` ends there).
fn read_bounded(path: &Path) -> Result<String, ConfigError> {
    use std::io::Read;
    let read_error = |source| ConfigError::Read {
        path: path.to_path_buf(),
        source,
    };
    // Read once at start-up, before the runtime (or any task) runs.
    #[allow(clippy::disallowed_methods)]
    let file = std::fs::File::open(path).map_err(read_error)?;
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(ConfigError::TooLarge {
            path: path.to_path_buf(),
        });
    }
    String::from_utf8(bytes).map_err(|e| ConfigError::Syntax {
        path: path.to_path_buf(),
        reason: format!("not UTF-8 text: {e}"),
    })
}

/// The line where flow collections (`[`, `{`) first nest past
/// [`MAX_CONFIG_NESTING`], if they do. Brackets inside quoted scalars and
/// comments do not count, as YAML reads them; those of plain scalars
/// (`match: edge-[0-9]+`) do, which only overstates the nesting. Block nesting needs indentation, which the
/// size limit bounds to levels the parser takes in milliseconds.
fn nested_too_deep(text: &str) -> Option<usize> {
    let (mut depth, mut line) = (0usize, 1usize);
    let mut quote: Option<char> = None;
    let mut comment = false;
    let mut previous = '\n';
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\n' {
            line += 1;
            comment = false;
        }
        match (quote, c) {
            _ if comment || c == '\n' => {}
            // '' is a quote inside single quotes; \ escapes inside double ones.
            (Some('\''), '\'') if chars.peek() == Some(&'\'') => {
                chars.next();
            }
            (Some('"'), '\\') => {
                chars.next();
            }
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '#') if previous.is_whitespace() => comment = true,
            // A quote opens a scalar only where a scalar starts (not in `it's`).
            (None, '\'' | '"') if previous.is_whitespace() || "[{,".contains(previous) => {
                quote = Some(c)
            }
            (None, '[' | '{') => {
                depth += 1;
                if depth > MAX_CONFIG_NESTING {
                    return Some(line);
                }
            }
            (None, ']' | '}') => depth = depth.saturating_sub(1),
            _ => {}
        }
        previous = c;
    }
    None
}

/// What `config print` checks beyond parsing: every file a setting names
/// (the nodes file, certificates, keys, token files, the kubeconfig, the
/// cloud config) can be opened and read, as `run` would need it.
pub fn check_files(settings: &[Setting]) -> Result<(), ConfigError> {
    let command = command();
    let files: Vec<String> = run_args(&command)
        .iter()
        .filter(|a| a.get_value_hint() == ValueHint::FilePath)
        .filter_map(|a| a.get_long().map(str::to_string))
        .collect();
    let mut problems = Vec::new();
    for setting in settings.iter().filter(|s| files.contains(&s.key)) {
        for value in setting.values.iter().filter(|v| !v.is_empty()) {
            if let Err(e) = readable(Path::new(value)) {
                problems.push(format!(
                    "--{} {value} ({}): cannot read it: {e}; give a file that exists and that the controller's user may read",
                    setting.key,
                    setting.origin.as_str()
                ));
            }
        }
    }
    if problems.is_empty() {
        Ok(())
    } else {
        Err(ConfigError::Unreadable(problems))
    }
}

/// Whether `path` is a file this process may read (a byte of it, if any).
fn readable(path: &Path) -> std::io::Result<()> {
    use std::io::Read;
    // One-shot check of `config print`, before any runtime work.
    #[allow(clippy::disallowed_methods)]
    let mut file = std::fs::File::open(path)?;
    if file.metadata()?.is_dir() {
        return Err(std::io::Error::other("it is a directory"));
    }
    file.read(&mut [0u8; 1]).map(|_| ())
}

/// A usage error about a value that came from the file names the file and
/// line; any other exits as clap does.
fn blame_file(
    error: clap::Error,
    path: Option<&Path>,
    from_file: &[String],
    command: &clap::Command,
) -> ConfigError {
    use clap::error::{ContextKind, ContextValue};
    let culprit = match error.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => arg.clone(),
        _ => String::new(),
    };
    let long = culprit
        .strip_prefix("--")
        .and_then(|rest| rest.split([' ', '=', '<']).next())
        .unwrap_or_default();
    let arg = run_args(command)
        .into_iter()
        .find(|a| a.get_long() == Some(long) && from_file.iter().any(|id| id == a.get_id()));
    match (arg, path) {
        (Some(_), Some(path)) => {
            // Read again to point at the line, before the runtime starts.
            let text = read_bounded(path).unwrap_or_default();
            let reason = error.to_string();
            let reason = reason
                .lines()
                .next()
                .unwrap_or_default()
                .trim_start_matches("error: ")
                .to_string();
            ConfigError::Key {
                path: path.to_path_buf(),
                line: line_of(&text, long),
                reason,
            }
        }
        _ => error.exit(),
    }
}

/// The command-line tokens for one file value.
fn tokens(
    arg: &clap::Arg,
    long: &str,
    value: &serde_yaml_ng::Value,
    base: &Path,
) -> Result<Vec<OsString>, String> {
    use serde_yaml_ng::Value;
    let scalar = |v: &Value| -> Result<String, String> {
        match v {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            Value::Bool(b) => Ok(b.to_string()),
            Value::Null => Err("has no value".into()),
            _ => Err("takes a single value here, not a list or mapping".into()),
        }
    };
    let is_path = matches!(
        arg.get_value_hint(),
        ValueHint::FilePath | ValueHint::DirPath | ValueHint::AnyPath
    );
    let resolve = |s: String| -> String {
        if is_path && !s.is_empty() && Path::new(&s).is_relative() {
            base.join(s).to_string_lossy().into_owned()
        } else {
            s
        }
    };
    let flag = |v: String| OsString::from(format!("--{long}={v}"));
    match arg.get_action() {
        ArgAction::SetTrue | ArgAction::SetFalse => {
            let set = match value {
                Value::Bool(b) => *b,
                Value::String(s) if s == "true" || s == "false" => s == "true",
                _ => return Err(format!("{long} is true or false")),
            };
            let wanted = matches!(arg.get_action(), ArgAction::SetTrue);
            Ok(if set == wanted {
                vec![OsString::from(format!("--{long}"))]
            } else {
                Vec::new()
            })
        }
        ArgAction::Append => match value {
            Value::Sequence(items) => items
                .iter()
                .map(|v| scalar(v).map(|s| flag(resolve(s))))
                .collect(),
            other => Ok(vec![flag(resolve(scalar(other)?))]),
        },
        _ => match value {
            // A list for a comma-separated flag (`nodes: [a, b]`).
            Value::Sequence(items) => {
                let items: Result<Vec<String>, String> = items.iter().map(scalar).collect();
                Ok(vec![flag(items?.join(","))])
            }
            other => Ok(vec![flag(resolve(scalar(other)?))]),
        },
    }
}

/// The effective settings, in the order `run --help` lists them.
fn settings(command: &clap::Command, matches: &ArgMatches, from_file: &[String]) -> Vec<Setting> {
    run_args(command)
        .iter()
        .filter(|a| !a.is_hide_set())
        .map(|arg| {
            let id = arg.get_id().as_str();
            let values: Vec<String> = matches
                .get_raw(id)
                .map(|raw| raw.map(|v| v.to_string_lossy().into_owned()).collect())
                .unwrap_or_default();
            let origin = if from_file.iter().any(|f| f == id) {
                Origin::File
            } else {
                match matches.value_source(id) {
                    Some(ValueSource::CommandLine) => Origin::CommandLine,
                    Some(ValueSource::EnvVariable) => Origin::Environment,
                    _ => Origin::Default,
                }
            };
            let values = match arg.get_action() {
                ArgAction::SetTrue | ArgAction::SetFalse => {
                    vec![matches.get_flag(id).to_string()]
                }
                _ => values,
            };
            Setting {
                key: arg.get_long().unwrap_or(id).to_string(),
                values,
                origin,
            }
        })
        .collect()
}

/// The 1-based line where top-level `key` is written, or 1.
fn line_of(text: &str, key: &str) -> usize {
    text.lines()
        .position(|line| {
            let line = line.trim_end();
            [key.to_string(), format!("\"{key}\""), format!("'{key}'")]
                .iter()
                .any(|k| {
                    line.strip_prefix(k.as_str())
                        .is_some_and(|rest| rest.trim_start().starts_with(':'))
                })
        })
        .map_or(1, |i| i + 1)
}

/// " (did you mean …?)" for a near miss.
fn suggestion(key: &str, args: &[clap::Arg]) -> String {
    let normalized = key.replace('_', "-").to_ascii_lowercase();
    let close = args
        .iter()
        .filter_map(|a| a.get_long())
        .find(|long| *long == normalized || edit_distance(long, &normalized) <= 2);
    close.map_or_else(String::new, |c| format!("; did you mean {c:?}?"))
}

fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut previous = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let current = row[j + 1];
            row[j + 1] = (previous + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(current + 1);
            previous = current;
        }
    }
    row[b.len()]
}

/// The effective configuration as YAML a `--config` file takes, each value
/// with where it came from. Defaults are shown commented out, so the output
/// used as a file pins only what was chosen.
pub fn print(settings: &[Setting]) -> String {
    let mut lines: Vec<(String, &str)> = Vec::new();
    for s in settings {
        let value = match s.values.as_slice() {
            [] => None,
            [one] => Some(yaml_scalar(one)),
            many => Some(format!(
                "[{}]",
                many.iter()
                    .map(|v| yaml_scalar(v))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        };
        let line = match (value, s.origin) {
            (None, _) => format!("# {}:", s.key),
            (Some(v), Origin::Default) => format!("# {}: {v}", s.key),
            (Some(v), _) => format!("{}: {v}", s.key),
        };
        let origin = if s.values.is_empty() {
            "unset"
        } else {
            s.origin.as_str()
        };
        lines.push((line, origin));
    }
    let width = lines
        .iter()
        .map(|(l, _)| l.chars().count())
        .filter(|&n| n <= ORIGIN_COLUMN_MAX)
        .max()
        .unwrap_or(0);
    let mut out = String::from(
        "# The effective configuration of `nodekeeper run`, usable as --config.\n\
         # Defaults and unset values are commented out.\n",
    );
    for (line, origin) in lines {
        let pad = width.saturating_sub(line.chars().count());
        out.push_str(&line);
        out.extend(std::iter::repeat_n(' ', pad));
        out.push_str(&format!("  # {origin}\n"));
    }
    out
}

/// `s` as a YAML scalar that reads back as the same flag value: bare where
/// YAML reads it back unchanged, quoted otherwise.
fn yaml_scalar(s: &str) -> String {
    use serde_yaml_ng::Value;
    let bare = match serde_yaml_ng::from_str::<Value>(s) {
        Ok(Value::String(read)) => read == s,
        Ok(Value::Number(n)) => n.to_string() == s,
        Ok(Value::Bool(b)) => b.to_string() == s,
        _ => false,
    };
    if bare && !s.contains(": ") && !s.contains(" #") {
        return s.to_string();
    }
    match serde_yaml_ng::to_string(s) {
        Ok(text) => text.trim_end().to_string(),
        Err(_) => format!("{s:?}"),
    }
}

#[cfg(test)]
// Tests write and read their fixtures with std::fs: blocking a test's own
// runtime stalls nothing else.
#[allow(clippy::disallowed_methods)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("nodekeeper.yaml");
        std::fs::write(&path, text).unwrap();
        path
    }

    /// The error `run --config` gives for a file holding `text`.
    fn config_error(dir: &Path, text: &str) -> String {
        let path = write(dir, text);
        parse_args(args(&[
            "nodekeeper",
            "run",
            "--config",
            path.to_str().unwrap(),
        ]))
        .unwrap_err()
        .to_string()
    }

    fn run_args_of(cli: &Cli) -> &crate::cli::RunArgs {
        match &cli.command {
            crate::cli::Command::Run(args) => args,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn file_values_apply_and_flags_override_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "# a site\nnode-sync-period: 3s\nkubelet-port: 10255\nnodes: [a, b]\nallow-node-registration: true\nleader-elect: false\nnodes-file: nodes.txt\n",
        );
        let (cli, settings) = parse_args(args(&[
            "nodekeeper",
            "run",
            "--config",
            path.to_str().unwrap(),
            "--kubelet-port",
            "4000",
        ]))
        .unwrap();
        let run = run_args_of(&cli);
        assert_eq!(run.node_sync_period, std::time::Duration::from_secs(3));
        assert_eq!(run.kubelet_port, 4000, "the flag wins");
        assert_eq!(run.nodes.as_deref(), Some("a,b"));
        assert!(run.allow_node_registration);
        assert!(!run.leader_elect);
        assert_eq!(
            run.nodes_file.as_deref(),
            Some(dir.path().join("nodes.txt").as_path()),
            "paths are relative to the file"
        );
        let origin = |key: &str| settings.iter().find(|s| s.key == key).unwrap().origin;
        assert_eq!(origin("node-sync-period"), Origin::File);
        assert_eq!(origin("kubelet-port"), Origin::CommandLine);
        assert_eq!(origin("node-monitor-grace-period"), Origin::Default);
    }

    #[test]
    fn unknown_keys_and_bad_values_name_their_line() {
        let dir = tempfile::tempdir().unwrap();
        let err = config_error(dir.path(), "node-sync-period: 3s\n\nnode-sync-priod: 4s\n");
        assert!(err.contains("nodekeeper.yaml:3"), "{err}");
        assert!(
            err.contains("node-sync-priod") && err.contains("did you mean \"node-sync-period\""),
            "{err}"
        );

        let err = config_error(dir.path(), "listen: 127.0.0.1:1\nnodes:\n  a: b\n");
        assert!(err.contains(":2:") && err.contains("single value"), "{err}");

        let err = config_error(dir.path(), "node-sync-period: 3s\nkubelet-port: lots\n");
        assert!(
            err.contains("nodekeeper.yaml:2") && err.contains("lots"),
            "{err}"
        );

        let err = config_error(dir.path(), "- a\n- b\n");
        assert!(err.contains("mapping"), "{err}");
    }

    #[test]
    fn printed_configuration_reads_back_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(
            dir.path(),
            "node-sync-period: 3s\nnodes: a,b\nmatch: 'edge-.*'\n",
        );
        let (_, settings) = parse_args(args(&[
            "nodekeeper",
            "config",
            "print",
            "--config",
            path.to_str().unwrap(),
            "--cloud-provider",
            "inventory",
        ]))
        .unwrap();
        let text = print(&settings);
        assert!(text.contains("\nnode-sync-period: 3s "), "{text}");
        assert!(text.contains("# config file"), "{text}");
        assert!(
            text.contains("\n# kubelet-port: 10250 "),
            "defaults are commented: {text}"
        );
        assert!(text.contains("\nmatch: edge-.*"), "{text}");
        let again = write(dir.path(), &text);
        let (_, reread) = parse_args(args(&[
            "nodekeeper",
            "config",
            "print",
            "--config",
            again.to_str().unwrap(),
        ]))
        .unwrap();
        let values = |s: &[Setting]| {
            s.iter()
                .map(|s| (s.key.clone(), s.values.clone()))
                .collect::<Vec<_>>()
        };
        assert_eq!(values(&settings), values(&reread));
        for (key, value) in [
            ("3s", "3s"),
            ("10250", "10250"),
            ("a: b", "'a: b'"),
            ("x #y", "'x #y'"),
            ("null", "'null'"),
        ] {
            assert_eq!(yaml_scalar(key), value);
        }
    }

    #[test]
    fn nesting_counts_flow_brackets_outside_quotes_and_comments() {
        let deep = |n: usize| format!("nodes: {}{}\n", "[".repeat(n), "]".repeat(n));
        assert_eq!(nested_too_deep(&deep(MAX_CONFIG_NESTING)), None);
        assert_eq!(nested_too_deep(&format!("a: 1\n{}", deep(17))), Some(2));
        assert_eq!(nested_too_deep("x: {a: [{b: [1]}]}\n"), None);
        let open = "[".repeat(40);
        for quiet in [
            format!("# {open}\n"),
            format!("a: b # {open}\n"),
            format!("a: '{open}'\n"),
            format!("a: \"{open}\"\n"),
            format!("a: 'it''s {open}'\n"),
            format!("a: \"\\\" {open}\"\n"),
        ] {
            assert_eq!(nested_too_deep(&quiet), None, "{quiet}");
        }
        // A quote inside a plain scalar opens nothing: the brackets after it count.
        assert_eq!(nested_too_deep(&format!("a: it's\nb: {open}\n")), Some(2));
        // Nor does a `#` inside a word start a comment.
        assert_eq!(nested_too_deep(&format!("a: x#{open}\n")), Some(1));
    }

    #[test]
    fn lines_are_found_for_plain_and_quoted_keys() {
        let text = "a: 1\n  b: 2\n\"c\": 3\n";
        assert_eq!(line_of(text, "a"), 1);
        assert_eq!(line_of(text, "b"), 1, "only top-level keys");
        assert_eq!(line_of(text, "c"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }
}
