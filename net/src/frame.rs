//! Kafka framing: a big-endian `i32` size, then that many bytes.
//!
//! [`FrameReader`] cuts frames out of a read buffer and checks each announced size against a
//! hard limit before reserving any memory for it. A reader that answers to a [`MemoryBudget`] (a
//! server's) never trusts the announced size with memory: its buffer grows as the frame's bytes
//! arrive, by at most [`GROWTH`] times what has arrived, so a peer that announces 90 MiB and sends
//! 1 MiB costs a few MiB, not 90. Such a reader also reserves the whole frame in the budget before
//! reading past its first chunk, waiting its turn when the budget is spent (the shard then stops
//! reading that socket: backpressure); a frame that has its reservation can always finish, so
//! readers never wait on each other. Frames that fit in one read chunk never wait: small requests
//! (metadata, fetches, small produces) go through while large ones queue. A reader without a
//! budget (a client reading the answers it asked for) sizes its buffer from the prefix at once.
//!
//! [`FrameWriter`] writes frames given as chunks, copying the small ones into one reused buffer
//! so that a response made of many small pieces costs one socket write, and writing large chunks
//! (record batches) straight from their own memory.

use std::future::Future;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Buf, Bytes, BytesMut};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::budget::{MemoryBudget, MemoryPermit};

/// Kafka's `socket.request.max.bytes` default.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 100 * 1024 * 1024;

/// The size prefix in front of every frame.
pub const FRAME_PREFIX_BYTES: usize = 4;

/// How much a read asks the socket for at least, so that many small pipelined frames arrive in
/// one read. Also what every connection may hold without waiting for its budget.
pub const READ_CHUNK_BYTES: usize = 64 * 1024;

/// A budgeted reader's buffer grows to at most this many times the bytes of the frame that have
/// arrived (8: a 1 MiB produce frame is read in three steps and copied about half a time over).
pub const GROWTH: usize = 8;

/// The least room worth reading into behind the frames already cut off a buffer; with less, the
/// next read gets a fresh chunk (so at most this much of a chunk goes unused).
const REUSE_MIN_BYTES: usize = READ_CHUNK_BYTES / 16;

/// Chunks up to this size are copied into the write buffer; larger ones are written in place.
const COALESCE_BYTES_MAX: usize = 16 * 1024;

/// The write buffer is written out once it holds this much.
const WRITE_BUFFER_BYTES: usize = 128 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("frame of {size_bytes} bytes is over the limit of {limit_bytes} bytes")]
    TooLarge {
        size_bytes: usize,
        limit_bytes: usize,
    },
    #[error(
        "frame of {size_bytes} bytes is larger than the shard's {budget} budget of {budget_bytes} bytes"
    )]
    OverBudget {
        size_bytes: usize,
        budget: &'static str,
        budget_bytes: usize,
    },
    #[error("negative frame size {size}")]
    NegativeSize { size: i32 },
    #[error("connection closed {received_bytes} bytes into a frame of {expected_bytes} bytes")]
    Truncated {
        received_bytes: usize,
        expected_bytes: usize,
    },
    #[error(
        "frame not complete within {timeout_ms} ms: {received_bytes} of {expected_bytes} bytes arrived"
    )]
    ReadTimeout {
        received_bytes: usize,
        expected_bytes: usize,
        timeout_ms: u128,
    },
    #[error("idle for {idle_ms} ms")]
    Idle { idle_ms: u128 },
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}

/// How long a reader waits for bytes. `None` waits for ever.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReadTimeouts {
    /// For the first byte of the next frame (Kafka's `connections.max.idle.ms`).
    pub idle: Option<Duration>,
    /// For the rest of a frame, from its first byte (waiting for the budget included).
    pub frame: Option<Duration>,
}

/// Reads frames from a byte stream.
#[derive(Debug)]
pub struct FrameReader<R> {
    reader: R,
    /// Bytes read and not yet handed out; the frame being read starts at its front.
    buf: BytesMut,
    /// How much of `buf` holds data; the rest of `buf` is zeros, ready to read into. Kept apart
    /// from `buf.len()` so that a read cancelled while waiting (a timeout, a shutdown) leaves
    /// no zero padding behind as if it were data.
    filled_bytes: usize,
    frame_bytes_max: usize,
    /// The budget `buf` is charged to, and what it holds of it: at least `buf.len()`, and the
    /// whole frame being read once it is larger than a read chunk.
    memory: Option<(Rc<MemoryBudget>, MemoryPermit)>,
    timeouts: ReadTimeouts,
    /// When the first bytes of the frame being read arrived.
    frame_started: Option<Instant>,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R, frame_bytes_max: usize) -> Self {
        Self {
            reader,
            buf: BytesMut::new(),
            filled_bytes: 0,
            frame_bytes_max,
            memory: None,
            timeouts: ReadTimeouts::default(),
            frame_started: None,
        }
    }

    /// Charges what this reader holds to `budget` (see the module's notes).
    pub fn with_budget(mut self, budget: Rc<MemoryBudget>) -> Self {
        let held = budget.empty();
        self.memory = Some((budget, held));
        self
    }

    /// Needs glommio's executor (its timers) when any timeout is set.
    pub fn with_timeouts(mut self, timeouts: ReadTimeouts) -> Self {
        self.timeouts = timeouts;
        self
    }

    /// The next frame's payload (without its size prefix), or `None` at a clean end of stream.
    ///
    /// The payload is split off the shared read buffer, not copied, so parts of it (record
    /// batches) can be kept and mutated in place.
    pub async fn next_frame(&mut self) -> Result<Option<BytesMut>, FrameError> {
        Ok(self.next_frame_held().await?.map(|(frame, _)| frame))
    }

    /// [`Self::next_frame`], with the part of the budget the frame holds (its size, prefix
    /// included): keep it as long as the frame's bytes are in use.
    pub async fn next_frame_held(
        &mut self,
    ) -> Result<Option<(BytesMut, MemoryPermit)>, FrameError> {
        loop {
            let wanted_bytes = match self.complete_frame_len()? {
                FrameLen::Complete(payload_bytes) => return Ok(Some(self.take(payload_bytes))),
                FrameLen::Needs(total_bytes) => total_bytes,
            };
            let start = self.filled_bytes;
            // Frames cut off the front keep the buffer's allocation alive (their record batches
            // are cached and written from it), and what is left behind them is read into while
            // it can hold the whole frame and a worthwhile read. A client that sends one small
            // request per write (librdkafka: one partition per produce) otherwise cost a fresh,
            // zeroed read chunk per request: one record to each of 10,000 partitions grew the
            // broker by 460 MB and spent a third of its time zeroing pages.
            let spare_bytes = self.buf.capacity();
            let read_to = if spare_bytes >= wanted_bytes && spare_bytes - start >= REUSE_MIN_BYTES {
                spare_bytes
            } else {
                (start + READ_CHUNK_BYTES).max(match self.memory {
                    Some(_) => wanted_bytes.min(start.saturating_mul(GROWTH)),
                    // `wanted_bytes` is at most the limit plus the prefix: the size was checked.
                    None => wanted_bytes,
                })
            };
            let deadline = self.deadline();
            if wanted_bytes > READ_CHUNK_BYTES {
                // The whole frame, so that it can finish whatever other readers do.
                self.claim(
                    read_to.max(wanted_bytes),
                    true,
                    deadline,
                    start,
                    wanted_bytes,
                )
                .await?;
            } else {
                self.claim(read_to, false, deadline, start, wanted_bytes)
                    .await?;
            }
            self.grow_to(read_to);
            let read = self.reader.read(&mut self.buf[start..]);
            let read_bytes = match (start, deadline, self.timeouts.idle) {
                (0, _, Some(idle)) => {
                    within(Some(idle), read).await.ok_or(FrameError::Idle {
                        idle_ms: idle.as_millis(),
                    })??
                }
                (0, _, None) => read.await?,
                (_, deadline, _) => within(remaining(deadline), read)
                    .await
                    .ok_or_else(|| self.timed_out(start, wanted_bytes))??,
            };
            self.filled_bytes = start + read_bytes;
            if read_bytes == 0 {
                return if start == 0 {
                    Ok(None)
                } else {
                    Err(FrameError::Truncated {
                        received_bytes: start,
                        expected_bytes: wanted_bytes,
                    })
                };
            }
            if start == 0 {
                self.frame_started = Some(Instant::now());
            }
        }
    }

    /// Cuts the complete frame of `payload_bytes` off the front of the buffer.
    fn take(&mut self, payload_bytes: usize) -> (BytesMut, MemoryPermit) {
        let frame_bytes = FRAME_PREFIX_BYTES + payload_bytes;
        self.buf.advance(FRAME_PREFIX_BYTES);
        self.filled_bytes -= frame_bytes;
        let frame = self.buf.split_to(payload_bytes);
        if frame_bytes > READ_CHUNK_BYTES && self.memory.is_some() {
            // What was read past the frame would otherwise share (and keep alive) the frame's
            // large allocation after the frame is done with; it is at most a read chunk.
            self.buf = BytesMut::from(&self.buf[..self.filled_bytes]);
        }
        let permit = match &mut self.memory {
            Some((_, held)) => {
                let permit = held.split(frame_bytes);
                held.shrink_to(self.buf.len());
                permit
            }
            None => MemoryPermit::default(),
        };
        self.frame_started = (self.filled_bytes > 0).then(Instant::now);
        (frame, permit)
    }

    /// Makes the reader hold `bytes` of its budget: waiting its turn if `wait`, within the
    /// frame's deadline; at once otherwise.
    async fn claim(
        &mut self,
        bytes: usize,
        wait: bool,
        deadline: Option<Instant>,
        received_bytes: usize,
        expected_bytes: usize,
    ) -> Result<(), FrameError> {
        let Some((budget, held)) = &mut self.memory else {
            return Ok(());
        };
        let Some(more) = bytes.checked_sub(held.bytes()).filter(|&m| m > 0) else {
            return Ok(());
        };
        let permit = if wait {
            let acquire = budget.acquire(more);
            match within(remaining(deadline), acquire).await {
                Some(permit) => permit,
                None => return Err(self.timed_out(received_bytes, expected_bytes)),
            }
        } else {
            budget.force(more)
        };
        if let Some((_, held)) = &mut self.memory {
            held.merge(permit);
        }
        Ok(())
    }

    /// Grows the buffer to `read_to` bytes (zeros past the data), allocating exactly that much:
    /// the budget is charged for what the buffer holds, and `BytesMut` would round up.
    fn grow_to(&mut self, read_to: usize) {
        // Past `filled_bytes` the buffer holds zeros from earlier reads: grow it only when it
        // must, so that no byte is zeroed twice (zeroing a large frame's space before every
        // read once cost a third of the broker's time).
        if self.buf.len() >= read_to {
            return;
        }
        if self.buf.capacity() < read_to {
            let mut grown = BytesMut::with_capacity(read_to);
            grown.extend_from_slice(&self.buf[..self.filled_bytes]);
            self.buf = grown;
        } else {
            self.buf.truncate(self.filled_bytes);
        }
        self.buf.resize(read_to, 0);
    }

    /// When the frame being read must be complete.
    fn deadline(&self) -> Option<Instant> {
        Some(self.frame_started? + self.timeouts.frame?)
    }

    fn timed_out(&self, received_bytes: usize, expected_bytes: usize) -> FrameError {
        FrameError::ReadTimeout {
            received_bytes,
            expected_bytes,
            timeout_ms: self.timeouts.frame.map_or(0, |t| t.as_millis()),
        }
    }

    /// Whether the buffer holds a whole frame, and if not how many bytes it needs in all.
    fn complete_frame_len(&self) -> Result<FrameLen, FrameError> {
        let Some(prefix) = self.buf[..self.filled_bytes].first_chunk::<FRAME_PREFIX_BYTES>() else {
            return Ok(FrameLen::Needs(FRAME_PREFIX_BYTES));
        };
        let size = i32::from_be_bytes(*prefix);
        let payload_bytes = usize::try_from(size).map_err(|_| FrameError::NegativeSize { size })?;
        if payload_bytes > self.frame_bytes_max {
            return Err(FrameError::TooLarge {
                size_bytes: payload_bytes,
                limit_bytes: self.frame_bytes_max,
            });
        }
        if let Some((budget, _)) = &self.memory
            && FRAME_PREFIX_BYTES + payload_bytes > budget.capacity_bytes()
        {
            return Err(FrameError::OverBudget {
                size_bytes: payload_bytes,
                budget: budget.name(),
                budget_bytes: budget.capacity_bytes(),
            });
        }
        if self.filled_bytes >= FRAME_PREFIX_BYTES + payload_bytes {
            Ok(FrameLen::Complete(payload_bytes))
        } else {
            Ok(FrameLen::Needs(FRAME_PREFIX_BYTES + payload_bytes))
        }
    }

    pub fn get_ref(&self) -> &R {
        &self.reader
    }
}

/// Time left until `deadline`; `None` if there is none.
fn remaining(deadline: Option<Instant>) -> Option<Duration> {
    deadline.map(|d| d.saturating_duration_since(Instant::now()))
}

/// `future`'s output, or `None` if `limit` passes first.
async fn within<T>(limit: Option<Duration>, future: impl Future<Output = T>) -> Option<T> {
    match limit {
        None => Some(future.await),
        Some(limit) => glommio::timer::timeout(limit, async { Ok(future.await) })
            .await
            .ok(),
    }
}

enum FrameLen {
    Complete(usize),
    Needs(usize),
}

/// Writes frames given as chunks (size prefix included) to a byte stream.
#[derive(Debug)]
pub struct FrameWriter<W> {
    writer: W,
    pending: BytesMut,
}

impl<W: AsyncWrite + Unpin> FrameWriter<W> {
    pub fn new(writer: W) -> Self {
        Self {
            writer,
            pending: BytesMut::with_capacity(WRITE_BUFFER_BYTES),
        }
    }

    /// Queues one frame's chunks. Small chunks wait in the buffer until [`Self::flush`] or until
    /// the buffer fills; large chunks are written at once, after what is buffered.
    pub async fn write_chunks(&mut self, chunks: &[Bytes]) -> std::io::Result<()> {
        for chunk in chunks {
            if chunk.len() <= COALESCE_BYTES_MAX {
                self.pending.extend_from_slice(chunk);
                if self.pending.len() >= WRITE_BUFFER_BYTES {
                    self.write_pending().await?;
                }
            } else {
                self.write_pending().await?;
                self.writer.write_all(chunk).await?;
            }
        }
        Ok(())
    }

    /// Writes out everything queued.
    pub async fn flush(&mut self) -> std::io::Result<()> {
        self.write_pending().await?;
        self.writer.flush().await
    }

    async fn write_pending(&mut self) -> std::io::Result<()> {
        if !self.pending.is_empty() {
            self.writer.write_all(&self.pending).await?;
            self.pending.clear();
        }
        Ok(())
    }

    pub fn get_ref(&self) -> &W {
        &self.writer
    }
}

/// Builds one outgoing frame as chunks: encoded fields go into a growing buffer, shared chunks
/// (record batches) are put between them without copying, and the size prefix is filled in at
/// the end.
#[derive(Debug)]
pub struct FrameBuilder {
    /// Finished parts, in order; the first one starts with the size prefix.
    parts: Vec<Part>,
    /// The part being written.
    buf: BytesMut,
    /// Bytes in `parts`, prefix included.
    parts_bytes: usize,
}

#[derive(Debug)]
enum Part {
    Own(BytesMut),
    Shared(Bytes),
}

impl FrameBuilder {
    /// A builder whose first buffer has room for `capacity_bytes` of fields after the prefix.
    pub fn with_capacity(capacity_bytes: usize) -> Self {
        let mut buf = BytesMut::with_capacity(FRAME_PREFIX_BYTES + capacity_bytes);
        buf.extend_from_slice(&[0; FRAME_PREFIX_BYTES]);
        Self {
            parts: Vec::new(),
            buf,
            parts_bytes: 0,
        }
    }

    /// Where the next fields are written.
    pub fn buf(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Appends a chunk without copying it.
    pub fn put_shared(&mut self, chunk: Bytes) {
        if chunk.is_empty() {
            return;
        }
        if !self.buf.is_empty() {
            let written = self.buf.split();
            self.parts_bytes += written.len();
            self.parts.push(Part::Own(written));
        }
        self.parts_bytes += chunk.len();
        self.parts.push(Part::Shared(chunk));
    }

    /// The frame's chunks, size prefix first.
    pub fn finish(mut self) -> Result<Vec<Bytes>, FrameError> {
        let total_bytes = self.parts_bytes + self.buf.len();
        let prefix = frame_prefix(total_bytes - FRAME_PREFIX_BYTES)?;
        if !self.buf.is_empty() {
            self.parts.push(Part::Own(self.buf));
        }
        let mut chunks = Vec::with_capacity(self.parts.len());
        for (i, part) in self.parts.into_iter().enumerate() {
            chunks.push(match part {
                Part::Own(mut own) => {
                    if i == 0 {
                        own[..FRAME_PREFIX_BYTES].copy_from_slice(&prefix);
                    }
                    own.freeze()
                }
                Part::Shared(shared) => shared,
            });
        }
        Ok(chunks)
    }
}

/// Puts a size prefix in front of an encoded payload.
pub fn frame_prefix(payload_bytes: usize) -> Result<[u8; FRAME_PREFIX_BYTES], FrameError> {
    i32::try_from(payload_bytes)
        .map(i32::to_be_bytes)
        .map_err(|_| FrameError::TooLarge {
            size_bytes: payload_bytes,
            limit_bytes: i32::MAX as usize,
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_lite::future::{self, block_on};
    use futures_lite::io::Cursor;
    use proptest::prelude::*;

    fn framed(payloads: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        for payload in payloads {
            out.extend_from_slice(&(payload.len() as i32).to_be_bytes());
            out.extend_from_slice(payload);
        }
        out
    }

    /// A reader that returns at most `step` bytes per read, to cut frames at every boundary.
    struct Trickle {
        data: Vec<u8>,
        pos: usize,
        step: usize,
    }

    impl AsyncRead for Trickle {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut [u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = self.step.min(buf.len()).min(self.data.len() - self.pos);
            let pos = self.pos;
            buf[..n].copy_from_slice(&self.data[pos..pos + n]);
            self.pos += n;
            std::task::Poll::Ready(Ok(n))
        }
    }

    proptest! {
        #[test]
        fn frames_come_out_as_they_went_in(
            payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..300), 0..20),
            step in 1usize..700,
        ) {
            let data = framed(&payloads);
            let mut reader = FrameReader::new(Trickle { data, pos: 0, step }, 1000);
            block_on(async {
                for payload in &payloads {
                    let frame = reader.next_frame().await.unwrap().unwrap();
                    assert_eq!(&frame[..], &payload[..]);
                }
                assert!(reader.next_frame().await.unwrap().is_none());
            });
        }
    }

    #[test]
    fn an_oversized_frame_is_refused_before_its_payload_is_read() {
        let mut data = (1_000_000i32).to_be_bytes().to_vec();
        data.extend_from_slice(&[0; 10]);
        let mut reader = FrameReader::new(Cursor::new(data), 1000);
        let error = block_on(reader.next_frame()).unwrap_err();
        assert!(matches!(
            error,
            FrameError::TooLarge {
                size_bytes: 1_000_000,
                limit_bytes: 1000
            }
        ));
        // Only the first read chunk was ever reserved, not the announced megabyte.
        assert!(reader.buf.capacity() < 1_000_000);
    }

    #[test]
    fn a_negative_size_is_refused() {
        let mut reader = FrameReader::new(Cursor::new((-5i32).to_be_bytes().to_vec()), 1000);
        let error = block_on(reader.next_frame()).unwrap_err();
        assert!(matches!(error, FrameError::NegativeSize { size: -5 }));
    }

    #[test]
    fn end_of_stream_inside_a_frame_is_an_error() {
        let mut data = framed(&[vec![1, 2, 3]]);
        data.truncate(5);
        let mut reader = FrameReader::new(Cursor::new(data), 1000);
        let error = block_on(reader.next_frame()).unwrap_err();
        assert!(matches!(
            error,
            FrameError::Truncated {
                received_bytes: 5,
                expected_bytes: 7
            }
        ));
        let mut half_prefix = FrameReader::new(Cursor::new(vec![0, 0]), 1000);
        assert!(matches!(
            block_on(half_prefix.next_frame()).unwrap_err(),
            FrameError::Truncated { .. }
        ));
    }

    /// Serves `data`, then waits for ever (a peer that stopped sending).
    struct ThenStall(Cursor<Vec<u8>>);

    impl AsyncRead for ThenStall {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            cx: &mut std::task::Context<'_>,
            buf: &mut [u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            match std::pin::Pin::new(&mut self.0).poll_read(cx, buf) {
                std::task::Poll::Ready(Ok(0)) => std::task::Poll::Pending,
                other => other,
            }
        }
    }

    fn prefix(payload_bytes: usize) -> Vec<u8> {
        (payload_bytes as i32).to_be_bytes().to_vec()
    }

    proptest! {
        #[test]
        fn budgeted_frames_come_out_whole_and_hold_their_size(
            sizes in proptest::collection::vec(0usize..200_000, 0..8),
            step in 1usize..300_000,
        ) {
            let payloads: Vec<Vec<u8>> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| (0..n).map(|j| (i * 7 + j) as u8).collect())
                .collect();
            let budget = MemoryBudget::new("request", 1 << 20);
            let mut reader = FrameReader::new(Trickle { data: framed(&payloads), pos: 0, step }, 1 << 20)
                .with_budget(budget.clone());
            block_on(async {
                for payload in &payloads {
                    let (frame, permit) = reader.next_frame_held().await.unwrap().unwrap();
                    assert_eq!(&frame[..], &payload[..]);
                    assert_eq!(permit.bytes(), FRAME_PREFIX_BYTES + payload.len());
                }
                assert!(reader.next_frame().await.unwrap().is_none());
            });
            drop(reader);
            assert_eq!(budget.used_bytes(), 0, "every byte given back");
        }
    }

    #[test]
    fn a_budgeted_buffer_grows_with_what_arrives_not_with_what_is_announced() {
        let announced = 90 << 20;
        let sent = 1 << 20;
        let mut data = prefix(announced);
        data.extend(vec![7u8; sent]);
        let budget = MemoryBudget::new("request", 128 << 20);
        let mut reader = FrameReader::new(Cursor::new(data), 100 << 20).with_budget(budget.clone());
        let error = block_on(reader.next_frame()).unwrap_err();
        assert!(matches!(error, FrameError::Truncated { .. }), "{error}");
        // Reserved whole in the budget (so that it could finish), but only grown as it arrived.
        assert_eq!(budget.used_bytes(), FRAME_PREFIX_BYTES + announced);
        let capacity = reader.buf.capacity();
        assert!(capacity >= sent, "{capacity}");
        assert!(capacity <= GROWTH * (sent + READ_CHUNK_BYTES), "{capacity}");
        drop(reader);
        assert_eq!(budget.used_bytes(), 0);
        // Without a budget (a client reading answers it asked for) the prefix is trusted.
        let mut data = prefix(announced);
        data.extend(vec![7u8; sent]);
        let mut client = FrameReader::new(Cursor::new(data), 100 << 20);
        assert!(block_on(client.next_frame()).is_err());
        assert!(client.buf.capacity() >= announced);
    }

    #[test]
    fn small_frames_read_one_at_a_time_share_one_allocation() {
        let payloads = vec![vec![9u8; 200]; 100];
        let step = FRAME_PREFIX_BYTES + 200;
        let budget = MemoryBudget::new("request", 1 << 20);
        let trickle = Trickle {
            data: framed(&payloads),
            pos: 0,
            step,
        };
        let mut reader = FrameReader::new(trickle, 1 << 20).with_budget(budget.clone());
        let frames: Vec<BytesMut> = block_on(async {
            let mut frames = Vec::new();
            while let Some(frame) = reader.next_frame().await.unwrap() {
                frames.push(frame);
            }
            frames
        });
        assert_eq!(frames.len(), payloads.len());
        // 100 frames of 204 bytes fit in one read chunk: each follows the one before in memory.
        for pair in frames.windows(2) {
            let after = pair[0].as_ptr() as usize + pair[0].len() + FRAME_PREFIX_BYTES;
            assert_eq!(pair[1].as_ptr() as usize, after);
        }
        drop(reader);
        drop(frames);
        assert_eq!(budget.used_bytes(), 0, "every byte given back");
    }

    #[test]
    fn a_frame_larger_than_the_budget_is_refused() {
        let mut data = prefix(5000);
        data.extend(vec![0; 5000]);
        let budget = MemoryBudget::new("request", 4096);
        let mut reader = FrameReader::new(Cursor::new(data), 1 << 20).with_budget(budget);
        let error = block_on(reader.next_frame()).unwrap_err();
        assert!(matches!(
            error,
            FrameError::OverBudget {
                size_bytes: 5000,
                budget_bytes: 4096,
                ..
            }
        ));
    }

    #[test]
    fn large_frames_wait_for_the_budget_and_small_ones_do_not() {
        let budget = MemoryBudget::new("request", 1 << 20);
        let spent = budget.try_acquire(1 << 20).unwrap();
        let small = framed(&[vec![1; 100], vec![2; 200]]);
        let mut reader = FrameReader::new(Cursor::new(small), 1 << 20).with_budget(budget.clone());
        block_on(async {
            assert_eq!(reader.next_frame().await.unwrap().unwrap().len(), 100);
            assert_eq!(reader.next_frame().await.unwrap().unwrap().len(), 200);
        });
        let large = framed(&[vec![3; 300_000]]);
        let mut reader = FrameReader::new(Cursor::new(large), 1 << 20).with_budget(budget.clone());
        block_on(async {
            let mut next = Box::pin(reader.next_frame());
            assert!(
                future::poll_once(&mut next).await.is_none(),
                "waits for the budget"
            );
            assert_eq!(budget.waiting_count(), 1);
            drop(spent);
            let frame = next.await.unwrap().unwrap();
            assert_eq!(frame.len(), 300_000);
        });
    }

    #[test]
    fn a_stalled_frame_times_out_and_an_idle_connection_is_closed() {
        glommio::LocalExecutorBuilder::default()
            .spawn(|| async {
                let timeouts = ReadTimeouts {
                    idle: Some(Duration::from_millis(50)),
                    frame: Some(Duration::from_millis(100)),
                };
                let mut data = prefix(1000);
                data.extend(vec![0; 10]);
                let started = Instant::now();
                let mut reader =
                    FrameReader::new(ThenStall(Cursor::new(data)), 1 << 20).with_timeouts(timeouts);
                let error = reader.next_frame().await.unwrap_err();
                assert!(
                    matches!(
                        error,
                        FrameError::ReadTimeout {
                            received_bytes: 14,
                            expected_bytes: 1004,
                            timeout_ms: 100
                        }
                    ),
                    "{error}"
                );
                assert!(started.elapsed() >= Duration::from_millis(100));
                let mut idle = FrameReader::new(ThenStall(Cursor::new(framed(&[vec![1]]))), 100)
                    .with_timeouts(timeouts);
                assert_eq!(idle.next_frame().await.unwrap().unwrap().len(), 1);
                let error = idle.next_frame().await.unwrap_err();
                assert!(matches!(error, FrameError::Idle { idle_ms: 50 }), "{error}");
            })
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn writer_keeps_chunk_order_across_small_and_large_chunks() {
        let small = Bytes::from_static(b"head");
        let large = Bytes::from(vec![9u8; COALESCE_BYTES_MAX + 1]);
        let tail = Bytes::from_static(b"tail");
        let mut writer = FrameWriter::new(Cursor::new(Vec::new()));
        block_on(async {
            writer
                .write_chunks(&[small.clone(), large.clone(), tail.clone()])
                .await
                .unwrap();
            writer.flush().await.unwrap();
        });
        let written = writer.get_ref().get_ref();
        let expected: Vec<u8> = [&small[..], &large[..], &tail[..]].concat();
        assert_eq!(written, &expected);
    }

    #[test]
    fn builder_puts_shared_chunks_in_place_and_sizes_the_frame() {
        let batch = Bytes::from(vec![5u8; 100]);
        let mut builder = FrameBuilder::with_capacity(8);
        builder.buf().extend_from_slice(b"ab");
        builder.put_shared(batch.clone());
        builder.buf().extend_from_slice(b"c");
        let chunks = builder.finish().unwrap();
        assert_eq!(chunks.len(), 3);
        assert_eq!(&chunks[0][..], &[0, 0, 0, 103, b'a', b'b']);
        // The batch is the caller's memory, not a copy.
        assert_eq!(chunks[1].as_ptr(), batch.as_ptr());
        assert_eq!(&chunks[2][..], b"c");
    }

    #[test]
    fn prefix_is_big_endian() {
        assert_eq!(frame_prefix(258).unwrap(), [0, 0, 1, 2]);
        assert!(frame_prefix(usize::MAX).is_err());
    }
}
