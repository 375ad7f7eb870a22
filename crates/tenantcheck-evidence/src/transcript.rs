//! The transcript's format: append-only JSON lines of every exchange, hash-chained.
//!
//! Each line is one JSON object with `seq` (0, 1, 2, …), `prev` (the SHA-256, hex, of
//! the previous line's bytes without its newline; 64 zeros for the first line), `at`
//! (RFC 3339 time), and `kind`: `header` for the first line (tool, version, vendor,
//! the run secret's commitment), `exchange` for each request (case, tenant, the
//! [`Exchange`]), `resume` where an interrupted run was continued (`run
//! --resume`), naming the unfinished cases run again after it, and `cite` where a
//! case judged exchanges another case had sent (`case`, and the earlier lines in
//! `cites`: a request more than one case judges is sent once, and counts as each
//! citing case's own). Every line is redacted
//! of the run's credentials before it is hashed and written, and is written with one
//! `write` call, so an interrupted run keeps every line it finished and the chain up to
//! it. A long prompt the suite generated is recorded by reference: its generator's
//! inputs and the SHA-256 of the text sent, in place of the text ([`crate::recipe`]).
//!
//! [`lines`] reads it back (one typed [`Line`] per line); [`verify_chain`] checks the
//! sequence numbers and the chain. The writer, which redacts every line with the run's
//! credentials before hashing it, belongs to the program that runs the suite
//! (`tenantcheck::transcript::Transcript`).

use crate::exchange::Exchange;
use serde::{Deserialize, Serialize};

/// The `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The first line's content.
#[derive(Clone, Debug, Serialize)]
pub struct Header<'a> {
    /// `tenantcheck`.
    pub tool: &'a str,
    /// The tool's version.
    pub version: &'a str,
    /// The vendor profile's name.
    pub vendor: &'a str,
    /// The run secret's commitment, recorded before the first request.
    pub secret_commitment: &'a str,
    /// The buyer's challenge (hex) mixed into the run secret, if one was given.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub challenge: Option<&'a str>,
    /// The run's start entry's index in the transparency log, logged before this line.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_index: Option<u64>,
    /// The log's checkpoint (a signed note) that includes the start entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_checkpoint: Option<&'a str>,
}

/// One line of a transcript, as read back: the one reader every consumer uses.
#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Line {
    /// The first line.
    Header {
        /// The run secret's commitment.
        secret_commitment: String,
        /// The buyer's challenge (hex), if one was given.
        #[serde(default)]
        challenge: Option<String>,
        /// The start entry's index in the transparency log.
        #[serde(default)]
        log_index: Option<u64>,
        /// The checkpoint that includes it.
        #[serde(default)]
        log_checkpoint: Option<String>,
    },
    /// One request and what came back.
    Exchange {
        /// The line's sequence number.
        seq: u64,
        /// The case that made the request.
        case: String,
        /// The tenant it was sent as.
        tenant: String,
        /// The exchange.
        exchange: Box<Exchange>,
    },
    /// An interrupted run continued here; these cases ran again after this line.
    Resume {
        /// The cases run again.
        #[serde(default)]
        rerun: Vec<String>,
    },
    /// A case judged exchanges another case sent (a request more than one case
    /// judges is sent once, by the first case to need it): they count as its own.
    Cite {
        /// The case that judged them.
        case: String,
        /// Their sequence numbers, each an earlier exchange line.
        cites: Vec<u64>,
    },
    /// What some of a case's exchanges were to the rule that judges it (`alone`,
    /// `load`, `under` for the noisy neighbour, say): `verify` hands the same lines
    /// to the same rule as the run did.
    Roles {
        /// The case.
        case: String,
        /// Each role's exchange lines, in the order the case sent them.
        roles: std::collections::BTreeMap<String, Vec<u64>>,
    },
    /// A kind this version does not know.
    #[serde(other)]
    Other,
}

impl Line {
    /// Reads one line (its bytes, without the newline), with every prompt recorded by
    /// reference regenerated and checked against its digest ([`crate::recipe`]).
    pub fn parse(bytes: &[u8]) -> Result<Line, String> {
        let mut line: Line = serde_json::from_slice(bytes).map_err(|e| e.to_string())?;
        if let Line::Exchange { exchange, .. } = &mut line
            && let Some(body) = exchange.request.body.as_mut()
        {
            crate::recipe::expand(body)?;
        }
        Ok(line)
    }
}

/// Every line of a transcript, in order (empty lines skipped).
pub fn lines(transcript: &[u8]) -> impl Iterator<Item = Result<Line, String>> + '_ {
    raw_lines(transcript).map(Line::parse)
}

/// Every line of a transcript as it is written, without its newline, in order (empty
/// lines skipped): a reader that needs a line's prompts again later keeps these few
/// bytes and parses them again ([`Line::parse`]) rather than the prompts' text.
pub fn raw_lines(transcript: &[u8]) -> impl Iterator<Item = &[u8]> + '_ {
    transcript.split(|&b| b == b'\n').filter(|l| !l.is_empty())
}

/// The transcript's digest and length, as recorded in the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct TranscriptSummary {
    /// SHA-256 (hex) of the whole file.
    pub sha256: String,
    /// Number of lines.
    pub lines: u64,
}

/// A transcript that does not hold together.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChainError {
    /// A line is not a JSON object with `seq` and `prev`.
    #[error("line {line}: not a transcript line ({problem})")]
    Malformed {
        /// 1-based line number.
        line: u64,
        /// What is wrong.
        problem: String,
    },
    /// A line's `seq` is out of order.
    #[error("line {line}: seq is {found}, expected {expected}")]
    Sequence {
        /// 1-based line number.
        line: u64,
        /// The seq found.
        found: u64,
        /// The seq expected.
        expected: u64,
    },
    /// A line's `prev` is not the hash of the line before it.
    #[error("line {line}: prev does not match the SHA-256 of line {}: the transcript was changed", line - 1)]
    Broken {
        /// 1-based line number.
        line: u64,
    },
    /// The file does not end with a newline (a line is incomplete).
    #[error("the last line is incomplete")]
    Truncated,
}

/// Checks a transcript's sequence numbers and hash chain; returns its summary.
pub fn verify_chain(bytes: &[u8]) -> Result<TranscriptSummary, ChainError> {
    let body = match bytes.strip_suffix(b"\n") {
        Some(body) => body,
        None if bytes.is_empty() => bytes,
        None => return Err(ChainError::Truncated),
    };
    let mut prev = GENESIS.to_owned();
    let mut count = 0u64;
    for line in body.split(|&b| b == b'\n').filter(|_| !body.is_empty()) {
        let n = count + 1;
        let malformed = |problem: String| ChainError::Malformed { line: n, problem };
        let v: serde_json::Value = serde_json::from_slice(line).map_err(|e| malformed(e.to_string()))?;
        let seq = v["seq"].as_u64().ok_or_else(|| malformed("no seq".into()))?;
        let line_prev = v["prev"].as_str().ok_or_else(|| malformed("no prev".into()))?;
        if seq != count {
            return Err(ChainError::Sequence {
                line: n,
                found: seq,
                expected: count,
            });
        }
        if line_prev != prev {
            return Err(ChainError::Broken { line: n });
        }
        prev = crate::sha256_hex(line);
        count += 1;
    }
    Ok(TranscriptSummary {
        sha256: crate::sha256_hex(bytes),
        lines: count,
    })
}
