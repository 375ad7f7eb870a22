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
pub use crate::judge::usage::{Answered, HEADS, Rule, judge};
use crate::outcome::Outcome;
use crate::session::SessionError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

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
    vec![0.02, 0.2]
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

/// The probe `usage.consistency`.
pub struct Consistency;

impl super::Probe for Consistency {
    const KIND: &'static str = crate::judge::kind::USAGE;
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
    let rule = Rule {
        tolerance: p.tolerance,
        max_tokens: p.max_tokens,
    };
    let (findings, checked) = judge(&rule, local, &answered);
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
