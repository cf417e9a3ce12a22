//! How fast one shard appends to one log: 1 KiB records in batches of 16 KiB, 64 KiB and 1 MiB,
//! written without syncing (one appender, `wait_written` at the end), with group commit (many
//! appenders, each waiting for its batch to be durable) and as acks=1 waits (`written`: many
//! appenders, each waiting for its batch to be written); `replicated` is `unsynced` through
//! a follower's `append_replicated` (batches a leader stamped), to compare the two paths.
//!
//!     cargo run --release -p storage --example append_bench -- [--dir DIR] [--bytes N]
//!         [--appenders N] [--batches 16k,64k,1m] [--modes unsynced,durable,written,replicated]
//!         [--write-buffer-bytes N] [--writes-in-flight-max N] [--preallocate-bytes N]
//!
//! Prints one line per run, `result mode=... batch_bytes=... mb_per_s=... cpu_pct=...`, for
//! `scripts/bench-storage` to compare with fio. Sizes take k, m, g suffixes (powers of 1024).

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::Instant;

use bytes::BytesMut;
use glommio::{LocalExecutorBuilder, Placement};
use storage::batch::{self, testing};
use storage::{Log, LogConfig, ShardStorage, StorageConfig, resolve_io_mode};

const RECORD_BYTES: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// One appender; the clock stops when everything is written to the device.
    Unsynced,
    /// As `Unsynced`, through a follower's `append_replicated` (batches a leader stamped).
    Replicated,
    /// Many appenders, each waiting for its own batch to be fdatasync'd (group commit).
    Durable,
    /// Many appenders, each waiting for its own batch to be written (acks=1's wait).
    Written,
}

#[derive(Debug, Clone)]
struct Args {
    dir: PathBuf,
    bytes: u64,
    appenders: usize,
    batches: Vec<usize>,
    modes: Vec<Mode>,
    cpu: Option<usize>,
    storage: StorageConfig,
}

fn main() {
    let args = match parse_args(std::env::args().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("append_bench: {e}");
            std::process::exit(2);
        }
    };
    // Absolute, because glommio 0.9 opens directories with openat(-1, path): a relative path
    // fails with EBADF when the log syncs its directory.
    let dir = std::fs::create_dir_all(&args.dir).and_then(|()| args.dir.canonicalize());
    let args = match dir {
        Ok(dir) => Args { dir, ..args },
        Err(e) => {
            eprintln!("append_bench: creating {}: {e}", args.dir.display());
            std::process::exit(1);
        }
    };
    let placement = args.cpu.map_or(Placement::Unbound, Placement::Fixed);
    let joined = LocalExecutorBuilder::new(placement)
        .name("append-bench")
        .spawn(move || async move { run(&args).await })
        .map_err(|e| e.to_string())
        .and_then(|handle| handle.join().map_err(|e| e.to_string()));
    match joined {
        Ok(Ok(())) => {}
        Ok(Err(e)) | Err(e) => {
            eprintln!("append_bench: {e}");
            std::process::exit(1);
        }
    }
}

async fn run(args: &Args) -> Result<(), String> {
    let mode = resolve_io_mode(&args.dir, args.storage.io_mode).map_err(|e| e.to_string())?;
    println!(
        "# dir {} ({mode:?} IO), {} MiB per run, write_buffer_bytes {}, writes_in_flight_max {}, \
         preallocate_bytes {}, durable appenders {}",
        args.dir.display(),
        args.bytes >> 20,
        args.storage.write_buffer_bytes,
        args.storage.writes_in_flight_max,
        args.storage.preallocate_bytes,
        args.appenders,
    );
    let shard = ShardStorage::open(&args.dir, args.storage.clone(), mode)
        .await
        .map_err(|e| e.to_string())?;
    for &run_mode in &args.modes {
        for &batch_bytes in &args.batches {
            let log_dir = args
                .dir
                .join(format!("append-bench-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&log_dir);
            let config = LogConfig {
                retention_ms: None,
                max_message_bytes: batch_bytes * 2,
                ..LogConfig::default()
            };
            let log = shard
                .open_log(&log_dir, config)
                .await
                .map_err(|e| e.to_string())?;
            let template = batch_template(batch_bytes);
            let batches = (args.bytes / template.len() as u64).max(1);
            let cpu_before = cpu_ticks();
            let started = Instant::now();
            let appended = match run_mode {
                Mode::Unsynced => unsynced(&log, &template, batches, false).await,
                Mode::Replicated => unsynced(&log, &template, batches, true).await,
                Mode::Durable => waiting(&log, &template, batches, args.appenders, true).await,
                Mode::Written => waiting(&log, &template, batches, args.appenders, false).await,
            };
            let seconds = started.elapsed().as_secs_f64();
            let cpu_seconds = cpu_ticks().saturating_sub(cpu_before) as f64 / TICKS_PER_S;
            let deleted = log.delete().await.map_err(|e| e.to_string());
            let _ = std::fs::remove_dir_all(&log_dir);
            let bytes = appended? as f64;
            deleted?;
            println!(
                "result mode={} batch_bytes={batch_bytes} bytes={bytes} seconds={seconds:.3} \
                 mb_per_s={:.1} mib_per_s={:.1} cpu_pct={:.0}",
                match run_mode {
                    Mode::Unsynced => "unsynced",
                    Mode::Replicated => "replicated",
                    Mode::Durable => "durable",
                    Mode::Written => "written",
                },
                bytes / 1e6 / seconds,
                bytes / (1u64 << 20) as f64 / seconds,
                100.0 * cpu_seconds / seconds,
            );
        }
    }
    Ok(())
}

/// One producer batch of 1 KiB records, about `batch_bytes` long.
fn batch_template(batch_bytes: usize) -> Vec<u8> {
    // A record of 1 KiB takes about 1 KiB + 8 bytes in the batch.
    let count = (batch_bytes / (RECORD_BYTES + 8)).max(1);
    testing::batch(count as i32, RECORD_BYTES, 0)
}

/// Appends `batches` copies of `template` one after the other, as the leader or (`follower`)
/// as a follower would, then waits until all are written. Returns the bytes appended.
async fn unsynced(
    log: &Rc<Log>,
    template: &[u8],
    batches: u64,
    follower: bool,
) -> Result<u64, String> {
    let mut next_offset = 0;
    for _ in 0..batches {
        let mut batch = BytesMut::from(template);
        let info = if follower {
            // What a leader's log holds: offsets and epoch stamped.
            batch::assign_offsets(&mut batch, next_offset, 0);
            log.append_replicated(&[batch.freeze()]).await
        } else {
            log.append(batch, 0).await
        };
        next_offset = info.map_err(|e| e.to_string())?.next_offset;
    }
    log.wait_written(next_offset)
        .await
        .map_err(|e| e.to_string())?;
    Ok(batches * template.len() as u64)
}

/// `appenders` tasks share `batches` appends; each waits for its batch to be durable (or just
/// written) before appending the next. Returns the bytes appended.
async fn waiting(
    log: &Rc<Log>,
    template: &[u8],
    batches: u64,
    appenders: usize,
    durable: bool,
) -> Result<u64, String> {
    let template: Rc<[u8]> = template.into();
    let tasks: Vec<_> = (0..appenders as u64)
        .map(|i| {
            let (log, template) = (log.clone(), template.clone());
            // The first `batches % appenders` tasks take one more.
            let share = batches / appenders as u64 + u64::from(i < batches % appenders as u64);
            glommio::spawn_local(async move {
                for _ in 0..share {
                    let info = log
                        .append(BytesMut::from(&template[..]), 0)
                        .await
                        .map_err(|e| e.to_string())?;
                    let waited = if durable {
                        log.wait_durable(info.next_offset).await
                    } else {
                        log.wait_written(info.next_offset).await
                    };
                    waited.map_err(|e| e.to_string())?;
                }
                Ok::<u64, String>(share * template.len() as u64)
            })
        })
        .collect();
    let mut bytes = 0;
    for task in tasks {
        bytes += task.await?;
    }
    Ok(bytes)
}

/// Clock ticks per second of /proc's CPU times (USER_HZ, 100 on Linux).
const TICKS_PER_S: f64 = 100.0;

/// This process's user and system CPU time, in clock ticks (0 if /proc cannot tell).
fn cpu_ticks() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
    let after_name = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok());
    field(14).unwrap_or(0) + field(15).unwrap_or(0)
}

fn parse_args(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        dir: PathBuf::from("target/bench-data/storage"),
        bytes: 2 << 30,
        appenders: 32,
        batches: vec![16 << 10, 64 << 10, 1 << 20],
        modes: vec![Mode::Unsynced, Mode::Durable],
        cpu: None,
        storage: StorageConfig::default(),
    };
    while let Some(flag) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{flag} needs a value"));
        match flag.as_str() {
            "--dir" => parsed.dir = Path::new(&value()?).to_path_buf(),
            "--bytes" => parsed.bytes = size(&value()?)?,
            "--appenders" => parsed.appenders = size(&value()?)?.max(1) as usize,
            "--cpu" => parsed.cpu = Some(size(&value()?)? as usize),
            "--batches" => {
                parsed.batches = value()?
                    .split(',')
                    .map(|s| size(s).map(|n| n as usize))
                    .collect::<Result<_, _>>()?;
            }
            "--modes" => {
                parsed.modes = value()?
                    .split(',')
                    .map(|s| match s {
                        "unsynced" => Ok(Mode::Unsynced),
                        "replicated" => Ok(Mode::Replicated),
                        "durable" => Ok(Mode::Durable),
                        "written" => Ok(Mode::Written),
                        other => Err(format!("--modes: unknown mode {other}")),
                    })
                    .collect::<Result<_, _>>()?;
            }
            "--write-buffer-bytes" => parsed.storage.write_buffer_bytes = size(&value()?)? as usize,
            "--writes-in-flight-max" => {
                parsed.storage.writes_in_flight_max = size(&value()?)? as usize;
            }
            "--preallocate-bytes" => parsed.storage.preallocate_bytes = size(&value()?)?,
            "--help" | "-h" => return Err("see the comment at the top of append_bench.rs".into()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(parsed)
}

/// `123`, `16k`, `64m`, `2g` (powers of 1024).
fn size(text: &str) -> Result<u64, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, shift) = match lower.as_bytes().last() {
        Some(b'k') => (&lower[..lower.len() - 1], 10),
        Some(b'm') => (&lower[..lower.len() - 1], 20),
        Some(b'g') => (&lower[..lower.len() - 1], 30),
        _ => (lower.as_str(), 0),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(1 << shift))
        .ok_or_else(|| format!("{text}: expected a size like 64k"))
}
