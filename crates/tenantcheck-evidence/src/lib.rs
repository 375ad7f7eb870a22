//! tenantcheck's evidence: what a run records and what anyone can check without the
//! program that made it.
//!
//! An auditor builds this crate alone (no async runtime, no HTTP, no CLI) to re-check a
//! report: [`report::verify`] checks the signature, the transcript's hash chain, the run
//! secret's commitment, and re-derives every verdict the report states from the answers
//! the transcript holds, with the same judges the run used.
//!
//! The pieces, one module per concept:
//!
//! - [`canary`] and [`scan`]: markers derived from the run secret, and the scanner that
//!   finds them (whole, fragmentary, garbled) in what another tenant got back;
//! - [`holder`]: a canary's holder sighted by name beside what survives of the record,
//!   with the chance of a coincidence;
//! - [`ledger`]: what the transcript's lines show case by case (leaks, passages,
//!   redirects, citations), one fold the run feeds and `verify` replays;
//! - [`passage`]: every request's text by runs of sentences, and the answers that hold
//!   another request's;
//! - [`prompt`]: prompts of a target token length, with needles and records at depths
//!   (regenerated from the run secret);
//! - [`tokenizer`]: the reference vendor's toy tokenizer, the one local tokenizer;
//! - [`exchange`]: one request and its answer, as adapters return it and the transcript
//!   records it;
//! - [`profile`]: the vendor profile a report embeds;
//! - [`transcript`]: the hash-chained JSON lines and their one typed reader;
//! - [`outcome`], [`threat`], [`version`]: what a case concludes, the threat catalogue,
//!   engine versions;
//! - [`judge`]: the pure rules that turn recorded answers into findings, shared by the
//!   run and the re-check;
//! - [`report`]: the signed report (an in-toto Statement in a DSSE envelope, ed25519),
//!   its keys, and `verify`;
//! - [`attestation`]: the in-toto Test Result of a run and a buyer's Verification
//!   Summary, the predicates generic supply-chain tooling reads;
//! - [`policy`]: what a buyer accepts as evidence, judged requirement by requirement;
//! - [`tlog`]: a run's start and end in a transparency log (Sigstore Rekor v2), checked
//!   offline, and every run under a buyer's challenge read from the log's tiles;
//! - [`shard`]: a run's share of the suite (`run --partition`) and the signed summary
//!   over many reports (`tenantcheck merge`), re-derived by `verify_summary`.
//!
//! The rule of the cut: evidence never depends on the code that produced it. The
//! `tenantcheck` package (adapters, session, probes, harness, renderers, the reference
//! vendor, the binary) depends on this crate and re-exports its modules under the same
//! names.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod attestation;
pub mod canary;
pub mod document;
pub mod exchange;
pub mod holder;
pub mod judge;
pub mod ledger;
pub mod nodes;
pub mod outcome;
pub mod partition;
pub mod passage;
pub mod policy;
pub mod profile;
pub mod prompt;
pub mod provenance;
pub mod recipe;
pub mod report;
pub mod scan;
pub mod shard;
pub mod threat;
pub mod tlog;
pub mod tokenizer;
pub mod transcript;
pub mod version;
pub mod wording;

/// Lowercase hexadecimal encoding of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

/// Bytes from hex, or `None` when the text is not hex.
pub fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.is_ascii() {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// SHA-256 of `bytes`, hex-encoded.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex(&sha2::Sha256::digest(bytes))
}

/// Fills a fresh array with bytes from the operating system's CSPRNG.
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut buf = [0u8; N];
    getrandom::fill(&mut buf).expect("the operating system's random source failed");
    buf
}
