//! The replication invariants, checked as the run goes (each where the state it is about
//! changes, so a step costs what it changed, not the size of the logs):
//! - no acknowledged record is lost or changed: every member of the committed ISR holds it at
//!   its offset, when it is acknowledged, when a member joins, and whenever a member's log is
//!   cut (truncation, crash);
//! - committed prefixes are identical: below its high watermark, every replica's log is the one
//!   committed sequence of batches (the leader's HW also bounds each ISR member's);
//! - one leader per (partition, leader epoch);
//! - a high watermark never goes back within a leader epoch (on one run of a node), and a
//!   leader's advances only while its ISR has `min.insync.replicas`.

use std::collections::BTreeMap;

use model::NodeId;

use super::log::{Batch, FakeLog};

#[derive(Debug, Default)]
pub struct Checker {
    /// Per partition: the batch at each offset below some high watermark.
    committed: Vec<Vec<Batch>>,
    /// (partition, offset) → the acknowledged batch.
    acked: BTreeMap<(usize, i64), Batch>,
    leaders: BTreeMap<(usize, i32), NodeId>,
    /// (node, partition) → (node's run, leader epoch, high watermark) last seen.
    high_watermarks: BTreeMap<(NodeId, usize), (u64, i32, i64)>,
    /// (node, partition) → how far its log was checked against `committed`.
    checked: BTreeMap<(NodeId, usize), i64>,
}

impl Checker {
    pub fn new(partitions: usize) -> Checker {
        Checker {
            committed: vec![Vec::new(); partitions],
            ..Checker::default()
        }
    }

    pub fn acknowledged(&self) -> usize {
        self.acked.len()
    }

    pub fn committed(&self) -> usize {
        self.committed.iter().map(Vec::len).sum()
    }

    /// `node` leads `partition` in `epoch`.
    pub fn leader(&mut self, partition: usize, epoch: i32, node: NodeId) -> Result<(), String> {
        let first = *self.leaders.entry((partition, epoch)).or_insert(node);
        if first != node {
            return Err(format!(
                "two leaders of partition {partition} in epoch {epoch}: node {first} and node {node}"
            ));
        }
        Ok(())
    }

    /// A record was acknowledged: every member of the committed ISR must hold it.
    pub fn acked(
        &mut self,
        partition: usize,
        offset: i64,
        batch: Batch,
        isr: &[(NodeId, &FakeLog)],
    ) -> Result<(), String> {
        if let Some(before) = self.acked.insert((partition, offset), batch)
            && before != batch
        {
            return Err(format!(
                "offset {offset} of partition {partition} acknowledged twice, for {before:?} and {batch:?}"
            ));
        }
        for (node, log) in isr {
            if log.get(offset) != Some(batch) {
                return Err(format!(
                    "acknowledged {batch:?} at {partition}:{offset} is not on ISR member {node} (it has {:?})",
                    log.get(offset)
                ));
            }
        }
        Ok(())
    }

    /// An ISR member's log: it must hold every acknowledged record (`why` says what happened).
    pub fn holds_acked(
        &self,
        partition: usize,
        node: NodeId,
        log: &FakeLog,
        why: &str,
    ) -> Result<(), String> {
        for ((_, offset), batch) in self.acked.range((partition, 0)..(partition + 1, 0)) {
            if log.get(*offset) != Some(*batch) {
                return Err(format!(
                    "ISR member {node} {why}: acknowledged {batch:?} at {partition}:{offset} lost (it has {:?})",
                    log.get(*offset)
                ));
            }
        }
        Ok(())
    }

    /// `node`'s log of `partition` was cut at `offset`: what was checked above is to check again.
    pub fn cut(&mut self, node: NodeId, partition: usize, offset: i64) {
        if let Some(c) = self.checked.get_mut(&(node, partition)) {
            *c = (*c).min(offset);
        }
    }

    /// `node` restarted (run `incarnation`): its high watermarks start again.
    pub fn restarted(&mut self, node: NodeId) {
        self.high_watermarks.retain(|(n, _), _| *n != node);
    }

    /// Below `upto`, `node`'s log of `partition` is committed: it must be the committed
    /// sequence (which it extends when it is the first to get that far).
    pub fn committed_prefix(
        &mut self,
        partition: usize,
        node: NodeId,
        log: &FakeLog,
        upto: i64,
    ) -> Result<(), String> {
        let from = self.checked.get(&(node, partition)).copied().unwrap_or(0);
        let committed = &mut self.committed[partition];
        for offset in from..upto.min(log.end()) {
            let Some(batch) = log.get(offset) else {
                break;
            };
            let i = usize::try_from(offset).unwrap_or(usize::MAX);
            match committed.get(i) {
                Some(c) if *c != batch => {
                    return Err(format!(
                        "committed {partition}:{offset} differs: node {node} has {batch:?}, it was {c:?}"
                    ));
                }
                Some(_) => {}
                None if i == committed.len() => committed.push(batch),
                None => {
                    return Err(format!(
                        "node {node} counts {partition}:{offset} committed past a gap"
                    ));
                }
            }
        }
        let reached = upto.min(log.end()).max(from);
        self.checked.insert((node, partition), reached);
        Ok(())
    }

    /// `node` (run `incarnation`) moved its high watermark of `partition` to `hw` in `epoch`.
    pub fn high_watermark(
        &mut self,
        partition: usize,
        node: NodeId,
        incarnation: u64,
        epoch: i32,
        hw: i64,
    ) -> Result<(), String> {
        let key = (node, partition);
        if let Some(&(run, e, before)) = self.high_watermarks.get(&key)
            && run == incarnation
            && e == epoch
            && hw < before
        {
            return Err(format!(
                "node {node}'s high watermark of partition {partition} went back from {before} to {hw} in epoch {epoch}"
            ));
        }
        self.high_watermarks.insert(key, (incarnation, epoch, hw));
        Ok(())
    }
}
