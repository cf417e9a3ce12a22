//! The coordinator of one offsets partition: the groups hashed to it, in memory, and their
//! committed offsets, in the partition's log.
//!
//! Writes (commits, deletions, expirations, snapshots) take the write lock, decide and apply
//! their change in memory, append it, and release the lock; only then do they wait for the
//! append to be fdatasync'd (so concurrent commits share syncs) before answering. The log's
//! order is therefore the order changes were applied in, and an acknowledged commit survives a
//! crash. A commit is visible to OffsetFetch from its append on, a moment before it is durable:
//! after a crash in that moment a commit its client never saw acknowledged may be gone.
//!
//! Opening replays the log from its start. To keep the log from growing without bound, once it
//! has grown by `offsets_snapshot_after_bytes` since the last snapshot, the coordinator appends a
//! snapshot (every live offset again, as ordinary records), waits for it to be durable and
//! deletes the whole segments before it ([`storage::Log::delete_before`]). Replaying from any
//! segment boundary before a snapshot yields the same state: each record is an upsert or a
//! delete, applied in log order. A snapshot cut short by a crash leaves everything before it in
//! place. The log must be opened without retention ([`super::offsets_topic_configs`]).
//!
//! Every `offsets_retention_check_interval_ms`, expired offsets are deleted (tombstones) and
//! empty groups without offsets are dropped.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::fmt;
use std::rc::{Rc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use net::client::batch::decode_batches;
use storage::fifo_lock::{FifoGuard, FifoLock};
use storage::{AppendError, Log, LogConfig, LogError, ReadError, SyncError};
use thiserror::Error;

use super::GroupConfig;
use super::ResponseError;
use super::call::GroupState;
use super::call::{
    CommitCall, CommitPartition, DeleteOffsetsCall, DescribedGroup, FetchCall, GroupCall,
    GroupOffsets, GroupReply, HeartbeatCall, JoinCall, JoinOutcome, JoinRefused, LeaveCall,
    LeftMember, ListCall, ListedGroup, PartitionOffset, PartitionResult, SyncCall, SyncOutcome,
    TopicOffsets, TopicResults,
};
use super::membership::{Ctx, Expiry, Group, Pending, Scheduler};
use super::offsets::StoredOffset;
use super::records::{self, EncodedRecord, OffsetKey, Record};
use crate::partition::Partition;

/// How much of the log one read of the replay asks for.
const REPLAY_READ_BYTES: usize = 1 << 20;
/// What a batch of the offsets log may decompress to. The coordinator writes its batches
/// uncompressed, each within one read; a compressed one is not its own, and is held to that.
const REPLAY_DECOMPRESSED_BYTES_MAX: usize = REPLAY_READ_BYTES;

/// Why a coordinator could not open, or a snapshot failed.
#[derive(Debug, Error)]
pub enum GroupError {
    #[error("reading the offsets log at offset {offset}: {source}")]
    Read {
        offset: i64,
        #[source]
        source: ReadError,
    },
    #[error("offsets log record at offset {offset}: {reason}")]
    Corrupt { offset: i64, reason: String },
    #[error("appending to the offsets log: {0}")]
    Append(#[from] AppendError),
    #[error("waiting for the offsets log: {0}")]
    Sync(#[from] SyncError),
    #[error("trimming the offsets log: {0}")]
    Trim(#[from] LogError),
    #[error("the coordinator is closed or failed")]
    Closed,
    #[error("the offsets partition refused the write: {0}")]
    Refused(String),
}

/// Why the offsets partition did not take or commit a write.
fn refused(p: crate::partition::Produced) -> String {
    let error = p
        .error
        .map_or_else(|| "no error".to_string(), |e| format!("{e:?}"));
    match p.message {
        Some(m) => format!("{error}: {m}"),
        None => error,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Serving {
    Open,
    /// The log refused an append or a sync: nothing is served until the broker reopens it.
    Failed,
    Closed,
}

#[derive(Debug, Default)]
struct Snapshots {
    /// The log's size right after the last snapshot (0 before the first).
    baseline_bytes: u64,
    running: bool,
    task: Option<glommio::Task<()>>,
}

/// The coordinator of one offsets partition. Lives on the shard that owns the partition's log;
/// other shards reach it through [`super::Dispatch`].
pub struct Coordinator {
    me: Weak<Coordinator>,
    /// The offsets partition: its records are appended as its leader's, acks=all.
    partition: Rc<Partition>,
    /// The partition's leader epoch when this coordinator loaded it.
    epoch: Option<model::LeaderEpoch>,
    log: Rc<Log>,
    config: GroupConfig,
    timers: Scheduler,
    groups: RefCell<HashMap<String, Group>>,
    /// Held from deciding a change to the offsets until it is appended; FIFO, so that a
    /// client's pipelined commits are written in the order they came (glommio's `Semaphore`
    /// lets a newcomer overtake a woken waiter).
    write_lock: FifoLock,
    serving: Cell<Serving>,
    snapshots: RefCell<Snapshots>,
    retention_task: RefCell<Option<glommio::Task<()>>>,
}

impl fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Coordinator")
            .field("log", &self.log.dir())
            .field("serving", &self.serving.get())
            .field("groups", &self.groups.borrow().len())
            .finish_non_exhaustive()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

async fn answer<T>(pending: Pending<T>, if_dropped: T) -> T {
    match pending {
        Pending::Now(outcome) => outcome,
        Pending::Wait(answer) => answer.recv().await.unwrap_or(if_dropped),
    }
}

fn tombstone(group: &str, topic: &str, partition: i32) -> EncodedRecord {
    let key = OffsetKey {
        group: group.to_owned(),
        topic: topic.to_owned(),
        partition,
    };
    Record::Offset(key, None).encode()
}

impl Coordinator {
    /// Replays `log` (the offsets partition's log, see [`super::offsets_topic_configs`]) and
    /// starts serving. The coordinator owns the log from now on: [`Coordinator::close`] closes it.
    pub async fn open(
        partition: Rc<Partition>,
        config: GroupConfig,
    ) -> Result<Rc<Coordinator>, GroupError> {
        let log = partition.log.clone();
        let log_config = log.config();
        if log_config.retention_ms.is_some() || log_config.retention_bytes.is_some() {
            tracing::warn!(
                log = %log.dir().display(),
                "retention would lose live offsets: turned off for the offsets log",
            );
            log.set_config(LogConfig {
                retention_ms: None,
                retention_bytes: None,
                ..log_config
            });
        }
        let groups = replay(&log, now_ms()).await?;
        tracing::debug!(
            log = %log.dir().display(),
            groups = groups.len(),
            offsets = groups.values().map(|g| g.offsets.len()).sum::<usize>(),
            "group coordinator loaded"
        );
        let coordinator = Rc::new_cyclic(|me: &Weak<Coordinator>| Coordinator {
            me: me.clone(),
            epoch: partition.leads(),
            partition,
            log,
            timers: Scheduler::new(me.clone()),
            config,
            groups: RefCell::new(groups),
            write_lock: FifoLock::new(),
            serving: Cell::new(Serving::Open),
            snapshots: RefCell::new(Snapshots::default()),
            retention_task: RefCell::new(None),
        });
        coordinator.start_retention();
        Ok(coordinator)
    }

    /// Runs one group operation.
    pub async fn call(self: &Rc<Self>, call: GroupCall) -> GroupReply {
        if let Err(error) = self.check_serving() {
            return GroupReply::Unavailable(error);
        }
        match call {
            GroupCall::Join(call) => GroupReply::Join(self.join(call).await),
            GroupCall::Sync(call) => GroupReply::Sync(self.sync(call).await),
            GroupCall::Heartbeat(call) => GroupReply::Heartbeat(self.heartbeat(&call)),
            GroupCall::Leave(call) => GroupReply::Leave(self.leave(call)),
            GroupCall::Commit(call) => GroupReply::Commit(self.commit(call).await),
            GroupCall::Fetch(call) => GroupReply::Fetch(self.fetch(call)),
            GroupCall::DeleteOffsets(call) => {
                GroupReply::DeleteOffsets(self.delete_offsets(call).await)
            }
            GroupCall::Describe(ids) => GroupReply::Describe(self.describe(&ids)),
            GroupCall::List(call) => GroupReply::List(self.list(&call)),
            GroupCall::Delete(ids) => GroupReply::Delete(self.delete_groups(ids).await),
        }
    }

    /// The leader epoch of the offsets partition this coordinator was opened in.
    pub fn leader_epoch(&self) -> Option<model::LeaderEpoch> {
        self.epoch
    }

    /// Stops serving: waiting JoinGroups and SyncGroups get NOT_COORDINATOR, writes in progress
    /// finish their appends, and the log is closed cleanly (on a node of its own: a replicated
    /// log stays open, a follower now, and its shard closes it).
    pub async fn close(&self) {
        if self.serving.replace(Serving::Closed) == Serving::Closed {
            return;
        }
        let permit = self.write_lock.acquire().await;
        // Not in the middle of an append (we hold the lock): safe to cancel.
        self.retention_task.borrow_mut().take();
        self.snapshots.borrow_mut().task.take();
        let mut groups = std::mem::take(&mut *self.groups.borrow_mut());
        for group in groups.values_mut() {
            group.shut_down(ResponseError::NotCoordinator);
        }
        drop(groups);
        if self.partition.replicated.is_none()
            && let Err(e) = self.log.close().await
        {
            tracing::error!(log = %self.log.dir().display(), error = %e, "closing the offsets log");
        }
        drop(permit);
    }

    fn check_serving(&self) -> Result<(), ResponseError> {
        match self.serving.get() {
            Serving::Open => Ok(()),
            Serving::Failed => Err(ResponseError::CoordinatorNotAvailable),
            Serving::Closed => Err(ResponseError::NotCoordinator),
        }
    }

    fn ctx_at(&self, now_ms: i64) -> Ctx<'_> {
        Ctx {
            config: &self.config,
            timers: &self.timers,
            now_ms,
        }
    }

    /// A timer fired.
    pub(super) fn expire(&self, expiry: Expiry) {
        if self.serving.get() != Serving::Open {
            return;
        }
        let ctx = self.ctx_at(now_ms());
        if let Some(group) = self.groups.borrow_mut().get_mut(expiry.group()) {
            group.expire(&ctx, expiry);
        }
    }

    // ---- membership ----

    async fn join(&self, call: JoinCall) -> JoinOutcome {
        let refuse = |error| {
            Err(JoinRefused {
                error,
                member_id: call.member_id.clone(),
            })
        };
        if call.group_id.is_empty() {
            return refuse(ResponseError::InvalidGroupId);
        }
        if call.session_timeout_ms < self.config.min_session_timeout_ms
            || call.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return refuse(ResponseError::InvalidSessionTimeout);
        }
        let if_dropped = refuse(ResponseError::NotCoordinator);
        let pending = {
            let ctx = self.ctx_at(now_ms());
            let mut groups = self.groups.borrow_mut();
            let group = match groups.entry(call.group_id.clone()) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) if call.member_id.is_empty() => {
                    entry.insert(Group::new(call.group_id.clone(), ctx.now_ms))
                }
                Entry::Vacant(_) => return refuse(ResponseError::UnknownMemberId),
            };
            group.join(&ctx, call)
        };
        answer(pending, if_dropped).await
    }

    async fn sync(&self, call: SyncCall) -> SyncOutcome {
        if call.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let pending = {
            let ctx = self.ctx_at(now_ms());
            let mut groups = self.groups.borrow_mut();
            match groups.get_mut(&call.group_id) {
                Some(group) => group.sync(&ctx, call),
                None => return Err(ResponseError::UnknownMemberId),
            }
        };
        answer(pending, Err(ResponseError::NotCoordinator)).await
    }

    fn heartbeat(&self, call: &HeartbeatCall) -> Result<(), ResponseError> {
        if call.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let ctx = self.ctx_at(now_ms());
        match self.groups.borrow_mut().get_mut(&call.group_id) {
            Some(group) => group.heartbeat(&ctx, call),
            None => Err(ResponseError::UnknownMemberId),
        }
    }

    fn leave(&self, call: LeaveCall) -> Result<Vec<LeftMember>, ResponseError> {
        if call.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let ctx = self.ctx_at(now_ms());
        let mut groups = self.groups.borrow_mut();
        match groups.get_mut(&call.group_id) {
            Some(group) => Ok(group.leave(&ctx, call)),
            None => Ok(call
                .members
                .into_iter()
                .map(|m| LeftMember {
                    member_id: m.member_id,
                    group_instance_id: m.group_instance_id,
                    result: Err(ResponseError::UnknownMemberId),
                })
                .collect()),
        }
    }

    // ---- offsets ----

    async fn commit(&self, call: CommitCall) -> Result<Vec<TopicResults>, ResponseError> {
        let permit = self.lock_writes().await?;
        let now = now_ms();
        let batch_bytes_max = self.batch_bytes_max();
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(call.topics.len());
        {
            let ctx = self.ctx_at(now);
            let mut groups = self.groups.borrow_mut();
            let group = match groups.entry(call.group_id.clone()) {
                Entry::Occupied(entry) => entry.into_mut(),
                Entry::Vacant(entry) if call.generation_id < 0 => {
                    tracing::info!(
                        group = %call.group_id,
                        "a commit from outside group management creates the group",
                    );
                    entry.insert(Group::new(call.group_id.clone(), now))
                }
                Entry::Vacant(_) => return Err(ResponseError::GroupIdNotFound),
            };
            group.validate_commit(
                &ctx,
                call.generation_id,
                &call.member_id,
                call.group_instance_id.as_deref(),
            )?;
            let expire_timestamp_ms = call.retention_ms.map(|ms| now.saturating_add(ms));
            for topic in call.topics {
                let mut partitions = Vec::with_capacity(topic.partitions.len());
                for commit in topic.partitions {
                    let partition = commit.partition;
                    let stored = self.stored_offset(commit, now, expire_timestamp_ms);
                    let result = stored.and_then(|stored| {
                        let key = OffsetKey {
                            group: call.group_id.clone(),
                            topic: topic.name.clone(),
                            partition,
                        };
                        let record = Record::Offset(key, Some(stored.clone())).encode();
                        records::fits(&record, batch_bytes_max)
                            .map_err(|_| ResponseError::InvalidCommitOffsetSize)?;
                        group.offsets.put(&topic.name, partition, stored);
                        records.push(record);
                        Ok(())
                    });
                    partitions.push(PartitionResult { partition, result });
                }
                results.push(TopicResults {
                    name: topic.name,
                    partitions,
                });
            }
        }
        match self.write(permit, records).await {
            Ok(()) => Ok(results),
            // What was to be written failed with the write; refusals keep their own error.
            Err(error) => Ok(results
                .into_iter()
                .map(|topic| TopicResults {
                    name: topic.name,
                    partitions: topic
                        .partitions
                        .into_iter()
                        .map(|p| PartitionResult {
                            partition: p.partition,
                            result: p.result.and(Err(error)),
                        })
                        .collect(),
                })
                .collect()),
        }
    }

    fn stored_offset(
        &self,
        commit: CommitPartition,
        now_ms: i64,
        expire_timestamp_ms: Option<i64>,
    ) -> Result<StoredOffset, ResponseError> {
        let metadata = commit.metadata.unwrap_or_default();
        if metadata.len() > self.config.offset_metadata_max_bytes {
            return Err(ResponseError::OffsetMetadataTooLarge);
        }
        Ok(StoredOffset {
            offset: commit.offset,
            leader_epoch: commit.leader_epoch,
            metadata,
            commit_timestamp_ms: now_ms,
            expire_timestamp_ms,
        })
    }

    fn fetch(&self, call: FetchCall) -> Vec<GroupOffsets> {
        let groups = self.groups.borrow();
        call.groups
            .into_iter()
            .map(|wanted| {
                let offsets = groups.get(&wanted.group_id).map(|g| &g.offsets);
                let topics = match wanted.topics {
                    Some(topics) => topics
                        .into_iter()
                        .map(|topic| TopicOffsets {
                            partitions: topic
                                .partitions
                                .iter()
                                .map(|&partition| PartitionOffset {
                                    partition,
                                    committed: offsets
                                        .and_then(|o| o.get(&topic.name, partition))
                                        .map(StoredOffset::committed),
                                })
                                .collect(),
                            name: topic.name,
                        })
                        .collect(),
                    None => offsets
                        .into_iter()
                        .flat_map(|o| o.topics())
                        .map(|(name, partitions)| TopicOffsets {
                            name: name.to_owned(),
                            partitions: partitions
                                .iter()
                                .map(|(&partition, stored)| PartitionOffset {
                                    partition,
                                    committed: Some(stored.committed()),
                                })
                                .collect(),
                        })
                        .collect(),
                };
                GroupOffsets {
                    group_id: wanted.group_id,
                    result: Ok(topics),
                }
            })
            .collect()
    }

    async fn delete_offsets(
        &self,
        call: DeleteOffsetsCall,
    ) -> Result<Vec<TopicResults>, ResponseError> {
        if call.group_id.is_empty() {
            return Err(ResponseError::InvalidGroupId);
        }
        let permit = self.lock_writes().await?;
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(call.topics.len());
        {
            let mut groups = self.groups.borrow_mut();
            let group = groups
                .get_mut(&call.group_id)
                .ok_or(ResponseError::GroupIdNotFound)?;
            group.validate_offset_delete()?;
            for topic in call.topics {
                let subscribed = group.is_subscribed_to(&topic.name);
                let mut partitions = Vec::with_capacity(topic.partitions.len());
                for partition in topic.partitions {
                    let result = if subscribed {
                        Err(ResponseError::GroupSubscribedToTopic)
                    } else {
                        if group.offsets.remove(&topic.name, partition) {
                            records.push(tombstone(&call.group_id, &topic.name, partition));
                        }
                        Ok(())
                    };
                    partitions.push(PartitionResult { partition, result });
                }
                results.push(TopicResults {
                    name: topic.name,
                    partitions,
                });
            }
        }
        self.write(permit, records).await?;
        Ok(results)
    }

    // ---- admin ----

    fn describe(&self, ids: &[String]) -> Vec<Option<DescribedGroup>> {
        let groups = self.groups.borrow();
        ids.iter()
            .map(|id| groups.get(id).map(Group::describe))
            .collect()
    }

    fn list(&self, call: &ListCall) -> Vec<ListedGroup> {
        // Every group here is a classic group.
        if !call.types.is_empty() && !call.types.iter().any(|t| t.eq_ignore_ascii_case("classic")) {
            return Vec::new();
        }
        let wanted = |state: GroupState| {
            call.states.is_empty()
                || call
                    .states
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(state.name()))
        };
        self.groups
            .borrow()
            .values()
            .filter(|g| wanted(g.state()))
            .map(Group::listed)
            .collect()
    }

    async fn delete_groups(&self, ids: Vec<String>) -> Vec<Result<(), ResponseError>> {
        let permit = match self.lock_writes().await {
            Ok(permit) => permit,
            Err(error) => return vec![Err(error); ids.len()],
        };
        let mut records = Vec::new();
        let results: Vec<Result<(), ResponseError>> = {
            let mut groups = self.groups.borrow_mut();
            ids.iter()
                .map(|id| {
                    groups
                        .get(id)
                        .ok_or(ResponseError::GroupIdNotFound)?
                        .validate_delete()?;
                    if let Some(group) = groups.remove(id) {
                        records.extend(
                            group
                                .offsets
                                .iter()
                                .map(|(topic, partition, _)| tombstone(id, topic, partition)),
                        );
                        tracing::info!(group = %id, offsets = group.offsets.len(), "deleted group");
                    }
                    Ok(())
                })
                .collect()
        };
        match self.write(permit, records).await {
            Ok(()) => results,
            Err(error) => results.into_iter().map(|r| r.and(Err(error))).collect(),
        }
    }

    // ---- the log ----

    async fn lock_writes(&self) -> Result<FifoGuard<'_>, ResponseError> {
        let permit = self
            .write_lock
            .acquire()
            .await
            .map_err(|_| ResponseError::NotCoordinator)?;
        self.check_serving()?;
        Ok(permit)
    }

    /// The largest batch the log takes.
    fn batch_bytes_max(&self) -> usize {
        let config = self.log.config();
        let segment_bytes_max = usize::try_from(config.segment_bytes_max).unwrap_or(usize::MAX);
        config.max_message_bytes.min(segment_bytes_max)
    }

    /// Appends records already applied in memory (the caller held `permit` since applying
    /// them), then waits until they are durable.
    async fn write(
        &self,
        permit: FifoGuard<'_>,
        records: Vec<EncodedRecord>,
    ) -> Result<(), ResponseError> {
        if records.is_empty() {
            return Ok(());
        }
        let appended = match records::record_set(&records, now_ms(), self.batch_bytes_max()) {
            Ok(set) => self.partition.append_own(set).await.map_err(refused),
            Err(e) => Err(e.to_string()),
        };
        drop(permit);
        let synced = match appended {
            Ok((next_offset, epoch)) => self
                .partition
                .wait_committed(next_offset, epoch)
                .await
                .map_err(refused),
            Err(e) => Err(e),
        };
        if let Err(reason) = synced {
            // Memory is ahead of the log now: stop serving until the broker reopens it.
            if self.serving.get() == Serving::Open {
                tracing::error!(
                    log = %self.log.dir().display(),
                    error = %reason,
                    "offsets log write failed: coordinator stops",
                );
                self.serving.set(Serving::Failed);
            }
            return Err(self
                .check_serving()
                .err()
                .unwrap_or(ResponseError::NotCoordinator));
        }
        self.maybe_snapshot();
        Ok(())
    }

    fn maybe_snapshot(&self) {
        {
            let mut snapshots = self.snapshots.borrow_mut();
            let due = self.log.size_bytes()
                >= snapshots
                    .baseline_bytes
                    .saturating_add(self.config.offsets_snapshot_after_bytes);
            if snapshots.running || !due {
                return;
            }
            snapshots.running = true;
        }
        let me = self.me.clone();
        // Spawned tasks start running at once, inside spawn_local: nothing may be borrowed here.
        let task = glommio::spawn_local(async move {
            futures_lite::future::yield_now().await;
            let Some(coordinator) = me.upgrade() else {
                return;
            };
            if let Err(e) = coordinator.snapshot().await {
                tracing::warn!(
                    log = %coordinator.log.dir().display(),
                    error = %e,
                    "offsets log snapshot failed",
                );
            }
            coordinator.snapshots.borrow_mut().running = false;
        });
        self.snapshots.borrow_mut().task = Some(task);
    }

    /// Writes every live offset again at the log's end, then deletes the segments before it.
    async fn snapshot(&self) -> Result<(), GroupError> {
        let permit = self.lock_writes().await.map_err(|_| GroupError::Closed)?;
        let start = self.log.log_end_offset();
        let records: Vec<EncodedRecord> = self
            .groups
            .borrow()
            .iter()
            .flat_map(|(id, group)| {
                group.offsets.iter().map(move |(topic, partition, stored)| {
                    let key = OffsetKey {
                        group: id.clone(),
                        topic: topic.to_owned(),
                        partition,
                    };
                    Record::Offset(key, Some(stored.clone())).encode()
                })
            })
            .collect();
        let end = if records.is_empty() {
            start
        } else {
            let set =
                records::record_set(&records, now_ms(), self.batch_bytes_max()).map_err(|e| {
                    GroupError::Corrupt {
                        offset: start,
                        reason: e.to_string(),
                    }
                })?;
            let (next_offset, epoch) = self
                .partition
                .append_own(set)
                .await
                .map_err(|p| GroupError::Refused(refused(p)))?;
            self.partition
                .wait_committed(next_offset, epoch)
                .await
                .map_err(|p| GroupError::Refused(refused(p)))?;
            next_offset
        };
        drop(permit);
        if self.partition.replicated.is_some() {
            // The replicas keep their segments: a follower catching up may still need them
            // (the log start offset does not travel to followers yet).
            self.snapshots.borrow_mut().baseline_bytes = self.log.size_bytes();
            return Ok(());
        }
        let _ = end;
        let deleted = self.log.delete_before(start).await?;
        let size_bytes = self.log.size_bytes();
        self.snapshots.borrow_mut().baseline_bytes = size_bytes;
        tracing::info!(
            log = %self.log.dir().display(),
            offsets = records.len(),
            snapshot_offset = start,
            deleted_segments = deleted,
            size_bytes,
            "offsets log snapshot"
        );
        Ok(())
    }

    // ---- retention ----

    fn start_retention(&self) {
        let me = self.me.clone();
        let interval =
            Duration::from_millis(self.config.offsets_retention_check_interval_ms.max(1));
        let task = glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(interval).await;
                let Some(coordinator) = me.upgrade() else {
                    return;
                };
                coordinator.expire_offsets().await;
            }
        });
        *self.retention_task.borrow_mut() = Some(task);
    }

    /// Deletes expired offsets and drops empty groups that have none left.
    async fn expire_offsets(&self) {
        let Ok(permit) = self.lock_writes().await else {
            return;
        };
        let now = now_ms();
        let retention_ms = self.config.offsets_retention_ms;
        let mut records = Vec::new();
        let mut dropped = 0usize;
        self.groups.borrow_mut().retain(|id, group| {
            for (topic, partition) in group.expired_offsets(now, retention_ms) {
                group.offsets.remove(&topic, partition);
                records.push(tombstone(id, &topic, partition));
            }
            let keep = group.state() != GroupState::Empty || !group.offsets.is_empty();
            dropped += usize::from(!keep);
            keep
        });
        let expired = records.len();
        if expired > 0 || dropped > 0 {
            tracing::info!(
                log = %self.log.dir().display(),
                expired_offsets = expired,
                dropped_groups = dropped,
                "offsets retention",
            );
        }
        // A failure stops the coordinator; nobody waits for this answer.
        let _ = self.write(permit, records).await;
    }
}

/// Reads the whole log and rebuilds the groups' offsets (as groups without members).
async fn replay(log: &Log, now_ms: i64) -> Result<HashMap<String, Group>, GroupError> {
    let mut groups: HashMap<String, Group> = HashMap::new();
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    let mut skipped = 0usize;
    while offset < end {
        let batches = log
            .read(offset, REPLAY_READ_BYTES, end)
            .await
            .map_err(|source| GroupError::Read { offset, source })?;
        if batches.is_empty() {
            break;
        }
        for batch in batches {
            let corrupt = |offset: i64, reason: String| GroupError::Corrupt { offset, reason };
            let header =
                storage::BatchHeader::parse(&batch).map_err(|e| corrupt(offset, e.to_string()))?;
            let consumed = decode_batches(&batch, REPLAY_DECOMPRESSED_BYTES_MAX)
                .map_err(|e| corrupt(header.base_offset, e.to_string()))?;
            for record in consumed {
                let decoded = Record::decode(record.key.as_deref(), record.value.as_deref())
                    .map_err(|e| corrupt(record.offset, e.to_string()))?;
                match decoded {
                    Some(Record::Offset(key, Some(stored))) => groups
                        .entry(key.group.clone())
                        .or_insert_with(|| Group::new(key.group, now_ms))
                        .offsets
                        .put(&key.topic, key.partition, stored),
                    Some(Record::Offset(key, None)) => {
                        if let Some(group) = groups.get_mut(&key.group) {
                            group.offsets.remove(&key.topic, key.partition);
                        }
                    }
                    None => skipped += 1,
                }
            }
            offset = header.next_offset();
        }
    }
    if skipped > 0 {
        tracing::warn!(
            log = %log.dir().display(),
            records = skipped,
            "skipped records of unknown kinds",
        );
    }
    groups.retain(|_, group| !group.offsets.is_empty());
    Ok(groups)
}
