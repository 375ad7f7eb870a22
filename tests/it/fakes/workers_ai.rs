//! A local fake of Cloudflare Workers AI's REST API, written from its public
//! documentation (not from the reference vendor's format):
//! `POST /client/v4/accounts/{account}/ai/run/{model}` and
//! `GET .../ai/models/search`, bearer tokens, answers in Cloudflare's envelope
//! `{"result", "success", "errors": [{"code", "message"}], "messages"}` (401 code 10000
//! "Authentication error", 400 code 5021 for a prompt past the model's context window,
//! 429 code 3040 "Capacity temporarily exceeded", 400 for a bad body, 404 for no such
//! model), and streams of `data: {"response": "..."}` events, the last with `usage`,
//! then `data: [DONE]`. No finish reason, as the native API has none.
//!
//! Its model answers "You said: " and the last user turn, one token per
//! whitespace-separated word, so answers can be checked exactly.

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use std::convert::Infallible;
use std::sync::Arc;

pub const ACCOUNT: &str = "0123456789abcdef0123456789abcdef";
pub const MODEL: &str = "@cf/fake/chat-1";
/// The token that is always refused for capacity.
pub const RATE_LIMITED_KEY: &str = "fake-cloudflare-limited";

struct Fake {
    keys: Vec<String>,
    context: usize,
}

fn failure(status: StatusCode, code: u32, message: &str) -> Response {
    let body =
        json!({ "result": null, "success": false, "errors": [{ "code": code, "message": message }], "messages": [] });
    (status, axum::Json(body)).into_response()
}

fn success(result: Value) -> Response {
    axum::Json(json!({ "result": result, "success": true, "errors": [], "messages": [] })).into_response()
}

/// Starts the fake on 127.0.0.1 (a free port) on its own thread; returns the account's
/// AI base URL (`.../accounts/{account}/ai`).
pub fn start(keys: &[&str], context: usize) -> String {
    let fake = Arc::new(Fake {
        keys: keys.iter().map(|k| k.to_string()).collect(),
        context,
    });
    let app = Router::new()
        // Model names hold slashes (`@cf/meta/...`): the rest of the path.
        .route("/client/v4/accounts/{account}/ai/run/{*model}", post(run))
        .route("/client/v4/accounts/{account}/ai/models/search", get(search))
        .with_state(fake);
    format!("http://{}/client/v4/accounts/{ACCOUNT}/ai", crate::common::serve(app))
}

impl Fake {
    fn refusal(&self, account: &str, headers: &HeaderMap) -> Option<Response> {
        let token = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        if token == Some(RATE_LIMITED_KEY) {
            return Some(failure(
                StatusCode::TOO_MANY_REQUESTS,
                3040,
                "Capacity temporarily exceeded, please try again.",
            ));
        }
        if account != ACCOUNT || !token.is_some_and(|t| self.keys.iter().any(|k| k == t)) {
            return Some(failure(StatusCode::UNAUTHORIZED, 10000, "Authentication error"));
        }
        None
    }
}

async fn search(State(fake): State<Arc<Fake>>, Path(account): Path<String>, headers: HeaderMap) -> Response {
    if let Some(r) = fake.refusal(&account, &headers) {
        return r;
    }
    success(json!([{ "name": MODEL, "task": { "name": "Text Generation" } }]))
}

async fn run(
    State(fake): State<Arc<Fake>>,
    Path((account, model)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Some(r) = fake.refusal(&account, &headers) {
        return r;
    }
    if model != MODEL {
        return failure(StatusCode::NOT_FOUND, 5007, &format!("No such model {model} or task"));
    }
    let bad = |m: &str| failure(StatusCode::BAD_REQUEST, 5006, m);
    let Ok(req) = serde_json::from_slice::<Value>(&body) else {
        return bad("Error: Malformed JSON in request body");
    };
    let max_tokens = match &req["max_tokens"] {
        Value::Null => 256,
        v => match v.as_i64() {
            Some(n) if n >= 1 => n as usize,
            _ => return bad("Error: Type mismatch of '/max_tokens', 'integer' not in range"),
        },
    };
    let Some(turns) = req["messages"].as_array().filter(|t| !t.is_empty()) else {
        return bad("Error: Required properties at '/' are 'messages' or 'prompt'");
    };
    let words = |v: &Value| v.as_str().map_or(0, |s| s.split_whitespace().count());
    let input: usize = turns.iter().map(|t| words(&t["content"])).sum();
    if input + max_tokens > fake.context {
        return failure(
            StatusCode::BAD_REQUEST,
            5021,
            &format!(
                "The estimated number of input and maximum output tokens ({}) exceeded this model context window limit ({}).",
                input + max_tokens,
                fake.context
            ),
        );
    }
    let last = turns.last().unwrap()["content"].as_str().unwrap_or_default();
    let answer: Vec<String> = format!("You said: {last}")
        .split_whitespace()
        .take(max_tokens)
        .map(str::to_owned)
        .collect();
    let usage =
        json!({ "prompt_tokens": input, "completion_tokens": answer.len(), "total_tokens": input + answer.len() });
    if req["stream"] == true {
        let mut events: Vec<String> = answer
            .iter()
            .enumerate()
            .map(|(i, w)| {
                let text = if i == 0 { w.clone() } else { format!(" {w}") };
                json!({ "response": text, "p": "abcdef" }).to_string()
            })
            .collect();
        events.push(json!({ "response": "", "usage": usage }).to_string());
        events.push("[DONE]".to_owned());
        let stream = futures_util::stream::iter(
            events
                .into_iter()
                .map(|d| Ok::<_, Infallible>(Event::default().data(d))),
        );
        return Sse::new(stream).into_response();
    }
    success(json!({ "response": answer.join(" "), "usage": usage }))
}
