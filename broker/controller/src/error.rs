//! Typed errors: each says what was refused and that nothing changed because of it.

use model::NodeId;

use crate::types::{LogIndex, PersistId};

/// Why the quorum refused to start, an event, or a proposal. An event that fails changes no state.
#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("node id {0} is not a valid voter id (node ids are not negative)")]
    InvalidNodeId(NodeId),
    #[error("node {node} is not one of the voters {voters:?}")]
    NotAVoter { node: NodeId, voters: Vec<NodeId> },
    #[error("the voters list names node {0} twice")]
    DuplicateVoter(NodeId),
    #[error("the persisted Raft state does not hold together: {0}")]
    CorruptDurable(String),
    #[error(
        "node {from} sent a snapshot taken with voters {theirs:?}, which are not this quorum's"
    )]
    VotersDisagree { from: NodeId, theirs: Vec<u64> },
    #[error("not the leader (the leader is {leader:?}): propose through the leader")]
    NotLeader { leader: Option<NodeId> },
    #[error(
        "the leader dropped the proposal (too much is uncommitted, or leadership is moving): retry"
    )]
    ProposalDropped,
    #[error("an empty proposal is refused (empty entries are the leader's no-op marker)")]
    EmptyProposal,
    #[error("a proposal of {bytes} bytes is over the limit of {max} bytes")]
    ProposalTooLarge { bytes: usize, max: usize },
    #[error(
        "the host reported persist {reported:?} done, but the last one asked for is {issued:?}"
    )]
    UnknownPersist {
        reported: PersistId,
        issued: Option<PersistId>,
    },
    #[error(
        "a snapshot at {index} was not asked for (applied {applied}, last snapshot {snapshot})"
    )]
    UnexpectedSnapshot {
        index: LogIndex,
        applied: LogIndex,
        snapshot: LogIndex,
    },
    #[error("a frame was refused: {0}")]
    Frame(#[from] crate::wire::FrameError),
    #[error("this voter stopped: raft-rs found its state contradicted ({0}); restart it from disk")]
    Stopped(String),
    #[error("raft refused the event: {0}")]
    Raft(#[from] raft::Error),
}
