//! [`SimServer`]: the reference vendor, an OpenAI-compatible server with tenants, a
//! paged KV pool, a toy model, and injectable faults.
//!
//! It is the suite's own test bed and the embedded default target of
//! `tenantcheck run`. Its parts:
//!
//! - [`tokenizer`]: a documented toy tokenizer; usage counts come from it;
//! - [`kv`]: a paged KV pool whose freed pages are reused without being cleared;
//! - [`model`]: a toy model that answers only from the KV pages its request holds;
//! - [`prefix`]: a prompt-prefix cache shared per tenant, globally, or not at all;
//!   prefill time is charged only for uncached tokens, so sharing shows in timing;
//! - the engine, which admits requests, writes and reads pages and runs the model;
//! - [`scheduler`]: the decode batch, whose slots carry answers to the front end,
//!   streams one token per decode step, and notices clients that go away;
//! - the HTTP front end: `GET /v1/models`, `POST /v1/chat/completions` (streaming and
//!   not), stored responses (`POST /v1/responses` with `store` and
//!   `previous_response_id`, `GET /v1/responses/{id}`, each readable by its owner only),
//!   bearer keys mapped to tenants, OpenAI-style error bodies.
//!
//! [`chaos`] makes it a hostile vendor at the HTTP level instead (`--chaos NAME`), for
//! the harness's own tests; [`jitter`] makes its timing noisy, as real servers' is.
//!
//! A leak in the sim is never printed on purpose: it happens only when a fault makes
//! the engine skip a write, so that the model reads what earlier requests left in
//! the pages.

pub mod chaos;
mod engine;
pub mod fleet;
pub mod intermittent;
pub mod jitter;
pub mod kv;
pub mod model;
pub mod prefix;
pub mod recogniser;
pub mod responses;
pub mod scheduler;
mod server;
pub mod transform;
pub use tenantcheck_evidence::tokenizer;

pub use chaos::Chaos;
pub use engine::{Engine, EngineError, Generation};
pub use fleet::{Fleet, Routing};
pub use jitter::Jitter;
pub use prefix::PrefixCacheScope;
pub use responses::ResponseCacheScope;

use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// An API key the reference vendor accepts; never shown (its `Debug` is redacted).
#[derive(Clone, PartialEq, Eq)]
pub struct ApiKey(String);

impl ApiKey {
    /// A key with this value.
    pub fn new(value: impl Into<String>) -> Self {
        ApiKey(value.into())
    }

    /// The value, for the comparison with a request's bearer token.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ApiKey([REDACTED])")
    }
}

/// A fault the reference vendor can be told to have.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum Fault {
    /// Prompts longer than `--stale-above` tokens (default: half the context) are
    /// admitted without being written into their KV pages; the model reads whatever
    /// earlier requests, of any tenant, left there.
    StalePages,
    /// (disaggregated) The SGLang mechanism of the 2026 incident: a prompt over the
    /// prefill pool is marked rejected and swapped for a 1-token placeholder, admission
    /// checks only "finished", prefill writes the first page, the transfer and decode go
    /// on, and decode reads every page it reserved: 200 with text from residue, and
    /// `usage.prompt_tokens` 1.
    RejectContinue,
    /// (disaggregated) A request whose KV transfer cannot get decode pages is aborted
    /// and answered 200 with `finish_reason: "length"`, no content and no error.
    AbortAsLength,
    /// Prompts over `--truncate-to` tokens (default: half the context), and over the
    /// context, silently lose their middle and are answered 200.
    SilentTruncate,
    /// `usage.prompt_tokens` reports three quarters of the tokens processed.
    UsageMisreport,
    /// Refusals (every error but 401) become 200 with empty content.
    #[value(name = "error-as-200")]
    ErrorAs200,
    /// Streams fail half-way through their answer and just end: no error frame, no
    /// finish reason, no `[DONE]`.
    StreamNoErrorFrame,
    /// Stored responses are readable, and usable as `previous_response_id`, by any
    /// tenant that has their id.
    ObjectIdor,
    /// The unsent rest of a stream its client cancelled stays in the decode slot and
    /// is delivered at the start of the next answer that slot carries, whoever asked.
    CancelSwap,
    /// The prompt-prefix cache is shared by all tenants (the same as
    /// `--prefix-cache global`).
    GlobalPrefixCache,
    /// A request over the context is refused with HTTP 500 `server_error` instead of a
    /// client error (llama.cpp's server answers 500 "Context size has been exceeded"
    /// when its unified KV pool runs out): no harm done, but no refusal the suite can
    /// tell from a crash either.
    OverContextServerError,
    /// A request whose prompt fits the context but whose `max_tokens` does not is
    /// admitted: the head of the prompt (instructions first) is dropped to make room,
    /// the answer runs to the full `max_tokens`, and usage still counts the whole
    /// prompt. llama.cpp's `--context-shift` does this as generation reaches the end of
    /// the slot.
    ContextShift,
    /// `GET /slots` shows every tenant's requests in flight (prompt length, sampling
    /// parameters, seed) to any key and to none, and `POST /slots/N?action=erase` is
    /// accepted from any key, as llama.cpp's server does. Without the fault, `/slots`
    /// shows a tenant its own requests only and takes no action.
    MetadataEndpoint,
    /// A response cache in front of the model shared by every tenant: a request one
    /// tenant sent is answered for another from the stored answer, id and all (the
    /// same as `--response-cache global`; LiteLLM's proxy with `cache: true` and no
    /// caller in its key).
    SharedResponseCache,
    /// One KV pool for every request, and no waiting for it: a request that finds too
    /// few free pages fails, and so does every request in flight at that moment, with
    /// HTTP 500 "Context size has been exceeded" (llama.cpp's server with
    /// `--kv-unified`, where two valid requests of two keys overflow the pool together).
    PoolOverflow,
    /// A gateway's debugging left on: the answer to a prompt longer than
    /// `--stale-above` tokens (default: half the context), honest itself, carries an
    /// `x-debug-batch` header holding 300 characters of the last such prompt another
    /// tenant sent (from a point drawn per prompt, folded to one line).
    DebugHeader,
}

impl Fault {
    /// Every fault, in documentation order.
    pub const ALL: &[Fault] = &[
        Fault::StalePages,
        Fault::RejectContinue,
        Fault::AbortAsLength,
        Fault::SilentTruncate,
        Fault::UsageMisreport,
        Fault::ErrorAs200,
        Fault::StreamNoErrorFrame,
        Fault::ObjectIdor,
        Fault::CancelSwap,
        Fault::GlobalPrefixCache,
        Fault::OverContextServerError,
        Fault::ContextShift,
        Fault::MetadataEndpoint,
        Fault::PoolOverflow,
        Fault::SharedResponseCache,
        Fault::DebugHeader,
    ];

    /// The fault's name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::StalePages => "stale-pages",
            Fault::RejectContinue => "reject-continue",
            Fault::AbortAsLength => "abort-as-length",
            Fault::SilentTruncate => "silent-truncate",
            Fault::UsageMisreport => "usage-misreport",
            Fault::ErrorAs200 => "error-as-200",
            Fault::StreamNoErrorFrame => "stream-no-error-frame",
            Fault::ObjectIdor => "object-idor",
            Fault::CancelSwap => "cancel-swap",
            Fault::GlobalPrefixCache => "global-prefix-cache",
            Fault::OverContextServerError => "over-context-server-error",
            Fault::ContextShift => "context-shift",
            Fault::MetadataEndpoint => "metadata-endpoint",
            Fault::PoolOverflow => "pool-overflow",
            Fault::SharedResponseCache => "shared-response-cache",
            Fault::DebugHeader => "debug-header",
        }
    }
}

/// Prefill time per uncached prompt token, by default: about what a large model
/// takes on one accelerator, small enough for a million-token suite in seconds.
pub const DEFAULT_PREFILL_PER_TOKEN: Duration = Duration::from_micros(1);

/// Time between two streamed tokens, by default.
pub const DEFAULT_DECODE_STEP: Duration = Duration::from_millis(1);

/// Requests decoded at once, by default.
pub const DEFAULT_BATCH: usize = 256;

/// Separate prefill and decode pools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Disaggregation {
    /// The prefill node's KV pool, in tokens.
    pub prefill_pool_tokens: usize,
    /// The decode node's KV pool, in tokens.
    pub decode_pool_tokens: usize,
}

/// The API the reference vendor speaks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Api {
    /// OpenAI's, at `/v1/`.
    #[default]
    OpenAi,
    /// Azure OpenAI's.
    Azure,
}

/// How the reference vendor is set up.
#[derive(Clone, Debug)]
pub struct SimConfig {
    /// The one model it serves.
    pub model: String,
    /// The context window it enforces, in tokens (prompt plus completion).
    pub context: usize,
    /// Tokens per KV page.
    pub page_tokens: usize,
    /// KV pages in the unified pool; `None`: enough for two full contexts.
    pub pages: Option<usize>,
    /// Separate prefill and decode pools; `None`: one unified pool.
    pub disaggregated: Option<Disaggregation>,
    /// The injected faults.
    pub faults: Vec<Fault>,
    /// The prompt length above which `stale-pages` skips writes; `None`: half the
    /// context.
    pub stale_above: Option<usize>,
    /// The most prompt tokens `silent-truncate` keeps; `None`: half the context.
    pub truncate_to: Option<usize>,
    /// Tenants: label and API key.
    pub tenants: Vec<(String, ApiKey)>,
    /// Who shares the prompt-prefix cache (the fault `global-prefix-cache` makes it
    /// global).
    pub prefix_cache: PrefixCacheScope,
    /// Who shares the response cache in front of the model (the fault
    /// `shared-response-cache` makes it global).
    pub response_cache: ResponseCacheScope,
    /// Prefill time charged per uncached prompt token.
    pub prefill_per_token: Duration,
    /// Time between two tokens of a stream (one decode step).
    pub decode_step: Duration,
    /// Requests decoded at once; more wait for a slot.
    pub batch: usize,
    /// A model too weak for the suite's recall checks: it neither answers questions
    /// nor repeats its prompt (not a fault: small real models behave so).
    pub weak_model: bool,
    /// A model that garbles what it copies (a digit of every account number, two
    /// letters of every e-mail), as small real models do; not a fault.
    pub garbling_model: bool,
    /// A model that, reading residue, returns a stretch of its prose without the
    /// records (`--fragmenting-model`).
    pub fragmenting_model: bool,
    /// A model that reads back only about three in four of the prompts it is asked
    /// to repeat (an honest model that copies now and then; not a fault).
    pub forgetful_model: bool,
    /// How what a model decodes from pages that hold no prompt of its own comes back
    /// (`--leak-transform`): cut, respelled, mixed with its own words; `None`: as read.
    pub leak_transform: Option<transform::LeakTransform>,
    /// Which output field carries what a model decodes from pages that hold no prompt
    /// of its own (`--leak-field`): the content by default.
    pub leak_field: transform::LeakField,
    /// The chance that a leak fault acts on each occasion it could (`--leak-rate`),
    /// and the seed of the draws: 1 for every time.
    pub leak_rate: (f64, u64),
    /// Answers say nothing of the prompt cache (no `prompt_tokens_details`), as many
    /// hosted APIs do; the cache still speeds shared prefixes up (not a fault).
    pub no_cache_counter: bool,
    /// Plain (not streamed) answers take a decode step per token too, as a real model's
    /// do (`--plain-decode`); by default only streams are paced, so that the suite runs
    /// in seconds.
    pub plain_decode: bool,
    /// Only the API is served: no engine endpoint (`/slots`) answers anyone, as
    /// behind a gateway that forwards the API alone (`--api-only`).
    pub api_only: bool,
    /// The front end: OpenAI's API at `/v1/`, or Azure OpenAI's (`--api azure`): the
    /// same engine and faults behind `/openai/deployments/{d}/...?api-version=` and
    /// `/openai/v1/`, keys in the `api-key` header, the prompt's content-filter verdict
    /// first in a stream, and no engine endpoint.
    pub api: Api,
    /// Another customer's traffic fills every free page before each request
    /// (`--background-tenant`).
    pub background_tenant: bool,
    /// The background customer's records bear names and e-mail domains drawn from the
    /// canaries' own pools (`--common-name-strangers`): strangers who share names with
    /// the run's holders, as a busy vendor's customers do.
    pub common_name_strangers: bool,
    /// Hostile behaviour at the HTTP level, for chat completions.
    pub chaos: Option<Chaos>,
    /// Where `--chaos redirect` points (another origin); `None`:
    /// [`chaos::DEFAULT_REDIRECT`].
    pub redirect_to: Option<String>,
    /// Many nodes behind a router, the faults on some of them; `None`: one node.
    pub fleet: Option<Fleet>,
    /// How noisy its timing is (`--transfer-jitter`, `--latency-jitter`).
    pub jitter: jitter::Jitter,
    /// Put in every chat completion and chunk as `system_fingerprint` (OpenAI's
    /// field); a fleet with [`Fleet::node_fingerprint`] gives each node its own.
    pub system_fingerprint: Option<String>,
}

impl SimConfig {
    /// A healthy sim with these tenants and the defaults: model `sim-1`, 8,192-token
    /// context, 16-token pages, one pool for two full contexts, a per-tenant prefix
    /// cache, 1 µs of prefill per uncached token, 1 ms per streamed token, a batch of
    /// 256, no response cache.
    pub fn new(tenants: Vec<(String, ApiKey)>) -> Self {
        SimConfig {
            model: "sim-1".into(),
            context: 8192,
            page_tokens: 16,
            pages: None,
            disaggregated: None,
            faults: Vec::new(),
            stale_above: None,
            truncate_to: None,
            tenants,
            prefix_cache: PrefixCacheScope::PerTenant,
            response_cache: ResponseCacheScope::Off,
            prefill_per_token: DEFAULT_PREFILL_PER_TOKEN,
            decode_step: DEFAULT_DECODE_STEP,
            batch: DEFAULT_BATCH,
            weak_model: false,
            garbling_model: false,
            fragmenting_model: false,
            forgetful_model: false,
            leak_transform: None,
            leak_field: transform::LeakField::default(),
            leak_rate: (1.0, 0),
            no_cache_counter: false,
            plain_decode: false,
            api_only: false,
            api: Api::OpenAi,
            background_tenant: false,
            common_name_strangers: false,
            chaos: None,
            redirect_to: None,
            system_fingerprint: None,
            jitter: jitter::Jitter::default(),
            fleet: None,
        }
    }

    /// The prefix cache's scope, with the fault `global-prefix-cache` applied.
    pub fn prefix_cache(&self) -> PrefixCacheScope {
        if self.has(Fault::GlobalPrefixCache) {
            PrefixCacheScope::Global
        } else {
            self.prefix_cache
        }
    }

    /// The response cache's scope, with the fault `shared-response-cache` applied.
    pub fn response_cache(&self) -> ResponseCacheScope {
        if self.has(Fault::SharedResponseCache) && self.response_cache == ResponseCacheScope::Off {
            ResponseCacheScope::Global
        } else {
            self.response_cache
        }
    }

    /// KV pages in the unified pool.
    pub fn pages(&self) -> usize {
        self.pages
            .unwrap_or_else(|| (2 * self.context).div_ceil(self.page_tokens))
    }

    /// The prompt length above which `stale-pages` applies.
    pub fn stale_above(&self) -> usize {
        self.stale_above.unwrap_or(self.context / 2)
    }

    /// The most prompt tokens `silent-truncate` keeps.
    pub fn truncate_to(&self) -> usize {
        self.truncate_to.unwrap_or(self.context / 2)
    }

    /// Whether `fault` is injected.
    pub fn has(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }
}

/// A running reference vendor.
#[derive(Debug)]
pub struct SimServer {
    addr: SocketAddr,
    api: Api,
    shutdown: Option<oneshot::Sender<()>>,
    task: JoinHandle<std::io::Result<()>>,
}

impl SimServer {
    /// Binds `listen` (port 0 picks a free port) and starts serving in the background.
    pub async fn start(config: SimConfig, listen: SocketAddr) -> std::io::Result<Self> {
        let listener = TcpListener::bind(listen).await?;
        let addr = listener.local_addr()?;
        let (tx, rx) = oneshot::channel();
        let slow = config.chaos == Some(Chaos::SlowHeaders);
        let api = config.api;
        let app = match config.fleet.clone() {
            Some(fleet) if fleet.nodes > 1 => fleet::router(config, &fleet),
            _ => server::router(config),
        };
        let stop = async {
            let _ = rx.await;
        };
        let task = if slow {
            tokio::spawn(async move {
                axum::serve(chaos::SlowListener(listener), app)
                    .with_graceful_shutdown(stop)
                    .await
            })
        } else {
            tokio::spawn(async move { axum::serve(listener, app).with_graceful_shutdown(stop).await })
        };
        Ok(SimServer {
            addr,
            api,
            shutdown: Some(tx),
            task,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL of its API (`http://ADDR/v1`).
    /// Where a profile points: `http://ADDR/v1` for OpenAI's API, the resource root
    /// `http://ADDR` for Azure's.
    pub fn base_url(&self) -> String {
        match self.api {
            Api::OpenAi => format!("http://{}/v1", self.addr),
            Api::Azure => format!("http://{}", self.addr),
        }
    }

    /// Stops accepting, lets requests in flight finish, and waits for the server.
    pub async fn shutdown(mut self) -> std::io::Result<()> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    }

    /// Serves until the process ends (for `tenantcheck sim`).
    pub async fn wait(self) -> std::io::Result<()> {
        match self.task.await {
            Ok(r) => r,
            Err(e) => Err(std::io::Error::other(e)),
        }
    }
}
