//! Where logs go and how they look: human text (every value escaped, so a
//! log line is one line and text from the network cannot forge another or
//! drive a terminal), or JSON lines with stable field names for log
//! pipelines; and the one log line every condition transition gets. The
//! escaping ([`terminal`]) is the CLI's too.

pub mod probe_failures;
pub mod terminal;

use std::fmt;

use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

use crate::model::{ConditionStatus, EventKind};

/// The target of the transition lines, so a filter can keep just them
/// (`--log warn,nodekeeper::transitions=info`).
pub const TRANSITIONS: &str = "nodekeeper::transitions";

/// How log lines are written (`--log-format`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// For people: time, level, target, message, then `field=value` pairs.
    #[default]
    Text,
    /// One JSON object a line: `time`, `level`, `target`, `message` and the
    /// event's own fields, flat.
    Json,
}

/// Installs the process's logger: `filter` decides what is written, to
/// stderr, in `format`; `site` (`run --site`) ends every text line as
/// `site=NAME` and is a field of every JSON line.
pub fn init(filter: tracing_subscriber::EnvFilter, format: LogFormat, site: Option<&str>) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A log on a full disk loses lines; reporting that with eprintln!
        // would panic the task that logged.
        .log_internal_errors(false);
    match (format, site) {
        (LogFormat::Text, None) => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .fmt_fields(TextFields)
            .init(),
        (LogFormat::Text, Some(site)) => builder
            .with_ansi(false)
            .fmt_fields(TextFields)
            .event_format(SiteText {
                inner: tracing_subscriber::fmt::format::Format::default(),
                site: terminal::escape(site).into_owned(),
            })
            .init(),
        (LogFormat::Json, site) => builder
            .with_ansi(false)
            .event_format(JsonLines {
                site: site.map(str::to_string),
            })
            .init(),
    }
}

/// The text format with `site=NAME` at the end of every line: the inner
/// format's line, written whole, then the site. A line with a site is
/// written without colour.
pub struct SiteText<F> {
    pub inner: F,
    /// Escaped already.
    pub site: String,
}

impl<S, N, F> FormatEvent<S, N> for SiteText<F>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
    F: FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut line = String::with_capacity(256);
        self.inner
            .format_event(ctx, Writer::new(&mut line), event)?;
        let line = line.strip_suffix('\n').unwrap_or(&line);
        writeln!(writer, "{line} site={}", self.site)
    }
}

/// Logs a durable condition transition, once: called where the event is
/// made durable, whichever way (probe, push, silence) it was decided.
pub fn transition(seq: u64, node: Option<&str>, kind: &EventKind) {
    if let EventKind::ConditionChanged {
        condition,
        from,
        to,
        reason,
        message,
    } = kind
    {
        tracing::info!(
            target: TRANSITIONS,
            node = node.unwrap_or(""),
            condition = condition.as_str(),
            from = status_name(*from),
            to = status_name(Some(*to)),
            reason = reason.as_str(),
            seq,
            "{message}"
        );
    }
}

/// A status as logs and hooks show it; empty for a condition seen the first time.
pub fn status_name(status: Option<ConditionStatus>) -> &'static str {
    match status {
        None => "",
        Some(ConditionStatus::True) => "True",
        Some(ConditionStatus::False) => "False",
        Some(ConditionStatus::Unknown) => "Unknown",
    }
}

/// The text format's fields, as tracing-subscriber's default writes them
/// (the message, then `name=value` pairs, a space apart; strings quoted),
/// with every control character of every value escaped
/// ([`terminal::escape`]). The default escapes ESC, BEL and C1 in
/// the message only: a line feed in a pushed condition message wrote a
/// second, forged line, and a carriage return hid the start of the real one.
pub struct TextFields;

impl<'writer> FormatFields<'writer> for TextFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut visitor = TextVisitor {
            writer,
            result: Ok(()),
            first: true,
        };
        fields.record(&mut visitor);
        visitor.result
    }
}

struct TextVisitor<'writer> {
    writer: Writer<'writer>,
    result: fmt::Result,
    first: bool,
}

impl TextVisitor<'_> {
    fn write(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // A record from the `log` crate carries its metadata as fields; the
        // line shows it already.
        if self.result.is_err() || field.name().starts_with("log.") {
            return;
        }
        let text = format!("{value:?}");
        let text = terminal::escape(&text);
        let separator = if std::mem::take(&mut self.first) {
            ""
        } else {
            " "
        };
        self.result = match field.name() {
            "message" => write!(self.writer, "{separator}{text}"),
            name if self.writer.has_ansi_escapes() => {
                // tracing-subscriber's styles: the name in italics, `=` dimmed.
                write!(
                    self.writer,
                    "{separator}\x1b[3m{name}\x1b[0m\x1b[2m=\x1b[0m{text}"
                )
            }
            name => write!(self.writer, "{separator}{name}={text}"),
        };
    }
}

impl Visit for TextVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.write(field, &format_args!("{value}"));
        } else {
            self.write(field, &value);
        }
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.write(field, &format_args!("{value}"));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.write(field, value);
    }
}

/// The JSON lines format. Field names are a contract: `time` (RFC 3339,
/// UTC), `level` (lower case), `target`, `message`, then the event's fields
/// as they were given (numbers and booleans stay JSON numbers and booleans).
/// With `run --site`, `site` follows them. A field named like one of
/// these is written as `field.NAME`.
#[derive(Default)]
pub struct JsonLines {
    pub site: Option<String>,
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        // A log line's own time stamp, a record at the clock's full precision
        // (nanoseconds); Micros::now would cut it to microseconds.
        #[allow(clippy::disallowed_methods)]
        let now = jiff::Timestamp::now();
        let line = json_line(
            now,
            event.metadata().level(),
            event.metadata().target(),
            self.site.as_deref(),
            |visitor| event.record(visitor),
        );
        writeln!(writer, "{line}")
    }
}

/// Builds one JSON line; `record` feeds the event's fields to the visitor.
/// The four fixed fields come first, then the event's in the order given.
fn json_line(
    time: jiff::Timestamp,
    level: &tracing::Level,
    target: &str,
    site: Option<&str>,
    record: impl FnOnce(&mut FieldsVisitor),
) -> String {
    let mut visitor = FieldsVisitor::default();
    record(&mut visitor);
    let message = visitor.message.take().unwrap_or_default();
    let mut line = String::with_capacity(256);
    let mut put = |name: &str, value: &serde_json::Value| {
        line.push(if line.is_empty() { '{' } else { ',' });
        line.push_str(&serde_json::Value::from(name).to_string());
        line.push(':');
        line.push_str(&value.to_string());
    };
    put("time", &time.to_string().into());
    put("level", &level.as_str().to_ascii_lowercase().into());
    put("target", &target.into());
    put("message", &message.into());
    if let Some(site) = site {
        put("site", &site.into());
    }
    for (name, value) in &visitor.fields {
        if FIXED.contains(&name.as_str()) || (site.is_some() && name == "site") {
            put(&format!("field.{name}"), value);
        } else {
            put(name, value);
        }
    }
    line.push('}');
    line
}

/// The fields every JSON line starts with.
const FIXED: [&str; 4] = ["time", "level", "target", "message"];

/// Collects an event's fields as JSON values.
#[derive(Default)]
struct FieldsVisitor {
    message: Option<String>,
    fields: Vec<(String, serde_json::Value)>,
}

impl FieldsVisitor {
    fn put(&mut self, field: &Field, value: serde_json::Value) {
        if field.name() == "message" {
            self.message = Some(match value {
                serde_json::Value::String(s) => s,
                other => other.to_string(),
            });
        } else {
            self.fields.push((field.name().to_string(), value));
        }
    }
}

impl Visit for FieldsVisitor {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.put(field, format!("{value:?}").into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.put(field, value.into());
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.put(field, value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.put(field, value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.put(field, value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.put(field, value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.put(field, value.to_string().into());
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Captures what the JSON format writes, for one closure's events.
    fn capture(log: impl FnOnce()) -> Vec<serde_json::Value> {
        let sink = Sink::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(sink.clone())
            .with_max_level(tracing::Level::DEBUG)
            .event_format(JsonLines::default())
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        sink.text()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
            .collect()
    }

    #[test]
    fn a_transition_is_one_json_line_with_the_documented_fields() {
        let lines = capture(|| {
            transition(
                42,
                Some("n1"),
                &EventKind::ConditionChanged {
                    condition: "Ready".into(),
                    from: Some(ConditionStatus::True),
                    to: ConditionStatus::Unknown,
                    reason: "NodeStatusUnknown".into(),
                    message: "Kubelet stopped posting node status.".into(),
                },
            );
            // Not a transition: nothing.
            transition(43, Some("n1"), &EventKind::Deleted { reason: "r".into() });
        });
        assert_eq!(lines.len(), 1, "{lines:?}");
        let line = lines[0].as_object().unwrap();
        let mut keys: Vec<&str> = line.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "condition",
                "from",
                "level",
                "message",
                "node",
                "reason",
                "seq",
                "target",
                "time",
                "to"
            ]
        );
        assert_eq!(line["level"], "info");
        assert_eq!(line["target"], TRANSITIONS);
        assert_eq!(line["node"], "n1");
        assert_eq!(line["condition"], "Ready");
        assert_eq!(line["from"], "True");
        assert_eq!(line["to"], "Unknown");
        assert_eq!(line["reason"], "NodeStatusUnknown");
        assert_eq!(line["seq"], 42);
        assert_eq!(line["message"], "Kubelet stopped posting node status.");
        let time = line["time"].as_str().unwrap();
        time.parse::<jiff::Timestamp>()
            .unwrap_or_else(|e| panic!("{time}: {e}"));
    }

    #[test]
    fn fields_keep_their_json_types_and_cannot_shadow_the_fixed_ones() {
        let lines = capture(|| {
            tracing::warn!(
                count = 3u64,
                ok = true,
                ratio = 0.5,
                time = "x",
                "hello {}",
                1
            );
        });
        let line = &lines[0];
        assert_eq!(line["message"], "hello 1");
        assert_eq!(line["level"], "warn");
        assert_eq!(line["count"], 3);
        assert_eq!(line["ok"], true);
        assert_eq!(line["ratio"], 0.5);
        assert_eq!(line["field.time"], "x");
        assert!(line["time"].as_str().unwrap().ends_with('Z'), "{line}");
    }

    /// Where a test's log lines are written, to be read back as text.
    #[derive(Clone, Default)]
    pub(crate) struct Sink(Arc<Mutex<Vec<u8>>>);

    impl Sink {
        pub(crate) fn text(&self) -> String {
            String::from_utf8(self.0.lock().unwrap().clone()).unwrap()
        }
    }

    impl std::io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl tracing_subscriber::fmt::MakeWriter<'_> for Sink {
        type Writer = Sink;
        fn make_writer(&self) -> Sink {
            self.clone()
        }
    }

    /// What the text format writes for one closure's events, without colour.
    fn capture_text(log: impl FnOnce()) -> String {
        let sink = Sink::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(sink.clone())
            .with_ansi(false)
            .without_time()
            .fmt_fields(TextFields)
            .finish();
        tracing::subscriber::with_default(subscriber, log);
        sink.text()
    }

    #[test]
    fn a_text_line_escapes_control_characters_in_every_value() {
        // ESC with CSI and OSC (ended by BEL), CR, LF starting a forged
        // line, tab, and C1's CSI.
        let hostile = "ok\x1b[2J\x1b]0;pwned\x07\r\n ERROR nodekeeper: forged\t\u{9b}31m";
        let shown = "ok\\x1b[2J\\x1b]0;pwned\\x07\\r\\n ERROR nodekeeper: forged\\t\\u{9b}31m";
        let text = capture_text(|| {
            transition(
                7,
                Some("n1"),
                &EventKind::ConditionChanged {
                    condition: "Ready".into(),
                    from: Some(ConditionStatus::True),
                    to: ConditionStatus::False,
                    reason: "KubeletNotReady".into(),
                    message: hostile.into(),
                },
            );
            tracing::warn!(detail = %hostile, quoted = hostile, "hook said {hostile}");
        });
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2, "{text:?}");
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert_eq!(
            lines[0],
            format!(" INFO nodekeeper::transitions: {shown} node=\"n1\" condition=\"Ready\" from=\"True\" to=\"False\" reason=\"KubeletNotReady\" seq=7")
        );
        // A Display value and a string (Debug, quoted, as Rust escapes it).
        assert!(
            lines[1].starts_with(&format!(" WARN nodekeeper::logging::tests: hook said {shown} detail={shown} quoted=\"ok\\u{{1b}}[2J")),
            "{}",
            lines[1]
        );
    }

    #[test]
    fn the_fixed_fields_lead_in_their_order() {
        let time: jiff::Timestamp = "2026-12-01T15:04:05.5Z".parse().unwrap();
        let line = json_line(time, &tracing::Level::ERROR, "nodekeeper::x", None, |v| {
            v.fields.push(("zone".into(), "a".into()));
            v.fields.push(("count".into(), 2.into()));
            v.fields.push(("level".into(), "shadow".into()));
            v.message = Some("say \"hi\"".into());
        });
        assert_eq!(
            line,
            r#"{"time":"2026-12-01T15:04:05.5Z","level":"error","target":"nodekeeper::x","message":"say \"hi\"","zone":"a","count":2,"field.level":"shadow"}"#
        );
    }

    #[test]
    fn with_a_site_every_line_names_it() {
        let time: jiff::Timestamp = "2026-12-01T15:04:05.5Z".parse().unwrap();
        let line = json_line(
            time,
            &tracing::Level::INFO,
            "nodekeeper::x",
            Some("lyon-3"),
            |v| {
                v.fields.push(("site".into(), "shadow".into()));
                v.message = Some("hi".into());
            },
        );
        assert_eq!(
            line,
            r#"{"time":"2026-12-01T15:04:05.5Z","level":"info","target":"nodekeeper::x","message":"hi","site":"lyon-3","field.site":"shadow"}"#
        );

        let sink = Sink::default();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(sink.clone())
            .with_ansi(false)
            .fmt_fields(TextFields)
            .event_format(SiteText {
                inner: tracing_subscriber::fmt::format::Format::default().without_time(),
                site: "lyon-3".into(),
            })
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(node = "n1", "one\ntwo");
            tracing::info!("plain");
        });
        assert_eq!(
            sink.text(),
            " WARN nodekeeper::logging::tests: one\\ntwo node=\"n1\" site=lyon-3\n \
             INFO nodekeeper::logging::tests: plain site=lyon-3\n"
        );
    }
}
