//! Record keys for `--keys N`: `k0`, `k1`, ... `k{N-1}`, placed by Kafka's murmur2 partitioner
//! (`net::client::partitioner`) as a Java or librdkafka (`murmur2_random`) producer would.

use std::io::Write;

/// Writes keys into one reused buffer: no allocation per record.
#[derive(Debug, Default)]
pub struct KeyWriter {
    buf: Vec<u8>,
}

impl KeyWriter {
    pub fn key(&mut self, index: u64) -> &[u8] {
        self.buf.clear();
        // Writing to a Vec cannot fail.
        let _ = write!(self.buf, "k{index}");
        &self.buf
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use net::client::partitioner::partition_for_key;

    #[test]
    fn keys_are_numbered_and_spread_over_every_partition() {
        let mut keys = KeyWriter::default();
        assert_eq!(keys.key(42), b"k42");
        let mut seen = [0u32; 6];
        for i in 0..600 {
            seen[partition_for_key(keys.key(i), 6) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }
}
