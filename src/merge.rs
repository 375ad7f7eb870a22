//! `tenantcheck merge`: verifies many signed reports (the shares of a partitioned run,
//! or one report per profile) and signs one summary over them; and the file side of
//! verifying such a summary. The rules (what makes a run, which share owns a case,
//! what the summary says) are the evidence crate's [`crate::shard`].
//!
//! ```text
//! DIR/                        (the folder --out names)
//!   summary.dsse.json         the signed summary: every report's envelope a subject
//!   signing-key.pem           the private key, when merge made one (mode 0600)
//!   signing-key.pub.pem       its public half (with --key too)
//!   shards/01/                a copy of each report merged, as verify reads it:
//!     report.dsse.json
//!     transcript.jsonl
//!     signing-key.pub.pem     the key it was verified with
//!   shards/02/ ...
//! ```

use crate::report::{self, key};
use crate::run_dir;
use crate::shard::{self, SHARDS_DIR, SUMMARY_FILE, Shard, Summary, VerifiedSummary};
use ed25519_dalek::VerifyingKey;
use std::path::{Path, PathBuf};

/// What `tenantcheck merge` is given.
#[derive(Clone, Debug)]
pub struct MergeOptions {
    /// The reports: run folders, or their `report.dsse.json`.
    pub reports: Vec<PathBuf>,
    /// The merge folder (created; it must hold no summary yet).
    pub out: PathBuf,
    /// The private key to sign the summary with; `None`: a fresh pair in `out`.
    pub key: Option<PathBuf>,
    /// The public keys the reports must be signed by; empty: each report's
    /// `signing-key.pub.pem` beside it (integrity, not who signed).
    pub trusted: Vec<PathBuf>,
}

/// A summary written.
#[derive(Debug)]
pub struct Merged {
    /// The summary.
    pub summary: Summary,
    /// Its envelope's path.
    pub envelope: PathBuf,
    /// The id of the key that signed it.
    pub key_id: String,
    /// The private key merge made, when it made one.
    pub fresh_key: Option<PathBuf>,
}

/// Why nothing was merged, or a summary did not verify.
#[derive(Debug, thiserror::Error)]
pub enum MergeFailure {
    /// An input or the output cannot be read or written: nothing was judged.
    #[error("{0}")]
    Setup(String),
    /// A report does not verify, the reports do not fit together, or a summary does
    /// not follow from its reports.
    #[error("{0}")]
    Refused(String),
}

/// Verifies every report, copies each into `out`'s `shards/`, merges them and signs the
/// summary. Nothing is written but into `out`; a report that does not verify, or
/// reports that do not make whole runs, refuse the merge.
pub fn merge(opts: &MergeOptions, mut on_check: impl FnMut(String)) -> Result<Merged, MergeFailure> {
    let setup = |what: &Path, e: &dyn std::fmt::Display| MergeFailure::Setup(format!("{}: {e}", what.display()));
    if opts.reports.is_empty() {
        return Err(MergeFailure::Setup(
            "no report given: name the run folders (or their report.dsse.json) to merge".into(),
        ));
    }
    let trusted: Vec<VerifyingKey> = opts
        .trusted
        .iter()
        .map(|p| key::read_public(p).map_err(|e| MergeFailure::Setup(e.to_string())))
        .collect::<Result<_, _>>()?;
    if opts.out.join(SUMMARY_FILE).exists() {
        return Err(setup(
            &opts.out,
            &"already holds a summary; fix: name a new folder with --out",
        ));
    }
    let width = opts.reports.len().to_string().len().max(2);
    let mut staged = Vec::new();
    for (i, given) in opts.reports.iter().enumerate() {
        let envelope = if given.is_dir() {
            given.join(run_dir::ENVELOPE_FILE)
        } else {
            given.clone()
        };
        let bytes = std::fs::read(&envelope).map_err(|e| setup(&envelope, &e))?;
        let transcript_path = run_dir::beside(&envelope, run_dir::TRANSCRIPT_FILE);
        let transcript = std::fs::read(&transcript_path).map_err(|e| {
            setup(
                &transcript_path,
                &format!("{e} (a report is merged only with its transcript, which verify re-checks)"),
            )
        })?;
        let public = match trusted.as_slice() {
            [] => {
                let path = run_dir::beside(&envelope, run_dir::PUBLIC_KEY_FILE);
                key::read_public(&path).map_err(|e| MergeFailure::Setup(e.to_string()))?
            }
            keys => signer_among(&bytes, keys).ok_or_else(|| {
                MergeFailure::Refused(format!(
                    "{} is signed by none of the trusted keys (--shard-key), so it is not merged",
                    envelope.display()
                ))
            })?,
        };
        let verified = report::verify(&bytes, &public, Some(&transcript), None, |_| {}).map_err(|e| {
            MergeFailure::Refused(format!(
                "{} does not verify, so nothing was merged: {e}",
                envelope.display()
            ))
        })?;
        let name = format!("{SHARDS_DIR}/{:0width$}/{}", i + 1, run_dir::ENVELOPE_FILE);
        on_check(format!(
            "{} verified with its transcript (key {}, verdict {}{})",
            envelope.display(),
            verified.key_id(),
            verified.report().verdict.label(),
            verified
                .report()
                .partition
                .map(|p| format!(", share {p}"))
                .unwrap_or_default()
        ));
        staged.push((
            Shard {
                name,
                sha256: crate::sha256_hex(&bytes),
                verified,
            },
            bytes,
            transcript,
            public,
        ));
    }
    let shards: Vec<Shard> = staged.iter().map(|(s, ..)| s.clone()).collect();
    let summary = shard::merge(
        &shards,
        crate::report::ToolInfo {
            name: "tenantcheck".into(),
            version: crate::TOOL_VERSION.into(),
        },
    )
    .map_err(|e| MergeFailure::Refused(format!("nothing was merged: {e}")))?;

    std::fs::create_dir_all(&opts.out).map_err(|e| setup(&opts.out, &e))?;
    for (s, bytes, transcript, public) in &staged {
        let envelope = opts.out.join(&s.name);
        let dir = envelope.parent().expect("shards/NN/report.dsse.json");
        std::fs::create_dir_all(dir).map_err(|e| setup(dir, &e))?;
        let write = |path: PathBuf, bytes: &[u8]| std::fs::write(&path, bytes).map_err(|e| setup(&path, &e));
        write(envelope.clone(), bytes)?;
        write(dir.join(run_dir::TRANSCRIPT_FILE), transcript)?;
        write(dir.join(run_dir::PUBLIC_KEY_FILE), key::public_pem(public).as_bytes())?;
    }
    let (signing_key, fresh_key) = match &opts.key {
        Some(path) => {
            let k = key::read_private(path).map_err(|e| MergeFailure::Setup(e.to_string()))?;
            key::write_public(&opts.out, &k.verifying_key()).map_err(|e| MergeFailure::Setup(e.to_string()))?;
            (k, None)
        }
        None => {
            let (k, private, _) = key::write_new_pair(&opts.out).map_err(|e| MergeFailure::Setup(e.to_string()))?;
            (k, Some(private))
        }
    };
    let envelope = opts.out.join(SUMMARY_FILE);
    let signed = serde_json::to_vec_pretty(&summary.sign(&signing_key)).expect("envelopes serialise");
    std::fs::write(&envelope, signed).map_err(|e| setup(&envelope, &e))?;
    Ok(Merged {
        summary,
        envelope,
        key_id: key::key_id(&signing_key.verifying_key()),
        fresh_key,
    })
}

/// The trusted key whose signature the envelope claims to carry.
fn signer_among(envelope: &[u8], keys: &[VerifyingKey]) -> Option<VerifyingKey> {
    let env: report::dsse::Envelope = serde_json::from_slice(envelope).ok()?;
    let ids: Vec<&str> = env.key_ids().collect();
    keys.iter().find(|k| ids.contains(&key::key_id(k).as_str())).copied()
}

/// Verifies the summary at `envelope` with `key`: each report it names is read from the
/// merge folder (its envelope, the transcript and the public key beside it) and
/// verified in full, then the summary is re-derived from them
/// ([`crate::document::open`]).
pub fn verify(
    envelope: &Path,
    bytes: &[u8],
    key: &VerifyingKey,
    on_check: impl FnMut(String),
) -> Result<VerifiedSummary, MergeFailure> {
    use crate::document::{Kind, Opened, open};
    if Kind::of(bytes) != Kind::Summary {
        return Err(MergeFailure::Refused(format!(
            "{} is not a merge summary",
            envelope.display()
        )));
    }
    match open(bytes, key, &run_dir::Folder::of(envelope, None), None, on_check) {
        Ok(Opened::Summary(verified)) => Ok(*verified),
        Ok(_) => unreachable!("a summary opens as a summary"),
        Err(e) => Err(MergeFailure::Refused(e.to_string())),
    }
}

/// The summary as text: one line per run, then one per case.
pub fn render(summary: &Summary) -> String {
    let mut out = Vec::new();
    for run in &summary.runs {
        let shares = match run.shards.as_slice() {
            [one] if one.partition.is_none() => "one whole run".to_owned(),
            shards => format!("{} shares", shards.len()),
        };
        out.push(format!(
            "{} ({}), suite {}: {} ({}; {shares})",
            run.vendor,
            run.model,
            &run.suite[..run.suite.len().min(12)],
            run.verdict.label(),
            run.totals
        ));
        for c in &run.cases {
            let from = run.shards[c.shard]
                .partition
                .map(|p| format!("share {p}"))
                .unwrap_or_else(|| run.shards[c.shard].envelope.clone());
            out.push(format!("  {:<13}{:<34} ({from})", c.verdict.label(), c.id));
        }
    }
    out.push(format!(
        "verdict: {} ({}) over {}",
        summary.verdict.label(),
        summary.totals,
        summary.runs_in_words()
    ));
    out.join("\n")
}
