//! Memory budgets: how many bytes of one kind a shard may hold at once (requests being read and
//! queued, fetch responses read from disk and not yet sent), and the permits that hold them.
//!
//! A budget is one core's: `Rc`, `Cell`, no lock, never shared between shards (each shard gets
//! its share of the process's budget). Waiters are served first come, first served, and a waiter
//! at the head holds back the ones behind it even when they would fit, so that a stream of small
//! requests cannot starve a large one. Some holders may not wait (the first read chunk of a
//! connection, a record batch already read that is larger than its share): they [`force`] their
//! bytes in, which can take the budget over its capacity; nothing waiting is admitted until it is
//! back under.
//!
//! [`force`]: MemoryBudget::force

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

/// One shard's budget for one kind of memory.
#[derive(Debug)]
pub struct MemoryBudget {
    name: &'static str,
    capacity_bytes: usize,
    used_bytes: Cell<usize>,
    /// Waiting acquisitions, oldest first.
    waiters: RefCell<VecDeque<Waiter>>,
    next_waiter: Cell<u64>,
    /// How many acquisitions had to wait, since the start: an operator's sign that the budget
    /// is what slows clients down.
    waited_count: Cell<u64>,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    bytes: usize,
    waker: Waker,
}

impl MemoryBudget {
    pub fn new(name: &'static str, capacity_bytes: usize) -> Rc<MemoryBudget> {
        Rc::new(MemoryBudget {
            name,
            capacity_bytes,
            used_bytes: Cell::new(0),
            waiters: RefCell::new(VecDeque::new()),
            next_waiter: Cell::new(0),
            waited_count: Cell::new(0),
        })
    }

    pub fn name(&self) -> &'static str {
        self.name
    }

    pub fn capacity_bytes(&self) -> usize {
        self.capacity_bytes
    }

    pub fn used_bytes(&self) -> usize {
        self.used_bytes.get()
    }

    /// Acquisitions waiting now.
    pub fn waiting_count(&self) -> usize {
        self.waiters.borrow().len()
    }

    /// Acquisitions that had to wait, since the budget was made.
    pub fn waited_count(&self) -> u64 {
        self.waited_count.get()
    }

    /// Whether `bytes` more may be admitted now. A holder alone may take more than the whole
    /// capacity: refusing it would leave it waiting forever.
    fn fits(&self, bytes: usize) -> bool {
        let used = self.used_bytes.get();
        used == 0 || used.saturating_add(bytes) <= self.capacity_bytes
    }

    /// `bytes` of the budget, waiting first come, first served until they fit. Dropping the
    /// future gives up its place (and anything it was granted).
    pub fn acquire(self: &Rc<Self>, bytes: usize) -> Acquire {
        Acquire {
            budget: self.clone(),
            bytes,
            waiting: None,
        }
    }

    /// `bytes` if they fit now and nobody is waiting.
    pub fn try_acquire(self: &Rc<Self>, bytes: usize) -> Option<MemoryPermit> {
        (self.waiters.borrow().is_empty() && self.fits(bytes)).then(|| self.force(bytes))
    }

    /// `bytes` at once, even past the capacity: for memory that is already in use or must be.
    pub fn force(self: &Rc<Self>, bytes: usize) -> MemoryPermit {
        self.used_bytes.set(self.used_bytes.get() + bytes);
        MemoryPermit {
            budget: Some(self.clone()),
            bytes,
        }
    }

    /// A permit of nothing, to grow later.
    pub fn empty(self: &Rc<Self>) -> MemoryPermit {
        self.force(0)
    }

    fn release(&self, bytes: usize) {
        let used = self.used_bytes.get();
        debug_assert!(bytes <= used, "{}: releasing more than is held", self.name);
        self.used_bytes.set(used.saturating_sub(bytes));
        self.wake_head();
    }

    /// Wakes the oldest waiter if it fits now (it takes its bytes when it runs; the ones behind
    /// it are woken in turn as it does).
    fn wake_head(&self) {
        if let Some(head) = self.waiters.borrow().front()
            && self.fits(head.bytes)
        {
            head.waker.wake_by_ref();
        }
    }
}

/// Waits for bytes of a [`MemoryBudget`].
#[derive(Debug)]
#[must_use = "a budget is only taken when the future is awaited"]
pub struct Acquire {
    budget: Rc<MemoryBudget>,
    bytes: usize,
    /// The place in the queue, once it had to wait.
    waiting: Option<u64>,
}

impl Future for Acquire {
    type Output = MemoryPermit;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<MemoryPermit> {
        let budget = self.budget.clone();
        let mut waiters = budget.waiters.borrow_mut();
        let first = match self.waiting {
            None => waiters.is_empty(),
            Some(id) => waiters.front().is_some_and(|w| w.id == id),
        };
        if first && budget.fits(self.bytes) {
            if self.waiting.take().is_some() {
                waiters.pop_front();
            }
            drop(waiters);
            let permit = budget.force(self.bytes);
            // The next in line may fit too.
            budget.wake_head();
            return Poll::Ready(permit);
        }
        match self.waiting {
            Some(id) => {
                if let Some(w) = waiters.iter_mut().find(|w| w.id == id) {
                    w.waker.clone_from(cx.waker());
                }
            }
            None => {
                let id = budget.next_waiter.get();
                budget.next_waiter.set(id + 1);
                budget.waited_count.set(budget.waited_count.get() + 1);
                waiters.push_back(Waiter {
                    id,
                    bytes: self.bytes,
                    waker: cx.waker().clone(),
                });
                self.waiting = Some(id);
            }
        }
        Poll::Pending
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        let Some(id) = self.waiting else {
            return;
        };
        let was_head = {
            let mut waiters = self.budget.waiters.borrow_mut();
            let at = waiters.iter().position(|w| w.id == id);
            if let Some(at) = at {
                waiters.remove(at);
            }
            at == Some(0)
        };
        // A head that gives up may have been woken for bytes that now go to the next one.
        if was_head {
            self.budget.wake_head();
        }
    }
}

/// Bytes held of a budget, given back when dropped. A permit of no budget (for readers that
/// answer to none, such as a client's) holds nothing.
#[derive(Debug, Default)]
pub struct MemoryPermit {
    budget: Option<Rc<MemoryBudget>>,
    bytes: usize,
}

impl MemoryPermit {
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Moves `bytes` of this permit into a new one (all of it if it holds less).
    pub fn split(&mut self, bytes: usize) -> MemoryPermit {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        MemoryPermit {
            budget: self.budget.clone(),
            bytes,
        }
    }

    /// Takes over what `other` holds; both must be of the same budget (or of none).
    pub fn merge(&mut self, mut other: MemoryPermit) {
        debug_assert!(
            match (&self.budget, &other.budget) {
                (Some(a), Some(b)) => Rc::ptr_eq(a, b),
                (None, None) => true,
                _ => other.bytes == 0,
            },
            "merging permits of different budgets"
        );
        if self.budget.is_none() {
            self.budget = other.budget.take();
        }
        self.bytes += std::mem::take(&mut other.bytes);
    }

    /// Gives back everything above `bytes`.
    pub fn shrink_to(&mut self, bytes: usize) {
        if bytes < self.bytes {
            drop(self.split(self.bytes - bytes));
        }
    }

    /// Holds `bytes` in all: gives back the excess, or forces in what is missing (for memory
    /// that is already in use).
    pub fn resize_forced(&mut self, bytes: usize) {
        if bytes < self.bytes {
            self.shrink_to(bytes);
        } else if let Some(budget) = &self.budget {
            let more = budget.force(bytes - self.bytes);
            self.merge(more);
        }
    }
}

impl Drop for MemoryPermit {
    fn drop(&mut self) {
        if let Some(budget) = &self.budget
            && self.bytes > 0
        {
            budget.release(self.bytes);
        }
    }
}

/// A permit that can ride inside a value that is cloned (a response): the bytes are given back
/// when the last clone is dropped. Compares equal to any other, since it is not part of the
/// value it rides in.
#[derive(Debug, Clone, Default)]
pub struct HeldMemory(Option<Rc<MemoryPermit>>);

impl HeldMemory {
    pub fn new(permit: MemoryPermit) -> HeldMemory {
        HeldMemory(Some(Rc::new(permit)))
    }

    pub fn bytes(&self) -> usize {
        self.0.as_ref().map_or(0, |p| p.bytes())
    }
}

impl PartialEq for HeldMemory {
    fn eq(&self, _: &HeldMemory) -> bool {
        true
    }
}

impl Eq for HeldMemory {}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::{block_on, poll_once};

    #[test]
    fn permits_give_their_bytes_back() {
        let budget = MemoryBudget::new("test", 100);
        let mut a = budget.try_acquire(60).unwrap();
        assert!(budget.try_acquire(50).is_none(), "60 + 50 is over 100");
        let b = a.split(20);
        assert_eq!((a.bytes(), b.bytes(), budget.used_bytes()), (40, 20, 60));
        drop(a);
        assert_eq!(budget.used_bytes(), 20);
        let mut c = budget.try_acquire(80).unwrap();
        c.shrink_to(10);
        assert_eq!(budget.used_bytes(), 30);
        c.resize_forced(200);
        assert_eq!(budget.used_bytes(), 220, "forced past the capacity");
        drop((b, c));
        assert_eq!(budget.used_bytes(), 0);
    }

    #[test]
    fn one_holder_may_take_more_than_the_capacity() {
        let budget = MemoryBudget::new("test", 100);
        let big = block_on(budget.acquire(500));
        assert_eq!(big.bytes(), 500);
        assert!(budget.try_acquire(1).is_none());
    }

    #[test]
    fn waiters_are_served_in_arrival_order() {
        let budget = MemoryBudget::new("test", 100);
        let held = budget.try_acquire(90).unwrap();
        let mut large = Box::pin(budget.acquire(50));
        let mut small = Box::pin(budget.acquire(5));
        block_on(async {
            assert!(poll_once(&mut large).await.is_none());
            // 5 bytes would fit, but the large request came first.
            assert!(poll_once(&mut small).await.is_none());
            assert!(budget.try_acquire(1).is_none(), "no barging past waiters");
            assert_eq!(budget.waiting_count(), 2);
            drop(held);
            let large = poll_once(&mut large).await.unwrap();
            let small = poll_once(&mut small).await.unwrap();
            assert_eq!(budget.used_bytes(), large.bytes() + small.bytes());
        });
        assert_eq!(budget.waiting_count(), 0);
        assert_eq!(budget.waited_count(), 2);
    }

    #[test]
    fn a_waiter_that_gives_up_lets_the_next_one_in() {
        let budget = MemoryBudget::new("test", 100);
        let held = budget.try_acquire(60).unwrap();
        let mut first = Box::pin(budget.acquire(80));
        let mut second = Box::pin(budget.acquire(30));
        block_on(async {
            assert!(poll_once(&mut first).await.is_none());
            assert!(poll_once(&mut second).await.is_none());
            drop(first);
            let second = poll_once(&mut second).await.unwrap();
            assert_eq!(budget.used_bytes(), 90);
            drop((held, second));
        });
        assert_eq!((budget.used_bytes(), budget.waiting_count()), (0, 0));
    }

    #[test]
    fn held_memory_is_given_back_with_its_last_clone() {
        let budget = MemoryBudget::new("test", 100);
        let held = HeldMemory::new(budget.force(70));
        let clone = held.clone();
        drop(held);
        assert_eq!(budget.used_bytes(), 70);
        assert_eq!(clone, HeldMemory::default(), "not part of the value");
        drop(clone);
        assert_eq!(budget.used_bytes(), 0);
    }
}
