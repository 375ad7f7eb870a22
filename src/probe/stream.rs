//! `stream.integrity` (T8): a stream follows the SSE and chunk grammar and finishes.
//!
//! A few short streaming requests that ask for usage. Each stream must: answer 200;
//! keep its API's event grammar (the adapter's rules: for the HTTP APIs
//! `text/event-stream`, and for OpenAI-compatible ones only JSON frames and one final
//! `[DONE]`, one `id` across its chunks, usage since it was asked for); give a finish
//! reason; and hold content. A stream that just ends, without finish reason or `[DONE]`, is a
//! broken stream however fluent its text. The rule is `judge::stream::malformed`, and
//! `verify` re-judges every stream of the case with it.

use super::{Context, Sizer, conclude, describe};
use crate::outcome::{Finding, FindingCode, Outcome};
use crate::session::SessionError;
use crate::wording::Wording;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Parameters of `stream.integrity`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct StreamParams {
    /// How many streams.
    #[serde(default = "default_streams")]
    pub streams: u32,
    /// Tokens each asks for.
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
}

fn default_streams() -> u32 {
    3
}
fn default_max_tokens() -> u32 {
    48
}

/// The probe `stream.integrity`.
pub struct Integrity;

impl super::Probe for Integrity {
    const KIND: &'static str = crate::judge::kind::STREAM;
    type Params = StreamParams;

    async fn run(p: &StreamParams, ctx: Context<'_>) -> Outcome {
        super::settled(integrity(p, ctx).await)
    }
}

/// What each streamed prompt asks: its notes back ([`crate::wording`]).
const ASK: Wording = Wording(
    "[Hi|Hello|Dear|Hey|Morning|Afternoon] {N}[,|:|!] [repeat|copy out|say back|write out|echo|reproduce] [the following notes|the notes below|these notes|the text below|what follows|the notes from {N}] [for|to] {N}[.|, please.|:]\n\n",
);

/// Runs `stream.integrity`.
pub async fn integrity(p: &StreamParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let tenant = ctx.session.tenant_labels()[0].to_owned();
    let mut sizer = Sizer::calibrated(ctx, &tenant).await?;
    let mut findings = Vec::new();
    let mut complete = 0;
    for _ in 0..p.streams {
        let seed = sizer.filler(&tenant);
        let head = ctx.session.secret().say("stream", 0, ASK);
        let prompt = sizer.builder().build(200, &seed, &head, &[], "");
        let sent = sizer.send(&tenant, prompt, p.max_tokens, true).await?;
        let ex = &sent.exchange;
        if !ex.is_success() {
            sizer.notes.push(format!("{} (#{})", describe(ex), sent.seq));
            continue;
        }
        complete += 1;
        // The rule `verify` applies to the transcript again.
        let problems = crate::judge::stream::malformed(ctx.session.profile().adapter, ex);
        if !problems.is_empty() {
            findings.push(Finding {
                code: FindingCode::StreamMalformed,
                message: format!(
                    "a stream (transcript #{}, {} frames): {}",
                    sent.seq,
                    ex.frames.len(),
                    problems.join(", ")
                ),
                leak: None,
            });
        }
    }
    let c = sizer.coverage;
    let what = format!("{complete} streams checked frame by frame; {} requests", c.requests);
    let reached = if complete == p.streams {
        Ok(what)
    } else {
        Err(format!("{what}; not answered: {}", sizer.notes.join("; ")))
    };
    Ok(conclude(findings, reached, c))
}
