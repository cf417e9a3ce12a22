//! The frames between the peer shards of two nodes that replicate partitions
//! (`schema/fbs/replication.fbs`), as plain values: the handshake and the five replica messages.
//! IO-free like the rest of the crate: the transport (`broker/src/replication/link.rs`) reads
//! and writes the bytes, the fuzzer and the simulator use the values.
//!
//! A frame on the wire is a 4-byte big-endian length of the rest, a 4-byte big-endian length of
//! the FlatBuffers header, the header, then (an Append only) the record batches back to back.
//! [`encode`] returns the prefixes and header as one buffer and the batches as the `Bytes` they
//! came in, so the transport writes them with one vectored write and the batches are never
//! copied. [`decode`] slices the batches out of the frame's buffer (no copy either) after
//! checking every length and count against the frame; nothing a peer sends sizes an allocation
//! beyond the frame it sent.

use bytes::{BufMut, Bytes, BytesMut};
use flatbuffers::{FlatBufferBuilder, VerifierOptions};
use model::{NodeId, ShardId, TopicId};
use schema::replication as fb;

/// The bytes of each length prefix (the frame's, then the header's).
pub const LENGTH_BYTES: usize = 4;

/// A root offset and a file identifier.
const IDENTIFIED_BYTES_MIN: usize = 8;
/// Depth of the schema's deepest path (Frame → body → key / batch_sizes) with slack.
const DEPTH_MAX: usize = 6;
/// Tables in one header: the frame and its body.
const TABLES_MAX: usize = 8;

/// A partition, by its topic's id (so a topic deleted and created again is another one).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PartitionKey {
    pub topic: TopicId,
    pub partition: i32,
}

/// What peer shards say about one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicaMessage {
    // leader -> follower
    /// Batches exactly as the leader's log holds them (offsets and epochs stamped), starting
    /// at `base_offset`; `high_watermark` is the leader's. `batches` may be empty (a probe / a
    /// HW update).
    Append {
        key: PartitionKey,
        leader_epoch: i32,
        high_watermark: i64,
        base_offset: i64,
        batches: Vec<Bytes>,
    },
    /// The answer to `EpochQuery`: the largest epoch <= the asked one that the leader's log
    /// has (None: the leader has none that old), and the offset where the epoch after it starts
    /// (the leader's log end for its latest epoch).
    EpochEnd {
        key: PartitionKey,
        leader_epoch: i32,
        epoch: Option<i32>,
        end_offset: i64,
    },
    // follower -> leader
    /// Where the follower's log is in `leader_epoch`: its log end, written and durable offsets.
    Progress {
        key: PartitionKey,
        leader_epoch: i32,
        log_end: i64,
        written: i64,
        durable: i64,
    },
    /// Before it takes appends in `leader_epoch`, the follower asks where `epoch` (its own
    /// latest, then older ones: KIP-279) ends on the leader.
    EpochQuery {
        key: PartitionKey,
        leader_epoch: i32,
        epoch: i32,
    },
    /// The follower does not take messages of `leader_epoch`: it knows `follower_epoch`
    /// (newer: the sender is a stale leader; older: its metadata is behind, the leader retries).
    Stale {
        key: PartitionKey,
        leader_epoch: i32,
        follower_epoch: i32,
    },
}

impl ReplicaMessage {
    pub fn key(&self) -> PartitionKey {
        match self {
            ReplicaMessage::Append { key, .. }
            | ReplicaMessage::EpochEnd { key, .. }
            | ReplicaMessage::Progress { key, .. }
            | ReplicaMessage::EpochQuery { key, .. }
            | ReplicaMessage::Stale { key, .. } => *key,
        }
    }
}

/// Who is at one end of a connection: both ends send theirs first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hello {
    pub node: NodeId,
    pub shard: ShardId,
    pub cluster_id: String,
}

/// Every frame on a replication connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Frame {
    /// The first frame each way (the acceptor's only if it welcomes the dialer).
    Hello(Hello),
    /// The acceptor's answer to a Hello it does not welcome, and why; the connection closes.
    Refused(String),
    Message(ReplicaMessage),
}

/// A frame ready to be written: `header` (both length prefixes and the FlatBuffers header), then
/// each of `batches`, in order.
#[derive(Debug, Clone)]
pub struct Encoded {
    pub header: Bytes,
    pub batches: Vec<Bytes>,
}

impl Encoded {
    /// The frame's bytes on the wire, prefixes included.
    pub fn wire_bytes(&self) -> usize {
        self.header.len() + self.batches.iter().map(Bytes::len).sum::<usize>()
    }
}

/// Why a frame could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    #[error("a frame of {bytes} bytes does not fit its 4-byte length")]
    TooLarge { bytes: usize },
    #[error("batch {index} of an Append is empty")]
    EmptyBatch { index: usize },
}

/// Why a frame that arrived was refused; the transport closes the connection.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("a frame of {bytes} bytes is over the limit of {max} bytes")]
    TooLarge { bytes: usize, max: usize },
    #[error("a frame of {bytes} bytes is shorter than its header length says")]
    Truncated { bytes: usize },
    #[error("not a replication frame (file identifier)")]
    NotAFrame,
    #[error("the header does not verify: {0}")]
    Invalid(#[from] flatbuffers::InvalidFlatbuffer),
    #[error("unknown frame kind {0}")]
    UnknownKind(u8),
    #[error("{count} batches in one Append (at most {max})")]
    TooManyBatches { count: usize, max: usize },
    #[error("batch {index} of an Append is empty")]
    EmptyBatch { index: usize },
    #[error("the Append's batches add up to {said} bytes but {got} follow its header")]
    BatchBytes { said: u64, got: usize },
    #[error("{0} bytes follow the header of a frame that carries none")]
    TrailingBytes(usize),
}

/// What the receiver accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A frame's bytes after its length prefix.
    pub frame_bytes_max: usize,
    /// Batches in one Append.
    pub batches_max: usize,
}

fn key_of(key: &PartitionKey) -> fb::PartitionKey {
    let (high, low) = key.topic.0.as_u64_pair();
    fb::PartitionKey::new(high, low, key.partition)
}

fn key_from(key: &fb::PartitionKey) -> PartitionKey {
    PartitionKey {
        topic: TopicId(uuid::Uuid::from_u64_pair(key.topic_high(), key.topic_low())),
        partition: key.partition(),
    }
}

/// The length the 4-byte prefix of a frame announces (the bytes that follow it).
pub fn frame_length(prefix: [u8; LENGTH_BYTES]) -> usize {
    u32::from_be_bytes(prefix) as usize
}

/// Encodes `frame`; an Append's batches are moved into the result, not copied.
pub fn encode(frame: Frame) -> Result<Encoded, EncodeError> {
    let mut b = FlatBufferBuilder::with_capacity(128);
    let mut batches = Vec::new();
    let (kind, body) = match frame {
        Frame::Hello(h) => {
            let cluster_id = b.create_string(&h.cluster_id);
            let args = fb::HelloArgs {
                node: h.node.0,
                shard: h.shard.0,
                cluster_id: Some(cluster_id),
            };
            (
                fb::Body::Hello,
                fb::Hello::create(&mut b, &args).as_union_value(),
            )
        }
        Frame::Refused(reason) => {
            let reason = b.create_string(&reason);
            let args = fb::RefusedArgs {
                reason: Some(reason),
            };
            (
                fb::Body::Refused,
                fb::Refused::create(&mut b, &args).as_union_value(),
            )
        }
        Frame::Message(m) => encode_message(&mut b, m, &mut batches)?,
    };
    let root = fb::Frame::create(
        &mut b,
        &fb::FrameArgs {
            body_type: kind,
            body: Some(body),
        },
    );
    fb::finish_frame_buffer(&mut b, root);
    let header = b.finished_data();
    let payload = batches.iter().map(Bytes::len).sum::<usize>();
    let rest = LENGTH_BYTES + header.len() + payload;
    let too_large = || EncodeError::TooLarge {
        bytes: LENGTH_BYTES + rest,
    };
    let rest_len = u32::try_from(rest).map_err(|_| too_large())?;
    let header_len = u32::try_from(header.len()).map_err(|_| too_large())?;
    let mut out = BytesMut::with_capacity(2 * LENGTH_BYTES + header.len());
    out.put_u32(rest_len);
    out.put_u32(header_len);
    out.put_slice(header);
    Ok(Encoded {
        header: out.freeze(),
        batches,
    })
}

fn encode_message<'b>(
    b: &mut FlatBufferBuilder<'b>,
    message: ReplicaMessage,
    batches_out: &mut Vec<Bytes>,
) -> Result<
    (
        fb::Body,
        flatbuffers::WIPOffset<flatbuffers::UnionWIPOffset>,
    ),
    EncodeError,
> {
    Ok(match message {
        ReplicaMessage::Append {
            key,
            leader_epoch,
            high_watermark,
            base_offset,
            batches,
        } => {
            let mut sizes = Vec::with_capacity(batches.len());
            for (index, batch) in batches.iter().enumerate() {
                if batch.is_empty() {
                    return Err(EncodeError::EmptyBatch { index });
                }
                sizes.push(
                    u32::try_from(batch.len())
                        .map_err(|_| EncodeError::TooLarge { bytes: batch.len() })?,
                );
            }
            let sizes = (!sizes.is_empty()).then(|| b.create_vector(&sizes));
            let key = key_of(&key);
            let args = fb::AppendArgs {
                key: Some(&key),
                leader_epoch,
                high_watermark,
                base_offset,
                batch_sizes: sizes,
            };
            *batches_out = batches;
            (
                fb::Body::Append,
                fb::Append::create(b, &args).as_union_value(),
            )
        }
        ReplicaMessage::EpochEnd {
            key,
            leader_epoch,
            epoch,
            end_offset,
        } => {
            let key = key_of(&key);
            let args = fb::EpochEndArgs {
                key: Some(&key),
                leader_epoch,
                epoch,
                end_offset,
            };
            (
                fb::Body::EpochEnd,
                fb::EpochEnd::create(b, &args).as_union_value(),
            )
        }
        ReplicaMessage::Progress {
            key,
            leader_epoch,
            log_end,
            written,
            durable,
        } => {
            let key = key_of(&key);
            let args = fb::ProgressArgs {
                key: Some(&key),
                leader_epoch,
                log_end,
                written,
                durable,
            };
            (
                fb::Body::Progress,
                fb::Progress::create(b, &args).as_union_value(),
            )
        }
        ReplicaMessage::EpochQuery {
            key,
            leader_epoch,
            epoch,
        } => {
            let key = key_of(&key);
            let args = fb::EpochQueryArgs {
                key: Some(&key),
                leader_epoch,
                epoch,
            };
            (
                fb::Body::EpochQuery,
                fb::EpochQuery::create(b, &args).as_union_value(),
            )
        }
        ReplicaMessage::Stale {
            key,
            leader_epoch,
            follower_epoch,
        } => {
            let key = key_of(&key);
            let args = fb::StaleArgs {
                key: Some(&key),
                leader_epoch,
                follower_epoch,
            };
            (
                fb::Body::Stale,
                fb::Stale::create(b, &args).as_union_value(),
            )
        }
    })
}

/// Decodes one frame: `frame` is the bytes after its length prefix, as they came off the socket
/// (the transport has checked the prefix against `limits.frame_bytes_max` before reading them).
/// An Append's batches are slices of `frame`.
pub fn decode(frame: Bytes, limits: Limits) -> Result<Frame, DecodeError> {
    if frame.len() > limits.frame_bytes_max {
        return Err(DecodeError::TooLarge {
            bytes: frame.len(),
            max: limits.frame_bytes_max,
        });
    }
    let truncated = || DecodeError::Truncated { bytes: frame.len() };
    let prefix = frame.get(..LENGTH_BYTES).ok_or_else(truncated)?;
    let mut header_len = [0u8; LENGTH_BYTES];
    header_len.copy_from_slice(prefix);
    let header_end = LENGTH_BYTES
        .checked_add(frame_length(header_len))
        .filter(|end| *end <= frame.len())
        .ok_or_else(truncated)?;
    let header = &frame[LENGTH_BYTES..header_end];
    // flatbuffers' identifier check asserts that the buffer is long enough: check first.
    if header.len() < IDENTIFIED_BYTES_MIN || !fb::frame_buffer_has_identifier(header) {
        return Err(DecodeError::NotAFrame);
    }
    let opts = VerifierOptions {
        max_depth: DEPTH_MAX,
        max_tables: TABLES_MAX,
        max_apparent_size: limits.frame_bytes_max,
        ..Default::default()
    };
    let root = fb::root_as_frame_with_opts(&opts, header)?;
    let payload = frame.len() - header_end;
    let no_payload = |f: Frame| match payload {
        0 => Ok(f),
        n => Err(DecodeError::TrailingBytes(n)),
    };
    if let Some(h) = root.body_as_hello() {
        return no_payload(Frame::Hello(Hello {
            node: NodeId(h.node()),
            shard: ShardId(h.shard()),
            cluster_id: h.cluster_id().to_owned(),
        }));
    }
    if let Some(r) = root.body_as_refused() {
        return no_payload(Frame::Refused(r.reason().to_owned()));
    }
    if let Some(a) = root.body_as_append() {
        let sizes = a.batch_sizes();
        let count = sizes.map_or(0, |s| s.len());
        if count > limits.batches_max {
            return Err(DecodeError::TooManyBatches {
                count,
                max: limits.batches_max,
            });
        }
        let said = sizes
            .iter()
            .flatten()
            .map(u64::from)
            .fold(0u64, u64::saturating_add);
        if said != payload as u64 {
            return Err(DecodeError::BatchBytes { said, got: payload });
        }
        // `count` is bounded by the limit and by the verified header (4 bytes per size).
        let mut batches = Vec::with_capacity(count);
        let mut at = header_end;
        for (index, size) in sizes.iter().flatten().enumerate() {
            if size == 0 {
                return Err(DecodeError::EmptyBatch { index });
            }
            // The sizes add up to the payload (checked above): each slice is inside the frame.
            let end = at + size as usize;
            batches.push(frame.slice(at..end));
            at = end;
        }
        return Ok(Frame::Message(ReplicaMessage::Append {
            key: key_from(a.key()),
            leader_epoch: a.leader_epoch(),
            high_watermark: a.high_watermark(),
            base_offset: a.base_offset(),
            batches,
        }));
    }
    let message = if let Some(e) = root.body_as_epoch_end() {
        ReplicaMessage::EpochEnd {
            key: key_from(e.key()),
            leader_epoch: e.leader_epoch(),
            epoch: e.epoch(),
            end_offset: e.end_offset(),
        }
    } else if let Some(p) = root.body_as_progress() {
        ReplicaMessage::Progress {
            key: key_from(p.key()),
            leader_epoch: p.leader_epoch(),
            log_end: p.log_end(),
            written: p.written(),
            durable: p.durable(),
        }
    } else if let Some(q) = root.body_as_epoch_query() {
        ReplicaMessage::EpochQuery {
            key: key_from(q.key()),
            leader_epoch: q.leader_epoch(),
            epoch: q.epoch(),
        }
    } else if let Some(s) = root.body_as_stale() {
        ReplicaMessage::Stale {
            key: key_from(s.key()),
            leader_epoch: s.leader_epoch(),
            follower_epoch: s.follower_epoch(),
        }
    } else {
        return Err(DecodeError::UnknownKind(root.body_type().0));
    };
    no_payload(Frame::Message(message))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const LIMITS: Limits = Limits {
        frame_bytes_max: 1 << 20,
        batches_max: 64,
    };

    fn key(partition: i32) -> PartitionKey {
        PartitionKey {
            topic: TopicId(uuid::Uuid::from_u128(
                0x0123_4567_89ab_cdef_0011_2233_4455_6677,
            )),
            partition,
        }
    }

    /// The bytes of an encoded frame as they go on the wire.
    fn wire(e: &Encoded) -> Vec<u8> {
        let mut out = e.header.to_vec();
        for b in &e.batches {
            out.extend_from_slice(b);
        }
        out
    }

    /// Encodes `frame` and decodes it from its wire bytes (after the length prefix).
    fn round_trip(frame: Frame) -> Frame {
        let e = encode(frame).expect("encode");
        let bytes = wire(&e);
        assert_eq!(bytes.len(), e.wire_bytes());
        let mut prefix = [0u8; LENGTH_BYTES];
        prefix.copy_from_slice(&bytes[..LENGTH_BYTES]);
        assert_eq!(frame_length(prefix), bytes.len() - LENGTH_BYTES);
        decode(Bytes::from(bytes).slice(LENGTH_BYTES..), LIMITS).expect("decode")
    }

    fn every_frame() -> Vec<Frame> {
        vec![
            Frame::Hello(Hello {
                node: NodeId(3),
                shard: ShardId(1),
                cluster_id: "cluster-a".into(),
            }),
            Frame::Refused("wrong shard".into()),
            Frame::Message(ReplicaMessage::Append {
                key: key(7),
                leader_epoch: 4,
                high_watermark: 100,
                base_offset: 120,
                batches: vec![
                    Bytes::from_static(b"first batch"),
                    Bytes::from(vec![9u8; 1000]),
                ],
            }),
            Frame::Message(ReplicaMessage::Append {
                key: key(0),
                leader_epoch: 0,
                high_watermark: 0,
                base_offset: 0,
                batches: Vec::new(),
            }),
            Frame::Message(ReplicaMessage::EpochEnd {
                key: key(1),
                leader_epoch: 5,
                epoch: Some(3),
                end_offset: 77,
            }),
            Frame::Message(ReplicaMessage::EpochEnd {
                key: key(1),
                leader_epoch: 5,
                epoch: None,
                end_offset: -1,
            }),
            Frame::Message(ReplicaMessage::Progress {
                key: key(2),
                leader_epoch: 5,
                log_end: 10,
                written: 9,
                durable: 8,
            }),
            Frame::Message(ReplicaMessage::EpochQuery {
                key: key(3),
                leader_epoch: 6,
                epoch: 2,
            }),
            Frame::Message(ReplicaMessage::Stale {
                key: key(4),
                leader_epoch: 6,
                follower_epoch: 9,
            }),
        ]
    }

    #[test]
    fn every_frame_round_trips() {
        for frame in every_frame() {
            assert_eq!(round_trip(frame.clone()), frame);
        }
    }

    #[test]
    fn append_batches_are_not_copied_on_either_side() {
        let batch = Bytes::from(vec![1u8; 4096]);
        let e = encode(Frame::Message(ReplicaMessage::Append {
            key: key(0),
            leader_epoch: 1,
            high_watermark: 0,
            base_offset: 0,
            batches: vec![batch.clone()],
        }))
        .expect("encode");
        assert_eq!(
            e.batches[0].as_ptr(),
            batch.as_ptr(),
            "the sender's own buffer"
        );
        let frame = Bytes::from(wire(&e)).slice(LENGTH_BYTES..);
        let Ok(Frame::Message(ReplicaMessage::Append { batches, .. })) =
            decode(frame.clone(), LIMITS)
        else {
            panic!("an append");
        };
        let offset = batches[0].as_ptr() as usize - frame.as_ptr() as usize;
        assert_eq!(&frame[offset..offset + 4096], &batches[0][..]);
    }

    fn append_frame(batches: Vec<Bytes>) -> Vec<u8> {
        let e = encode(Frame::Message(ReplicaMessage::Append {
            key: key(0),
            leader_epoch: 1,
            high_watermark: 0,
            base_offset: 0,
            batches,
        }))
        .expect("encode");
        wire(&e)[LENGTH_BYTES..].to_vec()
    }

    #[test]
    fn lengths_and_counts_are_checked() {
        let frame = append_frame(vec![Bytes::from_static(b"abc"), Bytes::from_static(b"de")]);
        // A byte short or a byte over: the sizes no longer add up.
        let short = Bytes::copy_from_slice(&frame[..frame.len() - 1]);
        assert!(matches!(
            decode(short, LIMITS),
            Err(DecodeError::BatchBytes { said: 5, got: 4 })
        ));
        let mut long = frame.clone();
        long.push(0);
        assert!(matches!(
            decode(Bytes::from(long), LIMITS),
            Err(DecodeError::BatchBytes { said: 5, got: 6 })
        ));
        // Over the frame limit and over the batch count.
        let small = Limits {
            frame_bytes_max: 16,
            ..LIMITS
        };
        assert!(matches!(
            decode(Bytes::from(frame.clone()), small),
            Err(DecodeError::TooLarge { .. })
        ));
        let one = Limits {
            batches_max: 1,
            ..LIMITS
        };
        assert!(matches!(
            decode(Bytes::from(frame.clone()), one),
            Err(DecodeError::TooManyBatches { count: 2, max: 1 })
        ));
        // A header length past the frame.
        let mut header_past = frame.clone();
        header_past[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(matches!(
            decode(Bytes::from(header_past), LIMITS),
            Err(DecodeError::Truncated { .. })
        ));
        assert!(matches!(
            decode(Bytes::from_static(b"ab"), LIMITS),
            Err(DecodeError::Truncated { bytes: 2 })
        ));
        // Bytes after a frame that carries none.
        let e = encode(Frame::Refused("no".into())).expect("encode");
        let mut trailing = wire(&e)[LENGTH_BYTES..].to_vec();
        trailing.extend_from_slice(b"xyz");
        assert!(matches!(
            decode(Bytes::from(trailing), LIMITS),
            Err(DecodeError::TrailingBytes(3))
        ));
        // Empty batches are refused both ways.
        assert_eq!(
            encode(Frame::Message(ReplicaMessage::Append {
                key: key(0),
                leader_epoch: 1,
                high_watermark: 0,
                base_offset: 0,
                batches: vec![Bytes::from_static(b"a"), Bytes::new()],
            }))
            .err(),
            Some(EncodeError::EmptyBatch { index: 1 })
        );
    }

    #[test]
    fn another_schemas_buffer_is_not_a_frame() {
        let mut frame = append_frame(vec![Bytes::from_static(b"abc")]);
        // The identifier sits after the root offset, after the header's length prefix.
        frame[LENGTH_BYTES + 4..LENGTH_BYTES + 8].copy_from_slice(b"SPCL");
        assert!(matches!(
            decode(Bytes::from(frame), LIMITS),
            Err(DecodeError::NotAFrame)
        ));
    }

    proptest! {
        #[test]
        fn random_bytes_are_refused_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode(Bytes::from(bytes), LIMITS);
        }

        #[test]
        fn a_damaged_frame_is_refused_or_decodes_without_a_panic(
            which in 0usize..9,
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
            cut in any::<prop::sample::Index>(),
        ) {
            let e = encode(every_frame()[which].clone()).expect("encode");
            let mut frame = wire(&e)[LENGTH_BYTES..].to_vec();
            for (at, byte) in flips {
                let i = at.index(frame.len());
                frame[i] ^= byte;
            }
            let cut = cut.index(frame.len());
            let _ = decode(Bytes::copy_from_slice(&frame[..cut]), LIMITS);
            if let Ok(f) = decode(Bytes::from(frame), LIMITS) {
                // Whatever decodes encodes again to a frame that decodes the same.
                prop_assert_eq!(round_trip(f.clone()), f);
            }
        }
    }
}
