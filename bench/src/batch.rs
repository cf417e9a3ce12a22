//! Record batches (format v2) written and read directly: the header, varint records and the
//! CRC-32C, without building a struct per record. Producing a million records a second must not
//! make the bench the bottleneck. Compression goes through `kafka-protocol`'s codecs.
//!
//! Layout (Kafka's `DefaultRecordBatch`): baseOffset i64, batchLength i32, partitionLeaderEpoch
//! i32, magic i8, crc u32, attributes i16, lastOffsetDelta i32, baseTimestamp i64, maxTimestamp
//! i64, producerId i64, producerEpoch i16, baseSequence i32, recordCount i32, then the records
//! (compressed as one block if the codec says so). The CRC covers attributes to the end.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use net::kafka_protocol::compression::{Compressor, Decompressor, Gzip, Lz4, Snappy, Zstd};

pub use net::client::batch::v2::BATCH_HEADER_BYTES;
use net::client::batch::v2::{
    ATTRIBUTES_AT, BATCH_LENGTH_END, CODEC_MASK, CONTROL_BIT, CRC_AT, MAGIC, MAGIC_AT,
};

/// A batch's compression codec, as attribute bits 0-2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    None = 0,
    Gzip = 1,
    Snappy = 2,
    Lz4 = 3,
    Zstd = 4,
}

impl Codec {
    pub fn name(self) -> &'static str {
        match self {
            Codec::None => "none",
            Codec::Gzip => "gzip",
            Codec::Snappy => "snappy",
            Codec::Lz4 => "lz4",
            Codec::Zstd => "zstd",
        }
    }

    fn from_attributes(attributes: i16) -> Option<Codec> {
        match attributes & CODEC_MASK {
            0 => Some(Codec::None),
            1 => Some(Codec::Gzip),
            2 => Some(Codec::Snappy),
            3 => Some(Codec::Lz4),
            4 => Some(Codec::Zstd),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BatchError {
    #[error("a batch needs at least one record")]
    Empty,
    #[error("a record of {bytes} bytes does not fit a batch")]
    TooLarge { bytes: usize },
    #[error("compressing with {codec}: {reason}")]
    Compress { codec: &'static str, reason: String },
    #[error("batch length {0} is out of range")]
    Length(i32),
    #[error("magic byte {0}: only v2 batches are read")]
    Magic(i8),
    #[error("CRC mismatch: header says {stored:#010x}, bytes give {computed:#010x}")]
    Crc { stored: u32, computed: u32 },
    #[error("unknown codec in attributes {0:#06x}")]
    UnknownCodec(i16),
    #[error("decompressing {codec}: {reason}")]
    Decompress { codec: &'static str, reason: String },
    #[error("record count {0} does not fit the batch")]
    RecordCount(i32),
    #[error("malformed record: {0}")]
    Record(&'static str),
}

/// Collects records into one v2 batch.
#[derive(Debug)]
pub struct BatchBuilder {
    codec: Codec,
    /// Room for the header, then the records, uncompressed.
    buf: BytesMut,
    record_count: i32,
    base_timestamp_ms: i64,
    max_timestamp_ms: i64,
}

impl BatchBuilder {
    /// A builder with room for `capacity_bytes` of records before it reallocates.
    pub fn new(codec: Codec, capacity_bytes: usize) -> Self {
        let mut buf = BytesMut::with_capacity(BATCH_HEADER_BYTES + capacity_bytes);
        buf.put_bytes(0, BATCH_HEADER_BYTES);
        Self {
            codec,
            buf,
            record_count: 0,
            base_timestamp_ms: 0,
            max_timestamp_ms: i64::MIN,
        }
    }

    /// Bytes of records so far, uncompressed.
    pub fn records_bytes(&self) -> usize {
        self.buf.len() - BATCH_HEADER_BYTES
    }

    /// Appends a record without headers whose value is `value_parts` joined.
    pub fn push(
        &mut self,
        timestamp_ms: i64,
        key: Option<&[u8]>,
        value_parts: &[&[u8]],
    ) -> Result<(), BatchError> {
        if self.record_count == 0 {
            self.base_timestamp_ms = timestamp_ms;
        }
        let value_bytes: usize = value_parts.iter().map(|p| p.len()).sum();
        let key_bytes = key.map_or(0, <[u8]>::len);
        let too_large = || BatchError::TooLarge {
            bytes: key_bytes + value_bytes,
        };
        let key_len = key
            .map_or(Ok(-1), |k| i32::try_from(k.len()))
            .map_err(|_| too_large())?;
        let value_len = i32::try_from(value_bytes).map_err(|_| too_large())?;
        let timestamp_delta = timestamp_ms.wrapping_sub(self.base_timestamp_ms);
        let offset_delta = self.record_count;
        // attributes, then the fields, then an empty header count.
        let body_bytes = 1
            + varlong_len(timestamp_delta)
            + varint_len(offset_delta)
            + varint_len(key_len)
            + key_bytes
            + varint_len(value_len)
            + value_bytes
            + 1;
        let body_len = i32::try_from(body_bytes).map_err(|_| too_large())?;
        self.buf.reserve(varint_len(body_len) + body_bytes);
        put_varint(&mut self.buf, body_len);
        self.buf.put_i8(0);
        put_varlong(&mut self.buf, timestamp_delta);
        put_varint(&mut self.buf, offset_delta);
        put_varint(&mut self.buf, key_len);
        if let Some(key) = key {
            self.buf.put_slice(key);
        }
        put_varint(&mut self.buf, value_len);
        for part in value_parts {
            self.buf.put_slice(part);
        }
        put_varint(&mut self.buf, 0);
        self.record_count += 1;
        self.max_timestamp_ms = self.max_timestamp_ms.max(timestamp_ms);
        Ok(())
    }

    /// The batch, base offset 0, no producer id, ready to send.
    pub fn finish(self) -> Result<Bytes, BatchError> {
        if self.record_count == 0 {
            return Err(BatchError::Empty);
        }
        let mut batch = match self.codec {
            Codec::None => self.buf,
            codec => {
                let records = &self.buf[BATCH_HEADER_BYTES..];
                let mut out = BytesMut::with_capacity(BATCH_HEADER_BYTES + records.len() / 2);
                out.put_bytes(0, BATCH_HEADER_BYTES);
                compress(codec, &mut out, records)?;
                out
            }
        };
        let batch_length = i32::try_from(batch.len() - BATCH_LENGTH_END)
            .map_err(|_| BatchError::TooLarge { bytes: batch.len() })?;
        let mut header = &mut batch[..BATCH_HEADER_BYTES];
        header.put_i64(0);
        header.put_i32(batch_length);
        header.put_i32(-1); // partition leader epoch: the broker sets it
        header.put_i8(MAGIC);
        header.put_u32(0); // the CRC, below
        header.put_i16(self.codec as i16); // create-time timestamps, not transactional
        header.put_i32(self.record_count - 1);
        header.put_i64(self.base_timestamp_ms);
        header.put_i64(self.max_timestamp_ms);
        header.put_i64(-1); // producer id: not idempotent
        header.put_i16(-1);
        header.put_i32(-1);
        header.put_i32(self.record_count);
        let crc = crc32c::crc32c(&batch[ATTRIBUTES_AT..]);
        batch[CRC_AT..ATTRIBUTES_AT].copy_from_slice(&crc.to_be_bytes());
        Ok(batch.freeze())
    }
}

fn compress(codec: Codec, out: &mut BytesMut, records: &[u8]) -> Result<(), BatchError> {
    let fill = |tmp: &mut BytesMut| {
        tmp.extend_from_slice(records);
        Ok(())
    };
    let compressed = match codec {
        Codec::None => {
            out.extend_from_slice(records);
            Ok(())
        }
        Codec::Gzip => Gzip::compress(out, fill),
        Codec::Snappy => Snappy::compress(out, fill),
        Codec::Lz4 => Lz4::compress(out, fill),
        Codec::Zstd => Zstd::compress(out, fill),
    };
    compressed.map_err(|e| BatchError::Compress {
        codec: codec.name(),
        reason: e.to_string(),
    })
}

/// One whole batch of a fetched partition, its header checked (length, magic, CRC).
#[derive(Debug, Clone)]
pub struct FetchedBatch {
    pub base_offset: i64,
    /// The offset after the batch's last record.
    pub next_offset: i64,
    pub record_count: i32,
    pub codec: Codec,
    pub is_control: bool,
    /// The whole batch.
    bytes: Bytes,
}

/// Takes the next whole batch off the front of a partition's fetched records. `None` when what
/// is left is empty or a partial batch (brokers cut fetch responses anywhere).
pub fn next_batch(rest: &mut Bytes) -> Result<Option<FetchedBatch>, BatchError> {
    let Some(length_field) = rest.get(8..BATCH_LENGTH_END) else {
        return Ok(None);
    };
    let batch_length = i32::from_be_bytes([
        length_field[0],
        length_field[1],
        length_field[2],
        length_field[3],
    ]);
    let batch_bytes = usize::try_from(batch_length)
        .ok()
        .map(|len| len + BATCH_LENGTH_END)
        .filter(|len| *len >= BATCH_HEADER_BYTES)
        .ok_or(BatchError::Length(batch_length))?;
    if rest.len() < MAGIC_AT + 1 {
        return Ok(None);
    }
    // Checked before the size: older formats lay the header out differently.
    let magic = rest[MAGIC_AT] as i8;
    if magic != MAGIC {
        return Err(BatchError::Magic(magic));
    }
    if rest.len() < batch_bytes {
        return Ok(None);
    }
    let bytes = rest.split_to(batch_bytes);
    let mut header = &bytes[..BATCH_HEADER_BYTES];
    let base_offset = header.get_i64();
    header.advance(4 + 4 + 1);
    let stored = header.get_u32();
    let computed = crc32c::crc32c(&bytes[ATTRIBUTES_AT..]);
    if stored != computed {
        return Err(BatchError::Crc { stored, computed });
    }
    let attributes = header.get_i16();
    let last_offset_delta = header.get_i32();
    header.advance(8 + 8 + 8 + 2 + 4);
    let record_count = header.get_i32();
    let codec = Codec::from_attributes(attributes).ok_or(BatchError::UnknownCodec(attributes))?;
    // Records are at least 7 bytes uncompressed; a compressed count is checked as records are
    // read.
    let records_bytes = batch_bytes - BATCH_HEADER_BYTES;
    let count_fits = record_count >= 0
        && (codec != Codec::None
            || usize::try_from(record_count).is_ok_and(|n| n <= records_bytes));
    if !count_fits || last_offset_delta < 0 {
        return Err(BatchError::RecordCount(record_count));
    }
    Ok(Some(FetchedBatch {
        base_offset,
        next_offset: base_offset.saturating_add(i64::from(last_offset_delta) + 1),
        record_count,
        codec,
        is_control: attributes & CONTROL_BIT != 0,
        bytes,
    }))
}

/// What a reader sees of one record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordView<'a> {
    pub offset: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
}

impl FetchedBatch {
    /// Calls `visit` with each record, decompressing first if need be. Every length is
    /// checked against the bytes left, and the records must be as many as the header says.
    pub fn for_each_record(&self, visit: impl FnMut(RecordView<'_>)) -> Result<(), BatchError> {
        let records = self.bytes.slice(BATCH_HEADER_BYTES..);
        let walk =
            |buf: &[u8], visit| walk_records(buf, self.base_offset, self.record_count, visit);
        let decompressed = |result: Result<Bytes, String>| {
            result.map_err(|reason| BatchError::Decompress {
                codec: self.codec.name(),
                reason,
            })
        };
        match self.codec {
            Codec::None => walk(&records, visit),
            codec => walk(&decompressed(decompress(codec, records))?, visit),
        }
    }
}

fn decompress(codec: Codec, mut records: Bytes) -> Result<Bytes, String> {
    let take = |buf: &mut Bytes| Ok(std::mem::take(buf));
    let result = match codec {
        Codec::None => Ok(records),
        Codec::Gzip => Gzip::decompress(&mut records, take),
        Codec::Snappy => Snappy::decompress(&mut records, take),
        Codec::Lz4 => Lz4::decompress(&mut records, take),
        Codec::Zstd => Zstd::decompress(&mut records, take),
    };
    result.map_err(|e| e.to_string())
}

fn walk_records(
    mut buf: &[u8],
    base_offset: i64,
    record_count: i32,
    mut visit: impl FnMut(RecordView<'_>),
) -> Result<(), BatchError> {
    for _ in 0..record_count {
        let length = read_varint(&mut buf)?;
        let length = usize::try_from(length).map_err(|_| BatchError::Record("negative length"))?;
        if length > buf.len() {
            return Err(BatchError::Record("length past the batch"));
        }
        let (mut record, rest) = buf.split_at(length);
        buf = rest;
        if record.is_empty() {
            return Err(BatchError::Record("empty"));
        }
        record.advance(1); // attributes
        read_varlong(&mut record)?; // timestamp delta
        let offset_delta = read_varint(&mut record)?;
        let key = read_nullable(&mut record)?;
        let value = read_nullable(&mut record)?;
        // Headers follow; the record's length already bounds them and nobody here reads them.
        visit(RecordView {
            offset: base_offset.saturating_add(i64::from(offset_delta)),
            key,
            value,
        });
    }
    if buf.is_empty() {
        Ok(())
    } else {
        Err(BatchError::Record("bytes after the last record"))
    }
}

fn read_nullable<'a>(buf: &mut &'a [u8]) -> Result<Option<&'a [u8]>, BatchError> {
    let len = read_varint(buf)?;
    if len < 0 {
        return Ok(None);
    }
    let len = len as usize;
    if len > buf.len() {
        return Err(BatchError::Record("field past the record"));
    }
    let (field, rest) = buf.split_at(len);
    *buf = rest;
    Ok(Some(field))
}

fn read_varint(buf: &mut &[u8]) -> Result<i32, BatchError> {
    let raw = read_unsigned(buf, 5)?;
    let raw = u32::try_from(raw).map_err(|_| BatchError::Record("varint over 32 bits"))?;
    Ok(((raw >> 1) as i32) ^ -((raw & 1) as i32))
}

fn read_varlong(buf: &mut &[u8]) -> Result<i64, BatchError> {
    let raw = read_unsigned(buf, 10)?;
    Ok(((raw >> 1) as i64) ^ -((raw & 1) as i64))
}

/// An unsigned LEB128 value of at most `bytes_max` bytes.
fn read_unsigned(buf: &mut &[u8], bytes_max: usize) -> Result<u64, BatchError> {
    let mut value = 0u64;
    for i in 0..bytes_max {
        let (&byte, rest) = buf
            .split_first()
            .ok_or(BatchError::Record("varint past the end"))?;
        *buf = rest;
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(BatchError::Record("varint too long"))
}

fn zigzag32(v: i32) -> u32 {
    ((v << 1) ^ (v >> 31)) as u32
}

fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn put_unsigned(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

fn put_varint(buf: &mut BytesMut, v: i32) {
    put_unsigned(buf, u64::from(zigzag32(v)));
}

fn put_varlong(buf: &mut BytesMut, v: i64) {
    put_unsigned(buf, zigzag64(v));
}

fn unsigned_len(v: u64) -> usize {
    // 7 bits a byte; 0 still takes one.
    (64 - (v | 1).leading_zeros() as usize).div_ceil(7)
}

fn varint_len(v: i32) -> usize {
    unsigned_len(u64::from(zigzag32(v)))
}

fn varlong_len(v: i64) -> usize {
    unsigned_len(zigzag64(v))
}

#[cfg(test)]
mod tests {
    use super::*;
    use net::client::batch::{NewRecord, RecordBatchBuilder, decode_batches};
    use proptest::prelude::*;

    const CODECS: [Codec; 5] = [
        Codec::None,
        Codec::Gzip,
        Codec::Snappy,
        Codec::Lz4,
        Codec::Zstd,
    ];

    #[derive(Debug, Clone)]
    struct Sample {
        timestamp_ms: i64,
        key: Option<Vec<u8>>,
        value: Vec<u8>,
    }

    fn build(codec: Codec, samples: &[Sample]) -> Bytes {
        let mut builder = BatchBuilder::new(codec, 0);
        for s in samples {
            // Values split in two parts, as the producer writes stamp and payload.
            let (a, b) = s.value.split_at(s.value.len() / 2);
            builder
                .push(s.timestamp_ms, s.key.as_deref(), &[a, b])
                .unwrap();
        }
        builder.finish().unwrap()
    }

    /// (offset, key, value) of each record read back.
    type Scanned = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

    fn scan(records: &Bytes) -> Vec<Scanned> {
        let mut rest = records.clone();
        let mut seen = Vec::new();
        while let Some(batch) = next_batch(&mut rest).unwrap() {
            batch
                .for_each_record(|r| {
                    seen.push((
                        r.offset,
                        r.key.map(<[u8]>::to_vec),
                        r.value.map(<[u8]>::to_vec),
                    ))
                })
                .unwrap();
        }
        seen
    }

    fn sample() -> impl Strategy<Value = Sample> {
        (
            1_600_000_000_000i64..1_900_000_000_000,
            proptest::option::of(proptest::collection::vec(any::<u8>(), 0..40)),
            proptest::collection::vec(any::<u8>(), 0..3000),
        )
            .prop_map(|(timestamp_ms, key, value)| Sample {
                timestamp_ms,
                key,
                value,
            })
    }

    proptest! {
        /// kafka-protocol's decoder (what real clients do: CRC, varints, codecs) reads back
        /// exactly what the direct builder wrote, and so does our own reader.
        #[test]
        fn built_batches_decode_back(
            samples in proptest::collection::vec(sample(), 1..40),
            codec in proptest::sample::select(CODECS.to_vec()),
        ) {
            let batch = build(codec, &samples);
            let decoded = decode_batches(&batch, 16 << 20).unwrap();
            prop_assert_eq!(decoded.len(), samples.len());
            for (i, (got, sent)) in decoded.iter().zip(&samples).enumerate() {
                prop_assert_eq!(got.offset, i as i64);
                prop_assert_eq!(got.timestamp_ms, sent.timestamp_ms);
                prop_assert_eq!(got.key.as_deref(), sent.key.as_deref());
                prop_assert_eq!(got.value.as_deref(), Some(&sent.value[..]));
                prop_assert!(got.headers.is_empty());
            }
            let scanned = scan(&batch);
            prop_assert_eq!(scanned.len(), samples.len());
            for (i, ((offset, key, value), sent)) in scanned.into_iter().zip(&samples).enumerate() {
                prop_assert_eq!(offset, i as i64);
                prop_assert_eq!(key, sent.key.clone());
                prop_assert_eq!(value, Some(sent.value.clone()));
            }
        }

        /// The reader takes what kafka-protocol's encoder writes (headers, null values).
        #[test]
        fn the_reader_reads_kafka_protocol_batches(
            values in proptest::collection::vec(proptest::option::of(
                proptest::collection::vec(any::<u8>(), 0..500)), 1..30),
            codec in proptest::sample::select(CODECS.to_vec()),
        ) {
            let mut builder = RecordBatchBuilder::new(match codec {
                Codec::None => net::client::batch::Compression::None,
                Codec::Gzip => net::client::batch::Compression::Gzip,
                Codec::Snappy => net::client::batch::Compression::Snappy,
                Codec::Lz4 => net::client::batch::Compression::Lz4,
                Codec::Zstd => net::client::batch::Compression::Zstd,
            });
            for value in &values {
                builder.push(NewRecord {
                    key: Some(Bytes::from_static(b"k")),
                    value: value.clone().map(Bytes::from),
                    headers: vec![("h".to_owned(), Some(Bytes::from_static(b"v")))],
                    timestamp_ms: 1,
                });
            }
            let batch = builder.build().unwrap();
            let scanned = scan(&batch);
            prop_assert_eq!(scanned.len(), values.len());
            for ((_, key, value), sent) in scanned.into_iter().zip(&values) {
                prop_assert_eq!(key, Some(b"k".to_vec()));
                prop_assert_eq!(value, sent.clone());
            }
        }

        /// Bytes off a socket never panic the reader, whatever they are.
        #[test]
        fn garbage_is_an_error_not_a_panic(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
            flip in any::<usize>(),
        ) {
            let mut rest = Bytes::from(bytes);
            while let Ok(Some(batch)) = next_batch(&mut rest) {
                let _ = batch.for_each_record(|_| {});
            }
            // A real batch with one byte flipped: the CRC or the header check catches it.
            let mut batch = BytesMut::from(&build(Codec::None, &[Sample {
                timestamp_ms: 5, key: None, value: vec![7; 20],
            }])[..]);
            let at = flip % batch.len();
            batch[at] ^= 0x40;
            let mut rest = batch.freeze();
            let read = next_batch(&mut rest);
            // Flips in the base offset or leader epoch are outside the CRC, as in Kafka.
            if (0..8).contains(&at) || (12..16).contains(&at) {
                prop_assert!(read.unwrap().is_some());
            } else if (8..12).contains(&at) {
                // A longer length waits for bytes that never come; a shorter one fails.
                prop_assert!(!matches!(read, Ok(Some(_))));
            } else {
                prop_assert!(read.is_err(), "flip at {} went unnoticed", at);
            }
        }
    }

    #[test]
    fn varint_lengths_match_what_is_written() {
        for v in [0, 1, -1, 63, 64, -65, 8191, 8192, i32::MAX, i32::MIN] {
            let mut buf = BytesMut::new();
            put_varint(&mut buf, v);
            assert_eq!(buf.len(), varint_len(v), "{v}");
            assert_eq!(read_varint(&mut &buf[..]), Ok(v));
        }
        for v in [0, -1, 1 << 40, i64::MAX, i64::MIN] {
            let mut buf = BytesMut::new();
            put_varlong(&mut buf, v);
            assert_eq!(buf.len(), varlong_len(v), "{v}");
            assert_eq!(read_varlong(&mut &buf[..]), Ok(v));
        }
    }

    #[test]
    fn the_header_says_what_kafka_expects() {
        let samples: Vec<Sample> = (0..3)
            .map(|i| Sample {
                timestamp_ms: 1000 + i,
                key: None,
                value: vec![1; 10],
            })
            .collect();
        let batch = build(Codec::None, &samples);
        let mut header = &batch[..BATCH_HEADER_BYTES];
        assert_eq!(header.get_i64(), 0, "base offset");
        assert_eq!(header.get_i32() as usize, batch.len() - BATCH_LENGTH_END);
        assert_eq!(header.get_i32(), -1, "leader epoch");
        assert_eq!(header.get_i8(), 2, "magic");
        header.get_u32();
        assert_eq!(header.get_i16(), 0, "attributes");
        assert_eq!(header.get_i32(), 2, "last offset delta");
        assert_eq!(header.get_i64(), 1000, "base timestamp");
        assert_eq!(header.get_i64(), 1002, "max timestamp");
        assert_eq!(
            (header.get_i64(), header.get_i16()),
            (-1, -1),
            "no producer id"
        );
        assert_eq!(header.get_i32(), -1, "base sequence");
        assert_eq!(header.get_i32(), 3, "record count");
        let mut rest = batch.clone();
        let fetched = next_batch(&mut rest).unwrap().unwrap();
        assert_eq!((fetched.base_offset, fetched.next_offset), (0, 3));
        assert!(rest.is_empty() && !fetched.is_control);
    }

    #[test]
    fn partial_batches_wait_for_more_bytes() {
        let batch = build(
            Codec::None,
            &[Sample {
                timestamp_ms: 1,
                key: None,
                value: vec![3; 100],
            }],
        );
        for cut in [0, 5, 12, 60, batch.len() - 1] {
            let mut rest = batch.slice(..cut);
            assert!(next_batch(&mut rest).unwrap().is_none(), "cut at {cut}");
            assert_eq!(rest.len(), cut, "nothing consumed");
        }
    }

    #[test]
    fn an_empty_batch_is_refused() {
        assert_eq!(
            BatchBuilder::new(Codec::None, 0).finish(),
            Err(BatchError::Empty)
        );
    }
}
