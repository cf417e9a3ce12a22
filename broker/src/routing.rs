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
}

impl Route {
    /// The error for a request this node cannot serve, Kafka's way.
    pub fn error(self) -> Option<ResponseError> {
        match self {
            Route::Here(_) => None,
            Route::Elsewhere(Some(_)) => Some(ResponseError::NotLeaderOrFollower),
            Route::Elsewhere(None) => Some(ResponseError::LeaderNotAvailable),
            Route::Unknown => Some(ResponseError::UnknownTopicOrPartition),
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
