//! What a run measures, shared by the executors and the thread that reports: counters as
//! atomics, latencies in HdrHistograms that each task fills locally and merges now and then.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

/// Latencies are recorded in microseconds, up to an hour, to 3 significant digits.
const LATENCY_US_MAX: u64 = 3_600_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;
/// How often a task merges its local histogram into the shared one.
const MERGE_INTERVAL_NS: u64 = 200_000_000;

pub fn new_latency_histogram() -> Histogram<u64> {
    // The bounds are constants that hdrhistogram accepts.
    Histogram::new_with_bounds(1, LATENCY_US_MAX, SIGNIFICANT_DIGITS)
        .unwrap_or_else(|_| unreachable!("constant histogram bounds are valid"))
}

/// The run's time line, in nanoseconds since `origin`.
#[derive(Debug, Clone)]
pub struct Clock {
    origin: Instant,
    /// Wall-clock milliseconds at `origin`, for Kafka's record timestamps.
    wall_origin_ms: i64,
    /// Records meant to be sent before this are warmup: left out of the figures.
    pub warmup_end_ns: u64,
    /// Records are only stamped for end-to-end latency when their run id is this.
    pub run_id: u64,
}

impl Clock {
    pub fn new(warmup_s: f64, run_id: u64) -> Self {
        Self {
            origin: Instant::now(),
            wall_origin_ms: SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as i64),
            warmup_end_ns: seconds_to_ns(warmup_s),
            run_id,
        }
    }

    pub fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// Wall-clock milliseconds at `at_ns` on the run's clock.
    pub fn wall_ms(&self, at_ns: u64) -> i64 {
        self.wall_origin_ms + (at_ns / 1_000_000) as i64
    }

    pub fn is_measured(&self, at_ns: u64) -> bool {
        at_ns >= self.warmup_end_ns
    }
}

pub fn seconds_to_ns(s: f64) -> u64 {
    (s * 1e9) as u64
}

/// Counters of one direction (produce or consume).
#[derive(Debug)]
pub struct Flow {
    /// Every record acknowledged (or consumed), warmup included: for progress.
    pub records_total: AtomicU64,
    /// Records outside the warmup, and their key and value bytes.
    pub records: AtomicU64,
    pub payload_bytes: AtomicU64,
    /// The batches (produce) or a partition's records in a fetch answer (consume) the
    /// measured records came in: at many partitions, a producer's batches hold few records
    /// whatever its batch size, and that, not bytes, is what the broker's work follows.
    pub batches: AtomicU64,
    /// When the last measured record was acknowledged (or consumed).
    pub last_ns: AtomicU64,
}

impl Default for Flow {
    fn default() -> Self {
        Self {
            records_total: AtomicU64::new(0),
            records: AtomicU64::new(0),
            payload_bytes: AtomicU64::new(0),
            batches: AtomicU64::new(0),
            last_ns: AtomicU64::new(0),
        }
    }
}

impl Flow {
    /// Counts a batch of records that completed at `now_ns`; `measured` of them (with
    /// `payload_bytes`) are outside the warmup.
    pub fn add(&self, now_ns: u64, total: u64, measured: u64, payload_bytes: u64) {
        self.records_total.fetch_add(total, Ordering::Relaxed);
        if measured > 0 {
            self.records.fetch_add(measured, Ordering::Relaxed);
            self.payload_bytes
                .fetch_add(payload_bytes, Ordering::Relaxed);
            self.batches.fetch_add(1, Ordering::Relaxed);
            self.last_ns.fetch_max(now_ns, Ordering::Relaxed);
        }
    }

    pub fn snapshot(&self) -> FlowSnapshot {
        FlowSnapshot {
            records_total: self.records_total.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            payload_bytes: self.payload_bytes.load(Ordering::Relaxed),
            batches: self.batches.load(Ordering::Relaxed),
            last_ns: self.last_ns.load(Ordering::Relaxed),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FlowSnapshot {
    pub records_total: u64,
    pub records: u64,
    pub payload_bytes: u64,
    pub batches: u64,
    pub last_ns: u64,
}

/// Everything the executors report to the main thread.
#[derive(Debug)]
pub struct Shared {
    pub clock: Clock,
    pub produce: Flow,
    pub consume: Flow,
    pub produce_latency: Mutex<Histogram<u64>>,
    pub e2e_latency: Mutex<Histogram<u64>>,
    /// Errors by what went wrong (a Kafka error name, or a connection failure), counted in
    /// records where records were lost, else in occurrences.
    errors: Mutex<BTreeMap<String, u64>>,
    /// The first failure that ended a producer or consumer early.
    fatal: Mutex<Option<String>>,
    /// Per partition (by position in the topic's partition list): the offset after the last
    /// acknowledged record, -1 before any. Consumers read up to it.
    pub acked_end: Vec<AtomicI64>,
    pub producers_running: AtomicUsize,
    /// Set once every producer is done.
    pub producers_done: AtomicBool,
}

impl Shared {
    pub fn new(clock: Clock, partitions: usize, producers: usize) -> Self {
        Self {
            clock,
            produce: Flow::default(),
            consume: Flow::default(),
            produce_latency: Mutex::new(new_latency_histogram()),
            e2e_latency: Mutex::new(new_latency_histogram()),
            errors: Mutex::new(BTreeMap::new()),
            fatal: Mutex::new(None),
            acked_end: (0..partitions).map(|_| AtomicI64::new(-1)).collect(),
            producers_running: AtomicUsize::new(producers),
            producers_done: AtomicBool::new(producers == 0),
        }
    }

    pub fn count_error(&self, what: impl Into<String>, count: u64) {
        *lock(&self.errors).entry(what.into()).or_default() += count;
    }

    pub fn errors(&self) -> BTreeMap<String, u64> {
        lock(&self.errors).clone()
    }

    pub fn error_total(&self) -> u64 {
        lock(&self.errors).values().sum()
    }

    /// Records why a task had to stop; the first reason wins.
    pub fn fail(&self, reason: String) {
        lock(&self.fatal).get_or_insert(reason);
    }

    pub fn fatal(&self) -> Option<String> {
        lock(&self.fatal).clone()
    }

    pub fn producer_finished(&self) {
        if self.producers_running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.producers_done.store(true, Ordering::Release);
        }
    }

    pub fn producers_done(&self) -> bool {
        self.producers_done.load(Ordering::Acquire)
    }

    /// Notes that a partition's acknowledged records reach up to `end_offset`.
    pub fn acked_up_to(&self, partition_position: usize, end_offset: i64) {
        if let Some(end) = self.acked_end.get(partition_position) {
            end.fetch_max(end_offset, Ordering::AcqRel);
        }
    }

    pub fn acked_end(&self, partition_position: usize) -> i64 {
        self.acked_end
            .get(partition_position)
            .map_or(-1, |e| e.load(Ordering::Acquire))
    }
}

/// A poisoned lock only means another thread panicked mid-update of plain counters: the data is
/// still worth reporting.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A task's own latency histogram, merged into a shared one every so often and when dropped.
#[derive(Debug)]
pub struct LocalLatency<'a> {
    local: Histogram<u64>,
    shared: &'a Mutex<Histogram<u64>>,
    merged_ns: u64,
}

impl<'a> LocalLatency<'a> {
    pub fn new(shared: &'a Mutex<Histogram<u64>>) -> Self {
        Self {
            local: new_latency_histogram(),
            shared,
            merged_ns: 0,
        }
    }

    pub fn record_ns(&mut self, latency_ns: u64) {
        self.local.saturating_record((latency_ns / 1000).max(1));
    }

    /// Merges into the shared histogram if the last merge is old enough.
    pub fn maybe_merge(&mut self, now_ns: u64) {
        if now_ns.saturating_sub(self.merged_ns) >= MERGE_INTERVAL_NS {
            self.merge();
            self.merged_ns = now_ns;
        }
    }

    pub fn merge(&mut self) {
        if self.local.is_empty() {
            return;
        }
        // Same bounds on both sides: adding cannot fail.
        let _ = lock(self.shared).add(&self.local);
        self.local.reset();
    }
}

impl Drop for LocalLatency<'_> {
    fn drop(&mut self) {
        self.merge();
    }
}

/// The percentiles every report shows, in milliseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Percentiles {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p99_9_ms: f64,
    pub p99_99_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    pub fn of(histogram: &Histogram<u64>) -> Option<Self> {
        if histogram.is_empty() {
            return None;
        }
        let ms = |us: u64| us as f64 / 1000.0;
        let at = |q: f64| ms(histogram.value_at_quantile(q));
        Some(Self {
            count: histogram.len(),
            mean_ms: histogram.mean() / 1000.0,
            p50_ms: at(0.5),
            p90_ms: at(0.9),
            p99_ms: at(0.99),
            p99_9_ms: at(0.999),
            p99_99_ms: at(0.9999),
            max_ms: ms(histogram.max()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flows_count_measured_records_and_their_window() {
        let flow = Flow::default();
        flow.add(10, 5, 0, 0);
        flow.add(30, 5, 5, 500);
        flow.add(20, 5, 5, 500);
        let s = flow.snapshot();
        assert_eq!(
            (s.records_total, s.records, s.payload_bytes, s.batches),
            (15, 10, 1000, 2)
        );
        assert_eq!(s.last_ns, 30);
    }

    #[test]
    fn local_latencies_reach_the_shared_histogram() {
        let shared = Mutex::new(new_latency_histogram());
        {
            let mut local = LocalLatency::new(&shared);
            for ms in 1..=100 {
                local.record_ns(ms * 1_000_000);
            }
            local.maybe_merge(MERGE_INTERVAL_NS);
            assert_eq!(shared.lock().unwrap().len(), 100);
            local.record_ns(7_000_000);
        }
        let merged = shared.lock().unwrap();
        assert_eq!(merged.len(), 101);
        let p = Percentiles::of(&merged).unwrap();
        assert!((p.p50_ms - 50.0).abs() < 0.1, "{p:?}");
        assert!((p.max_ms - 100.0).abs() < 0.1, "{p:?}");
        assert!(p.p99_ms <= p.p99_9_ms && p.p99_9_ms <= p.max_ms);
    }

    #[test]
    fn acked_ends_only_grow_and_producers_finish_once() {
        let shared = Shared::new(Clock::new(0.0, 1), 2, 2);
        shared.acked_up_to(1, 10);
        shared.acked_up_to(1, 5);
        assert_eq!((shared.acked_end(0), shared.acked_end(1)), (-1, 10));
        assert!(!shared.producers_done());
        shared.producer_finished();
        assert!(!shared.producers_done());
        shared.producer_finished();
        assert!(shared.producers_done());
    }
}
