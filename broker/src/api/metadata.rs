//! Metadata: this broker, and the topics asked for (all visible ones when none are named),
//! creating unknown ones first when auto-creation is on and the client allows it.

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use net::kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use net::kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::controller::{NewTopic, check_topic_name};
use crate::metadata::Topic;
use crate::partition::LEADER_EPOCH;
use crate::shard::Shard;

/// "Authorized operations were not asked for", as Kafka writes it (Metadata, DescribeCluster,
/// DescribeGroups).
pub const OPERATIONS_NOT_ASKED: i32 = i32::MIN;

pub async fn handle(shard: &Rc<Shard>, request: MetadataRequest, version: i16) -> MetadataResponse {
    let node = BrokerId(shard.config.node_id);
    let auto_create =
        shard.config.auto_create_topics && (version < 4 || request.allow_auto_topic_creation);
    let topics = match request.topics {
        // v0 asks for every topic with an empty list; later versions with null.
        None => all_topics(shard),
        Some(list) if list.is_empty() && version == 0 => all_topics(shard),
        Some(list) => {
            let mut answers = Vec::with_capacity(list.len());
            for requested in list {
                answers.push(
                    named_topic(shard, requested.name, requested.topic_id, auto_create, node).await,
                );
            }
            answers
        }
    };
    let broker = MetadataResponseBroker::default()
        .with_node_id(node)
        .with_host(StrBytes::from_string(shard.config.advertise_host.clone()))
        .with_port(shard.config.advertise_port);
    let mut response = MetadataResponse::default()
        .with_brokers(vec![broker])
        .with_controller_id(node)
        .with_topics(
            topics
                .into_iter()
                .map(|t| {
                    if version >= 8 {
                        t.with_topic_authorized_operations(OPERATIONS_NOT_ASKED)
                    } else {
                        t
                    }
                })
                .collect(),
        );
    if version >= 2 {
        response = response.with_cluster_id(Some(StrBytes::from_string(
            shard.metadata().cluster_id.clone(),
        )));
    }
    if (8..=10).contains(&version) {
        response = response.with_cluster_authorized_operations(OPERATIONS_NOT_ASKED);
    }
    response
}

fn all_topics(shard: &Shard) -> Vec<MetadataResponseTopic> {
    let node = BrokerId(shard.config.node_id);
    shard
        .metadata()
        .visible_topics()
        .map(|t| describe(t, node))
        .collect()
}

async fn named_topic(
    shard: &Rc<Shard>,
    name: Option<TopicName>,
    id: Uuid,
    auto_create: bool,
    node: BrokerId,
) -> MetadataResponseTopic {
    let Some(name) = name else {
        // Asked for by id (v10+).
        return match shard.metadata().topic_by_id(id).filter(|t| !t.internal) {
            Some(t) => describe(t, node),
            None => MetadataResponseTopic::default()
                .with_topic_id(id)
                .with_error_code(ResponseError::UnknownTopicId.code()),
        };
    };
    let text = name.0.to_string();
    if let Some(t) = shard.topic(&text).filter(|t| !t.internal) {
        return describe(&t, node);
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
        configs: Default::default(),
    };
    match shard.create_topics(vec![new], false).await.pop() {
        Some(Ok(())) | Some(Err(_)) => match shard.topic(&text).filter(|t| !t.internal) {
            Some(t) => {
                tracing::info!(topic = %text, "created on first use");
                describe(&t, node)
            }
            None => error(ResponseError::LeaderNotAvailable),
        },
        None => error(ResponseError::LeaderNotAvailable),
    }
}

fn describe(topic: &Topic, node: BrokerId) -> MetadataResponseTopic {
    let partitions = (0..topic.partitions())
        .map(|index| {
            MetadataResponsePartition::default()
                .with_partition_index(index)
                .with_leader_id(node)
                .with_leader_epoch(LEADER_EPOCH)
                .with_replica_nodes(vec![node])
                .with_isr_nodes(vec![node])
        })
        .collect();
    MetadataResponseTopic::default()
        .with_name(Some(StrBytes::from_string(topic.name.clone()).into()))
        .with_topic_id(topic.id)
        .with_partitions(partitions)
}
