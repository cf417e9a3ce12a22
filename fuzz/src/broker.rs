//! Broker modules that read what the broker wrote to disk, compiled here from the broker's own
//! source files. The broker is a binary crate without a library target, so the fuzz targets
//! cannot depend on it; including the files fuzzes exactly the code the broker runs, with no
//! change to the broker. When the broker gets a `lib.rs`, depend on it instead.
//!
//! The module tree mirrors the broker's (`crate::broker::group::records` sees `super::offsets`
//! as in the broker), with only the modules these need.
#![allow(dead_code, unreachable_pub)]

#[path = "../../broker/src/metadata.rs"]
pub mod metadata;

#[path = "group.rs"]
pub mod group;
