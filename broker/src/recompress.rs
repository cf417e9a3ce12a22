//! A topic's `compression.type`: `producer` (the default) keeps every batch byte for byte as
//! sent; a codec (or `uncompressed`) has the owning shard rewrite each produced batch that uses
//! another one, as Kafka's LogValidator does. A batch is checked (CRC), its records section
//! decompressed once (bounded) and walked (every record whole, offset deltas dense), then
//! compressed with the topic's codec under the same header: producer id, epoch and sequence,
//! timestamps, keys, values and headers are untouched; the length, codec bits and CRC are new.
//! Offsets are assigned afterwards by the log, as for any batch.
//!
//! The codecs are Kafka's: gzip (flate2, level 6 as Java's Deflater), snappy in xerial's
//! framing (what Kafka writes; raw snappy is read too), lz4 frames, zstd level 3.

use std::io::{Read, Write};

use bytes::BytesMut;
use storage::batch::{self, Compression, HEADER_BYTES};

/// A decompressed records section larger than this is refused: compressed input can claim any
/// size, and the broker's memory is bounded.
pub const UNCOMPRESSED_BATCH_MAX_BYTES: usize = 64 << 20;

/// What a topic does with the codec of the batches it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    /// Batches are stored as the producer sent them.
    Producer,
    /// Batches are stored with this codec (`Compression::None`: `uncompressed`).
    Codec(Compression),
}

impl TopicCompression {
    /// The setting's value as Kafka names it; `None` for an unknown one.
    pub fn parse(value: &str) -> Option<TopicCompression> {
        Some(match value {
            "producer" => TopicCompression::Producer,
            "uncompressed" => TopicCompression::Codec(Compression::None),
            "gzip" => TopicCompression::Codec(Compression::Gzip),
            "snappy" => TopicCompression::Codec(Compression::Snappy),
            "lz4" => TopicCompression::Codec(Compression::Lz4),
            "zstd" => TopicCompression::Codec(Compression::Zstd),
            _ => return None,
        })
    }
}

/// Why a produced batch could not be recompressed.
#[derive(Debug, thiserror::Error)]
pub enum RecompressError {
    #[error("invalid batch at byte {position}: {source}")]
    InvalidBatch {
        position: usize,
        source: storage::BatchError,
    },
    #[error("batch at byte {position}: cannot decompress its {codec:?} records: {reason}")]
    Decompress {
        position: usize,
        codec: Compression,
        reason: String,
    },
    #[error(
        "batch at byte {position} holds more than {UNCOMPRESSED_BATCH_MAX_BYTES} bytes uncompressed"
    )]
    TooLarge { position: usize },
    #[error("batch at byte {position}: its records do not hold together: {reason}")]
    BadRecords { position: usize, reason: String },
    #[error("compressing with {codec:?}: {reason}")]
    Compress { codec: Compression, reason: String },
}

/// `records` (one or more v2 batches) with every batch in `codec`. Batches already in it are
/// copied as they are; when none needs rewriting, `records` comes back untouched.
pub fn recompress(
    records: BytesMut,
    codec: Compression,
    max_batch_bytes: usize,
) -> Result<BytesMut, RecompressError> {
    let mut batches = Vec::new();
    let mut position = 0;
    let mut differs = false;
    while position < records.len() {
        let rest = &records[position..];
        let header = batch::validate(rest, max_batch_bytes)
            .map_err(|source| RecompressError::InvalidBatch { position, source })?;
        let size = header.size_bytes();
        differs |= header.compression() != codec;
        batches.push((position, size, header));
        position += size;
    }
    if !differs {
        return Ok(records);
    }
    let mut out = BytesMut::with_capacity(records.len());
    for (position, size, header) in batches {
        let original = &records[position..position + size];
        if header.compression() == codec {
            out.extend_from_slice(original);
            continue;
        }
        let raw = decompress(header.compression(), &original[HEADER_BYTES..])
            .map_err(|e| e.at(position))?;
        check_records(&raw, header.record_count)
            .map_err(|reason| RecompressError::BadRecords { position, reason })?;
        let packed = compress(codec, &raw).map_err(|reason| RecompressError::Compress {
            codec,
            reason: reason.to_string(),
        })?;
        out.extend_from_slice(&batch::with_records(original, codec, &packed));
    }
    Ok(out)
}

/// A decompression failure before its position is known.
enum Failure {
    Codec(Compression, String),
    TooLarge,
}

impl Failure {
    fn at(self, position: usize) -> RecompressError {
        match self {
            Failure::Codec(codec, reason) => RecompressError::Decompress {
                position,
                codec,
                reason,
            },
            Failure::TooLarge => RecompressError::TooLarge { position },
        }
    }
}

/// Reads `reader` whole, refusing more than the bound.
fn read_bounded(reader: impl Read, codec: Compression) -> Result<Vec<u8>, Failure> {
    let mut out = Vec::new();
    reader
        .take(UNCOMPRESSED_BATCH_MAX_BYTES as u64 + 1)
        .read_to_end(&mut out)
        .map_err(|e| Failure::Codec(codec, e.to_string()))?;
    if out.len() > UNCOMPRESSED_BATCH_MAX_BYTES {
        return Err(Failure::TooLarge);
    }
    Ok(out)
}

fn decompress(codec: Compression, data: &[u8]) -> Result<Vec<u8>, Failure> {
    let failed = |e: std::io::Error| Failure::Codec(codec, e.to_string());
    match codec {
        Compression::None => Ok(data.to_vec()),
        Compression::Gzip => read_bounded(flate2::read::GzDecoder::new(data), codec),
        Compression::Snappy => snappy::decompress(data),
        Compression::Lz4 => read_bounded(lz4::Decoder::new(data).map_err(failed)?, codec),
        Compression::Zstd => read_bounded(
            zstd::stream::read::Decoder::new(data).map_err(failed)?,
            codec,
        ),
        Compression::Unknown(bits) => Err(Failure::Codec(codec, format!("unknown codec {bits}"))),
    }
}

fn compress(codec: Compression, raw: &[u8]) -> std::io::Result<Vec<u8>> {
    match codec {
        Compression::None | Compression::Unknown(_) => Ok(raw.to_vec()),
        Compression::Gzip => {
            let mut encoder = flate2::write::GzEncoder::new(
                Vec::with_capacity(raw.len() / 2),
                flate2::Compression::new(6),
            );
            encoder.write_all(raw)?;
            encoder.finish()
        }
        Compression::Snappy => snappy::compress(raw),
        Compression::Lz4 => {
            let mut encoder = lz4::EncoderBuilder::new()
                .block_size(lz4::BlockSize::Max64KB)
                .build(Vec::with_capacity(raw.len() / 2))?;
            encoder.write_all(raw)?;
            let (out, result) = encoder.finish();
            result.map(|()| out)
        }
        Compression::Zstd => zstd::bulk::compress(raw, 3),
    }
}

/// Snappy as Kafka writes it: xerial's framing (a magic header, then blocks of at most 32 KiB,
/// each with its compressed length), or one raw block (what the Java reader also accepts).
mod snappy {
    use super::{Failure, UNCOMPRESSED_BATCH_MAX_BYTES};
    use storage::batch::Compression;

    const MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
    /// The magic, then the version and the minimum compatible version (both 1).
    const HEADER_BYTES: usize = 16;
    const BLOCK_BYTES: usize = 32 << 10;

    fn failure(e: impl std::fmt::Display) -> Failure {
        Failure::Codec(Compression::Snappy, e.to_string())
    }

    /// One raw block, its length checked against what is left of the bound first.
    fn block(data: &[u8], out: &mut Vec<u8>) -> Result<(), Failure> {
        let len = snap::raw::decompress_len(data).map_err(failure)?;
        if out.len() + len > UNCOMPRESSED_BATCH_MAX_BYTES {
            return Err(Failure::TooLarge);
        }
        let start = out.len();
        out.resize(start + len, 0);
        let written = snap::raw::Decoder::new()
            .decompress(data, &mut out[start..])
            .map_err(failure)?;
        out.truncate(start + written);
        Ok(())
    }

    pub(super) fn decompress(data: &[u8]) -> Result<Vec<u8>, Failure> {
        let mut out = Vec::new();
        if !data.starts_with(MAGIC) {
            block(data, &mut out)?;
            return Ok(out);
        }
        let mut rest = data
            .get(HEADER_BYTES..)
            .ok_or_else(|| failure("short xerial header"))?;
        while !rest.is_empty() {
            let (len, tail) = rest
                .split_first_chunk::<4>()
                .ok_or_else(|| failure("truncated xerial block length"))?;
            let len = u32::from_be_bytes(*len) as usize;
            let chunk = tail
                .get(..len)
                .ok_or_else(|| failure("truncated xerial block"))?;
            block(chunk, &mut out)?;
            rest = &tail[len..];
        }
        Ok(out)
    }

    pub(super) fn compress(raw: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(HEADER_BYTES + raw.len() / 2);
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&1u32.to_be_bytes());
        let mut encoder = snap::raw::Encoder::new();
        for chunk in raw.chunks(BLOCK_BYTES) {
            let packed = encoder.compress_vec(chunk).map_err(std::io::Error::other)?;
            out.extend_from_slice(&(packed.len() as u32).to_be_bytes());
            out.extend_from_slice(&packed);
        }
        Ok(out)
    }
}

/// Checks that `raw` holds exactly `count` whole records with offset deltas 0, 1, 2, ...: the
/// walk Kafka's validator makes before it rewrites a batch.
fn check_records(raw: &[u8], count: i32) -> Result<(), String> {
    let mut rest = raw;
    for expected in 0..i64::from(count) {
        let len = varint(&mut rest).ok_or("truncated record length")?;
        let len = usize::try_from(len).map_err(|_| format!("negative record length {len}"))?;
        let mut record = rest.get(..len).ok_or("record longer than the batch")?;
        rest = &rest[len..];
        record = record.get(1..).ok_or("empty record")?; // attributes
        varint(&mut record).ok_or("truncated timestamp delta")?;
        let delta = varint(&mut record).ok_or("truncated offset delta")?;
        if delta != expected {
            return Err(format!("offset delta {delta} where {expected} belongs"));
        }
    }
    if rest.is_empty() {
        Ok(())
    } else {
        Err(format!("{} bytes after the last record", rest.len()))
    }
}

/// A zig-zag varint (at most 10 bytes), advancing `buf`.
fn varint(buf: &mut &[u8]) -> Option<i64> {
    let mut raw: u64 = 0;
    for i in 0..10 {
        let (&byte, rest) = buf.split_first()?;
        *buf = rest;
        raw |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use storage::BatchHeader;
    use storage::batch::testing;

    const MAX: usize = 1 << 20;

    fn records_of(batch: &[u8]) -> Vec<u8> {
        let header = BatchHeader::parse(batch).unwrap();
        decompress(
            header.compression(),
            &batch[HEADER_BYTES..header.size_bytes()],
        )
        .ok()
        .unwrap()
    }

    const CODECS: [Compression; 5] = [
        Compression::None,
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ];

    #[test]
    fn every_codec_round_trips_a_batch_keeping_its_header_and_records() {
        let original = testing::with_producer(testing::batch(50, 300, 1_700_000_000_000), 9, 2, 40);
        let plain_records = original[HEADER_BYTES..].to_vec();
        for from in CODECS {
            let sent =
                batch::with_records(&original, from, &compress(from, &plain_records).unwrap());
            for to in CODECS {
                let out = recompress(BytesMut::from(&sent[..]), to, MAX).unwrap();
                let (was, now) = (
                    BatchHeader::parse(&sent).unwrap(),
                    BatchHeader::parse(&out).unwrap(),
                );
                assert_eq!(now.compression(), to, "{from:?} -> {to:?}");
                assert_eq!(out.len(), now.size_bytes(), "one batch");
                batch::validate(&out, MAX).unwrap();
                assert_eq!(records_of(&out), plain_records, "{from:?} -> {to:?}");
                assert_eq!(
                    (
                        now.producer_id,
                        now.producer_epoch,
                        now.base_sequence,
                        now.record_count
                    ),
                    (
                        was.producer_id,
                        was.producer_epoch,
                        was.base_sequence,
                        was.record_count
                    )
                );
                assert_eq!(
                    (now.base_timestamp, now.max_timestamp, now.last_offset_delta),
                    (was.base_timestamp, was.max_timestamp, was.last_offset_delta)
                );
                if from == to {
                    assert_eq!(&out[..], &sent[..], "same codec: untouched");
                }
            }
        }
    }

    #[test]
    fn only_batches_in_another_codec_are_rewritten() {
        let a = testing::batch(3, 10, 0);
        let b = testing::batch(4, 10, 5);
        let zb = batch::with_records(
            &b,
            Compression::Zstd,
            &compress(Compression::Zstd, &b[HEADER_BYTES..]).unwrap(),
        );
        let mut set = BytesMut::from(&a[..]);
        set.extend_from_slice(&zb);
        let out = recompress(set, Compression::Zstd, MAX).unwrap();
        let first = BatchHeader::parse(&out).unwrap();
        assert_eq!(first.compression(), Compression::Zstd);
        assert_eq!(
            &out[first.size_bytes()..],
            &zb[..],
            "the zstd batch is copied as it was"
        );
    }

    #[test]
    fn bad_input_is_refused_not_laundered() {
        // A flipped byte fails the CRC before anything is decompressed.
        let mut bad = testing::batch(3, 10, 0);
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert!(matches!(
            recompress(BytesMut::from(&bad[..]), Compression::Zstd, MAX),
            Err(RecompressError::InvalidBatch { .. })
        ));
        // A valid CRC over records that do not add up to the count.
        let good = testing::batch(3, 10, 0);
        let short = batch::with_records(
            &good,
            Compression::None,
            &good[HEADER_BYTES..good.len() - 5],
        );
        assert!(matches!(
            recompress(BytesMut::from(&short[..]), Compression::Gzip, MAX),
            Err(RecompressError::BadRecords { .. })
        ));
        // Garbage that claims to be zstd.
        let junk = batch::with_records(&good, Compression::Zstd, b"not zstd at all");
        assert!(matches!(
            recompress(BytesMut::from(&junk[..]), Compression::Gzip, MAX),
            Err(RecompressError::Decompress { .. })
        ));
    }

    #[test]
    fn a_decompression_bomb_is_refused_at_the_bound() {
        let zeros = vec![0u8; UNCOMPRESSED_BATCH_MAX_BYTES + 1];
        let packed = zstd::bulk::compress(&zeros, 3).unwrap();
        assert!(packed.len() < 1 << 16);
        let good = testing::batch(1, 10, 0);
        let bomb = batch::with_records(&good, Compression::Zstd, &packed);
        assert!(matches!(
            recompress(BytesMut::from(&bomb[..]), Compression::Gzip, MAX),
            Err(RecompressError::TooLarge { .. })
        ));
    }

    #[test]
    fn topic_values_are_kafkas() {
        assert_eq!(
            TopicCompression::parse("producer"),
            Some(TopicCompression::Producer)
        );
        assert_eq!(
            TopicCompression::parse("uncompressed"),
            Some(TopicCompression::Codec(Compression::None))
        );
        assert_eq!(TopicCompression::parse("brotli"), None);
    }
}
