//! A value that only grows, and futures that wait for it to reach a level.
//!
//! The log publishes its progress through these: bytes written to the file, offsets made durable,
//! the end offset that a long-polling Fetch waits on. It is single-threaded (one shard owns it), so
//! it needs no lock, and waking is exact: only waiters whose level was reached are woken.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

#[derive(Debug)]
pub struct Watermark {
    value: Cell<i64>,
    /// Closed watermarks wake everyone: the owner went away (the log was closed or deleted).
    closed: Cell<bool>,
    /// Counts the times the value was lowered; a wait that started before a reset ends.
    resets: Cell<u64>,
    /// (level, waiter id, waker). A waiter removes its entry when dropped, so abandoned waits
    /// (a long poll that timed out) do not pile up on an idle watermark.
    waiters: RefCell<Vec<(i64, u64, Waker)>>,
    next_waiter_id: Cell<u64>,
}

/// What a wait ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reached {
    /// The value is at least the level asked for.
    Yes(i64),
    /// The watermark was closed before the level was reached.
    Closed,
    /// The value was lowered (the log was truncated) while waiting: what was waited for may
    /// never come, so the waiter must look again.
    Reset,
}

impl Watermark {
    pub fn new(value: i64) -> Watermark {
        Watermark {
            value: Cell::new(value),
            closed: Cell::new(false),
            resets: Cell::new(0),
            waiters: RefCell::new(Vec::new()),
            next_waiter_id: Cell::new(0),
        }
    }

    pub fn get(&self) -> i64 {
        self.value.get()
    }

    /// Raises the value (a lower value is ignored) and wakes the waiters it satisfies.
    pub fn advance(&self, value: i64) {
        if value <= self.value.get() {
            return;
        }
        self.value.set(value);
        let mut woken = Vec::new();
        self.waiters.borrow_mut().retain(|(level, _, waker)| {
            if *level <= value {
                woken.push(waker.clone());
                false
            } else {
                true
            }
        });
        // Wake outside the borrow: a woken task may register again.
        woken.into_iter().for_each(Waker::wake);
    }

    /// Sets the value, lower too. Only truncation does this; every current wait ends with
    /// [`Reached::Reset`].
    pub fn reset(&self, value: i64) {
        self.value.set(value);
        self.resets.set(self.resets.get() + 1);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        waiters.into_iter().for_each(|(_, _, w)| w.wake());
    }

    pub fn close(&self) {
        self.closed.set(true);
        let waiters = std::mem::take(&mut *self.waiters.borrow_mut());
        waiters.into_iter().for_each(|(_, _, w)| w.wake());
    }

    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Resolves once the value is at least `level`, or the watermark is closed.
    pub fn wait_for(&self, level: i64) -> WaitFor<'_> {
        WaitFor {
            watermark: self,
            level,
            resets: self.resets.get(),
            id: None,
        }
    }
}

#[derive(Debug)]
pub struct WaitFor<'a> {
    watermark: &'a Watermark,
    level: i64,
    resets: u64,
    id: Option<u64>,
}

impl Future for WaitFor<'_> {
    type Output = Reached;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Reached> {
        let w = self.watermark;
        if w.value.get() >= self.level {
            self.deregister();
            return Poll::Ready(Reached::Yes(w.value.get()));
        }
        if w.closed.get() {
            self.deregister();
            return Poll::Ready(Reached::Closed);
        }
        if w.resets.get() != self.resets {
            self.deregister();
            return Poll::Ready(Reached::Reset);
        }
        let level = self.level;
        let mut waiters = w.waiters.borrow_mut();
        match self.id {
            Some(id) => match waiters.iter_mut().find(|(_, i, _)| *i == id) {
                Some(entry) => entry.2.clone_from(cx.waker()),
                None => waiters.push((level, id, cx.waker().clone())),
            },
            None => {
                let id = w.next_waiter_id.get();
                w.next_waiter_id.set(id + 1);
                waiters.push((level, id, cx.waker().clone()));
                drop(waiters);
                self.id = Some(id);
            }
        }
        Poll::Pending
    }
}

impl WaitFor<'_> {
    fn deregister(&mut self) {
        if let Some(id) = self.id.take() {
            self.watermark
                .waiters
                .borrow_mut()
                .retain(|(_, i, _)| *i != id);
        }
    }
}

impl Drop for WaitFor<'_> {
    fn drop(&mut self) {
        self.deregister();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future;

    #[test]
    fn waits_until_the_level_is_reached() {
        let w = Watermark::new(0);
        let mut wait = Box::pin(w.wait_for(5));
        assert!(future::block_on(future::poll_once(&mut wait)).is_none());
        w.advance(3);
        assert!(future::block_on(future::poll_once(&mut wait)).is_none());
        w.advance(7);
        assert_eq!(future::block_on(wait), Reached::Yes(7));
        assert!(w.waiters.borrow().is_empty());
    }

    #[test]
    fn never_goes_down_through_advance_and_close_wakes() {
        let w = Watermark::new(10);
        w.advance(4);
        assert_eq!(w.get(), 10);
        let mut wait = Box::pin(w.wait_for(11));
        assert!(future::block_on(future::poll_once(&mut wait)).is_none());
        w.close();
        assert_eq!(future::block_on(wait), Reached::Closed);
    }

    #[test]
    fn lowering_the_value_ends_current_waits() {
        let w = Watermark::new(10);
        let mut wait = Box::pin(w.wait_for(20));
        assert!(future::block_on(future::poll_once(&mut wait)).is_none());
        w.reset(5);
        assert_eq!(future::block_on(wait), Reached::Reset);
        assert_eq!(future::block_on(w.wait_for(5)), Reached::Yes(5));
    }

    #[test]
    fn abandoned_waits_leave_nothing_behind() {
        let w = Watermark::new(0);
        for _ in 0..100 {
            let mut wait = Box::pin(w.wait_for(1));
            assert!(future::block_on(future::poll_once(&mut wait)).is_none());
        }
        assert!(w.waiters.borrow().is_empty());
    }
}
