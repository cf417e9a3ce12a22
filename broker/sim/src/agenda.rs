//! What both worlds run on: the agenda of events in virtual time (in time order, and in the
//! order they were scheduled within one instant) and the trace of what each step did (its
//! last lines for a failure report, a digest of all of it to tell runs apart).

use std::collections::{BTreeMap, VecDeque};
use std::fmt;

use crate::check::fnv;

#[derive(Debug)]
pub struct Agenda<E> {
    events: BTreeMap<(u64, u64), E>,
    seq: u64,
}

impl<E> Agenda<E> {
    pub fn new() -> Agenda<E> {
        Agenda {
            events: BTreeMap::new(),
            seq: 0,
        }
    }

    pub fn at(&mut self, time_ms: u64, event: E) {
        self.seq += 1;
        self.events.insert((time_ms, self.seq), event);
    }

    /// The next event and its time.
    pub fn next(&mut self) -> Option<(u64, E)> {
        self.events
            .pop_first()
            .map(|((time_ms, _), e)| (time_ms, e))
    }
}

#[derive(Debug)]
pub struct Trace {
    lines: VecDeque<String>,
    line: String,
    keep: usize,
    fingerprint: u64,
}

impl Trace {
    /// A trace keeping its last `keep` lines.
    pub fn new(keep: usize) -> Trace {
        Trace {
            lines: VecDeque::new(),
            line: String::new(),
            keep,
            fingerprint: 0,
        }
    }

    /// Adds to the current step's line.
    pub fn note(&mut self, what: impl fmt::Display) {
        use fmt::Write as _;
        let _ = write!(self.line, " {what}");
    }

    /// Ends step `step`'s line (if it noted anything).
    pub fn end_line(&mut self, step: u64, now_ms: u64) {
        if self.line.is_empty() {
            return;
        }
        let line = format!("#{step} t={now_ms}{}", std::mem::take(&mut self.line));
        self.fingerprint = fnv(self.fingerprint, line.as_bytes());
        if self.lines.len() == self.keep {
            self.lines.pop_front();
        }
        self.lines.push_back(line);
    }

    pub fn fingerprint(&self) -> u64 {
        self.fingerprint
    }

    pub fn into_lines(self) -> Vec<String> {
        self.lines.into()
    }
}
