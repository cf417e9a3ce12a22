//! Record batches (format v2) for the client: a builder for what it produces and a decoder for
//! what it fetches. Both use `kafka-protocol`'s record codec and its compression codecs.
//!
//! Client side only: the broker keeps batches as opaque bytes. Note that `kafka-protocol` keeps a
//! record's headers in a map, so headers repeating a key keep only the last value.

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    NO_PARTITION_LEADER_EPOCH, NO_PRODUCER_EPOCH, NO_PRODUCER_ID, NO_SEQUENCE, Record,
    RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};

pub use kafka_protocol::records::Compression;

use super::error::ClientError;

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
    pub const MAX_TIMESTAMP_AT: usize = 35;
    pub const RECORD_COUNT_AT: usize = 57;
    pub const BATCH_HEADER_BYTES: usize = 61;
    pub const MAGIC: i8 = 2;
    pub const CODEC_MASK: i16 = 0x7;
    pub const LOG_APPEND_TIME_BIT: i16 = 1 << 3;
    pub const CONTROL_BIT: i16 = 1 << 5;
}

use v2::{
    ATTRIBUTES_AT, BATCH_HEADER_BYTES, BATCH_LENGTH_END, CODEC_MASK, CONTROL_BIT,
    LOG_APPEND_TIME_BIT, MAX_TIMESTAMP_AT, RECORD_COUNT_AT,
};

/// A record count a compressed batch may claim. `kafka-protocol` reserves room for the count
/// before decompressing, so an absurd count must be refused first.
const COMPRESSED_RECORDS_MAX: i32 = 1 << 20;

/// Decodes the record batches of a fetched partition, skipping control batches and ignoring a
/// partial batch at the end (brokers cut fetch responses at any byte).
pub fn decode_batches(records: &Bytes) -> Result<Vec<ConsumedRecord>, ClientError> {
    let mut consumed = Vec::new();
    let mut rest = records.clone();
    while let Some(batch_bytes) = complete_batch_len(&rest)? {
        let mut batch = rest.split_to(batch_bytes);
        let attributes = i16::from_be_bytes([batch[ATTRIBUTES_AT], batch[ATTRIBUTES_AT + 1]]);
        let count_at = &batch[RECORD_COUNT_AT..BATCH_HEADER_BYTES];
        let record_count = i32::from_be_bytes([count_at[0], count_at[1], count_at[2], count_at[3]]);
        let compressed = attributes & CODEC_MASK != 0;
        let count_max = if compressed {
            COMPRESSED_RECORDS_MAX
        } else {
            // Every record takes at least one byte.
            i32::try_from(batch_bytes - BATCH_HEADER_BYTES).unwrap_or(i32::MAX)
        };
        if !(0..=count_max).contains(&record_count) {
            return Err(bad_batch(format!("record count {record_count}")));
        }
        if attributes & CONTROL_BIT != 0 {
            continue;
        }
        // In a LogAppendTime batch every record has the time the broker stamped in the header;
        // the records keep the producer's (kafka-protocol does not apply the rule).
        let log_append_time_ms = (attributes & LOG_APPEND_TIME_BIT != 0).then(|| {
            let at = &batch[MAX_TIMESTAMP_AT..MAX_TIMESTAMP_AT + 8];
            i64::from_be_bytes([at[0], at[1], at[2], at[3], at[4], at[5], at[6], at[7]])
        });
        let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| bad_batch(e.to_string()))?;
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

/// The size of the whole batch at the start of `records`; `None` when it is not all there (a
/// fetch may end in the middle of one).
pub(crate) fn complete_batch_len(records: &[u8]) -> Result<Option<usize>, ClientError> {
    let Some(header) = records.get(..BATCH_HEADER_BYTES) else {
        return Ok(None);
    };
    let batch_length = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
    let batch_bytes = usize::try_from(batch_length)
        .ok()
        .and_then(|len| len.checked_add(BATCH_LENGTH_END))
        .filter(|len| *len >= BATCH_HEADER_BYTES)
        .ok_or_else(|| bad_batch(format!("batch length {batch_length}")))?;
    Ok((batch_bytes <= records.len()).then_some(batch_bytes))
}

pub(crate) fn bad_batch(reason: String) -> ClientError {
    ClientError::Usage(format!("malformed record batch: {reason}"))
}

#[cfg(test)]
mod tests {
    use super::*;

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
            let consumed = decode_batches(&batch).unwrap();
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
        assert_eq!(decode_batches(&two.freeze()).unwrap().len(), 1);
    }

    #[test]
    fn absurd_record_counts_are_refused() {
        let mut builder = RecordBatchBuilder::new(Compression::None);
        builder.push(record(1));
        let mut batch = BytesMut::from(&builder.build().unwrap()[..]);
        batch[RECORD_COUNT_AT..BATCH_HEADER_BYTES].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(decode_batches(&batch.freeze()).is_err());
    }

    #[test]
    fn an_empty_builder_does_not_build() {
        assert!(RecordBatchBuilder::new(Compression::None).build().is_err());
    }
}
