//! Per-partition costs within shard-wide budgets: write buffers and space reserved ahead follow
//! what partitions write, an idle partition gives its share back, and the free-space guard
//! refuses appends whole.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Duration;

use common::*;
use storage::{
    AppendError, IoMode, Log, LogConfig, RESERVE_AHEAD_FLOOR_BYTES, ResolvedIoMode, ShardStorage,
    StorageConfig,
};

/// Bytes allocated on disk under `dir` (what `du` counts).
fn allocated_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            if p.is_dir() {
                allocated_bytes(&p)
            } else {
                std::fs::metadata(&p).unwrap().blocks() * 512
            }
        })
        .sum()
}

/// Direct writes only: the space they reserve ahead is what most of these tests measure (writes
/// through the page cache reserve none).
fn budgets() -> StorageConfig {
    StorageConfig {
        write_buffer_bytes: 1 << 20,
        preallocate_bytes: 4 << 20,
        page_cache_write_max_bytes: 0,
        ..small_storage_config()
    }
}

/// Writes of at most 16 KiB through the page cache, as the broker's default, and no journal to
/// take them instead (tests/journal.rs has those).
fn through_page_cache() -> StorageConfig {
    StorageConfig {
        page_cache_write_max_bytes: 16 << 10,
        journal_bytes: 0,
        ..budgets()
    }
}

/// Reads `log` whole, checks it holds `batches` batches, and that a reopened log (what the
/// file holds) reads the same.
async fn reads_back_from_the_file(shard: &Rc<ShardStorage>, log: Rc<Log>, batches: usize) {
    let read = read_all(&log, 0).await;
    assert_eq!(read.len(), batches);
    log.close().await.unwrap();
    let log = open(shard, log.dir(), big_segments()).await;
    assert_eq!(read_all(&log, 0).await, read, "all of it in the file");
    log.close().await.unwrap();
}

fn big_segments() -> LogConfig {
    LogConfig {
        segment_bytes_max: 256 << 20,
        ..small_log_config()
    }
}

#[test]
fn many_writing_partitions_share_the_budgets_and_idle_ones_give_them_back() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let config = budgets();
        let shard = shard(dir.path(), config.clone()).await;
        let mut logs = Vec::new();
        for i in 0..64 {
            logs.push(open(&shard, &dir.path().join(format!("p-{i}")), big_segments()).await);
        }
        let mut written = 0u64;
        let mut reserved_max = 0;
        for round in 0..20 {
            for log in &logs {
                let bytes = records(16, 1000, round);
                written += bytes.len() as u64;
                let info = log.append(bytes, 0).await.unwrap();
                log.wait_written(info.next_offset).await.unwrap();
                reserved_max = reserved_max.max(shard.reserved_ahead_bytes());
                // Soft by at most one minimum buffer per writing partition, none of which
                // waits here: the budget holds.
                assert!(shard.write_buffer_used_bytes() <= config.write_buffer_bytes as u64);
            }
        }
        // Past the budget only by the floor each writing partition keeps.
        assert!(
            reserved_max
                <= config.preallocate_bytes + logs.len() as u64 * RESERVE_AHEAD_FLOOR_BYTES,
            "reserved ahead {reserved_max} within the shard's budget"
        );
        assert!(reserved_max > 0, "writers do reserve ahead");
        // Every writer idle: the timer gives the space back.
        glommio::timer::sleep(Duration::from_millis(2500)).await;
        assert_eq!(shard.reserved_ahead_bytes(), 0);
        assert_eq!(shard.write_buffer_used_bytes(), 0);
        let allocated = allocated_bytes(dir.path());
        // Each log's last page may be whole on disk, and file systems allocate in blocks; each
        // log also has its leader-epoch-checkpoint (a block). The shard's journal is allocated
        // whole.
        assert!(
            allocated <= written + 64 * 3 * 4096 + config.journal_bytes + 4096,
            "allocated {allocated} for {written} written"
        );
        for log in &logs {
            let end = log.log_end_offset();
            assert_eq!(read_all(log, 0).await.len(), 20);
            log.close().await.unwrap();
            let log = open(&shard, log.dir(), big_segments()).await;
            assert_eq!(
                log.log_end_offset(),
                end,
                "nothing lost with the reservation"
            );
            log.close().await.unwrap();
        }
    });
}

/// The descriptors this process holds on segment files under `dir`, each with whether its
/// O_DIRECT flag is set (from /proc/self/fdinfo).
fn segment_descriptors(dir: &Path) -> Vec<(PathBuf, bool)> {
    let direct = nix::fcntl::OFlag::O_DIRECT.bits() as u32;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap() {
        let fd = entry.unwrap().file_name().into_string().unwrap();
        // Descriptors of other tests come and go meanwhile.
        let Ok(target) = std::fs::read_link(format!("/proc/self/fd/{fd}")) else {
            continue;
        };
        if !target.starts_with(dir) || target.extension().is_none_or(|e| e != "log") {
            continue;
        }
        let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).unwrap();
        let flags = info
            .lines()
            .find_map(|l| l.strip_prefix("flags:"))
            .map(|f| u32::from_str_radix(f.trim(), 8).unwrap())
            .unwrap();
        found.push((target, flags & direct != 0));
    }
    found.sort();
    found
}

#[test]
fn small_writes_go_through_the_page_cache_on_the_segments_own_descriptor() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let shard = shard(&root, through_page_cache()).await;
        let mut logs = Vec::new();
        for i in 0..8 {
            logs.push(open(&shard, &root.join(format!("p-{i}")), big_segments()).await);
        }
        let opened = segment_descriptors(&root);
        assert_eq!(opened.len(), 8, "a descriptor per segment: {opened:?}");
        for round in 0..10 {
            for log in &logs {
                // A record or two at a time: each flush is a page or so.
                let info = log.append(records(2, 300, round), 0).await.unwrap();
                log.wait_written(info.next_offset).await.unwrap();
            }
        }
        let written = segment_descriptors(&root);
        assert_eq!(
            written.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            opened.iter().map(|(p, _)| p).collect::<Vec<_>>(),
            "no second descriptor for the small writes"
        );
        if storage::resolve_io_mode(&root, IoMode::Auto).unwrap() == ResolvedIoMode::Direct {
            assert!(
                opened.iter().all(|(_, direct)| *direct),
                "segments open for direct IO: {opened:?}"
            );
            assert!(
                written.iter().all(|(_, direct)| !direct),
                "small writes turned O_DIRECT off: {written:?}"
            );
        }
        for log in &logs {
            assert_eq!(read_all(log, 0).await.len(), 10);
            log.close().await.unwrap();
            let log = open(&shard, log.dir(), big_segments()).await;
            assert_eq!(read_all(&log, 0).await.len(), 10, "all of it in the file");
            log.close().await.unwrap();
        }
    });
}

/// A field of this thread's IO counters (/proc/thread-self/io): `wchar` counts the bytes its
/// write(2) calls handed over (not its io_uring writes), `read_bytes` what it read from the
/// device.
fn thread_io(field: &str) -> u64 {
    std::fs::read_to_string("/proc/thread-self/io")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(": "))
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn small_appends_hand_the_page_cache_each_byte_once_and_read_no_page() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), through_page_cache()).await;
        let log = open(&shard, &dir.path().join("p-0"), big_segments()).await;
        // A batch of about 100 KiB: the write buffers that fill as it is copied go out as they
        // fill (4, 8 and 16 KiB through the page cache, 32 KiB directly), and the flush writes
        // the rest, over 16 KiB, directly: its last, partial page is on the device and not in
        // the page cache. (The first append also writes the log's leader-epoch checkpoint,
        // which is not measured.)
        let info = log.append(records(100, 1000, 0), 0).await.unwrap();
        log.wait_written(info.next_offset).await.unwrap();
        let (wchar, read_bytes) = (thread_io("wchar"), thread_io("read_bytes"));
        let mut appended = 0;
        for round in 1..=40 {
            let batch = records(1, 300, round);
            appended += batch.len() as u64;
            let info = log.append(batch, 0).await.unwrap();
            log.wait_written(info.next_offset).await.unwrap();
        }
        assert_eq!(
            thread_io("read_bytes"),
            read_bytes,
            "no page was read from the device to merge a small write into it"
        );
        if storage::resolve_io_mode(dir.path(), IoMode::Auto).unwrap() == ResolvedIoMode::Direct {
            // The page written directly is written whole once (the page cache does not hold
            // its start), then each append's bytes alone: not a page per append.
            let handed = thread_io("wchar") - wchar;
            assert!(
                (appended..=appended + 4096).contains(&handed),
                "{handed} bytes handed to the page cache for {appended} appended"
            );
        }
        reads_back_from_the_file(&shard, log, 41).await;
    });
}

#[test]
fn an_append_through_the_page_cache_is_one_write_even_across_a_page_boundary() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), through_page_cache()).await;
        let log = open(&shard, &dir.path().join("p-0"), big_segments()).await;
        // The first append also writes the log's leader-epoch checkpoint: not measured.
        let first = records(1, 1500, 0);
        let mut position = first.len() as u64;
        let info = log.append(first, 0).await.unwrap();
        log.wait_written(info.next_offset).await.unwrap();
        let mut crossed = 0;
        for round in 1..=40 {
            let batch = records(1, 1500, round);
            let end = position + batch.len() as u64;
            crossed += usize::from((end - 1) / 4096 > position / 4096);
            position = end;
            let writes = thread_io("syscw");
            let info = log.append(batch, 0).await.unwrap();
            log.wait_written(info.next_offset).await.unwrap();
            assert_eq!(
                thread_io("syscw") - writes,
                1,
                "round {round}: one write(2) an append, to {end}"
            );
        }
        assert!(
            crossed >= 10,
            "the appends crossed page boundaries: {crossed}"
        );
        reads_back_from_the_file(&shard, log, 41).await;
    });
}

#[test]
fn a_fast_writer_reserves_more_ahead_than_a_slow_one_and_never_extends_its_file() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), budgets()).await;
        let fast = open(&shard, &dir.path().join("fast"), big_segments()).await;
        for seed in 0..200 {
            fast.append(records(16, 1000, seed), 0).await.unwrap();
        }
        fast.wait_written(fast.log_end_offset()).await.unwrap();
        let reserved_fast = shard.reserved_ahead_bytes();
        assert!(
            reserved_fast > 256 << 10,
            "a fast writer reserves well ahead: {reserved_fast}"
        );
        let file = dir.path().join("fast").join("00000000000000000000.log");
        let size = std::fs::metadata(&file).unwrap().len();
        assert!(
            size >= fast.size_bytes(),
            "space is reserved before it is written"
        );
        fast.close().await.unwrap();
        assert_eq!(shard.reserved_ahead_bytes(), 0, "a clean close trims");
        assert_eq!(std::fs::metadata(&file).unwrap().len(), fast.size_bytes());
    });
}

#[test]
fn the_free_space_guard_refuses_appends_whole() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let config = StorageConfig {
            min_free_bytes: Some(u64::MAX),
            ..budgets()
        };
        let shard = shard(dir.path(), config).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let refused = log.append(records(3, 100, 1), 0).await;
        match refused {
            Err(AppendError::LowOnSpace { min_free_bytes, .. }) => {
                assert_eq!(min_free_bytes, u64::MAX)
            }
            other => panic!("expected a refusal, got {other:?}"),
        }
        assert_eq!(log.log_end_offset(), 0, "nothing appended");
        log.close().await.unwrap();
    });
}

#[test]
fn sealed_indexes_load_on_first_use_and_stay_within_the_shard_budget() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let log_config = small_log_config();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), log_config.clone()).await;
        for seed in 0..200 {
            log.append(records(4, 700, seed), 0).await.unwrap();
        }
        assert!(log.segment_count() > 5);
        let everything = read_all(&log, 0).await;
        let newest = log.max_timestamp().await.unwrap();
        log.close().await.unwrap();

        let budget = 256;
        let shard = common::shard(
            dir.path(),
            StorageConfig {
                index_bytes_max: budget,
                ..small_storage_config()
            },
        )
        .await;
        let log = open(&shard, dir.path(), log_config).await;
        assert_eq!(shard.index_used_bytes(), 0, "a clean start reads no index");
        assert_eq!(read_all(&log, 0).await, everything);
        let one_segment = (64 << 10) / 1024 * 20; // 64 KiB segments, 8 + 12 bytes a KiB
        assert!(
            shard.index_used_bytes() <= budget as u64 + one_segment,
            "{} bytes of indexes loaded",
            shard.index_used_bytes()
        );
        assert_eq!(log.max_timestamp().await.unwrap(), newest);
        assert!(log.offset_for_timestamp(0).await.unwrap().is_some());
        log.close().await.unwrap();
    });
}

/// A segment sealed, made active again by a truncation and sealed again is counted twice in
/// the index budget; the older count must not drop the indexes that a later load put in
/// memory. It did: with the budget spent, every load of that segment dropped itself, and a
/// read of it looped forever (the storage model test's stall). The read is given 20 s, so
/// the bug fails the test instead of hanging it.
#[test]
fn a_segment_counted_twice_in_the_index_budget_still_loads() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let storage = StorageConfig {
            index_bytes_max: 0,
            ..small_storage_config()
        };
        let shard = shard(dir.path(), storage).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let roll = || async {
            log.set_config(LogConfig {
                segment_ms: 0,
                ..small_log_config()
            });
            log.enforce_retention(u64::MAX / 2).await.unwrap();
            log.set_config(small_log_config());
        };
        for seed in 0..4 {
            log.append(records(4, 700, seed), 0).await.unwrap();
        }
        roll().await; // segment 0 (offsets 0..16) sealed: counted once
        for seed in 4..8 {
            log.append(records(4, 700, seed), 0).await.unwrap();
        }
        log.truncate_to(8).await.unwrap(); // segment 0 active again, still counted
        roll().await; // sealed again: counted a second time
        assert_eq!(log.segment_count(), 2);
        log.append(records(4, 700, 9), 0).await.unwrap();
        let read = glommio::timer::timeout(Duration::from_secs(20), async {
            Ok(read_all(&log, 0).await)
        })
        .await
        .expect("a read of segment 0 loads its indexes and goes on");
        assert_eq!(
            read.len(),
            3,
            "two batches left by the truncation, then one"
        );
        log.close().await.unwrap();
    });
}
