//! DeleteRecords: moves partitions' log start offsets up, on the shards that own them. Records
//! below become unreadable at once (OFFSET_OUT_OF_RANGE, ListOffsets earliest moves); whole
//! segments below are deleted (`storage::Log::delete_records_before`).

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use net::kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};
use storage::DeleteRecordsError;

use crate::api::on_owners;
use crate::routing::Route;
use crate::shard::Shard;

/// Kafka's "up to the high watermark".
const HIGH_WATERMARK: i64 = -1;

/// (error, the new log start offset)
type Moved = (Option<ResponseError>, i64);

pub async fn handle(
    shard: &Rc<Shard>,
    request: DeleteRecordsRequest,
    _version: i16,
) -> DeleteRecordsResponse {
    // Each partition's answer, known now (refused) or to come from its owner.
    let mut answers: Vec<Option<Moved>> = Vec::new();
    let mut slots = Vec::new();
    let mut work = Vec::new();
    let mut shape = Vec::new();
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let meta = shard.topic(&name).filter(|t| !t.internal);
        let mut indexes = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            indexes.push(p.partition_index);
            let route = meta
                .as_ref()
                .map_or(Route::Unknown, |t| shard.route(t, p.partition_index));
            match route {
                Route::Here(owner) => {
                    slots.push(answers.len());
                    work.push((owner, (name.clone(), p.partition_index, p.offset)));
                    answers.push(None);
                }
                refusal => answers.push(Some((refusal.error(), -1))),
            }
        }
        shape.push((topic.name, indexes));
    }
    let moved = on_owners(
        shard,
        work,
        |owner: Rc<Shard>, (name, index, offset): (String, i32, i64)| async move {
            match owner.partition(&name, index) {
                Some(p) => delete_before(&p.log, offset).await,
                None => (Some(ResponseError::NotLeaderOrFollower), -1),
            }
        },
        || (Some(ResponseError::NotLeaderOrFollower), -1),
    )
    .await;
    for (slot, m) in slots.into_iter().zip(moved) {
        answers[slot] = Some(m);
    }
    let mut answers = answers.into_iter();
    let topics = shape
        .into_iter()
        .map(|(name, indexes)| {
            let partitions = indexes
                .into_iter()
                .map(|index| {
                    let (error, low_watermark) = answers
                        .next()
                        .flatten()
                        .unwrap_or((Some(ResponseError::UnknownServerError), -1));
                    DeleteRecordsPartitionResult::default()
                        .with_partition_index(index)
                        .with_low_watermark(low_watermark)
                        .with_error_code(error.map_or(0, |e| e.code()))
                })
                .collect();
            DeleteRecordsTopicResult::default()
                .with_name(name)
                .with_partitions(partitions)
        })
        .collect();
    DeleteRecordsResponse::default().with_topics(topics)
}

async fn delete_before(log: &storage::Log, offset: i64) -> Moved {
    let offset = if offset == HIGH_WATERMARK {
        log.high_watermark()
    } else {
        offset
    };
    match log.delete_records_before(offset).await {
        Ok(start) => (None, start),
        Err(DeleteRecordsError::OffsetOutOfRange { .. }) => {
            (Some(ResponseError::OffsetOutOfRange), -1)
        }
        Err(DeleteRecordsError::Log(e)) => {
            tracing::error!(log = %log.dir().display(), error = %e, "DeleteRecords");
            (Some(ResponseError::KafkaStorageError), -1)
        }
    }
}
