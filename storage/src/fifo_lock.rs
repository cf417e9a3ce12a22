//! [`FifoLock`]: a lock granted strictly in the order it was asked for, that can be closed.
//!
//! A log's appends must take their offsets in the order their requests arrived: a client with
//! several produce requests in flight on one connection (librdkafka keeps up to a million)
//! relies on it, as Kafka serves a connection's requests in order. glommio's `Semaphore` is not
//! FIFO under contention: releasing wakes the first waiter and takes it off the queue before it
//! runs, so a task that asks in between finds the queue empty and the unit free, and goes
//! first. tokio's `Mutex` (runtime-agnostic; only its `sync` feature) hands the lock to its
//! waiters in order.

use std::cell::Cell;

use tokio::sync::{Mutex, MutexGuard};

/// The lock was closed: whatever it guarded is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

#[derive(Debug, Default)]
pub struct FifoLock {
    mutex: Mutex<()>,
    closed: Cell<bool>,
}

/// Holding the lock; dropping it lets the next in line in.
pub type FifoGuard<'a> = MutexGuard<'a, ()>;

impl FifoLock {
    pub fn new() -> Self {
        Self::default()
    }

    /// Waits for the lock, behind everyone who asked before; `Closed` once [`close`] was called
    /// (waiters queued then get it too, in turn).
    ///
    /// [`close`]: FifoLock::close
    pub async fn acquire(&self) -> Result<FifoGuard<'_>, Closed> {
        let guard = self.mutex.lock().await;
        if self.closed.get() {
            return Err(Closed);
        }
        Ok(guard)
    }

    /// Every later [`acquire`](FifoLock::acquire) fails.
    pub fn close(&self) {
        self.closed.set(true);
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;
    use std::time::Duration;

    use glommio::LocalExecutor;

    use super::*;

    #[test]
    fn a_waiter_woken_by_a_release_is_not_overtaken() {
        LocalExecutor::default().run(async {
            let lock = Rc::new(FifoLock::new());
            let order = Rc::new(RefCell::new(Vec::new()));
            let held = lock.acquire().await.unwrap();
            let task = |name: &'static str| {
                let (lock, order) = (lock.clone(), order.clone());
                glommio::spawn_local(async move {
                    let _turn = lock.acquire().await.unwrap();
                    order.borrow_mut().push(name);
                })
            };
            let first = task("first");
            glommio::timer::sleep(Duration::from_millis(1)).await; // `first` now waits in line
            // `second` asks once `first` has been woken but before it runs: the moment
            // glommio's Semaphore lets a newcomer in first.
            drop(held);
            let second = task("second");
            second.await;
            first.await;
            assert_eq!(*order.borrow(), ["first", "second"]);
        });
    }

    #[test]
    fn a_closed_lock_refuses_waiters_and_newcomers() {
        LocalExecutor::default().run(async {
            let lock = Rc::new(FifoLock::new());
            let held = lock.acquire().await.unwrap();
            let waiter = {
                let lock = lock.clone();
                glommio::spawn_local(async move { lock.acquire().await.map(drop) })
            };
            glommio::timer::sleep(Duration::from_millis(1)).await;
            lock.close();
            drop(held);
            assert_eq!(waiter.await, Err(Closed));
            assert_eq!(lock.acquire().await.map(drop), Err(Closed));
        });
    }
}
