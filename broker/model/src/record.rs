//! A command as bytes: one FlatBuffers record (`schema/fbs/metadata.fbs`, `Record`), the unit of
//! the controller's replicated log. Reading one back trusts nothing: the verifier checks every
//! offset and length first, and every value is checked as it becomes a typed one.

use schema::metadata as fb;

use crate::command::Command;
use crate::ids::{NodeId, TopicId};
use crate::snapshot::{
    decode_broker, decode_configs, decode_partition, decode_resource_configs, decode_topic,
    decode_uuid, encode_broker, encode_configs, encode_partition, encode_resource_configs,
    encode_topic, encode_uuid,
};

/// Marks a record (the snapshot's is "SPMD").
const IDENTIFIER: &str = "SPMR";

pub fn encode(command: &Command) -> Vec<u8> {
    let mut b = flatbuffers::FlatBufferBuilder::new();
    let (kind, change) = match command {
        Command::RegisterBroker(broker) => {
            let broker = encode_broker(&mut b, broker);
            let args = fb::RegisterBrokerArgs {
                broker: Some(broker),
            };
            let t = fb::RegisterBroker::create(&mut b, &args);
            (fb::Change::RegisterBroker, t.as_union_value())
        }
        Command::FenceBroker(id) => {
            let t = fb::FenceBroker::create(&mut b, &fb::FenceBrokerArgs { id: id.0 });
            (fb::Change::FenceBroker, t.as_union_value())
        }
        Command::CreateTopic(topic) => {
            let topic = encode_topic(&mut b, topic);
            let args = fb::CreateTopicArgs { topic: Some(topic) };
            let t = fb::CreateTopic::create(&mut b, &args);
            (fb::Change::CreateTopic, t.as_union_value())
        }
        Command::DeleteTopic { name, id } => {
            let name = b.create_string(name);
            let id = encode_uuid(*id);
            let args = fb::DeleteTopicArgs {
                name: Some(name),
                id: Some(&id),
            };
            let t = fb::DeleteTopic::create(&mut b, &args);
            (fb::Change::DeleteTopic, t.as_union_value())
        }
        Command::AddPartitions {
            name,
            id,
            partitions,
        } => {
            let name = b.create_string(name);
            let partitions: Vec<_> = partitions
                .iter()
                .map(|p| encode_partition(&mut b, p))
                .collect();
            let partitions = b.create_vector(&partitions);
            let id = encode_uuid(*id);
            let args = fb::AddPartitionsArgs {
                name: Some(name),
                id: Some(&id),
                partitions: Some(partitions),
            };
            let t = fb::AddPartitions::create(&mut b, &args);
            (fb::Change::AddPartitions, t.as_union_value())
        }
        Command::SetTopicConfigs { name, id, configs } => {
            let name = b.create_string(name);
            let configs = encode_configs(&mut b, configs);
            let id = encode_uuid(*id);
            let args = fb::SetTopicConfigsArgs {
                name: Some(name),
                id: Some(&id),
                configs: Some(configs),
            };
            let t = fb::SetTopicConfigs::create(&mut b, &args);
            (fb::Change::SetTopicConfigs, t.as_union_value())
        }
        Command::ChangePartition {
            name,
            id,
            partition,
            state,
        } => {
            let name = b.create_string(name);
            let state = encode_partition(&mut b, state);
            let id = encode_uuid(*id);
            let args = fb::ChangePartitionArgs {
                name: Some(name),
                id: Some(&id),
                partition: *partition,
                state: Some(state),
            };
            let t = fb::ChangePartition::create(&mut b, &args);
            (fb::Change::ChangePartition, t.as_union_value())
        }
        Command::TakeProducerIdBlock => {
            let t = fb::TakeProducerIdBlock::create(&mut b, &fb::TakeProducerIdBlockArgs {});
            (fb::Change::TakeProducerIdBlock, t.as_union_value())
        }
        Command::SetResourceConfigs { resource, configs } => {
            let resource = encode_resource_configs(&mut b, resource, configs);
            let args = fb::SetResourceConfigsArgs {
                resource: Some(resource),
            };
            let t = fb::SetResourceConfigs::create(&mut b, &args);
            (fb::Change::SetResourceConfigs, t.as_union_value())
        }
    };
    let record = fb::Record::create(
        &mut b,
        &fb::RecordArgs {
            change_type: kind,
            change: Some(change),
        },
    );
    b.finish(record, Some(IDENTIFIER));
    b.finished_data().to_vec()
}

pub fn decode(bytes: &[u8]) -> Result<Command, String> {
    // The identifier check reads 8 bytes without looking at the length (it would panic).
    if bytes.len() < 8 || !flatbuffers::buffer_has_identifier(bytes, IDENTIFIER, false) {
        return Err("missing the SPMR identifier".into());
    }
    let record = flatbuffers::root::<fb::Record>(bytes).map_err(|e| e.to_string())?;
    let missing = || {
        format!(
            "a record of kind {:?} without its body",
            record.change_type()
        )
    };
    let command = match record.change_type() {
        fb::Change::RegisterBroker => {
            let c = record.change_as_register_broker().ok_or_else(missing)?;
            Command::RegisterBroker(decode_broker(c.broker())?)
        }
        fb::Change::FenceBroker => {
            let c = record.change_as_fence_broker().ok_or_else(missing)?;
            Command::FenceBroker(NodeId(c.id()))
        }
        fb::Change::CreateTopic => {
            let c = record.change_as_create_topic().ok_or_else(missing)?;
            Command::CreateTopic(decode_topic(c.topic(), None)?)
        }
        fb::Change::DeleteTopic => {
            let c = record.change_as_delete_topic().ok_or_else(missing)?;
            Command::DeleteTopic {
                name: c.name().to_string(),
                id: TopicId(decode_uuid(c.id())),
            }
        }
        fb::Change::AddPartitions => {
            let c = record.change_as_add_partitions().ok_or_else(missing)?;
            Command::AddPartitions {
                name: c.name().to_string(),
                id: TopicId(decode_uuid(c.id())),
                partitions: c
                    .partitions()
                    .iter()
                    .map(decode_partition)
                    .collect::<Result<_, _>>()?,
            }
        }
        fb::Change::SetTopicConfigs => {
            let c = record.change_as_set_topic_configs().ok_or_else(missing)?;
            Command::SetTopicConfigs {
                name: c.name().to_string(),
                id: TopicId(decode_uuid(c.id())),
                configs: decode_configs(c.configs()),
            }
        }
        fb::Change::ChangePartition => {
            let c = record.change_as_change_partition().ok_or_else(missing)?;
            Command::ChangePartition {
                name: c.name().to_string(),
                id: TopicId(decode_uuid(c.id())),
                partition: c.partition(),
                state: decode_partition(c.state())?,
            }
        }
        fb::Change::TakeProducerIdBlock => {
            record
                .change_as_take_producer_id_block()
                .ok_or_else(missing)?;
            Command::TakeProducerIdBlock
        }
        fb::Change::SetResourceConfigs => {
            let c = record
                .change_as_set_resource_configs()
                .ok_or_else(missing)?;
            let (resource, configs) = decode_resource_configs(c.resource())?;
            Command::SetResourceConfigs { resource, configs }
        }
        other => return Err(format!("unknown record kind {other:?}")),
    };
    Ok(command)
}

/// Several commands as one entry of the log, committed together: each record after its
/// 4-byte big-endian length.
pub fn encode_all(commands: &[Command]) -> Vec<u8> {
    let mut out = Vec::new();
    for command in commands {
        let record = encode(command);
        let len = u32::try_from(record.len()).expect("a record is far below 4 GiB");
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&record);
    }
    out
}

/// The commands of one entry, in order; refuses the whole entry if any part is not a record.
pub fn decode_all(mut bytes: &[u8]) -> Result<Vec<Command>, String> {
    let mut commands = Vec::new();
    while !bytes.is_empty() {
        let (len, rest) = bytes
            .split_first_chunk::<4>()
            .ok_or("a record length is cut short")?;
        let len = usize::try_from(u32::from_be_bytes(*len)).map_err(|e| e.to_string())?;
        if len > rest.len() {
            return Err(format!("a record of {len} bytes in {} left", rest.len()));
        }
        let (record, rest) = rest.split_at(len);
        commands.push(decode(record)?);
        bytes = rest;
    }
    Ok(commands)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::ids::{LeaderEpoch, PartitionEpoch};
    use crate::metadata::PartitionState;

    fn every_command() -> Vec<Command> {
        let sample = crate::snapshot::tests::sample();
        let topic = (*sample.topics["orders"]).clone();
        let id = topic.id;
        let mut state = PartitionState::new(vec![NodeId(1), NodeId(2)]);
        state.leader_epoch = LeaderEpoch(3);
        state.partition_epoch = PartitionEpoch(5);
        state.isr = vec![NodeId(2)];
        state.leader = Some(NodeId(2));
        let mut configs = BTreeMap::new();
        configs.insert("retention.ms".to_string(), "5".to_string());
        vec![
            Command::RegisterBroker(sample.brokers[&NodeId(1)].clone()),
            Command::RegisterBroker(sample.brokers[&NodeId(2)].clone()),
            Command::FenceBroker(NodeId(2)),
            Command::CreateTopic(topic),
            Command::DeleteTopic {
                name: "orders".into(),
                id,
            },
            Command::AddPartitions {
                name: "orders".into(),
                id,
                partitions: vec![state.clone(), PartitionState::new(vec![NodeId(1)])],
            },
            Command::SetTopicConfigs {
                name: "orders".into(),
                id,
                configs,
            },
            Command::ChangePartition {
                name: "orders".into(),
                id,
                partition: 1,
                state,
            },
            Command::TakeProducerIdBlock,
            Command::SetResourceConfigs {
                resource: crate::metadata::ConfigResource::Group("g".into()),
                configs: BTreeMap::new(),
            },
        ]
    }

    #[test]
    fn every_command_round_trips() {
        for command in every_command() {
            assert_eq!(decode(&encode(&command)), Ok(command));
        }
    }

    #[test]
    fn damaged_records_are_refused_not_trusted() {
        for command in every_command() {
            let bytes = encode(&command);
            // (Not the last byte: it may be the builder's padding. The controller's log frames
            // each record with its own length and checksum.)
            for cut in [0, 4, 8, bytes.len() / 2] {
                assert!(decode(&bytes[..cut]).is_err(), "{command:?} cut at {cut}");
            }
            // Every single-byte change either fails to decode or decodes to some command: never
            // a panic.
            for i in 0..bytes.len() {
                let mut flipped = bytes.clone();
                flipped[i] ^= 0x5a;
                let _ = decode(&flipped);
            }
        }
        assert!(decode(&crate::snapshot::encode(&crate::snapshot::tests::sample())).is_err());
    }

    #[test]
    fn several_commands_make_one_entry_and_damage_is_refused() {
        let commands = vec![
            Command::TakeProducerIdBlock,
            Command::FenceBroker(NodeId(3)),
        ];
        let entry = encode_all(&commands);
        assert_eq!(decode_all(&entry), Ok(commands));
        assert_eq!(decode_all(&[]), Ok(Vec::new()));
        assert!(decode_all(&entry[..entry.len() - 1]).is_err());
        assert!(decode_all(&[0, 0, 0, 9, 1]).is_err());
    }
}
