//! `serve_connection` on a real glommio executor and loopback sockets.
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::run;
use std::cell::Cell;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_lite::io::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use net::kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, MetadataRequest, MetadataResponse, ProduceResponse, RequestHeader,
};
use net::kafka_protocol::protocol::StrBytes;
use net::{
    ConnectionConfig, ConnectionError, DecodeError, Handler, ProducePartition, ProduceRequest,
    ProduceTopic, Request, Response, ShutdownSignal, api_versions, encode_request,
    serve_connection,
};

/// Answers ApiVersions and Metadata; Metadata waits `delay_ms(correlation id)` first, so later
/// requests can finish before earlier ones. Counts how many requests run at once.
struct TestHandler {
    active: Cell<usize>,
    active_max: Cell<usize>,
    delay_ms: fn(i32) -> u64,
}

impl TestHandler {
    fn new(delay_ms: fn(i32) -> u64) -> Rc<Self> {
        Rc::new(Self {
            active: Cell::new(0),
            active_max: Cell::new(0),
            delay_ms,
        })
    }
}

impl Handler for TestHandler {
    async fn handle(&self, header: &RequestHeader, request: Request) -> Option<Response> {
        self.active.set(self.active.get() + 1);
        self.active_max
            .set(self.active_max.get().max(self.active.get()));
        glommio::timer::sleep(Duration::from_millis((self.delay_ms)(
            header.correlation_id,
        )))
        .await;
        self.active.set(self.active.get() - 1);
        match request {
            Request::ApiVersions(_) => Some(api_versions::response().into()),
            Request::Metadata(_) => Some(
                MetadataResponse::default()
                    .with_throttle_time_ms(header.correlation_id)
                    .into(),
            ),
            Request::Produce(p) if p.acks == 0 => None,
            Request::Produce(_) => Some(ProduceResponse::default().into()),
            _ => None,
        }
    }
}

fn header(api_key: ApiKey, version: i16, correlation_id: i32) -> RequestHeader {
    RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_static_str("test")))
}

async fn send(stream: &mut TcpStream, header: &RequestHeader, request: &Request) {
    let frame = encode_request(header, request).unwrap().concat();
    stream.write_all(&frame).await.unwrap();
}

/// Reads one response frame; `None` if the server closed the connection.
async fn read_frame(stream: &mut TcpStream) -> Option<Bytes> {
    let mut size = [0u8; 4];
    stream.read_exact(&mut size).await.ok()?;
    let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
    stream.read_exact(&mut body).await.ok()?;
    Some(Bytes::from(body))
}

fn correlation_id(frame: &[u8]) -> i32 {
    i32::from_be_bytes([frame[0], frame[1], frame[2], frame[3]])
}

/// How each served connection ended, in the order they ended.
type Ended = Rc<std::cell::RefCell<Vec<Result<(), ConnectionError>>>>;

/// Starts a listener serving each connection with `handler`; returns its address and the
/// results of the connections, as they end.
fn listen<H: Handler>(handler: Rc<H>, config: ConnectionConfig) -> (String, Ended) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let results = Rc::new(std::cell::RefCell::new(Vec::new()));
    let ended = results.clone();
    glommio::spawn_local(async move {
        while let Ok(stream) = listener.accept().await {
            let handler = handler.clone();
            let config = config.clone();
            let ended = ended.clone();
            glommio::spawn_local(async move {
                let result = serve_connection(stream, handler, config).await;
                ended.borrow_mut().push(result);
            })
            .detach();
        }
    })
    .detach();
    (addr, results)
}

#[test]
fn pipelined_requests_run_concurrently_and_are_answered_in_order() {
    run(|| async {
        // The first request is the slowest: responses would come back reversed if they were
        // written as they complete.
        let handler = TestHandler::new(|id| 50 - 10 * id as u64);
        let (addr, _) = listen(handler.clone(), ConnectionConfig::default());
        let mut stream = TcpStream::connect(addr).await.unwrap();
        for id in 0..5 {
            let request = Request::Metadata(MetadataRequest::default());
            send(&mut stream, &header(ApiKey::Metadata, 12, id), &request).await;
        }
        for id in 0..5 {
            let frame = read_frame(&mut stream).await.unwrap();
            assert_eq!(correlation_id(&frame), id);
        }
        assert!(handler.active_max.get() > 1, "requests ran one at a time");
    });
}

#[test]
fn in_flight_requests_are_bounded() {
    run(|| async {
        let handler = TestHandler::new(|_| 20);
        let config = ConnectionConfig {
            in_flight_max: 2,
            ..ConnectionConfig::default()
        };
        let (addr, _) = listen(handler.clone(), config);
        let mut stream = TcpStream::connect(addr).await.unwrap();
        for id in 0..6 {
            let request = Request::Metadata(MetadataRequest::default());
            send(&mut stream, &header(ApiKey::Metadata, 12, id), &request).await;
        }
        for id in 0..6 {
            assert_eq!(correlation_id(&read_frame(&mut stream).await.unwrap()), id);
        }
        assert_eq!(handler.active_max.get(), 2);
    });
}

#[test]
fn acks_zero_produce_gets_no_response_and_order_holds() {
    run(|| async {
        let (addr, _) = listen(TestHandler::new(|_| 0), ConnectionConfig::default());
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let produce = |acks| {
            Request::Produce(ProduceRequest {
                transactional_id: None,
                acks,
                timeout_ms: 1000,
                topics: vec![ProduceTopic {
                    name: StrBytes::from_static_str("t"),
                    partitions: vec![ProducePartition {
                        index: 0,
                        records: Some(BytesMut::from(&b"batch"[..])),
                    }],
                }],
            })
        };
        send(&mut stream, &header(ApiKey::Produce, 9, 1), &produce(0)).await;
        send(&mut stream, &header(ApiKey::Produce, 9, 2), &produce(1)).await;
        let versions = Request::ApiVersions(ApiVersionsRequest::default());
        send(&mut stream, &header(ApiKey::ApiVersions, 3, 3), &versions).await;
        assert_eq!(correlation_id(&read_frame(&mut stream).await.unwrap()), 2);
        assert_eq!(correlation_id(&read_frame(&mut stream).await.unwrap()), 3);
    });
}

#[test]
fn unsupported_api_versions_gets_error_35_and_the_connection_stays_open() {
    run(|| async {
        let (addr, _) = listen(TestHandler::new(|_| 0), ConnectionConfig::default());
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let versions = Request::ApiVersions(ApiVersionsRequest::default());
        let mut frame = encode_request(&header(ApiKey::ApiVersions, 3, 7), &versions)
            .unwrap()
            .concat();
        frame[7] = 99; // api version 99, header still v2
        stream.write_all(&frame).await.unwrap();
        let answer = read_frame(&mut stream).await.unwrap();
        assert_eq!(correlation_id(&answer), 7);
        assert_eq!(&answer[4..6], &[0, 35]);
        let count = i32::from_be_bytes([answer[6], answer[7], answer[8], answer[9]]);
        assert_eq!(count as usize, net::versions::SUPPORTED_APIS.len());
        // Still served: ask again at v3.
        send(&mut stream, &header(ApiKey::ApiVersions, 3, 8), &versions).await;
        assert_eq!(correlation_id(&read_frame(&mut stream).await.unwrap()), 8);
    });
}

#[test]
fn garbage_closes_only_its_own_connection() {
    run(|| async {
        let (addr, results) = listen(TestHandler::new(|_| 0), ConnectionConfig::default());
        let mut good = TcpStream::connect(addr.clone()).await.unwrap();
        let mut bad = TcpStream::connect(addr).await.unwrap();
        // A frame with an unknown api key.
        bad.write_all(&[0, 0, 0, 10, 0x03, 0xe7, 0, 1, 0, 0, 0, 9, 0xff, 0xff])
            .await
            .unwrap();
        assert!(
            read_frame(&mut bad).await.is_none(),
            "server kept the connection"
        );
        let versions = Request::ApiVersions(ApiVersionsRequest::default());
        send(&mut good, &header(ApiKey::ApiVersions, 3, 1), &versions).await;
        assert_eq!(correlation_id(&read_frame(&mut good).await.unwrap()), 1);
        let ended = results.borrow();
        assert_eq!(ended.len(), 1);
        assert!(matches!(
            ended[0],
            Err(ConnectionError::Decode(DecodeError::UnknownApiKey {
                api_key: 999,
                ..
            }))
        ));
    });
}

#[test]
fn an_oversized_frame_is_refused_and_closes_the_connection() {
    run(|| async {
        let config = ConnectionConfig {
            frame_bytes_max: 1024 * 1024,
            ..ConnectionConfig::default()
        };
        let (addr, results) = listen(TestHandler::new(|_| 0), config);
        let mut stream = TcpStream::connect(addr).await.unwrap();
        // Announce 1 GiB and send a few bytes: refused on the size alone.
        stream.write_all(&(1i32 << 30).to_be_bytes()).await.unwrap();
        stream.write_all(&[0; 16]).await.unwrap();
        assert!(read_frame(&mut stream).await.is_none());
        assert!(matches!(
            results.borrow()[0],
            Err(ConnectionError::Frame(net::frame::FrameError::TooLarge {
                size_bytes: 1_073_741_824,
                ..
            }))
        ));
    });
}

#[test]
fn shutdown_finishes_in_flight_requests_then_closes() {
    run(|| async {
        let shutdown = ShutdownSignal::new();
        let config = ConnectionConfig {
            shutdown: shutdown.clone(),
            ..ConnectionConfig::default()
        };
        let (addr, results) = listen(TestHandler::new(|_| 50), config);
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let request = Request::Metadata(MetadataRequest::default());
        send(&mut stream, &header(ApiKey::Metadata, 12, 1), &request).await;
        glommio::timer::sleep(Duration::from_millis(10)).await;
        shutdown.trigger();
        assert!(shutdown.is_triggered());
        assert_eq!(correlation_id(&read_frame(&mut stream).await.unwrap()), 1);
        assert!(read_frame(&mut stream).await.is_none());
        assert!(matches!(results.borrow()[0], Ok(())));
    });
}
