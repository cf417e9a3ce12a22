//! Where a produced record goes: keyed records by the murmur2 hash of the key, as the Java
//! client's default partitioner and librdkafka's `murmur2_random` place them (so a key lands on
//! the partition other clients put it on), unkeyed records on one partition per batch, moving
//! on after each send (the "sticky" partitioner of KIP-480).

use std::time::{SystemTime, UNIX_EPOCH};

use net::client::partitioner::partition_for_key;

/// Picks partitions for one topic's records.
#[derive(Debug)]
pub struct Partitioner {
    partitions: i32,
    /// `--partition`: every record goes there.
    fixed: Option<i32>,
    /// Where unkeyed records go until the next send.
    sticky: i32,
}

impl Partitioner {
    pub fn new(partitions: i32, fixed: Option<i32>) -> Self {
        let partitions = partitions.max(1);
        // Start somewhere different each run, as Kafka's clients do, so short runs of
        // unkeyed records from many producers spread out.
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let sticky = i32::try_from(nanos % partitions.unsigned_abs()).unwrap_or(0);
        Self {
            partitions,
            fixed,
            sticky,
        }
    }

    pub fn partition(&self, key: Option<&[u8]>) -> i32 {
        match (self.fixed, key) {
            (Some(partition), _) => partition,
            (None, Some(key)) => partition_for_key(key, self.partitions),
            (None, None) => self.sticky,
        }
    }

    /// After a send: unkeyed records fill the next partition's batch.
    pub fn next_sticky(&mut self) {
        self.sticky = (self.sticky + 1) % self.partitions;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unkeyed_records_stick_to_a_partition_until_a_send() {
        let mut partitioner = Partitioner::new(3, None);
        let first = partitioner.partition(None);
        assert_eq!(partitioner.partition(None), first);
        partitioner.next_sticky();
        assert_eq!(partitioner.partition(None), (first + 1) % 3);
        let key = Some(&b"foobar"[..]);
        assert_eq!(partitioner.partition(key), partition_for_key(b"foobar", 3));
    }

    #[test]
    fn a_fixed_partition_takes_every_record() {
        let partitioner = Partitioner::new(4, Some(2));
        assert_eq!(partitioner.partition(None), 2);
        assert_eq!(partitioner.partition(Some(b"foobar")), 2);
    }
}
