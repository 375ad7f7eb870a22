//! [`open`]: the one way to verify any signed document this project writes, whatever
//! it is: a run's report (with its transcript and the in-toto Test Result beside it), a
//! merge summary over many reports (each report it names verified in full), or a
//! buyer's Verification Summary of a report. The envelope says which it is (its
//! predicate type); what else verifying it needs is read through [`Beside`], so that
//! the command line, a library user and a test read files the same way and judge them
//! with the same code.
//!
//! A Test Result alone is not verified here: it is a statement about a report, and is
//! verified with that report ([`Opened::Report`]'s `test_result`).

use crate::attestation::{self, TEST_RESULT_FILE, TestResult, VerificationSummary};
use crate::report::{self, ENVELOPE_FILE, TRANSCRIPT_FILE, VerifiedReport, VerifyError};
use crate::shard::{self, Shard, ShardRecord, VerifiedSummary};
use ed25519_dalek::VerifyingKey;

/// The kinds of signed document, by the predicate type their envelope claims.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// A run's report (`urn:tenantcheck:report:v1`).
    Report,
    /// A merge summary over many reports.
    Summary,
    /// A buyer's in-toto Verification Summary of a report.
    VerificationSummary,
    /// A run's in-toto Test Result, verified with its report.
    TestResult,
}

impl Kind {
    /// The kind an envelope claims to be, before any signature is checked; a report
    /// where it claims none this project knows (its own check then says what is wrong).
    pub fn of(envelope: &[u8]) -> Kind {
        if shard::is_summary(envelope) {
            return Kind::Summary;
        }
        match attestation::claimed_predicate_type(envelope).as_deref() {
            Some(attestation::SVR_TYPE) => Kind::VerificationSummary,
            Some(attestation::TEST_RESULT_TYPE) => Kind::TestResult,
            _ => Kind::Report,
        }
    }
}

/// The files beside a document that verifying it reads: `name` is a file of the run
/// folder ([`TRANSCRIPT_FILE`], [`TEST_RESULT_FILE`], [`ENVELOPE_FILE`]) or a path a
/// merge summary names, `/`-separated and relative to the summary's folder.
pub trait Beside {
    /// The file's bytes; `Ok(None)` where there is no such file.
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String>;

    /// The public key in the PEM file `name` (a merge summary's report's signer).
    fn public_key(&self, name: &str) -> Result<VerifyingKey, String>;
}

/// What was read beside a document: nothing.
pub struct Nothing;

impl Beside for Nothing {
    fn read(&self, _: &str) -> Result<Option<Vec<u8>>, String> {
        Ok(None)
    }

    fn public_key(&self, name: &str) -> Result<VerifyingKey, String> {
        Err(format!("{name}: no file beside the document"))
    }
}

/// A document whose signature and contents held.
pub enum Opened {
    /// A report, re-judged from its transcript where one was beside it.
    Report {
        /// The verified report.
        verified: Box<VerifiedReport>,
        /// The Test Result beside it, checked against it, where there is one.
        test_result: Option<TestResult>,
    },
    /// A merge summary, every report it names verified and the summary re-derived.
    Summary(Box<VerifiedSummary>),
    /// A Verification Summary.
    VerificationSummary {
        /// The summary.
        summary: VerificationSummary,
        /// The SHA-256 of the report envelope it is about.
        report_sha256: String,
        /// Whether the report beside it is the one it is about (none where no report
        /// is beside it).
        about_beside: Option<bool>,
    },
}

/// Why a document did not verify.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A Test Result was given alone.
    #[error("it is a run's in-toto Test Result; verify the report beside it ({ENVELOPE_FILE}), which checks both")]
    TestResultAlone,
    /// A file beside it could not be read.
    #[error("{0}")]
    Beside(String),
    /// The report, the Verification Summary or the Test Result did not verify.
    #[error(transparent)]
    Report(#[from] VerifyError),
    /// The merge summary did not verify.
    #[error(transparent)]
    Summary(#[from] shard::MergeError),
    /// The Test Result beside the report did not verify.
    #[error("{TEST_RESULT_FILE} does not verify: {0}")]
    TestResult(VerifyError),
}

/// Verifies `envelope` as the kind it claims to be, signed by `key`, reading what it
/// needs through `beside`; `challenge` is the nonce a report must carry, where the
/// buyer gave one. Each check that held is told to `on_check`.
pub fn open(
    envelope: &[u8],
    key: &VerifyingKey,
    beside: &dyn Beside,
    challenge: Option<&[u8]>,
    mut on_check: impl FnMut(String),
) -> Result<Opened, OpenError> {
    match Kind::of(envelope) {
        Kind::TestResult => Err(OpenError::TestResultAlone),
        Kind::VerificationSummary => {
            let (summary, report_sha256) = attestation::open_verification_summary(envelope, key, &mut on_check)?;
            let about_beside = beside
                .read(ENVELOPE_FILE)
                .map_err(OpenError::Beside)?
                .map(|b| crate::sha256_hex(&b) == report_sha256);
            Ok(Opened::VerificationSummary {
                summary,
                report_sha256,
                about_beside,
            })
        }
        Kind::Summary => {
            let load = |record: &ShardRecord| shard_of(record, beside);
            Ok(Opened::Summary(Box::new(shard::verify_summary(
                envelope, key, load, on_check,
            )?)))
        }
        Kind::Report => {
            let transcript = beside.read(TRANSCRIPT_FILE).map_err(OpenError::Beside)?;
            let verified = report::verify(envelope, key, transcript.as_deref(), challenge, &mut on_check)?;
            let test_result = match beside.read(TEST_RESULT_FILE).map_err(OpenError::Beside)? {
                Some(bytes) => Some(
                    attestation::verify_test_result(&bytes, key, envelope, &verified, &mut on_check)
                        .map_err(OpenError::TestResult)?,
                ),
                None => None,
            };
            Ok(Opened::Report {
                verified: Box::new(verified),
                test_result,
            })
        }
    }
}

/// One report a merge summary names, read from the layout merge writes
/// (`shards/NN/report.dsse.json`, its transcript and signer's key beside it) and
/// verified in full.
fn shard_of(record: &ShardRecord, beside: &dyn Beside) -> Result<Shard, String> {
    // Names come from the signed summary; only the layout merge writes is read.
    let folder = record
        .envelope
        .strip_prefix(&format!("{}/", shard::SHARDS_DIR))
        .and_then(|rest| rest.strip_suffix(&format!("/{ENVELOPE_FILE}")))
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        .ok_or_else(|| format!("not a name merge writes ({}/NN/{ENVELOPE_FILE})", shard::SHARDS_DIR))?;
    let file = |name: &str| format!("{}/{folder}/{name}", shard::SHARDS_DIR);
    let read = |name: &str| {
        beside
            .read(&file(name))?
            .ok_or_else(|| format!("{}: no such file", file(name)))
    };
    let bytes = read(ENVELOPE_FILE)?;
    let transcript = read(TRANSCRIPT_FILE)?;
    let public = beside.public_key(&file(crate::report::key::PUBLIC_KEY_FILE))?;
    let verified = report::verify(&bytes, &public, Some(&transcript), None, |_| {})
        .map_err(|e| format!("does not verify: {e}"))?;
    Ok(Shard {
        name: record.envelope.clone(),
        sha256: crate::sha256_hex(&bytes),
        verified,
    })
}
