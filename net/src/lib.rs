//! The Kafka wire protocol: framing, request and response codecs, connections, a lean client.
//!
//! Module map:
//! - [`frame`]: size-prefixed frames in ([`frame::FrameReader`], bounded, one reused buffer) and
//!   out ([`frame::FrameBuilder`], [`frame::FrameWriter`]: chunks, large ones never copied).
//! - [`budget`]: per-shard memory budgets (FIFO waiters, permits that give their bytes back), for
//!   requests being read and fetch responses being sent.
//! - [`versions`]: the one table of APIs and versions we speak; [`api_versions`] builds
//!   ApiVersions responses from it.
//! - [`api`]: the [`Request`] and [`Response`] enums, one variant per API.
//! - [`request`]: [`decode_request`] (header v0-v2, then the body) and [`encode_request`].
//! - [`response`]: [`encode_response`] into a [`ResponseFrame`] (header v0/v1, then the body).
//! - [`produce`] and [`fetch`]: the hand-written hot paths, Produce requests (records split out of
//!   the frame, zero-copy) and Fetch responses (record batches written as chunks, zero-copy).
//! - [`server`]: [`serve_connection`], pipelined request handling on a glommio socket.
//! - [`client`]: a lean async client for the admin CLI and the bench.
//! - `shape` (private): checks a request body's lengths before `kafka-protocol` decodes it, since
//!   that crate preallocates arrays from untrusted counts.
//! - `wire` (private): Kafka's primitive types, read without panicking or over-allocating.
//!
//! Bodies other than the two hot paths are `kafka-protocol`'s generated types, re-exported as
//! [`kafka_protocol`] so users build them against the same version.

pub mod api;
pub mod api_versions;
pub mod budget;
pub mod client;
pub mod fetch;
pub mod frame;
pub mod produce;
pub mod request;
pub mod response;
pub mod server;
mod shape;
pub mod versions;
mod wire;

pub use api::{Request, Response};
pub use budget::{HeldMemory, MemoryBudget, MemoryPermit};
pub use fetch::{FetchPartitionResponse, FetchResponse, FetchTopicResponse, NodeEndpoint};
pub use kafka_protocol;
pub use produce::{Acks, ProducePartition, ProduceRequest, ProduceTopic};
pub use request::{DecodeError, decode_request, encode_request};
pub use response::{EncodeError, ResponseFrame, encode_response};
pub use server::{ConnectionConfig, ConnectionError, Handler, ShutdownSignal, serve_connection};
pub use wire::WireError;
