//! The calls a shard sends to a group coordinator and the replies it gets: one group operation
//! each, already validated against the request's version and free of wire types, so they are
//! plain `Send` data that can cross shards.
//!
//! Errors are Kafka's error codes ([`ResponseError`]): they go to clients as they are.

use bytes::Bytes;

use super::ResponseError;

/// One group operation, run by the coordinator of the group's offsets partition.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupCall {
    Join(JoinCall),
    Sync(SyncCall),
    Heartbeat(HeartbeatCall),
    Leave(LeaveCall),
    Commit(CommitCall),
    /// Committed offsets of one or more groups of this partition.
    Fetch(FetchCall),
    /// OffsetDelete: removes committed offsets of partitions the group does not consume.
    DeleteOffsets(DeleteOffsetsCall),
    /// DescribeGroups for groups of this partition.
    Describe(Vec<String>),
    /// ListGroups: the groups of this partition that pass the filters.
    List(ListCall),
    /// DeleteGroups for groups of this partition.
    Delete(Vec<String>),
}

/// A coordinator's answer to a [`GroupCall`]; the variant matches the call's.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupReply {
    Join(JoinOutcome),
    Sync(SyncOutcome),
    Heartbeat(Result<(), ResponseError>),
    /// Each leaving member's result, in the call's order, or an error for the whole group.
    Leave(Result<Vec<LeftMember>, ResponseError>),
    /// Each partition's result, in the call's order, or an error for every partition.
    Commit(Result<Vec<TopicResults>, ResponseError>),
    /// One entry per group of the call, in its order.
    Fetch(Vec<GroupOffsets>),
    DeleteOffsets(Result<Vec<TopicResults>, ResponseError>),
    /// One entry per group of the call, in its order; `None` for a group that does not exist.
    Describe(Vec<Option<DescribedGroup>>),
    List(Vec<ListedGroup>),
    /// One result per group of the call, in its order.
    Delete(Vec<Result<(), ResponseError>>),
    /// The call did not run: no open coordinator for the partition (NOT_COORDINATOR,
    /// COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE).
    Unavailable(ResponseError),
}

/// A protocol a member supports (an assignor, for consumers), with its opaque metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Protocol {
    pub name: String,
    pub metadata: Bytes,
}

/// JoinGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct JoinCall {
    pub group_id: String,
    /// Empty for a member joining for the first time.
    pub member_id: String,
    /// `group.instance.id` of a static member.
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocol_type: String,
    /// In the member's order of preference; names are unique.
    pub protocols: Vec<Protocol>,
    /// KIP-394 (v4+): a new dynamic member first gets MEMBER_ID_REQUIRED and its member id.
    pub require_known_member_id: bool,
    /// KIP-814 (v9+): a static leader rejoining a stable group may be told to skip assigning.
    pub supports_skip_assignment: bool,
    pub reason: Option<String>,
}

/// The answer to a JoinGroup.
pub type JoinOutcome = Result<Joined, JoinRefused>;

/// A member that joined a generation of the group.
#[derive(Debug, Clone, PartialEq)]
pub struct Joined {
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// Every member with its metadata for the chosen protocol: for the leader only.
    pub members: Vec<JoinedMember>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

/// A refused JoinGroup: the error, and the member id the client is to use next (the new one for
/// MEMBER_ID_REQUIRED, empty when it must start over).
#[derive(Debug, Clone, PartialEq)]
pub struct JoinRefused {
    pub error: ResponseError,
    pub member_id: String,
}

/// SyncGroup.
#[derive(Debug, Clone, PartialEq)]
pub struct SyncCall {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// v5+: checked against the group's when given.
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// From the leader: each member's assignment, opaque.
    pub assignments: Vec<(String, Bytes)>,
}

/// The answer to a SyncGroup.
pub type SyncOutcome = Result<Synced, ResponseError>;

#[derive(Debug, Clone, PartialEq)]
pub struct Synced {
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// The member's assignment, exactly as the leader sent it.
    pub assignment: Bytes,
}

/// Heartbeat.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeartbeatCall {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// LeaveGroup: v0-v2 name one member, v3+ a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaveCall {
    pub group_id: String,
    pub members: Vec<LeavingMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeavingMember {
    /// Empty when an admin removes a static member by its instance id.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub result: Result<(), ResponseError>,
}

/// OffsetCommit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitCall {
    pub group_id: String,
    /// -1 with an empty member id: a commit from outside group management.
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// v2-v4's explicit retention time; `None` for the broker's.
    pub retention_ms: Option<i64>,
    pub topics: Vec<CommitTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitTopic {
    pub name: String,
    pub partitions: Vec<CommitPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommitPartition {
    pub partition: i32,
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Partitions of a topic, as requests name them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitions {
    pub name: String,
    pub partitions: Vec<i32>,
}

/// Per-partition results, in the request's order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicResults {
    pub name: String,
    pub partitions: Vec<PartitionResult>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionResult {
    pub partition: i32,
    pub result: Result<(), ResponseError>,
}

/// OffsetFetch for groups of one coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchCall {
    pub groups: Vec<FetchGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchGroup {
    pub group_id: String,
    /// `None`: every partition the group has an offset for.
    pub topics: Option<Vec<TopicPartitions>>,
}

/// A group's committed offsets, or the error for the whole group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupOffsets {
    pub group_id: String,
    pub result: Result<Vec<TopicOffsets>, ResponseError>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicOffsets {
    pub name: String,
    pub partitions: Vec<PartitionOffset>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionOffset {
    pub partition: i32,
    /// `None` when nothing is committed for the partition.
    pub committed: Option<CommittedOffset>,
}

/// A committed offset as clients see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: String,
}

/// OffsetDelete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeleteOffsetsCall {
    pub group_id: String,
    pub topics: Vec<TopicPartitions>,
}

/// ListGroups filters (v4+ states, v5+ types); empty lists pass every group. Matching ignores
/// case, as Kafka does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListCall {
    pub states: Vec<String>,
    pub types: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub state: GroupState,
}

/// A group as DescribeGroups shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedGroup {
    pub state: GroupState,
    pub protocol_type: String,
    /// The chosen protocol, only while Stable (else empty, as in Kafka).
    pub protocol: String,
    pub members: Vec<DescribedMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Metadata for the chosen protocol and the assignment: only while Stable.
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// The states of a classic group. A deleted group is gone (Kafka's Dead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    /// No members; may still hold committed offsets.
    Empty,
    /// Waiting for the members to (re)join.
    PreparingRebalance,
    /// Joined; waiting for the leader's assignment.
    CompletingRebalance,
    Stable,
    /// Only in descriptions of groups that do not exist.
    Dead,
}

impl GroupState {
    /// Kafka's name, as DescribeGroups and ListGroups show it.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}
