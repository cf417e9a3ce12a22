//! The simulator's CI run: a few hundred seeds of 3 and 5 voters, the same seed replaying the
//! same run, and a deliberately broken disk that the checks must catch.

use sim::{SimConfig, run};

/// Runs `count` seeds from `start`; panics with the first failure's report.
fn all_pass(voters: usize, start: u64, count: u64) {
    let cfg = SimConfig::new(voters);
    let mut committed = 0;
    for seed in start..start + count {
        match run(seed, &cfg) {
            Ok(summary) => committed += summary.committed,
            Err(failure) => panic!("{failure}"),
        }
    }
    // Runs that commit nothing would check nothing.
    assert!(
        committed as u64 > count * 10,
        "only {committed} entries committed in {count} runs"
    );
}

#[test]
fn three_voters_keep_every_invariant_under_faults() {
    all_pass(3, 0, 200);
}

#[test]
fn five_voters_keep_every_invariant_under_faults() {
    all_pass(5, 1_000_000, 100);
}

#[test]
fn a_seed_replays_the_same_run() {
    let cfg = SimConfig::new(3);
    let a = run(42, &cfg).expect("seed 42");
    let b = run(42, &cfg).expect("seed 42 again");
    assert_eq!(a, b);
    assert_ne!(a.fingerprint, run(43, &cfg).expect("seed 43").fingerprint);
}

/// The broken variant: a disk that reports each write done when it is submitted, so votes and
/// appends are counted before they are durable, and a crash takes them back. Among the seeds CI
/// runs, some must break one of the simulator's own invariants (raft-rs's internal assertions
/// catch others; those are not what this test is about).
#[test]
fn simulator_catches_votes_counted_without_their_sync() {
    let cfg = SimConfig {
        disk_lies: true,
        ..SimConfig::new(3)
    };
    let failures: Vec<_> = (0..200).filter_map(|seed| run(seed, &cfg).err()).collect();
    let ours = ["two leaders", "committed entry", "differs", "a gap"];
    let caught = failures
        .iter()
        .find(|f| ours.iter().any(|o| f.what.contains(o)));
    let caught = caught.unwrap_or_else(|| {
        panic!(
            "no seed broke an invariant with a lying disk ({} stopped otherwise)",
            failures.len()
        )
    });
    eprintln!(
        "{} of 200 seeds failed; the first invariant broken:\n{caught}",
        failures.len()
    );
}
