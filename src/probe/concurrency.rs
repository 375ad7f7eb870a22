//! `concurrency.binding` (T6): under many concurrent requests, some cancelled by their
//! clients mid-stream, every answer must belong to its own request.
//!
//! Every request carries a nonce of its own: one of its tenant's canary records,
//! which it asks to have repeated back. First a short *baseline*, one request at a
//! time, measures how often the model copies its record when nothing else is in
//! flight. Then a *burst*: `requests` requests from all tenants, up to `in_flight` at
//! once over the session's pooled connections, streaming and not; a share of the
//! streams is cancelled by the client after its first content frame.
//!
//! Every answer, cancelled ones included, is scanned for every nonce of the case:
//!
//! - another tenant's nonce is a leak (`CrossTenantCanary`), another request's nonce
//!   of the same tenant a misrouted response (`ResponseMisrouted`): both fail;
//! - an answer that lacks its own nonce may be only a weak model (small models garble
//!   copied codes), so it is never a finding: when answers under load lack their nonce
//!   significantly more often than in the baseline (one-sided Fisher exact test on the
//!   misses, p < 1e-3: both rates are measured), the case is inconclusive and says
//!   so; when the model copied no nonce even alone, misrouting cannot be seen at all
//!   and the case is inconclusive too.
//!
//! The baseline alternates the canary's two forms (record and code,
//! [`crate::canary::Form`]); the form copied best alone (by the lower bound on its copy
//! rate) is the one the burst carries, and the baseline's answers of that form are
//! what the burst is compared with.
//!
//! A pass also needs concurrency (at least two requests in flight at once) and at
//! least one stream cancelled with its answer unfinished.

use super::{Context, ParamsError, conclude, describe, leak};
use crate::adapter::ChatRequest;
use crate::canary::{Canary, Form};
use crate::outcome::{Coverage, EchoBand, Finding, FindingCode, FormTrial, Outcome, Power};
use crate::scan::Scanner;
use crate::session::{Sent, SessionError};
use crate::wording::Wording;
use futures_util::StreamExt;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicUsize, Ordering};

/// Parameters of `concurrency.binding`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BindingParams {
    /// Requests in the burst, over all tenants.
    #[serde(default = "default_requests")]
    pub requests: u32,
    /// Requests in flight at once (the profile's `max_concurrency` caps it).
    #[serde(default = "default_in_flight")]
    pub in_flight: u32,
    /// The share of the burst sent as streams.
    #[serde(default = "default_stream_share")]
    pub stream_share: f64,
    /// The share of the streams the client cancels after their first content frame.
    #[serde(default = "default_cancel_share")]
    pub cancel_share: f64,
    /// Requests in the one-at-a-time baseline.
    #[serde(default = "default_baseline")]
    pub baseline: u32,
    /// Tokens each request asks for.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// The power a pass needs: the chance, measured on this vendor, that the case
    /// would have recognised a misrouted answer had every answer of the burst been
    /// another request's (see [`crate::outcome::Power`]).
    #[serde(default = "default_min_power")]
    pub min_power: f64,
}

fn default_min_power() -> f64 {
    0.99
}

fn default_requests() -> u32 {
    128
}
fn default_in_flight() -> u32 {
    64
}
fn default_stream_share() -> f64 {
    0.5
}
fn default_cancel_share() -> f64 {
    0.5
}
fn default_baseline() -> u32 {
    8
}
fn default_max_tokens() -> u32 {
    96
}

impl BindingParams {
    pub(crate) fn validate(&self) -> Result<(), ParamsError> {
        let invalid = |field, problem: String| Err(ParamsError::Invalid { field, problem });
        if self.requests < 2 {
            return invalid("requests", format!("is {}; send at least 2", self.requests));
        }
        if self.in_flight < 2 {
            return invalid(
                "in_flight",
                format!("is {}; concurrency needs at least 2", self.in_flight),
            );
        }
        for (field, share) in [("stream_share", self.stream_share), ("cancel_share", self.cancel_share)] {
            if !(0.0..=1.0).contains(&share) {
                return invalid(field, format!("is {share}; a share is in [0, 1]"));
            }
        }
        if self.stream_share * self.cancel_share * f64::from(self.requests) < 1.0 {
            return invalid(
                "cancel_share",
                "requests × stream_share × cancel_share is below 1: no stream would be cancelled".into(),
            );
        }
        if self.baseline < 2 {
            return invalid("baseline", format!("is {}; measure at least 2", self.baseline));
        }
        if self.max_tokens < 16 {
            return invalid("max_tokens", format!("is {}; ask for at least 16", self.max_tokens));
        }
        if !(self.min_power > 0.0 && self.min_power < 1.0) {
            return invalid("min_power", "must be in (0, 1): a power of 1 is never measured".into());
        }
        Ok(())
    }
}

/// Whether answers under load lacked their own nonce more often than answers alone,
/// by more than chance explains: a one-sided Fisher exact test on the misses, below
/// [`SUSPICIOUS_TAIL`]. Both rates are measured, so neither is taken as known: with a
/// baseline of a few answers, one that copied all of them says little about the
/// model's true rate (a model that copies three times in four does so in four of four
/// a third of the time).
fn lacks_under_load((base_copied, base_n): (u32, u32), (burst_copied, burst_n): (u32, u32)) -> bool {
    let base_missed = (base_n - base_copied) as usize;
    let burst_missed = (burst_n - burst_copied) as usize;
    crate::outcome::fisher_greater(burst_missed, burst_n as usize, base_missed, base_n as usize) < SUSPICIOUS_TAIL
}

/// The significance at which the burst's misses are called suspicious.
const SUSPICIOUS_TAIL: f64 = 1e-3;

/// One request of the case: its tenant, its nonce, and how it is sent.
struct Planned {
    tenant: String,
    nonce: Canary,
    /// The form the nonce is sent in.
    form: Form,
    stream: bool,
    cancel: bool,
}

/// What came back for one planned request.
struct Answered {
    planned: Planned,
    sent: Sent,
}

/// The probe `concurrency.binding`.
pub struct Binding;

impl super::Probe for Binding {
    const KIND: &'static str = crate::judge::kind::BINDING;
    type Params = BindingParams;

    fn validate(p: &BindingParams) -> Result<(), super::ParamsError> {
        p.validate()
    }

    async fn run(p: &BindingParams, ctx: Context<'_>) -> Outcome {
        super::settled(binding(p, ctx).await)
    }
}

/// Runs `concurrency.binding`.
pub async fn binding(p: &BindingParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let tenants: Vec<String> = ctx.session.tenant_labels().into_iter().map(str::to_owned).collect();
    let mut index = 0u32;
    let mut plan = |tenant: &str, stream: bool, cancel: bool| {
        let nonce = ctx.session.canary(tenant, ctx.case_id, index);
        index += 1;
        Planned {
            tenant: tenant.to_owned(),
            nonce,
            form: Form::Record,
            stream,
            cancel,
        }
    };
    // Each tenant sends each form, streaming and not.
    let baseline: Vec<Planned> = (0..p.baseline)
        .map(|i| Planned {
            form: Form::ALL[(i as usize + i as usize / tenants.len()) % Form::ALL.len()],
            ..plan(&tenants[i as usize % tenants.len()], (i / 4) % 2 == 1, false)
        })
        .collect();
    let streams = (f64::from(p.requests) * p.stream_share).round() as u32;
    let cancels = (f64::from(streams) * p.cancel_share).round() as u32;
    // Spread streams and cancellations evenly through the burst, so that cancelled
    // slots are reused by the requests that follow them.
    let mut burst: Vec<Planned> = (0..p.requests)
        .map(|i| {
            let stream = spread(i, p.requests, streams);
            let cancel = stream && spread(i, p.requests, cancels);
            plan(&tenants[i as usize % tenants.len()], stream, cancel)
        })
        .collect();
    let nonces: Vec<Canary> = baseline.iter().chain(&burst).map(|r| r.nonce.clone()).collect();
    let scanner = Scanner::new(nonces);

    let mut coverage = Coverage::default();
    let mut answered = Vec::new();
    for r in baseline {
        let sent = send(&ctx, &r, p.max_tokens).await?;
        answered.push(Answered { planned: r, sent });
    }
    let baseline_len = answered.len();
    // The form trials: the baseline's complete answers, by form.
    let trials: Vec<FormTrial> = Form::ALL
        .into_iter()
        .map(|form| {
            let (mut answers, mut echoed) = (Vec::new(), Vec::new());
            for a in answered
                .iter()
                .filter(|a| a.planned.form == form && a.sent.exchange.is_success())
            {
                answers.push(a.sent.seq);
                let prompt = a.sent.exchange.request.body.as_ref().map(prompt_of).unwrap_or_default();
                if super::echoed(
                    std::slice::from_ref(&a.planned.nonce),
                    &prompt,
                    &a.sent.exchange.content,
                ) {
                    echoed.push(a.sent.seq);
                }
            }
            FormTrial::new(form, answers, echoed)
        })
        .collect();
    let form = FormTrial::best(&trials).unwrap_or(Form::Record);
    for r in &mut burst {
        r.form = form;
    }
    let in_flight = p.in_flight.min(ctx.session.profile().max_concurrency) as usize;
    let now = AtomicUsize::new(0);
    let peak = AtomicUsize::new(0);
    let results: Vec<Result<Answered, SessionError>> = futures_util::stream::iter(burst)
        .map(|r| {
            let (now, peak, ctx, max_tokens) = (&now, &peak, &ctx, p.max_tokens);
            async move {
                let n = now.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(n, Ordering::SeqCst);
                let sent = send(ctx, &r, max_tokens).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(Answered {
                    planned: r,
                    sent: sent?,
                })
            }
        })
        .buffer_unordered(in_flight)
        .collect()
        .await;
    for r in results {
        answered.push(r?);
    }
    answered[baseline_len..].sort_by_key(|a| a.sent.seq);

    let mut findings = Vec::new();
    let mut copies = [(0u32, 0u32); 2]; // (copied, complete) for baseline, burst
    let mut cancelled_unfinished = 0;
    let mut failed = Vec::new();
    // The positive control under load: the burst's complete answers, each asked to
    // repeat its own nonce; every one of them is also an exposure.
    let (mut controls, mut echoes) = (Vec::new(), Vec::new());
    for (i, a) in answered.iter().enumerate() {
        let ex = &a.sent.exchange;
        coverage.requests += 1;
        if let Some(u) = ex.usage {
            coverage.prompt_tokens += u.prompt_tokens;
            coverage.completion_tokens += u.completion_tokens;
        }
        let text = ex.returned_text();
        let mut own = false;
        for hit in scanner.scan(&text, "") {
            if hit.id == a.planned.nonce.id {
                own = true;
                continue;
            }
            let origin = ctx
                .session
                .seeded_in(&hit.id)
                .map_or("a request not sent".to_owned(), |s| format!("request #{s}"));
            let code = if hit.owner != a.planned.tenant {
                FindingCode::CrossTenantCanary
            } else {
                FindingCode::ResponseMisrouted
            };
            findings.push(Finding {
                code,
                message: format!(
                    "the answer to tenant {}'s request #{} holds the nonce of tenant {}'s {origin} ({})",
                    a.planned.tenant, a.sent.seq, hit.owner, hit.id
                ),
                leak: Some(leak(ctx.session, hit, &a.planned.tenant, a.sent.seq)),
            });
        }
        if ex.cancelled {
            if ex.finish_reason.is_none() {
                cancelled_unfinished += 1;
            }
            continue;
        }
        if !ex.is_success() {
            failed.push(format!("#{} ({})", a.sent.seq, describe(ex)));
            continue;
        }
        if i < baseline_len && a.planned.form != form {
            continue;
        }
        let stage = &mut copies[usize::from(i >= baseline_len)];
        stage.1 += 1;
        stage.0 += u32::from(own);
        if i >= baseline_len {
            controls.push(a.sent.seq);
            let prompt = a.sent.exchange.request.body.as_ref().map(prompt_of).unwrap_or_default();
            if super::echoed(std::slice::from_ref(&a.planned.nonce), &prompt, &ex.content) {
                echoes.push(a.sent.seq);
            }
        }
    }
    let tokens = coverage.prompt_tokens / coverage.requests.max(1);
    let band = EchoBand::new(tokens, controls.clone(), echoes, controls);
    let power = Power::of(CONTROL.to_owned(), vec![band], p.min_power)
        .with_trials(trials)
        .counting_above(super::isolation::declared_pools(ctx.session.profile()));
    let peak = peak.into_inner();
    let [(base_copied, base_n), (burst_copied, burst_n)] = copies;
    let what = format!(
        "{} requests, up to {peak} in flight (profile allows {}), {cancelled_unfinished} streams cancelled mid-answer; own nonce copied in {base_copied}/{base_n} answers alone and {burst_copied}/{burst_n} under load",
        coverage.requests,
        ctx.session.profile().max_concurrency
    );
    let reached = if base_copied == 0 {
        Err(format!(
            "the model repeated none of {base_n} nonces even one request at a time, so a misrouted answer could not be recognised; {what}"
        ))
    } else if peak < 2 {
        Err(format!("no two requests were in flight at once; {what}"))
    } else if cancelled_unfinished == 0 {
        Err(format!(
            "no cancelled stream was still unfinished when it was cancelled (answers too short, or sent at once); {what}"
        ))
    } else if !failed.is_empty() && failed.len() * 5 > answered.len() {
        Err(format!(
            "{} of {} answers failed, first {}; {what}",
            failed.len(),
            answered.len(),
            failed[0]
        ))
    } else if burst_n == 0 || lacks_under_load((base_copied, base_n), (burst_copied, burst_n)) {
        Err(format!(
            "answers under load lacked their own nonce far more often than alone (a misrouted answer would look so; a weak model under load could too); {what}"
        ))
    } else if !power.suffices() {
        Err(format!(
            "the model repeated too few of its own nonces for a misrouted answer to show: {}; {what}",
            power.describe()
        ))
    } else {
        Ok(format!("{what}; {}", power.describe()))
    };
    let mut outcome = conclude(findings, reached, coverage);
    outcome.power = Some(power);
    Ok(outcome)
}

/// Whether item `i` of `n` is one of `k` spread evenly among them.
fn spread(i: u32, n: u32, k: u32) -> bool {
    let (i, n, k) = (u64::from(i), u64::from(n), u64::from(k));
    (i * k) / n != ((i + 1) * k) / n
}

/// The words for the control, in the report.
const CONTROL: &str = "each answer of the burst asked to repeat its own request's nonce";

/// The text of a recorded request's messages.
fn prompt_of(body: &serde_json::Value) -> String {
    body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_str())
        .collect::<Vec<_>>()
        .join("\n")
}

/// What each request of the burst asks: its nonce back ([`crate::wording`]).
const ASK: Wording = Wording(
    "[Hi|Hello|Dear|Hey|Morning|Afternoon] {N}[,|:|!] [please|kindly|could you|can you|just] [repeat|echo|copy|write back|return] [the following|this|the|the next] [customer|client|account|member] {} [back to me|to me|here|to {N}] [exactly as written|word for word|verbatim|exactly], [and nothing else|with nothing added|and add nothing else|nothing more].",
);

async fn send(ctx: &Context<'_>, r: &Planned, max_tokens: u32) -> Result<Sent, SessionError> {
    let ask = ctx.session.secret().say("concurrency", 0, ASK);
    let prompt = format!("{} {}", ask.replace("{}", r.form.noun()), r.nonce.text(r.form));
    let request = ChatRequest {
        stream: r.stream,
        cancel_after: r.cancel.then_some(1),
        ..ChatRequest::user(prompt, max_tokens)
    };
    ctx.session.chat(ctx.case_id, &r.tenant, &request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_picks_exactly_k_evenly() {
        for (n, k) in [(128, 64), (128, 32), (10, 3), (5, 5), (7, 0)] {
            let picked: Vec<u32> = (0..n).filter(|&i| spread(i, n, k)).collect();
            assert_eq!(picked.len() as u32, k, "n={n} k={k}");
        }
        let every_other: Vec<u32> = (0..8).filter(|&i| spread(i, 8, 4)).collect();
        assert_eq!(every_other, [1, 3, 5, 7]);
    }

    #[test]
    fn a_drop_under_load_is_suspicious_only_beyond_what_the_baseline_allows() {
        // Four of four alone, 69 of 96 under load: a model that copies three in four
        // does so; taking the baseline's 4/4 as its rate called this suspicious.
        assert!(!lacks_under_load((4, 4), (69, 96)));
        assert!(!lacks_under_load((4, 4), (96, 96)));
        // Nothing under load, or almost nothing, after every answer alone copied.
        assert!(lacks_under_load((4, 4), (0, 96)));
        assert!(lacks_under_load((8, 8), (10, 96)));
        // Copies lost alone as often as under load.
        assert!(!lacks_under_load((2, 4), (40, 96)));
    }
}
