//! [`GroupMember`]: a member of a classic consumer group (protocol type "consumer"). Joins with
//! KIP-394's member-id-required retry, computes the assignment when the coordinator elects it
//! leader, heartbeats from a task and connection of its own, commits in its generation, leaves.
//!
//! Every call on the coordinator connection takes the connection out of the member for its
//! duration: a call that errs or is cancelled (the caller raced it against Ctrl-C) leaves none
//! behind, and the next call connects afresh instead of reading a stale response.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use glommio::Task;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    ApiKey, GroupId, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest, SyncGroupRequest,
};
use kafka_protocol::protocol::{Request as KafkaRequest, StrBytes};
use tracing::{debug, warn};

use super::assignor::{Assignor, TopicPartitions};
use super::cluster::{Client, check_offset_commit, offset_commit_request};
use super::connection::{ConnectOptions, Connection};
use super::consumer_protocol::{decode_assignment, decode_subscription, encode_subscription};
use super::error::{ClientError, check};

/// How a member joins and stays in its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberConfig {
    pub group_id: String,
    pub topics: Vec<String>,
    /// Offered to the coordinator in this order of preference; the leader uses the one the
    /// group agrees on.
    pub assignors: Vec<Assignor>,
    pub session_timeout_ms: i32,
    /// How long the coordinator waits for every member to rejoin in a rebalance.
    pub rebalance_timeout_ms: i32,
    pub heartbeat_interval_ms: u64,
}

impl MemberConfig {
    /// Timeouts fit for an interactive tool: a member that dies unannounced holds its
    /// partitions for 10 s, a rebalance waits at most 30 s for stragglers.
    pub fn new(group_id: &str, topics: Vec<String>) -> Self {
        Self {
            group_id: group_id.to_owned(),
            topics,
            assignors: vec![Assignor::Range, Assignor::RoundRobin],
            session_timeout_ms: 10_000,
            rebalance_timeout_ms: 30_000,
            heartbeat_interval_ms: 3_000,
        }
    }
}

/// The generation the heartbeat task keeps alive.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Generation {
    id: i32,
    member_id: String,
}

/// What the member and its heartbeat task share (one thread: cells suffice).
#[derive(Debug, Default)]
struct Shared {
    /// `None` while joining: the JoinGroup itself keeps the member alive then.
    generation: RefCell<Option<Generation>>,
    coordinator_addr: RefCell<String>,
    /// Set when the coordinator says the group is rebalancing or no longer knows us.
    rejoin: Cell<bool>,
}

/// A member of one consumer group, between [`GroupMember::join`] and [`GroupMember::leave`].
#[derive(Debug)]
pub struct GroupMember {
    config: MemberConfig,
    /// Coordinator calls wait for a whole rebalance: their timeout covers the rebalance timeout.
    coordinator_options: ConnectOptions,
    coordinator: Option<Connection>,
    member_id: String,
    generation_id: i32,
    assignment: TopicPartitions,
    shared: Rc<Shared>,
    /// Cancelled when the member is dropped.
    _heartbeat: Task<()>,
}

const PROTOCOL_TYPE: &str = "consumer";

/// Attempts at one (re)join before giving up, and the pause between them.
const JOIN_ATTEMPTS_MAX: u32 = 20;
const JOIN_BACKOFF_MS: u64 = 250;
/// Added to the rebalance timeout for the coordinator connection's request timeout.
const JOIN_SLACK_MS: u64 = 5_000;

const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
const COORDINATOR_NOT_AVAILABLE: i16 = 15;
const NOT_COORDINATOR: i16 = 16;
const ILLEGAL_GENERATION: i16 = 22;
const UNKNOWN_MEMBER_ID: i16 = 25;
const REBALANCE_IN_PROGRESS: i16 = 27;
const MEMBER_ID_REQUIRED: i16 = 79;

impl GroupMember {
    /// Joins the group and waits for this member's assignment. Uses `client` to find the
    /// coordinator and, as leader, to learn the subscribed topics' partitions.
    pub async fn join(
        client: &mut Client,
        options: &ConnectOptions,
        config: MemberConfig,
    ) -> Result<Self, ClientError> {
        let mut coordinator_options = options.clone();
        let rebalance_ms = u64::try_from(config.rebalance_timeout_ms).unwrap_or(0);
        coordinator_options.request_timeout_ms = options
            .request_timeout_ms
            .max(rebalance_ms.saturating_add(JOIN_SLACK_MS));
        let shared = Rc::new(Shared::default());
        let heartbeat = glommio::spawn_local(heartbeat_loop(
            shared.clone(),
            config.group_id.clone(),
            options.clone(),
            config.heartbeat_interval_ms,
        ));
        let mut member = Self {
            config,
            coordinator_options,
            coordinator: None,
            member_id: String::new(),
            generation_id: -1,
            assignment: TopicPartitions::new(),
            shared,
            _heartbeat: heartbeat,
        };
        member.rejoin(client).await?;
        Ok(member)
    }

    /// This member's partitions in the current generation.
    pub fn assignment(&self) -> &TopicPartitions {
        &self.assignment
    }

    pub fn member_id(&self) -> &str {
        &self.member_id
    }

    pub fn generation_id(&self) -> i32 {
        self.generation_id
    }

    /// Whether the group is rebalancing (or lost this member): stop fetching, commit what was
    /// consumed, and [`GroupMember::rejoin`].
    pub fn needs_rejoin(&self) -> bool {
        self.shared.rejoin.get()
    }

    /// Joins again (after a rebalance started) and takes the new assignment.
    pub async fn rejoin(&mut self, client: &mut Client) -> Result<(), ClientError> {
        self.shared.generation.replace(None);
        self.shared.rejoin.set(false);
        let mut attempts = 1;
        loop {
            let error = match self.join_and_sync(client).await {
                Ok(()) => return Ok(()),
                Err(error) => error,
            };
            match error.kafka_code() {
                Some(UNKNOWN_MEMBER_ID) => self.member_id.clear(),
                Some(ILLEGAL_GENERATION | REBALANCE_IN_PROGRESS) => {}
                Some(
                    COORDINATOR_LOAD_IN_PROGRESS | COORDINATOR_NOT_AVAILABLE | NOT_COORDINATOR,
                ) => {
                    self.coordinator = None;
                }
                Some(_) => return Err(error),
                // The connection went away with the failed call; the next one reconnects.
                None if error.is_retriable()
                    || matches!(
                        error,
                        ClientError::Protocol { .. }
                            | ClientError::Broken { .. }
                            | ClientError::Frame { .. }
                            | ClientError::Unreachable { .. }
                    ) => {}
                None => return Err(error),
            }
            if attempts >= JOIN_ATTEMPTS_MAX {
                return Err(error);
            }
            attempts += 1;
            debug!(group = %self.config.group_id, %error, "rejoining");
            glommio::timer::sleep(Duration::from_millis(JOIN_BACKOFF_MS)).await;
        }
    }

    /// Commits consumed offsets (the next offset to read) of one topic in this generation.
    pub async fn commit(
        &mut self,
        client: &mut Client,
        topic: &str,
        offsets: &[(i32, i64)],
    ) -> Result<(), ClientError> {
        let request = offset_commit_request(&self.config.group_id, topic, offsets)
            .with_generation_id_or_member_epoch(self.generation_id)
            .with_member_id(str_bytes(&self.member_id));
        let response = self.send(client, &request).await?;
        let committed = check_offset_commit(&response);
        if let Some(ILLEGAL_GENERATION | UNKNOWN_MEMBER_ID | REBALANCE_IN_PROGRESS) =
            committed.as_ref().err().and_then(ClientError::kafka_code)
        {
            self.shared.rejoin.set(true);
        }
        committed
    }

    /// Leaves the group, so the others take over its partitions without waiting for its
    /// session to time out.
    pub async fn leave(mut self, client: &mut Client) -> Result<(), ClientError> {
        self.shared.generation.replace(None);
        if self.member_id.is_empty() {
            return Ok(());
        }
        let mut connection = self.connection(client).await?;
        let mut request = LeaveGroupRequest::default().with_group_id(group_id(&self.config));
        // Version 3 names leaving members in a list (to allow batches); earlier ones one id.
        if connection.version(ApiKey::LeaveGroup).unwrap_or_default() >= 3 {
            request.members =
                vec![MemberIdentity::default().with_member_id(str_bytes(&self.member_id))];
        } else {
            request.member_id = str_bytes(&self.member_id);
        }
        let response = connection.send(&request).await?;
        let group = || self.config.group_id.clone();
        check(ApiKey::LeaveGroup, group, response.error_code, None)?;
        for member in &response.members {
            check(ApiKey::LeaveGroup, group, member.error_code, None)?;
        }
        Ok(())
    }

    async fn join_and_sync(&mut self, client: &mut Client) -> Result<(), ClientError> {
        let subscription = encode_subscription(&self.config.topics)
            .map_err(|e| ClientError::Usage(e.to_string()))?;
        let protocols: Vec<JoinGroupRequestProtocol> = self
            .config
            .assignors
            .iter()
            .map(|a| {
                JoinGroupRequestProtocol::default()
                    .with_name(StrBytes::from_static_str(a.name()))
                    .with_metadata(subscription.clone())
            })
            .collect();
        let joined = loop {
            let request = JoinGroupRequest::default()
                .with_group_id(group_id(&self.config))
                .with_session_timeout_ms(self.config.session_timeout_ms)
                .with_rebalance_timeout_ms(self.config.rebalance_timeout_ms)
                .with_member_id(str_bytes(&self.member_id))
                .with_protocol_type(StrBytes::from_static_str(PROTOCOL_TYPE))
                .with_protocols(protocols.clone());
            let response = self.send(client, &request).await?;
            // KIP-394: a new member first gets its id, then joins again with it.
            if response.error_code == MEMBER_ID_REQUIRED && self.member_id.is_empty() {
                self.member_id = response.member_id.to_string();
                continue;
            }
            let group = || self.config.group_id.clone();
            check(ApiKey::JoinGroup, group, response.error_code, None)?;
            break response;
        };
        self.member_id = joined.member_id.to_string();
        let protocol = joined
            .protocol_name
            .as_ref()
            .map(ToString::to_string)
            .unwrap_or_default();
        let assignor = Assignor::from_name(&protocol).ok_or_else(|| ClientError::Protocol {
            addr: self.shared.coordinator_addr.borrow().clone(),
            reason: format!(
                "the group chose assignor {protocol:?}, which this member did not offer"
            ),
        })?;
        let assignments = if joined.leader == joined.member_id {
            self.assign(client, assignor, &joined.members).await?
        } else {
            Vec::new()
        };
        self.shared.generation.replace(Some(Generation {
            id: joined.generation_id,
            member_id: self.member_id.clone(),
        }));
        let request = SyncGroupRequest::default()
            .with_group_id(group_id(&self.config))
            .with_generation_id(joined.generation_id)
            .with_member_id(str_bytes(&self.member_id))
            .with_protocol_type(Some(StrBytes::from_static_str(PROTOCOL_TYPE)))
            .with_protocol_name(Some(str_bytes(&protocol)))
            .with_assignments(assignments);
        let synced = self.send(client, &request).await;
        let synced = synced.and_then(|response| {
            let group = || self.config.group_id.clone();
            check(ApiKey::SyncGroup, group, response.error_code, None)?;
            decode_assignment(&response.assignment).map_err(|e| ClientError::Protocol {
                addr: self.shared.coordinator_addr.borrow().clone(),
                reason: format!("unreadable assignment: {e}"),
            })
        });
        match synced {
            Ok(assignment) => {
                self.assignment = assignment;
                self.generation_id = joined.generation_id;
                Ok(())
            }
            Err(error) => {
                self.shared.generation.replace(None);
                Err(error)
            }
        }
    }

    /// The leader's work: every member's share of the topics they subscribe to.
    async fn assign(
        &self,
        client: &mut Client,
        assignor: Assignor,
        members: &[JoinGroupResponseMember],
    ) -> Result<Vec<SyncGroupRequestAssignment>, ClientError> {
        let mut subscriptions = BTreeMap::new();
        for member in members {
            let topics = decode_subscription(&member.metadata).unwrap_or_else(|e| {
                // Another client's bytes: that member gets nothing rather than the group
                // getting stuck.
                warn!(member = %member.member_id, "unreadable subscription: {e}");
                Vec::new()
            });
            subscriptions.insert(member.member_id.to_string(), topics);
        }
        let topics: BTreeSet<&str> = subscriptions
            .values()
            .flatten()
            .map(String::as_str)
            .collect();
        let topics: Vec<&str> = topics.into_iter().collect();
        let metadata = client.metadata(Some(&topics)).await?;
        let partition_counts = metadata
            .topics
            .iter()
            .filter(|t| t.error_code == 0)
            .map(|t| {
                let count = i32::try_from(t.partitions.len()).unwrap_or(i32::MAX);
                (t.name.clone(), count)
            })
            .collect();
        assignor
            .assign(&subscriptions, &partition_counts)
            .into_iter()
            .map(|(member, topics)| {
                let assignment = super::consumer_protocol::encode_assignment(&topics)
                    .map_err(|e| ClientError::Usage(format!("encoding an assignment: {e}")))?;
                Ok(SyncGroupRequestAssignment::default()
                    .with_member_id(str_bytes(&member))
                    .with_assignment(assignment))
            })
            .collect()
    }

    async fn send<R: KafkaRequest>(
        &mut self,
        client: &mut Client,
        request: &R,
    ) -> Result<R::Response, ClientError> {
        let mut connection = self.connection(client).await?;
        let response = connection.send(request).await?;
        self.coordinator = Some(connection);
        Ok(response)
    }

    /// The coordinator connection, taken out for one call (see the module's comment).
    async fn connection(&mut self, client: &mut Client) -> Result<Connection, ClientError> {
        if let Some(connection) = self.coordinator.take() {
            return Ok(connection);
        }
        let addr = client
            .coordinator(&self.config.group_id)
            .await?
            .addr()
            .to_owned();
        let connection = Connection::connect(&addr, &self.coordinator_options).await?;
        self.shared.coordinator_addr.replace(addr);
        Ok(connection)
    }
}

/// Heartbeats every `interval_ms` while the member has a generation; flags a rejoin when the
/// coordinator answers with an error (a rebalance, a lost membership, a moved coordinator).
async fn heartbeat_loop(
    shared: Rc<Shared>,
    group: String,
    options: ConnectOptions,
    interval_ms: u64,
) {
    let mut connection: Option<Connection> = None;
    loop {
        glommio::timer::sleep(Duration::from_millis(interval_ms)).await;
        let Some(generation) = shared.generation.borrow().clone() else {
            continue;
        };
        let addr = shared.coordinator_addr.borrow().clone();
        let mut current = match connection.take().filter(|c| c.addr() == addr) {
            Some(c) => c,
            None => match Connection::connect(&addr, &options).await {
                Ok(c) => c,
                Err(error) => {
                    // Missed heartbeats end in UNKNOWN_MEMBER_ID once the coordinator is back.
                    warn!(%group, %error, "heartbeat connection failed");
                    continue;
                }
            },
        };
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(str_bytes(&group)))
            .with_generation_id(generation.id)
            .with_member_id(str_bytes(&generation.member_id));
        match current.send(&request).await {
            Ok(response) => {
                connection = Some(current);
                // An answer about a generation the member already left behind is stale.
                let current_generation = shared.generation.borrow().as_ref() == Some(&generation);
                if response.error_code != 0 && current_generation {
                    debug!(%group, code = response.error_code, "heartbeat asks for a rejoin");
                    shared.rejoin.set(true);
                }
            }
            Err(error) => warn!(%group, %error, "heartbeat failed"),
        }
    }
}

fn group_id(config: &MemberConfig) -> GroupId {
    GroupId(str_bytes(&config.group_id))
}

fn str_bytes(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_owned())
}
