//! One client connection's view of the broker: each request is sent to the module that answers
//! its API.

use std::net::SocketAddr;
use std::rc::Rc;

use net::kafka_protocol::messages::RequestHeader;
use net::{Handler, Request, Response};

use crate::api;
use crate::shard::Shard;

#[derive(Debug)]
pub struct Connection {
    pub shard: Rc<Shard>,
    pub peer: SocketAddr,
}

impl Handler for Connection {
    async fn handle(&self, header: &RequestHeader, request: Request) -> Option<Response> {
        let shard = &self.shard;
        let version = header.request_api_version;
        let response: Response = match request {
            Request::Produce(r) => {
                return api::produce::handle(shard, r, version)
                    .await
                    .map(Response::from);
            }
            Request::Fetch(r) => api::fetch::handle(shard, r, version).await.into(),
            Request::ListOffsets(r) => api::list_offsets::handle(shard, r, version).await.into(),
            Request::Metadata(r) => api::metadata::handle(shard, r, version).await.into(),
            Request::ApiVersions(_) => net::api_versions::response().into(),
            Request::CreateTopics(r) => api::topics::create(shard, r, version).await.into(),
            Request::DeleteTopics(r) => api::topics::delete(shard, r, version).await.into(),
            Request::CreatePartitions(r) => api::topics::create_partitions(shard, r, version)
                .await
                .into(),
            Request::DescribeConfigs(r) => api::configs::describe(shard, r, version).into(),
            Request::AlterConfigs(r) => api::configs::alter_legacy(shard, r, version).await.into(),
            Request::IncrementalAlterConfigs(r) => {
                api::configs::alter(shard, r, version).await.into()
            }
            Request::DescribeAcls(r) => api::acls::describe(r).into(),
            Request::CreateAcls(r) => api::acls::create(r).into(),
            Request::DeleteAcls(r) => api::acls::delete(r).into(),
            Request::DescribeCluster(r) => api::cluster::describe_cluster(shard, r).into(),
            Request::DescribeQuorum(r) => api::cluster::describe_quorum(shard, r, version)
                .await
                .into(),
            Request::ElectLeaders(r) => api::elect_leaders::handle(shard, r).await.into(),
            Request::DeleteRecords(r) => {
                api::delete_records::handle(shard, r, version).await.into()
            }
            Request::InitProducerId(r) => api::cluster::init_producer_id(shard, r).await.into(),
            group @ (Request::FindCoordinator(_)
            | Request::JoinGroup(_)
            | Request::SyncGroup(_)
            | Request::Heartbeat(_)
            | Request::LeaveGroup(_)
            | Request::OffsetCommit(_)
            | Request::OffsetFetch(_)
            | Request::OffsetDelete(_)
            | Request::ListGroups(_)
            | Request::DescribeGroups(_)
            | Request::DeleteGroups(_)) => {
                return crate::groups::handle(shard, group, header, self.peer).await;
            }
        };
        Some(response)
    }
}
