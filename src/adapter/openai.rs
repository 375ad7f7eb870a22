//! [`OpenAiChat`]: the OpenAI-compatible chat completions dialect.

use super::http::{Auth, Dialect, Http};
use super::{
    ApiError, BoxFuture, ChatRequest, Exchange, InvalidRequest, Limits, Provider, RecordedRequest, SseFrame,
    TransportError, Usage,
};
use crate::credential::Secret;
use serde_json::{Value, json};

/// An OpenAI-compatible chat completions client.
#[derive(Clone, Debug)]
pub struct OpenAiChat {
    http: Http,
    base_url: String,
    model: String,
    /// Where chat completions are asked for, and the models listed.
    chat_url: String,
    models_url: String,
    /// The dialect whose stream rules apply (`openai-chat`, or Azure's).
    api: crate::vendor::AdapterKind,
}

/// How OpenAI-compatible APIs answer.
struct OpenAi;

impl Dialect for OpenAi {
    fn read_body(&self, v: &Value, ex: &mut Exchange) {
        read_completion(v, ex);
    }

    fn read_event(&self, _frame: &SseFrame, v: &Value, ex: &mut Exchange) {
        read_chunk(v, ex);
    }
}

impl OpenAiChat {
    /// A client for `base_url` (up to the version segment) and `model`.
    pub fn new(base_url: &str, model: &str, limits: impl Into<Limits>) -> Result<Self, TransportError> {
        let base = base_url.trim_end_matches('/');
        Ok(OpenAiChat {
            http: Http::new(base_url, limits.into(), Auth::Bearer, Vec::new())?,
            base_url: base.to_owned(),
            model: model.to_owned(),
            chat_url: format!("{base}/chat/completions"),
            models_url: format!("{base}/models"),
            api: crate::vendor::AdapterKind::OpenaiChat,
        })
    }

    /// Azure OpenAI: the same API at the resource `base_url`, in the deployment URL form
    /// (`[azure] deployment` and `api_version`) or the `/openai/v1/` form, the key in
    /// the `api-key` header or an Entra token as a bearer token.
    pub fn azure(
        base_url: &str,
        model: &str,
        azure: Option<&crate::vendor::AzureSpec>,
        limits: impl Into<Limits>,
    ) -> Result<Self, TransportError> {
        use crate::vendor::AzureAuth;
        let base = base_url.trim_end_matches('/');
        let (chat_url, models_url) = match azure.and_then(|a| a.deployment.as_deref().zip(a.api_version.as_deref())) {
            Some((deployment, version)) => (
                format!("{base}/openai/deployments/{deployment}/chat/completions?api-version={version}"),
                format!("{base}/openai/models?api-version={version}"),
            ),
            None => (
                format!("{base}/openai/v1/chat/completions"),
                format!("{base}/openai/v1/models"),
            ),
        };
        let auth = match azure.map(|a| a.auth).unwrap_or_default() {
            AzureAuth::ApiKey => Auth::Header("api-key"),
            AzureAuth::Entra => Auth::Bearer,
        };
        Ok(OpenAiChat {
            http: Http::new(base_url, limits.into(), auth, Vec::new())?,
            base_url: format!("{base}/openai/v1"),
            model: model.to_owned(),
            chat_url,
            models_url,
            api: crate::vendor::AdapterKind::AzureOpenai,
        })
    }

    /// Takes from the profile what every request sends (an affinity header, the
    /// `User-Agent`).
    pub fn with_profile(mut self, profile: &crate::vendor::VendorProfile) -> Self {
        self.http.configure(profile);
        self
    }

    async fn send(&self, credential: &Secret, recorded: RecordedRequest, cancel_after: Option<u32>) -> Exchange {
        self.http.send(credential, recorded, cancel_after, &OpenAi).await
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
        if let Some(sampling) = request.sampling {
            body["temperature"] = json!(sampling.temperature);
            body["top_p"] = json!(sampling.top_p);
            body["seed"] = json!(sampling.seed);
        }
        if let Some(salt) = &request.cache_salt {
            body["cache_salt"] = json!(salt);
        }
        if let Some(user) = &request.user {
            body["user"] = json!(user);
        }
        body
    }
}

impl Provider for OpenAiChat {
    fn chat<'a>(&'a self, credential: &'a Secret, request: &'a ChatRequest) -> BoxFuture<'a, Exchange> {
        let recorded = RecordedRequest {
            method: "POST".into(),
            url: self.chat_url.clone(),
            body: Some(self.body(request)),
            raw: false,
            headers: self.http.chosen_headers(request),
        };
        Box::pin(self.send(credential, recorded, request.cancel_after))
    }

    fn list_models<'a>(&'a self, credential: &'a Secret) -> BoxFuture<'a, Exchange> {
        let recorded = RecordedRequest {
            method: "GET".into(),
            url: self.models_url.clone(),
            body: None,
            raw: false,
            headers: Default::default(),
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
            headers: Default::default(),
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
            url: format!("{}/responses/{}", self.base_url, super::path_segment(&id)),
            body: None,
            raw: false,
            headers: Default::default(),
        };
        Box::pin(self.send(credential, recorded, None))
    }

    fn invalid<'a>(&'a self, credential: &'a Secret, kind: InvalidRequest, stream: bool) -> BoxFuture<'a, Exchange> {
        let ask = ChatRequest {
            stream,
            ..ChatRequest::user("Say hello.", 16)
        };
        let (body, raw) = kind.spoil(self.body(&ask), &self.model);
        let recorded = RecordedRequest {
            method: "POST".into(),
            url: self.chat_url.clone(),
            body: Some(body),
            raw,
            headers: Default::default(),
        };
        Box::pin(self.send(credential, recorded, None))
    }

    fn endpoint<'a>(
        &'a self,
        credential: Option<&'a Secret>,
        method: &'a str,
        path: &'a str,
        body: Option<&'a serde_json::Value>,
    ) -> BoxFuture<'a, Exchange> {
        Box::pin(self.http.endpoint(credential, method, path, body, &OpenAi))
    }

    fn stream_problems(&self, ex: &Exchange) -> Vec<String> {
        crate::judge::stream::problems(self.api, ex)
    }
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
