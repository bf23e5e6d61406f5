//! What this build is: version, git commit, build date and compiler, for
//! `--version`, `nodekeeper version` and `nodekeeper_build_info`.

use serde::Serialize;

/// The crate version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit the binary was built from (`unknown` outside a checkout).
pub const GIT_COMMIT: &str = env!("NODEKEEPER_GIT_COMMIT");
/// When the binary was built (RFC 3339; `SOURCE_DATE_EPOCH` when set).
pub const BUILD_DATE: &str = env!("NODEKEEPER_BUILD_DATE");
/// `rustc --version` of the compiler that built it.
pub const RUSTC_VERSION: &str = env!("NODEKEEPER_RUSTC_VERSION");
/// The target triple.
pub const TARGET: &str = env!("NODEKEEPER_TARGET");

/// What `nodekeeper --version` prints after the name.
pub const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("NODEKEEPER_GIT_COMMIT"),
    ", built ",
    env!("NODEKEEPER_BUILD_DATE"),
    ")"
);

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
    BuildInfo {
        version: VERSION,
        git_commit: GIT_COMMIT,
        build_date: BUILD_DATE,
        rustc_version: RUSTC_VERSION,
        platform: TARGET,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn build_facts_are_filled_in() {
        let info = build_info();
        assert_eq!(info.version, env!("CARGO_PKG_VERSION"));
        assert!(
            info.git_commit == "unknown"
                || (info.git_commit.len() == 40
                    && info.git_commit.bytes().all(|b| b.is_ascii_hexdigit())),
            "{}",
            info.git_commit
        );
        assert!(
            crate::model::Micros::parse_rfc3339(info.build_date).is_ok(),
            "{}",
            info.build_date
        );
        assert!(
            info.rustc_version.starts_with("rustc "),
            "{}",
            info.rustc_version
        );
        assert!(LONG_VERSION.contains(info.git_commit));
    }
}
