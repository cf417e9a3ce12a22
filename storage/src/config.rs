//! What a log is told: per-partition (topic) settings that Kafka users know by name, and the
//! per-shard IO settings that only operators tune.

use crate::batch::TimestampType;

/// Kafka's topic-level settings that shape one partition's log. Names follow Kafka's
/// (`segment.bytes` is `segment_bytes_max`, ...), with units last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogConfig {
    /// `segment.bytes`: the active segment rolls before it would grow past this.
    pub segment_bytes_max: u64,
    /// `segment.ms`: the active segment rolls once it is this old (and not empty).
    pub segment_ms: u64,
    /// `index.interval.bytes`: one offset and time index entry per this many log bytes.
    pub index_interval_bytes: u64,
    /// `retention.ms`: sealed segments whose newest record is older than this are deleted.
    /// `None` keeps them forever (Kafka's -1).
    pub retention_ms: Option<u64>,
    /// `retention.bytes`: the oldest segments are deleted while the log is larger than this.
    /// `None` is unlimited (Kafka's -1).
    pub retention_bytes: Option<u64>,
    /// `flush.messages`: fdatasync after this many messages. `None`: never by count.
    pub flush_messages: Option<u64>,
    /// `flush.ms`: fdatasync data older than this. `None`: never by time.
    pub flush_ms: Option<u64>,
    /// `max.message.bytes`: the largest batch accepted.
    pub max_message_bytes: usize,
    /// `message.timestamp.type`: with LogAppendTime, appends stamp batches with the broker's time.
    pub timestamp_type: TimestampType,
}

impl Default for LogConfig {
    /// Kafka's defaults.
    fn default() -> Self {
        LogConfig {
            segment_bytes_max: 1 << 30,
            segment_ms: 7 * 24 * 3600 * 1000,
            index_interval_bytes: 4096,
            retention_ms: Some(7 * 24 * 3600 * 1000),
            retention_bytes: None,
            flush_messages: None,
            flush_ms: None,
            max_message_bytes: 1_048_588,
            timestamp_type: TimestampType::CreateTime,
        }
    }
}

impl LogConfig {
    /// Segments address positions with u32 in their indexes, as Kafka's do.
    pub const SEGMENT_BYTES_LIMIT: u64 = i32::MAX as u64;

    /// Brings out-of-range values back into range, so a bad topic setting cannot break a log.
    pub fn clamped(mut self) -> LogConfig {
        self.segment_bytes_max = self.segment_bytes_max.clamp(14, Self::SEGMENT_BYTES_LIMIT);
        self.index_interval_bytes = self.index_interval_bytes.max(1);
        self.segment_ms = self.segment_ms.max(1);
        self
    }
}

/// How segment files are opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoMode {
    /// O_DIRECT where the filesystem takes it, buffered IO (with a log line) where it does not.
    Auto,
    /// Buffered IO through the page cache: for filesystems without O_DIRECT, and tests.
    Buffered,
}

/// Per-shard storage settings: IO sizes and memory and disk budgets. The budgets are shared by
/// the shard's partitions as they write, so an idle partition costs next to nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageConfig {
    pub io_mode: IoMode,
    /// Memory for the shard's aligned write buffers together. Each writing partition's buffer
    /// follows what it is sent between flushes, from a page up to 1 MiB (or this budget).
    pub write_buffer_bytes: usize,
    /// Writes a partition may have in flight before appends wait (write-behind depth).
    pub writes_in_flight_max: usize,
    /// Disk space the shard's active segments may reserve ahead of their writes together
    /// (fallocate), so writes do not extend files. Each takes about a second of its own writes,
    /// at most 64 MiB; a partition that stops writing gives its share back.
    pub preallocate_bytes: u64,
    /// Produces are refused (KAFKA_STORAGE_ERROR) while the data directory's filesystem has
    /// fewer free bytes than this. `None`: 1 GiB or 2% of the filesystem, whichever is smaller.
    pub min_free_bytes: Option<u64>,
    /// Memory for the per-shard cache of recent batches.
    pub cache_bytes_max: usize,
    /// Memory for the loaded indexes of sealed segments, per shard: they load on first use and
    /// the least recently used are dropped beyond this.
    pub index_bytes_max: usize,
    /// The largest single read from a segment file.
    pub read_bytes_max: usize,
    /// Memory for reading ahead of sequential readers, per shard (0 turns read-ahead off).
    pub readahead_bytes_max: usize,
    /// Writes of at most this many bytes (whole pages: a partition's flush of a record or two)
    /// go through the page cache instead of straight to the device; 0: every write is direct.
    /// 64 KiB: with the journal taking the flushes, a partition's buffer that fills is written
    /// this way up to there (10,000 partitions with the journal: 165 and 160 MB/s, against 106
    /// and 104 MB/s with 16 KiB, where the buffers past it went directly, each a device write
    /// and ext4's work for it).
    pub page_cache_write_max_bytes: usize,
    /// The shard's journal (`crate::journal`): with direct IO, the writes of at most
    /// `page_cache_write_max_bytes` are stored there instead of going through the page cache.
    /// 0: no journal.
    pub journal_bytes: u64,
    /// Which of the node's shards this is: it names the shard's journal.
    pub shard_index: usize,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig {
            io_mode: IoMode::Auto,
            write_buffer_bytes: 64 << 20,
            writes_in_flight_max: 4,
            preallocate_bytes: 256 << 20,
            min_free_bytes: None,
            cache_bytes_max: 256 << 20,
            index_bytes_max: 64 << 20,
            read_bytes_max: 64 << 20,
            readahead_bytes_max: 64 << 20,
            page_cache_write_max_bytes: 64 << 10,
            journal_bytes: 256 << 20,
            shard_index: 0,
        }
    }
}
