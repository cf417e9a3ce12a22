//! The replication world's CI run: a hundred seeds, the same seed replaying the same run, and
//! the two deliberately broken replicas (truncating to the high watermark, acknowledging before
//! the ISR has the records) that the checks must catch. `scripts/simulate --replication` runs
//! many more seeds.

use controller::replica::Flaw;
use sim::replication::{ReplicationConfig, ReplicationFailure, run};

const SEEDS: u64 = 100;

#[test]
fn replication_keeps_every_invariant_under_faults() {
    let cfg = ReplicationConfig::new();
    let (mut acked, mut leader_changes, mut crashes) = (0, 0, 0);
    for seed in 0..SEEDS {
        match run(seed, &cfg) {
            Ok(s) => {
                acked += s.acknowledged;
                leader_changes += s.leader_changes;
                crashes += s.crashes;
            }
            Err(failure) => panic!("{failure}"),
        }
    }
    // Runs that acknowledge nothing, or never move a leader, would check little.
    assert!(
        acked as u64 > SEEDS * 20,
        "only {acked} records acknowledged in {SEEDS} runs"
    );
    assert!(
        leader_changes > SEEDS && crashes > SEEDS,
        "{leader_changes} leader changes and {crashes} crashes in {SEEDS} runs"
    );
}

#[test]
fn a_replication_seed_replays_the_same_run() {
    let cfg = ReplicationConfig::new();
    let a = run(7, &cfg).expect("seed 7");
    let b = run(7, &cfg).expect("seed 7 again");
    assert_eq!(a, b);
    assert_ne!(a.fingerprint, run(8, &cfg).expect("seed 8").fingerprint);
}

/// The seeds (of the CI range) a broken replica fails with one of the checks that catch lost
/// or changed records.
fn caught(flaw: Flaw) -> Vec<ReplicationFailure> {
    let cfg = ReplicationConfig {
        flaw,
        ..ReplicationConfig::new()
    };
    let ours = [
        "lost",
        "is not on ISR member",
        "differs",
        "acknowledged twice",
    ];
    let failures: Vec<ReplicationFailure> = (0..SEEDS).filter_map(|s| run(s, &cfg).err()).collect();
    let caught: Vec<ReplicationFailure> = failures
        .iter()
        .filter(|f| ours.iter().any(|o| f.what.contains(o)))
        .cloned()
        .collect();
    assert!(
        !caught.is_empty(),
        "no seed lost an acknowledged record with {flaw:?} ({} failed otherwise: {:?})",
        failures.len(),
        failures.first().map(|f| &f.what)
    );
    eprintln!(
        "{flaw:?}: {} of {SEEDS} seeds caught; the first:\n{}",
        caught.len(),
        caught[0]
    );
    caught
}

#[test]
fn simulator_catches_a_follower_that_truncates_to_its_high_watermark() {
    caught(Flaw::TruncateToHighWatermark);
}

#[test]
fn simulator_catches_a_leader_that_acknowledges_before_the_isr_has_the_records() {
    caught(Flaw::AckBeforeIsr);
}
