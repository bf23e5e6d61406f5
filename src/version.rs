//! What this build is: version, git commit, build date and compiler, for
//! `--version`, `nodekeeper version` and `nodekeeper_build_info`.
//!
//! The version is the crate's. The rest is stamped into the binary crate
//! alone (cli/build.rs), which hands it over at start with [`stamp`]: the
//! library is not rebuilt for a new commit. Unstamped (the library's own
//! tests, the benchmarks), each says `unknown`.

use std::sync::OnceLock;

use serde::Serialize;

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// What the binary was built from and with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    /// The git commit (`unknown` outside a checkout).
    pub git_commit: &'static str,
    /// When it was built (RFC 3339; `SOURCE_DATE_EPOCH` or the commit's time when set).
    pub build_date: &'static str,
    /// `rustc --version` of the compiler that built it.
    pub rustc_version: &'static str,
    /// The target triple.
    pub target: &'static str,
}

const UNSTAMPED: Stamp = Stamp {
    git_commit: "unknown",
    build_date: "unknown",
    rustc_version: "unknown",
    target: "unknown",
};

static STAMP: OnceLock<Stamp> = OnceLock::new();

/// Records the binary's build facts; called once, first thing in `main`.
pub fn stamp(stamp: Stamp) {
    let _ = STAMP.set(stamp);
}

fn current() -> Stamp {
    STAMP.get().copied().unwrap_or(UNSTAMPED)
}

/// The git commit the binary was built from.
pub fn git_commit() -> &'static str {
    current().git_commit
}

/// When the binary was built.
pub fn build_date() -> &'static str {
    current().build_date
}

/// What `nodekeeper --version` prints after the name.
pub fn long_version() -> &'static str {
    static LONG: OnceLock<String> = OnceLock::new();
    LONG.get_or_init(|| {
        let s = current();
        format!(
            "{VERSION} (commit {}, built {})",
            s.git_commit, s.build_date
        )
    })
}

/// The build facts, as `nodekeeper version -o json` prints them.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildInfo {
    pub version: &'static str,
    pub git_commit: &'static str,
    pub build_date: &'static str,
    pub rustc_version: &'static str,
    pub platform: &'static str,
}

/// This binary's build facts.
pub fn build_info() -> BuildInfo {
    let s = current();
    BuildInfo {
        version: VERSION,
        git_commit: s.git_commit,
        build_date: s.build_date,
        rustc_version: s.rustc_version,
        platform: s.target,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unstamped_facts_say_unknown_and_the_version_is_the_crates() {
        // The library's tests run unstamped (the binary stamps itself; its
        // facts are checked by cli/tests/operations.rs).
        let info = build_info();
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert_eq!(info.git_commit, "unknown");
        assert_eq!(info.build_date, "unknown");
        assert!(long_version().starts_with(VERSION), "{}", long_version());
    }
}
