//! One seeded run: voters, their fake disks, the fake network and time, the fault schedule,
//! the client proposing entries, and the checks after every step.

use std::fmt;

use bytes::Bytes;
use controller::{Action, Config, Event, Quorum, QuorumError, Role};
use model::NodeId;

use crate::agenda::{Agenda, Trace};
use crate::check::{Checker, StateMachine};
use crate::disk::{Disk, Write};
use crate::network::Network;
use crate::rng::Rng;

/// What a run looks like. [`SimConfig::new`] has the defaults CI runs.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub voters: usize,
    /// Faults are injected this long (virtual time).
    pub fault_ms: u64,
    /// Then, with every node up and the network whole, a proposal made after the faults
    /// stopped must be applied on every node within this long.
    pub quiet_ms: u64,
    pub tick_ms: u64,
    pub net_delay_ms_max: u64,
    pub disk_latency_ms_max: u64,
    /// The broken variant: each persist is reported done when it is submitted, not when it
    /// completes, so a vote or an append is acknowledged before it is durable.
    pub disk_lies: bool,
    /// Lines of trace kept for a failure report.
    pub trace_lines: usize,
}

impl SimConfig {
    pub fn new(voters: usize) -> SimConfig {
        SimConfig {
            voters,
            fault_ms: 3_000,
            quiet_ms: 5_000,
            tick_ms: 10,
            net_delay_ms_max: 20,
            disk_latency_ms_max: 15,
            disk_lies: false,
            trace_lines: 40,
        }
    }
}

/// What a run that passed did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub steps: u64,
    pub virtual_ms: u64,
    pub committed: usize,
    pub terms_with_a_leader: usize,
    pub crashes: u64,
    pub snapshots_restored: u64,
    /// A digest of the whole trace: the same seed gives the same run.
    pub fingerprint: u64,
}

/// A run that broke an invariant: enough to replay it (`scripts/simulate --start SEED --seeds 1`).
#[derive(Debug, Clone)]
pub struct Failure {
    pub seed: u64,
    pub voters: usize,
    /// The run had the broken (lying) disk.
    pub disk_lies: bool,
    pub step: u64,
    pub time_ms: u64,
    pub what: String,
    pub trace: Vec<String>,
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "seed {} ({} voters) failed at step {} (t={} ms): {}",
            self.seed, self.voters, self.step, self.time_ms, self.what
        )?;
        writeln!(
            f,
            "replay: scripts/simulate --voters {} --start {} --seeds 1{}",
            self.voters,
            self.seed,
            if self.disk_lies { " --disk-lies" } else { "" }
        )?;
        writeln!(f, "last steps:")?;
        for line in &self.trace {
            writeln!(f, "  {line}")?;
        }
        Ok(())
    }
}

#[derive(Debug)]
enum Ev {
    Tick(usize),
    Deliver {
        to: usize,
        from: usize,
        frame: Bytes,
    },
    DiskDone {
        node: usize,
        incarnation: u64,
        seq: u64,
    },
    Fault,
    Restart {
        node: usize,
        incarnation: u64,
    },
    Propose,
    Quiet,
    Deadline,
}

#[derive(Debug)]
struct Node {
    id: NodeId,
    quorum: Option<Quorum>,
    /// Bumped by every crash: completions and restarts meant for an earlier life are void.
    incarnation: u64,
    disk: Disk,
    sm: StateMachine,
    /// Whether it applied an entry proposed after the faults stopped.
    applied_after_quiet: bool,
}

struct World {
    seed: u64,
    cfg: SimConfig,
    rng: Rng,
    now_ms: u64,
    step: u64,
    agenda: Agenda<Ev>,
    nodes: Vec<Node>,
    net: Network,
    check: Checker,
    snapshot_every: u64,
    trace: Trace,
    proposals: u64,
    leader_hint: Option<usize>,
    quiet: bool,
    done: bool,
    crashes: u64,
    restores: u64,
}

/// Runs one seed. Deterministic: the same seed and config give the same run.
pub fn run(seed: u64, cfg: &SimConfig) -> Result<Summary, Failure> {
    let mut w = World::new(seed, cfg.clone());
    match w.run() {
        Ok(()) => Ok(Summary {
            steps: w.step,
            virtual_ms: w.now_ms,
            committed: w.check.committed(),
            terms_with_a_leader: w.check.terms_with_a_leader(),
            crashes: w.crashes,
            snapshots_restored: w.restores,
            fingerprint: w.trace.fingerprint(),
        }),
        Err(what) => {
            w.end_line();
            Err(Failure {
                seed,
                voters: cfg.voters,
                disk_lies: cfg.disk_lies,
                step: w.step,
                time_ms: w.now_ms,
                what,
                trace: w.trace.into_lines(),
            })
        }
    }
}

impl World {
    fn new(seed: u64, cfg: SimConfig) -> World {
        let mut rng = Rng::new(seed);
        let snapshot_every = rng.between(3, 16);
        let nodes = (0..cfg.voters)
            .map(|i| Node {
                id: NodeId(i as i32 + 1),
                quorum: None,
                incarnation: 0,
                disk: Disk::default(),
                sm: StateMachine::default(),
                applied_after_quiet: false,
            })
            .collect();
        let trace = Trace::new(cfg.trace_lines);
        World {
            seed,
            net: Network::new(cfg.net_delay_ms_max),
            cfg,
            rng,
            now_ms: 0,
            step: 0,
            agenda: Agenda::new(),
            nodes,
            check: Checker::default(),
            snapshot_every,
            trace,
            proposals: 0,
            leader_hint: None,
            quiet: false,
            done: false,
            crashes: 0,
            restores: 0,
        }
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
        let first_fault = self.rng.between(10, 200);
        self.at(first_fault, Ev::Fault);
        let first_proposal = self.rng.between(5, 50);
        self.at(first_proposal, Ev::Propose);
        self.at(self.cfg.fault_ms, Ev::Quiet);
        self.at(self.cfg.fault_ms + self.cfg.quiet_ms, Ev::Deadline);
        while !self.done {
            let Some((time_ms, ev)) = self.agenda.next() else {
                return Err("the agenda ran dry".into());
            };
            self.step += 1;
            self.now_ms = time_ms;
            self.handle(ev)?;
            self.check_leaders()?;
            self.end_line();
        }
        Ok(())
    }

    fn handle(&mut self, ev: Ev) -> Result<(), String> {
        match ev {
            Ev::Tick(i) => {
                self.at(self.now_ms + self.cfg.tick_ms, Ev::Tick(i));
                if self.nodes[i].quorum.is_some() {
                    self.step_node(i, Event::Tick)?;
                }
            }
            Ev::Deliver { to, from, frame } => {
                if self.nodes[to].quorum.is_some() && self.net.can_send(from, to) {
                    self.note(format!("n{}->n{} {}B", from + 1, to + 1, frame.len()));
                    self.step_node(to, Event::Frame(frame))?;
                }
            }
            Ev::DiskDone {
                node,
                incarnation,
                seq,
            } => {
                if self.nodes[node].incarnation == incarnation {
                    let done = self.nodes[node].disk.complete(seq);
                    if let Some(id) = done
                        && !self.cfg.disk_lies
                    {
                        self.note(format!("n{} persisted {}", node + 1, id.0));
                        self.step_node(node, Event::Persisted(id))?;
                    }
                }
            }
            Ev::Fault => {
                if !self.quiet {
                    let next = self.now_ms + self.rng.between(20, 200);
                    self.at(next, Ev::Fault);
                    self.fault()?;
                }
            }
            Ev::Restart { node, incarnation } => {
                if self.nodes[node].quorum.is_none() && self.nodes[node].incarnation == incarnation
                {
                    self.start_node(node)?;
                }
            }
            Ev::Propose => {
                let next = self.now_ms + self.rng.between(5, 50);
                self.at(next, Ev::Propose);
                self.propose()?;
            }
            Ev::Quiet => {
                self.quiet = true;
                self.note("quiet: faults stop, network heals, every node restarts");
                self.net.heal();
                self.net.loss_per_mille = 0;
                self.net.duplicate_per_mille = 0;
                for i in 0..self.nodes.len() {
                    if self.nodes[i].quorum.is_none() {
                        self.start_node(i)?;
                    }
                }
            }
            Ev::Deadline => {
                let behind: Vec<String> = self
                    .nodes
                    .iter()
                    .filter(|n| !n.applied_after_quiet)
                    .map(|n| format!("node {}: {:?}", n.id, n.quorum.as_ref().map(Quorum::status)))
                    .collect();
                return Err(format!(
                    "no progress: {} ms after the faults stopped, a new proposal is not applied on {}",
                    self.cfg.quiet_ms,
                    behind.join("; ")
                ));
            }
        }
        Ok(())
    }

    fn fault(&mut self) -> Result<(), String> {
        let n = self.nodes.len();
        match self.rng.below(100) {
            0..20 => {
                let i = self.rng.pick(n);
                self.crash(i);
            }
            20..25 => {
                // A correlated failure (a rack losing power): any subset at once.
                for i in 0..n {
                    if self.rng.chance(500) {
                        self.crash(i);
                    }
                }
            }
            25..45 => {
                let side: Vec<bool> = (0..n).map(|_| self.rng.chance(500)).collect();
                self.note(format!("partition {side:?}"));
                self.net.partition(&side);
            }
            45..60 => {
                let from = self.rng.pick(n);
                let to = (from + 1 + self.rng.pick(n - 1)) % n;
                self.note(format!("cut n{}->n{}", from + 1, to + 1));
                self.net.cut_one_way(from, to);
            }
            60..75 => {
                self.note(format!("heal {} links", self.net.cut_links()));
                self.net.heal();
            }
            75..88 => {
                self.net.loss_per_mille = self.rng.between(0, 300);
                self.net.duplicate_per_mille = self.rng.between(0, 100);
                self.note(format!(
                    "loss {}‰ dup {}‰",
                    self.net.loss_per_mille, self.net.duplicate_per_mille
                ));
            }
            _ => {}
        }
        Ok(())
    }

    fn crash(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        if node.quorum.take().is_none() {
            return;
        }
        node.incarnation += 1;
        node.disk.crash();
        node.sm = StateMachine::default();
        self.crashes += 1;
        let incarnation = node.incarnation;
        self.note(format!("crash n{}", i + 1));
        let back = self.now_ms + self.rng.between(20, 800);
        self.at(
            back,
            Ev::Restart {
                node: i,
                incarnation,
            },
        );
    }

    fn start_node(&mut self, i: usize) -> Result<(), String> {
        let voters: Vec<NodeId> = self.nodes.iter().map(|n| n.id).collect();
        let node = &mut self.nodes[i];
        let mut config = Config::new(node.id, voters, "sim");
        config.snapshot_every_entries = self.snapshot_every;
        config.seed =
            self.seed ^ (u64::from(node.id.0.unsigned_abs()) << 48) ^ (node.incarnation << 32);
        let durable = node.disk.durable.clone();
        node.sm = match &durable.snapshot {
            Some(s) => {
                StateMachine::from_snapshot(&s.data).ok_or("a saved snapshot is not ours")?
            }
            None => StateMachine::default(),
        };
        self.check.recovered(node.id, &node.sm)?;
        let mut quorum = Quorum::new(config, durable)
            .map_err(|e| format!("node {} cannot restart: {e}", node.id))?;
        let actions = quorum
            .start()
            .map_err(|e| format!("node {} cannot start: {e}", node.id))?;
        node.quorum = Some(quorum);
        self.note(format!("start n{} at {}", i + 1, self.nodes[i].sm.applied));
        self.carry_out(i, actions)
    }

    fn propose(&mut self) -> Result<(), String> {
        let i = match self.leader_hint {
            Some(l) if self.rng.chance(700) => l,
            _ => self.rng.pick(self.nodes.len()),
        };
        let Some(q) = self.nodes[i].quorum.as_mut() else {
            return Ok(());
        };
        self.proposals += 1;
        let phase = if self.quiet { "quiet" } else { "fault" };
        let data = Bytes::from(format!("{}:{phase}:{}", self.seed, self.proposals));
        match q.step(Event::Propose(data)) {
            Ok(actions) => {
                self.note(format!("n{} proposed {}", i + 1, self.proposals));
                self.carry_out(i, actions)
            }
            Err(QuorumError::NotLeader { .. } | QuorumError::ProposalDropped) => Ok(()),
            Err(e) => Err(format!("node {} refused a proposal: {e}", i + 1)),
        }
    }

    fn step_node(&mut self, i: usize, event: Event) -> Result<(), String> {
        let Some(q) = self.nodes[i].quorum.as_mut() else {
            return Ok(());
        };
        let actions = q
            .step(event)
            .map_err(|e| format!("node {} refused an event: {e}", i + 1))?;
        self.carry_out(i, actions)
    }

    /// Does what a host does with the actions, in order; events they cause (a lying disk's
    /// instant completion, a snapshot) are fed back after the whole list.
    fn carry_out(&mut self, i: usize, actions: Vec<Action>) -> Result<(), String> {
        let mut later = Vec::new();
        for action in actions {
            match action {
                Action::Send { to, frame } => {
                    let to = self.index_of(to)?;
                    let frame = Bytes::from(frame);
                    for delay in self.net.deliveries(i, to, &mut self.rng) {
                        self.at(
                            self.now_ms + delay,
                            Ev::Deliver {
                                to,
                                from: i,
                                frame: frame.clone(),
                            },
                        );
                    }
                }
                Action::Persist(p) => {
                    let id = p.id;
                    self.write(i, Write::Persist(p));
                    if self.cfg.disk_lies {
                        later.push(Event::Persisted(id));
                    }
                }
                Action::SaveSnapshot(image) => self.write(i, Write::Snapshot(image)),
                Action::Restore(image) => {
                    self.restores += 1;
                    self.note(format!("n{} restored {}", i + 1, image.index));
                    let node = &mut self.nodes[i];
                    self.check.restored(node.id, &mut node.sm, &image)?;
                }
                Action::Apply(entry) => {
                    self.note(format!("n{} applied {}", i + 1, entry.index));
                    let node = &mut self.nodes[i];
                    self.check.applied(node.id, &mut node.sm, &entry)?;
                    if self.quiet && entry.data.windows(7).any(|w| w == b":quiet:") {
                        node.applied_after_quiet = true;
                    }
                }
                Action::TakeSnapshot { index } => {
                    let sm = self.nodes[i].sm;
                    if sm.applied != index {
                        return Err(format!(
                            "node {} was asked for a snapshot at {index} with state at {}",
                            i + 1,
                            sm.applied
                        ));
                    }
                    later.push(Event::SnapshotTaken {
                        index,
                        data: sm.snapshot(),
                    });
                }
                Action::LeaderChanged { leader, term } => {
                    self.note(format!("n{} sees leader {leader:?} in term {term}", i + 1));
                    if let Some(l) = leader {
                        self.check.leader(term, l, self.nodes[i].id)?;
                        self.leader_hint = Some(self.index_of(l)?);
                    }
                }
                Action::Proposed { .. } => {}
            }
        }
        for event in later {
            self.step_node(i, event)?;
        }
        if self.quiet && self.nodes.iter().all(|n| n.applied_after_quiet) {
            self.done = true;
        }
        Ok(())
    }

    /// Starts a write on node `i`'s disk; its completion is an event of its own.
    fn write(&mut self, i: usize, write: Write) {
        let latency = self.rng.between(1, self.cfg.disk_latency_ms_max);
        let node = &mut self.nodes[i];
        let (seq, at) = node.disk.submit(write, self.now_ms, latency);
        let incarnation = node.incarnation;
        self.at(
            at,
            Ev::DiskDone {
                node: i,
                incarnation,
                seq,
            },
        );
    }

    fn check_leaders(&mut self) -> Result<(), String> {
        for node in &self.nodes {
            if let Some(status) = node.quorum.as_ref().map(Quorum::status)
                && status.role == Role::Leader
            {
                self.check.leader(status.term, node.id, node.id)?;
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
