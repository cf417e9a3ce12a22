//! ElectLeaders (API 43, KIP-460): a preferred election (type 0: the first replica leads again,
//! if it is live and in sync) or an unclean one (type 1: a partition without a leader gets one,
//! from outside the ISR if need be), for the partitions named or, with none named, for every
//! partition of every topic clients see; that answer leaves out the partitions that needed no
//! election, as Kafka's does.
//!
//! Each election is decided from this shard's metadata (`quorum::leadership::elect`) and
//! proposed through the controller as a `ChangePartition`. The controller refuses one made for
//! a partition that changed meanwhile (its epochs grew, or the new leader was fenced): that
//! partition is decided again on the newer metadata, which the refusal's commit brought here.

use std::collections::BTreeMap;
use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::elect_leaders_response::{
    PartitionResult, ReplicaElectionResult,
};
use net::kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use net::kafka_protocol::protocol::StrBytes;
use quorum::leadership::{self, Election, ElectionError};

use crate::controller;
use crate::metadata::TopicError;
use crate::shard::Shard;

/// How many times a partition is decided again after the controller refused the decision as
/// made on metadata that has since changed.
const ATTEMPTS: usize = 3;

type PartitionKey = (String, i32);

pub async fn handle(shard: &Rc<Shard>, request: ElectLeadersRequest) -> ElectLeadersResponse {
    let election = match request.election_type {
        0 => Election::Preferred,
        1 => Election::Unclean,
        _ => {
            return ElectLeadersResponse::default()
                .with_error_code(ResponseError::InvalidRequest.code());
        }
    };
    let named = request.topic_partitions.is_some();
    let wanted = asked(shard, request);
    let mut outcomes = elect(shard, election, &wanted).await;
    let mut by_topic: Vec<ReplicaElectionResult> = Vec::new();
    for key in wanted {
        let Some(outcome) = outcomes.remove(&key) else {
            continue; // a repeat of a partition already answered
        };
        let not_needed = matches!(&outcome, Err(e) if e.code == ResponseError::ElectionNotNeeded);
        if !named && not_needed {
            continue;
        }
        let (code, message) = match outcome {
            Ok(()) => (0, None),
            Err(e) => (e.code.code(), Some(StrBytes::from_string(e.message))),
        };
        let (topic, partition) = key;
        let result = PartitionResult::default()
            .with_partition_id(partition)
            .with_error_code(code)
            .with_error_message(message);
        match by_topic.last_mut() {
            Some(last) if last.topic.0.as_str() == topic => last.partition_result.push(result),
            _ => by_topic.push(
                ReplicaElectionResult::default()
                    .with_topic(TopicName(StrBytes::from_string(topic)))
                    .with_partition_result(vec![result]),
            ),
        }
    }
    ElectLeadersResponse::default().with_replica_election_results(by_topic)
}

/// The partitions the request names, in its order, or every partition of every visible topic.
fn asked(shard: &Shard, request: ElectLeadersRequest) -> Vec<PartitionKey> {
    match request.topic_partitions {
        Some(topics) => topics
            .into_iter()
            .flat_map(|t| {
                let topic = t.topic.0.to_string();
                t.partitions.into_iter().map(move |p| (topic.clone(), p))
            })
            .collect(),
        None => shard
            .metadata()
            .visible_topics()
            .flat_map(|t| (0..t.partition_count()).map(|p| (t.name.clone(), p)))
            .collect(),
    }
}

/// Each partition's election, decided and committed (again on newer metadata when the
/// controller refused it as stale).
async fn elect(
    shard: &Rc<Shard>,
    election: Election,
    wanted: &[PartitionKey],
) -> BTreeMap<PartitionKey, Result<(), TopicError>> {
    let mut outcomes = BTreeMap::new();
    let mut pending: Vec<PartitionKey> = wanted.to_vec();
    pending.sort_unstable();
    pending.dedup();
    for attempt in 1..=ATTEMPTS {
        let metadata = shard.metadata();
        let mut commands = Vec::new();
        let mut proposed = Vec::new();
        for key in pending.drain(..) {
            let (topic, partition) = &key;
            let decided = match metadata.topics.get(topic) {
                Some(t) if !t.internal => leadership::elect(&metadata, topic, *partition, election),
                // The offsets log is the broker's own: hidden from every API.
                _ => Err(ElectionError::UnknownPartition {
                    topic: topic.clone(),
                    partition: *partition,
                }),
            };
            match decided {
                Ok(command) => {
                    commands.push(command);
                    proposed.push(key);
                }
                Err(e) => {
                    outcomes.insert(key, Err(refusal(&e)));
                }
            }
        }
        if commands.is_empty() {
            break;
        }
        let committed = match controller::propose(shard, commands).await {
            Ok(committed) => committed,
            Err(e) => {
                for key in proposed {
                    outcomes.insert(key, Err(e.clone()));
                }
                break;
            }
        };
        for (key, outcome) in proposed.into_iter().zip(committed) {
            match outcome {
                Ok(_) => {
                    outcomes.insert(key, Ok(()));
                }
                Err(_) if attempt < ATTEMPTS => pending.push(key),
                Err(e) => {
                    outcomes.insert(key, Err(e));
                }
            }
        }
    }
    outcomes
}

fn refusal(e: &ElectionError) -> TopicError {
    let code = match e {
        ElectionError::UnknownPartition { .. } => ResponseError::UnknownTopicOrPartition,
        ElectionError::NotNeeded => ResponseError::ElectionNotNeeded,
        ElectionError::PreferredLeaderNotAvailable(_) => ResponseError::PreferredLeaderNotAvailable,
        ElectionError::EligibleLeadersNotAvailable => ResponseError::EligibleLeadersNotAvailable,
    };
    TopicError::new(code, e.to_string())
}
