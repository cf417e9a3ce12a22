//! The records of the offsets log: keys and values are FlatBuffers tables of
//! `schema/fbs/groups.fbs` (`schema::groups`), carried in ordinary v2 record batches so the log
//! stays a Kafka log. A record without a value deletes its key.

use bytes::{Bytes, BytesMut};
use flatbuffers::FlatBufferBuilder;
use net::client::batch::{Compression, NewRecord, RecordBatchBuilder};
use schema::groups as fb;
use thiserror::Error;

use super::offsets::StoredOffset;

/// A v2 batch header; every batch has one.
const BATCH_HEADER_BYTES: usize = 61;
/// The most a record's framing adds to its key and value: length, attributes, timestamp and
/// offset deltas, key and value lengths, header count, as varints.
const RECORD_OVERHEAD_BYTES: usize = 40;

/// The key of a committed offset.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct OffsetKey {
    pub group: String,
    pub topic: String,
    pub partition: i32,
}

/// One record of the offsets log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Record {
    /// A committed offset, or (`None`) its deletion.
    Offset(OffsetKey, Option<StoredOffset>),
}

#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub(super) enum RecordError {
    #[error("record without a key")]
    NoKey,
    #[error("malformed record key: {0}")]
    BadKey(String),
    #[error("malformed offset value: {0}")]
    BadValue(String),
    #[error("a record of {size_bytes} bytes does not fit a batch of {limit_bytes}")]
    TooLarge {
        size_bytes: usize,
        limit_bytes: usize,
    },
    #[error("building a record batch: {0}")]
    Batch(String),
}

/// A record with its key and value encoded, ready to go into a batch.
#[derive(Debug, Clone)]
pub(super) struct EncodedRecord {
    key: Bytes,
    value: Option<Bytes>,
}

impl EncodedRecord {
    pub fn size_bytes(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, Bytes::len) + RECORD_OVERHEAD_BYTES
    }
}

impl Record {
    pub fn encode(&self) -> EncodedRecord {
        match self {
            Record::Offset(key, value) => EncodedRecord {
                key: encode_offset_key(key),
                value: value.as_ref().map(encode_offset_value),
            },
        }
    }

    /// Reads a record back. `Ok(None)` for a kind of record this version does not know (written
    /// by a newer one): skipped, so that a downgrade keeps working.
    pub fn decode(key: Option<&[u8]>, value: Option<&[u8]>) -> Result<Option<Record>, RecordError> {
        let key = key.ok_or(RecordError::NoKey)?;
        // The identifier check asserts there are 8 bytes (a root offset and the identifier).
        if key.len() < 8 || !fb::record_key_buffer_has_identifier(key) {
            return Err(RecordError::BadKey("missing the SPGK identifier".into()));
        }
        // The verifier checks every offset and length before anything is read.
        let root = fb::root_as_record_key(key).map_err(|e| RecordError::BadKey(e.to_string()))?;
        let Some(offset_key) = root.key_as_offset_key() else {
            return Ok(None);
        };
        let key = OffsetKey {
            group: offset_key.group().to_owned(),
            topic: offset_key.topic().to_owned(),
            partition: offset_key.partition(),
        };
        let value = value.map(decode_offset_value).transpose()?;
        Ok(Some(Record::Offset(key, value)))
    }
}

fn encode_offset_key(key: &OffsetKey) -> Bytes {
    let mut b = FlatBufferBuilder::new();
    let group = b.create_string(&key.group);
    let topic = b.create_string(&key.topic);
    let offset_key = fb::OffsetKey::create(
        &mut b,
        &fb::OffsetKeyArgs {
            group: Some(group),
            topic: Some(topic),
            partition: key.partition,
        },
    );
    let root = fb::RecordKey::create(
        &mut b,
        &fb::RecordKeyArgs {
            key_type: fb::Key::OffsetKey,
            key: Some(offset_key.as_union_value()),
        },
    );
    fb::finish_record_key_buffer(&mut b, root);
    Bytes::copy_from_slice(b.finished_data())
}

fn encode_offset_value(value: &StoredOffset) -> Bytes {
    let mut b = FlatBufferBuilder::new();
    let metadata = b.create_string(&value.metadata);
    let root = fb::OffsetValue::create(
        &mut b,
        &fb::OffsetValueArgs {
            offset: value.offset,
            leader_epoch: value.leader_epoch,
            metadata: Some(metadata),
            commit_timestamp_ms: value.commit_timestamp_ms,
            expire_timestamp_ms: value.expire_timestamp_ms.unwrap_or(-1),
        },
    );
    b.finish_minimal(root);
    Bytes::copy_from_slice(b.finished_data())
}

fn decode_offset_value(bytes: &[u8]) -> Result<StoredOffset, RecordError> {
    let value = flatbuffers::root::<fb::OffsetValue>(bytes)
        .map_err(|e| RecordError::BadValue(e.to_string()))?;
    Ok(StoredOffset {
        offset: value.offset(),
        leader_epoch: value.leader_epoch(),
        metadata: value.metadata().unwrap_or_default().to_owned(),
        commit_timestamp_ms: value.commit_timestamp_ms(),
        expire_timestamp_ms: Some(value.expire_timestamp_ms()).filter(|&t| t >= 0),
    })
}

/// Whether a record fits in a batch of at most `batch_bytes_max` bytes.
pub(super) fn fits(record: &EncodedRecord, batch_bytes_max: usize) -> Result<(), RecordError> {
    let size_bytes = BATCH_HEADER_BYTES + record.size_bytes();
    if size_bytes > batch_bytes_max {
        return Err(RecordError::TooLarge {
            size_bytes,
            limit_bytes: batch_bytes_max,
        });
    }
    Ok(())
}

/// Packs records, in order, into as few batches of at most `batch_bytes_max` bytes as they
/// fit, one after the other in one buffer: a record set for one `Log::append`.
pub(super) fn record_set(
    records: &[EncodedRecord],
    timestamp_ms: i64,
    batch_bytes_max: usize,
) -> Result<BytesMut, RecordError> {
    let mut set = BytesMut::new();
    let mut batch = RecordBatchBuilder::new(Compression::None);
    let mut batch_bytes = BATCH_HEADER_BYTES;
    for record in records {
        fits(record, batch_bytes_max)?;
        if !batch.is_empty() && batch_bytes + record.size_bytes() > batch_bytes_max {
            finish_batch(&mut set, &mut batch)?;
            batch_bytes = BATCH_HEADER_BYTES;
        }
        batch_bytes += record.size_bytes();
        batch.push(NewRecord {
            key: Some(record.key.clone()),
            value: record.value.clone(),
            headers: Vec::new(),
            timestamp_ms,
        });
    }
    if !batch.is_empty() {
        finish_batch(&mut set, &mut batch)?;
    }
    Ok(set)
}

fn finish_batch(set: &mut BytesMut, batch: &mut RecordBatchBuilder) -> Result<(), RecordError> {
    let built = batch
        .build()
        .map_err(|e| RecordError::Batch(e.to_string()))?;
    set.extend_from_slice(&built);
    *batch = RecordBatchBuilder::new(Compression::None);
    Ok(())
}

#[cfg(test)]
mod tests {
    use net::client::batch::decode_batches;
    use proptest::prelude::*;

    use super::*;

    fn record() -> impl Strategy<Value = Record> {
        let key = ("[a-z0-9._-]{0,40}", "\\PC{0,30}", any::<i32>()).prop_map(
            |(group, topic, partition)| OffsetKey {
                group,
                topic,
                partition,
            },
        );
        let value = (
            any::<i64>(),
            any::<i32>(),
            "\\PC{0,50}",
            any::<i64>(),
            proptest::option::of(0i64..i64::MAX),
        )
            .prop_map(
                |(offset, leader_epoch, metadata, commit_timestamp_ms, expire_timestamp_ms)| {
                    StoredOffset {
                        offset,
                        leader_epoch,
                        metadata,
                        commit_timestamp_ms,
                        expire_timestamp_ms,
                    }
                },
            );
        (key, proptest::option::of(value)).prop_map(|(k, v)| Record::Offset(k, v))
    }

    fn read_back(set: &BytesMut) -> Vec<Record> {
        decode_batches(&set.clone().freeze(), 0)
            .unwrap()
            .iter()
            .map(|r| {
                Record::decode(r.key.as_deref(), r.value.as_deref())
                    .unwrap()
                    .unwrap()
            })
            .collect()
    }

    proptest! {
        #[test]
        fn records_read_back_as_written_across_batches(
            records in proptest::collection::vec(record(), 1..40),
            batch_bytes_max in 400usize..4_000,
        ) {
            let encoded: Vec<EncodedRecord> = records.iter().map(Record::encode).collect();
            // Every record must fit a batch on its own.
            let largest = encoded.iter().map(|r| BATCH_HEADER_BYTES + r.size_bytes()).max();
            let batch_bytes_max = batch_bytes_max.max(largest.unwrap_or(0));
            let set = record_set(&encoded, 1_700_000_000_000, batch_bytes_max).unwrap();
            prop_assert_eq!(read_back(&set), records);
            // Each batch keeps to the limit.
            let mut rest = &set[..];
            while !rest.is_empty() {
                let header = storage::BatchHeader::parse(rest).unwrap();
                prop_assert!(header.size_bytes() <= batch_bytes_max);
                rest = &rest[header.size_bytes()..];
            }
        }

        #[test]
        fn arbitrary_bytes_decode_to_an_error_or_a_record(
            key in proptest::collection::vec(any::<u8>(), 0..80),
            value in proptest::option::of(proptest::collection::vec(any::<u8>(), 0..80)),
        ) {
            let _ = Record::decode(Some(&key), value.as_deref());
        }
    }

    #[test]
    fn a_record_too_large_for_any_batch_is_refused() {
        let huge = Record::Offset(
            OffsetKey {
                group: "g".repeat(2_000),
                topic: "t".into(),
                partition: 0,
            },
            None,
        )
        .encode();
        assert!(matches!(
            record_set(std::slice::from_ref(&huge), 0, 1_000),
            Err(RecordError::TooLarge { .. })
        ));
        assert!(fits(&huge, 1_000).is_err());
        assert!(fits(&huge, 3_000).is_ok());
    }

    #[test]
    fn keys_without_the_identifier_or_a_key_are_refused() {
        assert_eq!(Record::decode(None, None), Err(RecordError::NoKey));
        assert!(matches!(
            Record::decode(Some(b"not a flatbuffer"), None),
            Err(RecordError::BadKey(_))
        ));
    }

    #[test]
    fn unknown_kinds_of_record_are_skipped() {
        let mut b = FlatBufferBuilder::new();
        let root = fb::RecordKey::create(
            &mut b,
            &fb::RecordKeyArgs {
                key_type: fb::Key::NONE,
                key: None,
            },
        );
        fb::finish_record_key_buffer(&mut b, root);
        assert_eq!(Record::decode(Some(b.finished_data()), None), Ok(None));
    }
}
