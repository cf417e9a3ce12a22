//! Sparse indexes of one segment, in Kafka's file formats: the offset index maps a relative
//! offset to a byte position (4 + 4 bytes an entry), the time index maps a timestamp to a
//! relative offset (8 + 4 bytes). One entry per `index.interval.bytes` of log.
//!
//! The active segment's live in memory; a sealed segment's load on first use and may be
//! dropped under the shard's budget (`index_budget`). They are written to their files when the
//! segment is sealed or the log is closed cleanly, and rebuilt from the log when a file is missing
//! or does not hold together.

use thiserror::Error;

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum IndexError {
    #[error("index file of {0} bytes is not a whole number of entries")]
    Ragged(usize),
    #[error("index entry {0} goes backwards")]
    NotMonotonic(usize),
    #[error("index entry {0} points past the end of the segment")]
    PastEnd(usize),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetEntry {
    /// Offset minus the segment's base offset.
    pub relative_offset: u32,
    /// Byte position of the batch in the segment file.
    pub position: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeEntry {
    pub timestamp_ms: i64,
    pub relative_offset: u32,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OffsetIndex {
    entries: Vec<OffsetEntry>,
}

impl OffsetIndex {
    const ENTRY_BYTES: usize = 8;

    /// Adds an entry; entries must grow in both offset and position.
    pub fn push(&mut self, entry: OffsetEntry) {
        if let Some(last) = self.entries.last() {
            assert!(
                entry.relative_offset > last.relative_offset && entry.position > last.position,
                "offset index must grow: {last:?} then {entry:?}"
            );
        }
        self.entries.push(entry);
    }

    /// The last entry at or before `relative_offset`: where a scan for it starts.
    pub fn floor(&self, relative_offset: u32) -> Option<OffsetEntry> {
        let i = self
            .entries
            .partition_point(|e| e.relative_offset <= relative_offset);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    /// The last entry at or before byte `position`.
    pub fn floor_position(&self, position: u32) -> Option<OffsetEntry> {
        let i = self.entries.partition_point(|e| e.position <= position);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    pub fn last(&self) -> Option<OffsetEntry> {
        self.entries.last().copied()
    }

    /// The size of the index in its file format.
    pub fn bytes(&self) -> u64 {
        (self.entries.len() * Self::ENTRY_BYTES) as u64
    }

    /// Drops entries at or past `position` (truncation).
    pub fn truncate_to_position(&mut self, position: u32) {
        let keep = self.entries.partition_point(|e| e.position < position);
        self.entries.truncate(keep);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * Self::ENTRY_BYTES);
        for e in &self.entries {
            out.extend_from_slice(&e.relative_offset.to_be_bytes());
            out.extend_from_slice(&e.position.to_be_bytes());
        }
        out
    }

    /// Reads an index file's content, checking it against the segment it belongs to.
    pub fn decode(bytes: &[u8], segment_bytes: u64) -> Result<OffsetIndex, IndexError> {
        if bytes.len() % Self::ENTRY_BYTES != 0 {
            return Err(IndexError::Ragged(bytes.len()));
        }
        let mut index = OffsetIndex::default();
        for (i, chunk) in bytes.chunks_exact(Self::ENTRY_BYTES).enumerate() {
            let entry = OffsetEntry {
                relative_offset: u32::from_be_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]),
                position: u32::from_be_bytes([chunk[4], chunk[5], chunk[6], chunk[7]]),
            };
            if u64::from(entry.position) >= segment_bytes {
                return Err(IndexError::PastEnd(i));
            }
            if let Some(last) = index.entries.last()
                && (entry.relative_offset <= last.relative_offset
                    || entry.position <= last.position)
            {
                return Err(IndexError::NotMonotonic(i));
            }
            index.entries.push(entry);
        }
        Ok(index)
    }
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TimeIndex {
    entries: Vec<TimeEntry>,
}

impl TimeIndex {
    const ENTRY_BYTES: usize = 12;

    /// Records that the log reached `timestamp_ms` by `relative_offset`; only a timestamp newer
    /// than the last entry's is kept, so the index is sorted by both.
    pub fn push(&mut self, entry: TimeEntry) {
        match self.entries.last() {
            Some(last) if entry.timestamp_ms <= last.timestamp_ms => {}
            Some(last) if entry.relative_offset < last.relative_offset => {}
            _ => self.entries.push(entry),
        }
    }

    /// The last entry with a timestamp below `timestamp_ms`: a scan for the first record at or
    /// after `timestamp_ms` can start at its offset.
    pub fn floor_before(&self, timestamp_ms: i64) -> Option<TimeEntry> {
        let i = self
            .entries
            .partition_point(|e| e.timestamp_ms < timestamp_ms);
        i.checked_sub(1).map(|i| self.entries[i])
    }

    pub fn last(&self) -> Option<TimeEntry> {
        self.entries.last().copied()
    }

    /// The size of the index in its file format.
    pub fn bytes(&self) -> u64 {
        (self.entries.len() * Self::ENTRY_BYTES) as u64
    }

    pub fn truncate_to_offset(&mut self, relative_offset: u32) {
        let keep = self
            .entries
            .partition_point(|e| e.relative_offset < relative_offset);
        self.entries.truncate(keep);
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.entries.len() * Self::ENTRY_BYTES);
        for e in &self.entries {
            out.extend_from_slice(&e.timestamp_ms.to_be_bytes());
            out.extend_from_slice(&e.relative_offset.to_be_bytes());
        }
        out
    }

    pub fn decode(bytes: &[u8], relative_offset_max: u32) -> Result<TimeIndex, IndexError> {
        if bytes.len() % Self::ENTRY_BYTES != 0 {
            return Err(IndexError::Ragged(bytes.len()));
        }
        let mut index = TimeIndex::default();
        for (i, chunk) in bytes.chunks_exact(Self::ENTRY_BYTES).enumerate() {
            let mut ts = [0u8; 8];
            ts.copy_from_slice(&chunk[..8]);
            let entry = TimeEntry {
                timestamp_ms: i64::from_be_bytes(ts),
                relative_offset: u32::from_be_bytes([chunk[8], chunk[9], chunk[10], chunk[11]]),
            };
            if entry.relative_offset > relative_offset_max {
                return Err(IndexError::PastEnd(i));
            }
            if let Some(last) = index.entries.last()
                && (entry.timestamp_ms <= last.timestamp_ms
                    || entry.relative_offset < last.relative_offset)
            {
                return Err(IndexError::NotMonotonic(i));
            }
            index.entries.push(entry);
        }
        Ok(index)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn offsets(pairs: &[(u32, u32)]) -> OffsetIndex {
        let mut i = OffsetIndex::default();
        for &(relative_offset, position) in pairs {
            i.push(OffsetEntry {
                relative_offset,
                position,
            });
        }
        i
    }

    #[test]
    fn floor_finds_the_entry_at_or_before() {
        let i = offsets(&[(0, 0), (10, 4096), (20, 8192)]);
        assert_eq!(i.floor(0).unwrap().position, 0);
        assert_eq!(i.floor(15).unwrap().position, 4096);
        assert_eq!(i.floor(20).unwrap().position, 8192);
        assert_eq!(i.floor(u32::MAX).unwrap().position, 8192);
        assert_eq!(OffsetIndex::default().floor(3), None);
        assert_eq!(i.floor_position(5000).unwrap().relative_offset, 10);
        assert_eq!(i.floor_position(4095).unwrap().relative_offset, 0);
    }

    #[test]
    fn truncation_drops_entries_at_and_past_the_cut() {
        let mut i = offsets(&[(0, 0), (10, 4096), (20, 8192)]);
        i.truncate_to_position(4096);
        assert_eq!(i.last().unwrap().relative_offset, 0);
    }

    #[test]
    fn decode_rejects_files_that_do_not_hold_together() {
        let i = offsets(&[(0, 0), (10, 4096)]);
        let bytes = i.encode();
        assert_eq!(OffsetIndex::decode(&bytes, 5000).unwrap(), i);
        assert_eq!(
            OffsetIndex::decode(&bytes[..7], 5000),
            Err(IndexError::Ragged(7))
        );
        assert_eq!(
            OffsetIndex::decode(&bytes, 4096),
            Err(IndexError::PastEnd(1))
        );
        let mut backwards = bytes.clone();
        backwards.extend_from_slice(&bytes[..8]);
        assert_eq!(
            OffsetIndex::decode(&backwards, 5000),
            Err(IndexError::NotMonotonic(2))
        );
    }

    #[test]
    fn time_index_keeps_only_newer_timestamps_and_finds_the_floor() {
        let mut t = TimeIndex::default();
        for (ts, off) in [(100, 0), (100, 5), (90, 6), (200, 10), (300, 20)] {
            t.push(TimeEntry {
                timestamp_ms: ts,
                relative_offset: off,
            });
        }
        assert_eq!(t.encode().len(), 3 * 12);
        assert_eq!(t.floor_before(100), None);
        assert_eq!(t.floor_before(150).unwrap().relative_offset, 0);
        assert_eq!(t.floor_before(300).unwrap().relative_offset, 10);
        assert_eq!(TimeIndex::decode(&t.encode(), 20).unwrap(), t);
        assert_eq!(
            TimeIndex::decode(&t.encode(), 19),
            Err(IndexError::PastEnd(2))
        );
    }

    proptest! {
        #[test]
        fn decode_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..128), size in any::<u64>()) {
            let _ = OffsetIndex::decode(&bytes, size);
            let _ = TimeIndex::decode(&bytes, size as u32);
        }

        #[test]
        fn encode_decode_round_trip(steps in proptest::collection::vec((1u32..100, 1u32..10_000), 0..50)) {
            let mut i = OffsetIndex::default();
            let (mut off, mut pos) = (0u32, 0u32);
            for (d_off, d_pos) in steps {
                off += d_off;
                pos += d_pos;
                i.push(OffsetEntry { relative_offset: off, position: pos });
            }
            prop_assert_eq!(OffsetIndex::decode(&i.encode(), u64::from(pos) + 1).unwrap(), i);
        }
    }
}
