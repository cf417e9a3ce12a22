//! Shared by the storage integration tests: an executor to run in, logs to open, batches to
//! append.
#![allow(dead_code)] // each test binary uses a different part of this module

use std::future::Future;
use std::path::Path;
use std::rc::Rc;

use bytes::BytesMut;
use glommio::LocalExecutorBuilder;
use storage::batch::testing;
use storage::{
    IoMode, Log, LogConfig, ResolvedIoMode, ShardStorage, StorageConfig, resolve_io_mode,
};

/// Runs `f` on a fresh glommio executor and waits for it. Tasks left running when `f` returns
/// are dropped with the executor, as they would be by a crash of the process.
pub fn run<F, Fut>(f: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    LocalExecutorBuilder::default()
        .spawn(f)
        .expect("executor starts")
        .join()
        .expect("test body does not panic");
}

pub fn small_storage_config() -> StorageConfig {
    StorageConfig {
        write_buffer_bytes: 64 << 10,
        writes_in_flight_max: 2,
        preallocate_bytes: 1 << 20,
        cache_bytes_max: 1 << 20,
        journal_bytes: 1 << 20,
        ..StorageConfig::default()
    }
}

pub async fn shard(dir: &Path, config: StorageConfig) -> Rc<ShardStorage> {
    let mode = resolve_io_mode(dir, config.io_mode).expect("io mode");
    shard_with_mode(dir, config, mode).await
}

pub async fn shard_with_mode(
    dir: &Path,
    config: StorageConfig,
    mode: ResolvedIoMode,
) -> Rc<ShardStorage> {
    ShardStorage::open(dir, config, mode)
        .await
        .expect("shard storage opens")
}

pub fn small_log_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 64 << 10,
        index_interval_bytes: 1024,
        retention_ms: None,
        ..LogConfig::default()
    }
}

pub async fn open(shard: &Rc<ShardStorage>, dir: &Path, config: LogConfig) -> Rc<Log> {
    shard.open_log(dir, config).await.expect("log opens")
}

/// A producer's batch of `count` records; its bytes depend on `seed` so batches differ.
pub fn records(count: i32, value_bytes: usize, seed: i64) -> BytesMut {
    BytesMut::from(&testing::batch(count, value_bytes, seed)[..])
}

pub fn buffered() -> StorageConfig {
    StorageConfig {
        io_mode: IoMode::Buffered,
        ..small_storage_config()
    }
}

/// Reads the whole log from `from` and returns its batches.
pub async fn read_all(log: &Log, from: i64) -> Vec<bytes::Bytes> {
    let mut out = Vec::new();
    let mut offset = from;
    while offset < log.log_end_offset() {
        let batches = log
            .read(offset, 100_000, log.log_end_offset())
            .await
            .expect("read");
        assert!(!batches.is_empty(), "read at {offset} made no progress");
        for b in batches {
            let h = storage::BatchHeader::parse(&b).unwrap();
            assert!(h.last_offset() >= offset);
            offset = h.next_offset();
            out.push(b);
        }
    }
    out
}

/// How many cases a property test runs: `default` (what keeps `scripts/test` quick), or
/// `PROPTEST_CASES` to hunt longer. Beyond a couple of thousand cases of a test that simulates
/// crashes the process runs out of file descriptors: a simulated crash drops an executor with
/// its files open, and glommio closes a dropped file on its executor's next IO cycle, which
/// never comes. (A real crash's files are closed by the kernel.)
pub fn proptest_cases(default: u32) -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}
