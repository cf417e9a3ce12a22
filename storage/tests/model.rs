//! Random sequences of append, roll, read, truncate, retention and reopen (clean, and unclean:
//! the executor ends without closing the log, as in a crash of the process) run against a
//! simple in-memory model of the log; the two must agree after every step.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use proptest::prelude::*;
use storage::batch::{self, BatchHeader};
use storage::{Log, LogConfig, ReadError, StorageConfig};

#[derive(Debug, Clone)]
enum Op {
    Append {
        count: i32,
        value_bytes: usize,
    },
    /// Appends in flight together (pipelined requests): their writes overlap on the device.
    Pipelined {
        batches: Vec<(i32, usize)>,
    },
    Read {
        at: f64,
        max_bytes: usize,
    },
    Roll,
    Truncate {
        at: f64,
    },
    RetainBytes {
        bytes: u64,
    },
    ReopenClean,
    /// Crash: the executor ends without closing; `wait` says whether appends were waited for.
    ReopenUnclean {
        wait: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1i32..20, 0usize..2000).prop_map(|(count, value_bytes)| Op::Append { count, value_bytes }),
        2 => proptest::collection::vec((1i32..20, 0usize..2000), 2..8)
            .prop_map(|batches| Op::Pipelined { batches }),
        3 => (0.0..1.0f64, 1usize..40_000).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => Just(Op::Roll),
        1 => (0.0..1.0f64).prop_map(|at| Op::Truncate { at }),
        1 => (0u64..200_000).prop_map(|bytes| Op::RetainBytes { bytes }),
        1 => Just(Op::ReopenClean),
        1 => any::<bool>().prop_map(|wait| Op::ReopenUnclean { wait }),
    ]
}

/// The model: the batches the log holds, in order, as the log should return them.
#[derive(Debug, Default, Clone)]
struct Model {
    batches: Vec<Bytes>,
    log_start_offset: i64,
    log_end_offset: i64,
    seed: i64,
    /// Before a crash: the offset below which everything was written, so must survive.
    survives_to: i64,
}

impl Model {
    fn offset_at(&self, at: f64) -> i64 {
        let span = (self.log_end_offset - self.log_start_offset) as f64;
        self.log_start_offset + (span * at) as i64
    }

    fn index_of(&self, offset: i64) -> Option<usize> {
        self.batches.iter().position(|b| {
            let h = BatchHeader::parse(b).unwrap();
            h.base_offset <= offset && offset <= h.last_offset()
        })
    }

    /// Keeps batches wholly below `offset`... and the one holding it goes, as in the log.
    fn truncate(&mut self, offset: i64) {
        if offset >= self.log_end_offset {
            return;
        }
        let keep = self
            .batches
            .iter()
            .take_while(|b| BatchHeader::parse(b).unwrap().last_offset() < offset)
            .count();
        self.batches.truncate(keep);
        self.log_end_offset = self.batches.last().map_or(self.log_start_offset, |b| {
            BatchHeader::parse(b).unwrap().next_offset()
        });
    }
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 48 << 10,
        index_interval_bytes: 2048,
        retention_ms: None,
        ..LogConfig::default()
    }
}

/// `index_bytes`: the shard's budget for sealed segments' indexes; a small one makes reads,
/// retention and truncation load them again and again.
/// `page_cache_bytes`: writes up to this go to the shard's journal, and through the page cache
/// when it has no room (0: none; one page: only tail-page rewrites; two pages: a mix of both
/// kinds over fresh pages). The journal is small: it fills, wraps and makes writers write out
/// what it holds all the time.
fn storage_config(index_bytes: usize, page_cache_bytes: usize) -> StorageConfig {
    StorageConfig {
        page_cache_write_max_bytes: page_cache_bytes,
        journal_bytes: 64 << 10,
        write_buffer_bytes: 16 << 10,
        writes_in_flight_max: 2,
        preallocate_bytes: 64 << 10,
        cache_bytes_max: 32 << 10,
        index_bytes_max: index_bytes,
        ..StorageConfig::default()
    }
}

async fn check_read(log: &Log, model: &Model, offset: i64, max_bytes: usize) {
    let hw = log.high_watermark();
    let got = log.read(offset, max_bytes, hw).await;
    if offset < model.log_start_offset || offset > model.log_end_offset {
        assert!(
            matches!(got, Err(ReadError::OffsetOutOfRange { .. })),
            "read at {offset} outside [{}, {}]: {got:?}",
            model.log_start_offset,
            model.log_end_offset
        );
        return;
    }
    let got = got.expect("read in range");
    let Some(first) = model.index_of(offset) else {
        assert!(got.is_empty(), "read at the end returns nothing");
        return;
    };
    // Whole batches from the one holding the offset, contiguous, at least one, then only
    // while within max_bytes, all below the high watermark.
    let mut total = 0;
    for (i, b) in got.iter().enumerate() {
        assert_eq!(
            b,
            &model.batches[first + i],
            "batch {i} of a read at {offset}"
        );
        total += b.len();
        assert!(i == 0 || total <= max_bytes);
        assert!(BatchHeader::parse(b).unwrap().next_offset() <= hw);
    }
    if hw == model.log_end_offset {
        assert!(
            !got.is_empty(),
            "a read below the high watermark returns a batch"
        );
    }
}

async fn check_all(log: &Log, model: &Model) {
    assert_eq!(log.log_start_offset(), model.log_start_offset);
    assert_eq!(log.log_end_offset(), model.log_end_offset);
    log.wait_written(model.log_end_offset).await.unwrap();
    let mut offset = model.log_start_offset;
    let mut seen = Vec::new();
    while offset < model.log_end_offset {
        let batches = log
            .read(offset, 64 << 10, model.log_end_offset)
            .await
            .unwrap();
        assert!(!batches.is_empty());
        for b in batches {
            offset = BatchHeader::parse(&b).unwrap().next_offset();
            seen.push(b);
        }
    }
    assert_eq!(seen, model.batches, "the whole log");
}

/// Runs ops on one executor until an unclean reopen (returned as the op index to resume at).
fn run_until_crash(
    dir: PathBuf,
    ops: Arc<Vec<Op>>,
    from: usize,
    model: Arc<Mutex<Model>>,
    index_bytes: usize,
    page_cache_bytes: usize,
) -> usize {
    let result = Arc::new(Mutex::new(ops.len()));
    let r = result.clone();
    run(move || async move {
        let shard = shard(&dir, storage_config(index_bytes, page_cache_bytes)).await;
        let mut log = open(&shard, &dir, log_config()).await;
        assert_eq!(
            shard.index_used_bytes(),
            0,
            "opening a log loads no sealed segment's indexes"
        );
        let mut m = model.lock().unwrap().clone();
        // After a crash: every written batch survived; later ones may or may not have.
        assert!(
            log.log_end_offset() >= m.survives_to,
            "a written batch was lost"
        );
        if log.log_end_offset() != m.log_end_offset {
            assert!(log.log_end_offset() < m.log_end_offset);
            m.truncate(log.log_end_offset());
            assert_eq!(
                log.log_end_offset(),
                m.log_end_offset,
                "the log ends at a batch end"
            );
        }
        check_all(&log, &m).await;
        for (i, op) in ops.iter().enumerate().skip(from) {
            match op {
                Op::Append { count, value_bytes } => {
                    m.seed += 1;
                    let mut expected = records(*count, *value_bytes, m.seed);
                    let info = log.append(expected.clone(), 1).await.unwrap();
                    assert_eq!(info.base_offset, m.log_end_offset);
                    batch::assign_offsets(&mut expected, info.base_offset, 1);
                    m.batches.push(expected.freeze());
                    m.log_end_offset = info.next_offset;
                }
                Op::Pipelined { batches } => {
                    // Spawned in order, so offsets follow that order (the append lock is FIFO).
                    let mut appends = Vec::new();
                    for &(count, value_bytes) in batches {
                        m.seed += 1;
                        let expected = records(count, value_bytes, m.seed);
                        let log = log.clone();
                        let bytes = expected.clone();
                        appends.push((
                            expected,
                            glommio::spawn_local(async move { log.append(bytes, 1).await }),
                        ));
                    }
                    for (mut expected, append) in appends {
                        let info = append.await.unwrap();
                        assert_eq!(info.base_offset, m.log_end_offset);
                        batch::assign_offsets(&mut expected, info.base_offset, 1);
                        m.batches.push(expected.freeze());
                        m.log_end_offset = info.next_offset;
                    }
                }
                Op::Read { at, max_bytes } => {
                    check_read(&log, &m, m.offset_at(*at), *max_bytes).await;
                    check_read(&log, &m, m.log_end_offset + 1, *max_bytes).await;
                }
                Op::Roll => {
                    log.set_config(LogConfig {
                        segment_ms: 0,
                        ..log_config()
                    });
                    log.enforce_retention(u64::MAX / 2).await.unwrap();
                    log.set_config(log_config());
                }
                Op::Truncate { at } => {
                    let offset = m.offset_at(*at);
                    log.truncate_to(offset).await.unwrap();
                    m.truncate(offset);
                }
                Op::RetainBytes { bytes } => {
                    log.set_config(LogConfig {
                        retention_bytes: Some(*bytes),
                        ..log_config()
                    });
                    log.enforce_retention(0).await.unwrap();
                    log.set_config(log_config());
                    let start = log.log_start_offset();
                    assert!(start >= m.log_start_offset && start <= m.log_end_offset);
                    let dropped = m
                        .batches
                        .iter()
                        .take_while(|b| BatchHeader::parse(b).unwrap().base_offset < start)
                        .count();
                    m.batches.drain(..dropped);
                    m.log_start_offset = start;
                    if let Some(b) = m.batches.first() {
                        assert_eq!(BatchHeader::parse(b).unwrap().base_offset, start);
                    }
                }
                Op::ReopenClean => {
                    log.close().await.unwrap();
                    log = open(&shard, &dir, log_config()).await;
                }
                Op::ReopenUnclean { wait } => {
                    if *wait {
                        log.wait_written(m.log_end_offset).await.unwrap();
                    }
                    // Everything written by now must survive the crash.
                    m.survives_to = log.high_watermark();
                    *model.lock().unwrap() = m;
                    *r.lock().unwrap() = i + 1;
                    return;
                }
            }
            assert_eq!(log.log_end_offset(), m.log_end_offset);
            assert_eq!(log.log_start_offset(), m.log_start_offset);
        }
        check_all(&log, &m).await;
        log.close().await.unwrap();
        *model.lock().unwrap() = m;
    });
    *result.lock().unwrap()
}

proptest! {
    // 64 cases keep `scripts/test` quick; `PROPTEST_CASES=1000` hunts longer (50 s in release).
    #![proptest_config(ProptestConfig { cases: proptest_cases(64), ..ProptestConfig::default() })]

    #[test]
    fn log_agrees_with_a_model(
        ops in proptest::collection::vec(op(), 1..60),
        index_bytes in prop_oneof![Just(0usize), Just(256), Just(1 << 20)],
        page_cache_bytes in prop_oneof![Just(0usize), Just(4096), Just(8192)],
    ) {
        let dir = tempfile::tempdir().unwrap();
        let ops = Arc::new(ops);
        let model = Arc::new(Mutex::new(Model::default()));
        let mut from = 0;
        while from < ops.len() {
            from = run_until_crash(
                dir.path().to_path_buf(),
                ops.clone(),
                from,
                model.clone(),
                index_bytes,
                page_cache_bytes,
            );
        }
    }
}
