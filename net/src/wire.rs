//! Kafka's primitive wire types, read from untrusted bytes without panicking and without
//! allocating more than the input holds, and written into `BytesMut`.
//!
//! Shared by the hand-written hot-path codecs (produce, fetch) and the request shape check.

use bytes::{Buf, BufMut, Bytes, BytesMut};

/// What went wrong reading a primitive off the wire.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("truncated: needed {needed_bytes} more bytes, {remaining_bytes} left")]
    Truncated {
        needed_bytes: usize,
        remaining_bytes: usize,
    },
    #[error("invalid length {length}")]
    InvalidLength { length: i64 },
    #[error("varint longer than its type allows (5 bytes, 10 for a varlong)")]
    VarintTooLong,
    #[error("string is not UTF-8")]
    NotUtf8,
    #[error("null where a value is required")]
    UnexpectedNull,
    #[error("tagged field {tag}: its content does not match its size of {size_bytes} bytes")]
    TaggedFieldSize { tag: u32, size_bytes: usize },
}

fn need<B: Buf>(buf: &B, needed_bytes: usize) -> Result<(), WireError> {
    if buf.remaining() < needed_bytes {
        return Err(WireError::Truncated {
            needed_bytes,
            remaining_bytes: buf.remaining(),
        });
    }
    Ok(())
}

pub fn read_i16<B: Buf>(buf: &mut B) -> Result<i16, WireError> {
    need(buf, 2)?;
    Ok(buf.get_i16())
}

pub fn read_i32<B: Buf>(buf: &mut B) -> Result<i32, WireError> {
    need(buf, 4)?;
    Ok(buf.get_i32())
}

pub fn skip<B: Buf>(buf: &mut B, len_bytes: usize) -> Result<(), WireError> {
    need(buf, len_bytes)?;
    buf.advance(len_bytes);
    Ok(())
}

pub fn read_unsigned_varint<B: Buf>(buf: &mut B) -> Result<u32, WireError> {
    let mut value: u32 = 0;
    for i in 0..5 {
        need(buf, 1)?;
        let byte = buf.get_u8();
        value |= u32::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(WireError::VarintTooLong)
}

/// A signed varint (zigzag), as records in a v2 batch carry their lengths and counts.
pub fn read_varint<B: Buf>(buf: &mut B) -> Result<i32, WireError> {
    let zigzag = read_unsigned_varint(buf)?;
    Ok((zigzag >> 1) as i32 ^ -((zigzag & 1) as i32))
}

/// A signed varlong (zigzag), as a record carries its timestamp delta: at most ten bytes.
pub fn read_varlong<B: Buf>(buf: &mut B) -> Result<i64, WireError> {
    let mut zigzag: u64 = 0;
    for i in 0..10 {
        need(buf, 1)?;
        let byte = buf.get_u8();
        zigzag |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((zigzag >> 1) as i64 ^ -((zigzag & 1) as i64));
        }
    }
    Err(WireError::VarintTooLong)
}

/// How a variable-length field (string, bytes, array) announces its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LengthPrefix {
    /// int16, -1 for null (non-flexible strings).
    Int16,
    /// int32, -1 for null (non-flexible bytes, records and arrays).
    Int32,
    /// unsigned varint of length + 1, 0 for null (flexible versions).
    Compact,
}

impl LengthPrefix {
    /// The prefix of a string field.
    pub fn string(flexible: bool) -> Self {
        if flexible { Self::Compact } else { Self::Int16 }
    }

    /// The prefix of a bytes, records or array field.
    pub fn sequence(flexible: bool) -> Self {
        if flexible { Self::Compact } else { Self::Int32 }
    }
}

/// Reads a length prefix: `None` for null. The length is checked against the bytes left, so
/// callers may allocate or loop by it: every element of anything Kafka encodes takes at least one
/// byte.
pub fn read_length<B: Buf>(buf: &mut B, prefix: LengthPrefix) -> Result<Option<usize>, WireError> {
    let length: i64 = match prefix {
        LengthPrefix::Int16 => read_i16(buf)?.into(),
        LengthPrefix::Int32 => read_i32(buf)?.into(),
        LengthPrefix::Compact => i64::from(read_unsigned_varint(buf)?) - 1,
    };
    if length == -1 {
        return Ok(None);
    }
    let Ok(length_usize) = usize::try_from(length) else {
        return Err(WireError::InvalidLength { length });
    };
    need(buf, length_usize)?;
    Ok(Some(length_usize))
}

/// Reads a non-null string without copying when `buf` is a `BytesMut` or `Bytes`.
pub fn read_string<B: Buf>(
    buf: &mut B,
    flexible: bool,
) -> Result<kafka_protocol::protocol::StrBytes, WireError> {
    read_nullable_string(buf, flexible)?.ok_or(WireError::UnexpectedNull)
}

pub fn read_nullable_string<B: Buf>(
    buf: &mut B,
    flexible: bool,
) -> Result<Option<kafka_protocol::protocol::StrBytes>, WireError> {
    let Some(len) = read_length(buf, LengthPrefix::string(flexible))? else {
        return Ok(None);
    };
    let bytes: Bytes = buf.copy_to_bytes(len);
    kafka_protocol::protocol::StrBytes::from_utf8(bytes)
        .map(Some)
        .map_err(|_| WireError::NotUtf8)
}

/// Skips a flexible version's tagged-field section: every tagged field carries its own size, so
/// fields we do not know are stepped over.
pub fn skip_tagged_fields<B: Buf>(buf: &mut B) -> Result<(), WireError> {
    let count = read_unsigned_varint(buf)?;
    for _ in 0..count {
        let _tag = read_unsigned_varint(buf)?;
        let size = read_unsigned_varint(buf)?;
        skip(buf, size as usize)?;
    }
    Ok(())
}

/// Splits `len` bytes off the front of a frame buffer without copying.
pub fn split_bytes(buf: &mut BytesMut, len: usize) -> Result<BytesMut, WireError> {
    need(buf, len)?;
    Ok(buf.split_to(len))
}

pub fn put_unsigned_varint(buf: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        // Truncation is the point: the low seven bits, with the continuation bit set.
        buf.put_u8((value as u8 & 0x7f) | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

/// Writes the length prefix of a non-null string, bytes, records or array field.
pub fn put_length(buf: &mut BytesMut, prefix: LengthPrefix, len: usize) -> Result<(), WireError> {
    let too_long = || WireError::InvalidLength {
        length: i64::try_from(len).unwrap_or(i64::MAX),
    };
    match prefix {
        LengthPrefix::Int16 => buf.put_i16(i16::try_from(len).map_err(|_| too_long())?),
        LengthPrefix::Int32 => buf.put_i32(i32::try_from(len).map_err(|_| too_long())?),
        LengthPrefix::Compact => {
            let plus_one = u32::try_from(len)
                .ok()
                .and_then(|l| l.checked_add(1))
                .ok_or_else(too_long)?;
            put_unsigned_varint(buf, plus_one);
        }
    }
    Ok(())
}

pub fn put_string(buf: &mut BytesMut, flexible: bool, value: &str) -> Result<(), WireError> {
    put_length(buf, LengthPrefix::string(flexible), value.len())?;
    buf.put_slice(value.as_bytes());
    Ok(())
}

pub fn put_nullable_string(
    buf: &mut BytesMut,
    flexible: bool,
    value: Option<&str>,
) -> Result<(), WireError> {
    match value {
        Some(value) => put_string(buf, flexible, value),
        None => {
            put_null(buf, LengthPrefix::string(flexible));
            Ok(())
        }
    }
}

pub fn put_null(buf: &mut BytesMut, prefix: LengthPrefix) {
    match prefix {
        LengthPrefix::Int16 => buf.put_i16(-1),
        LengthPrefix::Int32 => buf.put_i32(-1),
        LengthPrefix::Compact => buf.put_u8(0),
    }
}

/// An empty tagged-field section: we never send tagged fields (librdkafka before 2.2 misreads
/// them), so every flexible struct we write ends with this.
pub fn put_no_tagged_fields(buf: &mut BytesMut) {
    buf.put_u8(0);
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn unsigned_varint_round_trips(value: u32) {
            let mut buf = BytesMut::new();
            put_unsigned_varint(&mut buf, value);
            let mut read = buf.freeze();
            prop_assert_eq!(read_unsigned_varint(&mut read).unwrap(), value);
            prop_assert_eq!(read.remaining(), 0);
        }

        #[test]
        fn signed_varints_read_as_kafka_writes_them(value: i32, long: i64) {
            let mut buf = BytesMut::new();
            put_unsigned_varint(&mut buf, ((value << 1) ^ (value >> 31)) as u32);
            let zigzag = ((long << 1) ^ (long >> 63)) as u64;
            let mut rest = zigzag;
            while rest >= 0x80 {
                buf.put_u8(rest as u8 | 0x80);
                rest >>= 7;
            }
            buf.put_u8(rest as u8);
            let mut read = buf.freeze();
            prop_assert_eq!(read_varint(&mut read).unwrap(), value);
            prop_assert_eq!(read_varlong(&mut read).unwrap(), long);
            prop_assert_eq!(read.remaining(), 0);
        }

        #[test]
        fn length_prefixes_round_trip(len in 0usize..300, flexible: bool) {
            for prefix in [LengthPrefix::string(flexible), LengthPrefix::sequence(flexible)] {
                let mut buf = BytesMut::new();
                put_length(&mut buf, prefix, len).unwrap();
                buf.put_bytes(7, len);
                prop_assert_eq!(read_length(&mut buf, prefix).unwrap(), Some(len));
                prop_assert_eq!(buf.len(), len);
            }
        }
    }

    #[test]
    fn a_length_longer_than_the_input_is_refused_before_use() {
        let mut buf = Bytes::from_static(&[0x7f, 0xff, 0xff, 0xff, 1, 2]);
        assert_eq!(
            read_length(&mut buf, LengthPrefix::Int32),
            Err(WireError::Truncated {
                needed_bytes: i32::MAX as usize,
                remaining_bytes: 2
            })
        );
    }

    #[test]
    fn negative_lengths_other_than_null_are_invalid() {
        let mut buf = Bytes::from_static(&[0xff, 0xfe]);
        assert_eq!(
            read_length(&mut buf, LengthPrefix::Int16),
            Err(WireError::InvalidLength { length: -2 })
        );
        let mut null = Bytes::from_static(&[0]);
        assert_eq!(read_length(&mut null, LengthPrefix::Compact), Ok(None));
    }

    #[test]
    fn overlong_varints_are_refused() {
        let mut buf = Bytes::from_static(&[0x80, 0x80, 0x80, 0x80, 0x80, 0x01]);
        assert_eq!(
            read_unsigned_varint(&mut buf),
            Err(WireError::VarintTooLong)
        );
    }

    #[test]
    fn tagged_fields_are_skipped_by_their_size() {
        // Two tagged fields (tag 0, 2 bytes; tag 5, 0 bytes), then a trailing byte.
        let mut buf = Bytes::from_static(&[2, 0, 2, 0xaa, 0xbb, 5, 0, 0x42]);
        skip_tagged_fields(&mut buf).unwrap();
        assert_eq!(buf.as_ref(), &[0x42]);
        let mut truncated = Bytes::from_static(&[1, 0, 9, 1]);
        assert!(skip_tagged_fields(&mut truncated).is_err());
    }
}
