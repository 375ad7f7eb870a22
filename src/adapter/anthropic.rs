//! [`AnthropicMessages`]: the Anthropic Messages API (`POST /v1/messages`).
//!
//! The key travels in `x-api-key`, every request carries `anthropic-version:
//! 2023-06-01`. An answer is a `message` whose `content` blocks of type `text` make the
//! text; `stop_reason` `max_tokens` is recorded as the finish reason `length`,
//! `end_turn` and `stop_sequence` as `stop`; usage is `input_tokens`, `output_tokens`
//! and `cache_read_input_tokens`. A stream is a sequence of named events:
//! `message_start` (id, input usage), `content_block_start`, `content_block_delta`
//! (`text_delta`), `content_block_stop`, `message_delta` (stop reason, output usage),
//! `message_stop`, with `ping` and `error` events anywhere. Errors are
//! `{"type": "error", "error": {"type", "message"}}`, in a body or an `error` event.
//! The API stores no responses.

use super::http::{Auth, Dialect, Http};
use super::{
    ApiError, BoxFuture, ChatRequest, Exchange, InvalidRequest, Limits, Provider, RecordedRequest, SseFrame,
    TransportError, Usage,
};
use crate::credential::Secret;
use serde_json::{Value, json};

/// The API version every request names.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

/// An Anthropic Messages API client.
#[derive(Clone, Debug)]
pub struct AnthropicMessages {
    http: Http,
    base_url: String,
    model: String,
}

struct Anthropic;

impl AnthropicMessages {
    /// A client for `base_url` (up to the version segment, `https://api.anthropic.com/v1`)
    /// and `model`.
    pub fn new(base_url: &str, model: &str, limits: impl Into<Limits>) -> Result<Self, TransportError> {
        Ok(AnthropicMessages {
            http: Http::new(
                base_url,
                limits.into(),
                Auth::Header("x-api-key"),
                vec![("anthropic-version", ANTHROPIC_VERSION)],
            )?,
            base_url: base_url.trim_end_matches('/').to_owned(),
            model: model.to_owned(),
        })
    }

    /// Takes from the profile what every request sends (an affinity header, the
    /// `User-Agent`).
    pub fn with_profile(mut self, profile: &crate::vendor::VendorProfile) -> Self {
        self.http.configure(profile);
        self
    }

    fn body(&self, request: &ChatRequest) -> Value {
        // System messages go into `system`; the rest are turns.
        let system: Vec<&str> = request
            .messages
            .iter()
            .filter(|m| m.role == "system")
            .map(|m| m.content.as_str())
            .collect();
        let turns: Vec<Value> = request
            .messages
            .iter()
            .filter(|m| m.role != "system")
            .map(|m| json!({ "role": m.role, "content": m.content }))
            .collect();
        let mut body = json!({
            "model": self.model,
            "max_tokens": request.max_tokens,
            "messages": turns,
            "temperature": 0,
            "stream": request.stream,
        });
        if !system.is_empty() {
            body["system"] = json!(system.join("\n"));
        }
        if let Some(user) = &request.user {
            body["metadata"] = json!({ "user_id": user });
        }
        body
    }

    fn post(&self, body: Value, raw: bool) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            url: format!("{}/messages", self.base_url),
            body: Some(body),
            raw,
            headers: Default::default(),
        }
    }
}

impl Provider for AnthropicMessages {
    fn chat<'a>(&'a self, credential: &'a Secret, request: &'a ChatRequest) -> BoxFuture<'a, Exchange> {
        let recorded = RecordedRequest {
            headers: self.http.chosen_headers(request),
            ..self.post(self.body(request), false)
        };
        Box::pin(self.http.send(credential, recorded, request.cancel_after, &Anthropic))
    }

    fn list_models<'a>(&'a self, credential: &'a Secret) -> BoxFuture<'a, Exchange> {
        let recorded = RecordedRequest {
            method: "GET".into(),
            url: format!("{}/models", self.base_url),
            body: None,
            raw: false,
            headers: Default::default(),
        };
        Box::pin(self.http.send(credential, recorded, None, &Anthropic))
    }

    fn store<'a>(&'a self, _: &'a Secret, _: &'a str, _: Option<&'a str>) -> BoxFuture<'a, Exchange> {
        Box::pin(std::future::ready(super::not_offered(
            "Anthropic Messages API",
            "stored responses",
        )))
    }

    fn fetch_stored<'a>(&'a self, _: &'a Secret, _: &'a str) -> BoxFuture<'a, Exchange> {
        Box::pin(std::future::ready(super::not_offered(
            "Anthropic Messages API",
            "stored responses",
        )))
    }

    fn invalid<'a>(&'a self, credential: &'a Secret, kind: InvalidRequest, stream: bool) -> BoxFuture<'a, Exchange> {
        let ask = ChatRequest {
            stream,
            ..ChatRequest::user("Say hello.", 16)
        };
        let (body, raw) = kind.spoil(self.body(&ask), &self.model);
        Box::pin(self.http.send(credential, self.post(body, raw), None, &Anthropic))
    }

    fn endpoint<'a>(
        &'a self,
        credential: Option<&'a Secret>,
        method: &'a str,
        path: &'a str,
        body: Option<&'a serde_json::Value>,
    ) -> BoxFuture<'a, Exchange> {
        Box::pin(self.http.endpoint(credential, method, path, body, &Anthropic))
    }

    fn stream_problems(&self, ex: &Exchange) -> Vec<String> {
        crate::judge::stream::problems(crate::vendor::AdapterKind::Anthropic, ex)
    }
}

impl Dialect for Anthropic {
    fn read_body(&self, v: &Value, ex: &mut Exchange) {
        if v["type"] == "message" {
            for block in v["content"].as_array().into_iter().flatten() {
                if block["type"] == "text" {
                    ex.content.push_str(block["text"].as_str().unwrap_or_default());
                }
            }
            ex.finish_reason = v["stop_reason"].as_str().map(finish_reason);
            read_usage(&v["usage"], ex);
        }
        read_error(v, ex);
    }

    fn read_event(&self, _frame: &SseFrame, v: &Value, ex: &mut Exchange) {
        match v["type"].as_str().unwrap_or_default() {
            "message_start" => read_usage(&v["message"]["usage"], ex),
            "content_block_delta" if v["delta"]["type"] == "text_delta" => {
                ex.content.push_str(v["delta"]["text"].as_str().unwrap_or_default());
            }
            "message_delta" => {
                if let Some(reason) = v["delta"]["stop_reason"].as_str() {
                    ex.finish_reason = Some(finish_reason(reason));
                }
                read_usage(&v["usage"], ex);
            }
            "error" => read_error(v, ex),
            _ => {}
        }
    }
}

/// The finish reason, in the words the probes use.
fn finish_reason(stop_reason: &str) -> String {
    match stop_reason {
        "max_tokens" => "length".to_owned(),
        "end_turn" | "stop_sequence" => "stop".to_owned(),
        other => other.to_owned(),
    }
}

/// Merges a usage object into the exchange's: a stream reports input tokens at its
/// start and output tokens at its end.
fn read_usage(u: &Value, ex: &mut Exchange) {
    if !u.is_object() {
        return;
    }
    let usage = ex.usage.get_or_insert(Usage::default());
    if let Some(n) = u["input_tokens"].as_u64() {
        usage.prompt_tokens = n;
    }
    if let Some(n) = u["output_tokens"].as_u64() {
        usage.completion_tokens = n;
    }
    if let Some(n) = u["cache_read_input_tokens"].as_u64() {
        usage.cached_tokens = Some(n);
    }
}

fn read_error(v: &Value, ex: &mut Exchange) {
    if v["type"] == "error" {
        let e = &v["error"];
        ex.api_error = Some(ApiError {
            kind: e["type"].as_str().map(str::to_owned),
            code: None,
            message: e["message"].as_str().unwrap_or_default().to_owned(),
        });
    }
}
