//! The controller quorum's consensus, free of IO: one voter of the Raft quorum that keeps the
//! cluster's metadata log, built on raft-rs's `RawNode` and driven as a closed loop. The host
//! feeds it [`Event`]s and carries out the [`Action`]s it returns; nothing in here opens a file
//! or a socket, reads a clock, or draws unseeded randomness, so the simulator (`broker/sim`)
//! runs the very same code through a fake network, disk and time.
//!
//! **Architecture invariant:** this crate knows nothing about glommio, storage or sockets. The
//! proposals it orders are opaque bytes (encoded metadata commands); it never interprets them.
//!
//! # The host's loop
//!
//! The host (in the broker: shard 0) owns one [`Quorum`] and, for it, a Raft log file and a
//! snapshot file in the data directory and a connection to each peer's cluster listener.
//!
//! 1. At start, read back everything persisted into a [`Durable`] (a new node: the default),
//!    start the state machine from its snapshot (or empty), build the quorum with
//!    [`Quorum::new`] (which refuses ids, voters or a persisted state that do not hold
//!    together), and carry out the actions of [`Quorum::start`].
//! 2. Then call [`Quorum::step`] with each event as it happens, and carry out the returned
//!    actions **in the order given**, before the next event:
//!    - [`Event::Tick`] every tick interval (100 ms is a good one: with the default
//!      `election_ticks` of 10 an election starts after 1-2 s without a leader);
//!    - [`Event::Frame`] for each frame a peer sent (the bytes as they came: the quorum
//!      verifies them; a refused frame is an `Err` to log, and changes nothing);
//!    - [`Event::Propose`] for a command to commit (refused unless this voter leads:
//!      [`QuorumError::NotLeader`] names the leader to forward it to);
//!    - [`Event::Persisted`] when a persist is durable;
//!    - [`Event::SnapshotTaken`] with the state machine's bytes after a `TakeSnapshot`.
//!
//! What each action asks of the host:
//! - [`Action::Persist`]: write the snapshot (if any: it replaces the whole log), then the
//!   entries (cut the log before the first one's index, then append), then the hard state; sync
//!   it (unless `sync` is false), and only then report `Event::Persisted(id)`. Persists complete
//!   in the order they were asked for: reporting an id reports every earlier one too. This is
//!   where Raft's safety lives: a vote or an append is answered only after the persist that
//!   records it was reported, and the quorum enforces that by holding those messages back
//!   until then, so a host that reports a persist before it is durable breaks Raft.
//! - [`Action::Send`]: send the frame to that peer. Best effort: drop it if the peer is
//!   unreachable or its queue is full (bound it); Raft resends what matters.
//! - [`Action::Restore`]: replace the state machine with the snapshot's data (a follower that
//!   fell behind the leader's log).
//! - [`Action::Apply`]: apply the committed entry to the state machine. Entries come in log
//!   order with no gaps, each exactly once per start; empty data is a new leader's no-op, to
//!   be counted but applied as nothing. An entry whose index and term match an
//!   [`Action::Proposed`] is that proposal, committed.
//! - [`Action::TakeSnapshot`]: serialize the state machine as it is right now (every entry up
//!   to `index` applied, none after) and report it with `Event::SnapshotTaken` (later is fine:
//!   keep applying meanwhile; the quorum asks again only after an answer).
//! - [`Action::SaveSnapshot`]: write the snapshot durably (write a new file, sync, rename);
//!   after that the log's entries up to its index may be deleted. Nothing waits on it.
//! - [`Action::LeaderChanged`]: who leads now, in which term (for routing proposals and for
//!   DescribeCluster).
//! - [`Action::Proposed`]: where a proposal went; see `Apply`.
//!
//! A quorum of one elects itself in `start` and commits each proposal as soon as its own persist
//! is reported: no more latency than the local sync.
//!
//! # Modules
//! - [`brokers`]: the active controller's broker sessions, and the commands that fence a
//!   broker (moving its leaderships first) or bring it back.
//! - [`leadership`]: who leads a partition and who is in its ISR: elections (after a fence, at
//!   a return, asked by ElectLeaders) and the ISR changes leaders propose.
//! - [`quorum`]: `Quorum`, its config, events and actions.
//! - [`wire`]: the Raft frames between voters (FlatBuffers, `schema/fbs/controller.fbs`).
//! - [`envelope`]: every frame on the cluster listener (`schema/fbs/cluster.fbs`), Raft's inside.
//! - [`replica_wire`]: the frames between peer shards that replicate partitions
//!   (`schema/fbs/replication.fbs`): the handshake and the replica messages.
//! - [`types`]: terms, log indexes and the plain records the host persists.
//! - `log_store`: the in-memory log behind raft-rs's `Storage`, bounded by the snapshots.
//! - `logger`: raft-rs's slog records forwarded to tracing.

pub mod brokers;
pub mod envelope;
pub mod error;
pub mod leadership;
mod log_store;
mod logger;
pub mod quorum;
pub mod replica;
pub mod replica_wire;
pub mod types;
pub mod wire;

pub use error::QuorumError;
pub use quorum::{Action, Config, Event, Persist, Quorum, Status};
pub use types::{Durable, HardState, LogEntry, LogIndex, PersistId, Role, SnapshotImage, Term};
