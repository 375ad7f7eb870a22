//! Standard attestations beside the report, in predicates generic supply-chain tooling
//! already reads.
//!
//! - [`TestResult`] (`https://in-toto.io/attestation/test-result/v0.1`): one per run,
//!   written beside the report as [`TEST_RESULT_FILE`] and signed with the report's key.
//!   Its subject is the run's evidence (the report's envelope and the transcript, by
//!   SHA-256; a hosted endpoint has no digest of its own), its `configuration` the vendor
//!   endpoint, the suite and the run, and its test lists the case ids by verdict.
//!   [`verify_test_result`] derives it again from a verified report: a statement that
//!   does not follow from the report is refused.
//! - [`VerificationSummary`] (`https://in-toto.io/attestation/svr/v0.2`): what a buyer
//!   signs with its own key once a report met its policy (`verify --policy P --svr OUT
//!   --svr-key KEY`): the report's envelope as subject, the policy file by digest in
//!   `verifier.policies`, and the properties verified.
//!
//! The mapping of verdicts onto the predicate's three results, which the predicate
//! leaves to producer and consumer: a failed case is a failed test; an inconclusive one
//! a warned test (it was run, and did not show the vendor safe); a skipped case is in no
//! list (it was not run). The run's `result` is `FAILED` when any case failed, else
//! `WARNED` when any case was inconclusive or skipped (a filtered run, a share of a
//! partition, a case the adapter cannot reach) or the run was cut short, else `PASSED`:
//! tooling that reads only `result` never sees a bare pass over part of the suite.

use crate::outcome::Verdict;
use crate::policy::Requirement;
use crate::report::dsse::Envelope;
use crate::report::{ENVELOPE_FILE, Report, Statement, Subject, VerifiedReport, VerifyError};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The Test Result predicate type.
pub const TEST_RESULT_TYPE: &str = "https://in-toto.io/attestation/test-result/v0.1";

/// The Simple Verification Result predicate type.
pub const SVR_TYPE: &str = "https://in-toto.io/attestation/svr/v0.2";

/// The Test Result statement's name in the run folder.
pub const TEST_RESULT_FILE: &str = "test-result.dsse.json";

/// The verifier named in a verification summary; versioned with the rules of
/// [`crate::policy`].
pub const POLICY_VERIFIER_ID: &str = "urn:tenantcheck:policy-verifier:v1";

/// A run's result in the Test Result predicate.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum TestOutcome {
    /// Every case of the suite ran and passed.
    Passed,
    /// No case failed, but some were inconclusive or skipped, or the run was cut short.
    Warned,
    /// A case failed.
    Failed,
}

impl TestOutcome {
    /// As the predicate writes it.
    pub fn label(self) -> &'static str {
        match self {
            TestOutcome::Passed => "PASSED",
            TestOutcome::Warned => "WARNED",
            TestOutcome::Failed => "FAILED",
        }
    }
}

/// An in-toto ResourceDescriptor (the fields this tool uses).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceDescriptor {
    /// What the resource is (`vendor`, `suite`, `run`, a file name).
    pub name: String,
    /// Where it is, when it has an address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uri: Option<String>,
    /// Its digests by algorithm.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub digest: BTreeMap<String, String>,
    /// More about it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, serde_json::Value>,
}

/// The Test Result predicate (v0.1) of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TestResult {
    /// The run's result.
    pub result: TestOutcome,
    /// The vendor endpoint, the suite and the run.
    pub configuration: Vec<ResourceDescriptor>,
    /// Cases that passed.
    pub passed_tests: Vec<String>,
    /// Cases that were inconclusive.
    pub warned_tests: Vec<String>,
    /// Cases that failed.
    pub failed_tests: Vec<String>,
}

impl TestResult {
    /// The Test Result of `report`.
    pub fn of(report: &Report) -> TestResult {
        let ids = |v: Verdict| -> Vec<String> {
            report
                .cases
                .iter()
                .filter(|c| c.outcome.verdict == v)
                .map(|c| c.id.clone())
                .collect()
        };
        let cut_short = report.interrupted.is_some() || report.refused.is_some();
        let result = if report.totals.failed > 0 {
            TestOutcome::Failed
        } else if report.totals.inconclusive > 0 || report.totals.skipped > 0 || cut_short {
            TestOutcome::Warned
        } else {
            TestOutcome::Passed
        };
        let profile = &report.vendor.profile;
        let json = |v: &str| serde_json::Value::String(v.to_owned());
        let mut vendor = ResourceDescriptor {
            name: "vendor".into(),
            uri: Some(profile.base_url.clone()).filter(|u| !u.is_empty()),
            digest: BTreeMap::new(),
            annotations: BTreeMap::from([
                ("profile".to_owned(), json(&profile.name)),
                ("source".to_owned(), json(&report.vendor.source)),
                ("model".to_owned(), json(&profile.model)),
                ("contextWindow".to_owned(), profile.context_window.into()),
                (
                    "adapter".to_owned(),
                    serde_json::to_value(profile.adapter).expect("adapter kinds serialise"),
                ),
            ]),
        };
        if let Some(sha) = &report.vendor.profile_sha256 {
            vendor.digest.insert("sha256".into(), sha.clone());
        }
        let suite = ResourceDescriptor {
            name: "suite".into(),
            uri: None,
            digest: BTreeMap::from([("sha256".to_owned(), report.suite.digest.clone())]),
            annotations: BTreeMap::from([
                ("cases".to_owned(), report.cases.len().into()),
                (
                    "tool".to_owned(),
                    json(&format!("{} {}", report.tool.name, report.tool.version)),
                ),
            ]),
        };
        let mut run = BTreeMap::from([
            ("startedAt".to_owned(), json(&report.started_at)),
            ("finishedAt".to_owned(), json(&report.finished_at)),
            ("runSecretCommitment".to_owned(), json(&report.run_secret.commitment)),
            ("verdict".to_owned(), json(report.verdict.label())),
        ]);
        if let Some(c) = &report.run_secret.challenge {
            run.insert("challenge".into(), json(c));
        }
        let skipped = ids(Verdict::Skipped);
        if !skipped.is_empty() {
            run.insert("skippedTests".into(), skipped.into());
        }
        if let Some(words) = report.selection_in_words() {
            run.insert("selection".into(), json(&words));
        }
        if let Some(i) = &report.interrupted {
            run.insert("interrupted".into(), json(&i.signal));
        }
        if report.refused.is_some() {
            run.insert("refused".into(), true.into());
        }
        // The leak rate each case rules out (see `outcome::LeakBound`).
        let bounds: serde_json::Map<String, serde_json::Value> = report
            .cases
            .iter()
            .filter_map(|c| {
                let b = c.outcome.power.as_ref()?.leak_rate.as_ref()?;
                Some((
                    c.id.clone(),
                    serde_json::json!({
                        "rate": b.rate,
                        "confidence": b.confidence,
                        "fromTokens": b.from_tokens,
                        "exposures": b.exposures,
                    }),
                ))
            })
            .collect();
        if !bounds.is_empty() {
            run.insert("leakRateRuledOut".into(), bounds.into());
        }
        let run = ResourceDescriptor {
            name: "run".into(),
            uri: None,
            digest: BTreeMap::new(),
            annotations: run,
        };
        TestResult {
            result,
            configuration: vec![vendor, suite, run],
            passed_tests: ids(Verdict::Pass),
            warned_tests: ids(Verdict::Inconclusive),
            failed_tests: ids(Verdict::Fail),
        }
    }
}

/// The subjects of a run's Test Result: its evidence files by SHA-256.
fn evidence_subjects(report: &Report, report_envelope: &[u8]) -> Vec<Subject> {
    vec![
        Subject::new(ENVELOPE_FILE, &crate::sha256_hex(report_envelope)),
        Subject::new(&report.transcript.file, &report.transcript.summary.sha256),
    ]
}

/// The Test Result statement of `report`, whose signed envelope is `report_envelope`,
/// signed with `key` (the report's own).
pub fn sign_test_result(report: &Report, report_envelope: &[u8], key: &SigningKey) -> Envelope {
    Statement::new(
        evidence_subjects(report, report_envelope),
        TEST_RESULT_TYPE,
        TestResult::of(report),
    )
    .sign(key)
}

/// Checks a Test Result statement against the report it speaks of: signed by `key`,
/// about exactly the report's envelope (`report_envelope`, already verified into
/// `verified`) and its transcript, and saying what the report says. Each check that
/// held is told to `on_check`.
pub fn verify_test_result(
    statement: &[u8],
    key: &VerifyingKey,
    report_envelope: &[u8],
    verified: &VerifiedReport,
    mut on_check: impl FnMut(String),
) -> Result<TestResult, VerifyError> {
    let mut quiet = |_| {};
    let (statement, _) = Statement::<serde_json::Value>::open(statement, key, TEST_RESULT_TYPE, &mut quiet)?;
    let report = verified.report();
    let wrong = |problem: String| VerifyError::Attestation {
        file: TEST_RESULT_FILE,
        problem,
    };
    let subjects = |s: &[Subject]| -> Vec<(String, BTreeMap<String, String>)> {
        s.iter().map(|s| (s.name.clone(), s.digest.clone())).collect()
    };
    let expected = evidence_subjects(report, report_envelope);
    if subjects(&statement.subject) != subjects(&expected) {
        return Err(wrong(format!(
            "its subjects are not the report's envelope and transcript: {}",
            serde_json::to_string(&statement.subject).expect("subjects serialise")
        )));
    }
    let derived = TestResult::of(report);
    let stated: TestResult =
        serde_json::from_value(statement.predicate).map_err(|e| wrong(format!("not a Test Result predicate: {e}")))?;
    if stated != derived {
        return Err(wrong(format!(
            "it says {} (failed {:?}, warned {:?}); the report says {} (failed {:?}, warned {:?})",
            stated.result.label(),
            stated.failed_tests,
            stated.warned_tests,
            derived.result.label(),
            derived.failed_tests,
            derived.warned_tests
        )));
    }
    on_check(format!(
        "in-toto Test Result ({TEST_RESULT_FILE}): signed by the same key, about this report and transcript, result {} as the report says",
        derived.result.label()
    ));
    Ok(derived)
}

/// The verifier of a verification summary.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Verifier {
    /// [`POLICY_VERIFIER_ID`].
    pub id: String,
    /// The policy applied, by name and digest.
    pub policies: Vec<ResourceDescriptor>,
    /// The tool that verified (an extension field).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tenantcheck: Option<BTreeMap<String, String>>,
}

/// The Simple Verification Result predicate (v0.2): a buyer's acceptance of a report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationSummary {
    /// Who verified, and under which policy.
    pub verifier: Verifier,
    /// When (RFC 3339).
    pub time_created: String,
    /// The properties verified, `TENANTCHECK_` names (see [`properties`]).
    pub properties: Vec<String>,
}

/// What the verification summary of an accepted report asserts:
///
/// - `TENANTCHECK_POLICY_ACCEPTED`: every requirement of the policy was met;
/// - `TENANTCHECK_CASE_<ID>_<VERDICT>` for each case that ran (`ISOLATION_CANARY_RESIDUE_PASS`);
/// - `TENANTCHECK_CONTEXT_<TOKENS>`: the context window the run was sized to;
/// - `TENANTCHECK_CHALLENGE`: the run mixed in the challenge the policy names;
/// - `TENANTCHECK_RUN_FINISHED_<DAYS>`: the run finished within that many whole days
///   before `timeCreated` (the time-bounded naming of the predicate), when the policy
///   bounds the report's age.
pub fn properties(report: &Report, policy: &crate::policy::Policy, now_unix: i64) -> Vec<String> {
    let mut out = vec!["TENANTCHECK_POLICY_ACCEPTED".to_owned()];
    for c in report.cases.iter().filter(|c| c.outcome.verdict != Verdict::Skipped) {
        let id: String =
            c.id.chars()
                .map(|ch| {
                    if ch.is_ascii_alphanumeric() {
                        ch.to_ascii_uppercase()
                    } else {
                        '_'
                    }
                })
                .collect();
        out.push(format!("TENANTCHECK_CASE_{id}_{}", c.outcome.verdict.label()));
    }
    out.push(format!("TENANTCHECK_CONTEXT_{}", report.vendor.profile.context_window));
    if policy.run.challenge.is_some() {
        out.push("TENANTCHECK_CHALLENGE".into());
    }
    if policy.run.max_age_days.is_some()
        && let Some(t) = crate::policy::unix_seconds(&report.finished_at)
    {
        let days = ((now_unix - t).max(0) as f64 / 86_400.0).ceil().max(1.0) as u64;
        out.push(format!("TENANTCHECK_RUN_FINISHED_{days}"));
    }
    out
}

/// The verification summary of an accepted report, signed with the buyer's `key`:
/// `None` unless every requirement in `judged` was met (a summary is an acceptance).
#[allow(clippy::too_many_arguments)]
pub fn sign_verification_summary(
    report_envelope: &[u8],
    report: &Report,
    policy: &crate::policy::Policy,
    policy_file: (&str, &[u8]),
    judged: &[Requirement],
    tool_version: &str,
    now: (&str, i64),
    key: &SigningKey,
) -> Option<Envelope> {
    if judged.iter().any(|r| !r.met) {
        return None;
    }
    let (policy_name, policy_bytes) = policy_file;
    let predicate = VerificationSummary {
        verifier: Verifier {
            id: POLICY_VERIFIER_ID.into(),
            policies: vec![ResourceDescriptor {
                name: policy_name.to_owned(),
                uri: None,
                digest: BTreeMap::from([("sha256".to_owned(), crate::sha256_hex(policy_bytes))]),
                annotations: BTreeMap::new(),
            }],
            tenantcheck: Some(BTreeMap::from([("version".to_owned(), tool_version.to_owned())])),
        },
        time_created: now.0.to_owned(),
        properties: properties(report, policy, now.1),
    };
    let subject = vec![Subject::new(ENVELOPE_FILE, &crate::sha256_hex(report_envelope))];
    Some(Statement::new(subject, SVR_TYPE, predicate).sign(key))
}

/// The predicate type an envelope claims, read without checking its signature (to
/// choose how to verify it).
pub fn claimed_predicate_type(envelope: &[u8]) -> Option<String> {
    let env: Envelope = serde_json::from_slice(envelope).ok()?;
    let payload = env.unverified_payload().ok()?;
    let v: serde_json::Value = serde_json::from_slice(&payload).ok()?;
    v["predicateType"].as_str().map(str::to_owned)
}

/// A verification summary whose signature by `key` was checked: the summary and the
/// SHA-256 of the report envelope it is about. Each check that held is told to
/// `on_check`. Whether the summary is about a given report is the caller's comparison
/// of that digest.
pub fn open_verification_summary(
    envelope: &[u8],
    key: &VerifyingKey,
    mut on_check: impl FnMut(String),
) -> Result<(VerificationSummary, String), VerifyError> {
    let (statement, _) = Statement::<VerificationSummary>::open(envelope, key, SVR_TYPE, &mut on_check)?;
    let wrong = |problem: String| VerifyError::Statement(problem);
    let report = match statement.subject.as_slice() {
        [s] if s.name == ENVELOPE_FILE => s
            .digest
            .get("sha256")
            .cloned()
            .ok_or_else(|| wrong("its subject has no sha256 digest".into()))?,
        _ => return Err(wrong("its subject is not one report envelope".into())),
    };
    if statement.predicate.properties.is_empty() {
        return Err(wrong("it names no property".into()));
    }
    on_check(format!(
        "in-toto Verification Summary v0.2 by {} at {}, about the report envelope with SHA-256 {report}",
        statement.predicate.verifier.id, statement.predicate.time_created
    ));
    Ok((statement.predicate, report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_are_written_in_the_predicates_upper_case() {
        assert_eq!(serde_json::to_string(&TestOutcome::Warned).unwrap(), "\"WARNED\"");
        let d = ResourceDescriptor {
            name: "suite".into(),
            uri: None,
            digest: BTreeMap::new(),
            annotations: BTreeMap::new(),
        };
        assert_eq!(serde_json::to_string(&d).unwrap(), r#"{"name":"suite"}"#);
    }
}
