//! `nodekeeper version`: what this binary is, for bug reports and fleet audits.

use super::Outcome;
use crate::cli::ListFormat;

pub fn version(format: ListFormat) -> Outcome {
    let info = crate::version::build_info();
    match format {
        ListFormat::Json => Ok(serde_json::to_string_pretty(&info)? + "\n"),
        ListFormat::Table => Ok(format!(
            "Version:     {}\nGit commit:  {}\nBuild date:  {}\nCompiler:    {}\nPlatform:    {}\n",
            info.version, info.git_commit, info.build_date, info.rustc_version, info.platform
        )),
    }
}
