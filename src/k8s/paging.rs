//! `limit` and `continue`: list pages with the API server's opaque continue token.
//!
//! The token is what kube-apiserver hands out: unpadded base64url of
//! `{"v":"meta.k8s.io/v1","rv":N,"start":"KEY"}`, where `start` is the last
//! key served plus `"\u0000"` (the smallest key after it). There is no
//! snapshot behind it: the next page is read from the registry as it is
//! then, from `start` on, and carries the first page's resourceVersion. A
//! token that does not decode is a 400 BadRequest `invalid continue token`,
//! the API server's answer to a malformed one (410 Expired is for compacted
//! snapshots, which we do not keep).

use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde::{Deserialize, Serialize};

const TOKEN_VERSION: &str = "meta.k8s.io/v1";

/// Where the next page starts, and the resourceVersion of the first page.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContinueToken {
    #[serde(rename = "v")]
    version: String,
    pub rv: u64,
    pub start: String,
}

impl ContinueToken {
    /// The token for a page that ended with `last_key`.
    pub fn after(rv: u64, last_key: &str) -> ContinueToken {
        ContinueToken {
            version: TOKEN_VERSION.to_string(),
            rv,
            start: format!("{last_key}\u{0}"),
        }
    }

    pub fn encode(&self) -> String {
        // Serializing a struct of strings and a number cannot fail.
        let json = serde_json::to_vec(self).unwrap_or_default();
        base64url_encode(&json)
    }

    /// Decodes a client's token; the error is the API server's message.
    pub fn decode(token: &str) -> Result<ContinueToken, InvalidContinueToken> {
        let invalid = InvalidContinueToken;
        let json = base64url_decode(token).ok_or_else(|| invalid("not base64url".into()))?;
        let t: ContinueToken = serde_json::from_slice(&json).map_err(|e| invalid(e.to_string()))?;
        if t.version != TOKEN_VERSION {
            return Err(invalid(format!(
                "server does not recognize this encoded version {:?}",
                t.version
            )));
        }
        if t.rv == 0 {
            return Err(invalid(
                "incorrect encoded start resourceVersion (version meta.k8s.io/v1)".into(),
            ));
        }
        if t.start.is_empty() {
            return Err(invalid(
                "encoded start key empty (version meta.k8s.io/v1)".into(),
            ));
        }
        Ok(t)
    }
}

/// A `continue` token this server did not issue, or cannot read: why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid continue token: continue key is not valid: {0}")]
pub struct InvalidContinueToken(pub String);

/// One page of a list: where it lies in the items, and its metadata.
#[derive(Debug)]
pub struct Page {
    pub range: std::ops::Range<usize>,
    pub metadata: ListMeta,
}

/// Cuts a page from `items`, sorted by `key` (and already filtered).
/// `continue_from` is a decoded token; `rv` the registry's resourceVersion
/// now. `count_remaining` follows the API server, which reports
/// `remainingItemCount` only for lists without selectors.
pub fn page<T>(
    items: &[T],
    key: impl Fn(&T) -> &str,
    limit: Option<i64>,
    continue_from: Option<&ContinueToken>,
    rv: u64,
    count_remaining: bool,
) -> Page {
    let rv = continue_from.map_or(rv, |t| t.rv);
    let start = match continue_from {
        Some(t) => items.partition_point(|item| key(item) < t.start.as_str()),
        None => 0,
    };
    let mut metadata = super::at_version(rv);
    let rest = items.len() - start;
    // A limit of zero or less means no limit, as in Kubernetes.
    let limit = limit.filter(|&l| l > 0).map(|l| l as usize);
    let end = match limit.filter(|&l| l < rest) {
        Some(limit) => {
            let end = start + limit;
            metadata.continue_ = Some(ContinueToken::after(rv, key(&items[end - 1])).encode());
            if count_remaining {
                metadata.remaining_item_count = Some((items.len() - end) as i64);
            }
            end
        }
        None => items.len(),
    };
    Page {
        range: start..end,
        metadata,
    }
}

/// Unpadded base64url, Go's `base64.RawURLEncoding`, as kube-apiserver encodes tokens.
const TOKEN_BASE64: base64::engine::GeneralPurpose =
    base64::engine::general_purpose::URL_SAFE_NO_PAD;

fn base64url_encode(bytes: &[u8]) -> String {
    TOKEN_BASE64.encode(bytes)
}

fn base64url_decode(s: &str) -> Option<Vec<u8>> {
    TOKEN_BASE64.decode(s).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64url_matches_go_raw_url_encoding() {
        assert_eq!(base64url_encode(b""), "");
        assert_eq!(base64url_encode(b"f"), "Zg");
        assert_eq!(base64url_encode(b"fo"), "Zm8");
        assert_eq!(base64url_encode(b"foo"), "Zm9v");
        assert_eq!(base64url_encode(&[0xfb, 0xff]), "-_8");
        for len in 0..20 {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 37 + 11) as u8).collect();
            assert_eq!(base64url_decode(&base64url_encode(&bytes)), Some(bytes));
        }
        assert_eq!(base64url_decode("Zm9v+"), None);
        assert_eq!(base64url_decode("Z"), None);
        // Unpadded, as Go's RawURLEncoding: padding is refused.
        assert_eq!(base64url_decode("Zg=="), None);
        assert_eq!(base64url_decode("Zg"), Some(b"f".to_vec()));
    }

    #[test]
    fn continue_token_round_trip() {
        let t = ContinueToken::after(42, "edge-3");
        let encoded = t.encode();
        assert!(encoded
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
        assert_eq!(ContinueToken::decode(&encoded), Ok(t.clone()));
        // The same JSON the API server encodes.
        let json = base64url_decode(&encoded).unwrap();
        assert_eq!(
            String::from_utf8(json).unwrap(),
            r#"{"v":"meta.k8s.io/v1","rv":42,"start":"edge-3\u0000"}"#
        );
    }

    #[test]
    fn malformed_tokens_are_refused() {
        for bad in [
            "!!",
            "Zm9v",
            &base64url_encode(br#"{"v":"x","rv":1,"start":"a"}"#),
        ] {
            let e = ContinueToken::decode(bad).unwrap_err();
            assert!(e.to_string().starts_with("invalid continue token: "), "{e}");
        }
        let zero = base64url_encode(br#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#);
        assert!(ContinueToken::decode(&zero)
            .unwrap_err()
            .0
            .contains("resourceVersion"));
    }

    /// A page of `names`, which are their own keys.
    fn page_of<'a>(
        names: &[&'a str],
        limit: Option<i64>,
        token: Option<&ContinueToken>,
        rv: u64,
        count: bool,
    ) -> (Vec<&'a str>, ListMeta) {
        let p = page(names, |n| n, limit, token, rv, count);
        (names[p.range].to_vec(), p.metadata)
    }

    #[test]
    fn pages_walk_the_list_once() {
        let names = ["a", "b", "c", "d", "e"];
        let mut seen = Vec::new();
        let mut token: Option<ContinueToken> = None;
        let mut pages = 0;
        loop {
            let (items, metadata) = page_of(&names, Some(2), token.as_ref(), 9, true);
            pages += 1;
            assert_eq!(metadata.resource_version.as_deref(), Some("9"));
            seen.extend(items);
            match metadata.continue_ {
                Some(c) => {
                    let left = names.len() - seen.len();
                    assert_eq!(metadata.remaining_item_count, Some(left as i64));
                    token = Some(ContinueToken::decode(&c).unwrap());
                }
                None => {
                    assert_eq!(metadata.remaining_item_count, None);
                    break;
                }
            }
        }
        assert_eq!(seen, names);
        assert_eq!(pages, 3);
    }

    #[test]
    fn continued_pages_keep_the_first_resource_version_and_skip_nothing_new() {
        let (_, first) = page_of(&["a", "c", "e"], Some(1), None, 5, false);
        assert_eq!(first.remaining_item_count, None);
        let token = ContinueToken::decode(&first.continue_.unwrap()).unwrap();
        // "b" was added after the first page: it sorts after "a", so it is served.
        let (items, second) = page_of(&["a", "b", "c", "e"], Some(10), Some(&token), 7, false);
        assert_eq!(items, ["b", "c", "e"]);
        assert_eq!(second.resource_version.as_deref(), Some("5"));
        assert_eq!(second.continue_, None);
    }

    #[test]
    fn no_limit_or_a_large_one_is_one_page() {
        for limit in [None, Some(0), Some(-1), Some(3), Some(500)] {
            let (items, metadata) = page_of(&["a", "b", "c"], limit, None, 1, true);
            assert_eq!(items.len(), 3);
            assert_eq!(metadata.continue_, None);
            assert_eq!(metadata.remaining_item_count, None);
        }
    }
}

/// Continue tokens from clients: no panic, the API server's message for a
/// bad one, and every token we hand out reads back.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn arbitrary_tokens_never_panic(s in "\\PC{0,80}", t in "[A-Za-z0-9_-]{0,120}") {
            for token in [&s, &t] {
                if let Err(e) = ContinueToken::decode(token) {
                    prop_assert!(e.to_string().starts_with("invalid continue token: "), "{e}");
                }
            }
        }

        #[test]
        fn encoded_json_of_any_shape_is_refused_or_read(json in "\\PC{0,80}") {
            let _ = ContinueToken::decode(&base64url_encode(json.as_bytes()));
        }

        #[test]
        fn tokens_read_back(rv in 1u64.., key in "\\PC{0,40}") {
            let t = ContinueToken::after(rv, &key);
            prop_assert_eq!(ContinueToken::decode(&t.encode()), Ok(t));
        }

        #[test]
        fn base64url_reads_back(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
            prop_assert_eq!(base64url_decode(&base64url_encode(&bytes)), Some(bytes));
        }

        #[test]
        fn pages_walk_every_item_once(
            names in prop::collection::btree_set("[a-z0-9.-]{1,8}", 0..40),
            limit in -2i64..12,
        ) {
            let names: Vec<String> = names.into_iter().collect();
            let mut seen = Vec::new();
            let mut token = None;
            for _ in 0..=names.len() + 1 {
                let p = page(&names, String::as_str, Some(limit), token.as_ref(), 7, true);
                seen.extend(names[p.range].iter().cloned());
                match p.metadata.continue_ {
                    Some(c) => token = Some(ContinueToken::decode(&c).map_err(|e| TestCaseError::fail(e.to_string()))?),
                    None => break,
                }
            }
            prop_assert_eq!(seen, names);
        }
    }
}
