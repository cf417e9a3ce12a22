//! DescribeConfigs and IncrementalAlterConfigs. Topics' settings can be changed; the broker's
//! are described (with Kafka's names) but are set at start only.

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use net::kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use net::kafka_protocol::messages::{
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use net::kafka_protocol::protocol::StrBytes;

use crate::api::topics::{SOURCE_DEFAULT, SOURCE_TOPIC};
use crate::proposals::{self, ConfigOp};
use crate::shard::Shard;
use crate::topic_config::{self, ConfigType, Described};

/// Kafka's resource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

/// Kafka's config source for a setting given to the broker at start.
const SOURCE_STATIC_BROKER: i8 = 4;

/// Kafka's IncrementalAlterConfigs operations.
const SET: i8 = 0;
const DELETE: i8 = 1;

pub fn describe(
    shard: &Shard,
    request: DescribeConfigsRequest,
    version: i16,
) -> DescribeConfigsResponse {
    let results = request
        .resources
        .into_iter()
        .map(|r| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name.clone());
            let wanted = |d: &Described| {
                r.configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == d.name))
            };
            match r.resource_type {
                TOPIC => match shard.topic(&r.resource_name).filter(|t| !t.internal) {
                    Some(topic) => {
                        let described =
                            topic_config::describe(&topic.configs, &shard.config.topic_defaults);
                        result.with_configs(
                            described
                                .into_iter()
                                .filter(wanted)
                                .map(|d| {
                                    let source = if d.is_topic_setting {
                                        SOURCE_TOPIC
                                    } else {
                                        SOURCE_DEFAULT
                                    };
                                    row(d, source, version)
                                })
                                .collect(),
                        )
                    }
                    None => result
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(StrBytes::from_string(format!(
                            "topic {} does not exist",
                            r.resource_name.as_str()
                        )))),
                },
                // The cluster-wide dynamic defaults: there are none.
                BROKER if r.resource_name.is_empty() => result,
                BROKER if r.resource_name.as_str() == shard.config.node_id.to_string() => result
                    .with_configs(
                        broker_configs(shard)
                            .into_iter()
                            .filter(wanted)
                            .map(|d| row(d, SOURCE_STATIC_BROKER, version))
                            .collect(),
                    ),
                BROKER => result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "this is broker {}, not {}",
                        shard.config.node_id,
                        r.resource_name.as_str()
                    )))),
                _ => result
                    .with_error_code(ResponseError::InvalidRequest.code())
                    .with_error_message(Some(StrBytes::from_static_str(
                        "only topic and broker configs exist",
                    ))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}

/// The broker's settings as Kafka names them: the defaults of topic settings, then its own.
fn broker_configs(shard: &Shard) -> Vec<Described> {
    let config = &shard.config;
    let own = |name: &'static str, value: String, kind: ConfigType| Described {
        name,
        value,
        is_topic_setting: false,
        kind,
    };
    let mut configs = topic_config::describe_broker_defaults(&config.topic_defaults);
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
    configs
}

/// One DescribeConfigs row as `version` has it.
fn row(d: Described, source: i8, version: i16) -> DescribeConfigsResourceResult {
    let mut c = DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_static_str(d.name))
        .with_value(Some(StrBytes::from_string(d.value)))
        .with_config_source(source);
    if version >= 3 {
        c = c.with_config_type(d.kind as i8);
    }
    c
}

pub async fn alter(
    shard: &Rc<Shard>,
    request: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let mut changes = Vec::new();
    let mut early = Vec::new();
    for r in &request.resources {
        let refusal = if r.resource_type != TOPIC {
            Some((
                ResponseError::InvalidRequest,
                "only topic settings can be changed".to_string(),
            ))
        } else {
            r.configs
                .iter()
                .find(|c| c.config_operation != SET && c.config_operation != DELETE)
                .map(|c| {
                    (
                        ResponseError::InvalidConfig,
                        format!("{}: topic settings are not lists", c.name.as_str()),
                    )
                })
        };
        if refusal.is_none() {
            let ops = r
                .configs
                .iter()
                .map(|c| match c.config_operation {
                    SET => ConfigOp::Set(
                        c.name.to_string(),
                        c.value.as_ref().map_or(String::new(), |v| v.to_string()),
                    ),
                    _ => ConfigOp::Delete(c.name.to_string()),
                })
                .collect();
            changes.push((r.resource_name.to_string(), ops));
        }
        early.push(refusal);
    }
    let mut done = proposals::alter_configs(shard, changes, request.validate_only)
        .await
        .into_iter();
    let responses = request
        .resources
        .into_iter()
        .zip(early)
        .map(|(r, refusal)| {
            let (code, message) = match refusal {
                Some((e, m)) => (e.code(), Some(m)),
                None => match done.next() {
                    Some(Ok(())) => (0, None),
                    Some(Err(e)) => (e.code.code(), Some(e.message)),
                    None => (ResponseError::UnknownServerError.code(), None),
                },
            };
            AlterConfigsResourceResponse::default()
                .with_resource_type(r.resource_type)
                .with_resource_name(r.resource_name)
                .with_error_code(code)
                .with_error_message(message.map(StrBytes::from_string))
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
