//! Appends to the active segment file through aligned buffers, with direct IO.
//!
//! Appended bytes are copied into a bulk buffer of `write_buffer_bytes` that starts on a page
//! boundary; a full one is written at once while the next one fills (write-behind, up to
//! `writes_in_flight_max` writes in flight). When someone waits for bytes not yet written
//! ([`SegmentWriter::flush`]), the partly filled bulk buffer is written with its last page
//! padded with zeros. That partial page becomes the *tail page*: the next appends fill it first,
//! and it is written again, alone (one 4 KiB write), before appends move on to a new bulk buffer
//! at the next page.
//!
//! Why the tail page is written on its own: a write that covered both a page already on disk and
//! fresh preallocated pages spans two kinds of ext4 extents (written and unwritten), which ext4
//! cannot write without blocking; io_uring then hands it to a worker thread that competes with
//! the shard for its core, and such writes took 7-20 ms under load instead of well under one.
//! Kept apart, every write is either a rewrite of one written page or lies wholly in fresh pages,
//! and both go straight to the device.
//!
//! Two writes of the tail page are never in flight together: a rewrite waits for the previous
//! write of that page, so the newer content always lands last. Bulk writes never overlap.
//!
//! Small writes (at most `page_cache_write_max_bytes`) go through the page cache instead, on
//! the segment's own descriptor with O_DIRECT turned off for them
//! ([`SegmentFile::write_through_page_cache`]): a write(2) on the shard that is done when the
//! kernel has the bytes, which is Kafka's own promise for acks=1 (they survive the process, not
//! the machine, until a sync). A partition sent a record or two at a time then costs a copy per
//! write instead of a device write (and its ext4 work) per write; the kernel writes its pages
//! back later, many at a time. Such a write carries only the bytes the page cache does not hold
//! yet, from where the last one ended, so a partition appending through the page cache makes
//! one write(2) a flush and no seek (a whole page and a seek per flush were a third of the
//! shard's time at 10,000 partitions). A tail page that fills up during an append is held
//! until the flush and goes out in the same write(2) as the pages after it, when the two fit in
//! one such write: a batch crossing a page boundary otherwise cost two (1.46 write(2)s a batch
//! at 1,000 partitions, 0.88 held; each write(2) also updates the file's times). Only a tail
//! page whose start the page cache may not hold (written directly, or found at open) is
//! written whole, so that the kernel never reads a page from the device to merge a write into
//! it. A page written this way is written that way again (its rewrites wait for nothing), so
//! direct writes mostly keep clear of pages the page cache may hold dirty: one over such a page
//! is still right (the kernel writes the page back first) but goes to a worker thread. Whole
//! pages such writes leave in the page cache are dropped once the kernel has written them back
//! ([`crate::page_cache`]): nothing reads them there. The exception is a writer with a direct
//! write pending: the segment's descriptor keeps O_DIRECT on until it completes, so a small
//! write then goes directly too.
//!
//! With the shard's journal ([`crate::journal`], the broker's default with direct IO), a small
//! flush does not write at all: the bytes appended since the last write or entry are copied into
//! the journal, a shared mapping whose stores survive the process as a write(2) would. They stay
//! in the writer's buffers and reach the file as above, when a buffer fills, or when the journal
//! asks for them (it is filling up, or they are older than its timer period). Before a full
//! buffer is written directly, the bytes of it not in the journal yet go there first, so the
//! appends after it need not wait for the device. Bytes submitted to the file without an entry
//! make a *hole*: nothing from its start on survives until the hole is in the file.
//!
//! Progress is published in watermarks: `written_bytes` (file position below which every byte
//! is on the device or in the page cache) and, for the log, the offsets below which every batch
//! survives the process (in the file, or in the journal with no hole before it) and is in the
//! file.
//!
//! What a writer holds follows its partition's write rate, within the shard's budgets:
//! - its bulk buffer is sized by what arrived between the last flushes (doubling while buffers
//!   fill before anyone waits), from a page to 1 MiB, memory taken from the shard's write-buffer
//!   budget and given back when the write completes;
//! - the disk space it reserves ahead (fallocate) is about a second of its own writes, at most
//!   64 MiB, taken from the shard's reservation budget. With the budget spent it reserves what
//!   the next write covers and a little more (32 KiB), before submitting it: a write never
//!   extends the file. An idle
//!   writer gives its reservation back ([`SegmentWriter::trim_if_idle`]), as sealing does.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::budget::{Budget, Grant};
use crate::error::IoFailure;
use crate::file::{ALIGNMENT, SegmentFile, WriteBuf, align_down, align_up};
use crate::journal::Journal;
use crate::page_cache::PageCacheRelease;
use crate::watermark::{Reached, Watermark};

const PAGE_BYTES: usize = ALIGNMENT as usize;

/// Bulk buffers are at least this (unless the shard's whole budget is smaller): a page, what a
/// partition sent a record at a time fills between flushes. 32 KiB each made 10,000 such
/// partitions hold more than the shard's IO memory, and the rest came from the heap as fresh
/// pages to zero ...
const BUFFER_MIN_BYTES: usize = 4 << 10;
/// ... and at most this: larger writes gained nothing on the disks measured.
const BUFFER_MAX_BYTES: usize = 1 << 20;
/// Space is reserved ahead for about this long at the writer's recent rate ...
const RESERVE_AHEAD_FOR: Duration = Duration::from_secs(1);
/// ... within these bounds (the most is what every segment reserved before budgets).
const RESERVE_AHEAD_MIN_BYTES: u64 = 64 << 10;
const RESERVE_AHEAD_MAX_BYTES: u64 = 64 << 20;
/// With the shard's budget spent a writer still reserves this far past its write: thousands of
/// partitions each writing a record at a time would otherwise make one fallocate per write (a
/// tenth of the shard's time went to fallocate at 10,000 partitions). The budget is exceeded by
/// at most this much per partition writing (320 MiB at 10,000), given back when it idles.
pub const RESERVE_AHEAD_FLOOR_BYTES: u64 = 32 << 10;

/// What a writer works with, taken from the shard's storage configuration and budgets.
#[derive(Debug, Clone)]
pub struct WriterLimits {
    pub in_flight_max: usize,
    /// Memory for the shard's write buffers together.
    pub buffers: Rc<Budget>,
    /// Disk space the shard's writers may reserve ahead of their writes together.
    pub reserve_ahead: Rc<Budget>,
    /// Writes of at most this many bytes go through the page cache (0: none do).
    pub page_cache_write_max_bytes: usize,
    /// Where the whole pages written through the page cache are dropped once written back.
    pub page_cache: Rc<PageCacheRelease>,
    /// The shard's journal: with one, writes of at most `page_cache_write_max_bytes` go there
    /// instead of through the page cache.
    pub journal: Option<Rc<Journal>>,
}

/// The log's offsets a writer advances as batches are written.
#[derive(Debug, Clone)]
pub struct WrittenOffsets {
    /// Every batch below it survives the process: in its file, or in the shard's journal.
    pub written: Rc<Watermark>,
    /// Every batch below it is in its file (readable there, and no longer needed in memory).
    pub filed: Rc<Watermark>,
}

/// A writer's place in the shard's journal.
#[derive(Debug)]
struct JournalSeat {
    journal: Rc<Journal>,
    /// The segment's name in the journal's entries.
    path: Box<[u8]>,
    /// The most a journal entry carries; more goes to the file directly.
    entry_max_bytes: usize,
}

/// What [`SegmentWriter::journal_appended`] did.
enum Journaled {
    /// The bytes appended since the last write are in the journal now.
    Yes,
    /// There were none: everything appended is written or being written.
    Nothing,
    /// Too many, no journal, or no room in it: they are to be written to the file.
    Declined,
}

impl WriterLimits {
    /// The largest bulk buffer: 1 MiB, or less when the shard's budget is smaller.
    fn buffer_max_bytes(&self) -> usize {
        let budget = usize::try_from(self.buffers.max_bytes()).unwrap_or(usize::MAX);
        align_down(budget.min(BUFFER_MAX_BYTES) as u64).max(2 * ALIGNMENT) as usize
    }

    fn buffer_min_bytes(&self) -> usize {
        BUFFER_MIN_BYTES.min(self.buffer_max_bytes())
    }
}

#[derive(Debug)]
pub struct SegmentWriter {
    file: Rc<SegmentFile>,
    limits: WriterLimits,
    state: RefCell<State>,
    /// Every byte below this file position has been written to the file.
    written_bytes: Watermark,
    /// The log's offsets (shared with the log).
    offsets: WrittenOffsets,
    journal: Option<JournalSeat>,
}

/// A page partly written to disk, still being filled.
#[derive(Debug)]
struct TailPage {
    /// Aligned file position of the page.
    pos: u64,
    /// Its bytes so far (fewer than a page).
    data: Vec<u8>,
    /// Whether `data` holds bytes the disk does not have yet.
    dirty: bool,
    /// The last write of this page: a rewrite must wait for it.
    last_write: Option<Rc<Watermark>>,
    /// How many of `data`'s bytes the page cache holds from the writer's own write through it
    /// (0: none, or not known). A write through the page cache then carries only the bytes
    /// after them; with none it covers the whole page, so the kernel never reads the page
    /// from the device to merge the write into it.
    cached: usize,
}

impl TailPage {
    /// A tail page's bytes, room for the whole page reserved: appends fill it without
    /// reallocating (a partition sent a record at a time grew each tail page two or three
    /// times, 3% of the shard at 10,000 partitions).
    fn holding(bytes: &[u8]) -> Vec<u8> {
        debug_assert!(bytes.len() < PAGE_BYTES, "a tail page is partial");
        let mut data = Vec::with_capacity(PAGE_BYTES);
        data.extend_from_slice(bytes);
        data
    }
}

/// A buffer to write from, and the budget its memory counts against until the write is done.
#[derive(Debug)]
struct Buffer {
    buf: WriteBuf,
    grant: Grant,
}

/// The file space reserved for the segment, and how fast the writer went through it.
#[derive(Debug)]
struct Reserved {
    /// The file's size: fallocated up to here.
    size: u64,
    /// The part beyond the last submitted write, counted against the shard's budget.
    ahead: Grant,
    /// When the last reservation was made, and the write end it was made for: the rate since.
    at: Instant,
    from: u64,
    /// How far ahead the last reservation reached for.
    stretch: u64,
}

#[derive(Debug)]
struct State {
    /// The partial last page, if the end of the log is inside a page already written. While
    /// there is one, the bulk buffer is empty: appends fill the tail page first.
    tail: Option<TailPage>,
    /// A tail page that filled up with no write of it in flight: its new bytes wait to go out
    /// with the pages after it, in one write(2) through the page cache (a batch that crosses a
    /// page boundary then costs one write, not two). While there is one, the bulk buffer starts
    /// at the page after it.
    held_tail: Option<TailPage>,
    /// The bulk buffer being filled; it starts at the page-aligned position `bulk_pos`.
    bulk: Option<Buffer>,
    /// The size of the next bulk buffer: what arrived between recent flushes.
    next_buffer_bytes: usize,
    bulk_pos: u64,
    bulk_len: usize,
    /// Writes submitted and not yet complete, in submission (and file position) order.
    in_flight: VecDeque<InFlight>,
    /// Batch ends not yet written: (file position after the batch, offset after the batch).
    pending_marks: VecDeque<(u64, i64)>,
    /// Batch ends in the journal and not yet in the file.
    unfiled_marks: VecDeque<(u64, i64)>,
    /// Every byte below this position is in the file, in the journal, or in the hole below.
    journaled_to: u64,
    /// Bytes submitted to the file without a journal entry (the last of them at the end), not
    /// in the file yet: until they are, nothing from the first of them on survives the process.
    /// Without a journal, every write leaves one.
    hole: Option<(u64, u64)>,
    /// The end of the write a flush is waiting for; other flushes join it.
    flush_in_progress: Option<u64>,
    reserved: Reserved,
    /// Writes submitted so far, and the count [`SegmentWriter::trim_if_idle`] last saw with
    /// when it saw it first: an idle writer gives its reservation back. Counted rather than
    /// timed, so that a write reads no clock (2% of the shard at 10,000 partitions).
    submits: u64,
    idle_since: (u64, Instant),
    error: Option<IoFailure>,
}

impl State {
    /// The bytes appended from `from` on, none of them submitted: in the held tail page and
    /// the bulk buffer, or in the tail page.
    fn unsubmitted(&self, from: u64) -> [&[u8]; 2] {
        let mut parts: [&[u8]; 2] = [&[], &[]];
        if let Some(tail) = &self.tail {
            assert!(
                from >= tail.pos,
                "the tail page holds the unsubmitted bytes"
            );
            parts[0] = &tail.data[(from - tail.pos) as usize..];
            return parts;
        }
        let mut from = from;
        if let Some(held) = &self.held_tail {
            assert!(
                from >= held.pos,
                "the held page holds the unsubmitted bytes"
            );
            let end = held.pos + held.data.len() as u64;
            if from < end {
                parts[0] = &held.data[(from - held.pos) as usize..];
                from = end;
            }
        }
        assert!(
            from >= self.bulk_pos,
            "the bulk buffer holds the unsubmitted bytes"
        );
        if let Some(bulk) = &self.bulk {
            parts[1] = &bulk.buf.as_bytes()[(from - self.bulk_pos) as usize..self.bulk_len];
        }
        parts
    }

    fn position(&self) -> u64 {
        match &self.tail {
            Some(t) => t.pos + t.data.len() as u64,
            None => self.bulk_pos + self.bulk_len as u64,
        }
    }
}

#[derive(Debug)]
struct InFlight {
    /// The logical end of the bytes this write carries.
    end: u64,
    /// Advanced when a direct write completes; none for a write through the page cache, done
    /// when it was recorded.
    done: Option<Rc<Watermark>>,
}

impl InFlight {
    fn is_done(&self) -> bool {
        self.done.as_ref().is_none_or(|d| d.get() >= 1)
    }
}

impl SegmentWriter {
    /// A writer appending at `position`, with `preallocated` bytes of the file reserved.
    /// `tail` holds the file's bytes from the page that contains `position` up to it.
    pub fn new(
        file: Rc<SegmentFile>,
        position: u64,
        tail: &[u8],
        preallocated: u64,
        limits: WriterLimits,
        offsets: WrittenOffsets,
    ) -> SegmentWriter {
        let page = align_down(position);
        assert_eq!(
            tail.len() as u64,
            position - page,
            "tail must be the partial page"
        );
        let limits = WriterLimits {
            in_flight_max: limits.in_flight_max.max(1),
            ..limits
        };
        let journal = limits.journal.as_ref().and_then(|journal| {
            Some(JournalSeat {
                journal: journal.clone(),
                path: journal.entry_path(file.path())?,
                entry_max_bytes: limits.page_cache_write_max_bytes,
            })
        });
        let now = Instant::now();
        let (ahead, buffer_bytes) = (limits.reserve_ahead.empty(), limits.buffer_min_bytes());
        let tail_page = (!tail.is_empty()).then(|| TailPage {
            pos: page,
            data: TailPage::holding(tail),
            dirty: false,
            last_write: None,
            cached: 0,
        });
        let bulk_pos = if tail_page.is_some() {
            page + ALIGNMENT
        } else {
            position
        };
        SegmentWriter {
            file,
            limits,
            state: RefCell::new(State {
                tail: tail_page,
                held_tail: None,
                bulk: None,
                next_buffer_bytes: buffer_bytes,
                bulk_pos,
                bulk_len: 0,
                in_flight: VecDeque::new(),
                pending_marks: VecDeque::new(),
                unfiled_marks: VecDeque::new(),
                journaled_to: position,
                hole: None,
                flush_in_progress: None,
                reserved: Reserved {
                    size: preallocated,
                    ahead,
                    at: now,
                    from: position,
                    stretch: 0,
                },
                submits: 0,
                idle_since: (0, now),
                error: None,
            }),
            written_bytes: Watermark::new(position as i64),
            offsets,
            journal,
        }
    }

    pub fn file(&self) -> &Rc<SegmentFile> {
        &self.file
    }

    /// The logical size of the segment: every byte appended.
    pub fn position(&self) -> u64 {
        self.state.borrow().position()
    }

    /// Every byte below this file position is on the device or in the page cache.
    pub fn written_position(&self) -> u64 {
        self.written_bytes.get() as u64
    }

    pub fn error(&self) -> Option<IoFailure> {
        self.state.borrow().error.clone()
    }

    /// Whether a write failed (the writer writes nothing more). Borrows nothing: the journal
    /// asks while a writer's state may be borrowed.
    pub fn failed(&self) -> bool {
        self.written_bytes.is_closed()
    }

    /// Copies `data` (whole batches ending at offset `next_offset`) into the tail page and the
    /// bulk buffers, and starts writing every page and buffer it fills. Never waits: call
    /// [`Self::wait_for_room`] first to keep the bytes not yet written bounded.
    pub fn append(self: &Rc<Self>, data: &[u8], next_offset: i64) {
        // Marked before the copy: a write that fills a page or a buffer starts inside it, and
        // one through the page cache completes there too, so it must see this batch's end.
        let end = self.position() + data.len() as u64;
        self.state
            .borrow_mut()
            .pending_marks
            .push_back((end, next_offset));
        let mut rest = data;
        while !rest.is_empty() {
            let mut s = self.state.borrow_mut();
            if let Some(tail) = s.tail.as_mut() {
                let n = rest.len().min(PAGE_BYTES - tail.data.len());
                tail.data.extend_from_slice(&rest[..n]);
                tail.dirty = true;
                rest = &rest[n..];
                if tail.data.len() == PAGE_BYTES {
                    let unwritten = tail.last_write.as_ref().is_none_or(|w| w.get() >= 1);
                    let page = tail.pos;
                    if unwritten && self.limits.page_cache_write_max_bytes > 0 {
                        debug_assert_eq!(s.bulk_pos, page + ALIGNMENT, "bulk after the tail");
                        s.held_tail = s.tail.take();
                    } else {
                        drop(s);
                        self.journal_before_write();
                        self.submit_tail();
                    }
                }
                continue;
            }
            let len = s.bulk_len;
            if s.bulk.is_none() {
                let bulk = self.new_bulk(s.next_buffer_bytes);
                s.bulk = Some(bulk);
            }
            let Some(bulk) = s.bulk.as_mut() else {
                unreachable!("a bulk buffer was just put in place")
            };
            let capacity = bulk.buf.len();
            let n = rest.len().min(capacity - len);
            bulk.buf.as_bytes_mut()[len..len + n].copy_from_slice(&rest[..n]);
            s.bulk_len += n;
            rest = &rest[n..];
            let full = s.bulk_len == capacity;
            if full {
                // Filled before anyone waited: the partition writes faster than that.
                s.next_buffer_bytes = (capacity * 2).min(self.limits.buffer_max_bytes());
            }
            drop(s);
            if full {
                if capacity > self.limits.page_cache_write_max_bytes {
                    // Too large for the page cache: written directly.
                    self.journal_before_write();
                }
                self.submit_bulk_full();
            }
        }
        debug_assert_eq!(self.position(), end, "the batch is appended whole");
    }

    /// A bulk buffer of about `want` bytes, as much of it as the shard's budget has room for
    /// but never under the minimum: a writer must be able to go on (the budget is exceeded by
    /// at most one minimum buffer per partition writing at that moment).
    fn new_bulk(&self, want: usize) -> Buffer {
        let min = self.limits.buffer_min_bytes();
        let room = usize::try_from(self.limits.buffers.free_bytes()).unwrap_or(usize::MAX);
        let len = align_down(want.min(room) as u64).max(min as u64);
        Buffer {
            buf: self.file.alloc(len as usize),
            grant: self.limits.buffers.take_over(len),
        }
    }

    /// Waits until the bytes appended and not yet written fit the write-behind window.
    pub async fn wait_for_room(&self) -> Result<(), IoFailure> {
        let window = (self.limits.in_flight_max * self.limits.buffer_max_bytes()) as u64;
        let level = self.position().saturating_sub(window);
        self.wait_written(level).await
    }

    /// Writes out everything appended so far, including a partly filled buffer, and waits until
    /// it is on the device. Concurrent calls share writes.
    pub async fn flush(self: &Rc<Self>) -> Result<(), IoFailure> {
        let target = self.position();
        loop {
            if let Some(e) = self.error() {
                return Err(e);
            }
            if self.written_bytes.get() >= target as i64 {
                return Ok(());
            }
            // A flush whose write already completed counts as finished even before its task
            // runs again to say so: waiting on it would spin without yielding.
            let running = self
                .state
                .borrow()
                .flush_in_progress
                .filter(|&end| self.written_bytes.get() < end as i64);
            match running {
                Some(end) => self.wait_written(end.min(target)).await?,
                None => {
                    let end = self.submit_pending();
                    self.state.borrow_mut().flush_in_progress = Some(end);
                    let result = self.wait_written(end).await;
                    let mut s = self.state.borrow_mut();
                    if s.flush_in_progress == Some(end) {
                        s.flush_in_progress = None;
                    }
                    drop(s);
                    result?;
                }
            }
        }
    }

    /// Starts writing whatever is appended and not yet submitted (the tail page if it has new
    /// bytes, or the bulk buffer's bytes), without waiting for the writes in flight: a log with
    /// pipelined appends keeps several rounds on the device at once. Returns whether anything
    /// was submitted.
    /// With a journal, what is small enough goes there instead: it survives the process at once,
    /// and reaches the file with the writes of the pages it is on.
    /// A write is submitted only with `room` (the caller's bound on writes in flight); a
    /// journal entry needs none.
    pub fn submit_appended(self: &Rc<Self>, room: bool) -> bool {
        match self.journal_appended() {
            Journaled::Yes => true,
            Journaled::Nothing => false,
            Journaled::Declined => room && self.write_out(),
        }
    }

    /// Starts writing whatever is appended and not yet submitted to the file, journaled or not.
    /// Returns whether anything was submitted.
    pub fn write_out(self: &Rc<Self>) -> bool {
        let pending = {
            let s = self.state.borrow();
            s.tail.as_ref().is_some_and(|t| t.dirty) || s.held_tail.is_some() || s.bulk_len > 0
        };
        if pending {
            self.submit_pending();
        }
        pending
    }

    /// As [`Self::write_out`], unless the writer has as many writes in flight as it may: for
    /// the journal, which asks again until the writer's entries are in the file.
    pub fn write_out_if_room(self: &Rc<Self>) {
        if self.writes_in_flight() < self.limits.in_flight_max {
            self.write_out();
        }
    }

    /// Writes submitted and not yet complete.
    pub fn writes_in_flight(&self) -> usize {
        self.state.borrow().in_flight.len()
    }

    /// Waits until the oldest write in flight completes (at once if none is).
    pub async fn wait_oldest_written(&self) -> Result<(), IoFailure> {
        let end = self.state.borrow().in_flight.front().map(|w| w.end);
        match end {
            Some(end) => self.wait_written(end).await,
            None => self.error().map_or(Ok(()), Err),
        }
    }

    /// Flushes, and gives back the file's logical size. The caller trims the file to it: the
    /// reservation ahead is given back to the shard. The writer's journal entries are retired:
    /// the file may change in other ways from now on.
    pub async fn finish(self: &Rc<Self>) -> Result<u64, IoFailure> {
        self.flush().await?;
        self.retire_journal().await;
        let mut s = self.state.borrow_mut();
        s.reserved.ahead.resize(0);
        s.reserved.size = s.position();
        Ok(s.position())
    }

    /// Gives the space reserved ahead back (its blocks after the last page are freed) if nothing
    /// was submitted since a call at least `idle_for` ago and no write is in flight. Returns
    /// whether the writer holds nothing more to give back. Blocking and on the shard, like
    /// fallocate: no write can be submitted while it runs.
    pub fn trim_if_idle(&self, idle_for: Duration) -> bool {
        let mut s = self.state.borrow_mut();
        if s.idle_since.0 != s.submits {
            s.idle_since = (s.submits, Instant::now());
        }
        let idle = s.in_flight.is_empty() && s.idle_since.1.elapsed() >= idle_for;
        let end = align_up(s.position());
        if s.reserved.size <= end {
            return true;
        }
        if !idle || s.error.is_some() {
            return false;
        }
        match self.file.release(end, s.reserved.size) {
            Ok(()) => {
                s.reserved.size = end;
                s.reserved.ahead.resize(0);
                s.reserved.stretch = 0;
                true
            }
            Err(e) => {
                // Not worth retrying (the filesystem may not punch holes): the space comes back
                // when the segment is sealed.
                tracing::debug!(error = %e, "giving back reserved space failed");
                true
            }
        }
    }

    /// Retires the writer's journal entries: for a file about to be deleted, or one the writer
    /// has written everything to.
    pub async fn retire_journal(&self) {
        if let Some(seat) = &self.journal {
            seat.journal.retire(&seat.path).await;
        }
    }

    /// Before a direct write of a page or a buffer that filled up: the bytes it carries that are
    /// not in the journal yet go there first, so that the appends after them need not wait for
    /// the write to survive the process.
    fn journal_before_write(self: &Rc<Self>) {
        if self.journal.is_some() {
            self.journal_appended();
        }
    }

    /// Copies the bytes appended since the last journal entry or write submitted into the
    /// shard's journal (a store into shared memory, no system call), if they are few enough
    /// and it has room: they then survive the process.
    fn journal_appended(self: &Rc<Self>) -> Journaled {
        let Some(seat) = &self.journal else {
            return Journaled::Declined;
        };
        let outcome = {
            let mut s = self.state.borrow_mut();
            let filed = self.written_bytes.get() as u64;
            let submitted = s.in_flight.back().map_or(filed, |w| w.end).max(filed);
            let position = s.position();
            let from = s.journaled_to.max(submitted);
            if from >= position {
                return Journaled::Nothing;
            }
            if (position - from) as usize > seat.entry_max_bytes {
                Journaled::Declined
            } else {
                let parts = s.unsubmitted(from);
                assert_eq!(
                    from + (parts[0].len() + parts[1].len()) as u64,
                    position,
                    "the journal entry ends where the appends do"
                );
                if seat.journal.append(self, &seat.path, from, parts) {
                    // The bytes between the last entry and this one were submitted: until they
                    // are in the file, they are a hole (a direct write already made it one).
                    let gap_start = s.journaled_to.max(filed);
                    if from > gap_start {
                        let open = s.hole.filter(|&(_, end)| end > filed);
                        let start = open.map_or(gap_start, |(start, _)| start.min(gap_start));
                        let end = open.map_or(from, |(_, end)| end.max(from));
                        s.hole = Some((start, end));
                    }
                    s.journaled_to = position;
                    Journaled::Yes
                } else {
                    Journaled::Declined
                }
            }
        };
        seat.journal.relieve();
        if let Journaled::Yes = outcome {
            self.publish();
        }
        outcome
    }

    async fn wait_written(&self, position: u64) -> Result<(), IoFailure> {
        match self.written_bytes.wait_for(position as i64).await {
            Reached::Yes(_) => Ok(()),
            Reached::Closed | Reached::Reset => Err(self.error().unwrap_or_else(|| {
                IoFailure::new(
                    "writing",
                    self.file.path(),
                    &std::io::Error::other("writer stopped"),
                )
            })),
        }
    }

    /// Submits whatever is appended and not yet submitted (the tail page if it has new bytes, or
    /// the bulk buffer's bytes, with the held tail page). Returns the logical end of the log,
    /// which those writes reach.
    fn submit_pending(self: &Rc<Self>) -> u64 {
        let dirty_tail = self.state.borrow().tail.as_ref().is_some_and(|t| t.dirty);
        if dirty_tail {
            self.submit_tail();
        } else if self.state.borrow().bulk_len > 0 {
            self.submit_bulk_partial();
        } else {
            self.submit_held_tail();
        }
        self.position()
    }

    /// Writes the held tail page, if there is one, on its own: as any full tail page.
    fn submit_held_tail(self: &Rc<Self>) {
        let mut s = self.state.borrow_mut();
        let Some(held) = s.held_tail.take() else {
            return;
        };
        assert!(
            s.tail.is_none(),
            "a held tail page is the last page before the bulk buffer"
        );
        s.tail = Some(held);
        drop(s);
        self.submit_tail();
    }

    /// Writes `data`, the bytes from the page start `pos` on, through the page cache as
    /// [`Self::write_through_page_cache`] does, and the held tail page's new bytes right before
    /// them in the same write(2) when the two may go that way together; otherwise the held page
    /// is written on its own first.
    fn write_after_held_tail(
        self: &Rc<Self>,
        data: &[u8],
        pos: u64,
    ) -> Option<(Result<(), IoFailure>, u64)> {
        let joined = {
            let s = self.state.borrow();
            s.held_tail.as_ref().and_then(|held| {
                assert_eq!(
                    held.pos + ALIGNMENT,
                    pos,
                    "the held page ends where the bytes start"
                );
                let head = &held.data[held.cached..];
                let len = head.len() + data.len();
                (len <= self.limits.page_cache_write_max_bytes).then(|| {
                    // A copy of at most `page_cache_write_max_bytes` costs less than the
                    // write(2) it saves (a vectored write needs a borrowed descriptor, which
                    // glommio's files give only to unsafe code).
                    let mut joined = Vec::with_capacity(len);
                    joined.extend_from_slice(head);
                    joined.extend_from_slice(data);
                    (held.pos + held.cached as u64, joined)
                })
            })
        };
        if let Some((start, joined)) = joined
            && let Some(written) = self.write_through_page_cache(&joined, start)
        {
            self.state.borrow_mut().held_tail = None;
            return Some(written);
        }
        self.submit_held_tail();
        self.write_through_page_cache(data, pos)
    }

    /// Writes the tail page: through the page cache if it may go there (only the bytes it does
    /// not hold yet), or else directly (the page padded with zeros), after the previous write
    /// of that page. A full tail page is done with: appends go on in a bulk buffer at the next
    /// page.
    fn submit_tail(self: &Rc<Self>) {
        if self.tail_through_page_cache() {
            return;
        }
        let (buf, pos, len, depends_on, done) = {
            let mut s = self.state.borrow_mut();
            let Some(tail) = s.tail.as_mut() else { return };
            let mut buf = Buffer {
                buf: self.file.alloc(PAGE_BYTES),
                grant: self.limits.buffers.take_over(ALIGNMENT),
            };
            let bytes = buf.buf.as_bytes_mut();
            bytes[..tail.data.len()].copy_from_slice(&tail.data);
            bytes[tail.data.len()..].fill(0);
            let done = Rc::new(Watermark::new(0));
            let depends_on = tail.last_write.replace(done.clone());
            tail.dirty = false;
            // A direct write drops the page from the page cache.
            tail.cached = 0;
            let (pos, len) = (tail.pos, tail.data.len());
            if len == PAGE_BYTES {
                s.tail = None;
                debug_assert!(
                    s.bulk_pos >= pos + ALIGNMENT,
                    "the bulk buffer is past the tail"
                );
            }
            (buf, pos, len, depends_on, done)
        };
        self.submit_direct(buf, pos, len, depends_on, done);
    }

    /// Writes the tail page's new bytes through the page cache, if the page has no write in
    /// flight and the file takes such a write now; returns whether it did (or there was no
    /// tail page).
    fn tail_through_page_cache(&self) -> bool {
        let mut s = self.state.borrow_mut();
        let Some(tail) = s.tail.as_mut() else {
            return true;
        };
        if tail.last_write.as_ref().is_some_and(|w| w.get() < 1) {
            return false;
        }
        let (pos, len, cached) = (tail.pos, tail.data.len(), tail.cached);
        let written = if cached > 0 {
            debug_assert!(cached <= len, "the page cache holds only bytes of the page");
            self.write_through_page_cache(&tail.data[cached..], pos + cached as u64)
        } else {
            let mut page = [0u8; PAGE_BYTES];
            page[..len].copy_from_slice(&tail.data);
            self.write_through_page_cache(&page, pos)
        };
        let Some((result, file_end)) = written else {
            return false;
        };
        tail.dirty = false;
        tail.cached = len;
        tail.last_write = None;
        if len == PAGE_BYTES {
            s.tail = None;
            debug_assert!(
                s.bulk_pos >= pos + ALIGNMENT,
                "the bulk buffer is past the tail"
            );
        }
        drop(s);
        self.written_through_page_cache(pos + len as u64, file_end, result);
        true
    }

    /// Submits the full bulk buffer; the next one starts right after it.
    fn submit_bulk_full(self: &Rc<Self>) {
        let (bulk, pos, len) = {
            let mut s = self.state.borrow_mut();
            let Some(bulk) = s.bulk.take() else { return };
            let (pos, len) = (s.bulk_pos, s.bulk_len);
            s.bulk_pos += len as u64;
            s.bulk_len = 0;
            (bulk, pos, len)
        };
        if let Some((result, file_end)) =
            self.write_after_held_tail(&bulk.buf.as_bytes()[..len], pos)
        {
            self.written_through_page_cache(pos + len as u64, file_end, result);
            return;
        }
        self.submit_direct(bulk, pos, len, None, Rc::new(Watermark::new(0)));
    }

    /// Submits what the bulk buffer holds: through the page cache if it may go there (its pages
    /// are fresh: the bytes alone), or else directly, its last page padded with zeros. That
    /// partial last page becomes the tail page.
    fn submit_bulk_partial(self: &Rc<Self>) {
        let (mut bulk, pos, len) = {
            let mut s = self.state.borrow_mut();
            let Some(bulk) = s.bulk.take() else {
                return;
            };
            let (pos, len) = (s.bulk_pos, s.bulk_len);
            // What arrived since the last flush: the next buffer holds about twice that.
            s.next_buffer_bytes = (align_up(2 * len as u64) as usize).clamp(
                self.limits.buffer_min_bytes(),
                self.limits.buffer_max_bytes(),
            );
            s.bulk_len = 0;
            (bulk, pos, len)
        };
        let through_cache = self.write_after_held_tail(&bulk.buf.as_bytes()[..len], pos);
        let done = Rc::new(Watermark::new(0));
        {
            let mut s = self.state.borrow_mut();
            let whole_pages = align_down(len as u64) as usize;
            if whole_pages == len {
                s.bulk_pos = pos + len as u64;
            } else {
                let page = pos + whole_pages as u64;
                let cached = through_cache.is_some();
                s.tail = Some(TailPage {
                    pos: page,
                    data: TailPage::holding(&bulk.buf.as_bytes()[whole_pages..len]),
                    dirty: false,
                    last_write: (!cached).then(|| done.clone()),
                    cached: if cached { len - whole_pages } else { 0 },
                });
                s.bulk_pos = page + ALIGNMENT;
            }
        }
        match through_cache {
            Some((result, file_end)) => {
                self.written_through_page_cache(pos + len as u64, file_end, result);
            }
            None => {
                let padded = align_up(len as u64) as usize;
                bulk.buf.as_bytes_mut()[len..padded].fill(0);
                self.submit_direct(bulk, pos, len, None, done);
            }
        }
    }

    /// Writes `data` at `pos` through the page cache, if it is at most
    /// `page_cache_write_max_bytes` and the file takes such a write now (not while a direct
    /// write of it is pending): the result, and the file's end it reached. The caller keeps to
    /// [`SegmentFile::write_through_page_cache`]'s rule (no page read to merge a write into).
    /// Such a write reserves nothing ahead: the file grows with it (ext4 allocates its blocks
    /// at write-back), and direct writes reserve from past it.
    fn write_through_page_cache(
        &self,
        data: &[u8],
        pos: u64,
    ) -> Option<(Result<(), IoFailure>, u64)> {
        if data.len() > self.limits.page_cache_write_max_bytes {
            return None;
        }
        let result = self.file.write_through_page_cache(data, pos)?;
        self.limits.page_cache.note(&self.file);
        Some((result, pos + data.len() as u64))
    }

    /// Records a write through the page cache, done on return, that carried the log's bytes up
    /// to `end` and made the file at least `file_end` long.
    fn written_through_page_cache(&self, end: u64, file_end: u64, result: Result<(), IoFailure>) {
        {
            let mut s = self.state.borrow_mut();
            s.in_flight.push_back(InFlight { end, done: None });
            s.submits += 1;
        }
        self.grown_to(file_end);
        self.complete(result);
    }

    /// Starts writing `len` logical bytes of `buf` at `pos` directly (padded to the alignment),
    /// after `depends_on` completes; `done` is advanced when it completes.
    fn submit_direct(
        self: &Rc<Self>,
        buf: Buffer,
        pos: u64,
        len: usize,
        depends_on: Option<Rc<Watermark>>,
        done: Rc<Watermark>,
    ) {
        let padded = align_up(len as u64);
        let mut s = self.state.borrow_mut();
        let end = pos + len as u64;
        if end > s.journaled_to {
            let filed = self.written_bytes.get() as u64;
            let open = s.hole.filter(|&(_, hole_end)| hole_end > filed);
            let start = open.map_or(pos.max(s.journaled_to), |(start, _)| start);
            s.hole = Some((start, end));
        }
        s.in_flight.push_back(InFlight {
            end: pos + len as u64,
            done: Some(done.clone()),
        });
        s.submits += 1;
        drop(s);
        self.reserve_space(pos + padded);
        let this = self.clone();
        glommio::spawn_local(async move {
            if let Some(prev) = depends_on {
                prev.wait_for(1).await;
            }
            let Buffer { buf, grant } = buf;
            let result = this.file.write_at(buf, padded as usize, pos).await;
            drop(grant);
            done.advance(1);
            this.complete(result);
        })
        .detach();
    }

    /// After a write through the page cache that reached `end`: the file is at least that long,
    /// and what was reserved ahead is that much less.
    fn grown_to(&self, end: u64) {
        let mut s = self.state.borrow_mut();
        let r = &mut s.reserved;
        r.size = r.size.max(end);
        r.ahead.resize(r.size - end);
    }

    /// Makes sure the file's space is reserved up to `end` before a write reaches there, so
    /// writes never extend the file (ext4 cannot do that without blocking), and ahead of it by
    /// about [`RESERVE_AHEAD_FOR`] of this writer's recent writes, as far as the shard's budget
    /// allows. With the budget spent, [`RESERVE_AHEAD_FLOOR_BYTES`] past `end`. Still on
    /// the shard (through io_uring it would wait for a worker thread on a busy core).
    fn reserve_space(&self, end: u64) {
        let mut s = self.state.borrow_mut();
        let r = &mut s.reserved;
        if end + r.stretch / 2 <= r.size {
            r.ahead.resize(r.size - end);
            return;
        }
        let elapsed = r.at.elapsed().as_secs_f64().max(1e-3);
        let rate = end.saturating_sub(r.from) as f64 / elapsed;
        let want = ((rate * RESERVE_AHEAD_FOR.as_secs_f64()) as u64)
            .clamp(RESERVE_AHEAD_MIN_BYTES, RESERVE_AHEAD_MAX_BYTES);
        let ahead = align_down(want.min(r.ahead.room())).max(RESERVE_AHEAD_FLOOR_BYTES);
        let size = (end + ahead).max(r.size);
        (r.at, r.from, r.stretch) = (Instant::now(), end, ahead);
        if size > r.size {
            match self.file.preallocate(r.size, size) {
                Ok(()) => r.size = size,
                // The write goes on and extends the file (slower); the free-space guard is
                // there so that this does not happen for want of space.
                Err(e) => tracing::warn!(error = %e, "reserving space for a segment failed"),
            }
        }
        let ahead = r.size.saturating_sub(end);
        r.ahead.resize(ahead);
    }

    /// Records completed writes: the written watermarks advance over the completed prefix.
    fn complete(&self, result: Result<(), IoFailure>) {
        let mut s = self.state.borrow_mut();
        if let Err(e) = result {
            tracing::error!(error = %e, "segment write failed: the log is offline");
            s.error.get_or_insert(e);
            drop(s);
            self.written_bytes.close();
            self.offsets.written.close();
            self.offsets.filed.close();
            return;
        }
        let mut written = None;
        while s.in_flight.front().is_some_and(InFlight::is_done) {
            written = s.in_flight.pop_front().map(|w| w.end);
        }
        drop(s);
        if let Some(written) = written {
            self.written_bytes.advance(written as i64);
            self.publish();
        }
    }

    /// Advances the log's offsets over the batches now in the file, or in the journal with
    /// everything before them in the file.
    fn publish(&self) {
        let mut s = self.state.borrow_mut();
        let filed = self.written_bytes.get() as u64;
        let survives = match s.hole {
            Some((start, end)) if filed < end => filed.max(start),
            _ => {
                s.hole = None;
                filed.max(s.journaled_to)
            }
        };
        let mut written = None;
        while let Some(&(end, next)) = s.pending_marks.front()
            && end <= survives
        {
            s.pending_marks.pop_front();
            s.unfiled_marks.push_back((end, next));
            written = Some(next);
        }
        let mut in_file = None;
        while let Some(&(end, next)) = s.unfiled_marks.front()
            && end <= filed
        {
            s.unfiled_marks.pop_front();
            in_file = Some(next);
        }
        drop(s);
        if let Some(offset) = written {
            self.offsets.written.advance(offset);
        }
        if let Some(offset) = in_file {
            debug_assert!(
                offset <= self.offsets.written.get(),
                "what is in the file survives the process"
            );
            self.offsets.filed.advance(offset);
        }
    }
}
