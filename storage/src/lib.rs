//! One partition's commit log, for a thread-per-core broker.
//!
//! A [`Log`] is a directory of segments (`%020d.log` with `.index` and `.timeindex`), owned by
//! one shard and used only from that shard's glommio executor. Producers' record batches are
//! validated (v2 format, CRC-32C), given dense offsets, kept in the shard's [`BatchCache`], and
//! written with direct IO through aligned buffers. Callers wait separately for "written" (on the
//! device: survives a crash of the process) and "durable" (fdatasync'd: survives a power loss,
//! with group commit). Reads return whole batches as `Bytes`, from the cache when recent and from
//! CRC-checked file reads otherwise. Opening a log recovers it after an unclean stop.
//!
//! Modules, from the bottom up:
//! - [`batch`]: the v2 record batch header, validation, offset assignment.
//! - [`watermark`]: a growing value that futures can wait on.
//! - `budget`: shard-wide byte budgets (write buffers, space reserved ahead, indexes, read-ahead).
//! - [`file`]: the seam to glommio's files; direct IO or buffered fallback.
//! - [`index`]: the sparse offset and time indexes and their file formats.
//! - `index_budget`: the loaded indexes of sealed segments under a per-shard budget.
//! - [`writer`]: aligned write-behind buffers for the active segment.
//! - [`segment`]: one segment: bookkeeping, validation scans, reads.
//! - [`cache`]: the per-shard cache of recent batches under a memory budget.
//! - `page_cache`: dropping pages written through the page cache once the kernel wrote them back.
//! - [`journal`]: the shard's ring of small writes in a shared mapping, replayed after a crash.
//! - `readahead`: reading the next stretch of a segment file while a sequential read's answer
//!   travels.
//! - [`fifo_lock`]: the lock that keeps appends in the order they were asked for.
//! - [`log`]: appends, reads, retention, truncation, close.
//! - `background`: the shard's flusher (one queue for all its logs) and timer.
//! - `space`: the free-space guard.
//! - [`recovery`]: opening a log directory and recovering it.
//! - `start_offset`: the log start offset DeleteRecords moves, kept in its own small file.
//! - `epochs`: the leader epochs ([`EpochEntry`]), kept in `leader-epoch-checkpoint`.

mod background;
pub mod batch;
mod budget;
pub mod cache;
mod close;
pub mod config;
mod epochs;
pub mod error;
pub mod fifo_lock;
mod file;
mod index;
mod index_budget;
pub mod journal;
pub mod log;
mod page_cache;
mod readahead;
mod recovery;
mod segment;
mod space;
mod start_offset;
pub mod watermark;
mod writer;

pub use batch::{BatchError, BatchHeader, TimestampType};
pub use cache::BatchCache;
pub use config::{IoMode, LogConfig, StorageConfig};
pub use epochs::EpochEntry;
pub use error::{AppendError, IoFailure, LogError, ReadError, SyncError};
pub use file::{ResolvedIoMode, resolve_io_mode};
pub use log::{AppendInfo, Log, ShardStorage};
pub use start_offset::DeleteRecordsError;
pub use watermark::Watermark;
pub use writer::RESERVE_AHEAD_FLOOR_BYTES;
