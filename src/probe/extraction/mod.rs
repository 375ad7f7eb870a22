//! `cache.prefix-extraction` (T7): can one tenant read another's prompt out of a shared
//! prefix cache, through the reuse counter every answer carries?
//!
//! Engines report how many prompt tokens they reused from the cache
//! (`usage.prompt_tokens_details.cached_tokens`, llama.cpp's `timings.cache_n`). Where
//! the cache is shared between tenants, that counter answers "did someone send this
//! prefix?" exactly, with no timing noise, and a secret can be guessed piece by piece.
//! This case does it, with both tenants its own:
//!
//! 1. Tenant a (the victim) sends a document, then a secret of `digits` digits drawn
//!    from the run secret, each digit followed by `block_tokens` tokens of text that end
//!    with the words that introduce the next digit.
//! 2. Control: tenant a sends its own prompt cut after the first digit's text, once
//!    with the right digit and once with `x` in its place. A right guess must reuse
//!    more than a wrong one; if it does not for the owner itself (no counter, no cache,
//!    or counted blocks longer than `block_tokens`), the counter cannot tell anyone a
//!    digit, and the case times the guesses instead (`timed`).
//! 3. Tenant b (the thief) primes its own cache with the document and an `x` digit, then
//!    guesses each digit in turn, in an order drawn from the run secret: the same prompt,
//!    the guessed digit, and the text after it. A wrong guess reuses what b itself sent
//!    before (the prompt up to the digit); a right one, through a cache shared with a,
//!    reuses the text after the digit too, at least one more block of any counter that
//!    counts in blocks up to `block_tokens` long (vLLM 16, SGLang pages, OpenAI 128): the
//!    text after each digit aligns the guesses to the blocks without knowing their size.
//!    A position is decided as soon as one guess reused more than another; ten equal
//!    counts leave it undecided and end the search. Tenant a sends its prompt again
//!    before each guess, as a system prompt comes back with every request: engines keep
//!    a cached prompt only until another request takes its place (llama.cpp's slots
//!    keep the last prompt each served), so a secret sent once may be gone by the time
//!    the right guess comes.
//!
//! Verdict: fail when b recovered any digit of a's secret (the finding names what was
//! recovered, whether it equals a's secret, the guesses used and the channel); pass
//! when b's guesses reused nothing of a's prompt while a's own control shows the
//! counter would have told, or when neither the counter nor the time shows a's own
//! reuse to a itself with as many samples as a guess takes (the pass says what it
//! rules out); inconclusive when the control shows reuse too faintly to judge a guess
//! by. Digits b "recovered" that are not a's are no leak, and make the case
//! inconclusive.
//!
//! Where answers carry no counter (many hosted APIs report none), the case times the
//! guesses instead (`timed`): the same steps, each guess a chain of samples judged by
//! a sequential test against a baseline, with its own control and the same verdicts.

mod timed;

use super::{Context, Sizer, conclude, describe};
use crate::adapter::ChatRequest;
use crate::outcome::{Finding, FindingCode, Outcome};
use crate::prompt::Filler;
use crate::session::{Sent, SessionError};
use tenantcheck_evidence::judge::extraction::{self as judge, Search};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Parameters of `cache.prefix-extraction`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExtractionParams {
    /// Digits in tenant a's secret (1 to 8; default 4).
    #[serde(default = "default_digits")]
    pub digits: u32,
    /// Tokens of the document before the secret (default 256).
    #[serde(default = "default_document_tokens")]
    pub document_tokens: u32,
    /// Tokens of text after each digit (default 160): the longest block of reuse
    /// counting the case can see through. Raise it for a vendor that counts in larger
    /// blocks.
    #[serde(default = "default_block_tokens")]
    pub block_tokens: u32,
    /// The most guesses tenant b sends (default 40, ten for each of four digits).
    #[serde(default = "default_max_guesses")]
    pub max_guesses: u32,
    /// Timed guesses (no counter): the tokens each sample of a guess adds after the
    /// digit (default 48); the time to prefill them is what a right guess saves.
    #[serde(default = "default_timing_step_tokens")]
    pub timing_step_tokens: u32,
    /// Timed guesses: the most samples of one guess (default 32; a right guess is
    /// decided in 10 to 20 at the default level).
    #[serde(default = "default_timing_samples")]
    pub timing_samples: u32,
    /// Timed guesses: the sequential test's level per guess (default 0.001); a digit
    /// taken wrongly is no finding (it is not a's), so this bounds wasted guesses.
    #[serde(default = "default_timing_alpha")]
    pub timing_alpha: f64,
    /// Timed guesses: the most requests the timed search sends (default 600).
    #[serde(default = "default_timing_requests")]
    pub timing_requests: u32,
}

fn default_timing_step_tokens() -> u32 {
    48
}

fn default_timing_samples() -> u32 {
    32
}

fn default_timing_alpha() -> f64 {
    1e-3
}

fn default_timing_requests() -> u32 {
    600
}

fn default_digits() -> u32 {
    4
}

fn default_document_tokens() -> u32 {
    256
}

fn default_block_tokens() -> u32 {
    160
}

fn default_max_guesses() -> u32 {
    40
}

impl Default for ExtractionParams {
    fn default() -> Self {
        ExtractionParams {
            digits: default_digits(),
            document_tokens: default_document_tokens(),
            block_tokens: default_block_tokens(),
            max_guesses: default_max_guesses(),
            timing_step_tokens: default_timing_step_tokens(),
            timing_samples: default_timing_samples(),
            timing_alpha: default_timing_alpha(),
            timing_requests: default_timing_requests(),
        }
    }
}

/// The probe `cache.prefix-extraction`.
pub struct PrefixExtraction;

impl super::Probe for PrefixExtraction {
    const KIND: &'static str = crate::judge::kind::PREFIX_EXTRACTION;
    type Params = ExtractionParams;

    fn validate(p: &ExtractionParams) -> Result<(), super::ParamsError> {
        let bad = |field: &'static str, problem: String, fix: &str| {
            Err(super::ParamsError::Invalid {
                field,
                problem: format!("{problem}; fix: {fix}"),
            })
        };
        if !(1..=8).contains(&p.digits) {
            return bad("digits", format!("is {}", p.digits), "give 1 to 8 digits");
        }
        if p.block_tokens < 16 {
            return bad(
                "block_tokens",
                format!("is {}", p.block_tokens),
                "give at least 16 tokens, the smallest block engines count in",
            );
        }
        if p.max_guesses == 0 {
            return bad("max_guesses", "is 0".into(), "allow at least one guess");
        }
        if p.timing_step_tokens < 16 {
            return bad(
                "timing_step_tokens",
                format!("is {}", p.timing_step_tokens),
                "give at least 16 tokens, the smallest block engines cache in",
            );
        }
        if !(12..=64).contains(&p.timing_samples) {
            return bad(
                "timing_samples",
                format!("is {}", p.timing_samples),
                "give 12 to 64 samples per guess (the control takes 12; a clear effect is decided in 10 to 20)",
            );
        }
        if !(p.timing_alpha > 0.0 && p.timing_alpha < 0.5) {
            return bad(
                "timing_alpha",
                format!("is {}", p.timing_alpha),
                "give a level between 0 and 0.5, such as 0.001",
            );
        }
        if p.timing_requests < 64 {
            return bad(
                "timing_requests",
                format!("is {}", p.timing_requests),
                "allow at least 64 requests (the control alone takes 37)",
            );
        }
        Ok(())
    }

    async fn run(p: &ExtractionParams, ctx: Context<'_>) -> Outcome {
        super::settled(extract(p, ctx).await)
    }

    fn ceiling(p: &ExtractionParams, _profile: &crate::vendor::VendorProfile) -> Option<super::Ceiling> {
        // Calibration, the victim's prompt and its two controls, b's priming request,
        // and every guess with the victim's prompt again before it, each asking for one
        // token; or, where answers carry no counter, the timed search's budget.
        Some(super::Ceiling::Like {
            requests: (5 + 2 * u64::from(p.max_guesses)).max(2 + u64::from(p.timing_requests)),
            max_tokens: 1,
        })
    }
}

/// The victim's prompt and the guesses at it.
struct Secret {
    digits: Vec<u8>,
    document: String,
    /// The text after each digit; it ends with the words before the next digit.
    after: Vec<String>,
}

impl Secret {
    /// The prompt up to digit `position` (those before it as `known`), then `guess`
    /// and the text after it.
    fn prompt(&self, known: &[u8], guess: char) -> String {
        let mut text = self.document.clone();
        for (i, d) in known.iter().enumerate() {
            text.push_str(&format!("{d}{}", self.after[i]));
        }
        text.push(guess);
        text.push_str(&self.after[known.len()]);
        text
    }

    /// The whole prompt tenant a sends.
    fn whole(&self) -> String {
        let (last, known) = self.digits.split_last().expect("at least one digit");
        self.prompt(known, char::from(b'0' + last))
    }

    fn shown(digits: &[u8]) -> String {
        digits.iter().map(|d| char::from(b'0' + d)).collect()
    }
}

/// Runs `cache.prefix-extraction`.
pub async fn extract(p: &ExtractionParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let labels: Vec<String> = ctx.session.tenant_labels().into_iter().map(str::to_owned).collect();
    let (victim, thief) = (&labels[0], &labels[1]);
    let mut sizer = Sizer::calibrated(ctx, victim).await?;
    let secret = draw(p, &ctx, &sizer);
    let ask = |tenant: &str, prompt: String| ChatRequest {
        cache_salt: salt(&ctx, tenant),
        ..ChatRequest::user(prompt, 1)
    };
    let mut unjudged = Vec::new();
    let counted = |sent: &Sent, who: &str, unjudged: &mut Vec<String>| -> Option<u64> {
        let ex = &sent.exchange;
        match ex.usage.and_then(|u| u.cached_tokens) {
            Some(n) if ex.is_success() => Some(n),
            _ => {
                unjudged.push(format!(
                    "{who} (transcript #{}) {}",
                    sent.seq,
                    if ex.is_success() {
                        "reported no reuse counter (cached_tokens, timings.cache_n)".to_owned()
                    } else {
                        format!("was not answered: {}", describe(ex))
                    }
                ));
                None
            }
        }
    };

    // 1. The victim's prompt, then its own control. An answer without a counter sends
    //    the case to the timed search.
    let victims = sizer.send_request(victim, &ask(victim, secret.whole()), false).await?;
    if victims.exchange.is_success() && victims.exchange.usage.and_then(|u| u.cached_tokens).is_none() {
        let why = format!(
            "tenant {victim}'s prompt (transcript #{}) reported no reuse counter: the case timed the guesses instead",
            victims.seq
        );
        return timed::extract(p, ctx, sizer, why).await;
    }
    if counted(&victims, &format!("tenant {victim}'s prompt"), &mut unjudged).is_none() {
        return Ok(inconclusive(unjudged, sizer));
    }
    let right = char::from(b'0' + secret.digits[0]);
    let own_right = sizer
        .send_request(victim, &ask(victim, secret.prompt(&[], right)), false)
        .await?;
    let own_wrong = sizer.send_request(victim, &ask(victim, secret.prompt(&[], 'x')), false).await?;
    let (Some(r), Some(w)) = (
        counted(&own_right, &format!("tenant {victim}'s control"), &mut unjudged),
        counted(&own_wrong, &format!("tenant {victim}'s control"), &mut unjudged),
    ) else {
        return Ok(inconclusive(unjudged, sizer));
    };
    let Some(margin) = judge::margin(r, w) else {
        // The counter tells the owner nothing (no prefix cache, or reuse counted in
        // blocks longer than a digit's text): the time may still tell, so the guesses
        // are timed, and the timed control decides whether anyone could read them.
        let why = format!(
            "tenant {victim}'s own guesses at its first digit reused {r} tokens when right and {w} when wrong \
             (transcript #{}, #{}): the counter does not tell a right guess from a wrong one here (no prefix cache, \
             or reuse counted in blocks longer than block_tokens = {}), so the case timed the guesses instead",
            own_right.seq, own_wrong.seq, p.block_tokens
        );
        return timed::extract(p, ctx, sizer, why).await;
    };
    let control = format!(
        "tenant {victim}'s own right guess reused {} tokens more than a wrong one (transcript #{}, #{})",
        r - w,
        own_right.seq,
        own_wrong.seq
    );

    // 2. The thief primes its own cache, then guesses digit by digit.
    let primed = sizer.send_request(thief, &ask(thief, secret.prompt(&[], 'x')), false).await?;
    if counted(&primed, &format!("tenant {thief}'s priming request"), &mut unjudged).is_none() {
        return Ok(inconclusive(unjudged, sizer));
    }
    let mut search = Search::new(secret.digits.len(), p.max_guesses, margin);
    let mut seqs = Vec::new();
    let secret_of_run = ctx.session.secret();
    while let Some(digit) = search.next(|position| judge::order(secret_of_run, ctx.case_id, position)) {
        let position = search.recovered.len();
        // A secret in a prompt comes back with every request (a system prompt
        // does): tenant a sends its prompt again before each guess. Engines keep a
        // cached prompt only as long as no other request takes its place
        // (llama.cpp's slots keep the last prompt each served).
        let again = sizer.send_request(victim, &ask(victim, secret.whole()), false).await?;
        if counted(&again, &format!("tenant {victim}'s prompt, sent again"), &mut unjudged).is_none() {
            return Ok(inconclusive(unjudged, sizer));
        }
        let sent = sizer
            .send_request(
                thief,
                &ask(thief, secret.prompt(&search.recovered, char::from(b'0' + digit))),
                false,
            )
            .await?;
        seqs.push(sent.seq);
        let who = format!("tenant {thief}'s guess {digit} at digit {}", position + 1);
        let Some(cached) = counted(&sent, &who, &mut unjudged) else {
            return Ok(inconclusive(unjudged, sizer));
        };
        search.record(cached);
    }
    // `verify` drives the same search with the counters of these lines.
    ctx.session.roles(
        ctx.case_id,
        &[("control", vec![own_right.seq, own_wrong.seq]), ("guesses", seqs.clone())],
    )?;
    let last_position = search.last_position.clone();
    let found = Guesses {
        recovered: search.recovered,
        guesses: search.guesses,
        pairs: 0,
        seqs,
        exhausted: search.exhausted,
    };

    let channel = "the reuse counter of its own answers (usage.prompt_tokens_details.cached_tokens or timings.cache_n)";
    let rest = if found.exhausted {
        Err(format!(
            "the guess budget (max_guesses = {}) ended before tenant {thief} had tried every digit at a position",
            p.max_guesses
        ))
    } else if found.recovered.len() < secret.digits.len() {
        let same = last_position.first().map_or(0, |g| g.cached);
        Ok(format!(
            "tenant {thief}'s guesses at digit {} of tenant {victim}'s {}-digit secret all reused {same} tokens \
             (what {thief} had sent itself): none of tenant {victim}'s prompt; {control}",
            found.recovered.len() + 1,
            secret.digits.len()
        ))
    } else {
        Ok(control)
    };
    Ok(found.conclude(victim, thief, &secret.digits, channel, victims.seq, rest, sizer))
}

/// What tenant b's guesses found, on either channel.
#[derive(Debug, Default)]
struct Guesses {
    /// The digits recovered, in order.
    recovered: Vec<u8>,
    /// Guesses tried (a timed guess is one, whatever its samples).
    guesses: u32,
    /// Timed pairs sent (none on the counter).
    pairs: u32,
    /// The transcript lines of the guesses.
    seqs: Vec<u64>,
    /// Whether the budget ended the search.
    exhausted: bool,
}

impl Guesses {
    /// The outcome: fail when the digits recovered are the start of a's secret;
    /// inconclusive when they are not, or `rest` (what else was reached) is an error;
    /// else a pass with `rest`.
    #[allow(clippy::too_many_arguments)]
    fn conclude(
        &self,
        victim: &str,
        thief: &str,
        digits: &[u8],
        channel: &str,
        victim_seq: u64,
        rest: Result<String, String>,
        sizer: Sizer<'_>,
    ) -> Outcome {
        let first_seq = self.seqs.first().copied().unwrap_or(victim_seq);
        let last_seq = self.seqs.last().copied().unwrap_or(victim_seq);
        let shown = Secret::shown(&self.recovered);
        let actual = Secret::shown(digits);
        let mut findings = Vec::new();
        let mut unjudged = Vec::new();
        if !self.recovered.is_empty() && digits.starts_with(&self.recovered) {
            let whole = self.recovered.len() == digits.len();
            findings.push(Finding {
                code: FindingCode::PrefixExtracted,
                message: format!(
                    "tenant {thief} read tenant {victim}'s secret out of the shared prefix cache: it recovered \
                     {shown}{} ({} of {} digits, {} tenant {victim}'s secret {actual}) in {} guesses, reading \
                     {channel} (transcript #{first_seq} to #{last_seq}; tenant {victim}'s prompt #{victim_seq}, \
                     sent again before each guess)",
                    if whole { "" } else { "…" },
                    self.recovered.len(),
                    digits.len(),
                    if whole { "equal to" } else { "the start of" },
                    self.guesses,
                ),
                leak: None,
            });
        } else if !self.recovered.is_empty() {
            unjudged.push(format!(
                "tenant {thief}'s guesses pointed to {shown}, which is not tenant {victim}'s secret {actual} \
                 (transcript #{first_seq} to #{last_seq}, reading {channel}): what moved is something other than a \
                 shared prefix"
            ));
        }
        let reached = match rest {
            Ok(what) if unjudged.is_empty() => Ok(what),
            Ok(_) => Err(unjudged.join("; ")),
            Err(why) => Err(unjudged.into_iter().chain([why]).collect::<Vec<_>>().join("; ")),
        };
        conclude(findings, reached, sizer.coverage)
    }
}

fn inconclusive(unjudged: Vec<String>, sizer: Sizer<'_>) -> Outcome {
    conclude(Vec::new(), Err(unjudged.join("; ")), sizer.coverage)
}

/// The `cache_salt` `tenant` sends, where the profile says the vendor takes one.
fn salt(ctx: &Context<'_>, tenant: &str) -> Option<String> {
    ctx.session
        .profile()
        .cache_salt
        .then(|| format!("{:016x}", ctx.session.secret().seed(tenant, ctx.case_id, u32::MAX)))
}

/// Tenant a's secret digits, drawn from the run secret.
fn digits(p: &ExtractionParams, ctx: &Context<'_>) -> Vec<u8> {
    judge::digits(ctx.session.secret(), ctx.case_id, p.digits)
}

/// The words before the first digit, drawn from the run secret.
fn intro(ctx: &Context<'_>) -> &'static str {
    ctx.session.secret().pick(
        "extraction.intro",
        &[
            "The vault code follows, one digit at a time. The first digit is ",
            "Here is the door code, digit by digit. The first digit is ",
            "The account PIN is given one digit at a time. The first digit is ",
        ],
    )
}

/// The document before the first digit, with the words that introduce it; `label`
/// draws its text.
fn document(p: &ExtractionParams, ctx: &Context<'_>, sizer: &Sizer<'_>, label: &str) -> String {
    sizer.builder().build(
        u64::from(p.document_tokens),
        &Filler::plain(ctx.session.secret().seed(label, ctx.case_id, 1)),
        "",
        &[],
        &format!("\n\n{}", intro(ctx)),
    )
}

/// The words after digit `i` and its text: those that introduce the next digit, or
/// that close the secret.
fn next_words(p: &ExtractionParams, i: u32) -> &'static str {
    if i + 1 == p.digits {
        ". That was the last digit."
    } else {
        ". The digit after that is "
    }
}

/// The victim's secret and the text around it, drawn from the run secret.
fn draw(p: &ExtractionParams, ctx: &Context<'_>, sizer: &Sizer<'_>) -> Secret {
    let secret = ctx.session.secret();
    let digits = digits(p, ctx);
    let builder = sizer.builder();
    let document = document(p, ctx, sizer, "extraction");
    let after = (0..p.digits)
        .map(|i| {
            let next = next_words(p, i);
            builder.build(
                u64::from(p.block_tokens),
                &Filler::plain(secret.seed("extraction", ctx.case_id, 2 + i)),
                ". ",
                &[],
                next,
            )
        })
        .collect();
    Secret {
        digits,
        document,
        after,
    }
}

/// The order tenant b tries the digits at `position`, drawn from the run secret.
fn order(ctx: &Context<'_>, position: usize) -> Vec<u8> {
    judge::order(ctx.session.secret(), ctx.case_id, position)
}
