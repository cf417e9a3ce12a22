//! The handshake's rules, and the check a node makes before it touches its data directory: it
//! shakes hands with every voter it can reach, and a voter that refuses it (other voters, or its
//! node id already live) stops it with that voter's reason while nothing on disk has changed.
//! Voters that cannot be reached are no reason to stop: they may be starting too.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use model::NodeId;

use super::link::FRAME_BYTES_MAX;
use crate::config::ClusterConfig;
use quorum::envelope::{self as frames, Frame};

const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const REPLY_TIMEOUT: Duration = Duration::from_secs(3);

#[derive(Debug, thiserror::Error)]
#[error("node {by} refused this node: {why}")]
pub struct PreflightError {
    pub by: NodeId,
    pub why: String,
}

/// Whether `me` welcomes a `Hello` from `node` (process `incarnation`, believing in `voters`);
/// `live` is the incarnation of `node`'s process whose connections are open here, if any.
pub fn check(
    me: NodeId,
    my_voters: &str,
    node: NodeId,
    incarnation: u64,
    voters: &str,
    live: Option<(u64, usize)>,
    my_incarnation: u64,
) -> Option<String> {
    if voters != my_voters {
        return Some(format!(
            "node {node} was started with --controller-voters {voters}, but node {me} has \
             {my_voters}: every node of a cluster must be given the same voters"
        ));
    }
    let duplicate = if node == me {
        incarnation != my_incarnation
    } else {
        live.is_some_and(|(running, open)| running != incarnation && open > 0)
    };
    duplicate.then(|| {
        format!(
            "node id {node} is already in use by a running node: stop it, or give this one \
             another --node-id"
        )
    })
}

/// Shakes hands with every voter but `me` that answers; the first refusal is the error.
pub fn preflight(
    me: NodeId,
    config: &ClusterConfig,
    incarnation: u64,
) -> Result<(), PreflightError> {
    let hello = frames::encode(
        me,
        &Frame::Hello {
            node: me,
            incarnation,
            voters: config.voters_spelled(),
        },
    );
    for (&voter, addr) in &config.voters {
        if voter == me && *addr == config.listen {
            continue;
        }
        match ask(addr, &hello) {
            Ok(Some(why)) => return Err(PreflightError { by: voter, why }),
            Ok(None) => {}
            Err(e) => tracing::debug!(%voter, %addr, error = %e, "pre-flight: not reached"),
        }
    }
    Ok(())
}

fn ask(addr: &std::net::SocketAddr, hello: &[u8]) -> std::io::Result<Option<String>> {
    let mut stream = TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)?;
    stream.set_read_timeout(Some(REPLY_TIMEOUT))?;
    stream.set_write_timeout(Some(REPLY_TIMEOUT))?;
    let len = u32::try_from(hello.len()).map_err(std::io::Error::other)?;
    stream.write_all(&len.to_be_bytes())?;
    stream.write_all(hello)?;
    let mut len = [0u8; 4];
    stream.read_exact(&mut len)?;
    let len = u32::from_be_bytes(len) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(std::io::Error::other("an oversized handshake reply"));
    }
    let mut reply = vec![0u8; len];
    stream.read_exact(&mut reply)?;
    match frames::decode(&reply, FRAME_BYTES_MAX) {
        Ok((_, Frame::HelloReply { refused })) => Ok(refused),
        Ok(_) => Err(std::io::Error::other("not a handshake reply")),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_voters_and_live_duplicates_are_refused() {
        let v = "1@127.0.0.1:1,2@127.0.0.1:2";
        let me = NodeId(1);
        assert_eq!(check(me, v, NodeId(2), 5, v, None, 9), None);
        assert_eq!(
            check(me, v, NodeId(2), 5, v, Some((5, 1)), 9),
            None,
            "its own links"
        );
        assert_eq!(
            check(me, v, NodeId(2), 6, v, Some((5, 0)), 9),
            None,
            "restarted"
        );
        let dup = check(me, v, NodeId(2), 6, v, Some((5, 2)), 9).expect("refused");
        assert!(dup.contains("already in use"), "{dup}");
        assert!(
            check(me, v, NodeId(1), 8, v, None, 9).is_some(),
            "a second node 1"
        );
        assert_eq!(check(me, v, NodeId(1), 9, v, None, 9), None, "itself");
        let other = check(me, v, NodeId(2), 5, "1@127.0.0.1:1", None, 9).expect("refused");
        assert!(other.contains("same voters"), "{other}");
    }
}
