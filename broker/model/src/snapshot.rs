//! The metadata as bytes: one FlatBuffers snapshot (`schema/fbs/metadata.fbs`). Reading it back
//! trusts nothing: the verifier checks every offset and length, and every value is checked as it
//! becomes a typed one.

use std::collections::BTreeMap;
use std::sync::Arc;

use schema::metadata as fb;

use crate::ids::{LeaderEpoch, NodeId, PartitionEpoch, TopicId};
use crate::metadata::{BrokerRegistration, ClusterMetadata, ConfigResource, PartitionState, Topic};

pub fn encode(m: &ClusterMetadata) -> Vec<u8> {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let topics: Vec<_> = m.topics.values().map(|t| encode_topic(&mut b, t)).collect();
    let topics = b.create_vector(&topics);
    let brokers: Vec<_> = m
        .brokers
        .values()
        .map(|r| encode_broker(&mut b, r))
        .collect();
    let brokers = b.create_vector(&brokers);
    let resource_configs: Vec<_> = m
        .resource_configs
        .iter()
        .map(|(resource, configs)| encode_resource_configs(&mut b, resource, configs))
        .collect();
    let resource_configs = b.create_vector(&resource_configs);
    let cluster_id = b.create_string(&m.cluster_id);
    let root = fb::Metadata::create(
        &mut b,
        &fb::MetadataArgs {
            version: m.version,
            cluster_id: Some(cluster_id),
            topics: Some(topics),
            producer_id_block: m.producer_id_block,
            brokers: Some(brokers),
            resource_configs: Some(resource_configs),
        },
    );
    b.finish(root, Some("SPMD"));
    b.finished_data().to_vec()
}

pub(crate) fn encode_broker<'b>(
    b: &mut flatbuffers::FlatBufferBuilder<'b>,
    r: &BrokerRegistration,
) -> flatbuffers::WIPOffset<fb::Broker<'b>> {
    let host = b.create_string(&r.host);
    let cluster_listener = r.cluster_listener.as_deref().map(|l| b.create_string(l));
    let rack = r.rack.as_deref().map(|l| b.create_string(l));
    let replication_ports =
        (!r.replication_ports.is_empty()).then(|| b.create_vector(&r.replication_ports));
    fb::Broker::create(
        b,
        &fb::BrokerArgs {
            id: r.id.0,
            host: Some(host),
            port: r.port,
            cluster_listener,
            shards: r.shards,
            rack,
            fenced: r.fenced,
            replication_ports,
        },
    )
}

pub(crate) fn encode_partition<'b>(
    b: &mut flatbuffers::FlatBufferBuilder<'b>,
    p: &PartitionState,
) -> flatbuffers::WIPOffset<fb::PartitionState<'b>> {
    let replicas: Vec<i32> = p.replicas.iter().map(|n| n.0).collect();
    let isr: Vec<i32> = p.isr.iter().map(|n| n.0).collect();
    let replicas = b.create_vector(&replicas);
    let isr = b.create_vector(&isr);
    fb::PartitionState::create(
        b,
        &fb::PartitionStateArgs {
            replicas: Some(replicas),
            isr: Some(isr),
            leader: p.leader.map_or(-1, |l| l.0),
            leader_epoch: p.leader_epoch.0,
            partition_epoch: p.partition_epoch.0,
        },
    )
}

pub(crate) fn encode_configs<'b>(
    b: &mut flatbuffers::FlatBufferBuilder<'b>,
    configs: &BTreeMap<String, String>,
) -> flatbuffers::WIPOffset<
    flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<fb::ConfigEntry<'b>>>,
> {
    let entries: Vec<_> = configs
        .iter()
        .map(|(k, v)| {
            let args = fb::ConfigEntryArgs {
                key: Some(b.create_string(k)),
                value: Some(b.create_string(v)),
            };
            fb::ConfigEntry::create(b, &args)
        })
        .collect();
    b.create_vector(&entries)
}

pub(crate) fn encode_resource_configs<'b>(
    b: &mut flatbuffers::FlatBufferBuilder<'b>,
    resource: &ConfigResource,
    configs: &BTreeMap<String, String>,
) -> flatbuffers::WIPOffset<fb::ResourceConfigs<'b>> {
    let name = b.create_string(resource.name());
    let configs = encode_configs(b, configs);
    fb::ResourceConfigs::create(
        b,
        &fb::ResourceConfigsArgs {
            resource_type: resource.wire_type(),
            name: Some(name),
            configs: Some(configs),
        },
    )
}

pub(crate) fn decode_resource_configs(
    r: fb::ResourceConfigs<'_>,
) -> Result<(ConfigResource, BTreeMap<String, String>), String> {
    let resource = ConfigResource::from_wire(r.resource_type(), r.name())
        .ok_or_else(|| format!("unknown config resource type {}", r.resource_type()))?;
    Ok((resource, decode_configs(r.configs())))
}

pub(crate) fn encode_uuid(id: TopicId) -> fb::Uuid {
    let (high, low) = id.0.as_u64_pair();
    fb::Uuid::new(high, low)
}

pub(crate) fn decode_uuid(id: &fb::Uuid) -> uuid::Uuid {
    uuid::Uuid::from_u64_pair(id.high(), id.low())
}

pub(crate) fn encode_topic<'b>(
    b: &mut flatbuffers::FlatBufferBuilder<'b>,
    t: &Topic,
) -> flatbuffers::WIPOffset<fb::Topic<'b>> {
    let name = b.create_string(&t.name);
    let partitions: Vec<_> = t
        .partitions
        .iter()
        .map(|p| encode_partition(b, p))
        .collect();
    let partitions = b.create_vector(&partitions);
    let configs = encode_configs(b, &t.configs);
    let id = encode_uuid(t.id);
    fb::Topic::create(
        b,
        &fb::TopicArgs {
            name: Some(name),
            id: Some(&id),
            partition_shards: None,
            configs: Some(configs),
            internal: t.internal,
            partitions: Some(partitions),
        },
    )
}

/// Reads a snapshot back. A data directory written by a single-node version before the cluster
/// has no partition states: each of its partitions becomes one replica on `legacy_node`, the
/// node whose directory it is.
pub fn decode(bytes: &[u8], legacy_node: NodeId) -> Result<ClusterMetadata, String> {
    // The identifier check reads 8 bytes without looking at the length (it would panic).
    if bytes.len() < 8 || !fb::metadata_buffer_has_identifier(bytes) {
        return Err("missing the SPMD identifier".into());
    }
    let root = fb::root_as_metadata(bytes).map_err(|e| e.to_string())?;
    let mut topics = BTreeMap::new();
    for t in root.topics().iter().flatten() {
        let topic = decode_topic(t, Some(legacy_node))?;
        if topics.insert(topic.name.clone(), Arc::new(topic)).is_some() {
            return Err(format!("topic {} listed twice", t.name()));
        }
    }
    let mut brokers = BTreeMap::new();
    for r in root.brokers().iter().flatten() {
        let broker = decode_broker(r)?;
        brokers.insert(broker.id, broker);
    }
    let mut resource_configs = BTreeMap::new();
    for r in root.resource_configs().iter().flatten() {
        let (resource, configs) = decode_resource_configs(r)?;
        if !configs.is_empty() {
            resource_configs.insert(resource, configs);
        }
    }
    Ok(ClusterMetadata {
        version: root.version(),
        cluster_id: root.cluster_id().to_string(),
        brokers,
        topics,
        producer_id_block: root.producer_id_block(),
        resource_configs,
    })
}

/// A topic; one written before the cluster (shards but no partition states) is brought forward
/// onto `legacy_node` where that is allowed (snapshots, not log records).
pub(crate) fn decode_topic(t: fb::Topic<'_>, legacy_node: Option<NodeId>) -> Result<Topic, String> {
    let partitions = match (t.partitions(), t.partition_shards(), legacy_node) {
        (Some(states), _, _) => states.iter().map(decode_partition).collect(),
        (None, Some(legacy), Some(node)) => Ok(legacy
            .iter()
            .map(|_| PartitionState::new(vec![node]))
            .collect()),
        _ => Err(format!("topic {} has no partitions", t.name())),
    }?;
    Ok(Topic {
        name: t.name().to_string(),
        id: TopicId(decode_uuid(t.id())),
        partitions,
        configs: decode_configs(t.configs()),
        internal: t.internal(),
    })
}

pub(crate) fn decode_configs(
    configs: Option<flatbuffers::Vector<'_, flatbuffers::ForwardsUOffset<fb::ConfigEntry<'_>>>>,
) -> BTreeMap<String, String> {
    configs
        .iter()
        .flatten()
        .map(|c| (c.key().to_string(), c.value().to_string()))
        .collect()
}

pub(crate) fn decode_broker(r: fb::Broker<'_>) -> Result<BrokerRegistration, String> {
    let broker = BrokerRegistration {
        id: NodeId(r.id()),
        host: r.host().to_string(),
        port: r.port(),
        cluster_listener: r.cluster_listener().map(str::to_string),
        shards: r.shards(),
        rack: r.rack().map(str::to_string),
        fenced: r.fenced(),
        replication_ports: r
            .replication_ports()
            .map(|p| p.iter().collect())
            .unwrap_or_default(),
    };
    if broker.shards == 0 {
        return Err(format!("broker {} has no shards", broker.id));
    }
    if !broker.replication_ports.is_empty()
        && broker.replication_ports.len() != usize::from(broker.shards)
    {
        return Err(format!(
            "broker {} has {} shards but {} replication ports",
            broker.id,
            broker.shards,
            broker.replication_ports.len()
        ));
    }
    Ok(broker)
}

pub(crate) fn decode_partition(p: fb::PartitionState<'_>) -> Result<PartitionState, String> {
    let nodes = |v: flatbuffers::Vector<'_, i32>| v.iter().map(NodeId).collect::<Vec<_>>();
    let state = PartitionState {
        replicas: nodes(p.replicas()),
        isr: nodes(p.isr()),
        leader: (p.leader() >= 0).then_some(NodeId(p.leader())),
        leader_epoch: LeaderEpoch(p.leader_epoch()),
        partition_epoch: PartitionEpoch(p.partition_epoch()),
    };
    if state.replicas.is_empty() {
        return Err("a partition with no replicas".into());
    }
    Ok(state)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn sample() -> ClusterMetadata {
        let mut m = ClusterMetadata::new("cluster-1".into());
        m.version = 7;
        m.producer_id_block = 3;
        for id in [1, 2] {
            m.brokers.insert(
                NodeId(id),
                BrokerRegistration {
                    id: NodeId(id),
                    host: "127.0.0.1".into(),
                    port: 9090 + id as u16,
                    cluster_listener: (id == 1).then(|| "127.0.0.1:9190".into()),
                    shards: 2,
                    rack: (id == 2).then(|| "r2".into()),
                    fenced: id == 2,
                    replication_ports: if id == 1 {
                        vec![9290, 9291]
                    } else {
                        Vec::new()
                    },
                },
            );
        }
        let mut group = BTreeMap::new();
        group.insert(
            "consumer.session.timeout.ms".to_string(),
            "50000".to_string(),
        );
        m.resource_configs
            .insert(ConfigResource::Group("g".to_string()), group.clone());
        m.resource_configs
            .insert(ConfigResource::Broker(String::new()), group);
        for (name, internal) in [("orders", false), ("__consumer_offsets", true)] {
            let mut configs = BTreeMap::new();
            configs.insert("retention.ms".to_string(), "1000".to_string());
            let mut moved = PartitionState::new(vec![NodeId(2), NodeId(1)]);
            moved.leader = None;
            moved.isr = vec![];
            moved.leader_epoch = LeaderEpoch(4);
            moved.partition_epoch = PartitionEpoch(9);
            m.topics.insert(
                name.to_string(),
                Arc::new(Topic {
                    name: name.to_string(),
                    id: TopicId(uuid::Uuid::from_u128(name.len() as u128)),
                    partitions: vec![PartitionState::new(vec![NodeId(1), NodeId(2)]), moved],
                    configs,
                    internal,
                }),
            );
        }
        m
    }

    #[test]
    fn round_trips() {
        let m = sample();
        assert_eq!(decode(&encode(&m), NodeId(0)), Ok(m));
    }

    #[test]
    fn damaged_snapshots_are_refused_not_trusted() {
        let bytes = encode(&sample());
        for cut in [0, 4, 8, bytes.len() / 2] {
            assert!(decode(&bytes[..cut], NodeId(0)).is_err());
        }
        let mut flipped = bytes.clone();
        flipped[4] ^= 0xff;
        assert!(decode(&flipped, NodeId(0)).is_err());
    }

    #[test]
    fn a_broker_registered_before_replication_loads_without_ports() {
        let mut b = flatbuffers::FlatBufferBuilder::new();
        let host = b.create_string("127.0.0.1");
        let broker = fb::Broker::create(
            &mut b,
            &fb::BrokerArgs {
                id: 3,
                host: Some(host),
                port: 9092,
                shards: 2,
                ..Default::default()
            },
        );
        let brokers = b.create_vector(&[broker]);
        let cluster_id = b.create_string("c");
        let root = fb::Metadata::create(
            &mut b,
            &fb::MetadataArgs {
                version: 1,
                cluster_id: Some(cluster_id),
                brokers: Some(brokers),
                ..Default::default()
            },
        );
        b.finish(root, Some("SPMD"));
        let m = decode(b.finished_data(), NodeId(0)).expect("an old snapshot loads");
        assert_eq!(m.brokers[&NodeId(3)].replication_ports, Vec::<u16>::new());
        assert_eq!(m.brokers[&NodeId(3)].shards, 2);
    }

    #[test]
    fn replication_ports_that_do_not_match_the_shards_are_refused() {
        let mut m = sample();
        if let Some(b) = m.brokers.get_mut(&NodeId(1)) {
            b.replication_ports = vec![9290];
        }
        assert!(decode(&encode(&m), NodeId(0)).is_err());
    }

    #[test]
    fn a_single_node_directory_from_before_the_cluster_is_brought_forward() {
        let mut b = flatbuffers::FlatBufferBuilder::new();
        let name = b.create_string("orders");
        let shards = b.create_vector(&[0u16, 1, 0]);
        let id = fb::Uuid::new(1, 2);
        let topic = fb::Topic::create(
            &mut b,
            &fb::TopicArgs {
                name: Some(name),
                id: Some(&id),
                partition_shards: Some(shards),
                ..Default::default()
            },
        );
        let topics = b.create_vector(&[topic]);
        let cluster_id = b.create_string("old");
        let root = fb::Metadata::create(
            &mut b,
            &fb::MetadataArgs {
                version: 4,
                cluster_id: Some(cluster_id),
                topics: Some(topics),
                producer_id_block: 2,
                brokers: None,
                resource_configs: None,
            },
        );
        b.finish(root, Some("SPMD"));
        let m = decode(b.finished_data(), NodeId(5)).unwrap();
        let orders = &m.topics["orders"];
        assert_eq!(orders.partition_count(), 3);
        for p in &orders.partitions {
            assert_eq!(p.replicas, vec![NodeId(5)]);
            assert_eq!(p.leader, Some(NodeId(5)));
        }
        assert_eq!((m.version, m.producer_id_block), (4, 2));
    }
}
