//! OffsetCommit, OffsetFetch and OffsetDelete; durability, replay, snapshots and retention.

use std::time::{Duration, Instant};

use net::Response;
use net::kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use net::kafka_protocol::messages::offset_delete_request::{
    OffsetDeleteRequestPartition, OffsetDeleteRequestTopic,
};
use net::kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use net::kafka_protocol::messages::{
    DeleteGroupsRequest, GroupId, ListGroupsRequest, OffsetCommitRequest, OffsetDeleteRequest,
    OffsetDeleteResponse, OffsetFetchRequest, TopicName,
};

use super::*;
use crate::group::{Coordinator, GroupError};

const SECOND: Duration = Duration::from_secs(1);

async fn offset_delete(
    client: &Client,
    group: &str,
    topics: &[(&str, i32)],
) -> OffsetDeleteResponse {
    let request = OffsetDeleteRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_topics(
            topics
                .iter()
                .map(|&(topic, partition)| {
                    OffsetDeleteRequestTopic::default()
                        .with_name(TopicName(s(topic)))
                        .with_partitions(vec![
                            OffsetDeleteRequestPartition::default().with_partition_index(partition),
                        ])
                })
                .collect(),
        );
    match client.send(request, 0).await {
        Response::OffsetDelete(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn delete_groups(client: &Client, groups: &[&str]) -> Vec<i16> {
    let request = DeleteGroupsRequest::default()
        .with_groups_names(groups.iter().map(|g| GroupId(s(g))).collect());
    match client.send(request, 2).await {
        Response::DeleteGroups(r) => r.results.iter().map(|r| r.error_code).collect(),
        other => panic!("{other:?}"),
    }
}

async fn listed_groups(client: &Client) -> Vec<String> {
    match client.send(ListGroupsRequest::default(), 4).await {
        Response::ListGroups(r) => {
            let mut groups: Vec<String> = r.groups.iter().map(|g| g.group_id.to_string()).collect();
            groups.sort();
            groups
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn committed_offsets_are_fetched_back_in_every_version() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 3, fast_config()).await;
        let client = cluster.client("c");
        for (i, version) in (2..=9).enumerate() {
            let response = client
                .commit(version, "g", -1, "", &[("t", i as i32, 100 + i as i64)])
                .await;
            assert_eq!(commit_errors(&response), vec![NONE], "v{version}");
        }
        // Partition i was committed with v(i+2): leader epochs exist from v6 on.
        let epoch_of = |partition: i32| if partition + 2 >= 6 { 3 } else { -1 };

        for version in 1..=7 {
            let request = OffsetFetchRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_topics(Some(vec![
                    OffsetFetchRequestTopic::default()
                        .with_name(TopicName(s("t")))
                        .with_partition_indexes((0..=8).collect()),
                ]));
            let Response::OffsetFetch(response) = client.send(request, version).await else {
                panic!("not an OffsetFetch response");
            };
            let partitions = &response.topics[0].partitions;
            for p in partitions {
                let i = p.partition_index;
                if i < 8 {
                    assert_eq!(p.committed_offset, 100 + i64::from(i));
                    assert_eq!(
                        p.metadata.as_deref(),
                        Some(format!("m{}", 100 + i).as_str())
                    );
                    let epoch = if version >= 5 { epoch_of(i) } else { -1 };
                    assert_eq!(p.committed_leader_epoch, epoch, "v{version} partition {i}");
                } else {
                    assert_eq!(p.committed_offset, -1, "nothing committed");
                    assert_eq!(p.metadata.as_deref(), Some(""));
                }
                assert_eq!(p.error_code, NONE);
            }
            assert_eq!(partitions.len(), 9);
        }

        // v2+: no topics means every partition the group committed.
        for version in 2..=7 {
            let request = OffsetFetchRequest::default()
                .with_group_id(GroupId(s("g")))
                .with_topics(None);
            let Response::OffsetFetch(response) = client.send(request, version).await else {
                panic!("not an OffsetFetch response");
            };
            let all: Vec<(i32, i64)> = response.topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset))
                .collect();
            assert_eq!(
                all,
                (0..8).map(|i| (i, 100 + i64::from(i))).collect::<Vec<_>>()
            );
        }

        // v8+: many groups at once, spread over the coordinators.
        client.commit_simple("h", &[("u", 0, 7)]).await;
        client.commit_simple("i", &[("u", 1, 8)]).await;
        for version in 8..=9 {
            let group = |id: &str, topics: Option<Vec<(&str, Vec<i32>)>>| {
                OffsetFetchRequestGroup::default()
                    .with_group_id(GroupId(s(id)))
                    .with_topics(topics.map(|topics| {
                        topics
                            .into_iter()
                            .map(|(name, partitions)| {
                                OffsetFetchRequestTopics::default()
                                    .with_name(TopicName(s(name)))
                                    .with_partition_indexes(partitions)
                            })
                            .collect()
                    }))
            };
            let request = OffsetFetchRequest::default().with_groups(vec![
                group("h", None),
                group("i", Some(vec![("u", vec![0, 1])])),
                group("nobody", Some(vec![("u", vec![0])])),
                group("g", Some(vec![("t", vec![3])])),
            ]);
            let Response::OffsetFetch(response) = client.send(request, version).await else {
                panic!("not an OffsetFetch response");
            };
            let fetched: Vec<(String, Vec<(i32, i64)>)> = response
                .groups
                .iter()
                .map(|g| {
                    assert_eq!(g.error_code, NONE);
                    let offsets = g
                        .topics
                        .iter()
                        .flat_map(|t| {
                            t.partitions
                                .iter()
                                .map(|p| (p.partition_index, p.committed_offset))
                        })
                        .collect();
                    (g.group_id.to_string(), offsets)
                })
                .collect();
            assert_eq!(
                fetched,
                vec![
                    ("h".to_owned(), vec![(0, 7)]),
                    ("i".to_owned(), vec![(0, -1), (1, 8)]),
                    ("nobody".to_owned(), vec![(0, -1)]),
                    ("g".to_owned(), vec![(3, 103)]),
                ]
            );
        }
        cluster.close().await;
    });
}

#[test]
fn commits_from_members_are_checked_against_the_group() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let protocols = vec![range_of(&["t"]); 2];
        let (clients, members) = stable_group(&cluster, &["a", "b"], "g", &protocols, LONG).await;
        let (a, b) = (&members[0].member_id, &members[1].member_id);
        let client = &clients[0];
        let one = |response: OffsetCommitResponse| commit_errors(&response)[0];

        assert_eq!(one(client.commit(8, "g", 1, a, &[("t", 0, 1)]).await), NONE);
        assert_eq!(
            one(client.commit(8, "g", 2, a, &[("t", 0, 1)]).await),
            err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            one(client.commit(8, "g", 1, "ghost", &[("t", 0, 1)]).await),
            err(ResponseError::UnknownMemberId)
        );
        // Only an empty group takes commits from outside group management.
        assert_eq!(
            one(client.commit(8, "g", -1, "", &[("t", 0, 1)]).await),
            err(ResponseError::UnknownMemberId)
        );
        // A generation for a group that does not exist: old versions call it illegal.
        assert_eq!(
            one(client.commit(8, "nowhere", 1, a, &[("t", 0, 1)]).await),
            err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            one(client.commit(9, "nowhere", 1, a, &[("t", 0, 1)]).await),
            err(ResponseError::GroupIdNotFound)
        );

        // Metadata over offset.metadata.max.bytes is refused for its partition only.
        let partition = |index: i32, metadata: String| {
            OffsetCommitRequestPartition::default()
                .with_partition_index(index)
                .with_committed_offset(50)
                .with_committed_metadata(Some(s(&metadata)))
        };
        let request = OffsetCommitRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_generation_id_or_member_epoch(1)
            .with_member_id(s(a))
            .with_topics(vec![
                OffsetCommitRequestTopic::default()
                    .with_name(TopicName(s("t")))
                    .with_partitions(vec![
                        partition(1, "x".repeat(4_097)),
                        partition(2, "ok".into()),
                    ]),
            ]);
        let Response::OffsetCommit(response) = client.send(request, 8).await else {
            panic!("not an OffsetCommit response");
        };
        assert_eq!(
            commit_errors(&response),
            vec![err(ResponseError::OffsetMetadataTooLarge), NONE]
        );
        assert_eq!(
            client.fetch("g", &[("t", 0), ("t", 1), ("t", 2)]).await,
            vec![1, -1, 50]
        );

        // Between JoinGroup and SyncGroup, commits wait for the rebalance to finish.
        let rejoins: Vec<_> = [(0, a), (1, b)]
            .map(|(i, id)| {
                let (client, id, protocols) =
                    (clients[i].clone(), id.clone(), protocols[i].clone());
                glommio::spawn_local(async move {
                    client.rejoin(5, "g", &id, None, &protocols, LONG).await
                })
            })
            .into_iter()
            .collect();
        for rejoin in rejoins {
            assert_eq!(rejoin.await.generation, 2);
        }
        assert_eq!(
            one(client.commit(8, "g", 2, a, &[("t", 0, 2)]).await),
            err(ResponseError::RebalanceInProgress)
        );
        cluster.close().await;
    });
}

#[test]
fn commits_for_partitions_the_broker_lacks_are_refused_alone() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let client = cluster.client("c");
        let unknown = err(ResponseError::UnknownTopicOrPartition);
        let response = client
            .commit(
                8,
                "g",
                -1,
                "",
                &[("t", 0, 5), (MISSING_TOPIC, 0, 6), ("t", 1, 7)],
            )
            .await;
        assert_eq!(commit_errors(&response), vec![NONE, unknown, NONE]);
        let names: Vec<&str> = response.topics.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, vec!["t", MISSING_TOPIC, "t"]);
        assert_eq!(
            client
                .fetch("g", &[("t", 0), ("t", 1), (MISSING_TOPIC, 0)])
                .await,
            vec![5, 7, -1]
        );
        // Only unknown partitions: refused without asking the group (which does not exist).
        let response = client
            .commit(9, "h", 3, "ghost", &[(MISSING_TOPIC, 0, 1)])
            .await;
        assert_eq!(commit_errors(&response), vec![unknown]);
        assert_eq!(listed_groups(&client).await, vec!["g".to_owned()]);
        cluster.close().await;
    });
}

#[test]
fn offsets_survive_a_close_and_reopen() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 2, fast_config()).await;
        let client = cluster.client("c");
        client
            .commit_simple("g1", &[("t", 0, 5), ("t", 1, 6), ("u", 0, 7)])
            .await;
        client.commit_simple("g1", &[("t", 0, 15)]).await;
        client.commit_simple("g2", &[("t", 0, 1)]).await;
        let deleted = offset_delete(&client, "g1", &[("u", 0)]).await;
        assert_eq!(deleted.error_code, NONE);
        assert_eq!(delete_groups(&client, &["g2"]).await, vec![NONE]);
        cluster.close().await;

        let cluster = Cluster::open(dir.path(), 2, fast_config()).await;
        let client = cluster.client("c");
        assert_eq!(
            client.fetch("g1", &[("t", 0), ("t", 1), ("u", 0)]).await,
            vec![15, 6, -1]
        );
        assert_eq!(client.fetch("g2", &[("t", 0)]).await, vec![-1]);
        assert_eq!(listed_groups(&client).await, vec!["g1".to_owned()]);
        cluster.close().await;
    });
}

#[test]
fn acknowledged_offsets_survive_an_unclean_stop() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().to_path_buf(), dir.path().to_path_buf());
    run(move || async move {
        let cluster = Cluster::open(&first, 1, fast_config()).await;
        let client = cluster.client("c");
        for i in 0..50 {
            client
                .commit_simple("g", &[("t", i % 5, i64::from(i))])
                .await;
        }
        // The executor ends here without closing anything: a crash of the process.
    });
    assert!(
        !dir.path()
            .join("__consumer_offsets-0/clean-shutdown")
            .exists()
    );
    run(move || async move {
        let cluster = Cluster::open(&second, 1, fast_config()).await;
        let client = cluster.client("c");
        let partitions: Vec<(&str, i32)> = (0..5).map(|p| ("t", p)).collect();
        assert_eq!(
            client.fetch("g", &partitions).await,
            vec![45, 46, 47, 48, 49]
        );
        cluster.close().await;
    });
}

#[test]
fn snapshots_keep_the_latest_offsets_and_bound_the_log() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let config = GroupConfig {
            offsets_segment_bytes: 4 << 10,
            offsets_snapshot_after_bytes: 16 << 10,
            ..fast_config()
        };
        let cluster = Cluster::open(dir.path(), 1, config.clone()).await;
        let client = cluster.client("c");
        client.commit_simple("gone", &[("t", 0, 1)]).await;
        client.commit_simple("g", &[("dropped", 0, 1)]).await;
        for round in 0..600i64 {
            client
                .commit_simple("g", &[("t", (round % 7) as i32, round)])
                .await;
        }
        assert_eq!(delete_groups(&client, &["gone"]).await, vec![NONE]);
        assert_eq!(
            offset_delete(&client, "g", &[("dropped", 0)])
                .await
                .error_code,
            NONE
        );
        let log = cluster.logs[0].clone();
        // 600 commits take about 100 KiB; snapshots keep trimming the log behind them.
        wait_until(5 * SECOND, || log.log_start_offset() > 0).await;
        let size_bytes = log.size_bytes();
        assert!(size_bytes < 40 << 10, "the log holds {size_bytes} bytes");

        let partitions: Vec<(&str, i32)> = (0..7).map(|p| ("t", p)).collect();
        let latest: Vec<i64> = (0..7)
            .map(|p| (0..600).filter(|round| round % 7 == p).max().unwrap())
            .collect();
        assert_eq!(client.fetch("g", &partitions).await, latest);
        cluster.close().await;

        let cluster = Cluster::open(dir.path(), 1, config).await;
        let client = cluster.client("c");
        assert!(cluster.logs[0].log_start_offset() > 0);
        assert_eq!(client.fetch("g", &partitions).await, latest);
        assert_eq!(client.fetch("g", &[("dropped", 0)]).await, vec![-1]);
        assert_eq!(client.fetch("gone", &[("t", 0)]).await, vec![-1]);
        assert_eq!(listed_groups(&client).await, vec!["g".to_owned()]);
        cluster.close().await;
    });
}

#[test]
fn offset_delete_spares_the_topics_a_group_consumes() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let (clients, members) =
            stable_group(&cluster, &["a"], "g", &[range_of(&["orders"])], LONG).await;
        let (client, a) = (&clients[0], &members[0].member_id);
        let response = client
            .commit(8, "g", 1, a, &[("orders", 0, 10), ("payments", 0, 20)])
            .await;
        assert_eq!(commit_errors(&response), vec![NONE, NONE]);

        let deleted = offset_delete(client, "g", &[("orders", 0), ("payments", 0)]).await;
        assert_eq!(deleted.error_code, NONE);
        let errors: Vec<i16> = deleted
            .topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
            .collect();
        assert_eq!(
            errors,
            vec![err(ResponseError::GroupSubscribedToTopic), NONE]
        );
        assert_eq!(
            client.fetch("g", &[("orders", 0), ("payments", 0)]).await,
            vec![10, -1]
        );
        assert_eq!(
            offset_delete(client, "nowhere", &[("t", 0)])
                .await
                .error_code,
            err(ResponseError::GroupIdNotFound)
        );

        // A group of another protocol type, with members, may not lose offsets at all.
        let mut connect = net::kafka_protocol::messages::JoinGroupRequest::default()
            .with_group_id(GroupId(s("workers")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("connect"));
        connect.protocols = vec![
            net::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default()
                .with_name(s("sessioned")),
        ];
        let Response::JoinGroup(worker) = client.send(connect, 3).await else {
            panic!("not a JoinGroup response");
        };
        assert_eq!(worker.error_code, NONE);
        assert_eq!(
            offset_delete(client, "workers", &[("t", 0)])
                .await
                .error_code,
            err(ResponseError::NonEmptyGroup)
        );
        cluster.close().await;
    });
}

#[test]
fn offsets_of_a_group_left_empty_expire_after_the_retention_time() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let config = GroupConfig {
            offsets_retention_ms: 600,
            offsets_retention_check_interval_ms: 20,
            ..fast_config()
        };
        let cluster = Cluster::open(dir.path(), 1, config.clone()).await;
        let (clients, members) =
            stable_group(&cluster, &["a"], "g", &[range_of(&["t"])], LONG).await;
        let (client, a) = (&clients[0], &members[0].member_id);
        assert_eq!(
            commit_errors(&client.commit(8, "g", 1, a, &[("t", 0, 5)]).await),
            vec![NONE]
        );

        // While a member consumes the topic its offset stays, however old.
        glommio::timer::sleep(Duration::from_millis(700)).await;
        assert_eq!(client.fetch("g", &[("t", 0)]).await, vec![5]);

        assert_eq!(client.leave(3, "g", &[(a, None)]).await.error_code, NONE);
        let emptied = Instant::now();
        assert_eq!(
            client.fetch("g", &[("t", 0)]).await,
            vec![5],
            "kept for the retention time"
        );
        within(5 * SECOND, async {
            while client.fetch("g", &[("t", 0)]).await != vec![-1] {
                glommio::timer::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(emptied.elapsed() >= Duration::from_millis(600));
        assert!(
            listed_groups(client).await.is_empty(),
            "the group went with its offsets"
        );
        cluster.close().await;

        // The expiry was written down.
        let cluster = Cluster::open(dir.path(), 1, config).await;
        assert_eq!(cluster.client("c").fetch("g", &[("t", 0)]).await, vec![-1]);
        cluster.close().await;
    });
}

#[test]
fn a_record_the_coordinator_cannot_read_stops_it_from_opening() {
    run(|| async {
        use net::client::batch::{Compression, NewRecord, RecordBatchBuilder};

        let dir = tempfile::tempdir().unwrap();
        let storage = shard_storage(dir.path()).await;
        let config = fast_config();
        let log = storage
            .open_log(
                &dir.path().join("offsets"),
                super::offsets_log_config(&config),
            )
            .await
            .unwrap();
        let mut batch = RecordBatchBuilder::new(Compression::None);
        batch.push(NewRecord {
            key: Some(bytes::Bytes::from_static(b"not a record key")),
            ..NewRecord::default()
        });
        let batch = batch.build().unwrap();
        log.append(bytes::BytesMut::from(&batch[..]), 0)
            .await
            .unwrap();
        match Coordinator::open(super::offsets_partition(&log), config).await {
            Err(GroupError::Corrupt { offset: 0, .. }) => {}
            other => panic!("opened over a record it cannot read: {other:?}"),
        }
        log.close().await.unwrap();
    });
}

#[test]
fn concurrent_commits_leave_the_log_agreeing_with_memory() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let commits: Vec<_> = (0..40i64)
            .map(|i| {
                let client = cluster.client("c");
                glommio::spawn_local(async move {
                    client
                        .commit_simple("g", &[("t", 0, i), ("t", 1, 100 - i)])
                        .await;
                })
            })
            .collect();
        for commit in commits {
            commit.await;
        }
        let client = cluster.client("c");
        let in_memory = client.fetch("g", &[("t", 0), ("t", 1)]).await;
        assert_eq!(
            in_memory[0] + in_memory[1],
            100,
            "one commit's two offsets: {in_memory:?}"
        );
        cluster.close().await;

        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        assert_eq!(
            cluster.client("c").fetch("g", &[("t", 0), ("t", 1)]).await,
            in_memory
        );
        cluster.close().await;
    });
}
