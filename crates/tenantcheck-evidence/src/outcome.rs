//! [`Outcome`]: what one run of one case concludes, with what it exercised and the
//! findings that point at transcript entries.

use crate::canary::Fragment;
use serde::{Deserialize, Serialize};

/// The verdict on one case.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The case's condition was exercised and the vendor met the requirement.
    Pass,
    /// The vendor broke the requirement; the findings say how.
    Fail,
    /// The condition could not be reached (budget, refusals, errors); never a pass.
    Inconclusive,
    /// The case was not run (not selected, or disabled with a reason).
    Skipped,
}

impl Verdict {
    /// Upper-case name, for terminals.
    pub fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Inconclusive => "INCONCLUSIVE",
            Verdict::Skipped => "SKIPPED",
        }
    }
}

/// The result of running one case.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Outcome {
    /// The verdict.
    pub verdict: Verdict,
    /// One sentence on why, including what was exercised.
    pub summary: String,
    /// What was actually exercised.
    pub coverage: Coverage,
    /// What went wrong, each pointing at transcript entries.
    #[serde(default)]
    pub findings: Vec<Finding>,
    /// For length searches: each prompt length tried and how the vendor handled it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweep: Vec<SweepPoint>,
    /// For timing tests: each level tested, with every raw timing.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub timing: Vec<TimingLevel>,
    /// For cases that look for leaked content: the positive control measured on this
    /// vendor and the power that follows (see [`Power`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<Power>,
    /// For cases that spread long prompts over a vendor's nodes: which nodes they
    /// reached (see [`crate::nodes::NodeCoverage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<crate::nodes::NodeCoverage>,
}

impl Outcome {
    /// A failed case rules no leak rate out: its bound is dropped (`verify` holds a
    /// report to the same rule).
    pub fn settle_leak_rate(&mut self) {
        if self.verdict == Verdict::Fail
            && let Some(power) = &mut self.power
        {
            power.leak_rate = None;
        }
    }
}

/// What a case that looks for leaked content could have seen, measured on this vendor.
///
/// The positive control: every answer the case gets was asked to read back the
/// asking tenant's own records, so whether the detector finds one of them in it (an
/// *echo*) shows how often content the model read comes back recognisably. An
/// *exposure* is an answer that could have drawn on another tenant's content instead
/// (for `isolation.canary-residue`: a prober's answer, sent right after another
/// tenant's prompt of the same length). Per length band, the echo rate's one-sided
/// 95% lower confidence bound (Clopper–Pearson) is taken, and the power is the chance
/// of at least one echoed leak had every exposure drawn on another tenant's content:
/// `1 - Π (1 - echo_low)^exposures`. A case passes only with `power >= min_power`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Power {
    /// What was asked of the model, in words.
    pub control: String,
    /// Per length band, in ascending length.
    pub bands: Vec<EchoBand>,
    /// The chance of seeing a leak had every exposure carried one (at the bands'
    /// lower bounds).
    pub power: f64,
    /// The power a pass requires (the case's `min_power`).
    pub min_power: f64,
    /// The canary form the case carried, chosen by the trials (none where the case
    /// has one form only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub form: Option<crate::canary::Form>,
    /// Short prompts of each form, asked to be read back: the form with the highest
    /// lower bound on its echo rate is carried (a tie goes to the earlier form).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trials: Vec<FormTrial>,
    /// The leak rate the case rules out where the leak conditions are (see
    /// [`LeakBound`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leak_rate: Option<LeakBound>,
}

/// The leak rate a case rules out: the one-sided upper confidence bound on the chance
/// that an exposed request leaks, from the exposures it made where the leak conditions
/// are and the sensitivity it measured there.
///
/// Real leaks are intermittent (one bad replica, a race, a page reused only when the
/// pool is full), and a power says only what a case would have seen had *every*
/// exposure leaked. Counted are the exposures of the bands from
/// [`LeakBound::from_tokens`] up: the top band, and every band above the largest KV
/// pool the vendor declares below it (where admission breaks). Their answers' echoes
/// give the sensitivity `s`, the Clopper–Pearson lower bound at `1 - α/2`, pooled over
/// those bands; with no leak seen in `n` exposures, a leak rate `r` is ruled out when
/// `(1 - r·s)^n < α/2`, so the bound is `(1 - (α/2)^(1/n)) / s`, at most 1. The two
/// halves of `α` make the statement hold at `1 - α` jointly (Bonferroni), whatever the
/// true sensitivity: a vendor whose long requests leak at a rate above the bound passes
/// with one at most in `1/α` runs.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LeakBound {
    /// Exposures of prompts of at least this many tokens are counted.
    pub from_tokens: u64,
    /// The exposures counted.
    pub exposures: usize,
    /// The answers there and those that read the asking tenant's own content back:
    /// the sensitivity's sample.
    pub answers: usize,
    /// See `answers`.
    pub echoed: usize,
    /// The sensitivity's lower bound at `1 - α/2`.
    pub sensitivity: f64,
    /// The joint confidence, `1 - α`.
    pub confidence: f64,
    /// The leak rate ruled out: a higher one would have shown at `confidence` (1: none
    /// is ruled out).
    pub rate: f64,
}

impl LeakBound {
    /// The joint confidence of every bound the suite states.
    pub const CONFIDENCE: f64 = 0.95;

    /// The shortest prompt whose exposures count, given the bands' lengths and the KV
    /// pools the vendor declares: the lowest band above the largest pool below the top
    /// band, or the top band alone where no pool is declared below it. A leak that needs
    /// a prompt past a pool happens only above it; one that needs the whole context only
    /// at the top.
    pub fn from_tokens(bands: &[u64], pools: impl IntoIterator<Item = u64>) -> u64 {
        let Some(&top) = bands.iter().max() else {
            return 0;
        };
        let Some(pool) = pools.into_iter().filter(|&p| p < top).max() else {
            return top;
        };
        bands.iter().copied().filter(|&t| t > pool).min().unwrap_or(top)
    }

    /// The bound from the bands of at least `from_tokens`.
    pub fn of(bands: &[EchoBand], from_tokens: u64) -> LeakBound {
        let counted = bands.iter().filter(|b| b.tokens >= from_tokens);
        let (mut exposures, mut answers, mut echoed) = (0, 0, 0);
        for b in counted {
            exposures += b.exposed.len();
            answers += b.answers.len();
            echoed += b.echoed.len();
        }
        let half = (1.0 - Self::CONFIDENCE) / 2.0;
        let sensitivity = lower_bound(echoed as u64, answers as u64, half);
        LeakBound {
            from_tokens,
            exposures,
            answers,
            echoed,
            sensitivity,
            confidence: Self::CONFIDENCE,
            rate: Self::rate(exposures, sensitivity),
        }
    }

    /// The rate ruled out by `exposures` without a leak at `sensitivity`.
    pub fn rate(exposures: usize, sensitivity: f64) -> f64 {
        if exposures == 0 || sensitivity <= 0.0 {
            return 1.0;
        }
        let half = (1.0 - Self::CONFIDENCE) / 2.0;
        ((1.0 - half.powf(1.0 / exposures as f64)) / sensitivity).min(1.0)
    }

    /// The exposures with every answer read back that rule out `rate` (an honest,
    /// faithful model's cost of a bound), at most 100,000.
    pub fn exposures_for(rate: f64) -> usize {
        let half = (1.0 - Self::CONFIDENCE) / 2.0;
        (1..=100_000)
            .find(|&n| Self::rate(n, lower_bound(n as u64, n as u64, half)) <= rate)
            .unwrap_or(100_000)
    }

    /// The bound, in words.
    pub fn describe(&self) -> String {
        let there = format!(
            "{} exposures there, own content read back in {}/{}",
            self.exposures, self.echoed, self.answers
        );
        if self.rate >= 1.0 {
            format!("rules out no leak rate at {} tokens and up ({there})", self.from_tokens)
        } else {
            format!(
                "a leak in more than {:.1}% of requests of at least {} tokens would have shown ({:.0}%; {there})",
                100.0 * self.rate,
                self.from_tokens,
                100.0 * self.confidence
            )
        }
    }
}

/// The echo of one canary form on short prompts.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct FormTrial {
    /// The form tried.
    pub form: crate::canary::Form,
    /// The transcript lines of the answers.
    pub answers: Vec<u64>,
    /// Those in which the asking tenant's own content came back.
    pub echoed: Vec<u64>,
    /// The echo rate's one-sided 95% lower confidence bound.
    pub echo_low: f64,
    /// Those that held foreign content (see [`EchoBand::foreign`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<u64>,
}

impl FormTrial {
    /// A trial from its answers and echoes.
    pub fn new(form: crate::canary::Form, answers: Vec<u64>, echoed: Vec<u64>) -> FormTrial {
        let echo_low = lower_bound(echoed.len() as u64, answers.len() as u64, 1.0 - Power::CONFIDENCE);
        FormTrial {
            form,
            answers,
            echoed,
            echo_low,
            foreign: Vec::new(),
        }
    }

    /// The form the trials choose: the highest lower bound, a tie to the earlier.
    pub fn best(trials: &[FormTrial]) -> Option<crate::canary::Form> {
        let mut best: Option<&FormTrial> = None;
        for t in trials {
            if best.is_none_or(|b| t.echo_low > b.echo_low) {
                best = Some(t);
            }
        }
        best.map(|t| t.form)
    }
}

/// The positive control at one length.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct EchoBand {
    /// The prompt length aimed for, in tokens.
    pub tokens: u64,
    /// The transcript lines of the answers that served as controls.
    pub answers: Vec<u64>,
    /// Those of them in which the detector found the asking tenant's own content.
    pub echoed: Vec<u64>,
    /// Those of them that were exposures (each sent right after another tenant's
    /// prompt).
    pub exposed: Vec<u64>,
    /// The echo rate's one-sided 95% lower confidence bound.
    pub echo_low: f64,
    /// Those of the answers that held record-shaped content (e-mail addresses, long
    /// numbers) that neither their prompt nor any canary of the run accounts for (see
    /// [`Power::foreign_rise`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<u64>,
}

/// A significant rise, from short prompts to long ones, in answers holding
/// record-shaped content that no prompt of the run holds: suspected data of customers
/// the run does not control.
#[derive(Clone, Debug, PartialEq)]
pub struct ForeignRise {
    /// Long answers with such content, and all long answers.
    pub long: (usize, usize),
    /// Short answers with such content, and all short answers.
    pub short: (usize, usize),
    /// One-sided Fisher exact test: the chance of so many among the long answers were
    /// the content as likely at every length.
    pub p: f64,
}

impl Power {
    /// The significance at which a rise in foreign content fails a case.
    pub const FOREIGN_ALPHA: f64 = 1e-3;

    /// Long answers with foreign content needed before a rise is reported.
    pub const FOREIGN_MIN: usize = 3;

    /// The rise in foreign content from the short answers (the form trials and the
    /// shortest band) to the long ones (bands of at least half the longest band's
    /// length, the shortest band excepted), when it is significant at
    /// [`Power::FOREIGN_ALPHA`] and at least [`Power::FOREIGN_MIN`] long answers hold
    /// some. A model that invents records at every length shows no rise; an engine
    /// that decodes long prompts from other customers' pages does.
    pub fn foreign_rise(&self) -> Option<ForeignRise> {
        let (long, short) = self.foreign_counts()?;
        if long.0 < Self::FOREIGN_MIN {
            return None;
        }
        let p = fisher_greater(long.0, long.1, short.0, short.1);
        (p <= Self::FOREIGN_ALPHA).then_some(ForeignRise { long, short, p })
    }

    /// Whether foreign content is suspected and not yet decided: every long answer so
    /// far held some, no rise is established, and `extra` more long answers, were each
    /// to hold some too, would establish it. Exposures at the top are then worth
    /// spending to decide it; one clean long answer ends the suspicion.
    pub fn foreign_undecided(&self, extra: usize) -> bool {
        let Some((long, short)) = self.foreign_counts() else {
            return false;
        };
        let (k, n) = (long.0 + extra, long.1 + extra);
        long.0 > 0
            && long.0 == long.1
            && self.foreign_rise().is_none()
            && k >= Self::FOREIGN_MIN
            && fisher_greater(k, n, short.0, short.1) <= Self::FOREIGN_ALPHA
    }

    /// (with foreign content, answers) among the long answers and the short ones, as
    /// [`Power::foreign_rise`] counts them.
    fn foreign_counts(&self) -> Option<((usize, usize), (usize, usize))> {
        let (first, top) = (self.bands.first()?, self.bands.last()?);
        let mut short = (first.foreign.len(), first.answers.len());
        for t in &self.trials {
            short.0 += t.foreign.len();
            short.1 += t.answers.len();
        }
        let mut long = (0, 0);
        for b in self.bands.iter().skip(1).filter(|b| 2 * b.tokens >= top.tokens) {
            long.0 += b.foreign.len();
            long.1 += b.answers.len();
        }
        Some((long, short))
    }

    /// The confidence of each band's lower bound on its echo rate.
    pub const CONFIDENCE: f64 = 0.95;

    /// The power of `bands` (each with its `echo_low` computed from its counts).
    pub fn of(control: String, bands: Vec<EchoBand>, min_power: f64) -> Power {
        let miss: f64 = bands
            .iter()
            .map(|b| (1.0 - b.echo_low).powi(b.exposed.len() as i32))
            .product();
        let top = bands.last().map_or(0, |b| b.tokens);
        let leak_rate = Some(LeakBound::of(&bands, top));
        Power {
            control,
            bands,
            power: 1.0 - miss,
            min_power,
            form: None,
            trials: Vec::new(),
            leak_rate,
        }
    }

    /// The power, its leak rate counting the exposures above the largest of `pools`
    /// (KV pools the vendor declares) below the top band (see [`LeakBound::from_tokens`]).
    pub fn counting_above(mut self, pools: impl IntoIterator<Item = u64>) -> Power {
        let tokens: Vec<u64> = self.bands.iter().map(|b| b.tokens).collect();
        let from = LeakBound::from_tokens(&tokens, pools);
        self.leak_rate = Some(LeakBound::of(&self.bands, from));
        self
    }

    /// The power, with the form trials that chose what the case carried.
    pub fn with_trials(mut self, trials: Vec<FormTrial>) -> Power {
        self.form = FormTrial::best(&trials);
        self.trials = trials;
        self
    }

    /// Whether the case could have seen what it looks for: the power reaches
    /// `min_power`, and the longest band's own answers read something back. Power
    /// bought at short lengths alone says nothing about the longest prompts, where
    /// prompts past a KV pool fail (a vendor that answers every long prompt empty would
    /// otherwise pass on its short ones).
    pub fn suffices(&self) -> bool {
        self.power >= self.min_power && self.bands.last().is_none_or(|b| !b.echoed.is_empty())
    }

    /// Whether the longest band's answers read nothing back (the power, whatever its
    /// figure, then does not suffice).
    pub fn blind_at_the_top(&self) -> bool {
        self.bands.last().is_some_and(|b| b.echoed.is_empty())
    }

    /// Whether the longest band read nothing back in so many answers that chance does
    /// not explain it: at the echo rate of every band together (its 95% lower bound),
    /// so many misses in a row have a chance of at most 1%. More exposures there are
    /// then not worth spending; fewer misses may be a forgetful model's bad luck.
    pub fn blind_at_the_top_beyond_chance(&self) -> bool {
        let Some(top) = self.bands.last().filter(|b| b.echoed.is_empty()) else {
            return false;
        };
        let (echoed, answers) = self
            .bands
            .iter()
            .fold((0, 0), |(e, a), b| (e + b.echoed.len(), a + b.answers.len()));
        let rate = lower_bound(echoed as u64, answers as u64, 1.0 - Self::CONFIDENCE);
        rate <= 0.0 || (1.0 - rate).powi(top.answers.len() as i32) <= 0.01
    }

    /// The figures, in words: per band echoes over answers, exposures, and the power.
    pub fn describe(&self) -> String {
        let bands: Vec<String> = self
            .bands
            .iter()
            .map(|b| format!("{}/{} at {} tokens", b.echoed.len(), b.answers.len(), b.tokens))
            .collect();
        let exposures: usize = self.bands.iter().map(|b| b.exposed.len()).sum();
        let form = match self.form {
            Some(form) => {
                let trials: Vec<String> = self
                    .trials
                    .iter()
                    .map(|t| format!("{} {}/{}", t.form.noun(), t.echoed.len(), t.answers.len()))
                    .collect();
                format!(
                    "carried as {}s (read back on short prompts: {}); ",
                    form.noun(),
                    trials.join(", ")
                )
            }
            None => String::new(),
        };
        let bound = match &self.leak_rate {
            Some(b) => format!("; {}", b.describe()),
            None => String::new(),
        };
        format!(
            "{form}own content read back in {}; {exposures} exposures; power {:.4} (needs {}){}{bound}",
            bands.join(", "),
            self.power,
            self.min_power,
            if self.blind_at_the_top() {
                ", and nothing was read back at the longest length"
            } else {
                ""
            }
        )
    }
}

impl EchoBand {
    /// A band from its answers and echoes.
    pub fn new(tokens: u64, answers: Vec<u64>, echoed: Vec<u64>, exposed: Vec<u64>) -> EchoBand {
        let echo_low = lower_bound(echoed.len() as u64, answers.len() as u64, 1.0 - Power::CONFIDENCE);
        EchoBand {
            tokens,
            answers,
            echoed,
            exposed,
            echo_low,
            foreign: Vec::new(),
        }
    }
}

/// One-sided Fisher exact test: the chance, were the rate the same in both groups, of
/// at least `a` of `n` in the first group given `a + b` of `n + m` in all.
pub fn fisher_greater(a: usize, n: usize, b: usize, m: usize) -> f64 {
    let ln_choose = |n: usize, k: usize| -> f64 { ln_factorial(n) - ln_factorial(k) - ln_factorial(n - k) };
    let (total, hits) = (n + m, a + b);
    let denominator = ln_choose(total, n);
    (a..=n.min(hits))
        .filter(|&x| hits - x <= m)
        .map(|x| (ln_choose(hits, x) + ln_choose(total - hits, n - x) - denominator).exp())
        .sum::<f64>()
        .min(1.0)
}

fn ln_factorial(n: usize) -> f64 {
    (2..=n).map(|i| (i as f64).ln()).sum()
}

/// The one-sided lower confidence bound on a rate seen `k` times in `n` at error
/// `alpha` (Clopper–Pearson): the `p` at which `k` or more in `n` has chance `alpha`.
pub fn lower_bound(k: u64, n: u64, alpha: f64) -> f64 {
    if k == 0 || n == 0 {
        return 0.0;
    }
    if k == n {
        return alpha.powf(1.0 / n as f64);
    }
    // P(X >= k) grows with p: bisect.
    let tail = |p: f64| {
        let mut sum = 0.0;
        let mut term = (1.0 - p).powi(n as i32); // P(X = 0)
        for i in 0..n {
            if i >= k {
                sum += term;
            }
            term *= (n - i) as f64 / (i + 1) as f64 * p / (1.0 - p);
        }
        sum + if n >= k { term } else { 0.0 }
    };
    let (mut lo, mut hi) = (0.0, 1.0);
    for _ in 0..60 {
        let mid = (lo + hi) / 2.0;
        if tail(mid) < alpha {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

/// One level of a prefix-cache timing test: which key sent a prompt, which key then
/// sent a prompt sharing its prefix (hit arm) or a fresh one (miss arm), and what
/// the times to answer say.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TimingLevel {
    /// `same key` (the control), `same organisation` or `other organisation`.
    pub level: String,
    /// The tenant that sent each prefix first.
    pub victim: String,
    /// The tenant that then sent the hit and miss arms.
    pub attacker: String,
    /// 0 for the control; for another key, the bound: the speed-up "not shared" rules
    /// out (the case's `equivalence` × the control's median speed-up).
    pub threshold_ms: f64,
    /// Every pair, in order.
    pub pairs: Vec<TimingPair>,
    /// What the level decided.
    pub decision: CacheDecision,
    /// log10 of the sequential tests' evidence against "no speed-up" and against "a
    /// speed-up" (of the control's effect size, or of the bound); a decision needs
    /// log10(1/α).
    pub log10_evidence: [f64; 2],
    /// Pairs in which the vendor reported cached prompt tokens for both arms.
    pub cached_reported: u32,
    /// Of those, pairs whose hit arm was reported cached for at least half the shared
    /// prefix beyond the miss arm: the vendor's own word that the prefix was reused.
    pub cached_prefix: u32,
}

/// One hit/miss pair of a timing test.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TimingPair {
    /// Milliseconds until the vendor began to answer the prompt sharing the prefix
    /// ([`Timings::first_answer_ms`](crate::exchange::Timings::first_answer_ms)).
    pub hit_ms: f64,
    /// Milliseconds until the vendor began to answer the fresh prompt.
    pub miss_ms: f64,
    /// The hit arm's transcript line.
    pub hit_seq: u64,
    /// The miss arm's transcript line.
    pub miss_seq: u64,
}

impl TimingPair {
    /// Miss − hit, in milliseconds.
    pub fn speedup_ms(&self) -> f64 {
        self.miss_ms - self.hit_ms
    }
}

/// What one timing level decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CacheDecision {
    /// Control: repeating a prefix with the same key is faster: a cache exists.
    CacheObserved,
    /// Control: no speed-up of the tested size: no cache to test sharing with.
    NoCacheObserved,
    /// Another key's prefix is served from cache.
    Shared,
    /// Shared, within the scope the vendor declares.
    SharedAsDeclared,
    /// Another key's prefix is not served from cache.
    NotShared,
    /// The pair budget ran out before the test decided.
    Undecided,
}

/// One prompt length a probe tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SweepPoint {
    /// Tokens sent.
    pub tokens: u64,
    /// How the vendor handled it.
    pub result: SweepResult,
    /// The exchange's transcript sequence number.
    pub seq: u64,
}

/// How a vendor handled one prompt length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum SweepResult {
    /// 200, and the prompt was processed correctly.
    Processed,
    /// Refused with a client error.
    Refused,
    /// 200, but not processed correctly (a fact lost, another tenant's data).
    Wrong,
    /// A server error or no answer.
    Unknown,
}

impl Outcome {
    /// A skipped case.
    pub fn skipped(reason: impl Into<String>) -> Self {
        Outcome {
            verdict: Verdict::Skipped,
            summary: reason.into(),
            coverage: Coverage::default(),
            findings: Vec::new(),
            sweep: Vec::new(),
            timing: Vec::new(),
            power: None,
            nodes: None,
        }
    }

    /// An inconclusive outcome with nothing exercised.
    pub fn inconclusive(reason: impl Into<String>) -> Self {
        Outcome {
            verdict: Verdict::Inconclusive,
            ..Outcome::skipped(reason)
        }
    }
}

/// What a case exercised.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Coverage {
    /// Requests sent (including retries and calibration).
    pub requests: u64,
    /// Prompt tokens sent, as the vendor counted them (estimated where it did not say).
    pub prompt_tokens: u64,
    /// Completion tokens received, as the vendor counted them.
    pub completion_tokens: u64,
    /// The longest prompt the vendor processed with success, in tokens.
    pub max_prompt_tokens: u64,
    /// The longest prompt the case aimed for, in tokens.
    pub target_prompt_tokens: u64,
}

/// One thing the vendor did wrong (or, for [`FindingCode::ToolBug`], tenantcheck did).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Finding {
    /// What kind of misbehaviour.
    pub code: FindingCode,
    /// A sentence a reviewer reads.
    pub message: String,
    /// For leaks and misrouted answers: which canary, whose, where it was seeded and
    /// where it came back.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leak: Option<LeakEvidence>,
}

/// Named vendor misbehaviours; they double as finding codes in reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub enum FindingCode {
    /// A canary of one tenant appeared in a response to another tenant (T1).
    CrossTenantCanary,
    /// A stretch of one tenant's request text (its words in its order, however cut,
    /// cased or spelled, with words only that tenant sent) appeared in any output field
    /// of a response to another tenant: that tenant's data, named by where it came
    /// from (T1).
    CrossTenantText,
    /// A prompt past the advertised context was answered 200 instead of refused (T2).
    OverLimitAccepted,
    /// A prompt within the context was answered 200 without recalling a fact it held,
    /// though the model recalls such facts in short prompts (T2, T3).
    NeedleLost,
    /// A prompt that fit the context, asking for more tokens than the room it left, was
    /// answered with more completion than that room: generation went on past the end
    /// of the context by silently dropping the head of the conversation (T2).
    ContextShifted,
    /// Reported usage does not match what was sent and received (T4).
    UsageMismatch,
    /// A request the vendor had to refuse was answered as a success, or refused
    /// without a proper error (T5).
    FailureAsSuccess,
    /// A stream broke the SSE or chunk grammar, or ended without finishing (T8).
    StreamMalformed,
    /// A declared KV pool is smaller than the advertised context (T9).
    DeclaredPoolBelowContext,
    /// The declared engine version is affected by a known advisory (T9).
    AffectedByAdvisory,
    /// A stored object of one tenant was read or used with another tenant's key (T10).
    CrossTenantObject,
    /// An answer held another request's nonce: responses were crossed between
    /// requests under concurrency or cancellation (T6).
    ResponseMisrouted,
    /// A prompt prefix one key sent was served from cache to another key, beyond what
    /// the vendor declares (T7).
    SharedPrefixCache,
    /// One tenant read another's secret out of a shared prefix cache, guessing it
    /// piece by piece through the reuse counter of its own answers (T7).
    PrefixExtracted,
    /// One tenant's request was answered with the answer another tenant's request had
    /// been given (its id, its creation time, or its content far sooner than the model
    /// answers): a response cache keyed without the caller (T7, T1).
    ResponseReused,
    /// A request that means what another tenant's meant, in other words, was answered
    /// with the other tenant's answer: a semantic cache keyed without the caller (T7,
    /// T1).
    SemanticResponseReused,
    /// A request was answered with a redirect (3xx) instead of an answer. tenantcheck
    /// follows none, so no credential leaves the vendor's origin, and the answer it
    /// pointed to was not judged; an API that redirects its calls would take a client
    /// that follows redirects, and its key, wherever it points (T5).
    Redirected,
    /// Answers to long prompts held record-shaped content (e-mail addresses, long
    /// numbers) that no prompt of the run holds, significantly more often than answers
    /// to short ones: suspected data of customers the run does not control (T1).
    ForeignContent,
    /// An engine's or gateway's own endpoint showed one tenant's request (its seed,
    /// sampling parameters, prompt), a credential, or a tenant's identity to another
    /// tenant's key or to no key (T12).
    MetadataExposed,
    /// An endpoint that changes the server's state (erases a slot, flushes a cache)
    /// accepted a tenant's key (T12).
    StateChangeAccepted,
    /// Another tenant's valid load made a valid request fail with a server error (or an
    /// unfair rate limit), or slowed it past the case's bound (T11).
    NoisyNeighbour,
    /// The probe itself failed: a bug in tenantcheck, not in the vendor.
    ToolBug,
}

/// The evidence of a canary in an answer it does not belong to: another tenant's (a
/// leak), or another request's of the same tenant (a misrouted answer).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct LeakEvidence {
    /// The canary's id (`owner/case/index`); re-derivable from the run secret.
    pub canary_id: String,
    /// The tenant it was issued to.
    pub owner: String,
    /// The tenant whose response held it.
    pub recipient: String,
    /// Which part of it was found.
    pub fragment: Fragment,
    /// The matched text, as returned.
    pub matched: String,
    /// The response around the match.
    pub excerpt: String,
    /// Transcript sequence number of the request that seeded it.
    pub seeded_in: Option<u64>,
    /// Transcript sequence number of the exchange that returned it.
    pub returned_in: u64,
    /// How a stretch of another tenant's words was matched (a `text` fragment only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub words: Option<WordMatch>,
}

/// How a stretch of another tenant's request text was matched in an answer
/// ([`crate::provenance`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct WordMatch {
    /// The output field it came back in.
    pub field: String,
    /// Words of the answer the matched shingles cover.
    pub words: usize,
    /// Shingles (six words in a row, canonical) matched.
    pub shingles: usize,
    /// Words only the owner had sent, as they came back.
    pub distinctive: Vec<String>,
    /// At most this likely would an answer written without the owner's requests hold
    /// what the stretch holds of the run secret's draws for the owner (its invented
    /// names, its numbers); 1 where it holds none ([`crate::provenance`]). A report
    /// of a version before it states none, read as 1, which `verify` then refuses.
    #[serde(default = "no_bound")]
    pub chance: f64,
}

impl From<crate::provenance::TextHit> for WordMatch {
    fn from(hit: crate::provenance::TextHit) -> Self {
        WordMatch {
            field: hit.field,
            words: hit.words,
            shingles: hit.shingles,
            distinctive: hit.distinctive,
            chance: hit.chance,
        }
    }
}

fn no_bound() -> f64 {
    1.0
}

/// A text hit's chance of a coincidence, in words.
pub fn coincidence(chance: f64) -> String {
    if chance >= 1.0 {
        "no chance of a coincidence stated: none of the run secret's draws for the owner".into()
    } else {
        format!("a coincidence at most {chance:.1e} likely")
    }
}

impl LeakEvidence {
    /// What came back, in words: "tenant b's canary b/case/3 (its e-mail address:
    /// ...)" or "tenant b's prose (its names Lovemar, Ethlumhol)".
    pub fn what(&self) -> String {
        use crate::canary::Fragment;
        let part = match self.fragment {
            Fragment::Prose => return format!("tenant {}'s prose (its names {})", self.owner, self.matched),
            Fragment::Text => {
                let (words, field, distinctive, chance) =
                    self.words.as_ref().map_or((0, "?", String::new(), 1.0), |w| {
                        (w.words, w.field.as_str(), w.distinctive.join(", "), w.chance)
                    });
                return format!(
                    "{words} words of tenant {}'s request #{} in {field} (its words {distinctive}; {}: {:?})",
                    self.owner,
                    self.seeded_in.map_or_else(|| "?".into(), |s| s.to_string()),
                    coincidence(chance),
                    self.matched
                );
            }
            Fragment::Passage => {
                return format!(
                    "text of another request, tenant {}'s #{} ({:?})",
                    self.owner,
                    self.seeded_in.map_or_else(|| "?".into(), |s| s.to_string()),
                    self.matched
                );
            }
            Fragment::Name => match &self.words {
                // Sighted by the ledger: the name and what survives of the record.
                Some(w) => {
                    return format!(
                        "tenant {}'s canary {} (its holder's name beside what survives of its record, re-set: {:?}; {} from the name pools)",
                        self.owner,
                        self.canary_id,
                        self.matched,
                        coincidence(w.chance)
                    );
                }
                None => "its holder's name beside a number or address no prompt held",
            },
            Fragment::AccountNear => "its account number, a digit or two off",
            Fragment::Account => "its account number",
            Fragment::EmailNear => "its e-mail address, letters swapped or changed",
            Fragment::Email => "its e-mail address",
            Fragment::Code => "its code",
            Fragment::Record => "the whole record",
        };
        format!(
            "tenant {}'s canary {} ({part}: {:?})",
            self.owner, self.canary_id, self.matched
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fisher_exact_tails() {
        // 8 of 8 long against 0 of 12 short: 1 / C(20, 8).
        assert!((fisher_greater(8, 8, 0, 12) - 1.0 / 125_970.0).abs() < 1e-12);
        // The same rate everywhere is no rise.
        assert!(fisher_greater(2, 8, 3, 12) > 0.3);
        assert!((fisher_greater(0, 5, 4, 7) - 1.0).abs() < 1e-12);
        // 3 of 4 against 0 of 8: (C(4,3) C(8,0)) / C(12,3) = 4 / 220.
        assert!((fisher_greater(3, 4, 0, 8) - 4.0 / 220.0).abs() < 1e-12);
    }

    #[test]
    fn clopper_pearson_lower_bounds() {
        // P(X >= 3 | n = 4, p) = 0.05 at p = 0.2486; all of n: alpha^(1/n).
        assert!(
            (lower_bound(3, 4, 0.05) - 0.2486).abs() < 1e-3,
            "{}",
            lower_bound(3, 4, 0.05)
        );
        assert!((lower_bound(4, 4, 0.05) - 0.05f64.powf(0.25)).abs() < 1e-12);
        assert_eq!(lower_bound(0, 10, 0.05), 0.0);
        // 50 of 100: 0.4136 (the lower end of the two-sided 90% interval).
        assert!(
            (lower_bound(50, 100, 0.05) - 0.4136).abs() < 1e-3,
            "{}",
            lower_bound(50, 100, 0.05)
        );
    }

    #[test]
    fn power_multiplies_the_misses_of_every_exposure() {
        let band = |k: usize, n: usize, e: usize| {
            EchoBand::new(
                100,
                (0..n as u64).collect(),
                (0..k as u64).collect(),
                (0..e as u64).collect(),
            )
        };
        let p = Power::of("c".into(), vec![band(4, 4, 2), band(4, 4, 2)], 0.99);
        let low = 0.05f64.powf(0.25);
        assert!((p.power - (1.0 - (1.0 - low).powi(4))).abs() < 1e-12);
        assert!(!Power::of("c".into(), vec![band(0, 4, 2)], 0.99).suffices());
        // Power from short bands alone, with the longest band reading nothing back,
        // does not suffice, whatever its figure.
        let many = |tokens: u64, echoed: usize, answers: usize, exposed: usize| {
            let seq = |n: usize| (0..n as u64).collect::<Vec<_>>();
            EchoBand::new(tokens, seq(answers), seq(echoed), seq(exposed))
        };
        let blind = Power::of("c".into(), vec![many(100, 20, 20, 10), many(1_000, 0, 2, 2)], 0.99);
        assert!(blind.power >= 0.99 && blind.blind_at_the_top() && !blind.suffices());
        assert!(blind.describe().contains("nothing was read back at the longest length"));
        let seen = Power::of("c".into(), vec![many(100, 20, 20, 10), many(1_000, 1, 2, 2)], 0.99);
        assert!(seen.suffices());
    }

    #[test]
    fn a_leak_rate_bound_counts_only_where_the_leak_conditions_are() {
        let seq = |n: usize| (0..n as u64).collect::<Vec<_>>();
        let band = |tokens: u64, answers: usize, echoed: usize, exposed: usize| {
            EchoBand::new(tokens, seq(answers), seq(echoed), seq(exposed))
        };
        // With no pool declared below the top, the top band alone counts.
        let bands = [band(100, 40, 40, 20), band(500, 10, 10, 5), band(1_000, 10, 10, 10)];
        let tokens: Vec<u64> = bands.iter().map(|b| b.tokens).collect();
        assert_eq!(LeakBound::from_tokens(&tokens, []), 1_000);
        assert_eq!(LeakBound::from_tokens(&tokens, [2_000]), 1_000);
        // Above the largest declared pool below the top, every band counts.
        assert_eq!(LeakBound::from_tokens(&tokens, [300, 50]), 500);
        assert_eq!(LeakBound::from_tokens(&tokens, [600]), 1_000);
        let top = LeakBound::of(&bands, 1_000);
        assert_eq!((top.exposures, top.answers, top.echoed), (10, 10, 10));
        // The rate: (1 - (α/2)^(1/n)) / s, with s the lower bound at 1 - α/2.
        let s = 0.025f64.powf(0.1);
        assert!((top.sensitivity - s).abs() < 1e-12);
        assert!((top.rate - (1.0 - 0.025f64.powf(0.1)) / s).abs() < 1e-12);
        // At that rate, no leak seen in the exposures has chance α/2 at the measured
        // lower bound on the sensitivity: the bound is tight.
        assert!(((1.0 - top.rate * s).powi(10) - 0.025).abs() < 1e-9);
        let wider = LeakBound::of(&bands, 500);
        assert!(wider.exposures == 15 && wider.rate < top.rate);
        // Two answers read back rule nothing out; a case that read nothing back neither.
        assert_eq!(LeakBound::of(&[band(1_000, 2, 2, 2)], 1_000).rate, 1.0);
        assert_eq!(LeakBound::of(&[band(1_000, 50, 0, 50)], 1_000).rate, 1.0);
        assert!(
            LeakBound::of(&[band(1_000, 2, 2, 2)], 1_000)
                .describe()
                .starts_with("rules out no leak rate")
        );
        // The figure: 10 exposures at a sensitivity of 0.9 bound it near 34%
        // (28% at α, 34% at α/2).
        assert!((LeakBound::rate(10, 0.9) - 0.343).abs() < 1e-3);
        // Halving the bound roughly doubles the exposures it takes.
        let costs: Vec<usize> = [0.5, 0.25, 0.1, 0.05]
            .iter()
            .map(|&r| LeakBound::exposures_for(r))
            .collect();
        assert_eq!(costs[0], 10);
        assert!(costs.windows(2).all(|w| w[1] > w[0] * 3 / 2), "{costs:?}");
        for (&rate, &n) in [0.5, 0.25, 0.1, 0.05].iter().zip(&costs) {
            let s = |n: usize| lower_bound(n as u64, n as u64, 0.025);
            assert!(LeakBound::rate(n, s(n)) <= rate && LeakBound::rate(n - 1, s(n - 1)) > rate);
        }
    }

    #[test]
    fn a_failed_case_states_no_bound() {
        let band = EchoBand::new(1_000, vec![1, 2, 3], vec![1, 2, 3], vec![1, 2, 3]);
        let mut outcome = Outcome {
            verdict: Verdict::Pass,
            summary: String::new(),
            coverage: Coverage::default(),
            findings: Vec::new(),
            sweep: Vec::new(),
            timing: Vec::new(),
            power: Some(Power::of("c".into(), vec![band], 0.99)),
            nodes: None,
        };
        outcome.settle_leak_rate();
        assert!(outcome.power.as_ref().unwrap().leak_rate.is_some());
        outcome.verdict = Verdict::Fail;
        outcome.settle_leak_rate();
        assert!(outcome.power.as_ref().unwrap().leak_rate.is_none());
    }
}
