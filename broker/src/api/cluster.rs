//! DescribeCluster and InitProducerId: answers about this broker itself.

use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use net::kafka_protocol::messages::{
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId,
};
use net::kafka_protocol::protocol::StrBytes;

use crate::api::metadata::{CLUSTER_OPERATIONS, authorized_operations};
use crate::shard::Shard;

pub fn describe_cluster(shard: &Shard, request: DescribeClusterRequest) -> DescribeClusterResponse {
    let metadata = shard.metadata();
    let brokers = metadata
        .live_brokers()
        .map(|b| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(b.id.0))
                .with_host(StrBytes::from_string(b.host.clone()))
                .with_port(i32::from(b.port))
                .with_rack(b.rack.clone().map(StrBytes::from_string))
        })
        .collect();
    DescribeClusterResponse::default()
        .with_cluster_id(StrBytes::from_string(metadata.cluster_id.clone()))
        .with_controller_id(BrokerId(shard.active_controller().map_or(-1, |c| c.0)))
        .with_brokers(brokers)
        .with_cluster_authorized_operations(authorized_operations(
            request.include_cluster_authorized_operations,
            CLUSTER_OPERATIONS,
        ))
}

/// Ids for idempotent producers. A producer that asks again with its id and epoch (KIP-360, to
/// recover from a failed batch) gets its next epoch. Transactions are not supported.
pub async fn init_producer_id(
    shard: &Rc<Shard>,
    request: InitProducerIdRequest,
) -> InitProducerIdResponse {
    if request.transactional_id.is_some() {
        return InitProducerIdResponse::default()
            .with_error_code(ResponseError::TransactionalIdAuthorizationFailed.code())
            .with_producer_id(ProducerId(-1))
            .with_producer_epoch(-1);
    }
    let (id, epoch) = if request.producer_id.0 >= 0
        && request.producer_epoch >= 0
        && request.producer_epoch < i16::MAX - 1
    {
        (request.producer_id.0, request.producer_epoch + 1)
    } else {
        match shard.allocate_producer_id().await {
            Ok(id) => (id, 0),
            Err(e) => {
                tracing::warn!(shard = shard.id, error = %e.message, "no producer id to give");
                return InitProducerIdResponse::default()
                    .with_error_code(e.code.code())
                    .with_producer_id(ProducerId(-1))
                    .with_producer_epoch(-1);
            }
        }
    };
    InitProducerIdResponse::default()
        .with_producer_id(ProducerId(id))
        .with_producer_epoch(epoch)
}
