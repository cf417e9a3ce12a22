//! A lean async Kafka client on glommio, for the admin CLI and `spindle-bench`.
//!
//! - [`Connection`]: one broker; ApiVersions negotiation, correlation ids, pipelining
//!   ([`Connection::enqueue`] / [`Connection::receive`]), timeouts, generic
//!   [`Connection::send`] over `kafka-protocol` request types.
//! - [`Client`]: a cluster from a bootstrap address; metadata, admin calls, group offsets,
//!   produce of ready batches and fetch, routed to leaders and coordinators.
//! - [`batch`]: v2 record batches, built (with compression) and decoded.
//! - [`ClientError`]: unreachable, timeout, Kafka error code (with its name), protocol errors.
//!
//! Responses are decoded with `kafka-protocol`, which trusts array counts on the wire (see the
//! server's shape check): the client is meant for brokers we run, not hostile ones.

pub mod batch;
mod cluster;
mod connection;
mod error;

pub use cluster::{
    BrokerInfo, Client, ClusterMetadata, CommittedOffset, ConfigChange, ConfigEntry,
    ConfigResource, EARLIEST_TIMESTAMP, FetchedPartition, GroupListing, LATEST_TIMESTAMP, NewTopic,
    PartitionInfo, ProduceAck, TopicInfo, produce_ack,
};
pub use connection::{ConnectOptions, Connection, Ticket};
pub use error::{ClientError, error_name};
