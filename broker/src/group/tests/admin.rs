//! FindCoordinator, ListGroups, DescribeGroups, DeleteGroups; group placement; closing.

use std::time::Duration;

use net::Response;
use net::kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, FindCoordinatorRequest, GroupId, ListGroupsRequest,
    OffsetFetchRequest,
};
use proptest::prelude::*;

use super::*;
use crate::group::offsets_partition_for;

#[test]
fn groups_are_placed_as_kafka_places_them() {
    // Java's String.hashCode: "hello" is 99162322; "polygenelubricants" is Integer.MIN_VALUE;
    // U+1F600 is the surrogate pair D83D DE00: 0xD83D * 31 + 0xDE00.
    assert_eq!(offsets_partition_for("hello", 50), 99_162_322 % 50);
    assert_eq!(offsets_partition_for("polygenelubricants", 50), 0);
    assert_eq!(
        offsets_partition_for("😀", 1000),
        (0xD83D * 31 + 0xDE00) % 1000
    );
    assert_eq!(offsets_partition_for("", 7), 0);
    assert_eq!(offsets_partition_for("any", 0), 0);
}

proptest! {
    #[test]
    fn every_group_has_a_partition(group in "\\PC{0,40}", partitions in 1i32..200) {
        let p = offsets_partition_for(&group, partitions);
        prop_assert!((0..partitions).contains(&p));
    }
}

#[test]
fn find_coordinator_names_this_broker_in_every_version() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 3, fast_config()).await;
        let client = cluster.client("c");
        for version in 0..=3 {
            for (key_type, error) in [
                (0, None),
                (1, Some(ResponseError::TransactionalIdAuthorizationFailed)),
                (9, Some(ResponseError::InvalidRequest)),
            ] {
                if version == 0 && key_type != 0 {
                    continue;
                }
                let request = FindCoordinatorRequest::default()
                    .with_key(s("some-group"))
                    .with_key_type(key_type);
                let Response::FindCoordinator(r) = client.send(request, version).await else {
                    panic!("not a FindCoordinator response");
                };
                match error {
                    None => {
                        assert_eq!(r.error_code, NONE);
                        assert_eq!(
                            (r.node_id.0, r.host.as_str(), r.port),
                            (7, "localhost", 19092)
                        );
                    }
                    Some(e) => {
                        assert_eq!(r.error_code, err(e));
                        assert_eq!(r.node_id.0, -1);
                    }
                }
            }
        }
        for version in 4..=6 {
            let keys = ["a", "b", "c"].map(s).to_vec();
            let request = FindCoordinatorRequest::default().with_coordinator_keys(keys.clone());
            let Response::FindCoordinator(r) = client.send(request, version).await else {
                panic!("not a FindCoordinator response");
            };
            assert_eq!(r.coordinators.len(), 3);
            for (c, key) in r.coordinators.iter().zip(&keys) {
                assert_eq!(&c.key, key);
                assert_eq!(
                    (c.node_id.0, c.host.as_str(), c.port, c.error_code),
                    (7, "localhost", 19092, NONE)
                );
            }
            let request = FindCoordinatorRequest::default()
                .with_key_type(1)
                .with_coordinator_keys(keys);
            let Response::FindCoordinator(r) = client.send(request, version).await else {
                panic!("not a FindCoordinator response");
            };
            assert!(r.coordinators.iter().all(|c| {
                c.error_code == err(ResponseError::TransactionalIdAuthorizationFailed)
                    && c.error_message
                        .as_ref()
                        .is_some_and(|m| m.contains("not supported"))
            }));
        }
        cluster.close().await;
    });
}

#[test]
fn groups_are_listed_described_and_deleted() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 3, fast_config()).await;
        let client = cluster.client("admin");
        let member_client = cluster.client("consumer-1");
        let protocols = range_of(&["t"]);
        let live = member_client
            .join(5, "live", Some("instance-1"), &protocols, LONG)
            .await;
        sync_all(
            std::slice::from_ref(&member_client),
            "live",
            std::slice::from_ref(&live),
            opaque_assignment,
        )
        .await;
        client.commit_simple("idle", &[("t", 0, 3)]).await;

        for version in 0..=5 {
            let mut request = ListGroupsRequest::default();
            let listed = |response: Response| match response {
                Response::ListGroups(r) => {
                    assert_eq!(r.error_code, NONE);
                    let mut groups: Vec<(String, String, String)> = r
                        .groups
                        .iter()
                        .map(|g| {
                            (
                                g.group_id.to_string(),
                                g.protocol_type.to_string(),
                                g.group_state.to_string(),
                            )
                        })
                        .collect();
                    groups.sort();
                    groups
                }
                other => panic!("{other:?}"),
            };
            let state = |name: &str| {
                if version >= 4 {
                    name.to_owned()
                } else {
                    String::new()
                }
            };
            assert_eq!(
                listed(client.send(request.clone(), version).await),
                vec![
                    ("idle".to_owned(), String::new(), state("Empty")),
                    ("live".to_owned(), "consumer".to_owned(), state("Stable")),
                ]
            );
            if version >= 4 {
                request.states_filter = vec![s("stable")];
                let only_live = listed(client.send(request.clone(), version).await);
                assert_eq!(only_live.len(), 1);
                assert_eq!(only_live[0].0, "live");
            }
            if version >= 5 {
                request.states_filter.clear();
                request.types_filter = vec![s("consumer")];
                assert!(listed(client.send(request.clone(), version).await).is_empty());
                request.types_filter = vec![s("Classic")];
                assert_eq!(listed(client.send(request, version).await).len(), 2);
            }
        }

        for version in 0..=6 {
            let request = DescribeGroupsRequest::default()
                .with_groups(["live", "idle", "missing"].map(|g| GroupId(s(g))).to_vec())
                .with_include_authorized_operations(version >= 3);
            let Response::DescribeGroups(r) = client.send(request, version).await else {
                panic!("not a DescribeGroups response");
            };
            let [live_group, idle, missing] = &r.groups[..] else {
                panic!("three groups described: {r:?}");
            };
            assert_eq!(live_group.error_code, NONE);
            assert_eq!(live_group.group_state.as_str(), "Stable");
            assert_eq!(live_group.protocol_type.as_str(), "consumer");
            assert_eq!(live_group.protocol_data.as_str(), "range");
            let [member] = &live_group.members[..] else {
                panic!("one member: {live_group:?}");
            };
            assert_eq!(member.member_id.as_str(), live.member_id);
            assert_eq!(member.client_id.as_str(), "consumer-1");
            assert_eq!(member.client_host.as_str(), "/127.0.0.1");
            assert_eq!(member.member_metadata, protocols[0].1);
            assert_eq!(member.member_assignment, opaque_assignment(&live.member_id));
            let instance = if version >= 4 {
                Some("instance-1")
            } else {
                None
            };
            assert_eq!(member.group_instance_id.as_deref(), instance);
            if version >= 3 {
                assert_eq!(
                    live_group.authorized_operations,
                    (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11)
                );
            }

            assert_eq!(
                (idle.error_code, idle.group_state.as_str()),
                (NONE, "Empty")
            );
            assert_eq!(idle.protocol_type.as_str(), "");
            assert!(idle.members.is_empty());

            assert_eq!(missing.group_state.as_str(), "Dead");
            if version >= 6 {
                assert_eq!(missing.error_code, err(ResponseError::GroupIdNotFound));
            } else {
                assert_eq!(missing.error_code, NONE);
            }
        }

        let request = DeleteGroupsRequest::default()
            .with_groups_names(["live", "idle", "missing"].map(|g| GroupId(s(g))).to_vec());
        let Response::DeleteGroups(r) = client.send(request, 2).await else {
            panic!("not a DeleteGroups response");
        };
        let results: Vec<(String, i16)> = r
            .results
            .iter()
            .map(|r| (r.group_id.to_string(), r.error_code))
            .collect();
        assert_eq!(
            results,
            vec![
                ("live".to_owned(), err(ResponseError::NonEmptyGroup)),
                ("idle".to_owned(), NONE),
                ("missing".to_owned(), err(ResponseError::GroupIdNotFound)),
            ]
        );
        assert_eq!(
            client.fetch("idle", &[("t", 0)]).await,
            vec![-1],
            "offsets went with it"
        );
        let Response::ListGroups(r) = client.send(ListGroupsRequest::default(), 3).await else {
            panic!("not a ListGroups response");
        };
        let names: Vec<String> = r.groups.iter().map(|g| g.group_id.to_string()).collect();
        assert_eq!(names, vec!["live".to_owned()]);
        cluster.close().await;
    });
}

#[test]
fn a_closing_coordinator_releases_waiting_members_and_refuses_the_rest() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let config = GroupConfig {
            initial_rebalance_delay_ms: 60_000,
            ..fast_config()
        };
        let cluster = Cluster::open(dir.path(), 1, config).await;
        let waiting = {
            let client = cluster.client("a");
            glommio::spawn_local(async move {
                client
                    .join_request(
                        3,
                        "g",
                        "",
                        None,
                        &range_of(&["t"]),
                        Timeouts::new(10_000, 120_000),
                    )
                    .await
            })
        };
        futures_lite::future::yield_now().await;
        cluster.close().await;
        let released = within(Duration::from_secs(5), waiting).await;
        assert_eq!(released.error_code, err(ResponseError::NotCoordinator));

        let client = cluster.client("b");
        assert_eq!(
            client.heartbeat(4, "g", 1, "m", None).await,
            err(ResponseError::NotCoordinator)
        );
        assert_eq!(
            commit_errors(&client.commit(8, "g", -1, "", &[("t", 0, 1)]).await),
            vec![err(ResponseError::NotCoordinator)]
        );
        let Response::OffsetFetch(fetched) = client
            .send(
                OffsetFetchRequest::default().with_group_id(GroupId(s("g"))),
                7,
            )
            .await
        else {
            panic!("not an OffsetFetch response");
        };
        assert_eq!(fetched.error_code, err(ResponseError::NotCoordinator));
        let Response::ListGroups(listed) = client.send(ListGroupsRequest::default(), 4).await
        else {
            panic!("not a ListGroups response");
        };
        assert_eq!(listed.error_code, err(ResponseError::NotCoordinator));
    });
}
