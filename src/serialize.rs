//! Serde helpers shared by the writers that serialize borrowed values in
//! place of an owned copy (the status reply's JSON, the store's node record).

use serde::ser::{SerializeSeq, Serializer};
use serde::Serialize;

/// A list written element by element through a borrowing wrapper `W`, so
/// no list of wrappers (or of owned copies) is built first.
pub(crate) struct Each<'a, T, W>(pub &'a [T], pub fn(&'a T) -> W);

impl<'a, T, W: Serialize> Serialize for Each<'a, T, W> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut seq = serializer.serialize_seq(Some(self.0.len()))?;
        for item in self.0 {
            seq.serialize_element(&(self.1)(item))?;
        }
        seq.end()
    }
}
