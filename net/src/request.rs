//! Reading a request frame: the header (v0-v2, following from the api key and version), then
//! the body, after its shape has been checked (the private `shape` module).

use bytes::{Buf, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::api::Request;
use crate::frame::FrameBuilder;
use crate::response::EncodeError;
use crate::{shape, versions};

/// Why a request frame could not be decoded.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("frame of {size_bytes} bytes is too short for a request header")]
    TooShort { size_bytes: usize },
    #[error("unknown api key {api_key} (version {api_version}, correlation id {correlation_id})")]
    UnknownApiKey {
        api_key: i16,
        api_version: i16,
        correlation_id: i32,
    },
    #[error("malformed request header for api key {api_key} version {api_version}: {reason}")]
    MalformedHeader {
        api_key: i16,
        api_version: i16,
        reason: String,
    },
    /// An API we know at a version we do not decode. For ApiVersions, answer error 35
    /// (UNSUPPORTED_VERSION) in a v0 body, so the client retries at a version we speak.
    #[error("unsupported version {} of {:?}", header.request_api_version, api_key)]
    UnsupportedVersion {
        api_key: ApiKey,
        header: RequestHeader,
    },
    #[error("malformed {:?} v{} body: {reason}", api_key, header.request_api_version)]
    MalformedBody {
        api_key: ApiKey,
        header: RequestHeader,
        reason: String,
    },
}

impl DecodeError {
    /// The request's header, when it could be read.
    pub fn header(&self) -> Option<&RequestHeader> {
        match self {
            Self::UnsupportedVersion { header, .. } | Self::MalformedBody { header, .. } => {
                Some(header)
            }
            _ => None,
        }
    }

    /// Whether the right answer is an ApiVersions error response rather than closing the
    /// connection.
    pub fn is_unsupported_api_versions(&self) -> bool {
        matches!(
            self,
            Self::UnsupportedVersion {
                api_key: ApiKey::ApiVersions,
                ..
            }
        )
    }
}

/// The first fields of every request header version.
const HEADER_FIXED_BYTES: usize = 8;

/// Decodes a request frame (the payload after the size prefix).
///
/// The body borrows from `frame` where it can: a Produce request's record sets are split out of
/// it without copying.
pub fn decode_request(mut frame: BytesMut) -> Result<(RequestHeader, Request), DecodeError> {
    let Some(fixed) = frame.first_chunk::<HEADER_FIXED_BYTES>() else {
        return Err(DecodeError::TooShort {
            size_bytes: frame.len(),
        });
    };
    let raw_key = i16::from_be_bytes([fixed[0], fixed[1]]);
    let api_version = i16::from_be_bytes([fixed[2], fixed[3]]);
    let correlation_id = i32::from_be_bytes([fixed[4], fixed[5], fixed[6], fixed[7]]);
    let Ok(api_key) = ApiKey::try_from(raw_key) else {
        return Err(DecodeError::UnknownApiKey {
            api_key: raw_key,
            api_version,
            correlation_id,
        });
    };
    let mut header_version = api_key.request_header_version(api_version);
    if api_key == ApiKey::ApiVersions && !versions::accepts(api_key, api_version) {
        // A client probing a version we never defined cannot know its header: flexible
        // versions use header v2, older ones v1. Take whichever parses, to answer error 35.
        let mut probe = frame.clone();
        if RequestHeader::decode(&mut probe, header_version).is_err() {
            header_version = 1;
        }
    }
    let header = RequestHeader::decode(&mut frame, header_version).map_err(|e| {
        DecodeError::MalformedHeader {
            api_key: raw_key,
            api_version,
            reason: e.to_string(),
        }
    })?;
    if !versions::accepts(api_key, api_version) {
        return Err(DecodeError::UnsupportedVersion { api_key, header });
    }
    if let Some(layout) = shape::layout(api_key)
        && let Err(e) = layout.check(&frame, api_version)
    {
        return Err(DecodeError::MalformedBody {
            api_key,
            header,
            reason: e.to_string(),
        });
    }
    match Request::decode_body(api_key, &mut frame, api_version) {
        Some(Ok(request)) => Ok((header, request)),
        Some(Err(reason)) => Err(DecodeError::MalformedBody {
            api_key,
            header,
            reason,
        }),
        // `versions::accepts` only admits APIs that have a `Request` variant (a test checks it).
        None => Err(DecodeError::UnsupportedVersion { api_key, header }),
    }
}

/// Encodes a request header and body into a frame's chunks: what a client sends.
pub fn encode_request(header: &RequestHeader, body: &Request) -> Result<Vec<Bytes>, EncodeError> {
    let api_key = body.api_key();
    let version = header.request_api_version;
    let body_error = |reason: String| EncodeError::Body {
        api_key,
        version,
        reason,
    };
    let mut frame = FrameBuilder::with_capacity(128);
    header
        .encode(frame.buf(), api_key.request_header_version(version))
        .map_err(|e| body_error(e.to_string()))?;
    body.encode_body(&mut frame, version).map_err(body_error)?;
    Ok(frame.finish()?)
}

/// The correlation id of a request frame, if it is long enough to have one: enough to answer
/// or log a request whose header did not decode.
pub fn peek_correlation_id(frame: &[u8]) -> Option<i32> {
    let mut fixed = frame.get(4..HEADER_FIXED_BYTES)?;
    Some(fixed.get_i32())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::produce::{ProducePartition, ProduceTopic};
    use kafka_protocol::protocol::StrBytes;

    pub(crate) fn header(api_key: ApiKey, version: i16, correlation_id: i32) -> RequestHeader {
        RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("test")))
    }

    fn payload(chunks: Vec<Bytes>) -> BytesMut {
        BytesMut::from(&chunks.concat()[4..])
    }

    #[test]
    fn every_accepted_api_has_a_request_variant() {
        for support in versions::SUPPORTED_APIS {
            let mut empty = BytesMut::new();
            assert!(
                Request::decode_body(support.api_key, &mut empty, support.min).is_some(),
                "{:?}",
                support.api_key
            );
            assert!(
                support.api_key == ApiKey::Produce || shape::layout(support.api_key).is_some(),
                "{:?} has no shape layout",
                support.api_key
            );
        }
    }

    #[test]
    fn round_trips_a_produce_request_with_header_v2() {
        let request = Request::Produce(crate::produce::ProduceRequest {
            transactional_id: None,
            acks: -1,
            timeout_ms: 30_000,
            topics: vec![ProduceTopic {
                name: StrBytes::from_static_str("t"),
                partitions: vec![ProducePartition {
                    index: 0,
                    records: Some(BytesMut::from(&b"batch"[..])),
                }],
            }],
        });
        let header = header(ApiKey::Produce, 9, 42);
        let frame = payload(encode_request(&header, &request).unwrap());
        let (decoded_header, decoded) = decode_request(frame).unwrap();
        assert_eq!(decoded_header, header);
        assert_eq!(decoded, request);
    }

    #[test]
    fn unknown_api_key_carries_the_correlation_id() {
        let frame = BytesMut::from(&[0x03u8, 0xe7, 0, 1, 0, 0, 0, 9, 0xff, 0xff][..]);
        match decode_request(frame) {
            Err(DecodeError::UnknownApiKey {
                api_key: 999,
                api_version: 1,
                correlation_id: 9,
            }) => {}
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn unsupported_api_versions_version_is_flagged_with_its_header() {
        let request = Request::ApiVersions(Default::default());
        let header = header(ApiKey::ApiVersions, 4, 7);
        let frame = payload(encode_request(&header, &request).unwrap());
        let mut future = frame.clone();
        // Pretend the client speaks ApiVersions v9.
        future[3] = 9;
        let error = decode_request(future).unwrap_err();
        assert!(error.is_unsupported_api_versions());
        assert_eq!(error.header().unwrap().correlation_id, 7);
    }

    #[test]
    fn unsupported_api_versions_version_with_the_old_header_is_flagged_too() {
        // api key 18, version 999, correlation id 5, client id "c" (header v1, no tag buffer).
        let frame = BytesMut::from(&[0u8, 18, 0x03, 0xe7, 0, 0, 0, 5, 0, 1, b'c'][..]);
        let error = decode_request(frame).unwrap_err();
        assert!(error.is_unsupported_api_versions());
        assert_eq!(error.header().unwrap().correlation_id, 5);
    }

    #[test]
    fn unsupported_produce_versions_are_refused() {
        let mut frame = BytesMut::from(&[0u8, 0, 0, 2, 0, 0, 0, 1, 0xff, 0xff][..]);
        frame.extend_from_slice(&[0; 10]);
        assert!(matches!(
            decode_request(frame),
            Err(DecodeError::UnsupportedVersion {
                api_key: ApiKey::Produce,
                ..
            })
        ));
    }

    #[test]
    fn short_frames_are_refused() {
        assert!(matches!(
            decode_request(BytesMut::from(&[0u8, 3][..])),
            Err(DecodeError::TooShort { size_bytes: 2 })
        ));
        assert_eq!(peek_correlation_id(&[0, 3, 0, 1, 0, 0, 1, 0]), Some(256));
        assert_eq!(peek_correlation_id(&[0, 3]), None);
    }

    #[test]
    fn a_metadata_request_claiming_millions_of_topics_is_refused_before_decoding() {
        // Metadata v0 header, client id null, then 0x033c0c00 topics in five bytes.
        let frame = BytesMut::from(
            &[
                0u8, 3, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0x03, 0x3c, 0x0c, 0x00, 0xb6,
            ][..],
        );
        assert!(matches!(
            decode_request(frame),
            Err(DecodeError::MalformedBody {
                api_key: ApiKey::Metadata,
                ..
            })
        ));
    }
}
