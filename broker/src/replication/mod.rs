//! Replication on one shard (issue 11): the thin shell around each partition's IO-free
//! [`controller::replica::Replica`].
//!
//! A cluster node's shard k replicates the partitions it hosts with shard k of their other
//! replicas, over its own [`link::ReplicaLinks`]. It feeds each partition's state machine
//! ([`replicated::Replicated`]) with the committed metadata, its log's progress, the peers'
//! messages and the time, and carries out what the machine asks, in order, from one task
//! ([`Replication::run`]):
//! - messages to peers; a leader's batches are read from its log (cache or disk) from where
//!   the machine says the follower needs them, and sent as the same `Bytes`;
//! - ISR changes, proposed to the controller as `ChangePartition`;
//! - truncations, queued with the follower's appends so that they happen in the order decided.
//!
//! A follower's appends are taken in arrival order by a second task
//! ([`Replication::run_follower`]), one job at a time, under the partition's append gate.
//!
//! **Never here:** a rule of replication (who is in sync, what is committed, where to
//! truncate): those are the state machine's, so the simulator checks them.

pub mod link;
pub mod outbox;
pub mod replicated;

use std::cell::{OnceCell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use bytes::Bytes;
use model::{Command, NodeId, ShardId};
use quorum::replica::{AckLevel, Action, Say, Take};
use quorum::replica_wire::{PartitionKey, ReplicaMessage};
use storage::{BatchHeader, Watermark};

use crate::partition::Partition;
use crate::shard::Shard;
use link::{ReplicaHandler, ReplicaLinks, SendError};
use outbox::Outbox;
use replicated::epochs;

/// How often every replica hears the time (ISR lag, probes).
const TICK_INTERVAL: Duration = Duration::from_millis(100);
/// Bytes queued on the link to one follower before the leader stops reading more for it.
const QUEUED_BYTES_MAX: usize = 8 << 20;
/// What one append to a follower carries at most.
const APPEND_BYTES_MAX: usize = 1 << 20;
/// Bytes of appends a follower holds, taken off the wire and not yet in its log.
const FOLLOWER_QUEUE_BYTES_MAX: usize = 64 << 20;
/// How long the sender waits before it looks again at followers whose links were full.
const FULL_LINK_RETRY: Duration = Duration::from_millis(1);

/// Milliseconds on the process's monotonic clock: the replica state machines' time.
pub fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64
}

/// What became of an ISR change proposed to the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Proposal {
    Committed,
    Refused,
    /// No answer: it may still commit.
    Unknown,
}

/// What a follower does to its log, in the order decided.
#[derive(Debug)]
enum FollowerJob {
    Append {
        from: NodeId,
        key: PartitionKey,
        leader_epoch: i32,
        batches: Vec<Bytes>,
        bytes: usize,
    },
    Truncate {
        key: PartitionKey,
        offset: i64,
    },
}

pub struct Replication {
    shard: Weak<Shard>,
    me: NodeId,
    shard_id: ShardId,
    links: OnceCell<Rc<ReplicaLinks>>,
    partitions: RefCell<BTreeMap<PartitionKey, Rc<Partition>>>,
    pub outbox: Rc<Outbox>,
    follower_jobs: RefCell<VecDeque<FollowerJob>>,
    follower_queued_bytes: std::cell::Cell<usize>,
    follower_bell: Watermark,
}

impl std::fmt::Debug for Replication {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replication")
            .field("me", &self.me)
            .field("shard", &self.shard_id)
            .field("partitions", &self.partitions.borrow().len())
            .finish()
    }
}

impl Replication {
    pub fn new(shard: Weak<Shard>, me: NodeId, shard_id: ShardId) -> Rc<Replication> {
        Rc::new(Replication {
            shard,
            me,
            shard_id,
            links: OnceCell::new(),
            partitions: RefCell::new(BTreeMap::new()),
            outbox: Rc::new(Outbox::default()),
            follower_jobs: RefCell::new(VecDeque::new()),
            follower_queued_bytes: std::cell::Cell::new(0),
            follower_bell: Watermark::new(0),
        })
    }

    fn now_ms(&self) -> u64 {
        now_ms()
    }

    /// Opens this shard's replication listener and starts its tasks; the port goes into the
    /// node's registration.
    pub async fn start(
        self: &Rc<Self>,
        cluster_id: &str,
        host: &str,
        port: u16,
    ) -> std::io::Result<u16> {
        let handler: Weak<dyn ReplicaHandler> = Rc::downgrade(self) as Weak<dyn ReplicaHandler>;
        let links =
            ReplicaLinks::listen(self.me, self.shard_id, cluster_id, host, port, handler).await?;
        let port = links.port();
        let _ = self.links.set(links);
        glommio::spawn_local(self.clone().run()).detach();
        glommio::spawn_local(self.clone().run_follower()).detach();
        glommio::spawn_local(self.clone().run_ticks()).detach();
        Ok(port)
    }

    pub fn register(&self, partition: Rc<Partition>) {
        if let Some(r) = &partition.replicated {
            self.partitions
                .borrow_mut()
                .insert(r.key, partition.clone());
        }
    }

    pub fn unregister(&self, key: &PartitionKey) {
        self.partitions.borrow_mut().remove(key);
    }

    fn partition(&self, key: &PartitionKey) -> Option<Rc<Partition>> {
        self.partitions.borrow().get(key).cloned()
    }

    fn stopping(&self) -> bool {
        self.shard
            .upgrade()
            .is_none_or(|s| s.shutdown.is_triggered())
    }

    async fn run_ticks(self: Rc<Self>) {
        while !self.stopping() {
            glommio::timer::sleep(TICK_INTERVAL).await;
            let now_ms = self.now_ms();
            let partitions: Vec<Rc<Partition>> =
                self.partitions.borrow().values().cloned().collect();
            for p in partitions {
                if let Some(r) = &p.replicated {
                    r.step(|sm| ((), sm.on_tick(now_ms)));
                }
            }
        }
    }

    /// Carries out the replicas' actions in order, then streams batches to the followers of
    /// the partitions marked since the last turn.
    async fn run(self: Rc<Self>) {
        let mut seen = self.outbox.rung();
        loop {
            if self.stopping() {
                return;
            }
            for (key, action) in self.outbox.take_actions() {
                self.carry_out(key, action);
            }
            let dirty = self.outbox.take_dirty();
            let mut blocked = false;
            for key in dirty {
                blocked |= self.stream(&key).await;
            }
            if blocked {
                glommio::timer::sleep(FULL_LINK_RETRY).await;
                continue;
            }
            if self.outbox.rung() == seen {
                seen = self.outbox.wait(seen).await;
            } else {
                seen = self.outbox.rung();
            }
        }
    }

    fn carry_out(self: &Rc<Self>, key: PartitionKey, action: Action) {
        match action {
            Action::Send { to, say } => self.say(to, key, say),
            Action::HighWatermark(_) => {} // applied by `Replicated` at once
            Action::ProposeIsr {
                isr,
                leader_epoch,
                partition_epoch,
            } => {
                let this = self.clone();
                glommio::spawn_local(async move {
                    this.propose_isr(key, isr, leader_epoch, partition_epoch)
                        .await
                })
                .detach();
            }
            Action::Truncate(offset) => self.queue_follower(FollowerJob::Truncate { key, offset }),
        }
    }

    fn say(&self, to: NodeId, key: PartitionKey, say: Say) {
        let message = match say {
            Say::Probe {
                leader_epoch,
                high_watermark,
                log_end,
            } => ReplicaMessage::Append {
                key,
                leader_epoch,
                high_watermark,
                base_offset: log_end,
                batches: Vec::new(),
            },
            Say::EpochEnd {
                leader_epoch,
                epoch,
                end_offset,
            } => ReplicaMessage::EpochEnd {
                key,
                leader_epoch,
                epoch,
                end_offset,
            },
            Say::Progress {
                leader_epoch,
                log_end,
                written,
                durable,
            } => ReplicaMessage::Progress {
                key,
                leader_epoch,
                log_end,
                written,
                durable,
            },
            Say::EpochQuery {
                leader_epoch,
                epoch,
            } => ReplicaMessage::EpochQuery {
                key,
                leader_epoch,
                epoch,
            },
            Say::Stale {
                leader_epoch,
                follower_epoch,
            } => ReplicaMessage::Stale {
                key,
                leader_epoch,
                follower_epoch,
            },
        };
        self.send(to, message);
    }

    /// Sends to `to`'s peer shard: on the connection `to` dialed here if there is one (a
    /// follower answering), else on the one this shard keeps to it. Best effort: the replica
    /// machines resend what matters (probes, reconnection).
    fn send(&self, to: NodeId, message: ReplicaMessage) {
        let Some(links) = self.links.get() else {
            return;
        };
        match links.reply(to, message.clone()) {
            Ok(()) => return,
            Err(SendError::NotConnected(_)) => {}
            Err(e) => {
                tracing::debug!(node = to.0, error = %e, "a replication message was dropped");
                return;
            }
        }
        let Some(addr) = self.addr_of(to) else {
            tracing::debug!(node = to.0, "no replication address known for a peer");
            return;
        };
        if let Err(e) = links.send(to, addr, message) {
            tracing::debug!(node = to.0, error = %e, "a replication message was dropped");
        }
    }

    fn addr_of(&self, node: NodeId) -> Option<SocketAddr> {
        let shard = self.shard.upgrade()?;
        link::replication_addr(&shard.metadata(), node, self.shard_id)
    }

    /// Sends the followers of `key` the batches they need, as far as their links take more;
    /// true when a link was full (look again soon).
    async fn stream(&self, key: &PartitionKey) -> bool {
        let Some(p) = self.partition(key) else {
            return false;
        };
        let Some(r) = &p.replicated else {
            return false;
        };
        self.chase(&p);
        let Some(links) = self.links.get() else {
            return false;
        };
        let followers: Vec<NodeId> = r.with(|sm| sm.followers().collect());
        let mut blocked = false;
        for node in followers {
            // One append per follower per turn: the partitions marked share the links (and
            // the disk, for a follower catching up) round robin.
            if let Some((from, end)) = r.with(|sm| sm.to_send(node)) {
                if links.queued_bytes(node) >= QUEUED_BYTES_MAX {
                    blocked = true;
                    self.outbox.mark(*key);
                    continue;
                }
                let batches = match p.log.read(from, APPEND_BYTES_MAX, end).await {
                    Ok(b) => b,
                    Err(e) => {
                        tracing::warn!(topic = %p.topic, partition = p.index, offset = from, error = %e, "reading batches for a follower");
                        continue;
                    }
                };
                let Some(next) = batches
                    .last()
                    .and_then(|b| BatchHeader::parse(b).ok())
                    .map(|h| h.next_offset())
                else {
                    continue;
                };
                let (leader_epoch, high_watermark) =
                    r.with(|sm| (sm.leads().map_or(-1, |e| e.0), sm.high_watermark()));
                if leader_epoch < 0 || r.with(|sm| sm.to_send(node)).map(|(f, _)| f) != Some(from) {
                    continue; // the machine moved on while the batches were read
                }
                let Some(addr) = self.addr_of(node) else {
                    continue;
                };
                r.step(|sm| {
                    sm.sent(node, next);
                    ((), Vec::new())
                });
                let message = ReplicaMessage::Append {
                    key: *key,
                    leader_epoch,
                    high_watermark,
                    base_offset: from,
                    batches,
                };
                if links.send(node, addr, message).is_err() {
                    // Lost: start over from where the follower says it is.
                    r.step(|sm| ((), sm.on_disconnected(node)));
                    blocked = true;
                    continue;
                }
                if r.with(|sm| sm.to_send(node)).is_some() {
                    self.outbox.mark(*key);
                }
            }
        }
        blocked
    }

    /// Makes `p`'s log durable (or written, at that ack level) up to its end, once at a time
    /// per partition, and tells the replica as it gets there: a follower reports it, a leader
    /// counts it for the high watermark.
    fn chase(&self, p: &Rc<Partition>) {
        let Some(r) = &p.replicated else {
            return;
        };
        if r.chasing.get() {
            return;
        }
        let level = r.with(|sm| sm.config().ack_level);
        let reached = move |log: &storage::Log| match level {
            AckLevel::Durable => log.durable_offset(),
            AckLevel::Written => log.written_offset(),
        };
        if reached(&p.log) >= p.log.log_end_offset() {
            return;
        }
        r.chasing.set(true);
        let p = p.clone();
        glommio::spawn_local(async move {
            loop {
                let target = p.log.log_end_offset();
                if reached(&p.log) >= target {
                    break;
                }
                let waited = match level {
                    AckLevel::Durable => p.log.wait_durable(target).await,
                    AckLevel::Written => p.log.wait_written(target).await,
                };
                if let Err(e) = waited {
                    tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "making a replica durable");
                    break;
                }
                if let Some(r) = &p.replicated {
                    r.on_local_log(&p.log, now_ms());
                }
            }
            if let Some(r) = &p.replicated {
                r.chasing.set(false);
            }
        })
        .detach();
    }

    async fn propose_isr(
        self: Rc<Self>,
        key: PartitionKey,
        isr: Vec<NodeId>,
        leader_epoch: model::LeaderEpoch,
        partition_epoch: model::PartitionEpoch,
    ) {
        let Some(shard) = self.shard.upgrade() else {
            return;
        };
        let metadata = shard.metadata();
        let change = metadata.topic_by_id(key.topic).and_then(|topic| {
            let current = topic.partition(key.partition)?;
            let fresh = current.leader_epoch == leader_epoch
                && current.partition_epoch.0.saturating_add(1) == partition_epoch.0;
            fresh.then(|| Command::ChangePartition {
                name: topic.name.clone(),
                id: topic.id,
                partition: key.partition,
                state: model::PartitionState {
                    isr: isr.clone(),
                    partition_epoch,
                    ..current.clone()
                },
            })
        });
        let outcome = match change {
            Some(command) => match crate::controller::propose(&shard, vec![command]).await {
                Ok(outcomes) if outcomes.iter().all(Result::is_ok) => Proposal::Committed,
                Ok(_) => Proposal::Refused,
                Err(e) => {
                    tracing::debug!(error = %e.message, "proposing an ISR change");
                    Proposal::Unknown
                }
            },
            // The metadata moved past it: the replica saw that already.
            None => Proposal::Committed,
        };
        if outcome == Proposal::Committed {
            return;
        }
        tracing::debug!(partition = ?key, ?isr, ?outcome, "an ISR change was not committed");
        if let Some(p) = self.partition(&key)
            && let Some(r) = &p.replicated
        {
            let now_ms = self.now_ms();
            r.step(|sm| {
                match outcome {
                    Proposal::Refused => sm.on_proposal_refused(now_ms),
                    _ => sm.on_proposal_failed(now_ms),
                }
                ((), Vec::new())
            });
        }
    }

    fn queue_follower(&self, job: FollowerJob) {
        self.follower_jobs.borrow_mut().push_back(job);
        self.follower_bell.advance(self.follower_bell.get() + 1);
    }

    /// A follower's appends and truncations, one at a time, in the order they were decided.
    async fn run_follower(self: Rc<Self>) {
        let mut seen = 0;
        loop {
            if self.stopping() {
                return;
            }
            let job = self.follower_jobs.borrow_mut().pop_front();
            let Some(job) = job else {
                let _ = self.follower_bell.wait_for(seen + 1).await;
                seen = self.follower_bell.get();
                continue;
            };
            match job {
                FollowerJob::Append {
                    from,
                    key,
                    leader_epoch,
                    batches,
                    bytes,
                } => {
                    self.follower_queued_bytes
                        .set(self.follower_queued_bytes.get() - bytes);
                    self.follower_append(from, key, leader_epoch, batches).await;
                }
                FollowerJob::Truncate { key, offset } => self.truncate(key, offset).await,
            }
        }
    }

    async fn follower_append(
        &self,
        from: NodeId,
        key: PartitionKey,
        leader_epoch: i32,
        batches: Vec<Bytes>,
    ) {
        let Some(p) = self.partition(&key) else {
            return;
        };
        let Some(r) = &p.replicated else {
            return;
        };
        let appended = {
            let _gate = match p.gate.acquire().await {
                Ok(g) => g,
                Err(_) => return,
            };
            // Still following that leader in that epoch? (A change may have come meanwhile.)
            if r.with(|sm| sm.follows())
                .is_none_or(|(l, e)| l != from || e.0 != leader_epoch)
            {
                return;
            }
            p.log.append_replicated(&batches).await
        };
        match appended {
            Ok(_) => {
                r.on_local_log(&p.log, self.now_ms());
                self.outbox.mark(key);
            }
            Err(e) => {
                tracing::debug!(topic = %p.topic, partition = p.index, error = %e, "a follower append was refused");
                self.not_taken(from, key, leader_epoch);
            }
        }
    }

    /// Tells the leader an append of its epoch was not taken here: it starts over from where
    /// this replica's log is.
    fn not_taken(&self, leader: NodeId, key: PartitionKey, leader_epoch: i32) {
        self.send(
            leader,
            ReplicaMessage::Stale {
                key,
                leader_epoch,
                follower_epoch: leader_epoch,
            },
        );
    }

    async fn truncate(&self, key: PartitionKey, offset: i64) {
        let Some(p) = self.partition(&key) else {
            return;
        };
        let truncated = {
            let Ok(_gate) = p.gate.acquire().await else {
                return;
            };
            p.log.truncate_to(offset).await
        };
        if let Err(e) = truncated {
            tracing::error!(topic = %p.topic, partition = p.index, offset, error = %e, "truncating a follower's log");
            return;
        }
        if let Some(r) = &p.replicated {
            let now_ms = self.now_ms();
            r.step(|sm| ((), sm.on_truncated(replicated::view(&p.log), now_ms)));
        }
    }
}

impl ReplicaHandler for Replication {
    fn message(&self, from: NodeId, message: ReplicaMessage) {
        let now_ms = self.now_ms();
        let key = match &message {
            ReplicaMessage::Append { key, .. }
            | ReplicaMessage::EpochEnd { key, .. }
            | ReplicaMessage::Progress { key, .. }
            | ReplicaMessage::EpochQuery { key, .. }
            | ReplicaMessage::Stale { key, .. } => *key,
        };
        let Some(p) = self.partition(&key) else {
            // Not (yet) a replica here: the leader tries again after its next probe.
            if let ReplicaMessage::Append { leader_epoch, .. } = message {
                self.send(
                    from,
                    ReplicaMessage::Stale {
                        key,
                        leader_epoch,
                        follower_epoch: -1,
                    },
                );
            }
            return;
        };
        let Some(r) = &p.replicated else {
            return;
        };
        match message {
            ReplicaMessage::Append {
                leader_epoch,
                high_watermark,
                base_offset,
                batches,
                ..
            } => {
                let log_epochs = epochs(&p.log);
                let take = r.step(|sm| {
                    sm.on_append(
                        from,
                        leader_epoch,
                        high_watermark,
                        base_offset,
                        !batches.is_empty(),
                        &log_epochs,
                    )
                });
                if take == Take::Append {
                    let bytes: usize = batches.iter().map(Bytes::len).sum();
                    if self.follower_queued_bytes.get() + bytes > FOLLOWER_QUEUE_BYTES_MAX {
                        self.not_taken(from, key, leader_epoch);
                        return;
                    }
                    self.follower_queued_bytes
                        .set(self.follower_queued_bytes.get() + bytes);
                    self.queue_follower(FollowerJob::Append {
                        from,
                        key,
                        leader_epoch,
                        batches,
                        bytes,
                    });
                }
            }
            ReplicaMessage::EpochEnd {
                leader_epoch,
                epoch,
                end_offset,
                ..
            } => {
                let log_epochs = epochs(&p.log);
                r.step(|sm| {
                    (
                        (),
                        sm.on_epoch_end(from, leader_epoch, epoch, end_offset, &log_epochs),
                    )
                });
            }
            ReplicaMessage::Progress {
                leader_epoch,
                log_end,
                written,
                durable,
                ..
            } => r.step(|sm| {
                (
                    (),
                    sm.on_progress(from, leader_epoch, log_end, written, durable, now_ms),
                )
            }),
            ReplicaMessage::EpochQuery {
                leader_epoch,
                epoch,
                ..
            } => {
                let log_epochs = epochs(&p.log);
                r.step(|sm| {
                    (
                        (),
                        sm.on_epoch_query(from, leader_epoch, epoch, &log_epochs),
                    )
                });
            }
            ReplicaMessage::Stale { .. } => r.step(|sm| ((), sm.on_stale(from, now_ms))),
        }
    }

    fn disconnected(&self, node: NodeId) {
        let partitions: Vec<Rc<Partition>> = self.partitions.borrow().values().cloned().collect();
        for p in partitions {
            if let Some(r) = &p.replicated {
                r.step(|sm| ((), sm.on_disconnected(node)));
            }
        }
    }
}
