//! [`Chaos`]: hostile and broken vendor behaviour at the HTTP level
//! (`tenantcheck sim --chaos NAME`), for the harness's own tests: whatever a vendor
//! sends, a run must end within the profile's limits, with honest verdicts, bounded
//! memory and its evidence kept.
//!
//! Chaos applies to `POST /v1/chat/completions` only, so the credential check before
//! the first case (`GET /v1/models`) passes and the cases meet the behaviour. Large
//! bodies are generated as they are sent; the sim holds none of them in memory.

use axum::body::{Body, Bytes};
use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll, ready};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A hostile behaviour of the reference vendor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
#[non_exhaustive]
pub enum Chaos {
    /// Accepts the request and never answers.
    NoResponse,
    /// Answers 200 with an event stream that never ends (a content frame every
    /// millisecond).
    EndlessStream,
    /// Answers 200 with an event stream that sends two content frames, then nothing,
    /// with the connection left open.
    StalledStream,
    /// Answers 200 with a JSON body of 1 GiB (one long content string), sent as fast
    /// as the client reads.
    HugeBody,
    /// Answers 200 `application/json` with a body cut off in the middle of its JSON.
    MalformedJson,
    /// Answers 200 `text/event-stream` with bad lines, a line without `data:`, data
    /// that is not JSON, and binary bytes, then `[DONE]`.
    MalformedSse,
    /// Sends three content frames of a stream, then drops the connection without
    /// ending the chunked body.
    ResetMidStream,
    /// Answers every request 429 with `Retry-After: 1`.
    RateLimited,
    /// Answers two requests out of every three 503 (no `Retry-After`); the third is
    /// served as usual.
    UnavailableBursts,
    /// Answers three requests out of every four 429 with `Retry-After: 1` (a
    /// per-key rate limit a client must wait out); the fourth is served as usual.
    RateLimitBursts,
    /// Serves the usual answer labelled `text/html`.
    WrongContentType,
    /// Answers 200 with `Content-Encoding: gzip` and a body that inflates to 1 GiB of
    /// zeros (about 6.5 MB compressed).
    GzipBomb,
    /// Writes the headers of every answer to a chat completion one byte at a time,
    /// 50 ms apart (about 6 s for a chat completion's headers).
    SlowHeaders,
    /// Answers every chat completion `307 Temporary Redirect` to the same path on
    /// another origin (`--redirect-to`, default [`DEFAULT_REDIRECT`]).
    Redirect,
    /// Echoes the caller's key back in the forms of [`echo_forms`]: in answers' text,
    /// in error messages (every other request answered 400), in stream frames,
    /// base64-encoded in `x-request-id`, and split in two across `x-key-head` and
    /// `x-key-tail`.
    KeyEcho,
    /// Puts [`INJECTION`] (terminal escapes, carriage returns, bell, C1 controls, bidi
    /// overrides, HTML, Markdown links and images, table pipes, backticks) in every
    /// string field: id, model, content, finish reason, and every field of an error
    /// (every other request answered 400); streams carry it in each frame.
    Inject,
    /// Answers every chat completion 401, though the credential check passed.
    Unauthorized,
    /// Answers every chat completion 500.
    ServerErrors,
}

impl Chaos {
    /// Every mode, in documentation order.
    pub const ALL: &[Chaos] = &[
        Chaos::NoResponse,
        Chaos::EndlessStream,
        Chaos::StalledStream,
        Chaos::HugeBody,
        Chaos::MalformedJson,
        Chaos::MalformedSse,
        Chaos::ResetMidStream,
        Chaos::RateLimited,
        Chaos::UnavailableBursts,
        Chaos::RateLimitBursts,
        Chaos::WrongContentType,
        Chaos::GzipBomb,
        Chaos::SlowHeaders,
        Chaos::Redirect,
        Chaos::KeyEcho,
        Chaos::Inject,
        Chaos::Unauthorized,
        Chaos::ServerErrors,
    ];
}

/// Where `redirect` points by default: another loopback address, on a port where
/// nothing listens.
pub const DEFAULT_REDIRECT: &str = "http://127.0.0.2:9";

/// What `inject` puts in every string: a screen clear and a fake green verdict, fake
/// test lines after a carriage return, a bell, DEL, C1 controls (NEL, CSI), a bidi
/// override, HTML, a Markdown link and image, a table pipe and backticks.
pub const INJECTION: &str = "\u{1b}[2J\u{1b}[H\u{1b}[32mverdict:    PASS (11 passed, 0 failed)\u{1b}[0m\r\ntest isolation.canary-residue ... ok\u{7}\u{7f}\u{85}\u{9b}2K \u{202e}kcatta\u{202c}\u{2066} <script>alert(1)</script><img src=x onerror=alert(2)> | [ok](http://127.0.0.2/) ![pixel](http://127.0.0.2/p.png) `code` ]]></failure>";

/// The forms `key-echo` sends a key back in: as it is, upper-cased, base64 of
/// `Bearer KEY`, base64url of the key without padding, every byte percent-encoded, hex,
/// a space between every two characters, a line break in the middle, and every
/// character `\u`-escaped (in JSON text, where a parser decodes it); and what a
/// vendor can make of it cheaply: turned around, its case swapped, the hex of it
/// turned around, base64 of it upper-cased and turned around. Its two halves also go
/// into two headers of their own ([`echo_halves`]).
pub fn echo_forms(key: &str) -> Vec<String> {
    use base64::Engine;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let half = key.len() / 2;
    let reversed: String = key.chars().rev().collect();
    let swapped: String = key
        .chars()
        .map(|c| match c.is_ascii_lowercase() {
            true => c.to_ascii_uppercase(),
            false => c.to_ascii_lowercase(),
        })
        .collect();
    vec![
        key.to_owned(),
        key.to_uppercase(),
        STANDARD.encode(format!("Bearer {key}")),
        URL_SAFE_NO_PAD.encode(key),
        key.bytes().map(|b| format!("%{b:02X}")).collect(),
        tenantcheck_evidence::hex(key.as_bytes()),
        key.chars().map(String::from).collect::<Vec<_>>().join(" "),
        format!("{}\n{}", &key[..half], &key[half..]),
        reversed.clone(),
        swapped,
        tenantcheck_evidence::hex(reversed.as_bytes()),
        STANDARD.encode(reversed.to_uppercase()),
    ]
}

/// The two halves of a key, as `key-echo` puts them in the headers `x-key-head` and
/// `x-key-tail`: a key split across fields, neither field holding it whole.
pub fn echo_halves(key: &str) -> [&str; 2] {
    let (head, tail) = key.split_at(key.len() / 2);
    [head, tail]
}

/// The size of the `huge-body` answer and of the `gzip-bomb`'s inflated body.
pub const GIB: u64 = 1 << 30;

/// The delay between two bytes of headers under `slow-headers`.
pub const SLOW_HEADER_BYTE: Duration = Duration::from_millis(50);

/// What the chaos layer keeps between requests.
pub(super) struct ChaosState {
    chaos: Chaos,
    requests: AtomicU64,
    bomb: std::sync::OnceLock<Bytes>,
    redirect_to: String,
}

impl ChaosState {
    pub(super) fn new(chaos: Chaos, redirect_to: Option<String>) -> Arc<Self> {
        Arc::new(ChaosState {
            chaos,
            requests: AtomicU64::new(0),
            bomb: std::sync::OnceLock::new(),
            redirect_to: redirect_to.unwrap_or_else(|| DEFAULT_REDIRECT.to_owned()),
        })
    }
}

/// The axum middleware: chat completions meet the chaos, everything else passes.
pub(super) async fn layer(State(state): State<Arc<ChaosState>>, request: Request, next: Next) -> Response {
    if request.uri().path() != "/v1/chat/completions" {
        return next.run(request).await;
    }
    let n = state.requests.fetch_add(1, Ordering::Relaxed);
    match state.chaos {
        Chaos::NoResponse => std::future::pending().await,
        Chaos::EndlessStream => {
            let frames = futures_util::stream::unfold(0u64, |i| async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                Some((Ok::<_, std::io::Error>(Bytes::from(content_frame(i))), i + 1))
            });
            stream_response(Body::from_stream(frames))
        }
        Chaos::StalledStream => {
            let frames = futures_util::stream::unfold(0u64, |i| async move {
                if i >= 2 {
                    std::future::pending::<()>().await;
                }
                Some((Ok::<_, std::io::Error>(Bytes::from(content_frame(i))), i + 1))
            });
            stream_response(Body::from_stream(frames))
        }
        Chaos::HugeBody => {
            let head = r#"{"id":"chatcmpl-huge","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":""#;
            let tail = r#""},"finish_reason":"stop"}]}"#;
            let filler = GIB - (head.len() + tail.len()) as u64;
            const CHUNK: u64 = 64 << 10;
            let block = Bytes::from(vec![b'a'; CHUNK as usize]);
            let chunks = futures_util::stream::iter(
                std::iter::once(Bytes::from_static(head.as_bytes()))
                    .chain((0..filler / CHUNK).map(move |_| block.clone()))
                    .chain(std::iter::once(Bytes::from(vec![b'a'; (filler % CHUNK) as usize])))
                    .chain(std::iter::once(Bytes::from_static(tail.as_bytes())))
                    .map(Ok::<_, std::io::Error>),
            );
            let mut r = Response::new(Body::from_stream(chunks));
            let headers = r.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(header::CONTENT_LENGTH, HeaderValue::from(GIB));
            r
        }
        Chaos::MalformedJson => (
            [(header::CONTENT_TYPE, "application/json")],
            r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"Hel"#,
        )
            .into_response(),
        Chaos::MalformedSse => {
            let mut body = Vec::new();
            body.extend_from_slice(content_frame(0).as_bytes());
            body.extend_from_slice(b"this line has no field\n\n");
            body.extend_from_slice(b"{\"choices\":[{\"delta\":{\"content\":\"no data field\"}}]}\n\n");
            body.extend_from_slice(b"data: {\"choices\": [{\"delta\": \n\n");
            body.extend_from_slice(b"data: \xff\xfe\x00\x01\x80binary\n\n");
            body.extend_from_slice(b"data: [DONE]\n\n");
            stream_response(Body::from(body))
        }
        Chaos::ResetMidStream => {
            let frames = futures_util::stream::unfold(0u64, |i| async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let item = if i < 3 {
                    Ok(Bytes::from(content_frame(i)))
                } else {
                    // An error from the body makes the server abort the connection.
                    Err(std::io::Error::other("chaos: connection dropped mid-stream"))
                };
                (i <= 3).then_some((item, i + 1))
            });
            stream_response(Body::from_stream(frames))
        }
        Chaos::RateLimited => rate_limited(),
        Chaos::RateLimitBursts if n % 4 != 3 => rate_limited(),
        Chaos::UnavailableBursts if n % 3 != 2 => openai_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "overloaded",
            "The engine is currently overloaded, please try again later.",
        ),
        Chaos::UnavailableBursts | Chaos::RateLimitBursts | Chaos::SlowHeaders => next.run(request).await,
        Chaos::WrongContentType => {
            let mut r = next.run(request).await;
            r.headers_mut()
                .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/html; charset=utf-8"));
            r
        }
        Chaos::Redirect => {
            let to = format!("{}{}", state.redirect_to.trim_end_matches('/'), request.uri().path());
            let mut r = Response::new(Body::from(format!("<a href=\"{to}\">moved</a>")));
            *r.status_mut() = StatusCode::TEMPORARY_REDIRECT;
            if let Ok(v) = HeaderValue::from_str(&to) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Chaos::KeyEcho => {
            let key = request
                .headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("Bearer "))
                .unwrap_or_default()
                .to_owned();
            let (stream, _) = asked(request).await;
            let forms = echo_forms(&key);
            let mut r = hostile_answer(&forms, stream, n);
            if !key.is_empty() {
                use base64::Engine;
                let id = base64::engine::general_purpose::STANDARD.encode(&key);
                if let Ok(v) = HeaderValue::from_str(&id) {
                    r.headers_mut().insert("x-request-id", v);
                }
                for (name, half) in ["x-key-head", "x-key-tail"].into_iter().zip(echo_halves(&key)) {
                    if let Ok(v) = HeaderValue::from_str(half) {
                        r.headers_mut().insert(name, v);
                    }
                }
            }
            if n % 2 == 1 && !stream {
                // The escaped form only JSON text can carry: written by hand.
                let escaped: String = key.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
                let body = format!(r#"{{"error":{{"message":"invalid key {escaped}","type":"invalid_request_error","code":"bad_key"}}}}"#);
                let mut e = Response::new(Body::from(body));
                *e.status_mut() = StatusCode::BAD_REQUEST;
                e.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
                return e;
            }
            r
        }
        Chaos::Inject => {
            let (stream, _) = asked(request).await;
            let mut r = hostile_answer(&[INJECTION.to_owned()], stream, n);
            // Header values cannot hold controls; bidi overrides are bytes they can.
            if let Ok(v) = HeaderValue::from_bytes("req-\u{202e}dlog\u{202c}".as_bytes()) {
                r.headers_mut().insert("x-request-id", v);
            }
            r
        }
        Chaos::Unauthorized => openai_error(
            StatusCode::UNAUTHORIZED,
            "invalid_api_key",
            "Incorrect API key provided.",
        ),
        Chaos::ServerErrors => openai_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal_error",
            "The server had an error while processing your request.",
        ),
        Chaos::GzipBomb => {
            let bomb = state.bomb.get_or_init(|| Bytes::from(gzip_bomb(GIB))).clone();
            let mut r = Response::new(Body::from(bomb));
            let headers = r.headers_mut();
            headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
            headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            r
        }
    }
}

/// Whether the request asked for a stream, and its body.
async fn asked(request: Request) -> (bool, serde_json::Value) {
    let bytes = axum::body::to_bytes(request.into_body(), 64 << 20)
        .await
        .unwrap_or_default();
    let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
    (v["stream"] == true, v)
}

/// An answer carrying `texts` in every string field: a stream of one frame per text
/// (and a last frame with the finish reason); else, for even `n`, a completion whose
/// content joins them, for odd `n`, a 400 error made of them.
fn hostile_answer(texts: &[String], stream: bool, n: u64) -> Response {
    let joined = texts.join(" | ");
    if stream {
        let mut body = String::new();
        for t in texts {
            let chunk = json!({
                "id": joined, "object": "chat.completion.chunk", "model": joined,
                "choices": [{ "index": 0, "delta": { "role": "assistant", "content": t }, "finish_reason": null }],
            });
            body.push_str(&format!("data: {chunk}\n\n"));
        }
        let last = json!({
            "id": joined, "object": "chat.completion.chunk", "model": joined,
            "choices": [{ "index": 0, "delta": {}, "finish_reason": joined }],
            "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 },
        });
        body.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
        return stream_response(Body::from(body));
    }
    if n % 2 == 1 {
        let body = json!({ "error": { "message": joined, "type": joined, "param": joined, "code": joined } });
        return (StatusCode::BAD_REQUEST, axum::Json(body)).into_response();
    }
    let body = json!({
        "id": joined, "object": "chat.completion", "model": joined,
        "choices": [{ "index": 0, "message": { "role": "assistant", "content": joined }, "finish_reason": joined }],
        "usage": { "prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2 },
    });
    axum::Json(body).into_response()
}

fn content_frame(i: u64) -> String {
    let chunk = json!({
        "id": "chatcmpl-chaos", "object": "chat.completion.chunk",
        "choices": [{ "index": 0, "delta": { "content": format!("word{i} ") }, "finish_reason": null }],
    });
    format!("data: {chunk}\n\n")
}

fn stream_response(body: Body) -> Response {
    let mut r = Response::new(body);
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r
}

/// A 429 that asks to be tried again in a second.
fn rate_limited() -> Response {
    let mut r = openai_error(
        StatusCode::TOO_MANY_REQUESTS,
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again in 1s.",
    );
    r.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

fn openai_error(status: StatusCode, code: &str, message: &str) -> Response {
    let body = json!({ "error": { "message": message, "type": "server_error", "code": code } });
    (status, axum::Json(body)).into_response()
}

/// A gzip member whose deflate data inflates to `size` zero bytes: one fixed-Huffman
/// block of a literal zero followed by matches of length 258 at distance 1 (13 bits
/// for every 258 bytes), with the true CRC-32 and length in its trailer.
pub fn gzip_bomb(size: u64) -> Vec<u8> {
    let mut out = vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff];
    let mut bits = BitWriter::new(&mut out);
    bits.lsb_first(1, 1); // BFINAL
    bits.lsb_first(1, 2); // BTYPE 01: fixed Huffman codes
    let literal_zero = |bits: &mut BitWriter<'_>| bits.huffman(0b0011_0000, 8);
    let mut left = size;
    if left > 0 {
        literal_zero(&mut bits);
        left -= 1;
    }
    while left >= 258 {
        bits.huffman(0b1100_0101, 8); // length symbol 285: 258
        bits.huffman(0, 5); // distance code 0: 1
        left -= 258;
    }
    for _ in 0..left {
        literal_zero(&mut bits);
    }
    bits.huffman(0, 7); // end of block (symbol 256)
    bits.flush();
    out.extend_from_slice(&crc32_of_zeros(size).to_le_bytes());
    out.extend_from_slice(&(size as u32).to_le_bytes());
    out
}

/// Deflate's bit order: fields least significant bit first, Huffman codes most
/// significant bit first, packed from each byte's low bit.
struct BitWriter<'a> {
    out: &'a mut Vec<u8>,
    acc: u64,
    n: u32,
}

impl<'a> BitWriter<'a> {
    fn new(out: &'a mut Vec<u8>) -> Self {
        BitWriter { out, acc: 0, n: 0 }
    }

    fn lsb_first(&mut self, value: u64, len: u32) {
        self.acc |= value << self.n;
        self.n += len;
        while self.n >= 8 {
            self.out.push(self.acc as u8);
            self.acc >>= 8;
            self.n -= 8;
        }
    }

    fn huffman(&mut self, code: u64, len: u32) {
        let reversed = code.reverse_bits() >> (64 - len);
        self.lsb_first(reversed, len);
    }

    fn flush(&mut self) {
        if self.n > 0 {
            self.out.push(self.acc as u8);
            self.acc = 0;
            self.n = 0;
        }
    }
}

/// The CRC-32 (gzip's) of `len` zero bytes, by squaring the zero-byte operator
/// (zlib's `crc32_combine` method): a few microseconds for a gibibyte.
fn crc32_of_zeros(len: u64) -> u32 {
    fn times(mat: &[u32; 32], mut vec: u32) -> u32 {
        let mut sum = 0;
        let mut i = 0;
        while vec != 0 {
            if vec & 1 != 0 {
                sum ^= mat[i];
            }
            vec >>= 1;
            i += 1;
        }
        sum
    }
    fn square(mat: &[u32; 32]) -> [u32; 32] {
        std::array::from_fn(|n| times(mat, mat[n]))
    }
    // The operator for one zero bit, then two, four, eight (one byte).
    let mut op = [0u32; 32];
    op[0] = 0xedb8_8320;
    for (n, row) in op.iter_mut().enumerate().skip(1) {
        *row = 1 << (n - 1);
    }
    let mut op = square(&square(&square(&op)));
    let mut crc = 0xffff_ffffu32;
    let mut n = len;
    while n > 0 {
        if n & 1 != 0 {
            crc = times(&op, crc);
        }
        op = square(&op);
        n >>= 1;
    }
    !crc
}

/// A TCP stream that, under `slow-headers`, writes the headers of each answer to a
/// chat completion one byte at a time, [`SLOW_HEADER_BYTE`] apart. The first bytes of
/// each request read on the connection say which answer is next.
pub(super) struct SlowHeaders<S> {
    inner: S,
    /// The start of the request being read, until it is long enough to judge.
    request: Vec<u8>,
    /// Whether the next request's start is still being read.
    reading_request: bool,
    /// Whether the answer's headers are being written, and slowly.
    in_headers: bool,
    slow: bool,
    /// How many bytes of `\r\n\r\n` the headers written so far end with.
    end: usize,
    sleep: Option<Pin<Box<tokio::time::Sleep>>>,
}

const CHAT_REQUEST_LINE: &[u8] = b"POST /v1/chat/completions ";

impl<S> SlowHeaders<S> {
    pub(super) fn new(inner: S) -> Self {
        SlowHeaders {
            inner,
            request: Vec::new(),
            reading_request: true,
            in_headers: false,
            slow: false,
            end: 0,
            sleep: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for SlowHeaders<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.inner).poll_read(cx, buf))?;
        if self.reading_request {
            let read = &buf.filled()[before..];
            let want = CHAT_REQUEST_LINE.len() - self.request.len();
            let take = read.len().min(want);
            let this = &mut *self;
            this.request.extend_from_slice(&read[..take]);
            if this.request.len() == CHAT_REQUEST_LINE.len() || read.is_empty() {
                this.slow = this.request == CHAT_REQUEST_LINE;
                this.reading_request = false;
                this.in_headers = true;
                this.end = 0;
            }
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for SlowHeaders<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        if !self.in_headers || buf.is_empty() {
            return Pin::new(&mut self.inner).poll_write(cx, buf);
        }
        if let Some(sleep) = self.sleep.as_mut() {
            ready!(sleep.as_mut().poll(cx));
            self.sleep = None;
        }
        let take = if self.slow { 1 } else { buf.len() };
        let n = ready!(Pin::new(&mut self.inner).poll_write(cx, &buf[..take]))?;
        if self.slow {
            ready!(Pin::new(&mut self.inner).poll_flush(cx))?;
        }
        for &b in &buf[..n] {
            self.end = if b == b"\r\n\r\n"[self.end] {
                self.end + 1
            } else {
                usize::from(b == b'\r')
            };
            if self.end == 4 {
                // The headers are out; the next bytes read start the next request.
                self.in_headers = false;
                self.reading_request = true;
                self.request.clear();
                break;
            }
        }
        if self.in_headers && self.slow {
            self.sleep = Some(Box::pin(tokio::time::sleep(SLOW_HEADER_BYTE)));
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A listener whose connections are [`SlowHeaders`].
pub(super) struct SlowListener(pub tokio::net::TcpListener);

impl axum::serve::Listener for SlowListener {
    type Io = SlowHeaders<tokio::net::TcpStream>;
    type Addr = std::net::SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            match self.0.accept().await {
                Ok((stream, addr)) => return (SlowHeaders::new(stream), addr),
                // As axum's own listener does: a failed accept (out of descriptors) is
                // retried after a pause.
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crc32(data: &[u8]) -> u32 {
        let mut crc = 0xffff_ffffu32;
        for &b in data {
            crc ^= u32::from(b);
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0xedb8_8320
                } else {
                    crc >> 1
                };
            }
        }
        !crc
    }

    #[test]
    fn the_crc_of_zeros_is_the_crc_of_zeros() {
        assert_eq!(crc32(b"123456789"), 0xcbf4_3926, "the reference CRC is right");
        for len in [0usize, 1, 2, 7, 258, 1000, 65_537] {
            assert_eq!(crc32_of_zeros(len as u64), crc32(&vec![0; len]), "{len}");
        }
    }

    #[test]
    fn the_bomb_is_small() {
        let bomb = gzip_bomb(GIB);
        assert!(bomb.len() < 7_000_000, "{}", bomb.len());
        assert_eq!(&bomb[bomb.len() - 4..], &(GIB as u32).to_le_bytes());
    }
}
