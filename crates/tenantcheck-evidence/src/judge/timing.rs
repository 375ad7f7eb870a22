//! The rule of the timing tests (`cache.cross-tenant-timing`, and the timed channel
//! of `cache.prefix-extraction`), which `verify` re-applies.
//!
//! Every time is [`Timings::first_answer_ms`](crate::exchange::Timings::first_answer_ms):
//! until the vendor began to answer, never the whole answer, whose transfer a server
//! may stretch at random. A pair is a prompt that may be served from cache (the hit
//! arm) and a fresh one of the same length (the miss arm), sent by one key in an order
//! drawn from the run secret; its *speed-up* is miss − hit. Where no cache serves the
//! hit arm, the two arms are exchangeable, so the speed-up is as likely negative as
//! positive whatever the noise; where a cache shifts the hit arm by `s`, the
//! speed-up's median is `s`.
//!
//! - **The control** (the victim's own key) asks whether a cache exists: faster in
//!   more than half the pairs (a cache), or not in at least `effect` of them (none of
//!   that size).
//! - **Another key** is judged by two sign tests at once, both anytime-valid at
//!   `alpha` ([`super::sequential`]): *shared* when the hit arm is faster in more than
//!   half the pairs, by any margin; *not shared* only when it is faster by more than
//!   the bound (`equivalence` × the control's median speed-up) in fewer than half: a
//!   speed-up of the bound or more, which would put the median there, is ruled out.
//!   Noise that hides both leaves the level undecided, never "not shared".
//!
//! The vendor's own reports of cached prompt tokens count beside the times.

use super::sequential::{Decision, SequentialTest};
use crate::outcome::{CacheDecision, TimingLevel, TimingPair};
use serde::Deserialize;

/// The name of the control level, whose attacker is the victim's own key.
pub const SAME_KEY: &str = "same key";

/// The default share of the control's median speed-up that "not shared" rules out.
pub const DEFAULT_EQUIVALENCE: f64 = 0.5;

fn default_equivalence() -> f64 {
    DEFAULT_EQUIVALENCE
}

/// What the rule needs of the case's parameters, read from the report's record of
/// them (the probe's other parameters are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
pub struct Rule {
    /// The sequential tests' error rate.
    pub alpha: f64,
    /// The share of pairs in which a cache makes the control's hit arm faster,
    /// tested against.
    pub effect: f64,
    /// The speed-up "not shared" rules out, as a share of the control's median.
    #[serde(default = "default_equivalence")]
    pub equivalence: f64,
}

impl Rule {
    /// The bound a level of another key is judged by: `equivalence` × the control's
    /// median speed-up (never below 0).
    pub fn bound_ms(&self, control: &[TimingPair]) -> f64 {
        (self.equivalence * median_speedup(control)).max(0.0)
    }
}

/// The median speed-up (miss − hit) of `pairs`; 0 for none.
pub fn median_speedup(pairs: &[TimingPair]) -> f64 {
    median(pairs.iter().map(TimingPair::speedup_ms).collect())
}

/// The median of `v`; 0 for none.
pub fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    }
}

/// The sequential tests of one level, fed one speed-up at a time.
#[derive(Clone, Debug)]
pub struct LevelTest {
    bound_ms: Option<f64>,
    /// Speed-up > 0: against "no cache" (the control: and against "a cache").
    faster: SequentialTest,
    /// Speed-up > the bound: against "a speed-up of the bound or more".
    bounded: SequentialTest,
}

impl LevelTest {
    /// The control's test: a cache, or none making `effect` of the pairs faster.
    pub fn control(rule: &Rule) -> Self {
        LevelTest {
            bound_ms: None,
            faster: SequentialTest::new(rule.alpha, rule.effect),
            bounded: SequentialTest::new(rule.alpha, 0.5),
        }
    }

    /// Another key's test: faster by any margin (shared), or a speed-up of `bound_ms`
    /// or more ruled out (not shared).
    pub fn across(alpha: f64, bound_ms: f64) -> Self {
        LevelTest {
            bound_ms: Some(bound_ms),
            faster: SequentialTest::new(alpha, 0.5),
            bounded: SequentialTest::new(alpha, 0.5),
        }
    }

    /// Takes one pair's speed-up and says what all of them decide.
    pub fn observe(&mut self, speedup_ms: f64) -> Decision {
        self.faster.observe(speedup_ms > 0.0);
        if let Some(bound) = self.bound_ms {
            self.bounded.observe(speedup_ms > bound);
        }
        self.decision()
    }

    /// What the pairs so far decide: `Effect` a cache (control) or sharing (another
    /// key), `NoEffect` none.
    pub fn decision(&self) -> Decision {
        match (self.bound_ms, self.faster.decision()) {
            (None, d) | (Some(_), d @ Decision::Effect) => d,
            (Some(_), _) if self.bounded.decision() == Decision::NoEffect => Decision::NoEffect,
            (Some(_), _) => Decision::Undecided,
        }
    }

    /// log10 of the evidence against "no speed-up" and against "a speed-up" (of the
    /// control's effect size, or of the bound); a decision needs log10(1/α).
    pub fn log10_evidence(&self) -> (f64, f64) {
        let (against_none, against_effect) = self.faster.log10_evidence();
        match self.bound_ms {
            None => (against_none, against_effect),
            Some(_) => (against_none, self.bounded.log10_evidence().1),
        }
    }
}

/// A level's decision from its sequential tests and the vendor's cached-token reports.
pub fn decide(control: bool, test: Decision, cached_reported: u32, cached_prefix: u32) -> CacheDecision {
    // The vendor's own report of reuse counts for the control when it says so in most
    // pairs; across keys, once is enough.
    let reported_reuse = cached_reported > 0 && cached_prefix * 2 > cached_reported;
    match (control, test) {
        (true, Decision::Effect) => CacheDecision::CacheObserved,
        (true, _) if reported_reuse => CacheDecision::CacheObserved,
        (true, Decision::NoEffect) => CacheDecision::NoCacheObserved,
        (false, Decision::Effect) => CacheDecision::Shared,
        (false, _) if cached_prefix > 0 => CacheDecision::Shared,
        (false, Decision::NoEffect) => CacheDecision::NotShared,
        (_, Decision::Undecided) => CacheDecision::Undecided,
    }
}

/// Replays a signed case's timing levels from their pairs: the control first with no
/// bound, every other level at the bound its control gives. `Err` says how the signed
/// levels disagree with their own pairs (for `verify`).
pub fn replay(p: &Rule, levels: &[TimingLevel]) -> Result<(), String> {
    let Some((control, others)) = levels.split_first() else {
        return Ok(());
    };
    if control.level != SAME_KEY || control.threshold_ms != 0.0 {
        return Err(format!(
            "its first level is {:?} at {} ms; the control ({SAME_KEY:?}, at 0 ms) comes first",
            control.level, control.threshold_ms
        ));
    }
    replay_level(LevelTest::control(p), control)?;
    let bound = p.bound_ms(&control.pairs);
    for level in others {
        if (level.threshold_ms - bound).abs() > 1e-9 {
            return Err(format!(
                "level {:?} is judged at {} ms; its control's pairs give {bound} ms ({} of their median)",
                level.level, level.threshold_ms, p.equivalence
            ));
        }
        replay_level(LevelTest::across(p.alpha, bound), level)?;
    }
    Ok(())
}

fn replay_level(mut test: LevelTest, level: &TimingLevel) -> Result<(), String> {
    let mut decided_at = None;
    for (i, pair) in level.pairs.iter().enumerate() {
        if test.observe(pair.speedup_ms()) != Decision::Undecided {
            decided_at.get_or_insert(i + 1);
        }
    }
    if let Some(n) = decided_at.filter(|&n| n < level.pairs.len()) {
        return Err(format!(
            "level {:?}: the test decided after {n} pairs, yet {} were sent",
            level.level,
            level.pairs.len()
        ));
    }
    let (a, b) = test.log10_evidence();
    if (a - level.log10_evidence[0]).abs() > 1e-9 || (b - level.log10_evidence[1]).abs() > 1e-9 {
        return Err(format!(
            "level {:?}: its pairs give evidence {a:.3}/{b:.3}, the report says {:.3}/{:.3}",
            level.level, level.log10_evidence[0], level.log10_evidence[1]
        ));
    }
    let mut decision = decide(
        level.level == SAME_KEY,
        test.decision(),
        level.cached_reported,
        level.cached_prefix,
    );
    if decision == CacheDecision::Shared && level.decision == CacheDecision::SharedAsDeclared {
        decision = CacheDecision::SharedAsDeclared;
    }
    if decision != level.decision {
        return Err(format!(
            "level {:?}: its pairs decide {decision:?}, the report says {:?}",
            level.level, level.decision
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::judge::sequential::tests::Rng;

    /// Decisions of `runs` levels of another key, at most `max` pairs each, whose
    /// speed-up is `shift` plus the difference of two arms' noise (`noise` draws one).
    fn across(shift: f64, bound: f64, runs: u32, max: u32, mut noise: impl FnMut(&mut Rng) -> f64) -> (u32, u32, u32) {
        let mut rng = Rng(7);
        let (mut shared, mut not_shared, mut undecided) = (0, 0, 0);
        for _ in 0..runs {
            let mut t = LevelTest::across(1e-3, bound);
            let mut d = Decision::Undecided;
            for _ in 0..max {
                let (hit, miss) = (noise(&mut rng) - shift, noise(&mut rng));
                d = t.observe(miss - hit);
                if d != Decision::Undecided {
                    break;
                }
            }
            match d {
                Decision::Effect => shared += 1,
                Decision::NoEffect => not_shared += 1,
                Decision::Undecided => undecided += 1,
            }
        }
        (shared, not_shared, undecided)
    }

    /// Bimodal jitter: 0 or, one answer in two, 40 ms. Heavy jitter: uniform on
    /// [0, 100) ms, above the 62 ms a cache saves.
    fn bimodal(rng: &mut Rng) -> f64 {
        20.0 + rng.unit() + if rng.unit() < 0.5 { 40.0 } else { 0.0 }
    }
    fn heavy(rng: &mut Rng) -> f64 {
        rng.unit() * 100.0
    }

    #[test]
    fn a_shared_cache_is_never_called_not_shared_however_noisy() {
        // A shared cache saving 62 ms, judged at half of it, under each noise: a cache
        // is found or the level stays undecided; "not shared" would need the median
        // speed-up below the bound.
        for (name, noise) in [("bimodal", bimodal as fn(&mut Rng) -> f64), ("heavy", heavy)] {
            let (shared, not_shared, _) = across(62.0, 31.0, 200, 250, noise);
            assert_eq!(not_shared, 0, "{name}: a shared cache called not shared");
            assert!(shared > 150, "{name}: {shared}/200 found");
        }
        // A cache barely above the noise: still never "not shared".
        let (_, not_shared, _) = across(40.0, 31.0, 200, 250, heavy);
        assert_eq!(not_shared, 0);
    }

    #[test]
    fn a_cache_of_its_own_is_not_shared_under_the_same_noise() {
        for (name, noise) in [("bimodal", bimodal as fn(&mut Rng) -> f64), ("heavy", heavy)] {
            let (shared, not_shared, _) = across(0.0, 31.0, 200, 250, noise);
            assert!(shared <= 1, "{name}: {shared} false findings at alpha 1e-3");
            assert!(not_shared >= 190, "{name}: {not_shared}/200 passed");
        }
    }

    #[test]
    fn noise_far_above_the_bound_decides_nothing() {
        // Uniform on [0, 2 s) against a 31 ms bound: a pass needs the bound to be
        // cleared in well under half the pairs, and it is not.
        let (shared, not_shared, undecided) = across(0.0, 31.0, 50, 100, |r| r.unit() * 2000.0);
        assert_eq!((shared, not_shared), (0, 0));
        assert_eq!(undecided, 50);
    }

    /// A level of pairs sped up by `speedup` and `-speedup` in turns (`one_way`: by
    /// `speedup` always), up to the pair its test decides at.
    fn level(name: &str, threshold_ms: f64, speedup: f64, decision: CacheDecision, rule: &Rule) -> TimingLevel {
        let one_way = name == SAME_KEY;
        let mut test = if name == SAME_KEY {
            LevelTest::control(rule)
        } else {
            LevelTest::across(rule.alpha, threshold_ms)
        };
        let mut pairs = Vec::new();
        while pairs.is_empty() || test.decision() == Decision::Undecided {
            let i = pairs.len() as u64;
            let speedup = if one_way || i % 2 == 0 { speedup } else { -speedup };
            test.observe(speedup);
            pairs.push(TimingPair {
                hit_ms: 100.0 - speedup,
                miss_ms: 100.0,
                hit_seq: 2 * i,
                miss_seq: 2 * i + 1,
            });
        }
        let (a, b) = test.log10_evidence();
        TimingLevel {
            level: name.into(),
            victim: "a".into(),
            attacker: "b".into(),
            threshold_ms,
            pairs,
            decision,
            log10_evidence: [a, b],
            cached_reported: 0,
            cached_prefix: 0,
        }
    }

    #[test]
    fn replay_holds_the_bound_to_the_control() {
        let rule = Rule {
            alpha: 1e-3,
            effect: 0.75,
            equivalence: 0.5,
        };
        let control = level(SAME_KEY, 0.0, 60.0, CacheDecision::CacheObserved, &rule);
        let honest = level("other organisation", 30.0, 10.0, CacheDecision::NotShared, &rule);
        assert_eq!(replay(&rule, &[control.clone(), honest]), Ok(()));
        // A bound raised so that a shared cache reads as not shared is refused.
        let raised = level("other organisation", 90.0, 45.0, CacheDecision::NotShared, &rule);
        let err = replay(&rule, &[control.clone(), raised]).unwrap_err();
        assert!(err.contains("judged at 90 ms"), "{err}");
        // So is a decision the pairs do not make.
        let mut claimed = level("other organisation", 30.0, 10.0, CacheDecision::NotShared, &rule);
        claimed.decision = CacheDecision::Undecided;
        let err = replay(&rule, &[control, claimed]).unwrap_err();
        assert!(err.contains("decide NotShared"), "{err}");
    }
}
