//! `nodekeeper history`: the events, filtered, printed a page at a time as
//! they are read, so memory stays flat however long the history is.

use std::io::Write;

use super::{Failure, Outcome};
use crate::cli::{HistoryArgs, ListFormat};
use crate::inspect::{InspectError, Source};
use crate::model::Event;
use crate::output::{history_row, HISTORY_HEADER as HEADER};
use crate::server::HistoryParams;

pub async fn history(source: &Source, args: &HistoryArgs) -> Outcome {
    let params = HistoryParams {
        node: args.node.as_ref().map(|n| n.to_ascii_lowercase()),
        since: args.since.clone(),
        until: args.until.clone(),
        condition: args.condition.clone(),
        ..HistoryParams::default()
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printer = Printer::new(args.output);
    let result = source
        .history_pages(&params, |page| {
            printer.page(&page, &mut out).map_err(closed_or_failed)
        })
        .await;
    let finished = result.and_then(|()| printer.finish(&mut out).map_err(closed_or_failed));
    match finished {
        Ok(()) => Ok(String::new()),
        // The reader went away (`| head`): nothing more to say.
        Err(InspectError::Invalid(reason)) if reason == CLOSED => Ok(String::new()),
        Err(e) => {
            // What was printed stays printed; end the line before the error.
            let _ = out.flush();
            Err(Failure::from(e))
        }
    }
}

const CLOSED: &str = "standard output closed";

fn closed_or_failed(e: std::io::Error) -> InspectError {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        InspectError::Invalid(CLOSED.into())
    } else {
        InspectError::Invalid(format!("cannot write the history: {e}"))
    }
}

/// Prints pages as a table whose columns only ever widen, with the rows of
/// [`history_row`] (escaped), or as one JSON array (exact: JSON escapes).
struct Printer {
    format: ListFormat,
    widths: [usize; 4],
    printed: usize,
    /// One event's JSON, reused from event to event.
    json: Vec<u8>,
}

/// As `nodekeeper nodes` (kubectl's printer): columns at least 6 wide, 3 apart.
const MIN_WIDTH: usize = 6;
const PADDING: usize = 3;

impl Printer {
    fn new(format: ListFormat) -> Printer {
        Printer {
            format,
            widths: [MIN_WIDTH; 4],
            printed: 0,
            json: Vec::new(),
        }
    }

    fn page(&mut self, events: &[Event], out: &mut impl Write) -> std::io::Result<()> {
        match self.format {
            ListFormat::Json => {
                for e in events {
                    out.write_all(if self.printed == 0 { b"[\n" } else { b",\n" })?;
                    // Pretty JSON, indented one level: a newline is never
                    // inside a JSON string, so each one starts a line.
                    self.json.clear();
                    serde_json::to_writer_pretty(&mut self.json, e)
                        .map_err(std::io::Error::other)?;
                    for (i, line) in self.json.split(|&b| b == b'\n').enumerate() {
                        out.write_all(if i == 0 { b"  " } else { b"\n  " })?;
                        out.write_all(line)?;
                    }
                    self.printed += 1;
                }
            }
            ListFormat::Table => {
                let rows: Vec<[String; 5]> = events.iter().map(history_row).collect();
                if self.printed == 0 {
                    self.widen(HEADER.iter().copied());
                }
                for row in &rows {
                    self.widen(row.iter().map(String::as_str));
                }
                if self.printed == 0 {
                    self.row(HEADER.iter().copied(), out)?;
                }
                for row in &rows {
                    self.row(row.iter().map(String::as_str), out)?;
                }
                self.printed += rows.len();
            }
        }
        Ok(())
    }

    fn widen<'a>(&mut self, cells: impl Iterator<Item = &'a str>) {
        for (width, cell) in self.widths.iter_mut().zip(cells) {
            *width = (*width).max(cell.chars().count() + PADDING);
        }
    }

    fn row<'a>(
        &self,
        cells: impl Iterator<Item = &'a str>,
        out: &mut impl Write,
    ) -> std::io::Result<()> {
        for (i, cell) in cells.enumerate() {
            out.write_all(cell.as_bytes())?;
            if let Some(width) = self.widths.get(i) {
                let pad = width.saturating_sub(cell.chars().count());
                out.write_all(" ".repeat(pad).as_bytes())?;
            }
        }
        out.write_all(b"\n")
    }

    fn finish(&mut self, out: &mut impl Write) -> std::io::Result<()> {
        match (self.format, self.printed) {
            (ListFormat::Json, 0) => out.write_all(b"[]\n")?,
            (ListFormat::Json, _) => out.write_all(b"\n]\n")?,
            (ListFormat::Table, 0) => out.write_all(b"No events found\n")?,
            (ListFormat::Table, _) => {}
        }
        out.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventKind, Micros};

    fn event(seq: u64, node: &str) -> Event {
        Event {
            seq,
            time: Micros(1_764_500_000_000_000),
            node: Some(node.into()),
            kind: EventKind::Deleted {
                reason: "gone".into(),
            },
        }
    }

    #[test]
    fn one_page_prints_as_the_table_printer_does() {
        let events = [event(7, "n1"), event(12, "edge-long-name")];
        let mut out = Vec::new();
        let mut p = Printer::new(ListFormat::Table);
        p.page(&events, &mut out).unwrap();
        p.finish(&mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            crate::output::history_table(&events)
        );
    }

    #[test]
    fn control_characters_are_escaped_in_the_table_and_exact_in_json() {
        // ESC with CSI and OSC (ended by BEL), CR, LF forging a row, C1's CSI.
        let hostile =
            "gone\x1b[2J\x1b]0;pwned\x07\r\n99    2026-11-30   n1   Deleted   forged\u{9b}31m";
        let mut e = event(7, "n1");
        e.kind = EventKind::Deleted {
            reason: hostile.into(),
        };
        let mut out = Vec::new();
        let mut p = Printer::new(ListFormat::Table);
        p.page(std::slice::from_ref(&e), &mut out).unwrap();
        p.finish(&mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(
            !text.chars().any(|c| c.is_control() && c != '\n'),
            "{text:?}"
        );
        assert_eq!(text.lines().count(), 2, "{text}");
        assert!(
            text.ends_with("gone\\x1b[2J\\x1b]0;pwned\\x07\\r\\n99    2026-11-30   n1   Deleted   forged\\u{9b}31m\n"),
            "{text}"
        );

        let mut out = Vec::new();
        let mut p = Printer::new(ListFormat::Json);
        p.page(&[e], &mut out).unwrap();
        p.finish(&mut out).unwrap();
        let all: Vec<Event> = serde_json::from_slice(&out).unwrap();
        assert_eq!(
            all[0].kind,
            EventKind::Deleted {
                reason: hostile.into()
            }
        );
    }

    #[test]
    fn later_pages_only_widen_columns_and_json_is_one_array() {
        let mut out = Vec::new();
        let mut p = Printer::new(ListFormat::Table);
        p.page(&[event(1, "a")], &mut out).unwrap();
        p.page(&[event(2, "a-much-longer-node")], &mut out).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(text.lines().count(), 3, "{text}");
        assert!(text.starts_with("SEQ"));

        let mut out = Vec::new();
        let mut p = Printer::new(ListFormat::Json);
        p.page(&[event(1, "a")], &mut out).unwrap();
        p.page(&[event(2, "b"), event(3, "c")], &mut out).unwrap();
        p.finish(&mut out).unwrap();
        let all: Vec<Event> = serde_json::from_slice(&out).unwrap();
        assert_eq!(all.iter().map(|e| e.seq).collect::<Vec<_>>(), [1, 2, 3]);
        let mut out = Vec::new();
        Printer::new(ListFormat::Json).finish(&mut out).unwrap();
        assert_eq!(out, b"[]\n");
    }
}
