//! The client of a Sigstore Rekor v2 log: enter a statement, read the checkpoint and the
//! tiles. What the answers prove is checked offline by [`crate::tlog`].

use crate::tlog::{ChallengeLog, LogError, LogKey, LoggedEntry, TileSource};
use ed25519_dalek::SigningKey;
use std::time::Duration;

/// How long an entry may take: the log answers once a checkpoint includes it, and
/// Rekor's clients are told to wait at least 20 seconds.
const ENTRY_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the log could not be used.
#[derive(Debug, thiserror::Error)]
pub enum RekorError {
    /// No answer.
    #[error("the transparency log at {url} did not answer: {message}")]
    Unreachable {
        /// What was asked.
        url: String,
        /// The transport's error.
        message: String,
    },
    /// An answer other than success.
    #[error("the transparency log at {url} answered {status}: {body}")]
    Status {
        /// What was asked.
        url: String,
        /// The HTTP status.
        status: u16,
        /// The start of its body.
        body: String,
    },
    /// An answer that does not prove what it should.
    #[error("the transparency log at {url}: {source}")]
    Proof {
        /// What was asked.
        url: String,
        /// What is wrong with it.
        source: LogError,
    },
}

/// One log, with the key its checkpoints must be signed with.
pub struct Log {
    url: String,
    key: LogKey,
    client: reqwest::Client,
}

impl Log {
    /// The log a challenge names.
    pub fn new(log: &ChallengeLog) -> Result<Log, RekorError> {
        let key = log.key().map_err(|source| RekorError::Proof {
            url: log.url.clone(),
            source,
        })?;
        Log::with_key(&log.url, key)
    }

    /// The log at `url` whose checkpoints `key` signs.
    pub fn with_key(url: &str, key: LogKey) -> Result<Log, RekorError> {
        let client = client(url)?;
        Ok(Log {
            url: url.trim_end_matches('/').to_owned(),
            key,
            client,
        })
    }

    /// The log's latest checkpoint (a signed note), its signature checked.
    pub async fn checkpoint(&self) -> Result<(String, crate::tlog::Checkpoint), RekorError> {
        let bytes = self.get("checkpoint").await?;
        let url = format!("{}/checkpoint", self.url);
        let text = String::from_utf8(bytes).map_err(|_| RekorError::Proof {
            url: url.clone(),
            source: LogError::Malformed("the checkpoint is not UTF-8".into()),
        })?;
        let checkpoint = self
            .key
            .verify_checkpoint(&text)
            .map_err(|source| RekorError::Proof { url, source })?;
        Ok((text, checkpoint))
    }

    /// Enters `statement` signed by `signer`, and checks the answer: the entry holds the
    /// statement, its proof leads to the checkpoint, the log signed the checkpoint.
    pub async fn enter(
        &self,
        what: &'static str,
        statement: &[u8],
        signer: &SigningKey,
    ) -> Result<(LoggedEntry, crate::tlog::Included), RekorError> {
        let url = format!("{}/api/v2/log/entries", self.url);
        let request = self
            .client
            .post(&url)
            .json(&crate::tlog::entry_request(statement, signer));
        let body = send(request, &url).await?;
        let proof = |source| RekorError::Proof {
            url: url.clone(),
            source,
        };
        let answer: serde_json::Value = serde_json::from_slice(&body)
            .map_err(|e| proof(LogError::Malformed(format!("the answer is not JSON: {e}"))))?;
        let entry = LoggedEntry::from_response(&answer).map_err(proof)?;
        let included = entry.check(what, statement, &signer.verifying_key()).map_err(proof)?;
        self.key.verify_checkpoint(&entry.checkpoint).map_err(proof)?;
        Ok((entry, included))
    }

    /// The file at `path` of the log's tiles.
    pub async fn get(&self, path: &str) -> Result<Vec<u8>, RekorError> {
        get(&self.client, &format!("{}/{path}", self.url)).await
    }
}

/// A client for the log at `url`: no redirects, the entry timeout.
fn client(url: &str) -> Result<reqwest::Client, RekorError> {
    crate::install_crypto_provider();
    reqwest::Client::builder()
        .timeout(ENTRY_TIMEOUT)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| RekorError::Unreachable {
            url: url.to_owned(),
            message: e.to_string(),
        })
}

/// `GET url`, its body when it answered success.
async fn get(client: &reqwest::Client, url: &str) -> Result<Vec<u8>, RekorError> {
    send(client.get(url).timeout(Duration::from_secs(10)), url).await
}

/// Sends `request` (to `url`), its body when it answered success.
async fn send(request: reqwest::RequestBuilder, url: &str) -> Result<Vec<u8>, RekorError> {
    let unreachable = |e: reqwest::Error| RekorError::Unreachable {
        url: url.to_owned(),
        message: e.to_string(),
    };
    let answer = request.send().await.map_err(unreachable)?;
    let status = answer.status();
    let body = answer.bytes().await.map_err(unreachable)?;
    if !status.is_success() {
        return Err(RekorError::Status {
            url: url.to_owned(),
            status: status.as_u16(),
            body: excerpt(&body),
        });
    }
    Ok(body.to_vec())
}

/// The log's tiles, read over HTTP from synchronous code (`runs_under`).
pub struct HttpTiles<'a> {
    /// The log.
    pub log: &'a Log,
    /// The runtime the requests run on.
    pub runtime: &'a tokio::runtime::Runtime,
}

impl TileSource for HttpTiles<'_> {
    fn fetch(&self, path: &str) -> Result<Vec<u8>, String> {
        self.runtime.block_on(self.log.get(path)).map_err(|e| e.to_string())
    }
}

/// The start of a body, for an error message.
fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(300) {
        Some((i, _)) => format!("{}...", &text[..i]),
        None => text.to_owned(),
    }
}

/// A fresh challenge: 32 random bytes of nonce, and, with `log`, the log at that URL
/// whose key is `key_pem`, its current checkpoint pinned.
pub fn issue(log: Option<(&str, &str)>) -> Result<crate::tlog::Challenge, RekorError> {
    let nonce: [u8; 32] = crate::random_bytes();
    let log = match log {
        None => None,
        Some((url, key_pem)) => {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| RekorError::Unreachable {
                    url: url.to_owned(),
                    message: e.to_string(),
                })?;
            let text = runtime.block_on(async {
                // The origin is the checkpoint's first line; the key must sign it.
                let client = client(url)?;
                let bytes = get(&client, &format!("{}/checkpoint", url.trim_end_matches('/'))).await?;
                Ok::<_, RekorError>(String::from_utf8_lossy(&bytes).into_owned())
            })?;
            let origin = text.lines().next().unwrap_or_default().to_owned();
            let key = LogKey::from_pem(&origin, key_pem).map_err(|source| RekorError::Proof {
                url: url.to_owned(),
                source,
            })?;
            key.verify_checkpoint(&text).map_err(|source| RekorError::Proof {
                url: format!("{}/checkpoint", url.trim_end_matches('/')),
                source,
            })?;
            Some(ChallengeLog {
                url: url.trim_end_matches('/').to_owned(),
                origin,
                key: key.to_pem(),
                pinned_checkpoint: text,
            })
        }
    };
    Ok(crate::tlog::Challenge {
        format: crate::tlog::CHALLENGE_FORMAT.to_owned(),
        nonce: crate::hex(&nonce),
        log,
    })
}

/// Every run the log holds under `challenge`, from its pinned checkpoint to the
/// latest, and the latest checkpoint's size.
pub fn runs(challenge: &crate::tlog::Challenge) -> Result<(Vec<crate::tlog::LoggedRun>, u64), RekorError> {
    let log_config = challenge.log.as_ref().ok_or_else(|| RekorError::Proof {
        url: "-".into(),
        source: LogError::Malformed("the challenge names no log: its runs were not logged".into()),
    })?;
    let log = Log::new(log_config)?;
    let proof = |source| RekorError::Proof {
        url: log_config.url.clone(),
        source,
    };
    let nonce = challenge.nonce_bytes().map_err(proof)?;
    let pinned = log_config.pinned().map_err(proof)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| RekorError::Unreachable {
            url: log_config.url.clone(),
            message: e.to_string(),
        })?;
    let (_, latest) = runtime.block_on(log.checkpoint())?;
    let tiles = HttpTiles {
        log: &log,
        runtime: &runtime,
    };
    let runs = crate::tlog::runs_under(&nonce, &pinned, &latest, &tiles).map_err(proof)?;
    Ok((runs, latest.size()))
}

/// The SHA-512 (hex) of the start statement a report records, as the log holds it, or
/// `None` for a report of a run that was not logged. The signature is not checked here:
/// `verify` does that.
pub fn disclosed_start(path: &std::path::Path) -> Result<Option<String>, String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let envelope: crate::report::dsse::Envelope =
        serde_json::from_slice(&bytes).map_err(|e| format!("not a signed report: {e}"))?;
    let payload = envelope.unverified_payload().map_err(|e| e.to_string())?;
    let statement: serde_json::Value = serde_json::from_slice(&payload).map_err(|e| e.to_string())?;
    let Some(start) = statement.pointer("/predicate/run_secret/log/statement") else {
        return Ok(None);
    };
    let start: crate::tlog::RunStart =
        serde_json::from_value(start.clone()).map_err(|e| format!("its start statement: {e}"))?;
    Ok(Some(crate::tlog::start_digest(&start)))
}
