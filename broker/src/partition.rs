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

use crate::config::Durability;
use crate::producer::{Producers, Verdict};
use crate::recompress::{self, TopicCompression};

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

/// Where a record set went.
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
    pub fn new(topic: String, index: i32, log: Rc<Log>, leader_epoch: LeaderEpoch) -> Partition {
        Partition {
            topic,
            index,
            log,
            leader_epoch: Cell::new(leader_epoch),
            producers: RefCell::new(None),
            idempotent_lock: FifoLock::new(),
            compression: Cell::new(TopicCompression::Producer),
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

    /// Appends a producer's record set and waits as `acks` and `durability` say, at most
    /// `timeout`.
    pub async fn produce(
        &self,
        records: BytesMut,
        acks: Acks,
        durability: Durability,
        timeout: Duration,
    ) -> Produced {
        let records = match self.compression.get() {
            TopicCompression::Producer => records,
            TopicCompression::Codec(codec) => {
                let max_bytes = self.log.config().max_message_bytes;
                match recompress::recompress(records, codec, max_bytes) {
                    Ok(records) => records,
                    Err(e) => return recompress_failed(e),
                }
            }
        };
        let first = match BatchHeader::parse(&records) {
            Ok(h) => h,
            Err(e) => {
                return append_failed(AppendError::InvalidBatch {
                    position: 0,
                    source: e,
                });
            }
        };
        let appended = if first.has_producer_id() {
            self.append_idempotent(records, &first).await
        } else {
            self.log
                .append(records, self.leader_epoch.get().0)
                .await
                .map(|i| Appended::from_log(&i))
                .map_err(append_failed)
        };
        let Appended {
            base_offset,
            next_offset,
            log_append_time_ms,
        } = match appended {
            Ok(appended) => appended,
            Err(produced) => return produced,
        };
        let wait = async {
            match (acks, durability) {
                (Acks::None, _) => Ok(()),
                (Acks::All, Durability::Fsync) => self.log.wait_durable(next_offset).await,
                _ => self.log.wait_written(next_offset).await,
            }
        };
        let waited = glommio::timer::timeout(timeout, async { Ok(wait.await) }).await;
        match waited {
            Ok(Ok(())) => Produced {
                error: None,
                message: None,
                base_offset,
                log_start_offset: self.log.log_start_offset(),
                log_append_time_ms: log_append_time_ms.unwrap_or(-1),
            },
            Ok(Err(e)) => sync_failed(e),
            Err(_) => Produced::failed(
                ResponseError::RequestTimedOut,
                format!("records at {base_offset} not acknowledged within {timeout:?}"),
            ),
        }
    }

    async fn append_idempotent(
        &self,
        records: BytesMut,
        first: &BatchHeader,
    ) -> Result<Appended, Produced> {
        let _turn = self
            .idempotent_lock
            .acquire()
            .await
            .map_err(|_| Produced::failed(ResponseError::NotLeaderOrFollower, None))?;
        if self.producers.borrow().is_none() {
            let rebuilt = self.rebuild_producers().await;
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
                    .append(records, self.leader_epoch.get().0)
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
        let high_watermark = self.log.high_watermark();
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
        self.log.high_watermark() > offset || offset < self.log.log_start_offset()
    }
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
        AppendError::Closed => ResponseError::NotLeaderOrFollower,
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
                    Partition::new("t".into(), 0, log, LeaderEpoch::default())
                };
                async fn produce(p: &Partition, sequence: i32) -> Produced {
                    p.produce(
                        idempotent_batch(sequence),
                        Acks::All,
                        Durability::Fsync,
                        Duration::from_secs(10),
                    )
                    .await
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
