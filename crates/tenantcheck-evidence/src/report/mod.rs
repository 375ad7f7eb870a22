//! [`Report`]: the signed evidence of a run, and [`verify`], the only way to obtain a
//! [`VerifiedReport`].
//!
//! A report holds the verdicts, what each case exercised, the findings, the suite's
//! digest and files, the vendor profile (which holds no secret: tenants name
//! environment variables), the run secret's commitment and the revealed secret, the
//! transcript's digest and length, and the run's times. It travels as the predicate of
//! an in-toto Statement v1 whose subject is the transcript, inside a DSSE envelope
//! signed with ed25519 (see [`dsse`] and [`key`]). The format is described in
//! `reports/README.md`.

pub mod dsse;
pub mod key;
mod recheck;
mod rejudge;

use crate::canary::RunSecret;
use crate::outcome::{Outcome, Verdict};
use crate::profile::VendorProfile;
use crate::threat::{Severity, Threat};
use crate::transcript::{ChainError, TranscriptSummary, verify_chain};
use dsse::{Envelope, PAYLOAD_TYPE};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The report format's version.
///
/// Changelog:
/// - 1: first format.
/// - 2: `refused` (a run the vendor's refusals stopped); finding code `Redirected`;
///   the profile's `stop_after_server_errors`; an outcome's `power` (the positive
///   control and the power that follows, re-derived by `verify`).
pub const FORMAT_VERSION: u32 = 2;

/// The in-toto Statement type.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";

/// The predicate type of a tenantcheck report.
pub const PREDICATE_TYPE: &str = "urn:tenantcheck:report:v1";

/// The transcript's name in the statement's subject and in the run folder.
pub const TRANSCRIPT_FILE: &str = "transcript.jsonl";

/// The envelope's name in the run folder.
pub const ENVELOPE_FILE: &str = "report.dsse.json";

/// The rendered HTML's name in the run folder.
pub const HTML_FILE: &str = "report.html";

/// The rendered Markdown's name in the run folder.
pub const MARKDOWN_FILE: &str = "report.md";

/// The JUnit XML's name in the run folder.
pub const JUNIT_FILE: &str = "report.junit.xml";

/// The evidence of one run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Report {
    /// [`FORMAT_VERSION`] of the tool that wrote it.
    pub format_version: u32,
    /// The tool and its version.
    pub tool: ToolInfo,
    /// When the run started (RFC 3339).
    pub started_at: String,
    /// When the run ended (RFC 3339).
    pub finished_at: String,
    /// The overall verdict: fail if any case failed, else inconclusive if any was,
    /// else pass.
    pub verdict: Verdict,
    /// Cases by verdict.
    pub totals: Totals,
    /// The vendor as profiled (no secrets).
    pub vendor: VendorRecord,
    /// The suite that ran.
    pub suite: SuiteRecord,
    /// The run secret: its commitment (in the transcript's first line, before any
    /// request) and, revealed after the run, the secret itself.
    pub run_secret: RunSecretRecord,
    /// The transcript this report rests on.
    pub transcript: TranscriptRecord,
    /// The canaries issued, so that a verifier can re-derive them from the revealed
    /// secret and re-scan the transcript.
    pub canaries: Vec<IssuedCanaries>,
    /// One entry per case of the suite, in id order.
    pub cases: Vec<CaseReport>,
    /// Set when the run was interrupted: the report covers what was done before the
    /// signal, and `tenantcheck run --resume` continues it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<Interruption>,
    /// Set when the vendor refused so many requests that should have succeeded that
    /// the run stopped sending (see the profile's `stop_after_server_errors`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refused>,
    /// Set when the vendor answered any request with a rate limit (HTTP 429): how many,
    /// and how many were waited out and tried again (see the profile's
    /// `max_retry_after_secs` and `rate_limit_retries`). A rate limit is no failure;
    /// every try is in the transcript.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate_limits: Option<RateLimits>,
    /// When the run was continued after an interruption, each time (RFC 3339).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resumed_at: Vec<String>,
    /// The report this run follows (`run --previous`), so that a vendor's reports form
    /// a chain that `tenantcheck diff` walks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous: Option<PreviousReport>,
    /// The share of the suite this run ran (`run --partition INDEX/COUNT`): the cases
    /// of the other shares are skipped here, and `tenantcheck merge` joins the shares'
    /// reports into one signed summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<crate::partition::Partition>,
    /// Set when the run selected only some of the suite's cases (a filter, `--skip`, a
    /// share of a partition): the others are `skipped`, and the verdict speaks for the
    /// selection alone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection: Option<Selection>,
}

/// The rate limits a run met.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RateLimits {
    /// Answers with HTTP status 429 in the transcript (`verify` counts them again).
    pub answers: u64,
    /// Rate limits (429, or 503 with a `Retry-After`) waited out and tried again.
    pub waited_out: u64,
    /// The seconds those waits took, as the answers' `Retry-After` asked.
    pub waited_secs: u64,
}

impl RateLimits {
    /// The rate limits in words, for renderings.
    pub fn describe(&self) -> String {
        let given_up = self.answers.saturating_sub(self.waited_out);
        format!(
            "{} answers were rate limits (HTTP 429); {} rate limits were waited out ({} s in all) and the requests tried again{}",
            self.answers,
            self.waited_out,
            self.waited_secs,
            if given_up > 0 {
                format!(
                    "; at least {given_up} were kept as answers (a Retry-After past the profile's bound, or its retries spent)"
                )
            } else {
                String::new()
            }
        )
    }
}

/// The cases a run selected, when not all of the suite's.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Selection {
    /// The filter given (`run FILTER`): a part of a case id, or with `exact` the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<String>,
    /// Whether the filter (and the skips) name whole ids (`--exact`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub exact: bool,
    /// The `--skip` filters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skip: Vec<String>,
    /// How many of the suite's cases were selected.
    pub selected: u32,
}

/// The report a run follows.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PreviousReport {
    /// The SHA-256 of its envelope file's bytes (hex).
    pub sha256: String,
}

/// Why the vendor's refusals stopped a run, and what it left undone.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Refused {
    /// The run of refusals that stopped it.
    pub refusal: Refusal,
    /// The same, in words.
    pub reason: String,
    /// When the report was written (RFC 3339).
    pub stopped_at: String,
    /// The cases not run, or cut short: their outcomes here are inconclusive, and a
    /// resumed run runs them again.
    pub unfinished: Vec<String>,
}

/// How a run was interrupted, and what it left undone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Interruption {
    /// The signal (`SIGINT`, `SIGTERM`).
    pub signal: String,
    /// When the report was written (RFC 3339).
    pub stopped_at: String,
    /// The cases not run, or cut short, by the interruption: their outcomes here are
    /// inconclusive, and a resumed run runs them again.
    pub unfinished: Vec<String>,
}

/// Canaries issued to one tenant in one case: indices 0 to `count` - 1.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct IssuedCanaries {
    /// The tenant.
    pub owner: String,
    /// The case.
    pub case: String,
    /// How many.
    pub count: u32,
}

/// The tool that wrote a report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct ToolInfo {
    /// `tenantcheck`.
    pub name: String,
    /// Its version.
    pub version: String,
}

/// Cases by verdict.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Totals {
    /// Passed.
    pub passed: u32,
    /// Failed.
    pub failed: u32,
    /// Inconclusive.
    pub inconclusive: u32,
    /// Skipped.
    pub skipped: u32,
}

/// The vendor as it was profiled.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct VendorRecord {
    /// Where the profile came from: a path, or `embedded` for the built-in
    /// reference vendor.
    pub source: String,
    /// SHA-256 of the profile file, when it came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_sha256: Option<String>,
    /// The profile, as used (for the embedded vendor, with its in-process URL).
    pub profile: VendorProfile,
}

/// The suite that ran.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SuiteRecord {
    /// SHA-256 of the suite's canonical form.
    pub digest: String,
    /// Each case file and its SHA-256.
    pub files: Vec<SuiteFile>,
}

/// One suite file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SuiteFile {
    /// The case's id.
    pub id: String,
    /// The file, relative to the suite folder.
    pub path: String,
    /// SHA-256 of its bytes.
    pub sha256: String,
}

/// The run secret, committed and revealed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct RunSecretRecord {
    /// SHA-256 commitment, recorded before the first request.
    pub commitment: String,
    /// The secret in hex, revealed after the run; every canary derives from it.
    pub revealed: String,
    /// The random seed (hex) the secret was derived from.
    pub seed: String,
    /// The buyer's challenge (hex) mixed into the secret, if one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
    /// The run's start entry in the transparency log the challenge names; the secret
    /// then mixes in its log index and checkpoint root. `None`: the run was not logged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<crate::tlog::StartRecord>,
}

/// The transcript a report rests on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TranscriptRecord {
    /// Its file name in the run folder.
    pub file: String,
    /// Its digest and length.
    #[serde(flatten)]
    pub summary: TranscriptSummary,
}

/// One case's result.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct CaseReport {
    /// The case's id.
    pub id: String,
    /// The threat it covers.
    pub threat: Threat,
    /// How bad a failure is.
    pub severity: Severity,
    /// The requirement it checks.
    pub requirement: String,
    /// The probe that ran it.
    pub probe: String,
    /// The probe's parameters, as validated (defaults filled in).
    #[serde(default)]
    pub params: serde_json::Value,
    /// What it concluded.
    pub outcome: Outcome,
}

impl std::fmt::Display for Totals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} passed, {} failed, {} inconclusive, {} skipped",
            self.passed, self.failed, self.inconclusive, self.skipped
        )
    }
}

impl Report {
    /// The verdict with its counts and, when the run selected only some of the suite's
    /// cases, which: a filtered run's pass is never shown as a bare PASS.
    pub fn verdict_line(&self) -> String {
        match self.selection_in_words() {
            Some(words) => format!(
                "{} ({}) over a selection: {words}; not a verdict on the whole suite",
                self.verdict.label(),
                self.totals
            ),
            None => format!("{} ({})", self.verdict.label(), self.totals),
        }
    }

    /// `1 of the suite's 14 cases (filter "usage")`, when the run selected only some.
    pub fn selection_in_words(&self) -> Option<String> {
        let s = self.selection.as_ref()?;
        let mut how = Vec::new();
        if let Some(f) = &s.filter {
            how.push(format!("filter {f:?}{}", if s.exact { " --exact" } else { "" }));
        }
        if !s.skip.is_empty() {
            how.push(format!("--skip {}", s.skip.join(", ")));
        }
        if let Some(p) = self.partition {
            how.push(format!("share {p}"));
        }
        Some(format!(
            "{} of the suite's {} cases ({})",
            s.selected,
            self.cases.len(),
            how.join("; ")
        ))
    }

    /// Counts verdicts and sets `totals` and `verdict` from `cases`.
    pub fn tally(&mut self) {
        (self.totals, self.verdict) = tally(self.cases.iter().map(|c| c.outcome.verdict));
    }

    /// Wraps the report in an in-toto Statement about the transcript and signs it.
    pub fn sign(&self, key: &SigningKey) -> Envelope {
        let subject = vec![Subject::new(&self.transcript.file, &self.transcript.summary.sha256)];
        Statement::new(subject, PREDICATE_TYPE, self).sign(key)
    }
}

/// Cases by verdict, and the overall verdict: fail if any case failed, else
/// inconclusive if any was, else pass if any passed, else skipped.
pub fn tally(verdicts: impl IntoIterator<Item = Verdict>) -> (Totals, Verdict) {
    let mut t = Totals::default();
    for v in verdicts {
        match v {
            Verdict::Pass => t.passed += 1,
            Verdict::Fail => t.failed += 1,
            Verdict::Inconclusive => t.inconclusive += 1,
            Verdict::Skipped => t.skipped += 1,
        }
    }
    let verdict = if t.failed > 0 {
        Verdict::Fail
    } else if t.inconclusive > 0 {
        Verdict::Inconclusive
    } else if t.passed > 0 {
        Verdict::Pass
    } else {
        Verdict::Skipped
    };
    (t, verdict)
}

/// An in-toto Statement v1 carrying a predicate: a report, or a merge summary.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Statement<P> {
    #[serde(rename = "_type")]
    pub(crate) type_: String,
    pub(crate) subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub(crate) predicate_type: String,
    pub(crate) predicate: P,
}

/// A file the statement is about, by its digest.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Subject {
    pub(crate) name: String,
    pub(crate) digest: BTreeMap<String, String>,
}

impl Subject {
    /// `name` with its SHA-256 (hex).
    pub(crate) fn new(name: &str, sha256: &str) -> Self {
        Subject {
            name: name.to_owned(),
            digest: BTreeMap::from([("sha256".to_owned(), sha256.to_owned())]),
        }
    }
}

impl<P: Serialize> Statement<P> {
    /// A statement of `predicate_type` about `subject`.
    pub(crate) fn new(subject: Vec<Subject>, predicate_type: &str, predicate: P) -> Self {
        Statement {
            type_: STATEMENT_TYPE.into(),
            subject,
            predicate_type: predicate_type.into(),
            predicate,
        }
    }

    /// The statement in a DSSE envelope signed with `key`.
    pub(crate) fn sign(&self, key: &SigningKey) -> Envelope {
        let payload = serde_json::to_vec(self).expect("statements serialise");
        Envelope::sign(PAYLOAD_TYPE, &payload, key)
    }
}

impl<P: serde::de::DeserializeOwned> Statement<P> {
    /// Opens a signed statement: the envelope, the signature by `key` (its id is
    /// returned), the statement's type and its predicate type; each check passed is
    /// told to `on_check`.
    pub(crate) fn open(
        envelope: &[u8],
        key: &VerifyingKey,
        predicate_type: &str,
        on_check: &mut impl FnMut(String),
    ) -> Result<(Self, String), VerifyError> {
        let env: Envelope = serde_json::from_slice(envelope).map_err(VerifyError::Envelope)?;
        if env.payload_type != PAYLOAD_TYPE {
            return Err(VerifyError::PayloadType {
                found: env.payload_type,
            });
        }
        on_check(format!("DSSE envelope, payloadType {PAYLOAD_TYPE}"));
        let payload = env.verified_payload(key)?;
        let key_id = key::key_id(key);
        on_check(format!("ed25519 signature by key {key_id}"));
        let statement: Self = serde_json::from_slice(&payload).map_err(|e| VerifyError::Statement(e.to_string()))?;
        if statement.type_ != STATEMENT_TYPE {
            return Err(VerifyError::Statement(format!("_type is {:?}", statement.type_)));
        }
        if statement.predicate_type != predicate_type {
            return Err(VerifyError::Statement(format!(
                "predicateType is {:?}, expected {predicate_type:?}",
                statement.predicate_type
            )));
        }
        Ok((statement, key_id))
    }
}

/// A report whose signature, statement and (when given) transcript were checked.
/// Only [`verify`] makes one.
#[derive(Clone, Debug)]
pub struct VerifiedReport {
    report: Report,
    key_id: String,
    transcript: Option<TranscriptSummary>,
}

impl VerifiedReport {
    /// The report.
    pub fn report(&self) -> &Report {
        &self.report
    }

    /// The id of the key that signed it.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }

    /// The transcript's summary, when the transcript was checked.
    pub fn transcript(&self) -> Option<&TranscriptSummary> {
        self.transcript.as_ref()
    }
}

/// Why a report did not verify.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// The file is not a DSSE envelope.
    #[error("not a DSSE envelope: {0}")]
    Envelope(#[source] serde_json::Error),
    /// The envelope's payload type is not an in-toto Statement.
    #[error("payloadType is {found:?}, expected {PAYLOAD_TYPE:?}")]
    PayloadType {
        /// The type found.
        found: String,
    },
    /// The payload or a signature is not base64.
    #[error("the {0} is not base64")]
    Base64(&'static str),
    /// No signature carries the given key's id.
    #[error("no signature by key {key_id} (signatures by: {})", if found.is_empty() { "none".to_owned() } else { found.join(", ") })]
    NoSignatureForKey {
        /// The given key's id.
        key_id: String,
        /// The key ids of the signatures present.
        found: Vec<String>,
    },
    /// The signature does not match the payload: it was changed, or signed by
    /// another key.
    #[error("the signature by key {key_id} does not match the payload: the envelope was changed")]
    BadSignature {
        /// The key id.
        key_id: String,
    },
    /// The payload is not the in-toto Statement v1 expected (a report, a summary).
    #[error("the payload is not the in-toto Statement v1 expected: {0}")]
    Statement(String),
    /// The statement names no transcript subject.
    #[error("the statement has no subject {TRANSCRIPT_FILE:?} with a sha256 digest")]
    NoTranscriptSubject,
    /// The transcript's digest is not the one signed.
    #[error("the transcript's SHA-256 is {actual}, the signed report says {expected}: the transcript was changed")]
    TranscriptDigest {
        /// The signed digest.
        expected: String,
        /// The digest of the file given.
        actual: String,
    },
    /// The transcript's hash chain is broken.
    #[error("transcript: {0}")]
    TranscriptChain(#[source] ChainError),
    /// The transcript's length is not the one signed.
    #[error("the transcript has {actual} lines, the signed report says {expected}")]
    TranscriptLines {
        /// Lines signed.
        expected: u64,
        /// Lines found.
        actual: u64,
    },
    /// The transcript's first line does not commit to the report's run secret.
    #[error("the transcript's first line is not a header committing to the report's run secret and challenge")]
    TranscriptHeader,
    /// Re-judging a case from the transcript disagrees with its signed verdict.
    #[error("re-check of {case} disagrees with the signed report: {problem}")]
    Recheck {
        /// The case (or `preflight`).
        case: String,
        /// How.
        problem: String,
    },
    /// A statement beside the report (the in-toto Test Result) does not follow from it.
    #[error("{file} does not follow from the report: {problem}")]
    Attestation {
        /// The statement's file.
        file: &'static str,
        /// How it differs.
        problem: String,
    },
    /// The revealed run secret does not match its commitment.
    #[error("the revealed run secret does not match its commitment")]
    SecretCommitment,
    /// The revealed run secret does not derive from the recorded seed and challenge.
    #[error("the revealed run secret does not derive from the recorded seed and challenge")]
    SecretDerivation,
    /// The run's start entry in the transparency log is not this run's.
    #[error("the run's start entry in the transparency log: {0}")]
    LogStart(String),
    /// The report was not made for the challenge the verifier gave.
    #[error("the report was made for challenge {}, not {expected}", found.as_deref().unwrap_or("none"))]
    Challenge {
        /// The challenge the verifier gave.
        expected: String,
        /// The challenge recorded, if any.
        found: Option<String>,
    },
}

/// Verifies an envelope with `key` and, when given, the transcript it rests on and the
/// challenge the run must have mixed in. `on_check` is told each check that held, in
/// order, as one line.
///
/// # Example: sign and verify
///
/// ```
/// use tenantcheck_evidence::outcome::Verdict;
/// use tenantcheck_evidence::report::{self, key, Report, RunSecretRecord, SuiteRecord, ToolInfo, Totals,
///     TranscriptRecord, VendorRecord};
///
/// let transcript = b"";
/// let seed = [7u8; 32];
/// let secret = tenantcheck_evidence::canary::RunSecret::derive(&seed, b"buyer-nonce");
/// let report = Report {
///     format_version: report::FORMAT_VERSION,
///     tool: ToolInfo { name: "tenantcheck".into(), version: "0.1.0".into() },
///     started_at: "2026-12-02T00:00:00Z".into(),
///     finished_at: "2026-12-02T00:00:01Z".into(),
///     verdict: Verdict::Skipped,
///     totals: Totals::default(),
///     vendor: VendorRecord {
///         source: "embedded".into(),
///         profile_sha256: None,
///         profile: serde_json::from_str(r#"{"name": "v", "adapter": "openai-chat",
///             "base_url": "http://127.0.0.1:1/v1", "model": "m", "context_window": 4096,
///             "tenants": [{"label": "a", "credential_env": "KEY_A"},
///                         {"label": "b", "credential_env": "KEY_B"}]}"#).unwrap(),
///     },
///     suite: SuiteRecord { digest: "0".repeat(64), files: vec![] },
///     run_secret: RunSecretRecord {
///         commitment: secret.commitment(),
///         revealed: secret.to_hex(),
///         seed: "07".repeat(32),
///         challenge: Some(tenantcheck_evidence::hex(b"buyer-nonce")),
///         log: None,
///     },
///     transcript: TranscriptRecord {
///         file: report::TRANSCRIPT_FILE.into(),
///         summary: tenantcheck_evidence::transcript::verify_chain(transcript).unwrap(),
///     },
///     canaries: vec![],
///     cases: vec![],
///     interrupted: None,
///     refused: None,
///     rate_limits: None,
///     resumed_at: vec![],
///     previous: None,
///     partition: None,
///     selection: None,
/// };
/// let signing_key = key::generate();
/// let envelope = serde_json::to_vec(&report.sign(&signing_key)).unwrap();
///
/// let verified = report::verify(&envelope, &signing_key.verifying_key(), None, Some(b"buyer-nonce"), |check| {
///     println!("ok: {check}")
/// })
///     .expect("a report verifies with its signer's key");
/// assert_eq!(verified.report(), &report);
///
/// let stranger = key::generate().verifying_key();
/// assert!(report::verify(&envelope, &stranger, None, None, |_| {}).is_err());
/// assert!(report::verify(&envelope, &signing_key.verifying_key(), None, Some(b"other"), |_| {}).is_err());
/// ```
pub fn verify(
    envelope: &[u8],
    key: &VerifyingKey,
    transcript: Option<&[u8]>,
    challenge: Option<&[u8]>,
    mut on_check: impl FnMut(String),
) -> Result<VerifiedReport, VerifyError> {
    let (statement, key_id) = Statement::<Report>::open(envelope, key, PREDICATE_TYPE, &mut on_check)?;
    let report = statement.predicate;
    if report.format_version != FORMAT_VERSION {
        return Err(VerifyError::Statement(format!(
            "report format {} (this tool reads {FORMAT_VERSION})",
            report.format_version
        )));
    }
    let subject = statement
        .subject
        .iter()
        .find(|s| s.name == report.transcript.file)
        .and_then(|s| s.digest.get("sha256"))
        .filter(|d| **d == report.transcript.summary.sha256)
        .ok_or(VerifyError::NoTranscriptSubject)?;
    on_check(format!(
        "in-toto Statement v1, predicate {PREDICATE_TYPE} format {FORMAT_VERSION}, subject {} sha256 {subject}",
        report.transcript.file
    ));
    let rs = &report.run_secret;
    let revealed = RunSecret::from_hex(&rs.revealed).ok_or(VerifyError::SecretCommitment)?;
    if revealed.commitment() != rs.commitment {
        return Err(VerifyError::SecretCommitment);
    }
    let seed: Option<[u8; 32]> = unhex(&rs.seed).and_then(|b| b.try_into().ok());
    let recorded_challenge = match &rs.challenge {
        Some(c) => Some(unhex(c).ok_or(VerifyError::SecretDerivation)?),
        None => None,
    };
    let derived = match (seed, &rs.log) {
        (Some(seed), Some(start)) => {
            let included = check_start(&report, start, &seed, key)?;
            on_check(format!(
                "the run's start is entry {} of the log {} (its inclusion proof leads to the root of the log's checkpoint at tree size {}) and commits to this run's challenge, seed, profile, suite, tool version and signing key",
                included.index, start.origin, included.tree_size
            ));
            let challenge = recorded_challenge.as_deref().unwrap_or_default();
            Some(RunSecret::derive_logged(
                &seed,
                challenge,
                included.index,
                &included.root,
            ))
        }
        (Some(seed), None) => Some(RunSecret::derive(
            &seed,
            recorded_challenge.as_deref().unwrap_or_default(),
        )),
        (None, _) => None,
    };
    if derived.as_ref() != Some(&revealed) {
        return Err(match &rs.log {
            Some(start) => VerifyError::LogStart(format!(
                "the revealed run secret does not derive from where the log put it (entry {}): the run's canaries and prompts were made before that entry was logged, or without it",
                start.entry.log_index
            )),
            None => VerifyError::SecretDerivation,
        });
    }
    on_check(match rs.log {
        Some(_) => "the revealed run secret matches its commitment and derives from the recorded seed, the challenge and where the log put the start entry, so no request of the run was made before it was logged".to_owned(),
        None => "the revealed run secret matches its commitment and derives from the recorded seed and challenge".to_owned(),
    });
    if let Some(expected) = challenge {
        if recorded_challenge.as_deref() != Some(expected) {
            return Err(VerifyError::Challenge {
                expected: crate::hex(expected),
                found: rs.challenge.clone(),
            });
        }
        on_check(format!(
            "the run secret mixes in the challenge {}",
            crate::hex(expected)
        ));
    }
    let transcript = match transcript {
        None => None,
        Some(bytes) => {
            let actual = crate::sha256_hex(bytes);
            if actual != *subject {
                return Err(VerifyError::TranscriptDigest {
                    expected: subject.clone(),
                    actual,
                });
            }
            on_check(format!("transcript SHA-256 matches the signed subject ({actual})"));
            let summary = verify_chain(bytes).map_err(VerifyError::TranscriptChain)?;
            if summary.lines != report.transcript.summary.lines {
                return Err(VerifyError::TranscriptLines {
                    expected: report.transcript.summary.lines,
                    actual: summary.lines,
                });
            }
            on_check(format!("transcript hash chain intact over {} lines", summary.lines));
            let header = bytes
                .split(|&b| b == b'\n')
                .next()
                .and_then(|line| crate::transcript::Line::parse(line).ok());
            let Some(crate::transcript::Line::Header {
                secret_commitment,
                challenge,
                log_index,
                log_checkpoint,
            }) = header
            else {
                return Err(VerifyError::TranscriptHeader);
            };
            let log = report.run_secret.log.as_ref();
            if secret_commitment != report.run_secret.commitment
                || challenge != report.run_secret.challenge
                || log_index != log.map(|l| l.entry.log_index)
                || log_checkpoint.as_ref() != log.map(|l| &l.entry.checkpoint)
            {
                return Err(VerifyError::TranscriptHeader);
            }
            on_check("the transcript's first line commits to the same run secret and challenge".to_owned());
            let r = recheck::recheck(&report, bytes, &revealed)?;
            on_check(format!(
                "re-derived {} canaries from the revealed secret and re-scanned {} responses ({} more judged by a second case, through a cite line): {} leak findings confirmed, none missed; {} improper refusals and {} usage mismatches re-judged as signed; {} timing levels replayed; {} cases' power re-derived from their controls",
                r.canaries,
                r.responses,
                r.cited,
                r.leaks,
                r.refusals,
                r.usage.map_or("no".to_owned(), |n| n.to_string()),
                r.timing_levels,
                r.powers
            ));
            on_check(format!(
                "{} cases re-judged by their own rule from the lines their roles name (context, extraction on the counter, response reuse, metadata, noisy neighbour): findings as signed, and no pass the lines do not decide",
                r.rejudged
            ));
            Some(summary)
        }
    };
    Ok(VerifiedReport {
        report,
        key_id,
        transcript,
    })
}

/// Why the session stopped sending: the vendor refused every request of a run of
/// them.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Refusal {
    /// The tenant whose requests were refused last.
    pub tenant: String,
    /// The HTTP status of the refusals.
    pub status: u16,
    /// How many answers in a row refused.
    pub count: u32,
    /// The transcript line of the last of them.
    pub last_seq: u64,
}

impl Refusal {
    /// Whether the vendor refused the tenant's credential (401, 403): the run cannot
    /// go on with it, which is a setup error, not a verdict.
    pub fn is_credential(&self) -> bool {
        matches!(self.status, 401 | 403)
    }
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.is_credential() {
            write!(
                f,
                "the vendor refused tenant {}'s credential (HTTP {}) on a request that should succeed (transcript #{}), after the credential check had passed",
                self.tenant, self.status, self.last_seq
            )
        } else {
            write!(
                f,
                "the vendor answered {} requests in a row HTTP {} (the last, tenant {}'s, transcript #{}): it is failing, not under test",
                self.count, self.status, self.tenant, self.last_seq
            )
        }
    }
}

/// Checks that a logged run's start entry is this run's: its statement names the
/// report's challenge, seed, profile, suite, tool version and signing key, and the entry
/// logs that statement, signed with the challenge's start key, in the tree of its
/// checkpoint. The checkpoint's signature is checked against the log key the buyer
/// trusts, by whoever holds it ([`crate::tlog::LogKey::verify_checkpoint`]).
fn check_start(
    report: &Report,
    start: &crate::tlog::StartRecord,
    seed: &[u8; 32],
    key: &VerifyingKey,
) -> Result<crate::tlog::Included, VerifyError> {
    use crate::tlog::{START_TYPE, entry_key, profile_sha256, seed_commitment, statement_bytes};
    let s = &start.statement;
    let wrong = |what: &str| Err(VerifyError::LogStart(format!("it does not name this run's {what}")));
    if s.kind != START_TYPE {
        return Err(VerifyError::LogStart(format!(
            "its statement is a {:?}, not {START_TYPE}",
            s.kind
        )));
    }
    if Some(&s.challenge) != report.run_secret.challenge.as_ref() {
        return wrong("challenge");
    }
    if s.seed_commitment != seed_commitment(seed) {
        return wrong("seed");
    }
    if s.profile_sha256 != profile_sha256(&report.vendor.source, &report.vendor.profile) {
        return wrong("vendor profile");
    }
    if s.suite_sha256 != report.suite.digest {
        return wrong("suite");
    }
    if s.tool_version != report.tool.version {
        return wrong("tool version");
    }
    if s.run_key != crate::hex(key.as_bytes()) {
        return wrong("signing key");
    }
    let challenge = unhex(&s.challenge).unwrap_or_default();
    start
        .entry
        .check(
            "run start",
            &statement_bytes(s),
            &entry_key(&challenge, "start").verifying_key(),
        )
        .map_err(|e| VerifyError::LogStart(e.to_string()))
}

pub use crate::unhex;
