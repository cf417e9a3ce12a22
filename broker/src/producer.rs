//! Idempotent producers on one partition: each producer's epoch and its last batches, so that a
//! retried batch is answered with its first offset instead of appended twice, and a batch that
//! skips sequence numbers is refused.

use std::collections::{HashMap, VecDeque};

use net::kafka_protocol::ResponseError;
use storage::BatchHeader;

/// Kafka remembers this many batches per producer (max.in.flight.requests.per.connection ≤ 5
/// with idempotence).
const REMEMBERED_BATCHES: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Remembered {
    first_sequence: i32,
    last_sequence: i32,
    base_offset: i64,
}

#[derive(Debug)]
struct Producer {
    epoch: i16,
    batches: VecDeque<Remembered>,
}

/// What to do with a producer's batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Append it.
    Append,
    /// Already appended at this offset: answer with it, append nothing.
    Duplicate { base_offset: i64 },
    /// Refuse it with this error.
    Refuse(ResponseError),
}

#[derive(Debug, Default)]
pub struct Producers {
    producers: HashMap<i64, Producer>,
}

fn next_sequence(sequence: i32) -> i32 {
    // Sequences wrap from i32::MAX to 0, as in Kafka.
    if sequence == i32::MAX {
        0
    } else {
        sequence + 1
    }
}

impl Producers {
    /// Judges a batch before it is appended. Producers this partition does not know (a new
    /// producer, or one whose last batches are older than what was read back after a restart)
    /// are accepted at any sequence.
    pub fn check(&self, batch: &BatchHeader) -> Verdict {
        if !batch.has_producer_id() {
            return Verdict::Append;
        }
        let Some(producer) = self.producers.get(&batch.producer_id) else {
            return Verdict::Append;
        };
        if batch.producer_epoch < producer.epoch {
            return Verdict::Refuse(ResponseError::InvalidProducerEpoch);
        }
        if batch.producer_epoch > producer.epoch {
            return if batch.base_sequence == 0 {
                Verdict::Append
            } else {
                Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
            };
        }
        let last_sequence = last_sequence(batch);
        if let Some(seen) = producer
            .batches
            .iter()
            .find(|b| b.first_sequence == batch.base_sequence && b.last_sequence == last_sequence)
        {
            return Verdict::Duplicate {
                base_offset: seen.base_offset,
            };
        }
        match producer.batches.back() {
            Some(last) if next_sequence(last.last_sequence) != batch.base_sequence => {
                Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
            }
            _ => Verdict::Append,
        }
    }

    /// Remembers a batch that was appended at `base_offset`.
    pub fn record(&mut self, batch: &BatchHeader, base_offset: i64) {
        if !batch.has_producer_id() {
            return;
        }
        let producer = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(|| Producer {
                epoch: batch.producer_epoch,
                batches: VecDeque::new(),
            });
        if batch.producer_epoch != producer.epoch {
            producer.epoch = batch.producer_epoch;
            producer.batches.clear();
        }
        if producer.batches.len() == REMEMBERED_BATCHES {
            producer.batches.pop_front();
        }
        producer.batches.push_back(Remembered {
            first_sequence: batch.base_sequence,
            last_sequence: last_sequence(batch),
            base_offset,
        });
    }
}

fn last_sequence(batch: &BatchHeader) -> i32 {
    let last = i64::from(batch.base_sequence) + i64::from(batch.last_offset_delta);
    (last % (i64::from(i32::MAX) + 1)) as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(producer_id: i64, epoch: i16, sequence: i32, records: i32) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 100,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: epoch,
            base_sequence: sequence,
            record_count: records,
        }
    }

    #[test]
    fn duplicates_are_answered_and_gaps_refused() {
        let mut p = Producers::default();
        let first = batch(7, 0, 0, 5);
        assert_eq!(p.check(&first), Verdict::Append);
        p.record(&first, 100);
        assert_eq!(p.check(&first), Verdict::Duplicate { base_offset: 100 });
        let next = batch(7, 0, 5, 5);
        assert_eq!(p.check(&next), Verdict::Append);
        p.record(&next, 105);
        assert_eq!(
            p.check(&batch(7, 0, 11, 1)),
            Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            p.check(&batch(7, -1, 10, 1)),
            Verdict::Refuse(ResponseError::InvalidProducerEpoch)
        );
        assert_eq!(
            p.check(&batch(7, 1, 0, 1)),
            Verdict::Append,
            "a new epoch starts at 0"
        );
        assert_eq!(
            p.check(&batch(-1, -1, -1, 3)),
            Verdict::Append,
            "not idempotent"
        );
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut p = Producers::default();
        for i in 0..7 {
            p.record(&batch(1, 0, i, 1), i64::from(i));
        }
        assert_eq!(
            p.check(&batch(1, 0, 6, 1)),
            Verdict::Duplicate { base_offset: 6 }
        );
        assert_eq!(
            p.check(&batch(1, 0, 0, 1)),
            Verdict::Refuse(ResponseError::OutOfOrderSequenceNumber),
            "forgotten: no longer recognised as a duplicate"
        );
        let mut p = Producers::default();
        p.record(&batch(2, 0, i32::MAX, 1), 0);
        assert_eq!(p.check(&batch(2, 0, 0, 1)), Verdict::Append);
    }
}
