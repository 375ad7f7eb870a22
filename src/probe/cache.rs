//! `cache.cross-tenant-timing` (T7): a prompt prefix one customer sent must not be
//! served from cache to another customer, whose time to answer would then reveal it.
//!
//! The shape of the test is the one the 2025 audit of public APIs used (Gu et al.,
//! "Auditing Prompt Caching in Language Model APIs"): a *victim* key sends a fresh
//! prompt of about `prompt_tokens` tokens (one token of answer); an *attacker* key
//! then sends a prompt sharing its prefix (hit arm) and a fresh prompt of the same
//! length (miss arm), in random order; the hit arm is faster only if the victim's
//! prefix was cached for the attacker. It runs at three levels of attacker:
//!
//! 1. the same key (the *control*): shows that a cache exists and that the test can
//!    see it; "not shared" means nothing unless the owner's own repeats are seen;
//! 2. another key of the same organisation (profile `org`), where the profile has one;
//! 3. a key of another organisation.
//!
//! Every time is the time until the vendor began to answer (the response headers of a
//! one-token answer), never the whole answer: a server that writes its headers and
//! body apart adds its transfer jitter to the total only. Instead of a fixed 250 pairs
//! per level and a Kolmogorov–Smirnov test, each level runs anytime-valid sequential
//! tests ([`crate::judge::timing`]) over its pairs and stops as soon as its verdict
//! holds at the case's `alpha`: for the control, whether the hit arm is faster in more
//! than half of the pairs (cache) or not in at least `effect` of them (no cache of that
//! size); for the others, whether the hit arm is faster in more than half the pairs by
//! any margin (shared), or faster by more than the bound (`equivalence` × the
//! control's median speed-up) in fewer than half (not shared: a speed-up of the bound
//! is ruled out). Noise that hides both leaves the level undecided. Every raw time is
//! in the transcript and in the outcome.
//!
//! Where the vendor reports cached prompt tokens (`prompt_tokens_details.cached_tokens`,
//! llama.cpp's `timings.cache_n`), a hit arm reported cached for at least half the
//! shared prefix beyond its miss arm is the vendor's own word that the prefix was
//! reused: direct evidence, beside the timing.
//!
//! Verdicts: no cache observed at the control → pass, stating what it rules out (a
//! cache answering `effect` of repeats sooner, for every key: a cache shared across
//! keys is one its owner hits too); sharing at a level → fail (`SharedPrefixCache`), unless the profile declares
//! that scope (`[declared] prefix_cache_scope`), then reported as a declared risk; no
//! sharing at every level → pass; a level undecided within `max_pairs` → inconclusive.
//! With `cache_salt = true` in the profile each tenant sends its own salt, so the
//! control checks that the same salt hits and the other levels that different salts
//! miss.

use super::{Context, ParamsError, Sizer, conclude, describe};
use crate::adapter::ChatRequest;
use crate::judge::sequential::Decision;
use crate::judge::timing::{LevelTest, Rule, decide, median_speedup};
use crate::outcome::{CacheDecision, Finding, FindingCode, Outcome, TimingLevel, TimingPair};
use crate::prompt::Filler;
use crate::session::SessionError;
use crate::wording::Wording;
use crate::vendor::{CacheScope, TenantSpec, VendorProfile};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Parameters of `cache.cross-tenant-timing`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TimingParams {
    /// Tokens of each prompt (capped at the context window less a margin).
    #[serde(default = "default_prompt_tokens")]
    pub prompt_tokens: u64,
    /// The chance of each wrong verdict (a cache or sharing seen where there is none,
    /// or missed where there is one of the tested size).
    #[serde(default = "default_alpha")]
    pub alpha: f64,
    /// The most hit/miss pairs per level before it is called undecided.
    #[serde(default = "default_max_pairs")]
    pub max_pairs: u32,
    /// The effect the control tests against: the share of pairs in which a cache
    /// makes the hit arm faster. In (0.5, 1).
    #[serde(default = "default_effect")]
    pub effect: f64,
    /// The speed-up "not shared" rules out, as a share of the control's median
    /// speed-up. In (0, 1].
    #[serde(default = "default_equivalence")]
    pub equivalence: f64,
}

fn default_prompt_tokens() -> u64 {
    4096
}
fn default_alpha() -> f64 {
    1e-6
}
fn default_max_pairs() -> u32 {
    250
}
fn default_effect() -> f64 {
    0.75
}
fn default_equivalence() -> f64 {
    crate::judge::timing::DEFAULT_EQUIVALENCE
}

impl TimingParams {
    pub(crate) fn validate(&self) -> Result<(), ParamsError> {
        let invalid = |field, problem: String| Err(ParamsError::Invalid { field, problem });
        if self.prompt_tokens < 256 {
            return invalid(
                "prompt_tokens",
                format!(
                    "is {}; a cache is seen only on prompts of at least 256 tokens",
                    self.prompt_tokens
                ),
            );
        }
        if !(self.alpha > 0.0 && self.alpha < 0.5) {
            return invalid("alpha", format!("is {}; it must be in (0, 0.5)", self.alpha));
        }
        if self.max_pairs < 5 {
            return invalid("max_pairs", format!("is {}; allow at least 5", self.max_pairs));
        }
        if !(self.effect > 0.5 && self.effect < 1.0) {
            return invalid("effect", format!("is {}; it must be in (0.5, 1)", self.effect));
        }
        if !(self.equivalence > 0.0 && self.equivalence <= 1.0) {
            return invalid(
                "equivalence",
                format!(
                    "is {}; it must be in (0, 1] (a share of the control's speed-up)",
                    self.equivalence
                ),
            );
        }
        Ok(())
    }
}

/// Pairs in a row with a failed request after which a level stops, undecided.
const MAX_FAILED_IN_A_ROW: u32 = 5;

/// The last words of the victim's prompts and of the attacker's, drawn per run
/// ([`crate::wording`]; the attacker's drawn again until it differs): they differ, so
/// only the prefix before them can be shared.
const TAIL: Wording = Wording(
    "\n\n{N}[,|:|-] [answer with one word|in a single word|in one word|using one word only|with just one word|briefly|in a word|one word only|keep it to one word|reply in one word][,|:|;] [what is|what's|name|give|tell me|state|identify|say] [this text about|the topic of the text above|the subject here|the subject of this text|the theme of these notes|the main topic|what this is about|the gist of it|the topic|the focus of the notes][?|.|!] [Thanks|Thank you|Cheers|Regards|Best|Many thanks|Kind regards|Ta], {N}.",
);

/// Which key attacks, relative to the victim's.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    SameKey,
    SameOrg,
    OtherOrg,
}

impl Level {
    fn name(self) -> &'static str {
        match self {
            Level::SameKey => crate::judge::timing::SAME_KEY,
            Level::SameOrg => "same organisation",
            Level::OtherOrg => "other organisation",
        }
    }

    /// Whether the vendor declares that a cache is shared at this level.
    fn declared(self, scope: Option<CacheScope>) -> bool {
        match self {
            Level::SameKey => true,
            Level::SameOrg => scope.is_some_and(|s| s >= CacheScope::Org),
            Level::OtherOrg => scope == Some(CacheScope::Global),
        }
    }
}

/// The probe `cache.cross-tenant-timing`.
pub struct CrossTenantTiming;

impl super::Probe for CrossTenantTiming {
    const KIND: &'static str = crate::judge::kind::TIMING;
    type Params = TimingParams;

    fn validate(p: &TimingParams) -> Result<(), super::ParamsError> {
        p.validate()
    }

    async fn run(p: &TimingParams, ctx: Context<'_>) -> Outcome {
        super::settled(timing(p, ctx).await)
    }

    fn ceiling(p: &TimingParams, profile: &crate::vendor::VendorProfile) -> Option<super::Ceiling> {
        let (requests, max_tokens) = ceiling(p, profile);
        Some(super::Ceiling::Like { requests, max_tokens })
    }
}

/// Runs `cache.cross-tenant-timing`.
pub async fn timing(p: &TimingParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let profile = ctx.session.profile();
    let (victim, levels) = levels(&profile.tenants);
    let declared = profile.declared.as_ref().and_then(|d| d.prefix_cache_scope);
    let salts = profile.cache_salt;
    let tokens = p.prompt_tokens.min(profile.context_window.saturating_sub(64).max(64));
    let mut run = Run {
        ctx,
        p,
        sizer: Sizer::calibrated(ctx, &victim).await?,
        tokens,
        salts,
        pair_index: 0,
        errors: Vec::new(),
    };

    let mut notes = Vec::new();
    let mut findings = Vec::new();
    let rule = Rule {
        alpha: p.alpha,
        effect: p.effect,
        equivalence: p.equivalence,
    };
    let control = run.level(Level::SameKey, &victim, &victim, LevelTest::control(&rule), 0.0).await?;
    let mut levels_done = vec![control];
    let control = &levels_done[0];
    let control_speedup = median_speedup(&control.pairs);
    let mut verdict_blocked = None;
    match control.decision {
        CacheDecision::CacheObserved => {
            notes.push(format!(
                "a cache exists: the same key's repeated prefix was faster in {}/{} pairs (median {control_speedup:.1} ms){}",
                count_faster(control, 0.0),
                control.pairs.len(),
                usage_note(control)
            ));
            let bound = rule.bound_ms(&control.pairs);
            for (level, attacker) in &levels {
                let test = LevelTest::across(p.alpha, bound);
                let mut done = run.level(*level, &victim, attacker, test, bound).await?;
                match done.decision {
                    CacheDecision::Shared if level.declared(declared) => {
                        done.decision = CacheDecision::SharedAsDeclared;
                        notes.push(format!(
                            "declared risk: tenant {victim}'s prefixes are served from cache to tenant {attacker} ({}), as the profile declares",
                            level.name()
                        ));
                    }
                    CacheDecision::Shared => findings.push(Finding {
                        code: FindingCode::SharedPrefixCache,
                        message: format!(
                            "tenant {victim}'s prompt prefixes are served from cache to tenant {attacker} ({}): its prompts sharing them began to be answered sooner in {}/{} pairs (median {:.1} ms sooner){}",
                            level.name(),
                            count_faster(&done, 0.0),
                            done.pairs.len(),
                            median_speedup(&done.pairs),
                            usage_note(&done)
                        ),
                        leak: None,
                    }),
                    CacheDecision::NotShared => notes.push(format!(
                        "not shared with tenant {attacker} ({}): a speed-up of {bound:.1} ms or more ({:.0}% of the control's) is ruled out, {}/{} pairs faster by that much (sooner at all in {})",
                        level.name(),
                        p.equivalence * 100.0,
                        count_faster(&done, bound),
                        done.pairs.len(),
                        count_faster(&done, 0.0)
                    )),
                    _ => {
                        verdict_blocked.get_or_insert(format!(
                            "sharing with tenant {attacker} ({}) undecided after {} pairs: sooner in {}, by over the {bound:.1} ms bound in {}; the timing is too noisy to find a speed-up or rule one out at alpha {:e}",
                            level.name(),
                            done.pairs.len(),
                            count_faster(&done, 0.0),
                            count_faster(&done, bound),
                            p.alpha
                        ));
                    }
                }
                levels_done.push(done);
            }
        }
        CacheDecision::NoCacheObserved => {
            // What the owner cannot see of its own prefix, no other key can: a cache
            // shared across keys is a cache its owner hits too. A pass, with what it
            // rules out.
            notes.push(format!(
                "no prefix cache observed even for the same key: the repeated prefix was sooner in {}/{} pairs, so a cache answering at least {:.0}% of repeats sooner is ruled out for every key, shared or not (error at most {:e})",
                count_faster(control, 0.0),
                control.pairs.len(),
                p.effect * 100.0,
                p.alpha
            ));
        }
        _ => {
            verdict_blocked = Some(format!(
                "the control (same key) was undecided after {} pairs: timing too noisy to see a cache at alpha {:e}",
                control.pairs.len(),
                p.alpha
            ));
        }
    }
    if !run.errors.is_empty() {
        notes.push(format!("{} requests failed, first {}", run.errors.len(), run.errors[0]));
    }
    let pairs: usize = levels_done.iter().map(|l| l.pairs.len()).sum();
    let mut what = format!(
        "{} pairs over {} levels at alpha {:e} ({} requests){}",
        pairs,
        levels_done.len(),
        p.alpha,
        run.sizer.coverage.requests,
        if salts {
            ", each tenant with its own cache_salt"
        } else {
            ""
        },
    );
    for note in notes {
        what.push_str("; ");
        what.push_str(&note);
    }
    let reached = match verdict_blocked {
        Some(why) => Err(format!("{why}; {what}")),
        None => Ok(what),
    };
    let mut outcome = conclude(findings, reached, run.sizer.coverage);
    outcome.timing = levels_done;
    Ok(outcome)
}

/// The most requests the case can send to `profile`'s vendor, and each one's
/// `max_tokens`: every level runs to `max_pairs` pairs of three requests, after one
/// calibration request.
pub fn ceiling(p: &TimingParams, profile: &VendorProfile) -> (u64, u64) {
    let (_, attackers) = levels(&profile.tenants);
    let levels = 1 + attackers.len() as u64;
    (1 + levels * u64::from(p.max_pairs) * 3, 1)
}

/// The victim, and the attackers beyond the control: another key of the victim's
/// organisation, and a key of another organisation, where the profile has them. The
/// victim is the first tenant that shares its organisation with another, else the
/// first.
fn levels(tenants: &[TenantSpec]) -> (String, Vec<(Level, String)>) {
    let partner = |v: &TenantSpec| tenants.iter().find(|t| t.label != v.label && t.org() == v.org());
    let victim = tenants.iter().find(|v| partner(v).is_some()).unwrap_or(&tenants[0]);
    let mut levels = Vec::new();
    if let Some(t) = partner(victim) {
        levels.push((Level::SameOrg, t.label.clone()));
    }
    if let Some(t) = tenants.iter().find(|t| t.org() != victim.org()) {
        levels.push((Level::OtherOrg, t.label.clone()));
    }
    (victim.label.clone(), levels)
}

struct Run<'a, 'p> {
    ctx: Context<'a>,
    p: &'p TimingParams,
    sizer: Sizer<'a>,
    tokens: u64,
    salts: bool,
    pair_index: u32,
    errors: Vec<String>,
}

impl Run<'_, '_> {
    /// The victim's tail and the attacker's.
    fn tails(&self) -> (String, String) {
        let secret = self.ctx.session.secret();
        let victim = secret.say("cache.victim", 0, TAIL);
        let attacker = (0..)
            .map(|draw| secret.say("cache.attacker", draw, TAIL))
            .find(|t| *t != victim)
            .expect("a tail other than the victim's");
        (victim, attacker)
    }

    fn request(&self, tenant: &str, prompt: String) -> ChatRequest {
        ChatRequest {
            cache_salt: self.salts.then(|| {
                format!(
                    "{:016x}",
                    self.ctx.session.secret().seed(tenant, self.ctx.case_id, u32::MAX)
                )
            }),
            ..ChatRequest::user(prompt, 1)
        }
    }

    /// Runs one level's pairs until its sequential tests decide or the budget ends.
    async fn level(
        &mut self,
        level: Level,
        victim: &str,
        attacker: &str,
        mut test: LevelTest,
        threshold_ms: f64,
    ) -> Result<TimingLevel, SessionError> {
        let mut pairs = Vec::new();
        let (mut cached_reported, mut cached_prefix) = (0, 0);
        let mut decision = Decision::Undecided;
        let mut tries = 0;
        let mut failed_in_a_row = 0;
        while decision == Decision::Undecided && tries < self.p.max_pairs {
            tries += 1;
            self.pair_index += 1;
            let builder = self.sizer.builder().clone();
            let prefix = builder.build(self.tokens, &Filler::plain(self.sizer.seed(victim)), "", &[], "");
            let fresh = builder.build(self.tokens, &Filler::plain(self.sizer.seed(attacker)), "", &[], "");
            let shared_tokens = self.sizer.tokens_of(&prefix);
            let (victim_tail, attacker_tail) = self.tails();
            let seeded = self
                .sizer
                .send_request(
                    victim,
                    &self.request(victim, format!("{prefix}{victim_tail}")),
                    false,
                )
                .await?;
            let hit_request = self.request(attacker, format!("{prefix}{attacker_tail}"));
            let miss_request = self.request(attacker, format!("{fresh}{attacker_tail}"));
            // The order of the arms, from the run secret: unpredictable to the vendor.
            let hit_first = self
                .ctx
                .session
                .secret()
                .seed(attacker, self.ctx.case_id, self.pair_index)
                & 1
                == 1;
            let (hit, miss) = if hit_first {
                let hit = self.sizer.send_request(attacker, &hit_request, false).await?;
                (hit, self.sizer.send_request(attacker, &miss_request, false).await?)
            } else {
                let miss = self.sizer.send_request(attacker, &miss_request, false).await?;
                (self.sizer.send_request(attacker, &hit_request, false).await?, miss)
            };
            let failed = [&seeded, &hit, &miss].into_iter().find(|s| !s.exchange.is_success());
            if let Some(f) = failed {
                self.errors.push(format!("#{} ({})", f.seq, describe(&f.exchange)));
                failed_in_a_row += 1;
                if failed_in_a_row == MAX_FAILED_IN_A_ROW {
                    // A vendor that answers nothing cannot be timed: stop, undecided.
                    break;
                }
                continue;
            }
            failed_in_a_row = 0;
            let (h, m) = (&hit.exchange, &miss.exchange);
            if let (Some(hc), Some(mc)) = (
                h.usage.and_then(|u| u.cached_tokens),
                m.usage.and_then(|u| u.cached_tokens),
            ) {
                cached_reported += 1;
                if hc >= mc + shared_tokens / 2 {
                    cached_prefix += 1;
                }
            }
            let pair = TimingPair {
                hit_ms: h.timings.first_answer_ms(),
                miss_ms: m.timings.first_answer_ms(),
                hit_seq: hit.seq,
                miss_seq: miss.seq,
            };
            decision = test.observe(pair.speedup_ms());
            pairs.push(pair);
        }
        let decision = decide(level == Level::SameKey, decision, cached_reported, cached_prefix);
        let (against_none, against_effect) = test.log10_evidence();
        Ok(TimingLevel {
            level: level.name().to_owned(),
            victim: victim.to_owned(),
            attacker: attacker.to_owned(),
            threshold_ms,
            pairs,
            decision,
            log10_evidence: [against_none, against_effect],
            cached_reported,
            cached_prefix,
        })
    }
}

fn count_faster(level: &TimingLevel, threshold: f64) -> usize {
    level.pairs.iter().filter(|p| p.speedup_ms() > threshold).count()
}

fn usage_note(level: &TimingLevel) -> String {
    if level.cached_reported == 0 {
        String::new()
    } else {
        format!(
            "; the vendor's usage reported the shared prefix cached in {}/{} pairs",
            level.cached_prefix, level.cached_reported
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tenant(label: &str, org: Option<&str>) -> TenantSpec {
        TenantSpec {
            label: label.into(),
            credential_env: format!("KEY_{label}"),
            org: org.map(str::to_owned),
        }
    }

    #[test]
    fn levels_follow_the_organisations() {
        let (v, l) = levels(&[tenant("a", None), tenant("b", None)]);
        assert_eq!(v, "a");
        assert!(matches!(l.as_slice(), [(Level::OtherOrg, b)] if b == "b"));
        let (v, l) = levels(&[
            tenant("x", Some("o2")),
            tenant("a", Some("o1")),
            tenant("a2", Some("o1")),
        ]);
        assert_eq!(v, "a");
        let names: Vec<(&str, &str)> = l.iter().map(|(lv, t)| (lv.name(), t.as_str())).collect();
        assert_eq!(names, [("same organisation", "a2"), ("other organisation", "x")]);
    }

    #[test]
    fn declared_scopes_cover_their_levels() {
        assert!(!Level::SameOrg.declared(None));
        assert!(Level::SameOrg.declared(Some(CacheScope::Org)));
        assert!(!Level::OtherOrg.declared(Some(CacheScope::Org)));
        assert!(Level::OtherOrg.declared(Some(CacheScope::Global)));
    }
}
