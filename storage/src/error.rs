//! Typed errors of the storage crate. The broker maps each to a Kafka error code.

use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::batch::BatchError;

/// A failed disk operation, kept in a form that can be cloned: after a write or sync fails the
/// log refuses further appends, and every waiter is told the same cause.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[error("{op} {path}: {message}")]
pub struct IoFailure {
    pub op: &'static str,
    pub path: PathBuf,
    pub kind: io::ErrorKind,
    pub message: String,
}

impl IoFailure {
    pub fn new(op: &'static str, path: impl Into<PathBuf>, err: &io::Error) -> IoFailure {
        IoFailure {
            op,
            path: path.into(),
            kind: err.kind(),
            message: err.to_string(),
        }
    }
}

/// Why an append was refused. Nothing of a refused record set is appended.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum AppendError {
    #[error("invalid record batch at byte {position} of the record set: {source}")]
    InvalidBatch {
        position: usize,
        #[source]
        source: BatchError,
    },
    #[error("empty record set")]
    Empty,
    #[error("log is offline after a disk error: {0}")]
    Storage(IoFailure),
    /// The free-space guard: nothing is appended while the filesystem is short of space.
    #[error(
        "the filesystem of {dir} has {free_bytes} bytes free, under the {min_free_bytes} kept \
         free (--min-free-bytes): produces are refused until space is freed"
    )]
    LowOnSpace {
        dir: PathBuf,
        free_bytes: u64,
        min_free_bytes: u64,
    },
    #[error("log is closed")]
    Closed,
    /// A follower's batches do not continue its log: the first must start at the log end
    /// offset, and each next one where the one before it ends.
    #[error("replicated batch starts at offset {got} where {expected} was expected")]
    NotAtEnd { expected: i64, got: i64 },
    /// A batch's leader epoch is older than the log's latest (or than the batch before it):
    /// a log's epochs never go back.
    #[error("a batch of leader epoch {got} cannot follow epoch {latest}")]
    EpochWentBack { latest: i32, got: i32 },
    /// A negative leader epoch (Kafka's -1, "none"): every batch of a log carries its leader's.
    #[error("leader epoch {epoch} is not an epoch")]
    NoLeaderEpoch { epoch: i32 },
}

/// Why a read returned no batches.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ReadError {
    #[error("offset {offset} is outside the log [{log_start_offset}, {log_end_offset}]")]
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// Bytes on disk failed their CRC or framing: reported, never served.
    #[error("corrupt batch in {path} at byte {position}: {source}")]
    Corrupt {
        path: PathBuf,
        position: u64,
        #[source]
        source: BatchError,
    },
    #[error("log is offline after a disk error: {0}")]
    Storage(IoFailure),
    #[error("log is closed")]
    Closed,
}

/// Why waiting for an append to be written or made durable failed.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum SyncError {
    #[error("log is offline after a disk error: {0}")]
    Storage(IoFailure),
    #[error("log was closed before the data was written")]
    Closed,
    #[error("log was truncated while waiting: the data may be gone")]
    Truncated,
}

/// Why a log could not be opened, closed or deleted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum LogError {
    #[error(transparent)]
    Io(#[from] IoFailure),
    #[error("unexpected file name in log directory: {0}")]
    BadFileName(PathBuf),
}
