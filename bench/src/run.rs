//! A run from start to end: discover the topic, start the producer and consumer executors,
//! print progress while they work, and collect the report.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Duration;

use glommio::{ExecutorJoinHandle, LocalExecutorBuilder, Placement};
use net::kafka_protocol::protocol::StrBytes;

use crate::cluster::{self, Cluster};
use crate::consumer::{self, ConsumeConfig, ConsumeStop};
use crate::error::BenchError;
use crate::options::{Settings, Stop};
use crate::producer::{self, ProduceConfig, ProducerPlan};
use crate::progress::Progress;
use crate::report::Report;
use crate::stamp::{self, Rng};
use crate::stats::{Clock, Shared, seconds_to_ns};

const PROGRESS_INTERVAL: Duration = Duration::from_secs(1);

/// What a finished run hands back.
#[derive(Debug)]
pub struct Outcome {
    pub report: Report,
    pub shared: Arc<Shared>,
    pub partitions: usize,
}

pub fn run(settings: &Settings) -> Result<Outcome, BenchError> {
    let cluster = LocalExecutorBuilder::new(Placement::Unbound)
        .name("bench-setup")
        .make()
        .map_err(|e| BenchError::Executor(e.to_string()))?
        .run(cluster::discover(settings))?;
    let options = &settings.options;
    let mut rng = Rng::from_entropy();
    let clock = Clock::new(options.warmup_s, rng.next_u64());
    let partitions = cluster.partitions.len();
    let shared = Arc::new(Shared::new(clock, partitions, options.producers));
    let (done_tx, done_rx) = mpsc::channel::<()>();
    let mut executors = Vec::new();
    if options.producers > 0 {
        let config = Arc::new(produce_config(settings, &cluster, &mut rng));
        let shared = shared.clone();
        executors.extend(spawn_executors(
            "producer",
            producer_plans(settings),
            settings,
            &done_tx,
            move |plan| producer::run(plan, config.clone(), shared.clone()),
        )?);
    }
    let mut to_consume = None;
    if options.consumers > 0 {
        let config = Arc::new(consume_config(settings, &cluster));
        if options.producers == 0 {
            to_consume = Some(match &config.stop {
                ConsumeStop::Records(n) => *n,
                _ => records_between(&cluster.start_offsets, &cluster.end_offsets),
            });
        }
        let mut work = Vec::new();
        for id in 0..options.consumers {
            let by_leader = consumer::assignment(
                &cluster.partitions,
                cluster.leaders.len(),
                id,
                options.consumers,
            );
            for (leader, positions) in by_leader.into_iter().enumerate() {
                if !positions.is_empty() {
                    work.push((id, leader, positions));
                }
            }
        }
        let shared = shared.clone();
        executors.extend(spawn_executors(
            "consumer",
            work,
            settings,
            &done_tx,
            move |(id, leader, positions)| {
                consumer::run(id, leader, positions, config.clone(), shared.clone())
            },
        )?);
    }
    drop(done_tx);
    watch(&done_rx, settings, &shared, to_consume);
    for executor in executors {
        if let Err(e) = executor.join() {
            shared.fail(format!("an executor failed: {e}"));
        }
    }
    Ok(Outcome {
        report: Report::collect(settings, &shared),
        shared,
        partitions,
    })
}

/// Prints a progress line every second on a terminal until every executor is done (each holds
/// a sender of `done`; the channel disconnects when the last one ends, panics included).
fn watch(done: &mpsc::Receiver<()>, settings: &Settings, shared: &Shared, to_consume: Option<u64>) {
    let terminal = std::io::stderr().is_terminal();
    let mut progress = Progress::new(to_consume);
    let mut shown = false;
    while let Err(mpsc::RecvTimeoutError::Timeout) = done.recv_timeout(PROGRESS_INTERVAL) {
        if !terminal {
            continue;
        }
        if let Some(line) = progress.line(shared, settings.stop, settings.options.producers > 0) {
            // \r and clear-to-end-of-line: the line updates in place.
            eprint!("\r{line}\x1b[K");
            shown = true;
        }
    }
    if shown {
        eprintln!();
    }
}

/// Starts one executor per CPU (one, unpinned, without --cpuset) and runs `start(item)` for
/// each item of `work` as a task on one of them. Each executor holds a clone of `done` until it
/// ends.
fn spawn_executors<T, F, Fut>(
    kind: &str,
    work: Vec<T>,
    settings: &Settings,
    done: &mpsc::Sender<()>,
    start: F,
) -> Result<Vec<ExecutorJoinHandle<()>>, BenchError>
where
    T: Send + 'static,
    F: Fn(T) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = ()> + 'static,
{
    let mut handles = Vec::new();
    for (i, group) in spread(work, &settings.cpus).into_iter().enumerate() {
        let placement = settings
            .cpus
            .get(i)
            .map_or(Placement::Unbound, |&cpu| Placement::Fixed(cpu));
        let (start, done) = (start.clone(), done.clone());
        let handle = LocalExecutorBuilder::new(placement)
            .name(&format!("bench-{kind}-{i}"))
            .spawn(move || async move {
                let tasks: Vec<_> = group
                    .into_iter()
                    .map(|item| glommio::spawn_local(start(item)))
                    .collect();
                for task in tasks {
                    task.await;
                }
                drop(done);
            })
            .map_err(|e| BenchError::Executor(e.to_string()))?;
        handles.push(handle);
    }
    Ok(handles)
}

/// Deals `work` out round-robin to one group per CPU (one group when unpinned), leaving out
/// empty groups.
fn spread<T>(work: Vec<T>, cpus: &[usize]) -> Vec<Vec<T>> {
    let groups = cpus.len().max(1).min(work.len());
    let mut out: Vec<Vec<T>> = (0..groups).map(|_| Vec::new()).collect();
    for (i, item) in work.into_iter().enumerate() {
        out[i % groups].push(item);
    }
    out
}

fn records_between(starts: &[i64], ends: &[i64]) -> u64 {
    starts
        .iter()
        .zip(ends)
        .map(|(s, e)| (e - s).max(0) as u64)
        .sum()
}

fn producer_plans(settings: &Settings) -> Vec<ProducerPlan> {
    let producers = settings.options.producers;
    (0..producers)
        .map(|id| ProducerPlan {
            id,
            quota: match settings.stop {
                // The first `records % producers` producers take one more.
                Stop::Records(records) => {
                    let n = producers as u64;
                    Some(records / n + u64::from((id as u64) < records % n))
                }
                Stop::After { .. } | Stop::CaughtUp => None,
            },
            rate: settings.options.rate.map(|r| r / producers as f64),
        })
        .collect()
}

fn produce_config(settings: &Settings, cluster: &Cluster, rng: &mut Rng) -> ProduceConfig {
    let options = &settings.options;
    let produce_end_ns = match settings.stop {
        Stop::After { duration_s } => Some(seconds_to_ns(options.warmup_s + duration_s)),
        Stop::Records(_) | Stop::CaughtUp => None,
    };
    ProduceConfig {
        topic: StrBytes::from_string(cluster.topic.clone()),
        partitions: cluster.partitions.clone(),
        leaders: cluster.leaders.clone(),
        record_size: options.record_size,
        batch_size: options.batch_size,
        linger_ns: options.linger_ms.saturating_mul(1_000_000),
        acks: options.acks.wire(),
        codec: settings.codec,
        keys: options.keys,
        producers: options.producers,
        max_in_flight: options.max_in_flight,
        request_bytes_max: options.max_request_bytes,
        buffer_bytes: options.buffer_memory_bytes,
        produce_end_ns,
        connect: cluster::connect_options(settings),
        payload: stamp::payload(options.record_size, rng).into(),
    }
}

fn consume_config(settings: &Settings, cluster: &Cluster) -> ConsumeConfig {
    let options = &settings.options;
    let stop = if options.producers > 0 {
        ConsumeStop::WithProducers {
            drain_timeout_ns: seconds_to_ns(options.drain_timeout_s),
        }
    } else {
        match settings.stop {
            Stop::After { duration_s } => {
                ConsumeStop::At(seconds_to_ns(options.warmup_s + duration_s))
            }
            Stop::Records(records) => ConsumeStop::Records(records),
            Stop::CaughtUp => ConsumeStop::EndOffsets(cluster.end_offsets.clone()),
        }
    };
    ConsumeConfig {
        topic: cluster.topic.clone(),
        topic_id: cluster.topic_id,
        partitions: cluster.partitions.clone(),
        leaders: cluster.leaders.clone(),
        start_offsets: cluster.start_offsets.clone(),
        stop,
        fetch_max_bytes: i32::try_from(options.fetch_max_bytes).unwrap_or(i32::MAX),
        connect: cluster::connect_options(settings),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[test]
    fn work_is_spread_over_the_cpus() {
        assert_eq!(
            spread(vec![1, 2, 3, 4, 5], &[0, 1]),
            vec![vec![1, 3, 5], vec![2, 4]]
        );
        assert_eq!(spread(vec![1, 2], &[]), vec![vec![1, 2]]);
        assert_eq!(spread(vec![1], &[0, 1, 2]), vec![vec![1]]);
        assert!(spread(Vec::<u8>::new(), &[0]).is_empty());
    }

    #[test]
    fn record_quotas_add_up_and_rates_split() {
        let settings = crate::options::Options::parse_from([
            "spindle-bench",
            "--producers",
            "3",
            "--records",
            "10",
            "--rate",
            "300",
        ])
        .settings()
        .unwrap();
        let plans = producer_plans(&settings);
        let quotas: Vec<_> = plans.iter().map(|p| p.quota.unwrap()).collect();
        assert_eq!(quotas, vec![4, 3, 3]);
        assert!(plans.iter().all(|p| p.rate == Some(100.0)));
        assert_eq!(records_between(&[0, 5, 9], &[10, 5, 7]), 10);
    }
}
