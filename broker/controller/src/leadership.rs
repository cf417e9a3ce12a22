//! Who leads a partition and who is in its ISR: the controller's rules, free of IO. Each rule
//! turns the latest metadata into the partition's next state (or says why there is none), and
//! [`partition_changes`] turns new states into `ChangePartition` commands with their epochs
//! bumped.
//!
//! - A leader comes from the ISR, and only from live (unfenced) brokers, the earliest in the
//!   replica list first: the first replica is the preferred leader ([`first_live_in_sync`]).
//! - An ISR never becomes empty: a partition whose last in-sync replica is lost keeps it, without
//!   a leader, so that it can lead again when it comes back (Kafka 4 does the same).
//! - Outside the ISR only by an unclean election: a broker coming back to a leaderless partition
//!   when `unclean.leader.election.enable` says so ([`unclean_election_enabled`]), or an
//!   ElectLeaders of the unclean type ([`elect`]). The new leader is then the whole ISR.
//! - A leader's ISR change (Kafka's AlterPartition) counts only if it was made for the state
//!   that is current: its leader epoch and the partition epoch after this one
//!   ([`isr_change`]).

use model::{
    ClusterMetadata, Command, ConfigResource, LeaderEpoch, NodeId, PartitionEpoch, PartitionState,
    Topic, TopicId,
};

/// The topic setting (and broker default, under the same name) that allows a leader from
/// outside the ISR.
pub const UNCLEAN_LEADER_ELECTION: &str = "unclean.leader.election.enable";

pub fn is_live(metadata: &ClusterMetadata, node: NodeId) -> bool {
    metadata.brokers.get(&node).is_some_and(|b| !b.fenced)
}

/// The replica that should lead `state` among its in-sync, live replicas: the earliest in the
/// replica list (the preferred leader first), leaving out `except`.
pub fn first_live_in_sync(
    metadata: &ClusterMetadata,
    state: &PartitionState,
    except: Option<NodeId>,
) -> Option<NodeId> {
    state
        .replicas
        .iter()
        .copied()
        .find(|&r| Some(r) != except && state.isr.contains(&r) && is_live(metadata, r))
}

/// Whether `topic` may elect `node`, a replica outside its ISR: the topic's own
/// `unclean.leader.election.enable`, else that broker's dynamic default, else the cluster-wide
/// one, else Kafka's default (false).
pub fn unclean_election_enabled(metadata: &ClusterMetadata, topic: &Topic, node: NodeId) -> bool {
    let broker = |name: String| {
        metadata
            .resource_configs
            .get(&ConfigResource::Broker(name))
            .and_then(|c| c.get(UNCLEAN_LEADER_ELECTION))
    };
    let value = topic
        .configs
        .get(UNCLEAN_LEADER_ELECTION)
        .or_else(|| broker(node.to_string()))
        .or_else(|| broker(String::new()));
    value.is_some_and(|v| v == "true")
}

/// `state` once `node` is fenced: out of the ISR unless it is the last member, and, if it led,
/// the leadership moved to the first live in-sync replica (none: the partition has no leader
/// until one comes back). `None` when nothing changes.
pub fn without(
    metadata: &ClusterMetadata,
    state: &PartitionState,
    node: NodeId,
) -> Option<PartitionState> {
    if !state.isr.contains(&node) {
        return None;
    }
    let mut next = state.clone();
    if state.isr.len() > 1 {
        next.isr.retain(|&n| n != node);
    }
    if state.leader == Some(node) {
        next.leader = first_live_in_sync(metadata, &next, Some(node));
    }
    (next != *state).then_some(next)
}

/// `state` once `node`, a replica, registered again (it must be live in `metadata`). It does
/// not rejoin the ISR: its leader adds it once it has caught up. It leads only a partition
/// without a leader, and only if it is in the ISR (the last in-sync replica, kept while it was
/// away) or the topic allows an unclean election (then it is the whole ISR).
pub fn with_returning(
    metadata: &ClusterMetadata,
    topic: &Topic,
    state: &PartitionState,
    node: NodeId,
) -> Option<PartitionState> {
    if !state.is_replica(node) || state.leader.is_some() {
        return None;
    }
    let mut next = state.clone();
    if !state.isr.contains(&node) {
        if !unclean_election_enabled(metadata, topic, node) {
            return None;
        }
        next.isr = vec![node];
    }
    next.leader = Some(node);
    Some(next)
}

/// The kinds of ElectLeaders (its `ElectionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Election {
    /// Type 0: the first replica leads, if it is live and in sync.
    Preferred,
    /// Type 1: a partition without a leader gets one, from the ISR if a live member is left,
    /// else the first live replica (whatever the topic says: the administrator asked for it).
    Unclean,
}

/// Why an election changes nothing (ElectLeaders' per-partition errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ElectionError {
    #[error("no such partition as {topic}-{partition}")]
    UnknownPartition { topic: String, partition: i32 },
    /// The partition already has the leader the election would give it.
    #[error("the partition already has its preferred leader, or a leader at all")]
    NotNeeded,
    #[error("the preferred leader {0} is not live and in sync")]
    PreferredLeaderNotAvailable(NodeId),
    #[error("no replica is live")]
    EligibleLeadersNotAvailable,
}

/// The command that carries out `election` for `partition` of `topic`.
pub fn elect(
    metadata: &ClusterMetadata,
    topic: &str,
    partition: i32,
    election: Election,
) -> Result<Command, ElectionError> {
    let unknown = || ElectionError::UnknownPartition {
        topic: topic.to_string(),
        partition,
    };
    let t = metadata.topics.get(topic).ok_or_else(unknown)?;
    let state = t.partition(partition).ok_or_else(unknown)?;
    let mut next = state.clone();
    match election {
        Election::Preferred => {
            let preferred = *state.replicas.first().ok_or_else(unknown)?;
            if state.leader == Some(preferred) {
                return Err(ElectionError::NotNeeded);
            }
            if !state.isr.contains(&preferred) || !is_live(metadata, preferred) {
                return Err(ElectionError::PreferredLeaderNotAvailable(preferred));
            }
            next.leader = Some(preferred);
        }
        Election::Unclean => {
            if state.leader.is_some() {
                return Err(ElectionError::NotNeeded);
            }
            if let Some(clean) = first_live_in_sync(metadata, state, None) {
                next.leader = Some(clean);
            } else {
                let first_live = state
                    .replicas
                    .iter()
                    .copied()
                    .find(|&r| is_live(metadata, r));
                let leader = first_live.ok_or(ElectionError::EligibleLeadersNotAvailable)?;
                next.leader = Some(leader);
                next.isr = vec![leader];
            }
        }
    }
    Ok(change_command(t, partition, state, next))
}

/// Why a leader's ISR change is refused (Kafka's AlterPartition errors).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IsrChangeError {
    #[error("no such partition")]
    UnknownPartition,
    /// The proposer is not the leader of the current leader epoch (FENCED_LEADER_EPOCH).
    #[error("leader epoch {proposed} is not the partition's {current}")]
    FencedLeaderEpoch { proposed: i32, current: i32 },
    /// The proposal was made for another partition epoch (INVALID_UPDATE_VERSION).
    #[error("partition epoch {proposed} does not follow the partition's {current}")]
    InvalidUpdateVersion { proposed: i32, current: i32 },
    /// The new ISR lacks the leader, names a node that is no replica, or is empty
    /// (INVALID_REQUEST).
    #[error("an ISR must hold the leader and only replicas")]
    Invalid,
    /// A replica it adds is fenced (INELIGIBLE_REPLICA).
    #[error("replica {0} is fenced: it cannot join the ISR")]
    IneligibleReplica(NodeId),
}

/// The command for a leader's proposal of a new `isr` for `partition` of the topic with id
/// `topic`, made at `leader_epoch` for the state after `partition_epoch - 1` (so a proposal
/// made before any other change to the partition): the partition's state with the ISR
/// replaced, at `partition_epoch`.
pub fn isr_change(
    metadata: &ClusterMetadata,
    topic: TopicId,
    partition: i32,
    isr: &[NodeId],
    leader_epoch: LeaderEpoch,
    partition_epoch: PartitionEpoch,
) -> Result<Command, IsrChangeError> {
    let t = metadata
        .topic_by_id(topic)
        .ok_or(IsrChangeError::UnknownPartition)?;
    let state = t
        .partition(partition)
        .ok_or(IsrChangeError::UnknownPartition)?;
    if leader_epoch != state.leader_epoch || state.leader.is_none() {
        return Err(IsrChangeError::FencedLeaderEpoch {
            proposed: leader_epoch.0,
            current: state.leader_epoch.0,
        });
    }
    if partition_epoch.0 != state.partition_epoch.0.saturating_add(1) {
        return Err(IsrChangeError::InvalidUpdateVersion {
            proposed: partition_epoch.0,
            current: state.partition_epoch.0,
        });
    }
    let mut sorted = isr.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let leader_in = state.leader.is_some_and(|l| isr.contains(&l));
    if sorted.len() != isr.len() || !leader_in || !isr.iter().all(|&n| state.is_replica(n)) {
        return Err(IsrChangeError::Invalid);
    }
    if let Some(&fenced) = isr
        .iter()
        .find(|&&n| !state.isr.contains(&n) && !is_live(metadata, n))
    {
        return Err(IsrChangeError::IneligibleReplica(fenced));
    }
    let mut next = state.clone();
    next.isr = isr.to_vec();
    next.partition_epoch = partition_epoch;
    Ok(Command::ChangePartition {
        name: t.name.clone(),
        id: t.id,
        partition,
        state: next,
    })
}

/// A `ChangePartition` for every partition that `change` (given its topic and its state) gives
/// a new state, with its epochs bumped: the partition epoch always, the leader epoch when the
/// leader changes. In topic and partition order.
pub fn partition_changes(
    metadata: &ClusterMetadata,
    change: impl Fn(&Topic, &PartitionState) -> Option<PartitionState>,
) -> Vec<Command> {
    let mut commands = Vec::new();
    for topic in metadata.topics.values() {
        for (index, state) in (0..).zip(&topic.partitions) {
            if let Some(next) = change(topic, state) {
                commands.push(change_command(topic, index, state, next));
            }
        }
    }
    commands
}

/// The `ChangePartition` from `state` to `next` (partition `index` of `topic`), with its epochs
/// bumped.
fn change_command(
    topic: &Topic,
    index: i32,
    state: &PartitionState,
    mut next: PartitionState,
) -> Command {
    assert!(!next.isr.is_empty(), "an ISR never becomes empty");
    assert!(
        next.leader.is_none_or(|l| next.isr.contains(&l)),
        "a leader is in the ISR"
    );
    next.partition_epoch = PartitionEpoch(state.partition_epoch.0.saturating_add(1));
    if next.leader != state.leader {
        next.leader_epoch = LeaderEpoch(state.leader_epoch.0.saturating_add(1));
    }
    Command::ChangePartition {
        name: topic.name.clone(),
        id: topic.id,
        partition: index,
        state: next,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use model::BrokerRegistration;
    use proptest::prelude::*;
    use std::sync::Arc;

    /// `nodes` live brokers 1..=nodes and topic "t" with a partition per replica list.
    pub(crate) fn cluster(nodes: i32, replicas: &[&[i32]]) -> ClusterMetadata {
        let mut m = ClusterMetadata::new("c".into());
        for id in 1..=nodes {
            let broker = BrokerRegistration {
                id: NodeId(id),
                host: "h".into(),
                port: 9092,
                cluster_listener: None,
                shards: 1,
                rack: None,
                fenced: false,
                replication_ports: Vec::new(),
            };
            m.brokers.insert(NodeId(id), broker);
        }
        let topic = Topic {
            name: "t".into(),
            id: TopicId(uuid::Uuid::from_u128(1)),
            partitions: replicas
                .iter()
                .map(|r| PartitionState::new(r.iter().map(|&n| NodeId(n)).collect()))
                .collect(),
            configs: Default::default(),
            internal: false,
        };
        m.topics.insert("t".into(), Arc::new(topic));
        m
    }

    pub(crate) fn apply_all(m: &mut ClusterMetadata, commands: &[Command]) {
        for c in commands {
            model::apply(m, c).expect("the commands apply");
        }
    }

    fn nodes(ids: &[i32]) -> Vec<NodeId> {
        ids.iter().map(|&n| NodeId(n)).collect()
    }

    fn fence(m: &mut ClusterMetadata, node: i32) {
        let c = crate::brokers::fence_commands(m, NodeId(node));
        apply_all(m, &c);
    }

    #[test]
    fn a_preferred_election_needs_the_first_replica_live_and_in_sync() {
        let mut m = cluster(3, &[&[1, 2, 3]]);
        assert_eq!(
            elect(&m, "t", 0, Election::Preferred),
            Err(ElectionError::NotNeeded)
        );
        assert!(matches!(
            elect(&m, "t", 1, Election::Preferred),
            Err(ElectionError::UnknownPartition { .. })
        ));
        assert!(matches!(
            elect(&m, "u", 0, Election::Preferred),
            Err(ElectionError::UnknownPartition { .. })
        ));
        fence(&mut m, 1);
        assert_eq!(
            elect(&m, "t", 0, Election::Preferred),
            Err(ElectionError::PreferredLeaderNotAvailable(NodeId(1))),
            "fenced"
        );
        let mut back = m.brokers[&NodeId(1)].clone();
        back.fenced = false;
        apply_all(&mut m, &[Command::RegisterBroker(back)]);
        assert_eq!(
            elect(&m, "t", 0, Election::Preferred),
            Err(ElectionError::PreferredLeaderNotAvailable(NodeId(1))),
            "live, but not in sync"
        );
        let p = m.topics["t"].partitions[0].clone();
        let c = isr_change(
            &m,
            m.topics["t"].id,
            0,
            &nodes(&[2, 3, 1]),
            p.leader_epoch,
            PartitionEpoch(p.partition_epoch.0 + 1),
        )
        .expect("its leader adds it");
        apply_all(&mut m, &[c]);
        let c = elect(&m, "t", 0, Election::Preferred).expect("now it can lead");
        apply_all(&mut m, &[c]);
        let after = &m.topics["t"].partitions[0];
        assert_eq!(after.leader, Some(NodeId(1)));
        assert_eq!(after.isr, nodes(&[2, 3, 1]), "the ISR is kept");
        assert_eq!(after.leader_epoch.0, p.leader_epoch.0 + 1);
        assert_eq!(after.partition_epoch.0, p.partition_epoch.0 + 2);
    }

    #[test]
    fn an_unclean_election_takes_the_first_live_replica_only_when_no_leader_is_left() {
        let mut m = cluster(3, &[&[1, 2, 3]]);
        assert_eq!(
            elect(&m, "t", 0, Election::Unclean),
            Err(ElectionError::NotNeeded)
        );
        for node in [1, 2, 3] {
            fence(&mut m, node);
        }
        assert_eq!(m.topics["t"].partitions[0].isr, nodes(&[3]));
        assert_eq!(
            elect(&m, "t", 0, Election::Unclean),
            Err(ElectionError::EligibleLeadersNotAvailable)
        );
        let mut back = m.brokers[&NodeId(2)].clone();
        back.fenced = false;
        apply_all(&mut m, &[Command::RegisterBroker(back)]);
        let c = elect(&m, "t", 0, Election::Unclean).expect("2 is live");
        apply_all(&mut m, &[c]);
        let p = &m.topics["t"].partitions[0];
        assert_eq!((p.leader, p.isr.clone()), (Some(NodeId(2)), nodes(&[2])));
    }

    #[test]
    fn an_isr_change_counts_only_for_the_current_epochs_and_live_replicas() {
        let mut m = cluster(3, &[&[1, 2, 3]]);
        let id = m.topics["t"].id;
        let change = |m: &ClusterMetadata, isr: &[i32], leader: i32, partition: i32| {
            isr_change(
                m,
                id,
                0,
                &nodes(isr),
                LeaderEpoch(leader),
                PartitionEpoch(partition),
            )
        };
        assert_eq!(
            change(&m, &[1, 2], 1, 1),
            Err(IsrChangeError::FencedLeaderEpoch {
                proposed: 1,
                current: 0
            })
        );
        assert_eq!(
            change(&m, &[1, 2], 0, 2),
            Err(IsrChangeError::InvalidUpdateVersion {
                proposed: 2,
                current: 0
            })
        );
        assert_eq!(change(&m, &[2, 3], 0, 1), Err(IsrChangeError::Invalid));
        assert_eq!(change(&m, &[1, 1], 0, 1), Err(IsrChangeError::Invalid));
        assert_eq!(change(&m, &[1, 4], 0, 1), Err(IsrChangeError::Invalid));
        assert!(matches!(
            isr_change(
                &m,
                TopicId(uuid::Uuid::nil()),
                0,
                &nodes(&[1]),
                LeaderEpoch(0),
                PartitionEpoch(1)
            ),
            Err(IsrChangeError::UnknownPartition)
        ));
        let shrink = change(&m, &[1, 2], 0, 1).expect("the leader drops 3");
        apply_all(&mut m, std::slice::from_ref(&shrink));
        assert!(
            model::apply(&mut m.clone(), &shrink).is_err(),
            "the same proposal twice is stale"
        );
        assert_eq!(
            change(&m, &[1, 2, 3], 0, 1),
            Err(IsrChangeError::InvalidUpdateVersion {
                proposed: 1,
                current: 1
            }),
            "made before the shrink"
        );
        m.brokers.get_mut(&NodeId(3)).expect("registered").fenced = true;
        assert_eq!(
            change(&m, &[1, 2, 3], 0, 2),
            Err(IsrChangeError::IneligibleReplica(NodeId(3)))
        );
    }

    /// What the controller may do to a partition, drawn by the property test.
    #[derive(Debug, Clone)]
    enum Step {
        Fence(i32),
        Return(i32),
        Elect(i32, bool),
        /// The leader proposes this subset of the replicas (by bit) with epochs off by these.
        ChangeIsr(i32, u8, i32, i32),
        SetUnclean(bool),
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            (1..=4).prop_map(Step::Fence),
            (1..=4).prop_map(Step::Return),
            (0..3, any::<bool>()).prop_map(|(p, u)| Step::Elect(p, u)),
            (0..3, any::<u8>(), -1..=1, -1..=1)
                .prop_map(|(p, bits, l, e)| Step::ChangeIsr(p, bits, l, e)),
            any::<bool>().prop_map(Step::SetUnclean),
        ]
    }

    /// What must hold of every partition after every committed change.
    fn check(before: &ClusterMetadata, after: &ClusterMetadata, unclean_allowed: bool) {
        for (t, old) in after.topics["t"]
            .partitions
            .iter()
            .zip(&before.topics["t"].partitions)
        {
            assert!(!t.isr.is_empty(), "an ISR never empties: {t:?}");
            if let Some(leader) = t.leader {
                assert!(t.isr.contains(&leader), "{t:?}");
                assert!(is_live(after, leader), "a fenced leader: {t:?}");
            } else {
                assert!(
                    first_live_in_sync(after, t, None).is_none(),
                    "no leader though a live replica is in sync: {t:?}"
                );
            }
            let fenced_in_isr = t.isr.iter().any(|&n| !is_live(after, n));
            assert!(
                !fenced_in_isr || (t.isr.len() == 1 && t.leader.is_none()),
                "a fenced replica is in the ISR only as its last member: {t:?}"
            );
            assert!(t.leader_epoch >= old.leader_epoch && t.partition_epoch >= old.partition_epoch);
            if t != old {
                assert!(t.partition_epoch > old.partition_epoch);
            }
            if t.leader != old.leader {
                assert!(t.leader_epoch > old.leader_epoch, "{old:?} -> {t:?}");
            }
            for n in t.isr.iter().filter(|n| !old.isr.contains(n)) {
                // Who enters the ISR: a leader's proposal adding a caught-up follower, or the
                // sole member of an unclean election.
                assert!(is_live(after, *n));
                assert!(t.isr.len() > 1 || unclean_allowed, "{old:?} -> {t:?}");
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// Any sequence of fences, returns, elections and leaders' ISR changes (stale ones too)
        /// keeps every partition's ISR non-empty, its leader live and in sync (or none only when
        /// no live replica is in sync), and its epochs growing with every change.
        #[test]
        fn the_rules_keep_every_partition_whole(steps in proptest::collection::vec(step(), 1..40)) {
            let mut m = cluster(4, &[&[1, 2, 3], &[2, 3, 4], &[4, 1]]);
            for step in steps {
                let before = m.clone();
                let mut unclean_step = false;
                let commands = match step {
                    Step::Fence(n) => crate::brokers::fence_commands(&m, NodeId(n)),
                    Step::Return(n) => {
                        if is_live(&m, NodeId(n)) {
                            continue;
                        }
                        let mut back = m.brokers[&NodeId(n)].clone();
                        back.fenced = false;
                        let mut after = m.clone();
                        apply_all(&mut after, &[Command::RegisterBroker(back.clone())]);
                        let mut c = vec![Command::RegisterBroker(back)];
                        c.extend(crate::brokers::rejoin_commands(&after, NodeId(n)));
                        c
                    }
                    Step::Elect(p, unclean) => {
                        unclean_step = unclean;
                        let election = if unclean { Election::Unclean } else { Election::Preferred };
                        elect(&m, "t", p, election).into_iter().collect()
                    }
                    Step::ChangeIsr(p, bits, l, e) => {
                        let t = &m.topics["t"];
                        let state = &t.partitions[p as usize];
                        let isr: Vec<NodeId> = state
                            .replicas
                            .iter()
                            .enumerate()
                            .filter(|(i, n)| bits & (1 << i) != 0 || state.leader == Some(**n))
                            .map(|(_, n)| *n)
                            .collect();
                        let leader_epoch = LeaderEpoch(state.leader_epoch.0 + l);
                        let partition_epoch = PartitionEpoch(state.partition_epoch.0 + 1 + e);
                        let made = isr_change(&m, t.id, p, &isr, leader_epoch, partition_epoch);
                        if l != 0 || e != 0 {
                            prop_assert!(made.is_err(), "a stale proposal was taken");
                        }
                        made.into_iter().collect()
                    }
                    Step::SetUnclean(on) => vec![Command::SetResourceConfigs {
                        resource: ConfigResource::Broker(String::new()),
                        configs: [(UNCLEAN_LEADER_ELECTION.to_string(), on.to_string())].into(),
                    }],
                };
                let allowed = unclean_step
                    || unclean_election_enabled(&before, &before.topics["t"], NodeId(0));
                apply_all(&mut m, &commands);
                check(&before, &m, allowed);
            }
        }
    }
}
