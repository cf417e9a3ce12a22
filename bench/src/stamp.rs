//! What each record's value starts with, so a consumer can tell end-to-end latency: the run's
//! id (records of another run do not count) and the record's intended send time.

/// Bytes of a stamp at the start of a value; smaller records carry none.
pub const STAMP_BYTES: usize = 16;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stamp {
    pub run_id: u64,
    /// Nanoseconds since the run's clock started.
    pub sent_ns: u64,
}

impl Stamp {
    pub fn encode(self) -> [u8; STAMP_BYTES] {
        let mut out = [0; STAMP_BYTES];
        out[..8].copy_from_slice(&self.run_id.to_be_bytes());
        out[8..].copy_from_slice(&self.sent_ns.to_be_bytes());
        out
    }

    /// The stamp at the start of `value`, if it is long enough to hold one.
    pub fn decode(value: &[u8]) -> Option<Stamp> {
        let run_id = value.get(..8)?.try_into().ok().map(u64::from_be_bytes)?;
        let sent_ns = value.get(8..16)?.try_into().ok().map(u64::from_be_bytes)?;
        Some(Stamp { run_id, sent_ns })
    }
}

/// A small fast generator (xorshift64*): payload bytes and run ids need variety, not secrecy.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    /// Seeded from the clock and the process id.
    pub fn from_entropy() -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Self::new(nanos ^ (u64::from(std::process::id()) << 32))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// Value bytes after the stamp: random capital letters, as Kafka's producer-perf-test uses, so
/// compression sees text-like data rather than incompressible noise.
pub fn payload(len: usize, rng: &mut Rng) -> Vec<u8> {
    (0..len)
        .map(|_| b'A' + (rng.next_u64() % 26) as u8)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_round_trip_and_short_values_have_none() {
        let stamp = Stamp {
            run_id: 0xdead_beef_0000_0001,
            sent_ns: 123_456_789,
        };
        let mut value = stamp.encode().to_vec();
        value.extend_from_slice(b"payload");
        assert_eq!(Stamp::decode(&value), Some(stamp));
        assert_eq!(Stamp::decode(&value[..15]), None);
    }

    #[test]
    fn payloads_are_letters_and_vary() {
        let mut rng = Rng::new(7);
        let a = payload(1000, &mut rng);
        assert!(a.iter().all(u8::is_ascii_uppercase));
        let distinct = (b'A'..=b'Z').filter(|c| a.contains(c)).count();
        assert_eq!(distinct, 26);
        assert_ne!(a, payload(1000, &mut rng));
    }
}
