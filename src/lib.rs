//! tenantcheck: a conformance suite for hosted LLM inference.
//!
//! It runs isolation, canary and long-context cases (data files under `suite/`)
//! against any provider reachable through an [`adapter::Provider`], records every
//! exchange in a hash-chained [`transcript`], and emits a signed [`report`]: an
//! in-toto Statement in a DSSE envelope, signed with ed25519.
//!
//! Three crates. What a run records and what checks it, with no async runtime and no
//! HTTP, is `tenantcheck-evidence`; its modules are re-exported here under the same
//! names ([`canary`], [`scan`], [`prompt`], [`tokenizer`], [`outcome`], [`threat`],
//! [`version`], [`judge`], [`report`], and the format inside [`transcript`] and
//! [`vendor`]). The reference vendor is `tenantcheck-sim`, re-exported as [`sim`]. This
//! crate holds what sends requests, runs cases and prints, one module per concept:
//!
//! - [`vendor`]: loading a vendor profile (TOML) and reading its tenants' credentials;
//! - [`credential`]: tenant secrets and the redactor that keeps them out of every artifact;
//! - [`adapter`]: the `Provider` trait and its implementations (OpenAI-compatible,
//!   Anthropic, Workers AI, a program on stdio);
//! - [`suite`], [`probe`]: the cases as data, and the code that runs each kind;
//! - [`session`], [`harness`], [`event`]: one run's connection to the vendor, the
//!   libtest-mimic harness that turns cases into trials, and the events between them;
//! - [`transcript`] (the redacting writer), [`run_dir`] (a run's files), [`resume`]
//!   (signals and `--resume`), [`plan`] (`run --plan`);
//! - [`render`], [`bundle`], [`schema`], [`inert`]: the renderings, the one file a buyer
//!   receives, the JSON Schemas of every file read or written, vendor text made inert;
//! - [`rekor`]: the client of a transparency log (Sigstore Rekor v2) that every run under
//!   a logged challenge enters, its proofs checked by [`tlog`];
//! - [`exit`]: the exit codes of the `tenantcheck` binary.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub use tenantcheck_evidence::{
    attestation, canary, document, holder, judge, ledger, nodes, outcome, partition, passage, policy, prompt,
    provenance, recipe, report, scan, shard, threat, tlog, tokenizer, version, wording,
};
pub use tenantcheck_sim as sim;

pub mod adapter;
pub mod advisory;
pub mod bundle;
pub mod credential;
pub mod diff;
pub mod event;
pub mod exit;
pub mod harness;
pub mod inert;
pub mod merge;
pub mod plan;
pub mod probe;
pub mod rekor;
pub mod render;
pub mod resume;
pub mod run_dir;
pub mod schema;
pub mod session;
pub mod signal;
pub mod suite;
pub mod transcript;
pub mod vendor;

/// The version of this tool, as recorded in every report.
pub const TOOL_VERSION: &str = env!("CARGO_PKG_VERSION");

/// Installs the process-wide TLS crypto provider (ring) once.
///
/// reqwest is built without a default provider to keep the build lean; it panics when
/// a client is built before a provider is installed, even for plain HTTP. Every
/// entry point that builds a client calls this first; calling it again is harmless.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

pub use tenantcheck_evidence::hex;
pub(crate) use tenantcheck_evidence::{random_bytes, sha256_hex};

/// The current time as an RFC 3339 UTC timestamp with milliseconds.
pub fn now_rfc3339() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

/// The 1-based line of `field` in TOML `text`: `base_url`, `tenants[1].credential_env`
/// (the second `credential_env` key), `params.lengths`. Used to point errors that no
/// parser raised (rules) at a line. `None` when the key is not written (a default).
pub(crate) fn line_of_field(text: &str, field: &str) -> Option<usize> {
    let (path, key) = field.rsplit_once('.').unwrap_or(("", field));
    let occurrence = path
        .rsplit_once('[')
        .and_then(|(_, i)| i.trim_end_matches(']').parse::<usize>().ok())
        .unwrap_or(0);
    text.lines()
        .enumerate()
        .filter(|(_, line)| {
            let line = line.trim_start();
            line.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with('='))
        })
        .nth(occurrence)
        .map(|(i, _)| i + 1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn fields_are_found_on_their_lines() {
        let text = "name = \"x\"\n[[tenants]]\nlabel = \"a\"\ncredential_env = \"A\"\n[[tenants]]\nlabel = \"b\"\ncredential_env = \"B\"\n";
        assert_eq!(super::line_of_field(text, "name"), Some(1));
        assert_eq!(super::line_of_field(text, "tenants[1].credential_env"), Some(7));
        assert_eq!(super::line_of_field(text, "tenants[0].label"), Some(3));
        assert_eq!(super::line_of_field(text, "model"), None);
    }
}
