//! The two text formats `/metrics` is read in, chosen by `Accept` as
//! Prometheus client libraries choose: OpenMetrics for a scraper that asks
//! for it, else the Prometheus text format 0.0.4 (what `promtool check
//! metrics` and older scrapers read). The registry writes OpenMetrics; the
//! text format is made from it line by line.

use std::collections::HashMap;

/// A format `/metrics` answers in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exposition {
    /// OpenMetrics, at the version asked for (`1.0.0`, or `0.0.1`, the
    /// version of an `Accept` that names none).
    OpenMetrics { version: &'static str },
    /// The Prometheus text format, version 0.0.4.
    Text,
}

impl Exposition {
    /// The format for a request's `Accept` header, as prometheus/common's
    /// `expfmt.NegotiateIncludingOpenMetrics` picks it: the clauses by
    /// preference, the first that is text 0.0.4 or OpenMetrics 0.0.1 or
    /// 1.0.0 wins; anything else (`*/*`, protobuf, no header) is text.
    pub fn negotiate(accept: Option<&str>) -> Exposition {
        for clause in clauses(accept.unwrap_or("")) {
            match (clause.media.as_str(), clause.version.as_deref()) {
                ("text/plain", None | Some("0.0.4")) => return Exposition::Text,
                ("application/openmetrics-text", None | Some("0.0.1")) => {
                    return Exposition::OpenMetrics { version: "0.0.1" }
                }
                ("application/openmetrics-text", Some("1.0.0")) => {
                    return Exposition::OpenMetrics { version: "1.0.0" }
                }
                _ => {}
            }
        }
        Exposition::Text
    }

    /// The `Content-Type` of an answer in this format.
    pub fn content_type(self) -> &'static str {
        match self {
            Exposition::OpenMetrics { version: "1.0.0" } => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
            Exposition::OpenMetrics { .. } => {
                "application/openmetrics-text; version=0.0.1; charset=utf-8"
            }
            Exposition::Text => "text/plain; version=0.0.4; charset=utf-8",
        }
    }
}

/// One media range of an `Accept` header.
struct Clause {
    media: String,
    version: Option<String>,
    quality: f32,
}

/// The media ranges of `accept` that are wanted at all, most wanted first
/// (by `q`, then in the order given).
fn clauses(accept: &str) -> Vec<Clause> {
    let mut clauses: Vec<Clause> = accept
        .split(',')
        .filter_map(|range| {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next()?.to_ascii_lowercase();
            let mut clause = Clause {
                media,
                version: None,
                quality: 1.0,
            };
            for param in parts {
                let Some((key, value)) = param.split_once('=') else {
                    continue;
                };
                let value = value.trim().trim_matches('"');
                match key.trim().to_ascii_lowercase().as_str() {
                    "q" => clause.quality = value.parse().unwrap_or(0.0),
                    "version" => clause.version = Some(value.to_string()),
                    _ => {}
                }
            }
            (clause.quality > 0.0).then_some(clause)
        })
        .collect();
    // Stable: equal preferences keep the client's order.
    clauses.sort_by(|a, b| b.quality.total_cmp(&a.quality));
    clauses
}

/// The Prometheus text format 0.0.4 of an OpenMetrics exposition: a counter
/// family and an info family are named as their samples are (`x_total`,
/// `x_info`; an info is a gauge there), `unknown` is `untyped`, and what the
/// text format has no room for goes: `# UNIT`, `# EOF`, `_created` samples
/// and exemplars.
pub fn text_format(openmetrics: &str) -> String {
    let types: HashMap<&str, &str> = openmetrics
        .lines()
        .filter_map(|line| line.strip_prefix("# TYPE "))
        .filter_map(|rest| rest.split_once(' '))
        .collect();
    let mut out = String::with_capacity(openmetrics.len());
    for line in openmetrics.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut words = rest.splitn(3, ' ');
            let (keyword, family) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
            let text = words.next().unwrap_or("");
            let kind = types.get(family).copied().unwrap_or("unknown");
            let name = sample_family(family, kind);
            match keyword {
                // OpenMetrics escapes `"` in help text; the text format does not.
                "HELP" => push_line(
                    &mut out,
                    &format!("# HELP {name} {}", text.replace("\\\"", "\"")),
                ),
                "TYPE" => push_line(&mut out, &format!("# TYPE {name} {}", text_type(kind))),
                // UNIT, EOF.
                _ => {}
            }
            continue;
        }
        let sample = line.split(" # ").next().unwrap_or(line);
        let metric = sample.split(['{', ' ']).next().unwrap_or("");
        let created = metric.strip_suffix("_created").is_some_and(|family| {
            matches!(
                types.get(family),
                Some(&("counter" | "histogram" | "summary"))
            )
        });
        if !sample.is_empty() && !created {
            push_line(&mut out, sample);
        }
    }
    out
}

/// The name the text format gives a family: its samples' name.
fn sample_family(family: &str, kind: &str) -> String {
    match kind {
        "counter" => format!("{family}_total"),
        "info" => format!("{family}_info"),
        _ => family.to_string(),
    }
}

/// The text format's type for an OpenMetrics type.
fn text_type(kind: &str) -> &str {
    match kind {
        "counter" | "gauge" | "histogram" | "summary" => kind,
        "info" | "stateset" => "gauge",
        "gaugehistogram" => "histogram",
        _ => "untyped",
    }
}

fn push_line(out: &mut String, line: &str) {
    out.push_str(line);
    out.push('\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_negotiated_as_prometheus_client_libraries_do() {
        let om1 = Exposition::OpenMetrics { version: "1.0.0" };
        let om0 = Exposition::OpenMetrics { version: "0.0.1" };
        for (accept, want) in [
            (None, Exposition::Text),
            (Some(""), Exposition::Text),
            (Some("*/*"), Exposition::Text),
            // promtool check metrics.
            (Some("text/plain;version=0.0.4"), Exposition::Text),
            // Prometheus' scrape.
            (
                Some(
                    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                     version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
                ),
                om1,
            ),
            (Some("application/openmetrics-text"), om0),
            (Some("application/openmetrics-text; version=0.0.1"), om0),
            (Some("application/openmetrics-text;version=2.0.0"), Exposition::Text),
            (
                Some("text/plain;q=0.4, application/openmetrics-text;version=1.0.0;q=0.9"),
                om1,
            ),
            (
                Some("application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited"),
                Exposition::Text,
            ),
            (Some("application/openmetrics-text;q=0"), Exposition::Text),
        ] {
            assert_eq!(Exposition::negotiate(accept), want, "{accept:?}");
        }
        assert_eq!(
            Exposition::Text.content_type(),
            "text/plain; version=0.0.4; charset=utf-8"
        );
    }

    #[test]
    fn the_text_format_names_families_as_their_samples() {
        let openmetrics = "\
# HELP requests Requests \\\"served\\\".
# TYPE requests counter
# UNIT requests requests
requests_total{code=\"200\"} 3 # {trace=\"a\"} 1.0
requests_created{code=\"200\"} 1.7e9
# HELP build Which build.
# TYPE build info
build_info{version=\"1\"} 1
# HELP up Up.
# TYPE up gauge
up 1.0
# HELP latency Latency.
# TYPE latency histogram
latency_sum 0.5
latency_count 1
latency_bucket{le=\"+Inf\"} 1
# HELP odd Odd.
# TYPE odd unknown
odd 2
# EOF
";
        assert_eq!(
            text_format(openmetrics),
            "\
# HELP requests_total Requests \"served\".
# TYPE requests_total counter
requests_total{code=\"200\"} 3
# HELP build_info Which build.
# TYPE build_info gauge
build_info{version=\"1\"} 1
# HELP up Up.
# TYPE up gauge
up 1.0
# HELP latency Latency.
# TYPE latency histogram
latency_sum 0.5
latency_count 1
latency_bucket{le=\"+Inf\"} 1
# HELP odd Odd.
# TYPE odd untyped
odd 2
"
        );
    }
}
