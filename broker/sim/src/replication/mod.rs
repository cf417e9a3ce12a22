//! The replication world: 3 nodes, each with a `controller::replica::Replica` and a fake log
//! per partition; a controller that applies `model::Command`s with a commit delay (no Raft:
//! the quorum has a simulator of its own) and fences and brings back brokers by the rules of
//! `controller::brokers` and `controller::leadership`, with broker sessions in virtual time;
//! acks=all producers; the fake network, crashes (a power loss keeps only what was synced, a
//! killed process what was written) and pauses. Every choice comes from the seed.
//!
//! The network between two parties is a TCP connection: ordered, and a loss breaks it (what
//! was in flight on it is gone and both ends are told, later), so messages reorder only
//! across links. Partitions and one-way cuts include the controller.
//!
//! The checks ([`check`]) run after every step; a deliberately broken replica
//! (`ReplicaConfig::flaw`) must fail them.

mod check;
mod log;
mod world;

use std::fmt;

use controller::replica::Flaw;

pub use world::run;

/// What a replication run looks like. [`ReplicationConfig::new`] has what CI runs.
#[derive(Debug, Clone)]
pub struct ReplicationConfig {
    pub nodes: usize,
    pub partitions: usize,
    pub min_insync_replicas: usize,
    /// Faults are injected this long (virtual time).
    pub fault_ms: u64,
    /// Then, with every node up and the network whole, a record produced to every partition
    /// after the faults stopped must be acknowledged within this long.
    pub quiet_ms: u64,
    pub tick_ms: u64,
    pub net_delay_ms_max: u64,
    pub disk_latency_ms_max: u64,
    pub session_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub lag_time_max_ms: u64,
    /// The controller commits a decision this long (at most) after it is asked.
    pub commit_delay_ms_max: u64,
    /// A deliberately broken rule in every replica (the tests that show the checks catch it).
    pub flaw: Flaw,
    pub trace_lines: usize,
}

impl ReplicationConfig {
    pub fn new() -> ReplicationConfig {
        ReplicationConfig {
            nodes: 3,
            partitions: 2,
            min_insync_replicas: 2,
            fault_ms: 3_000,
            quiet_ms: 5_000,
            tick_ms: 10,
            net_delay_ms_max: 20,
            disk_latency_ms_max: 15,
            session_timeout_ms: 400,
            heartbeat_interval_ms: 50,
            lag_time_max_ms: 300,
            commit_delay_ms_max: 30,
            flaw: Flaw::None,
            trace_lines: 60,
        }
    }
}

impl Default for ReplicationConfig {
    fn default() -> Self {
        Self::new()
    }
}

/// What a replication run that passed did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationSummary {
    pub steps: u64,
    pub virtual_ms: u64,
    pub acknowledged: usize,
    pub committed: usize,
    pub leader_changes: u64,
    pub crashes: u64,
    /// A digest of the whole trace: the same seed gives the same run.
    pub fingerprint: u64,
}

/// A replication run that broke an invariant, with what replays it.
#[derive(Debug, Clone)]
pub struct ReplicationFailure {
    pub seed: u64,
    pub flaw: Flaw,
    pub step: u64,
    pub time_ms: u64,
    pub what: String,
    pub trace: Vec<String>,
}

impl fmt::Display for ReplicationFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "replication seed {} failed at step {} (t={} ms): {}",
            self.seed, self.step, self.time_ms, self.what
        )?;
        let flaw = match self.flaw {
            Flaw::None => "",
            Flaw::TruncateToHighWatermark => " --flaw truncate-to-hw",
            Flaw::AckBeforeIsr => " --flaw ack-before-isr",
        };
        writeln!(
            f,
            "replay: scripts/simulate --replication --start {} --seeds 1{flaw}",
            self.seed
        )?;
        writeln!(f, "last steps:")?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}
