//! Which shard owns each partition: balanced by partition count, deterministic, persisted in
//! the metadata so a partition stays where its data is expected.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::metadata::{Metadata, Topic};

/// Partitions per shard over every topic.
fn loads(topics: &BTreeMap<String, Arc<Topic>>, shards: usize) -> Vec<usize> {
    let mut loads = vec![0; shards];
    for shard in topics.values().flat_map(|t| t.partition_shards.iter()) {
        if let Some(load) = loads.get_mut(usize::from(*shard)) {
            *load += 1;
        }
    }
    loads
}

fn least_loaded(loads: &mut [usize]) -> u16 {
    let (shard, load) = loads
        .iter_mut()
        .enumerate()
        .min_by_key(|(i, load)| (**load, *i))
        .expect("at least one shard");
    *load += 1;
    shard as u16
}

/// Shards for `count` new partitions: each goes to the shard with the fewest partitions so far
/// (the lowest id on a tie).
pub fn assign(metadata: &Metadata, shards: usize, count: usize) -> Vec<u16> {
    let mut loads = loads(&metadata.topics, shards);
    (0..count).map(|_| least_loaded(&mut loads)).collect()
}

/// After a restart with fewer shards, partitions of shards that no longer exist move to the least
/// loaded ones (their data stays where it is: directories are per partition, not per shard).
/// Returns whether anything moved.
pub fn fit_to(metadata: &mut Metadata, shards: usize) -> bool {
    let mut loads = loads(&metadata.topics, shards);
    let mut moved = false;
    for topic in metadata.topics.values_mut() {
        if topic
            .partition_shards
            .iter()
            .all(|&s| usize::from(s) < shards)
        {
            continue;
        }
        let topic = Arc::make_mut(topic);
        for shard in &mut topic.partition_shards {
            if usize::from(*shard) >= shards {
                *shard = least_loaded(&mut loads);
                moved = true;
            }
        }
    }
    moved
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_topic(m: &mut Metadata, name: &str, shards: Vec<u16>) {
        m.topics.insert(
            name.to_string(),
            Arc::new(Topic {
                name: name.to_string(),
                id: uuid::Uuid::new_v4(),
                partition_shards: shards,
                configs: BTreeMap::new(),
                internal: false,
            }),
        );
    }

    #[test]
    fn new_partitions_balance_over_shards() {
        let mut m = Metadata::new();
        assert_eq!(assign(&m, 2, 6), vec![0, 1, 0, 1, 0, 1]);
        with_topic(&mut m, "a", vec![0, 0, 0]);
        assert_eq!(assign(&m, 2, 4), vec![1, 1, 1, 0]);
        assert_eq!(assign(&m, 1, 2), vec![0, 0]);
    }

    #[test]
    fn partitions_of_removed_shards_move_and_stay_balanced() {
        let mut m = Metadata::new();
        with_topic(&mut m, "a", vec![0, 1, 2, 3]);
        assert!(fit_to(&mut m, 2));
        assert_eq!(m.topics["a"].partition_shards, vec![0, 1, 0, 1]);
        assert!(!fit_to(&mut m, 2));
    }
}
