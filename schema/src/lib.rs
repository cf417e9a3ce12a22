//! FlatBuffers schemas of Spindle's own records and node-to-node messages, with the generated
//! Rust code. The schemas are `schema/fbs/*.fbs`; `scripts/gen-schema` regenerates
//! `src/generated/` with the matching `flatc`, and both are committed.
//!
//! - [`metadata`]: the broker's topics, their settings and partition placement.
//! - [`groups`]: the records of the consumer offsets log (committed offsets).
//! - [`controller`]: the Raft frames between the voters of the controller quorum.
//! - [`cluster`]: the envelope of every node-to-node frame on the cluster listener.
//! - [`replication`]: the frames between peer shards that replicate partitions.

#[allow(
    unsafe_code,
    unused_imports,
    dead_code,
    missing_debug_implementations,
    clippy::all,
    clippy::unwrap_used
)]
#[rustfmt::skip]
mod generated;

pub use generated::spindle::cluster;
pub use generated::spindle::controller;
pub use generated::spindle::groups;
pub use generated::spindle::metadata;
pub use generated::spindle::replication;
