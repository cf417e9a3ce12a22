//! A shard: what one core owns and serves. Its partitions' logs, its storage (cache, IO), its
//! copy of the metadata, and its ends of the mesh to the other shards.
//!
//! Everything here is used from the shard's own executor only (`Rc`, `RefCell`): other shards
//! reach it by sending closures through the mesh, never through a lock.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use glommio::sync::Semaphore;
use net::kafka_protocol::ResponseError;
use net::{MemoryBudget, ShutdownSignal};
use storage::ShardStorage;

use model::{ClusterMetadata, NodeId};

use crate::config::BrokerConfig;
use crate::controller::{CONTROLLER_SHARD, Controller};
use crate::group::GroupConfig;
use crate::mesh::Mesh;
use crate::metadata::{Topic, TopicError};
use crate::partition::Partition;
use crate::replication::Replication;
use crate::replication::replicated::Replicated;
use crate::routing::{self, Route};
use crate::{proposals, topic_config};
use quorum::replica::{AckLevel, Flaw, ReplicaConfig};
use quorum::replica_wire::PartitionKey;

/// A topic's partitions by index: those this shard owns.
type TopicPartitions = Vec<Option<Rc<Partition>>>;

#[derive(Debug)]
pub struct Shard {
    pub id: usize,
    pub count: usize,
    pub config: Arc<BrokerConfig>,
    /// The consumer group settings, from the broker's.
    pub group_config: GroupConfig,
    pub storage: Rc<ShardStorage>,
    metadata: RefCell<Arc<ClusterMetadata>>,
    /// The partitions this shard owns, by topic name then partition index.
    partitions: RefCell<HashMap<String, TopicPartitions>>,
    /// Group coordinators of the offsets partitions this shard owns, by partition.
    pub coordinators: RefCell<HashMap<i32, Rc<crate::group::Coordinator>>>,
    /// Metadata changes apply one at a time, in version order.
    apply_lock: Semaphore,
    /// The shard closed its logs (it is stopping): metadata applied after that opens none.
    logs_closed: Cell<bool>,
    mesh: OnceCell<Mesh<Shard>>,
    /// On the controller's shard only.
    controller: Option<Controller>,
    /// The active controller as this node last heard (always this node on a node of its own).
    controller_id: Cell<Option<NodeId>>,
    producer_ids: ProducerIds,
    pub shutdown: ShutdownSignal,
    /// This shard's share of the memory for requests being read and queued (net::frame).
    pub request_memory: Rc<MemoryBudget>,
    /// This shard's share of the memory for fetch responses read from disk and not yet sent.
    pub fetch_memory: Rc<MemoryBudget>,
    /// A cluster node's replication of this shard's partitions with their other replicas.
    replication: OnceCell<Rc<Replication>>,
}

/// Why a shard could not start or apply new metadata.
#[derive(Debug, thiserror::Error)]
pub enum ShardError {
    #[error("opening the log of {topic}-{partition}: {source}")]
    OpenLog {
        topic: String,
        partition: i32,
        source: storage::LogError,
    },
}

impl Shard {
    pub fn new(
        id: usize,
        config: Arc<BrokerConfig>,
        storage: Rc<ShardStorage>,
        metadata: Arc<ClusterMetadata>,
    ) -> Shard {
        let count = config.shard_cpus.len();
        let request_memory =
            MemoryBudget::new("request memory", config.memory.request_bytes_per_shard);
        let fetch_memory = MemoryBudget::new("fetch memory", config.memory.fetch_bytes_per_shard);
        let alone = config.cluster.is_none().then_some(config.node_id);
        Shard {
            id,
            count,
            group_config: config.group_config(),
            config,
            storage,
            metadata: RefCell::new(metadata),
            partitions: RefCell::new(HashMap::new()),
            coordinators: RefCell::new(HashMap::new()),
            apply_lock: Semaphore::new(1),
            logs_closed: Cell::new(false),
            mesh: OnceCell::new(),
            controller: (id == CONTROLLER_SHARD).then(Controller::default),
            controller_id: Cell::new(alone),
            producer_ids: ProducerIds::default(),
            shutdown: ShutdownSignal::new(),
            request_memory,
            fetch_memory,
            replication: OnceCell::new(),
        }
    }

    /// A cluster node's shard replicates: from now on every partition it opens is replicated.
    pub fn set_replication(&self, replication: Rc<Replication>) {
        if self.replication.set(replication).is_err() {
            tracing::error!(shard = self.id, "replication started twice");
        }
    }

    pub fn replication(&self) -> Option<&Rc<Replication>> {
        self.replication.get()
    }

    pub fn set_mesh(&self, mesh: Mesh<Shard>) {
        if self.mesh.set(mesh).is_err() {
            tracing::error!(shard = self.id, "mesh connected twice");
        }
    }

    pub fn mesh(&self) -> &Mesh<Shard> {
        self.mesh
            .get()
            .expect("the mesh is connected before requests are served")
    }

    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.metadata.borrow().clone()
    }

    /// This node.
    pub fn node(&self) -> NodeId {
        self.config.node_id
    }

    /// The node whose controller is active, if one is known: this one, on a node of its own.
    pub fn active_controller(&self) -> Option<NodeId> {
        self.controller_id.get()
    }

    pub fn set_controller(&self, node: Option<NodeId>) {
        self.controller_id.set(node);
    }

    pub fn controller(&self) -> Option<&Controller> {
        self.controller.as_ref()
    }

    /// Where this node serves `partition` of `topic` from.
    pub fn route(&self, topic: &Topic, partition: i32) -> Route {
        routing::route(&self.metadata.borrow(), self.node(), topic, partition)
    }

    /// [`Shard::route`] for a request that names the leader epoch it takes to be current.
    pub fn route_at_epoch(&self, topic: &Topic, partition: i32, leader_epoch: i32) -> Route {
        routing::route_at_epoch(
            &self.metadata.borrow(),
            self.node(),
            topic,
            partition,
            leader_epoch,
        )
    }

    pub fn topic(&self, name: &str) -> Option<Arc<Topic>> {
        self.metadata.borrow().topics.get(name).cloned()
    }

    /// The partition if this shard owns it.
    pub fn partition(&self, topic: &str, index: i32) -> Option<Rc<Partition>> {
        let partitions = self.partitions.borrow();
        let i = usize::try_from(index).ok()?;
        partitions.get(topic)?.get(i)?.clone()
    }

    /// The partitions named, in order, as [`Self::partition`] finds each: with one map look-up
    /// for each run of names of one topic. A produce keyed over thousands of partitions names
    /// its topic for each of them, and hashing the name each time was 2% of the shard.
    pub fn partitions<'a>(
        &self,
        names: impl IntoIterator<Item = (&'a str, i32)>,
    ) -> Vec<Option<Rc<Partition>>> {
        let partitions = self.partitions.borrow();
        let mut last: Option<(&str, Option<&TopicPartitions>)> = None;
        names
            .into_iter()
            .map(|(topic, index)| {
                let of_topic = match last {
                    Some((name, of_topic)) if name == topic => of_topic,
                    _ => {
                        let of_topic = partitions.get(topic);
                        last = Some((topic, of_topic));
                        of_topic
                    }
                };
                of_topic?.get(usize::try_from(index).ok()?)?.clone()
            })
            .collect()
    }

    pub fn owned_partitions(&self) -> Vec<Rc<Partition>> {
        self.partitions
            .borrow()
            .values()
            .flatten()
            .flatten()
            .cloned()
            .collect()
    }

    /// A new producer id, never handed out before (by any shard, in any run).
    pub async fn allocate_producer_id(self: &Rc<Self>) -> Result<i64, TopicError> {
        loop {
            if let Some(id) = self.producer_ids.next() {
                return Ok(id);
            }
            let block = proposals::take_producer_id_block(self).await?;
            if !self.producer_ids.refill(block) {
                return Err(TopicError::new(
                    ResponseError::UnknownServerError,
                    "producer ids used up",
                ));
            }
        }
    }

    /// Brings this shard in line with `metadata`: opens the logs of partitions it now owns,
    /// deletes those of deleted topics, and passes changed settings to open logs.
    pub async fn apply_metadata(&self, metadata: Arc<ClusterMetadata>) -> Result<(), ShardError> {
        let _turn = self.apply_lock.acquire_permit(1).await;
        let old = self.metadata();
        if metadata.version < old.version {
            return Ok(());
        }
        if self.logs_closed.get() {
            // A change committed while this node stops (its own controlled shutdown, say):
            // reopening a log now would race the close that already wrote it off.
            *self.metadata.borrow_mut() = metadata;
            return Ok(());
        }
        // Deleted topics (or re-created under a new id): their data goes.
        let gone: Vec<String> = self
            .partitions
            .borrow()
            .keys()
            .filter(|name| {
                let before = old.topics.get(*name).map(|t| t.id);
                let after = metadata.topics.get(*name).map(|t| t.id);
                after.is_none() || after != before
            })
            .cloned()
            .collect();
        for name in gone {
            let removed = self.partitions.borrow_mut().remove(&name);
            for partition in removed.into_iter().flatten().flatten() {
                if let (Some(replication), Some(r)) = (self.replication(), &partition.replicated) {
                    replication.unregister(&r.key);
                }
                if let Err(e) = partition.log.delete().await {
                    tracing::error!(topic = %name, partition = partition.index, error = %e, "deleting a log");
                }
            }
        }
        let inherited = crate::resource_config::inherited(&metadata, self.config.node_id);
        let mut to_open = Vec::new();
        for topic in metadata.topics.values() {
            let log_config =
                topic_config::log_config(&topic.configs, &inherited, &self.config.topic_defaults);
            let compression =
                topic_config::compression(&topic.configs, &inherited, &self.config.topic_defaults);
            for (index, state) in (0..).zip(&topic.partitions) {
                if routing::hosting_shard(&metadata, self.node(), topic, index) != Some(self.id) {
                    continue;
                }
                let min_insync = topic_config::value_of(
                    "min.insync.replicas",
                    &topic.configs,
                    &inherited,
                    &self.config.topic_defaults,
                )
                .and_then(|v| v.parse::<usize>().ok())
                .unwrap_or(1);
                match self.partition(&topic.name, index) {
                    Some(p) => {
                        p.log.set_config(log_config.clone());
                        p.set_leader_epoch(state.leader_epoch);
                        p.set_compression(compression);
                        if let Some(r) = &p.replicated {
                            let now_ms = crate::replication::now_ms();
                            let led = r.with(|sm| sm.leads());
                            if r.with(|sm| sm.state() != state) {
                                r.on_metadata(state, &p.log, now_ms);
                            }
                            r.step(|sm| ((), sm.set_min_insync_replicas(min_insync, now_ms)));
                            let leads = r.with(|sm| sm.leads());
                            if leads.is_some() && leads != led {
                                p.forget_producers();
                            }
                        }
                    }
                    None => to_open.push(Opening {
                        topic,
                        index,
                        state,
                        log_config: log_config.clone(),
                        compression,
                        min_insync,
                    }),
                }
            }
        }
        self.open_partitions(to_open).await?;
        *self.metadata.borrow_mut() = metadata;
        Ok(())
    }

    /// Opens the logs of partitions this shard now owns, [`OPENING_AT_ONCE`] at a time (an
    /// open is a few small reads and file opens, each a wait: one log after another, 10,000
    /// partitions took seconds more to start), and registers them in order. A log that fails
    /// to open fails the whole call; the others are registered (and closed with the shard).
    async fn open_partitions(&self, to_open: Vec<Opening<'_>>) -> Result<(), ShardError> {
        let mut failure = None;
        for group in to_open.chunks(OPENING_AT_ONCE) {
            let opening: Vec<_> = group
                .iter()
                .map(|o| {
                    let storage = self.storage.clone();
                    let dir = self
                        .config
                        .data_dir
                        .join(format!("{}-{}", o.topic.name, o.index));
                    let log_config = o.log_config.clone();
                    glommio::spawn_local(async move { storage.open_log(&dir, log_config).await })
                })
                .collect();
            for (o, task) in group.iter().zip(opening) {
                match task.await {
                    Ok(log) => self.add_partition(o, log),
                    Err(source) => {
                        failure.get_or_insert(ShardError::OpenLog {
                            topic: o.topic.name.clone(),
                            partition: o.index,
                            source,
                        });
                    }
                }
            }
            if failure.is_some() {
                break;
            }
        }
        failure.map_or(Ok(()), Err)
    }

    fn add_partition(&self, o: &Opening<'_>, log: Rc<storage::Log>) {
        let replicated = self.replication().map(|replication| {
            Replicated::new(
                PartitionKey {
                    topic: o.topic.id,
                    partition: o.index,
                },
                self.replica_config(o.min_insync),
                o.state,
                &log,
                replication.outbox.clone(),
                crate::replication::now_ms(),
            )
        });
        let partition = Rc::new(Partition::new(
            o.topic.name.clone(),
            o.index,
            log,
            o.state.leader_epoch,
            replicated,
        ));
        partition.set_compression(o.compression);
        if let Some(replication) = self.replication() {
            replication.register(partition.clone());
        }
        let mut partitions = self.partitions.borrow_mut();
        let slots = partitions.entry(o.topic.name.clone()).or_default();
        if slots.len() <= o.index as usize {
            slots.resize(o.index as usize + 1, None);
        }
        slots[o.index as usize] = Some(partition);
    }

    fn replica_config(&self, min_insync_replicas: usize) -> ReplicaConfig {
        ReplicaConfig {
            me: self.node(),
            min_insync_replicas: min_insync_replicas.max(1),
            lag_time_max_ms: self
                .config
                .cluster
                .as_ref()
                .map_or(30_000, |c| c.replica_lag_time_max_ms),
            ack_level: match self.config.durability {
                crate::config::Durability::Fsync => AckLevel::Durable,
                crate::config::Durability::FlushPolicy => AckLevel::Written,
            },
            flaw: Flaw::None,
        }
    }

    /// Runs retention (and time-based segment rolls) over this shard's logs every `interval`,
    /// until the shard stops.
    pub async fn housekeeping(self: Rc<Self>, interval: std::time::Duration) {
        loop {
            let stopped = futures_lite::future::or(
                async {
                    glommio::timer::sleep(interval).await;
                    false
                },
                async {
                    self.shutdown.triggered().await;
                    true
                },
            )
            .await;
            if stopped {
                return;
            }
            let now_ms = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            for p in self.owned_partitions() {
                if let Err(e) = p.log.enforce_retention(now_ms).await {
                    tracing::error!(topic = %p.topic, partition = p.index, error = %e, "retention");
                }
            }
        }
    }

    /// Closes every log cleanly (the shard is stopping), together: their files synced by one
    /// sync of the filesystem rather than a few syncs a log (see `storage::ShardStorage::close_logs`;
    /// one log after another took 30-60 s for 10,000 partitions, longer than a supervisor waits
    /// after SIGTERM).
    pub async fn close(&self) {
        // Not while metadata is being applied (it may be opening a log), and none after.
        let _turn = self.apply_lock.acquire_permit(1).await;
        self.logs_closed.set(true);
        let partitions: Vec<_> = self.owned_partitions();
        self.partitions.borrow_mut().clear();
        let logs: Vec<_> = partitions.iter().map(|p| p.log.clone()).collect();
        let closed = self.storage.close_logs(&logs).await;
        for (p, closed) in partitions.iter().zip(closed) {
            if let Err(e) = closed {
                tracing::error!(topic = %p.topic, partition = p.index, error = %e, "closing a log");
            }
        }
    }
}

/// Logs a shard opens together (each holds a page or two of what it reads meanwhile).
const OPENING_AT_ONCE: usize = 256;

/// A partition whose log [`Shard::apply_metadata`] opens.
struct Opening<'a> {
    topic: &'a model::Topic,
    index: i32,
    state: &'a model::PartitionState,
    log_config: storage::LogConfig,
    compression: crate::recompress::TopicCompression,
    min_insync: usize,
}

/// The producer ids a shard hands out: a block at a time, each block taken once from the
/// metadata (saved before its first id is used). Ids must never repeat, not even across restarts:
/// a producer's state outlives a restart, and a new producer given an old id would be taken for it.
#[derive(Debug, Default)]
struct ProducerIds {
    next: Cell<i64>,
    /// Ids left in the block from `next` on; 0 before the first block.
    left: Cell<u32>,
}

impl ProducerIds {
    const BLOCK_BITS: u32 = 20;

    fn next(&self) -> Option<i64> {
        let left = self.left.get().checked_sub(1)?;
        let id = self.next.get();
        self.left.set(left);
        if left > 0 {
            self.next.set(id + 1);
        }
        Some(id)
    }

    /// Starts block `block` unless ids are left (another request refilled first); false when
    /// the block lies beyond the ids a producer may have.
    fn refill(&self, block: u64) -> bool {
        if self.left.get() > 0 {
            return true;
        }
        let Some(first) = i64::try_from(block)
            .ok()
            .and_then(|b| b.checked_mul(1 << Self::BLOCK_BITS))
        else {
            return false;
        };
        self.next.set(first);
        self.left.set(1 << Self::BLOCK_BITS);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::ProducerIds;

    #[test]
    fn producer_ids_come_from_their_block_and_run_out_cleanly() {
        let ids = ProducerIds::default();
        assert_eq!(ids.next(), None, "no block yet");
        assert!(ids.refill(3));
        assert_eq!(ids.next(), Some(3 << ProducerIds::BLOCK_BITS));
        assert!(ids.refill(4), "ids left: the block stays");
        assert_eq!(ids.next(), Some((3 << ProducerIds::BLOCK_BITS) + 1));

        // The last block a producer id can come from ends at i64::MAX.
        let last = ProducerIds::default();
        assert!(last.refill((i64::MAX >> ProducerIds::BLOCK_BITS) as u64));
        let count = std::iter::from_fn(|| last.next()).count();
        assert_eq!(count, 1 << ProducerIds::BLOCK_BITS);
        assert_eq!(last.next.get(), i64::MAX);
        assert_eq!(last.next(), None);
        assert!(!ProducerIds::default().refill(1 << 43));
    }
}
