//! [`Probe`]: the kinds of probe, each in its own module and one line of [`REGISTRY`];
//! [`ProbeSpec`], a kind with its validated parameters; and [`run`], which runs one
//! case's probe against a session.
//!
//! A probe is the code behind a kind of case; a case (a TOML file under `suite/`) names
//! the probe and gives its parameters. Every probe keeps the rules of the design: a
//! pass says what it exercised; a probe that could not reach its condition is
//! inconclusive, never pass; a foreign canary is never explained away.

use crate::adapter::ChatRequest;
use crate::advisory::Advisory;
use crate::outcome::{Coverage, Finding, LeakEvidence, Outcome, Verdict};
use crate::prompt::PromptBuilder;
use crate::session::{Sent, Session, SessionError};
use serde::Serialize;

/// What a probe gets to work with.
#[derive(Clone, Copy)]
pub struct Context<'a> {
    /// The case's id (recorded with every exchange).
    pub case_id: &'a str,
    /// The vendor.
    pub session: &'a Session,
    /// The suite's advisories.
    pub advisories: &'a [Advisory],
}

/// One kind of probe: the code behind every case that names it.
///
/// A new kind is one file that implements this trait and one line in the `registry!`
/// of this module (its module and its type): the registry gives it its name in suite
/// files, its parameters' schema
/// (`tenantcheck schema case`), their validation, and a place in every run and plan.
pub trait Probe: 'static {
    /// The name cases give in `probe = "..."`, `area.behaviour`.
    const KIND: &'static str;
    /// Its `[params]`, with their defaults and derived schema; mark the type
    /// `#[serde(deny_unknown_fields)]` so that a misspelt parameter is an error.
    type Params: serde::de::DeserializeOwned
        + Serialize
        + schemars::JsonSchema
        + Clone
        + std::fmt::Debug
        + PartialEq
        + Send
        + Sync
        + 'static;

    /// The rules the parameters' types alone do not keep.
    fn validate(_params: &Self::Params) -> Result<(), ParamsError> {
        Ok(())
    }

    /// Runs one case. A probe that cannot go on (a budget, a signal, the vendor's
    /// refusals) ends inconclusive with the reason (`settled`), never in a pass.
    fn run<'a>(params: &'a Self::Params, ctx: Context<'a>) -> impl Future<Output = Outcome> + Send + 'a;

    /// The most a case may send beyond what a run against the reference vendor sends,
    /// for `--plan`; none unless the probe decides how much to send as it goes.
    fn ceiling(_params: &Self::Params, _profile: &crate::vendor::VendorProfile) -> Option<Ceiling> {
        None
    }
}

/// Declares each probe's module and its entry in [`REGISTRY`], so that a new kind of
/// probe is one file and one line below.
macro_rules! registry {
    ($($module:ident :: { $($probe:ident),+ },)*) => {
        $(pub mod $module;)*

        /// Every kind of probe, in the order `tenantcheck schema case` lists them.
        pub const REGISTRY: &[Kind] = &[$($(Kind::of::<$module::$probe>(),)+)*];
    };
}

registry! {
    isolation::{CanaryResidue},
    context::{Boundary, Recall},
    usage::{Consistency},
    errors::{Semantics},
    stream::{Integrity},
    declared::{KvPool, Advisories},
    objects::{CrossTenant},
    concurrency::{Binding},
    cache::{CrossTenantTiming},
    response_cache::{ResponseReuse},
    extraction::{PrefixExtraction},
    metadata::{CrossTenant},
    neighbour::{NoisyNeighbour},
}

/// A registered kind of probe, its type erased.
pub struct Kind {
    /// [`Probe::KIND`].
    pub name: &'static str,
    parse: fn(toml::Table) -> Result<ProbeSpec, ParamsError>,
    schema: fn() -> serde_json::Value,
}

impl Kind {
    /// The entry of probe `P`.
    pub const fn of<P: Probe>() -> Kind {
        Kind {
            name: P::KIND,
            parse: parse_as::<P>,
            schema: schema_of::<P>,
        }
    }

    /// The JSON Schema (draft 2020-12) of the probe's `[params]`, as a case file
    /// gives them.
    pub fn params_schema(&self) -> serde_json::Value {
        (self.schema)()
    }
}

fn parse_as<P: Probe>(params: toml::Table) -> Result<ProbeSpec, ParamsError> {
    let params: P::Params = toml::Value::Table(params)
        .try_into()
        .map_err(|e| ParamsError::Syntax(Box::new(e)))?;
    P::validate(&params)?;
    Ok(ProbeSpec(std::sync::Arc::new(Configured::<P> {
        params,
        probe: std::marker::PhantomData,
    })))
}

fn schema_of<P: Probe>() -> serde_json::Value {
    let generator = schemars::generate::SchemaSettings::draft2020_12()
        .for_deserialize()
        .into_generator();
    generator.into_root_schema_for::<P::Params>().to_value()
}

/// What `--plan` adds to a case's run against the reference vendor for its ceiling.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ceiling {
    /// In all at most `requests` requests like the average one sent, each asking for
    /// `max_tokens`.
    Like {
        /// Requests in all.
        requests: u64,
        /// Completion tokens each.
        max_tokens: u64,
    },
    /// At most `requests` more requests of `prompt_tokens` in all, each asking for
    /// `max_tokens`.
    More {
        /// Requests more.
        requests: u64,
        /// Their prompt tokens, together.
        prompt_tokens: u64,
        /// Completion tokens each.
        max_tokens: u64,
    },
}

/// A probe kind with its validated parameters: what a case runs.
#[derive(Clone)]
pub struct ProbeSpec(std::sync::Arc<dyn AnyProbe>);

/// [`Probe`] with its parameters, as an object.
trait AnyProbe: Send + Sync {
    fn kind(&self) -> &'static str;
    fn params(&self) -> serde_json::Value;
    fn run<'a>(&'a self, ctx: Context<'a>) -> futures_util::future::BoxFuture<'a, Outcome>;
    fn ceiling(&self, profile: &crate::vendor::VendorProfile) -> Option<Ceiling>;
}

struct Configured<P: Probe> {
    params: P::Params,
    probe: std::marker::PhantomData<fn() -> P>,
}

impl<P: Probe> AnyProbe for Configured<P> {
    fn kind(&self) -> &'static str {
        P::KIND
    }
    fn params(&self) -> serde_json::Value {
        serde_json::to_value(&self.params).expect("parameters serialise")
    }
    fn run<'a>(&'a self, ctx: Context<'a>) -> futures_util::future::BoxFuture<'a, Outcome> {
        Box::pin(P::run(&self.params, ctx))
    }
    fn ceiling(&self, profile: &crate::vendor::VendorProfile) -> Option<Ceiling> {
        P::ceiling(&self.params, profile)
    }
}

impl ProbeSpec {
    /// Parses and validates the `[params]` table of a case for probe `kind`.
    pub fn parse(kind: &str, params: toml::Table) -> Result<Self, ParamsError> {
        let entry = REGISTRY
            .iter()
            .find(|k| k.name == kind)
            .ok_or_else(|| ParamsError::UnknownProbe(kind.to_owned()))?;
        (entry.parse)(params)
    }

    /// The probe's name.
    pub fn kind(&self) -> &'static str {
        self.0.kind()
    }

    /// The validated parameters, defaults filled in, as the report records them.
    pub fn params(&self) -> serde_json::Value {
        self.0.params()
    }

    /// What `--plan` adds for the most the case may send ([`Probe::ceiling`]).
    pub fn ceiling(&self, profile: &crate::vendor::VendorProfile) -> Option<Ceiling> {
        self.0.ceiling(profile)
    }
}

impl PartialEq for ProbeSpec {
    fn eq(&self, other: &Self) -> bool {
        self.kind() == other.kind() && self.params() == other.params()
    }
}

impl std::fmt::Debug for ProbeSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProbeSpec")
            .field("probe", &self.kind())
            .field("params", &self.params())
            .finish()
    }
}

/// As a case file writes it: `probe` and `params`.
impl Serialize for ProbeSpec {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(2))?;
        map.serialize_entry("probe", self.kind())?;
        map.serialize_entry("params", &self.params())?;
        map.end()
    }
}

/// The probe names a case may use.
pub fn kinds() -> impl Iterator<Item = &'static str> {
    REGISTRY.iter().map(|k| k.name)
}

/// Parameters that do not fit their probe.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParamsError {
    /// No probe has this name.
    #[error("unknown probe {0:?}; known probes: {known}", known = kinds().collect::<Vec<_>>().join(", "))]
    UnknownProbe(String),
    /// A parameter is unknown or has the wrong type.
    #[error("{0}")]
    Syntax(#[source] Box<toml::de::Error>),
    /// A parameter breaks a rule.
    #[error("params.{field}: {problem}")]
    Invalid {
        /// The parameter.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

pub use crate::judge::{degenerate, echoed, foreign};

/// Runs one case's probe. Whatever the probe concluded, and however it ended (a
/// budget, an interruption), another tenant's canary in any answer the case received
/// fails it: the session scans every answer, and a leak the probe did not report is
/// added here.
pub async fn run(spec: &ProbeSpec, ctx: Context<'_>) -> Outcome {
    let mut outcome = spec.0.run(ctx).await;
    // Another tenant's canary leads the summary: the net goes last.
    let evidence = ctx.session.evidence(ctx.case_id);
    misrouted(&mut outcome, evidence.misrouted);
    net(&mut outcome, evidence.leaks);
    redirected(&mut outcome, evidence.redirects);
    outcome.settle_leak_rate();
    outcome
}

/// Fails an outcome whose case received answers holding another request's text
/// ([`crate::passage`]): one finding per answer and kind (the first [`NET_FINDINGS`]
/// of each). Another tenant's words are that tenant's data (`CrossTenantText`);
/// sentences of another request, whoever's, an answer not its request's
/// (`ResponseMisrouted`).
fn misrouted(outcome: &mut Outcome, passages: Vec<LeakEvidence>) {
    use crate::canary::Fragment;
    use crate::outcome::FindingCode;
    let (text, sentences): (Vec<_>, Vec<_>) = passages.into_iter().partition(|l| l.fragment == Fragment::Text);
    let kinds = [
        (
            FindingCode::ResponseMisrouted,
            sentences,
            "answers held another request's text",
            ", which that request did not: an answer not its request's, decoded from what another request left",
        ),
        (
            FindingCode::CrossTenantText,
            text,
            "answers held another tenant's request text",
            ": tenant {owner}'s data, by where it came from",
        ),
    ];
    for (code, found, counted, because) in kinds {
        let Some(first) = found.first() else {
            continue;
        };
        let message = |l: &LeakEvidence| {
            format!(
                "the answer to tenant {}'s request (transcript #{}) held {}{}",
                l.recipient,
                l.returned_in,
                l.what(),
                because.replace("{owner}", &l.owner)
            )
        };
        // After the case's own finding of another tenant's canary, if it has one.
        let count = format!("{} {counted}", found.len());
        outcome.summary = if outcome
            .findings
            .iter()
            .any(|f| f.code == FindingCode::CrossTenantCanary)
        {
            format!("{}; {count}: {}", outcome.summary, message(first))
        } else {
            format!("{}; {count}; {}", message(first), outcome.summary)
        };
        outcome
            .findings
            .extend(found.iter().take(NET_FINDINGS).map(|l| Finding {
                code,
                message: message(l),
                leak: Some(l.clone()),
            }));
        outcome.verdict = Verdict::Fail;
    }
}

/// Fails an outcome whose case was answered with redirects: one finding per redirect
/// (the first [`NET_FINDINGS`]).
fn redirected(outcome: &mut Outcome, redirects: Vec<crate::session::Redirect>) {
    use crate::outcome::FindingCode;
    let Some(first) = redirects.first() else {
        return;
    };
    let message = |r: &crate::session::Redirect| {
        format!(
            "tenant {}'s request (transcript #{}) was answered HTTP {} pointing to {}; redirects are never followed",
            r.tenant,
            r.seq,
            r.status,
            r.location.as_deref().unwrap_or("nowhere (no Location)")
        )
    };
    outcome.summary = format!(
        "{}; {} answers redirected; {}",
        message(first),
        redirects.len(),
        outcome.summary
    );
    outcome
        .findings
        .extend(redirects.iter().take(NET_FINDINGS).map(|r| Finding {
            code: FindingCode::Redirected,
            message: message(r),
            leak: None,
        }));
    outcome.verdict = Verdict::Fail;
}

/// The most leaks [`net`] adds to one outcome (one per answer).
const NET_FINDINGS: usize = 10;

/// Adds `leaks` to an outcome that reports none of them.
fn net(outcome: &mut Outcome, leaks: Vec<LeakEvidence>) {
    use crate::outcome::FindingCode;
    if leaks.is_empty()
        || outcome
            .findings
            .iter()
            .any(|f| f.code == FindingCode::CrossTenantCanary)
    {
        return;
    }
    let mut answers = std::collections::BTreeSet::new();
    let mut added = Vec::new();
    for leak in leaks {
        if answers.insert(leak.returned_in) && added.len() < NET_FINDINGS {
            added.push(Finding {
                code: FindingCode::CrossTenantCanary,
                message: format!(
                    "{} came back to tenant {} (transcript #{})",
                    leak.what(),
                    leak.recipient,
                    leak.returned_in
                ),
                leak: Some(leak),
            });
        }
    }
    let summary = format!(
        "{}; found in {} answers by the scan of every answer; {}",
        added[0].message,
        answers.len(),
        outcome.summary
    );
    outcome.findings.splice(0..0, added);
    outcome.summary = summary;
    outcome.verdict = Verdict::Fail;
}

/// A probe's result as an outcome: a session that stopped it (a budget, a signal, the
/// vendor's refusals) makes it inconclusive with the reason.
pub(crate) fn settled(result: Result<Outcome, SessionError>) -> Outcome {
    result.unwrap_or_else(|e| Outcome {
        verdict: Verdict::Inconclusive,
        summary: format!("stopped: {e}"),
        coverage: Coverage::default(),
        findings: Vec::new(),
        sweep: Vec::new(),
        timing: Vec::new(),
        power: None,
        nodes: None,
    })
}

/// Sizes prompts for the session's vendor and keeps count of what a probe sent.
pub(crate) struct Sizer<'a> {
    ctx: Context<'a>,
    builder: PromptBuilder,
    /// Coverage so far.
    pub coverage: Coverage,
    /// Remarks for the summary (implausible usage, refusals, …).
    pub notes: Vec<String>,
    prompts: u32,
    /// While set, every request is pinned to one node of a fleet: it carries the
    /// value as its affinity and opens with [`pinned_opening`] as a system message.
    pub route: Option<String>,
    /// Every answered request, in order: transcript line, tenant, the node that
    /// served it where the profile's `[fleet]` says where answers name it, and its
    /// messages' length in characters (joined by line breaks, as `verify` reads them).
    pub served: Vec<(u64, String, Option<String>, usize)>,
}

/// The system message a pinned request opens with: drawn from the routing key
/// `route` (16 hex digits), the same for every request of one route and longer than
/// the opening prefix-hash routers read (about 256 tokens), so that the requests of a
/// route land on one node and the next route's elsewhere.
pub(crate) fn pinned_opening(route: &str, builder: &PromptBuilder) -> String {
    let seed = u64::from_str_radix(route, 16).unwrap_or(0);
    let filler = crate::prompt::Filler::plain(seed);
    let mut text = builder.build(320, &filler, &format!("Session {route}. "), &[], "\n\n");
    let mut end = text.len().min(1400);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text.truncate(end);
    text.push_str("\n\n");
    text
}

impl<'a> Sizer<'a> {
    /// A sizer calibrated on a ~256-token prompt: by the local tokenizer when the
    /// profile names one (no request), else by one request's `usage.prompt_tokens`.
    pub async fn calibrated(ctx: Context<'a>, tenant: &str) -> Result<Sizer<'a>, SessionError> {
        let mut sizer = Sizer {
            ctx,
            builder: PromptBuilder::default(),
            coverage: Coverage::default(),
            notes: Vec::new(),
            prompts: 0,
            route: None,
            served: Vec::new(),
        };
        let filler = sizer.filler(tenant);
        let sample = sizer.builder.build(256, &filler, "", &[], "");
        if let Some(n) = ctx.session.local_tokens(&sample) {
            sizer.builder.learn(sample.len(), n);
            return Ok(sizer);
        }
        let sent = sizer.send(tenant, sample.clone(), 16, false).await?;
        match sent.exchange.usage {
            Some(u) if sent.exchange.is_success() => {
                if !sizer.builder.learn(sample.len(), u.prompt_tokens) {
                    sizer.notes.push(format!(
                        "calibration: {} prompt tokens reported for {} characters is implausible",
                        u.prompt_tokens,
                        sample.len()
                    ));
                }
            }
            _ => sizer.notes.push(format!(
                "calibration (transcript #{}) gave no usage: lengths estimated at 4 characters per token",
                sent.seq
            )),
        }
        Ok(sizer)
    }

    /// The prompt builder.
    pub fn builder(&self) -> &PromptBuilder {
        &self.builder
    }

    /// A fresh filler seed for `tenant`.
    pub fn seed(&mut self, tenant: &str) -> u64 {
        self.prompts += 1;
        self.ctx.session.secret().seed(tenant, self.ctx.case_id, self.prompts)
    }

    /// A fresh filler for `tenant`'s prose: marked with its names.
    pub fn filler(&mut self, tenant: &str) -> crate::prompt::Filler {
        self.prompts += 1;
        self.ctx.session.secret().filler(tenant, self.ctx.case_id, self.prompts)
    }

    /// Tokens of `text` as sent: by the local tokenizer, else estimated.
    pub fn tokens_of(&self, text: &str) -> u64 {
        self.ctx
            .session
            .local_tokens(text)
            .unwrap_or_else(|| self.builder.tokens_for(text.len()))
    }

    /// Sends one user message built by [`Sizer::builder`] and counts it; its token
    /// count refines the builder's ratio.
    pub async fn send(
        &mut self,
        tenant: &str,
        prompt: String,
        max_tokens: u32,
        stream: bool,
    ) -> Result<Sent, SessionError> {
        self.send_inner(tenant, prompt, max_tokens, stream, true).await
    }

    /// Sends one user message that the builder did not make (records, whose ratio
    /// differs from prose) and counts it, without learning from it.
    pub async fn send_other(
        &mut self,
        tenant: &str,
        prompt: String,
        max_tokens: u32,
        stream: bool,
    ) -> Result<Sent, SessionError> {
        self.send_inner(tenant, prompt, max_tokens, stream, false).await
    }

    async fn send_inner(
        &mut self,
        tenant: &str,
        prompt: String,
        max_tokens: u32,
        stream: bool,
        learn: bool,
    ) -> Result<Sent, SessionError> {
        let mut request = ChatRequest {
            stream,
            affinity: self.route.clone(),
            ..ChatRequest::user(prompt, max_tokens)
        };
        if let Some(route) = &self.route {
            request.messages.insert(
                0,
                crate::adapter::Message {
                    role: "system".into(),
                    content: pinned_opening(route, &self.builder),
                },
            );
        }
        self.send_request(tenant, &request, learn).await
    }

    /// Adds an answer to [`Sizer::served`] (nothing for one that failed): one this
    /// sizer sent, or one another case sent and this one judges
    /// ([`crate::session::Session::shared`]), which costs it nothing.
    pub fn note_served(&mut self, tenant: &str, sent: &Sent, chars: usize) {
        let ex = &sent.exchange;
        if !ex.is_success() {
            return;
        }
        let node = self.ctx.session.profile().fleet.as_ref().and_then(|f| {
            f.node_of(
                &ex.headers,
                ex.body.as_deref(),
                ex.frames.iter().map(|fr| fr.data.as_str()),
            )
        });
        self.served.push((sent.seq, tenant.to_owned(), node, chars));
    }

    /// Tokens a pinned request's opening adds (0 outside a route).
    pub fn opening_tokens(&self) -> u64 {
        self.route
            .as_ref()
            .map_or(0, |r| self.builder.tokens_for(pinned_opening(r, &self.builder).len()))
    }

    /// Sends `request` (one user message) as `tenant` and counts it; with `learn`, its
    /// token count refines the builder's ratio.
    pub async fn send_request(
        &mut self,
        tenant: &str,
        request: &ChatRequest,
        learn: bool,
    ) -> Result<Sent, SessionError> {
        let sent = self.ctx.session.chat(self.ctx.case_id, tenant, request).await?;
        let chars =
            request.messages.iter().map(|m| m.content.len()).sum::<usize>() + request.messages.len().saturating_sub(1);
        self.note_served(tenant, &sent, chars);
        self.coverage.requests += 1;
        for m in &request.messages {
            self.coverage.prompt_tokens += self.tokens_of(&m.content);
        }
        if let Some(u) = sent.exchange.usage {
            self.coverage.completion_tokens += u.completion_tokens;
        }
        // Every prompt refines the ratio: long prompts count the template's overhead
        // less, and prose varies. Implausible counts are ignored. A pinned request's
        // count includes its opening, so it teaches nothing.
        let prompt = &request.messages[request.messages.len() - 1].content;
        if learn && request.messages.len() == 1 {
            match (self.ctx.session.local_tokens(prompt), sent.exchange.usage) {
                (Some(n), _) => {
                    self.builder.learn(prompt.len(), n);
                }
                (None, Some(u)) if sent.exchange.is_success() => {
                    self.builder.learn(prompt.len(), u.prompt_tokens);
                }
                _ => {}
            }
        }
        Ok(sent)
    }
}

/// Builds the outcome of a probe from its findings and whether it reached its
/// condition.
pub(crate) fn conclude(findings: Vec<Finding>, reached: Result<String, String>, coverage: Coverage) -> Outcome {
    match (findings.is_empty(), reached) {
        (false, Ok(what) | Err(what)) => Outcome {
            verdict: Verdict::Fail,
            summary: format!("{}; {what}", findings[0].message),
            coverage,
            findings,
            sweep: Vec::new(),
            timing: Vec::new(),
            power: None,
            nodes: None,
        },
        (true, Ok(what)) => Outcome {
            verdict: Verdict::Pass,
            summary: what,
            coverage,
            findings,
            sweep: Vec::new(),
            timing: Vec::new(),
            power: None,
            nodes: None,
        },
        (true, Err(why)) => Outcome {
            verdict: Verdict::Inconclusive,
            summary: why,
            coverage,
            findings,
            sweep: Vec::new(),
            timing: Vec::new(),
            power: None,
            nodes: None,
        },
    }
}

/// The evidence of `hit`, found in the answer recorded at `returned_in` to `recipient`.
pub(crate) fn leak(session: &Session, hit: crate::scan::Hit, recipient: &str, returned_in: u64) -> LeakEvidence {
    session.leak_evidence(hit, recipient, returned_in)
}

/// A short description of an exchange's result, for messages.
pub(crate) fn describe(ex: &crate::adapter::Exchange) -> String {
    match (&ex.transport_error, ex.status, &ex.api_error) {
        (Some(t), _, _) => format!("transport error: {t}"),
        (None, Some(s), Some(e)) => format!("HTTP {s}: {}", e.message),
        (None, Some(s), None) => format!("HTTP {s}"),
        (None, None, _) => "no answer".into(),
    }
}

/// Whether a vendor refused an exchange as a client error: a 4xx status, or an error
/// frame in a stream that carried no content.
pub(crate) fn refused(ex: &crate::adapter::Exchange) -> bool {
    tenantcheck_evidence::judge::context::refused(ex)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::outcome::FindingCode;

    #[test]
    fn every_registered_probe_is_a_kind_the_evidence_knows_and_every_kind_is_registered() {
        let registered: std::collections::BTreeSet<&str> = kinds().collect();
        let known: std::collections::BTreeSet<&str> = crate::judge::kind::ALL.into_iter().collect();
        assert_eq!(registered, known);
        assert_eq!(registered.len(), REGISTRY.len(), "a kind registered twice");
    }

    fn leak(returned_in: u64, index: u32) -> LeakEvidence {
        LeakEvidence {
            canary_id: format!("b/case/{index}"),
            owner: "b".into(),
            recipient: "a".into(),
            fragment: crate::canary::Fragment::Account,
            matched: "4000123412341234".into(),
            excerpt: "... 4000123412341234 ...".into(),
            seeded_in: Some(3),
            returned_in,
            words: None,
        }
    }

    #[test]
    fn a_leak_the_probe_did_not_report_fails_the_case_whatever_it_concluded() {
        let mut stopped = Outcome::inconclusive("stopped: the run's budget is spent: 10 requests");
        net(&mut stopped, vec![leak(10, 15), leak(10, 16), leak(12, 15)]);
        assert_eq!(stopped.verdict, Verdict::Fail);
        assert_eq!(stopped.findings.len(), 2, "one finding per answer");
        assert!(
            stopped
                .findings
                .iter()
                .all(|f| f.code == FindingCode::CrossTenantCanary)
        );
        assert!(
            stopped
                .summary
                .starts_with("tenant b's canary b/case/15 (its account number: \"4000123412341234\") came back to tenant a (transcript #10)")
        );
        assert!(
            stopped
                .summary
                .ends_with("stopped: the run's budget is spent: 10 requests")
        );

        // A probe that reported the leak itself is left as it is; no leak, no change.
        let before = stopped.clone();
        net(&mut stopped, vec![leak(14, 1)]);
        assert_eq!(stopped, before);
        let mut passed = Outcome {
            verdict: Verdict::Pass,
            ..Outcome::skipped("all clean")
        };
        net(&mut passed, Vec::new());
        assert_eq!(passed.verdict, Verdict::Pass);
    }
}
