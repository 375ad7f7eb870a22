//! The reference vendor's HTTP front end (OpenAI-compatible).

use super::scheduler::{Scheduler, Slot};
use super::transform::Field;
use super::{Engine, EngineError, Fault, SimConfig, tokenizer};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::Arc;

/// A stored response: whose it is, and the conversation so far.
struct Stored {
    owner: String,
    /// The prompt text it answered (including any previous responses it continued).
    input: String,
    output: String,
}

struct Sim {
    stored: std::sync::Mutex<HashMap<String, Stored>>,
    /// Whether a leak fault acts on each occasion (`--leak-rate`).
    leaks: Arc<crate::intermittent::Intermittent>,
    model: String,
    context: usize,
    engine: Engine,
    scheduler: Scheduler,
    faults: Vec<Fault>,
    truncate_to: usize,
    /// Whether answers say how many prompt tokens came from the cache.
    cache_counter: bool,
    /// `system_fingerprint` in every chat completion and chunk, if any.
    fingerprint: Option<String>,
    /// Where an answer decoded from residue is put (`--leak-field`).
    leak_field: crate::transform::LeakField,
    /// API key → tenant label.
    keys: HashMap<String, String>,
    /// The response cache in front of the model.
    responses: crate::responses::ResponseCache,
    /// A plain answer's pause per token, where plain answers are paced.
    plain_step: Option<std::time::Duration>,
    /// Requests being served, by id, as `GET /slots` shows them.
    slots: std::sync::Mutex<std::collections::BTreeMap<u64, SlotView>>,
    next_slot: std::sync::atomic::AtomicU64,
    /// With `debug-header`: a stretch of each tenant's last long prompt, by tenant.
    debug: std::sync::Mutex<HashMap<String, String>>,
    /// Prompts longer than this many tokens are long (`--stale-above`).
    long_above: usize,
    /// The front end (`--api`).
    api: crate::Api,
}

/// A request in flight, as `GET /slots` shows it (after llama.cpp's server).
#[derive(Clone, Debug)]
struct SlotView {
    tenant: String,
    n_prompt_tokens: usize,
    n_predict: u64,
    temperature: Option<f64>,
    top_p: Option<f64>,
    seed: Option<u64>,
}

/// Keeps a request in `/slots` until its answer is made.
struct InFlight {
    sim: Arc<Sim>,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.sim.slots.lock().expect("slots lock poisoned").remove(&self.id);
    }
}

pub(super) fn router(config: SimConfig) -> Router {
    let with = config.clone();
    let leaks = Arc::new(crate::intermittent::Intermittent::new(
        config.leak_rate.0,
        config.leak_rate.1,
    ));
    let sim = Sim {
        long_above: config.stale_above(),
        stored: Default::default(),
        engine: Engine::new(&config, leaks.clone()),
        scheduler: Scheduler::new(config.batch, config.decode_step, !config.has(Fault::CancelSwap))
            .keeping(leaks.clone()),
        leaks,
        faults: config.faults.clone(),
        truncate_to: config.truncate_to(),
        cache_counter: !config.no_cache_counter,
        responses: crate::responses::ResponseCache::new(config.response_cache()),
        plain_step: config.plain_decode.then_some(config.decode_step),
        fingerprint: config.system_fingerprint.clone(),
        leak_field: config.leak_field,
        model: config.model,
        context: config.context,
        keys: config
            .tenants
            .into_iter()
            .map(|(label, key)| (key.expose().to_owned(), label))
            .collect(),
        slots: Default::default(),
        next_slot: Default::default(),
        debug: Default::default(),
        api: config.api,
    };
    let mut router = match config.api {
        crate::Api::OpenAi => Router::new()
            .route("/v1/models", get(models))
            .route("/v1/chat/completions", post(chat))
            .route("/v1/responses", post(create_response))
            .route("/v1/responses/{id}", get(get_response)),
        // Azure's two URL forms; the deployment form needs an api-version.
        crate::Api::Azure => Router::new()
            .route("/openai/v1/models", get(models))
            .route("/openai/v1/chat/completions", post(chat))
            .route(
                "/openai/models",
                get(|sim, uri, headers| versioned(uri, models(sim, headers))),
            )
            .route(
                "/openai/deployments/{deployment}/chat/completions",
                post(|sim, uri, headers, body| versioned(uri, chat(sim, headers, body))),
            ),
    };
    if !with.api_only && config.api == crate::Api::OpenAi {
        router = router
            .route("/slots", get(slots))
            .route("/slots/{id}", post(slot_action));
    }
    let router = router
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "not_found",
                "Unknown endpoint.",
            )
        })
        // Prompts of a million tokens are several megabytes of JSON.
        .layer(axum::extract::DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(Arc::new(sim));
    with_chaos(router, &with)
}

/// `router` behind the configured chaos and jitter, if any.
pub(crate) fn with_chaos(router: Router, config: &SimConfig) -> Router {
    let router = match config.chaos {
        Some(chaos) => router.layer(axum::middleware::from_fn_with_state(
            super::chaos::ChaosState::new(chaos, config.redirect_to.clone()),
            super::chaos::layer,
        )),
        None => router,
    };
    if config.jitter.any() {
        router.layer(axum::middleware::from_fn_with_state(
            super::jitter::JitterState::new(config.jitter),
            super::jitter::layer,
        ))
    } else {
        router
    }
}

fn error(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    let body = json!({ "error": { "message": message, "type": kind, "param": null, "code": code } });
    (status, axum::Json(body)).into_response()
}

/// Azure's deployment form: without an `api-version` the resource answers 404.
async fn versioned(uri: axum::http::Uri, answer: impl std::future::Future<Output = Response>) -> Response {
    let has_version = uri
        .query()
        .is_some_and(|q| q.split('&').any(|p| p.starts_with("api-version=") && p.len() > 12));
    if !has_version {
        let body = json!({ "error": { "code": "404", "message": "Resource not found" } });
        return (StatusCode::NOT_FOUND, axum::Json(body)).into_response();
    }
    answer.await
}

impl Sim {
    /// The tenant a request's key belongs to: a bearer key, or with Azure's front end
    /// the `api-key` header too. The key is never echoed back.
    fn tenant(&self, headers: &HeaderMap) -> Result<&str, Unauthorized> {
        let api_key = match self.api {
            crate::Api::Azure => headers.get("api-key").and_then(|v| v.to_str().ok()),
            crate::Api::OpenAi => None,
        };
        let key = api_key.or_else(|| {
            headers
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
        });
        match key.and_then(|k| self.keys.get(k)) {
            Some(label) => Ok(label),
            None => Err(Unauthorized {
                key_given: key.is_some(),
            }),
        }
    }
}

/// A request without a known key: 401.
struct Unauthorized {
    key_given: bool,
}

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        let message = if self.key_given {
            "Incorrect API key provided."
        } else {
            "Missing bearer API key."
        };
        error(
            StatusCode::UNAUTHORIZED,
            "invalid_request_error",
            "invalid_api_key",
            message,
        )
    }
}

/// `GET /slots`: the requests in flight. A tenant sees its own; with the fault
/// `metadata-endpoint`, anyone sees everyone's, with a key or without.
async fn slots(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> Response {
    let open = sim.has(Fault::MetadataEndpoint);
    let caller = match sim.tenant(&headers) {
        Ok(t) => Some(t.to_owned()),
        Err(_) if open => None,
        Err(r) => return r.into_response(),
    };
    let slots = sim.slots.lock().expect("slots lock poisoned").clone();
    let shown: Vec<Value> = slots
        .iter()
        .filter(|(_, s)| open || caller.as_deref() == Some(s.tenant.as_str()))
        .map(|(id, s)| {
            json!({
                "id_task": id,
                "is_processing": true,
                "n_ctx": sim.context,
                "n_prompt_tokens": s.n_prompt_tokens,
                "params": { "n_predict": s.n_predict, "temperature": s.temperature, "top_p": s.top_p, "seed": s.seed },
            })
        })
        .collect();
    axum::Json(Value::Array(shown)).into_response()
}

/// `POST /slots/{id}?action=...`: with the fault `metadata-endpoint`, any key may act
/// on any slot (llama.cpp's save, restore and erase); otherwise there is no such
/// endpoint.
async fn slot_action(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> Response {
    if !sim.has(Fault::MetadataEndpoint) {
        return error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "not_found",
            "Unknown endpoint.",
        );
    }
    if let Err(r) = sim.tenant(&headers) {
        return r.into_response();
    }
    axum::Json(json!({ "id_slot": 0, "n_erased": 0 })).into_response()
}

async fn models(State(sim): State<Arc<Sim>>, headers: HeaderMap) -> Response {
    if let Err(r) = sim.tenant(&headers) {
        return r.into_response();
    }
    axum::Json(json!({
        "object": "list",
        "data": [{ "id": sim.model, "object": "model", "owned_by": "tenantcheck-sim", "context_window": sim.context }],
    }))
    .into_response()
}

#[derive(Deserialize)]
struct ChatBody {
    model: String,
    messages: Vec<InMessage>,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    temperature: Option<f64>,
    #[serde(default)]
    top_p: Option<f64>,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
    /// vLLM's per-request prefix-cache isolation key.
    #[serde(default)]
    cache_salt: Option<String>,
}

#[derive(Deserialize)]
struct InMessage {
    role: String,
    content: Value,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: bool,
}

const DEFAULT_MAX_TOKENS: u64 = 256;

/// The largest request body accepted (a 4-million-token prompt fits).
pub(crate) const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// A successful answer, before faults shape how it is sent.
struct Reply {
    text: String,
    prompt_tokens: usize,
    completion_tokens: usize,
    finish_reason: &'static str,
    cached_tokens: usize,
    /// Keeps the request in `/slots` until its answer has been sent.
    in_flight: Option<InFlight>,
    /// The id and time of a stored answer given again; `None`: new ones.
    identity: Option<(String, u64)>,
    /// The response cache's key for the request, where the answer is to be kept.
    keep_as: Option<u64>,
    /// Decoded from residue: put where `--leak-field` says.
    residue: bool,
}

impl From<super::Generation> for Reply {
    fn from(g: super::Generation) -> Self {
        Reply {
            text: g.text,
            prompt_tokens: g.prompt_tokens,
            completion_tokens: g.completion_tokens,
            finish_reason: g.finish_reason,
            cached_tokens: g.cached_tokens,
            in_flight: None,
            identity: None,
            keep_as: None,
            residue: g.residue,
        }
    }
}

/// How the client asked for the answer.
#[derive(Clone, Copy)]
struct Delivery {
    stream: bool,
    include_usage: bool,
}

impl Sim {
    fn has(&self, fault: Fault) -> bool {
        self.faults.contains(&fault)
    }

    /// A refusal: an OpenAI-style error, or with `error-as-200` an empty success.
    async fn refuse(self: &Arc<Self>, delivery: Delivery, status: StatusCode, code: &str, message: &str) -> Response {
        if self.has(Fault::ErrorAs200) && status != StatusCode::UNAUTHORIZED {
            let empty = Reply {
                text: String::new(),
                prompt_tokens: 0,
                completion_tokens: 0,
                finish_reason: "stop",
                cached_tokens: 0,
                in_flight: None,
                identity: None,
                keep_as: None,
                residue: false,
            };
            return self.reply(delivery, empty).await;
        }
        let kind = if status.is_server_error() {
            "server_error"
        } else {
            "invalid_request_error"
        };
        let mut r = error(status, kind, code, message);
        if status == StatusCode::SERVICE_UNAVAILABLE {
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        }
        r
    }

    /// A successful answer, as a body or a stream, carried through a decode slot.
    async fn reply(self: &Arc<Self>, delivery: Delivery, reply: Reply) -> Response {
        let (id, created) = reply
            .identity
            .clone()
            .unwrap_or_else(|| (crate::responses::new_id(), crate::responses::now()));
        if let Some(key) = reply.keep_as {
            self.responses.put(
                key,
                crate::responses::Stored {
                    id: id.clone(),
                    created,
                    text: reply.text.clone(),
                    prompt_tokens: reply.prompt_tokens,
                    completion_tokens: reply.completion_tokens,
                    finish_reason: reply.finish_reason,
                },
            );
        }
        let reported_prompt = if self.has(Fault::UsageMisreport) {
            reply.prompt_tokens * 3 / 4
        } else {
            reply.prompt_tokens
        };
        let mut usage = json!({
            "prompt_tokens": reported_prompt,
            "completion_tokens": reply.completion_tokens,
            "total_tokens": reported_prompt + reply.completion_tokens,
        });
        if self.cache_counter {
            usage["prompt_tokens_details"] = json!({ "cached_tokens": reply.cached_tokens });
        }
        let field = match reply.residue {
            true => self.leak_field.of(&reply.text),
            false => Field::Content,
        };
        let mut slot = self.scheduler.acquire().await;
        slot.put(tokenizer::tokens(&reply.text));
        let mut response = if delivery.stream {
            let chunks = Chunks {
                id: id.clone(),
                created,
                model: self.model.clone(),
                fingerprint: self.fingerprint.clone(),
                field,
            };
            // A broken stream stops after half its own tokens.
            let own_tokens = tokenizer::count(&reply.text);
            let broken = self.has(Fault::StreamNoErrorFrame);
            let stream = Streaming {
                slot,
                chunks,
                sent: 0,
                limit: if broken { Some(own_tokens / 2) } else { None },
                finish_reason: reply.finish_reason,
                usage: delivery.include_usage.then_some(usage),
                phase: match self.api {
                    crate::Api::Azure => Phase::PromptFilter,
                    crate::Api::OpenAi => Phase::Role,
                },
            };
            let in_flight = reply.in_flight;
            let events = futures_util::StreamExt::map(
                futures_util::stream::unfold(stream, Streaming::next_event),
                move |event| {
                    let _held = &in_flight;
                    event
                },
            );
            Sse::new(events).into_response()
        } else {
            // A stored answer given again is not decoded.
            if let (Some(step), None) = (self.plain_step, &reply.identity) {
                tokio::time::sleep(step * reply.completion_tokens as u32).await;
            }
            let mut body = json!({
                "id": id, "object": "chat.completion", "created": created, "model": self.model,
                "choices": [placed(field, &slot.take_all(), reply.finish_reason)],
                "usage": usage,
            });
            if let Some(fp) = &self.fingerprint {
                body["system_fingerprint"] = json!(fp);
            }
            axum::Json(body).into_response()
        };
        if let Ok(v) = header::HeaderValue::from_str(&id) {
            response.headers_mut().insert("x-request-id", v);
        }
        response
    }
}

/// What a model that does not help says in the content, where the answer's text went
/// to the logprobs alone.
const NO_HELP: &str = "I cannot help with that.";

/// A plain answer's choice, with `text` in `field` ([`Field`]).
fn placed(field: Field, text: &str, finish_reason: &str) -> Value {
    let message = match field {
        Field::Content => json!({ "role": "assistant", "content": text }),
        Field::Reasoning => json!({ "role": "assistant", "content": "", "reasoning_content": text }),
        Field::ToolArguments => json!({ "role": "assistant", "content": null, "tool_calls": [tool_call(text)] }),
        Field::Logprobs => json!({ "role": "assistant", "content": NO_HELP }),
    };
    let mut choice = json!({ "index": 0, "message": message, "finish_reason": finish_reason });
    if field == Field::Logprobs {
        choice["logprobs"] = logprobs(tokenizer::tokens(text));
    }
    choice
}

/// A call of the function `lookup` with `arguments`, as OpenAI's `tool_calls` hold it.
fn tool_call(arguments: &str) -> Value {
    json!({ "index": 0, "id": "call_0", "type": "function",
            "function": { "name": "lookup", "arguments": arguments } })
}

/// OpenAI's `logprobs` object for these tokens.
fn logprobs<'t>(tokens: impl Iterator<Item = &'t str>) -> Value {
    let content: Vec<Value> = tokens
        .map(|t| json!({ "token": t, "logprob": -0.25, "top_logprobs": [] }))
        .collect();
    json!({ "content": content })
}

/// What every chunk of one stream shares.
struct Chunks {
    id: String,
    created: u64,
    model: String,
    fingerprint: Option<String>,
    /// Where the answer's tokens go.
    field: Field,
}

impl Chunks {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        self.with_shared(json!({ "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }] }))
    }

    /// The first chunk: the role, and the content that says it cannot help where the
    /// tokens go to the logprobs alone.
    fn role(&self) -> Value {
        let content = if self.field == Field::Logprobs { NO_HELP } else { "" };
        self.chunk(json!({ "role": "assistant", "content": content }), None)
    }

    /// The chunk of the answer's `nth` token, `piece`, in the stream's field.
    fn token(&self, nth: usize, piece: &str) -> Value {
        match self.field {
            Field::Content => self.chunk(json!({ "content": piece }), None),
            Field::Reasoning => self.chunk(json!({ "reasoning_content": piece }), None),
            Field::ToolArguments if nth == 0 => self.chunk(json!({ "tool_calls": [tool_call(piece)] }), None),
            Field::ToolArguments => self.chunk(
                json!({ "tool_calls": [{ "index": 0, "function": { "arguments": piece } }] }),
                None,
            ),
            Field::Logprobs => self.with_shared(json!({ "choices": [{
                "index": 0, "delta": {}, "finish_reason": null,
                "logprobs": logprobs(std::iter::once(piece)),
            }] })),
        }
    }

    /// `fields` with what every chunk carries: id, object, time, model, fingerprint.
    fn with_shared(&self, mut fields: Value) -> Value {
        fields["id"] = json!(self.id);
        fields["object"] = json!("chat.completion.chunk");
        fields["created"] = json!(self.created);
        fields["model"] = json!(self.model);
        if let Some(fp) = &self.fingerprint {
            fields["system_fingerprint"] = json!(fp);
        }
        fields
    }
}

/// Where a stream is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Azure: the content filter's verdict on the prompt, before the answer.
    PromptFilter,
    Role,
    Tokens,
    Finish,
    Usage,
    Done,
    End,
}

/// One stream being sent: its slot is dropped (and cleared, unless `cancel-swap`)
/// when the client goes away or the stream ends.
struct Streaming {
    slot: Slot,
    chunks: Chunks,
    sent: usize,
    limit: Option<usize>,
    finish_reason: &'static str,
    usage: Option<Value>,
    phase: Phase,
}

impl Streaming {
    async fn next_event(mut self) -> Option<(Result<Event, Infallible>, Self)> {
        loop {
            let data = match self.phase {
                Phase::PromptFilter => {
                    self.phase = Phase::Role;
                    json!({
                        "id": "", "object": "", "created": 0, "model": "", "choices": [],
                        "prompt_filter_results": [{ "prompt_index": 0, "content_filter_results": {
                            "hate": { "filtered": false, "severity": "safe" },
                            "self_harm": { "filtered": false, "severity": "safe" },
                            "sexual": { "filtered": false, "severity": "safe" },
                            "violence": { "filtered": false, "severity": "safe" },
                        } }],
                    })
                    .to_string()
                }
                Phase::Role => {
                    self.phase = Phase::Tokens;
                    self.chunks.role().to_string()
                }
                Phase::Tokens => {
                    if self.limit == Some(self.sent) {
                        // `stream-no-error-frame`: the stream just ends.
                        self.phase = Phase::End;
                        continue;
                    }
                    match self.slot.next_token().await {
                        Some(piece) => {
                            self.sent += 1;
                            self.chunks.token(self.sent - 1, &piece).to_string()
                        }
                        None => {
                            self.phase = Phase::Finish;
                            continue;
                        }
                    }
                }
                Phase::Finish => {
                    self.phase = Phase::Usage;
                    self.chunks.chunk(json!({}), Some(self.finish_reason)).to_string()
                }
                Phase::Usage => {
                    self.phase = Phase::Done;
                    match self.usage.take() {
                        Some(usage) => self
                            .chunks
                            .with_shared(json!({ "choices": [], "usage": usage }))
                            .to_string(),
                        None => continue,
                    }
                }
                Phase::Done => {
                    self.phase = Phase::End;
                    "[DONE]".to_owned()
                }
                Phase::End => return None,
            };
            return Some((Ok(Event::default().data(data)), self));
        }
    }
}

async fn chat(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> Response {
    let tenant = match sim.tenant(&headers) {
        Ok(t) => t.to_owned(),
        Err(r) => return r.into_response(),
    };
    let (mut response, long) = answer_chat(&sim, &tenant, body).await;
    if sim.has(Fault::DebugHeader) && long && response.status().is_success() {
        let others = sim.debug.lock().expect("debug lock poisoned");
        let stretch = others.iter().find(|(t, _)| **t != tenant).map(|(_, s)| s.clone());
        drop(others);
        if let Some(v) = stretch.filter(|_| sim.leaks.acts())
            && let Ok(v) = header::HeaderValue::from_str(&v)
        {
            response.headers_mut().insert("x-debug-batch", v);
        }
    }
    response
}

/// With `debug-header`: [`DEBUG_CHARS`] characters of `prompt` from a point drawn by
/// its text, on one line of visible ASCII (what a header value may hold).
fn debug_stretch(prompt: &str) -> String {
    let mut rng = crate::transform::Rng(crate::transform::fnv(prompt));
    let mut from = rng.below(prompt.len().saturating_sub(DEBUG_CHARS) as u64 + 1) as usize;
    while !prompt.is_char_boundary(from) {
        from += 1;
    }
    prompt[from..]
        .chars()
        .take(DEBUG_CHARS)
        .map(|c| if c.is_ascii_graphic() { c } else { ' ' })
        .collect()
}

/// How much of another tenant's prompt a `debug-header` answer carries.
const DEBUG_CHARS: usize = 300;

/// A chat completion for `tenant`, and whether its prompt was long (over
/// `--stale-above` tokens).
async fn answer_chat(sim: &Arc<Sim>, tenant: &str, body: Bytes) -> (Response, bool) {
    let mut long = false;
    let response = answer_chat_inner(sim, tenant, body, &mut long).await;
    (response, long)
}

async fn answer_chat_inner(sim: &Arc<Sim>, tenant: &str, body: Bytes, long: &mut bool) -> Response {
    // Before the body is understood, ask for a stream if it plainly does.
    let mut delivery = Delivery {
        stream: serde_json::from_slice::<Value>(&body).is_ok_and(|v| v["stream"] == true),
        include_usage: false,
    };
    let bad = StatusCode::BAD_REQUEST;
    let req: ChatBody = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            let msg = format!("We could not parse the JSON body of your request: {e}");
            return sim.refuse(delivery, bad, "invalid_request", &msg).await;
        }
    };
    delivery.stream = req.stream;
    delivery.include_usage = req.stream_options.as_ref().is_some_and(|o| o.include_usage);
    if req.model != sim.model {
        let msg = format!("The model `{}` does not exist.", req.model);
        return sim
            .refuse(delivery, StatusCode::NOT_FOUND, "model_not_found", &msg)
            .await;
    }
    if req.messages.is_empty() {
        return sim
            .refuse(
                delivery,
                bad,
                "invalid_request",
                "'messages' must contain at least one message.",
            )
            .await;
    }
    let max_tokens = req
        .max_completion_tokens
        .or(req.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 {
        return sim
            .refuse(delivery, bad, "invalid_request", "'max_tokens' must be at least 1.")
            .await;
    }
    if req.temperature.is_some_and(|t| !(0.0..=2.0).contains(&t)) {
        return sim
            .refuse(
                delivery,
                bad,
                "invalid_request",
                "'temperature' must be between 0 and 2.",
            )
            .await;
    }
    let prompt = match template(&req.messages) {
        Ok(p) => p,
        Err(msg) => return sim.refuse(delivery, bad, "invalid_request", &msg).await,
    };
    let mut tokens: Vec<&str> = tokenizer::tokens(&prompt).collect();
    *long = tokens.len() > sim.long_above;
    if sim.has(Fault::DebugHeader) && *long {
        let stretch = debug_stretch(&prompt);
        sim.debug
            .lock()
            .expect("debug lock poisoned")
            .insert(tenant.to_owned(), stretch);
    }
    let max_tokens = max_tokens.min(sim.context as u64) as usize;
    if sim.has(Fault::SilentTruncate) {
        // Keep the head and the tail, drop the middle, say nothing.
        let keep = sim.truncate_to.min(sim.context.saturating_sub(max_tokens)).max(2);
        if tokens.len() > keep {
            let tail = tokens.split_off(tokens.len() - keep / 2);
            tokens.truncate(keep - keep / 2);
            tokens.extend(tail);
        }
    }
    let requested = tokens.len() + max_tokens;
    // With context-shift, a prompt that fits is served whatever max_tokens asks: the
    // head goes, usage below still counts the whole prompt.
    let mut shifted_from = None;
    if sim.has(Fault::ContextShift) && requested > sim.context && tokens.len() < sim.context {
        shifted_from = Some(tokens.len());
        tokens.drain(..requested - sim.context);
    }
    let requested = tokens.len() + max_tokens;
    if requested > sim.context {
        let msg = format!(
            "This model's maximum context length is {} tokens. However, you requested {requested} tokens ({} in the messages, {max_tokens} in the completion).",
            sim.context,
            tokens.len()
        );
        if sim.has(Fault::OverContextServerError) {
            let msg = "Context size has been exceeded.";
            return sim
                .refuse(delivery, StatusCode::INTERNAL_SERVER_ERROR, "server_error", msg)
                .await;
        }
        return sim.refuse(delivery, bad, "context_length_exceeded", &msg).await;
    }
    // A response cache answers before the model sees the request.
    let keep_as = sim
        .responses
        .key(tenant, &req.model, &prompt, max_tokens, req.temperature);
    if let Some(stored) = keep_as.and_then(|k| sim.responses.get(k)) {
        let reply = Reply {
            text: stored.text,
            prompt_tokens: stored.prompt_tokens,
            completion_tokens: stored.completion_tokens,
            finish_reason: stored.finish_reason,
            cached_tokens: 0,
            in_flight: None,
            identity: Some((stored.id, stored.created)),
            keep_as: None,
            residue: false,
        };
        return sim.reply(delivery, reply).await;
    }
    let id = sim.next_slot.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    sim.slots.lock().expect("slots lock poisoned").insert(
        id,
        SlotView {
            tenant: tenant.to_owned(),
            n_prompt_tokens: shifted_from.unwrap_or(tokens.len()),
            n_predict: max_tokens as u64,
            temperature: req.temperature,
            top_p: req.top_p,
            seed: req.seed,
        },
    );
    let in_flight = InFlight { sim: sim.clone(), id };
    match sim
        .engine
        .generate(tenant, req.cache_salt.as_deref(), &tokens, max_tokens)
        .await
    {
        Ok(g) => {
            let mut reply: Reply = g.into();
            if let Some(whole) = shifted_from {
                reply.prompt_tokens = whole;
            }
            reply.in_flight = Some(in_flight);
            reply.keep_as = keep_as;
            sim.reply(delivery, reply).await
        }
        Err(e @ EngineError::Busy(_)) => {
            sim.refuse(
                delivery,
                StatusCode::SERVICE_UNAVAILABLE,
                "server_overloaded",
                &e.to_string(),
            )
            .await
        }
        Err(e @ EngineError::Overflow) => {
            sim.refuse(
                delivery,
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                &e.to_string(),
            )
            .await
        }
        Err(e @ EngineError::TooLarge(_)) => {
            let msg = format!("This request exceeds the model's KV cache: {e}.");
            sim.refuse(delivery, bad, "context_length_exceeded", &msg).await
        }
    }
}

#[derive(Deserialize)]
struct ResponseBody {
    model: String,
    input: String,
    #[serde(default = "yes")]
    store: bool,
    #[serde(default)]
    previous_response_id: Option<String>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
}

fn yes() -> bool {
    true
}

impl Sim {
    /// The stored response `id`, if `tenant` may see it: its owner only, or anyone with
    /// `object-idor`.
    fn stored_for(&self, id: &str, tenant: &str) -> Option<(String, String)> {
        let stored = self.stored.lock().expect("store lock poisoned");
        let s = stored.get(id)?;
        (s.owner == tenant || (self.has(Fault::ObjectIdor) && self.leaks.acts()))
            .then(|| (s.input.clone(), s.output.clone()))
    }

    fn response_json(&self, id: &str, output: &str, usage: Option<(usize, usize)>) -> Value {
        let mut v = json!({
            "id": id, "object": "response", "status": "completed", "model": self.model,
            "output": [{ "type": "message", "role": "assistant",
                         "content": [{ "type": "output_text", "text": output }] }],
        });
        if let Some((i, o)) = usage {
            v["usage"] = json!({ "input_tokens": i, "output_tokens": o, "total_tokens": i + o });
        }
        v
    }
}

async fn create_response(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> Response {
    let tenant = match sim.tenant(&headers) {
        Ok(t) => t.to_owned(),
        Err(r) => return r.into_response(),
    };
    let plain = Delivery {
        stream: false,
        include_usage: false,
    };
    let bad = StatusCode::BAD_REQUEST;
    let req: ResponseBody = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return sim
                .refuse(plain, bad, "invalid_request", &format!("Invalid body: {e}"))
                .await;
        }
    };
    if req.model != sim.model {
        let msg = format!("The model `{}` does not exist.", req.model);
        return sim.refuse(plain, StatusCode::NOT_FOUND, "model_not_found", &msg).await;
    }
    let mut input = String::new();
    if let Some(prev) = &req.previous_response_id {
        match sim.stored_for(prev, &tenant) {
            Some((i, o)) => {
                input.push_str(&i);
                input.push_str(&format!("<|assistant|>\n{o}\n"));
            }
            None => {
                let msg = format!("Previous response with id '{prev}' not found.");
                return sim
                    .refuse(plain, StatusCode::NOT_FOUND, "previous_response_not_found", &msg)
                    .await;
            }
        }
    }
    input.push_str(&format!("<|user|>\n{}\n", req.input));
    let prompt = format!("{input}<|assistant|>\n");
    let tokens: Vec<&str> = tokenizer::tokens(&prompt).collect();
    let max_tokens = req
        .max_output_tokens
        .unwrap_or(DEFAULT_MAX_TOKENS)
        .clamp(1, sim.context as u64) as usize;
    if tokens.len() + max_tokens > sim.context {
        return sim
            .refuse(
                plain,
                bad,
                "context_length_exceeded",
                "The conversation exceeds the context window.",
            )
            .await;
    }
    let g = match sim.engine.generate(&tenant, None, &tokens, max_tokens).await {
        Ok(g) => g,
        Err(e) => {
            return sim
                .refuse(
                    plain,
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_overloaded",
                    &e.to_string(),
                )
                .await;
        }
    };
    let id = format!(
        "resp_{}",
        tenantcheck_evidence::hex(&tenantcheck_evidence::random_bytes::<12>())
    );
    if req.store {
        sim.stored.lock().expect("store lock poisoned").insert(
            id.clone(),
            Stored {
                owner: tenant,
                input,
                output: g.text.clone(),
            },
        );
    }
    axum::Json(sim.response_json(&id, &g.text, Some((g.prompt_tokens, g.completion_tokens)))).into_response()
}

async fn get_response(
    State(sim): State<Arc<Sim>>,
    headers: HeaderMap,
    axum::extract::Path(id): axum::extract::Path<String>,
) -> Response {
    let tenant = match sim.tenant(&headers) {
        Ok(t) => t.to_owned(),
        Err(r) => return r.into_response(),
    };
    match sim.stored_for(&id, &tenant) {
        Some((_, output)) => axum::Json(sim.response_json(&id, &output, None)).into_response(),
        None => {
            let plain = Delivery {
                stream: false,
                include_usage: false,
            };
            let msg = format!("Response with id '{id}' not found.");
            sim.refuse(plain, StatusCode::NOT_FOUND, "not_found", &msg).await
        }
    }
}

/// The chat template: `<|role|>\ncontent\n` per message, then `<|assistant|>\n`.
fn template(messages: &[InMessage]) -> Result<String, String> {
    let mut prompt = String::new();
    for (i, m) in messages.iter().enumerate() {
        if !matches!(m.role.as_str(), "system" | "developer" | "user" | "assistant") {
            return Err(format!("Invalid value for 'messages[{i}].role': {:?}.", m.role));
        }
        let text = match &m.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .map(|p| match (p["type"].as_str(), p["text"].as_str()) {
                    (Some("text"), Some(t)) => Ok(t),
                    _ => Err(format!("Unsupported content part in 'messages[{i}].content'.")),
                })
                .collect::<Result<Vec<_>, _>>()?
                .concat(),
            _ => return Err(format!("Invalid type for 'messages[{i}].content'.")),
        };
        prompt.push_str(&format!("<|{}|>\n{text}\n", m.role));
    }
    prompt.push_str("<|assistant|>\n");
    Ok(prompt)
}
