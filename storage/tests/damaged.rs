//! Damaged sealed segments, as the recovery fuzz target (`fuzz/fuzz_targets/recovery.rs`) made
//! them: recovery keeps such a segment whole, and reads must serve the same good batches from
//! it however far the log goes on after it.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use bytes::Bytes;
use common::*;
use storage::batch::{self, BatchHeader};
use storage::{Log, StorageConfig};

fn batch_at(offset: i64, count: i32) -> Vec<u8> {
    let mut b = records(count, 10, offset).to_vec();
    batch::assign_offsets(&mut b, offset, 1);
    b
}

/// Reads from `from` below the log's end until a read fails or brings nothing.
async fn read_until_stuck(log: &Log, from: i64) -> Vec<Bytes> {
    let mut out = Vec::new();
    let mut offset = from;
    while let Ok(batches) = log.read(offset, 1 << 20, log.log_end_offset()).await {
        let Some(last) = batches.last() else { break };
        offset = BatchHeader::parse(last).unwrap().next_offset();
        out.extend(batches);
    }
    out
}

/// Found by the fuzz target: a sealed segment with good batches, then one that reaches past the
/// next segment's base, then garbage. Before an append, reads stopped at the log's end, before
/// the garbage; after an append and a clean reopen the same read reached the garbage and failed
/// whole, so the good batches before it were no longer served.
#[test]
fn good_batches_before_damage_are_served_however_far_the_log_goes() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let (b0, b10, b20) = (batch_at(0, 10), batch_at(10, 10), batch_at(20, 11));
        let sealed = [&b0[..], &b10, &b20, &[0xff; 100]].concat();
        std::fs::write(dir.path().join(format!("{:020}.log", 0)), &sealed).unwrap();
        std::fs::write(dir.path().join(format!("{:020}.log", 30)), b"").unwrap();
        let shard = shard(
            dir.path(),
            StorageConfig {
                cache_bytes_max: 0,
                ..small_storage_config()
            },
        )
        .await;

        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 30);
        // 20-30 ends past the log's end: not served yet.
        let before = read_until_stuck(&log, 0).await;
        assert_eq!(before, [&b0, &b10].map(|b| Bytes::from(b.clone())));
        let appended = log.append(records(3, 10, 7), 2).await.unwrap();
        assert_eq!(appended.base_offset, 30);
        log.close().await.unwrap();

        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 33);
        let end = log.log_end_offset();
        // One read runs into the garbage: it serves what comes before it.
        let read = log.read(0, 1 << 20, end).await.unwrap();
        let good = [&b0, &b10, &b20].map(|b| Bytes::from(b.clone()));
        assert_eq!(read, good);
        assert!(read_until_stuck(&log, 0).await.starts_with(&before));
        // A read from inside 20-30 serves it, and stops at the garbage.
        assert_eq!(
            log.read(25, 1 << 20, end).await.unwrap(),
            vec![Bytes::from(b20)]
        );
        log.close().await.unwrap();
    });
}
