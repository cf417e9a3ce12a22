//! Appends to the active segment file through aligned buffers, with direct IO.
//!
//! Appended bytes are copied into a buffer of `write_buffer_bytes`; a full buffer is written at
//! once while the next one fills (write-behind, up to `writes_in_flight_max` writes in flight).
//! A partly filled buffer is written when someone waits for its bytes ([`SegmentWriter::flush`]):
//! its last, partial page is padded with zeros, and copied into the next buffer, so the next
//! write rewrites that page with more data in it. Two writes of the same page are never in
//! flight together: a write that starts inside the page where the previous one ended waits for
//! that one to complete, so the newer content always lands last.
//!
//! Progress is published in two watermarks: `written_bytes` (file position below which every
//! byte is on the device) and, for the log, the offset below which every batch is written.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use crate::error::IoFailure;
use crate::file::{ALIGNMENT, SegmentFile, WriteBuf, align_down, align_up};
use crate::watermark::{Reached, Watermark};

/// Sizes a writer works with, taken from the shard's storage configuration.
#[derive(Debug, Clone, Copy)]
pub struct WriterLimits {
    pub buffer_bytes: usize,
    pub in_flight_max: usize,
    pub preallocate_bytes: u64,
}

#[derive(Debug)]
pub struct SegmentWriter {
    file: Rc<SegmentFile>,
    limits: WriterLimits,
    state: RefCell<State>,
    /// Every byte below this file position has been written.
    written_bytes: Watermark,
    /// Every batch below this offset has been written (shared with the log).
    written_offset: Rc<Watermark>,
}

#[derive(Debug)]
struct State {
    /// The buffer being filled; it starts at the aligned position `buf_pos`.
    buf: Option<WriteBuf>,
    buf_pos: u64,
    buf_len: usize,
    /// Writes submitted and not yet complete, in submission order.
    in_flight: VecDeque<InFlight>,
    /// The last write submitted: the next write must wait for it if they share a page.
    last_write: Option<(u64, Rc<Watermark>)>,
    /// Batch ends not yet written: (file position after the batch, offset after the batch).
    pending_marks: VecDeque<(u64, i64)>,
    /// The end of the write a flush is waiting for; other flushes join it.
    flush_in_progress: Option<u64>,
    /// File size reserved by preallocation.
    preallocated: u64,
    /// A running preallocation, awaited before the file is truncated or closed.
    preallocating: Option<Rc<Watermark>>,
    error: Option<IoFailure>,
}

#[derive(Debug)]
struct InFlight {
    /// The logical end of the bytes this write carries.
    end: u64,
    done: Rc<Watermark>,
}

impl SegmentWriter {
    /// A writer appending at `position`. `tail` holds the file's bytes from the page that
    /// contains `position` up to it (they are rewritten with the page).
    pub fn new(
        file: Rc<SegmentFile>,
        position: u64,
        tail: &[u8],
        preallocated: u64,
        limits: WriterLimits,
        written_offset: Rc<Watermark>,
    ) -> SegmentWriter {
        let buf_pos = align_down(position);
        assert_eq!(
            tail.len() as u64,
            position - buf_pos,
            "tail must be the partial page"
        );
        let limits = WriterLimits {
            buffer_bytes: (align_up(limits.buffer_bytes as u64).max(2 * ALIGNMENT)) as usize,
            in_flight_max: limits.in_flight_max.max(1),
            preallocate_bytes: limits.preallocate_bytes,
        };
        let mut buf = file.alloc(limits.buffer_bytes);
        buf.as_bytes_mut()[..tail.len()].copy_from_slice(tail);
        SegmentWriter {
            file,
            limits,
            state: RefCell::new(State {
                buf: Some(buf),
                buf_pos,
                buf_len: tail.len(),
                in_flight: VecDeque::new(),
                last_write: None,
                pending_marks: VecDeque::new(),
                flush_in_progress: None,
                preallocated,
                preallocating: None,
                error: None,
            }),
            written_bytes: Watermark::new(position as i64),
            written_offset,
        }
    }

    pub fn file(&self) -> &Rc<SegmentFile> {
        &self.file
    }

    /// The logical size of the segment: every byte appended.
    pub fn position(&self) -> u64 {
        let s = self.state.borrow();
        s.buf_pos + s.buf_len as u64
    }

    /// Every byte below this file position is on the device.
    pub fn written_position(&self) -> u64 {
        self.written_bytes.get() as u64
    }

    pub fn error(&self) -> Option<IoFailure> {
        self.state.borrow().error.clone()
    }

    /// Copies `data` (whole batches ending at offset `next_offset`) into the write buffers and
    /// starts writing every buffer it fills. Never waits: call [`Self::wait_for_room`] first to
    /// keep the bytes not yet written bounded.
    pub fn append(self: &Rc<Self>, data: &[u8], next_offset: i64) {
        let mut rest = data;
        while !rest.is_empty() {
            let full = {
                let mut s = self.state.borrow_mut();
                let len = s.buf_len;
                let buf = s
                    .buf
                    .get_or_insert_with(|| self.file.alloc(self.limits.buffer_bytes));
                let n = rest.len().min(buf.len() - len);
                buf.as_bytes_mut()[len..len + n].copy_from_slice(&rest[..n]);
                s.buf_len += n;
                rest = &rest[n..];
                s.buf_len == self.limits.buffer_bytes
            };
            if full {
                self.submit_buffer();
            }
        }
        let end = self.position();
        self.state
            .borrow_mut()
            .pending_marks
            .push_back((end, next_offset));
    }

    /// Waits until the bytes appended and not yet written fit the write-behind window.
    pub async fn wait_for_room(&self) -> Result<(), IoFailure> {
        let window = (self.limits.in_flight_max * self.limits.buffer_bytes) as u64;
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
                    let end = self.submit_partial();
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

    /// Flushes, waits for any preallocation, and gives back the file with its logical size.
    pub async fn finish(self: &Rc<Self>) -> Result<u64, IoFailure> {
        self.flush().await?;
        let preallocating = self.state.borrow_mut().preallocating.take();
        if let Some(p) = preallocating {
            p.wait_for(1).await;
        }
        if let Some(e) = self.error() {
            return Err(e);
        }
        Ok(self.position())
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

    /// Submits the full current buffer; the next buffer starts empty right after it.
    fn submit_buffer(self: &Rc<Self>) {
        let (buf, pos, len) = {
            let mut s = self.state.borrow_mut();
            let Some(buf) = s.buf.take() else { return };
            let (pos, len) = (s.buf_pos, s.buf_len);
            s.buf_pos += len as u64;
            s.buf_len = 0;
            (buf, pos, len)
        };
        self.submit(buf, pos, len);
    }

    /// Submits what the current buffer holds, its last page padded with zeros, and carries that
    /// partial page over into a fresh buffer. Returns the logical end the write covers.
    fn submit_partial(self: &Rc<Self>) -> u64 {
        let (buf, pos, len) = {
            let mut s = self.state.borrow_mut();
            let (pos, len) = (s.buf_pos, s.buf_len);
            if len == 0 {
                return pos;
            }
            let Some(mut buf) = s.buf.take() else {
                return pos;
            };
            let padded = align_up(len as u64) as usize;
            buf.as_bytes_mut()[len..padded].fill(0);
            let keep_from = align_down(len as u64) as usize;
            let tail_len = len - keep_from;
            let mut next = self.file.alloc(self.limits.buffer_bytes);
            next.as_bytes_mut()[..tail_len].copy_from_slice(&buf.as_bytes()[keep_from..len]);
            s.buf = Some(next);
            s.buf_pos = pos + keep_from as u64;
            s.buf_len = tail_len;
            (buf, pos, len)
        };
        self.submit(buf, pos, len);
        pos + len as u64
    }

    /// Starts writing `len` logical bytes of `buf` at `pos` (padded to the alignment).
    fn submit(self: &Rc<Self>, buf: WriteBuf, pos: u64, len: usize) {
        let padded = align_up(len as u64);
        let done = Rc::new(Watermark::new(0));
        let (depends_on, preallocate) = {
            let mut s = self.state.borrow_mut();
            let depends_on = match &s.last_write {
                Some((prev_end, prev_done)) if *prev_end > pos => Some(prev_done.clone()),
                _ => None,
            };
            s.last_write = Some((pos + padded, done.clone()));
            s.in_flight.push_back(InFlight {
                end: pos + len as u64,
                done: done.clone(),
            });
            let preallocate = if self.limits.preallocate_bytes > 0
                && pos + padded > s.preallocated
                && s.preallocating.is_none()
            {
                s.preallocated = pos + padded + self.limits.preallocate_bytes;
                let flag = Rc::new(Watermark::new(0));
                s.preallocating = Some(flag.clone());
                Some((s.preallocated, flag))
            } else {
                None
            };
            (depends_on, preallocate)
        };
        if let Some((size, flag)) = preallocate {
            let this = self.clone();
            glommio::spawn_local(async move {
                // Best effort: writes past the reserved space still work, only slower.
                if let Err(e) = this.file.preallocate(size).await {
                    tracing::debug!(error = %e, "preallocation failed");
                }
                flag.advance(1);
                let mut s = this.state.borrow_mut();
                if s.preallocating
                    .as_ref()
                    .is_some_and(|f| Rc::ptr_eq(f, &flag))
                {
                    s.preallocating = None;
                }
            })
            .detach();
        }
        let this = self.clone();
        glommio::spawn_local(async move {
            if let Some(prev) = depends_on {
                prev.wait_for(1).await;
            }
            let result = this.file.write_at(buf, padded as usize, pos).await;
            done.advance(1);
            this.complete(result);
        })
        .detach();
    }

    /// Records completed writes: the written watermarks advance over the completed prefix.
    fn complete(&self, result: Result<(), IoFailure>) {
        let mut s = self.state.borrow_mut();
        if let Err(e) = result {
            tracing::error!(error = %e, "segment write failed: the log is offline");
            s.error.get_or_insert(e);
            drop(s);
            self.written_bytes.close();
            self.written_offset.close();
            return;
        }
        let mut written = None;
        while s.in_flight.front().is_some_and(|w| w.done.get() == 1) {
            written = s.in_flight.pop_front().map(|w| w.end);
        }
        let Some(written) = written else { return };
        let mut offset = None;
        while s
            .pending_marks
            .front()
            .is_some_and(|&(end, _)| end <= written)
        {
            offset = s.pending_marks.pop_front().map(|(_, next)| next);
        }
        drop(s);
        self.written_bytes.advance(written as i64);
        if let Some(offset) = offset {
            self.written_offset.advance(offset);
        }
    }
}
