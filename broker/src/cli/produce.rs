//! `spindle produce TOPIC`: one record per line of stdin.
//!
//! Lines are read on a thread of their own and gathered into one batch per partition; a batch
//! goes out when it is full, when no new line came for `--linger-ms`, and at the end of input.
//! Each send puts every partition's batch in flight at once (one request per partition,
//! pipelined on the leader's connection) and retries transient failures a few times.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use clap::{Args, ValueEnum};
use futures_channel::oneshot;
use net::Acks;
use net::ProduceRequest;
use net::client::batch::{Compression, NewRecord, RecordBatchBuilder};
use net::client::{Client, ClientError, ProduceAck, produce_ack};
use serde::Serialize;

use super::connect::{ConnectArgs, pick_partitions, topic_info};
use super::error::{CliError, transient};
use super::lines::{Chunk, Line, LineReader, split_line};
use super::output::{Output, emit_json_line, json_line, list, write_stdout};
use super::partitioner::Partitioner;
use super::topic::parse_key_value;

#[derive(Debug, Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    cluster: ConnectArgs,
    /// The topic to write to.
    topic: String,
    /// Splits each line into key and value at the first SEP; a line without SEP has no key.
    #[arg(long, short = 'K', value_name = "SEP", value_parser = clap::builder::NonEmptyStringValueParser::new())]
    key_separator: Option<String>,
    /// Sends every record to this partition. Otherwise keyed records go by the murmur2 hash
    /// of the key (as Java clients and librdkafka place them), unkeyed ones fill one
    /// partition's batch per send.
    #[arg(long, short = 'p')]
    partition: Option<i32>,
    /// Acknowledgement wanted: none, the leader's, or every in-sync replica's.
    #[arg(long, default_value = "all", value_name = "0|1|all")]
    acks: Acks,
    /// How batches are compressed.
    #[arg(long, short = 'z', value_enum, default_value_t = Codec::None)]
    compression: Codec,
    /// A header added to every record (repeatable).
    #[arg(long = "header", short = 'H', value_name = "KEY=VALUE", value_parser = parse_key_value)]
    headers: Vec<(String, String)>,
    /// Prints the partition and offset of every record.
    #[arg(long, short = 'v')]
    verbose: bool,
    /// How long to wait for more lines before sending a batch that is not full.
    #[arg(long, default_value_t = 5, value_name = "MS")]
    linger_ms: u64,
    /// A partition's batch is sent once its records reach this size.
    #[arg(long, default_value_t = 256 * 1024, value_name = "BYTES",
        value_parser = clap::value_parser!(u64).range(1..=64 * 1024 * 1024))]
    batch_bytes_max: u64,
    /// Longer lines are not produced (they count as failed records).
    #[arg(long, default_value_t = 1024 * 1024, value_name = "BYTES",
        value_parser = clap::value_parser!(u64).range(1..=64 * 1024 * 1024))]
    line_bytes_max: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl From<Codec> for Compression {
    fn from(codec: Codec) -> Self {
        match codec {
            Codec::None => Self::None,
            Codec::Gzip => Self::Gzip,
            Codec::Snappy => Self::Snappy,
            Codec::Lz4 => Self::Lz4,
            Codec::Zstd => Self::Zstd,
        }
    }
}

/// What a read of stdin returns at most (plus one line).
const CHUNK_BYTES: usize = 1024 * 1024;
/// A record's bytes beyond its key, value and headers, for sizing batches.
const RECORD_OVERHEAD_BYTES: u64 = 24;
/// Retries of a batch that failed in a way that may pass (a leader moved, a timeout).
const SEND_RETRIES: u32 = 3;
const RETRY_BACKOFF_MS: u64 = 200;

pub async fn run(args: ProduceArgs) -> Result<(), CliError> {
    let mut client = args.cluster.connect().await?;
    let info = topic_info(&mut client, &args.topic).await?;
    if let Some(partition) = args.partition {
        pick_partitions(&info, &[partition])?;
    }
    let partitions = i32::try_from(info.partitions.len()).unwrap_or(i32::MAX);
    let line_bytes_max = usize::try_from(args.line_bytes_max).unwrap_or(usize::MAX);
    let mut input = Input::spawn(line_bytes_max)?;
    let mut producer = Producer {
        partitioner: Partitioner::new(partitions, args.partition),
        headers: args
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), Some(Bytes::from(v.clone()))))
            .collect(),
        client,
        args: &args,
        pending: BTreeMap::new(),
        pending_since: None,
        report: Report {
            topic: args.topic.clone(),
            ..Report::default()
        },
    };
    loop {
        // Linger counts from the oldest record waiting, as Kafka's linger.ms does: a slow
        // trickle of lines still goes out every few milliseconds.
        let wait_ms = producer.pending_since.map(|since| {
            let waited_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
            args.linger_ms.saturating_sub(waited_ms)
        });
        let chunk = match wait_ms {
            Some(0) => None,
            wait_ms => input.next(wait_ms).await?,
        };
        let Some(chunk) = chunk else {
            producer.send_all().await?;
            continue;
        };
        producer.take(chunk.lines, chunk.too_long).await?;
        if chunk.eof {
            producer.send_all().await?;
            return producer.report.finish(args.cluster.output);
        }
    }
}

type ChunkReply = oneshot::Sender<io::Result<Chunk>>;

/// stdin, read on a thread of its own a chunk per request, so the executor never blocks on
/// it. A thread rather than glommio's blocking pool: a read still blocked when the command
/// ends must not outlive the executor it would answer.
#[derive(Debug)]
struct Input {
    requests: std::sync::mpsc::SyncSender<ChunkReply>,
    /// The chunk asked for and not yet taken.
    pending: Option<oneshot::Receiver<io::Result<Chunk>>>,
}

impl Input {
    fn spawn(line_bytes_max: usize) -> Result<Self, CliError> {
        // One request at a time is ever outstanding.
        let (requests, asked) = std::sync::mpsc::sync_channel::<ChunkReply>(1);
        std::thread::Builder::new()
            .name("stdin".to_owned())
            .spawn(move || {
                let mut reader = LineReader::new(io::stdin().lock(), line_bytes_max);
                while let Ok(reply) = asked.recv() {
                    if reply.send(reader.read_chunk(CHUNK_BYTES)).is_err() {
                        return;
                    }
                }
            })
            .map_err(CliError::io("starting the stdin reader"))?;
        Ok(Self {
            requests,
            pending: None,
        })
    }

    /// The next chunk of lines; `None` if `within_ms` passes first (the read goes on).
    async fn next(&mut self, within_ms: Option<u64>) -> Result<Option<Chunk>, CliError> {
        let stopped = || CliError::Usage("the stdin reader stopped".to_owned());
        let mut pending = match self.pending.take() {
            Some(pending) => pending,
            None => {
                let (reply, pending) = oneshot::channel();
                self.requests.send(reply).map_err(|_| stopped())?;
                pending
            }
        };
        let answer = match within_ms {
            None => Some((&mut pending).await),
            Some(ms) => {
                let chunk = async { Some((&mut pending).await) };
                let linger = async {
                    glommio::timer::sleep(Duration::from_millis(ms)).await;
                    None
                };
                futures_lite::future::or(chunk, linger).await
            }
        };
        match answer {
            None => {
                self.pending = Some(pending);
                Ok(None)
            }
            Some(Ok(chunk)) => chunk.map(Some).map_err(CliError::io("reading stdin")),
            Some(Err(oneshot::Canceled)) => Err(stopped()),
        }
    }
}

/// One partition's records waiting to be sent.
#[derive(Debug)]
struct Pending {
    builder: RecordBatchBuilder,
    bytes: u64,
    lines: Vec<u64>,
}

/// A built batch on its way.
#[derive(Debug)]
struct Outgoing {
    partition: i32,
    batch: Bytes,
    lines: Vec<u64>,
}

#[derive(Debug)]
struct Producer<'a> {
    client: Client,
    args: &'a ProduceArgs,
    partitioner: Partitioner,
    headers: Vec<(String, Option<Bytes>)>,
    pending: BTreeMap<i32, Pending>,
    /// When the oldest pending record was added.
    pending_since: Option<Instant>,
    report: Report,
}

impl Producer<'_> {
    /// Adds lines to their partitions' batches, sending whenever one fills up.
    async fn take(&mut self, lines: Vec<Line>, too_long: Vec<u64>) -> Result<(), CliError> {
        for number in too_long {
            self.report.failed += 1;
            eprintln!(
                "error: line {number} is longer than --line-bytes-max ({} bytes): not produced",
                self.args.line_bytes_max
            );
        }
        let timestamp_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        for line in lines {
            if self.add(line, timestamp_ms) {
                self.send_all().await?;
            }
        }
        Ok(())
    }

    /// Adds one line; true if its partition's batch is full.
    fn add(&mut self, line: Line, timestamp_ms: i64) -> bool {
        let bytes = Bytes::from(line.bytes);
        let separator = self.args.key_separator.as_deref().map(str::as_bytes);
        let (key, value) = split_line(&bytes, separator);
        let (key, value) = (key.map(|k| bytes.slice_ref(k)), bytes.slice_ref(value));
        let partition = self.partitioner.partition(key.as_deref());
        let header_bytes: usize = self
            .headers
            .iter()
            .map(|(k, v)| k.len() + v.as_ref().map_or(0, Bytes::len))
            .sum();
        let size = key.as_ref().map_or(0, Bytes::len) + value.len() + header_bytes;
        let compression = self.args.compression.into();
        self.pending_since.get_or_insert_with(Instant::now);
        let pending = self.pending.entry(partition).or_insert_with(|| Pending {
            builder: RecordBatchBuilder::new(compression),
            bytes: 0,
            lines: Vec::new(),
        });
        pending.builder.push(NewRecord {
            key,
            value: Some(value),
            headers: self.headers.clone(),
            timestamp_ms,
        });
        pending.bytes += u64::try_from(size).unwrap_or(u64::MAX) + RECORD_OVERHEAD_BYTES;
        pending.lines.push(line.number);
        pending.bytes >= self.args.batch_bytes_max
    }

    /// Sends every pending batch, retrying transient failures; failed records are reported
    /// and counted, not fatal.
    async fn send_all(&mut self) -> Result<(), CliError> {
        let pending = std::mem::take(&mut self.pending);
        self.pending_since = None;
        if pending.is_empty() {
            return Ok(());
        }
        self.partitioner.next_sticky();
        let mut todo = Vec::new();
        for (partition, p) in pending {
            todo.push(Outgoing {
                partition,
                batch: p.builder.build()?,
                lines: p.lines,
            });
        }
        let mut attempt = 0;
        loop {
            let failed = self.send_once(todo).await?;
            if failed.is_empty() {
                return Ok(());
            }
            attempt += 1;
            if attempt > SEND_RETRIES {
                for (outgoing, error) in failed {
                    self.failed(&outgoing, &error);
                }
                return Ok(());
            }
            self.client.reset();
            glommio::timer::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
            todo = failed.into_iter().map(|(outgoing, _)| outgoing).collect();
        }
    }

    /// Puts every batch in flight, then collects the answers in order. Returns the batches
    /// that failed transiently.
    async fn send_once(
        &mut self,
        batches: Vec<Outgoing>,
    ) -> Result<Vec<(Outgoing, ClientError)>, CliError> {
        let topic = self.args.topic.as_str();
        let acks = self.args.acks.wire();
        let timeout_ms = self.args.cluster.timeout_ms_i32();
        let mut in_flight = Vec::with_capacity(batches.len());
        for outgoing in batches {
            let request = ProduceRequest::single(
                topic,
                outgoing.partition,
                outgoing.batch.clone(),
                acks,
                timeout_ms,
            );
            let sent = match self.client.leader(topic, outgoing.partition).await {
                Ok(connection) => connection.enqueue_produce(&request).await,
                Err(error) => Err(error),
            };
            in_flight.push((outgoing, sent));
        }
        let mut retry = Vec::new();
        let mut acknowledged = Vec::new();
        for (outgoing, sent) in in_flight {
            let answer = match sent {
                Ok(None) => Ok(None),
                Ok(Some(ticket)) => match self.client.leader(topic, outgoing.partition).await {
                    Ok(connection) => connection
                        .receive(ticket)
                        .await
                        .and_then(|response| produce_ack(&response, topic, outgoing.partition))
                        .map(Some),
                    Err(error) => Err(error),
                },
                Err(error) => Err(error),
            };
            match answer {
                Ok(ack) => acknowledged.push((outgoing, ack)),
                Err(error) if transient(&error) => retry.push((outgoing, error)),
                Err(error) => self.failed(&outgoing, &error),
            }
        }
        self.acknowledged(&acknowledged)?;
        Ok(retry)
    }

    fn acknowledged(&mut self, batches: &[(Outgoing, Option<ProduceAck>)]) -> Result<(), CliError> {
        let mut placed = Vec::new();
        for (outgoing, ack) in batches {
            self.report.records += outgoing.lines.len() as u64;
            self.report.partitions.insert(outgoing.partition);
            if self.args.verbose {
                placed.extend((0..).zip(&outgoing.lines).map(|(i, line)| Placed {
                    line: *line,
                    partition: outgoing.partition,
                    offset: ack.map(|a| a.base_offset + i),
                }));
            }
        }
        placed.sort_by_key(|p| p.line);
        let mut verbose = String::new();
        for p in &placed {
            verbose.push_str(&p.render(self.args.cluster.output)?);
        }
        write_stdout(verbose.as_bytes())
    }

    fn failed(&mut self, outgoing: &Outgoing, error: &ClientError) {
        let count = outgoing.lines.len();
        self.report.failed += count as u64;
        let first = outgoing.lines.first().copied().unwrap_or_default();
        let cause = match error.kafka_code() {
            Some(3) => CliError::TopicNotFound(self.args.topic.clone()).to_string(),
            _ => error.to_string(),
        };
        eprintln!(
            "error: {count} records (from line {first}) to partition {} not produced: {cause}",
            outgoing.partition
        );
    }
}

/// Where `--verbose` says a line went.
#[derive(Debug, Serialize)]
struct Placed {
    line: u64,
    partition: i32,
    /// `None` with acks=0: the broker does not say.
    offset: Option<i64>,
}

impl Placed {
    fn render(&self, output: Output) -> Result<String, CliError> {
        Ok(match (output, self.offset) {
            (Output::Json, _) => json_line(self)?,
            (Output::Table, Some(offset)) => {
                format!(
                    "line {}: partition {}, offset {offset}\n",
                    self.line, self.partition
                )
            }
            (Output::Table, None) => {
                format!(
                    "line {}: partition {} (acks=0: no offset)\n",
                    self.line, self.partition
                )
            }
        })
    }
}

#[derive(Debug, Default, Serialize)]
struct Report {
    topic: String,
    /// Records the broker took (acknowledged, or sent with acks=0).
    records: u64,
    failed: u64,
    partitions: BTreeSet<i32>,
}

impl Report {
    fn finish(&self, output: Output) -> Result<(), CliError> {
        match output {
            // The last line of the --verbose stream.
            Output::Json => emit_json_line(self)?,
            Output::Table => {
                let partitions: Vec<i32> = self.partitions.iter().copied().collect();
                let failed = match self.failed {
                    0 => String::new(),
                    n => format!("; {n} failed"),
                };
                eprintln!(
                    "produced {} records to topic '{}' (partitions: {}){failed}",
                    self.records,
                    self.topic,
                    if partitions.is_empty() {
                        "none".to_owned()
                    } else {
                        list(&partitions)
                    },
                );
            }
        }
        self.outcome()
    }

    /// An error if any record failed.
    fn outcome(&self) -> Result<(), CliError> {
        if self.failed > 0 {
            return Err(CliError::Incomplete(format!(
                "{} of {} records were not produced",
                self.failed,
                self.failed + self.records
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn acks_and_codecs_map_to_their_wire_values() {
        assert_eq!(Acks::None.wire(), 0);
        assert_eq!(Acks::Leader.wire(), 1);
        assert_eq!(Acks::All.wire(), -1);
        assert_eq!(Compression::from(Codec::Zstd), Compression::Zstd);
        assert_eq!(Compression::from(Codec::None), Compression::None);
    }

    #[test]
    fn verbose_lines_say_where_each_record_went() {
        let placed = Placed {
            line: 3,
            partition: 1,
            offset: Some(9),
        };
        assert_eq!(
            placed.render(Output::Table).unwrap(),
            "line 3: partition 1, offset 9\n"
        );
        assert_eq!(
            placed.render(Output::Json).unwrap(),
            "{\"line\":3,\"partition\":1,\"offset\":9}\n"
        );
        let unacknowledged = Placed {
            offset: None,
            ..placed
        };
        assert_eq!(
            unacknowledged.render(Output::Table).unwrap(),
            "line 3: partition 1 (acks=0: no offset)\n"
        );
    }

    #[test]
    fn failed_records_fail_the_command() {
        let report = Report {
            topic: "t".to_owned(),
            records: 10,
            failed: 2,
            partitions: BTreeSet::from([0]),
        };
        let error = report.outcome().unwrap_err();
        assert_eq!(error.to_string(), "2 of 12 records were not produced");
        let fine = Report {
            failed: 0,
            ..report
        };
        assert!(fine.outcome().is_ok());
    }
}
