//! The cluster, as this node takes part in it (`--controller-voters`): the host of its voter of
//! the controller quorum (the IO-free `quorum::Quorum` of `broker/controller`), its links to the
//! other nodes, its broker session with the active controller, and, while it is the active
//! controller, the broker sessions of every node. Everything here lives on shard 0.
//!
//! The metadata flow: a proposal (from any shard, through `controller::propose`) reaches the
//! active controller (forwarded over the cluster listener if that is another node), which
//! appends it to the Raft log; once committed, every voter applies it to its copy of the
//! metadata ([`Cluster::apply_entry`]) and publishes that to all of its shards; brokers that are
//! no voters get the metadata from the controller in heartbeat and proposal replies. A proposer
//! is answered once its own node's shards have applied the change.
//!
//! Must never: apply metadata that was not committed; answer a vote or an append before the
//! persist that records it is synced (the quorum holds those messages until `Persisted`).

mod link;
mod preflight;
mod raft_disk;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_channel::oneshot;
use model::{Applied, BrokerRegistration, ClusterMetadata, Command, NodeId};
use net::kafka_protocol::ResponseError;
use quorum::brokers::{self, Heard, Sessions};
use quorum::{Action, Event, LogEntry, Quorum};

use crate::config::{BrokerConfig, ClusterConfig};
use crate::metadata::TopicError;
use crate::shard::Shard;

use link::{Peer, Replier};
pub use preflight::{PreflightError, preflight};
use quorum::envelope::{
    Committed, Frame, Heartbeat, HeartbeatReply, NotCommitted, ProposeReply, Refusal,
};
pub use raft_disk::DiskError;

/// How often the quorum is ticked (its election timeout is 10 to 20 ticks).
const TICK: Duration = Duration::from_millis(100);
/// How long a proposal may take to commit before its proposer is told to retry.
const COMMIT_TIMEOUT: Duration = Duration::from_secs(15);
/// How long one forwarded request waits for its reply.
const RPC_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a stopping broker waits for the controller to move its leaderships.
const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// The cluster id every node of a quorum derives from its voters, so that nodes started with
/// nothing but their flags agree on it, and nodes with other voters are another cluster.
pub fn cluster_id(config: &ClusterConfig) -> String {
    let spelled = config.voters_spelled();
    let a = crc32c::crc32c(spelled.as_bytes());
    let b = crc32c::crc32c_append(a, spelled.as_bytes());
    let c = crc32c::crc32c_append(b, b"spindle");
    let d = crc32c::crc32c_append(c, spelled.as_bytes());
    let bits =
        (u128::from(a) << 96) | (u128::from(b) << 64) | (u128::from(c) << 32) | u128::from(d);
    uuid::Uuid::from_u128(bits).simple().to_string()
}

/// The controller quorum as one node sees it: the leader knows every voter's log end, any other
/// node only its own (`None`: not known here).
#[derive(Debug, Clone)]
pub struct QuorumView {
    pub leader: Option<NodeId>,
    pub term: u64,
    /// The committed index, if this node is a voter.
    pub commit: Option<u64>,
    pub voters: Vec<(NodeId, Option<u64>)>,
    pub listeners: BTreeMap<NodeId, std::net::SocketAddr>,
}

/// What one committed command did, as the proposer's client is told.
pub type Outcome = Result<Applied, TopicError>;

/// A refusal as it travels between nodes, and back.
fn to_wire(outcome: &Outcome) -> quorum::envelope::Outcome {
    outcome.clone().map_err(|e| Refusal {
        code: e.code.code(),
        message: e.message,
    })
}

fn from_wire(outcome: quorum::envelope::Outcome) -> Outcome {
    outcome.map_err(|r| {
        let code =
            ResponseError::try_from_code(r.code).unwrap_or(ResponseError::UnknownServerError);
        TopicError::new(code, r.message)
    })
}

/// A proposal waiting for its entry to be applied.
#[derive(Debug)]
struct Waiting {
    term: u64,
    done: oneshot::Sender<Result<(Vec<Outcome>, u64), NotCommitted>>,
}

pub struct Cluster {
    /// Itself, for the tasks it spawns.
    this: Weak<Cluster>,
    me: NodeId,
    /// This run of the process: a second process with this node id has another.
    incarnation: u64,
    config: ClusterConfig,
    voters: Vec<NodeId>,
    shard: Weak<Shard>,
    /// Each shard's replication port, registered with every heartbeat.
    replication_ports: Vec<u16>,
    started: Instant,
    /// This node's voter (`None` on a broker-only node), and its files.
    quorum: RefCell<Option<Quorum>>,
    disk: RefCell<Option<raft_disk::RaftDisk>>,
    /// The committed metadata as applied here: the state machine.
    applied: RefCell<Arc<ClusterMetadata>>,
    /// The version every shard of this node has applied, and who waits for a later one.
    published: Cell<u64>,
    publishing: Cell<bool>,
    publish_waiters: RefCell<Vec<(u64, oneshot::Sender<()>)>>,
    /// The active controller as far as this node knows.
    leader: Cell<Option<NodeId>>,
    /// Proposals of this node's voter, by log index.
    proposals: RefCell<HashMap<u64, Waiting>>,
    last_proposed: Cell<Option<(u64, u64)>>,
    peers: RefCell<BTreeMap<NodeId, Peer>>,
    rpcs: RefCell<HashMap<u64, oneshot::Sender<Frame>>>,
    next_rpc: Cell<u64>,
    /// While this node is the active controller: the brokers' sessions.
    sessions: RefCell<Sessions>,
    fencing: RefCell<BTreeSet<NodeId>>,
    /// One controller decision at a time (see `decide`).
    decisions: glommio::sync::Semaphore,
    /// Welcome peers' open inbound connections: (incarnation, count) by node.
    inbound: RefCell<HashMap<NodeId, (u64, usize)>>,
    /// The active controller's metadata version when it first took this node's heartbeat:
    /// this node serves clients once it has applied that much (see [`Cluster::registered`]).
    registered_at: Cell<Option<u64>>,
    shutting_down: Cell<bool>,
    /// Why this node must stop (a peer refused it, or its disk failed).
    fatal: RefCell<Option<String>>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("me", &self.me)
            .field("leader", &self.leader.get())
            .finish()
    }
}

/// Why the cluster host could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Disk(#[from] DiskError),
    #[error("the controller quorum: {0}")]
    Quorum(#[from] quorum::QuorumError),
    #[error("the snapshot of the metadata: {0}")]
    Snapshot(String),
    #[error("listening on {addr} (--cluster-listen): {source}")]
    Listen {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
}

impl Cluster {
    /// Starts this node's part of the cluster on shard 0: its voter (replaying its log), the
    /// cluster listener, the links to the voters, the tick and the heartbeats.
    /// `replication_ports`: each shard's replication listener, for the registration.
    pub fn start(
        shard: &Rc<Shard>,
        config: &BrokerConfig,
        replication_ports: Vec<u16>,
    ) -> Result<Rc<Cluster>, StartError> {
        let cluster = config
            .cluster
            .clone()
            .expect("started in cluster mode only");
        let me = config.node_id;
        let voters: Vec<NodeId> = cluster.voters.keys().copied().collect();
        let is_voter = voters.contains(&me);
        let listener =
            crate::server::listen(cluster.listen, false).map_err(|source| StartError::Listen {
                addr: cluster.listen,
                source,
            })?;
        let mut applied = shard.metadata();
        let (quorum, disk) = if is_voter {
            let (disk, durable) = raft_disk::RaftDisk::open(&config.data_dir)?;
            if let Some(s) = &durable.snapshot {
                applied =
                    Arc::new(model::snapshot::decode(&s.data, me).map_err(StartError::Snapshot)?);
            } else {
                applied = Arc::new(ClusterMetadata::new(applied.cluster_id.clone()));
            }
            let mut qc = quorum::Config::new(me, voters.clone(), applied.cluster_id.clone());
            qc.seed = u64::from(me.0.unsigned_abs()) ^ rand_seed();
            (Some(Quorum::new(qc, durable)?), Some(disk))
        } else {
            (None, None)
        };
        let node = Rc::new_cyclic(|this| Cluster {
            this: this.clone(),
            me,
            incarnation: rand_seed() | 1,
            voters,
            shard: Rc::downgrade(shard),
            replication_ports,
            started: Instant::now(),
            quorum: RefCell::new(quorum),
            disk: RefCell::new(disk),
            published: Cell::new(shard.metadata().version),
            applied: RefCell::new(applied),
            publishing: Cell::new(false),
            publish_waiters: RefCell::new(Vec::new()),
            leader: Cell::new(None),
            proposals: RefCell::new(HashMap::new()),
            last_proposed: Cell::new(None),
            peers: RefCell::new(BTreeMap::new()),
            rpcs: RefCell::new(HashMap::new()),
            next_rpc: Cell::new(1),
            sessions: RefCell::new(Sessions::new(cluster.session_timeout_ms)),
            fencing: RefCell::new(BTreeSet::new()),
            decisions: glommio::sync::Semaphore::new(1),
            inbound: RefCell::new(HashMap::new()),
            registered_at: Cell::new(None),
            shutting_down: Cell::new(false),
            fatal: RefCell::new(None),
            config: cluster,
        });
        for (&id, &addr) in &node.config.voters {
            if id != me {
                let peer = Peer::spawn(me, id, addr, Rc::downgrade(&node));
                node.peers.borrow_mut().insert(id, peer);
            }
        }
        glommio::spawn_local(link::accept(me, listener, Rc::downgrade(&node))).detach();
        // Replay what the log has committed, and elect itself if it is the only voter.
        let start = node.quorum.borrow_mut().as_mut().map(|q| q.start());
        if let Some(actions) = start {
            node.carry_out(actions?);
        }
        node.schedule_publish();
        glommio::spawn_local(node.clone().tick_loop()).detach();
        glommio::spawn_local(node.clone().heartbeat_loop()).detach();
        Ok(node)
    }

    fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn is_voter(&self) -> bool {
        self.voters.contains(&self.me)
    }

    /// The controller quorum as this node sees it (DescribeQuorum).
    pub fn quorum_view(&self) -> QuorumView {
        let quorum = self.quorum.borrow();
        let status = quorum.as_ref().map(|q| q.status());
        let progress = quorum.as_ref().map(|q| q.voters_progress());
        let voters = match progress {
            Some(p) => p.into_iter().map(|(n, i)| (n, i.map(|i| i.0))).collect(),
            None => self.voters.iter().map(|&n| (n, None)).collect(),
        };
        QuorumView {
            leader: self.leader.get(),
            term: status.map_or(0, |s| s.term.0),
            commit: status.map(|s| s.commit.0),
            voters,
            listeners: self.config.voters.clone(),
        }
    }

    /// Why this node must stop, once it must.
    pub fn fatal(&self) -> Option<String> {
        self.fatal.borrow().clone()
    }

    /// Waits until this node is registered with the active controller and its shards have
    /// applied metadata that shows it, at least as new as the controller's when it took the
    /// registration, or until it must stop. A restarted node's own log may still show an older
    /// registration of it, unfenced, and leaderships that moved while it was down: serving
    /// with those, it would answer for partitions and groups it no longer leads.
    pub async fn registered(&self) -> Result<(), String> {
        loop {
            if let Some(why) = self.fatal() {
                return Err(why);
            }
            let applied = self.applied.borrow().clone();
            let shown = applied.brokers.get(&self.me).is_some_and(|b| !b.fenced);
            let caught_up = self
                .registered_at
                .get()
                .is_some_and(|version| applied.version >= version);
            if caught_up && shown {
                self.wait_published(applied.version).await;
                return Ok(());
            }
            glommio::timer::sleep(Duration::from_millis(20)).await;
        }
    }

    fn registration(&self) -> BrokerRegistration {
        let shard = self.shard.upgrade();
        let config = shard.as_ref().map(|s| s.config.clone());
        BrokerRegistration {
            id: self.me,
            host: config
                .as_ref()
                .map_or_else(String::new, |c| c.advertise_host.clone()),
            port: config
                .as_ref()
                .and_then(|c| u16::try_from(c.advertise_port).ok())
                .unwrap_or(0),
            cluster_listener: Some(self.config.listen.to_string()),
            shards: shard
                .as_ref()
                .map_or(1, |s| u16::try_from(s.count).unwrap_or(u16::MAX)),
            rack: config.and_then(|c| c.rack.clone()),
            fenced: false,
            replication_ports: self.replication_ports.clone(),
        }
    }

    fn stop_with(&self, why: String) {
        tracing::error!(%why, "this node must stop");
        if self.fatal.borrow().is_none() {
            *self.fatal.borrow_mut() = Some(why);
        }
    }

    // ---- The voter: events in, actions carried out. ----

    /// Feeds one event to the voter and carries out what it asks, including the events that
    /// follow from it (persists done, snapshots taken), before returning.
    fn step(&self, event: Event) -> Result<(), quorum::QuorumError> {
        if !matches!(event, Event::Tick) {
            tracing::trace!(?event, "controller quorum event");
        }
        let actions = match self.quorum.borrow_mut().as_mut() {
            Some(q) => q.step(event)?,
            None => return Ok(()),
        };
        self.carry_out(actions);
        Ok(())
    }

    fn carry_out(&self, actions: Vec<Action>) {
        let mut follow_ups = Vec::new();
        for action in actions {
            tracing::trace!(?action, "controller quorum");
            match action {
                Action::Send { to, frame } => {
                    if let Some(peer) = self.peers.borrow().get(&to) {
                        peer.send(self.me, &Frame::Raft(Bytes::from(frame)));
                    }
                }
                Action::Persist(p) => {
                    let done = self.disk.borrow_mut().as_mut().map(|d| d.persist(&p));
                    match done {
                        Some(Ok(())) => follow_ups.push(Event::Persisted(p.id)),
                        Some(Err(e)) => {
                            // Going on without the write would break Raft: stop instead.
                            self.stop_with(format!("the controller log: {e}"));
                            return;
                        }
                        None => {}
                    }
                }
                Action::Restore(image) => match model::snapshot::decode(&image.data, self.me) {
                    Ok(m) => {
                        *self.applied.borrow_mut() = Arc::new(m);
                        self.schedule_publish();
                    }
                    Err(e) => self.stop_with(format!("a snapshot from the leader: {e}")),
                },
                Action::Apply(entry) => self.apply_entry(entry),
                Action::TakeSnapshot { index } => {
                    let data = model::snapshot::encode(&self.applied.borrow());
                    follow_ups.push(Event::SnapshotTaken {
                        index,
                        data: Bytes::from(data),
                    });
                }
                Action::SaveSnapshot(image) => {
                    let saved = self
                        .disk
                        .borrow_mut()
                        .as_mut()
                        .map(|d| d.save_snapshot(&image));
                    if let Some(Err(e)) = saved {
                        tracing::error!(error = %e, "saving a controller snapshot");
                    }
                }
                Action::LeaderChanged { leader, term } => {
                    tracing::info!(leader = ?leader.map(|l| l.0), %term, "controller leader");
                    self.leader.set(leader);
                    if leader == Some(self.me) {
                        let metadata = self.applied.borrow().clone();
                        self.sessions
                            .borrow_mut()
                            .take_over(&metadata, self.now_ms());
                        self.fencing.borrow_mut().clear();
                    }
                    if let Some(shard) = self.shard.upgrade() {
                        glommio::spawn_local(tell_controller(shard, leader)).detach();
                    }
                }
                Action::Proposed { index, term } => self.last_proposed.set(Some((index.0, term.0))),
            }
        }
        for event in follow_ups {
            if let Err(e) = self.step(event) {
                tracing::error!(error = %e, "the controller quorum refused its own event");
            }
        }
    }

    /// Who this node takes for the active controller; every shard is told when that changes.
    fn set_leader(&self, leader: Option<NodeId>) {
        if self.leader.replace(leader) != leader
            && let Some(shard) = self.shard.upgrade()
        {
            glommio::spawn_local(tell_controller(shard, leader)).detach();
        }
    }

    /// Applies one committed entry to the metadata, and answers its proposer if it was ours.
    fn apply_entry(&self, entry: LogEntry) {
        let waiting = self.proposals.borrow_mut().remove(&entry.index.0);
        let outcomes = if entry.data.is_empty() {
            Vec::new()
        } else {
            match model::record::decode_all(&entry.data) {
                Ok(commands) => {
                    let mut next = (**self.applied.borrow()).clone();
                    let outcomes: Vec<Outcome> = commands
                        .iter()
                        .map(|c| model::apply(&mut next, c).map_err(TopicError::from))
                        .collect();
                    if next.version != self.applied.borrow().version {
                        *self.applied.borrow_mut() = Arc::new(next);
                        self.schedule_publish();
                    }
                    outcomes
                }
                Err(e) => {
                    // Every node reads the same bytes, so every node skips this entry alike.
                    tracing::error!(index = %entry.index, error = %e, "a committed entry is not a list of commands; skipped");
                    Vec::new()
                }
            }
        };
        if let Some(w) = waiting {
            let version = self.applied.borrow().version;
            let result = if w.term == entry.term.0 {
                Ok((outcomes, version))
            } else {
                Err(NotCommitted::NotController(self.leader.get()))
            };
            let _ = w.done.send(result);
        }
    }

    /// Has every shard apply the latest metadata (one publisher at a time: each round takes
    /// the latest version there is).
    fn schedule_publish(&self) {
        let (Some(shard), Some(cluster)) = (self.shard.upgrade(), self.this.upgrade()) else {
            return;
        };
        if self.publishing.replace(true) {
            return;
        }
        glommio::spawn_local(async move {
            loop {
                let metadata = cluster.applied.borrow().clone();
                if metadata.version <= cluster.published.get() {
                    break;
                }
                if let Err(e) = crate::controller::broadcast(&shard, metadata.clone()).await {
                    tracing::error!(error = %e.message, "publishing metadata to the shards");
                    glommio::timer::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                if let Err(e) = crate::metadata::save(&metadata, &shard.config.data_dir) {
                    tracing::warn!(error = %e, "keeping a copy of the metadata");
                }
                cluster.published.set(metadata.version);
                cluster.push_to_brokers(&metadata);
                tracing::debug!(
                    version = metadata.version,
                    "metadata published to every shard"
                );
                let mut waiters = cluster.publish_waiters.borrow_mut();
                let (ready, waiting): (Vec<_>, Vec<_>) =
                    waiters.drain(..).partition(|(v, _)| *v <= metadata.version);
                *waiters = waiting;
                drop(waiters);
                for (_, done) in ready {
                    let _ = done.send(());
                }
            }
            cluster.publishing.set(false);
        })
        .detach();
    }

    /// As the active controller: sends `metadata` to every live broker that is no voter (and so
    /// applies no Raft log) and is connected, so it sees a change without waiting for its next
    /// heartbeat. One snapshot per publish round: a burst of changes is sent once.
    fn push_to_brokers(&self, metadata: &ClusterMetadata) {
        if self.leader.get() != Some(self.me) {
            return;
        }
        let brokers: Vec<(NodeId, std::net::SocketAddr)> = metadata
            .live_brokers()
            .filter(|b| !self.voters.contains(&b.id))
            .filter_map(|b| Some((b.id, b.cluster_listener.as_ref()?.parse().ok()?)))
            .collect();
        if brokers.is_empty() {
            return;
        }
        let frame = Frame::Metadata(Bytes::from(model::snapshot::encode(metadata)));
        for (node, addr) in brokers {
            let mut peers = self.peers.borrow_mut();
            let peer = peers
                .entry(node)
                .or_insert_with(|| Peer::spawn(self.me, node, addr, self.this.clone()));
            if peer.is_connected() {
                peer.send(self.me, &frame);
            }
        }
    }

    async fn wait_published(&self, version: u64) {
        if self.published.get() >= version {
            return;
        }
        let (tx, rx) = oneshot::channel();
        self.publish_waiters.borrow_mut().push((version, tx));
        self.schedule_publish();
        let _ = rx.await;
    }

    /// Replaces a broker-only node's metadata with a newer one from the controller.
    fn adopt(&self, snapshot: &[u8]) {
        if self.is_voter() {
            return; // a voter's metadata comes from its own log only
        }
        match model::snapshot::decode(snapshot, self.me) {
            Ok(m) if m.version > self.applied.borrow().version => {
                *self.applied.borrow_mut() = Arc::new(m);
                self.schedule_publish();
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "a bad metadata snapshot from the controller"),
        }
    }

    // ---- Proposals ----

    /// Commits `commands` through the active controller, wherever it is, and returns once this
    /// node's shards have applied the result.
    pub async fn commit(
        self: &Rc<Self>,
        commands: Vec<Command>,
    ) -> Result<Vec<Outcome>, TopicError> {
        let deadline = Instant::now() + COMMIT_TIMEOUT;
        let mut voter_turn = 0usize;
        loop {
            if let Some(why) = self.fatal() {
                return Err(TopicError::new(ResponseError::NotController, why));
            }
            if Instant::now() > deadline {
                return Err(TopicError::new(
                    ResponseError::RequestTimedOut,
                    "the controller quorum did not commit the change in time (is a majority of the voters up?)",
                ));
            }
            let target = match self.leader.get() {
                Some(l) => l,
                None if self.is_voter() => {
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                None => {
                    voter_turn += 1;
                    self.voters[voter_turn % self.voters.len()]
                }
            };
            let result = if target == self.me {
                self.propose_local(commands.clone()).await
            } else {
                self.forward(target, commands.clone()).await
            };
            match result {
                Ok((outcomes, version)) => {
                    self.wait_published(version).await;
                    return Ok(outcomes);
                }
                Err(NotCommitted::NotController(hint)) => {
                    if !self.is_voter() {
                        self.set_leader(hint);
                    }
                    glommio::timer::sleep(Duration::from_millis(50)).await;
                }
                Err(NotCommitted::Failed(why)) => {
                    return Err(TopicError::new(ResponseError::UnknownServerError, why));
                }
            }
        }
    }

    /// Proposes `commands` to this node's voter, which must lead, and waits for the entry.
    async fn propose_local(
        &self,
        commands: Vec<Command>,
    ) -> Result<(Vec<Outcome>, u64), NotCommitted> {
        let data = Bytes::from(model::record::encode_all(&commands));
        self.last_proposed.set(None);
        if let Err(e) = self.step(Event::Propose(data)) {
            return match e {
                quorum::QuorumError::NotLeader { .. } => {
                    Err(NotCommitted::NotController(self.leader.get()))
                }
                other => Err(NotCommitted::Failed(other.to_string())),
            };
        }
        let Some((index, term)) = self.last_proposed.take() else {
            return Err(NotCommitted::Failed("the proposal was not appended".into()));
        };
        let (done, rx) = oneshot::channel();
        self.proposals
            .borrow_mut()
            .insert(index, Waiting { term, done });
        match glommio::timer::timeout(COMMIT_TIMEOUT, async { Ok(rx.await) }).await {
            Ok(Ok(result)) => result,
            _ => {
                self.proposals.borrow_mut().remove(&index);
                Err(NotCommitted::NotController(self.leader.get()))
            }
        }
    }

    /// Sends `commands` to the active controller `to` and waits for its reply; a broker-only
    /// node adopts the metadata that comes back.
    async fn forward(
        self: &Rc<Self>,
        to: NodeId,
        commands: Vec<Command>,
    ) -> Result<(Vec<Outcome>, u64), NotCommitted> {
        let id = self.next_id();
        match self
            .call(to, id, Frame::Propose { id, commands }, RPC_TIMEOUT)
            .await
        {
            Some(Frame::ProposeReply(ProposeReply { result, .. })) => {
                let committed = result?;
                if let Some(m) = &committed.metadata {
                    self.adopt(m);
                }
                let outcomes = committed.outcomes.into_iter().map(from_wire).collect();
                Ok((outcomes, committed.metadata_version))
            }
            _ => Err(NotCommitted::NotController(None)),
        }
    }

    fn next_id(&self) -> u64 {
        let id = self.next_rpc.get();
        self.next_rpc.set(id + 1);
        id
    }

    /// One request to a peer and its reply (`None`: no reply in time).
    async fn call(&self, to: NodeId, id: u64, request: Frame, timeout: Duration) -> Option<Frame> {
        let peer_known = self.peers.borrow().contains_key(&to);
        if !peer_known {
            let addr = self.config.voters.get(&to).copied().or_else(|| {
                let metadata = self.applied.borrow();
                let listener = metadata.brokers.get(&to)?.cluster_listener.clone()?;
                listener.parse().ok()
            })?;
            let peer = Peer::spawn(self.me, to, addr, self.this.clone());
            self.peers.borrow_mut().insert(to, peer);
        }
        let (tx, rx) = oneshot::channel();
        self.rpcs.borrow_mut().insert(id, tx);
        let sent = self
            .peers
            .borrow()
            .get(&to)
            .is_some_and(|p| p.send(self.me, &request));
        // A request to the active controller is given up as soon as another one is known: a
        // dead controller's requests would otherwise hold their callers for the whole timeout.
        let to_leader = self.leader.get() == Some(to);
        let reply = if sent {
            let answered = async {
                glommio::timer::timeout(timeout, async { Ok(rx.await.ok()) })
                    .await
                    .ok()
                    .flatten()
            };
            let deposed = async {
                loop {
                    glommio::timer::sleep(Duration::from_millis(20)).await;
                    if to_leader && self.leader.get() != Some(to) {
                        return None;
                    }
                }
            };
            futures_lite::future::or(answered, deposed).await
        } else {
            None
        };
        self.rpcs.borrow_mut().remove(&id);
        reply
    }

    // ---- As the active controller ----

    async fn serve_propose(&self, from: NodeId, id: u64, commands: Vec<Command>) -> ProposeReply {
        let result = if self.leader.get() != Some(self.me) {
            Err(NotCommitted::NotController(self.leader.get()))
        } else {
            self.propose_local(commands)
                .await
                .map(|(outcomes, version)| Committed {
                    outcomes: outcomes.iter().map(to_wire).collect(),
                    metadata_version: version,
                    metadata: (!self.voters.contains(&from)).then(|| self.metadata_bytes()),
                })
        };
        ProposeReply { id, result }
    }

    fn metadata_bytes(&self) -> Bytes {
        Bytes::from(model::snapshot::encode(&self.applied.borrow()))
    }

    /// A decision of the active controller's own (fencing, registering): `make` turns the
    /// latest metadata into commands, which are committed before the next decision is made, so
    /// each sees what the one before it did. True once committed (or when nothing was to do).
    async fn decide(&self, make: impl FnOnce(&ClusterMetadata) -> Vec<Command>) -> bool {
        let _turn = self.decisions.acquire_permit(1).await;
        let commands = make(&self.applied.borrow());
        if commands.is_empty() {
            return true;
        }
        match self.propose_local(commands).await {
            Ok((outcomes, _)) => {
                for refused in outcomes.iter().filter_map(|o| o.as_ref().err()) {
                    tracing::warn!(reason = %refused.message, "a controller decision was refused");
                }
                true
            }
            Err(_) => false,
        }
    }

    async fn serve_heartbeat(&self, h: Heartbeat) -> HeartbeatReply {
        let mut reply = HeartbeatReply {
            id: h.id,
            controller: self.leader.get(),
            ..HeartbeatReply::default()
        };
        if self.leader.get() != Some(self.me) {
            return reply;
        }
        let node = h.registration.id;
        let now_ms = self.now_ms();
        let metadata = self.applied.borrow().clone();
        if h.shutting_down {
            self.sessions
                .borrow_mut()
                .shutting_down(node, h.incarnation, now_ms);
            let done = self.decide(|m| brokers::fence_commands(m, node)).await;
            reply.accepted = done;
            reply.fenced = done;
            return reply;
        }
        let heard = self
            .sessions
            .borrow_mut()
            .heartbeat(&metadata, node, h.incarnation, now_ms);
        match heard {
            Heard::Alive => reply.accepted = true,
            Heard::ShuttingDown => {
                reply.accepted = true;
                reply.fenced = true;
            }
            Heard::Duplicate { running } => {
                tracing::warn!(%node, running, incarnation = h.incarnation, "a second process registers as a live node; refused until the first one's session ends");
            }
            Heard::Rejoin => {
                tracing::info!(%node, "a broker registers");
                let registration = h.registration.clone();
                reply.accepted = self
                    .decide(|m| brokers::register_commands(m, registration))
                    .await;
            }
        }
        reply.metadata_version = self.applied.borrow().version;
        if !self.voters.contains(&node) && h.metadata_version < reply.metadata_version {
            reply.metadata = Some(self.metadata_bytes());
        }
        reply
    }

    async fn tick_loop(self: Rc<Self>) {
        loop {
            glommio::timer::sleep(TICK).await;
            if self.fatal.borrow().is_some() {
                return;
            }
            if let Err(e) = self.step(Event::Tick) {
                tracing::error!(error = %e, "ticking the controller quorum");
            }
            if self.leader.get() == Some(self.me) {
                let metadata = self.applied.borrow().clone();
                let expired = self.sessions.borrow_mut().expired(&metadata, self.now_ms());
                // The active controller is evidently alive, whatever its own session says.
                for node in expired.into_iter().filter(|n| *n != self.me) {
                    if self.fencing.borrow_mut().insert(node) {
                        let this = self.clone();
                        glommio::spawn_local(async move {
                            tracing::info!(%node, "fencing a broker: its session expired");
                            this.decide(|m| brokers::fence_commands(m, node)).await;
                            this.fencing.borrow_mut().remove(&node);
                        })
                        .detach();
                    }
                }
            }
        }
    }

    // ---- As a broker ----

    async fn heartbeat(&self, shutting_down: bool, turn: &mut usize) -> Option<HeartbeatReply> {
        let id = self.next_id();
        let h = Heartbeat {
            id,
            incarnation: self.incarnation,
            registration: self.registration(),
            metadata_version: self.applied.borrow().version,
            shutting_down,
        };
        let target = self.leader.get().unwrap_or_else(|| {
            *turn += 1;
            self.voters[*turn % self.voters.len()]
        });
        let reply = if target == self.me {
            Some(self.serve_heartbeat(h).await)
        } else {
            // No longer than an interval: a dead controller must not cost a whole session.
            let timeout = Duration::from_millis(self.config.heartbeat_interval_ms);
            match self.call(target, id, Frame::Heartbeat(h), timeout).await {
                Some(Frame::HeartbeatReply(r)) => Some(r),
                _ => None,
            }
        };
        if let Some(r) = &reply {
            if !self.is_voter() && (r.controller.is_some() || !r.accepted) {
                self.set_leader(r.controller);
            }
            if let Some(m) = &r.metadata {
                self.adopt(m);
            }
            if let Some(why) = &r.refused {
                self.stop_with(why.clone());
            }
        } else if !self.is_voter() {
            self.set_leader(None);
        }
        reply
    }

    async fn heartbeat_loop(self: Rc<Self>) {
        let mut turn = 0usize;
        let interval = Duration::from_millis(self.config.heartbeat_interval_ms);
        loop {
            if self.fatal.borrow().is_some() || self.shutting_down.get() {
                return;
            }
            let reply = self.heartbeat(false, &mut turn).await;
            tracing::trace!(?reply, "heartbeat");
            let accepted = reply.filter(|r| r.accepted);
            if let Some(r) = &accepted
                && self.registered_at.get().is_none()
            {
                self.registered_at.set(Some(r.metadata_version));
            }
            let pause = if accepted.is_some() {
                interval
            } else {
                Duration::from_millis(100)
            };
            glommio::timer::sleep(pause).await;
        }
    }

    /// A controlled shutdown: asks the active controller to move this node's leaderships and
    /// fence it, and waits (a while) until it has.
    pub async fn shut_down(&self) {
        self.shutting_down.set(true);
        let deadline = Instant::now() + SHUTDOWN_TIMEOUT;
        let mut turn = 0usize;
        while Instant::now() < deadline {
            if let Some(r) = self.heartbeat(true, &mut turn).await
                && r.fenced
            {
                tracing::info!("controlled shutdown: fenced, leaderships moved");
                return;
            }
            glommio::timer::sleep(Duration::from_millis(100)).await;
        }
        tracing::warn!("controlled shutdown: the controller did not confirm in time");
    }
}

impl link::Handler for Cluster {
    fn hello(&self) -> Frame {
        Frame::Hello {
            node: self.me,
            incarnation: self.incarnation,
            voters: self.config.voters_spelled(),
        }
    }

    fn check_hello(&self, node: NodeId, incarnation: u64, voters: &str) -> Option<String> {
        preflight::check(
            self.me,
            &self.config.voters_spelled(),
            node,
            incarnation,
            voters,
            self.inbound.borrow().get(&node).copied(),
            self.incarnation,
        )
    }

    fn connected(&self, node: NodeId, incarnation: u64, open: bool) {
        let mut inbound = self.inbound.borrow_mut();
        let entry = inbound.entry(node).or_insert((incarnation, 0));
        if open {
            *entry = (
                incarnation,
                if entry.0 == incarnation {
                    entry.1 + 1
                } else {
                    1
                },
            );
        } else if entry.0 == incarnation {
            entry.1 = entry.1.saturating_sub(1);
            if entry.1 == 0 {
                inbound.remove(&node);
            }
        }
    }

    fn refused(&self, by: NodeId, why: String) {
        self.stop_with(format!("node {by} refused this node: {why}"));
    }

    fn request(self: Rc<Self>, from: NodeId, frame: Frame, reply: Replier) {
        match frame {
            Frame::Raft(bytes) => {
                if let Err(e) = self.step(Event::Frame(bytes)) {
                    tracing::debug!(%from, error = %e, "a Raft frame refused");
                }
            }
            Frame::Heartbeat(h) => {
                glommio::spawn_local(async move {
                    let r = self.serve_heartbeat(h).await;
                    reply.send(&Frame::HeartbeatReply(r));
                })
                .detach();
            }
            Frame::Propose { id, commands } => {
                glommio::spawn_local(async move {
                    let r = self.serve_propose(from, id, commands).await;
                    reply.send(&Frame::ProposeReply(r));
                })
                .detach();
            }
            Frame::Metadata(snapshot) => self.adopt(&snapshot),
            other => tracing::debug!(%from, frame = ?other, "an unexpected request"),
        }
    }

    fn reply(&self, _from: NodeId, frame: Frame) {
        let id = match &frame {
            Frame::HeartbeatReply(r) => r.id,
            Frame::ProposeReply(r) => r.id,
            _ => return,
        };
        if let Some(waiter) = self.rpcs.borrow_mut().remove(&id) {
            let _ = waiter.send(frame);
        }
    }
}

/// Tells every shard who the active controller is (for Metadata and DescribeCluster).
async fn tell_controller(shard: Rc<Shard>, leader: Option<NodeId>) {
    for target in 0..shard.count {
        let _ = shard
            .mesh()
            .run_on(target, &shard, move |s: Rc<Shard>| async move {
                s.set_controller(leader);
            })
            .await;
    }
}

/// Seeds that differ between processes (election timeouts, incarnations): the simulator seeds
/// the quorum itself; only the real host draws from the OS.
fn rand_seed() -> u64 {
    uuid::Uuid::new_v4().as_u64_pair().0
}
