//! Dropping from the page cache what a shard wrote through it, once the kernel has written it
//! back.
//!
//! Small writes go through the page cache ([`crate::writer`]), which serves as a write-combining
//! buffer: the kernel writes the pages back later, many at a time. Nothing reads those pages
//! through the page cache again: segment reads are direct, and recent batches come from the
//! shard's own cache. Left alone, the kernel keeps them until memory runs short, so a broker
//! taking small writes grows the page cache until it fills the machine's memory, taking it from
//! everything else, and every page the kernel takes for a new write is one it has not touched
//! lately. On the VMs measured here, whose host takes free memory back, that first touch cost
//! 60 µs a page: a fifth of a shard's time at 10,000 partitions, gone when written-back pages
//! were dropped (their pages are reused while still warm).
//!
//! So each segment file counts the whole pages it wrote through the page cache
//! ([`SegmentFile::page_cache_pages_end`]), and the shard drops them [`RELEASE_AFTER`] later
//! (posix_fadvise DONTNEED). By then the kernel has written them back on its own schedule
//! (within `vm.dirty_expire_centisecs` + `vm.dirty_writeback_centisecs`, 35 s by default), so
//! dropping them is an invalidation on the shard, not a write-back: the write-back stays the
//! kernel's, off the shard. The page a writer is still filling is never dropped (its next write
//! would make the kernel read it back from the device). A broker writing small batches then holds
//! about [`RELEASE_AFTER`] to twice that of its writes in the page cache.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use crate::file::SegmentFile;

/// Whole pages written through the page cache are dropped this long after a file first had
/// some to drop: past the kernel's default write-back of dirty pages (30 s old, checked every
/// 5 s).
pub const RELEASE_AFTER: Duration = Duration::from_secs(40);
/// At most this many files are released a tick: 10,000 partitions that started writing
/// together come due together, and each release is a system call on the shard.
const RELEASES_PER_TICK_MAX: usize = 256;

/// A shard's files with whole pages in the page cache to drop, in the order they got them.
#[derive(Debug, Default)]
pub struct PageCacheRelease {
    /// Bounded by the shard's open segment files: a file is on it at most once
    /// (`SegmentFile::release_queued`).
    queue: RefCell<VecDeque<Due>>,
}

#[derive(Debug)]
struct Due {
    file: Weak<SegmentFile>,
    /// When its pages below `end` are to be dropped.
    at: Instant,
    end: u64,
}

impl PageCacheRelease {
    /// After `file` wrote through the page cache: puts it on the queue if it has whole pages
    /// there and is not on it yet.
    pub fn note(&self, file: &Rc<SegmentFile>) {
        if file.release_queued.get() {
            return;
        }
        if let Some(end) = file.page_cache_pages_end() {
            self.push(file, Instant::now(), end);
        }
    }

    fn push(&self, file: &Rc<SegmentFile>, now: Instant, end: u64) {
        file.release_queued.set(true);
        self.queue.borrow_mut().push_back(Due {
            file: Rc::downgrade(file),
            at: now + RELEASE_AFTER,
            end,
        });
    }

    /// Drops the pages that are due at `now` (up to [`RELEASES_PER_TICK_MAX`] files); a file
    /// that wrote more whole pages since it was queued goes back on the queue for those.
    pub fn release_due(&self, now: Instant) {
        for _ in 0..RELEASES_PER_TICK_MAX {
            let due = {
                let mut queue = self.queue.borrow_mut();
                match queue.front() {
                    Some(first) if first.at <= now => queue.pop_front(),
                    _ => None,
                }
            };
            let Some(due) = due else { return };
            // A file closed meanwhile is gone, and its pages with it as far as we care.
            let Some(file) = due.file.upgrade() else {
                continue;
            };
            if let Err(e) = file.release_page_cache(due.end) {
                tracing::debug!(error = %e, "page cache not released");
            }
            file.release_queued.set(false);
            if let Some(end) = file.page_cache_pages_end() {
                self.push(&file, now, end);
            }
        }
    }

    /// Files waiting for their pages to be dropped.
    #[cfg(test)]
    fn queued(&self) -> usize {
        self.queue.borrow().len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is a failed test

    use std::path::Path;

    use super::*;
    use crate::file::tests::on_calibrated_dir;
    use crate::file::{ALIGNMENT, ResolvedIoMode, align_up};

    /// Bytes of `path` the page cache holds, as util-linux's fincore counts them.
    fn resident_bytes(path: &Path) -> u64 {
        let out = std::process::Command::new("fincore")
            .args(["--bytes", "--noheadings", "--output", "RES"])
            .arg(path)
            .output()
            .expect("fincore (util-linux) runs");
        assert!(out.status.success(), "fincore: {out:?}");
        String::from_utf8(out.stdout)
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    }

    #[test]
    fn whole_pages_written_through_the_page_cache_are_dropped_once_due_and_the_filling_one_kept() {
        on_calibrated_dir(|root, mode| async move {
            let path = root.join("0.log");
            let file = Rc::new(SegmentFile::open(&path, mode, true).await.unwrap());
            let release = PageCacheRelease::default();
            let page = ALIGNMENT;
            // Eight and a half pages, a record at a time, as a slow partition appends.
            let record = [7u8; 2048];
            for i in 0..17 {
                file.write_through_page_cache(&record, i * 2048)
                    .unwrap()
                    .unwrap();
                release.note(&file);
            }
            file.fdatasync().await.unwrap();
            let written = 17 * 2048;
            assert_eq!(resident_bytes(&path), align_up(written));
            let start = Instant::now();
            if mode == ResolvedIoMode::Buffered {
                // Reads go through the page cache here: nothing to drop.
                assert_eq!(release.queued(), 0);
                return;
            }
            assert_eq!(release.queued(), 1, "queued once, however many writes");
            assert_eq!(file.page_cache_pages_end(), Some(8 * page));
            release.release_due(start);
            assert_eq!(resident_bytes(&path), align_up(written), "not due yet");
            // Due: the pages whole when the file was queued (its first), and the file
            // queued again for the pages that became whole after that.
            release.release_due(start + RELEASE_AFTER);
            assert_eq!(resident_bytes(&path), align_up(written) - page);
            assert_eq!(release.queued(), 1);
            release.release_due(start + 2 * RELEASE_AFTER);
            assert_eq!(resident_bytes(&path), page, "only the page being filled");
            assert_eq!(release.queued(), 0);
            assert_eq!(file.page_cache_pages_end(), None);
            // The writer goes on from inside the kept page; the bytes stay right.
            file.write_through_page_cache(&[9u8; 4096], written)
                .unwrap()
                .unwrap();
            release.note(&file);
            assert_eq!(file.page_cache_pages_end(), Some(9 * page));
            assert_eq!(release.queued(), 1);
            let mut want = vec![7u8; written as usize];
            want.extend([9u8; 4096]);
            assert_eq!(file.read_at(0, want.len()).await.unwrap(), want);
        });
    }
}
