//! Running an operator's command for something that happened: `sh -c CMD`
//! with arguments, environment and (optionally) JSON on stdin, in a process
//! group of its own that is killed whole when the command outlives its
//! timeout.

pub mod transitions;

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

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

impl HookRun {
    /// A run of `name` whose arguments are in its environment too, each
    /// under its own variable (`$1` and `NODEKEEPER_NODE`, say).
    pub fn with_args(name: &'static str, args: Vec<(&'static str, String)>) -> HookRun {
        HookRun {
            name,
            args: args.iter().map(|(_, value)| value.clone()).collect(),
            env: args,
            stdin: None,
        }
    }
}

/// How a hook run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookOutcome {
    /// Exit status 0; what it printed (see [`kept_text`]).
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
/// Its stdin is written while its output is read, so a command that prints
/// before it reads cannot stall on a full pipe.
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
    let (stdin, stdout, stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let input = run.stdin;
    let finished = async move {
        let feed = async move {
            if let (Some(mut pipe), Some(input)) = (stdin, input) {
                // A command that does not read its stdin closes it: not an error.
                let _ = pipe.write_all(&input).await;
            }
        };
        let (_, out, err) = tokio::join!(feed, read_kept(stdout), read_kept(stderr));
        let status = child.wait().await?;
        std::io::Result::Ok((status, out?, err?))
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
        Ok(Ok((status, out, err))) => {
            let output = kept_text(&out, &err);
            match status.code() {
                Some(0) => HookOutcome::Succeeded { output },
                code => HookOutcome::Exited { code, output },
            }
        }
    }
}

/// Bytes of one stream kept: [`OUTPUT_LIMIT`] characters of UTF-8 at most.
const KEPT_BYTES: usize = OUTPUT_LIMIT * 4;

/// Reads `pipe` to its end and keeps its first [`KEPT_BYTES`] after any
/// leading whitespace; the rest is discarded as it comes, so a command that
/// prints gigabytes costs this buffer and one read's, not what it printed.
async fn read_kept(pipe: Option<impl AsyncRead + Unpin>) -> std::io::Result<Vec<u8>> {
    let mut kept = Vec::new();
    let Some(mut pipe) = pipe else {
        return Ok(kept);
    };
    let mut chunk = vec![0; 8192];
    loop {
        let read = pipe.read(&mut chunk).await?;
        if read == 0 {
            return Ok(kept);
        }
        let mut new = &chunk[..read];
        if kept.is_empty() {
            new = new.trim_ascii_start();
        }
        let room = KEPT_BYTES - kept.len();
        kept.extend_from_slice(&new[..new.len().min(room)]);
    }
}

/// What a run printed, as its outcome keeps it: stdout then stderr, each
/// trimmed, a line apart, at most [`OUTPUT_LIMIT`] characters.
fn kept_text(stdout: &[u8], stderr: &[u8]) -> String {
    let (out, err) = (
        String::from_utf8_lossy(stdout),
        String::from_utf8_lossy(stderr),
    );
    let text = match (out.trim(), err.trim()) {
        (out, "") => out.to_string(),
        ("", err) => err.to_string(),
        (out, err) => format!("{out}\n{err}"),
    };
    text.chars().take(OUTPUT_LIMIT).collect()
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
    async fn output_is_kept_from_the_start_of_each_stream_capped() {
        // 10 MB on stdout after blank lines: its first characters are kept, up to the limit.
        let outcome = run(
            "printf '\\n  '; yes abc | head -c 10000000; echo oops >&2; exit 1",
            HookRun::default(),
            Duration::from_secs(30),
        )
        .await;
        let HookOutcome::Exited {
            code: Some(1),
            output,
        } = outcome
        else {
            panic!("{outcome:?}");
        };
        assert!(output.starts_with("abc\nabc\n"), "{output:?}");
        assert_eq!(output.chars().count(), OUTPUT_LIMIT);
        // Each stream trimmed, a line apart.
        let outcome = run(
            "printf ' out '; printf '\\n err\\n' >&2",
            HookRun::default(),
            Duration::from_secs(10),
        )
        .await;
        assert_eq!(
            outcome,
            HookOutcome::Succeeded {
                output: "out\nerr".into()
            }
        );
    }

    #[tokio::test]
    async fn a_stream_is_read_to_its_end_but_only_its_start_is_held() {
        let endless = tokio::io::repeat(b'y').take(300_000_000);
        let kept = read_kept(Some(endless)).await.unwrap();
        assert_eq!(kept.len(), KEPT_BYTES);
        assert!(kept.capacity() <= 2 * KEPT_BYTES, "{}", kept.capacity());
        // Leading whitespace is passed over across reads.
        let spaced = (&b" \n\t"[..]).chain(&b"  \r\nx y"[..]);
        assert_eq!(read_kept(Some(spaced)).await.unwrap(), b"x y");
    }

    #[tokio::test]
    async fn a_command_that_prints_before_reading_its_stdin_does_not_stall() {
        // More than a pipe holds, both ways.
        let outcome = run(
            "head -c 1000000 /dev/zero >&2; wc -c",
            HookRun {
                stdin: Some(vec![b'x'; 1_000_000]),
                ..HookRun::default()
            },
            Duration::from_secs(10),
        )
        .await;
        let HookOutcome::Succeeded { output } = outcome else {
            panic!("{outcome:?}");
        };
        assert!(output.starts_with("1000000\n"), "{output:.20?}");
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
