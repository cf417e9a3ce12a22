//! The fake network: each frame is lost, delayed (hence reordered) or duplicated by the run's
//! dice, and links can be cut in one direction or both.

use std::collections::BTreeSet;

use crate::rng::Rng;

#[derive(Debug, Default)]
pub struct Network {
    /// Cut links, (from, to) by voter position.
    cut: BTreeSet<(usize, usize)>,
    pub loss_per_mille: u64,
    pub duplicate_per_mille: u64,
    pub delay_ms_max: u64,
}

impl Network {
    pub fn new(delay_ms_max: u64) -> Network {
        Network {
            delay_ms_max,
            ..Default::default()
        }
    }

    pub fn can_send(&self, from: usize, to: usize) -> bool {
        !self.cut.contains(&(from, to))
    }

    /// The delays after which copies of a frame arrive (none: it is lost).
    pub fn deliveries(&self, from: usize, to: usize, rng: &mut Rng) -> Vec<u64> {
        if !self.can_send(from, to) || rng.chance(self.loss_per_mille) {
            return Vec::new();
        }
        let mut delays = vec![rng.between(1, self.delay_ms_max)];
        if rng.chance(self.duplicate_per_mille) {
            delays.push(rng.between(1, self.delay_ms_max * 2));
        }
        delays
    }

    /// Splits the voters in two sides that cannot talk to each other.
    pub fn partition(&mut self, side: &[bool]) {
        for (a, &sa) in side.iter().enumerate() {
            for (b, &sb) in side.iter().enumerate() {
                if sa != sb {
                    self.cut.insert((a, b));
                }
            }
        }
    }

    /// Frames from `from` to `to` are lost; the other way still works.
    pub fn cut_one_way(&mut self, from: usize, to: usize) {
        self.cut.insert((from, to));
    }

    pub fn heal(&mut self) {
        self.cut.clear();
    }

    pub fn cut_links(&self) -> usize {
        self.cut.len()
    }
}
