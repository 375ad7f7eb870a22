//! [`Provider`]: sends one request as one tenant and returns an [`Exchange`].
//!
//! An exchange is a value whatever happened: a 4xx or 5xx answer is an exchange with
//! that status, a refused connection or a timeout is an exchange with a
//! [`TransportError`]. Adapters never panic on vendor behaviour and never put a
//! credential into an exchange: the request is recorded without its headers.
//!
//! Implementations: [`OpenAiChat`] (OpenAI-compatible chat completions, streaming and
//! not) and [`AnthropicMessages`] (the Anthropic Messages API), both on one shared HTTP
//! client that records what every dialect records alike; [`CommandAdapter`] (any API,
//! through a program speaking JSON lines on stdio); [`WorkersAi`] (Cloudflare Workers
//! AI's native REST API and its result/errors envelope).

mod anthropic;
mod command;
mod http;
mod openai;
mod sse;
mod workers_ai;

pub use anthropic::AnthropicMessages;
pub use command::{CommandAdapter, CommandDone, CommandOp, CommandReply, CommandRequest};
pub use openai::OpenAiChat;
pub use sse::{SseFrame, SseParser};
pub use workers_ai::WorkersAi;

use crate::credential::Secret;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

/// A boxed future, so that `Provider` can be used as a trait object.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A vendor API, spoken as one tenant per call.
pub trait Provider: Send + Sync {
    /// Sends one chat completion request with `credential`.
    fn chat<'a>(&'a self, credential: &'a Secret, request: &'a ChatRequest) -> BoxFuture<'a, Exchange>;

    /// Lists the models visible to `credential`: a cheap request that shows whether
    /// the credential is accepted.
    fn list_models<'a>(&'a self, credential: &'a Secret) -> BoxFuture<'a, Exchange>;

    /// Creates a stored object (a stored response) holding `input`, optionally
    /// continuing the stored response `previous`; the new object's id is in the
    /// exchange's `object_id`.
    fn store<'a>(
        &'a self,
        credential: &'a Secret,
        input: &'a str,
        previous: Option<&'a str>,
    ) -> BoxFuture<'a, Exchange>;

    /// Fetches the stored object `id`.
    fn fetch_stored<'a>(&'a self, credential: &'a Secret, id: &'a str) -> BoxFuture<'a, Exchange>;

    /// Sends a request that is wrong in the way `kind` says, in this API's dialect;
    /// the vendor must refuse it.
    fn invalid<'a>(&'a self, credential: &'a Secret, kind: InvalidRequest, stream: bool) -> BoxFuture<'a, Exchange>;

    /// How a complete, successful stream breaks this API's event grammar (its terminal
    /// event, one id, JSON data, usage); empty when it keeps it.
    fn stream_problems(&self, ex: &Exchange) -> Vec<String>;

    /// Whether this API says why an answer ended (`finish_reason`); where it does, an
    /// answer without one is a fault.
    fn reports_finish_reason(&self) -> bool {
        true
    }
}

/// The exchange of a request `api` cannot make because it has no `what` (stored
/// responses, for most): nothing is sent, and the exchange says so.
pub(super) fn not_offered(api: &str, what: &str) -> Exchange {
    Exchange {
        transport_error: Some(TransportError {
            kind: TransportErrorKind::Request,
            message: format!("the {api} has no {what}; nothing was sent"),
        }),
        ..Exchange::default()
    }
}

/// `text` (an id the vendor chose) as one URL path segment: every byte but letters,
/// digits, `-`, `.`, `_` and `~` percent-encoded, so that it cannot add segments, a
/// query, or `..`.
pub(super) fn path_segment(text: &str) -> String {
    // `.` and `..` alone would be dot segments, which URL parsing resolves.
    let dots_only = text.bytes().all(|b| b == b'.');
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b"-_~".contains(&b) || (b == b'.' && !dots_only) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A kind of request a vendor must refuse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum InvalidRequest {
    /// A model that does not exist.
    UnknownModel,
    /// A body that is not JSON.
    MalformedJson,
    /// A parameter out of its range (a negative `max_tokens`).
    BadParameter,
    /// No messages at all.
    EmptyMessages,
    /// A completion budget larger than the context window (`max_tokens` = context + 1).
    OverLimit {
        /// The advertised context window.
        context: u64,
    },
}

impl InvalidRequest {
    /// A short name for messages.
    pub fn name(self) -> &'static str {
        match self {
            InvalidRequest::UnknownModel => "unknown model",
            InvalidRequest::MalformedJson => "malformed JSON",
            InvalidRequest::BadParameter => "bad parameter",
            InvalidRequest::EmptyMessages => "empty messages",
            InvalidRequest::OverLimit { .. } => "over-limit max_tokens",
        }
    }
}

impl InvalidRequest {
    /// `body`, a valid request of a JSON dialect with `model`, `max_tokens` and
    /// `messages` fields, made wrong in this way; with `true` when it is to be sent as
    /// the raw string it became.
    pub(crate) fn spoil(self, mut body: serde_json::Value, model: &str) -> (serde_json::Value, bool) {
        use serde_json::{Value, json};
        match self {
            InvalidRequest::UnknownModel => body["model"] = json!(format!("{model}-does-not-exist")),
            InvalidRequest::MalformedJson => {
                let text = body.to_string();
                return (
                    Value::String(format!("{}, \"messages\": [", &text[..text.len() - 1])),
                    true,
                );
            }
            InvalidRequest::BadParameter => body["max_tokens"] = json!(-5),
            InvalidRequest::EmptyMessages => body["messages"] = json!([]),
            InvalidRequest::OverLimit { context } => body["max_tokens"] = json!(context + 1),
        }
        (body, false)
    }
}

/// One chat completion request, independent of the API dialect.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ChatRequest {
    /// The conversation.
    pub messages: Vec<Message>,
    /// The most tokens to generate.
    pub max_tokens: u32,
    /// Whether to ask for a server-sent event stream.
    pub stream: bool,
    /// Streams only: the client stops reading after this many frames carrying content
    /// and closes the connection (a user who cancels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancel_after: Option<u32>,
    /// A per-request prefix-cache isolation key (vLLM's `cache_salt`), for vendors
    /// whose profile says they honour one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<String>,
}

impl ChatRequest {
    /// One user message, not streamed.
    pub fn user(content: impl Into<String>, max_tokens: u32) -> Self {
        ChatRequest {
            messages: vec![Message::user(content)],
            max_tokens,
            ..ChatRequest::default()
        }
    }
}

/// One message of a conversation.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Message {
    /// `system`, `user` or `assistant`.
    pub role: String,
    /// The text.
    pub content: String,
}

impl Message {
    /// A `user` message.
    pub fn user(content: impl Into<String>) -> Self {
        Message {
            role: "user".into(),
            content: content.into(),
        }
    }
}

/// Everything observed about one request and its answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Exchange {
    /// The request as sent, without headers (no credential is ever recorded).
    pub request: RecordedRequest,
    /// The HTTP status, when an answer arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Response headers worth keeping (content type, request ids, rate limits).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The raw response body of a non-streaming answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The frames of a streaming answer, in arrival order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<SseFrame>,
    /// The assistant text, assembled from the body or the frames.
    #[serde(default)]
    pub content: String,
    /// The finish reason the vendor gave, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Token usage as the vendor reported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// An error object in the body or in a stream frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_error: Option<ApiError>,
    /// Set when no complete answer arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transport_error: Option<TransportError>,
    /// The id of a stored object the answer created or returned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub object_id: Option<String>,
    /// The client stopped reading the stream on purpose (the request's
    /// `cancel_after`) and closed the connection.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cancelled: bool,
    /// How long it took.
    pub timings: Timings,
}

impl Exchange {
    /// Whether the vendor answered 2xx.
    pub fn is_success(&self) -> bool {
        matches!(self.status, Some(200..=299)) && self.transport_error.is_none()
    }

    /// Every piece of text the vendor sent back: the assembled content, the raw body
    /// and each frame's data. This is what scanners read, so that a leak hidden in an
    /// error message or an unusual field is seen too.
    pub fn returned_text(&self) -> String {
        let mut text = self.content.clone();
        if let Some(body) = &self.body {
            text.push('\n');
            text.push_str(body);
        }
        for f in &self.frames {
            text.push('\n');
            text.push_str(&f.data);
        }
        if let Some(e) = &self.api_error {
            text.push('\n');
            text.push_str(&e.message);
        }
        text
    }
}

/// The request as recorded in the transcript.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecordedRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// The full URL.
    pub url: String,
    /// The JSON body, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
    /// Whether `body` is a string sent as is (a deliberately malformed body).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub raw: bool,
}

/// Token usage as reported by the vendor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Usage {
    /// Tokens in the prompt.
    pub prompt_tokens: u64,
    /// Tokens generated.
    pub completion_tokens: u64,
    /// Prompt tokens the vendor says it served from a prompt cache
    /// (`prompt_tokens_details.cached_tokens`; llama.cpp's `timings.cache_n`), when it
    /// says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

/// An error object sent by the vendor, in a body or a stream frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ApiError {
    /// The error's `type`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// The error's `code`, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The error's message.
    pub message: String,
}

/// A request that got no complete answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema, thiserror::Error)]
#[error("{kind:?}: {message}")]
pub struct TransportError {
    /// What failed.
    pub kind: TransportErrorKind,
    /// The client library's description.
    pub message: String,
}

/// What failed in transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum TransportErrorKind {
    /// No connection could be made.
    Connect,
    /// The request or the answer took longer than the profile allows.
    Timeout,
    /// The request could not be sent.
    Request,
    /// The answer broke off or could not be read.
    Body,
    /// The answer was larger than the profile's `max_response_bytes`; the rest was not
    /// read.
    TooLarge,
    /// The answer broke HTTP or the API's format: a body that is not JSON, a content
    /// encoding that was not asked for.
    Protocol,
    /// The run was interrupted (SIGINT, SIGTERM) while the request was in flight; the
    /// connection was closed without waiting for the answer.
    Interrupted,
    /// The request's URL was not on the origin of the profile's `base_url` (an object
    /// id that named another host, say); it was not sent.
    OffOrigin,
}

/// How much of an answer the harness reads, and how long it waits for it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// The longest a whole exchange may take.
    pub timeout: std::time::Duration,
    /// The longest wait for the next bytes of an answer once its headers arrived.
    pub idle: std::time::Duration,
    /// The most bytes of one answer's body (a stream's too) that are read.
    pub max_response_bytes: u64,
}

impl Limits {
    /// The default most bytes of one answer: 32 MiB.
    pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = 32 << 20;
}

/// `timeout` for the whole exchange and for each wait, and the default size cap.
impl From<std::time::Duration> for Limits {
    fn from(timeout: std::time::Duration) -> Self {
        Limits {
            timeout,
            idle: timeout,
            max_response_bytes: Limits::DEFAULT_MAX_RESPONSE_BYTES,
        }
    }
}

/// How long an exchange took, in milliseconds from just before sending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Timings {
    /// Until the response headers arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_byte_ms: Option<f64>,
    /// Until the first frame carrying content arrived (streaming only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_token_ms: Option<f64>,
    /// Until the answer was complete (or failed).
    pub total_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::path_segment;

    #[test]
    fn an_id_stays_one_path_segment() {
        assert_eq!(path_segment("resp_abc-1.2"), "resp_abc-1.2");
        assert_eq!(path_segment(".."), "%2E%2E");
        assert_eq!(path_segment("x/../../y?z#w"), "x%2F..%2F..%2Fy%3Fz%23w");
        assert_eq!(path_segment("@127.0.0.2:80"), "%40127.0.0.2%3A80");
    }
}
