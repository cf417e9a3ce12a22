//! A lean async Kafka client on glommio, for the admin CLI and `spindle-bench`.
//!
//! - [`Connection`]: one broker; ApiVersions negotiation, correlation ids, pipelining
//!   ([`Connection::enqueue`] / [`Connection::receive`]), timeouts, generic
//!   [`Connection::send`] over `kafka-protocol` request types.
//! - [`Client`]: a cluster from a bootstrap address; metadata, admin calls, group offsets,
//!   produce of ready batches and fetch, routed to leaders and coordinators.
//! - [`batch`]: v2 record batches, built (with compression) and decoded (decompressed within a
//!   limit by `decompress`, counts checked by `record_walk` first: batches are read back from
//!   disk by the broker's group coordinator too).
//! - [`GroupMember`]: a classic consumer group member; [`assignor`] and [`consumer_protocol`]
//!   are its leader's assignors and the bytes members exchange; [`batch_span`] tells a consumer
//!   where the fetched batches end.
//! - [`partitioner`]: Kafka's murmur2 key partitioner.
//! - [`ClientError`]: unreachable, timeout, Kafka error code (with its name), protocol errors.
//!
//! Responses are decoded with `kafka-protocol`, which trusts array counts on the wire (see the
//! server's shape check): the client is meant for brokers we run, not hostile ones.

pub mod assignor;
pub mod batch;
pub mod batch_span;
mod cluster;
mod connection;
pub mod consumer_protocol;
mod decompress;
mod error;
mod group;
pub mod partitioner;
mod record_walk;

pub use cluster::{
    BrokerInfo, Client, ClusterMetadata, CommittedOffset, ConfigChange, ConfigEntry,
    ConfigResource, DescribedCluster, DescribedQuorum, EARLIEST_TIMESTAMP, ElectionResult,
    FetchedPartition, GroupListing, LATEST_TIMESTAMP, NewTopic, PREFERRED_ELECTION, PartitionInfo,
    ProduceAck, TopicInfo, UNCLEAN_ELECTION, produce_ack,
};
pub use connection::{ConnectOptions, Connection, Ticket};
pub use error::{ClientError, error_name};
pub use group::{GroupMember, MemberConfig};
