//! Runs at scale: [`Summary`], one signed statement over many verified reports
//! (`tenantcheck merge`), with [`verify_summary`], the only way to obtain a
//! [`VerifiedSummary`]. The reports may be the shares of one run
//! ([`crate::partition::Partition`]).
//!
//! A vendor certifying many models and regions runs one process per profile, or splits
//! one profile's suite into shares run side by side (a CI matrix, a Kubernetes Indexed
//! Job). Each process signs its own report over its own transcript. Merging verifies
//! every report in full (signature, transcript, re-check of the verdicts) and groups
//! them into *runs*: the reports of one profile and one suite, either one whole report
//! or every share `1/n` to `n/n` of one partition. Within a run each case's verdict is
//! the one of the share that owns it; a share that ran a case it does not own, a
//! missing share, or two reports claiming the same share refuse the merge.
//!
//! The summary is an in-toto Statement v1 whose subjects are the reports' envelopes
//! (by their SHA-256), with the predicate `urn:tenantcheck:merge:v1`, in a DSSE
//! envelope signed with ed25519, as reports are. Verifying it re-verifies every report
//! it names and re-derives the summary from them: a summary that does not follow from
//! its reports is refused, as a report whose verdicts do not follow from its
//! transcript is.

use crate::outcome::Verdict;
use crate::partition::Partition;
use crate::report::dsse::Envelope;
use crate::report::{Statement, Subject, ToolInfo, Totals, VerifiedReport, VerifyError};
use crate::threat::{Severity, Threat};
use ed25519_dalek::{SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// The predicate type of a merge summary.
pub const SUMMARY_PREDICATE_TYPE: &str = "urn:tenantcheck:merge:v1";

/// The summary's file name in the merge folder.
pub const SUMMARY_FILE: &str = "summary.dsse.json";

/// The folder, inside the merge folder, that holds a copy of each report merged.
pub const SHARDS_DIR: &str = "shards";

/// The summary format's version.
pub const SUMMARY_FORMAT_VERSION: u32 = 1;

/// A verified report offered to [`merge`], with the name its envelope has in the merge
/// folder (`shards/01/report.dsse.json`) and the SHA-256 of the envelope's bytes.
#[derive(Clone, Debug)]
pub struct Shard {
    /// Where its envelope is in the merge folder, `/`-separated.
    pub name: String,
    /// SHA-256 of the envelope file (hex).
    pub sha256: String,
    /// The report, verified with its transcript.
    pub verified: VerifiedReport,
}

/// One signed summary over many reports.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Summary {
    /// [`SUMMARY_FORMAT_VERSION`] of the tool that wrote it.
    pub format_version: u32,
    /// The tool and its version.
    pub tool: ToolInfo,
    /// Fail if any run failed, else inconclusive if any was, else pass.
    pub verdict: Verdict,
    /// The cases of every run, by verdict.
    pub totals: Totals,
    /// One entry per profile and suite.
    pub runs: Vec<MergedRun>,
}

/// The reports of one profile and one suite: one whole report, or every share of a
/// partition.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MergedRun {
    /// The profile's name.
    pub vendor: String,
    /// The model tested.
    pub model: String,
    /// Where the profile came from (a path, or `embedded`).
    pub source: String,
    /// SHA-256 of the profile file, when it came from one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub profile_sha256: Option<String>,
    /// The suite's digest.
    pub suite: String,
    /// The buyer's challenge every report mixed into its run secret (hex).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub challenge: Option<String>,
    /// Fail if any case failed, else inconclusive if any was, else pass.
    pub verdict: Verdict,
    /// Cases by verdict.
    pub totals: Totals,
    /// The reports, by share.
    pub shards: Vec<ShardRecord>,
    /// Every case of the suite, in id order, with the verdict of the report that ran it.
    pub cases: Vec<MergedCase>,
}

/// One report in a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ShardRecord {
    /// Its envelope in the merge folder (`shards/01/report.dsse.json`).
    pub envelope: String,
    /// SHA-256 of the envelope (also a subject of the statement).
    pub sha256: String,
    /// The id of the key that signed it.
    pub key_id: String,
    /// Its share; absent for a whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition: Option<Partition>,
    /// Its own verdict.
    pub verdict: Verdict,
    /// When it started and ended (RFC 3339).
    pub started_at: String,
    /// When it ended.
    pub finished_at: String,
    /// Whether it was interrupted before every case of its share finished.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub interrupted: bool,
}

/// One case of a run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct MergedCase {
    /// The case's id.
    pub id: String,
    /// The threat it covers.
    pub threat: Threat,
    /// How bad a failure is.
    pub severity: Severity,
    /// Its verdict in the report that owns it.
    pub verdict: Verdict,
    /// That report: its index in the run's `shards`.
    pub shard: usize,
    /// The case's one-line summary there.
    pub summary: String,
}

/// Why reports could not be merged, or a summary did not verify.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum MergeError {
    /// Nothing to merge.
    #[error("no report to merge")]
    Empty,
    /// Two reports of one profile and suite, neither a share of a partition.
    #[error(
        "{first} and {second} are two whole runs of one profile and suite ({vendor}); merge the shares of one run, or one report per profile"
    )]
    TwoWholeRuns {
        /// The profile's name.
        vendor: String,
        /// One report.
        first: String,
        /// The other.
        second: String,
    },
    /// A run's reports do not make one partition.
    #[error("the reports of {vendor} do not make one partition: {problem}")]
    Partition {
        /// The profile's name.
        vendor: String,
        /// What is wrong (a missing share, one given twice, two counts, a whole run among shares).
        problem: String,
    },
    /// The shares of one run disagree on the suite's cases.
    #[error("{shard} lists other cases than {first} (the suite's cases differ)")]
    Cases {
        /// The report.
        shard: String,
        /// The run's first report.
        first: String,
    },
    /// A share ran a case another share owns.
    #[error("{shard} (share {partition}) ran {case}, which share {owner} owns")]
    NotItsCase {
        /// The report.
        shard: String,
        /// Its share.
        partition: Partition,
        /// The case.
        case: String,
        /// The share that owns it.
        owner: u32,
    },
    /// The summary's envelope or statement.
    #[error("{0}")]
    Envelope(#[from] VerifyError),
    /// The summary's format is not one this tool reads.
    #[error("the payload is not a merge summary this tool reads: {0}")]
    Statement(String),
    /// A report the summary names is not its subject, or is missing.
    #[error("{name}: {problem}")]
    Shard {
        /// The report's name in the merge folder.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// Re-merging the reports does not give the signed summary.
    #[error("the summary does not follow from its reports: {0}")]
    Rederived(String),
}

/// Joins verified reports into a summary: grouped into runs by profile, suite and
/// challenge; within a run, each case's verdict from the share that owns it.
pub fn merge(shards: &[Shard], tool: ToolInfo) -> Result<Summary, MergeError> {
    if shards.is_empty() {
        return Err(MergeError::Empty);
    }
    // A run: one profile (by its file's digest where there is one), one model, one
    // suite, one challenge. The embedded vendor's URL differs from process to
    // process, so the URL is not part of the key.
    type Key = (String, String, String, Option<String>);
    let key_of = |s: &Shard| -> Key {
        let r = s.verified.report();
        (
            r.vendor
                .profile_sha256
                .clone()
                .unwrap_or_else(|| r.vendor.source.clone()),
            r.vendor.profile.model.clone(),
            r.suite.digest.clone(),
            r.run_secret.challenge.clone(),
        )
    };
    let mut groups: BTreeMap<Key, Vec<&Shard>> = BTreeMap::new();
    for s in shards {
        groups.entry(key_of(s)).or_default().push(s);
    }
    let mut runs = Vec::new();
    for (_, mut group) in groups {
        group.sort_by_key(|s| (s.verified.report().partition, s.name.clone()));
        runs.push(merge_run(&group)?);
    }
    runs.sort_by(|a, b| (&a.vendor, &a.model, &a.suite).cmp(&(&b.vendor, &b.model, &b.suite)));
    let (totals, verdict) = crate::report::tally(runs.iter().flat_map(|r| r.cases.iter().map(|c| c.verdict)));
    Ok(Summary {
        format_version: SUMMARY_FORMAT_VERSION,
        tool,
        verdict,
        totals,
        runs,
    })
}

fn merge_run(group: &[&Shard]) -> Result<MergedRun, MergeError> {
    let first = group[0].verified.report();
    let vendor = first.vendor.profile.name.clone();
    let whole: Vec<&&Shard> = group
        .iter()
        .filter(|s| s.verified.report().partition.is_none())
        .collect();
    if whole.len() > 1 {
        return Err(MergeError::TwoWholeRuns {
            vendor,
            first: whole[0].name.clone(),
            second: whole[1].name.clone(),
        });
    }
    let partition_problem = |problem: String| MergeError::Partition {
        vendor: vendor.clone(),
        problem,
    };
    if !whole.is_empty() && group.len() > 1 {
        return Err(partition_problem(format!(
            "{} is a whole run, beside shares of a partition",
            whole[0].name
        )));
    }
    if whole.is_empty() {
        let counts: BTreeSet<u32> = group
            .iter()
            .filter_map(|s| s.verified.report().partition.map(|p| p.count))
            .collect();
        if counts.len() > 1 {
            return Err(partition_problem(format!(
                "shares of {} counts ({})",
                counts.len(),
                counts.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            )));
        }
        let count = counts.into_iter().next().unwrap_or(1);
        let mut seen: BTreeMap<u32, &str> = BTreeMap::new();
        for s in group {
            let p = s.verified.report().partition.expect("shares only");
            if let Some(other) = seen.insert(p.index, &s.name) {
                return Err(partition_problem(format!(
                    "share {p} is given twice ({other} and {})",
                    s.name
                )));
            }
        }
        let missing: Vec<String> = (1..=count)
            .filter(|i| !seen.contains_key(i))
            .map(|i| format!("{i}/{count}"))
            .collect();
        if !missing.is_empty() {
            return Err(partition_problem(format!("share {} missing", missing.join(", "))));
        }
    }
    let ids: Vec<&str> = first.cases.iter().map(|c| c.id.as_str()).collect();
    for s in group {
        let theirs: Vec<&str> = s.verified.report().cases.iter().map(|c| c.id.as_str()).collect();
        if theirs != ids {
            return Err(MergeError::Cases {
                shard: s.name.clone(),
                first: group[0].name.clone(),
            });
        }
    }
    let mut cases = Vec::with_capacity(ids.len());
    for (position, case) in first.cases.iter().enumerate() {
        let owner = group
            .iter()
            .position(|s| s.verified.report().partition.is_none_or(|p| p.owns(position)))
            .expect("a complete partition owns every position");
        for (i, s) in group.iter().enumerate() {
            let r = s.verified.report();
            let c = &r.cases[position];
            if i != owner && c.outcome.verdict != Verdict::Skipped {
                return Err(MergeError::NotItsCase {
                    shard: s.name.clone(),
                    partition: r.partition.expect("only shares share a run"),
                    case: c.id.clone(),
                    owner: group[owner].verified.report().partition.map_or(1, |p| p.index),
                });
            }
        }
        let owned = &group[owner].verified.report().cases[position];
        cases.push(MergedCase {
            id: case.id.clone(),
            threat: owned.threat,
            severity: owned.severity,
            verdict: owned.outcome.verdict,
            shard: owner,
            summary: owned.outcome.summary.clone(),
        });
    }
    let (totals, verdict) = crate::report::tally(cases.iter().map(|c| c.verdict));
    Ok(MergedRun {
        vendor,
        model: first.vendor.profile.model.clone(),
        source: first.vendor.source.clone(),
        profile_sha256: first.vendor.profile_sha256.clone(),
        suite: first.suite.digest.clone(),
        challenge: first.run_secret.challenge.clone(),
        verdict,
        totals,
        shards: group
            .iter()
            .map(|s| {
                let r = s.verified.report();
                ShardRecord {
                    envelope: s.name.clone(),
                    sha256: s.sha256.clone(),
                    key_id: s.verified.key_id().to_owned(),
                    partition: r.partition,
                    verdict: r.verdict,
                    started_at: r.started_at.clone(),
                    finished_at: r.finished_at.clone(),
                    interrupted: r.interrupted.is_some(),
                }
            })
            .collect(),
        cases,
    })
}

impl Summary {
    /// `1 run`, `3 runs`: how many profiles and suites it covers.
    pub fn runs_in_words(&self) -> String {
        match self.runs.len() {
            1 => "1 run".to_owned(),
            n => format!("{n} runs"),
        }
    }

    /// Wraps the summary in an in-toto Statement whose subjects are the reports'
    /// envelopes, and signs it.
    pub fn sign(&self, key: &SigningKey) -> Envelope {
        let subject = self
            .runs
            .iter()
            .flat_map(|r| &r.shards)
            .map(|s| Subject::new(&s.envelope, &s.sha256))
            .collect();
        Statement::new(subject, SUMMARY_PREDICATE_TYPE, self).sign(key)
    }
}

/// Whether `envelope` is a DSSE envelope whose statement claims to carry a merge
/// summary (nothing is verified: it tells `verify` which check to run).
pub fn is_summary(envelope: &[u8]) -> bool {
    let Ok(env) = serde_json::from_slice::<Envelope>(envelope) else {
        return false;
    };
    env.unverified_payload()
        .ok()
        .and_then(|p| serde_json::from_slice::<serde_json::Value>(&p).ok())
        .is_some_and(|v| v["predicateType"] == SUMMARY_PREDICATE_TYPE)
}

/// A summary whose signature was checked, every report it names re-verified, and
/// which follows from them. Only [`verify_summary`] makes one.
#[derive(Clone, Debug)]
pub struct VerifiedSummary {
    summary: Summary,
    key_id: String,
}

impl VerifiedSummary {
    /// The summary.
    pub fn summary(&self) -> &Summary {
        &self.summary
    }

    /// The id of the key that signed it.
    pub fn key_id(&self) -> &str {
        &self.key_id
    }
}

/// Verifies a summary: its signature by `key`, then each report it names, obtained
/// from `load` (which reads the report's envelope, transcript and signer's key from
/// the merge folder and verifies it in full), against the subject's digest and the
/// recorded signer; then merges those reports again and requires the signed summary.
pub fn verify_summary(
    envelope: &[u8],
    key: &VerifyingKey,
    mut load: impl FnMut(&ShardRecord) -> Result<Shard, String>,
    mut on_check: impl FnMut(String),
) -> Result<VerifiedSummary, MergeError> {
    let (statement, key_id) = Statement::<Summary>::open(envelope, key, SUMMARY_PREDICATE_TYPE, &mut on_check)?;
    let summary = statement.predicate;
    if summary.format_version != SUMMARY_FORMAT_VERSION {
        return Err(MergeError::Statement(format!(
            "summary format {} (this tool reads {SUMMARY_FORMAT_VERSION})",
            summary.format_version
        )));
    }
    let subjects: BTreeMap<&str, &str> = statement
        .subject
        .iter()
        .filter_map(|s| s.digest.get("sha256").map(|d| (s.name.as_str(), d.as_str())))
        .collect();
    let mut shards = Vec::new();
    for record in summary.runs.iter().flat_map(|r| &r.shards) {
        let problem = |problem: String| MergeError::Shard {
            name: record.envelope.clone(),
            problem,
        };
        if subjects.get(record.envelope.as_str()) != Some(&record.sha256.as_str()) {
            return Err(problem(
                "not a subject of the statement with its recorded digest".into(),
            ));
        }
        let shard = load(record).map_err(problem)?;
        if shard.sha256 != record.sha256 {
            return Err(problem(format!(
                "its SHA-256 is {}, the summary says {}: the report was changed",
                shard.sha256, record.sha256
            )));
        }
        if shard.verified.key_id() != record.key_id {
            return Err(problem(format!(
                "signed by key {}, the summary says {}",
                shard.verified.key_id(),
                record.key_id
            )));
        }
        on_check(format!(
            "{} verified (sha256 {}, key {}, verdict {})",
            record.envelope,
            record.sha256,
            record.key_id,
            shard.verified.report().verdict.label()
        ));
        shards.push(shard);
    }
    let again = merge(&shards, summary.tool.clone())?;
    if again != summary {
        let why = first_difference(&summary, &again);
        return Err(MergeError::Rederived(why));
    }
    on_check(format!(
        "the summary follows from its {} reports: {}, {}",
        shards.len(),
        summary.runs_in_words(),
        summary.totals
    ));
    Ok(VerifiedSummary { summary, key_id })
}

/// Where a signed summary and the one re-derived part, in words.
fn first_difference(signed: &Summary, again: &Summary) -> String {
    if signed.runs.len() != again.runs.len() {
        return format!("{} runs signed, {} re-derived", signed.runs.len(), again.runs.len());
    }
    for (a, b) in signed.runs.iter().zip(&again.runs) {
        for (x, y) in a.cases.iter().zip(&b.cases) {
            if x != y {
                return format!(
                    "{} ({}): signed {} from {}, re-derived {} from {}",
                    x.id,
                    a.vendor,
                    x.verdict.label(),
                    a.shards.get(x.shard).map_or("?", |s| s.envelope.as_str()),
                    y.verdict.label(),
                    b.shards.get(y.shard).map_or("?", |s| s.envelope.as_str())
                );
            }
        }
        if a != b {
            return format!("the run of {} differs (its shares, counts or verdict)", a.vendor);
        }
    }
    "the totals or verdict differ".into()
}
