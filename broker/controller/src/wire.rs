//! The node-to-node frames of the controller quorum: one Raft message in a FlatBuffers envelope
//! (`schema/fbs/controller.fbs`) that names the cluster, the sender and the receiver.
//!
//! Decoding takes bytes off a socket: it verifies the buffer (bounded depth and table count)
//! before reading a field, refuses frames over the host's size limit before looking inside, and
//! allocates only in proportion to the frame. raft-rs's own protobuf decoder never sees these
//! bytes (RUSTSEC-2024-0437).

use bytes::Bytes;
use flatbuffers::{FlatBufferBuilder, VerifierOptions, WIPOffset};
use model::NodeId;
use raft::eraftpb::{ConfState, Entry, EntryType, Message, MessageType, Snapshot};
use schema::controller as fb;

/// Why a frame was refused; the frame is dropped and nothing else is affected.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("a frame of {bytes} bytes is over the limit of {max} bytes")]
    TooLarge { bytes: usize, max: usize },
    #[error("not a controller frame (file identifier)")]
    NotAFrame,
    #[error("the frame does not verify: {0}")]
    Invalid(#[from] flatbuffers::InvalidFlatbuffer),
    #[error("the frame is from cluster {theirs:?}, this is cluster {ours:?}")]
    ForeignCluster { ours: String, theirs: String },
    #[error("the frame is for node {to}, not for this node")]
    NotForUs { to: i32 },
    #[error("the frame's sender {0} is not a voter of this quorum")]
    UnknownSender(i32),
    #[error("unknown message kind {0}")]
    UnknownKind(u8),
    #[error("raft message {0:?} never travels between nodes")]
    LocalMessage(MessageType),
    #[error("only normal entries travel between nodes (got {0:?})")]
    NotNormalEntry(EntryType),
    #[error(
        "the snapshot's configuration has learners or a joint state, which this quorum never uses"
    )]
    UnsupportedConfState,
}

/// A root offset and a file identifier.
const IDENTIFIED_BYTES_MIN: usize = 8;

/// Depth of the schema's deepest path (Frame → Message → entries → Entry → data) with slack.
const DEPTH_MAX: usize = 8;

fn kind_of(t: MessageType) -> Result<fb::MessageKind, FrameError> {
    use MessageType as M;
    use fb::MessageKind as K;
    Ok(match t {
        M::MsgAppend => K::Append,
        M::MsgAppendResponse => K::AppendResponse,
        M::MsgRequestVote => K::RequestVote,
        M::MsgRequestVoteResponse => K::RequestVoteResponse,
        M::MsgRequestPreVote => K::RequestPreVote,
        M::MsgRequestPreVoteResponse => K::RequestPreVoteResponse,
        M::MsgSnapshot => K::Snapshot,
        M::MsgHeartbeat => K::Heartbeat,
        M::MsgHeartbeatResponse => K::HeartbeatResponse,
        M::MsgTimeoutNow => K::TimeoutNow,
        M::MsgTransferLeader => K::TransferLeader,
        M::MsgReadIndex => K::ReadIndex,
        M::MsgReadIndexResp => K::ReadIndexResponse,
        other => return Err(FrameError::LocalMessage(other)),
    })
}

fn type_of(k: fb::MessageKind) -> Result<MessageType, FrameError> {
    use MessageType as M;
    use fb::MessageKind as K;
    Ok(match k {
        K::Append => M::MsgAppend,
        K::AppendResponse => M::MsgAppendResponse,
        K::RequestVote => M::MsgRequestVote,
        K::RequestVoteResponse => M::MsgRequestVoteResponse,
        K::RequestPreVote => M::MsgRequestPreVote,
        K::RequestPreVoteResponse => M::MsgRequestPreVoteResponse,
        K::Snapshot => M::MsgSnapshot,
        K::Heartbeat => M::MsgHeartbeat,
        K::HeartbeatResponse => M::MsgHeartbeatResponse,
        K::TimeoutNow => M::MsgTimeoutNow,
        K::TransferLeader => M::MsgTransferLeader,
        K::ReadIndex => M::MsgReadIndex,
        K::ReadIndexResponse => M::MsgReadIndexResp,
        other => return Err(FrameError::UnknownKind(other.0)),
    })
}

/// Encodes `message` (from `from` to `to`) as a frame of `cluster_id`.
pub fn encode(
    cluster_id: &str,
    from: NodeId,
    to: NodeId,
    message: &Message,
) -> Result<Vec<u8>, FrameError> {
    let kind = kind_of(message.get_msg_type())?;
    let payload: usize = message
        .entries
        .iter()
        .map(|e| e.data.len() + 32)
        .sum::<usize>()
        + message.get_snapshot().data.len();
    let mut fbb = FlatBufferBuilder::with_capacity(256 + payload);
    let mut entries = Vec::with_capacity(message.entries.len());
    for e in message.entries.iter() {
        if e.get_entry_type() != EntryType::EntryNormal {
            return Err(FrameError::NotNormalEntry(e.get_entry_type()));
        }
        let data = fbb.create_vector(&e.data);
        entries.push(fb::Entry::create(
            &mut fbb,
            &fb::EntryArgs {
                term: e.term,
                index: e.index,
                data: Some(data),
            },
        ));
    }
    let entries = (!entries.is_empty()).then(|| fbb.create_vector(&entries));
    let snapshot = match message.has_snapshot() {
        true => Some(encode_snapshot(&mut fbb, message.get_snapshot())?),
        false => None,
    };
    let context = (!message.context.is_empty()).then(|| fbb.create_vector(&message.context));
    let msg = fb::Message::create(
        &mut fbb,
        &fb::MessageArgs {
            kind,
            term: message.term,
            log_term: message.log_term,
            index: message.index,
            commit: message.commit,
            commit_term: message.commit_term,
            entries,
            snapshot,
            reject: message.reject,
            reject_hint: message.reject_hint,
            request_snapshot: message.request_snapshot,
            context,
            priority: message.priority,
        },
    );
    let cluster_id = fbb.create_string(cluster_id);
    let frame = fb::Frame::create(
        &mut fbb,
        &fb::FrameArgs {
            cluster_id: Some(cluster_id),
            from: from.0,
            to: to.0,
            message: Some(msg),
        },
    );
    fb::finish_frame_buffer(&mut fbb, frame);
    Ok(fbb.finished_data().to_vec())
}

fn encode_snapshot<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    s: &Snapshot,
) -> Result<WIPOffset<fb::Snapshot<'a>>, FrameError> {
    let meta = s.get_metadata();
    let conf = meta.get_conf_state();
    if !conf.learners.is_empty()
        || !conf.voters_outgoing.is_empty()
        || !conf.learners_next.is_empty()
    {
        return Err(FrameError::UnsupportedConfState);
    }
    let voters = fbb.create_vector(&conf.voters);
    let data = fbb.create_vector(&s.data);
    Ok(fb::Snapshot::create(
        fbb,
        &fb::SnapshotArgs {
            index: meta.index,
            term: meta.term,
            voters: Some(voters),
            data: Some(data),
        },
    ))
}

/// What a verified frame says: who sent it, and the Raft message (with `from`/`to` set from the
/// envelope).
#[derive(Debug)]
pub struct Decoded {
    pub from: NodeId,
    pub message: Message,
}

/// Decodes and checks a frame that arrived for node `me` of `cluster_id`, whose voters are
/// `voters` (raft ids). `frame_bytes_max` is the host's limit, checked before anything is read.
pub fn decode(
    bytes: &[u8],
    cluster_id: &str,
    me: NodeId,
    voters: &[u64],
    frame_bytes_max: usize,
) -> Result<Decoded, FrameError> {
    if bytes.len() > frame_bytes_max {
        return Err(FrameError::TooLarge {
            bytes: bytes.len(),
            max: frame_bytes_max,
        });
    }
    // flatbuffers' identifier check asserts that the buffer is long enough: check first.
    if bytes.len() < IDENTIFIED_BYTES_MIN || !fb::frame_buffer_has_identifier(bytes) {
        return Err(FrameError::NotAFrame);
    }
    let opts = VerifierOptions {
        max_depth: DEPTH_MAX,
        max_apparent_size: frame_bytes_max,
        ..Default::default()
    };
    let frame = fb::root_as_frame_with_opts(&opts, bytes)?;
    if frame.cluster_id() != cluster_id {
        return Err(FrameError::ForeignCluster {
            ours: cluster_id.to_owned(),
            theirs: frame.cluster_id().to_owned(),
        });
    }
    if frame.to() != me.0 {
        return Err(FrameError::NotForUs { to: frame.to() });
    }
    let from = NodeId(frame.from());
    let from_raft = crate::types::raft_id(from)
        .ok()
        .filter(|id| from != me && voters.contains(id))
        .ok_or(FrameError::UnknownSender(frame.from()))?;
    let me_raft = crate::types::raft_id(me).map_err(|_| FrameError::NotForUs { to: frame.to() })?;
    let m = frame.message();
    let mut message = Message::default();
    message.set_msg_type(type_of(m.kind())?);
    message.from = from_raft;
    message.to = me_raft;
    message.term = m.term();
    message.log_term = m.log_term();
    message.index = m.index();
    message.commit = m.commit();
    message.commit_term = m.commit_term();
    if let Some(entries) = m.entries() {
        let mut out = Vec::with_capacity(entries.len());
        for e in entries.iter() {
            out.push(Entry {
                term: e.term(),
                index: e.index(),
                data: e
                    .data()
                    .map(|d| Bytes::copy_from_slice(d.bytes()))
                    .unwrap_or_default(),
                ..Default::default()
            });
        }
        message.set_entries(out.into());
    }
    if let Some(s) = m.snapshot() {
        let mut snapshot = Snapshot::default();
        let meta = snapshot.mut_metadata();
        meta.index = s.index();
        meta.term = s.term();
        meta.set_conf_state(ConfState {
            voters: s.voters().map(|v| v.iter().collect()).unwrap_or_default(),
            ..Default::default()
        });
        snapshot.data = s
            .data()
            .map(|d| Bytes::copy_from_slice(d.bytes()))
            .unwrap_or_default();
        message.set_snapshot(snapshot);
    }
    message.reject = m.reject();
    message.reject_hint = m.reject_hint();
    message.request_snapshot = m.request_snapshot();
    message.context = m
        .context()
        .map(|c| Bytes::copy_from_slice(c.bytes()))
        .unwrap_or_default();
    message.priority = m.priority();
    Ok(Decoded { from, message })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const VOTERS: [u64; 3] = [1, 2, 3];

    fn append(entries: Vec<(u64, Vec<u8>)>) -> Message {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgAppend);
        // Raft ids of nodes 1 and 2 (raft id = node id + 1).
        m.from = 2;
        m.to = 3;
        m.term = 7;
        m.log_term = 6;
        m.index = 41;
        m.commit = 40;
        m.set_entries(
            entries
                .into_iter()
                .map(|(index, data)| Entry {
                    index,
                    term: 7,
                    data: data.into(),
                    ..Default::default()
                })
                .collect::<Vec<_>>()
                .into(),
        );
        m
    }

    fn decode2(bytes: &[u8]) -> Result<Decoded, FrameError> {
        decode(bytes, "cluster", NodeId(2), &VOTERS, 1 << 20)
    }

    #[test]
    fn a_frame_round_trips_and_the_envelope_is_checked() {
        let m = append(vec![(42, b"a".to_vec()), (43, Vec::new())]);
        let frame = encode("cluster", NodeId(1), NodeId(2), &m).expect("encode");
        let d = decode2(&frame).expect("decode");
        assert_eq!(d.from, NodeId(1));
        assert_eq!(d.message, m);

        assert!(matches!(
            decode(&frame, "other", NodeId(2), &VOTERS, 1 << 20),
            Err(FrameError::ForeignCluster { .. })
        ));
        assert!(matches!(
            decode(&frame, "cluster", NodeId(3), &VOTERS, 1 << 20),
            Err(FrameError::NotForUs { to: 2 })
        ));
        assert!(matches!(
            decode(&frame, "cluster", NodeId(2), &[3, 4], 1 << 20),
            Err(FrameError::UnknownSender(1))
        ));
        assert!(matches!(
            decode(&frame, "cluster", NodeId(2), &VOTERS, 16),
            Err(FrameError::TooLarge { .. })
        ));
        let from_self = encode("cluster", NodeId(2), NodeId(2), &m).expect("encode");
        assert!(matches!(
            decode2(&from_self),
            Err(FrameError::UnknownSender(2))
        ));
    }

    #[test]
    fn a_snapshot_round_trips_and_local_messages_do_not_travel() {
        let mut m = Message::default();
        m.set_msg_type(MessageType::MsgSnapshot);
        // Raft ids of nodes 1 and 2 (raft id = node id + 1).
        m.from = 2;
        m.to = 3;
        let s = m.mut_snapshot();
        s.data = Bytes::from_static(b"state");
        s.mut_metadata().index = 9;
        s.mut_metadata().term = 3;
        s.mut_metadata().mut_conf_state().voters = VOTERS.to_vec();
        let frame = encode("cluster", NodeId(1), NodeId(2), &m).expect("encode");
        assert_eq!(decode2(&frame).expect("decode").message, m);

        m.mut_snapshot().mut_metadata().mut_conf_state().learners = vec![4];
        assert!(matches!(
            encode("cluster", NodeId(1), NodeId(2), &m),
            Err(FrameError::UnsupportedConfState)
        ));
        let mut hup = Message::default();
        hup.set_msg_type(MessageType::MsgHup);
        assert!(matches!(
            encode("cluster", NodeId(1), NodeId(2), &hup),
            Err(FrameError::LocalMessage(_))
        ));
    }

    proptest! {
        #[test]
        fn random_bytes_are_refused_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode2(&bytes);
        }

        #[test]
        fn a_damaged_frame_is_refused_or_decodes_without_a_panic(
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let m = append(vec![(42, b"some data".to_vec()), (43, b"more".to_vec())]);
            let mut frame = encode("cluster", NodeId(1), NodeId(2), &m).expect("encode");
            for (at, byte) in flips {
                let i = at.index(frame.len());
                frame[i] ^= byte;
            }
            let _ = decode2(&frame);
            let _ = decode2(&frame[..cut.index(frame.len())]);
        }
    }
}
