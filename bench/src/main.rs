//! `spindle-bench`: a Kafka-protocol load generator. See `options.rs` for the command line and
//! `docs/benchmarks.md` for the standard scenarios.
//!
//! Modules: `options` (command line), `cluster` (topic discovery and creation), `producer` and
//! `pipeline` (batches, requests in flight, acknowledgements), `consumer` (fetching, counting),
//! `batch` (v2 record batches written and read directly), `keys` (keyed records),
//! `stamp` (the send time in each value), `stats` (counters, histograms), `progress`,
//! `report` and `hgrm` (the outputs), `run` (executors and the main loop).

mod accumulator;
mod batch;
mod cluster;
mod consumer;
mod error;
mod hgrm;
mod keys;
mod options;
mod pipeline;
mod producer;
mod progress;
mod report;
mod run;
mod stamp;
mod stats;

use std::process::ExitCode;

use clap::Parser;

use crate::options::Options;

// Every batch is a `batch.size` buffer, and with many partitions most leave with a record or two:
// glibc's malloc spent a fifth of the producer's core allocating and consolidating them (10,000
// partitions, 16 KiB batches). The Java client pools these buffers (its `BufferPool`); mimalloc's
// free lists do the same here, so the load generator is not what runs out of core first.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The run was done but the broker answered errors or records went missing.
const EXIT_ERRORS: u8 = 2;

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let options = match Options::try_parse() {
        Ok(options) => options,
        Err(e) => {
            // Help and version go to stdout with success; usage errors exit 1 like every other
            // run that could not be done (clap's own exit would be 2, which means errors here).
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::FAILURE
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let settings = match options.settings() {
        Ok(settings) => settings,
        Err(e) => {
            eprintln!("spindle-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = match run::run(&settings) {
        Ok(outcome) => outcome,
        Err(e) => {
            eprintln!("spindle-bench: {e}");
            return ExitCode::FAILURE;
        }
    };
    print!("{}", outcome.report.text(&settings, outcome.partitions));
    let written = report::write_files(
        &settings,
        &outcome.report,
        &outcome.shared,
        outcome.partitions,
    );
    if let Err(e) = written {
        eprintln!("spindle-bench: {e}");
        return ExitCode::FAILURE;
    }
    if let Some(fatal) = &outcome.report.fatal {
        eprintln!("spindle-bench: {fatal}");
        ExitCode::FAILURE
    } else if outcome.report.error_total() > 0 {
        ExitCode::from(EXIT_ERRORS)
    } else {
        ExitCode::SUCCESS
    }
}
