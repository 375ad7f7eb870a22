//! [`Policy`]: what a buyer accepts as evidence, and [`evaluate`], which checks a
//! verified report against it, requirement by requirement.
//!
//! `verify` answers "is this report authentic, and do its verdicts follow from its
//! transcript"; a policy answers "is it the evidence I asked for": the suite, every case
//! run (skipped only for reasons the buyer allows), the verdicts allowed, the coverage
//! (share of the advertised context reached, power, node coverage), the model and
//! context that must have been tested, the report's age, the buyer's challenge, the
//! keys trusted, the declared facts and questionnaire answers required, and (`[log]`)
//! the transparency log every run under the challenge entered, all of them disclosed
//! (judged by the tenantcheck package, which reads the log). Every
//! requirement is printed as met or unmet with the figure it was judged on; one unmet
//! requirement rejects the report.
//!
//! The policy is a TOML file (schema in `reports/schema/policy.schema.json`); every
//! table and field is optional, and the empty policy asks for every case of the
//! report's own suite to have run and passed in a report that verifies.

use crate::outcome::Verdict;
use crate::report::Report;
use crate::threat::Severity;
use serde::{Deserialize, Serialize};

/// What a buyer accepts.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Policy {
    /// The suite and tool that must have run.
    #[serde(default)]
    pub suite: SuiteRule,
    /// What must have been tested, and when.
    #[serde(default)]
    pub run: RunRule,
    /// Which cases must have run, and what they may conclude.
    #[serde(default)]
    pub cases: CasesRule,
    /// How much each case must have exercised.
    #[serde(default)]
    pub coverage: CoverageRule,
    /// Who may have signed the report: ed25519 key ids (as `verify` prints them);
    /// empty: the key given to `verify`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trusted_keys: Vec<String>,
    /// What the vendor must have declared.
    #[serde(default)]
    pub declared: DeclaredRule,
    /// The transparency log every run under the buyer's challenge must enter.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<LogRule>,
}

/// The transparency log every run under the buyer's challenge must enter, and whether
/// every run it holds must be disclosed.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct LogRule {
    /// The challenge file the buyer issued (`tenantcheck challenge --log`), relative to
    /// the policy: the nonce, the log, its key and the checkpoint pinned with it. The
    /// run must have mixed in its nonce and entered the log after the pinned checkpoint.
    pub challenge: String,
    /// Accept only when every run the log holds under the challenge is this report's or
    /// one of the reports given with `verify --disclosed`: a vendor that ran until one
    /// run passed cannot hand over that one alone.
    #[serde(default)]
    pub all_runs_disclosed: bool,
}

/// The suite and tool that must have run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SuiteRule {
    /// The suite's digest (SHA-256 of its canonical form, as the report records it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The tool's version, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_version: Option<String>,
}

/// What must have been tested, and when.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RunRule {
    /// The model the profile names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// The advertised context window the run was sized to, at least (the one sold).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<u64>,
    /// The most days since the run finished, counted in whole seconds (a report
    /// verified in the second it finished is 0 days old).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age_days: Option<f64>,
    /// The buyer's challenge (hex) the run must have mixed into its secret.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
}

/// Which cases must have run, and what they may conclude.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CasesRule {
    /// The cases that must have run; empty: every case of the report's suite.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required: Vec<String>,
    /// Reasons a required case may have been skipped for (a part of its summary, such
    /// as "no stored responses"); none by default.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip_reasons: Vec<String>,
    /// The verdicts a case may have; default: pass.
    #[serde(default = "only_pass")]
    pub allowed: Vec<Verdict>,
    /// Per severity, other verdicts allowed (`low = ["pass", "inconclusive"]`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub by_severity: std::collections::BTreeMap<Severity, Vec<Verdict>>,
    /// Per case, the verdicts allowed (`"cache.cross-tenant-timing" = ["pass",
    /// "inconclusive"]`); a case named here is judged by this, before its severity.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub by_case: std::collections::BTreeMap<String, Vec<Verdict>>,
}

impl Default for CasesRule {
    fn default() -> Self {
        CasesRule {
            required: Vec::new(),
            skip_reasons: Vec::new(),
            allowed: only_pass(),
            by_severity: Default::default(),
            by_case: Default::default(),
        }
    }
}

fn only_pass() -> Vec<Verdict> {
    vec![Verdict::Pass]
}

/// How much each case must have exercised.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CoverageRule {
    /// For `context.boundary`: the longest prompt processed whole, as a share of the
    /// advertised context, at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_context_share: Option<f64>,
    /// For every case with a positive control: its power, at least.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_power: Option<f64>,
    /// For every case with node coverage: the chance of an unseen node, at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_unseen_nodes: Option<f64>,
    /// For every case with a positive control that passed: the leak rate it rules out
    /// (see [`crate::outcome::LeakBound`]), at most.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_leak_rate: Option<f64>,
    /// The same, per case id, before `max_leak_rate`.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub max_leak_rate_by_case: std::collections::BTreeMap<String, f64>,
}

/// What the vendor must have declared.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeclaredRule {
    /// Declared facts (fields of the profile's `[declared]`, such as `engine`,
    /// `engine_version`, `nodes`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub facts: Vec<String>,
    /// Questionnaire answers (`cache_isolation`, `page_clearing`, `pool_checks`,
    /// `engine_patching`, `breach_notification`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub questionnaire: Vec<String>,
}

/// One requirement, judged.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Requirement {
    /// What is required, in words (`cases: every case of the suite ran`).
    pub name: String,
    /// Whether the report meets it.
    pub met: bool,
    /// The figure it was judged on (`14 of 14 ran`).
    pub figure: String,
}

/// Judges `report` (already verified, signed by `key_id`) against `policy`, at
/// `now_unix` (seconds): every requirement the policy states, met or not.
pub fn evaluate(report: &Report, key_id: &str, policy: &Policy, now_unix: i64) -> Vec<Requirement> {
    let mut out = Vec::new();
    let mut req = |name: String, met: bool, figure: String| out.push(Requirement { name, met, figure });

    if !policy.trusted_keys.is_empty() {
        req(
            "signer: one of the trusted keys".into(),
            policy.trusted_keys.iter().any(|k| k == key_id),
            format!("signed by {key_id}"),
        );
    }
    if let Some(d) = &policy.suite.digest {
        req(
            format!("suite: digest {d}"),
            report.suite.digest == *d,
            format!("the report's suite {}", report.suite.digest),
        );
    }
    if let Some(v) = &policy.suite.tool_version {
        req(
            format!("tool: version {v}"),
            report.tool.version == *v,
            format!("tenantcheck {}", report.tool.version),
        );
    }
    let profile = &report.vendor.profile;
    if let Some(m) = &policy.run.model {
        req(
            format!("model: {m}"),
            profile.model == *m,
            format!("tested {}", profile.model),
        );
    }
    if let Some(c) = policy.run.context_window {
        req(
            format!("context: at least {c} tokens advertised and tested"),
            profile.context_window >= c,
            format!("the run was sized to {} tokens", profile.context_window),
        );
    }
    if let Some(days) = policy.run.max_age_days {
        let age = unix_seconds(&report.finished_at).map(|t| (now_unix - t) as f64 / 86_400.0);
        req(
            format!("age: finished at most {days} days ago"),
            age.is_some_and(|a| a <= days),
            match age {
                Some(a) => format!("finished {} ({a:.1} days ago)", report.finished_at),
                None => format!("finished at {:?}, not a time this tool reads", report.finished_at),
            },
        );
    }
    if let Some(c) = &policy.run.challenge {
        let found = report.run_secret.challenge.as_deref();
        req(
            format!("challenge: {c}"),
            found.is_some_and(|f| f.eq_ignore_ascii_case(c)),
            format!("the run mixed in {}", found.unwrap_or("no challenge")),
        );
    }

    // Cases: every required one ran to a verdict, in a run that was not cut short.
    let required: Vec<&str> = if policy.cases.required.is_empty() {
        report.cases.iter().map(|c| c.id.as_str()).collect()
    } else {
        policy.cases.required.iter().map(String::as_str).collect()
    };
    let mut missing = Vec::new();
    let mut ran = 0;
    for id in &required {
        match report.cases.iter().find(|c| c.id == *id) {
            None => missing.push(format!("{id} (not in the suite)")),
            Some(c) if c.outcome.verdict == Verdict::Skipped => {
                let allowed = policy
                    .cases
                    .skip_reasons
                    .iter()
                    .any(|r| c.outcome.summary.contains(r.as_str()));
                if allowed {
                    ran += 1;
                } else {
                    missing.push(format!("{id} (skipped: {})", c.outcome.summary));
                }
            }
            Some(_) => ran += 1,
        }
    }
    let mut figure = format!("{ran} of {} ran", required.len());
    if !missing.is_empty() {
        figure.push_str(&format!("; not: {}", missing.join(", ")));
    }
    if let Some(words) = report.selection_in_words() {
        figure.push_str(&format!("; the run selected {words}"));
    }
    req(
        if policy.cases.required.is_empty() {
            "cases: every case of the suite ran".into()
        } else {
            format!("cases: {} ran", policy.cases.required.join(", "))
        },
        missing.is_empty(),
        figure,
    );
    let cut = report.interrupted.is_some() || report.refused.is_some();
    req(
        "run: finished (not interrupted, not stopped by refusals)".into(),
        !cut,
        match (&report.interrupted, &report.refused) {
            (Some(i), _) => format!("interrupted by {}", i.signal),
            (None, Some(r)) => format!("stopped: {}", r.reason),
            (None, None) => "finished".into(),
        },
    );
    for id in &required {
        let Some(c) = report.cases.iter().find(|c| c.id == *id) else {
            continue;
        };
        if c.outcome.verdict == Verdict::Skipped {
            continue;
        }
        let allowed = (policy.cases.by_case.get(c.id.as_str()))
            .or_else(|| policy.cases.by_severity.get(&c.severity))
            .unwrap_or(&policy.cases.allowed);
        req(
            format!(
                "verdict: {id} is {}",
                allowed.iter().map(|v| v.label()).collect::<Vec<_>>().join(" or ")
            ),
            allowed.contains(&c.outcome.verdict),
            format!("{}: {}", c.outcome.verdict.label(), first_words(&c.outcome.summary)),
        );
    }

    // Coverage.
    if let Some(min) = policy.coverage.min_context_share {
        for c in report
            .cases
            .iter()
            .filter(|c| c.probe == crate::judge::kind::CONTEXT_BOUNDARY && c.outcome.verdict != Verdict::Skipped)
        {
            let share = c.outcome.coverage.max_prompt_tokens as f64 / profile.context_window.max(1) as f64;
            req(
                format!(
                    "coverage: {} processed at least {:.0}% of the context",
                    c.id,
                    100.0 * min
                ),
                share >= min,
                format!(
                    "longest prompt processed whole {} tokens ({:.1}% of {})",
                    c.outcome.coverage.max_prompt_tokens,
                    100.0 * share,
                    profile.context_window
                ),
            );
        }
    }
    if let Some(min) = policy.coverage.min_power {
        for c in &report.cases {
            let Some(p) = &c.outcome.power else { continue };
            if c.outcome.verdict == Verdict::Skipped {
                continue;
            }
            req(
                format!("power: {} at least {min}", c.id),
                p.power >= min,
                format!("power {:.4} ({})", p.power, p.control),
            );
        }
    }
    for c in &report.cases {
        let max = policy
            .coverage
            .max_leak_rate_by_case
            .get(&c.id)
            .or(policy.coverage.max_leak_rate.as_ref());
        let (Some(&max), Some(p)) = (max, &c.outcome.power) else {
            continue;
        };
        if c.outcome.verdict != Verdict::Pass {
            continue;
        }
        let (met, figure) = match &p.leak_rate {
            Some(b) => (b.rate <= max, b.describe()),
            None => (false, "the report states no leak rate ruled out".to_owned()),
        };
        req(
            format!(
                "leak rate: {} rules out a leak in more than {:.1}% of exposed requests",
                c.id,
                100.0 * max
            ),
            met,
            figure,
        );
    }
    if let Some(max) = policy.coverage.max_unseen_nodes {
        for c in &report.cases {
            let Some(n) = &c.outcome.nodes else { continue };
            req(
                format!("nodes: {} left at most a {max} chance of an unseen node", c.id),
                n.unseen.is_some_and(|u| u <= max) && n.suffices(),
                n.describe(),
            );
        }
    }

    // Declared facts and answers.
    let declared = profile
        .declared
        .as_ref()
        .and_then(|d| serde_json::to_value(d).ok())
        .unwrap_or_default();
    for fact in &policy.declared.facts {
        let present = declared.get(fact).is_some_and(|v| !v.is_null());
        req(
            format!("declared: {fact}"),
            present,
            if present {
                format!("{fact} = {}", declared[fact])
            } else {
                "not declared".into()
            },
        );
    }
    let answers = profile.questionnaire.as_ref().map(|q| q.answers());
    for question in &policy.declared.questionnaire {
        let answer = answers
            .as_ref()
            .and_then(|a| a.iter().find(|(name, _)| name == question).and_then(|(_, v)| *v));
        req(
            format!("questionnaire: {question} answered"),
            answer.is_some_and(|a| !a.trim().is_empty()),
            answer.map_or_else(|| "not answered".into(), |a| first_words(a).to_owned()),
        );
    }
    out
}

/// The first line of `text`, at most 120 characters.
fn first_words(text: &str) -> &str {
    let line = text.lines().next().unwrap_or_default();
    match line.char_indices().nth(120) {
        Some((i, _)) => &line[..i],
        None => line,
    }
}

/// Seconds since 1970 of an RFC 3339 time in UTC (`2026-12-03T20:13:03Z`, fractions
/// and a `+00:00` offset allowed); `None` for anything else.
pub fn unix_seconds(time: &str) -> Option<i64> {
    let b = time.as_bytes();
    if b.len() < 20
        || b[4] != b'-'
        || b[7] != b'-'
        || !matches!(b[10], b'T' | b't' | b' ')
        || b[13] != b':'
        || b[16] != b':'
    {
        return None;
    }
    let num = |r: std::ops::Range<usize>| time.get(r)?.parse::<i64>().ok();
    let (y, mo, d, h, mi, s) = (
        num(0..4)?,
        num(5..7)?,
        num(8..10)?,
        num(11..13)?,
        num(14..16)?,
        num(17..19)?,
    );
    let rest = &time[19..];
    let rest = match rest.strip_prefix('.') {
        Some(frac) => frac.trim_start_matches(|c: char| c.is_ascii_digit()),
        None => rest,
    };
    if !matches!(rest, "Z" | "z" | "+00:00")
        || !(1..=12).contains(&mo)
        || !(1..=31).contains(&d)
        || h > 23
        || mi > 59
        || s > 60
    {
        return None;
    }
    // Days from civil (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(days * 86_400 + h * 3_600 + mi * 60 + s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_times_read_as_unix_seconds() {
        assert_eq!(unix_seconds("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(unix_seconds("2000-03-01T00:00:00Z"), Some(951_868_800));
        assert_eq!(unix_seconds("2026-12-03T20:13:03.123456Z"), Some(1_796_328_783));
        assert_eq!(unix_seconds("2026-12-03T20:13:03+00:00"), Some(1_796_328_783));
        assert_eq!(unix_seconds("2026-12-03T20:13:03+02:00"), None);
        assert_eq!(unix_seconds("yesterday"), None);
    }

    #[test]
    fn the_empty_policy_reads_and_asks_for_passes() {
        let p: Policy = toml_like("{}");
        assert_eq!(p.cases.allowed, [Verdict::Pass]);
        assert!(p.cases.required.is_empty());
    }

    fn toml_like(json: &str) -> Policy {
        serde_json::from_str(json).unwrap()
    }
}
