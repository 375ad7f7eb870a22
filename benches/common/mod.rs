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

/// Calls `run(i)` for every `i` below `runs`, `jobs` at once (a run mostly waits on the
/// vendor), and returns what each gave, in the order they finished.
pub fn in_parallel<T: Send>(runs: usize, jobs: usize, run: impl Fn(usize) -> T + Sync) -> Vec<T> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..jobs.max(1) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    if i >= runs {
                        break;
                    }
                    let result = run(i);
                    done.lock().expect("no run panicked holding the list").push(result);
                }
            });
        }
    });
    done.into_inner().expect("no run panicked holding the list")
}
