//! DescribeCluster, DescribeQuorum and InitProducerId: answers about the cluster and this broker.

use std::rc::Rc;

use model::NodeId;
use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use net::kafka_protocol::messages::describe_quorum_response::{
    Listener, Node, PartitionData, ReplicaState, TopicData,
};
use net::kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, DescribeQuorumRequest,
    DescribeQuorumResponse, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
};
use net::kafka_protocol::protocol::StrBytes;

use crate::api::metadata::{CLUSTER_OPERATIONS, authorized_operations};
use crate::controller::CONTROLLER_SHARD;
use crate::shard::Shard;

pub fn describe_cluster(shard: &Shard, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let metadata = shard.metadata();
    // v2 (KIP-1073) may ask for fenced brokers too, marked.
    let brokers = metadata
        .brokers
        .values()
        .filter(|b| !b.fenced || request.include_fenced_brokers)
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.id.0))
                .with_host(StrBytes::from_string(b.host.clone()))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.clone().map(StrBytes::from_string))
                .with_is_fenced(b.fenced)
        })
        .collect();
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(metadata.cluster_id.clone()))
        .with_controller_id(BrokerId(shard.active_controller().map_or(-1, |c| c.0)))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(authorized_operations(
            request.include_cluster_authorized_operations,
            CLUSTER_OPERATIONS,
        ))
}

/// The Raft quorum that keeps the metadata, as Kafka's `__cluster_metadata` partition 0: its
/// leader, epoch (the term), high watermark (the committed index) and each voter's log end
/// (known on the active controller; -1 elsewhere); the brokers that are no voters as observers.
/// A node of its own is a quorum of one, at the metadata's version.
pub async fn describe_quorum(
    shard: &Rc<Shard>,
    request: DescribeQuorumRequest,
    version: i16,
) -> DescribeQuorumResponse {
    let view = shard
        .mesh()
        .run_on(CONTROLLER_SHARD, shard, |s: Rc<Shard>| async move {
            s.controller()
                .and_then(|c| c.cluster())
                .map(|c| c.quorum_view())
        })
        .await
        .ok()
        .flatten();
    let metadata = shard.metadata();
    let me = shard.node();
    let (leader, term, commit, voters) = match &view {
        Some(v) => (v.leader, v.term, v.commit, v.voters.clone()),
        None => (
            Some(me),
            1,
            Some(metadata.version),
            vec![(me, Some(metadata.version))],
        ),
    };
    let state = |node: NodeId, end: Option<u64>| {
        ReplicaState::default()
            .with_replica_id(BrokerId(node.0))
            .with_log_end_offset(end.and_then(|e| i64::try_from(e).ok()).unwrap_or(-1))
            .with_last_fetch_timestamp(-1)
            .with_last_caught_up_timestamp(-1)
    };
    let observers: Vec<ReplicaState> = metadata
        .brokers
        .keys()
        .filter(|b| !voters.iter().any(|(v, _)| v == *b))
        .map(|&b| state(b, None))
        .collect();
    let current_voters: Vec<ReplicaState> = voters.iter().map(|&(n, e)| state(n, e)).collect();
    let topics = request
        .topics
        .into_iter()
        .map(|t| {
            let known = t.topic_name.as_str() == METADATA_TOPIC;
            let partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut data = PartitionData::default().with_partition_index(p.partition_index);
                    if !known || p.partition_index != 0 {
                        return data.with_error_code(ResponseError::UnknownTopicOrPartition.code());
                    }
                    data = data
                        .with_leader_id(BrokerId(leader.map_or(-1, |l| l.0)))
                        .with_leader_epoch(i32::try_from(term).unwrap_or(i32::MAX))
                        .with_high_watermark(
                            commit.and_then(|c| i64::try_from(c).ok()).unwrap_or(-1),
                        )
                        .with_current_voters(current_voters.clone())
                        .with_observers(observers.clone());
                    data
                })
                .collect();
            TopicData::default()
                .with_topic_name(t.topic_name)
                .with_partitions(partitions)
        })
        .collect();
    let mut response = DescribeQuorumResponse::default().with_topics(topics);
    if version >= 2 {
        let nodes = match &view {
            Some(v) => v
                .listeners
                .iter()
                .map(|(id, addr)| {
                    Node::default()
                        .with_node_id(BrokerId(id.0))
                        .with_listeners(vec![
                            Listener::default()
                                .with_name(StrBytes::from_static_str("CONTROLLER"))
                                .with_host(StrBytes::from_string(addr.ip().to_string()))
                                .with_port(addr.port()),
                        ])
                })
                .collect(),
            None => Vec::new(),
        };
        response = response.with_nodes(nodes);
    }
    response
}

/// The name Kafka gives the metadata log's partition in DescribeQuorum.
const METADATA_TOPIC: &str = "__cluster_metadata";

/// Ids for idempotent producers. A producer that asks again with its id and epoch (KIP-360, to
/// recover from a failed batch) gets its next epoch. Transactions are not supported.
pub async fn init_producer_id(
    shard: &Rc<Shard>,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    if request.transactional_id.is_some() {
        return InitProducerIdResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
    }
    let (id, epoch) = if request.producer_id.0 >= 0
        && request.producer_epoch >= 0
        && request.producer_epoch < i16::MAX - 1
    {
        (request.producer_id.0, request.producer_epoch + 1)
    } else {
        match shard.allocate_producer_id().await {
            Ok(id) => (id, 0),
            Err(e) => {
                tracing::warn!(shard = shard.id, error = %e.message, "no producer id to give");
                return InitProducerIdResponse::default()
                    .with_error_code(e.code.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
            }
        }
    };
    InitProducerIdResponse::default()
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(epoch)
}
