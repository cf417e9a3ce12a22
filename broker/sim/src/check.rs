//! The invariants, checked as the run goes: every leader claim, every applied entry and every
//! restored snapshot is held against everything seen before, on every node.

use std::collections::BTreeMap;

use bytes::Bytes;
use controller::{LogEntry, LogIndex, SnapshotImage, Term};
use model::NodeId;

/// A node's stand-in state machine: how far it applied, and a digest of everything applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StateMachine {
    pub applied: LogIndex,
    pub digest: u64,
}

impl StateMachine {
    /// The snapshot bytes: the applied index and the digest.
    pub fn snapshot(&self) -> Bytes {
        let mut b = Vec::with_capacity(16);
        b.extend_from_slice(&self.applied.0.to_be_bytes());
        b.extend_from_slice(&self.digest.to_be_bytes());
        Bytes::from(b)
    }

    pub fn from_snapshot(data: &[u8]) -> Option<StateMachine> {
        let applied = u64::from_be_bytes(data.get(..8)?.try_into().ok()?);
        let digest = u64::from_be_bytes(data.get(8..16)?.try_into().ok()?);
        Some(StateMachine {
            applied: LogIndex(applied),
            digest,
        })
    }
}

/// FNV-1a, continued from `digest`.
pub fn fnv(digest: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(digest ^ 0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

#[derive(Debug, Default)]
pub struct Checker {
    /// Who led each term.
    leaders: BTreeMap<u64, NodeId>,
    /// Every committed entry some node applied: entry i at `log[i - 1]`, with the state
    /// machine's digest after it.
    log: Vec<(Term, Bytes, u64)>,
}

impl Checker {
    /// Some node is, or names, the leader of `term`.
    pub fn leader(&mut self, term: Term, leader: NodeId, seen_by: NodeId) -> Result<(), String> {
        let first = *self.leaders.entry(term.0).or_insert(leader);
        if first != leader {
            return Err(format!(
                "two leaders in term {term}: node {first}, and node {leader} (as node {seen_by} sees it)"
            ));
        }
        Ok(())
    }

    /// `node` applied `entry`.
    pub fn applied(
        &mut self,
        node: NodeId,
        sm: &mut StateMachine,
        entry: &LogEntry,
    ) -> Result<(), String> {
        if entry.index.0 != sm.applied.0 + 1 {
            return Err(format!(
                "node {node} applied entry {} after entry {}: a gap or a repeat",
                entry.index, sm.applied
            ));
        }
        sm.applied = entry.index;
        sm.digest = fnv(sm.digest, &entry.data);
        let i = (entry.index.0 - 1) as usize;
        match self.log.get(i) {
            Some((term, data, digest)) => {
                if *term != entry.term || *data != entry.data {
                    return Err(format!(
                        "committed entry {} changed: node {node} applied term {} {:?}, it was term {term} {:?}",
                        entry.index, entry.term, entry.data, data
                    ));
                }
                if *digest != sm.digest {
                    return Err(format!(
                        "node {node}'s state after entry {} differs from another node's",
                        entry.index
                    ));
                }
            }
            None if i == self.log.len() => {
                self.log.push((entry.term, entry.data.clone(), sm.digest))
            }
            None => {
                return Err(format!(
                    "node {node} applied entry {} that no node applied the entries before",
                    entry.index
                ));
            }
        }
        Ok(())
    }

    /// `node` replaced its state machine with a snapshot from the leader.
    pub fn restored(
        &mut self,
        node: NodeId,
        sm: &mut StateMachine,
        image: &SnapshotImage,
    ) -> Result<(), String> {
        let Some(restored) = StateMachine::from_snapshot(&image.data) else {
            return Err(format!(
                "node {node} got a snapshot whose data is not ours: {:?}",
                image.data
            ));
        };
        if restored.applied != image.index {
            return Err(format!(
                "node {node} got a snapshot at {} holding state at {}",
                image.index, restored.applied
            ));
        }
        if image.index <= sm.applied {
            return Err(format!(
                "node {node} restored a snapshot at {} over its state at {}",
                image.index, sm.applied
            ));
        }
        match self.log.get((image.index.0 - 1) as usize) {
            Some((_, _, digest)) if *digest == restored.digest => {}
            Some(_) => {
                return Err(format!(
                    "node {node} restored a snapshot at {} that differs from the applied state there",
                    image.index
                ));
            }
            None => {
                return Err(format!(
                    "node {node} restored a snapshot at {} beyond anything applied",
                    image.index
                ));
            }
        }
        *sm = restored;
        Ok(())
    }

    /// Checks a restarted node's own snapshot against what was applied.
    pub fn recovered(&self, node: NodeId, sm: &StateMachine) -> Result<(), String> {
        if sm.applied.0 == 0 {
            return Ok(());
        }
        match self.log.get((sm.applied.0 - 1) as usize) {
            Some((_, _, digest)) if *digest == sm.digest => Ok(()),
            _ => Err(format!(
                "node {node} recovered a snapshot at {} that differs from the applied state there",
                sm.applied
            )),
        }
    }

    pub fn committed(&self) -> usize {
        self.log.len()
    }

    pub fn terms_with_a_leader(&self) -> usize {
        self.leaders.len()
    }
}
