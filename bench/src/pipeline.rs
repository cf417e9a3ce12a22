//! A produce connection split in two halves, so that one task writes requests while another
//! reads the answers as they come: acknowledgement latency is then when the answer arrived, not
//! when the sender got around to looking. (`net::client::Connection` pipelines too, but sends
//! and receives through one `&mut self`.)
//!
//! The socket skips ApiVersions: the Produce version comes from a negotiated
//! `net::client::Connection` to the same broker, and brokers answer requests without it.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::future;
use futures_lite::io::{ReadHalf, WriteHalf};
use glommio::net::TcpStream;
use net::ProduceRequest;
use net::client::{ClientError, ConnectOptions};
use net::frame::{FrameBuilder, FrameReader, FrameWriter};
use net::kafka_protocol::messages::{ApiKey, ProduceResponse, RequestHeader, ResponseHeader};
use net::kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// The sending half.
#[derive(Debug)]
pub struct ProduceSender {
    addr: String,
    writer: FrameWriter<WriteHalf<TcpStream>>,
    client_id: StrBytes,
    version: i16,
    next_correlation_id: i32,
    timeout_ms: u64,
}

/// The receiving half.
#[derive(Debug)]
pub struct ProduceReceiver {
    addr: String,
    reader: FrameReader<ReadHalf<TcpStream>>,
    version: i16,
    timeout_ms: u64,
}

/// Connects to `addr` for Produce requests at `version`.
pub async fn connect(
    addr: &str,
    version: i16,
    options: &ConnectOptions,
) -> Result<(ProduceSender, ProduceReceiver), ClientError> {
    let unreachable = |source: std::io::Error| ClientError::Unreachable {
        addr: addr.to_owned(),
        source,
    };
    let connect =
        TcpStream::connect_timeout(addr, Duration::from_millis(options.connect_timeout_ms));
    let stream = connect.await.map_err(|e| unreachable(e.into()))?;
    stream
        .set_nodelay(true)
        .map_err(|e| unreachable(e.into()))?;
    let (reader, writer) = futures_lite::io::split(stream);
    let sender = ProduceSender {
        addr: addr.to_owned(),
        writer: FrameWriter::new(writer),
        client_id: StrBytes::from_string(options.client_id.clone()),
        version,
        next_correlation_id: 0,
        timeout_ms: options.request_timeout_ms,
    };
    let receiver = ProduceReceiver {
        addr: addr.to_owned(),
        reader: FrameReader::new(reader, options.frame_bytes_max),
        version,
        timeout_ms: options.request_timeout_ms,
    };
    Ok((sender, receiver))
}

impl ProduceSender {
    /// Writes one request; returns its correlation id, to hand to [`ProduceReceiver::receive`]
    /// unless acks is 0 (no answer comes).
    pub async fn send(&mut self, request: &ProduceRequest<Bytes>) -> Result<i32, ClientError> {
        let correlation_id = self.next_correlation_id;
        self.next_correlation_id = self.next_correlation_id.wrapping_add(1);
        let header = RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(self.version)
            .with_correlation_id(correlation_id)
            .with_client_id(Some(self.client_id.clone()));
        let mut frame = FrameBuilder::with_capacity(256);
        let usage = |e: String| ClientError::Usage(format!("encoding a Produce request: {e}"));
        header
            .encode(
                frame.buf(),
                ApiKey::Produce.request_header_version(self.version),
            )
            .map_err(|e| usage(e.to_string()))?;
        request
            .encode(&mut frame, self.version)
            .map_err(|e| usage(e.to_string()))?;
        let chunks = frame.finish().map_err(|e| usage(e.to_string()))?;
        let written = with_timeout(self.timeout_ms, async {
            self.writer.write_chunks(&chunks).await?;
            self.writer.flush().await
        })
        .await;
        match written {
            Some(Ok(())) => Ok(correlation_id),
            Some(Err(e)) => Err(broken(&self.addr, format!("writing: {e}"))),
            None => Err(ClientError::Timeout {
                what: "produce request write",
                addr: self.addr.clone(),
                timeout_ms: self.timeout_ms,
            }),
        }
    }
}

impl ProduceReceiver {
    /// Reads the next answer, which must be for `correlation_id`.
    pub async fn receive(&mut self, correlation_id: i32) -> Result<ProduceResponse, ClientError> {
        let read = with_timeout(self.timeout_ms, self.reader.next_frame()).await;
        let mut frame: BytesMut = match read {
            Some(Ok(Some(frame))) => frame,
            Some(Ok(None)) => return Err(broken(&self.addr, "closed by the broker".into())),
            Some(Err(e)) => return Err(broken(&self.addr, format!("reading: {e}"))),
            None => {
                return Err(ClientError::Timeout {
                    what: "produce response",
                    addr: self.addr.clone(),
                    timeout_ms: self.timeout_ms,
                });
            }
        };
        let header_version = ApiKey::Produce.response_header_version(self.version);
        let header = ResponseHeader::decode(&mut frame, header_version)
            .map_err(|e| broken(&self.addr, format!("response header: {e}")))?;
        if header.correlation_id != correlation_id {
            return Err(broken(
                &self.addr,
                format!(
                    "response for correlation id {}, expected {correlation_id}",
                    header.correlation_id
                ),
            ));
        }
        ProduceResponse::decode(&mut frame, self.version)
            .map_err(|e| broken(&self.addr, format!("decoding a Produce response: {e}")))
    }
}

fn broken(addr: &str, reason: String) -> ClientError {
    ClientError::Protocol {
        addr: addr.to_owned(),
        reason,
    }
}

/// `None` if `work` takes longer than `timeout_ms`.
pub async fn with_timeout<T>(timeout_ms: u64, work: impl Future<Output = T>) -> Option<T> {
    future::or(async { Some(work.await) }, async {
        glommio::timer::sleep(Duration::from_millis(timeout_ms)).await;
        None
    })
    .await
}
