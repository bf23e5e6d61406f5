//! Kubernetes JSON written straight from the domain: the pieces the node
//! and Lease writers share (times, numbers shown as strings). A node is
//! written field by field from its record, without first building
//! k8s-openapi's object (its maps, strings and times are most of what a
//! heartbeat's reply would otherwise allocate, thousands of times a second);
//! the typed object, where one is needed, is read back from these bytes.

use std::fmt;

use serde::ser::Serializer;
use serde::Serialize;

use crate::model::Micros;

/// A number written as a JSON string (`resourceVersion`), without a `String` for it.
pub(super) struct Shown<T>(pub T);

impl<T: fmt::Display> Serialize for Shown<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(&self.0)
    }
}

/// A Kubernetes `Time` (`2026-11-30T09:00:00Z`, cut to the second as
/// [`super::time`] cuts it).
pub(super) struct Time(pub Micros);

impl Serialize for Time {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let kube = super::time(self.0);
        match Rfc3339::of(kube.0, false) {
            Some(shown) => serializer.serialize_str(shown.as_str()),
            None => kube.serialize(serializer),
        }
    }
}

/// A Kubernetes `MicroTime` (`2026-11-30T09:00:00.123456Z`).
pub(super) struct MicroTime(pub Micros);

impl Serialize for MicroTime {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let t = self.0.timestamp();
        match Rfc3339::of(t, true) {
            Some(shown) => serializer.serialize_str(shown.as_str()),
            None => {
                k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(t).serialize(serializer)
            }
        }
    }
}

/// A UTC time as Kubernetes writes it, with or without microseconds,
/// written digit by digit: a node holds a dozen times, and the formatting
/// machinery costs more than the rest of a condition.
struct Rfc3339 {
    text: [u8; 27],
    len: usize,
}

impl Rfc3339 {
    /// `None` for a year not of four digits: k8s-openapi's own formatting
    /// then decides.
    fn of(t: jiff::Timestamp, micros: bool) -> Option<Rfc3339> {
        let d = jiff::tz::Offset::UTC.to_datetime(t);
        let year = u32::try_from(d.year()).ok().filter(|y| *y <= 9999)?;
        // Each part of a civil date and time is within its range: no casts lose anything.
        let parts = [
            (year, 4, b'-'),
            (d.month() as u32, 2, b'-'),
            (d.day() as u32, 2, b'T'),
            (d.hour() as u32, 2, b':'),
            (d.minute() as u32, 2, b':'),
            (d.second() as u32, 2, b'.'),
            (d.subsec_nanosecond() as u32 / 1000, 6, b'Z'),
        ];
        let mut text = [0u8; 27];
        let mut len = 0;
        let used = if micros { &parts[..] } else { &parts[..6] };
        for &(value, digits, after) in used {
            let mut rest = value;
            for i in (0..digits).rev() {
                text[len + i] = b'0' + (rest % 10) as u8;
                rest /= 10;
            }
            text[len + digits] = after;
            len += digits + 1;
        }
        if !micros {
            text[len - 1] = b'Z';
        }
        Some(Rfc3339 { text, len })
    }

    fn as_str(&self) -> &str {
        std::str::from_utf8(&self.text[..self.len]).expect("digits and separators are ASCII")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_written_as_kubernetes_writes_them() {
        for micros in [
            0,
            -1,
            -1_500_000,
            1_764_000_100_500_000,
            1_764_000_100_000_007,
            1_709_164_799_999_999,
            253_402_300_799_999_999,
            253_402_300_800_000_000,
            -62_167_219_200_000_000,
            -62_167_219_200_000_001,
        ] {
            let t = Micros(micros);
            assert_eq!(
                serde_json::to_string(&Time(t)).unwrap(),
                serde_json::to_string(&super::super::time(t)).unwrap(),
                "{micros}"
            );
            assert_eq!(
                serde_json::to_string(&MicroTime(t)).unwrap(),
                serde_json::to_string(&k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
                    t.timestamp()
                ))
                .unwrap(),
                "{micros}"
            );
        }
    }
}
