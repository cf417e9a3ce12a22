//! `spindle`: the broker (`spindle serve`) and the admin command line (topics, produce,
//! consume, groups), one binary as users of rpk expect.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

#[derive(Debug, Parser)]
#[command(name = "spindle", version, about = "A Kafka-compatible streaming log broker")]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Runs a broker.
    Serve,
    #[command(flatten)]
    Admin(cli::Command),
}

fn main() -> ExitCode {
    let args = Args::parse();
    match args.command {
        Command::Serve => ExitCode::SUCCESS,
        Command::Admin(command) => cli::run(command),
    }
}
