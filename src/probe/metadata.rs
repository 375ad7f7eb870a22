//! `metadata.cross-tenant` (T12): the engine's and gateway's own endpoints must show no
//! tenant anything of another tenant's requests, no credential, and take no action from
//! a tenant's key.
//!
//! Inference servers answer more than the API: llama.cpp's `/slots` shows every request
//! being served (prompt length, sampling parameters, seed), SGLang's `/server_info` has
//! returned its API keys, vLLM's `/metrics` and `/reset_prefix_cache` sit outside its
//! key's reach, LiteLLM's `/metrics` names every key's alias. The endpoints to ask are
//! data (the case's `endpoints`), so that a newly reported one is a line in a suite file.
//!
//! Tenant a sends a request recognisable by its sampling parameters and a seed drawn
//! from the run secret, long enough to be still running; meanwhile every endpoint is
//! asked with tenant a's key (the control: does any endpoint show a request to its
//! owner?), with tenant b's key, and with no key. An answer to b or to no key that holds
//! a's seed, any credential of the run (in any encoding the redactor knows), or the
//! SHA-256 of a key (what gateways show as a key's hash) fails the case; so does any of
//! a's canaries (the session's scan). Endpoints that change state (marked
//! `changes_state`) are asked with b's key only when the profile allows it
//! (`allow_state_changes = true`, for self-hosted servers); accepting one fails. A pass
//! needs a's request to have been running while every endpoint was asked, unless none
//! answered b or no key (absent or refused for everyone: there is nothing such an
//! endpoint could show them); the summary lists every endpoint and what each key got.

use super::{Context, conclude, describe};
use crate::adapter::{ChatRequest, Sampling};
use crate::outcome::{Coverage, Finding, FindingCode, Outcome};
use crate::prompt::PromptBuilder;
use crate::session::{NO_KEY, Sent, SessionError};
use tenantcheck_evidence::judge::metadata as judge;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Parameters of `metadata.cross-tenant`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetadataParams {
    /// The endpoints to ask.
    pub endpoints: Vec<Endpoint>,
    /// Tokens of tenant a's prompt (default 512).
    #[serde(default = "default_prompt_tokens")]
    pub prompt_tokens: u64,
    /// Tokens tenant a's request asks for, so that it is still running while the
    /// endpoints are asked (default 384).
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    /// Milliseconds between sending tenant a's request and asking the first endpoint
    /// (default 200), time for the server to take the request up.
    #[serde(default = "default_settle_ms")]
    pub settle_ms: u64,
}

/// One endpoint an engine or gateway is known to expose.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Endpoint {
    /// `GET` or `POST`.
    pub method: String,
    /// The path on the vendor's origin, with its query (`/slots`,
    /// `/slots/0?action=erase`).
    pub path: String,
    /// Which engines or gateways expose it (for the report).
    #[serde(default)]
    pub engines: Vec<String>,
    /// Whether asking it changes the server's state (a `POST` that erases, flushes,
    /// saves); asked only when the profile says `allow_state_changes = true`.
    #[serde(default)]
    pub changes_state: bool,
    /// The JSON body a `POST` carries (none: an empty object), such as llama.cpp's
    /// `{ filename = "..." }` for saving a slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
}

fn default_prompt_tokens() -> u64 {
    512
}

fn default_max_tokens() -> u32 {
    384
}

fn default_settle_ms() -> u64 {
    200
}

/// The probe `metadata.cross-tenant`.
pub struct CrossTenant;

impl super::Probe for CrossTenant {
    const KIND: &'static str = crate::judge::kind::METADATA;
    type Params = MetadataParams;

    fn validate(p: &MetadataParams) -> Result<(), super::ParamsError> {
        let invalid = |field, problem: String| Err(super::ParamsError::Invalid { field, problem });
        if p.endpoints.is_empty() {
            return invalid("endpoints", "is empty; fix: list the endpoints to ask".into());
        }
        for e in &p.endpoints {
            if e.method != "GET" && e.method != "POST" {
                return invalid(
                    "endpoints",
                    format!("{} {}: the method is GET or POST", e.method, e.path),
                );
            }
            let path_ok = e.path.starts_with('/')
                && !e.path.starts_with("//")
                && !e.path.contains(char::is_whitespace)
                && !e.path.contains('@');
            if !path_ok {
                return invalid(
                    "endpoints",
                    format!(
                        "{:?}: a path starts with one `/` and holds no space or `@`",
                        e.path
                    ),
                );
            }
            if e.changes_state != (e.method == "POST") {
                return invalid(
                    "endpoints",
                    format!(
                        "{} {}: a POST changes state and a GET does not; fix: set changes_state to match",
                        e.method, e.path
                    ),
                );
            }
        }
        if p.max_tokens < 16 {
            return invalid("max_tokens", "ask for at least 16 tokens".into());
        }
        Ok(())
    }

    async fn run(p: &MetadataParams, ctx: Context<'_>) -> Outcome {
        super::settled(cross_tenant(p, ctx).await)
    }

    fn ceiling(p: &MetadataParams, _profile: &crate::vendor::VendorProfile) -> Option<super::Ceiling> {
        // Up to `ROUNDS` rounds (tenant a's request, then every endpoint with three
        // keys), a's request asking for `max_tokens`, twice, then four times as many.
        let round = 1 + 3 * p.endpoints.len() as u64;
        let rounds = u64::from(ROUNDS);
        let victim: u64 = (0..rounds).map(|r| u64::from(p.max_tokens) << r.min(2)).sum();
        Some(super::Ceiling::Like {
            requests: rounds * round,
            max_tokens: victim.div_ceil(rounds * round),
        })
    }
}

/// The most rounds tenant a's request is sent in: one, then again while it ended
/// before the endpoints had all been asked.
const ROUNDS: u32 = 5;

/// What one key got from one endpoint.
struct Asked {
    who: String,
    status: String,
}

/// Runs `metadata.cross-tenant`.
pub async fn cross_tenant(p: &MetadataParams, ctx: Context<'_>) -> Result<Outcome, SessionError> {
    let labels: Vec<String> = ctx.session.tenant_labels().into_iter().map(str::to_owned).collect();
    let (owner, other) = (&labels[0], &labels[1]);
    let secret = ctx.session.secret();
    let drawn = judge::drawn(secret, ctx.case_id);
    let sampling = Sampling {
        temperature: drawn.temperature,
        top_p: drawn.top_p,
        seed: drawn.seed,
    };
    let shown_seed = sampling.seed.to_string();
    let record = ctx.session.canary(owner, ctx.case_id, 0).record();
    let ask = secret.pick(
        "metadata.ask",
        &[
            "Count upward from one, writing every number in words, one per line, and never stop.",
            "Write the numbers from one upward in words, one per line, without stopping.",
        ],
    );
    // Each round's prompt is new: a model that stops early stops on a given text.
    let prompt_of = |round: u32| {
        PromptBuilder::default().build(
            p.prompt_tokens,
            &secret.filler(owner, ctx.case_id, 1 + round),
            &format!("Customer on file: {record}\n\n"),
            &[],
            &format!("\n\n{ask}"),
        )
    };
    let allowed = ctx.session.profile().allow_state_changes;
    let hashes: Vec<(String, String)> = labels
        .iter()
        .filter_map(|l| ctx.session.key(l).ok())
        .map(|k| (k.label.clone(), crate::sha256_hex(k.secret.expose().as_bytes())))
        .collect();

    let answered = |sent: &Sent| sent.exchange.status.is_some_and(|s| (200..300).contains(&s));
    // Tenant a's request must run while every endpoint is asked: where it ended
    // sooner (a fast server, a model that stops early), it is sent again with a new
    // prompt and twice the tokens (up to four times `max_tokens`), for up to `ROUNDS`
    // rounds.
    let mut coverage = Coverage::default();
    let mut max_tokens = p.max_tokens;
    let mut round = 0;
    // Every round's answers are judged; the listing shows the last round's.
    let mut all: Vec<(usize, Option<String>, Sent)> = Vec::new();
    let mut victims = Vec::new();
    let (victim, listed_from, asked_for, victim_ran_for) = loop {
        let prompt = prompt_of(round);
        // Streamed: the request runs while its answer is generated, on any server.
        let request = ChatRequest {
            sampling: Some(sampling),
            stream: true,
            ..ChatRequest::user(prompt.clone(), max_tokens)
        };
        let started = Instant::now();
        let victim = ctx.session.chat(ctx.case_id, owner, &request);
        let asking = async {
            tokio::time::sleep(Duration::from_millis(p.settle_ms)).await;
            let mut answers: Vec<(usize, Option<String>, Sent)> = Vec::new();
            for (i, e) in p.endpoints.iter().enumerate() {
                if e.changes_state && !allowed {
                    continue;
                }
                let keys: Vec<Option<String>> = if e.changes_state {
                    vec![Some(other.clone()), None]
                } else {
                    vec![Some(owner.clone()), Some(other.clone()), None]
                };
                for key in keys {
                    let sent = ctx
                        .session
                        .endpoint(ctx.case_id, key.as_deref(), &e.method, &e.path, e.body.as_ref())
                        .await?;
                    answers.push((i, key, sent));
                }
            }
            Ok::<_, SessionError>((answers, started.elapsed()))
        };
        let (victim, asked) = tokio::join!(victim, asking);
        let victim = victim?;
        victims.push(victim.seq);
        let (answers, asked_for) = asked?;
        let ran_for = Duration::from_secs_f64(victim.exchange.timings.total_ms / 1e3);
        coverage.requests += 1 + answers.len() as u64;
        coverage.prompt_tokens += PromptBuilder::default().tokens_for(prompt.len());
        coverage.max_prompt_tokens = coverage.max_prompt_tokens.max(PromptBuilder::default().tokens_for(prompt.len()));
        round += 1;
        // Only an endpoint that answers another key, or none, could show it the
        // request: where none does (absent or refused for everyone), the request need
        // not be running while they are asked.
        let open = answers.iter().any(|(_, key, sent)| key.as_deref() != Some(owner.as_str()) && answered(sent));
        let ran = judge::in_flight(victim.seq, &answers.iter().map(|(_, _, s)| s.seq).collect::<Vec<_>>());
        let retry = victim.exchange.is_success() && !ran && open && round < ROUNDS;
        let from = all.len();
        all.extend(answers);
        if !retry {
            break (victim, from, asked_for, ran_for);
        }
        max_tokens = (max_tokens * 2).min(p.max_tokens * 4);
    };
    let answers = all;
    // An adapter that speaks only the API (a program on stdio) sends none of them.
    let not_offered = |sent: &Sent| {
        sent.exchange.status.is_none()
            && sent
                .exchange
                .transport_error
                .as_ref()
                .is_some_and(|e| e.kind == crate::adapter::TransportErrorKind::Request && e.message.contains("nothing was sent"))
    };
    if !answers.is_empty() && answers.iter().all(|(_, _, sent)| not_offered(sent)) {
        return Ok(Outcome::skipped(
            "the adapter reaches only the vendor's API, not the engine's own endpoints",
        ));
    }

    ctx.session.roles(
        ctx.case_id,
        &[
            ("victim", victims),
            ("asked", answers.iter().map(|(_, _, sent)| sent.seq).collect()),
        ],
    )?;
    let mut findings = Vec::new();
    let mut seen_by_owner: Vec<String> = Vec::new();
    let mut table: Vec<(String, Vec<Asked>)> = Vec::new();
    for (n, (i, key, sent)) in answers.iter().enumerate() {
        let e = &p.endpoints[*i];
        let name = format!("{} {}", e.method, e.path);
        let who = key.clone().unwrap_or_else(|| NO_KEY.to_owned());
        let ex = &sent.exchange;
        let status = ex.status.map_or_else(|| describe(ex), |s| s.to_string());
        if n >= listed_from {
            let asked = Asked {
                who: who.clone(),
                status,
            };
            match table.last_mut() {
                Some((last, row)) if *last == name => row.push(asked),
                _ => table.push((name.clone(), vec![asked])),
            }
        }
        let text = ex.returned_text();
        let answered = answered(sent);
        if key.as_deref() == Some(owner.as_str()) {
            if answered && text.contains(&shown_seed) {
                seen_by_owner.push(name.clone());
            }
            continue;
        }
        let whom = match key {
            Some(k) => format!("tenant {k}'s key"),
            None => "no key".to_owned(),
        };
        // Judged as the transcript records the answer, credentials redacted: `verify`
        // judges the same text.
        let redact = |t: &str| ctx.session.redact(t);
        let recorded = crate::adapter::Exchange {
            content: redact(&ex.content),
            body: ex.body.as_deref().map(redact),
            frames: ex
                .frames
                .iter()
                .map(|f| crate::adapter::SseFrame {
                    data: redact(&f.data),
                    ..f.clone()
                })
                .collect(),
            api_error: ex.api_error.clone().map(|mut e| {
                e.message = redact(&e.message);
                e
            }),
            ..ex.clone()
        };
        match judge::found(e.changes_state, &recorded, sampling.seed) {
            None => {}
            Some(judge::Found::StateChanged) => findings.push(Finding {
                code: FindingCode::StateChangeAccepted,
                message: format!(
                    "{name}, which changes the server's state, was accepted with {whom}: HTTP {} (transcript #{})",
                    ex.status.unwrap_or(0),
                    sent.seq
                ),
                leak: None,
            }),
            Some(judge::Found::Exposed { request, credential }) => {
                let mut shown = Vec::new();
                if request {
                    shown.push(format!(
                        "tenant {owner}'s request in flight (its seed {shown_seed}, temperature {:.2}, top_p {:.2})",
                        sampling.temperature, sampling.top_p
                    ));
                }
                // What the redaction stands for: a key's hash, a key, or the marker as
                // the vendor wrote it.
                let lower = text.to_ascii_lowercase();
                let mut rest = lower.clone();
                for (label, hash) in &hashes {
                    if lower.contains(hash.as_str()) {
                        shown.push(format!("the SHA-256 of tenant {label}'s key (its identity at a gateway)"));
                        rest = rest.replace(hash.as_str(), "");
                    }
                }
                if credential && redact(&rest) != rest {
                    shown.push("a credential of the run (redacted in the transcript)".to_owned());
                } else if credential && shown.len() == usize::from(request) {
                    shown.push(format!(
                        "{:?} as written, which is how the transcript records a credential",
                        crate::credential::REDACTED
                    ));
                }
                findings.push(Finding {
                    code: FindingCode::MetadataExposed,
                    message: format!(
                        "{name} showed {whom} {} (HTTP {}, transcript #{})",
                        shown.join(", and "),
                        ex.status.unwrap_or(0),
                        sent.seq
                    ),
                    leak: None,
                });
            }
        }
    }

    let listing: Vec<String> = table
        .iter()
        .map(|(name, row)| {
            let statuses: Vec<&str> = row.iter().map(|a| a.status.as_str()).collect();
            if statuses.windows(2).all(|w| w[0] == w[1]) {
                format!("{name}: {} to every key", statuses[0])
            } else {
                let each: Vec<String> = row.iter().map(|a| format!("{} {}", a.who, a.status)).collect();
                format!("{name}: {}", each.join(", "))
            }
        })
        .collect();
    let skipped = p.endpoints.iter().filter(|e| e.changes_state && !allowed).count();
    let state_note = if skipped > 0 {
        format!("; {skipped} endpoints that change state not asked (allow_state_changes is off)")
    } else {
        String::new()
    };
    let control = if seen_by_owner.is_empty() {
        format!("no endpoint showed tenant {owner}'s request even to tenant {owner}")
    } else {
        format!(
            "tenant {owner}'s own key saw its request at {} (the control)",
            seen_by_owner.join(", ")
        )
    };
    // By the transcript's order, as `verify` judges it (`judge::metadata::in_flight`).
    let in_flight = judge::in_flight(
        victim.seq,
        &answers[listed_from..].iter().map(|(_, _, s)| s.seq).collect::<Vec<_>>(),
    );
    // The endpoints of the last round that answered another key or no key: only they
    // could have shown it a running request.
    let open: Vec<String> = answers[listed_from..]
        .iter()
        .filter(|(_, key, sent)| key.as_deref() != Some(owner.as_str()) && answered(sent))
        .map(|(i, _, _)| format!("{} {}", p.endpoints[*i].method, p.endpoints[*i].path))
        .collect();
    let reached = if answers.iter().all(|(_, _, sent)| sent.exchange.status.is_none()) {
        Err(format!(
            "no endpoint could be asked ({}): the adapter or the network reaches only the API",
            answers
                .first()
                .map_or_else(|| "none listed".to_owned(), |(_, _, sent)| describe(&sent.exchange))
        ))
    } else if !victim.exchange.is_success() {
        Err(format!(
            "tenant {owner}'s request was not answered ({}, transcript #{}): nothing was in flight to be shown",
            describe(&victim.exchange),
            victim.seq
        ))
    } else if !in_flight && !open.is_empty() {
        Err(format!(
            "tenant {owner}'s request ended after {:.0} ms (transcript #{}), before the endpoints had all been \
             answered ({:.0} ms): what {} would show of a running request is untested; asked: {}",
            victim_ran_for.as_secs_f64() * 1e3,
            victim.seq,
            asked_for.as_secs_f64() * 1e3,
            open.join(", "),
            listing.join("; ")
        ))
    } else if open.is_empty() {
        let clean = if findings.is_empty() {
            ", and no answer held anything of it, a credential or a key's hash"
        } else {
            ""
        };
        Ok(format!(
            "{} endpoints asked with tenant {owner}'s key, tenant {other}'s and none: none answered another key or \
             no key (absent or refused for everyone), so none could show it tenant {owner}'s requests{clean}\
             {state_note}; asked: {}",
            table.len(),
            listing.join("; ")
        ))
    } else {
        let clean = if findings.is_empty() {
            "; nothing of it, no credential and no key's hash reached another key"
        } else {
            ""
        };
        Ok(format!(
            "{} endpoints asked with tenant {owner}'s key, tenant {other}'s and none while tenant {owner}'s request \
             (transcript #{}) ran: {control}{clean}{state_note}; asked: {}",
            table.len(),
            victim.seq,
            listing.join("; ")
        ))
    };
    Ok(conclude(findings, reached, coverage))
}
