//! The wiring of consumer groups into the shards (placeholder until the coordinator lands).

use std::net::SocketAddr;
use std::rc::Rc;

use net::kafka_protocol::messages::RequestHeader;
use net::{Request, Response};

use crate::shard::Shard;

pub async fn open_coordinators(_shard: &Rc<Shard>) -> Result<(), String> {
    Ok(())
}

pub async fn close_coordinators(_shard: &Rc<Shard>) {}

pub async fn handle(
    _shard: &Rc<Shard>,
    request: Request,
    _header: &RequestHeader,
    _peer: SocketAddr,
) -> Option<Response> {
    tracing::warn!(api = ?request.api_key(), "group APIs are not wired in yet");
    None
}
