//! tenantcheck: a conformance suite for hosted LLM inference.
//!
//! It runs isolation, canary and long-context cases (data files under `suite/`)
//! against any provider reachable through an [`adapter::Provider`], records every
//! exchange in a hash-chained [`transcript`], and emits a signed [`report`]: an
//! in-toto Statement in a DSSE envelope, signed with ed25519.
//!
//! The pieces, one module per concept:
//!
//! - [`vendor`]: the vendor profile (TOML) that says where and how to reach a vendor;
//! - [`credential`]: tenant secrets and the redactor that keeps them out of every artifact;
//! - [`adapter`]: the `Provider` trait and the OpenAI-compatible implementation;
//! - [`canary`] and [`scan`]: markers derived from the run secret, and the scanner that
//!   finds them in responses to the wrong tenant;
//! - [`prompt`]: prompts of a target token length, with needles and records at depths;
//! - [`suite`], [`probe`], [`outcome`]: the cases as data, the code that runs each kind,
//!   and what a run of one case concludes;
//! - [`session`], [`harness`]: one run's connection to the vendor, and the libtest-mimic
//!   harness that turns cases into trials;
//! - [`transcript`], [`report`], [`schema`]: the evidence, and the JSON Schemas of every
//!   file read or written;
//! - [`sim`]: the reference vendor, the suite's own test bed and its embedded default;
//! - [`bundle`]: the one file a buyer receives;
//! - [`exit`]: the exit codes of the `tenantcheck` binary.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod adapter;
pub mod advisory;
pub mod bundle;
pub mod canary;
pub mod credential;
pub mod event;
pub mod exit;
pub mod harness;
pub mod inert;
pub mod judge;
pub mod outcome;
pub mod plan;
pub mod probe;
pub mod prompt;
pub mod render;
pub mod report;
pub mod scan;
pub mod schema;
pub mod session;
pub mod sim;
pub mod suite;
pub mod threat;
pub mod tokenizer;
pub mod transcript;
pub mod vendor;
pub mod version;

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

/// Lowercase hexadecimal encoding of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// SHA-256 of `bytes`, hex-encoded.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// Fills a fresh array with bytes from the operating system's CSPRNG.
pub(crate) fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).expect("the operating system's random source failed");
    buf
}

/// The current time as an RFC 3339 UTC timestamp with milliseconds.
pub(crate) fn now_rfc3339() -> String {
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
