//! The crate's floors, checked: a module names (`crate::…`) only modules on
//! a floor below its own, so there is no import cycle and no arrow back up.
//! docs/architecture.md lists the same floors. Also checked here: Kubernetes
//! objects are written out in `src/k8s/` only.
#![cfg(test)]
// A test reading the crate's sources from disk, outside any runtime.
#![allow(clippy::disallowed_methods)]

use std::collections::BTreeSet;
use std::path::Path;

/// From the bottom up; a module may use the modules of the floors below.
const FLOORS: &[&[&str]] = &[
    // The domain and its rules (model/duration, model/quantity, model/validation,
    // model/eviction: eviction's mode, read by the store below the controller).
    &["model", "version", "serialize"],
    // What is read and shown of it: Kubernetes JSON, replayed history, the
    // published view, log lines, and small leaves.
    &[
        "k8s",
        "history",
        "view",
        "logging",
        "liveness",
        "process",
        "readiness",
        "discovery",
        "simulate",
        "backoff",
        "token_bucket",
        "certificates",
    ],
    // The edges: the store, where nodes come from, the kubelet client,
    // metrics, tables, systemd.
    &["store", "source", "probe", "metrics", "output", "notify"],
    &["hook", "backups"],
    &["controller"],
    &["mirror"],
    &["server"],
    // The command line's definitions, and inspection of a store.
    &["cli", "inspect"],
    // `run`'s configuration (the --config file, the validated flags, the
    // API's sizing), then `run` itself.
    &["config"],
    &["app"],
    &["commands"],
];

/// Paths kept at the crate's top for modules that live under another.
const MOVED: &[(&str, &str)] = &[
    ("duration", "model"),
    ("quantity", "model"),
    ("validation", "model"),
];

fn floor(module: &str) -> Option<usize> {
    FLOORS.iter().position(|f| f.contains(&module))
}

/// The top-level modules a file's production code names as `crate::X`.
fn uses(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or("");
    let mut found = BTreeSet::new();
    for line in code.lines() {
        let line = line.trim_start();
        if line.starts_with("//") {
            continue;
        }
        for (at, _) in line.match_indices("crate::") {
            let rest = &line[at + "crate::".len()..];
            let names: Vec<&str> = match rest.strip_prefix('{') {
                // `crate::{a, b::c}` on one line; wrapped groups name their
                // modules on the lines that follow, caught below.
                Some(group) => group.split(',').collect(),
                None => vec![rest],
            };
            for name in names {
                let name: String = name
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                found.insert(name);
            }
        }
    }
    // Wrapped `use crate::{` groups: every `name::` at the start of a line inside one.
    let mut inside = false;
    for line in code.lines() {
        let t = line.trim();
        if t.starts_with("use crate::{") && !t.ends_with("};") {
            inside = true;
            continue;
        }
        if inside {
            if t.starts_with('}') {
                inside = false;
                continue;
            }
            for part in t.split(',') {
                let name: String = part
                    .trim()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                found.insert(name);
            }
        }
    }
    found
}

fn visit(dir: &Path, files: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            visit(&path, files);
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
}

#[test]
fn every_module_uses_only_the_floors_below_it() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let first = relative.components().next().unwrap().as_os_str();
        let module = first.to_string_lossy().trim_end_matches(".rs").to_string();
        if ["lib", "main", "layers"].contains(&module.as_str()) {
            continue;
        }
        let Some(own) = floor(&module) else {
            wrong.push(format!(
                "{module} is on no floor: add it to FLOORS and docs/architecture.md"
            ));
            continue;
        };
        let text = std::fs::read_to_string(&file).unwrap();
        for used in uses(&text) {
            let used = MOVED
                .iter()
                .find(|(from, _)| *from == used)
                .map_or(used.as_str(), |(_, to)| to);
            if used == module {
                continue;
            }
            match floor(used) {
                Some(theirs) if theirs < own => {}
                Some(_) => wrong.push(format!(
                    "{} uses crate::{used}, on its own floor or above",
                    relative.display()
                )),
                // Not a module: a macro or item at the crate's top.
                None => {}
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn the_floors_name_every_module_once() {
    let mut seen = BTreeSet::new();
    for module in FLOORS.iter().flat_map(|f| f.iter()) {
        assert!(seen.insert(*module), "{module} is on two floors");
    }
}

/// Every Kubernetes object has an `apiVersion`: production code that spells
/// the field is writing an object, and that is `src/k8s/`'s alone.
#[test]
fn kubernetes_objects_are_built_in_k8s_only() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    visit(&src, &mut files);
    let mut wrong = Vec::new();
    for file in files {
        let relative = file.strip_prefix(&src).unwrap();
        let name = relative.to_string_lossy().replace('\\', "/");
        let test_file = relative.components().any(|c| c.as_os_str() == "tests")
            || relative.file_name().is_some_and(|f| {
                let f = f.to_string_lossy();
                f == "tests.rs" || f.starts_with("tests_")
            });
        if name.starts_with("k8s/") || name == "layers.rs" || test_file {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap_or("");
        let spelled = code
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .any(|l| l.contains("\"apiVersion\""));
        if spelled {
            wrong.push(format!(
                "{name} writes a Kubernetes object (\"apiVersion\"): build it in src/k8s/"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
