//! The free-space guard: produces are refused while the data directory's filesystem is short of
//! space, before it is actually full, and taken again once space is back.
//!
//! The shard checks the filesystem (statvfs) on its timer, not per request, and between checks
//! counts what it appended, so a fast producer is stopped within a few of its requests of the
//! limit rather than a tick later. A full disk would fail a write in flight and take the log
//! offline; refusing early keeps every log writable and loses nothing acknowledged.

use std::cell::Cell;
use std::path::{Path, PathBuf};

/// The default limit: this much free ...
const DEFAULT_MIN_FREE_BYTES: u64 = 1 << 30;
/// ... or this share of the filesystem, if smaller (a small disk is not refused from the start).
const DEFAULT_MIN_FREE_PERCENT: u64 = 2;

#[derive(Debug)]
pub struct FreeSpace {
    dir: PathBuf,
    /// The configured limit; `None` for the default, which depends on the filesystem's size.
    configured: Option<u64>,
    min_free_bytes: Cell<u64>,
    /// Free bytes at the last check, less what this shard appended since.
    free_bytes: Cell<u64>,
    low: Cell<bool>,
}

/// Produces are refused: the filesystem is short of space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LowOnSpace {
    pub free_bytes: u64,
    pub min_free_bytes: u64,
}

impl FreeSpace {
    pub fn new(dir: &Path, configured: Option<u64>) -> FreeSpace {
        let space = FreeSpace {
            dir: dir.to_path_buf(),
            configured,
            min_free_bytes: Cell::new(configured.unwrap_or(0)),
            free_bytes: Cell::new(u64::MAX),
            low: Cell::new(false),
        };
        space.check();
        space
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Reads the filesystem's free space (statvfs: a few microseconds, no IO).
    pub fn check(&self) {
        let stat = match nix::sys::statvfs::statvfs(&self.dir) {
            Ok(s) => s,
            Err(e) => {
                tracing::debug!(dir = %self.dir.display(), error = %e, "statvfs failed");
                return;
            }
        };
        let fragment = stat.fragment_size();
        let total = stat.blocks().saturating_mul(fragment);
        let free = stat.blocks_available().saturating_mul(fragment);
        let min = self
            .configured
            .unwrap_or_else(|| DEFAULT_MIN_FREE_BYTES.min(total / 100 * DEFAULT_MIN_FREE_PERCENT));
        self.min_free_bytes.set(min);
        self.free_bytes.set(free);
        if self.low.get() && free >= min {
            self.low.set(false);
            tracing::info!(
                dir = %self.dir.display(),
                free_bytes = free,
                min_free_bytes = min,
                "free space is back: produces are taken again"
            );
        }
    }

    /// Counts bytes appended since the last check.
    pub fn appended(&self, bytes: u64) {
        self.free_bytes
            .set(self.free_bytes.get().saturating_sub(bytes));
    }

    /// `Err` while the filesystem is short of space; says so in the log once per shortage.
    pub fn check_room(&self) -> Result<(), LowOnSpace> {
        let (free, min) = (self.free_bytes.get(), self.min_free_bytes.get());
        if free >= min {
            return Ok(());
        }
        if !self.low.replace(true) {
            tracing::error!(
                dir = %self.dir.display(),
                free_bytes = free,
                min_free_bytes = min,
                "the data directory's filesystem is short of space: produces are refused until \
                 space is freed (--min-free-bytes)"
            );
        }
        Err(LowOnSpace {
            free_bytes: free,
            min_free_bytes: min,
        })
    }
}
