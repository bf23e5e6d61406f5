//! A hook's output costs the controller a fixed buffer however much the
//! hook prints: the transition hook's and the eviction hook's, on stdout and
//! stderr alike, measured as the real binary's peak resident memory.
// Tests set up files with std::fs and read /proc of real processes: clippy.toml's
// runtime rules are for the product.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

mod common;

use std::net::Ipv4Addr;

use common::*;
use nodekeeper_sim::KubeletState;

/// How much a process's peak resident memory may grow while a hook prints
/// 400 MB. Buffering the output whole takes more than 400 MiB; reading
/// only what is kept takes a few pages.
const GROWTH_LIMIT_KIB: u64 = 64 * 1024;

/// The peak resident set of a process (`VmHWM`), in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no VmHWM in {status}"))
}

/// A shell command that, once `flag` exists, prints 200 MB to stdout and
/// 200 MB to stderr, then exits 0; before that, nothing.
fn loud_hook(flag: &std::path::Path) -> String {
    format!(
        "f() {{ [ -e {f} ] || exit 0; yes nodekeeper | head -c 200000000; head -c 200000000 /dev/zero >&2; }}; f",
        f = flag.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transition_hook_printing_400_mb_does_not_grow_the_controller() {
    let site = TestSite::start(2, Ipv4Addr::new(127, 157, 0, 1)).await;
    let (fleet, dir) = (&site.fleet, site.dir.path());
    let flag = dir.join("loud");
    let c = site.controller_with(&["--transition-hook", &loud_hook(&flag)]);
    let (a, b) = (fleet.name(0), fleet.name(1));
    c.wait_ready(&a, "True").await;
    c.wait_ready(&b, "True").await;
    let seen = &c;
    let runs = |n: u32| async move {
        seen.text("/metrics").await.contains(&format!(
            "nodekeeper_transition_hook_runs_total{{result=\"Succeeded\"}} {n}"
        ))
    };
    eventually("the two registrations are hooked", || runs(2)).await;
    let before = peak_rss_kib(c.child.id());

    std::fs::write(&flag, "").unwrap();
    fleet.handle.set(&a, KubeletState::Down).unwrap();
    c.wait_ready(&a, "Unknown").await;
    eventually("the loud hook ran and succeeded", || runs(3)).await;
    let after = peak_rss_kib(c.child.id());
    eprintln!("peak RSS {before} KiB before the hook printed, {after} KiB after");
    assert!(
        after.saturating_sub(before) < GROWTH_LIMIT_KIB,
        "peak RSS grew from {before} KiB to {after} KiB while the hook printed 400 MB"
    );
    assert!(c.stop().success());
    site.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_eviction_hook_printing_400_mb_does_not_grow_the_controller() {
    let site = TestSite::start(4, Ipv4Addr::new(127, 157, 1, 1)).await;
    let (fleet, dir) = (&site.fleet, site.dir.path());
    let flag = dir.join("loud");
    let c = site.controller_with(&[
        "--pod-eviction-timeout",
        "1s",
        "--eviction-hook",
        &loud_hook(&flag),
    ]);
    for i in 0..4 {
        c.wait_ready(&fleet.name(i), "True").await;
    }
    let before = peak_rss_kib(c.child.id());

    std::fs::write(&flag, "").unwrap();
    let victim = fleet.name(0);
    fleet.handle.set(&victim, KubeletState::Down).unwrap();
    let done = c.wait_event(&victim, "EvictionDone").await;
    let after = peak_rss_kib(c.child.id());
    eprintln!("peak RSS {before} KiB before the hook printed, {after} KiB after");
    assert!(
        after.saturating_sub(before) < GROWTH_LIMIT_KIB,
        "peak RSS grew from {before} KiB to {after} KiB while the hook printed 400 MB"
    );
    // What is kept is the start of stdout, a few hundred characters.
    let result = done["result"].as_str().unwrap();
    assert!(
        result.starts_with("hook succeeded: nodekeeper\nnodekeeper\n"),
        "{result:.200}"
    );
    assert!(result.chars().count() < 600, "{} characters", result.len());
    assert!(c.stop().success());
    site.stop().await;
}
