//! Opening a log directory: finding its segments, trusting what a clean shutdown left, and
//! validating what an unclean stop may have torn.
//!
//! A start reads only the active (last) segment: sealed segments are known by their file size
//! and the next segment's base offset, and their indexes load on first use
//! ([`ShardStorage::load_sealed_segment`]), so a start costs per partition, not per byte kept.
//! After a clean shutdown (the marker file is there) the active segment's index files are
//! trusted and only the few batches after its last index entry are read, and nothing is written:
//! the marker stays until something is about to change the log's files ([`Log::leave_clean`];
//! before an append, [`Log::leave_clean_to_append`]),
//! so a log untouched until the next clean stop costs that stop nothing. After an unclean stop
//! it is read whole, batch by batch with CRCs, and cut at the first batch that is torn, corrupt,
//! or out of sequence. Sealed segments were synced with their indexes when they were sealed;
//! one whose index files are missing or do not hold together is read whole when first used and
//! its indexes are rebuilt.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use crate::fifo_lock::FifoLock;

use crate::background::LogSlot;
use crate::config::LogConfig;
use crate::epochs::LeaderEpochs;
use crate::error::{IoFailure, LogError};
use crate::file::{self, SegmentFile};
use crate::index::{OffsetIndex, TimeIndex};
use crate::log::{Log, ShardStorage, State, now_ms};
use crate::segment::{self, Segment};
use crate::start_offset::StartOffset;
use crate::watermark::Watermark;
use crate::writer::{SegmentWriter, WrittenOffsets};

/// Written by a clean close once the active segment and its index files are synced; removed
/// before anything changes them again. Its presence means no recovery is needed.
pub const CLEAN_SHUTDOWN_FILE: &str = "clean-shutdown";

/// Where a log's clean-shutdown marker is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CleanMarker {
    /// On disk and true: nothing changed the log's files since the clean close that wrote it.
    Present,
    /// Removed, but not durably: a power cut may bring it back. Only appends have happened since
    /// (see [`Log::leave_clean_to_append`]), which a returning marker cannot misrepresent.
    Unlinked,
    /// Removed durably, or never there.
    Gone,
}

/// The marker's file while it says nothing (a log changed since its last clean close): renamed
/// back into the marker by the next clean close. Taken off and put back by renames rather than
/// unlinked and created again, so that a stop and a start allocate and free no inode per log:
/// on ext4 without a journal each new inode is checked against the deletion times of the free
/// ones, and a clean stop of 10,000 logs after a start had unlinked their markers took 11 s
/// instead of 5 (docs/benchmarks.md, 2026-12-07, sixth session).
pub const RETIRED_MARKER_FILE: &str = "clean-shutdown.retired";

/// Takes the clean-shutdown marker of the log in `dir` off (renamed to [`RETIRED_MARKER_FILE`]),
/// if it is there. Not synced: callers that need it durable sync the directory after it.
fn retire_marker(dir: &Path) -> Result<(), IoFailure> {
    let marker = dir.join(CLEAN_SHUTDOWN_FILE);
    match std::fs::rename(&marker, dir.join(RETIRED_MARKER_FILE)) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(IoFailure::new("retiring", &marker, &e)),
    }
}

impl Log {
    /// To be called before anything but an append changes the log's files (a roll, truncation,
    /// deleted segments, a saved checkpoint): the clean-shutdown marker of the last clean close
    /// stops being true then, so it goes first, and durably: a marker that came back after a
    /// power cut would vouch for index files the change then rewrote in place. One directory
    /// sync per log, at its first such change after a clean open (or after appends).
    pub(crate) async fn leave_clean(&self) -> Result<(), IoFailure> {
        let marker = self.clean_marker.get();
        if marker != CleanMarker::Gone {
            if marker == CleanMarker::Present {
                retire_marker(&self.dir)?;
            }
            // Boxed: rare, and an inline directory sync made the futures that await this
            // half a kilobyte larger.
            Box::pin(file::sync_dir(&self.dir)).await?;
            // Only now: a concurrent change must not go ahead of the sync.
            self.clean_marker.set(CleanMarker::Gone);
        }
        Ok(())
    }

    /// [`Self::leave_clean`] before an append: the marker is removed, not synced away. An append
    /// adds bytes after the end the marker's index files describe (the tail page it rewrites
    /// keeps its bytes) and no index file changes until the next close or roll, so a marker
    /// that came back after a power cut vouches only for what is still true: a start trusts
    /// the index files and reads every batch after their last entry with CRCs, appended ones
    /// included, and cuts at the first that does not hold, as after any unclean stop. Removed
    /// at all so that a start after a crash syncs what the appends left in the page cache
    /// before calling it durable. A directory sync per log here cost a start at 10,000
    /// partitions 3.7 s before every partition took its first record (docs/benchmarks.md).
    pub(crate) fn leave_clean_to_append(&self) -> Result<(), IoFailure> {
        if self.clean_marker.get() == CleanMarker::Present {
            retire_marker(&self.dir)?;
            self.clean_marker.set(CleanMarker::Unlinked);
        }
        Ok(())
    }

    /// Whether the files are as the last clean close left them, marker included: closing the
    /// log again has nothing to write.
    pub(crate) fn is_clean_on_disk(&self) -> bool {
        self.clean_marker.get() == CleanMarker::Present
    }

    /// Writes the clean-shutdown marker, once everything it vouches for is synced. The marker
    /// itself is not synced: losing it to a power cut costs a full recovery, nothing more.
    pub(crate) fn write_clean_marker(&self) -> Result<(), IoFailure> {
        let marker = self.dir.join(CLEAN_SHUTDOWN_FILE);
        match std::fs::rename(self.dir.join(RETIRED_MARKER_FILE), &marker) {
            Ok(()) => {}
            // A log's first clean close.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                std::fs::File::create(&marker)
                    .map_err(|e| IoFailure::new("creating", &marker, &e))?;
            }
            Err(e) => return Err(IoFailure::new("putting back", &marker, &e)),
        }
        self.clean_marker.set(CleanMarker::Present);
        Ok(())
    }
}

impl ShardStorage {
    /// Opens (or creates) the log in `dir`, recovering it if it was not closed cleanly. The log
    /// must be ended with [`Log::close`] or [`Log::delete`].
    pub async fn open_log(
        self: &Rc<Self>,
        dir: &Path,
        config: LogConfig,
    ) -> Result<Rc<Log>, LogError> {
        let config = config.clamped();
        // glommio opens files relative to no directory (openat(-1)): paths must be absolute.
        // Made so without resolving links: resolving every log's path (three readlink(2)s) and
        // creating its directory when it exists (a mkdir(2) and a statx(2)) were a third of
        // the system calls a start made at 10,000 partitions, each walking the whole path.
        let dir = &std::path::absolute(dir).map_err(|e| IoFailure::new("resolving", dir, &e))?;
        let Listing {
            bases,
            clean_marker: clean,
        } = list_log_dir(dir)?;
        // Whether the files still are as the marker says: a repair at open removes it first.
        let mut clean_on_disk = clean;
        let mut segments = BTreeMap::new();
        for (i, &base) in bases.iter().enumerate() {
            let last = i + 1 == bases.len();
            let next_base = bases.get(i + 1).copied();
            let (segment, repaired) = self
                .open_segment(dir, base, last, clean, next_base, &config)
                .await?;
            clean_on_disk &= !repaired;
            segments.insert(base, segment);
        }
        if segments.is_empty() {
            if clean {
                retire_marker(dir)?;
            }
            clean_on_disk = false;
            let path = segment::log_path(dir, 0);
            let file = SegmentFile::open(&path, self.io_mode, true).await?;
            file::sync_dir(dir).await?;
            segments.insert(0, Segment::new(0, Rc::new(file), now_ms()));
        }
        let active = segments
            .values()
            .next_back()
            .expect("a log has at least one segment");
        let end = active.next_offset;
        let tail = active.read_tail().await?;
        if !clean_on_disk {
            // What recovery read may sit only in the page cache (or the device's): make it
            // durable before saying so. After a clean close it was synced before the marker.
            active.file.fdatasync().await?;
        }
        let offsets = WrittenOffsets {
            written: Rc::new(Watermark::new(end)),
            filed: Rc::new(Watermark::new(end)),
        };
        let writer = Rc::new(SegmentWriter::new(
            active.file.clone(),
            active.size_bytes,
            &tail,
            active.size_bytes,
            self.writer_limits(),
            offsets.clone(),
        ));
        let start = StartOffset::load(dir).await?;
        let first_base = segments.keys().next().copied().unwrap_or(0);
        let (epochs, epochs_changed) =
            LeaderEpochs::recover(dir, &segments, first_base.max(start.get()), end).await?;
        if epochs_changed {
            retire_marker(dir)?;
            clean_on_disk = false;
            epochs.save(dir).await?;
        }
        let log = Rc::new_cyclic(|me| Log {
            me: me.clone(),
            slot: LogSlot::default(),
            dir: dir.to_path_buf(),
            shard: self.clone(),
            config: RefCell::new(config),
            append_lock: FifoLock::new(),
            state: RefCell::new(State {
                segments,
                writer,
                error: None,
                unsynced_messages: 0,
                unsynced_since_ms: None,
                generation: 0,
                start_while_cut: None,
            }),
            cache_key: self.cache.register(offsets.filed.clone()),
            end_offset: Watermark::new(end),
            written_offset: offsets.written,
            filed_offset: offsets.filed,
            durable_offset: Watermark::new(end),
            sync_wanted: Watermark::new(end),
            closed: Cell::new(false),
            clean_marker: Cell::new(if clean_on_disk {
                CleanMarker::Present
            } else {
                CleanMarker::Gone
            }),
            readahead: RefCell::new(None),
            start,
            epochs: RefCell::new(epochs),
        });
        tracing::debug!(
            log = %dir.display(),
            clean,
            clean_on_disk,
            log_start_offset = log.log_start_offset(),
            log_end_offset = end,
            "log opened"
        );
        Ok(log)
    }

    async fn open_segment(
        &self,
        dir: &Path,
        base: i64,
        last: bool,
        clean: bool,
        next_base: Option<i64>,
        config: &LogConfig,
    ) -> Result<(Segment, bool), LogError> {
        let path = segment::log_path(dir, base);
        let file = Rc::new(SegmentFile::open(&path, self.io_mode, false).await?);
        let file_bytes = file.size().await?;
        match next_base {
            Some(next) if !last => Ok((Segment::sealed(base, file, file_bytes, next), false)),
            _ => {
                self.read_segment(dir, base, file, file_bytes, last, clean, next_base, config)
                    .await
            }
        }
    }

    /// Reads the indexes of a sealed segment that is not in memory (on first use): from its
    /// index files, or rebuilt from the segment if they are missing or do not hold together.
    pub(crate) async fn load_sealed_segment(
        &self,
        dir: &Path,
        sealed: &Segment,
        config: &LogConfig,
    ) -> Result<Segment, LogError> {
        let (segment, _) = self
            .read_segment(
                dir,
                sealed.base_offset,
                sealed.file.clone(),
                sealed.size_bytes,
                false,
                true,
                Some(sealed.next_offset),
                config,
            )
            .await?;
        Ok(segment)
    }

    /// A segment read from disk with its indexes: the active one at open, a sealed one when
    /// first used. `trust_indexes`: the index files were saved by a clean close or a seal.
    /// Also whether the active segment had to be repaired (cut, or its indexes rebuilt): its
    /// files then are no longer what a clean close left, and the marker is removed first.
    #[allow(clippy::too_many_arguments)] // one private helper of the two callers above
    async fn read_segment(
        &self,
        dir: &Path,
        base: i64,
        file: Rc<SegmentFile>,
        file_bytes: u64,
        last: bool,
        trust_indexes: bool,
        next_base: Option<i64>,
        config: &LogConfig,
    ) -> Result<(Segment, bool), LogError> {
        let path = segment::log_path(dir, base);
        let mut segment = Segment::new(base, file, now_ms());
        let trusted = if !trust_indexes {
            None
        } else {
            self.load_indexes(dir, base, file_bytes).await
        };
        let batch_bytes_max = LogConfig::SEGMENT_BYTES_LIMIT as usize;
        let mut rebuilt = trusted.is_none();
        let mut outcome = match trusted {
            Some((offsets, times)) => {
                segment
                    .adopt_indexes(
                        offsets,
                        times,
                        file_bytes,
                        config.index_interval_bytes,
                        batch_bytes_max,
                    )
                    .await?
            }
            None => {
                segment
                    .scan(
                        file_bytes,
                        config.index_interval_bytes,
                        batch_bytes_max,
                        i64::MAX,
                    )
                    .await?
            }
        };
        if !rebuilt && outcome.invalid.is_some() {
            // The indexes said where whole batches end, and what follows there does not hold:
            // the file is damaged, or the index lies (an entry at a wrong offset or position).
            // Read the file whole, as if they were missing: a lying index must not choose where
            // the log is cut, nor what its next offset is.
            tracing::warn!(
                segment = %path.display(),
                "the indexes do not hold with the segment; rebuilding them"
            );
            segment = Segment::new(base, segment.file.clone(), now_ms());
            outcome = segment
                .scan(
                    file_bytes,
                    config.index_interval_bytes,
                    batch_bytes_max,
                    i64::MAX,
                )
                .await?;
            rebuilt = true;
        }
        let repaired = last && (rebuilt || outcome.invalid.is_some());
        if repaired && trust_indexes {
            retire_marker(dir)?;
        }
        if let Some(reason) = &outcome.invalid {
            if last {
                if outcome.unwritten {
                    // What every unclean stop leaves (one line per log would be thousands).
                    tracing::debug!(
                        segment = %path.display(),
                        log_end_offset = segment.next_offset,
                        cut_bytes = outcome.trailing_bytes,
                        "recovery gave back the space reserved after the last batch"
                    );
                } else {
                    tracing::warn!(
                        segment = %path.display(),
                        log_end_offset = segment.next_offset,
                        cut_bytes = outcome.trailing_bytes,
                        reason = %reason,
                        "recovery cut the log after its last whole, valid batch"
                    );
                }
                segment.file.truncate(segment.size_bytes).await?;
            } else {
                // A sealed segment was synced whole when it was sealed: damage here is
                // corruption, not a torn write. Keep every byte (reads report the bad batch),
                // and never cut the segments after it.
                tracing::error!(
                    segment = %path.display(),
                    position = segment.size_bytes,
                    reason = %reason,
                    "sealed segment is damaged; reads of the damaged part will fail"
                );
                segment.size_bytes = file_bytes;
                segment.next_offset = next_base.unwrap_or(segment.next_offset);
            }
        } else if let Some(next) = next_base
            && segment.next_offset != next
        {
            tracing::error!(
                segment = %path.display(),
                ends_at = segment.next_offset,
                next_segment = next,
                "offsets are not dense across segments"
            );
            // The next segment was started at the log's end: offsets from its base on are its
            // own, and what this one holds there is stale. Reads stop at this segment's end.
            segment.next_offset = segment.next_offset.min(next);
        }
        if !last && rebuilt {
            segment.seal_time_index();
            file::write_file_atomic(
                &segment::offset_index_path(dir, base),
                &segment.offset_index.encode(),
            )
            .await?;
            file::write_file_atomic(
                &segment::time_index_path(dir, base),
                &segment.time_index.encode(),
            )
            .await?;
            tracing::info!(segment = %path.display(), "rebuilt the indexes of a sealed segment");
        }
        Ok((segment, repaired))
    }

    /// Index files of a segment, if both exist and hold together with the segment.
    async fn load_indexes(
        &self,
        dir: &Path,
        base: i64,
        file_bytes: u64,
    ) -> Option<(OffsetIndex, TimeIndex)> {
        let offsets_path = segment::offset_index_path(dir, base);
        let times_path = segment::time_index_path(dir, base);
        // An entry per batch at most, and a batch is larger than an entry.
        let offsets = file::read_file(&offsets_path, file_bytes).await.ok()??;
        let times = file::read_file(&times_path, file_bytes).await.ok()??;
        let offsets = match OffsetIndex::decode(&offsets, file_bytes) {
            Ok(i) => i,
            Err(e) => {
                tracing::warn!(index = %offsets_path.display(), error = %e, "rebuilding index");
                return None;
            }
        };
        let relative_max = u32::try_from(file_bytes).unwrap_or(u32::MAX);
        match TimeIndex::decode(&times, relative_max) {
            Ok(times) => Some((offsets, times)),
            Err(e) => {
                tracing::warn!(index = %times_path.display(), error = %e, "rebuilding index");
                None
            }
        }
    }
}

/// What a log's directory holds, as opening the log needs to know it.
#[derive(Debug, Default)]
struct Listing {
    /// The segments' base offsets, in order.
    bases: Vec<i64>,
    /// Whether the clean-shutdown marker is there: read from the listing, not asked for with a
    /// system call of its own (one more walk of the log's path at every start).
    clean_marker: bool,
}

/// Lists a log's directory, made (empty) if it is not there, and removes what a crash left
/// half-done (temporary files, indexes of segments that are gone).
fn list_log_dir(dir: &Path) -> Result<Listing, LogError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(|e| IoFailure::new("creating", dir, &e))?;
            return Ok(Listing::default());
        }
        Err(e) => return Err(IoFailure::new("listing", dir, &e).into()),
    };
    let mut bases = Vec::new();
    let mut others = Vec::new();
    let mut clean_marker = false;
    for entry in entries {
        let entry = entry.map_err(|e| IoFailure::new("listing", dir, &e))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        match segment::parse_log_name(&name) {
            Some(base) => bases.push(base),
            None if name == CLEAN_SHUTDOWN_FILE => clean_marker = true,
            None if name == RETIRED_MARKER_FILE => {}
            None => others.push(name),
        }
    }
    bases.sort_unstable();
    for name in others {
        let stem = name.split('.').next().unwrap_or("");
        let orphan_index = (name.ends_with(".index") || name.ends_with(".timeindex"))
            && !stem
                .parse::<i64>()
                .is_ok_and(|b| bases.binary_search(&b).is_ok());
        if name.ends_with(".tmp") || orphan_index {
            let path = dir.join(&name);
            std::fs::remove_file(&path).map_err(|e| IoFailure::new("removing", &path, &e))?;
        } else {
            tracing::debug!(file = %name, "ignoring unknown file in log directory");
        }
    }
    Ok(Listing {
        bases,
        clean_marker,
    })
}
