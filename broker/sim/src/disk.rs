//! A voter's fake disk: writes complete later, in order; a crash loses every write that had not
//! completed (the unsynced ones); what completed is what a restart reads back.

use std::collections::VecDeque;

use controller::{Durable, Persist, PersistId, SnapshotImage};

/// One write in flight.
#[derive(Debug)]
pub enum Write {
    Persist(Persist),
    Snapshot(SnapshotImage),
}

#[derive(Debug, Default)]
pub struct Disk {
    /// What survives a crash.
    pub durable: Durable,
    /// Writes in flight, oldest first, with the sequence number their completion names.
    in_flight: VecDeque<(u64, Write)>,
    next_seq: u64,
    /// When the last write in flight completes (writes complete in order).
    busy_until_ms: u64,
}

impl Disk {
    /// Queues a write that takes `latency_ms` after the previous one; returns its sequence
    /// number and when it completes.
    pub fn submit(&mut self, write: Write, now_ms: u64, latency_ms: u64) -> (u64, u64) {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.busy_until_ms = self.busy_until_ms.max(now_ms) + latency_ms;
        self.in_flight.push_back((seq, write));
        (seq, self.busy_until_ms)
    }

    /// Completes every write up to `seq`; returns the last persist among them.
    pub fn complete(&mut self, seq: u64) -> Option<PersistId> {
        let mut last = None;
        while self.in_flight.front().is_some_and(|(s, _)| *s <= seq) {
            let Some((_, write)) = self.in_flight.pop_front() else {
                break;
            };
            match write {
                Write::Persist(p) => {
                    last = Some(p.id);
                    self.apply_persist(p);
                }
                Write::Snapshot(s) => self.apply_snapshot(s),
            }
        }
        last
    }

    /// A crash: the writes in flight never happened.
    pub fn crash(&mut self) {
        self.in_flight.clear();
        self.busy_until_ms = 0;
    }

    fn apply_persist(&mut self, p: Persist) {
        let d = &mut self.durable;
        if let Some(s) = p.snapshot {
            d.hard_state.commit = d.hard_state.commit.max(s.index);
            d.entries.clear();
            d.snapshot = Some(s);
        }
        if let Some(first) = p.entries.first() {
            d.entries.retain(|e| e.index < first.index);
            d.entries.extend(p.entries);
        }
        if let Some(hs) = p.hard_state {
            d.hard_state = hs;
        }
    }

    /// A snapshot the voter took: the log up to its index may go.
    fn apply_snapshot(&mut self, s: SnapshotImage) {
        let d = &mut self.durable;
        if d.snapshot.as_ref().is_some_and(|old| old.index >= s.index) {
            return;
        }
        d.entries.retain(|e| e.index > s.index);
        // The log after the snapshot must start right after it; entries it does not reach
        // (only a lying disk loses them) cannot be kept.
        if d.entries
            .first()
            .is_some_and(|e| e.index.0 != s.index.0 + 1)
        {
            d.entries.clear();
        }
        d.snapshot = Some(s);
    }
}
