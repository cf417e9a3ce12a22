//! The one table of the APIs and versions Spindle speaks.
//!
//! The ranges are Apache Kafka 4.0's (the release that removed the pre-2.1 versions, KIP-896),
//! for the APIs we implement. Each range is what our codecs decode and encode; every version in it
//! is supported by the `kafka-protocol` crate (which carries Kafka 4.1's definitions), and the
//! tests check that.
//!
//! Two client facts shape the table:
//! - kafkajs 2.2.4 ignores the broker's minimum and uses min(its maximum, ours). Its maxima
//!   (ApiVersions 2, Produce 7, Fetch 11, ListOffsets 3, Metadata 6, OffsetCommit 5,
//!   OffsetFetch 4, FindCoordinator 2, JoinGroup 5, Heartbeat 3, LeaveGroup 3, SyncGroup 3,
//!   DescribeGroups 2, ListGroups 2, CreateTopics 3, DeleteTopics 1, DescribeConfigs 2,
//!   CreatePartitions 1, DeleteGroups 1, InitProducerId 1) are all inside our ranges, so it
//!   always lands on a version we decode. A test keeps it so.
//! - librdkafka (confluentinc/librdkafka#4956, fixed only in recent releases) turns gzip,
//!   snappy, lz4 and zstd off unless the broker's Produce range includes version 0. Kafka 4.0
//!   therefore advertises Produce 0-12 while refusing versions 0-2 (KAFKA-18659), and so do we:
//!   `advertised_min` is 0, `min` is 3. A Produce below 3 closes the connection.

use kafka_protocol::messages::ApiKey;

/// One API's versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiSupport {
    pub api_key: ApiKey,
    /// The lowest version we decode.
    pub min: i16,
    /// The highest version we decode and encode.
    pub max: i16,
    /// The minimum we put in ApiVersions responses; at most `min` (see the module docs).
    pub advertised_min: i16,
}

impl ApiSupport {
    const fn new(api_key: ApiKey, min: i16, max: i16) -> Self {
        Self {
            api_key,
            min,
            max,
            advertised_min: min,
        }
    }

    pub fn accepts(&self, version: i16) -> bool {
        (self.min..=self.max).contains(&version)
    }
}

/// Every API we implement, in api-key order.
pub const SUPPORTED_APIS: &[ApiSupport] = &[
    ApiSupport {
        advertised_min: 0,
        ..ApiSupport::new(ApiKey::Produce, 3, 12)
    },
    ApiSupport::new(ApiKey::Fetch, 4, 17),
    ApiSupport::new(ApiKey::ListOffsets, 1, 10),
    ApiSupport::new(ApiKey::Metadata, 0, 13),
    ApiSupport::new(ApiKey::OffsetCommit, 2, 9),
    ApiSupport::new(ApiKey::OffsetFetch, 1, 9),
    ApiSupport::new(ApiKey::FindCoordinator, 0, 6),
    ApiSupport::new(ApiKey::JoinGroup, 0, 9),
    ApiSupport::new(ApiKey::Heartbeat, 0, 4),
    ApiSupport::new(ApiKey::LeaveGroup, 0, 5),
    ApiSupport::new(ApiKey::SyncGroup, 0, 5),
    ApiSupport::new(ApiKey::DescribeGroups, 0, 6),
    ApiSupport::new(ApiKey::ListGroups, 0, 5),
    ApiSupport::new(ApiKey::ApiVersions, 0, 4),
    ApiSupport::new(ApiKey::CreateTopics, 2, 7),
    ApiSupport::new(ApiKey::DeleteTopics, 1, 6),
    ApiSupport::new(ApiKey::DeleteRecords, 0, 2),
    ApiSupport::new(ApiKey::InitProducerId, 0, 5),
    ApiSupport::new(ApiKey::DescribeAcls, 1, 3),
    ApiSupport::new(ApiKey::CreateAcls, 1, 3),
    ApiSupport::new(ApiKey::DeleteAcls, 1, 3),
    ApiSupport::new(ApiKey::DescribeConfigs, 1, 4),
    ApiSupport::new(ApiKey::AlterConfigs, 0, 2),
    ApiSupport::new(ApiKey::CreatePartitions, 0, 3),
    ApiSupport::new(ApiKey::DeleteGroups, 0, 2),
    ApiSupport::new(ApiKey::ElectLeaders, 0, 2),
    ApiSupport::new(ApiKey::IncrementalAlterConfigs, 0, 1),
    ApiSupport::new(ApiKey::OffsetDelete, 0, 0),
    ApiSupport::new(ApiKey::DescribeQuorum, 0, 2),
    ApiSupport::new(ApiKey::DescribeCluster, 0, 2),
];

/// Our support for an API, `None` if we do not implement it.
pub fn support(api_key: ApiKey) -> Option<&'static ApiSupport> {
    SUPPORTED_APIS.iter().find(|s| s.api_key == api_key)
}

/// Whether we decode this API at this version.
pub fn accepts(api_key: ApiKey, version: i16) -> bool {
    support(api_key).is_some_and(|s| s.accepts(version))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_is_within_what_kafka_protocol_supports() {
        for s in SUPPORTED_APIS {
            let theirs = s.api_key.valid_versions();
            assert!(s.advertised_min <= s.min && s.min <= s.max, "{:?}", s);
            assert!(
                theirs.min <= s.min && s.max <= theirs.max,
                "{:?} outside kafka-protocol's {theirs}",
                s
            );
        }
    }

    #[test]
    fn table_is_in_api_key_order_without_repeats() {
        let keys: Vec<i16> = SUPPORTED_APIS.iter().map(|s| s.api_key as i16).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]), "{keys:?}");
    }

    /// kafkajs 2.2.4's maxima (src/protocol/requests/*/index.js): it sends min(its max, ours),
    /// whatever our minimum, so each must be a version we decode.
    #[test]
    fn every_version_kafkajs_picks_is_decodable() {
        let kafkajs_max = [
            (ApiKey::ApiVersions, 2),
            (ApiKey::Produce, 7),
            (ApiKey::Fetch, 11),
            (ApiKey::ListOffsets, 3),
            (ApiKey::Metadata, 6),
            (ApiKey::OffsetCommit, 5),
            (ApiKey::OffsetFetch, 4),
            (ApiKey::FindCoordinator, 2),
            (ApiKey::JoinGroup, 5),
            (ApiKey::Heartbeat, 3),
            (ApiKey::LeaveGroup, 3),
            (ApiKey::SyncGroup, 3),
            (ApiKey::DescribeGroups, 2),
            (ApiKey::ListGroups, 2),
            (ApiKey::CreateTopics, 3),
            (ApiKey::DeleteTopics, 1),
            (ApiKey::DescribeConfigs, 2),
            (ApiKey::CreatePartitions, 1),
            (ApiKey::DeleteGroups, 1),
            (ApiKey::InitProducerId, 1),
        ];
        for (api_key, theirs) in kafkajs_max {
            let ours = support(api_key).unwrap();
            let picked = ours.max.min(theirs);
            assert!(ours.accepts(picked), "{api_key:?} v{picked}");
        }
    }

    /// The versions librdkafka 2.x uses at most (its ApiVersion maps) must be covered, with
    /// Produce >= 3 and Fetch >= 4 for v2 record batches.
    #[test]
    fn librdkafka_maxima_are_covered() {
        let librdkafka_max = [
            (ApiKey::Produce, 10),
            (ApiKey::Fetch, 16),
            (ApiKey::Metadata, 13),
            (ApiKey::JoinGroup, 5),
            (ApiKey::SyncGroup, 3),
            (ApiKey::Heartbeat, 3),
            (ApiKey::LeaveGroup, 1),
            (ApiKey::OffsetCommit, 9),
            (ApiKey::OffsetFetch, 9),
            (ApiKey::FindCoordinator, 2),
            (ApiKey::CreateTopics, 4),
            (ApiKey::DeleteTopics, 4),
        ];
        for (api_key, theirs) in librdkafka_max {
            assert!(accepts(api_key, theirs), "{api_key:?} v{theirs}");
        }
        assert_eq!(support(ApiKey::Produce).unwrap().advertised_min, 0);
    }

    #[test]
    fn unknown_apis_and_versions_are_not_accepted() {
        assert!(!accepts(ApiKey::SaslHandshake, 1));
        assert!(!accepts(ApiKey::Produce, 2));
        assert!(!accepts(ApiKey::Fetch, 18));
        assert!(accepts(ApiKey::Produce, 3));
    }
}
