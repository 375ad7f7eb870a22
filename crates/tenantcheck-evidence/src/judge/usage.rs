//! The rule of `usage.consistency`, which `verify` re-applies: reported prompt and
//! completion tokens against what was sent and received (see `probe::usage`).

use crate::exchange::Exchange;
use crate::outcome::{Finding, FindingCode};
use crate::profile::LocalTokenizer;
use crate::prompt::{MAX_CHARS_PER_TOKEN, MIN_CHARS_PER_TOKEN};
use serde::Deserialize;

/// Template tokens allowed for on top of the message's own count.
const TEMPLATE_ALLOWANCE: u64 = 16;

/// How every prompt of this probe starts; `verify` picks them out of the transcript by it.
pub const HEADS: &[&str] = &[
    "Repeat the following notes word for word.\n\n",
    "Copy the notes below word for word.\n\n",
    "Echo these notes exactly, word for word.\n\n",
];

/// One answered prompt: its transcript sequence number, the prompt, the exchange.
pub type Answered<'a> = (u64, &'a str, &'a Exchange);

/// What the rule needs of the case's parameters, read from the report's record of
/// them (the probe's other parameters are ignored).
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
pub struct Rule {
    /// Relative tolerance of every comparison.
    pub tolerance: f64,
    /// Tokens each request asked for.
    pub max_tokens: u32,
}

/// The usage findings on these answers (those whose prompt starts with one of
/// [`HEADS`]), and
/// how many answers were checked. `verify` re-judges the transcript with it.
pub fn judge(p: &Rule, local: Option<LocalTokenizer>, answered: &[Answered]) -> (Vec<Finding>, usize) {
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
    use crate::exchange::Usage;

    #[test]
    fn zero_prompt_tokens_is_a_mismatch_even_without_a_local_tokenizer() {
        let p = Rule {
            tolerance: 0.1,
            max_tokens: 32,
        };
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
