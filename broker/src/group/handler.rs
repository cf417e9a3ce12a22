//! Kafka's group requests in, responses out: each request becomes one [`GroupCall`] per
//! coordinator involved, and the replies become the response for the request's version.
//!
//! Fields a version lacks are never set (`kafka-protocol` refuses to encode some of them, and
//! older clients would misread others).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use bytes::Bytes;
use net::kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use net::kafka_protocol::messages::describe_groups_response::{
    DescribedGroup as WireGroup, DescribedGroupMember,
};
use net::kafka_protocol::messages::find_coordinator_response::Coordinator as WireCoordinator;
use net::kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use net::kafka_protocol::messages::leave_group_response::MemberResponse;
use net::kafka_protocol::messages::list_groups_response::ListedGroup as WireListedGroup;
use net::kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use net::kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use net::kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use net::kafka_protocol::messages::{
    BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, GroupId,
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest,
    OffsetFetchResponse, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use net::kafka_protocol::protocol::StrBytes;
use net::{Request, Response};

use super::call::{
    CommitCall, CommitPartition, CommitTopic, CommittedOffset, DeleteOffsetsCall, FetchCall,
    FetchGroup, GroupCall, GroupOffsets, GroupReply, GroupState, HeartbeatCall, JoinCall,
    JoinOutcome, JoinRefused, LeaveCall, LeavingMember, ListCall, Protocol, SyncCall, TopicOffsets,
    TopicPartitions,
};
use super::{Dispatch, NodeEndpoint, RequestContext, ResponseError, offsets_partition_for};
use crate::api::metadata::OPERATIONS_NOT_ASKED;

/// What any client may do to a group without an authorizer: READ (3), DELETE (6), DESCRIBE (8),
/// DESCRIBE_CONFIGS (10), ALTER_CONFIGS (11), as a bit field of ACL operation codes.
const GROUP_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);

/// FindCoordinator key types.
const KEY_TYPE_GROUP: i8 = 0;
const KEY_TYPE_TRANSACTION: i8 = 1;
const TRANSACTIONS_NOT_SUPPORTED: &str = "transactions are not supported by this broker yet";

/// Serves one group-related request end to end (FindCoordinator, JoinGroup, SyncGroup,
/// Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, OffsetDelete, ListGroups, DescribeGroups,
/// DeleteGroups), splitting multi-group requests across coordinators and merging the replies,
/// producing the response body right for `ctx.api_version`. Other requests are not for this
/// module: they get a response the connection refuses to send, which closes it.
pub async fn handle(request: Request, ctx: &RequestContext, dispatch: &impl Dispatch) -> Response {
    let version = ctx.api_version;
    match request {
        Request::FindCoordinator(r) => find_coordinator(r, ctx, dispatch).into(),
        Request::JoinGroup(r) => join_group(r, ctx, dispatch).await.into(),
        Request::SyncGroup(r) => sync_group(r, version, dispatch).await.into(),
        Request::Heartbeat(r) => heartbeat(r, dispatch).await.into(),
        Request::LeaveGroup(r) => leave_group(r, version, dispatch).await.into(),
        Request::OffsetCommit(r) => offset_commit(r, version, dispatch).await.into(),
        Request::OffsetFetch(r) if version >= 8 => offset_fetch_groups(r, dispatch).await.into(),
        Request::OffsetFetch(r) => offset_fetch(r, version, dispatch).await.into(),
        Request::OffsetDelete(r) => offset_delete(r, dispatch).await.into(),
        Request::ListGroups(r) => list_groups(r, version, dispatch).await.into(),
        Request::DescribeGroups(r) => describe_groups(r, version, dispatch).await.into(),
        Request::DeleteGroups(r) => delete_groups(r, dispatch).await.into(),
        other => {
            tracing::error!(
                api = ?other.api_key(),
                "not a group request, but routed to the group coordinator",
            );
            FindCoordinatorResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code())
                .into()
        }
    }
}

// ---- dispatch ----

/// Runs `call` on the coordinator of `group_id`.
async fn call_group(dispatch: &impl Dispatch, group_id: &str, call: GroupCall) -> GroupReply {
    let partition = offsets_partition_for(group_id, dispatch.offsets_partitions());
    dispatch.call(partition, call).await
}

/// The error for a reply of the wrong kind: the coordinator's refusal, or (never expected) a
/// reply to some other call.
fn refusal(reply: GroupReply) -> ResponseError {
    match reply {
        GroupReply::Unavailable(error) => error,
        _ => {
            tracing::error!("a group coordinator answered with the wrong kind of reply");
            ResponseError::UnknownServerError
        }
    }
}

/// Asks the coordinators of the groups of `items` (one call per offsets partition, all at
/// once) and returns one entry per item, in order: what `entries` takes out of its
/// coordinator's reply (one per item of the call), or that coordinator's refusal.
async fn per_group<D: Dispatch, I: Clone, T>(
    dispatch: &D,
    items: &[I],
    group_id: impl Fn(&I) -> &str,
    make_call: impl Fn(Vec<I>) -> GroupCall,
    entries: impl Fn(GroupReply) -> Result<Vec<T>, ResponseError>,
) -> Vec<Result<T, ResponseError>> {
    let partitions = dispatch.offsets_partitions();
    let mut plan: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    for (index, item) in items.iter().enumerate() {
        plan.entry(offsets_partition_for(group_id(item), partitions))
            .or_default()
            .push(index);
    }
    let calls = plan.into_iter().map(|(partition, indices)| {
        let call = make_call(
            indices
                .iter()
                .filter_map(|&i| items.get(i).cloned())
                .collect(),
        );
        async move { (indices, dispatch.call(partition, call).await) }
    });
    // A reply short of entries would be a coordinator's bug: those items get a server error.
    let mut slots: Vec<Result<T, ResponseError>> = items
        .iter()
        .map(|_| Err(ResponseError::UnknownServerError))
        .collect();
    for (indices, reply) in join_all(calls.collect()).await {
        match entries(reply) {
            Ok(entries) => {
                for (index, entry) in indices.into_iter().zip(entries) {
                    if let Some(slot) = slots.get_mut(index) {
                        *slot = Ok(entry);
                    }
                }
            }
            Err(error) => {
                for index in indices {
                    if let Some(slot) = slots.get_mut(index) {
                        *slot = Err(error);
                    }
                }
            }
        }
    }
    slots
}

/// Polls every future until all are done; their outputs in order.
async fn join_all<F: Future>(futures: Vec<F>) -> Vec<F::Output> {
    let mut futures: Vec<Pin<Box<F>>> = futures.into_iter().map(Box::pin).collect();
    let mut outputs: Vec<Option<F::Output>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut done = true;
        for (future, output) in futures.iter_mut().zip(outputs.iter_mut()) {
            if output.is_none() {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => *output = Some(value),
                    Poll::Pending => done = false,
                }
            }
        }
        if done { Poll::Ready(()) } else { Poll::Pending }
    })
    .await;
    outputs.into_iter().flatten().collect()
}

/// A copy of bytes from a request that the group keeps: a view into the request would pin the
/// connection's whole read buffer (however large an earlier frame made it) for as long as the
/// member stays.
fn owned(bytes: &Bytes) -> Bytes {
    Bytes::copy_from_slice(bytes)
}

fn text(s: &StrBytes) -> String {
    s.as_str().to_owned()
}

fn wire(s: impl Into<String>) -> StrBytes {
    StrBytes::from_string(s.into())
}

fn code(result: Result<(), ResponseError>) -> i16 {
    result.err().map_or(0, |e| e.code())
}

// ---- FindCoordinator ----

fn find_coordinator(
    request: FindCoordinatorRequest,
    ctx: &RequestContext,
    dispatch: &impl Dispatch,
) -> FindCoordinatorResponse {
    let version = ctx.api_version;
    let key_type = if version >= 1 {
        request.key_type
    } else {
        KEY_TYPE_GROUP
    };
    let found: Result<(), (ResponseError, String)> = match key_type {
        KEY_TYPE_GROUP => Ok(()),
        // No transactions yet. COORDINATOR_NOT_AVAILABLE would have clients retry until their
        // timeout; TRANSACTIONAL_ID_AUTHORIZATION_FAILED is fatal to librdkafka's, the Java and
        // kafka-python's transaction managers, so `init_transactions` fails at once.
        KEY_TYPE_TRANSACTION => Err((
            ResponseError::TransactionalIdAuthorizationFailed,
            TRANSACTIONS_NOT_SUPPORTED.to_owned(),
        )),
        other => Err((
            ResponseError::InvalidRequest,
            format!("unknown coordinator key type {other}"),
        )),
    };
    // A group's coordinator is the leader of the offsets partition its id hashes to.
    let locate = |key: &str| -> Result<NodeEndpoint, (ResponseError, String)> {
        found.clone()?;
        let partition = offsets_partition_for(key, dispatch.offsets_partitions());
        dispatch.coordinator(partition).ok_or_else(|| {
            (
                ResponseError::CoordinatorNotAvailable,
                format!("offsets partition {partition} has no leader right now"),
            )
        })
    };
    if version >= 4 {
        let coordinators = request
            .coordinator_keys
            .into_iter()
            .map(|key| {
                let located = locate(&key);
                let coordinator = WireCoordinator::default().with_key(key);
                match located {
                    Ok(node) => coordinator
                        .with_node_id(BrokerId(node.node_id))
                        .with_host(wire(node.host.clone()))
                        .with_port(node.port)
                        .with_error_message(None),
                    Err((error, message)) => coordinator
                        .with_node_id(BrokerId(-1))
                        .with_port(-1)
                        .with_error_code(error.code())
                        .with_error_message(Some(wire(message))),
                }
            })
            .collect();
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let response = match locate(&request.key) {
        Ok(node) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(node.node_id))
            .with_host(wire(node.host.clone()))
            .with_port(node.port)
            .with_error_message(None),
        Err((error, message)) => FindCoordinatorResponse::default()
            .with_node_id(BrokerId(-1))
            .with_port(-1)
            .with_error_code(error.code())
            .with_error_message(Some(wire(message))),
    };
    if version == 0 {
        response.with_error_message(None)
    } else {
        response
    }
}

// ---- JoinGroup, SyncGroup, Heartbeat, LeaveGroup ----

async fn join_group(
    request: JoinGroupRequest,
    ctx: &RequestContext,
    dispatch: &impl Dispatch,
) -> JoinGroupResponse {
    let version = ctx.api_version;
    let group_id = text(&request.group_id);
    let mut protocols: Vec<Protocol> = Vec::with_capacity(request.protocols.len());
    for p in request.protocols {
        // Protocols are a map by name in Kafka: the first of a name counts.
        if !protocols.iter().any(|q| q.name == p.name.as_str()) {
            protocols.push(Protocol {
                name: text(&p.name),
                metadata: owned(&p.metadata),
            });
        }
    }
    let member_id = text(&request.member_id);
    let call = JoinCall {
        group_id: group_id.clone(),
        member_id: member_id.clone(),
        group_instance_id: request.group_instance_id.as_ref().map(text),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
        session_timeout_ms: request.session_timeout_ms,
        // v0 has no rebalance timeout: the session timeout serves as one.
        rebalance_timeout_ms: if version == 0 {
            request.session_timeout_ms
        } else {
            request.rebalance_timeout_ms
        },
        protocol_type: text(&request.protocol_type),
        protocols,
        require_known_member_id: version >= 4,
        supports_skip_assignment: version >= 9,
        reason: request.reason.as_ref().map(text),
    };
    let outcome: JoinOutcome = match call_group(dispatch, &group_id, GroupCall::Join(call)).await {
        GroupReply::Join(outcome) => outcome,
        other => Err(JoinRefused {
            error: refusal(other),
            member_id,
        }),
    };
    join_response(outcome, version)
}

fn join_response(outcome: JoinOutcome, version: i16) -> JoinGroupResponse {
    // Before v7 the protocol name is not nullable.
    let protocol_name = |name: Option<String>| match name {
        Some(name) => Some(wire(name)),
        None if version < 7 => Some(StrBytes::default()),
        None => None,
    };
    match outcome {
        Ok(joined) => JoinGroupResponse::default()
            .with_generation_id(joined.generation_id)
            .with_protocol_type(joined.protocol_type.filter(|_| version >= 7).map(wire))
            .with_protocol_name(protocol_name(joined.protocol_name))
            .with_leader(wire(joined.leader))
            .with_skip_assignment(joined.skip_assignment && version >= 9)
            .with_member_id(wire(joined.member_id))
            .with_members(
                joined
                    .members
                    .into_iter()
                    .map(|m| {
                        JoinGroupResponseMember::default()
                            .with_member_id(wire(m.member_id))
                            .with_group_instance_id(
                                m.group_instance_id.filter(|_| version >= 5).map(wire),
                            )
                            .with_metadata(m.metadata)
                    })
                    .collect(),
            ),
        Err(refused) => JoinGroupResponse::default()
            .with_error_code(refused.error.code())
            .with_generation_id(-1)
            .with_protocol_name(protocol_name(None))
            .with_member_id(wire(refused.member_id)),
    }
}

async fn sync_group(
    request: SyncGroupRequest,
    version: i16,
    dispatch: &impl Dispatch,
) -> SyncGroupResponse {
    let group_id = text(&request.group_id);
    let call = SyncCall {
        group_id: group_id.clone(),
        generation_id: request.generation_id,
        member_id: text(&request.member_id),
        group_instance_id: request.group_instance_id.as_ref().map(text),
        protocol_type: request.protocol_type.as_ref().map(text),
        protocol_name: request.protocol_name.as_ref().map(text),
        assignments: request
            .assignments
            .into_iter()
            .map(|a| (text(&a.member_id), owned(&a.assignment)))
            .collect(),
    };
    let outcome = match call_group(dispatch, &group_id, GroupCall::Sync(call)).await {
        GroupReply::Sync(outcome) => outcome,
        other => Err(refusal(other)),
    };
    match outcome {
        Ok(synced) => {
            let response = SyncGroupResponse::default().with_assignment(synced.assignment);
            if version >= 5 {
                response
                    .with_protocol_type(synced.protocol_type.map(wire))
                    .with_protocol_name(synced.protocol_name.map(wire))
            } else {
                response
            }
        }
        Err(error) => SyncGroupResponse::default()
            .with_error_code(error.code())
            .with_assignment(Bytes::new()),
    }
}

async fn heartbeat(request: HeartbeatRequest, dispatch: &impl Dispatch) -> HeartbeatResponse {
    let group_id = text(&request.group_id);
    let call = HeartbeatCall {
        group_id: group_id.clone(),
        generation_id: request.generation_id,
        member_id: text(&request.member_id),
        group_instance_id: request.group_instance_id.as_ref().map(text),
    };
    let result = match call_group(dispatch, &group_id, GroupCall::Heartbeat(call)).await {
        GroupReply::Heartbeat(result) => result,
        other => Err(refusal(other)),
    };
    HeartbeatResponse::default().with_error_code(code(result))
}

async fn leave_group(
    request: LeaveGroupRequest,
    version: i16,
    dispatch: &impl Dispatch,
) -> LeaveGroupResponse {
    let group_id = text(&request.group_id);
    let members = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| LeavingMember {
                member_id: text(&m.member_id),
                group_instance_id: m.group_instance_id.as_ref().map(text),
                reason: m.reason.as_ref().map(text),
            })
            .collect()
    } else {
        vec![LeavingMember {
            member_id: text(&request.member_id),
            group_instance_id: None,
            reason: None,
        }]
    };
    let call = LeaveCall {
        group_id: group_id.clone(),
        members,
    };
    let left = match call_group(dispatch, &group_id, GroupCall::Leave(call)).await {
        GroupReply::Leave(left) => left,
        other => Err(refusal(other)),
    };
    match left {
        Err(error) => LeaveGroupResponse::default().with_error_code(error.code()),
        Ok(left) if version >= 3 => LeaveGroupResponse::default().with_members(
            left.into_iter()
                .map(|m| {
                    MemberResponse::default()
                        .with_member_id(wire(m.member_id))
                        .with_group_instance_id(m.group_instance_id.map(wire))
                        .with_error_code(code(m.result))
                })
                .collect(),
        ),
        // One member, and its error is the response's.
        Ok(left) => LeaveGroupResponse::default().with_error_code(
            left.into_iter()
                .find_map(|m| m.result.err())
                .map_or(0, |e| e.code()),
        ),
    }
}

// ---- offsets ----

async fn offset_commit(
    request: OffsetCommitRequest,
    version: i16,
    dispatch: &impl Dispatch,
) -> OffsetCommitResponse {
    let group_id = text(&request.group_id);
    // Every partition asked about, in request order, with whether the broker has it.
    let requested: Vec<(TopicName, Vec<(i32, bool)>)> = request
        .topics
        .iter()
        .map(|t| {
            let partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let known = dispatch.has_partition(&t.name, p.partition_index);
                    (p.partition_index, known)
                })
                .collect();
            (t.name.clone(), partitions)
        })
        .collect();
    let topics: Vec<CommitTopic> = request
        .topics
        .into_iter()
        .map(|t| CommitTopic {
            name: text(&t.name),
            partitions: t
                .partitions
                .into_iter()
                .filter(|p| dispatch.has_partition(&t.name, p.partition_index))
                .map(|p| CommitPartition {
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: p.committed_leader_epoch,
                    metadata: p.committed_metadata.as_ref().map(text),
                })
                .collect(),
        })
        .filter(|t: &CommitTopic| !t.partitions.is_empty())
        .collect();
    let results = if topics.is_empty() {
        // Nothing the broker has: the group is not consulted, as in Kafka.
        Ok(HashMap::new())
    } else {
        let call = CommitCall {
            group_id: group_id.clone(),
            generation_id: request.generation_id_or_member_epoch,
            member_id: text(&request.member_id),
            group_instance_id: request.group_instance_id.as_ref().map(text),
            // v2-v4 could ask for their own retention; -1 means the broker's.
            retention_ms: Some(request.retention_time_ms)
                .filter(|&ms| (2..=4).contains(&version) && ms != -1),
            topics,
        };
        match call_group(dispatch, &group_id, GroupCall::Commit(call)).await {
            GroupReply::Commit(Ok(topics)) => Ok(topics
                .into_iter()
                .flat_map(|t| {
                    let name = t.name;
                    t.partitions
                        .into_iter()
                        .map(move |p| ((name.clone(), p.partition), code(p.result)))
                })
                .collect::<HashMap<_, _>>()),
            GroupReply::Commit(Err(error)) => Err(error),
            other => Err(refusal(other)),
        }
    };
    let results = results.map_err(|error| match error {
        // Before v9 an unknown group with a generation is an old generation.
        ResponseError::GroupIdNotFound if version < 9 => ResponseError::IllegalGeneration,
        other => other,
    });
    let topics = requested
        .into_iter()
        .map(|(name, partitions)| {
            let partitions = partitions
                .into_iter()
                .map(|(partition, known)| {
                    let error_code = match &results {
                        _ if !known => ResponseError::UnknownTopicOrPartition.code(),
                        Ok(codes) => codes
                            .get(&(text(&name), partition))
                            .copied()
                            .unwrap_or(ResponseError::UnknownServerError.code()),
                        Err(error) => error.code(),
                    };
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(partition)
                        .with_error_code(error_code)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}

fn fetched(reply: GroupReply) -> Result<Vec<GroupOffsets>, ResponseError> {
    match reply {
        GroupReply::Fetch(groups) => Ok(groups),
        other => Err(refusal(other)),
    }
}

fn fetch_group_id(group: &FetchGroup) -> &str {
    &group.group_id
}

fn fetch_call(groups: Vec<FetchGroup>) -> GroupCall {
    GroupCall::Fetch(FetchCall { groups })
}

/// OffsetFetch v1-v7: one group.
async fn offset_fetch(
    request: OffsetFetchRequest,
    version: i16,
    dispatch: &impl Dispatch,
) -> OffsetFetchResponse {
    let topics = request.topics.map(|topics| {
        topics
            .into_iter()
            .map(|t| TopicPartitions {
                name: text(&t.name),
                partitions: t.partition_indexes,
            })
            .collect::<Vec<_>>()
    });
    let wanted = [FetchGroup {
        group_id: text(&request.group_id),
        topics: topics.clone(),
    }];
    let result = per_group(dispatch, &wanted, fetch_group_id, fetch_call, fetched)
        .await
        .into_iter()
        .next()
        .unwrap_or(Err(ResponseError::UnknownServerError))
        .and_then(|group| group.result);
    let partition = |p: i32, committed: Option<CommittedOffset>, error: i16| {
        let committed = committed.unwrap_or(CommittedOffset {
            offset: -1,
            leader_epoch: -1,
            metadata: String::new(),
        });
        OffsetFetchResponsePartition::default()
            .with_partition_index(p)
            .with_committed_offset(committed.offset)
            .with_committed_leader_epoch(if version >= 5 {
                committed.leader_epoch
            } else {
                -1
            })
            .with_metadata(Some(wire(committed.metadata)))
            .with_error_code(error)
    };
    match result {
        Ok(fetched) => OffsetFetchResponse::default().with_topics(
            fetched
                .into_iter()
                .map(|t| {
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(wire(t.name)))
                        .with_partitions(
                            t.partitions
                                .into_iter()
                                .map(|p| partition(p.partition, p.committed, 0))
                                .collect(),
                        )
                })
                .collect(),
        ),
        // v2+ have a group-level error code.
        Err(error) if version >= 2 => OffsetFetchResponse::default().with_error_code(error.code()),
        // v1 can only say it per partition.
        Err(error) => OffsetFetchResponse::default().with_topics(
            topics
                .unwrap_or_default()
                .into_iter()
                .map(|t| {
                    OffsetFetchResponseTopic::default()
                        .with_name(TopicName(wire(t.name)))
                        .with_partitions(
                            t.partitions
                                .into_iter()
                                .map(|p| partition(p, None, error.code()))
                                .collect(),
                        )
                })
                .collect(),
        ),
    }
}

/// OffsetFetch v8+: many groups, split across their coordinators.
async fn offset_fetch_groups(
    request: OffsetFetchRequest,
    dispatch: &impl Dispatch,
) -> OffsetFetchResponse {
    let wanted: Vec<FetchGroup> = request
        .groups
        .into_iter()
        .map(|g| FetchGroup {
            group_id: text(&g.group_id),
            topics: g.topics.map(|topics| {
                topics
                    .into_iter()
                    .map(|t| TopicPartitions {
                        name: text(&t.name),
                        partitions: t.partition_indexes,
                    })
                    .collect()
            }),
        })
        .collect();
    let fetched = per_group(dispatch, &wanted, fetch_group_id, fetch_call, fetched).await;
    OffsetFetchResponse::default().with_groups(
        wanted
            .into_iter()
            .zip(fetched)
            .map(|(wanted, group)| {
                let response = OffsetFetchResponseGroup::default()
                    .with_group_id(GroupId(wire(wanted.group_id)));
                match group.and_then(|group| group.result) {
                    Ok(topics) => {
                        response.with_topics(topics.into_iter().map(wire_topics).collect())
                    }
                    Err(error) => response.with_error_code(error.code()),
                }
            })
            .collect(),
    )
}

fn wire_topics(topic: TopicOffsets) -> OffsetFetchResponseTopics {
    OffsetFetchResponseTopics::default()
        .with_name(TopicName(wire(topic.name)))
        .with_partitions(
            topic
                .partitions
                .into_iter()
                .map(|p| {
                    let partition =
                        OffsetFetchResponsePartitions::default().with_partition_index(p.partition);
                    match p.committed {
                        Some(c) => partition
                            .with_committed_offset(c.offset)
                            .with_committed_leader_epoch(c.leader_epoch)
                            .with_metadata(Some(wire(c.metadata))),
                        None => partition
                            .with_committed_offset(-1)
                            .with_committed_leader_epoch(-1)
                            .with_metadata(Some(StrBytes::default())),
                    }
                })
                .collect(),
        )
}

async fn offset_delete(
    request: OffsetDeleteRequest,
    dispatch: &impl Dispatch,
) -> OffsetDeleteResponse {
    let group_id = text(&request.group_id);
    let call = DeleteOffsetsCall {
        group_id: group_id.clone(),
        topics: request
            .topics
            .into_iter()
            .map(|t| TopicPartitions {
                name: text(&t.name),
                partitions: t
                    .partitions
                    .into_iter()
                    .map(|p| p.partition_index)
                    .collect(),
            })
            .collect(),
    };
    let results = match call_group(dispatch, &group_id, GroupCall::DeleteOffsets(call)).await {
        GroupReply::DeleteOffsets(results) => results,
        other => Err(refusal(other)),
    };
    match results {
        Ok(topics) => OffsetDeleteResponse::default().with_topics(
            topics
                .into_iter()
                .map(|t| {
                    OffsetDeleteResponseTopic::default()
                        .with_name(TopicName(wire(t.name)))
                        .with_partitions(
                            t.partitions
                                .into_iter()
                                .map(|p| {
                                    OffsetDeleteResponsePartition::default()
                                        .with_partition_index(p.partition)
                                        .with_error_code(code(p.result))
                                })
                                .collect(),
                        )
                })
                .collect(),
        ),
        Err(error) => OffsetDeleteResponse::default().with_error_code(error.code()),
    }
}

// ---- admin ----

async fn list_groups(
    request: ListGroupsRequest,
    version: i16,
    dispatch: &impl Dispatch,
) -> ListGroupsResponse {
    let call = ListCall {
        states: request.states_filter.iter().map(text).collect(),
        types: request.types_filter.iter().map(text).collect(),
    };
    let lists = (0..dispatch.offsets_partitions())
        .map(|partition| dispatch.call(partition, GroupCall::List(call.clone())));
    let replies = join_all(lists.collect()).await;
    let mut error = None;
    let mut groups = Vec::new();
    for reply in replies {
        match reply {
            GroupReply::List(listed) => groups.extend(listed),
            other => {
                error.get_or_insert(refusal(other));
            }
        }
    }
    ListGroupsResponse::default()
        .with_error_code(error.map_or(0, |e| e.code()))
        .with_groups(
            groups
                .into_iter()
                .map(|g| {
                    let listed = WireListedGroup::default()
                        .with_group_id(GroupId(wire(g.group_id)))
                        .with_protocol_type(wire(g.protocol_type));
                    let listed = if version >= 4 {
                        listed.with_group_state(wire(g.state.name()))
                    } else {
                        listed
                    };
                    if version >= 5 {
                        listed.with_group_type(wire("classic"))
                    } else {
                        listed
                    }
                })
                .collect(),
        )
}

async fn describe_groups(
    request: DescribeGroupsRequest,
    version: i16,
    dispatch: &impl Dispatch,
) -> DescribeGroupsResponse {
    let ids: Vec<String> = request.groups.iter().map(|g| text(g)).collect();
    let described = per_group(
        dispatch,
        &ids,
        String::as_str,
        GroupCall::Describe,
        |reply| match reply {
            GroupReply::Describe(described) => Ok(described),
            other => Err(refusal(other)),
        },
    )
    .await;
    let operations = if request.include_authorized_operations {
        GROUP_OPERATIONS
    } else {
        OPERATIONS_NOT_ASKED
    };
    let groups = ids
        .into_iter()
        .zip(described)
        .map(|(id, described)| {
            let group = WireGroup::default().with_group_id(GroupId(wire(id.clone())));
            match described {
                Ok(Some(d)) => group
                    .with_group_state(wire(d.state.name()))
                    .with_protocol_type(wire(d.protocol_type))
                    .with_protocol_data(wire(d.protocol))
                    .with_members(
                        d.members
                            .into_iter()
                            .map(|m| {
                                DescribedGroupMember::default()
                                    .with_member_id(wire(m.member_id))
                                    .with_group_instance_id(
                                        m.group_instance_id.filter(|_| version >= 4).map(wire),
                                    )
                                    .with_client_id(wire(m.client_id))
                                    .with_client_host(wire(m.client_host))
                                    .with_member_metadata(m.metadata)
                                    .with_member_assignment(m.assignment)
                            })
                            .collect(),
                    )
                    .with_authorized_operations(if version >= 3 {
                        operations
                    } else {
                        OPERATIONS_NOT_ASKED
                    }),
                // v6 (KIP-1043) says so; before, an unknown group is described as Dead.
                Ok(None) if version >= 6 => group
                    .with_error_code(ResponseError::GroupIdNotFound.code())
                    .with_error_message(Some(wire(format!("Group {id} not found."))))
                    .with_group_state(wire(GroupState::Dead.name())),
                Ok(None) => group.with_group_state(wire(GroupState::Dead.name())),
                Err(error) => {
                    let group = group.with_error_code(error.code());
                    if version >= 6 {
                        group.with_error_message(Some(wire(error.to_string())))
                    } else {
                        group
                    }
                }
            }
        })
        .collect();
    DescribeGroupsResponse::default().with_groups(groups)
}

async fn delete_groups(
    request: DeleteGroupsRequest,
    dispatch: &impl Dispatch,
) -> DeleteGroupsResponse {
    let ids: Vec<String> = request.groups_names.iter().map(|g| text(g)).collect();
    let results = per_group(
        dispatch,
        &ids,
        String::as_str,
        GroupCall::Delete,
        |reply| match reply {
            GroupReply::Delete(results) => Ok(results),
            other => Err(refusal(other)),
        },
    )
    .await;
    DeleteGroupsResponse::default().with_results(
        ids.into_iter()
            .zip(results)
            .map(|(id, result)| {
                DeletableGroupResult::default()
                    .with_group_id(GroupId(wire(id)))
                    .with_error_code(code(result.and_then(|deleted| deleted)))
            })
            .collect(),
    )
}
