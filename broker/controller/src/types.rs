//! The quorum's vocabulary at its boundary with the host: terms and log positions as types of
//! their own, and the plain records the host persists (it never sees raft-rs's protobuf types).

use std::fmt;

use model::NodeId;

use crate::error::QuorumError;

/// A Raft term: a number that only grows; at most one leader is elected in each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Term(pub u64);

/// A position in the Raft log (the first entry is 1; 0 means "none yet").
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LogIndex(pub u64);

/// Which persist a [`crate::Action::Persist`] is; the host reports them done in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PersistId(pub u64);

impl fmt::Display for Term {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for LogIndex {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One entry of the log: the opaque bytes of a proposal (an encoded metadata command), or empty
/// for the no-op entry each new leader appends to commit what earlier terms left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEntry {
    pub index: LogIndex,
    pub term: Term,
    pub data: bytes::Bytes,
}

/// What a voter must remember across a crash besides its log: its term, whom it voted for in
/// it, and how far it knows the log to be committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct HardState {
    pub term: Term,
    pub vote: Option<NodeId>,
    pub commit: LogIndex,
}

/// The host's state machine at `index` (opaque bytes the host produced), which replaces every
/// entry up to and including `index`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SnapshotImage {
    pub index: LogIndex,
    pub term: Term,
    pub voters: Vec<NodeId>,
    pub data: bytes::Bytes,
}

/// What the host read back from its disk at start: everything it had persisted (a fresh node
/// passes `Durable::default()`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Durable {
    pub hard_state: HardState,
    pub snapshot: Option<SnapshotImage>,
    /// The entries after the snapshot, contiguous, in order.
    pub entries: Vec<LogEntry>,
}

/// A voter's role in its current term.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Follower,
    PreCandidate,
    Candidate,
    Leader,
}

/// raft-rs names voters by u64 and reserves 0 for "nobody"; ours are `NodeId`s, which are
/// non-negative (Kafka's broker ids, 0 the default), so voter n is raft id n + 1.
pub fn raft_id(node: NodeId) -> Result<u64, QuorumError> {
    u64::try_from(node.0)
        .map(|id| id + 1)
        .map_err(|_| QuorumError::InvalidNodeId(node))
}

/// The other way: `None` for raft-rs's 0 ("nobody") or an id that no `NodeId` can be.
pub fn node_id(raft: u64) -> Option<NodeId> {
    raft.checked_sub(1)
        .and_then(|id| i32::try_from(id).ok())
        .map(NodeId)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_ids_convert_and_negative_ones_are_refused() {
        assert_eq!(raft_id(NodeId(7)).ok(), Some(8));
        assert_eq!(
            raft_id(NodeId(0)).ok(),
            Some(1),
            "node 0 is Spindle's default"
        );
        assert!(matches!(
            raft_id(NodeId(-1)),
            Err(QuorumError::InvalidNodeId(NodeId(-1)))
        ));
        assert_eq!(node_id(8), Some(NodeId(7)));
        assert_eq!(node_id(1), Some(NodeId(0)));
        assert_eq!(node_id(0), None);
        assert_eq!(node_id(u64::from(u32::MAX)), None);
        for n in [0, 1, 7, i32::MAX] {
            let raft = raft_id(NodeId(n)).unwrap();
            assert_eq!(node_id(raft), Some(NodeId(n)), "the two directions agree");
        }
    }
}
