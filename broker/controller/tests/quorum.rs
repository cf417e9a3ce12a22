//! The quorum's contract with its host, one voter at a time (the simulator, broker/sim, runs
//! whole quorums under faults).

use bytes::Bytes;
use controller::{Action, Config, Durable, Event, LogIndex, PersistId, Quorum, QuorumError, Role};
use model::NodeId;

fn persists(actions: &[Action]) -> Vec<PersistId> {
    actions
        .iter()
        .filter_map(|a| {
            if let Action::Persist(p) = a {
                Some(p.id)
            } else {
                None
            }
        })
        .collect()
}

fn applied(actions: &[Action]) -> Vec<Bytes> {
    actions
        .iter()
        .filter_map(|a| {
            if let Action::Apply(e) = a {
                Some(e.data.clone())
            } else {
                None
            }
        })
        .collect()
}

/// Reports every persist asked for as done, until nothing more is asked; returns every action.
fn settle(q: &mut Quorum, mut actions: Vec<Action>) -> Vec<Action> {
    let mut all = Vec::new();
    while let Some(&last) = persists(&actions).last() {
        all.extend(actions);
        actions = q.step(Event::Persisted(last)).expect("persisted");
    }
    all.extend(actions);
    all
}

#[test]
fn a_quorum_of_one_commits_with_nothing_but_its_local_persist() {
    let mut q = Quorum::new(
        Config::new(NodeId(1), vec![NodeId(1)], "c"),
        Durable::default(),
    )
    .expect("new");
    let started = q.start().expect("start");
    assert!(started.contains(&Action::LeaderChanged {
        leader: Some(NodeId(1)),
        term: controller::Term(1)
    }));
    settle(&mut q, started);
    assert_eq!(q.status().role, Role::Leader);

    let proposed = q
        .step(Event::Propose(Bytes::from_static(b"create topic")))
        .expect("propose");
    let Some(Action::Proposed { index, .. }) = proposed.first().cloned() else {
        panic!("no Proposed: {proposed:?}")
    };
    // Not applied before its persist is reported, applied right after: no tick, no message.
    assert!(applied(&proposed).is_empty());
    assert!(!proposed.iter().any(|a| matches!(a, Action::Send { .. })));
    let id = *persists(&proposed).last().expect("a persist");
    let done = q.step(Event::Persisted(id)).expect("persisted");
    assert_eq!(applied(&done), vec![Bytes::from_static(b"create topic")]);
    assert_eq!(q.status().commit, index);
    assert_eq!(q.voters_progress(), vec![(NodeId(1), Some(index))]);
}

#[test]
fn a_snapshot_is_asked_for_every_n_entries_and_compacts_the_log() {
    let mut config = Config::new(NodeId(1), vec![NodeId(1)], "c");
    config.snapshot_every_entries = 4;
    let mut q = Quorum::new(config, Durable::default()).expect("new");
    let started = q.start().expect("start");
    settle(&mut q, started);
    let mut asked = None;
    for i in 0..3 {
        let actions = q
            .step(Event::Propose(Bytes::from(format!("p{i}"))))
            .expect("propose");
        for a in settle(&mut q, actions) {
            if let Action::TakeSnapshot { index } = a {
                asked = Some(index);
            }
        }
    }
    // The leader's no-op entry and three proposals: four applied entries.
    assert_eq!(asked, Some(LogIndex(4)));
    let saved = q
        .step(Event::SnapshotTaken {
            index: LogIndex(4),
            data: Bytes::from_static(b"state"),
        })
        .expect("taken");
    assert!(
        matches!(&saved[..], [Action::SaveSnapshot(s)] if s.index == LogIndex(4) && s.data == "state")
    );
    assert_eq!(q.status().first_index, LogIndex(5));
    // An answer nobody asked for is refused.
    assert!(matches!(
        q.step(Event::SnapshotTaken {
            index: LogIndex(4),
            data: Bytes::new()
        }),
        Err(QuorumError::UnexpectedSnapshot { .. })
    ));
}

#[test]
fn bad_ids_and_host_mistakes_are_refused_with_typed_errors() {
    let new =
        |node, voters| Quorum::new(Config::new(NodeId(node), voters, "c"), Durable::default());
    assert!(matches!(
        new(-1, vec![NodeId(-1)]),
        Err(QuorumError::InvalidNodeId(NodeId(-1)))
    ));
    assert!(
        new(0, vec![NodeId(0)]).is_ok(),
        "node 0 is Spindle's default id"
    );
    assert!(matches!(
        new(1, vec![NodeId(1), NodeId(-2)]),
        Err(QuorumError::InvalidNodeId(NodeId(-2)))
    ));
    assert!(matches!(
        new(1, vec![NodeId(2), NodeId(3)]),
        Err(QuorumError::NotAVoter { .. })
    ));
    assert!(matches!(
        new(1, vec![NodeId(1), NodeId(1)]),
        Err(QuorumError::DuplicateVoter(NodeId(1)))
    ));

    let mut q = new(1, vec![NodeId(1), NodeId(2), NodeId(3)]).expect("new");
    assert!(q.start().expect("start").is_empty());
    assert!(matches!(
        q.step(Event::Propose(Bytes::from_static(b"x"))),
        Err(QuorumError::NotLeader { leader: None })
    ));
    assert!(matches!(
        q.step(Event::Persisted(PersistId(9))),
        Err(QuorumError::UnknownPersist { .. })
    ));
    assert!(matches!(
        q.step(Event::Frame(Bytes::from_static(b"garbage"))),
        Err(QuorumError::Frame(_))
    ));
}

#[test]
fn a_persisted_state_that_does_not_hold_together_is_refused() {
    let entry = |index, term| controller::LogEntry {
        index: LogIndex(index),
        term: controller::Term(term),
        data: Bytes::new(),
    };
    let config = || Config::new(NodeId(1), vec![NodeId(1), NodeId(2), NodeId(3)], "c");
    let gap = Durable {
        entries: vec![entry(1, 1), entry(3, 1)],
        ..Default::default()
    };
    assert!(matches!(
        Quorum::new(config(), gap),
        Err(QuorumError::CorruptDurable(_))
    ));
    let mut beyond = Durable {
        entries: vec![entry(1, 1)],
        ..Default::default()
    };
    beyond.hard_state.term = controller::Term(1);
    beyond.hard_state.commit = LogIndex(2);
    assert!(matches!(
        Quorum::new(config(), beyond),
        Err(QuorumError::CorruptDurable(_))
    ));
    let mut stranger = Durable::default();
    stranger.hard_state.vote = Some(NodeId(7));
    assert!(matches!(
        Quorum::new(config(), stranger),
        Err(QuorumError::CorruptDurable(_))
    ));
}

#[test]
fn a_vote_is_sent_only_after_its_persist_is_reported() {
    let voters = vec![NodeId(1), NodeId(2), NodeId(3)];
    let mut a = Quorum::new(
        Config::new(NodeId(1), voters.clone(), "c"),
        Durable::default(),
    )
    .expect("a");
    let mut b = Quorum::new(Config::new(NodeId(2), voters, "c"), Durable::default()).expect("b");
    let frames_to = |to: i32, actions: &[Action]| -> Vec<Bytes> {
        actions
            .iter()
            .filter_map(|x| match x {
                Action::Send { to: t, frame } if t.0 == to => Some(Bytes::from(frame.clone())),
                _ => None,
            })
            .collect()
    };
    let mut vote_answered = false;
    // Node 1 campaigns (pre-vote, then vote); node 2 answers; node 3 is down.
    for _ in 0..200 {
        let ticked = a.step(Event::Tick).expect("tick");
        let mut to_b = frames_to(2, &settle(&mut a, ticked));
        while !to_b.is_empty() {
            let mut to_a = Vec::new();
            for frame in std::mem::take(&mut to_b) {
                let actions = b.step(Event::Frame(frame)).expect("frame");
                let records_vote = actions.iter().any(|x| {
                    matches!(x, Action::Persist(p) if p.hard_state.is_some_and(|h| h.vote == Some(NodeId(1))))
                });
                if records_vote {
                    assert!(
                        frames_to(1, &actions).is_empty(),
                        "node 2 answered before its vote was persisted"
                    );
                    let id = *persists(&actions).last().expect("persist");
                    let after = b.step(Event::Persisted(id)).expect("persisted");
                    assert!(
                        !frames_to(1, &after).is_empty(),
                        "node 2 never answered the vote"
                    );
                    vote_answered = true;
                    to_a.extend(frames_to(1, &after));
                }
                to_a.extend(frames_to(1, &settle(&mut b, actions)));
            }
            for frame in to_a {
                let actions = a.step(Event::Frame(frame)).expect("frame");
                to_b.extend(frames_to(2, &settle(&mut a, actions)));
            }
        }
        if a.status().role == Role::Leader {
            break;
        }
    }
    assert!(vote_answered, "node 2 never recorded a vote for node 1");
    assert_eq!(
        a.status().role,
        Role::Leader,
        "node 1 was not elected by itself and node 2"
    );
}

/// A frame as peer 2 would send it to node 1.
fn frame_from_2(m: &mut raft::eraftpb::Message) -> Bytes {
    m.from = 2;
    m.to = 1;
    Bytes::from(controller::wire::encode("c", NodeId(2), NodeId(1), m).expect("encode"))
}

#[test]
fn a_peer_that_contradicts_raft_stops_the_voter_instead_of_the_process() {
    let voters = vec![NodeId(1), NodeId(2), NodeId(3)];
    let mut q = Quorum::new(Config::new(NodeId(1), voters, "c"), Durable::default()).expect("new");
    q.start().expect("start");
    // A "leader" claiming entries committed that this voter never acknowledged: raft-rs
    // asserts on it; the quorum stops with a typed error and refuses everything after.
    let mut m = raft::eraftpb::Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgHeartbeat);
    m.term = 1;
    m.commit = 100;
    let stopped = q.step(Event::Frame(frame_from_2(&mut m)));
    assert!(
        matches!(stopped, Err(QuorumError::Stopped(_))),
        "{stopped:?}"
    );
    assert!(matches!(q.step(Event::Tick), Err(QuorumError::Stopped(_))));
}

#[test]
fn a_snapshot_taken_under_other_voters_is_refused() {
    let voters = vec![NodeId(1), NodeId(2), NodeId(3)];
    let mut q = Quorum::new(Config::new(NodeId(1), voters, "c"), Durable::default()).expect("new");
    let mut m = raft::eraftpb::Message::default();
    m.set_msg_type(raft::eraftpb::MessageType::MsgSnapshot);
    m.term = 1;
    let s = m.mut_snapshot();
    s.mut_metadata().index = 5;
    s.mut_metadata().term = 1;
    s.mut_metadata().mut_conf_state().voters = vec![1, 2, 4];
    let refused = q.step(Event::Frame(frame_from_2(&mut m)));
    assert!(
        matches!(
            refused,
            Err(QuorumError::VotersDisagree {
                from: NodeId(2),
                ..
            })
        ),
        "{refused:?}"
    );
    assert_eq!(q.status().commit, LogIndex(0));
}
