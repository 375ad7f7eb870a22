//! The run folder: the files one run writes, where they go, and how the files beside a
//! report are found.
//!
//! ```text
//! reports/runs/20261203T131400Z-a1b2/   (or the folder --out names)
//!   transcript.jsonl        every exchange, hash-chained, written as the run goes
//!   report.dsse.json        the signed report
//!   test-result.dsse.json   the same run as an in-toto Test Result, signed alike
//!   report.html, report.md, report.junit.xml
//!   signing-key.pem         the private key, when the run made one (mode 0600)
//!   signing-key.pub.pem, signing-key.pub.json
//!   bundle.tar              what `tenantcheck bundle` makes for a buyer
//! ```
//!
//! A folder holds one run: [`create`] refuses a folder that already holds a transcript
//! or a report. `verify`, `render` and `run --resume` find the transcript and the public
//! key [`beside`] the report they are given.

use std::path::{Path, PathBuf};

pub use crate::attestation::TEST_RESULT_FILE;
pub use crate::report::key::{PRIVATE_KEY_FILE, PUBLIC_KEY_FILE, PUBLIC_KEY_JSON_FILE};
pub use crate::report::{ENVELOPE_FILE, HTML_FILE, JUNIT_FILE, MARKDOWN_FILE, TRANSCRIPT_FILE};
pub use crate::tlog::END_FILE as LOG_END_FILE;

/// Where runs go when `--out` is not given: a new folder per run.
pub const DEFAULT_RUNS_DIR: &str = "reports/runs";

/// The default bundle name in a run folder.
pub const BUNDLE_FILE: &str = "bundle.tar";

/// A run folder that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("run folder {}: {problem}", path.display())]
pub struct RunDirError {
    /// The folder.
    pub path: PathBuf,
    /// What is wrong, and the fix.
    pub problem: String,
}

/// Creates the folder for a new run: `out`, or a fresh folder under
/// [`DEFAULT_RUNS_DIR`] named by the time and two random bytes. Refuses a folder that
/// already holds a run.
pub fn create(out: Option<&Path>) -> Result<PathBuf, RunDirError> {
    let dir = match out {
        Some(d) => d.to_owned(),
        None => {
            let stamp: String = crate::now_rfc3339()
                .chars()
                .take(19)
                .filter(|c| c.is_ascii_digit() || *c == 'T')
                .collect();
            Path::new(DEFAULT_RUNS_DIR).join(format!("{stamp}Z-{}", crate::hex(&crate::random_bytes::<2>())))
        }
    };
    let problem = |problem: String| RunDirError {
        path: dir.clone(),
        problem,
    };
    std::fs::create_dir_all(&dir).map_err(|e| problem(e.to_string()))?;
    for file in [TRANSCRIPT_FILE, ENVELOPE_FILE] {
        if dir.join(file).exists() {
            return Err(problem(format!(
                "already holds a run ({file}); fix: choose another --out, or remove the old run"
            )));
        }
    }
    Ok(dir)
}

/// The file `name` in the folder of `report` (the report's own folder, or `.`).
pub fn beside(report: &Path, name: &str) -> PathBuf {
    report.parent().unwrap_or(Path::new(".")).join(name)
}

/// [`beside`], when that file exists.
pub fn existing_beside(report: &Path, name: &str) -> Option<PathBuf> {
    Some(beside(report, name)).filter(|p| p.exists())
}

/// Reads the file `name` of the run folder `dir`.
pub fn read(dir: &Path, name: &str) -> Result<Vec<u8>, RunDirError> {
    std::fs::read(dir.join(name)).map_err(|e| RunDirError {
        path: dir.to_owned(),
        problem: format!("cannot read {name}: {e}"),
    })
}

/// The files beside a signed document on disk, as [`crate::document::open`] reads
/// them: those of the document's folder, paths `/`-separated under it, and a transcript
/// given elsewhere (`verify --transcript FILE`) in place of the one beside it.
pub struct Folder {
    dir: PathBuf,
    transcript: Option<PathBuf>,
}

impl Folder {
    /// The folder of the document at `envelope`, the transcript at `transcript` where
    /// given.
    pub fn of(envelope: &Path, transcript: Option<&Path>) -> Folder {
        Folder {
            dir: envelope.parent().unwrap_or(Path::new(".")).to_owned(),
            transcript: transcript.map(Path::to_owned),
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        match &self.transcript {
            Some(t) if name == TRANSCRIPT_FILE => t.clone(),
            _ => name.split('/').fold(self.dir.clone(), |p, part| p.join(part)),
        }
    }
}

impl crate::document::Beside for Folder {
    fn read(&self, name: &str) -> Result<Option<Vec<u8>>, String> {
        let path = self.path(name);
        match std::fs::read(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            // A file not there is absent, but not a transcript the user named.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    && !(name == TRANSCRIPT_FILE && self.transcript.is_some()) =>
            {
                Ok(None)
            }
            Err(e) => Err(format!("{}: {e}", path.display())),
        }
    }

    fn public_key(&self, name: &str) -> Result<ed25519_dalek::VerifyingKey, String> {
        crate::report::key::read_public(&self.path(name)).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_folder_holding_a_run_is_refused_and_files_are_found_beside_a_report() {
        let dir = std::env::temp_dir().join(format!("tc-run-dir-{}", crate::hex(&crate::random_bytes::<6>())));
        assert_eq!(create(Some(&dir)).unwrap(), dir);
        let report = dir.join(ENVELOPE_FILE);
        assert_eq!(existing_beside(&report, TRANSCRIPT_FILE), None);
        std::fs::write(dir.join(TRANSCRIPT_FILE), b"").unwrap();
        assert_eq!(
            existing_beside(&report, TRANSCRIPT_FILE),
            Some(dir.join(TRANSCRIPT_FILE))
        );
        let err = create(Some(&dir)).unwrap_err().to_string();
        assert!(
            err.contains("already holds a run (transcript.jsonl)") && err.contains("fix:"),
            "{err}"
        );
        assert_eq!(beside(&report, PUBLIC_KEY_FILE), dir.join(PUBLIC_KEY_FILE));
        // A report named without a folder: its files are named without one too.
        assert_eq!(
            beside(Path::new(ENVELOPE_FILE), PUBLIC_KEY_FILE),
            Path::new(PUBLIC_KEY_FILE)
        );
        std::fs::remove_dir_all(dir).unwrap();
    }
}
