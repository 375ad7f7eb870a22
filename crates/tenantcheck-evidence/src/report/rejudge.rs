//! Re-judging the cases whose rule reads a set of their exchanges, named by the case's
//! `roles` line (or, where the lines say what they are, all of its exchanges): the
//! rule the run applied ([`crate::judge`]) is applied again to the same lines, and the
//! report must carry as many findings of each code, and not pass where the lines do
//! not decide the case.

use super::CaseReport as CaseResult;
use super::recheck::bad;
use super::{Report, VerifyError};
use crate::canary::{Needle, RunSecret};
use crate::exchange::Exchange;
use crate::judge::kind;
use crate::outcome::{FindingCode, Verdict};
use std::collections::{BTreeMap, BTreeSet};

/// The probe kinds re-judged here.
pub(super) const KINDS: [&str; 6] = [
    kind::CONTEXT_BOUNDARY,
    kind::CONTEXT_RECALL,
    kind::NOISY_NEIGHBOUR,
    kind::METADATA,
    kind::RESPONSE_REUSE,
    kind::PREFIX_EXTRACTION,
];

/// One case's roles: each role's lines, in the order the case sent them.
pub(super) type Roles = BTreeMap<String, Vec<u64>>;

/// Exchange lines kept for the cases re-judged here, by seq.
pub(super) type Kept = BTreeMap<u64, KeptLine>;

/// One exchange line kept for a re-judge.
pub(super) struct KeptLine {
    /// The cases that judge it: the one that sent it, and any that cited it.
    pub cases: Vec<String>,
    /// The tenant it was sent as.
    pub tenant: String,
    /// What came back (the request's body dropped).
    pub exchange: Exchange,
    /// The facts its request stated, for the context cases ([`Needle::stated_in`]).
    pub facts: Vec<Needle>,
    /// Its prompt's and completion's tokens, for the boundary's prompts that state no
    /// fact (the one meant to run generation past the context among them), where its
    /// usage or the profile's tokenizer counts them.
    pub overrun: Option<crate::judge::context::Overrun>,
    /// The SHA-256 of the text its request carried, for the response-reuse case's
    /// timed pairs (a copy must carry the text of the request it copies).
    pub prompt: Option<String>,
}

impl KeptLine {
    /// Keeps `exchange`, sent by `case` as `tenant`, counting with `tokenizer`.
    pub fn of(
        case: &str,
        probe: &str,
        tenant: &str,
        mut exchange: Exchange,
        tokenizer: Option<crate::profile::LocalTokenizer>,
    ) -> KeptLine {
        let facts = match probe {
            kind::CONTEXT_BOUNDARY | kind::CONTEXT_RECALL => Needle::stated_in(&exchange.request.text()),
            _ => Vec::new(),
        };
        let overrun = (probe == kind::CONTEXT_BOUNDARY && facts.is_empty())
            .then(|| crate::judge::context::Overrun::counted(&exchange, tokenizer))
            .flatten();
        let prompt = (probe == kind::RESPONSE_REUSE).then(|| crate::sha256_hex(exchange.request.text().as_bytes()));
        // The request's body may be a million tokens; the facts are all a rule reads of it.
        exchange.request.body = None;
        KeptLine {
            cases: vec![case.to_owned()],
            tenant: tenant.to_owned(),
            exchange,
            facts,
            overrun,
            prompt,
        }
    }
}

/// What the lines give: the findings of each code, and whether they decide the case.
struct Judgement {
    counts: Vec<(FindingCode, usize)>,
    decided: bool,
}

/// Re-judges case `c` when its kind is one of [`KINDS`]; whether it was.
pub(super) fn case(
    report: &Report,
    c: &CaseResult,
    roles: Option<&Roles>,
    kept: &Kept,
    leaked: &BTreeSet<u64>,
    secret: &RunSecret,
) -> Result<bool, VerifyError> {
    if !KINDS.contains(&c.probe.as_str()) || c.outcome.verdict == Verdict::Skipped {
        return Ok(false);
    }
    let judgement = match c.probe.as_str() {
        kind::NOISY_NEIGHBOUR => neighbour(report, c, roles, kept)?,
        kind::METADATA => metadata(report, c, roles, kept, secret)?,
        kind::RESPONSE_REUSE => reuse(c, roles, kept)?,
        kind::CONTEXT_BOUNDARY => boundary(report, c, roles, kept, leaked)?,
        kind::CONTEXT_RECALL => recall(c, roles, kept)?,
        kind::PREFIX_EXTRACTION => extraction(c, roles, kept, secret)?,
        other => unreachable!("{other} is in KINDS without a re-judge"),
    };
    for (code, judged) in judgement.counts {
        let signed = c.outcome.findings.iter().filter(|f| f.code == code).count();
        if signed != judged {
            return Err(bad(
                &c.id,
                format!("the transcript's lines give {judged} findings of {code:?}, the report says {signed}"),
            ));
        }
    }
    if !judgement.decided && c.outcome.verdict == Verdict::Pass {
        return Err(bad(
            &c.id,
            "the report says PASS, and the transcript's lines do not decide the case".to_owned(),
        ));
    }
    Ok(true)
}

/// The lines a role names, each an exchange the case sent or cited.
fn kept_lines<'k>(
    c: &CaseResult,
    roles: &Roles,
    role: &str,
    kept: &'k Kept,
) -> Result<Vec<(u64, &'k KeptLine)>, VerifyError> {
    roles
        .get(role)
        .into_iter()
        .flatten()
        .map(|seq| match kept.get(seq) {
            Some(line) if line.cases.contains(&c.id) => Ok((*seq, line)),
            _ => Err(bad(
                &c.id,
                format!("its roles name #{seq} as {role:?}, which is no exchange of the case"),
            )),
        })
        .collect()
}

/// The exchanges a role names ([`kept_lines`]).
fn lines<'k>(
    c: &CaseResult,
    roles: &Roles,
    role: &str,
    kept: &'k Kept,
) -> Result<Vec<(u64, &'k Exchange)>, VerifyError> {
    Ok(kept_lines(c, roles, role, kept)?
        .into_iter()
        .map(|(seq, line)| (seq, &line.exchange))
        .collect())
}

fn neighbour(report: &Report, c: &CaseResult, roles: Option<&Roles>, kept: &Kept) -> Result<Judgement, VerifyError> {
    use crate::judge::neighbour::{Rule, judge};
    let Some(roles) = roles else {
        // The case stopped before it judged (an interruption, the vendor's refusals).
        return Ok(Judgement {
            counts: vec![(FindingCode::NoisyNeighbour, 0)],
            decided: false,
        });
    };
    let rule: Rule = serde_json::from_value(c.params.clone()).map_err(|e| bad(&c.id, format!("its params: {e}")))?;
    let tenants = &report.vendor.profile.tenants;
    let same_org = match tenants.as_slice() {
        [loud, quiet, ..] => loud.org() == quiet.org(),
        _ => return Err(bad(&c.id, "the profile names fewer than two tenants".to_owned())),
    };
    let [alone, load, under] = [0, 1, 2].map(|i| lines(c, roles, crate::judge::neighbour::ROLES[i], kept));
    let judged = judge(&rule, same_org, &alone?, &load?, &under?);
    Ok(Judgement {
        counts: vec![(FindingCode::NoisyNeighbour, judged.unfair.len())],
        decided: judged.decided(),
    })
}

/// The endpoints of `metadata.cross-tenant`'s parameters, as much as its rule reads.
#[derive(serde::Deserialize)]
struct Endpoints {
    endpoints: Vec<EndpointParams>,
}

#[derive(serde::Deserialize)]
struct EndpointParams {
    method: String,
    path: String,
    #[serde(default)]
    changes_state: bool,
}

/// Each endpoint's answers to another key than the owner's (the profile's first
/// tenant), or none, judged again; the case is decided when the owner's last request
/// was answered and some endpoint answered at all. Whether that request was still
/// running while the endpoints were asked rests on the run's clock, and is not judged
/// again.
fn metadata(
    report: &Report,
    c: &CaseResult,
    roles: Option<&Roles>,
    kept: &Kept,
    secret: &RunSecret,
) -> Result<Judgement, VerifyError> {
    use crate::judge::metadata::{Found, drawn, endpoint_of, found};
    let codes = [FindingCode::StateChangeAccepted, FindingCode::MetadataExposed];
    let Some(roles) = roles else {
        return Ok(Judgement {
            counts: codes.map(|code| (code, 0)).to_vec(),
            decided: false,
        });
    };
    let params: Endpoints =
        serde_json::from_value(c.params.clone()).map_err(|e| bad(&c.id, format!("its params: {e}")))?;
    let owner = report
        .vendor
        .profile
        .tenants
        .first()
        .map(|t| t.label.as_str())
        .unwrap_or_default();
    let seed = drawn(secret, &c.id).seed;
    let (mut changed, mut exposed) = (0, 0);
    let asked = lines(c, roles, "asked", kept)?;
    for (seq, ex) in &asked {
        let tenant = kept.get(seq).map(|line| line.tenant.as_str());
        if tenant == Some(owner) {
            continue;
        }
        let Some(e) = endpoint_of(&params.endpoints, |e| (e.method.as_str(), e.path.as_str()), ex) else {
            return Err(bad(&c.id, format!("#{seq} asked no endpoint of the case's list")));
        };
        match found(e.changes_state, ex, seed) {
            Some(Found::StateChanged) => changed += 1,
            Some(Found::Exposed { .. }) => exposed += 1,
            None => {}
        }
    }
    let victims = lines(c, roles, "victim", kept)?;
    // Every round asks the same endpoints with the same keys: the last round's are the
    // last of the lines. Where one of them answered another key or none, the request
    // must have run while they were asked, by the transcript's order.
    if victims.is_empty() || asked.len() % victims.len() != 0 {
        return Err(bad(
            &c.id,
            format!(
                "its roles name {} endpoint answers over {} rounds",
                asked.len(),
                victims.len()
            ),
        ));
    }
    let last_round = &asked[asked.len() - asked.len() / victims.len()..];
    let open = last_round.iter().any(|(seq, ex)| {
        kept.get(seq).map(|line| line.tenant.as_str()) != Some(owner)
            && ex.status.is_some_and(|s| (200..300).contains(&s))
    });
    let ran = victims.last().is_some_and(|(victim, _)| {
        crate::judge::metadata::in_flight(*victim, &last_round.iter().map(|(seq, _)| *seq).collect::<Vec<_>>())
    });
    let decided = victims.last().is_some_and(|(_, ex)| ex.is_success())
        && asked.iter().any(|(_, ex)| ex.status.is_some())
        && (ran || !open);
    Ok(Judgement {
        counts: vec![(codes[0], changed), (codes[1], exposed)],
        decided: decided || changed + exposed > 0,
    })
}

/// The response-reuse case's parameters, as much as its rule reads (a report from
/// before the timed pairs has none: the defaults, and no pairs to judge).
#[derive(serde::Deserialize)]
struct ReuseParams {
    #[serde(default = "default_reuse_alpha")]
    timing_alpha: f64,
    #[serde(default = "default_reuse_equivalence")]
    equivalence: f64,
}

fn default_reuse_alpha() -> f64 {
    crate::judge::reuse::DEFAULT_TIMING_ALPHA
}

fn default_reuse_equivalence() -> f64 {
    crate::judge::reuse::DEFAULT_EQUIVALENCE
}

/// The response-reuse case's timed pairs as the transcript gives them, each the copy's
/// and the miss arm's answer time, up to the first pair not all answered; refused
/// where the roles do not make pairs (a copy that does not carry the text of a's
/// request, a miss arm not b's own prompt again, the arms sent as the wrong tenants).
fn reuse_pairs(c: &CaseResult, roles: &Roles, kept: &Kept) -> Result<Vec<(f64, f64)>, VerifyError> {
    let [seeded, primed, hit, miss] = ["seeded", "primed", "hit", "miss"].map(|r| kept_lines(c, roles, r, kept));
    let (seeded, primed, hit, miss) = (seeded?, primed?, hit?, miss?);
    if [primed.len(), hit.len(), miss.len()] != [seeded.len(); 3] {
        return Err(bad(
            &c.id,
            format!(
                "its roles name {} seeded, {} primed, {} hit and {} miss lines: timed pairs need as many of each",
                seeded.len(),
                primed.len(),
                hit.len(),
                miss.len()
            ),
        ));
    }
    let mut pairs = Vec::new();
    for i in 0..seeded.len() {
        let [(s_seq, s), (p_seq, p), (h_seq, h), (m_seq, m)] = [seeded[i], primed[i], hit[i], miss[i]];
        if h.prompt != s.prompt || m.prompt != p.prompt {
            return Err(bad(
                &c.id,
                format!(
                    "timed pair {}: #{h_seq} must carry the text of #{s_seq}, and #{m_seq} that of #{p_seq}",
                    i + 1
                ),
            ));
        }
        if s.tenant == h.tenant || [&p.tenant, &m.tenant].iter().any(|t| **t != h.tenant) {
            return Err(bad(
                &c.id,
                format!(
                    "timed pair {}: #{s_seq} must be one tenant's request, and #{p_seq}, #{h_seq}, #{m_seq} the other's",
                    i + 1
                ),
            ));
        }
        let answered = |e: &Exchange| e.is_success().then_some(e.timings.total_ms);
        match (
            answered(&s.exchange),
            answered(&p.exchange),
            answered(&h.exchange),
            answered(&m.exchange),
        ) {
            (Some(_), Some(_), Some(h_ms), Some(m_ms)) => pairs.push((h_ms, m_ms)),
            _ => {
                if i + 1 < seeded.len() {
                    return Err(bad(
                        &c.id,
                        format!(
                            "timed pair {} was not all answered, and the pairs go on after it",
                            i + 1
                        ),
                    ));
                }
            }
        }
    }
    Ok(pairs)
}

/// B's answers to requests like a's judged again by their signs, and its timed pairs
/// by their sign test; the case is decided when one was answered and some sign could
/// show a stored answer (or a's own repeat came back stored), or the pairs decided.
fn reuse(c: &CaseResult, roles: Option<&Roles>, kept: &Kept) -> Result<Judgement, VerifyError> {
    use crate::judge::reuse::{Answer, Signs, Timed, judge};
    use crate::judge::sequential::Decision;
    let codes = [FindingCode::ResponseReused, FindingCode::SemanticResponseReused];
    let undecided = Judgement {
        counts: codes.map(|code| (code, 0)).to_vec(),
        decided: false,
    };
    let Some(roles) = roles else {
        return Ok(undecided);
    };
    let answers = |role: &str| -> Result<Vec<Answer>, VerifyError> {
        Ok(lines(c, roles, role, kept)?
            .into_iter()
            .filter_map(|(seq, ex)| Answer::of(seq, ex))
            .collect())
    };
    let Some(first) = answers("first")?.into_iter().next() else {
        return Ok(undecided);
    };
    let signs = Signs::of(&first, &answers("fresh")?, answers("warm")?.first());
    // As the case sent them: a's request byte for byte first and the other variants,
    // by ids and times (a's request's speed is the timed pairs'), then the paraphrase,
    // new to b, by one sample's speed too.
    let same = lines(c, roles, "same", kept)?;
    let mut tried: Vec<(Answer, bool, bool)> = Vec::new();
    for (seq, ex) in &same {
        tried.extend(Answer::of(*seq, ex).map(|a| (a, false, false)));
    }
    tried.extend(answers("paraphrase")?.into_iter().map(|a| (a, true, true)));
    let reused = judge(&signs, &first, &tried);
    let own = answers("again")?.first().and_then(|a| signs.reused(&first, a, false));
    let semantic = reused.iter().filter(|r| r.semantic).count();
    let params: ReuseParams =
        serde_json::from_value(c.params.clone()).map_err(|e| bad(&c.id, format!("its params: {e}")))?;
    let rule = Timed {
        alpha: params.timing_alpha,
        equivalence: params.equivalence,
    };
    let pairs = reuse_pairs(c, roles, kept)?;
    let timed = match (signs.model_ms, pairs.is_empty()) {
        (Some(model_ms), false) => {
            let t = rule.judge(rule.bound_ms(model_ms), &pairs);
            if t.pairs < pairs.len() {
                return Err(bad(
                    &c.id,
                    format!(
                        "its timed pairs go on past pair {}, where the sign test decided ({} in all)",
                        t.pairs,
                        pairs.len()
                    ),
                ));
            }
            t.decision
        }
        (None, false) => {
            return Err(bad(
                &c.id,
                "it timed pairs though tenant b's fresh requests were not answered (no bound)".to_owned(),
            ));
        }
        (_, true) => Decision::Undecided,
    };
    let by_speed = usize::from(timed == Decision::Effect);
    Ok(Judgement {
        counts: vec![(codes[0], reused.len() - semantic + by_speed), (codes[1], semantic)],
        decided: !reused.is_empty()
            || by_speed > 0
            || (!tried.is_empty() && (signs.any() || own.is_some() || timed == Decision::NoEffect)),
    })
}

/// `cache.prefix-extraction`'s parameters, as much as its rule reads.
#[derive(serde::Deserialize)]
struct ExtractionParams {
    digits: u32,
    max_guesses: u32,
    /// Pairs at most in a timed guess's chain.
    timing_samples: Option<u32>,
    /// The sequential test's alpha.
    timing_alpha: Option<f64>,
}

/// Tenant b's search on the reuse counter, driven again with the counters of its
/// guesses, or, where the case timed its guesses (role `timed`), replayed with their
/// times ([`timed`]).
fn extraction(
    c: &CaseResult,
    roles: Option<&Roles>,
    kept: &Kept,
    secret: &RunSecret,
) -> Result<Judgement, VerifyError> {
    use crate::judge::extraction::{Search, digits, margin, order};
    let code = FindingCode::PrefixExtracted;
    let Some(roles) = roles else {
        return Ok(Judgement {
            counts: vec![(code, 0)],
            decided: false,
        });
    };
    let p: ExtractionParams =
        serde_json::from_value(c.params.clone()).map_err(|e| bad(&c.id, format!("its params: {e}")))?;
    if roles.contains_key("timed") {
        return timed(c, roles, kept, secret, &p);
    }
    let counter = |(seq, ex): (u64, &Exchange)| {
        ex.usage
            .and_then(|u| u.cached_tokens)
            .filter(|_| ex.is_success())
            .ok_or_else(|| {
                bad(
                    &c.id,
                    format!("#{seq} is named as a guess or a control, and reported no reuse counter"),
                )
            })
    };
    let control = lines(c, roles, "control", kept)?
        .into_iter()
        .map(counter)
        .collect::<Result<Vec<_>, _>>()?;
    let Some(margin) = (match control[..] {
        [right, wrong] => margin(right, wrong),
        _ => return Err(bad(&c.id, "its roles name no right and wrong control".to_owned())),
    }) else {
        return Err(bad(
            &c.id,
            "its control shows the counter telling nothing, and the guesses were read by it".to_owned(),
        ));
    };
    let secret_digits = digits(secret, &c.id, p.digits);
    let mut search = Search::new(secret_digits.len(), p.max_guesses, margin);
    let mut guesses = lines(c, roles, "guesses", kept)?.into_iter();
    while search.next(|position| order(secret, &c.id, position)).is_some() {
        let Some(guess) = guesses.next() else {
            return Err(bad(
                &c.id,
                format!("its search needs guess {}, and the lines end", search.guesses + 1),
            ));
        };
        search.record(counter(guess)?);
    }
    if let Some((seq, _)) = guesses.next() {
        return Err(bad(&c.id, format!("#{seq} is a guess after the search ended")));
    }
    let extracted = !search.recovered.is_empty() && secret_digits.starts_with(&search.recovered);
    Ok(Judgement {
        counts: vec![(code, usize::from(extracted))],
        decided: extracted || (search.recovered.is_empty() && !search.exhausted),
    })
}

/// The timed search replayed: tenant a's control pairs (role `timed-control`, each a
/// guess line and its baseline's) give the threshold, or, where they give none, a pass
/// only when the owner's right guess was sooner no more often than chance makes it;
/// tenant b's pairs (role `timed`) drive the search ([`crate::judge::extraction::Timed`])
/// in their order, and must reach the same digits. Pairs that end before the search
/// does are a budget that ended it.
fn timed(
    c: &CaseResult,
    roles: &Roles,
    kept: &Kept,
    secret: &RunSecret,
    p: &ExtractionParams,
) -> Result<Judgement, VerifyError> {
    use crate::judge::extraction::{Control, Timed, digits, order};
    let code = FindingCode::PrefixExtracted;
    let (Some(chain), Some(alpha)) = (p.timing_samples, p.timing_alpha) else {
        return Err(bad(
            &c.id,
            "its params name no timing_samples or timing_alpha".to_owned(),
        ));
    };
    // Each pair's gain: its baseline's time to the first answer less its guess's.
    let gains = |role: &str| -> Result<Vec<f64>, VerifyError> {
        let lines = lines(c, roles, role, kept)?;
        if lines.len() % 2 != 0 {
            return Err(bad(
                &c.id,
                format!("its role {role:?} names an odd number of lines, not pairs"),
            ));
        }
        lines
            .chunks(2)
            .map(|pair| match pair {
                [(_, g), (_, b)] if g.is_success() && b.is_success() => {
                    Ok(b.timings.first_answer_ms() - g.timings.first_answer_ms())
                }
                [(seq, _), _] => Err(bad(&c.id, format!("the pair at #{seq} was not answered"))),
                _ => unreachable!("chunks of two"),
            })
            .collect()
    };
    let control = gains("timed-control")?;
    let guesses = gains("timed")?;
    let theta = match Control::of(&control) {
        Control::Threshold(theta) => theta,
        Control::Unseen { chance, .. } => {
            if !guesses.is_empty() {
                return Err(bad(
                    &c.id,
                    "its control gave no threshold, and guesses were judged by one".to_owned(),
                ));
            }
            return Ok(Judgement {
                counts: vec![(code, 0)],
                decided: chance > alpha,
            });
        }
    };
    let secret_digits = digits(secret, &c.id, p.digits);
    let mut search = Timed::new(secret_digits.len(), chain as usize, p.max_guesses, alpha, theta);
    let mut pairs = guesses.into_iter();
    while search.next(|position| order(secret, &c.id, position)).is_some() {
        match pairs.next() {
            Some(gain) => search.observe(gain),
            None => search.exhaust(),
        }
    }
    if pairs.next().is_some() {
        return Err(bad(
            &c.id,
            format!(
                "its timed guesses go on past the end of the search ({} pairs)",
                search.pairs
            ),
        ));
    }
    let extracted = !search.recovered.is_empty() && secret_digits.starts_with(&search.recovered);
    Ok(Judgement {
        counts: vec![(code, usize::from(extracted))],
        decided: extracted
            || (search.recovered.is_empty() && !search.exhausted && search.undecided == 0 && search.decided_none == 10),
    })
}

/// The prompt past the context (role `past`): accepted, it is a finding. Each prompt
/// within it (role `lengths`) judged by the fact it states first, as the run judged
/// it ([`crate::judge::context::Boundary`]). The prompt meant to run generation past
/// the context (role `overrun`): answered with more tokens than the context holds, it
/// is a finding ([`crate::judge::context::Overrun`]), judged where its usage or the
/// profile's tokenizer counted it (the run's estimates are its own). A case whose
/// baseline did not recall every fact is not decided.
fn boundary(
    report: &Report,
    c: &CaseResult,
    roles: Option<&Roles>,
    kept: &Kept,
    leaked: &BTreeSet<u64>,
) -> Result<Judgement, VerifyError> {
    use crate::judge::context::Boundary;
    let empty = Roles::new();
    let roles = roles.unwrap_or(&empty);
    let past = lines(c, roles, "past", kept)?;
    let accepted = past.iter().filter(|(_, ex)| crate::judge::accepted(ex)).count();
    let mut judged = Boundary::default();
    for (seq, line) in kept_lines(c, roles, "lengths", kept)? {
        if line.facts.is_empty() {
            return Err(bad(
                &c.id,
                format!("#{seq} is named a prompt of facts, and states none"),
            ));
        }
        judged.judge(seq, &line.exchange, &line.facts, leaked.contains(&seq));
    }
    let context = report.vendor.profile.context_window;
    let overrun = kept_lines(c, roles, "overrun", kept)?;
    // Each line's counts, where they are exact: none where one is an estimate.
    let shifted: Option<usize> = overrun
        .iter()
        .map(|(_, line)| line.overrun.map(|o| usize::from(o.shifted(context))))
        .sum();
    let findings = accepted + judged.lost().len() + shifted.unwrap_or(0);
    let mut counts = vec![
        (FindingCode::OverLimitAccepted, accepted),
        (FindingCode::NeedleLost, judged.lost().len()),
    ];
    counts.extend(shifted.map(|n| (FindingCode::ContextShifted, n)));
    Ok(Judgement {
        counts,
        decided: findings > 0 || (judged.baseline_ok() && !judged.blind()),
    })
}

/// `context.recall`'s parameters, as much as its rule reads.
#[derive(serde::Deserialize)]
struct RecallParams {
    lengths: Vec<f64>,
}

/// Each prompt (role `lengths`, the baseline first) judged by every fact it states
/// ([`crate::judge::context::Recall`]); decided when the baseline recalled them all and
/// every length was answered.
fn recall(c: &CaseResult, roles: Option<&Roles>, kept: &Kept) -> Result<Judgement, VerifyError> {
    use crate::judge::context::Recall;
    let p: RecallParams =
        serde_json::from_value(c.params.clone()).map_err(|e| bad(&c.id, format!("its params: {e}")))?;
    let empty = Roles::new();
    let mut judged = Recall::default();
    for (seq, line) in kept_lines(c, roles.unwrap_or(&empty), "lengths", kept)? {
        judged.judge(seq, &line.exchange, &line.facts);
    }
    Ok(Judgement {
        counts: vec![(FindingCode::NeedleLost, judged.lost.len())],
        decided: !judged.lost.is_empty() || (judged.baseline_ok == Some(true) && judged.exercised >= p.lengths.len()),
    })
}
