//! A JSON string read from a request body without a copy when it can be:
//! borrowed from the body unless it has escapes. The heartbeat readers
//! take a kubelet's condition types, reasons and Lease fields this way,
//! and copy only what is kept. Also what both readers mean by a field
//! that is given ([`present`]).

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserialize, Deserializer, Error, Visitor};

/// A string of a request body, borrowed from it where it has no escapes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Text<'a>(Cow<'a, str>);

impl<'a> Text<'a> {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The string, owned: a copy unless it was unescaped into one already.
    pub fn into_owned(self) -> String {
        self.0.into_owned()
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Text<'a>, D::Error> {
        deserializer.deserialize_str(TextVisitor)
    }
}

struct TextVisitor;

impl<'de> Visitor<'de> for TextVisitor {
    type Value = Text<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a string")
    }

    fn visit_borrowed_str<E: Error>(self, v: &'de str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Borrowed(v)))
    }

    fn visit_str<E: Error>(self, v: &str) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Owned(v.to_owned())))
    }

    fn visit_string<E: Error>(self, v: String) -> Result<Text<'de>, E> {
        Ok(Text(Cow::Owned(v)))
    }
}

/// For `deserialize_with`: a field that, when given, must hold a value.
/// `null` is refused, and so left to the general path (where, in a merge
/// patch, it deletes), not read as absent.
pub(super) fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(
    d: D,
) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plain_string_is_borrowed_and_an_escaped_one_unescaped() {
        let plain: Text = serde_json::from_str(r#""KubeletReady""#).unwrap();
        assert!(matches!(plain.0, Cow::Borrowed("KubeletReady")));
        let escaped: Text = serde_json::from_str(r#""say \"hi\"\n""#).unwrap();
        assert_eq!(escaped.as_str(), "say \"hi\"\n");
        assert!(serde_json::from_str::<Text>("5").is_err());
        assert!(serde_json::from_str::<Text>("null").is_err());
    }
}
