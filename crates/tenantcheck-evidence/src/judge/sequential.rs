//! [`SequentialTest`]: an anytime-valid sequential test on yes/no observations, used
//! by the timing case to stop as soon as its verdict is certain.
//!
//! Each observation is a Bernoulli(p) outcome. Two hypotheses are tested at once:
//!
//! - the null, p ≤ 1/2 ("no effect"): rejected when the evidence against it reaches
//!   1/α;
//! - the alternative, p ≥ `p1` ("an effect of at least this size"): rejected when the
//!   evidence against it reaches 1/α.
//!
//! The evidence against each is a test supermartingale: the product, over the
//! observations, of the likelihood ratio of a *predictable* plug-in estimate of p
//! (computed from the earlier observations only, clipped to the other side of the
//! hypothesis) to the hypothesis's boundary value. Under its hypothesis each factor has
//! expectation at most 1, so by Ville's inequality the evidence ever reaches 1/α with
//! probability at most α, however long the test runs and whenever it is stopped: no
//! correction for peeking is needed. (Robbins' predictable plug-in; see Ramdas et al.,
//! "Game-theoretic statistics and safe anytime-valid inference", 2023.)
//!
//! A clear effect (p near 1) is decided in about log2(1/α) observations: 20 at
//! α = 1e-6; a clear absence (p near 0) in about log(1/α)/log(1/(1 − p1)).

/// What the observations so far decide.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Neither hypothesis rejected yet.
    Undecided,
    /// p ≤ 1/2 rejected: there is an effect.
    Effect,
    /// p ≥ p1 rejected: there is no effect of that size.
    NoEffect,
}

/// The state of one sequential test.
#[derive(Clone, Debug)]
pub struct SequentialTest {
    threshold: f64,
    p1: f64,
    n: u32,
    yes: u32,
    /// ln of the evidence against p ≤ 1/2.
    against_null: f64,
    /// ln of the evidence against p ≥ p1.
    against_effect: f64,
}

impl SequentialTest {
    /// A test at level `alpha` (each error at most `alpha`) with effect size `p1`
    /// (in [1/2, 1)). With `p1` = 1/2 it tests the two sides of one coin: "no effect"
    /// then means p < 1/2, an effect in fewer than half the observations.
    pub fn new(alpha: f64, p1: f64) -> Self {
        assert!(alpha > 0.0 && alpha < 1.0 && (0.5..1.0).contains(&p1));
        SequentialTest {
            threshold: (1.0 / alpha).ln(),
            p1,
            n: 0,
            yes: 0,
            against_null: 0.0,
            against_effect: 0.0,
        }
    }

    /// Takes one observation and says what all of them decide.
    pub fn observe(&mut self, x: bool) -> Decision {
        // The plug-in estimate uses only earlier observations.
        let q = (f64::from(self.yes) + 0.5) / (f64::from(self.n) + 1.0);
        let q0 = q.max(0.5);
        let q1 = q.min(self.p1);
        if x {
            self.against_null += (q0 / 0.5).ln();
            self.against_effect += (q1 / self.p1).ln();
        } else {
            self.against_null += ((1.0 - q0) / 0.5).ln();
            self.against_effect += ((1.0 - q1) / (1.0 - self.p1)).ln();
        }
        self.n += 1;
        self.yes += u32::from(x);
        self.decision()
    }

    /// What the observations so far decide.
    pub fn decision(&self) -> Decision {
        if self.against_null >= self.threshold {
            Decision::Effect
        } else if self.against_effect >= self.threshold {
            Decision::NoEffect
        } else {
            Decision::Undecided
        }
    }

    /// Observations taken.
    #[cfg(test)]
    pub fn n(&self) -> u32 {
        self.n
    }

    /// log10 of the evidence against "no effect" and against "an effect".
    pub fn log10_evidence(&self) -> (f64, f64) {
        let l = std::f64::consts::LN_10;
        (self.against_null / l, self.against_effect / l)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A small deterministic generator (SplitMix64), so the error rates of the
    /// judges' tests are the same on every run.
    pub(crate) struct Rng(pub u64);
    impl Rng {
        pub(crate) fn unit(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Runs `runs` tests of at most `max` observations with true rate `p`; returns
    /// (effects, no-effects, median observations to a decision).
    fn simulate(p: f64, alpha: f64, runs: u32, max: u32) -> (u32, u32, u32) {
        let mut rng = Rng(42);
        let (mut effect, mut none) = (0, 0);
        let mut lengths = Vec::new();
        for _ in 0..runs {
            let mut t = SequentialTest::new(alpha, 0.75);
            let mut d = Decision::Undecided;
            while d == Decision::Undecided && t.n() < max {
                d = t.observe(rng.unit() < p);
            }
            match d {
                Decision::Effect => effect += 1,
                Decision::NoEffect => none += 1,
                Decision::Undecided => {}
            }
            lengths.push(t.n());
        }
        lengths.sort_unstable();
        (effect, none, lengths[lengths.len() / 2])
    }

    #[test]
    fn false_effects_stay_under_alpha_at_the_boundary() {
        // p = 1/2 is the worst case of the null; 4,000 runs of up to 500.
        let (effect, _, _) = simulate(0.5, 0.05, 4000, 500);
        assert!(effect <= 200, "{effect} false effects of 4000 at alpha 0.05");
    }

    #[test]
    fn false_absences_stay_under_alpha_at_the_effect_size() {
        let (_, none, _) = simulate(0.75, 0.05, 4000, 500);
        assert!(none <= 200, "{none} false absences of 4000 at alpha 0.05");
    }

    #[test]
    fn clear_cases_are_decided_in_few_observations() {
        let (effect, _, median) = simulate(0.98, 1e-6, 200, 500);
        assert_eq!(effect, 200);
        assert!(median <= 30, "median {median} observations for a clear effect");
        let (_, none, median) = simulate(0.02, 1e-6, 200, 500);
        assert_eq!(none, 200);
        assert!(median <= 20, "median {median} observations for a clear absence");
    }

    #[test]
    fn a_coin_stays_undecided_at_a_strict_level() {
        let (effect, none, _) = simulate(0.5, 1e-6, 200, 250);
        assert_eq!(effect, 0);
        // p = 1/2 lies between the hypotheses: most runs decide "no effect of size
        // 3/4" given enough observations, none decides "effect".
        assert!(none > 0);
    }
}
