//! Durations as Kubernetes spells them: flags (`500ms`, `10s`, `5m`, `1h30m`)
//! and kubectl's ages, which are shown, never parsed (`2m5s`, `3d`).

use std::time::Duration;

/// The longest duration Go (and so Kubernetes) can hold: 2^63-1 nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

/// What a duration looks like, for messages.
const EXAMPLES: &str = "500ms, 10s, 5m or 1h30m";

/// Parses a Go-style duration (`300ms`, `1.5s`, `2m30s`, `1h`, `+5s`), plus
/// `d` for days. A bare `0` is zero. Exact to the nanosecond, fractions
/// truncated as Go truncates them; at most 2^63-1 nanoseconds (~292 years).
pub fn parse(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text.is_empty() {
        return Err(format!("empty duration: write it like {EXAMPLES}"));
    }
    if text.starts_with('-') {
        return Err(format!("{s:?} is negative: a duration here is {EXAMPLES}"));
    }
    let mut rest = text.strip_prefix('+').unwrap_or(text);
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(format!("{s:?} is not a duration such as {EXAMPLES}"));
    }
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = digits(rest);
        let (int, after) = rest.split_at(int_len);
        let (frac, after) = match after.strip_prefix('.') {
            Some(f) => f.split_at(digits(f)),
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(
                if after.starts_with('.') || (int_len == 0 && rest.starts_with('.')) {
                    format!("{s:?} has a malformed number")
                } else {
                    format!("{s:?} is not a duration such as {EXAMPLES}")
                },
            );
        }
        let unit_len = after
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(after.len());
        let unit = match &after[..unit_len] {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "d" => 86_400_000_000_000,
            "" if after.starts_with('.') => return Err(format!("{s:?} has a malformed number")),
            "" => return Err(format!("{s:?} lacks a unit: write it like {EXAMPLES}")),
            unit => {
                return Err(format!(
                    "{s:?} has an unknown unit {unit:?}: use ns, us, ms, s, m, h or d"
                ))
            }
        };
        rest = &after[unit_len..];
        let too_long = || format!("{s:?} is too long: at most 2562047h47m16.854775807s");
        let whole = whole_number(int).ok_or_else(too_long)?;
        total = whole
            .checked_mul(unit)
            .and_then(|n| n.checked_add(total))
            .and_then(|n| n.checked_add(fraction_of(frac, unit)))
            .filter(|n| *n <= MAX_NANOS)
            .ok_or_else(too_long)?;
    }
    Ok(Duration::from_nanos(total as u64))
}

fn digits(s: &str) -> usize {
    s.bytes().take_while(u8::is_ascii_digit).count()
}

/// The value of decimal `digits`, or `None` when it cannot be a duration.
fn whole_number(digits: &str) -> Option<u128> {
    let significant = digits.trim_start_matches('0');
    if significant.len() > 20 {
        return None;
    }
    Some(
        significant
            .bytes()
            .fold(0u128, |n, d| n * 10 + u128::from(d - b'0')),
    )
}

/// floor(0.`digits` × `unit`), exactly, however many digits there are.
fn fraction_of(digits: &str, unit: u128) -> u128 {
    // Long multiplication from the last digit; what carries out of the
    // fraction's width is the whole part.
    digits
        .bytes()
        .rev()
        .fold(0u128, |carry, d| (u128::from(d - b'0') * unit + carry) / 10)
}

/// Formats a duration the way it is parsed (`1h30m`, `10s`, `1.250s`,
/// `250ms`, `20µs`), to the millisecond above one millisecond.
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return match d.as_nanos() {
            0 => "0s".into(),
            ns if ns % 1000 == 0 => format!("{}µs", ns / 1000),
            ns => format!("{ns}ns"),
        };
    }
    if !ms.is_multiple_of(1000) {
        return if ms >= 1000 {
            format!("{}.{:03}s", ms / 1000, ms % 1000)
        } else {
            format!("{ms}ms")
        };
    }
    let mut secs = d.as_secs();
    let mut out = String::new();
    for (unit, size) in [("h", 3600), ("m", 60), ("s", 1)] {
        if secs >= size {
            out.push_str(&format!("{}{unit}", secs / size));
            secs %= size;
        }
    }
    out
}

/// A duration the way kubectl shows ages (`duration.HumanDuration` from
/// k8s.io/apimachinery): precise when young, coarser as it grows.
pub fn age(d: Duration) -> String {
    let seconds = d.as_secs();
    if seconds < 2 * 60 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        return match seconds % 60 {
            0 => format!("{minutes}m"),
            s => format!("{minutes}m{s}s"),
        };
    }
    if minutes < 3 * 60 {
        return format!("{minutes}m");
    }
    let hours = minutes / 60;
    if hours < 8 {
        return match minutes % 60 {
            0 => format!("{hours}h"),
            m => format!("{hours}h{m}m"),
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    let days = hours / 24;
    if hours < 24 * 8 {
        return match hours % 24 {
            0 => format!("{days}d"),
            h => format!("{days}d{h}h"),
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{days}d");
    }
    let years = days / 365;
    if hours < 24 * 365 * 8 {
        return match days % 365 {
            0 => format!("{years}y"),
            dy => format!("{years}y{dy}d"),
        };
    }
    format!("{years}y")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn age_follows_kubectl_human_duration() {
        let s = Duration::from_secs;
        let cases = [
            (0, "0s"),
            (59, "59s"),
            (90, "90s"),
            (119, "119s"),
            (120, "2m"),
            (125, "2m5s"),
            (599, "9m59s"),
            (600, "10m"),
            (601, "10m"),
            (3 * 3600 - 1, "179m"),
            (3 * 3600, "3h"),
            (3 * 3600 + 60, "3h1m"),
            (8 * 3600 - 1, "7h59m"),
            (8 * 3600, "8h"),
            (48 * 3600 - 1, "47h"),
            (48 * 3600, "2d"),
            (49 * 3600, "2d1h"),
            (8 * 86400 - 1, "7d23h"),
            (8 * 86400, "8d"),
            (2 * 365 * 86400 - 1, "729d"),
            (2 * 365 * 86400, "2y"),
            (2 * 365 * 86400 + 86400, "2y1d"),
            (8 * 365 * 86400 - 1, "7y364d"),
            (8 * 365 * 86400, "8y"),
            (100 * 365 * 86400, "100y"),
        ];
        for (secs, want) in cases {
            assert_eq!(age(s(secs)), want, "{secs}s");
        }
        // Fractions are dropped, not rounded.
        assert_eq!(age(Duration::from_millis(1999)), "1s");
    }

    use proptest::prelude::*;

    #[test]
    fn parses_kubernetes_style_durations() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("+5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse(".5s"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("1.s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse("1.3s"), Ok(Duration::from_millis(1300)));
        assert_eq!(parse("1µs"), Ok(Duration::from_micros(1)));
        assert_eq!(parse("1.0000000005s"), Ok(Duration::from_secs(1)));
        assert_eq!(
            parse("0.9999999999999999999999s"),
            Ok(Duration::from_nanos(999_999_999))
        );
        assert_eq!(
            parse("2562047h47m16.854775807s"),
            Ok(Duration::from_nanos(i64::MAX as u64))
        );
    }

    #[test]
    fn rejects_malformed_durations_with_a_hint() {
        for bad in ["", "10", "s", "10x", "1..5s", "-5s", ".", "+", "1.5.s"] {
            let err = parse(bad).unwrap_err();
            assert!(
                err.contains("10s") || err.contains("unit") || err.contains("number"),
                "{bad}: {err}"
            );
        }
        assert!(parse("2562047h47m16.854775808s")
            .unwrap_err()
            .contains("too long"));
        assert!(parse(&format!("{}s", "9".repeat(400)))
            .unwrap_err()
            .contains("too long"));
    }

    #[test]
    fn formats_round_trip() {
        for s in [
            "10s", "5m", "1h30m", "250ms", "1h0m5s", "1.299s", "20µs", "7ns",
        ] {
            let d = parse(s).unwrap();
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
        assert_eq!(format(Duration::from_secs(40)), "40s");
        assert_eq!(format(Duration::from_millis(1250)), "1.250s");
    }

    #[test]
    fn long_inputs_take_linear_work() {
        let long = format!("0.{}1s", "0".repeat(1_000_000));
        assert_eq!(parse(&long), Ok(Duration::ZERO));
        let many = "1ns".repeat(300_000);
        assert_eq!(parse(&many), Ok(Duration::from_nanos(300_000)));
    }

    proptest! {
        #[test]
        fn never_panics_and_errors_quote_the_input(s in "\\PC{0,30}") {
            if let Err(e) = parse(&s) {
                prop_assert!(e.contains(&format!("{s:?}")) || s.trim().is_empty(), "{e}");
            }
        }

        #[test]
        fn duration_like_inputs_never_panic(parts in prop::collection::vec(
            ("[0-9]{0,22}", prop::option::of("[0-9]{0,22}"),
             prop::sample::select(vec!["ns", "us", "µs", "ms", "s", "m", "h", "d", "", "x", "."])),
            1..6,
        )) {
            let text: String = parts
                .iter()
                .map(|(i, f, u)| format!("{i}{}{u}", f.as_ref().map(|f| format!(".{f}")).unwrap_or_default()))
                .collect();
            let _ = parse(&text);
        }

        #[test]
        fn formatted_durations_read_back(ms in 0u64..=9_223_372_036_854, sub_ms in 0u64..1000) {
            // To the millisecond above one; exactly below.
            let d = Duration::from_millis(ms);
            prop_assert_eq!(parse(&format(d)), Ok(d));
            let small = Duration::from_micros(sub_ms);
            prop_assert_eq!(parse(&format(small)), Ok(small));
        }

        #[test]
        fn components_add_up_exactly(h in 0u64..1000, m in 0u64..1000, s in 0u64..1000, ms in 0u64..1000, frac in "[0-9]{1,12}") {
            let text = format!("{h}h{m}m{s}s{ms}ms");
            let want = Duration::from_secs(h * 3600 + m * 60 + s) + Duration::from_millis(ms);
            prop_assert_eq!(parse(&text), Ok(want));
            // A fraction of a second, truncated to the nanosecond.
            let nanos: u64 = format!("{frac:0<9}")[..9].parse().unwrap();
            prop_assert_eq!(parse(&format!("0.{frac}s")), Ok(Duration::from_nanos(nanos)));
        }
    }
}
