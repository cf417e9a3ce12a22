//! DescribeConfigs and IncrementalAlterConfigs, for topics. Broker settings are reported empty
//! and cannot be changed at run time.

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
use crate::controller::ConfigOp;
use crate::shard::Shard;
use crate::topic_config;

/// Kafka's resource types.
const TOPIC: i8 = 2;
const BROKER: i8 = 4;

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
            match r.resource_type {
                TOPIC => match shard.topic(&r.resource_name).filter(|t| !t.internal) {
                    Some(topic) => {
                        let wanted = r.configuration_keys.as_ref();
                        let configs =
                            topic_config::describe(&topic.configs, &shard.config.topic_defaults)
                                .into_iter()
                                .filter(|d| {
                                    wanted.is_none_or(|keys| {
                                        keys.iter().any(|k| k.as_str() == d.name)
                                    })
                                })
                                .map(|d| {
                                    let mut c = DescribeConfigsResourceResult::default()
                                        .with_name(StrBytes::from_static_str(d.name))
                                        .with_value(Some(StrBytes::from_string(d.value)));
                                    c = if version == 0 {
                                        c.with_config_source(if d.is_topic_setting {
                                            SOURCE_TOPIC
                                        } else {
                                            -1
                                        })
                                    } else {
                                        c.with_config_source(if d.is_topic_setting {
                                            SOURCE_TOPIC
                                        } else {
                                            SOURCE_DEFAULT
                                        })
                                    };
                                    if version >= 3 {
                                        c = c.with_config_type(d.kind as i8);
                                    }
                                    c
                                })
                                .collect();
                        result.with_configs(configs)
                    }
                    None => result
                        .with_error_code(ResponseError::UnknownTopicOrPartition.code())
                        .with_error_message(Some(StrBytes::from_string(format!(
                            "topic {} does not exist",
                            r.resource_name.as_str()
                        )))),
                },
                BROKER => result,
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
    let mut done = shard
        .alter_configs(changes, request.validate_only)
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
