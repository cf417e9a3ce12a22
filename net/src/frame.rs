//! Kafka framing: a big-endian `i32` size, then that many bytes.
//!
//! [`FrameReader`] cuts frames out of one reused read buffer and checks each announced size
//! against a hard limit before reserving any memory for it. [`FrameWriter`] writes frames given
//! as chunks, copying the small ones into one reused buffer so that a response made of many small
//! pieces costs one socket write, and writing large chunks (record batches) straight from their
//! own memory.

use bytes::{Buf, Bytes, BytesMut};
use futures_lite::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Kafka's `socket.request.max.bytes` default.
pub const FRAME_BYTES_MAX_DEFAULT: usize = 100 * 1024 * 1024;

/// The size prefix in front of every frame.
pub const FRAME_PREFIX_BYTES: usize = 4;

/// How much a read asks the socket for at least, so that many small pipelined frames arrive in
/// one read.
const READ_CHUNK_BYTES: usize = 64 * 1024;

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
    #[error("negative frame size {size}")]
    NegativeSize { size: i32 },
    #[error("connection closed {received_bytes} bytes into a frame of {expected_bytes} bytes")]
    Truncated {
        received_bytes: usize,
        expected_bytes: usize,
    },
    #[error("socket: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads frames from a byte stream.
#[derive(Debug)]
pub struct FrameReader<R> {
    reader: R,
    /// Bytes read and not yet handed out; its capacity is reused from frame to frame.
    buf: BytesMut,
    /// How much of `buf` holds data; the rest of `buf` is zeros, ready to read into. Kept apart
    /// from `buf.len()` so that a read cancelled while waiting (a timeout, a shutdown) leaves
    /// no zero padding behind as if it were data.
    filled_bytes: usize,
    frame_bytes_max: usize,
}

impl<R: AsyncRead + Unpin> FrameReader<R> {
    pub fn new(reader: R, frame_bytes_max: usize) -> Self {
        Self {
            reader,
            buf: BytesMut::new(),
            filled_bytes: 0,
            frame_bytes_max,
        }
    }

    /// The next frame's payload (without its size prefix), or `None` at a clean end of stream.
    ///
    /// The payload is split off the shared read buffer, not copied, so parts of it (record
    /// batches) can be kept and mutated in place.
    pub async fn next_frame(&mut self) -> Result<Option<BytesMut>, FrameError> {
        loop {
            let wanted_bytes = match self.complete_frame_len()? {
                FrameLen::Complete(payload_bytes) => {
                    self.buf.advance(FRAME_PREFIX_BYTES);
                    self.filled_bytes -= FRAME_PREFIX_BYTES + payload_bytes;
                    return Ok(Some(self.buf.split_to(payload_bytes)));
                }
                FrameLen::Needs(total_bytes) => total_bytes,
            };
            let start = self.filled_bytes;
            // `wanted_bytes` is at most the limit plus the prefix: the size was checked above.
            let read_to = wanted_bytes.max(start + READ_CHUNK_BYTES);
            // Past `filled_bytes` the buffer holds zeros from earlier reads: grow it only when it
            // must, so that no byte is zeroed twice (zeroing a large frame's space before every
            // read once cost a third of the broker's time).
            if self.buf.len() < read_to {
                // Growing may move the buffer: drop the zero padding first so only data moves.
                self.buf.truncate(self.filled_bytes);
                self.buf.resize(read_to, 0);
            }
            let read_bytes = self.reader.read(&mut self.buf[start..]).await?;
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
    use futures_lite::future::block_on;
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
