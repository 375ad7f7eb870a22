//! `context.boundary` (T2) and `context.recall` (T3): is a prompt within the
//! advertised context processed whole, and one past it refused?
//!
//! **context.boundary** searches how the vendor behaves around its advertised context
//! with few, large requests: a short baseline, a prompt at the context, one past it,
//! then, if the one at the context was not processed correctly, halving down to a
//! length that is, and bisection between the two down to `resolution`. Before every
//! long request another tenant sends a short prompt of canary records, so that a
//! mis-admitted request finds another tenant's residue to read. Each prompt holds
//! needles (facts) at `depths`, one at its start, and asks for them at its end; the
//! case judges the one at the start. Last, a prompt that fits
//! the context asks for more tokens than the room it leaves, and asks the model to
//! write without end: it must be refused, or stopped at the context; more completion
//! than the room is a silent context shift (the engine dropped the head of the
//! conversation to go on generating), a fail. An answer that stops early leaves this
//! unexercised: inconclusive, never a pass.
//!
//! A length is *processed correctly* when the answer is 200, recalls the needle and
//! holds no foreign canary; the effective context is the longest prompt so processed,
//! in tokens as sent (counted by the local tokenizer, else estimated). Verdicts: a foreign canary anywhere, a 200 past the
//! context, or a 200 within it that lost the needle (while the short baseline recalled
//! every fact it stated) is a fail; a refusal within the context is no failure, but the effective
//! context (the largest length processed correctly) is reported below the advertised
//! one. If the baseline's facts are not all recalled, the model is too weak for the case:
//! inconclusive, unless something failed outright.
//!
//! **context.recall** places needles at several depths of prompts of several lengths
//! and asks for all of them; a needle lost at some depth while the short baseline
//! recalls them all is a fail (silent truncation). A refused length is not exercised.
//! Another tenant's records come before each prompt, as for the boundary.
//!
//! The two send one `Shape` of prompt and judge it each by its own rule, so where
//! their parameters agree (in the suite: the short baseline and the prompt at the top
//! of the context) the first to run sends it and the other judges the answer already
//! recorded ([`crate::session::Session::shared`]; the transcript cites it for the
//! second case). Run alone, each sends what it judges.

use super::{Context, Sizer, conclude, describe, refused};
use crate::canary::Needle;
use crate::outcome::{Finding, FindingCode, LeakEvidence, Outcome, SweepPoint, SweepResult, Verdict};
use crate::prompt::Placed;
use crate::session::{Sent, SessionError};
use crate::wording::Wording;
use tenantcheck_evidence::judge::context::{self as judge, Processed};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Asks for a summary of an over-long prompt (one drawn per run).
const SUMMARISE: Wording = Wording(
    "[Hi|Hello|Dear|Hey|Morning|Afternoon] {N}[,|:|!] [summarise|give a short summary of|write a brief summary of|sum up|please summarise|briefly summarise|outline|condense] [the notes below|these notes|the following notes|the text below|this document|what follows|the notes from {N}|the minutes below] [for|to] {N}[.|:]\n\n",
);

/// How the other tenant's records open ([`seed_records`]).
const SEED: Wording = Wording(
    "[Hi|Hello|Dear|Hey|Morning|Afternoon] {N}[,|:|!] [please file|file|keep|store|save|record] [these|the|the following|the attached] [customer|client|account|member] records [for|from] {N}[,|;|.] [then|and|please] [read back|repeat|quote|copy out] the first [one|record|entry]. [Thanks|Cheers|Regards|Best], {N}.\n",
);

/// How the facts' prompt opens ([`send_facts`]).
const FACTS: Wording = Wording(
    "[Hi|Hello|Dear|Hey|Morning|Afternoon] {N}[,|:|!] [read|please read|go through|look over|study|take in] [the notes below|these notes|the following notes|this document|the notes from {N}|the text below][;|,|.] [questions follow them|there are questions after them|questions come after them|I will ask questions afterwards|questions are at the end|then answer the questions|my questions follow] [for|from] {N}[.|!]\n\n",
);

/// What the prompt that fits but overruns asks for: more than its room.
const OVERRUN: Wording = Wording(
    "\n\n[Now|Then|Next|After that|Finally], {N}[,|:] [count upward from one|write the numbers from one upward|count aloud from one|list every number from one up|count from one upward], [each number in words|writing every number in words|spelling out every number|in words], [one per line|each on its own line|a line each|one to a line], [and never stop|without stopping|and do not stop|and keep going forever|and never finish]. [Thanks|Cheers|Regards|Best], {N}.",
);

/// Tokens kept free below the context for the chat template, the vendor's own
/// additions and the sizing error of an unknown tokenizer: 64, or 1% of the context.
fn margin(context: u64) -> u64 {
    (context / 100).max(64)
}

/// What a case counts to draw its needles and the seeder's canaries.
#[derive(Debug, Default)]
struct Counters {
    needles: u32,
    records: u32,
}

/// The seed's length in tokens: `fraction` of the context, at least 16 records.
fn seed_tokens(fraction: f64, context: u64) -> u64 {
    ((fraction * context as f64) as u64).max(16 * 40)
}

/// The other tenant (`seeder`) sends a prompt of about `tokens` tokens of its canary
/// records, so that a long prompt mis-admitted after it has residue to read.
async fn seed_records(
    ctx: Context<'_>,
    sizer: &mut Sizer<'_>,
    seeder: &str,
    records: &mut u32,
    tokens: u64,
) -> Result<(Sent, usize), SessionError> {
    let mut text = ctx.session.secret().say("context.seed", 0, SEED);
    let chars = sizer.builder().chars_for(tokens);
    while text.len() < chars {
        let c = ctx.session.canary(seeder, ctx.case_id, *records);
        *records += 1;
        text.push_str(&c.record());
        text.push('\n');
    }
    let chars = text.len();
    Ok((sizer.send_other(seeder, text, 16, false).await?, chars))
}

/// What `context.boundary` sends at each length it tries and `context.recall` at each
/// of its lengths: the other tenant's seed of records, then the prober's prompt of
/// about `tokens` tokens holding a fact (a needle) at each of `depths` and asking for
/// them all. Each case judges it by its own rule (the boundary the fact at the start,
/// recall every fact), so the two share it: the first to need a shape sends it, the
/// other judges the answer already recorded ([`crate::session::Session::shared`]),
/// where their parameters agree (the suite's do at the short baseline and the top).
struct Shape<'s> {
    prober: &'s str,
    seeder: &'s str,
    tokens: u64,
    max_tokens: u32,
    depths: &'s [f64],
    seed_tokens: u64,
}

impl Shape<'_> {
    /// Everything that decides what is sent and how it is judged.
    fn key(&self) -> String {
        format!(
            "context.facts prober={} seeder={} tokens={} max_tokens={} depths={:?} seed={}",
            self.prober, self.seeder, self.tokens, self.max_tokens, self.depths, self.seed_tokens
        )
    }
}

/// A [`Shape`] as sent.
#[derive(Debug)]
struct Facts {
    /// The needles, one for each depth, in the shape's order.
    needles: Vec<(f64, Needle)>,
    prompt: String,
    /// The prompt's tokens as sent (the local tokenizer's count, else estimated).
    sent_tokens: u64,
    /// The seeder's request, and its length in characters.
    seed: Sent,
    seed_chars: usize,
    /// The prober's request (its body dropped: the text is `prompt`).
    sent: Sent,
}

impl Facts {
    /// The needle at the start of the notes (depth 0; [`BoundaryParams::validate`]
    /// makes sure there is one).
    fn at_start(&self) -> &Needle {
        self.needles
            .iter()
            .find(|(d, _)| *d == 0.0)
            .map(|(_, n)| n)
            .unwrap_or(&self.needles[0].1)
    }
}

/// Sends `shape` (the seed, then the prompt) with `sizer`, or, when another case has,
/// judges what it recorded. A pinned request (the sizer on a route) is never shared.
async fn facts(
    ctx: Context<'_>,
    sizer: &mut Sizer<'_>,
    counters: &mut Counters,
    shape: &Shape<'_>,
) -> Result<std::sync::Arc<Facts>, SessionError> {
    if sizer.route.is_some() {
        let (facts, _) = send_facts(ctx, sizer, counters, shape).await?;
        return Ok(std::sync::Arc::new(facts));
    }
    let (facts, sender) = ctx
        .session
        .shared(ctx.case_id, &shape.key(), || send_facts(ctx, sizer, counters, shape))
        .await?;
    if let Some(sender) = sender {
        sizer.note_served(shape.seeder, &facts.seed, facts.seed_chars);
        sizer.note_served(shape.prober, &facts.sent, facts.prompt.len());
        sizer.notes.push(format!(
            "the {}-token prompt (transcript #{}) was sent by {sender}, which judges it too",
            facts.sent_tokens, facts.sent.seq
        ));
    }
    Ok(facts)
}

async fn send_facts(
    ctx: Context<'_>,
    sizer: &mut Sizer<'_>,
    counters: &mut Counters,
    shape: &Shape<'_>,
) -> Result<(Facts, Vec<(String, Sent)>), SessionError> {
    let (seed_sent, seed_chars) =
        seed_records(ctx, sizer, shape.seeder, &mut counters.records, shape.seed_tokens).await?;
    let needles: Vec<(f64, Needle)> = shape
        .depths
        .iter()
        .map(|&depth| {
            counters.needles += 1;
            (depth, ctx.session.secret().needle(shape.prober, ctx.case_id, counters.needles))
        })
        .collect();
    let placed: Vec<Placed> = needles
        .iter()
        .map(|(depth, n)| Placed {
            depth: *depth,
            text: n.statement(),
        })
        .collect();
    let questions: Vec<String> = needles.iter().map(|(_, n)| n.question()).collect();
    let tail = format!("\n\nAnswer each question. {}", questions.join(" "));
    let seed = sizer.filler(shape.prober);
    let head = ctx.session.secret().say("context.facts", 0, FACTS);
    // A pinned prompt opens with its route's system message: the user's turn is
    // shorter by it, so that the whole stays at the length aimed for.
    let opening = sizer.opening_tokens();
    let user_tokens = shape.tokens.saturating_sub(opening).max(64);
    let mut prompt = sizer.builder().build(user_tokens, &seed, &head, &placed, &tail);
    // Sized by a ratio learnt on other text, a prompt the local tokenizer counts off
    // its length is built again, by the difference: over it, a length within the
    // context must be sent within it, or its refusal says nothing; under it by more
    // than half a percent, the case would claim less of the context than it can (a
    // ratio learnt on 256 tokens of plain prose built the top prompt 6% short). The
    // longest build within the length is sent.
    let tolerance = (user_tokens / 200).max(8);
    let mut aim = user_tokens;
    let mut best: Option<(u64, String)> = None;
    for _ in 0..6 {
        let Some(n) = ctx.session.local_tokens(&prompt) else {
            break;
        };
        if n <= user_tokens && best.as_ref().is_none_or(|(b, _)| n > *b) {
            best = Some((n, prompt.clone()));
        }
        if n <= user_tokens && n + tolerance >= user_tokens {
            break;
        }
        aim = if n > user_tokens {
            aim.saturating_sub(n - user_tokens).max(64)
        } else {
            aim + (user_tokens - n)
        };
        prompt = sizer.builder().build(aim, &seed, &head, &placed, &tail);
    }
    if let Some((_, longest)) = best {
        prompt = longest;
    }
    let sent_tokens = sizer.tokens_of(&prompt) + opening;
    let mut sent = sizer.send(shape.prober, prompt.clone(), shape.max_tokens, false).await?;
    // The prompt is kept once, as `prompt`; the request's body holds it again.
    sent.exchange.request.body = None;
    let lines = vec![
        (shape.seeder.to_owned(), seed_sent.clone()),
        (shape.prober.to_owned(), sent.clone()),
    ];
    Ok((
        Facts {
            needles,
            prompt,
            sent_tokens,
            seed: seed_sent,
            seed_chars,
            sent,
        },
        lines,
    ))
}

/// Parameters of `context.boundary`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BoundaryParams {
    /// Tokens each request asks for.
    #[serde(default = "default_answer")]
    pub max_tokens: u32,
    /// Length of the short baseline prompt, in tokens.
    #[serde(default = "default_short")]
    pub short_tokens: u64,
    /// How far past the context the over-limit prompt goes, as a fraction of it.
    #[serde(default = "default_over_by")]
    pub over_by: f64,
    /// The search stops when it has bracketed the effective context this finely, as a
    /// fraction of the advertised context.
    #[serde(default = "default_resolution")]
    pub resolution: f64,
    /// Length of the other tenant's seeding prompt, as a fraction of the context (at
    /// least 16 records).
    #[serde(default = "default_seed")]
    pub seed_fraction: f64,
    /// Depths of the facts each prompt holds, each in [0, 1], one of them 0: the case
    /// judges the fact at the start (a prompt cut at its head loses it first); the
    /// others are there so that `context.recall`, where its parameters agree (depths,
    /// `max_tokens`, `seed_fraction`), judges the same answer instead of sending a
    /// prompt of its own.
    #[serde(default = "default_depths")]
    pub depths: Vec<f64>,
    /// Where the profile has a `[fleet]`: the most pinned rounds spent after the search
    /// (the other tenant's seed, then a prompt at the top length, both pinned to one
    /// node; the next round elsewhere), until every node seen had a prompt at the top
    /// right after another tenant's shorter one and the chance of an unseen node is
    /// below the fleet's `max_unseen` (see [`crate::nodes::NodeCoverage`]). 0: none.
    #[serde(default = "default_node_rounds")]
    pub node_rounds: u32,
}

fn default_answer() -> u32 {
    128
}
fn default_short() -> u64 {
    512
}
fn default_over_by() -> f64 {
    0.05
}
fn default_resolution() -> f64 {
    0.02
}
fn default_seed() -> f64 {
    0.02
}
fn default_node_rounds() -> u32 {
    64
}

impl BoundaryParams {
    pub(crate) fn validate(&self) -> Result<(), super::ParamsError> {
        let invalid = |field, problem: &str| {
            Err(super::ParamsError::Invalid {
                field,
                problem: problem.to_owned(),
            })
        };
        if self.max_tokens < 16 {
            return invalid("max_tokens", "ask for at least 16 tokens");
        }
        if !(self.over_by > 0.0 && self.over_by <= 1.0) {
            return invalid("over_by", "must be in (0, 1]");
        }
        if !(self.resolution > 0.0 && self.resolution < 0.5) {
            return invalid("resolution", "must be in (0, 0.5)");
        }
        if !(self.seed_fraction > 0.0 && self.seed_fraction <= 0.5) {
            return invalid("seed_fraction", "must be in (0, 0.5]");
        }
        if !self.depths.contains(&0.0) || self.depths.iter().any(|&d| !(0.0..=1.0).contains(&d)) {
            return invalid("depths", "list depths in [0, 1], one of them 0 (the fact at the start)");
        }
        if self.max_tokens < 16 * self.depths.len() as u32 {
            return invalid("max_tokens", "allow at least 16 tokens per fact");
        }
        Ok(())
    }
}

/// Parameters of `context.recall`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RecallParams {
    /// Prompt lengths, as fractions of the usable context, ascending, in (0, 1].
    #[serde(default = "default_recall_lengths")]
    pub lengths: Vec<f64>,
    /// Depths of the needles in each prompt, each in [0, 1].
    #[serde(default = "default_depths")]
    pub depths: Vec<f64>,
    /// Tokens each request asks for.
    #[serde(default = "default_recall_answer")]
    pub max_tokens: u32,
    /// Length of the short baseline prompt, in tokens.
    #[serde(default = "default_short")]
    pub short_tokens: u64,
    /// Length of the other tenant's seeding prompt before each prompt, as a fraction
    /// of the context (at least 16 records): a prompt mis-admitted after it has
    /// residue to read.
    #[serde(default = "default_seed")]
    pub seed_fraction: f64,
}

fn default_recall_lengths() -> Vec<f64> {
    vec![0.3, 1.0]
}
fn default_depths() -> Vec<f64> {
    vec![0.0, 0.25, 0.5, 0.75, 1.0]
}
fn default_recall_answer() -> u32 {
    128
}

impl RecallParams {
    pub(crate) fn validate(&self) -> Result<(), super::ParamsError> {
        let invalid = |field, problem: &str| {
            Err(super::ParamsError::Invalid {
                field,
                problem: problem.to_owned(),
            })
        };
        if self.lengths.is_empty() || self.lengths.iter().any(|&f| !(f > 0.0 && f <= 1.0)) {
            return invalid("lengths", "list fractions in (0, 1]");
        }
        if self.depths.is_empty() || self.depths.iter().any(|&d| !(0.0..=1.0).contains(&d)) {
            return invalid("depths", "list depths in [0, 1]");
        }
        if self.max_tokens < 16 * self.depths.len() as u32 {
            return invalid("max_tokens", "allow at least 16 tokens per needle");
        }
        if !(self.seed_fraction > 0.0 && self.seed_fraction <= 0.5) {
            return invalid("seed_fraction", "must be in (0, 0.5]");
        }
        Ok(())
    }
}


struct Search<'a> {
    p: &'a BoundaryParams,
    ctx: Context<'a>,
    sizer: Sizer<'a>,
    prober: String,
    seeder: String,
    findings: Vec<Finding>,
    /// Prompt tokens sent when the first finding was made.
    spent_at_first_finding: Option<u64>,
    /// The prompts that lost their fact, as findings not yet made: each with where it
    /// goes among the findings and the prompt tokens sent by then. They are made once
    /// the model has kept the fact past the baseline ([`judge::Boundary::lost`]).
    losses: Vec<(usize, u64, Finding)>,
    counters: Counters,
    /// (target tokens, tokens sent, how) of every length tried.
    tried: Vec<(u64, u64, Processed)>,
    /// The rule over the prompts tried, `verify`'s too.
    judged: judge::Boundary,
    /// The lines of the prompts it judged (`lengths`), and of the prompt past the
    /// context (`past`): the case's roles, written once it has judged them all.
    lengths: Vec<u64>,
    past: Vec<u64>,
    /// The lines of the prompts meant to run generation past the end of the context
    /// (`overrun`).
    overrun: Vec<u64>,
    /// The same, as reported.
    sweep: Vec<SweepPoint>,
    /// Pinned rounds spent for node coverage.
    node_rounds: u32,
    /// Set once a pinned round's seed and prompt were served by different nodes: the
    /// router does not honour the pin, so every node is primed before each prompt.
    unpinned: bool,
    /// Seeds sent to prime nodes.
    primes: u32,
}

/// The probe `context.boundary`.
pub struct Boundary;

impl super::Probe for Boundary {
    const KIND: &'static str = crate::judge::kind::CONTEXT_BOUNDARY;
    type Params = BoundaryParams;

    fn validate(p: &BoundaryParams) -> Result<(), super::ParamsError> {
        p.validate()
    }

    async fn run(p: &BoundaryParams, ctx: Context<'_>) -> Outcome {
        super::settled(boundary(p, ctx).await)
    }

    fn ceiling(p: &BoundaryParams, profile: &crate::vendor::VendorProfile) -> Option<super::Ceiling> {
        // Where the profile has a `[fleet]`: every pinned round, a seed and a prompt
        // at the top length, and the seeds that prime the nodes where the router
        // ignores the pin (a run against the one-node reference vendor spends none).
        profile.fleet.as_ref()?;
        let context = profile.context_window;
        let top = context.saturating_sub(u64::from(p.max_tokens) + margin(context));
        let seed = ((p.seed_fraction * context as f64) as u64).max(16 * 40);
        let rounds = u64::from(p.node_rounds);
        // Where the router ignores the pin, each round may be preceded by seeds.
        let primes = rounds * u64::from(super::isolation::PRIMES_PER_PAIR);
        Some(super::Ceiling::More {
            requests: 2 * rounds + primes,
            prompt_tokens: rounds * (top + seed) + primes * seed,
            max_tokens: u64::from(p.max_tokens),
        })
    }
}

/// Runs `context.boundary`.
pub async fn boundary(p: &BoundaryParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let labels = ctx.session.tenant_labels();
    let (prober, seeder) = (labels[0].to_owned(), labels[1].to_owned());
    let sizer = Sizer::calibrated(ctx, &prober).await?;
    let mut b = Search {
        p,
        ctx,
        sizer,
        prober,
        seeder,
        findings: Vec::new(),
        spent_at_first_finding: None,
        losses: Vec::new(),
        counters: Counters::default(),
        tried: Vec::new(),
        judged: judge::Boundary::default(),
        lengths: Vec::new(),
        past: Vec::new(),
        overrun: Vec::new(),
        sweep: Vec::new(),
        node_rounds: 0,
        unpinned: false,
        primes: 0,
    };
    let context = ctx.session.profile().context_window;
    let top = context.saturating_sub(u64::from(p.max_tokens) + margin(context));
    let short = p.short_tokens.min(top / 2).max(64);

    b.try_length(short).await?;
    let at_top = b.try_length(top).await?;
    let past_refused = b.past_context(context).await?;
    let overrun = b.past_generation(context).await?;
    let effective = if at_top == Processed::Correctly {
        b.longest_correct()
    } else {
        b.search(short, top, context).await?
    };
    b.cover_nodes(top, context).await?;
    let nodes = b.node_coverage(top, context);
    b.count_losses();
    // Undecided too where the model kept its fact at the baseline alone.
    let baseline_ok = b.judged.baseline_ok() && !b.judged.blind();

    let c = b.sizer.coverage;
    let spent = format!(
        "{} requests, {} prompt tokens sent ({:.2}x the context){}",
        c.requests,
        c.prompt_tokens,
        c.prompt_tokens as f64 / context as f64,
        b.spent_at_first_finding
            .map(|t| format!(", the first finding after {t} ({:.2}x)", t as f64 / context as f64))
            .unwrap_or_default()
    );
    let effective_text = match effective {
        Some(e) => format!(
            "effective context {e} tokens ({:.1}% of the advertised {context})",
            100.0 * e as f64 / context as f64
        ),
        None => "no length was processed correctly".to_owned(),
    };
    // `verify` judges the same lines by the same rule.
    ctx.session.roles(
        ctx.case_id,
        &[
            ("lengths", b.lengths.clone()),
            ("past", b.past.clone()),
            ("overrun", b.overrun.clone()),
        ],
    )?;
    let mut outcome = conclude(
        b.findings,
        if baseline_ok && past_refused && overrun.is_ok() {
            Ok(format!(
                "{effective_text}; past the context: refused; {}; {spent}",
                overrun.as_deref().unwrap_or_default()
            ))
        } else if baseline_ok && past_refused {
            Err(format!(
                "{}; {effective_text}; {spent}",
                overrun.err().unwrap_or_default()
            ))
        } else if baseline_ok {
            // Fail closed: a server error or no answer past the context is not the
            // refusal the case must see.
            Err(format!(
                "the prompt past the context was not refused with a client error or an error frame, so admission past it is unknown; {effective_text}; {spent}"
            ))
        } else {
            let overrun = match &overrun {
                Ok(what) | Err(what) => what,
            };
            let why = match b.judged.blind() {
                true => format!(
                    "the model kept the fact at the start of the {short}-token baseline and of no longer prompt ({} lost it), so the losses say nothing: a model that reads only short prompts and a vendor that keeps only their tails look alike",
                    b.losses.len()
                ),
                false => format!("the model did not recall every fact of a {short}-token prompt, so a loss at length says nothing"),
            };
            Err(format!("{why}; {effective_text}; {overrun}; {spent}"))
        },
        c,
    );
    outcome.coverage.max_prompt_tokens = effective.unwrap_or(0);
    outcome.sweep = b.sweep;
    outcome.coverage.target_prompt_tokens = top;
    if let Some(n) = &nodes {
        if b.node_rounds > 0 {
            b.sizer.notes.push(format!(
                "{} pinned rounds spent at the top length to reach the vendor's nodes",
                b.node_rounds
            ));
        }
        // A pass states its node coverage; short of the target it is no pass.
        match outcome.verdict {
            Verdict::Pass if !n.suffices() => {
                outcome.verdict = Verdict::Inconclusive;
                outcome.summary = format!(
                    "every prompt was handled as it must be, but not every node was shown to be: {}; {}",
                    n.describe(),
                    outcome.summary
                );
            }
            Verdict::Pass => outcome.summary = format!("{}; {}", outcome.summary, n.describe()),
            _ => {}
        }
    }
    outcome.nodes = nodes;
    if !b.sizer.notes.is_empty() {
        outcome.summary = format!("{} (notes: {})", outcome.summary, b.sizer.notes.join("; "));
    }
    Ok(outcome)
}

impl Search<'_> {
    /// Where the profile has a `[fleet]`: pinned rounds at the top length until the
    /// nodes are covered, a finding decides the case, or `node_rounds` are spent.
    async fn cover_nodes(&mut self, top: u64, context: u64) -> Result<(), SessionError> {
        while self.node_rounds < self.p.node_rounds {
            let Some(coverage) = self.node_coverage(top, context) else { break };
            // Coverage no round can make known (no node named, no count declared; or
            // a node signal no answer has carried after two rounds) is not bought.
            let blind = (coverage.signal.is_none() && coverage.declared.is_none())
                || (coverage.signal.is_some() && coverage.answers.is_empty() && self.node_rounds >= 2);
            let decided = !self.findings.is_empty() || !self.judged.lost().is_empty();
            if decided || coverage.suffices() || blind {
                break;
            }
            if self.unpinned {
                self.prime(top).await?;
            }
            self.sizer.route = Some(format!(
                "{:016x}",
                self.ctx.session.secret().seed("boundary.route", self.ctx.case_id, self.node_rounds)
            ));
            let how = self.try_length(top).await;
            self.sizer.route = None;
            self.node_rounds += 1;
            if how? == Processed::Unknown {
                // A server error or no answer: more rounds would say no more.
                break;
            }
            // The round's seed and prompt are the last two answers: on two nodes, the
            // router ignored the pin.
            if let [.., (_, t1, Some(n1), _), (_, t2, Some(n2), _)] = self.sizer.served.as_slice()
                && *t1 == self.seeder
                && *t2 == self.prober
                && n1 != n2
                && !self.unpinned
            {
                self.unpinned = true;
                self.sizer.notes.push(format!(
                    "the router did not keep a pinned round on one node ({n1}, then {n2}): each prompt at the top was preceded by seeds until every node seen last served one"
                ));
            }
        }
        if self.primes > 0 {
            self.sizer.notes.push(format!("{} seeds primed the nodes the router chose", self.primes));
        }
        Ok(())
    }

    /// Where the router ignores the pin: the seeder's short prompts, each on a new
    /// route, until every node seen last served one (so a prompt at the top is an
    /// exposure wherever it lands; [`crate::nodes::primed`]), at most
    /// [`super::isolation::PRIMES_PER_PAIR`].
    async fn prime(&mut self, top: u64) -> Result<(), SessionError> {
        let top_chars = self.sizer.builder().chars_for(top);
        for _ in 0..super::isolation::PRIMES_PER_PAIR {
            if crate::nodes::primed(&self.sizer.served, &self.prober, top_chars) {
                break;
            }
            self.primes += 1;
            self.sizer.route = Some(format!(
                "{:016x}",
                self.ctx.session.secret().seed("boundary.prime", self.ctx.case_id, self.primes)
            ));
            let seeded = self.seed().await;
            self.sizer.route = None;
            seeded?;
        }
        Ok(())
    }

    /// Which nodes the prompts at the top length reached, where the profile has a
    /// `[fleet]`: each node needs one (a node that mishandles the top length does so
    /// every time), counted where the request served on that node just before it was
    /// the other tenant's shorter seed.
    fn node_coverage(&self, top: u64, context: u64) -> Option<crate::nodes::NodeCoverage> {
        let fleet = self.ctx.session.profile().fleet.as_ref()?;
        let at_top: std::collections::BTreeSet<u64> = self
            .sweep
            .iter()
            .filter(|p| crate::nodes::at_the_top(p.tokens, top, context))
            .map(|p| p.seq)
            .collect();
        Some(crate::nodes::NodeCoverage::of(fleet, &self.sizer.served, &at_top, 1))
    }

    /// Halves down from the failed top to a length processed correctly, then bisects.
    async fn search(&mut self, short: u64, top: u64, context: u64) -> Result<Option<u64>, SessionError> {
        let step = ((self.p.resolution * context as f64) as u64).max(1);
        let mut bad = top;
        let mut good = None;
        let mut probe = top / 2;
        while probe > short {
            if self.try_length(probe).await? == Processed::Correctly {
                good = Some(probe);
                break;
            }
            bad = probe;
            probe /= 2;
        }
        if let Some(mut good) = good {
            while bad - good > step {
                let mid = good + (bad - good) / 2;
                match self.try_length(mid).await? {
                    Processed::Correctly => good = mid,
                    _ => bad = mid,
                }
            }
        }
        Ok(self.longest_correct())
    }

    /// The longest prompt, in tokens sent, that was processed correctly.
    fn longest_correct(&self) -> Option<u64> {
        self.tried
            .iter()
            .filter(|&&(_, _, h)| h == Processed::Correctly)
            .map(|&(_, sent, _)| sent)
            .max()
    }

    /// The other tenant seeds, then the prober asks for the facts of a prompt of
    /// `tokens` tokens ([`Facts`]); the case judges the one at its start.
    async fn try_length(&mut self, tokens: u64) -> Result<Processed, SessionError> {
        let shape = Shape {
            prober: &self.prober,
            seeder: &self.seeder,
            tokens,
            max_tokens: self.p.max_tokens,
            depths: &self.p.depths,
            seed_tokens: seed_tokens(self.p.seed_fraction, self.ctx.session.profile().context_window),
        };
        let facts = facts(self.ctx, &mut self.sizer, &mut self.counters, &shape).await?;
        let sent = facts.sent.clone();
        let sent_tokens = facts.sent_tokens;
        // The fact at the start as `verify` reads it back: the first the prompt states.
        // The facts as `verify` reads them back: those the prompt states, in its order.
        let mut stated = crate::canary::Needle::stated_in(&facts.prompt);
        if stated.is_empty() {
            let first = facts.at_start();
            stated = std::iter::once(first)
                .chain(facts.needles.iter().map(|(_, n)| n).filter(|n| *n != first))
                .cloned()
                .collect();
        }
        let needle = &stated[0];
        let recalled = sent.exchange.is_success() && needle.seen_in(&sent.exchange.content);
        let leaked = self.scan(
            &sent,
            if recalled {
                ""
            } else {
                ", and not the fact at its start"
            },
        );
        let ex = &sent.exchange;
        self.lengths.push(sent.seq);
        let (how, lost) = self.judged.judge(sent.seq, ex, &stated, leaked);
        if lost {
            let finding = Finding {
                code: FindingCode::NeedleLost,
                message: format!(
                    "a {sent_tokens}-token prompt within the context was answered 200 without the fact at its start (transcript #{}): {}{}",
                    sent.seq,
                    excerpt(&ex.content),
                    beside_the_loss(self.ctx, ex, true)
                ),
                leak: None,
            };
            self.losses
                .push((self.findings.len(), self.sizer.coverage.prompt_tokens, finding));
        }
        self.tried.push((tokens, sent_tokens, how));
        self.sweep.push(SweepPoint {
            tokens: sent_tokens,
            result: match how {
                Processed::Correctly => SweepResult::Processed,
                Processed::Refused => SweepResult::Refused,
                Processed::Wrongly => SweepResult::Wrong,
                Processed::Unknown => SweepResult::Unknown,
            },
            seq: sent.seq,
        });
        Ok(how)
    }

    /// A prompt past the context must be refused.
    /// Sends a prompt past the context; whether it was refused as it must be.
    async fn past_context(&mut self, context: u64) -> Result<bool, SessionError> {
        let want = context + (self.p.over_by * context as f64) as u64;
        self.seed().await?;
        // Grow the prompt until it is past the context by its own count (the local
        // tokenizer's, or the estimate), so that an answer can only mean acceptance.
        let mut target = want;
        let mut prompt = String::new();
        let mut tokens = 0;
        for _ in 0..4 {
            let seed = self.sizer.filler(&self.prober);
            let head = self.ctx.session.secret().say("context.summary", 0, SUMMARISE);
            prompt = self.sizer.builder().build(target, &seed, &head, &[], "");
            tokens = self.sizer.tokens_of(&prompt);
            if tokens > context {
                break;
            }
            target += want - tokens.min(want) + context / 100;
        }
        let sent = self.sizer.send(&self.prober, prompt, self.p.max_tokens, false).await?;
        // `verify` judges this line's answer by the same rule.
        self.past.push(sent.seq);
        self.scan(&sent, "");
        let ex = &sent.exchange;
        self.sweep.push(SweepPoint {
            tokens,
            result: if refused(ex) {
                SweepResult::Refused
            } else if ex.is_success() {
                SweepResult::Wrong
            } else {
                SweepResult::Unknown
            },
            seq: sent.seq,
        });
        if tenantcheck_evidence::judge::accepted(ex) {
            let usage = ex
                .usage
                .map(|u| format!(", usage says {} prompt tokens", u.prompt_tokens))
                .unwrap_or_default();
            let frame = match ex.api_error {
                Some(_) => " with content before an error frame",
                None => "",
            };
            self.finding(
                FindingCode::OverLimitAccepted,
                format!(
                    "a {tokens}-token prompt, past the advertised context of {context}, was answered 200{frame} (transcript #{}{usage})",
                    sent.seq
                ),
                None,
            );
        } else if !refused(ex) {
            self.sizer.notes.push(format!(
                "the prompt past the context got {} (transcript #{}), not a client error",
                describe(ex),
                sent.seq
            ));
        }
        Ok(refused(ex))
    }

    /// A prompt that fits the context, asking for more tokens than the room it leaves:
    /// the vendor must refuse it, or stop generating at the context. An answer with
    /// more completion than the room (by the vendor's own usage, or by the local
    /// tokenizer's count of the answer) means generation went on past the end of the
    /// context: the engine dropped the head of the conversation, instructions first,
    /// and said nothing (llama.cpp's context shift). Whether the model would write that
    /// long does not matter: it is asked to, and an answer that stops early leaves the
    /// check unexercised, never passed. `Ok`: what the vendor did, when it kept the
    /// rule (or broke it, with the finding made); `Err`: why it is unknown.
    async fn past_generation(&mut self, context: u64) -> Result<Result<String, String>, SessionError> {
        let ask = (context / 100).max(256);
        let mut target = context.saturating_sub(ask / 2);
        let mut why = String::new();
        for _ in 0..2 {
            self.seed().await?;
            let seed = self.sizer.filler(&self.prober);
            let tail = self.ctx.session.secret().say("context.overrun", 0, OVERRUN);
            let mut prompt = self.sizer.builder().build(target, &seed, "", &[], &tail);
            // As for the other lengths: a prompt the local tokenizer counts over its
            // target is built again shorter, so that it fits the context for sure.
            let mut aim = target;
            for _ in 0..4 {
                match self.ctx.session.local_tokens(&prompt) {
                    Some(n) if n > target => {
                        aim = aim.saturating_sub(n - target).max(64);
                        prompt = self.sizer.builder().build(aim, &seed, "", &[], &tail);
                    }
                    _ => break,
                }
            }
            let estimated = self.sizer.tokens_of(&prompt);
            let sent = self.sizer.send_other(&self.prober, prompt, ask as u32, false).await?;
            self.overrun.push(sent.seq);
            self.scan(&sent, "");
            let ex = &sent.exchange;
            let at = sent.seq;
            if refused(ex) {
                return Ok(if estimated + ask / 4 <= context {
                    Ok(format!(
                        "a prompt that fits, asking for {ask} tokens past its room: refused (transcript #{at})"
                    ))
                } else {
                    Err(format!(
                        "the prompt meant to fit the context with {ask} tokens to generate was refused (transcript #{at}), but it may itself have been past the context, so generation past the context is untested"
                    ))
                });
            }
            if !ex.is_success() {
                return Ok(Err(format!(
                    "a prompt that fits, asking for {ask} tokens past its room, got {} (transcript #{at}): generation past the context is untested",
                    describe(ex)
                )));
            }
            // The larger of what the vendor says and what the local tokenizer counts
            // (`verify` counts the same); the run's estimates where neither counted.
            let counted = judge::Overrun::counted(ex, self.ctx.session.profile().tokenizer);
            let counted_by = match (ex.usage, counted) {
                (Some(_), _) => "its usage",
                (None, Some(_)) => "the local tokenizer",
                (None, None) => "tenantcheck's count (no usage)",
            };
            let o = counted.unwrap_or_else(|| judge::Overrun {
                prompt: estimated,
                completion: self.sizer.builder().tokens_for(ex.content.len()),
                exact: false,
            });
            let (prompt_tokens, completion) = (o.prompt, o.completion);
            let total = prompt_tokens + completion;
            if o.shifted(context) {
                self.finding(
                    FindingCode::ContextShifted,
                    format!(
                        "a {prompt_tokens}-token prompt asking for {ask} tokens, {} more than the context of {context} leaves, was answered 200 with {completion} completion tokens ({prompt_tokens} + {completion} = {total}, by {counted_by}; finish reason {}): generation ran past the end of the context, so the engine dropped the head of the conversation without a word (transcript #{at})",
                        (prompt_tokens + ask).saturating_sub(context),
                        ex.finish_reason.as_deref().unwrap_or("none")
                    ),
                    None,
                );
                return Ok(Ok(format!(
                    "generation past the context: not stopped (transcript #{at})"
                )));
            }
            if prompt_tokens + ask <= context {
                // The prompt came out shorter than meant: nothing asked past the context.
                why = format!(
                    "the prompt meant to leave less room than its {ask} tokens to generate had {prompt_tokens} tokens by {counted_by} (transcript #{at})"
                );
                target += context - (prompt_tokens + ask) + ask / 4;
                continue;
            }
            let room = context.saturating_sub(prompt_tokens);
            return Ok(match stopped_at(completion, room, context, o.exact) {
                true => Ok(format!(
                    "a prompt that fits, asking for {ask} tokens past its room of {room}: stopped at the context ({prompt_tokens} + {completion} tokens by {counted_by}, transcript #{at})"
                )),
                false if ex.finish_reason.as_deref() == Some("length") => Err(format!(
                    "asked to write past the end of the context, the answer was cut at {completion} of the {room} tokens of room left, finish reason length (transcript #{at}): a limit below the context (the server's own cap on generated tokens) stopped it first, so generation past the context is untested"
                )),
                false => Err(format!(
                    "asked to write past the end of the context, the model stopped after {completion} of the {room} tokens of room left (transcript #{at}): generation past the context is untested"
                )),
            });
        }
        Ok(Err(format!("{why}: generation past the context is untested")))
    }

    /// The other tenant sends a short prompt of canary records.
    async fn seed(&mut self) -> Result<(), SessionError> {
        let target = seed_tokens(self.p.seed_fraction, self.ctx.session.profile().context_window);
        seed_records(self.ctx, &mut self.sizer, &self.seeder, &mut self.counters.records, target).await?;
        Ok(())
    }

    /// Scans a prober's answer for other tenants' canaries; returns whether one was
    /// found. `besides` ends the finding's message (what else the answer shows).
    fn scan(&mut self, sent: &Sent, besides: &str) -> bool {
        // What the ledger read in the line (the scan's canaries and the holders
        // sighted by name), then what the scan finds now besides.
        let mut leaks = self.ctx.session.leaks_at(sent.seq);
        for hit in self.ctx.session.scan(&sent.exchange.returned_text(), &self.prober) {
            if !leaks.iter().any(|l| l.canary_id == hit.id) {
                leaks.push(LeakEvidence {
                    seeded_in: self.ctx.session.seeded_in(&hit.id),
                    canary_id: hit.id,
                    owner: hit.owner,
                    recipient: self.prober.clone(),
                    fragment: hit.fragment,
                    matched: hit.matched,
                    excerpt: hit.excerpt,
                    returned_in: sent.seq,
                    words: None,
                });
            }
        }
        let count = leaks.len();
        let Some(first) = leaks.into_iter().next() else {
            return false;
        };
        let message = format!(
            "the answer to a long prompt of tenant {} (transcript #{}) holds {count} of tenant {}'s canaries, first {}{besides}",
            self.prober, sent.seq, first.owner, first.canary_id
        );
        self.finding(FindingCode::CrossTenantCanary, message, Some(first));
        true
    }

    /// Makes the losses findings, each in its place, where they count
    /// ([`judge::Boundary::lost`]).
    fn count_losses(&mut self) {
        if self.judged.lost().is_empty() {
            return;
        }
        for (made, (at, spent, finding)) in self.losses.drain(..).enumerate() {
            let first = self.spent_at_first_finding.get_or_insert(spent);
            *first = (*first).min(spent);
            self.findings.insert(at + made, finding);
        }
    }

    fn finding(&mut self, code: FindingCode, message: String, leak: Option<LeakEvidence>) {
        self.spent_at_first_finding
            .get_or_insert(self.sizer.coverage.prompt_tokens);
        self.findings.push(Finding { code, message, leak });
    }
}

/// Whether an answer that stayed within the context (asked for more than the room
/// left) was stopped *by* the context: its completion reached the room, within 8 tokens
/// where the tokens were counted (usage or the local tokenizer), within a twentieth of
/// the context where they were estimated. An answer cut short of that, even with finish
/// reason `length`, was stopped by something else (a server's cap on generated tokens)
/// and says nothing of what happens at the context.
fn stopped_at(completion: u64, room: u64, context: u64, exact: bool) -> bool {
    let slack = if exact { 8 } else { context / 20 };
    completion + slack >= room
}

/// What an answer that lost its fact holds besides, in words (empty when nothing):
/// record-shaped content that its request did not carry
/// ([`crate::adapter::RecordedRequest::text`]) and no canary of the run accounts for
/// (suspected data of a customer outside the run), and the signs of a degenerate
/// decode ([`super::degenerate`]).
fn beside_the_loss(ctx: Context<'_>, ex: &crate::adapter::Exchange, short_task: bool) -> String {
    let mut said = String::new();
    let items = super::foreign(&ex.request.text(), &ex.content, |item| !ctx.session.scan(item, "\u{0}").is_empty());
    if !items.is_empty() {
        let more = match items.len() {
            n if n > 6 => format!(" and {} more", n - 6),
            _ => String::new(),
        };
        said.push_str(&format!(
            "; instead it holds record-shaped content that no prompt of the run held (suspected data of a customer outside the run): {}{more}",
            items[..items.len().min(6)].join(", ")
        ));
    }
    let signs = super::degenerate(&ex.content, ex.finish_reason.as_deref(), short_task);
    if !signs.is_empty() {
        said.push_str(&format!("; a degenerate answer: {}", signs.join("; ")));
    }
    said
}

fn excerpt(text: &str) -> String {
    let t: String = text.chars().take(120).collect();
    format!("{t:?}")
}

/// The probe `context.recall`.
pub struct Recall;

impl super::Probe for Recall {
    const KIND: &'static str = crate::judge::kind::CONTEXT_RECALL;
    type Params = RecallParams;

    fn validate(p: &RecallParams) -> Result<(), super::ParamsError> {
        p.validate()
    }

    async fn run(p: &RecallParams, ctx: Context<'_>) -> Outcome {
        super::settled(recall(p, ctx).await)
    }
}

/// Runs `context.recall`.
pub async fn recall(p: &RecallParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let labels = ctx.session.tenant_labels();
    let (prober, seeder) = (labels[0].to_owned(), labels[1].to_owned());
    let mut sizer = Sizer::calibrated(ctx, &prober).await?;
    let context = ctx.session.profile().context_window;
    let usable = context.saturating_sub(u64::from(p.max_tokens) + margin(context));
    let mut counters = Counters::default();
    let mut findings = Vec::new();
    let mut exercised = Vec::new();
    // The rule over the prompts, `verify`'s too, and their lines.
    let mut judged = judge::Recall::default();
    let mut lines = Vec::new();
    let lengths = std::iter::once(p.short_tokens.min(usable / 2))
        .chain(p.lengths.iter().map(|f| (f * usable as f64) as u64));
    for tokens in lengths {
        let shape = Shape {
            prober: &prober,
            seeder: &seeder,
            tokens,
            max_tokens: p.max_tokens,
            depths: &p.depths,
            seed_tokens: seed_tokens(p.seed_fraction, context),
        };
        let facts = facts(ctx, &mut sizer, &mut counters, &shape).await?;
        let (sent, sent_tokens) = (&facts.sent, facts.sent_tokens);
        let ex = &sent.exchange;
        lines.push(sent.seq);
        let needles: Vec<crate::canary::Needle> = facts.needles.iter().map(|(_, n)| n.clone()).collect();
        let (lost, was_exercised) = judged.judge(sent.seq, ex, &needles);
        if !ex.is_success() {
            sizer.notes.push(format!(
                "{tokens} tokens: {} (transcript #{}): not exercised",
                describe(ex),
                sent.seq
            ));
        }
        if !was_exercised {
            continue;
        }
        exercised.push(sent_tokens);
        if judged.lost.last().is_some_and(|(seq, _)| *seq == sent.seq) {
            let lost: Vec<f64> = lost.iter().map(|&i| facts.needles[i].0).collect();
            let usage = ex
                .usage
                .map(|u| format!("; usage says {} prompt tokens for {sent_tokens} sent", u.prompt_tokens))
                .unwrap_or_default();
            findings.push(Finding {
                code: FindingCode::NeedleLost,
                message: format!(
                    "a {sent_tokens}-token prompt was answered 200 without the facts at depths {lost:?} (transcript #{}){usage}{}",
                    sent.seq,
                    beside_the_loss(ctx, ex, false)
                ),
                leak: None,
            });
        }
    }
    let baseline_ok = judged.baseline_ok == Some(true);
    ctx.session.roles(ctx.case_id, &[("lengths", lines)])?;
    let mut coverage = sizer.coverage;
    coverage.max_prompt_tokens = exercised.iter().copied().max().unwrap_or(0);
    coverage.target_prompt_tokens = p.lengths.last().map_or(0, |f| (f * usable as f64) as u64);
    let what = format!(
        "needles at depths {:?} recalled at {:?} tokens; {} requests, {} prompt tokens{}",
        p.depths,
        exercised,
        coverage.requests,
        coverage.prompt_tokens,
        if sizer.notes.is_empty() {
            String::new()
        } else {
            format!(" ({})", sizer.notes.join("; "))
        }
    );
    let reached = if !baseline_ok {
        Err(format!(
            "the model did not recall every needle of a {}-token prompt, so losses at length say nothing; {what}",
            p.short_tokens
        ))
    } else if exercised.len() < p.lengths.len() {
        Err(format!("not every length was processed; {what}"))
    } else {
        Ok(what)
    };
    Ok(conclude(findings, reached, coverage))
}

#[cfg(test)]
mod tests {
    use super::stopped_at;

    #[test]
    fn only_an_answer_that_reached_the_room_was_stopped_by_the_context() {
        // llama.cpp without --context-shift: 1,897 + 151 = 2,048.
        assert!(stopped_at(151, 151, 2048, true));
        assert!(stopped_at(145, 151, 2048, true));
        // A cap on generated tokens (finish reason length, far below the room) is not
        // the context stopping it.
        assert!(!stopped_at(64, 151, 2048, true));
        // Estimated counts get a twentieth of the context.
        assert!(stopped_at(60, 151, 2048, false));
        assert!(!stopped_at(40, 151, 2048, false));
    }
}
