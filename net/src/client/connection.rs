//! One client connection to one broker: connect, negotiate versions, send requests with
//! correlation ids, receive the responses in order.
//!
//! Requests can be pipelined: [`Connection::enqueue`] sends and returns a [`Ticket`] without
//! waiting; [`Connection::receive`] takes the tickets back in the order they were issued. Any
//! failure on the wire (timeout, socket error, a response that does not match) leaves the
//! connection unusable, as in every Kafka client: later calls return [`ClientError::Broken`].

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::marker::PhantomData;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use futures_lite::future;
use futures_lite::io::{ReadHalf, WriteHalf};
use glommio::net::TcpStream;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, ProduceResponse, RequestHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, Message, Request as KafkaRequest, StrBytes};

use super::error::ClientError;
use crate::frame::{FRAME_BYTES_MAX_DEFAULT, FrameBuilder, FrameReader, FrameWriter};
use crate::produce::ProduceRequest;
use crate::versions;

#[derive(Debug, Clone)]
pub struct ConnectOptions {
    pub client_id: String,
    pub connect_timeout_ms: u64,
    /// How long one request may take, from sending to the last byte of its response.
    pub request_timeout_ms: u64,
    /// The largest response accepted.
    pub frame_bytes_max: usize,
}

impl Default for ConnectOptions {
    fn default() -> Self {
        Self {
            client_id: "spindle".to_owned(),
            connect_timeout_ms: 10_000,
            request_timeout_ms: 30_000,
            frame_bytes_max: FRAME_BYTES_MAX_DEFAULT,
        }
    }
}

/// A request sent and not yet answered; redeem it with [`Connection::receive`], in order.
#[derive(Debug)]
#[must_use = "a response that is never received blocks every later one"]
pub struct Ticket<T> {
    correlation_id: i32,
    api_key: ApiKey,
    version: i16,
    response: PhantomData<fn() -> T>,
}

impl<T> Ticket<T> {
    pub fn version(&self) -> i16 {
        self.version
    }
}

/// A request sent and not yet settled.
#[derive(Debug)]
struct Sent {
    correlation_id: i32,
    /// False for Produce with acks=0: Kafka does not answer it (some brokers do anyway).
    answered: bool,
}

/// How many unanswered requests are remembered, in case a broker answers them after all.
const UNANSWERED_MAX: usize = 1024;

/// A connection to one broker.
#[derive(Debug)]
pub struct Connection {
    addr: String,
    reader: FrameReader<ReadHalf<TcpStream>>,
    writer: FrameWriter<WriteHalf<TcpStream>>,
    client_id: StrBytes,
    request_timeout_ms: u64,
    next_correlation_id: i32,
    /// Requests in send order, until their response is read (or, for unanswered ones, until a
    /// later response shows none is coming).
    sent: VecDeque<Sent>,
    /// The version negotiated for each API the broker and we both speak.
    versions: HashMap<i16, i16>,
    /// Why the connection can no longer be used.
    broken: Option<String>,
}

/// The ApiVersions version we try first (flexible, the highest every broker since 2.4 speaks).
const API_VERSIONS_FIRST: i16 = 3;

impl Connection {
    /// Connects and negotiates API versions.
    pub async fn connect(addr: &str, options: &ConnectOptions) -> Result<Self, ClientError> {
        let stream =
            TcpStream::connect_timeout(addr, Duration::from_millis(options.connect_timeout_ms))
                .await
                .map_err(|e| {
                    let source = std::io::Error::from(e);
                    if source.kind() == std::io::ErrorKind::TimedOut {
                        ClientError::Timeout {
                            what: "connect",
                            addr: addr.to_owned(),
                            timeout_ms: options.connect_timeout_ms,
                        }
                    } else {
                        ClientError::Unreachable {
                            addr: addr.to_owned(),
                            source,
                        }
                    }
                })?;
        stream
            .set_nodelay(true)
            .map_err(|e| ClientError::Unreachable {
                addr: addr.to_owned(),
                source: e.into(),
            })?;
        let (reader, writer) = futures_lite::io::split(stream);
        let mut connection = Self {
            addr: addr.to_owned(),
            reader: FrameReader::new(reader, options.frame_bytes_max),
            writer: FrameWriter::new(writer),
            client_id: StrBytes::from_string(options.client_id.clone()),
            request_timeout_ms: options.request_timeout_ms,
            next_correlation_id: 0,
            sent: VecDeque::new(),
            versions: HashMap::new(),
            broken: None,
        };
        connection.negotiate().await?;
        Ok(connection)
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// The version we use for `api_key`, `None` if the broker and we share none.
    pub fn version(&self, api_key: ApiKey) -> Option<i16> {
        self.versions.get(&(api_key as i16)).copied()
    }

    /// Sends a request and waits for its response.
    pub async fn send<R: KafkaRequest>(&mut self, request: &R) -> Result<R::Response, ClientError> {
        let ticket = self.enqueue(request).await?;
        self.receive(ticket).await
    }

    /// Sends a request at no higher than `version_max` and waits for its response: for
    /// requests whose newer versions need something we lack (a Fetch by topic id when the broker
    /// gave no ids).
    pub async fn send_at_most<R: KafkaRequest>(
        &mut self,
        request: &R,
        version_max: i16,
    ) -> Result<R::Response, ClientError> {
        let version = self.version_for::<R>(version_max)?;
        let ticket = self.enqueue_at(request, version).await?;
        self.receive(ticket).await
    }

    /// The version to send `R` at: the negotiated one, at most `version_max` and at most what
    /// `R`'s own encoder can write (kafka-protocol's per-API table may name newer versions than
    /// its request type encodes: OffsetFetch v10 against Kafka 4.4).
    fn version_for<R: KafkaRequest>(&self, version_max: i16) -> Result<i16, ClientError> {
        let api_key = api_key_of::<R>()?;
        let version = self
            .negotiated(api_key)?
            .min(version_max)
            .min(R::VERSIONS.max);
        if version < our_versions(api_key).0.max(R::VERSIONS.min) {
            return Err(ClientError::Unsupported {
                addr: self.addr.clone(),
                api: api_key,
            });
        }
        Ok(version)
    }

    /// Sends a request at the negotiated version without waiting for its response.
    pub async fn enqueue<R: KafkaRequest>(
        &mut self,
        request: &R,
    ) -> Result<Ticket<R::Response>, ClientError> {
        let version = self.version_for::<R>(i16::MAX)?;
        self.enqueue_at(request, version).await
    }

    /// Sends a Produce request (records written without copying). `None` for acks=0, which
    /// the broker does not answer.
    pub async fn enqueue_produce(
        &mut self,
        request: &ProduceRequest<Bytes>,
    ) -> Result<Option<Ticket<ProduceResponse>>, ClientError> {
        let version = self.negotiated(ApiKey::Produce)?;
        let answered = request.acks != 0;
        let ticket = self
            .send_frame(ApiKey::Produce, version, answered, |frame| {
                request.encode(frame, version).map_err(|e| e.to_string())
            })
            .await?;
        Ok(answered.then_some(ticket))
    }

    /// Waits for the response of the oldest request in flight, which `ticket` must be.
    pub async fn receive<T: Decodable>(&mut self, ticket: Ticket<T>) -> Result<T, ClientError> {
        let mut body = self.receive_body(&ticket).await?;
        let response = T::decode(&mut body, ticket.version);
        response.map_err(|e| self.fail(format!("decoding {:?}: {e}", ticket.api_key)))
    }

    async fn enqueue_at<R: KafkaRequest>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<Ticket<R::Response>, ClientError> {
        let api_key = api_key_of::<R>()?;
        self.send_frame(api_key, version, true, |frame| {
            let buf = frame.buf();
            buf.reserve(request.compute_size(version).map_err(|e| e.to_string())?);
            request.encode(buf, version).map_err(|e| e.to_string())
        })
        .await
    }

    /// Writes one request frame: header, then the body `encode` writes.
    async fn send_frame<T>(
        &mut self,
        api_key: ApiKey,
        version: i16,
        answered: bool,
        encode: impl FnOnce(&mut FrameBuilder) -> Result<(), String>,
    ) -> Result<Ticket<T>, ClientError> {
        self.usable()?;
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(api_key as i16)
            .with_request_api_version(version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut frame = FrameBuilder::with_capacity(256);
        let encoded = header
            .encode(frame.buf(), api_key.request_header_version(version))
            .map_err(|e| e.to_string())
            .and_then(|()| encode(&mut frame))
            .and_then(|()| frame.finish().map_err(|e| e.to_string()));
        // An encoding failure is ours, not the wire's: the connection stays usable.
        let chunks = encoded.map_err(|reason| {
            ClientError::Usage(format!("encoding {api_key:?} v{version}: {reason}"))
        })?;
        let timeout_ms = self.request_timeout_ms;
        let written = with_timeout(timeout_ms, async {
            self.writer.write_chunks(&chunks).await?;
            self.writer.flush().await
        })
        .await;
        match written {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(self.fail(format!("writing: {e}"))),
            None => return Err(self.timed_out("request write")),
        }
        if !answered
            && self.sent.len() >= UNANSWERED_MAX
            && self.sent.front().is_some_and(|s| !s.answered)
        {
            self.sent.pop_front();
        }
        self.sent.push_back(Sent {
            correlation_id,
            answered,
        });
        Ok(Ticket {
            correlation_id,
            api_key,
            version,
            response: PhantomData,
        })
    }

    /// Reads the next response frame and returns its body, after the response header.
    async fn receive_body<T>(&mut self, ticket: &Ticket<T>) -> Result<BytesMut, ClientError> {
        self.usable()?;
        let expected = self
            .sent
            .iter()
            .find(|s| s.answered)
            .map(|s| s.correlation_id);
        if expected != Some(ticket.correlation_id) {
            return Err(ClientError::Usage(format!(
                "responses arrive in request order: ticket {} is not next",
                ticket.correlation_id
            )));
        }
        let mut frame = loop {
            let read = with_timeout(self.request_timeout_ms, self.reader.next_frame()).await;
            let mut frame = match read {
                Some(Ok(Some(frame))) => frame,
                Some(Ok(None)) => return Err(self.fail("closed by the broker".to_owned())),
                Some(Err(e)) => return Err(self.fail(format!("reading: {e}"))),
                None => return Err(self.timed_out("response")),
            };
            if frame.len() < 4 {
                return Err(self.fail("response shorter than its header".to_owned()));
            }
            let correlation_id = frame.get_i32();
            // Unanswered requests sent before this response's request will stay unanswered;
            // a response to one of them is skipped.
            let mut skip = false;
            while let Some(front) = self.sent.front().filter(|s| !s.answered) {
                skip |= front.correlation_id == correlation_id;
                self.sent.pop_front();
                if skip {
                    break;
                }
            }
            if skip {
                continue;
            }
            self.sent.pop_front();
            if correlation_id != ticket.correlation_id {
                return Err(self.fail(format!(
                    "response for correlation id {correlation_id}, expected {}",
                    ticket.correlation_id
                )));
            }
            break frame;
        };
        // ApiVersions responses have header v0 at every version.
        let flexible_header = ticket.api_key != ApiKey::ApiVersions
            && ticket.api_key.response_header_version(ticket.version) >= 1;
        if flexible_header && crate::wire::skip_tagged_fields(&mut frame).is_err() {
            return Err(self.fail("malformed response header".to_owned()));
        }
        Ok(frame)
    }

    /// Asks the broker which versions it speaks, and picks per API the highest we share.
    async fn negotiate(&mut self) -> Result<(), ClientError> {
        let request = ApiVersionsRequest::default()
            .with_client_software_name(StrBytes::from_static_str("spindle-net"))
            .with_client_software_version(StrBytes::from_static_str(env!("CARGO_PKG_VERSION")));
        let mut response = self.api_versions(&request, API_VERSIONS_FIRST).await?;
        if response.error_code == UNSUPPORTED_VERSION {
            // The broker listed its ApiVersions range in a v0 body: ask again within it.
            let theirs = response
                .api_keys
                .iter()
                .find(|k| k.api_key == ApiKey::ApiVersions as i16)
                .map_or(0, |k| k.max_version);
            let version = theirs.min(ApiVersionsRequest::VERSIONS.max);
            response = self.api_versions(&request, version).await?;
        }
        super::error::check(
            ApiKey::ApiVersions,
            || self.addr.clone(),
            response.error_code,
            None,
        )?;
        for theirs in &response.api_keys {
            let Ok(api_key) = ApiKey::try_from(theirs.api_key) else {
                continue;
            };
            let ours = our_versions(api_key);
            let version = ours.1.min(theirs.max_version);
            if version >= ours.0.max(theirs.min_version) {
                self.versions.insert(theirs.api_key, version);
            }
        }
        Ok(())
    }

    /// One ApiVersions exchange; an UNSUPPORTED_VERSION answer is read as the v0 body it is.
    async fn api_versions(
        &mut self,
        request: &ApiVersionsRequest,
        version: i16,
    ) -> Result<ApiVersionsResponse, ClientError> {
        let ticket = self.enqueue_at(request, version).await?;
        let mut body = self.receive_body(&ticket).await?;
        let error_code = body.first_chunk::<2>().map(|c| i16::from_be_bytes(*c));
        let body_version = if error_code == Some(UNSUPPORTED_VERSION) {
            0
        } else {
            version
        };
        ApiVersionsResponse::decode(&mut body, body_version)
            .map_err(|e| self.fail(format!("decoding ApiVersions: {e}")))
    }

    fn negotiated(&self, api_key: ApiKey) -> Result<i16, ClientError> {
        self.version(api_key)
            .ok_or_else(|| ClientError::Unsupported {
                addr: self.addr.clone(),
                api: api_key,
            })
    }

    fn usable(&self) -> Result<(), ClientError> {
        match &self.broken {
            Some(reason) => Err(ClientError::Broken {
                addr: self.addr.clone(),
                reason: reason.clone(),
            }),
            None => Ok(()),
        }
    }

    /// Marks the connection unusable and returns the error that did it.
    fn fail(&mut self, reason: String) -> ClientError {
        self.broken = Some(reason.clone());
        ClientError::Protocol {
            addr: self.addr.clone(),
            reason,
        }
    }

    fn timed_out(&mut self, what: &'static str) -> ClientError {
        self.broken = Some(format!("{what} timed out"));
        ClientError::Timeout {
            what,
            addr: self.addr.clone(),
            timeout_ms: self.request_timeout_ms,
        }
    }
}

const UNSUPPORTED_VERSION: i16 = 35;

/// The versions this client can encode and decode for an API.
fn our_versions(api_key: ApiKey) -> (i16, i16) {
    let theirs = api_key.valid_versions();
    match api_key {
        // Our own encoder writes Produce requests; its range is the server's.
        ApiKey::Produce => {
            versions::support(ApiKey::Produce).map_or((theirs.min, theirs.max), |s| (s.min, s.max))
        }
        _ => (theirs.min, theirs.max),
    }
}

fn api_key_of<R: KafkaRequest>() -> Result<ApiKey, ClientError> {
    ApiKey::try_from(R::KEY).map_err(|()| ClientError::Usage(format!("unknown api key {}", R::KEY)))
}

/// `None` if `work` takes longer than `timeout_ms`.
async fn with_timeout<T>(timeout_ms: u64, work: impl Future<Output = T>) -> Option<T> {
    future::or(async { Some(work.await) }, async {
        glommio::timer::sleep(Duration::from_millis(timeout_ms)).await;
        None
    })
    .await
}
