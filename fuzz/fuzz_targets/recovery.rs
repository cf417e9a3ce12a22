//! Recovery: a log directory made of segment files, offset and time indexes and the
//! clean-shutdown marker, in any state a crash, a torn write or a damaged disk can leave, opened
//! by `storage::ShardStorage::open_log` on a glommio executor (tmpfs, so buffered IO).
//!
//! The segments are built from valid batches (`storage::batch::testing`), then the input damages
//! them: offsets out of sequence, bytes flipped, garbage or a torn batch at the end, index files
//! missing or arbitrary, segments that do not follow each other.
//!
//! What must hold:
//! - the log opens, or is refused with a typed `LogError`; nothing panics;
//! - every batch a read returns passes an independent CRC-32C and length check, offsets grow,
//!   and reads fail only with a typed error: `Corrupt` (reported, never served), and after an
//!   unclean stop never in the last segment, which recovery cuts at its first bad batch;
//! - its leader epochs, rebuilt from the batch headers, grow and lie within the log;
//! - a recovered log takes an append at its end offset and reads it back from the file;
//! - closed and opened again, it holds what it held, and the appended batch;
//! - memory stays within a bound proportional to the input.
#![no_main]

use std::path::{Path, PathBuf};
use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use glommio::{LocalExecutor, LocalExecutorBuilder};
use libfuzzer_sys::arbitrary::{self, Arbitrary};
use libfuzzer_sys::fuzz_target;
use spindle_fuzz::{budget, within_memory};
use storage::batch::{self, BatchHeader, testing};
use storage::{Log, LogConfig, ReadError, ResolvedIoMode, ShardStorage, StorageConfig};

const SEGMENTS_MAX: usize = 4;
const BATCHES_MAX: usize = 24;

#[derive(Arbitrary, Debug)]
struct Input {
    /// Whether the clean-shutdown marker is there.
    clean: bool,
    segments: Vec<SegmentInput>,
}

#[derive(Arbitrary, Debug)]
struct SegmentInput {
    /// Added to the offset the segment should start at (0: it follows the previous one).
    base_skew: i8,
    batches: Vec<BatchInput>,
    /// Bytes after the last batch: a torn write, or garbage.
    tail: Vec<u8>,
    /// Bytes of the `.log` file flipped (position, xor mask), after the tail is added.
    damage: Vec<(u16, u8)>,
    /// Cut the `.log` file to this many bytes.
    cut: Option<u16>,
    offset_index: IndexInput,
    time_index: IndexInput,
}

#[derive(Arbitrary, Debug)]
struct BatchInput {
    count: u8,
    value_bytes: u8,
    timestamp_ms: i16,
    /// Added to the offset the batch should have (0: dense).
    offset_skew: i8,
}

#[derive(Arbitrary, Debug)]
enum IndexInput {
    Missing,
    Bytes(Vec<u8>),
    /// Entries (relative offset and position, or timestamp and relative offset), well formed
    /// but not necessarily true.
    Entries(Vec<(u32, u32)>),
}

thread_local! {
    static EXECUTOR: LocalExecutor = LocalExecutorBuilder::default()
        .make()
        .expect("glommio executor starts");
}

fuzz_target!(|input: Input| {
    let root = root_dir();
    let log_dir = root.join("log");
    let _ = std::fs::remove_dir_all(&log_dir);
    std::fs::create_dir_all(&log_dir).expect("fuzz directory");
    let (files, input_bytes) = write_log_dir(&log_dir, &input);
    let last_segment = files.last().cloned();
    EXECUTOR.with(|executor| {
        within_memory(budget(input_bytes, 64, 48 << 20), || {
            executor.run(check(
                root.clone(),
                log_dir.clone(),
                input.clean,
                last_segment,
            ))
        })
    });
});

/// Where the log directory is made: `SPINDLE_FUZZ_DIR` (scripts/fuzz makes one on tmpfs and
/// removes it), or a directory of this process's under /dev/shm.
fn root_dir() -> PathBuf {
    std::env::var_os("SPINDLE_FUZZ_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(format!("/dev/shm/spindle-fuzz-{}", std::process::id())))
}

/// Writes the input's segments into `dir`; returns the `.log` paths in order and how many bytes
/// were written in all.
fn write_log_dir(dir: &Path, input: &Input) -> (Vec<PathBuf>, usize) {
    let mut paths = Vec::new();
    let mut written = 0;
    let mut next_offset: i64 = 0;
    for segment in input.segments.iter().take(SEGMENTS_MAX) {
        let base = (next_offset + i64::from(segment.base_skew)).max(0);
        next_offset = base;
        let mut log = Vec::new();
        for b in segment.batches.iter().take(BATCHES_MAX) {
            let count = i32::from(b.count.max(1));
            let mut bytes =
                testing::batch(count, usize::from(b.value_bytes), i64::from(b.timestamp_ms));
            let offset = (next_offset + i64::from(b.offset_skew)).max(0);
            batch::assign_offsets(&mut bytes, offset, 1);
            next_offset = offset + i64::from(count);
            log.extend_from_slice(&bytes);
        }
        log.extend_from_slice(&segment.tail);
        if !log.is_empty() {
            for &(at, mask) in &segment.damage {
                let at = usize::from(at) % log.len();
                log[at] ^= mask;
            }
        }
        if let Some(cut) = segment.cut {
            log.truncate(usize::from(cut));
        }
        let name = format!("{base:020}");
        let path = dir.join(format!("{name}.log"));
        // Two inputs may name the same segment: the later one wins, as on a disk.
        std::fs::write(&path, &log).expect("write segment");
        written += log.len();
        written += write_index(&dir.join(format!("{name}.index")), &segment.offset_index, 4);
        written += write_index(
            &dir.join(format!("{name}.timeindex")),
            &segment.time_index,
            8,
        );
        paths.retain(|p| p != &path);
        paths.push(path);
    }
    if input.clean {
        std::fs::write(dir.join("clean-shutdown"), b"").expect("write marker");
    }
    paths.sort();
    (paths, written)
}

fn write_index(path: &Path, index: &IndexInput, first_field_bytes: usize) -> usize {
    let bytes = match index {
        IndexInput::Missing => return 0,
        IndexInput::Bytes(bytes) => bytes.clone(),
        IndexInput::Entries(entries) => entries
            .iter()
            .flat_map(|&(first, second)| {
                let first = u64::from(first).to_be_bytes();
                let mut entry = first[8 - first_field_bytes..].to_vec();
                entry.extend_from_slice(&second.to_be_bytes());
                entry
            })
            .collect(),
    };
    std::fs::write(path, &bytes).expect("write index");
    bytes.len()
}

async fn check(root: PathBuf, dir: PathBuf, clean: bool, last_segment: Option<PathBuf>) {
    let shard = ShardStorage::open(&root, storage_config(), ResolvedIoMode::Buffered)
        .await
        .expect("shard storage opens");
    let log = match shard.open_log(&dir, log_config()).await {
        Ok(log) => log,
        // Refused with a typed error: nothing more to check.
        Err(_) => return,
    };
    let end = log.log_end_offset();
    let start = log.log_start_offset();
    assert!(start <= end, "log start {start} past its end {end}");
    let before = read_all(&log, start, end, clean, last_segment.as_deref()).await;

    // Its leader epochs (rebuilt from the headers: there is no checkpoint) grow, within the log.
    let epochs = log.leader_epochs();
    for pair in epochs.windows(2) {
        assert!(pair[0].epoch < pair[1].epoch && pair[0].start_offset < pair[1].start_offset);
    }
    if let (Some(first), Some(last)) = (epochs.first(), epochs.last()) {
        assert!(
            first.start_offset >= start && last.start_offset < end,
            "{epochs:?}"
        );
    }

    // The recovered log takes an append at its end, in an epoch no older than its latest (a
    // damaged header may carry any epoch: it is outside the CRC).
    let epoch = epochs.last().map_or(2, |e| e.epoch.max(2));
    let appended = BytesMut::from(&testing::batch(3, 10, 7)[..]);
    let info = log
        .append(appended.clone(), epoch)
        .await
        .expect("append to a recovered log");
    assert_eq!(info.base_offset, end);
    log.wait_written(info.next_offset).await.expect("written");
    let mut expected = appended.to_vec();
    batch::assign_offsets(&mut expected, end, epoch);
    let read = log
        .read(end, 1 << 20, info.next_offset)
        .await
        .expect("the appended batch reads back");
    assert_eq!(read.first().map(|b| &b[..]), Some(&expected[..]));
    log.close().await.expect("close");

    // Opened again after the clean close: the same batches, and the new one.
    let log = shard
        .open_log(&dir, log_config())
        .await
        .expect("a log closed cleanly opens");
    assert_eq!(log.log_end_offset(), info.next_offset);
    assert_eq!(log.log_start_offset(), start);
    let after = read_all(&log, start, info.next_offset, true, None).await;
    if before.complete {
        let mut want = before.batches.clone();
        want.push(Bytes::from(expected));
        assert_eq!(
            after.batches, want,
            "a clean close and open keep every batch"
        );
    } else {
        assert!(after.batches.starts_with(&before.batches));
    }
    log.close().await.expect("close");
}

struct ReadBack {
    batches: Vec<Bytes>,
    /// Whether every offset up to the end was read (no error, no gap).
    complete: bool,
}

/// Reads `[from, end)` as a consumer would, checking every batch served.
async fn read_all(
    log: &Rc<Log>,
    from: i64,
    end: i64,
    trusted_tail: bool,
    last_segment: Option<&Path>,
) -> ReadBack {
    let mut batches = Vec::new();
    let mut offset = from;
    while offset < end {
        let read = match log.read(offset, 64 << 10, end).await {
            Ok(read) => read,
            Err(ReadError::Corrupt { path, .. }) => {
                if !trusted_tail {
                    assert_ne!(
                        Some(path.as_path()),
                        last_segment,
                        "recovery left a corrupt batch in the last segment"
                    );
                }
                return ReadBack {
                    batches,
                    complete: false,
                };
            }
            Err(e) => panic!("read at {offset}: {e}"),
        };
        if read.is_empty() {
            // A gap between segments: nothing to serve at this offset.
            return ReadBack {
                batches,
                complete: false,
            };
        }
        for bytes in read {
            let header = check_served(&bytes);
            assert!(
                header.next_offset() > offset,
                "read at {offset} went backwards: {header:?}"
            );
            offset = header.next_offset();
            batches.push(bytes);
        }
    }
    ReadBack {
        batches,
        complete: true,
    }
}

/// The independent check of a served batch: one whole batch, magic 2, CRC-32C right.
fn check_served(bytes: &[u8]) -> BatchHeader {
    assert!(bytes.len() >= 61, "served {} bytes", bytes.len());
    let length = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
    assert_eq!(
        usize::try_from(length).ok().map(|l| l + 12),
        Some(bytes.len())
    );
    assert_eq!(bytes[16], 2, "magic");
    let crc = u32::from_be_bytes([bytes[17], bytes[18], bytes[19], bytes[20]]);
    assert_eq!(
        crc32c::crc32c(&bytes[21..]),
        crc,
        "served a batch that fails its CRC"
    );
    BatchHeader::parse(bytes).expect("served batch parses")
}

fn storage_config() -> StorageConfig {
    StorageConfig {
        write_buffer_bytes: 64 << 10,
        writes_in_flight_max: 2,
        preallocate_bytes: 256 << 10,
        // Reads come from the files, not from memory.
        cache_bytes_max: 0,
        read_bytes_max: 1 << 20,
        readahead_bytes_max: 0,
        ..StorageConfig::default()
    }
}

fn log_config() -> LogConfig {
    LogConfig {
        segment_bytes_max: 1 << 20,
        index_interval_bytes: 128,
        retention_ms: None,
        ..LogConfig::default()
    }
}
