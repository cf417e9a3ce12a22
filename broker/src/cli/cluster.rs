//! `spindle cluster describe`: the cluster's id, its brokers (id, address, rack, alive or fenced)
//! and which one is the active controller, as DescribeCluster reports them, and each voter's Raft
//! state as the active controller reports it (DescribeQuorum).
//!
//! `spindle cluster elect-leaders`: a preferred leader election (ElectLeaders), which moves each
//! partition's leadership back to its first replica where that one is live and in sync.

use clap::{Args, Subcommand};
use serde::Serialize;

use super::connect::ConnectArgs;
use super::error::CliError;
use super::output::{Table, summary};
use net::client::{Client, ElectionResult, PREFERRED_ELECTION};
use net::kafka_protocol::ResponseError;

#[derive(Debug, Args)]
pub struct ClusterArgs {
    #[command(flatten)]
    connect: ConnectArgs,
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Debug, Subcommand)]
enum ClusterCommand {
    /// Shows the cluster id, every broker (alive or fenced), the active controller and the
    /// controller quorum's voters.
    Describe,
    /// Moves leaderships back to each partition's preferred (first) replica, where it is live
    /// and in sync: of every partition, one topic's, or one partition's.
    ElectLeaders {
        /// Only this topic's partitions.
        #[arg(long)]
        topic: Option<String>,
        /// Only this partition of the topic.
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
    },
}

#[derive(Debug, Serialize)]
struct ElectionDescription {
    topic: String,
    partition: i32,
    /// `elected`, `not needed` (it had its preferred leader), or the Kafka error
    /// (`PreferredLeaderNotAvailable`: that replica is fenced or not in sync).
    result: String,
    message: Option<String>,
}

/// ElectLeaders' ELECTION_NOT_NEEDED: the partition already has the leader asked for.
const ELECTION_NOT_NEEDED: i16 = 84;

#[derive(Debug, Serialize)]
struct ClusterDescription {
    cluster_id: String,
    controller: i32,
    brokers: Vec<BrokerDescription>,
    /// The controller quorum as the active controller reports it, if it answered.
    quorum: Option<QuorumDescription>,
}

#[derive(Debug, Serialize)]
struct BrokerDescription {
    node: i32,
    host: String,
    port: i32,
    rack: Option<String>,
    fenced: bool,
    controller: bool,
}

#[derive(Debug, Serialize)]
struct QuorumDescription {
    leader: i32,
    /// The Raft term.
    epoch: i32,
    /// The committed index of the metadata log.
    high_watermark: i64,
    voters: Vec<VoterDescription>,
}

#[derive(Debug, Serialize)]
struct VoterDescription {
    node: i32,
    /// How far its log matches the leader's (-1: not known).
    log_end_offset: i64,
    /// The leader, or a follower the leader knows to be caught up to the high watermark.
    state: &'static str,
}

pub async fn run(args: ClusterArgs) -> Result<(), CliError> {
    let mut client = args.connect.connect().await?;
    match args.command {
        ClusterCommand::Describe => {
            let cluster = client.describe_cluster().await?;
            let mut brokers: Vec<BrokerDescription> = cluster
                .brokers
                .into_iter()
                .map(|(b, fenced)| BrokerDescription {
                    controller: b.node_id == cluster.controller_id,
                    node: b.node_id,
                    host: b.host,
                    port: b.port,
                    rack: b.rack,
                    fenced,
                })
                .collect();
            brokers.sort_by_key(|b| b.node);
            let quorum = match cluster.controller_id {
                -1 => None,
                controller => client.describe_quorum(controller).await.ok(),
            };
            let description = ClusterDescription {
                cluster_id: cluster.cluster_id,
                controller: cluster.controller_id,
                brokers,
                quorum: quorum.map(|q| QuorumDescription {
                    leader: q.leader_id,
                    epoch: q.leader_epoch,
                    high_watermark: q.high_watermark,
                    voters: q
                        .voters
                        .iter()
                        .map(|&(node, end)| VoterDescription {
                            node,
                            log_end_offset: end,
                            state: match () {
                                _ if node == q.leader_id => "leader",
                                _ if end >= q.high_watermark && end >= 0 => "follower (caught up)",
                                _ if end >= 0 => "follower (behind)",
                                _ => "unknown",
                            },
                        })
                        .collect(),
                }),
            };
            args.connect.output.emit(&description, describe_table)
        }
        ClusterCommand::ElectLeaders { topic, partition } => {
            let timeout_ms = i32::try_from(args.connect.request_timeout_ms).unwrap_or(i32::MAX);
            let partitions = match (topic, partition) {
                (None, _) => None,
                (Some(topic), Some(p)) => Some(vec![(topic, vec![p])]),
                (Some(topic), None) => Some(vec![every_partition(&mut client, topic).await?]),
            };
            let results = client
                .elect_leaders(PREFERRED_ELECTION, partitions.as_deref(), timeout_ms)
                .await?;
            let described: Vec<ElectionDescription> =
                results.iter().map(describe_election).collect();
            args.connect.output.emit(&described, |d| {
                Table::of(&["TOPIC", "PARTITION", "RESULT", "MESSAGE"], d, |e| {
                    vec![
                        e.topic.clone(),
                        e.partition.to_string(),
                        e.result.clone(),
                        e.message.clone().unwrap_or_default(),
                    ]
                })
            })?;
            let failed = results
                .iter()
                .filter(|r| r.error_code != 0 && r.error_code != ELECTION_NOT_NEEDED)
                .count();
            match failed {
                0 => Ok(()),
                n => Err(CliError::Incomplete(format!(
                    "the election failed for {n} of {} partitions",
                    results.len()
                ))),
            }
        }
    }
}

/// `topic` with the ids of all its partitions, from the cluster's metadata.
async fn every_partition(
    client: &mut Client,
    topic: String,
) -> Result<(String, Vec<i32>), CliError> {
    let metadata = client.metadata(Some(&[topic.as_str()])).await?;
    match metadata.topics.iter().find(|t| t.name == topic) {
        Some(t) if t.error_code == 0 => {
            let ids = t.partitions.iter().map(|p| p.index).collect();
            Ok((topic, ids))
        }
        _ => Err(CliError::TopicNotFound(topic)),
    }
}

fn describe_election(r: &ElectionResult) -> ElectionDescription {
    let result = match r.error_code {
        0 => "elected".to_owned(),
        ELECTION_NOT_NEEDED => "not needed".to_owned(),
        code => ResponseError::try_from_code(code)
            .map_or_else(|| format!("error {code}"), |e| format!("{e:?}")),
    };
    ElectionDescription {
        topic: r.topic.clone(),
        partition: r.partition,
        result,
        message: r
            .error_message
            .clone()
            .filter(|_| r.error_code != ELECTION_NOT_NEEDED),
    }
}

fn describe_table(d: &ClusterDescription) -> String {
    let headline = summary(&[
        ("CLUSTER-ID", d.cluster_id.clone()),
        ("CONTROLLER", d.controller.to_string()),
        ("BROKERS", d.brokers.len().to_string()),
    ]);
    let brokers = Table::of(
        &["NODE", "HOST", "PORT", "RACK", "STATE", "CONTROLLER"],
        &d.brokers,
        |b| {
            vec![
                b.node.to_string(),
                b.host.clone(),
                b.port.to_string(),
                b.rack.clone().unwrap_or_default(),
                if b.fenced { "fenced" } else { "alive" }.to_owned(),
                if b.controller { "yes" } else { "no" }.to_owned(),
            ]
        },
    );
    let mut parts = vec![headline, brokers];
    if let Some(q) = &d.quorum {
        parts.push(summary(&[
            ("QUORUM-LEADER", q.leader.to_string()),
            ("EPOCH", q.epoch.to_string()),
            ("HIGH-WATERMARK", q.high_watermark.to_string()),
        ]));
        parts.push(Table::of(
            &["VOTER", "LOG-END", "RAFT-STATE"],
            &q.voters,
            |v| {
                vec![
                    v.node.to_string(),
                    v.log_end_offset.to_string(),
                    v.state.to_owned(),
                ]
            },
        ));
    }
    parts.join("\n")
}
