//! [`Transcript`]: append-only JSON lines of every exchange, hash-chained, redacted,
//! flushed as it goes.
//!
//! The format (and its reader, [`lines`], and [`verify_chain`]) is the evidence's:
//! `tenantcheck_evidence::transcript`, re-exported here.

pub use tenantcheck_evidence::transcript::*;

use crate::adapter::Exchange;
use crate::credential::Redactor;
use serde::Serialize;
use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::Write;
use std::path::Path;
use std::sync::Mutex;

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
    Cite {
        case: &'a str,
        cites: &'a [u64],
    },
    Roles {
        case: &'a str,
        roles: &'a std::collections::BTreeMap<String, Vec<u64>>,
    },
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

    /// Appends one exchange, its generated prompts by reference
    /// ([`tenantcheck_evidence::recipe`]); returns its sequence number.
    pub fn append_exchange(&self, case: &str, tenant: &str, exchange: &Exchange) -> std::io::Result<u64> {
        let referenced = exchange
            .request
            .body
            .as_ref()
            .and_then(tenantcheck_evidence::recipe::by_reference);
        match referenced {
            Some(body) => {
                let mut exchange = exchange.clone();
                exchange.request.body = Some(body);
                self.append(Record::Exchange {
                    case,
                    tenant,
                    exchange: &exchange,
                })
            }
            None => self.append(Record::Exchange { case, tenant, exchange }),
        }
    }

    /// Appends a `cite` line: `case` judged the exchanges recorded at `cites`, which
    /// another case sent (a request more than one case judges is sent once).
    pub fn append_cite(&self, case: &str, cites: &[u64]) -> std::io::Result<u64> {
        self.append(Record::Cite { case, cites })
    }

    /// Appends a `roles` line: what `case`'s exchanges were to the rule that judged
    /// them, so that `verify` hands the rule the same lines.
    pub fn append_roles(
        &self,
        case: &str,
        roles: &std::collections::BTreeMap<String, Vec<u64>>,
    ) -> std::io::Result<u64> {
        self.append(Record::Roles { case, roles })
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
            log_index: None,
            log_checkpoint: None,
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
