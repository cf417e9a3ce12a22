//! [`Request`] and [`Response`]: one variant per API we implement, each holding that API's body.
//!
//! Bodies are `kafka-protocol`'s generated types, except the two hot paths: Produce requests
//! ([`ProduceRequest`], records split out of the frame) and Fetch responses ([`FetchResponse`],
//! record batches written as chunks).

use bytes::BytesMut;
use kafka_protocol::messages::{self as kp, ApiKey};
use kafka_protocol::protocol::{Decodable, Encodable};

use crate::fetch::FetchResponse;
use crate::frame::FrameBuilder;
use crate::produce::ProduceRequest;

/// A request body that can be read from a frame.
pub(crate) trait DecodeBody: Sized {
    fn decode_body(body: &mut BytesMut, version: i16) -> Result<Self, String>;
}

/// A message body that can be written into a frame.
pub(crate) trait EncodeBody {
    fn encode_body(&self, frame: &mut FrameBuilder, version: i16) -> Result<(), String>;
}

impl<T: Decodable> DecodeBody for T {
    fn decode_body(body: &mut BytesMut, version: i16) -> Result<Self, String> {
        T::decode(body, version).map_err(|e| e.to_string())
    }
}

impl<T: Encodable> EncodeBody for T {
    fn encode_body(&self, frame: &mut FrameBuilder, version: i16) -> Result<(), String> {
        let size = self.compute_size(version).map_err(|e| e.to_string())?;
        let buf = frame.buf();
        buf.reserve(size);
        self.encode(buf, version).map_err(|e| e.to_string())
    }
}

impl DecodeBody for ProduceRequest {
    fn decode_body(body: &mut BytesMut, version: i16) -> Result<Self, String> {
        ProduceRequest::decode(body, version).map_err(|e| e.to_string())
    }
}

impl EncodeBody for ProduceRequest {
    fn encode_body(&self, frame: &mut FrameBuilder, version: i16) -> Result<(), String> {
        self.encode(frame, version).map_err(|e| e.to_string())
    }
}

impl EncodeBody for FetchResponse {
    fn encode_body(&self, frame: &mut FrameBuilder, version: i16) -> Result<(), String> {
        self.encode(frame, version).map_err(|e| e.to_string())
    }
}

macro_rules! apis {
    ($($api:ident($request:ty, $response:ty)),* $(,)?) => {
        /// A decoded request body, one variant per API.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Request {
            $($api($request),)*
        }

        /// A response body, one variant per API.
        #[derive(Debug, Clone, PartialEq)]
        pub enum Response {
            $($api($response),)*
        }

        impl Request {
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(Self::$api(_) => ApiKey::$api,)*
                }
            }

            /// `None` for an API we do not implement.
            pub(crate) fn decode_body(
                api_key: ApiKey,
                body: &mut BytesMut,
                version: i16,
            ) -> Option<Result<Self, String>> {
                match api_key {
                    $(ApiKey::$api => Some(<$request>::decode_body(body, version).map(Self::$api)),)*
                    _ => None,
                }
            }

            pub(crate) fn encode_body(&self, frame: &mut FrameBuilder, version: i16) -> Result<(), String> {
                match self {
                    $(Self::$api(body) => body.encode_body(frame, version),)*
                }
            }
        }

        impl Response {
            pub fn api_key(&self) -> ApiKey {
                match self {
                    $(Self::$api(_) => ApiKey::$api,)*
                }
            }

            pub(crate) fn encode_body(&self, frame: &mut FrameBuilder, version: i16) -> Result<(), String> {
                match self {
                    $(Self::$api(body) => body.encode_body(frame, version),)*
                }
            }
        }

        $(
            impl From<$request> for Request {
                fn from(body: $request) -> Self {
                    Self::$api(body)
                }
            }

            impl From<$response> for Response {
                fn from(body: $response) -> Self {
                    Self::$api(body)
                }
            }
        )*
    };
}

apis! {
    Produce(ProduceRequest, kp::ProduceResponse),
    Fetch(kp::FetchRequest, FetchResponse),
    ListOffsets(kp::ListOffsetsRequest, kp::ListOffsetsResponse),
    Metadata(kp::MetadataRequest, kp::MetadataResponse),
    OffsetCommit(kp::OffsetCommitRequest, kp::OffsetCommitResponse),
    OffsetFetch(kp::OffsetFetchRequest, kp::OffsetFetchResponse),
    FindCoordinator(kp::FindCoordinatorRequest, kp::FindCoordinatorResponse),
    JoinGroup(kp::JoinGroupRequest, kp::JoinGroupResponse),
    Heartbeat(kp::HeartbeatRequest, kp::HeartbeatResponse),
    LeaveGroup(kp::LeaveGroupRequest, kp::LeaveGroupResponse),
    SyncGroup(kp::SyncGroupRequest, kp::SyncGroupResponse),
    DescribeGroups(kp::DescribeGroupsRequest, kp::DescribeGroupsResponse),
    ListGroups(kp::ListGroupsRequest, kp::ListGroupsResponse),
    ApiVersions(kp::ApiVersionsRequest, kp::ApiVersionsResponse),
    CreateTopics(kp::CreateTopicsRequest, kp::CreateTopicsResponse),
    DeleteTopics(kp::DeleteTopicsRequest, kp::DeleteTopicsResponse),
    DeleteRecords(kp::DeleteRecordsRequest, kp::DeleteRecordsResponse),
    InitProducerId(kp::InitProducerIdRequest, kp::InitProducerIdResponse),
    DescribeConfigs(kp::DescribeConfigsRequest, kp::DescribeConfigsResponse),
    AlterConfigs(kp::AlterConfigsRequest, kp::AlterConfigsResponse),
    CreatePartitions(kp::CreatePartitionsRequest, kp::CreatePartitionsResponse),
    DeleteGroups(kp::DeleteGroupsRequest, kp::DeleteGroupsResponse),
    DescribeAcls(kp::DescribeAclsRequest, kp::DescribeAclsResponse),
    CreateAcls(kp::CreateAclsRequest, kp::CreateAclsResponse),
    DeleteAcls(kp::DeleteAclsRequest, kp::DeleteAclsResponse),
    IncrementalAlterConfigs(kp::IncrementalAlterConfigsRequest, kp::IncrementalAlterConfigsResponse),
    OffsetDelete(kp::OffsetDeleteRequest, kp::OffsetDeleteResponse),
    DescribeCluster(kp::DescribeClusterRequest, kp::DescribeClusterResponse),
    DescribeQuorum(kp::DescribeQuorumRequest, kp::DescribeQuorumResponse),
    ElectLeaders(kp::ElectLeadersRequest, kp::ElectLeadersResponse),
}
