//! How far a long maintenance command (`db import`, `db compact`) got, on
//! standard error when it is a terminal: one line, redrawn at most four
//! times a second, left as the time it all took once done. Piped or
//! redirected, standard error gets nothing: the summary on standard output
//! is what scripts read.
// A one-shot command on a stopped store, outside any runtime: the real
// clock paces the redraws, which are for a person to read.
#![allow(clippy::disallowed_methods, clippy::disallowed_types)]

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use crate::store::ImportProgress;

/// The least time between two redraws.
const REDRAW: Duration = Duration::from_millis(250);

/// The progress line of one command.
pub struct Progress {
    what: &'static str,
    shown: bool,
    started: Instant,
    drawn: Option<Instant>,
    records: usize,
    finished: bool,
}

impl Progress {
    /// A progress line for `what` (`import`), shown when standard error is a terminal.
    pub fn on_terminal(what: &'static str) -> Progress {
        Progress {
            what,
            shown: std::io::stderr().is_terminal(),
            started: Instant::now(),
            drawn: None,
            records: 0,
            finished: false,
        }
    }

    /// Redraws the line for `step`: a count at most every [`REDRAW`], a
    /// change of phase at once.
    pub fn update(&mut self, step: ImportProgress) {
        match step {
            ImportProgress::Loading { records, expected } => {
                self.records = records;
                if self.drawn.is_some_and(|at| at.elapsed() < REDRAW) {
                    return;
                }
                let share = match expected {
                    Some(all) if all > 0 => {
                        format!(" (about {}%)", (records * 100 / all).min(99))
                    }
                    _ => String::new(),
                };
                self.draw(&format!("{records} records loaded{share}"));
            }
            ImportProgress::Writing { records } => {
                self.records = records;
                self.draw(&format!("{records} records loaded; writing them to disk"));
            }
        }
    }

    /// Leaves the line saying how many records took how long.
    pub fn finish(mut self) {
        self.finished = true;
        if self.shown {
            self.draw(&format!(
                "{} records in {:.1} s\n",
                self.records,
                self.started.elapsed().as_secs_f64()
            ));
        }
    }

    fn draw(&mut self, text: &str) {
        if !self.shown {
            return;
        }
        // Back to the line's start, and clear what a longer text left.
        let mut err = std::io::stderr().lock();
        let _ = write!(err, "\r\x1b[K{}: {text}", self.what);
        let _ = err.flush();
        self.drawn = Some(Instant::now());
    }
}

impl Drop for Progress {
    /// A command that failed ends the line, so its error starts on a line of its own.
    fn drop(&mut self) {
        if !self.finished && self.drawn.is_some() {
            eprintln!();
        }
    }
}
