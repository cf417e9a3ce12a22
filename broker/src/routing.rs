//! Which shard of this node serves a partition, or why none does. Node-local: the replicated
//! metadata says which nodes keep a partition and which one leads it; the shard is the same index
//! on every replica ([`ClusterMetadata::shard_of`]).

use model::{ClusterMetadata, NodeId, Topic};
use net::kafka_protocol::ResponseError;

/// Where a request for one partition goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// This node leads it, on this shard.
    Here(usize),
    /// Another node leads it, or none does right now.
    Elsewhere(Option<NodeId>),
    /// The topic has no such partition (or a replica is not registered).
    Unknown,
    /// The request names a leader epoch older than the partition's (the client's metadata is
    /// stale: KIP-320's FENCED_LEADER_EPOCH) or newer (this node's is: UNKNOWN_LEADER_EPOCH).
    Epoch { stale: bool },
}

impl Route {
    /// The error for a request this node cannot serve, Kafka's way.
    pub fn error(self) -> Option<ResponseError> {
        match self {
            Route::Here(_) => None,
            Route::Elsewhere(Some(_)) => Some(ResponseError::NotLeaderOrFollower),
            Route::Elsewhere(None) => Some(ResponseError::LeaderNotAvailable),
            Route::Unknown => Some(ResponseError::UnknownTopicOrPartition),
            Route::Epoch { stale: true } => Some(ResponseError::FencedLeaderEpoch),
            Route::Epoch { stale: false } => Some(ResponseError::UnknownLeaderEpoch),
        }
    }
}

/// Where `node` serves reads and writes of `partition` of `topic` from.
pub fn route(metadata: &ClusterMetadata, node: NodeId, topic: &Topic, partition: i32) -> Route {
    let Some(state) = topic.partition(partition) else {
        return Route::Unknown;
    };
    if state.leader != Some(node) {
        return Route::Elsewhere(state.leader);
    }
    match metadata.shard_of(topic, partition) {
        Some(shard) => Route::Here(shard.index()),
        None => Route::Unknown,
    }
}

/// [`route`] for a request that names the leader epoch it takes to be current (-1: none), as
/// Fetch and ListOffsets do: a mismatch is answered before anything else.
pub fn route_at_epoch(
    metadata: &ClusterMetadata,
    node: NodeId,
    topic: &Topic,
    partition: i32,
    leader_epoch: i32,
) -> Route {
    match topic.partition(partition) {
        Some(state) if leader_epoch >= 0 && leader_epoch != state.leader_epoch.0 => Route::Epoch {
            stale: leader_epoch < state.leader_epoch.0,
        },
        _ => route(metadata, node, topic, partition),
    }
}

/// The shard of `node` that keeps a replica of `partition` of `topic` (leader or follower), if
/// `node` keeps one.
pub fn hosting_shard(
    metadata: &ClusterMetadata,
    node: NodeId,
    topic: &Topic,
    partition: i32,
) -> Option<usize> {
    let state = topic.partition(partition)?;
    if !state.is_replica(node) {
        return None;
    }
    metadata.shard_of(topic, partition).map(|s| s.index())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use model::{BrokerRegistration, LeaderEpoch, PartitionState, TopicId};

    use super::*;

    #[test]
    fn a_named_leader_epoch_must_be_the_partitions() {
        let mut m = ClusterMetadata::new("c".into());
        for id in [1, 2] {
            let b = BrokerRegistration {
                id: NodeId(id),
                host: "h".into(),
                port: 1,
                cluster_listener: None,
                shards: 1,
                rack: None,
                fenced: false,
                replication_ports: Vec::new(),
            };
            m.brokers.insert(NodeId(id), b);
        }
        let mut state = PartitionState::new(vec![NodeId(1), NodeId(2)]);
        state.leader_epoch = LeaderEpoch(4);
        let topic = Arc::new(Topic {
            name: "t".into(),
            id: TopicId(uuid::Uuid::from_u128(7)),
            partitions: vec![state],
            configs: Default::default(),
            internal: false,
        });
        m.topics.insert("t".into(), topic.clone());
        let at = |node, epoch| route_at_epoch(&m, NodeId(node), &topic, 0, epoch);
        assert_eq!(at(1, 4), Route::Here(0));
        assert_eq!(at(1, -1), Route::Here(0), "no epoch named");
        assert_eq!(at(1, 3).error(), Some(ResponseError::FencedLeaderEpoch));
        assert_eq!(at(1, 5).error(), Some(ResponseError::UnknownLeaderEpoch));
        assert_eq!(at(2, 4), Route::Elsewhere(Some(NodeId(1))));
        assert_eq!(at(2, 3).error(), Some(ResponseError::FencedLeaderEpoch));
        assert_eq!(route_at_epoch(&m, NodeId(1), &topic, 1, 4), Route::Unknown);
    }
}
