//! One partition's commit log.
