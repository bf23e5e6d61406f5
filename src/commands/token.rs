//! `nodekeeper token create|list|delete`: bootstrap tokens, as `kubeadm
//! token` makes them (Secrets `kube-system/bootstrap-token-ID`), through the
//! running controller's API, or on the stopped store.

use k8s_openapi::api::core::v1::Secret;

use super::{Failure, Outcome};
use crate::cli::TokenCommand;
use crate::inspect::Source;
use crate::logging::terminal::escape;
use crate::model::Micros;
use crate::server::bootstrap_tokens::{
    self, generate_token, has_expired, parse_token, token_secret, KEY_DESCRIPTION, KEY_EXPIRATION,
    KEY_EXTRA_GROUPS, KEY_ID, KEY_SECRET, NAMESPACE, RESOURCE, SECRET_PREFIX,
};

const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";

pub async fn token(source: &Source, command: &TokenCommand) -> Outcome {
    match command {
        TokenCommand::Create {
            bootstrap_token: token,
            ttl,
            description,
            groups,
        } => {
            let token = token.clone().unwrap_or_else(generate_token);
            let expiration =
                (!ttl.is_zero()).then(|| Micros(Micros::now().0 + ttl.as_micros() as i64));
            let secret = token_secret(&token, expiration, description, groups)?;
            create(source, secret).await?;
            Ok(format!("{token}\n"))
        }
        TokenCommand::List => Ok(table(&list(source).await?, Micros::now())),
        TokenCommand::Delete { tokens } => {
            let mut out = String::new();
            for given in tokens {
                let id = parse_token(given).map_or(given.as_str(), |(id, _)| id);
                if !bootstrap_tokens::is_token_id(id) {
                    return Err(Failure::from(format!(
                        "{given:?} is neither a token ID ([a-z0-9]{{6}}) nor a token (ID.SECRET)"
                    )));
                }
                delete(source, &format!("{SECRET_PREFIX}{id}")).await?;
                out.push_str(&format!("bootstrap token {id:?} deleted\n"));
            }
            Ok(out)
        }
    }
}

async fn create(source: &Source, secret: Secret) -> Result<(), Failure> {
    match source {
        Source::Local(store) if store.is_copy() => Err(Failure::from(format!(
            "this user may not write the store at {}",
            store.origin().display()
        ))),
        Source::Local(store) => {
            bootstrap_tokens::create_in_store(store, secret)?;
            Ok(())
        }
        Source::Remote { .. } => {
            let body = serde_json::to_string(&secret).map_err(|e| e.to_string())?;
            source.call(reqwest::Method::POST, SECRETS, body).await?;
            Ok(())
        }
    }
}

async fn list(source: &Source) -> Result<Vec<Secret>, Failure> {
    match source {
        Source::Local(store) => Ok(store
            .api_objects(RESOURCE, Some(NAMESPACE))?
            .iter()
            .filter_map(|o| serde_json::from_str(&o.json).ok())
            .collect()),
        Source::Remote { .. } => {
            let body = source
                .call(reqwest::Method::GET, SECRETS, String::new())
                .await?;
            #[derive(serde::Deserialize)]
            struct List {
                items: Vec<Secret>,
            }
            let list: List = serde_json::from_slice(&body)
                .map_err(|e| format!("unreadable list of bootstrap tokens: {e}"))?;
            Ok(list.items)
        }
    }
}

async fn delete(source: &Source, name: &str) -> Result<(), Failure> {
    match source {
        Source::Local(store) if store.is_copy() => Err(Failure::from(format!(
            "this user may not write the store at {}",
            store.origin().display()
        ))),
        Source::Local(store) => {
            store
                .delete_api_object(RESOURCE, NAMESPACE, name, None)
                .map_err(|e| format!("secrets {name:?}: {e}"))?;
            store.flush_blocking()?;
            Ok(())
        }
        Source::Remote { .. } => {
            let path = format!("{SECRETS}/{name}");
            source
                .call(reqwest::Method::DELETE, &path, String::new())
                .await?;
            Ok(())
        }
    }
}

/// kubeadm's columns: TOKEN, TTL, EXPIRES, DESCRIPTION, EXTRA GROUPS.
fn table(secrets: &[Secret], now: Micros) -> String {
    let value = |s: &Secret, key: &str| -> String {
        s.data
            .as_ref()
            .and_then(|d| d.get(key))
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .unwrap_or_default()
    };
    let mut rows = vec![[
        "TOKEN".to_string(),
        "TTL".into(),
        "EXPIRES".into(),
        "DESCRIPTION".into(),
        "EXTRA GROUPS".into(),
    ]];
    for s in secrets {
        let expires = value(s, KEY_EXPIRATION);
        let ttl = if expires.is_empty() {
            "<forever>".to_string()
        } else if has_expired(s, now) {
            "<invalid>".to_string()
        } else {
            Micros::parse_rfc3339(&expires)
                .map(|at| {
                    crate::duration::age(std::time::Duration::from_micros((at.0 - now.0) as u64))
                })
                .unwrap_or_else(|_| "<invalid>".into())
        };
        rows.push([
            format!("{}.{}", value(s, KEY_ID), value(s, KEY_SECRET)),
            ttl,
            if expires.is_empty() {
                "<never>".into()
            } else {
                expires
            },
            value(s, KEY_DESCRIPTION),
            value(s, KEY_EXTRA_GROUPS),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
        .collect();
    let mut out = String::new();
    for row in rows {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{:<w$}", escape(cell), w = *w))
            .collect();
        out.push_str(line.join("   ").trim_end());
        out.push('\n');
    }
    out
}
