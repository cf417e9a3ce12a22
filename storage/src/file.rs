//! The seam between the log and glommio's files: direct IO (O_DIRECT through io_uring) where
//! the filesystem takes it, buffered IO where it does not. Nothing else in this crate names a
//! glommio file type. A direct file's small writes may also go through the page cache, on the
//! same descriptor with O_DIRECT turned off for them ([`SegmentFile::write_through_page_cache`]).

use std::cell::Cell;
use std::io;
use std::path::{Path, PathBuf};

use glommio::io::{BufferedFile, DmaBuffer, DmaFile, OpenOptions};

use crate::config::IoMode;
use crate::error::IoFailure;

/// Direct-IO alignment we lay buffers out for. Devices ask for 512 or 4096; 4096 suits both.
pub const ALIGNMENT: u64 = 4096;

/// The IO mode a directory supports, decided once per data directory with a log line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResolvedIoMode {
    Direct,
    Buffered,
}

/// Decides how files under `dir` are opened. `Auto` probes: O_DIRECT is used where the
/// filesystem accepts it; tmpfs and filesystems that refuse O_DIRECT get buffered IO, said once in
/// the log.
pub fn resolve_io_mode(dir: &Path, mode: IoMode) -> Result<ResolvedIoMode, IoFailure> {
    match mode {
        IoMode::Buffered => Ok(ResolvedIoMode::Buffered),
        IoMode::Auto => probe(dir),
    }
}

fn probe(dir: &Path) -> Result<ResolvedIoMode, IoFailure> {
    use std::os::unix::fs::OpenOptionsExt;

    std::fs::create_dir_all(dir).map_err(|e| IoFailure::new("creating", dir, &e))?;
    if is_tmpfs(dir) {
        tracing::info!(
            dir = %dir.display(),
            "data directory is on tmpfs: no direct IO there, files use the page cache (memory)"
        );
        return Ok(ResolvedIoMode::Buffered);
    }
    let probe_path = dir.join(".direct-io-probe");
    let opened = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&probe_path);
    let _ = std::fs::remove_file(&probe_path);
    match opened {
        Ok(_) => Ok(ResolvedIoMode::Direct),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
            tracing::warn!(
                dir = %dir.display(),
                "filesystem refuses O_DIRECT: falling back to buffered IO through the page cache"
            );
            Ok(ResolvedIoMode::Buffered)
        }
        Err(e) => Err(IoFailure::new("probing direct IO in", dir, &e)),
    }
}

/// Works around a glommio 0.9 bug; call once per executor thread before opening direct files.
///
/// glommio decides, per thread and device, whether io_uring polling (IOPOLL) works by reading
/// the first block of the first file it opens for direct IO. A new, empty file answers that
/// read without touching the device, so glommio wrongly turns polling on, and every later read
/// of real data on a device without poll queues (virtio, most SATA) fails with EOPNOTSUPP.
/// Opening first a file whose first block is on the device makes the probe honest.
pub async fn calibrate_direct_io(dir: &Path, mode: ResolvedIoMode) -> Result<(), IoFailure> {
    use std::io::Write;

    if mode != ResolvedIoMode::Direct {
        return Ok(());
    }
    std::fs::create_dir_all(dir).map_err(|e| IoFailure::new("creating", dir, &e))?;
    let dir = &std::fs::canonicalize(dir).map_err(|e| IoFailure::new("resolving", dir, &e))?;
    // One file per call: shards calibrate at the same time, and glommio panics if a file it
    // is opening disappears (it unwraps a statfs of the path).
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!(
        ".direct-io-calibration-{}-{call}",
        std::process::id()
    ));
    std::fs::File::create(&path)
        .and_then(|mut f| {
            f.write_all(&[0xa5; ALIGNMENT as usize])?;
            f.sync_all()
        })
        .map_err(|e| IoFailure::new("writing", &path, &e))?;
    let file = SegmentFile::open(&path, mode, false).await?;
    let read = file.read_at(0, ALIGNMENT as usize).await;
    file.close().await?;
    let _ = std::fs::remove_file(&path);
    read.map(|_| ())
}

fn is_tmpfs(dir: &Path) -> bool {
    nix::sys::statfs::statfs(dir)
        .map(|s| s.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
        .unwrap_or(false)
}

/// An aligned buffer to write from: DMA memory for direct files, heap memory otherwise.
#[derive(Debug)]
pub enum WriteBuf {
    Dma(DmaBuffer),
    Heap(Vec<u8>),
}

impl WriteBuf {
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        match self {
            WriteBuf::Dma(b) => b.as_bytes_mut(),
            WriteBuf::Heap(v) => v,
        }
    }

    pub fn as_bytes(&self) -> &[u8] {
        match self {
            WriteBuf::Dma(b) => b.as_bytes(),
            WriteBuf::Heap(v) => v,
        }
    }

    pub fn len(&self) -> usize {
        self.as_bytes().len()
    }

    /// Shortens the buffer to what is written out; `len` must stay aligned for direct files.
    fn trim_to(&mut self, len: usize) {
        match self {
            WriteBuf::Dma(b) => b.trim_to_size(len),
            WriteBuf::Heap(v) => v.truncate(len),
        }
    }
}

#[derive(Debug)]
enum Inner {
    Direct(DmaFile),
    Buffered(BufferedFile),
}

/// One open segment, index or marker file.
#[derive(Debug)]
pub struct SegmentFile {
    inner: Inner,
    path: PathBuf,
    /// A direct file whose descriptor has O_DIRECT turned off, for writes through the page
    /// cache: the next direct write turns it back on.
    page_cache_mode: Cell<bool>,
    /// Direct writes started and not yet complete: O_DIRECT stays on while there are any.
    direct_writes_pending: Cell<usize>,
    /// The descriptor's file offset, where the last write through the page cache ended (none
    /// before the first, or after a failed one): a write that starts there needs no seek.
    /// Nothing else moves it: every read and write through io_uring names its own position.
    page_cache_cursor: Cell<Option<u64>>,
    /// The whole pages this file wrote through the page cache and has not released yet
    /// (`[start, end)`, page-aligned; empty when equal): the page that a write through it ends
    /// inside is not whole yet, the writer fills it further. Only for a direct file, which
    /// never reads them through the page cache (see [`crate::page_cache`]).
    page_cache_pages: Cell<(u64, u64)>,
    /// On the shard's queue of files whose pages are to be released.
    pub(crate) release_queued: Cell<bool>,
}

/// Counts a direct write as pending for as long as it lives.
struct PendingDirectWrite<'a>(&'a Cell<usize>);

impl<'a> PendingDirectWrite<'a> {
    fn start(count: &'a Cell<usize>) -> Self {
        count.set(count.get() + 1);
        PendingDirectWrite(count)
    }
}

impl Drop for PendingDirectWrite<'_> {
    fn drop(&mut self) {
        debug_assert!(self.0.get() > 0, "a pending write was counted");
        self.0.set(self.0.get() - 1);
    }
}

impl SegmentFile {
    /// Opens `path` for reading and writing, creating it if `create`.
    pub async fn open(
        path: &Path,
        mode: ResolvedIoMode,
        create: bool,
    ) -> Result<SegmentFile, IoFailure> {
        let mut options = OpenOptions::new();
        options.read(true).write(true).create(create);
        let inner = match mode {
            ResolvedIoMode::Direct => options.dma_open(path).await.map(Inner::Direct),
            ResolvedIoMode::Buffered => options.buffered_open(path).await.map(Inner::Buffered),
        }
        .map_err(|e| IoFailure::new("opening", path, &io::Error::from(e)))?;
        Ok(SegmentFile {
            inner,
            path: path.to_path_buf(),
            page_cache_mode: Cell::new(false),
            direct_writes_pending: Cell::new(0),
            page_cache_cursor: Cell::new(None),
            page_cache_pages: Cell::new((0, 0)),
            release_queued: Cell::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A buffer of `len` bytes (a multiple of [`ALIGNMENT`]) to write from. Its content is
    /// whatever the memory held: writers fill what they write and zero the padding of a partial
    /// last page (zeroing every buffer up front once cost a third of the broker's time).
    pub fn alloc(&self, len: usize) -> WriteBuf {
        debug_assert_eq!(len as u64 % ALIGNMENT, 0);
        match &self.inner {
            Inner::Direct(f) => WriteBuf::Dma(f.alloc_dma_buffer(len)),
            Inner::Buffered(_) => WriteBuf::Heap(vec![0; len]),
        }
    }

    /// Writes the first `len` bytes of `buf` at `pos`; both aligned. A short write is an error:
    /// it only happens when the disk is full.
    pub async fn write_at(&self, mut buf: WriteBuf, len: usize, pos: u64) -> Result<(), IoFailure> {
        debug_assert_eq!(pos % ALIGNMENT, 0);
        debug_assert_eq!(len as u64 % ALIGNMENT, 0);
        buf.trim_to(len);
        if self.page_cache_mode.get() {
            self.set_direct(true)?;
        }
        // Counted before glommio queues the write (in the poll below) until it completes.
        let _pending = PendingDirectWrite::start(&self.direct_writes_pending);
        let written = match (&self.inner, buf) {
            (Inner::Direct(f), WriteBuf::Dma(b)) => f.write_at(b, pos).await,
            (Inner::Buffered(f), WriteBuf::Heap(v)) => f.write_at(v, pos).await,
            (Inner::Direct(f), WriteBuf::Heap(v)) => {
                let mut b = f.alloc_dma_buffer(v.len());
                b.as_bytes_mut().copy_from_slice(&v);
                f.write_at(b, pos).await
            }
            (Inner::Buffered(f), WriteBuf::Dma(b)) => f.write_at(b.as_bytes().to_vec(), pos).await,
        }
        .map_err(|e| self.failure("writing", e))?;
        if written != len {
            let e = io::Error::new(
                io::ErrorKind::StorageFull,
                format!("short write: {written} of {len} bytes at {pos}"),
            );
            return Err(IoFailure::new("writing", &self.path, &e));
        }
        Ok(())
    }

    /// Reads `len` bytes at `pos` (any alignment) into memory. Returns fewer at end of file.
    pub async fn read_at(&self, pos: u64, len: usize) -> Result<Vec<u8>, IoFailure> {
        if len == 0 {
            // Not handed to glommio: with its buffer pool spent it takes a read's buffer from
            // the heap, which has none of no bytes, and panics (an empty index file after a
            // kill -9 took a shard down at start-up).
            return Ok(Vec::new());
        }
        let result = match &self.inner {
            Inner::Direct(f) => f.read_at(pos, len).await,
            Inner::Buffered(f) => f.read_at(pos, len).await,
        }
        .map_err(|e| self.failure("reading", e))?;
        Ok(result.to_vec())
    }

    pub async fn fdatasync(&self) -> Result<(), IoFailure> {
        match &self.inner {
            Inner::Direct(f) => f.fdatasync().await,
            Inner::Buffered(f) => f.fdatasync().await,
        }
        .map_err(|e| self.failure("syncing", e))
    }

    /// Reserves disk blocks from `from` up to `to` and makes `to` the file size (if larger), so
    /// that direct writes inside it never have to extend the file (ext4 serializes extending
    /// direct writes).
    ///
    /// A plain blocking fallocate(2), on purpose: through io_uring it would run on a worker thread
    /// that competes with the busy shard for its core and waits milliseconds for a turn, while
    /// the call itself takes tens of microseconds (0.01-0.4 ms for 64 MiB on ext4 here).
    pub fn preallocate(&self, from: u64, to: u64) -> Result<(), IoFailure> {
        let offset = i64::try_from(from).unwrap_or(i64::MAX);
        let len = i64::try_from(to.saturating_sub(from)).unwrap_or(i64::MAX);
        nix::fcntl::fallocate(
            self.raw_fd(),
            nix::fcntl::FallocateFlags::empty(),
            offset,
            len,
        )
        .map_err(|e| IoFailure::new("preallocating", &self.path, &std::io::Error::from(e)))
    }

    /// Gives back the blocks reserved from `from` to `to` (punches a hole; the file keeps its
    /// size, and reads there see zeros, which recovery cuts like any torn tail). Blocking, like
    /// [`Self::preallocate`] and for the same reason; and it must not interleave with writes the
    /// shard submits meanwhile, which through io_uring it could.
    pub fn release(&self, from: u64, to: u64) -> Result<(), IoFailure> {
        use nix::fcntl::FallocateFlags as F;
        let offset = i64::try_from(from).unwrap_or(i64::MAX);
        let len = i64::try_from(to.saturating_sub(from)).unwrap_or(i64::MAX);
        nix::fcntl::fallocate(
            self.raw_fd(),
            F::FALLOC_FL_PUNCH_HOLE | F::FALLOC_FL_KEEP_SIZE,
            offset,
            len,
        )
        .map_err(|e| IoFailure::new("releasing space in", &self.path, &std::io::Error::from(e)))
    }

    fn raw_fd(&self) -> std::os::fd::RawFd {
        use std::os::fd::AsRawFd;
        match &self.inner {
            Inner::Direct(f) => f.as_raw_fd(),
            Inner::Buffered(f) => f.as_raw_fd(),
        }
    }

    /// Sets the file's size to `len`, on glommio's blocking thread: a cut that frees the
    /// blocks reserved ahead takes a fraction of a millisecond, which the shard's core must not
    /// wait for (a plain truncate(2) on the shard made a start after kill -9 of 10,000
    /// partitions 3 s slower).
    pub async fn truncate(&self, len: u64) -> Result<(), IoFailure> {
        // Pages from the cut on are not whole any more: the writer may write into the page the
        // cut lands in, which must then still be in the page cache.
        let (start, end) = self.page_cache_pages.get();
        let end = end.min(align_down(len));
        self.page_cache_pages.set((start.min(end), end));
        match &self.inner {
            Inner::Direct(f) => f.truncate(len).await,
            Inner::Buffered(f) => f.truncate(len).await,
        }
        .map_err(|e| self.failure("truncating", e))
    }

    pub async fn size(&self) -> Result<u64, IoFailure> {
        match &self.inner {
            Inner::Direct(f) => f.file_size().await,
            Inner::Buffered(f) => f.file_size().await,
        }
        .map_err(|e| self.failure("reading the size of", e))
    }

    pub async fn close(self) -> Result<(), IoFailure> {
        let path = self.path;
        match self.inner {
            Inner::Direct(f) => f.close().await,
            Inner::Buffered(f) => f.close().await,
        }
        .map_err(|e| IoFailure::new("closing", &path, &io::Error::from(e)))
    }

    fn failure(&self, op: &'static str, e: glommio::GlommioError<()>) -> IoFailure {
        IoFailure::new(op, &self.path, &io::Error::from(e))
    }

    /// Writes `data` at `pos` through the page cache: a write(2) on the shard (and a seek
    /// first, unless the last such write ended at `pos`), a copy the kernel writes back later
    /// with its neighbours, done when the kernel holds it (it survives the process, not the
    /// machine, until a sync).
    ///
    /// Neither `pos` nor the length need be aligned, but the caller must never make the kernel
    /// read a page from the device to merge a partial write into it (a read on the shard): the
    /// bytes of `pos`'s page before `pos` are in the page cache (the caller's own earlier write
    /// through it), or `pos` starts a page; and the bytes of the last page after the write are
    /// nothing written (a fresh page, or the rest of a page the page cache holds).
    ///
    /// A direct file's descriptor has O_DIRECT turned off for it (fcntl(2)), and the next
    /// direct write turns it back on: one descriptor per segment, where a second one per
    /// partition writing small batches ran out of the process's descriptors at thousands of
    /// partitions. Linux keeps the two kinds of IO on a file coherent (a direct read or write
    /// of a range first writes back what the page cache holds dirty there), so either way the
    /// bytes are right. But an IO takes the flag as the kernel finds it when it starts, and
    /// glommio hands its writes to the kernel later than it queues them: a direct write still
    /// queued when the flag went off became a buffered write through io_uring, which ext4 hands
    /// to a worker thread (a third of the direct writes at 6 partitions). So `None` while
    /// direct writes are pending, or when the flags cannot be changed: the caller writes
    /// directly instead.
    pub fn write_through_page_cache(&self, data: &[u8], pos: u64) -> Option<Result<(), IoFailure>> {
        if matches!(self.inner, Inner::Direct(_)) && !self.page_cache_mode.get() {
            if self.direct_writes_pending.get() > 0 {
                return None;
            }
            if let Err(e) = self.set_direct(false) {
                tracing::debug!(error = %e, "writing through the page cache is not possible");
                return None;
            }
        }
        Some(self.write_all_at(data, pos))
    }

    /// Turns O_DIRECT on or off for the file's descriptor.
    fn set_direct(&self, direct: bool) -> Result<(), IoFailure> {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        let fd = self.raw_fd();
        let fail =
            |e: nix::Error| IoFailure::new("setting O_DIRECT on", &self.path, &io::Error::from(e));
        let flags = OFlag::from_bits_truncate(fcntl(fd, FcntlArg::F_GETFL).map_err(fail)?);
        let flags = if direct {
            flags | OFlag::O_DIRECT
        } else {
            flags - OFlag::O_DIRECT
        };
        fcntl(fd, FcntlArg::F_SETFL(flags)).map_err(fail)?;
        self.page_cache_mode.set(!direct);
        Ok(())
    }

    /// Writes all of `data` at `pos`, blocking. A seek then writes, not a pwrite(2): nix's
    /// pwrite takes a borrowed descriptor, which glommio's files give only to unsafe code. The
    /// seek is skipped when the descriptor is already at `pos`, as it is for a partition that
    /// appends through the page cache write after write (the seek was 7% of a shard's time at
    /// 10,000 partitions).
    fn write_all_at(&self, data: &[u8], pos: u64) -> Result<(), IoFailure> {
        let cursor = self.page_cache_cursor.take();
        let result = self.seek_and_write(data, pos, cursor != Some(pos));
        if result.is_ok() {
            let end = pos + data.len() as u64;
            self.page_cache_cursor.set(Some(end));
            if matches!(self.inner, Inner::Direct(_)) {
                let (start, whole_end) = self.page_cache_pages.get();
                let (first, last) = (align_down(pos), align_down(end));
                if first < last {
                    let start = if start == whole_end {
                        first
                    } else {
                        start.min(first)
                    };
                    self.page_cache_pages.set((start, whole_end.max(last)));
                }
            }
        }
        result
    }

    /// The end of the whole pages written through the page cache and not released yet, if
    /// there are any.
    pub fn page_cache_pages_end(&self) -> Option<u64> {
        let (start, end) = self.page_cache_pages.get();
        (start < end).then_some(end)
    }

    /// Asks the kernel to drop from the page cache the whole pages written through it below
    /// `end` (posix_fadvise DONTNEED), and forgets them. Pages still dirty are written back
    /// instead and stay until the kernel reclaims them. Advice: a failure changes no data.
    pub fn release_page_cache(&self, end: u64) -> Result<(), IoFailure> {
        use nix::fcntl::{PosixFadviseAdvice, posix_fadvise};
        let (start, whole_end) = self.page_cache_pages.get();
        let end = end.min(whole_end);
        if start >= end {
            return Ok(());
        }
        self.page_cache_pages.set((end, whole_end));
        let range = |v: u64| i64::try_from(v).unwrap_or(i64::MAX);
        let (offset, len) = (range(start), range(end - start));
        posix_fadvise(
            self.raw_fd(),
            offset,
            len,
            PosixFadviseAdvice::POSIX_FADV_DONTNEED,
        )
        .map_err(|e| {
            IoFailure::new(
                "releasing the page cache of",
                &self.path,
                &io::Error::from(e),
            )
        })
    }

    fn seek_and_write(&self, mut data: &[u8], pos: u64, seek: bool) -> Result<(), IoFailure> {
        use nix::unistd::{Whence, lseek, write};
        let fd = self.raw_fd();
        let fail = |e: nix::Error| IoFailure::new("writing", &self.path, &io::Error::from(e));
        if seek {
            let offset = i64::try_from(pos).map_err(|_| {
                IoFailure::new(
                    "writing",
                    &self.path,
                    &io::Error::other("position out of range"),
                )
            })?;
            lseek(fd, offset, Whence::SeekSet).map_err(fail)?;
        }
        while !data.is_empty() {
            match write(fd, data) {
                Ok(0) => {
                    let e = io::Error::new(io::ErrorKind::StorageFull, "short write");
                    return Err(IoFailure::new("writing", &self.path, &e));
                }
                Ok(n) => data = &data[n..],
                Err(nix::Error::EINTR) => {}
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(())
    }
}

/// Writes a small file whole and makes it durable: written to a temporary name, synced, renamed
/// over `path`, and the directory synced, so a crash leaves either the old or the new content.
pub async fn write_file_atomic(path: &Path, content: &[u8]) -> Result<(), IoFailure> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    write_file_synced(&tmp, content).await?;
    std::fs::rename(&tmp, path).map_err(|e| IoFailure::new("renaming", &tmp, &e))?;
    sync_dir(path.parent().unwrap_or(Path::new("."))).await
}

/// Writes a small file whole, in place, and syncs its content (not its directory entry). Not
/// atomic: a crash can leave it torn, so only for a file that something written after it vouches
/// for (the clean-shutdown marker, for the active segment's index files), and that is rebuilt
/// when missing.
///
/// Small files (indexes, checkpoints) go through the page cache, whatever the segments' IO mode:
/// the next start reads them from memory instead of from the device, one file after another.
pub async fn write_file_synced(path: &Path, content: &[u8]) -> Result<(), IoFailure> {
    let file = SegmentFile::open(path, ResolvedIoMode::Buffered, true).await?;
    let len = align_up(content.len() as u64);
    let mut buf = file.alloc(len as usize);
    let (head, tail) = buf.as_bytes_mut().split_at_mut(content.len());
    head.copy_from_slice(content);
    tail.fill(0);
    if len > 0 {
        file.write_at(buf, len as usize, 0).await?;
    }
    file.truncate(content.len() as u64).await?;
    file.fdatasync().await?;
    file.close().await
}

/// [`write_file_synced`] without the sync, for a caller that syncs the whole filesystem after
/// ([`sync_filesystem`]). A few KiB into the page cache: plain blocking calls, cheaper than the
/// io_uring round trips of an open, a write, a truncation and a close. Written over the old
/// content rather than after an O_TRUNC, which frees the file's blocks only for the write to
/// take new ones (an index only grows, so the file is rarely cut).
pub fn write_file_unsynced(path: &Path, content: &[u8]) -> Result<(), IoFailure> {
    use std::io::Write;
    let fail = |e: io::Error| IoFailure::new("writing", path, &e);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(fail)?;
    file.write_all(content).map_err(fail)?;
    let len = content.len() as u64;
    if file.metadata().map_err(fail)?.len() > len {
        file.set_len(len).map_err(fail)?;
    }
    Ok(())
}

/// Makes everything written to the filesystem that holds `dir` durable: data, inodes, and one
/// flush of the device's cache for all of it (syncfs(2)), where a file at a time costs a flush
/// each. Run on glommio's blocking thread: it takes as long as the filesystem has dirty data.
pub async fn sync_filesystem(dir: &Path) -> Result<(), IoFailure> {
    use std::os::fd::AsRawFd;
    let handle = std::fs::File::open(dir).map_err(|e| IoFailure::new("opening", dir, &e))?;
    glommio::executor()
        .spawn_blocking(move || nix::unistd::syncfs(handle.as_raw_fd()))
        .await
        .map_err(|e| IoFailure::new("syncing the filesystem of", dir, &io::Error::from(e)))
}

/// Reads a small file whole (through the page cache, see [`write_file_synced`]); `None` if it
/// does not exist. A file of more than `max_bytes` is read no further (an error of kind
/// `InvalidData`): its size comes off the disk, and so would the memory it asks for. Its size
/// is taken from the open file, so a caller needs no statx(2) of its own first (one more walk
/// of the path, for every log at a start).
pub async fn read_file(path: &Path, max_bytes: u64) -> Result<Option<Vec<u8>>, IoFailure> {
    let file = match SegmentFile::open(path, ResolvedIoMode::Buffered, false).await {
        Ok(file) => file,
        Err(e) if e.kind == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let size = file.size().await?;
    if size > max_bytes {
        file.close().await?;
        return Err(IoFailure::new(
            "reading",
            path,
            &io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{size} bytes, more than the {max_bytes} such a file holds"),
            ),
        ));
    }
    let len = usize::try_from(size).map_err(|_| {
        IoFailure::new(
            "reading",
            path,
            &io::Error::other("file too large to read whole"),
        )
    })?;
    let data = file.read_at(0, len).await?;
    file.close().await?;
    Ok(Some(data))
}

/// Makes a directory's entries (created, renamed, removed files) durable. `dir` must be
/// absolute: glommio opens it with `openat(-1, ...)`, which refuses relative paths.
pub async fn sync_dir(dir: &Path) -> Result<(), IoFailure> {
    let fail = |e: glommio::GlommioError<()>| {
        IoFailure::new("syncing directory", dir, &io::Error::from(e))
    };
    let d = glommio::io::Directory::open(dir).await.map_err(fail)?;
    d.sync().await.map_err(fail)?;
    d.close().await.map_err(fail)
}

pub fn align_up(v: u64) -> u64 {
    v.div_ceil(ALIGNMENT) * ALIGNMENT
}

pub fn align_down(v: u64) -> u64 {
    v / ALIGNMENT * ALIGNMENT
}

#[cfg(test)]
pub(crate) mod tests {
    #![allow(clippy::unwrap_used)] // test code: a panic is a failed test

    use std::future::Future;

    use super::*;

    /// Runs `test` on a glommio executor with a fresh directory, its IO mode resolved and direct
    /// IO calibrated, as a shard's storage starts.
    pub(crate) fn on_calibrated_dir<F, Fut>(test: F)
    where
        F: FnOnce(PathBuf, ResolvedIoMode) -> Fut + Send + 'static,
        Fut: Future<Output = ()>,
    {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let mode = resolve_io_mode(&root, IoMode::Auto).unwrap();
                calibrate_direct_io(&root, mode).await.unwrap();
                test(root, mode).await;
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn a_file_read_whole_is_read_only_within_its_bound() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        glommio::LocalExecutorBuilder::default()
            .spawn(move || async move {
                let path = root.join("small");
                std::fs::write(&path, b"0123456789").unwrap();
                assert_eq!(
                    read_file(&path, 10).await.unwrap().as_deref(),
                    Some(&b"0123456789"[..])
                );
                let over = read_file(&path, 9).await.unwrap_err();
                assert_eq!(over.kind, io::ErrorKind::InvalidData, "{over}");
                assert_eq!(read_file(&root.join("none"), 9).await.unwrap(), None);
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn an_empty_file_reads_as_empty_with_the_io_memory_spent() {
        // glommio takes a read's buffer from the executor's pool (`io_memory`, which the write
        // buffers share) or, with the pool spent, from the heap, which has no buffer of no
        // bytes: it panics ("Buffer allocation failed"). An index file left empty by a kill -9
        // took a shard down that way at start-up, under load.
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_path_buf();
        glommio::LocalExecutorBuilder::default()
            .io_memory(1 << 20)
            .spawn(move || async move {
                let mode = resolve_io_mode(&root, IoMode::Auto).unwrap();
                calibrate_direct_io(&root, mode).await.unwrap();
                let path = root.join("00000000000000000000.index");
                std::fs::write(&path, b"").unwrap();
                let segment = SegmentFile::open(&root.join("0.log"), mode, true)
                    .await
                    .unwrap();
                let _spent: Vec<_> = (0..512).map(|_| segment.alloc(4096)).collect();
                assert_eq!(read_file(&path, 0).await.unwrap(), Some(Vec::new()));
                assert!(segment.read_at(0, 0).await.unwrap().is_empty());
                segment.close().await.unwrap();
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn an_unsynced_rewrite_leaves_exactly_the_new_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.index");
        write_file_unsynced(&path, &[7; 5000]).unwrap();
        write_file_unsynced(&path, &[1, 2, 3]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), [1, 2, 3]);
        write_file_unsynced(&path, &[9; 4100]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), [9; 4100]);
    }

    /// Whether the descriptor of `file` has O_DIRECT set.
    fn is_direct(file: &SegmentFile) -> bool {
        use nix::fcntl::{FcntlArg, OFlag, fcntl};
        let flags = fcntl(file.raw_fd(), FcntlArg::F_GETFL).unwrap();
        OFlag::from_bits_truncate(flags).contains(OFlag::O_DIRECT)
    }

    #[test]
    fn page_cache_and_direct_writes_take_turns_on_one_descriptor() {
        on_calibrated_dir(|root, mode| async move {
            let file = SegmentFile::open(&root.join("0.log"), mode, true)
                .await
                .unwrap();
            let direct = mode == ResolvedIoMode::Direct;
            assert_eq!(is_direct(&file), direct);
            let page = |byte: u8| vec![byte; ALIGNMENT as usize];
            file.write_through_page_cache(&page(1), 0).unwrap().unwrap();
            assert!(!is_direct(&file), "the page went through the page cache");
            let mut buf = file.alloc(2 * ALIGNMENT as usize);
            buf.as_bytes_mut().fill(2);
            file.write_at(buf, 2 * ALIGNMENT as usize, ALIGNMENT)
                .await
                .unwrap();
            assert_eq!(is_direct(&file), direct, "direct again for a direct write");
            // Over the page the page cache holds: still the newest bytes on top.
            file.write_through_page_cache(&page(3), 2 * ALIGNMENT)
                .unwrap()
                .unwrap();
            let mut buf = file.alloc(ALIGNMENT as usize);
            buf.as_bytes_mut().fill(4);
            file.write_at(buf, ALIGNMENT as usize, 2 * ALIGNMENT)
                .await
                .unwrap();
            // While a direct write is queued or in flight the flag stays on: the write must
            // reach the kernel as the direct write it was queued as.
            let mut buf = file.alloc(ALIGNMENT as usize);
            buf.as_bytes_mut().fill(5);
            let mut queued = Box::pin(file.write_at(buf, ALIGNMENT as usize, 3 * ALIGNMENT));
            let first_poll = futures_lite::future::poll_once(&mut queued).await;
            if direct && first_poll.is_none() {
                assert!(
                    file.write_through_page_cache(&page(6), 4 * ALIGNMENT)
                        .is_none()
                );
                assert_eq!(is_direct(&file), direct);
            }
            queued.await.unwrap();
            let mut want = page(1);
            want.extend(page(2));
            want.extend(page(4));
            want.extend(page(5));
            assert_eq!(file.read_at(0, want.len()).await.unwrap(), want);
            file.close().await.unwrap();
        });
    }
}
