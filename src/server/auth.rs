//! Bearer tokens from `--token-file`: who may call the API at all, and which
//! node a caller may change.

use std::path::Path;
use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::status_error;
use crate::model::normalize_name;

/// Who made a request, as the auth layer found it (a request extension).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// No token was presented: no `--token-file` is configured (everything
    /// is allowed), or the request is a health check.
    Anonymous,
    /// A token bound to no node: may change any node.
    Operator,
    /// A token bound to this node: may change only it.
    Node(String),
}

/// Who made a request, by name, for the history (a request extension):
/// the token's user (`system:node:NAME` for a node's token), or
/// `system:anonymous` without one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity(pub String);

/// The name kube-apiserver gives callers without a token.
pub const ANONYMOUS: &str = "system:anonymous";

/// The tokens of `--token-file`.
pub struct Tokens {
    entries: Vec<(Box<[u8]>, Caller)>,
    /// Who each entry is, by the same index.
    users: Vec<String>,
    /// Each entry's client, for the request budgets' fairness: the index of
    /// the first entry for the same user.
    clients: Vec<u32>,
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
    /// `TOKEN` (an operator), `TOKEN,NODE` (bound to a node), or
    /// kube-apiserver's `token,user,uid[,"group1,group2"]`, where user
    /// `system:node:NAME` is bound to NAME and any other user is an operator.
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
        let mut entries: Vec<(Box<[u8]>, Caller)> = Vec::new();
        let mut users: Vec<String> = Vec::new();
        let mut lines_of: Vec<usize> = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let number = index + 1;
            let at = |reason: String| format!("--token-file {origin}, line {number}: {reason}");
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (token, caller, user) = parse_line(line).map_err(at)?;
            if let Some(first) = entries
                .iter()
                .position(|(known, _)| constant_time_eq(known, token.as_bytes()))
            {
                return Err(at(format!(
                    "the token of line {} again; each token must name one caller",
                    lines_of[first]
                )));
            }
            users.push(match (user, &caller) {
                (Some(user), _) => user,
                (None, Caller::Node(name)) => format!("system:node:{name}"),
                (None, _) => format!("operator (token of line {number} of {origin})"),
            });
            entries.push((token.as_bytes().into(), caller));
            lines_of.push(number);
        }
        if entries.is_empty() {
            return Err(format!(
                "--token-file {origin} holds no tokens: no request could ever be authorized; add a line `TOKEN` or `TOKEN,NODE`"
            ));
        }
        let mut first: std::collections::HashMap<&str, u32> = Default::default();
        let clients = users
            .iter()
            .enumerate()
            .map(|(i, user)| *first.entry(user.as_str()).or_insert(i as u32))
            .collect();
        Ok(Tokens {
            entries,
            users,
            clients,
        })
    }

    /// The caller a token stands for. Every known token is compared, each in
    /// constant time, so the time taken says nothing about the secrets.
    pub fn caller(&self, token: &str) -> Option<Caller> {
        self.identify(token).map(|(caller, _)| caller)
    }

    /// The caller a token stands for, and its name.
    pub fn identify(&self, token: &str) -> Option<(Caller, Identity)> {
        self.position(token)
            .map(|i| (self.entries[i].1.clone(), Identity(self.users[i].clone())))
    }

    /// The index of a token's entry, every known token compared.
    fn position(&self, token: &str) -> Option<usize> {
        let mut found = None;
        for (i, (known, _)) in self.entries.iter().enumerate() {
            if constant_time_eq(known, token.as_bytes()) {
                found = Some(i);
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

/// One non-comment line: the token, who it stands for, and the user it names.
fn parse_line(line: &str) -> Result<(String, Caller, Option<String>), String> {
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
    let node = |name: &str| {
        normalize_name(name)
            .map(Caller::Node)
            .map_err(|e| format!("bad node name: {e}"))
    };
    let (caller, user) = match fields.as_slice() {
        [_] => (Caller::Operator, None),
        [_, name] => (node(name)?, None),
        // kube-apiserver's static token file; uid and groups do not matter here.
        [_, user, _uid, ..] => match user.strip_prefix("system:node:") {
            _ if user.is_empty() => return Err("the user (second field) is empty".into()),
            Some(name) => (node(name)?, Some(user.clone())),
            None => (Caller::Operator, Some(user.clone())),
        },
        [] => unreachable!("split_csv yields at least one field"),
    };
    Ok((token, caller, user))
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
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
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

/// The auth middleware, for `axum::middleware::from_fn_with_state` with the
/// configured tokens (the server's own layer is [`super::harden_with`],
/// which does the same through [`identify`]).
pub async fn authenticate(
    State(tokens): State<Option<Arc<Tokens>>>,
    request: Request,
    next: Next,
) -> Response {
    match identify(tokens.as_ref(), request) {
        Ok(request) => next.run(request).await,
        Err(refused) => refused,
    }
}

/// Who a request comes from, as [`identify`] found it: one request
/// extension, from which the [`Caller`] and [`Identity`] extractors make
/// their values only when a handler asks (most heartbeats need the caller
/// alone, and an anonymous one costs no copy).
#[derive(Clone)]
enum Authenticated {
    Anonymous,
    /// The entry of `--token-file` the request's token matched.
    Token(Arc<Tokens>, usize),
}

impl Authenticated {
    fn caller(&self) -> Caller {
        match self {
            Authenticated::Anonymous => Caller::Anonymous,
            Authenticated::Token(tokens, i) => tokens.entries[*i].1.clone(),
        }
    }

    fn identity(&self) -> Identity {
        match self {
            Authenticated::Anonymous => Identity(ANONYMOUS.into()),
            Authenticated::Token(tokens, i) => Identity(tokens.users[*i].clone()),
        }
    }
}

/// The user a request's token names, as a number: the index of the first
/// entry of `--token-file` for that user (so a user's several tokens are
/// one client). `None` for a request without a token.
pub(super) fn user_of(request: &Request) -> Option<u64> {
    match request.extensions().get::<Authenticated>()? {
        Authenticated::Anonymous => None,
        Authenticated::Token(tokens, i) => Some(u64::from(tokens.clients[*i])),
    }
}

/// Finds who is calling and notes it on the request. Without tokens every
/// caller is [`Caller::Anonymous`]. With tokens, every request needs
/// `Authorization: Bearer TOKEN` (reads and watches too, as kube-apiserver
/// without anonymous auth), except the health checks `/healthz`, `/livez`
/// and `/readyz`; a token presented there must be valid all the same.
// The refusal is a ready 401, built once per refused request.
#[allow(clippy::result_large_err)]
pub(super) fn identify(
    tokens: Option<&Arc<Tokens>>,
    mut request: Request,
) -> Result<Request, Response> {
    let found = match tokens {
        None => Authenticated::Anonymous,
        Some(tokens) => match bearer_token(request.headers()) {
            Some(token) => match tokens.position(token) {
                Some(i) => Authenticated::Token(tokens.clone(), i),
                None => return Err(unauthorized()),
            },
            None if super::limits::is_health_check(request.uri().path()) => {
                Authenticated::Anonymous
            }
            None => return Err(unauthorized()),
        },
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
    let mut response = status_error(
        StatusCode::UNAUTHORIZED,
        "Unauthorized",
        "Unauthorized".into(),
    );
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Lets a node's token change only that node; operators and (without
/// `--token-file`) anonymous callers may change any. Otherwise the 403 of
/// kube-apiserver's NodeRestriction.
// Response as the error so handlers can `?` it straight into their answer.
#[allow(clippy::result_large_err)]
pub fn check_may_write_node(caller: &Caller, node: &str) -> Result<(), Response> {
    match caller {
        Caller::Anonymous | Caller::Operator => Ok(()),
        Caller::Node(own) if own == node => Ok(()),
        Caller::Node(own) => {
            let body = crate::kube::status_error(
                403,
                "Forbidden",
                &format!("nodes {node:?} is forbidden: node {own:?} cannot modify node {node:?}"),
                Some(node),
                Some("nodes"),
            );
            Err((StatusCode::FORBIDDEN, axum::Json(body)).into_response())
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Identity {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Identity, Response> {
        let found = parts.extensions.get::<Authenticated>();
        found.map(Authenticated::identity).ok_or_else(|| {
            super::internal("the caller is unknown: the auth layer is not installed on this route")
        })
    }
}

/// Handlers take `caller: Caller`. A router without the auth layer is a bug:
/// refuse rather than guess who is calling.
impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Caller, Response> {
        let found = parts.extensions.get::<Authenticated>();
        found.map(Authenticated::caller).ok_or_else(|| {
            super::internal("the caller is unknown: the auth layer is not installed on this route")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Tokens, String> {
        Tokens::parse(text, "tokens.csv")
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

    #[test]
    fn nodes_change_only_themselves() {
        assert!(check_may_write_node(&Caller::Anonymous, "b").is_ok());
        assert!(check_may_write_node(&Caller::Operator, "b").is_ok());
        assert!(check_may_write_node(&Caller::Node("b".into()), "b").is_ok());
        let refused = check_may_write_node(&Caller::Node("a".into()), "b").unwrap_err();
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
    }
}
