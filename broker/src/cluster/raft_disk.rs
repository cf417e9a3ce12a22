//! This voter's share of the controller quorum on disk, in `<data>/controller/`: `raft.log`, an
//! append-only file of checksummed records (entries and hard states; a later entry at an index
//! replaces the earlier one and everything after it), and `snapshot`, the latest snapshot of the
//! applied metadata, replaced atomically. `Persist` is synced before it is reported, as Raft
//! needs. Blocking std::fs on shard 0: the controller writes rarely and little (metadata changes,
//! votes), and only those wait.
//!
//! Record: length (u32 BE) of the body, CRC-32C (u32 BE) of the body, body. Body: a kind byte,
//! then for an entry `index u64, term u64, data`; for a hard state `term u64, vote i64 (-1: none),
//! commit u64`. A record cut short at the end of the file is a write a crash interrupted, never
//! acknowledged: the file is cut there. A bad record anywhere else is damage, and refused.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use model::NodeId;
use quorum::{Durable, HardState, LogEntry, LogIndex, Persist, SnapshotImage, Term};

const ENTRY: u8 = 1;
const HARD_STATE: u8 = 2;
/// The log is rewritten (without the entries a snapshot covers) when it is this much larger
/// than what it must keep.
const REWRITE_SLACK_BYTES: u64 = 4 << 20;

#[derive(Debug, thiserror::Error)]
pub enum DiskError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is damaged at byte {offset}: {reason}")]
    Damaged {
        path: PathBuf,
        offset: u64,
        reason: String,
    },
}

#[derive(Debug)]
pub struct RaftDisk {
    dir: PathBuf,
    log: File,
    log_bytes: u64,
    /// What the log must keep: the entries after the snapshot, and the latest hard state.
    entries: Vec<LogEntry>,
    hard_state: HardState,
    snapshot: Option<SnapshotImage>,
}

impl RaftDisk {
    /// Opens (creating if new) the quorum's files under `data_dir`, and what they hold.
    pub fn open(data_dir: &Path) -> Result<(RaftDisk, Durable), DiskError> {
        let dir = data_dir.join("controller");
        std::fs::create_dir_all(&dir).map_err(io(&dir))?;
        let snapshot = read_snapshot(&dir.join("snapshot"))?;
        let log_path = dir.join("raft.log");
        let bytes = match std::fs::read(&log_path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
            Err(source) => {
                return Err(DiskError::Io {
                    path: log_path,
                    source,
                });
            }
        };
        let (mut entries, hard_state, valid_bytes) = read_log(&log_path, &bytes)?;
        let after = snapshot.as_ref().map_or(0, |s| s.index.0);
        entries.retain(|e| e.index.0 > after);
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(io(&log_path))?;
        if valid_bytes < bytes.len() as u64 {
            tracing::warn!(path = %log_path.display(), cut_bytes = bytes.len() as u64 - valid_bytes, "cutting a record a crash interrupted");
            log.set_len(valid_bytes).map_err(io(&log_path))?;
            log.sync_all().map_err(io(&log_path))?;
        }
        let durable = Durable {
            hard_state,
            snapshot: snapshot.clone(),
            entries: entries.clone(),
        };
        let disk = RaftDisk {
            dir,
            log,
            log_bytes: valid_bytes,
            entries,
            hard_state,
            snapshot,
        };
        Ok((disk, durable))
    }

    /// Carries out one `Action::Persist` (see `quorum`'s host contract), synced if asked.
    pub fn persist(&mut self, p: &Persist) -> Result<(), DiskError> {
        if let Some(snapshot) = &p.snapshot {
            self.save_snapshot(snapshot)?;
            self.entries.clear();
            if let Some(hs) = p.hard_state {
                self.hard_state = hs;
            }
            self.rewrite()?;
        }
        let mut buf = Vec::new();
        if let Some(first) = p.entries.first() {
            self.entries.retain(|e| e.index < first.index);
            for e in &p.entries {
                push_record(&mut buf, ENTRY, |b| {
                    b.extend_from_slice(&e.index.0.to_be_bytes());
                    b.extend_from_slice(&e.term.0.to_be_bytes());
                    b.extend_from_slice(&e.data);
                });
            }
            self.entries.extend(p.entries.iter().cloned());
        }
        if let Some(hs) = p.hard_state {
            self.hard_state = hs;
            push_record(&mut buf, HARD_STATE, |b| encode_hard_state(b, &hs));
        }
        if !buf.is_empty() {
            let path = self.dir.join("raft.log");
            self.log.write_all(&buf).map_err(io(&path))?;
            self.log_bytes += buf.len() as u64;
            if p.sync {
                self.log.sync_data().map_err(io(&path))?;
            }
        }
        Ok(())
    }

    /// Carries out `Action::SaveSnapshot`: the snapshot durably, then the log without what it
    /// covers once that saves enough.
    pub fn save_snapshot(&mut self, snapshot: &SnapshotImage) -> Result<(), DiskError> {
        if self
            .snapshot
            .as_ref()
            .is_some_and(|s| s.index >= snapshot.index)
        {
            return Ok(());
        }
        let path = self.dir.join("snapshot");
        let mut body = Vec::new();
        body.extend_from_slice(&snapshot.index.0.to_be_bytes());
        body.extend_from_slice(&snapshot.term.0.to_be_bytes());
        body.extend_from_slice(&(snapshot.voters.len() as u32).to_be_bytes());
        for v in &snapshot.voters {
            body.extend_from_slice(&v.0.to_be_bytes());
        }
        body.extend_from_slice(&snapshot.data);
        let mut file_bytes = crc32c::crc32c(&body).to_be_bytes().to_vec();
        file_bytes.extend_from_slice(&body);
        write_atomically(&path, &file_bytes)?;
        self.snapshot = Some(snapshot.clone());
        self.entries.retain(|e| e.index > snapshot.index);
        let kept: u64 = self.entries.iter().map(|e| 25 + e.data.len() as u64).sum();
        if self.log_bytes > kept + REWRITE_SLACK_BYTES {
            self.rewrite()?;
        }
        Ok(())
    }

    /// Replaces the log file with one holding only what it must keep.
    fn rewrite(&mut self) -> Result<(), DiskError> {
        let path = self.dir.join("raft.log");
        let mut buf = Vec::new();
        for e in &self.entries {
            push_record(&mut buf, ENTRY, |b| {
                b.extend_from_slice(&e.index.0.to_be_bytes());
                b.extend_from_slice(&e.term.0.to_be_bytes());
                b.extend_from_slice(&e.data);
            });
        }
        let hs = self.hard_state;
        push_record(&mut buf, HARD_STATE, |b| encode_hard_state(b, &hs));
        write_atomically(&path, &buf)?;
        self.log = OpenOptions::new()
            .append(true)
            .open(&path)
            .map_err(io(&path))?;
        self.log_bytes = buf.len() as u64;
        Ok(())
    }
}

fn io(path: &Path) -> impl Fn(std::io::Error) -> DiskError + '_ {
    move |source| DiskError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn push_record(buf: &mut Vec<u8>, kind: u8, body: impl FnOnce(&mut Vec<u8>)) {
    let mut b = vec![kind];
    body(&mut b);
    buf.extend_from_slice(&(b.len() as u32).to_be_bytes());
    buf.extend_from_slice(&crc32c::crc32c(&b).to_be_bytes());
    buf.extend_from_slice(&b);
}

fn encode_hard_state(b: &mut Vec<u8>, hs: &HardState) {
    b.extend_from_slice(&hs.term.0.to_be_bytes());
    b.extend_from_slice(&hs.vote.map_or(-1i64, |v| i64::from(v.0)).to_be_bytes());
    b.extend_from_slice(&hs.commit.0.to_be_bytes());
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    b.get(at..at + 8)?.try_into().ok().map(u64::from_be_bytes)
}

/// The entries (in log order, later ones replacing earlier ones at their index) and the latest
/// hard state of a log file, and how many of its bytes hold whole records.
fn read_log(path: &Path, bytes: &[u8]) -> Result<(Vec<LogEntry>, HardState, u64), DiskError> {
    let mut entries: Vec<LogEntry> = Vec::new();
    let mut hard_state = HardState::default();
    let mut at = 0usize;
    let damaged = |offset: usize, reason: &str| DiskError::Damaged {
        path: path.to_path_buf(),
        offset: offset as u64,
        reason: reason.to_owned(),
    };
    while at < bytes.len() {
        let Some(head) = bytes.get(at..at + 8) else {
            break; // a header cut short: the tail a crash interrupted
        };
        let len = u32::from_be_bytes([head[0], head[1], head[2], head[3]]) as usize;
        let crc = u32::from_be_bytes([head[4], head[5], head[6], head[7]]);
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break; // a body cut short
        };
        let last = at + 8 + len == bytes.len();
        if crc32c::crc32c(body) != crc {
            if last {
                break; // the last write, torn
            }
            return Err(damaged(at, "checksum mismatch"));
        }
        match body.first() {
            Some(&ENTRY) => {
                let (Some(index), Some(term)) = (u64_at(body, 1), u64_at(body, 9)) else {
                    return Err(damaged(at, "an entry cut short"));
                };
                entries.retain(|e| e.index.0 < index);
                if entries.last().is_some_and(|e| e.index.0 + 1 != index) {
                    return Err(damaged(at, "an entry leaves a gap"));
                }
                entries.push(LogEntry {
                    index: LogIndex(index),
                    term: Term(term),
                    data: Bytes::copy_from_slice(&body[17..]),
                });
            }
            Some(&HARD_STATE) => {
                let (Some(term), Some(vote), Some(commit)) =
                    (u64_at(body, 1), u64_at(body, 9), u64_at(body, 17))
                else {
                    return Err(damaged(at, "a hard state cut short"));
                };
                let vote = i32::try_from(vote as i64).ok().filter(|v| *v >= 0);
                hard_state = HardState {
                    term: Term(term),
                    vote: vote.map(NodeId),
                    commit: LogIndex(commit),
                };
            }
            _ => return Err(damaged(at, "unknown record kind")),
        }
        at += 8 + len;
    }
    Ok((entries, hard_state, at as u64))
}

fn read_snapshot(path: &Path) -> Result<Option<SnapshotImage>, DiskError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(DiskError::Io {
                path: path.to_path_buf(),
                source,
            });
        }
    };
    let damaged = |reason: &str| DiskError::Damaged {
        path: path.to_path_buf(),
        offset: 0,
        reason: reason.to_owned(),
    };
    let (crc, body) = bytes
        .split_first_chunk::<4>()
        .ok_or_else(|| damaged("too short"))?;
    if crc32c::crc32c(body) != u32::from_be_bytes(*crc) {
        return Err(damaged("checksum mismatch"));
    }
    let (Some(index), Some(term)) = (u64_at(body, 0), u64_at(body, 8)) else {
        return Err(damaged("too short"));
    };
    let count = body
        .get(16..20)
        .and_then(|c| c.try_into().ok())
        .map(u32::from_be_bytes)
        .ok_or_else(|| damaged("too short"))? as usize;
    let voters_end = count
        .checked_mul(4)
        .and_then(|n| n.checked_add(20))
        .filter(|end| *end <= body.len())
        .ok_or_else(|| damaged("more voters than bytes"))?;
    let voters = body[20..voters_end]
        .chunks_exact(4)
        .map(|c| NodeId(i32::from_be_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    Ok(Some(SnapshotImage {
        index: LogIndex(index),
        term: Term(term),
        voters,
        data: Bytes::copy_from_slice(&body[voters_end..]),
    }))
}

/// A new file, synced, renamed over the old one, and the directory synced.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), DiskError> {
    let tmp = path.with_extension("tmp");
    let mut file = File::create(&tmp).map_err(io(&tmp))?;
    file.write_all(bytes).map_err(io(&tmp))?;
    file.sync_all().map_err(io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(io(path))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir).and_then(|d| d.sync_all()).map_err(io(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use quorum::PersistId;

    fn entry(index: u64, term: u64, data: &'static [u8]) -> LogEntry {
        LogEntry {
            index: LogIndex(index),
            term: Term(term),
            data: Bytes::from_static(data),
        }
    }

    fn persist(entries: Vec<LogEntry>, hard_state: Option<HardState>) -> Persist {
        Persist {
            id: PersistId(0),
            snapshot: None,
            entries,
            hard_state,
            sync: true,
        }
    }

    #[test]
    fn what_is_persisted_is_read_back_with_later_entries_replacing_earlier_ones() {
        let dir = tempfile::tempdir().unwrap();
        let hs = HardState {
            term: Term(2),
            vote: Some(NodeId(0)),
            commit: LogIndex(2),
        };
        {
            let (mut disk, durable) = RaftDisk::open(dir.path()).unwrap();
            assert_eq!(durable, Durable::default());
            disk.persist(&persist(
                vec![entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 1, b"c")],
                None,
            ))
            .unwrap();
            disk.persist(&persist(vec![entry(3, 2, b"C")], Some(hs)))
                .unwrap();
        }
        let (mut disk, durable) = RaftDisk::open(dir.path()).unwrap();
        assert_eq!(durable.hard_state, hs);
        assert_eq!(
            durable.entries,
            vec![entry(1, 1, b"a"), entry(2, 1, b"b"), entry(3, 2, b"C")]
        );
        let snapshot = SnapshotImage {
            index: LogIndex(2),
            term: Term(1),
            voters: vec![NodeId(0), NodeId(1)],
            data: Bytes::from_static(b"state"),
        };
        disk.save_snapshot(&snapshot).unwrap();
        drop(disk);
        let (_, durable) = RaftDisk::open(dir.path()).unwrap();
        assert_eq!(durable.snapshot, Some(snapshot));
        assert_eq!(
            durable.entries,
            vec![entry(3, 2, b"C")],
            "the snapshot covers the rest"
        );
    }

    #[test]
    fn a_torn_tail_is_cut_and_damage_elsewhere_refused() {
        let dir = tempfile::tempdir().unwrap();
        {
            let (mut disk, _) = RaftDisk::open(dir.path()).unwrap();
            disk.persist(&persist(vec![entry(1, 1, b"a"), entry(2, 1, b"b")], None))
                .unwrap();
        }
        let path = dir.path().join("controller/raft.log");
        let whole = std::fs::read(&path).unwrap();
        std::fs::write(&path, &whole[..whole.len() - 3]).unwrap();
        let (_, durable) = RaftDisk::open(dir.path()).unwrap();
        assert_eq!(durable.entries, vec![entry(1, 1, b"a")]);
        assert_eq!(
            std::fs::metadata(&path).unwrap().len(),
            26,
            "cut to whole records"
        );

        let mut damaged = whole.clone();
        damaged[9] ^= 1; // inside the first record's body
        std::fs::write(&path, &damaged).unwrap();
        assert!(matches!(
            RaftDisk::open(dir.path()),
            Err(DiskError::Damaged { offset: 0, .. })
        ));
    }
}
