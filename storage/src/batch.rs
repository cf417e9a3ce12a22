//! Kafka record batches, format v2 (magic 2): the unit the log stores, reads and replicates.
//!
//! The log never decodes records or re-encodes a batch. It reads the 61-byte header, checks the
//! CRC-32C over everything from `attributes` to the end, and patches the two fields that sit
//! outside the CRC (`baseOffset`, `partitionLeaderEpoch`) when it assigns offsets.

use thiserror::Error;

/// `baseOffset` (i64) plus `batchLength` (i32): the bytes before the length-counted part.
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// The fixed header of a v2 batch, up to and including `recordCount`.
pub const HEADER_BYTES: usize = 61;
/// The only batch format the log accepts.
pub const MAGIC_V2: i8 = 2;

const BASE_OFFSET_AT: usize = 0;
const LENGTH_AT: usize = 8;
const LEADER_EPOCH_AT: usize = 12;
const MAGIC_AT: usize = 16;
const CRC_AT: usize = 17;
const ATTRIBUTES_AT: usize = 21;
const LAST_OFFSET_DELTA_AT: usize = 23;
const BASE_TIMESTAMP_AT: usize = 27;
const MAX_TIMESTAMP_AT: usize = 35;
const PRODUCER_ID_AT: usize = 43;
const PRODUCER_EPOCH_AT: usize = 51;
const BASE_SEQUENCE_AT: usize = 53;
const RECORD_COUNT_AT: usize = 57;

const COMPRESSION_MASK: i16 = 0x07;
const TIMESTAMP_TYPE_BIT: i16 = 0x08;
const TRANSACTIONAL_BIT: i16 = 0x10;
const CONTROL_BIT: i16 = 0x20;

/// Why bytes are not an acceptable v2 record batch. Each variant maps to one Kafka error code
/// in the broker (`UnsupportedMagic` to UNSUPPORTED_FOR_MESSAGE_FORMAT, `TooLarge` to
/// MESSAGE_TOO_LARGE, the rest to CORRUPT_MESSAGE).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    #[error("batch truncated: {needed} bytes needed, {available} available")]
    Truncated { needed: usize, available: usize },
    #[error("invalid batch length {0}")]
    InvalidLength(i32),
    #[error("unsupported record batch magic {0} (only v2 is accepted)")]
    UnsupportedMagic(i8),
    #[error("batch CRC mismatch: header says {expected:#010x}, content has {actual:#010x}")]
    CrcMismatch { expected: u32, actual: u32 },
    #[error("lastOffsetDelta {last_offset_delta} does not match recordCount {record_count}")]
    CountMismatch {
        last_offset_delta: i32,
        record_count: i32,
    },
    #[error("batch of {size_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    TooLarge { size_bytes: usize, max_bytes: usize },
}

/// Compression codec named by the low three attribute bits. The log stores compressed batches as
/// they are; the codec matters only for reporting and for timestamp look-ups.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
    Unknown(u8),
}

/// The parsed fixed header of a v2 record batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    pub base_offset: i64,
    /// `batchLength`: bytes after the length field itself.
    pub batch_length: i32,
    pub partition_leader_epoch: i32,
    pub magic: i8,
    pub crc: u32,
    pub attributes: i16,
    pub last_offset_delta: i32,
    pub base_timestamp: i64,
    pub max_timestamp: i64,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub record_count: i32,
}

impl BatchHeader {
    /// Reads the header without checking anything but that the bytes are there and the length
    /// field is large enough to hold the header. Use [`validate`] for bytes from outside.
    pub fn parse(buf: &[u8]) -> Result<BatchHeader, BatchError> {
        if buf.len() < HEADER_BYTES {
            return Err(BatchError::Truncated {
                needed: HEADER_BYTES,
                available: buf.len(),
            });
        }
        let batch_length = be_i32(buf, LENGTH_AT);
        if batch_length < (HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32 {
            return Err(BatchError::InvalidLength(batch_length));
        }
        Ok(BatchHeader {
            base_offset: be_i64(buf, BASE_OFFSET_AT),
            batch_length,
            partition_leader_epoch: be_i32(buf, LEADER_EPOCH_AT),
            magic: buf[MAGIC_AT] as i8,
            crc: u32::from_be_bytes(array(buf, CRC_AT)),
            attributes: i16::from_be_bytes(array(buf, ATTRIBUTES_AT)),
            last_offset_delta: be_i32(buf, LAST_OFFSET_DELTA_AT),
            base_timestamp: be_i64(buf, BASE_TIMESTAMP_AT),
            max_timestamp: be_i64(buf, MAX_TIMESTAMP_AT),
            producer_id: be_i64(buf, PRODUCER_ID_AT),
            producer_epoch: i16::from_be_bytes(array(buf, PRODUCER_EPOCH_AT)),
            base_sequence: be_i32(buf, BASE_SEQUENCE_AT),
            record_count: be_i32(buf, RECORD_COUNT_AT),
        })
    }

    /// The whole batch in bytes, including the 12 bytes of offset and length.
    pub fn size_bytes(&self) -> usize {
        // parse() guarantees batch_length is positive.
        LOG_OVERHEAD_BYTES + self.batch_length as usize
    }

    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// The offset after this batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    pub fn compression(&self) -> Compression {
        match (self.attributes & COMPRESSION_MASK) as u8 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => Compression::Unknown(other),
        }
    }

    pub fn is_log_append_time(&self) -> bool {
        self.attributes & TIMESTAMP_TYPE_BIT != 0
    }

    pub fn is_transactional(&self) -> bool {
        self.attributes & TRANSACTIONAL_BIT != 0
    }

    pub fn is_control(&self) -> bool {
        self.attributes & CONTROL_BIT != 0
    }

    /// Whether the producer asked for idempotence (a producer id and a sequence).
    pub fn has_producer_id(&self) -> bool {
        self.producer_id >= 0
    }
}

/// Checks that `buf` starts with one whole, CRC-valid v2 batch of at most `max_bytes` and
/// returns its header. Bytes after the batch are not looked at.
pub fn validate(buf: &[u8], max_bytes: usize) -> Result<BatchHeader, BatchError> {
    let header = BatchHeader::parse(buf)?;
    if header.magic != MAGIC_V2 {
        return Err(BatchError::UnsupportedMagic(header.magic));
    }
    let size_bytes = header.size_bytes();
    if size_bytes > max_bytes {
        return Err(BatchError::TooLarge {
            size_bytes,
            max_bytes,
        });
    }
    if buf.len() < size_bytes {
        return Err(BatchError::Truncated {
            needed: size_bytes,
            available: buf.len(),
        });
    }
    let actual = crc32c::crc32c(&buf[ATTRIBUTES_AT..size_bytes]);
    if actual != header.crc {
        return Err(BatchError::CrcMismatch {
            expected: header.crc,
            actual,
        });
    }
    if header.last_offset_delta < 0 {
        return Err(BatchError::CountMismatch {
            last_offset_delta: header.last_offset_delta,
            record_count: header.record_count,
        });
    }
    Ok(header)
}

/// Like [`validate`], and also requires what a producer's batch must satisfy: offsets inside the
/// batch are dense (`lastOffsetDelta == recordCount - 1`), so the log can assign
/// `recordCount` offsets to it.
pub fn validate_produced(buf: &[u8], max_bytes: usize) -> Result<BatchHeader, BatchError> {
    let header = validate(buf, max_bytes)?;
    if header.record_count < 1 || header.last_offset_delta != header.record_count - 1 {
        return Err(BatchError::CountMismatch {
            last_offset_delta: header.last_offset_delta,
            record_count: header.record_count,
        });
    }
    Ok(header)
}

/// Writes the two fields outside the CRC that the log owns: the first offset and the epoch of
/// the leader that assigned it. The CRC stays valid.
pub fn assign_offsets(batch: &mut [u8], base_offset: i64, partition_leader_epoch: i32) {
    batch[BASE_OFFSET_AT..BASE_OFFSET_AT + 8].copy_from_slice(&base_offset.to_be_bytes());
    batch[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4]
        .copy_from_slice(&partition_leader_epoch.to_be_bytes());
}

/// Whose clock a topic's timestamps are (`message.timestamp.type`): the producer's, or the
/// broker's when it appends the batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TimestampType {
    #[default]
    CreateTime,
    LogAppendTime,
}

/// Marks a batch as timed by the broker at `now_ms`, as Kafka does for LogAppendTime topics:
/// the timestamp-type attribute is set and `maxTimestamp` becomes `now_ms`, which consumers then
/// take as every record's time. Only these two header fields change, and since both are under
/// the CRC, it is recomputed; the records are untouched. `batch` is exactly the batch `header`
/// was read from; the result is its new header.
pub fn stamp_log_append_time(batch: &mut [u8], header: &BatchHeader, now_ms: i64) -> BatchHeader {
    let attributes = header.attributes | TIMESTAMP_TYPE_BIT;
    batch[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&now_ms.to_be_bytes());
    let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
    batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    BatchHeader {
        crc,
        attributes,
        max_timestamp: now_ms,
        ..*header
    }
}

impl Compression {
    /// The attribute bits that name this codec.
    pub fn bits(self) -> i16 {
        match self {
            Compression::None => 0,
            Compression::Gzip => 1,
            Compression::Snappy => 2,
            Compression::Lz4 => 3,
            Compression::Zstd => 4,
            Compression::Unknown(bits) => i16::from(bits) & COMPRESSION_MASK,
        }
    }
}

/// A batch with the header of `batch` (offsets, timestamps, producer, count, the other attribute
/// bits) around a new records section in `compression`, with its length and CRC: what a
/// broker that recompresses a batch to its topic's codec stores.
pub fn with_records(batch: &[u8], compression: Compression, records: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_BYTES + records.len());
    out.extend_from_slice(&batch[..HEADER_BYTES]);
    out.extend_from_slice(records);
    let batch_length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
    out[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&batch_length.to_be_bytes());
    let attributes = i16::from_be_bytes(array(&out, ATTRIBUTES_AT));
    let attributes = (attributes & !COMPRESSION_MASK) | compression.bits();
    out[ATTRIBUTES_AT..ATTRIBUTES_AT + 2].copy_from_slice(&attributes.to_be_bytes());
    let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
    out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
    out
}

/// The offset and timestamp of the first record whose timestamp is at least `target_ms`, for a
/// batch whose `max_timestamp` is known to be at least `target_ms` (what ListOffsets answers:
/// Kafka gives the record's own timestamp). Every record of a LogAppendTime batch has the batch's
/// time. Compressed batches answer their base offset and newest timestamp: finding the record
/// would mean decompressing, which the broker never does.
pub fn first_record_at_or_after(batch: &[u8], target_ms: i64) -> Result<(i64, i64), BatchError> {
    let header = BatchHeader::parse(batch)?;
    if header.compression() != Compression::None || header.is_log_append_time() {
        return Ok((header.base_offset, header.max_timestamp));
    }
    let end = header.size_bytes().min(batch.len());
    let mut at = HEADER_BYTES;
    for _ in 0..header.record_count {
        let corrupt = BatchError::InvalidLength(header.batch_length);
        let (length, used) = read_varint(batch, at, end).ok_or(corrupt.clone())?;
        let record_start = at + used;
        let record_end = usize::try_from(length)
            .ok()
            .and_then(|len| record_start.checked_add(len))
            .filter(|&e| e <= end)
            .ok_or(corrupt.clone())?;
        // attributes (1 byte), then timestampDelta and offsetDelta as zig-zag varints.
        let (timestamp_delta, used) =
            read_varint(batch, record_start + 1, record_end).ok_or(corrupt.clone())?;
        let (offset_delta, _) =
            read_varint(batch, record_start + 1 + used, record_end).ok_or(corrupt.clone())?;
        // The delta is the producer's, never checked on append: one that points outside the
        // batch would be answered as another batch's offset.
        if !(0..=i64::from(header.last_offset_delta)).contains(&offset_delta) {
            return Err(corrupt);
        }
        let timestamp = header.base_timestamp.saturating_add(timestamp_delta);
        if timestamp >= target_ms {
            return Ok((header.base_offset + offset_delta, timestamp));
        }
        at = record_end;
    }
    Ok((header.base_offset, header.max_timestamp))
}

/// A zig-zag varint (as Kafka records use) at `at`, not reading at or past `end`.
fn read_varint(buf: &[u8], at: usize, end: usize) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let byte = *buf.get(at + i).filter(|_| at + i < end)?;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            let value = (raw >> 1) as i64 ^ -((raw & 1) as i64);
            return Some((value, i + 1));
        }
    }
    None
}

fn array<const N: usize>(buf: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&buf[at..at + N]);
    out
}

fn be_i32(buf: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(array(buf, at))
}

fn be_i64(buf: &[u8], at: usize) -> i64 {
    i64::from_be_bytes(array(buf, at))
}

/// Test support: builds valid v2 batches without a Kafka client. Public so that the broker's and
/// other crates' tests can make batches too.
pub mod testing {
    use super::*;

    /// An uncompressed v2 batch of `count` records with the given value size; record `i` has
    /// timestamp `base_timestamp + i`. Offsets start at 0 (the log assigns real ones).
    pub fn batch(count: i32, value_bytes: usize, base_timestamp: i64) -> Vec<u8> {
        assert!(count >= 1);
        let mut records = Vec::new();
        for i in 0..count {
            let mut body = Vec::new();
            body.push(0u8); // attributes
            write_varint(&mut body, i64::from(i)); // timestampDelta
            write_varint(&mut body, i64::from(i)); // offsetDelta
            write_varint(&mut body, -1); // key: null
            write_varint(&mut body, value_bytes as i64);
            body.extend((0..value_bytes).map(|b| (b as u8).wrapping_add(i as u8)));
            write_varint(&mut body, 0); // no headers
            write_varint(&mut records, body.len() as i64);
            records.extend_from_slice(&body);
        }
        let mut out = vec![0u8; HEADER_BYTES];
        out.extend_from_slice(&records);
        let batch_length = (out.len() - LOG_OVERHEAD_BYTES) as i32;
        out[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&batch_length.to_be_bytes());
        out[LEADER_EPOCH_AT..LEADER_EPOCH_AT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        out[MAGIC_AT] = MAGIC_V2 as u8;
        out[LAST_OFFSET_DELTA_AT..LAST_OFFSET_DELTA_AT + 4]
            .copy_from_slice(&(count - 1).to_be_bytes());
        out[BASE_TIMESTAMP_AT..BASE_TIMESTAMP_AT + 8]
            .copy_from_slice(&base_timestamp.to_be_bytes());
        let max_timestamp = base_timestamp + i64::from(count - 1);
        out[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8].copy_from_slice(&max_timestamp.to_be_bytes());
        out[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&(-1i64).to_be_bytes());
        out[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2].copy_from_slice(&(-1i16).to_be_bytes());
        out[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4].copy_from_slice(&(-1i32).to_be_bytes());
        out[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&count.to_be_bytes());
        let crc = crc32c::crc32c(&out[ATTRIBUTES_AT..]);
        out[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        out
    }

    /// `batch` made an idempotent producer's: producer id, epoch and first sequence set, CRC
    /// recomputed.
    pub fn with_producer(
        mut batch: Vec<u8>,
        producer_id: i64,
        epoch: i16,
        sequence: i32,
    ) -> Vec<u8> {
        batch[PRODUCER_ID_AT..PRODUCER_ID_AT + 8].copy_from_slice(&producer_id.to_be_bytes());
        batch[PRODUCER_EPOCH_AT..PRODUCER_EPOCH_AT + 2].copy_from_slice(&epoch.to_be_bytes());
        batch[BASE_SEQUENCE_AT..BASE_SEQUENCE_AT + 4].copy_from_slice(&sequence.to_be_bytes());
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
        batch[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        batch
    }

    fn write_varint(out: &mut Vec<u8>, value: i64) {
        let mut raw = ((value << 1) ^ (value >> 63)) as u64;
        loop {
            let byte = (raw & 0x7f) as u8;
            raw >>= 7;
            if raw == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::testing::batch;
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn valid_batch_round_trips_its_header() {
        let b = batch(5, 100, 1_000);
        let h = validate_produced(&b, usize::MAX).unwrap();
        assert_eq!(h.record_count, 5);
        assert_eq!(h.last_offset_delta, 4);
        assert_eq!(h.size_bytes(), b.len());
        assert_eq!(h.base_timestamp, 1_000);
        assert_eq!(h.max_timestamp, 1_004);
        assert_eq!(h.compression(), Compression::None);
    }

    #[test]
    fn assigning_offsets_keeps_the_crc_valid() {
        let mut b = batch(3, 10, 0);
        assign_offsets(&mut b, 42, 7);
        let h = validate(&b, usize::MAX).unwrap();
        assert_eq!(h.base_offset, 42);
        assert_eq!(h.last_offset(), 44);
        assert_eq!(h.partition_leader_epoch, 7);
    }

    #[test]
    fn stamping_log_append_time_changes_only_the_type_and_max_timestamp() {
        let original = batch(3, 10, 1_000);
        let mut b = original.clone();
        let before = validate(&original, usize::MAX).unwrap();
        let stamped = stamp_log_append_time(&mut b, &before, 9_999);
        let after = validate(&b, usize::MAX).unwrap();
        assert_eq!(
            stamped, after,
            "the header returned is the header of the bytes"
        );
        assert!(after.is_log_append_time());
        assert!(!before.is_log_append_time());
        assert_eq!(after.max_timestamp, 9_999);
        assert_eq!(
            after,
            BatchHeader {
                crc: after.crc,
                attributes: before.attributes | TIMESTAMP_TYPE_BIT,
                max_timestamp: 9_999,
                ..before
            }
        );
        assert_eq!(
            b[HEADER_BYTES..],
            original[HEADER_BYTES..],
            "records untouched"
        );
    }

    #[test]
    fn refuses_wrong_magic_crc_size_and_counts() {
        let good = batch(2, 10, 0);
        let mut b = good.clone();
        b[MAGIC_AT] = 1;
        assert_eq!(
            validate(&b, usize::MAX),
            Err(BatchError::UnsupportedMagic(1))
        );

        let mut b = good.clone();
        *b.last_mut().unwrap() ^= 1;
        assert!(matches!(
            validate(&b, usize::MAX),
            Err(BatchError::CrcMismatch { .. })
        ));

        assert!(matches!(
            validate(&good, 10),
            Err(BatchError::TooLarge { .. })
        ));
        assert!(matches!(
            validate(&good[..good.len() - 1], usize::MAX),
            Err(BatchError::Truncated { .. })
        ));

        let mut b = good.clone();
        b[LENGTH_AT..LENGTH_AT + 4].copy_from_slice(&3i32.to_be_bytes());
        assert_eq!(validate(&b, usize::MAX), Err(BatchError::InvalidLength(3)));

        let mut b = good;
        b[RECORD_COUNT_AT..RECORD_COUNT_AT + 4].copy_from_slice(&5i32.to_be_bytes());
        let crc = crc32c::crc32c(&b[ATTRIBUTES_AT..]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        assert!(validate(&b, usize::MAX).is_ok());
        assert!(matches!(
            validate_produced(&b, usize::MAX),
            Err(BatchError::CountMismatch { .. })
        ));
    }

    #[test]
    fn finds_the_first_record_at_a_timestamp() {
        let mut b = batch(10, 8, 1_000);
        assign_offsets(&mut b, 100, 0);
        assert_eq!(first_record_at_or_after(&b, 0).unwrap(), (100, 1_000));
        assert_eq!(first_record_at_or_after(&b, 1_003).unwrap(), (103, 1_003));
        assert_eq!(first_record_at_or_after(&b, 1_009).unwrap(), (109, 1_009));
    }

    /// Found by `fuzz/fuzz_targets/batch.rs` (minimised): a one-record batch whose record says
    /// offset delta -24320 (the varint `ff fb 02`). Nothing checks record fields on append, and
    /// the timestamp search answered `baseOffset - 24320`, an offset of some other batch (and
    /// overflowed for deltas near i64::MAX).
    #[test]
    fn a_record_offset_delta_outside_its_batch_is_corrupt_not_an_answer() {
        let mut b = vec![
            0x01, 0x00, 0x00, 0xfc, 0xff, 0xff, 0xff, 0x19, 0x00, 0x00, 0x00, 0x3d, 0x62, 0xfc,
            0xfc, 0xfc, 0x02, 0x2f, 0x09, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff,
            0x29, 0x02, 0x73, 0x38, 0x44, 0xa8, 0xd5, 0x00, 0x00, 0xfc, 0xfc, 0xfc, 0xfc, 0xfc,
            0x01, 0x00, 0x00, 0xfc, 0x00, 0x07, 0xfc, 0xfc, 0xfc, 0xfc, 0x00, 0xfc, 0xfc, 0xfc,
            0x00, 0x00, 0x00, 0x01, 0x00, 0x0a, 0xfc, 0x00, 0xff, 0xfb, 0x02, 0x3d, 0xfc, 0x57,
            0xfc, 0xfc, 0xff,
        ];
        let crc = crc32c::crc32c(&b[ATTRIBUTES_AT..]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        assign_offsets(&mut b, 4_244_438_268, 0);
        let header = validate_produced(&b, usize::MAX).unwrap();
        assert_eq!(header.compression(), Compression::None);
        assert_eq!(
            first_record_at_or_after(&b, i64::MIN),
            Err(BatchError::InvalidLength(header.batch_length))
        );
        // The same record with offset delta 0 is found where it is.
        b[HEADER_BYTES + 3..HEADER_BYTES + 6].copy_from_slice(&[0x00, 0x3d, 0xfc]);
        let crc = crc32c::crc32c(&b[ATTRIBUTES_AT..]);
        b[CRC_AT..CRC_AT + 4].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(
            first_record_at_or_after(&b, i64::MIN).map(|(offset, _)| offset),
            Ok(4_244_438_268)
        );
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = validate(&bytes, 1 << 20);
            let _ = first_record_at_or_after(&bytes, 0);
        }

        #[test]
        fn any_single_bit_flip_after_the_epoch_is_caught(
            count in 1i32..20, value_bytes in 0usize..64, bit in any::<prop::sample::Index>()
        ) {
            let mut b = batch(count, value_bytes, 0);
            // Flip a bit in the CRC-covered region or in the length/magic/crc fields.
            let covered: Vec<usize> = (LENGTH_AT..LEADER_EPOCH_AT).chain(MAGIC_AT..b.len()).collect();
            let at = covered[bit.index(covered.len() * 8) / 8];
            b[at] ^= 1 << (bit.index(8));
            prop_assert!(validate_produced(&b, usize::MAX).is_err());
        }
    }
}
