//! What an auditor does with this crate alone: verify the example reports in
//! `reports/examples/` (signature, transcript chain, run secret, every verdict
//! re-derived from the answers), and see a changed transcript refused.
//!
//! This test depends on `tenantcheck-evidence` and nothing else of the project: it is
//! the proof that a report can be checked without the code that produced it.

use std::path::PathBuf;
use tenantcheck_evidence::outcome::Verdict;
use tenantcheck_evidence::report::{self, key};

fn example(name: &str, file: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../reports/examples")
        .join(name)
        .join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn public_key(name: &str) -> ed25519_dalek::VerifyingKey {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../reports/examples")
        .join(name)
        .join(key::PUBLIC_KEY_FILE);
    key::read_public(&path).unwrap()
}

#[test]
fn the_example_reports_verify_with_the_evidence_crate_alone() {
    for (name, verdict) in [("healthy", Verdict::Pass), ("stale-pages", Verdict::Fail)] {
        let envelope = example(name, report::ENVELOPE_FILE);
        let transcript = example(name, report::TRANSCRIPT_FILE);
        let mut checks = Vec::new();
        let verified = report::verify(&envelope, &public_key(name), Some(&transcript), None, |c| {
            checks.push(c.to_owned())
        })
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(verified.report().verdict, verdict, "{name}");
        assert!(
            checks.iter().any(|c| c.contains("re-derived")),
            "{name}: the verdicts were re-derived: {checks:?}"
        );
    }
}

#[test]
fn a_changed_answer_in_the_transcript_is_refused() {
    let envelope = example("stale-pages", report::ENVELOPE_FILE);
    let transcript = example("stale-pages", report::TRANSCRIPT_FILE);
    let at = transcript
        .windows(b"\"content\":\"".len())
        .rposition(|w| w == b"\"content\":\"")
        .expect("the transcript holds answers")
        + b"\"content\":\"".len();
    let mut changed = transcript.clone();
    changed[at] = if changed[at] == b'x' { b'y' } else { b'x' };
    let result = report::verify(&envelope, &public_key("stale-pages"), Some(&changed), None, |_| {});
    assert!(result.is_err(), "a changed answer byte must not verify");
}
