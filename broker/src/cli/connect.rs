//! What every command shares: the connection options, connecting to the first reachable bootstrap
//! broker, and looking a topic up.

use clap::Args;
use net::client::{Client, ConnectOptions, TopicInfo};

use super::error::{About, CliError};
use super::output::Output;

#[derive(Debug, Clone, Args)]
#[command(next_help_heading = "Connection options")]
pub struct ConnectArgs {
    /// Brokers to bootstrap from, tried in order.
    #[arg(
        long,
        short = 'b',
        env = "SPINDLE_BROKERS",
        default_value = "127.0.0.1:9092",
        value_name = "HOST:PORT[,HOST:PORT...]",
        global = true
    )]
    pub bootstrap_server: String,
    /// How long to try connecting to a broker.
    #[arg(long, default_value_t = 5_000, value_name = "MS", global = true)]
    pub connect_timeout_ms: u64,
    /// How long a request may take.
    #[arg(long, default_value_t = 10_000, value_name = "MS", global = true)]
    pub request_timeout_ms: u64,
    /// Aligned tables for people, or JSON for scripts.
    #[arg(long, value_enum, default_value_t = Output::Table, global = true)]
    pub output: Output,
}

impl ConnectArgs {
    pub fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            client_id: "spindle-cli".to_owned(),
            connect_timeout_ms: self.connect_timeout_ms,
            request_timeout_ms: self.request_timeout_ms,
            ..ConnectOptions::default()
        }
    }

    /// The request timeout as Kafka's admin requests carry it.
    pub fn timeout_ms_i32(&self) -> i32 {
        i32::try_from(self.request_timeout_ms).unwrap_or(i32::MAX)
    }

    /// A client of the cluster, through the first bootstrap broker that answers.
    pub async fn connect(&self) -> Result<Client, CliError> {
        let mut failure = None;
        let addrs = self.bootstrap_server.split(',').map(str::trim);
        for addr in addrs.filter(|a| !a.is_empty()) {
            match Client::connect(addr, self.connect_options()).await {
                Ok(client) => return Ok(client),
                Err(error) => failure = Some(error),
            }
        }
        Err(failure.map_or_else(
            || CliError::Usage("--bootstrap-server names no broker".to_owned()),
            CliError::from,
        ))
    }
}

/// A topic as Metadata describes it now (not from the client's cache).
pub async fn topic_info(client: &mut Client, topic: &str) -> Result<TopicInfo, CliError> {
    let metadata = client.metadata(Some(&[topic])).await.about_topic(topic)?;
    let info = metadata.topics.into_iter().find(|t| t.name == topic);
    match info {
        None => Err(CliError::TopicNotFound(topic.to_owned())),
        Some(info) if info.error_code != 0 => Err(net::client::ClientError::Kafka {
            api: net::kafka_protocol::messages::ApiKey::Metadata,
            resource: topic.to_owned(),
            code: info.error_code,
            message: None,
        })
        .about_topic(topic),
        Some(info) => Ok(info),
    }
}

/// The partitions to use of a topic: `chosen` ones (each checked to exist), or all.
pub fn pick_partitions(info: &TopicInfo, chosen: &[i32]) -> Result<Vec<i32>, CliError> {
    let all: Vec<i32> = info.partitions.iter().map(|p| p.index).collect();
    if chosen.is_empty() {
        let mut all = all;
        all.sort_unstable();
        return Ok(all);
    }
    let mut picked = Vec::new();
    for partition in chosen {
        if !all.contains(partition) {
            return Err(CliError::NoSuchPartition {
                topic: info.name.clone(),
                partition: *partition,
                count: all.len(),
            });
        }
        if !picked.contains(partition) {
            picked.push(*partition);
        }
    }
    Ok(picked)
}
