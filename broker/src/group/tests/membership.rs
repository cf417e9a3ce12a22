//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup: the classic group protocol.

use std::time::{Duration, Instant};

use bytes::Bytes;
use net::Response;
use net::kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse, GroupId};

use super::*;
use crate::group::GroupConfig;

const SECOND: Duration = Duration::from_secs(1);

async fn describe(client: &Client, group: &str) -> DescribeGroupsResponse {
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
    match client.send(request, 5).await {
        Response::DescribeGroups(r) => r,
        other => panic!("{other:?}"),
    }
}

#[test]
fn three_members_join_and_get_the_leaders_assignment_untouched() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 3, fast_config()).await;
        let clients: Vec<Client> = ["a", "b", "c"].iter().map(|c| cluster.client(c)).collect();
        let protocols: Vec<_> = ["x", "y", "z"].iter().map(|t| range_of(&[t])).collect();
        let members = join_all(&clients, "g", &protocols, LONG).await;

        // One generation, one leader, and only the leader learns the members.
        assert!(
            members
                .iter()
                .all(|m| m.generation == 1 && m.leader == members[0].leader)
        );
        assert!(
            members
                .iter()
                .all(|m| m.protocol.as_deref() == Some("range"))
        );
        let leaders: Vec<&Joined> = members.iter().filter(|m| m.member_id == m.leader).collect();
        assert_eq!(leaders.len(), 1);
        let mut listed = leaders[0].members.clone();
        listed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut expected: Vec<(String, Bytes)> = members
            .iter()
            .zip(&protocols)
            .map(|(m, p)| (m.member_id.clone(), p[0].1.clone()))
            .collect();
        expected.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            listed, expected,
            "each member's metadata reaches the leader as sent"
        );
        for (member, client) in members.iter().zip(["a", "b", "c"]) {
            assert!(member.member_id.starts_with(&format!("{client}-")));
            if member.member_id != member.leader {
                assert!(member.members.is_empty());
            }
        }

        let assignments = sync_all(&clients, "g", &members, opaque_assignment).await;
        for (member, assignment) in members.iter().zip(&assignments) {
            assert_eq!(*assignment, opaque_assignment(&member.member_id));
        }

        let described = describe(&clients[0], "g").await;
        let group = &described.groups[0];
        assert_eq!(group.group_state.as_str(), "Stable");
        assert_eq!(group.protocol_data.as_str(), "range");
        assert_eq!(group.members.len(), 3);
        for m in &group.members {
            assert_eq!(m.member_assignment, opaque_assignment(&m.member_id));
        }
        cluster.close().await;
    });
}

#[test]
fn a_new_member_first_gets_its_member_id_from_v4_on() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let config = GroupConfig {
            initial_rebalance_delay_ms: 0,
            ..fast_config()
        };
        let cluster = Cluster::open(dir.path(), 1, config).await;
        let client = cluster.client("kip394");
        let protocols = range_of(&["t"]);

        let first = client
            .join_request(4, "g", "", None, &protocols, Timeouts::new(200, 1_000))
            .await;
        assert_eq!(first.error_code, err(ResponseError::MemberIdRequired));
        let member_id = first.member_id.to_string();
        assert!(member_id.starts_with("kip394-"), "{member_id}");
        let second = joined(
            client
                .join_request(
                    4,
                    "g",
                    &member_id,
                    None,
                    &protocols,
                    Timeouts::new(200, 1_000),
                )
                .await,
        );
        assert_eq!(second.member_id, member_id);
        assert_eq!(
            (second.generation, second.leader.clone()),
            (1, member_id.clone())
        );

        // A member id handed out but not used within the session timeout is forgotten.
        let unused = client
            .join_request(4, "g", "", None, &protocols, Timeouts::new(50, 1_000))
            .await;
        assert_eq!(unused.error_code, err(ResponseError::MemberIdRequired));
        glommio::timer::sleep(Duration::from_millis(300)).await;
        let late = client
            .join_request(
                4,
                "g",
                &unused.member_id,
                None,
                &protocols,
                Timeouts::new(50, 1_000),
            )
            .await;
        assert_eq!(late.error_code, err(ResponseError::UnknownMemberId));

        // v3 and below join at once.
        let old = client
            .join_request(3, "other", "", None, &protocols, Timeouts::new(200, 1_000))
            .await;
        assert_eq!(old.error_code, NONE);
        assert_eq!(old.generation_id, 1);
        cluster.close().await;
    });
}

#[test]
fn a_member_that_stops_heartbeating_is_evicted_and_the_others_rebalance() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let session_ms = 300;
        let protocols = vec![range_of(&["t"]); 3];
        let (clients, members) = stable_group(
            &cluster,
            &["a", "b", "c"],
            "g",
            &protocols,
            Timeouts::new(session_ms, 5_000),
        )
        .await;

        // a and b keep heartbeating; c falls silent, as a killed consumer would.
        let silent_since = Instant::now();
        let beats: Vec<_> = (0..2)
            .map(|i| {
                let (client, member) = (clients[i].clone(), members[i].clone());
                glommio::spawn_local(async move {
                    let interval = Duration::from_millis(40);
                    client
                        .heartbeat_until_error("g", member.generation, &member.member_id, interval)
                        .await
                })
            })
            .collect();
        for beat in beats {
            assert_eq!(
                within(5 * SECOND, beat).await,
                err(ResponseError::RebalanceInProgress)
            );
        }
        assert!(silent_since.elapsed() >= Duration::from_millis(session_ms as u64));

        // The survivors rejoin into generation 2, without c.
        let rejoins: Vec<_> = (0..2)
            .map(|i| {
                let (client, member) = (clients[i].clone(), members[i].clone());
                glommio::spawn_local(async move {
                    client
                        .rejoin(
                            5,
                            "g",
                            &member.member_id,
                            None,
                            &range_of(&["t"]),
                            Timeouts::new(session_ms, 5_000),
                        )
                        .await
                })
            })
            .collect();
        let mut again = Vec::new();
        for rejoin in rejoins {
            again.push(within(5 * SECOND, rejoin).await);
        }
        assert!(again.iter().all(|m| m.generation == 2));
        let leader = again.iter().find(|m| m.member_id == m.leader).unwrap();
        let mut listed: Vec<&str> = leader.members.iter().map(|(id, _)| id.as_str()).collect();
        listed.sort();
        let mut survivors = vec![members[0].member_id.as_str(), members[1].member_id.as_str()];
        survivors.sort();
        assert_eq!(listed, survivors);
        sync_all(&clients[..2], "g", &again, opaque_assignment).await;
        assert_eq!(
            clients[2]
                .heartbeat(4, "g", 1, &members[2].member_id, None)
                .await,
            err(ResponseError::UnknownMemberId)
        );
        cluster.close().await;
    });
}

#[test]
fn leaving_members_make_the_group_rebalance() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let protocols = vec![range_of(&["t"]); 2];
        let (clients, members) = stable_group(&cluster, &["a", "b"], "g", &protocols, LONG).await;
        let (a, b) = (&members[0].member_id, &members[1].member_id);

        // v3+ leave in batches, with an answer per member.
        let left = clients[1]
            .leave(3, "g", &[(b, None), ("nobody", None)])
            .await;
        assert_eq!(left.error_code, NONE);
        let errors: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
        assert_eq!(errors, vec![NONE, err(ResponseError::UnknownMemberId)]);

        assert_eq!(
            clients[0].heartbeat(4, "g", 1, a, None).await,
            err(ResponseError::RebalanceInProgress)
        );
        let alone = clients[0]
            .rejoin(5, "g", a, None, &protocols[0], LONG)
            .await;
        assert_eq!((alone.generation, &alone.leader), (2, a));
        assert_eq!(alone.members.len(), 1);
        sync_all(&clients[..1], "g", &[alone], opaque_assignment).await;

        // v0-v2 name one member, and its error is the response's.
        let unknown = clients[0].leave(1, "g", &[("nobody", None)]).await;
        assert_eq!(unknown.error_code, err(ResponseError::UnknownMemberId));
        let last = clients[0].leave(1, "g", &[(a, None)]).await;
        assert_eq!(last.error_code, NONE);
        let described = describe(&clients[0], "g").await;
        assert_eq!(described.groups[0].group_state.as_str(), "Empty");
        assert!(described.groups[0].members.is_empty());
        cluster.close().await;
    });
}

#[test]
fn a_static_member_that_comes_back_takes_its_place_without_a_rebalance() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let protocols = range_of(&["t"]);
        let (leader_client, bouncer_client) = (cluster.client("l"), cluster.client("b"));
        let joins =
            [("leader", &leader_client), ("bouncer", &bouncer_client)].map(|(instance, client)| {
                let (client, protocols) = (client.clone(), protocols.clone());
                glommio::spawn_local(async move {
                    client.join(5, "g", Some(instance), &protocols, LONG).await
                })
            });
        let mut members = Vec::new();
        for join in joins {
            members.push(join.await);
        }
        // "leader" joined first, so it leads.
        let leader_id = members[0].member_id.clone();
        assert!(leader_id.starts_with("leader-"));
        assert_eq!(members[1].leader, leader_id);
        let clients = [leader_client.clone(), bouncer_client.clone()];
        sync_all(&clients, "g", &members, opaque_assignment).await;
        let old_bouncer = members[1].member_id.clone();

        // The bouncer restarts: a new consumer with the same instance id and no member id.
        let restarted = cluster.client("b2");
        let back = restarted
            .join(5, "g", Some("bouncer"), &protocols, LONG)
            .await;
        assert_eq!(back.generation, 1, "no new generation");
        assert_ne!(back.member_id, old_bouncer);
        assert!(back.member_id.starts_with("bouncer-"));
        assert!(back.members.is_empty());
        assert_eq!(back.leader, leader_id);
        let synced = restarted
            .sync(3, "g", 1, &back.member_id, Some("bouncer"), &[])
            .await;
        assert_eq!(synced.error_code, NONE);
        assert_eq!(
            synced.assignment,
            opaque_assignment(&old_bouncer),
            "its old assignment"
        );
        assert_eq!(
            leader_client
                .heartbeat(4, "g", 1, &members[0].member_id, Some("leader"))
                .await,
            NONE,
            "no rebalance"
        );
        // Whoever still uses the old member id is fenced.
        assert_eq!(
            bouncer_client
                .heartbeat(4, "g", 1, &old_bouncer, Some("bouncer"))
                .await,
            err(ResponseError::FencedInstanceId)
        );
        let described = describe(&leader_client, "g").await;
        assert_eq!(described.groups[0].group_state.as_str(), "Stable");
        let ids: Vec<String> = described.groups[0]
            .members
            .iter()
            .map(|m| m.member_id.to_string())
            .collect();
        assert!(ids.contains(&back.member_id) && !ids.contains(&old_bouncer));

        // With v9 a returning static leader learns it leads, and that it must not reassign.
        let returned = cluster
            .client("l2")
            .join_request(9, "g", "", Some("leader"), &protocols, LONG)
            .await;
        assert_eq!(returned.error_code, NONE);
        assert_eq!(returned.generation_id, 1);
        assert!(returned.skip_assignment);
        assert_eq!(returned.leader, returned.member_id);
        assert_eq!(returned.members.len(), 2);
        cluster.close().await;
    });
}

#[test]
fn the_protocol_is_the_one_most_members_prefer_among_those_all_support() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let meta = |name: &str, member: u8| Bytes::from(vec![member, name.len() as u8]);
        let clients: Vec<Client> = ["a", "b", "c"].iter().map(|c| cluster.client(c)).collect();

        // Only roundrobin is supported by all: it wins though range is a's first choice.
        let protocols = vec![
            vec![
                ("range", meta("range", 0)),
                ("roundrobin", meta("roundrobin", 0)),
            ],
            vec![
                ("roundrobin", meta("roundrobin", 1)),
                ("range", meta("range", 1)),
            ],
            vec![
                ("roundrobin", meta("roundrobin", 2)),
                ("cooperative-sticky", meta("cooperative-sticky", 2)),
            ],
        ];
        let members = join_all(&clients, "g1", &protocols, LONG).await;
        assert!(
            members
                .iter()
                .all(|m| m.protocol.as_deref() == Some("roundrobin"))
        );
        let leader = members.iter().find(|m| m.member_id == m.leader).unwrap();
        for (member, sent) in &leader.members {
            let i = members.iter().position(|m| m.member_id == *member).unwrap();
            assert_eq!(
                *sent,
                meta("roundrobin", i as u8),
                "metadata of the chosen protocol"
            );
        }

        // Two of three prefer a.
        let protocols = vec![
            vec![("a", meta("a", 0)), ("b", meta("b", 0))],
            vec![("b", meta("b", 1)), ("a", meta("a", 1))],
            vec![("a", meta("a", 2)), ("b", meta("b", 2))],
        ];
        let members = join_all(&clients, "g2", &protocols, LONG).await;
        assert!(members.iter().all(|m| m.protocol.as_deref() == Some("a")));

        // A member with nothing in common, or of another protocol type, is refused.
        let outsider = cluster.client("d");
        let refused = outsider
            .join_request(5, "g2", "", None, &[("c", meta("c", 3))], LONG)
            .await;
        assert_eq!(
            refused.error_code,
            err(ResponseError::InconsistentGroupProtocol)
        );
        let mut connect = net::kafka_protocol::messages::JoinGroupRequest::default()
            .with_group_id(GroupId(s("g2")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(s("connect"));
        connect.protocols = vec![
            net::kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol::default()
                .with_name(s("a")),
        ];
        let Response::JoinGroup(refused) = outsider.send(connect.clone(), 5).await else {
            panic!("not a JoinGroup response");
        };
        assert_eq!(
            refused.error_code,
            err(ResponseError::InconsistentGroupProtocol)
        );
        // A new group needs a protocol type and at least one protocol.
        connect.group_id = GroupId(s("g3"));
        connect.protocols.clear();
        let Response::JoinGroup(refused) = outsider.send(connect, 5).await else {
            panic!("not a JoinGroup response");
        };
        assert_eq!(
            refused.error_code,
            err(ResponseError::InconsistentGroupProtocol)
        );
        cluster.close().await;
    });
}

#[test]
fn the_first_rebalance_of_an_empty_group_waits_for_more_members() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let config = GroupConfig {
            initial_rebalance_delay_ms: 400,
            ..fast_config()
        };
        let cluster = Cluster::open(dir.path(), 1, config).await;
        let started = Instant::now();
        let first = {
            let client = cluster.client("a");
            glommio::spawn_local(async move {
                let joined = client.join(5, "g", None, &range_of(&["t"]), LONG).await;
                (joined, started.elapsed())
            })
        };
        glommio::timer::sleep(Duration::from_millis(100)).await;
        let second = cluster
            .client("b")
            .join(5, "g", None, &range_of(&["t"]), LONG)
            .await;
        let (first, waited) = first.await;
        assert!(waited >= Duration::from_millis(400), "{waited:?}");
        assert_eq!((first.generation, second.generation), (1, 1));
        let leader = if first.member_id == first.leader {
            &first
        } else {
            &second
        };
        assert_eq!(leader.members.len(), 2);
        cluster.close().await;
    });
}

#[test]
fn requests_that_do_not_fit_the_group_are_refused() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let client = cluster.client("x");
        let protocols = range_of(&["t"]);
        let join_error = |group: &'static str, member: &'static str, session_ms: i32| {
            let (client, protocols) = (client.clone(), protocols.clone());
            async move {
                client
                    .join_request(
                        5,
                        group,
                        member,
                        None,
                        &protocols,
                        Timeouts::new(session_ms, 10_000),
                    )
                    .await
                    .error_code
            }
        };
        assert_eq!(
            join_error("g", "", 5).await,
            err(ResponseError::InvalidSessionTimeout)
        );
        assert_eq!(
            join_error("g", "", 70_000).await,
            err(ResponseError::InvalidSessionTimeout)
        );
        assert_eq!(
            join_error("", "", 10_000).await,
            err(ResponseError::InvalidGroupId)
        );
        assert_eq!(
            join_error("nowhere", "ghost", 10_000).await,
            err(ResponseError::UnknownMemberId)
        );
        assert_eq!(
            client.heartbeat(4, "nowhere", 1, "ghost", None).await,
            err(ResponseError::UnknownMemberId)
        );

        let both = vec![protocols.clone(), protocols.clone()];
        let (clients, members) = stable_group(&cluster, &["a", "b"], "g", &both, LONG).await;
        let leader = members
            .iter()
            .position(|m| m.member_id == m.leader)
            .unwrap();
        let follower = 1 - leader;
        let (l, f) = (&members[leader].member_id, &members[follower].member_id);
        assert_eq!(
            clients[follower].heartbeat(4, "g", 2, f, None).await,
            err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            clients[follower]
                .sync(3, "g", 0, f, None, &[])
                .await
                .error_code,
            err(ResponseError::IllegalGeneration)
        );
        assert_eq!(
            clients[follower]
                .heartbeat(4, "g", 1, "stranger", None)
                .await,
            err(ResponseError::UnknownMemberId)
        );
        let mut wrong_protocol = net::kafka_protocol::messages::SyncGroupRequest::default()
            .with_group_id(GroupId(s("g")))
            .with_generation_id(1)
            .with_member_id(s(f));
        wrong_protocol.protocol_type = Some(s("consumer"));
        wrong_protocol.protocol_name = Some(s("roundrobin"));
        let Response::SyncGroup(refused) = clients[follower].send(wrong_protocol, 5).await else {
            panic!("not a SyncGroup response");
        };
        assert_eq!(
            refused.error_code,
            err(ResponseError::InconsistentGroupProtocol)
        );

        // The leader rejoining starts a rebalance: the follower is told so.
        let rejoin = {
            let (client, l, protocols) = (clients[leader].clone(), l.clone(), protocols.clone());
            glommio::spawn_local(
                async move { client.rejoin(5, "g", &l, None, &protocols, LONG).await },
            )
        };
        future::yield_now().await;
        assert_eq!(
            clients[follower]
                .sync(3, "g", 1, f, None, &[])
                .await
                .error_code,
            err(ResponseError::RebalanceInProgress)
        );
        assert_eq!(
            clients[follower].heartbeat(4, "g", 1, f, None).await,
            err(ResponseError::RebalanceInProgress)
        );
        let again = clients[follower]
            .rejoin(5, "g", f, None, &protocols, LONG)
            .await;
        assert_eq!(again.generation, 2);
        assert_eq!(rejoin.await.generation, 2);
        cluster.close().await;

        // group.max.size
        let dir = tempfile::tempdir().unwrap();
        let config = GroupConfig {
            max_group_size: 1,
            initial_rebalance_delay_ms: 0,
            ..fast_config()
        };
        let cluster = Cluster::open(dir.path(), 1, config).await;
        cluster
            .client("one")
            .join(5, "g", None, &protocols, LONG)
            .await;
        let two = cluster
            .client("two")
            .join_request(3, "g", "", None, &protocols, LONG)
            .await;
        assert_eq!(two.error_code, err(ResponseError::GroupMaxSizeReached));
        cluster.close().await;
    });
}

#[test]
fn members_that_never_sync_are_dropped_after_the_rebalance_timeout() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let rebalance_ms = 300;
        let clients: Vec<Client> = ["a", "b"].iter().map(|c| cluster.client(c)).collect();
        let protocols = vec![range_of(&["t"]); 2];
        let members = join_all(
            &clients,
            "g",
            &protocols,
            Timeouts::new(10_000, rebalance_ms),
        )
        .await;
        let leader = members
            .iter()
            .position(|m| m.member_id == m.leader)
            .unwrap();
        let l = members[leader].member_id.clone();
        let assignments: Vec<(String, Bytes)> = members
            .iter()
            .map(|m| (m.member_id.clone(), opaque_assignment(&m.member_id)))
            .collect();
        let synced = clients[leader]
            .sync(3, "g", 1, &l, None, &assignments)
            .await;
        assert_eq!(synced.error_code, NONE);

        // The follower never syncs: once the rebalance timeout passes it is dropped.
        let told = within(
            5 * SECOND,
            clients[leader].heartbeat_until_error("g", 1, &l, Duration::from_millis(40)),
        )
        .await;
        assert_eq!(told, err(ResponseError::RebalanceInProgress));
        let alone = clients[leader]
            .rejoin(
                5,
                "g",
                &l,
                None,
                &protocols[0],
                Timeouts::new(10_000, rebalance_ms),
            )
            .await;
        assert_eq!((alone.generation, alone.members.len()), (2, 1));
        cluster.close().await;
    });
}

#[test]
fn members_that_do_not_rejoin_in_time_are_left_out_of_the_next_generation() {
    run(|| async {
        let dir = tempfile::tempdir().unwrap();
        let cluster = Cluster::open(dir.path(), 1, fast_config()).await;
        let rebalance_ms = 300;
        let protocols = vec![range_of(&["t"]); 2];
        let (clients, members) = stable_group(
            &cluster,
            &["a", "b"],
            "g",
            &protocols,
            Timeouts::new(10_000, rebalance_ms),
        )
        .await;

        // a subscribes to more: a rebalance. b stays silent (its session is long).
        let started = Instant::now();
        let a = clients[0]
            .rejoin(
                5,
                "g",
                &members[0].member_id,
                None,
                &range_of(&["t", "u"]),
                Timeouts::new(10_000, rebalance_ms),
            )
            .await;
        assert!(started.elapsed() >= Duration::from_millis(rebalance_ms as u64));
        assert_eq!((a.generation, &a.leader), (2, &a.member_id));
        assert_eq!(a.members.len(), 1);
        assert_eq!(
            clients[1]
                .heartbeat(4, "g", 1, &members[1].member_id, None)
                .await,
            err(ResponseError::UnknownMemberId)
        );
        cluster.close().await;
    });
}
