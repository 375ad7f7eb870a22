//! [`Suite`]: the case catalogue, loaded from TOML files under `suite/`, validated,
//! and hashed.
//!
//! One case per file, named after the behaviour it checks; the case's `id` is its
//! path below the suite folder with `/` written as `.` and without `.toml`
//! (`suite/isolation/canary-residue.toml` is `isolation.canary-residue`). Each file has
//! one header: `id`, `description`, `requirement` (the MUST sentence a buyer reads),
//! `threat` (T1–T12), `severity`, `probe`, `references`, and a `[params]` table that
//! the probe validates.
//!
//! The suite's digest is the SHA-256 of its canonical form: the JSON array of the
//! validated cases (defaults filled in) in id order, with object keys sorted and no
//! white space. Each case also records its file's own SHA-256. The same suite is
//! embedded in the binary ([`Suite::builtin`]), so an installed `tenantcheck` runs
//! the suite it was built with; `--suite DIR` runs the files of a folder instead.

pub use crate::advisory::Advisory;
use crate::probe::{ParamsError, ProbeSpec};
pub use crate::threat::{Severity, Threat};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

// `BUILTIN_FILES` and `BUILTIN_ADVISORIES`: every file under `suite/`, collected by
// `build.rs`.
include!(concat!(env!("OUT_DIR"), "/suite_files.rs"));

/// The folder below the suite folder that holds advisories, not cases.
pub const ADVISORIES_DIR: &str = "advisories";

/// A loaded, validated suite.
#[derive(Clone, Debug)]
pub struct Suite {
    /// The cases, in id order.
    pub cases: Vec<Case>,
    /// The known engine advisories, in id order.
    pub advisories: Vec<Advisory>,
    /// SHA-256 of the suite's canonical form.
    pub digest: String,
}

/// One case.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Case {
    /// `area.behaviour`, derived from the file's path.
    pub id: String,
    /// What the case does.
    pub description: String,
    /// The requirement, as one MUST sentence.
    pub requirement: String,
    /// The threat it covers.
    pub threat: Threat,
    /// How bad a failure is.
    pub severity: Severity,
    /// The probe and its validated parameters.
    #[serde(flatten)]
    pub probe: ProbeSpec,
    /// Where the requirement comes from.
    pub references: Vec<String>,
    /// The file, relative to the suite folder.
    #[serde(skip)]
    pub file: String,
    /// SHA-256 of the file's bytes.
    #[serde(skip)]
    pub sha256: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    id: String,
    description: String,
    requirement: String,
    threat: Threat,
    severity: Severity,
    probe: String,
    #[serde(default)]
    params: toml::Table,
    #[serde(default)]
    references: Vec<String>,
}

/// A suite that could not be loaded.
#[derive(Debug)]
pub struct SuiteError {
    /// The file (or folder) at fault.
    pub file: PathBuf,
    /// The line of the field at fault, where the file writes it (syntax errors carry
    /// their own line in their message).
    pub line: Option<usize>,
    /// What is wrong.
    pub kind: SuiteErrorKind,
}

/// What is wrong with a suite.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SuiteErrorKind {
    /// A file or folder could not be read.
    #[error("cannot read: {0}")]
    Read(#[source] std::io::Error),
    /// Malformed TOML, a wrong type, or an unknown field.
    #[error("{0}")]
    Syntax(#[source] Box<toml::de::Error>),
    /// The `id` does not match the file's path.
    #[error("field `id`: {found:?} does not match the file's path; fix: write id = {expected:?} or move the file")]
    IdMismatch {
        /// The id written.
        found: String,
        /// The id the path gives.
        expected: String,
    },
    /// A header field breaks a rule.
    #[error("field `{field}`: {problem}")]
    Invalid {
        /// The field.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
    /// The probe or its parameters are wrong.
    #[error("{0}")]
    Params(#[source] ParamsError),
    /// The folder holds no case.
    #[error("no case files (*.toml) found")]
    Empty,
}

impl SuiteErrorKind {
    /// The field at fault, for rule errors.
    fn field(&self) -> Option<&str> {
        match self {
            SuiteErrorKind::IdMismatch { .. } => Some("id"),
            SuiteErrorKind::Invalid { field, .. } => Some(field),
            SuiteErrorKind::Params(ParamsError::Invalid { field, .. }) => Some(field),
            _ => None,
        }
    }
}

impl fmt::Display for SuiteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "suite file {}:{line}: {}", self.file.display(), self.kind),
            None => write!(f, "suite file {}: {}", self.file.display(), self.kind),
        }
    }
}

impl std::error::Error for SuiteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.kind)
    }
}

impl Suite {
    /// The suite embedded in the binary.
    pub fn builtin() -> Self {
        let files = BUILTIN_FILES
            .iter()
            .chain(BUILTIN_ADVISORIES)
            .map(|(p, t)| (p.to_string(), t.to_string()));
        match Self::from_files(files, Path::new("<embedded suite>")) {
            Ok(s) => s,
            Err(e) => panic!("bug in tenantcheck: the embedded suite is invalid: {e}"),
        }
    }

    /// Loads every `*.toml` file below `dir`: cases, and advisories under
    /// `advisories/`.
    pub fn load_dir(dir: &Path) -> Result<Self, SuiteError> {
        let mut files = Vec::new();
        collect(dir, dir, &mut files)?;
        let mut loaded = Vec::new();
        for rel in files {
            let path = dir.join(&rel);
            let text = std::fs::read_to_string(&path).map_err(|e| SuiteError {
                file: path.clone(),
                line: None,
                kind: SuiteErrorKind::Read(e),
            })?;
            loaded.push((rel, text));
        }
        Self::from_files(loaded, dir)
    }

    /// Parses and validates `(relative path, contents)` pairs; paths under
    /// `advisories/` are advisories, the others cases.
    pub fn from_files(files: impl IntoIterator<Item = (String, String)>, root: &Path) -> Result<Self, SuiteError> {
        let mut cases = Vec::new();
        let mut advisories = Vec::new();
        let mut ids = BTreeSet::new();
        for (rel, text) in files {
            if let Some(name) = rel.strip_prefix(&format!("{ADVISORIES_DIR}/")) {
                let advisory = parse_advisory(&rel, name, &text).map_err(|kind| SuiteError {
                    file: root.join(&rel),
                    line: None,
                    kind,
                })?;
                advisories.push(advisory);
                continue;
            }
            let case = parse_case(&rel, &text).map_err(|kind| SuiteError {
                file: root.join(&rel),
                line: kind.field().and_then(|f| crate::line_of_field(&text, f)),
                kind,
            })?;
            if !ids.insert(case.id.clone()) {
                return Err(SuiteError {
                    file: root.join(&rel),
                    line: None,
                    kind: SuiteErrorKind::Invalid {
                        field: "id",
                        problem: format!("{:?} is used by two files", case.id),
                    },
                });
            }
            cases.push(case);
        }
        if cases.is_empty() {
            return Err(SuiteError {
                file: root.to_owned(),
                line: None,
                kind: SuiteErrorKind::Empty,
            });
        }
        cases.sort_by(|a, b| a.id.cmp(&b.id));
        advisories.sort_by(|a: &Advisory, b| a.id.cmp(&b.id));
        let canonical = serde_json::json!({ "cases": cases, "advisories": advisories });
        let canonical = serde_json::to_vec(&canonical).expect("values serialise");
        Ok(Suite {
            digest: crate::sha256_hex(&canonical),
            cases,
            advisories,
        })
    }
}

fn parse_advisory(rel: &str, name: &str, text: &str) -> Result<Advisory, SuiteErrorKind> {
    let mut a: Advisory = toml::from_str(text).map_err(|e| SuiteErrorKind::Syntax(Box::new(e)))?;
    let expected = name.trim_end_matches(".toml");
    if a.id != expected {
        return Err(SuiteErrorKind::IdMismatch {
            found: a.id,
            expected: expected.to_owned(),
        });
    }
    a.check_range().map_err(|e| SuiteErrorKind::Invalid {
        field: "affected",
        problem: format!(
            "{e}: write version comparisons joined by commas, such as \"< 0.5.22\" or \">= 0.4, < 0.5.22\""
        ),
    })?;
    a.sha256 = crate::sha256_hex(text.as_bytes());
    a.file = rel.to_owned();
    Ok(a)
}

fn parse_case(rel: &str, text: &str) -> Result<Case, SuiteErrorKind> {
    let raw: CaseFile = toml::from_str(text).map_err(|e| SuiteErrorKind::Syntax(Box::new(e)))?;
    let expected = rel.trim_end_matches(".toml").replace(['/', '\\'], ".");
    if raw.id != expected {
        return Err(SuiteErrorKind::IdMismatch {
            found: raw.id,
            expected,
        });
    }
    for (field, value) in [("description", &raw.description), ("requirement", &raw.requirement)] {
        if value.trim().is_empty() {
            return Err(SuiteErrorKind::Invalid {
                field,
                problem: "is empty".into(),
            });
        }
    }
    if !raw.requirement.contains("MUST") {
        return Err(SuiteErrorKind::Invalid {
            field: "requirement",
            problem: "states no MUST: write the requirement as one sentence with MUST or MUST NOT".into(),
        });
    }
    let probe = ProbeSpec::parse(&raw.probe, raw.params).map_err(SuiteErrorKind::Params)?;
    Ok(Case {
        id: raw.id,
        description: raw.description.trim().to_owned(),
        requirement: raw.requirement,
        threat: raw.threat,
        severity: raw.severity,
        probe,
        references: raw.references,
        file: rel.to_owned(),
        sha256: crate::sha256_hex(text.as_bytes()),
    })
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<String>) -> Result<(), SuiteError> {
    let read_err = |e| SuiteError {
        file: dir.to_owned(),
        line: None,
        kind: SuiteErrorKind::Read(e),
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .collect::<Result<_, _>>()
        .map_err(read_err)?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        let rel = path.strip_prefix(root).expect("below the root");
        if path.is_dir() {
            collect(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "toml") {
            out.push(rel.to_string_lossy().replace('\\', "/"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::version::Affected;

    const CASE: &str = r#"
id = "isolation.canary-residue"
description = "d"
requirement = "X MUST NOT leak."
threat = "T1"
severity = "critical"
probe = "isolation.canary-residue"
"#;

    fn one(rel: &str, text: &str) -> Result<Suite, SuiteError> {
        Suite::from_files([(rel.to_string(), text.to_string())], Path::new("suite"))
    }

    #[test]
    fn the_builtin_suite_loads() {
        let s = Suite::builtin();
        assert!(!s.cases.is_empty());
        assert_eq!(s.digest.len(), 64);
    }

    #[test]
    fn digest_covers_defaults_not_formatting() {
        let a = one("isolation/canary-residue.toml", CASE).unwrap();
        let b = one(
            "isolation/canary-residue.toml",
            &format!("# a comment\n{CASE}\n[params]\nmax_tokens = 96\n"),
        )
        .unwrap();
        assert_eq!(a.digest, b.digest, "writing a default explicitly is the same case");
        assert_ne!(a.cases[0].sha256, b.cases[0].sha256, "but not the same file");
        let c = one(
            "isolation/canary-residue.toml",
            &format!("{CASE}\n[params]\nmax_tokens = 64\n"),
        )
        .unwrap();
        assert_ne!(a.digest, c.digest);
    }

    #[test]
    fn advisories_match_affected_versions_only() {
        let s = Suite::builtin();
        let a = s
            .advisories
            .iter()
            .find(|a| a.id == "sglang-rejected-kv-reuse")
            .unwrap();
        assert_eq!(a.affects("sglang", "0.5.20"), Affected::Yes);
        assert_eq!(a.affects("SGLang", "0.5.21"), Affected::Yes);
        assert_eq!(a.affects("sglang", "0.5.21.post1"), Affected::Yes);
        assert_eq!(a.affects("sglang", "0.5.22"), Affected::No);
        assert_eq!(a.affects("sglang", "0.6"), Affected::No);
        assert_eq!(a.affects("vllm", "0.5.0"), Affected::No);
        assert!(matches!(a.affects("sglang", "main"), Affected::Unknown(_)));
        let mut b = a.clone();
        b.affected = ">= 0.4, < 0.5.22".into();
        assert_eq!(b.affects("sglang", "0.3.9"), Affected::No);
        assert_eq!(b.affects("sglang", "0.4.0"), Affected::Yes);
    }

    #[test]
    fn errors_name_the_file_and_the_field() {
        let e = one("isolation/other.toml", CASE).unwrap_err().to_string();
        assert!(
            e.contains("suite/isolation/other.toml") && e.contains("isolation.other"),
            "{e}"
        );
        let e = one(
            "isolation/canary-residue.toml",
            &format!("{CASE}\n[params]\nlenghts = [0.5]\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("lenghts"), "{e}");
        let e = one("isolation/canary-residue.toml", &CASE.replace("T1", "T13"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("T13"), "{e}");
        let e = one(
            "isolation/canary-residue.toml",
            &CASE.replace("probe = \"isolation.canary-residue\"", "probe = \"isolation.nope\""),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("unknown probe"), "{e}");
        let e = one(
            "isolation/canary-residue.toml",
            &format!("{CASE}\n[params]\nlengths = [0.5, 0.2]\n"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("params.lengths"), "{e}");
        assert!(
            e.contains("canary-residue.toml:10: "),
            "the line of the rule's field: {e}"
        );
    }
}
