//! The topics of a consumer's subscription, read from the metadata a member sent with its
//! JoinGroup (protocol type "consumer"). The coordinator needs them for OffsetDelete
//! (GROUP_SUBSCRIBED_TO_TOPIC) and offsets retention; everything else in the metadata stays
//! opaque.
//!
//! The bytes come off a socket, so they are walked with every length checked against what is
//! left, and nothing is sized from a count. Every version of ConsumerProtocolSubscription starts
//! with the version 0 layout: version (int16), then topics (int32 count, each an int16-length
//! string), as Kafka reads it.

use std::collections::HashSet;

use thiserror::Error;

/// The protocol type of Kafka's consumers.
pub(super) const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(super) enum SubscriptionError {
    #[error("subscription metadata ends early")]
    Truncated,
    #[error("subscription version {0} is negative")]
    BadVersion(i16),
    #[error("negative topic count or name length")]
    NegativeLength,
    #[error("topic name is not UTF-8")]
    NotUtf8,
}

/// The topics named by a consumer's subscription metadata.
pub(super) fn subscribed_topics(metadata: &[u8]) -> Result<HashSet<String>, SubscriptionError> {
    let mut rest = metadata;
    let version = i16::from_be_bytes(take(&mut rest)?);
    if version < 0 {
        return Err(SubscriptionError::BadVersion(version));
    }
    let count = i32::from_be_bytes(take(&mut rest)?);
    if count < 0 {
        return Err(SubscriptionError::NegativeLength);
    }
    let mut topics = HashSet::new();
    for _ in 0..count {
        let len = i16::from_be_bytes(take(&mut rest)?);
        let len = usize::try_from(len).map_err(|_| SubscriptionError::NegativeLength)?;
        if len > rest.len() {
            return Err(SubscriptionError::Truncated);
        }
        let (name, after) = rest.split_at(len);
        rest = after;
        let name = std::str::from_utf8(name).map_err(|_| SubscriptionError::NotUtf8)?;
        topics.insert(name.to_owned());
    }
    Ok(topics)
}

fn take<const N: usize>(rest: &mut &[u8]) -> Result<[u8; N], SubscriptionError> {
    let (head, after) = rest
        .split_first_chunk::<N>()
        .ok_or(SubscriptionError::Truncated)?;
    *rest = after;
    Ok(*head)
}

#[cfg(test)]
mod tests {
    use bytes::BytesMut;
    use net::kafka_protocol::messages::ConsumerProtocolSubscription;
    use net::kafka_protocol::protocol::{Encodable, StrBytes};
    use proptest::prelude::*;

    use super::*;

    /// A subscription as Kafka's clients write it: the version, then the body at that version.
    fn encoded(version: i16, topics: &[String]) -> Vec<u8> {
        let subscription = ConsumerProtocolSubscription::default()
            .with_topics(topics.iter().cloned().map(StrBytes::from_string).collect())
            .with_user_data(Some(bytes::Bytes::from_static(b"user")));
        let mut buf = BytesMut::new();
        buf.extend_from_slice(&version.to_be_bytes());
        subscription.encode(&mut buf, version).unwrap();
        buf.to_vec()
    }

    proptest! {
        #[test]
        fn every_version_reads_back_its_topics(
            version in 0i16..=3,
            topics in proptest::collection::vec("[a-z._-]{1,20}", 0..8),
        ) {
            let want: HashSet<String> = topics.iter().cloned().collect();
            prop_assert_eq!(subscribed_topics(&encoded(version, &topics)), Ok(want));
        }

        #[test]
        fn arbitrary_bytes_give_topics_or_an_error(
            bytes in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            // Must not panic or allocate from a count; the result itself is arbitrary.
            let _ = subscribed_topics(&bytes);
        }

        #[test]
        fn every_cut_inside_the_topics_is_an_error(cut in 0usize..24) {
            // The topics end at byte 2 + 4 + (2 + 6) + (2 + 8) = 24; user data follows.
            let full = encoded(0, &["orders".to_owned(), "payments".to_owned()]);
            prop_assert_eq!(subscribed_topics(&full[..cut]), Err(SubscriptionError::Truncated));
        }
    }

    #[test]
    fn a_huge_count_in_a_small_buffer_is_refused_without_allocating() {
        let mut bytes = vec![0, 0];
        bytes.extend_from_slice(&i32::MAX.to_be_bytes());
        assert_eq!(subscribed_topics(&bytes), Err(SubscriptionError::Truncated));
        let mut negative = vec![0, 0];
        negative.extend_from_slice(&(-1i32).to_be_bytes());
        assert_eq!(
            subscribed_topics(&negative),
            Err(SubscriptionError::NegativeLength)
        );
        assert_eq!(
            subscribed_topics(&[0xff, 0xff]),
            Err(SubscriptionError::BadVersion(-1))
        );
    }
}
