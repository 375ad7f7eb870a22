//! `errors.semantics` (T5): requests a vendor must refuse get a 4xx with an error
//! body, streaming or not.
//!
//! Five kinds of wrong request ([`InvalidRequest`]): an unknown model, a body that is
//! not JSON, a parameter out of range, no messages, and a completion budget past the
//! context. Each is sent once without and once with streaming. A 4xx with an error
//! object passes; so does, for a stream, an error frame and no content. A 2xx without
//! an error is a failure reported as success; any other status, or a 4xx without an
//! error body, is an improper refusal. Both are findings.

use super::{Context, conclude, describe};
use crate::adapter::InvalidRequest;
use crate::outcome::{Coverage, Finding, FindingCode, Outcome};
use crate::session::SessionError;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Parameters of `errors.semantics` (none yet).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ErrorsParams {}

/// The probe `errors.semantics`.
pub struct Semantics;

impl super::Probe for Semantics {
    const KIND: &'static str = crate::judge::kind::ERRORS;
    type Params = ErrorsParams;

    async fn run(p: &ErrorsParams, ctx: Context<'_>) -> Outcome {
        super::settled(semantics(p, ctx).await)
    }
}

/// Runs `errors.semantics`.
pub async fn semantics(_p: &ErrorsParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let tenant = ctx.session.tenant_labels()[0].to_owned();
    let context = ctx.session.profile().context_window;
    let kinds = [
        InvalidRequest::UnknownModel,
        InvalidRequest::MalformedJson,
        InvalidRequest::BadParameter,
        InvalidRequest::EmptyMessages,
        InvalidRequest::OverLimit { context },
    ];
    let mut findings = Vec::new();
    let mut coverage = Coverage::default();
    let mut unanswered = Vec::new();
    for kind in kinds {
        for stream in [false, true] {
            let sent = ctx.session.invalid(ctx.case_id, &tenant, kind, stream).await?;
            coverage.requests += 1;
            let ex = &sent.exchange;
            let mode = if stream { "streaming" } else { "non-streaming" };
            if ex.status.is_none() {
                unanswered.push(format!("{} ({mode}): {}", kind.name(), describe(ex)));
            } else if let Some(problem) = improper_refusal(ex) {
                findings.push(Finding {
                    code: FindingCode::FailureAsSuccess,
                    message: format!("{} ({mode}, transcript #{}): {problem}", kind.name(), sent.seq),
                    leak: None,
                });
            }
        }
    }
    let what = format!(
        "{} wrong requests ({} kinds, streaming and not) each refused with a 4xx and an error body",
        coverage.requests,
        kinds.len()
    );
    let reached = if unanswered.is_empty() {
        Ok(what)
    } else {
        Err(format!("no answer to: {}", unanswered.join("; ")))
    };
    Ok(conclude(findings, reached, coverage))
}

pub use crate::judge::improper_refusal;
