//! Ids and epochs as types of their own: a node id, a shard index and an epoch are all small
//! integers, and swapping two of them must not compile.

use std::fmt;

/// A node of the cluster: Kafka's broker id (also its controller voter id).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NodeId(pub i32);

/// A shard (one core's executor) inside one node; the same partition lives on the same shard
/// index on every one of its replicas.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ShardId(pub u16);

/// A partition's leader epoch: bumped by every change of leader, stamped into every batch the
/// leader appends (`partitionLeaderEpoch`), and the basis of truncation (KIP-101).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct LeaderEpoch(pub i32);

/// A partition's state epoch: bumped by every change of its leader, replicas or ISR, so a stale
/// proposal (Kafka's AlterPartition) can be refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct PartitionEpoch(pub i32);

/// A topic's id (Kafka's topic UUID): a topic deleted and created again under the same name
/// gets a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicId(pub uuid::Uuid);

impl ShardId {
    pub fn index(self) -> usize {
        usize::from(self.0)
    }
}

impl fmt::Display for NodeId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for ShardId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

impl fmt::Display for TopicId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
