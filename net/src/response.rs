//! Writing a response frame: size prefix, response header, body.
//!
//! The response header is v0 (correlation id only) for ApiVersions at every version, v1 (with an
//! empty tag section) for the flexible versions of every other API, v0 otherwise. No tagged
//! field is written unless it holds a non-default value: `kafka-protocol` omits default-valued
//! tagged fields, and our hand-written Fetch encoder writes none.

use bytes::{BufMut, Bytes};
use kafka_protocol::messages::{ApiKey, RequestHeader};

use crate::api::Response;
use crate::budget::HeldMemory;
use crate::frame::{FrameBuilder, FrameError};
use crate::versions;
use crate::wire;

/// A response ready to write: the size prefix, header and body as chunks.
#[derive(Debug, Clone)]
pub struct ResponseFrame {
    chunks: Vec<Bytes>,
    /// Budgeted memory the chunks hold, given back when the frame is dropped (once written).
    _memory: HeldMemory,
}

impl ResponseFrame {
    pub fn chunks(&self) -> &[Bytes] {
        &self.chunks
    }

    pub fn into_chunks(self) -> Vec<Bytes> {
        self.chunks
    }

    /// Bytes on the wire, size prefix included.
    pub fn len_bytes(&self) -> usize {
        self.chunks.iter().map(Bytes::len).sum()
    }
}

/// Why a request or response could not be encoded.
#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("a {response:?} response to a request with api key {request}")]
    Mismatch { request: i16, response: ApiKey },
    #[error("{api_key:?} v{version} is not a version we speak")]
    UnsupportedVersion { api_key: ApiKey, version: i16 },
    /// `kafka-protocol` refuses, e.g. a non-ignorable field set in a version that lacks it.
    #[error("encoding {api_key:?} v{version}: {reason}")]
    Body {
        api_key: ApiKey,
        version: i16,
        reason: String,
    },
    #[error(transparent)]
    Frame(#[from] FrameError),
}

/// Encodes `response` as the answer to the request with `header`.
///
/// For an ApiVersions request at a version we do not speak, the body is written at v0, as
/// clients expect of an UNSUPPORTED_VERSION answer.
pub fn encode_response(
    header: &RequestHeader,
    response: Response,
) -> Result<ResponseFrame, EncodeError> {
    let api_key = response.api_key();
    if header.request_api_key != api_key as i16 {
        return Err(EncodeError::Mismatch {
            request: header.request_api_key,
            response: api_key,
        });
    }
    let requested = header.request_api_version;
    let version = if versions::accepts(api_key, requested) {
        requested
    } else if api_key == ApiKey::ApiVersions {
        0
    } else {
        return Err(EncodeError::UnsupportedVersion {
            api_key,
            version: requested,
        });
    };
    let mut frame = FrameBuilder::with_capacity(256);
    let buf = frame.buf();
    buf.put_i32(header.correlation_id);
    // ApiVersions answers with header v0 at every version: a client reads it before it knows
    // which versions the broker speaks.
    if api_key != ApiKey::ApiVersions && api_key.response_header_version(version) >= 1 {
        wire::put_no_tagged_fields(buf);
    }
    response
        .encode_body(&mut frame, version)
        .map_err(|reason| EncodeError::Body {
            api_key,
            version,
            reason,
        })?;
    let memory = match &response {
        Response::Fetch(fetch) => fetch.memory.clone(),
        _ => HeldMemory::default(),
    };
    Ok(ResponseFrame {
        chunks: frame.finish()?,
        _memory: memory,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api_versions;
    use kafka_protocol::messages::produce_response::{
        PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::messages::{MetadataResponse, ProduceResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;

    fn header(api_key: ApiKey, version: i16) -> RequestHeader {
        RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(0x0102_0304)
    }

    fn bytes(frame: ResponseFrame) -> Vec<u8> {
        frame.into_chunks().concat()
    }

    #[test]
    fn api_versions_v3_has_header_v0_and_no_tagged_fields() {
        let frame = encode_response(
            &header(ApiKey::ApiVersions, 3),
            api_versions::response().into(),
        )
        .unwrap();
        let bytes = bytes(frame);
        // size, correlation id, then straight into the body's error code: no tag byte.
        assert_eq!(&bytes[4..8], &[1, 2, 3, 4]);
        assert_eq!(&bytes[8..10], &[0, 0]);
        // Body: error, compact array of N+1 entries (each key, min, max, empty tags),
        // throttle, empty top-level tag section (no SupportedFeatures, no FinalizedFeatures).
        let n = versions::SUPPORTED_APIS.len();
        assert_eq!(bytes.len(), 4 + 4 + 2 + 1 + n * 7 + 4 + 1);
        assert_eq!(bytes[10] as usize, n + 1);
        assert_eq!(*bytes.last().unwrap(), 0);
    }

    #[test]
    fn unsupported_api_versions_is_answered_in_a_v0_body() {
        let frame = encode_response(
            &header(ApiKey::ApiVersions, 9),
            api_versions::unsupported_version_response().into(),
        )
        .unwrap();
        let bytes = bytes(frame);
        let n = versions::SUPPORTED_APIS.len();
        // error 35, then an int32 array count and 6 bytes per key, no throttle (v0).
        assert_eq!(&bytes[8..10], &[0, 35]);
        assert_eq!(&bytes[10..14], &(n as i32).to_be_bytes());
        assert_eq!(bytes.len(), 4 + 4 + 2 + 4 + n * 6);
    }

    #[test]
    fn flexible_responses_get_header_v1_and_others_v0() {
        use kafka_protocol::messages::ResponseHeader;
        use kafka_protocol::protocol::Decodable;
        for (version, header_version) in [(8, 0), (9, 1)] {
            let frame = encode_response(
                &header(ApiKey::Metadata, version),
                MetadataResponse::default()
                    .with_controller_id(1.into())
                    .into(),
            )
            .unwrap();
            let mut body = Bytes::from(bytes(frame)).slice(4..);
            let decoded_header = ResponseHeader::decode(&mut body, header_version).unwrap();
            assert_eq!(decoded_header.correlation_id, 0x0102_0304);
            let decoded = MetadataResponse::decode(&mut body, version).unwrap();
            assert_eq!(decoded.controller_id, 1);
            assert!(body.is_empty(), "v{version}: {} bytes left", body.len());
        }
    }

    /// librdkafka before 2.2 misreads tagged fields: a Produce v10 response (the highest it uses)
    /// must carry none when `current_leader` and `node_endpoints` are at their defaults.
    #[test]
    fn produce_v10_response_omits_default_tagged_fields() {
        let response = ProduceResponse::default().with_responses(vec![
            TopicProduceResponse::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_responses(vec![
                    PartitionProduceResponse::default()
                        .with_index(0)
                        .with_base_offset(5),
                ]),
        ]);
        let bytes = bytes(encode_response(&header(ApiKey::Produce, 10), response.into()).unwrap());
        #[rustfmt::skip]
        let expected: Vec<u8> = [
            &[0, 0, 0, 48][..],
            &[1, 2, 3, 4], &[0],         // header v1
            &[2], &[2, b't'], &[2],      // one topic "t", one partition
            &[0, 0, 0, 0], &[0, 0],      // index, error
            &5i64.to_be_bytes(),         // base offset
            &(-1i64).to_be_bytes(),      // log append time
            &(-1i64).to_be_bytes(),      // log start offset
            &[1], &[0],                  // no record errors, null error message
            &[0],                        // partition tags: no current_leader
            &[0],                        // topic tags
            &[0, 0, 0, 0],               // throttle
            &[0],                        // top-level tags: no node_endpoints
        ].concat();
        assert_eq!(bytes, expected);
    }

    #[test]
    fn mismatched_and_unsupported_responses_are_refused() {
        assert!(matches!(
            encode_response(
                &header(ApiKey::Fetch, 12),
                MetadataResponse::default().into()
            ),
            Err(EncodeError::Mismatch { .. })
        ));
        assert!(matches!(
            encode_response(
                &header(ApiKey::Metadata, 99),
                MetadataResponse::default().into()
            ),
            Err(EncodeError::UnsupportedVersion { .. })
        ));
    }
}
