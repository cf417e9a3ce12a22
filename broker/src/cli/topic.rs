//! `spindle topic`: create, list, describe, alter-config, add-partitions, delete.

use std::time::{Duration, Instant};

use clap::{Args, Subcommand};
use net::client::{
    Client, ConfigChange, ConfigEntry, ConfigResource, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
    NewTopic, TopicInfo,
};
use serde::Serialize;

use super::connect::{ConnectArgs, topic_info};
use super::error::{About, CliError};
use super::output::{Output, Table, list, summary};

#[derive(Debug, Args)]
pub struct TopicArgs {
    #[command(flatten)]
    cluster: ConnectArgs,
    #[command(subcommand)]
    command: TopicCommand,
}

#[derive(Debug, Subcommand)]
enum TopicCommand {
    /// Creates topics; returns once every partition has a leader.
    Create {
        #[arg(required = true)]
        names: Vec<String>,
        #[arg(long, short = 'p', default_value_t = 1, value_parser = clap::value_parser!(i32).range(1..))]
        partitions: i32,
        #[arg(long, short = 'r', default_value_t = 1, value_parser = clap::value_parser!(i16).range(1..))]
        replication_factor: i16,
        /// A topic config, e.g. retention.ms=3600000 (repeatable).
        #[arg(long = "config", short = 'c', value_name = "KEY=VALUE", value_parser = parse_key_value)]
        configs: Vec<(String, String)>,
    },
    /// Lists topics.
    List,
    /// Shows a topic's partitions (leader, replicas, ISR, offsets) and configs.
    Describe { name: String },
    /// Sets or deletes topic configs (deleted ones return to their defaults).
    #[command(group = clap::ArgGroup::new("changes").required(true).multiple(true))]
    AlterConfig {
        name: String,
        /// Sets a config (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE", value_parser = parse_key_value, group = "changes")]
        set: Vec<(String, String)>,
        /// Deletes a config (repeatable).
        #[arg(long = "delete", value_name = "KEY", group = "changes")]
        delete: Vec<String>,
    },
    /// Grows a topic to a number of partitions.
    AddPartitions {
        name: String,
        /// The topic's partition count afterwards.
        #[arg(long, value_parser = clap::value_parser!(i32).range(1..))]
        to: i32,
    },
    /// Deletes topics and their records.
    Delete {
        #[arg(required = true)]
        names: Vec<String>,
    },
}

/// `KEY=VALUE`, split at the first `=`.
pub fn parse_key_value(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((key, value)) if !key.is_empty() => Ok((key.to_owned(), value.to_owned())),
        _ => Err(format!("expected KEY=VALUE, not '{s}'")),
    }
}

pub async fn run(args: TopicArgs) -> Result<(), CliError> {
    let cluster = &args.cluster;
    let mut client = cluster.connect().await?;
    match args.command {
        TopicCommand::Create {
            names,
            partitions,
            replication_factor,
            configs,
        } => {
            create(
                &mut client,
                cluster,
                &names,
                partitions,
                replication_factor,
                configs,
            )
            .await
        }
        TopicCommand::List => list_topics(&mut client, cluster.output).await,
        TopicCommand::Describe { name } => describe(&mut client, cluster.output, &name).await,
        TopicCommand::AlterConfig { name, set, delete } => {
            alter_config(&mut client, cluster.output, &name, set, delete).await
        }
        TopicCommand::AddPartitions { name, to } => {
            add_partitions(&mut client, cluster, &name, to).await
        }
        TopicCommand::Delete { names } => delete_topics(&mut client, cluster, &names).await,
    }
}

#[derive(Debug, Serialize)]
struct TopicStatus<'a> {
    topic: &'a str,
    status: &'static str,
}

/// Prints what was done to each topic; called with the topics done so far when one fails too.
fn report(output: Output, done: &[&str], status: &'static str) -> Result<(), CliError> {
    let statuses: Vec<TopicStatus> = done
        .iter()
        .map(|topic| TopicStatus { topic, status })
        .collect();
    output.emit(&statuses, |statuses| {
        Table::of(&["TOPIC", "STATUS"], statuses, |s| {
            vec![s.topic.to_owned(), s.status.to_owned()]
        })
    })
}

/// Runs `each` on every topic in order, stopping at the first failure; reports the topics
/// done either way.
async fn for_each_topic<'a, F>(
    output: Output,
    names: &'a [String],
    status: &'static str,
    mut each: F,
) -> Result<(), CliError>
where
    F: AsyncFnMut(&'a str) -> Result<(), CliError>,
{
    let mut done = Vec::new();
    for name in names {
        if let Err(error) = each(name).await {
            if !done.is_empty() {
                report(output, &done, status)?;
            }
            return Err(error);
        }
        done.push(name.as_str());
    }
    report(output, &done, status)
}

async fn create(
    client: &mut Client,
    cluster: &ConnectArgs,
    names: &[String],
    partitions: i32,
    replication_factor: i16,
    configs: Vec<(String, String)>,
) -> Result<(), CliError> {
    for_each_topic(cluster.output, names, "created", async |name| {
        let topic = NewTopic {
            name: name.to_owned(),
            partitions,
            replication_factor,
            configs: configs.clone(),
        };
        client
            .create_topics(&[topic], cluster.timeout_ms_i32())
            .await
            .about_topic(name)?;
        wait_for_leaders(client, cluster, name, partitions).await
    })
    .await
}

/// Waits until Metadata shows `partitions` partitions of `topic`, each with a leader: Kafka
/// may answer CreateTopics and CreatePartitions before then, and clients need leaders.
async fn wait_for_leaders(
    client: &mut Client,
    cluster: &ConnectArgs,
    topic: &str,
    partitions: i32,
) -> Result<(), CliError> {
    let deadline = Instant::now() + Duration::from_millis(cluster.request_timeout_ms);
    loop {
        let led = match topic_info(client, topic).await {
            Ok(info) => {
                let count = i32::try_from(info.partitions.len()).unwrap_or(i32::MAX);
                count >= partitions && info.partitions.iter().all(|p| p.leader_id >= 0)
            }
            Err(CliError::TopicNotFound(_)) => false,
            Err(error) => return Err(error),
        };
        if led {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(CliError::Incomplete(format!(
                "topic '{topic}' does not show {partitions} partitions with leaders after {} ms",
                cluster.request_timeout_ms
            )));
        }
        glommio::timer::sleep(Duration::from_millis(50)).await;
    }
}

#[derive(Debug, Serialize)]
struct TopicListing {
    name: String,
    partitions: usize,
    replication_factor: usize,
}

async fn list_topics(client: &mut Client, output: Output) -> Result<(), CliError> {
    let metadata = client.metadata(None).await?;
    let mut topics: Vec<TopicListing> = metadata
        .topics
        .into_iter()
        .filter(|t| t.error_code == 0)
        .map(|t| TopicListing {
            replication_factor: t.partitions.first().map_or(0, |p| p.replicas.len()),
            partitions: t.partitions.len(),
            name: t.name,
        })
        .collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    output.emit(&topics, |topics| {
        Table::of(&["NAME", "PARTITIONS", "REPLICAS"], topics, |t| {
            vec![
                t.name.clone(),
                t.partitions.to_string(),
                t.replication_factor.to_string(),
            ]
        })
    })
}

#[derive(Debug, Serialize)]
struct TopicDescription {
    name: String,
    topic_id: String,
    partitions: Vec<PartitionDescription>,
    configs: Vec<ConfigDescription>,
}

#[derive(Debug, Serialize)]
struct PartitionDescription {
    partition: i32,
    leader: i32,
    leader_epoch: i32,
    replicas: Vec<i32>,
    isr: Vec<i32>,
    log_start_offset: i64,
    log_end_offset: i64,
}

#[derive(Debug, Serialize)]
struct ConfigDescription {
    name: String,
    /// `None` for sensitive values and configs without one.
    value: Option<String>,
    source: &'static str,
    read_only: bool,
    sensitive: bool,
}

impl From<ConfigEntry> for ConfigDescription {
    fn from(entry: ConfigEntry) -> Self {
        Self {
            value: entry.value.filter(|_| !entry.sensitive),
            source: config_source(entry.source),
            read_only: entry.read_only,
            sensitive: entry.sensitive,
            name: entry.name,
        }
    }
}

/// Kafka's DescribeConfigs source codes.
fn config_source(code: i8) -> &'static str {
    match code {
        1 => "topic",
        2 => "dynamic-broker",
        3 => "dynamic-default-broker",
        4 => "static-broker",
        5 => "default",
        6 => "dynamic-broker-logger",
        _ => "unknown",
    }
}

async fn describe(client: &mut Client, output: Output, name: &str) -> Result<(), CliError> {
    let info: TopicInfo = topic_info(client, name).await?;
    let mut partitions = Vec::new();
    for p in &info.partitions {
        let start = client.list_offset(name, p.index, EARLIEST_TIMESTAMP).await;
        let end = client.list_offset(name, p.index, LATEST_TIMESTAMP).await;
        partitions.push(PartitionDescription {
            partition: p.index,
            leader: p.leader_id,
            leader_epoch: p.leader_epoch,
            replicas: p.replicas.clone(),
            isr: p.isr.clone(),
            log_start_offset: start.about_topic(name)?,
            log_end_offset: end.about_topic(name)?,
        });
    }
    partitions.sort_by_key(|p| p.partition);
    let entries = client
        .describe_configs(ConfigResource::Topic(name), None)
        .await
        .about_topic(name)?;
    let mut configs: Vec<ConfigDescription> = entries.into_iter().map(Into::into).collect();
    configs.sort_by(|a, b| a.name.cmp(&b.name));
    let description = TopicDescription {
        name: info.name,
        topic_id: info.topic_id.to_string(),
        partitions,
        configs,
    };
    output.emit(&description, describe_table)
}

fn describe_table(d: &TopicDescription) -> String {
    let replicas = d.partitions.first().map_or(0, |p| p.replicas.len());
    let headline = summary(&[
        ("NAME", d.name.clone()),
        ("TOPIC-ID", d.topic_id.clone()),
        ("PARTITIONS", d.partitions.len().to_string()),
        ("REPLICAS", replicas.to_string()),
    ]);
    let partition_headers = [
        "PARTITION",
        "LEADER",
        "EPOCH",
        "REPLICAS",
        "ISR",
        "LOG-START-OFFSET",
        "LOG-END-OFFSET",
    ];
    let partitions = Table::of(&partition_headers, &d.partitions, |p| {
        vec![
            p.partition.to_string(),
            p.leader.to_string(),
            p.leader_epoch.to_string(),
            format!("[{}]", list(&p.replicas)),
            format!("[{}]", list(&p.isr)),
            p.log_start_offset.to_string(),
            p.log_end_offset.to_string(),
        ]
    });
    let configs = Table::of(&["CONFIG", "VALUE", "SOURCE"], &d.configs, |c| {
        let value = match (&c.value, c.sensitive) {
            (_, true) => "(sensitive)".to_owned(),
            (Some(value), false) => value.clone(),
            (None, false) => "-".to_owned(),
        };
        vec![c.name.clone(), value, c.source.to_owned()]
    });
    [headline, partitions, configs].join("\n")
}

#[derive(Debug, Serialize)]
struct ConfigAlteration<'a> {
    topic: &'a str,
    set: &'a [(String, String)],
    deleted: &'a [String],
}

async fn alter_config(
    client: &mut Client,
    output: Output,
    name: &str,
    set: Vec<(String, String)>,
    delete: Vec<String>,
) -> Result<(), CliError> {
    let changes: Vec<ConfigChange> = set
        .iter()
        .map(|(k, v)| ConfigChange::Set(k.clone(), v.clone()))
        .chain(delete.iter().map(|k| ConfigChange::Delete(k.clone())))
        .collect();
    client
        .incremental_alter_configs(ConfigResource::Topic(name), &changes)
        .await
        .about_topic(name)?;
    let alteration = ConfigAlteration {
        topic: name,
        set: &set,
        deleted: &delete,
    };
    output.emit(&alteration, |a| {
        let mut table = Table::new(&["CONFIG", "CHANGE"]);
        for (key, value) in a.set {
            table.row(vec![key.clone(), format!("set to {value}")]);
        }
        for key in a.deleted {
            table.row(vec![key.clone(), "deleted".to_owned()]);
        }
        table.render()
    })
}

#[derive(Debug, Serialize)]
struct PartitionCount<'a> {
    topic: &'a str,
    partitions: i32,
}

async fn add_partitions(
    client: &mut Client,
    cluster: &ConnectArgs,
    name: &str,
    to: i32,
) -> Result<(), CliError> {
    let before = topic_info(client, name).await?.partitions.len();
    if usize::try_from(to).unwrap_or(0) <= before {
        return Err(CliError::Usage(format!(
            "topic '{name}' already has {before} partitions: --to must be more"
        )));
    }
    client
        .create_partitions(name, to, cluster.timeout_ms_i32())
        .await
        .about_topic(name)?;
    wait_for_leaders(client, cluster, name, to).await?;
    let count = PartitionCount {
        topic: name,
        partitions: to,
    };
    cluster.output.emit(&count, |c| {
        format!("topic '{}' now has {} partitions\n", c.topic, c.partitions)
    })
}

async fn delete_topics(
    client: &mut Client,
    cluster: &ConnectArgs,
    names: &[String],
) -> Result<(), CliError> {
    for_each_topic(cluster.output, names, "deleted", async |name| {
        client
            .delete_topics(&[name], cluster.timeout_ms_i32())
            .await
            .about_topic(name)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_values_split_at_the_first_equals_sign() {
        assert_eq!(
            parse_key_value("retention.ms=1000"),
            Ok(("retention.ms".to_owned(), "1000".to_owned()))
        );
        assert_eq!(
            parse_key_value("a=b=c"),
            Ok(("a".to_owned(), "b=c".to_owned()))
        );
        assert_eq!(
            parse_key_value("empty="),
            Ok(("empty".to_owned(), String::new()))
        );
        assert!(parse_key_value("novalue").is_err());
        assert!(parse_key_value("=v").is_err());
    }

    #[test]
    fn config_sources_have_names() {
        assert_eq!(config_source(1), "topic");
        assert_eq!(config_source(5), "default");
        assert_eq!(config_source(99), "unknown");
    }
}
