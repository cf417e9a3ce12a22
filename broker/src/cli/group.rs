//! `spindle group`: list, describe (members, assignments, offsets, lag), reset-offsets, delete.

use std::collections::BTreeMap;

use clap::{Args, Subcommand};
use net::client::assignor::TopicPartitions;
use net::client::consumer_protocol::decode_assignment;
use net::client::{Client, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP};
use serde::Serialize;

use super::connect::{ConnectArgs, pick_partitions, topic_info};
use super::error::{About, CliError};
use super::offset_spec::OffsetSpec;
use super::output::{Output, Table, list, summary};

#[derive(Debug, Args)]
pub struct GroupArgs {
    #[command(flatten)]
    cluster: ConnectArgs,
    #[command(subcommand)]
    command: GroupCommand,
}

#[derive(Debug, Subcommand)]
enum GroupCommand {
    /// Lists groups.
    List,
    /// Shows a group's members and assignments, and per partition its committed offset, the
    /// log end offset and the lag between them.
    Describe { group: String },
    /// Moves a group's committed offsets on a topic; refused while the group has members.
    ResetOffsets {
        group: String,
        /// The topic whose offsets move.
        #[arg(long)]
        topic: String,
        /// Only this partition (repeatable; default: every partition of the topic).
        #[arg(long = "partition", short = 'p', value_name = "N")]
        partitions: Vec<i32>,
        #[command(flatten)]
        to: ResetTo,
        /// Shows the new offsets without committing them.
        #[arg(long)]
        dry_run: bool,
    },
    /// Deletes a group and its offsets; refused while the group has members.
    Delete { group: String },
}

#[derive(Debug, Args)]
#[group(required = true, multiple = false)]
struct ResetTo {
    /// To each partition's log start.
    #[arg(long)]
    to_earliest: bool,
    /// To each partition's end: skips every record there is.
    #[arg(long)]
    to_latest: bool,
    /// To this offset (brought inside each partition's log).
    #[arg(long, value_name = "OFFSET", allow_hyphen_values = true)]
    to_offset: Option<i64>,
    /// To the first record at or after this time, in milliseconds since the epoch (the end
    /// where there is none).
    #[arg(long, value_name = "MS")]
    to_time: Option<i64>,
}

/// Where a reset moves each partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Spec(OffsetSpec),
    Time(i64),
}

impl ResetTo {
    fn target(&self) -> Result<Target, CliError> {
        match (self.to_earliest, self.to_latest, self.to_offset, self.to_time) {
            (true, _, _, _) => Ok(Target::Spec(OffsetSpec::Earliest)),
            (_, true, _, _) => Ok(Target::Spec(OffsetSpec::Latest)),
            (_, _, Some(offset), _) if offset >= 0 => Ok(Target::Spec(OffsetSpec::At(offset))),
            (_, _, Some(offset), _) => Err(CliError::Usage(format!(
                "--to-offset must be 0 or more, not {offset}"
            ))),
            (_, _, _, Some(time_ms)) if time_ms >= 0 => Ok(Target::Time(time_ms)),
            _ => Err(CliError::Usage(
                "say where to: --to-earliest, --to-latest, --to-offset N or --to-time MS (0 or more)"
                    .to_owned(),
            )),
        }
    }
}

pub async fn run(args: GroupArgs) -> Result<(), CliError> {
    let output = args.cluster.output;
    let mut client = args.cluster.connect().await?;
    match args.command {
        GroupCommand::List => list_groups(&mut client, output).await,
        GroupCommand::Describe { group } => describe(&mut client, output, &group).await,
        GroupCommand::ResetOffsets {
            group,
            topic,
            partitions,
            to,
            dry_run,
        } => {
            let target = to.target()?;
            let reset = Reset {
                group: &group,
                topic: &topic,
                dry_run,
            };
            reset.run(&mut client, output, &partitions, target).await
        }
        GroupCommand::Delete { group } => {
            client.delete_group(&group).await.about_group(&group)?;
            let status = GroupStatus {
                group: &group,
                status: "deleted",
            };
            output.emit(&status, |s| format!("group '{}' {}\n", s.group, s.status))
        }
    }
}

#[derive(Debug, Serialize)]
struct GroupStatus<'a> {
    group: &'a str,
    status: &'static str,
}

#[derive(Debug, Serialize)]
struct GroupListing {
    group: String,
    state: String,
    protocol_type: String,
}

async fn list_groups(client: &mut Client, output: Output) -> Result<(), CliError> {
    let mut groups: Vec<GroupListing> = client
        .list_groups()
        .await?
        .into_iter()
        .map(|g| GroupListing {
            group: g.group_id,
            state: g.state,
            protocol_type: g.protocol_type,
        })
        .collect();
    groups.sort_by(|a, b| a.group.cmp(&b.group));
    output.emit(&groups, |groups| {
        Table::of(&["GROUP", "STATE", "TYPE"], groups, |g| {
            vec![g.group.clone(), g.state.clone(), g.protocol_type.clone()]
        })
    })
}

#[derive(Debug, Serialize)]
struct GroupDescription {
    group: String,
    state: String,
    protocol_type: String,
    /// The assignor the group agreed on (for consumer groups).
    protocol: String,
    members: Vec<MemberDescription>,
    partitions: Vec<PartitionLag>,
    /// The sum of the lags known.
    total_lag: i64,
}

#[derive(Debug, Serialize)]
struct MemberDescription {
    member_id: String,
    client_id: String,
    host: String,
    assignment: TopicPartitions,
}

#[derive(Debug, Serialize)]
struct PartitionLag {
    topic: String,
    partition: i32,
    /// `None` where the group has committed nothing.
    committed_offset: Option<i64>,
    /// `None` where the broker could not say (e.g. the topic is gone).
    log_end_offset: Option<i64>,
    lag: Option<i64>,
    member_id: Option<String>,
}

async fn describe(client: &mut Client, output: Output, group: &str) -> Result<(), CliError> {
    let described = client.describe_group(group).await.about_group(group)?;
    let committed = client.offset_fetch_all(group).await.about_group(group)?;
    let state = described.group_state.to_string();
    // Kafka describes a group it does not know as Dead, without an error.
    if state == "Dead" && described.members.is_empty() && committed.is_empty() {
        return Err(CliError::GroupNotFound(group.to_owned()));
    }
    let consumer = described.protocol_type.as_str() == "consumer";
    let mut owners: BTreeMap<(String, i32), String> = BTreeMap::new();
    let mut members = Vec::new();
    for m in &described.members {
        let assignment = if consumer {
            decode_assignment(&m.member_assignment).unwrap_or_default()
        } else {
            TopicPartitions::new()
        };
        for (topic, partitions) in &assignment {
            for partition in partitions {
                owners.insert((topic.clone(), *partition), m.member_id.to_string());
            }
        }
        members.push(MemberDescription {
            member_id: m.member_id.to_string(),
            client_id: m.client_id.to_string(),
            host: m.client_host.to_string(),
            assignment,
        });
    }
    let mut offsets: BTreeMap<(String, i32), Option<i64>> =
        owners.keys().map(|key| (key.clone(), None)).collect();
    for c in committed.into_iter().filter(|c| c.offset >= 0) {
        offsets.insert((c.topic, c.partition), Some(c.offset));
    }
    let mut partitions = Vec::new();
    for ((topic, partition), committed_offset) in offsets {
        let end = client
            .list_offset(&topic, partition, LATEST_TIMESTAMP)
            .await;
        let log_end_offset = end.ok();
        let lag = committed_offset
            .zip(log_end_offset)
            .map(|(committed, end)| (end - committed).max(0));
        partitions.push(PartitionLag {
            member_id: owners.get(&(topic.clone(), partition)).cloned(),
            topic,
            partition,
            committed_offset,
            log_end_offset,
            lag,
        });
    }
    let description = GroupDescription {
        group: group.to_owned(),
        state,
        protocol_type: described.protocol_type.to_string(),
        protocol: described.protocol_data.to_string(),
        total_lag: partitions.iter().filter_map(|p| p.lag).sum(),
        members,
        partitions,
    };
    output.emit(&description, describe_table)
}

fn or_dash<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn describe_table(d: &GroupDescription) -> String {
    let protocol = match (d.protocol_type.as_str(), d.protocol.as_str()) {
        ("", _) => "-".to_owned(),
        (kind, "") => kind.to_owned(),
        (kind, protocol) => format!("{kind}/{protocol}"),
    };
    let mut sections = vec![summary(&[
        ("GROUP", d.group.clone()),
        ("STATE", d.state.clone()),
        ("PROTOCOL", protocol),
        ("MEMBERS", d.members.len().to_string()),
        ("TOTAL-LAG", d.total_lag.to_string()),
    ])];
    if !d.members.is_empty() {
        let headers = ["MEMBER-ID", "CLIENT-ID", "HOST", "ASSIGNMENT"];
        sections.push(Table::of(&headers, &d.members, |m| {
            let assignment: Vec<String> = m
                .assignment
                .iter()
                .map(|(topic, partitions)| format!("{topic}: {}", list(partitions)))
                .collect();
            vec![
                m.member_id.clone(),
                m.client_id.clone(),
                m.host.clone(),
                or_dash((!assignment.is_empty()).then(|| assignment.join("; "))),
            ]
        }));
    }
    if !d.partitions.is_empty() {
        let headers = [
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "MEMBER-ID",
        ];
        sections.push(Table::of(&headers, &d.partitions, |p| {
            vec![
                p.topic.clone(),
                p.partition.to_string(),
                or_dash(p.committed_offset),
                or_dash(p.log_end_offset),
                or_dash(p.lag),
                or_dash(p.member_id.clone()),
            ]
        }));
    }
    sections.join("\n")
}

/// One reset of a group's offsets on one topic.
#[derive(Debug)]
struct Reset<'a> {
    group: &'a str,
    topic: &'a str,
    dry_run: bool,
}

#[derive(Debug, Serialize)]
struct ResetResult<'a> {
    group: &'a str,
    topic: &'a str,
    dry_run: bool,
    partitions: Vec<PartitionReset>,
}

#[derive(Debug, Serialize)]
struct PartitionReset {
    partition: i32,
    /// `None` where the group had committed nothing.
    old_offset: Option<i64>,
    new_offset: i64,
}

/// Kafka's group states in which no member holds partitions.
const MEMBERLESS_STATES: [&str; 2] = ["Empty", "Dead"];

impl Reset<'_> {
    async fn run(
        &self,
        client: &mut Client,
        output: Output,
        partitions: &[i32],
        target: Target,
    ) -> Result<(), CliError> {
        let (group, topic) = (self.group, self.topic);
        // Kafka refuses too: a member would overwrite the offsets with its own. A group the
        // broker does not know yet (DescribeGroups v6+ says GROUP_ID_NOT_FOUND) has no members:
        // resetting its offsets is how it gets some.
        match client.describe_group(group).await.about_group(group) {
            Err(CliError::GroupNotFound(_)) => {}
            described => {
                let described = described?;
                let state = described.group_state.as_str();
                if !described.members.is_empty() || !MEMBERLESS_STATES.contains(&state) {
                    return Err(CliError::GroupNotEmpty(group.to_owned()));
                }
            }
        }
        let info = topic_info(client, topic).await?;
        let partitions = pick_partitions(&info, partitions)?;
        let old = client
            .offset_fetch(group, topic, &partitions)
            .await
            .about_group(group)?;
        let mut resets = Vec::new();
        for partition in partitions {
            let new_offset = self.new_offset(client, partition, target).await?;
            let old_offset = old
                .iter()
                .find(|o| o.partition == partition && o.offset >= 0)
                .map(|o| o.offset);
            resets.push(PartitionReset {
                partition,
                old_offset,
                new_offset,
            });
        }
        if !self.dry_run {
            let offsets: Vec<(i32, i64)> =
                resets.iter().map(|r| (r.partition, r.new_offset)).collect();
            client
                .offset_commit(group, topic, &offsets)
                .await
                .map_err(|error| match error.kafka_code() {
                    // A member joined meanwhile.
                    Some(22 | 25 | 27) => CliError::GroupNotEmpty(group.to_owned()),
                    _ => CliError::from(error),
                })?;
        }
        let result = ResetResult {
            group,
            topic,
            dry_run: self.dry_run,
            partitions: resets,
        };
        output.emit(&result, |result| {
            let headers = ["TOPIC", "PARTITION", "OLD-OFFSET", "NEW-OFFSET"];
            let mut text = Table::of(&headers, &result.partitions, |r| {
                vec![
                    result.topic.to_owned(),
                    r.partition.to_string(),
                    or_dash(r.old_offset),
                    r.new_offset.to_string(),
                ]
            });
            if result.dry_run {
                text.push_str("(dry run: nothing committed)\n");
            }
            text
        })
    }

    async fn new_offset(
        &self,
        client: &mut Client,
        partition: i32,
        target: Target,
    ) -> Result<i64, CliError> {
        let topic = self.topic;
        let end = client.list_offset(topic, partition, LATEST_TIMESTAMP).await;
        let end = end.about_topic(topic)?;
        match target {
            Target::Spec(OffsetSpec::Latest) => Ok(end),
            Target::Spec(spec) => {
                let start = client
                    .list_offset(topic, partition, EARLIEST_TIMESTAMP)
                    .await;
                Ok(spec.resolve(start.about_topic(topic)?, end))
            }
            Target::Time(time_ms) => {
                let at = client.list_offset(topic, partition, time_ms).await;
                // -1: no record at or after the time.
                Ok(Some(at.about_topic(topic)?)
                    .filter(|o| *o >= 0)
                    .unwrap_or(end))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(earliest: bool, latest: bool, offset: Option<i64>, time: Option<i64>) -> ResetTo {
        ResetTo {
            to_earliest: earliest,
            to_latest: latest,
            to_offset: offset,
            to_time: time,
        }
    }

    #[test]
    fn reset_targets_come_from_the_flag_given() {
        let target = |r: ResetTo| r.target().unwrap();
        assert_eq!(
            target(to(true, false, None, None)),
            Target::Spec(OffsetSpec::Earliest)
        );
        assert_eq!(
            target(to(false, true, None, None)),
            Target::Spec(OffsetSpec::Latest)
        );
        assert_eq!(
            target(to(false, false, Some(7), None)),
            Target::Spec(OffsetSpec::At(7))
        );
        assert_eq!(
            target(to(false, false, None, Some(1000))),
            Target::Time(1000)
        );
        assert!(to(false, false, Some(-1), None).target().is_err());
        assert!(to(false, false, None, Some(-5)).target().is_err());
    }

    #[test]
    fn a_described_group_reads_as_a_table() {
        let d = GroupDescription {
            group: "g".to_owned(),
            state: "Stable".to_owned(),
            protocol_type: "consumer".to_owned(),
            protocol: "range".to_owned(),
            members: vec![MemberDescription {
                member_id: "m-1".to_owned(),
                client_id: "spindle-cli".to_owned(),
                host: "/127.0.0.1".to_owned(),
                assignment: [("t".to_owned(), vec![0, 1])].into_iter().collect(),
            }],
            partitions: vec![
                PartitionLag {
                    topic: "t".to_owned(),
                    partition: 0,
                    committed_offset: Some(4),
                    log_end_offset: Some(10),
                    lag: Some(6),
                    member_id: Some("m-1".to_owned()),
                },
                PartitionLag {
                    topic: "t".to_owned(),
                    partition: 1,
                    committed_offset: None,
                    log_end_offset: Some(3),
                    lag: None,
                    member_id: Some("m-1".to_owned()),
                },
            ],
            total_lag: 6,
        };
        assert_eq!(
            describe_table(&d),
            "GROUP      g\n\
             STATE      Stable\n\
             PROTOCOL   consumer/range\n\
             MEMBERS    1\n\
             TOTAL-LAG  6\n\
             \n\
             MEMBER-ID  CLIENT-ID    HOST        ASSIGNMENT\n\
             m-1        spindle-cli  /127.0.0.1  t: 0, 1\n\
             \n\
             TOPIC  PARTITION  CURRENT-OFFSET  LOG-END-OFFSET  LAG  MEMBER-ID\n\
             t      0          4               10              6    m-1\n\
             t      1          -               3               -    m-1\n"
        );
    }
}
