//! `reports/examples/`: a signed report of the healthy reference vendor and one of the
//! reference vendor with `stale-pages`, each with its transcript, public keys and
//! renderings. This test verifies them (signature, transcript, re-check) and checks the
//! renderings are what the renderers make of them now. Regenerate with:
//!
//! ```sh
//! TENANTCHECK_WRITE_EXAMPLES=1 cargo test --test it examples::
//! ```

use crate::common::{Sim, TempDir, output, run_vendor, tenantcheck};
use std::path::{Path, PathBuf};
use tenantcheck::outcome::Verdict;
use tenantcheck::report::{self, key};

/// The files an example keeps (never the private key).
const KEPT: &[&str] = &[
    report::ENVELOPE_FILE,
    tenantcheck::attestation::TEST_RESULT_FILE,
    report::TRANSCRIPT_FILE,
    report::HTML_FILE,
    report::MARKDOWN_FILE,
    report::JUNIT_FILE,
    key::PUBLIC_KEY_FILE,
    key::PUBLIC_KEY_JSON_FILE,
];

fn examples() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("reports/examples")
}

fn keep(run_dir: &Path, name: &str) {
    let dir = examples().join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for file in KEPT {
        std::fs::copy(run_dir.join(file), dir.join(file)).unwrap();
    }
}

fn regenerate() {
    let tmp = TempDir::new("examples");
    let healthy = tmp.path().join("healthy");
    let (code, stdout, _) = output(tenantcheck().args(["run", "--out"]).arg(&healthy));
    assert_eq!(code, Some(0), "{stdout}");
    keep(&healthy, "healthy");
    let sim = Sim::start("example-key-a", "example-key-b", &["--fault", "stale-pages"]);
    let profile = sim.profile(tmp.path());
    let stale = tmp.path().join("stale");
    let (code, stdout, _) = run_vendor(&profile, &stale, "example-key-a", "example-key-b");
    assert_eq!(code, Some(1), "{stdout}");
    keep(&stale, "stale-pages");
}

#[test]
fn the_example_reports_verify_and_their_renderings_are_current() {
    if std::env::var_os("TENANTCHECK_WRITE_EXAMPLES").is_some() {
        regenerate();
    }
    for (name, verdict) in [("healthy", Verdict::Pass), ("stale-pages", Verdict::Fail)] {
        let dir = examples().join(name);
        let read = |f: &str| std::fs::read(dir.join(f)).unwrap_or_else(|e| panic!("{name}/{f}: {e}"));
        assert!(
            !dir.join(key::PRIVATE_KEY_FILE).exists(),
            "{name}: an example never holds a private key"
        );
        let public = key::read_public(&dir.join(key::PUBLIC_KEY_FILE)).unwrap();
        let transcript = read(report::TRANSCRIPT_FILE);
        let verified = report::verify(&read(report::ENVELOPE_FILE), &public, Some(&transcript), None, |_| {})
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(verified.report().verdict, verdict, "{name}");
        tenantcheck::attestation::verify_test_result(
            &read(tenantcheck::attestation::TEST_RESULT_FILE),
            &public,
            &read(report::ENVELOPE_FILE),
            &verified,
            |_| {},
        )
        .unwrap_or_else(|e| panic!("{name}: {e}"));
        let stale = "is stale: TENANTCHECK_WRITE_EXAMPLES=1 cargo test --test it examples::";
        let html = tenantcheck::render::html(verified.report(), verified.key_id(), Some(&transcript));
        assert!(
            html.as_bytes() == read(report::HTML_FILE),
            "{name}/{} {stale}",
            report::HTML_FILE
        );
        let md = tenantcheck::render::markdown(verified.report(), verified.key_id());
        assert!(
            md.as_bytes() == read(report::MARKDOWN_FILE),
            "{name}/{} {stale}",
            report::MARKDOWN_FILE
        );
        let junit = tenantcheck::render::junit(verified.report());
        assert!(
            junit.as_bytes() == read(report::JUNIT_FILE),
            "{name}/{} {stale}",
            report::JUNIT_FILE
        );
    }
}
