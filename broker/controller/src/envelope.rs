//! The frames nodes send each other on the cluster listener (`schema/fbs/cluster.fbs`), as plain
//! Rust values: the envelope around the quorum's own Raft frames ([`crate::wire`]) and the
//! broker-to-controller requests (heartbeats, forwarded proposals, metadata). IO-free like the
//! rest of the crate, so the fuzzer and the simulator can use it. Decoding trusts nothing: the
//! FlatBuffers verifier bounds the frame before any field is read, and every record inside is
//! decoded (and verified) by `model::record`.

use bytes::Bytes;
use flatbuffers::{FlatBufferBuilder, VerifierOptions, WIPOffset};
use model::{Applied, BrokerRegistration, Command, NodeId};
use schema::cluster as fb;

/// Why the active controller refused a command: a Kafka error code and a message for the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub code: i16,
    pub message: String,
}

/// What one committed command did: applied, or refused and why.
pub type Outcome = Result<Applied, Refusal>;

/// The Kafka error code a refusal without one travels as (UNKNOWN_SERVER_ERROR).
const UNKNOWN_SERVER_ERROR: i16 = -1;

#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// The dialer's first frame on a connection.
    Hello {
        node: NodeId,
        incarnation: u64,
        voters: String,
    },
    /// `None`: welcome; otherwise why the dialer may not join.
    HelloReply {
        refused: Option<String>,
    },
    /// One Raft message, as `controller::wire` encodes it.
    Raft(Bytes),
    Heartbeat(Heartbeat),
    HeartbeatReply(HeartbeatReply),
    Propose {
        id: u64,
        commands: Vec<Command>,
    },
    ProposeReply(ProposeReply),
    /// The active controller's newest metadata, for a broker that is no voter.
    Metadata(Bytes),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    pub id: u64,
    pub incarnation: u64,
    pub registration: BrokerRegistration,
    pub metadata_version: u64,
    pub shutting_down: bool,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct HeartbeatReply {
    pub id: u64,
    pub controller: Option<NodeId>,
    pub accepted: bool,
    pub refused: Option<String>,
    pub fenced: bool,
    /// The metadata snapshot (`model::snapshot`), when the broker is behind.
    pub metadata: Option<Bytes>,
    /// The active controller's metadata version when it answered (0 from any other node).
    pub metadata_version: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ProposeReply {
    pub id: u64,
    pub result: Result<Committed, NotCommitted>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    pub outcomes: Vec<Outcome>,
    pub metadata_version: u64,
    pub metadata: Option<Bytes>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum NotCommitted {
    /// The receiver is not the active controller; this one is, as far as it knows.
    NotController(Option<NodeId>),
    Failed(String),
}

/// Why a frame was refused.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("the frame does not verify: {0}")]
    Invalid(#[from] flatbuffers::InvalidFlatbuffer),
    #[error("missing the SPCL identifier")]
    NotAnEnvelope,
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("a record in the frame: {0}")]
    Record(String),
    #[error("the registration is not a RegisterBroker record")]
    NotARegistration,
}

const IDENTIFIER: &str = "SPCL";

pub fn encode(from: NodeId, frame: &Frame) -> Vec<u8> {
    let mut b = FlatBufferBuilder::new();
    let (kind, body) = match frame {
        Frame::Hello {
            node,
            incarnation,
            voters,
        } => {
            let voters = b.create_string(voters);
            let args = fb::HelloArgs {
                node: node.0,
                incarnation: *incarnation,
                voters: Some(voters),
            };
            (
                fb::Body::Hello,
                fb::Hello::create(&mut b, &args).as_union_value(),
            )
        }
        Frame::HelloReply { refused } => {
            let refused = refused.as_deref().map(|r| b.create_string(r));
            let args = fb::HelloReplyArgs { refused };
            let t = fb::HelloReply::create(&mut b, &args);
            (fb::Body::HelloReply, t.as_union_value())
        }
        Frame::Raft(bytes) => {
            let frame = b.create_vector(bytes);
            let args = fb::RaftArgs { frame: Some(frame) };
            (
                fb::Body::Raft,
                fb::Raft::create(&mut b, &args).as_union_value(),
            )
        }
        Frame::Heartbeat(h) => {
            let record = model::record::encode(&Command::RegisterBroker(h.registration.clone()));
            let registration = b.create_vector(&record);
            let args = fb::HeartbeatArgs {
                id: h.id,
                node: h.registration.id.0,
                incarnation: h.incarnation,
                registration: Some(registration),
                metadata_version: h.metadata_version,
                shutting_down: h.shutting_down,
            };
            let t = fb::Heartbeat::create(&mut b, &args);
            (fb::Body::Heartbeat, t.as_union_value())
        }
        Frame::HeartbeatReply(r) => {
            let refused = r.refused.as_deref().map(|s| b.create_string(s));
            let metadata = r.metadata.as_deref().map(|m| b.create_vector(m));
            let args = fb::HeartbeatReplyArgs {
                id: r.id,
                controller: r.controller.map_or(-1, |c| c.0),
                accepted: r.accepted,
                refused,
                fenced: r.fenced,
                metadata,
                metadata_version: r.metadata_version,
            };
            let t = fb::HeartbeatReply::create(&mut b, &args);
            (fb::Body::HeartbeatReply, t.as_union_value())
        }
        Frame::Propose { id, commands } => {
            let commands: Vec<_> = commands
                .iter()
                .map(|c| {
                    let record = b.create_vector(&model::record::encode(c));
                    fb::Command::create(
                        &mut b,
                        &fb::CommandArgs {
                            record: Some(record),
                        },
                    )
                })
                .collect();
            let commands = b.create_vector(&commands);
            let args = fb::ProposeArgs {
                id: *id,
                commands: Some(commands),
            };
            let t = fb::Propose::create(&mut b, &args);
            (fb::Body::Propose, t.as_union_value())
        }
        Frame::ProposeReply(r) => {
            let t = encode_propose_reply(&mut b, r);
            (fb::Body::ProposeReply, t.as_union_value())
        }
        Frame::Metadata(snapshot) => {
            let snapshot = b.create_vector(snapshot);
            let args = fb::MetadataArgs {
                snapshot: Some(snapshot),
            };
            let t = fb::Metadata::create(&mut b, &args);
            (fb::Body::Metadata, t.as_union_value())
        }
    };
    let args = fb::EnvelopeArgs {
        from: from.0,
        body_type: kind,
        body: Some(body),
    };
    let envelope = fb::Envelope::create(&mut b, &args);
    b.finish(envelope, Some(IDENTIFIER));
    b.finished_data().to_vec()
}

fn encode_propose_reply<'b>(
    b: &mut FlatBufferBuilder<'b>,
    r: &ProposeReply,
) -> WIPOffset<fb::ProposeReply<'b>> {
    let mut args = fb::ProposeReplyArgs {
        id: r.id,
        ..Default::default()
    };
    match &r.result {
        Ok(committed) => {
            let outcomes: Vec<_> = committed
                .outcomes
                .iter()
                .map(|o| {
                    let (changed, block, refused, code) = match o {
                        Ok(Applied::Unchanged) => (false, 0, None, 0),
                        Ok(Applied::Changed) => (true, 0, None, 0),
                        Ok(Applied::ProducerIdBlock(block)) => (true, *block, None, 0),
                        Err(e) => (false, 0, Some(e.message.as_str()), e.code),
                    };
                    let refused = refused.map(|s| b.create_string(s));
                    fb::Outcome::create(
                        b,
                        &fb::OutcomeArgs {
                            changed,
                            producer_id_block: block,
                            refused,
                            error_code: code,
                        },
                    )
                })
                .collect();
            args.outcomes = Some(b.create_vector(&outcomes));
            args.metadata_version = committed.metadata_version;
            args.metadata = committed.metadata.as_deref().map(|m| b.create_vector(m));
        }
        Err(NotCommitted::NotController(leader)) => {
            args.not_controller = leader.map_or(-1, |l| l.0);
            args.failed = Some(b.create_string("not the active controller"));
        }
        Err(NotCommitted::Failed(why)) => args.failed = Some(b.create_string(why)),
    }
    fb::ProposeReply::create(b, &args)
}

/// Decodes one frame (the bytes after the length prefix); `frame_bytes_max` bounds the verifier.
pub fn decode(bytes: &[u8], frame_bytes_max: usize) -> Result<(NodeId, Frame), FrameError> {
    // The identifier check reads 8 bytes without looking at the length (it would panic).
    if bytes.len() < 8 || !flatbuffers::buffer_has_identifier(bytes, IDENTIFIER, false) {
        return Err(FrameError::NotAnEnvelope);
    }
    let opts = VerifierOptions {
        max_depth: 16,
        max_tables: 1 << 16,
        max_apparent_size: frame_bytes_max,
        ..Default::default()
    };
    let e = flatbuffers::root_with_opts::<fb::Envelope>(&opts, bytes)?;
    let from = NodeId(e.from());
    let kind = e.body_type();
    let frame = if let Some(h) = e.body_as_hello() {
        Frame::Hello {
            node: NodeId(h.node()),
            incarnation: h.incarnation(),
            voters: h.voters().to_owned(),
        }
    } else if let Some(r) = e.body_as_hello_reply() {
        Frame::HelloReply {
            refused: r.refused().map(str::to_owned),
        }
    } else if let Some(r) = e.body_as_raft() {
        Frame::Raft(Bytes::copy_from_slice(r.frame().bytes()))
    } else if let Some(h) = e.body_as_heartbeat() {
        let registration = match model::record::decode(h.registration().bytes()) {
            Ok(Command::RegisterBroker(r)) if r.id.0 == h.node() => r,
            Ok(_) => return Err(FrameError::NotARegistration),
            Err(e) => return Err(FrameError::Record(e)),
        };
        Frame::Heartbeat(Heartbeat {
            id: h.id(),
            incarnation: h.incarnation(),
            registration,
            metadata_version: h.metadata_version(),
            shutting_down: h.shutting_down(),
        })
    } else if let Some(r) = e.body_as_heartbeat_reply() {
        Frame::HeartbeatReply(HeartbeatReply {
            id: r.id(),
            controller: (r.controller() >= 0).then(|| NodeId(r.controller())),
            accepted: r.accepted(),
            refused: r.refused().map(str::to_owned),
            fenced: r.fenced(),
            metadata: r.metadata().map(|m| Bytes::copy_from_slice(m.bytes())),
            metadata_version: r.metadata_version(),
        })
    } else if let Some(p) = e.body_as_propose() {
        let commands = p
            .commands()
            .iter()
            .map(|c| model::record::decode(c.record().bytes()).map_err(FrameError::Record))
            .collect::<Result<_, _>>()?;
        Frame::Propose {
            id: p.id(),
            commands,
        }
    } else if let Some(r) = e.body_as_propose_reply() {
        Frame::ProposeReply(decode_propose_reply(&r))
    } else if let Some(m) = e.body_as_metadata() {
        Frame::Metadata(Bytes::copy_from_slice(m.snapshot().bytes()))
    } else {
        return Err(FrameError::UnknownKind(kind.0));
    };
    Ok((from, frame))
}

fn decode_propose_reply(r: &fb::ProposeReply<'_>) -> ProposeReply {
    let result = match (r.outcomes(), r.failed()) {
        (Some(outcomes), _) => Ok(Committed {
            outcomes: outcomes
                .iter()
                .map(|o| match o.refused() {
                    None => Ok(match (o.producer_id_block(), o.changed()) {
                        (0, false) => Applied::Unchanged,
                        (0, true) => Applied::Changed,
                        (block, _) => Applied::ProducerIdBlock(block),
                    }),
                    Some(why) => Err(Refusal {
                        code: match o.error_code() {
                            0 => UNKNOWN_SERVER_ERROR,
                            code => code,
                        },
                        message: why.to_owned(),
                    }),
                })
                .collect(),
            metadata_version: r.metadata_version(),
            metadata: r.metadata().map(|m| Bytes::copy_from_slice(m.bytes())),
        }),
        (None, _) if r.not_controller() >= 0 => Err(NotCommitted::NotController(Some(NodeId(
            r.not_controller(),
        )))),
        (None, Some(why)) if why != "not the active controller" => {
            Err(NotCommitted::Failed(why.to_owned()))
        }
        (None, _) => Err(NotCommitted::NotController(None)),
    };
    ProposeReply { id: r.id(), result }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broker(id: i32) -> BrokerRegistration {
        BrokerRegistration {
            id: NodeId(id),
            host: "127.0.0.1".into(),
            port: 9092,
            cluster_listener: Some("127.0.0.1:9093".into()),
            shards: 2,
            rack: None,
            fenced: false,
            replication_ports: Vec::new(),
        }
    }

    #[test]
    fn every_frame_round_trips() {
        let frames = vec![
            Frame::Hello {
                node: NodeId(2),
                incarnation: 7,
                voters: "1@127.0.0.1:1,2@127.0.0.1:2".into(),
            },
            Frame::HelloReply { refused: None },
            Frame::HelloReply {
                refused: Some("voters differ".into()),
            },
            Frame::Raft(Bytes::from_static(b"raft")),
            Frame::Heartbeat(Heartbeat {
                id: 3,
                incarnation: 9,
                registration: broker(2),
                metadata_version: 11,
                shutting_down: true,
            }),
            Frame::HeartbeatReply(HeartbeatReply {
                id: 3,
                controller: Some(NodeId(1)),
                accepted: true,
                refused: None,
                fenced: false,
                metadata: Some(Bytes::from_static(b"m")),
                metadata_version: 13,
            }),
            Frame::Propose {
                id: 4,
                commands: vec![
                    Command::TakeProducerIdBlock,
                    Command::FenceBroker(NodeId(1)),
                ],
            },
            Frame::ProposeReply(ProposeReply {
                id: 4,
                result: Ok(Committed {
                    outcomes: vec![
                        Ok(Applied::ProducerIdBlock(5)),
                        Ok(Applied::Unchanged),
                        Ok(Applied::Changed),
                        Err(Refusal {
                            code: 36,
                            message: "exists".into(),
                        }),
                    ],
                    metadata_version: 12,
                    metadata: None,
                }),
            }),
            Frame::ProposeReply(ProposeReply {
                id: 5,
                result: Err(NotCommitted::NotController(Some(NodeId(3)))),
            }),
            Frame::ProposeReply(ProposeReply {
                id: 6,
                result: Err(NotCommitted::NotController(None)),
            }),
            Frame::ProposeReply(ProposeReply {
                id: 7,
                result: Err(NotCommitted::Failed("disk full".into())),
            }),
            Frame::Metadata(Bytes::from_static(b"snapshot")),
        ];
        for frame in frames {
            let bytes = encode(NodeId(2), &frame);
            let (from, back) = decode(&bytes, 1 << 20).expect("decodes");
            assert_eq!(from, NodeId(2));
            assert_eq!(back, frame);
        }
    }

    #[test]
    fn damaged_frames_are_refused() {
        let bytes = encode(NodeId(1), &Frame::HelloReply { refused: None });
        assert!(decode(&bytes[..4], 1 << 20).is_err());
        assert!(decode(b"not a frame at all", 1 << 20).is_err());
        for i in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[i] ^= 0xff;
            let _ = decode(&damaged, 1 << 20); // refused or decoded: never a panic
        }
    }
}
