//! The log's leader epochs (Kafka's KIP-101 leader epoch cache): where the batches of each
//! leader epoch start, so a replica that becomes a follower can ask its new leader where its own
//! latest epoch ends there and truncate to that (never to its high watermark).
//!
//! Kept in `leader-epoch-checkpoint` beside the segments, in Kafka's text format
//! (`0\n<count>\n<epoch> <start_offset>\n...`), replaced atomically (`file::write_file_atomic`).
//! The rules that keep it true of the batches' `partitionLeaderEpoch` headers:
//! - An entry is added when a batch with a newer epoch is appended (the leader's `append`, a
//!   follower's `append_replicated`), and the file is saved, synced, *before* that batch goes
//!   to the writer: after a crash the file may name an epoch whose batch never reached the disk,
//!   never miss one that did.
//! - Truncation drops the entries whose batches went; deleting old segments (retention,
//!   DeleteRecords) moves the first kept entry's start up to the new log start (as Kafka), and
//!   drops it if no batch is left (unlike Kafka, whose leader keeps an entry for its current
//!   epoch even in an empty log: here an entry always has batches).
//! - Opening a log drops entries at or past its recovered end and below its start; a log
//!   directory without the file (or with one that does not hold together) gets it rebuilt from
//!   its batches' headers.
//!
//! Invariants of [`LeaderEpochs`]: epochs and start offsets both strictly grow, epochs are not
//! negative (-1 is Kafka's "no epoch": such batches are never recorded), and each entry's
//! epoch is that of the batches from its start to the next entry's (the log's end for the
//! last), so the first batch of each has the entry's epoch in its header.

use std::collections::BTreeMap;
use std::path::Path;

use crate::error::IoFailure;
use crate::file;
use crate::log::Log;
use crate::segment::Segment;

/// The checkpoint's file name, as Kafka names it.
pub const CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// The only version of the format (Kafka's `CheckpointFile` version 0).
const VERSION: u32 = 0;
/// A checkpoint larger than this is not read (a line per leader change: real ones are tiny);
/// the log rebuilds it from its batches instead.
const CHECKPOINT_BYTES_MAX: u64 = 1 << 20;

/// Where the batches of one leader epoch start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

/// The epochs of one log, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LeaderEpochs {
    entries: Vec<EpochEntry>,
}

/// Why a checkpoint file was not taken (it is then rebuilt from the log's batches).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CheckpointError {
    #[error("not text")]
    NotText,
    #[error("line {line}: {what}")]
    BadLine { line: usize, what: &'static str },
    #[error("{found} entries where the header says {expected}")]
    WrongCount { expected: usize, found: usize },
}

/// Why a batch's epoch cannot be appended after the log's latest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EpochCheck {
    /// The same epoch as the latest entry's: nothing to record.
    Same,
    /// Newer than every entry (or the log has none): a new entry.
    New,
    /// Older than the latest entry's, which is given.
    WentBack(i32),
    /// Negative: no epoch at all.
    Missing,
}

impl LeaderEpochs {
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest(&self) -> Option<EpochEntry> {
        self.entries.last().copied()
    }

    /// Whether a batch of `epoch` may follow the latest entry, and whether it starts one.
    pub fn check(&self, epoch: i32) -> EpochCheck {
        match self.latest() {
            _ if epoch < 0 => EpochCheck::Missing,
            None => EpochCheck::New,
            Some(latest) if epoch > latest.epoch => EpochCheck::New,
            Some(latest) if epoch == latest.epoch => EpochCheck::Same,
            Some(latest) => EpochCheck::WentBack(latest.epoch),
        }
    }

    /// Adds an entry after the latest one. The caller checked it with [`Self::check`].
    pub fn push(&mut self, entry: EpochEntry) {
        if let Some(latest) = self.latest() {
            assert!(
                entry.epoch > latest.epoch && entry.start_offset > latest.start_offset,
                "leader epochs and their start offsets grow: {entry:?} after {latest:?}"
            );
        }
        assert!(entry.epoch >= 0, "a recorded epoch is not negative");
        self.entries.push(entry);
    }

    /// Records a batch of `epoch` at `base_offset` as read from the log (a rebuild): only an
    /// epoch newer than the latest starts an entry, as Kafka's recovery does.
    fn observe(&mut self, epoch: i32, base_offset: i64) {
        let grows = self
            .latest()
            .is_none_or(|l| epoch > l.epoch && base_offset > l.start_offset);
        if epoch >= 0 && grows {
            self.entries.push(EpochEntry {
                epoch,
                start_offset: base_offset,
            });
        }
    }

    /// Kafka's OffsetsForLeaderEpoch: the largest epoch at most `epoch` and where the epoch
    /// after it starts (`log_end_offset` when it is the latest). `None` when every epoch is
    /// newer than `epoch`, or there is none. (Kafka answers that case with the asked epoch and
    /// the first entry's start; a follower truncates the same either way, as it holds nothing
    /// of an epoch that old that the leader kept.)
    pub fn end_offset_for(&self, epoch: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let after = self.entries.partition_point(|e| e.epoch <= epoch);
        let found = self.entries.get(after.checked_sub(1)?)?;
        let end = self
            .entries
            .get(after)
            .map_or(log_end_offset, |next| next.start_offset);
        Some((found.epoch, end))
    }

    /// Drops the entries starting at or after `end` (the log's new end). Whether any went.
    pub fn truncate_from_end(&mut self, end: i64) -> bool {
        let keep = self.entries.partition_point(|e| e.start_offset < end);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// Drops the entries wholly below `start` (the log's new start) and moves the first kept
    /// one's start up to it. Whether anything changed.
    pub fn truncate_from_start(&mut self, start: i64) -> bool {
        // The entry that holds `start` is the last one starting at or before it.
        let holding = self.entries.partition_point(|e| e.start_offset <= start);
        let Some(first) = holding.checked_sub(1) else {
            return false;
        };
        let moved = self.entries[first].start_offset != start;
        self.entries[first].start_offset = start;
        self.entries.drain(..first);
        moved || first > 0
    }

    /// Keeps the entries within a log of offsets `[start, end)`: every entry has a batch in
    /// the log (an empty log has none), the first starts no lower than the log. Whether anything
    /// changed.
    pub fn keep_within(&mut self, start: i64, end: i64) -> bool {
        // (Both: a start moved up to the end leaves an entry with no batch.)
        self.truncate_from_start(start) | self.truncate_from_end(end)
    }

    /// The file's content.
    pub fn encode(&self) -> String {
        let mut out = format!("{VERSION}\n{}\n", self.entries.len());
        for e in &self.entries {
            out.push_str(&format!("{} {}\n", e.epoch, e.start_offset));
        }
        out
    }

    /// Reads a checkpoint file's content; anything that does not hold together (another
    /// version, a count that is not the lines', numbers out of range, entries that do not grow)
    /// is refused.
    pub fn decode(bytes: &[u8]) -> Result<LeaderEpochs, CheckpointError> {
        let text = std::str::from_utf8(bytes).map_err(|_| CheckpointError::NotText)?;
        let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
        let bad = |line, what| CheckpointError::BadLine { line, what };
        let (n, version) = lines.next().ok_or(bad(1, "missing version"))?;
        if version.trim().parse::<u32>() != Ok(VERSION) {
            return Err(bad(n, "not version 0"));
        }
        let (n, count) = lines.next().ok_or(bad(2, "missing entry count"))?;
        let expected: usize = count.trim().parse().map_err(|_| bad(n, "not a count"))?;
        let mut epochs = LeaderEpochs::default();
        for (n, line) in lines {
            let mut fields = line.split_whitespace();
            let (Some(epoch), Some(start), None) = (fields.next(), fields.next(), fields.next())
            else {
                return Err(bad(n, "not two fields"));
            };
            let epoch: i32 = epoch.parse().map_err(|_| bad(n, "not an epoch"))?;
            let start_offset: i64 = start.parse().map_err(|_| bad(n, "not an offset"))?;
            let grows = epochs
                .latest()
                .is_none_or(|l| epoch > l.epoch && start_offset > l.start_offset);
            if epoch < 0 || start_offset < 0 || !grows {
                return Err(bad(n, "entries must be non-negative and grow"));
            }
            epochs.entries.push(EpochEntry {
                epoch,
                start_offset,
            });
        }
        if epochs.entries.len() != expected {
            return Err(CheckpointError::WrongCount {
                expected,
                found: epochs.entries.len(),
            });
        }
        Ok(epochs)
    }

    /// Replaces the log directory's checkpoint with these entries, synced. The first one a
    /// directory gets is written without a sync: until it is on disk whole, recovery finds no
    /// checkpoint or one that does not hold together (its count comes before its entries), and
    /// rebuilds the epochs from the batches, which is right whatever reached the disk. So a new
    /// partition's first append waits for no sync (10,000 of them at once, each an fsync of the
    /// file and one of its directory, kept a shard from appending for seconds).
    pub async fn save(&self, dir: &Path) -> Result<(), IoFailure> {
        let path = dir.join(CHECKPOINT_FILE);
        let content = self.encode();
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                file::write_file_unsynced(&path, content.as_bytes())
            }
            _ => file::write_file_atomic(&path, content.as_bytes()).await,
        }
    }

    /// The epochs of a log being opened: its checkpoint (or, without a usable one, rebuilt from
    /// the batch headers of `segments`), without entries outside `[log_start, log_end)`, and
    /// whether they differ from the checkpoint (the caller saves them then).
    pub async fn recover(
        dir: &Path,
        segments: &BTreeMap<i64, Segment>,
        log_start: i64,
        log_end: i64,
    ) -> Result<(LeaderEpochs, bool), IoFailure> {
        let path = dir.join(CHECKPOINT_FILE);
        let loaded = match file::read_file(&path, CHECKPOINT_BYTES_MAX).await {
            Err(e) if e.kind == std::io::ErrorKind::InvalidData => {
                tracing::warn!(
                    file = %path.display(),
                    error = %e,
                    "leader epoch checkpoint too large; rebuilding it"
                );
                None
            }
            Err(e) => return Err(e),
            Ok(None) => None,
            Ok(Some(bytes)) => match Self::decode(&bytes) {
                Ok(epochs) => Some(epochs),
                Err(e) => {
                    tracing::warn!(
                        file = %path.display(),
                        error = %e,
                        "leader epoch checkpoint does not hold together; rebuilding it"
                    );
                    None
                }
            },
        };
        let (mut epochs, mut changed) = match loaded {
            Some(epochs) => (epochs, false),
            None => {
                let epochs = Self::rebuild(segments, log_start).await?;
                // An empty log rebuilds to nothing at no cost: no file needed, and nothing to
                // say (a start of 10,000 partitions never written to said it 10,000 times).
                let empty = log_end <= log_start;
                if !empty {
                    tracing::info!(
                        log = %dir.display(),
                        epochs = epochs.entries.len(),
                        "rebuilt the leader epochs from the batches' headers"
                    );
                }
                (epochs, !empty)
            }
        };
        changed |= epochs.keep_within(log_start, log_end);
        Ok((epochs, changed))
    }

    /// The epochs the batches of `segments` that end after `log_start` carry, from their
    /// headers (one read of every segment: only for a log directory that has no checkpoint).
    async fn rebuild(
        segments: &BTreeMap<i64, Segment>,
        log_start: i64,
    ) -> Result<LeaderEpochs, IoFailure> {
        let mut epochs = LeaderEpochs::default();
        for segment in segments.values() {
            for (epoch, base_offset) in segment.batch_epochs(log_start).await? {
                epochs.observe(epoch, base_offset);
            }
        }
        Ok(epochs)
    }
}

impl Log {
    /// The log's leader epochs, oldest first: where each epoch's batches start. Kept on disk
    /// in `leader-epoch-checkpoint` beside the segments. While an append that starts an epoch
    /// runs, its entry is there (saved) just before its first batch is in the log.
    pub fn leader_epochs(&self) -> Vec<EpochEntry> {
        self.epochs.borrow().entries().to_vec()
    }

    /// Kafka's OffsetsForLeaderEpoch on this log: the largest epoch at most `epoch` that the
    /// log has and the start offset of the next epoch after it (the log end offset when it is
    /// the latest). `None` when every epoch of the log is newer than `epoch` (or it has none).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.epochs
            .borrow()
            .end_offset_for(epoch, self.end_offset.get())
    }

    /// Saves `epochs` as the log's checkpoint and then takes them (with the append lock held).
    /// On failure the log goes offline and keeps the epochs it had.
    pub(crate) async fn replace_epochs(&self, epochs: LeaderEpochs) -> Result<(), IoFailure> {
        self.leave_clean().await.map_err(|e| self.fail(e))?;
        epochs.save(&self.dir).await.map_err(|e| self.fail(e))?;
        *self.epochs.borrow_mut() = epochs;
        Ok(())
    }

    /// Applies `change` (one that only drops or moves up entries: truncation, deleted
    /// segments) to the log's epochs, and saves them if it changed anything (with the append
    /// lock held). Taken at once, saved after: a checkpoint left behind by a failed save or a
    /// crash holds entries that recovery drops or moves up the same way.
    pub(crate) async fn change_epochs(
        &self,
        change: impl FnOnce(&mut LeaderEpochs) -> bool,
    ) -> Result<(), IoFailure> {
        let changed = change(&mut self.epochs.borrow_mut());
        if changed {
            let epochs = self.epochs.borrow().clone();
            self.leave_clean().await.map_err(|e| self.fail(e))?;
            epochs.save(&self.dir).await.map_err(|e| self.fail(e))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(pairs: &[(i32, i64)]) -> LeaderEpochs {
        LeaderEpochs {
            entries: pairs
                .iter()
                .map(|&(epoch, start_offset)| EpochEntry {
                    epoch,
                    start_offset,
                })
                .collect(),
        }
    }

    #[test]
    fn the_file_is_kafkas_text_format_and_reads_back() {
        let epochs = entries(&[(0, 0), (3, 150), (7, 2000)]);
        let text = epochs.encode();
        assert_eq!(text, "0\n3\n0 0\n3 150\n7 2000\n");
        assert_eq!(LeaderEpochs::decode(text.as_bytes()), Ok(epochs));
        assert_eq!(LeaderEpochs::decode(b"0\n0\n"), Ok(LeaderEpochs::default()));
        // As Kafka writes it on Windows, or by hand: tolerated.
        assert_eq!(
            LeaderEpochs::decode(b"0\r\n1\r\n4 10\r\n"),
            Ok(entries(&[(4, 10)]))
        );
    }

    #[test]
    fn a_file_that_does_not_hold_together_is_refused() {
        for bad in [
            &b""[..],
            b"1\n0\n",
            b"0\n",
            b"0\nx\n",
            b"0\n2\n1 0\n",
            b"0\n1\n1 0\n2 5\n",
            b"0\n1\n1\n",
            b"0\n1\n1 0 9\n",
            b"0\n1\n-1 0\n",
            b"0\n1\n1 -5\n",
            b"0\n2\n3 0\n2 5\n",
            b"0\n2\n2 5\n3 5\n",
            b"0\n1\n99999999999 0\n",
            b"\xff\xfe",
        ] {
            assert!(
                LeaderEpochs::decode(bad).is_err(),
                "{:?} is refused",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn end_offset_for_an_epoch_is_where_the_next_one_starts() {
        let epochs = entries(&[(1, 0), (3, 100), (4, 250)]);
        assert_eq!(
            epochs.end_offset_for(0, 300),
            None,
            "older than every epoch"
        );
        assert_eq!(epochs.end_offset_for(1, 300), Some((1, 100)));
        assert_eq!(
            epochs.end_offset_for(2, 300),
            Some((1, 100)),
            "a gap: the one before"
        );
        assert_eq!(epochs.end_offset_for(3, 300), Some((3, 250)));
        assert_eq!(
            epochs.end_offset_for(4, 300),
            Some((4, 300)),
            "latest: log end"
        );
        assert_eq!(
            epochs.end_offset_for(9, 300),
            Some((4, 300)),
            "newer: the latest"
        );
        assert_eq!(LeaderEpochs::default().end_offset_for(5, 0), None);
    }

    #[test]
    fn truncation_from_either_end() {
        let mut epochs = entries(&[(1, 0), (3, 100), (4, 250)]);
        assert!(!epochs.truncate_from_end(251));
        assert!(epochs.truncate_from_end(250));
        assert_eq!(epochs, entries(&[(1, 0), (3, 100)]));
        assert!(!epochs.truncate_from_start(0));
        assert!(epochs.truncate_from_start(40));
        assert_eq!(epochs, entries(&[(1, 40), (3, 100)]));
        assert!(epochs.truncate_from_start(100));
        assert_eq!(epochs, entries(&[(3, 100)]));
        assert!(epochs.truncate_from_start(180));
        assert_eq!(epochs, entries(&[(3, 180)]));
        assert!(!epochs.truncate_from_start(180));
        assert!(epochs.truncate_from_end(0));
        assert_eq!(epochs, LeaderEpochs::default());
        assert!(!epochs.truncate_from_start(500));
        let mut epochs = entries(&[(1, 0), (3, 100)]);
        assert!(epochs.keep_within(150, 150), "everything deleted");
        assert_eq!(epochs, LeaderEpochs::default());
    }

    #[test]
    fn checks_and_rebuilds_keep_epochs_growing() {
        let mut epochs = LeaderEpochs::default();
        assert_eq!(epochs.check(-1), EpochCheck::Missing);
        assert_eq!(epochs.check(0), EpochCheck::New);
        epochs.push(EpochEntry {
            epoch: 2,
            start_offset: 10,
        });
        assert_eq!(epochs.check(2), EpochCheck::Same);
        assert_eq!(epochs.check(3), EpochCheck::New);
        assert_eq!(epochs.check(1), EpochCheck::WentBack(2));
        // A rebuild takes only epochs that grow (a damaged header's epoch, outside the CRC,
        // must not break the order).
        epochs.observe(-1, 20);
        epochs.observe(1, 30);
        epochs.observe(2, 40);
        epochs.observe(5, 50);
        assert_eq!(epochs, entries(&[(2, 10), (5, 50)]));
    }
}
