//! `spindle consume TOPIC`: prints records, from chosen partitions or as a group member.
//!
//! Without `--max-messages` it follows the topic until Ctrl-C. Partitions are fetched in turn
//! without waiting at the broker, and the consumer pauses briefly when a whole round brought
//! nothing, so Ctrl-C and rebalances are noticed quickly. In a group it commits what it has
//! printed (after printing it) every second, before a rebalance, and on the way out, then
//! leaves the group.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::io::{self, Write};
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use net::client::assignor::Assignor;
use net::client::batch::{ConsumedRecord, decode_batches};
use net::client::batch_span::next_offset_after;
use net::client::{
    Client, ClientError, EARLIEST_TIMESTAMP, FetchedPartition, GroupMember, LATEST_TIMESTAMP,
    MemberConfig,
};
use serde::Serialize;

use super::connect::{ConnectArgs, pick_partitions, topic_info};
use super::error::{About, CliError, transient};
use super::format::{DEFAULT_FORMAT, Format};
use super::offset_spec::OffsetSpec;
use super::output::Output;
use super::runtime::StopFlag;

#[derive(Debug, Args)]
#[command(after_long_help = FORMAT_HELP)]
pub struct ConsumeArgs {
    #[command(flatten)]
    cluster: ConnectArgs,
    /// The topic to read.
    topic: String,
    /// Starts at the earliest offset (same as --offset earliest).
    #[arg(long, conflicts_with = "offset")]
    from_beginning: bool,
    /// Where to start in each partition: earliest, latest (the default), an offset N, or -N
    /// for N records before the end. With --group, only where the group has no offset yet.
    #[arg(
        long,
        short = 'o',
        allow_hyphen_values = true,
        value_name = "earliest|latest|N|-N"
    )]
    offset: Option<OffsetSpec>,
    /// Reads this partition only (repeatable; default: every partition).
    #[arg(
        long = "partition",
        short = 'p',
        value_name = "N",
        conflicts_with = "group"
    )]
    partitions: Vec<i32>,
    /// Consumes as a member of this group: partitions come from the group's assignment and
    /// consumed offsets are committed.
    #[arg(long, short = 'g')]
    group: Option<String>,
    /// The assignor this member prefers, should it lead the group.
    #[arg(long, value_enum, default_value_t = AssignorArg::Range, requires = "group")]
    assignor: AssignorArg,
    /// Exits after printing this many records.
    #[arg(long, short = 'n', value_name = "N")]
    max_messages: Option<u64>,
    /// How to print each record; see below. Ignored with --output json.
    #[arg(long, short = 'f', default_value = DEFAULT_FORMAT)]
    format: Format,
}

const FORMAT_HELP: &str = r"Format placeholders (as kcat's -f):
  %t topic   %p partition   %o offset   %k key   %v value   %T timestamp (ms)
  %h headers (k=v,k=v)   %K key length   %S value length (-1 for null)   %% a percent sign
  Escapes \n \t \r \0 \\. Nothing is added: end the format with \n for one record per line.
  Example: --format '%p %o %k %v\n'";

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum AssignorArg {
    Range,
    Roundrobin,
}

impl AssignorArg {
    /// Both assignors, this one first: a group agrees on one every member offers.
    fn preference(self) -> Vec<Assignor> {
        match self {
            Self::Range => vec![Assignor::Range, Assignor::RoundRobin],
            Self::Roundrobin => vec![Assignor::RoundRobin, Assignor::Range],
        }
    }
}

/// The most one partition's fetch returns.
const PARTITION_BYTES_MAX: i32 = 1024 * 1024;
/// What the compressed batches of one partition's fetch may decompress to: far more than
/// producers' codecs make of a fetch's worth, and still a bound on what a broker's bytes can
/// make this process hold.
const FETCH_DECOMPRESSED_BYTES_MAX: usize = 256 << 20;
/// How long the broker may hold a fetch for new records, when one request covers every
/// partition read: new records then show at once.
const LONG_POLL_MS: i32 = 500;
/// The pause after a round of fetches that brought nothing and did not wait at the broker: it
/// doubles from the least to the most while nothing comes, so an idle consumer costs the broker
/// little.
const IDLE_MIN_MS: u64 = 25;
const IDLE_MAX_MS: u64 = 500;
/// How long fetches may keep failing transiently (a broker restarting, a leader moving)
/// before the consumer gives up.
const FAILING_FOR_MAX: Duration = Duration::from_secs(30);
const COMMIT_INTERVAL: Duration = Duration::from_secs(1);
const OFFSET_OUT_OF_RANGE: i16 = 1;

pub async fn run(args: ConsumeArgs) -> Result<(), CliError> {
    let stop = StopFlag::install()?;
    let mut client = args.cluster.connect().await?;
    let info = topic_info(&mut client, &args.topic).await?;
    let spec = if args.from_beginning {
        OffsetSpec::Earliest
    } else {
        args.offset.unwrap_or(OffsetSpec::Latest)
    };
    let printer = match args.cluster.output {
        Output::Table => Printer::Format(args.format.clone()),
        Output::Json => Printer::Json,
    };
    let mut reader = Reader {
        topic: &args.topic,
        printer,
        remaining: args.max_messages,
        out: Vec::new(),
        closed: false,
        idle_ms: 0,
        long_polled: false,
        failing_since: None,
    };
    let Some(group) = &args.group else {
        let partitions = pick_partitions(&info, &args.partitions)?;
        let mut positions = Vec::new();
        for partition in partitions {
            let next = start_offset(&mut client, &args.topic, partition, spec).await?;
            positions.push(Position { partition, next });
        }
        let followed = follow(&mut client, &mut reader, &mut positions, &stop).await;
        return followed.and(reader.flush());
    };
    let config = MemberConfig {
        assignors: args.assignor.preference(),
        ..MemberConfig::new(group, vec![args.topic.clone()])
    };
    let options = args.cluster.connect_options();
    let joined = stop.unless_raised(GroupMember::join(&mut client, &options, config));
    let Some(member) = joined.await else {
        return Ok(());
    };
    let mut consumer = GroupConsumer {
        member: member.about_group(group)?,
        group: group.clone(),
        topic: args.topic.clone(),
        spec,
        positions: Vec::new(),
        committed: BTreeMap::new(),
        generation: None,
    };
    let followed = consumer.follow(&mut client, &mut reader, &stop).await;
    // Whatever ended it: what was printed is flushed, then committed, then the group is left.
    let flushed = reader.flush();
    let committed = match consumer.commit(&mut client).await {
        // A rebalance began: the group moved on without these offsets, and whoever gets the
        // partitions reads those records again.
        Err(error) if consumer.member.needs_rejoin() => {
            eprintln!(
                "warning: the last offsets were not committed (the group is rebalancing): {error}"
            );
            Ok(())
        }
        other => other,
    };
    let left = consumer.member.leave(&mut client).await.about_group(group);
    followed.and(flushed).and(committed).and(left)
}

/// Where a partition is read next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    partition: i32,
    next: i64,
}

async fn start_offset(
    client: &mut Client,
    topic: &str,
    partition: i32,
    spec: OffsetSpec,
) -> Result<i64, CliError> {
    let start = client
        .list_offset(topic, partition, EARLIEST_TIMESTAMP)
        .await;
    let end = client.list_offset(topic, partition, LATEST_TIMESTAMP).await;
    Ok(spec.resolve(start.about_topic(topic)?, end.about_topic(topic)?))
}

/// Fetch rounds until the reader is done or the flag is raised.
async fn follow(
    client: &mut Client,
    reader: &mut Reader<'_>,
    positions: &mut [Position],
    stop: &StopFlag,
) -> Result<(), CliError> {
    while !reader.done() {
        match stop
            .unless_raised(reader.fetch_round(client, positions))
            .await
        {
            None => return Ok(()),
            Some(progressed) => reader.pause_unless(progressed?, stop).await,
        }
    }
    Ok(())
}

#[derive(Debug)]
enum Printer {
    Format(Format),
    /// One JSON object per record and line.
    Json,
}

#[derive(Debug, Serialize)]
struct JsonRecord<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    timestamp: i64,
    /// UTF-8 text (invalid sequences replaced); `null` for a null key.
    key: Option<Cow<'a, str>>,
    value: Option<Cow<'a, str>>,
    headers: Vec<JsonHeader<'a>>,
}

#[derive(Debug, Serialize)]
struct JsonHeader<'a> {
    key: &'a str,
    value: Option<Cow<'a, str>>,
}

impl Printer {
    fn render(
        &self,
        topic: &str,
        partition: i32,
        record: &ConsumedRecord,
        out: &mut Vec<u8>,
    ) -> Result<(), CliError> {
        match self {
            Self::Format(format) => format.render(topic, partition, record, out),
            Self::Json => {
                let json = JsonRecord {
                    topic,
                    partition,
                    offset: record.offset,
                    timestamp: record.timestamp_ms,
                    key: text(&record.key),
                    value: text(&record.value),
                    headers: record
                        .headers
                        .iter()
                        .map(|(key, value)| JsonHeader {
                            key,
                            value: text(value),
                        })
                        .collect(),
                };
                serde_json::to_writer(&mut *out, &json)
                    .map_err(|e| CliError::Usage(format!("rendering JSON: {e}")))?;
                out.push(b'\n');
            }
        }
        Ok(())
    }
}

/// A key, value or header value as JSON text: UTF-8, invalid sequences replaced.
fn text(bytes: &Option<bytes::Bytes>) -> Option<Cow<'_, str>> {
    bytes.as_deref().map(String::from_utf8_lossy)
}

/// Prints fetched records.
#[derive(Debug)]
struct Reader<'a> {
    topic: &'a str,
    printer: Printer,
    /// Records still to print under `--max-messages`.
    remaining: Option<u64>,
    /// Printed and not yet written out.
    out: Vec<u8>,
    /// stdout's reader went away.
    closed: bool,
    /// The last pause for want of records.
    idle_ms: u64,
    /// Whether the last round waited at the broker for records (a long poll answered).
    long_polled: bool,
    /// Since when fetches have failed transiently, without a success between.
    failing_since: Option<Instant>,
}

impl Reader<'_> {
    fn done(&self) -> bool {
        self.closed || self.remaining == Some(0)
    }

    /// After a round: on at once if it made progress, else a pause that grows while nothing
    /// comes.
    async fn pause_unless(&mut self, progressed: bool, stop: &StopFlag) {
        if progressed || self.long_polled {
            self.idle_ms = 0;
            return;
        }
        self.idle_ms = (self.idle_ms * 2).clamp(IDLE_MIN_MS, IDLE_MAX_MS);
        stop.sleep(self.idle_ms).await;
    }

    /// Fetches each partition once (one request per leader, for all its partitions), prints
    /// their new records and moves their positions on. Returns whether any position moved.
    async fn fetch_round(
        &mut self,
        client: &mut Client,
        positions: &mut [Position],
    ) -> Result<bool, CliError> {
        let topic = self.topic;
        let mut by_leader: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
        for (i, position) in positions.iter().enumerate() {
            let leader = client.leader_id(topic, position.partition).await;
            by_leader
                .entry(leader.about_topic(topic)?)
                .or_default()
                .push(i);
        }
        // With several leaders, one request's wait would hold up the others' records.
        let max_wait_ms = if by_leader.len() == 1 {
            LONG_POLL_MS
        } else {
            0
        };
        self.long_polled = false;
        let mut answered = true;
        let mut progressed = false;
        for (leader, indexes) in by_leader {
            if self.done() {
                break;
            }
            let asked: Vec<(i32, i64)> = indexes
                .iter()
                .map(|&i| (positions[i].partition, positions[i].next))
                .collect();
            let fetched = client
                .fetch_from_leader(topic, leader, &asked, PARTITION_BYTES_MAX, max_wait_ms)
                .await;
            let answers = match fetched {
                Ok(answers) => answers,
                Err(error) => {
                    self.tolerate(client, error).about_topic(topic)?;
                    answered = false;
                    continue;
                }
            };
            for (&i, (_, answer)) in indexes.iter().zip(answers) {
                match self.take(client, &mut positions[i], answer).await? {
                    Some(moved) => progressed |= moved,
                    None => answered = false,
                }
            }
        }
        self.long_polled = answered && max_wait_ms > 0;
        Ok(progressed)
    }

    /// Prints a partition's fetched records and moves its position on: whether it moved, or
    /// `None` when the fetch failed in a way the next round may get past.
    async fn take(
        &mut self,
        client: &mut Client,
        position: &mut Position,
        answer: Result<FetchedPartition, ClientError>,
    ) -> Result<Option<bool>, CliError> {
        let topic = self.topic;
        let fetched = match answer {
            Ok(fetched) => fetched,
            Err(error) if error.kafka_code() == Some(OFFSET_OUT_OF_RANGE) => {
                let start = client.list_offset(topic, position.partition, EARLIEST_TIMESTAMP);
                let start = start.await.about_topic(topic)?;
                eprintln!(
                    "warning: offset {} is outside partition {}: continuing from its start, {start}",
                    position.next, position.partition
                );
                position.next = start;
                return Ok(None);
            }
            Err(error) => {
                self.tolerate(client, error).about_topic(topic)?;
                return Ok(None);
            }
        };
        self.failing_since = None;
        let records = decode_batches(&fetched.records, FETCH_DECOMPRESSED_BYTES_MAX)
            .map_err(ClientError::from)?;
        // A fetch starts at the batch holding the offset asked for.
        let from = position.next;
        let mut progressed = false;
        for record in records.iter().filter(|r| r.offset >= from) {
            if self.done() {
                break;
            }
            self.printer
                .render(topic, position.partition, record, &mut self.out)?;
            position.next = record.offset + 1;
            self.remaining = self.remaining.map(|n| n - 1);
            progressed = true;
        }
        // Past control batches too, which carry no records to print.
        if let Some(next) = next_offset_after(&fetched.records)?.filter(|_| !self.done()) {
            progressed |= next > position.next;
            position.next = position.next.max(next);
        }
        self.flush()?;
        Ok(Some(progressed))
    }

    /// Lets a transient failure pass (a broker restarting, a leader moving: connections and
    /// metadata are renewed) unless failures have lasted too long; any other is the error.
    fn tolerate(&mut self, client: &mut Client, error: ClientError) -> Result<(), ClientError> {
        let failing_since = *self.failing_since.get_or_insert_with(Instant::now);
        if transient(&error) && failing_since.elapsed() < FAILING_FOR_MAX {
            client.reset();
            Ok(())
        } else {
            Err(error)
        }
    }

    /// Writes out what was printed; a closed stdout ends the reading.
    fn flush(&mut self) -> Result<(), CliError> {
        if self.out.is_empty() || self.closed {
            return Ok(());
        }
        let mut stdout = io::stdout().lock();
        let written = stdout.write_all(&self.out).and_then(|()| stdout.flush());
        self.out.clear();
        match written {
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => {
                self.closed = true;
                Ok(())
            }
            other => other.map_err(CliError::io("writing to stdout")),
        }
    }
}

/// A group member's reading: positions of its assigned partitions and commits.
#[derive(Debug)]
struct GroupConsumer {
    member: GroupMember,
    group: String,
    topic: String,
    spec: OffsetSpec,
    positions: Vec<Position>,
    /// What the group holds for our partitions, to commit only what moved.
    committed: BTreeMap<i32, i64>,
    /// The generation `positions` belong to.
    generation: Option<i32>,
}

impl GroupConsumer {
    async fn follow(
        &mut self,
        client: &mut Client,
        reader: &mut Reader<'_>,
        stop: &StopFlag,
    ) -> Result<(), CliError> {
        let mut last_commit = Instant::now();
        while !reader.done() && !stop.raised() {
            if self.member.needs_rejoin() {
                reader.flush()?;
                self.commit_in_passing(client).await;
                let Some(rejoined) = stop.unless_raised(self.member.rejoin(client)).await else {
                    return Ok(());
                };
                rejoined?;
            }
            if self.generation != Some(self.member.generation_id()) {
                self.take_assignment(client).await?;
            }
            let Some(progressed) = stop
                .unless_raised(reader.fetch_round(client, &mut self.positions))
                .await
            else {
                return Ok(());
            };
            let progressed = progressed?;
            if last_commit.elapsed() >= COMMIT_INTERVAL {
                self.commit_in_passing(client).await;
                last_commit = Instant::now();
            }
            reader.pause_unless(progressed, stop).await;
        }
        Ok(())
    }

    /// Positions for a new assignment: the group's offsets, or `spec` where it has none.
    async fn take_assignment(&mut self, client: &mut Client) -> Result<(), CliError> {
        let topic = self.topic.as_str();
        let mut partitions = self
            .member
            .assignment()
            .get(topic)
            .cloned()
            .unwrap_or_default();
        partitions.sort_unstable();
        let offsets = client
            .offset_fetch(&self.group, topic, &partitions)
            .await
            .about_group(&self.group)?;
        self.committed.clear();
        self.positions.clear();
        for partition in partitions {
            let committed = offsets
                .iter()
                .find(|o| o.partition == partition && o.offset >= 0)
                .map(|o| o.offset);
            let next = match committed {
                Some(offset) => {
                    self.committed.insert(partition, offset);
                    offset
                }
                None => start_offset(client, topic, partition, self.spec).await?,
            };
            self.positions.push(Position { partition, next });
        }
        self.generation = Some(self.member.generation_id());
        Ok(())
    }

    /// Commits the positions that moved since the last commit.
    async fn commit(&mut self, client: &mut Client) -> Result<(), CliError> {
        let moved: Vec<(i32, i64)> = self
            .positions
            .iter()
            .filter(|p| self.committed.get(&p.partition) != Some(&p.next))
            .map(|p| (p.partition, p.next))
            .collect();
        if moved.is_empty() || self.generation.is_none() {
            return Ok(());
        }
        self.member
            .commit(client, &self.topic, &moved)
            .await
            .about_group(&self.group)?;
        self.committed.extend(moved);
        Ok(())
    }

    /// A commit on the way (periodic, or before a rebalance): a failure is reported and the
    /// offsets are committed at the next chance.
    async fn commit_in_passing(&mut self, client: &mut Client) {
        if let Err(error) = self.commit(client).await {
            if !self.member.needs_rejoin() {
                eprintln!("warning: committing offsets: {error}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn json_records_have_stable_keys_and_keep_nulls() {
        let record = ConsumedRecord {
            offset: 5,
            timestamp_ms: 1_700_000_000_000,
            key: None,
            value: Some(Bytes::from_static(b"v\xff")),
            headers: vec![("h".to_owned(), None)],
        };
        let mut out = Vec::new();
        Printer::Json.render("t", 2, &record, &mut out).unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"topic\":\"t\",\"partition\":2,\"offset\":5,\"timestamp\":1700000000000,\
             \"key\":null,\"value\":\"v\u{fffd}\",\"headers\":[{\"key\":\"h\",\"value\":null}]}\n"
        );
    }

    #[test]
    fn the_preferred_assignor_is_offered_first() {
        assert_eq!(
            AssignorArg::Roundrobin.preference(),
            [Assignor::RoundRobin, Assignor::Range]
        );
        assert_eq!(AssignorArg::Range.preference()[0], Assignor::Range);
    }
}
