//! Consumer groups: Kafka's classic group protocol and committed offsets.
//!
//! Groups are spread over the partitions of the internal offsets topic ([`OFFSETS_TOPIC`]) by a
//! stable hash of the group id ([`offsets_partition_for`]). Each offsets partition has one
//! [`Coordinator`], on the shard that owns the partition's [`storage::Log`]; it keeps every
//! group of its partition in memory and writes committed offsets to that log.
//!
//! A request reaches [`handle`] on whatever shard its connection lives on. `handle` turns it into
//! one [`GroupCall`] per coordinator involved (one group, or a multi-group request split by
//! partition), hands each to the broker's [`Dispatch`] (which runs it on the right shard), and
//! builds the response for the request's version from the [`GroupReply`]s. FindCoordinator needs
//! no call: with one broker, every coordinator is this node.
//!
//! Modules:
//! - [`call`]: the calls and replies that cross shards (plain `Send` data, version-free).
//! - [`handler`]: Kafka requests to calls, replies to responses, per API and version.
//! - [`coordinator`]: one offsets partition: its groups, the log writes, replay, snapshots,
//!   offsets retention, close.
//! - [`membership`]: a group's state machine (Empty, PreparingRebalance, CompletingRebalance,
//!   Stable) with Kafka's join, sync, heartbeat and leave rules, its timers, and its offsets.
//! - [`offsets`]: a group's committed offsets and when they expire.
//! - [`records`]: the offsets log's records (FlatBuffers keys and values, `schema::groups`) in
//!   v2 record batches.
//! - [`consumer_protocol`]: the topics of a consumer's subscription, read from untrusted bytes.
//! - [`timer`]: timers that are cancelled when dropped.
//!
//! The broker's part (`crate::groups`): on the shard that owns each offsets partition, hand its
//! log (opened without retention: [`offsets_topic_configs`]) to [`Coordinator::open`] (which
//! replays it, then owns it: [`Coordinator::close`] closes it); implement [`Dispatch`] by running
//! [`Coordinator::call`] on that shard, answering `Unavailable` while it is not open; send the
//! group requests to [`handle`], on whatever shard they arrive. Close the
//! coordinators before waiting for connections to drain: a JoinGroup can wait for minutes (the
//! rebalance timeout), and closing answers it.
//!
//! What is durable: committed offsets (and their deletion), acknowledged only once fdatasync'd.
//! Group membership (members, generations, assignments) lives in memory only: after a restart a
//! group exists again only through its offsets, as an Empty group, and its consumers rejoin
//! (their heartbeats get UNKNOWN_MEMBER_ID). Static members rejoin as new members then.

pub mod call;
mod consumer_protocol;
mod coordinator;
mod handler;
mod membership;
mod offsets;
mod records;
mod timer;

#[cfg(test)]
mod tests;

use std::future::Future;

use std::collections::BTreeMap;

pub use call::{GroupCall, GroupReply};
pub use coordinator::{Coordinator, GroupError};
pub use handler::handle;
pub use net::kafka_protocol::ResponseError;

/// Kafka's name for the internal topic of committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// The offsets partition whose coordinator hosts `group_id`, out of `partitions`. Kafka's own
/// placement (`abs(groupId.hashCode()) % partitions`, Java's `String.hashCode` over UTF-16 code
/// units), so it never changes and matches what Kafka users expect.
pub fn offsets_partition_for(group_id: &str, partitions: i32) -> i32 {
    let hash = group_id.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    });
    if partitions <= 0 {
        return 0;
    }
    (hash & i32::MAX) % partitions
}

/// The group coordinator's settings, named as Kafka's broker settings; `Default` gives Kafka's
/// defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`: JoinGroup refuses shorter session timeouts.
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`: JoinGroup refuses longer session timeouts.
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`: how long an empty group's first rebalance waits for
    /// more members (extended while members keep arriving, up to the rebalance timeout).
    pub initial_rebalance_delay_ms: u64,
    /// How long a new member's first JoinGroup may wait before it is dropped (Kafka's
    /// `group.classic.new.member.join.timeout.ms`, 5 minutes).
    pub new_member_join_timeout_ms: u64,
    /// `group.max.size`: members a group may have.
    pub max_group_size: usize,
    /// `offsets.retention.minutes` in milliseconds: how long a group without members keeps its
    /// offsets.
    pub offsets_retention_ms: u64,
    /// `offsets.retention.check.interval.ms`: how often expired offsets are removed.
    pub offsets_retention_check_interval_ms: u64,
    /// `offset.metadata.max.bytes`: the largest metadata string a commit may carry.
    pub offset_metadata_max_bytes: usize,
    /// `offsets.topic.segment.bytes`: the segment size of the offsets logs
    /// ([`offsets_topic_configs`]).
    pub offsets_segment_bytes: u64,
    /// How much the offsets log may grow after its last snapshot before the coordinator writes
    /// a new snapshot of the live offsets and deletes the segments before it. Kafka compacts its
    /// offsets topic instead; this keeps the log within about the live offsets, one segment and
    /// this much.
    pub offsets_snapshot_after_bytes: u64,
}

impl Default for GroupConfig {
    fn default() -> Self {
        GroupConfig {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            new_member_join_timeout_ms: 300_000,
            max_group_size: usize::MAX,
            offsets_retention_ms: 10_080 * 60_000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4_096,
            offsets_segment_bytes: 100 << 20,
            offsets_snapshot_after_bytes: 100 << 20,
        }
    }
}

/// The topic settings of the offsets topic: no retention (the coordinators trim the log
/// themselves, after snapshots; retention would lose live offsets) and its segment size.
pub fn offsets_topic_configs(config: &GroupConfig) -> BTreeMap<String, String> {
    [
        ("retention.ms", "-1".to_string()),
        ("retention.bytes", "-1".to_string()),
        ("segment.bytes", config.offsets_segment_bytes.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// A broker, as FindCoordinator tells clients where their coordinator is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
}

/// What [`handle`] needs to know of the request besides its body.
#[derive(Debug, Clone)]
pub struct RequestContext {
    /// The request's version: the response is built for it.
    pub api_version: i16,
    /// The client id of the request header (part of new member ids, shown by DescribeGroups).
    pub client_id: String,
    /// The client's address, shown by DescribeGroups.
    pub client_host: String,
}

/// Runs group calls on the coordinators: the broker implements it with its shards.
pub trait Dispatch {
    /// The number of offsets partitions (fixed for the life of the data directory).
    fn offsets_partitions(&self) -> i32;

    /// Whether the broker has this partition: commits for others are refused, as Kafka does.
    fn has_partition(&self, topic: &str, partition: i32) -> bool;

    /// The broker whose coordinator serves offsets partition `partition` (the partition's
    /// leader), if one leads it now.
    fn coordinator(&self, partition: i32) -> Option<NodeEndpoint>;

    /// Runs `call` on the coordinator of offsets partition `partition`, on whichever shard
    /// hosts it. When that coordinator is not open (still loading, or closed), the answer is
    /// [`GroupReply::Unavailable`] with COORDINATOR_LOAD_IN_PROGRESS or NOT_COORDINATOR.
    fn call(&self, partition: i32, call: GroupCall) -> impl Future<Output = GroupReply>;
}
