//! Durations as Kubernetes flags spell them: `500ms`, `10s`, `5m`, `1h30m`.

use std::time::Duration;

/// Parses a Go-style duration (`300ms`, `1.5s`, `2m30s`, `1h`). A bare `0` is zero.
pub fn parse(s: &str) -> Result<Duration, String> {
    let text = s.trim();
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err("empty duration: write it like 500ms, 10s, 5m or 1h30m".into());
    }
    let mut total = 0f64;
    let mut rest = text;
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("{s:?} lacks a unit: write it like 500ms, 10s, 5m or 1h30m"))?;
        if number_len == 0 {
            return Err(format!(
                "{s:?} is not a duration such as 500ms, 10s, 5m or 1h30m"
            ));
        }
        let value: f64 = rest[..number_len]
            .parse()
            .map_err(|_| format!("{s:?} has a malformed number"))?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            "d" => 86400.0,
            unit => {
                return Err(format!(
                    "{s:?} has an unknown unit {unit:?}: use ns, us, ms, s, m, h or d"
                ))
            }
        };
        rest = &rest[unit_len..];
        total += value * seconds;
    }
    if !total.is_finite() || total > 1e12 {
        return Err(format!("{s:?} is too long"));
    }
    Ok(Duration::from_secs_f64(total))
}

/// Formats a duration the way it is parsed (`1h30m`, `10s`, `250ms`).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0s".into();
    }
    if !ms.is_multiple_of(1000) {
        return if ms >= 1000 {
            format!("{:.3}s", d.as_secs_f64())
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_kubernetes_style_durations() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
    }

    #[test]
    fn rejects_malformed_durations_with_a_hint() {
        for bad in ["", "10", "s", "10x", "1..5s", "-5s"] {
            let err = parse(bad).unwrap_err();
            assert!(
                err.contains("10s") || err.contains("unit") || err.contains("number"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn formats_round_trip() {
        for s in ["10s", "5m", "1h30m", "250ms", "1h0m5s"] {
            let d = parse(s).unwrap();
            assert_eq!(parse(&format(d)).unwrap(), d);
        }
        assert_eq!(format(Duration::from_secs(40)), "40s");
    }
}
