//! One partition's replica on one node, free of IO: the rules of replication (who is in sync,
//! where the high watermark is, what a follower truncates, what may be acknowledged), fed with
//! what happened and returning what to do.
//!
//! The host (a broker shard) owns one [`Replica`] per partition it serves. It tells it:
//! - the partition's committed state ([`Replica::on_metadata`]: replicas, ISR, leader, epochs);
//! - where its own log is ([`LogView`]: end, written and durable offsets) whenever that moves
//!   ([`Replica::on_local_log`]);
//! - what its peers said ([`Replica::on_append`], [`Replica::on_progress`],
//!   [`Replica::on_epoch_query`], [`Replica::on_epoch_end`], [`Replica::on_stale`],
//!   [`Replica::on_disconnected`]);
//! - the time, as a number ([`Replica::on_tick`]).
//!
//! and carries out the [`Action`]s returned, in order: messages to peers, a new high
//! watermark, an ISR change to propose to the controller, a truncation of its log. It asks
//! [`Replica::admit`] before an append and [`Replica::verdict`] while an acks=all produce waits.
//!
//! # The protocol (leader-driven)
//! The leader streams its log to each follower from the offset the follower needs
//! ([`Replica::to_send`], [`Replica::sent`]); an `Append` without batches is a probe, answered
//! with the follower's position. A follower that has not yet agreed with this leader epoch on
//! where its log diverges answers the first message with an `EpochQuery` for its latest epoch
//! and truncates by the answer (KIP-101, KIP-279): to where that epoch ends on the leader, or
//! where it ends locally, whichever is lower; asking again for an older epoch when the leader
//! does not have its own. Never to its high watermark. After that it takes appends at its log
//! end and reports `Progress` as its log is written and made durable.
//!
//! # Invariants
//! - The high watermark never goes back within a leader epoch; on a leader it is at most every
//!   in-sync replica's acknowledged offset (durable or written, as the broker's durability
//!   says), counting the ISR being proposed too while a change is in flight, and it moves only
//!   while the committed ISR has `min_insync_replicas` members.
//! - A produce is acknowledged only by a leader of the epoch it was appended in, once the high
//!   watermark passed its records.
//! - A follower takes appends only from the leader of its current epoch, only at its log end,
//!   and only after it truncated where this leader's log diverges from its own.

use std::collections::{BTreeMap, BTreeSet};

use model::{LeaderEpoch, NodeId, PartitionEpoch, PartitionState};

/// How often a leader probes a follower whose position it does not know.
pub const PROBE_INTERVAL_MS: u64 = 500;
/// How long a leader waits before it proposes an ISR change again that was not seen committed.
pub const PROPOSAL_RETRY_MS: u64 = 1_000;

/// A leader epoch's first offset in a log (a line of Kafka's `leader-epoch-checkpoint`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochStart {
    pub epoch: i32,
    pub start_offset: i64,
}

/// Where the local log is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LogView {
    pub start: i64,
    /// The offset the next append gets.
    pub end: i64,
    /// Every batch below is written to its file (survives the process).
    pub written: i64,
    /// Every batch below is synced (survives the machine).
    pub durable: i64,
}

/// What a replica must have before it counts for acks=all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AckLevel {
    /// Synced (`--durability fsync`, the default).
    Durable,
    /// Written (`--durability flush-policy`).
    Written,
}

/// Deliberately broken rules, for the simulator's tests that show its checks catch them.
/// Never anything but `None` outside those tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Flaw {
    #[default]
    None,
    /// A new follower truncates to its high watermark instead of by leader epoch.
    TruncateToHighWatermark,
    /// The leader's high watermark follows its own log alone, not the ISR's.
    AckBeforeIsr,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplicaConfig {
    pub me: NodeId,
    /// `min.insync.replicas` of the topic.
    pub min_insync_replicas: usize,
    /// `replica.lag.time.max.ms`: a follower not caught up for this long leaves the ISR.
    pub lag_time_max_ms: u64,
    pub ack_level: AckLevel,
    pub flaw: Flaw,
}

/// Something said to a peer about this partition (the host adds the partition's key; an
/// `Append` carries the batches the host read from `from_offset`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Say {
    /// (leader) A probe: no batches, the leader's high watermark.
    Probe {
        leader_epoch: i32,
        high_watermark: i64,
        log_end: i64,
    },
    /// (leader) Where the asked epoch ends in the leader's log.
    EpochEnd {
        leader_epoch: i32,
        epoch: Option<i32>,
        end_offset: i64,
    },
    /// (follower) Where its log is.
    Progress {
        leader_epoch: i32,
        log_end: i64,
        written: i64,
        durable: i64,
    },
    /// (follower) Where does `epoch` end on the leader?
    EpochQuery { leader_epoch: i32, epoch: i32 },
    /// (follower) The message was not taken: the follower is at `follower_epoch`, or (the same
    /// epoch) not where the append starts. The leader starts over with a probe.
    Stale {
        leader_epoch: i32,
        follower_epoch: i32,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    Send {
        to: NodeId,
        say: Say,
    },
    /// The high watermark moved: wake consumers and acks=all waiters.
    HighWatermark(i64),
    /// Propose this ISR to the controller (Kafka's AlterPartition); report the outcome with
    /// [`Replica::on_metadata`] (committed) or [`Replica::on_proposal_failed`].
    ProposeIsr {
        isr: Vec<NodeId>,
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
    },
    /// Cut the local log at this offset (everything at or after it goes), then report the log
    /// with [`Replica::on_local_log`].
    Truncate(i64),
}

/// Why a produce is refused before anything is appended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// This replica does not lead the partition (NOT_LEADER_OR_FOLLOWER).
    NotLeader,
    /// acks=all with an ISR smaller than `min.insync.replicas` (NOT_ENOUGH_REPLICAS).
    NotEnoughReplicas { isr: usize, min: usize },
}

/// Where an acks=all produce appended in `epoch` and ending before `next_offset` stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not yet: wait for the high watermark or the partition's state to change.
    Wait,
    Done,
    /// The ISR shrank below `min.insync.replicas` (NOT_ENOUGH_REPLICAS_AFTER_APPEND).
    NotEnoughReplicasAfterAppend,
    /// This replica no longer leads that epoch (NOT_LEADER_OR_FOLLOWER): never a success.
    NotLeader,
}

/// What a follower does with an append's batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Take {
    /// Append them (byte for byte), then report the log with [`Replica::on_local_log`].
    Append,
    /// Drop them (the actions say why to the leader).
    Drop,
}

/// A leader's view of one follower.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Follower {
    /// The offset to stream from; `None` until its position is known (probe it).
    next: Option<i64>,
    log_end: i64,
    written: i64,
    durable: i64,
    /// The last time it was caught up with the leader's end (Kafka's lastCaughtUpTimeMs).
    caught_up_ms: u64,
    last_progress_ms: u64,
    /// The leader's end when that progress came.
    leader_end_at_last_progress: i64,
    last_probe_ms: Option<u64>,
    /// The high watermark the last append or probe to it carried.
    high_watermark_sent: i64,
}

impl Follower {
    fn new(now_ms: u64) -> Follower {
        Follower {
            next: None,
            log_end: -1,
            written: -1,
            durable: -1,
            caught_up_ms: now_ms,
            last_progress_ms: now_ms,
            leader_end_at_last_progress: i64::MAX,
            last_probe_ms: None,
            high_watermark_sent: -1,
        }
    }

    fn acked(&self, level: AckLevel) -> i64 {
        match level {
            AckLevel::Durable => self.durable,
            AckLevel::Written => self.written,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Leading {
    epoch: LeaderEpoch,
    /// The log end when this leadership began: every in-sync replica has it below once the
    /// high watermark reaches it.
    epoch_start: i64,
    followers: BTreeMap<NodeId, Follower>,
    /// An ISR change proposed and not yet seen committed or overtaken.
    pending: Option<Pending>,
    /// No new ISR change is proposed before this (one was just refused).
    proposals_after_ms: u64,
}

/// An ISR change in flight. Until the partition epoch moves past the one it was proposed on,
/// it may still commit (a proposal whose answer was lost may have), so the high watermark keeps
/// counting its members, and a failed one is proposed again, never replaced by another.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Pending {
    isr: Vec<NodeId>,
    /// The partition epoch it takes the partition to.
    partition_epoch: PartitionEpoch,
    /// When to propose it again after a failure.
    retry_at_ms: Option<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Following {
    leader: NodeId,
    epoch: LeaderEpoch,
    /// It truncated where this epoch's leader diverges: it takes appends now.
    reconciled: bool,
    /// The truncation reconciling decided is not done yet: the log's position says nothing
    /// until then (a produce admitted while this replica still led may land meanwhile; the
    /// truncation, which waits for it, cuts it).
    truncating: bool,
    /// The epoch asked about, awaiting the leader's `EpochEnd`.
    asked: Option<i32>,
    /// What it last reported, so it reports only what changed.
    reported: Option<(i64, i64, i64)>,
    /// The leader's high watermark as last heard.
    leader_high_watermark: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Role {
    Leader(Leading),
    Follower(Following),
    /// No leader, or this node is not a replica: nothing is appended here.
    Idle,
}

/// One partition's replica on this node.
#[derive(Debug, Clone)]
pub struct Replica {
    config: ReplicaConfig,
    state: PartitionState,
    role: Role,
    high_watermark: i64,
    log: LogView,
}

impl Replica {
    /// A replica opened with its log at `log` (its high watermark starts there when the
    /// partition has a single replica, otherwise at the log start until its leader says more;
    /// the host may raise it from a checkpoint with the next [`Replica::on_metadata`]).
    pub fn new(
        config: ReplicaConfig,
        state: &PartitionState,
        log: LogView,
        high_watermark: i64,
        now_ms: u64,
    ) -> (Replica, Vec<Action>) {
        let mut replica = Replica {
            config,
            state: state.clone(),
            role: Role::Idle,
            high_watermark: high_watermark.clamp(log.start, log.end),
            log,
        };
        let actions = replica.on_metadata(state, log, now_ms);
        (replica, actions)
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark
    }

    pub fn config(&self) -> &ReplicaConfig {
        &self.config
    }

    pub fn state(&self) -> &PartitionState {
        &self.state
    }

    pub fn leads(&self) -> Option<LeaderEpoch> {
        match &self.role {
            Role::Leader(l) => Some(l.epoch),
            _ => None,
        }
    }

    /// The leader this replica follows, and in which epoch.
    pub fn follows(&self) -> Option<(NodeId, LeaderEpoch)> {
        match &self.role {
            Role::Follower(f) => Some((f.leader, f.epoch)),
            _ => None,
        }
    }

    /// Whether a leader's offsets are final: its high watermark reached where its epoch
    /// began (until then ListOffsets latest gets OFFSET_NOT_AVAILABLE).
    pub fn offsets_available(&self) -> bool {
        match &self.role {
            Role::Leader(l) => self.high_watermark >= l.epoch_start,
            _ => false,
        }
    }

    pub fn set_min_insync_replicas(&mut self, min: usize, now_ms: u64) -> Vec<Action> {
        self.config.min_insync_replicas = min.max(1);
        let mut actions = Vec::new();
        self.advance_high_watermark(&mut actions, now_ms);
        actions
    }

    /// May a produce with these acks append? The epoch to stamp its batches with, or why not.
    pub fn admit(&self, acks_all: bool) -> Result<LeaderEpoch, Refusal> {
        let Role::Leader(leading) = &self.role else {
            return Err(Refusal::NotLeader);
        };
        let isr = self.state.isr.len();
        let min = self.config.min_insync_replicas;
        if acks_all && isr < min {
            return Err(Refusal::NotEnoughReplicas { isr, min });
        }
        Ok(leading.epoch)
    }

    /// Where an acks=all produce appended in `epoch`, ending before `next_offset`, stands.
    pub fn verdict(&self, epoch: LeaderEpoch, next_offset: i64) -> Verdict {
        match &self.role {
            Role::Leader(l) if l.epoch == epoch => {}
            _ => return Verdict::NotLeader,
        }
        if self.state.isr.len() < self.config.min_insync_replicas {
            return Verdict::NotEnoughReplicasAfterAppend;
        }
        if self.high_watermark >= next_offset {
            Verdict::Done
        } else {
            Verdict::Wait
        }
    }

    /// The partition's committed state changed (or is first known).
    pub fn on_metadata(
        &mut self,
        state: &PartitionState,
        log: LogView,
        now_ms: u64,
    ) -> Vec<Action> {
        self.log = log;
        let mut actions = Vec::new();
        let me = self.config.me;
        self.state = state.clone();
        let is_replica = state.replicas.contains(&me);
        match (&mut self.role, state.leader) {
            (Role::Leader(l), Some(leader)) if leader == me && l.epoch == state.leader_epoch => {
                // The same leadership. An ISR change in flight is over once the partition
                // epoch reached it: committed, or overtaken by another change (then it is stale).
                if l.pending
                    .as_ref()
                    .is_some_and(|p| state.partition_epoch >= p.partition_epoch)
                {
                    l.pending = None;
                }
                for r in &state.replicas {
                    if *r != me {
                        l.followers
                            .entry(*r)
                            .or_insert_with(|| Follower::new(now_ms));
                    }
                }
                l.followers.retain(|n, _| state.replicas.contains(n));
            }
            (_, Some(leader)) if leader == me && is_replica => {
                let mut followers = BTreeMap::new();
                for r in &state.replicas {
                    if *r != me {
                        followers.insert(*r, Follower::new(now_ms));
                    }
                }
                self.role = Role::Leader(Leading {
                    epoch: state.leader_epoch,
                    epoch_start: log.end,
                    followers,
                    pending: None,
                    proposals_after_ms: 0,
                });
                self.probe_all(&mut actions, now_ms);
            }
            (Role::Follower(f), Some(leader))
                if leader == f.leader && f.epoch == state.leader_epoch => {}
            (_, Some(leader)) if is_replica => {
                self.role = Role::Follower(Following {
                    leader,
                    epoch: state.leader_epoch,
                    reconciled: false,
                    truncating: false,
                    asked: None,
                    reported: None,
                    leader_high_watermark: -1,
                });
            }
            _ => self.role = Role::Idle,
        }
        self.advance_high_watermark(&mut actions, now_ms);
        actions
    }

    /// The local log moved (an append, a write or sync completed, a truncation done).
    pub fn on_local_log(&mut self, log: LogView, now_ms: u64) -> Vec<Action> {
        self.log = log;
        let mut actions = Vec::new();
        match &mut self.role {
            Role::Leader(_) => self.advance_high_watermark(&mut actions, now_ms),
            Role::Follower(f) if f.reconciled && !f.truncating => {
                let position = (log.end, log.written, log.durable);
                if f.reported != Some(position) {
                    f.reported = Some(position);
                    actions.push(Action::Send {
                        to: f.leader,
                        say: Say::Progress {
                            leader_epoch: f.epoch.0,
                            log_end: log.end,
                            written: log.written,
                            durable: log.durable,
                        },
                    });
                }
                self.follow_high_watermark(None, &mut actions);
            }
            _ => {}
        }
        actions
    }

    /// (follower) The truncation asked for is done: from now on the log's position is this
    /// leader epoch's, reported to the leader.
    pub fn on_truncated(&mut self, log: LogView, now_ms: u64) -> Vec<Action> {
        if let Role::Follower(f) = &mut self.role {
            f.truncating = false;
            f.reported = None;
        }
        self.on_local_log(log, now_ms)
    }

    /// Time passed: leave followers that lag out of the ISR, probe unknown ones.
    pub fn on_tick(&mut self, now_ms: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        self.retry_proposal(&mut actions, now_ms);
        self.probe_all(&mut actions, now_ms);
        self.shrink_isr(&mut actions, now_ms);
        self.advance_high_watermark(&mut actions, now_ms);
        actions
    }

    /// The ISR change proposed got no answer (the controller moved, the request timed out): it
    /// may still commit, so it stays in flight, proposed again after [`PROPOSAL_RETRY_MS`],
    /// until the partition's epoch moves.
    pub fn on_proposal_failed(&mut self, now_ms: u64) {
        if let Role::Leader(l) = &mut self.role
            && let Some(p) = &mut l.pending
        {
            p.retry_at_ms = Some(now_ms.saturating_add(PROPOSAL_RETRY_MS));
        }
    }

    /// The controller refused the ISR change proposed: it was not committed and never will be
    /// (a refused command is never applied later). The rules may propose another, after
    /// [`PROPOSAL_RETRY_MS`] (a change refused, such as a fenced follower's return, would only be
    /// refused again until the metadata moves).
    pub fn on_proposal_refused(&mut self, now_ms: u64) {
        if let Role::Leader(l) = &mut self.role {
            l.pending = None;
            l.proposals_after_ms = now_ms.saturating_add(PROPOSAL_RETRY_MS);
        }
    }

    fn retry_proposal(&mut self, actions: &mut Vec<Action>, now_ms: u64) {
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        let epoch = l.epoch;
        if let Some(p) = &mut l.pending
            && p.retry_at_ms.is_some_and(|t| now_ms >= t)
        {
            p.retry_at_ms = None;
            actions.push(Action::ProposeIsr {
                isr: p.isr.clone(),
                leader_epoch: epoch,
                partition_epoch: p.partition_epoch,
            });
        }
    }

    /// (leader) The offsets follower `from` needs batches for, if it needs any: from where it
    /// is to this log's end as the replica knows it.
    pub fn to_send(&self, from: NodeId) -> Option<(i64, i64)> {
        let Role::Leader(l) = &self.role else {
            return None;
        };
        let next = l.followers.get(&from)?.next?;
        (next < self.log.end).then_some((next, self.log.end))
    }

    /// The followers a leader streams to.
    pub fn followers(&self) -> impl Iterator<Item = NodeId> + '_ {
        let followers = match &self.role {
            Role::Leader(l) => Some(l.followers.keys().copied()),
            _ => None,
        };
        followers.into_iter().flatten()
    }

    /// (leader) Batches up to `next` went out to `to`.
    pub fn sent(&mut self, to: NodeId, next: i64) {
        if let Role::Leader(l) = &mut self.role
            && let Some(f) = l.followers.get_mut(&to)
        {
            debug_assert!(f.next.is_some_and(|n| n <= next) && next <= self.log.end);
            f.next = Some(next);
            f.high_watermark_sent = self.high_watermark;
        }
    }

    /// (follower) The leader `from` sent an append at `base_offset` (`has_batches` false: a
    /// probe) in `leader_epoch`, with its high watermark.
    pub fn on_append(
        &mut self,
        from: NodeId,
        leader_epoch: i32,
        high_watermark: i64,
        base_offset: i64,
        has_batches: bool,
        epochs: &[EpochStart],
    ) -> (Take, Vec<Action>) {
        let mut actions = Vec::new();
        let log = self.log;
        let Role::Follower(f) = &mut self.role else {
            let follower_epoch = self.state.leader_epoch.0;
            actions.push(Action::Send {
                to: from,
                say: Say::Stale {
                    leader_epoch,
                    follower_epoch,
                },
            });
            return (Take::Drop, actions);
        };
        if from != f.leader || leader_epoch != f.epoch.0 {
            actions.push(Action::Send {
                to: from,
                say: Say::Stale {
                    leader_epoch,
                    follower_epoch: f.epoch.0,
                },
            });
            return (Take::Drop, actions);
        }
        if f.truncating {
            return (Take::Drop, actions);
        }
        if !f.reconciled {
            if f.asked.is_none() {
                self.reconcile(None, log, epochs, &mut actions);
            }
            return (Take::Drop, actions);
        }
        self.follow_high_watermark(Some(high_watermark), &mut actions);
        let Role::Follower(f) = &mut self.role else {
            unreachable!("still a follower")
        };
        if !has_batches {
            f.reported = Some((log.end, log.written, log.durable));
            actions.push(Action::Send {
                to: from,
                say: Say::Progress {
                    leader_epoch,
                    log_end: log.end,
                    written: log.written,
                    durable: log.durable,
                },
            });
            return (Take::Drop, actions);
        }
        if base_offset != log.end {
            actions.push(Action::Send {
                to: from,
                say: Say::Stale {
                    leader_epoch,
                    follower_epoch: leader_epoch,
                },
            });
            return (Take::Drop, actions);
        }
        (Take::Append, actions)
    }

    /// (leader) Follower `from` asks where `epoch` ends in this log.
    pub fn on_epoch_query(
        &mut self,
        from: NodeId,
        leader_epoch: i32,
        epoch: i32,
        epochs: &[EpochStart],
    ) -> Vec<Action> {
        let Role::Leader(l) = &self.role else {
            return vec![Action::Send {
                to: from,
                say: Say::Stale {
                    leader_epoch,
                    follower_epoch: self.state.leader_epoch.0,
                },
            }];
        };
        if leader_epoch != l.epoch.0 {
            return vec![Action::Send {
                to: from,
                say: Say::Stale {
                    leader_epoch,
                    follower_epoch: l.epoch.0,
                },
            }];
        }
        let (found, end_offset) = match end_of_epoch(epochs, epoch, self.log.end) {
            Some((e, end)) => (Some(e), end),
            None => (None, self.log.start),
        };
        vec![Action::Send {
            to: from,
            say: Say::EpochEnd {
                leader_epoch,
                epoch: found,
                end_offset,
            },
        }]
    }

    /// (follower) The leader answered where an epoch ends on it.
    pub fn on_epoch_end(
        &mut self,
        from: NodeId,
        leader_epoch: i32,
        epoch: Option<i32>,
        end_offset: i64,
        epochs: &[EpochStart],
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let log = self.log;
        match &self.role {
            Role::Follower(f)
                if f.leader == from
                    && f.epoch.0 == leader_epoch
                    && !f.reconciled
                    && f.asked.is_some() => {}
            _ => return actions,
        }
        self.reconcile(Some((epoch, end_offset)), log, epochs, &mut actions);
        actions
    }

    /// (leader) A follower's position.
    pub fn on_progress(
        &mut self,
        from: NodeId,
        leader_epoch: i32,
        log_end: i64,
        written: i64,
        durable: i64,
        now_ms: u64,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let end = self.log.end;
        let Role::Leader(l) = &mut self.role else {
            return actions;
        };
        if leader_epoch != l.epoch.0 {
            return actions;
        }
        let Some(f) = l.followers.get_mut(&from) else {
            return actions;
        };
        if log_end > end {
            // It holds more than this leader: it did not reconcile with this epoch. Nothing
            // it says counts; it asks first on the next probe.
            f.next = None;
            return actions;
        }
        if log_end >= end {
            f.caught_up_ms = now_ms;
        } else if log_end >= f.leader_end_at_last_progress {
            f.caught_up_ms = f.caught_up_ms.max(f.last_progress_ms);
        }
        f.last_progress_ms = now_ms;
        f.leader_end_at_last_progress = end;
        f.log_end = log_end;
        f.written = written.min(log_end);
        f.durable = durable.min(log_end);
        if f.next.is_none() {
            f.next = Some(log_end);
        }
        self.expand_isr(&mut actions, now_ms);
        self.advance_high_watermark(&mut actions, now_ms);
        actions
    }

    /// A peer did not take a message: start over with it.
    pub fn on_stale(&mut self, from: NodeId, now_ms: u64) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Role::Leader(l) = &mut self.role
            && let Some(f) = l.followers.get_mut(&from)
        {
            f.next = None;
            f.last_probe_ms = Some(now_ms);
        }
        actions.extend(self.on_disconnected_inner(from));
        actions
    }

    /// Every connection with `node` is down: what was in flight is lost.
    pub fn on_disconnected(&mut self, node: NodeId) -> Vec<Action> {
        if let Role::Leader(l) = &mut self.role
            && let Some(f) = l.followers.get_mut(&node)
        {
            f.next = None;
            f.last_probe_ms = None;
        }
        self.on_disconnected_inner(node)
    }

    fn on_disconnected_inner(&mut self, node: NodeId) -> Vec<Action> {
        if let Role::Follower(f) = &mut self.role
            && f.leader == node
        {
            // Whatever it asked or said may be lost: ask and report again.
            f.asked = None;
            f.reported = None;
        }
        Vec::new()
    }

    /// Probes the followers that need to hear from this leader: one whose position is not
    /// known; an idle one (nothing to send it) that has not yet heard the high watermark, or has
    /// not answered for a while (a third of the lag allowed while in the ISR, so a live one
    /// never falls out of it for being idle; every [`PROBE_INTERVAL_MS`] outside it, so one
    /// that came back joins again soon).
    fn probe_all(&mut self, actions: &mut Vec<Action>, now_ms: u64) {
        let hw = self.high_watermark;
        let end = self.log.end;
        let quiet_in_isr_ms = (self.config.lag_time_max_ms / 3).max(PROBE_INTERVAL_MS / 5);
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        for (node, f) in &mut l.followers {
            let since_probe_ms = f
                .last_probe_ms
                .map_or(u64::MAX, |t| now_ms.saturating_sub(t));
            let due = match f.next {
                None => since_probe_ms >= PROBE_INTERVAL_MS,
                Some(next) if next >= end => {
                    let quiet_ms = if self.state.isr.contains(node) {
                        quiet_in_isr_ms
                    } else {
                        PROBE_INTERVAL_MS
                    };
                    let quiet = now_ms.saturating_sub(f.last_progress_ms) >= quiet_ms
                        && since_probe_ms >= quiet_ms.min(PROBE_INTERVAL_MS);
                    quiet || f.high_watermark_sent < hw
                }
                // Batches are on their way; they carry the high watermark.
                Some(_) => false,
            };
            if due {
                f.last_probe_ms = Some(now_ms);
                f.high_watermark_sent = hw;
                actions.push(Action::Send {
                    to: *node,
                    say: Say::Probe {
                        leader_epoch: l.epoch.0,
                        high_watermark: hw,
                        log_end: end,
                    },
                });
            }
        }
    }

    /// (follower) One step of finding where this log diverges from the leader's: ask about
    /// an epoch, or (with the leader's answer) truncate and start taking appends.
    fn reconcile(
        &mut self,
        answer: Option<(Option<i32>, i64)>,
        log: LogView,
        epochs: &[EpochStart],
        actions: &mut Vec<Action>,
    ) {
        let flaw = self.config.flaw;
        let hw = self.high_watermark;
        let Role::Follower(f) = &mut self.role else {
            return;
        };
        let cut = if flaw == Flaw::TruncateToHighWatermark {
            Some(hw)
        } else {
            match (answer, f.asked) {
                // First step: ask about the latest epoch this log has.
                (None, _) => ask(f, epochs.last(), log.start, actions),
                // The leader has no epoch this old: nothing here is known to be on it.
                (Some((None, _)), _) => Some(log.start),
                (Some((Some(theirs), leader_end)), _) => {
                    if epochs.iter().any(|e| e.epoch == theirs) {
                        let local_end =
                            end_of_epoch(epochs, theirs, log.end).map_or(log.end, |(_, end)| end);
                        Some(leader_end.min(local_end))
                    } else {
                        // KIP-279: ask again with this log's latest epoch older than theirs.
                        let older = epochs.iter().rev().find(|e| e.epoch < theirs);
                        ask(f, older, log.start, actions)
                    }
                }
            }
        };
        if let Some(cut) = cut {
            // Always cut, even at the end this replica knows: the log may have grown since
            // (a produce it admitted as leader), and the cut waits for that append to finish.
            f.reconciled = true;
            f.truncating = true;
            f.asked = None;
            f.reported = None;
            actions.push(Action::Truncate(cut.clamp(log.start, log.end)));
        }
    }

    /// (follower) The high watermark is the leader's, as far as this log goes; it goes down
    /// only with the log (a truncation below it, which only an unclean election makes).
    fn follow_high_watermark(&mut self, leader_hw: Option<i64>, actions: &mut Vec<Action>) {
        let Role::Follower(f) = &mut self.role else {
            return;
        };
        if let Some(hw) = leader_hw {
            f.leader_high_watermark = f.leader_high_watermark.max(hw);
        }
        let next = self
            .high_watermark
            .max(f.leader_high_watermark)
            .min(self.log.end);
        if next != self.high_watermark {
            self.high_watermark = next;
            actions.push(Action::HighWatermark(next));
        }
    }

    fn own_acked(&self) -> i64 {
        match self.config.ack_level {
            AckLevel::Durable => self.log.durable,
            AckLevel::Written => self.log.written,
        }
    }

    /// (leader) Raise the high watermark to what every in-sync replica acknowledged.
    fn advance_high_watermark(&mut self, actions: &mut Vec<Action>, _now_ms: u64) {
        let Role::Leader(l) = &self.role else {
            return;
        };
        if self.state.isr.len() < self.config.min_insync_replicas {
            return;
        }
        let me = self.config.me;
        let level = self.config.ack_level;
        let mut candidate = self.own_acked().min(self.log.end);
        if self.config.flaw != Flaw::AckBeforeIsr {
            let maximal: BTreeSet<NodeId> = self
                .state
                .isr
                .iter()
                .chain(l.pending.iter().flat_map(|p| p.isr.iter()))
                .copied()
                .filter(|n| *n != me)
                .collect();
            for node in maximal {
                let acked = l
                    .followers
                    .get(&node)
                    .map_or(-1, |f| if f.next.is_some() { f.acked(level) } else { -1 });
                candidate = candidate.min(acked);
            }
        }
        if candidate > self.high_watermark {
            self.high_watermark = candidate;
            actions.push(Action::HighWatermark(candidate));
        }
    }

    fn shrink_isr(&mut self, actions: &mut Vec<Action>, now_ms: u64) {
        let lag_max = self.config.lag_time_max_ms;
        let me = self.config.me;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if l.pending.is_some() || now_ms < l.proposals_after_ms {
            return;
        }
        let isr: Vec<NodeId> = self
            .state
            .isr
            .iter()
            .copied()
            .filter(|n| {
                *n == me
                    || l.followers
                        .get(n)
                        .is_some_and(|f| now_ms.saturating_sub(f.caught_up_ms) <= lag_max)
            })
            .collect();
        if isr.len() < self.state.isr.len() {
            Self::propose(l, &self.state, isr, actions);
        }
    }

    fn expand_isr(&mut self, actions: &mut Vec<Action>, now_ms: u64) {
        let hw = self.high_watermark;
        let level = self.config.ack_level;
        let Role::Leader(l) = &mut self.role else {
            return;
        };
        if l.pending.is_some() || now_ms < l.proposals_after_ms {
            return;
        }
        let joining: Vec<NodeId> = l
            .followers
            .iter()
            .filter(|(n, f)| {
                // It must hold what may have been acknowledged, the way acknowledged records
                // are held (durable, at that level): everything below the high watermark, and
                // below the start of this leader's epoch (a leader that restarted knows no
                // better high watermark than its log's start).
                !self.state.isr.contains(n)
                    && f.next.is_some()
                    && f.acked(level) >= hw.max(l.epoch_start)
            })
            .map(|(n, _)| *n)
            .collect();
        if joining.is_empty() {
            return;
        }
        let mut isr = self.state.isr.clone();
        isr.extend(joining);
        Self::propose(l, &self.state, isr, actions);
    }

    fn propose(
        l: &mut Leading,
        state: &PartitionState,
        isr: Vec<NodeId>,
        actions: &mut Vec<Action>,
    ) {
        let partition_epoch = PartitionEpoch(state.partition_epoch.0.saturating_add(1));
        l.pending = Some(Pending {
            isr: isr.clone(),
            partition_epoch,
            retry_at_ms: None,
        });
        actions.push(Action::ProposeIsr {
            isr,
            leader_epoch: l.epoch,
            partition_epoch,
        });
    }
}

/// (follower) Asks the leader where `epoch` ends on it; with no epoch left to ask about, nothing
/// in this log is known to be on the leader: the cut is at the log's start.
fn ask(
    f: &mut Following,
    epoch: Option<&EpochStart>,
    log_start: i64,
    actions: &mut Vec<Action>,
) -> Option<i64> {
    let Some(epoch) = epoch else {
        return Some(log_start);
    };
    f.asked = Some(epoch.epoch);
    actions.push(Action::Send {
        to: f.leader,
        say: Say::EpochQuery {
            leader_epoch: f.epoch.0,
            epoch: epoch.epoch,
        },
    });
    None
}

/// The largest epoch at most `epoch` in `epochs`, and where the epoch after it starts (`end`
/// for the latest): Kafka's OffsetsForLeaderEpoch answer.
pub fn end_of_epoch(epochs: &[EpochStart], epoch: i32, end: i64) -> Option<(i32, i64)> {
    let i = epochs.iter().rposition(|e| e.epoch <= epoch)?;
    let next = epochs.get(i + 1).map_or(end, |e| e.start_offset);
    Some((epochs[i].epoch, next))
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId(1);
    const B: NodeId = NodeId(2);
    const C: NodeId = NodeId(3);

    fn config(me: NodeId) -> ReplicaConfig {
        ReplicaConfig {
            me,
            min_insync_replicas: 2,
            lag_time_max_ms: 1_000,
            ack_level: AckLevel::Durable,
            flaw: Flaw::None,
        }
    }

    fn state(leader: NodeId, epoch: i32, isr: &[NodeId]) -> PartitionState {
        PartitionState {
            replicas: vec![A, B, C],
            isr: isr.to_vec(),
            leader: Some(leader),
            leader_epoch: LeaderEpoch(epoch),
            partition_epoch: PartitionEpoch(epoch),
        }
    }

    fn log(end: i64) -> LogView {
        LogView {
            start: 0,
            end,
            written: end,
            durable: end,
        }
    }

    fn hws(actions: &[Action]) -> Vec<i64> {
        actions
            .iter()
            .filter_map(|a| match a {
                Action::HighWatermark(hw) => Some(*hw),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn the_high_watermark_waits_for_every_in_sync_replica() {
        let (mut leader, actions) = Replica::new(config(A), &state(A, 1, &[A, B, C]), log(0), 0, 0);
        let probed: BTreeSet<NodeId> = actions
            .iter()
            .filter_map(|a| match a {
                Action::Send {
                    to,
                    say: Say::Probe { .. },
                } => Some(*to),
                _ => None,
            })
            .collect();
        assert_eq!(probed, BTreeSet::from([B, C]));
        assert_eq!(leader.admit(true), Ok(LeaderEpoch(1)));
        assert!(hws(&leader.on_local_log(log(10), 1)).is_empty());
        leader.on_progress(B, 1, 0, 0, 0, 1);
        leader.on_progress(C, 1, 0, 0, 0, 1);
        assert_eq!(leader.to_send(B), Some((0, 10)));
        leader.sent(B, 10);
        assert_eq!(leader.to_send(B), None);
        assert!(hws(&leader.on_progress(B, 1, 10, 10, 10, 2)).is_empty());
        assert_eq!(leader.verdict(LeaderEpoch(1), 10), Verdict::Wait);
        // Written is not enough at the durable level.
        assert!(hws(&leader.on_progress(C, 1, 10, 10, 4, 2)).contains(&4));
        assert_eq!(hws(&leader.on_progress(C, 1, 10, 10, 10, 3)), vec![10]);
        assert_eq!(leader.verdict(LeaderEpoch(1), 10), Verdict::Done);
        // A new leader elsewhere: a produce of the old epoch is never a success.
        leader.on_metadata(&state(B, 2, &[A, B, C]), log(12), 4);
        assert_eq!(leader.verdict(LeaderEpoch(1), 12), Verdict::NotLeader);
        assert_eq!(leader.admit(false), Err(Refusal::NotLeader));
    }

    #[test]
    fn a_lagging_follower_leaves_the_isr_and_one_caught_up_rejoins() {
        let (mut leader, _) = Replica::new(config(A), &state(A, 1, &[A, B, C]), log(0), 0, 0);
        leader.on_progress(B, 1, 0, 0, 0, 0);
        leader.on_progress(C, 1, 0, 0, 0, 0);
        leader.on_local_log(log(5), 100);
        leader.sent(B, 5);
        leader.on_progress(B, 1, 5, 5, 5, 200);
        // Idle in the ISR: probed within a third of the lag allowed, and it answers.
        let probes = leader.on_tick(600);
        assert!(probes.iter().any(|a| matches!(
            a,
            Action::Send {
                to: B,
                say: Say::Probe { .. }
            }
        )));
        leader.on_progress(B, 1, 5, 5, 5, 601);
        leader.on_progress(B, 1, 5, 5, 5, 1_400);
        let actions = leader.on_tick(1_500);
        assert!(actions.contains(&Action::ProposeIsr {
            isr: vec![A, B],
            leader_epoch: LeaderEpoch(1),
            partition_epoch: PartitionEpoch(2),
        }));
        // Until it is committed the high watermark still counts C.
        assert_eq!(leader.high_watermark(), 0);
        let mut shrunk = state(A, 1, &[A, B]);
        shrunk.partition_epoch = PartitionEpoch(2);
        assert_eq!(hws(&leader.on_metadata(&shrunk, log(5), 1_600)), vec![5]);
        // C catches up to the high watermark: proposed back in.
        let actions = leader.on_progress(C, 1, 5, 5, 5, 1_700);
        assert!(actions.contains(&Action::ProposeIsr {
            isr: vec![A, B, C],
            leader_epoch: LeaderEpoch(1),
            partition_epoch: PartitionEpoch(3),
        }));
    }

    #[test]
    fn acks_all_needs_min_insync_replicas() {
        let (mut leader, _) = Replica::new(config(A), &state(A, 1, &[A]), log(3), 0, 0);
        assert_eq!(
            leader.admit(true),
            Err(Refusal::NotEnoughReplicas { isr: 1, min: 2 })
        );
        assert_eq!(leader.admit(false), Ok(LeaderEpoch(1)));
        // The high watermark does not move with fewer than min.insync.replicas in sync.
        assert!(hws(&leader.on_local_log(log(5), 1)).is_empty());
        let mut two = state(A, 1, &[A, B]);
        two.partition_epoch = PartitionEpoch(2);
        leader.on_metadata(&two, log(5), 2);
        leader.on_progress(B, 1, 5, 5, 5, 3);
        assert_eq!(leader.high_watermark(), 5);
        let mut one = state(A, 1, &[A]);
        one.partition_epoch = PartitionEpoch(3);
        leader.on_metadata(&one, log(6), 4);
        assert_eq!(
            leader.verdict(LeaderEpoch(1), 6),
            Verdict::NotEnoughReplicasAfterAppend
        );
    }

    fn epochs(list: &[(i32, i64)]) -> Vec<EpochStart> {
        list.iter()
            .map(|&(epoch, start_offset)| EpochStart {
                epoch,
                start_offset,
            })
            .collect()
    }

    /// KIP-279's example: the follower's epoch 2 never reached the leader, whose log went on
    /// in epochs 1 and 3; the follower must cut where its epoch 0 ended, not at the leader's
    /// end of epoch 1.
    #[test]
    fn a_follower_truncates_by_epoch_asking_again_for_an_older_one() {
        let mine = epochs(&[(0, 0), (2, 5)]);
        let theirs = epochs(&[(0, 0), (1, 7), (3, 9)]);
        let (mut follower, _) = Replica::new(config(B), &state(A, 3, &[A, B]), log(10), 4, 0);
        let (mut leader, _) = Replica::new(config(A), &state(A, 3, &[A, B]), log(12), 4, 0);
        let (take, actions) = follower.on_append(A, 3, 4, 12, false, &mine);
        assert_eq!(take, Take::Drop);
        let mut inbox = actions;
        let mut truncated = None;
        for _ in 0..10 {
            let Some(action) = inbox.pop() else { break };
            match action {
                Action::Send {
                    say:
                        Say::EpochQuery {
                            leader_epoch,
                            epoch,
                        },
                    ..
                } => inbox.extend(leader.on_epoch_query(B, leader_epoch, epoch, &theirs)),
                Action::Send {
                    say:
                        Say::EpochEnd {
                            leader_epoch,
                            epoch,
                            end_offset,
                        },
                    ..
                } => inbox.extend(follower.on_epoch_end(A, leader_epoch, epoch, end_offset, &mine)),
                Action::Truncate(at) => truncated = Some(at),
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(truncated, Some(5));
        // Until the cut is done, its log's position says nothing, and it takes nothing.
        assert!(follower.on_local_log(log(11), 1).is_empty());
        assert_eq!(follower.on_append(A, 3, 4, 11, true, &mine).0, Take::Drop);
        // Reconciled: it reports its log and takes appends at its end.
        let actions = follower.on_truncated(log(5), 1);
        assert!(matches!(
            actions[..],
            [Action::Send {
                to: A,
                say: Say::Progress { log_end: 5, .. }
            }]
        ));
        assert_eq!(follower.on_append(A, 3, 4, 5, true, &mine).0, Take::Append);
        assert_eq!(follower.on_append(A, 3, 4, 7, true, &mine).0, Take::Drop);
        // The leader of an older epoch is told so.
        let (take, actions) = follower.on_append(A, 2, 4, 5, true, &mine);
        assert_eq!(take, Take::Drop);
        assert!(matches!(
            actions[..],
            [Action::Send {
                say: Say::Stale {
                    follower_epoch: 3,
                    ..
                },
                ..
            }]
        ));
    }

    #[test]
    fn the_flawed_follower_truncates_to_its_high_watermark() {
        let mine = epochs(&[(0, 0), (2, 5)]);
        let mut flawed = config(B);
        flawed.flaw = Flaw::TruncateToHighWatermark;
        let (mut follower, _) = Replica::new(flawed, &state(A, 3, &[A, B]), log(10), 8, 0);
        let (_, actions) = follower.on_append(A, 3, 8, 12, false, &mine);
        assert_eq!(actions, vec![Action::Truncate(8)]);
    }

    #[test]
    fn end_of_epoch_is_kafkas_answer() {
        let list = epochs(&[(1, 0), (4, 10), (6, 20)]);
        assert_eq!(end_of_epoch(&list, 0, 30), None);
        assert_eq!(end_of_epoch(&list, 1, 30), Some((1, 10)));
        assert_eq!(end_of_epoch(&list, 5, 30), Some((4, 20)));
        assert_eq!(end_of_epoch(&list, 6, 30), Some((6, 30)));
        assert_eq!(end_of_epoch(&list, 9, 30), Some((6, 30)));
    }
}
