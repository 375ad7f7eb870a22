//! The reference vendor's HTTP front end (OpenAI-compatible).

use super::{Engine, EngineError, SimConfig, tokenizer};
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

struct Sim {
    model: String,
    context: usize,
    engine: Engine,
    /// API key → tenant label.
    keys: HashMap<String, String>,
}

pub(super) fn router(config: SimConfig) -> Router {
    let sim = Sim {
        engine: Engine::new(&config),
        model: config.model,
        context: config.context,
        keys: config
            .tenants
            .into_iter()
            .map(|(label, key)| (key.expose().to_owned(), label))
            .collect(),
    };
    Router::new()
        .route("/v1/models", get(models))
        .route("/v1/chat/completions", post(chat))
        .fallback(|| async {
            error(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "not_found",
                "Unknown endpoint.",
            )
        })
        .with_state(Arc::new(sim))
}

fn error(status: StatusCode, kind: &str, code: &str, message: &str) -> Response {
    let body =
        json!({ "error": { "message": message, "type": kind, "param": null, "code": code } });
    (status, axum::Json(body)).into_response()
}

fn invalid(message: &str) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        "invalid_request_error",
        "invalid_request",
        message,
    )
}

impl Sim {
    /// The tenant a request's bearer key belongs to. The key is never echoed back.
    fn tenant(&self, headers: &HeaderMap) -> Result<&str, Unauthorized> {
        let key = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
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
    stream: bool,
    #[serde(default)]
    stream_options: Option<StreamOptions>,
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

async fn chat(State(sim): State<Arc<Sim>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Err(r) = sim.tenant(&headers) {
        return r.into_response();
    }
    let req: ChatBody = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            return invalid(&format!(
                "We could not parse the JSON body of your request: {e}"
            ));
        }
    };
    if req.model != sim.model {
        return error(
            StatusCode::NOT_FOUND,
            "invalid_request_error",
            "model_not_found",
            &format!("The model `{}` does not exist.", req.model),
        );
    }
    if req.messages.is_empty() {
        return invalid("'messages' must contain at least one message.");
    }
    let max_tokens = req
        .max_completion_tokens
        .or(req.max_tokens)
        .unwrap_or(DEFAULT_MAX_TOKENS);
    if max_tokens == 0 {
        return invalid("'max_tokens' must be at least 1.");
    }
    let prompt = match template(&req.messages) {
        Ok(p) => p,
        Err(msg) => return invalid(&msg),
    };
    let prompt_tokens = tokenizer::count(&prompt);
    let requested = prompt_tokens as u64 + max_tokens;
    if requested > sim.context as u64 {
        return error(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            "context_length_exceeded",
            &format!(
                "This model's maximum context length is {} tokens. However, you requested {requested} tokens ({prompt_tokens} in the messages, {max_tokens} in the completion).",
                sim.context
            ),
        );
    }
    let generation = match sim
        .engine
        .generate(&prompt, prompt_tokens, max_tokens as usize)
        .await
    {
        Ok(g) => g,
        Err(e @ EngineError::Busy(_)) => {
            let mut r = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "server_error",
                "server_overloaded",
                &e.to_string(),
            );
            r.headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
            return r;
        }
    };
    let id = format!("chatcmpl-{}", crate::hex(&crate::random_bytes::<12>()));
    let created = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let usage = json!({
        "prompt_tokens": generation.prompt_tokens,
        "completion_tokens": generation.completion_tokens,
        "total_tokens": generation.prompt_tokens + generation.completion_tokens,
    });
    let mut response = if req.stream {
        let include_usage = req.stream_options.is_some_and(|o| o.include_usage);
        let chunk = |delta: Value, finish: Option<&str>| {
            json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": sim.model,
                "choices": [{ "index": 0, "delta": delta, "finish_reason": finish }],
            })
        };
        let mut events = vec![chunk(json!({ "role": "assistant", "content": "" }), None)];
        for piece in tokenizer::tokens(&generation.text) {
            events.push(chunk(json!({ "content": piece }), None));
        }
        events.push(chunk(json!({}), Some(generation.finish_reason)));
        if include_usage {
            events.push(json!({
                "id": id, "object": "chat.completion.chunk", "created": created, "model": sim.model,
                "choices": [], "usage": usage,
            }));
        }
        let events = events
            .into_iter()
            .map(|v| Event::default().data(v.to_string()))
            .chain(std::iter::once(Event::default().data("[DONE]")))
            .map(Ok::<_, Infallible>);
        Sse::new(futures_util::stream::iter(events)).into_response()
    } else {
        axum::Json(json!({
            "id": id, "object": "chat.completion", "created": created, "model": sim.model,
            "choices": [{
                "index": 0,
                "message": { "role": "assistant", "content": generation.text },
                "finish_reason": generation.finish_reason,
            }],
            "usage": usage,
        }))
        .into_response()
    };
    if let Ok(v) = header::HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
}

/// The chat template: `<|role|>\ncontent\n` per message, then `<|assistant|>\n`.
fn template(messages: &[InMessage]) -> Result<String, String> {
    let mut prompt = String::new();
    for (i, m) in messages.iter().enumerate() {
        if !matches!(
            m.role.as_str(),
            "system" | "developer" | "user" | "assistant"
        ) {
            return Err(format!(
                "Invalid value for 'messages[{i}].role': {:?}.",
                m.role
            ));
        }
        let text = match &m.content {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .iter()
                .map(|p| match (p["type"].as_str(), p["text"].as_str()) {
                    (Some("text"), Some(t)) => Ok(t),
                    _ => Err(format!(
                        "Unsupported content part in 'messages[{i}].content'."
                    )),
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
