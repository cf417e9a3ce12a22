//! The consumer group leader's partition assignors, as Kafka's Java client and librdkafka define
//! them, so a group can mix our members with theirs and get the assignment either would compute.

use std::collections::BTreeMap;

/// Partitions by topic: what one member is assigned.
pub type TopicPartitions = BTreeMap<String, Vec<i32>>;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Assignor {
    /// Per topic, consecutive ranges of partitions; the first members take one extra.
    Range,
    /// Every partition of every topic dealt in turn to the members subscribed to its topic.
    RoundRobin,
}

impl Assignor {
    /// The protocol name members announce in JoinGroup.
    pub fn name(self) -> &'static str {
        match self {
            Self::Range => "range",
            Self::RoundRobin => "roundrobin",
        }
    }

    pub fn from_name(name: &str) -> Option<Self> {
        [Self::Range, Self::RoundRobin]
            .into_iter()
            .find(|a| a.name() == name)
    }

    /// Assigns the partitions of every subscribed topic. `subscriptions` maps member ids to the
    /// topics they subscribe to; `partition_counts` holds the topics that exist. Every member
    /// is in the result, with an empty assignment if it gets nothing.
    pub fn assign(
        self,
        subscriptions: &BTreeMap<String, Vec<String>>,
        partition_counts: &BTreeMap<String, i32>,
    ) -> BTreeMap<String, TopicPartitions> {
        let mut assignment: BTreeMap<String, TopicPartitions> = subscriptions
            .keys()
            .map(|member| (member.clone(), TopicPartitions::new()))
            .collect();
        // Members by topic, in member id order (the map's order), as both assignors want them.
        let mut members_of: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (member, topics) in subscriptions {
            for topic in topics {
                if partition_counts.contains_key(topic) {
                    let members = members_of.entry(topic.as_str()).or_default();
                    if !members.contains(&member.as_str()) {
                        members.push(member);
                    }
                }
            }
        }
        let mut give = |member: &str, topic: &str, partition: i32| {
            if let Some(topics) = assignment.get_mut(member) {
                topics.entry(topic.to_owned()).or_default().push(partition);
            }
        };
        match self {
            Self::Range => {
                for (topic, members) in &members_of {
                    let count = partition_counts.get(*topic).copied().unwrap_or(0).max(0);
                    let member_count = i32::try_from(members.len()).unwrap_or(i32::MAX);
                    let (each, extra) = (count / member_count, count % member_count);
                    let mut next = 0;
                    for (i, member) in (0..).zip(members) {
                        let take = each + i32::from(i < extra);
                        for partition in next..next + take {
                            give(member, topic, partition);
                        }
                        next += take;
                    }
                }
            }
            Self::RoundRobin => {
                let all: Vec<&str> = subscriptions.keys().map(String::as_str).collect();
                let mut turn = 0;
                for (topic, members) in &members_of {
                    let count = partition_counts.get(*topic).copied().unwrap_or(0);
                    for partition in 0..count {
                        // The next member in the circle that subscribes to this topic.
                        while !members.contains(&all[turn % all.len()]) {
                            turn += 1;
                        }
                        give(all[turn % all.len()], topic, partition);
                        turn += 1;
                    }
                }
            }
        }
        assignment
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn subscriptions(members: &[(&str, &[&str])]) -> BTreeMap<String, Vec<String>> {
        members
            .iter()
            .map(|(m, topics)| {
                (
                    (*m).to_owned(),
                    topics.iter().map(|t| (*t).to_owned()).collect(),
                )
            })
            .collect()
    }

    fn counts(topics: &[(&str, i32)]) -> BTreeMap<String, i32> {
        topics.iter().map(|(t, n)| ((*t).to_owned(), *n)).collect()
    }

    fn of(assignment: &BTreeMap<String, TopicPartitions>, member: &str, topic: &str) -> Vec<i32> {
        assignment[member].get(topic).cloned().unwrap_or_default()
    }

    #[test]
    fn range_gives_the_first_members_the_extra_partitions_of_each_topic() {
        // Java's RangeAssignor: 7 partitions over 3 members is 3, 2, 2 on every topic.
        let subs = subscriptions(&[("c", &["t", "u"]), ("a", &["t", "u"]), ("b", &["t", "u"])]);
        let assignment = Assignor::Range.assign(&subs, &counts(&[("t", 7), ("u", 2)]));
        assert_eq!(of(&assignment, "a", "t"), [0, 1, 2]);
        assert_eq!(of(&assignment, "b", "t"), [3, 4]);
        assert_eq!(of(&assignment, "c", "t"), [5, 6]);
        assert_eq!(of(&assignment, "a", "u"), [0]);
        assert_eq!(of(&assignment, "b", "u"), [1]);
        assert_eq!(of(&assignment, "c", "u"), Vec::<i32>::new());
    }

    #[test]
    fn round_robin_deals_across_topics_and_skips_members_not_subscribed() {
        // Java's RoundRobinAssignor example: t0 (3 partitions) to a, b, c; t1 only to b.
        let subs = subscriptions(&[("a", &["t0"]), ("b", &["t0", "t1"]), ("c", &["t0"])]);
        let assignment = Assignor::RoundRobin.assign(&subs, &counts(&[("t0", 3), ("t1", 3)]));
        assert_eq!(of(&assignment, "a", "t0"), [0]);
        assert_eq!(of(&assignment, "b", "t0"), [1]);
        assert_eq!(of(&assignment, "c", "t0"), [2]);
        assert_eq!(of(&assignment, "b", "t1"), [0, 1, 2]);
    }

    #[test]
    fn round_robin_continues_the_circle_from_topic_to_topic() {
        let subs = subscriptions(&[("a", &["t", "u"]), ("b", &["t", "u"])]);
        let assignment = Assignor::RoundRobin.assign(&subs, &counts(&[("t", 3), ("u", 3)]));
        // t0 a, t1 b, t2 a, u0 b, u1 a, u2 b.
        assert_eq!(of(&assignment, "a", "t"), [0, 2]);
        assert_eq!(of(&assignment, "b", "t"), [1]);
        assert_eq!(of(&assignment, "a", "u"), [1]);
        assert_eq!(of(&assignment, "b", "u"), [0, 2]);
    }

    #[test]
    fn members_without_partitions_and_unknown_topics_are_kept_out_of_the_deal() {
        let subs = subscriptions(&[("a", &["t", "gone"]), ("b", &["t"]), ("c", &["t"])]);
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            let assignment = assignor.assign(&subs, &counts(&[("t", 2)]));
            assert_eq!(assignment.len(), 3, "{assignor:?}: every member answered");
            assert!(assignment["c"].is_empty(), "{assignor:?}");
            assert!(
                assignment.values().all(|t| !t.contains_key("gone")),
                "{assignor:?}"
            );
        }
    }

    #[test]
    fn names_round_trip() {
        for assignor in [Assignor::Range, Assignor::RoundRobin] {
            assert_eq!(Assignor::from_name(assignor.name()), Some(assignor));
        }
        assert_eq!(Assignor::from_name("cooperative-sticky"), None);
    }

    proptest! {
        /// Both assignors hand out every partition of every subscribed topic exactly once, only
        /// to members subscribed to it, and no member holds more than one partition more of a
        /// topic than another subscribed member (range) or overall (round robin, one topic).
        #[test]
        fn every_partition_goes_to_exactly_one_subscribed_member(
            member_topics in prop::collection::vec(prop::collection::btree_set(0..3usize, 1..3), 1..6),
            topic_counts in prop::collection::vec(0..20i32, 3),
        ) {
            let topics = ["t0", "t1", "t2"];
            let subs: BTreeMap<String, Vec<String>> = member_topics
                .iter()
                .enumerate()
                .map(|(i, ts)| (format!("m{i}"), ts.iter().map(|t| topics[*t].to_owned()).collect()))
                .collect();
            let partition_counts: BTreeMap<String, i32> =
                topics.iter().zip(&topic_counts).map(|(t, n)| ((*t).to_owned(), *n)).collect();
            for assignor in [Assignor::Range, Assignor::RoundRobin] {
                let assignment = assignor.assign(&subs, &partition_counts);
                for (topic, count) in &partition_counts {
                    let subscribed: Vec<&String> =
                        subs.iter().filter(|(_, ts)| ts.contains(topic)).map(|(m, _)| m).collect();
                    let mut seen: Vec<i32> = Vec::new();
                    let mut sizes = Vec::new();
                    for (member, topics) in &assignment {
                        let got = topics.get(topic).cloned().unwrap_or_default();
                        if !subscribed.contains(&member) {
                            prop_assert!(got.is_empty(), "{assignor:?} gave {topic} to {member}");
                        } else {
                            sizes.push(got.len());
                        }
                        seen.extend(got);
                    }
                    seen.sort_unstable();
                    let want: Vec<i32> =
                        if subscribed.is_empty() { Vec::new() } else { (0..*count).collect() };
                    prop_assert_eq!(&seen, &want, "{:?} on {}", assignor, topic);
                    if assignor == Assignor::Range || subs.values().all(|ts| ts.len() == 1 && ts.contains(topic)) {
                        let spread = sizes.iter().max().unwrap_or(&0) - sizes.iter().min().unwrap_or(&0);
                        prop_assert!(spread <= 1, "{assignor:?} on {topic}: sizes {sizes:?}");
                    }
                }
            }
        }
    }
}
