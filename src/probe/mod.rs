//! [`ProbeSpec`]: the kinds of probe, their typed parameters, and [`run`], which runs
//! one case's probe against a session.
//!
//! A probe is the code behind a kind of case; a case (a TOML file under `suite/`) names
//! the probe and gives its parameters. Every probe keeps the rules of the design: a
//! pass says what it exercised; a probe that could not reach its condition is
//! inconclusive, never pass; a foreign canary is never explained away.

pub mod isolation;

use crate::outcome::Outcome;
use crate::session::Session;
use serde::Serialize;

/// A probe kind with its validated parameters.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "probe", content = "params")]
#[non_exhaustive]
pub enum ProbeSpec {
    /// `isolation.canary-residue` (T1).
    #[serde(rename = "isolation.canary-residue")]
    CanaryResidue(isolation::CanaryResidueParams),
}

/// Parameters that do not fit their probe.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ParamsError {
    /// No probe has this name.
    #[error("unknown probe {0:?}; known probes: {known}", known = KINDS.join(", "))]
    UnknownProbe(String),
    /// A parameter is unknown or has the wrong type.
    #[error("{0}")]
    Syntax(#[from] toml::de::Error),
    /// A parameter breaks a rule.
    #[error("params.{field}: {problem}")]
    Invalid {
        /// The parameter.
        field: &'static str,
        /// What is wrong.
        problem: String,
    },
}

/// The probe names a case may use.
pub const KINDS: &[&str] = &["isolation.canary-residue"];

impl ProbeSpec {
    /// Parses and validates the `[params]` table of a case for probe `kind`.
    pub fn parse(kind: &str, params: toml::Table) -> Result<Self, ParamsError> {
        match kind {
            "isolation.canary-residue" => {
                let p: isolation::CanaryResidueParams = toml::Value::Table(params).try_into()?;
                p.validate()?;
                Ok(ProbeSpec::CanaryResidue(p))
            }
            other => Err(ParamsError::UnknownProbe(other.to_owned())),
        }
    }

    /// The probe's name.
    pub fn kind(&self) -> &'static str {
        match self {
            ProbeSpec::CanaryResidue(_) => "isolation.canary-residue",
        }
    }
}

/// Runs one case's probe.
pub async fn run(spec: &ProbeSpec, case_id: &str, session: &Session) -> Outcome {
    match spec {
        ProbeSpec::CanaryResidue(p) => isolation::canary_residue(p, case_id, session).await,
    }
}
