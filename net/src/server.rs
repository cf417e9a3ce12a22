//! Serving one client connection: read frames, decode, hand requests to a [`Handler`], write
//! the responses back in request order.
//!
//! Up to `in_flight_max` requests of a connection run at once (clients pipeline: librdkafka and
//! the Java client keep up to five produce requests in flight). Each runs as its own task, so a
//! slow request does not hold up the work of the ones behind it, only their responses: those are
//! written strictly in request order, as Kafka promises.
//!
//! Anything we cannot read (a bad frame, an unknown API or version, a malformed body) closes the
//! connection with a warning naming the peer, except an ApiVersions request at a version we do
//! not speak: that is answered with error 35 so the client can retry lower. A handler's work is
//! never cancelled: when a connection closes, the requests it started still run to the end.
//!
//! A request's bytes are charged to the shard's request budget from the moment they are read
//! until its response is written (see [`crate::frame`]); a frame must arrive whole within the
//! read timeout once it has started, and a connection that starts no frame for the idle timeout
//! is closed.

use std::future::Future;
use std::rc::Rc;

use futures_lite::future;
use futures_lite::io::{AsyncRead, AsyncWrite};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::sync::{Semaphore, StaticPermit};
use glommio::task::JoinHandle;
use kafka_protocol::messages::RequestHeader;

use crate::api::{Request, Response};
use crate::api_versions;
use crate::budget::{MemoryBudget, MemoryPermit};
use crate::frame::{FRAME_BYTES_MAX_DEFAULT, FrameError, FrameReader, FrameWriter, ReadTimeouts};
use crate::request::{DecodeError, decode_request};
use crate::response::{EncodeError, ResponseFrame, encode_response};

/// Serves requests. One handler is shared by the connections of a shard.
pub trait Handler: 'static {
    /// Handles one request. `None` sends no response: the answer to a Produce with acks=0.
    fn handle(
        &self,
        header: &RequestHeader,
        request: Request,
    ) -> impl Future<Output = Option<Response>>;
}

#[derive(Debug, Clone)]
pub struct ConnectionConfig {
    /// The largest request accepted (Kafka's `socket.request.max.bytes`).
    pub frame_bytes_max: usize,
    /// How many requests of one connection may be in progress at once; at least 1.
    pub in_flight_max: usize,
    /// The shard's budget for requests being read and queued; `None` leaves them unbounded.
    pub request_memory: Option<Rc<MemoryBudget>>,
    /// How long a frame may take to arrive, and a connection may sit idle.
    pub read_timeouts: ReadTimeouts,
    /// When triggered, the connection stops reading, finishes what is in flight and returns.
    pub shutdown: ShutdownSignal,
}

impl Default for ConnectionConfig {
    fn default() -> Self {
        Self {
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
            in_flight_max: 16,
            request_memory: None,
            read_timeouts: ReadTimeouts::default(),
            shutdown: ShutdownSignal::new(),
        }
    }
}

/// A stop signal shared by the connections of one executor: triggered once, seen by all.
#[derive(Debug, Clone)]
pub struct ShutdownSignal {
    /// Never given units: closing it is what wakes every waiter.
    closed: Rc<Semaphore>,
}

impl ShutdownSignal {
    pub fn new() -> Self {
        Self {
            closed: Rc::new(Semaphore::new(0)),
        }
    }

    pub fn trigger(&self) {
        self.closed.close();
    }

    pub fn is_triggered(&self) -> bool {
        self.closed.try_acquire(1).is_err()
    }

    /// Completes once the signal is triggered.
    pub async fn triggered(&self) {
        // Only closing ends the wait: the semaphore never has units to hand out.
        let _closed = self.closed.acquire(1).await;
    }
}

impl Default for ShutdownSignal {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectionError {
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Decode(#[from] DecodeError),
    #[error("encoding a response: {0}")]
    Encode(#[from] EncodeError),
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
    #[error("a request's task was dropped before it answered")]
    TaskLost,
}

impl ConnectionError {
    /// Whether the client closed or reset the connection (not a protocol fault of ours or its).
    pub fn is_peer_gone(&self) -> bool {
        use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
        matches!(self, ConnectionError::Io(e) if matches!(e.kind(), ConnectionReset | BrokenPipe | ConnectionAborted))
            || matches!(self, ConnectionError::Frame(FrameError::Io(e)) if matches!(e.kind(), ConnectionReset | BrokenPipe | ConnectionAborted))
    }

    /// Whether the connection was closed for sitting idle: routine, as in Kafka.
    pub fn is_idle(&self) -> bool {
        matches!(self, ConnectionError::Frame(FrameError::Idle { .. }))
    }
}

/// Serves a client connection until the client closes it, shutdown is triggered, or the client
/// sends something we cannot read (logged as a warning with the peer's address).
pub async fn serve_connection<H: Handler>(
    stream: glommio::net::TcpStream,
    handler: Rc<H>,
    config: ConnectionConfig,
) -> Result<(), ConnectionError> {
    let peer = stream
        .peer_addr()
        .map_or_else(|_| "unknown peer".to_owned(), |a| a.to_string());
    // Responses are written as soon as they are complete; Nagle would hold back small ones.
    stream.set_nodelay(true).map_err(std::io::Error::from)?;
    serve_stream(stream, &peer, handler, config).await
}

/// [`serve_connection`] over any byte stream; `peer` names the client in log lines.
pub async fn serve_stream<S, H>(
    stream: S,
    peer: &str,
    handler: Rc<H>,
    config: ConnectionConfig,
) -> Result<(), ConnectionError>
where
    S: AsyncRead + AsyncWrite + Unpin,
    H: Handler,
{
    let in_flight_max = config.in_flight_max.max(1);
    let (reader, writer) = futures_lite::io::split(stream);
    let (sender, receiver) = local_channel::new_bounded(in_flight_max);
    let permits = Rc::new(Semaphore::new(in_flight_max as u64));
    let reading = async move {
        let read = read_requests(reader, sender, handler, &config, &permits).await;
        match read {
            // Done reading: let the writer drain what is in flight.
            Ok(()) => future::pending().await,
            Err(e) => Err(e),
        }
    };
    let result = future::or(reading, write_responses(writer, &receiver)).await;
    // The reader is gone, so the channel is closed: detach whatever was still queued.
    while receiver.recv().await.is_some() {}
    if let Err(e) = &result {
        if e.is_peer_gone() {
            // The client went away: its business, not a fault worth a warning.
            tracing::debug!(peer, reason = %e, "connection closed by the client");
        } else if e.is_idle() {
            tracing::debug!(peer, reason = %e, "closing idle connection");
        } else {
            tracing::warn!(peer, reason = %e, "closing connection");
        }
    }
    result
}

/// A request in progress: its task's answer, the permit that counts it as in flight, and the
/// request memory its bytes hold until the answer is written.
type InFlight = (JoinHandle<Answer>, StaticPermit, MemoryPermit);

/// What a request's task yields: the encoded response, if any.
type Answer = Result<Option<ResponseFrame>, EncodeError>;

async fn read_requests<R: AsyncRead + Unpin, H: Handler>(
    reader: R,
    sender: LocalSender<InFlight>,
    handler: Rc<H>,
    config: &ConnectionConfig,
    permits: &Rc<Semaphore>,
) -> Result<(), ConnectionError> {
    let mut frames =
        FrameReader::new(reader, config.frame_bytes_max).with_timeouts(config.read_timeouts);
    if let Some(budget) = &config.request_memory {
        frames = frames.with_budget(budget.clone());
    }
    loop {
        let Ok(permit) = permits.acquire_static_permit(1).await else {
            return Ok(());
        };
        if config.shutdown.is_triggered() {
            return Ok(());
        }
        let next = future::or(async { Some(frames.next_frame_held().await) }, async {
            config.shutdown.triggered().await;
            None
        });
        let Some(Some((frame, memory))) = next.await.transpose()? else {
            return Ok(()); // end of stream or shutdown
        };
        let task = match decode_request(frame) {
            Ok((header, request)) => {
                let handler = handler.clone();
                glommio::spawn_local(async move {
                    match handler.handle(&header, request).await {
                        Some(response) => encode_response(&header, response).map(Some),
                        None => Ok(None),
                    }
                })
            }
            Err(e) if e.is_unsupported_api_versions() => {
                let header = e.header().cloned().unwrap_or_default();
                glommio::spawn_local(async move {
                    let response = api_versions::unsupported_version_response();
                    encode_response(&header, response.into()).map(Some)
                })
            }
            Err(e) => return Err(e.into()),
        };
        if sender.send((task.detach(), permit, memory)).await.is_err() {
            return Ok(()); // the writer has stopped
        }
    }
}

async fn write_responses<W: AsyncWrite + Unpin>(
    writer: W,
    receiver: &LocalReceiver<InFlight>,
) -> Result<(), ConnectionError> {
    let mut frames = FrameWriter::new(writer);
    let mut unflushed = false;
    loop {
        // Flush only when nothing more is ready, so that a burst of small answers goes out in
        // one write.
        let next = match future::poll_once(receiver.recv()).await {
            Some(next) => next,
            None => {
                flush_if(&mut frames, &mut unflushed).await?;
                receiver.recv().await
            }
        };
        let Some((mut task, _permit, _memory)) = next else {
            break;
        };
        let answer = match future::poll_once(&mut task).await {
            Some(answer) => answer,
            None => {
                flush_if(&mut frames, &mut unflushed).await?;
                task.await
            }
        };
        if let Some(frame) = answer.ok_or(ConnectionError::TaskLost)?? {
            frames.write_chunks(frame.chunks()).await?;
            unflushed = true;
        }
    }
    flush_if(&mut frames, &mut unflushed).await?;
    Ok(())
}

async fn flush_if<W: AsyncWrite + Unpin>(
    frames: &mut FrameWriter<W>,
    unflushed: &mut bool,
) -> std::io::Result<()> {
    if *unflushed {
        frames.flush().await?;
        *unflushed = false;
    }
    Ok(())
}
