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

use crate::api::on_owners_by_part;
use net::Acks;

use crate::config::Durability;
use crate::partition::{Partition, Pending, Produced};
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
    let produced = on_owners_by_part(
        shard,
        work,
        move |owner: Rc<Shard>, part: Vec<Work>| {
            produce_part(owner, part, acks, durability, timeout)
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
                    // Looked up only for a refusal: a request keyed over thousands of
                    // partitions would otherwise pay a metadata look-up per partition.
                    let refused =
                        version >= 10 && a.error == Some(ResponseError::NotLeaderOrFollower);
                    let leader = refused
                        .then(|| metadata.topics.get(name.as_str())?.partition(index))
                        .flatten()
                        .and_then(|p| Some((p.leader?, p.leader_epoch)));
                    if let Some((node, epoch)) = leader {
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

/// One shard's part of a produce, as Kafka's leader does it: every partition's records appended
/// first, then one deadline for all their acknowledgements. A request keyed over thousands of
/// partitions carries hundreds of one-record batches to a shard, and a timer and a joined
/// future for each cost the shard more than the appends themselves. Once the appends are done
/// the waits mostly end together: the shard's flusher writes every log appended to in one round.
async fn produce_part(
    owner: Rc<Shard>,
    part: Vec<Work>,
    acks: Acks,
    durability: Durability,
    timeout: Duration,
) -> Vec<Produced> {
    // Each append is polled once, in the request's order, before any is waited for: it takes
    // its place in its partition's locks then, so a producer's pipelined requests append in the
    // order they were sent even where one append has to wait (for room to write, say).
    let found = owner.partitions(part.iter().map(|w| (&*w.topic, w.partition)));
    let mut appends: Vec<_> = part
        .into_iter()
        .zip(found)
        .map(|(w, p)| Box::pin(append_one(p, w.records, acks)))
        .collect();
    let mut first_polls = Vec::with_capacity(appends.len());
    for append in &mut appends {
        first_polls.push(futures_lite::future::poll_once(append).await);
    }
    let mut appended = Vec::with_capacity(appends.len());
    for (append, first_poll) in appends.into_iter().zip(first_polls) {
        appended.push(match first_poll {
            Some(done) => done,
            None => append.await,
        });
    }
    let mut answers = Vec::with_capacity(appended.len());
    let waits = async {
        for a in &appended {
            answers.push(match a {
                Ok((p, pending)) => p.acknowledge(pending, acks, durability).await,
                Err(refused) => refused.clone(),
            });
        }
        Ok(())
    };
    // On time out the partitions answered so far keep their answers; the rest time out.
    let _ = glommio::timer::timeout(timeout, waits).await;
    for a in &appended[answers.len()..] {
        answers.push(match a {
            Ok((_, pending)) => pending.timed_out(timeout),
            Err(refused) => refused.clone(),
        });
    }
    debug_assert_eq!(answers.len(), appended.len(), "every partition answered");
    answers
}

async fn append_one(
    partition: Option<Rc<Partition>>,
    records: BytesMut,
    acks: Acks,
) -> Result<(Rc<Partition>, Pending), Produced> {
    let Some(p) = partition else {
        return Err(Produced::failed(ResponseError::NotLeaderOrFollower, None));
    };
    let pending = p.append_produced(records, acks).await?;
    Ok((p, pending))
}
