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

pub use tenantcheck_evidence::exchange::{
    ApiError, Exchange, RecordedRequest, Timings, TransportError, TransportErrorKind, Usage,
};

use crate::credential::Secret;
use crate::vendor::{AdapterKind, VendorProfile};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
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

    /// Asks `method path` on the vendor's origin (the engine's or gateway's own
    /// endpoints, such as `/slots` or `/metrics`, outside the API's base path) with
    /// `credential`, or with no credential at all, and with `body` as its JSON body
    /// (none: an empty object for a `POST`). Never another origin.
    fn endpoint<'a>(
        &'a self,
        credential: Option<&'a Secret>,
        method: &'a str,
        path: &'a str,
        body: Option<&'a serde_json::Value>,
    ) -> BoxFuture<'a, Exchange> {
        let _ = (credential, method, path, body);
        Box::pin(async { not_offered("adapter", "way to ask an engine's own endpoints") })
    }

    /// How a complete, successful stream breaks this API's event grammar (its terminal
    /// event, one id, JSON data, usage); empty when it keeps it. The rule is
    /// [`crate::judge::stream::problems`], which `verify` applies to the transcript.
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
    /// Sampling parameters other than the default greedy decoding (a request that must
    /// be recognisable by them); `None`: temperature 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<Sampling>,
    /// The end user the request is made for (OpenAI's `user`, Anthropic's
    /// `metadata.user_id`), a value gateways may key their caches and limits on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// A session-affinity value, sent under the profile's `fleet.affinity_header`, so
    /// that requests with one value meet on one node; `None`: the router chooses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<String>,
}

/// Sampling parameters of a request.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sampling {
    /// `temperature`.
    pub temperature: f64,
    /// `top_p`.
    pub top_p: f64,
    /// `seed`, where the API takes one.
    pub seed: u64,
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

/// Builds the adapter that `profile` names.
pub fn provider(profile: &VendorProfile) -> Result<std::sync::Arc<dyn Provider>, TransportError> {
    let timeout = std::time::Duration::from_secs(profile.request_timeout_secs);
    let limits = Limits {
        timeout,
        idle: std::time::Duration::from_secs(profile.idle_timeout_secs.unwrap_or(profile.request_timeout_secs)),
        max_response_bytes: profile.max_response_bytes,
    };
    Ok(match profile.adapter {
        AdapterKind::OpenaiChat => {
            std::sync::Arc::new(OpenAiChat::new(profile.base_url(), &profile.model, limits)?.with_profile(profile))
        }
        AdapterKind::Anthropic => std::sync::Arc::new(
            AnthropicMessages::new(profile.base_url(), &profile.model, limits)?.with_profile(profile),
        ),
        AdapterKind::WorkersAi => {
            std::sync::Arc::new(WorkersAi::new(profile.base_url(), &profile.model, limits)?.with_profile(profile))
        }
        AdapterKind::Command => std::sync::Arc::new(CommandAdapter::new(profile.command.clone(), timeout)),
        AdapterKind::AzureOpenai => std::sync::Arc::new(
            OpenAiChat::azure(profile.base_url(), &profile.model, profile.azure.as_ref(), limits)?
                .with_profile(profile),
        ),
    })
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
    pub const DEFAULT_MAX_RESPONSE_BYTES: u64 = tenantcheck_evidence::profile::DEFAULT_MAX_RESPONSE_BYTES;
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
