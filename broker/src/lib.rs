//! The Spindle broker as a library: the shards and everything they serve, and the admin command
//! line. The `spindle` binary (`main.rs`) is a thin shell over it; integration tests and the
//! simulator link it too.

mod api;
pub mod cli;
mod cluster;
pub mod config;
mod config_ops;
mod controller;
mod group;
mod groups;
mod handler;
mod mesh;
mod metadata;
mod partition;
mod producer;
mod proposals;
mod recompress;
pub mod replication;
mod resource_config;
mod routing;
pub mod server;
mod shard;
mod topic_config;
