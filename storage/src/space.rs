//! The free-space guard: produces are refused while the data directory's filesystem is short of
//! space, before it is actually full, and taken again once space is back.
//!
//! The shard checks the filesystem (statvfs) on its timer, not per request, and between checks
//! counts what it appended, so a fast producer is stopped within a few of its requests of the
//! limit rather than a tick later. A full disk would fail a write in flight and take the log
//! offline; refusing early keeps every log writable and loses nothing acknowledged.
//!
//! Refusing starts under the limit and ends only a margin above it: the estimate between checks
//! counts appends into space reserved ahead (already gone from the filesystem's count), and
//! ext4 hands back delayed-allocation reservations after writeback, so the measured figure can
//! rise a few MiB right after the estimate tripped. Without the margin the guard would flap,
//! taking one more request, and saying so in the log, each time.

use std::cell::Cell;
use std::path::{Path, PathBuf};

/// The default limit: this much free ...
const DEFAULT_MIN_FREE_BYTES: u64 = 1 << 30;
/// ... or this share of the filesystem, if smaller (a small disk is not refused from the start).
const DEFAULT_MIN_FREE_PERCENT: u64 = 2;
/// Produces are taken again once free space is the limit plus this share of it.
const RESUME_MARGIN_DIVISOR: u64 = 4;

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
        self.measured(
            stat.blocks_available().saturating_mul(fragment),
            stat.blocks().saturating_mul(fragment),
        );
    }

    /// Takes a measurement: `free_bytes` available of the filesystem's `total_bytes`.
    fn measured(&self, free_bytes: u64, total_bytes: u64) {
        let min = self.configured.unwrap_or_else(|| {
            DEFAULT_MIN_FREE_BYTES.min(total_bytes / 100 * DEFAULT_MIN_FREE_PERCENT)
        });
        self.min_free_bytes.set(min);
        self.free_bytes.set(free_bytes);
        let resume_bytes = min.saturating_add(min / RESUME_MARGIN_DIVISOR);
        if self.low.get() && free_bytes >= resume_bytes {
            self.low.set(false);
            tracing::info!(
                dir = %self.dir.display(),
                free_bytes,
                min_free_bytes = min,
                resume_bytes,
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
        if free >= min && !self.low.get() {
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn guard(min_free_bytes: u64, free_bytes: u64) -> FreeSpace {
        let space = FreeSpace {
            dir: PathBuf::from("/data"),
            configured: Some(min_free_bytes),
            min_free_bytes: Cell::new(0),
            free_bytes: Cell::new(u64::MAX),
            low: Cell::new(false),
        };
        space.measured(free_bytes, 1 << 40);
        space
    }

    #[test]
    fn appends_between_checks_trip_the_guard_before_the_next_check() {
        let space = guard(24 * MIB, 25 * MIB);
        assert_eq!(space.check_room(), Ok(()));
        space.appended(2 * MIB);
        let low = space.check_room().unwrap_err();
        assert_eq!(low.free_bytes, 23 * MIB);
        assert_eq!(low.min_free_bytes, 24 * MIB);
    }

    #[test]
    fn a_measurement_just_above_the_limit_does_not_resume() {
        let space = guard(24 * MIB, 25 * MIB);
        space.appended(2 * MIB);
        assert!(space.check_room().is_err());
        // What the CI run saw: the estimate tripped, the next statvfs showed ~1 MiB more.
        space.measured(26 * MIB, 1 << 40);
        assert!(space.check_room().is_err());
        space.measured(30 * MIB - 1, 1 << 40);
        assert!(space.check_room().is_err());
        space.measured(30 * MIB, 1 << 40);
        assert_eq!(space.check_room(), Ok(()));
        // Taken again, the plain limit applies until it trips anew.
        space.measured(24 * MIB, 1 << 40);
        assert_eq!(space.check_room(), Ok(()));
    }

    #[test]
    fn the_default_limit_is_the_smaller_of_a_gib_and_two_percent() {
        let space = guard(0, 0);
        let default = FreeSpace {
            configured: None,
            ..space
        };
        default.measured(u64::MAX, 1 << 40);
        assert_eq!(default.min_free_bytes.get(), 1 << 30);
        default.measured(u64::MAX, 10 << 30);
        assert_eq!(default.min_free_bytes.get(), (10 << 30) / 100 * 2);
    }

    #[test]
    fn a_zero_limit_never_refuses() {
        let space = guard(0, 0);
        assert_eq!(space.check_room(), Ok(()));
    }
}
