//! [`VendorProfile`]: where a vendor is, how it was reached, and as whom, as the
//! report records it.
//!
//! A profile is a TOML file (see `vendors/`). It names the adapter, the base URL, the
//! model, the advertised context window, and at least two tenants. A tenant names the
//! environment variable that holds its credential, never the credential itself, so the
//! profile is embedded whole in every report. Loading and validating a file, and reading
//! the credentials, belong to the program that runs the suite (`tenantcheck::vendor`).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A vendor profile, as written in `vendors/*.toml`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// The longest wait, in seconds, a rate limit or an unavailable answer (429, 503)
    /// may ask for in its `Retry-After` to be waited out and the request tried again
    /// (in every case, each try in the transcript); an answer asking for longer is kept
    /// as it is. Default 30.
    #[serde(default = "default_max_retry_after_secs")]
    pub max_retry_after_secs: u64,
    /// How many times one request is tried again after rate limits (a 429 or 503 with
    /// a `Retry-After` within `max_retry_after_secs`). Default 5.
    #[serde(default = "default_rate_limit_retries")]
    pub rate_limit_retries: u32,
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
    /// Whether cases may try endpoints that change the server's state with a tenant's
    /// key (`metadata.cross-tenant`: erasing a slot, flushing the prefix cache). Meant
    /// for self-hosted servers; off by default, when only reading endpoints are asked.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub allow_state_changes: bool,
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
    /// How the vendor's nodes show (a hosted model is many replicas behind a router);
    /// `None`: the suite treats the vendor as one node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fleet: Option<FleetSpec>,
    /// The `User-Agent` every request carries: what the buyer's own clients send
    /// (`OpenAI/Python 1.109.1`, say), so that the test's requests look like its
    /// workload's. Default: no `User-Agent` at all. tenantcheck never names itself to a
    /// vendor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_agent: Option<String>,
    /// With `adapter = "azure-openai"`: the deployment's URL form and how a key is sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub azure: Option<AzureSpec>,
}

/// The profile's `[azure]`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AzureSpec {
    /// The deployment, for the URL form `/openai/deployments/{deployment}/...`; none:
    /// the `/openai/v1/` form, which names the deployment as the model.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployment: Option<String>,
    /// The `api-version` the deployment form needs (`2024-10-21`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// How a tenant's credential is sent: `api-key` (the resource's key, in the
    /// `api-key` header) or `entra` (an Entra ID access token, as a bearer token).
    #[serde(default)]
    pub auth: AzureAuth,
}

/// How an Azure OpenAI credential is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "kebab-case")]
pub enum AzureAuth {
    /// The `api-key` header.
    #[default]
    ApiKey,
    /// `Authorization: Bearer TOKEN` (Microsoft Entra ID).
    Entra,
}

/// The profile's `[fleet]`: where the vendor names the node that served a request,
/// how many nodes it declares, and how a request is pinned to one.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FleetSpec {
    /// The response header that names the serving node (RunPod `x-runpod-worker-id`,
    /// the reference vendor's `x-served-by`); none: the vendor does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_header: Option<String>,
    /// Instead of a header: the field of the answer's JSON that names the serving node,
    /// as a JSON Pointer (`/system_fingerprint` where a vendor's fingerprint differs
    /// per node, `/meta/node`); in a stream, the first frame that has it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_field: Option<String>,
    /// The nodes the vendor declares for this model: without a node header, the report
    /// gives the chance that every one of them got a long prompt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nodes: Option<u32>,
    /// A request header whose value pins requests to one node (Cloudflare
    /// `x-session-affinity`, NVIDIA Dynamo `x-dynamo-session-id`): the suite sends one
    /// value per seeder-and-prober pair, so that both meet on one node, and a new one
    /// for the next pair, so that pairs spread.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity_header: Option<String>,
    /// The largest estimated chance that a node serving the model got no long prompt
    /// a pass allows (default 0.01).
    #[serde(default = "default_max_unseen")]
    pub max_unseen: f64,
}

fn default_max_unseen() -> f64 {
    0.01
}

impl FleetSpec {
    /// Where answers name their node, as a report records it: the header's name
    /// (lowercase), or `body ` and the field's JSON Pointer; `None`: nowhere.
    pub fn signal(&self) -> Option<String> {
        match (&self.node_header, &self.node_field) {
            (Some(h), _) => Some(h.to_ascii_lowercase()),
            (None, Some(f)) => Some(format!("body {f}")),
            (None, None) => None,
        }
    }

    /// The node an answer names: the header's value among the kept `headers`, or the
    /// field in the JSON `body`, or in the first of the stream's `frames` (their data)
    /// that has it. A number is named by its digits.
    pub fn node_of<'a>(
        &self,
        headers: &BTreeMap<String, String>,
        body: Option<&str>,
        frames: impl IntoIterator<Item = &'a str>,
    ) -> Option<String> {
        if let Some(h) = &self.node_header {
            return headers.get(&h.to_ascii_lowercase()).cloned();
        }
        let pointer = self.node_field.as_deref()?;
        let named = |text: &str| {
            let value: serde_json::Value = serde_json::from_str(text).ok()?;
            match value.pointer(pointer)? {
                serde_json::Value::String(s) if !s.is_empty() => Some(s.clone()),
                serde_json::Value::Number(n) => Some(n.to_string()),
                _ => None,
            }
        };
        body.and_then(named).or_else(|| frames.into_iter().find_map(named))
    }
}

/// A vendor's prices.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeclaredNode {
    /// `prefill`, `decode` or `unified`.
    pub role: NodeRole,
    /// The KV pool, in tokens.
    pub kv_pool_tokens: u64,
}

/// A node's role in serving.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum NodeRole {
    Prefill,
    Decode,
    Unified,
}

/// One tenant (account) the suite acts as.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// Azure OpenAI (Azure AI Foundry): OpenAI's chat completions at
    /// `{base_url}/openai/deployments/{deployment}/chat/completions?api-version=V`
    /// (with `[azure] deployment` and `api_version`) or at
    /// `{base_url}/openai/v1/chat/completions` (the model is the deployment), with the
    /// `api-key` header or an Entra ID bearer token (`[azure] auth`).
    AzureOpenai,
}

impl AdapterKind {
    /// Whether the API has stored responses and per-request cache salts.
    pub fn openai_extensions(self) -> bool {
        matches!(self, AdapterKind::OpenaiChat)
    }
}

fn default_timeout() -> u64 {
    120
}

fn default_max_response_bytes() -> u64 {
    DEFAULT_MAX_RESPONSE_BYTES
}

fn default_stop_after_server_errors() -> u32 {
    20
}

fn default_max_retry_after_secs() -> u64 {
    30
}

fn default_rate_limit_retries() -> u32 {
    5
}

fn default_concurrency() -> u32 {
    4
}

/// The default cap on one answer's size, in bytes (`max_response_bytes`).
pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 32 << 20;

/// The shortest credential accepted. Every artifact is redacted of every credential, so
/// a two-letter "key" would be cut out of ordinary words in the evidence.
pub const MIN_CREDENTIAL_CHARS: usize = 8;

impl VendorProfile {
    /// `base_url` with any trailing slash removed.
    pub fn base_url(&self) -> &str {
        self.base_url.trim_end_matches('/')
    }
}
