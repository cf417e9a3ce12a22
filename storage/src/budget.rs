//! Shard-wide byte budgets: what a shard's logs may hold together (write buffers, disk space
//! reserved ahead of writes, loaded indexes, read-ahead), so that these costs follow what the
//! partitions do, not how many there are.
//!
//! A [`Budget`] counts bytes handed out as [`Grant`]s; a grant gives its bytes back when it is
//! dropped or shrunk. Everything runs on the shard's executor: plain `Cell`s, no atomics.

use std::cell::Cell;
use std::rc::Rc;

#[derive(Debug)]
pub struct Budget {
    max_bytes: u64,
    used_bytes: Cell<u64>,
}

impl Budget {
    pub fn new(max_bytes: u64) -> Rc<Budget> {
        Rc::new(Budget {
            max_bytes,
            used_bytes: Cell::new(0),
        })
    }

    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    pub fn used_bytes(&self) -> u64 {
        self.used_bytes.get()
    }

    pub fn free_bytes(&self) -> u64 {
        self.max_bytes.saturating_sub(self.used_bytes.get())
    }

    /// `bytes` of the budget if that many are free.
    pub fn try_take(self: &Rc<Self>, bytes: u64) -> Option<Grant> {
        (bytes <= self.free_bytes()).then(|| self.take_over(bytes))
    }

    /// `bytes` whether or not they are free: for the small minimum a writer needs to make
    /// progress at all. Callers bound how often they do this.
    pub fn take_over(self: &Rc<Self>, bytes: u64) -> Grant {
        self.used_bytes.set(self.used_bytes.get() + bytes);
        Grant {
            budget: self.clone(),
            bytes,
        }
    }

    /// An empty grant, to grow later with [`Grant::resize`].
    pub fn empty(self: &Rc<Self>) -> Grant {
        self.take_over(0)
    }
}

/// Bytes taken from a [`Budget`], given back on drop.
#[derive(Debug)]
pub struct Grant {
    budget: Rc<Budget>,
    bytes: u64,
}

impl Grant {
    /// Makes the grant `bytes` long; growing it may take the budget past its limit, so callers
    /// grow only within [`Grant::room`].
    pub fn resize(&mut self, bytes: u64) {
        let used = self.budget.used_bytes.get() - self.bytes + bytes;
        self.budget.used_bytes.set(used);
        self.bytes = bytes;
    }

    /// The most this grant could hold without taking the budget past its limit.
    pub fn room(&self) -> u64 {
        self.bytes + self.budget.free_bytes()
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.resize(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grants_give_their_bytes_back() {
        let budget = Budget::new(100);
        let a = budget.try_take(60).expect("fits");
        assert!(budget.try_take(50).is_none(), "only 40 left");
        let mut b = budget.empty();
        assert_eq!(b.room(), 40);
        b.resize(40);
        assert_eq!(budget.free_bytes(), 0);
        drop(a);
        assert_eq!(budget.used_bytes(), 40);
        b.resize(10);
        assert_eq!(budget.used_bytes(), 10);
        let over = budget.take_over(200);
        assert_eq!(budget.free_bytes(), 0);
        drop(over);
        drop(b);
        assert_eq!(budget.used_bytes(), 0);
    }
}
