//! [`OpenAiChat`]: the OpenAI-compatible chat completions dialect.

use super::{
    ApiError, BoxFuture, ChatRequest, Exchange, InvalidRequest, Provider, RecordedRequest, SseParser, TransportError,
    TransportErrorKind, Usage,
};
use crate::credential::Secret;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// Response headers kept in the transcript (lowercase). Anything else, cookies in
/// particular, is dropped.
const KEPT_HEADERS: &[&str] = &[
    "content-type",
    "retry-after",
    "x-request-id",
    "request-id",
    "openai-processing-ms",
    "openai-model",
    "server",
];

/// Prefixes of response headers also kept (rate-limit state).
const KEPT_HEADER_PREFIXES: &[&str] = &["x-ratelimit-"];

/// An OpenAI-compatible chat completions client.
#[derive(Clone, Debug)]
pub struct OpenAiChat {
    client: reqwest::Client,
    base_url: String,
    model: String,
}

impl OpenAiChat {
    /// A client for `base_url` (up to the version segment) and `model`.
    pub fn new(base_url: &str, model: &str, timeout: Duration) -> Result<Self, TransportError> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .user_agent(concat!("tenantcheck/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| TransportError {
                kind: TransportErrorKind::Request,
                message: e.to_string(),
            })?;
        Ok(OpenAiChat {
            client,
            base_url: base_url.trim_end_matches('/').to_owned(),
            model: model.to_owned(),
        })
    }

    fn body(&self, request: &ChatRequest) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": 0,
            "stream": request.stream,
        });
        if request.stream {
            body["stream_options"] = json!({ "include_usage": true });
        }
        if let Some(salt) = &request.cache_salt {
            body["cache_salt"] = json!(salt);
        }
        body
    }

    async fn send(&self, credential: &Secret, recorded: RecordedRequest, cancel_after: Option<u32>) -> Exchange {
        let started = Instant::now();
        let ms = || started.elapsed().as_secs_f64() * 1e3;
        let mut ex = Exchange {
            request: recorded,
            ..Exchange::default()
        };
        let builder = match (ex.request.method.as_str(), &ex.request.body) {
            ("GET", _) => self.client.get(&ex.request.url),
            // A raw body that is not JSON travels as the string it is.
            (_, Some(Value::String(raw))) if ex.request.raw => self
                .client
                .post(&ex.request.url)
                .header(reqwest::header::CONTENT_TYPE, "application/json")
                .body(raw.clone()),
            (_, body) => self
                .client
                .post(&ex.request.url)
                .json(body.as_ref().unwrap_or(&Value::Null)),
        };
        let response = match builder.bearer_auth(credential.expose()).send().await {
            Ok(r) => r,
            Err(e) => {
                ex.transport_error = Some(transport_error(&e));
                ex.timings.total_ms = ms();
                return ex;
            }
        };
        ex.timings.first_byte_ms = Some(ms());
        ex.status = Some(response.status().as_u16());
        for (name, value) in response.headers() {
            let name = name.as_str();
            if KEPT_HEADERS.contains(&name) || KEPT_HEADER_PREFIXES.iter().any(|p| name.starts_with(p)) {
                ex.headers
                    .insert(name.to_owned(), String::from_utf8_lossy(value.as_bytes()).into_owned());
            }
        }
        let is_stream = ex
            .headers
            .get("content-type")
            .is_some_and(|ct| ct.starts_with("text/event-stream"));
        let mut response = response;
        if is_stream {
            read_stream(&mut response, &mut ex, &ms, cancel_after).await;
        } else {
            let mut body = Vec::new();
            loop {
                match response.chunk().await {
                    Ok(Some(chunk)) => body.extend_from_slice(&chunk),
                    Ok(None) => break,
                    Err(e) => {
                        ex.transport_error = Some(transport_error(&e));
                        break;
                    }
                }
            }
            let text = String::from_utf8_lossy(&body).into_owned();
            if let Ok(v) = serde_json::from_str::<Value>(&text) {
                read_completion(&v, &mut ex);
            }
            ex.body = Some(text);
        }
        ex.timings.total_ms = ms();
        ex
    }
}

impl Provider for OpenAiChat {
    fn chat<'a>(&'a self, credential: &'a Secret, request: &'a ChatRequest) -> BoxFuture<'a, Exchange> {
        let recorded = RecordedRequest {
            method: "POST".into(),
            url: format!("{}/chat/completions", self.base_url),
            body: Some(self.body(request)),
            raw: false,
        };
        Box::pin(self.send(credential, recorded, request.cancel_after))
    }

    fn list_models<'a>(&'a self, credential: &'a Secret) -> BoxFuture<'a, Exchange> {
        let recorded = RecordedRequest {
            method: "GET".into(),
            url: format!("{}/models", self.base_url),
            body: None,
            raw: false,
        };
        Box::pin(self.send(credential, recorded, None))
    }

    fn store<'a>(
        &'a self,
        credential: &'a Secret,
        input: &'a str,
        previous: Option<&'a str>,
    ) -> BoxFuture<'a, Exchange> {
        let mut body = json!({ "model": self.model, "input": input, "store": true, "max_output_tokens": 96 });
        if let Some(id) = previous {
            body["previous_response_id"] = json!(id);
        }
        let recorded = RecordedRequest {
            method: "POST".into(),
            url: format!("{}/responses", self.base_url),
            body: Some(body),
            raw: false,
        };
        Box::pin(self.send(credential, recorded, None))
    }

    fn fetch_stored<'a>(&'a self, credential: &'a Secret, id: &'a str) -> BoxFuture<'a, Exchange> {
        // An id is the vendor's: keep it to one path segment.
        let id: String = id
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
            .collect();
        let recorded = RecordedRequest {
            method: "GET".into(),
            url: format!("{}/responses/{id}", self.base_url),
            body: None,
            raw: false,
        };
        Box::pin(self.send(credential, recorded, None))
    }

    fn invalid<'a>(&'a self, credential: &'a Secret, kind: InvalidRequest, stream: bool) -> BoxFuture<'a, Exchange> {
        let ask = ChatRequest {
            stream,
            ..ChatRequest::user("Say hello.", 16)
        };
        let mut body = self.body(&ask);
        let mut raw = false;
        match kind {
            InvalidRequest::UnknownModel => body["model"] = json!(format!("{}-does-not-exist", self.model)),
            InvalidRequest::MalformedJson => {
                let text = body.to_string();
                body = Value::String(format!("{}, \"messages\": [", &text[..text.len() - 1]));
                raw = true;
            }
            InvalidRequest::BadParameter => body["max_tokens"] = json!(-5),
            InvalidRequest::EmptyMessages => body["messages"] = json!([]),
            InvalidRequest::OverLimit { context } => body["max_tokens"] = json!(context + 1),
        }
        let recorded = RecordedRequest {
            method: "POST".into(),
            url: format!("{}/chat/completions", self.base_url),
            body: Some(body),
            raw,
        };
        Box::pin(self.send(credential, recorded, None))
    }
}

/// Reads a stream to its end, or until `cancel_after` frames carried content; then
/// the caller drops the response, which closes the connection.
async fn read_stream(
    response: &mut reqwest::Response,
    ex: &mut Exchange,
    ms: &impl Fn() -> f64,
    cancel_after: Option<u32>,
) {
    let mut parser = SseParser::default();
    let mut content_frames = 0;
    loop {
        if cancel_after.is_some_and(|n| content_frames >= n) {
            ex.cancelled = true;
            return;
        }
        let chunk = match response.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                ex.transport_error = Some(transport_error(&e));
                break;
            }
        };
        for frame in parser.push(&chunk, ms()) {
            if frame.data != "[DONE]" {
                if let Ok(v) = serde_json::from_str::<Value>(&frame.data) {
                    let before = ex.content.len();
                    read_chunk(&v, ex);
                    if ex.content.len() > before {
                        content_frames += 1;
                        ex.timings.first_token_ms.get_or_insert(frame.at_ms);
                    }
                }
            }
            ex.frames.push(frame);
        }
    }
    parser.finish();
}

/// Reads a non-streaming completion (or error) body.
fn read_completion(v: &Value, ex: &mut Exchange) {
    if let Some(choice) = v["choices"].get(0) {
        if let Some(text) = choice["message"]["content"].as_str() {
            ex.content.push_str(text);
        }
        ex.finish_reason = choice["finish_reason"].as_str().map(str::to_owned);
    }
    // A Responses API object: its text, and its id for later reference.
    if v["object"] == "response" {
        for item in v["output"].as_array().into_iter().flatten() {
            for part in item["content"].as_array().into_iter().flatten() {
                if let Some(text) = part["text"].as_str() {
                    ex.content.push_str(text);
                }
            }
        }
        ex.object_id = v["id"].as_str().map(str::to_owned);
    }
    read_usage(v, ex);
    read_error(v, ex);
}

/// Reads one `chat.completion.chunk` (or an error frame).
fn read_chunk(v: &Value, ex: &mut Exchange) {
    if let Some(choice) = v["choices"].get(0) {
        if let Some(text) = choice["delta"]["content"].as_str() {
            ex.content.push_str(text);
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            ex.finish_reason = Some(reason.to_owned());
        }
    }
    read_usage(v, ex);
    read_error(v, ex);
}

fn read_usage(v: &Value, ex: &mut Exchange) {
    let u = &v["usage"];
    let prompt = u["prompt_tokens"].as_u64().or(u["input_tokens"].as_u64());
    let completion = u["completion_tokens"].as_u64().or(u["output_tokens"].as_u64());
    let cached = u["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .or(u["cache_read_input_tokens"].as_u64())
        .or(v["timings"]["cache_n"].as_u64());
    if let (Some(p), Some(c)) = (prompt, completion) {
        ex.usage = Some(Usage {
            prompt_tokens: p,
            completion_tokens: c,
            cached_tokens: cached,
        });
    }
}

fn read_error(v: &Value, ex: &mut Exchange) {
    let e = &v["error"];
    let message = match e {
        Value::String(s) => Some(s.clone()),
        Value::Object(_) => Some(e["message"].as_str().unwrap_or_default().to_owned()),
        _ => None,
    };
    if let Some(message) = message {
        let field = |k: &str| match &e[k] {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        };
        ex.api_error = Some(ApiError {
            kind: field("type"),
            code: field("code"),
            message,
        });
    }
}

fn transport_error(e: &reqwest::Error) -> TransportError {
    let kind = if e.is_timeout() {
        TransportErrorKind::Timeout
    } else if e.is_connect() {
        TransportErrorKind::Connect
    } else if e.is_body() || e.is_decode() {
        TransportErrorKind::Body
    } else {
        TransportErrorKind::Request
    };
    // reqwest's Display names the URL, never a header; base URLs cannot hold
    // credentials (the profile refuses them).
    let mut message = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        message.push_str(": ");
        message.push_str(&s.to_string());
        source = s.source();
    }
    TransportError { kind, message }
}
