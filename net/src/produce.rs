//! The Produce request, hand-written because it is the hot path: each partition's records are
//! split out of the frame buffer without copying, so the broker can patch a batch's base offset
//! and leader epoch in place and keep the same memory all the way to the log.
//!
//! Versions 3 to 12 (9 and up are flexible). The same type, with `Bytes` records, is what the
//! client sends: encoding puts each batch into the frame as its own chunk, again without a copy.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;

use crate::frame::FrameBuilder;
use crate::wire::{self, LengthPrefix, WireError};

/// The first flexible Produce version.
const FLEXIBLE_MIN: i16 = 9;

/// A Produce request's `acks`: how much of the write the producer waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// 0: no answer at all.
    None,
    /// 1: the leader has the records.
    Leader,
    /// -1 ("all"): every in-sync replica has them.
    All,
}

impl Acks {
    /// The `acks` field of a Produce request, if it is one Kafka defines.
    pub fn from_wire(acks: i16) -> Option<Acks> {
        match acks {
            0 => Some(Acks::None),
            1 => Some(Acks::Leader),
            -1 => Some(Acks::All),
            _ => None,
        }
    }

    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    /// As producers' settings spell it: 0, 1 or all.
    pub fn name(self) -> &'static str {
        match self {
            Acks::None => "0",
            Acks::Leader => "1",
            Acks::All => "all",
        }
    }
}

impl std::str::FromStr for Acks {
    type Err = String;

    /// 0, 1, all, or -1 (the wire's spelling of all).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(format!("{other}: expected 0, 1 or all")),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceRequest<R = BytesMut> {
    pub transactional_id: Option<StrBytes>,
    /// 0: no response; 1: the leader's write; -1: all in-sync replicas.
    pub acks: i16,
    pub timeout_ms: i32,
    pub topics: Vec<ProduceTopic<R>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProduceTopic<R = BytesMut> {
    pub name: StrBytes,
    pub partitions: Vec<ProducePartition<R>>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducePartition<R = BytesMut> {
    pub index: i32,
    /// The record batches as sent, untouched; `None` if the client sent null.
    pub records: Option<R>,
}

impl ProduceRequest<BytesMut> {
    /// Decodes a body (the frame after the request header). Record sets are split off `body`.
    pub fn decode(body: &mut BytesMut, version: i16) -> Result<Self, WireError> {
        let flexible = version >= FLEXIBLE_MIN;
        let transactional_id = wire::read_nullable_string(body, flexible)?;
        let acks = wire::read_i16(body)?;
        let timeout_ms = wire::read_i32(body)?;
        // Vectors grow as elements decode rather than trusting the counts: memory follows the
        // bytes actually present.
        let mut topics = Vec::new();
        for _ in 0..read_count(body, flexible)? {
            let name = wire::read_string(body, flexible)?;
            let mut partitions = Vec::new();
            for _ in 0..read_count(body, flexible)? {
                let index = wire::read_i32(body)?;
                let records = match wire::read_length(body, LengthPrefix::sequence(flexible))? {
                    Some(len) => Some(wire::split_bytes(body, len)?),
                    None => None,
                };
                skip_tags(body, flexible)?;
                partitions.push(ProducePartition { index, records });
            }
            skip_tags(body, flexible)?;
            topics.push(ProduceTopic { name, partitions });
        }
        skip_tags(body, flexible)?;
        Ok(Self {
            transactional_id,
            acks,
            timeout_ms,
            topics,
        })
    }
}

impl<R: Clone + Into<Bytes>> ProduceRequest<R> {
    /// Encodes the body into `frame`; each record set becomes its own chunk.
    pub fn encode(&self, frame: &mut FrameBuilder, version: i16) -> Result<(), WireError> {
        let flexible = version >= FLEXIBLE_MIN;
        let buf = frame.buf();
        wire::put_nullable_string(buf, flexible, self.transactional_id.as_deref())?;
        buf.put_i16(self.acks);
        buf.put_i32(self.timeout_ms);
        wire::put_length(buf, LengthPrefix::sequence(flexible), self.topics.len())?;
        for topic in &self.topics {
            let buf = frame.buf();
            wire::put_string(buf, flexible, &topic.name)?;
            wire::put_length(
                buf,
                LengthPrefix::sequence(flexible),
                topic.partitions.len(),
            )?;
            for partition in &topic.partitions {
                frame.buf().put_i32(partition.index);
                match &partition.records {
                    Some(records) => {
                        let records: Bytes = records.clone().into();
                        wire::put_length(
                            frame.buf(),
                            LengthPrefix::sequence(flexible),
                            records.len(),
                        )?;
                        frame.put_shared(records);
                    }
                    None => wire::put_null(frame.buf(), LengthPrefix::sequence(flexible)),
                }
                put_tags(frame.buf(), flexible);
            }
            put_tags(frame.buf(), flexible);
        }
        put_tags(frame.buf(), flexible);
        Ok(())
    }
}

fn read_count(body: &mut BytesMut, flexible: bool) -> Result<usize, WireError> {
    wire::read_length(body, LengthPrefix::sequence(flexible))?.ok_or(WireError::UnexpectedNull)
}

fn skip_tags(body: &mut BytesMut, flexible: bool) -> Result<(), WireError> {
    if flexible {
        wire::skip_tagged_fields(body)?;
    }
    Ok(())
}

fn put_tags(buf: &mut BytesMut, flexible: bool) {
    if flexible {
        wire::put_no_tagged_fields(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::TopicName;
    use kafka_protocol::messages::produce_request::{
        PartitionProduceData, ProduceRequest as TheirProduce, TopicProduceData,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};
    use proptest::prelude::*;

    fn their_request() -> impl Strategy<Value = TheirProduce> {
        let partition = (
            any::<i32>(),
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..200)),
        )
            .prop_map(|(index, records)| {
                PartitionProduceData::default()
                    .with_index(index)
                    .with_records(records.map(Bytes::from))
            });
        let topic = ("[a-z._-]{1,20}", proptest::collection::vec(partition, 0..4)).prop_map(
            |(name, partitions)| {
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(name)))
                    .with_partition_data(partitions)
            },
        );
        (
            proptest::option::of("[a-z]{0,10}"),
            any::<i16>(),
            any::<i32>(),
            proptest::collection::vec(topic, 0..4),
        )
            .prop_map(|(txn, acks, timeout_ms, topics)| {
                TheirProduce::default()
                    .with_transactional_id(
                        txn.map(|t| kafka_protocol::messages::TransactionalId(t.into())),
                    )
                    .with_acks(acks)
                    .with_timeout_ms(timeout_ms)
                    .with_topic_data(topics)
            })
    }

    fn assert_same(ours: &ProduceRequest<impl AsRef<[u8]>>, theirs: &TheirProduce) {
        assert_eq!(
            ours.transactional_id.as_deref(),
            theirs.transactional_id.as_ref().map(|t| t.0.as_str())
        );
        assert_eq!(ours.acks, theirs.acks);
        assert_eq!(ours.timeout_ms, theirs.timeout_ms);
        assert_eq!(ours.topics.len(), theirs.topic_data.len());
        for (our_topic, their_topic) in ours.topics.iter().zip(&theirs.topic_data) {
            assert_eq!(&*our_topic.name, their_topic.name.0.as_str());
            assert_eq!(our_topic.partitions.len(), their_topic.partition_data.len());
            for (ours, theirs) in our_topic.partitions.iter().zip(&their_topic.partition_data) {
                assert_eq!(ours.index, theirs.index);
                assert_eq!(
                    ours.records.as_ref().map(AsRef::as_ref),
                    theirs.records.as_deref()
                );
            }
        }
    }

    proptest! {
        #[test]
        fn decodes_what_kafka_protocol_encodes(request in their_request(), version in 3i16..=12) {
            let mut body = BytesMut::new();
            request.encode(&mut body, version).unwrap();
            let start = body.as_ptr() as usize;
            let end = start + body.len();
            let ours = ProduceRequest::decode(&mut body, version).unwrap();
            assert!(body.is_empty());
            assert_same(&ours, &request);
            // Every record set points into the frame buffer: split, not copied.
            for partition in ours.topics.iter().flat_map(|t| &t.partitions) {
                if let Some(records) = partition.records.as_ref().filter(|r| !r.is_empty()) {
                    let at = records.as_ptr() as usize;
                    assert!(start <= at && at + records.len() <= end);
                }
            }
        }

        #[test]
        fn kafka_protocol_decodes_what_we_encode(request in their_request(), version in 3i16..=12) {
            let mut theirs_bytes = BytesMut::new();
            request.encode(&mut theirs_bytes, version).unwrap();
            let ours = ProduceRequest::decode(&mut theirs_bytes.clone(), version).unwrap();
            let ours: ProduceRequest<Bytes> = ProduceRequest {
                transactional_id: ours.transactional_id,
                acks: ours.acks,
                timeout_ms: ours.timeout_ms,
                topics: ours.topics.into_iter().map(|t| ProduceTopic {
                    name: t.name,
                    partitions: t.partitions.into_iter().map(|p| ProducePartition {
                        index: p.index,
                        records: p.records.map(BytesMut::freeze),
                    }).collect(),
                }).collect(),
            };
            let mut frame = FrameBuilder::with_capacity(0);
            ours.encode(&mut frame, version).unwrap();
            let encoded: Vec<u8> = frame.finish().unwrap().concat();
            // Same bytes as kafka-protocol's own encoding, after our size prefix.
            prop_assert_eq!(&encoded[4..], &theirs_bytes[..]);
            let mut read = Bytes::from(encoded).slice(4..);
            let decoded = TheirProduce::decode(&mut read, version).unwrap();
            prop_assert_eq!(decoded, request);
        }

        #[test]
        fn truncated_bodies_are_errors_not_panics(request in their_request(), version in 3i16..=12, cut in 0usize..1000) {
            let mut body = BytesMut::new();
            request.encode(&mut body, version).unwrap();
            if cut < body.len() {
                body.truncate(cut);
                prop_assert!(ProduceRequest::decode(&mut body, version).is_err());
            }
        }
    }

    #[test]
    fn unknown_tagged_fields_are_skipped() {
        // v9, no transactional id, acks 1, timeout 5, no topics, then a top-level tag section
        // with one unknown field (tag 7, 3 bytes).
        let mut body = BytesMut::from(&[0u8, 0, 1, 0, 0, 0, 5, 1, 1, 7, 3, 1, 2, 3][..]);
        let request = ProduceRequest::decode(&mut body, 9).unwrap();
        assert_eq!(request.acks, 1);
        assert_eq!(request.timeout_ms, 5);
        assert!(request.topics.is_empty());
        assert!(body.is_empty());
    }

    #[test]
    fn a_huge_topic_count_is_refused() {
        let mut body =
            BytesMut::from(&[0xffu8, 0xff, 0, 1, 0, 0, 0, 5, 0x7f, 0xff, 0xff, 0xff][..]);
        assert!(matches!(
            ProduceRequest::decode(&mut body, 3),
            Err(WireError::Truncated { .. })
        ));
    }
}
