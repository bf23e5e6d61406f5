//! The documentation stays true to the repository and the binary: the
//! README's quick start and five-minute tour run as written against the real
//! binary (loopback only, each step within a deadline), every path and link
//! the README and docs/ name exists (anchors included), and every flag and
//! subcommand the binary takes is documented somewhere.
// Tests drive real processes and read files with std::fs: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{signal, BIN, DEADLINE, REPO};

/// Marks, in the README's tour, the block before which the controller is
/// stopped (the tour says "Stop the controller with Ctrl-C").
const STOP_MARK: &str = "<!-- docs test: the controller stops here -->";

/// How long one step of the tour may take to show what the README shows:
/// the silent kubelet's grace period, shortened below, and a sweep.
const STEP_DEADLINE: Duration = Duration::from_secs(60);

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn readme() -> String {
    read(&Path::new(REPO).join("README.md"))
}

/// The text of `## heading` up to the next `## ` heading.
fn section<'a>(text: &'a str, heading: &str) -> &'a str {
    let start = text
        .find(&format!("\n## {heading}\n"))
        .unwrap_or_else(|| panic!("the README has no \"## {heading}\" section"));
    let rest = &text[start + 1..];
    let end = rest[3..].find("\n## ").map_or(rest.len(), |i| i + 3);
    &rest[..end]
}

/// A fenced code block: its lines, and whether the stop mark precedes it.
struct Block {
    lines: Vec<String>,
    stop_before: bool,
}

fn blocks(text: &str) -> Vec<Block> {
    let mut found = Vec::new();
    let mut inside: Option<Vec<String>> = None;
    let mut stop_before = false;
    for line in text.lines() {
        if line.starts_with("```") {
            match inside.take() {
                Some(lines) => {
                    found.push(Block { lines, stop_before });
                    stop_before = false;
                }
                None => inside = Some(Vec::new()),
            }
        } else if let Some(lines) = inside.as_mut() {
            lines.push(line.to_string());
        } else if line.trim() == STOP_MARK {
            stop_before = true;
        }
    }
    assert!(inside.is_none(), "a code block is not closed");
    found
}

/// One `$ command` of the tour and the lines the README shows it print
/// (`...` stands for lines left out).
struct Step {
    command: String,
    expected: Vec<String>,
}

fn steps(block: &Block) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for line in &block.lines {
        if let Some(command) = line.strip_prefix("$ ") {
            steps.push(Step {
                command: command.to_string(),
                expected: Vec::new(),
            });
        } else if line.trim() != "..." && !line.trim().is_empty() {
            steps
                .last_mut()
                .expect("a tour block starts with a `$ ` command")
                .expected
                .push(line.clone());
        }
    }
    steps
}

/// Splits a command line as a shell would, for the tour's simple lines:
/// words, single-quoted words, and a `#` comment at the end.
fn words(line: &str) -> Vec<String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut in_word = false;
    let mut quoted = false;
    for c in line.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                in_word = true;
            }
            '#' if !quoted && !in_word => break,
            c if c.is_whitespace() && !quoted => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            c => {
                word.push(c);
                in_word = true;
            }
        }
    }
    assert!(!quoted, "unbalanced quote in {line:?}");
    if in_word {
        words.push(word);
    }
    words
}

/// A word with its runs of digits made one `#`: times, ages, seqs, ports and
/// addresses vary from run to run, names and words do not.
fn shape(word: &str) -> String {
    let mut out = String::new();
    for c in word.chars() {
        if c.is_ascii_digit() {
            if !out.ends_with('#') {
                out.push('#');
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// An age as tables print it (`67s`, `2m3s`, `12d`).
fn is_age(word: &str) -> bool {
    word.starts_with(|c: char| c.is_ascii_digit())
        && word
            .chars()
            .all(|c| c.is_ascii_digit() || "smhd".contains(c))
}

/// Whether an actual line is the line the README shows: the same words, a
/// node's name (`sim-00003`) exactly, other numbers by their shape.
fn same_line(expected: &str, actual: &str) -> bool {
    let expected: Vec<&str> = expected.split_whitespace().collect();
    let actual: Vec<&str> = actual.split_whitespace().collect();
    expected.len() == actual.len()
        && expected.iter().zip(&actual).all(|(e, a)| {
            let is_name = e.split_once('-').is_some_and(|(p, n)| {
                p.chars().all(|c| c.is_ascii_lowercase())
                    && n.chars().all(|c| c.is_ascii_digit())
                    && !n.is_empty()
            });
            if is_name {
                e == a
            } else if is_age(e) && is_age(a) {
                true
            } else {
                shape(e) == shape(a)
            }
        })
}

/// The lines of `expected` that no line of `output` matches.
fn unmatched<'a>(expected: &'a [String], output: &str) -> Vec<&'a String> {
    expected
        .iter()
        .filter(|e| !output.lines().any(|a| same_line(e, a)))
        .collect()
}

/// `GET url` over a loopback connection, for the tour's `curl -s URL`: the
/// body, whatever the status.
fn http_get(url: &str) -> Result<String, String> {
    let rest = url.strip_prefix("http://").ok_or("only http:// URLs")?;
    let (host, path) = rest
        .split_once('/')
        .map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
    assert!(
        host.starts_with("127."),
        "the tour calls loopback only: {url}"
    );
    let mut stream = TcpStream::connect(host).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream
        .set_write_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )
    .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    stream
        .take(1 << 20)
        .read_to_end(&mut answer)
        .map_err(|e| e.to_string())?;
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let (_, body) = answer.split_once("\r\n\r\n").ok_or("no header end")?;
    Ok(body.to_string())
}

/// The controller the quick start runs, in a directory of its own.
struct Demo {
    dir: tempfile::TempDir,
    controller: Option<Child>,
    url: String,
}

impl Demo {
    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Runs one tour command; its output, or why it failed.
    fn run(&self, command: &str) -> Result<String, String> {
        let words = words(&command.replace("http://127.0.0.1:8080", &self.url));
        let (program, args) = words.split_first().expect("an empty command");
        match program.as_str() {
            "curl" => {
                let url = args
                    .iter()
                    .find(|a| !a.starts_with('-'))
                    .expect("curl's URL");
                http_get(url)
            }
            "nodekeeper" | "kubectl" => {
                let mut cmd = if program == "nodekeeper" {
                    Command::new(BIN)
                } else {
                    let mut cmd = Command::new("kubectl");
                    std::fs::write(self.path().join("kubeconfig"), "").unwrap();
                    cmd.env("KUBECONFIG", self.path().join("kubeconfig"))
                        .env("HOME", self.path())
                        .arg("--request-timeout=10s");
                    cmd
                };
                for (var, _) in std::env::vars() {
                    if var.starts_with("NODEKEEPER_") || var.to_lowercase().ends_with("_proxy") {
                        cmd.env_remove(var);
                    }
                }
                let out = cmd
                    .args(args)
                    .current_dir(self.path())
                    .stdin(Stdio::null())
                    .output()
                    .unwrap_or_else(|e| {
                        panic!("{program} cannot run ({e}): the tour runs it; install it (Debian: kubernetes-client for kubectl; scripts/test installs it)")
                    });
                let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
                if out.status.success() {
                    Ok(stdout)
                } else {
                    Err(format!(
                        "{}: {stdout}{}",
                        out.status,
                        String::from_utf8_lossy(&out.stderr)
                    ))
                }
            }
            other => panic!(
                "the tour runs nodekeeper, kubectl and curl, not {other}: teach cli/tests/docs.rs"
            ),
        }
    }

    /// Runs a step until it prints what the README shows, within the deadline.
    fn step(&self, step: &Step) {
        let started = Instant::now();
        loop {
            let result = self.run(&step.command);
            let missing = match &result {
                Ok(output) => unmatched(&step.expected, output),
                Err(_) => step.expected.iter().collect(),
            };
            if result.is_ok() && missing.is_empty() {
                return;
            }
            assert!(
                started.elapsed() < STEP_DEADLINE,
                "the README's `{}` did not show what it shows within {STEP_DEADLINE:?}.\nmissing lines: {missing:#?}\nit printed: {}",
                step.command,
                match result {
                    Ok(o) => o,
                    Err(e) => format!("(failed) {e}"),
                }
            );
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    fn stop(&mut self) {
        let mut child = self.controller.take().expect("the controller runs");
        signal(child.id(), "-INT");
        let status = common::exited_in_time(&mut child).expect("the controller stops on Ctrl-C");
        assert!(
            status.success(),
            "the controller exited with {status} on Ctrl-C"
        );
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        if let Some(mut child) = self.controller.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The quick start's first command, run as the README gives it (through the
/// built binary rather than `cargo run`), with the API on a free loopback
/// port instead of 8080 and shorter periods so the tour's changes show within
/// seconds.
fn start_quick_start(command: &str) -> Demo {
    let args = command
        .strip_prefix("cargo run --release -- ")
        .unwrap_or_else(|| panic!("the quick start's first command runs the controller with `cargo run --release -- `: {command:?}"));
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = Command::new(BIN);
    for (var, _) in std::env::vars() {
        if var.starts_with("NODEKEEPER_") {
            cmd.env_remove(var);
        }
    }
    let controller = cmd
        .args(words(args))
        .args(["--listen", "127.0.0.1:0"])
        .args([
            "--node-sync-period",
            "1s",
            "--node-monitor-grace-period",
            "4s",
        ])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(dir.path().join("controller.log")).unwrap())
        .spawn()
        .expect("the controller starts");
    let discovery = dir.path().join("nodekeeper-data/controller.json");
    let started = Instant::now();
    let url = loop {
        if let Ok(text) = std::fs::read_to_string(&discovery) {
            if let Ok(found) = serde_json::from_str::<serde_json::Value>(&text) {
                break found["url"]
                    .as_str()
                    .expect("controller.json names its url")
                    .to_string();
            }
        }
        assert!(
            started.elapsed() < DEADLINE,
            "the quick start's controller did not start: {}",
            std::fs::read_to_string(dir.path().join("controller.log")).unwrap_or_default()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    Demo {
        dir,
        controller: Some(controller),
        url,
    }
}

#[test]
fn the_quick_start_and_the_tour_run_as_written() {
    let readme = readme();
    let quick = blocks(section(&readme, "Quick start"));
    let commands: Vec<String> = quick[0]
        .lines
        .iter()
        .map(|l| words(l).join(" "))
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(
        commands.len(),
        2,
        "two commands: the controller and the tests: {commands:?}"
    );

    // The second is the test suite: CI runs exactly it.
    let ci = read(&Path::new(REPO).join(".ci/run"));
    assert!(
        ci.lines().any(|l| l.trim() == commands[1]),
        ".ci/run does not run the README's test command `{}`",
        commands[1]
    );

    let mut demo = start_quick_start(&commands[0]);
    let tour = blocks(section(&readme, "A five-minute tour"));
    let mut ran = 0;
    for block in &tour {
        if block.stop_before {
            demo.stop();
        }
        for step in steps(block) {
            demo.step(&step);
            ran += 1;
        }
    }
    assert!(
        ran >= 10,
        "the tour runs {ran} commands: is its section found?"
    );
    assert!(
        demo.controller.is_none(),
        "the tour stops the controller ({STOP_MARK})"
    );
}

// --- paths and links ---------------------------------------------------------

/// README.md and every Markdown file under docs/.
fn documents() -> Vec<PathBuf> {
    fn walk(dir: &Path, found: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, found);
            } else if path.extension().is_some_and(|e| e == "md") {
                found.push(path);
            }
        }
    }
    let mut found = vec![Path::new(REPO).join("README.md")];
    walk(&Path::new(REPO).join("docs"), &mut found);
    found.sort();
    found
}

/// GitHub's anchors of a Markdown file's headings (outside code blocks).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
        }
        let Some(heading) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let mut candidate = slug.clone();
        let mut n = 0;
        while !found.insert(candidate.clone()) {
            n += 1;
            candidate = format!("{slug}-{n}");
        }
    }
    found
}

/// The link targets of a Markdown text: `](target)`, outside code blocks.
fn links(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        for (i, _) in line.match_indices("](") {
            let rest = &line[i + 2..];
            if let Some(end) = rest.find(')') {
                found.push(rest[..end].to_string());
            }
        }
    }
    found
}

/// The words of a text that name a file of the repository: ones that start
/// with a top-level directory and a slash, or are a top-level file's name.
fn repository_paths(text: &str, top: &BTreeSet<String>) -> BTreeSet<String> {
    text.split(|c: char| c.is_whitespace() || "`()[],;\"'".contains(c))
        .map(|w| {
            w.split('#')
                .next()
                .unwrap_or(w)
                .trim_end_matches(['.', ':'])
        })
        .filter(|w| {
            let first = w.split('/').next().unwrap_or("");
            !w.contains(['<', '{', '$', '…'])
                && ((w.contains('/') && top.contains(first))
                    || (top.contains(*w) && w.contains('.')))
        })
        .map(String::from)
        .collect()
}

#[test]
fn every_path_and_link_the_docs_name_exists() {
    let root = Path::new(REPO);
    let top: BTreeSet<String> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n != "target" && n != ".git")
        .collect();
    let mut problems = Vec::new();
    for doc in documents() {
        let text = read(&doc);
        let name = doc.strip_prefix(root).unwrap_or(&doc).display().to_string();
        for link in links(&text) {
            if link.starts_with("http://")
                || link.starts_with("https://")
                || link.starts_with("mailto:")
            {
                continue;
            }
            let (file, anchor) = link
                .split_once('#')
                .map_or((link.as_str(), None), |(f, a)| (f, Some(a)));
            let target = if file.is_empty() {
                doc.clone()
            } else {
                doc.parent().unwrap().join(file)
            };
            if !target.exists() {
                problems.push(format!("{name}: links to {link}, which does not exist"));
                continue;
            }
            if let Some(anchor) = anchor {
                if target.extension().is_some_and(|e| e == "md")
                    && !anchors(&read(&target)).contains(anchor)
                {
                    problems.push(format!(
                        "{name}: links to {link}, a heading {} does not have",
                        target.display()
                    ));
                }
            }
        }
        for path in repository_paths(&text, &top) {
            let exists = if let Some((dir, _)) = path.split_once('*') {
                root.join(dir).exists()
            } else {
                root.join(&path).exists()
            };
            if !exists {
                problems.push(format!("{name}: names {path}, which does not exist"));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

// --- flags and subcommands ---------------------------------------------------

fn help(args: &[&str]) -> String {
    let out = Command::new(BIN).args(args).arg("--help").output().unwrap();
    assert!(out.status.success(), "nodekeeper {args:?} --help failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The subcommands a `--help` lists.
fn subcommands(help: &str) -> Vec<String> {
    help.split("Commands:\n")
        .nth(1)
        .map(|rest| {
            rest.lines()
                .take_while(|l| l.starts_with("  "))
                // A description's wrapped lines are indented further.
                .filter(|l| !l.starts_with("   "))
                .filter_map(|l| l.split_whitespace().next())
                .filter(|c| *c != "help")
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// The flags a `--help` lists, each at the start of its line (a flag named
/// in a description's wrapped line is indented further).
fn flags(help: &str) -> Vec<String> {
    help.lines()
        .filter(|l| l.len() - l.trim_start().len() <= 6)
        .filter_map(|l| {
            let l = l.trim_start();
            let l = match (l.get(2..4), l.get(4..)) {
                (Some(", "), Some(rest)) if l.starts_with('-') => rest,
                _ => l,
            };
            l.strip_prefix("--").map(|f| {
                format!(
                    "--{}",
                    f.chars()
                        .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                        .collect::<String>()
                )
            })
        })
        .filter(|f| f != "--help" && f != "--version")
        .collect()
}

#[test]
fn every_flag_and_subcommand_is_documented() {
    let docs: String = documents().iter().map(|d| read(d)).collect();
    let mut missing = Vec::new();
    let top = help(&[]);
    for flag in flags(&top) {
        if !docs.contains(&flag) {
            missing.push(format!("nodekeeper {flag}"));
        }
    }
    for command in subcommands(&top) {
        if !docs.contains(&format!("nodekeeper {command}")) {
            missing.push(format!("the subcommand nodekeeper {command}"));
        }
        let text = help(&[&command]);
        for flag in flags(&text) {
            if !docs.contains(&flag) {
                missing.push(format!("nodekeeper {command} {flag}"));
            }
        }
        for sub in subcommands(&text) {
            if !docs.contains(&format!("{command} {sub}")) {
                missing.push(format!("the subcommand nodekeeper {command} {sub}"));
            }
            for flag in flags(&help(&[&command, &sub])) {
                if !docs.contains(&flag) {
                    missing.push(format!("nodekeeper {command} {sub} {flag}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "not documented in the README or docs/: {missing:#?}"
    );
}
