//! Authentication: bearer tokens from `--token-file`, and which node a
//! caller may change. Who a caller is (its user and groups) is
//! `identity`'s; every authenticator here ends in [`principal`].

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::Response;

use super::identity::{anonymous, principal, Principal, NODES_GROUP};
use super::refusal;
use super::reload::Reloadable;
use super::x509::ClientCert;
use crate::model::normalize_name;

pub use super::identity::ANONYMOUS;

/// The tokens of `--token-file`.
pub struct Tokens {
    entries: Vec<(Box<[u8]>, Principal)>,
}

impl std::fmt::Debug for Tokens {
    // Never print the secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokens")
            .field("count", &self.entries.len())
            .finish()
    }
}

impl Tokens {
    /// Reads a token file. Each line (`#` comments and blank lines aside) is
    /// `TOKEN` (an operator), `TOKEN,NODE` (user `system:node:NODE` in
    /// `system:nodes`), or kube-apiserver's `token,user,uid[,"group1,group2"]`
    /// with its groups. A `system:node:NAME` user is put in `system:nodes`
    /// even when the groups column leaves it out, as nodekeeper always took
    /// such a line for the node's token.
    pub fn load(path: impl AsRef<Path>) -> Result<Tokens, String> {
        let path = path.as_ref();
        // Read once at start-up, before the server runs.
        #[allow(clippy::disallowed_methods)]
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read --token-file {}: {e}", path.display()))?;
        Tokens::parse(&text, &path.display().to_string())
    }

    /// Parses the text of a token file; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Tokens, String> {
        let mut entries: Vec<(Box<[u8]>, Principal)> = Vec::new();
        let mut lines_of: Vec<usize> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let at = |reason: String| format!("--token-file {origin}, line {number}: {reason}");
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (token, user, groups) = parse_line(line).map_err(at)?;
            if let Some(first) = entries
                .iter()
                .position(|(known, _)| constant_time_eq(known, token.as_bytes()))
            {
                return Err(at(format!(
                    "the token of line {} again; each token must name one caller",
                    lines_of[first]
                )));
            }
            let user =
                user.unwrap_or_else(|| format!("operator (token of line {number} of {origin})"));
            entries.push((token.as_bytes().into(), principal(user, groups)));
            lines_of.push(number);
        }
        if entries.is_empty() {
            return Err(format!(
                "--token-file {origin} holds no tokens: no request could ever be authorized; add a line `TOKEN` or `TOKEN,NODE`"
            ));
        }
        Ok(Tokens { entries })
    }

    /// Who a token stands for. Every known token is compared, each in
    /// constant time, so the time taken says nothing about the secrets.
    pub fn principal(&self, token: &str) -> Option<&Principal> {
        let mut found = None;
        for (known, principal) in &self.entries {
            if constant_time_eq(known, token.as_bytes()) {
                found = Some(principal);
            }
        }
        found
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// One non-comment line: the token, the user it names (`None` for a plain
/// `TOKEN`, an operator) and the user's groups.
type Line = (String, Option<String>, Vec<String>);

fn parse_line(line: &str) -> Result<Line, String> {
    let mut fields = split_csv(line)?;
    let token = std::mem::take(&mut fields[0]);
    if token.is_empty() {
        return Err("the token (first field) is empty".into());
    }
    if let Some(bad) = token.chars().find(|c| !c.is_ascii_graphic()) {
        return Err(format!(
            "the token holds {bad:?}, which cannot travel in an Authorization header (printable ASCII only, no spaces)"
        ));
    }
    let node = |name: &str| normalize_name(name).map_err(|e| format!("bad node name: {e}"));
    let (user, mut groups) = match fields.as_slice() {
        [_] => (None, vec![]),
        [_, name] => (Some(format!("system:node:{}", node(name)?)), vec![]),
        // kube-apiserver's static token file: the uid does not matter here.
        [_, user, _uid, rest @ ..] => {
            if user.is_empty() {
                return Err("the user (second field) is empty".into());
            }
            if let Some(name) = user.strip_prefix("system:node:") {
                node(name)?;
            }
            let groups = match rest {
                [] => vec![],
                [groups] => groups
                    .split(',')
                    .map(str::trim)
                    .filter(|g| !g.is_empty())
                    .map(String::from)
                    .collect(),
                _ => {
                    return Err(
                        "more than four fields; quote the groups column: token,user,uid,\"group1,group2\""
                            .into(),
                    )
                }
            };
            (Some(user.clone()), groups)
        }
        [] => unreachable!("split_csv yields at least one field"),
    };
    if user
        .as_deref()
        .is_some_and(|u| u.starts_with("system:node:"))
        && !groups.iter().any(|g| g == NODES_GROUP)
    {
        groups.push(NODES_GROUP.into());
    }
    Ok((token, user, groups))
}

/// Splits a line on commas; a field may be double-quoted (kube-apiserver's
/// groups column), with `""` for a quote inside. Fields are trimmed.
fn split_csv(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut rest = line;
    loop {
        let trimmed = rest.trim_start();
        if let Some(quoted) = trimmed.strip_prefix('"') {
            // Find the closing quote, stepping over doubled ones.
            let bytes = quoted.as_bytes();
            let mut i = 0;
            let end = loop {
                match bytes.get(i) {
                    None => return Err("a quoted field is not closed".into()),
                    Some(b'"') if bytes.get(i + 1) == Some(&b'"') => i += 2,
                    Some(b'"') => break i,
                    Some(_) => i += 1,
                }
            };
            fields.push(quoted[..end].replace("\"\"", "\""));
            let after = quoted[end + 1..].trim_start();
            match after.strip_prefix(',') {
                Some(next) => rest = next,
                None if after.is_empty() => return Ok(fields),
                None => return Err("text after a closing quote".into()),
            }
        } else {
            match trimmed.split_once(',') {
                Some((field, next)) => {
                    fields.push(field.trim().to_string());
                    rest = next;
                }
                None => {
                    fields.push(trimmed.trim().to_string());
                    return Ok(fields);
                }
            }
        }
    }
}

/// Compares two byte strings in time that depends on their lengths only.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    // Keeps the optimizer from turning the loop into an early exit.
    std::hint::black_box(diff) == 0
}

/// How callers authenticate: the tokens of `--token-file` (re-read when
/// the file changes) and whether client certificates count
/// (`--client-ca-file`; the server verifies them once per connection and
/// notes the result on each request, `x509`). Without either, every caller
/// is anonymous and may do anything.
#[derive(Clone, Default)]
pub struct Authn {
    pub tokens: Option<Reloadable<Tokens>>,
    pub client_certs: bool,
    /// `--enable-bootstrap-token-auth`: the store whose bootstrap-token
    /// Secrets are tried for a bearer token not in `--token-file`.
    pub bootstrap: Option<Arc<crate::store::Store>>,
}

impl Authn {
    /// Who a bearer token stands for: a `--token-file` line, else a
    /// bootstrap token ([`super::bootstrap_tokens::authenticate`]). The
    /// guard asks it of a request's token, a TokenReview of the token it
    /// carries.
    pub(super) fn token(&self, token: &str) -> Option<Principal> {
        if let Some(tokens) = &self.tokens {
            if let Some(found) = tokens.current().principal(token) {
                return Some(found.clone());
            }
        }
        let store = self.bootstrap.as_ref()?;
        super::bootstrap_tokens::authenticate(store, token, crate::model::Micros::now())
    }

    /// Whether requests need credentials (health checks aside).
    pub fn required(&self) -> bool {
        self.tokens.is_some() || self.client_certs || self.bootstrap.is_some()
    }

    /// Whether a caller without credentials is served at `path` (`None`:
    /// a request that names no path): on an API that takes none, and for
    /// the health checks.
    pub(super) fn serves_anonymous(&self, path: Option<&str>) -> bool {
        !self.required() || path.is_some_and(super::limits::is_health_check)
    }
}

impl From<Option<Arc<Tokens>>> for Authn {
    fn from(tokens: Option<Arc<Tokens>>) -> Authn {
        Authn {
            tokens: tokens.map(Reloadable::from_arc),
            client_certs: false,
            bootstrap: None,
        }
    }
}

/// The auth middleware, for `axum::middleware::from_fn_with_state` with the
/// configured tokens (the server's own layer is [`super::harden_with`],
/// which does the same through [`identify`]).
pub async fn authenticate(
    State(tokens): State<Option<Arc<Tokens>>>,
    request: Request,
    next: Next,
) -> Response {
    match identify(&Authn::from(tokens), request) {
        Ok(request) => next.run(request).await,
        Err(refused) => refused,
    }
}

/// The user a request authenticated as, as a number shared by all of the
/// user's credentials. `None` for a request without any.
pub(super) fn user_of(request: &Request) -> Option<u64> {
    request.extensions().get::<Principal>()?.client()
}

/// Finds who is calling and notes it on the request (a [`Principal`]), as
/// kube-apiserver's union authenticator: a verified client certificate
/// with a CN first, then a bearer token. With credentials required, a
/// request with neither is refused (401), except the health checks
/// `/healthz`, `/livez` and `/readyz`, where it is anonymous; a token or a
/// certificate presented must be valid all the same, there too.
pub(super) fn identify(authn: &Authn, mut request: Request) -> Result<Request, Response> {
    let mut bad_cert = false;
    if authn.client_certs {
        match request.extensions().get::<ClientCert>() {
            Some(ClientCert::Verified(found)) => {
                let found = found.clone();
                request.extensions_mut().insert(found);
                return Ok(request);
            }
            Some(ClientCert::Invalid(why)) => {
                tracing::debug!("{why}");
                bad_cert = true;
            }
            Some(ClientCert::None) | None => {}
        }
    }
    let takes_tokens = authn.tokens.is_some() || authn.bootstrap.is_some();
    let found = match bearer_token(request.headers()) {
        Some(token) if takes_tokens => match authn.token(token) {
            Some(found) => found,
            None => return Err(unauthorized()),
        },
        _ if bad_cert => return Err(unauthorized()),
        _ if authn.serves_anonymous(Some(request.uri().path())) => anonymous(),
        _ => return Err(unauthorized()),
    };
    request.extensions_mut().insert(found);
    Ok(request)
}

/// The token of `Authorization: Bearer TOKEN` (the scheme in any case), if any.
fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The 401 kube-apiserver answers.
fn unauthorized() -> Response {
    let mut response = refusal(StatusCode::UNAUTHORIZED, "Unauthorized");
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::identity::{Caller, Identity};

    fn parse(text: &str) -> Result<Tokens, String> {
        Tokens::parse(text, "tokens.csv")
    }

    impl Tokens {
        fn caller(&self, token: &str) -> Option<Caller> {
            self.principal(token).map(|p| p.caller().clone())
        }

        fn identify(&self, token: &str) -> Option<(Caller, Identity)> {
            self.principal(token)
                .map(|p| (p.caller().clone(), Identity(p.user().name.clone())))
        }
    }

    #[test]
    fn every_line_format_and_comments() {
        let tokens = parse(
            "# operators\n\
             \n\
             op-secret\n\
             node-a-secret, edge-1\n\
             kube-secret,system:node:Edge-2,uid-2,\"system:nodes,other\"\n\
             admin-secret,admin,uid-3\n\
             \t  # indented comment\n\
             plain4,alice,uid-4,\"\"\n",
        )
        .unwrap();
        assert_eq!(tokens.len(), 5);
        assert_eq!(tokens.caller("op-secret"), Some(Caller::Operator));
        assert_eq!(
            tokens.caller("node-a-secret"),
            Some(Caller::Node("edge-1".into()))
        );
        // Node names are normalized as everywhere else.
        assert_eq!(
            tokens.caller("kube-secret"),
            Some(Caller::Node("edge-2".into()))
        );
        assert_eq!(tokens.caller("admin-secret"), Some(Caller::Operator));
        assert_eq!(tokens.caller("plain4"), Some(Caller::Operator));
        assert_eq!(tokens.caller("op-secre"), None);
        assert_eq!(tokens.caller("op-secret2"), None);
        assert_eq!(tokens.caller(""), None);
        assert_eq!(format!("{tokens:?}"), "Tokens { count: 5 }");
        let user = |t: &str| tokens.identify(t).map(|(_, Identity(u))| u);
        assert_eq!(
            user("op-secret").as_deref(),
            Some("operator (token of line 3 of tokens.csv)")
        );
        assert_eq!(user("node-a-secret").as_deref(), Some("system:node:edge-1"));
        assert_eq!(user("kube-secret").as_deref(), Some("system:node:Edge-2"));
        assert_eq!(user("admin-secret").as_deref(), Some("admin"));
    }

    #[test]
    fn the_groups_column_is_honoured() {
        let tokens = parse(
            "b,system:bootstrap:abcdef,uid-1,\"system:bootstrappers,system:bootstrappers:site\"\n\
             k,system:node:edge-3,uid-2\n\
             n,edge-4\n\
             a,alice,uid-3,admins\n",
        )
        .unwrap();
        let user = |t: &str| tokens.principal(t).unwrap().user().clone();
        assert_eq!(
            user("b").groups,
            [
                "system:bootstrappers",
                "system:bootstrappers:site",
                "system:authenticated"
            ]
        );
        assert_eq!(tokens.caller("b"), Some(Caller::Limited));
        // A node's user is in system:nodes, the column said so or not.
        assert_eq!(user("k").groups, ["system:nodes", "system:authenticated"]);
        assert_eq!(tokens.caller("k"), Some(Caller::Node("edge-3".into())));
        assert_eq!(user("n").name, "system:node:edge-4");
        assert_eq!(user("n").groups, ["system:nodes", "system:authenticated"]);
        assert_eq!(user("a").groups, ["admins", "system:authenticated"]);
        let e = parse("t,u,uid,g1,g2\n").map(|_| ()).unwrap_err();
        assert!(e.contains("quote the groups column"), "{e}");
    }

    #[test]
    fn bad_lines_are_named_by_file_and_number() {
        let cases = [
            ("ok\n,edge-1\n", "line 2", "token (first field) is empty"),
            ("ok\n\n# c\nsp ace\n", "line 4", "cannot travel"),
            ("tok,Not_A_Node\n", "line 1", "bad node name"),
            ("tok,,uid\n", "line 1", "user (second field) is empty"),
            ("tok,system:node:,uid\n", "line 1", "bad node name"),
            ("tok,u,uid,\"a,b\n", "line 1", "not closed"),
            ("tok,u,uid,\"a\"b\n", "line 1", "after a closing quote"),
            ("a\nb,edge-1\n a \n", "line 3", "the token of line 1 again"),
        ];
        for (text, line, reason) in cases {
            let e = parse(text).map(|_| ()).unwrap_err();
            assert!(
                e.starts_with(&format!("--token-file tokens.csv, {line}: ")) && e.contains(reason),
                "{text:?}: {e}"
            );
        }
        let e = parse("# nothing\n\n").unwrap_err();
        assert!(e.contains("holds no tokens"), "{e}");
        let e = Tokens::load("/nonexistent/tokens.csv").unwrap_err();
        assert!(
            e.starts_with("cannot read --token-file /nonexistent/tokens.csv"),
            "{e}"
        );
    }

    #[test]
    fn csv_fields_and_quotes() {
        assert_eq!(split_csv("a").unwrap(), ["a"]);
        assert_eq!(split_csv(" a , b ").unwrap(), ["a", "b"]);
        assert_eq!(
            split_csv(r#"t,u,id,"g1,g2""#).unwrap(),
            ["t", "u", "id", "g1,g2"]
        );
        assert_eq!(
            split_csv(r#""say ""hi""",x"#).unwrap(),
            [r#"say "hi""#, "x"]
        );
        assert_eq!(split_csv("a,").unwrap(), ["a", ""]);
    }

    #[test]
    fn constant_time_compare() {
        assert!(constant_time_eq(b"", b""));
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"Secret"));
        assert!(!constant_time_eq(b"secret", b"secret!"));
        assert!(!constant_time_eq(b"secret", b""));
    }

    #[test]
    fn bearer_header_parsing() {
        let with = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            bearer_token(&h).map(str::to_string)
        };
        assert_eq!(with("Bearer abc"), Some("abc".into()));
        assert_eq!(with("bearer  abc "), Some("abc".into()));
        assert_eq!(with("Basic abc"), None);
        assert_eq!(with("Bearer "), None);
        assert_eq!(with("Bearer"), None);
        assert_eq!(bearer_token(&HeaderMap::new()), None);
    }
}
