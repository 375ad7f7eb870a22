//! [`Threat`]: the threat catalogue every case names (T1-T12, see `docs/design.md`),
//! and [`Severity`], how bad a failure of a case is.

use serde::{Deserialize, Serialize};
use std::fmt;

/// The threat catalogue (see `docs/design.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[allow(missing_docs)]
pub enum Threat {
    T1,
    T2,
    T3,
    T4,
    T5,
    T6,
    T7,
    T8,
    T9,
    T10,
    T11,
    T12,
}

impl Threat {
    /// The failure the threat names.
    pub fn title(self) -> &'static str {
        match self {
            Threat::T1 => "cross-tenant content leak",
            Threat::T2 => "over-limit admission",
            Threat::T3 => "silent truncation",
            Threat::T4 => "usage misreporting",
            Threat::T5 => "failures reported as success",
            Threat::T6 => "response misrouting under concurrency and cancellation",
            Threat::T7 => "prefix cache shared across tenants",
            Threat::T8 => "broken streams",
            Threat::T9 => "declared configuration unsafe",
            Threat::T10 => "cross-tenant object access",
            Threat::T11 => "noisy neighbour",
            Threat::T12 => "metadata across tenants",
        }
    }
}

impl fmt::Display for Threat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// How bad a failure of a case is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum Severity {
    Critical,
    High,
    Medium,
    Low,
}
