//! The scheduler's randomness: a seeded stream of draws, and the interval jitter they decide.
//!
//! Searches that share a cycle must drift apart, or every site gets its requests in the same
//! instant each cycle; so a page checked now is due again after its interval times a factor
//! drawn from `[1 - jitter, 1 + jitter)` (docs/architecture.md#scheduling: ±10 %). The same stream jitters the
//! backoff waits. Public so that a test can replay the scheduler's plan draw for draw (the
//! reference scheduler in `tests/it/scheduler_reference.rs` does); the driver never needs it.

use std::time::Duration;

/// A seeded stream of random numbers: wyrand (Wang Yi's generator: a Weyl sequence through
/// one 64 × 64 → 128-bit multiply), seeded through splitmix64 so that nearby seeds start far
/// apart. Statistically sound for jitter (it passes BigCrush and PractRand); not for anything
/// secret. Hand-written: a few lines, and the same numbers on every platform and version,
/// which `rand`'s small generators do not promise (a simulated day is compared by digest).
#[derive(Clone, Debug)]
pub struct Draws(u64);

impl Draws {
    /// The stream for `seed`.
    #[must_use]
    pub fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Self(z ^ (z >> 31))
    }

    /// The next draw, uniform in `[0, 1)` (53 bits).
    pub fn next_f64(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        let bits = ((t >> 64) as u64) ^ (t as u64);
        (bits >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The interval jitter searches get (±10 %): the scheduler's default, and what a budget's plan
/// allows for when it promises `max_interval` (docs/policy.md#a-request-budget-per-site).
pub const INTERVAL_JITTER: f64 = 0.1;

/// The interval jitter: a fraction in `[0, 1]` (docs/architecture.md#scheduling: 0.1, ±10 %).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Jitter(f64);

impl Jitter {
    /// `fraction`, or the nearest end of `[0, 1]` (NaN counts as 0: no jitter).
    #[must_use]
    pub fn new(fraction: f64) -> Self {
        Self(if fraction.is_nan() {
            0.0
        } else {
            fraction.clamp(0.0, 1.0)
        })
    }

    /// `base` times a factor drawn uniformly from `[1 - jitter, 1 + jitter)` by `random` (in
    /// `[0, 1)`; 0.5 gives `base` exactly), to the nearest millisecond (half up), saturating.
    /// The one jitter formula: the interval between checks, the backoff waits and the retry
    /// sleeps all go through it.
    #[must_use]
    pub fn apply(self, base: Duration, random: f64) -> Duration {
        let factor = 1.0 - self.0 + 2.0 * self.0 * random.clamp(0.0, 1.0);
        // `as` saturates, so a huge base is "never" rather than a wrap.
        Duration::from_millis((base.as_millis() as f64 * factor + 0.5).floor() as u64)
    }

    /// When a page checked at `now_ms` is due again: `now_ms` plus `interval_ms` jittered by
    /// [`Jitter::apply`], in ms, saturating.
    #[must_use]
    pub fn due_after(self, now_ms: u64, interval_ms: u64, random: f64) -> u64 {
        let interval = self.apply(Duration::from_millis(interval_ms), random);
        now_ms.saturating_add(u64::try_from(interval.as_millis()).unwrap_or(u64::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::{Draws, Jitter};

    #[test]
    fn draws_are_uniform_in_the_unit_interval_and_reproducible() {
        let (mut a, mut b) = (Draws::new(1), Draws::new(1));
        let mut buckets = [0u32; 10];
        for _ in 0..100_000 {
            let x = a.next_f64();
            assert_eq!(x.to_bits(), b.next_f64().to_bits());
            assert!((0.0..1.0).contains(&x));
            buckets[(x * 10.0) as usize] += 1;
        }
        // Each tenth gets 10,000 ± 4% (over 10 standard deviations apart would be a bug).
        assert!(
            buckets.iter().all(|&n| (9_600..=10_400).contains(&n)),
            "{buckets:?}"
        );
        assert_ne!(Draws::new(2).next_f64(), Draws::new(1).next_f64());
    }

    #[test]
    fn due_after_spans_the_jitter_window() {
        let now = 1_700_000_000_000;
        let tenth = Jitter::new(0.1);
        assert_eq!(tenth.due_after(now, 30_000, 0.0), now + 27_000);
        assert_eq!(tenth.due_after(now, 30_000, 0.5), now + 30_000);
        assert_eq!(
            tenth.due_after(now, 30_000, 0.999_999),
            now + 33_000,
            "rounded"
        );
        assert_eq!(tenth.due_after(now, 30_000, 0.999_9), now + 32_999);
        assert_eq!(Jitter::new(0.0).due_after(now, 30_000, 0.9), now + 30_000);
        assert_eq!(
            Jitter::new(f64::NAN).due_after(now, 30_000, 0.9),
            now + 30_000
        );
        assert_eq!(
            Jitter::new(7.0).due_after(now, 30_000, 0.0),
            now,
            "full jitter at most"
        );
        assert_eq!(tenth.due_after(now, u64::MAX, 0.5), u64::MAX);
    }
}
