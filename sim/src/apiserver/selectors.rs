//! `labelSelector` and `fieldSelector` as kube-apiserver parses and matches
//! them, written from k8s.io/apimachinery `pkg/labels/selector.go` (the
//! lexer, `Parser.parse` and `Requirement.Matches`) and `pkg/fields/selector.go`
//! (`parseSelector`, `splitTerms`, `splitTerm`, `UnescapeValue`), commit
//! eed236ce (2026-07-23), and the documentation at
//! <https://kubernetes.io/docs/concepts/overview/working-with-objects/labels/>
//! and <https://kubernetes.io/docs/concepts/overview/working-with-objects/field-selectors/>.

use serde_json::Value;

/// A parsed `labelSelector`: every requirement must hold.
#[derive(Debug, Clone, Default)]
pub(super) struct LabelSelector {
    requirements: Vec<(String, LabelOp)>,
}

#[derive(Debug, Clone, PartialEq)]
enum LabelOp {
    /// `=`, `==` and `in`: the label is present with one of the values.
    In(Vec<String>),
    /// `!=` and `notin`: the label is absent or has none of the values.
    NotIn(Vec<String>),
    /// A bare key.
    Exists,
    /// `!key`.
    DoesNotExist,
    /// `>`: present, an integer, and greater.
    Gt(i64),
    /// `<`: present, an integer, and less.
    Lt(i64),
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    End,
    Identifier(String),
    In,
    NotIn,
    Bang,
    Equals,
    DoubleEquals,
    NotEquals,
    Gt,
    Lt,
    Open,
    Close,
    Comma,
}

impl Token {
    fn text(&self) -> String {
        match self {
            Token::End => String::new(),
            Token::Identifier(s) => s.clone(),
            Token::In => "in".into(),
            Token::NotIn => "notin".into(),
            Token::Bang => "!".into(),
            Token::Equals => "=".into(),
            Token::DoubleEquals => "==".into(),
            Token::NotEquals => "!=".into(),
            Token::Gt => ">".into(),
            Token::Lt => "<".into(),
            Token::Open => "(".into(),
            Token::Close => ")".into(),
            Token::Comma => ",".into(),
        }
    }

    /// In a list of values (and as a key), `in` and `notin` are plain words.
    fn as_value(&self) -> Option<String> {
        match self {
            Token::Identifier(s) => Some(s.clone()),
            Token::In | Token::NotIn => Some(self.text()),
            _ => None,
        }
    }
}

const SPECIAL: &[u8] = b"=!(),><";

/// The lexer: whitespace separates; `=!(),><` form the longest operator they
/// can; anything else runs into a word.
fn tokens(s: &str) -> Vec<Token> {
    let bytes = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < bytes.len() && matches!(bytes[i], b' ' | b'\t' | b'\r' | b'\n') {
            i += 1;
        }
        if i == bytes.len() {
            out.push(Token::End);
            return out;
        }
        if SPECIAL.contains(&bytes[i]) {
            let two = bytes.get(i..i + 2);
            let (token, len) = match two {
                Some(b"!=") => (Token::NotEquals, 2),
                Some(b"==") => (Token::DoubleEquals, 2),
                _ => (
                    match bytes[i] {
                        b'=' => Token::Equals,
                        b'!' => Token::Bang,
                        b'(' => Token::Open,
                        b')' => Token::Close,
                        b',' => Token::Comma,
                        b'>' => Token::Gt,
                        _ => Token::Lt,
                    },
                    1,
                ),
            };
            out.push(token);
            i += len;
            continue;
        }
        let start = i;
        while i < bytes.len()
            && !SPECIAL.contains(&bytes[i])
            && !matches!(bytes[i], b' ' | b'\t' | b'\r' | b'\n')
        {
            i += 1;
        }
        out.push(match &s[start..i] {
            "in" => Token::In,
            "notin" => Token::NotIn,
            word => Token::Identifier(word.to_owned()),
        });
    }
}

struct Parser {
    tokens: Vec<Token>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> &Token {
        &self.tokens[self.at]
    }

    fn next(&mut self) -> Token {
        let token = self.tokens[self.at].clone();
        if self.at + 1 < self.tokens.len() {
            self.at += 1;
        }
        token
    }

    fn requirement(&mut self) -> Result<(String, LabelOp), String> {
        let mut negated = false;
        let mut token = self.next();
        if token == Token::Bang {
            negated = true;
            token = self.next();
        }
        let key = token
            .as_value()
            .ok_or_else(|| format!("found '{}', expected: identifier", token.text()))?;
        check_key(&key)?;
        if matches!(self.peek(), Token::End | Token::Comma) {
            return Ok((
                key,
                if negated {
                    LabelOp::DoesNotExist
                } else {
                    LabelOp::Exists
                },
            ));
        }
        if negated {
            // `!key` takes no operator.
            let found = self.next();
            return Err(format!(
                "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                found.text()
            ));
        }
        let op = self.next();
        let op = match op {
            Token::In | Token::NotIn => {
                let values = self.value_set()?;
                for v in &values {
                    check_value(&key, v)?;
                }
                if op == Token::In {
                    LabelOp::In(values)
                } else {
                    LabelOp::NotIn(values)
                }
            }
            Token::Equals | Token::DoubleEquals | Token::NotEquals | Token::Gt | Token::Lt => {
                let value = match self.peek() {
                    Token::End | Token::Comma => String::new(),
                    _ => {
                        let t = self.next();
                        t.as_value()
                            .ok_or_else(|| format!("found '{}', expected: identifier", t.text()))?
                    }
                };
                check_value(&key, &value)?;
                let integer = || {
                    value.parse::<i64>().map_err(|_| {
                        format!(
                            "values[0]: Invalid value: {value:?}: for 'Gt', 'Lt' operators, the \
                             value must be an integer"
                        )
                    })
                };
                match op {
                    Token::Equals | Token::DoubleEquals => LabelOp::In(vec![value]),
                    Token::NotEquals => LabelOp::NotIn(vec![value]),
                    Token::Gt => LabelOp::Gt(integer()?),
                    _ => LabelOp::Lt(integer()?),
                }
            }
            other => {
                return Err(format!(
                    "found '{}', expected: in, notin, =, ==, !=, gt, lt",
                    other.text()
                ))
            }
        };
        Ok((key, op))
    }

    /// `( values )`: comma-separated, each possibly empty; `()` is `("")`.
    fn value_set(&mut self) -> Result<Vec<String>, String> {
        let open = self.next();
        if open != Token::Open {
            return Err(format!("found '{}' expected: '('", open.text()));
        }
        let mut values: Vec<String> = Vec::new();
        let add = |values: &mut Vec<String>, v: String| {
            if !values.contains(&v) {
                values.push(v);
            }
        };
        // Whether a value is expected next (at the start, or after a comma).
        let mut expecting = true;
        loop {
            let token = self.next();
            match token {
                Token::Close => {
                    if expecting {
                        add(&mut values, String::new());
                    }
                    return Ok(values);
                }
                Token::Comma => {
                    if expecting {
                        add(&mut values, String::new());
                    }
                    expecting = true;
                }
                t => match t.as_value() {
                    Some(v) if expecting => {
                        add(&mut values, v);
                        expecting = false;
                    }
                    _ => {
                        return Err(format!(
                            "found '{}', expected: ',', ')' or identifier",
                            t.text()
                        ))
                    }
                },
            }
        }
    }
}

/// A label key: an optional DNS subdomain prefix and `/`, then a name of at
/// most 63 alphanumerics, `-`, `_` or `.`, starting and ending alphanumeric
/// (apimachinery `validation.IsQualifiedName`).
fn check_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((prefix, name)) => (Some(prefix), name),
        None => (None, key),
    };
    let bad = || format!("key: Invalid value: {key:?}: not a valid label key");
    if let Some(prefix) = prefix {
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if prefix.is_empty() || prefix.len() > 253 || !prefix.split('.').all(label_ok) {
            return Err(bad());
        }
    }
    if name.is_empty() || !name_like(name) {
        return Err(bad());
    }
    Ok(())
}

/// A label value: empty, or at most 63 alphanumerics, `-`, `_` or `.`,
/// starting and ending alphanumeric (apimachinery `IsValidLabelValue`).
fn check_value(key: &str, value: &str) -> Result<(), String> {
    if value.is_empty() || name_like(value) {
        Ok(())
    } else {
        Err(format!(
            "values[0][{key}]: Invalid value: {value:?}: a valid label must be an empty string or \
             consist of alphanumeric characters, '-', '_' or '.', and must start and end with an \
             alphanumeric character"
        ))
    }
}

fn name_like(s: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_alphanumeric();
    s.len() <= 63
        && s.bytes().next().is_some_and(alnum)
        && s.bytes().last().is_some_and(alnum)
        && s.bytes()
            .all(|b| alnum(b) || b == b'-' || b == b'_' || b == b'.')
}

impl LabelSelector {
    /// Parses a selector; the error is apimachinery's wording, near enough.
    pub(super) fn parse(selector: &str) -> Result<LabelSelector, String> {
        let mut parser = Parser {
            tokens: tokens(selector),
            at: 0,
        };
        let mut requirements = Vec::new();
        loop {
            match parser.peek() {
                Token::End if requirements.is_empty() => break,
                Token::Identifier(_) | Token::In | Token::NotIn | Token::Bang => {}
                other => {
                    let found = other.text();
                    return Err(if requirements.is_empty() {
                        format!("found '{found}', expected: !, identifier, or 'end of string'")
                    } else {
                        format!("found '{found}', expected: identifier after ','")
                    });
                }
            }
            requirements.push(
                parser
                    .requirement()
                    .map_err(|e| format!("unable to parse requirement: {e}"))?,
            );
            match parser.next() {
                Token::End => break,
                Token::Comma => {}
                other => {
                    return Err(format!(
                        "found '{}', expected: ',' or 'end of string'",
                        other.text()
                    ))
                }
            }
        }
        Ok(LabelSelector { requirements })
    }

    /// Whether an object with `labels` (its `metadata.labels`) is selected.
    pub(super) fn matches(&self, labels: Option<&Value>) -> bool {
        self.requirements.iter().all(|(key, op)| {
            let value = labels.and_then(|l| l.get(key)).and_then(Value::as_str);
            match op {
                LabelOp::In(set) => value.is_some_and(|v| set.iter().any(|s| s == v)),
                LabelOp::NotIn(set) => value.is_none_or(|v| !set.iter().any(|s| s == v)),
                LabelOp::Exists => value.is_some(),
                LabelOp::DoesNotExist => value.is_none(),
                LabelOp::Gt(n) => value
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v > *n),
                LabelOp::Lt(n) => value
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|v| v < *n),
            }
        })
    }
}

/// A parsed `fieldSelector`: `field=value`, `field==value` or
/// `field!=value` terms, comma-separated, all of which must hold.
#[derive(Debug, Clone, Default)]
pub(super) struct FieldSelector {
    /// (field, whether it must equal, value)
    terms: Vec<(String, bool, String)>,
}

impl FieldSelector {
    /// Parses a selector. Values escape `\`, `,` and `=` with a backslash.
    pub(super) fn parse(selector: &str) -> Result<FieldSelector, String> {
        let mut terms = Vec::new();
        // Split on commas a backslash does not escape (`splitTerms`).
        let mut parts = Vec::new();
        let mut start = 0;
        let mut escaped = false;
        for (i, c) in selector.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                ',' => {
                    parts.push(&selector[start..i]);
                    start = i + 1;
                }
                _ => {}
            }
        }
        parts.push(&selector[start..]);
        for part in parts.into_iter().filter(|p| !p.is_empty()) {
            // The first operator met splits the term: `!=`, `==`, then `=` at each place.
            let split = part.char_indices().find_map(|(i, _)| {
                let rest = &part[i..];
                [("!=", false), ("==", true), ("=", true)]
                    .into_iter()
                    .find(|(op, _)| rest.starts_with(op))
                    .map(|(op, equal)| (&part[..i], equal, &rest[op.len()..]))
            });
            let Some((field, equal, raw)) = split else {
                return Err(format!(
                    "invalid selector: '{selector}'; can't understand '{part}'"
                ));
            };
            terms.push((field.to_owned(), equal, unescape(raw)?));
        }
        Ok(FieldSelector { terms })
    }

    /// The fields the selector names.
    pub(super) fn fields(&self) -> impl Iterator<Item = &str> {
        self.terms.iter().map(|(f, _, _)| f.as_str())
    }

    /// Whether an object is selected; `value` gives its value of a field
    /// (`""` for one it does not have, as a `fields.Set` lookup does).
    pub(super) fn matches(&self, value: impl Fn(&str) -> String) -> bool {
        self.terms
            .iter()
            .all(|(field, equal, v)| (value(field) == *v) == *equal)
    }
}

/// `UnescapeValue`: `\\`, `\,` and `\=` stand for themselves; any other
/// escape, a trailing backslash, or a bare `,` or `=` is an error.
fn unescape(raw: &str) -> Result<String, String> {
    let mut out = String::with_capacity(raw.len());
    let mut chars = raw.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some(e @ ('\\' | ',' | '=')) => out.push(e),
                Some(e) => return Err(format!("invalid escape sequence: \\{e}")),
                None => return Err("invalid escape sequence: \\".into()),
            },
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {c}"
                ))
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(pairs: &[(&str, &str)]) -> Value {
        Value::Object(pairs.iter().map(|(k, v)| ((*k).into(), json!(v))).collect())
    }

    fn label_match(selector: &str, set: &[(&str, &str)]) -> bool {
        LabelSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?}: {e}"))
            .matches(Some(&labels(set)))
    }

    /// apimachinery `pkg/labels/selector_test.go`: `TestSelectorParse`,
    /// `TestSelectorMatches`, `TestSetSelectorParser` and
    /// `TestRequirementSelectorMatching` (commit eed236ce).
    #[test]
    fn label_selectors_as_upstream_tests_them() {
        for good in [
            "x=a,y=b,z=c",
            "",
            "x!=a,y=b",
            "x=",
            "x= ",
            "x=,z= ",
            "x= ,z= ",
            "!x",
            "x>1",
            "x>1,z<5",
            "\rx",
            "this-is-a-dns.domain.com/key-with-dash",
            "this-is-another-dns.domain.com/key-with-dash in (so,what)",
            "0.1.2.domain/99 notin (10.10.100.1, tick.tack.clock)",
            "foo  in\t (abc)",
            "x notin\n (abc)",
            "x  notin\t\t\t(abc,def)",
            "x in (abc,)",
            "x in ()",
            "x in (a,,,)",
            "x notin (abc,,def),bar,z in (),w",
            "x notin ( )",
            "x notin (, a)",
            "a ",
            "a in (x,y,notin, z,in)",
        ] {
            assert!(LabelSelector::parse(good).is_ok(), "{good:?} is valid");
        }
        for bad in [
            "x=a||y=b",
            "x==a==b",
            "!x=a",
            "x<a",
            "x,,y",
            ",x,y",
            "x nott in (y)",
            "a in (xyz),",
            "a in (xyz)b notin ()",
            "a in (xyz abc)",
            "a notin(",
            "a (",
            "(",
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?} is refused");
        }
        // TestSelectorMatches
        assert!(label_match("", &[("x", "y")]));
        assert!(label_match("x=y", &[("x", "y")]));
        assert!(label_match("x=y,z=w", &[("x", "y"), ("z", "w")]));
        assert!(label_match("x!=y,z!=w", &[("x", "z"), ("z", "a")]));
        assert!(label_match("notin=in", &[("notin", "in")]));
        assert!(label_match("x", &[("x", "z")]));
        assert!(label_match("!x", &[("y", "z")]));
        assert!(label_match("x>1", &[("x", "2")]));
        assert!(label_match("x<1", &[("x", "0")]));
        assert!(!label_match("x=z", &[]));
        assert!(!label_match("x=y", &[("x", "z")]));
        assert!(!label_match("x=y,z=w", &[("x", "w"), ("z", "w")]));
        assert!(!label_match("x!=y,z!=w", &[("x", "z"), ("z", "w")]));
        assert!(!label_match("x", &[("y", "z")]));
        assert!(!label_match("!x", &[("x", "z")]));
        assert!(!label_match("x>1", &[("x", "0")]));
        assert!(!label_match("x<1", &[("x", "2")]));
        let set = [("foo", "bar"), ("baz", "blah")];
        assert!(label_match("foo=bar,baz=blah", &set));
        assert!(!label_match("foo=bar,foobar=bar,baz=blah", &set));
        // TestSetSelectorParser: "x,y in (a)" does not select {}, "x in ()" means x="".
        assert!(!label_match("x,y in (a)", &[]));
        assert!(label_match("x in ()", &[("x", "")]));
        assert!(label_match("x in (a,,)", &[("x", "")]));
        // TestRequirementSelectorMatching
        assert!(label_match(
            "x in (foo),y notin (alpha)",
            &[("x", "foo"), ("y", "baz")]
        ));
        assert!(!label_match(
            "x in (foo),y in (alpha)",
            &[("x", "foo"), ("y", "baz")]
        ));
        assert!(label_match("x notin (),y", &[("y", "")]));
        assert!(label_match("!x,y", &[("y", "")]));
        assert!(!label_match("x notin (),!y", &[("y", "")]));
        assert!(!label_match("x in ()", &[("y", "baz")]));
        assert!(label_match("z>1", &[("z", "2")]));
        assert!(!label_match("z>1", &[("z", "v2")]));
    }

    /// The Labels and Selectors page's examples
    /// (kubernetes.io/docs/concepts/overview/working-with-objects/labels/).
    #[test]
    fn label_selectors_as_the_documentation_describes_them() {
        let prod = [("environment", "production"), ("tier", "frontend")];
        let qa = [("environment", "qa")];
        let none: [(&str, &str); 0] = [];
        assert!(label_match("environment = production", &prod));
        // "tier != frontend" selects resources without a tier label too.
        assert!(label_match("tier != frontend", &qa));
        assert!(!label_match("tier != frontend", &prod));
        assert!(label_match("environment=production,tier=frontend", &prod));
        assert!(label_match("environment in (production, qa)", &qa));
        assert!(label_match("tier notin (frontend, backend)", &qa));
        assert!(!label_match("tier notin (frontend, backend)", &prod));
        assert!(label_match("partition", &[("partition", "")]));
        assert!(!label_match("partition", &none));
        assert!(label_match("!partition", &none));
        assert!(label_match(
            "partition in (customerA, customerB),environment!=qa",
            &[("partition", "customerA")]
        ));
        // Keys and values are checked as the API server checks them.
        for bad in [
            "-x=a",
            "x=-a",
            "Example.com/x",
            "a/b/c",
            "x=a b",
            "/x",
            &format!("x={}", "a".repeat(64)),
        ] {
            assert!(LabelSelector::parse(bad).is_err(), "{bad:?}");
        }
        assert!(LabelSelector::parse(&format!("example.com/x={}", "a".repeat(63))).is_ok());
        // An object without labels.
        assert!(LabelSelector::parse("!x").unwrap().matches(None));
        assert!(!LabelSelector::parse("x").unwrap().matches(None));
    }

    fn field_match(selector: &str, set: &[(&str, &str)]) -> bool {
        FieldSelector::parse(selector)
            .unwrap_or_else(|e| panic!("{selector:?}: {e}"))
            .matches(|f| {
                set.iter()
                    .find(|(k, _)| *k == f)
                    .map_or(String::new(), |(_, v)| (*v).to_owned())
            })
    }

    /// apimachinery `pkg/fields/selector_test.go`: `TestSelectorParse`,
    /// `TestSelectorMatches`, `TestSplitTerm` and `TestEscapeValue`, and the
    /// Field Selectors page (`=`, `==` and `!=`, chained with commas).
    #[test]
    fn field_selectors_as_upstream_tests_them() {
        for good in [
            "x=a,y=b,z=c",
            "",
            "x!=a,y=b",
            r"x=a||y\=b",
            r"x=a\=\=b",
            "a=a,",
            ",a=a",
        ] {
            assert!(FieldSelector::parse(good).is_ok(), "{good:?} is valid");
        }
        for bad in [
            "x=a||y=b",
            "x==a==b",
            "x=a,b",
            "x in (a)",
            "x in (a,b,c)",
            "x",
            r"k=\",
            r"k=\a",
            r"k=\\\",
        ] {
            assert!(FieldSelector::parse(bad).is_err(), "{bad:?} is refused");
        }
        assert!(field_match("", &[("x", "y")]));
        assert!(field_match("x=y", &[("x", "y")]));
        assert!(field_match("x=y,z=w", &[("x", "y"), ("z", "w")]));
        assert!(field_match("x!=y,z!=w", &[("x", "z"), ("z", "a")]));
        assert!(field_match("notin=in", &[("notin", "in")]));
        assert!(!field_match("x=y", &[("x", "z")]));
        assert!(!field_match("x=y,z=w", &[("x", "w"), ("z", "w")]));
        assert!(!field_match("x!=y,z!=w", &[("x", "z"), ("z", "w")]));
        let set = [("foo", "bar"), ("baz", "blah"), ("complex", r"=value\,\")];
        assert!(field_match("foo=bar,baz=blah", &set));
        assert!(field_match(r"foo=bar,baz=blah,complex=\=value\\\,\\", &set));
        assert!(!field_match("foo=blah", &set));
        assert!(!field_match("foo=bar,foobar=bar,baz=blah", &set));
        // `==` is `=`; the first operator splits the term; a missing field is "".
        assert!(field_match("x==y", &[("x", "y")]));
        assert!(field_match("x==", &[]));
        assert!(field_match("x!=", &[("x", "y")]));
        assert!(field_match("함=수", &[("함", "수")]));
        let err = FieldSelector::parse("a=b,c").unwrap_err();
        assert_eq!(err, "invalid selector: 'a=b,c'; can't understand 'c'");
    }
}
