//! DescribeConfigs, IncrementalAlterConfigs and AlterConfigs: the settings of topics, of
//! brokers (their dynamic defaults of topic settings, with the static ones described under
//! Kafka's names) and of groups.

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use net::kafka_protocol::messages::{
    AlterConfigsRequest, AlterConfigsResponse, DescribeConfigsRequest, DescribeConfigsResponse,
    IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, alter_configs_response,
    incremental_alter_configs_response,
};
use net::kafka_protocol::protocol::StrBytes;

use crate::config_ops::ConfigOp;
use crate::metadata::{TopicError, TopicResult};
use crate::proposals;
use crate::resource_config::{self, BROKER, ConfigResource, GROUP, TOPIC};
use crate::shard::Shard;
use crate::topic_config::{self, ConfigSource, ConfigType, Described};

/// Kafka's IncrementalAlterConfigs operations.
const SET: i8 = 0;
const DELETE: i8 = 1;
const APPEND: i8 = 2;
const SUBTRACT: i8 = 3;

type Refusal = (ResponseError, String);

pub fn describe(
    shard: &Shard,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let metadata = shard.metadata();
    let inherited = resource_config::inherited(&metadata, shard.config.node_id);
    let results = request
        .resources
        .into_iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let name = r.resource_name.as_str();
            let rows = match r.resource_type {
                TOPIC => match shard.topic(name).filter(|t| !t.internal) {
                    Some(topic) => Ok(topic_config::describe(
                        &topic.configs,
                        &inherited,
                        &shard.config.topic_defaults,
                    )),
                    None => Err((
                        ResponseError::UnknownTopicOrPartition,
                        format!("topic {name} does not exist"),
                    )),
                },
                // The cluster-wide dynamic defaults: only those set, as Kafka lists them.
                BROKER if name.is_empty() => Ok(topic_config::describe_broker_defaults(
                    &inherited,
                    &shard.config.topic_defaults,
                )
                .into_iter()
                .chain(resource_config::describe_broker_only(
                    &metadata,
                    shard.config.node_id,
                ))
                .filter(|d| d.source == ConfigSource::DynamicDefaultBroker)
                .collect()),
                BROKER => this_broker(shard, name).map(|()| broker_configs(shard, &inherited)),
                GROUP if name.is_empty() => Err((
                    ResponseError::InvalidRequest,
                    "a group's name must not be empty".to_owned(),
                )),
                GROUP => Ok(resource_config::describe_group(
                    metadata
                        .resource_configs
                        .get(&ConfigResource::Group(name.to_owned())),
                )),
                other => Err((
                    ResponseError::InvalidRequest,
                    format!("resource type {other}: only topic, broker and group configs exist"),
                )),
            };
            match rows {
                Ok(rows) => result.with_configs(
                    rows.into_iter()
                        .filter(|d| {
                            r.configuration_keys
                                .as_ref()
                                .is_none_or(|keys| keys.iter().any(|k| k.as_str() == d.name))
                        })
                        .map(|d| row(d, version))
                        .collect(),
                ),
                Err((e, message)) => result
                    .with_error_code(e.code())
                    .with_error_message(Some(StrBytes::from_string(message))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// A BROKER resource names this broker (there are no others).
fn this_broker(shard: &Shard, name: &str) -> Result<(), Refusal> {
    if name == shard.config.node_id.to_string() {
        Ok(())
    } else {
        Err((
            ResponseError::InvalidRequest,
            format!("this is broker {}, not {name}", shard.config.node_id),
        ))
    }
}

/// The broker's settings as Kafka names them: the defaults of topic settings, then its own.
fn broker_configs(shard: &Shard, inherited: &topic_config::Inherited) -> Vec<Described> {
    let config = &shard.config;
    let own = |name: &'static str, value: String, kind: ConfigType| Described {
        name,
        value,
        source: ConfigSource::StaticBroker,
        kind,
    };
    let mut configs = topic_config::describe_broker_defaults(inherited, &config.topic_defaults);
    configs.extend(resource_config::describe_broker_only(
        &shard.metadata(),
        config.node_id,
    ));
    configs.extend([
        own("broker.id", config.node_id.to_string(), ConfigType::Int),
        own("node.id", config.node_id.to_string(), ConfigType::Int),
        own(
            "num.partitions",
            config.topic_defaults.partitions.to_string(),
            ConfigType::Int,
        ),
        own(
            "auto.create.topics.enable",
            config.auto_create_topics.to_string(),
            ConfigType::Boolean,
        ),
        own(
            "socket.request.max.bytes",
            config.request_max_bytes.to_string(),
            ConfigType::Int,
        ),
        own(
            "offsets.topic.num.partitions",
            config.offsets_partitions.to_string(),
            ConfigType::Int,
        ),
        own(
            "group.initial.rebalance.delay.ms",
            config.group_initial_rebalance_delay.as_millis().to_string(),
            ConfigType::Int,
        ),
    ]);
    configs.extend(
        memory_configs(shard)
            .into_iter()
            .map(|(name, value, kind)| own(name, value, kind)),
    );
    configs
}

/// The memory budgets (Kafka's queued.max.request.bytes is the request memory of the whole
/// broker) and what the answering shard has in use of them, for an operator asking why a
/// client is slowed down.
fn memory_configs(shard: &Shard) -> Vec<(&'static str, String, ConfigType)> {
    let memory = &shard.config.memory;
    let budget = |b: &net::MemoryBudget| {
        format!(
            "shard {}: {} of {} bytes in use, {} waiting, {} waited since start",
            shard.id,
            b.used_bytes(),
            b.capacity_bytes(),
            b.waiting_count(),
            b.waited_count()
        )
    };
    vec![
        (
            "queued.max.request.bytes",
            (memory.request_bytes_per_shard * shard.count).to_string(),
            ConfigType::Long,
        ),
        (
            "connections.max.idle.ms",
            memory.connections_max_idle.as_millis().to_string(),
            ConfigType::Long,
        ),
        (
            "spindle.request.read.timeout.ms",
            memory.request_read_timeout.as_millis().to_string(),
            ConfigType::Long,
        ),
        (
            "spindle.fetch.memory.bytes",
            (memory.fetch_bytes_per_shard * shard.count).to_string(),
            ConfigType::Long,
        ),
        (
            "spindle.request.memory.in.use",
            budget(&shard.request_memory),
            ConfigType::String,
        ),
        (
            "spindle.fetch.memory.in.use",
            budget(&shard.fetch_memory),
            ConfigType::String,
        ),
        (
            "spindle.cache.memory.in.use",
            format!(
                "shard {}: {} of {} bytes",
                shard.id,
                shard.storage.cache_used_bytes(),
                shard.config.storage.cache_bytes_max
            ),
            ConfigType::String,
        ),
    ]
}

/// One DescribeConfigs row as `version` has it.
fn row(d: Described, version: i16) -> DescribeConfigsResourceResult {
    let mut c = DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_static_str(d.name))
        .with_value(Some(StrBytes::from_string(d.value)))
        .with_config_source(d.source as i8);
    if version >= 3 {
        c = c.with_config_type(d.kind as i8);
    }
    c
}

/// What one resource of an alter request asks: its kind and name, and its changes (or why they
/// are refused before reaching the controller).
struct Alteration {
    resource_type: i8,
    name: String,
    ops: Result<Vec<ConfigOp>, Refusal>,
}

/// Sends every acceptable alteration to the controller (topics and other resources each in
/// one metadata change) and answers each in request order.
async fn alter_all(
    shard: &Rc<Shard>,
    alterations: Vec<Alteration>,
    validate_only: bool,
) -> Vec<(i16, Option<String>)> {
    let mut topics = Vec::new();
    let mut others = Vec::new();
    // Where each answer comes from: an early refusal, or the nth topic or other change.
    enum Answer {
        Refused(Refusal),
        Topic,
        Other,
    }
    let mut plan = Vec::with_capacity(alterations.len());
    for a in alterations {
        let ops = match a.ops {
            Ok(ops) => ops,
            Err(refusal) => {
                plan.push(Answer::Refused(refusal));
                continue;
            }
        };
        let resource = match a.resource_type {
            TOPIC => {
                topics.push((a.name, ops));
                plan.push(Answer::Topic);
                continue;
            }
            BROKER if !a.name.is_empty() => this_broker(shard, &a.name),
            GROUP if a.name.is_empty() => Err((
                ResponseError::InvalidRequest,
                "a group's name must not be empty".to_owned(),
            )),
            BROKER | GROUP => Ok(()),
            other => Err((
                ResponseError::InvalidRequest,
                format!("resource type {other}: only topic, broker and group configs exist"),
            )),
        }
        .and_then(|()| {
            ConfigResource::from_wire(a.resource_type, &a.name).ok_or((
                ResponseError::InvalidRequest,
                "not a resource with settings".to_owned(),
            ))
        });
        match resource {
            Ok(resource) => {
                others.push((resource, ops));
                plan.push(Answer::Other);
            }
            Err(refusal) => plan.push(Answer::Refused(refusal)),
        }
    }
    let mut topic_results = if topics.is_empty() {
        Vec::new()
    } else {
        proposals::alter_configs(shard, topics, validate_only).await
    }
    .into_iter();
    let mut other_results = if others.is_empty() {
        Vec::new()
    } else {
        proposals::alter_resource_configs(shard, others, validate_only).await
    }
    .into_iter();
    let answer = |r: Option<TopicResult>| match r {
        Some(Ok(())) => (0, None),
        Some(Err(TopicError { code, message })) => (code.code(), Some(message)),
        None => (ResponseError::UnknownServerError.code(), None),
    };
    plan.into_iter()
        .map(|planned| match planned {
            Answer::Refused((e, m)) => (e.code(), Some(m)),
            Answer::Topic => answer(topic_results.next()),
            Answer::Other => answer(other_results.next()),
        })
        .collect()
}

pub async fn alter(
    shard: &Rc<Shard>,
    request: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let alterations = request
        .resources
        .iter()
        .map(|r| Alteration {
            resource_type: r.resource_type,
            name: r.resource_name.to_string(),
            ops: r
                .configs
                .iter()
                .map(|c| {
                    let name = c.name.to_string();
                    let value = c.value.as_ref().map_or(String::new(), |v| v.to_string());
                    match c.config_operation {
                        SET => Ok(ConfigOp::Set(name, value)),
                        DELETE => Ok(ConfigOp::Delete(name)),
                        APPEND => Ok(ConfigOp::Append(name, value)),
                        SUBTRACT => Ok(ConfigOp::Subtract(name, value)),
                        other => Err((
                            ResponseError::InvalidRequest,
                            format!("{name}: unknown config operation {other}"),
                        )),
                    }
                })
                .collect(),
        })
        .collect();
    let answers = alter_all(shard, alterations, request.validate_only).await;
    let responses = request
        .resources
        .into_iter()
        .zip(answers)
        .map(|(r, (code, message))| {
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message.map(StrBytes::from_string))
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}

/// The legacy AlterConfigs: each resource's settings become exactly the ones given; every
/// other setting goes back to its inherited value.
pub async fn alter_legacy(
    shard: &Rc<Shard>,
    request: AlterConfigsRequest,
    _version: i16,
) -> AlterConfigsResponse {
    let alterations = request
        .resources
        .iter()
        .map(|r| Alteration {
            resource_type: r.resource_type,
            name: r.resource_name.to_string(),
            ops: Ok(std::iter::once(ConfigOp::Clear)
                .chain(r.configs.iter().filter_map(|c| {
                    let value = c.value.as_ref()?;
                    Some(ConfigOp::Set(c.name.to_string(), value.to_string()))
                }))
                .collect()),
        })
        .collect();
    let answers = alter_all(shard, alterations, request.validate_only).await;
    let responses = request
        .resources
        .into_iter()
        .zip(answers)
        .map(|(r, (code, message))| {
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message.map(StrBytes::from_string))
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}
