//! The rule of `cache.response-reuse` (T7, T1): whether an answer tenant b was given
//! is the answer tenant a was given before, by its id, its creation time and content,
//! or its speed, wherever the vendor's answers make that sign sound ([`Signs`]).
//!
//! The case's lines, named by its `roles` line: `first` (a's request), `again` (a's
//! repeat, the control), `fresh` (b's two fresh requests), `warm` (b's first fresh
//! request again, one token more to give), `same` (a's request as b sent it, byte for
//! byte first, then the variants a gateway may leave out of its key) and `paraphrase`
//! (a's request in other words). The run and `verify` judge them with [`judge`].
//!
//! A cache that gives its hits a new id and a new time shows by its speed alone, and
//! one sample of it says little on a busy machine: [`Timed`] judges timed pairs by a
//! sign test. Their lines are the roles `seeded` (a's requests), `primed` (b's own
//! prompts, sent once), `hit` (b's copy of each of a's requests, byte for byte, new to
//! b) and `miss` (b's own prompt again, asking for as many tokens as the copy: its
//! prefix cached, its answer not), pair by pair.

use crate::exchange::Exchange;
use crate::judge::sequential::Decision;
use crate::judge::timing::LevelTest;

/// The roles the case records.
pub const ROLES: [&str; 10] = [
    "first",
    "again",
    "fresh",
    "warm",
    "same",
    "paraphrase",
    "seeded",
    "primed",
    "hit",
    "miss",
];

/// The timed pairs' sequential tests' error rate, by default.
pub const DEFAULT_TIMING_ALPHA: f64 = 1e-4;

/// The share of the model's answer time that "no reuse" rules out, by default: a
/// stored answer saves the whole generation.
pub const DEFAULT_EQUIVALENCE: f64 = 0.5;

/// What b's timed pairs decide ([`Timed::judge`]).
#[derive(Clone, Debug, PartialEq)]
pub struct TimedVerdict {
    /// `Effect`: b's copies were answered sooner than its own prompts in more than half
    /// the pairs (a's answers given again); `NoEffect`: a speed-up of `bound_ms` or
    /// more in most pairs is ruled out; `Undecided`: neither, after every pair.
    pub decision: Decision,
    /// Pairs read: up to the first that decided, or all.
    pub pairs: usize,
    /// Of them, those whose copy came sooner.
    pub sooner: usize,
    /// The speed-up "no reuse" rules out, in milliseconds.
    pub bound_ms: f64,
    /// The median time of the copies and of b's own prompts, in milliseconds.
    pub median_hit_ms: f64,
    /// See `median_hit_ms`.
    pub median_miss_ms: f64,
    /// b's own prompts came back sooner than the bound: not generated (a cache that
    /// answers b its own repeats, whatever it asks for), so the pairs cannot show a's
    /// answers given to b, and "no reuse" is not decided (`decision` is `Undecided`).
    pub misses_cached: bool,
}

/// The rule of the timed pairs: b's copy of one of a's requests (the hit arm) against
/// b's own prompt of the same shape sent a second time, asking for as many tokens (the
/// miss arm), each by its whole answer time, in an order drawn per pair. A stored
/// answer skips the generation; without a cache keyed without the caller the copy is
/// generated as the miss arm is, and its prefix is cached for b at most as the miss
/// arm's is, so it comes sooner in at most half the pairs whatever the noise. Judged
/// as the timing case judges another key ([`LevelTest::across`]): *reused* when the
/// copy comes sooner in more than half the pairs, by any margin; *not reused* only when
/// a speed-up of the bound (`equivalence` × the model's answer time for b's `fresh`
/// prompts, new to every cache, measured before the pairs) or more is ruled out, and
/// the miss arms came back no sooner than the bound (generated, not answered by a
/// cache of b's own); both tests at `alpha`, anytime-valid, so the case stops at the
/// first pair that decides.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timed {
    /// The sequential tests' error rate.
    pub alpha: f64,
    /// The share of the model's answer time ruled out.
    pub equivalence: f64,
}

impl Timed {
    /// The bound for a model that answers in `model_ms` when only the generation is
    /// left.
    pub fn bound_ms(&self, model_ms: f64) -> f64 {
        (self.equivalence * model_ms).max(0.0)
    }

    /// A fresh test at `bound_ms`.
    pub fn test(&self, bound_ms: f64) -> LevelTest {
        LevelTest::across(self.alpha, bound_ms)
    }

    /// What `pairs` (each the copy's and the miss arm's time, in ms, in the order sent)
    /// decide at `bound_ms`, read up to the first pair that decides.
    pub fn judge(&self, bound_ms: f64, pairs: &[(f64, f64)]) -> TimedVerdict {
        let mut test = self.test(bound_ms);
        let mut read = pairs.len();
        for (i, (hit, miss)) in pairs.iter().enumerate() {
            if test.observe(miss - hit) != Decision::Undecided {
                read = i + 1;
                break;
            }
        }
        let median = |v: Vec<f64>| crate::judge::timing::median(v);
        let median_miss_ms = median(pairs[..read].iter().map(|p| p.1).collect());
        // "No reuse" holds against a miss arm the model generated: one that came back
        // sooner than the bound was served from somewhere.
        let misses_cached = test.decision() == Decision::NoEffect && median_miss_ms < bound_ms;
        TimedVerdict {
            decision: if misses_cached {
                Decision::Undecided
            } else {
                test.decision()
            },
            pairs: read,
            sooner: pairs[..read].iter().filter(|(h, m)| h < m).count(),
            bound_ms,
            median_hit_ms: median(pairs[..read].iter().map(|p| p.0).collect()),
            median_miss_ms,
            misses_cached,
        }
    }
}

impl TimedVerdict {
    /// The verdict in words, for a finding or a pass.
    pub fn describe(&self, alpha: f64) -> String {
        let head = format!(
            "in {} of {} timed pairs tenant b's copy of one of tenant a's requests came sooner than b's own prompt \
             of the same shape (median {:.0} ms against {:.0} ms)",
            self.sooner, self.pairs, self.median_hit_ms, self.median_miss_ms
        );
        match self.decision {
            Decision::Effect => format!("{head}: a's answers given again (sign test at alpha {alpha:e})"),
            Decision::NoEffect => format!(
                "{head}: a cache answering copies {:.0} ms sooner or more in most pairs is ruled out (sign test at \
                 alpha {alpha:e})",
                self.bound_ms
            ),
            Decision::Undecided if self.misses_cached => format!(
                "{head}: b's own prompts came back sooner than the bound, {:.0} ms, so something answers b its \
                 repeats without the model, and the pairs cannot show a cache that renames its hits",
                self.bound_ms
            ),
            Decision::Undecided => format!(
                "{head}: undecided at alpha {alpha:e}, so a cache that renames its hits is not ruled out by speed"
            ),
        }
    }
}

/// A stored answer stands out by its speed only when it comes at least this much
/// sooner than the model answers (and in a quarter of the time).
pub const MIN_GAIN_MS: f64 = 50.0;

/// What identifies one answer.
#[derive(Clone, Debug)]
pub struct Answer {
    /// Its line.
    pub seq: u64,
    /// The id the vendor gave it.
    pub id: Option<String>,
    /// Its creation time, in seconds.
    pub created: Option<u64>,
    /// Its content.
    pub content: String,
    /// How long it took, in milliseconds.
    pub total_ms: f64,
}

impl Answer {
    /// The answer recorded at `seq`, if it was answered.
    pub fn of(seq: u64, ex: &Exchange) -> Option<Answer> {
        if !ex.is_success() {
            return None;
        }
        // A body's top level, or the first frame that says.
        let fields = |v: &serde_json::Value| {
            (
                v["id"].as_str().filter(|s| !s.is_empty()).map(str::to_owned),
                v["created"].as_u64(),
            )
        };
        let (mut id, mut created) = ex
            .body
            .as_deref()
            .and_then(|b| serde_json::from_str::<serde_json::Value>(b).ok())
            .map(|v| fields(&v))
            .unwrap_or_default();
        for frame in &ex.frames {
            if id.is_some() && created.is_some() {
                break;
            }
            if let Ok(v) = serde_json::from_str::<serde_json::Value>(&frame.data) {
                let (i, c) = fields(&v);
                id = id.or(i);
                created = created.or(c);
            }
        }
        Some(Answer {
            seq,
            id,
            created,
            content: ex.content.clone(),
            total_ms: ex.timings.total_ms,
        })
    }
}

/// Which signs of reuse the vendor's answers can carry, from b's fresh answers.
pub struct Signs {
    /// Ids are per answer: b's fresh answers' ids differ from each other and from a's.
    pub ids: bool,
    /// `created` moves: b's fresh answers, made after the wait, are later than a's.
    pub times: bool,
    /// How soon the model answers b's own prompt a second time (its prefix cached,
    /// its answer not), where that is slow enough for a stored answer to stand out.
    pub fresh_ms: Option<f64>,
    /// How soon the model answered b's fresh prompts (new to every cache) at best,
    /// however soon: the timed pairs' bound is a share of it; none when they were not
    /// answered.
    pub model_ms: Option<f64>,
}

impl Signs {
    /// The signs `first`'s vendor gives, from b's `fresh` answers and its `warm`
    /// one (its first fresh prompt again, one token more to give).
    pub fn of(first: &Answer, fresh: &[Answer], warm: Option<&Answer>) -> Signs {
        let ids = first.id.is_some()
            && fresh.iter().all(|f| f.id.is_some() && f.id != first.id)
            && (fresh.len() < 2 || fresh[0].id != fresh[1].id);
        let times = first
            .created
            .is_some_and(|t| fresh.iter().any(|f| f.created.is_some_and(|c| c > t)));
        let fresh_ms = warm
            .map(|w| fresh.iter().map(|f| f.total_ms).fold(w.total_ms, f64::min))
            .filter(|ms| *ms >= 4.0 * MIN_GAIN_MS / 3.0);
        let model_ms = fresh.iter().map(|f| f.total_ms).reduce(f64::min);
        Signs {
            ids,
            times,
            fresh_ms,
            model_ms,
        }
    }

    /// Whether any sign could show a stored answer.
    pub fn any(&self) -> bool {
        self.ids || self.times || self.fresh_ms.is_some()
    }

    /// Why `x` is `first` given again, if it is. Its speed counts only where `x`'s
    /// prompt is new to its caller (`by_speed`): a prompt the caller sent before may be
    /// answered sooner by its own prefix cache, which is no harm.
    pub fn reused(&self, first: &Answer, x: &Answer, by_speed: bool) -> Option<String> {
        let same_content = !first.content.is_empty() && x.content == first.content;
        if self.ids && x.id.is_some() && x.id == first.id {
            return Some(format!("the id {}", x.id.as_deref().unwrap_or_default()));
        }
        if self.times && same_content && x.created.is_some() && x.created == first.created {
            return Some(format!(
                "its content and its creation time {}, made before the wait",
                x.created.unwrap_or_default()
            ));
        }
        let fresh = self.fresh_ms.filter(|_| by_speed)?;
        (same_content && 4.0 * x.total_ms < fresh && fresh - x.total_ms >= MIN_GAIN_MS).then(|| {
            format!(
                "its content, in {:.0} ms where the model took at least {fresh:.0} ms",
                x.total_ms
            )
        })
    }
}

/// One of b's requests like a's that was given a's answer.
#[derive(Clone, Debug, PartialEq)]
pub struct Reused {
    /// Its place among the `tried` answers.
    pub index: usize,
    /// The paraphrase (a semantic cache).
    pub semantic: bool,
    /// The sign, in words.
    pub why: String,
}

/// Judges b's answers to requests like a's (`tried`: each answer, whether it is the
/// paraphrase, and whether its prompt is new to b): which were a's answer given again.
pub fn judge(signs: &Signs, first: &Answer, tried: &[(Answer, bool, bool)]) -> Vec<Reused> {
    tried
        .iter()
        .enumerate()
        .filter_map(|(index, (x, semantic, new_to_b))| {
            signs.reused(first, x, *new_to_b).map(|why| Reused {
                index,
                semantic: *semantic,
                why,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(seq: u64, id: &str, created: u64, content: &str, total_ms: f64) -> Answer {
        Answer {
            seq,
            id: (!id.is_empty()).then(|| id.to_owned()),
            created: (created > 0).then_some(created),
            content: content.into(),
            total_ms,
        }
    }

    /// SplitMix64, for noise the same on every run.
    fn noise(state: &mut u64) -> f64 {
        *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }

    #[test]
    fn timed_pairs_find_a_renaming_cache_through_noise_and_rule_one_out_without_one() {
        let rule = Timed {
            alpha: DEFAULT_TIMING_ALPHA,
            equivalence: DEFAULT_EQUIVALENCE,
        };
        let bound = rule.bound_ms(68.0);
        assert_eq!(bound, 34.0);
        let mut state = 7;
        // A model at 68 ms, jitter of up to 60 ms on every answer (a loaded machine).
        let mut jitter = || 60.0 * noise(&mut state);
        // A renaming cache: copies in 1 ms plus jitter; b's own prompts generated.
        let cached: Vec<(f64, f64)> = (0..24).map(|_| (1.0 + jitter(), 68.0 + jitter())).collect();
        let t = rule.judge(bound, &cached);
        assert_eq!(t.decision, Decision::Effect, "{t:?}");
        assert!(t.pairs <= 20 && t.sooner * 10 >= t.pairs * 7, "{t:?}");
        assert!(t.describe(rule.alpha).contains("given again"));
        // No cache: both arms generated, the same jitter.
        let honest: Vec<(f64, f64)> = (0..24).map(|_| (68.0 + jitter(), 68.0 + jitter())).collect();
        let t = rule.judge(bound, &honest);
        assert_eq!(t.decision, Decision::NoEffect, "{t:?}");
        assert!(
            t.describe(rule.alpha)
                .contains("34 ms sooner or more in most pairs is ruled out")
        );
        // b's own repeats answered by a cache of its own: no verdict on speed.
        let own: Vec<(f64, f64)> = (0..24).map(|_| (68.0 + jitter(), 1.0 + jitter() / 10.0)).collect();
        let t = rule.judge(bound, &own);
        assert!(t.misses_cached && t.decision == Decision::Undecided, "{t:?}");
        // Under the null, "reused" comes no more often than alpha allows: the copies
        // and b's own prompts exchangeable, in 20,000 runs of 24 pairs.
        let mut false_alarms = 0;
        for _ in 0..20_000 {
            let pairs: Vec<(f64, f64)> = (0..24).map(|_| (jitter(), jitter())).collect();
            false_alarms += u32::from(rule.judge(bound, &pairs).decision == Decision::Effect);
        }
        assert!(false_alarms <= 2, "{false_alarms} false alarms in 20,000");
    }

    #[test]
    fn a_reuse_shows_by_id_by_time_and_content_or_by_speed_and_only_where_the_sign_is_sound() {
        let first = answer(1, "c-1", 100, "RR-1 and a summary", 300.0);
        let fresh = [
            answer(5, "c-5", 103, "RR-2 and a summary", 310.0),
            answer(9, "c-9", 104, "RR-2 and a summary", 290.0),
        ];
        let warm = answer(6, "c-6", 103, "RR-2 and a summary", 280.0);
        let signs = Signs::of(&first, &fresh, Some(&warm));
        assert!(signs.ids && signs.times && signs.fresh_ms == Some(280.0));
        // Without the model's time with its prompt cached, speed is no sign.
        assert!(Signs::of(&first, &fresh, None).fresh_ms.is_none());
        // The same id.
        assert!(
            signs
                .reused(&first, &answer(6, "c-1", 103, "other", 300.0), false)
                .unwrap()
                .contains("id c-1")
        );
        // A new id, a's time and content: a stored answer renamed but not re-timed.
        assert!(
            signs
                .reused(&first, &answer(6, "c-6", 100, "RR-1 and a summary", 300.0), false)
                .is_some()
        );
        // A new id and time, a's content at once.
        let quick = answer(6, "c-6", 103, "RR-1 and a summary", 20.0);
        assert!(signs.reused(&first, &quick, true).unwrap().contains("20 ms"));
        // Not where the caller sent the prompt before (its own prefix cache).
        assert!(signs.reused(&first, &quick, false).is_none());
        // A's content as a fresh answer gives it (a deterministic model): no reuse.
        assert!(
            signs
                .reused(&first, &answer(6, "c-6", 103, "RR-1 and a summary", 270.0), true)
                .is_none()
        );
        // Faster, but not a's content: no reuse.
        assert!(
            signs
                .reused(&first, &answer(6, "c-6", 103, "something else", 20.0), true)
                .is_none()
        );

        // A vendor whose every answer says `chatcmpl-1`, with no time, and a model
        // that answers in 20 ms: no sign is sound, and none is used.
        let first = answer(1, "chatcmpl-1", 0, "x", 20.0);
        let fresh = [
            answer(5, "chatcmpl-1", 0, "y", 20.0),
            answer(9, "chatcmpl-1", 0, "y", 21.0),
        ];
        let signs = Signs::of(&first, &fresh, Some(&fresh[1]));
        assert!(!signs.any());
        assert!(
            signs
                .reused(&first, &answer(6, "chatcmpl-1", 0, "x", 1.0), true)
                .is_none()
        );
    }
}
