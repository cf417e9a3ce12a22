//! The connections between peer shards that replicate partitions: shard k of a leader node
//! dials shard k of each follower node on the follower's replication listener (its port is in
//! the node's registration, [`replication_addr`]) and keeps that connection; the follower
//! answers on it. Frames are `controller::replica_wire`'s: both ends send a `Hello` first (node,
//! shard, cluster id), and a wrong shard or cluster is refused and logged.
//!
//! [`ReplicaLinks`] is one shard's: its listener, the connection it keeps to each node it sends
//! to (dialed when something is queued, dialed again after a failure), and the connections
//! other nodes dialed to it. Each connection has an `Outbox` bounded by bytes; its writer
//! sends every frame queued so far with vectored `sendmsg` calls: an Append's batches go from
//! the leader's own buffers to the socket without a user-space copy, and frames of many
//! partitions share a system call.
//!
//! glommio 0.9's `TcpStream` has no vectored write (its `AsyncWrite` keeps the default
//! `poll_write_vectored`, which writes the first buffer only), so the writer calls
//! `sendmsg(MSG_DONTWAIT)` on the stream's descriptor itself and, when the socket is full,
//! waits for room through glommio's own write of the next slice (which honours the write
//! timeout) before sending the rest vectored again.
//!
//! What a peer can hold: a frame is at most [`FRAME_BYTES_MAX`], read into a buffer that grows
//! only as its bytes arrive, and must arrive whole within [`FRAME_READ_TIMEOUT`] of its length;
//! a handshake is small and must come within [`HANDSHAKE_TIMEOUT`]; a write that makes no
//! progress for [`WRITE_TIMEOUT`] ends its connection; inbound connections are bounded
//! ([`INBOUND_CONNECTIONS_MAX`], and one per node is kept for replies: a newer one from the same
//! node replaces the older).

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, VecDeque};
use std::future::poll_fn;
use std::io::{self, IoSlice};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, RawFd};
use std::rc::{Rc, Weak};
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use model::{ClusterMetadata, NodeId, ShardId};
use quorum::replica_wire::{self as wire, Encoded, Frame, Hello, LENGTH_BYTES, ReplicaMessage};

/// The largest frame a shard accepts (after its length prefix): an Append of catch-up reads.
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// Batches in one Append.
pub const BATCHES_MAX: usize = 1 << 16;
/// Bytes queued for one node before `send` refuses more (at least one largest frame fits).
pub const QUEUE_BYTES_MAX: usize = 64 << 20;
/// Inbound connections served at once by one shard (one per peer node is what is needed).
pub const INBOUND_CONNECTIONS_MAX: usize = 64;
/// A handshake frame's largest size (a cluster id is a few dozen bytes).
const HELLO_BYTES_MAX: usize = 4 << 10;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
pub const FRAME_READ_TIMEOUT: Duration = Duration::from_secs(30);
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Before a node that could not be reached is dialed again.
const REDIAL_DELAY: Duration = Duration::from_millis(200);
/// Before a node that refused this shard is dialed again (it is configured for another
/// cluster or shard layout: retrying fast would only fill the logs).
const REFUSED_REDIAL_DELAY: Duration = Duration::from_secs(5);
/// A frame's buffer grows by at least this much as its bytes arrive.
const READ_CHUNK_BYTES: usize = 256 << 10;
/// Slices handed to one `sendmsg` (Linux's IOV_MAX).
const IOVECS_MAX: usize = 1024;

const LIMITS: wire::Limits = wire::Limits {
    frame_bytes_max: FRAME_BYTES_MAX,
    batches_max: BATCHES_MAX,
};

/// What the links hand the shard they serve.
pub trait ReplicaHandler: 'static {
    /// A message from `from` (on a connection we dialed or one we accepted).
    fn message(&self, from: NodeId, message: ReplicaMessage);
    /// A connection to or from `node` ended, or frames queued for it were dropped: what was
    /// sent to it since its last answer may be lost (resend / re-probe).
    fn disconnected(&self, node: NodeId);
}

/// Why a message was not queued.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    #[error(
        "{queued_bytes} bytes are queued for node {node}: {frame_bytes} more would pass the link's {limit_bytes}"
    )]
    Full {
        node: NodeId,
        queued_bytes: usize,
        frame_bytes: usize,
        limit_bytes: usize,
    },
    #[error("a frame of {bytes} bytes is over the limit of {max} bytes")]
    TooLarge { bytes: usize, max: usize },
    #[error("the message cannot be encoded: {0}")]
    Encode(#[from] wire::EncodeError),
    #[error("node {0} has no connection open to this shard to reply on")]
    NotConnected(NodeId),
}

/// The replication address of `shard` on `node`: the host of its cluster listener and the port
/// it registered for that shard. `None` for a node that registered none (it runs a version from
/// before replication, or it is unknown).
pub fn replication_addr(
    metadata: &ClusterMetadata,
    node: NodeId,
    shard: ShardId,
) -> Option<SocketAddr> {
    let broker = metadata.brokers.get(&node)?;
    let port = *broker.replication_ports.get(shard.index())?;
    let host = broker
        .cluster_listener
        .as_deref()?
        .parse::<SocketAddr>()
        .ok()?;
    Some(SocketAddr::new(host.ip(), port))
}

/// The frames waiting for one connection's writer, bounded by bytes.
#[derive(Debug, Default)]
struct Outbox {
    /// Each frame with its bytes on the wire.
    frames: RefCell<VecDeque<(Encoded, usize)>>,
    /// Bytes of `frames` not yet written.
    queued_bytes: Cell<usize>,
    /// Bytes of the front frame already written.
    front_written: Cell<usize>,
    waker: RefCell<Option<Waker>>,
    closed: Cell<bool>,
}

impl Outbox {
    fn push(&self, node: NodeId, encoded: Encoded) -> Result<(), SendError> {
        let bytes = encoded.wire_bytes();
        if bytes > LENGTH_BYTES + FRAME_BYTES_MAX {
            return Err(SendError::TooLarge {
                bytes,
                max: LENGTH_BYTES + FRAME_BYTES_MAX,
            });
        }
        let queued_bytes = self.queued_bytes.get();
        if queued_bytes + bytes > QUEUE_BYTES_MAX {
            return Err(SendError::Full {
                node,
                queued_bytes,
                frame_bytes: bytes,
                limit_bytes: QUEUE_BYTES_MAX,
            });
        }
        self.frames.borrow_mut().push_back((encoded, bytes));
        self.queued_bytes.set(queued_bytes + bytes);
        self.wake();
        Ok(())
    }

    fn wake(&self) {
        let waker = self.waker.borrow_mut().take();
        if let Some(w) = waker {
            w.wake();
        }
    }

    /// Drops what is queued; true if there was something.
    fn clear(&self) -> bool {
        let dropped = !self.frames.borrow().is_empty();
        self.frames.borrow_mut().clear();
        self.queued_bytes.set(0);
        self.front_written.set(0);
        dropped
    }

    fn close(&self) {
        self.closed.set(true);
        self.clear();
        self.wake();
    }

    /// Waits until something is queued; false once the outbox is closed.
    async fn ready(&self) -> bool {
        poll_fn(|cx| {
            if self.closed.get() {
                Poll::Ready(false)
            } else if !self.frames.borrow().is_empty() {
                Poll::Ready(true)
            } else {
                *self.waker.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }

    /// The unwritten bytes of the front frames, as slices of their buffers (no copy).
    fn slices(&self) -> Vec<Bytes> {
        let frames = self.frames.borrow();
        let mut skip = self.front_written.get();
        let mut out = Vec::new();
        for (frame, _) in frames.iter() {
            for piece in std::iter::once(&frame.header).chain(frame.batches.iter()) {
                if out.len() == IOVECS_MAX {
                    return out;
                }
                if skip >= piece.len() {
                    skip -= piece.len();
                    continue;
                }
                out.push(piece.slice(skip..));
                skip = 0;
            }
        }
        out
    }

    /// Marks `n` more bytes written: frames written whole leave the queue.
    fn advance(&self, mut n: usize) {
        self.queued_bytes
            .set(self.queued_bytes.get().saturating_sub(n));
        let mut frames = self.frames.borrow_mut();
        while n > 0 {
            let Some((_, bytes)) = frames.front() else {
                break;
            };
            let left = bytes - self.front_written.get();
            if n >= left {
                frames.pop_front();
                self.front_written.set(0);
                n -= left;
            } else {
                self.front_written.set(self.front_written.get() + n);
                n = 0;
            }
        }
    }
}

/// The connection this shard keeps to one node.
#[derive(Debug)]
struct Peer {
    addr: Cell<SocketAddr>,
    outbox: Rc<Outbox>,
}

/// Who this shard is, for the handshake.
#[derive(Debug, Clone)]
struct Identity {
    node: NodeId,
    shard: ShardId,
    cluster_id: String,
}

impl Identity {
    fn hello(&self) -> Frame {
        Frame::Hello(Hello {
            node: self.node,
            shard: self.shard,
            cluster_id: self.cluster_id.clone(),
        })
    }

    /// Why a peer's `Hello` is not welcome, if it is not.
    fn refusal(&self, hello: &Hello) -> Option<String> {
        if hello.cluster_id != self.cluster_id {
            Some(format!(
                "node {} is of cluster {:?}, this is cluster {:?}",
                hello.node, hello.cluster_id, self.cluster_id
            ))
        } else if hello.shard != self.shard {
            Some(format!(
                "shard {} of node {} and shard {} of node {} are not peers: peer shards have \
                 the same index",
                hello.shard, hello.node, self.shard, self.node
            ))
        } else if hello.node == self.node {
            Some(format!("node {} is this node", hello.node))
        } else {
            None
        }
    }
}

/// One shard's replication links (shard-local: `Rc`, never shared between executors).
pub struct ReplicaLinks {
    me: Identity,
    port: u16,
    handler: Weak<dyn ReplicaHandler>,
    peers: RefCell<BTreeMap<NodeId, Rc<Peer>>>,
    /// The latest connection each node dialed to us, for replies.
    inbound: RefCell<BTreeMap<NodeId, Rc<Outbox>>>,
    inbound_open: Cell<usize>,
    /// The accept loop; cancelled (closing the listener) when the links are dropped.
    accepting: glommio::task::JoinHandle<()>,
}

impl std::fmt::Debug for ReplicaLinks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplicaLinks")
            .field("me", &self.me)
            .field("port", &self.port)
            .field("peers", &self.peers.borrow().keys().collect::<Vec<_>>())
            .field("inbound", &self.inbound.borrow().keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Drop for ReplicaLinks {
    fn drop(&mut self) {
        self.accepting.cancel();
        for peer in self.peers.borrow().values() {
            peer.outbox.close();
        }
        for outbox in self.inbound.borrow().values() {
            outbox.close();
        }
    }
}

impl ReplicaLinks {
    /// Listens for this shard's peers on `host` (an IP address, as `--cluster-listen`'s) and
    /// `port` (0: one the OS picks; [`port`](Self::port) says which). `cluster_id` is the
    /// cluster's, for the handshake.
    pub async fn listen(
        me: NodeId,
        shard: ShardId,
        cluster_id: &str,
        host: &str,
        port: u16,
        handler: Weak<dyn ReplicaHandler>,
    ) -> io::Result<Rc<ReplicaLinks>> {
        let ip = host.parse::<IpAddr>().map_err(|e| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("host {host:?}: {e}"))
        })?;
        let listener = crate::server::listen(SocketAddr::new(ip, port), false)?;
        let port = listener.local_addr().map_err(glommio_io)?.port();
        Ok(Rc::new_cyclic(|links: &Weak<ReplicaLinks>| {
            let accepting = glommio::spawn_local(accept(listener, links.clone())).detach();
            ReplicaLinks {
                me: Identity {
                    node: me,
                    shard,
                    cluster_id: cluster_id.to_owned(),
                },
                port,
                handler,
                peers: RefCell::default(),
                inbound: RefCell::default(),
                inbound_open: Cell::new(0),
                accepting,
            }
        }))
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Queues `message` for `to` at `addr` (its replication port for this shard), on the
    /// connection kept to it (dialed on first use, redialed after a failure). Bounded:
    /// `SendError::Full` when the bytes queued for `to` would pass [`QUEUE_BYTES_MAX`].
    pub fn send(
        self: &Rc<Self>,
        to: NodeId,
        addr: SocketAddr,
        message: ReplicaMessage,
    ) -> Result<(), SendError> {
        let encoded = wire::encode(Frame::Message(message))?;
        self.peer(to, addr).outbox.push(to, encoded)
    }

    /// Bytes queued for `to` and not yet written (the leader bounds its bytes in flight).
    pub fn queued_bytes(&self, to: NodeId) -> usize {
        self.peers
            .borrow()
            .get(&to)
            .map_or(0, |p| p.outbox.queued_bytes.get())
    }

    /// Sends on the connection `to` dialed us on (a follower answering its leader).
    pub fn reply(&self, to: NodeId, message: ReplicaMessage) -> Result<(), SendError> {
        let encoded = wire::encode(Frame::Message(message))?;
        let outbox = self.inbound.borrow().get(&to).cloned();
        match outbox {
            Some(outbox) if !outbox.closed.get() => outbox.push(to, encoded),
            _ => Err(SendError::NotConnected(to)),
        }
    }

    /// The link to `to`, started on first use; its address follows the latest registration.
    fn peer(self: &Rc<Self>, to: NodeId, addr: SocketAddr) -> Rc<Peer> {
        if let Some(peer) = self.peers.borrow().get(&to) {
            peer.addr.set(addr);
            return peer.clone();
        }
        let peer = Rc::new(Peer {
            addr: Cell::new(addr),
            outbox: Rc::default(),
        });
        self.peers.borrow_mut().insert(to, peer.clone());
        glommio::spawn_local(keep_dialed(Rc::downgrade(self), to, peer.clone())).detach();
        peer
    }

    fn handler(&self) -> Option<Rc<dyn ReplicaHandler>> {
        self.handler.upgrade()
    }
}

fn disconnected(links: &Weak<ReplicaLinks>, node: NodeId) {
    if let Some(h) = links.upgrade().and_then(|l| l.handler()) {
        h.disconnected(node);
    }
}

/// The dialing side of the connection to `to`: dials when something is queued, serves the
/// connection until it fails, drops what was queued then (the handler hears `disconnected`),
/// and dials again for what is queued next. Ends when the links are dropped.
async fn keep_dialed(links: Weak<ReplicaLinks>, to: NodeId, peer: Rc<Peer>) {
    while peer.outbox.ready().await {
        let Some(me) = links.upgrade().map(|l| l.me.clone()) else {
            return;
        };
        let addr = peer.addr.get();
        let delay = match dial(&me, to, addr).await {
            Ok(stream) => {
                tracing::debug!(node = %to, %addr, shard = %me.shard, "replication link up");
                let ended = serve(stream, to, &peer.outbox, &links).await;
                tracing::debug!(node = %to, %addr, reason = ?ended.err(), "replication link down");
                peer.outbox.clear();
                disconnected(&links, to);
                // Dial again for what comes next at once: the connection was up, the node is
                // likely still there.
                Duration::ZERO
            }
            Err(Dial::Refused(why)) => {
                tracing::warn!(node = %to, %addr, %why, "a replication handshake failed");
                if peer.outbox.clear() {
                    disconnected(&links, to);
                }
                REFUSED_REDIAL_DELAY
            }
            Err(Dial::Io(e)) => {
                tracing::debug!(node = %to, %addr, error = %e, "cannot reach a replication peer");
                if peer.outbox.clear() {
                    disconnected(&links, to);
                }
                REDIAL_DELAY
            }
        };
        if !delay.is_zero() {
            glommio::timer::sleep(delay).await;
        }
    }
}

enum Dial {
    Io(io::Error),
    /// Either side refused the other's handshake.
    Refused(String),
}

impl From<io::Error> for Dial {
    fn from(e: io::Error) -> Self {
        Dial::Io(e)
    }
}

/// Connects to `to` at `addr` and shakes hands: the stream once both sides agree.
async fn dial(me: &Identity, to: NodeId, addr: SocketAddr) -> Result<TcpStream, Dial> {
    let mut stream = TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
        .await
        .map_err(glommio_io)?;
    stream.set_nodelay(true).map_err(glommio_io)?;
    write_hello(&mut stream, me.hello()).await?;
    match read_hello(&mut stream).await? {
        Frame::Hello(theirs) if theirs.node != to => Err(Dial::Refused(format!(
            "{addr} is node {}'s, not node {to}'s (a registration out of date)",
            theirs.node
        ))),
        Frame::Hello(theirs) => match me.refusal(&theirs) {
            Some(why) => Err(Dial::Refused(why)),
            None => Ok(stream),
        },
        Frame::Refused(why) => Err(Dial::Refused(format!("refused by node {to}: {why}"))),
        Frame::Message(_) => Err(Dial::Refused(
            "the peer did not answer the handshake".into(),
        )),
    }
}

/// Accepts peers until the links are dropped (which cancels this task and closes the listener).
async fn accept(listener: TcpListener, links: Weak<ReplicaLinks>) {
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "replication listener: accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let Some(l) = links.upgrade() else { return };
        if l.inbound_open.get() >= INBOUND_CONNECTIONS_MAX {
            tracing::warn!(
                shard = %l.me.shard,
                "replication listener: too many connections; refusing one"
            );
            continue;
        }
        l.inbound_open.set(l.inbound_open.get() + 1);
        drop(l);
        let links = links.clone();
        glommio::spawn_local(async move {
            if let Err(e) = accepted(stream, &links).await {
                tracing::debug!(error = %e, "an inbound replication connection ended");
            }
            if let Some(l) = links.upgrade() {
                l.inbound_open.set(l.inbound_open.get() - 1);
            }
        })
        .detach();
    }
}

/// An accepted connection: its handshake, then its frames until it fails or a newer
/// connection from the same node replaces it.
async fn accepted(mut stream: TcpStream, links: &Weak<ReplicaLinks>) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let Frame::Hello(theirs) = read_hello(&mut stream).await.map_err(dial_io)? else {
        return Err(io::Error::other("the first frame was not a handshake"));
    };
    let Some(me) = links.upgrade().map(|l| l.me.clone()) else {
        return Ok(());
    };
    if let Some(why) = me.refusal(&theirs) {
        tracing::warn!(node = %theirs.node, %why, "refused a replication connection");
        return write_hello(&mut stream, Frame::Refused(why)).await;
    }
    write_hello(&mut stream, me.hello()).await?;
    let from = theirs.node;
    let outbox = Rc::new(Outbox::default());
    let replaced = links
        .upgrade()
        .and_then(|l| l.inbound.borrow_mut().insert(from, outbox.clone()));
    if let Some(older) = replaced {
        older.close();
    }
    let served = serve(stream, from, &outbox, links).await;
    outbox.close();
    if let Some(l) = links.upgrade() {
        let mut inbound = l.inbound.borrow_mut();
        if inbound.get(&from).is_some_and(|o| Rc::ptr_eq(o, &outbox)) {
            inbound.remove(&from);
        }
    }
    disconnected(links, from);
    served
}

/// Reads `node`'s frames (to the handler) and writes the outbox's until either side fails or
/// the outbox is closed.
async fn serve(
    stream: TcpStream,
    node: NodeId,
    outbox: &Outbox,
    links: &Weak<ReplicaLinks>,
) -> io::Result<()> {
    stream
        .set_write_timeout(Some(WRITE_TIMEOUT))
        .map_err(glommio_io)?;
    // The descriptor outlives neither half: both are dropped when this function returns.
    let fd = stream.as_raw_fd();
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let reading = async {
        loop {
            let bytes = read_frame(&mut reader, FRAME_BYTES_MAX).await?;
            let message = match wire::decode(bytes, LIMITS) {
                Ok(Frame::Message(m)) => m,
                Ok(_) => return Err(io::Error::other("a second handshake")),
                Err(e) => {
                    tracing::warn!(%node, error = %e, "a bad replication frame; closing");
                    return Err(io::Error::other(e));
                }
            };
            let Some(h) = links.upgrade().and_then(|l| l.handler()) else {
                tracing::debug!(%node, "a replication message with nobody to take it");
                continue;
            };
            h.message(node, message);
        }
    };
    let writing = write_out(fd, &mut writer, outbox);
    futures_lite::future::or(reading, writing).await
}

/// Writes what the outbox holds, as it comes, until it is closed or the socket fails.
async fn write_out<W: AsyncWrite + Unpin>(
    fd: RawFd,
    writer: &mut W,
    outbox: &Outbox,
) -> io::Result<()> {
    use nix::sys::socket::{MsgFlags, sendmsg};
    while outbox.ready().await {
        let slices = outbox.slices();
        let iov: Vec<IoSlice<'_>> = slices.iter().map(|s| IoSlice::new(s)).collect();
        let flags = MsgFlags::MSG_DONTWAIT | MsgFlags::MSG_NOSIGNAL;
        match sendmsg::<()>(fd, &iov, &[], flags, None) {
            Ok(n) => outbox.advance(n),
            Err(nix::errno::Errno::EAGAIN) => {
                // The socket is full: glommio waits for room (within the write timeout) and
                // writes some of the first slice; the rest goes vectored again.
                if let Some(first) = slices.first() {
                    let n = writer.write(first).await?;
                    outbox.advance(n);
                }
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(io::Error::from(e)),
        }
    }
    Ok(())
}

/// One frame after its 4-byte length, bounded by `max`; once its length has come, the rest
/// must come within the read timeout, into a buffer that grows as it arrives.
async fn read_frame<R: AsyncRead + Unpin>(r: &mut R, max: usize) -> io::Result<Bytes> {
    let mut prefix = [0u8; LENGTH_BYTES];
    r.read_exact(&mut prefix).await?;
    let len = wire::frame_length(prefix);
    if len > max {
        return Err(io::Error::other(format!(
            "a frame of {len} bytes (at most {max})"
        )));
    }
    glommio::timer::timeout(FRAME_READ_TIMEOUT, async {
        let mut buf = BytesMut::with_capacity(len.min(READ_CHUNK_BYTES));
        while buf.len() < len {
            let start = buf.len();
            let more = (len - start).min(start.max(READ_CHUNK_BYTES));
            buf.resize(start + more, 0);
            r.read_exact(&mut buf[start..]).await?;
        }
        Ok::<_, glommio::GlommioError<()>>(buf.freeze())
    })
    .await
    .map_err(glommio_io)
}

async fn write_hello(stream: &mut TcpStream, frame: Frame) -> io::Result<()> {
    let encoded = wire::encode(frame).map_err(io::Error::other)?;
    stream.write_all(&encoded.header).await?;
    stream.flush().await
}

async fn read_hello(stream: &mut TcpStream) -> Result<Frame, Dial> {
    let bytes = glommio::timer::timeout(HANDSHAKE_TIMEOUT, async {
        Ok(read_frame(stream, HELLO_BYTES_MAX).await)
    })
    .await
    .map_err(glommio_io)??;
    wire::decode(bytes, LIMITS).map_err(|e| Dial::Refused(format!("a bad handshake: {e}")))
}

fn glommio_io(e: glommio::GlommioError<()>) -> io::Error {
    io::Error::other(e.to_string())
}

fn dial_io(e: Dial) -> io::Error {
    match e {
        Dial::Io(e) => e,
        Dial::Refused(why) => io::Error::other(why),
    }
}
