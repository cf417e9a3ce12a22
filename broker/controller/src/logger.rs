//! raft-rs logs through slog; the broker logs through tracing. This drain forwards each raft
//! record as a tracing event (target `raft`), formatting it only when that level is enabled.

use std::fmt::Write as _;

use slog::{Drain, KV, Level, OwnedKVList, Record, Serializer};

pub(crate) fn logger() -> slog::Logger {
    slog::Logger::root(TracingDrain.fuse(), slog::o!())
}

struct TracingDrain;

impl Drain for TracingDrain {
    type Ok = ();
    type Err = slog::Never;

    fn log(&self, record: &Record<'_>, values: &OwnedKVList) -> Result<(), slog::Never> {
        let enabled = match record.level() {
            Level::Critical | Level::Error => {
                tracing::enabled!(target: "raft", tracing::Level::ERROR)
            }
            Level::Warning => tracing::enabled!(target: "raft", tracing::Level::WARN),
            Level::Info => tracing::enabled!(target: "raft", tracing::Level::INFO),
            Level::Debug => tracing::enabled!(target: "raft", tracing::Level::DEBUG),
            Level::Trace => tracing::enabled!(target: "raft", tracing::Level::TRACE),
        };
        if !enabled {
            return Ok(());
        }
        let mut line = Line(record.msg().to_string());
        // A field that fails to format is left out: a log line is not worth an error.
        let _ = record.kv().serialize(record, &mut line);
        let _ = values.serialize(record, &mut line);
        let line = line.0;
        match record.level() {
            Level::Critical | Level::Error => tracing::error!(target: "raft", "{line}"),
            Level::Warning => tracing::warn!(target: "raft", "{line}"),
            Level::Info => tracing::info!(target: "raft", "{line}"),
            Level::Debug => tracing::debug!(target: "raft", "{line}"),
            Level::Trace => tracing::trace!(target: "raft", "{line}"),
        }
        Ok(())
    }
}

struct Line(String);

impl Serializer for Line {
    fn emit_arguments(&mut self, key: slog::Key, value: &std::fmt::Arguments<'_>) -> slog::Result {
        write!(self.0, " {key}={value}").map_err(|_| slog::Error::Other)
    }
}
