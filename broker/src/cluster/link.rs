//! Connections between nodes on the cluster listener, on shard 0: length-prefixed frames
//! ([`super::frames`]) over TCP. Each node dials every peer it talks to and keeps that connection
//! ([`Peer`]: a bounded queue, drained by a task that reconnects); on a dialed connection the
//! dialer sends requests and the acceptor answers. The first frame each way is the handshake
//! (`Hello`, `HelloReply`): a node that believes in other voters, or a second process with a
//! live node's id, is refused there.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalSender};
use glommio::net::{TcpListener, TcpStream};
use model::NodeId;

use quorum::envelope::{self as frames, Frame};

/// The largest frame a node accepts (a metadata snapshot travels in one).
pub const FRAME_BYTES_MAX: usize = 64 << 20;
/// Frames queued for one peer before more are dropped (Raft resends; RPCs time out).
const QUEUE_FRAMES: usize = 1024;
/// Inbound connections served at once (voters, brokers, and the pre-flight checks).
const INBOUND_CONNECTIONS_MAX: usize = 256;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(5);
const RECONNECT_DELAY: Duration = Duration::from_millis(200);

/// What the links hand the node they serve.
pub trait Handler: 'static {
    /// This node's id, process incarnation and voters, for the handshake.
    fn hello(&self) -> Frame;
    /// Whether a peer's `Hello` is welcome (`None`) or why not.
    fn check_hello(&self, node: NodeId, incarnation: u64, voters: &str) -> Option<String>;
    /// A welcome peer's accepted connection opened or closed.
    fn connected(&self, node: NodeId, incarnation: u64, open: bool);
    /// A peer refused this node: it must not run.
    fn refused(&self, by: NodeId, why: String);
    /// A request that arrived on an accepted connection; its reply (if any) goes back there.
    fn request(self: Rc<Self>, from: NodeId, frame: Frame, reply: Replier);
    /// A reply that came back on a dialed connection.
    fn reply(&self, from: NodeId, frame: Frame);
}

/// Sends replies back on the connection a request came in on.
#[derive(Debug, Clone)]
pub struct Replier {
    me: NodeId,
    tx: Rc<LocalSender<Bytes>>,
}

impl Replier {
    pub fn send(&self, frame: &Frame) {
        let bytes = Bytes::from(frames::encode(self.me, frame));
        if self.tx.try_send(bytes).is_err() {
            tracing::debug!("a reply was dropped: the connection is gone or its queue is full");
        }
    }
}

/// The link to one peer: frames queued here go out on a connection kept open to it.
#[derive(Debug)]
pub struct Peer {
    tx: LocalSender<Bytes>,
    /// Whether a connection to it is up (handshake done) right now.
    connected: Rc<Cell<bool>>,
}

impl Peer {
    /// Starts the link to `node` at `addr`.
    pub fn spawn<H: Handler>(me: NodeId, node: NodeId, addr: SocketAddr, handler: Weak<H>) -> Peer {
        let (tx, rx) = local_channel::new_bounded::<Bytes>(QUEUE_FRAMES);
        let connected = Rc::new(Cell::new(false));
        let up = connected.clone();
        glommio::spawn_local(async move {
            loop {
                let Some(h) = handler.upgrade() else { return };
                let hello = frames::encode(me, &h.hello());
                drop(h);
                match dial(addr, &hello).await {
                    Ok((stream, None)) => {
                        tracing::debug!(%node, %addr, "connected to a peer");
                        up.set(true);
                        let (mut reader, mut writer) = futures_lite::io::split(stream);
                        let reading = async {
                            while let Ok(bytes) = read_frame(&mut reader).await {
                                let Some(h) = handler.upgrade() else { return };
                                match frames::decode(&bytes, FRAME_BYTES_MAX) {
                                    Ok((from, frame)) => h.reply(from, frame),
                                    Err(e) => tracing::warn!(%node, error = %e, "a bad frame"),
                                }
                            }
                        };
                        let writing = async {
                            while let Some(bytes) = rx.recv().await {
                                if write_frame(&mut writer, &bytes).await.is_err() {
                                    return;
                                }
                            }
                        };
                        futures_lite::future::or(reading, writing).await;
                        up.set(false);
                        tracing::debug!(%node, %addr, "lost the connection to a peer");
                    }
                    Ok((_, Some(why))) => {
                        if let Some(h) = handler.upgrade() {
                            h.refused(node, why);
                        }
                        return;
                    }
                    Err(e) => tracing::trace!(%node, %addr, error = %e, "cannot reach a peer"),
                }
                glommio::timer::sleep(RECONNECT_DELAY).await;
            }
        })
        .detach();
        Peer { tx, connected }
    }

    pub fn is_connected(&self) -> bool {
        self.connected.get()
    }

    /// Queues `frame` for the peer; false if it was dropped (the queue is full).
    pub fn send(&self, me: NodeId, frame: &Frame) -> bool {
        self.tx
            .try_send(Bytes::from(frames::encode(me, frame)))
            .is_ok()
    }
}

/// Connects and shakes hands: the stream, and the peer's refusal if it refused.
async fn dial(addr: SocketAddr, hello: &[u8]) -> std::io::Result<(TcpStream, Option<String>)> {
    let mut stream = TcpStream::connect_timeout(addr, CONNECT_TIMEOUT)
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    stream
        .set_nodelay(true)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    write_frame(&mut stream, hello).await?;
    let reply = read_in_time(&mut stream).await?;
    match frames::decode(&reply, FRAME_BYTES_MAX) {
        Ok((_, Frame::HelloReply { refused })) => Ok((stream, refused)),
        Ok(_) => Err(std::io::Error::other(
            "the peer did not answer the handshake",
        )),
        Err(e) => Err(std::io::Error::other(e)),
    }
}

/// Accepts peers until the listener closes; each connection served by a task of its own.
pub async fn accept<H: Handler>(me: NodeId, listener: TcpListener, handler: Weak<H>) {
    let open = Rc::new(Cell::new(0usize));
    loop {
        let stream = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "cluster listener: accept failed");
                glommio::timer::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        if open.get() >= INBOUND_CONNECTIONS_MAX {
            tracing::warn!("cluster listener: too many connections; refusing one");
            continue;
        }
        open.set(open.get() + 1);
        let (open, handler) = (open.clone(), handler.clone());
        glommio::spawn_local(async move {
            if let Err(e) = serve(me, stream, &handler).await {
                tracing::debug!(error = %e, "a cluster connection ended");
            }
            open.set(open.get() - 1);
        })
        .detach();
    }
}

async fn serve<H: Handler>(
    me: NodeId,
    mut stream: TcpStream,
    handler: &Weak<H>,
) -> std::io::Result<()> {
    let _ = stream.set_nodelay(true);
    let hello = read_in_time(&mut stream).await?;
    let (from, frame) = frames::decode(&hello, FRAME_BYTES_MAX).map_err(std::io::Error::other)?;
    let Frame::Hello {
        node,
        incarnation,
        voters,
    } = frame
    else {
        return Err(std::io::Error::other("the first frame was not a hello"));
    };
    let Some(h) = handler.upgrade() else {
        return Ok(());
    };
    let refused = h.check_hello(node, incarnation, &voters);
    let reply = frames::encode(
        me,
        &Frame::HelloReply {
            refused: refused.clone(),
        },
    );
    write_frame(&mut stream, &reply).await?;
    if let Some(why) = refused {
        tracing::warn!(%node, %why, "refused a node");
        return Ok(());
    }
    h.connected(node, incarnation, true);
    drop(h);
    let served = serve_requests(me, from, stream, handler).await;
    if let Some(h) = handler.upgrade() {
        h.connected(node, incarnation, false);
    }
    served
}

async fn serve_requests<H: Handler>(
    me: NodeId,
    from: NodeId,
    stream: TcpStream,
    handler: &Weak<H>,
) -> std::io::Result<()> {
    let (tx, rx) = local_channel::new_bounded::<Bytes>(QUEUE_FRAMES);
    let replier = Replier {
        me,
        tx: Rc::new(tx),
    };
    let (mut reader, mut writer) = futures_lite::io::split(stream);
    let reading = async {
        loop {
            let bytes = read_frame(&mut reader).await?;
            let Some(h) = handler.upgrade() else {
                return Ok(());
            };
            match frames::decode(&bytes, FRAME_BYTES_MAX) {
                Ok((_, frame)) => h.request(from, frame, replier.clone()),
                Err(e) => tracing::warn!(%from, error = %e, "a bad frame from a peer"),
            }
        }
    };
    let writing = async {
        while let Some(bytes) = rx.recv().await {
            write_frame(&mut writer, &bytes).await?;
        }
        Ok(())
    };
    futures_lite::future::or(reading, writing).await
}

/// The handshake's frame, which must come within the handshake timeout.
async fn read_in_time(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    glommio::timer::timeout(HANDSHAKE_TIMEOUT, async { Ok(read_frame(stream).await) })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))?
}

/// One frame: its length (4 bytes, big-endian), bounded, then that many bytes.
pub async fn read_frame<R: futures_lite::AsyncRead + Unpin>(r: &mut R) -> std::io::Result<Vec<u8>> {
    let mut len = [0u8; 4];
    r.read_exact(&mut len).await?;
    let len = u32::from_be_bytes(len) as usize;
    if len > FRAME_BYTES_MAX {
        return Err(std::io::Error::other(format!(
            "a frame of {len} bytes (at most {FRAME_BYTES_MAX})"
        )));
    }
    let mut bytes = vec![0u8; len];
    r.read_exact(&mut bytes).await?;
    Ok(bytes)
}

pub async fn write_frame<W: futures_lite::AsyncWrite + Unpin>(
    w: &mut W,
    bytes: &[u8],
) -> std::io::Result<()> {
    let len = u32::try_from(bytes.len()).map_err(std::io::Error::other)?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(bytes).await?;
    w.flush().await
}
