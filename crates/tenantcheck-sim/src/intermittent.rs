//! [`Intermittent`]: leak faults that act on some occasions only (`--leak-rate`).
//!
//! Real leaks are usually intermittent: one bad replica behind a router, a race between
//! cancellation and reuse, a page reused only when the pool is full. With a rate below
//! 1, each occasion on which a leak fault would act (a prompt past `--stale-above`
//! under `stale-pages`, one past the prefill pool under `reject-continue`, a cancelled
//! stream under `cancel-swap`, another tenant's stored response under `object-idor`)
//! draws whether it does, from a seeded stream: the same seed and the same order of
//! occasions give the same leaks. Otherwise the engine behaves as a healthy one would.

use std::sync::atomic::{AtomicU64, Ordering};

/// The chance that a leak fault acts, drawn per occasion.
#[derive(Debug)]
pub struct Intermittent {
    rate: f64,
    seed: u64,
    drawn: AtomicU64,
}

impl Intermittent {
    /// Faults that act every time.
    pub fn always() -> Intermittent {
        Intermittent::new(1.0, 0)
    }

    /// Faults that act with chance `rate` per occasion, drawn from `seed`.
    pub fn new(rate: f64, seed: u64) -> Intermittent {
        Intermittent {
            rate,
            seed,
            drawn: AtomicU64::new(0),
        }
    }

    /// Whether the fault acts on this occasion.
    pub fn acts(&self) -> bool {
        if self.rate >= 1.0 {
            return true;
        }
        let n = self.drawn.fetch_add(1, Ordering::Relaxed);
        let mut rng = crate::transform::Rng(self.seed ^ n.wrapping_mul(0xD6E8_FEB8_6659_FD93));
        rng.unit() < self.rate
    }

    /// The rate.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rate_is_kept_and_a_seed_repeats_its_draws() {
        let draws = |seed| {
            let i = Intermittent::new(0.2, seed);
            (0..10_000).map(|_| i.acts()).collect::<Vec<bool>>()
        };
        let a = draws(7);
        assert_eq!(a, draws(7));
        assert_ne!(a, draws(8));
        let share = a.iter().filter(|&&x| x).count() as f64 / a.len() as f64;
        assert!((share - 0.2).abs() < 0.02, "{share}");
        assert!((0..100).all(|_| Intermittent::always().acts()));
    }
}
