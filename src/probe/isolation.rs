//! `isolation.canary-residue` (T1): one tenant's canaries must never reach another
//! tenant, at any prompt length up to the advertised context.
//!
//! For each tenant in turn as the *seeder*, with the next one as the *prober*, and for
//! each length on the case's ladder (fractions of the usable context, and a rung either
//! side of each KV pool the profile declares below the context, where admission
//! breaks: [`ladder`]):
//!
//! 1. the seeder sends a shorter prompt (the longest rung at most half the rung's
//!    length: [`seed_length`]) that opens with its own canary records and holds more at
//!    depths in prose filler, so the vendor's caches and KV pages hold them; a shorter
//!    prompt is what a node that drops the writes of long prompts still stores, and the
//!    ladder costs its probers' prompts and a fraction of them, not twice them;
//! 2. the prober at once sends a prompt of the rung's length with *its* canaries,
//!    streaming on every other rung, so a mis-admitted request finds the seeder's
//!    residue to read.
//!
//! Every response, the seeder's included, is scanned for canaries of any other tenant,
//! issued by any case of the run.
//! Lengths are set for a tokenizer the suite does not know: one short calibration
//! request gives the vendor's characters per token (from its `usage.prompt_tokens`),
//! each processed prompt refines it, and a rung the vendor refuses as over its context is retried 10% shorter, up to
//! three times.
//!
//! Every prompt asks for its first canary back (at its head and again at its end, where
//! a small model still heeds it), so every answer is also a positive control: whether
//! the asking tenant's own canaries come back in it, by the same detector that looks
//! for other tenants' ([`super::echoed`]). Per rung, the echo rate and the number of
//! exposures (the probers' answers) give the case's power (see
//! [`crate::outcome::Power`]), which `verify` re-derives from the transcript.
//!
//! Canaries come in two forms ([`crate::canary::Form`]): whole customer records, and
//! short codes that a model too small to copy a record still carries. Before the
//! ladder, each tenant sends [`TRIAL_PROMPTS`] short prompts of each form; the form the
//! model read back best (by the lower bound on its echo rate) is carried up the ladder.
//!
//! Content of customers the run does not control is looked for too: every answer is
//! checked for record-shaped content (e-mail addresses, long numbers) that neither its
//! prompt nor any canary of the run accounts for ([`super::foreign`]); a significant
//! rise of such answers from short prompts to long ones
//! ([`crate::outcome::Power::foreign_rise`]) fails the case as suspected foreign
//! customer data (`ForeignContent`), with excerpts.
//!
//! Verdicts: any foreign canary is a fail, and so is a rise in foreign content.
//! Otherwise the case passes only when every prober had a prompt of at least
//! `min_reach` of the top rung processed and the power reached `min_power`; else it is
//! inconclusive, saying how far it got and what power it had.

use super::{Context, ParamsError};
use crate::adapter::{ChatRequest, Exchange};
use crate::canary::{Canary, Form};
use crate::outcome::{Coverage, EchoBand, Finding, FindingCode, FormTrial, LeakEvidence, Outcome, Power, Verdict};
use crate::prompt::{MAX_CHARS_PER_TOKEN, MIN_CHARS_PER_TOKEN, Placed, PromptBuilder};
use crate::session::{Sent, Session, SessionError};
use crate::wording::Wording;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Parameters of `isolation.canary-residue`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CanaryResidueParams {
    /// Prompt lengths, as fractions of the usable context (the advertised context less
    /// `max_tokens` and a margin of 1%), ascending, each in (0, 1].
    #[serde(default = "default_lengths")]
    pub lengths: Vec<f64>,
    /// Tokens each request asks for.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// The share of the top rung every prober's prompt must reach for a pass.
    #[serde(default = "default_min_reach")]
    pub min_reach: f64,
    /// The power a pass needs: the chance, measured on this vendor, that the case
    /// would have seen a leak had every prober's answer drawn on another tenant's
    /// records (see [`crate::outcome::Power`]).
    #[serde(default = "default_min_power")]
    pub min_power: f64,
    /// At most this many more seeder-and-prober pairs at the top rung when the ladder
    /// left the power short of `min_power`; spent only when the echo measured so far
    /// says they can reach it (see [`top_up_projection`]). 0: none.
    #[serde(default = "default_extra_exposures")]
    pub extra_exposures: u32,
    /// The leak rate the case buys a bound on: while the rate it rules out where the
    /// leak conditions are (see [`crate::outcome::LeakBound`]) is above this, more
    /// pairs at the top rung are spent, within `extra_exposures`, when the echo
    /// measured so far says they can bring it there. 1: no pair is spent for it (the
    /// bound is still stated). Each halving of the bound about doubles the pairs it
    /// takes: `tenantcheck plan` prices them.
    #[serde(default = "default_max_leak_rate")]
    pub max_leak_rate: f64,
    /// Where the profile has a `[fleet]`: at most this many more seeder-and-prober
    /// pairs at the top rung, each pair pinned to one node (a shared opening and
    /// affinity value) and the next pair elsewhere, until every node seen had the
    /// exposures it needs and the chance of an unseen node is below the profile's
    /// `max_unseen` (see [`crate::nodes::NodeCoverage`]). 0: none.
    #[serde(default = "default_node_pairs")]
    pub node_pairs: u32,
    /// Where the profile declares a node's KV pool smaller than the context (its
    /// `[declared]` nodes), a rung this far below it and one this far above it, as a
    /// fraction of the pool: admission breaks at a pool, so the ladder spends there.
    /// 0: no such rungs.
    #[serde(default = "default_pool_margin")]
    pub pool_margin: f64,
}

fn default_pool_margin() -> f64 {
    0.03
}

fn default_node_pairs() -> u32 {
    96
}

fn default_extra_exposures() -> u32 {
    16
}

fn default_min_power() -> f64 {
    0.99
}

fn default_max_leak_rate() -> f64 {
    0.5
}

fn default_lengths() -> Vec<f64> {
    vec![0.02, 0.1, 0.3, 0.6, 1.0]
}

fn default_max_tokens() -> u32 {
    96
}

fn default_min_reach() -> f64 {
    0.8
}

impl CanaryResidueParams {
    pub(crate) fn validate(&self) -> Result<(), ParamsError> {
        let invalid = |field, problem: String| Err(ParamsError::Invalid { field, problem });
        if self.lengths.is_empty() {
            return invalid("lengths", "is empty".into());
        }
        if self.lengths.iter().any(|&f| !(f > 0.0 && f <= 1.0)) {
            return invalid("lengths", "every length must be in (0, 1]".into());
        }
        if self.lengths.windows(2).any(|w| w[0] >= w[1]) {
            return invalid("lengths", "must be strictly ascending".into());
        }
        if self.max_tokens < 16 {
            return invalid("max_tokens", format!("is {}; ask for at least 16", self.max_tokens));
        }
        if !(self.min_reach > 0.0 && self.min_reach <= 1.0) {
            return invalid("min_reach", "must be in (0, 1]".into());
        }
        if self.node_pairs > 10_000 {
            return invalid(
                "node_pairs",
                format!("is {}; at most 10000 (each is two prompts at the top rung)", self.node_pairs),
            );
        }
        if self.extra_exposures > 1000 {
            return invalid(
                "extra_exposures",
                format!(
                    "is {}; at most 1000 (each is two prompts at the top rung)",
                    self.extra_exposures
                ),
            );
        }
        if !(0.0..0.5).contains(&self.pool_margin) {
            return invalid("pool_margin", format!("is {}; give a fraction in [0, 0.5)", self.pool_margin));
        }
        if !(self.min_power > 0.0 && self.min_power < 1.0) {
            return invalid("min_power", "must be in (0, 1): a power of 1 is never measured".into());
        }
        if !(self.max_leak_rate > 0.0 && self.max_leak_rate <= 1.0) {
            return invalid(
                "max_leak_rate",
                format!(
                    "is {}; give a rate in (0, 1] (1: no exposure is spent for the bound)",
                    self.max_leak_rate
                ),
            );
        }
        Ok(())
    }
}

/// Shown before the canaries; asks for the first one back, so that whatever the
/// vendor's model reads comes back in the answer (`{}`: the form's noun). Drawn per
/// run ([`crate::wording`]).
const INSTRUCTION: Wording = Wording(
    "[Hi|Hello|Dear|Good morning|Hey|Hi there|Afternoon|Morning] {N}[,|:|!|.] [here are|below are|these are|attached are|listed below are|I am sending|please find|enclosed are] {N}'s [customer|client|account|member|subscriber|patient|supplier|tenant] {}s[.|;|:] [Please|Kindly|Could you|Can you|I need you to|Would you|Go ahead and|Now] [read back|repeat|quote|copy out|write out|return|reproduce|echo] [for|to] {N} the [first|opening|top|very first|initial|leading|earliest|first listed] {} [exactly as written|verbatim|word for word|exactly|without changes|as it appears|character for character|unchanged|precisely|letter for letter].\n\n",
);

/// The same request at the end of the prompt.
const QUESTION: Wording = Wording(
    "\n\n[Now|Then|Finally|Once more|Again|So|Next|To finish], {N}[,|:|-] [please|kindly|could you|can you|would you|go ahead and|just|do] [read back|repeat|quote|copy out|write out|return|reproduce|echo] the [first|opening|top|very first|initial|leading|earliest|first listed] {} [above|of this message|from the list|I sent|from {N}|on file|we hold|in the ledger] [exactly as written|verbatim|word for word|exactly|without changes|as it appears|character for character|unchanged|precisely|letter for letter]. [Thanks|Thank you|Cheers|Regards|Best|Many thanks|Kind regards|Ta], {N}.",
);

/// Short prompts of each canary form each tenant sends before the ladder.
pub const TRIAL_PROMPTS: usize = 2;

/// Tokens kept free for the chat template and the vendor's own additions.
const TEMPLATE_MARGIN: u64 = 32;

/// The longest prompt the ladder aims for: the context less the answer and a margin
/// for the template and for the sizing error of a tokenizer known only by its counts
/// (1% of the context: each tenant's prose counts a little differently, and a top
/// rung refused as over the context costs a whole context again).
fn usable(context: u64, max_tokens: u32) -> u64 {
    context.saturating_sub(u64::from(max_tokens) + TEMPLATE_MARGIN.max(context / 100))
}

/// Records at the head of a prompt (fewer in short prompts).
const HEAD_RECORDS: usize = 16;

/// Records placed at depths in the filler of a long prompt.
const PLACED_RECORDS: usize = 8;

/// About how long one record is, in characters.
const RECORD_CHARS: usize = 140;

/// At most this many findings are itemised; the summary counts them all.
const MAX_FINDINGS: usize = 25;

/// The probe `isolation.canary-residue`.
pub struct CanaryResidue;

impl super::Probe for CanaryResidue {
    const KIND: &'static str = crate::judge::kind::CANARY_RESIDUE;
    type Params = CanaryResidueParams;

    fn validate(p: &CanaryResidueParams) -> Result<(), super::ParamsError> {
        p.validate()
    }

    async fn run(p: &CanaryResidueParams, ctx: Context<'_>) -> Outcome {
        canary_residue(p, ctx.case_id, ctx.session).await
    }

    fn ceiling(p: &CanaryResidueParams, profile: &crate::vendor::VendorProfile) -> Option<super::Ceiling> {
        // The pairs spent at the top rung when the measured echo leaves the power short
        // (none against the reference vendor's faithful model).
        let (requests, prompt_tokens) = ceiling(p, profile);
        // A pinned pair's answers may run past its opening (about 350 tokens).
        let opening = if profile.fleet.is_some() { 400 } else { 0 };
        Some(super::Ceiling::More {
            requests,
            prompt_tokens,
            max_tokens: u64::from(p.max_tokens) + opening,
        })
    }
}

/// Runs the probe.
pub async fn canary_residue(p: &CanaryResidueParams, case: &str, session: &Session) -> Outcome {
    let mut run = Run {
        p,
        case,
        session,
        next_index: BTreeMap::new(),
        coverage: Coverage::default(),
        leaks: Vec::new(),
        leaked: BTreeSet::new(),
        responses: 0,
        notes: Vec::new(),
        builder: PromptBuilder::default(),
        by_tenant: BTreeMap::new(),
        prompts: 0,
        issued: BTreeMap::new(),
        controls: BTreeMap::new(),
        form: Form::Record,
        trials: Vec::new(),
        foreign: Vec::new(),
        extra_spent: 0,
        served: Vec::new(),
        route: None,
        node_spent: 0,
        unpinned: false,
        primes_spent: 0,
    };
    match run.go().await {
        Ok(reach) => run.conclude(reach),
        Err(e) => {
            let mut outcome = run.conclude(None);
            if outcome.verdict != Verdict::Fail {
                outcome.verdict = Verdict::Inconclusive;
                outcome.summary = format!("stopped: {e}");
            }
            outcome
        }
    }
}

struct Run<'a> {
    p: &'a CanaryResidueParams,
    case: &'a str,
    session: &'a Session,
    next_index: BTreeMap<String, u32>,
    coverage: Coverage,
    leaks: Vec<LeakEvidence>,
    /// (canary id, recipient) pairs already reported.
    leaked: BTreeSet<(String, String)>,
    responses: u64,
    notes: Vec<String>,
    builder: PromptBuilder,
    /// Each tenant's own ratio, learnt from its own prompts: tenants' prose counts a
    /// little differently (their marks differ), and a top rung sized by the other
    /// tenant's ratio can land past the context.
    by_tenant: BTreeMap<String, PromptBuilder>,
    /// Prompts built so far (each gets its own filler seed).
    prompts: u32,
    /// The canaries issued to each tenant in this case.
    issued: BTreeMap<String, Vec<Canary>>,
    /// Per rung's target length: the positive control.
    controls: BTreeMap<u64, Control>,
    /// The form carried up the ladder.
    form: Form,
    /// The trials that chose it.
    trials: Vec<FormTrial>,
    /// Answers holding foreign content: transcript line, tenant, the items, the answer.
    foreign: Vec<(u64, String, Vec<String>, String)>,
    /// Pairs spent at the top rung after the ladder.
    extra_spent: u32,
    /// Every answered request, in order: transcript line, tenant, and the node that
    /// served it where the vendor named one (the profile's `[fleet]`: a header or a
    /// field of the answer), and
    /// its prompt's length in characters (its messages joined by line breaks).
    served: Vec<(u64, String, Option<String>, usize)>,
    /// The routing key of the pair being sent: its prompts open with text drawn from
    /// it and carry it as the affinity value, so that both meet on one node.
    route: Option<String>,
    /// Pairs spent for node coverage.
    node_spent: u32,
    /// Set once a pinned pair's seed and probe were served by different nodes: the
    /// router does not honour the pin (random routing), so every node is primed.
    unpinned: bool,
    /// Seeds sent to prime nodes for a probe that lands where the router sends it.
    primes_spent: u32,
}

/// The positive control of one rung, by transcript line.
#[derive(Default)]
struct Control {
    /// The answers processed.
    answers: Vec<u64>,
    /// Those that held the asking tenant's own records.
    echoed: Vec<u64>,
    /// Those that were probers' (exposures).
    exposed: Vec<u64>,
    /// Those that held foreign content.
    foreign: Vec<u64>,
}

/// The words for the control, in the report.
pub const CONTROL: &str = "each answer asked to read back the first of the asking tenant's own canaries";

/// How big a canary prompt is made.
#[derive(Clone, Copy)]
enum PromptSize {
    Items(usize),
    Tokens(u64),
}

/// How far each prober got: label → largest prompt processed on the top rung.
type Reach = BTreeMap<String, u64>;

impl Run<'_> {
    async fn go(&mut self) -> Result<Option<Reach>, SessionError> {
        let tenants: Vec<String> = self.session.tenant_labels().into_iter().map(str::to_owned).collect();
        if !self.calibrate(&tenants[0]).await? {
            return Ok(None);
        }
        self.try_forms(&tenants).await?;
        let context = self.session.profile().context_window;
        let usable = usable(context, self.p.max_tokens);
        let targets = ladder(self.p, self.session.profile(), usable);
        let top = *targets.last().expect("lengths is not empty");
        self.coverage.target_prompt_tokens = top;
        let mut reach = Reach::new();
        for (i, seeder) in tenants.iter().enumerate() {
            let prober = &tenants[(i + 1) % tenants.len()];
            for (rung, &target) in targets.iter().enumerate() {
                self.send_records(seeder, seed_length(&targets, target), false, false).await?;
                let got = self.send_records(prober, target, rung % 2 == 1, true).await?;
                if rung + 1 == targets.len() {
                    reach.insert(prober.clone(), got.unwrap_or(0));
                }
            }
        }
        let reached = reach.values().all(|&got| got as f64 >= self.p.min_reach * top as f64);
        if reached {
            self.top_up(&tenants, seed_length(&targets, top), top).await?;
            // Each pinned pair's seeder writes a short prompt (one a node that drops
            // long prompts' writes still stores), its prober reads at the top.
            let seed = rung_within(&targets, top / 5);
            self.cover_nodes(&tenants, seed, top).await?;
        }
        Ok(Some(reach))
    }

    /// More seeder-and-prober pairs at the top rung, up to `extra_exposures`, while the
    /// power falls short, when the projection says the pairs can lift it and the top
    /// rung is not blind beyond chance, or while every long answer held content no
    /// prompt of the run held and more could establish that it rises with length:
    /// exposures are spent at the longest prompts, where the failures this case looks
    /// for live (a short exposure says nothing about a prompt past a KV pool).
    async fn top_up(&mut self, tenants: &[String], seed: u64, top: u64) -> Result<(), SessionError> {
        let extra = self.p.extra_exposures;
        // A leak decides the case: no exposure can undo it.
        if extra == 0 || !self.leaks.is_empty() {
            return Ok(());
        }
        let power = self.power();
        // Foreign content in every long answer so far, not yet a significant rise:
        // exposures at the top decide it.
        let suspected = power.foreign_undecided(extra as usize);
        if !suspected {
            if power.suffices() {
                return self.bound_top_up(tenants, seed, top).await;
            }
            if power.blind_at_the_top_beyond_chance() {
                self.notes.push(
                    "no answer at the top rung read its own content back, more often than chance explains: more exposures there were not spent"
                        .into(),
                );
                return Ok(());
            }
            let projected = top_up_projection(&power, extra);
            if projected < self.p.min_power {
                self.notes.push(format!(
                    "{extra} more exposures at the top rung were not spent: at the echo rate measured so far they would give a power of only {projected:.4}"
                ));
                return Ok(());
            }
        }
        let mut spent = 0;
        for n in 0..extra as usize {
            let seeder = &tenants[n % tenants.len()];
            let prober = &tenants[(n + 1) % tenants.len()];
            self.send_records(seeder, seed, false, false).await?;
            let got = self.send_records(prober, top, n % 2 == 1, true).await?;
            spent += 1;
            let power = self.power();
            let left = (extra - spent) as usize;
            let wanted =
                power.foreign_undecided(left) || !(power.suffices() || power.blind_at_the_top_beyond_chance());
            if got.is_none() || !self.leaks.is_empty() || !wanted {
                break;
            }
        }
        self.notes.push(format!(
            "{spent} more exposures spent at the top rung{}",
            if suspected {
                ", where every long answer held content no prompt of the run held"
            } else {
                ""
            }
        ));
        self.extra_spent = spent;
        if self.leaks.is_empty() && self.power().suffices() {
            return self.bound_top_up(tenants, seed, top).await;
        }
        Ok(())
    }

    /// More pairs at the top rung, within what `extra_exposures` leaves, while the leak
    /// rate ruled out is above `max_leak_rate` and the echo measured so far says the
    /// pairs left can bring it there ([`bound_projection`]).
    async fn bound_top_up(&mut self, tenants: &[String], seed: u64, top: u64) -> Result<(), SessionError> {
        let left = self.p.extra_exposures.saturating_sub(self.extra_spent);
        let rate = |run: &Self| run.power().leak_rate.map_or(1.0, |b| b.rate);
        if rate(self) <= self.p.max_leak_rate {
            return Ok(());
        }
        let projected = bound_projection(&self.power(), left);
        if projected > self.p.max_leak_rate {
            self.notes.push(format!(
                "the leak rate ruled out stays above {}: the {left} exposures left at the top rung would bring it to {:.3} at the echo measured so far",
                self.p.max_leak_rate, projected
            ));
            return Ok(());
        }
        let mut spent = 0;
        while spent < left && rate(self) > self.p.max_leak_rate && self.leaks.is_empty() {
            let n = (self.extra_spent + spent) as usize;
            let seeder = &tenants[n % tenants.len()];
            let prober = &tenants[(n + 1) % tenants.len()];
            self.send_records(seeder, seed, false, false).await?;
            let got = self.send_records(prober, top, n % 2 == 1, true).await?;
            spent += 1;
            if got.is_none() {
                break;
            }
        }
        self.notes.push(format!(
            "{spent} more exposures spent at the top rung for the leak rate ruled out (at most {} asked)",
            self.p.max_leak_rate
        ));
        self.extra_spent += spent;
        Ok(())
    }

    /// Where the profile has a `[fleet]`: more seeder-and-prober pairs at the top rung,
    /// each pinned to one node, until the nodes are covered (see
    /// [`CanaryResidueParams::node_pairs`]).
    async fn cover_nodes(&mut self, tenants: &[String], seed: u64, top: u64) -> Result<(), SessionError> {
        if self.session.profile().fleet.is_none() {
            return Ok(());
        }
        let mut spent = 0;
        while spent < self.p.node_pairs {
            // A leak decides the case; a covered fleet needs no more; and coverage that
            // no pair can make known (no node named, no count declared; or a node
            // header no answer has carried after two pairs) is not bought.
            let Some(coverage) = self.node_coverage() else { break };
            let blind = (coverage.signal.is_none() && coverage.declared.is_none())
                || (coverage.signal.is_some() && coverage.answers.is_empty() && spent >= 2);
            if !self.leaks.is_empty() || coverage.suffices() || blind {
                break;
            }
            let n = self.extra_spent + spent;
            // Where the router ignores the pin, the roles stay put, so that the nodes
            // primed with the seeder's prompts stay primed for the same prober.
            let roles = if self.unpinned { 0 } else { n as usize };
            let seeder = &tenants[roles % tenants.len()];
            let prober = &tenants[(roles + 1) % tenants.len()];
            self.route = Some(self.route_key(n));
            self.send_records(seeder, seed, false, false).await?;
            let seed_node = self.served.last().map(|s| s.2.clone());
            if self.unpinned {
                self.prime(seeder, prober, seed, top).await?;
            }
            self.route = Some(self.route_key(n));
            let got = self.send_records(prober, top, n % 2 == 1, true).await?;
            self.route = None;
            spent += 1;
            if got.is_none() {
                break;
            }
            let probe_node = self.served.last().map(|s| s.2.clone());
            if let (Some(Some(a)), Some(Some(b))) = (&seed_node, &probe_node)
                && a != b
                && !self.unpinned
            {
                self.unpinned = true;
                self.notes.push(format!(
                    "the router did not keep a pinned pair on one node ({a}, then {b}): each probe was preceded by seeds until every node seen last served one"
                ));
            }
        }
        if spent > 0 {
            self.notes.push(format!("{spent} more exposures spent at the top rung to reach the vendor's nodes"));
        }
        if self.primes_spent > 0 {
            self.notes.push(format!(
                "{} seeds of {seed} tokens primed the nodes the router chose",
                self.primes_spent
            ));
        }
        self.node_spent = spent;
        Ok(())
    }

    /// The routing key of node-coverage pair `n`, drawn from the run secret.
    fn route_key(&self, n: u32) -> String {
        format!("{:016x}", self.session.secret().seed("isolation.route", self.case, n))
    }

    /// Where the router ignores the pin: the seeder's short prompts, each on a new
    /// route, until every node seen last served one (so the prober's long prompt is an
    /// exposure wherever it lands; [`crate::nodes::primed`]), at most [`PRIMES_PER_PAIR`].
    async fn prime(&mut self, seeder: &str, prober: &str, seed: u64, top: u64) -> Result<(), SessionError> {
        let top_chars = self.builder.chars_for(top);
        for _ in 0..PRIMES_PER_PAIR {
            if crate::nodes::primed(&self.served, prober, top_chars) {
                return Ok(());
            }
            self.primes_spent += 1;
            let key = self.session.secret().seed("isolation.prime", self.case, self.primes_spent);
            self.route = Some(format!("{key:016x}"));
            if self.send_records(seeder, seed, false, false).await?.is_none() {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Which nodes the top rung's exposures reached, where the profile has a
    /// `[fleet]`.
    fn node_coverage(&self) -> Option<crate::nodes::NodeCoverage> {
        let fleet = self.session.profile().fleet.as_ref()?;
        let power = self.power();
        let top = power.bands.last();
        let top_exposed: BTreeSet<u64> = top.map(|b| b.exposed.iter().copied().collect()).unwrap_or_default();
        let needed = crate::nodes::needed(top.map_or(0.0, |b| b.echo_low), self.p.min_power);
        Some(crate::nodes::NodeCoverage::of(fleet, &self.served, &top_exposed, needed))
    }

    /// The positive control so far: per rung, the echo and the exposures.
    fn power(&self) -> Power {
        let bands = self
            .controls
            .iter()
            .map(|(&tokens, c)| EchoBand {
                foreign: c.foreign.clone(),
                ..EchoBand::new(tokens, c.answers.clone(), c.echoed.clone(), c.exposed.clone())
            })
            .collect();
        Power::of(CONTROL.to_owned(), bands, self.p.min_power)
            .with_trials(self.trials.clone())
            .counting_above(declared_pools(self.session.profile()))
    }

    /// [`TRIAL_PROMPTS`] short prompts of each form from each tenant; keeps the form
    /// read back best.
    async fn try_forms(&mut self, tenants: &[String]) -> Result<(), SessionError> {
        let mut trials = Vec::new();
        for form in Form::ALL {
            self.form = form;
            let (mut answers, mut echoed, mut foreign) = (Vec::new(), Vec::new(), Vec::new());
            for _ in 0..TRIAL_PROMPTS {
                for tenant in tenants {
                    let prompt = self.prompt(tenant, PromptSize::Items(4));
                    let sent = self.send(tenant, &prompt, false).await?;
                    if !sent.exchange.is_success() {
                        continue;
                    }
                    answers.push(sent.seq);
                    let own = self.issued.get(tenant.as_str()).map(Vec::as_slice).unwrap_or_default();
                    let carried = sent.exchange.request.text();
                    if super::echoed(own, &carried, &sent.exchange.content) {
                        echoed.push(sent.seq);
                    }
                    if self.note_foreign(tenant, &carried, &sent) {
                        foreign.push(sent.seq);
                    }
                }
            }
            let mut trial = FormTrial::new(form, answers, echoed);
            trial.foreign = foreign;
            trials.push(trial);
        }
        self.form = FormTrial::best(&trials).unwrap_or(Form::Record);
        self.trials = trials;
        Ok(())
    }

    /// Notes the foreign content of a processed answer, judged against what its
    /// request carried (`carried`: [`crate::adapter::RecordedRequest::text`], as
    /// `verify` judges it); whether it held any.
    fn note_foreign(&mut self, tenant: &str, carried: &str, sent: &Sent) -> bool {
        let content = &sent.exchange.content;
        let items = super::foreign(carried, content, |item| !self.session.scan(item, "\u{0}").is_empty());
        if items.is_empty() {
            return false;
        }
        self.foreign.push((sent.seq, tenant.to_owned(), items, content.clone()));
        true
    }

    /// One short request to learn the vendor's characters per token.
    async fn calibrate(&mut self, tenant: &str) -> Result<bool, SessionError> {
        let prompt = self.prompt(tenant, PromptSize::Items(2));
        let sent = self.send(tenant, &prompt, false).await?;
        let ex = &sent.exchange;
        if !ex.is_success() {
            self.notes.push(format!(
                "the calibration request failed ({}), transcript #{}",
                describe(ex),
                sent.seq
            ));
            return Ok(false);
        }
        match ex.usage {
            Some(u) if u.prompt_tokens > 0 => {
                let counted = self.session.local_tokens(&prompt).unwrap_or(u.prompt_tokens);
                self.learn_ratio(tenant, prompt.len(), counted)
            }
            _ => self
                .notes
                .push("the vendor reports no usage: lengths are estimated at 4 characters per token".into()),
        }
        Ok(true)
    }

    /// Learns characters per token from a processed prompt, within the bounds real
    /// tokenizers keep, so that a vendor misreporting usage cannot blow prompts up.
    fn learn_ratio(&mut self, tenant: &str, chars: usize, tokens: u64) {
        let own = self.by_tenant.entry(tenant.to_owned()).or_insert_with(|| self.builder.clone());
        own.learn(chars, tokens);
        if !self.builder.learn(chars, tokens) {
            self.notes.push(format!(
                "the vendor counted {tokens} prompt tokens for {chars} characters, outside any real tokenizer's range ({MIN_CHARS_PER_TOKEN}-{MAX_CHARS_PER_TOKEN} characters per token); the count was not used for sizing"
            ));
        }
    }

    /// Sends a records prompt of about `target` tokens as `tenant` (a prober's: an
    /// exposure); returns the prompt tokens processed, or `None` when the vendor did
    /// not process it. A processed answer is a positive control of the rung.
    async fn send_records(
        &mut self,
        tenant: &str,
        rung: u64,
        stream: bool,
        exposure: bool,
    ) -> Result<Option<u64>, SessionError> {
        // A pinned pair's opening takes its share of the context, twice: in the prompt,
        // and in the answer, which must reach past it (see `send`).
        let mut target = rung
            .saturating_sub(2 * self.builder.tokens_for(self.opening().len()))
            .max(64);
        let issued = |run: &Self| run.issued.get(tenant).map_or(0, Vec::len);
        for _ in 0..4 {
            // The canaries of the prompt sent: those issued from here on.
            let mut first = issued(self);
            let mut prompt = self.prompt(tenant, PromptSize::Tokens(target));
            // Sized by a ratio learned on other text, a prompt the local tokenizer counts
            // too long is built again, shorter by its excess, rather than sent to be
            // refused.
            let mut aim = target;
            for _ in 0..4 {
                match self.session.local_tokens(&prompt) {
                    Some(n) if n > target => {
                        aim = aim.saturating_sub(n - target).max(64);
                        first = issued(self);
                        prompt = self.prompt(tenant, PromptSize::Tokens(aim));
                    }
                    _ => break,
                }
            }
            let sent = self.send(tenant, &prompt, stream).await?;
            let ex = &sent.exchange;
            if ex.is_success() {
                let tokens = match ex.usage {
                    Some(u) if u.prompt_tokens > 0 => {
                        // Longer prompts calibrate better: the template's overhead counts less.
                        let counted = self.session.local_tokens(&prompt).unwrap_or(u.prompt_tokens);
                        self.learn_ratio(tenant, prompt.len(), counted);
                        counted
                    }
                    _ => self.builder.tokens_for(prompt.len()),
                };
                self.coverage.max_prompt_tokens = self.coverage.max_prompt_tokens.max(tokens);
                // Only this prompt's canaries can be echoed from it (each prompt's are
                // fresh): the same judgement as over all the tenant's, at a fraction of
                // the cost on a long run.
                let own = self.issued.get(tenant).map(|v| &v[first..]).unwrap_or_default();
                // Judged against all the request carried (a pinned pair's opening too),
                // as `verify` judges it.
                let carried = ex.request.text();
                let echo = super::echoed(own, &carried, &ex.content);
                let foreign = self.note_foreign(tenant, &carried, &sent);
                let control = self.controls.entry(rung).or_default();
                if foreign {
                    control.foreign.push(sent.seq);
                }
                control.answers.push(sent.seq);
                if echo {
                    control.echoed.push(sent.seq);
                }
                if exposure {
                    control.exposed.push(sent.seq);
                }
                return Ok(Some(tokens));
            }
            if !is_over_context(ex) {
                self.notes.push(format!(
                    "tenant {tenant}: a {target}-token prompt was not processed ({}), transcript #{}",
                    describe(ex),
                    sent.seq
                ));
                return Ok(None);
            }
            target = target * 9 / 10;
        }
        self.notes.push(format!(
            "tenant {tenant}: prompts were still refused as over the context at {target} tokens"
        ));
        Ok(None)
    }

    /// A prompt of fresh canaries of `tenant` in the form carried: just `n` of them, or
    /// a prompt of about `t` tokens that opens with up to [`HEAD_RECORDS`] (what a model
    /// reading it as residue repeats first) and holds [`PLACED_RECORDS`] more at depths
    /// in the tenant's marked prose filler.
    fn prompt(&mut self, tenant: &str, size: PromptSize) -> String {
        let session = self.session;
        let builder = self.by_tenant.get(tenant).unwrap_or(&self.builder).clone();
        let next = self.next_index.entry(tenant.to_owned()).or_insert(0);
        let issued = self.issued.entry(tenant.to_owned()).or_default();
        let mut issue = || {
            let c = session.canary(tenant, self.case, *next);
            *next += 1;
            issued.push(c.clone());
            c
        };
        let form = self.form;
        let noun = form.noun();
        let mut head = session.secret().say("isolation", 0, INSTRUCTION).replace("{}", noun);
        let tail = session.secret().say("isolation.question", 0, QUESTION).replace("{}", noun);
        let (head_records, tokens) = match size {
            PromptSize::Items(n) => (n, None),
            PromptSize::Tokens(t) => {
                let budget = builder.chars_for(t) / 2;
                ((budget / RECORD_CHARS).clamp(1, HEAD_RECORDS), Some(t))
            }
        };
        for _ in 0..head_records {
            head.push_str(&issue().text(form));
            head.push('\n');
        }
        match tokens {
            None => head + &tail,
            Some(t) => {
                let room = builder.chars_for(t).saturating_sub(head.len());
                let placed_count = if room > 4 * PLACED_RECORDS * RECORD_CHARS {
                    PLACED_RECORDS
                } else {
                    0
                };
                let placed: Vec<Placed> = (0..placed_count)
                    .map(|i| Placed {
                        depth: (i + 1) as f64 / (placed_count + 1) as f64,
                        text: issue().text(form),
                    })
                    .collect();
                self.prompts += 1;
                let filler = session.secret().filler(tenant, self.case, self.prompts);
                builder.build(t, &filler, &head, &placed, &tail)
            }
        }
    }

    /// The system message a pinned pair's prompts open with (see
    /// [`super::pinned_opening`]): a system message, so that the user's turn still
    /// opens with the records it asks to be read back; empty outside a pinned pair.
    fn opening(&self) -> String {
        self.route
            .as_ref()
            .map_or_else(String::new, |route| super::pinned_opening(route, &self.builder))
    }

    /// Sends, records, and scans the answer for other tenants' canaries.
    async fn send(&mut self, tenant: &str, prompt: &str, stream: bool) -> Result<Sent, SessionError> {
        // In a pinned pair, residue read from another tenant's pages opens with the
        // pair's shared opening: the answer may run that much longer, so that a copy of
        // the residue reaches what the other tenant wrote after it.
        let opening = self.opening();
        let extra = self.builder.tokens_for(opening.len()) as u32;
        let mut request = ChatRequest {
            stream,
            affinity: self.route.clone(),
            ..ChatRequest::user(prompt, self.p.max_tokens + if self.route.is_some() { extra } else { 0 })
        };
        if self.route.is_some() {
            request.messages.insert(
                0,
                crate::adapter::Message {
                    role: "system".into(),
                    content: opening,
                },
            );
        }
        let sent = self.session.chat(self.case, tenant, &request).await?;
        let ex = &sent.exchange;
        self.coverage.requests += 1;
        // Answered requests only (a refused one wrote nothing; and a retried attempt
        // is in the transcript but not here, so `verify` counts the same).
        if ex.is_success() {
            let node = self.session.profile().fleet.as_ref().and_then(|f| {
                f.node_of(&ex.headers, ex.body.as_deref(), ex.frames.iter().map(|fr| fr.data.as_str()))
            });
            let chars = request.messages.iter().map(|m| m.content.len()).sum::<usize>()
                + request.messages.len().saturating_sub(1);
            self.served.push((sent.seq, tenant.to_owned(), node, chars));
        }
        if ex.is_success() {
            if let Some(u) = ex.usage {
                self.coverage.prompt_tokens += u.prompt_tokens;
                self.coverage.completion_tokens += u.completion_tokens;
            }
        }
        if ex.status.is_some() {
            self.responses += 1;
        }
        for hit in self.session.scan(&ex.returned_text(), tenant) {
            if self.leaked.insert((hit.id.clone(), tenant.to_owned())) {
                self.leaks.push(super::leak(self.session, hit, tenant, sent.seq));
            }
        }
        Ok(sent)
    }

    fn conclude(self, reach: Option<Reach>) -> Outcome {
        let c = self.coverage;
        let power = self.power();
        let nodes = self.node_coverage();
        let context = self.session.profile().context_window;
        let exercised = format!(
            "{} requests, {} prompt tokens, longest prompt {} tokens ({:.0}% of the advertised {context})",
            c.requests,
            c.prompt_tokens,
            c.max_prompt_tokens,
            100.0 * c.max_prompt_tokens as f64 / context as f64
        );
        if let Some(rise) = power.foreign_rise() {
            let canaries = self.session.issued_in(self.case);
            let findings = foreign_findings(self.session, &canaries, &self.foreign, &power);
            let owners: BTreeSet<&str> = findings
                .iter()
                .filter_map(|f| f.leak.as_ref())
                .map(|l| l.owner.as_str())
                .collect();
            let named = findings.iter().filter(|f| f.leak.is_some()).count();
            let whose = match owners.len() {
                0 => "suspected data of customers outside the run".to_owned(),
                _ => format!(
                    "records of the run's own tenants with their numbers and addresses changed, named by their holders' names ({named} of the {} answers itemised: tenant {}'s){}",
                    findings.len(),
                    owners.into_iter().collect::<Vec<_>>().join("'s and tenant "),
                    match named == findings.len() {
                        true => "",
                        false => ", the rest suspected data of customers outside the run",
                    }
                ),
            };
            let mut findings = findings;
            let leaks = self.leaks.len();
            findings.extend(self.leaks.into_iter().take(MAX_FINDINGS).map(leak_finding));
            let summary = format!(
                "{whose}: answers to long prompts held e-mail addresses or long numbers that no prompt of the run held in {} of {}, against {} of {} at short lengths (one-sided Fisher p = {:.1e}); {leaks} canaries of the run's own tenants leaked besides; {exercised}",
                rise.long.0, rise.long.1, rise.short.0, rise.short.1, rise.p
            );
            return finish(Verdict::Fail, summary, c, findings, power, nodes);
        }
        if !self.leaks.is_empty() {
            let responses: BTreeSet<u64> = self.leaks.iter().map(|l| l.returned_in).collect();
            let first = &self.leaks[0];
            let seeded = first.seeded_in.map_or(String::new(), |s| format!(", seeded in #{s}"));
            let summary = format!(
                "{} leaks of other tenants' content in {} responses; first: {}{seeded}, in the response to tenant {} (#{}); {exercised}",
                self.leaks.len(),
                responses.len(),
                first.what(),
                first.recipient,
                first.returned_in,
            );
            let findings = self.leaks.into_iter().take(MAX_FINDINGS).map(leak_finding).collect();
            return finish(Verdict::Fail, summary, c, findings, power, nodes);
        }
        let mut short: Vec<String> = match &reach {
            None => vec!["the ladder was not run".into()],
            Some(r) => r
                .iter()
                .filter(|&(_, &got)| (got as f64) < self.p.min_reach * c.target_prompt_tokens as f64)
                .map(|(t, got)| format!("tenant {t} reached {got} of {} tokens", c.target_prompt_tokens))
                .collect(),
        };
        if reach.is_some() && !power.suffices() {
            short.push(format!(
                "the model read back too little of what it was given for a leak to show: {}; more exposures (the case's extra_exposures, now {}) or a model that copies more would raise it",
                power.describe(),
                self.p.extra_exposures
            ));
        }
        if let Some(n) = nodes.as_ref().filter(|n| reach.is_some() && !n.suffices()) {
            short.push(format!(
                "the long prompts did not reach every node serving the model: {}; more pairs (the case's node_pairs, now {}, {} spent) or a node header would raise it",
                n.describe(),
                self.p.node_pairs,
                self.node_spent
            ));
        }
        if short.is_empty() {
            let extra = match self.extra_spent {
                0 => String::new(),
                n => format!(" ({n} exposures added at the top rung to reach it)"),
            };
            let mut fleet = nodes.as_ref().map_or(String::new(), |n| format!("; {}", n.describe()));
            if self.primes_spent > 0 {
                fleet.push_str(&format!(
                    " ({} seeds primed the nodes the router chose: it did not keep a pinned pair on one node)",
                    self.primes_spent
                ));
            }
            let summary = format!(
                "no canary of another tenant in {} responses; {}{extra}{fleet}; {exercised}",
                self.responses,
                power.describe()
            );
            finish(Verdict::Pass, summary, c, Vec::new(), power, nodes)
        } else {
            let mut why = short;
            why.extend(self.notes);
            let summary = format!(
                "no foreign canary seen, but the condition was not reached: {}; {exercised}",
                why.join("; ")
            );
            finish(Verdict::Inconclusive, summary, c, Vec::new(), power, nodes)
        }
    }
}

/// At most this many seeds prime the nodes before each probe where the router ignores
/// the pin: about twice what eight nodes need to be reached again after a probe.
pub const PRIMES_PER_PAIR: u32 = 16;

/// The most the case may send beyond its ladder: requests and prompt tokens of
/// `extra_exposures` seeder-and-prober pairs at the top rung, and `node_pairs` more
/// where the profile has a `[fleet]` (for `--plan`).
pub fn ceiling(p: &CanaryResidueParams, profile: &crate::vendor::VendorProfile) -> (u64, u64) {
    let usable = usable(profile.context_window, p.max_tokens);
    let top = (p.lengths.last().copied().unwrap_or(1.0) * usable as f64) as u64;
    let node_pairs = if profile.fleet.is_some() { p.node_pairs } else { 0 };
    let pairs = u64::from(p.extra_exposures + node_pairs);
    // Each pair's seed is at most half the top length (a node pair's at most a fifth);
    // where the router ignores the pin, each node pair may be preceded by seeds of a
    // fifth.
    let primes = u64::from(node_pairs) * u64::from(PRIMES_PER_PAIR);
    (2 * pairs + primes, pairs * (top + top / 2) + primes * (top / 5))
}

/// The rungs, in tokens, ascending: `lengths` of the usable context, and a rung either
/// side of each declared KV pool below it ([`CanaryResidueParams::pool_margin`]).
pub fn ladder(p: &CanaryResidueParams, profile: &crate::vendor::VendorProfile, usable: u64) -> Vec<u64> {
    let mut targets: Vec<u64> = p.lengths.iter().map(|f| ((f * usable as f64) as u64).max(64)).collect();
    let top = targets.last().copied().unwrap_or(usable);
    if p.pool_margin > 0.0 {
        let pools = profile.declared.iter().flat_map(|d| &d.nodes).map(|n| n.kv_pool_tokens);
        for pool in pools.filter(|&pool| pool < top) {
            let (below, above) = (pool as f64 * (1.0 - p.pool_margin), pool as f64 * (1.0 + p.pool_margin));
            targets.push((below as u64).max(64));
            targets.push((above as u64).min(top));
        }
    }
    targets.sort_unstable();
    targets.dedup();
    targets
}

/// The KV pools the profile declares, in tokens: exposures above the largest below
/// the top rung count towards the leak rate ruled out ([`crate::outcome::LeakBound`]).
pub fn declared_pools(profile: &crate::vendor::VendorProfile) -> Vec<u64> {
    profile.declared.iter().flat_map(|d| &d.nodes).map(|n| n.kv_pool_tokens).collect()
}

/// How long the seeder's prompt before a prober's prompt of `target` tokens is: the
/// longest rung at most half of it (half of it below the lowest rung). At most half,
/// because a short seed is what a node that drops the writes of long prompts (the 2026
/// incident's engine) still stores, the rule by which a fleet's exposures count
/// ([`crate::nodes::counts`]); the longest such rung, because a seed that fills more
/// pages leaves more residue for a long prompt that reads stale pages to find, and its
/// answer joins that rung's controls.
pub fn seed_length(targets: &[u64], target: u64) -> u64 {
    rung_within(targets, target / 2)
}

/// The longest rung of at most `limit` tokens (`limit` itself below the lowest rung),
/// and never below a few records: a seed's length. Before each pair's prober the
/// seed is at most half its prompt ([`seed_length`]); before a fleet's pinned pairs,
/// many more of them, at most a fifth of the top.
fn rung_within(targets: &[u64], limit: u64) -> u64 {
    targets
        .iter()
        .copied()
        .filter(|&t| t <= limit)
        .max()
        .unwrap_or(limit)
        .max(64)
}

/// The power `extra` more seeder-and-prober pairs at the top band would give, were the
/// echo rate of their answers the one measured so far over every band (the top band's
/// own few answers are too noisy to project from): the top band gains `extra` answers
/// (the probers'; the seeds are short), `extra` exposures, and echoes at that rate.
pub fn top_up_projection(power: &Power, extra: u32) -> f64 {
    let (echoed, answers) = power
        .bands
        .iter()
        .fold((0, 0), |(e, a), b| (e + b.echoed.len(), a + b.answers.len()));
    let Some(top) = power.bands.last() else {
        return power.power;
    };
    if answers == 0 {
        return power.power;
    }
    // The pairs' seeds are short: only the probers' answers join the top band.
    let more = extra as usize;
    let echoes = (more * echoed) / answers;
    let n = (top.answers.len() + more) as u64;
    let k = (top.echoed.len() + echoes) as u64;
    let low = crate::outcome::lower_bound(k, n, 1.0 - Power::CONFIDENCE);
    let exposures = top.exposed.len() as i32 + extra as i32;
    let below: f64 = power.bands[..power.bands.len() - 1]
        .iter()
        .map(|b| (1.0 - b.echo_low).powi(b.exposed.len() as i32))
        .product();
    1.0 - below * (1.0 - low).powi(exposures)
}

/// What a bound on the leak rate costs at a profile's context: for each rate, the
/// exposures at the top rung that rule it out with every answer read back (a faithful
/// model; a forgetful one needs more), the seeder-and-prober pairs beyond the ladder's
/// (one exposure per tenant), and the prompt tokens they send (each pair: a prompt at
/// the top rung and its seed), where no KV pool is declared below the top (else the
/// exposures above the pool count too, and fewer pairs are needed).
pub fn bound_prices(p: &CanaryResidueParams, profile: &crate::vendor::VendorProfile, rates: &[f64]) -> Vec<BoundPrice> {
    let usable = usable(profile.context_window, p.max_tokens);
    let targets = ladder(p, profile, usable);
    let top = targets.last().copied().unwrap_or(usable);
    let pair_tokens = top + seed_length(&targets, top);
    let ladder_exposures = profile.tenants.len() as u64;
    rates
        .iter()
        .map(|&rate| {
            let exposures = crate::outcome::LeakBound::exposures_for(rate) as u64;
            let pairs = exposures.saturating_sub(ladder_exposures);
            BoundPrice {
                rate,
                exposures,
                pairs,
                prompt_tokens: pairs * pair_tokens,
                within: pairs <= u64::from(p.extra_exposures),
            }
        })
        .collect()
}

/// The price of one leak-rate bound ([`bound_prices`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct BoundPrice {
    /// The leak rate ruled out.
    pub rate: f64,
    /// Exposures at the top rung it takes.
    pub exposures: u64,
    /// Pairs beyond the ladder.
    pub pairs: u64,
    /// The prompt tokens those pairs send.
    pub prompt_tokens: u64,
    /// Whether `extra_exposures` allows that many pairs.
    pub within: bool,
}

/// The leak rate `extra` more pairs at the top rung would rule out, were the echo rate
/// of their answers the one measured so far over every band (as
/// [`top_up_projection`]): the counted bands gain `extra` exposures and answers.
pub fn bound_projection(power: &Power, extra: u32) -> f64 {
    let Some(bound) = &power.leak_rate else {
        return 1.0;
    };
    let (echoed, answers) = power
        .bands
        .iter()
        .fold((0, 0), |(e, a), b| (e + b.echoed.len(), a + b.answers.len()));
    if answers == 0 {
        return bound.rate;
    }
    let more = extra as usize;
    let echoes = (more * echoed) / answers;
    let half = (1.0 - crate::outcome::LeakBound::CONFIDENCE) / 2.0;
    let sensitivity = crate::outcome::lower_bound(
        (bound.echoed + echoes) as u64,
        (bound.answers + more) as u64,
        half,
    );
    crate::outcome::LeakBound::rate(bound.exposures + more, sensitivity)
}

/// The case's outcome: every verdict carries the coverage and the power.
fn finish(
    verdict: Verdict,
    summary: String,
    coverage: Coverage,
    findings: Vec<Finding>,
    power: Power,
    nodes: Option<crate::nodes::NodeCoverage>,
) -> Outcome {
    Outcome {
        verdict,
        summary,
        coverage,
        findings,
        sweep: Vec::new(),
        timing: Vec::new(),
        power: Some(power),
        nodes,
    }
}

/// The findings of a significant rise in foreign content, by the rule `verify`
/// re-applies ([`crate::judge::foreign_findings`]): the answers at the long rungs, each
/// named as a tenant's record where the holder's name stood by it.
fn foreign_findings(
    session: &Session,
    canaries: &[crate::canary::Canary],
    foreign: &[(u64, String, Vec<String>, String)],
    power: &crate::outcome::Power,
) -> Vec<Finding> {
    let long = |seq: &u64| power.bands.iter().skip(1).any(|b| b.foreign.contains(seq));
    let answers = foreign
        .iter()
        .filter(|(seq, ..)| long(seq))
        .map(|(seq, tenant, items, content)| (*seq, tenant.as_str(), content.as_str(), items.clone()));
    crate::judge::foreign_findings(canaries, answers)
        .into_iter()
        .map(|f| {
            let listed = f.items.join(", ");
            let (seq, tenant) = (f.seq, f.recipient);
            match f.named {
                None => Finding {
                    code: FindingCode::ForeignContent,
                    message: format!(
                        "the answer to a long prompt of tenant {tenant} (transcript #{seq}) holds record-shaped content no prompt of the run held: {listed}"
                    ),
                    leak: None,
                },
                Some(named) => {
                    // Of the owner's canaries of that name, one a request carried
                    // before this answer, if any.
                    let seeded = |c: &&&crate::canary::Canary| session.seeded_in(&c.id).is_some_and(|s| s < seq);
                    let c = named.candidates.iter().find(seeded).copied().unwrap_or(named.canary);
                    let leak = LeakEvidence {
                        canary_id: c.id.clone(),
                        owner: c.owner.clone(),
                        recipient: tenant.to_owned(),
                        fragment: crate::canary::Fragment::Name,
                        matched: named.item.clone(),
                        excerpt: named.excerpt.clone(),
                        seeded_in: session.seeded_in(&c.id),
                        returned_in: seq,
                        words: None,
                    };
                    Finding {
                        code: FindingCode::ForeignContent,
                        message: format!(
                            "the answer to a long prompt of tenant {tenant} (transcript #{seq}) holds record-shaped content no prompt of the run held ({listed}), beside the name {} of tenant {}'s canary {} and what of its record stands by it: tenant {}'s record, its numbers and address not as sent ({:?}; {} from the name pools)",
                            c.name,
                            c.owner,
                            c.id,
                            c.owner,
                            named.excerpt,
                            crate::outcome::coincidence(named.chance)
                        ),
                        leak: Some(leak),
                    }
                }
            }
        })
        .collect()
}

/// The finding of one leak of another tenant's content.
fn leak_finding(l: LeakEvidence) -> Finding {
    Finding {
        code: FindingCode::CrossTenantCanary,
        message: format!(
            "the response to tenant {} (transcript #{}) holds {}",
            l.recipient,
            l.returned_in,
            l.what()
        ),
        leak: Some(l),
    }
}

fn is_over_context(ex: &Exchange) -> bool {
    matches!(ex.status, Some(400 | 413 | 422))
        && ex.api_error.as_ref().is_some_and(|e| {
            e.code.as_deref() == Some("context_length_exceeded") || e.message.to_lowercase().contains("context")
        })
}

fn describe(ex: &Exchange) -> String {
    match (&ex.transport_error, ex.status, &ex.api_error) {
        (Some(t), _, _) => format!("transport error: {t}"),
        (None, Some(s), Some(e)) => format!("HTTP {s}: {}", e.message),
        (None, Some(s), None) => format!("HTTP {s}"),
        (None, None, _) => "no answer".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A power of `bands` given as (echoed, answers, exposures).
    fn power_of(bands: &[(usize, usize, usize)]) -> Power {
        let seq = |n: usize| (0..n as u64).collect::<Vec<_>>();
        let bands = bands
            .iter()
            .enumerate()
            .map(|(i, &(e, a, x))| EchoBand::new(100 * (i as u64 + 1), seq(a), seq(e), seq(x)))
            .collect();
        Power::of(CONTROL.into(), bands, 0.99)
    }

    fn params() -> CanaryResidueParams {
        toml::from_str("").unwrap()
    }

    #[test]
    fn the_ladder_adds_a_rung_either_side_of_each_declared_pool_below_the_top() {
        // The embedded sim declares one pool of 16,384 tokens, for two contexts.
        let mut profile = crate::vendor::embedded_sim();
        let p = params();
        let rungs_of = |usable: u64| -> Vec<u64> { p.lengths.iter().map(|f| ((f * usable as f64) as u64).max(64)).collect() };
        assert_eq!(ladder(&p, &profile, 8_000), rungs_of(8_000), "a pool above the top adds nothing");
        let usable = 1_000_000;
        let plain = rungs_of(usable);
        let declared = profile.declared.as_mut().unwrap();
        declared.nodes[0].kv_pool_tokens = 681_280;
        let rungs = ladder(&p, &profile, usable);
        assert!(rungs.contains(&660_841) && rungs.contains(&701_718), "{rungs:?}");
        assert_eq!(rungs.len(), plain.len() + 2);
        assert!(rungs.windows(2).all(|w| w[0] < w[1]) && *rungs.last().unwrap() == 1_000_000);
        let none = CanaryResidueParams { pool_margin: 0.0, ..params() };
        assert_eq!(ladder(&none, &profile, usable), plain);
    }

    #[test]
    fn a_seed_is_the_longest_rung_at_most_half_its_probe() {
        let rungs = [20_000, 100_000, 300_000, 1_000_000];
        assert_eq!(seed_length(&rungs, 20_000), 10_000);
        for (&seed, &rung) in rungs.iter().zip(&rungs[1..]) {
            assert_eq!(seed_length(&rungs, rung), seed);
            // So every probe after its seed is an exposure by the fleet's rule too.
            assert!(crate::nodes::counts(Some(("a", 4 * seed as usize)), "b", 4 * rung as usize));
        }
        assert_eq!(seed_length(&[100], 100), 64, "never below a few records");
    }

    #[test]
    fn extra_exposures_are_projected_from_the_echo_measured_so_far() {
        // Three in four read back on every rung: short of 0.99, and 16 more pairs at
        // the top would reach it.
        let copies = power_of(&[(3, 4, 2); 5]);
        assert!(!copies.suffices(), "{}", copies.power);
        assert!(top_up_projection(&copies, 16) >= 0.99);
        // More pairs never project less; none projects the power as it is.
        assert!(top_up_projection(&copies, 16) >= top_up_projection(&copies, 4));
        assert!((top_up_projection(&copies, 0) - copies.power).abs() < 1e-12);
        // Nothing read back: no number of pairs helps, so none is spent.
        let blind = power_of(&[(0, 4, 2); 5]);
        assert_eq!(top_up_projection(&blind, 1000), 0.0);
        // One in five: 16 pairs would not reach 0.99.
        let rare = power_of(&[(1, 5, 2); 4]);
        assert!(top_up_projection(&rare, 16) < 0.99);
    }
}
