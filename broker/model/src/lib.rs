//! The cluster's shared vocabulary, free of IO: typed ids, the replicated metadata, the commands
//! that change it and their pure [`apply`].
//!
//! **Architecture invariant:** this crate knows nothing about glommio, storage, sockets or the
//! clock. Everything non-deterministic (new topic ids, the time) is supplied by whoever proposes a
//! command, so every node that applies the same commands in the same order holds the same
//! metadata.

pub mod command;
pub mod ids;
pub mod metadata;
pub mod placement;
pub mod record;
pub mod snapshot;

pub use command::{Applied, ApplyError, Command, apply};
pub use ids::{LeaderEpoch, NodeId, PartitionEpoch, ShardId, TopicId};
pub use metadata::{
    BrokerRegistration, ClusterMetadata, ConfigResource, PartitionState, ResourceConfigs, Topic,
};
