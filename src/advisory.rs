//! [`Advisory`]: a published problem of an engine's versions, as the suite's
//! `advisories/` files state it, and whether a declared engine version is affected.

use crate::threat::Threat;
use crate::version::{Affected, Range};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A published problem of an engine's versions (one TOML file under
/// `suite/advisories/`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Advisory {
    /// The advisory's id; the file's name without `.toml`.
    pub id: String,
    /// The engine, as profiles name it in `declared.engine`.
    pub engine: String,
    /// The affected versions: comparisons joined by commas, all of which must hold
    /// (`< 0.5.22`, `>= 0.4, < 0.5.22`).
    pub affected: String,
    /// The versions that fix it.
    #[serde(default)]
    pub fixed: Vec<String>,
    /// The threats it realises.
    pub threats: Vec<Threat>,
    /// What goes wrong.
    pub summary: String,
    /// Where it is described.
    #[serde(default)]
    pub references: Vec<String>,
    /// SHA-256 of the file's bytes.
    #[serde(skip)]
    pub sha256: String,
    /// The file, relative to the suite folder.
    #[serde(skip)]
    pub file: String,
}

impl Advisory {
    /// Whether `engine` at `version` is affected; [`Affected::Unknown`] when the
    /// version cannot be read (never "not affected").
    pub fn affects(&self, engine: &str, version: &str) -> Affected {
        if !self.engine.eq_ignore_ascii_case(engine) {
            return Affected::No;
        }
        match Range::read(&self.affected) {
            Ok(range) => range.affects(version),
            Err(e) => Affected::Unknown(format!("advisory {}: {e}", self.id)),
        }
    }

    /// Whether its `affected` range can be read; the problem when it cannot.
    pub fn check_range(&self) -> Result<(), String> {
        Range::read(&self.affected).map(|_| ()).map_err(|e| e.to_string())
    }
}
