//! `ReplicaLinks` on loopback: two shards' links exchange every message kind both ways (an
//! Append of several MiB among frames of many partitions), a link dials again after the
//! accepting side went away, a handshake of the wrong shard or cluster is refused, and the
//! queue and the reply path say when they cannot take a message.
#![allow(clippy::unwrap_used)] // test code: a panic is a failed test

use std::cell::RefCell;
use std::future::Future;
use std::net::SocketAddr;
use std::rc::{Rc, Weak};
use std::time::Duration;

use broker::replication::link::{QUEUE_BYTES_MAX, ReplicaHandler, ReplicaLinks, SendError};
use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use model::{NodeId, ShardId, TopicId};
use quorum::replica_wire::{PartitionKey, ReplicaMessage};

const CLUSTER: &str = "test-cluster";
const WAIT: Duration = Duration::from_secs(20);

/// What a shard's handler was told, in order.
#[derive(Default)]
struct Recorder {
    messages: RefCell<Vec<(NodeId, ReplicaMessage)>>,
    disconnected: RefCell<Vec<NodeId>>,
}

impl ReplicaHandler for Recorder {
    fn message(&self, from: NodeId, message: ReplicaMessage) {
        self.messages.borrow_mut().push((from, message));
    }
    fn disconnected(&self, node: NodeId) {
        self.disconnected.borrow_mut().push(node);
    }
}

struct Node {
    id: NodeId,
    recorder: Rc<Recorder>,
    links: Rc<ReplicaLinks>,
}

impl Node {
    async fn start(id: i32, shard: u16, cluster: &str, port: u16) -> Node {
        let recorder = Rc::new(Recorder::default());
        let handler: Weak<dyn ReplicaHandler> =
            Rc::downgrade(&recorder) as Weak<dyn ReplicaHandler>;
        let links = ReplicaLinks::listen(
            NodeId(id),
            ShardId(shard),
            cluster,
            "127.0.0.1",
            port,
            handler,
        )
        .await
        .unwrap();
        Node {
            id: NodeId(id),
            recorder,
            links,
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.links.port()))
    }

    /// Waits until `n` messages have arrived, and takes them.
    async fn take(&self, n: usize) -> Vec<(NodeId, ReplicaMessage)> {
        until(|| self.recorder.messages.borrow().len() >= n).await;
        let got: Vec<_> = self.recorder.messages.borrow_mut().drain(..).collect();
        assert_eq!(got.len(), n, "no more messages than sent");
        got
    }
}

fn run<Fut: Future<Output = ()> + 'static>(f: impl FnOnce() -> Fut + Send + 'static) {
    glommio::LocalExecutorBuilder::default()
        .spawn(f)
        .expect("executor starts")
        .join()
        .expect("test body does not panic");
}

/// Polls `done` until it holds; fails the test after `WAIT`.
async fn until(done: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + WAIT;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "not done within {WAIT:?}"
        );
        glommio::timer::sleep(Duration::from_millis(5)).await;
    }
}

fn key(partition: i32) -> PartitionKey {
    PartitionKey {
        topic: TopicId(uuid::Uuid::from_u128(0xfeed_0000 + 7)),
        partition,
    }
}

/// An Append of `count` batches of `size` bytes, each filled with its own pattern.
fn append(partition: i32, count: usize, size: usize) -> ReplicaMessage {
    let batches = (0..count)
        .map(|i| {
            Bytes::from(
                (0..size)
                    .map(|j| (i * 31 + j * 7 + partition as usize) as u8)
                    .collect::<Vec<u8>>(),
            )
        })
        .collect();
    ReplicaMessage::Append {
        key: key(partition),
        leader_epoch: 3,
        high_watermark: 1000 + i64::from(partition),
        base_offset: 2000 + i64::from(partition),
        batches,
    }
}

/// One message of every kind for `partition`, the Append with `batch_count` batches of
/// `batch_bytes`.
fn every_kind(partition: i32, batch_count: usize, batch_bytes: usize) -> Vec<ReplicaMessage> {
    let k = key(partition);
    vec![
        append(partition, batch_count, batch_bytes),
        ReplicaMessage::Append {
            key: k,
            leader_epoch: 3,
            high_watermark: 5,
            base_offset: 9,
            batches: Vec::new(),
        },
        ReplicaMessage::EpochEnd {
            key: k,
            leader_epoch: 3,
            epoch: Some(2),
            end_offset: 44,
        },
        ReplicaMessage::EpochEnd {
            key: k,
            leader_epoch: 3,
            epoch: None,
            end_offset: -1,
        },
        ReplicaMessage::Progress {
            key: k,
            leader_epoch: 3,
            log_end: 10,
            written: 9,
            durable: 8,
        },
        ReplicaMessage::EpochQuery {
            key: k,
            leader_epoch: 3,
            epoch: 2,
        },
        ReplicaMessage::Stale {
            key: k,
            leader_epoch: 3,
            follower_epoch: 4,
        },
    ]
}

fn from(node: NodeId, messages: Vec<ReplicaMessage>) -> Vec<(NodeId, ReplicaMessage)> {
    messages.into_iter().map(|m| (node, m)).collect()
}

#[test]
fn two_shards_exchange_every_message_kind_both_ways() {
    run(|| async {
        let a = Node::start(1, 0, CLUSTER, 0).await;
        let b = Node::start(2, 0, CLUSTER, 0).await;

        // A leads: a 6 MiB Append (96 batches of 64 KiB) among frames of 300 partitions,
        // queued in one go so that many share each write.
        let mut sent = every_kind(0, 96, 64 << 10);
        for p in 1..300 {
            sent.extend(every_kind(p, 3, 700));
        }
        for m in &sent {
            a.links.send(b.id, b.addr(), m.clone()).unwrap();
        }
        assert!(a.links.queued_bytes(b.id) > 6 << 20);
        assert_eq!(b.take(sent.len()).await, from(a.id, sent));
        until(|| a.links.queued_bytes(b.id) == 0).await;

        // B answers on the connection A dialed.
        let replies = every_kind(5, 40, 100 << 10);
        for m in &replies {
            b.links.reply(a.id, m.clone()).unwrap();
        }
        assert_eq!(a.take(replies.len()).await, from(b.id, replies));

        // B leads other partitions: it dials A, and A answers on that connection.
        let mut sent = every_kind(7, 50, 80 << 10);
        sent.extend((300..400).flat_map(|p| every_kind(p, 1, 100)));
        for m in &sent {
            b.links.send(a.id, a.addr(), m.clone()).unwrap();
        }
        assert_eq!(a.take(sent.len()).await, from(b.id, sent));
        let replies = every_kind(7, 1, 10);
        for m in &replies {
            a.links.reply(b.id, m.clone()).unwrap();
        }
        assert_eq!(b.take(replies.len()).await, from(a.id, replies));
        assert!(a.recorder.disconnected.borrow().is_empty());
        assert!(b.recorder.disconnected.borrow().is_empty());
    });
}

#[test]
fn a_link_dials_again_after_the_accepting_side_went_away() {
    run(|| async {
        let a = Node::start(1, 0, CLUSTER, 0).await;
        let b = Node::start(2, 0, CLUSTER, 0).await;
        let port = b.links.port();
        let first = every_kind(1, 2, 1000);
        for m in &first {
            a.links.send(b.id, b.addr(), m.clone()).unwrap();
        }
        assert_eq!(b.take(first.len()).await, from(a.id, first));

        // B stops (its links dropped: listener and connections closed): A hears of it.
        drop(b);
        until(|| a.recorder.disconnected.borrow().contains(&NodeId(2))).await;
        a.recorder.disconnected.borrow_mut().clear();

        // B is back on the same port: what A sends now reaches it on a new connection.
        let b = Node::start(2, 0, CLUSTER, port).await;
        let again = every_kind(2, 3, 5000);
        for m in &again {
            a.links.send(b.id, b.addr(), m.clone()).unwrap();
        }
        assert_eq!(b.take(again.len()).await, from(a.id, again));
        // And it answers on that connection.
        let progress = every_kind(2, 1, 1).split_off(4);
        for m in &progress {
            b.links.reply(a.id, m.clone()).unwrap();
        }
        assert_eq!(a.take(progress.len()).await, from(b.id, progress));

        // B moved to another port (a restart with port 0): the address of the next send is
        // the one dialed once the old connection is gone.
        drop(b);
        until(|| a.recorder.disconnected.borrow().contains(&NodeId(2))).await;
        let b = Node::start(2, 0, CLUSTER, 0).await;
        let moved = every_kind(3, 1, 10);
        for m in &moved {
            a.links.send(b.id, b.addr(), m.clone()).unwrap();
        }
        assert_eq!(b.take(moved.len()).await, from(a.id, moved));
    });
}

#[test]
fn a_wrong_shard_or_cluster_is_refused_and_nothing_is_delivered() {
    run(|| async {
        let b = Node::start(2, 0, CLUSTER, 0).await;
        let other_shard = Node::start(1, 1, CLUSTER, 0).await;
        let other_cluster = Node::start(3, 0, "another-cluster", 0).await;
        for dialer in [&other_shard, &other_cluster] {
            dialer.links.send(b.id, b.addr(), append(0, 1, 10)).unwrap();
            // The refused dialer drops what it queued and says so.
            until(|| dialer.recorder.disconnected.borrow().contains(&b.id)).await;
            assert_eq!(dialer.links.queued_bytes(b.id), 0);
        }
        // A link that reached another node than it meant refuses it too.
        let a = Node::start(1, 0, CLUSTER, 0).await;
        a.links.send(NodeId(9), b.addr(), append(0, 1, 10)).unwrap();
        until(|| a.recorder.disconnected.borrow().contains(&NodeId(9))).await;
        // B welcomed node 1 (its hello was right) until node 1 hung up.
        until(|| b.recorder.disconnected.borrow().contains(&NodeId(1))).await;
        assert!(b.recorder.messages.borrow().is_empty());
        // B can reply to none of them: none has a connection open to it.
        for node in [1, 3, 9] {
            assert_eq!(
                b.links.reply(NodeId(node), append(0, 0, 0)),
                Err(SendError::NotConnected(NodeId(node)))
            );
        }
    });
}

#[test]
fn a_full_link_refuses_and_bad_bytes_close_only_their_connection() {
    run(|| async {
        let b = Node::start(2, 0, CLUSTER, 0).await;
        let a = Node::start(1, 0, CLUSTER, 0).await;
        // Queued faster than anything can be written (the dial has not even started): the
        // link takes up to its limit, then refuses. The batches share one buffer.
        let batch = Bytes::from(vec![7u8; 1 << 20]);
        let big = ReplicaMessage::Append {
            key: key(0),
            leader_epoch: 1,
            high_watermark: 0,
            base_offset: 0,
            batches: vec![batch; 4],
        };
        let mut queued = 0;
        let refused = loop {
            match a.links.send(b.id, b.addr(), big.clone()) {
                Ok(()) => queued += 1,
                Err(e) => break e,
            }
        };
        let SendError::Full {
            node,
            queued_bytes,
            frame_bytes,
            limit_bytes,
        } = refused
        else {
            panic!("{refused:?}");
        };
        assert_eq!((node, limit_bytes), (b.id, QUEUE_BYTES_MAX));
        assert_eq!(queued_bytes, a.links.queued_bytes(b.id));
        assert!(queued_bytes <= QUEUE_BYTES_MAX && queued_bytes + frame_bytes > QUEUE_BYTES_MAX);
        assert!(frame_bytes > 4 << 20);
        assert_eq!(b.take(queued).await.len(), queued);

        // A peer that sends garbage after a good handshake loses its connection; the others
        // go on.
        let mut raw = glommio::net::TcpStream::connect(b.addr()).await.unwrap();
        let hello = quorum::replica_wire::encode(quorum::replica_wire::Frame::Hello(
            quorum::replica_wire::Hello {
                node: NodeId(5),
                shard: ShardId(0),
                cluster_id: CLUSTER.into(),
            },
        ))
        .unwrap();
        raw.write_all(&hello.header).await.unwrap();
        raw.write_all(&[0, 0, 0, 12, 0, 0, 0, 4, 1, 2, 3, 4, 5, 6, 7, 8])
            .await
            .unwrap();
        let mut rest = Vec::new();
        // B's Hello, then the end of the stream: B closed it.
        raw.read_to_end(&mut rest).await.unwrap();
        assert_eq!(&rest[..], &hello_of(2)[..]);
        until(|| b.recorder.disconnected.borrow().contains(&NodeId(5))).await;
        // An announced frame over the limit closes it too, before anything is allocated.
        let mut raw = glommio::net::TcpStream::connect(b.addr()).await.unwrap();
        raw.write_all(&hello.header).await.unwrap();
        raw.write_all(&u32::MAX.to_be_bytes()).await.unwrap();
        let mut rest = Vec::new();
        raw.read_to_end(&mut rest).await.unwrap();
        assert_eq!(&rest[..], &hello_of(2)[..]);

        let after = every_kind(1, 1, 10);
        for m in &after {
            a.links.send(b.id, b.addr(), m.clone()).unwrap();
        }
        assert_eq!(b.take(after.len()).await, from(a.id, after));
    });
}

fn hello_of(node: i32) -> Bytes {
    quorum::replica_wire::encode(quorum::replica_wire::Frame::Hello(
        quorum::replica_wire::Hello {
            node: NodeId(node),
            shard: ShardId(0),
            cluster_id: CLUSTER.into(),
        },
    ))
    .unwrap()
    .header
}

#[test]
fn the_replication_address_comes_from_the_registration() {
    use broker::replication::link::replication_addr;
    let mut metadata = model::ClusterMetadata::new(CLUSTER.into());
    let broker = |id: i32, ports: Vec<u16>| model::BrokerRegistration {
        id: NodeId(id),
        host: "client.example".into(),
        port: 9092,
        cluster_listener: Some("127.0.0.2:9192".into()),
        shards: 2,
        rack: None,
        fenced: false,
        replication_ports: ports,
    };
    metadata
        .brokers
        .insert(NodeId(1), broker(1, vec![9300, 9301]));
    // Registered before replication: no ports.
    metadata.brokers.insert(NodeId(2), broker(2, Vec::new()));
    assert_eq!(
        replication_addr(&metadata, NodeId(1), ShardId(1)),
        Some(SocketAddr::from(([127, 0, 0, 2], 9301)))
    );
    assert_eq!(replication_addr(&metadata, NodeId(1), ShardId(2)), None);
    assert_eq!(replication_addr(&metadata, NodeId(2), ShardId(0)), None);
    assert_eq!(replication_addr(&metadata, NodeId(3), ShardId(0)), None);
}
