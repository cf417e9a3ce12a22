//! The Kafka wire protocol.
