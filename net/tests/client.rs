//! The client end to end: against our own server with a small in-memory broker (always), and
//! against a real Kafka-compatible broker (ignored by default, see `against_a_real_broker`).
#![allow(clippy::unwrap_used)] // tests: a failed unwrap is a failed test

mod common;

use common::run;
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use glommio::net::TcpListener;
use net::client::batch::{Compression, NewRecord, RecordBatchBuilder, decode_batches};
use net::client::{
    Client, ClientError, ConfigResource, ConnectOptions, EARLIEST_TIMESTAMP, LATEST_TIMESTAMP,
    NewTopic, produce_ack,
};
use net::kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use net::kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use net::kafka_protocol::messages::produce_response::{
    PartitionProduceResponse, TopicProduceResponse,
};
use net::kafka_protocol::messages::{
    BrokerId, ListOffsetsResponse, MetadataResponse, ProduceResponse, RequestHeader, TopicName,
};
use net::kafka_protocol::protocol::StrBytes;
use net::{
    ConnectionConfig, FetchPartitionResponse, FetchResponse, FetchTopicResponse, Handler,
    ProduceRequest, Request, Response, api_versions, serve_connection,
};
use uuid::Uuid;

const TOPIC: &str = "orders";
const TOPIC_ID: Uuid = Uuid::from_u128(0x5eed);
const PARTITIONS: i32 = 2;

/// One broker (node 1) holding one topic in memory; it assigns offsets by patching each batch's
/// base offset in place, as the real broker does.
struct MiniBroker {
    port: i32,
    logs: RefCell<HashMap<i32, Log>>,
}

/// One partition: (base offset, batch) in log order, and the next offset.
type Log = (Vec<(i64, Bytes)>, i64);

impl MiniBroker {
    fn metadata(&self, header: &RequestHeader) -> MetadataResponse {
        let partitions = (0..PARTITIONS)
            .map(|index| {
                MetadataResponsePartition::default()
                    .with_partition_index(index)
                    .with_leader_id(BrokerId(1))
                    .with_replica_nodes(vec![BrokerId(1)])
                    .with_isr_nodes(vec![BrokerId(1)])
            })
            .collect();
        let mut topic = MetadataResponseTopic::default()
            .with_name(Some(TopicName(StrBytes::from_static_str(TOPIC))))
            .with_partitions(partitions);
        if header.request_api_version >= 10 {
            topic.topic_id = TOPIC_ID;
        }
        MetadataResponse::default()
            .with_brokers(vec![
                MetadataResponseBroker::default()
                    .with_node_id(BrokerId(1))
                    .with_host(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(self.port),
            ])
            .with_controller_id(BrokerId(1))
            .with_topics(vec![topic])
    }

    fn produce(&self, request: ProduceRequest) -> ProduceResponse {
        let mut logs = self.logs.borrow_mut();
        let topics = request
            .topics
            .into_iter()
            .map(|topic| {
                let partitions = topic
                    .partitions
                    .into_iter()
                    .map(|p| {
                        let (log, next) = logs.entry(p.index).or_default();
                        let Some(mut batch) = p.records else {
                            return PartitionProduceResponse::default()
                                .with_index(p.index)
                                .with_error_code(87); // INVALID_RECORD
                        };
                        let base = *next;
                        batch[..8].copy_from_slice(&base.to_be_bytes());
                        let last_delta =
                            i32::from_be_bytes([batch[23], batch[24], batch[25], batch[26]]);
                        *next += i64::from(last_delta) + 1;
                        log.push((base, batch.freeze()));
                        PartitionProduceResponse::default()
                            .with_index(p.index)
                            .with_base_offset(base)
                    })
                    .collect();
                TopicProduceResponse::default()
                    .with_name(TopicName(topic.name))
                    .with_partition_responses(partitions)
            })
            .collect();
        ProduceResponse::default().with_responses(topics)
    }

    fn fetch(&self, request: &net::kafka_protocol::messages::FetchRequest) -> FetchResponse {
        let logs = self.logs.borrow();
        let topics = request
            .topics
            .iter()
            .map(|topic| FetchTopicResponse {
                name: topic.topic.0.clone(),
                topic_id: topic.topic_id,
                partitions: topic
                    .partitions
                    .iter()
                    .map(|p| {
                        let (log, next) = logs.get(&p.partition).cloned().unwrap_or_default();
                        FetchPartitionResponse {
                            partition_index: p.partition,
                            high_watermark: next,
                            last_stable_offset: next,
                            records: log
                                .into_iter()
                                .filter(|(base, _)| *base >= p.fetch_offset)
                                .map(|(_, batch)| batch)
                                .collect(),
                            ..Default::default()
                        }
                    })
                    .collect(),
            })
            .collect();
        FetchResponse {
            topics,
            ..Default::default()
        }
    }

    fn list_offsets(
        &self,
        request: &net::kafka_protocol::messages::ListOffsetsRequest,
    ) -> ListOffsetsResponse {
        let logs = self.logs.borrow();
        let topics = request
            .topics
            .iter()
            .map(|t| {
                let partitions = t
                    .partitions
                    .iter()
                    .map(|p| {
                        let next = logs.get(&p.partition_index).map_or(0, |l| l.1);
                        let offset = if p.timestamp == EARLIEST_TIMESTAMP {
                            0
                        } else {
                            next
                        };
                        ListOffsetsPartitionResponse::default()
                            .with_partition_index(p.partition_index)
                            .with_offset(offset)
                    })
                    .collect();
                ListOffsetsTopicResponse::default()
                    .with_name(t.name.clone())
                    .with_partitions(partitions)
            })
            .collect();
        ListOffsetsResponse::default().with_topics(topics)
    }
}

impl Handler for MiniBroker {
    async fn handle(&self, header: &RequestHeader, request: Request) -> Option<Response> {
        Some(match request {
            Request::ApiVersions(_) => api_versions::response().into(),
            Request::Metadata(_) => self.metadata(header).into(),
            Request::Produce(p) if p.acks == 0 => {
                self.produce(p);
                return None;
            }
            Request::Produce(p) => self.produce(p).into(),
            Request::Fetch(f) => self.fetch(&f).into(),
            Request::ListOffsets(l) => self.list_offsets(&l).into(),
            _ => return None,
        })
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn batch(compression: Compression, first: usize, count: usize) -> Bytes {
    let mut builder = RecordBatchBuilder::new(compression);
    for i in first..first + count {
        builder.push(NewRecord {
            key: Some(Bytes::from(format!("key-{i}"))),
            value: Some(Bytes::from(format!("value-{i}"))),
            headers: vec![("n".to_owned(), Some(Bytes::from(i.to_string())))],
            timestamp_ms: now_ms(),
        });
    }
    builder.build().unwrap()
}

/// Produces batches (one at a time, then pipelined, then with acks=0), fetches them back and
/// checks every record and offset. Works against any broker holding `topic`.
async fn produce_and_fetch(client: &mut Client, topic: &str, partition: i32) {
    let start = client
        .list_offset(topic, partition, LATEST_TIMESTAMP)
        .await
        .unwrap();
    let ack = client
        .produce(topic, partition, batch(Compression::None, 0, 3), -1, 5000)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ack.base_offset, start);

    // Pipelined: five batches in flight on the leader's connection, answers in order.
    let connection = client.leader(topic, partition).await.unwrap();
    let mut tickets = Vec::new();
    for (i, compression) in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
        Compression::None,
    ]
    .into_iter()
    .enumerate()
    {
        let request =
            ProduceRequest::single(topic, partition, batch(compression, 3 + 2 * i, 2), 1, 5000);
        tickets.push(connection.enqueue_produce(&request).await.unwrap().unwrap());
    }
    let mut expected_base = start + 3;
    for ticket in tickets {
        let response = connection.receive(ticket).await.unwrap();
        let ack = produce_ack(&response, topic, partition).unwrap();
        assert_eq!(ack.base_offset, expected_base);
        expected_base += 2;
    }
    assert!(
        client
            .produce(topic, partition, batch(Compression::None, 13, 1), 0, 5000)
            .await
            .unwrap()
            .is_none()
    );

    // acks=0 is not answered, so wait until the broker has it.
    let mut end = 0;
    for _ in 0..100 {
        end = client
            .list_offset(topic, partition, LATEST_TIMESTAMP)
            .await
            .unwrap();
        if end == start + 14 {
            break;
        }
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert_eq!(end, start + 14);

    let mut records = Vec::new();
    let mut offset = start;
    while offset < end {
        let fetched = client
            .fetch(topic, partition, offset, 1024 * 1024, 500)
            .await
            .unwrap();
        assert!(fetched.high_watermark >= end);
        let batch_records = decode_batches(&fetched.records, 16 << 20).unwrap();
        let fresh: Vec<_> = batch_records
            .into_iter()
            .filter(|r| r.offset >= offset)
            .collect();
        assert!(!fresh.is_empty(), "fetch at {offset} made no progress");
        offset = fresh.last().map_or(offset, |r| r.offset + 1);
        records.extend(fresh);
    }
    assert_eq!(records.len(), 14);
    for (i, record) in records.iter().enumerate() {
        assert_eq!(record.offset, start + i as i64);
        assert_eq!(record.key.as_deref(), Some(format!("key-{i}").as_bytes()));
        assert_eq!(
            record.value.as_deref(),
            Some(format!("value-{i}").as_bytes())
        );
        assert_eq!(
            record.headers,
            vec![("n".to_owned(), Some(Bytes::from(i.to_string())))]
        );
    }
}

#[test]
fn against_our_server() {
    run(|| async {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let broker = Rc::new(MiniBroker {
            port: i32::from(addr.port()),
            logs: RefCell::new(HashMap::new()),
        });
        glommio::spawn_local(async move {
            while let Ok(stream) = listener.accept().await {
                let broker = broker.clone();
                glommio::spawn_local(serve_connection(
                    stream,
                    broker,
                    ConnectionConfig::default(),
                ))
                .detach();
            }
        })
        .detach();

        let mut client = Client::connect(&addr.to_string(), ConnectOptions::default())
            .await
            .unwrap();
        let metadata = client.metadata(None).await.unwrap();
        assert_eq!(metadata.controller_id, 1);
        assert_eq!(metadata.topics[0].partitions.len(), PARTITIONS as usize);
        // The highest versions both sides speak: Fetch identifies topics by id.
        let connection = client.leader(TOPIC, 1).await.unwrap();
        assert_eq!(
            connection.version(net::kafka_protocol::messages::ApiKey::Fetch),
            Some(17)
        );
        assert_eq!(
            connection.version(net::kafka_protocol::messages::ApiKey::Produce),
            Some(12)
        );
        produce_and_fetch(&mut client, TOPIC, 1).await;
        // The mini broker never answers DescribeConfigs: a timeout, then the connection is
        // known broken.
        let options = ConnectOptions {
            request_timeout_ms: 200,
            ..ConnectOptions::default()
        };
        let mut impatient = Client::connect(&addr.to_string(), options).await.unwrap();
        let resource = ConfigResource::Topic(TOPIC);
        let error = impatient
            .describe_configs(resource, None)
            .await
            .unwrap_err();
        assert!(
            matches!(
                error,
                ClientError::Timeout {
                    timeout_ms: 200,
                    ..
                }
            ),
            "{error}"
        );
        let error = impatient
            .describe_configs(resource, None)
            .await
            .unwrap_err();
        assert!(matches!(error, ClientError::Broken { .. }), "{error}");
    });
}

#[test]
fn unreachable_brokers_are_reported_with_their_address() {
    run(|| async {
        // Bind then drop, so nothing listens on the port.
        let addr = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .to_string();
        let error = Client::connect(&addr, ConnectOptions::default())
            .await
            .unwrap_err();
        match error {
            ClientError::Unreachable { addr: reported, .. } => assert_eq!(reported, addr),
            other => panic!("{other}"),
        }
    });
}

/// Against a real Kafka-compatible broker, e.g. noida-db:
/// `noida-db start --only kafka --kafka-port 19092 --host 127.0.0.1 --data-dir DIR`, then
/// `NET_TEST_KAFKA=127.0.0.1:19092 cargo test -p net --test client -- --ignored`.
#[test]
#[ignore = "needs a Kafka-compatible broker at $NET_TEST_KAFKA"]
fn against_a_real_broker() {
    let Ok(addr) = std::env::var("NET_TEST_KAFKA") else {
        panic!("set NET_TEST_KAFKA to a broker address, e.g. 127.0.0.1:19092");
    };
    run(move || async move {
        let mut client = Client::connect(&addr, ConnectOptions::default())
            .await
            .unwrap();
        let topic = format!("net-test-{}", now_ms());
        client
            .create_topics(
                &[NewTopic {
                    name: topic.clone(),
                    partitions: 3,
                    replication_factor: 1,
                    configs: vec![("retention.ms".to_owned(), "3600000".to_owned())],
                }],
                10_000,
            )
            .await
            .unwrap();
        let again = client
            .create_topics(
                &[NewTopic {
                    name: topic.clone(),
                    partitions: 3,
                    replication_factor: 1,
                    configs: vec![],
                }],
                10_000,
            )
            .await
            .unwrap_err();
        assert_eq!(again.kafka_code(), Some(36), "{again}"); // TOPIC_ALREADY_EXISTS

        let metadata = client.metadata(Some(&[topic.as_str()])).await.unwrap();
        assert_eq!(metadata.topics[0].partitions.len(), 3);
        produce_and_fetch(&mut client, &topic, 2).await;
        assert_eq!(
            client
                .list_offset(&topic, 2, EARLIEST_TIMESTAMP)
                .await
                .unwrap(),
            0
        );

        client.create_partitions(&topic, 4, 10_000).await.unwrap();
        let metadata = client.metadata(Some(&[topic.as_str()])).await.unwrap();
        assert_eq!(metadata.topics[0].partitions.len(), 4);

        let configs = client
            .describe_configs(ConfigResource::Topic(&topic), Some(&["retention.ms"]))
            .await
            .unwrap();
        assert_eq!(configs[0].value.as_deref(), Some("3600000"));
        client
            .incremental_alter_configs(
                ConfigResource::Topic(&topic),
                &[net::client::ConfigChange::Set(
                    "retention.ms".to_owned(),
                    "7200000".to_owned(),
                )],
            )
            .await
            .unwrap();
        let configs = client
            .describe_configs(ConfigResource::Topic(&topic), Some(&["retention.ms"]))
            .await
            .unwrap();
        assert_eq!(configs[0].value.as_deref(), Some("7200000"));

        let group = format!("{topic}-group");
        client
            .offset_commit(&group, &topic, &[(0, 5), (2, 9)])
            .await
            .unwrap();
        let committed = client.offset_fetch(&group, &topic, &[0, 2]).await.unwrap();
        let offsets: Vec<(i32, i64)> = committed.iter().map(|c| (c.partition, c.offset)).collect();
        assert_eq!(offsets, vec![(0, 5), (2, 9)]);
        let groups = client.list_groups().await.unwrap();
        assert!(groups.iter().any(|g| g.group_id == group), "{groups:?}");
        let described = client.describe_group(&group).await.unwrap();
        assert_eq!(described.group_id.0.as_str(), group);
        client.delete_group(&group).await.unwrap();

        client
            .delete_topics(&[topic.as_str()], 10_000)
            .await
            .unwrap();
        let unknown = client.fetch(&topic, 0, 0, 1024, 10).await;
        assert!(unknown.is_err());
    });
}
