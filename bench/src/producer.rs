//! One producer: builds batches, keeps up to `max_in_flight` Produce requests in flight per
//! leader, and records when each record is acknowledged.
//!
//! Records are generated at their intended send times: now, as fast as the pipeline takes them,
//! or on a fixed schedule with `--rate`. Latency counts from the intended time, so a stall
//! (a full pipeline, a slow broker) shows in the figures instead of silently delaying the
//! schedule (no coordinated omission).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::sync::{Semaphore, StaticPermit};
use net::client::partitioner::partition_for_key;
use net::client::{ClientError, ConnectOptions, error_name};
use net::kafka_protocol::messages::ProduceResponse;
use net::kafka_protocol::messages::produce_response::PartitionProduceResponse;
use net::kafka_protocol::protocol::StrBytes;
use net::{ProducePartition, ProduceRequest, ProduceTopic};

use crate::accumulator::{Accumulator, Limits, Pending, SentBatch};
use crate::batch::Codec;
use crate::cluster::{Leader, Partition};
use crate::keys::KeyWriter;
use crate::pipeline::{self, ProduceReceiver, ProduceSender};
use crate::stamp::{STAMP_BYTES, Stamp};
use crate::stats::{LocalLatency, Shared};

/// What every producer of a run shares.
#[derive(Debug)]
pub struct ProduceConfig {
    pub topic: StrBytes,
    pub partitions: Vec<Partition>,
    pub leaders: Vec<Leader>,
    pub record_size: usize,
    pub batch_size: usize,
    pub linger_ns: u64,
    /// The Produce request's acks field.
    pub acks: i16,
    pub codec: Codec,
    pub keys: Option<u64>,
    pub producers: usize,
    pub max_in_flight: usize,
    /// The most a request carries (Kafka's max.request.size): batches for one leader beyond it
    /// wait for the next request.
    pub request_bytes_max: usize,
    /// The most record bytes unsent batches hold together (Kafka's buffer.memory).
    pub buffer_bytes: usize,
    /// Records meant for this time or later are not produced.
    pub produce_end_ns: Option<u64>,
    pub connect: ConnectOptions,
    /// Value bytes after the stamp, `record_size` long: each record takes its prefix.
    pub payload: Arc<[u8]>,
}

/// One producer's share of the run.
#[derive(Debug, Clone, Copy)]
pub struct ProducerPlan {
    pub id: usize,
    /// Records to produce; `None`: until the end time.
    pub quota: Option<u64>,
    /// Records per second; `None`: as fast as possible.
    pub rate: Option<f64>,
}

/// Runs a producer to the end and reports how it went to `shared`.
pub async fn run(plan: ProducerPlan, config: Arc<ProduceConfig>, shared: Arc<Shared>) {
    if let Err(e) = produce(plan, &config, &shared).await {
        shared.fail(format!("producer {}: {e}", plan.id));
    }
    shared.producer_finished();
}

/// A record's key and value overhead in a batch is at most this (length, attributes,
/// timestamp and offset deltas, key and value lengths, header count).
const RECORD_OVERHEAD_BYTES_MAX: usize = 24;

/// Without `--rate`, the clock is read once per this many records.
const CLOCK_READ_RECORDS: u64 = 16;

/// While requests are in flight, answers are let in every this many records (about 50 µs of
/// making records).
const ANSWERS_READ_RECORDS: u64 = 64;

/// With `--rate`, the producer sleeps until this much past the next record's intended time.
const RATE_SLICE_NS: u64 = 50_000;

/// A request awaiting its answer; its permit frees a pipeline slot when dropped.
#[derive(Debug)]
struct InFlight {
    correlation_id: i32,
    batches: Vec<SentBatch>,
    _permit: StaticPermit,
}

/// A connection to one leader.
#[derive(Debug)]
struct Link {
    addr: String,
    sender: ProduceSender,
    slots: Rc<Semaphore>,
    /// `None` with acks=0: nothing comes back.
    queue: Option<LocalSender<InFlight>>,
    receiver: Option<glommio::task::JoinHandle<()>>,
    /// Why the receiving half gave up.
    broken: Rc<RefCell<Option<String>>>,
}

struct Producer<'a> {
    plan: ProducerPlan,
    config: &'a ProduceConfig,
    shared: &'a Arc<Shared>,
    links: Vec<Link>,
    batches: Accumulator,
}

async fn produce(
    plan: ProducerPlan,
    config: &ProduceConfig,
    shared: &Arc<Shared>,
) -> Result<(), ClientError> {
    let mut links = Vec::with_capacity(config.leaders.len());
    for leader in &config.leaders {
        links.push(connect(leader, config, shared).await?);
    }
    let limits = Limits {
        codec: config.codec,
        batch_bytes: config.batch_size,
        linger_ns: config.linger_ns,
        request_bytes_max: config.request_bytes_max,
        buffer_bytes: config.buffer_bytes,
    };
    let batches = Accumulator::new(&config.partitions, config.leaders.len(), limits, plan.id);
    let mut producer = Producer {
        plan,
        config,
        shared,
        links,
        batches,
    };
    let generated = producer.generate().await;
    let flushed = match generated {
        Ok(()) => producer.send_all().await,
        Err(e) => Err(e),
    };
    // Closing the queues lets the receivers finish what is in flight.
    let mut broken = None;
    for link in &mut producer.links {
        link.queue = None;
        if let Some(receiver) = link.receiver.take() {
            let _ = receiver.await;
        }
        let reason = link.broken.borrow().clone();
        broken = broken.or_else(|| reason.map(|reason| (link.addr.clone(), reason)));
    }
    flushed?;
    match broken {
        Some((addr, reason)) => Err(ClientError::Broken { addr, reason }),
        None => Ok(()),
    }
}

async fn connect(
    leader: &Leader,
    config: &ProduceConfig,
    shared: &Arc<Shared>,
) -> Result<Link, ClientError> {
    let (sender, receiver) =
        pipeline::connect(&leader.addr, leader.produce_version, &config.connect).await?;
    let slots = Rc::new(Semaphore::new(config.max_in_flight as u64));
    let broken = Rc::new(RefCell::new(None));
    let (queue, receiver) = if config.acks == 0 {
        (None, None)
    } else {
        let (queue, in_flight) = local_channel::new_bounded(config.max_in_flight);
        let task = glommio::spawn_local(receive(
            receiver,
            in_flight,
            slots.clone(),
            broken.clone(),
            config.topic.clone(),
            shared.clone(),
        ))
        .detach();
        (Some(queue), Some(task))
    };
    Ok(Link {
        addr: leader.addr.clone(),
        sender,
        slots,
        queue,
        receiver,
        broken,
    })
}

/// How a request waits for a pipeline slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotWait {
    /// Only if one is free: otherwise the producer goes on filling batches.
    IfFree,
    /// Until one is.
    Wait,
}

impl Producer<'_> {
    /// Generates records until the quota or the end time, sending batches as they fill or
    /// linger out.
    async fn generate(&mut self) -> Result<(), ClientError> {
        let config = self.config;
        let shared = self.shared;
        let clock = &shared.clock;
        let stamp_bytes = if config.record_size >= STAMP_BYTES {
            STAMP_BYTES
        } else {
            0
        };
        let payload = config.payload.get(..config.record_size - stamp_bytes);
        let payload = payload.unwrap_or_default();
        let interval_ns = self.plan.rate.map(|rate| 1e9 / rate);
        let mut keys = KeyWriter::default();
        let mut seq: u64 = 0;
        let mut now = 0;
        let mut stale = true;
        loop {
            if self.plan.quota.is_some_and(|quota| seq >= quota) {
                return Ok(());
            }
            // As fast as possible, records a few hundred nanoseconds apart may share a reading
            // of the clock (reading it per record costs a tenth of the bench's time), but not
            // across a wait.
            if stale || interval_ns.is_some() || seq % CLOCK_READ_RECORDS == 0 {
                if !stale && seq % ANSWERS_READ_RECORDS == 0 && self.awaits_answers() {
                    // While this task fills batches, answers (which free pipeline slots) are
                    // read only once the executor polls its ring, which it does when no task
                    // is runnable: a short sleep lets it. (A shorter preempt timer instead
                    // left glommio 0.9's executor parked with a reply unread.)
                    glommio::timer::sleep(Duration::from_micros(1)).await;
                }
                now = clock.now_ns();
                stale = false;
            }
            let intended = interval_ns.map_or(now, |interval| (seq as f64 * interval) as u64);
            if config.produce_end_ns.is_some_and(|end| intended >= end) {
                return Ok(());
            }
            let wait = if self.batches.is_full() || intended > now {
                SlotWait::Wait
            } else {
                SlotWait::IfFree
            };
            if self.send_ready(now, wait).await? {
                stale = true;
                continue;
            }
            if intended > now {
                // A wake-up per record would cost more than the record (a timer through the
                // ring, 1 µs apart at 1M records/s), so records due within a slice are made
                // together, each still stamped with its own intended time.
                let wake = intended
                    .saturating_add(RATE_SLICE_NS)
                    .min(self.batches.next_deadline_ns());
                glommio::timer::sleep(Duration::from_nanos(wake.saturating_sub(now))).await;
                stale = true;
                continue;
            }
            let key = config.keys.map(|n| {
                let index = seq
                    .wrapping_mul(config.producers as u64)
                    .wrapping_add(self.plan.id as u64)
                    % n;
                keys.key(index)
            });
            let position = match key {
                // Kafka counts partitions in an i32; the partition found is below the count.
                Some(key) => partition_for_key(key, config.partitions.len() as i32) as usize,
                None => self.batches.sticky(),
            };
            let record_bytes =
                config.record_size + key.map_or(0, <[u8]>::len) + RECORD_OVERHEAD_BYTES_MAX;
            let stamp = Stamp {
                run_id: clock.run_id,
                sent_ns: intended,
            }
            .encode();
            let measured = clock.is_measured(intended);
            let pushed = self.batches.push(position, now, record_bytes, |pending| {
                pending.builder.push(
                    clock.wall_ms(intended),
                    key,
                    &[&stamp[..stamp_bytes], payload],
                )?;
                let sent = &mut pending.sent;
                sent.records += 1;
                if measured {
                    sent.measured_records += 1;
                    sent.measured_payload_bytes +=
                        (config.record_size + key.map_or(0, <[u8]>::len)) as u64;
                    sent.measured_sent_ns.push(intended);
                }
                Ok(())
            });
            match pushed {
                Ok(true) => {}
                // The batch was full and is closed: the record goes to a new one (or, without
                // keys, to the next partition's).
                Ok(false) => continue,
                Err(e) => return Err(ClientError::Usage(e.to_string())),
            }
            seq += 1;
        }
    }

    fn awaits_answers(&self) -> bool {
        let max = self.config.max_in_flight as u64;
        self.links.iter().any(|l| l.slots.available() < max)
    }

    /// Sends a request to every leader that is ready and has a slot (`wait` says whether to
    /// wait for one). Whether it sent any.
    async fn send_ready(&mut self, now_ns: u64, wait: SlotWait) -> Result<bool, ClientError> {
        let mut sent = false;
        for leader in 0..self.links.len() {
            if !self.batches.ready(leader, now_ns) {
                continue;
            }
            if wait == SlotWait::IfFree && self.links[leader].slots.available() == 0 {
                continue;
            }
            let batches = self.batches.drain(leader);
            self.send(leader, batches).await?;
            sent = true;
        }
        Ok(sent)
    }

    /// Sends every batch left, waiting for slots as it must.
    async fn send_all(&mut self) -> Result<(), ClientError> {
        for leader in 0..self.links.len() {
            while self.batches.has_batches(leader) {
                let batches = self.batches.drain(leader);
                self.send(leader, batches).await?;
            }
        }
        Ok(())
    }

    async fn send(&mut self, leader: usize, batches: Vec<Pending>) -> Result<(), ClientError> {
        let mut partitions = Vec::with_capacity(batches.len());
        let mut sent = Vec::with_capacity(batches.len());
        for pending in batches {
            let records = pending
                .builder
                .finish()
                .map_err(|e| ClientError::Usage(e.to_string()))?;
            partitions.push(ProducePartition {
                index: pending.sent.index,
                records: Some(records),
            });
            sent.push(pending.sent);
        }
        let request = ProduceRequest::<Bytes> {
            transactional_id: None,
            acks: self.config.acks,
            timeout_ms: i32::try_from(self.config.connect.request_timeout_ms).unwrap_or(i32::MAX),
            topics: vec![ProduceTopic {
                name: self.config.topic.clone(),
                partitions,
            }],
        };
        let link = &mut self.links[leader];
        let lost = |shared: &Shared, sent: &[SentBatch], e: ClientError| {
            shared.count_error(
                "records lost with their connection",
                sent.iter().map(|b| b.records).sum(),
            );
            e
        };
        let permit = match link.slots.acquire_static_permit(1).await {
            Ok(permit) => permit,
            Err(_) => {
                let reason = link.broken.borrow().clone().unwrap_or_default();
                let e = ClientError::Broken {
                    addr: link.addr.clone(),
                    reason,
                };
                return Err(lost(self.shared, &sent, e));
            }
        };
        let correlation_id = match link.sender.send(&request).await {
            Ok(id) => id,
            Err(e) => return Err(lost(self.shared, &sent, e)),
        };
        match &link.queue {
            Some(queue) => {
                let in_flight = InFlight {
                    correlation_id,
                    batches: sent,
                    _permit: permit,
                };
                // The permits bound the requests in flight to the queue's capacity.
                if queue.try_send(in_flight).is_err() {
                    return Err(ClientError::Usage("in-flight queue overflow".into()));
                }
            }
            // acks=0: written is all there is to know.
            None => {
                let now = self.shared.clock.now_ns();
                for batch in &sent {
                    self.shared.produce.add(
                        now,
                        batch.records,
                        batch.measured_records,
                        batch.measured_payload_bytes,
                    );
                }
            }
        }
        glommio::yield_if_needed().await;
        Ok(())
    }
}

/// The receiving half of a link: settles answers in order until the queue closes.
async fn receive(
    mut receiver: ProduceReceiver,
    queue: LocalReceiver<InFlight>,
    slots: Rc<Semaphore>,
    broken: Rc<RefCell<Option<String>>>,
    topic: StrBytes,
    shared: Arc<Shared>,
) {
    let mut latency = LocalLatency::new(&shared.produce_latency);
    while let Some(in_flight) = queue.recv().await {
        let records: u64 = in_flight.batches.iter().map(|b| b.records).sum();
        if broken.borrow().is_some() {
            shared.count_error("records lost with their connection", records);
            continue;
        }
        match receiver.receive(in_flight.correlation_id).await {
            Ok(response) => {
                let now = shared.clock.now_ns();
                settle(
                    &response,
                    &topic,
                    &in_flight.batches,
                    now,
                    &shared,
                    &mut latency,
                );
                latency.maybe_merge(now);
            }
            Err(e) => {
                shared.count_error("records lost with their connection", records);
                *broken.borrow_mut() = Some(e.to_string());
                // Wakes a sender waiting for a slot: it will find the link broken.
                slots.close();
            }
        }
    }
}

/// Counts a request's batches as acknowledged or failed, per the answer for each partition.
fn settle(
    response: &ProduceResponse,
    topic: &StrBytes,
    batches: &[SentBatch],
    now_ns: u64,
    shared: &Shared,
    latency: &mut LocalLatency<'_>,
) {
    // A request carries a batch for each of up to thousands of partitions: one look-up each.
    let answers: HashMap<i32, &PartitionProduceResponse> = response
        .responses
        .iter()
        .filter(|t| t.name.0 == *topic)
        .flat_map(|t| &t.partition_responses)
        .map(|p| (p.index, p))
        .collect();
    for batch in batches {
        let Some(answer) = answers.get(&batch.index) else {
            shared.count_error("Produce response without the partition", batch.records);
            continue;
        };
        if answer.error_code != 0 {
            shared.count_error(error_name(answer.error_code), batch.records);
            continue;
        }
        shared.produce.add(
            now_ns,
            batch.records,
            batch.measured_records,
            batch.measured_payload_bytes,
        );
        shared.acked_up_to(
            batch.position,
            answer.base_offset.saturating_add(batch.records as i64),
        );
        for &sent_ns in &batch.measured_sent_ns {
            latency.record_ns(now_ns.saturating_sub(sent_ns));
        }
    }
}
