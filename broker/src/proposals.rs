//! What shards ask the controller for: admin requests checked against this shard's metadata and
//! turned into [`Command`]s, with everything the commands need decided here (new topic ids,
//! replica placement), so that applying them is deterministic on every node.
//!
//! A check made here may be overtaken by another change before the command commits; `apply`
//! checks again and the loser gets its error (TOPIC_ALREADY_EXISTS, say).

use std::collections::BTreeMap;
use std::rc::Rc;

use model::{
    Applied, ClusterMetadata, Command, ConfigResource, NodeId, PartitionState, Topic, TopicId,
};
use net::kafka_protocol::ResponseError;

use crate::config_ops::{self, ConfigOp};
use crate::controller::{self, Outcomes};
use crate::group::{self, OFFSETS_TOPIC};
use crate::metadata::{TopicError, TopicResult};
use crate::resource_config;
use crate::shard::Shard;
use crate::topic_config;

/// More partitions than this in one topic is surely a mistake (and a lot of files).
const MAX_PARTITIONS: i32 = 10_000;

/// The most replicas a topic gets when it does not ask for a number.
const DEFAULT_REPLICATION_FACTOR_MAX: usize = 3;

/// A topic to create.
#[derive(Debug, Clone)]
pub struct NewTopic {
    pub name: String,
    pub partitions: i32,
    pub replication: Replication,
    pub configs: BTreeMap<String, String>,
}

/// How a new topic's replicas are chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Replication {
    /// The broker default: `--default-replication-factor`, or min(3, live brokers).
    Default,
    /// This many replicas per partition, placed by the (i + j) mod n rule.
    Factor(i16),
    /// The client's own: partition i's replicas, the first the preferred leader.
    Assigned(Vec<Vec<NodeId>>),
}

/// Kafka's rule for topic names: 1 to 249 of `[a-zA-Z0-9._-]`, not "." or "..".
pub fn check_topic_name(name: &str) -> Result<(), TopicError> {
    let legal = !name.is_empty()
        && name.len() <= 249
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if legal {
        Ok(())
    } else {
        Err(TopicError::new(
            ResponseError::InvalidTopicException,
            format!("invalid topic name {name:?}: use 1 to 249 of a-z A-Z 0-9 . _ -"),
        ))
    }
}

/// Proposes the commands that were planned, and gives each request its answer: the planning
/// error, or what its command did.
async fn propose_planned(
    shard: &Rc<Shard>,
    planned: Vec<Result<Option<Command>, TopicError>>,
) -> Vec<TopicResult> {
    let commands: Vec<Command> = planned
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned().flatten())
        .collect();
    let proposed = commands.len();
    let mut outcomes = if commands.is_empty() {
        Vec::new()
    } else {
        match controller::propose(shard, commands).await {
            Ok(outcomes) => outcomes,
            Err(e) => return vec![Err(e); planned.len()],
        }
    }
    .into_iter();
    assert!(outcomes.len() == proposed, "one outcome per command");
    planned
        .into_iter()
        .map(|p| match p? {
            None => Ok(()),
            Some(_) => match outcomes.next() {
                Some(Ok(_)) => Ok(()),
                Some(Err(e)) => Err(e),
                None => Err(TopicError::new(
                    ResponseError::UnknownServerError,
                    "no outcome",
                )),
            },
        })
        .collect()
}

pub async fn create_topics(
    shard: &Rc<Shard>,
    topics: Vec<NewTopic>,
    validate_only: bool,
) -> Vec<TopicResult> {
    let metadata = shard.metadata();
    let planned = topics
        .into_iter()
        .map(|t| {
            let topic = plan_topic(&metadata, t, false, shard.config.default_replication_factor)?;
            Ok((!validate_only).then_some(Command::CreateTopic(topic)))
        })
        .collect();
    propose_planned(shard, planned).await
}

/// Creates the internal topic of committed offsets if the cluster has none yet, with
/// min(3, brokers) replicas.
pub async fn ensure_offsets_topic(shard: &Rc<Shard>, partitions: i32) -> TopicResult {
    let metadata = shard.metadata();
    if metadata.topics.contains_key(OFFSETS_TOPIC) {
        return Ok(());
    }
    let topic = NewTopic {
        name: OFFSETS_TOPIC.to_string(),
        partitions,
        replication: Replication::Default,
        configs: group::offsets_topic_configs(&shard.group_config),
    };
    let planned =
        vec![plan_topic(&metadata, topic, true, None).map(|t| Some(Command::CreateTopic(t)))];
    match propose_planned(shard, planned).await.pop() {
        // Another proposal made it first.
        Some(Err(e)) if e.code == ResponseError::TopicAlreadyExists => Ok(()),
        Some(result) => result,
        None => Ok(()),
    }
}

pub async fn delete_topics(shard: &Rc<Shard>, names: Vec<String>) -> Vec<TopicResult> {
    let metadata = shard.metadata();
    let planned = names
        .into_iter()
        .map(|name| match metadata.topics.get(&name) {
            Some(t) if !t.internal => Ok(Some(Command::DeleteTopic { name, id: t.id })),
            Some(_) => Err(TopicError::new(
                ResponseError::InvalidRequest,
                format!("{name} is internal to the broker"),
            )),
            None => Err(unknown_topic(&name)),
        })
        .collect();
    propose_planned(shard, planned).await
}

/// A topic to grow: its name, its partition count afterwards, and the new partitions' replicas
/// if the client chose them.
pub type NewPartitions = (String, i32, Option<Vec<Vec<NodeId>>>);

pub async fn add_partitions(
    shard: &Rc<Shard>,
    changes: Vec<NewPartitions>,
    validate_only: bool,
) -> Vec<TopicResult> {
    let metadata = shard.metadata();
    let planned = changes
        .into_iter()
        .map(|(name, total, assigned)| {
            let topic = visible(&metadata, &name)?;
            let current = topic.partition_count();
            if total <= current {
                return Err(TopicError::new(
                    ResponseError::InvalidPartitions,
                    format!("{name} has {current} partitions: ask for more than that"),
                ));
            }
            if total > MAX_PARTITIONS {
                return Err(too_many_partitions(total));
            }
            let factor = topic.partitions.first().map_or(1, |p| p.replicas.len());
            let partitions = match assigned {
                None => place(&metadata, topic.id, current, total - current, factor)?,
                Some(assigned) if assigned.len() as i32 != total - current => {
                    return Err(TopicError::new(
                        ResponseError::InvalidReplicaAssignment,
                        format!(
                            "increasing the number of partitions by {} but {} assignments provided",
                            total - current,
                            assigned.len()
                        ),
                    ));
                }
                Some(assigned) => {
                    let placed = assigned_replicas(&metadata, assigned)?;
                    if placed.iter().any(|p| p.replicas.len() != factor) {
                        return Err(TopicError::new(
                            ResponseError::InvalidReplicaAssignment,
                            format!("{name} has {factor} replicas per partition: assign as many"),
                        ));
                    }
                    placed
                }
            };
            Ok((!validate_only).then(|| Command::AddPartitions {
                name: name.clone(),
                id: topic.id,
                partitions,
            }))
        })
        .collect();
    propose_planned(shard, planned).await
}

pub async fn alter_configs(
    shard: &Rc<Shard>,
    changes: Vec<(String, Vec<ConfigOp>)>,
    validate_only: bool,
) -> Vec<TopicResult> {
    let metadata = shard.metadata();
    let defaults = &shard.config.topic_defaults;
    let inherited = resource_config::inherited(&metadata, shard.node());
    let planned = changes
        .into_iter()
        .map(|(name, ops)| {
            let topic = visible(&metadata, &name)?;
            let mut configs = topic.configs.clone();
            let base =
                |key: &str| topic_config::value_of(key, &BTreeMap::new(), &inherited, defaults);
            let rules = config_ops::Rules {
                check: &topic_config::check,
                check_name: &topic_config::check_name,
                is_list: &topic_config::is_list,
                inherited: &base,
            };
            config_ops::apply(&mut configs, ops, &rules).map_err(invalid_config)?;
            Ok((!validate_only).then(|| Command::SetTopicConfigs {
                name: name.clone(),
                id: topic.id,
                configs,
            }))
        })
        .collect();
    propose_planned(shard, planned).await
}

/// Changes the run-time settings of brokers and groups (each change checked on its own; a
/// refused one changes nothing of its resource).
pub async fn alter_resource_configs(
    shard: &Rc<Shard>,
    changes: Vec<(ConfigResource, Vec<ConfigOp>)>,
    validate_only: bool,
) -> Vec<TopicResult> {
    let metadata = shard.metadata();
    let defaults = &shard.config.topic_defaults;
    let inherited = resource_config::inherited(&metadata, shard.node());
    let planned = changes
        .into_iter()
        .map(|(resource, ops)| {
            let mut configs = metadata
                .resource_configs
                .get(&resource)
                .cloned()
                .unwrap_or_default();
            let base = |name: &str| match &resource {
                ConfigResource::Broker(_) => {
                    topic_config::describe_broker_defaults(&inherited, defaults)
                        .into_iter()
                        .find(|d| d.name == name)
                        .map(|d| d.value)
                }
                ConfigResource::Group(_) => None,
            };
            let check = |name: &str, value: &str| resource_config::check(&resource, name, value);
            let check_name = |name: &str| resource_config::check_name(&resource, name);
            let rules = config_ops::Rules {
                check: &check,
                check_name: &check_name,
                is_list: &topic_config::is_list,
                inherited: &base,
            };
            config_ops::apply(&mut configs, ops, &rules).map_err(invalid_config)?;
            resource_config::check_set(&resource, &configs).map_err(invalid_config)?;
            Ok((!validate_only).then(|| Command::SetResourceConfigs {
                resource: resource.clone(),
                configs,
            }))
        })
        .collect();
    propose_planned(shard, planned).await
}

/// Takes the next block of producer ids; it is committed before this returns, so no later run
/// takes it again.
pub async fn take_producer_id_block(shard: &Rc<Shard>) -> Result<u64, TopicError> {
    let outcomes: Outcomes = controller::propose(shard, vec![Command::TakeProducerIdBlock]).await?;
    match outcomes.into_iter().next() {
        Some(Ok(Applied::ProducerIdBlock(block))) => Ok(block),
        Some(Err(e)) => Err(e),
        _ => Err(TopicError::new(
            ResponseError::UnknownServerError,
            "no producer id block",
        )),
    }
}

/// A new topic, checked and placed; `default_factor` is the broker's default replication
/// factor, if it sets one.
fn plan_topic(
    metadata: &ClusterMetadata,
    t: NewTopic,
    internal: bool,
    default_factor: Option<i16>,
) -> Result<Topic, TopicError> {
    check_topic_name(&t.name)?;
    if metadata.topics.contains_key(&t.name) {
        return Err(TopicError::new(
            ResponseError::TopicAlreadyExists,
            format!("topic {} already exists", t.name),
        ));
    }
    for (key, value) in &t.configs {
        topic_config::check(key, value).map_err(invalid_config)?;
    }
    let id = TopicId(uuid::Uuid::new_v4());
    let partitions = match t.replication {
        Replication::Assigned(assigned) => assigned_replicas(metadata, assigned)?,
        Replication::Default | Replication::Factor(_) => {
            if t.partitions < 1 {
                return Err(TopicError::new(
                    ResponseError::InvalidPartitions,
                    "a topic needs at least one partition",
                ));
            }
            let live = metadata.live_brokers().count();
            let asked = match (&t.replication, default_factor) {
                (Replication::Default, Some(f)) => Replication::Factor(f),
                (other, _) => other.clone(),
            };
            let factor = match asked {
                Replication::Factor(f) if f >= 1 => usize::try_from(f).unwrap_or(usize::MAX),
                Replication::Factor(_) => {
                    return Err(TopicError::new(
                        ResponseError::InvalidReplicationFactor,
                        "replication factor must be at least 1",
                    ));
                }
                _ => live.clamp(1, DEFAULT_REPLICATION_FACTOR_MAX),
            };
            place(metadata, id, 0, t.partitions, factor)?
        }
    };
    if partitions.len() > MAX_PARTITIONS as usize {
        return Err(too_many_partitions(partitions.len() as i32));
    }
    Ok(Topic {
        name: t.name,
        id,
        partitions,
        configs: t.configs,
        internal,
    })
}

/// `count` partitions from index `first`, `factor` replicas each, on the live brokers.
fn place(
    metadata: &ClusterMetadata,
    id: TopicId,
    first: i32,
    count: i32,
    factor: usize,
) -> Result<Vec<PartitionState>, TopicError> {
    if count > MAX_PARTITIONS {
        return Err(too_many_partitions(count));
    }
    let brokers: Vec<NodeId> = metadata.live_brokers().map(|b| b.id).collect();
    if factor > brokers.len() {
        return Err(TopicError::new(
            ResponseError::InvalidReplicationFactor,
            format!(
                "replication factor {factor} is larger than the {} broker(s) available",
                brokers.len()
            ),
        ));
    }
    let start = model::placement::start_of(id, brokers.len());
    Ok(model::placement::replicas(
        &brokers, start, first, count, factor,
    ))
}

fn assigned_replicas(
    metadata: &ClusterMetadata,
    assigned: Vec<Vec<NodeId>>,
) -> Result<Vec<PartitionState>, TopicError> {
    let bad = |message: String| TopicError::new(ResponseError::InvalidReplicaAssignment, message);
    let Some(factor) = assigned.first().map(Vec::len) else {
        return Err(bad("no partitions assigned".into()));
    };
    assigned
        .into_iter()
        .enumerate()
        .map(|(i, replicas)| {
            let mut distinct = replicas.clone();
            distinct.sort_unstable();
            distinct.dedup();
            if replicas.is_empty() || distinct.len() != replicas.len() || replicas.len() != factor {
                return Err(bad(format!(
                    "partition {i}: give {factor} distinct replicas, as for partition 0"
                )));
            }
            if let Some(n) = replicas
                .iter()
                .find(|n| metadata.brokers.get(n).is_none_or(|b| b.fenced))
            {
                return Err(bad(format!(
                    "partition {i}: broker {n} is not a live broker"
                )));
            }
            Ok(PartitionState::new(replicas))
        })
        .collect()
}

fn too_many_partitions(n: i32) -> TopicError {
    TopicError::new(
        ResponseError::InvalidPartitions,
        format!("{n} partitions: at most {MAX_PARTITIONS} per topic"),
    )
}

fn invalid_config(message: String) -> TopicError {
    TopicError::new(ResponseError::InvalidConfig, message)
}

fn unknown_topic(name: &str) -> TopicError {
    TopicError::new(
        ResponseError::UnknownTopicOrPartition,
        format!("topic {name} does not exist"),
    )
}

fn visible<'m>(metadata: &'m ClusterMetadata, name: &str) -> Result<&'m Topic, TopicError> {
    metadata
        .topics
        .get(name)
        .map(|t| &**t)
        .filter(|t| !t.internal)
        .ok_or_else(|| unknown_topic(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::BrokerRegistration;

    #[test]
    fn topic_names_follow_kafka_rules() {
        assert!(check_topic_name("orders.v2_eu-1").is_ok());
        for bad in ["", ".", "..", "a b", "a/b", &"x".repeat(250)] {
            assert_eq!(
                check_topic_name(bad).unwrap_err().code,
                ResponseError::InvalidTopicException
            );
        }
    }

    fn cluster(nodes: i32) -> ClusterMetadata {
        let mut m = ClusterMetadata::new("c".into());
        for id in 1..=nodes {
            m.brokers.insert(
                NodeId(id),
                BrokerRegistration {
                    id: NodeId(id),
                    host: "127.0.0.1".into(),
                    port: 9092,
                    cluster_listener: None,
                    shards: 1,
                    rack: None,
                    fenced: false,
                    replication_ports: Vec::new(),
                },
            );
        }
        m
    }

    fn new_topic(replication: Replication) -> NewTopic {
        NewTopic {
            name: "t".into(),
            partitions: 3,
            replication,
            configs: BTreeMap::new(),
        }
    }

    #[test]
    fn replication_factors_are_checked_against_the_live_brokers() {
        let m = cluster(1);
        let t = plan_topic(&m, new_topic(Replication::Default), false, None).unwrap();
        assert!(t.partitions.iter().all(|p| p.replicas == [NodeId(1)]));
        let e = plan_topic(&m, new_topic(Replication::Factor(2)), false, None).unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidReplicationFactor);
        let e = plan_topic(&m, new_topic(Replication::Factor(0)), false, None).unwrap_err();
        assert_eq!(e.code, ResponseError::InvalidReplicationFactor);

        let m = cluster(5);
        let t = plan_topic(&m, new_topic(Replication::Default), false, None).unwrap();
        assert!(t.partitions.iter().all(|p| p.replicas.len() == 3));
        let leaders: std::collections::BTreeSet<_> =
            t.partitions.iter().map(|p| p.leader).collect();
        assert_eq!(leaders.len(), 3, "leaders spread over brokers");
        // --default-replication-factor applies where the request leaves it to the broker.
        let t = plan_topic(&m, new_topic(Replication::Default), false, Some(2)).unwrap();
        assert!(t.partitions.iter().all(|p| p.replicas.len() == 2));
        let t = plan_topic(&m, new_topic(Replication::Factor(1)), false, Some(2)).unwrap();
        assert!(t.partitions.iter().all(|p| p.replicas.len() == 1));
    }

    #[test]
    fn assignments_need_live_distinct_replicas() {
        let m = cluster(2);
        let ok = Replication::Assigned(vec![vec![NodeId(2), NodeId(1)]]);
        let t = plan_topic(&m, new_topic(ok), false, None).unwrap();
        assert_eq!(t.partitions[0].leader, Some(NodeId(2)));
        for bad in [
            vec![vec![NodeId(1), NodeId(1)]],
            vec![vec![NodeId(3)]],
            vec![vec![NodeId(1)], vec![NodeId(1), NodeId(2)]],
        ] {
            let e = plan_topic(&m, new_topic(Replication::Assigned(bad)), false, None).unwrap_err();
            assert_eq!(e.code, ResponseError::InvalidReplicaAssignment);
        }
    }
}
