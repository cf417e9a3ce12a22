//! Record batches (format v2) for the client: a builder for what it produces and a decoder for
//! what it fetches. Both use `kafka-protocol`'s record codec; the decoder decompresses with its
//! own bounded codecs (`decompress`) and checks the records' counts (`record_walk`) first.
//!
//! Client side only: the broker keeps batches as opaque bytes. Note that `kafka-protocol` keeps a
//! record's headers in a map, so headers repeating a key keep only the last value.

use std::cell::Cell;

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, Record,
    RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

pub use kafka_protocol::records::Compression;

use super::decompress::decompress;
use super::error::ClientError;
use super::record_walk::{RecordBase, check_records};
use crate::wire::WireError;

/// One record to produce.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Creation time, milliseconds since the epoch.
    pub timestamp_ms: i64,
}

/// Collects records into one v2 record batch.
#[derive(Debug)]
pub struct RecordBatchBuilder {
    compression: Compression,
    records: Vec<Record>,
}

impl RecordBatchBuilder {
    pub fn new(compression: Compression) -> Self {
        Self {
            compression,
            records: Vec::new(),
        }
    }

    pub fn push(&mut self, record: NewRecord) {
        let offset = self.records.len() as i64;
        self.records.push(Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: NO_PARTITION_LEADER_EPOCH,
            producer_id: NO_PRODUCER_ID,
            producer_epoch: NO_PRODUCER_EPOCH,
            timestamp_type: TimestampType::Creation,
            offset,
            // kafka-protocol starts a new batch whenever offset - sequence changes, and takes
            // the batch's base sequence from the first record: so the first record carries
            // NO_SEQUENCE (not idempotent) and the others follow it.
            sequence: NO_SEQUENCE.wrapping_add(offset as i32),
            timestamp: record.timestamp_ms,
            key: record.key,
            value: record.value,
            headers: record
                .headers
                .into_iter()
                .map(|(k, v)| (StrBytes::from_string(k), v))
                .collect::<IndexMap<_, _>>(),
        });
    }

    pub fn len(&self) -> usize {
        self.records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// The batch, base offset 0, ready to send as a partition's records.
    pub fn build(&self) -> Result<Bytes, ClientError> {
        if self.records.is_empty() {
            return Err(ClientError::Usage(
                "a record batch needs a record".to_owned(),
            ));
        }
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: self.compression,
        };
        RecordBatchEncoder::encode(&mut buf, &self.records, &options)
            .map_err(|e| ClientError::Usage(format!("encoding a record batch: {e}")))?;
        Ok(buf.freeze())
    }
}

/// A record read back from a fetched batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub offset: i64,
    pub timestamp_ms: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// Where the fields of a v2 record batch header are, for the client side (the CLI, the bench).
/// The broker's storage keeps its own copy: it depends on nothing of ours.
pub mod v2 {
    /// Base offset (8) and batch length (4); the batch length counts from here on.
    pub const BATCH_LENGTH_END: usize = 12;
    pub const MAGIC_AT: usize = 16;
    pub const CRC_AT: usize = 17;
    /// The CRC-32C covers everything from here to the end of the batch.
    pub const ATTRIBUTES_AT: usize = 21;
    pub const LAST_OFFSET_DELTA_AT: usize = 23;
    pub const BASE_TIMESTAMP_AT: usize = 27;
    pub const MAX_TIMESTAMP_AT: usize = 35;
    pub const RECORD_COUNT_AT: usize = 57;
    pub const BATCH_HEADER_BYTES: usize = 61;
    pub const MAGIC: i8 = 2;
    pub const CODEC_MASK: i16 = 0x7;
    pub const LOG_APPEND_TIME_BIT: i16 = 1 << 3;
    pub const CONTROL_BIT: i16 = 1 << 5;
}

use v2::{
    ATTRIBUTES_AT, BASE_TIMESTAMP_AT, BATCH_HEADER_BYTES, BATCH_LENGTH_END, CONTROL_BIT,
    LOG_APPEND_TIME_BIT, MAX_TIMESTAMP_AT, RECORD_COUNT_AT,
};

/// Why the records of a fetched batch could not be read. The bytes are refused whole; nothing
/// has been allocated by what they claim.
#[derive(Debug, thiserror::Error)]
pub enum BatchError {
    #[error("batch length {batch_length}")]
    Length { batch_length: i32 },
    #[error("record count {record_count} where the records take {records_bytes} bytes")]
    RecordCount {
        record_count: i32,
        records_bytes: usize,
    },
    #[error("record {index}: {reason}")]
    Record { index: i32, reason: WireError },
    #[error("record {index} claims {header_count} headers in its last {bytes_left} bytes")]
    HeaderCount {
        index: i32,
        header_count: i32,
        bytes_left: usize,
    },
    #[error("record {index}: its {field} overflows (base {base}, delta {delta})")]
    Overflow {
        index: i32,
        field: &'static str,
        base: i64,
        delta: i64,
    },
    #[error("the compressed records decompress to more than {limit_bytes} bytes")]
    DecompressedTooLarge { limit_bytes: usize },
    #[error("{compression:?} records do not decompress: {source}")]
    Decompress {
        compression: Compression,
        source: std::io::Error,
    },
    /// What `kafka-protocol`'s decoder refused (CRC, magic, a field), in its words.
    #[error("{0}")]
    Malformed(String),
}

/// Decodes the record batches of a fetched partition, skipping control batches and ignoring a
/// partial batch at the end (brokers cut fetch responses at any byte).
///
/// Memory stays in proportion to `records` plus `decompressed_bytes_max`: the compressed
/// batches together may decompress to at most that many bytes (a batch's compressed size says
/// little about what it holds: a few bytes of zstd can stand for gigabytes), and every count
/// is checked against the bytes before anything is allocated by it.
pub fn decode_batches(
    records: &Bytes,
    decompressed_bytes_max: usize,
) -> Result<Vec<ConsumedRecord>, BatchError> {
    let mut consumed = Vec::new();
    let mut rest = records.clone();
    let mut decompressed_bytes_left = decompressed_bytes_max;
    while let Some(batch_bytes) = complete_batch_len(&rest)? {
        let mut batch = rest.split_to(batch_bytes);
        let attributes = i16::from_be_bytes([batch[ATTRIBUTES_AT], batch[ATTRIBUTES_AT + 1]]);
        if attributes & CONTROL_BIT != 0 {
            continue;
        }
        let base = RecordBase {
            record_count: i32::from_be_bytes(field(&batch, RECORD_COUNT_AT)),
            base_offset: i64::from_be_bytes(field(&batch, 0)),
            base_timestamp_ms: i64::from_be_bytes(field(&batch, BASE_TIMESTAMP_AT)),
        };
        // In a LogAppendTime batch every record has the time the broker stamped in the header;
        // the records keep the producer's (kafka-protocol does not apply the rule).
        let log_append_time_ms = (attributes & LOG_APPEND_TIME_BIT != 0)
            .then(|| i64::from_be_bytes(field(&batch, MAX_TIMESTAMP_AT)));
        // kafka-protocol checks the header and CRC, then hands the records to this, and decodes
        // what it returns: decompressed within the limit, their counts checked.
        let decompressed_bytes = Cell::new(0);
        let records_of = |records: &mut Bytes, compression: Compression| {
            let records = decompress(compression, records, decompressed_bytes_left)?;
            check_records(&records, base)?;
            if compression != Compression::None {
                decompressed_bytes.set(records.len());
            }
            Ok(records)
        };
        let set = RecordBatchDecoder::decode_with_custom_compression(&mut batch, Some(records_of))
            .map_err(|e| match e.downcast::<BatchError>() {
                Ok(ours) => ours,
                Err(theirs) => BatchError::Malformed(theirs.to_string()),
            })?;
        decompressed_bytes_left -= decompressed_bytes.get();
        consumed.extend(set.records.into_iter().map(|r| {
            ConsumedRecord {
                offset: r.offset,
                timestamp_ms: log_append_time_ms.unwrap_or(r.timestamp),
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
            }
        }));
        if batch.has_remaining() {
            return Err(bad_batch("bytes left after the records".to_owned()));
        }
    }
    Ok(consumed)
}

/// The `N` bytes of a header field at `at` of a batch at least a header long.
fn field<const N: usize>(batch: &[u8], at: usize) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&batch[at..at + N]);
    out
}

/// The size of the whole batch at the start of `records`; `None` when it is not all there (a
/// fetch may end in the middle of one).
pub(crate) fn complete_batch_len(records: &[u8]) -> Result<Option<usize>, BatchError> {
    let Some(header) = records.get(..BATCH_HEADER_BYTES) else {
        return Ok(None);
    };
    let batch_length = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let batch_bytes = usize::try_from(batch_length)
        .ok()
        .and_then(|len| len.checked_add(BATCH_LENGTH_END))
        .filter(|len| *len >= BATCH_HEADER_BYTES)
        .ok_or(BatchError::Length { batch_length })?;
    Ok((batch_bytes <= records.len()).then_some(batch_bytes))
}

pub(crate) fn bad_batch(reason: String) -> BatchError {
    BatchError::Malformed(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DECOMPRESSED_BYTES_MAX: usize = 1 << 20;

    fn record(i: u8) -> NewRecord {
        NewRecord {
            key: Some(Bytes::from(vec![b'k', i])),
            value: (i % 3 != 0).then(|| Bytes::from(vec![i; 100])),
            headers: vec![("h".to_owned(), Some(Bytes::from_static(b"v")))],
            timestamp_ms: 1_700_000_000_000 + i64::from(i),
        }
    }

    #[test]
    fn built_batches_decode_back_for_every_codec() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut builder = RecordBatchBuilder::new(compression);
            let records: Vec<NewRecord> = (0..10).map(record).collect();
            records.iter().cloned().for_each(|r| builder.push(r));
            let batch = builder.build().unwrap();
            assert_eq!(batch[16], 2, "magic");
            // One batch holding all ten records, base sequence -1.
            let batch_length = i32::from_be_bytes([batch[8], batch[9], batch[10], batch[11]]);
            assert_eq!(batch_length as usize + BATCH_LENGTH_END, batch.len());
            assert_eq!(
                &batch[RECORD_COUNT_AT..BATCH_HEADER_BYTES],
                &10i32.to_be_bytes()
            );
            assert_eq!(&batch[53..57], &(-1i32).to_be_bytes());
            assert_eq!(
                i16::from_be_bytes([batch[21], batch[22]]) & 7,
                compression as i16
            );
            let consumed = decode_batches(&batch, DECOMPRESSED_BYTES_MAX).unwrap();
            assert_eq!(consumed.len(), records.len(), "{compression:?}");
            for (i, (got, sent)) in consumed.iter().zip(&records).enumerate() {
                assert_eq!(got.offset, i as i64);
                assert_eq!(got.key, sent.key);
                assert_eq!(got.value, sent.value);
                assert_eq!(got.headers, sent.headers);
                assert_eq!(got.timestamp_ms, sent.timestamp_ms);
            }
        }
    }

    #[test]
    fn a_partial_trailing_batch_is_ignored() {
        let mut builder = RecordBatchBuilder::new(Compression::None);
        builder.push(record(1));
        let batch = builder.build().unwrap();
        let mut two = BytesMut::new();
        two.extend_from_slice(&batch);
        two.extend_from_slice(&batch[..batch.len() - 5]);
        assert_eq!(
            decode_batches(&two.freeze(), DECOMPRESSED_BYTES_MAX)
                .unwrap()
                .len(),
            1
        );
    }

    /// Puts the right CRC-32C into a batch a test patched: the decoder checks the CRC first.
    fn with_crc(mut batch: BytesMut) -> Bytes {
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
        batch[v2::CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        batch.freeze()
    }

    fn built(compression: Compression, records: impl IntoIterator<Item = NewRecord>) -> BytesMut {
        let mut builder = RecordBatchBuilder::new(compression);
        records.into_iter().for_each(|r| builder.push(r));
        BytesMut::from(&builder.build().unwrap()[..])
    }

    #[test]
    fn absurd_record_counts_are_refused() {
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let claiming = |count: i32| {
                let mut batch = built(compression, [record(1)]);
                batch[RECORD_COUNT_AT..BATCH_HEADER_BYTES].copy_from_slice(&count.to_be_bytes());
                decode_batches(&with_crc(batch), DECOMPRESSED_BYTES_MAX)
            };
            // More records than the bytes could hold: refused before any is read (a negative
            // count kafka-protocol refuses itself).
            for count in [i32::MAX, 1 << 20] {
                let result = claiming(count);
                assert!(
                    matches!(result, Err(BatchError::RecordCount { record_count, .. }) if record_count == count),
                    "{compression:?} {count}: {result:?}"
                );
            }
            // As many as could fit, but not there: the walk finds the first one missing.
            let result = claiming(2);
            assert!(
                matches!(result, Err(BatchError::Record { index: 1, .. })),
                "{compression:?}: {result:?}"
            );
        }
    }

    /// Found by the `group_records` fuzz target (fuzz/findings/, now fixed): a 67-byte batch
    /// whose snappy records claim 18 MB decompressed (and up to 4 GiB could be claimed), which
    /// `kafka-protocol` allocated before decompressing.
    #[test]
    fn a_snappy_batch_claiming_more_than_the_limit_is_refused_before_allocating() {
        let found: [u8; 79] = [
            0x0a, 0x01, 0x08, 0x44, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x37, 0x00, 0x00,
            0x00, 0x33, 0x02, 0x00, 0x00, 0x00, 0x42, 0x42, 0x42, 0x42, 0x42, 0x42, 0x00, 0x00,
            0x00, 0x00, 0x2b, 0x2b, 0x2b, 0x2b, 0x2b, 0x2b, 0x2b, 0x2b, 0x2b, 0x00, 0x00, 0x00,
            0x00, 0x7a, 0x2b, 0x01, 0x08, 0x00, 0x00, 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x31,
            0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, 0xff, 0x08, 0x00, 0x00, 0x04, 0x00, 0x00,
            0x00, 0x00, 0x00, 0x00, 0xb3, 0x0a, 0x00, 0x00, 0x00,
        ];
        // The fuzz target gives each batch its right CRC (the log serves only those).
        let batch = with_crc(BytesMut::from(&found[..67]));
        assert_eq!(
            batch[ATTRIBUTES_AT + 1] & v2::CODEC_MASK as u8,
            Compression::Snappy as u8
        );
        assert!(matches!(
            decode_batches(&batch, 1 << 20),
            Err(BatchError::DecompressedTooLarge {
                limit_bytes: 1_048_576
            })
        ));
    }

    /// Found by the `group_records` fuzz target: a batch at base offset 2^63 - 1 (the base
    /// offset is outside the CRC) whose records' offsets `kafka-protocol` computes as base
    /// plus delta, unchecked: a panic under overflow checks, a wrapped offset without.
    #[test]
    fn a_base_offset_or_timestamp_that_overflows_is_refused() {
        let mut at_max = built(Compression::None, [record(1), record(2)]);
        at_max[..8].copy_from_slice(&i64::MAX.to_be_bytes());
        assert!(matches!(
            decode_batches(&with_crc(at_max), DECOMPRESSED_BYTES_MAX),
            Err(BatchError::Overflow {
                index: 1,
                field: "offset",
                ..
            })
        ));
        let mut late = built(Compression::Gzip, [record(1), record(2)]);
        late[BASE_TIMESTAMP_AT..BASE_TIMESTAMP_AT + 8].copy_from_slice(&i64::MAX.to_be_bytes());
        assert!(matches!(
            decode_batches(&with_crc(late), DECOMPRESSED_BYTES_MAX),
            Err(BatchError::Overflow {
                index: 1,
                field: "timestamp",
                ..
            })
        ));
    }

    #[test]
    fn compressed_batches_decompress_within_the_limit_in_all() {
        let big = |i: u8| NewRecord {
            value: Some(Bytes::from(vec![i; 600 << 10])),
            ..record(i)
        };
        for compression in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let one = built(compression, [big(1)]).freeze();
            assert!(one.len() < 64 << 10, "{compression:?} compresses");
            let mut two = BytesMut::from(&one[..]);
            two.extend_from_slice(&one);
            let two = two.freeze();
            assert_eq!(decode_batches(&one, 1 << 20).unwrap().len(), 1);
            assert_eq!(decode_batches(&two, 2 << 20).unwrap().len(), 2);
            assert!(
                matches!(
                    decode_batches(&two, 1 << 20),
                    Err(BatchError::DecompressedTooLarge { .. })
                ),
                "{compression:?}: the limit is for all the batches"
            );
            assert!(matches!(
                decode_batches(&one, 512 << 10),
                Err(BatchError::DecompressedTooLarge { .. })
            ));
        }
        // Uncompressed records are read where they are: the limit does not apply.
        let plain = built(Compression::None, [big(1)]).freeze();
        assert_eq!(decode_batches(&plain, 0).unwrap().len(), 1);
    }

    #[test]
    fn a_header_count_past_its_record_is_refused() {
        for compression in [Compression::None, Compression::Gzip] {
            let mut builder = RecordBatchBuilder::new(Compression::None);
            builder.push(record(1));
            let mut batch = BytesMut::from(&builder.build().unwrap()[..]);
            // The record's header count (one: zigzag 2) sits before its one header: key "h"
            // (zigzag length 2), then value "v" (2): five bytes from the end.
            let at = batch.len() - 5;
            assert_eq!(batch[at], 2);
            batch[at] = 0x7e; // 63 headers in four bytes
            let plain = with_crc(batch);
            let batch = match compression {
                Compression::None => plain,
                _ => recompressed(&plain, compression),
            };
            let result = decode_batches(&batch, DECOMPRESSED_BYTES_MAX);
            assert!(
                matches!(
                    result,
                    Err(BatchError::HeaderCount {
                        index: 0,
                        header_count: 63,
                        bytes_left: 4
                    })
                ),
                "{compression:?}: {result:?}"
            );
        }
    }

    /// The records of an uncompressed batch, gzipped into a batch of the same header.
    fn recompressed(plain: &[u8], compression: Compression) -> Bytes {
        assert_eq!(compression, Compression::Gzip);
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        std::io::Write::write_all(&mut encoder, &plain[BATCH_HEADER_BYTES..]).unwrap();
        let records = encoder.finish().unwrap();
        let mut batch = BytesMut::from(&plain[..BATCH_HEADER_BYTES]);
        batch.extend_from_slice(&records);
        let batch_length = i32::try_from(batch.len() - BATCH_LENGTH_END).unwrap();
        batch[8..BATCH_LENGTH_END].copy_from_slice(&batch_length.to_be_bytes());
        batch[ATTRIBUTES_AT + 1] |= Compression::Gzip as u8;
        with_crc(batch)
    }

    #[test]
    fn an_empty_builder_does_not_build() {
        assert!(RecordBatchBuilder::new(Compression::None).build().is_err());
    }
}
