//! `scripts/simulate` (this example, built in release): runs many seeds of the controller quorum
//! simulation (or, with `--replication`, of the replication world) and reports the first failure
//! with its trace (exit 1), or a summary (exit 0).

use clap::{Parser, ValueEnum};
use controller::replica::Flaw;
use sim::replication::{self, ReplicationConfig};
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
    /// The replication world (3 nodes, replicas, controller rules, acks=all producers)
    /// instead of the controller quorum.
    #[arg(long)]
    replication: bool,
    /// (replication) A deliberately broken replica rule, which the checks must catch.
    #[arg(long, value_enum, requires = "replication")]
    flaw: Option<FlawArg>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum FlawArg {
    /// A new follower truncates to its high watermark instead of by leader epoch.
    TruncateToHw,
    /// The leader acknowledges once its own log has the records, not the ISR.
    AckBeforeIsr,
}

fn replication_main(args: &Args) -> std::process::ExitCode {
    let cfg = ReplicationConfig {
        flaw: match args.flaw {
            None => Flaw::None,
            Some(FlawArg::TruncateToHw) => Flaw::TruncateToHighWatermark,
            Some(FlawArg::AckBeforeIsr) => Flaw::AckBeforeIsr,
        },
        ..ReplicationConfig::new()
    };
    let (mut steps, mut acked, mut leader_changes, mut crashes) = (0u64, 0u64, 0u64, 0u64);
    for seed in args.start..args.start.saturating_add(args.seeds) {
        match replication::run(seed, &cfg) {
            Ok(s) => {
                steps += s.steps;
                acked += s.acknowledged as u64;
                leader_changes += s.leader_changes;
                crashes += s.crashes;
            }
            Err(failure) => {
                eprintln!("{failure}");
                return std::process::ExitCode::FAILURE;
            }
        }
    }
    println!(
        "{} replication seeds from {} passed: {steps} steps, {acked} records acknowledged, {leader_changes} leader changes, {crashes} crashes",
        args.seeds, args.start
    );
    std::process::ExitCode::SUCCESS
}

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    if args.replication {
        return replication_main(&args);
    }
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
