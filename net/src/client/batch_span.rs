//! Where fetched record batches end, control batches included. A consumer fetches next from
//! there: [`super::batch::decode_batches`] drops control batches (transaction markers), so the
//! records alone would leave a consumer fetching the same marker forever.

use super::batch::v2::{LAST_OFFSET_DELTA_AT, MAGIC, MAGIC_AT};
use super::batch::{bad_batch, complete_batch_len};
use super::error::ClientError;

/// The offset after the last complete batch of a fetched partition's records; `None` when no
/// batch is complete (a fetch may end in part of one).
pub fn next_offset_after(records: &[u8]) -> Result<Option<i64>, ClientError> {
    let mut next = None;
    let mut rest = records;
    while let Some(batch_bytes) = complete_batch_len(rest)? {
        if rest[MAGIC_AT] as i8 != MAGIC {
            return Err(bad_batch(format!("magic {}", rest[MAGIC_AT])).into());
        }
        let mut base = [0; 8];
        base.copy_from_slice(&rest[..8]);
        let mut delta = [0; 4];
        delta.copy_from_slice(&rest[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]);
        let end = i64::from_be_bytes(base)
            .checked_add(i64::from(i32::from_be_bytes(delta)))
            .and_then(|last| last.checked_add(1))
            .filter(|end| *end > 0)
            .ok_or_else(|| bad_batch("offsets out of range".to_owned()))?;
        next = Some(end);
        rest = &rest[batch_bytes..];
    }
    Ok(next)
}

#[cfg(test)]
mod tests {
    use bytes::{Bytes, BytesMut};

    use super::*;
    use crate::client::batch::{Compression, NewRecord, RecordBatchBuilder, decode_batches};

    fn batch(base_offset: i64, records: usize) -> Bytes {
        let mut builder = RecordBatchBuilder::new(Compression::None);
        for i in 0..records {
            builder.push(NewRecord {
                value: Some(Bytes::from(vec![b'v'; i + 1])),
                ..NewRecord::default()
            });
        }
        let mut bytes = BytesMut::from(&builder.build().unwrap()[..]);
        bytes[..8].copy_from_slice(&base_offset.to_be_bytes());
        bytes.freeze()
    }

    #[test]
    fn the_next_offset_follows_the_last_complete_batch() {
        let mut records = BytesMut::new();
        records.extend_from_slice(&batch(10, 3));
        records.extend_from_slice(&batch(13, 2));
        assert_eq!(next_offset_after(&records).unwrap(), Some(15));
        let whole = records.len();
        records.extend_from_slice(&batch(15, 4)[..30]);
        assert_eq!(
            next_offset_after(&records).unwrap(),
            Some(15),
            "partial batch"
        );
        assert_eq!(next_offset_after(&records[..whole - 1]).unwrap(), Some(13));
        assert_eq!(next_offset_after(&[]).unwrap(), None);
    }

    #[test]
    fn control_batches_count_though_their_records_are_dropped() {
        let mut marker = BytesMut::from(&batch(7, 1)[..]);
        marker[22] |= 1 << 5; // the control bit, in the low byte of the attributes
        let marker = marker.freeze();
        assert!(decode_batches(&marker, 0).unwrap().is_empty());
        assert_eq!(next_offset_after(&marker).unwrap(), Some(8));
    }

    #[test]
    fn nonsense_headers_are_errors() {
        let mut short = BytesMut::from(&batch(0, 1)[..]);
        short[8..12].copy_from_slice(&1i32.to_be_bytes());
        assert!(next_offset_after(&short).is_err());
        let mut old = BytesMut::from(&batch(0, 1)[..]);
        old[MAGIC_AT] = 1;
        assert!(next_offset_after(&old).is_err());
        let mut overflow = BytesMut::from(&batch(0, 1)[..]);
        overflow[..8].copy_from_slice(&i64::MAX.to_be_bytes());
        assert!(next_offset_after(&overflow).is_err());
    }
}
