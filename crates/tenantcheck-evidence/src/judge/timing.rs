//! The rule of `cache.cross-tenant-timing`, which `verify` re-applies: a level's
//! decision from its sequential test over the timed pairs and the vendor's own
//! cached-token reports (see `probe::cache`).

use super::sequential::{Decision, SequentialTest};
use crate::outcome::{CacheDecision, TimingLevel};
use serde::Deserialize;

/// The name of the control level, whose attacker is the victim's own key.
pub const SAME_KEY: &str = "same key";

/// What the rule needs of the case's parameters, read from the report's record of
/// them (the probe's other parameters are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
pub struct Rule {
    /// The sequential test's error rate.
    pub alpha: f64,
    /// The share of pairs in which a cache makes the hit arm faster, tested against.
    pub effect: f64,
}

/// A level's decision from its sequential test and the vendor's cached-token reports.
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

/// Replays a signed timing level's sequential test from its pairs: `Err` says how the
/// signed level disagrees with its own pairs (for `verify`).
pub fn replay(p: &Rule, level: &TimingLevel) -> Result<(), String> {
    let mut test = SequentialTest::new(p.alpha, p.effect);
    let mut decided_at = None;
    for (i, pair) in level.pairs.iter().enumerate() {
        if test.observe(pair.miss_ms - pair.hit_ms > level.threshold_ms) != Decision::Undecided {
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
