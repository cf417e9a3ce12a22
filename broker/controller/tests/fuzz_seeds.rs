//! The seeds of the `controller_frame` fuzz target (`fuzz/corpus/controller_frame/`) are frames
//! `wire::encode` writes, one for each kind of Raft message that travels between nodes, from
//! node 1 to node 2 of cluster "spindle" (what the target decodes as); those of `cluster_frame`
//! (`fuzz/corpus/cluster_frame/`) are what `envelope::encode` writes, one for each kind of frame;
//! those of `replica_frame` (`fuzz/corpus/replica_frame/`) what `replica_wire::encode` writes.
//! This test keeps them so: it fails when the encoding changes under them.
//! `SPINDLE_WRITE_FUZZ_SEEDS=1 cargo test -p controller --test fuzz_seeds` writes them again.
#![allow(clippy::unwrap_used)]
// test code: a panic is a failed test
// The seed files are this test's subject; the crate's own code stays free of IO.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;

use bytes::Bytes;
use controller::envelope::{
    self, Committed, Frame, Heartbeat, HeartbeatReply, NotCommitted, ProposeReply, Refusal,
};
use controller::{replica_wire, wire};
use model::{Applied, BrokerRegistration, Command, NodeId};
use raft::eraftpb::{Entry, Message, MessageType};

fn message(kind: MessageType) -> Message {
    let mut m = Message::default();
    m.set_msg_type(kind);
    // Raft ids of nodes 1 and 2 (raft id = node id + 1).
    m.from = 2;
    m.to = 3;
    m.term = 7;
    m.log_term = 6;
    m.index = 41;
    m.commit = 40;
    m
}

fn seeds() -> Vec<(&'static str, Message)> {
    use MessageType as M;
    let mut append = message(M::MsgAppend);
    append.set_entries(
        vec![
            Entry {
                term: 7,
                index: 42,
                data: Bytes::from_static(b"a metadata record"),
                ..Default::default()
            },
            Entry {
                term: 7,
                index: 43,
                ..Default::default()
            },
        ]
        .into(),
    );
    let mut rejected = message(M::MsgAppendResponse);
    rejected.reject = true;
    rejected.reject_hint = 30;
    let mut heartbeat = message(M::MsgHeartbeat);
    heartbeat.context = Bytes::from_static(b"read index context");
    let mut snapshot = message(M::MsgSnapshot);
    let s = snapshot.mut_snapshot();
    s.data = Bytes::from_static(b"metadata snapshot");
    s.mut_metadata().index = 40;
    s.mut_metadata().term = 6;
    s.mut_metadata().mut_conf_state().voters = vec![1, 2, 3];
    let mut read_index = message(M::MsgReadIndex);
    read_index.set_entries(
        vec![Entry {
            data: Bytes::from_static(b"ctx"),
            ..Default::default()
        }]
        .into(),
    );
    let mut pre_vote = message(M::MsgRequestPreVote);
    pre_vote.priority = 3;
    vec![
        ("append", append),
        ("append_response", message(M::MsgAppendResponse)),
        ("append_response_rejected", rejected),
        ("request_vote", message(M::MsgRequestVote)),
        ("request_vote_response", message(M::MsgRequestVoteResponse)),
        ("request_pre_vote", pre_vote),
        (
            "request_pre_vote_response",
            message(M::MsgRequestPreVoteResponse),
        ),
        ("snapshot", snapshot),
        ("heartbeat", heartbeat),
        ("heartbeat_response", message(M::MsgHeartbeatResponse)),
        ("timeout_now", message(M::MsgTimeoutNow)),
        ("transfer_leader", message(M::MsgTransferLeader)),
        ("read_index", read_index),
        ("read_index_response", message(M::MsgReadIndexResp)),
    ]
}

/// Writes (with SPINDLE_WRITE_FUZZ_SEEDS) or checks one seed file of `target`.
fn keep_seed(target: &str, name: &str, bytes: Vec<u8>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target);
    let path = dir.join(name);
    if std::env::var_os("SPINDLE_WRITE_FUZZ_SEEDS").is_some() {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(&path, &bytes).unwrap();
    }
    assert_eq!(
        std::fs::read(&path).ok(),
        Some(bytes),
        "{} is stale: write the seeds again (see this file's comment)",
        path.display()
    );
}

#[test]
fn the_fuzz_seeds_are_what_encode_writes() {
    for (name, m) in seeds() {
        let frame = wire::encode("spindle", NodeId(1), NodeId(2), &m).unwrap();
        // Voters: nodes 0, 1 and 2.
        let decoded = wire::decode(&frame, "spindle", NodeId(2), &[1, 2, 3], 1 << 20).unwrap();
        assert_eq!(decoded.message, m, "{name}");
        keep_seed("controller_frame", name, frame);
    }
}

fn cluster_seeds() -> Vec<(&'static str, Frame)> {
    let registration = BrokerRegistration {
        id: NodeId(2),
        host: "127.0.0.1".into(),
        port: 9093,
        cluster_listener: Some("127.0.0.1:9193".into()),
        shards: 2,
        rack: Some("rack-a".into()),
        fenced: false,
        replication_ports: Vec::new(),
    };
    let raft = wire::encode("spindle", NodeId(1), NodeId(2), &seeds()[0].1).unwrap();
    vec![
        (
            "hello",
            Frame::Hello {
                node: NodeId(2),
                incarnation: 77,
                voters: "1@127.0.0.1:9192,2@127.0.0.1:9193".into(),
            },
        ),
        ("hello_reply", Frame::HelloReply { refused: None }),
        (
            "hello_refused",
            Frame::HelloReply {
                refused: Some("node id 2 is already in use".into()),
            },
        ),
        ("raft", Frame::Raft(Bytes::from(raft))),
        (
            "heartbeat",
            Frame::Heartbeat(Heartbeat {
                id: 9,
                incarnation: 77,
                registration,
                metadata_version: 12,
                shutting_down: false,
            }),
        ),
        (
            "heartbeat_reply",
            Frame::HeartbeatReply(HeartbeatReply {
                id: 9,
                controller: Some(NodeId(1)),
                accepted: true,
                refused: None,
                fenced: false,
                metadata: Some(Bytes::from_static(b"metadata snapshot")),
                metadata_version: 14,
            }),
        ),
        (
            "propose",
            Frame::Propose {
                id: 10,
                commands: vec![
                    Command::TakeProducerIdBlock,
                    Command::FenceBroker(NodeId(3)),
                ],
            },
        ),
        (
            "propose_reply",
            Frame::ProposeReply(ProposeReply {
                id: 10,
                result: Ok(Committed {
                    outcomes: vec![
                        Ok(Applied::ProducerIdBlock(4)),
                        Err(Refusal {
                            code: 36,
                            message: "topic t already exists".into(),
                        }),
                    ],
                    metadata_version: 13,
                    metadata: None,
                }),
            }),
        ),
        (
            "propose_not_controller",
            Frame::ProposeReply(ProposeReply {
                id: 11,
                result: Err(NotCommitted::NotController(Some(NodeId(3)))),
            }),
        ),
        (
            "metadata",
            Frame::Metadata(Bytes::from_static(b"metadata snapshot")),
        ),
    ]
}

#[test]
fn the_cluster_fuzz_seeds_are_what_encode_writes() {
    for (name, frame) in cluster_seeds() {
        let bytes = envelope::encode(NodeId(2), &frame);
        let (from, decoded) = envelope::decode(&bytes, 1 << 20).unwrap();
        assert_eq!((from, &decoded), (NodeId(2), &frame), "{name}");
        keep_seed("cluster_frame", name, bytes);
    }
}

/// Seeds of `replica_frame`: one frame of each kind, as the bytes after the length prefix (what
/// `replica_wire::decode` takes).
fn replica_seeds() -> Vec<(&'static str, replica_wire::Frame)> {
    use replica_wire::{Frame, Hello, PartitionKey, ReplicaMessage as M};
    let key = |partition| PartitionKey {
        topic: model::TopicId(uuid::Uuid::from_u128(0x5eed)),
        partition,
    };
    vec![
        (
            "hello",
            Frame::Hello(Hello {
                node: NodeId(1),
                shard: model::ShardId(0),
                cluster_id: "spindle".into(),
            }),
        ),
        ("refused", Frame::Refused("shard 1 is not shard 0".into())),
        (
            "append",
            Frame::Message(M::Append {
                key: key(3),
                leader_epoch: 2,
                high_watermark: 10,
                base_offset: 12,
                batches: vec![Bytes::from_static(b"batch one"), Bytes::from_static(b"two")],
            }),
        ),
        (
            "epoch_end",
            Frame::Message(M::EpochEnd {
                key: key(3),
                leader_epoch: 2,
                epoch: Some(1),
                end_offset: 7,
            }),
        ),
        (
            "progress",
            Frame::Message(M::Progress {
                key: key(3),
                leader_epoch: 2,
                log_end: 12,
                written: 12,
                durable: 11,
            }),
        ),
        (
            "epoch_query",
            Frame::Message(M::EpochQuery {
                key: key(3),
                leader_epoch: 2,
                epoch: 1,
            }),
        ),
        (
            "stale",
            Frame::Message(M::Stale {
                key: key(3),
                leader_epoch: 2,
                follower_epoch: 4,
            }),
        ),
    ]
}

#[test]
fn the_replica_fuzz_seeds_are_what_encode_writes() {
    let limits = replica_wire::Limits {
        frame_bytes_max: 1 << 20,
        batches_max: 64,
    };
    for (name, frame) in replica_seeds() {
        let encoded = replica_wire::encode(frame.clone()).unwrap();
        let mut bytes = encoded.header[replica_wire::LENGTH_BYTES..].to_vec();
        for batch in &encoded.batches {
            bytes.extend_from_slice(batch);
        }
        let decoded = replica_wire::decode(Bytes::from(bytes.clone()), limits).unwrap();
        assert_eq!(decoded, frame, "{name}");
        keep_seed("replica_frame", name, bytes);
    }
}
