//! The results: a text report for people, JSON for scripts, HdrHistogram files for plots.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::error::BenchError;
use crate::hgrm;
use crate::options::{Acks, Settings, Stop};
use crate::stats::{FlowSnapshot, Percentiles, Shared, lock};

/// One direction's figures.
#[derive(Debug, Clone, PartialEq)]
pub struct FlowReport {
    pub records: u64,
    pub payload_bytes: u64,
    pub batches: u64,
    pub seconds: f64,
    pub latency: Option<Percentiles>,
}

impl FlowReport {
    /// Throughput over the window from `start_ns` (when measured records started to be sent:
    /// the warmup's end) to the last record.
    fn new(flow: FlowSnapshot, start_ns: u64, latency: Option<Percentiles>) -> Self {
        let seconds = flow.last_ns.saturating_sub(start_ns) as f64 / 1e9;
        Self {
            records: flow.records,
            payload_bytes: flow.payload_bytes,
            batches: flow.batches,
            seconds,
            latency,
        }
    }

    pub fn records_per_s(&self) -> f64 {
        per_second(self.records as f64, self.seconds)
    }

    /// Megabytes (10^6 bytes) of keys and values per second.
    pub fn mb_per_s(&self) -> f64 {
        per_second(self.payload_bytes as f64 / 1e6, self.seconds)
    }

    pub fn records_per_batch(&self) -> f64 {
        ratio(self.records as f64, self.batches as f64)
    }

    pub fn mib_per_s(&self) -> f64 {
        per_second(
            self.payload_bytes as f64 / (1u64 << 20) as f64,
            self.seconds,
        )
    }

    fn json(&self, latency_name: &str) -> Value {
        json!({
            "records": self.records,
            "payload_bytes": self.payload_bytes,
            "seconds": self.seconds,
            "records_per_s": self.records_per_s(),
            "mb_per_s": self.mb_per_s(),
            "mib_per_s": self.mib_per_s(),
            "batches": self.batches,
            "records_per_batch": self.records_per_batch(),
            latency_name: self.latency.as_ref().map(percentiles_json),
        })
    }
}

fn per_second(amount: f64, seconds: f64) -> f64 {
    ratio(amount, seconds)
}

/// `amount / per`, or 0 where there is nothing to divide by (an empty run).
fn ratio(amount: f64, per: f64) -> f64 {
    if per > 0.0 { amount / per } else { 0.0 }
}

/// Everything a finished run reports.
#[derive(Debug, Clone)]
pub struct Report {
    pub produce: Option<FlowReport>,
    pub consume: Option<FlowReport>,
    pub errors: BTreeMap<String, u64>,
    pub fatal: Option<String>,
    /// Why end-to-end latency could not be measured, if it could not.
    pub e2e_note: Option<&'static str>,
}

impl Report {
    pub fn collect(settings: &Settings, shared: &Shared) -> Self {
        let options = &settings.options;
        let start_ns = shared.clock.warmup_end_ns;
        let produce = (options.producers > 0).then(|| {
            let latency = Percentiles::of(&lock(&shared.produce_latency));
            FlowReport::new(shared.produce.snapshot(), start_ns, latency)
        });
        let consume = (options.consumers > 0).then(|| {
            let latency = Percentiles::of(&lock(&shared.e2e_latency));
            // Consumers alone start when they start, not at a warmup's end.
            let start = if options.producers > 0 { start_ns } else { 0 };
            FlowReport::new(shared.consume.snapshot(), start, latency)
        });
        let e2e_note = if options.consumers == 0 {
            None
        } else if options.producers == 0 {
            Some("no producers in this run")
        } else if options.record_size < crate::stamp::STAMP_BYTES {
            Some("records under 16 bytes carry no send time")
        } else {
            None
        };
        Self {
            produce,
            consume,
            errors: shared.errors(),
            fatal: shared.fatal(),
            e2e_note,
        }
    }

    pub fn error_total(&self) -> u64 {
        self.errors.values().sum()
    }

    pub fn text(&self, settings: &Settings, partitions: usize) -> String {
        let o = &settings.options;
        let mut out = String::new();
        let stop = match settings.stop {
            Stop::After { duration_s } => format!("{duration_s} s"),
            Stop::Records(n) => format!("{n} records"),
            Stop::CaughtUp => "up to the end offsets at the start".to_owned(),
        };
        let rate = o.rate.map_or_else(
            || "as fast as possible".to_owned(),
            |r| format!("{r} records/s"),
        );
        let _ = writeln!(
            out,
            "spindle-bench: {} at {}, {partitions} partitions; {} producers, {} consumers; \
             {}-byte records, {}-byte batches, linger {} ms, acks={}, compression {}, {}; {stop}, \
             warmup {} s",
            o.topic,
            o.bootstrap_server,
            o.producers,
            o.consumers,
            o.record_size,
            o.batch_size,
            o.linger_ms,
            o.acks.name(),
            settings.codec.name(),
            rate,
            o.warmup_s,
        );
        let ack_note = (o.acks == Acks::None).then_some("acks=0 gets no answers");
        // What a flow's records come in: a produce's batches, a fetch's record sets (one per
        // partition of each answer).
        for (name, flow, unit, latency_name, note) in [
            ("produce", &self.produce, "batch", "ack latency", ack_note),
            (
                "consume",
                &self.consume,
                "fetched partition",
                "end-to-end latency",
                self.e2e_note,
            ),
        ] {
            let Some(flow) = flow else { continue };
            let _ = writeln!(
                out,
                "{name}: {} records in {:.2} s: {:.0} records/s, {:.1} MB/s ({:.1} MiB/s), {:.1} \
                 records a {unit}",
                flow.records,
                flow.seconds,
                flow.records_per_s(),
                flow.mb_per_s(),
                flow.mib_per_s(),
                flow.records_per_batch(),
            );
            let _ = match (&flow.latency, note) {
                (Some(p), _) => writeln!(out, "  {latency_name} ms: {}", percentiles_text(p)),
                (None, Some(note)) => writeln!(out, "  {latency_name}: not measured ({note})"),
                (None, None) => writeln!(out, "  {latency_name}: no samples"),
            };
        }
        if self.errors.is_empty() {
            let _ = writeln!(out, "errors: none");
        } else {
            let _ = writeln!(out, "errors: {}", self.error_total());
            for (what, count) in &self.errors {
                let _ = writeln!(out, "  {what}: {count}");
            }
        }
        if let Some(fatal) = &self.fatal {
            let _ = writeln!(out, "stopped early: {fatal}");
        }
        out
    }

    pub fn json(&self, settings: &Settings, partitions: usize) -> Value {
        let o = &settings.options;
        json!({
            "config": {
                "bootstrap_server": o.bootstrap_server,
                "topic": o.topic,
                "partitions": partitions,
                "producers": o.producers,
                "consumers": o.consumers,
                "record_size": o.record_size,
                "batch_size": o.batch_size,
                "linger_ms": o.linger_ms,
                "acks": o.acks.name(),
                "compression": settings.codec.name(),
                "keys": o.keys,
                "rate": o.rate,
                "duration_s": o.duration_s,
                "records": o.records,
                "warmup_s": o.warmup_s,
                "consume_from": settings.consume_from.name(),
                "max_in_flight": o.max_in_flight,
                "max_request_bytes": o.max_request_bytes,
                "buffer_memory_bytes": o.buffer_memory_bytes,
                "fetch_max_bytes": o.fetch_max_bytes,
                "cpuset": o.cpuset,
            },
            "produce": self.produce.as_ref().map(|f| f.json("ack_latency_ms")),
            "consume": self.consume.as_ref().map(|f| f.json("e2e_latency_ms")),
            "errors": self.error_total(),
            "error_counts": self.errors,
            "fatal": self.fatal,
        })
    }
}

fn percentiles_text(p: &Percentiles) -> String {
    format!(
        "p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  p99.99 {:.3}  max {:.3}  ({} samples)",
        p.p50_ms, p.p90_ms, p.p99_ms, p.p99_9_ms, p.p99_99_ms, p.max_ms, p.count
    )
}

fn percentiles_json(p: &Percentiles) -> Value {
    json!({
        "count": p.count,
        "mean": p.mean_ms,
        "p50": p.p50_ms,
        "p90": p.p90_ms,
        "p99": p.p99_ms,
        "p99_9": p.p99_9_ms,
        "p99_99": p.p99_99_ms,
        "max": p.max_ms,
    })
}

/// Writes the JSON and HdrHistogram files the options ask for.
pub fn write_files(
    settings: &Settings,
    report: &Report,
    shared: &Shared,
    partitions: usize,
) -> Result<(), BenchError> {
    if let Some(path) = &settings.options.json {
        let mut text = serde_json::to_string_pretty(&report.json(settings, partitions))
            .map_err(|e| BenchError::Usage(format!("encoding JSON: {e}")))?;
        text.push('\n');
        write(path, &text)?;
    }
    if let Some(path) = &settings.options.hgrm {
        let produce = lock(&shared.produce_latency).clone();
        let e2e = lock(&shared.e2e_latency).clone();
        if settings.options.producers > 0 {
            write(path, &hgrm::percentile_distribution(&produce))?;
        }
        if !e2e.is_empty() {
            write(&e2e_path(path), &hgrm::percentile_distribution(&e2e))?;
        }
    }
    Ok(())
}

/// `out.hgrm` -> `out.e2e.hgrm`; `out` -> `out.e2e`.
pub fn e2e_path(path: &Path) -> PathBuf {
    let mut name = path.file_stem().unwrap_or_default().to_os_string();
    name.push(".e2e");
    if let Some(extension) = path.extension() {
        name.push(".");
        name.push(extension);
    }
    path.with_file_name(name)
}

fn write(path: &Path, text: &str) -> Result<(), BenchError> {
    std::fs::write(path, text).map_err(|source| BenchError::Output {
        path: path.display().to_string(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e2e_files_sit_next_to_the_produce_file() {
        assert_eq!(
            e2e_path(Path::new("/t/out.hgrm")),
            Path::new("/t/out.e2e.hgrm")
        );
        assert_eq!(e2e_path(Path::new("out")), Path::new("out.e2e"));
    }

    #[test]
    fn throughput_counts_from_the_warmup_end_to_the_last_record() {
        let flow = FlowSnapshot {
            records_total: 3000,
            records: 2000,
            payload_bytes: 2_000_000,
            batches: 500,
            last_ns: 3_000_000_000,
        };
        let report = FlowReport::new(flow, 1_000_000_000, None);
        assert_eq!(report.seconds, 2.0);
        assert_eq!(report.records_per_s(), 1000.0);
        assert_eq!(report.mb_per_s(), 1.0);
        assert_eq!(report.records_per_batch(), 4.0);
        let empty = FlowReport::new(
            FlowSnapshot {
                records: 0,
                batches: 0,
                last_ns: 0,
                ..flow
            },
            0,
            None,
        );
        assert_eq!(empty.records_per_s(), 0.0);
        assert_eq!(empty.records_per_batch(), 0.0);
    }
}
