//! [`WorkersAi`]: Cloudflare Workers AI's native REST API
//! (`POST {base_url}/run/{model}`, where `base_url` is
//! `https://api.cloudflare.com/client/v4/accounts/{account_id}/ai`).
//!
//! The token travels as a bearer token. The request body is `messages` and
//! `max_tokens` (the model is in the path). Every answer that is not a stream comes in
//! Cloudflare's envelope: `{"result": ..., "success": bool, "errors": [{"code",
//! "message"}], "messages": []}`; a text generation's `result` is `{"response",
//! "usage": {"prompt_tokens", "completion_tokens", "total_tokens"}}`. A stream is
//! server-sent events whose data is `{"response": "<text>"}`, the last of them with
//! `usage`, then `data: [DONE]`.
//!
//! The native API reports no finish reason: exchanges have none, and the adapter says
//! so ([`Provider::reports_finish_reason`]) so that no probe counts its absence as a
//! fault. It stores no responses. The credential check lists one model
//! (`GET {base_url}/models/search`).

use super::http::{Auth, Dialect, Http};
use super::{
    ApiError, BoxFuture, ChatRequest, Exchange, InvalidRequest, Limits, Provider, RecordedRequest, SseFrame,
    TransportError, Usage,
};
use crate::credential::Secret;
use serde_json::{Value, json};

/// A Workers AI REST API client for one account and model.
#[derive(Clone, Debug)]
pub struct WorkersAi {
    http: Http,
    base_url: String,
    model: String,
}

struct Envelope;

impl WorkersAi {
    /// A client for `base_url` (the account's `.../ai`) and `model` (`@cf/...`).
    pub fn new(base_url: &str, model: &str, limits: impl Into<Limits>) -> Result<Self, TransportError> {
        Ok(WorkersAi {
            http: Http::new(base_url, limits.into(), Auth::Bearer, Vec::new())?,
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

    fn body(request: &ChatRequest) -> Value {
        json!({
            "messages": request.messages,
            "max_tokens": request.max_tokens,
            "temperature": 0,
            "stream": request.stream,
        })
    }

    fn run(&self, model: &str, body: Value, raw: bool) -> RecordedRequest {
        RecordedRequest {
            method: "POST".into(),
            url: format!("{}/run/{model}", self.base_url),
            body: Some(body),
            raw,
            headers: Default::default(),
        }
    }
}

impl Provider for WorkersAi {
    fn chat<'a>(&'a self, credential: &'a Secret, request: &'a ChatRequest) -> BoxFuture<'a, Exchange> {
        let recorded = RecordedRequest {
            headers: self.http.chosen_headers(request),
            ..self.run(&self.model, Self::body(request), false)
        };
        Box::pin(self.http.send(credential, recorded, request.cancel_after, &Envelope))
    }

    fn list_models<'a>(&'a self, credential: &'a Secret) -> BoxFuture<'a, Exchange> {
        let recorded = RecordedRequest {
            method: "GET".into(),
            url: format!("{}/models/search?per_page=1", self.base_url),
            body: None,
            raw: false,
            headers: Default::default(),
        };
        Box::pin(self.http.send(credential, recorded, None, &Envelope))
    }

    fn store<'a>(&'a self, _: &'a Secret, _: &'a str, _: Option<&'a str>) -> BoxFuture<'a, Exchange> {
        Box::pin(std::future::ready(super::not_offered(
            "Workers AI REST API",
            "stored responses",
        )))
    }

    fn fetch_stored<'a>(&'a self, _: &'a Secret, _: &'a str) -> BoxFuture<'a, Exchange> {
        Box::pin(std::future::ready(super::not_offered(
            "Workers AI REST API",
            "stored responses",
        )))
    }

    fn invalid<'a>(&'a self, credential: &'a Secret, kind: InvalidRequest, stream: bool) -> BoxFuture<'a, Exchange> {
        let ask = Self::body(&ChatRequest {
            stream,
            ..ChatRequest::user("Say hello.", 16)
        });
        let recorded = match kind {
            // The model is named in the path, not the body.
            InvalidRequest::UnknownModel => self.run(&format!("{}-does-not-exist", self.model), ask, false),
            _ => {
                let (body, raw) = kind.spoil(ask, &self.model);
                self.run(&self.model, body, raw)
            }
        };
        Box::pin(self.http.send(credential, recorded, None, &Envelope))
    }

    fn endpoint<'a>(
        &'a self,
        credential: Option<&'a Secret>,
        method: &'a str,
        path: &'a str,
        body: Option<&'a serde_json::Value>,
    ) -> BoxFuture<'a, Exchange> {
        Box::pin(self.http.endpoint(credential, method, path, body, &Envelope))
    }

    fn stream_problems(&self, ex: &Exchange) -> Vec<String> {
        crate::judge::stream::problems(crate::vendor::AdapterKind::WorkersAi, ex)
    }

    fn reports_finish_reason(&self) -> bool {
        crate::judge::stream::reports_finish_reason(crate::vendor::AdapterKind::WorkersAi)
    }
}

impl Dialect for Envelope {
    fn read_body(&self, v: &Value, ex: &mut Exchange) {
        let result = &v["result"];
        if let Some(text) = result["response"].as_str() {
            ex.content.push_str(text);
        }
        read_usage(&result["usage"], ex);
        if v["success"] == false || v["errors"].as_array().is_some_and(|e| !e.is_empty()) {
            read_errors(v, ex);
        }
    }

    fn read_event(&self, _frame: &SseFrame, v: &Value, ex: &mut Exchange) {
        if let Some(text) = v["response"].as_str() {
            ex.content.push_str(text);
        }
        read_usage(&v["usage"], ex);
        if v["errors"].as_array().is_some_and(|e| !e.is_empty()) {
            read_errors(v, ex);
        }
    }
}

fn read_usage(u: &Value, ex: &mut Exchange) {
    if u.is_object() {
        ex.usage = Some(Usage {
            prompt_tokens: u["prompt_tokens"].as_u64().unwrap_or_default(),
            completion_tokens: u["completion_tokens"].as_u64().unwrap_or_default(),
            cached_tokens: None,
        });
    }
}

/// The envelope's first error: its numeric code and message.
fn read_errors(v: &Value, ex: &mut Exchange) {
    let first = &v["errors"][0];
    ex.api_error = Some(ApiError {
        kind: None,
        code: first["code"].as_u64().map(|c| c.to_string()),
        message: first["message"].as_str().unwrap_or("success: false").to_owned(),
    });
}
