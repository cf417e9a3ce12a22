//! The shard's background work for its logs: one queue of logs with bytes to write out or syncs
//! to run, one timer, and no task per log.
//!
//! An append (or a wait for durability) puts its log on the queue unless it is there or being
//! served. The flusher takes the whole queue at once, after letting the appends that are ready
//! to run go first, and starts serving every log on it in the same turn: the writes of all the
//! shard's partitions go to io_uring in one submission, and each log's write carries every
//! append that arrived meanwhile, the way group commit shares syncs. A log whose bytes go to the
//! shard's journal or through the page cache is served in the flusher's own turn
//! ([`Log::serve_at_once`]): nothing to wait for, so no task. A log that must wait (a direct
//! write, a sync) is served by a short task that lives while the log has work ([`Log::serve`]),
//! so a log has one task however many of its writes are in flight (up to
//! `writes_in_flight_max`), at most one sync, and an idle log has no task at all.
//!
//! The timer ticks every [`TICK`]: it checks the free space of the data directory, drops the
//! pages written through the page cache that are due ([`crate::page_cache`]), and goes
//! over the logs that may have timed work (data older than `flush.ms`, space reserved ahead
//! that an idle writer should give back). A log is on that list only from its first append
//! until it has nothing left to do.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use futures_lite::future;

use crate::cache::CacheKey;
use crate::log::{Log, ShardStorage};
use crate::watermark::Watermark;

/// How often the shard's timer checks the free space ...
pub const TICK: Duration = Duration::from_millis(100);
/// ... and every how many ticks it goes over the watched logs (flush.ms is checked this often,
/// as Kafka checks it every log.flush.scheduler.interval.ms).
const TICKS_PER_LOG_PASS: u32 = 5;
/// A writer that submitted nothing for this long gives back the space it reserved ahead.
pub const IDLE_AFTER: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub struct Background {
    /// Logs with work for the flusher, in the order they asked. Bounded by the shard's logs:
    /// a log is on it at most once (`Log::queued`).
    queue: RefCell<VecDeque<Weak<Log>>>,
    /// Counts what was queued: the flusher waits for it to move.
    queued: Rc<Watermark>,
    /// Logs that may have timed work, by cache key (one entry per log).
    watched: RefCell<HashMap<CacheKey, Weak<Log>>>,
}

/// A log's place in the shard's background work.
#[derive(Debug, Default)]
pub struct LogSlot {
    /// On the flusher's queue.
    queued: Cell<bool>,
    /// A task serves the log now: it will see new work before it ends.
    serving: Cell<bool>,
    /// On the timer's list.
    watched: Cell<bool>,
}

impl Background {
    pub fn new() -> Background {
        Background {
            queue: RefCell::new(VecDeque::new()),
            queued: Rc::new(Watermark::new(0)),
            watched: RefCell::new(HashMap::new()),
        }
    }

    /// Starts the flusher and the timer on the calling executor; they end with the storage.
    pub fn start(storage: &Rc<ShardStorage>) {
        glommio::spawn_local(run_flusher(Rc::downgrade(storage))).detach();
        glommio::spawn_local(run_timer(Rc::downgrade(storage))).detach();
    }

    /// Asks for `log` to be written out (and synced, if it asked for that).
    pub fn notify(&self, log: &Log) {
        let slot = &log.slot;
        if !slot.watched.replace(true) {
            self.watched
                .borrow_mut()
                .insert(log.cache_key, log.me.clone());
        }
        if slot.serving.get() || slot.queued.replace(true) {
            return;
        }
        self.queue.borrow_mut().push_back(log.me.clone());
        self.queued.advance(self.queued.get() + 1);
    }

    pub fn forget(&self, log: &Log) {
        if log.slot.watched.replace(false) {
            self.watched.borrow_mut().remove(&log.cache_key);
        }
    }
}

async fn run_flusher(storage: Weak<ShardStorage>) {
    loop {
        let seen = {
            let Some(storage) = storage.upgrade() else {
                return;
            };
            storage.background.queued.get()
        };
        // Let the appends that are ready to run (pipelined requests, other partitions) go
        // first: one write then carries them all.
        future::yield_now().await;
        let Some(storage) = storage.upgrade() else {
            return;
        };
        let logs: Vec<_> = storage.background.queue.borrow_mut().drain(..).collect();
        for log in logs.iter().filter_map(Weak::upgrade) {
            log.slot.queued.set(false);
            if log.slot.serving.get() || log.serve_at_once() {
                continue;
            }
            log.slot.serving.set(true);
            glommio::spawn_local(serve(log)).detach();
        }
        let queued = storage.background.queued.clone();
        drop(storage);
        queued.wait_for(seen + 1).await;
    }
}

async fn serve(log: Rc<Log>) {
    log.serve().await;
    log.slot.serving.set(false);
}

async fn run_timer(storage: Weak<ShardStorage>) {
    for tick in 1u32.. {
        glommio::timer::sleep(TICK).await;
        let Some(storage) = storage.upgrade() else {
            return;
        };
        storage.space.check();
        storage.page_cache.release_due(Instant::now());
        if tick % TICKS_PER_LOG_PASS != 0 {
            continue;
        }
        if let Some(journal) = &storage.journal {
            journal.tick();
        }
        let watched: Vec<_> = storage
            .background
            .watched
            .borrow()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        for log in watched {
            if log.timed_work_due() {
                storage.background.notify(&log);
            }
            if !log.holds_timed_work() {
                storage.background.forget(&log);
            }
        }
    }
}
