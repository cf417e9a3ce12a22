//! A producer's unsent batches, kept the way the Java client's `RecordAccumulator` keeps them,
//! so that requests look like a real client's:
//! - each partition has a queue of batches, oldest first; records go into the last one until
//!   the next would not fit (`batch.size`), which closes it and opens another;
//! - a leader is *ready* once one of its batches is closed or has waited `linger.ms`, or once the
//!   batches hold `buffer.memory` bytes of records together;
//! - a request to a ready leader takes the first batch of every partition it leads, ready or
//!   not, up to `max.request.size` (at least one batch), starting where the previous request
//!   stopped (the Java client's `drainIndex`), so that no partition waits behind the others.
//!
//! Records keep going into batches while requests are in flight, up to `buffer.memory`: a
//! producer with many partitions sends requests of many small batches, as a real one does.

use std::collections::VecDeque;

use crate::batch::{BATCH_HEADER_BYTES, BatchBuilder, BatchError, Codec};
use crate::cluster::Partition;

/// The settings the batches follow.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub codec: Codec,
    /// Bytes per batch, header included (`batch.size`).
    pub batch_bytes: usize,
    pub linger_ns: u64,
    /// `max.request.size`: batches beyond it wait for the leader's next request.
    pub request_bytes_max: usize,
    /// `buffer.memory`: the record bytes of unsent batches together.
    pub buffer_bytes: usize,
}

/// A batch of one partition, being filled or waiting to be sent.
#[derive(Debug)]
pub struct Pending {
    pub builder: BatchBuilder,
    pub sent: SentBatch,
    deadline_ns: u64,
    /// Took no more records (the next did not fit): it is ready, linger or not.
    closed: bool,
}

/// What the answer to a batch is checked against.
#[derive(Debug)]
pub struct SentBatch {
    /// Position in the topic's partition list.
    pub position: usize,
    pub index: i32,
    pub records: u64,
    pub measured_records: u64,
    pub measured_payload_bytes: u64,
    /// Intended send time of each measured record.
    pub measured_sent_ns: Vec<u64>,
}

/// The batches waiting for one leader.
#[derive(Debug, Default)]
struct LeaderQueue {
    /// The positions of the partitions it leads.
    positions: Vec<usize>,
    /// Where in `positions` the next request starts taking batches.
    drain_index: usize,
    /// Closed batches not yet sent.
    closed: usize,
    /// (position, linger deadline) of every batch opened, oldest first: the first entry whose
    /// batch is unsent holds the next deadline (entries of sent batches are dropped as they
    /// reach the front).
    opened: VecDeque<(usize, u64)>,
}

#[derive(Debug)]
pub struct Accumulator {
    limits: Limits,
    /// Each partition's index and leader, by position.
    partitions: Vec<Partition>,
    /// Each partition's unsent batches, oldest first; only the last one can be open.
    batches: Vec<VecDeque<Pending>>,
    queues: Vec<LeaderQueue>,
    /// Bytes of records in unsent batches, all partitions together.
    buffered_bytes: usize,
    /// The partition records without a key go to.
    sticky: usize,
}

impl Accumulator {
    /// Batches for `partitions` (each naming its leader, below `leaders`); records without a
    /// key start at the partition `first_sticky` picks.
    pub fn new(
        partitions: &[Partition],
        leaders: usize,
        limits: Limits,
        first_sticky: usize,
    ) -> Accumulator {
        let mut queues: Vec<LeaderQueue> = (0..leaders).map(|_| LeaderQueue::default()).collect();
        for (position, partition) in partitions.iter().enumerate() {
            if let Some(queue) = queues.get_mut(partition.leader) {
                queue.positions.push(position);
            }
        }
        Accumulator {
            limits,
            partitions: partitions.to_vec(),
            batches: partitions.iter().map(|_| VecDeque::new()).collect(),
            queues,
            buffered_bytes: 0,
            sticky: first_sticky % partitions.len().max(1),
        }
    }

    /// The partition records without a key go to now.
    pub fn sticky(&self) -> usize {
        self.sticky
    }

    /// The unsent batches hold `buffer.memory`: the producer must send before it makes more.
    pub fn is_full(&self) -> bool {
        self.buffered_bytes >= self.limits.buffer_bytes
    }

    /// Adds a record (of at most `record_bytes_max` in the batch) to the partition's open
    /// batch, or, when it would not fit there, closes that batch and returns `Ok(false)` without
    /// adding it: the caller tries again (without a key, the sticky partition moved on).
    pub fn push(
        &mut self,
        position: usize,
        now_ns: u64,
        record_bytes_max: usize,
        push: impl FnOnce(&mut Pending) -> Result<(), BatchError>,
    ) -> Result<bool, BatchError> {
        let limits = self.limits;
        // Like Kafka's batch.size, the limit counts the batch header: a batch of exactly
        // max.message.bytes is accepted.
        let full = self.batches[position].back().is_some_and(|p| {
            !p.closed
                && BATCH_HEADER_BYTES + p.builder.records_bytes() + record_bytes_max
                    > limits.batch_bytes
        });
        if full {
            self.close(position);
            return Ok(false);
        }
        let pending = self.open_batch(position, now_ns);
        let before = pending.builder.records_bytes();
        push(pending)?;
        let added = pending.builder.records_bytes() - before;
        self.buffered_bytes += added;
        Ok(true)
    }

    /// The partition's open batch, started now if there is none.
    fn open_batch(&mut self, position: usize, now_ns: u64) -> &mut Pending {
        let limits = self.limits;
        let partition = self.partitions[position];
        let batches = &mut self.batches[position];
        if batches.back().is_none_or(|p| p.closed) {
            let deadline_ns = now_ns.saturating_add(limits.linger_ns);
            self.queues[partition.leader]
                .opened
                .push_back((position, deadline_ns));
            batches.push_back(Pending {
                builder: BatchBuilder::new(limits.codec, limits.batch_bytes),
                sent: SentBatch {
                    position,
                    index: partition.index,
                    records: 0,
                    measured_records: 0,
                    measured_payload_bytes: 0,
                    measured_sent_ns: Vec::new(),
                },
                deadline_ns,
                closed: false,
            });
        }
        let last = batches.len() - 1;
        &mut batches[last]
    }

    /// Closes the partition's open batch: it takes no more records and is ready to go.
    fn close(&mut self, position: usize) {
        if let Some(pending) = self.batches[position].back_mut().filter(|p| !p.closed) {
            pending.closed = true;
            self.queues[self.partitions[position].leader].closed += 1;
            if position == self.sticky {
                self.sticky = (self.sticky + 1) % self.batches.len();
            }
        }
    }

    /// Whether the leader's next request should go now: one of its batches is closed or
    /// lingered out, or the buffer is full.
    pub fn ready(&mut self, leader: usize, now_ns: u64) -> bool {
        let Some(oldest_ns) = self.oldest_deadline_ns(leader) else {
            return false;
        };
        self.queues[leader].closed > 0 || oldest_ns <= now_ns || self.is_full()
    }

    /// Whether the leader has unsent batches.
    pub fn has_batches(&mut self, leader: usize) -> bool {
        self.oldest_deadline_ns(leader).is_some()
    }

    /// The linger deadline of the leader's oldest unsent batch, if it has any.
    fn oldest_deadline_ns(&mut self, leader: usize) -> Option<u64> {
        let queue = &mut self.queues[leader];
        while let Some(&(position, deadline_ns)) = queue.opened.front() {
            // A partition's batches go oldest first: the entry's batch is unsent as long as the
            // partition's first is not younger.
            let unsent = self.batches[position]
                .front()
                .is_some_and(|first| first.deadline_ns <= deadline_ns);
            if unsent {
                return Some(deadline_ns);
            }
            queue.opened.pop_front();
        }
        None
    }

    /// The earliest linger deadline of any unsent batch (`u64::MAX`: none).
    pub fn next_deadline_ns(&mut self) -> u64 {
        (0..self.queues.len())
            .filter_map(|leader| self.oldest_deadline_ns(leader))
            .min()
            .unwrap_or(u64::MAX)
    }

    /// The leader's next request: the first batch of each of its partitions, from where the
    /// previous request stopped, up to `request_bytes_max` (at least one batch).
    pub fn drain(&mut self, leader: usize) -> Vec<Pending> {
        let limits = self.limits;
        let queue = &mut self.queues[leader];
        let count = queue.positions.len();
        let mut out = Vec::new();
        let mut request_bytes = 0;
        for step in 0..count {
            let at = (queue.drain_index + step) % count;
            let position = queue.positions[at];
            let Some(first) = self.batches[position].front() else {
                continue;
            };
            let batch_bytes = BATCH_HEADER_BYTES + first.builder.records_bytes();
            if !out.is_empty() && request_bytes + batch_bytes > limits.request_bytes_max {
                queue.drain_index = at;
                break;
            }
            let Some(pending) = self.batches[position].pop_front() else {
                continue;
            };
            if pending.closed {
                queue.closed -= 1;
            } else if position == self.sticky {
                self.sticky = (self.sticky + 1) % self.batches.len();
            }
            request_bytes += batch_bytes;
            self.buffered_bytes -= pending.builder.records_bytes();
            out.push(pending);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RECORD_BYTES: usize = 100;
    /// What a record of `RECORD_BYTES` adds to a batch (its length, attributes, deltas...).
    const RECORD_BYTES_MAX: usize = RECORD_BYTES + 24;

    fn accumulator(partitions: usize, limits: Limits) -> Accumulator {
        let partitions: Vec<Partition> = (0..partitions)
            .map(|i| Partition {
                index: i as i32,
                leader: 0,
            })
            .collect();
        Accumulator::new(&partitions, 1, limits, 0)
    }

    fn limits() -> Limits {
        Limits {
            codec: Codec::None,
            // Three records fit a batch.
            batch_bytes: BATCH_HEADER_BYTES + 3 * RECORD_BYTES_MAX,
            linger_ns: 1_000,
            request_bytes_max: 1 << 20,
            buffer_bytes: 1 << 20,
        }
    }

    /// Adds one record to `position`'s batches; false if it closed a full batch instead.
    fn record(acc: &mut Accumulator, position: usize, now_ns: u64) -> bool {
        acc.push(position, now_ns, RECORD_BYTES_MAX, |p| {
            p.sent.records += 1;
            p.builder.push(0, None, &[&[7; RECORD_BYTES]])
        })
        .unwrap()
    }

    fn indexes(batches: &[Pending]) -> Vec<i32> {
        batches.iter().map(|b| b.sent.index).collect()
    }

    #[test]
    fn a_full_batch_sends_every_partitions_first_batch() {
        let mut acc = accumulator(3, limits());
        record(&mut acc, 1, 0);
        assert!(!acc.ready(0, 0), "nothing closed or lingered out yet");
        for _ in 0..3 {
            assert!(record(&mut acc, 0, 0));
        }
        assert!(
            !record(&mut acc, 0, 0),
            "the fourth record closes the batch"
        );
        assert!(record(&mut acc, 0, 0), "and goes into a new one");
        assert!(acc.ready(0, 0));
        let sent = acc.drain(0);
        assert_eq!(indexes(&sent), [0, 1], "partition 1's batch goes along");
        assert_eq!(sent[0].sent.records, 3);
        assert!(
            !acc.ready(0, 0),
            "partition 0's new batch is neither full nor old"
        );
        assert_eq!(indexes(&acc.drain(0)), [0]);
        assert!(!acc.has_batches(0));
    }

    #[test]
    fn a_batch_is_ready_once_it_lingered() {
        let mut acc = accumulator(2, limits());
        record(&mut acc, 0, 100);
        record(&mut acc, 1, 500);
        assert!(!acc.ready(0, 1_099));
        assert!(acc.ready(0, 1_100));
        assert_eq!(acc.next_deadline_ns(), 1_100);
        acc.drain(0);
        record(&mut acc, 1, 2_000);
        assert_eq!(
            acc.next_deadline_ns(),
            3_000,
            "the sent batches' deadlines are gone"
        );
    }

    #[test]
    fn a_request_stops_at_its_size_and_the_next_goes_on_from_there() {
        let one_batch = BATCH_HEADER_BYTES + RECORD_BYTES_MAX;
        let mut acc = accumulator(
            4,
            Limits {
                request_bytes_max: 2 * one_batch,
                ..limits()
            },
        );
        for position in 0..4 {
            record(&mut acc, position, 0);
        }
        assert_eq!(indexes(&acc.drain(0)), [0, 1]);
        record(&mut acc, 0, 0);
        assert_eq!(
            indexes(&acc.drain(0)),
            [2, 3],
            "fair: not partition 0 again"
        );
        assert_eq!(indexes(&acc.drain(0)), [0]);
    }

    #[test]
    fn a_batch_larger_than_a_request_still_goes() {
        let mut acc = accumulator(
            2,
            Limits {
                request_bytes_max: 1,
                ..limits()
            },
        );
        record(&mut acc, 0, 0);
        record(&mut acc, 1, 0);
        assert_eq!(indexes(&acc.drain(0)), [0]);
        assert_eq!(indexes(&acc.drain(0)), [1]);
    }

    #[test]
    fn a_full_buffer_makes_the_leader_ready_and_sending_empties_it() {
        let mut acc = accumulator(
            2,
            Limits {
                buffer_bytes: 2 * RECORD_BYTES,
                ..limits()
            },
        );
        record(&mut acc, 0, 0);
        assert!(!acc.is_full() && !acc.ready(0, 0));
        record(&mut acc, 1, 0);
        assert!(acc.is_full() && acc.ready(0, 0));
        assert_eq!(indexes(&acc.drain(0)), [0, 1]);
        assert!(!acc.is_full());
    }

    #[test]
    fn records_without_keys_move_on_when_their_batch_closes_or_goes() {
        let mut acc = accumulator(3, limits());
        assert_eq!(acc.sticky(), 0);
        let sticky = |acc: &mut Accumulator| record(acc, acc.sticky(), 0);
        for _ in 0..3 {
            assert!(sticky(&mut acc));
        }
        assert!(!sticky(&mut acc));
        assert_eq!(acc.sticky(), 1, "the full batch moved it on");
        assert!(sticky(&mut acc));
        acc.drain(0);
        assert_eq!(
            acc.sticky(),
            2,
            "sending partition 1's open batch moved it on"
        );
    }
}
