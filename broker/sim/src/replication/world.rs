//! One seeded replication run: the nodes and their replicas, the controller, the links, the
//! producers, the fault schedule and the checks after every step.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;
use std::sync::Arc;

use controller::brokers::{self, Heard, Sessions};
use controller::leadership;
use controller::replica::{AckLevel, Action, LogView, Replica, ReplicaConfig, Say, Take, Verdict};
use model::{
    BrokerRegistration, ClusterMetadata, LeaderEpoch, NodeId, PartitionEpoch, PartitionState,
    Topic, TopicId,
};

use super::check::Checker;
use super::log::{Batch, FakeLog};
use super::{ReplicationConfig, ReplicationFailure, ReplicationSummary};
use crate::agenda::{Agenda, Trace};
use crate::check::fnv;
use crate::network::Network;
use crate::rng::Rng;

const TOPIC: &str = "t";
/// Batches a leader puts in one append.
const APPEND_BATCHES_MAX: usize = 8;
/// A node sends an ISR change again when the controller has not answered it for this long.
const PROPOSAL_RETRY_MS: u64 = 200;
const CONTROLLER_TICK_MS: u64 = 20;
/// More actions than this from one event is a loop between the replica and this host.
const ACTIONS_PER_EVENT_MAX: usize = 10_000;
/// Steps at one virtual instant beyond this are a loop of events that take no time.
const STEPS_PER_INSTANT_MAX: u64 = 100_000;

/// What travels between parties (nodes 0..n, the controller n).
#[derive(Debug, Clone)]
enum Msg {
    Say {
        partition: usize,
        say: Say,
    },
    Append {
        partition: usize,
        leader_epoch: i32,
        high_watermark: i64,
        base_offset: i64,
        batches: Vec<Batch>,
    },
    Heartbeat {
        incarnation: u64,
        version: u64,
    },
    /// The controller took the heartbeat: the node is registered in this run.
    HeartbeatReply {
        metadata: Option<Arc<ClusterMetadata>>,
    },
    Metadata(Arc<ClusterMetadata>),
    AlterPartition {
        partition: usize,
        isr: Vec<NodeId>,
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
    },
    /// The ISR change did not commit; the metadata is the controller's, which the leader
    /// applies first (as Kafka's AlterPartition answer carries the partition's state).
    AlterPartitionFailed {
        partition: usize,
        metadata: Arc<ClusterMetadata>,
    },
}

/// A controller decision, made (from the latest metadata) and applied when it commits.
#[derive(Debug)]
enum Decision {
    Register {
        node: usize,
        incarnation: u64,
    },
    Fence(NodeId),
    Alter {
        from: usize,
        partition: usize,
        isr: Vec<NodeId>,
        leader_epoch: LeaderEpoch,
        partition_epoch: PartitionEpoch,
    },
}

#[derive(Debug)]
enum Ev {
    Tick(usize),
    ControllerTick,
    Deliver {
        from: usize,
        to: usize,
        conn: u64,
        msg: Msg,
    },
    Disconnected {
        node: usize,
        peer: usize,
        incarnation: u64,
    },
    Written {
        node: usize,
        partition: usize,
        generation: u64,
        upto: i64,
    },
    Synced {
        node: usize,
        partition: usize,
        generation: u64,
        upto: i64,
    },
    Commit(Decision),
    Produce,
    Fault,
    Restart {
        node: usize,
        incarnation: u64,
    },
    Quiet,
    Deadline,
}

/// An acks=all produce waiting on its leader.
#[derive(Debug, Clone, Copy)]
struct Waiting {
    partition: usize,
    epoch: LeaderEpoch,
    offset: i64,
    batch: Batch,
    after_quiet: bool,
}

#[derive(Debug)]
struct Node {
    id: NodeId,
    running: bool,
    paused_until_ms: u64,
    /// Bumped by every crash: events meant for an earlier run are void.
    incarnation: u64,
    /// Its disk: survives crashes (cut to what the crash keeps).
    logs: Vec<FakeLog>,
    replicas: Vec<Option<Replica>>,
    metadata: Option<Arc<ClusterMetadata>>,
    /// The controller took a heartbeat of this run: until then the node serves nothing and
    /// applies no metadata (the broker opens its listener only once registered), so a
    /// restarted node never acts as the leader it was before (its old epochs end first).
    registered: bool,
    waiting: Vec<Waiting>,
    /// Each partition's ISR change in flight, and when it was last sent. Its outcome is
    /// reported to the replica only when known: committed (the metadata) or refused (the
    /// controller's answer). A lost or unanswered one is sent again, never reported failed:
    /// it may have committed, and the leader must go on counting the members it adds.
    proposals: Vec<Option<(Msg, u64)>>,
    next_heartbeat_ms: u64,
}

#[derive(Debug, Clone, Copy, Default)]
struct Link {
    conn: u64,
    last_arrival_ms: u64,
    /// The sending end is yet to learn that the connection broke: a send meanwhile is lost
    /// with it (one notice per break, however much is sent).
    notice_pending: bool,
}

struct World {
    seed: u64,
    cfg: ReplicationConfig,
    rng: Rng,
    now_ms: u64,
    step: u64,
    agenda: Agenda<Ev>,
    nodes: Vec<Node>,
    metadata: Arc<ClusterMetadata>,
    sessions: Sessions,
    fencing: BTreeSet<NodeId>,
    net: Network,
    links: BTreeMap<(usize, usize), Link>,
    check: Checker,
    trace: Trace,
    produced: u64,
    quiet: bool,
    /// Partitions with a record produced after the faults stopped and acknowledged.
    acked_after_quiet: BTreeSet<usize>,
    done: bool,
    crashes: u64,
    leader_changes: u64,
}

/// Runs one replication seed. Deterministic: the same seed and config give the same run.
pub fn run(seed: u64, cfg: &ReplicationConfig) -> Result<ReplicationSummary, ReplicationFailure> {
    let mut w = World::new(seed, cfg.clone());
    match w.run() {
        Ok(()) => Ok(ReplicationSummary {
            steps: w.step,
            virtual_ms: w.now_ms,
            acknowledged: w.check.acknowledged(),
            committed: w.check.committed(),
            leader_changes: w.leader_changes,
            crashes: w.crashes,
            fingerprint: w.trace.fingerprint(),
        }),
        Err(what) => {
            w.end_line();
            Err(ReplicationFailure {
                seed,
                flaw: cfg.flaw,
                step: w.step,
                time_ms: w.now_ms,
                what,
                trace: w.trace.into_lines(),
            })
        }
    }
}

/// A node's run as its heartbeats name it: never 0, which the controller's sessions read as
/// "not known yet".
fn wire_incarnation(node: &Node) -> u64 {
    node.incarnation + 1
}

fn registration(id: NodeId) -> BrokerRegistration {
    BrokerRegistration {
        id,
        host: format!("n{id}"),
        port: 9092,
        cluster_listener: None,
        shards: 1,
        rack: None,
        fenced: false,
        replication_ports: Vec::new(),
    }
}

impl World {
    fn new(seed: u64, cfg: ReplicationConfig) -> World {
        let n = cfg.nodes;
        let mut metadata = ClusterMetadata::new("sim".into());
        let ids: Vec<NodeId> = (1..=n).map(|i| NodeId(i as i32)).collect();
        for id in &ids {
            metadata.brokers.insert(*id, registration(*id));
        }
        let partitions = (0..cfg.partitions)
            .map(|p| PartitionState::new((0..n).map(|j| ids[(p + j) % n]).collect()))
            .collect();
        let topic = Topic {
            name: TOPIC.into(),
            id: TopicId(uuid::Uuid::from_u128(u128::from(seed) + 1)),
            partitions,
            configs: Default::default(),
            internal: false,
        };
        metadata.topics.insert(TOPIC.into(), Arc::new(topic));
        metadata.version = 1;
        let mut sessions = Sessions::new(cfg.session_timeout_ms);
        sessions.take_over(&metadata, 0);
        let nodes = ids
            .iter()
            .map(|&id| Node {
                id,
                running: false,
                paused_until_ms: 0,
                incarnation: 0,
                logs: vec![FakeLog::default(); cfg.partitions],
                replicas: (0..cfg.partitions).map(|_| None).collect(),
                metadata: None,
                registered: false,
                waiting: Vec::new(),
                proposals: vec![None; cfg.partitions],
                next_heartbeat_ms: 0,
            })
            .collect();
        let trace = Trace::new(cfg.trace_lines);
        World {
            seed,
            rng: Rng::new(seed),
            net: Network::new(cfg.net_delay_ms_max),
            check: Checker::new(cfg.partitions),
            cfg,
            now_ms: 0,
            step: 0,
            agenda: Agenda::new(),
            nodes,
            metadata: Arc::new(metadata),
            sessions,
            fencing: BTreeSet::new(),
            links: BTreeMap::new(),
            trace,
            produced: 0,
            quiet: false,
            acked_after_quiet: BTreeSet::new(),
            done: false,
            crashes: 0,
            leader_changes: 0,
        }
    }

    fn controller(&self) -> usize {
        self.nodes.len()
    }

    fn at(&mut self, time_ms: u64, ev: Ev) {
        self.agenda.at(time_ms, ev);
    }

    fn note(&mut self, what: impl fmt::Display) {
        self.trace.note(what);
    }

    fn end_line(&mut self) {
        self.trace.end_line(self.step, self.now_ms);
    }

    fn run(&mut self) -> Result<(), String> {
        for i in 0..self.nodes.len() {
            self.start_node(i)?;
            let offset = self.rng.below(self.cfg.tick_ms);
            self.at(offset, Ev::Tick(i));
        }
        self.at(CONTROLLER_TICK_MS, Ev::ControllerTick);
        let first_fault = self.rng.between(50, 300);
        self.at(first_fault, Ev::Fault);
        let first_produce = self.rng.between(5, 50);
        self.at(first_produce, Ev::Produce);
        self.at(self.cfg.fault_ms, Ev::Quiet);
        self.at(self.cfg.fault_ms + self.cfg.quiet_ms, Ev::Deadline);
        let mut same_instant = 0;
        while !self.done {
            let Some((time_ms, ev)) = self.agenda.next() else {
                return Err("the agenda ran dry".into());
            };
            same_instant = if time_ms == self.now_ms {
                same_instant + 1
            } else {
                0
            };
            if same_instant > STEPS_PER_INSTANT_MAX {
                return Err(format!(
                    "{STEPS_PER_INSTANT_MAX} steps at t={time_ms}: a loop of events that take no time ({ev:?})"
                ));
            }
            self.step += 1;
            self.now_ms = time_ms;
            self.handle(ev)?;
            self.check_leaders()?;
            self.end_line();
        }
        Ok(())
    }

    fn paused(&self, i: usize) -> bool {
        self.nodes[i].paused_until_ms > self.now_ms
    }

    fn handle(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::Tick(i) => {
                self.at(self.now_ms + self.cfg.tick_ms, Ev::Tick(i));
                if self.nodes[i].running && !self.paused(i) {
                    if self.nodes[i].paused_until_ms > 0 {
                        // SIGCONTed: it learns what its disk did meanwhile.
                        self.nodes[i].paused_until_ms = 0;
                        for p in 0..self.cfg.partitions {
                            self.local_log_moved(i, p)?;
                        }
                    }
                    self.tick(i)?;
                }
            }
            Ev::ControllerTick => {
                self.at(self.now_ms + CONTROLLER_TICK_MS, Ev::ControllerTick);
                for node in self.sessions.expired(&self.metadata, self.now_ms) {
                    if self.fencing.insert(node) {
                        self.note(format!("session of n{node} expired"));
                        self.decide(Decision::Fence(node));
                    }
                }
            }
            Ev::Deliver {
                from,
                to,
                conn,
                msg,
            } => {
                if self.links.get(&(from, to)).map_or(0, |l| l.conn) != conn {
                    return Ok(()); // its connection broke meanwhile
                }
                if !self.net.can_send(from, to) {
                    self.break_link(from, to);
                    return Ok(());
                }
                if to < self.nodes.len() && self.paused(to) {
                    // SIGSTOPped: it reads the socket when it runs again.
                    let at = self.nodes[to].paused_until_ms;
                    self.at(
                        at,
                        Ev::Deliver {
                            from,
                            to,
                            conn,
                            msg,
                        },
                    );
                    return Ok(());
                }
                self.deliver(from, to, msg)?;
            }
            Ev::Disconnected {
                node,
                peer,
                incarnation,
            } => {
                if self.nodes[node].incarnation != incarnation {
                    return Ok(());
                }
                self.links.entry((node, peer)).or_default().notice_pending = false;
                if self.nodes[node].running && self.nodes[node].incarnation == incarnation {
                    if self.paused(node) {
                        self.links.entry((node, peer)).or_default().notice_pending = true;
                        let at = self.nodes[node].paused_until_ms;
                        self.at(
                            at,
                            Ev::Disconnected {
                                node,
                                peer,
                                incarnation,
                            },
                        );
                    } else {
                        self.disconnected(node, peer)?;
                    }
                }
            }
            Ev::Written {
                node,
                partition,
                generation,
                upto,
            } => {
                let log = &mut self.nodes[node].logs[partition];
                if log.generation == generation {
                    log.written_up_to(upto);
                    let latency = self.rng.between(1, self.cfg.disk_latency_ms_max);
                    self.at(
                        self.now_ms + latency,
                        Ev::Synced {
                            node,
                            partition,
                            generation,
                            upto,
                        },
                    );
                    self.local_log_moved(node, partition)?;
                }
            }
            Ev::Synced {
                node,
                partition,
                generation,
                upto,
            } => {
                let log = &mut self.nodes[node].logs[partition];
                if log.generation == generation {
                    log.synced_up_to(upto);
                    self.local_log_moved(node, partition)?;
                }
            }
            Ev::Commit(decision) => self.commit(decision)?,
            Ev::Produce => {
                let next = self.now_ms + self.rng.between(3, 30);
                self.at(next, Ev::Produce);
                self.produce()?;
            }
            Ev::Fault => {
                if !self.quiet {
                    let next = self.now_ms + self.rng.between(50, 300);
                    self.at(next, Ev::Fault);
                    self.fault()?;
                }
            }
            Ev::Restart { node, incarnation } => {
                if !self.nodes[node].running && self.nodes[node].incarnation == incarnation {
                    self.start_node(node)?;
                }
            }
            Ev::Quiet => {
                self.quiet = true;
                self.note("quiet: faults stop, network heals, every node runs");
                self.net.heal();
                self.net.loss_per_mille = 0;
                for i in 0..self.nodes.len() {
                    self.nodes[i].paused_until_ms = self.nodes[i].paused_until_ms.min(self.now_ms);
                    if !self.nodes[i].running {
                        self.start_node(i)?;
                    }
                }
            }
            Ev::Deadline => {
                let missing: Vec<usize> = (0..self.cfg.partitions)
                    .filter(|p| !self.acked_after_quiet.contains(p))
                    .collect();
                let states: Vec<String> = self.metadata.topics[TOPIC]
                    .partitions
                    .iter()
                    .map(|s| format!("{s:?}"))
                    .collect();
                return Err(format!(
                    "no progress: {} ms after the faults stopped, nothing produced since is acknowledged on partitions {missing:?}; metadata {}",
                    self.cfg.quiet_ms,
                    states.join("; ")
                ));
            }
        }
        Ok(())
    }

    // ---- Faults ----

    fn fault(&mut self) -> Result<(), String> {
        let n = self.nodes.len();
        match self.rng.below(100) {
            0..20 => {
                let i = self.rng.pick(n);
                let power_loss = self.rng.chance(500);
                self.crash(i, power_loss)?;
            }
            20..30 => {
                let i = self.rng.pick(n);
                let until = self.now_ms + self.rng.between(50, 1_000);
                if self.nodes[i].running && !self.paused(i) {
                    self.note(format!("pause n{} until {until}", i + 1));
                    self.nodes[i].paused_until_ms = until;
                }
            }
            30..45 => {
                // The controller is a party too.
                let side: Vec<bool> = (0..=n).map(|_| self.rng.chance(500)).collect();
                self.note(format!("partition {side:?}"));
                self.net.partition(&side);
            }
            45..55 => {
                let from = self.rng.pick(n + 1);
                let to = (from + 1 + self.rng.pick(n)) % (n + 1);
                self.note(format!("cut {from}->{to}"));
                self.net.cut_one_way(from, to);
            }
            55..75 => {
                self.note(format!("heal {} links", self.net.cut_links()));
                self.net.heal();
            }
            75..88 => {
                self.net.loss_per_mille = self.rng.between(0, 100);
                self.note(format!("loss {}‰", self.net.loss_per_mille));
            }
            _ => {}
        }
        Ok(())
    }

    fn crash(&mut self, i: usize, power_loss: bool) -> Result<(), String> {
        if !self.nodes[i].running {
            return Ok(());
        }
        self.crashes += 1;
        self.note(format!(
            "crash n{}{}",
            i + 1,
            if power_loss { " (power loss)" } else { "" }
        ));
        let id = self.nodes[i].id;
        {
            let node = &mut self.nodes[i];
            node.running = false;
            node.paused_until_ms = 0;
            node.incarnation += 1;
            node.replicas.iter_mut().for_each(|r| *r = None);
            node.metadata = None;
            node.registered = false;
            node.waiting.clear();
            node.proposals.iter_mut().for_each(|p| *p = None);
        }
        for p in 0..self.cfg.partitions {
            let log = &mut self.nodes[i].logs[p];
            log.crash(power_loss);
            let end = log.end();
            self.check.cut(id, p, end);
            if self.in_isr(p, id) {
                self.check
                    .holds_acked(p, id, &self.nodes[i].logs[p], "crashed")?;
            }
        }
        for peer in 0..=self.nodes.len() {
            if peer != i {
                self.break_link(i, peer);
            }
        }
        let incarnation = self.nodes[i].incarnation;
        let back = self.now_ms + self.rng.between(20, 800);
        self.at(
            back,
            Ev::Restart {
                node: i,
                incarnation,
            },
        );
        Ok(())
    }

    fn start_node(&mut self, i: usize) -> Result<(), String> {
        for peer in 0..=self.nodes.len() {
            self.links.entry((i, peer)).or_default().notice_pending = false;
        }
        let node = &mut self.nodes[i];
        node.running = true;
        node.next_heartbeat_ms = self.now_ms;
        let id = node.id;
        self.check.restarted(id);
        // What it had written is on disk: complete its writes and syncs again.
        for p in 0..self.cfg.partitions {
            self.submit_write(i, p);
        }
        self.note(format!("start n{}", i + 1));
        Ok(())
    }

    // ---- The network ----

    fn send(&mut self, from: usize, to: usize, msg: Msg) {
        if to < self.nodes.len() && !self.nodes[to].running {
            return; // the connection is down; the crash told the sender
        }
        if !self.net.can_send(from, to) || self.rng.chance(self.net.loss_per_mille) {
            self.break_link(from, to);
            return;
        }
        let delay = self.rng.between(1, self.cfg.net_delay_ms_max);
        let link = self.links.entry((from, to)).or_default();
        // One connection is ordered: nothing overtakes what was sent before it.
        let arrival = (self.now_ms + delay).max(link.last_arrival_ms);
        link.last_arrival_ms = arrival;
        let conn = link.conn;
        self.at(
            arrival,
            Ev::Deliver {
                from,
                to,
                conn,
                msg,
            },
        );
    }

    /// The connection between `a` and `b` breaks: what is in flight either way is lost, and
    /// each end (a node) learns it a little later.
    fn break_link(&mut self, a: usize, b: usize) {
        for (x, y) in [(a, b), (b, a)] {
            let link = self.links.entry((x, y)).or_default();
            link.conn += 1;
            link.last_arrival_ms = 0;
        }
        for (node, peer) in [(a, b), (b, a)] {
            let link = self.links.entry((node, peer)).or_default();
            if node < self.nodes.len() && self.nodes[node].running && !link.notice_pending {
                link.notice_pending = true;
                let incarnation = self.nodes[node].incarnation;
                let later = self.now_ms + self.rng.between(5, 50);
                self.at(
                    later,
                    Ev::Disconnected {
                        node,
                        peer,
                        incarnation,
                    },
                );
            }
        }
    }

    fn disconnected(&mut self, i: usize, peer: usize) -> Result<(), String> {
        if peer == self.controller() {
            return Ok(()); // proposals in flight are sent again (`tick`)
        }
        let peer_id = self.nodes[peer].id;
        for p in 0..self.cfg.partitions {
            self.replica_event(i, p, |r, _, _| r.on_disconnected(peer_id))?;
        }
        Ok(())
    }

    fn deliver(&mut self, from: usize, to: usize, msg: Msg) -> Result<(), String> {
        if to == self.controller() {
            return self.controller_got(from, msg);
        }
        if !self.nodes[to].running {
            return Ok(());
        }
        let from_id = self.nodes.get(from).map(|n| n.id);
        match msg {
            Msg::HeartbeatReply { metadata } => {
                self.nodes[to].registered = true;
                match metadata {
                    Some(m) => self.apply_metadata(to, m),
                    None => Ok(()),
                }
            }
            Msg::Metadata(_) if !self.nodes[to].registered => Ok(()),
            Msg::Metadata(m) => self.apply_metadata(to, m),
            Msg::AlterPartitionFailed {
                partition,
                metadata,
            } => {
                if self.nodes[to].proposals[partition].take().is_some() {
                    self.apply_metadata(to, metadata)?;
                    self.replica_event(to, partition, |r, _, now| {
                        r.on_proposal_refused(now);
                        Vec::new()
                    })?;
                }
                Ok(())
            }
            Msg::Say { partition, say } => {
                let Some(from) = from_id else {
                    return Ok(());
                };
                self.replica_event(to, partition, |r, log, now| {
                    let epochs = log.epochs();
                    match say {
                        Say::Probe {
                            leader_epoch,
                            high_watermark,
                            log_end,
                        } => {
                            r.on_append(from, leader_epoch, high_watermark, log_end, false, &epochs)
                                .1
                        }
                        Say::EpochEnd {
                            leader_epoch,
                            epoch,
                            end_offset,
                        } => r.on_epoch_end(from, leader_epoch, epoch, end_offset, &epochs),
                        Say::Progress {
                            leader_epoch,
                            log_end,
                            written,
                            durable,
                        } => r.on_progress(from, leader_epoch, log_end, written, durable, now),
                        Say::EpochQuery {
                            leader_epoch,
                            epoch,
                        } => r.on_epoch_query(from, leader_epoch, epoch, &epochs),
                        Say::Stale { .. } => r.on_stale(from, now),
                    }
                })
            }
            Msg::Append {
                partition,
                leader_epoch,
                high_watermark,
                base_offset,
                batches,
            } => {
                let Some(from) = from_id else {
                    return Ok(());
                };
                let mut take = Take::Drop;
                self.replica_event(to, partition, |r, log, _| {
                    let (t, actions) = r.on_append(
                        from,
                        leader_epoch,
                        high_watermark,
                        base_offset,
                        !batches.is_empty(),
                        &log.epochs(),
                    );
                    take = t;
                    actions
                })?;
                if take == Take::Append {
                    let log = &mut self.nodes[to].logs[partition];
                    if base_offset != log.end() {
                        return Err(format!(
                            "node {} was told to append at {base_offset} with its log ending at {}",
                            to + 1,
                            log.end()
                        ));
                    }
                    log.append(&batches)
                        .map_err(|e| format!("node {} appended from node {from}: {e}", to + 1))?;
                    self.submit_write(to, partition);
                    self.local_log_moved(to, partition)?;
                }
                Ok(())
            }
            Msg::Heartbeat { .. } | Msg::AlterPartition { .. } => Ok(()),
        }
    }

    // ---- The controller ----

    fn controller_got(&mut self, from: usize, msg: Msg) -> Result<(), String> {
        match msg {
            Msg::Heartbeat {
                incarnation,
                version,
            } => {
                let id = self.nodes[from].id;
                match self
                    .sessions
                    .heartbeat(&self.metadata, id, incarnation, self.now_ms)
                {
                    Heard::Alive => {
                        let metadata =
                            (version < self.metadata.version).then(|| self.metadata.clone());
                        self.send(self.controller(), from, Msg::HeartbeatReply { metadata });
                    }
                    Heard::Rejoin => self.decide(Decision::Register {
                        node: from,
                        incarnation,
                    }),
                    Heard::Duplicate { .. } | Heard::ShuttingDown => {}
                }
            }
            Msg::AlterPartition {
                partition,
                isr,
                leader_epoch,
                partition_epoch,
            } => self.decide(Decision::Alter {
                from,
                partition,
                isr,
                leader_epoch,
                partition_epoch,
            }),
            _ => {}
        }
        Ok(())
    }

    /// A decision commits after a delay; it is made from the metadata of that moment.
    fn decide(&mut self, decision: Decision) {
        let delay = self.rng.between(1, self.cfg.commit_delay_ms_max);
        self.at(self.now_ms + delay, Ev::Commit(decision));
    }

    fn commit(&mut self, decision: Decision) -> Result<(), String> {
        let mut m = (*self.metadata).clone();
        // The leader whose ISR change this is, told if it does not commit.
        let mut alter = None;
        // The node whose registration this is, answered once it commits.
        let mut registered = None;
        let commands = match decision {
            Decision::Fence(node) => {
                self.fencing.remove(&node);
                brokers::fence_commands(&m, node)
            }
            Decision::Register { node, incarnation } => {
                if wire_incarnation(&self.nodes[node]) != incarnation {
                    return Ok(());
                }
                registered = Some(node);
                brokers::register_commands(&m, registration(self.nodes[node].id))
            }
            Decision::Alter {
                from,
                partition,
                isr,
                leader_epoch,
                partition_epoch,
            } => {
                alter = Some((from, partition));
                let topic = m.topics[TOPIC].id;
                let index = i32::try_from(partition).map_err(|e| e.to_string())?;
                match leadership::isr_change(&m, topic, index, &isr, leader_epoch, partition_epoch)
                {
                    Ok(c) => vec![c],
                    Err(e) => {
                        self.note(format!("alter {partition} refused: {e}"));
                        Vec::new()
                    }
                }
            }
        };
        let before = self.metadata.clone();
        for c in &commands {
            if let Err(e) = model::apply(&mut m, c) {
                self.note(format!("refused: {e}"));
            }
        }
        if let Some((from, partition)) = alter
            && m.version == before.version
        {
            let metadata = self.metadata.clone();
            self.send(
                self.controller(),
                from,
                Msg::AlterPartitionFailed {
                    partition,
                    metadata,
                },
            );
        }
        if m.version != before.version {
            self.metadata = Arc::new(m);
            self.committed_changes(&before)?;
            for i in 0..self.nodes.len() {
                self.send(self.controller(), i, Msg::Metadata(self.metadata.clone()));
            }
        }
        if let Some(node) = registered {
            let metadata = Some(self.metadata.clone());
            self.send(self.controller(), node, Msg::HeartbeatReply { metadata });
        }
        Ok(())
    }

    /// What a committed change means for the checks: a member joining an ISR must hold every
    /// acknowledged record.
    fn committed_changes(&mut self, before: &ClusterMetadata) -> Result<(), String> {
        let old = &before.topics[TOPIC].partitions;
        let new = self.metadata.topics[TOPIC].partitions.clone();
        for (p, (o, s)) in old.iter().zip(&new).enumerate() {
            if o.leader != s.leader {
                self.leader_changes += 1;
            }
            self.note(format!(
                "p{p}: leader {:?} e{} isr {:?} pe{}",
                s.leader.map(|l| l.0),
                s.leader_epoch.0,
                s.isr.iter().map(|n| n.0).collect::<Vec<_>>(),
                s.partition_epoch.0
            ));
            for joined in s.isr.iter().filter(|n| !o.isr.contains(n)) {
                let i = self.index_of(*joined)?;
                self.check
                    .holds_acked(p, *joined, &self.nodes[i].logs[p], "joined the ISR")?;
            }
        }
        Ok(())
    }

    fn in_isr(&self, partition: usize, node: NodeId) -> bool {
        self.metadata.topics[TOPIC].partitions[partition]
            .isr
            .contains(&node)
    }

    // ---- A node ----

    fn tick(&mut self, i: usize) -> Result<(), String> {
        if self.now_ms >= self.nodes[i].next_heartbeat_ms {
            self.nodes[i].next_heartbeat_ms = self.now_ms + self.cfg.heartbeat_interval_ms;
            let msg = Msg::Heartbeat {
                incarnation: wire_incarnation(&self.nodes[i]),
                version: self.nodes[i].metadata.as_ref().map_or(0, |m| m.version),
            };
            self.send(i, self.controller(), msg);
        }
        for p in 0..self.cfg.partitions {
            let now = self.now_ms;
            let again = match &mut self.nodes[i].proposals[p] {
                Some((msg, sent_ms)) if now.saturating_sub(*sent_ms) >= PROPOSAL_RETRY_MS => {
                    *sent_ms = now;
                    Some(msg.clone())
                }
                _ => None,
            };
            if let Some(msg) = again {
                self.send(i, self.controller(), msg);
            }
            self.replica_event(i, p, |r, _, now| r.on_tick(now))?;
        }
        Ok(())
    }

    fn apply_metadata(&mut self, i: usize, m: Arc<ClusterMetadata>) -> Result<(), String> {
        if self.nodes[i]
            .metadata
            .as_ref()
            .is_some_and(|old| old.version >= m.version)
        {
            return Ok(());
        }
        self.nodes[i].metadata = Some(m.clone());
        let me = self.nodes[i].id;
        for p in 0..self.cfg.partitions {
            let state = m.topics[TOPIC].partitions[p].clone();
            if self.nodes[i].replicas[p]
                .as_ref()
                .is_some_and(|r| r.state().partition_epoch != state.partition_epoch)
            {
                self.nodes[i].proposals[p] = None; // the replica's pending change is settled
            }
            if self.nodes[i].replicas[p].is_none() {
                let config = ReplicaConfig {
                    me,
                    min_insync_replicas: self.cfg.min_insync_replicas,
                    lag_time_max_ms: self.cfg.lag_time_max_ms,
                    ack_level: AckLevel::Durable,
                    flaw: self.cfg.flaw,
                };
                let view = self.nodes[i].logs[p].view();
                let (replica, actions) = Replica::new(config, &state, view, 0, self.now_ms);
                self.nodes[i].replicas[p] = Some(replica);
                self.carry_out(i, p, actions)?;
            } else if self.nodes[i].replicas[p]
                .as_ref()
                .is_some_and(|r| *r.state() != state)
            {
                // Only a partition whose state changed: `on_metadata` takes an unchanged state
                // as the end of the ISR change in flight.
                self.replica_event(i, p, |r, log, now| r.on_metadata(&state, log.view(), now))?;
            }
        }
        Ok(())
    }

    fn produce(&mut self) -> Result<(), String> {
        let p = self.rng.pick(self.cfg.partitions);
        let i = match self.metadata.topics[TOPIC].partitions[p].leader {
            Some(l) if self.rng.chance(800) => self.index_of(l)?,
            _ => self.rng.pick(self.nodes.len()),
        };
        if !self.nodes[i].running || self.paused(i) || !self.nodes[i].registered {
            return Ok(());
        }
        let Some(replica) = self.nodes[i].replicas[p].as_ref() else {
            return Ok(());
        };
        let Ok(epoch) = replica.admit(true) else {
            return Ok(());
        };
        self.produced += 1;
        let batch = Batch {
            epoch: epoch.0,
            hash: fnv(self.seed, &self.produced.to_be_bytes()),
        };
        let log = &mut self.nodes[i].logs[p];
        let offset = log.end();
        log.append(&[batch])
            .map_err(|e| format!("node {} appended a produce: {e}", i + 1))?;
        self.note(format!("n{} appends {p}:{offset} e{}", i + 1, epoch.0));
        self.nodes[i].waiting.push(Waiting {
            partition: p,
            epoch,
            offset,
            batch,
            after_quiet: self.quiet,
        });
        self.submit_write(i, p);
        self.local_log_moved(i, p)
    }

    /// A write of everything appended so far, then its sync, complete later.
    fn submit_write(&mut self, i: usize, p: usize) {
        let log = &self.nodes[i].logs[p];
        let (generation, upto) = (log.generation, log.end());
        let latency = self.rng.between(1, self.cfg.disk_latency_ms_max);
        self.at(
            self.now_ms + latency,
            Ev::Written {
                node: i,
                partition: p,
                generation,
                upto,
            },
        );
    }

    fn local_log_moved(&mut self, i: usize, p: usize) -> Result<(), String> {
        if !self.nodes[i].running || self.paused(i) {
            return Ok(()); // a paused node learns it when it runs again
        }
        self.replica_event(i, p, |r, log, now| r.on_local_log(log.view(), now))
    }

    /// Feeds node `i`'s replica of partition `p` one event (if it runs and has one) and
    /// carries out what it returns.
    fn replica_event(
        &mut self,
        i: usize,
        p: usize,
        event: impl FnOnce(&mut Replica, &FakeLog, u64) -> Vec<Action>,
    ) -> Result<(), String> {
        let now = self.now_ms;
        let node = &mut self.nodes[i];
        if !node.running {
            return Ok(());
        }
        let Some(replica) = node.replicas[p].as_mut() else {
            return Ok(());
        };
        let actions = event(replica, &node.logs[p], now);
        self.carry_out(i, p, actions)
    }

    fn carry_out(&mut self, i: usize, p: usize, actions: Vec<Action>) -> Result<(), String> {
        let mut queue: VecDeque<Action> = actions.into();
        let mut carried = 0;
        while let Some(action) = queue.pop_front() {
            carried += 1;
            if carried > ACTIONS_PER_EVENT_MAX {
                return Err(format!(
                    "node {} partition {p}: more than {ACTIONS_PER_EVENT_MAX} actions from one event (a loop?)",
                    i + 1
                ));
            }
            match action {
                Action::Send { to, say } => {
                    let to = self.index_of(to)?;
                    self.send(i, to, Msg::Say { partition: p, say });
                }
                Action::HighWatermark(hw) => self.high_watermark_moved(i, p, hw)?,
                Action::ProposeIsr {
                    isr,
                    leader_epoch,
                    partition_epoch,
                } => {
                    self.note(format!(
                        "n{} proposes {p} isr {:?}",
                        i + 1,
                        isr.iter().map(|n| n.0).collect::<Vec<_>>()
                    ));
                    let msg = Msg::AlterPartition {
                        partition: p,
                        isr,
                        leader_epoch,
                        partition_epoch,
                    };
                    self.nodes[i].proposals[p] = Some((msg.clone(), self.now_ms));
                    self.send(i, self.controller(), msg);
                }
                Action::Truncate(cut) => {
                    let id = self.nodes[i].id;
                    self.note(format!("n{} truncates {p} at {cut}", i + 1));
                    let log = &mut self.nodes[i].logs[p];
                    log.truncate(cut);
                    let view: LogView = log.view();
                    self.check.cut(id, p, cut);
                    if self.in_isr(p, id) {
                        self.check
                            .holds_acked(p, id, &self.nodes[i].logs[p], "truncated")?;
                    }
                    // Writes in flight were voided: what is left is written again.
                    self.submit_write(i, p);
                    if let Some(r) = self.nodes[i].replicas[p].as_mut() {
                        queue.extend(r.on_truncated(view, self.now_ms));
                    }
                }
            }
        }
        self.stream(i, p);
        self.answer_waiting(i, p)
    }

    /// A leader sends each follower what it needs of its log.
    fn stream(&mut self, i: usize, p: usize) {
        let node = &self.nodes[i];
        let Some(replica) = node.replicas[p].as_ref() else {
            return;
        };
        let Some(epoch) = replica.leads() else {
            return;
        };
        let hw = replica.high_watermark();
        let mut sends = Vec::new();
        for follower in replica.followers() {
            if let Some((from, to)) = replica.to_send(follower) {
                let batches = node.logs[p].read(from, to, APPEND_BATCHES_MAX);
                if !batches.is_empty() {
                    sends.push((follower, from, batches));
                }
            }
        }
        for (follower, from, batches) in sends {
            let next = from + batches.len() as i64;
            if let Some(r) = self.nodes[i].replicas[p].as_mut() {
                r.sent(follower, next);
            }
            let Ok(to) = self.index_of(follower) else {
                continue;
            };
            let msg = Msg::Append {
                partition: p,
                leader_epoch: epoch.0,
                high_watermark: hw,
                base_offset: from,
                batches,
            };
            self.send(i, to, msg);
        }
    }

    /// Answers the acks=all produces whose verdict is in.
    fn answer_waiting(&mut self, i: usize, p: usize) -> Result<(), String> {
        let node = &mut self.nodes[i];
        let Some(replica) = node.replicas[p].as_ref() else {
            return Ok(());
        };
        let mut done = Vec::new();
        let mut kept = Vec::new();
        for w in std::mem::take(&mut node.waiting) {
            if w.partition != p {
                kept.push(w);
                continue;
            }
            match replica.verdict(w.epoch, w.offset + 1) {
                Verdict::Wait => kept.push(w),
                Verdict::Done => done.push(w),
                Verdict::NotEnoughReplicasAfterAppend | Verdict::NotLeader => {}
            }
        }
        self.nodes[i].waiting = kept;
        for w in done {
            self.note(format!("acked {p}:{}", w.offset));
            let isr = self.metadata.topics[TOPIC].partitions[p].isr.clone();
            let logs: Vec<(NodeId, &FakeLog)> = isr
                .iter()
                .filter_map(|n| {
                    let node = self.nodes.iter().find(|x| x.id == *n)?;
                    Some((*n, &node.logs[p]))
                })
                .collect();
            self.check.acked(p, w.offset, w.batch, &logs)?;
            if w.after_quiet {
                self.acked_after_quiet.insert(p);
                if self.acked_after_quiet.len() == self.cfg.partitions {
                    self.done = true;
                }
            }
        }
        Ok(())
    }

    fn high_watermark_moved(&mut self, i: usize, p: usize, hw: i64) -> Result<(), String> {
        let node = &self.nodes[i];
        let Some(replica) = node.replicas[p].as_ref() else {
            return Ok(());
        };
        let (id, incarnation) = (node.id, node.incarnation);
        let epoch = replica
            .leads()
            .or(replica.follows().map(|(_, e)| e))
            .map_or(-1, |e| e.0);
        if replica.leads().is_some() {
            let isr = replica.state().isr.len();
            if isr < self.cfg.min_insync_replicas {
                return Err(format!(
                    "leader {id} of partition {p} advanced its high watermark to {hw} with an ISR of {isr}"
                ));
            }
            // The leader's committed prefix also bounds every member of its ISR.
            for member in replica.state().isr.clone() {
                let m = self.index_of(member)?;
                let log = &self.nodes[m].logs[p];
                let upto = hw.min(log.end());
                self.check.committed_prefix(p, member, log, upto)?;
            }
        }
        self.check.high_watermark(p, id, incarnation, epoch, hw)?;
        self.check
            .committed_prefix(p, id, &self.nodes[i].logs[p], hw)
    }

    fn check_leaders(&mut self) -> Result<(), String> {
        for node in &self.nodes {
            if !node.running {
                continue;
            }
            for (p, r) in node.replicas.iter().enumerate() {
                if let Some(epoch) = r.as_ref().and_then(Replica::leads) {
                    self.check.leader(p, epoch.0, node.id)?;
                }
            }
        }
        Ok(())
    }

    fn index_of(&self, node: NodeId) -> Result<usize, String> {
        self.nodes
            .iter()
            .position(|n| n.id == node)
            .ok_or_else(|| format!("no node {node}"))
    }
}
