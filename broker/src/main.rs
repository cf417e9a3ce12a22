//! `spindle`: the broker (`spindle serve`) and the admin command line (topics, produce,
//! consume, groups), one binary as users of rpk expect.

use std::process::ExitCode;

use broker::{cli, config, server};
use clap::{Parser, Subcommand};

// Write buffers, frames and cached batches are large and short-lived; glibc's malloc hands such
// blocks back to the kernel and takes fresh pages for the next ones, which cost half the broker's
// CPU in page faults under load. mimalloc keeps and reuses them.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

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
