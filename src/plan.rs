//! [`plan`]: what a run will send, and what it will cost, before anything is sent.
//!
//! Probes are code that adapts to what it sees (a prompt sized by the vendor's
//! counts, a sequential test that stops when it decides), so a table of figures kept
//! beside them would drift from what they do. The plan therefore runs the selected
//! cases for real, against the reference vendor started on 127.0.0.1 with the
//! profile's model, context window, tokenizer and concurrency, and counts what the
//! session sent, exactly as the budget counts it: requests, prompt tokens (the
//! profile's tokenizer, else four bytes a token), completion tokens (every request's
//! `max_tokens`: the most a vendor can bill) and dollars at the profile's `[prices]`.
//! Nothing reaches the vendor, and no credential is needed.
//!
//! Where a case's figures depend on the vendor, the plan says so and gives the most
//! it can send ([`crate::probe::cache::ceiling`]).

use crate::canary::RunSecret;
use crate::credential::Redactor;
use crate::event::{Nobody, Observer, Progress, RunEvent};
use crate::exit;
use crate::harness::{HarnessError, Inputs, RunOptions, RunResult, new_runtime, preflight, start_sim};
use crate::probe::Ceiling;
use crate::session::{Citation, Session, Spent};
use crate::transcript::{Header, Transcript};
use crate::vendor::{AdapterKind, VendorProfile};
use std::io::Write;
use std::sync::Arc;

/// One line of the plan.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PlanRow {
    /// The case id, or `preflight` for the credential check.
    pub case: String,
    /// What the dry run sent.
    pub sent: Spent,
    /// The most the case can send, where that depends on the vendor.
    pub at_most: Option<Spent>,
}

/// Runs the selected cases against the reference vendor in place of the profile's,
/// and prints what each sent.
pub fn plan(opts: RunOptions, out: &mut dyn Write) -> Result<RunResult, HarnessError> {
    let Inputs {
        suite,
        profile,
        vendor_source,
        ..
    } = Inputs::load(&opts)?;
    crate::install_crypto_provider();
    let runtime = new_runtime()?;
    let mut dry = profile.clone();
    dry.adapter = AdapterKind::OpenaiChat;
    dry.command.clear();
    let (tenants, sim) = start_sim(&runtime, &mut dry)?;
    let redactor = Redactor::new(tenants.iter().map(|t| &t.secret));

    // The dry run's transcript is scratch: a folder of its own, removed afterwards.
    let scratch = std::env::temp_dir().join(format!(
        "tenantcheck-plan-{}-{}",
        std::process::id(),
        crate::hex(&crate::random_bytes::<4>())
    ));
    std::fs::create_dir_all(&scratch).map_err(|source| HarnessError::Write {
        path: scratch.clone(),
        source,
    })?;
    let result = (|| -> Result<(Vec<PlanRow>, Vec<Citation>), HarnessError> {
        let secret = RunSecret::derive(&crate::random_bytes::<32>(), &[]);
        let commitment = secret.commitment();
        let header = Header {
            tool: "tenantcheck",
            version: crate::TOOL_VERSION,
            vendor: &dry.name,
            secret_commitment: &commitment,
            challenge: None,
            log_index: None,
            log_checkpoint: None,
        };
        let path = scratch.join("transcript.jsonl");
        let transcript =
            Transcript::create(&path, redactor, &header).map_err(|source| HarnessError::Write { path, source })?;
        let provider = crate::adapter::provider(&dry).map_err(|e| HarnessError::Unreachable {
            url: dry.base_url().to_owned(),
            tenant: "-".into(),
            error: e.to_string(),
        })?;
        let observer: Arc<dyn Observer> = match std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            true => Arc::new(Progress),
            false => Arc::new(Nobody),
        };
        let session =
            Session::new(dry.clone(), provider, tenants, Arc::new(transcript), secret).with_observer(observer.clone());
        let mut rows = Vec::new();
        runtime.block_on(preflight(&session, std::path::Path::new("<the reference vendor>")))?;
        rows.push(PlanRow {
            case: "preflight".into(),
            sent: session.spent(),
            at_most: None,
        });
        let in_share = |position: usize| crate::partition::Partition::in_share(opts.partition, position);
        for (_, case) in suite
            .cases
            .iter()
            .enumerate()
            .filter(|(position, c)| in_share(*position) && crate::harness::selected(&opts.trials, &c.id))
        {
            let before = session.spent();
            let ctx = crate::probe::Context {
                case_id: &case.id,
                session: &session,
                advisories: &suite.advisories,
            };
            runtime.block_on(crate::probe::run(&case.probe, ctx));
            let sent = session.spent() - before;
            let at_most = case.probe.ceiling(&dry).map(|ceiling| match ceiling {
                Ceiling::Like { requests, max_tokens } => scaled(sent, requests, max_tokens, &dry),
                Ceiling::More {
                    requests,
                    prompt_tokens,
                    max_tokens,
                } => {
                    let completion_tokens = max_tokens * requests;
                    let usd = dry
                        .prices
                        .as_ref()
                        .map_or(0.0, |c| c.cost(prompt_tokens, completion_tokens));
                    sent + Spent {
                        requests,
                        prompt_tokens,
                        completion_tokens,
                        usd,
                        counted_prompt_tokens: prompt_tokens,
                        ..Spent::default()
                    }
                }
            });
            rows.push(PlanRow {
                case: case.id.clone(),
                sent,
                at_most,
            });
        }
        observer.on(&RunEvent::Finished);
        Ok((rows, session.cited()))
    })();
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = runtime.block_on(sim.shutdown());
    let (rows, cited) = result?;
    let _ = print(out, &rows, &cited, &profile, &vendor_source, &opts);
    let _ = print_bounds(out, &suite, &profile, &rows);
    Ok(RunResult {
        exit_code: exit::SUCCESS,
        run_dir: None,
    })
}

/// The leak rates a buyer may ask a pass to rule out, priced.
const BOUNDS: &[f64] = &[0.5, 0.25, 0.1, 0.05, 0.01];

/// What each leak-rate bound of [`BOUNDS`] costs at the profile's context, for each
/// case the plan ran that spends exposures for one (`isolation.canary-residue`).
fn print_bounds(
    out: &mut dyn Write,
    suite: &crate::suite::Suite,
    profile: &VendorProfile,
    rows: &[PlanRow],
) -> std::io::Result<()> {
    use crate::probe::Probe;
    use crate::probe::isolation::{CanaryResidue, CanaryResidueParams, bound_prices};
    let planned = |id: &str| rows.iter().any(|r| r.case == id);
    for case in suite
        .cases
        .iter()
        .filter(|c| c.probe.kind() == CanaryResidue::KIND && planned(&c.id))
    {
        let Ok(p) = serde_json::from_value::<CanaryResidueParams>(case.probe.params()) else {
            continue;
        };
        writeln!(out)?;
        writeln!(
            out,
            "{}: the leak rate a pass rules out at the top rung ({:.0}% joint confidence; a faithful model, every answer read back), and what it costs beyond the ladder; this suite asks for {} (max_leak_rate)",
            case.id,
            100.0 * crate::outcome::LeakBound::CONFIDENCE,
            p.max_leak_rate
        )?;
        writeln!(
            out,
            "{:>10} {:>10} {:>8} {:>14} {:>8} {:>10} {:>7} {:>6} {:>6}",
            "leak rate", "exposures", "pairs", "prompt tokens", "contexts", "USD", "suite", "floor", "ratio"
        )?;
        let contexts = |tokens: u64| tokens as f64 / profile.context_window.max(1) as f64;
        // The whole plan, vendor counted, with the asked bound's pairs swapped for each
        // bound's own.
        let asked = bound_prices(&p, profile, &[p.max_leak_rate])
            .first()
            .map_or(0.0, |b| contexts(b.prompt_tokens));
        let planned = contexts(total(rows, false).counted_prompt_tokens) - asked;
        for b in bound_prices(&p, profile, BOUNDS) {
            let usd = profile.prices.as_ref().map_or("-".to_owned(), |c| {
                format!("{:.2}", c.cost(b.prompt_tokens, b.pairs * 2 * u64::from(p.max_tokens)))
            });
            let suite = planned + contexts(b.prompt_tokens);
            let floor = floor_contexts(b.exposures);
            writeln!(
                out,
                "{:>9.0}% {:>10} {:>8} {:>14} {:>8.2} {:>10} {:>7.2} {:>6.0} {:>6.2}{}",
                100.0 * b.rate,
                b.exposures,
                b.pairs,
                grouped(b.prompt_tokens),
                contexts(b.prompt_tokens),
                usd,
                suite,
                floor,
                suite / floor,
                if b.within {
                    String::new()
                } else {
                    format!("  (needs extra_exposures >= {})", b.pairs)
                }
            )?;
        }
        writeln!(
            out,
            "suite: the whole plan in contexts as the vendor counts them, asking for that bound; floor: what any run that states the bound must send, its exposures at the top, each a full context (a prompt refused past the context is billed as the vendor reports it: the reference vendor reports none); ratio: suite / floor"
        )?;
    }
    Ok(())
}

/// The fewest contexts a run that states a leak-rate bound needs: its `exposures` at
/// the top of the context, each a whole context read back (the statistics' part, which
/// no arrangement of the cases saves).
fn floor_contexts(exposures: u64) -> f64 {
    exposures as f64
}

/// `requests` requests like the average one `sent`, each with `max_tokens`.
fn scaled(sent: Spent, requests: u64, max_tokens: u64, profile: &VendorProfile) -> Spent {
    let per_request = sent.prompt_tokens.checked_div(sent.requests).unwrap_or(0);
    let prompt_tokens = per_request * requests;
    let completion_tokens = max_tokens * requests;
    let counted = sent.counted_prompt_tokens.checked_div(sent.requests).unwrap_or(0) * requests;
    Spent {
        requests,
        prompt_tokens,
        completion_tokens,
        usd: profile
            .prices
            .as_ref()
            .map_or(0.0, |p| p.cost(prompt_tokens, completion_tokens)),
        counted_prompt_tokens: counted,
        ..Spent::default()
    }
}

fn total(rows: &[PlanRow], ceiling: bool) -> Spent {
    rows.iter().fold(Spent::default(), |t, r| {
        t + if ceiling { r.at_most.unwrap_or(r.sent) } else { r.sent }
    })
}

/// `1234567` as `1,234,567`.
fn grouped(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    out
}

fn print(
    out: &mut dyn Write,
    rows: &[PlanRow],
    cited: &[Citation],
    profile: &VendorProfile,
    source: &str,
    opts: &RunOptions,
) -> std::io::Result<()> {
    let priced = profile.prices.is_some();
    let usd = |s: &Spent| if priced { format!("{:.2}", s.usd) } else { "-".into() };
    writeln!(out, "plan for {} ({source}): nothing was sent to it", profile.name)?;
    writeln!(
        out,
        "(each case was run against the reference vendor on 127.0.0.1 with this profile's model, context window of {} tokens and tokenizer)",
        grouped(profile.context_window)
    )?;
    writeln!(out)?;
    writeln!(
        out,
        "{:<34} {:>9} {:>14} {:>12} {:>10} {:>14} {:>8}",
        "case", "requests", "prompt tokens", "completion", "USD", "vendor counted", "contexts"
    )?;
    let contexts = |tokens: u64| tokens as f64 / profile.context_window.max(1) as f64;
    let line = |out: &mut dyn Write, name: &str, s: &Spent| {
        writeln!(
            out,
            "{:<34} {:>9} {:>14} {:>12} {:>10} {:>14} {:>8.2}",
            name,
            grouped(s.requests),
            grouped(s.prompt_tokens),
            grouped(s.completion_tokens),
            usd(s),
            grouped(s.counted_prompt_tokens),
            contexts(s.counted_prompt_tokens)
        )
    };
    for row in rows {
        line(out, &row.case, &row.sent)?;
        if let Some(max) = &row.at_most {
            line(out, "  at most (it stops when decided)", max)?;
        }
    }
    let expected = total(rows, false);
    line(out, "total", &expected)?;
    if rows.iter().any(|r| r.at_most.is_some()) {
        line(out, "total at most", &total(rows, true))?;
    }
    writeln!(out)?;
    writeln!(
        out,
        "prompt tokens are counted as --budget-prompt-tokens counts them ({}); completion tokens are every request's max_tokens, the most the vendor can bill",
        if profile.tokenizer.is_some() {
            "the profile's tokenizer"
        } else {
            "four bytes a token: the profile names no tokenizer"
        }
    )?;
    let mut shared: std::collections::BTreeMap<(&str, &str), usize> = Default::default();
    for c in cited {
        *shared.entry((&c.judge, &c.sender)).or_default() += c.lines.len();
    }
    for ((judge, sender), n) in shared {
        writeln!(
            out,
            "shared: {judge} judged {n} requests {sender} sent, counted in {sender} alone (a run draws its order: whichever of the two runs first sends them)"
        )?;
    }
    writeln!(
        out,
        "vendor counted: the prompt tokens the reference vendor reported (what a vendor bills; prompts are sized by its counts, so a prompt at the context is one context whatever the tokenizer), in contexts of {} tokens",
        grouped(profile.context_window)
    )?;
    match &profile.prices {
        Some(p) => writeln!(
            out,
            "USD at the profile's [prices]: ${} per million prompt tokens, ${} per million completion tokens",
            p.prompt_usd_per_million, p.completion_usd_per_million
        )?,
        None => writeln!(
            out,
            "no cost: the profile has no [prices] (add prompt_usd_per_million and completion_usd_per_million)"
        )?,
    }
    let b = opts.budget;
    let over: Vec<String> = [
        b.requests
            .filter(|&m| expected.requests > m)
            .map(|m| format!("--budget-requests {m}")),
        b.prompt_tokens
            .filter(|&m| expected.prompt_tokens > m)
            .map(|m| format!("--budget-prompt-tokens {m}")),
        b.usd.filter(|&m| expected.usd > m).map(|m| format!("--budget-usd {m}")),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !over.is_empty() {
        writeln!(
            out,
            "over budget: {}: the run will stop sending there and leave the cases it cuts short inconclusive",
            over.join(", ")
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_by_thousands() {
        assert_eq!(grouped(0), "0");
        assert_eq!(grouped(999), "999");
        assert_eq!(grouped(1000), "1,000");
        assert_eq!(grouped(1047576), "1,047,576");
    }

    #[test]
    fn the_filter_selects_cases_as_it_selects_trials() {
        let mut args = libtest_mimic::Arguments::from_iter(["tenantcheck", "context"]);
        assert!(crate::harness::selected(&args, "context.boundary"));
        assert!(!crate::harness::selected(&args, "isolation.canary-residue"));
        args.skip.push("boundary".into());
        assert!(!crate::harness::selected(&args, "context.boundary"));
        args = libtest_mimic::Arguments::from_iter(["tenantcheck", "--exact", "context"]);
        assert!(!crate::harness::selected(&args, "context.boundary"));
    }
}
