//! Broker modules that read what the broker wrote to disk, compiled here from the broker's own
//! source files: they are private modules of the broker's library, so the fuzz targets cannot
//! name them. Including the files fuzzes exactly the code the broker runs, with no change to
//! the broker. (The metadata's readers are public, in the `model` crate.)
//!
//! The module tree mirrors the broker's (`crate::broker::group::records` sees `super::offsets`
//! as in the broker), with only the modules these need.
#![allow(dead_code, unreachable_pub)]

#[path = "group.rs"]
pub mod group;
