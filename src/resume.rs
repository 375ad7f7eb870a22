//! Interrupted runs: `run --resume DIR`, which continues one that a signal
//! ([`crate::signal`]) or a budget stopped with an incomplete signed report naming
//! the unfinished cases. `--resume` verifies that
//! report with its transcript and key, runs exactly the unfinished cases again on the
//! same run secret, appends to the same transcript (after a `resume` line), and signs
//! one report over both parts.

use crate::report::{Report, key};
use crate::run_dir::{self, RunDirError};
use crate::session::Session;
use std::path::{Path, PathBuf};

/// An interrupted run being continued (`run --resume DIR`).
pub struct Resumed {
    /// The run folder.
    pub dir: PathBuf,
    /// Its report, verified with its transcript and the folder's public key.
    pub report: Report,
    /// The folder's public key, which signs the continued report too.
    pub public: ed25519_dalek::VerifyingKey,
    /// The cases to run again.
    pub unfinished: Vec<String>,
    /// When it was resumed.
    pub at: String,
}

impl Resumed {
    /// Reads and verifies the interrupted run in `dir`. `filtered`: the command line
    /// names a filter or `--skip`, which a continued run cannot take.
    pub fn load(dir: &Path, filtered: bool) -> Result<Resumed, RunDirError> {
        let problem = |problem: String| RunDirError {
            path: dir.to_owned(),
            problem,
        };
        if filtered {
            return Err(problem(
                "--resume runs exactly the cases the interruption left unfinished: leave out the filter and --skip"
                    .into(),
            ));
        }
        let envelope = run_dir::read(dir, run_dir::ENVELOPE_FILE)?;
        let transcript = run_dir::read(dir, run_dir::TRANSCRIPT_FILE)?;
        let public =
            key::read_public(&dir.join(run_dir::PUBLIC_KEY_FILE)).map_err(|e| problem(format!("signing key: {e}")))?;
        let verified = crate::report::verify(&envelope, &public, Some(&transcript), None, |_| {})
            .map_err(|e| problem(format!("its report does not verify, so it cannot be continued: {e}")))?;
        let report = verified.report().clone();
        let unfinished = match (&report.interrupted, &report.refused) {
            (Some(i), _) => i.unfinished.clone(),
            (None, Some(r)) => r.unfinished.clone(),
            (None, None) => {
                return Err(problem(
                    "its run was not interrupted or stopped: there is nothing to resume".into(),
                ));
            }
        };
        Ok(Resumed {
            dir: dir.to_owned(),
            unfinished,
            report,
            public,
            at: crate::now_rfc3339(),
        })
    }

    /// Registers every canary the first part issued, and reads its transcript into
    /// the session's ledger line by line as the first part did: every request's text is
    /// judged against again, and a leak in an answer to a case cut short still fails it
    /// when it runs again.
    pub fn rescan(&self, session: &Session, transcript: &Path) -> std::io::Result<()> {
        session.preload(&self.report.canaries);
        let bytes = std::fs::read(transcript)?;
        // The report was verified with this transcript before: every line reads.
        for line in crate::transcript::lines(&bytes).flatten() {
            session.replay(&line);
        }
        Ok(())
    }
}
