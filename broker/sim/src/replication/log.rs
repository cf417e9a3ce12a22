//! One replica's fake log: a batch (one record) per offset, each with the leader epoch it was
//! stamped with and a hash of its payload; the written and durable levels; what a crash keeps.
//!
//! Writes and syncs complete later, as events the world schedules. A truncation or a crash
//! starts a new generation: completions of writes submitted before it are void (they may name
//! offsets that now hold other batches), and the world resubmits what is left.

use controller::replica::{EpochStart, LogView};

/// One record batch as the simulator sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Batch {
    pub epoch: i32,
    pub hash: u64,
}

#[derive(Debug, Clone, Default)]
pub struct FakeLog {
    /// Batch i is at offset i (the log never loses its start here: no retention).
    batches: Vec<Batch>,
    written: i64,
    durable: i64,
    /// Bumped by every truncation and crash.
    pub generation: u64,
}

impl FakeLog {
    pub fn end(&self) -> i64 {
        self.batches.len() as i64
    }

    pub fn view(&self) -> LogView {
        LogView {
            start: 0,
            end: self.end(),
            written: self.written,
            durable: self.durable,
        }
    }

    /// The epoch → start offset map, as the log's batches give it (Kafka rebuilds its
    /// `leader-epoch-checkpoint` the same way).
    pub fn epochs(&self) -> Vec<EpochStart> {
        let mut epochs: Vec<EpochStart> = Vec::new();
        for (offset, b) in (0..).zip(&self.batches) {
            if epochs.last().is_none_or(|e| e.epoch != b.epoch) {
                epochs.push(EpochStart {
                    epoch: b.epoch,
                    start_offset: offset,
                });
            }
        }
        epochs
    }

    pub fn get(&self, offset: i64) -> Option<Batch> {
        self.batches.get(usize::try_from(offset).ok()?).copied()
    }

    /// Batches from `from` (at most `max`) below `to`.
    pub fn read(&self, from: i64, to: i64, max: usize) -> Vec<Batch> {
        let from = usize::try_from(from).unwrap_or(0);
        let to = usize::try_from(to).unwrap_or(0).min(self.batches.len());
        self.batches
            .get(from..to)
            .map(|b| b.iter().take(max).copied().collect())
            .unwrap_or_default()
    }

    /// Appends at the end; an epoch older than the last batch's is refused, as storage's
    /// `append_replicated` refuses it (`EpochWentBack`).
    pub fn append(&mut self, batches: &[Batch]) -> Result<(), String> {
        for b in batches {
            if let Some(last) = self.batches.last()
                && b.epoch < last.epoch
            {
                return Err(format!(
                    "a batch of epoch {} after one of epoch {} at offset {}",
                    b.epoch,
                    last.epoch,
                    self.end()
                ));
            }
            self.batches.push(*b);
        }
        Ok(())
    }

    /// A write submitted when the log ended at `upto` completed.
    pub fn written_up_to(&mut self, upto: i64) {
        self.written = self.written.max(upto.min(self.end()));
    }

    /// A sync submitted when `upto` was written completed.
    pub fn synced_up_to(&mut self, upto: i64) {
        self.durable = self.durable.max(upto.min(self.written));
    }

    /// Everything at or after `offset` goes.
    pub fn truncate(&mut self, offset: i64) {
        let keep = usize::try_from(offset.max(0)).unwrap_or(0);
        self.batches.truncate(keep);
        self.written = self.written.min(self.end());
        self.durable = self.durable.min(self.end());
        self.generation += 1;
    }

    /// The process dies: what was written survives; with `power_loss`, only what was synced.
    pub fn crash(&mut self, power_loss: bool) {
        let keep = if power_loss {
            self.durable
        } else {
            self.written
        };
        self.truncate(keep);
    }
}
