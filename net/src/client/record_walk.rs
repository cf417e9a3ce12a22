//! A walk over a batch's (decompressed) records that checks their counts against the bytes
//! before `kafka-protocol` decodes them.
//!
//! Why: `kafka-protocol` 0.18 reserves room for the batch's record count and a map of each
//! record's header count straight from the bytes (`reserve(count)`, `with_capacity(count)`), as
//! it does for request arrays (see `net/src/shape.rs`): a record claiming two billion headers
//! asks the allocator for a hundred gigabytes, and a failed allocation aborts the process. The
//! walk follows the record format far enough to check every count that is allocated by: the
//! record count against the records' bytes, each record's length against what is left, and
//! its header count against the record's bytes. It also checks the sums `kafka-protocol`
//! computes unchecked (base offset and timestamp plus a record's deltas). It reads varints as `kafka-protocol` does, but
//! refuses the overlong ones it would accept, so both see the same fields.

use crate::wire::{self, WireError};

use super::batch::BatchError;

/// The fewest bytes a record takes: its length, attributes, timestamp delta, offset delta, key
/// length, value length and header count, one byte each.
const RECORD_BYTES_MIN: usize = 7;

/// The fewest bytes a header takes: its key length and value length.
const HEADER_BYTES_MIN: usize = 2;

/// What a batch's header says that its records build on.
#[derive(Debug, Clone, Copy)]
pub(super) struct RecordBase {
    pub(super) record_count: i32,
    pub(super) base_offset: i64,
    pub(super) base_timestamp_ms: i64,
}

/// Checks that `records` (a batch's records, decompressed) can hold `base.record_count`
/// records, that each record's length and header count fit in its bytes, and that its offset
/// and timestamp (the base plus the record's delta) are numbers: `kafka-protocol` adds them
/// unchecked, which panics under overflow checks.
pub(super) fn check_records(mut records: &[u8], base: RecordBase) -> Result<(), BatchError> {
    let record_count = base.record_count;
    let records_bytes = records.len();
    if !usize::try_from(record_count).is_ok_and(|n| n <= records_bytes / RECORD_BYTES_MIN) {
        return Err(BatchError::RecordCount {
            record_count,
            records_bytes,
        });
    }
    for index in 0..record_count {
        let malformed = |reason: WireError| BatchError::Record { index, reason };
        let length = wire::read_varint(&mut records).map_err(malformed)?;
        let mut record = usize::try_from(length)
            .ok()
            .and_then(|length| records.get(..length))
            .ok_or(malformed(WireError::InvalidLength {
                length: length.into(),
            }))?;
        records = &records[record.len()..];
        wire::skip(&mut record, 1).map_err(malformed)?; // attributes
        let timestamp_delta = wire::read_varlong(&mut record).map_err(malformed)?;
        let offset_delta = wire::read_varint(&mut record).map_err(malformed)?;
        let overflow = |field, base, delta| BatchError::Overflow {
            index,
            field,
            base,
            delta,
        };
        base.base_timestamp_ms
            .checked_add(timestamp_delta)
            .ok_or_else(|| overflow("timestamp", base.base_timestamp_ms, timestamp_delta))?;
        base.base_offset
            .checked_add(offset_delta.into())
            .ok_or_else(|| overflow("offset", base.base_offset, offset_delta.into()))?;
        for _key_then_value in 0..2 {
            match wire::read_varint(&mut record).map_err(malformed)? {
                -1 => {}
                length => {
                    let length = usize::try_from(length).map_err(|_| {
                        malformed(WireError::InvalidLength {
                            length: length.into(),
                        })
                    })?;
                    wire::skip(&mut record, length).map_err(malformed)?;
                }
            }
        }
        let header_count = wire::read_varint(&mut record).map_err(malformed)?;
        let bytes_left = record.len();
        if !usize::try_from(header_count).is_ok_and(|n| n <= bytes_left / HEADER_BYTES_MIN) {
            return Err(BatchError::HeaderCount {
                index,
                header_count,
                bytes_left,
            });
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counted(record_count: i32) -> RecordBase {
        RecordBase {
            record_count,
            base_offset: 0,
            base_timestamp_ms: 0,
        }
    }

    /// One record: length, attributes, deltas, key "k", no value, then `headers` as given.
    fn record(header_count_varint: &[u8], headers: &[u8]) -> Vec<u8> {
        let mut body = vec![0, 0, 0, 2, b'k', 1];
        body.extend_from_slice(header_count_varint);
        body.extend_from_slice(headers);
        let mut out = vec![u8::try_from(body.len() * 2).unwrap()];
        out.extend(body);
        out
    }

    #[test]
    fn records_that_fit_their_counts_pass() {
        // One header: key "h" (length 1, zigzag 2), value null (-1, zigzag 1).
        let mut two = record(&[2], &[2, b'h', 1]);
        two.extend(record(&[0], &[]));
        check_records(&two, counted(2)).unwrap();
    }

    #[test]
    fn a_record_count_past_the_bytes_is_refused() {
        let one = record(&[0], &[]);
        assert!(matches!(
            check_records(&one, counted(2)),
            Err(BatchError::RecordCount {
                record_count: 2,
                ..
            })
        ));
        assert!(matches!(
            check_records(&one, counted(-1)),
            Err(BatchError::RecordCount { .. })
        ));
        assert!(matches!(
            check_records(&one, counted(i32::MAX)),
            Err(BatchError::RecordCount { .. })
        ));
    }

    #[test]
    fn a_header_count_past_the_record_is_refused() {
        // 2^30 headers (zigzag varint of 2^30) in a record with four bytes after the count.
        let huge = record(&[0x80, 0x80, 0x80, 0x80, 0x08], &[2, b'h', 1, 0]);
        assert!(matches!(
            check_records(&huge, counted(1)),
            Err(BatchError::HeaderCount {
                index: 0,
                header_count: 1_073_741_824,
                bytes_left: 4
            })
        ));
        let negative = record(&[1], &[]);
        assert!(matches!(
            check_records(&negative, counted(1)),
            Err(BatchError::HeaderCount {
                header_count: -1,
                ..
            })
        ));
    }

    /// Found by the `group_records` fuzz target: a timestamp delta that overflows the batch's
    /// base timestamp, which `kafka-protocol` adds unchecked (a panic under overflow checks).
    #[test]
    fn an_offset_or_timestamp_past_i64_is_refused() {
        let one = record(&[0], &[]);
        let near_max = |base_offset, base_timestamp_ms| RecordBase {
            record_count: 1,
            base_offset,
            base_timestamp_ms,
        };
        // Deltas of 0 fit at the very top.
        check_records(&one, near_max(i64::MAX, i64::MAX)).unwrap();
        let mut next = one.clone();
        next[3] = 2; // offset delta 1
        check_records(&next, near_max(i64::MAX - 1, 0)).unwrap();
        assert!(matches!(
            check_records(&next, near_max(i64::MAX, 0)),
            Err(BatchError::Overflow {
                field: "offset",
                ..
            })
        ));
        let mut late = one.clone();
        late[2] = 2; // timestamp delta 1
        assert!(matches!(
            check_records(&late, near_max(0, i64::MAX)),
            Err(BatchError::Overflow {
                field: "timestamp",
                ..
            })
        ));
    }

    #[test]
    fn a_record_longer_than_the_bytes_left_is_refused() {
        let mut one = record(&[0], &[]);
        one[0] += 2; // one byte longer than it is
        assert!(matches!(
            check_records(&one, counted(1)),
            Err(BatchError::Record {
                index: 0,
                reason: WireError::InvalidLength { length: 8 }
            })
        ));
        let mut overlong = vec![0xff; 5];
        overlong.extend([0; 7]);
        assert!(matches!(
            check_records(&overlong, counted(1)),
            Err(BatchError::Record {
                reason: WireError::VarintTooLong,
                ..
            })
        ));
    }
}
