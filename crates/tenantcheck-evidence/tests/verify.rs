//! What an auditor does with this crate alone: verify the example reports in
//! `reports/examples/` (signature, transcript chain, run secret, every verdict
//! re-derived from the answers) and their in-toto Test Results, and see a changed
//! transcript, and a Test Result that does not follow from its report, refused.
//!
//! This test depends on `tenantcheck-evidence` and nothing else of the project: it is
//! the proof that a report can be checked without the code that produced it.

use std::path::PathBuf;
use tenantcheck_evidence::attestation::{self, TestOutcome, TestResult};
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
        let test_result = attestation::verify_test_result(
            &example(name, attestation::TEST_RESULT_FILE),
            &public_key(name),
            &envelope,
            &verified,
            |_| {},
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let expected = match verdict {
            Verdict::Pass => TestOutcome::Passed,
            _ => TestOutcome::Failed,
        };
        assert_eq!(test_result.result, expected, "{name}");
        let failed: Vec<&str> = verified
            .report()
            .cases
            .iter()
            .filter(|c| c.outcome.verdict == Verdict::Fail)
            .map(|c| c.id.as_str())
            .collect();
        assert_eq!(test_result.failed_tests, failed, "{name}");
        // The other example's envelope is not what this Test Result is about.
        let other = if name == "healthy" { "stale-pages" } else { "healthy" };
        let err = attestation::verify_test_result(
            &example(other, attestation::TEST_RESULT_FILE),
            &public_key(other),
            &envelope,
            &verified,
            |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("subjects are not the report's"), "{name}: {err}");
    }
}

#[test]
fn a_test_result_warns_unless_every_case_ran_and_passed() {
    let envelope = example("healthy", report::ENVELOPE_FILE);
    let verified = report::verify(&envelope, &public_key("healthy"), None, None, |_| {}).unwrap();
    let mut r = verified.report().clone();
    assert_eq!(TestResult::of(&r).result, TestOutcome::Passed);
    assert_eq!(TestResult::of(&r).passed_tests.len(), r.cases.len());

    // A skipped case (a filtered run, a share, an adapter that cannot reach it) is in
    // no list, and the run only warns.
    r.cases[0].outcome.verdict = Verdict::Skipped;
    r.tally();
    let t = TestResult::of(&r);
    assert_eq!(t.result, TestOutcome::Warned);
    assert!(!t.passed_tests.contains(&r.cases[0].id) && t.warned_tests.is_empty());
    let run = t.configuration.iter().find(|d| d.name == "run").unwrap();
    assert_eq!(run.annotations["skippedTests"], serde_json::json!([r.cases[0].id]));

    // An inconclusive case warns by name; a failed one fails the run.
    r.cases[1].outcome.verdict = Verdict::Inconclusive;
    r.cases[2].outcome.verdict = Verdict::Fail;
    r.tally();
    let t = TestResult::of(&r);
    assert_eq!(t.result, TestOutcome::Failed);
    assert_eq!(t.warned_tests, [r.cases[1].id.clone()]);
    assert_eq!(t.failed_tests, [r.cases[2].id.clone()]);

    // A run cut short by a signal never passes, even with every case passed.
    let mut cut = verified.report().clone();
    cut.interrupted = Some(report::Interruption {
        signal: "SIGTERM".into(),
        stopped_at: cut.finished_at.clone(),
        unfinished: vec![],
    });
    assert_eq!(TestResult::of(&cut).result, TestOutcome::Warned);
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

/// The example run folders, read as `document::open` reads any folder.
struct Example(&'static str);

impl tenantcheck_evidence::document::Beside for Example {
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../reports/examples")
            .join(self.0)
            .join(name);
        Ok(std::fs::read(path).ok())
    }

    fn public_key(&self, _: &str) -> Result<ed25519_dalek::VerifyingKey, String> {
        Ok(public_key(self.0))
    }
}

#[test]
fn one_opener_verifies_a_report_with_its_test_result_and_refuses_a_test_result_alone() {
    use tenantcheck_evidence::document::{Kind, OpenError, Opened, open};
    for name in ["healthy", "stale-pages"] {
        let envelope = example(name, report::ENVELOPE_FILE);
        assert_eq!(Kind::of(&envelope), Kind::Report);
        match open(&envelope, &public_key(name), &Example(name), None, |_| {}) {
            Ok(Opened::Report { verified, test_result }) => {
                assert!(
                    verified.transcript().is_some(),
                    "{name}: the transcript beside it was read"
                );
                assert!(test_result.is_some(), "{name}: the Test Result beside it was checked");
            }
            Ok(_) => panic!("{name}: a report opened as something else"),
            Err(e) => panic!("{name}: {e}"),
        }
        // Nothing beside it: the signature and the report alone, no transcript.
        match open(
            &envelope,
            &public_key(name),
            &tenantcheck_evidence::document::Nothing,
            None,
            |_| {},
        ) {
            Ok(Opened::Report { verified, test_result }) => {
                assert!(verified.transcript().is_none() && test_result.is_none(), "{name}");
            }
            _ => panic!("{name}: the report alone verifies"),
        }
        let result = example(name, attestation::TEST_RESULT_FILE);
        assert_eq!(Kind::of(&result), Kind::TestResult);
        assert!(matches!(
            open(&result, &public_key(name), &Example(name), None, |_| {}),
            Err(OpenError::TestResultAlone)
        ));
    }
    // A Test Result of another run beside a report is refused with the report.
    struct Swapped;
    impl tenantcheck_evidence::document::Beside for Swapped {
        fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
            let from = if name == attestation::TEST_RESULT_FILE {
                "stale-pages"
            } else {
                "healthy"
            };
            Example(from).read(name)
        }
        fn public_key(&self, _: &str) -> Result<ed25519_dalek::VerifyingKey, String> {
            Ok(public_key("healthy"))
        }
    }
    let envelope = example("healthy", report::ENVELOPE_FILE);
    assert!(matches!(
        open(&envelope, &public_key("healthy"), &Swapped, None, |_| {}),
        Err(OpenError::TestResult(_))
    ));
}
