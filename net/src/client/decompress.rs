//! Decompressing a fetched batch's records within a byte limit.
//!
//! Why not `kafka-protocol`'s codecs: they decompress whatever a batch holds into memory, and its
//! snappy decoder first allocates the length the bytes claim (a 79-byte batch can ask for 4 GiB);
//! a failed allocation aborts the process. These read at most `limit_bytes` of output and say so
//! with a typed error when there is more. The codecs themselves are the same crates
//! `kafka-protocol` uses (flate2, snap, lz4, zstd), and the framings are Kafka's: gzip members,
//! snappy in xerial's framing (or raw, as some clients send), the LZ4 frame format, zstd frames.

use std::io::Read;

use bytes::Bytes;
use kafka_protocol::records::Compression;

use super::batch::BatchError;

/// xerial's snappy framing (what the Java client writes): this header, then blocks, each a
/// big-endian u32 length and a raw snappy block.
const XERIAL_HEADER: &[u8; 16] = b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01";

/// The records of a batch compressed with `compression`, decompressed: at most `limit_bytes`
/// (uncompressed records are returned as they are, whatever their size).
pub(super) fn decompress(
    compression: Compression,
    compressed: &Bytes,
    limit_bytes: usize,
) -> Result<Bytes, BatchError> {
    let failed = |source: std::io::Error| BatchError::Decompress {
        compression,
        source,
    };
    let out = match compression {
        Compression::None => return Ok(compressed.clone()),
        // Members one after the other make one stream (as java.util.zip.GZIPInputStream reads).
        Compression::Gzip => read_limited(
            flate2::read::MultiGzDecoder::new(&compressed[..]),
            limit_bytes,
            compression,
        )?,
        Compression::Snappy => snappy(compressed, limit_bytes)?,
        Compression::Lz4 => read_limited(
            lz4::Decoder::new(&compressed[..]).map_err(failed)?,
            limit_bytes,
            compression,
        )?,
        Compression::Zstd => read_limited(
            zstd::stream::read::Decoder::with_buffer(&compressed[..]).map_err(failed)?,
            limit_bytes,
            compression,
        )?,
    };
    Ok(Bytes::from(out))
}

/// Everything `reader` gives, if that is at most `limit_bytes`.
fn read_limited(
    reader: impl Read,
    limit_bytes: usize,
    compression: Compression,
) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    // One byte past the limit tells "exactly the limit" from "more".
    let take = u64::try_from(limit_bytes)
        .unwrap_or(u64::MAX)
        .saturating_add(1);
    reader
        .take(take)
        .read_to_end(&mut out)
        .map_err(|source| BatchError::Decompress {
            compression,
            source,
        })?;
    if out.len() > limit_bytes {
        return Err(BatchError::DecompressedTooLarge { limit_bytes });
    }
    Ok(out)
}

/// Snappy: each raw block states its decompressed length first, so the limit is checked before
/// anything is allocated for it.
fn snappy(compressed: &[u8], limit_bytes: usize) -> Result<Vec<u8>, BatchError> {
    let mut out = Vec::new();
    let Some(mut framed) = compressed.strip_prefix(XERIAL_HEADER) else {
        snappy_block(compressed, limit_bytes, &mut out)?;
        return Ok(out);
    };
    while let Some((length, rest)) = framed.split_first_chunk::<4>() {
        let length = u32::from_be_bytes(*length) as usize;
        let block = rest.get(..length).ok_or_else(|| {
            snappy_error(format!(
                "a block of {length} bytes where {} are left",
                rest.len()
            ))
        })?;
        snappy_block(block, limit_bytes, &mut out)?;
        framed = &rest[length..];
    }
    if !framed.is_empty() {
        return Err(snappy_error(format!(
            "{} bytes after the last block",
            framed.len()
        )));
    }
    Ok(out)
}

/// Appends one raw snappy block to `out`, keeping `out` within `limit_bytes`.
fn snappy_block(block: &[u8], limit_bytes: usize, out: &mut Vec<u8>) -> Result<(), BatchError> {
    let length = snap::raw::decompress_len(block).map_err(|e| snappy_error(e.to_string()))?;
    let start = out.len();
    let end = start
        .checked_add(length)
        .filter(|end| *end <= limit_bytes)
        .ok_or(BatchError::DecompressedTooLarge { limit_bytes })?;
    out.resize(end, 0);
    let written = snap::raw::Decoder::new()
        .decompress(block, &mut out[start..])
        .map_err(|e| snappy_error(e.to_string()))?;
    // snap checks that the block fills exactly the length it states; truncate in case.
    out.truncate(start + written);
    Ok(())
}

fn snappy_error(reason: String) -> BatchError {
    BatchError::Decompress {
        compression: Compression::Snappy,
        source: std::io::Error::new(std::io::ErrorKind::InvalidData, reason),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snappy_block_claiming_more_than_the_limit_is_refused_before_allocating() {
        // A raw block whose header claims 2^32 - 1 bytes: nothing behind it.
        let claim: &'static [u8] = &[0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(matches!(
            decompress(Compression::Snappy, &Bytes::from_static(claim), 1 << 20),
            Err(BatchError::DecompressedTooLarge {
                limit_bytes: 1_048_576
            })
        ));
        let mut framed = XERIAL_HEADER.to_vec();
        framed.extend_from_slice(&(claim.len() as u32).to_be_bytes());
        framed.extend_from_slice(claim);
        assert!(matches!(
            decompress(Compression::Snappy, &Bytes::from(framed), 1 << 20),
            Err(BatchError::DecompressedTooLarge { .. })
        ));
    }

    #[test]
    fn every_codec_stops_at_the_limit() {
        let zeros = vec![0u8; 1 << 20];
        let compressed = [
            (Compression::Gzip, {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
                std::io::Write::write_all(&mut e, &zeros).unwrap();
                e.finish().unwrap()
            }),
            (
                Compression::Snappy,
                snap::raw::Encoder::new().compress_vec(&zeros).unwrap(),
            ),
            (Compression::Lz4, {
                let mut e = lz4::EncoderBuilder::new().build(Vec::new()).unwrap();
                std::io::Write::write_all(&mut e, &zeros).unwrap();
                let (out, result) = e.finish();
                result.unwrap();
                out
            }),
            (
                Compression::Zstd,
                zstd::stream::encode_all(&zeros[..], 3).unwrap(),
            ),
        ];
        for (compression, bytes) in compressed {
            let bytes = Bytes::from(bytes);
            assert!(bytes.len() < zeros.len() / 16, "{compression:?} compresses");
            assert_eq!(
                decompress(compression, &bytes, zeros.len()).unwrap(),
                zeros,
                "{compression:?} at the limit"
            );
            assert!(
                matches!(
                    decompress(compression, &bytes, zeros.len() - 1),
                    Err(BatchError::DecompressedTooLarge { .. })
                ),
                "{compression:?} past the limit"
            );
        }
    }
}
