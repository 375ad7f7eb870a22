//! Signing keys: ed25519, private key as PKCS#8 v1 PEM, public key as SPKI PEM.
//!
//! The private key is written as PKCS#8 *v1* (no embedded public key), because
//! OpenSSL 3.0 and Python's `cryptography` refuse the v2 form that
//! `ed25519-dalek`'s `to_pkcs8_pem` writes. Both forms are read.
//!
//! The key id is what `securesystemslib` computes by default, so that its DSSE
//! verifier finds the key: the SHA-256 (hex) of the canonical JSON
//! `{"keytype":"ed25519","keyval":{"public":HEX},"scheme":"ed25519"}`.

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, KeypairBytes};
use ed25519_dalek::{SigningKey, VerifyingKey};
use std::path::{Path, PathBuf};

/// File name of the private key written by `keygen` and by runs without `--key`.
pub const PRIVATE_KEY_FILE: &str = "signing-key.pem";
/// File name of the public key beside it.
pub const PUBLIC_KEY_FILE: &str = "signing-key.pub.pem";
/// File name of the public key in securesystemslib's JSON key form.
pub const PUBLIC_KEY_JSON_FILE: &str = "signing-key.pub.json";

/// A key that could not be made, read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum KeyError {
    /// A key file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// A key file is not a PEM ed25519 key of the expected kind.
    #[error("{}: not an ed25519 {what} in PEM form ({problem})", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// "private key (PKCS#8)" or "public key (SPKI)".
        what: &'static str,
        /// The decoder's complaint.
        problem: String,
    },
    /// A key file already exists.
    #[error("{}: already exists; fix: choose another folder or remove the old key", path.display())]
    Exists {
        /// The file.
        path: PathBuf,
    },
}

/// A fresh signing key from the operating system's CSPRNG.
pub fn generate() -> SigningKey {
    SigningKey::from_bytes(&crate::random_bytes())
}

/// The key id of `key` (see the module documentation).
pub fn key_id(key: &VerifyingKey) -> String {
    let canonical = format!(
        r#"{{"keytype":"ed25519","keyval":{{"public":"{}"}},"scheme":"ed25519"}}"#,
        crate::hex(key.as_bytes())
    );
    crate::sha256_hex(canonical.as_bytes())
}

/// The public key in securesystemslib's JSON key form, with its key id:
/// `{"keyid": …, "keytype": "ed25519", "scheme": "ed25519", "keyval": {"public": HEX}}`
/// (load it with `SSlibKey.from_dict(d.pop("keyid"), d)`).
pub fn public_json(key: &VerifyingKey) -> String {
    let v = serde_json::json!({
        "keyid": key_id(key),
        "keytype": "ed25519",
        "scheme": "ed25519",
        "keyval": { "public": crate::hex(key.as_bytes()) },
    });
    let mut text = serde_json::to_string_pretty(&v).expect("a key serialises");
    text.push('\n');
    text
}

/// Writes the public key, as SPKI PEM and in securesystemslib's JSON form, into `dir`.
pub fn write_public(dir: &Path, key: &VerifyingKey) -> Result<PathBuf, KeyError> {
    let pem = dir.join(PUBLIC_KEY_FILE);
    for (path, text) in [
        (&pem, public_pem(key)),
        (&dir.join(PUBLIC_KEY_JSON_FILE), public_json(key)),
    ] {
        std::fs::write(path, text).map_err(|source| KeyError::Io {
            path: path.clone(),
            source,
        })?;
    }
    Ok(pem)
}

/// The private key as PKCS#8 v1 PEM.
pub fn private_pem(key: &SigningKey) -> String {
    let bytes = KeypairBytes {
        secret_key: key.to_bytes(),
        public_key: None,
    };
    bytes
        .to_pkcs8_pem(LineEnding::LF)
        .expect("an ed25519 key always encodes")
        .to_string()
}

/// The public key as SPKI PEM.
pub fn public_pem(key: &VerifyingKey) -> String {
    key.to_public_key_pem(LineEnding::LF)
        .expect("an ed25519 key always encodes")
}

/// Writes a fresh key pair into `dir` (created if needed); refuses to overwrite.
/// Returns the key and the two paths (private, public).
pub fn write_new_pair(dir: &Path) -> Result<(SigningKey, PathBuf, PathBuf), KeyError> {
    std::fs::create_dir_all(dir).map_err(|source| KeyError::Io {
        path: dir.to_owned(),
        source,
    })?;
    let private = dir.join(PRIVATE_KEY_FILE);
    let public = dir.join(PUBLIC_KEY_FILE);
    for path in [&private, &public, &dir.join(PUBLIC_KEY_JSON_FILE)] {
        if path.exists() {
            return Err(KeyError::Exists { path: path.clone() });
        }
    }
    let key = generate();
    write_private(&private, &private_pem(&key))?;
    write_public(dir, &key.verifying_key())?;
    Ok((key, private, public))
}

fn write_private(path: &Path, pem: &str) -> Result<(), KeyError> {
    use std::io::Write;
    let mut options = std::fs::File::options();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let io = |source| KeyError::Io {
        path: path.to_owned(),
        source,
    };
    let mut f = options.open(path).map_err(io)?;
    f.write_all(pem.as_bytes()).map_err(io)
}

/// Reads a private key (PKCS#8 PEM, v1 or v2).
pub fn read_private(path: &Path) -> Result<SigningKey, KeyError> {
    let pem = read(path)?;
    SigningKey::from_pkcs8_pem(&pem).map_err(|e| KeyError::Format {
        path: path.to_owned(),
        what: "private key (PKCS#8)",
        problem: e.to_string(),
    })
}

/// Reads a public key (SPKI PEM).
pub fn read_public(path: &Path) -> Result<VerifyingKey, KeyError> {
    let pem = read(path)?;
    VerifyingKey::from_public_key_pem(&pem).map_err(|e| KeyError::Format {
        path: path.to_owned(),
        what: "public key (SPKI)",
        problem: e.to_string(),
    })
}

fn read(path: &Path) -> Result<String, KeyError> {
    std::fs::read_to_string(path).map_err(|source| KeyError::Io {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_through_pem_and_the_private_key_is_v1() {
        let key = generate();
        let pem = private_pem(&key);
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"));
        // PKCS#8 v1 for ed25519 is exactly 48 bytes of DER: 64 base64 characters.
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        assert_eq!(b64.len(), 64, "v1 carries no public key");
        assert_eq!(SigningKey::from_pkcs8_pem(&pem).unwrap().to_bytes(), key.to_bytes());
        let public = public_pem(&key.verifying_key());
        assert_eq!(VerifyingKey::from_public_key_pem(&public).unwrap(), key.verifying_key());
    }

    #[test]
    fn key_id_is_stable_and_per_key() {
        let a = generate().verifying_key();
        assert_eq!(key_id(&a), key_id(&a));
        assert_ne!(key_id(&a), key_id(&generate().verifying_key()));
        assert_eq!(key_id(&a).len(), 64);
    }
}
