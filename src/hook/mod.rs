//! Running an operator's command for something that happened: `sh -c CMD`
//! with arguments, environment and (optionally) JSON on stdin, in a process
//! group of its own that is killed whole when the command outlives its
//! timeout.

pub mod transitions;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::AsyncWriteExt;

/// What a hook printed that is kept (in logs and history) at most, in characters.
pub const OUTPUT_LIMIT: usize = 500;

/// One run of a hook command.
#[derive(Debug, Clone, Default)]
pub struct HookRun {
    /// `$0` as the command sees it, e.g. `nodekeeper-transition-hook`.
    pub name: &'static str,
    /// `$1`, `$2`, …
    pub args: Vec<String>,
    pub env: Vec<(&'static str, String)>,
    /// Written to the command's stdin, which is then closed.
    pub stdin: Option<Vec<u8>>,
}

/// How a hook run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// Exit status 0; what it printed (stdout then stderr, trimmed, capped).
    Succeeded { output: String },
    /// Another exit status (`None`: a signal).
    Exited { code: Option<i32>, output: String },
    /// Still running at the timeout: its process group was killed.
    TimedOut { after: Duration },
    /// It could not be started, or waiting for it failed.
    Failed { reason: String },
}

impl HookOutcome {
    pub fn succeeded(&self) -> bool {
        matches!(self, HookOutcome::Succeeded { .. })
    }
}

impl std::fmt::Display for HookOutcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HookOutcome::Succeeded { output } if output.is_empty() => write!(f, "hook succeeded"),
            HookOutcome::Succeeded { output } => write!(f, "hook succeeded: {output}"),
            HookOutcome::Exited { code, output } => write!(
                f,
                "hook exited with {}: {output}",
                code.map_or("a signal".into(), |c| c.to_string())
            ),
            HookOutcome::TimedOut { after } => {
                write!(f, "hook killed after {}", crate::duration::format(*after))
            }
            HookOutcome::Failed { reason } => write!(f, "hook failed: {reason}"),
        }
    }
}

/// Runs `sh -c "COMMAND \"$@\""` with `run`'s arguments, environment and
/// stdin, and waits at most `timeout` for it (and for its output to close).
pub async fn run(command: &str, run: HookRun, timeout: Duration) -> HookOutcome {
    let mut child = tokio::process::Command::new("sh");
    child
        .arg("-c")
        .arg(format!("{command} \"$@\""))
        .arg(run.name)
        .args(&run.args)
        .envs(run.env.iter().map(|(k, v)| (*k, v.as_str())))
        .stdin(if run.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own group, so a timeout kills what the command started too.
        .process_group(0)
        .kill_on_drop(true);
    let mut child = match child.spawn() {
        Ok(child) => child,
        Err(e) => {
            return HookOutcome::Failed {
                reason: format!("it could not start: {e}"),
            }
        }
    };
    let group = child.id();
    let stdin = child.stdin.take();
    let input = run.stdin;
    let finished = async move {
        if let (Some(mut pipe), Some(input)) = (stdin, input) {
            // A command that does not read its stdin closes it: not an error.
            let _ = pipe.write_all(&input).await;
            drop(pipe);
        }
        child.wait_with_output().await
    };
    match tokio::time::timeout(timeout, finished).await {
        Err(_) => {
            if let Some(pid) = group.and_then(|id| rustix::process::Pid::from_raw(id as i32)) {
                // The group may be gone already; the child itself is killed on drop.
                let _ = rustix::process::kill_process_group(pid, rustix::process::Signal::KILL);
            }
            HookOutcome::TimedOut { after: timeout }
        }
        Ok(Err(e)) => HookOutcome::Failed {
            reason: e.to_string(),
        },
        Ok(Ok(out)) => {
            let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.push_str(&String::from_utf8_lossy(&out.stderr));
            let output: String = text.trim().chars().take(OUTPUT_LIMIT).collect();
            match out.status.code() {
                Some(0) => HookOutcome::Succeeded { output },
                code => HookOutcome::Exited { code, output },
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn arguments_environment_and_stdin_reach_the_command() {
        let outcome = run(
            r#"f() { printf '%s|%s|%s|' "$1" "$2" "$NODEKEEPER_X"; cat; }; f"#,
            HookRun {
                name: "test-hook",
                args: vec!["a b".into(), "c".into()],
                env: vec![("NODEKEEPER_X", "x".into())],
                stdin: Some(b"{\"seq\":1}".to_vec()),
            },
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            outcome,
            HookOutcome::Succeeded {
                output: "a b|c|x|{\"seq\":1}".into()
            }
        );
    }

    #[tokio::test]
    async fn a_failing_command_says_how() {
        let outcome = run(
            "echo nope; exit 3",
            HookRun::default(),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            outcome,
            HookOutcome::Exited {
                code: Some(3),
                output: "nope".into()
            }
        );
        assert_eq!(outcome.to_string(), "hook exited with 3: nope");
    }

    #[tokio::test]
    // Waits, bounded, for a real process to be reaped: the kernel's time, not tokio's.
    #[allow(clippy::disallowed_methods, clippy::disallowed_types)]
    async fn a_command_past_its_timeout_is_killed_with_what_it_started() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("pid");
        // The shell starts a child that would outlive it, and says its pid.
        let command = format!("sleep 300 & echo $! > {}; wait", pid_file.display());
        let outcome = run(&command, HookRun::default(), Duration::from_millis(500)).await;
        assert_eq!(
            outcome,
            HookOutcome::TimedOut {
                after: Duration::from_millis(500)
            }
        );
        let pid = std::fs::read_to_string(&pid_file).unwrap();
        let pid = pid.trim();
        // Killed with its group: /proc forgets it once reaped or a zombie.
        let gone = || {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .map_or(true, |stat| stat.contains(") Z "))
        };
        let started = std::time::Instant::now();
        while !gone() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "sleep {pid} survived"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
