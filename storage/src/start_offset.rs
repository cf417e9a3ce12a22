//! The log start offset a user moved up (Kafka's DeleteRecords): the first offset still
//! readable, which may lie inside a segment. Kept in `log-start-offset` in the log's directory
//! (Kafka keeps a log-start-offset-checkpoint), written atomically before a move is answered, so
//! records deleted stay deleted across a restart. Whole segments below it are deleted with it,
//! and by retention if a crash came between the two.

use std::cell::Cell;
use std::path::Path;

use crate::error::{IoFailure, LogError};
use crate::file;
use crate::log::Log;

const FILE: &str = "log-start-offset";
/// The file holds one offset in decimal: never more than this.
const FILE_BYTES_MAX: u64 = 64;

/// The start offset set by DeleteRecords (0 when never set); the log's start is the larger of
/// this and its first segment's base.
#[derive(Debug, Default)]
pub(crate) struct StartOffset(Cell<i64>);

impl StartOffset {
    pub(crate) async fn load(dir: &Path) -> Result<StartOffset, LogError> {
        let path = dir.join(FILE);
        let Some(bytes) = file::read_file(&path, FILE_BYTES_MAX).await? else {
            return Ok(StartOffset::default());
        };
        let offset = std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| text.trim().parse::<i64>().ok())
            .filter(|&o| o >= 0)
            .ok_or_else(|| {
                IoFailure::new(
                    "reading",
                    &path,
                    &std::io::Error::other("not a log start offset"),
                )
            })?;
        Ok(StartOffset(Cell::new(offset)))
    }

    pub(crate) fn get(&self) -> i64 {
        self.0.get()
    }
}

/// Why DeleteRecords could not move a log's start.
#[derive(Debug, thiserror::Error)]
pub enum DeleteRecordsError {
    #[error("offset {offset} is past the high watermark {high_watermark}")]
    OffsetOutOfRange { offset: i64, high_watermark: i64 },
    #[error(transparent)]
    Log(#[from] LogError),
}

impl Log {
    /// Makes every record below `offset` unreadable (DeleteRecords), `offset` at most the high
    /// watermark; the new start is durable when this returns. Returns the log start offset.
    /// Moving the start down does nothing.
    pub async fn delete_records_before(&self, offset: i64) -> Result<i64, DeleteRecordsError> {
        let high_watermark = self.high_watermark();
        if offset < 0 || offset > high_watermark {
            return Err(DeleteRecordsError::OffsetOutOfRange {
                offset,
                high_watermark,
            });
        }
        if offset > self.log_start_offset() {
            self.leave_clean().await.map_err(LogError::from)?;
            let path = self.dir.join(FILE);
            file::write_file_atomic(&path, offset.to_string().as_bytes())
                .await
                .map_err(LogError::from)?;
            self.start.0.set(offset);
            self.delete_before(offset).await?;
        }
        Ok(self.log_start_offset())
    }
}
