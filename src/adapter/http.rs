//! [`Http`]: what every HTTP dialect shares: the client, sending one recorded request
//! with a credential, timings, every response header, reading a body or an
//! event stream (cancelled on request), and transport errors as values. A [`Dialect`]
//! reads the JSON of its API into the exchange.
//!
//! Whatever the vendor sends, an exchange ends within the profile's [`Limits`]: the
//! whole exchange within `timeout`, each wait for more of an answer within `idle`, and
//! no more than `max_response_bytes` of a body or stream is read (the rest is left
//! unread and the exchange says so). No content encoding is asked for, so none is
//! decoded: a compressed answer is a protocol error, and a compression bomb stays
//! compressed.
//!
//! Nothing leaves the vendor's origin: every request's URL must have the scheme, host
//! and port of the profile's `base_url`, or it is not sent (and the credential with
//! it), and redirects are never followed. A 3xx answer is recorded as it came, with
//! its `Location`, and the session judges it (see `Session::evidence`).

use super::{Exchange, Limits, RecordedRequest, SseFrame, SseParser, TransportError, TransportErrorKind};
use crate::credential::Secret;
use serde_json::Value;
use std::time::Instant;

/// How an API reads its answers.
pub(super) trait Dialect: Send + Sync {
    /// Reads a complete JSON body (an answer or an error) into `ex`.
    fn read_body(&self, v: &Value, ex: &mut Exchange);
    /// Reads one stream event whose data is `v` into `ex`.
    fn read_event(&self, frame: &SseFrame, v: &Value, ex: &mut Exchange);
}

/// How a credential travels.
#[derive(Clone, Copy, Debug)]
pub(super) enum Auth {
    /// `Authorization: Bearer KEY`.
    Bearer,
    /// A header of its own (`x-api-key`).
    Header(&'static str),
}

/// The HTTP client every dialect shares.
#[derive(Clone, Debug)]
pub(super) struct Http {
    client: reqwest::Client,
    /// The profile's origin (scheme, host, port): the only one requests go to.
    origin: reqwest::Url,
    limits: Limits,
    auth: Auth,
    /// Headers every request carries (an API version).
    fixed: Vec<(&'static str, &'static str)>,
    /// The request header that pins a request to a node (`fleet.affinity_header`).
    affinity_header: Option<String>,
    /// The `User-Agent` every request carries (the profile's `user_agent`); none: no
    /// `User-Agent` at all, never one that names tenantcheck.
    user_agent: Option<reqwest::header::HeaderValue>,
}

impl Http {
    /// A client for requests to `base_url`'s origin alone.
    pub fn new(
        base_url: &str,
        limits: Limits,
        auth: Auth,
        fixed: Vec<(&'static str, &'static str)>,
    ) -> Result<Self, TransportError> {
        crate::install_crypto_provider();
        let origin = reqwest::Url::parse(base_url).map_err(|e| TransportError {
            kind: TransportErrorKind::Request,
            message: format!("the base URL {base_url:?} cannot be read: {e}"),
        })?;
        let client = reqwest::Client::builder()
            .timeout(limits.timeout)
            // A redirect could take the credential, or the judgement, to another host.
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| TransportError {
                kind: TransportErrorKind::Request,
                message: e.to_string(),
            })?;
        Ok(Http {
            client,
            origin,
            limits,
            auth,
            fixed,
            affinity_header: None,
            user_agent: None,
        })
    }

    /// Takes from the profile what every request sends: the affinity header with the
    /// requests that carry an affinity value (the node header needs nothing: every
    /// response header is kept), and the `User-Agent`.
    pub fn configure(&mut self, profile: &crate::vendor::VendorProfile) {
        self.affinity_header = profile
            .fleet
            .as_ref()
            .and_then(|f| f.affinity_header.as_ref())
            .map(|h| h.to_ascii_lowercase());
        self.user_agent = profile
            .user_agent
            .as_deref()
            .and_then(|a| reqwest::header::HeaderValue::from_str(a).ok());
    }

    /// The headers a chat request sends besides the credential: its affinity value
    /// under the profile's affinity header, when both are given.
    pub fn chosen_headers(&self, request: &super::ChatRequest) -> std::collections::BTreeMap<String, String> {
        match (&self.affinity_header, &request.affinity) {
            (Some(name), Some(value)) => [(name.clone(), value.clone())].into(),
            _ => Default::default(),
        }
    }

    /// Sends `recorded` with `credential`; a stream is read until it ends or, with
    /// `cancel_after`, until that many events carried content.
    pub async fn send(
        &self,
        credential: &Secret,
        recorded: RecordedRequest,
        cancel_after: Option<u32>,
        dialect: &dyn Dialect,
    ) -> Exchange {
        self.send_as(Some(credential), recorded, cancel_after, dialect).await
    }

    /// The request `method path` on the origin itself (an engine's or gateway's own
    /// endpoint, such as `/slots`), with `credential` or with none, and `body` (a
    /// `POST`'s; none: an empty object). `path` must start
    /// with `/`; the URL is checked to stay on the origin like any other.
    pub async fn endpoint(
        &self,
        credential: Option<&Secret>,
        method: &str,
        path: &str,
        body: Option<&Value>,
        dialect: &dyn Dialect,
    ) -> Exchange {
        let url = format!("{}{path}", self.origin.origin().ascii_serialization());
        let recorded = RecordedRequest {
            method: method.to_owned(),
            url,
            body: (method != "GET").then(|| body.cloned().unwrap_or_else(|| Value::Object(Default::default()))),
            raw: false,
            headers: Default::default(),
        };
        if !path.starts_with('/') || path.starts_with("//") {
            return Exchange {
                transport_error: Some(TransportError {
                    kind: TransportErrorKind::OffOrigin,
                    message: format!("the endpoint path {path:?} does not start with one `/`; nothing was sent"),
                }),
                request: recorded,
                ..Exchange::default()
            };
        }
        self.send_as(credential, recorded, None, dialect).await
    }

    /// [`Http::send`], with a credential or without one.
    async fn send_as(
        &self,
        credential: Option<&Secret>,
        recorded: RecordedRequest,
        cancel_after: Option<u32>,
        dialect: &dyn Dialect,
    ) -> Exchange {
        let started = Instant::now();
        let ms = || started.elapsed().as_secs_f64() * 1e3;
        let mut ex = Exchange {
            request: recorded,
            ..Exchange::default()
        };
        if let Err(problem) = self.on_origin(&ex.request.url) {
            ex.transport_error = Some(TransportError {
                kind: TransportErrorKind::OffOrigin,
                message: problem,
            });
            return ex;
        }
        let mut builder = match (ex.request.method.as_str(), &ex.request.body) {
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
        builder = match (self.auth, credential) {
            (_, None) => builder,
            (Auth::Bearer, Some(key)) => builder.bearer_auth(key.expose()),
            (Auth::Header(name), Some(key)) => builder.header(name, key.expose()),
        };
        for (name, value) in &ex.request.headers {
            builder = builder.header(name.as_str(), value.as_str());
        }
        for (name, value) in &self.fixed {
            builder = builder.header(*name, *value);
        }
        if let Some(agent) = &self.user_agent {
            builder = builder.header(reqwest::header::USER_AGENT, agent.clone());
        }
        let response = match builder.send().await {
            Ok(r) => r,
            Err(e) => {
                ex.transport_error = Some(transport_error(&e));
                ex.timings.total_ms = ms();
                return ex;
            }
        };
        ex.timings.first_byte_ms = Some(ms());
        ex.status = Some(response.status().as_u16());
        ex.headers = kept_headers(response.headers());
        let content_type = ex.headers.get("content-type").cloned().unwrap_or_default();
        // A stream is read as one when it says it is, and when one was asked for and
        // the answer is a success that is not JSON (a stream with the wrong content
        // type, which the dialect's grammar then names).
        let asked_stream = ex.request.body.as_ref().is_some_and(|b| b["stream"] == true);
        let is_stream = content_type.starts_with("text/event-stream")
            || (asked_stream && ex.is_success() && !content_type.contains("json"));
        let mut body = Body {
            response,
            limits: self.limits,
            read: 0,
        };
        if let Some(encoding) = ex.headers.get("content-encoding").filter(|e| *e != "identity") {
            ex.transport_error = Some(TransportError {
                kind: TransportErrorKind::Protocol,
                message: format!(
                    "the answer is {encoding}-encoded though no encoding was asked for; it was not decoded or read"
                ),
            });
        } else if is_stream {
            read_stream(&mut body, &mut ex, &ms, cancel_after, dialect).await;
        } else {
            let mut bytes = Vec::new();
            loop {
                match body.chunk().await {
                    Ok(Some(chunk)) => bytes.extend_from_slice(&chunk),
                    Ok(None) => break,
                    Err(e) => {
                        ex.transport_error = Some(e);
                        break;
                    }
                }
            }
            let text = String::from_utf8_lossy(&bytes).into_owned();
            match serde_json::from_str::<Value>(&text) {
                Ok(v) => dialect.read_body(&v, &mut ex),
                Err(e) if ex.is_success() => {
                    ex.transport_error = Some(TransportError {
                        kind: TransportErrorKind::Protocol,
                        message: format!("the answer's body is not JSON: {e}"),
                    })
                }
                Err(_) => {}
            }
            ex.body = Some(text);
        }
        ex.timings.total_ms = ms();
        ex
    }
}

impl Http {
    /// Whether `url` is on the profile's origin: same scheme, host and port.
    fn on_origin(&self, url: &str) -> Result<(), String> {
        let parsed =
            reqwest::Url::parse(url).map_err(|e| format!("the URL {url:?} cannot be read: {e}; nothing was sent"))?;
        let o = &self.origin;
        let same = parsed.scheme() == o.scheme()
            && parsed.host_str() == o.host_str()
            && parsed.port_or_known_default() == o.port_or_known_default()
            && parsed.username().is_empty()
            && parsed.password().is_none();
        if same {
            Ok(())
        } else {
            Err(format!(
                "{url} is not on the vendor's origin {}; nothing was sent",
                o.origin().ascii_serialization()
            ))
        }
    }
}

/// Every response header, by lowercase name, a name sent more than once with its
/// values joined ([`tenantcheck_evidence::exchange::HEADER_JOIN`]): each is an output of
/// the vendor's, and scanned as one. The transcript writer redacts credentials in them
/// as everywhere.
fn kept_headers(headers: &reqwest::header::HeaderMap) -> std::collections::BTreeMap<String, String> {
    let mut kept = std::collections::BTreeMap::<String, String>::new();
    for (name, value) in headers {
        let value = String::from_utf8_lossy(value.as_bytes());
        kept.entry(name.as_str().to_owned())
            .and_modify(|v| {
                v.push_str(tenantcheck_evidence::exchange::HEADER_JOIN);
                v.push_str(&value);
            })
            .or_insert_with(|| value.into_owned());
    }
    kept
}

/// An answer's body, read within the limits.
struct Body {
    response: reqwest::Response,
    limits: Limits,
    read: u64,
}

impl Body {
    /// The next chunk; `Ok(None)` at the end. A wait longer than `idle` and a body
    /// past `max_response_bytes` end the reading with an error.
    async fn chunk(&mut self) -> Result<Option<bytes::Bytes>, TransportError> {
        let next = tokio::time::timeout(self.limits.idle, self.response.chunk()).await;
        let chunk = match next {
            Err(_) => {
                return Err(TransportError {
                    kind: TransportErrorKind::Timeout,
                    message: format!(
                        "the answer stalled: no data for {} s (the profile's idle_timeout_secs) after {} bytes",
                        self.limits.idle.as_secs_f64(),
                        self.read
                    ),
                });
            }
            Ok(Err(e)) => return Err(transport_error(&e)),
            Ok(Ok(chunk)) => chunk,
        };
        if let Some(c) = &chunk {
            self.read += c.len() as u64;
            if self.read > self.limits.max_response_bytes {
                return Err(TransportError {
                    kind: TransportErrorKind::TooLarge,
                    message: format!(
                        "the answer is over {} bytes (the profile's max_response_bytes); the rest was not read",
                        self.limits.max_response_bytes
                    ),
                });
            }
        }
        Ok(chunk)
    }
}

/// Reads a stream to its end, or until `cancel_after` events carried content; then
/// the caller drops the response, which closes the connection.
async fn read_stream(
    body: &mut Body,
    ex: &mut Exchange,
    ms: &impl Fn() -> f64,
    cancel_after: Option<u32>,
    dialect: &dyn Dialect,
) {
    let mut parser = SseParser::default();
    let mut content_events = 0;
    loop {
        if cancel_after.is_some_and(|n| content_events >= n) {
            ex.cancelled = true;
            return;
        }
        let chunk = match body.chunk().await {
            Ok(Some(chunk)) => chunk,
            Ok(None) => break,
            Err(e) => {
                ex.transport_error = Some(e);
                break;
            }
        };
        for frame in parser.push(&chunk, ms()) {
            if frame.data != "[DONE]" {
                if let Ok(v) = serde_json::from_str::<Value>(&frame.data) {
                    let before = ex.content.len();
                    dialect.read_event(&frame, &v, ex);
                    if ex.content.len() > before {
                        content_events += 1;
                        ex.timings.first_token_ms.get_or_insert(frame.at_ms);
                    }
                }
            }
            ex.frames.push(frame);
        }
    }
    parser.finish();
    ex.stream_extra = parser.take_extra();
}

pub(super) fn transport_error(e: &reqwest::Error) -> TransportError {
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
