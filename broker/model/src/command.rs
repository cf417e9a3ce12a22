//! Changes to the metadata as data: a [`Command`] can be written to the controller's Raft log,
//! sent to another node, or fed to a simulator, and [`apply`] is a pure function of the metadata
//! and the command. The proposer supplies everything non-deterministic (a new topic's id, its
//! placement), and checks a change against the latest metadata before proposing it; `apply`
//! checks again, because other commands may have been committed in between, and every node
//! reaches the same verdict.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::ids::{NodeId, TopicId};
use crate::metadata::{BrokerRegistration, ClusterMetadata, ConfigResource, PartitionState, Topic};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// A broker (re)registered: it may be handed partitions again.
    RegisterBroker(BrokerRegistration),
    /// A broker missed its session timeout or shut down: it leads nothing and is handed nothing
    /// until it registers again.
    FenceBroker(NodeId),
    /// A new topic, with its id and every partition's replicas chosen by the proposer.
    CreateTopic(Topic),
    DeleteTopic {
        name: String,
        id: TopicId,
    },
    /// Partitions appended to a topic, placed by the proposer.
    AddPartitions {
        name: String,
        id: TopicId,
        partitions: Vec<PartitionState>,
    },
    /// The topic's whole set of explicit settings, replaced.
    SetTopicConfigs {
        name: String,
        id: TopicId,
        configs: BTreeMap<String, String>,
    },
    /// A partition's new leader, ISR or replicas (Kafka's AlterPartition and elections).
    ChangePartition {
        name: String,
        id: TopicId,
        partition: i32,
        state: PartitionState,
    },
    /// The next block of producer ids, taken for one shard of one node.
    TakeProducerIdBlock,
    /// A broker's or group's whole set of run-time settings, replaced; empty removes them.
    SetResourceConfigs {
        resource: ConfigResource,
        configs: BTreeMap<String, String>,
    },
}

/// What applying a command did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// The metadata already said so (a broker registering again with the same details).
    Unchanged,
    Changed,
    /// The block of producer ids now taken.
    ProducerIdBlock(u64),
}

/// Why a command was refused; the metadata is then unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("topic {0} already exists")]
    TopicExists(String),
    #[error("topic {0} does not exist (or was re-created)")]
    UnknownTopic(String),
    #[error("topic {topic} has no partition {partition}")]
    UnknownPartition { topic: String, partition: i32 },
    #[error("node {0} is not a registered broker")]
    UnknownBroker(NodeId),
    #[error("node {0} is fenced: it cannot join an ISR or lead")]
    FencedBroker(NodeId),
    #[error("a partition of {0} has no replicas, or a replica twice")]
    BadReplicas(String),
    #[error("partition {topic}-{partition}: epochs must only grow ({reason})")]
    StaleEpoch {
        topic: String,
        partition: i32,
        reason: &'static str,
    },
    #[error("producer ids used up")]
    ProducerIdsExhausted,
}

/// Applies `command` to `metadata`: all of it or, with an error, none of it. Every change
/// advances `metadata.version` by one.
pub fn apply(metadata: &mut ClusterMetadata, command: &Command) -> Result<Applied, ApplyError> {
    let applied = change(metadata, command)?;
    if applied != Applied::Unchanged {
        metadata.version += 1;
    }
    Ok(applied)
}

fn change(m: &mut ClusterMetadata, command: &Command) -> Result<Applied, ApplyError> {
    match command {
        Command::RegisterBroker(broker) => {
            if m.brokers.get(&broker.id) == Some(broker) {
                return Ok(Applied::Unchanged);
            }
            m.brokers.insert(broker.id, broker.clone());
            Ok(Applied::Changed)
        }
        Command::FenceBroker(id) => {
            let broker = m
                .brokers
                .get_mut(id)
                .ok_or(ApplyError::UnknownBroker(*id))?;
            if broker.fenced {
                return Ok(Applied::Unchanged);
            }
            broker.fenced = true;
            Ok(Applied::Changed)
        }
        Command::CreateTopic(topic) => {
            if m.topics.contains_key(&topic.name) {
                return Err(ApplyError::TopicExists(topic.name.clone()));
            }
            if topic.partitions.is_empty() {
                return Err(ApplyError::BadReplicas(topic.name.clone()));
            }
            check_partitions(m, &topic.name, &topic.partitions)?;
            m.topics.insert(topic.name.clone(), Arc::new(topic.clone()));
            Ok(Applied::Changed)
        }
        Command::DeleteTopic { name, id } => {
            topic_mut(m, name, *id)?;
            m.topics.remove(name);
            Ok(Applied::Changed)
        }
        Command::AddPartitions {
            name,
            id,
            partitions,
        } => {
            check_partitions(m, name, partitions)?;
            let topic = topic_mut(m, name, *id)?;
            topic.partitions.extend(partitions.iter().cloned());
            Ok(Applied::Changed)
        }
        Command::SetTopicConfigs { name, id, configs } => {
            let topic = topic_mut(m, name, *id)?;
            if topic.configs == *configs {
                return Ok(Applied::Unchanged);
            }
            topic.configs = configs.clone();
            Ok(Applied::Changed)
        }
        Command::ChangePartition {
            name,
            id,
            partition,
            state,
        } => {
            check_partitions(m, name, std::slice::from_ref(state))?;
            let fenced: Vec<NodeId> = (state.isr.iter().chain(&state.leader))
                .filter(|n| m.brokers.get(n).is_none_or(|b| b.fenced))
                .copied()
                .collect();
            let topic = topic_mut(m, name, *id)?;
            let unknown = || ApplyError::UnknownPartition {
                topic: name.clone(),
                partition: *partition,
            };
            let index = usize::try_from(*partition).map_err(|_| unknown())?;
            let current = topic.partitions.get_mut(index).ok_or_else(unknown)?;
            let stale = |reason| ApplyError::StaleEpoch {
                topic: name.clone(),
                partition: *partition,
                reason,
            };
            if state.partition_epoch <= current.partition_epoch {
                return Err(stale("the partition epoch did not grow"));
            }
            if state.leader_epoch < current.leader_epoch
                || (state.leader != current.leader && state.leader_epoch == current.leader_epoch)
            {
                return Err(stale("a new leader needs a new leader epoch"));
            }
            // A fenced broker may stay the last member of an ISR, but nothing makes it a new
            // member or a new leader: that it is live was checked against older metadata.
            let joins = state.isr.iter().filter(|n| !current.isr.contains(n));
            let new_leader = state.leader.filter(|_| state.leader != current.leader);
            if let Some(n) = joins
                .chain(new_leader.as_ref())
                .find(|n| fenced.contains(n))
            {
                return Err(ApplyError::FencedBroker(*n));
            }
            *current = state.clone();
            Ok(Applied::Changed)
        }
        Command::SetResourceConfigs { resource, configs } => {
            let current = m.resource_configs.get(resource);
            if current.map_or(configs.is_empty(), |c| c == configs) {
                return Ok(Applied::Unchanged);
            }
            if configs.is_empty() {
                m.resource_configs.remove(resource);
            } else {
                m.resource_configs.insert(resource.clone(), configs.clone());
            }
            Ok(Applied::Changed)
        }
        Command::TakeProducerIdBlock => {
            let next = m
                .producer_id_block
                .checked_add(1)
                .ok_or(ApplyError::ProducerIdsExhausted)?;
            m.producer_id_block = next;
            Ok(Applied::ProducerIdBlock(next))
        }
    }
}

/// The topic named `name` with id `id`, for changing: not one deleted and created again since
/// the command was proposed.
fn topic_mut<'m>(
    m: &'m mut ClusterMetadata,
    name: &str,
    id: TopicId,
) -> Result<&'m mut Topic, ApplyError> {
    match m.topics.get_mut(name) {
        Some(topic) if topic.id == id => Ok(Arc::make_mut(topic)),
        _ => Err(ApplyError::UnknownTopic(name.to_string())),
    }
}

/// Every partition has distinct, registered replicas, and its ISR and leader are among them.
fn check_partitions(
    m: &ClusterMetadata,
    topic: &str,
    partitions: &[PartitionState],
) -> Result<(), ApplyError> {
    for p in partitions {
        let mut replicas = p.replicas.clone();
        replicas.sort_unstable();
        replicas.dedup();
        let consistent = !p.replicas.is_empty()
            && replicas.len() == p.replicas.len()
            && p.isr.iter().all(|n| p.is_replica(*n))
            && p.leader.is_none_or(|l| p.isr.contains(&l));
        if !consistent {
            return Err(ApplyError::BadReplicas(topic.to_string()));
        }
        if let Some(unknown) = p.replicas.iter().find(|n| !m.brokers.contains_key(n)) {
            return Err(ApplyError::UnknownBroker(*unknown));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{LeaderEpoch, PartitionEpoch};

    fn broker(id: i32) -> BrokerRegistration {
        BrokerRegistration {
            id: NodeId(id),
            host: "127.0.0.1".into(),
            port: 9092,
            cluster_listener: None,
            shards: 2,
            rack: None,
            fenced: false,
            replication_ports: Vec::new(),
        }
    }

    fn topic(name: &str, replicas: &[i32]) -> Topic {
        Topic {
            name: name.into(),
            id: TopicId(uuid::Uuid::from_u128(name.len() as u128 + 1)),
            partitions: vec![PartitionState::new(
                replicas.iter().map(|&r| NodeId(r)).collect(),
            )],
            configs: BTreeMap::new(),
            internal: false,
        }
    }

    fn cluster() -> ClusterMetadata {
        let mut m = ClusterMetadata::new("c".into());
        for id in 1..=3 {
            apply(&mut m, &Command::RegisterBroker(broker(id))).unwrap();
        }
        m
    }

    #[test]
    fn a_refused_command_changes_nothing_and_a_repeat_is_unchanged() {
        let mut m = cluster();
        assert_eq!(m.version, 3);
        assert_eq!(
            apply(&mut m, &Command::RegisterBroker(broker(2))),
            Ok(Applied::Unchanged)
        );
        let t = topic("orders", &[1, 2, 3]);
        apply(&mut m, &Command::CreateTopic(t.clone())).unwrap();
        let before = m.clone();
        assert_eq!(
            apply(&mut m, &Command::CreateTopic(t.clone())),
            Err(ApplyError::TopicExists("orders".into()))
        );
        assert_eq!(
            apply(&mut m, &Command::CreateTopic(topic("other", &[1, 9]))),
            Err(ApplyError::UnknownBroker(NodeId(9)))
        );
        assert_eq!(
            apply(&mut m, &Command::CreateTopic(topic("dup", &[1, 1]))),
            Err(ApplyError::BadReplicas("dup".into()))
        );
        // A command proposed for a topic that was since re-created is refused.
        let stale = Command::DeleteTopic {
            name: "orders".into(),
            id: TopicId(uuid::Uuid::from_u128(99)),
        };
        assert_eq!(
            apply(&mut m, &stale),
            Err(ApplyError::UnknownTopic("orders".into()))
        );
        assert_eq!(m, before);
    }

    #[test]
    fn partition_changes_need_growing_epochs() {
        let mut m = cluster();
        let t = topic("orders", &[1, 2, 3]);
        apply(&mut m, &Command::CreateTopic(t.clone())).unwrap();
        let mut state = t.partitions[0].clone();
        state.leader = Some(NodeId(2));
        state.isr = vec![NodeId(2), NodeId(3)];
        state.partition_epoch = PartitionEpoch(1);
        let change = |state: &PartitionState| Command::ChangePartition {
            name: "orders".into(),
            id: t.id,
            partition: 0,
            state: state.clone(),
        };
        assert!(matches!(
            apply(&mut m, &change(&state)),
            Err(ApplyError::StaleEpoch { .. })
        ));
        state.leader_epoch = LeaderEpoch(1);
        assert_eq!(apply(&mut m, &change(&state)), Ok(Applied::Changed));
        assert!(matches!(
            apply(&mut m, &change(&state)),
            Err(ApplyError::StaleEpoch { .. })
        ));
        // A leader outside the ISR is refused.
        state.partition_epoch = PartitionEpoch(2);
        state.leader = Some(NodeId(1));
        state.leader_epoch = LeaderEpoch(2);
        assert_eq!(
            apply(&mut m, &change(&state)),
            Err(ApplyError::BadReplicas("orders".into()))
        );
        assert_eq!(m.topics["orders"].partitions[0].leader, Some(NodeId(2)));

        // A fenced broker stays in the ISR it is in, but joins none and leads nothing new.
        apply(&mut m, &Command::FenceBroker(NodeId(3))).unwrap();
        let mut keeps = m.topics["orders"].partitions[0].clone();
        keeps.partition_epoch = PartitionEpoch(2);
        assert_eq!(apply(&mut m, &change(&keeps)), Ok(Applied::Changed));
        let mut leads = keeps.clone();
        leads.partition_epoch = PartitionEpoch(3);
        leads.leader = Some(NodeId(3));
        leads.leader_epoch = LeaderEpoch(2);
        assert_eq!(
            apply(&mut m, &change(&leads)),
            Err(ApplyError::FencedBroker(NodeId(3)))
        );
        let mut joins = keeps.clone();
        joins.partition_epoch = PartitionEpoch(3);
        joins.isr = vec![NodeId(2)];
        apply(&mut m, &change(&joins)).unwrap();
        joins.partition_epoch = PartitionEpoch(4);
        joins.isr = vec![NodeId(2), NodeId(3)];
        assert_eq!(
            apply(&mut m, &change(&joins)),
            Err(ApplyError::FencedBroker(NodeId(3)))
        );
    }

    #[test]
    fn resource_configs_are_replaced_whole_and_removed_when_empty() {
        let mut m = cluster();
        let resource = ConfigResource::Broker(String::new());
        let mut configs = BTreeMap::new();
        configs.insert("log.retention.ms".to_string(), "1000".to_string());
        let set = |configs: &BTreeMap<String, String>| Command::SetResourceConfigs {
            resource: resource.clone(),
            configs: configs.clone(),
        };
        assert_eq!(apply(&mut m, &set(&configs)), Ok(Applied::Changed));
        assert_eq!(apply(&mut m, &set(&configs)), Ok(Applied::Unchanged));
        assert_eq!(m.resource_configs[&resource], configs);
        assert_eq!(apply(&mut m, &set(&BTreeMap::new())), Ok(Applied::Changed));
        assert!(m.resource_configs.is_empty());
        assert_eq!(
            apply(&mut m, &set(&BTreeMap::new())),
            Ok(Applied::Unchanged)
        );
    }

    #[test]
    fn producer_id_blocks_are_taken_once_each() {
        let mut m = cluster();
        assert_eq!(
            apply(&mut m, &Command::TakeProducerIdBlock),
            Ok(Applied::ProducerIdBlock(1))
        );
        assert_eq!(
            apply(&mut m, &Command::TakeProducerIdBlock),
            Ok(Applied::ProducerIdBlock(2))
        );
        m.producer_id_block = u64::MAX;
        assert_eq!(
            apply(&mut m, &Command::TakeProducerIdBlock),
            Err(ApplyError::ProducerIdsExhausted)
        );
    }
}
