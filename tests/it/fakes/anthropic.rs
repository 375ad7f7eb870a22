//! A local fake of the Anthropic Messages API, written from its public documentation
//! (not from the reference vendor's format): `POST /v1/messages` and `GET /v1/models`,
//! `x-api-key` and `anthropic-version` headers, error bodies `{"type": "error",
//! "error": {"type", "message"}}` with the documented types and statuses (400
//! `invalid_request_error`, 401 `authentication_error`, 404 `not_found_error`, 429
//! `rate_limit_error` with `retry-after`), and streams of named events
//! (`message_start`, `content_block_start`, `ping`, `content_block_delta`,
//! `content_block_stop`, `message_delta`, `message_stop`).
//!
//! Its model answers "You said: " and the last user turn, one token per
//! whitespace-separated word, so answers can be checked exactly.

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;

pub const MODEL: &str = "claude-fake-1";
/// The key that is always rate limited.
pub const RATE_LIMITED_KEY: &str = "fake-rate-limited-key";
/// A known key whose first request is rate limited (`retry-after: 1`), the rest not.
pub const FLAKY_KEY: &str = "fake-flaky-key-1";

pub struct Fake {
    keys: Vec<String>,
    context: usize,
    flaked: std::sync::atomic::AtomicBool,
}

fn error(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({ "type": "error", "error": { "type": kind, "message": message } });
    (status, axum::Json(body)).into_response()
}

/// Starts the fake on 127.0.0.1 (a free port) on its own thread; returns its base URL.
pub fn start(keys: &[&str], context: usize) -> String {
    let fake = Arc::new(Fake {
        keys: keys
            .iter()
            .map(|k| k.to_string())
            .chain([FLAKY_KEY.to_owned()])
            .collect(),
        context,
        flaked: Default::default(),
    });
    let app = Router::new()
        .route("/v1/messages", post(messages))
        .route("/v1/models", get(models))
        .with_state(fake);
    format!("http://{}/v1", crate::common::serve(app))
}

impl Fake {
    /// The refusal a request's headers earn, if any.
    fn refusal(&self, headers: &HeaderMap) -> Option<Response> {
        let key = headers.get("x-api-key").and_then(|v| v.to_str().ok());
        let flake = key == Some(FLAKY_KEY) && !self.flaked.swap(true, std::sync::atomic::Ordering::SeqCst);
        if key == Some(RATE_LIMITED_KEY) || flake {
            let mut r = error(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                "Number of request tokens has exceeded your per-minute rate limit",
            );
            let wait = if flake { "1" } else { "7" };
            r.headers_mut().insert("retry-after", wait.parse().unwrap());
            return Some(r);
        }
        if !key.is_some_and(|k| self.keys.iter().any(|known| known == k)) {
            return Some(error(
                StatusCode::UNAUTHORIZED,
                "authentication_error",
                "invalid x-api-key",
            ));
        }
        if headers.get("anthropic-version").is_none() {
            return Some(error(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "anthropic-version: header is required",
            ));
        }
        None
    }
}

async fn models(State(fake): State<Arc<Fake>>, headers: HeaderMap) -> Response {
    if let Some(r) = fake.refusal(&headers) {
        return r;
    }
    axum::Json(json!({ "data": [{ "type": "model", "id": MODEL, "display_name": "Fake" }], "has_more": false }))
        .into_response()
}

async fn messages(State(fake): State<Arc<Fake>>, headers: HeaderMap, body: Bytes) -> Response {
    if let Some(r) = fake.refusal(&headers) {
        return r;
    }
    let bad = |m: &str| error(StatusCode::BAD_REQUEST, "invalid_request_error", m);
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad("There was an issue with your request body: invalid JSON");
    };
    if req["model"] != MODEL {
        return error(
            StatusCode::NOT_FOUND,
            "not_found_error",
            &format!("model: {}", req["model"]),
        );
    }
    let Some(max_tokens) = req["max_tokens"].as_i64() else {
        return bad("max_tokens: Field required");
    };
    if max_tokens < 1 {
        return bad("max_tokens: Input should be greater than or equal to 1");
    }
    let Some(turns) = req["messages"].as_array().filter(|t| !t.is_empty()) else {
        return bad("messages: at least one message is required");
    };
    let words = |v: &Value| v.as_str().map_or(0, |s| s.split_whitespace().count());
    let input: usize = turns.iter().map(|t| words(&t["content"])).sum::<usize>() + words(&req["system"]);
    if input + max_tokens as usize > fake.context {
        return bad(&format!(
            "prompt is too long: {input} tokens > {} maximum",
            fake.context
        ));
    }
    let last = turns.last().unwrap()["content"].as_str().unwrap_or_default();
    let all: Vec<String> = format!("You said: {last}")
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    let cut = all.len() > max_tokens as usize;
    let answer: Vec<String> = all.into_iter().take(max_tokens as usize).collect();
    let stop_reason = if cut { "max_tokens" } else { "end_turn" };
    let id = format!("msg_{}", input * 7919 + answer.len());
    if req["stream"] == true {
        let mut events = vec![
            (
                "message_start",
                json!({ "type": "message_start", "message": {
                "id": id, "type": "message", "role": "assistant", "model": MODEL, "content": [],
                "stop_reason": null, "usage": { "input_tokens": input, "output_tokens": 1 } } }),
            ),
            (
                "content_block_start",
                json!({ "type": "content_block_start", "index": 0, "content_block": { "type": "text", "text": "" } }),
            ),
            ("ping", json!({ "type": "ping" })),
        ];
        for (i, w) in answer.iter().enumerate() {
            let text = if i == 0 { w.clone() } else { format!(" {w}") };
            events.push((
                "content_block_delta",
                json!({ "type": "content_block_delta", "index": 0, "delta": { "type": "text_delta", "text": text } }),
            ));
        }
        events.push((
            "content_block_stop",
            json!({ "type": "content_block_stop", "index": 0 }),
        ));
        events.push(("message_delta", json!({ "type": "message_delta", "delta": { "stop_reason": stop_reason, "stop_sequence": null }, "usage": { "output_tokens": answer.len() } })));
        events.push(("message_stop", json!({ "type": "message_stop" })));
        let stream = futures_util::stream::iter(
            events
                .into_iter()
                .map(|(name, data)| Ok::<_, Infallible>(Event::default().event(name).data(data.to_string()))),
        );
        return Sse::new(stream).into_response();
    }
    axum::Json(json!({
        "id": id, "type": "message", "role": "assistant", "model": MODEL,
        "content": [{ "type": "text", "text": answer.join(" ") }],
        "stop_reason": stop_reason, "stop_sequence": null,
        "usage": { "input_tokens": input, "output_tokens": answer.len(), "cache_read_input_tokens": 0 },
    }))
    .into_response()
}
