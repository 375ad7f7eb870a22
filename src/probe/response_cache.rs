//! `cache.response-reuse` (T7, T1): an answer one tenant was given must never be given
//! to another tenant's request, however alike the two requests are.
//!
//! Gateways keep response caches in front of the engines (LiteLLM's proxy with
//! `cache: true`, Portkey, Helicone, Cloudflare AI Gateway, semantic caches). Keyed
//! without the caller, such a cache answers one customer with another's answer, and
//! tells anyone whether a request was sent before (a membership oracle). Nothing in the
//! answer's text need be foreign for that: the second tenant sent the same words.
//!
//! Tenant a sends a request (a short drawn text with a drawn reference number, asked
//! back with a summary; no canary of a's, since tenant b will send the same words) and
//! is answered. After `wait_ms` (so that an answer made now has a later `created`),
//! tenant a sends it again: the control, which shows whether a response cache serves a
//! its own answers. Tenant b then sends a fresh request of the same shape (its own
//! text: that ids and times are per answer) and the same again with one token more to
//! give (how soon the model answers a prompt it has cached), then a's
//! request byte for byte, then the variants a gateway may leave out of its key: another
//! `user`, temperature 0 with a `seed`, streamed; then a paraphrase that keeps a's
//! reference number (what a semantic cache matches); then a fresh request again.
//!
//! An answer of b's is a's answer when it carries a's answer's id (where the vendor's
//! ids are per answer: b's two fresh answers differ), or a's `created` with a's content
//! while b's fresh answers, made after the wait, carry a later time, or a's content
//! far sooner than the model answers. "The model answers" is measured where a prefix
//! cache cannot explain the difference: b sends its first fresh prompt again with one
//! token more to give (its prefix cached, its answer not); an answer in a quarter of
//! that time, and at least [`MIN_GAIN_MS`](tenantcheck_evidence::judge::reuse::MIN_GAIN_MS) sooner, was not generated. One sample's speed counts only
//! for the paraphrase (a prompt new to b); a's request byte for byte is judged by speed
//! in the timed pairs below. Any of these fails the case (`ResponseReused`; for the
//! paraphrase `SemanticResponseReused`), naming the variant and the evidence.
//!
//! One sample of speed says little on a busy machine, and a cache that gives its hits
//! a new id and time shows by nothing else: then come timed pairs
//! ([`Timed`]). For each, a sends a new
//! request; b sends a prompt of its own, then, in an order drawn per pair, that prompt
//! again and a byte-for-byte copy of a's, both asking for one token more than b's
//! first sending (a's request asked for as many). A sign test, anytime-valid, decides
//! after each pair: the copy sooner in more than half the pairs is a's answer given
//! again (`ResponseReused`); "not given again" rules out a speed-up of half the
//! model's time for b's fresh prompts. Without
//! one the case passes, and says whether a's own repeat was served from a cache (a
//! cache per caller, which is no harm) or no response cache was seen at all. It is
//! inconclusive where no sign could have shown a reuse: the vendor's ids and times are
//! not per answer and the model answers too fast for a stored answer to stand out.

use super::{Context, conclude, describe};
use crate::adapter::{ChatRequest, Sampling};
use crate::outcome::{Coverage, Finding, FindingCode, Outcome};
use tenantcheck_evidence::judge::reuse::{Answer, Signs, Timed, judge};
use tenantcheck_evidence::judge::sequential::Decision;
use crate::prompt::{Filler, PromptBuilder};
use crate::session::{Sent, SessionError};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// Parameters of `cache.response-reuse`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ResponseReuseParams {
    /// Tokens of tenant a's prompt (default 200).
    #[serde(default = "default_prompt_tokens")]
    pub prompt_tokens: u64,
    /// Tokens each answer may take (default 64): enough that the model's answer takes
    /// longer than a stored one.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Milliseconds between tenant a's answer and the requests after it (default 2100,
    /// at least 1100): an answer made after it carries a later `created`, in seconds.
    #[serde(default = "default_wait_ms")]
    pub wait_ms: u64,
    /// Timed pairs at most (default 24): b's copy of a new request of a's against b's
    /// own prompt, until the sign test decides (about 14 pairs when every copy comes
    /// sooner, at the default alpha).
    #[serde(default = "default_pairs")]
    pub pairs: u32,
    /// The timed pairs' sequential tests' error rate (default 1e-4).
    #[serde(default = "default_timing_alpha")]
    pub timing_alpha: f64,
    /// The share of the model's answer time a pass rules out as a cache's speed-up
    /// (default 0.5).
    #[serde(default = "default_equivalence")]
    pub equivalence: f64,
}

fn default_pairs() -> u32 {
    24
}
fn default_timing_alpha() -> f64 {
    tenantcheck_evidence::judge::reuse::DEFAULT_TIMING_ALPHA
}
fn default_equivalence() -> f64 {
    tenantcheck_evidence::judge::reuse::DEFAULT_EQUIVALENCE
}

fn default_prompt_tokens() -> u64 {
    200
}
fn default_max_tokens() -> u32 {
    64
}
fn default_wait_ms() -> u64 {
    2100
}

impl Default for ResponseReuseParams {
    fn default() -> Self {
        ResponseReuseParams {
            prompt_tokens: default_prompt_tokens(),
            max_tokens: default_max_tokens(),
            wait_ms: default_wait_ms(),
            pairs: default_pairs(),
            timing_alpha: default_timing_alpha(),
            equivalence: default_equivalence(),
        }
    }
}

/// The probe `cache.response-reuse`.
pub struct ResponseReuse;

impl super::Probe for ResponseReuse {
    const KIND: &'static str = crate::judge::kind::RESPONSE_REUSE;
    type Params = ResponseReuseParams;

    fn validate(p: &ResponseReuseParams) -> Result<(), super::ParamsError> {
        let bad = |field, problem: String| Err(super::ParamsError::Invalid { field, problem });
        if !(32..=100_000).contains(&p.prompt_tokens) {
            return bad("prompt_tokens", format!("is {}; it must be 32 to 100000", p.prompt_tokens));
        }
        if !(16..=4096).contains(&p.max_tokens) {
            return bad(
                "max_tokens",
                format!("is {}; it must be 16 to 4096 (an answer long enough to take time)", p.max_tokens),
            );
        }
        if !(1100..=60_000).contains(&p.wait_ms) {
            return bad(
                "wait_ms",
                format!("is {}; it must be 1100 to 60000 (more than a second, as `created` counts)", p.wait_ms),
            );
        }
        if !(1..=200).contains(&p.pairs) {
            return bad("pairs", format!("is {}; it must be 1 to 200", p.pairs));
        }
        if !(p.timing_alpha > 0.0 && p.timing_alpha <= 0.05) {
            return bad("timing_alpha", format!("is {}; it must be above 0 and at most 0.05", p.timing_alpha));
        }
        if !(p.equivalence > 0.0 && p.equivalence < 1.0) {
            return bad("equivalence", format!("is {}; it must be between 0 and 1", p.equivalence));
        }
        Ok(())
    }

    async fn run(p: &ResponseReuseParams, ctx: Context<'_>) -> Outcome {
        super::settled(response_reuse(p, ctx).await)
    }

    fn ceiling(p: &ResponseReuseParams, _profile: &crate::vendor::VendorProfile) -> Option<super::Ceiling> {
        // a's request and its repeat, b's two fresh requests and the warm one, the five
        // variants, and four requests a timed pair, each asking for one token more.
        Some(super::Ceiling::Like {
            requests: 10 + 4 * u64::from(p.pairs),
            max_tokens: u64::from(p.max_tokens) + 1,
        })
    }
}

/// Sends `r` as `tenant`, counting it in `coverage`.
async fn send(ctx: &Context<'_>, coverage: &mut Coverage, tenant: &str, r: &ChatRequest) -> Result<Sent, SessionError> {
    let sent = ctx.session.chat(ctx.case_id, tenant, r).await?;
    let builder = PromptBuilder::default();
    let tokens: u64 = r.messages.iter().map(|m| builder.tokens_for(m.content.len())).sum();
    coverage.requests += 1;
    coverage.prompt_tokens += tokens;
    if sent.exchange.is_success() {
        coverage.max_prompt_tokens = coverage.max_prompt_tokens.max(tokens);
        coverage.completion_tokens += sent.exchange.usage.map_or(0, |u| u.completion_tokens);
    }
    Ok(sent)
}

/// Runs `cache.response-reuse`.
pub async fn response_reuse(p: &ResponseReuseParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let labels: Vec<String> = ctx.session.tenant_labels().into_iter().map(str::to_owned).collect();
    let (owner, other) = (&labels[0], &labels[1]);
    let secret = ctx.session.secret();
    let builder = PromptBuilder::default();
    // A reference number, ten digits, and a text without any tenant's marks (tenant b
    // sends the same words: they must not read as a's canary).
    let reference = |who: &str| {
        let n = secret.seed("response-reuse", &format!("{}/{who}", ctx.case_id), 0) % 9_000_000_000 + 1_000_000_000;
        format!("RR-{}-{}", n / 100_000, n % 100_000)
    };
    let text = |who: &str| Filler::plain(secret.seed("response-reuse", &format!("{}/{who}", ctx.case_id), 1));
    let ask = secret.pick(
        "response-reuse.ask",
        &[
            "Repeat the reference number above exactly, then summarise the text in three sentences.",
            "Write the reference number above back exactly, then sum the text up in three sentences.",
        ],
    );
    let prompt = |who: &str| {
        builder.build(
            p.prompt_tokens,
            &text(who),
            &format!("Reference number: {}\n\n", reference(who)),
            &[],
            &format!("\n\n{ask}"),
        )
    };
    // The paraphrase: a's reference and text, in other words and another order.
    let paraphrase = format!(
        "Here is a text, and after it a reference number. In three sentences, say what the text is about, \
         and start with the reference number as written.\n\n{}\n\nThe reference number is {}.",
        builder.build(p.prompt_tokens, &text(owner), "", &[], ""),
        reference(owner)
    );
    // A user id shaped as applications send them (a UUID), drawn per run: no fixed
    // marker of the tool's.
    let user_of = |who: &str| {
        let (hi, lo) = (
            secret.seed("response-reuse.user", who, 0),
            secret.seed("response-reuse.user", who, 1),
        );
        format!(
            "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
            hi >> 32,
            (hi >> 16) & 0xffff,
            hi & 0xfff,
            0x8000 | (lo >> 48) & 0x3fff,
            lo & 0xffff_ffff_ffff
        )
    };
    let request = ChatRequest {
        user: Some(user_of(owner)),
        ..ChatRequest::user(prompt(owner), p.max_tokens)
    };
    let variants: Vec<(&str, ChatRequest, bool)> = vec![
        ("byte for byte tenant a's request", request.clone(), false),
        (
            "tenant a's request with its own `user`",
            ChatRequest {
                user: Some(user_of(other)),
                ..request.clone()
            },
            false,
        ),
        (
            "tenant a's request at temperature 0 with a `seed`",
            ChatRequest {
                sampling: Some(Sampling {
                    temperature: 0.0,
                    top_p: 1.0,
                    seed: 1_000_000_007 + secret.seed("response-reuse.seed", ctx.case_id, 0) % 1_000_000_000,
                }),
                ..request.clone()
            },
            false,
        ),
        (
            "tenant a's request, streamed",
            ChatRequest {
                stream: true,
                ..request.clone()
            },
            false,
        ),
        (
            "a paraphrase of tenant a's request (its reference and text in other words)",
            ChatRequest {
                user: Some(user_of(other)),
                ..ChatRequest::user(paraphrase, p.max_tokens)
            },
            true,
        ),
    ];
    // Two fresh requests of b's, each its own (a cache must not answer the second
    // with the first).
    let fresh_request = |n: u32| ChatRequest {
        user: Some(user_of(other)),
        ..ChatRequest::user(prompt(&format!("{other}/{n}")), p.max_tokens)
    };

    let mut coverage = Coverage::default();
    macro_rules! send {
        ($tenant:expr, $r:expr) => {
            send(&ctx, &mut coverage, $tenant, $r).await?
        };
    }

    // 1. Tenant a's request, and after the wait its control.
    let first_sent = send!(owner, &request);
    let Some(first) = answer_of(&first_sent) else {
        let why = format!(
            "tenant {owner}'s request was not answered ({}, transcript #{}): there is no answer to be given again",
            describe(&first_sent.exchange),
            first_sent.seq
        );
        return Ok(conclude(Vec::new(), Err(why), coverage));
    };
    tokio::time::sleep(Duration::from_millis(p.wait_ms)).await;
    let again = send!(owner, &request);

    // 2. Tenant b: fresh, the variants, fresh again.
    let mut fresh = Vec::new();
    let mut unanswered = Vec::new();
    let fresh_sent = send!(other, &fresh_request(0));
    fresh.extend(answer_of(&fresh_sent));
    // The same prompt again with one token more to give: a prefix cache has it (b
    // sent it), a response cache does not (another request): how soon the model
    // answers when only the generation is left, which is all a stored answer saves
    // beyond a prefix cache.
    let warm_sent = send!(
        other,
        &ChatRequest {
            max_tokens: p.max_tokens + 1,
            ..fresh_request(0)
        }
    );
    // b's answers to requests like a's, what each request was, and the lines of each.
    let mut tried = Vec::new();
    let mut whats = Vec::new();
    let (mut same, mut paraphrased) = (Vec::new(), Vec::new());
    for (what, r, semantic) in &variants {
        let sent = send!(other, r);
        if *semantic { &mut paraphrased } else { &mut same }.push(sent.seq);
        // Only the first sending of a's prompt, and the paraphrase, are new to b.
        // By one sample's speed the paraphrase alone: a's request byte for byte is
        // judged by speed in the timed pairs, whose sign test a busy machine's stall
        // cannot fool (one sample once failed an honest vendor so).
        let new_to_b = *semantic;
        match answer_of(&sent) {
            Some(a) => {
                tried.push((a, *semantic, new_to_b));
                whats.push(*what);
            }
            None => unanswered.push(format!("{what} ({}, transcript #{})", describe(&sent.exchange), sent.seq)),
        }
    }
    let fresh_again = send!(other, &fresh_request(1));
    fresh.extend(answer_of(&fresh_again));

    // 3. Timed pairs, until the sign test decides: a sends a new request; b sends a
    // prompt of its own, then, in an order drawn per pair, that prompt again and a copy
    // of a's, both asking for one token more than b's first sending did.
    let warm = answer_of(&warm_sent);
    let signs = Signs::of(&first, &fresh, warm.as_ref());
    let rule = Timed {
        alpha: p.timing_alpha,
        equivalence: p.equivalence,
    };
    let bound_ms = rule.bound_ms(signs.model_ms.unwrap_or(0.0));
    let mut test = rule.test(bound_ms);
    let (mut seeded, mut primed, mut hits, mut misses) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut timed_pairs: Vec<(f64, f64)> = Vec::new();
    let mut timed_unanswered = None;
    if signs.model_ms.is_some() {
        let give = p.max_tokens + 1;
        for i in 0..p.pairs {
            let theirs = ChatRequest {
                user: Some(user_of(owner)),
                ..ChatRequest::user(prompt(&format!("{owner}/timed/{i}")), give)
            };
            let own = |max_tokens| ChatRequest {
                user: Some(user_of(other)),
                ..ChatRequest::user(prompt(&format!("{other}/timed/{i}")), max_tokens)
            };
            let a_sent = send!(owner, &theirs);
            let prime = send!(other, &own(p.max_tokens));
            let hit_first = secret.seed("response-reuse.order", ctx.case_id, i) & 1 == 1;
            let (hit, miss) = if hit_first {
                let hit = send!(other, &theirs);
                (hit, send!(other, &own(give)))
            } else {
                let miss = send!(other, &own(give));
                (send!(other, &theirs), miss)
            };
            seeded.push(a_sent.seq);
            primed.push(prime.seq);
            hits.push(hit.seq);
            misses.push(miss.seq);
            match (answer_of(&a_sent), answer_of(&prime), answer_of(&hit), answer_of(&miss)) {
                (Some(_), Some(_), Some(h), Some(m)) => {
                    timed_pairs.push((h.total_ms, m.total_ms));
                    if test.observe(m.total_ms - h.total_ms) != Decision::Undecided {
                        break;
                    }
                }
                _ => {
                    timed_unanswered = Some(format!(
                        "timed pair {} was not all answered (transcript #{}, #{}, #{}, #{}), so the pairs stopped",
                        i + 1,
                        a_sent.seq,
                        prime.seq,
                        hit.seq,
                        miss.seq
                    ));
                    break;
                }
            }
        }
    }
    let timed = (!timed_pairs.is_empty()).then(|| rule.judge(bound_ms, &timed_pairs));
    let timed_lines = format!(
        "transcript #{} to #{}",
        seeded.first().copied().unwrap_or_default(),
        hits.last().max(misses.last()).copied().unwrap_or_default()
    );
    ctx.session.roles(
        ctx.case_id,
        &[
            ("first", vec![first_sent.seq]),
            ("again", vec![again.seq]),
            ("fresh", vec![fresh_sent.seq, fresh_again.seq]),
            ("warm", vec![warm_sent.seq]),
            ("same", same),
            ("paraphrase", paraphrased),
            ("seeded", seeded),
            ("primed", primed),
            ("hit", hits),
            ("miss", misses),
        ],
    )?;

    let warm_time = warm
        .as_ref()
        .map_or("no time (not answered)".to_owned(), |w| format!("{:.0} ms", w.total_ms));
    let mut findings = Vec::new();
    for reused in judge(&signs, &first, &tried) {
        let (code, kind) = if reused.semantic {
            (FindingCode::SemanticResponseReused, "a semantic cache keyed without the caller")
        } else {
            (FindingCode::ResponseReused, "a response cache keyed without the caller")
        };
        findings.push(Finding {
            code,
            message: format!(
                "tenant {other}'s request, {} (transcript #{}), was answered with tenant {owner}'s answer \
                 (transcript #{}): {}; {kind}",
                whats[reused.index], tried[reused.index].0.seq, first.seq, reused.why
            ),
            leak: None,
        });
    }
    if let Some(t) = timed.as_ref().filter(|t| t.decision == Decision::Effect) {
        findings.push(Finding {
            code: FindingCode::ResponseReused,
            message: format!(
                "{} ({timed_lines}); a response cache keyed without the caller, that gives its hits a new id and \
                 time",
                t.describe(p.timing_alpha),
            ),
            leak: None,
        });
    }

    // A's repeat is not new to a: its own prefix cache may speed it.
    let repeat = answer_of(&again);
    let own = repeat.as_ref().and_then(|a| signs.reused(&first, a, false));
    let control = match (&own, &repeat) {
        (Some(why), _) => format!(
            "a response cache serves tenant {owner} its own answers (its repeat, transcript #{}, came back with {why})",
            again.seq
        ),
        (None, Some(_)) => format!(
            "no response cache seen even for tenant {owner}'s own repeat (transcript #{}, a new id or time)",
            again.seq
        ),
        (None, None) => format!(
            "tenant {owner}'s repeat was not answered ({}, transcript #{})",
            describe(&again.exchange),
            again.seq
        ),
    };
    let what_shows = {
        let mut s = Vec::new();
        if signs.ids {
            s.push("per-answer ids");
        }
        if signs.times {
            s.push("creation times");
        }
        if signs.fresh_ms.is_some() {
            s.push("the model's answer time");
        }
        s.join(", ")
    };
    let reached = if tried.is_empty() {
        Err(format!(
            "none of tenant {other}'s requests like tenant {owner}'s was answered: {}",
            unanswered.join("; ")
        ))
    } else if !signs.any() && own.is_none() && !timed.as_ref().is_some_and(|t| t.decision != Decision::Undecided) {
        Err(format!(
            "no sign could have shown a stored answer: the answers' ids and creation times are not per answer, and \
             the model answered tenant {other}'s prompt a second time in {}, too soon for a stored one to stand out; \
             {control}",
            warm_time
        ))
    } else {
        let untested = if unanswered.is_empty() {
            String::new()
        } else {
            format!("; not answered, so not judged: {}", unanswered.join("; "))
        };
        let own_answers = if findings.is_empty() { " each got an answer of its own," } else { "" };
        // A cache that gives its hits a new id and time shows only by its speed.
        let renamed = match (&timed, &timed_unanswered) {
            (Some(t), None) if t.decision == Decision::NoEffect => {
                format!("; {} ({timed_lines})", t.describe(p.timing_alpha))
            }
            (Some(t), _) => format!(
                "; a cache that gives its hits a new id and time would show only by its speed: {} ({timed_lines}){}",
                t.describe(p.timing_alpha),
                timed_unanswered.as_ref().map_or(String::new(), |u| format!("; {u}"))
            ),
            (None, _) => format!(
                "; a cache that gives its hits a new id and time would show only by its speed, and no timed pair was \
                 answered ({}; the model answered tenant {other}'s prompt a second time in {warm_time}): such a cache \
                 is not ruled out",
                timed_unanswered.as_deref().unwrap_or("tenant b's fresh requests were not answered")
            ),
        };
        Ok(format!(
            "tenant {other}'s {} requests like tenant {owner}'s (transcript #{} to #{}){own_answers} judged by \
             {what_shows}{renamed}; {control}{untested}",
            tried.len(),
            tried.first().map_or(0, |t| t.0.seq),
            tried.last().map_or(0, |t| t.0.seq),
        ))
    };
    Ok(conclude(findings, reached, coverage))
}

/// The answer of `sent`, if it was answered.
fn answer_of(sent: &Sent) -> Option<Answer> {
    Answer::of(sent.seq, &sent.exchange)
}
