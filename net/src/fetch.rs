//! The Fetch response, hand-written because it is the hot path: each partition's record batches
//! go into the frame as the log returned them, as separate chunks, never copied.
//!
//! Versions 4 to 17 (12 and up are flexible; from 13 topics are named by id). Tagged fields are
//! written only with a value that is not their default (librdkafka before 2.2 misreads default
//! ones, and speaks no flexible Fetch anyway): a partition's `current_leader` (v12+) and the
//! response's `node_endpoints` (v16+), which tell a client sent to a non-leader where the leader
//! is (KIP-951). `diverging_epoch` and `snapshot_id` are always absent, and
//! `preferred_read_replica` (v11+) is always -1.

use bytes::{BufMut, Bytes};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use crate::budget::HeldMemory;
use crate::frame::FrameBuilder;
use crate::wire::{self, LengthPrefix, WireError};

const FLEXIBLE_MIN: i16 = 12;
const TOPIC_ID_MIN: i16 = 13;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchResponse {
    pub throttle_time_ms: i32,
    /// Top-level error (v7+), e.g. a fetch-session error.
    pub error_code: i16,
    /// The fetch session (v7+); 0 when sessions are not used.
    pub session_id: i32,
    pub topics: Vec<FetchTopicResponse>,
    /// The brokers named as `current_leader` of some partition (v16+).
    pub node_endpoints: Vec<NodeEndpoint>,
    /// The fetch memory the batches read from disk hold until the response is written (not
    /// encoded; the response frame keeps it).
    pub memory: HeldMemory,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchTopicResponse {
    /// Written up to v12.
    pub name: StrBytes,
    /// Written from v13.
    pub topic_id: Uuid,
    pub partitions: Vec<FetchPartitionResponse>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FetchPartitionResponse {
    pub partition_index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    /// Written from v5.
    pub log_start_offset: i64,
    /// Whole record batches, in log order; written back to back.
    pub records: Vec<Bytes>,
    /// The partition's leader and leader epoch, for a client that asked a non-leader (v12+).
    pub current_leader: Option<(i32, i32)>,
}

/// How to reach a broker (KIP-951).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeEndpoint {
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub rack: Option<String>,
}

/// Partition tag 1, response tag 0 (Kafka's FetchResponse.json).
const CURRENT_LEADER_TAG: u32 = 1;
const NODE_ENDPOINTS_TAG: u32 = 0;
const NODE_ENDPOINTS_MIN: i16 = 16;

impl FetchResponse {
    /// Encodes the body into `frame`, each record chunk as its own frame chunk.
    pub fn encode(&self, frame: &mut FrameBuilder, version: i16) -> Result<(), WireError> {
        let flexible = version >= FLEXIBLE_MIN;
        let seq = LengthPrefix::sequence(flexible);
        let buf = frame.buf();
        buf.put_i32(self.throttle_time_ms);
        if version >= 7 {
            buf.put_i16(self.error_code);
            buf.put_i32(self.session_id);
        }
        wire::put_length(buf, seq, self.topics.len())?;
        for topic in &self.topics {
            let buf = frame.buf();
            if version >= TOPIC_ID_MIN {
                buf.put_slice(topic.topic_id.as_bytes());
            } else {
                wire::put_string(buf, flexible, &topic.name)?;
            }
            wire::put_length(buf, seq, topic.partitions.len())?;
            for partition in &topic.partitions {
                partition.encode(frame, version, flexible)?;
            }
            put_tags(frame, flexible);
        }
        if flexible && version >= NODE_ENDPOINTS_MIN && !self.node_endpoints.is_empty() {
            let mut value = bytes::BytesMut::new();
            wire::put_length(&mut value, seq, self.node_endpoints.len())?;
            for node in &self.node_endpoints {
                value.put_i32(node.node_id);
                wire::put_string(&mut value, true, &node.host)?;
                value.put_i32(node.port);
                wire::put_nullable_string(&mut value, true, node.rack.as_deref())?;
                wire::put_no_tagged_fields(&mut value);
            }
            put_tag(frame.buf(), NODE_ENDPOINTS_TAG, &value)?;
        } else {
            put_tags(frame, flexible);
        }
        Ok(())
    }
}

/// One tagged field (count 1, tag, size, value).
fn put_tag(buf: &mut bytes::BytesMut, tag: u32, value: &[u8]) -> Result<(), WireError> {
    let size = u32::try_from(value.len()).map_err(|_| WireError::InvalidLength {
        length: i64::try_from(value.len()).unwrap_or(i64::MAX),
    })?;
    wire::put_unsigned_varint(buf, 1);
    wire::put_unsigned_varint(buf, tag);
    wire::put_unsigned_varint(buf, size);
    buf.put_slice(value);
    Ok(())
}

impl FetchPartitionResponse {
    fn encode(
        &self,
        frame: &mut FrameBuilder,
        version: i16,
        flexible: bool,
    ) -> Result<(), WireError> {
        let seq = LengthPrefix::sequence(flexible);
        let buf = frame.buf();
        buf.put_i32(self.partition_index);
        buf.put_i16(self.error_code);
        buf.put_i64(self.high_watermark);
        buf.put_i64(self.last_stable_offset);
        if version >= 5 {
            buf.put_i64(self.log_start_offset);
        }
        // Aborted transactions: an empty list, which every client reads; null is not.
        wire::put_length(buf, seq, 0)?;
        if version >= 11 {
            buf.put_i32(-1); // preferred read replica: none
        }
        let records_bytes: usize = self.records.iter().map(Bytes::len).sum();
        wire::put_length(buf, seq, records_bytes)?;
        for chunk in &self.records {
            frame.put_shared(chunk.clone());
        }
        match self.current_leader {
            Some((leader_id, leader_epoch)) if flexible => {
                let mut value = bytes::BytesMut::with_capacity(9);
                value.put_i32(leader_id);
                value.put_i32(leader_epoch);
                wire::put_no_tagged_fields(&mut value);
                put_tag(frame.buf(), CURRENT_LEADER_TAG, &value)?;
            }
            _ => put_tags(frame, flexible),
        }
        Ok(())
    }
}

fn put_tags(frame: &mut FrameBuilder, flexible: bool) {
    if flexible {
        wire::put_no_tagged_fields(frame.buf());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::FetchResponse as TheirFetch;
    use kafka_protocol::protocol::Decodable;
    use proptest::prelude::*;

    fn response() -> impl Strategy<Value = FetchResponse> {
        let partition = (
            any::<(i32, i16, i64, i64, i64)>(),
            proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..100), 0..4),
            proptest::option::of(any::<(i32, i32)>()),
        )
            .prop_map(
                |((index, error, hw, lso, lstart), records, current_leader)| {
                    FetchPartitionResponse {
                        partition_index: index,
                        error_code: error,
                        high_watermark: hw,
                        last_stable_offset: lso,
                        log_start_offset: lstart,
                        records: records.into_iter().map(Bytes::from).collect(),
                        current_leader,
                    }
                },
            );
        let node = (
            any::<(i32, i32)>(),
            "[a-z.]{1,12}",
            proptest::option::of("[a-z]{1,4}"),
        )
            .prop_map(|((node_id, port), host, rack)| NodeEndpoint {
                node_id,
                host,
                port,
                rack,
            });
        let topic = (
            "[a-z]{1,12}",
            any::<u128>(),
            proptest::collection::vec(partition, 0..4),
        )
            .prop_map(|(name, id, partitions)| FetchTopicResponse {
                name: StrBytes::from_string(name),
                topic_id: Uuid::from_u128(id),
                partitions,
            });
        (
            any::<(i32, i16, i32)>(),
            proptest::collection::vec(topic, 0..4),
            proptest::collection::vec(node, 0..3),
        )
            .prop_map(|((throttle, error, session), topics, node_endpoints)| {
                FetchResponse {
                    throttle_time_ms: throttle,
                    error_code: error,
                    session_id: session,
                    topics,
                    node_endpoints,
                    memory: Default::default(),
                }
            })
    }

    proptest! {
        #[test]
        fn kafka_protocol_decodes_what_we_encode(response in response(), version in 4i16..=17) {
            let mut frame = FrameBuilder::with_capacity(64);
            response.encode(&mut frame, version).unwrap();
            let chunks = frame.finish().unwrap();
            // Record batches travel as their own chunks.
            let batches: Vec<&Bytes> = response.topics.iter()
                .flat_map(|t| &t.partitions).flat_map(|p| &p.records).collect();
            for batch in &batches {
                prop_assert!(chunks.iter().any(|c| c.as_ptr() == batch.as_ptr()));
            }
            let joined = Bytes::from(chunks.concat());
            let size = i32::from_be_bytes([joined[0], joined[1], joined[2], joined[3]]);
            prop_assert_eq!(size as usize, joined.len() - 4);
            let mut body = joined.slice(4..);
            let theirs = TheirFetch::decode(&mut body, version).unwrap();
            prop_assert!(body.is_empty());
            prop_assert_eq!(theirs.throttle_time_ms, response.throttle_time_ms);
            if version >= 7 {
                prop_assert_eq!(theirs.error_code, response.error_code);
                prop_assert_eq!(theirs.session_id, response.session_id);
            }
            if version >= 16 {
                prop_assert_eq!(theirs.node_endpoints.len(), response.node_endpoints.len());
                for (t, o) in theirs.node_endpoints.iter().zip(&response.node_endpoints) {
                    prop_assert_eq!(t.node_id.0, o.node_id);
                    prop_assert_eq!(t.host.as_str(), o.host.as_str());
                    prop_assert_eq!(t.port, o.port);
                    prop_assert_eq!(t.rack.as_ref().map(|r| r.as_str()), o.rack.as_deref());
                }
            } else {
                prop_assert!(theirs.node_endpoints.is_empty());
            }
            prop_assert_eq!(theirs.responses.len(), response.topics.len());
            for (their_topic, our_topic) in theirs.responses.iter().zip(&response.topics) {
                if version >= 13 {
                    prop_assert_eq!(their_topic.topic_id, our_topic.topic_id);
                } else {
                    prop_assert_eq!(their_topic.topic.0.as_str(), &*our_topic.name);
                }
                prop_assert_eq!(their_topic.partitions.len(), our_topic.partitions.len());
                for (theirs, ours) in their_topic.partitions.iter().zip(&our_topic.partitions) {
                    prop_assert_eq!(theirs.partition_index, ours.partition_index);
                    prop_assert_eq!(theirs.error_code, ours.error_code);
                    prop_assert_eq!(theirs.high_watermark, ours.high_watermark);
                    prop_assert_eq!(theirs.last_stable_offset, ours.last_stable_offset);
                    if version >= 5 {
                        prop_assert_eq!(theirs.log_start_offset, ours.log_start_offset);
                    }
                    prop_assert_eq!(theirs.aborted_transactions.as_ref().map(Vec::len), Some(0));
                    prop_assert_eq!(theirs.preferred_read_replica.0, -1);
                    let records: Vec<u8> = ours.records.concat();
                    prop_assert_eq!(theirs.records.as_deref(), Some(&records[..]));
                    let leader = (theirs.current_leader.leader_id.0, theirs.current_leader.leader_epoch);
                    match ours.current_leader {
                        Some(ours) if version >= 12 => prop_assert_eq!(leader, ours),
                        _ => prop_assert_eq!(leader, (-1, -1)),
                    }
                }
            }
        }
    }

    #[test]
    fn no_tagged_fields_are_written_without_a_value() {
        // v12, one topic "t" with one empty partition: every tag section must be a single 0.
        let response = FetchResponse {
            topics: vec![FetchTopicResponse {
                name: StrBytes::from_static_str("t"),
                partitions: vec![FetchPartitionResponse::default()],
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut frame = FrameBuilder::with_capacity(64);
        response.encode(&mut frame, 12).unwrap();
        let bytes = frame.finish().unwrap().concat();
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[0, 0, 0, 53][..],          // size
            &[0, 0, 0, 0],               // throttle
            &[0, 0], &[0, 0, 0, 0],      // error, session
            &[2],                        // one topic
            &[2, b't'],                  // name
            &[2],                        // one partition
            &[0, 0, 0, 0], &[0, 0],      // index, error
            &[0; 8], &[0; 8], &[0; 8],   // hw, lso, log start
            &[1],                        // no aborted transactions
            &[0xff, 0xff, 0xff, 0xff],   // preferred read replica
            &[1],                        // empty records
            &[0], &[0], &[0],            // partition, topic, top-level tags
        ].concat();
        assert_eq!(bytes, expected);
    }
}
