//! Leader epochs and a follower's appends: the epoch map a log keeps (`leader-epoch-checkpoint`)
//! through appends, truncation, deletion of old segments and restarts; `append_replicated`
//! refusing what does not continue the log; a replica built from a leader's batches holding
//! the same bytes.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use std::collections::BTreeMap;
use std::path::Path;

use bytes::{Bytes, BytesMut};
use common::*;
use storage::batch::{self, BatchHeader};
use storage::{AppendError, BatchError, EpochEntry, Log, LogConfig, TimestampType};

const CHECKPOINT: &str = "leader-epoch-checkpoint";

fn entry(epoch: i32, start_offset: i64) -> EpochEntry {
    EpochEntry {
        epoch,
        start_offset,
    }
}

/// A batch of `count` records as a leader of `epoch` stamped it at `base_offset`.
fn stamped(count: i32, value_bytes: usize, seed: i64, base_offset: i64, epoch: i32) -> Bytes {
    let mut b = records(count, value_bytes, seed);
    batch::assign_offsets(&mut b, base_offset, epoch);
    b.freeze()
}

fn checkpoint_text(dir: &Path) -> String {
    std::fs::read_to_string(dir.join(CHECKPOINT)).unwrap()
}

#[test]
fn leader_appends_record_each_new_epoch_and_the_file_keeps_them() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.leader_epochs(), vec![]);
        assert_eq!(log.end_offset_for_epoch(0), None);
        assert!(
            !dir.path().join(CHECKPOINT).exists(),
            "a new log writes no file"
        );
        for (epoch, n) in [(0, 3), (0, 2), (2, 4), (5, 1)] {
            for i in 0..n {
                log.append(records(2, 100, i), epoch).await.unwrap();
            }
        }
        let want = vec![entry(0, 0), entry(2, 10), entry(5, 18)];
        assert_eq!(log.leader_epochs(), want);
        assert_eq!(checkpoint_text(dir.path()), "0\n3\n0 0\n2 10\n5 18\n");
        assert_eq!(log.end_offset_for_epoch(0), Some((0, 10)));
        assert_eq!(log.end_offset_for_epoch(1), Some((0, 10)));
        assert_eq!(log.end_offset_for_epoch(2), Some((2, 18)));
        assert_eq!(log.end_offset_for_epoch(5), Some((5, 20)));
        assert_eq!(log.end_offset_for_epoch(9), Some((5, 20)));
        assert_eq!(log.end_offset_for_epoch(-1), None);

        // Older and missing epochs are refused, and nothing is appended.
        assert_eq!(
            log.append(records(1, 10, 9), 4).await,
            Err(AppendError::EpochWentBack { latest: 5, got: 4 })
        );
        assert_eq!(
            log.append(records(1, 10, 9), -1).await,
            Err(AppendError::NoLeaderEpoch { epoch: -1 })
        );
        assert_eq!(log.log_end_offset(), 20);
        assert_eq!(log.leader_epochs(), want);

        log.close().await.unwrap();
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.leader_epochs(), want, "kept across a restart");
        log.close().await.unwrap();
    });
}

#[test]
fn the_epoch_of_a_batch_that_reached_the_disk_survives_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let (p, q) = (dir.path().to_path_buf(), dir.path().to_path_buf());
    run(move || async move {
        let shard = shard(&p, small_storage_config()).await;
        let log = open(&shard, &p, small_log_config()).await;
        log.append(records(3, 100, 1), 1).await.unwrap();
        let info = log.append(records(3, 100, 2), 4).await.unwrap();
        log.wait_written(info.next_offset).await.unwrap();
        // The next epoch's batch is appended but never waited for; then the process dies.
        log.append(records(3, 100, 3), 6).await.unwrap();
    });
    run(move || async move {
        let shard = shard(&q, small_storage_config()).await;
        let log = open(&shard, &q, small_log_config()).await;
        let end = log.log_end_offset();
        assert!(end == 6 || end == 9, "log end {end}");
        let mut want = vec![entry(1, 0), entry(4, 3)];
        if end == 9 {
            want.push(entry(6, 6));
        }
        assert_eq!(log.leader_epochs(), want, "no entry past the recovered end");
        log.close().await.unwrap();
    });
}

#[test]
fn truncation_and_deleted_segments_move_the_epochs() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        // 64 KiB segments; batches of about 2 KiB, 2 records each.
        for i in 0..120 {
            log.append(records(2, 1000, i), 1 + (i / 40) as i32)
                .await
                .unwrap();
        }
        assert_eq!(
            log.leader_epochs(),
            vec![entry(1, 0), entry(2, 80), entry(3, 160)]
        );
        // Inside epoch 3's first batch: that batch goes, and epoch 3 with it.
        log.truncate_to(161).await.unwrap();
        assert_eq!(log.log_end_offset(), 160);
        assert_eq!(log.leader_epochs(), vec![entry(1, 0), entry(2, 80)]);
        assert_eq!(log.end_offset_for_epoch(3), Some((2, 160)));
        log.append(records(2, 1000, 500), 7).await.unwrap();
        assert_eq!(log.leader_epochs().last(), Some(&entry(7, 160)));

        // DeleteRecords inside epoch 1: its start moves up, whole segments below go.
        log.wait_written(log.log_end_offset()).await.unwrap();
        log.delete_records_before(45).await.unwrap();
        assert_eq!(log.log_start_offset(), 45);
        assert_eq!(
            log.leader_epochs(),
            vec![entry(1, 45), entry(2, 80), entry(7, 160)]
        );
        // Past epoch 1's end: it is gone, epoch 2 starts at the log start.
        log.delete_records_before(100).await.unwrap();
        assert_eq!(log.leader_epochs(), vec![entry(2, 100), entry(7, 160)]);
        assert_eq!(log.end_offset_for_epoch(1), None);
        // Retention deletes by whole segments; the first kept epoch starts at the new start.
        log.set_config(LogConfig {
            retention_bytes: Some(20 << 10),
            ..small_log_config()
        });
        log.enforce_retention(0).await.unwrap();
        let start = log.log_start_offset();
        assert!(start > 100, "retention deleted segments: start {start}");
        let epochs = log.leader_epochs();
        assert_eq!(epochs.first().map(|e| e.start_offset), Some(start));
        log.close().await.unwrap();
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.leader_epochs(), epochs);
        // Truncating below the start empties the log and its epochs.
        log.truncate_to(0).await.unwrap();
        assert_eq!(log.leader_epochs(), vec![]);
        assert_eq!(checkpoint_text(dir.path()), "0\n0\n");
        log.close().await.unwrap();
    });
}

#[test]
fn a_log_without_a_usable_checkpoint_rebuilds_it_from_its_batches() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        for i in 0..100 {
            log.append(records(2, 1000, i), [0, 0, 3, 8, 8][(i / 20) as usize])
                .await
                .unwrap();
        }
        let want = vec![entry(0, 0), entry(3, 80), entry(8, 120)];
        assert_eq!(log.leader_epochs(), want);
        assert!(log.segment_count() > 2, "the epochs span segments");
        log.close().await.unwrap();
        let path = dir.path().join(CHECKPOINT);
        // Over the checkpoint's size bound (1 MiB): rebuilt, as one that does not decode.
        let oversized = format!("0\n3\n0 0\n3 80\n8 120\n{}", "\n".repeat(1 << 20));
        for damage in [
            None,
            Some("0\n3\n0 0\n3 80\n"),
            Some("garbage"),
            Some(oversized.as_str()),
        ] {
            match damage {
                None => std::fs::remove_file(&path).unwrap(),
                Some(text) => std::fs::write(&path, text).unwrap(),
            }
            let damage = damage.map(|d| &d[..d.len().min(32)]);
            let log = open(&shard, dir.path(), small_log_config()).await;
            assert_eq!(log.leader_epochs(), want, "rebuilt after {damage:?}");
            assert_eq!(checkpoint_text(dir.path()), "0\n3\n0 0\n3 80\n8 120\n");
            log.close().await.unwrap();
        }
    });
}

#[test]
fn replicated_appends_are_validated_whole() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let info = log
            .append_replicated(&[stamped(3, 50, 1, 0, 2), stamped(2, 50, 2, 3, 2)])
            .await
            .unwrap();
        assert_eq!((info.base_offset, info.next_offset), (0, 5));
        assert_eq!(log.leader_epochs(), vec![entry(2, 0)]);

        let good = stamped(2, 50, 3, 5, 3);
        let mut bad_crc = BytesMut::from(&stamped(2, 50, 4, 7, 3)[..]);
        let last = bad_crc.len() - 1;
        bad_crc[last] ^= 1;
        let mut bad_magic = BytesMut::from(&stamped(2, 50, 4, 7, 3)[..]);
        bad_magic[16] = 1;
        let torn = stamped(2, 50, 4, 7, 3).slice(..70);
        let cases: Vec<(Vec<Bytes>, AppendError)> = vec![
            (vec![], AppendError::Empty),
            (vec![Bytes::new()], AppendError::Empty),
            (
                vec![stamped(1, 50, 5, 6, 3)],
                AppendError::NotAtEnd {
                    expected: 5,
                    got: 6,
                },
            ),
            (
                vec![good.clone(), stamped(1, 50, 5, 8, 3)],
                AppendError::NotAtEnd {
                    expected: 7,
                    got: 8,
                },
            ),
            (
                vec![good.clone(), stamped(1, 50, 5, 7, 1)],
                AppendError::EpochWentBack { latest: 3, got: 1 },
            ),
            (
                vec![stamped(1, 50, 5, 5, 1)],
                AppendError::EpochWentBack { latest: 2, got: 1 },
            ),
            (
                vec![stamped(1, 50, 5, 5, -1)],
                AppendError::NoLeaderEpoch { epoch: -1 },
            ),
        ];
        for (set, want) in cases {
            assert_eq!(log.append_replicated(&set).await, Err(want));
        }
        for (set, source) in [
            (vec![good.clone(), bad_crc.freeze()], "crc"),
            (vec![good.clone(), bad_magic.freeze()], "magic"),
            (vec![good.clone(), torn], "torn"),
        ] {
            let got = log.append_replicated(&set).await;
            let ok = match (&got, source) {
                (
                    Err(AppendError::InvalidBatch {
                        position,
                        source: BatchError::CrcMismatch { .. },
                    }),
                    "crc",
                )
                | (
                    Err(AppendError::InvalidBatch {
                        position,
                        source: BatchError::UnsupportedMagic(1),
                    }),
                    "magic",
                )
                | (
                    Err(AppendError::InvalidBatch {
                        position,
                        source: BatchError::Truncated { .. },
                    }),
                    "torn",
                ) => *position == good.len(),
                _ => false,
            };
            assert!(ok, "{source}: {got:?}");
        }
        assert_eq!(log.log_end_offset(), 5, "nothing of a refused set");
        assert_eq!(log.leader_epochs(), vec![entry(2, 0)]);

        // Several batches in one buffer, across epochs: one append, one checkpoint.
        let mut frame = BytesMut::new();
        frame.extend_from_slice(&good);
        frame.extend_from_slice(&stamped(1, 50, 6, 7, 3));
        frame.extend_from_slice(&stamped(4, 50, 7, 8, 6));
        let info = log.append_replicated(&[frame.freeze()]).await.unwrap();
        assert_eq!((info.base_offset, info.next_offset), (5, 12));
        assert_eq!(
            log.leader_epochs(),
            vec![entry(2, 0), entry(3, 5), entry(6, 8)]
        );
        assert_eq!(checkpoint_text(dir.path()), "0\n3\n2 0\n3 5\n6 8\n");
        let read = read_all(&log, 0).await;
        assert_eq!(read.len(), 5);
        assert_eq!(
            BatchHeader::parse(&read[4]).unwrap().partition_leader_epoch,
            6
        );
        log.close().await.unwrap();
    });
}

/// Every file of a log directory, by name.
fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

#[test]
fn a_replica_built_from_a_leaders_batches_has_identical_files() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        // The leader stamps its own time (LogAppendTime); the replica must keep those bytes.
        let leader_config = LogConfig {
            timestamp_type: TimestampType::LogAppendTime,
            ..small_log_config()
        };
        let leader = open(&shard, &dir.path().join("leader"), leader_config).await;
        let replica = open(&shard, &dir.path().join("replica"), small_log_config()).await;
        let mut copied = 0;
        for i in 0..200i64 {
            let epoch = [1, 1, 2, 4, 4, 4, 9][(i / 30) as usize];
            let count = 1 + (i % 5) as i32;
            leader
                .append(records(count, 300 + (i as usize * 37) % 900, i), epoch)
                .await
                .unwrap();
            // The follower takes what the leader holds, in frames of varying size.
            if i % 7 == 6 || i == 199 {
                let end = leader.log_end_offset();
                let batches = leader
                    .read(copied, 1 + (i as usize % 3) * 20_000, end)
                    .await;
                let batches = batches.unwrap();
                let info = replica.append_replicated(&batches).await.unwrap();
                assert_eq!(info.base_offset, copied);
                copied = info.next_offset;
            }
        }
        while copied < leader.log_end_offset() {
            let batches = leader
                .read(copied, 50_000, leader.log_end_offset())
                .await
                .unwrap();
            copied = replica
                .append_replicated(&batches)
                .await
                .unwrap()
                .next_offset;
        }
        assert_eq!(replica.log_end_offset(), leader.log_end_offset());
        assert_eq!(replica.leader_epochs(), leader.leader_epochs());
        assert_eq!(replica.leader_epochs().len(), 4);
        assert!(leader.segment_count() > 3, "the logs roll");
        leader.close().await.unwrap();
        replica.close().await.unwrap();
        let (ours, theirs) = (
            files(&dir.path().join("leader")),
            files(&dir.path().join("replica")),
        );
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            theirs.keys().collect::<Vec<_>>(),
            "the same segments"
        );
        for (name, bytes) in &ours {
            assert!(bytes == &theirs[name], "{name} differs");
        }
    });
}

/// Appends on the follower's path cost what the leader's do: they take the same write
/// buffers and cache (a follower's batches are readable from the cache at once).
#[test]
fn replicated_batches_are_cached_and_written_like_a_leaders() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log: std::rc::Rc<Log> = open(&shard, dir.path(), small_log_config()).await;
        let b = stamped(4, 500, 1, 0, 1);
        log.append_replicated(std::slice::from_ref(&b))
            .await
            .unwrap();
        assert!(shard.cache_used_bytes() >= b.len(), "in the shard's cache");
        assert!(log.read_is_from_memory(0, 4));
        log.wait_durable(4).await.unwrap();
        assert_eq!(log.read(0, 1 << 20, 4).await.unwrap(), vec![b]);
        log.close().await.unwrap();
    });
}

#[test]
fn a_rebuild_stops_at_damage_and_takes_the_segments_after_it() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        let mut sizes = Vec::new();
        for i in 0..90 {
            let b = records(2, 1000, i);
            sizes.push(b.len());
            log.append(b, 1 + (i / 30) as i32).await.unwrap();
        }
        assert_eq!(
            log.leader_epochs(),
            vec![entry(1, 0), entry(2, 60), entry(3, 120)]
        );
        log.close().await.unwrap();
        std::fs::remove_file(dir.path().join(CHECKPOINT)).unwrap();
        // The length of the first segment's fifth batch becomes garbage.
        let first = dir.path().join(format!("{:020}.log", 0));
        let mut bytes = std::fs::read(&first).unwrap();
        let at: usize = sizes[..4].iter().sum::<usize>() + 8;
        bytes[at..at + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        std::fs::write(&first, &bytes).unwrap();
        // Epoch 2 starts at 60, in the damaged segment, past the damage: the rebuild sees it
        // from the next segment's base on.
        let mut bases: Vec<i64> = std::fs::read_dir(dir.path())
            .unwrap()
            .filter_map(|e| {
                let name = e.unwrap().file_name().into_string().unwrap();
                name.strip_suffix(".log")?.parse().ok()
            })
            .collect();
        bases.sort_unstable();
        assert!(bases[1] > 60 && bases[1] < 120, "segments {bases:?}");
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(
            log.leader_epochs(),
            vec![entry(1, 0), entry(2, bases[1]), entry(3, 120)]
        );
        log.append(records(1, 10, 1), 3).await.unwrap();
        log.close().await.unwrap();
    });
}
