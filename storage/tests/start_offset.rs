//! DeleteRecords' log start offset: inside a segment, refused past the high watermark, kept
//! across clean and unclean reopens, and the segments wholly below it deleted.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

mod common;

use common::*;
use storage::{DeleteRecordsError, ReadError};

#[test]
fn delete_records_moves_the_start_inside_a_segment_and_keeps_it_across_reopens() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let shard = shard(dir.path(), small_storage_config()).await;
        let log = open(&shard, dir.path(), small_log_config()).await;
        for i in 0..200 {
            let batch = records(2, 1000, 1_000 + i);
            log.append(batch, 0).await.unwrap();
        }
        log.wait_written(400).await.unwrap();
        let segments = log.segment_count();
        assert!(segments > 3);

        assert!(matches!(
            log.delete_records_before(401).await,
            Err(DeleteRecordsError::OffsetOutOfRange { .. })
        ));
        // 201 is inside a batch (offsets 200 and 201).
        assert_eq!(log.delete_records_before(201).await.unwrap(), 201);
        assert_eq!(log.log_start_offset(), 201);
        assert!(
            log.segment_count() < segments,
            "whole segments below were deleted"
        );
        assert!(matches!(
            log.read(200, 100_000, 400).await,
            Err(ReadError::OffsetOutOfRange {
                log_start_offset: 201,
                ..
            })
        ));
        // The batch holding 201 is served whole (clients skip what is below their offset).
        let first = log.read(201, 1, 400).await.unwrap();
        assert_eq!(
            storage::BatchHeader::parse(&first[0]).unwrap().base_offset,
            200
        );
        // Moving it down is a no-op.
        assert_eq!(log.delete_records_before(10).await.unwrap(), 201);
        log.close().await.unwrap();

        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_start_offset(), 201, "after a clean close");
        assert_eq!(log.delete_records_before(300).await.unwrap(), 300);
        drop(log); // an unclean stop: never closed
        let log = open(&shard, dir.path(), small_log_config()).await;
        assert_eq!(log.log_start_offset(), 300, "after an unclean stop");
        assert_eq!(log.log_end_offset(), 400);
        log.close().await.unwrap();
    });
}
