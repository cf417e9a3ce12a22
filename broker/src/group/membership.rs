//! One classic group: its members, its state machine and timers, and its committed offsets.
//!
//! The rules are Kafka's (the classic group of `GroupMetadataManager` and `ClassicGroup` in
//! Kafka 3.x/4.0's group coordinator):
//! - Empty -> PreparingRebalance when a member joins; the first rebalance of an empty group waits
//!   `group.initial.rebalance.delay.ms`, extended while new members keep arriving, up to the
//!   rebalance timeout.
//! - PreparingRebalance -> CompletingRebalance once every member has rejoined (or the rebalance
//!   timeout passed: dynamic members that did not rejoin are dropped). The generation goes up, a
//!   protocol every member supports is chosen by vote, and every waiting JoinGroup is answered
//!   (the leader's with all members' metadata).
//! - CompletingRebalance -> Stable when the leader's SyncGroup brings the assignment, which is
//!   passed to each member untouched. Members that never sync within the rebalance timeout are
//!   dropped and the group rebalances.
//! - Any member joining with changed metadata, the leader rejoining, a member leaving or its
//!   session expiring sends the group back to PreparingRebalance; with no member left, the next
//!   generation is Empty.
//! - Static members (`group.instance.id`) keep their place across restarts: a known instance id
//!   joining again takes over its old member (which is fenced) and, when the group is Stable and
//!   the chosen protocol stays the same, gets its old assignment without a rebalance.
//!
//! Members waiting in JoinGroup or SyncGroup hold a one-slot channel that the state machine
//! answers when the phase completes; every timer belongs to the member or group it times, so it
//! is cancelled with it.

use std::collections::{HashMap, HashSet};
use std::rc::Weak;
use std::time::Duration;

use bytes::Bytes;
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use net::kafka_protocol::indexmap::IndexMap;

use super::call::{
    DescribedGroup, DescribedMember, GroupState, HeartbeatCall, JoinCall, JoinOutcome, JoinRefused,
    Joined, JoinedMember, LeaveCall, LeftMember, ListedGroup, Protocol, SyncCall, SyncOutcome,
    Synced,
};
use super::consumer_protocol::{self, CONSUMER_PROTOCOL_TYPE};
use super::coordinator::Coordinator;
use super::offsets::{ExpiryBase, Offsets};
use super::timer::Timer;
use super::{GroupConfig, ResponseError};

/// What a timer reports when it fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Expiry {
    /// A member's session timed out (or a new member's first JoinGroup waited too long).
    Session { group: String, member: String },
    /// A member id handed out with MEMBER_ID_REQUIRED was not used within the session timeout.
    PendingMember { group: String, member: String },
    /// The rebalance timeout of a join phase.
    Join { group: String },
    /// The initial rebalance delay of a group that was empty.
    InitialDelay {
        group: String,
        delay_ms: u64,
        remaining_ms: u64,
    },
    /// The rebalance timeout for the SyncGroups of a generation.
    Sync { group: String, generation_id: i32 },
}

impl Expiry {
    pub fn group(&self) -> &str {
        match self {
            Expiry::Session { group, .. }
            | Expiry::PendingMember { group, .. }
            | Expiry::Join { group }
            | Expiry::InitialDelay { group, .. }
            | Expiry::Sync { group, .. } => group,
        }
    }
}

/// Starts timers that report to the coordinator (if it is still there when they fire).
#[derive(Debug, Clone)]
pub(super) struct Scheduler {
    coordinator: Weak<Coordinator>,
}

impl Scheduler {
    pub fn new(coordinator: Weak<Coordinator>) -> Scheduler {
        Scheduler { coordinator }
    }

    fn start(&self, delay_ms: u64, expiry: Expiry) -> Timer {
        let coordinator = self.coordinator.clone();
        Timer::after(Duration::from_millis(delay_ms), move || {
            if let Some(coordinator) = coordinator.upgrade() {
                coordinator.expire(expiry);
            }
        })
    }
}

/// What group operations need from their coordinator.
#[derive(Debug)]
pub(super) struct Ctx<'a> {
    pub config: &'a GroupConfig,
    pub timers: &'a Scheduler,
    pub now_ms: i64,
}

/// An answer now, or a channel the answer will come on.
#[derive(Debug)]
pub(super) enum Pending<T> {
    Now(T),
    Wait(LocalReceiver<T>),
}

fn refused(error: ResponseError, member_id: impl Into<String>) -> Pending<JoinOutcome> {
    Pending::Now(Err(JoinRefused {
        error,
        member_id: member_id.into(),
    }))
}

/// Kafka's member ids: the client id (or instance id) and a random UUID.
fn new_member_id(prefix: &str) -> String {
    format!("{prefix}-{}", uuid::Uuid::new_v4())
}

#[derive(Debug)]
struct Member {
    id: String,
    instance_id: Option<String>,
    client_id: String,
    client_host: String,
    rebalance_timeout_ms: i32,
    session_timeout_ms: i32,
    protocols: Vec<Protocol>,
    assignment: Bytes,
    awaiting_join: Option<LocalSender<JoinOutcome>>,
    awaiting_sync: Option<LocalSender<SyncOutcome>>,
    /// Joined but not yet through a join phase: not protected by a pending JoinGroup.
    is_new: bool,
    session: Option<Timer>,
}

impl Member {
    fn supports(&self, protocol: &str) -> bool {
        self.protocols.iter().any(|p| p.name == protocol)
    }

    fn metadata(&self, protocol: Option<&str>) -> Bytes {
        self.protocols
            .iter()
            .find(|p| Some(p.name.as_str()) == protocol)
            .map(|p| p.metadata.clone())
            .unwrap_or_default()
    }

    /// A member whose JoinGroup or SyncGroup is parked cannot heartbeat: it is not expired,
    /// unless it is new (its first JoinGroup has its own, longer timer).
    fn has_satisfied_heartbeat(&self) -> bool {
        !self.is_new && (self.awaiting_join.is_some() || self.awaiting_sync.is_some())
    }

    fn complete_join(&mut self, outcome: JoinOutcome) -> bool {
        match self.awaiting_join.take() {
            Some(waiter) => {
                // The receiver is gone only if its request was dropped: nobody to tell.
                let _ = waiter.try_send(outcome);
                true
            }
            None => false,
        }
    }

    fn complete_sync(&mut self, outcome: SyncOutcome) -> bool {
        match self.awaiting_sync.take() {
            Some(waiter) => {
                let _ = waiter.try_send(outcome);
                true
            }
            None => false,
        }
    }

    fn update(&mut self, call: &JoinCall) {
        self.protocols = call.protocols.clone();
        self.rebalance_timeout_ms = call.rebalance_timeout_ms;
        self.session_timeout_ms = call.session_timeout_ms;
    }
}

/// Where a group is in the protocol (Kafka's states, less Dead: a deleted group is gone).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
}

impl From<Phase> for GroupState {
    fn from(phase: Phase) -> GroupState {
        match phase {
            Phase::Empty => GroupState::Empty,
            Phase::PreparingRebalance => GroupState::PreparingRebalance,
            Phase::CompletingRebalance => GroupState::CompletingRebalance,
            Phase::Stable => GroupState::Stable,
        }
    }
}

/// A classic group and its committed offsets.
#[derive(Debug)]
pub(super) struct Group {
    id: String,
    state: Phase,
    /// When the group entered its state, ms since the epoch: offsets of an emptied group age
    /// from there.
    state_since_ms: i64,
    /// The current join phase started from Empty: it ends only by the initial delay timer.
    initial_rebalance: bool,
    new_member_added: bool,
    protocol_type: Option<String>,
    protocol_name: Option<String>,
    generation_id: i32,
    leader_id: Option<String>,
    /// In joining order.
    members: IndexMap<String, Member>,
    /// Instance id -> member id.
    static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED, each with its expiry.
    pending_members: HashMap<String, Timer>,
    /// Members of this generation that have not sent SyncGroup yet.
    pending_sync: HashSet<String>,
    /// The topics the members subscribe to, when the protocol is "consumer" and readable.
    subscribed_topics: Option<HashSet<String>>,
    /// The timer of the current phase: initial delay or join (PreparingRebalance), sync
    /// (CompletingRebalance, Stable).
    phase_timer: Option<Timer>,
    pub offsets: Offsets,
}

impl Group {
    pub fn new(id: String, now_ms: i64) -> Group {
        Group {
            id,
            state: Phase::Empty,
            state_since_ms: now_ms,
            initial_rebalance: false,
            new_member_added: false,
            protocol_type: None,
            protocol_name: None,
            generation_id: 0,
            leader_id: None,
            members: IndexMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            pending_sync: HashSet::new(),
            subscribed_topics: None,
            phase_timer: None,
            offsets: Offsets::default(),
        }
    }

    pub fn state(&self) -> GroupState {
        self.state.into()
    }

    // ---- JoinGroup ----

    pub fn join(&mut self, ctx: &Ctx, call: JoinCall) -> Pending<JoinOutcome> {
        if !self.accepts_joining_member(&call.member_id, ctx.config.max_group_size) {
            if self.members.contains_key(&call.member_id) {
                self.remove_member(&call.member_id, ResponseError::GroupMaxSizeReached);
                self.maybe_complete_join_phase(ctx);
            }
            return refused(ResponseError::GroupMaxSizeReached, "");
        }
        if !self.supports_protocols(&call.protocol_type, &call.protocols) {
            return refused(ResponseError::InconsistentGroupProtocol, call.member_id);
        }
        if call.member_id.is_empty() {
            self.join_new_member(ctx, call)
        } else {
            self.join_existing_member(ctx, call)
        }
    }

    fn accepts_joining_member(&self, member_id: &str, max_group_size: usize) -> bool {
        match self.state {
            Phase::Empty => true,
            // Counting members that rejoined (not all members) lets the last ones to rejoin be
            // the ones turned away when the limit was lowered.
            Phase::PreparingRebalance => {
                self.members
                    .get(member_id)
                    .is_some_and(|m| m.awaiting_join.is_some())
                    || self.awaiting_join_count() < max_group_size
            }
            Phase::CompletingRebalance | Phase::Stable => {
                self.members.contains_key(member_id) || self.members.len() < max_group_size
            }
        }
    }

    fn join_new_member(&mut self, ctx: &Ctx, call: JoinCall) -> Pending<JoinOutcome> {
        let prefix = call.group_instance_id.as_deref().unwrap_or(&call.client_id);
        let member_id = new_member_id(prefix);
        match &call.group_instance_id {
            Some(instance) => match self.static_members.get(instance).cloned() {
                Some(old_id) => self.replace_static_member(ctx, call, &old_id, member_id),
                None => self.add_member_and_rebalance(ctx, call, member_id),
            },
            None if call.require_known_member_id => {
                let timeout_ms = u64::try_from(call.session_timeout_ms).unwrap_or(0);
                let timer = ctx.timers.start(
                    timeout_ms,
                    Expiry::PendingMember {
                        group: self.id.clone(),
                        member: member_id.clone(),
                    },
                );
                self.pending_members.insert(member_id.clone(), timer);
                refused(ResponseError::MemberIdRequired, member_id)
            }
            None => self.add_member_and_rebalance(ctx, call, member_id),
        }
    }

    fn join_existing_member(&mut self, ctx: &Ctx, call: JoinCall) -> Pending<JoinOutcome> {
        // A pending member is dynamic; a static one naming it fails validation below.
        if call.group_instance_id.is_none() && self.pending_members.contains_key(&call.member_id) {
            self.pending_members.remove(&call.member_id);
            let member_id = call.member_id.clone();
            return self.add_member_and_rebalance(ctx, call, member_id);
        }
        if let Err(error) = self.validate_member(&call.member_id, call.group_instance_id.as_deref())
        {
            return refused(error, call.member_id);
        }
        let is_leader = self.is_leader(&call.member_id);
        let unchanged = self
            .members
            .get(&call.member_id)
            .is_some_and(|m| m.protocols == call.protocols);
        match self.state {
            Phase::PreparingRebalance => self.update_member_and_rebalance(ctx, call),
            // The member missed its JoinGroup response: the same answer again.
            Phase::CompletingRebalance if unchanged => {
                Pending::Now(Ok(self.joined(call.member_id, is_leader)))
            }
            // A follower with nothing new may go straight to SyncGroup; the leader rejoining
            // asks for a rebalance (for changes only it sees, such as new partitions).
            Phase::Stable if unchanged && !is_leader => {
                Pending::Now(Ok(self.joined(call.member_id, false)))
            }
            Phase::CompletingRebalance | Phase::Stable => {
                self.update_member_and_rebalance(ctx, call)
            }
            Phase::Empty => refused(ResponseError::UnknownMemberId, call.member_id),
        }
    }

    fn add_member_and_rebalance(
        &mut self,
        ctx: &Ctx,
        call: JoinCall,
        member_id: String,
    ) -> Pending<JoinOutcome> {
        let (waiter, answer) = local_channel::new_bounded(1);
        if self.members.is_empty() {
            self.protocol_type = Some(call.protocol_type.clone());
        }
        if self.state == Phase::PreparingRebalance && self.initial_rebalance {
            self.new_member_added = true;
        }
        if let Some(instance) = &call.group_instance_id {
            self.static_members
                .insert(instance.clone(), member_id.clone());
        }
        self.leader_id.get_or_insert_with(|| member_id.clone());
        self.members.insert(
            member_id.clone(),
            Member {
                id: member_id.clone(),
                instance_id: call.group_instance_id,
                client_id: call.client_id,
                client_host: call.client_host,
                rebalance_timeout_ms: call.rebalance_timeout_ms,
                session_timeout_ms: call.session_timeout_ms,
                protocols: call.protocols,
                assignment: Bytes::new(),
                awaiting_join: Some(waiter),
                awaiting_sync: None,
                is_new: true,
                session: None,
            },
        );
        // A new member cannot heartbeat before its first JoinGroup returns, and a client that
        // gave up on it will retry with a new one: its own long timer clears such leftovers.
        self.schedule_session(ctx, &member_id, ctx.config.new_member_join_timeout_ms);
        self.maybe_prepare_rebalance_or_complete_join(ctx);
        Pending::Wait(answer)
    }

    fn update_member_and_rebalance(&mut self, ctx: &Ctx, call: JoinCall) -> Pending<JoinOutcome> {
        let (waiter, answer) = local_channel::new_bounded(1);
        if let Some(member) = self.members.get_mut(&call.member_id) {
            member.update(&call);
            // A JoinGroup the client retried: the earlier one gets an answer it will ignore.
            member.complete_join(Err(JoinRefused {
                error: ResponseError::RebalanceInProgress,
                member_id: call.member_id.clone(),
            }));
            member.awaiting_join = Some(waiter);
        }
        self.maybe_prepare_rebalance_or_complete_join(ctx);
        Pending::Wait(answer)
    }

    /// A known static member joined with a new member id: it takes the old member's place.
    fn replace_static_member(
        &mut self,
        ctx: &Ctx,
        call: JoinCall,
        old_id: &str,
        new_id: String,
    ) -> Pending<JoinOutcome> {
        let current_leader = self.leader_id.clone().unwrap_or_default();
        let Some(mut member) = self.members.shift_remove(old_id) else {
            return refused(ResponseError::UnknownMemberId, call.member_id);
        };
        // Whoever still waits as the old member is fenced at once.
        member.complete_join(Err(JoinRefused {
            error: ResponseError::FencedInstanceId,
            member_id: old_id.to_owned(),
        }));
        member.complete_sync(Err(ResponseError::FencedInstanceId));
        member.id = new_id.clone();
        member.update(&call);
        let session_ms = u64::try_from(member.session_timeout_ms).unwrap_or(0);
        self.members.insert(new_id.clone(), member);
        if self.is_leader(old_id) {
            self.leader_id = Some(new_id.clone());
        }
        if self.pending_sync.remove(old_id) {
            self.pending_sync.insert(new_id.clone());
        }
        if let Some(instance) = &call.group_instance_id {
            self.static_members.insert(instance.clone(), new_id.clone());
        }
        self.schedule_session(ctx, &new_id, session_ms);

        if self.state == Phase::Stable && self.select_protocol() == self.protocol_name {
            // Nothing changes for the group: the member gets its old assignment on SyncGroup.
            let is_leader = self.is_leader(&new_id);
            let mut joined = self.joined(new_id, call.supports_skip_assignment && is_leader);
            if call.supports_skip_assignment {
                // KIP-814: the leader learns it leads, but must not assign again.
                joined.skip_assignment = is_leader;
            } else {
                // Older clients would run a pointless assignment if told they lead: name the
                // leader as it was before the replacement.
                joined.leader = current_leader;
            }
            return Pending::Now(Ok(joined));
        }
        let (waiter, answer) = local_channel::new_bounded(1);
        if let Some(member) = self.members.get_mut(&new_id) {
            member.awaiting_join = Some(waiter);
        }
        match self.state {
            // The leader may already hold the old member id in its assignment: start over.
            Phase::CompletingRebalance => self.prepare_rebalance(ctx),
            Phase::PreparingRebalance => self.maybe_complete_join_phase(ctx),
            _ => self.maybe_prepare_rebalance_or_complete_join(ctx),
        }
        Pending::Wait(answer)
    }

    // ---- the join phase ----

    fn maybe_prepare_rebalance_or_complete_join(&mut self, ctx: &Ctx) {
        match self.state {
            Phase::Empty | Phase::CompletingRebalance | Phase::Stable => {
                self.prepare_rebalance(ctx)
            }
            Phase::PreparingRebalance => self.maybe_complete_join_phase(ctx),
        }
    }

    fn maybe_complete_join_phase(&mut self, ctx: &Ctx) {
        if self.state == Phase::PreparingRebalance
            && !self.initial_rebalance
            && self.all_members_joined()
        {
            self.complete_join(ctx);
        }
    }

    fn prepare_rebalance(&mut self, ctx: &Ctx) {
        if self.state == Phase::CompletingRebalance {
            self.reset_and_propagate_assignment_error(ctx, ResponseError::RebalanceInProgress);
        }
        self.pending_sync.clear();
        self.phase_timer = None;
        let initial = self.state == Phase::Empty;
        self.transition(Phase::PreparingRebalance, ctx.now_ms);
        self.initial_rebalance = initial;
        self.new_member_added = false;
        tracing::info!(
            group = %self.id,
            generation = self.generation_id,
            members = self.members.len(),
            "preparing to rebalance"
        );
        if initial {
            let delay_ms = ctx.config.initial_rebalance_delay_ms;
            let remaining_ms = self.rebalance_timeout_ms().saturating_sub(delay_ms);
            self.phase_timer = Some(ctx.timers.start(
                delay_ms,
                Expiry::InitialDelay {
                    group: self.id.clone(),
                    delay_ms,
                    remaining_ms,
                },
            ));
        } else if self.all_members_joined() {
            self.complete_join(ctx);
        } else {
            self.start_join_timer(ctx);
        }
    }

    fn start_join_timer(&mut self, ctx: &Ctx) {
        let timer = ctx.timers.start(
            self.rebalance_timeout_ms(),
            Expiry::Join {
                group: self.id.clone(),
            },
        );
        self.phase_timer = Some(timer);
    }

    fn complete_join(&mut self, ctx: &Ctx) {
        self.phase_timer = None;
        let gone: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.instance_id.is_none())
            .map(|m| m.id.clone())
            .collect();
        if !gone.is_empty() {
            tracing::info!(
                group = %self.id,
                members = ?gone,
                "removing members that did not rejoin",
            );
        }
        for id in &gone {
            self.remove_member(id, ResponseError::UnknownMemberId);
        }
        if !self.elect_joined_leader() && !self.members.is_empty() {
            // Only static members are left and none rejoined: wait for their sessions to end.
            self.start_join_timer(ctx);
            return;
        }
        self.init_next_generation(ctx.now_ms);
        if self.state == Phase::Empty {
            tracing::info!(group = %self.id, generation = self.generation_id, "group is empty");
            return;
        }
        tracing::info!(
            group = %self.id,
            generation = self.generation_id,
            members = self.members.len(),
            protocol = ?self.protocol_name,
            "stabilized group"
        );
        let leader = self.leader_id.clone().unwrap_or_default();
        let all_members = self.current_members();
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let mut joined = self.joined(id.clone(), false);
            if id == leader {
                joined.members = all_members.clone();
            }
            let session_ms = match self.members.get_mut(&id) {
                Some(member) => {
                    member.complete_join(Ok(joined));
                    member.is_new = false;
                    u64::try_from(member.session_timeout_ms).unwrap_or(0)
                }
                None => continue,
            };
            self.schedule_session(ctx, &id, session_ms);
            self.pending_sync.insert(id);
        }
        let timer = ctx.timers.start(
            self.rebalance_timeout_ms(),
            Expiry::Sync {
                group: self.id.clone(),
                generation_id: self.generation_id,
            },
        );
        self.phase_timer = Some(timer);
    }

    /// Keeps the leader if it rejoined, else makes the first member that rejoined the leader;
    /// false when there is no leader or nobody rejoined.
    fn elect_joined_leader(&mut self) -> bool {
        let Some(leader) = &self.leader_id else {
            return false;
        };
        if self
            .members
            .get(leader)
            .is_some_and(|m| m.awaiting_join.is_some())
        {
            return true;
        }
        match self.members.values().find(|m| m.awaiting_join.is_some()) {
            Some(joined) => {
                tracing::info!(
                    group = %self.id,
                    old = %leader,
                    new = %joined.id,
                    "leader did not rejoin: new leader",
                );
                self.leader_id = Some(joined.id.clone());
                true
            }
            None => false,
        }
    }

    fn init_next_generation(&mut self, now_ms: i64) {
        self.generation_id = self.generation_id.wrapping_add(1);
        if self.members.is_empty() {
            self.protocol_name = None;
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition(Phase::Empty, now_ms);
        } else {
            self.protocol_name = self.select_protocol();
            self.subscribed_topics = self.compute_subscribed_topics();
            self.transition(Phase::CompletingRebalance, now_ms);
        }
        self.pending_sync.clear();
    }

    /// The protocol every member supports that most members prefer (ties go to the one voted
    /// for first, in joining order).
    fn select_protocol(&self) -> Option<String> {
        let first = self.members.values().next()?;
        let candidates: Vec<&str> = first
            .protocols
            .iter()
            .map(|p| p.name.as_str())
            .filter(|name| self.members.values().all(|m| m.supports(name)))
            .collect();
        let mut votes: Vec<(&str, usize)> = Vec::new();
        for member in self.members.values() {
            let Some(vote) = member
                .protocols
                .iter()
                .map(|p| p.name.as_str())
                .find(|name| candidates.contains(name))
            else {
                continue;
            };
            match votes.iter_mut().find(|(name, _)| *name == vote) {
                Some((_, count)) => *count += 1,
                None => votes.push((vote, 1)),
            }
        }
        let mut best: Option<(&str, usize)> = None;
        for (name, count) in votes {
            if best.is_none_or(|(_, most)| count > most) {
                best = Some((name, count));
            }
        }
        best.map(|(name, _)| name.to_owned())
    }

    fn supports_protocols(&self, protocol_type: &str, protocols: &[Protocol]) -> bool {
        if self.state == Phase::Empty {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols
                .iter()
                .any(|p| self.members.values().all(|m| m.supports(&p.name)))
    }

    fn compute_subscribed_topics(&self) -> Option<HashSet<String>> {
        if self.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return None;
        }
        if self.members.is_empty() {
            return Some(HashSet::new());
        }
        let protocol = self.protocol_name.as_deref()?;
        let mut topics = HashSet::new();
        for member in self.members.values() {
            match consumer_protocol::subscribed_topics(&member.metadata(Some(protocol))) {
                Ok(subscribed) => topics.extend(subscribed),
                Err(e) => {
                    tracing::warn!(
                        group = %self.id,
                        member = %member.id,
                        error = %e,
                        "unreadable consumer subscription: subscribed topics unknown",
                    );
                    return None;
                }
            }
        }
        Some(topics)
    }

    // ---- SyncGroup ----

    pub fn sync(&mut self, ctx: &Ctx, call: SyncCall) -> Pending<SyncOutcome> {
        if let Err(error) = self.validate_sync(&call) {
            return Pending::Now(Err(error));
        }
        match self.state {
            Phase::Empty => Pending::Now(Err(ResponseError::UnknownMemberId)),
            Phase::PreparingRebalance => Pending::Now(Err(ResponseError::RebalanceInProgress)),
            Phase::CompletingRebalance => {
                let (waiter, answer) = local_channel::new_bounded(1);
                if let Some(member) = self.members.get_mut(&call.member_id) {
                    member.complete_sync(Err(ResponseError::RebalanceInProgress));
                    member.awaiting_sync = Some(waiter);
                }
                self.remove_pending_sync(&call.member_id);
                if self.is_leader(&call.member_id) {
                    tracing::info!(
                        group = %self.id,
                        generation = self.generation_id,
                        "assignment received from the leader",
                    );
                    // Later entries for the same member win; members left out get nothing.
                    let assignments: HashMap<String, Bytes> =
                        call.assignments.into_iter().collect();
                    self.set_and_propagate_assignment(ctx, assignments);
                    self.transition(Phase::Stable, ctx.now_ms);
                }
                Pending::Wait(answer)
            }
            Phase::Stable => {
                self.remove_pending_sync(&call.member_id);
                let assignment = self
                    .members
                    .get(&call.member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                Pending::Now(Ok(self.synced(assignment)))
            }
        }
    }

    fn validate_sync(&self, call: &SyncCall) -> Result<(), ResponseError> {
        self.validate_member(&call.member_id, call.group_instance_id.as_deref())?;
        if call.generation_id != self.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        let mismatch = |given: &Option<String>, ours: &Option<String>| {
            given.is_some() && given.as_deref() != ours.as_deref()
        };
        if mismatch(&call.protocol_type, &self.protocol_type)
            || mismatch(&call.protocol_name, &self.protocol_name)
        {
            return Err(ResponseError::InconsistentGroupProtocol);
        }
        Ok(())
    }

    fn synced(&self, assignment: Bytes) -> Synced {
        Synced {
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            assignment,
        }
    }

    fn remove_pending_sync(&mut self, member_id: &str) {
        self.pending_sync.remove(member_id);
        if self.pending_sync.is_empty()
            && matches!(self.state, Phase::CompletingRebalance | Phase::Stable)
        {
            self.phase_timer = None;
        }
    }

    fn set_and_propagate_assignment(&mut self, ctx: &Ctx, mut assignments: HashMap<String, Bytes>) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let assignment = assignments.remove(&id).unwrap_or_default();
            let synced = self.synced(assignment.clone());
            let Some(member) = self.members.get_mut(&id) else {
                continue;
            };
            member.assignment = assignment;
            if member.complete_sync(Ok(synced)) {
                let session_ms = u64::try_from(member.session_timeout_ms).unwrap_or(0);
                self.schedule_session(ctx, &id, session_ms);
            }
        }
    }

    fn reset_and_propagate_assignment_error(&mut self, ctx: &Ctx, error: ResponseError) {
        let ids: Vec<String> = self.members.keys().cloned().collect();
        for id in ids {
            let Some(member) = self.members.get_mut(&id) else {
                continue;
            };
            member.assignment = Bytes::new();
            if member.complete_sync(Err(error)) {
                let session_ms = u64::try_from(member.session_timeout_ms).unwrap_or(0);
                self.schedule_session(ctx, &id, session_ms);
            }
        }
    }

    // ---- Heartbeat and LeaveGroup ----

    pub fn heartbeat(&mut self, ctx: &Ctx, call: &HeartbeatCall) -> Result<(), ResponseError> {
        self.validate_member(&call.member_id, call.group_instance_id.as_deref())?;
        if call.generation_id != self.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        match self.state {
            Phase::Empty => Err(ResponseError::UnknownMemberId),
            Phase::PreparingRebalance => {
                self.renew_session(ctx, &call.member_id);
                Err(ResponseError::RebalanceInProgress)
            }
            Phase::CompletingRebalance | Phase::Stable => {
                self.renew_session(ctx, &call.member_id);
                Ok(())
            }
        }
    }

    pub fn leave(&mut self, ctx: &Ctx, call: LeaveCall) -> Vec<LeftMember> {
        let mut left = Vec::with_capacity(call.members.len());
        for leaving in call.members {
            let result = if leaving.member_id.is_empty() {
                // An admin removing a static member by its instance id.
                let member_id = leaving
                    .group_instance_id
                    .as_ref()
                    .and_then(|instance| self.static_members.get(instance))
                    .cloned();
                match member_id {
                    Some(id) => {
                        self.remove_member(&id, ResponseError::UnknownMemberId);
                        Ok(())
                    }
                    None => Err(ResponseError::UnknownMemberId),
                }
            } else if self.pending_members.remove(&leaving.member_id).is_some() {
                Ok(())
            } else {
                self.validate_member(&leaving.member_id, leaving.group_instance_id.as_deref())
                    .map(|()| {
                        self.remove_member(&leaving.member_id, ResponseError::UnknownMemberId)
                    })
            };
            if result.is_ok() {
                tracing::info!(
                    group = %self.id,
                    member = %leaving.member_id,
                    instance = ?leaving.group_instance_id,
                    reason = ?leaving.reason,
                    "member left",
                );
            }
            left.push(LeftMember {
                member_id: leaving.member_id,
                group_instance_id: leaving.group_instance_id,
                result,
            });
        }
        if left.iter().any(|l| l.result.is_ok()) {
            match self.state {
                Phase::Stable | Phase::CompletingRebalance => {
                    self.maybe_prepare_rebalance_or_complete_join(ctx)
                }
                Phase::PreparingRebalance => self.maybe_complete_join_phase(ctx),
                Phase::Empty => {}
            }
        }
        left
    }

    // ---- timers ----

    pub fn expire(&mut self, ctx: &Ctx, expiry: Expiry) {
        match expiry {
            Expiry::Session { member, .. } => {
                let failed = self
                    .members
                    .get(&member)
                    .is_some_and(|m| !m.has_satisfied_heartbeat());
                if failed {
                    tracing::info!(
                        group = %self.id,
                        member = %member,
                        "session expired: removing the member",
                    );
                    self.remove_member(&member, ResponseError::UnknownMemberId);
                    self.after_member_removed(ctx);
                }
            }
            Expiry::PendingMember { member, .. } => {
                let was_pending = self.pending_members.remove(&member).is_some();
                if was_pending
                    && self.state == Phase::PreparingRebalance
                    && self.all_members_joined()
                {
                    self.complete_join(ctx);
                }
            }
            Expiry::Join { .. } => {
                if self.state == Phase::PreparingRebalance {
                    self.complete_join(ctx);
                }
            }
            Expiry::InitialDelay {
                delay_ms,
                remaining_ms,
                ..
            } => {
                if self.state != Phase::PreparingRebalance {
                    return;
                }
                if self.new_member_added && remaining_ms > 0 {
                    self.new_member_added = false;
                    let next_delay_ms = ctx.config.initial_rebalance_delay_ms.min(remaining_ms);
                    let timer = ctx.timers.start(
                        next_delay_ms,
                        Expiry::InitialDelay {
                            group: self.id.clone(),
                            delay_ms: next_delay_ms,
                            remaining_ms: remaining_ms.saturating_sub(delay_ms),
                        },
                    );
                    self.phase_timer = Some(timer);
                } else {
                    self.complete_join(ctx);
                }
            }
            Expiry::Sync { generation_id, .. } => {
                let waiting = generation_id == self.generation_id
                    && matches!(self.state, Phase::CompletingRebalance | Phase::Stable)
                    && !self.pending_sync.is_empty();
                if waiting {
                    let late: Vec<String> = self.pending_sync.drain().collect();
                    tracing::info!(
                        group = %self.id,
                        members = ?late,
                        "removing members that did not sync",
                    );
                    for id in &late {
                        self.remove_member(id, ResponseError::RebalanceInProgress);
                    }
                    self.prepare_rebalance(ctx);
                }
            }
        }
    }

    fn after_member_removed(&mut self, ctx: &Ctx) {
        match self.state {
            Phase::Stable | Phase::CompletingRebalance => {
                self.maybe_prepare_rebalance_or_complete_join(ctx)
            }
            Phase::PreparingRebalance if self.all_members_joined() => self.complete_join(ctx),
            _ => {}
        }
    }

    fn schedule_session(&mut self, ctx: &Ctx, member_id: &str, timeout_ms: u64) {
        let timer = ctx.timers.start(
            timeout_ms,
            Expiry::Session {
                group: self.id.clone(),
                member: member_id.to_owned(),
            },
        );
        if let Some(member) = self.members.get_mut(member_id) {
            member.session = Some(timer);
        }
    }

    fn renew_session(&mut self, ctx: &Ctx, member_id: &str) {
        if let Some(member) = self.members.get(member_id) {
            let timeout_ms = u64::try_from(member.session_timeout_ms).unwrap_or(0);
            self.schedule_session(ctx, member_id, timeout_ms);
        }
    }

    // ---- offsets and admin ----

    /// Kafka's checks of an OffsetCommit against the group; renews the committer's session.
    pub fn validate_commit(
        &mut self,
        ctx: &Ctx,
        generation_id: i32,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        if generation_id < 0 && self.state == Phase::Empty {
            // From outside group management (an admin, or a consumer with assigned partitions).
            return Ok(());
        }
        if generation_id >= 0 || !member_id.is_empty() || instance_id.is_some() {
            self.validate_member(member_id, instance_id)?;
            if generation_id != self.generation_id {
                return Err(ResponseError::IllegalGeneration);
            }
        } else if self.state != Phase::Empty {
            // Without member id and generation, only an empty group takes commits.
            return Err(ResponseError::UnknownMemberId);
        }
        match self.state {
            Phase::CompletingRebalance => Err(ResponseError::RebalanceInProgress),
            Phase::Stable | Phase::PreparingRebalance => {
                // Commits keep a member alive, as heartbeats do.
                self.renew_session(ctx, member_id);
                Ok(())
            }
            Phase::Empty => Ok(()),
        }
    }

    /// Whether OffsetDelete may touch this group at all.
    pub fn validate_offset_delete(&self) -> Result<(), ResponseError> {
        let active = matches!(
            self.state,
            Phase::PreparingRebalance | Phase::CompletingRebalance | Phase::Stable
        );
        if active && !self.uses_consumer_protocol() {
            return Err(ResponseError::NonEmptyGroup);
        }
        Ok(())
    }

    /// Whether DeleteGroups may delete this group.
    pub fn validate_delete(&self) -> Result<(), ResponseError> {
        match self.state {
            Phase::Empty => Ok(()),
            _ => Err(ResponseError::NonEmptyGroup),
        }
    }

    fn uses_consumer_protocol(&self) -> bool {
        self.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE)
    }

    /// Whether the members consume `topic`; when unknown, consumer groups count as subscribed
    /// to everything (safe for OffsetDelete and retention).
    pub fn is_subscribed_to(&self, topic: &str) -> bool {
        match &self.subscribed_topics {
            Some(topics) => topics.contains(topic),
            None => self.uses_consumer_protocol(),
        }
    }

    /// The offsets that have expired, by Kafka's rules: a group that emptied keeps all its
    /// offsets for the retention period from when it emptied; a Stable consumer group loses
    /// offsets of topics it no longer consumes; a group without a protocol (commits only, or
    /// loaded from the log) ages each offset from its commit; others keep everything.
    pub fn expired_offsets(&self, now_ms: i64, retention_ms: u64) -> Vec<(String, i32)> {
        let base = match (&self.protocol_type, self.state) {
            (Some(_), Phase::Empty) => ExpiryBase::Since(self.state_since_ms),
            (Some(_), Phase::Stable)
                if self.uses_consumer_protocol() && self.subscribed_topics.is_some() =>
            {
                ExpiryBase::Commit
            }
            (None, _) => ExpiryBase::Commit,
            _ => return Vec::new(),
        };
        self.offsets.expired(now_ms, retention_ms, base, |topic| {
            self.is_subscribed_to(topic)
        })
    }

    pub fn describe(&self) -> DescribedGroup {
        let stable = self.state == Phase::Stable;
        let protocol = self.protocol_name.as_deref().filter(|_| stable);
        DescribedGroup {
            state: self.state.into(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            protocol: protocol.unwrap_or_default().to_owned(),
            members: self
                .members
                .values()
                .map(|m| DescribedMember {
                    member_id: m.id.clone(),
                    group_instance_id: m.instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.metadata(protocol)
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect(),
        }
    }

    pub fn listed(&self) -> ListedGroup {
        ListedGroup {
            group_id: self.id.clone(),
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            state: self.state.into(),
        }
    }

    /// Answers everything waiting with `error`: the coordinator is going away.
    pub fn shut_down(&mut self, error: ResponseError) {
        for member in self.members.values_mut() {
            member.complete_join(Err(JoinRefused {
                error,
                member_id: member.id.clone(),
            }));
            member.complete_sync(Err(error));
        }
    }

    // ---- helpers ----

    fn validate_member(
        &self,
        member_id: &str,
        instance_id: Option<&str>,
    ) -> Result<(), ResponseError> {
        if let Some(instance) = instance_id {
            match self.static_members.get(instance) {
                None => return Err(ResponseError::UnknownMemberId),
                Some(current) if current != member_id => {
                    tracing::info!(
                        group = %self.id,
                        member = %member_id,
                        instance,
                        current = %current,
                        "fenced a static member",
                    );
                    return Err(ResponseError::FencedInstanceId);
                }
                Some(_) => {}
            }
        }
        if self.members.contains_key(member_id) {
            Ok(())
        } else {
            Err(ResponseError::UnknownMemberId)
        }
    }

    /// Removes a member, answering whatever it has waiting with `error`.
    fn remove_member(&mut self, member_id: &str, error: ResponseError) {
        if let Some(mut member) = self.members.shift_remove(member_id) {
            member.complete_join(Err(JoinRefused {
                error,
                member_id: String::new(),
            }));
            member.complete_sync(Err(error));
            if let Some(instance) = &member.instance_id {
                self.static_members.remove(instance);
            }
        }
        if self.is_leader(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
        self.pending_sync.remove(member_id);
    }

    fn transition(&mut self, state: Phase, now_ms: i64) {
        self.state = state;
        self.state_since_ms = now_ms;
    }

    fn is_leader(&self, member_id: &str) -> bool {
        self.leader_id.as_deref() == Some(member_id)
    }

    fn awaiting_join_count(&self) -> usize {
        self.members
            .values()
            .filter(|m| m.awaiting_join.is_some())
            .count()
    }

    fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.awaiting_join_count() == self.members.len()
    }

    /// The group's rebalance timeout: the longest of its members'.
    fn rebalance_timeout_ms(&self) -> u64 {
        self.members
            .values()
            .map(|m| u64::try_from(m.rebalance_timeout_ms).unwrap_or(0))
            .max()
            .unwrap_or(0)
    }

    fn current_members(&self) -> Vec<JoinedMember> {
        let protocol = self.protocol_name.as_deref();
        self.members
            .values()
            .map(|m| JoinedMember {
                member_id: m.id.clone(),
                group_instance_id: m.instance_id.clone(),
                metadata: m.metadata(protocol),
            })
            .collect()
    }

    /// The current generation as a JoinGroup answer for `member_id` (with every member's
    /// metadata if `with_members`).
    fn joined(&self, member_id: String, with_members: bool) -> Joined {
        Joined {
            generation_id: self.generation_id,
            protocol_type: self.protocol_type.clone(),
            protocol_name: self.protocol_name.clone(),
            leader: self.leader_id.clone().unwrap_or_default(),
            skip_assignment: false,
            member_id,
            members: if with_members {
                self.current_members()
            } else {
                Vec::new()
            },
        }
    }
}
