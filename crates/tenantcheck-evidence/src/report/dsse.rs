//! [`Envelope`]: a DSSE envelope (Dead Simple Signing Envelope, v1) signed with
//! ed25519.
//!
//! The signature covers the pre-authentication encoding (PAE) of the payload type and
//! the exact payload bytes: `"DSSEv1" SP len(type) SP type SP len(body) SP body`. The
//! payload and signatures are standard padded base64 when written; both standard
//! and URL-safe alphabets are read. Each signature carries the signer's `keyid` (see
//! [`super::key::key_id`]), as `securesystemslib` requires.

use super::VerifyError;
use super::key;
use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, URL_SAFE};
use ed25519_dalek::{Signature as EdSignature, Signer, SigningKey, VerifyingKey};
use serde::{Deserialize, Serialize};

/// The payload type of an in-toto Statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";

/// A DSSE envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Envelope {
    /// The payload's media type.
    #[serde(rename = "payloadType")]
    pub payload_type: String,
    /// The payload, base64.
    pub payload: String,
    /// The signatures.
    pub signatures: Vec<Signature>,
}

/// One signature of an envelope.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Signature {
    /// The signer's key id.
    pub keyid: String,
    /// The ed25519 signature over the PAE, base64.
    pub sig: String,
}

/// The DSSE v1 pre-authentication encoding.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!("DSSEv1 {} {} {} ", payload_type.len(), payload_type, payload.len()).into_bytes();
    out.extend_from_slice(payload);
    out
}

impl Envelope {
    /// Signs `payload` of `payload_type` with `key`.
    pub fn sign(payload_type: &str, payload: &[u8], key: &SigningKey) -> Self {
        let sig = key.sign(&pae(payload_type, payload));
        Envelope {
            payload_type: payload_type.to_owned(),
            payload: STANDARD.encode(payload),
            signatures: vec![Signature {
                keyid: key::key_id(&key.verifying_key()),
                sig: STANDARD.encode(sig.to_bytes()),
            }],
        }
    }

    /// The payload bytes, unchecked: only to tell what a statement claims to be (a
    /// report, a merge summary) before verifying it as that.
    pub fn unverified_payload(&self) -> Result<Vec<u8>, VerifyError> {
        decode(&self.payload).ok_or(VerifyError::Base64("payload"))
    }

    /// The ids of the keys whose signatures the envelope carries (unchecked).
    pub fn key_ids(&self) -> impl Iterator<Item = &str> {
        self.signatures.iter().map(|s| s.keyid.as_str())
    }

    /// The payload bytes, once a signature by `key` over them checks out
    /// (`verify_strict`: no malleable or small-order forms).
    pub fn verified_payload(&self, key: &VerifyingKey) -> Result<Vec<u8>, VerifyError> {
        let payload = decode(&self.payload).ok_or(VerifyError::Base64("payload"))?;
        let key_id = key::key_id(key);
        let signature =
            self.signatures
                .iter()
                .find(|s| s.keyid == key_id)
                .ok_or_else(|| VerifyError::NoSignatureForKey {
                    key_id: key_id.clone(),
                    found: self.signatures.iter().map(|s| s.keyid.clone()).collect(),
                })?;
        let bytes = decode(&signature.sig).ok_or(VerifyError::Base64("signature"))?;
        let sig = EdSignature::from_slice(&bytes).map_err(|_| VerifyError::BadSignature { key_id: key_id.clone() })?;
        key.verify_strict(&pae(&self.payload_type, &payload), &sig)
            .map_err(|_| VerifyError::BadSignature { key_id })?;
        Ok(payload)
    }
}

fn decode(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text).or_else(|_| URL_SAFE.decode(text)).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pae_matches_the_specification_example() {
        // The DSSE protocol document's example.
        assert_eq!(
            pae("http://example.com/HelloWorld", b"hello world"),
            b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
        );
    }

    #[test]
    fn signs_and_verifies_and_rejects_other_keys_and_changes() {
        let key = key::generate();
        let env = Envelope::sign(PAYLOAD_TYPE, b"{\"a\":1}", &key);
        assert_eq!(env.verified_payload(&key.verifying_key()).unwrap(), b"{\"a\":1}");
        let other = key::generate().verifying_key();
        assert!(matches!(
            env.verified_payload(&other),
            Err(VerifyError::NoSignatureForKey { .. })
        ));
        let mut changed = env.clone();
        changed.payload_type = "text/plain".into();
        assert!(matches!(
            changed.verified_payload(&key.verifying_key()),
            Err(VerifyError::BadSignature { .. })
        ));
    }
}
