//! [`write()`] and [`open`]: the submission bundle, one file a buyer receives.
//!
//! A tar archive (ustar, entries in a fixed order, times zeroed so the same run gives
//! the same bytes) holding `manifest.json` first, then the envelope, the transcript,
//! the public key in both forms, the vendor's declared facts and questionnaire
//! (`declared.json`), the renderings (JUnit, HTML, Markdown) and, when the run wrote one,
//! the in-toto Test Result (checked against the report). The manifest lists each
//! file with its SHA-256 and size. [`open`] accepts a bundle only when its files are
//! exactly those of the manifest, with those digests; `tenantcheck verify BUNDLE` then
//! verifies the report inside and checks that the declared facts are the report's own,
//! and the renderings too when the report was made by the same version (another
//! version's renderer may lay pages out differently; the signed report is the evidence).
//!
//! The manifest is not signed: the envelope is the trust anchor, and everything else in
//! the bundle is checked against it.

use crate::report::{self, Report, key};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The manifest's name, the archive's first entry.
pub const MANIFEST_FILE: &str = "manifest.json";
/// The declared facts and questionnaire, as JSON.
pub const DECLARED_FILE: &str = "declared.json";
/// The manifest's format.
pub const FORMAT: &str = "tenantcheck-bundle/v1";
pub use crate::run_dir::BUNDLE_FILE;

/// The files of a bundle after the manifest, in archive order.
pub const MEMBERS: &[&str] = &[
    report::ENVELOPE_FILE,
    report::TRANSCRIPT_FILE,
    key::PUBLIC_KEY_FILE,
    key::PUBLIC_KEY_JSON_FILE,
    DECLARED_FILE,
    report::JUNIT_FILE,
    report::HTML_FILE,
    report::MARKDOWN_FILE,
];

/// Files a bundle holds when the run folder has them: the in-toto Test Result (runs
/// made before it existed have none). Checked against the report when present.
pub const OPTIONAL_MEMBERS: &[&str] = &[crate::attestation::TEST_RESULT_FILE, crate::tlog::END_FILE];

/// The bundle's table of contents.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    /// Each file with its digest.
    pub files: Vec<ManifestEntry>,
}

/// One file of a bundle.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ManifestEntry {
    /// Its name in the archive.
    pub name: String,
    /// SHA-256 (hex) of its bytes.
    pub sha256: String,
    /// Its size.
    pub bytes: u64,
}

/// A bundle that could not be written or opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BundleError {
    /// A file could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The report does not verify (in the run folder, or in the bundle).
    #[error("the report does not verify: {0}")]
    Run(#[from] report::VerifyError),
    /// A file of the bundle is not what the signed report gives.
    #[error("{0} is not the signed report's own")]
    NotOwn(&'static str),
    /// The public key inside the bundle cannot be read.
    #[error("the bundle's public key: {0}")]
    Key(String),
    /// The archive is not a tar archive, or not one tenantcheck wrote.
    #[error("not a bundle: {0}")]
    Archive(String),
    /// The manifest is missing or malformed.
    #[error("the manifest: {0}")]
    Manifest(String),
    /// The files are not those the manifest lists.
    #[error("the bundle's files are not those of the manifest: {0}")]
    Contents(String),
    /// A file's digest is not the one in the manifest.
    #[error("{name}: SHA-256 is {actual}, the manifest says {expected}: the bundle was changed")]
    Digest {
        /// The file.
        name: String,
        /// The manifest's digest.
        expected: String,
        /// The file's.
        actual: String,
    },
}

/// The `declared.json` of a report: what the vendor declared, apart from what was measured.
pub fn declared_json(report: &Report) -> Vec<u8> {
    let p = &report.vendor.profile;
    let v = serde_json::json!({ "declared": p.declared, "questionnaire": p.questionnaire });
    let mut bytes = serde_json::to_vec_pretty(&v).expect("values serialise");
    bytes.push(b'\n');
    bytes
}

/// Writes the bundle of `run_dir` to `out`, after verifying the run's report with the
/// run's own public key and transcript.
pub fn write(run_dir: &Path, out: &Path) -> Result<(), BundleError> {
    let read = |name: &str| {
        let path = run_dir.join(name);
        std::fs::read(&path).map_err(|source| BundleError::Io { path, source })
    };
    let envelope = read(report::ENVELOPE_FILE)?;
    let transcript = read(report::TRANSCRIPT_FILE)?;
    let public =
        key::read_public(&run_dir.join(key::PUBLIC_KEY_FILE)).map_err(|e| BundleError::Archive(e.to_string()))?;
    let verified = report::verify(&envelope, &public, Some(&transcript), None, |_| {})?;
    let mut files: Vec<(&str, Vec<u8>)> = Vec::new();
    for name in MEMBERS {
        // The renderings are made afresh from the verified report, so that they are
        // this version's renderings of exactly the signed report.
        let r = verified.report();
        let bytes = match *name {
            DECLARED_FILE => declared_json(r),
            report::ENVELOPE_FILE => envelope.clone(),
            report::TRANSCRIPT_FILE => transcript.clone(),
            report::HTML_FILE => crate::render::html(r, verified.key_id(), Some(&transcript)).into_bytes(),
            report::MARKDOWN_FILE => crate::render::markdown(r, verified.key_id()).into_bytes(),
            report::JUNIT_FILE => crate::render::junit(r).into_bytes(),
            other => read(other)?,
        };
        files.push((name, bytes));
    }
    if run_dir.join(crate::attestation::TEST_RESULT_FILE).exists() {
        let bytes = read(crate::attestation::TEST_RESULT_FILE)?;
        crate::attestation::verify_test_result(&bytes, &public, &envelope, &verified, |_| {})?;
        files.push((crate::attestation::TEST_RESULT_FILE, bytes));
    }
    // A logged run's end entry: checked against the log by `verify --challenge`.
    if run_dir.join(crate::tlog::END_FILE).exists() {
        files.push((crate::tlog::END_FILE, read(crate::tlog::END_FILE)?));
    }
    let manifest = Manifest {
        format: FORMAT.into(),
        files: files
            .iter()
            .map(|(name, bytes)| ManifestEntry {
                name: (*name).to_owned(),
                sha256: crate::sha256_hex(bytes),
                bytes: bytes.len() as u64,
            })
            .collect(),
    };
    let manifest = serde_json::to_vec_pretty(&manifest).expect("manifests serialise");
    let io = |source| BundleError::Io {
        path: out.to_owned(),
        source,
    };
    let file = std::fs::File::create(out).map_err(io)?;
    let mut tar = tar::Builder::new(std::io::BufWriter::new(file));
    for (name, bytes) in std::iter::once((MANIFEST_FILE, &manifest)).chain(files.iter().map(|(n, b)| (*n, b))) {
        let mut header = tar::Header::new_ustar();
        header.set_size(bytes.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_cksum();
        tar.append_data(&mut header, name, bytes.as_slice()).map_err(io)?;
    }
    tar.into_inner()
        .map_err(io)?
        .into_inner()
        .map_err(|e| io(e.into_error()))?;
    Ok(())
}

/// Whether `bytes` look like a tar archive (the ustar magic).
pub fn is_bundle(bytes: &[u8]) -> bool {
    bytes.get(257..262) == Some(b"ustar")
}

/// A bundle whose files match its manifest.
#[derive(Debug)]
pub struct Opened {
    files: BTreeMap<String, Vec<u8>>,
}

impl Opened {
    /// A file of the bundle (one of [`MEMBERS`]).
    pub fn file(&self, name: &str) -> &[u8] {
        self.files.get(name).map(Vec::as_slice).unwrap_or_default()
    }
}

/// Reads a bundle and checks its files against its manifest.
pub fn open(bytes: &[u8]) -> Result<Opened, BundleError> {
    let mut archive = tar::Archive::new(bytes);
    let mut files = BTreeMap::new();
    let entries = archive.entries().map_err(|e| BundleError::Archive(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| BundleError::Archive(e.to_string()))?;
        let name = entry
            .path()
            .map_err(|e| BundleError::Archive(e.to_string()))?
            .to_string_lossy()
            .into_owned();
        let mut data = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut data).map_err(|e| BundleError::Archive(e.to_string()))?;
        if files.insert(name.clone(), data).is_some() {
            return Err(BundleError::Contents(format!("{name} appears twice")));
        }
    }
    let manifest: Manifest = serde_json::from_slice(
        files
            .remove(MANIFEST_FILE)
            .ok_or_else(|| BundleError::Manifest("no manifest.json".into()))?
            .as_slice(),
    )
    .map_err(|e| BundleError::Manifest(e.to_string()))?;
    if manifest.format != FORMAT {
        return Err(BundleError::Manifest(format!(
            "format {:?}, expected {FORMAT:?}",
            manifest.format
        )));
    }
    let listed: Vec<&str> = manifest.files.iter().map(|f| f.name.as_str()).collect();
    let present: Vec<&str> = files.keys().map(String::as_str).collect();
    let mut wanted: Vec<&str> = MEMBERS.to_vec();
    wanted.extend(OPTIONAL_MEMBERS.iter().filter(|m| listed.contains(m)));
    wanted.sort_unstable();
    let mut listed_sorted = listed.clone();
    listed_sorted.sort_unstable();
    if listed_sorted != wanted || present != wanted {
        return Err(BundleError::Contents(format!(
            "manifest lists {listed:?}, archive holds {present:?}"
        )));
    }
    for f in &manifest.files {
        let actual = crate::sha256_hex(&files[&f.name]);
        if actual != f.sha256 {
            return Err(BundleError::Digest {
                name: f.name.clone(),
                expected: f.sha256.clone(),
                actual,
            });
        }
    }
    Ok(Opened { files })
}

/// A bundle whose files match its manifest, whose report verified, and whose declared
/// facts (and, from the same version, renderings) are the report's own.
#[derive(Debug)]
pub struct VerifiedBundle {
    /// The report, verified.
    pub report: report::VerifiedReport,
    /// Whether the key came from the bundle itself (integrity, not who signed).
    pub key_from_bundle: bool,
    /// Renderings not compared, because another version made the report.
    pub unchecked: Vec<&'static str>,
}

/// Opens and verifies a bundle with `key` (or, when `None`, the key inside it), telling
/// `on_check` each check that held.
pub fn verify(
    bytes: &[u8],
    key: Option<&ed25519_dalek::VerifyingKey>,
    challenge: Option<&[u8]>,
    mut on_check: impl FnMut(String),
) -> Result<VerifiedBundle, BundleError> {
    let opened = open(bytes)?;
    on_check("every file of the bundle matches the manifest's SHA-256".to_owned());
    let key_from_bundle = key.is_none();
    let inner;
    let key = match key {
        Some(k) => k,
        None => {
            use ed25519_dalek::pkcs8::DecodePublicKey;
            let pem =
                std::str::from_utf8(opened.file(key::PUBLIC_KEY_FILE)).map_err(|e| BundleError::Key(e.to_string()))?;
            inner =
                ed25519_dalek::VerifyingKey::from_public_key_pem(pem).map_err(|e| BundleError::Key(e.to_string()))?;
            &inner
        }
    };
    let transcript = opened.file(report::TRANSCRIPT_FILE);
    let verified = report::verify(
        opened.file(report::ENVELOPE_FILE),
        key,
        Some(transcript),
        challenge,
        &mut on_check,
    )?;
    if opened.files.contains_key(crate::attestation::TEST_RESULT_FILE) {
        crate::attestation::verify_test_result(
            opened.file(crate::attestation::TEST_RESULT_FILE),
            key,
            opened.file(report::ENVELOPE_FILE),
            &verified,
            &mut on_check,
        )?;
    }
    let r = verified.report();
    if opened.file(DECLARED_FILE) != declared_json(r).as_slice() {
        return Err(BundleError::NotOwn(DECLARED_FILE));
    }
    let same_version = r.tool.version == crate::TOOL_VERSION;
    let mut unchecked = Vec::new();
    let renderings = [
        (report::JUNIT_FILE, crate::render::junit(r)),
        (
            report::HTML_FILE,
            crate::render::html(r, verified.key_id(), Some(transcript)),
        ),
        (report::MARKDOWN_FILE, crate::render::markdown(r, verified.key_id())),
    ];
    for (name, own) in renderings {
        if opened.file(name) == own.as_bytes() {
            continue;
        }
        if same_version {
            return Err(BundleError::NotOwn(name));
        }
        unchecked.push(name);
    }
    on_check(if unchecked.is_empty() {
        "the declared facts, questionnaire and renderings are the signed report's own".to_owned()
    } else {
        format!(
            "the declared facts and questionnaire are the signed report's own; not compared (made by tenantcheck {}): {}",
            r.tool.version,
            unchecked.join(", ")
        )
    });
    Ok(VerifiedBundle {
        report: verified,
        key_from_bundle,
        unchecked,
    })
}
