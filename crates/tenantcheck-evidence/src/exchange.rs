//! What one request and its answer were: the [`Exchange`] every adapter returns and
//! the transcript records.
//!
//! An exchange is a value whatever happened: a 4xx or 5xx answer is an exchange with
//! that status, a refused connection or a timeout is an exchange with a
//! [`TransportError`]. It never holds a credential: the request is recorded without its
//! headers.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// What joins the values of a response header sent more than once.
pub const HEADER_JOIN: &str = "\n";

/// What the transcript holds in place of a credential of the run (a key, in any form
/// the redactor knows, or its SHA-256) wherever one came back.
pub const REDACTED: &str = "[REDACTED]";

/// Everything observed about one request and its answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct Exchange {
    /// The request as sent, without headers (no credential is ever recorded).
    pub request: RecordedRequest,
    /// The HTTP status, when an answer arrived.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// Every response header, by lowercase name (a name sent more than once has its
    /// values joined by [`HEADER_JOIN`]), credentials redacted: headers are outputs of
    /// the vendor like the body, and are scanned as such.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
    /// The raw response body of a non-streaming answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// The frames of a streaming answer, in arrival order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub frames: Vec<SseFrame>,
    /// The lines of a streaming answer that are no frame's `data` or `event`, in
    /// arrival order: comments, `id:` and `retry:` fields, fields the grammar ignores,
    /// and an event the stream left unfinished. A client ignores them; they are the
    /// vendor's output all the same, and are scanned as such.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stream_extra: Vec<String>,
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

    /// Every piece of text the vendor sent back: the assembled content, the raw body,
    /// each frame's event name and data, the stream's other lines, the error message,
    /// and every response header's name and value. This is what scanners read, so that
    /// a leak hidden in an error message, an unusual field or a debugging header is
    /// seen too.
    pub fn returned_text(&self) -> String {
        let mut text = self.content.clone();
        let mut add = |piece: &str| {
            text.push('\n');
            text.push_str(piece);
        };
        if let Some(body) = &self.body {
            add(body);
        }
        for f in &self.frames {
            if let Some(event) = &f.event {
                add(event);
            }
            add(&f.data);
        }
        for line in &self.stream_extra {
            add(line);
        }
        if let Some(e) = &self.api_error {
            add(&e.message);
        }
        for (name, value) in &self.headers {
            add(name);
            add(value);
        }
        text
    }
}

/// The request as recorded in the transcript.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
    /// Headers the suite chose to send besides the credential and the content type
    /// (a session-affinity header that pins a request to one node).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub headers: BTreeMap<String, String>,
}

impl RecordedRequest {
    /// Every string the body carries, in document order, joined by line breaks: the
    /// messages' texts, and a system prompt or anything else wherever an API puts it.
    /// What the request itself sent: an answer's content is judged against it (a
    /// canary read back, content no request accounts for) by the run and by `verify`
    /// alike, so that neither can see text the other does not.
    pub fn text(&self) -> String {
        self.body.as_ref().map(request_text).unwrap_or_default()
    }
}

/// Every string in a request body, in order: the text the request carried, whatever
/// the API's shape. Sentences are read string by string: where one string ends a
/// sentence ends, so that a field's name or a role (`user`) never joins the sentence
/// after it.
pub(crate) fn strings(body: &serde_json::Value) -> Vec<&str> {
    fn walk<'v>(v: &'v serde_json::Value, out: &mut Vec<&'v str>) {
        match v {
            serde_json::Value::String(s) => out.push(s),
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            serde_json::Value::Object(o) => o.values().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(body, &mut out);
    out
}

/// The text a request carried: every string of its body, joined by line breaks.
pub fn request_text(body: &serde_json::Value) -> String {
    strings(body).join("\n")
}

/// Token usage as reported by the vendor.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
#[error("{kind:?}: {message}")]
pub struct TransportError {
    /// What failed.
    pub kind: TransportErrorKind,
    /// The client library's description.
    pub message: String,
}

/// What failed in transport.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

/// How long an exchange took, in milliseconds from just before sending.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
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

impl Timings {
    /// Milliseconds until the vendor began to answer: the first frame carrying content
    /// of a stream, else the response headers, else (neither seen) the whole answer.
    /// This is the clock of the timing tests: it holds the prefill a cache saves, and
    /// none of what the transfer of the body adds (a server writing its headers and
    /// body apart, a delayed acknowledgement holding the second write).
    pub fn first_answer_ms(&self) -> f64 {
        self.first_token_ms.or(self.first_byte_ms).unwrap_or(self.total_ms)
    }
}

/// One server-sent event.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[cfg_attr(feature = "schema", derive(schemars::JsonSchema))]
pub struct SseFrame {
    /// The `event:` field, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// The `data:` lines, joined with newlines.
    pub data: String,
    /// Milliseconds from the start of the request until the frame was complete.
    pub at_ms: f64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn what_a_request_carried_is_every_string_wherever_the_api_puts_it_and_survives_the_transcript() {
        // A pinned pair's opening in a system message (OpenAI), a system prompt beside
        // the messages in blocks (Anthropic), a system instruction in parts (Gemini).
        let bodies = [
            json!({"model": "m", "messages": [
                {"role": "system", "content": "Session 46c7820729682011."},
                {"role": "user", "content": "records"}]}),
            json!({"model": "m", "system": [{"type": "text", "text": "Session 46c7820729682011."}],
                "messages": [{"role": "user", "content": [{"type": "text", "text": "records"}]}]}),
            json!({"systemInstruction": {"parts": [{"text": "Session 46c7820729682011."}]},
                "contents": [{"role": "user", "parts": [{"text": "records"}]}]}),
        ];
        for body in bodies {
            let request = RecordedRequest {
                method: "POST".into(),
                url: "http://127.0.0.1:1/v1/chat/completions".into(),
                body: Some(body),
                ..RecordedRequest::default()
            };
            let text = request.text();
            assert!(text.contains("46c7820729682011") && text.contains("records"), "{text}");
            let read: RecordedRequest = serde_json::from_str(&serde_json::to_string(&request).unwrap()).unwrap();
            assert_eq!(read.text(), text);
        }
        assert_eq!(RecordedRequest::default().text(), "");
    }
}
