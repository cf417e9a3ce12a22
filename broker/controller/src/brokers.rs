//! What the active controller decides about brokers, free of IO: whose session is alive, and
//! the metadata commands that take a broker out of service or bring it back.
//!
//! Time is a number the host passes in (milliseconds on a monotonic clock); nothing here reads a
//! clock. Sessions live only in the active controller's memory: a new controller gives every
//! registered broker a whole session from the moment it took over, so a broker that was talking
//! to the old one is not fenced for the change of controller.

use std::collections::BTreeMap;

use model::{ClusterMetadata, Command, LeaderEpoch, NodeId, PartitionEpoch, PartitionState};

/// One broker's session with the active controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Session {
    /// Which run of the broker's process (random, drawn at its start): a second process with
    /// the same node id has another, and is refused while this session lives.
    incarnation: u64,
    last_heard_ms: u64,
    /// It asked for a controlled shutdown: it is fenced and stays so until it registers again.
    shutting_down: bool,
}

/// What a heartbeat means to the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    /// A live broker's session goes on.
    Alive,
    /// The broker is new, restarted or was fenced: register it and bring it back
    /// ([`rejoin_commands`]).
    Rejoin,
    /// Another process already runs as this node id (its session is alive).
    Duplicate { running: u64 },
    /// The broker is shutting down: it stays fenced.
    ShuttingDown,
}

/// The brokers' sessions, kept by the active controller.
#[derive(Debug, Clone)]
pub struct Sessions {
    timeout_ms: u64,
    sessions: BTreeMap<NodeId, Session>,
}

impl Sessions {
    pub fn new(timeout_ms: u64) -> Sessions {
        Sessions {
            timeout_ms,
            sessions: BTreeMap::new(),
        }
    }

    /// This node became the active controller at `now_ms`: every registered, unfenced broker
    /// starts a whole session now (its incarnation is learnt from its next heartbeat).
    pub fn take_over(&mut self, metadata: &ClusterMetadata, now_ms: u64) {
        self.sessions.clear();
        for broker in metadata.live_brokers() {
            self.sessions.insert(
                broker.id,
                Session {
                    incarnation: 0,
                    last_heard_ms: now_ms,
                    shutting_down: false,
                },
            );
        }
    }

    /// A heartbeat from `node`'s process `incarnation`, which registers (or, being registered
    /// and unfenced, simply lives on).
    pub fn heartbeat(
        &mut self,
        metadata: &ClusterMetadata,
        node: NodeId,
        incarnation: u64,
        now_ms: u64,
    ) -> Heard {
        let fenced = metadata.brokers.get(&node).is_none_or(|b| b.fenced);
        if let Some(s) = self.sessions.get_mut(&node) {
            let same = s.incarnation == incarnation;
            if same && s.shutting_down {
                return Heard::ShuttingDown;
            }
            let alive = now_ms.saturating_sub(s.last_heard_ms) < self.timeout_ms;
            if !same && s.incarnation != 0 && alive && !s.shutting_down {
                return Heard::Duplicate {
                    running: s.incarnation,
                };
            }
            if (same || s.incarnation == 0) && !fenced && !s.shutting_down {
                s.incarnation = incarnation;
                s.last_heard_ms = now_ms;
                return Heard::Alive;
            }
        }
        self.sessions.insert(
            node,
            Session {
                incarnation,
                last_heard_ms: now_ms,
                shutting_down: false,
            },
        );
        Heard::Rejoin
    }

    /// `node` asked to shut down: it is to be fenced ([`fence_commands`]) and not brought back
    /// by its last heartbeats.
    pub fn shutting_down(&mut self, node: NodeId, incarnation: u64, now_ms: u64) {
        self.sessions.insert(
            node,
            Session {
                incarnation,
                last_heard_ms: now_ms,
                shutting_down: true,
            },
        );
    }

    /// The unfenced brokers whose session ran out by `now_ms` (or that are shutting down): each
    /// is to be fenced, and is reported again at each call until it is. A registered broker
    /// without a session here (registered through an earlier controller after this one took
    /// over) starts a whole one now.
    pub fn expired(&mut self, metadata: &ClusterMetadata, now_ms: u64) -> Vec<NodeId> {
        let timeout_ms = self.timeout_ms;
        let mut expired = Vec::new();
        for broker in metadata.live_brokers() {
            let session = self.sessions.entry(broker.id).or_insert(Session {
                incarnation: 0,
                last_heard_ms: now_ms,
                shutting_down: false,
            });
            if session.shutting_down || now_ms.saturating_sub(session.last_heard_ms) >= timeout_ms {
                expired.push(broker.id);
            }
        }
        expired
    }
}

/// The commands that take `node` out of service, in order: every partition it leads moves to
/// another in-sync replica that is not fenced (the earliest in the replica list: the preferred
/// leader first), it leaves every ISR it is in, and then it is fenced. A partition with no
/// other in-sync replica keeps `node` in its ISR with no leader, so it can come back.
pub fn fence_commands(metadata: &ClusterMetadata, node: NodeId) -> Vec<Command> {
    let mut commands = partition_changes(metadata, |state| {
        if !state.isr.contains(&node) {
            return None;
        }
        let mut next = state.clone();
        let others: Vec<NodeId> = state.isr.iter().copied().filter(|&n| n != node).collect();
        if !others.is_empty() {
            next.isr = others;
        }
        if state.leader == Some(node) {
            next.leader = state
                .replicas
                .iter()
                .copied()
                .find(|r| *r != node && next.isr.contains(r) && is_live(metadata, *r));
        }
        (next != *state).then_some(next)
    });
    if metadata.brokers.get(&node).is_some_and(|b| !b.fenced) {
        commands.push(Command::FenceBroker(node));
    }
    commands
}

/// The commands that bring a registered `node` back into partitions: until replication
/// (issue 11) tracks what a replica holds, a live replica counts as in sync, so `node` rejoins
/// the ISR of every partition it is a replica of, and leads those that have no leader.
pub fn rejoin_commands(metadata: &ClusterMetadata, node: NodeId) -> Vec<Command> {
    partition_changes(metadata, |state| {
        if !state.is_replica(node) {
            return None;
        }
        let mut next = state.clone();
        if !next.isr.contains(&node) {
            next.isr.push(node);
        }
        if next.leader.is_none() {
            next.leader = Some(node);
        }
        (next != *state).then_some(next)
    })
}

fn is_live(metadata: &ClusterMetadata, node: NodeId) -> bool {
    metadata.brokers.get(&node).is_some_and(|b| !b.fenced)
}

/// A `ChangePartition` for every partition `change` gives a new state, with its epochs bumped:
/// the partition epoch always, the leader epoch when the leader changes.
fn partition_changes(
    metadata: &ClusterMetadata,
    change: impl Fn(&PartitionState) -> Option<PartitionState>,
) -> Vec<Command> {
    let mut commands = Vec::new();
    for topic in metadata.topics.values() {
        for (index, state) in (0..).zip(&topic.partitions) {
            let Some(mut next) = change(state) else {
                continue;
            };
            next.partition_epoch = PartitionEpoch(state.partition_epoch.0.saturating_add(1));
            if next.leader != state.leader {
                next.leader_epoch = LeaderEpoch(state.leader_epoch.0.saturating_add(1));
            }
            commands.push(Command::ChangePartition {
                name: topic.name.clone(),
                id: topic.id,
                partition: index,
                state: next,
            });
        }
    }
    commands
}

#[cfg(test)]
mod tests {
    use super::*;
    use model::{BrokerRegistration, Topic, TopicId};
    use std::sync::Arc;

    fn cluster(nodes: i32, replicas: &[&[i32]]) -> ClusterMetadata {
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

    fn apply_all(m: &mut ClusterMetadata, commands: &[Command]) {
        for c in commands {
            model::apply(m, c).expect("the commands apply");
        }
    }

    #[test]
    fn fencing_moves_leadership_to_a_live_in_sync_replica_then_fences() {
        let mut m = cluster(3, &[&[1, 2, 3], &[2, 3, 1], &[1]]);
        let commands = fence_commands(&m, NodeId(1));
        assert_eq!(commands.last(), Some(&Command::FenceBroker(NodeId(1))));
        apply_all(&mut m, &commands);
        let t = &m.topics["t"];
        assert_eq!(
            t.partitions[0].leader,
            Some(NodeId(2)),
            "the next replica leads"
        );
        assert_eq!(t.partitions[0].isr, vec![NodeId(2), NodeId(3)]);
        assert_eq!(t.partitions[0].leader_epoch, LeaderEpoch(1));
        assert_eq!(t.partitions[1].leader, Some(NodeId(2)), "leader unchanged");
        assert_eq!(t.partitions[1].leader_epoch, LeaderEpoch(0));
        assert_eq!(t.partitions[1].partition_epoch, PartitionEpoch(1));
        assert_eq!(t.partitions[2].leader, None, "no other replica: offline");
        assert_eq!(t.partitions[2].isr, vec![NodeId(1)], "kept to come back");
        assert!(m.brokers[&NodeId(1)].fenced);
        assert!(
            fence_commands(&m, NodeId(1)).is_empty(),
            "fencing twice does nothing"
        );

        // A second broker lost: a fenced replica is never elected.
        let c = fence_commands(&m, NodeId(2));
        apply_all(&mut m, &c);
        assert_eq!(m.topics["t"].partitions[0].leader, Some(NodeId(3)));

        // Back again: the replicas rejoin, and lead what nobody led.
        let mut back = m.brokers[&NodeId(1)].clone();
        back.fenced = false;
        apply_all(&mut m, &[Command::RegisterBroker(back)]);
        let c = rejoin_commands(&m, NodeId(1));
        apply_all(&mut m, &c);
        let t = &m.topics["t"];
        assert_eq!(t.partitions[2].leader, Some(NodeId(1)));
        assert_eq!(t.partitions[2].leader_epoch, LeaderEpoch(2));
        assert!(t.partitions[0].isr.contains(&NodeId(1)));
        assert_eq!(
            t.partitions[0].leader,
            Some(NodeId(3)),
            "no move back by itself"
        );
        assert!(rejoin_commands(&m, NodeId(1)).is_empty());
    }

    #[test]
    fn sessions_expire_refuse_duplicates_and_survive_a_change_of_controller() {
        let mut m = cluster(2, &[&[1, 2]]);
        let mut s = Sessions::new(1000);
        s.take_over(&m, 0);
        let mut late = Sessions::new(1000);
        assert!(
            late.expired(&m, 5000).is_empty(),
            "a broker it never saw gets a session"
        );
        assert_eq!(late.expired(&m, 6000).len(), 2);
        assert_eq!(s.heartbeat(&m, NodeId(1), 11, 100), Heard::Alive);
        assert!(s.expired(&m, 999).is_empty());
        assert_eq!(
            s.expired(&m, 1000),
            vec![NodeId(2)],
            "node 2 never heard from"
        );
        assert_eq!(s.expired(&m, 1001), vec![NodeId(2)], "until it is fenced");
        let c = fence_commands(&m, NodeId(2));
        apply_all(&mut m, &c);
        assert!(s.expired(&m, 1002).is_empty());
        assert_eq!(
            s.heartbeat(&m, NodeId(1), 12, 500),
            Heard::Duplicate { running: 11 },
            "a second process as node 1"
        );
        assert_eq!(s.expired(&m, 1100), vec![NodeId(1)]);
        let c = fence_commands(&m, NodeId(1));
        apply_all(&mut m, &c);
        assert_eq!(s.heartbeat(&m, NodeId(1), 12, 1200), Heard::Rejoin);

        // Controlled shutdown: fenced at once, and its later heartbeats do not unfence it.
        let mut m = cluster(2, &[&[1, 2]]);
        s.take_over(&m, 2000);
        assert_eq!(s.heartbeat(&m, NodeId(2), 5, 2000), Heard::Alive);
        s.shutting_down(NodeId(2), 5, 2100);
        assert_eq!(s.expired(&m, 2100), vec![NodeId(2)]);
        let c = fence_commands(&m, NodeId(2));
        apply_all(&mut m, &c);
        assert_eq!(s.heartbeat(&m, NodeId(2), 5, 2200), Heard::ShuttingDown);
        assert_eq!(
            s.heartbeat(&m, NodeId(2), 6, 2300),
            Heard::Rejoin,
            "restarted: it registers again"
        );
    }
}
