//! `nodekeeper version`: what this binary is, for bug reports and fleet
//! audits; and, as `kubectl version` adds the server's, what the running
//! controller is and which site it runs (`run --site`), when one is found
//! as the inspection commands find it (`--server`, or the store's discovery
//! file while a controller holds the store).

use std::path::Path;

use super::Outcome;
use crate::cli::ListFormat;
use crate::discovery::Discovery;
use crate::inspect::{ControllerAbout, Source};

#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct Versions {
    #[serde(flatten)]
    client: crate::version::BuildInfo,
    #[serde(skip_serializing_if = "Option::is_none")]
    controller: Option<ControllerAbout>,
}

/// This binary's build facts, and the running controller's, if one is found.
pub async fn version(
    format: ListFormat,
    db: &Path,
    server: Option<&str>,
    token: Option<&str>,
) -> Outcome {
    // Only a controller that is there: no store opened (or made) to find out.
    let controller = if server.is_some() || Discovery::read(db).is_some() {
        Source::open_with_token(db, server, token)?
            .controller_about()
            .await?
    } else {
        None
    };
    Ok(render(
        format,
        Versions {
            client: crate::version::build_info(),
            controller,
        },
    )?)
}

fn render(format: ListFormat, v: Versions) -> Result<String, serde_json::Error> {
    Ok(match format {
        ListFormat::Json => serde_json::to_string_pretty(&v)? + "\n",
        ListFormat::Table => {
            let info = &v.client;
            let mut text = format!(
                "Version:     {}\nGit commit:  {}\nBuild date:  {}\nCompiler:    {}\nPlatform:    {}\n",
                info.version, info.git_commit, info.build_date, info.rustc_version, info.platform
            );
            if let Some(c) = &v.controller {
                text.push_str(&format!(
                    "Controller:  {} (commit {})\nSite:        {}\n",
                    crate::logging::terminal::escape(&c.version),
                    crate::logging::terminal::escape(&c.git_commit),
                    crate::logging::terminal::escape(c.site.as_deref().unwrap_or("<none>")),
                ));
            }
            text
        }
    })
}
