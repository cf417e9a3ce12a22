//! The indexes of sealed segments in memory, shard-wide, under one budget: they load on first
//! use (a read, a timestamp search, retention) and the ones loaded longest ago are dropped when
//! the budget is exceeded, to load again when next used. The active segments' indexes are not
//! counted: they are being built, one per log, and small.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Weak;

use crate::log::Log;

#[derive(Debug)]
pub struct IndexBudget {
    max_bytes: u64,
    used_bytes: Cell<u64>,
    /// Loads in order: (log, segment base offset, bytes). An entry whose segment is gone or
    /// was dropped and loaded again is still counted until it leaves: the count errs high.
    loaded: RefCell<VecDeque<(Weak<Log>, i64, u64)>>,
}

impl IndexBudget {
    pub fn new(max_bytes: u64) -> IndexBudget {
        IndexBudget {
            max_bytes,
            used_bytes: Cell::new(0),
            loaded: RefCell::new(VecDeque::new()),
        }
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.get()
    }

    /// Counts the indexes of a sealed segment just put in memory, and drops the oldest others
    /// while over the budget. Call with no log's state borrowed.
    pub fn loaded(&self, log: Weak<Log>, base_offset: i64, bytes: u64) {
        self.loaded
            .borrow_mut()
            .push_back((log, base_offset, bytes));
        self.used_bytes.set(self.used_bytes.get() + bytes);
        // The one just loaded stays, even alone over the budget: its user needs it now.
        while self.used_bytes.get() > self.max_bytes && self.loaded.borrow().len() > 1 {
            let Some((log, base, bytes)) = self.loaded.borrow_mut().pop_front() else {
                break;
            };
            self.used_bytes.set(self.used_bytes.get() - bytes);
            if let Some(log) = log.upgrade() {
                log.drop_index(base);
            }
        }
    }
}
