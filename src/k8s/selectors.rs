//! `labelSelector` and `fieldSelector` as the Kubernetes API server parses and matches them.
//!
//! The grammar follows k8s.io/apimachinery's `labels.Parse` and
//! `fields.ParseSelector`, so a selector kubectl accepts means the same here.

use std::collections::BTreeMap;

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: LabelOp,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum LabelOp {
    Equals(String),
    NotEquals(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    GreaterThan(i64),
    LessThan(i64),
}

/// Why a `labelSelector` could not be parsed: what was wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unable to parse label selector {selector:?}: {problem}")]
pub struct LabelSelectorError {
    pub selector: String,
    /// The character offset in `selector` of the token the parser stopped at
    /// (the selector's length when it ended too soon).
    pub position: usize,
    pub problem: LabelProblem,
}

/// What was wrong in a `labelSelector`. `found` describes the token met
/// (`'b'`, `','`, `end of string`), as the API server's messages do.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LabelProblem {
    #[error("found {found}, expected: a label key")]
    ExpectedKey { found: String },
    #[error("found {found}, expected: ',' or end of string")]
    ExpectedSeparator { found: String },
    #[error("found {found} after {key:?}, expected one of: =, ==, !=, in, notin, >, <")]
    ExpectedOperator { key: String, found: String },
    #[error("found {found} as the value of {key:?}, expected: a label value")]
    ExpectedValue { key: String, found: String },
    #[error("found {found} after the operator of {key:?}, expected: '('")]
    ExpectedOpenParen { key: String, found: String },
    #[error("found {found} in the values of {key:?}, expected: a label value, ',' or ')'")]
    ExpectedSetValue { key: String, found: String },
    #[error("found {found} in the values of {key:?}, expected: ',' or ')'")]
    ExpectedSetSeparator { key: String, found: String },
    #[error("found {found} after '>' or '<' for {key:?}, expected: an integer")]
    ExpectedInteger { key: String, found: String },
    #[error("{value:?} compared with {key:?} is not an integer, as '>' and '<' require")]
    NotAnInteger { key: String, value: String },
    #[error("invalid label key {key:?}: the prefix {prefix:?} must be a lowercase DNS subdomain such as example.com")]
    KeyPrefix { key: String, prefix: String },
    #[error("invalid label key {key:?}: the name part must be at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric")]
    KeyName { key: String },
    #[error("invalid value {value:?} for label {key:?}: at most 63 alphanumerics, '-', '_' or '.', starting and ending with an alphanumeric")]
    Value { key: String, value: String },
}

impl LabelSelector {
    /// Parses a selector such as `app=web,tier in (a,b),!legacy`. The error
    /// names the part that could not be understood, and where it is.
    pub fn parse(selector: &str) -> Result<LabelSelector, LabelSelectorError> {
        let mut parser = Parser::new(selector);
        parser.parse().map_err(|problem| LabelSelectorError {
            selector: selector.to_string(),
            position: parser.position(),
            problem,
        })
    }

    /// True when the selector has no requirements (it matches everything).
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object with these labels is selected.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements.iter().all(|r| {
            let value = labels.get(&r.key);
            match &r.op {
                LabelOp::Equals(v) => value == Some(v),
                // As in Kubernetes: an absent key satisfies `!=` and `notin`.
                LabelOp::NotEquals(v) => value != Some(v),
                LabelOp::In(set) => value.is_some_and(|v| set.contains(v)),
                LabelOp::NotIn(set) => value.is_none_or(|v| !set.contains(v)),
                LabelOp::Exists => value.is_some(),
                LabelOp::DoesNotExist => value.is_none(),
                LabelOp::GreaterThan(n) => value
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                LabelOp::LessThan(n) => value
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Token {
    Identifier(String),
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    OpenParen,
    CloseParen,
    Comma,
    Greater,
    Less,
    End,
}

impl Token {
    fn describe(&self) -> String {
        match self {
            Token::Identifier(s) => format!("'{s}'"),
            Token::Bang => "'!'".into(),
            Token::Equals => "'='".into(),
            Token::DoubleEquals => "'=='".into(),
            Token::NotEquals => "'!='".into(),
            Token::In => "'in'".into(),
            Token::NotIn => "'notin'".into(),
            Token::OpenParen => "'('".into(),
            Token::CloseParen => "')'".into(),
            Token::Comma => "','".into(),
            Token::Greater => "'>'".into(),
            Token::Less => "'<'".into(),
            Token::End => "end of string".into(),
        }
    }
}

/// Splits a label selector into tokens, each with its character offset, as
/// apimachinery's lexer does: identifiers run until whitespace or one of `!=(),<>`.
fn tokenize(s: &str) -> Vec<(Token, usize)> {
    const SPECIAL: &[char] = &['!', '=', '(', ')', ',', '<', '>'];
    let chars: Vec<char> = s.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
            continue;
        }
        let (token, len) = match (c, next) {
            ('!', Some('=')) => (Token::NotEquals, 2),
            ('!', _) => (Token::Bang, 1),
            ('=', Some('=')) => (Token::DoubleEquals, 2),
            ('=', _) => (Token::Equals, 1),
            ('(', _) => (Token::OpenParen, 1),
            (')', _) => (Token::CloseParen, 1),
            (',', _) => (Token::Comma, 1),
            ('>', _) => (Token::Greater, 1),
            ('<', _) => (Token::Less, 1),
            _ => {
                let start = i;
                while i < chars.len() && !chars[i].is_whitespace() && !SPECIAL.contains(&chars[i]) {
                    i += 1;
                }
                let word: String = chars[start..i].iter().collect();
                let token = match word.as_str() {
                    "in" => Token::In,
                    "notin" => Token::NotIn,
                    _ => Token::Identifier(word),
                };
                tokens.push((token, start));
                continue;
            }
        };
        tokens.push((token, i));
        i += len;
    }
    tokens.push((Token::End, chars.len()));
    tokens
}

struct Parser {
    tokens: Vec<(Token, usize)>,
    at: usize,
    /// Where the token last taken starts.
    taken_at: usize,
}

impl Parser {
    fn new(s: &str) -> Parser {
        Parser {
            tokens: tokenize(s),
            at: 0,
            taken_at: 0,
        }
    }

    /// Where the parser stopped: the start of the token it took last.
    fn position(&self) -> usize {
        self.taken_at
    }

    fn peek(&self) -> &Token {
        self.tokens.get(self.at).map_or(&Token::End, |(t, _)| t)
    }

    fn next(&mut self) -> Token {
        let t = self.peek().clone();
        if let Some((_, at)) = self.tokens.get(self.at) {
            self.taken_at = *at;
            self.at += 1;
        }
        t
    }

    /// `in` and `notin` are keywords only where an operator is expected;
    /// elsewhere (keys, values) they are plain words.
    fn next_word(&mut self) -> Token {
        match self.next() {
            Token::In => Token::Identifier("in".into()),
            Token::NotIn => Token::Identifier("notin".into()),
            t => t,
        }
    }

    fn parse(&mut self) -> Result<LabelSelector, LabelProblem> {
        let mut requirements = Vec::new();
        loop {
            match self.peek() {
                Token::End => break,
                Token::Identifier(_) | Token::Bang | Token::In | Token::NotIn => {
                    requirements.push(self.requirement()?);
                    match self.next() {
                        // A comma is followed by another requirement (`a=b,` is
                        // refused, as apimachinery's `Parser.parse` does).
                        Token::Comma if *self.peek() == Token::End => {
                            let t = self.next();
                            return Err(LabelProblem::ExpectedKey {
                                found: t.describe(),
                            });
                        }
                        Token::Comma => continue,
                        Token::End => break,
                        t => {
                            return Err(LabelProblem::ExpectedSeparator {
                                found: t.describe(),
                            })
                        }
                    }
                }
                _ => {
                    let t = self.next();
                    return Err(LabelProblem::ExpectedKey {
                        found: t.describe(),
                    });
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    fn requirement(&mut self) -> Result<Requirement, LabelProblem> {
        let mut negated = false;
        let mut token = self.next_word();
        if token == Token::Bang {
            negated = true;
            token = self.next_word();
        }
        let Token::Identifier(key) = token else {
            return Err(LabelProblem::ExpectedKey {
                found: token.describe(),
            });
        };
        validate_key(&key)?;
        if negated {
            return Ok(Requirement {
                key,
                op: LabelOp::DoesNotExist,
            });
        }
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(Requirement {
                key,
                op: LabelOp::Exists,
            });
        }
        let op = match self.next() {
            Token::Equals | Token::DoubleEquals => LabelOp::Equals(self.exact_value(&key)?),
            Token::NotEquals => LabelOp::NotEquals(self.exact_value(&key)?),
            Token::In => LabelOp::In(self.value_set(&key)?),
            Token::NotIn => LabelOp::NotIn(self.value_set(&key)?),
            Token::Greater => LabelOp::GreaterThan(self.integer(&key)?),
            Token::Less => LabelOp::LessThan(self.integer(&key)?),
            t => {
                return Err(LabelProblem::ExpectedOperator {
                    key,
                    found: t.describe(),
                })
            }
        };
        Ok(Requirement { key, op })
    }

    /// The value after `=`, `==` or `!=`; empty when the requirement ends there.
    fn exact_value(&mut self, key: &str) -> Result<String, LabelProblem> {
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok(String::new());
        }
        match self.next_word() {
            Token::Identifier(v) => {
                validate_value(key, &v)?;
                Ok(v)
            }
            t => Err(LabelProblem::ExpectedValue {
                key: key.into(),
                found: t.describe(),
            }),
        }
    }

    /// `(a, b, c)` after `in` / `notin`.
    fn value_set(&mut self, key: &str) -> Result<Vec<String>, LabelProblem> {
        let open = self.next();
        if open != Token::OpenParen {
            return Err(LabelProblem::ExpectedOpenParen {
                key: key.into(),
                found: open.describe(),
            });
        }
        let mut values = Vec::new();
        loop {
            match self.next_word() {
                Token::Identifier(v) => {
                    validate_value(key, &v)?;
                    values.push(v);
                }
                // An empty element (`(a,,b)`, `()`) is the empty value, as in apimachinery.
                Token::Comma => {
                    values.push(String::new());
                    continue;
                }
                Token::CloseParen => {
                    if values.is_empty() {
                        values.push(String::new());
                    }
                    return Ok(values);
                }
                t => {
                    return Err(LabelProblem::ExpectedSetValue {
                        key: key.into(),
                        found: t.describe(),
                    })
                }
            }
            match self.next() {
                Token::Comma => continue,
                Token::CloseParen => return Ok(values),
                t => {
                    return Err(LabelProblem::ExpectedSetSeparator {
                        key: key.into(),
                        found: t.describe(),
                    })
                }
            }
        }
    }

    fn integer(&mut self, key: &str) -> Result<i64, LabelProblem> {
        match self.next_word() {
            Token::Identifier(v) => v.parse().map_err(|_| LabelProblem::NotAnInteger {
                key: key.into(),
                value: v,
            }),
            t => Err(LabelProblem::ExpectedInteger {
                key: key.into(),
                found: t.describe(),
            }),
        }
    }
}

/// A label key: an optional DNS-subdomain prefix and `/`, then a name of at
/// most 63 characters (alphanumerics, `-`, `_`, `.`, alphanumeric at both ends).
fn validate_key(key: &str) -> Result<(), LabelProblem> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err(LabelProblem::KeyPrefix {
                key: key.into(),
                prefix: prefix.into(),
            });
        }
    }
    if name.is_empty() || !is_label_name(name) {
        return Err(LabelProblem::KeyName { key: key.into() });
    }
    Ok(())
}

fn validate_value(key: &str, value: &str) -> Result<(), LabelProblem> {
    if value.is_empty() || is_label_name(value) {
        Ok(())
    } else {
        Err(LabelProblem::Value {
            key: key.into(),
            value: value.into(),
        })
    }
}

fn is_label_name(s: &str) -> bool {
    let alnum = |c: char| c.is_ascii_alphanumeric();
    s.len() <= 63
        && s.starts_with(alnum)
        && s.ends_with(alnum)
        && s.chars()
            .all(|c| alnum(c) || c == '-' || c == '_' || c == '.')
}

/// Why a `fieldSelector` was refused, in the API server's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FieldSelectorError {
    /// A term with no `=`, `==` or `!=`; `position` is the character offset
    /// of the term in the selector.
    #[error("invalid selector: '{selector}'; can't understand '{term}'")]
    NoOperator {
        selector: String,
        term: String,
        position: usize,
    },
    /// A backslash before something other than `\`, `,` or `=` (`None`: at the end).
    #[error("invalid field selector: invalid escape sequence: \\{}", .0.map(String::from).unwrap_or_default())]
    BadEscape(Option<char>),
    /// A `,` or `=` in a value that is not escaped.
    #[error("invalid field selector: unescaped character in value: {0}")]
    Unescaped(char),
    /// A field the resource cannot be selected by.
    #[error("field label not supported: {0}")]
    Unsupported(String),
}

/// A parsed `fieldSelector`: `field=value`, `field==value`, `field!=value`, comma-separated.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    terms: Vec<FieldTerm>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct FieldTerm {
    field: String,
    value: String,
    equal: bool,
}

impl FieldSelector {
    /// Parses a field selector. Values may escape `\`, `,` and `=` with a backslash.
    pub fn parse(selector: &str) -> Result<FieldSelector, FieldSelectorError> {
        let mut terms = Vec::new();
        for (position, part) in split_terms(selector) {
            if part.is_empty() {
                continue;
            }
            let (field, equal, raw) =
                split_term(&part).ok_or_else(|| FieldSelectorError::NoOperator {
                    selector: selector.into(),
                    term: part.clone(),
                    position,
                })?;
            terms.push(FieldTerm {
                field: field.to_string(),
                value: unescape(raw)?,
                equal,
            });
        }
        Ok(FieldSelector { terms })
    }

    /// True when the selector has no terms.
    pub fn is_empty(&self) -> bool {
        self.terms.is_empty()
    }

    /// Refuses fields the resource cannot be selected by, with the API server's message.
    pub fn check_fields(&self, supported: &[&str]) -> Result<(), FieldSelectorError> {
        match self
            .terms
            .iter()
            .find(|t| !supported.contains(&t.field.as_str()))
        {
            Some(t) => Err(FieldSelectorError::Unsupported(t.field.clone())),
            None => Ok(()),
        }
    }

    /// The value an equality term requires of `field`, if there is one
    /// (lets a handler narrow a query before matching).
    pub fn required(&self, field: &str) -> Option<&str> {
        self.terms
            .iter()
            .find(|t| t.equal && t.field == field)
            .map(|t| t.value.as_str())
    }

    /// Whether an object is selected; `field` gives the object's value of a
    /// (checked) field name.
    pub fn matches<'a>(&self, field: impl Fn(&str) -> Option<&'a str>) -> bool {
        self.terms.iter().all(|t| {
            let value = field(&t.field).unwrap_or("");
            (value == t.value) == t.equal
        })
    }
}

/// Splits on commas that are not escaped with a backslash, keeping escapes;
/// each term with the character offset it starts at.
fn split_terms(s: &str) -> Vec<(usize, String)> {
    let mut terms = Vec::new();
    let mut current = String::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.chars().enumerate() {
        if escaped {
            current.push(c);
            escaped = false;
        } else if c == '\\' {
            current.push(c);
            escaped = true;
        } else if c == ',' {
            terms.push((start, std::mem::take(&mut current)));
            start = i + 1;
        } else {
            current.push(c);
        }
    }
    terms.push((start, current));
    terms
}

/// The first operator in the term decides: `!=`, `==`, then `=`.
fn split_term(term: &str) -> Option<(&str, bool, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (op, equal) in [("!=", false), ("==", true), ("=", true)] {
            if let Some(value) = rest.strip_prefix(op) {
                return Some((&term[..i], equal, value));
            }
        }
    }
    None
}

fn unescape(raw: &str) -> Result<String, FieldSelectorError> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                e => return Err(FieldSelectorError::BadEscape(e)),
            },
            ',' | '=' => return Err(FieldSelectorError::Unescaped(c)),
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn selects(selector: &str, pairs: &[(&str, &str)]) -> bool {
        LabelSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector}: {e}"))
            .matches(&labels(pairs))
    }

    #[test]
    fn equality_requirements() {
        let node = [("kubernetes.io/hostname", "edge-1"), ("zone", "a")];
        assert!(selects("kubernetes.io/hostname=edge-1", &node));
        assert!(selects("kubernetes.io/hostname==edge-1", &node));
        assert!(selects("zone = a , kubernetes.io/hostname=edge-1", &node));
        assert!(!selects("zone=b", &node));
        assert!(selects("zone!=b", &node));
        assert!(!selects("zone!=a", &node));
        // An absent key satisfies `!=`.
        assert!(selects("rack!=r1", &node));
        // An empty value selects an empty label only.
        assert!(selects("role=", &[("role", "")]));
        assert!(!selects("role=", &node));
    }

    #[test]
    fn set_based_requirements() {
        let node = [("zone", "a"), ("tier", "edge")];
        assert!(selects("zone in (a, b)", &node));
        assert!(!selects("zone in (b,c)", &node));
        assert!(selects("zone notin (b,c)", &node));
        assert!(!selects("zone notin (a)", &node));
        assert!(selects("rack notin (r1)", &node));
        assert!(!selects("rack in (r1)", &node));
        assert!(selects("zone", &node));
        assert!(!selects("rack", &node));
        assert!(selects("!rack", &node));
        assert!(!selects("!zone", &node));
        assert!(selects("zone in (a),tier,!rack,tier notin (core)", &node));
        // `in` and `notin` are plain words as keys and values.
        assert!(selects("in in (notin)", &[("in", "notin")]));
    }

    #[test]
    fn numeric_comparisons() {
        let node = [("gpus", "4")];
        assert!(selects("gpus>2", &node));
        assert!(!selects("gpus<2", &node));
        assert!(!selects("missing>0", &node));
        assert!(LabelSelector::parse("gpus>many").is_err());
    }

    #[test]
    fn empty_selector_selects_everything() {
        let s = LabelSelector::parse("").unwrap();
        assert!(s.is_empty());
        assert!(s.matches(&labels(&[])));
    }

    #[test]
    fn errors_name_the_bad_part() {
        let err = |s: &str| LabelSelector::parse(s).expect_err(s).to_string();
        assert!(
            err("zone in (a").contains("end of string"),
            "{}",
            err("zone in (a")
        );
        assert!(err("zone in a").contains("'a'"), "{}", err("zone in a"));
        assert!(err("a b").contains("'b'"), "{}", err("a b"));
        assert!(err("=x").contains("'='"), "{}", err("=x"));
        assert!(err("zone=a b").contains("'b'"), "{}", err("zone=a b"));
        assert!(err("-bad=x").contains("\"-bad\""), "{}", err("-bad=x"));
        assert!(err("Bad.Prefix/x=1").contains("Bad.Prefix"));
        assert!(err("k=v/w").contains("\"v/w\""), "{}", err("k=v/w"));
        assert!(err(&format!("k={}", "v".repeat(64))).contains("63"));
        assert!(err("!a=b").contains("'='"), "{}", err("!a=b"));
        assert!(err("a,,b").contains("','"), "{}", err("a,,b"));
        // apimachinery's TestSetSelectorParser refuses a trailing comma.
        assert!(
            err("a in (xyz),").contains("end of string"),
            "{}",
            err("a in (xyz),")
        );
        assert!(
            err("a=b,").contains("expected: a label key"),
            "{}",
            err("a=b,")
        );
    }

    #[test]
    fn errors_say_what_and_where() {
        let err = |s: &str| LabelSelector::parse(s).expect_err(s);
        let found = |s: &str| err(s).problem;
        let at = |s: &str| err(s).position;
        // The message is the one the API's clients have always read.
        assert_eq!(
            err("zone=a b").to_string(),
            "unable to parse label selector \"zone=a b\": found 'b', expected: ',' or end of string"
        );
        assert_eq!(at("zone=a b"), 7);
        assert_eq!(
            found("zone in (a"),
            LabelProblem::ExpectedSetSeparator {
                key: "zone".into(),
                found: "end of string".into()
            }
        );
        assert_eq!(at("zone in (a"), 10, "the end of the selector");
        assert_eq!(
            found("zone in a"),
            LabelProblem::ExpectedOpenParen {
                key: "zone".into(),
                found: "'a'".into()
            }
        );
        assert_eq!(at("zone in a"), 8);
        assert_eq!(
            found("=x"),
            LabelProblem::ExpectedKey {
                found: "'='".into()
            }
        );
        assert_eq!(at("=x"), 0);
        assert_eq!(
            found("a, -bad=x"),
            LabelProblem::KeyName { key: "-bad".into() }
        );
        assert_eq!(at("a, -bad=x"), 3, "the key's own position");
        assert_eq!(
            found("k = v/w"),
            LabelProblem::Value {
                key: "k".into(),
                value: "v/w".into()
            }
        );
        assert_eq!(at("k = v/w"), 4);
        assert_eq!(
            found("gpus>many"),
            LabelProblem::NotAnInteger {
                key: "gpus".into(),
                value: "many".into()
            }
        );
        assert_eq!(
            found("zone ~ a"),
            LabelProblem::ExpectedOperator {
                key: "zone".into(),
                found: "'~'".into()
            }
        );
        // Positions count characters, not bytes (U+3000 is a space).
        assert_eq!(at("a\u{3000}b"), 2);
        for (selector, message) in [
            ("zone>", "found end of string after '>' or '<' for \"zone\", expected: an integer"),
            ("zone=(", "found '(' as the value of \"zone\", expected: a label value"),
            ("zone in (=", "found '=' in the values of \"zone\", expected: a label value, ',' or ')'"),
            ("Bad.Prefix/x", "invalid label key \"Bad.Prefix/x\": the prefix \"Bad.Prefix\" must be a lowercase DNS subdomain such as example.com"),
            ("gpus>many", "\"many\" compared with \"gpus\" is not an integer, as '>' and '<' require"),
        ] {
            assert_eq!(
                err(selector).to_string(),
                format!("unable to parse label selector {selector:?}: {message}")
            );
        }
    }

    #[test]
    fn field_selectors_parse_and_match() {
        let s = FieldSelector::parse("metadata.name=edge-1,spec.unschedulable!=true").unwrap();
        s.check_fields(&["metadata.name", "spec.unschedulable"])
            .unwrap();
        let fields = |name: &'static str, unschedulable: &'static str| {
            move |f: &str| match f {
                "metadata.name" => Some(name),
                "spec.unschedulable" => Some(unschedulable),
                _ => None,
            }
        };
        assert!(s.matches(fields("edge-1", "false")));
        assert!(!s.matches(fields("edge-1", "true")));
        assert!(!s.matches(fields("edge-2", "false")));
        assert_eq!(s.required("metadata.name"), Some("edge-1"));
        assert_eq!(s.required("spec.unschedulable"), None);

        let s = FieldSelector::parse("metadata.name==a").unwrap();
        assert!(s.matches(|_| Some("a")));
        assert!(FieldSelector::parse("").unwrap().is_empty());
        // kubectl describe sends an empty namespace term.
        let s = FieldSelector::parse("involvedObject.namespace=,involvedObject.name=x").unwrap();
        assert!(s.matches(|f| (f == "involvedObject.name").then_some("x")));
    }

    #[test]
    fn field_selector_escapes() {
        let s = FieldSelector::parse(r"metadata.name=a\,b\=c\\d").unwrap();
        assert_eq!(s.required("metadata.name"), Some(r"a,b=c\d"));
        let e = FieldSelector::parse(r"metadata.name=a\x").unwrap_err();
        assert_eq!(e, FieldSelectorError::BadEscape(Some('x')));
        assert_eq!(
            e.to_string(),
            r"invalid field selector: invalid escape sequence: \x"
        );
        let e = FieldSelector::parse(r"metadata.name=a\").unwrap_err();
        assert_eq!(
            e.to_string(),
            r"invalid field selector: invalid escape sequence: \"
        );
        let e = FieldSelector::parse("metadata.name=a=b").unwrap_err();
        assert_eq!(e, FieldSelectorError::Unescaped('='));
        assert_eq!(
            e.to_string(),
            "invalid field selector: unescaped character in value: ="
        );
    }

    #[test]
    fn field_selector_errors_are_the_api_servers() {
        assert_eq!(
            FieldSelector::parse("metadata.name")
                .unwrap_err()
                .to_string(),
            "invalid selector: 'metadata.name'; can't understand 'metadata.name'"
        );
        assert_eq!(
            FieldSelector::parse(r"a=\,,b").unwrap_err(),
            FieldSelectorError::NoOperator {
                selector: r"a=\,,b".into(),
                term: "b".into(),
                position: 5
            }
        );
        let s = FieldSelector::parse("status.phase=Running").unwrap();
        assert_eq!(
            s.check_fields(&["metadata.name"]).unwrap_err().to_string(),
            "field label not supported: status.phase"
        );
    }
}

/// Selectors from anywhere: no panic, bounded work, errors that say what
/// failed, and every selector printed from requirements reads back as them.
#[cfg(test)]
mod properties {
    use super::*;
    use proptest::prelude::*;

    fn label_name() -> impl Strategy<Value = String> {
        prop_oneof![
            "[a-zA-Z0-9]([a-zA-Z0-9_.-]{0,20}[a-zA-Z0-9])?",
            Just("in".to_string()),
            Just("notin".to_string()),
        ]
    }

    fn key() -> impl Strategy<Value = String> {
        (
            prop::option::of("[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?(\\.[a-z0-9]{1,5}){0,2}"),
            label_name(),
        )
            .prop_map(|(prefix, name)| match prefix {
                Some(p) => format!("{p}/{name}"),
                None => name,
            })
    }

    fn op() -> impl Strategy<Value = LabelOp> {
        let value = || prop_oneof![Just(String::new()), label_name()];
        let values = || prop::collection::vec(label_name(), 1..4);
        prop_oneof![
            value().prop_map(LabelOp::Equals),
            value().prop_map(LabelOp::NotEquals),
            values().prop_map(LabelOp::In),
            values().prop_map(LabelOp::NotIn),
            Just(LabelOp::Exists),
            Just(LabelOp::DoesNotExist),
            any::<i64>().prop_map(LabelOp::GreaterThan),
            any::<i64>().prop_map(LabelOp::LessThan),
        ]
    }

    /// A selector as kubectl would write it.
    fn print(requirements: &[Requirement]) -> String {
        requirements
            .iter()
            .map(|r| {
                let k = &r.key;
                match &r.op {
                    LabelOp::Equals(v) => format!("{k}={v}"),
                    LabelOp::NotEquals(v) => format!("{k} != {v}"),
                    LabelOp::In(vs) => format!("{k} in ({})", vs.join(", ")),
                    LabelOp::NotIn(vs) => format!("{k} notin ({})", vs.join(",")),
                    LabelOp::Exists => k.clone(),
                    LabelOp::DoesNotExist => format!("!{k}"),
                    LabelOp::GreaterThan(n) => format!("{k}>{n}"),
                    LabelOp::LessThan(n) => format!("{k} < {n}"),
                }
            })
            .collect::<Vec<_>>()
            .join(",")
    }

    proptest! {
        #[test]
        fn arbitrary_selectors_never_panic(s in "\\PC{0,60}", t in "[a-z=!(),<> .\\\\/0-9-]{0,60}") {
            for text in [&s, &t] {
                if let Err(e) = LabelSelector::parse(text) {
                    prop_assert!(e.to_string().starts_with("unable to parse label selector"), "{e}");
                    prop_assert!(e.position <= text.chars().count(), "{e:?}");
                }
                if let Ok(f) = FieldSelector::parse(text) {
                    let _ = f.check_fields(&["metadata.name"]);
                    let _ = f.matches(|_| Some("x"));
                } else if let Err(e) = FieldSelector::parse(text) {
                    prop_assert!(e.to_string().starts_with("invalid"), "{e}");
                }
            }
        }

        #[test]
        fn printed_selectors_read_back(
            requirements in prop::collection::vec((key(), op()).prop_map(|(key, op)| Requirement { key, op }), 0..6)
        ) {
            let text = print(&requirements);
            let parsed = LabelSelector::parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(parsed.requirements, requirements, "{}", text);
        }

        #[test]
        fn field_values_escape_and_read_back(value in "\\PC{0,20}", equal in any::<bool>()) {
            let escaped: String = value
                .chars()
                .flat_map(|c| match c {
                    '\\' | ',' | '=' => vec!['\\', c],
                    c => vec![c],
                })
                .collect();
            let op = if equal { "==" } else { "!=" };
            let s = FieldSelector::parse(&format!("metadata.name{op}{escaped},spec.unschedulable=true"))
                .map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert_eq!(s.terms.len(), 2);
            prop_assert_eq!(&s.terms[0].value, &value);
            prop_assert_eq!(s.terms[0].equal, equal);
        }
    }

    #[test]
    fn long_selectors_take_linear_work() {
        let many = vec!["a=b"; 100_000].join(",");
        assert_eq!(
            LabelSelector::parse(&many).unwrap().requirements.len(),
            100_000
        );
        let wide = format!("k in ({})", vec!["v"; 100_000].join(","));
        assert!(LabelSelector::parse(&wide).is_ok());
        let fields = vec!["metadata.name=x"; 100_000].join(",");
        assert_eq!(FieldSelector::parse(&fields).unwrap().terms.len(), 100_000);
        let unsplit = "x".repeat(1_000_000);
        assert!(FieldSelector::parse(&unsplit).is_err());
    }
}
