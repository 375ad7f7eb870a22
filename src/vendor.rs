//! Loading a [`VendorProfile`] (where a vendor is, how to reach it, and as whom) and
//! reading its tenants' credentials.
//!
//! The profile's types are part of the evidence (`tenantcheck_evidence::profile`,
//! re-exported here): every report embeds the profile it ran with. Loading is done in
//! passes so that every mistake shows before the first request: TOML syntax and field
//! types ([`from_toml`]), then the rules no type can express ([`validate`]), then the
//! credentials ([`resolve_credentials`]). Each error names the file, the field and the
//! fix.

pub use tenantcheck_evidence::profile::*;

use crate::credential::Secret;
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// The reference vendor's profile, embedded in the binary (`vendors/sim.toml`).
pub const EMBEDDED_SIM_PROFILE: &str = include_str!("../vendors/sim.toml");

/// A tenant with its credential read from the environment.
#[derive(Clone, Debug)]
pub struct TenantKey {
    /// The tenant's label.
    pub label: String,
    /// The environment variable the credential came from (for messages).
    pub credential_env: String,
    /// The credential.
    pub secret: Secret,
}

/// A profile that could not be loaded, validated or used.
#[derive(Debug)]
pub struct ProfileError {
    /// The profile file (or `<embedded sim profile>`).
    pub origin: PathBuf,
    /// The line of the field at fault, where the file writes it (syntax errors carry
    /// their own line in their message).
    pub line: Option<usize>,
    /// What is wrong.
    pub kind: ProfileErrorKind,
}

/// What is wrong with a profile.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProfileErrorKind {
    /// The file could not be read.
    #[error("cannot read the profile: {0}")]
    Read(#[source] std::io::Error),
    /// The TOML is malformed, a field is missing, has the wrong type, or is unknown.
    #[error("{0}fix: compare with vendors/openai-compatible.example.toml, which shows every field")]
    Syntax(#[source] Box<toml::de::Error>),
    /// A field breaks a rule.
    #[error("field `{field}`: {problem}; fix: {fix}")]
    Invalid {
        /// The field, as written in the file.
        field: String,
        /// What is wrong with it.
        problem: String,
        /// How to put it right.
        fix: String,
    },
    /// A tenant's credential variable is not set.
    #[error("tenant `{tenant}`: environment variable {env} is not set; fix: export {env} with that tenant's API key")]
    MissingCredential {
        /// The tenant's label.
        tenant: String,
        /// The variable.
        env: String,
    },
    /// A tenant's credential is too short to be a real key.
    #[error(
        "tenant `{tenant}`: the credential in {env} has {len} characters; fix: set {env} to the tenant's real API key (at least {MIN_CREDENTIAL_CHARS} characters: a shorter secret would be redacted out of ordinary words in the evidence)"
    )]
    ShortCredential {
        /// The tenant's label.
        tenant: String,
        /// The variable.
        env: String,
        /// Its length.
        len: usize,
    },
    /// The vendor refused a tenant's credential.
    #[error(
        "tenant `{tenant}`: the vendor refused the credential in {env} (HTTP {status}); fix: set {env} to a valid key for this vendor"
    )]
    CredentialRejected {
        /// The tenant's label.
        tenant: String,
        /// The variable.
        env: String,
        /// The HTTP status the vendor answered with.
        status: u16,
    },
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "vendor profile {}:{line}: {}", self.origin.display(), self.kind),
            None => write!(f, "vendor profile {}: {}", self.origin.display(), self.kind),
        }
    }
}

impl std::error::Error for ProfileError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.kind)
    }
}

/// Reads, parses and validates the profile at `path`.
pub fn load(path: &Path) -> Result<VendorProfile, ProfileError> {
    let text = std::fs::read_to_string(path).map_err(|e| ProfileError {
        origin: path.to_owned(),
        line: None,
        kind: ProfileErrorKind::Read(e),
    })?;
    let profile = from_toml(&text, path)?;
    validate(&profile, path).map_err(|mut e| {
        if let ProfileErrorKind::Invalid { field, .. } = &e.kind {
            e.line = crate::line_of_field(&text, field);
        }
        e
    })?;
    Ok(profile)
}

/// The embedded reference-vendor profile, parsed and validated.
pub fn embedded_sim() -> VendorProfile {
    let origin = Path::new("<embedded vendors/sim.toml>");
    let profile = from_toml(EMBEDDED_SIM_PROFILE, origin).and_then(|p| validate(&p, origin).map(|()| p));
    match profile {
        Ok(p) => p,
        Err(e) => panic!("bug in tenantcheck: the embedded sim profile is invalid: {e}"),
    }
}

/// Parses TOML text (first pass: syntax, types, unknown fields).
pub fn from_toml(text: &str, origin: &Path) -> Result<VendorProfile, ProfileError> {
    toml::from_str(text).map_err(|e| ProfileError {
        origin: origin.to_owned(),
        line: None,
        kind: ProfileErrorKind::Syntax(Box::new(e)),
    })
}

/// Checks the rules that types cannot express (second pass).
pub fn validate(profile: &VendorProfile, origin: &Path) -> Result<(), ProfileError> {
    let invalid = |field: &str, problem: String, fix: &str| ProfileError {
        origin: origin.to_owned(),
        line: None,
        kind: ProfileErrorKind::Invalid {
            field: field.to_owned(),
            problem,
            fix: fix.to_owned(),
        },
    };
    if profile.name.trim().is_empty() {
        return Err(invalid("name", "is empty".into(), "give the vendor a name"));
    }
    check_base_url(&profile.base_url).map_err(|problem| {
            invalid(
                "base_url",
                problem,
                "write an http:// or https:// URL without credentials, query or fragment, such as https://api.example.com/v1",
            )
        })?;
    if profile.model.trim().is_empty() {
        return Err(invalid("model", "is empty".into(), "name the model to test"));
    }
    match (&profile.azure, profile.adapter) {
        (Some(_), a) if a != AdapterKind::AzureOpenai => {
            return Err(invalid(
                "azure",
                format!(
                    "is given for the {} adapter",
                    serde_json::to_value(a).unwrap_or_default()
                ),
                "remove [azure], or set adapter = \"azure-openai\"",
            ));
        }
        (Some(azure), _) if azure.deployment.is_some() != azure.api_version.is_some() => {
            return Err(invalid(
                if azure.deployment.is_some() {
                    "azure.api_version"
                } else {
                    "azure.deployment"
                },
                "is missing: the deployment URL form needs both".into(),
                "give azure.deployment and azure.api_version (such as \"2024-10-21\"), or neither for the /openai/v1/ form",
            ));
        }
        _ => {}
    }
    for (field, set) in [
        ("stored_responses", profile.stored_responses),
        ("cache_salt", profile.cache_salt),
    ] {
        if set && !profile.adapter.openai_extensions() {
            return Err(invalid(
                field,
                format!("is true, but the {:?} adapter has no such feature", profile.adapter),
                "remove it: only the openai-chat adapter speaks stored responses and cache_salt",
            ));
        }
    }
    if profile.context_window < 64 {
        return Err(invalid(
            "context_window",
            format!("is {}, below the minimum of 64 tokens", profile.context_window),
            "write the context window the vendor advertises, in tokens",
        ));
    }
    if profile.tenants.len() < 2 {
        return Err(invalid(
            "tenants",
            format!("lists {} tenant(s); isolation needs at least 2", profile.tenants.len()),
            "add a [[tenants]] table for a second account you control",
        ));
    }
    let mut labels = BTreeSet::new();
    let mut envs = BTreeSet::new();
    for (i, t) in profile.tenants.iter().enumerate() {
        let field = format!("tenants[{i}].label");
        if t.label.is_empty()
            || !t
                .label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        {
            return Err(invalid(
                &field,
                format!("{:?} is not a label", t.label),
                "use letters, digits, '-' and '_' only",
            ));
        }
        if !labels.insert(t.label.as_str()) {
            return Err(invalid(
                &field,
                format!("{:?} is used twice", t.label),
                "give each tenant its own label",
            ));
        }
        let field = format!("tenants[{i}].credential_env");
        if t.credential_env.is_empty()
            || !t
                .credential_env
                .chars()
                .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        {
            return Err(invalid(
                &field,
                format!("{:?} is not an environment variable name", t.credential_env),
                "name the variable that holds the key (A-Z, 0-9, _), never the key itself",
            ));
        }
        if !envs.insert(t.credential_env.as_str()) {
            return Err(invalid(
                &field,
                format!("{} is used by two tenants", t.credential_env),
                "give each tenant its own credential: one key shared by two tenants tests nothing",
            ));
        }
    }
    if profile.request_timeout_secs == 0 {
        return Err(invalid(
            "request_timeout_secs",
            "is 0".into(),
            "allow at least 1 second per request",
        ));
    }
    if profile.idle_timeout_secs == Some(0) {
        return Err(invalid(
            "idle_timeout_secs",
            "is 0".into(),
            "allow at least 1 second between two pieces of an answer",
        ));
    }
    if profile.max_response_bytes < 4096 {
        return Err(invalid(
            "max_response_bytes",
            format!("is {}", profile.max_response_bytes),
            "allow at least 4096 bytes per answer (the default is 33554432, 32 MiB)",
        ));
    }
    if profile.stop_after_server_errors == 0 {
        return Err(invalid(
            "stop_after_server_errors",
            "is 0".into(),
            "stop after at least 1 server error in a row (the default is 20)",
        ));
    }
    if profile.max_retry_after_secs > 3600 {
        return Err(invalid(
            "max_retry_after_secs",
            format!("is {}", profile.max_retry_after_secs),
            "wait out rate limits of at most an hour (the default is 30 seconds)",
        ));
    }
    if profile.rate_limit_retries > 100 {
        return Err(invalid(
            "rate_limit_retries",
            format!("is {}", profile.rate_limit_retries),
            "try a request again at most 100 times (the default is 5)",
        ));
    }
    if profile.max_concurrency == 0 {
        return Err(invalid(
            "max_concurrency",
            "is 0".into(),
            "allow at least 1 request in flight",
        ));
    }
    if let Some(agent) = &profile.user_agent
        && reqwest::header::HeaderValue::from_str(agent).is_err()
    {
        return Err(invalid(
            "user_agent",
            format!("is {agent:?}"),
            "give a header value of visible ASCII and spaces, as a client sends it",
        ));
    }
    if let Some(fleet) = &profile.fleet {
        for (field, name) in [
            ("fleet.node_header", &fleet.node_header),
            ("fleet.affinity_header", &fleet.affinity_header),
        ] {
            if let Some(name) = name
                && reqwest::header::HeaderName::try_from(name.to_ascii_lowercase()).is_err()
            {
                return Err(invalid(
                    field,
                    format!("{name:?} is not a header name"),
                    "give the header's name alone, letters, digits and dashes, such as x-served-by",
                ));
            }
            // Credentials, cookies and framing are never recorded nor chosen by a profile.
            if let Some(name) = name
                && RESERVED_HEADERS.contains(&name.to_ascii_lowercase().as_str())
            {
                return Err(invalid(
                    field,
                    format!("{name:?} carries credentials, cookies or the message's framing"),
                    "name the vendor's own node or session header, such as x-served-by or x-session-affinity",
                ));
            }
        }
        if let Some(field) = &fleet.node_field {
            if fleet.node_header.is_some() {
                return Err(invalid(
                    "fleet.node_field",
                    "is given beside fleet.node_header".into(),
                    "name the node one way: a response header, or a field of the answer",
                ));
            }
            if !field.starts_with('/') || field.len() < 2 {
                return Err(invalid(
                    "fleet.node_field",
                    format!("{field:?} is not a JSON Pointer to a field"),
                    "write the field's path from the answer's top, such as \"/system_fingerprint\"",
                ));
            }
        }
        if fleet.nodes == Some(0) {
            return Err(invalid(
                "fleet.nodes",
                "is 0".into(),
                "declare the nodes serving the model (at least 1), or leave the field out",
            ));
        }
        if !(fleet.max_unseen > 0.0 && fleet.max_unseen < 1.0) {
            return Err(invalid(
                "fleet.max_unseen",
                format!("is {}", fleet.max_unseen),
                "give a chance between 0 and 1, such as 0.01",
            ));
        }
        if profile.adapter == AdapterKind::Command && (fleet.node_header.is_some() || fleet.affinity_header.is_some()) {
            return Err(invalid(
                "fleet",
                "names headers, but the command adapter's program keeps headers to itself".into(),
                "declare only fleet.nodes for the command adapter, or use an HTTP adapter",
            ));
        }
    }
    Ok(())
}

/// Headers a profile's `[fleet]` may not name: they carry credentials or cookies, or
/// frame the message.
const RESERVED_HEADERS: &[&str] = &[
    "authorization",
    "proxy-authorization",
    "x-api-key",
    "api-key",
    "cookie",
    "set-cookie",
    "host",
    "content-type",
    "content-length",
    "transfer-encoding",
    "connection",
];

/// Reads each tenant's credential through `lookup` (third pass), usually
/// `|name| std::env::var(name).ok()`.
pub fn resolve_credentials(
    profile: &VendorProfile,
    origin: &Path,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Vec<TenantKey>, ProfileError> {
    profile
        .tenants
        .iter()
        .map(|t| match lookup(&t.credential_env) {
            Some(v) if !v.is_empty() && v.chars().count() < MIN_CREDENTIAL_CHARS => Err(ProfileError {
                origin: origin.to_owned(),
                line: None,
                kind: ProfileErrorKind::ShortCredential {
                    tenant: t.label.clone(),
                    env: t.credential_env.clone(),
                    len: v.chars().count(),
                },
            }),
            Some(v) if !v.is_empty() => Ok(TenantKey {
                label: t.label.clone(),
                credential_env: t.credential_env.clone(),
                secret: Secret::new(v),
            }),
            _ => Err(ProfileError {
                origin: origin.to_owned(),
                line: None,
                kind: ProfileErrorKind::MissingCredential {
                    tenant: t.label.clone(),
                    env: t.credential_env.clone(),
                },
            }),
        })
        .collect()
}

fn check_base_url(raw: &str) -> Result<(), String> {
    let url = reqwest::Url::parse(raw).map_err(|e| format!("{raw:?} is not a URL ({e})"))?;
    if url.scheme() != "http" && url.scheme() != "https" {
        return Err(format!("scheme {:?} is not http or https", url.scheme()));
    }
    if !url.username().is_empty() || url.password().is_some() {
        return Err("holds credentials".into());
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err("holds a query or fragment".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = r#"
name = "x"
adapter = "openai-chat"
base_url = "http://127.0.0.1:1/v1/"
model = "m"
context_window = 4096
[[tenants]]
label = "a"
credential_env = "KEY_A"
[[tenants]]
label = "b"
credential_env = "KEY_B"
"#;

    fn parse(text: &str) -> Result<VendorProfile, ProfileError> {
        let origin = Path::new("test.toml");
        let p = from_toml(text, origin)?;
        validate(&p, origin)?;
        Ok(p)
    }

    #[test]
    fn good_profile_loads_with_defaults() {
        let p = parse(GOOD).unwrap();
        assert_eq!(p.base_url(), "http://127.0.0.1:1/v1");
        assert_eq!(p.request_timeout_secs, 120);
        assert_eq!(p.max_concurrency, 4);
    }

    #[test]
    fn a_node_named_in_a_field_is_a_json_pointer_and_never_beside_a_header() {
        let with = |fleet: &str| parse(&format!("{GOOD}\n[fleet]\n{fleet}\n"));
        let p = with("node_field = \"/system_fingerprint\"").unwrap();
        let fleet = p.fleet.unwrap();
        assert_eq!(fleet.signal().as_deref(), Some("body /system_fingerprint"));
        let body = r#"{"id":"x","system_fingerprint":"fp_node3"}"#;
        let none = std::collections::BTreeMap::new();
        assert_eq!(fleet.node_of(&none, Some(body), []).as_deref(), Some("fp_node3"));
        // A stream: the first frame that has it.
        let frames = [
            "{\"choices\":[]}",
            "{\"system_fingerprint\":7}",
            "{\"system_fingerprint\":\"later\"}",
        ];
        assert_eq!(fleet.node_of(&none, None, frames).as_deref(), Some("7"));
        assert_eq!(fleet.node_of(&none, Some("not json"), []), None);
        for (fleet, says) in [
            ("node_field = \"system_fingerprint\"", "is not a JSON Pointer"),
            (
                "node_field = \"/system_fingerprint\"\nnode_header = \"x-served-by\"",
                "beside fleet.node_header",
            ),
        ] {
            let msg = with(fleet).unwrap_err().to_string();
            assert!(msg.contains("fleet.node_field") && msg.contains(says), "{msg}");
        }
    }

    #[test]
    fn the_embedded_profile_is_valid() {
        assert!(embedded_sim().tenants.len() >= 2);
    }

    #[test]
    fn one_tenant_is_refused_with_field_and_fix() {
        let text = GOOD.split("[[tenants]]\nlabel = \"b\"").next().unwrap();
        let msg = parse(text).unwrap_err().to_string();
        assert!(msg.contains("test.toml"), "{msg}");
        assert!(msg.contains("`tenants`"), "{msg}");
        assert!(msg.contains("fix:"), "{msg}");
    }

    #[test]
    fn a_rule_error_in_a_file_names_its_line() {
        let dir = std::env::temp_dir().join(format!("tc-vendor-{}", crate::hex(&crate::random_bytes::<6>())));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.toml");
        std::fs::write(&path, GOOD.replace("KEY_B", "KEY_A")).unwrap();
        let msg = load(&path).unwrap_err().to_string();
        assert!(msg.contains("p.toml:12: field `tenants[1].credential_env`"), "{msg}");
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn shared_credential_is_refused() {
        let text = GOOD.replace("KEY_B", "KEY_A");
        let msg = parse(&text).unwrap_err().to_string();
        assert!(msg.contains("tenants[1].credential_env"), "{msg}");
    }

    #[test]
    fn a_literal_key_in_place_of_a_variable_is_refused() {
        let text = GOOD.replace("KEY_B", "sk-live-abc");
        let msg = parse(&text).unwrap_err().to_string();
        assert!(msg.contains("not an environment variable name"), "{msg}");
    }

    #[test]
    fn unknown_fields_and_bad_urls_are_refused() {
        let msg = parse(&format!("{GOOD}\ncontext_windw = 3")).unwrap_err().to_string();
        assert!(msg.contains("context_windw"), "{msg}");
        let text = GOOD.replace("http://127.0.0.1:1/v1/", "http://u:p@host/v1");
        let msg = parse(&text).unwrap_err().to_string();
        assert!(msg.contains("`base_url`") && msg.contains("credentials"), "{msg}");
    }

    #[test]
    fn a_credential_too_short_to_be_a_key_is_refused() {
        let p = parse(GOOD).unwrap();
        let err = resolve_credentials(&p, Path::new("test.toml"), |_| Some("ka".to_string()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("KEY_A has 2 characters"), "{err}");
        assert!(!err.contains("\"ka\""), "the value itself is never printed: {err}");
    }

    #[test]
    fn missing_credential_names_the_variable() {
        let p = parse(GOOD).unwrap();
        let err = resolve_credentials(&p, Path::new("test.toml"), |name| {
            (name == "KEY_A").then(|| "key-aaaa-1".to_string())
        })
        .unwrap_err();
        assert!(err.to_string().contains("KEY_B is not set"), "{err}");
    }
}
