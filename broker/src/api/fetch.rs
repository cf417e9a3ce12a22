//! Fetch: each partition is read on the shard that owns it; its batches come back as `Bytes`
//! and go into the response frame as they are. While there is less than `min_bytes` to send, the
//! request waits (at most `max_wait_ms` in all) for any of its partitions to get new records,
//! woken by the appends themselves, and reads again.
//!
//! Memory: batches in the shard's cache are served as they are (the cache's budget bounds them,
//! however many consumers hold them). Batches on disk are read only after this shard's fetch
//! memory has room for them, first come, first served: a fetch that already has cached batches
//! to answer with takes what room there is now or answers with those alone; one with nothing
//! waits its turn. A fetch takes at most a quarter of the budget, so that one greedy consumer
//! leaves room for others, and always at least one batch (Kafka's rule: a batch larger than
//! its share is still served, and charged in full). The memory is held until the response is
//! written.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::FetchRequest;
use net::kafka_protocol::protocol::StrBytes;
use net::{FetchPartitionResponse, FetchResponse, FetchTopicResponse, NodeEndpoint};
use net::{HeldMemory, MemoryPermit};
use uuid::Uuid;

use crate::api::on_owners;
use crate::partition::{DiskReads, Fetched};
use crate::routing::{self, Route};
use crate::shard::Shard;

/// The longest a fetch waits for records, whatever the client asks.
const WAIT_MAX: Duration = Duration::from_secs(30);

/// A fetch takes at most this fraction of its shard's fetch memory.
const FETCH_SHARE_DIVISOR: usize = 4;

/// What a disk read holds beyond the batches it returns: it starts at the index entry before
/// the offset and reads 64 KiB past what it was asked for (storage::segment::read_batches).
const DISK_READ_SLACK_BYTES: usize = 64 << 10;

#[derive(Debug, Clone)]
struct Wanted {
    topic: String,
    partition: i32,
    offset: i64,
    max_bytes: usize,
}

pub async fn handle(shard: &Rc<Shard>, request: FetchRequest, version: i16) -> FetchResponse {
    let deadline =
        Instant::now() + Duration::from_millis(request.max_wait_ms.max(0) as u64).min(WAIT_MAX);
    let max_bytes = if version >= 3 {
        usize::try_from(request.max_bytes).unwrap_or(0)
    } else {
        usize::MAX
    };
    let min_bytes = usize::try_from(request.min_bytes).unwrap_or(0);
    let metadata = shard.metadata();

    // The topics as the response will list them, and what to read for each partition.
    let mut topics = Vec::with_capacity(request.topics.len());
    let mut wanted = Vec::new();
    for t in &request.topics {
        let topic = if version >= 13 {
            metadata.topic_by_id(model::TopicId(t.topic_id))
        } else {
            metadata.topics.get(t.topic.as_str())
        }
        .filter(|m| !m.internal);
        let mut partitions = Vec::with_capacity(t.partitions.len());
        for p in &t.partitions {
            let route = topic.map_or(Route::Unknown, |m| {
                routing::route_at_epoch(
                    &metadata,
                    shard.node(),
                    m,
                    p.partition,
                    p.current_leader_epoch,
                )
            });
            let error = match (topic, route) {
                (None, _) if version >= 13 => Some(ResponseError::UnknownTopicId),
                (_, route) => route.error(),
            };
            if let (Some(m), Route::Here(owner)) = (topic, route) {
                wanted.push((
                    owner,
                    Wanted {
                        topic: m.name.clone(),
                        partition: p.partition,
                        offset: p.fetch_offset,
                        max_bytes: usize::try_from(p.partition_max_bytes).unwrap_or(0),
                    },
                ));
            }
            partitions.push((p.partition, error));
        }
        let (name, id) = match topic {
            Some(m) => (StrBytes::from_string(m.name.clone()), m.id.0),
            None => (t.topic.clone().0, t.topic_id),
        };
        topics.push((name, id, partitions));
    }

    let (mut fetched, mut memory) = read(shard, &wanted, max_bytes).await;
    // Kafka answers at once with min_bytes 0, and as soon as there is an error to report.
    loop {
        let total: usize = fetched.iter().map(Fetched::bytes).sum();
        let failed = fetched.iter().any(|f| f.error.is_some());
        if total >= min_bytes || failed || wanted.is_empty() || Instant::now() >= deadline {
            break;
        }
        // Wait for records past what this read saw, not just past the fetch offset.
        let waits: Vec<(usize, Wanted)> = wanted
            .iter()
            .zip(&fetched)
            .map(|((owner, w), f)| {
                let seen = w.offset.max(f.high_watermark);
                (
                    *owner,
                    Wanted {
                        offset: seen,
                        ..w.clone()
                    },
                )
            })
            .collect();
        wait_for_records(shard, &waits, deadline).await;
        // The last read's memory goes back before the next one asks for more.
        drop(fetched);
        drop(memory);
        (fetched, memory) = read(shard, &wanted, max_bytes).await;
    }
    let mut response = respond(topics, fetched, max_bytes);
    response.memory = HeldMemory::new(memory);
    tell_leaders(&mut response, &shard.metadata());
    response
}

/// KIP-951: each partition this node does not lead (or was asked of at another epoch) names its
/// leader and epoch, and the response says how to reach those leaders.
fn tell_leaders(response: &mut FetchResponse, metadata: &model::ClusterMetadata) {
    let redirects = [
        ResponseError::NotLeaderOrFollower.code(),
        ResponseError::FencedLeaderEpoch.code(),
    ];
    let mut leaders = std::collections::BTreeSet::new();
    for topic in &mut response.topics {
        let Some(meta) = metadata
            .topic_by_id(model::TopicId(topic.topic_id))
            .or_else(|| metadata.topics.get(topic.name.as_str()))
        else {
            continue;
        };
        for p in &mut topic.partitions {
            let leader = meta
                .partition(p.partition_index)
                .and_then(|s| Some((s.leader?, s.leader_epoch)));
            if let (true, Some((node, epoch))) = (redirects.contains(&p.error_code), leader) {
                p.current_leader = Some((node.0, epoch.0));
                leaders.insert(node);
            }
        }
    }
    response.node_endpoints = leaders
        .into_iter()
        .filter_map(|id| metadata.brokers.get(&id).filter(|b| !b.fenced))
        .map(|b| NodeEndpoint {
            node_id: b.id.0,
            host: b.host.clone(),
            port: i32::from(b.port),
            rack: b.rack.clone(),
        })
        .collect();
}

/// Reads every wanted partition: from memory first, then from disk where the fetch memory
/// allows (see the module's notes). Returns the fetch memory the disk reads hold.
async fn read(
    shard: &Rc<Shard>,
    wanted: &[(usize, Wanted)],
    max_bytes: usize,
) -> (Vec<Fetched>, MemoryPermit) {
    let mut fetched = read_on_owners(shard, wanted.to_vec(), DiskReads::Deferred).await;
    let budget = &shard.fetch_memory;
    let deferred: Vec<usize> = (0..fetched.len())
        .filter(|&i| fetched[i].needs_disk)
        .collect();
    if deferred.is_empty() {
        return (fetched, budget.empty());
    }
    let cached_bytes: usize = fetched.iter().map(Fetched::bytes).sum();
    let room_bytes = max_bytes.saturating_sub(cached_bytes);
    let share_bytes =
        (budget.capacity_bytes() / FETCH_SHARE_DIVISOR).max(DISK_READ_SLACK_BYTES * 2);
    let want_bytes = deferred
        .iter()
        .map(|&i| wanted[i].1.max_bytes.min(room_bytes) + DISK_READ_SLACK_BYTES)
        .fold(0usize, usize::saturating_add)
        .min(share_bytes);
    let permit = if cached_bytes > 0 {
        // Something to answer with already: take what room there is, or answer with that.
        match (room_bytes > 0)
            .then(|| budget.try_acquire(want_bytes))
            .flatten()
        {
            Some(permit) => permit,
            None => {
                fetched.iter_mut().for_each(|f| f.needs_disk = false);
                return (fetched, budget.empty());
            }
        }
    } else {
        budget.acquire(want_bytes).await
    };
    // Share the grant out in request order; the first partition is read whatever is left (at
    // least one batch), the ones it does not reach are answered empty this time.
    let mut left_bytes = permit.bytes();
    let mut reads = Vec::new();
    let mut granted = Vec::new();
    for (n, &i) in deferred.iter().enumerate() {
        fetched[i].needs_disk = false;
        let grant = left_bytes.saturating_sub(DISK_READ_SLACK_BYTES);
        if grant == 0 && n > 0 {
            continue;
        }
        let grant = wanted[i].1.max_bytes.min(grant);
        left_bytes = left_bytes.saturating_sub(grant + DISK_READ_SLACK_BYTES);
        let (owner, w) = &wanted[i];
        reads.push((
            *owner,
            Wanted {
                max_bytes: grant,
                ..w.clone()
            },
        ));
        granted.push((i, grant));
    }
    let mut permit = permit;
    let mut charged_bytes = 0usize;
    let from_disk = read_on_owners(shard, reads, DiskReads::Allowed).await;
    for ((i, grant), f) in granted.into_iter().zip(from_disk) {
        if !f.batches.is_empty() {
            charged_bytes += f.bytes().max(grant) + DISK_READ_SLACK_BYTES;
        }
        fetched[i] = f;
    }
    // What the reads hold: less than granted when they found less, more when a first batch
    // was larger than its grant (already read: it is charged, not waited for).
    permit.resize_forced(charged_bytes);
    (fetched, permit)
}

async fn read_on_owners(
    shard: &Rc<Shard>,
    wanted: Vec<(usize, Wanted)>,
    disk: DiskReads,
) -> Vec<Fetched> {
    on_owners(
        shard,
        wanted,
        move |owner: Rc<Shard>, w: Wanted| async move {
            match owner.partition(&w.topic, w.partition) {
                Some(p) => p.fetch(w.offset, w.max_bytes, disk).await,
                None => Fetched::failed(ResponseError::NotLeaderOrFollower),
            }
        },
        || Fetched::failed(ResponseError::NotLeaderOrFollower),
    )
    .await
}

/// Waits until any wanted partition's high watermark passes its `offset`, or the deadline.
async fn wait_for_records(shard: &Rc<Shard>, wanted: &[(usize, Wanted)], deadline: Instant) {
    let mut by_owner: std::collections::BTreeMap<usize, Vec<Wanted>> = Default::default();
    for (owner, w) in wanted {
        by_owner.entry(*owner).or_default().push(w.clone());
    }
    let waits: Vec<Pin<Box<dyn Future<Output = ()>>>> = by_owner
        .into_iter()
        .map(|(owner, wanted)| {
            let this = shard.clone();
            let wait: Pin<Box<dyn Future<Output = ()>>> = Box::pin(async move {
                let _ = this
                    .mesh()
                    .run_on(owner, &this, move |s: Rc<Shard>| async move {
                        wait_on_shard(&s, &wanted, deadline).await;
                    })
                    .await;
            });
            wait
        })
        .collect();
    first_before(waits, deadline).await;
}

/// On the owning shard: until one of `wanted` has records past its `offset`, or the deadline.
async fn wait_on_shard(shard: &Rc<Shard>, wanted: &[Wanted], deadline: Instant) {
    let found = shard.partitions(wanted.iter().map(|w| (&*w.topic, w.partition)));
    let partitions: Vec<_> = found
        .into_iter()
        .zip(wanted)
        .filter_map(|(p, w)| Some((p?, w.offset)))
        .collect();
    if partitions.is_empty()
        || partitions
            .iter()
            .any(|(p, offset)| p.has_records_after(*offset))
    {
        return;
    }
    let waits: Vec<Pin<Box<dyn Future<Output = ()> + '_>>> = partitions
        .iter()
        .map(|(p, offset)| {
            let wait: Pin<Box<dyn Future<Output = ()> + '_>> = Box::pin(async move {
                p.high_watermark_mark().wait_for(offset + 1).await;
            });
            wait
        })
        .collect();
    first_before(waits, deadline).await;
}

/// Resolves when the first of `futures` does, or at `deadline`.
async fn first_before<'a>(
    mut futures: Vec<Pin<Box<dyn Future<Output = ()> + 'a>>>,
    deadline: Instant,
) {
    let first = std::future::poll_fn(|cx| {
        if futures.iter_mut().any(|f| f.as_mut().poll(cx).is_ready()) {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    });
    let remaining = deadline.saturating_duration_since(Instant::now());
    let _ = glommio::timer::timeout(remaining, async {
        first.await;
        Ok(())
    })
    .await;
}

type TopicShape = (StrBytes, Uuid, Vec<(i32, Option<ResponseError>)>);

/// Builds the response, keeping it within `max_bytes` (but never empty because of it: the first
/// batch goes out whatever its size, as Kafka requires).
fn respond(topics: Vec<TopicShape>, fetched: Vec<Fetched>, max_bytes: usize) -> FetchResponse {
    let mut fetched = fetched.into_iter();
    let mut total = 0usize;
    let topics = topics
        .into_iter()
        .map(|(name, topic_id, partitions)| FetchTopicResponse {
            name,
            topic_id,
            partitions: partitions
                .into_iter()
                .map(|(partition_index, error)| {
                    let f = match error {
                        Some(e) => Fetched::failed(e),
                        None => fetched
                            .next()
                            .unwrap_or_else(|| Fetched::failed(ResponseError::UnknownServerError)),
                    };
                    let mut records = Vec::new();
                    for batch in f.batches {
                        if total > 0 && total + batch.len() > max_bytes {
                            break;
                        }
                        total += batch.len();
                        records.push(batch);
                    }
                    FetchPartitionResponse {
                        partition_index,
                        error_code: f.error.map_or(0, |e| e.code()),
                        high_watermark: f.high_watermark,
                        last_stable_offset: f.high_watermark,
                        log_start_offset: f.log_start_offset,
                        records,
                        current_leader: None,
                    }
                })
                .collect(),
        })
        .collect();
    FetchResponse {
        throttle_time_ms: 0,
        error_code: 0,
        session_id: 0,
        topics,
        node_endpoints: Vec::new(),
        memory: HeldMemory::default(),
    }
}
