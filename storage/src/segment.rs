//! One segment: a `.log` file of whole batches starting at `base_offset`, and its two sparse
//! indexes. Reading batches back from the file and validating a file (recovery) live here.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::Bytes;

use crate::batch::{self, BatchHeader, HEADER_BYTES};
use crate::error::{IoFailure, ReadError};
use crate::file::SegmentFile;
use crate::index::{OffsetEntry, OffsetIndex, TimeEntry, TimeIndex};
use crate::index_budget::IndexLoad;

/// Scans read the file in pieces of this size.
const SCAN_CHUNK_BYTES: usize = 1 << 20;

/// A scan's next read with `left` bytes of the file to go: a chunk, or less at the end. Never
/// more than is left: a direct read past the end makes the kernel zero the rest of the buffer,
/// which cost every log a 1 MiB memset at start-up (40% of a 10,000-partition start).
fn scan_read_bytes(left: u64) -> usize {
    usize::try_from(left).map_or(SCAN_CHUNK_BYTES, |left| left.min(SCAN_CHUNK_BYTES))
}

pub fn log_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.log"))
}

pub fn offset_index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.index"))
}

pub fn time_index_path(dir: &Path, base_offset: i64) -> PathBuf {
    dir.join(format!("{base_offset:020}.timeindex"))
}

/// The base offset a segment file name stands for, if it is one (`%020d.log`).
pub fn parse_log_name(name: &str) -> Option<i64> {
    let digits = name.strip_suffix(".log")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

#[derive(Debug)]
pub struct Segment {
    pub base_offset: i64,
    pub file: Rc<SegmentFile>,
    /// Bytes of whole, valid batches.
    pub size_bytes: u64,
    /// The offset after the segment's last batch (`base_offset` when empty).
    pub next_offset: i64,
    pub max_timestamp_ms: i64,
    offset_of_max_timestamp: i64,
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    /// Where the indexes (and the newest timestamp, which comes from the time index) are. The
    /// active segment's are always in memory; a sealed one's load on first use and may be
    /// dropped again under the shard's index budget, so a start reads none of them.
    pub indexes: Indexes,
    bytes_since_index_entry: u64,
    /// Wall-clock time the segment started taking appends, for `segment.ms`.
    pub created_ms: u64,
}

/// Where a segment's indexes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Indexes {
    /// In memory, built as batches are appended (the active segment's, or one just recovered):
    /// not counted in the shard's index budget.
    Building,
    /// In memory, counted in the shard's index budget as this load. Only that load's leaving
    /// the budget drops them: an older count of the same segment (sealed, made active again by
    /// a truncation, sealed again) must not drop what a later load brought in.
    Loaded(IndexLoad),
    /// On disk only: they load on first use.
    OnDisk,
}

impl Indexes {
    pub fn in_memory(self) -> bool {
        self != Indexes::OnDisk
    }
}

/// How a scan of a segment file ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Why the scan stopped before the end of the file, if it did.
    pub invalid: Option<String>,
    /// Bytes after the last valid batch.
    pub trailing_bytes: u64,
    /// The scan stopped at a header of zeros: space reserved ahead and never written, which
    /// any unclean stop leaves after the last write (not a torn or damaged batch).
    pub unwritten: bool,
}

impl Segment {
    pub fn new(base_offset: i64, file: Rc<SegmentFile>, created_ms: u64) -> Segment {
        Segment {
            base_offset,
            file,
            size_bytes: 0,
            next_offset: base_offset,
            max_timestamp_ms: i64::MIN,
            offset_of_max_timestamp: base_offset,
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            indexes: Indexes::Building,
            bytes_since_index_entry: 0,
            created_ms,
        }
    }

    /// A sealed segment whose indexes are not loaded: what a start knows without reading.
    /// Sealed segments were trimmed to their size and are followed by the next one's base.
    pub fn sealed(
        base_offset: i64,
        file: Rc<SegmentFile>,
        size_bytes: u64,
        next_offset: i64,
    ) -> Segment {
        let mut segment = Segment::new(base_offset, file, 0);
        segment.size_bytes = size_bytes;
        segment.next_offset = next_offset;
        segment.indexes = Indexes::OnDisk;
        segment
    }

    /// Takes the indexes (and newest timestamp) of `loaded`, the same segment read from disk,
    /// counted in the shard's index budget as `load`.
    pub fn take_index(&mut self, loaded: Segment, load: IndexLoad) {
        self.offset_index = loaded.offset_index;
        self.time_index = loaded.time_index;
        self.max_timestamp_ms = loaded.max_timestamp_ms;
        self.offset_of_max_timestamp = loaded.offset_of_max_timestamp;
        self.indexes = Indexes::Loaded(load);
    }

    /// Frees the memory of a sealed segment's indexes if they are still the ones the budget
    /// counted as `load` (not the active segment's, not a later load's); they load again on
    /// next use.
    pub fn drop_index(&mut self, load: IndexLoad) {
        if self.indexes != Indexes::Loaded(load) {
            return;
        }
        self.offset_index = OffsetIndex::default();
        self.time_index = TimeIndex::default();
        self.max_timestamp_ms = i64::MIN;
        self.offset_of_max_timestamp = self.base_offset;
        self.indexes = Indexes::OnDisk;
    }

    /// Memory the indexes take, in their file formats' sizes.
    pub fn index_bytes(&self) -> u64 {
        self.offset_index.bytes() + self.time_index.bytes()
    }

    pub fn is_empty(&self) -> bool {
        self.size_bytes == 0
    }

    fn relative(&self, offset: i64) -> u32 {
        u32::try_from(offset - self.base_offset).unwrap_or(u32::MAX)
    }

    /// Accounts for a batch written at the end of the segment: sizes, offsets, index entries.
    pub fn record(&mut self, header: &BatchHeader, index_interval_bytes: u64) {
        assert_eq!(
            header.base_offset, self.next_offset,
            "offsets in a segment are dense"
        );
        if self.bytes_since_index_entry >= index_interval_bytes {
            self.offset_index.push(OffsetEntry {
                relative_offset: self.relative(header.base_offset),
                position: self.size_bytes as u32,
            });
            self.time_index.push(TimeEntry {
                timestamp_ms: self.max_timestamp_ms,
                relative_offset: self.relative(self.offset_of_max_timestamp),
            });
            self.bytes_since_index_entry = 0;
        }
        if header.max_timestamp > self.max_timestamp_ms {
            self.max_timestamp_ms = header.max_timestamp;
            self.offset_of_max_timestamp = header.base_offset;
        }
        let size = header.size_bytes() as u64;
        self.size_bytes += size;
        self.bytes_since_index_entry += size;
        self.next_offset = header.next_offset();
    }

    /// Completes the time index so its last entry is the segment's newest timestamp (retention
    /// reads it from there after a restart).
    pub fn seal_time_index(&mut self) {
        if self.max_timestamp_ms != i64::MIN {
            self.time_index.push(TimeEntry {
                timestamp_ms: self.max_timestamp_ms,
                relative_offset: self.relative(self.offset_of_max_timestamp),
            });
        }
    }

    /// Adopts indexes read from files for a segment whose size is known; reads the batches
    /// after the last index entry to find the end offset and newest timestamp.
    pub async fn adopt_indexes(
        &mut self,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        size_bytes: u64,
        index_interval_bytes: u64,
        batch_bytes_max: usize,
    ) -> Result<ScanOutcome, IoFailure> {
        let start = offset_index.last().unwrap_or(OffsetEntry {
            relative_offset: 0,
            position: 0,
        });
        if let Some(t) = time_index.last() {
            self.max_timestamp_ms = t.timestamp_ms;
            self.offset_of_max_timestamp = self.base_offset + i64::from(t.relative_offset);
        }
        self.offset_index = offset_index;
        self.time_index = time_index;
        self.size_bytes = u64::from(start.position);
        self.next_offset = self.base_offset + i64::from(start.relative_offset);
        // The tail after the last entry is within one index interval plus one batch: cheap.
        self.bytes_since_index_entry = 0;
        self.scan(size_bytes, index_interval_bytes, batch_bytes_max, i64::MAX)
            .await
    }

    /// The last indexed batch boundary at or before file position `position`: (position, offset).
    pub fn boundary_at_or_before(&self, position: u64) -> (u64, i64) {
        let position = u32::try_from(position).unwrap_or(u32::MAX);
        self.offset_index
            .floor_position(position)
            .map_or((0, self.base_offset), |e| {
                (
                    u64::from(e.position),
                    self.base_offset + i64::from(e.relative_offset),
                )
            })
    }

    /// Where a read for `offset` starts: the index entry at or before it.
    pub fn start_position(&self, offset: i64) -> u64 {
        self.offset_index
            .floor(self.relative(offset))
            .map_or(0, |e| u64::from(e.position))
    }

    /// Moves the end of the segment back to the batch that holds `offset` (that batch and all
    /// after it are dropped), starting from the index entry before it.
    pub async fn rewind_to(
        &mut self,
        offset: i64,
        file_bytes: u64,
        index_interval_bytes: u64,
    ) -> Result<ScanOutcome, IoFailure> {
        let floor = self.offset_index.floor(self.relative(offset));
        let (relative, position) = floor.map_or((0, 0), |e| (e.relative_offset, e.position));
        let mut offsets = self.offset_index.clone();
        offsets.truncate_to_position(position);
        let mut times = self.time_index.clone();
        times.truncate_to_offset(relative);
        self.offset_index = offsets;
        self.time_index = times;
        match self.time_index.last() {
            Some(t) => {
                self.max_timestamp_ms = t.timestamp_ms;
                self.offset_of_max_timestamp = self.base_offset + i64::from(t.relative_offset);
            }
            None => {
                self.max_timestamp_ms = i64::MIN;
                self.offset_of_max_timestamp = self.base_offset;
            }
        }
        self.size_bytes = u64::from(position);
        self.next_offset = self.base_offset + i64::from(relative);
        self.bytes_since_index_entry = 0;
        self.scan(file_bytes, index_interval_bytes, usize::MAX, offset)
            .await
    }

    /// The bytes of the segment's last, partial page: a writer appending at the end rewrites
    /// that page, so it must start with them.
    pub async fn read_tail(&self) -> Result<Vec<u8>, IoFailure> {
        let page = crate::file::align_down(self.size_bytes);
        let len = (self.size_bytes - page) as usize;
        if len == 0 {
            return Ok(Vec::new());
        }
        let tail = self.file.read_at(page, len).await?;
        if tail.len() != len {
            return Err(IoFailure::new(
                "reading the tail of",
                self.file.path(),
                &std::io::Error::from(std::io::ErrorKind::UnexpectedEof),
            ));
        }
        Ok(tail)
    }

    /// Validates batches from the current end up to `file_bytes`, recording each; stops at the
    /// first that is torn, corrupt, or out of sequence, or that holds `stop_at` or later.
    pub async fn scan(
        &mut self,
        file_bytes: u64,
        index_interval_bytes: u64,
        batch_bytes_max: usize,
        stop_at: i64,
    ) -> Result<ScanOutcome, IoFailure> {
        let mut window = Vec::new();
        let mut window_pos = self.size_bytes;
        loop {
            let pos = self.size_bytes;
            let left = file_bytes - pos;
            if left == 0 {
                return Ok(ScanOutcome {
                    invalid: None,
                    trailing_bytes: 0,
                    unwritten: false,
                });
            }
            let stop = |reason: String| ScanOutcome {
                invalid: Some(reason),
                trailing_bytes: left,
                unwritten: false,
            };
            if left < HEADER_BYTES as u64 {
                return Ok(stop(format!(
                    "{left} trailing bytes, less than a batch header"
                )));
            }
            let mut at = (pos - window_pos) as usize;
            if window.len() < at + HEADER_BYTES {
                window = self.file.read_at(pos, scan_read_bytes(left)).await?;
                window_pos = pos;
                at = 0;
            }
            let header = match BatchHeader::parse(&window[at..]) {
                Ok(h) => h,
                Err(e) => {
                    let zeros = window
                        .get(at..at + HEADER_BYTES)
                        .is_some_and(|h| h.iter().all(|&b| b == 0));
                    return Ok(ScanOutcome {
                        unwritten: zeros,
                        ..stop(e.to_string())
                    });
                }
            };
            if header.last_offset() >= stop_at {
                return Ok(ScanOutcome {
                    invalid: None,
                    trailing_bytes: left,
                    unwritten: false,
                });
            }
            let size = header.size_bytes();
            if size as u64 > left || size > batch_bytes_max {
                return Ok(stop(format!(
                    "batch of {size} bytes at {pos} does not fit ({left} bytes left in the file)"
                )));
            }
            if window.len() < at + size {
                window = self
                    .file
                    .read_at(pos, size.max(scan_read_bytes(left)))
                    .await?;
                window_pos = pos;
                at = 0;
            }
            let header = match batch::validate(&window[at..], batch_bytes_max) {
                Ok(h) => h,
                Err(e) => return Ok(stop(format!("batch at {pos}: {e}"))),
            };
            if header.base_offset != self.next_offset {
                return Ok(stop(format!(
                    "batch at {pos} has offset {} where {} was expected",
                    header.base_offset, self.next_offset
                )));
            }
            self.record(&header, index_interval_bytes);
        }
    }

    /// (partitionLeaderEpoch, base offset) of each batch that carries another epoch than the
    /// batch before it, of the batches that end after `from` (the log start: batches wholly
    /// before it are deleted records, whatever their epochs), from the headers alone (the epoch
    /// is outside the CRC, so checking it would prove nothing about it). Stops at the first
    /// header that does not follow the one before (damage a read would report) or reaches past
    /// the segment's end.
    pub async fn batch_epochs(&self, from: i64) -> Result<Vec<(i32, i64)>, IoFailure> {
        let mut out: Vec<(i32, i64)> = Vec::new();
        if self.next_offset <= from {
            return Ok(out);
        }
        let mut window = Vec::new();
        let mut window_pos = 0u64;
        let mut pos = 0u64;
        let mut next_offset = self.base_offset;
        while pos + HEADER_BYTES as u64 <= self.size_bytes && next_offset < self.next_offset {
            let mut at = (pos - window_pos) as usize;
            if pos < window_pos || window.len() < at + HEADER_BYTES {
                window = self
                    .file
                    .read_at(pos, scan_read_bytes(self.size_bytes - pos))
                    .await?;
                window_pos = pos;
                at = 0;
            }
            let Ok(header) = BatchHeader::parse(&window[at..]) else {
                break;
            };
            let end = pos + header.size_bytes() as u64;
            if header.base_offset != next_offset || end > self.size_bytes {
                break;
            }
            let kept = header.next_offset() > from;
            if kept
                && out
                    .last()
                    .is_none_or(|&(e, _)| e != header.partition_leader_epoch)
            {
                out.push((header.partition_leader_epoch, header.base_offset));
            }
            next_offset = header.next_offset();
            pos = end;
        }
        Ok(out)
    }
}

/// What [`read_batches`] reads.
#[derive(Debug, Clone, Copy)]
pub struct ReadRange {
    /// File position to start parsing at: a batch boundary at or before `offset`.
    pub start: u64,
    pub offset: i64,
    pub max_bytes: usize,
    pub upper_bound: i64,
    /// The part of the file known to be written.
    pub readable_bytes: u64,
    pub read_bytes_max: usize,
}

/// Reads whole batches from a segment file, the first being the one that holds `offset`: at
/// least one, then more while they fit in `max_bytes`, none ending past `upper_bound` or reaching
/// past `readable_bytes`. Each batch is CRC-checked: a corrupt one is never served; it ends the
/// read, and is reported when it would be the first batch.
/// `prefetched`, if given, holds the file's bytes from `range.start` on (read ahead earlier).
pub async fn read_batches(
    file: &SegmentFile,
    range: ReadRange,
    prefetched: Option<Bytes>,
) -> Result<ReadBatches, ReadError> {
    let mut pos = range.start;
    let mut window = ReadWindow {
        bytes: prefetched.unwrap_or_default(),
        pos,
    };
    let mut out = Vec::new();
    let mut total = 0usize;
    // The offset the next batch served must reach: in a damaged sealed segment (kept whole by
    // recovery) a batch may go back to offsets already served, and is skipped like any batch
    // before the one asked for.
    let mut wanted = range.offset;
    let corrupt = |position: u64, source| ReadError::Corrupt {
        path: file.path().to_path_buf(),
        position,
        source,
    };
    loop {
        let done = |batches| ReadBatches { batches, end: pos };
        if pos + HEADER_BYTES as u64 > range.readable_bytes {
            return Ok(done(out));
        }
        // Read a little past max_bytes: the index makes us start up to an interval early.
        let ahead = range
            .max_bytes
            .saturating_sub(total)
            .saturating_add(64 << 10)
            .min(range.read_bytes_max) as u64;
        let read_len = |needed: usize| (needed as u64).max(ahead).min(range.readable_bytes - pos);
        let header = match window
            .cover(file, pos, HEADER_BYTES, read_len(HEADER_BYTES))
            .await
            .and_then(|bytes| BatchHeader::parse(bytes).map_err(|e| corrupt(pos, e)))
        {
            Ok(header) => header,
            Err(e) => return served_before(out, pos, e),
        };
        let size = header.size_bytes();
        if pos + size as u64 > range.readable_bytes {
            // Not all written yet: the rest is served from the cache.
            return Ok(done(out));
        }
        if header.last_offset() < wanted {
            pos += size as u64;
            continue;
        }
        if header.next_offset() > range.upper_bound
            || (!out.is_empty() && total + size > range.max_bytes)
        {
            return Ok(done(out));
        }
        if let Err(e) = window.cover(file, pos, size, read_len(size)).await {
            return served_before(out, pos, e);
        }
        let bytes = window.slice(pos, size);
        if let Err(e) = batch::validate(&bytes, usize::MAX) {
            return served_before(out, pos, corrupt(pos, e));
        }
        out.push(bytes);
        wanted = header.next_offset();
        total += size;
        pos += size as u64;
    }
}

/// How a read that meets a corrupt batch at `pos` ends: with the batches before it, if there
/// are any (the next read starts at the corrupt one, and reports it), else with the error. A
/// read must not drop good batches for a bad one after them: what it served would then depend
/// on how far it was allowed to read (the log's end), and a recovered log would serve less
/// after an append than before.
fn served_before(
    batches: Vec<Bytes>,
    pos: u64,
    error: ReadError,
) -> Result<ReadBatches, ReadError> {
    match error {
        ReadError::Corrupt { .. } if !batches.is_empty() => Ok(ReadBatches { batches, end: pos }),
        error => Err(error),
    }
}

/// What [`read_batches`] found.
#[derive(Debug)]
pub struct ReadBatches {
    pub batches: Vec<Bytes>,
    /// The file position after the last batch returned (where a sequential read goes on).
    pub end: u64,
}

/// The bytes of a file most recently read, and where they start.
struct ReadWindow {
    bytes: Bytes,
    pos: u64,
}

impl ReadWindow {
    /// Makes the window hold `[pos, pos + needed)`, reading `read_len` bytes when it must.
    async fn cover(
        &mut self,
        file: &SegmentFile,
        pos: u64,
        needed: usize,
        read_len: u64,
    ) -> Result<&[u8], ReadError> {
        let end = pos + needed as u64;
        if pos < self.pos || end > self.pos + self.bytes.len() as u64 {
            self.bytes = Bytes::from(
                file.read_at(pos, read_len as usize)
                    .await
                    .map_err(ReadError::Storage)?,
            );
            self.pos = pos;
            if self.bytes.len() < needed {
                return Err(ReadError::Corrupt {
                    path: file.path().to_path_buf(),
                    position: pos,
                    source: batch::BatchError::Truncated {
                        needed,
                        available: self.bytes.len(),
                    },
                });
            }
        }
        let at = (pos - self.pos) as usize;
        Ok(&self.bytes[at..at + needed])
    }

    fn slice(&self, pos: u64, len: usize) -> Bytes {
        let at = (pos - self.pos) as usize;
        self.bytes.slice(at..at + len)
    }
}
