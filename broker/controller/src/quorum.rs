//! `Quorum`: one voter of the controller quorum, a closed loop of events in and actions out
//! around raft-rs's `RawNode`. The crate docs say what the host does with each action.

use std::collections::VecDeque;

use bytes::Bytes;
use model::NodeId;
use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};
use raft::{RawNode, SnapshotStatus, StateRole};
use rand_chacha::ChaCha8Rng;
use rand_chacha::rand_core::{RngCore, SeedableRng};

use crate::error::QuorumError;
use crate::log_store::LogStore;
use crate::types::{
    Durable, HardState, LogEntry, LogIndex, PersistId, Role, SnapshotImage, Term, node_id, raft_id,
};
use crate::wire;

/// How a voter is set up. [`Config::new`] fills in the defaults.
#[derive(Debug, Clone)]
pub struct Config {
    /// This voter.
    pub node: NodeId,
    /// Every voter of the quorum, this one included (the same list on every voter).
    pub voters: Vec<NodeId>,
    /// The cluster's id: frames of another cluster are refused.
    pub cluster_id: String,
    /// A follower that hears no leader for this many ticks (randomized up to twice as many)
    /// starts an election.
    pub election_ticks: usize,
    /// The leader sends heartbeats every this many ticks.
    pub heartbeat_ticks: usize,
    /// The host is asked for a snapshot every this many applied entries; the entries it covers
    /// are then dropped from memory (and may be dropped from the host's log file).
    pub snapshot_every_entries: u64,
    /// Seeds the randomized election timeouts (raft-rs would read the thread's RNG).
    pub seed: u64,
    /// The largest proposal accepted.
    pub proposal_bytes_max: usize,
    /// The largest frame accepted from a peer (the host's socket limit should be the same).
    pub frame_bytes_max: usize,
    /// Entries per append message are limited to about this many bytes.
    pub message_bytes_max: u64,
    /// The leader refuses proposals while this many bytes are appended but not committed.
    pub uncommitted_bytes_max: u64,
}

impl Config {
    pub fn new(node: NodeId, voters: Vec<NodeId>, cluster_id: impl Into<String>) -> Config {
        Config {
            node,
            voters,
            cluster_id: cluster_id.into(),
            election_ticks: 10,
            heartbeat_ticks: 2,
            snapshot_every_entries: 1024,
            seed: 0,
            proposal_bytes_max: 1 << 20,
            frame_bytes_max: 16 << 20,
            message_bytes_max: 1 << 20,
            uncommitted_bytes_max: 16 << 20,
        }
    }
}

/// Everything that can happen to a voter.
#[derive(Debug, Clone)]
pub enum Event {
    /// One tick of time passed (the host's tick interval, e.g. 100 ms).
    Tick,
    /// A frame arrived from a peer (untrusted bytes).
    Frame(Bytes),
    /// Append this encoded command to the log (only the leader accepts proposals).
    Propose(Bytes),
    /// Every persist up to and including this one is durable on the host's disk.
    Persisted(PersistId),
    /// The host's answer to [`Action::TakeSnapshot`]: its state machine at `index`.
    SnapshotTaken { index: LogIndex, data: Bytes },
}

/// What the host must do, in the order given (see the crate docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send this frame to that peer (best effort: a lost frame is retried by Raft itself).
    Send { to: NodeId, frame: Vec<u8> },
    /// Write this to disk, then report [`Event::Persisted`] with its id.
    Persist(Persist),
    /// Replace the state machine with this snapshot (received from the leader).
    Restore(SnapshotImage),
    /// Apply this committed entry to the state machine (empty data: apply nothing).
    Apply(LogEntry),
    /// Snapshot the state machine as it is now, at `index`, and report [`Event::SnapshotTaken`].
    TakeSnapshot { index: LogIndex },
    /// Write this snapshot to disk; once it is durable, the log up to its index may be dropped.
    SaveSnapshot(SnapshotImage),
    /// The leader this voter knows of changed (`None`: no leader known in this term).
    LeaderChanged { leader: Option<NodeId>, term: Term },
    /// A proposal was appended at `index` in `term`: it took effect if an entry with that index
    /// and term is applied; another term at that index means it was lost.
    Proposed { index: LogIndex, term: Term },
}

/// One write to the voter's disk. Applied in this order: the snapshot (it replaces the whole
/// log), then the entries (the log is cut before the first one's index, then they are appended),
/// then the hard state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Persist {
    pub id: PersistId,
    pub snapshot: Option<SnapshotImage>,
    pub entries: Vec<LogEntry>,
    pub hard_state: Option<HardState>,
    /// False when only the commit index changed: the write need not be synced before it is
    /// reported done (losing it loses nothing Raft relies on).
    pub sync: bool,
}

/// A voter's state, for the host's status reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    pub role: Role,
    pub term: Term,
    pub leader: Option<NodeId>,
    pub commit: LogIndex,
    pub applied: LogIndex,
    pub first_index: LogIndex,
    pub last_index: LogIndex,
}

/// A persist asked for and not yet reported done, with the messages that may be sent only once
/// it is (votes and append answers: Raft's safety rests on them never outrunning the disk).
#[derive(Debug)]
struct Pending {
    id: PersistId,
    /// The last ready number this persist covers (readies with nothing to write join the
    /// pending persist before them).
    last_ready: u64,
    messages: Vec<Message>,
    /// The index of the snapshot this persist installs, if it does.
    snapshot: Option<u64>,
}

/// Which reset of raft's election timeout was last seen (raft-rs draws a new one from the
/// thread's RNG at every change of term, role or leader; we replace it from our seed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct TimeoutSeen {
    term: u64,
    role: StateRole,
    leader: u64,
    timeout: usize,
}

/// One voter of the controller quorum. Never does IO: see the crate docs for the host's part.
pub struct Quorum {
    raw: RawNode<LogStore>,
    config: Config,
    voter_ids: Vec<u64>,
    rng: ChaCha8Rng,
    timeout_seen: TimeoutSeen,
    pending: VecDeque<Pending>,
    persist_issued: Option<PersistId>,
    applied: LogIndex,
    snapshot_asked: Option<LogIndex>,
    leader_seen: (Option<NodeId>, Term),
    /// Why raft-rs stopped, if it did (see `step`): the voter refuses every event after.
    stopped: Option<String>,
}

impl std::fmt::Debug for Quorum {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quorum")
            .field("node", &self.config.node)
            .field("status", &self.status())
            .finish()
    }
}

impl Quorum {
    /// Starts a voter from what its host read back from disk (`Durable::default()` when new).
    /// Refuses bad ids and a persisted state that does not hold together, changing nothing.
    /// The host starts its state machine from `durable.snapshot` (empty without one); the
    /// entries after it are applied again through [`Action::Apply`].
    pub fn new(config: Config, durable: Durable) -> Result<Quorum, QuorumError> {
        let me = raft_id(config.node)?;
        let mut voter_ids = Vec::with_capacity(config.voters.len());
        for &v in &config.voters {
            let id = raft_id(v)?;
            if voter_ids.contains(&id) {
                return Err(QuorumError::DuplicateVoter(v));
            }
            voter_ids.push(id);
        }
        if !voter_ids.contains(&me) {
            return Err(QuorumError::NotAVoter {
                node: config.node,
                voters: config.voters.clone(),
            });
        }
        voter_ids.sort_unstable();
        check_durable(&durable, &voter_ids)?;

        let conf_state = ConfState {
            voters: voter_ids.clone(),
            ..Default::default()
        };
        let snapshot = durable
            .snapshot
            .as_ref()
            .map(|s| to_raft_snapshot(s, &voter_ids))
            .unwrap_or_default();
        let applied = snapshot.get_metadata().index;
        let hard_state = raft::eraftpb::HardState {
            term: durable.hard_state.term.0,
            vote: durable.hard_state.vote.map_or(Ok(0), raft_id)?,
            commit: durable.hard_state.commit.0.max(applied),
            ..Default::default()
        };
        let entries = durable.entries.iter().map(to_raft_entry).collect();
        let store = LogStore::new(hard_state, conf_state, snapshot, entries);

        let raft_config = raft::Config {
            id: me,
            election_tick: config.election_ticks,
            heartbeat_tick: config.heartbeat_ticks,
            applied,
            max_size_per_msg: config.message_bytes_max,
            max_inflight_msgs: 64,
            check_quorum: true,
            pre_vote: true,
            max_uncommitted_size: config.uncommitted_bytes_max,
            ..Default::default()
        };
        let raw = RawNode::new(&raft_config, store, &crate::logger::logger())?;
        let mut quorum = Quorum {
            raw,
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            config,
            voter_ids,
            timeout_seen: TimeoutSeen {
                term: 0,
                role: StateRole::Follower,
                leader: 0,
                timeout: 0,
            },
            pending: VecDeque::new(),
            persist_issued: None,
            applied: LogIndex(applied),
            snapshot_asked: None,
            leader_seen: (None, Term(0)),
            stopped: None,
        };
        quorum.seed_election_timeout();
        Ok(quorum)
    }

    /// The first actions of a started voter. A quorum of one elects itself at once (it needs
    /// nobody's vote, so waiting out an election timeout would only delay the first commit).
    pub fn start(&mut self) -> Result<Vec<Action>, QuorumError> {
        if self.voter_ids.len() == 1 {
            self.raw.campaign()?;
        }
        let mut actions = Vec::new();
        self.drain_ready(&mut actions);
        Ok(actions)
    }

    /// Feeds one event; returns what the host must do, in order. An event that is refused
    /// (an `Err`) changed nothing.
    ///
    /// raft-rs trusts its peers and its disk: a message that contradicts what this voter
    /// acknowledged (only a peer or a disk breaking Raft's rules sends one) makes it panic. That
    /// panic is caught here and stops this voter for good ([`QuorumError::Stopped`]), so the
    /// host can report it and restart from disk instead of losing the process.
    pub fn step(&mut self, event: Event) -> Result<Vec<Action>, QuorumError> {
        if let Some(why) = &self.stopped {
            return Err(QuorumError::Stopped(why.clone()));
        }
        let outcome =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.step_inner(event)));
        outcome.unwrap_or_else(|panic| {
            let why = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "raft-rs panicked".to_owned());
            tracing::error!(node = %self.config.node, "the controller quorum stopped: {why}");
            self.stopped = Some(why.clone());
            Err(QuorumError::Stopped(why))
        })
    }

    fn step_inner(&mut self, event: Event) -> Result<Vec<Action>, QuorumError> {
        let mut actions = Vec::new();
        match event {
            Event::Tick => {
                self.raw.tick();
            }
            Event::Frame(bytes) => {
                let decoded = wire::decode(
                    &bytes,
                    &self.config.cluster_id,
                    self.config.node,
                    &self.voter_ids,
                    self.config.frame_bytes_max,
                )?;
                if decoded.message.has_snapshot() {
                    let mut theirs = decoded
                        .message
                        .get_snapshot()
                        .get_metadata()
                        .get_conf_state()
                        .voters
                        .clone();
                    theirs.sort_unstable();
                    if theirs != self.voter_ids {
                        return Err(QuorumError::VotersDisagree {
                            from: decoded.from,
                            theirs,
                        });
                    }
                }
                self.raw.step(decoded.message)?;
            }
            Event::Propose(data) => {
                let (index, term) = self.propose(data)?;
                actions.push(Action::Proposed { index, term });
            }
            Event::Persisted(id) => self.on_persisted(id, &mut actions)?,
            Event::SnapshotTaken { index, data } => {
                self.on_snapshot_taken(index, data, &mut actions)?
            }
        }
        self.seed_election_timeout();
        self.drain_ready(&mut actions);
        Ok(actions)
    }

    pub fn status(&self) -> Status {
        let raft = &self.raw.raft;
        let store = self.raw.store();
        Status {
            role: match raft.state {
                StateRole::Follower => Role::Follower,
                StateRole::PreCandidate => Role::PreCandidate,
                StateRole::Candidate => Role::Candidate,
                StateRole::Leader => Role::Leader,
            },
            term: Term(raft.term),
            leader: node_id(raft.leader_id),
            commit: LogIndex(raft.raft_log.committed),
            applied: self.applied,
            first_index: LogIndex(store.first()),
            last_index: LogIndex(raft.raft_log.last_index()),
        }
    }

    pub fn node(&self) -> NodeId {
        self.config.node
    }

    /// How far each voter's log is known to match this one's: the leader knows every voter's;
    /// any other voter knows only its own (the others are `None`).
    pub fn voters_progress(&self) -> Vec<(NodeId, Option<LogIndex>)> {
        let raft = &self.raw.raft;
        let leading = raft.state == StateRole::Leader;
        self.voter_ids
            .iter()
            .filter_map(|&id| {
                let node = node_id(id)?;
                let matched = if id == raft.id {
                    Some(LogIndex(raft.raft_log.last_index()))
                } else if leading {
                    raft.prs().get(id).map(|p| LogIndex(p.matched))
                } else {
                    None
                };
                Some((node, matched))
            })
            .collect()
    }

    fn propose(&mut self, data: Bytes) -> Result<(LogIndex, Term), QuorumError> {
        if data.is_empty() {
            return Err(QuorumError::EmptyProposal);
        }
        if data.len() > self.config.proposal_bytes_max {
            return Err(QuorumError::ProposalTooLarge {
                bytes: data.len(),
                max: self.config.proposal_bytes_max,
            });
        }
        // A follower refuses proposals instead of letting raft forward them: the host forwards
        // commands to the leader itself, and learns their fate from `Proposed`.
        if self.raw.raft.state != StateRole::Leader {
            return Err(QuorumError::NotLeader {
                leader: node_id(self.raw.raft.leader_id),
            });
        }
        self.raw
            .propose(Vec::new(), data.to_vec())
            .map_err(|e| match e {
                raft::Error::ProposalDropped => QuorumError::ProposalDropped,
                other => QuorumError::Raft(other),
            })?;
        Ok((
            LogIndex(self.raw.raft.raft_log.last_index()),
            Term(self.raw.raft.term),
        ))
    }

    fn on_persisted(
        &mut self,
        id: PersistId,
        actions: &mut Vec<Action>,
    ) -> Result<(), QuorumError> {
        if self.persist_issued.is_none_or(|issued| id > issued) {
            return Err(QuorumError::UnknownPersist {
                reported: id,
                issued: self.persist_issued,
            });
        }
        let mut last_ready = None;
        let mut snapshot = None;
        let mut messages = Vec::new();
        while self.pending.front().is_some_and(|p| p.id <= id) {
            let Some(done) = self.pending.pop_front() else {
                break;
            };
            last_ready = Some(done.last_ready);
            snapshot = done.snapshot.or(snapshot);
            messages.extend(done.messages);
        }
        if let Some(number) = last_ready {
            self.raw.on_persist_ready(number);
        }
        // Once a restored snapshot is durable raft-rs must count it applied: the log now
        // starts after it, and an election reads the entries from the applied index on.
        if let Some(index) = snapshot
            && index > self.raw.raft.raft_log.applied
        {
            self.raw.advance_apply_to(index);
        }
        for m in messages {
            self.send(m, actions);
        }
        Ok(())
    }

    fn on_snapshot_taken(
        &mut self,
        index: LogIndex,
        data: Bytes,
        actions: &mut Vec<Action>,
    ) -> Result<(), QuorumError> {
        let store = self.raw.store();
        let current = LogIndex(store.latest_snapshot().get_metadata().index);
        if self.snapshot_asked != Some(index) {
            return Err(QuorumError::UnexpectedSnapshot {
                index,
                applied: self.applied,
                snapshot: current,
            });
        }
        self.snapshot_asked = None;
        // A snapshot from the leader overtook this one: it is already covered.
        if index <= current {
            return Ok(());
        }
        let Some(term) = store.term_of(index.0) else {
            return Err(QuorumError::UnexpectedSnapshot {
                index,
                applied: self.applied,
                snapshot: current,
            });
        };
        let image = SnapshotImage {
            index,
            term: Term(term),
            voters: self.config.voters.clone(),
            data,
        };
        let snapshot = to_raft_snapshot(&image, &self.voter_ids);
        self.raw.mut_store().compact(snapshot);
        actions.push(Action::SaveSnapshot(image));
        Ok(())
    }

    /// Hands out everything raft has ready: leader changes, messages, persists, applies.
    fn drain_ready(&mut self, actions: &mut Vec<Action>) {
        while self.raw.has_ready() {
            let mut rd = self.raw.ready();
            if rd.ss().is_some() {
                let seen = (node_id(self.raw.raft.leader_id), Term(self.raw.raft.term));
                if seen != self.leader_seen {
                    self.leader_seen = seen;
                    actions.push(Action::LeaderChanged {
                        leader: seen.0,
                        term: seen.1,
                    });
                }
            }
            // A leader's messages go out at once, in parallel with its own write (Raft thesis
            // 10.2.1): its entries count towards a commit only once its own persist is reported.
            let mut snapshots_sent = Vec::new();
            for m in rd.take_messages() {
                if m.get_msg_type() == MessageType::MsgSnapshot {
                    snapshots_sent.push(m.to);
                }
                self.send(m, actions);
            }

            let snapshot = (!rd.snapshot().is_empty()).then(|| rd.snapshot().clone());
            let snapshot_image = snapshot.map(|s| {
                let image = from_raft_snapshot(&s, &self.config.voters);
                self.raw.mut_store().install(s);
                image
            });
            if let Some(image) = &snapshot_image {
                actions.push(Action::Restore(image.clone()));
                self.applied = image.index;
            }
            let entries = rd.take_entries();
            self.raw.mut_store().append(&entries);
            let hard_state = rd.hs().cloned();
            if let Some(hs) = &hard_state {
                self.raw.mut_store().set_hard_state(hs.clone());
            }

            let number = rd.number();
            let held = rd.take_persisted_messages();
            let committed = rd.take_committed_entries();
            let mut done_now = None;
            if snapshot_image.is_some() || !entries.is_empty() || hard_state.is_some() {
                let id = PersistId(number);
                let snapshot = snapshot_image.as_ref().map(|s| s.index.0);
                actions.push(Action::Persist(Persist {
                    id,
                    snapshot: snapshot_image,
                    entries: entries.iter().map(from_raft_entry).collect(),
                    hard_state: hard_state.as_ref().map(from_raft_hard_state),
                    sync: rd.must_sync(),
                }));
                self.persist_issued = Some(id);
                self.pending.push_back(Pending {
                    id,
                    last_ready: number,
                    messages: held,
                    snapshot,
                });
            } else if let Some(back) = self.pending.back_mut() {
                back.last_ready = number;
                back.messages.extend(held);
            } else {
                done_now = Some(held);
            }
            self.raw.advance_append_async(rd);
            if let Some(held) = done_now {
                self.raw.on_persist_ready(number);
                for m in held {
                    self.send(m, actions);
                }
            }
            for to in snapshots_sent {
                // Handed to the transport is all the host can tell; if the frame is lost the
                // follower's next answer sends the leader back to probing, and it tries again.
                self.raw.report_snapshot(to, SnapshotStatus::Finish);
            }
            if let Some(last) = committed.last().map(|e| e.index) {
                for e in committed {
                    self.apply(e, actions);
                }
                self.raw.advance_apply_to(last);
            }
        }
    }

    fn apply(&mut self, entry: Entry, actions: &mut Vec<Action>) {
        assert_eq!(
            entry.index,
            self.applied.0 + 1,
            "committed entries are applied in order, with no gap"
        );
        self.applied = LogIndex(entry.index);
        // Only normal entries exist: membership never changes, and neither the wire nor the
        // host's disk can carry another kind (see wire.rs and `Quorum::new`).
        debug_assert_eq!(entry.get_entry_type(), EntryType::EntryNormal);
        actions.push(Action::Apply(from_raft_entry(&entry)));
        let snapshot_index = self.raw.store().latest_snapshot().get_metadata().index;
        if self.snapshot_asked.is_none()
            && entry.index - snapshot_index >= self.config.snapshot_every_entries
        {
            self.snapshot_asked = Some(self.applied);
            actions.push(Action::TakeSnapshot {
                index: self.applied,
            });
        }
    }

    fn send(&self, m: Message, actions: &mut Vec<Action>) {
        let Some(to) = node_id(m.to) else { return };
        match wire::encode(&self.config.cluster_id, self.config.node, to, &m) {
            Ok(frame) => actions.push(Action::Send { to, frame }),
            // Nothing raft sends should fail to encode; if it does, dropping it is safe (Raft
            // retries lost messages) and the log says why.
            Err(e) => {
                tracing::error!(to = %to, error = %e, "a raft message could not be encoded; dropped")
            }
        }
    }

    /// Replaces raft-rs's thread-RNG election timeout with one drawn from our seed whenever
    /// raft reset it, so that a run is a function of its inputs (the simulator replays seeds).
    fn seed_election_timeout(&mut self) {
        let raft = &mut self.raw.raft;
        let now = TimeoutSeen {
            term: raft.term,
            role: raft.state,
            leader: raft.leader_id,
            timeout: raft.randomized_election_timeout(),
        };
        if now != self.timeout_seen {
            let min = self.config.election_ticks;
            let spread = u64::try_from(min).unwrap_or(u64::MAX).max(1);
            let timeout = min + usize::try_from(self.rng.next_u64() % spread).unwrap_or(0);
            raft.set_randomized_election_timeout(timeout);
            self.timeout_seen = TimeoutSeen { timeout, ..now };
        }
    }
}

/// Checks what the host read from disk before raft-rs sees it (raft-rs panics on a state that
/// does not hold together).
fn check_durable(durable: &Durable, voters: &[u64]) -> Result<(), QuorumError> {
    let corrupt = |what: String| Err(QuorumError::CorruptDurable(what));
    let (snap_index, snap_term) = match &durable.snapshot {
        Some(s) => {
            let mut theirs = s
                .voters
                .iter()
                .map(|&v| raft_id(v))
                .collect::<Result<Vec<_>, _>>()?;
            theirs.sort_unstable();
            if theirs != voters {
                return Err(QuorumError::CorruptDurable(format!(
                    "the snapshot was taken with voters {:?}, this quorum is configured with {voters:?}",
                    s.voters
                )));
            }
            (s.index, s.term)
        }
        None => (LogIndex(0), Term(0)),
    };
    let mut expect = snap_index.0 + 1;
    let mut term = snap_term;
    for e in &durable.entries {
        if e.index.0 != expect {
            return corrupt(format!(
                "entry {} where entry {expect} was expected",
                e.index
            ));
        }
        if e.term < term {
            return corrupt(format!(
                "entry {} has term {} after term {term}",
                e.index, e.term
            ));
        }
        expect += 1;
        term = e.term;
    }
    let hs = &durable.hard_state;
    if hs.term < term {
        return corrupt(format!(
            "the hard state's term {} is below the log's last term {term}",
            hs.term
        ));
    }
    if hs.commit.0 > expect - 1 {
        return corrupt(format!(
            "the commit index {} is beyond the log's end {}",
            hs.commit,
            expect - 1
        ));
    }
    if let Some(vote) = hs.vote
        && !voters.contains(&raft_id(vote)?)
    {
        return corrupt(format!("the vote went to {vote}, who is not a voter"));
    }
    Ok(())
}

fn to_raft_entry(e: &LogEntry) -> Entry {
    Entry {
        index: e.index.0,
        term: e.term.0,
        data: e.data.clone(),
        ..Default::default()
    }
}

fn from_raft_entry(e: &Entry) -> LogEntry {
    LogEntry {
        index: LogIndex(e.index),
        term: Term(e.term),
        data: e.data.clone(),
    }
}

fn from_raft_hard_state(hs: &raft::eraftpb::HardState) -> HardState {
    HardState {
        term: Term(hs.term),
        vote: node_id(hs.vote),
        commit: LogIndex(hs.commit),
    }
}

fn to_raft_snapshot(s: &SnapshotImage, voters: &[u64]) -> Snapshot {
    let mut snapshot = Snapshot {
        data: s.data.clone(),
        ..Default::default()
    };
    let meta = snapshot.mut_metadata();
    meta.index = s.index.0;
    meta.term = s.term.0;
    meta.set_conf_state(ConfState {
        voters: voters.to_vec(),
        ..Default::default()
    });
    snapshot
}

fn from_raft_snapshot(s: &Snapshot, voters: &[NodeId]) -> SnapshotImage {
    let meta = s.get_metadata();
    SnapshotImage {
        index: LogIndex(meta.index),
        term: Term(meta.term),
        voters: voters.to_vec(),
        data: s.data.clone(),
    }
}
