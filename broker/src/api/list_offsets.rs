//! ListOffsets: the earliest or latest offset of a partition, or the first at a timestamp,
//! looked up on the shard that owns it.

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use net::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::api::on_owners;
use crate::partition::{LEADER_EPOCH, read_error};
use crate::shard::Shard;

/// Kafka's special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

/// (error, timestamp, offset)
type Found = (Option<ResponseError>, i64, i64);

pub async fn handle(
    shard: &Rc<Shard>,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let mut work = Vec::new();
    let mut shape = Vec::new();
    let mut answers: Vec<Option<Found>> = Vec::new();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let meta = shard.topic(&name).filter(|t| !t.internal);
        let mut indexes = Vec::new();
        for p in topic.partitions {
            indexes.push(p.partition_index);
            match meta.as_ref().and_then(|t| t.shard_of(p.partition_index)) {
                Some(owner) => {
                    work.push((
                        owner,
                        (answers.len(), name.clone(), p.partition_index, p.timestamp),
                    ));
                    answers.push(None);
                }
                None => answers.push(Some((Some(ResponseError::UnknownTopicOrPartition), -1, -1))),
            }
        }
        shape.push((topic.name, indexes));
    }
    let (slots, work): (Vec<usize>, Vec<_>) = work
        .into_iter()
        .map(|(owner, (slot, name, index, ts))| (slot, (owner, (name, index, ts))))
        .unzip();
    let found = on_owners(
        shard,
        work,
        |owner: Rc<Shard>, (name, index, timestamp): (String, i32, i64)| async move {
            match owner.partition(&name, index) {
                Some(p) => lookup(&p, timestamp).await,
                None => (Some(ResponseError::NotLeaderOrFollower), -1, -1),
            }
        },
        || (Some(ResponseError::NotLeaderOrFollower), -1, -1),
    )
    .await;
    for (slot, f) in slots.into_iter().zip(found) {
        answers[slot] = Some(f);
    }
    let mut answers = answers.into_iter().flatten();
    let topics = shape
        .into_iter()
        .map(|(name, indexes)| {
            let partitions = indexes
                .into_iter()
                .map(|index| {
                    let (error, timestamp, offset) =
                        answers
                            .next()
                            .unwrap_or((Some(ResponseError::UnknownServerError), -1, -1));
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(index)
                        .with_error_code(error.map_or(0, |e| e.code()))
                        .with_timestamp(timestamp)
                        .with_offset(offset);
                    if version >= 4 {
                        r = r.with_leader_epoch(LEADER_EPOCH);
                    }
                    r
                })
                .collect();
            ListOffsetsTopicResponse::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    ListOffsetsResponse::default().with_topics(topics)
}

async fn lookup(p: &crate::partition::Partition, timestamp: i64) -> Found {
    let log = &p.log;
    match timestamp {
        LATEST => (None, -1, log.high_watermark()),
        // No tiered storage: nothing is tiered.
        LATEST_TIERED => (None, -1, -1),
        EARLIEST | EARLIEST_LOCAL => (None, -1, log.log_start_offset()),
        MAX_TIMESTAMP => match log.max_timestamp() {
            Some(max) => found_at(log.offset_for_timestamp(max).await),
            None => (None, -1, -1),
        },
        t if t < 0 => (Some(ResponseError::InvalidRequest), -1, -1),
        t => found_at(log.offset_for_timestamp(t).await),
    }
}

fn found_at(result: Result<Option<(i64, i64)>, storage::ReadError>) -> Found {
    match result {
        Ok(Some((offset, timestamp))) => (None, timestamp, offset),
        Ok(None) => (None, -1, -1),
        Err(e) => (Some(read_error(&e)), -1, -1),
    }
}
