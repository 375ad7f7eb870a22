//! The transparency log: every run's start and end as entries of a Sigstore Rekor v2 log,
//! so that a vendor cannot run the suite until one run passes and show only that one.
//!
//! A buyer's challenge names a log and a checkpoint of it pinned when the challenge was
//! issued ([`Challenge`]). A run under it logs a [`RunStart`] before its first request and
//! a [`RunEnd`] after its report is signed. Both are `hashedrekord` v0.0.2 entries: the
//! log holds the SHA-512 of the statement and an Ed25519ph signature over it, by a key
//! derived from the challenge and the entry's role ([`entry_key`]). The log stores no
//! statement, only its digest; the key is how a buyer finds the entries: anyone who holds
//! the challenge computes the start key and, for each start entry, the keys of its
//! possible ends, and reads the log's tiles for them ([`runs_under`]). Entries signed
//! with any other key are not under the challenge, and a report whose start entry is not
//! signed with the challenge's start key does not verify.
//!
//! The run secret mixes in the start entry's log index and the root hash of the
//! checkpoint that includes it ([`crate::canary::RunSecret::derive_logged`]): no prompt of
//! the run could have been made before the entry was in the log.
//!
//! Everything here is offline: a [`LoggedEntry`] carries its inclusion proof and the
//! checkpoint it proves against, and [`LogKey::verify_checkpoint`] checks the log's
//! signature on that checkpoint with the key the buyer trusts. The signed note and the
//! RFC 6962 proofs are Cloudflare's `signed_note` and `tlog_tiles` crates.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use ed25519_dalek::{Signature, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256, Sha512};
/// A checkpoint (C2SP tlog-checkpoint): origin, tree size, root hash.
pub use tlog_tiles::Checkpoint;
use tlog_tiles::Hash;

/// The format of a challenge file.
pub const CHALLENGE_FORMAT: &str = "tenantcheck-challenge/1";
/// `_type` of a [`RunStart`].
pub const START_TYPE: &str = "tenantcheck/run-start/v1";
/// `_type` of a [`RunEnd`].
pub const END_TYPE: &str = "tenantcheck/run-end/v1";
/// The verdicts an end entry may state, the report's `verdict` labels: a buyer derives
/// one candidate end key for each.
pub const VERDICTS: [&str; 4] = ["PASS", "FAIL", "INCONCLUSIVE", "SKIPPED"];

/// The DER prefix of an Ed25519 SubjectPublicKeyInfo (RFC 8410); the key's 32 bytes follow.
const SPKI_ED25519: [u8; 12] = [0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00];
/// The tiles' height in the C2SP tlog-tiles layout (256 hashes a tile).
const TILE_HEIGHT: u8 = 8;

/// What is wrong with a log entry, a checkpoint or a challenge.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// A field is missing or malformed.
    #[error("{0}")]
    Malformed(String),
    /// The checkpoint is not signed by the log key the buyer trusts.
    #[error("the checkpoint is not signed by the log key {key} ({why})")]
    CheckpointSignature {
        /// The trusted key's name and id.
        key: String,
        /// What the note check said.
        why: String,
    },
    /// The checkpoint names another log.
    #[error("the checkpoint is of log {found}, not {expected}")]
    Origin {
        /// The trusted log's origin.
        expected: String,
        /// The checkpoint's.
        found: String,
    },
    /// The inclusion proof does not lead to the checkpoint's root.
    #[error(
        "entry {index} is not in the log's tree of {size} entries: its inclusion proof does not lead to the checkpoint's root"
    )]
    Inclusion {
        /// The entry's index.
        index: u64,
        /// The checkpoint's tree size.
        size: u64,
    },
    /// The entry in the log is not the statement it is said to be.
    #[error("log entry {index} does not hold this {what}: {why}")]
    Entry {
        /// The entry's index.
        index: u64,
        /// Which statement.
        what: &'static str,
        /// Which field differs.
        why: String,
    },
    /// The log rewrote its history between two checkpoints.
    #[error(
        "the log forked: its tree of {new_size} entries does not extend the pinned tree of {old_size} (no consistency between them)"
    )]
    Fork {
        /// The pinned checkpoint's size.
        old_size: u64,
        /// The later checkpoint's size.
        new_size: u64,
    },
    /// A tile could not be read or does not hash to the log's tree.
    #[error("reading the log's tiles: {0}")]
    Tiles(String),
}

fn malformed(what: impl Into<String>) -> LogError {
    LogError::Malformed(what.into())
}

/// The log a buyer trusts: its origin (the checkpoint's first line) and its Ed25519 key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogKey {
    origin: String,
    key: VerifyingKey,
}

impl LogKey {
    /// The log `origin` with its public key in PEM (`-----BEGIN PUBLIC KEY-----`, Ed25519).
    pub fn from_pem(origin: &str, pem: &str) -> Result<LogKey, LogError> {
        use ed25519_dalek::pkcs8::DecodePublicKey as _;
        let key = VerifyingKey::from_public_key_pem(pem.trim())
            .map_err(|e| malformed(format!("the log key is not an Ed25519 public key in PEM ({e})")))?;
        if !signed_note::is_key_name_valid(origin) {
            return Err(malformed(format!("{origin:?} is not a log origin (no spaces, no '+')")));
        }
        Ok(LogKey {
            origin: origin.to_owned(),
            key,
        })
    }

    /// The log's origin.
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The key in PEM.
    pub fn to_pem(&self) -> String {
        let der = [SPKI_ED25519.as_slice(), self.key.as_bytes()].concat();
        let b64 = B64.encode(der);
        format!("-----BEGIN PUBLIC KEY-----\n{b64}\n-----END PUBLIC KEY-----\n")
    }

    /// The C2SP signed-note verifier key, `origin+id+key`.
    pub fn note_key(&self) -> String {
        let encoded = [&[1u8][..], self.key.as_bytes()].concat();
        format!(
            "{}+{:08x}+{}",
            self.origin,
            signed_note::key_id(&self.origin, &encoded),
            B64.encode(&encoded)
        )
    }

    /// The checkpoint in the signed note `text`, once its signature by this log's key
    /// is checked and its origin is this log's.
    pub fn verify_checkpoint(&self, text: &str) -> Result<Checkpoint, LogError> {
        let note_key = self.note_key();
        let wrong = |why: String| LogError::CheckpointSignature {
            key: note_key.split('+').take(2).collect::<Vec<_>>().join("+"),
            why,
        };
        let verifier = signed_note::StandardVerifier::new(&note_key).map_err(|e| wrong(e.to_string()))?;
        let known = signed_note::VerifierList::new(vec![Box::new(verifier)]);
        let note = signed_note::Note::from_bytes(text.as_bytes()).map_err(|e| wrong(e.to_string()))?;
        note.verify(&known).map_err(|e| wrong(e.to_string()))?;
        let checkpoint = parse_checkpoint(text)?;
        if checkpoint.origin() != self.origin {
            return Err(LogError::Origin {
                expected: self.origin.clone(),
                found: checkpoint.origin().to_owned(),
            });
        }
        Ok(checkpoint)
    }
}

/// The checkpoint of a signed note, its signature unchecked.
pub fn parse_checkpoint(text: &str) -> Result<Checkpoint, LogError> {
    let body = text
        .split_once("\n\n")
        .map(|(body, _)| format!("{body}\n"))
        .ok_or_else(|| malformed("the checkpoint is not a signed note (no blank line before its signatures)"))?;
    Checkpoint::from_bytes(body.as_bytes()).map_err(|_| malformed("the checkpoint's text is malformed"))
}

/// A buyer's challenge: a fresh nonce, and the log every run under it enters, with the
/// checkpoint pinned when the challenge was issued.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct Challenge {
    /// [`CHALLENGE_FORMAT`].
    pub format: String,
    /// The nonce (hex, 32 bytes) mixed into every run secret under the challenge.
    pub nonce: String,
    /// The log, if runs must enter one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log: Option<ChallengeLog>,
}

/// The log a challenge names.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ChallengeLog {
    /// Where the log answers (`POST {url}/api/v2/log/entries`, `GET {url}/checkpoint`).
    pub url: String,
    /// Its origin, the first line of its checkpoints.
    pub origin: String,
    /// Its public key (Ed25519, PEM).
    pub key: String,
    /// Its checkpoint when the challenge was issued (a signed note): runs are looked
    /// for after it, and the log must extend it.
    pub pinned_checkpoint: String,
}

impl Challenge {
    /// The nonce's bytes.
    pub fn nonce_bytes(&self) -> Result<Vec<u8>, LogError> {
        crate::unhex(&self.nonce)
            .filter(|b| !b.is_empty() && b.len() <= 64)
            .ok_or_else(|| malformed("the challenge's nonce is not 1 to 64 bytes of hex"))
    }

    /// Reads a challenge file's bytes, checking the log's pinned checkpoint.
    pub fn parse(bytes: &[u8]) -> Result<Challenge, LogError> {
        let challenge: Challenge =
            serde_json::from_slice(bytes).map_err(|e| malformed(format!("not a challenge file: {e}")))?;
        if challenge.format != CHALLENGE_FORMAT {
            return Err(malformed(format!(
                "challenge format {:?} (this tool reads {CHALLENGE_FORMAT})",
                challenge.format
            )));
        }
        challenge.nonce_bytes()?;
        if let Some(log) = &challenge.log {
            log.key()?.verify_checkpoint(&log.pinned_checkpoint)?;
        }
        Ok(challenge)
    }
}

impl ChallengeLog {
    /// The log's key.
    pub fn key(&self) -> Result<LogKey, LogError> {
        LogKey::from_pem(&self.origin, &self.key)
    }

    /// The pinned checkpoint, its signature checked.
    pub fn pinned(&self) -> Result<Checkpoint, LogError> {
        self.key()?.verify_checkpoint(&self.pinned_checkpoint)
    }
}

/// What a run's start entry commits to: logged before the run's first request.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RunStart {
    /// [`START_TYPE`].
    #[serde(rename = "_type")]
    pub kind: String,
    /// The challenge's nonce (hex).
    pub challenge: String,
    /// SHA-256 commitment to the run's random seed (the seed is revealed in the report).
    pub seed_commitment: String,
    /// SHA-256 of the vendor profile as the report embeds it.
    pub profile_sha256: String,
    /// SHA-256 of the suite's case list (ids and parameters).
    pub suite_sha256: String,
    /// The tool's version.
    pub tool_version: String,
    /// The key the run signs its report with (hex, Ed25519).
    pub run_key: String,
}

/// What a run's end entry commits to: logged after its report is signed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RunEnd {
    /// [`END_TYPE`].
    #[serde(rename = "_type")]
    pub kind: String,
    /// The challenge's nonce (hex).
    pub challenge: String,
    /// The log index of the run's start entry.
    pub start_index: u64,
    /// SHA-256 of the signed report (the DSSE envelope's bytes).
    pub report_sha256: String,
    /// The report's verdict, one of [`VERDICTS`].
    pub verdict: String,
}

/// A run's start entry as its report records it (`run_secret.log`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct StartRecord {
    /// Where the log answered.
    pub url: String,
    /// The log's origin.
    pub origin: String,
    /// The log's key (Ed25519, PEM) as the run's challenge gave it: what a resumed run
    /// logs its end with. A verifier trusts the key of the buyer's challenge, not this.
    pub key: String,
    /// What the entry logs.
    pub statement: RunStart,
    /// The entry, its proof and checkpoint.
    pub entry: LoggedEntry,
}

/// A run's end entry, written beside its report ([`END_FILE`]): the report cannot hold
/// it, since it logs the signed report's digest.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EndRecord {
    /// What the entry logs.
    pub statement: RunEnd,
    /// The entry, its proof and checkpoint.
    pub entry: LoggedEntry,
}

/// The file beside a report that holds its run's end entry.
pub const END_FILE: &str = "log-end.json";

/// SHA-256 of a vendor profile as a start entry commits to it: its JSON as the report
/// embeds it, less what resuming the run may change: `max_concurrency`
/// (`--max-concurrency`), and the embedded reference vendor's `base_url` (a port on
/// 127.0.0.1 drawn each time it starts; `source` is the report's `vendor.source`).
pub fn profile_sha256(source: &str, profile: &crate::profile::VendorProfile) -> String {
    let mut value = serde_json::to_value(profile).expect("a profile serialises");
    if let Some(fields) = value.as_object_mut() {
        fields.remove("max_concurrency");
        if source == "embedded" {
            fields.remove("base_url");
        }
    }
    crate::sha256_hex(&serde_json::to_vec(&value).expect("a profile serialises"))
}

/// The bytes of a statement as logged: its JSON, fields in declaration order.
pub fn statement_bytes<T: Serialize>(statement: &T) -> Vec<u8> {
    serde_json::to_vec(statement).expect("a statement serialises")
}

/// SHA-512 (hex) of a start statement: how the log knows it ([`LoggedRun::start_digest`]).
pub fn start_digest(start: &RunStart) -> String {
    crate::hex(&Sha512::digest(statement_bytes(start)))
}

/// The SHA-256 commitment to a run's seed.
pub fn seed_commitment(seed: &[u8; 32]) -> String {
    let mut h = Sha256::new();
    h.update(b"tenantcheck/seed-commitment/v1\0");
    h.update(seed);
    crate::hex(&h.finalize())
}

/// The key that signs a run's entries of one role under a challenge: `start`, or
/// `end {start index} {verdict}`. Anyone who holds the challenge derives it, which is
/// how a buyer finds the runs; no one else can log under the challenge.
pub fn entry_key(challenge: &[u8], role: &str) -> SigningKey {
    let mut h = Sha256::new();
    h.update(b"tenantcheck/log-entry-key/v1\0");
    h.update((challenge.len() as u64).to_be_bytes());
    h.update(challenge);
    h.update(role.as_bytes());
    SigningKey::from_bytes(&h.finalize().into())
}

/// The role of a run's end entry.
pub fn end_role(start_index: u64, verdict: &str) -> String {
    format!("end {start_index} {verdict}")
}

/// The body of `POST /api/v2/log/entries` that logs `statement`: a `hashedrekord`
/// v0.0.2 request, its SHA-512 signed with Ed25519ph by `key`.
pub fn entry_request(statement: &[u8], key: &SigningKey) -> serde_json::Value {
    let digest = Sha512::digest(statement);
    let signature = key
        .sign_prehashed(Sha512::new_with_prefix(statement), None)
        .expect("Ed25519ph signs any digest");
    serde_json::json!({
        "hashedRekordRequestV002": {
            "digest": B64.encode(digest),
            "signature": {
                "content": B64.encode(signature.to_bytes()),
                "verifier": {
                    "publicKey": { "rawBytes": B64.encode(spki(&key.verifying_key())) },
                    "keyDetails": "PKIX_ED25519_PH"
                }
            }
        }
    })
}

fn spki(key: &VerifyingKey) -> Vec<u8> {
    [SPKI_ED25519.as_slice(), key.as_bytes()].concat()
}

/// One entry as the log returned it, with what proves it offline: its inclusion proof
/// and the checkpoint the proof leads to.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct LoggedEntry {
    /// The entry's index in the log.
    pub log_index: u64,
    /// The entry as the log stores it (canonical JSON, base64).
    pub body: String,
    /// The inclusion proof's hashes (base64), leaf to root.
    pub proof: Vec<String>,
    /// The checkpoint (a signed note) whose tree the proof leads to.
    pub checkpoint: String,
}

/// What a checked entry showed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Included {
    /// The entry's index.
    pub index: u64,
    /// The checkpoint's tree size.
    pub tree_size: u64,
    /// The checkpoint's root hash.
    pub root: [u8; 32],
}

impl LoggedEntry {
    /// The entry of Rekor v2's answer to `POST /api/v2/log/entries` (a
    /// `TransparencyLogEntry` in protobuf's JSON).
    pub fn from_response(answer: &serde_json::Value) -> Result<LoggedEntry, LogError> {
        let field = |v: &serde_json::Value, name: &str| -> Result<serde_json::Value, LogError> {
            v.get(name)
                .cloned()
                .ok_or_else(|| malformed(format!("the log's answer has no {name}")))
        };
        let int = |v: serde_json::Value, name: &str| -> Result<u64, LogError> {
            match &v {
                serde_json::Value::String(s) => s.parse().ok(),
                serde_json::Value::Number(n) => n.as_u64(),
                _ => None,
            }
            .ok_or_else(|| malformed(format!("the log's {name} is not an integer")))
        };
        let text = |v: serde_json::Value, name: &str| -> Result<String, LogError> {
            v.as_str()
                .map(str::to_owned)
                .ok_or_else(|| malformed(format!("the log's {name} is not a string")))
        };
        let log_index = int(field(answer, "logIndex")?, "logIndex")?;
        let proof = field(answer, "inclusionProof")?;
        let hashes = match proof.get("hashes") {
            None => Vec::new(),
            Some(serde_json::Value::Array(items)) => items
                .iter()
                .map(|h| text(h.clone(), "inclusion proof hash"))
                .collect::<Result<_, _>>()?,
            Some(_) => return Err(malformed("the log's inclusion proof hashes are not a list")),
        };
        let checkpoint = text(field(&field(&proof, "checkpoint")?, "envelope")?, "checkpoint")?;
        Ok(LoggedEntry {
            log_index,
            body: text(field(answer, "canonicalizedBody")?, "canonicalizedBody")?,
            proof: hashes,
            checkpoint,
        })
    }

    /// Checks, offline, that the entry is in the tree of its checkpoint and that it logs
    /// `statement` signed by `signer`. The checkpoint's own signature is the log key's
    /// to check ([`LogKey::verify_checkpoint`]).
    pub fn check(&self, what: &'static str, statement: &[u8], signer: &VerifyingKey) -> Result<Included, LogError> {
        let body = B64
            .decode(&self.body)
            .map_err(|_| malformed("the entry's body is not base64"))?;
        let checkpoint = parse_checkpoint(&self.checkpoint)?;
        let size = checkpoint.size();
        if self.log_index >= size {
            return Err(LogError::Inclusion {
                index: self.log_index,
                size,
            });
        }
        let proof = self
            .proof
            .iter()
            .map(|h| {
                B64.decode(h)
                    .ok()
                    .and_then(|b| <[u8; 32]>::try_from(b).ok())
                    .map(Hash)
                    .ok_or_else(|| malformed("an inclusion proof hash is not 32 bytes of base64"))
            })
            .collect::<Result<Vec<_>, _>>()?;
        tlog_tiles::check_record(
            &proof,
            size,
            *checkpoint.hash(),
            self.log_index,
            tlog_tiles::record_hash(&body),
        )
        .map_err(|_| LogError::Inclusion {
            index: self.log_index,
            size,
        })?;
        let entry = Rekord::read(&body).map_err(|why| LogError::Entry {
            index: self.log_index,
            what,
            why,
        })?;
        let wrong = |why: String| LogError::Entry {
            index: self.log_index,
            what,
            why,
        };
        if entry.digest != Sha512::digest(statement).as_slice() {
            return Err(wrong("its digest is not the SHA-512 of the statement".to_owned()));
        }
        if entry.key != *signer {
            return Err(wrong("it is signed by another key than this challenge's".to_owned()));
        }
        if signer
            .verify_prehashed(Sha512::new_with_prefix(statement), None, &entry.signature)
            .is_err()
        {
            return Err(wrong("its signature does not verify".to_owned()));
        }
        Ok(Included {
            index: self.log_index,
            tree_size: size,
            root: checkpoint.hash().0,
        })
    }
}

/// What [`check_logged`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Logged {
    /// The start entry.
    pub start: Included,
    /// The end entry, when one was given.
    pub end: Option<Included>,
}

/// Checks a verified report's log entries against the log its buyer's challenge names:
/// the start entry's checkpoint is signed by the log's key, and the end entry (when
/// given) logs this report's digest and verdict under the challenge's end key for that
/// start, in a checkpoint the log signed. `report::verify` has already held
/// the start entry to the report.
pub fn check_logged(
    log: &ChallengeLog,
    start: Option<&StartRecord>,
    envelope: &[u8],
    verdict: &str,
    end: Option<&EndRecord>,
) -> Result<Logged, LogError> {
    let key = log.key()?;
    let start = start.ok_or_else(|| {
        malformed(format!(
            "the challenge requires every run to enter the log {}, and this run did not (its report records no start entry)",
            log.origin
        ))
    })?;
    if start.origin != log.origin {
        return Err(LogError::Origin {
            expected: log.origin.clone(),
            found: start.origin.clone(),
        });
    }
    let challenge = crate::unhex(&start.statement.challenge).unwrap_or_default();
    let checkpoint = key.verify_checkpoint(&start.entry.checkpoint)?;
    let pinned = log.pinned()?;
    if checkpoint.size() <= pinned.size() || start.entry.log_index < pinned.size() {
        return Err(malformed(format!(
            "the start entry {} is not after the checkpoint pinned with the challenge ({} entries): the run was logged before the challenge was issued",
            start.entry.log_index,
            pinned.size()
        )));
    }
    let start_included = Included {
        index: start.entry.log_index,
        tree_size: checkpoint.size(),
        root: checkpoint.hash().0,
    };
    let end = match end {
        None => None,
        Some(end) => {
            let s = &end.statement;
            let wrong = |why: String| LogError::Entry {
                index: end.entry.log_index,
                what: "run end",
                why,
            };
            if s.kind != END_TYPE || s.challenge != start.statement.challenge {
                return Err(wrong("it is not an end entry under this challenge".to_owned()));
            }
            if s.start_index != start.entry.log_index {
                return Err(wrong(format!(
                    "it ends the run that started at entry {}, not this one (entry {})",
                    s.start_index, start.entry.log_index
                )));
            }
            if s.report_sha256 != crate::sha256_hex(envelope) {
                return Err(wrong(format!(
                    "it logs report sha256 {}, and this report's is {}",
                    s.report_sha256,
                    crate::sha256_hex(envelope)
                )));
            }
            if s.verdict != verdict {
                return Err(wrong(format!(
                    "it logs verdict {}, and this report's is {verdict}",
                    s.verdict
                )));
            }
            let signer = entry_key(&challenge, &end_role(s.start_index, &s.verdict)).verifying_key();
            let included = end.entry.check("run end", &statement_bytes(s), &signer)?;
            key.verify_checkpoint(&end.entry.checkpoint)?;
            Some(included)
        }
    };
    Ok(Logged {
        start: start_included,
        end,
    })
}

/// A `hashedrekord` v0.0.2 entry with an Ed25519ph key, as read from the log.
struct Rekord {
    digest: Vec<u8>,
    key: VerifyingKey,
    signature: Signature,
}

impl Rekord {
    fn read(body: &[u8]) -> Result<Rekord, String> {
        let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| format!("not JSON ({e})"))?;
        let at = |path: &str| -> Result<&str, String> {
            v.pointer(path)
                .and_then(|x| x.as_str())
                .ok_or_else(|| format!("no {path}"))
        };
        if at("/kind")? != "hashedrekord" || at("/apiVersion")? != "0.0.2" {
            return Err("not a hashedrekord 0.0.2 entry".to_owned());
        }
        let spec = "/spec/hashedRekordV002";
        if at(&format!("{spec}/data/algorithm"))? != "SHA2_512"
            || at(&format!("{spec}/signature/verifier/keyDetails"))? != "PKIX_ED25519_PH"
        {
            return Err("not an Ed25519ph signature over a SHA-512 digest".to_owned());
        }
        let bytes = |path: String| B64.decode(at(&path)?).map_err(|_| format!("{path} is not base64"));
        let digest = bytes(format!("{spec}/data/digest"))?;
        let der = bytes(format!("{spec}/signature/verifier/publicKey/rawBytes"))?;
        let key = der
            .strip_prefix(SPKI_ED25519.as_slice())
            .and_then(|k| <[u8; 32]>::try_from(k).ok())
            .and_then(|k| VerifyingKey::from_bytes(&k).ok())
            .ok_or("its key is not an Ed25519 public key")?;
        let signature = bytes(format!("{spec}/signature/content"))?;
        let signature = Signature::from_slice(&signature).map_err(|_| "its signature is not 64 bytes".to_owned())?;
        Ok(Rekord { digest, key, signature })
    }
}

/// Where the log's tiles come from: `path` is a C2SP tlog-tiles path (`checkpoint`,
/// `tile/0/x001/234.p/5`, `tile/entries/000`). The tenantcheck package reads them over
/// HTTP; tests from a folder.
pub trait TileSource {
    /// The file at `path`, or why it could not be had.
    fn fetch(&self, path: &str) -> Result<Vec<u8>, String>;
}

/// One run under a challenge, as the log shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoggedRun {
    /// Its start entry's index.
    pub start_index: u64,
    /// SHA-512 (hex) of its start statement: a report's [`RunStart`] is this run's when
    /// its digest is this.
    pub start_digest: String,
    /// Its end entry, if it ended: the entry's index and the verdict its key states.
    pub end: Option<(u64, String)>,
}

/// Every run under `challenge` in the log from the `pinned` checkpoint to `latest` (both
/// verified by the caller), reading the tiles between them from `source`. The log must
/// extend the pinned tree: the pinned root is recomputed from the latest tree's tiles.
pub fn runs_under(
    challenge: &[u8],
    pinned: &Checkpoint,
    latest: &Checkpoint,
    source: &dyn TileSource,
) -> Result<Vec<LoggedRun>, LogError> {
    if latest.size() < pinned.size() {
        return Err(LogError::Fork {
            old_size: pinned.size(),
            new_size: latest.size(),
        });
    }
    let reader = Tiles { source };
    let hashes = tlog_tiles::TileHashReader::new(latest.size(), *latest.hash(), &reader);
    if pinned.size() > 0 {
        let old_root = tlog_tiles::tree_hash(pinned.size(), &hashes).map_err(|e| LogError::Tiles(e.to_string()))?;
        if old_root != *pinned.hash() {
            return Err(LogError::Fork {
                old_size: pinned.size(),
                new_size: latest.size(),
            });
        }
    }
    let start_key = entry_key(challenge, "start").verifying_key();
    let mut runs: Vec<LoggedRun> = Vec::new();
    let mut ends: std::collections::HashMap<[u8; 32], (usize, String)> = Default::default();
    for (index, body) in entries(pinned.size(), latest.size(), &hashes, source)? {
        let Ok(entry) = Rekord::read(&body) else { continue };
        if entry.key == start_key {
            let run = runs.len();
            for verdict in VERDICTS {
                let key = entry_key(challenge, &end_role(index, verdict)).verifying_key();
                ends.insert(key.to_bytes(), (run, verdict.to_owned()));
            }
            runs.push(LoggedRun {
                start_index: index,
                start_digest: crate::hex(&entry.digest),
                end: None,
            });
        } else if let Some((run, verdict)) = ends.get(&entry.key.to_bytes()) {
            // A resumed run ends again: its last end is its report's.
            let run = &mut runs[*run];
            run.end = Some((index, verdict.clone()));
        }
    }
    Ok(runs)
}

/// One line on the runs a log holds under a challenge, how they ended, and which were
/// disclosed: "5 runs started under this challenge: 2 ended PASS, 3 ended FAIL; 1
/// disclosed; not disclosed: 3 ended FAIL, 1 ended PASS".
pub fn disclosure_line(runs: &[LoggedRun], is_disclosed: impl Fn(&LoggedRun) -> bool) -> String {
    fn ends<'a>(runs: impl Iterator<Item = &'a LoggedRun>) -> String {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for r in runs {
            let end = r
                .end
                .as_ref()
                .map_or("never ended".to_owned(), |(_, v)| format!("ended {v}"));
            *counts.entry(end).or_default() += 1;
        }
        counts
            .iter()
            .map(|(end, n)| format!("{n} {end}"))
            .collect::<Vec<_>>()
            .join(", ")
    }
    let disclosed = runs.iter().filter(|r| is_disclosed(r)).count();
    let mut line = format!(
        "{} {} started under this challenge",
        runs.len(),
        if runs.len() == 1 { "run" } else { "runs" }
    );
    if !runs.is_empty() {
        line.push_str(&format!(": {}", ends(runs.iter())));
    }
    line.push_str(&format!("; {disclosed} disclosed"));
    if disclosed < runs.len() {
        line.push_str(&format!(
            "; not disclosed: {}",
            ends(runs.iter().filter(|r| !is_disclosed(r)))
        ));
    }
    line
}

/// The entries `from..to` of the log, each checked against the tree's leaf hashes.
fn entries(
    from: u64,
    to: u64,
    hashes: &dyn tlog_tiles::HashReader,
    source: &dyn TileSource,
) -> Result<Vec<(u64, Vec<u8>)>, LogError> {
    let width = 1u64 << TILE_HEIGHT;
    let mut out = Vec::new();
    let mut bundle = from / width;
    while bundle * width < to {
        let count = (to - bundle * width).min(width);
        let (path, data) = fetch_tile(source, "entries", bundle, count).map_err(LogError::Tiles)?;
        let mut rest = data.as_slice();
        for i in 0..count {
            let index = bundle * width + i;
            let (len, tail) = rest
                .split_first_chunk::<2>()
                .ok_or_else(|| LogError::Tiles(format!("{path} ends before entry {index}")))?;
            let len = u16::from_be_bytes(*len) as usize;
            if tail.len() < len {
                return Err(LogError::Tiles(format!("{path} ends inside entry {index}")));
            }
            let (body, tail) = tail.split_at(len);
            rest = tail;
            if index < from {
                continue;
            }
            let leaf = hashes
                .read_hashes(&[tlog_tiles::stored_hash_index(0, index)])
                .map_err(|e| LogError::Tiles(e.to_string()))?;
            if leaf.first() != Some(&tlog_tiles::record_hash(body)) {
                return Err(LogError::Tiles(format!(
                    "entry {index} in {path} is not the log's leaf {index}"
                )));
            }
            out.push((index, body.to_vec()));
        }
        bundle += 1;
    }
    Ok(out)
}

/// Tile `index` of `level` with at least `count` entries, and its path: the partial tile
/// of that width, else the full one (C2SP tlog-tiles lets a log delete a partial tile
/// once the full one is published; a full tile begins with every partial one).
fn fetch_tile(source: &dyn TileSource, level: &str, index: u64, count: u64) -> Result<(String, Vec<u8>), String> {
    let width = 1u64 << TILE_HEIGHT;
    let path = tile_path(level, index, count, width);
    match source.fetch(&path) {
        Ok(data) => Ok((path, data)),
        Err(_) if count < width => {
            let full = tile_path(level, index, width, width);
            source
                .fetch(&full)
                .map(|data| (full, data))
                .map_err(|e| format!("{path} and {e}"))
        }
        Err(e) => Err(e),
    }
}

/// A C2SP tlog-tiles path: `tile/{level}/{index as x001/234}[.p/{width}]`.
fn tile_path(level: &str, index: u64, count: u64, width: u64) -> String {
    let mut n = index;
    let mut digits = format!("{:03}", n % 1000);
    while n >= 1000 {
        n /= 1000;
        digits = format!("x{:03}/{digits}", n % 1000);
    }
    let partial = if count < width {
        format!(".p/{count}")
    } else {
        String::new()
    };
    format!("tile/{level}/{digits}{partial}")
}

/// The hash tiles, read from a [`TileSource`] in the C2SP layout.
struct Tiles<'a> {
    source: &'a dyn TileSource,
}

impl tlog_tiles::TileReader for Tiles<'_> {
    fn height(&self) -> u8 {
        TILE_HEIGHT
    }

    fn read_tiles(&self, tiles: &[tlog_tiles::Tile]) -> Result<Vec<Vec<u8>>, tlog_tiles::Error> {
        tiles
            .iter()
            .map(|t| {
                let (_, data) = fetch_tile(
                    self.source,
                    &t.level().to_string(),
                    t.level_index(),
                    u64::from(t.width()),
                )
                .map_err(|_| tlog_tiles::Error::InvalidTile)?;
                let need = t.width() as usize * tlog_tiles::HASH_SIZE;
                if data.len() < need {
                    return Err(tlog_tiles::Error::InvalidTile);
                }
                Ok(data[..need].to_vec())
            })
            .collect()
    }

    fn save_tiles(&self, _: &[tlog_tiles::Tile], _: &[Vec<u8>]) {}
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disclosure_line_counts_every_run_and_the_hidden_ones() {
        let run = |i: u64, end: Option<&str>| LoggedRun {
            start_index: i,
            start_digest: i.to_string(),
            end: end.map(|v| (i + 1, v.to_owned())),
        };
        let runs = [
            run(0, Some("PASS")),
            run(2, Some("FAIL")),
            run(4, Some("FAIL")),
            run(6, None),
            run(8, Some("PASS")),
        ];
        assert_eq!(
            disclosure_line(&runs, |r| r.start_index == 0),
            "5 runs started under this challenge: 2 ended FAIL, 2 ended PASS, 1 never ended; 1 disclosed; not disclosed: 2 ended FAIL, 1 ended PASS, 1 never ended"
        );
        assert_eq!(
            disclosure_line(&runs, |_| true),
            "5 runs started under this challenge: 2 ended FAIL, 2 ended PASS, 1 never ended; 5 disclosed"
        );
        assert_eq!(
            disclosure_line(&[], |_| true),
            "0 runs started under this challenge; 0 disclosed"
        );
    }

    /// A log in memory, as Rekor v2 keeps one: `hashedrekord` bodies, RFC 6962 leaves,
    /// checkpoints signed as C2SP notes, tiles in the C2SP layout.
    struct MemLog {
        origin: String,
        seed: [u8; 32],
        bodies: Vec<Vec<u8>>,
        hashes: std::cell::RefCell<Vec<Hash>>,
    }

    impl tlog_tiles::HashReader for MemLog {
        fn read_hashes(&self, indexes: &[u64]) -> Result<Vec<Hash>, tlog_tiles::Error> {
            let hashes = self.hashes.borrow();
            Ok(indexes.iter().map(|&i| hashes[i as usize]).collect())
        }
    }

    impl MemLog {
        fn new(origin: &str, seed: u8) -> MemLog {
            MemLog {
                origin: origin.to_owned(),
                seed: [seed; 32],
                bodies: Vec::new(),
                hashes: Default::default(),
            }
        }

        fn key(&self) -> LogKey {
            let public = SigningKey::from_bytes(&self.seed).verifying_key();
            LogKey {
                origin: self.origin.clone(),
                key: public,
            }
        }

        /// Appends the entry Rekor makes of `request`; its index.
        fn append(&mut self, request: &serde_json::Value) -> u64 {
            let r = &request["hashedRekordRequestV002"];
            let body = serde_json::json!({
                "apiVersion": "0.0.2",
                "kind": "hashedrekord",
                "spec": {"hashedRekordV002": {
                    "data": {"algorithm": "SHA2_512", "digest": r["digest"]},
                    "signature": r["signature"],
                }}
            });
            let body = serde_json::to_vec(&body).unwrap();
            let n = self.bodies.len() as u64;
            let stored = tlog_tiles::stored_hashes(n, &body, self).unwrap();
            self.hashes.borrow_mut().extend(stored);
            self.bodies.push(body);
            n
        }

        fn checkpoint(&self) -> String {
            let size = self.bodies.len() as u64;
            let root = tlog_tiles::tree_hash(size, self).unwrap();
            let text = Checkpoint::new(&self.origin, size, root, "").unwrap().to_bytes();
            let encoded = [
                &[1u8][..],
                SigningKey::from_bytes(&self.seed).verifying_key().as_bytes(),
            ]
            .concat();
            let skey = format!(
                "PRIVATE+KEY+{}+{:08x}+{}",
                self.origin,
                signed_note::key_id(&self.origin, &encoded),
                B64.encode([&[1u8][..], &self.seed].concat())
            );
            let signer = signed_note::StandardSigner::new(&skey).unwrap();
            let mut note = signed_note::Note::new(&text, &[]).unwrap();
            note.add_sigs(&[&signer]).unwrap();
            String::from_utf8(note.to_bytes()).unwrap()
        }

        /// Entry `n` as the log's answer gives it, proved against the current tree.
        fn entry(&self, n: u64) -> LoggedEntry {
            let size = self.bodies.len() as u64;
            let proof = tlog_tiles::prove_record(size, n, self).unwrap();
            LoggedEntry {
                log_index: n,
                body: B64.encode(&self.bodies[n as usize]),
                proof: proof.iter().map(|h| B64.encode(h.0)).collect(),
                checkpoint: self.checkpoint(),
            }
        }
    }

    impl TileSource for MemLog {
        /// Every tile of the current tree, as a log keeps them: full tiles, and the one
        /// partial tile at the right edge (the partial ones before it deleted).
        fn fetch(&self, path: &str) -> Result<Vec<u8>, String> {
            let size = self.bodies.len() as u64;
            let hashes = self.hashes.borrow();
            for level in 0..3u8 {
                let leaves = size >> (8 * u32::from(level));
                for index in 0..=leaves / 256 {
                    let count = (leaves - index * 256).min(256);
                    if count == 0 || path != tile_path(&level.to_string(), index, count, 256) {
                        continue;
                    }
                    let at = |i: u64| hashes[tlog_tiles::stored_hash_index(8 * level, index * 256 + i) as usize];
                    return Ok((0..count).flat_map(|i| at(i).0).collect());
                }
            }
            for index in 0..=size / 256 {
                let count = (size - index * 256).min(256);
                if count == 0 || path != tile_path("entries", index, count, 256) {
                    continue;
                }
                let mut out = Vec::new();
                for body in &self.bodies[(index * 256) as usize..(index * 256 + count) as usize] {
                    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
                    out.extend_from_slice(body);
                }
                return Ok(out);
            }
            Err(format!("{path}: not found"))
        }
    }

    fn start(nonce: &str) -> RunStart {
        RunStart {
            kind: START_TYPE.into(),
            challenge: nonce.into(),
            seed_commitment: seed_commitment(&[7; 32]),
            profile_sha256: "0".repeat(64),
            suite_sha256: "1".repeat(64),
            tool_version: "0.1.0".into(),
            run_key: "2".repeat(64),
        }
    }

    #[test]
    fn an_entry_proves_offline_what_it_logs_and_nothing_else() {
        let mut log = MemLog::new("log.example", 9);
        let statement = statement_bytes(&start("aa"));
        let key = entry_key(b"\xaa", "start");
        log.append(&entry_request(b"someone else's", &entry_key(b"x", "start")));
        let n = log.append(&entry_request(&statement, &key));
        log.append(&entry_request(b"later", &entry_key(b"y", "start")));
        let entry = log.entry(n);
        let included = entry.check("run start", &statement, &key.verifying_key()).unwrap();
        assert_eq!((included.index, included.tree_size), (1, 3));
        log.key().verify_checkpoint(&entry.checkpoint).unwrap();

        let refused = |e: &LoggedEntry, statement: &[u8], key: &VerifyingKey| {
            e.check("run start", statement, key).unwrap_err().to_string()
        };
        // Another statement, another key, another index, a proof changed, a body changed.
        assert!(refused(&entry, b"other", &key.verifying_key()).contains("its digest is not the SHA-512"));
        let stranger = entry_key(b"\xbb", "start").verifying_key();
        assert!(refused(&entry, &statement, &stranger).contains("signed by another key"));
        let mut moved = entry.clone();
        moved.log_index = 0;
        assert!(refused(&moved, &statement, &key.verifying_key()).contains("inclusion proof does not lead"));
        let mut bent = entry.clone();
        bent.proof[0] = B64.encode([0u8; 32]);
        assert!(refused(&bent, &statement, &key.verifying_key()).contains("inclusion proof does not lead"));
        let mut swapped = entry.clone();
        swapped.body = log.entry(0).body;
        assert!(refused(&swapped, &statement, &key.verifying_key()).contains("inclusion proof does not lead"));
        let mut past = entry.clone();
        past.log_index = 3;
        assert!(refused(&past, &statement, &key.verifying_key()).contains("not in the log's tree of 3"));
        // A checkpoint signed by another log's key, or naming another log.
        let other = MemLog::new("log.example", 10);
        assert!(
            other
                .key()
                .verify_checkpoint(&entry.checkpoint)
                .unwrap_err()
                .to_string()
                .contains("is not signed by the log key")
        );
        let renamed = LogKey {
            origin: "elsewhere".into(),
            key: log.key().key,
        };
        assert!(renamed.verify_checkpoint(&entry.checkpoint).is_err());
    }

    #[test]
    fn the_runs_under_a_challenge_are_read_from_the_tiles_and_a_fork_is_refused() {
        let nonce = b"\x01\x02";
        let mut log = MemLog::new("log.example", 3);
        log.append(&entry_request(b"before the challenge", &entry_key(b"x", "start")));
        let pinned = parse_checkpoint(&log.checkpoint()).unwrap();
        let first = statement_bytes(&start("0102"));
        let a = log.append(&entry_request(&first, &entry_key(nonce, "start")));
        log.append(&entry_request(b"another challenge", &entry_key(b"other", "start")));
        let end = RunEnd {
            kind: END_TYPE.into(),
            challenge: "0102".into(),
            start_index: a,
            report_sha256: "3".repeat(64),
            verdict: "FAIL".into(),
        };
        log.append(&entry_request(
            &statement_bytes(&end),
            &entry_key(nonce, &end_role(a, "FAIL")),
        ));
        let mut second = start("0102");
        second.seed_commitment = seed_commitment(&[8; 32]);
        let b = log.append(&entry_request(&statement_bytes(&second), &entry_key(nonce, "start")));
        let latest = parse_checkpoint(&log.checkpoint()).unwrap();
        let runs = runs_under(nonce, &pinned, &latest, &log).unwrap();
        assert_eq!(runs.len(), 2);
        assert_eq!(
            (runs[0].start_index, runs[0].end.clone()),
            (a, Some((3, "FAIL".to_owned())))
        );
        assert_eq!(runs[0].start_digest, start_digest(&start("0102")));
        assert_eq!((runs[1].start_index, runs[1].end.clone()), (b, None));
        // The other challenge sees none of them.
        assert!(runs_under(b"other-nonce", &pinned, &latest, &log).unwrap().is_empty());

        // The same origin and key, another history: the pinned tree is not its prefix.
        let mut forked = MemLog::new("log.example", 3);
        for body in [b"rewritten".as_slice(), b"history", b"of", b"the", b"log"] {
            forked.append(&entry_request(body, &entry_key(b"x", "start")));
        }
        let forked_latest = parse_checkpoint(&forked.checkpoint()).unwrap();
        let err = runs_under(nonce, &pinned, &forked_latest, &forked).unwrap_err();
        assert!(
            matches!(
                err,
                LogError::Fork {
                    old_size: 1,
                    new_size: 5
                }
            ),
            "{err}"
        );
        // A log that shrank.
        let err = runs_under(nonce, &latest, &pinned, &log).unwrap_err();
        assert!(matches!(err, LogError::Fork { .. }), "{err}");
        // Entries that are not the leaves the tree commits to.
        struct Lying<'a>(&'a MemLog);
        impl TileSource for Lying<'_> {
            fn fetch(&self, path: &str) -> Result<Vec<u8>, String> {
                let mut data = self.0.fetch(path)?;
                if path.starts_with("tile/entries/") {
                    let last = data.len() - 2;
                    data[last] ^= 1;
                }
                Ok(data)
            }
        }
        let err = runs_under(nonce, &pinned, &latest, &Lying(&log)).unwrap_err();
        assert!(err.to_string().contains("is not the log's leaf"), "{err}");
    }

    #[test]
    fn runs_are_read_across_full_tiles_and_past_deleted_partial_ones() {
        let nonce = b"\x05";
        let mut log = MemLog::new("log.example", 4);
        for i in 0..300u32 {
            log.append(&entry_request(&i.to_be_bytes(), &entry_key(b"x", "start")));
        }
        // Pinned at 300: the tile 0/001.p/44 of then is gone once the log has grown.
        let pinned = parse_checkpoint(&log.checkpoint()).unwrap();
        let mut starts = Vec::new();
        for i in 0..4u8 {
            let mut s = start("05");
            s.seed_commitment = seed_commitment(&[i; 32]);
            starts.push(log.append(&entry_request(&statement_bytes(&s), &entry_key(nonce, "start"))));
            for j in 0..100u32 {
                log.append(&entry_request(
                    &(j + 1000 * u32::from(i)).to_be_bytes(),
                    &entry_key(b"x", "start"),
                ));
            }
        }
        assert!(log.bodies.len() > 2 * 256);
        let latest = parse_checkpoint(&log.checkpoint()).unwrap();
        let runs = runs_under(nonce, &pinned, &latest, &log).unwrap();
        assert_eq!(runs.iter().map(|r| r.start_index).collect::<Vec<_>>(), starts);
    }

    #[test]
    fn a_partial_tile_the_log_deleted_is_read_from_the_full_one() {
        struct FullOnly;
        impl TileSource for FullOnly {
            fn fetch(&self, path: &str) -> Result<Vec<u8>, String> {
                match path {
                    "tile/0/001" => Ok(vec![7; 256 * 32]),
                    _ => Err(format!("{path}: not found")),
                }
            }
        }
        let (path, data) = fetch_tile(&FullOnly, "0", 1, 5).unwrap();
        assert_eq!((path.as_str(), data.len()), ("tile/0/001", 256 * 32));
        let err = fetch_tile(&FullOnly, "0", 2, 5).unwrap_err();
        assert!(
            err.contains("tile/0/002.p/5") && err.contains("tile/0/002: not found"),
            "{err}"
        );
    }

    #[test]
    fn tile_paths_follow_the_c2sp_layout() {
        assert_eq!(tile_path("0", 0, 5, 256), "tile/0/000.p/5");
        assert_eq!(tile_path("1", 1234, 256, 256), "tile/1/x001/234");
        assert_eq!(
            tile_path("entries", 1_234_067, 7, 256),
            "tile/entries/x001/x234/067.p/7"
        );
    }

    #[test]
    fn an_entry_request_signs_the_statement_with_ed25519ph() {
        let key = entry_key(b"nonce", "start");
        let request = entry_request(b"{\"a\":1}", &key);
        let r = &request["hashedRekordRequestV002"];
        let digest = B64.decode(r["digest"].as_str().unwrap()).unwrap();
        assert_eq!(digest, Sha512::digest(b"{\"a\":1}").to_vec());
        let sig = B64.decode(r["signature"]["content"].as_str().unwrap()).unwrap();
        let sig = Signature::from_slice(&sig).unwrap();
        let vk = key.verifying_key();
        assert!(
            vk.verify_prehashed(Sha512::new_with_prefix(b"{\"a\":1}"), None, &sig)
                .is_ok()
        );
        assert!(
            vk.verify_prehashed(Sha512::new_with_prefix(b"{\"a\":2}"), None, &sig)
                .is_err()
        );
        // Pure Ed25519 over the same bytes is another signature: the log takes only Ed25519ph.
        assert!(ed25519_dalek::Verifier::verify(&vk, b"{\"a\":1}", &sig).is_err());
    }

    #[test]
    fn entry_keys_differ_by_challenge_and_role() {
        let a = entry_key(b"one", "start").verifying_key();
        assert_ne!(a, entry_key(b"two", "start").verifying_key());
        assert_ne!(a, entry_key(b"one", &end_role(0, "PASS")).verifying_key());
        assert_ne!(
            entry_key(b"one", &end_role(3, "PASS")).verifying_key(),
            entry_key(b"one", &end_role(3, "FAIL")).verifying_key()
        );
    }
}
