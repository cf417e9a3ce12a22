//! What the active controller decides about brokers, free of IO: whose session is alive, and
//! the metadata commands that take a broker out of service or bring it back.
//!
//! Time is a number the host passes in (milliseconds on a monotonic clock); nothing here reads a
//! clock. Sessions live only in the active controller's memory: a new controller gives every
//! registered broker a whole session from the moment it took over, so a broker that was talking
//! to the old one is not fenced for the change of controller.

use std::collections::BTreeMap;

use model::{BrokerRegistration, ClusterMetadata, Command, NodeId};

use crate::leadership;

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

/// The commands that take `node` out of service, in order: it leaves every ISR it is in (but
/// stays the last member of one it would empty, so the partition can come back with it), every
/// partition it led moves to the first live in-sync replica (or has no leader), and then it is
/// fenced ([`leadership::without`]).
pub fn fence_commands(metadata: &ClusterMetadata, node: NodeId) -> Vec<Command> {
    let mut commands = leadership::partition_changes(metadata, |_, state| {
        leadership::without(metadata, state, node)
    });
    if leadership::is_live(metadata, node) {
        commands.push(Command::FenceBroker(node));
    }
    commands
}

/// The commands for a broker's registration ([`Heard::Rejoin`]): if the metadata still has it
/// live, this is a new process that was never fenced (it restarted after its session ran out,
/// before the controller fenced it), so it is fenced first: its leaderships move and it
/// leaves the ISRs, as Kafka does for an unclean shutdown, because a restarted broker may have
/// lost what it had not synced, and leading on in the same leader epoch would let two
/// different batches share an offset. Then it is registered and brought back
/// ([`rejoin_commands`]).
pub fn register_commands(
    metadata: &ClusterMetadata,
    registration: BrokerRegistration,
) -> Vec<Command> {
    let node = registration.id;
    let mut after = metadata.clone();
    let mut commands = Vec::new();
    if leadership::is_live(metadata, node) {
        commands = fence_commands(metadata, node);
    }
    commands.push(Command::RegisterBroker(registration));
    for c in &commands {
        if let Err(e) = model::apply(&mut after, c) {
            tracing::warn!(%node, error = %e, "a registration's command was refused");
        }
    }
    commands.extend(rejoin_commands(&after, node));
    commands
}

/// The commands that bring `node` back once it registered again (it is live in `metadata`): it
/// rejoins no ISR (its leaders add it once it caught up), and leads the partitions without a
/// leader whose ISR it is in, or whose topic allows an unclean election
/// ([`leadership::with_returning`]).
pub fn rejoin_commands(metadata: &ClusterMetadata, node: NodeId) -> Vec<Command> {
    debug_assert!(leadership::is_live(metadata, node), "registered first");
    leadership::partition_changes(metadata, |topic, state| {
        leadership::with_returning(metadata, topic, state, node)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::leadership::tests::{apply_all, cluster};
    use model::{LeaderEpoch, PartitionEpoch};

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

        // Back again: it rejoins no ISR, and leads only what it was the last in-sync replica of.
        register_again(&mut m, NodeId(1));
        let c = rejoin_commands(&m, NodeId(1));
        apply_all(&mut m, &c);
        let t = &m.topics["t"];
        assert_eq!(t.partitions[2].leader, Some(NodeId(1)));
        assert_eq!(t.partitions[2].leader_epoch, LeaderEpoch(2));
        assert_eq!(
            t.partitions[0].isr,
            vec![NodeId(3)],
            "its leader adds it back"
        );
        assert_eq!(
            t.partitions[0].leader,
            Some(NodeId(3)),
            "no move back by itself"
        );
        assert!(rejoin_commands(&m, NodeId(1)).is_empty());
    }

    fn register_again(m: &mut ClusterMetadata, node: NodeId) {
        let mut back = m.brokers[&node].clone();
        back.fenced = false;
        apply_all(m, &[Command::RegisterBroker(back)]);
    }

    #[test]
    fn a_broker_that_restarted_before_it_was_fenced_is_fenced_first() {
        let mut m = cluster(3, &[&[1, 2, 3]]);
        let registration = m.brokers[&NodeId(1)].clone();
        let c = register_commands(&m, registration);
        apply_all(&mut m, &c);
        let p = &m.topics["t"].partitions[0];
        assert_eq!(p.leader, Some(NodeId(2)), "its leadership moved");
        assert_eq!(p.leader_epoch, LeaderEpoch(1));
        assert_eq!(p.isr, vec![NodeId(2), NodeId(3)], "it catches up first");
        assert!(!m.brokers[&NodeId(1)].fenced, "and it is registered");
        // A fenced broker coming back is only registered.
        let c = fence_commands(&m, NodeId(2));
        apply_all(&mut m, &c);
        let mut back = m.brokers[&NodeId(2)].clone();
        back.fenced = false;
        let c = register_commands(&m, back.clone());
        assert_eq!(c.first(), Some(&Command::RegisterBroker(back)));
    }

    #[test]
    fn an_isr_is_never_emptied_and_its_last_member_leads_when_back() {
        let mut m = cluster(3, &[&[1, 2]]);
        for node in [1, 2] {
            let c = fence_commands(&m, NodeId(node));
            apply_all(&mut m, &c);
        }
        let p = &m.topics["t"].partitions[0];
        assert_eq!((p.leader, p.isr.clone()), (None, vec![NodeId(2)]));
        // Node 1 was not in sync when the partition lost its last leader: it may not lead.
        register_again(&mut m, NodeId(1));
        assert!(rejoin_commands(&m, NodeId(1)).is_empty());
        register_again(&mut m, NodeId(2));
        let c = rejoin_commands(&m, NodeId(2));
        apply_all(&mut m, &c);
        let p = &m.topics["t"].partitions[0];
        assert_eq!(
            (p.leader, p.isr.clone()),
            (Some(NodeId(2)), vec![NodeId(2)])
        );
    }

    #[test]
    fn unclean_election_follows_the_topic_then_the_broker_then_the_cluster_setting() {
        use crate::leadership::UNCLEAN_LEADER_ELECTION;
        use model::ConfigResource;
        let enable = |on: &str| [(UNCLEAN_LEADER_ELECTION.to_string(), on.to_string())].into();
        let leaderless = || {
            let mut m = cluster(3, &[&[1, 2]]);
            for node in [1, 2] {
                let c = fence_commands(&m, NodeId(node));
                apply_all(&mut m, &c);
            }
            register_again(&mut m, NodeId(1));
            m
        };
        let elects_1 = |m: &ClusterMetadata| {
            let mut m = m.clone();
            let c = rejoin_commands(&m, NodeId(1));
            apply_all(&mut m, &c);
            let p = m.topics["t"].partitions[0].clone();
            (p.leader == Some(NodeId(1))).then_some(p)
        };
        let set = |m: &mut ClusterMetadata, resource: &str, on: &str| {
            apply_all(
                m,
                &[Command::SetResourceConfigs {
                    resource: ConfigResource::Broker(resource.into()),
                    configs: enable(on),
                }],
            );
        };
        let m = leaderless();
        assert!(elects_1(&m).is_none(), "Kafka's default: false");

        let mut cluster_wide = leaderless();
        set(&mut cluster_wide, "", "true");
        let p = elects_1(&cluster_wide).expect("the cluster-wide default allows it");
        assert_eq!(p.isr, vec![NodeId(1)], "the new leader is the whole ISR");
        assert_eq!(p.leader_epoch, LeaderEpoch(3));

        let mut broker_says_no = cluster_wide.clone();
        set(&mut broker_says_no, "1", "false");
        assert!(
            elects_1(&broker_says_no).is_none(),
            "its own broker setting wins"
        );

        let mut topic_says_yes = broker_says_no.clone();
        let topic = &m.topics["t"];
        apply_all(
            &mut topic_says_yes,
            &[Command::SetTopicConfigs {
                name: "t".into(),
                id: topic.id,
                configs: enable("true"),
            }],
        );
        assert!(
            elects_1(&topic_says_yes).is_some(),
            "the topic's own setting wins"
        );
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
