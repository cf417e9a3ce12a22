//! Metadata: the live brokers, and the topics asked for (all visible ones when none are named)
//! with each partition's leader, replicas, ISR and leader epoch, creating unknown topics first when
//! auto-creation is on and the client allows it.

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use net::kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use net::kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use model::{ClusterMetadata, NodeId};

use crate::metadata::Topic;
use crate::proposals::{NewTopic, Replication, check_topic_name};
use crate::shard::Shard;

/// "Authorized operations were not asked for", as Kafka writes it (Metadata, DescribeCluster,
/// DescribeGroups).
pub const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

/// Kafka's `AclOperation` codes, each a bit of an authorized-operations field.
const READ: u32 = 3;
const WRITE: u32 = 4;
const CREATE: u32 = 5;
const DELETE: u32 = 6;
const ALTER: u32 = 7;
const DESCRIBE: u32 = 8;
const CLUSTER_ACTION: u32 = 9;
const DESCRIBE_CONFIGS: u32 = 10;
const ALTER_CONFIGS: u32 = 11;
const IDEMPOTENT_WRITE: u32 = 12;

const fn bits(operations: &[u32]) -> i32 {
    let mut field = 0;
    let mut i = 0;
    while i < operations.len() {
        field |= 1 << operations[i];
        i += 1;
    }
    field
}

/// Without an authorizer every client may do every operation a resource type supports: Kafka
/// answers the type's whole set (its `AclEntry.supportedOperations`).
pub const TOPIC_OPERATIONS: i32 = bits(&[
    READ,
    WRITE,
    CREATE,
    DELETE,
    ALTER,
    DESCRIBE,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
]);
pub const CLUSTER_OPERATIONS: i32 = bits(&[
    CREATE,
    ALTER,
    DESCRIBE,
    CLUSTER_ACTION,
    DESCRIBE_CONFIGS,
    ALTER_CONFIGS,
    IDEMPOTENT_WRITE,
]);

/// `operations` when the client asked for them, else Kafka's "not asked".
pub fn authorized_operations(asked: bool, operations: i32) -> i32 {
    if asked {
        operations
    } else {
        OPERATIONS_NOT_ASKED
    }
}

pub async fn handle(shard: &Rc<Shard>, request: MetadataRequest, version: i16) -> MetadataResponse {
    let auto_create =
        shard.config.auto_create_topics && (version < 4 || request.allow_auto_topic_creation);
    let topic_operations = authorized_operations(
        request.include_topic_authorized_operations,
        TOPIC_OPERATIONS,
    );
    let cluster_operations = authorized_operations(
        request.include_cluster_authorized_operations,
        CLUSTER_OPERATIONS,
    );
    let topics = match request.topics {
        // v0 asks for every topic with an empty list; later versions with null.
        None => all_topics(shard),
        Some(list) if list.is_empty() && version == 0 => all_topics(shard),
        Some(list) => {
            let mut answers = Vec::with_capacity(list.len());
            for requested in list {
                answers.push(
                    named_topic(shard, requested.name, requested.topic_id, auto_create).await,
                );
            }
            answers
        }
    };
    let metadata = shard.metadata();
    let brokers = metadata
        .live_brokers()
        .map(|b| {
            let broker = MetadataResponseBroker::default()
                .with_node_id(BrokerId(b.id.0))
                .with_host(StrBytes::from_string(b.host.clone()))
                .with_port(i32::from(b.port));
            match &b.rack {
                Some(rack) if version >= 1 => {
                    broker.with_rack(Some(StrBytes::from_string(rack.clone())))
                }
                _ => broker,
            }
        })
        .collect();
    let mut response = MetadataResponse::default()
        .with_brokers(brokers)
        .with_controller_id(BrokerId(shard.active_controller().map_or(-1, |c| c.0)))
        .with_topics(
            topics
                .into_iter()
                .map(|t| {
                    if version >= 8 {
                        t.with_topic_authorized_operations(topic_operations)
                    } else {
                        t
                    }
                })
                .collect(),
        );
    if version >= 2 {
        response =
            response.with_cluster_id(Some(StrBytes::from_string(metadata.cluster_id.clone())));
    }
    if (8..=10).contains(&version) {
        response = response.with_cluster_authorized_operations(cluster_operations);
    }
    response
}

fn all_topics(shard: &Shard) -> Vec<MetadataResponseTopic> {
    let metadata = shard.metadata();
    metadata
        .visible_topics()
        .map(|t| describe(&metadata, t))
        .collect()
}

async fn named_topic(
    shard: &Rc<Shard>,
    name: Option<TopicName>,
    id: Uuid,
    auto_create: bool,
) -> MetadataResponseTopic {
    let metadata = shard.metadata();
    let Some(name) = name else {
        // Asked for by id (v10+).
        return match metadata
            .topic_by_id(model::TopicId(id))
            .filter(|t| !t.internal)
        {
            Some(t) => describe(&metadata, t),
            None => MetadataResponseTopic::default()
                .with_topic_id(id)
                .with_error_code(ResponseError::UnknownTopicId.code()),
        };
    };
    let text = name.0.to_string();
    if let Some(t) = metadata.topics.get(&text).filter(|t| !t.internal) {
        return describe(&metadata, t);
    }
    let error = |e: ResponseError| {
        MetadataResponseTopic::default()
            .with_name(Some(name.clone()))
            .with_error_code(e.code())
    };
    if check_topic_name(&text).is_err() {
        return error(ResponseError::InvalidTopicException);
    }
    if !auto_create {
        return error(ResponseError::UnknownTopicOrPartition);
    }
    let new = NewTopic {
        name: text.clone(),
        partitions: shard.config.topic_defaults.partitions,
        replication: Replication::Default,
        configs: Default::default(),
    };
    match crate::proposals::create_topics(shard, vec![new], false)
        .await
        .pop()
    {
        Some(Ok(())) | Some(Err(_)) => match shard.topic(&text).filter(|t| !t.internal) {
            Some(t) => {
                tracing::info!(topic = %text, "created on first use");
                describe(&shard.metadata(), &t)
            }
            None => error(ResponseError::LeaderNotAvailable),
        },
        None => error(ResponseError::LeaderNotAvailable),
    }
}

fn describe(metadata: &ClusterMetadata, topic: &Topic) -> MetadataResponseTopic {
    let ids = |nodes: &[NodeId]| nodes.iter().map(|n| BrokerId(n.0)).collect::<Vec<_>>();
    let partitions = (0..)
        .zip(&topic.partitions)
        .map(|(index, p)| {
            let offline: Vec<NodeId> = p
                .replicas
                .iter()
                .copied()
                .filter(|r| metadata.brokers.get(r).is_none_or(|b| b.fenced))
                .collect();
            MetadataResponsePartition::default()
                .with_error_code(match p.leader {
                    Some(_) => 0,
                    None => ResponseError::LeaderNotAvailable.code(),
                })
                .with_partition_index(index)
                .with_leader_id(BrokerId(p.leader.map_or(-1, |l| l.0)))
                .with_leader_epoch(p.leader_epoch.0)
                .with_replica_nodes(ids(&p.replicas))
                .with_isr_nodes(ids(&p.isr))
                .with_offline_replicas(ids(&offline))
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(StrBytes::from_string(topic.name.clone()).into()))
        .with_topic_id(topic.id.0)
        .with_partitions(partitions)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// librdkafka's suite (0080) expects 8 topic and 7 cluster operations; these are Kafka's.
    #[test]
    fn operation_sets_are_kafkas() {
        assert_eq!(TOPIC_OPERATIONS.count_ones(), 8);
        assert_eq!(CLUSTER_OPERATIONS.count_ones(), 7);
        assert_eq!(TOPIC_OPERATIONS, 0b1101_1111_1000);
        assert_eq!(CLUSTER_OPERATIONS, 0b1_1111_1010_0000);
        assert_eq!(authorized_operations(false, TOPIC_OPERATIONS), i32::MIN);
    }
}
