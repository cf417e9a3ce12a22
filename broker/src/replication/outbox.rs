//! The shard's queue of what its replicas asked for (messages, ISR proposals, truncations) and
//! of the partitions that may have batches for a follower, drained by the shard's replication
//! task in order.

use std::cell::RefCell;
use std::collections::{BTreeSet, VecDeque};

use quorum::replica::Action;
use quorum::replica_wire::PartitionKey;
use storage::Watermark;

#[derive(Debug)]
pub struct Outbox {
    actions: RefCell<VecDeque<(PartitionKey, Action)>>,
    /// Partitions whose followers may need batches: the sender looks at these only, never at
    /// every partition of the shard.
    dirty: RefCell<BTreeSet<PartitionKey>>,
    /// Bumped on every push: the replication task waits for it to move.
    bell: Watermark,
}

impl Default for Outbox {
    fn default() -> Outbox {
        Outbox {
            actions: RefCell::new(VecDeque::new()),
            dirty: RefCell::new(BTreeSet::new()),
            bell: Watermark::new(0),
        }
    }
}

impl Outbox {
    pub fn push(&self, key: PartitionKey, action: Action) {
        self.actions.borrow_mut().push_back((key, action));
        self.ring();
    }

    pub fn mark(&self, key: PartitionKey) {
        if self.dirty.borrow_mut().insert(key) {
            self.ring();
        }
    }

    fn ring(&self) {
        self.bell.advance(self.bell.get() + 1);
    }

    pub fn take_actions(&self) -> VecDeque<(PartitionKey, Action)> {
        std::mem::take(&mut *self.actions.borrow_mut())
    }

    pub fn take_dirty(&self) -> BTreeSet<PartitionKey> {
        std::mem::take(&mut *self.dirty.borrow_mut())
    }

    /// Waits until something is pushed or marked after `seen` (the bell's value when the
    /// caller last looked); returns the new value.
    pub async fn wait(&self, seen: i64) -> i64 {
        let _ = self.bell.wait_for(seen + 1).await;
        self.bell.get()
    }

    pub fn rung(&self) -> i64 {
        self.bell.get()
    }
}
