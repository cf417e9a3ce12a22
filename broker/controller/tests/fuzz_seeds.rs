//! The seeds of the `controller_frame` fuzz target (`fuzz/corpus/controller_frame/`) are frames
//! `wire::encode` writes, one for each kind of Raft message that travels between nodes, from
//! node 1 to node 2 of cluster "spindle" (what the target decodes as). This test keeps them so:
//! it fails when the encoding changes under them.
//! `SPINDLE_WRITE_FUZZ_SEEDS=1 cargo test -p controller --test fuzz_seeds` writes them again.
#![allow(clippy::unwrap_used)]
// test code: a panic is a failed test
// The seed files are this test's subject; the crate's own code stays free of IO.
#![allow(clippy::disallowed_methods)]

use std::path::PathBuf;

use bytes::Bytes;
use controller::wire;
use model::NodeId;
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

#[test]
fn the_fuzz_seeds_are_what_encode_writes() {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus/controller_frame");
    let write = std::env::var_os("SPINDLE_WRITE_FUZZ_SEEDS").is_some();
    for (name, m) in seeds() {
        let frame = wire::encode("spindle", NodeId(1), NodeId(2), &m).unwrap();
        // Voters: nodes 0, 1 and 2.
        let decoded = wire::decode(&frame, "spindle", NodeId(2), &[1, 2, 3], 1 << 20).unwrap();
        assert_eq!(decoded.message, m, "{name}");
        let path = dir.join(name);
        if write {
            std::fs::write(&path, &frame).unwrap();
        }
        assert_eq!(
            std::fs::read(&path).ok(),
            Some(frame),
            "{} is stale: write the seeds again (see this file's comment)",
            path.display()
        );
    }
}
