//! `usage.consistency` (T4): reported prompt and completion tokens must agree with
//! what was sent and received.
//!
//! Prompts of a few lengths ask for an answer longer than `max_tokens` allows. Checks,
//! each within the case's `tolerance`:
//!
//! - with a local tokenizer (the profile names one): `usage.prompt_tokens` against the
//!   local count of what was sent (the chat template's few tokens allowed for);
//! - without one: the characters per token implied by each length agree with each
//!   other (a placeholder or a constant shows as wildly different ratios) and lie in
//!   the range real tokenizers give;
//! - `completion_tokens` is at most `max_tokens`, and equals it when the finish reason
//!   is `length`; with a local tokenizer it matches the count of the text received.
//!
//! Without a local tokenizer a vendor that scales every count by the same factor
//! cannot be told apart from one with a different tokenizer; the summary says which
//! checks ran.

use super::{Context, Sizer, conclude, describe};
use crate::adapter::Exchange;
use crate::outcome::{Finding, FindingCode, Outcome};
use crate::prompt::{MAX_CHARS_PER_TOKEN, MIN_CHARS_PER_TOKEN};
use crate::session::SessionError;
use crate::vendor::LocalTokenizer;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Template tokens allowed for on top of the message's own count.
const TEMPLATE_ALLOWANCE: u64 = 16;

/// Parameters of `usage.consistency`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    /// Prompt lengths as fractions of the context, at least two, ascending.
    #[serde(default = "default_lengths")]
    pub lengths: Vec<f64>,
    /// Relative tolerance of every comparison.
    #[serde(default = "default_tolerance")]
    pub tolerance: f64,
    /// Tokens each request asks for (the answer is made to need more).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
}

fn default_lengths() -> Vec<f64> {
    vec![0.05, 0.4]
}
fn default_tolerance() -> f64 {
    0.1
}
fn default_max_tokens() -> u32 {
    32
}

impl UsageParams {
    pub(crate) fn validate(&self) -> Result<(), super::ParamsError> {
        if self.lengths.len() < 2 || self.lengths.iter().any(|&f| !(f > 0.0 && f < 1.0)) {
            return Err(super::ParamsError::Invalid {
                field: "lengths",
                problem: "list at least two fractions in (0, 1)".into(),
            });
        }
        if !(self.tolerance > 0.0 && self.tolerance < 1.0) {
            return Err(super::ParamsError::Invalid {
                field: "tolerance",
                problem: "must be in (0, 1)".into(),
            });
        }
        Ok(())
    }
}

/// How every prompt of this probe starts; `verify` picks them out of the transcript by it.
pub const HEADS: &[&str] = &[
    "Repeat the following notes word for word.\n\n",
    "Copy the notes below word for word.\n\n",
    "Echo these notes exactly, word for word.\n\n",
];

/// One answered prompt: its transcript sequence number, the prompt, the exchange.
pub type Answered<'a> = (u64, &'a str, &'a Exchange);

/// The probe `usage.consistency`.
pub struct Consistency;

impl super::Probe for Consistency {
    const KIND: &'static str = "usage.consistency";
    type Params = UsageParams;

    fn validate(p: &UsageParams) -> Result<(), super::ParamsError> {
        p.validate()
    }

    async fn run(p: &UsageParams, ctx: Context<'_>) -> Outcome {
        super::settled(consistency(p, ctx).await)
    }
}

/// Runs `usage.consistency`.
pub async fn consistency(p: &UsageParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let tenant = ctx.session.tenant_labels()[0].to_owned();
    let mut sizer = Sizer::calibrated(ctx, &tenant).await?;
    let context = ctx.session.profile().context_window;
    let mut sent_prompts = Vec::new();
    for &f in &p.lengths {
        let tokens = (f * context as f64) as u64;
        let seed = sizer.filler(&tenant);
        let head = ctx.session.secret().pick("usage", HEADS);
        let prompt = sizer.builder().build(tokens, &seed, head, &[], "");
        let sent = sizer.send(&tenant, prompt.clone(), p.max_tokens, false).await?;
        if !sent.exchange.is_success() {
            sizer
                .notes
                .push(format!("{tokens} tokens: {} (#{})", describe(&sent.exchange), sent.seq));
        }
        sent_prompts.push((prompt, sent));
    }
    let answered: Vec<Answered> = sent_prompts
        .iter()
        .map(|(p, s)| (s.seq, p.as_str(), &s.exchange))
        .collect();
    let local = ctx.session.profile().tokenizer;
    let (findings, checked) = judge(p, local, &answered);
    let c = sizer.coverage;
    let method = if local.is_some() {
        "against the local tokenizer"
    } else {
        "for consistency between lengths (no local tokenizer)"
    };
    let what = format!(
        "usage checked {method} on {checked} answers; {} requests, {} prompt tokens",
        c.requests, c.prompt_tokens
    );
    let reached = if checked == p.lengths.len() {
        Ok(what)
    } else {
        Err(format!(
            "not every length was answered ({}); {what}",
            sizer.notes.join("; ")
        ))
    };
    Ok(conclude(findings, reached, c))
}

/// The usage findings on these answers (those whose prompt starts with one of
/// [`HEADS`]), and
/// how many answers were checked. `verify` re-judges the transcript with it.
pub fn judge(p: &UsageParams, local: Option<LocalTokenizer>, answered: &[Answered]) -> (Vec<Finding>, usize) {
    let mismatch = |what: String| Finding {
        code: FindingCode::UsageMismatch,
        message: what,
        leak: None,
    };
    let mut findings = Vec::new();
    let mut ratios = Vec::new();
    let mut checked = 0;
    for &(seq, prompt, ex) in answered
        .iter()
        .filter(|(_, prompt, _)| HEADS.iter().any(|h| prompt.starts_with(h)))
    {
        if !ex.is_success() {
            continue;
        }
        let Some(u) = ex.usage else {
            findings.push(mismatch(format!("an answer carried no usage (transcript #{seq})")));
            continue;
        };
        checked += 1;
        if let Some(t) = local {
            let sent_tokens = t.count(prompt);
            let low = (sent_tokens as f64 * (1.0 - p.tolerance)) as u64;
            let high = (sent_tokens as f64 * (1.0 + p.tolerance)) as u64 + TEMPLATE_ALLOWANCE;
            if !(low..=high).contains(&u.prompt_tokens) {
                findings.push(mismatch(format!(
                    "usage says {} prompt tokens for a prompt of {sent_tokens} (transcript #{seq})",
                    u.prompt_tokens
                )));
            }
            let received = t.count(&ex.content);
            if u.completion_tokens.abs_diff(received) as f64 > p.tolerance * received as f64 + 2.0 {
                findings.push(mismatch(format!(
                    "usage says {} completion tokens for an answer of {received} (transcript #{seq})",
                    u.completion_tokens
                )));
            }
        }
        if u.prompt_tokens > 0 {
            ratios.push((prompt.len() as f64 / u.prompt_tokens as f64, seq));
        } else if !prompt.is_empty() {
            // No ratio to judge, which must not pass: a prompt is never no tokens.
            findings.push(mismatch(format!(
                "usage says 0 prompt tokens for a prompt of {} characters (transcript #{seq})",
                prompt.len()
            )));
        }
        if u.completion_tokens > u64::from(p.max_tokens)
            || (ex.finish_reason.as_deref() == Some("length") && u.completion_tokens != u64::from(p.max_tokens))
        {
            findings.push(mismatch(format!(
                "usage says {} completion tokens with max_tokens {} and finish reason {:?} (transcript #{seq})",
                u.completion_tokens, p.max_tokens, ex.finish_reason
            )));
        }
    }
    for &(ratio, seq) in &ratios {
        if !(MIN_CHARS_PER_TOKEN..=MAX_CHARS_PER_TOKEN).contains(&ratio) {
            findings.push(mismatch(format!(
                "usage implies {ratio:.2} characters per token (transcript #{seq}), outside any real tokenizer's range"
            )));
        }
    }
    if let (Some(&(first, _)), Some(&(last, seq))) = (ratios.first(), ratios.last()) {
        if ratios.len() > 1 && (first - last).abs() / last > p.tolerance * 2.0 {
            findings.push(mismatch(format!(
                "usage implies {first:.2} characters per token for the short prompt and {last:.2} for the long one (transcript #{seq})"
            )));
        }
    }
    (findings, checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::adapter::Usage;

    #[test]
    fn zero_prompt_tokens_is_a_mismatch_even_without_a_local_tokenizer() {
        let p: UsageParams = toml::from_str("").unwrap();
        let prompt = format!("{}{}", HEADS[0], "notes ".repeat(200));
        let answer = |prompt_tokens| Exchange {
            status: Some(200),
            content: "notes".into(),
            usage: Some(Usage {
                prompt_tokens,
                completion_tokens: 1,
                cached_tokens: None,
            }),
            ..Exchange::default()
        };
        let (zero, checked) = judge(&p, None, &[(1, prompt.as_str(), &answer(0))]);
        assert_eq!(checked, 1);
        assert!(zero.iter().any(|f| f.message.contains("0 prompt tokens")), "{zero:?}");
        let (plausible, _) = judge(&p, None, &[(1, prompt.as_str(), &answer(300))]);
        assert!(plausible.is_empty(), "{plausible:?}");
    }
}
