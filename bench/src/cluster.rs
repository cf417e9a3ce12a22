//! Before the run: the topic (created if missing), where its partitions live, which Produce
//! version each leader speaks, and the offsets consumers start from and read up to.

use std::time::Duration;

use net::client::{
    Client, ClientError, ConnectOptions, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, NewTopic, TopicInfo,
};
use net::frame::FRAME_BYTES_MAX_DEFAULT;
use net::kafka_protocol::messages::ApiKey;
use uuid::Uuid;

use crate::error::BenchError;
use crate::options::{ConsumeFrom, Settings};

const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
const LEADER_NOT_AVAILABLE: i16 = 5;
const TOPIC_ALREADY_EXISTS: i16 = 36;
/// How long a new topic may take to get leaders for all its partitions.
const LEADERS_TIMEOUT_MS: u64 = 30_000;
const LEADERS_POLL_MS: u64 = 100;

/// A broker that leads some of the topic's partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    pub node_id: i32,
    pub addr: String,
    pub produce_version: i16,
}

/// One partition: its index and where to send it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Partition {
    pub index: i32,
    /// Position in [`Cluster::leaders`].
    pub leader: usize,
}

/// The topic as the run sees it. Partitions are referred to by their position in
/// `partitions` (sorted by index).
#[derive(Debug, Clone)]
pub struct Cluster {
    pub topic: String,
    pub topic_id: Uuid,
    pub partitions: Vec<Partition>,
    pub leaders: Vec<Leader>,
    /// Where consumers start, per partition (empty without consumers).
    pub start_offsets: Vec<i64>,
    /// The end offsets when the run started, per partition (empty without consumers).
    pub end_offsets: Vec<i64>,
}

pub fn connect_options(settings: &Settings) -> ConnectOptions {
    ConnectOptions {
        client_id: "spindle-bench".to_owned(),
        request_timeout_ms: settings.options.request_timeout_ms,
        // Fetch answers should stay within fetch_max_bytes, but some brokers (noida-db) give
        // each partition its own limit.
        frame_bytes_max: FRAME_BYTES_MAX_DEFAULT.max(settings.options.fetch_max_bytes * 2),
        ..ConnectOptions::default()
    }
}

/// Finds (or creates) the topic and everything the run needs to know about it.
pub async fn discover(settings: &Settings) -> Result<Cluster, BenchError> {
    let options = &settings.options;
    let mut client = Client::connect(&options.bootstrap_server, connect_options(settings)).await?;
    let topic = ensure_topic(&mut client, settings).await?;
    let mut leaders: Vec<Leader> = Vec::new();
    let mut partitions = Vec::new();
    let mut infos = topic.partitions.clone();
    infos.sort_by_key(|p| p.index);
    for info in &infos {
        let leader = match leaders.iter().position(|l| l.node_id == info.leader_id) {
            Some(position) => position,
            None => {
                let connection = client.broker(info.leader_id).await?;
                let produce_version = connection.version(ApiKey::Produce).ok_or_else(|| {
                    ClientError::Unsupported {
                        addr: connection.addr().to_owned(),
                        api: ApiKey::Produce,
                    }
                })?;
                leaders.push(Leader {
                    node_id: info.leader_id,
                    addr: connection.addr().to_owned(),
                    produce_version,
                });
                leaders.len() - 1
            }
        };
        partitions.push(Partition {
            index: info.index,
            leader,
        });
    }
    let (mut start_offsets, mut end_offsets) = (Vec::new(), Vec::new());
    if options.consumers > 0 {
        for p in &partitions {
            let end = client
                .list_offset(&topic.name, p.index, LATEST_TIMESTAMP)
                .await?;
            let start = match settings.consume_from {
                ConsumeFrom::Latest => end,
                ConsumeFrom::Earliest => {
                    client
                        .list_offset(&topic.name, p.index, EARLIEST_TIMESTAMP)
                        .await?
                }
            };
            start_offsets.push(start);
            end_offsets.push(end);
        }
    }
    Ok(Cluster {
        topic: topic.name,
        topic_id: topic.topic_id,
        partitions,
        leaders,
        start_offsets,
        end_offsets,
    })
}

/// The topic's metadata once every partition has a leader, creating the topic first if it is
/// missing.
async fn ensure_topic(client: &mut Client, settings: &Settings) -> Result<TopicInfo, BenchError> {
    let options = &settings.options;
    let name = options.topic.as_str();
    let topic_error = |reason: String| BenchError::Topic {
        topic: name.to_owned(),
        reason,
    };
    let mut created = false;
    let deadline = std::time::Instant::now() + Duration::from_millis(LEADERS_TIMEOUT_MS);
    loop {
        let metadata = client.metadata(Some(&[name])).await?;
        let topic = metadata.topics.into_iter().find(|t| t.name == name);
        match topic {
            Some(t) if t.error_code == 0 && is_ready(&t) => {
                if !created && options.partitions as usize != t.partitions.len() {
                    tracing::info!(
                        topic = name,
                        partitions = t.partitions.len(),
                        "the topic exists: using its partitions, not --partitions"
                    );
                }
                return Ok(t);
            }
            Some(t) if t.error_code == UNKNOWN_TOPIC_OR_PARTITION && !created => {
                let new = NewTopic {
                    name: name.to_owned(),
                    partitions: options.partitions,
                    replication_factor: options.replication_factor,
                    configs: Vec::new(),
                };
                let timeout_ms = i32::try_from(options.request_timeout_ms).unwrap_or(i32::MAX);
                match client.create_topics(&[new], timeout_ms).await {
                    Ok(()) => {}
                    // Someone else made it meanwhile: use theirs.
                    Err(e) if e.kafka_code() == Some(TOPIC_ALREADY_EXISTS) => {}
                    Err(e) => return Err(e.into()),
                }
                created = true;
            }
            Some(t)
                if !matches!(
                    t.error_code,
                    0 | UNKNOWN_TOPIC_OR_PARTITION | LEADER_NOT_AVAILABLE
                ) =>
            {
                return Err(topic_error(format!(
                    "metadata error {}",
                    net::client::error_name(t.error_code)
                )));
            }
            _ => {}
        }
        if std::time::Instant::now() >= deadline {
            return Err(topic_error(format!(
                "no leader for every partition after {LEADERS_TIMEOUT_MS} ms"
            )));
        }
        glommio::timer::sleep(Duration::from_millis(LEADERS_POLL_MS)).await;
    }
}

fn is_ready(topic: &TopicInfo) -> bool {
    !topic.partitions.is_empty()
        && topic
            .partitions
            .iter()
            .all(|p| p.error_code == 0 && p.leader_id >= 0)
}
