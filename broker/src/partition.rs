//! One partition as its owning shard serves it: the log, the idempotent producers' state, and
//! the Kafka rules for producing to it and fetching from it.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use net::Acks;
use net::kafka_protocol::ResponseError;
use storage::fifo_lock::FifoLock;
use storage::{AppendError, BatchError, BatchHeader, Log, ReadError, SyncError};

use model::LeaderEpoch;

use quorum::replica::{Refusal, Verdict as Commit};

use crate::config::Durability;
use crate::producer::{Producers, Verdict};
use crate::recompress::{self, TopicCompression};
use crate::replication::replicated::Replicated;

/// How much of the end of a log is read to rebuild idempotent producers' state.
const PRODUCER_STATE_SCAN_BYTES: usize = 8 << 20;

#[derive(Debug)]
pub struct Partition {
    pub topic: String,
    pub index: i32,
    pub log: Rc<Log>,
    /// The partition's leader epoch, from the metadata: stamped on every batch appended.
    leader_epoch: Cell<LeaderEpoch>,
    /// Built from the end of the log on the first idempotent produce after the partition opens
    /// (so that a producer retrying across a restart is recognised), then kept up to date.
    producers: RefCell<Option<Producers>>,
    /// Holds idempotent appends in arrival order: a producer's sequence check and its append
    /// must not be overtaken by the producer's next batch.
    idempotent_lock: FifoLock,
    /// The topic's `compression.type`, set with its other settings.
    compression: Cell<TopicCompression>,
    /// A cluster node's replication of this partition (none on a node of its own, where the
    /// log alone decides what is visible and acknowledged).
    pub replicated: Option<Replicated>,
    /// Held by every append to the log, the leader's (a produce) and the follower's (a
    /// replicated append or truncation), so that one never lands in the middle of the other
    /// across a change of leader.
    pub gate: FifoLock,
}

/// The answer for one partition of a produce.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    pub error: Option<ResponseError>,
    pub message: Option<String>,
    pub base_offset: i64,
    pub log_start_offset: i64,
    /// The time the records were stamped with on a LogAppendTime topic; -1 otherwise.
    pub log_append_time_ms: i64,
}

/// A produce's records, appended and waiting to be acknowledged.
#[derive(Debug)]
pub struct Pending {
    appended: Appended,
    /// The leader epoch they were appended in.
    epoch: LeaderEpoch,
}

impl Pending {
    /// The answer when the request's deadline passed first.
    pub fn timed_out(&self, timeout: Duration) -> Produced {
        let base_offset = self.appended.base_offset;
        Produced::failed(
            ResponseError::RequestTimedOut,
            format!("records at {base_offset} not acknowledged within {timeout:?}"),
        )
    }
}

/// Where a record set went.
#[derive(Debug, Clone, Copy)]
struct Appended {
    base_offset: i64,
    next_offset: i64,
    log_append_time_ms: Option<i64>,
}

impl Appended {
    fn from_log(info: &storage::AppendInfo) -> Appended {
        Appended {
            base_offset: info.base_offset,
            next_offset: info.next_offset,
            log_append_time_ms: info.log_append_time_ms,
        }
    }
}

impl Produced {
    pub fn failed(error: ResponseError, message: impl Into<Option<String>>) -> Produced {
        Produced {
            error: Some(error),
            message: message.into(),
            base_offset: -1,
            log_start_offset: -1,
            log_append_time_ms: -1,
        }
    }
}

/// The answer for one partition of a fetch.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub error: Option<ResponseError>,
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub batches: Vec<Bytes>,
    /// Not read: the batches are on disk only, and the fetch asked for memory only.
    pub needs_disk: bool,
}

/// Whether a fetch may read segment files, or only what is in memory (the batch cache).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DiskReads {
    Allowed,
    /// Answer [`Fetched::needs_disk`] instead: the caller first reserves fetch memory.
    Deferred,
}

impl Fetched {
    pub fn failed(error: ResponseError) -> Fetched {
        Fetched {
            error: Some(error),
            high_watermark: -1,
            log_start_offset: -1,
            batches: Vec::new(),
            needs_disk: false,
        }
    }

    pub fn bytes(&self) -> usize {
        self.batches.iter().map(Bytes::len).sum()
    }
}

impl Partition {
    pub fn new(
        topic: String,
        index: i32,
        log: Rc<Log>,
        leader_epoch: LeaderEpoch,
        replicated: Option<Replicated>,
    ) -> Partition {
        Partition {
            topic,
            index,
            log,
            leader_epoch: Cell::new(leader_epoch),
            producers: RefCell::new(None),
            idempotent_lock: FifoLock::new(),
            compression: Cell::new(TopicCompression::Producer),
            replicated,
            gate: FifoLock::new(),
        }
    }

    /// This replica became the partition's leader: its producers' state is rebuilt from its
    /// log on the next idempotent produce (a follower's appends did not keep it).
    pub fn forget_producers(&self) {
        *self.producers.borrow_mut() = None;
    }

    /// The leader epoch this replica leads the partition in, if it does (a partition of a
    /// node of its own always leads, in its metadata's epoch).
    pub fn leads(&self) -> Option<LeaderEpoch> {
        match &self.replicated {
            Some(r) => r.with(|sm| sm.leads()),
            None => Some(self.leader_epoch.get()),
        }
    }

    /// Consumers read below it.
    pub fn high_watermark(&self) -> i64 {
        match &self.replicated {
            Some(r) => r.high_watermark(),
            None => self.log.high_watermark(),
        }
    }

    /// The high watermark as a watermark, to wait for new visible records.
    pub fn high_watermark_mark(&self) -> &storage::Watermark {
        match &self.replicated {
            Some(r) => r.high_watermark_mark(),
            None => self.log.high_watermark_mark(),
        }
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.leader_epoch.get()
    }

    /// A new epoch from the metadata; epochs never go back.
    pub fn set_leader_epoch(&self, epoch: LeaderEpoch) {
        assert!(
            epoch >= self.leader_epoch.get(),
            "leader epoch of {}-{} went back",
            self.topic,
            self.index
        );
        self.leader_epoch.set(epoch);
    }

    pub fn set_compression(&self, compression: TopicCompression) {
        self.compression.set(compression);
    }

    /// Appends a producer's record set: the first half of a produce, never cut short by its
    /// timeout (an append stopped half way would leave the log's lock or the batch in doubt).
    /// Then [`Self::acknowledge`] waits, under the request's one deadline.
    pub async fn append_produced(
        &self,
        records: BytesMut,
        acks: Acks,
    ) -> Result<Pending, Produced> {
        let records = match self.compression.get() {
            TopicCompression::Producer => records,
            TopicCompression::Codec(codec) => {
                let max_bytes = self.log.config().max_message_bytes;
                recompress::recompress(records, codec, max_bytes).map_err(recompress_failed)?
            }
        };
        let first = BatchHeader::parse(&records).map_err(|e| {
            append_failed(AppendError::InvalidBatch {
                position: 0,
                source: e,
            })
        })?;
        let (appended, epoch) = self.append_as_leader(records, acks, &first).await?;
        Ok(Pending { appended, epoch })
    }

    /// Waits until `pending` is acknowledged as `acks` and `durability` say; the answer.
    pub async fn acknowledge(
        &self,
        pending: &Pending,
        acks: Acks,
        durability: Durability,
    ) -> Produced {
        let Appended {
            base_offset,
            next_offset,
            log_append_time_ms,
        } = pending.appended;
        match self
            .wait_acks(acks, durability, pending.epoch, next_offset)
            .await
        {
            Ok(()) => Produced {
                error: None,
                message: None,
                base_offset,
                log_start_offset: self.log.log_start_offset(),
                log_append_time_ms: log_append_time_ms.unwrap_or(-1),
            },
            Err(failed) => failed,
        }
    }

    /// Appends a record set as the partition's leader (on a node of its own: as its only
    /// replica), once admitted, and returns where it went and the leader epoch it carries.
    async fn append_as_leader(
        &self,
        records: BytesMut,
        acks: Acks,
        first: &BatchHeader,
    ) -> Result<(Appended, LeaderEpoch), Produced> {
        let Ok(_gate) = self.gate.acquire().await else {
            return Err(Produced::failed(ResponseError::NotLeaderOrFollower, None));
        };
        // Admitted under the gate: a follower's append cannot come between.
        let epoch = self.admit(acks)?;
        let appended = if first.has_producer_id() {
            self.append_idempotent(records, first, epoch).await?
        } else {
            let info = self
                .log
                .append(records, epoch.0)
                .await
                .map_err(append_failed)?;
            Appended::from_log(&info)
        };
        if let Some(r) = &self.replicated {
            r.on_local_log(&self.log, now_ms());
        }
        Ok((appended, epoch))
    }

    /// Waits until records appended in `epoch` before `next_offset` are acknowledged as `acks`
    /// and `durability` say: acks=all on a replicated partition once they are committed.
    async fn wait_acks(
        &self,
        acks: Acks,
        durability: Durability,
        epoch: LeaderEpoch,
        next_offset: i64,
    ) -> Result<(), Produced> {
        match (acks, durability, &self.replicated) {
            (Acks::None, _, _) => Ok(()),
            (Acks::All, _, Some(r)) => committed(r, epoch, next_offset).await,
            (Acks::All, Durability::Fsync, None) => self
                .log
                .wait_durable(next_offset)
                .await
                .map_err(sync_failed),
            _ => self
                .log
                .wait_written(next_offset)
                .await
                .map_err(sync_failed),
        }
    }

    /// Appends the broker's own records (the group coordinator's) as an acks=all produce
    /// would be; the next offset and the epoch, for [`Partition::wait_committed`].
    pub async fn append_own(&self, records: BytesMut) -> Result<(i64, LeaderEpoch), Produced> {
        let first = BatchHeader::parse(&records).map_err(|e| {
            append_failed(AppendError::InvalidBatch {
                position: 0,
                source: e,
            })
        })?;
        let (appended, epoch) = self.append_as_leader(records, Acks::All, &first).await?;
        Ok((appended.next_offset, epoch))
    }

    /// Waits until the broker's own records before `next_offset` are committed (durable here,
    /// and on every in-sync replica of a replicated partition).
    pub async fn wait_committed(
        &self,
        next_offset: i64,
        epoch: LeaderEpoch,
    ) -> Result<(), Produced> {
        self.wait_acks(Acks::All, Durability::Fsync, epoch, next_offset)
            .await
    }

    /// Whether this replica takes a produce with these acks, and the leader epoch to stamp.
    fn admit(&self, acks: Acks) -> Result<LeaderEpoch, Produced> {
        let Some(r) = &self.replicated else {
            return Ok(self.leader_epoch.get());
        };
        r.with(|sm| sm.admit(acks == Acks::All))
            .map_err(|refusal| match refusal {
                Refusal::NotLeader => Produced::failed(
                    ResponseError::NotLeaderOrFollower,
                    "this broker does not lead the partition".to_string(),
                ),
                Refusal::NotEnoughReplicas { isr, min } => Produced::failed(
                    ResponseError::NotEnoughReplicas,
                    format!("{isr} in-sync replicas, min.insync.replicas is {min}"),
                ),
            })
    }

    async fn append_idempotent(
        &self,
        records: BytesMut,
        first: &BatchHeader,
        epoch: LeaderEpoch,
    ) -> Result<Appended, Produced> {
        let _turn = self
            .idempotent_lock
            .acquire()
            .await
            .map_err(|_| Produced::failed(ResponseError::NotLeaderOrFollower, None))?;
        if self.producers.borrow().is_none() {
            // Boxed: rare (once per leadership), and inline it would grow every idempotent
            // append's future by its read of the log's end.
            let rebuilt = Box::pin(self.rebuild_producers()).await;
            *self.producers.borrow_mut() = Some(rebuilt);
        }
        let verdict = self
            .producers
            .borrow()
            .as_ref()
            .map_or(Verdict::Append, |p| p.check(first));
        match verdict {
            Verdict::Refuse(error) => Err(Produced::failed(error, None)),
            // The first answer's append time is not kept: a duplicate's is unknown (-1).
            Verdict::Duplicate { base_offset } => Ok(Appended {
                base_offset,
                next_offset: base_offset + i64::from(first.last_offset_delta) + 1,
                log_append_time_ms: None,
            }),
            Verdict::Append => {
                let info = self
                    .log
                    .append(records, epoch.0)
                    .await
                    .map_err(append_failed)?;
                if let Some(p) = self.producers.borrow_mut().as_mut() {
                    p.record(first, info.base_offset);
                }
                Ok(Appended::from_log(&info))
            }
        }
    }

    /// The producers of the batches near the end of the log. Retries after a restart are of the
    /// batches that were in flight when it happened, at the end of the log: reading its last few
    /// megabytes finds them, without a scan of the whole log at every start.
    async fn rebuild_producers(&self) -> Producers {
        let mut producers = Producers::default();
        match self
            .log
            .recent_batch_headers(PRODUCER_STATE_SCAN_BYTES)
            .await
        {
            Ok(headers) => {
                for h in &headers {
                    producers.record(h, h.base_offset);
                }
            }
            Err(e) => tracing::warn!(
                topic = %self.topic,
                partition = self.index,
                error = %e,
                "could not read the end of the log to rebuild producer state"
            ),
        }
        producers
    }

    /// Reads from `offset`: at least one whole batch if there is one below the high watermark,
    /// then more while they fit in `max_bytes`. With [`DiskReads::Deferred`], a read that would
    /// go to disk is not made.
    pub async fn fetch(&self, offset: i64, max_bytes: usize, disk: DiskReads) -> Fetched {
        let high_watermark = self.high_watermark();
        if disk == DiskReads::Deferred && !self.log.read_is_from_memory(offset, high_watermark) {
            return Fetched {
                error: None,
                high_watermark,
                log_start_offset: self.log.log_start_offset(),
                batches: Vec::new(),
                needs_disk: true,
            };
        }
        let result = self.log.read(offset, max_bytes, high_watermark).await;
        let log_start_offset = self.log.log_start_offset();
        match result {
            Ok(batches) => Fetched {
                error: None,
                high_watermark,
                log_start_offset,
                batches,
                needs_disk: false,
            },
            Err(e) => Fetched {
                error: Some(read_error(&e)),
                high_watermark,
                log_start_offset,
                batches: Vec::new(),
                needs_disk: false,
            },
        }
    }

    /// Whether records past `offset` are visible (or `offset` fell off the log's start: a fetch
    /// has something to report either way).
    pub fn has_records_after(&self, offset: i64) -> bool {
        self.high_watermark() > offset || offset < self.log.log_start_offset()
    }
}

/// Waits until the records of an acks=all produce appended in `epoch` before `next_offset` are
/// committed (the high watermark passed them), or the replica says they never will be here.
async fn committed(r: &Replicated, epoch: LeaderEpoch, next_offset: i64) -> Result<(), Produced> {
    loop {
        match r.with(|sm| sm.verdict(epoch, next_offset)) {
            Commit::Done => return Ok(()),
            Commit::NotLeader => {
                return Err(Produced::failed(
                    ResponseError::NotLeaderOrFollower,
                    "leadership moved before the records were committed".to_string(),
                ));
            }
            Commit::NotEnoughReplicasAfterAppend => {
                return Err(Produced::failed(
                    ResponseError::NotEnoughReplicasAfterAppend,
                    "the ISR shrank below min.insync.replicas after the append".to_string(),
                ));
            }
            Commit::Wait => {
                let changes = r.changes().get();
                futures_lite::future::or(
                    async {
                        let _ = r.high_watermark_mark().wait_for(next_offset).await;
                    },
                    async {
                        let _ = r.changes().wait_for(changes + 1).await;
                    },
                )
                .await;
            }
        }
    }
}

fn now_ms() -> u64 {
    crate::replication::now_ms()
}

fn append_failed(e: AppendError) -> Produced {
    let error = match &e {
        AppendError::InvalidBatch { source, .. } => match source {
            BatchError::UnsupportedMagic(_) => ResponseError::UnsupportedForMessageFormat,
            BatchError::TooLarge { .. } => ResponseError::MessageTooLarge,
            _ => ResponseError::CorruptMessage,
        },
        AppendError::Empty => ResponseError::CorruptMessage,
        AppendError::Storage(_) | AppendError::LowOnSpace { .. } => {
            ResponseError::KafkaStorageError
        }
        // A leader's append in an epoch older than its log's latest: another replica led
        // since, and this one does not know it yet.
        AppendError::Closed | AppendError::EpochWentBack { .. } => {
            ResponseError::NotLeaderOrFollower
        }
        // A follower's refusals: a leader's own append never starts anywhere but at its end.
        AppendError::NotAtEnd { .. } | AppendError::NoLeaderEpoch { .. } => {
            ResponseError::UnknownServerError
        }
    };
    Produced::failed(error, e.to_string())
}

fn recompress_failed(e: recompress::RecompressError) -> Produced {
    use recompress::RecompressError as E;
    let error = match &e {
        E::InvalidBatch { source, .. } => match source {
            BatchError::UnsupportedMagic(_) => ResponseError::UnsupportedForMessageFormat,
            BatchError::TooLarge { .. } => ResponseError::MessageTooLarge,
            _ => ResponseError::CorruptMessage,
        },
        E::TooLarge { .. } => ResponseError::RecordListTooLarge,
        E::Decompress { .. } | E::BadRecords { .. } => ResponseError::CorruptMessage,
        E::Compress { .. } => ResponseError::UnknownServerError,
    };
    Produced::failed(error, e.to_string())
}

fn sync_failed(e: SyncError) -> Produced {
    let error = match e {
        SyncError::Storage(_) => ResponseError::KafkaStorageError,
        SyncError::Closed | SyncError::Truncated => ResponseError::NotLeaderOrFollower,
    };
    Produced::failed(error, e.to_string())
}

pub fn read_error(e: &ReadError) -> ResponseError {
    match e {
        ReadError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
        ReadError::Corrupt { .. } => ResponseError::CorruptMessage,
        ReadError::Storage(_) => ResponseError::KafkaStorageError,
        ReadError::Closed => ResponseError::NotLeaderOrFollower,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::batch::testing;
    use storage::{IoMode, LogConfig, ShardStorage, StorageConfig};

    fn idempotent_batch(sequence: i32) -> BytesMut {
        BytesMut::from(&testing::with_producer(testing::batch(4, 100, 0), 7, 0, sequence)[..])
    }

    #[test]
    fn a_retry_across_a_restart_is_answered_not_appended_again() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let dir = tempfile::tempdir().unwrap();
                let mode = storage::resolve_io_mode(dir.path(), IoMode::Auto).unwrap();
                let shard = ShardStorage::open(dir.path(), StorageConfig::default(), mode)
                    .await
                    .unwrap();
                let open = || async {
                    let log = shard
                        .open_log(dir.path(), LogConfig::default())
                        .await
                        .unwrap();
                    Partition::new("t".into(), 0, log, LeaderEpoch::default(), None)
                };
                async fn produce(p: &Partition, sequence: i32) -> Produced {
                    match p
                        .append_produced(idempotent_batch(sequence), Acks::All)
                        .await
                    {
                        Ok(pending) => p.acknowledge(&pending, Acks::All, Durability::Fsync).await,
                        Err(refused) => refused,
                    }
                }
                let p = open().await;
                assert_eq!(produce(&p, 0).await.base_offset, 0);
                assert_eq!(produce(&p, 4).await.base_offset, 4);
                // kill -9 after the write, before the answer: the producer retries both. (The old
                // log is left open but idle: everything it had is durable.)
                drop(p);
                let p = open().await;
                assert_eq!(produce(&p, 0).await.base_offset, 0, "a duplicate");
                assert_eq!(produce(&p, 4).await.base_offset, 4, "a duplicate");
                assert_eq!(p.log.log_end_offset(), 8, "nothing appended twice");
                let gap = produce(&p, 12).await;
                assert_eq!(gap.error, Some(ResponseError::OutOfOrderSequenceNumber));
                assert_eq!(produce(&p, 8).await.base_offset, 8);
                p.log.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
    }
}
