//! A group's committed offsets, and which of them have expired.

use std::collections::BTreeMap;

use super::call::CommittedOffset;

/// A committed offset as the coordinator keeps it (and writes it to the offsets log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct StoredOffset {
    pub offset: i64,
    /// -1 when unknown.
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Set by OffsetCommit v2-v4 with an explicit retention time.
    pub expire_timestamp_ms: Option<i64>,
}

impl StoredOffset {
    pub fn committed(&self) -> CommittedOffset {
        CommittedOffset {
            offset: self.offset,
            leader_epoch: self.leader_epoch,
            metadata: self.metadata.clone(),
        }
    }
}

/// When a group's offsets start to age, by Kafka's rules (see `membership::Group::expiry`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ExpiryBase {
    /// Each offset from its own commit.
    Commit,
    /// Every offset from the same moment (when the group became empty), in ms since the epoch.
    Since(i64),
}

/// One group's committed offsets, by topic and partition.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Offsets {
    topics: BTreeMap<String, BTreeMap<i32, StoredOffset>>,
}

impl Offsets {
    pub fn get(&self, topic: &str, partition: i32) -> Option<&StoredOffset> {
        self.topics.get(topic)?.get(&partition)
    }

    pub fn put(&mut self, topic: &str, partition: i32, offset: StoredOffset) {
        match self.topics.get_mut(topic) {
            Some(partitions) => {
                partitions.insert(partition, offset);
            }
            None => {
                self.topics
                    .insert(topic.to_owned(), BTreeMap::from([(partition, offset)]));
            }
        }
    }

    /// Whether there was an offset to remove.
    pub fn remove(&mut self, topic: &str, partition: i32) -> bool {
        let Some(partitions) = self.topics.get_mut(topic) else {
            return false;
        };
        let removed = partitions.remove(&partition).is_some();
        if partitions.is_empty() {
            self.topics.remove(topic);
        }
        removed
    }

    pub fn is_empty(&self) -> bool {
        self.topics.is_empty()
    }

    pub fn len(&self) -> usize {
        self.topics.values().map(BTreeMap::len).sum()
    }

    /// Each topic with its partitions' offsets, by name.
    pub fn topics(&self) -> impl Iterator<Item = (&str, &BTreeMap<i32, StoredOffset>)> {
        self.topics
            .iter()
            .map(|(topic, partitions)| (topic.as_str(), partitions))
    }

    /// Every offset, by topic and partition.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i32, &StoredOffset)> {
        self.topics.iter().flat_map(|(topic, partitions)| {
            partitions
                .iter()
                .map(move |(&partition, offset)| (topic.as_str(), partition, offset))
        })
    }

    /// The offsets that have expired at `now_ms`: those past their explicit expiry time, or
    /// `retention_ms` after `base`. Offsets of topics `keep` holds on to never expire.
    pub fn expired(
        &self,
        now_ms: i64,
        retention_ms: u64,
        base: ExpiryBase,
        keep: impl Fn(&str) -> bool,
    ) -> Vec<(String, i32)> {
        let retention_ms = i64::try_from(retention_ms).unwrap_or(i64::MAX);
        self.iter()
            .filter(|&(topic, _, offset)| {
                !keep(topic)
                    && match offset.expire_timestamp_ms {
                        Some(at) => now_ms >= at,
                        None => {
                            let since = match base {
                                ExpiryBase::Commit => offset.commit_timestamp_ms,
                                ExpiryBase::Since(ms) => ms,
                            };
                            now_ms.saturating_sub(since) >= retention_ms
                        }
                    }
            })
            .map(|(topic, partition, _)| (topic.to_owned(), partition))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(offset: i64, commit_timestamp_ms: i64, expire: Option<i64>) -> StoredOffset {
        StoredOffset {
            offset,
            leader_epoch: -1,
            metadata: String::new(),
            commit_timestamp_ms,
            expire_timestamp_ms: expire,
        }
    }

    #[test]
    fn puts_replace_and_removes_drop_empty_topics() {
        let mut offsets = Offsets::default();
        offsets.put("t", 0, stored(1, 0, None));
        offsets.put("t", 0, stored(2, 0, None));
        offsets.put("t", 1, stored(3, 0, None));
        assert_eq!(offsets.get("t", 0).map(|o| o.offset), Some(2));
        assert_eq!(offsets.len(), 2);
        assert!(offsets.remove("t", 0));
        assert!(!offsets.remove("t", 0));
        assert!(offsets.remove("t", 1));
        assert!(offsets.is_empty());
    }

    #[test]
    fn offsets_expire_by_commit_time_by_a_common_base_or_explicitly() {
        let mut offsets = Offsets::default();
        offsets.put("old", 0, stored(1, 100, None));
        offsets.put("new", 0, stored(1, 900, None));
        offsets.put("explicit", 0, stored(1, 900, Some(950)));
        let none = |_: &str| false;
        let mut by_commit = offsets.expired(1_000, 500, ExpiryBase::Commit, none);
        by_commit.sort();
        assert_eq!(
            by_commit,
            vec![("explicit".to_owned(), 0), ("old".to_owned(), 0)]
        );
        let mut by_base = offsets.expired(1_000, 500, ExpiryBase::Since(400), none);
        by_base.sort();
        assert_eq!(
            by_base,
            vec![
                ("explicit".to_owned(), 0),
                ("new".to_owned(), 0),
                ("old".to_owned(), 0)
            ]
        );
        assert_eq!(
            offsets.expired(1_000, 500, ExpiryBase::Since(400), |t| t != "old"),
            vec![("old".to_owned(), 0)]
        );
    }
}
