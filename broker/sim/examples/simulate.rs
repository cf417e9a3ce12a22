//! `scripts/simulate` (this example, built in release): runs many seeds of the controller quorum
//! simulation and reports the first failure with its trace (exit 1), or a summary (exit 0).

use clap::Parser;
use sim::{SimConfig, run};

#[derive(Debug, Parser)]
#[command(about = "Seeded deterministic simulation of the controller quorum")]
struct Args {
    /// How many seeds to run.
    #[arg(long, default_value_t = 1000)]
    seeds: u64,
    /// The first seed.
    #[arg(long, default_value_t = 0)]
    start: u64,
    /// Voters in the quorum.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=9))]
    voters: u64,
    /// The broken variant: persists are reported done before they are durable.
    #[arg(long)]
    disk_lies: bool,
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    let cfg = SimConfig {
        disk_lies: args.disk_lies,
        ..SimConfig::new(args.voters as usize)
    };
    let (mut steps, mut committed, mut crashes, mut restores) = (0u64, 0u64, 0u64, 0u64);
    for seed in args.start..args.start.saturating_add(args.seeds) {
        match run(seed, &cfg) {
            Ok(s) => {
                steps += s.steps;
                committed += s.committed as u64;
                crashes += s.crashes;
                restores += s.snapshots_restored;
            }
            Err(failure) => {
                eprintln!("{failure}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{} seeds from {} with {} voters passed: {steps} steps, {committed} entries committed, {crashes} crashes, {restores} snapshots restored",
        args.seeds, args.start, args.voters
    );
    std::process::ExitCode::SUCCESS
}
