//! One partition's log: an ordered run of segments, appends with dense offsets, reads, and the
//! watermarks that say how far the log is written, durable and visible.
//!
//! A log lives on one shard and is used only from that shard's executor, so its state sits in
//! `RefCell`s that are never borrowed across an await. Appends, rolls, truncation and retention
//! (everything that changes the segments) take the append lock, a FIFO semaphore, so offsets are
//! handed out in the order appends arrive. Reads take no lock: they copy what they need out of the
//! state, read the file, and start over if the log was truncated meanwhile.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use futures_lite::future;

use crate::background::{self, Background, LogSlot};

use crate::batch::{self, BatchHeader, TimestampType};
use crate::budget::Budget;
use crate::cache::{BatchCache, CacheKey, CachedBatch};
use crate::config::{LogConfig, StorageConfig};
use crate::epochs::{EpochCheck, EpochEntry, LeaderEpochs};
use crate::error::{AppendError, IoFailure, LogError, ReadError, SyncError};
use crate::fifo_lock::FifoLock;
use crate::file::{self, ResolvedIoMode, SegmentFile};
use crate::index_budget::{IndexBudget, IndexLoad};
use crate::journal::Journal;
use crate::page_cache::PageCacheRelease;
use crate::readahead::{Continuation, ReadAhead};
use crate::recovery::CleanMarker;
use crate::segment::{self, Indexes, Segment};
use crate::space::FreeSpace;
use crate::start_offset::StartOffset;
use crate::watermark::{Reached, Watermark};
use crate::writer::{SegmentWriter, WriterLimits, WrittenOffsets};

/// What a shard's logs share: IO settings, the IO mode of the data directory, the batch cache,
/// the budgets for write buffers, reserved space and read-ahead, the background work (flushes,
/// syncs, timers) and the free-space guard.
#[derive(Debug)]
pub struct ShardStorage {
    pub(crate) config: StorageConfig,
    pub(crate) io_mode: ResolvedIoMode,
    pub(crate) cache: BatchCache,
    pub(crate) readahead: Rc<Budget>,
    pub(crate) write_buffers: Rc<Budget>,
    pub(crate) reserve_ahead: Rc<Budget>,
    pub(crate) background: Background,
    pub(crate) space: FreeSpace,
    pub(crate) indexes: IndexBudget,
    pub(crate) page_cache: Rc<PageCacheRelease>,
    /// Where small writes go to survive the process (`crate::journal`); none with buffered IO
    /// (every write goes through the page cache then) or a zero budget.
    pub(crate) journal: Option<Rc<Journal>>,
}

impl ShardStorage {
    /// Sets up storage for the calling executor's shard, for logs under `data_dir`. `io_mode`
    /// comes from [`crate::resolve_io_mode`], decided once for the data directory.
    pub async fn open(
        data_dir: &Path,
        config: StorageConfig,
        io_mode: ResolvedIoMode,
    ) -> Result<Rc<ShardStorage>, IoFailure> {
        file::calibrate_direct_io(data_dir, io_mode).await?;
        let journal = match (io_mode, config.journal_bytes) {
            (ResolvedIoMode::Direct, bytes) if bytes > 0 => {
                Journal::open(data_dir, config.shard_index, bytes).map(|j| j.map(Rc::new))
            }
            _ => Ok(None),
        }?;
        let storage = Rc::new(ShardStorage {
            cache: BatchCache::new(config.cache_bytes_max),
            readahead: Budget::new(config.readahead_bytes_max as u64),
            write_buffers: Budget::new(config.write_buffer_bytes as u64),
            reserve_ahead: Budget::new(config.preallocate_bytes),
            background: Background::new(),
            space: FreeSpace::new(data_dir, config.min_free_bytes),
            indexes: IndexBudget::new(config.index_bytes_max as u64),
            page_cache: Rc::new(PageCacheRelease::default()),
            journal,
            config,
            io_mode,
        });
        Background::start(&storage);
        Ok(storage)
    }

    pub fn cache_used_bytes(&self) -> usize {
        self.cache.used_bytes()
    }

    /// Memory held by write buffers (filling or being written), shard-wide.
    pub fn write_buffer_used_bytes(&self) -> u64 {
        self.write_buffers.used_bytes()
    }

    /// Memory held by the loaded indexes of sealed segments, shard-wide.
    pub fn index_used_bytes(&self) -> u64 {
        self.indexes.used_bytes()
    }

    /// Disk space reserved ahead of the writes of the shard's active segments.
    pub fn reserved_ahead_bytes(&self) -> u64 {
        self.reserve_ahead.used_bytes()
    }

    pub(crate) fn writer_limits(&self) -> WriterLimits {
        WriterLimits {
            in_flight_max: self.config.writes_in_flight_max,
            buffers: self.write_buffers.clone(),
            reserve_ahead: self.reserve_ahead.clone(),
            page_cache_write_max_bytes: self.config.page_cache_write_max_bytes,
            page_cache: self.page_cache.clone(),
            journal: self.journal.clone(),
        }
    }
}

/// Where an append landed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: i64,
    pub last_offset: i64,
    /// The log end offset after the append; wait on it with [`Log::wait_written`] and
    /// [`Log::wait_durable`].
    pub next_offset: i64,
    /// The time the batches were stamped with, on a LogAppendTime log.
    pub log_append_time_ms: Option<i64>,
}

#[derive(Debug)]
pub struct Log {
    /// The log itself, for the shard's background queue.
    pub(crate) me: Weak<Log>,
    pub(crate) slot: LogSlot,
    pub(crate) dir: PathBuf,
    pub(crate) shard: Rc<ShardStorage>,
    pub(crate) config: RefCell<LogConfig>,
    pub(crate) append_lock: FifoLock,
    pub(crate) state: RefCell<State>,
    pub(crate) cache_key: CacheKey,
    /// The log end offset: the offset the next append gets.
    pub(crate) end_offset: Watermark,
    /// Every batch below this offset survives the process: written to its file, or to the
    /// shard's journal.
    pub(crate) written_offset: Rc<Watermark>,
    /// Every batch below this offset is in its file (the cache may drop it).
    pub(crate) filed_offset: Rc<Watermark>,
    /// Every batch below this offset is fdatasync'd.
    pub(crate) durable_offset: Watermark,
    /// The highest offset someone waits to see durable.
    pub(crate) sync_wanted: Watermark,
    pub(crate) closed: Cell<bool>,
    /// Where the clean-shutdown marker is ([`Log::leave_clean`] and
    /// [`Log::leave_clean_to_append`] remove it before a change).
    pub(crate) clean_marker: Cell<CleanMarker>,
    /// The stretch of a segment read ahead of the last read from disk.
    pub(crate) readahead: RefCell<Option<ReadAhead>>,
    /// Where DeleteRecords moved the start (`crate::start_offset`).
    pub(crate) start: StartOffset,
    /// Where each leader epoch's batches start (`crate::epochs`), as the checkpoint says.
    pub(crate) epochs: RefCell<LeaderEpochs>,
}

#[derive(Debug)]
pub(crate) struct State {
    /// By base offset; the last one is the active segment.
    pub segments: BTreeMap<i64, Segment>,
    pub writer: Rc<SegmentWriter>,
    pub error: Option<IoFailure>,
    pub unsynced_messages: u64,
    /// When the oldest append not yet synced happened, for `flush.ms`.
    pub unsynced_since_ms: Option<u64>,
    /// Bumped by truncation, so a read that raced with one starts over.
    pub generation: u64,
    /// The log start while truncation has its active segment out of `segments`.
    pub start_while_cut: Option<i64>,
}

impl State {
    pub fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }

    pub fn log_start_offset(&self) -> i64 {
        self.segments
            .values()
            .next()
            .map(|s| s.base_offset)
            .or(self.start_while_cut)
            .expect("a log always has an active segment, except while truncation cuts it")
    }
}

/// A stretch read ahead is as long as the read it follows, within these bounds.
const READAHEAD_MIN_BYTES: usize = 256 << 10;
const READAHEAD_MAX_BYTES: usize = 4 << 20;

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Log {
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn config(&self) -> LogConfig {
        self.config.borrow().clone()
    }

    /// Takes new topic settings; they apply from the next append, roll or retention pass.
    pub fn set_config(&self, config: LogConfig) {
        *self.config.borrow_mut() = config.clamped();
    }

    /// The first offset readable: the first segment's base, or where DeleteRecords moved it.
    pub fn log_start_offset(&self) -> i64 {
        self.state.borrow().log_start_offset().max(self.start.get())
    }

    pub fn log_end_offset(&self) -> i64 {
        self.end_offset.get()
    }

    /// The log end offset as a watermark: long-polling readers wait on it.
    pub fn end_watermark(&self) -> &Watermark {
        &self.end_offset
    }

    /// The offset below which records are visible to consumers: those written to their files.
    /// (With replication the broker will keep its own high watermark, at most this.)
    pub fn high_watermark(&self) -> i64 {
        self.written_offset.get()
    }

    /// Every batch below this offset survives the process (in its file or in the journal).
    pub fn written_offset(&self) -> i64 {
        self.written_offset.get()
    }

    /// The watermarks a new writer of the log advances.
    fn written_offsets(&self) -> WrittenOffsets {
        WrittenOffsets {
            written: self.written_offset.clone(),
            filed: self.filed_offset.clone(),
        }
    }

    /// Every batch below this offset is synced (it survives the machine).
    pub fn durable_offset(&self) -> i64 {
        self.durable_offset.get()
    }

    /// The high watermark as a watermark, to wait for new visible records.
    pub fn high_watermark_mark(&self) -> &Watermark {
        &self.written_offset
    }

    pub fn size_bytes(&self) -> u64 {
        self.state
            .borrow()
            .segments
            .values()
            .map(|s| s.size_bytes)
            .sum()
    }

    /// The newest record timestamp in the log, if it has records. Loads the indexes of sealed
    /// segments that are not in memory (their time index holds their newest timestamp).
    pub async fn max_timestamp(&self) -> Result<Option<i64>, ReadError> {
        let bases: Vec<i64> = self.state.borrow().segments.keys().copied().collect();
        let mut max = i64::MIN;
        for base in bases {
            self.ensure_index(base).await.map_err(ReadError::Storage)?;
            if let Some(s) = self.state.borrow().segments.get(&base) {
                max = max.max(s.max_timestamp_ms);
            }
        }
        Ok(Some(max).filter(|&t| t != i64::MIN))
    }

    /// Puts the indexes of the sealed segment at `base` in memory if they are not (and the
    /// segment is still there), counting them in the shard's index budget.
    pub(crate) async fn ensure_index(&self, base: i64) -> Result<(), IoFailure> {
        let sealed = match self.state.borrow().segments.get(&base) {
            Some(s) if !s.indexes.in_memory() => {
                Segment::sealed(base, s.file.clone(), s.size_bytes, s.next_offset)
            }
            _ => return Ok(()),
        };
        let config = self.config();
        let loaded = self
            .shard
            .load_sealed_segment(&self.dir, &sealed, &config)
            .await
            .map_err(|e| match e {
                LogError::Io(failure) => failure,
                other => IoFailure::new(
                    "loading the indexes of",
                    sealed.file.path(),
                    &std::io::Error::other(other.to_string()),
                ),
            })?;
        let load = self.shard.indexes.new_load();
        let bytes = match self.state.borrow_mut().segments.get_mut(&base) {
            Some(s) if !s.indexes.in_memory() => {
                s.take_index(loaded, load);
                s.index_bytes()
            }
            _ => return Ok(()),
        };
        self.shard
            .indexes
            .loaded(self.me.clone(), base, load, bytes);
        Ok(())
    }

    /// Frees the indexes of a sealed segment if they are still those of `load` (the shard's
    /// index budget asks). Never the active segment's: it is being built.
    pub(crate) fn drop_index(&self, base: i64, load: IndexLoad) {
        // Called with no log's state borrowed; if this one's were, keeping the index is safe.
        let Ok(mut state) = self.state.try_borrow_mut() else {
            return;
        };
        if let Some(s) = state.segments.get_mut(&base) {
            s.drop_index(load);
        }
    }

    pub fn segment_count(&self) -> usize {
        self.state.borrow().segments.len()
    }

    fn check_open(&self) -> Result<(), AppendError> {
        if self.closed.get() {
            return Err(AppendError::Closed);
        }
        match &self.state.borrow().error {
            Some(e) => Err(AppendError::Storage(e.clone())),
            None => Ok(()),
        }
    }

    /// Appends a producer's record set (one or more v2 batches) and assigns offsets to it. The
    /// set is validated whole first: if any batch is invalid nothing is appended. The batches'
    /// `baseOffset` and `partitionLeaderEpoch` are patched in place, then the bytes are frozen
    /// into the cache and copied once into the write buffers. A `leader_epoch` newer than the
    /// log's latest starts a new entry of [`Log::leader_epochs`], saved before the first batch
    /// is; an older one is refused (`EpochWentBack`).
    ///
    /// Returns once the records are in the log (readable from the cache, ordered, queued for
    /// the disk); [`Log::wait_written`] and [`Log::wait_durable`] wait for the disk.
    pub async fn append(
        &self,
        mut records: BytesMut,
        leader_epoch: i32,
    ) -> Result<AppendInfo, AppendError> {
        let config = self.config();
        let batch_bytes_max = config
            .max_message_bytes
            .min(config.segment_bytes_max as usize);
        let headers = split_batches(&records, batch_bytes_max)?;
        let record_bytes = records.len() as u64;
        self.check_room()?;
        let _permit = self
            .append_lock
            .acquire()
            .await
            .map_err(|_| AppendError::Closed)?;
        self.check_open()?;
        self.leave_clean_to_append().map_err(AppendError::Storage)?;
        let base_offset = self.end_offset.get();
        self.record_epochs([(leader_epoch, base_offset)]).await?;
        let mut next_offset = base_offset;
        // One time for the whole record set, as Kafka does.
        let log_append_time_ms =
            (config.timestamp_type == TimestampType::LogAppendTime).then(|| now_ms() as i64);
        for header in headers {
            let mut batch = records.split_to(header.size_bytes());
            let header = match log_append_time_ms {
                Some(now_ms) => batch::stamp_log_append_time(&mut batch, &header, now_ms),
                None => header,
            };
            batch::assign_offsets(&mut batch, next_offset, leader_epoch);
            let header = BatchHeader {
                base_offset: next_offset,
                partition_leader_epoch: leader_epoch,
                ..header
            };
            let bytes = batch.freeze();
            debug_assert_eq!(
                batch::validate(&bytes, usize::MAX),
                Ok(header),
                "a batch stays valid, and says what the log records of it, once stamped"
            );
            next_offset = header.next_offset();
            self.append_batch(&config, &header, bytes).await?;
        }
        self.appended(&config, record_bytes, next_offset);
        Ok(AppendInfo {
            base_offset,
            last_offset: next_offset - 1,
            next_offset,
            log_append_time_ms,
        })
    }

    /// A follower's append: batches a leader already stamped (offsets, epochs, timestamps),
    /// kept byte for byte. Each element of `batches` holds whole batches, back to back. Each
    /// batch is validated (length, magic, CRC); the first must start at the log end offset and
    /// each next one where the previous ends (`NotAtEnd`); epochs must not go back
    /// (`EpochWentBack`). Nothing of an invalid set is appended. A batch of a newer epoch
    /// starts a new entry of [`Log::leader_epochs`], saved before the batch is appended.
    ///
    /// The batches take the leader's write path: the cache (as slices of `batches`, not
    /// copies), the write buffers, the shard's flusher.
    pub async fn append_replicated(&self, batches: &[Bytes]) -> Result<AppendInfo, AppendError> {
        let config = self.config();
        let split = split_replicated(batches)?;
        let record_bytes = split.iter().map(|(_, b)| b.len() as u64).sum();
        self.check_room()?;
        let _permit = self
            .append_lock
            .acquire()
            .await
            .map_err(|_| AppendError::Closed)?;
        self.check_open()?;
        self.leave_clean_to_append().map_err(AppendError::Storage)?;
        let base_offset = self.end_offset.get();
        let mut next_offset = base_offset;
        for (header, _) in &split {
            if header.base_offset != next_offset {
                return Err(AppendError::NotAtEnd {
                    expected: next_offset,
                    got: header.base_offset,
                });
            }
            next_offset = header.next_offset();
        }
        self.record_epochs(
            split
                .iter()
                .map(|(h, _)| (h.partition_leader_epoch, h.base_offset)),
        )
        .await?;
        for (header, bytes) in split {
            self.append_batch(&config, &header, bytes).await?;
        }
        self.appended(&config, record_bytes, next_offset);
        Ok(AppendInfo {
            base_offset,
            last_offset: next_offset - 1,
            next_offset,
            log_append_time_ms: None,
        })
    }

    /// The free-space guard, before an append takes the lock.
    fn check_room(&self) -> Result<(), AppendError> {
        self.shard
            .space
            .check_room()
            .map_err(|low| AppendError::LowOnSpace {
                dir: self.shard.space.dir().to_path_buf(),
                free_bytes: low.free_bytes,
                min_free_bytes: low.min_free_bytes,
            })
    }

    /// Checks the (epoch, base offset) of each batch about to be appended, in order, against
    /// the log's epochs, and saves the entries the newer ones start before any is appended
    /// (with the append lock held). Nothing changes when one is refused.
    async fn record_epochs(
        &self,
        batches: impl IntoIterator<Item = (i32, i64)>,
    ) -> Result<(), AppendError> {
        let mut epochs: Option<LeaderEpochs> = None;
        for (epoch, start_offset) in batches {
            let check = match &epochs {
                Some(new) => new.check(epoch),
                None => self.epochs.borrow().check(epoch),
            };
            match check {
                EpochCheck::Same => {}
                EpochCheck::New => epochs
                    .get_or_insert_with(|| self.epochs.borrow().clone())
                    .push(EpochEntry {
                        epoch,
                        start_offset,
                    }),
                EpochCheck::WentBack(latest) => {
                    return Err(AppendError::EpochWentBack { latest, got: epoch });
                }
                EpochCheck::Missing => return Err(AppendError::NoLeaderEpoch { epoch }),
            }
        }
        match epochs {
            // Boxed: a new epoch is rare, and its file write awaited inline would make every
            // append's future larger by its whole state.
            Some(epochs) => Box::pin(self.replace_epochs(epochs))
                .await
                .map_err(AppendError::Storage),
            None => Ok(()),
        }
    }

    /// The write path every batch takes, the leader's and a follower's: a roll if it does not
    /// fit, room in the write buffers, the active segment's bookkeeping, the cache, the log end,
    /// and the shard's flusher told (with the append lock held). `header` is `bytes`'s.
    async fn append_batch(
        &self,
        config: &LogConfig,
        header: &BatchHeader,
        bytes: Bytes,
    ) -> Result<(), AppendError> {
        let result = self.append_batch_inner(config, header, bytes).await;
        if result.is_err() {
            // Entries saved for batches that did not make it (the checkpoint may keep them:
            // recovery drops entries past the log's end).
            let end = self.end_offset.get();
            self.epochs.borrow_mut().truncate_from_end(end);
        }
        result
    }

    async fn append_batch_inner(
        &self,
        config: &LogConfig,
        header: &BatchHeader,
        bytes: Bytes,
    ) -> Result<(), AppendError> {
        self.roll_if_needed(config, header.size_bytes(), header.last_offset_delta)
            .await?;
        let writer = self.state.borrow().writer.clone();
        writer.wait_for_room().await.map_err(AppendError::Storage)?;
        self.check_open()?;
        let next_offset = header.next_offset();
        writer.append(&bytes, next_offset);
        {
            let mut state = self.state.borrow_mut();
            state
                .active_mut()
                .record(header, config.index_interval_bytes);
            state.unsynced_messages += header.record_count.max(0) as u64;
            state.unsynced_since_ms.get_or_insert_with(now_ms);
        }
        self.shard.cache.insert(
            self.cache_key,
            CachedBatch {
                base_offset: header.base_offset,
                next_offset,
                bytes,
            },
        );
        self.end_offset.advance(next_offset);
        // Per batch: the next one may wait for room, which this one's write makes.
        self.shard.background.notify(self);
        Ok(())
    }

    /// After an append of `record_bytes` that ended at `next_offset`: the free-space guard's
    /// count, and a sync when `flush.messages` asks for one.
    fn appended(&self, config: &LogConfig, record_bytes: u64, next_offset: i64) {
        self.shard.space.appended(record_bytes);
        let unsynced = self.state.borrow().unsynced_messages;
        let sync_by_count = config.flush_messages.is_some_and(|n| unsynced >= n);
        if sync_by_count {
            self.sync_wanted.advance(next_offset);
            self.shard.background.notify(self);
        }
    }

    /// Waits until every batch below `offset` survives a crash of the process: written to its
    /// file, or to the shard's journal.
    pub async fn wait_written(&self, offset: i64) -> Result<(), SyncError> {
        self.wait(&self.written_offset, offset).await
    }

    /// Waits until every batch below `offset` is fdatasync'd (it survives a power loss).
    /// Waiters share syncs: one fdatasync covers everything appended before it started.
    pub async fn wait_durable(&self, offset: i64) -> Result<(), SyncError> {
        self.sync_wanted.advance(offset);
        self.shard.background.notify(self);
        self.wait(&self.durable_offset, offset).await
    }

    async fn wait(&self, mark: &Watermark, offset: i64) -> Result<(), SyncError> {
        match mark.wait_for(offset).await {
            Reached::Yes(_) => Ok(()),
            Reached::Reset => Err(SyncError::Truncated),
            Reached::Closed => Err(match &self.state.borrow().error {
                Some(e) => SyncError::Storage(e.clone()),
                None => SyncError::Closed,
            }),
        }
    }

    /// Rolls to a new segment when the next batch would not fit the active one, or it is
    /// older than `segment.ms`.
    async fn roll_if_needed(
        &self,
        config: &LogConfig,
        batch_bytes: usize,
        last_offset_delta: i32,
    ) -> Result<(), AppendError> {
        let must_roll = {
            let state = self.state.borrow();
            let active = state.active();
            let relative_end =
                self.end_offset.get() + i64::from(last_offset_delta) - active.base_offset;
            !active.is_empty()
                && (active.size_bytes + batch_bytes as u64 > config.segment_bytes_max
                    || now_ms().saturating_sub(active.created_ms) >= config.segment_ms
                    || relative_end > i64::from(i32::MAX))
        };
        if must_roll {
            // Boxed: awaited inline, a roll's state made every append's future over a
            // kilobyte larger, copied for each partition of every produce.
            Box::pin(self.roll())
                .await
                .map_err(|e| AppendError::Storage(self.fail(e)))?;
        }
        Ok(())
    }

    /// Records a disk failure: the log stops taking appends, and every waiter is told.
    pub(crate) fn fail(&self, e: IoFailure) -> IoFailure {
        tracing::error!(log = %self.dir.display(), error = %e, "disk error: log is offline");
        self.state.borrow_mut().error.get_or_insert(e.clone());
        self.written_offset.close();
        self.filed_offset.close();
        self.durable_offset.close();
        e
    }

    /// Seals the active segment (written, synced, indexes saved) and starts a new one at the
    /// log end offset. Called with the append lock held.
    pub(crate) async fn roll(&self) -> Result<(), IoFailure> {
        self.leave_clean().await?;
        let (writer, base_offset) = {
            let state = self.state.borrow();
            (state.writer.clone(), state.active().base_offset)
        };
        self.seal(&writer, base_offset).await?;
        let next = self.end_offset.get();
        let file = self.create_segment_file(next).await?;
        let writer = Rc::new(SegmentWriter::new(
            file.clone(),
            0,
            &[],
            0,
            self.shard.writer_limits(),
            self.written_offsets(),
        ));
        let mut state = self.state.borrow_mut();
        state
            .segments
            .insert(next, Segment::new(next, file, now_ms()));
        state.writer = writer;
        // The sealed segment's indexes stay in memory, now under the shard's budget.
        let load = self.shard.indexes.new_load();
        let sealed_bytes = state.segments.get_mut(&base_offset).map(|s| {
            s.indexes = Indexes::Loaded(load);
            s.index_bytes()
        });
        drop(state);
        if let Some(bytes) = sealed_bytes {
            self.shard
                .indexes
                .loaded(self.me.clone(), base_offset, load, bytes);
        }
        // Everything before the new segment was synced by the seal.
        self.durable_offset.advance(next);
        let mut state = self.state.borrow_mut();
        state.unsynced_messages = 0;
        state.unsynced_since_ms = None;
        Ok(())
    }

    /// Writes out and syncs a segment, trims its preallocated tail, and saves its indexes
    /// atomically (a sealed segment's index files are trusted whatever the marker says).
    async fn seal(&self, writer: &Rc<SegmentWriter>, base_offset: i64) -> Result<(), IoFailure> {
        let Some((offsets, times)) = self.finish_segment(writer, base_offset).await? else {
            return Ok(());
        };
        writer.file().fdatasync().await?;
        file::write_file_atomic(
            &segment::offset_index_path(&self.dir, base_offset),
            &offsets,
        )
        .await?;
        file::write_file_atomic(&segment::time_index_path(&self.dir, base_offset), &times).await
    }

    /// Writes out a segment and trims its preallocated tail (not synced); its indexes encoded,
    /// (offsets, times), unless the segment is gone.
    pub(crate) async fn finish_segment(
        &self,
        writer: &Rc<SegmentWriter>,
        base_offset: i64,
    ) -> Result<Option<(Vec<u8>, Vec<u8>)>, IoFailure> {
        let size = writer.finish().await?;
        writer.file().truncate(size).await?;
        let mut state = self.state.borrow_mut();
        let Some(segment) = state.segments.get_mut(&base_offset) else {
            return Ok(None);
        };
        debug_assert_eq!(segment.size_bytes, size, "writer and segment agree on size");
        segment.seal_time_index();
        Ok(Some((
            segment.offset_index.encode(),
            segment.time_index.encode(),
        )))
    }

    pub(crate) async fn create_segment_file(
        &self,
        base_offset: i64,
    ) -> Result<Rc<SegmentFile>, IoFailure> {
        let path = segment::log_path(&self.dir, base_offset);
        let file = SegmentFile::open(&path, self.shard.io_mode, true).await?;
        file.truncate(0).await?;
        file::sync_dir(&self.dir).await?;
        Ok(Rc::new(file))
    }

    /// Reads whole batches starting with the one that holds `offset`: at least one (even if it
    /// is larger than `max_bytes`, as Kafka requires), then more while they fit, none ending
    /// past `upper_bound` (the high watermark, for consumers). Recent batches come from the
    /// shard's cache; older ones from the segment files, CRC-checked.
    pub async fn read(
        &self,
        offset: i64,
        max_bytes: usize,
        upper_bound: i64,
    ) -> Result<Vec<Bytes>, ReadError> {
        loop {
            let unloaded = self
                .state
                .borrow()
                .segments
                .range(..=offset)
                .next_back()
                .filter(|(_, s)| !s.indexes.in_memory())
                .map(|(&base, _)| base);
            // (Recent batches, which the cache may hold, are in the active segment, always
            // loaded.)
            if let Some(base) = unloaded {
                self.ensure_index(base).await.map_err(ReadError::Storage)?;
                continue;
            }
            let (file, start, readable, generation, upper, segment_base) = {
                let state = self.state.borrow();
                if self.closed.get() {
                    return Err(ReadError::Closed);
                }
                let log_start_offset = state.log_start_offset().max(self.start.get());
                let log_end_offset = self.end_offset.get();
                if offset < log_start_offset || offset > log_end_offset {
                    return Err(ReadError::OffsetOutOfRange {
                        offset,
                        log_start_offset,
                        log_end_offset,
                    });
                }
                let upper = upper_bound.min(log_end_offset);
                if offset >= upper {
                    return Ok(Vec::new());
                }
                if let Some(batches) =
                    self.shard
                        .cache
                        .read(self.cache_key, offset, max_bytes, upper)
                {
                    return Ok(batches);
                }
                let Some(segment) = state.segments.range(..=offset).next_back().map(|(_, s)| s)
                else {
                    return Ok(Vec::new());
                };
                let is_active = segment.base_offset == state.active().base_offset;
                let readable = if is_active {
                    segment.size_bytes.min(state.writer.written_position())
                } else {
                    segment.size_bytes
                };
                (
                    segment.file.clone(),
                    segment.start_position(offset),
                    readable,
                    state.generation,
                    // A segment serves its own offsets only: a damaged sealed segment (kept
                    // whole by recovery) may hold batches past its end, which are the next
                    // segment's offsets.
                    if is_active {
                        upper
                    } else {
                        upper.min(segment.next_offset)
                    },
                    segment.base_offset,
                )
            };
            // A read that continues the last one takes what was read ahead for it; any other
            // read drops it.
            let ahead = self
                .readahead
                .borrow_mut()
                .take()
                .filter(|r| r.at.segment_base == segment_base && r.at.generation == generation);
            let (start, prefetched) = match ahead {
                Some(r) if r.at.offset == offset => (r.at.position, r.take().await),
                _ => (start, None),
            };
            let result = segment::read_batches(
                &file,
                segment::ReadRange {
                    start,
                    offset,
                    max_bytes,
                    upper_bound: upper,
                    readable_bytes: readable,
                    read_bytes_max: self.shard.config.read_bytes_max,
                },
                prefetched,
            )
            .await;
            if self.state.borrow().generation != generation {
                continue;
            }
            let read = match result {
                Ok(read) => read,
                Err(e) => {
                    tracing::error!(log = %self.dir.display(), error = %e, "read failed");
                    return Err(e);
                }
            };
            if let Some(last) = read.batches.last().and_then(|b| BatchHeader::parse(b).ok()) {
                let returned: usize = read.batches.iter().map(Bytes::len).sum();
                let len = (returned.clamp(READAHEAD_MIN_BYTES, READAHEAD_MAX_BYTES) as u64)
                    .min(readable.saturating_sub(read.end)) as usize;
                if len > 0 {
                    let at = Continuation {
                        segment_base,
                        generation,
                        offset: last.next_offset(),
                        position: read.end,
                    };
                    *self.readahead.borrow_mut() =
                        ReadAhead::start(file, at, len, &self.shard.readahead);
                }
            }
            return Ok(read.batches);
        }
    }

    /// Whether [`Log::read`] from `offset` below `upper_bound` is answered without reading a
    /// segment file: from the cache, or with nothing (an offset out of range, at the end). Lets
    /// a caller budget the memory of disk reads only (cached batches are bounded by the cache).
    pub fn read_is_from_memory(&self, offset: i64, upper_bound: i64) -> bool {
        let state = self.state.borrow();
        let end = self.end_offset.get();
        self.closed.get()
            || offset < state.log_start_offset()
            || offset >= upper_bound.min(end)
            || self.shard.cache.holds(self.cache_key, offset)
    }

    /// The headers of the batches in about the last `max_bytes` of the active segment, oldest
    /// first: what a broker needs to rebuild state kept in memory (idempotent producers' last
    /// sequences) after a restart, without reading the whole log.
    pub async fn recent_batch_headers(
        &self,
        max_bytes: usize,
    ) -> Result<Vec<BatchHeader>, ReadError> {
        let (file, start, size, offset) = {
            let state = self.state.borrow();
            let active = state.active();
            let from = active.size_bytes.saturating_sub(max_bytes as u64);
            // The last index entry at or before `from` is a batch boundary to start parsing at.
            let (start, offset) = active.boundary_at_or_before(from);
            let size = active.size_bytes.min(state.writer.written_position());
            (active.file.clone(), start, size, offset)
        };
        let read = segment::read_batches(
            &file,
            segment::ReadRange {
                start,
                offset,
                max_bytes: usize::MAX,
                upper_bound: i64::MAX,
                readable_bytes: size,
                read_bytes_max: self.shard.config.read_bytes_max,
            },
            None,
        )
        .await?;
        Ok(read
            .batches
            .iter()
            .filter_map(|b| BatchHeader::parse(b).ok())
            .collect())
    }

    /// The first offset whose record has a timestamp at or after `timestamp_ms`, with the
    /// record's timestamp; `None` if no record is that new. For compressed batches the answer is
    /// the batch's first offset and newest timestamp (finding the record would mean decompressing).
    pub async fn offset_for_timestamp(
        &self,
        timestamp_ms: i64,
    ) -> Result<Option<(i64, i64)>, ReadError> {
        let bases: Vec<i64> = self.state.borrow().segments.keys().copied().collect();
        let mut found = None;
        for base in bases {
            self.ensure_index(base).await.map_err(ReadError::Storage)?;
            let newer = self
                .state
                .borrow()
                .segments
                .get(&base)
                .is_some_and(|s| s.max_timestamp_ms >= timestamp_ms);
            if newer {
                found = Some(base);
                break;
            }
        }
        let Some(base) = found else {
            return Ok(None);
        };
        let start = self.state.borrow().segments.get(&base).map(|segment| {
            segment
                .time_index
                .floor_before(timestamp_ms)
                .map_or(segment.base_offset, |e| {
                    segment.base_offset + i64::from(e.relative_offset)
                })
        });
        let Some(mut offset) = start else {
            // Retention took the segment meanwhile: search again from the new log start.
            return Box::pin(self.offset_for_timestamp(timestamp_ms)).await;
        };
        loop {
            let end = self.log_end_offset();
            if offset >= end {
                return Ok(None);
            }
            let batches = match self.read(offset, 1 << 20, end).await {
                Err(ReadError::OffsetOutOfRange { .. }) => {
                    // Retention moved the start past us: continue from the new start.
                    offset = self.log_start_offset().max(offset);
                    continue;
                }
                other => other?,
            };
            if batches.is_empty() {
                return Ok(None);
            }
            for bytes in &batches {
                let header = BatchHeader::parse(bytes).map_err(|source| ReadError::Corrupt {
                    path: self.dir.clone(),
                    position: 0,
                    source,
                })?;
                if header.max_timestamp >= timestamp_ms && header.last_offset() >= offset {
                    let (found, timestamp) = batch::first_record_at_or_after(bytes, timestamp_ms)
                        .map_err(|source| ReadError::Corrupt {
                        path: self.dir.clone(),
                        position: 0,
                        source,
                    })?;
                    return Ok(Some((found.max(offset), timestamp)));
                }
                offset = header.next_offset();
            }
        }
    }

    /// Deletes whole sealed segments that retention (time or size) no longer keeps, and rolls
    /// an expired active segment first so it can go too. Returns how many were deleted.
    pub async fn enforce_retention(&self, now_ms: u64) -> Result<usize, LogError> {
        let config = self.config();
        let _permit = match self.append_lock.acquire().await {
            Ok(p) => p,
            Err(_) => return Ok(0),
        };
        if self.closed.get() {
            return Ok(0);
        }
        let expired = |s: &Segment| {
            config.retention_ms.is_some_and(|ms| {
                s.max_timestamp_ms != i64::MIN
                    && now_ms as i64 - s.max_timestamp_ms > ms.min(i64::MAX as u64) as i64
            })
        };
        let roll_for_time = {
            let state = self.state.borrow();
            let active = state.active();
            !active.is_empty()
                && (expired(active)
                    || now_ms.saturating_sub(active.created_ms) >= config.segment_ms)
        };
        if roll_for_time {
            self.roll().await.map_err(|e| self.fail(e))?;
        }
        // (base offset, next offset, size) of each sealed segment, oldest first.
        let (sealed, mut total): (Vec<(i64, i64, u64)>, u64) = {
            let state = self.state.borrow();
            let total = state.segments.values().map(|s| s.size_bytes).sum();
            let sealed = state.segments.values().take(state.segments.len() - 1);
            (
                sealed
                    .map(|s| (s.base_offset, s.next_offset, s.size_bytes))
                    .collect(),
                total,
            )
        };
        let records_start = self.start.get();
        let mut doomed = Vec::new();
        for (base, next, size) in sealed {
            // Below where DeleteRecords moved the start (left by a crash): doomed regardless.
            let below_start = next <= records_start;
            let over_size = config
                .retention_bytes
                .is_some_and(|max| total.saturating_sub(size) >= max);
            if !(below_start || over_size) {
                if config.retention_ms.is_none() {
                    break;
                }
                // Its newest timestamp is in its time index.
                self.ensure_index(base).await?;
                let state = self.state.borrow();
                if !state.segments.get(&base).is_some_and(expired) {
                    break;
                }
            }
            total -= size;
            doomed.push(base);
        }
        self.delete_segments(&doomed, "retention").await?;
        Ok(doomed.len())
    }

    /// Deletes the sealed segments that hold only offsets below `offset`, moving the log start
    /// up to at most `offset`: for logs that keep their own snapshots (the consumer offsets
    /// log). Returns how many were deleted.
    pub async fn delete_before(&self, offset: i64) -> Result<usize, LogError> {
        let _permit = match self.append_lock.acquire().await {
            Ok(p) => p,
            Err(_) => return Ok(0),
        };
        let doomed: Vec<i64> = {
            let state = self.state.borrow();
            let sealed = state.segments.values().take(state.segments.len() - 1);
            sealed
                .take_while(|s| s.next_offset <= offset)
                .map(|s| s.base_offset)
                .collect()
        };
        self.delete_segments(&doomed, "delete_before").await?;
        Ok(doomed.len())
    }

    /// Removes the given oldest segments (with the append lock held).
    async fn delete_segments(&self, bases: &[i64], why: &str) -> Result<(), LogError> {
        if !bases.is_empty() {
            self.leave_clean().await?;
        }
        for &base in bases {
            let removed = self.state.borrow_mut().segments.remove(&base);
            if let Some(segment) = removed {
                self.delete_segment_files(segment).await?;
            }
        }
        // The first kept epoch now starts at the log start (DeleteRecords may move the start
        // inside a segment, deleting none).
        let (start, end) = (self.log_start_offset(), self.end_offset.get());
        self.change_epochs(|epochs| epochs.keep_within(start, end))
            .await?;
        if !bases.is_empty() {
            self.shard.cache.forget_below(self.cache_key, start);
            tracing::info!(
                log = %self.dir.display(),
                segments = bases.len(),
                log_start_offset = start,
                why,
                "deleted old segments"
            );
        }
        Ok(())
    }

    async fn delete_segment_files(&self, segment: Segment) -> Result<(), IoFailure> {
        let base = segment.base_offset;
        drop(segment);
        for path in [
            segment::log_path(&self.dir, base),
            segment::offset_index_path(&self.dir, base),
            segment::time_index_path(&self.dir, base),
        ] {
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(IoFailure::new("deleting", &path, &e)),
            }
        }
        Ok(())
    }

    /// Removes every batch at or after `offset`; if `offset` falls inside a batch, that whole
    /// batch goes (as Kafka does). For a follower that must agree with its leader. Truncating
    /// below the log start empties the log, which then ends at its start offset.
    pub async fn truncate_to(&self, offset: i64) -> Result<(), LogError> {
        let _permit = match self.append_lock.acquire().await {
            Ok(p) => p,
            Err(_) => return Ok(()),
        };
        if offset >= self.end_offset.get() {
            return Ok(());
        }
        self.leave_clean().await?;
        let writer = self.state.borrow().writer.clone();
        writer.finish().await.map_err(|e| self.fail(e))?;
        let target = offset.max(self.log_start_offset());
        let doomed: Vec<i64> = {
            let state = self.state.borrow();
            let after = (
                std::ops::Bound::Excluded(target),
                std::ops::Bound::Unbounded,
            );
            state.segments.range(after).map(|(&b, _)| b).collect()
        };
        for base in doomed {
            let removed = self.state.borrow_mut().segments.remove(&base);
            if let Some(segment) = removed {
                self.delete_segment_files(segment).await?;
            }
        }
        let base = self.state.borrow().active().base_offset;
        self.ensure_index(base).await?;
        // The segment is taken out of the map while it is cut (its methods await); until it is
        // back, the log's start is still known to readers that ask (a replica's view, a fetch).
        let start_while_cut = self.log_start_offset();
        self.state.borrow_mut().start_while_cut = Some(start_while_cut);
        let mut segment = self
            .state
            .borrow_mut()
            .segments
            .remove(&base)
            .expect("the active segment is in the map");
        let base = segment.base_offset;
        // The segment (maybe sealed before) becomes the active one: its index files go stale,
        // and its indexes in memory are no longer the budget's to drop.
        segment.indexes = Indexes::Building;
        for path in [
            segment::offset_index_path(&self.dir, base),
            segment::time_index_path(&self.dir, base),
        ] {
            let _ = std::fs::remove_file(path);
        }
        let config = self.config();
        let file_bytes = segment.file.size().await?;
        segment
            .rewind_to(target, file_bytes, config.index_interval_bytes)
            .await?;
        let cut = segment.size_bytes;
        segment.file.truncate(cut).await?;
        segment.file.fdatasync().await?;
        let tail = segment.read_tail().await?;
        let next = segment.next_offset;
        let writer = Rc::new(SegmentWriter::new(
            segment.file.clone(),
            cut,
            &tail,
            cut,
            self.shard.writer_limits(),
            self.written_offsets(),
        ));
        {
            let mut state = self.state.borrow_mut();
            state.segments.insert(base, segment);
            state.start_while_cut = None;
            state.writer = writer;
            state.generation += 1;
            state.unsynced_messages = 0;
            state.unsynced_since_ms = None;
        }
        self.shard.cache.truncate(self.cache_key, next);
        self.end_offset.reset(next);
        self.written_offset.reset(next);
        self.filed_offset.reset(next);
        self.durable_offset.reset(next);
        self.sync_wanted.reset(next);
        self.change_epochs(|epochs| epochs.truncate_from_end(next))
            .await?;
        tracing::info!(log = %self.dir.display(), log_end_offset = next, "truncated");
        Ok(())
    }

    /// Closes the log and removes its directory and everything in it.
    pub async fn delete(&self) -> Result<(), LogError> {
        {
            let _permit = self.append_lock.acquire().await;
            self.closed.set(true);
            self.append_lock.close();
        }
        self.readahead.borrow_mut().take();
        self.shard.background.forget(self);
        self.shard.cache.deregister(self.cache_key);
        // Its journal entries must not be replayed into files of a log made later in its
        // place.
        let writer = self.state.borrow().writer.clone();
        writer.retire_journal().await;
        self.end_offset.close();
        self.written_offset.close();
        self.filed_offset.close();
        self.durable_offset.close();
        self.sync_wanted.close();
        std::fs::remove_dir_all(&self.dir)
            .map_err(|e| LogError::Io(IoFailure::new("deleting", &self.dir, &e)))
    }

    /// Writes appended bytes out and runs the syncs that waiters and the flush policy ask for,
    /// until there is nothing left to do. Run by the shard's flusher ([`background`]), one task
    /// at a time per log.
    ///
    /// Writes overlap: what arrived while earlier writes are on the device is submitted at once,
    /// up to `writes_in_flight_max` writes; past that, the next write waits for the oldest and
    /// then carries everything appended meanwhile (group commit). A request waits for about
    /// one device write, not for the round in flight and then its own. Syncs run one at a time,
    /// each covering everything appended before it started.
    pub(crate) async fn serve(&self) {
        // The flusher let the ready appends run before it started this task.
        let mut yielded = true;
        while !self.closed.get() {
            let end = self.end_offset.get();
            if self.sync_due() {
                if let Err(e) = self.sync(end).await {
                    self.fail(e);
                    return;
                }
                continue;
            }
            if self.written_offset.get() >= end {
                return;
            }
            // Let the appends that are ready to run (pipelined requests) go first: one write
            // then carries them all.
            if !std::mem::take(&mut yielded) {
                future::yield_now().await;
            }
            if self.submit_appended() {
                continue;
            }
            let writer = self.state.borrow().writer.clone();
            if let Err(e) = writer.wait_oldest_written().await {
                self.fail(e);
                return;
            }
        }
    }

    /// Serves the log on the spot when that needs no wait, and returns whether it did: no sync
    /// is due and what was appended went to the shard's journal or through the page cache (or
    /// nothing was appended).
    /// At 10,000 partitions nearly every log the flusher takes is served so, and a task for
    /// each would cost the shard more than the journal entry it writes.
    pub(crate) fn serve_at_once(&self) -> bool {
        if self.closed.get() {
            return true;
        }
        if self.sync_due() {
            return false;
        }
        self.written_offset.get() >= self.end_offset.get()
            || (self.submit_appended() && self.written_offset.get() >= self.end_offset.get())
    }

    /// Submits what was appended and not yet submitted: to the journal, or as a write if the
    /// writer has room for one more in flight. Whether anything was submitted.
    fn submit_appended(&self) -> bool {
        let writer = self.state.borrow().writer.clone();
        let room = writer.writes_in_flight() < self.shard.config.writes_in_flight_max.max(1);
        writer.submit_appended(room)
    }

    /// Whether a sync must run before anything else: a waiter asked for one, or data is
    /// `flush.ms` old.
    fn sync_due(&self) -> bool {
        self.sync_wanted.get() > self.durable_offset.get()
            || self.flush_ms_due() == Some(Duration::ZERO)
    }

    /// Whether the shard's timer should have the log served now: data older than `flush.ms`.
    pub(crate) fn timed_work_due(&self) -> bool {
        !self.closed.get() && self.flush_ms_due() == Some(Duration::ZERO)
    }

    /// Gives back reserved space if the writer is idle; whether the timer must keep watching
    /// the log (data waiting for flush.ms, or space still reserved ahead).
    pub(crate) fn holds_timed_work(&self) -> bool {
        if self.closed.get() {
            return false;
        }
        let writer = self.state.borrow().writer.clone();
        let released = writer.trim_if_idle(background::IDLE_AFTER);
        !released || self.flush_ms_due().is_some()
    }

    /// How long until data not yet synced is `flush.ms` old (zero: due now); `None` when
    /// flush.ms is off or everything is synced.
    fn flush_ms_due(&self) -> Option<Duration> {
        let flush_ms = self.config.borrow().flush_ms?;
        if self.durable_offset.get() >= self.end_offset.get() {
            return None;
        }
        let since = self.state.borrow().unsynced_since_ms?;
        let age = now_ms().saturating_sub(since);
        Some(Duration::from_millis(flush_ms.saturating_sub(age)))
    }

    async fn sync(&self, target: i64) -> Result<(), IoFailure> {
        let (writer, generation) = {
            let state = self.state.borrow();
            (state.writer.clone(), state.generation)
        };
        writer.flush().await?;
        writer.file().fdatasync().await?;
        if self.state.borrow().generation != generation {
            // Truncated meanwhile: `target` may be past the new end, and offsets appended up
            // to it again must not count as durable without a sync of their own.
            return Ok(());
        }
        self.durable_offset.advance(target);
        let caught_up = self.end_offset.get() == target;
        let mut state = self.state.borrow_mut();
        state.unsynced_messages = 0;
        state.unsynced_since_ms = if caught_up { None } else { Some(now_ms()) };
        Ok(())
    }
}

/// Checks a follower's batches (each element whole batches, back to back) and returns each
/// batch with its header, as slices of the elements.
fn split_replicated(batches: &[Bytes]) -> Result<Vec<(BatchHeader, Bytes)>, AppendError> {
    let mut out = Vec::new();
    let mut position = 0;
    for bytes in batches {
        let mut at = 0;
        while at < bytes.len() {
            let header = batch::validate(&bytes[at..], LogConfig::SEGMENT_BYTES_LIMIT as usize)
                .map_err(|source| AppendError::InvalidBatch {
                    position: position + at,
                    source,
                })?;
            let size = header.size_bytes();
            out.push((header, bytes.slice(at..at + size)));
            at += size;
        }
        position += bytes.len();
    }
    if out.is_empty() {
        return Err(AppendError::Empty);
    }
    Ok(out)
}

/// Checks a producer's record set and returns the header of each batch in it.
fn split_batches(records: &[u8], batch_bytes_max: usize) -> Result<Vec<BatchHeader>, AppendError> {
    if records.is_empty() {
        return Err(AppendError::Empty);
    }
    let mut headers = Vec::new();
    let mut at = 0;
    while at < records.len() {
        let header =
            batch::validate_produced(&records[at..], batch_bytes_max).map_err(|source| {
                AppendError::InvalidBatch {
                    position: at,
                    source,
                }
            })?;
        at += header.size_bytes();
        headers.push(header);
    }
    Ok(headers)
}
