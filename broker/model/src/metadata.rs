//! The replicated metadata: brokers, topics, and each partition's replicas, leader and ISR.
//!
//! One [`ClusterMetadata`] value is the whole truth at one version. It changes only through
//! [`crate::command::apply`]; every node applies the same commands in the same order, so every
//! node holds the same value at the same version.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ids::{LeaderEpoch, NodeId, PartitionEpoch, ShardId, TopicId};

/// Where one partition lives and who leads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    /// Every node that keeps a copy; the first is the preferred leader.
    pub replicas: Vec<NodeId>,
    /// The replicas that have every committed record (Kafka's in-sync replicas).
    pub isr: Vec<NodeId>,
    /// `None` while no in-sync replica can lead (every one of them is fenced).
    pub leader: Option<NodeId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: PartitionEpoch,
}

impl PartitionState {
    /// A new partition: every replica in sync, the preferred (first) one leading, epochs 0.
    pub fn new(replicas: Vec<NodeId>) -> PartitionState {
        assert!(!replicas.is_empty(), "a partition needs a replica");
        PartitionState {
            leader: replicas.first().copied(),
            isr: replicas.clone(),
            replicas,
            leader_epoch: LeaderEpoch::default(),
            partition_epoch: PartitionEpoch::default(),
        }
    }

    pub fn is_replica(&self, node: NodeId) -> bool {
        self.replicas.contains(&node)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Topic {
    pub name: String,
    pub id: TopicId,
    /// Partition i's state; the length is the partition count.
    pub partitions: Vec<PartitionState>,
    /// Settings the user set explicitly, by Kafka name.
    pub configs: BTreeMap<String, String>,
    /// Kept by the broker itself; never shown to clients.
    pub internal: bool,
}

impl Topic {
    pub fn partition_count(&self) -> i32 {
        i32::try_from(self.partitions.len()).unwrap_or(i32::MAX)
    }

    /// The state of `partition`, if the topic has it.
    pub fn partition(&self, partition: i32) -> Option<&PartitionState> {
        self.partitions.get(usize::try_from(partition).ok()?)
    }
}

/// A broker as it registered with the controller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub id: NodeId,
    /// What clients are told to connect to.
    pub host: String,
    pub port: u16,
    /// The node-to-node listener (controller and replication traffic), if it has one.
    pub cluster_listener: Option<String>,
    /// How many shards (cores) it runs: a partition lives on the same shard index on every
    /// replica, so its shard is taken modulo the smallest count among them.
    pub shards: u16,
    pub rack: Option<String>,
    /// A fenced broker is handed no partitions and leads none until it registers again.
    pub fenced: bool,
    /// Each shard's replication listener port (shard k's at index k), on the host of
    /// `cluster_listener`; empty for a broker that registered before replication (or one of its
    /// own). A restarted node registers its new ports.
    pub replication_ports: Vec<u16>,
}

/// Something other than a topic whose settings can be changed at run time (Kafka's config
/// resources of types 4 and 32).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigResource {
    /// A broker by id, or "" for the defaults of every broker.
    Broker(String),
    Group(String),
}

impl ConfigResource {
    /// Kafka's config resource types.
    pub const BROKER: i8 = 4;
    pub const GROUP: i8 = 32;

    pub fn from_wire(resource_type: i8, name: &str) -> Option<ConfigResource> {
        match resource_type {
            Self::BROKER => Some(ConfigResource::Broker(name.to_owned())),
            Self::GROUP => Some(ConfigResource::Group(name.to_owned())),
            _ => None,
        }
    }

    pub fn wire_type(&self) -> i8 {
        match self {
            ConfigResource::Broker(_) => Self::BROKER,
            ConfigResource::Group(_) => Self::GROUP,
        }
    }

    pub fn name(&self) -> &str {
        match self {
            ConfigResource::Broker(name) | ConfigResource::Group(name) => name,
        }
    }
}

/// Every resource's run-time settings, the empty ones left out.
pub type ResourceConfigs = BTreeMap<ConfigResource, BTreeMap<String, String>>;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterMetadata {
    /// Grows with every change, so a shard can tell newer metadata from older.
    pub version: u64,
    pub cluster_id: String,
    pub brokers: BTreeMap<NodeId, BrokerRegistration>,
    pub topics: BTreeMap<String, Arc<Topic>>,
    /// The last block of producer ids handed out; every block is taken once, through the
    /// controller, and committed before any of its ids is used.
    pub producer_id_block: u64,
    /// Settings of brokers and groups changed at run time.
    pub resource_configs: ResourceConfigs,
}

impl ClusterMetadata {
    /// Empty metadata for a new cluster; the cluster id comes from the caller (it is random).
    pub fn new(cluster_id: String) -> ClusterMetadata {
        ClusterMetadata {
            version: 0,
            cluster_id,
            brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
            producer_id_block: 0,
            resource_configs: BTreeMap::new(),
        }
    }

    pub fn topic_by_id(&self, id: TopicId) -> Option<&Arc<Topic>> {
        self.topics.values().find(|t| t.id == id)
    }

    /// Topics clients may see (not the internal ones).
    pub fn visible_topics(&self) -> impl Iterator<Item = &Arc<Topic>> {
        self.topics.values().filter(|t| !t.internal)
    }

    /// Live (unfenced) brokers, by id.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerRegistration> {
        self.brokers.values().filter(|b| !b.fenced)
    }

    /// The shard that hosts `partition` of `topic` on each of its replicas: the same index on
    /// all of them (so a leader shard streams to its peer shard with no cross-core hop), taken
    /// modulo the smallest shard count among the replicas. `None` if the topic has no such
    /// partition or a replica is not registered.
    pub fn shard_of(&self, topic: &Topic, partition: i32) -> Option<ShardId> {
        let state = topic.partition(partition)?;
        let mut shards = u16::MAX;
        for replica in &state.replicas {
            shards = shards.min(self.brokers.get(replica)?.shards);
        }
        Some(crate::placement::shard_of(topic.id, partition, shards))
    }
}
