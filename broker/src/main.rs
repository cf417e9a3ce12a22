//! `spindle`: the broker (`spindle serve`) and the admin command line (topics, produce,
//! consume, groups), one binary as users of rpk expect.

use std::process::ExitCode;

use broker::{cli, config, server};
use clap::{Parser, Subcommand};

// Write buffers, frames and cached batches are large and short-lived; glibc's malloc hands such
// blocks back to the kernel and takes fresh pages for the next ones, which cost half the broker's
// CPU in page faults under load. mimalloc keeps and reuses them (see `keep_freed_memory`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `purge_delay` option (`mi_option_purge_delay` in mimalloc.h, 15 in both v2, where
/// it was `reset_delay`, and v3); the Rust bindings do not name it.
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// Tells mimalloc never to hand freed memory back to the kernel. By default it does so after a
/// second unused, and a broker's memory comes and goes on that scale (cached batches evicted,
/// request buffers freed between bursts): at 10,000 partitions the shard took 35,000-70,000 page
/// faults in 12 s, each a page zeroed again, 4-9% of its time; with this, a few dozen once the
/// process has grown to its peak. On a VM whose host takes back the guest's free pages, as this
/// project's test machines do, a page's first touch costs about 60 µs more. What the broker holds
/// is bounded by its budgets (cache, request and fetch memory, write buffers), so keeping its
/// peak costs no more than the budgets allow.
fn keep_freed_memory() {
    // SAFETY: mi_option_set only stores the value; mimalloc reads it when it next considers
    // purging, from any thread.
    #[allow(unsafe_code)]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, -1)
    };
}

#[derive(Debug, Parser)]
#[command(
    name = "spindle",
    version,
    about = "A Kafka-compatible streaming log broker"
)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

// Parsed once at start; boxing the settings would buy nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a broker.
    Serve(Box<config::ServeArgs>),
    #[command(flatten)]
    Admin(cli::Command),
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Serve(args) => serve(*args),
        Command::Admin(command) => cli::run(command),
    }
}

fn serve(args: config::ServeArgs) -> ExitCode {
    keep_freed_memory();
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let config = match args.resolve() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("spindle serve: {e}");
            return ExitCode::from(2);
        }
    };
    match server::run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("spindle serve: {e}");
            ExitCode::FAILURE
        }
    }
}
