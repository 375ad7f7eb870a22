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
pub mod bundle;
pub mod canary;
pub mod credential;
pub mod exit;
pub mod harness;
pub mod outcome;
pub mod probe;
pub mod prompt;
pub mod render;
pub mod report;
pub mod scan;
pub mod schema;
pub mod session;
pub mod sim;
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
