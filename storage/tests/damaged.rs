//! Damaged segments and indexes, as the recovery fuzz target (`fuzz/fuzz_targets/recovery.rs`)
//! made them: recovery makes such a directory self-consistent, so reads serve the same good
//! batches however far the log goes on after them, and a clean close and reopen change nothing.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::path::Path;
use std::rc::Rc;

use bytes::Bytes;
use common::*;
use storage::batch::{self, BatchHeader};
use storage::{Log, ShardStorage, StorageConfig};

fn batch_at(offset: i64, count: i32) -> Vec<u8> {
    let mut b = records(count, 10, offset).to_vec();
    batch::assign_offsets(&mut b, offset, 1);
    b
}

/// Writes the segment file of base offset `base` holding `batches`, one after the other.
fn write_segment(dir: &Path, base: i64, batches: &[&[u8]]) {
    std::fs::write(dir.join(format!("{base:020}.log")), batches.concat()).unwrap();
}

/// A shard whose reads all come from the files.
async fn uncached_shard(dir: &Path) -> Rc<ShardStorage> {
    let config = StorageConfig {
        cache_bytes_max: 0,
        ..small_storage_config()
    };
    shard(dir, config).await
}

/// Appends a batch of three records at `offset` (the log's end); returns it as the log holds it.
async fn append_three_at(log: &Log, offset: i64) -> Bytes {
    let mut appended = records(3, 10, 7);
    let info = log.append(appended.clone(), 2).await.unwrap();
    assert_eq!(info.base_offset, offset);
    batch::assign_offsets(&mut appended, offset, 2);
    appended.freeze()
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

/// Found by the fuzz target: a sealed segment with good batches, then garbage. A read that ran
/// into the garbage failed whole, so the good batches before it were served or not depending on
/// how far the read could go (before an append, the log's end stopped reads short of it; after
/// one, they reached it). Now a read ends at the garbage with the batches before it, and one
/// that starts at the garbage reports it.
#[test]
fn good_batches_before_damage_are_served_however_far_the_log_goes() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let (b0, b10, b20) = (batch_at(0, 10), batch_at(10, 10), batch_at(20, 10));
        write_segment(dir.path(), 0, &[&b0, &b10, &b20, &[0xff; 100]]);
        write_segment(dir.path(), 30, &[]);
        let shard = uncached_shard(dir.path()).await;
        let good = [&b0, &b10, &b20].map(|b| Bytes::from(b.clone()));

        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 30);
        // A read that runs into the garbage serves what comes before it; so does one that
        // stops short of it.
        assert_eq!(log.read(0, 1 << 20, 30).await.unwrap(), good);
        assert_eq!(log.read(0, 1 << 20, 25).await.unwrap(), good[..2]);
        assert_eq!(read_until_stuck(&log, 0).await, good);
        append_three_at(&log, 30).await;
        log.close().await.unwrap();

        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 33);
        assert_eq!(log.read(0, 1 << 20, 33).await.unwrap(), good);
        // From inside 20-29: that batch, then the garbage ends the read.
        assert_eq!(log.read(25, 1 << 20, 33).await.unwrap(), good[2..]);
        assert_eq!(
            read_until_stuck(&log, 0).await.len(),
            4,
            "then the appended batch"
        );
        log.close().await.unwrap();
    });
}

/// Found by the fuzz target: a damaged sealed segment holding a batch at the next segment's
/// base offset (its batches went back one offset each time, so they ran past its end). Before
/// an append the log's end stopped reads short of it; after an append, reads served it and
/// then the appended batch: the same offset twice, the first time with a stale record.
#[test]
fn a_damaged_segment_never_serves_the_next_segments_offsets() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let (b0, b9, stale) = (batch_at(0, 10), batch_at(9, 11), batch_at(20, 1));
        write_segment(dir.path(), 0, &[&b0, &b9, &stale]);
        write_segment(dir.path(), 20, &[]);
        let shard = uncached_shard(dir.path()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 20);
        let good = [&b0, &b9].map(|b| Bytes::from(b.clone()));
        assert_eq!(read_until_stuck(&log, 0).await, good);
        let appended = append_three_at(&log, 20).await;
        log.close().await.unwrap();

        let log = open(&shard, dir.path(), small_log_config()).await;
        let served = read_until_stuck(&log, 0).await;
        assert_eq!(served, [&good[..], &[appended]].concat());
        assert!(!served.contains(&Bytes::from(stale)));
        log.close().await.unwrap();
    });
}

/// Found by the fuzz target: an undamaged sealed segment that ends past the next segment's
/// base (0-9, then 10, with the next segment at 10). Reads served its stale 10 once the log
/// went past 10, then the next segment's own batch at 10.
#[test]
fn a_sealed_segment_ending_past_the_next_ones_base_stops_there() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let (b0, stale) = (batch_at(0, 10), batch_at(10, 1));
        write_segment(dir.path(), 0, &[&b0, &stale]);
        write_segment(dir.path(), 10, &[]);
        let shard = uncached_shard(dir.path()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 10);
        let want = vec![Bytes::from(b0), append_three_at(&log, 10).await];
        assert_eq!(read_until_stuck(&log, 0).await, want);
        log.close().await.unwrap();

        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(read_until_stuck(&log, 0).await, want);
        log.close().await.unwrap();
    });
}

/// Found by the fuzz target: after a clean shutdown, an offset index whose last entry lies
/// (offset 10 at position 0, where offset 0 is). Recovery trusted it, found the batch there out
/// of sequence, and cut the segment at the entry: the valid batch 0-9 was lost, and the log went
/// on at 10 in a segment that no longer started at its base, which the next recovery cut again,
/// acknowledged appends and all.
#[test]
fn a_lying_index_never_chooses_where_recovery_cuts() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let (b0, out_of_sequence) = (batch_at(0, 10), batch_at(9, 10));
        write_segment(dir.path(), 0, &[&b0, &out_of_sequence]);
        let index = |ext: &str| dir.path().join(format!("{:020}.{ext}", 0));
        std::fs::write(index("index"), [0, 0, 0, 10, 0, 0, 0, 0]).unwrap();
        std::fs::write(index("timeindex"), b"").unwrap();
        std::fs::write(dir.path().join("clean-shutdown"), b"").unwrap();
        let shard = uncached_shard(dir.path()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(
            log.log_end_offset(),
            10,
            "cut after 0-9, at the batch out of sequence"
        );
        let b0 = Bytes::from(b0);
        assert_eq!(read_until_stuck(&log, 0).await, vec![b0.clone()]);
        let appended = append_three_at(&log, 10).await;
        log.close().await.unwrap();

        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 13);
        assert_eq!(read_until_stuck(&log, 0).await, vec![b0, appended]);
        log.close().await.unwrap();
    });
}
