//! What the benchmarks that run the suite share: reading a run folder back through
//! `verify`.

use std::path::Path;
use tenantcheck::report::{self, VerifiedReport, key};

/// The report of run folder `out` as `verify` re-judges it from its transcript, and
/// the transcript; panics with the run's exit status and standard error when there is
/// no report, and when it does not verify.
pub fn verified(out: &Path, run: &std::process::Output) -> (VerifiedReport, Vec<u8>) {
    let envelope = std::fs::read(out.join(report::ENVELOPE_FILE)).unwrap_or_else(|e| {
        panic!(
            "no report in {} ({e}); exit {:?}\n{}",
            out.display(),
            run.status.code(),
            String::from_utf8_lossy(&run.stderr)
        )
    });
    let public = key::read_public(&out.join(key::PUBLIC_KEY_FILE)).expect("the run's public key");
    let transcript = std::fs::read(out.join(report::TRANSCRIPT_FILE)).expect("the transcript");
    let verified = report::verify(&envelope, &public, Some(&transcript), None, |_| {}).expect("the report verifies");
    (verified, transcript)
}
