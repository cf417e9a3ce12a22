//! One replicated partition's side of replication on its shard: the IO-free
//! [`controller::replica::Replica`] that decides, the high watermark consumers and acks=all
//! producers wait on, and the shard's [`Outbox`] where the replica's other actions go.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use model::PartitionState;
use quorum::replica::{Action, EpochStart, LogView, Replica, ReplicaConfig};
use quorum::replica_wire::PartitionKey;
use storage::{Log, Watermark};

use super::outbox::Outbox;

#[derive(Debug)]
pub struct Replicated {
    pub key: PartitionKey,
    sm: RefCell<Replica>,
    /// Consumers read below it; acks=all producers wait for it.
    high_watermark: Watermark,
    /// Bumped whenever the replica's role or ISR may have changed, so acks=all waiters decide
    /// again.
    changes: Watermark,
    /// A task is making the log durable up to its end (see [`super::Replication::chase`]).
    pub(super) chasing: Cell<bool>,
    outbox: Rc<Outbox>,
}

/// Where a log is, as the replica state machine sees it.
pub fn view(log: &Log) -> LogView {
    LogView {
        start: log.log_start_offset(),
        end: log.log_end_offset(),
        written: log.written_offset(),
        durable: log.durable_offset(),
    }
}

/// The log's leader epochs, as the state machine takes them.
pub fn epochs(log: &Log) -> Vec<EpochStart> {
    log.leader_epochs()
        .into_iter()
        .map(|e| EpochStart {
            epoch: e.epoch,
            start_offset: e.start_offset,
        })
        .collect()
}

impl Replicated {
    pub fn new(
        key: PartitionKey,
        config: ReplicaConfig,
        state: &PartitionState,
        log: &Log,
        outbox: Rc<Outbox>,
        now_ms: u64,
    ) -> Replicated {
        let log_view = view(log);
        // Nothing says how far this replica's records are committed until its leader does (or,
        // leading, until its ISR has them again).
        let (sm, actions) = Replica::new(config, state, log_view, log_view.start, now_ms);
        let replicated = Replicated {
            key,
            high_watermark: Watermark::new(sm.high_watermark()),
            sm: RefCell::new(sm),
            changes: Watermark::new(0),
            chasing: Cell::new(false),
            outbox,
        };
        replicated.carry_out(actions);
        replicated
    }

    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.get()
    }

    pub fn high_watermark_mark(&self) -> &Watermark {
        &self.high_watermark
    }

    pub fn changes(&self) -> &Watermark {
        &self.changes
    }

    /// Runs `f` on the state machine and carries out what it returns.
    pub fn step<T>(&self, f: impl FnOnce(&mut Replica) -> (T, Vec<Action>)) -> T {
        let (value, actions) = f(&mut self.sm.borrow_mut());
        self.carry_out(actions);
        value
    }

    /// Reads the state machine.
    pub fn with<T>(&self, f: impl FnOnce(&Replica) -> T) -> T {
        f(&self.sm.borrow())
    }

    pub fn on_metadata(&self, state: &PartitionState, log: &Log, now_ms: u64) {
        self.step(|r| ((), r.on_metadata(state, view(log), now_ms)));
        self.changes.advance(self.changes.get() + 1);
    }

    pub fn on_local_log(&self, log: &Log, now_ms: u64) {
        self.step(|r| ((), r.on_local_log(view(log), now_ms)));
    }

    /// The high watermark moves here, at once (waiters decide with the state machine's own
    /// value); everything else waits its turn in the shard's outbox.
    fn carry_out(&self, actions: Vec<Action>) {
        let mut changed = false;
        for action in actions {
            match action {
                Action::HighWatermark(hw) => {
                    if hw >= self.high_watermark.get() {
                        self.high_watermark.advance(hw);
                    } else {
                        self.high_watermark.reset(hw);
                    }
                }
                Action::ProposeIsr { .. } => {
                    changed = true;
                    self.outbox.push(self.key, action);
                }
                other => self.outbox.push(self.key, other),
            }
        }
        if changed {
            self.changes.advance(self.changes.get() + 1);
        }
        self.outbox.mark(self.key);
    }
}
