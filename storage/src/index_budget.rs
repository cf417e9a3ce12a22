//! The indexes of sealed segments in memory, shard-wide, under one budget: they load on first
//! use (a read, a timestamp search, retention) and the ones loaded longest ago are dropped when
//! the budget is exceeded, to load again when next used. The active segments' indexes are not
//! counted: they are being built, one per log, and small.
//!
//! Each load is counted under its own [`IndexLoad`], and an entry leaving the budget drops a
//! segment's indexes only if they are still that load's: a segment can be counted twice (sealed,
//! made active again by a truncation, sealed again), and the older count leaving must not drop
//! what the later one holds. It did once, and with the budget spent every load of such a segment
//! dropped itself: a read of it looped for ever.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Weak;

use crate::log::Log;

/// One load of a segment's indexes into memory, as the budget counts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexLoad(u64);

#[derive(Debug)]
pub struct IndexBudget {
    max_bytes: u64,
    used_bytes: Cell<u64>,
    next_load: Cell<u64>,
    /// Loads in order. An entry whose segment is gone or was dropped and loaded again is still
    /// counted until it leaves: the count errs high.
    loaded: RefCell<VecDeque<Counted>>,
}

/// A load the budget counts.
#[derive(Debug)]
struct Counted {
    log: Weak<Log>,
    base_offset: i64,
    load: IndexLoad,
    bytes: u64,
}

impl IndexBudget {
    pub fn new(max_bytes: u64) -> IndexBudget {
        IndexBudget {
            max_bytes,
            used_bytes: Cell::new(0),
            next_load: Cell::new(0),
            loaded: RefCell::new(VecDeque::new()),
        }
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.get()
    }

    /// A new load's name, for the segment to hold before [`IndexBudget::loaded`] counts it.
    pub fn new_load(&self) -> IndexLoad {
        let id = self.next_load.get();
        self.next_load.set(id + 1);
        IndexLoad(id)
    }

    /// Counts the indexes of a sealed segment just put in memory as `load`, and drops the
    /// oldest others while over the budget. Call with no log's state borrowed.
    pub fn loaded(&self, log: Weak<Log>, base_offset: i64, load: IndexLoad, bytes: u64) {
        self.loaded.borrow_mut().push_back(Counted {
            log,
            base_offset,
            load,
            bytes,
        });
        self.used_bytes.set(self.used_bytes.get() + bytes);
        // The one just loaded stays, even alone over the budget: its user needs it now.
        while self.used_bytes.get() > self.max_bytes && self.loaded.borrow().len() > 1 {
            let Some(oldest) = self.loaded.borrow_mut().pop_front() else {
                break;
            };
            self.used_bytes.set(self.used_bytes.get() - oldest.bytes);
            if let Some(log) = oldest.log.upgrade() {
                log.drop_index(oldest.base_offset, oldest.load);
            }
        }
    }
}
