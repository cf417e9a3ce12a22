//! CreateTopics, DeleteTopics, CreatePartitions: checked here, made by the controller.

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use net::kafka_protocol::messages::create_topics_response::{
    CreatableTopicConfigs, CreatableTopicResult,
};
use net::kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use net::kafka_protocol::messages::{
    CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest, CreateTopicsResponse,
    DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use net::kafka_protocol::protocol::StrBytes;

use model::NodeId;

use crate::metadata::{TopicError, TopicResult};
use crate::proposals::{self, NewTopic, Replication};
use crate::shard::Shard;
use crate::topic_config;

fn error_parts(result: &TopicResult) -> (i16, Option<StrBytes>) {
    match result {
        Ok(()) => (0, None),
        Err(e) => (
            e.code.code(),
            Some(StrBytes::from_string(e.message.clone())),
        ),
    }
}

pub async fn create(
    shard: &Rc<Shard>,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let defaults = &shard.config.topic_defaults;
    // Requests with a setting but no value are refused here, the rest go to the controller.
    let mut early: Vec<Option<TopicError>> = Vec::new();
    let mut new = Vec::new();
    for t in &request.topics {
        let partitions = if t.num_partitions == -1 && t.assignments.is_empty() {
            defaults.partitions
        } else if t.assignments.is_empty() {
            t.num_partitions
        } else {
            t.assignments.len() as i32
        };
        let replication = if !t.assignments.is_empty() {
            let mut assigned: Vec<_> = t.assignments.iter().collect();
            assigned.sort_by_key(|a| a.partition_index);
            Replication::Assigned(
                assigned
                    .into_iter()
                    .map(|a| a.broker_ids.iter().map(|b| NodeId(b.0)).collect())
                    .collect(),
            )
        } else if t.replication_factor == -1 {
            Replication::Default
        } else {
            Replication::Factor(t.replication_factor)
        };
        let refusal = t.configs.iter().find(|c| c.value.is_none()).map(|c| {
            TopicError::new(
                ResponseError::InvalidConfig,
                format!("{} has no value", c.name),
            )
        });
        if refusal.is_none() {
            new.push(NewTopic {
                name: t.name.0.to_string(),
                partitions,
                replication,
                configs: t
                    .configs
                    .iter()
                    .filter_map(|c| Some((c.name.to_string(), c.value.as_ref()?.to_string())))
                    .collect(),
            });
        }
        early.push(refusal);
    }
    let mut made = proposals::create_topics(shard, new, request.validate_only)
        .await
        .into_iter();
    let metadata = shard.metadata();
    let inherited = crate::resource_config::inherited(&metadata, shard.config.node_id);
    let topics = request
        .topics
        .into_iter()
        .zip(early)
        .map(|(t, refusal)| {
            let result = match refusal {
                Some(e) => Err(e),
                None => made.next().unwrap_or(Err(TopicError::new(
                    ResponseError::UnknownServerError,
                    "no answer",
                ))),
            };
            let (code, message) = error_parts(&result);
            let mut r = CreatableTopicResult::default()
                .with_name(t.name.clone())
                .with_error_code(code);
            if version >= 1 {
                r = r.with_error_message(message);
            }
            if version >= 5 {
                r = match (&result, metadata.topics.get(t.name.0.as_str())) {
                    (Ok(()), Some(created)) => r
                        .with_topic_id(if version >= 7 {
                            created.id.0
                        } else {
                            Default::default()
                        })
                        .with_num_partitions(created.partition_count())
                        .with_replication_factor(
                            created
                                .partitions
                                .first()
                                .map_or(-1, |p| p.replicas.len() as i16),
                        )
                        .with_configs(Some(
                            topic_config::describe(&created.configs, &inherited, defaults)
                                .into_iter()
                                .map(|d| {
                                    CreatableTopicConfigs::default()
                                        .with_name(StrBytes::from_static_str(d.name))
                                        .with_value(Some(StrBytes::from_string(d.value)))
                                        .with_config_source(d.source as i8)
                                })
                                .collect(),
                        )),
                    _ => r.with_num_partitions(-1).with_replication_factor(-1),
                };
            }
            r
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}

pub async fn delete(
    shard: &Rc<Shard>,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let metadata = shard.metadata();
    // v6+ names topics by name or by id; earlier versions by name only.
    let asked: Vec<(Option<TopicName>, uuid::Uuid)> = if version >= 6 {
        request
            .topics
            .into_iter()
            .map(|t| (t.name, t.topic_id))
            .collect()
    } else {
        request
            .topic_names
            .into_iter()
            .map(|n| (Some(n), uuid::Uuid::nil()))
            .collect()
    };
    let mut names = Vec::new();
    let mut early = Vec::new();
    for (name, id) in &asked {
        let resolved = match name {
            Some(n) => Some(n.0.to_string()),
            None => metadata
                .topic_by_id(model::TopicId(*id))
                .map(|t| t.name.clone()),
        };
        match resolved {
            Some(n) => {
                names.push(n);
                early.push(None);
            }
            None => early.push(Some(TopicError::new(
                ResponseError::UnknownTopicId,
                "no topic has this id",
            ))),
        }
    }
    let mut done = proposals::delete_topics(shard, names).await.into_iter();
    let responses = asked
        .into_iter()
        .zip(early)
        .map(|((name, id), refusal)| {
            let result = match refusal {
                Some(e) => Err(e),
                None => done.next().unwrap_or(Err(TopicError::new(
                    ResponseError::UnknownServerError,
                    "no answer",
                ))),
            };
            let (code, message) = error_parts(&result);
            let id = name
                .as_ref()
                .and_then(|n| metadata.topics.get(n.0.as_str()).map(|t| t.id.0))
                .unwrap_or(id);
            let mut r = DeletableTopicResult::default()
                .with_name(name)
                .with_error_code(code);
            if version >= 5 {
                r = r.with_error_message(message);
            }
            if version >= 6 {
                r = r.with_topic_id(id);
            }
            r
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}

pub async fn create_partitions(
    shard: &Rc<Shard>,
    request: CreatePartitionsRequest,
    _version: i16,
) -> CreatePartitionsResponse {
    let changes = request
        .topics
        .iter()
        .map(|t| {
            let assigned = t.assignments.as_ref().map(|a| {
                a.iter()
                    .map(|p| p.broker_ids.iter().map(|b| NodeId(b.0)).collect())
                    .collect()
            });
            (t.name.0.to_string(), t.count, assigned)
        })
        .collect();
    let results = proposals::add_partitions(shard, changes, request.validate_only).await;
    let results = request
        .topics
        .into_iter()
        .zip(results)
        .map(|(t, result)| {
            let (code, message) = error_parts(&result);
            CreatePartitionsTopicResult::default()
                .with_name(t.name)
                .with_error_code(code)
                .with_error_message(message)
        })
        .collect();
    CreatePartitionsResponse::default().with_results(results)
}
