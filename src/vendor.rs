//! [`VendorProfile`]: where a vendor is, how to reach it, and as whom.
//!
//! A profile is a TOML file (see `vendors/`). It names the adapter, the base URL, the
//! model, the advertised context window, and at least two tenants. A tenant names the
//! environment variable that holds its credential, never the credential itself.
//!
//! Loading is done in passes so that every mistake shows before the first request:
//! TOML syntax and field types ([`VendorProfile::from_toml`]), then the rules no type
//! can express ([`VendorProfile::validate`]), then the credentials
//! ([`VendorProfile::resolve_credentials`]). Each error names the file, the field and
//! the fix.

use crate::credential::Secret;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// The reference vendor's profile, embedded in the binary (`vendors/sim.toml`).
pub const EMBEDDED_SIM_PROFILE: &str = include_str!("../vendors/sim.toml");

/// A vendor profile, as written in `vendors/*.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VendorProfile {
    /// A human name for the vendor and deployment, shown in reports.
    pub name: String,
    /// Which API the vendor speaks.
    pub adapter: AdapterKind,
    /// Base URL of the API, up to and including the version segment
    /// (for example `https://api.example.com/v1`).
    pub base_url: String,
    /// The model identifier sent in every request.
    pub model: String,
    /// The context window the vendor advertises for this model, in tokens.
    pub context_window: u64,
    /// The accounts the suite acts as; at least two.
    pub tenants: Vec<TenantSpec>,
    /// How long one request may take, in seconds.
    #[serde(default = "default_timeout")]
    pub request_timeout_secs: u64,
    /// How long to wait for more of an answer once its headers arrived (between two
    /// stream events, or two pieces of a body), in seconds; default: the whole
    /// request's timeout (a first token may follow a long prefill).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout_secs: Option<u64>,
    /// The most bytes of one answer that are read (a body, or a whole stream); the
    /// rest is left unread and the exchange is recorded as too large. Default 32 MiB.
    #[serde(default = "default_max_response_bytes")]
    pub max_response_bytes: u64,
    /// After this many answers in a row with the same 5xx status to requests that
    /// should succeed, the run stops sending: the vendor is down, not under test. The
    /// remaining cases are inconclusive and the report is signed. (A 401 or 403 to
    /// such a request stops the run at once.) Default 20.
    #[serde(default = "default_stop_after_server_errors")]
    pub stop_after_server_errors: u32,
    /// How many requests may be in flight at once, over all tenants.
    #[serde(default = "default_concurrency")]
    pub max_concurrency: u32,
    /// With `adapter = "command"`: the program and its arguments, started once and
    /// spoken to in JSON lines on its standard input and output.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub command: Vec<String>,
    /// Whether the vendor honours a per-request prefix-cache isolation key (vLLM's
    /// `cache_salt`); the timing case then gives each tenant its own salt.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cache_salt: bool,
    /// Whether the API stores responses (the OpenAI Responses API's `store`, `GET
    /// /responses/{id}`, `previous_response_id`); `objects.cross-tenant` is skipped
    /// without them.
    #[serde(default)]
    pub stored_responses: bool,
    /// A tokenizer tenantcheck has built in that counts exactly as the vendor's does;
    /// prompts are then sized by it instead of by the vendor's reported usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<LocalTokenizer>,
    /// What the vendor charges, for `--budget-usd` and `--plan`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prices: Option<Prices>,
    /// Facts the vendor declares about its deployment; reported as declared, beside
    /// what the suite measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub declared: Option<Declared>,
    /// The vendor's answers to the questions buyers ask after cross-tenant incidents;
    /// reported as declared, with the unanswered ones listed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub questionnaire: Option<Questionnaire>,
}

/// A vendor's prices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// US dollars per million prompt (input) tokens.
    pub prompt_usd_per_million: f64,
    /// US dollars per million completion (output) tokens.
    pub completion_usd_per_million: f64,
}

impl Prices {
    /// The cost of `prompt` and `completion` tokens, in US dollars.
    pub fn cost(&self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.prompt_usd_per_million + completion as f64 * self.completion_usd_per_million) / 1e6
    }
}

/// A vendor's answers to the questions buyers ask after cross-tenant incidents.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Questionnaire {
    /// How are prompt caches and KV pages isolated between customers?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_isolation: Option<String>,
    /// Are KV pages cleared, or integrity-tagged, before another request reuses them?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page_clearing: Option<String>,
    /// How is each node's KV pool checked against the advertised context after a change?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool_checks: Option<String>,
    /// Which engine versions run, and when were they last patched?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_patching: Option<String>,
    /// Who is told of a breach, within what time, with which details (customers
    /// affected, kinds of data)?
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub breach_notification: Option<String>,
}

impl Questionnaire {
    /// Each question with its answer, if given.
    pub fn answers(&self) -> [(&'static str, Option<&str>); 5] {
        [
            (
                "How are prompt caches and KV pages isolated between customers?",
                self.cache_isolation.as_deref(),
            ),
            (
                "Are KV pages cleared, or integrity-tagged, before another request reuses them?",
                self.page_clearing.as_deref(),
            ),
            (
                "How is each node's KV pool checked against the advertised context after a change?",
                self.pool_checks.as_deref(),
            ),
            (
                "Which engine versions run, and when were they last patched?",
                self.engine_patching.as_deref(),
            ),
            (
                "Who is told of a breach, within what time, with which details (customers affected, kinds of data)?",
                self.breach_notification.as_deref(),
            ),
        ]
    }
}

/// A tokenizer built into tenantcheck.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum LocalTokenizer {
    /// The reference vendor's toy tokenizer.
    TenantcheckSim,
}

impl LocalTokenizer {
    /// Tokens in `text`.
    pub fn count(self, text: &str) -> u64 {
        match self {
            LocalTokenizer::TenantcheckSim => crate::tokenizer::count(text) as u64,
        }
    }
}

/// What a vendor declares about its deployment.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// The inference engine (`sglang`, `vllm`, `llama.cpp`, `tenantcheck-sim`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine: Option<String>,
    /// Its version (dotted numbers, such as `0.5.21`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub engine_version: Option<String>,
    /// The KV pool of each node role.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub nodes: Vec<DeclaredNode>,
    /// Whether KV transfers are checksummed (SGLang's
    /// `--disaggregation-enable-kv-checksum`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_checksum: Option<bool>,
    /// Whether KV canaries (integrity tags on pages) are on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_canaries: Option<bool>,
    /// Who shares the prompt-prefix cache, as the vendor declares it: a measured sharing
    /// within this scope is reported as a declared risk instead of a failure.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_scope: Option<CacheScope>,
}

/// Who shares a prompt-prefix cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CacheScope {
    /// No prefix cache, or none shared between keys.
    Key,
    /// Keys of one organisation share.
    Org,
    /// Every customer shares.
    Global,
}

/// One node role's KV pool.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclaredNode {
    /// `prefill`, `decode` or `unified`.
    pub role: NodeRole,
    /// The KV pool, in tokens.
    pub kv_pool_tokens: u64,
}

/// A node's role in serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum NodeRole {
    Prefill,
    Decode,
    Unified,
}

/// One tenant (account) the suite acts as.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantSpec {
    /// A short label used in transcripts and findings (`a`, `b`, `buyer-1`).
    pub label: String,
    /// The environment variable that holds this tenant's credential.
    pub credential_env: String,
    /// The organisation (billing account) the credential belongs to; tenants with the
    /// same `org` are keys of one organisation. Default: an organisation of its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub org: Option<String>,
}

impl TenantSpec {
    /// The tenant's organisation: its `org`, or its label when it has none.
    pub fn org(&self) -> &str {
        self.org.as_deref().unwrap_or(&self.label)
    }
}

/// The API dialect a vendor speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum AdapterKind {
    /// OpenAI-compatible `POST {base_url}/chat/completions` with bearer keys
    /// (OpenAI, vLLM, SGLang, llama.cpp's server, TGI, and the reference vendor).
    OpenaiChat,
    /// The Anthropic Messages API: `POST {base_url}/messages` with `x-api-key`.
    Anthropic,
    /// Cloudflare Workers AI's native REST API: `POST {base_url}/run/{model}` with a
    /// bearer token, answers in its `result`/`errors` envelope.
    WorkersAi,
    /// Any API, through the program in `command`, speaking JSON lines on stdio (see
    /// `tenantcheck schema command`).
    Command,
}

impl AdapterKind {
    /// Builds the adapter for `profile`.
    pub fn provider(
        self,
        profile: &VendorProfile,
    ) -> Result<std::sync::Arc<dyn crate::adapter::Provider>, crate::adapter::TransportError> {
        let timeout = std::time::Duration::from_secs(profile.request_timeout_secs);
        let limits = crate::adapter::Limits {
            timeout,
            idle: std::time::Duration::from_secs(profile.idle_timeout_secs.unwrap_or(profile.request_timeout_secs)),
            max_response_bytes: profile.max_response_bytes,
        };
        Ok(match self {
            AdapterKind::OpenaiChat => std::sync::Arc::new(crate::adapter::OpenAiChat::new(
                profile.base_url(),
                &profile.model,
                limits,
            )?),
            AdapterKind::Anthropic => std::sync::Arc::new(crate::adapter::AnthropicMessages::new(
                profile.base_url(),
                &profile.model,
                limits,
            )?),
            AdapterKind::WorkersAi => std::sync::Arc::new(crate::adapter::WorkersAi::new(
                profile.base_url(),
                &profile.model,
                limits,
            )?),
            AdapterKind::Command => {
                std::sync::Arc::new(crate::adapter::CommandAdapter::new(profile.command.clone(), timeout))
            }
        })
    }

    /// Whether the API has stored responses and per-request cache salts.
    fn openai_extensions(self) -> bool {
        matches!(self, AdapterKind::OpenaiChat)
    }
}

fn default_timeout() -> u64 {
    120
}

fn default_max_response_bytes() -> u64 {
    crate::adapter::Limits::DEFAULT_MAX_RESPONSE_BYTES
}

fn default_stop_after_server_errors() -> u32 {
    20
}

fn default_concurrency() -> u32 {
    4
}

/// The shortest credential accepted. Every artifact is redacted of every credential, so
/// a two-letter "key" would be cut out of ordinary words in the evidence.
pub const MIN_CREDENTIAL_CHARS: usize = 8;

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

impl VendorProfile {
    /// Reads, parses and validates the profile at `path`.
    pub fn load(path: &Path) -> Result<Self, ProfileError> {
        let text = std::fs::read_to_string(path).map_err(|e| ProfileError {
            origin: path.to_owned(),
            line: None,
            kind: ProfileErrorKind::Read(e),
        })?;
        let profile = Self::from_toml(&text, path)?;
        profile.validate(path).map_err(|mut e| {
            if let ProfileErrorKind::Invalid { field, .. } = &e.kind {
                e.line = crate::line_of_field(&text, field);
            }
            e
        })?;
        Ok(profile)
    }

    /// The embedded reference-vendor profile, parsed and validated.
    pub fn embedded_sim() -> Self {
        let origin = Path::new("<embedded vendors/sim.toml>");
        let profile = Self::from_toml(EMBEDDED_SIM_PROFILE, origin).and_then(|p| p.validate(origin).map(|()| p));
        match profile {
            Ok(p) => p,
            Err(e) => panic!("bug in tenantcheck: the embedded sim profile is invalid: {e}"),
        }
    }

    /// Parses TOML text (first pass: syntax, types, unknown fields).
    pub fn from_toml(text: &str, origin: &Path) -> Result<Self, ProfileError> {
        toml::from_str(text).map_err(|e| ProfileError {
            origin: origin.to_owned(),
            line: None,
            kind: ProfileErrorKind::Syntax(Box::new(e)),
        })
    }

    /// Checks the rules that types cannot express (second pass).
    pub fn validate(&self, origin: &Path) -> Result<(), ProfileError> {
        let invalid = |field: &str, problem: String, fix: &str| ProfileError {
            origin: origin.to_owned(),
            line: None,
            kind: ProfileErrorKind::Invalid {
                field: field.to_owned(),
                problem,
                fix: fix.to_owned(),
            },
        };
        if self.name.trim().is_empty() {
            return Err(invalid("name", "is empty".into(), "give the vendor a name"));
        }
        check_base_url(&self.base_url).map_err(|problem| {
            invalid(
                "base_url",
                problem,
                "write an http:// or https:// URL without credentials, query or fragment, such as https://api.example.com/v1",
            )
        })?;
        if self.model.trim().is_empty() {
            return Err(invalid("model", "is empty".into(), "name the model to test"));
        }
        for (field, set) in [
            ("stored_responses", self.stored_responses),
            ("cache_salt", self.cache_salt),
        ] {
            if set && !self.adapter.openai_extensions() {
                return Err(invalid(
                    field,
                    format!("is true, but the {:?} adapter has no such feature", self.adapter),
                    "remove it: only the openai-chat adapter speaks stored responses and cache_salt",
                ));
            }
        }
        if self.context_window < 64 {
            return Err(invalid(
                "context_window",
                format!("is {}, below the minimum of 64 tokens", self.context_window),
                "write the context window the vendor advertises, in tokens",
            ));
        }
        if self.tenants.len() < 2 {
            return Err(invalid(
                "tenants",
                format!("lists {} tenant(s); isolation needs at least 2", self.tenants.len()),
                "add a [[tenants]] table for a second account you control",
            ));
        }
        let mut labels = BTreeSet::new();
        let mut envs = BTreeSet::new();
        for (i, t) in self.tenants.iter().enumerate() {
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
        if self.request_timeout_secs == 0 {
            return Err(invalid(
                "request_timeout_secs",
                "is 0".into(),
                "allow at least 1 second per request",
            ));
        }
        if self.idle_timeout_secs == Some(0) {
            return Err(invalid(
                "idle_timeout_secs",
                "is 0".into(),
                "allow at least 1 second between two pieces of an answer",
            ));
        }
        if self.max_response_bytes < 4096 {
            return Err(invalid(
                "max_response_bytes",
                format!("is {}", self.max_response_bytes),
                "allow at least 4096 bytes per answer (the default is 33554432, 32 MiB)",
            ));
        }
        if self.stop_after_server_errors == 0 {
            return Err(invalid(
                "stop_after_server_errors",
                "is 0".into(),
                "stop after at least 1 server error in a row (the default is 20)",
            ));
        }
        if self.max_concurrency == 0 {
            return Err(invalid(
                "max_concurrency",
                "is 0".into(),
                "allow at least 1 request in flight",
            ));
        }
        Ok(())
    }

    /// Reads each tenant's credential through `lookup` (third pass), usually
    /// `|name| std::env::var(name).ok()`.
    pub fn resolve_credentials(
        &self,
        origin: &Path,
        lookup: impl Fn(&str) -> Option<String>,
    ) -> Result<Vec<TenantKey>, ProfileError> {
        self.tenants
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

    /// `base_url` with any trailing slash removed.
    pub fn base_url(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }
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
        let p = VendorProfile::from_toml(text, origin)?;
        p.validate(origin)?;
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
    fn the_embedded_profile_is_valid() {
        assert!(VendorProfile::embedded_sim().tenants.len() >= 2);
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
        let msg = VendorProfile::load(&path).unwrap_err().to_string();
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
        let err = p
            .resolve_credentials(Path::new("test.toml"), |_| Some("ka".to_string()))
            .unwrap_err()
            .to_string();
        assert!(err.contains("KEY_A has 2 characters"), "{err}");
        assert!(!err.contains("\"ka\""), "the value itself is never printed: {err}");
    }

    #[test]
    fn missing_credential_names_the_variable() {
        let p = parse(GOOD).unwrap();
        let err = p
            .resolve_credentials(Path::new("test.toml"), |name| {
                (name == "KEY_A").then(|| "key-aaaa-1".to_string())
            })
            .unwrap_err();
        assert!(err.to_string().contains("KEY_B is not set"), "{err}");
    }
}
