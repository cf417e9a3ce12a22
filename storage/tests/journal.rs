//! The shard's journal across a crash of the process: small appends acknowledged while only
//! the journal held them come back, and what the log undid since (a truncation, a deletion)
//! does not.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use storage::batch;
use storage::{Log, ResolvedIoMode, ShardStorage, StorageConfig};

/// Small writes go to a 1 MiB journal; buffers never run out.
fn journaled() -> StorageConfig {
    StorageConfig {
        journal_bytes: 1 << 20,
        page_cache_write_max_bytes: 16 << 10,
        write_buffer_bytes: 16 << 20,
        ..small_storage_config()
    }
}

fn journal_file(data_dir: &Path, shard_index: usize) -> PathBuf {
    data_dir
        .join("journal")
        .join(format!("shard-{shard_index}.journal"))
}

/// The first (and only) segment file of the log in `log_dir`, as the page cache has it.
fn segment_file(log_dir: &Path) -> Vec<u8> {
    std::fs::read(log_dir.join(format!("{:020}.log", 0))).unwrap()
}

/// How many bytes from the start of the segment file of `log_dir` are those of `batches`.
fn filed_prefix(log_dir: &Path, batches: &[Bytes]) -> usize {
    let expected = batches.concat();
    let file = segment_file(log_dir);
    expected
        .iter()
        .zip(&file)
        .take_while(|(a, b)| a == b)
        .count()
}

/// Appends `n` batches of one record of 200 bytes (contents from `seed` on), waiting for each
/// to be acknowledged (written); each batch as the log now holds it.
async fn append_acked(log: &Log, n: usize, seed: i64) -> Vec<Bytes> {
    let mut out = Vec::new();
    for i in 0..n {
        let mut expected = records(1, 200, seed + i as i64);
        let info = log.append(expected.clone(), 3).await.unwrap();
        log.wait_written(info.next_offset).await.unwrap();
        batch::assign_offsets(&mut expected, info.base_offset, 3);
        out.push(expected.freeze());
    }
    out
}

/// Whether the data directory takes direct IO (the journal is only used then).
fn direct(dir: &Path) -> bool {
    storage::resolve_io_mode(dir, storage::IoMode::Auto).unwrap() == ResolvedIoMode::Direct
}

type Shared = Arc<Mutex<Vec<Bytes>>>;

/// A temporary data directory that takes direct IO (kept alive by the first element), and the
/// directory of a log `p-0` in it.
fn direct_dir() -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        direct(dir.path()),
        "the test needs direct IO in the temp dir"
    );
    let (data_dir, log_dir) = (dir.path().to_path_buf(), dir.path().join("p-0"));
    (dir, data_dir, log_dir)
}

/// Reopens the shard (replaying its journal) and the log in `log_dir`: it holds exactly
/// `expected`.
fn reopen_and_check(data_dir: PathBuf, log_dir: PathBuf, expected: Shared) {
    run(move || async move {
        let shard = shard(&data_dir, journaled()).await;
        let log = open(&shard, &log_dir, small_log_config()).await;
        let expected = expected.lock().unwrap().clone();
        assert_eq!(log.log_end_offset(), expected.len() as i64);
        assert_eq!(read_all(&log, 0).await, expected);
        log.close().await.unwrap();
    });
}

/// Runs `body` on a journaled shard with a log directory `p-0` under it (`body` opens the log
/// there and returns the batches it must hold), checks that the segment file lacks some of
/// them (only the journal has them), ends the executor without closing anything (a crash of the
/// process), and checks that the reopened log holds exactly those batches.
fn crash_then_reopen<F, Fut>(body: F)
where
    F: FnOnce(Rc<ShardStorage>, PathBuf) -> Fut + Send + 'static,
    Fut: Future<Output = Vec<Bytes>> + 'static,
{
    let (_dir, data_dir, log_dir) = direct_dir();
    let kept: Shared = Arc::default();
    let (d, l, k) = (data_dir.clone(), log_dir.clone(), kept.clone());
    run(move || async move {
        let shard = shard(&d, journaled()).await;
        assert!(journal_file(&d, 0).exists());
        let expected = body(shard, l.clone()).await;
        // Right after the appends, well before the timer has writers write out what the
        // journal holds: the file does not have all that was acknowledged.
        let total: usize = expected.iter().map(Bytes::len).sum();
        let filed = filed_prefix(&l, &expected);
        assert!(
            filed < total,
            "{filed} of {total} bytes in the file already"
        );
        *k.lock().unwrap() = expected;
    });
    assert!(journal_file(&data_dir, 0).exists());
    reopen_and_check(data_dir, log_dir, kept);
}

#[test]
fn acknowledged_small_appends_survive_a_crash_through_the_journal() {
    crash_then_reopen(|shard, log_dir| async move {
        let log = open(&shard, &log_dir, small_log_config()).await;
        append_acked(&log, 20, 1_000).await
    });
}

#[test]
fn a_truncation_is_not_undone_by_replay() {
    crash_then_reopen(|shard, log_dir| async move {
        let log = open(&shard, &log_dir, small_log_config()).await;
        // Batches of the same size: were the journal's entries of the truncated batches
        // replayed, the last three would follow the new ones in the file as valid batches.
        let a = append_acked(&log, 10, 1_000).await;
        log.truncate_to(5).await.unwrap();
        let b = append_acked(&log, 2, 5_000).await;
        assert_ne!(
            a[5..7],
            b[..],
            "the new batches differ from the truncated ones"
        );
        let mut expected = a[..5].to_vec();
        expected.extend(b);
        assert_eq!(read_all(&log, 0).await, expected);
        expected
    });
}

#[test]
fn a_deleted_log_is_not_replayed_into_a_new_one_in_its_place() {
    crash_then_reopen(|shard, log_dir| async move {
        let log = open(&shard, &log_dir, small_log_config()).await;
        append_acked(&log, 10, 1_000).await;
        log.delete().await.unwrap();
        assert!(!log_dir.exists());
        let log = open(&shard, &log_dir, small_log_config()).await;
        append_acked(&log, 3, 5_000).await
    });
}

#[test]
fn replay_writes_every_shards_journal_back_and_removes_it() {
    let dir = tempfile::tempdir().unwrap();
    assert!(
        direct(dir.path()),
        "the test needs direct IO in the temp dir"
    );
    let data_dir = dir.path().to_path_buf();
    // Per log: the batches acknowledged, and how many of their bytes only the journal held.
    type Acked = Vec<(Vec<Bytes>, usize)>;
    let acked: Arc<Mutex<Acked>> = Arc::default();
    let (d, a) = (data_dir.clone(), acked.clone());
    run(move || async move {
        let mut logs = Vec::new();
        for index in 0..2 {
            let config = StorageConfig {
                shard_index: index,
                ..journaled()
            };
            let shard = shard(&d, config).await;
            let log_dir = d.join(format!("p-{index}"));
            let log = open(&shard, &log_dir, small_log_config()).await;
            logs.push((shard, log_dir, log));
        }
        for (i, (_, log_dir, log)) in logs.iter().enumerate() {
            let batches = append_acked(log, 15, 1_000 * i as i64).await;
            let total: usize = batches.iter().map(Bytes::len).sum();
            let unfiled = total - filed_prefix(log_dir, &batches);
            assert!(unfiled > 0, "the journal holds some of p-{i}");
            a.lock().unwrap().push((batches, unfiled));
        }
    });
    assert!(journal_file(&data_dir, 0).exists() && journal_file(&data_dir, 1).exists());

    let replayed = storage::journal::replay(&data_dir).unwrap();
    let acked = acked.lock().unwrap().clone();
    assert_eq!(replayed.journals, 2);
    assert!(replayed.entries >= 2, "{replayed:?}");
    let unfiled: usize = acked.iter().map(|(_, u)| u).sum();
    let total: usize = acked.iter().flat_map(|(b, _)| b).map(Bytes::len).sum();
    assert!(
        (unfiled as u64..=total as u64).contains(&replayed.bytes),
        "{replayed:?}: {unfiled} bytes only in the journals, {total} appended"
    );
    let left: Vec<_> = std::fs::read_dir(data_dir.join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert!(left.is_empty(), "journals left: {left:?}");
    for (i, (batches, _)) in acked.iter().enumerate() {
        let bytes = batches.concat();
        let file = segment_file(&data_dir.join(format!("p-{i}")));
        assert_eq!(file[..bytes.len()], bytes[..], "p-{i} in its file");
    }
    assert_eq!(
        storage::journal::replay(&data_dir).unwrap(),
        storage::journal::Replayed::default(),
        "nothing more to replay"
    );

    // The logs open as after any crash, every batch there.
    run(move || async move {
        for (i, (batches, _)) in acked.iter().enumerate() {
            let config = StorageConfig {
                shard_index: i,
                journal_bytes: 0,
                ..journaled()
            };
            let shard = shard(&data_dir, config).await;
            let log = open(&shard, &data_dir.join(format!("p-{i}")), small_log_config()).await;
            assert_eq!(read_all(&log, 0).await, *batches);
            log.close().await.unwrap();
        }
    });
}

#[test]
fn a_clean_stop_removes_the_journal_and_loses_nothing() {
    let (_dir, data_dir, log_dir) = direct_dir();
    let kept: Shared = Arc::default();
    let (d, l, k) = (data_dir.clone(), log_dir.clone(), kept.clone());
    run(move || async move {
        let shard = shard(&d, journaled()).await;
        let log = open(&shard, &l, small_log_config()).await;
        let batches = append_acked(&log, 20, 1_000).await;
        let total: usize = batches.iter().map(Bytes::len).sum();
        assert!(
            filed_prefix(&l, &batches) < total,
            "the journal holds some of the batches"
        );
        assert!(journal_file(&d, 0).exists());
        for closed in shard.close_logs(&[log]).await {
            closed.unwrap();
        }
        assert!(
            !journal_file(&d, 0).exists(),
            "a clean stop leaves nothing for the next start to read"
        );
        // Appends after the removal are acknowledged once in their file: the journal takes no
        // more entries.
        let log = open(&shard, &l, small_log_config()).await;
        let more = append_acked(&log, 3, 5_000).await;
        assert!(!journal_file(&d, 0).exists());
        let all: Vec<Bytes> = batches.into_iter().chain(more).collect();
        let total: usize = all.iter().map(Bytes::len).sum();
        assert_eq!(filed_prefix(&l, &all), total, "every batch is in the file");
        *k.lock().unwrap() = all;
    });
    reopen_and_check(data_dir, log_dir, kept);
}
