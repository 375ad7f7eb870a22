//! [`Transcript`]: append-only JSON lines of every exchange, hash-chained, redacted,
//! flushed as it goes.
//!
//! Each line is one JSON object with `seq` (0, 1, 2, …), `prev` (the SHA-256, hex, of
//! the previous line's bytes without its newline; 64 zeros for the first line), `at`
//! (RFC 3339 time), and `kind`: `header` for the first line (tool, version, vendor,
//! the run secret's commitment), `exchange` for each request (case, tenant, the
//! [`Exchange`]), and `resume` where an interrupted run was continued (`run
//! --resume`), naming the unfinished cases run again after it. Every line passes through the run's [`Redactor`] before it is hashed
//! and written, and is written with one `write` call, so an interrupted run keeps every
//! line it finished and the chain up to it.
//!
//! [`verify_chain`] checks the sequence numbers and the chain of a transcript.

use crate::adapter::Exchange;
use crate::credential::Redactor;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

/// The `prev` of the first line.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// A transcript being written.
#[derive(Debug)]
pub struct Transcript {
    redactor: Redactor,
    inner: Mutex<Inner>,
}

#[derive(Debug)]
struct Inner {
    file: File,
    next_seq: u64,
    prev: String,
    whole: Sha256,
}

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
}

#[derive(Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Record<'a> {
    Header(&'a Header<'a>),
    Exchange {
        case: &'a str,
        tenant: &'a str,
        exchange: &'a Exchange,
    },
    Resume {
        rerun: &'a [String],
    },
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
    /// A kind this version does not know.
    #[serde(other)]
    Other,
}

impl Line {
    /// Reads one line (its bytes, without the newline).
    pub fn parse(bytes: &[u8]) -> Result<Line, String> {
        serde_json::from_slice(bytes).map_err(|e| e.to_string())
    }
}

/// Every line of a transcript, in order (empty lines skipped).
pub fn lines(transcript: &[u8]) -> impl Iterator<Item = Result<Line, String>> + '_ {
    transcript
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(Line::parse)
}

/// The transcript's digest and length, as recorded in the report.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
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

impl Transcript {
    /// Creates the file (it must not exist) and writes the header line.
    pub fn create(path: &Path, redactor: Redactor, header: &Header<'_>) -> std::io::Result<Self> {
        let file = File::options().write(true).create_new(true).open(path)?;
        let t = Transcript {
            redactor,
            inner: Mutex::new(Inner {
                file,
                next_seq: 0,
                prev: GENESIS.to_owned(),
                whole: Sha256::new(),
            }),
        };
        t.append(Record::Header(header))?;
        Ok(t)
    }

    /// Reopens the transcript of an interrupted run, checks its chain, and appends a
    /// `resume` line naming the cases to be run again; later lines continue the chain.
    pub fn resume(path: &Path, redactor: Redactor, rerun: &[String]) -> std::io::Result<Self> {
        let bytes = std::fs::read(path)?;
        let summary = verify_chain(&bytes).map_err(std::io::Error::other)?;
        let last = bytes
            .strip_suffix(b"\n")
            .and_then(|b| b.split(|&c| c == b'\n').next_back())
            .ok_or_else(|| std::io::Error::other("the transcript is empty"))?;
        let mut whole = Sha256::new();
        whole.update(&bytes);
        let file = File::options().append(true).open(path)?;
        let t = Transcript {
            redactor,
            inner: Mutex::new(Inner {
                file,
                next_seq: summary.lines,
                prev: crate::sha256_hex(last),
                whole,
            }),
        };
        t.append(Record::Resume { rerun })?;
        Ok(t)
    }

    /// `text` with the run's credentials redacted.
    pub fn redact(&self, text: &str) -> String {
        self.redactor.redact(text).into_owned()
    }

    /// Appends one exchange; returns its sequence number.
    pub fn append_exchange(&self, case: &str, tenant: &str, exchange: &Exchange) -> std::io::Result<u64> {
        self.append(Record::Exchange { case, tenant, exchange })
    }

    fn append(&self, record: Record<'_>) -> std::io::Result<u64> {
        // The record is serialised and redacted before the lock is taken: only the
        // chain fields and the write wait for the previous line.
        let body = serde_json::to_string(&record).map_err(std::io::Error::other)?;
        let body = self.redactor.redact_json_text(&body);
        let fields = body.strip_prefix('{').expect("a record is a JSON object");
        let mut inner = self.inner.lock().expect("transcript lock poisoned");
        let seq = inner.next_seq;
        let mut bytes = Vec::with_capacity(body.len() + 128);
        let at = serde_json::to_string(&crate::now_rfc3339()).map_err(std::io::Error::other)?;
        write!(
            bytes,
            "{{\"seq\":{seq},\"prev\":\"{}\",\"at\":{at},{fields}",
            inner.prev
        )?;
        let line_len = bytes.len();
        bytes.push(b'\n');
        inner.file.write_all(&bytes)?;
        inner.whole.update(&bytes);
        inner.prev = crate::sha256_hex(&bytes[..line_len]);
        inner.next_seq += 1;
        Ok(seq)
    }

    /// The digest and length of what has been written so far.
    pub fn summary(&self) -> TranscriptSummary {
        let inner = self.inner.lock().expect("transcript lock poisoned");
        TranscriptSummary {
            sha256: crate::hex(&inner.whole.clone().finalize()),
            lines: inner.next_seq,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::credential::Secret;

    fn write(dir: &Path, secret: &Secret) -> Vec<u8> {
        let path = dir.join("t.jsonl");
        let header = Header {
            tool: "tenantcheck",
            version: "0",
            vendor: "v",
            secret_commitment: "c",
            challenge: None,
        };
        let t = Transcript::create(&path, Redactor::new([secret]), &header).unwrap();
        for i in 0..3 {
            let ex = Exchange {
                content: format!("answer {i} echoing {}", secret.expose()),
                ..Exchange::default()
            };
            assert_eq!(t.append_exchange("case", "a", &ex).unwrap(), i + 1);
        }
        let summary = t.summary();
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(summary, verify_chain(&bytes).unwrap());
        assert_eq!(summary.lines, 4);
        bytes
    }

    fn tempdir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("tc-transcript-{}", crate::hex(&crate::random_bytes::<8>())));
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn lines_are_chained_and_redacted() {
        let dir = tempdir();
        let secret = Secret::new("sk-marker-transcript");
        let bytes = write(&dir, &secret);
        let text = String::from_utf8(bytes).unwrap();
        assert!(!text.contains("sk-marker-transcript"));
        assert!(text.contains("[REDACTED]"));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn any_change_breaks_the_chain_or_the_digest() {
        let dir = tempdir();
        let bytes = write(&dir, &Secret::new("k"));
        let good = verify_chain(&bytes).unwrap();
        for i in (0..bytes.len()).step_by(7) {
            let mut bad = bytes.clone();
            bad[i] ^= 0x01;
            match verify_chain(&bad) {
                Err(_) => {}
                Ok(s) => assert_ne!(s.sha256, good.sha256, "byte {i}"),
            }
        }
        let dropped: Vec<u8> = bytes
            .split_inclusive(|&b| b == b'\n')
            .skip(1)
            .flatten()
            .copied()
            .collect();
        assert!(matches!(verify_chain(&dropped), Err(ChainError::Sequence { .. })));
        assert!(matches!(
            verify_chain(&bytes[..bytes.len() - 1]),
            Err(ChainError::Truncated)
        ));
        std::fs::remove_dir_all(dir).unwrap();
    }
}
