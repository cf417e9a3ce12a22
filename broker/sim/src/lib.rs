//! A seeded deterministic simulator of the controller quorum (`broker/controller`): 3 or 5
//! voters through a fake network (loss, delay, reordering, duplication, partitions both ways
//! and one way), fake disks (a write completes later; a crash loses what had not completed),
//! fake time (ticks) and crashes with restarts from what the disk kept. Every choice comes from
//! the seed, so a failing seed replays exactly.
//!
//! Checked after every step: at most one leader per term; a committed entry never changes and
//! is the same on every node; every node applies entries in order with no gaps, and its state
//! (a digest of everything applied) matches every other node's at each index, snapshots
//! included; and once the faults stop, every node applies a new proposal within a bound.
//!
//! [`replication`] is the second world: 3 nodes with a `controller::replica::Replica` and a
//! fake log per partition, a controller applying the rules of `controller::brokers` and
//! `controller::leadership`, acks=all producers, and the same kinds of faults; its checks are
//! about acknowledged records, committed prefixes, leaders and high watermarks.
//!
//! Dev-only: nothing ships it. `cargo test -p sim` runs a few hundred seeds;
//! `scripts/simulate --seeds N [--replication]` runs many more.

mod agenda;
mod check;
mod disk;
mod network;
pub mod replication;
mod rng;
mod world;

pub use world::{Failure, SimConfig, Summary, run};
