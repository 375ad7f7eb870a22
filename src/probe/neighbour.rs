//! `availability.noisy-neighbour` (T11): one tenant's valid load must not fail, or
//! stall beyond a bound, another tenant's valid requests.
//!
//! Tenant b first sends `samples` short streamed requests alone (the baseline: its time
//! to first token, and that they succeed at all). Then, in `samples` rounds, tenant a
//! sends long prompts (`load_fraction` of the context, valid ones) at its allowed
//! concurrency (the profile's `max_concurrency` less the one request b needs, at most
//! `max_load_concurrency`) and b one short request with them: a burst, so that b's
//! request meets all of a's at the server at once. The rounds alternate which leaves
//! first (`Order`): b in flight when a's burst lands (an engine that fails every request
//! in flight when its pool overflows, as llama.cpp's unified pool does), and b just
//! behind the burst (a scheduler that stalls b behind a's prefills). The case fails when one of b's requests gets a server error
//! (5xx), or a rate limit (429) when a and b are different organisations, while it did
//! not alone; or when b's 95th-percentile time to first token under a's load exceeds
//! `max_slowdown` times its baseline (the baseline taken as at least
//! `latency_floor_ms`, so that a loopback baseline of a millisecond does not make any
//! queueing a failure). A 429 to a is fair limiting; a's own 5xx are noted. The case
//! is inconclusive when b fails alone, or when a's load was refused (there was no
//! load).

use super::{Context, Sizer, conclude, describe};
use crate::adapter::ChatRequest;
use crate::outcome::{Finding, FindingCode, Outcome};
use crate::session::{Sent, SessionError};
use tenantcheck_evidence::judge::neighbour as judge;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Parameters of `availability.noisy-neighbour`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NeighbourParams {
    /// Length of each of tenant a's prompts, as a fraction of the context (default
    /// 0.45): long, valid, and several of them more than the context together.
    #[serde(default = "default_load_fraction")]
    pub load_fraction: f64,
    /// The longest of tenant a's prompts, in tokens, whatever the context (default
    /// 32,768): load enough for any server, without billing a million-token context
    /// many times over.
    #[serde(default = "default_max_load_tokens")]
    pub max_load_tokens: u64,
    /// Tokens each of tenant a's requests asks for (default 64).
    #[serde(default = "default_load_max_tokens")]
    pub load_max_tokens: u32,
    /// Short requests tenant b sends alone, and again under load (default 8).
    #[serde(default = "default_samples")]
    pub samples: u32,
    /// Tokens of each of tenant b's prompts (default 64).
    #[serde(default = "default_short_tokens")]
    pub short_tokens: u64,
    /// The most b's 95th-percentile time to first token may grow under a's load, as a
    /// factor of its baseline (default 10).
    #[serde(default = "default_max_slowdown")]
    pub max_slowdown: f64,
    /// The least baseline the factor applies to, in milliseconds (default 250).
    #[serde(default = "default_latency_floor_ms")]
    pub latency_floor_ms: f64,
    /// The most of tenant a's requests in flight at once (default 8); fewer when the
    /// profile's `max_concurrency` leaves less beside b's one.
    #[serde(default = "default_max_load_concurrency")]
    pub max_load_concurrency: u32,
}

fn default_max_load_concurrency() -> u32 {
    8
}

fn default_load_fraction() -> f64 {
    0.45
}

fn default_max_load_tokens() -> u64 {
    32_768
}

fn default_load_max_tokens() -> u32 {
    64
}

fn default_samples() -> u32 {
    8
}

fn default_short_tokens() -> u64 {
    64
}

fn default_max_slowdown() -> f64 {
    10.0
}

fn default_latency_floor_ms() -> f64 {
    250.0
}

/// The probe `availability.noisy-neighbour`.
pub struct NoisyNeighbour;

impl super::Probe for NoisyNeighbour {
    const KIND: &'static str = crate::judge::kind::NOISY_NEIGHBOUR;
    type Params = NeighbourParams;

    fn validate(p: &NeighbourParams) -> Result<(), super::ParamsError> {
        let invalid = |field, problem: &str| {
            Err(super::ParamsError::Invalid {
                field,
                problem: problem.to_owned(),
            })
        };
        if !(p.load_fraction > 0.0 && p.load_fraction < 1.0) {
            return invalid("load_fraction", "must be in (0, 1): a valid prompt, shorter than the context");
        }
        if p.samples < 2 {
            return invalid("samples", "send at least 2 requests");
        }
        if p.max_slowdown < 1.0 {
            return invalid("max_slowdown", "must be at least 1");
        }
        if p.latency_floor_ms < 0.0 {
            return invalid("latency_floor_ms", "must not be negative");
        }
        Ok(())
    }

    async fn run(p: &NeighbourParams, ctx: Context<'_>) -> Outcome {
        super::settled(neighbour(p, ctx).await)
    }
}

/// How many of tenant a's requests go with each of b's: the profile's
/// `max_concurrency` less b's one, at least 1, at most `max_load_concurrency`.
fn workers(p: &NeighbourParams, profile: &crate::vendor::VendorProfile) -> u32 {
    profile.max_concurrency.saturating_sub(1).clamp(1, p.max_load_concurrency.max(1))
}

/// Runs `availability.noisy-neighbour`.
pub async fn neighbour(p: &NeighbourParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let profile = ctx.session.profile();
    let labels: Vec<String> = ctx.session.tenant_labels().into_iter().map(str::to_owned).collect();
    let (loud, quiet) = (&labels[0], &labels[1]);
    let same_org = {
        let org = |l: &str| profile.tenants.iter().find(|t| t.label == l).map(|t| t.org().to_owned());
        org(loud.as_str()) == org(quiet.as_str())
    };
    let mut sizer = Sizer::calibrated(ctx, quiet).await?;
    let mut unjudged = Vec::new();

    // 1. Tenant b alone.
    let mut alone = Vec::new();
    let mut alone_seqs = Vec::new();
    for _ in 0..p.samples {
        let sample = short(&mut sizer, p, quiet).await?;
        alone_seqs.push(sample.seq);
        if !judge::answered(&sample.exchange) {
            ctx.session.roles(ctx.case_id, &[("alone", alone_seqs)])?;
            unjudged.push(format!(
                "tenant {quiet}'s short request failed alone ({}, transcript #{})",
                describe(&sample.exchange),
                sample.seq
            ));
            return Ok(conclude(Vec::new(), Err(unjudged.join("; ")), sizer.coverage));
        }
        alone.push(sample);
    }

    // 2. Tenant a's load, and tenant b again.
    let workers = workers(p, profile) as usize;
    let load_tokens = ((p.load_fraction * profile.context_window as f64) as u64).clamp(64, p.max_load_tokens.max(64));
    // In rounds: a's requests and b's leave together, as bursts do, so that each of b's
    // requests meets all of a's at the server at once.
    let mut under = Vec::new();
    let mut loud_sent: Vec<Sent> = Vec::new();
    for round in 0..p.samples {
        let prompts: Vec<String> = (0..workers)
            .map(|_| {
                let filler = sizer.filler(loud);
                sizer.builder().build(load_tokens, &filler, "", &[], "\n\nSummarise the notes above.")
            })
            .collect();
        let requests: Vec<ChatRequest> = prompts
            .into_iter()
            .map(|prompt| ChatRequest {
                // Streamed, as b's are: a request holds the server while it generates.
                stream: true,
                ..ChatRequest::user(prompt, p.load_max_tokens)
            })
            .collect();
        let quiet_request = short_request(&mut sizer.coverage, ctx, p, quiet, round as usize);
        let (loud_delay, quiet_delay) = Order::of_round(round).delays();
        let loads = async {
            tokio::time::sleep(loud_delay).await;
            futures_util::future::join_all(
                requests
                    .iter()
                    .map(|r| ctx.session.chat_load(ctx.case_id, loud, r)),
            )
            .await
        };
        let (loads, sent) = tokio::join!(loads, async {
            tokio::time::sleep(quiet_delay).await;
            ctx.session.chat_load(ctx.case_id, quiet, &quiet_request).await
        });
        let sent = sent?;
        for l in loads {
            loud_sent.push(l?);
        }
        under.push(sent);
    }
    sizer.coverage.requests += loud_sent.len() as u64;
    sizer.coverage.prompt_tokens += loud_sent.len() as u64 * load_tokens;
    sizer.coverage.max_prompt_tokens = sizer.coverage.max_prompt_tokens.max(load_tokens);

    // 3. Judge, by the rule `verify` applies to the same lines.
    let seqs = |sent: &[&Sent]| sent.iter().map(|s| s.seq).collect::<Vec<_>>();
    let alone: Vec<&Sent> = alone.iter().collect();
    let load: Vec<&Sent> = loud_sent.iter().collect();
    let under: Vec<&Sent> = under.iter().collect();
    ctx.session.roles(
        ctx.case_id,
        &[("alone", seqs(&alone)), ("load", seqs(&load)), ("under", seqs(&under))],
    )?;
    let rule = judge::Rule {
        max_slowdown: p.max_slowdown,
        latency_floor_ms: p.latency_floor_ms,
    };
    let [alone_lines, load_lines, under_lines] =
        [&alone, &load, &under].map(|sent| sent.iter().map(|s| (s.seq, &s.exchange)).collect::<Vec<_>>());
    let judged = judge::judge(&rule, same_org, &alone_lines, &load_lines, &under_lines);
    let loud_ok = judged.load_answered;
    let loud_limited = loud_sent.iter().filter(|s| s.exchange.status == Some(429)).count();
    let loud_failed: Vec<&Sent> = loud_sent.iter().filter(|s| judge::server_error(&s.exchange)).collect();
    let described = |seq: u64| {
        let sent = under.iter().find(|s| s.seq == seq).expect("the rule names lines it was given");
        describe(&sent.exchange)
    };
    let mut findings = Vec::new();
    for unfair in &judged.unfair {
        let message = match *unfair {
            judge::Unfair::Failed { seq } => format!(
                "tenant {quiet}'s short valid request got {} (transcript #{seq}) while tenant {loud}'s {workers} concurrent {load_tokens}-token prompts ran; alone, its {} requests all succeeded",
                described(seq),
                p.samples
            ),
            judge::Unfair::Slow { base, loaded, allowed } => format!(
                "tenant {quiet}'s 95th-percentile time to first token grew from {base:.0} ms alone to {loaded:.0} ms while tenant {loud}'s {workers} concurrent {load_tokens}-token prompts ran, past the bound of {allowed:.0} ms ({}x the baseline, taken as at least {:.0} ms)",
                p.max_slowdown, p.latency_floor_ms
            ),
        };
        findings.push(Finding {
            code: FindingCode::NoisyNeighbour,
            message,
            leak: None,
        });
    }
    for &seq in &judged.unjudged {
        unjudged.push(format!(
            "tenant {quiet}'s request under load got {} (transcript #{seq})",
            described(seq)
        ));
    }
    let (base, loaded, allowed) = (judged.base, judged.loaded, judged.allowed);
    let loud_note = format!(
        "tenant {loud}: {} requests, {loud_ok} answered, {loud_limited} rate-limited (429, fair), {} server errors{}",
        loud_sent.len(),
        loud_failed.len(),
        loud_failed
            .first()
            .map(|s| format!(" (first: {}, transcript #{})", describe(&s.exchange), s.seq))
            .unwrap_or_default()
    );
    let reached = if loud_ok == 0 {
        Err(format!(
            "tenant {loud}'s long prompts were none of them answered, so there was no load to judge under ({loud_note})"
        ))
    } else if !unjudged.is_empty() {
        Err(format!("{}; {loud_note}", unjudged.join("; ")))
    } else {
        Ok(format!(
            "tenant {quiet}'s {} short requests: p95 time to first token {base:.0} ms alone, {loaded:.0} ms under tenant {loud}'s {workers} concurrent {load_tokens}-token prompts (bound {allowed:.0} ms), no server error; {loud_note}",
            p.samples
        ))
    };
    Ok(conclude(findings, reached, sizer.coverage))
}

/// Which of a round's requests leaves first. A burst can harm b in two ways, and each
/// needs its own order: an engine that fails every request in flight when its pool
/// overflows (llama.cpp's `--kv-unified`) harms b only if b is already running when a's
/// burst lands, and a fast client can have a's whole burst fail and leave before a b
/// that follows it arrives; a scheduler that queues b behind a's prefills stalls b only
/// if b comes after them. So the rounds alternate, starting with b in flight.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Order {
    /// b's request first, a's burst while it runs.
    QuietFirst,
    /// a's burst first, b's request just behind it.
    LoudFirst,
}

impl Order {
    fn of_round(round: u32) -> Order {
        if round % 2 == 0 { Order::QuietFirst } else { Order::LoudFirst }
    }

    /// How long a's burst and b's request each wait before they leave. The gap is
    /// short beside the shortest answer (b's 16 tokens) and long beside a loopback
    /// round trip, so that the one that leaves first is at the server first.
    fn delays(self) -> (std::time::Duration, std::time::Duration) {
        let gap = std::time::Duration::from_millis(5);
        match self {
            Order::QuietFirst => (gap, std::time::Duration::ZERO),
            Order::LoudFirst => (std::time::Duration::ZERO, gap),
        }
    }
}

/// One of tenant b's short requests, counted in `coverage`.
fn short_request(
    coverage: &mut crate::outcome::Coverage,
    ctx: Context<'_>,
    p: &NeighbourParams,
    tenant: &str,
    index: usize,
) -> ChatRequest {
    let filler = ctx.session.secret().filler(tenant, ctx.case_id, 1000 + index as u32);
    let prompt = crate::prompt::PromptBuilder::default().build(p.short_tokens, &filler, "", &[], "\n\nSay hello.");
    coverage.requests += 1;
    coverage.prompt_tokens += p.short_tokens;
    ChatRequest {
        stream: true,
        ..ChatRequest::user(prompt, 16)
    }
}

/// One short request of b's alone.
async fn short(
    sizer: &mut Sizer<'_>,
    p: &NeighbourParams,
    tenant: &str,
) -> Result<Sent, SessionError> {
    let filler = sizer.filler(tenant);
    let prompt = sizer
        .builder()
        .build(p.short_tokens, &filler, "", &[], "\n\nSay hello.");
    sizer.send_other(tenant, prompt, 16, true).await
}

