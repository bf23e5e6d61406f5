//! Build facts for `nodekeeper version`, `--version` and `nodekeeper_build_info`:
//! the git commit, the build date and the compiler. The binary crate alone is
//! stamped (main hands them to the library, `nodekeeper::version::stamp`): a
//! new commit relinks the binary, and the library is not rebuilt.
//!
//! Also tells the end-to-end tests whether they run in CI (`CI` set and not
//! `false` or `0`, as `.ci/run` sets it). A test that needs what only CI is
//! sure to give, such as root to mount a file system, runs there and fails
//! when it cannot; elsewhere it is ignored, with its reason.

use std::process::Command;

fn main() {
    println!("cargo::rustc-check-cfg=cfg(ci)");
    println!("cargo::rerun-if-env-changed=CI");
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
    if ci {
        println!("cargo::rustc-cfg=ci");
    }
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let commit = git(&["rev-parse", "HEAD"]).unwrap_or_else(|| "unknown".into());
    // A new commit (or branch) builds anew; files changing do not rerun
    // this. Only paths that exist are watched: cargo reruns a script on
    // every build for a watched path that is missing (a checkout without
    // packed-refs, or whose branch lives in packed-refs only). The branch's
    // ref directory is watched too, so a ref written later is seen.
    let mut watched = vec![git(&["rev-parse", "--git-path", "HEAD"])];
    watched.push(git(&["rev-parse", "--git-path", "packed-refs"]));
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(git(&["rev-parse", "--git-path", &branch]));
        if let Some((dir, _)) = branch.rsplit_once('/') {
            watched.push(git(&["rev-parse", "--git-path", dir]));
        }
    }
    for path in watched.into_iter().flatten() {
        if std::path::Path::new(&path).exists() {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    // The build date: SOURCE_DATE_EPOCH (reproducible builds set it), else
    // the commit's time, so one commit builds to the same bytes; the build's
    // own time only outside a checkout (the build script is not the
    // program: it has no Micros::now to call).
    #[allow(clippy::disallowed_methods)]
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .or_else(|| git(&["log", "-1", "--format=%ct"]).and_then(|s| s.parse().ok()))
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs())
        });
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let rustc_version = Command::new(rustc)
        .arg("--version")
        .output()
        .ok()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=NODEKEEPER_GIT_COMMIT={commit}");
    println!("cargo:rustc-env=NODEKEEPER_BUILD_DATE={}", rfc3339(epoch));
    println!("cargo:rustc-env=NODEKEEPER_RUSTC_VERSION={rustc_version}");
    println!(
        "cargo:rustc-env=NODEKEEPER_TARGET={}",
        std::env::var("TARGET").unwrap_or_default()
    );
}

/// Seconds since the Unix epoch as RFC 3339 in UTC (a build script has no
/// date crate; this is the civil-from-days algorithm).
fn rfc3339(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64;
    let secs = epoch % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3_600,
        secs / 60 % 60,
        secs % 60
    )
}
