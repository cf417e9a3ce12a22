//! The quorum's in-memory copy of its Raft log, behind raft-rs's read-only `Storage` trait.
//!
//! The host persists (every `Action::Persist`); this copy is what raft reads back while it runs,
//! and it is updated at the moment each persist is asked for (raft-rs requires what it hands out
//! to persist to be readable from `Storage` before the persist completes). Memory is bounded by
//! the snapshot rule: after each snapshot the entries it covers are dropped here, and raft-rs's
//! `max_uncommitted_size` bounds what is not yet committed.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, StorageError};

#[derive(Debug)]
pub(crate) struct LogStore {
    hard_state: HardState,
    conf_state: ConfState,
    /// The latest snapshot (index 0 when there is none yet): entries up to its index are gone.
    snapshot: Snapshot,
    /// The entries after the snapshot, contiguous from `snapshot.index + 1`.
    entries: Vec<Entry>,
}

impl LogStore {
    /// Assumes its input was validated (`Quorum::new` checks what the host read from disk).
    pub(crate) fn new(
        hard_state: HardState,
        conf_state: ConfState,
        snapshot: Snapshot,
        entries: Vec<Entry>,
    ) -> LogStore {
        let store = LogStore {
            hard_state,
            conf_state,
            snapshot,
            entries,
        };
        store.assert_contiguous();
        store
    }

    fn snapshot_index(&self) -> u64 {
        self.snapshot.get_metadata().index
    }

    pub(crate) fn first(&self) -> u64 {
        self.snapshot_index() + 1
    }

    pub(crate) fn last(&self) -> u64 {
        self.snapshot_index() + self.entries.len() as u64
    }

    pub(crate) fn latest_snapshot(&self) -> &Snapshot {
        &self.snapshot
    }

    pub(crate) fn set_hard_state(&mut self, hard_state: HardState) {
        self.hard_state = hard_state;
    }

    /// Appends entries that raft handed out, dropping any conflicting suffix they replace.
    pub(crate) fn append(&mut self, entries: &[Entry]) {
        let Some(first_new) = entries.first() else {
            return;
        };
        // raft never hands out entries at or below the snapshot, nor leaves a hole.
        assert!(
            first_new.index > self.snapshot_index(),
            "append below the snapshot"
        );
        assert!(
            first_new.index <= self.last() + 1,
            "append would leave a hole in the log"
        );
        let keep = (first_new.index - self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(entries);
        self.assert_contiguous();
    }

    /// Installs a snapshot received from the leader: it replaces the whole log.
    pub(crate) fn install(&mut self, snapshot: Snapshot) {
        let meta = snapshot.get_metadata();
        self.hard_state.commit = self.hard_state.commit.max(meta.index);
        self.hard_state.term = self.hard_state.term.max(meta.term);
        self.conf_state = meta.get_conf_state().clone();
        self.entries.clear();
        self.snapshot = snapshot;
    }

    /// Records a snapshot the host took of its applied state at `snapshot.index` and drops the
    /// entries it covers. The caller checked that the index is inside the log.
    pub(crate) fn compact(&mut self, snapshot: Snapshot) {
        let index = snapshot.get_metadata().index;
        assert!(
            index >= self.snapshot_index() && index <= self.last(),
            "compaction outside the log"
        );
        let covered = (index - self.snapshot_index()) as usize;
        self.entries.drain(..covered);
        self.snapshot = snapshot;
        self.assert_contiguous();
    }

    /// The term of the entry at `index`, if the log still knows it.
    pub(crate) fn term_of(&self, index: u64) -> Option<u64> {
        if index == self.snapshot_index() {
            return Some(self.snapshot.get_metadata().term);
        }
        if index < self.first() || index > self.last() {
            return None;
        }
        self.entries
            .get((index - self.first()) as usize)
            .map(|e| e.term)
    }

    fn assert_contiguous(&self) {
        debug_assert!(
            self.entries
                .iter()
                .enumerate()
                .all(|(i, e)| e.index == self.snapshot_index() + 1 + i as u64),
            "the log's entries are not contiguous after the snapshot"
        );
    }
}

impl raft::Storage for LogStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState {
            hard_state: self.hard_state.clone(),
            conf_state: self.conf_state.clone(),
        })
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from = (low - self.first()) as usize;
        let to = (high - self.first()) as usize;
        let mut entries = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        match self.term_of(index) {
            Some(term) => Ok(term),
            None if index < self.first() => Err(raft::Error::Store(StorageError::Compacted)),
            None => Err(raft::Error::Store(StorageError::Unavailable)),
        }
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot_index() < request_index {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use raft::Storage;

    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            ..Default::default()
        }
    }

    fn store() -> LogStore {
        LogStore::new(
            HardState::default(),
            ConfState::default(),
            Snapshot::default(),
            Vec::new(),
        )
    }

    #[test]
    fn append_replaces_a_conflicting_suffix() {
        let mut s = store();
        s.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        s.append(&[entry(2, 2)]);
        assert_eq!(s.last(), 2);
        assert_eq!(s.term(2).ok(), Some(2));
        assert!(s.term(3).is_err());
    }

    #[test]
    fn compaction_keeps_the_term_at_the_snapshot_and_refuses_reads_below_it() {
        let mut s = store();
        s.append(&[entry(1, 1), entry(2, 1), entry(3, 2)]);
        let mut snap = Snapshot::default();
        snap.mut_metadata().index = 2;
        snap.mut_metadata().term = 1;
        s.compact(snap);
        assert_eq!(s.first(), 3);
        assert_eq!(s.term(2).ok(), Some(1));
        assert!(matches!(
            s.entries(1, 3, None, GetEntriesContext::empty(false)),
            Err(raft::Error::Store(StorageError::Compacted))
        ));
        assert_eq!(
            s.entries(3, 4, None, GetEntriesContext::empty(false))
                .map(|e| e.len())
                .ok(),
            Some(1)
        );
        assert!(s.snapshot(3, 0).is_err());
        assert_eq!(
            s.snapshot(2, 0).map(|s| s.get_metadata().index).ok(),
            Some(2)
        );
    }
}
