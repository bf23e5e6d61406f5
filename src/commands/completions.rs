//! `nodekeeper completions bash|zsh|fish`: shell completion scripts, and the
//! command line as the man pages under `dist/man` describe it, both made from
//! the CLI definition itself so they cannot drift from it.

use super::Outcome;
use crate::cli::Shell;

/// The completion script for `shell`, to be sourced or installed where the
/// shell looks for completions.
pub fn completions(shell: Shell) -> Outcome {
    let mut command = crate::config::command();
    let mut script = Vec::new();
    let generator = match shell {
        Shell::Bash => clap_complete::Shell::Bash,
        Shell::Zsh => clap_complete::Shell::Zsh,
        Shell::Fish => clap_complete::Shell::Fish,
    };
    clap_complete::generate(generator, &mut command, "nodekeeper", &mut script);
    Ok(String::from_utf8(script)?)
}

/// The command line as documented: the version without the commit and
/// build date, so the man pages change only when the CLI does.
pub fn documented_command() -> clap::Command {
    crate::config::command().version(crate::version::VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_shell_completes_subcommands_and_run_flags() {
        for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
            let script = completions(shell).unwrap();
            for word in ["run", "mirror", "completions", "node-monitor-grace-period"] {
                assert!(script.contains(word), "{shell:?} lacks {word}");
            }
            // Hidden stand-ins that refuse --server under `run` are not offered there.
            assert!(!script.contains("is for inspecting a running controller"));
        }
        assert!(completions(Shell::Bash)
            .unwrap()
            .contains("complete -F _nodekeeper"));
    }
}
