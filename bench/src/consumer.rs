//! One consumer: fetches its share of the partitions (by assignment, no group) from their
//! leaders, counts records, checks every batch's CRC, and measures end-to-end latency from the
//! stamp in each value.

use std::sync::Arc;
use std::time::Duration;

use net::client::{ClientError, ConnectOptions, Connection, error_name};
use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use net::kafka_protocol::messages::{ApiKey, BrokerId, FetchRequest, TopicName};
use net::kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::batch::next_batch;
use crate::cluster::{Leader, Partition};
use crate::stamp::Stamp;
use crate::stats::{LocalLatency, Shared};

/// When consumers stop.
#[derive(Debug, Clone, PartialEq)]
pub enum ConsumeStop {
    /// Once producers are done and everything acknowledged is read (or the drain timeout).
    WithProducers { drain_timeout_ns: u64 },
    /// Once all consumers together read this many records.
    Records(u64),
    /// At this time on the run's clock.
    At(u64),
    /// At the end offsets found at the start, per partition.
    EndOffsets(Vec<i64>),
}

/// What every consumer of a run shares.
#[derive(Debug)]
pub struct ConsumeConfig {
    pub topic: String,
    pub topic_id: Uuid,
    pub partitions: Vec<Partition>,
    pub leaders: Vec<Leader>,
    pub start_offsets: Vec<i64>,
    pub stop: ConsumeStop,
    pub fetch_max_bytes: i32,
    pub connect: ConnectOptions,
}

/// How long a fetch may wait at the broker for records.
const FETCH_MAX_WAIT_MS: i32 = 100;
/// Pause after a retriable partition error.
const RETRY_BACKOFF_MS: u64 = 100;
/// The least a partition may return in one fetch: above any usual batch size.
const PARTITION_BYTES_MIN: i32 = 1 << 20;
/// The last Fetch version that names topics (13 and up use topic ids).
const FETCH_BY_NAME_MAX: i16 = 12;

/// Partition positions (in the topic's list) that consumer `id` of `consumers` reads, grouped
/// by leader position.
pub fn assignment(
    partitions: &[Partition],
    leaders: usize,
    id: usize,
    consumers: usize,
) -> Vec<Vec<usize>> {
    let mut by_leader = vec![Vec::new(); leaders];
    for (position, partition) in partitions.iter().enumerate() {
        if position % consumers.max(1) == id {
            if let Some(group) = by_leader.get_mut(partition.leader) {
                group.push(position);
            }
        }
    }
    by_leader
}

/// Reads `positions`, all led by `leader`, until the stop condition; reports to `shared`.
pub async fn run(
    consumer: usize,
    leader: usize,
    positions: Vec<usize>,
    config: Arc<ConsumeConfig>,
    shared: Arc<Shared>,
) {
    if let Err(e) = consume(leader, positions, &config, &shared).await {
        shared.fail(format!("consumer {consumer}: {e}"));
    }
}

/// Progress on one partition.
#[derive(Debug)]
struct Cursor {
    position: usize,
    index: i32,
    next_offset: i64,
    /// The highest high watermark seen in an answer to a fetch sent after producers were done.
    high_watermark_after_done: i64,
    /// Given up after a non-retriable error.
    abandoned: bool,
}

async fn consume(
    leader: usize,
    positions: Vec<usize>,
    config: &ConsumeConfig,
    shared: &Shared,
) -> Result<(), ClientError> {
    let addr = config
        .leaders
        .get(leader)
        .map(|l| l.addr.clone())
        .unwrap_or_default();
    let mut connection = Connection::connect(&addr, &config.connect).await?;
    let version_max = if config.topic_id.is_nil() {
        FETCH_BY_NAME_MAX
    } else {
        i16::MAX
    };
    let by_id = connection
        .version(ApiKey::Fetch)
        .is_some_and(|v| v.min(version_max) > FETCH_BY_NAME_MAX);
    let mut cursors: Vec<Cursor> = positions
        .iter()
        .map(|&position| Cursor {
            position,
            index: config.partitions[position].index,
            next_offset: config.start_offsets.get(position).copied().unwrap_or(0),
            high_watermark_after_done: -1,
            abandoned: false,
        })
        .collect();
    let clock = &shared.clock;
    let mut latency = LocalLatency::new(&shared.e2e_latency);
    let mut producers_done_ns: Option<u64> = None;
    loop {
        let now = clock.now_ns();
        if shared.producers_done() {
            producers_done_ns.get_or_insert(now);
        }
        let finished =
            |c: &Cursor| c.abandoned || is_finished(c, config, shared, producers_done_ns);
        if cursors.iter().all(finished) || stop_now(config, shared, now, producers_done_ns) {
            report_missing(&cursors, config, shared);
            return Ok(());
        }
        let fetched_after_done = producers_done_ns.is_some();
        let request = fetch_request(config, &cursors, by_id, &finished);
        let response = connection.send_at_most(&request, version_max).await?;
        let now = clock.now_ns();
        if response.error_code != 0 {
            shared.count_error(format!("Fetch: {}", error_name(response.error_code)), 1);
        }
        let measured = clock.is_measured(now);
        let mut retry = false;
        for data in response.responses.iter().flat_map(|t| &t.partitions) {
            let Some(cursor) = cursors.iter_mut().find(|c| c.index == data.partition_index) else {
                continue;
            };
            if data.error_code != 0 {
                shared.count_error(format!("Fetch: {}", error_name(data.error_code)), 1);
                let retriable =
                    ResponseError::try_from_code(data.error_code).is_some_and(|e| e.is_retriable());
                retry |= retriable;
                cursor.abandoned |= !retriable;
                continue;
            }
            if fetched_after_done {
                cursor.high_watermark_after_done =
                    cursor.high_watermark_after_done.max(data.high_watermark);
            }
            let Some(records) = &data.records else {
                continue;
            };
            let read = read_records(records, cursor, clock.run_id, |sent_ns| {
                if clock.is_measured(sent_ns) {
                    latency.record_ns(now.saturating_sub(sent_ns));
                }
            });
            match read {
                Ok((count, payload_bytes)) => {
                    let (measured_count, measured_bytes) = if measured {
                        (count, payload_bytes)
                    } else {
                        (0, 0)
                    };
                    shared
                        .consume
                        .add(now, count, measured_count, measured_bytes);
                }
                Err(reason) => {
                    shared.count_error(format!("corrupt batch from the broker: {reason}"), 1);
                    cursor.abandoned = true;
                }
            }
        }
        latency.maybe_merge(now);
        if retry {
            glommio::timer::sleep(Duration::from_millis(RETRY_BACKOFF_MS)).await;
        }
    }
}

fn is_finished(
    cursor: &Cursor,
    config: &ConsumeConfig,
    shared: &Shared,
    producers_done_ns: Option<u64>,
) -> bool {
    match &config.stop {
        ConsumeStop::WithProducers { .. } => {
            producers_done_ns.is_some()
                && cursor.next_offset
                    >= shared
                        .acked_end(cursor.position)
                        .max(cursor.high_watermark_after_done)
        }
        ConsumeStop::EndOffsets(ends) => {
            cursor.next_offset >= ends.get(cursor.position).copied().unwrap_or(0)
        }
        ConsumeStop::Records(_) | ConsumeStop::At(_) => false,
    }
}

fn stop_now(
    config: &ConsumeConfig,
    shared: &Shared,
    now_ns: u64,
    producers_done_ns: Option<u64>,
) -> bool {
    match &config.stop {
        ConsumeStop::WithProducers { drain_timeout_ns } => {
            producers_done_ns.is_some_and(|done| now_ns.saturating_sub(done) >= *drain_timeout_ns)
        }
        ConsumeStop::Records(records) => shared.consume.snapshot().records_total >= *records,
        ConsumeStop::At(at_ns) => now_ns >= *at_ns,
        ConsumeStop::EndOffsets(_) => false,
    }
}

/// Counts records that were acknowledged but not read when the consumer stopped.
fn report_missing(cursors: &[Cursor], config: &ConsumeConfig, shared: &Shared) {
    if !matches!(config.stop, ConsumeStop::WithProducers { .. }) {
        return;
    }
    let missing: i64 = cursors
        .iter()
        .filter(|c| !c.abandoned)
        .map(|c| (shared.acked_end(c.position) - c.next_offset).max(0))
        .sum();
    if missing > 0 {
        shared.count_error(
            "acknowledged records not read before the drain timeout",
            missing as u64,
        );
    }
}

fn fetch_request(
    config: &ConsumeConfig,
    cursors: &[Cursor],
    by_id: bool,
    finished: &impl Fn(&Cursor) -> bool,
) -> FetchRequest {
    let wanted = cursors.iter().filter(|c| !finished(c)).count().max(1);
    // Each partition gets a share of the request's limit, so brokers that apply only the
    // per-partition limit stay near it too.
    let partition_max_bytes = (config.fetch_max_bytes / wanted as i32).max(PARTITION_BYTES_MIN);
    let partitions = cursors
        .iter()
        .filter(|c| !finished(c))
        .map(|c| {
            FetchPartition::default()
                .with_partition(c.index)
                .with_current_leader_epoch(-1)
                .with_fetch_offset(c.next_offset)
                .with_last_fetched_epoch(-1)
                .with_log_start_offset(-1)
                .with_partition_max_bytes(partition_max_bytes)
        })
        .collect();
    let topic = FetchTopic::default().with_partitions(partitions);
    let topic = if by_id {
        topic.with_topic_id(config.topic_id)
    } else {
        topic.with_topic(TopicName(StrBytes::from_string(config.topic.clone())))
    };
    FetchRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_max_wait_ms(FETCH_MAX_WAIT_MS)
        .with_min_bytes(1)
        .with_max_bytes(config.fetch_max_bytes)
        .with_session_epoch(-1)
        .with_topics(vec![topic])
}

/// Reads a partition's fetched records from the cursor on: returns how many records and payload
/// bytes (keys and values) were new, and calls `stamped` with the send time of each record this
/// run stamped.
fn read_records(
    records: &bytes::Bytes,
    cursor: &mut Cursor,
    run_id: u64,
    mut stamped: impl FnMut(u64),
) -> Result<(u64, u64), String> {
    let mut rest = records.clone();
    let (mut count, mut payload_bytes) = (0u64, 0u64);
    while let Some(batch) = next_batch(&mut rest).map_err(|e| e.to_string())? {
        if batch.next_offset <= cursor.next_offset {
            continue;
        }
        if !batch.is_control {
            let from = cursor.next_offset;
            batch
                .for_each_record(|record| {
                    if record.offset < from {
                        return;
                    }
                    count += 1;
                    payload_bytes += (record.key.map_or(0, <[u8]>::len)
                        + record.value.map_or(0, <[u8]>::len))
                        as u64;
                    if let Some(stamp) = record.value.and_then(Stamp::decode) {
                        if stamp.run_id == run_id {
                            stamped(stamp.sent_ns);
                        }
                    }
                })
                .map_err(|e| e.to_string())?;
        }
        cursor.next_offset = batch.next_offset;
    }
    Ok((count, payload_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::{BatchBuilder, Codec};
    use bytes::{BufMut, Bytes, BytesMut};

    fn partition(index: i32, leader: usize) -> Partition {
        Partition { index, leader }
    }

    #[test]
    fn partitions_are_shared_out_by_position_and_grouped_by_leader() {
        let partitions = [
            partition(0, 0),
            partition(1, 1),
            partition(2, 0),
            partition(3, 1),
            partition(4, 0),
        ];
        assert_eq!(
            assignment(&partitions, 2, 0, 2),
            vec![vec![0, 2, 4], vec![]]
        );
        assert_eq!(assignment(&partitions, 2, 1, 2), vec![vec![], vec![1, 3]]);
        assert_eq!(
            assignment(&partitions, 2, 0, 1),
            vec![vec![0, 2, 4], vec![1, 3]]
        );
        assert_eq!(assignment(&partitions, 2, 2, 3), vec![vec![2], vec![]]);
    }

    /// A batch of `count` records at `base_offset`, values stamped with `run_id` and send times
    /// 1000, 1001, ...
    fn batch(base_offset: i64, count: u64, run_id: u64) -> Bytes {
        let mut builder = BatchBuilder::new(Codec::None, 0);
        for i in 0..count {
            let stamp = Stamp {
                run_id,
                sent_ns: 1000 + i,
            }
            .encode();
            builder.push(0, Some(b"key"), &[&stamp, b"value"]).unwrap();
        }
        let mut bytes = BytesMut::from(&builder.finish().unwrap()[..]);
        // The broker assigns the base offset, outside the CRC.
        (&mut bytes[..8]).put_i64(base_offset);
        bytes.freeze()
    }

    fn cursor(next_offset: i64) -> Cursor {
        Cursor {
            position: 0,
            index: 0,
            next_offset,
            high_watermark_after_done: -1,
            abandoned: false,
        }
    }

    #[test]
    fn records_before_the_cursor_are_skipped_and_stamps_of_this_run_counted() {
        let mut records = BytesMut::new();
        records.extend_from_slice(&batch(10, 5, 7));
        records.extend_from_slice(&batch(15, 3, 8));
        let full = batch(18, 2, 7);
        // A partial batch at the end is left for the next fetch.
        records.extend_from_slice(&full[..full.len() - 1]);
        let mut at = cursor(12);
        let mut stamps = Vec::new();
        let (count, payload) =
            read_records(&records.freeze(), &mut at, 7, |ns| stamps.push(ns)).unwrap();
        assert_eq!(count, 3 + 3);
        assert_eq!(payload, 6 * (3 + 16 + 5));
        assert_eq!(stamps, vec![1002, 1003, 1004], "only run 7, from offset 12");
        assert_eq!(at.next_offset, 18);
    }

    #[test]
    fn a_corrupt_batch_is_an_error() {
        let mut bytes = BytesMut::from(&batch(0, 2, 1)[..]);
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        let read = read_records(&bytes.freeze(), &mut cursor(0), 1, |_| {});
        assert!(read.unwrap_err().contains("CRC"));
    }
}
