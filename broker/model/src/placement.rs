//! Where partitions go: which nodes keep each replica, and which shard of those nodes hosts it.
//! Pure functions of their arguments, so every node computes the same answer.

use crate::ids::{NodeId, ShardId, TopicId};
use crate::metadata::PartitionState;

/// Replicas for partitions `first..first + count` of a topic, from the seed design: with the
/// live brokers sorted by id as b0..b(n-1), replica j of partition i is on b((start + i + j) mod
/// n); `start` differs between topics so that their leaders (the first replicas) spread.
/// The caller checks `replication_factor <= brokers.len()`.
pub fn replicas(
    brokers: &[NodeId],
    start: usize,
    first: i32,
    count: i32,
    replication_factor: usize,
) -> Vec<PartitionState> {
    let n = brokers.len();
    assert!(
        (1..=n).contains(&replication_factor),
        "replication factor {replication_factor} with {n} brokers"
    );
    debug_assert!(brokers.windows(2).all(|w| w[0] < w[1]), "sorted, distinct");
    (first..first.saturating_add(count))
        .map(|i| {
            let base = start.wrapping_add(usize::try_from(i).unwrap_or(0));
            let nodes = (0..replication_factor)
                .map(|j| brokers[base.wrapping_add(j) % n])
                .collect();
            PartitionState::new(nodes)
        })
        .collect()
}

/// Where a topic's replica placement starts: a stable hash of its id, so topics created one after
/// another do not all have their partition 0 led by the same broker.
pub fn start_of(topic: TopicId, brokers: usize) -> usize {
    (stable_hash(topic) % brokers.max(1) as u64) as usize
}

/// The shard that hosts `partition` of `topic` on a node with `shards` shards: the topic's
/// partitions go round robin from a start that is a stable hash of its id, so one topic's
/// partitions are spread evenly and different topics start on different shards.
pub fn shard_of(topic: TopicId, partition: i32, shards: u16) -> ShardId {
    let shards = u64::from(shards.max(1));
    let index = (stable_hash(topic).wrapping_add(partition as u64)) % shards;
    ShardId(index as u16)
}

/// FNV-1a over the id's bytes: stable across builds and platforms (std's hashers are not
/// promised to be).
fn stable_hash(topic: TopicId) -> u64 {
    topic
        .0
        .as_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325, |h, &b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(ids: &[i32]) -> Vec<NodeId> {
        ids.iter().map(|&i| NodeId(i)).collect()
    }

    #[test]
    fn replica_j_of_partition_i_is_on_broker_i_plus_j() {
        let brokers = nodes(&[1, 2, 3]);
        let placed = replicas(&brokers, 0, 0, 4, 3);
        let got: Vec<Vec<i32>> = placed
            .iter()
            .map(|p| p.replicas.iter().map(|n| n.0).collect())
            .collect();
        assert_eq!(got, [[1, 2, 3], [2, 3, 1], [3, 1, 2], [1, 2, 3]]);
        for p in &placed {
            assert_eq!(p.leader, p.replicas.first().copied());
            assert_eq!(p.isr, p.replicas);
        }
        // Added partitions continue the rotation; `start` shifts it.
        let more = replicas(&brokers, 1, 4, 1, 2);
        assert_eq!(more[0].replicas, nodes(&[3, 1]));
    }

    #[test]
    fn a_topics_partitions_spread_evenly_over_shards() {
        let topic = TopicId(uuid::Uuid::from_u128(0x1234));
        for shards in 1..=8u16 {
            let mut load = vec![0; usize::from(shards)];
            for p in 0..i32::from(shards) * 3 {
                load[shard_of(topic, p, shards).index()] += 1;
            }
            assert!(load.iter().all(|&l| l == 3), "{shards} shards: {load:?}");
        }
        // Stable: the same answer every time, on every node.
        assert_eq!(shard_of(topic, 5, 4), shard_of(topic, 5, 4));
    }
}
