//! Kafka's default partitioner for keyed records: the murmur2 hash of the key, made positive,
//! modulo the partition count. Java clients and librdkafka (`murmur2_random`) place keys this
//! way; a producer that does too puts each key where theirs would.

/// Kafka's murmur2 (`org.apache.kafka.common.utils.Utils.murmur2`): MurmurHash2, 32-bit, seed
/// 0x9747b28c, four bytes at a time in little-endian order.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    // Kafka hashes the length as a Java int: keys past 2 GiB would wrap the same way.
    let mut h = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, byte) in tail.iter().enumerate() {
            h ^= u32::from(*byte) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of a keyed record among `partitions`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    // Kafka's toPositive: clear the sign bit rather than take the absolute value.
    (murmur2(key) & 0x7fff_ffff) % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_the_java_client() {
        // UtilsTest.testMurmur2 in Apache Kafka.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (key, hash) in cases {
            assert_eq!(murmur2(key), hash, "{}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn keys_land_where_the_java_partitioner_puts_them() {
        // toPositive(murmur2(key)) % partitions, with the hashes above: negative hashes lose
        // their sign bit, they are not negated.
        assert_eq!(
            partition_for_key(b"21", 7),
            (-973_932_308i32 & 0x7fff_ffff) % 7
        );
        assert_eq!(partition_for_key(b"21", 7), 3);
        assert_eq!(partition_for_key(b"foobar", 3), 0);
        assert_eq!(partition_for_key(b"abc", 100), 7);
        assert_eq!(partition_for_key(b"abc", 0), 0, "no partitions is one");
    }
}
