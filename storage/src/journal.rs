//! The shard's journal: small writes stored into a shared mapping of one file, instead of a
//! write(2) each into their segment's page cache.
//!
//! acks=1 promises what Kafka's does: the records survive the process, not the machine (see
//! ARCHITECTURE.md, "What acks=1 waits for"). A store into a `MAP_SHARED` mapping of a file is
//! in the page cache the moment it is made, exactly as a write(2) is, so it survives kill -9 the
//! same way; but it costs a copy and no system call. At 10,000 partitions sent a record or two a
//! batch, the write(2) per batch (its entry, `file_update_time`, and the first touch of each new
//! page-cache page) was about half of the shard's time; a copy into a mapping measured level with
//! not writing at all (docs/benchmarks.md).
//!
//! The bytes a journal entry holds stay in the writer's buffers too. The writer still writes
//! them to their segment, directly and as whole pages, when its buffer fills; the entry only
//! covers the time until then. So the journal is a redo log of (segment file, position, bytes),
//! and it is small: a ring. An entry is *live* until its writer's file holds its bytes; the ring
//! never overwrites a live entry. A writer that stays partly full keeps the oldest entries live,
//! so the journal makes such writers write out what they hold: the oldest ones whenever the ring
//! is more than half full, and any whose entries outlived a timer period ([`Journal::tick`]).
//!
//! After kill -9, [`replay`] (before any log opens) writes every entry that a later *retire*
//! entry does not cover back into its file, syncs the filesystem, and removes the journal; the
//! logs' own recovery then runs as after any crash. A writer that is done with its file (sealed,
//! truncated, closed, deleted) has written everything to it, and says so with a retire entry:
//! entries before it must not be replayed, because the file may have been truncated and written
//! differently since. Entries left in the ring that are no longer live but not retired hold
//! exactly the bytes their file has, so writing them again changes nothing. A clean stop removes
//! the journal once the shard's logs are closed and none of its entries is live
//! ([`Journal::remove_if_done`]), so the next start has no ring to read.
//!
//! Layout: a 4 KiB header (magic, version, a random nonce), then the ring of entries, each
//! starting on a 64-byte boundary: a 32-byte header (magic, CRC-32C, sequence number, file
//! position, data length, path length, kind), the segment's path (relative to the data
//! directory), and the data. The CRC covers the nonce too, so bytes a producer sent (which may
//! look like an entry, even one copied from a journal) never pass for one. The ring is always one
//! contiguous run of sequence numbers: when an entry does not fit before the ring's end, the
//! space left there is zeroed and the entry starts over at the beginning.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::rc::{Rc, Weak};

use memmap2::MmapMut;

use crate::error::IoFailure;
use crate::writer::SegmentWriter;

/// The directory under the data directory that holds the shards' journals.
const DIR: &str = "journal";
const FILE_MAGIC: &[u8; 8] = b"SPNDLJRN";
const FILE_VERSION: u32 = 1;
const FILE_HEADER_BYTES: u64 = 4096;
const ENTRY_MAGIC: u32 = 0x4e4a_5053;
const ENTRY_HEADER_BYTES: usize = 32;
const ENTRY_ALIGN: u64 = 64;
/// With the ring more than half full, each entry written makes the writers of at most this many
/// of the oldest live entries write out what they hold (their entries die when those writes
/// complete).
const WRITE_OUT_PER_CALL: usize = 8;
/// A shard's journal takes at most this share of the data directory's filesystem ...
const FILESYSTEM_SHARE: u64 = 64;
/// ... and is not made at all if that is less than this.
const CAPACITY_MIN_BYTES: u64 = 64 << 10;
/// The largest journal replayed: a file larger than this is not one of ours (replay reads a
/// journal whole).
const REPLAY_BYTES_MAX: u64 = 16 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    /// Bytes of a segment file at a position.
    Data = 1,
    /// The writer of the file is done with it: earlier entries for it are not to be replayed.
    Retire = 2,
}

/// The journal file of the shard with index `shard`.
fn path_of(data_dir: &Path, shard: usize) -> PathBuf {
    data_dir.join(DIR).join(format!("shard-{shard}.journal"))
}

fn align_entry(len: u64) -> u64 {
    len.div_ceil(ENTRY_ALIGN) * ENTRY_ALIGN
}

#[derive(Debug)]
pub struct Journal {
    data_dir: PathBuf,
    path: PathBuf,
    nonce: u64,
    /// Bytes of the ring (the file less its header), a multiple of [`ENTRY_ALIGN`].
    capacity: u64,
    map: RefCell<MmapMut>,
    ring: RefCell<Ring>,
    /// The file was removed after a clean stop ([`Journal::remove_if_done`]): entries would
    /// go to an unlinked file that no start replays, so none are taken.
    removed: Cell<bool>,
}

#[derive(Debug)]
struct Ring {
    /// Where the next entry goes, as a position that only grows (the ring offset is this
    /// modulo the capacity).
    head: u64,
    /// The next entry's sequence number.
    seq: u64,
    /// Live entries, oldest first: 32 bytes each for an entry of at least 128 bytes of the
    /// ring (its header, a path, a batch header), so at most a quarter of the ring's size.
    live: VecDeque<Live>,
    /// The sequence number at the last tick: entries older than that are written out.
    seq_at_tick: u64,
}

#[derive(Debug)]
struct Live {
    start: u64,
    seq: u64,
    writer: Weak<SegmentWriter>,
    /// The entry is dead once the writer's file holds everything below this position.
    file_end: u64,
}

impl Live {
    fn is_dead(&self) -> bool {
        // A failed writer writes nothing more: its log is offline, and its entries would hold
        // the ring forever.
        self.writer
            .upgrade()
            .is_none_or(|w| w.written_position() >= self.file_end || w.failed())
    }
}

impl Journal {
    /// Replays the journal this shard left (if any, as [`replay`] does for all of them), and
    /// starts a new one of `capacity` bytes, or less on a small filesystem (at most
    /// 1/[`FILESYSTEM_SHARE`] of it). `None` when that leaves too little to be worth it; the
    /// shard's small writes then go through the page cache.
    pub fn open(
        data_dir: &Path,
        shard: usize,
        capacity: u64,
    ) -> Result<Option<Journal>, IoFailure> {
        let path = path_of(data_dir, shard);
        replay_file(data_dir, &path)?;
        let filesystem_bytes = nix::sys::statvfs::statvfs(data_dir)
            .map(|s| s.blocks().saturating_mul(s.fragment_size()))
            .map_err(|e| IoFailure::new("reading the size of", data_dir, &io::Error::from(e)))?;
        let capacity =
            capacity.min(filesystem_bytes / FILESYSTEM_SHARE) / ENTRY_ALIGN * ENTRY_ALIGN;
        if capacity < CAPACITY_MIN_BYTES {
            tracing::warn!(data_dir = %data_dir.display(), filesystem_bytes,
                "the filesystem is too small for a journal: small writes go through the page cache");
            return Ok(None);
        }
        let dir = data_dir.join(DIR);
        std::fs::create_dir_all(&dir).map_err(|e| IoFailure::new("creating", &dir, &e))?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&path)
            .map_err(|e| IoFailure::new("creating", &path, &e))?;
        let len = FILE_HEADER_BYTES + capacity;
        // Allocated now: a store into a hole of a mapped file that finds the disk full kills
        // the process (SIGBUS) instead of failing a write.
        nix::fcntl::fallocate(
            std::os::fd::AsRawFd::as_raw_fd(&file),
            nix::fcntl::FallocateFlags::empty(),
            0,
            i64::try_from(len).unwrap_or(i64::MAX),
        )
        .map_err(|e| IoFailure::new("reserving space for", &path, &io::Error::from(e)))?;
        // Populated now: the first touch of each page otherwise reads it (zeros, for the
        // unwritten blocks fallocate made) on the shard, 14% of its time in the ring's first lap
        // at 10,000 partitions.
        // SAFETY: the mapping is of a file this shard just created in its own data directory,
        // which nothing else writes or truncates while the broker runs (the data directory is
        // locked); the memory is only touched through this `MmapMut`, on this shard's thread.
        #[allow(unsafe_code)]
        let mut map = unsafe { memmap2::MmapOptions::new().populate().map_mut(&file) }
            .map_err(|e| IoFailure::new("mapping", &path, &e))?;
        let nonce = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish();
        let header = &mut map[..FILE_HEADER_BYTES as usize];
        header[..8].copy_from_slice(FILE_MAGIC);
        header[8..12].copy_from_slice(&FILE_VERSION.to_le_bytes());
        header[16..24].copy_from_slice(&nonce.to_le_bytes());
        let crc = crc32c::crc32c(&header[..24]);
        header[24..28].copy_from_slice(&crc.to_le_bytes());
        Ok(Some(Journal {
            data_dir: data_dir.to_path_buf(),
            path,
            nonce,
            capacity,
            map: RefCell::new(map),
            ring: RefCell::new(Ring {
                head: 0,
                seq: 1,
                live: VecDeque::new(),
                seq_at_tick: 0,
            }),
            removed: Cell::new(false),
        }))
    }

    /// How an entry names `file`: its path relative to the data directory (absolute if it is
    /// outside). `None` if the name is too long for an entry.
    pub fn entry_path(&self, file: &Path) -> Option<Box<[u8]>> {
        let path = file.strip_prefix(&self.data_dir).unwrap_or(file);
        let bytes = path.as_os_str().as_bytes();
        (bytes.len() <= usize::from(u16::MAX)).then(|| bytes.into())
    }

    /// Stores `data` (two parts, back to back), the bytes of the file `path` from `file_pos`
    /// on, for `writer`. Returns
    /// false when the ring has no room (the caller writes the bytes to the file instead).
    pub fn append(
        &self,
        writer: &Rc<SegmentWriter>,
        path: &[u8],
        file_pos: u64,
        data: [&[u8]; 2],
    ) -> bool {
        let file_end = file_pos + (data[0].len() + data[1].len()) as u64;
        let Some((start, seq)) = self.put(Kind::Data, path, file_pos, data) else {
            return false;
        };
        self.ring.borrow_mut().live.push_back(Live {
            start,
            seq,
            writer: Rc::downgrade(writer),
            file_end,
        });
        true
    }

    /// Says that the writer of `path` is done with it: everything it wrote is in the file.
    /// Waits for room if the ring has none (a retire entry is small; making room takes a write
    /// of the oldest live entries' writers).
    pub async fn retire(&self, path: &[u8]) {
        while !self.removed.get() && self.put(Kind::Retire, path, 0, [&[], &[]]).is_none() {
            self.relieve();
            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
        }
    }

    /// After the shard closed its logs cleanly: removes the journal's file if none of its
    /// entries is live (every writer wrote out what it held), so that the next start has no
    /// ring to read (about 0.5 s for 256 MiB on a slow disk). Whether it did. A journal still
    /// holding live entries stays, for the next start to replay.
    pub fn remove_if_done(&self) -> Result<bool, IoFailure> {
        if self.removed.get() {
            // A shard that closes its logs twice.
            return Ok(true);
        }
        {
            let mut ring = self.ring.borrow_mut();
            ring.drop_dead();
            if !ring.live.is_empty() {
                return Ok(false);
            }
        }
        self.removed.set(true);
        std::fs::remove_file(&self.path).map_err(|e| IoFailure::new("removing", &self.path, &e))?;
        Ok(true)
    }

    /// Drops the dead entries at the front of the ring, and when it is more than half full,
    /// makes the writers of the oldest live entries write out what they hold. Call with no
    /// writer's state borrowed.
    pub fn relieve(&self) {
        let crowded = {
            let mut ring = self.ring.borrow_mut();
            ring.drop_dead();
            ring.used(self.capacity) > self.capacity / 2
        };
        if crowded {
            self.write_out(WRITE_OUT_PER_CALL, |_| true);
        }
    }

    /// For the shard's timer: writers whose entries are older than the last tick write out
    /// what they hold, so that no entry (nor the cached batch it covers) stays live for long.
    pub fn tick(&self) {
        let older_than = {
            let mut ring = self.ring.borrow_mut();
            ring.drop_dead();
            let seq = ring.seq;
            std::mem::replace(&mut ring.seq_at_tick, seq)
        };
        self.write_out(usize::MAX, |live| live.seq < older_than);
    }

    /// Makes the writers of the live entries at the front for which `pick` holds (at most
    /// `writers_max` of them) write out what they hold.
    fn write_out(&self, writers_max: usize, pick: impl Fn(&Live) -> bool) {
        let writers: Vec<Rc<SegmentWriter>> = {
            let ring = self.ring.borrow();
            let mut seen = HashSet::new();
            ring.live
                .iter()
                .take_while(|l| pick(l))
                .filter(|l| !l.is_dead())
                .filter_map(|l| l.writer.upgrade())
                .filter(|w| seen.insert(Rc::as_ptr(w)))
                .take(writers_max)
                .collect()
        };
        for writer in writers {
            writer.write_out_if_room();
        }
    }

    /// Writes an entry at the head; its start and sequence number, or `None` without room.
    fn put(&self, kind: Kind, path: &[u8], file_pos: u64, data: [&[u8]; 2]) -> Option<(u64, u64)> {
        if self.removed.get() {
            return None;
        }
        let path_len = u16::try_from(path.len()).ok()?;
        let data_bytes = data[0].len() + data[1].len();
        let data_len = u32::try_from(data_bytes).ok()?;
        let unpadded = ENTRY_HEADER_BYTES + path.len() + data_bytes;
        let len = align_entry(unpadded as u64);
        let mut ring = self.ring.borrow_mut();
        ring.drop_dead();
        let offset = ring.head % self.capacity;
        let skip = if offset + len > self.capacity {
            self.capacity - offset
        } else {
            0
        };
        if ring.used(self.capacity) + skip + len > self.capacity {
            return None;
        }
        let mut map = self.map.borrow_mut();
        let ring_bytes = &mut map[FILE_HEADER_BYTES as usize..];
        if skip > 0 {
            // The stale entries left there are older than any still in the ring: zeroed, so
            // that the ring stays one run of sequence numbers.
            ring_bytes[offset as usize..].fill(0);
            ring.head += skip;
        }
        let start = ring.head;
        let seq = ring.seq;
        let at = (start % self.capacity) as usize;
        let entry = &mut ring_bytes[at..at + len as usize];
        entry[0..4].copy_from_slice(&ENTRY_MAGIC.to_le_bytes());
        entry[8..16].copy_from_slice(&seq.to_le_bytes());
        entry[16..24].copy_from_slice(&file_pos.to_le_bytes());
        entry[24..28].copy_from_slice(&data_len.to_le_bytes());
        entry[28..30].copy_from_slice(&path_len.to_le_bytes());
        entry[30] = kind as u8;
        entry[31] = 0;
        let body = ENTRY_HEADER_BYTES + path.len();
        entry[ENTRY_HEADER_BYTES..body].copy_from_slice(path);
        let split = body + data[0].len();
        entry[body..split].copy_from_slice(data[0]);
        entry[split..unpadded].copy_from_slice(data[1]);
        entry[unpadded..].fill(0);
        let crc = entry_crc(self.nonce, &entry[8..unpadded]);
        entry[4..8].copy_from_slice(&crc.to_le_bytes());
        ring.head += len;
        ring.seq += 1;
        debug_assert!(
            ring.used(self.capacity) <= self.capacity,
            "the ring overran"
        );
        Some((start, seq))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Ring {
    fn tail(&self) -> u64 {
        self.live.front().map_or(self.head, |l| l.start)
    }

    fn used(&self, capacity: u64) -> u64 {
        let used = self.head - self.tail();
        debug_assert!(used <= capacity, "live entries fit the ring");
        used
    }

    fn drop_dead(&mut self) {
        while self.live.front().is_some_and(Live::is_dead) {
            self.live.pop_front();
        }
    }
}

fn entry_crc(nonce: u64, covered: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&nonce.to_le_bytes()), covered)
}

/// What [`replay`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Replayed {
    pub journals: usize,
    /// Entries written back into their files.
    pub entries: usize,
    pub bytes: u64,
}

/// Writes back what the journals under `data_dir` hold for their files (see the module's
/// documentation), makes it durable, and removes the journals. Run once at start, before any
/// log opens, for every journal there is (the shard count may have changed since they were
/// written).
pub fn replay(data_dir: &Path) -> Result<Replayed, IoFailure> {
    let dir = data_dir.join(DIR);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Replayed::default()),
        Err(e) => return Err(IoFailure::new("listing", &dir, &e)),
    };
    let mut total = Replayed::default();
    for entry in entries {
        let entry = entry.map_err(|e| IoFailure::new("listing", &dir, &e))?;
        let path = entry.path();
        if path.extension().is_some_and(|x| x == "journal") {
            let one = replay_file(data_dir, &path)?;
            total.journals += one.journals;
            total.entries += one.entries;
            total.bytes += one.bytes;
        }
    }
    Ok(total)
}

/// The segment file an entry names: its path is relative to the data directory.
fn entry_target(data_dir: &Path, entry_path: &[u8]) -> PathBuf {
    data_dir.join(Path::new(std::ffi::OsStr::from_bytes(entry_path)))
}

/// Replays one journal file, if it exists, and removes it.
fn replay_file(data_dir: &Path, path: &Path) -> Result<Replayed, IoFailure> {
    let bytes = match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Replayed::default()),
        Err(e) => return Err(IoFailure::new("reading the metadata of", path, &e)),
        Ok(m) if m.len() > REPLAY_BYTES_MAX => {
            return Err(IoFailure::new(
                "replaying",
                path,
                &io::Error::other(format!(
                    "a journal is at most {REPLAY_BYTES_MAX} bytes; this file is {}: move it away",
                    m.len()
                )),
            ));
        }
        Ok(_) => std::fs::read(path).map_err(|e| IoFailure::new("reading", path, &e))?,
    };
    let entries = parse(&bytes);
    let mut replayed = Replayed {
        journals: 1,
        ..Replayed::default()
    };
    let mut files: BTreeMap<&[u8], Option<File>> = BTreeMap::new();
    for entry in &entries {
        let file = files.entry(entry.path).or_insert_with(|| {
            let target = entry_target(data_dir, entry.path);
            match OpenOptions::new().write(true).open(&target) {
                Ok(f) => Some(f),
                Err(e) => {
                    tracing::warn!(file = %target.display(), error = %e,
                        "a journal entry's segment cannot be opened: its bytes are not replayed");
                    None
                }
            }
        });
        if let Some(file) = file {
            file.write_all_at(entry.data, entry.file_pos).map_err(|e| {
                IoFailure::new(
                    "replaying the journal into",
                    entry_target(data_dir, entry.path),
                    &e,
                )
            })?;
            replayed.entries += 1;
            replayed.bytes += entry.data.len() as u64;
        }
    }
    if replayed.entries > 0 {
        let dir =
            std::fs::File::open(data_dir).map_err(|e| IoFailure::new("opening", data_dir, &e))?;
        nix::unistd::syncfs(std::os::fd::AsRawFd::as_raw_fd(&dir)).map_err(|e| {
            IoFailure::new("syncing the filesystem of", data_dir, &io::Error::from(e))
        })?;
        tracing::info!(journal = %path.display(), entries = replayed.entries,
            bytes = replayed.bytes, "journal replayed");
    }
    std::fs::remove_file(path).map_err(|e| IoFailure::new("removing", path, &e))?;
    Ok(replayed)
}

/// One entry to replay.
#[derive(Debug, PartialEq, Eq)]
struct Entry<'a> {
    seq: u64,
    path: &'a [u8],
    file_pos: u64,
    data: &'a [u8],
}

/// The data entries of a journal file that are to be replayed, in the order they were written:
/// those with a valid header and CRC, and no later retire entry for their file. A file that is
/// not a journal (or was cut short before its header) has none.
fn parse(bytes: &[u8]) -> Vec<Entry<'_>> {
    let Some(header) = bytes.get(..FILE_HEADER_BYTES as usize) else {
        return Vec::new();
    };
    let crc = u32::from_le_bytes(header[24..28].try_into().unwrap_or_default());
    if &header[..8] != FILE_MAGIC
        || header[8..12] != FILE_VERSION.to_le_bytes()
        || crc != crc32c::crc32c(&header[..24])
    {
        return Vec::new();
    }
    let nonce = u64::from_le_bytes(header[16..24].try_into().unwrap_or_default());
    let ring = &bytes[FILE_HEADER_BYTES as usize..];
    let mut data = Vec::new();
    let mut retired: BTreeMap<&[u8], u64> = BTreeMap::new();
    let mut at = 0usize;
    while at + ENTRY_HEADER_BYTES <= ring.len() {
        match parse_entry(nonce, &ring[at..]) {
            Some((kind, entry, len)) => {
                match kind {
                    Kind::Data => data.push(entry),
                    Kind::Retire => {
                        let seq = retired.entry(entry.path).or_default();
                        *seq = (*seq).max(entry.seq);
                    }
                }
                at += len;
            }
            None => at += ENTRY_ALIGN as usize,
        }
    }
    data.retain(|e| retired.get(e.path).is_none_or(|&r| e.seq > r));
    data.sort_by_key(|e| e.seq);
    data
}

/// The entry at the start of `at`, and its padded length, if there is a valid one.
fn parse_entry(nonce: u64, at: &[u8]) -> Option<(Kind, Entry<'_>, usize)> {
    let u32_at = |i: usize| {
        at.get(i..i + 4)
            .and_then(|b| b.try_into().ok())
            .map(u32::from_le_bytes)
    };
    let u64_at = |i: usize| {
        at.get(i..i + 8)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_le_bytes)
    };
    if u32_at(0)? != ENTRY_MAGIC {
        return None;
    }
    let crc = u32_at(4)?;
    let seq = u64_at(8)?;
    let file_pos = u64_at(16)?;
    let data_len = usize::try_from(u32_at(24)?).ok()?;
    let path_len = usize::from(u16::from_le_bytes(at.get(28..30)?.try_into().ok()?));
    let kind = match at.get(30)? {
        1 => Kind::Data,
        2 => Kind::Retire,
        _ => return None,
    };
    let unpadded = ENTRY_HEADER_BYTES
        .checked_add(path_len)?
        .checked_add(data_len)?;
    let covered = at.get(8..unpadded)?;
    if entry_crc(nonce, covered) != crc || path_len == 0 {
        return None;
    }
    let body = ENTRY_HEADER_BYTES + path_len;
    let entry = Entry {
        seq,
        path: &at[ENTRY_HEADER_BYTES..body],
        file_pos,
        data: &at[body..unpadded],
    };
    Some((kind, entry, align_entry(unpadded as u64) as usize))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // test code: a panic is a failed test
mod tests {
    use super::*;

    /// A journal with a ring of `capacity` bytes in a fresh data directory.
    /// `open` makes no ring under [`CAPACITY_MIN_BYTES`]; a smaller one (entries wrap sooner)
    /// is the start of such a file's ring.
    fn journal(capacity: u64) -> (tempfile::TempDir, Journal) {
        let dir = tempfile::tempdir().unwrap();
        let journal = Journal::open(dir.path(), 0, CAPACITY_MIN_BYTES)
            .unwrap()
            .expect("the temporary directory's filesystem takes a journal");
        assert!(capacity % ENTRY_ALIGN == 0 && capacity <= journal.capacity);
        let journal = Journal {
            capacity,
            ..journal
        };
        (dir, journal)
    }

    /// The data entries the journal's file holds now, as (seq, path, file_pos, data).
    fn parsed(journal: &Journal) -> Vec<(u64, Vec<u8>, u64, Vec<u8>)> {
        parse(&std::fs::read(journal.path()).unwrap())
            .into_iter()
            .map(|e| (e.seq, e.path.to_vec(), e.file_pos, e.data.to_vec()))
            .collect()
    }

    fn put_data(journal: &Journal, path: &[u8], pos: u64, data: [&[u8]; 2]) -> u64 {
        journal.put(Kind::Data, path, pos, data).unwrap().1
    }

    /// A journal file's header, as [`Journal::open`] writes it.
    fn file_header(nonce: u64) -> Vec<u8> {
        let mut header = vec![0u8; FILE_HEADER_BYTES as usize];
        header[..8].copy_from_slice(FILE_MAGIC);
        header[8..12].copy_from_slice(&FILE_VERSION.to_le_bytes());
        header[16..24].copy_from_slice(&nonce.to_le_bytes());
        let crc = crc32c::crc32c(&header[..24]);
        header[24..28].copy_from_slice(&crc.to_le_bytes());
        header
    }

    /// A data entry built by hand, its CRC computed with `nonce`, padded to the alignment.
    fn entry_bytes(nonce: u64, seq: u64, path: &[u8], pos: u64, data: &[u8]) -> Vec<u8> {
        let mut entry = Vec::new();
        entry.extend_from_slice(&ENTRY_MAGIC.to_le_bytes());
        entry.extend_from_slice(&[0; 4]);
        entry.extend_from_slice(&seq.to_le_bytes());
        entry.extend_from_slice(&pos.to_le_bytes());
        entry.extend_from_slice(&(data.len() as u32).to_le_bytes());
        entry.extend_from_slice(&(path.len() as u16).to_le_bytes());
        entry.extend_from_slice(&[Kind::Data as u8, 0]);
        entry.extend_from_slice(path);
        entry.extend_from_slice(data);
        let crc = entry_crc(nonce, &entry[8..]);
        entry[4..8].copy_from_slice(&crc.to_le_bytes());
        entry.resize(align_entry(entry.len() as u64) as usize, 0);
        entry
    }

    #[test]
    fn entries_align_to_64_bytes() {
        assert_eq!(align_entry(0), 0);
        assert_eq!(align_entry(1), 64);
        assert_eq!(align_entry(64), 64);
        assert_eq!(align_entry(65), 128);
    }

    #[test]
    fn entries_put_are_parsed_back_in_order() {
        let (_dir, journal) = journal(1 << 16);
        let a = put_data(&journal, b"p-0/a.log", 0, [b"hello ", b"world"]);
        let b = put_data(&journal, b"p-1/b.log", 4096, [b"", b"only the second part"]);
        let c = put_data(&journal, b"p-0/a.log", 11, [&[7u8; 300], &[]]);
        assert!(a < b && b < c);
        assert_eq!(
            parsed(&journal),
            vec![
                (a, b"p-0/a.log".to_vec(), 0, b"hello world".to_vec()),
                (
                    b,
                    b"p-1/b.log".to_vec(),
                    4096,
                    b"only the second part".to_vec()
                ),
                (c, b"p-0/a.log".to_vec(), 11, vec![7u8; 300]),
            ]
        );
    }

    #[test]
    fn a_retire_entry_hides_only_earlier_entries_of_its_path() {
        let (_dir, journal) = journal(1 << 16);
        put_data(&journal, b"a.log", 0, [b"old a", b""]);
        let b = put_data(&journal, b"b.log", 0, [b"b", b""]);
        journal.put(Kind::Retire, b"a.log", 0, [&[], &[]]).unwrap();
        let a = put_data(&journal, b"a.log", 0, [b"new a", b""]);
        let seqs: Vec<_> = parsed(&journal)
            .into_iter()
            .map(|(seq, path, _, data)| (seq, path, data))
            .collect();
        assert_eq!(
            seqs,
            vec![
                (b, b"b.log".to_vec(), b"b".to_vec()),
                (a, b"a.log".to_vec(), b"new a".to_vec()),
            ]
        );
    }

    #[test]
    fn after_wrapping_the_ring_holds_one_run_of_the_latest_entries() {
        const CAPACITY: u64 = 4096;
        let (_dir, journal) = journal(CAPACITY);
        let mut written = std::collections::HashMap::new();
        let mut entry_max = 0;
        let mut last = 0;
        // Sizes that do not divide the ring: entries straddle the previous lap's.
        for i in 0..400u64 {
            let data = vec![i as u8; (i as usize * 37) % 500];
            let path = format!("p-{}/s.log", i % 3).into_bytes();
            entry_max = entry_max.max(align_entry(
                (ENTRY_HEADER_BYTES + path.len() + data.len()) as u64,
            ));
            last = put_data(&journal, &path, i * 1000, [&data, &[]]);
            written.insert(last, (path, i * 1000, data));
            let got = parsed(&journal);
            let seqs: Vec<u64> = got.iter().map(|e| e.0).collect();
            let first = seqs[0];
            assert_eq!(
                seqs,
                (first..=last).collect::<Vec<_>>(),
                "after entry {last}"
            );
            for (seq, path, pos, data) in got {
                assert_eq!(written[&seq], (path, pos, data), "entry {seq}");
            }
            let held: u64 = (first..=last)
                .map(|s| {
                    let (path, _, data) = &written[&s];
                    align_entry((ENTRY_HEADER_BYTES + path.len() + data.len()) as u64)
                })
                .sum();
            assert!(held <= CAPACITY);
            if i > 50 {
                // All but the entry overwritten in part and the space skipped at the end.
                assert!(
                    held + 2 * entry_max >= CAPACITY,
                    "{held} bytes held after {last}"
                );
            }
        }
        assert!(
            last > 3 * (CAPACITY / entry_max),
            "the ring wrapped several times"
        );
    }

    #[test]
    fn an_entry_larger_than_the_ring_is_refused() {
        let (_dir, journal) = journal(4096);
        put_data(&journal, b"a.log", 0, [b"kept", b""]);
        assert!(
            journal
                .put(Kind::Data, b"a.log", 4, [&[1u8; 4096], &[]])
                .is_none()
        );
        assert_eq!(parsed(&journal).len(), 1);
        assert_eq!(parsed(&journal)[0].3, b"kept");
    }

    #[test]
    fn only_entries_with_the_files_nonce_and_intact_bytes_are_parsed() {
        let nonce = 0x1234_5678_9abc_def0;
        let good = entry_bytes(nonce, 1, b"a.log", 0, b"good");
        let mut file = file_header(nonce);
        file.extend_from_slice(&good);
        file.extend_from_slice(&entry_bytes(nonce ^ 1, 2, b"a.log", 4, b"other nonce"));
        let mut flipped = entry_bytes(nonce, 3, b"a.log", 15, b"flipped");
        flipped[ENTRY_HEADER_BYTES + 5 + 2] ^= 0x10;
        file.extend_from_slice(&flipped);
        file.extend_from_slice(&[0; 4096]);
        let got = parse(&file);
        assert_eq!(got.len(), 1);
        assert_eq!(
            (got[0].seq, got[0].path, got[0].data),
            (1, &b"a.log"[..], &b"good"[..])
        );
        assert!(parse_entry(nonce ^ 1, &good).is_none());
        let (kind, entry, len) = parse_entry(nonce, &good).unwrap();
        assert_eq!((kind, entry.file_pos, len), (Kind::Data, 0, 64));
    }

    #[test]
    fn a_file_without_a_valid_header_has_no_entries() {
        let nonce = 42;
        let mut file = file_header(nonce);
        file.extend_from_slice(&entry_bytes(nonce, 1, b"a.log", 0, b"data"));
        assert_eq!(parse(&file).len(), 1);
        assert!(parse(&file[..FILE_HEADER_BYTES as usize - 1]).is_empty());
        assert!(parse(&[]).is_empty());
        for at in [0, 8, 16, 24] {
            let mut bad = file.clone();
            bad[at] ^= 1;
            assert!(parse(&bad).is_empty(), "header byte {at} flipped");
        }
    }
}
