//! The "consumer" group protocol's opaque bytes: a member's subscription (JoinGroup metadata)
//! and its assignment (SyncGroup, DescribeGroups). Written at version 0, which every client
//! reads; read at any version, since later versions only append fields.
//!
//! Read by hand rather than with `kafka-protocol`, which sizes arrays from the count on the
//! wire: these bytes come from other group members through the broker.

use bytes::{BufMut, Bytes, BytesMut};

use super::assignor::TopicPartitions;
use crate::wire::{self, LengthPrefix, WireError};

const VERSION: i16 = 0;

/// A JoinGroup protocol's metadata: the topics a member subscribes to.
pub fn encode_subscription(topics: &[String]) -> Result<Bytes, WireError> {
    let mut buf = BytesMut::new();
    buf.put_i16(VERSION);
    put_count(&mut buf, topics.len())?;
    for topic in topics {
        wire::put_string(&mut buf, false, topic)?;
    }
    wire::put_null(&mut buf, LengthPrefix::sequence(false)); // user data
    Ok(buf.freeze())
}

/// The topics of a member's subscription.
pub fn decode_subscription(mut bytes: &[u8]) -> Result<Vec<String>, WireError> {
    read_version(&mut bytes)?;
    let mut topics = Vec::new();
    for _ in 0..read_count(&mut bytes)? {
        topics.push(wire::read_string(&mut bytes, false)?.to_string());
    }
    Ok(topics)
}

/// A SyncGroup assignment.
pub fn encode_assignment(assignment: &TopicPartitions) -> Result<Bytes, WireError> {
    let mut buf = BytesMut::new();
    buf.put_i16(VERSION);
    put_count(&mut buf, assignment.len())?;
    for (topic, partitions) in assignment {
        wire::put_string(&mut buf, false, topic)?;
        put_count(&mut buf, partitions.len())?;
        for partition in partitions {
            buf.put_i32(*partition);
        }
    }
    wire::put_null(&mut buf, LengthPrefix::sequence(false)); // user data
    Ok(buf.freeze())
}

/// An assignment's partitions by topic; empty bytes (a member the leader left out) are none.
pub fn decode_assignment(mut bytes: &[u8]) -> Result<TopicPartitions, WireError> {
    let mut assignment = TopicPartitions::new();
    if bytes.is_empty() {
        return Ok(assignment);
    }
    read_version(&mut bytes)?;
    for _ in 0..read_count(&mut bytes)? {
        let topic = wire::read_string(&mut bytes, false)?.to_string();
        let mut partitions = Vec::new();
        for _ in 0..read_count(&mut bytes)? {
            partitions.push(wire::read_i32(&mut bytes)?);
        }
        assignment.entry(topic).or_default().extend(partitions);
    }
    Ok(assignment)
}

fn read_version(bytes: &mut &[u8]) -> Result<(), WireError> {
    let version = wire::read_i16(bytes)?;
    if version < 0 {
        return Err(WireError::InvalidLength {
            length: version.into(),
        });
    }
    Ok(())
}

/// An array's element count; a null array counts as empty. Elements are read one by one, so a
/// lying count fails on the first missing element instead of reserving memory.
fn read_count(bytes: &mut &[u8]) -> Result<usize, WireError> {
    Ok(wire::read_length(bytes, LengthPrefix::sequence(false))?.unwrap_or(0))
}

fn put_count(buf: &mut BytesMut, count: usize) -> Result<(), WireError> {
    wire::put_length(buf, LengthPrefix::sequence(false), count)
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::{
        ConsumerProtocolAssignment, ConsumerProtocolSubscription, TopicName,
        consumer_protocol_assignment, consumer_protocol_subscription,
    };
    use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
    use proptest::prelude::*;

    use super::*;

    fn name(s: &str) -> StrBytes {
        StrBytes::from_string(s.to_owned())
    }

    #[test]
    fn our_subscription_is_what_kafka_protocol_reads() {
        let topics = vec!["orders".to_owned(), "payments".to_owned()];
        let mut bytes = encode_subscription(&topics).unwrap();
        assert_eq!(wire::read_i16(&mut bytes).unwrap(), 0);
        let decoded = ConsumerProtocolSubscription::decode(&mut bytes, 0).unwrap();
        assert_eq!(decoded.topics, [name("orders"), name("payments")]);
        assert_eq!(decoded.user_data, None);
    }

    #[test]
    fn subscriptions_of_later_versions_are_read() {
        // Version 3 (what the Java client sends) appends owned partitions, generation, rack.
        let subscription = ConsumerProtocolSubscription::default()
            .with_topics(vec![name("a"), name("b")])
            .with_owned_partitions(vec![
                consumer_protocol_subscription::TopicPartition::default()
                    .with_topic(TopicName(name("a")))
                    .with_partitions(vec![0, 1]),
            ])
            .with_generation_id(7)
            .with_rack_id(Some(name("rack-1")));
        let mut bytes = BytesMut::new();
        bytes.put_i16(3);
        subscription.encode(&mut bytes, 3).unwrap();
        assert_eq!(decode_subscription(&bytes).unwrap(), ["a", "b"]);
    }

    #[test]
    fn our_assignment_is_what_kafka_protocol_reads_and_theirs_is_what_we_read() {
        let assignment: TopicPartitions = [("t".to_owned(), vec![2, 0]), ("u".to_owned(), vec![])]
            .into_iter()
            .collect();
        let mut bytes = encode_assignment(&assignment).unwrap();
        assert_eq!(decode_assignment(&bytes).unwrap(), assignment);
        assert_eq!(wire::read_i16(&mut bytes).unwrap(), 0);
        let decoded = ConsumerProtocolAssignment::decode(&mut bytes, 0).unwrap();
        assert_eq!(decoded.assigned_partitions.len(), 2);
        assert_eq!(decoded.assigned_partitions[0].partitions, [2, 0]);

        let theirs = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![
            consumer_protocol_assignment::TopicPartition::default()
                .with_topic(TopicName(name("x")))
                .with_partitions(vec![5]),
        ]);
        let mut bytes = BytesMut::new();
        bytes.put_i16(3);
        theirs.encode(&mut bytes, 3).unwrap();
        let read = decode_assignment(&bytes).unwrap();
        assert_eq!(read.get("x"), Some(&vec![5]));
    }

    #[test]
    fn an_empty_assignment_is_no_partitions() {
        assert!(decode_assignment(&[]).unwrap().is_empty());
    }

    #[test]
    fn a_lying_count_fails_without_reserving_memory() {
        let mut bytes = BytesMut::new();
        bytes.put_i16(0);
        bytes.put_i32(i32::MAX);
        assert!(decode_subscription(&bytes).is_err());
        assert!(decode_assignment(&bytes).is_err());
        assert!(
            decode_subscription(&[0xff, 0xff]).is_err(),
            "negative version"
        );
    }

    proptest! {
        #[test]
        fn assignments_round_trip(
            assignment in prop::collection::btree_map("[a-z.]{1,12}", prop::collection::vec(0..1000i32, 0..8), 0..6),
        ) {
            let bytes = encode_assignment(&assignment).unwrap();
            prop_assert_eq!(decode_assignment(&bytes).unwrap(), assignment);
        }

        #[test]
        fn garbage_never_panics(bytes in prop::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_subscription(&bytes);
            let _ = decode_assignment(&bytes);
        }
    }
}
