//! Kubernetes resource quantities (`4`, `500m`, `1.5Gi`, `1e9`, `2E3`, `+3Mi`),
//! read the way k8s.io/apimachinery's `resource.ParseQuantity` reads them and
//! turned into the millicores and bytes the domain keeps, rounded up as its
//! `MilliValue()` and `Value()` round. The arithmetic is exact: a quantity is
//! never a float on the way.
//!
//! ```text
//! <quantity>        ::= <signedNumber><suffix>
//! <signedNumber>    ::= <number> | "+" <number> | "-" <number>
//! <number>          ::= <digits> | <digits>.<digits> | <digits>. | .<digits>
//! <suffix>          ::= <binarySI> | <decimalExponent> | <decimalSI>
//! <binarySI>        ::= Ki | Mi | Gi | Ti | Pi | Ei
//! <decimalSI>       ::= m | "" | k | M | G | T | P | E
//! <decimalExponent> ::= "e" <signedNumber> | "E" <signedNumber>   (an integer)
//! ```
//!
//! Kubernetes caps the magnitude at 2^63-1; a larger quantity is refused
//! here rather than silently capped. Capacities must be more than zero.

use thiserror::Error;

/// The largest quantity Kubernetes represents, in the unit asked for.
const MAX: u128 = i64::MAX as u128;

/// Why a quantity was refused. Each message quotes the input and says how
/// to write it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum QuantityError {
    #[error("empty {what}: write one such as {example}")]
    Empty {
        what: &'static str,
        example: &'static str,
    },
    #[error("{input:?} is not a {what}: {problem}; write one such as {example}")]
    Malformed {
        input: String,
        what: &'static str,
        problem: String,
        example: &'static str,
    },
    #[error("{input:?} is not a {what}: unknown suffix {suffix:?}; use m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or an exponent such as e9")]
    UnknownSuffix {
        input: String,
        what: &'static str,
        suffix: String,
    },
    #[error("{input:?} is negative: a {what} cannot be")]
    Negative { input: String, what: &'static str },
    #[error("{input:?} is zero: a {what} must be more than 0")]
    Zero { input: String, what: &'static str },
    #[error("{input:?} is out of range: a {what} is at most 2^63-1 (9223372036854775807) {unit}")]
    TooLarge {
        input: String,
        what: &'static str,
        unit: &'static str,
    },
}

/// What is being read, for messages.
#[derive(Debug, Clone, Copy)]
struct Kind {
    what: &'static str,
    unit: &'static str,
    example: &'static str,
}

/// Parses a CPU quantity (`1`, `2.5`, `500m`, `1e-1`) into millicores,
/// rounded up as `MilliValue()` does (`0.0001` is `1m`).
pub fn parse_cpu(s: &str) -> Result<u64, QuantityError> {
    let kind = Kind {
        what: "CPU quantity",
        unit: "millicores",
        example: "4, 2.5 or 500m",
    };
    parse_capacity(s, -3, kind)
}

/// Parses a memory quantity (`3Gi`, `512Mi`, `1G`, `1e9`, `1000000`) into
/// bytes, rounded up as `Value()` does (`1.5` is `2`).
pub fn parse_memory(s: &str) -> Result<u64, QuantityError> {
    let kind = Kind {
        what: "memory quantity",
        unit: "bytes",
        example: "3Gi, 512Mi, 1G or 1e9",
    };
    parse_capacity(s, 0, kind)
}

/// Parses a capacity in units of 10^`scale`: more than zero, at most 2^63-1.
fn parse_capacity(s: &str, scale: i64, kind: Kind) -> Result<u64, QuantityError> {
    let input = s.trim();
    let quantity = Quantity::parse(input, kind)?;
    let what = kind.what;
    match quantity.ceil_at(scale) {
        Some(0) => Err(QuantityError::Zero {
            input: input.into(),
            what,
        }),
        _ if quantity.negative => Err(QuantityError::Negative {
            input: input.into(),
            what,
        }),
        Some(value) => Ok(value),
        None => Err(QuantityError::TooLarge {
            input: input.into(),
            what,
            unit: kind.unit,
        }),
    }
}

/// A quantity's exact value: `digits` × 10^`exp10` × 2^`exp2`.
#[derive(Debug, PartialEq, Eq)]
struct Quantity {
    negative: bool,
    /// Decimal digits, most significant first, without leading zeros (empty for zero).
    digits: Vec<u8>,
    exp10: i128,
    exp2: u32,
}

impl Quantity {
    fn parse(input: &str, kind: Kind) -> Result<Quantity, QuantityError> {
        let malformed = |problem: String| QuantityError::Malformed {
            input: input.into(),
            what: kind.what,
            problem,
            example: kind.example,
        };
        if input.is_empty() {
            return Err(QuantityError::Empty {
                what: kind.what,
                example: kind.example,
            });
        }
        let (negative, rest) = split_sign(input);
        let int_len = leading_digits(rest);
        let (int, rest) = rest.split_at(int_len);
        let (frac, suffix) = match rest.strip_prefix('.') {
            Some(after) => after.split_at(leading_digits(after)),
            None => ("", rest),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(malformed(match rest.chars().next() {
                None | Some('.') => "it has no digits".into(),
                Some(c) => format!("it must start with a digit, '.', '+' or '-', not {c:?}"),
            }));
        }
        let (exp10, exp2) = match suffix {
            "" => (0, 0),
            "m" => (-3, 0),
            "k" => (3, 0),
            "M" => (6, 0),
            "G" => (9, 0),
            "T" => (12, 0),
            "P" => (15, 0),
            "E" => (18, 0),
            "Ki" => (0, 10),
            "Mi" => (0, 20),
            "Gi" => (0, 30),
            "Ti" => (0, 40),
            "Pi" => (0, 50),
            "Ei" => (0, 60),
            _ => match suffix.strip_prefix(['e', 'E']) {
                Some(exponent) => (parse_exponent(exponent).map_err(malformed)?, 0),
                None if suffix.starts_with('.') => {
                    return Err(malformed("it has more than one '.'".into()))
                }
                None => {
                    return Err(QuantityError::UnknownSuffix {
                        input: input.into(),
                        what: kind.what,
                        suffix: suffix.into(),
                    })
                }
            },
        };
        let digits: Vec<u8> = int
            .bytes()
            .chain(frac.bytes())
            .map(|b| b - b'0')
            .skip_while(|d| *d == 0)
            .collect();
        Ok(Quantity {
            negative,
            digits,
            exp10: exp10 - frac.len() as i128,
            exp2,
        })
    }

    /// The magnitude in units of 10^`scale`, rounded up; `None` beyond 2^63-1.
    fn ceil_at(&self, scale: i64) -> Option<u64> {
        if self.digits.is_empty() {
            return Some(0);
        }
        // Multiply by 2^exp2 in base 10, exactly: at most six times 1024.
        let mut digits = self.digits.clone();
        for _ in 0..self.exp2 / 10 {
            multiply(&mut digits, 1024);
        }
        let shift = self.exp10 - i128::from(scale);
        let value = if shift >= 0 {
            // At least 10^(len-1+shift): past 19 digits it is out of range.
            if digits.len() as i128 + shift > 19 {
                return None;
            }
            integer(&digits)? * 10u128.pow(shift as u32)
        } else {
            let fraction = usize::try_from(-shift).unwrap_or(usize::MAX);
            let whole = digits.len().saturating_sub(fraction);
            let (int, frac) = digits.split_at(whole);
            integer(int)? + u128::from(frac.iter().any(|d| *d != 0))
        };
        (value <= MAX).then_some(value as u64)
    }
}

fn split_sign(s: &str) -> (bool, &str) {
    match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    }
}

fn leading_digits(s: &str) -> usize {
    s.bytes().take_while(u8::is_ascii_digit).count()
}

/// The integer after `e`: an optional sign and decimal digits.
fn parse_exponent(text: &str) -> Result<i128, String> {
    let (negative, digits) = split_sign(text);
    if digits.is_empty() || leading_digits(digits) != digits.len() {
        return Err(format!(
            "the exponent {text:?} is not an integer (write e9, e-3 or e+6)"
        ));
    }
    let significant = digits.trim_start_matches('0');
    let magnitude: i64 = if significant.is_empty() {
        0
    } else {
        significant
            .parse()
            .map_err(|_| format!("the exponent {text:?} is out of range"))?
    };
    Ok(if negative {
        -i128::from(magnitude)
    } else {
        i128::from(magnitude)
    })
}

/// `digits` × `factor`, in place.
fn multiply(digits: &mut Vec<u8>, factor: u32) {
    let mut carry = 0u32;
    for d in digits.iter_mut().rev() {
        let v = u32::from(*d) * factor + carry;
        *d = (v % 10) as u8;
        carry = v / 10;
    }
    while carry > 0 {
        digits.insert(0, (carry % 10) as u8);
        carry /= 10;
    }
}

/// The value of `digits` (no leading zeros), or `None` past 2^63-1.
fn integer(digits: &[u8]) -> Option<u128> {
    if digits.len() > 19 {
        return None;
    }
    Some(digits.iter().fold(0u128, |n, d| n * 10 + u128::from(*d)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::{cpu_quantity, memory_quantity};
    use proptest::prelude::*;

    #[test]
    fn cpu() {
        assert_eq!(parse_cpu("1"), Ok(1000));
        assert_eq!(parse_cpu("2.5"), Ok(2500));
        assert_eq!(parse_cpu("500m"), Ok(500));
        assert_eq!(parse_cpu("1e-3"), Ok(1));
        assert_eq!(parse_cpu("+2"), Ok(2000));
        assert_eq!(parse_cpu(".5"), Ok(500));
        assert_eq!(parse_cpu("4."), Ok(4000));
        assert_eq!(parse_cpu("1k"), Ok(1_000_000));
        // Below a millicore rounds up, as MilliValue() does.
        assert_eq!(parse_cpu("0.0001"), Ok(1));
        assert_eq!(parse_cpu("1.5m"), Ok(2));
        assert_eq!(
            parse_cpu("100u").unwrap_err().to_string(),
            "\"100u\" is not a CPU quantity: unknown suffix \"u\"; use m, k, M, G, T, P, E, Ki, Mi, Gi, Ti, Pi, Ei, or an exponent such as e9"
        );
        assert!(parse_cpu("fast")
            .unwrap_err()
            .to_string()
            .starts_with("\"fast\" is not a CPU quantity: "));
        for bad in ["", "0", "x", "-1", "0m", "1..5", "1e", "m", "1e3m"] {
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
        assert_eq!(parse_memory("1e9"), Ok(1_000_000_000));
        assert_eq!(parse_memory("1E9"), Ok(1_000_000_000));
        assert_eq!(parse_memory("12e+6"), Ok(12_000_000));
        assert_eq!(parse_memory("1.5e3"), Ok(1500));
        assert_eq!(parse_memory("2P"), Ok(2_000_000_000_000_000));
        assert_eq!(parse_memory("1E"), Ok(1_000_000_000_000_000_000));
        assert_eq!(parse_memory("1Pi"), Ok(1 << 50));
        assert_eq!(parse_memory("7Ei"), Ok(7 << 60));
        assert_eq!(parse_memory("0.1Ki"), Ok(103));
        assert_eq!(parse_memory("1500m"), Ok(2));
        assert_eq!(parse_memory("1e-3"), Ok(1));
        assert_eq!(parse_memory("9223372036854775807"), Ok(i64::MAX as u64));
        assert!(matches!(
            parse_memory("9223372036854775808"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_memory("8Ei"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_memory("1e19"),
            Err(QuantityError::TooLarge { .. })
        ));
        assert!(matches!(
            parse_memory("-1Gi"),
            Err(QuantityError::Negative { .. })
        ));
        assert!(parse_memory("3GB")
            .unwrap_err()
            .to_string()
            .contains("suffix \"GB\""));
        assert!(parse_memory("Gi")
            .unwrap_err()
            .to_string()
            .contains("digit"));
        assert!(parse_memory("1.2.3")
            .unwrap_err()
            .to_string()
            .contains("more than one '.'"));
        assert!(parse_memory("1e9.5")
            .unwrap_err()
            .to_string()
            .contains("exponent"));
        assert!(parse_memory("1e99999999999999999999")
            .unwrap_err()
            .to_string()
            .contains("out of range"));
    }

    #[test]
    fn long_inputs_take_linear_work() {
        // A million digits either side of the point: parsed, not refused, and
        // without work that grows faster than the input.
        let tiny = format!("0.{}1", "0".repeat(1_000_000));
        assert_eq!(parse_memory(&tiny), Ok(1));
        let padded = format!("{}1Ei", "0".repeat(1_000_000));
        assert_eq!(parse_memory(&padded), Ok(1 << 60));
        let huge = format!("1{}", "0".repeat(1_000_000));
        assert!(matches!(
            parse_memory(&huge),
            Err(QuantityError::TooLarge { .. })
        ));
        assert_eq!(parse_cpu("1e-999999999999"), Ok(1));
    }

    /// ceil(n / d) for the reference arithmetic below.
    fn ceil_div(n: u128, d: u128) -> u128 {
        n.div_ceil(d)
    }

    proptest! {
        #[test]
        fn never_panics_and_errors_quote_the_input(s in "\\PC{0,40}") {
            for result in [parse_cpu(&s), parse_memory(&s)] {
                if let Err(e) = result {
                    let message = e.to_string();
                    prop_assert!(
                        message.contains(&format!("{:?}", s.trim())) || s.trim().is_empty(),
                        "{message}"
                    );
                }
            }
        }

        #[test]
        fn grammar_like_inputs_never_panic(
            sign in prop::sample::select(vec!["", "+", "-"]),
            int in "[0-9]{0,25}",
            frac in prop::option::of("[0-9]{0,25}"),
            suffix in prop::sample::select(vec![
                "", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei",
                "e", "E", "e0", "e9", "e-9", "E+3", "e19", "e-30", "e999999999999999999999",
                "u", "n", "K", "GB", "i", "ki", "e1.5", ".", "Mi3",
            ]),
        ) {
            let text = format!("{sign}{int}{}{suffix}", frac.map(|f| format!(".{f}")).unwrap_or_default());
            let _ = parse_cpu(&text);
            let _ = parse_memory(&text);
        }

        #[test]
        fn printed_quantities_read_back(millis in 1u64..=i64::MAX as u64, bytes in 1u64..=i64::MAX as u64) {
            prop_assert_eq!(parse_cpu(&cpu_quantity(millis).0), Ok(millis));
            prop_assert_eq!(parse_memory(&memory_quantity(bytes).0), Ok(bytes));
        }

        #[test]
        fn values_match_exact_arithmetic(
            int in 0u64..1_000_000,
            frac in "[0-9]{0,6}",
            suffix in prop::sample::select(vec![
                ("", 1u128, 1u128), ("k", 1_000, 1), ("M", 1_000_000, 1), ("G", 1_000_000_000, 1),
                ("m", 1, 1_000), ("Ki", 1 << 10, 1), ("Mi", 1 << 20, 1), ("Gi", 1 << 30, 1),
                ("e3", 1_000, 1), ("e-2", 1, 100), ("E2", 100, 1),
            ]),
        ) {
            let (name, multiplier, divisor) = suffix;
            let text = if frac.is_empty() { format!("{int}{name}") } else { format!("{int}.{frac}{name}") };
            // value = (int.frac) × multiplier / divisor, as an exact fraction.
            let scale = 10u128.pow(frac.len() as u32);
            let numerator = (u128::from(int) * scale + frac.parse::<u128>().unwrap_or(0)) * multiplier;
            let denominator = scale * divisor;
            let bytes = ceil_div(numerator, denominator);
            let millis = ceil_div(numerator * 1000, denominator);
            match parse_memory(&text) {
                Ok(v) => prop_assert_eq!(u128::from(v), bytes),
                Err(e) => prop_assert!(bytes == 0, "{text}: {e}"),
            }
            match parse_cpu(&text) {
                Ok(v) => prop_assert_eq!(u128::from(v), millis),
                Err(e) => prop_assert!(millis == 0, "{text}: {e}"),
            }
        }
    }
}
