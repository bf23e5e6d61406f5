//! `/livez`, `/readyz` and `/healthz`, answered the way Kubernetes
//! components answer them: `ok`, or with `?verbose` one line per check
//! (`[+]ping ok`, `[-]probe-sweep failed: reason`); `?exclude=NAME` leaves a
//! check out; 200 when every check passes, 500 otherwise. `/livez/NAME` and
//! `/readyz/NAME` run one check.

use axum::extract::{Path, RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};

use super::AppState;
use crate::readiness::{CheckResult, Checks};

pub(crate) async fn livez(State(s): State<AppState>, RawQuery(query): RawQuery) -> Response {
    answer("livez", &s.health.live, query.as_deref())
}

pub(crate) async fn readyz(State(s): State<AppState>, RawQuery(query): RawQuery) -> Response {
    answer("readyz", &s.health.ready, query.as_deref())
}

/// `/healthz`: kept for older clients; the liveness checks.
pub(crate) async fn healthz(State(s): State<AppState>, RawQuery(query): RawQuery) -> Response {
    answer("healthz", &s.health.live, query.as_deref())
}

pub(crate) async fn livez_check(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    one_check(&s.health.live, &name)
}

pub(crate) async fn readyz_check(State(s): State<AppState>, Path(name): Path<String>) -> Response {
    one_check(&s.health.ready, &name)
}

/// Plain text (the guard adds `nosniff`, as to every answer).
fn text(code: StatusCode, body: String) -> Response {
    let content_type = [(header::CONTENT_TYPE, "text/plain; charset=utf-8")];
    (code, content_type, body).into_response()
}

/// Reasons go on one line each, as the listing has one check a line.
fn one_line(reason: &str) -> String {
    reason.replace(['\r', '\n'], " ")
}

fn answer(endpoint: &str, checks: &Checks, query: Option<&str>) -> Response {
    let mut verbose = false;
    let mut excluded: Vec<String> = Vec::new();
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match &*key {
            "verbose" => verbose = true,
            "exclude" => excluded.push(value.into_owned()),
            _ => {}
        }
    }
    let (listing, failed) = render(&checks.results(), &mut excluded);
    if failed {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("{listing}{endpoint} check failed\n"),
        );
    }
    if !verbose {
        return text(StatusCode::OK, "ok".into());
    }
    text(
        StatusCode::OK,
        format!("{listing}{endpoint} check passed\n"),
    )
}

/// The per-check lines, and whether any check that counts failed.
/// `excluded` is left holding the names that matched no check.
fn render(results: &[CheckResult], excluded: &mut Vec<String>) -> (String, bool) {
    let mut listing = String::new();
    let mut failed = false;
    for result in results {
        if let Some(at) = excluded.iter().position(|e| *e == result.name) {
            excluded.remove(at);
            listing.push_str(&format!("[+]{} excluded: ok\n", result.name));
            continue;
        }
        match &result.verdict {
            Ok(()) => listing.push_str(&format!("[+]{} ok\n", result.name)),
            Err(reason) => {
                failed = true;
                listing.push_str(&format!(
                    "[-]{} failed: {}\n",
                    result.name,
                    one_line(reason)
                ));
            }
        }
    }
    if !excluded.is_empty() {
        let names: Vec<String> = excluded.iter().map(|e| format!("{e:?}")).collect();
        listing.push_str(&format!(
            "warn: some health checks cannot be excluded: no matches for {}\n",
            names.join(",")
        ));
    }
    (listing, failed)
}

fn one_check(checks: &Checks, name: &str) -> Response {
    match checks.results().into_iter().find(|r| r.name == name) {
        None => text(
            StatusCode::NOT_FOUND,
            format!(
                "no health check named {name:?}; there are: {}\n",
                checks.names().join(", ")
            ),
        ),
        Some(CheckResult {
            verdict: Ok(()), ..
        }) => text(StatusCode::OK, "ok".into()),
        Some(CheckResult {
            verdict: Err(reason),
            ..
        }) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("internal server error: {}\n", one_line(&reason)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    async fn body(response: Response) -> (u16, String) {
        let code = response.status().as_u16();
        let bytes = response.into_body().collect().await.unwrap().to_bytes();
        (code, String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn checks() -> (Checks, crate::readiness::Check) {
        let checks = Checks::default();
        checks.register_computed("ping", || Ok(()));
        let store = checks.register("store");
        (checks, store)
    }

    #[tokio::test]
    async fn answers_like_kubernetes_components() {
        let (checks, store) = checks();
        assert_eq!(
            body(answer("readyz", &checks, None)).await,
            (200, "ok".into())
        );
        assert_eq!(
            body(answer("readyz", &checks, Some("verbose"))).await,
            (200, "[+]ping ok\n[+]store ok\nreadyz check passed\n".into())
        );
        store.fail("cannot flush: No space left on device\n(os error 28)");
        // A failure is always listed in full.
        assert_eq!(
            body(answer("readyz", &checks, None)).await,
            (
                500,
                "[+]ping ok\n[-]store failed: cannot flush: No space left on device (os error 28)\nreadyz check failed\n"
                    .into()
            )
        );
        assert_eq!(
            body(answer("readyz", &checks, Some("exclude=store&exclude=nope&verbose=1"))).await,
            (
                200,
                "[+]ping ok\n[+]store excluded: ok\nwarn: some health checks cannot be excluded: no matches for \"nope\"\nreadyz check passed\n"
                    .into()
            )
        );
        assert_eq!(
            body(one_check(&checks, "store")).await,
            (
                500,
                "internal server error: cannot flush: No space left on device (os error 28)\n"
                    .into()
            )
        );
        assert_eq!(body(one_check(&checks, "ping")).await, (200, "ok".into()));
        let (code, text) = body(one_check(&checks, "nope")).await;
        assert_eq!(code, 404);
        assert!(text.contains("ping, store"), "{text}");
        let response = answer("livez", &checks, None);
        assert_eq!(
            response.headers()[header::CONTENT_TYPE],
            "text/plain; charset=utf-8"
        );
    }
}
