//! `declared.kv-pool` and `declared.advisories` (T9): what the vendor declares about
//! its deployment, checked against the advertised context and known advisories.
//!
//! These cases send nothing: they judge the profile's `[declared]` facts, and the
//! report shows them as declared, apart from what was measured. Without the facts a
//! case is skipped, saying so.
//!
//! - `declared.kv-pool` fails when the KV pool of any declared node role is smaller
//!   than the advertised context (a prompt that fits the context would not fit the
//!   pool: the incident's precondition). KV-transfer checksums or KV canaries declared
//!   off are reported as warnings with the advice, not as failures.
//! - `declared.advisories` fails when the declared engine version is affected by an
//!   advisory under `suite/advisories/`.

use super::{Context, conclude};
use crate::outcome::{Coverage, Finding, FindingCode, Outcome};
use crate::version::Affected;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// No parameters.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoParams {}

/// The probe `declared.kv-pool`.
pub struct KvPool;

impl super::Probe for KvPool {
    const KIND: &'static str = crate::judge::kind::KV_POOL;
    type Params = NoParams;

    async fn run(p: &NoParams, ctx: Context<'_>) -> Outcome {
        let _ = p;
        kv_pool(ctx)
    }
}

/// Runs `declared.kv-pool`.
pub fn kv_pool(ctx: Context<'_>) -> Outcome {
    let profile = ctx.session.profile();
    let Some(declared) = profile.declared.as_ref().filter(|d| !d.nodes.is_empty()) else {
        return Outcome::skipped("the profile declares no KV pools ([[declared.nodes]])");
    };
    let context = profile.context_window;
    let findings: Vec<Finding> = declared
        .nodes
        .iter()
        .filter(|n| n.kv_pool_tokens < context)
        .map(|n| Finding {
            code: FindingCode::DeclaredPoolBelowContext,
            message: format!(
                "declared: the {:?} node's KV pool holds {} tokens, less than the advertised context of {context}",
                n.role, n.kv_pool_tokens
            ),
            leak: None,
        })
        .collect();
    let mut warnings = Vec::new();
    if declared.kv_transfer_checksum == Some(false) {
        warnings.push("KV-transfer checksums are declared off (SGLang: --disaggregation-enable-kv-checksum): turn them on so corrupt or foreign pages are caught");
    }
    if declared.kv_canaries == Some(false) {
        warnings.push(
            "KV canaries are declared off: integrity tags on pages would catch reads of pages a request never wrote",
        );
    }
    let pools: Vec<String> = declared
        .nodes
        .iter()
        .map(|n| format!("{:?} {}", n.role, n.kv_pool_tokens))
        .collect();
    let mut what = format!(
        "declared KV pools [{}] against the advertised context {context}",
        pools.join(", ")
    );
    if !warnings.is_empty() {
        what = format!("{what}; warnings: {}", warnings.join("; "));
    }
    conclude(findings, Ok(what), Coverage::default())
}

/// The probe `declared.advisories`.
pub struct Advisories;

impl super::Probe for Advisories {
    const KIND: &'static str = crate::judge::kind::ADVISORIES;
    type Params = NoParams;

    async fn run(p: &NoParams, ctx: Context<'_>) -> Outcome {
        let _ = p;
        advisories(ctx)
    }
}

/// Runs `declared.advisories`.
pub fn advisories(ctx: Context<'_>) -> Outcome {
    let profile = ctx.session.profile();
    let declared = profile.declared.as_ref();
    let (Some(engine), Some(version)) = (
        declared.and_then(|d| d.engine.as_deref()),
        declared.and_then(|d| d.engine_version.as_deref()),
    ) else {
        return Outcome::skipped("the profile declares no engine and version ([declared] engine, engine_version)");
    };
    let mut unreadable = Vec::new();
    let findings: Vec<Finding> = ctx
        .advisories
        .iter()
        .filter(|a| match a.affects(engine, version) {
            Affected::Yes => true,
            Affected::No => false,
            Affected::Unknown(why) => {
                unreadable.push(format!("advisory {}: {why}", a.id));
                false
            }
        })
        .map(|a| Finding {
            code: FindingCode::AffectedByAdvisory,
            message: format!(
                "declared: {engine} {version} is affected by advisory {} ({}; fixed in {}): {}",
                a.id,
                a.affected,
                a.fixed.join(", "),
                a.summary.split_whitespace().collect::<Vec<_>>().join(" ")
            ),
            leak: None,
        })
        .collect();
    let what = format!(
        "declared {engine} {version} checked against {} advisories",
        ctx.advisories.len()
    );
    // Fail closed: an advisory that cannot be judged leaves the case undecided.
    let what = match unreadable.is_empty() {
        true => Ok(what),
        false => Err(format!(
            "{what}, {} of them undecided: {}; fix: declare engine_version as its engine writes it (PEP 440 such as 0.5.21.post1, semver, or a llama.cpp build tag b11434)",
            unreadable.len(),
            unreadable.join("; ")
        )),
    };
    conclude(findings, what, Coverage::default())
}
