//! Tells the end-to-end tests whether they run in CI (`CI` set and not
//! `false` or `0`, as `.ci/run` sets it). A test that needs what only CI is
//! sure to give, such as root to mount a file system, runs there and fails
//! when it cannot; elsewhere it is ignored, with its reason.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ci)");
    println!("cargo::rerun-if-env-changed=CI");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if ci {
        println!("cargo::rustc-cfg=ci");
    }
}
