//! Scenario tests of a log on a real filesystem: appends and reads, rolls, reopening after a
//! clean and an unclean stop, torn writes, bit flips, retention, truncation, the tmpfs fallback.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use common::*;
use storage::batch::{self, BatchHeader};
use storage::{Log, LogConfig, ReadError, ResolvedIoMode, StorageConfig, TimestampType};

/// Appends `n` batches of `count` records and returns each batch as the log now holds it.
async fn append_batches(log: &Log, n: usize, count: i32, value_bytes: usize) -> Vec<Bytes> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut expected = records(count, value_bytes, 1_000 + i as i64);
        let info = log.append(expected.clone(), 3).await.expect("append");
        assert_eq!(info.last_offset - info.base_offset + 1, i64::from(count));
        batch::assign_offsets(&mut expected, info.base_offset, 3);
        out.push(expected.freeze());
    }
    out
}

#[test]
fn appends_get_dense_offsets_and_read_back_from_cache_and_disk() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        for cache_bytes_max in [1 << 20, 0] {
            let path = dir.path().join(format!("p-{cache_bytes_max}"));
            let shard = shard(
                dir.path(),
                StorageConfig {
                    cache_bytes_max,
                    ..small_storage_config()
                },
            )
            .await;
            let log = open(&shard, &path, small_log_config()).await;
            let written = append_batches(&log, 50, 5, 300).await;
            assert_eq!(log.log_end_offset(), 250);
            log.wait_written(250).await.unwrap();
            assert_eq!(log.high_watermark(), 250);
            assert!(log.segment_count() > 1, "64 KiB segments roll");
            assert_eq!(read_all(&log, 0).await, written);
            // A read starting inside a batch gets that whole batch first.
            let got = log.read(7, 1, 250).await.unwrap();
            assert_eq!(got, vec![written[1].clone()]);
            // Never past the upper bound.
            let got = log.read(0, 1 << 20, 10).await.unwrap();
            assert_eq!(got, written[..2].to_vec());
            assert!(log.read(10, 1 << 20, 10).await.unwrap().is_empty());
            assert!(matches!(
                log.read(251, 100, 1000).await,
                Err(ReadError::OffsetOutOfRange { .. })
            ));
            log.close().await.unwrap();
        }
    });
}

#[test]
fn invalid_batches_are_refused_whole() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let mut two = records(2, 10, 1);
        let mut bad = records(2, 10, 2);
        let last = bad.len() - 1;
        bad[last] ^= 0xff;
        two.extend_from_slice(&bad);
        assert!(matches!(
            log.append(two, 0).await,
            Err(storage::AppendError::InvalidBatch { .. })
        ));
        assert_eq!(log.log_end_offset(), 0, "nothing of the set was appended");
        let config = LogConfig {
            max_message_bytes: 100,
            ..small_log_config()
        };
        log.set_config(config);
        assert!(matches!(
            log.append(records(1, 200, 1), 0).await,
            Err(storage::AppendError::InvalidBatch {
                source: storage::BatchError::TooLarge { .. },
                ..
            })
        ));
        log.close().await.unwrap();
    });
}

#[test]
fn reopening_after_a_clean_close_keeps_everything() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let written = append_batches(&log, 40, 3, 500).await;
        log.close().await.unwrap();
        assert!(log.append(records(1, 1, 1), 0).await.is_err(), "closed");

        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 120);
        assert_eq!(read_all(&log, 0).await, written);
        let more = append_batches(&log, 5, 3, 500).await;
        assert_eq!(more[0][..8], 120i64.to_be_bytes());
        log.close().await.unwrap();
    });
}

/// Each file of a log directory: (inode, modification time, content).
fn files_of(
    dir: &std::path::Path,
) -> std::collections::BTreeMap<String, (u64, std::time::SystemTime, Vec<u8>)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            let state = (
                meta.ino(),
                meta.modified().unwrap(),
                std::fs::read(e.path()).unwrap(),
            );
            (e.file_name().to_string_lossy().into_owned(), state)
        })
        .collect()
}

/// Dates every file of `dir` back (so that any later write shows in its modification time).
fn age_files(dir: &std::path::Path) {
    let long_ago = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(1_000_000);
    for e in std::fs::read_dir(dir).unwrap() {
        let file = std::fs::File::options()
            .write(true)
            .open(e.unwrap().path())
            .unwrap();
        file.set_modified(long_ago).unwrap();
    }
}

#[test]
fn a_log_untouched_since_a_clean_open_closes_without_writing() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        // The log in a directory of its own, apart from the shard's journal.
        let log_dir = dir.path().join("p-0");
        let log = open(&shard, log_dir.as_path(), small_log_config()).await;
        // Several segments, the active one part full: its indexes are saved by the close.
        let written = append_batches(&log, 160, 3, 500).await;
        assert!(log.segment_count() > 1);
        log.close().await.unwrap();
        let marker = log_dir.as_path().join("clean-shutdown");
        assert!(marker.exists());
        age_files(log_dir.as_path());
        let before = files_of(log_dir.as_path());

        // Opened, read (sealed indexes loaded too), closed: nothing changed the log.
        let log = open(&shard, log_dir.as_path(), small_log_config()).await;
        assert!(
            marker.exists(),
            "a clean open leaves the marker until something changes"
        );
        assert_eq!(read_all(&log, 0).await, written);
        log.close().await.unwrap();
        assert_eq!(
            files_of(log_dir.as_path()),
            before,
            "not a file written, replaced or removed"
        );

        // The next open trusts what is there.
        let log = open(&shard, log_dir.as_path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 480);
        assert_eq!(read_all(&log, 0).await, written);
        log.close().await.unwrap();
    });
}

#[test]
fn a_log_touched_after_a_clean_open_saves_its_files_again_at_close() {
    use std::os::unix::fs::MetadataExt;
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        // The log in a directory of its own, apart from the shard's journal.
        let log_dir = dir.path().join("p-0");
        let log = open(&shard, log_dir.as_path(), small_log_config()).await;
        let mut written = append_batches(&log, 10, 3, 500).await;
        log.close().await.unwrap();
        let marker = log_dir.as_path().join("clean-shutdown");
        let before = files_of(log_dir.as_path());
        let active_index = before
            .keys()
            .filter(|name| name.ends_with(".index"))
            .max()
            .unwrap()
            .clone();

        let log = open(&shard, log_dir.as_path(), small_log_config()).await;
        written.extend(append_batches(&log, 1, 3, 500).await);
        assert!(!marker.exists(), "gone with the first change");
        // Renamed, not unlinked, and renamed back by the close: no inode freed or made.
        let marker_inode = before["clean-shutdown"].0;
        let retired = log_dir.as_path().join("clean-shutdown.retired");
        assert_eq!(std::fs::metadata(&retired).unwrap().ino(), marker_inode);
        log.close().await.unwrap();
        assert!(marker.exists());
        assert!(!retired.exists());
        assert_eq!(std::fs::metadata(&marker).unwrap().ino(), marker_inode);
        let after = files_of(log_dir.as_path());
        assert_ne!(
            after[&active_index].2, before[&active_index].2,
            "the active index is saved again"
        );

        let log = open(&shard, log_dir.as_path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 33);
        assert_eq!(read_all(&log, 0).await, written);
        // Truncation changes the files too.
        log.truncate_to(30).await.unwrap();
        assert!(!marker.exists());
        log.close().await.unwrap();
        let log = open(&shard, log_dir.as_path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 30);
        assert_eq!(read_all(&log, 0).await, written[..10]);
        log.close().await.unwrap();
    });
}

#[test]
fn a_shard_closes_its_logs_together_and_each_reopens_clean() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let dirs: Vec<_> = (0..3).map(|i| dir.path().join(format!("t-{i}"))).collect();
        let mut logs = Vec::new();
        let mut written = Vec::new();
        for d in &dirs {
            let log = open(&shard, d, small_log_config()).await;
            written.push(append_batches(&log, 30, 3, 500).await);
            logs.push(log);
        }
        for result in shard.close_logs(&logs).await {
            result.unwrap();
        }
        assert!(logs[0].append(records(1, 1, 1), 3).await.is_err(), "closed");
        // Again: one untouched since its clean open, one appended to, one truncated.
        let untouched = files_of(&dirs[0]);
        let logs = vec![
            open(&shard, &dirs[0], small_log_config()).await,
            open(&shard, &dirs[1], small_log_config()).await,
            open(&shard, &dirs[2], small_log_config()).await,
        ];
        written[1].extend(append_batches(&logs[1], 2, 3, 500).await);
        logs[2].truncate_to(60).await.unwrap();
        written[2].truncate(20);
        for result in shard.close_logs(&logs).await {
            result.unwrap();
        }
        assert_eq!(files_of(&dirs[0]), untouched);
        for (d, written) in dirs.iter().zip(&written) {
            assert!(d.join("clean-shutdown").exists());
            let log = open(&shard, d, small_log_config()).await;
            assert_eq!(read_all(&log, 0).await, *written);
            log.close().await.unwrap();
        }
    });
}

#[test]
fn an_unclean_stop_keeps_every_written_batch() {
    an_unclean_stop_keeps_every_batch_written(false);
}

#[test]
fn an_unclean_stop_after_a_clean_open_keeps_every_written_batch() {
    an_unclean_stop_keeps_every_batch_written(true);
}

/// Appends 30 batches, written but the log never closed; with `reopened_clean`, the first 10
/// before a clean close and a reopening (whose marker must go before the next appends).
fn an_unclean_stop_keeps_every_batch_written(reopened_clean: bool) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let (p, q) = (path.clone(), path.clone());
    let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let w = written.clone();
    run(move || async move {
        let shard = shard(&p, small_storage_config()).await;
        let mut log = open(&shard, &p, small_log_config()).await;
        let mut batches = Vec::new();
        if reopened_clean {
            batches = append_batches(&log, 10, 4, 700).await;
            log.close().await.unwrap();
            log = open(&shard, &p, small_log_config()).await;
        }
        batches.extend(append_batches(&log, 30 - batches.len(), 4, 700).await);
        log.wait_written(log.log_end_offset()).await.unwrap();
        *w.lock().unwrap() = batches;
        // The executor ends here without closing the log: a crash of the process.
    });
    assert!(!path.join("clean-shutdown").exists());
    run(move || async move {
        let shard = shard(&q, small_storage_config()).await;
        let log = open(&shard, &q, small_log_config()).await;
        assert_eq!(log.log_end_offset(), 120);
        assert_eq!(read_all(&log, 0).await, *written.lock().unwrap());
        log.close().await.unwrap();
    });
}

#[test]
fn durable_waits_are_served_by_shared_syncs() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let mut tasks = Vec::new();
        for i in 0..20 {
            let log = log.clone();
            tasks.push(glommio::spawn_local(async move {
                let info = log.append(records(2, 100, i), 0).await.unwrap();
                log.wait_durable(info.next_offset).await.unwrap();
                assert!(
                    log.high_watermark() >= info.next_offset,
                    "durable implies written"
                );
            }));
        }
        for t in tasks {
            t.await;
        }
        assert_eq!(log.high_watermark(), 40);
        log.close().await.unwrap();
    });
}

#[test]
fn delete_before_moves_the_log_start_by_whole_segments() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let written = append_batches(&log, 60, 2, 1000).await;
        assert_eq!(log.delete_before(0).await.unwrap(), 0);
        let deleted = log.delete_before(70).await.unwrap();
        assert!(deleted > 0);
        let start = log.log_start_offset();
        assert!(start > 0 && start <= 70, "log start {start}");
        assert_eq!(
            read_all(&log, start).await,
            written[(start / 2) as usize..].to_vec()
        );
        log.close().await.unwrap();
    });
}

/// Where each of `batches`, laid end to end from the start of a segment, ends.
fn batch_ends(batches: &[Bytes]) -> Vec<usize> {
    batches
        .iter()
        .scan(0, |at, batch| {
            *at += batch.len();
            Some(*at)
        })
        .collect()
}

/// Checks that `log`, opened on a segment of `written` (batches of `count` records) cut at
/// byte `cut`, holds the batches wholly before the cut and nothing after, and goes on from
/// there; then closes it.
async fn holds_the_whole_batches_before(log: &Log, cut: usize, written: &[Bytes], count: i64) {
    let whole = batch_ends(written).iter().filter(|&&e| e <= cut).count();
    assert_eq!(log.log_end_offset(), whole as i64 * count, "cut at {cut}");
    assert_eq!(read_all(log, 0).await, written[..whole].to_vec());
    let more = append_batches(log, 1, 3, 10).await;
    assert_eq!(more[0][..8], (whole as i64 * count).to_be_bytes());
    log.close().await.unwrap();
}

/// Appends after a clean open remove the marker without syncing the directory
/// (`Log::leave_clean_to_append`), so a power cut may bring it back. The start then trusts the
/// index files of the clean close, and must still read every batch appended since with CRCs:
/// whatever of them the cut left (simulated by cutting the segment), only the whole ones are
/// served, and the log goes on after them.
#[test]
fn a_marker_back_after_a_power_cut_vouches_for_nothing_appended_since() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let config = LogConfig {
        segment_bytes_max: 1 << 20,
        ..small_log_config()
    };
    let written = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let (b, c, w) = (base.clone(), config.clone(), written.clone());
    run(move || async move {
        let shard = shard(&b.join("shard"), small_storage_config()).await;
        let log = open(&shard, &b.join("p-0"), c.clone()).await;
        let mut batches = append_batches(&log, 10, 4, 700).await;
        log.close().await.unwrap();
        let log = open(&shard, &b.join("p-0"), c).await;
        batches.extend(append_batches(&log, 20, 4, 700).await);
        log.wait_written(log.log_end_offset()).await.unwrap();
        *w.lock().unwrap() = batches;
        // The executor ends here without closing the log: a crash of the process.
    });
    let original = base.join("p-0");
    assert!(
        !original.join("clean-shutdown").exists(),
        "removed before the first append"
    );
    let written = written.lock().unwrap().clone();
    let (b, c) = (base.clone(), config.clone());
    run(move || async move {
        // The shard's start writes what its journal holds into the segment.
        let _replayed = shard(&b.join("shard"), small_storage_config()).await;
        let segment = original.join(format!("{:020}.log", 0));
        let bytes = std::fs::read(&segment).unwrap();
        let ends = batch_ends(&written);
        assert_eq!(
            bytes.len(),
            ends[ends.len() - 1],
            "every batch in the segment, and nothing after"
        );
        let shard = shard(&b.join("shard-after"), small_storage_config()).await;
        for cut in [
            ends[9],
            ends[9] + 1,
            ends[14] - 1,
            ends[14],
            ends[29] - 1,
            ends[29],
        ] {
            let copy = b.join(format!("cut-{cut}"));
            std::fs::create_dir_all(&copy).unwrap();
            for entry in std::fs::read_dir(&original).unwrap() {
                let entry = entry.unwrap();
                std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
            }
            std::fs::write(copy.join(format!("{:020}.log", 0)), &bytes[..cut]).unwrap();
            std::fs::write(copy.join("clean-shutdown"), b"").unwrap();
            let log = open(&shard, &copy, c.clone()).await;
            holds_the_whole_batches_before(&log, cut, &written, 4).await;
        }
    });
}

#[test]
fn a_torn_tail_is_cut_at_the_last_whole_batch() {
    // Cut the active segment at many byte positions; every batch wholly before the cut must
    // survive and nothing after it may be served.
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    run(move || async move {
        let config = LogConfig {
            segment_bytes_max: 1 << 20,
            ..small_log_config()
        };
        let shard = shard(&base, small_storage_config()).await;
        let original = base.join("original");
        let log = open(&shard, &original, config.clone()).await;
        let written = append_batches(&log, 20, 3, 200).await;
        log.close().await.unwrap();
        let segment = original.join(format!("{:020}.log", 0));
        let bytes = std::fs::read(&segment).unwrap();
        let ends = batch_ends(&written);
        let mut cuts: Vec<usize> = (0..bytes.len()).step_by(97).collect();
        cuts.extend(ends.iter().copied());
        cuts.extend(ends.iter().map(|e| e - 1));
        for cut in cuts {
            let dir = base.join(format!("cut-{cut}"));
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{:020}.log", 0)), &bytes[..cut]).unwrap();
            let log = open(&shard, &dir, config.clone()).await;
            holds_the_whole_batches_before(&log, cut, &written, 3).await;
        }
    });
}

#[test]
fn a_bit_flip_in_an_old_segment_is_reported_not_served() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(
            dir.path(),
            StorageConfig {
                cache_bytes_max: 0,
                ..small_storage_config()
            },
        )
        .await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let written = append_batches(&log, 60, 2, 1000).await;
        log.close().await.unwrap();
        // Flip a bit in the value of the third batch of the first (sealed) segment.
        let segment = dir.path().join(format!("{:020}.log", 0));
        let mut bytes = std::fs::read(&segment).unwrap();
        let at = written[0].len() + written[1].len() + 500;
        bytes[at] ^= 0x10;
        std::fs::write(&segment, &bytes).unwrap();

        let log = open(&shard, dir.path(), small_log_config()).await;
        let hw = log.high_watermark();
        assert_eq!(log.read(0, 1, hw).await.unwrap(), vec![written[0].clone()]);
        assert!(matches!(
            log.read(4, 1, hw).await,
            Err(ReadError::Corrupt { .. })
        ));
        // A read that would run into it stops short of it or reports it; it never serves it.
        match log.read(2, 1 << 20, hw).await {
            Ok(batches) => assert!(!batches.contains(&written[2])),
            Err(e) => assert!(matches!(e, ReadError::Corrupt { .. })),
        }
        // Batches after it, and in later segments, are fine.
        assert_eq!(log.read(6, 1, hw).await.unwrap(), vec![written[3].clone()]);
        assert_eq!(
            log.read(110, 1, hw).await.unwrap(),
            vec![written[55].clone()]
        );
        log.close().await.unwrap();
    });
}

/// Found by `fuzz/fuzz_targets/recovery.rs`: a sealed segment whose batches go back to offsets
/// already in it (recovery keeps a damaged sealed segment whole) made one read serve a batch
/// and then an older one, so a consumer's offsets went backwards.
#[test]
fn a_sealed_segment_whose_offsets_go_back_never_serves_them_backwards() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let batch_at = |offset: i64, count: i32| {
            let mut b = records(count, 10, offset).to_vec();
            batch::assign_offsets(&mut b, offset, 1);
            b
        };
        // Segment 0: offsets 0-9, 10-19, then 5-14 again; segment 20 follows it. No indexes,
        // no clean-shutdown marker: recovery scans both.
        let sealed = [batch_at(0, 10), batch_at(10, 10), batch_at(5, 10)].concat();
        std::fs::write(dir.path().join(format!("{:020}.log", 0)), &sealed).unwrap();
        std::fs::write(dir.path().join(format!("{:020}.log", 20)), batch_at(20, 5)).unwrap();
        let shard = shard(
            dir.path(),
            StorageConfig {
                cache_bytes_max: 0,
                ..small_storage_config()
            },
        )
        .await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_end_offset(), 25);
        let mut next = 0;
        for from in [0, 3, 10] {
            for b in log.read(from, 1 << 20, 25).await.unwrap() {
                let h = BatchHeader::parse(&b).unwrap();
                assert!(
                    h.last_offset() >= from.max(next),
                    "{h:?} served after {next}"
                );
                next = h.next_offset();
            }
            next = 0;
        }
        assert_eq!(
            read_all(&log, 0).await.len(),
            3,
            "0-9, 10-19, then segment 20"
        );
        log.close().await.unwrap();
    });
}

#[test]
fn retention_deletes_old_segments_by_size_and_time() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let config = LogConfig {
            retention_bytes: Some(200 << 10),
            ..small_log_config()
        };
        let log = open(&shard, dir.path(), config.clone()).await;
        let written = append_batches(&log, 100, 4, 1000).await;
        let before = log.segment_count();
        assert!(log.size_bytes() > 300 << 10);
        let deleted = log.enforce_retention(0).await.unwrap();
        assert!(deleted > 0);
        assert_eq!(log.segment_count(), before - deleted);
        assert!(log.size_bytes() >= 200 << 10, "never below retention.bytes");
        let start = log.log_start_offset();
        assert!(start > 0);
        assert!(matches!(
            log.read(0, 1, log.high_watermark()).await,
            Err(ReadError::OffsetOutOfRange { .. })
        ));
        let first_kept = written
            .iter()
            .position(|b| b[..8] == start.to_be_bytes())
            .unwrap();
        assert_eq!(read_all(&log, start).await, written[first_kept..].to_vec());

        // Time: every record has a timestamp near 1_000, so all is expired at 1_000_000 with a
        // retention of 1 s, the active segment included (it is rolled first).
        log.set_config(LogConfig {
            retention_ms: Some(1_000),
            retention_bytes: None,
            ..config
        });
        log.enforce_retention(1_000_000).await.unwrap();
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.log_start_offset(), 400);
        assert_eq!(log.log_end_offset(), 400);
        append_batches(&log, 1, 1, 1).await;
        assert_eq!(log.log_end_offset(), 401);
        log.close().await.unwrap();
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_start_offset(), 400);
        log.close().await.unwrap();
    });
}

#[test]
fn truncation_drops_the_batch_holding_the_offset_and_all_after() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let written = append_batches(&log, 60, 5, 700).await;
        log.truncate_to(122).await.unwrap();
        assert_eq!(log.log_end_offset(), 120);
        assert_eq!(read_all(&log, 0).await, written[..24].to_vec());
        let more = append_batches(&log, 3, 5, 700).await;
        assert_eq!(more[0][..8], 120i64.to_be_bytes());
        log.close().await.unwrap();
        let log = open(&shard, dir.path(), small_log_config()).await;
        let mut expected = written[..24].to_vec();
        expected.extend(more);
        assert_eq!(read_all(&log, 0).await, expected);
        log.truncate_to(0).await.unwrap();
        assert_eq!(log.log_end_offset(), 0);
        assert_eq!(log.segment_count(), 1);
        log.close().await.unwrap();
    });
}

#[test]
fn recent_batch_headers_cover_the_tail_of_the_log_after_a_restart() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let config = LogConfig {
            segment_bytes_max: 1 << 20,
            ..small_log_config()
        };
        let log = open(&shard, dir.path(), config.clone()).await;
        for i in 0..100 {
            let b = batch::testing::with_producer(batch::testing::batch(3, 500, 0), 42, 0, i * 3);
            log.append(BytesMut::from(&b[..]), 0).await.unwrap();
        }
        log.close().await.unwrap();
        let log = open(&shard, dir.path(), config).await;
        let tail = log.recent_batch_headers(20_000).await.unwrap();
        assert!(
            !tail.is_empty() && tail.len() < 100,
            "only the tail: {}",
            tail.len()
        );
        let last = tail.last().unwrap();
        assert_eq!(
            (last.producer_id, last.base_sequence, last.base_offset),
            (42, 297, 297)
        );
        assert!(
            tail.windows(2)
                .all(|w| w[0].next_offset() == w[1].base_offset)
        );
        assert_eq!(
            log.recent_batch_headers(usize::MAX).await.unwrap().len(),
            100
        );
        log.close().await.unwrap();
    });
}

#[test]
fn offsets_are_found_by_timestamp() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        // Batch i holds 10 records with timestamps 1000*i .. 1000*i + 9.
        for i in 0..100 {
            log.append(records(10, 200, 1000 * i), 0).await.unwrap();
        }
        // Each answer carries the found record's own timestamp, as Kafka's does.
        assert_eq!(log.offset_for_timestamp(0).await.unwrap(), Some((0, 0)));
        assert_eq!(
            log.offset_for_timestamp(42_005).await.unwrap(),
            Some((425, 42_005))
        );
        assert_eq!(
            log.offset_for_timestamp(42_010).await.unwrap(),
            Some((430, 43_000))
        );
        assert_eq!(log.offset_for_timestamp(99_010).await.unwrap(), None);
        log.close().await.unwrap();
    });
}

#[test]
fn a_log_append_time_log_stamps_batches_with_the_append_time() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let config = LogConfig {
            timestamp_type: TimestampType::LogAppendTime,
            ..small_log_config()
        };
        let log = open(&shard, dir.path(), config).await;
        let now_ms = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis() as i64
        };
        let before_ms = now_ms();
        // The producer's own timestamps are from long ago; two batches in one record set.
        let mut two = records(5, 100, 1_000);
        two.extend_from_slice(&records(5, 100, 2_000));
        let info = log.append(two, 0).await.unwrap();
        let after_ms = now_ms();
        let stamped_ms = info.log_append_time_ms.unwrap();
        assert!((before_ms..=after_ms).contains(&stamped_ms));
        log.wait_written(info.next_offset).await.unwrap();
        log.close().await.unwrap();

        // Read back from disk: the stamp is in the bytes, CRC-valid.
        let shard = common::shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let batches = read_all(&log, 0).await;
        assert_eq!(batches.len(), 2);
        for b in &batches {
            let h = batch::validate(b, usize::MAX).unwrap();
            assert!(h.is_log_append_time());
            assert_eq!(h.max_timestamp, stamped_ms);
        }
        // The time index follows the stamps: nothing is before the append time.
        assert_eq!(
            log.offset_for_timestamp(stamped_ms).await.unwrap(),
            Some((0, stamped_ms))
        );
        log.close().await.unwrap();
    });
}

#[test]
fn buffered_io_works_and_tmpfs_falls_back_to_it() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), buffered()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let written = append_batches(&log, 30, 2, 900).await;
        log.close().await.unwrap();
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(read_all(&log, 0).await, written);
        log.close().await.unwrap();

        let shm = std::path::Path::new("/dev/shm");
        if shm.is_dir() {
            let dir = tempfile::tempdir_in(shm).unwrap();
            let mode = storage::resolve_io_mode(dir.path(), storage::IoMode::Auto).unwrap();
            assert_eq!(mode, ResolvedIoMode::Buffered, "tmpfs has no direct IO");
            let shard = shard_with_mode(dir.path(), small_storage_config(), mode).await;
            let log = open(&shard, dir.path(), small_log_config()).await;
            let written = append_batches(&log, 30, 2, 900).await;
            log.close().await.unwrap();
            let log = open(&shard, dir.path(), small_log_config()).await;
            assert_eq!(read_all(&log, 0).await, written);
            log.close().await.unwrap();
        }
    });
}

#[test]
fn shard_cache_stays_within_budget_and_drops_closed_logs() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(
            dir.path(),
            StorageConfig {
                cache_bytes_max: 100 << 10,
                ..small_storage_config()
            },
        )
        .await;
        let logs: Vec<Rc<Log>> = futures_lite::stream::iter(0..3)
            .then(|i| {
                let shard = shard.clone();
                let path = dir.path().join(i.to_string());
                async move { open(&shard, &path, small_log_config()).await }
            })
            .collect()
            .await;
        for log in &logs {
            append_batches(log, 50, 2, 1000).await;
            log.wait_written(log.log_end_offset()).await.unwrap();
        }
        append_batches(&logs[0], 1, 1, 1).await;
        assert!(shard.cache_used_bytes() <= (100 << 10) + 4096);
        for log in &logs {
            log.close().await.unwrap();
        }
        assert_eq!(shard.cache_used_bytes(), 0);
    });
}

use futures_lite::StreamExt;

/// A batch whose end fills the tail page exactly: the page's write starts inside the append
/// (and, through the page cache, is done there too), and must still count the batch as written.
fn a_batch_that_ends_at_a_page_end_is_written(page_cache_write_max_bytes: usize) {
    run(move || async move {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            page_cache_write_max_bytes,
            ..small_storage_config()
        };
        let shard = shard(dir.path(), config).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let first = log.append(records(1, 100, 1), 0).await.unwrap();
        log.wait_written(first.next_offset).await.unwrap();
        let rest = 4096 - log.size_bytes() as usize;
        let value_bytes = (0..4096)
            .find(|&v| records(1, v, 2).len() == rest)
            .expect("a one-record batch of every size from its header's up");
        let info = log.append(records(1, value_bytes, 2), 0).await.unwrap();
        assert_eq!(log.size_bytes(), 4096, "the tail page is full");
        let written = futures_lite::future::or(
            async { log.wait_written(info.next_offset).await.map(|()| true) },
            async {
                glommio::timer::sleep(std::time::Duration::from_secs(5)).await;
                Ok(false)
            },
        )
        .await
        .unwrap();
        assert!(written, "the batch that filled the page is written");
        log.close().await.unwrap();
    });
}

#[test]
fn a_batch_that_ends_at_a_page_end_is_written_through_the_page_cache() {
    a_batch_that_ends_at_a_page_end_is_written(16 << 10);
}

#[test]
fn a_batch_that_ends_at_a_page_end_is_written_directly() {
    a_batch_that_ends_at_a_page_end_is_written(0);
}
