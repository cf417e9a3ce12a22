//! The console producer's input: stdin split into lines, read a chunk at a time so a blocking
//! read can run off the executor, and each line split into key and value.
//!
//! A line is what ends in `\n` (the `\n` not included; a `\r` before it is kept, as it is part
//! of the value), or the rest of the input at its end. Lines longer than the limit are reported
//! by number and dropped without being held in memory.

use std::io::{self, BufRead, BufReader, Read};

/// One line of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line {
    /// 1-based.
    pub number: u64,
    pub bytes: Vec<u8>,
}

/// What one read produced.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Chunk {
    pub lines: Vec<Line>,
    /// Numbers of lines dropped for being longer than the limit.
    pub too_long: Vec<u64>,
    /// The input ended; no more chunks will come.
    pub eof: bool,
}

impl Chunk {
    fn is_empty(&self) -> bool {
        self.lines.is_empty() && self.too_long.is_empty()
    }
}

#[derive(Debug)]
pub struct LineReader<R> {
    inner: BufReader<R>,
    line_bytes_max: usize,
    /// The line being read, when a read ended inside it.
    partial: Vec<u8>,
    partial_too_long: bool,
    lines_seen: u64,
}

impl<R: Read> LineReader<R> {
    pub fn new(input: R, line_bytes_max: usize) -> Self {
        Self {
            inner: BufReader::with_capacity(64 * 1024, input),
            line_bytes_max,
            partial: Vec::new(),
            partial_too_long: false,
            lines_seen: 0,
        }
    }

    /// Blocks until at least one line is complete (or the input ends), then returns every line
    /// that is ready without blocking again, up to about `bytes_max` bytes of them.
    pub fn read_chunk(&mut self, bytes_max: usize) -> io::Result<Chunk> {
        let mut chunk = Chunk::default();
        let mut chunk_bytes = 0;
        loop {
            let nothing_buffered = self.inner.buffer().is_empty();
            if !chunk.is_empty() && (nothing_buffered || chunk_bytes >= bytes_max) {
                return Ok(chunk);
            }
            let available = match self.inner.fill_buf() {
                Ok(available) => available,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                if !self.partial.is_empty() || self.partial_too_long {
                    self.finish_line(&mut chunk);
                }
                chunk.eof = true;
                return Ok(chunk);
            }
            let newline = available.iter().position(|b| *b == b'\n');
            let content = &available[..newline.unwrap_or(available.len())];
            if self.partial.len() + content.len() > self.line_bytes_max {
                self.partial_too_long = true;
                self.partial = Vec::new();
            } else if !self.partial_too_long {
                self.partial.extend_from_slice(content);
            }
            let consumed = newline.map_or(available.len(), |at| at + 1);
            self.inner.consume(consumed);
            if newline.is_some() {
                chunk_bytes += self.partial.len();
                self.finish_line(&mut chunk);
            }
        }
    }

    fn finish_line(&mut self, chunk: &mut Chunk) {
        self.lines_seen += 1;
        if self.partial_too_long {
            chunk.too_long.push(self.lines_seen);
        } else {
            chunk.lines.push(Line {
                number: self.lines_seen,
                bytes: std::mem::take(&mut self.partial),
            });
        }
        self.partial_too_long = false;
        self.partial.clear();
    }
}

/// A line's key and value: split at the first `separator` when one is given and present;
/// otherwise the whole line is the value and the record has no key.
pub fn split_line<'a>(line: &'a [u8], separator: Option<&[u8]>) -> (Option<&'a [u8]>, &'a [u8]) {
    let Some(separator) = separator.filter(|s| !s.is_empty()) else {
        return (None, line);
    };
    match line
        .windows(separator.len())
        .position(|window| window == separator)
    {
        Some(at) => (Some(&line[..at]), &line[at + separator.len()..]),
        None => (None, line),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Reads everything, in chunks of at most `bytes_max`, through a reader that hands out at
    /// most `read_bytes` per read (as a pipe may).
    fn read_all(
        input: &[u8],
        line_bytes_max: usize,
        bytes_max: usize,
        read_bytes: usize,
    ) -> (Vec<Line>, Vec<u64>) {
        struct Trickle<'a>(&'a [u8], usize);
        impl Read for Trickle<'_> {
            fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                let n = self.0.len().min(buf.len()).min(self.1);
                buf[..n].copy_from_slice(&self.0[..n]);
                self.0 = &self.0[n..];
                Ok(n)
            }
        }
        let mut reader = LineReader::new(Trickle(input, read_bytes), line_bytes_max);
        let (mut lines, mut too_long) = (Vec::new(), Vec::new());
        loop {
            let chunk = reader.read_chunk(bytes_max).unwrap();
            assert!(
                chunk.eof || !chunk.is_empty(),
                "a chunk before the end has something"
            );
            lines.extend(chunk.lines);
            too_long.extend(chunk.too_long);
            if chunk.eof {
                return (lines, too_long);
            }
        }
    }

    fn bytes(lines: &[Line]) -> Vec<&[u8]> {
        lines.iter().map(|l| l.bytes.as_slice()).collect()
    }

    #[test]
    fn lines_end_at_newlines_and_at_the_end_of_input() {
        let (lines, _) = read_all(b"a\n\nbc\r\nlast", 100, 1000, 3);
        assert_eq!(bytes(&lines), [&b"a"[..], b"", b"bc\r", b"last"]);
        assert_eq!(
            lines.iter().map(|l| l.number).collect::<Vec<_>>(),
            [1, 2, 3, 4]
        );
        let (lines, _) = read_all(b"one\ntwo\n", 100, 1000, 100);
        assert_eq!(
            bytes(&lines),
            [&b"one"[..], b"two"],
            "no empty line after the last newline"
        );
        assert!(read_all(b"", 100, 1000, 1).0.is_empty());
    }

    #[test]
    fn overlong_lines_are_dropped_by_number() {
        let (lines, too_long) = read_all(b"ok\n0123456789\nfine\n0123456789", 5, 1000, 4);
        assert_eq!(bytes(&lines), [&b"ok"[..], b"fine"]);
        assert_eq!(too_long, [2, 4]);
        assert_eq!(lines[1].number, 3);
    }

    #[test]
    fn a_chunk_stops_near_its_byte_limit() {
        let input = b"aaaa\nbbbb\ncccc\ndddd\n";
        let mut reader = LineReader::new(&input[..], 100);
        let chunk = reader.read_chunk(8).unwrap();
        assert_eq!(bytes(&chunk.lines), [&b"aaaa"[..], b"bbbb"]);
        assert!(!chunk.eof);
    }

    #[test]
    fn keys_split_at_the_first_separator() {
        assert_eq!(
            split_line(b"k:v:w", Some(b":")),
            (Some(&b"k"[..]), &b"v:w"[..])
        );
        assert_eq!(
            split_line(b"k=>v", Some(b"=>")),
            (Some(&b"k"[..]), &b"v"[..])
        );
        assert_eq!(split_line(b":v", Some(b":")), (Some(&b""[..]), &b"v"[..]));
        assert_eq!(split_line(b"k:", Some(b":")), (Some(&b"k"[..]), &b""[..]));
        assert_eq!(split_line(b"no key", Some(b":")), (None, &b"no key"[..]));
        assert_eq!(split_line(b"k:v", None), (None, &b"k:v"[..]));
    }

    proptest! {
        /// However reads and chunks cut the input, the lines are the input split at newlines.
        #[test]
        fn chunking_never_changes_the_lines(
            input in prop::collection::vec(prop::sample::select(vec![b'a', b'b', b'\n']), 0..200),
            read_bytes in 1..20usize,
            bytes_max in 1..50usize,
        ) {
            let (lines, too_long) = read_all(&input, 1000, bytes_max, read_bytes);
            prop_assert!(too_long.is_empty());
            let mut want: Vec<&[u8]> = input.split(|b| *b == b'\n').collect();
            if input.last().is_none_or(|b| *b == b'\n') {
                want.pop();
            }
            prop_assert_eq!(bytes(&lines), want);
        }
    }
}
