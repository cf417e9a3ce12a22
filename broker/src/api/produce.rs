//! Produce: each partition's record set goes to the shard that owns the partition (as the
//! `BytesMut` it arrived in, never copied); the answers come back in request order.

use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use net::ProduceRequest;
use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::BrokerId;
use net::kafka_protocol::messages::ProduceResponse;
use net::kafka_protocol::messages::produce_response::{
    LeaderIdAndEpoch, NodeEndpoint, PartitionProduceResponse, TopicProduceResponse,
};
use net::kafka_protocol::protocol::StrBytes;

use crate::api::on_owners;
use net::Acks;

use crate::partition::Produced;
use crate::routing::Route;
use crate::shard::Shard;

/// The longest a produce waits for acknowledgement, whatever the client asks.
const TIMEOUT_MAX: Duration = Duration::from_secs(300);

struct Work {
    /// Shared by the partitions of a topic: a request carries hundreds of them at once.
    topic: Arc<str>,
    partition: i32,
    records: BytesMut,
}

/// Answers a produce; `None` for acks=0, which gets no response.
pub async fn handle(
    shard: &Rc<Shard>,
    request: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    let acks = Acks::from_wire(request.acks);
    let timeout = Duration::from_millis(request.timeout_ms.max(0) as u64).min(TIMEOUT_MAX);
    let durability = shard.config.durability;
    let transactional = request.transactional_id.is_some();

    // One slot per partition of the request, in order; work for owners where it can be done.
    let mut answers: Vec<Option<Produced>> = Vec::new();
    let mut work = Vec::new();
    let mut shape = Vec::new();
    for topic in request.topics {
        let name: Arc<str> = Arc::from(topic.name.as_str());
        let meta = shard.topic(&name).filter(|t| !t.internal);
        let mut indexes = Vec::with_capacity(topic.partitions.len());
        for partition in topic.partitions {
            indexes.push(partition.index);
            let refused = |e: ResponseError, m: &str| Some(Produced::failed(e, m.to_string()));
            let answer = if acks.is_none() {
                refused(
                    ResponseError::InvalidRequiredAcks,
                    "acks must be 0, 1 or -1",
                )
            } else if transactional {
                refused(
                    ResponseError::TransactionalIdAuthorizationFailed,
                    "transactions are not supported",
                )
            } else {
                let route = meta
                    .as_ref()
                    .map_or(Route::Unknown, |t| shard.route(t, partition.index));
                match (route, partition.records) {
                    (Route::Here(_), None) => refused(ResponseError::CorruptMessage, "no records"),
                    (Route::Here(owner), Some(records)) => {
                        work.push((
                            owner,
                            (
                                answers.len(),
                                Work {
                                    topic: name.clone(),
                                    partition: partition.index,
                                    records,
                                },
                            ),
                        ));
                        None
                    }
                    (refusal, _) => refused(
                        refusal.error().unwrap_or(ResponseError::UnknownServerError),
                        "this broker does not lead that partition (or it does not exist)",
                    ),
                }
            };
            answers.push(answer);
        }
        shape.push((topic.name, indexes));
    }

    let acks = acks.unwrap_or(Acks::All);
    let (slots, work): (Vec<usize>, Vec<(usize, Work)>) = work
        .into_iter()
        .map(|(owner, (slot, w))| (slot, (owner, w)))
        .unzip();
    let produced = on_owners(
        shard,
        work,
        move |owner: Rc<Shard>, w: Work| async move {
            match owner.partition(&w.topic, w.partition) {
                Some(p) => p.produce(w.records, acks, durability, timeout).await,
                None => Produced::failed(ResponseError::NotLeaderOrFollower, None),
            }
        },
        || Produced::failed(ResponseError::NotLeaderOrFollower, None),
    )
    .await;
    for (slot, answer) in slots.into_iter().zip(produced) {
        answers[slot] = Some(answer);
    }
    if acks == Acks::None {
        return None;
    }

    let mut answers = answers.into_iter();
    let metadata = shard.metadata();
    // KIP-951: a client told NOT_LEADER_OR_FOLLOWER is told the leader too, and how to reach it.
    let mut leaders = std::collections::BTreeSet::new();
    let responses = shape
        .into_iter()
        .map(|(name, indexes)| {
            let partition_responses = indexes
                .into_iter()
                .map(|index| {
                    let a = answers.next().flatten().unwrap_or_else(|| {
                        Produced::failed(ResponseError::UnknownServerError, None)
                    });
                    let mut r = PartitionProduceResponse::default()
                        .with_index(index)
                        .with_error_code(a.error.map_or(0, |e| e.code()))
                        .with_base_offset(a.base_offset)
                        .with_log_append_time_ms(a.log_append_time_ms);
                    if version >= 5 {
                        r = r.with_log_start_offset(a.log_start_offset);
                    }
                    if version >= 8 && a.error.is_some() {
                        r = r.with_error_message(a.message.map(StrBytes::from_string));
                    }
                    let leader = metadata
                        .topics
                        .get(name.as_str())
                        .and_then(|t| t.partition(index))
                        .and_then(|p| Some((p.leader?, p.leader_epoch)));
                    if let (true, Some((node, epoch))) = (
                        version >= 10 && a.error == Some(ResponseError::NotLeaderOrFollower),
                        leader,
                    ) {
                        leaders.insert(node);
                        r = r.with_current_leader(
                            LeaderIdAndEpoch::default()
                                .with_leader_id(BrokerId(node.0))
                                .with_leader_epoch(epoch.0),
                        );
                    }
                    r
                })
                .collect();
            TopicProduceResponse::default()
                .with_name(name.into())
                .with_partition_responses(partition_responses)
        })
        .collect();
    let node_endpoints = leaders
        .into_iter()
        .filter_map(|id| metadata.brokers.get(&id).filter(|b| !b.fenced))
        .map(|b| {
            NodeEndpoint::default()
                .with_node_id(BrokerId(b.id.0))
                .with_host(StrBytes::from_string(b.host.clone()))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.clone().map(StrBytes::from_string))
        })
        .collect();
    Some(
        ProduceResponse::default()
            .with_responses(responses)
            .with_node_endpoints(node_endpoints),
    )
}
