//! The shard's cache of recent batches, shared by every log on the shard and bounded by one
//! memory budget.
//!
//! Each log's cached batches are a contiguous run of offsets, appended at the end as the log
//! grows. Eviction is first-in first-out across the whole shard (for a log, old data is cold
//! data), but a batch whose bytes are not yet written to its file is never evicted: until then
//! the cache is the only place it can be read from.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::Rc;

use bytes::Bytes;

use crate::watermark::Watermark;

/// Identifies one log's entries in the cache: its slot (low 32 bits) and the slot's
/// generation (high 32 bits), so that a key outlives its log harmlessly and is never reused
/// (unless a slot is reused 2^32 times).
pub type CacheKey = u64;

fn key_of(slot: usize, generation: u32) -> CacheKey {
    (u64::from(generation) << 32) | slot as u64
}

fn slot_of(key: CacheKey) -> (usize, u32) {
    ((key & u64::from(u32::MAX)) as usize, (key >> 32) as u32)
}

#[derive(Debug, Clone)]
pub struct CachedBatch {
    pub base_offset: i64,
    pub next_offset: i64,
    pub bytes: Bytes,
}

#[derive(Debug)]
pub struct BatchCache {
    inner: RefCell<Inner>,
}

#[derive(Debug)]
struct Inner {
    budget_bytes: usize,
    used_bytes: usize,
    /// Each registered log's entries, in the slot its key names. A slot, not a hash map: every
    /// insert and every eviction finds a log's entries, and at 10,000 partitions the map's
    /// probe was one more cache miss each time.
    slots: Vec<Slot>,
    /// Slots of deregistered logs, to be reused.
    free_slots: Vec<usize>,
    /// Insertion order across logs: (log, base offset). Entries whose batch was already removed
    /// (truncated, retained away) are skipped when they reach the front.
    order: VecDeque<(CacheKey, i64)>,
}

#[derive(Debug, Default)]
struct Slot {
    /// Counts the logs that held the slot before: keys of earlier ones no longer match.
    generation: u32,
    log: Option<LogEntries>,
}

#[derive(Debug)]
struct LogEntries {
    batches: VecDeque<CachedBatch>,
    /// Batches below this offset are on disk and may be evicted.
    filed_offset: Rc<Watermark>,
}

impl BatchCache {
    pub fn new(budget_bytes: usize) -> BatchCache {
        BatchCache {
            inner: RefCell::new(Inner {
                budget_bytes,
                used_bytes: 0,
                slots: Vec::new(),
                free_slots: Vec::new(),
                order: VecDeque::new(),
            }),
        }
    }

    pub fn used_bytes(&self) -> usize {
        self.inner.borrow().used_bytes
    }

    /// Makes room for a log's batches. `filed_offset` tells which are safe to evict: those in
    /// their file.
    pub fn register(&self, filed_offset: Rc<Watermark>) -> CacheKey {
        let mut inner = self.inner.borrow_mut();
        let index = match inner.free_slots.pop() {
            Some(index) => index,
            None => {
                inner.slots.push(Slot::default());
                inner.slots.len() - 1
            }
        };
        let slot = &mut inner.slots[index];
        assert!(slot.log.is_none(), "a free slot holds no log");
        slot.log = Some(LogEntries {
            batches: VecDeque::new(),
            filed_offset,
        });
        key_of(index, slot.generation)
    }

    pub fn deregister(&self, key: CacheKey) {
        let mut inner = self.inner.borrow_mut();
        let Some(slot) = inner.slot_mut(key) else {
            return;
        };
        let Some(log) = slot.log.take() else {
            return;
        };
        slot.generation = slot.generation.wrapping_add(1);
        inner.free_slots.push(slot_of(key).0);
        let freed: usize = log.batches.iter().map(|b| b.bytes.len()).sum();
        inner.used_bytes -= freed;
    }

    /// Adds the batch that now ends the log. A batch that does not continue the cached run
    /// replaces it (the run must stay contiguous).
    pub fn insert(&self, key: CacheKey, batch: CachedBatch) {
        let mut inner = self.inner.borrow_mut();
        let Some(log) = inner.log_mut(key) else {
            return;
        };
        let mut freed = 0;
        if log
            .batches
            .back()
            .is_some_and(|last| last.next_offset != batch.base_offset)
        {
            freed = log.batches.drain(..).map(|b| b.bytes.len()).sum();
        }
        let (len, base_offset) = (batch.bytes.len(), batch.base_offset);
        log.batches.push_back(batch);
        inner.used_bytes = inner.used_bytes - freed + len;
        inner.order.push_back((key, base_offset));
        inner.evict();
    }

    /// The cached batches from the one holding `offset`: at least one, then more while they fit
    /// in `max_bytes`, all ending below `upper_bound`. `None` if `offset` is not cached.
    pub fn read(
        &self,
        key: CacheKey,
        offset: i64,
        max_bytes: usize,
        upper_bound: i64,
    ) -> Option<Vec<Bytes>> {
        let inner = self.inner.borrow();
        let batches = &inner.log(key)?.batches;
        let first = batches.partition_point(|b| b.next_offset <= offset);
        let head = batches.get(first)?;
        if head.base_offset > offset {
            return None;
        }
        let mut out = Vec::new();
        let mut total = 0usize;
        for b in batches.range(first..) {
            if b.next_offset > upper_bound {
                break;
            }
            if !out.is_empty() && total + b.bytes.len() > max_bytes {
                break;
            }
            total += b.bytes.len();
            out.push(b.bytes.clone());
        }
        Some(out)
    }

    /// Whether the batch holding `offset` is cached (a read from there needs no disk IO).
    pub fn holds(&self, key: CacheKey, offset: i64) -> bool {
        let inner = self.inner.borrow();
        let Some(log) = inner.log(key) else {
            return false;
        };
        let first = log.batches.partition_point(|b| b.next_offset <= offset);
        log.batches
            .get(first)
            .is_some_and(|b| b.base_offset <= offset)
    }

    /// Drops the log's batches at and after `offset` (the log was truncated).
    pub fn truncate(&self, key: CacheKey, offset: i64) {
        self.drop_where(key, |b| b.next_offset > offset, true);
    }

    /// Drops the log's batches below `offset` (retention moved the log start).
    pub fn forget_below(&self, key: CacheKey, offset: i64) {
        self.drop_where(key, |b| b.next_offset <= offset, false);
    }

    fn drop_where(&self, key: CacheKey, doomed: impl Fn(&CachedBatch) -> bool, from_back: bool) {
        let mut inner = self.inner.borrow_mut();
        let Some(log) = inner.log_mut(key) else {
            return;
        };
        let mut freed = 0;
        loop {
            let end = if from_back {
                log.batches.back()
            } else {
                log.batches.front()
            };
            if !end.is_some_and(&doomed) {
                break;
            }
            let removed = if from_back {
                log.batches.pop_back()
            } else {
                log.batches.pop_front()
            };
            freed += removed.map_or(0, |b| b.bytes.len());
        }
        inner.used_bytes -= freed;
        inner.compact_order();
    }
}

impl Inner {
    fn log(&self, key: CacheKey) -> Option<&LogEntries> {
        let (index, generation) = slot_of(key);
        let slot = self.slots.get(index)?;
        (slot.generation == generation).then_some(slot.log.as_ref())?
    }

    /// The key's slot, if the key is still its log's.
    fn slot_mut(&mut self, key: CacheKey) -> Option<&mut Slot> {
        let (index, generation) = slot_of(key);
        self.slots
            .get_mut(index)
            .filter(|s| s.generation == generation)
    }

    fn log_mut(&mut self, key: CacheKey) -> Option<&mut LogEntries> {
        self.slot_mut(key)?.log.as_mut()
    }

    fn evict(&mut self) {
        // Batches not in their file yet go to the back of the queue: a batch behind them may
        // be. At most this many a call, so that an insert stays cheap when hardly anything is
        // in its file; the cache then holds more than its budget until writes catch up, by no
        // more than the shard's write buffers (every such batch is in one of them).
        const KEPT_MAX: usize = 64;
        let mut kept = 0;
        while self.used_bytes > self.budget_bytes && kept < KEPT_MAX {
            let Some(&(key, base_offset)) = self.order.front() else {
                return;
            };
            let Some(log) = self.log_mut(key) else {
                self.order.pop_front();
                continue;
            };
            match log.batches.front() {
                Some(front) if front.base_offset <= base_offset => {
                    if front.next_offset > log.filed_offset.get() {
                        // This batch, or one before it in the same log, is not in its file.
                        self.order.pop_front();
                        self.order.push_back((key, base_offset));
                        kept += 1;
                        continue;
                    }
                    // A log's batches leave in the order they came. An older one whose entry
                    // went to the back goes first, and that entry is then found gone.
                    let evicted_own_entry = front.base_offset == base_offset;
                    let freed = front.bytes.len();
                    log.batches.pop_front();
                    self.used_bytes -= freed;
                    if evicted_own_entry {
                        self.order.pop_front();
                    }
                }
                // Already gone (truncated, retained away, or replaced).
                _ => {
                    self.order.pop_front();
                }
            }
        }
    }

    /// Keeps the order queue from growing with entries for batches that are gone.
    fn compact_order(&mut self) {
        let live: usize = self
            .slots
            .iter()
            .filter_map(|s| s.log.as_ref())
            .map(|l| l.batches.len())
            .sum();
        if self.order.len() > 2 * live + 1024 {
            let mut order = std::mem::take(&mut self.order);
            order.retain(|&(key, base)| {
                self.log(key).is_some_and(|l| {
                    let i = l.batches.partition_point(|b| b.base_offset < base);
                    l.batches.get(i).is_some_and(|b| b.base_offset == base)
                })
            });
            self.order = order;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i64, count: i64, bytes: usize) -> CachedBatch {
        CachedBatch {
            base_offset: base,
            next_offset: base + count,
            bytes: Bytes::from(vec![base as u8; bytes]),
        }
    }

    #[test]
    fn reads_from_the_batch_holding_the_offset_within_bounds() {
        let cache = BatchCache::new(1 << 20);
        let key = cache.register(Rc::new(Watermark::new(i64::MAX)));
        for i in 0..5 {
            cache.insert(key, batch(i * 10, 10, 100));
        }
        let got = cache.read(key, 15, 250, i64::MAX).unwrap();
        assert_eq!(got.len(), 2, "batches 10..20 and 20..30 fit in 250 bytes");
        assert_eq!(got[0][0], 10);
        // At least one batch even when it exceeds max_bytes.
        assert_eq!(cache.read(key, 0, 1, i64::MAX).unwrap().len(), 1);
        // Never past the upper bound.
        assert_eq!(cache.read(key, 0, 10_000, 30).unwrap().len(), 3);
        assert!(cache.read(key, 0, 10_000, 5).unwrap().is_empty());
        assert!(cache.read(key, 50, 100, i64::MAX).is_none());
    }

    #[test]
    fn holds_says_what_a_read_would_find() {
        let cache = BatchCache::new(1 << 20);
        let key = cache.register(Rc::new(Watermark::new(i64::MAX)));
        for i in 1..4 {
            cache.insert(key, batch(i * 10, 10, 100));
        }
        for offset in [5, 9, 40, 100] {
            assert!(!cache.holds(key, offset), "{offset}");
            assert!(cache.read(key, offset, 1, i64::MAX).is_none(), "{offset}");
        }
        for offset in [10, 25, 39] {
            assert!(cache.holds(key, offset), "{offset}");
            assert!(cache.read(key, offset, 1, i64::MAX).is_some(), "{offset}");
        }
        assert!(!cache.holds(key + 1, 10), "an unknown log holds nothing");
    }

    #[test]
    fn evicts_oldest_first_but_never_unwritten_batches() {
        let written = Rc::new(Watermark::new(0));
        let cache = BatchCache::new(250);
        let key = cache.register(written.clone());
        for i in 0..4 {
            cache.insert(key, batch(i * 10, 10, 100));
        }
        assert_eq!(
            cache.used_bytes(),
            400,
            "nothing is written yet: all pinned"
        );
        written.advance(20);
        cache.insert(key, batch(40, 10, 100));
        assert_eq!(
            cache.used_bytes(),
            300,
            "the two written batches went; 20.. stays pinned"
        );
        assert!(cache.read(key, 5, 100, i64::MAX).is_none());
        assert!(cache.read(key, 25, 100, i64::MAX).is_some());
    }

    #[test]
    fn a_reused_slot_is_out_of_reach_of_the_old_key() {
        let cache = BatchCache::new(150);
        let old = cache.register(Rc::new(Watermark::new(i64::MAX)));
        cache.insert(old, batch(0, 10, 100));
        cache.deregister(old);
        let new = cache.register(Rc::new(Watermark::new(i64::MAX)));
        assert_ne!(old, new, "a key is never handed out twice");
        cache.insert(old, batch(10, 10, 100));
        cache.deregister(old);
        assert!(cache.read(old, 10, 100, i64::MAX).is_none());
        assert_eq!(cache.used_bytes(), 0, "the old key reaches nothing");
        cache.insert(new, batch(0, 10, 100));
        cache.insert(new, batch(10, 10, 100));
        assert_eq!(
            cache.used_bytes(),
            100,
            "the old log's entries in the order queue evict none of the new log's batches \
             out of turn"
        );
        assert!(!cache.holds(new, 5) && cache.holds(new, 15));
    }

    #[test]
    fn truncate_and_forget_keep_accounting_exact() {
        let cache = BatchCache::new(1 << 20);
        let key = cache.register(Rc::new(Watermark::new(i64::MAX)));
        for i in 0..5 {
            cache.insert(key, batch(i * 10, 10, 100));
        }
        cache.truncate(key, 35);
        assert_eq!(
            cache.used_bytes(),
            300,
            "the batch holding 35 goes, and the one after"
        );
        assert!(cache.read(key, 35, 100, i64::MAX).is_none());
        cache.forget_below(key, 20);
        assert_eq!(cache.used_bytes(), 100);
        cache.insert(key, batch(100, 1, 50));
        assert_eq!(cache.used_bytes(), 50, "a gap replaces the run");
        cache.deregister(key);
        assert_eq!(cache.used_bytes(), 0);
    }
}
