//! ListOffsets: the earliest or latest offset of a partition, or the first at a timestamp,
//! looked up on the shard that owns it.

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use net::kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use crate::api::on_owners;
use crate::partition::read_error;
use crate::routing::Route;
use crate::shard::Shard;

/// Kafka's special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

/// One partition's answer.
#[derive(Debug, Clone, Copy)]
struct Found {
    error: Option<ResponseError>,
    timestamp: i64,
    offset: i64,
    /// The leader epoch of the partition that answered (-1 when none did).
    leader_epoch: i32,
}

impl Found {
    const NONE: Found = Found {
        error: None,
        timestamp: -1,
        offset: -1,
        leader_epoch: -1,
    };

    fn failed(error: ResponseError) -> Found {
        Found {
            error: Some(error),
            ..Found::NONE
        }
    }
}

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
            let route = meta.as_ref().map_or(Route::Unknown, |t| {
                shard.route_at_epoch(t, p.partition_index, p.current_leader_epoch)
            });
            match route {
                Route::Here(owner) => {
                    work.push((
                        owner,
                        (answers.len(), name.clone(), p.partition_index, p.timestamp),
                    ));
                    answers.push(None);
                }
                refusal => answers.push(Some(Found {
                    error: refusal.error(),
                    ..Found::NONE
                })),
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
                Some(p) => Found {
                    leader_epoch: p.leader_epoch().0,
                    ..lookup(&p, timestamp).await
                },
                None => Found::failed(ResponseError::NotLeaderOrFollower),
            }
        },
        || Found::failed(ResponseError::NotLeaderOrFollower),
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
                    let found = answers
                        .next()
                        .unwrap_or(Found::failed(ResponseError::UnknownServerError));
                    let mut r = ListOffsetsPartitionResponse::default()
                        .with_partition_index(index)
                        .with_error_code(found.error.map_or(0, |e| e.code()))
                        .with_timestamp(found.timestamp)
                        .with_offset(found.offset);
                    if version >= 4 {
                        r = r.with_leader_epoch(found.leader_epoch);
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
    let at = |offset| Found {
        offset,
        ..Found::NONE
    };
    match timestamp {
        // A new leader's end is not final until its high watermark reached where its
        // epoch began (records of the old leader's above it may still go).
        LATEST
            if p.replicated
                .as_ref()
                .is_some_and(|r| !r.with(|sm| sm.offsets_available())) =>
        {
            Found::failed(ResponseError::OffsetNotAvailable)
        }
        LATEST => at(p.high_watermark()),
        // No tiered storage: nothing is tiered.
        LATEST_TIERED => Found::NONE,
        EARLIEST | EARLIEST_LOCAL => at(log.log_start_offset()),
        MAX_TIMESTAMP => match log.max_timestamp().await {
            Ok(Some(max)) => found_at(log.offset_for_timestamp(max).await),
            Ok(None) => Found::NONE,
            Err(e) => Found::failed(read_error(&e)),
        },
        t if t < 0 => Found::failed(ResponseError::InvalidRequest),
        t => found_at(log.offset_for_timestamp(t).await),
    }
}

fn found_at(result: Result<Option<(i64, i64)>, storage::ReadError>) -> Found {
    match result {
        Ok(Some((offset, timestamp))) => Found {
            timestamp,
            offset,
            ..Found::NONE
        },
        Ok(None) => Found::NONE,
        Err(e) => Found::failed(read_error(&e)),
    }
}
