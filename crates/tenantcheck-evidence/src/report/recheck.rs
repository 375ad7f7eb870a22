//! Re-judging a report from its transcript and the revealed run secret alone.
//!
//! What the transcript determines without trusting the tool that wrote the report:
//!
//! - **verdicts**: a case fails exactly when it has findings of the vendor's
//!   misbehaviour, and the totals and the overall verdict add up from the cases;
//! - **leaks**: every canary the report says was issued is re-derived from the revealed
//!   secret, and every response in the transcript is re-scanned for canaries of another
//!   tenant. A case whose responses hold one must carry a `CrossTenantCanary` finding,
//!   a case without must carry none, and each reported leak must be in the response it
//!   names; a leak in a response outside any case (the credential check) is an error too;
//! - **refusals**: each answer of `errors.semantics` is re-judged with the probe's own
//!   rule, and the number of improper ones must equal its `FailureAsSuccess` findings;
//! - **usage**: the answers of `usage.consistency` are re-judged with the probe's own
//!   rule and the case's recorded parameters (and the profile's local tokenizer), and the
//!   mismatches must be as many as its `UsageMismatch` findings;
//! - **cited answers**: a `cite` line makes the exchanges it names (earlier lines,
//!   another case's) the citing case's too: their leaks and redirects must be in its
//!   findings, and its controls and node coverage may name them; the cases whose
//!   answers are re-judged from their own lines (refusals, usage) may cite none;
//! - **resumed runs**: after a `resume` line, the cases it names were run again, so
//!   their refusals and usage are re-judged on the answers after it alone; leaks are
//!   re-judged on every answer;
//! - **redirects**: a case whose answers hold a 3xx must carry a `Redirected`
//!   finding, and one without must carry none;
//! - **power**: every answer a case names as a positive control is one of its own,
//!   its echo is re-judged with the probes' rule (`judge::echoed`) against
//!   the canaries re-derived from the secret, every exposure is one of the controls
//!   (for `isolation.canary-residue`, another tenant's request came between it and
//!   the same tenant's previous control answer), the bounds and the power are computed
//!   again, and a pass must have the power it needs;
//! - **nodes**: a case's node coverage is derived again from the node each of its
//!   answers names where the profile's `[fleet]` says (a header or a body field), the exposures that count on
//!   each, the unseen chance and the exposures each node needs; a pass must have it;
//! - **rate limits**: the answers with status 429 are as many as the report's
//!   `rate_limits` says;
//! - **timing**: every time a timing level reports is the `first_answer_ms` of the
//!   exchange it names, sent by the level's attacker within the case; each level's bound
//!   is derived again from the control's pairs, the sequential tests are replayed over
//!   the pairs and must give the signed evidence and decision, stopping at the last
//!   pair; the levels found shared must be as many as the `SharedPrefixCache` findings;
//! - **roles**: the cases whose rule reads a set of their lines (context, extraction,
//!   response reuse, metadata, noisy neighbour) are judged again by that rule over the
//!   lines their `roles` lines name ([`super::rejudge`]).

use super::{Report, VerifyError};
use crate::canary::RunSecret;
use crate::exchange::Exchange;
use crate::judge::kind;
use crate::outcome::{FindingCode, LeakEvidence, Verdict};
use crate::transcript::Line;
use std::collections::{BTreeMap, BTreeSet};

/// What the re-check covered.
pub(super) struct Rechecked {
    pub canaries: usize,
    pub responses: usize,
    /// Exchanges a second case judged (each citation of each line).
    pub cited: usize,
    pub leaks: usize,
    pub refusals: usize,
    /// Usage mismatches re-judged, when the usage case ran.
    pub usage: Option<usize>,
    /// Timing levels replayed.
    pub timing_levels: usize,
    /// Cases whose power was re-derived.
    pub powers: usize,
    /// Cases re-judged by their own rule from their lines ([`super::rejudge`]).
    pub rejudged: usize,
}

pub(super) fn recheck(report: &Report, transcript: &[u8], secret: &RunSecret) -> Result<Rechecked, VerifyError> {
    let canaries: Vec<_> = report
        .canaries
        .iter()
        .flat_map(|i| (0..i.count).map(move |n| secret.canary(&i.owner, &i.case, n)))
        .collect();
    let marks: Vec<_> = report
        .vendor
        .profile
        .tenants
        .iter()
        .map(|t| secret.marks(&t.label))
        .collect();
    let labels: Vec<String> = report.vendor.profile.tenants.iter().map(|t| t.label.clone()).collect();
    // What each exchange line showed (other tenants' canaries, other requests' text,
    // redirects), read in transcript order into the ledger the run fed as it recorded
    // them: each answer is judged against the lines before it.
    let mut ledger = crate::ledger::Ledger::new(&labels, &marks);
    for c in canaries {
        ledger.know(c);
    }
    let mut refusals: BTreeMap<String, usize> = BTreeMap::new();
    // Streams of `stream.integrity` that break their API's grammar or do not finish.
    let mut malformed_streams: BTreeMap<String, usize> = BTreeMap::new();
    let mut usage_answers: Vec<(u64, String, Exchange)> = Vec::new();
    // seq -> (case, tenant, first_answer_ms), for the timing levels.
    let mut timed: BTreeMap<u64, (String, String, f64)> = BTreeMap::new();
    // The answers by seq, for the positive controls.
    let mut answers: BTreeMap<u64, Answer> = BTreeMap::new();
    let mut responses = 0;
    // What a case re-judges follows from the probe it ran, as the report records it,
    // not from its id: a suite may name its cases as it likes.
    let probe_of: BTreeMap<&str, &str> = report.cases.iter().map(|c| (c.id.as_str(), c.probe.as_str())).collect();
    let runs = |case: &str, probe: &str| probe_of.get(case) == Some(&probe);
    let mut cited = 0;
    // The lines of the cases whose rule reads a set of them, and the sets.
    let mut roles: BTreeMap<String, super::rejudge::Roles> = BTreeMap::new();
    let mut kept = super::rejudge::Kept::new();
    let rejudged_kind = |case: &str| probe_of.get(case).is_some_and(|p| super::rejudge::KINDS.contains(p));
    for (n, raw) in crate::transcript::raw_lines(transcript).enumerate() {
        // Fail closed: a line that does not read (an exchange that does not say whose
        // it is, say) cannot be judged.
        let line = Line::parse(raw).map_err(|e| bad("transcript", format!("line {}: {e}", n + 1)))?;
        let (seq, case, tenant, ex) = match line {
            Line::Exchange {
                seq,
                case,
                tenant,
                exchange,
            } => (seq, case, tenant, *exchange),
            Line::Resume { rerun } => {
                // The cases an interruption cut short ran again after this line: their
                // verdicts rest on the new answers. Leaks in the old ones still count.
                for case in &rerun {
                    refusals.remove(case);
                    roles.remove(case);
                    kept.retain(|_, line| line.cases.first() != Some(case));
                    if runs(case, kind::USAGE) {
                        usage_answers.clear();
                    }
                }
                continue;
            }
            Line::Cite { case, cites } => {
                if !probe_of.contains_key(case.as_str()) {
                    return Err(bad(
                        &case,
                        format!("line {} cites for a case the report does not hold", n + 1),
                    ));
                }
                if let Err(e) = ledger.cite(&case, &cites) {
                    return Err(bad(&case, format!("line {} cites {e}", n + 1)));
                }
                for seq in cites {
                    // Only the answers the probes' own rules re-judge from their lines
                    // cannot be cited: their count would come out short.
                    if runs(&case, kind::USAGE) || runs(&case, kind::ERRORS) {
                        return Err(bad(
                            &case,
                            format!("cites #{seq}, but its answers are re-judged from its own lines"),
                        ));
                    }
                    if let Some(line) = kept.get_mut(&seq)
                        && !line.cases.contains(&case)
                    {
                        line.cases.push(case.clone());
                    }
                    cited += 1;
                    if let Some(a) = answers.get_mut(&seq)
                        && !a.cases.contains(&case)
                    {
                        a.cases.push(case.clone());
                    }
                }
                continue;
            }
            Line::Roles { case, roles: named } => {
                if !rejudged_kind(&case) {
                    return Err(bad(
                        &case,
                        format!("line {} names roles for a case whose rule reads none", n + 1),
                    ));
                }
                // A case may name its lines in several `roles` lines, as it sends them.
                let of_case = roles.entry(case).or_default();
                for (role, seqs) in named {
                    of_case.entry(role).or_default().extend(seqs);
                }
                continue;
            }
            Line::Header { .. } | Line::Other => continue,
        };
        let tenant = tenant.as_str();
        responses += 1;
        timed.insert(seq, (case.clone(), tenant.to_owned(), ex.timings.first_answer_ms()));
        // The messages' length as the run counted it for node coverage: their texts
        // and a line break between each two.
        let texts: Vec<&str> = ex
            .request
            .body
            .as_ref()
            .and_then(|b| b["messages"].as_array())
            .into_iter()
            .flatten()
            .filter_map(|m| m["content"].as_str())
            .collect();
        let chars = texts.iter().map(|t| t.len()).sum::<usize>() + texts.len().saturating_sub(1);
        answers.insert(
            seq,
            Answer {
                cases: vec![case.clone()],
                tenant: tenant.to_owned(),
                line: raw,
                chars,
                content: ex.content.clone(),
                answered: ex.is_success(),
                node: report.vendor.profile.fleet.as_ref().and_then(|f| {
                    f.node_of(
                        &ex.headers,
                        ex.body.as_deref(),
                        ex.frames.iter().map(|fr| fr.data.as_str()),
                    )
                }),
            },
        );
        ledger.exchange(seq, &case, tenant, &ex);
        if runs(&case, kind::ERRORS) && crate::judge::improper_refusal(&ex).is_some() {
            *refusals.entry(case.clone()).or_default() += 1;
        }
        if runs(&case, kind::STREAM)
            && ex.is_success()
            && crate::judge::stream::asked(&ex)
            && !crate::judge::stream::malformed(report.vendor.profile.adapter, &ex).is_empty()
        {
            *malformed_streams.entry(case.clone()).or_default() += 1;
        }
        if rejudged_kind(&case) {
            let probe = probe_of.get(case.as_str()).copied().unwrap_or_default();
            kept.insert(
                seq,
                super::rejudge::KeptLine::of(&case, probe, tenant, ex, report.vendor.profile.tokenizer),
            );
        } else if runs(&case, kind::USAGE) {
            let prompt = ex
                .request
                .body
                .as_ref()
                .and_then(|b| b["messages"][0]["content"].as_str())
                .unwrap_or_default();
            usage_answers.push((seq, prompt.to_owned(), ex));
        }
    }
    let mut tallied = report.clone();
    tallied.tally();
    if (tallied.verdict, tallied.totals) != (report.verdict, report.totals) {
        return Err(bad(
            "the report",
            format!(
                "its cases add up to {} ({:?}), the report says {} ({:?})",
                tallied.verdict.label(),
                tallied.totals,
                report.verdict.label(),
                report.totals
            ),
        ));
    }
    let mut confirmed = 0;
    let mut usage_checked = None;
    let mut timing_levels = 0;
    // The positive controls below scan with the fold's own scanner.
    ledger.settle();
    let mut powers = 0;
    let mut rejudged = 0;
    // The answers that hold another tenant's canary.
    let leaked: BTreeSet<u64> = ledger
        .lines()
        .filter(|(_, s)| !s.canaries.is_empty())
        .map(|(seq, _)| seq)
        .collect();
    // What the ledger laid on each case, as (line, id): other tenants' canaries, and
    // other requests' text.
    let named = |found: &[LeakEvidence]| -> BTreeSet<(u64, String)> {
        found.iter().map(|l| (l.returned_in, l.canary_id.clone())).collect()
    };
    let leaks: BTreeMap<&str, BTreeSet<(u64, String)>> = ledger
        .cases()
        .filter(|(_, e)| !e.leaks.is_empty())
        .map(|(c, e)| (c, named(&e.leaks)))
        .collect();
    for (case, found) in &leaks {
        if !report.cases.iter().any(|c| &c.id == case) {
            let (seq, id) = found.iter().next().expect("non-empty");
            return Err(bad(
                case,
                format!("the transcript shows canary {id} of another tenant in #{seq}, outside any case"),
            ));
        }
    }
    for c in &report.cases {
        // Every vendor finding fails its case (a finding of tenantcheck's own bug makes
        // it inconclusive); a case without findings cannot have failed.
        let vendor_findings = c.outcome.findings.iter().any(|f| f.code != FindingCode::ToolBug);
        if vendor_findings != (c.outcome.verdict == Verdict::Fail) {
            return Err(bad(
                &c.id,
                format!(
                    "its verdict is {} with {} findings",
                    c.outcome.verdict.label(),
                    c.outcome.findings.len()
                ),
            ));
        }
        let evidence = ledger.evidence(&c.id);
        let says_redirected = c.outcome.findings.iter().any(|f| f.code == FindingCode::Redirected);
        let redirected = !evidence.redirects.is_empty();
        if says_redirected != redirected {
            return Err(bad(
                &c.id,
                match says_redirected {
                    true => "the report names a redirect and no answer in the transcript is one".into(),
                    false => "the transcript shows an answer that redirected, and the report no finding of it".into(),
                },
            ));
        }
        // A case's findings of one code whose evidence is of one kind: a canary's
        // fragment (`None`), or another request's text (`passage`, `text`).
        let reported = |code: FindingCode, kind: Option<&str>| -> Vec<&LeakEvidence> {
            c.outcome
                .findings
                .iter()
                .filter(|f| f.code == code)
                .filter_map(|f| f.leak.as_ref())
                .filter(|l| text_kind(l.fragment) == kind)
                .collect()
        };
        // The lines' hits of other requests' text, of one kind (by the id's middle part).
        let of_kind = |kind: &str| -> Option<BTreeSet<(u64, String)>> {
            let found: BTreeSet<_> = named(&evidence.misrouted)
                .into_iter()
                .filter(|(_, id)| id.split('/').nth(1) == Some(kind))
                .collect();
            (!found.is_empty()).then_some(found)
        };
        confirmed += held_to(
            &c.id,
            leaks.get(c.id.as_str()),
            reported(FindingCode::CrossTenantCanary, None),
            Held {
                missing: &|seq, id| {
                    format!("the transcript shows canary {id} of another tenant in #{seq}, and the report no leak")
                },
                absent: &|seq, id| format!("the report says #{seq} holds canary {id}, and it does not"),
            },
        )?;
        // Answers that held another request's text: the same rule, over the findings
        // of answers not bound to their request that name a passage.
        confirmed += held_to(
            &c.id,
            of_kind("text").as_ref(),
            reported(FindingCode::CrossTenantText, Some("text")),
            Held {
                missing: &|seq, id| {
                    format!(
                        "the transcript shows the answer #{seq} holding another tenant's request text ({id}), and the report no finding of it"
                    )
                },
                absent: &|seq, id| {
                    format!("the report says #{seq} holds another tenant's request text ({id}), and it does not")
                },
            },
        )?;
        for leak in reported(FindingCode::CrossTenantText, Some("text")) {
            let shown = ledger
                .line(leak.returned_in)
                .and_then(|l| l.passages.iter().find(|p| p.fragment == crate::canary::Fragment::Text));
            if let Some(hit) = shown
                && !says(leak, hit)
            {
                return Err(bad(
                    &c.id,
                    format!(
                        "the report says #{} holds {}, the transcript shows {}",
                        leak.returned_in,
                        leak.words.as_ref().map_or_else(|| "no match".into(), describe),
                        hit.words.as_ref().map_or_else(|| "no match".into(), describe)
                    ),
                ));
            }
        }
        confirmed += held_to(
            &c.id,
            of_kind("passage").as_ref(),
            reported(FindingCode::ResponseMisrouted, Some("passage")),
            Held {
                missing: &|seq, id| {
                    format!(
                        "the transcript shows the answer #{seq} holding another request's text ({id}), and the report no finding of it"
                    )
                },
                absent: &|seq, id| {
                    format!("the report says #{seq} holds another request's text ({id}), and it does not")
                },
            },
        )?;
        if c.probe == kind::USAGE && c.outcome.verdict != Verdict::Skipped {
            let p: crate::judge::usage::Rule =
                serde_json::from_value(c.params.clone()).map_err(|e| bad(&c.id, format!("its params: {e}")))?;
            let answered: Vec<_> = usage_answers.iter().map(|(s, p, e)| (*s, p.as_str(), e)).collect();
            let (judged, _) = crate::judge::usage::judge(&p, report.vendor.profile.tokenizer, &answered);
            let signed = c
                .outcome
                .findings
                .iter()
                .filter(|f| f.code == FindingCode::UsageMismatch)
                .count();
            if signed != judged.len() {
                return Err(bad(
                    &c.id,
                    format!(
                        "{} usage mismatches in the transcript, the report says {signed}",
                        judged.len()
                    ),
                ));
            }
            usage_checked = Some(judged.len());
        }
        if let Some(power) = &c.outcome.power {
            if c.params.get("min_power").and_then(|m| m.as_f64()) != Some(power.min_power) {
                return Err(bad(
                    &c.id,
                    format!("its power needs {}, its parameters say otherwise", power.min_power),
                ));
            }
            recheck_power(report, secret, c, power, &answers, &ledger)?;
            powers += 1;
        }
        rejudged += usize::from(super::rejudge::case(
            report,
            c,
            roles.get(&c.id),
            &kept,
            &leaked,
            secret,
        )?);
        if let Some(nodes) = &c.outcome.nodes {
            recheck_nodes(report, c, nodes, &answers)?;
        }
        if !c.outcome.timing.is_empty() {
            let p: crate::judge::timing::Rule =
                serde_json::from_value(c.params.clone()).map_err(|e| bad(&c.id, format!("its params: {e}")))?;
            for level in &c.outcome.timing {
                for pair in &level.pairs {
                    for (seq, ms) in [(pair.hit_seq, pair.hit_ms), (pair.miss_seq, pair.miss_ms)] {
                        let named = timed.get(&seq);
                        if named != Some(&(c.id.clone(), level.attacker.clone(), ms)) {
                            return Err(bad(
                                &c.id,
                                format!(
                                    "level {:?} names #{seq} as tenant {}'s answer in {ms} ms; the transcript has {named:?}",
                                    level.level, level.attacker
                                ),
                            ));
                        }
                    }
                }
                timing_levels += 1;
            }
            crate::judge::timing::replay(&p, &c.outcome.timing).map_err(|problem| bad(&c.id, problem))?;
            let shared = c
                .outcome
                .timing
                .iter()
                .filter(|l| l.decision == crate::outcome::CacheDecision::Shared)
                .count();
            let signed = c
                .outcome
                .findings
                .iter()
                .filter(|f| f.code == FindingCode::SharedPrefixCache)
                .count();
            if shared != signed {
                return Err(bad(
                    &c.id,
                    format!("{shared} levels are shared by their pairs, the report has {signed} findings"),
                ));
            }
        }
        // Findings one per judged answer: as many as the transcript shows.
        let per_answer = match c.probe.as_str() {
            kind::STREAM => Some((
                FindingCode::StreamMalformed,
                &malformed_streams,
                "streams in the transcript are malformed or unfinished",
            )),
            kind::ERRORS => Some((
                FindingCode::FailureAsSuccess,
                &refusals,
                "answers in the transcript are improper refusals",
            )),
            _ => None,
        };
        if let Some((code, judged, what)) = per_answer {
            let signed = c.outcome.findings.iter().filter(|f| f.code == code).count();
            let judged = judged.get(&c.id).copied().unwrap_or(0);
            if signed != judged {
                return Err(bad(&c.id, format!("{judged} {what}, the report says {signed}")));
            }
        }
    }
    let signed = report.rate_limits.map_or(0, |r| r.answers);
    let rate_limited = ledger.rate_limited();
    if signed != rate_limited {
        return Err(bad(
            "rate_limits",
            format!("the transcript holds {rate_limited} answers with status 429, the report says {signed}"),
        ));
    }
    Ok(Rechecked {
        canaries: ledger.issued().len(),
        responses,
        cited,
        leaks: confirmed,
        refusals: refusals.values().sum(),
        usage: usage_checked,
        timing_levels,
        powers,
        rejudged,
    })
}

/// Whether a `text` finding says of its stretch what the transcript shows (`hit`, as
/// the ledger found it): the request it came from, the span, the field, words,
/// shingles, distinctive words and chance of a coincidence.
fn says(leak: &LeakEvidence, hit: &LeakEvidence) -> bool {
    leak.seeded_in == hit.seeded_in && leak.matched == hit.matched && leak.words == hit.words
}

/// A stretch's match, in words, for a refusal.
fn describe(w: &crate::outcome::WordMatch) -> String {
    format!(
        "{} words and {} shingles in {} (its words {}; {})",
        w.words,
        w.shingles,
        w.field,
        w.distinctive.join(", "),
        crate::outcome::coincidence(w.chance)
    )
}

/// The kind of another request's text a leak's fragment is, as its id names it
/// (`owner/KIND/seq`); none for a canary's fragment.
fn text_kind(fragment: crate::canary::Fragment) -> Option<&'static str> {
    use crate::canary::Fragment;
    match fragment {
        Fragment::Passage => Some("passage"),
        Fragment::Text => Some("text"),
        _ => None,
    }
}

/// What [`held_to`] says when the report and the transcript disagree.
struct Held<'a> {
    /// The transcript holds (line, id) and the report nothing of the kind.
    missing: &'a dyn Fn(u64, &str) -> String,
    /// The report names (line, id) and the transcript does not hold it.
    absent: &'a dyn Fn(u64, &str) -> String,
}

/// Holds a case's reported findings of one kind (`reported`, each naming a line and an
/// id) to what the transcript shows of that kind for it (`found`): some found, some
/// reported, and every one reported found (a refusal names the first line that does
/// not hold what the report says). Returns how many were confirmed.
fn held_to(
    case: &str,
    found: Option<&BTreeSet<(u64, String)>>,
    reported: Vec<&LeakEvidence>,
    say: Held<'_>,
) -> Result<usize, VerifyError> {
    if let (Some(found), true) = (found, reported.is_empty()) {
        let (seq, id) = found.iter().next().expect("non-empty");
        return Err(bad(case, (say.missing)(*seq, id)));
    }
    for leak in &reported {
        if !found.is_some_and(|f| f.contains(&(leak.returned_in, leak.canary_id.clone()))) {
            return Err(bad(case, (say.absent)(leak.returned_in, &leak.canary_id)));
        }
    }
    Ok(reported.len())
}

/// One answer of the transcript, as a positive control sees it.
struct Answer<'t> {
    /// The case that sent it, then every case that cited it.
    cases: Vec<String>,
    tenant: String,
    /// Its transcript line as written, prompts by reference: what the request carried
    /// is read from it again when a control asks ([`Answer::carried`]), so that the
    /// re-check never holds every prompt of a run (at a million tokens of context, some
    /// hundred MB of text) at once.
    line: &'t [u8],
    /// Its messages' characters, with a line break between each two.
    chars: usize,
    content: String,
    /// Whether the vendor answered 2xx.
    answered: bool,
    /// The node it names, where the profile's `[fleet]` says where to read it.
    node: Option<String>,
}

impl Answer<'_> {
    /// What the request carried ([`crate::exchange::RecordedRequest::text`]), parsed
    /// again from its line. The line parsed when the transcript was read, so it parses
    /// again; a line that did not would count as carrying nothing, which makes the
    /// controls find more foreign content, never less.
    fn carried(&self) -> String {
        match Line::parse(self.line) {
            Ok(Line::Exchange { exchange, .. }) => exchange.request.text(),
            _ => String::new(),
        }
    }

    /// Whether `case` sent or cited it.
    fn judged_by(&self, case: &str) -> bool {
        self.cases.iter().any(|c| c == case)
    }
}

/// Re-derives a case's node coverage from the transcript: the node each of its
/// answers names, the exposures that count on each (the top band's, where the request
/// served just before on that node was another tenant's and at most half as long), the
/// unseen chance, the
/// exposures each node needs, and that a pass had the coverage it needs.
fn recheck_nodes(
    report: &Report,
    c: &super::CaseReport,
    nodes: &crate::nodes::NodeCoverage,
    answers: &BTreeMap<u64, Answer<'_>>,
) -> Result<(), VerifyError> {
    let fleet = report
        .vendor
        .profile
        .fleet
        .as_ref()
        .ok_or_else(|| bad(&c.id, "reports node coverage, but the profile has no [fleet]".into()))?;
    if nodes.signal != fleet.signal() || nodes.declared != fleet.nodes || nodes.max_unseen != fleet.max_unseen {
        return Err(bad(
            &c.id,
            "its node coverage does not follow the profile's [fleet]".into(),
        ));
    }
    // The long prompts and what each node needs: the top band's exposures and the
    // power's rule for the isolation case; the prompts at the top length, one each,
    // for the boundary case (a node that mishandles that length does so every time).
    let (exposed, needed): (BTreeSet<u64>, u32) = if c.probe == kind::CONTEXT_BOUNDARY {
        let top = c.outcome.coverage.target_prompt_tokens;
        let context = report.vendor.profile.context_window;
        let exposed = c
            .outcome
            .sweep
            .iter()
            .filter(|p| crate::nodes::at_the_top(p.tokens, top, context))
            .map(|p| p.seq)
            .collect();
        (exposed, 1)
    } else {
        let power = c
            .outcome
            .power
            .as_ref()
            .ok_or_else(|| bad(&c.id, "reports node coverage without the power it rests on".into()))?;
        let top = power.bands.last();
        (
            top.map(|b| b.exposed.iter().copied().collect()).unwrap_or_default(),
            crate::nodes::needed(top.map_or(0.0, |b| b.echo_low), power.min_power),
        )
    };
    let served: Vec<(u64, String, Option<String>, usize)> = answers
        .iter()
        .filter(|(_, a)| a.judged_by(&c.id) && a.answered)
        .map(|(seq, a)| (*seq, a.tenant.clone(), a.node.clone(), a.chars))
        .collect();
    let again = crate::nodes::NodeCoverage::of(fleet, &served, &exposed, needed);
    if &again != nodes {
        return Err(bad(
            &c.id,
            format!(
                "its node coverage is not what the transcript shows: the transcript gives {}, the report says {}",
                again.describe(),
                nodes.describe()
            ),
        ));
    }
    if c.outcome.verdict == Verdict::Pass && !again.suffices() {
        return Err(bad(
            &c.id,
            format!("passed without the node coverage it needs: {}", again.describe()),
        ));
    }
    Ok(())
}

/// Re-derives a case's positive control and power from the transcript.
fn recheck_power(
    report: &Report,
    secret: &RunSecret,
    c: &super::CaseReport,
    power: &crate::outcome::Power,
    answers: &BTreeMap<u64, Answer<'_>>,
    ledger: &crate::ledger::Ledger,
) -> Result<(), VerifyError> {
    // Whether an answer held content no prompt of the run and no canary accounts for.
    let foreign = |a: &Answer| {
        !crate::judge::foreign(&a.carried(), &a.content, |item| {
            !ledger.scan_settled(item, "\u{0}").is_empty()
        })
        .is_empty()
    };
    // Only isolation looks for foreign content; elsewhere every list must be empty.
    let looks = c.probe == kind::CANARY_RESIDUE;
    let same_foreign = |what: String, listed: &[u64], seqs: &[u64]| -> Result<(), VerifyError> {
        let again: Vec<u64> = seqs
            .iter()
            .copied()
            .filter(|s| looks && answers.get(s).is_some_and(foreign))
            .collect();
        if again != listed {
            return Err(bad(
                &c.id,
                format!("{what}: the transcript shows foreign content in {again:?}, the report says {listed:?}"),
            ));
        }
        Ok(())
    };
    use crate::outcome::{EchoBand, Power};
    let (case, outcome) = (c.id.as_str(), &c.outcome);
    // Isolation's exposures are probers' answers, each right after a seeder's request.
    let after_another = c.probe == kind::CANARY_RESIDUE;
    // Each tenant's canaries in this case, derived once.
    let mut owned: BTreeMap<String, Vec<crate::canary::Canary>> = BTreeMap::new();
    for i in report.canaries.iter().filter(|i| i.case == case) {
        owned
            .entry(i.owner.clone())
            .or_default()
            .extend((0..i.count).map(|n| secret.canary(&i.owner, &i.case, n)));
    }
    // Each tenant's judge of its own records read back, built once.
    let echoes: BTreeMap<&str, crate::judge::Echo> = owned
        .iter()
        .map(|(tenant, own)| (tenant.as_str(), crate::judge::Echo::new(own)))
        .collect();
    let echoed_in = |a: &Answer| {
        echoes
            .get(a.tenant.as_str())
            .is_some_and(|e| e.echoed(&a.carried(), &a.content))
    };
    let in_case: Vec<(&u64, &Answer)> = answers.iter().filter(|(_, a)| a.judged_by(case)).collect();
    let mut bands = Vec::new();
    for band in &power.bands {
        let mut echoed = Vec::new();
        for seq in &band.answers {
            let Some(a) = answers.get(seq) else {
                return Err(bad(
                    case,
                    format!("its control names #{seq}, which the transcript does not hold"),
                ));
            };
            if !a.judged_by(case) {
                return Err(bad(
                    case,
                    format!("its control names #{seq}, an answer of {}", a.cases[0]),
                ));
            }
            if echoed_in(a) {
                echoed.push(*seq);
            }
        }
        if echoed != band.echoed {
            return Err(bad(
                case,
                format!(
                    "at {} tokens the transcript shows own records read back in {:?}, the report says {:?}",
                    band.tokens, echoed, band.echoed
                ),
            ));
        }
        for seq in &band.exposed {
            let Some(Answer { tenant, .. }) = answers.get(seq).filter(|_| band.answers.contains(seq)) else {
                return Err(bad(
                    case,
                    format!("#{seq} is named an exposure, but it is not one of the control answers"),
                ));
            };
            // Another tenant's request since this tenant's previous control answer
            // (between them may stand this tenant's own refused tries).
            let previous = power
                .bands
                .iter()
                .flat_map(|b| &b.answers)
                .filter(|&&s| s < *seq && answers.get(&s).is_some_and(|a| &a.tenant == tenant))
                .max()
                .copied()
                .unwrap_or(0);
            let another = in_case
                .iter()
                .any(|(s, a)| **s > previous && *s < seq && &a.tenant != tenant);
            if after_another && !another {
                return Err(bad(
                    case,
                    format!(
                        "#{seq} is named an exposure, but no other tenant's request came between it and the tenant's previous answer"
                    ),
                ));
            }
        }
        same_foreign(format!("at {} tokens", band.tokens), &band.foreign, &band.answers)?;
        bands.push(EchoBand {
            foreign: band.foreign.clone(),
            ..EchoBand::new(band.tokens, band.answers.clone(), echoed, band.exposed.clone())
        });
    }
    // The form trials: each echo re-judged, and the form they choose.
    let mut trials = Vec::new();
    for t in &power.trials {
        let mut echoed = Vec::new();
        for seq in &t.answers {
            let a = answers.get(seq).filter(|a| a.judged_by(case)).ok_or_else(|| {
                bad(
                    case,
                    format!(
                        "its {} trial names #{seq}, which is no answer of this case",
                        t.form.noun()
                    ),
                )
            })?;
            if echoed_in(a) {
                echoed.push(*seq);
            }
        }
        if echoed != t.echoed {
            return Err(bad(
                case,
                format!(
                    "its {} trial read back {:?} by the transcript, the report says {:?}",
                    t.form.noun(),
                    echoed,
                    t.echoed
                ),
            ));
        }
        same_foreign(format!("its {} trial", t.form.noun()), &t.foreign, &t.answers)?;
        let mut trial = crate::outcome::FormTrial::new(t.form, t.answers.clone(), echoed);
        trial.foreign = t.foreign.clone();
        trials.push(trial);
    }
    let mut again = Power::of(power.control.clone(), bands, power.min_power);
    if !trials.is_empty() {
        again = again.with_trials(trials);
    }
    if again.form != power.form {
        return Err(bad(
            case,
            format!("it carried {:?}, but its trials choose {:?}", power.form, again.form),
        ));
    }
    // Figures re-computed; floats compared within what a JSON round trip may change.
    let close = |a: f64, b: f64| (a - b).abs() < 1e-9;
    let same = close(again.power, power.power)
        && again
            .bands
            .iter()
            .zip(&power.bands)
            .all(|(a, b)| close(a.echo_low, b.echo_low) && a.tokens == b.tokens);
    if !same {
        return Err(bad(
            case,
            format!(
                "its power is {} by the transcript, the report says {}",
                again.power, power.power
            ),
        ));
    }
    // The leak rate ruled out, counted from the pools the profile declares; a failed
    // case rules none out.
    let pools = report
        .vendor
        .profile
        .declared
        .iter()
        .flat_map(|d| &d.nodes)
        .map(|n| n.kv_pool_tokens);
    let again = again.counting_above(pools);
    match (&power.leak_rate, &again.leak_rate) {
        (Some(_), _) if outcome.verdict == Verdict::Fail => {
            return Err(bad(case, "it failed, yet states a leak rate it rules out".into()));
        }
        (Some(said), Some(derived))
            if said.from_tokens != derived.from_tokens
                || said.exposures != derived.exposures
                || (said.answers, said.echoed) != (derived.answers, derived.echoed)
                || !close(said.rate, derived.rate)
                || !close(said.sensitivity, derived.sensitivity)
                || !close(said.confidence, derived.confidence) =>
        {
            return Err(bad(
                case,
                format!(
                    "it states that {}, but by the transcript and the declared pools {}",
                    said.describe(),
                    derived.describe()
                ),
            ));
        }
        _ => {}
    }
    let says_foreign = outcome.findings.iter().any(|f| f.code == FindingCode::ForeignContent);
    match again.foreign_rise() {
        Some(rise) if !says_foreign || outcome.verdict != Verdict::Fail => {
            return Err(bad(
                case,
                format!(
                    "the transcript shows a rise in foreign content (long {}/{}, short {}/{}, p {:.1e}) the report does not fail on",
                    rise.long.0, rise.long.1, rise.short.0, rise.short.1, rise.p
                ),
            ));
        }
        None if says_foreign => {
            return Err(bad(
                case,
                "it names foreign content, but the transcript shows no significant rise".into(),
            ));
        }
        Some(_) => {
            let canaries: Vec<crate::canary::Canary> = owned.into_values().flatten().collect();
            same_named(case, outcome, &canaries, power, answers, ledger)?;
        }
        None => {}
    }
    if outcome.verdict == Verdict::Pass && !again.suffices() {
        return Err(bad(
            case,
            format!(
                "it passed with power {} below the {} it needs",
                again.power, again.min_power
            ),
        ));
    }
    Ok(())
}

/// Whether a case failed on a rise in foreign content says, of the answers it
/// itemises, the ones the transcript shows to be a tenant's records by the holder's
/// name, and whose ([`crate::judge::foreign_findings`], the rule the probe applied).
fn same_named(
    case: &str,
    outcome: &crate::outcome::Outcome,
    canaries: &[crate::canary::Canary],
    power: &crate::outcome::Power,
    answers: &BTreeMap<u64, Answer<'_>>,
    ledger: &crate::ledger::Ledger,
) -> Result<(), VerifyError> {
    let long: BTreeSet<u64> = power
        .bands
        .iter()
        .skip(1)
        .flat_map(|b| b.foreign.iter().copied())
        .collect();
    let found = long.iter().filter_map(|seq| {
        let a = answers.get(seq)?;
        let items = crate::judge::foreign(&a.carried(), &a.content, |item| {
            !ledger.scan_settled(item, "\u{0}").is_empty()
        });
        Some((*seq, a.tenant.as_str(), a.content.as_str(), items))
    });
    let again = crate::judge::foreign_findings(canaries, found);
    let listed: Vec<&crate::outcome::Finding> = outcome
        .findings
        .iter()
        .filter(|f| f.code == FindingCode::ForeignContent)
        .collect();
    if listed.len() != again.len() {
        return Err(bad(
            case,
            format!(
                "the transcript shows {} answers of foreign content to itemise, the report {}",
                again.len(),
                listed.len()
            ),
        ));
    }
    // Whose record each itemised answer is; the canary the report names must bear the
    // name (of several of the owner's that do, the transcript does not say which).
    let named_again: BTreeMap<u64, &crate::judge::Named> =
        again.iter().filter_map(|f| Some((f.seq, f.named.as_ref()?))).collect();
    let named_said: BTreeMap<u64, &LeakEvidence> = listed
        .iter()
        .filter_map(|f| f.leak.as_ref())
        .map(|l| (l.returned_in, l))
        .collect();
    let agree = named_again.len() == named_said.len()
        && named_again.iter().all(|(seq, n)| {
            named_said
                .get(seq)
                .is_some_and(|l| l.owner == n.canary.owner && n.candidates.iter().any(|c| c.id == l.canary_id))
        });
    if !agree {
        let shown = |m: Vec<(u64, &str)>| format!("{m:?}");
        return Err(bad(
            case,
            format!(
                "by the holders' names the transcript shows foreign content to be the records {}, the report says {}",
                shown(named_again.iter().map(|(s, n)| (*s, n.canary.id.as_str())).collect()),
                shown(named_said.iter().map(|(s, l)| (*s, l.canary_id.as_str())).collect())
            ),
        ));
    }
    Ok(())
}

pub(super) fn bad(case: &str, problem: String) -> VerifyError {
    VerifyError::Recheck {
        case: case.to_owned(),
        problem,
    }
}
