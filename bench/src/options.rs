//! The command line, and the run settings checked and derived from it.

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
pub use net::Acks;

use crate::batch::Codec;
use crate::error::BenchError;

/// A Kafka-protocol load generator: producers keep many requests in flight, consumers fetch in
/// bulk, and latencies go into HdrHistograms.
///
/// Exit status: 0 for a clean run, 1 when the run could not be done (broker unreachable, a
/// connection lost), 2 when it finished but the broker answered errors or records went missing.
#[derive(Debug, Clone, Parser)]
#[command(name = "spindle-bench", version)]
pub struct Options {
    /// HOST:PORT of a broker to bootstrap from.
    #[arg(long, default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// The topic to use; created if missing.
    #[arg(long, default_value = "spindle-bench")]
    pub topic: String,
    /// Partitions of the topic, if it has to be created.
    #[arg(long, default_value_t = 6)]
    pub partitions: i32,
    /// Replication factor of the topic, if it has to be created.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i16,
    /// Producer connections (each its own task; spread over the producer executors).
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    /// Consumers; each fetches its share of the partitions (partition i goes to consumer i mod N).
    #[arg(long, default_value_t = 0)]
    pub consumers: usize,
    /// Bytes of each record's value. Values of 16 bytes or more carry a send timestamp, for
    /// end-to-end latency.
    #[arg(long, default_value_t = 1024)]
    pub record_size: usize,
    /// Bytes per batch, header included: a batch is sent once the next record would not fit (a
    /// larger record goes alone).
    #[arg(long, default_value_t = 64 * 1024)]
    pub batch_size: usize,
    /// The most a Produce request carries, Kafka's max.request.size: once a batch is ready, the
    /// request to its leader takes every partition's first batch up to this, as the Java
    /// client's does.
    #[arg(long, default_value_t = 1 << 20)]
    pub max_request_bytes: usize,
    /// Record bytes unsent batches may hold together, Kafka's buffer.memory: while requests are
    /// in flight the producer goes on filling batches up to it, then waits for a slot.
    #[arg(long, default_value_t = 32 << 20)]
    pub buffer_memory_bytes: usize,
    /// How long a batch that is not full may wait for more records.
    #[arg(long = "linger-ms", default_value_t = 5)]
    pub linger_ms: u64,
    /// Acknowledgements: 0 (none), 1 (the leader's), all.
    #[arg(long, default_value = "1")]
    pub acks: Acks,
    #[arg(long, value_enum, default_value_t = CompressionArg::None)]
    pub compression: CompressionArg,
    /// Distinct keys, partitioned by key hash like Kafka's default partitioner. Without it,
    /// records have no key and batches go to the partitions in turn.
    #[arg(long)]
    pub keys: Option<u64>,
    /// Records per second over all producers, for fixed-load latency runs: latency counts from
    /// each record's intended send time. Without it, as fast as possible.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Seconds to produce, after the warmup [default: 10 with producers; consumers alone read
    /// up to the end offsets they found at the start].
    #[arg(long = "duration", value_name = "SECONDS", conflicts_with = "records")]
    pub duration_s: Option<f64>,
    /// Records to produce in all (or, with consumers alone, to consume).
    #[arg(long)]
    pub records: Option<u64>,
    /// Seconds at the start whose records are left out of the figures.
    #[arg(long = "warmup", value_name = "SECONDS", default_value_t = 0.0)]
    pub warmup_s: f64,
    /// Where consumers start [default: latest with producers, earliest without].
    #[arg(long, value_enum)]
    pub consume_from: Option<ConsumeFrom>,
    /// Requests a producer keeps in flight per connection.
    #[arg(long, default_value_t = 8)]
    pub max_in_flight: usize,
    /// The most a consumer's fetch may return, per request and per partition.
    #[arg(long, default_value_t = 8 << 20)]
    pub fetch_max_bytes: usize,
    /// How long one request may take.
    #[arg(long = "request-timeout-ms", default_value_t = 30_000)]
    pub request_timeout_ms: u64,
    /// How long consumers may take, once producers stop, to read what was acknowledged.
    #[arg(long = "drain-timeout", value_name = "SECONDS", default_value_t = 30.0)]
    pub drain_timeout_s: f64,
    /// CPUs for the bench's executors, e.g. `0` or `0-1,4`: producers and consumers each get an
    /// executor per CPU (as many as there are producers or consumers), pinned to it.
    #[arg(long)]
    pub cpuset: Option<String>,
    /// Writes the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Writes the produce-acknowledgement latency in HdrHistogram's percentile-distribution text
    /// format to FILE, and the end-to-end latency to FILE with `.e2e` before its extension.
    #[arg(long, value_name = "FILE")]
    pub hgrm: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CompressionArg {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl CompressionArg {
    pub fn codec(self) -> Codec {
        match self {
            CompressionArg::None => Codec::None,
            CompressionArg::Gzip => Codec::Gzip,
            CompressionArg::Snappy => Codec::Snappy,
            CompressionArg::Lz4 => Codec::Lz4,
            CompressionArg::Zstd => Codec::Zstd,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ConsumeFrom {
    Earliest,
    Latest,
}

impl ConsumeFrom {
    pub fn name(self) -> &'static str {
        match self {
            ConsumeFrom::Earliest => "earliest",
            ConsumeFrom::Latest => "latest",
        }
    }
}

/// When producers stop.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Stop {
    /// After this many seconds past the warmup.
    After { duration_s: f64 },
    /// After this many records in all.
    Records(u64),
    /// Consumers alone: once they reach the end offsets found at the start.
    CaughtUp,
}

/// Records larger than this are refused: a batch must fit in one request frame.
const RECORD_BYTES_MAX: usize = 16 << 20;
const BATCH_BYTES_MAX: usize = 64 << 20;
const FETCH_BYTES_MAX: usize = 256 << 20;
const IN_FLIGHT_MAX: usize = 1024;
const REQUEST_BYTES_MAX: usize = 256 << 20;
const BUFFER_BYTES_MAX: usize = 16 << 30;
/// Executors (producers and consumers, each) a run may start.
const CONNECTIONS_MAX: usize = 4096;
const DEFAULT_DURATION_S: f64 = 10.0;

/// The run's settings, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub options: Options,
    pub codec: Codec,
    pub stop: Stop,
    pub consume_from: ConsumeFrom,
    /// CPUs to pin executors to; empty: not pinned.
    pub cpus: Vec<usize>,
}

impl Options {
    pub fn settings(self) -> Result<Settings, BenchError> {
        let usage = |m: String| Err(BenchError::Usage(m));
        if self.producers == 0 && self.consumers == 0 {
            return usage("nothing to do: --producers and --consumers are both 0".into());
        }
        if self.producers > CONNECTIONS_MAX || self.consumers > CONNECTIONS_MAX {
            return usage(format!("at most {CONNECTIONS_MAX} producers and consumers"));
        }
        if !(1..=i32::from(i16::MAX)).contains(&self.partitions) {
            return usage(format!("--partitions {}: 1 to 32767", self.partitions));
        }
        if self.replication_factor < 1 {
            return usage("--replication-factor must be at least 1".into());
        }
        if self.record_size > RECORD_BYTES_MAX {
            return usage(format!("--record-size: at most {RECORD_BYTES_MAX}"));
        }
        if !(1..=BATCH_BYTES_MAX).contains(&self.batch_size) {
            return usage(format!("--batch-size: 1 to {BATCH_BYTES_MAX}"));
        }
        if !(1..=REQUEST_BYTES_MAX).contains(&self.max_request_bytes) {
            return usage(format!("--max-request-bytes: 1 to {REQUEST_BYTES_MAX}"));
        }
        if !(1..=BUFFER_BYTES_MAX).contains(&self.buffer_memory_bytes) {
            return usage(format!("--buffer-memory-bytes: 1 to {BUFFER_BYTES_MAX}"));
        }
        if !(1..=IN_FLIGHT_MAX).contains(&self.max_in_flight) {
            return usage(format!("--max-in-flight: 1 to {IN_FLIGHT_MAX}"));
        }
        if !(1..=FETCH_BYTES_MAX).contains(&self.fetch_max_bytes) {
            return usage(format!("--fetch-max-bytes: 1 to {FETCH_BYTES_MAX}"));
        }
        if self.keys == Some(0) {
            return usage("--keys must be at least 1".into());
        }
        if let Some(rate) = self.rate.filter(|r| !(r.is_finite() && *r > 0.0)) {
            return usage(format!("--rate {rate}: must be above 0"));
        }
        if !(self.warmup_s.is_finite() && self.warmup_s >= 0.0) {
            return usage("--warmup must be 0 or more seconds".into());
        }
        if !(self.drain_timeout_s.is_finite() && self.drain_timeout_s >= 0.0) {
            return usage("--drain-timeout must be 0 or more seconds".into());
        }
        let stop = match (self.duration_s, self.records) {
            (Some(duration_s), _) if !(duration_s.is_finite() && duration_s > 0.0) => {
                return usage("--duration must be above 0 seconds".into());
            }
            (Some(duration_s), _) => Stop::After { duration_s },
            (None, Some(records)) => Stop::Records(records),
            (None, None) if self.producers == 0 => Stop::CaughtUp,
            (None, None) => Stop::After {
                duration_s: DEFAULT_DURATION_S,
            },
        };
        let consume_from = self.consume_from.unwrap_or(if self.producers == 0 {
            ConsumeFrom::Earliest
        } else {
            ConsumeFrom::Latest
        });
        let cpus = match &self.cpuset {
            Some(list) => parse_cpu_list(list).ok_or_else(|| {
                BenchError::Usage(format!("--cpuset {list}: expected e.g. 0-3,6"))
            })?,
            None => Vec::new(),
        };
        Ok(Settings {
            codec: self.compression.codec(),
            stop,
            consume_from,
            cpus,
            options: self,
        })
    }
}

/// The highest CPU number a list may name: keeps a typo from asking for a huge range.
const CPU_MAX: usize = 4095;

/// Parses a Linux CPU list (`0-3,6`), in order, without repeats. `None` if malformed.
pub fn parse_cpu_list(list: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (first, last) = match part.split_once('-') {
            Some((a, b)) => (a.trim().parse().ok()?, b.trim().parse().ok()?),
            None => {
                let cpu = part.trim().parse().ok()?;
                (cpu, cpu)
            }
        };
        if first > last || last > CPU_MAX {
            return None;
        }
        for cpu in first..=last {
            if !cpus.contains(&cpu) {
                cpus.push(cpu);
            }
        }
    }
    Some(cpus)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Settings, String> {
        let mut argv = vec!["spindle-bench"];
        argv.extend_from_slice(args);
        Options::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .settings()
            .map_err(|e| e.to_string())
    }

    #[test]
    fn cpu_lists_parse_like_linux_ones() {
        assert_eq!(parse_cpu_list("0"), Some(vec![0]));
        assert_eq!(parse_cpu_list("0-2,6"), Some(vec![0, 1, 2, 6]));
        assert_eq!(parse_cpu_list("3,1-3"), Some(vec![3, 1, 2]));
        assert_eq!(parse_cpu_list("2-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
        assert_eq!(parse_cpu_list(""), None);
        assert_eq!(parse_cpu_list("0-100000"), None);
    }

    #[test]
    fn acks_take_kafkas_spellings() {
        assert_eq!("all".parse(), Ok(Acks::All));
        assert_eq!("-1".parse(), Ok(Acks::All));
        assert_eq!("0".parse::<Acks>().map(Acks::wire), Ok(0));
        assert!("2".parse::<Acks>().is_err());
    }

    #[test]
    fn stop_and_consume_from_follow_the_defaults() {
        let s = parse(&[]).unwrap();
        assert_eq!(s.stop, Stop::After { duration_s: 10.0 });
        assert_eq!(s.consume_from, ConsumeFrom::Latest);
        let s = parse(&["--producers", "0", "--consumers", "2"]).unwrap();
        assert_eq!(s.stop, Stop::CaughtUp);
        assert_eq!(s.consume_from, ConsumeFrom::Earliest);
        let s = parse(&["--records", "5"]).unwrap();
        assert_eq!(s.stop, Stop::Records(5));
    }

    #[test]
    fn nonsense_is_refused() {
        for args in [
            &["--producers", "0"][..],
            &["--rate", "0"],
            &["--rate", "nan"],
            &["--duration", "0"],
            &["--duration", "1", "--records", "5"],
            &["--keys", "0"],
            &["--batch-size", "0"],
            &["--cpuset", "x"],
            &["--acks", "2"],
            &["--max-in-flight", "0"],
            &["--max-request-bytes", "0"],
            &["--buffer-memory-bytes", "0"],
        ] {
            assert!(parse(args).is_err(), "{args:?} accepted");
        }
    }
}
