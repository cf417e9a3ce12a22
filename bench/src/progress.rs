//! The progress line printed every second on a terminal: rates over the last second, latency
//! so far, errors, and what is left to do.

use crate::options::Stop;
use crate::stats::{FlowSnapshot, Percentiles, Shared, lock};

/// What the previous line saw, to turn totals into rates.
#[derive(Debug)]
pub struct Progress {
    at_ns: u64,
    produced: u64,
    consumed: u64,
    /// Records consumers alone have to read (catch-up runs).
    to_consume: Option<u64>,
}

impl Progress {
    pub fn new(to_consume: Option<u64>) -> Self {
        Self {
            at_ns: 0,
            produced: 0,
            consumed: 0,
            to_consume,
        }
    }

    /// The next line, or `None` before the clock has moved.
    pub fn line(&mut self, shared: &Shared, stop: Stop, producers: bool) -> Option<String> {
        let now_ns = shared.clock.now_ns();
        let seconds = now_ns.saturating_sub(self.at_ns) as f64 / 1e9;
        if seconds <= 0.0 {
            return None;
        }
        let produce = shared.produce.snapshot();
        let consume = shared.consume.snapshot();
        let mut line = format!("{:6.1} s", now_ns as f64 / 1e9);
        if !shared.clock.is_measured(now_ns) {
            line.push_str(" (warmup)");
        }
        if producers {
            let rate = (produce.records_total - self.produced) as f64 / seconds;
            let latency = Percentiles::of(&lock(&shared.produce_latency));
            line.push_str(&part("produce", rate, latency, "ack"));
        }
        if consume.records_total > 0 || self.to_consume.is_some() {
            let rate = (consume.records_total - self.consumed) as f64 / seconds;
            let latency = Percentiles::of(&lock(&shared.e2e_latency));
            line.push_str(&part("consume", rate, latency, "e2e"));
        }
        line.push_str(&format!(" | errors {}", shared.error_total()));
        line.push_str(&self.left(now_ns, shared, stop, produce, consume));
        self.at_ns = now_ns;
        self.produced = produce.records_total;
        self.consumed = consume.records_total;
        Some(line)
    }

    fn left(
        &self,
        now_ns: u64,
        shared: &Shared,
        stop: Stop,
        produce: FlowSnapshot,
        consume: FlowSnapshot,
    ) -> String {
        match (stop, self.to_consume) {
            (Stop::After { duration_s }, _) => {
                let end_s = shared.clock.warmup_end_ns as f64 / 1e9 + duration_s;
                let left_s = (end_s - now_ns as f64 / 1e9).max(0.0);
                format!(" | {left_s:.0} s left")
            }
            (_, Some(total)) => {
                format!(
                    " | {} records to go",
                    total.saturating_sub(consume.records_total)
                )
            }
            (Stop::Records(records), None) => {
                format!(
                    " | {} records to go",
                    records.saturating_sub(produce.records_total)
                )
            }
            (Stop::CaughtUp, None) => String::new(),
        }
    }
}

fn part(name: &str, rate: f64, latency: Option<Percentiles>, latency_name: &str) -> String {
    let mut text = format!(" | {name} {:>9.0} rec/s", rate);
    if let Some(p) = latency {
        text.push_str(&format!(
            " {latency_name} p50 {:.2} p99 {:.2} max {:.2} ms",
            p.p50_ms, p.p99_ms, p.max_ms
        ));
    }
    text
}
