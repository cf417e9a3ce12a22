//! Consumer groups wired into the shards: every shard opens the coordinators of the offsets
//! partitions it owns; a group request, on whatever shard it arrives, is served by
//! [`group::handle`] with a [`Dispatch`] that runs each call on the coordinator's shard.

use std::net::SocketAddr;
use std::rc::Rc;

use net::kafka_protocol::ResponseError;
use net::kafka_protocol::messages::RequestHeader;
use net::{Request, Response};

use crate::group::{
    self, Coordinator, Dispatch, GroupCall, GroupError, GroupReply, NodeEndpoint, OFFSETS_TOPIC,
    RequestContext,
};
use crate::routing::Route;
use crate::shard::Shard;

/// Opens (replays) the coordinator of every offsets partition this shard owns and has none for
/// yet (at start, and when metadata brings it new ones).
pub async fn open_coordinators(shard: &Rc<Shard>) -> Result<(), GroupError> {
    let Some(topic) = shard.topic(OFFSETS_TOPIC) else {
        return Ok(());
    };
    if shard.shutdown.is_triggered() {
        return Ok(()); // stopping: its coordinators are closed, and stay so
    }
    let config = shard.group_config.clone();
    for partition in 0..topic.partition_count() {
        let p = shard.partition(OFFSETS_TOPIC, partition);
        // A group's coordinator is its offsets partition's leader, for one leader epoch: a
        // replica that stopped leading, or leads again after others did, reloads the log.
        let leads = p.as_ref().and_then(|p| p.leads());
        let current = shard.coordinators.borrow().get(&partition).cloned();
        if let Some(c) = current {
            if leads.is_some() && c.leader_epoch() == leads {
                continue;
            }
            shard.coordinators.borrow_mut().remove(&partition);
            c.close().await;
        }
        if let (Some(p), Some(_)) = (p, leads) {
            let coordinator = Coordinator::open(p, config.clone()).await?;
            shard
                .coordinators
                .borrow_mut()
                .insert(partition, coordinator);
        }
    }
    Ok(())
}

/// Closes this shard's coordinators: requests waiting on them (a JoinGroup can wait minutes)
/// are answered, and their logs closed.
pub async fn close_coordinators(shard: &Rc<Shard>) {
    let coordinators: Vec<_> = shard
        .coordinators
        .borrow_mut()
        .drain()
        .map(|(_, c)| c)
        .collect();
    for c in coordinators {
        c.close().await;
    }
}

pub async fn handle(
    shard: &Rc<Shard>,
    request: Request,
    header: &RequestHeader,
    peer: SocketAddr,
) -> Option<Response> {
    // In a cluster the offsets topic is made when the first group needs it (Kafka's way), so
    // that its replicas spread over the brokers that registered by then.
    if matches!(request, Request::FindCoordinator(_)) && shard.topic(OFFSETS_TOPIC).is_none() {
        if let Err(e) =
            crate::proposals::ensure_offsets_topic(shard, shard.config.offsets_partitions).await
        {
            tracing::warn!(error = %e.message, "creating the offsets topic");
        }
    }
    let ctx = RequestContext {
        api_version: header.request_api_version,
        client_id: header
            .client_id
            .as_ref()
            .map_or_else(String::new, |c| c.to_string()),
        client_host: format!("/{}", peer.ip()),
    };
    Some(group::handle(request, &ctx, &ShardDispatch { shard }).await)
}

struct ShardDispatch<'a> {
    shard: &'a Rc<Shard>,
}

impl Dispatch for ShardDispatch<'_> {
    fn offsets_partitions(&self) -> i32 {
        self.shard
            .topic(OFFSETS_TOPIC)
            .map_or(1, |t| t.partition_count())
    }

    fn has_partition(&self, topic: &str, partition: i32) -> bool {
        self.shard
            .topic(topic)
            .is_some_and(|t| !t.internal && t.partition(partition).is_some())
    }

    fn coordinator(&self, partition: i32) -> Option<NodeEndpoint> {
        let metadata = self.shard.metadata();
        let leader = metadata
            .topics
            .get(OFFSETS_TOPIC)?
            .partition(partition)?
            .leader?;
        let broker = metadata.brokers.get(&leader).filter(|b| !b.fenced)?;
        Some(NodeEndpoint {
            node_id: broker.id.0,
            host: broker.host.clone(),
            port: i32::from(broker.port),
        })
    }

    async fn call(&self, partition: i32, call: GroupCall) -> GroupReply {
        let route = self
            .shard
            .topic(OFFSETS_TOPIC)
            .map_or(Route::Unknown, |t| self.shard.route(&t, partition));
        let Route::Here(owner) = route else {
            return GroupReply::Unavailable(ResponseError::NotCoordinator);
        };
        let reply = self
            .shard
            .mesh()
            .run_on(owner, self.shard, move |s: Rc<Shard>| async move {
                let coordinator = s.coordinators.borrow().get(&partition).cloned();
                match coordinator {
                    Some(c) => c.call(call).await,
                    None => GroupReply::Unavailable(ResponseError::CoordinatorLoadInProgress),
                }
            })
            .await;
        reply.unwrap_or(GroupReply::Unavailable(ResponseError::NotCoordinator))
    }
}
