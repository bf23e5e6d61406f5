//! Kubernetes resource quantities for `--node-cpu` and `--node-memory`.

/// Parses a CPU quantity (`1`, `2.5`, `500m`) into millicores.
pub fn parse_cpu(s: &str) -> Result<u64, String> {
    let text = s.trim();
    let millis = if let Some(m) = text.strip_suffix('m') {
        m.parse::<u64>().ok()
    } else {
        text.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0 && *v < 1e9)
            .map(|v| (v * 1000.0).round() as u64)
    };
    millis
        .filter(|m| *m > 0)
        .ok_or_else(|| format!("{s:?} is not a CPU quantity such as 1, 2.5 or 500m"))
}

/// Parses a memory quantity (`3Gi`, `512Mi`, `1G`, `1000000`) into bytes.
pub fn parse_memory(s: &str) -> Result<u64, String> {
    let text = s.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let factor: u64 = match suffix {
        "" => 1,
        "k" => 1000,
        "M" => 1000u64.pow(2),
        "G" => 1000u64.pow(3),
        "T" => 1000u64.pow(4),
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => {
            return Err(format!(
                "{s:?} has an unknown suffix {suffix:?}: use Ki, Mi, Gi, Ti, k, M, G or T"
            ))
        }
    };
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{s:?} is not a memory quantity such as 3Gi or 512Mi"))?;
    let bytes = value * factor as f64;
    if !(bytes.is_finite() && (1.0..1e18).contains(&bytes)) {
        return Err(format!("{s:?} is out of range"));
    }
    Ok(bytes.round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu() {
        assert_eq!(parse_cpu("1"), Ok(1000));
        assert_eq!(parse_cpu("2.5"), Ok(2500));
        assert_eq!(parse_cpu("500m"), Ok(500));
        for bad in ["", "0", "x", "1.5m", "-1"] {
            assert!(parse_cpu(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn memory() {
        assert_eq!(parse_memory("3Gi"), Ok(3 << 30));
        assert_eq!(parse_memory("512Mi"), Ok(512 << 20));
        assert_eq!(parse_memory("1G"), Ok(1_000_000_000));
        assert_eq!(parse_memory("1.5Gi"), Ok(3 << 29));
        assert_eq!(parse_memory("4096"), Ok(4096));
        assert!(parse_memory("3GB").unwrap_err().contains("suffix"));
        assert!(parse_memory("Gi").is_err());
    }
}
