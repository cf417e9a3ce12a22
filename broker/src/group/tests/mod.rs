//! Coordinators driven through [`handle`] as clients would, on one glommio executor, with
//! their offsets logs in a temporary directory. Every response is also encoded at its version,
//! so a field set where that version lacks it fails the test.

mod admin;
mod membership;
mod offsets;

use std::future::Future;
use std::path::Path;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::future;
use glommio::LocalExecutorBuilder;
use net::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use net::kafka_protocol::messages::leave_group_request::MemberIdentity;
use net::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use net::kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use net::kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use net::kafka_protocol::messages::{
    ConsumerProtocolSubscription, GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse,
    LeaveGroupRequest, LeaveGroupResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetFetchRequest, RequestHeader, SyncGroupRequest, SyncGroupResponse, TopicName,
};
use net::kafka_protocol::protocol::{Encodable, StrBytes};
use net::{Request, Response};
use storage::{IoMode, Log, ShardStorage, StorageConfig, resolve_io_mode};

use super::{
    Coordinator, Dispatch, GroupCall, GroupConfig, GroupReply, NodeEndpoint, RequestContext,
    ResponseError, handle,
};

/// Runs `f` on a fresh glommio executor and waits for it. Tasks still running when `f` returns
/// are dropped with the executor, as a crash of the process would drop them.
pub fn run<F, Fut>(f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    LocalExecutorBuilder::default()
        .spawn(f)
        .expect("executor starts")
        .join()
        .expect("test body does not panic");
}

/// Fails the test if `f` takes longer than `limit`.
pub async fn within<T>(limit: Duration, f: impl Future<Output = T>) -> T {
    future::or(f, async {
        glommio::timer::sleep(limit).await;
        panic!("not done within {limit:?}");
    })
    .await
}

/// Waits until `done()` holds, checking every few milliseconds, for at most `limit`.
pub async fn wait_until(limit: Duration, mut done: impl FnMut() -> bool) {
    within(limit, async {
        while !done() {
            glommio::timer::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

pub const NONE: i16 = 0;

/// A member's session and rebalance timeouts.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub session_ms: i32,
    pub rebalance_ms: i32,
}

impl Timeouts {
    pub const fn new(session_ms: i32, rebalance_ms: i32) -> Timeouts {
        Timeouts {
            session_ms,
            rebalance_ms,
        }
    }
}

/// Timeouts that never pass in a test.
pub const LONG: Timeouts = Timeouts::new(10_000, 10_000);

pub fn err(e: ResponseError) -> i16 {
    e.code()
}

/// Short timeouts, so that tests finish quickly; the coordinator's rules are Kafka's.
pub fn fast_config() -> GroupConfig {
    GroupConfig {
        min_session_timeout_ms: 10,
        max_session_timeout_ms: 60_000,
        initial_rebalance_delay_ms: 50,
        ..GroupConfig::default()
    }
}

/// A shard's storage for the offsets logs under `dir` (page cache IO: tests need no O_DIRECT).
pub async fn shard_storage(dir: &Path) -> Rc<ShardStorage> {
    let config = StorageConfig {
        io_mode: IoMode::Buffered,
        write_buffer_bytes: 64 << 10,
        writes_in_flight_max: 2,
        preallocate_bytes: 1 << 20,
        cache_bytes_max: 4 << 20,
        ..StorageConfig::default()
    };
    let mode = resolve_io_mode(dir, config.io_mode).unwrap();
    ShardStorage::open(dir, config, mode).await.unwrap()
}

/// The log settings the broker gives an offsets partition.
pub fn offsets_log_config(config: &GroupConfig) -> storage::LogConfig {
    let defaults = crate::config::TopicDefaults {
        partitions: 1,
        log: storage::LogConfig::default(),
    };
    crate::topic_config::log_config(
        &super::offsets_topic_configs(config),
        &Default::default(),
        &defaults,
    )
}

/// The offsets partitions of one broker, all on this executor: the Dispatch of the tests.
pub struct Cluster {
    pub logs: Vec<Rc<Log>>,
    pub coordinators: Vec<Rc<Coordinator>>,
}

/// The one topic the tests' broker does not have.
pub const MISSING_TOPIC: &str = "missing";

impl Cluster {
    pub async fn open(dir: &Path, partitions: i32, config: GroupConfig) -> Rc<Cluster> {
        let storage = shard_storage(dir).await;
        let mut logs = Vec::new();
        let mut coordinators = Vec::new();
        for p in 0..partitions {
            let log_dir = dir.join(format!("{}-{p}", super::OFFSETS_TOPIC));
            let log = storage
                .open_log(&log_dir, offsets_log_config(&config))
                .await
                .unwrap();
            coordinators.push(
                Coordinator::open(super::tests::offsets_partition(&log), config.clone())
                    .await
                    .unwrap(),
            );
            logs.push(log);
        }
        Rc::new(Cluster { logs, coordinators })
    }

    pub async fn close(&self) {
        for c in &self.coordinators {
            c.close().await;
        }
    }

    pub fn client(self: &Rc<Self>, client_id: &str) -> Client {
        Client {
            cluster: self.clone(),
            client_id: client_id.to_owned(),
        }
    }
}

impl Dispatch for Cluster {
    fn offsets_partitions(&self) -> i32 {
        self.coordinators.len() as i32
    }

    fn has_partition(&self, topic: &str, partition: i32) -> bool {
        topic != MISSING_TOPIC && partition >= 0
    }

    fn coordinator(&self, partition: i32) -> Option<NodeEndpoint> {
        (partition >= 0 && partition < self.offsets_partitions()).then(|| NodeEndpoint {
            host: "localhost".into(),
            ..NODE
        })
    }

    async fn call(&self, partition: i32, call: GroupCall) -> GroupReply {
        match self.coordinators.get(partition as usize) {
            Some(coordinator) => coordinator.call(call).await,
            None => GroupReply::Unavailable(ResponseError::NotCoordinator),
        }
    }
}

pub const NODE: NodeEndpoint = NodeEndpoint {
    node_id: 7,
    host: String::new(),
    port: 19092,
};

/// A client of the tests' broker: sends requests through [`handle`].
#[derive(Clone)]
pub struct Client {
    pub cluster: Rc<Cluster>,
    pub client_id: String,
}

/// A member as the tests track it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Joined {
    pub member_id: String,
    pub generation: i32,
    pub leader: String,
    pub protocol: Option<String>,
    /// (member id, metadata) for the leader.
    pub members: Vec<(String, Bytes)>,
}

impl Client {
    pub fn ctx(&self, version: i16) -> RequestContext {
        RequestContext {
            api_version: version,
            client_id: self.client_id.clone(),
            client_host: "/127.0.0.1".into(),
        }
    }

    pub async fn send(&self, request: impl Into<Request>, version: i16) -> Response {
        let request = request.into();
        let api_key = request.api_key();
        let response = handle(request, &self.ctx(version), &*self.cluster).await;
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version);
        if let Err(e) = net::encode_response(&header, response.clone()) {
            panic!("{api_key:?} v{version} response does not encode: {e}: {response:?}");
        }
        response
    }

    pub async fn join_request(
        &self,
        version: i16,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        protocols: &[(&str, Bytes)],
        timeouts: Timeouts,
    ) -> JoinGroupResponse {
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_member_id(s(member_id))
            .with_group_instance_id(instance.map(s))
            .with_session_timeout_ms(timeouts.session_ms)
            .with_rebalance_timeout_ms(if version >= 1 {
                timeouts.rebalance_ms
            } else {
                -1
            })
            .with_protocol_type(s("consumer"))
            .with_protocols(
                protocols
                    .iter()
                    .map(|(name, metadata)| {
                        JoinGroupRequestProtocol::default()
                            .with_name(s(name))
                            .with_metadata(metadata.clone())
                    })
                    .collect(),
            );
        match self.send(request, version).await {
            Response::JoinGroup(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Joins as a new member would (KIP-394 round trip included) and returns the answer.
    pub async fn join(
        &self,
        version: i16,
        group: &str,
        instance: Option<&str>,
        protocols: &[(&str, Bytes)],
        timeouts: Timeouts,
    ) -> Joined {
        let mut response = self
            .join_request(version, group, "", instance, protocols, timeouts)
            .await;
        if response.error_code == err(ResponseError::MemberIdRequired) {
            let member_id = response.member_id.to_string();
            response = self
                .join_request(version, group, &member_id, instance, protocols, timeouts)
                .await;
        }
        joined(response)
    }

    /// Joins again as `member_id`.
    pub async fn rejoin(
        &self,
        version: i16,
        group: &str,
        member_id: &str,
        instance: Option<&str>,
        protocols: &[(&str, Bytes)],
        timeouts: Timeouts,
    ) -> Joined {
        joined(
            self.join_request(version, group, member_id, instance, protocols, timeouts)
                .await,
        )
    }

    pub async fn sync(
        &self,
        version: i16,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
        assignments: &[(String, Bytes)],
    ) -> SyncGroupResponse {
        let request = SyncGroupRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance.map(s))
            .with_assignments(
                assignments
                    .iter()
                    .map(|(member, assignment)| {
                        SyncGroupRequestAssignment::default()
                            .with_member_id(s(member))
                            .with_assignment(assignment.clone())
                    })
                    .collect(),
            );
        match self.send(request, version).await {
            Response::SyncGroup(r) => r,
            other => panic!("{other:?}"),
        }
    }

    pub async fn heartbeat(
        &self,
        version: i16,
        group: &str,
        generation: i32,
        member_id: &str,
        instance: Option<&str>,
    ) -> i16 {
        let request = HeartbeatRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id(generation)
            .with_member_id(s(member_id))
            .with_group_instance_id(instance.map(s));
        match self.send(request, version).await {
            Response::Heartbeat(r) => r.error_code,
            other => panic!("{other:?}"),
        }
    }

    /// Heartbeats every `interval` until the answer is an error; returns it.
    pub async fn heartbeat_until_error(
        &self,
        group: &str,
        generation: i32,
        member_id: &str,
        interval: Duration,
    ) -> i16 {
        loop {
            let error = self.heartbeat(4, group, generation, member_id, None).await;
            if error != NONE {
                return error;
            }
            glommio::timer::sleep(interval).await;
        }
    }

    pub async fn leave(
        &self,
        version: i16,
        group: &str,
        members: &[(&str, Option<&str>)],
    ) -> LeaveGroupResponse {
        let mut request = LeaveGroupRequest::default().with_group_id(GroupId(s(group)));
        if version >= 3 {
            request.members = members
                .iter()
                .map(|(member, instance)| {
                    MemberIdentity::default()
                        .with_member_id(s(member))
                        .with_group_instance_id(instance.map(s))
                })
                .collect();
        } else {
            request.member_id = s(members[0].0);
        }
        match self.send(request, version).await {
            Response::LeaveGroup(r) => r,
            other => panic!("{other:?}"),
        }
    }

    pub async fn commit(
        &self,
        version: i16,
        group: &str,
        generation: i32,
        member_id: &str,
        offsets: &[(&str, i32, i64)],
    ) -> OffsetCommitResponse {
        let topics = offsets
            .iter()
            .map(|&(topic, partition, offset)| {
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![
                        OffsetCommitRequestPartition::default()
                            .with_partition_index(partition)
                            .with_committed_offset(offset)
                            .with_committed_leader_epoch(if version >= 6 { 3 } else { -1 })
                            .with_committed_metadata(Some(s(&format!("m{offset}")))),
                    ])
            })
            .collect();
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_generation_id_or_member_epoch(generation)
            .with_member_id(s(member_id))
            .with_topics(topics);
        match self.send(request, version).await {
            Response::OffsetCommit(r) => r,
            other => panic!("{other:?}"),
        }
    }

    /// Commits as a consumer outside group management, and checks it was taken.
    pub async fn commit_simple(&self, group: &str, offsets: &[(&str, i32, i64)]) {
        let response = self.commit(8, group, -1, "", offsets).await;
        assert_eq!(commit_errors(&response), vec![NONE; offsets.len()]);
    }

    /// The committed offset of each partition (v7, one group), -1 for none.
    pub async fn fetch(&self, group: &str, partitions: &[(&str, i32)]) -> Vec<i64> {
        let topics = partitions
            .iter()
            .map(|&(topic, partition)| {
                OffsetFetchRequestTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partition_indexes(vec![partition])
            })
            .collect();
        let request = OffsetFetchRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(Some(topics));
        match self.send(request, 7).await {
            Response::OffsetFetch(r) => {
                assert_eq!(r.error_code, NONE);
                r.topics
                    .iter()
                    .flat_map(|t| t.partitions.iter().map(|p| p.committed_offset))
                    .collect()
            }
            other => panic!("{other:?}"),
        }
    }
}

pub fn joined(response: JoinGroupResponse) -> Joined {
    assert_eq!(
        response.error_code,
        NONE,
        "join failed: {:?}",
        ResponseError::try_from_code(response.error_code)
    );
    Joined {
        member_id: response.member_id.to_string(),
        generation: response.generation_id,
        leader: response.leader.to_string(),
        protocol: response.protocol_name.map(|p| p.to_string()),
        members: response
            .members
            .into_iter()
            .map(|m| (m.member_id.to_string(), m.metadata))
            .collect(),
    }
}

pub fn commit_errors(response: &OffsetCommitResponse) -> Vec<i16> {
    response
        .topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect()
}

pub fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_owned())
}

/// A consumer's subscription metadata, as Kafka's clients write it (version 1).
pub fn subscription(topics: &[&str]) -> Bytes {
    let subscription =
        ConsumerProtocolSubscription::default().with_topics(topics.iter().map(|t| s(t)).collect());
    let mut buf = BytesMut::new();
    buf.extend_from_slice(&1i16.to_be_bytes());
    subscription.encode(&mut buf, 1).unwrap();
    buf.freeze()
}

/// A "consumer" member's protocols: one assignor subscribing to `topics`.
pub fn range_of(topics: &[&str]) -> Vec<(&'static str, Bytes)> {
    vec![("range", subscription(topics))]
}

/// Joins `clients` at once (each with its own protocols); returns their answers in order.
pub async fn join_all(
    clients: &[Client],
    group: &str,
    protocols: &[Vec<(&'static str, Bytes)>],
    timeouts: Timeouts,
) -> Vec<Joined> {
    let tasks: Vec<_> = clients
        .iter()
        .zip(protocols)
        .map(|(client, protocols)| {
            let (client, group, protocols) = (client.clone(), group.to_owned(), protocols.clone());
            glommio::spawn_local(
                async move { client.join(5, &group, None, &protocols, timeouts).await },
            )
        })
        .collect();
    let mut joined = Vec::new();
    for task in tasks {
        joined.push(task.await);
    }
    joined
}

/// Syncs every member at once, followers first; the leader hands out `assignment_of` each.
pub async fn sync_all(
    clients: &[Client],
    group: &str,
    members: &[Joined],
    assignment_of: impl Fn(&str) -> Bytes,
) -> Vec<Bytes> {
    let leader = &members[0].leader;
    let assignments: Vec<(String, Bytes)> = members
        .iter()
        .map(|m| (m.member_id.clone(), assignment_of(&m.member_id)))
        .collect();
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by_key(|&i| members[i].member_id == *leader);
    let mut tasks = Vec::new();
    for i in order {
        let (client, group, member) = (clients[i].clone(), group.to_owned(), members[i].clone());
        let assignments = if member.member_id == *leader {
            assignments.clone()
        } else {
            Vec::new()
        };
        tasks.push((
            i,
            glommio::spawn_local(async move {
                client
                    .sync(
                        3,
                        &group,
                        member.generation,
                        &member.member_id,
                        None,
                        &assignments,
                    )
                    .await
            }),
        ));
        // Let the followers park before the leader comes.
        future::yield_now().await;
    }
    let mut results = vec![Bytes::new(); members.len()];
    for (i, task) in tasks {
        let response = task.await;
        assert_eq!(response.error_code, NONE);
        results[i] = response.assignment;
    }
    results
}

pub fn opaque_assignment(member_id: &str) -> Bytes {
    // Not a valid ConsumerProtocolAssignment on purpose: the coordinator must not look.
    let mut bytes = vec![0xff, 0x00, 0x13];
    bytes.extend_from_slice(member_id.as_bytes());
    Bytes::from(bytes)
}

/// Members of a new group (one per client, each with its protocols), joined and synced:
/// Stable in generation 1.
pub async fn stable_group(
    cluster: &Rc<Cluster>,
    client_ids: &[&str],
    group: &str,
    protocols: &[Vec<(&'static str, Bytes)>],
    timeouts: Timeouts,
) -> (Vec<Client>, Vec<Joined>) {
    let clients: Vec<Client> = client_ids.iter().map(|c| cluster.client(c)).collect();
    let members = join_all(&clients, group, protocols, timeouts).await;
    assert!(members.iter().all(|m| m.generation == 1));
    sync_all(&clients, group, &members, opaque_assignment).await;
    (clients, members)
}

/// Everything a group coordinator call and reply carries can cross shards.
#[test]
fn calls_and_replies_are_send() {
    fn send<T: Send>() {}
    send::<GroupCall>();
    send::<GroupReply>();
}

/// An offsets partition of a node of its own over `log`.
pub fn offsets_partition(log: &Rc<storage::Log>) -> Rc<crate::partition::Partition> {
    Rc::new(crate::partition::Partition::new(
        super::OFFSETS_TOPIC.to_string(),
        0,
        log.clone(),
        model::LeaderEpoch::default(),
        None,
    ))
}
